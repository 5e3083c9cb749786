//! thor-server-core: a thor server's whole logic as one synchronous state machine, sealed.
//!
//! A server owns objects in pages. Clients fetch whole pages and commit by shipping the new
//! versions of the objects they modified plus the objects they created. The core:
//!
//! - validates each commit against the stored classes (shapes, references), allocates orefs for
//!   created objects in creation order, and builds one log record per commit ([`record`]);
//! - acknowledges a commit only once the driver reports its record durable, then keeps its
//!   versions in the MOB instead of installing them at commit time;
//! - serves fetches from its page cache, with the MOB's versions applied;
//! - installs MOB versions in rounds ([`InstallJob`]), many per page write, then checkpoints
//!   ([`CheckpointJob`], [`superblock`]) and lets the driver truncate the log;
//! - rebuilds its state from the log's records on open ([`Core::replay`]).
//!
//! How a commit becomes log records is one seam inside it, the commit path (`CommitPath` in
//! `core/commit_path.rs`, whose docs state what any commit path may do to the log): object
//! shipping by default, whole-page logging in the study's `wpl` mode
//! ([`Core::set_commit_mode`]; thor-study holds its restart over a real log).
//!
//! # The seal
//!
//! The core reads no clock, spawns no thread, touches no file or socket and takes no OS
//! randomness. The compiler enforces it two ways:
//!
//! - its dependencies (thor-core, thor-wire, thor-policy and the pure thor-recovery) offer
//!   none of those, and it does not depend on thor-storage;
//! - `clippy.toml` in this crate's directory lists `disallowed-methods` and
//!   `disallowed-types` (`Instant::now`, `SystemTime::now`, `thread::spawn`, `std::fs`,
//!   `std::net`, `RandomState`, `HashMap` with the default hasher, ...), and CI runs clippy with
//!   `-D warnings`.
//!
//! What it needs from the world comes in as inputs: time as `now` on every [`Core::step`], the
//! one secret it keys a hash with as [`CoreConfig::hash_key`], and every I/O outcome as an
//! [`Input`]. It asks for I/O with [`Effect`]s, and [`Core::next_deadline_us`] tells a driver
//! when to step it next if nothing else happens (quinn-proto's `poll_timeout`). The drivers
//! are thor-server's `Engine` (threads, files, sockets through thor-net) and thor-sim's
//! deterministic cluster.
//!
//! # API
//!
//! Modules are private; this file exports exactly:
//!
//! - the state machine: [`Core`], [`CoreConfig`], [`ProtocolConfig`], [`Input`], [`Effect`],
//!   [`DirectOp`], [`DirectResult`], [`BulkDone`], [`ReadError`], [`DriverCounters`],
//!   [`ConnId`], [`Ticket`], [`CoreStats`], and the mapping of errors to replies
//!   ([`error_reply`], [`refused_code`]);
//! - what effects carry and inputs report: [`InstallJob`], [`PageJob`], [`Installed`],
//!   [`CheckpointJob`], [`FlushReport`], [`CommitIn`], [`CommitOutcome`], [`empty_page`];
//! - the settings and counters of its concerns: [`CcConfig`], [`CcCounters`], [`Refusal`],
//!   [`Timestamp`], [`TwoPcConfig`], [`TwoPcStats`], [`TwoPcCounters`], [`Credentials`],
//!   [`Credential`], [`CredentialError`], [`Scope`], [`Need`], [`DemoteCounters`],
//!   [`PrefetchCounters`], [`ResumeCounters`], [`PageCounters`], [`WplCounters`],
//!   [`WPL_CONFIG_DEFAULT`], [`CacheMode`], [`PageCacheStats`];
//! - errors: [`EngineError`], [`InvalidCommit`];
//! - three modules that are APIs in themselves: [`record`] (the log record codec, which the
//!   offline checker and the simulation's checker also read), [`superblock`] (the checkpoint
//!   codec), [`limits`] (every bound, with its reason).
//!
//! With the test-only `mutants` feature it also exports `Mutant` and `Core::set_mutant`
//! (deliberately broken protocols the simulation must catch).
//!
//! # Invariants
//!
//! [`Core::check_invariants`] asserts the relations that hold between steps; the simulation
//! calls it after every step, and debug builds after every [`Core::step`].

mod core;
mod error;
pub mod limits;
mod mob;
mod mutants;
mod pagecache;
pub mod record;
mod siphash;
pub mod superblock;

pub use crate::core::cc::{CcConfig, CcCounters, Refusal, Timestamp};
pub use crate::core::credentials::{Credential, CredentialError, Credentials, Need, Scope};
pub use crate::core::demote::DemoteCounters;
pub use crate::core::install::{CheckpointJob, FlushReport, InstallJob, Installed, PageJob};
pub use crate::core::pagecommit::PageCounters;
pub use crate::core::prefetch::PrefetchCounters;
pub use crate::core::resume::ResumeCounters;
pub use crate::core::store::{CommitIn, CommitOutcome, empty_page};
pub use crate::core::twopc::{TwoPcConfig, TwoPcCounters, TwoPcStats};
pub use crate::core::wpl::{WPL_CONFIG_DEFAULT, WplCounters};
pub use crate::core::{
    BulkDone, ConnId, Core, CoreConfig, CoreStats, DirectOp, DirectResult, DriverCounters, Effect,
    Input, ProtocolConfig, ReadError, Ticket, error_reply, refused_code,
};
pub use crate::error::{EngineError, InvalidCommit};
#[cfg(feature = "mutants")]
pub use crate::mutants::Mutant;
pub use crate::pagecache::{CacheMode, PageCacheStats};
