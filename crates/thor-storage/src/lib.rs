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
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The disk under a server. `Disk`/`DiskFile` (a flat directory of named files with positional I/O)
//! with three implementations: `FileDisk` (real files, `fdatasync`, directory fsync, and
//! `open_locked`: an exclusive `flock` on the directory's `LOCK` file naming its holder, and on
//! the directory itself; `open_read_only`: a shared `flock` on the directory and nothing written,
//! for readers, who share it and exclude writers;
//! `with_direct_reads`: reads through a second `O_DIRECT` descriptor and an aligned bounce buffer,
//! writes buffered, so that a server-cache miss is a device read, with atomic counters), `MemDisk`
//! (a crash model as weak as POSIX allows: per-file live and durable images, a durable namespace,
//! and `crash(seed)` that lands any subset of unsynced writes in any order, each torn at sector
//! granularity) and `FaultDisk` (a fault plan: fail the Nth write or sync, die after N
//! operations, or be full at a capacity: growth fails with `ENOSPC` until space is back, which
//! is how full-disk tests run without a tmpfs); and a wrapper, `OverlayDisk`, which reads a base disk and keeps every change
//! (writes in 4 KiB blocks, creates, renames, removes) in memory, so that an offline tool runs the
//! engine's recovery on a database without writing it (model-tested against a `MemDisk` copy).
//! `PageFile` stores page `id` at `id * page_size` with multi-page writes. `Log` is the
//! transaction log: checksummed records in numbered segments, group commit (one leader writes
//! and fsyncs every buffered record while appenders fill a second buffer; `append_shared` keeps a
//! large record the caller holds in a `Bytes` by reference until its flush writes it, instead of
//! copying it into the buffer), recovery that tells a
//! torn tail (cut, kept in a `.torn` file, reported; an open that fails, on a full disk say,
//! leaves no `.torn` file, and a tail already kept is not kept twice) from corruption (refused) by each record's
//! index in its flush batch, a streaming `LogReader` in bounded memory, truncation of a prefix, and
//! poisoning after a failed write or fsync. `log::inspect` walks a log with the same checks
//! without opening it, for offline checkers: it hands over every intact record with its segment
//! and offset, and *reports* a torn tail or an unfinished header where open would repair them.
//!
//! *Architecture Invariant:* no byte read from a disk is trusted; every malformation is a
//! `StorageError`, never a panic (fuzzed).
//!
//! *Architecture Invariant:* a record is reported durable only after its fsync succeeded; after a
//! failed write or fsync the log refuses everything (the engine must be reopened).
//!
//! *Architecture Invariant:* recovery never cuts silently: a torn tail is kept aside and
//! reported; a bad record followed by a later flush batch is corruption, never a tear.
//!
//! *API Boundary:* `Disk`, `DiskFile`, `FileDisk` (and its `ReadOnlyDisk` view, for offline checkers), `MemDisk`, `FaultDisk`, `OverlayDisk`, `PageFile`, `Log`
//! (`open_streaming` + `reader` to replay; `open` for small logs), `LogOptions`, `OpenReport`,
//! `LogReader`, `LogBackReader` (`Log::backward_reader`: newest first, for a restart that reads
//! back to a checkpoint; each segment indexed by a checked forward pass, each record read and
//! checked again), `LogExtent` (`Log::durable_extent`: the segments and bytes that hold every durable
//! record, for backups), `log::inspect` (`inspect`, `Inspection`, `Finding`, `RecordAt`),
//! `StorageError`.

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
