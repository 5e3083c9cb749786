//! thor-server: the driver of a thor server: threads, files and the log around the sealed core
//! (`thor-server-core`).
//!
//! A server owns objects in pages. Clients fetch whole pages and commit by shipping the new
//! versions of the objects they modified plus the objects they created. The server:
//!
//! - validates each commit against the stored classes (shapes, references), allocates orefs for
//!   created objects in creation order, and writes one log record per commit;
//! - acknowledges a commit only once its record is durable, then keeps its versions in the MOB
//!   (the core's MOB) instead of installing them at commit time;
//! - serves fetches from a page cache (the core's page cache) and the page file, with the MOB's versions
//!   applied;
//! - installs MOB versions in rounds, many per page write, protected against torn writes by a
//!   double-write buffer ([`dwb`]), then checkpoints ([`superblock`]) and truncates the log;
//! - recovers on open by streaming the log after the checkpoint, within the MOB's budget;
//! - bulk-loads large databases straight into pages, placing objects by the one page packer
//!   ([`packer`]) that the offline rewrite (`thor-admin`'s upgrade and compaction) plans by.
//!
//! All of that logic is the core, in its own crate (`thor_server_core`, re-exported here: [`Core`]
//! and its inputs, effects, settings, errors, and the [`record`], [`superblock`] and [`limits`]
//! codecs and bounds): a synchronous state machine that reads no clock, spawns no thread and
//! does no I/O, sealed by its dependencies and its clippy configuration. This crate is the
//! driver: [`io`] holds what drivers share (the [`Clock`] and [`CommitLog`]
//! traits, the page-file side, recovery); [`engine`] is the threaded embedded driver, which
//! `thor-net`'s TCP server and in-process transport also use; `thor-sim` drives the same core
//! deterministically in one thread.

pub mod dwb;
pub mod engine;
pub mod io;
pub mod limits;
pub mod packer;

#[cfg(feature = "mutants")]
pub use thor_server_core::Mutant;
pub use thor_server_core::{
    BulkDone, CacheMode, CcConfig, CcCounters, CheckpointJob, CommitIn, CommitOutcome, ConnId,
    Core, CoreConfig, CoreStats, Credential, CredentialError, Credentials, DemoteCounters,
    DirectOp, DirectResult, DriverCounters, Effect, EngineError, FlushReport, Input, InstallJob,
    Installed, InvalidCommit, Need, PageCacheStats, PageCounters, PageJob, PrefetchCounters,
    ProtocolConfig, ReadError, Refusal, ResumeCounters, Scope, Ticket, Timestamp, TwoPcConfig,
    TwoPcCounters, TwoPcStats, WPL_CONFIG_DEFAULT, WplCounters, empty_page, error_reply,
    refused_code,
};
pub use thor_server_core::{record, superblock};

pub use engine::{
    BulkLoader, BulkReport, CommitRequest, Engine, EngineOptions, EngineStats, Health, LocalPeers,
    PeerSink, ReplySink, Work,
};
pub use io::{Clock, CommitLog, DiskSide, SystemClock};
pub use packer::PagePacker;
