//! thor-storage: the disk under a thor server.
//!
//! - [`disk`]: the [`Disk`] / [`DiskFile`] traits (a flat directory of named files with
//!   positional I/O) and their durability contract.
//! - [`FileDisk`]: real files (`pread`/`pwrite`, `fdatasync`, directory fsync), and an
//!   exclusive lock on a database directory ([`FileDisk::open_locked`]); optionally reads
//!   with `O_DIRECT`, around the OS page cache ([`FileDisk::with_direct_reads`]).
//! - [`MemDisk`] and [`FaultDisk`]: memory with an exact crash model (live and durable images,
//!   durable namespace, seeded [`MemDisk::crash`]) and a fault plan; see [`mem_disk`].
//! - [`OverlayDisk`]: a disk whose changes stay in memory over a disk that is only read, so
//!   that an offline tool can run recovery on a database without changing it.
//! - [`PageFile`]: fixed-size pages at `id * page_size`, with multi-page writes.
//! - [`Log`]: the transaction log: checksummed records in numbered segments, group commit,
//!   recovery that tells a torn tail (cut, kept aside, reported) from corruption (refused),
//!   a streaming [`LogReader`] with bounded memory, poisoning on failure; see [`log`] for the
//!   byte layout and the rules.
//! - [`limits`]: every bound, with its reason.
//!
//! *Architecture invariant:* no byte read from a disk is trusted. Every length and checksum is
//! checked before use, and a malformation is a [`StorageError`], never a panic.
//!
//! *API boundary:* the server engine uses [`Disk`] (as `Arc<dyn Disk>`), [`PageFile`] and
//! [`Log`]; tests use [`MemDisk`]/[`FaultDisk`]'s crash and fault controls. Nothing here knows
//! the page or record payload formats: those belong to thor-core and thor-server.

pub mod disk;
pub mod error;
#[cfg(unix)]
pub mod file_disk;
pub mod limits;
pub mod log;
pub mod mem_disk;
pub mod overlay;
pub mod page_file;
pub mod rng;

pub use disk::{Disk, DiskFile};
pub use error::StorageError;
#[cfg(unix)]
pub use file_disk::{DirectReadStats, FileDisk, ReadOnlyDisk};
pub use log::{
    LOG_FORMAT_VERSION, Log, LogBackReader, LogExtent, LogOptions, LogReader, LogStats, OpenReport,
    Recovered, TornTail,
};
pub use mem_disk::{DiskCounters, FaultDisk, FaultPlan, MemDisk};
pub use overlay::OverlayDisk;
pub use page_file::{PageFile, PageFileStats};
pub use rng::SplitMix64;
