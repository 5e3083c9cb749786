//! thor-server: the storage engine of a thor server.
//!
//! A server owns objects in pages. Clients fetch whole pages and commit by shipping the new
//! versions of the objects they modified plus the objects they created. The engine:
//!
//! - validates each commit against the stored classes (shapes, references), allocates orefs for
//!   created objects in creation order, and writes one log record, sharing fsyncs between
//!   concurrent commits (group commit, in `thor-storage`);
//! - keeps committed versions in the MOB ([`mob`]) instead of installing them at commit time;
//! - serves fetches from a page cache ([`pagecache`]) and the page file, with the MOB's versions
//!   applied;
//! - installs MOB versions in the background (the flusher), many per page write, protected
//!   against torn writes by a double-write buffer ([`dwb`]), then truncates the log;
//! - recovers on open by replaying the log after the checkpoint recorded in the superblock
//!   ([`superblock`]);
//! - bulk-loads large databases straight into pages.
//!
//! [`server`] wraps the engine in the protocol: sessions, authentication, and the mapping of
//! requests (`thor-wire`) to engine calls and of engine errors to wire codes. It is
//! synchronous and does no I/O; `thor-net` puts it behind sockets.
//!
//! The engine is synchronous and takes its disk as an `Arc<dyn Disk>`, so tests run it over
//! an in-memory, fault-injecting disk and crash it at chosen points.

pub mod core;
pub mod dwb;
pub mod engine;
pub mod error;
pub mod io;
pub mod limits;
pub mod mob;
pub mod pagecache;
pub mod record;
pub mod superblock;

pub use crate::core::install::FlushReport;
pub use crate::core::store::{CommitIn, CommitOutcome};
pub use crate::core::{
    ConnId, Core, CoreConfig, CoreStats, DirectOp, DirectResult, Effect, Input, ProtocolConfig,
};
pub use engine::{
    BulkLoader, BulkReport, CommitRequest, Engine, EngineOptions, EngineStats, ReplySink, Work,
};
pub use error::{EngineError, InvalidCommit};
pub use io::{Clock, CommitLog, DiskSide, SystemClock};
