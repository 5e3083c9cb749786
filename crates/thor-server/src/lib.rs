//! thor-server: a thor server, as a sans-I/O core and the drivers around it.
//!
//! A server owns objects in pages. Clients fetch whole pages and commit by shipping the new
//! versions of the objects they modified plus the objects they created. The server:
//!
//! - validates each commit against the stored classes (shapes, references), allocates orefs for
//!   created objects in creation order, and writes one log record per commit;
//! - acknowledges a commit only once its record is durable, then keeps its versions in the MOB
//!   ([`mob`]) instead of installing them at commit time;
//! - serves fetches from a page cache ([`pagecache`]) and the page file, with the MOB's versions
//!   applied;
//! - installs MOB versions in rounds, many per page write, protected against torn writes by a
//!   double-write buffer ([`dwb`]), then checkpoints ([`superblock`]) and truncates the log;
//! - recovers on open by streaming the log after the checkpoint, within the MOB's budget;
//! - bulk-loads large databases straight into pages, placing objects by the one page packer
//!   ([`packer`]) that the offline rewrite (`thor-admin`'s upgrade and compaction) plans by.
//!
//! All of that logic is [`core`]: a synchronous state machine that reads no clock, spawns no
//! thread and does no I/O. [`io`] holds what drivers share (the [`Clock`] and [`CommitLog`]
//! traits, the page-file side, recovery); [`engine`] is the threaded embedded driver, which
//! `thor-net`'s TCP server and in-process transport also use; `thor-sim` drives the same core
//! deterministically in one thread.

pub mod core;
pub mod dwb;
pub mod engine;
pub mod error;
pub mod io;
pub mod limits;
pub mod mob;
pub mod packer;
pub mod pagecache;
pub mod record;
pub mod superblock;
pub mod wpl_log;

pub use crate::core::credentials::{Credential, CredentialError, Credentials, Scope};
pub use crate::core::install::FlushReport;
pub use crate::core::store::{CommitIn, CommitOutcome};
pub use crate::core::twopc::{TwoPcConfig, TwoPcStats};
pub use crate::core::{
    ConnId, Core, CoreConfig, CoreStats, DirectOp, DirectResult, Effect, Input, ProtocolConfig,
};
pub use engine::{
    BulkLoader, BulkReport, CommitRequest, Engine, EngineOptions, EngineStats, Health, LocalPeers,
    PeerSink, ReplySink, Work,
};
pub use error::{EngineError, InvalidCommit};
pub use io::{Clock, CommitLog, DiskSide, SystemClock};
pub use packer::PagePacker;
