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
//!
//! # Mechanisms (the detail behind ARCHITECTURE.md)
//!
//! `io.rs` is what drivers share: the `Clock` trait (`SystemClock`), the `CommitLog` trait (the
//! `thor_storage::Log` implements it; a replicated log can stand in later), `DiskSide` (page
//! reads, install rounds behind the double-write buffer `dwb.rs`, superblock writes
//! `superblock.rs`, and backups), `create` and `recover`. A backup (`DiskSide::backup_into`,
//! `backup_to_dir`) copies the superblock, the page file and the log's durable extent
//! (`Log::durable_extent`) while install rounds and checkpoints wait on a lock they otherwise
//! share (`DiskSide::hold_installs`, which the engine holds from a round's first write until the
//! core has stepped its outcome, so a backup also sees a failed round as a failed server and
//! refuses), so it is what a crash would leave with everything synced, and recovery opens it with
//! exactly the commits up to the extent's LSN (`tests/backup.rs` checks a backup taken under
//! commit load holds a committed prefix); a directory backup is made under `.NAME.partial` and
//! renamed. Recovery streams the log from the checkpoint
//! (`Log::open_streaming` + `Log::reader`) and replays it into a core, running install rounds
//! whenever the MOB passes its budget, so an open after a crash holds the MOB's budget plus one
//! read chunk and one record, however long the log (`tests/open_memory.rs` measures it).
//!
//! `engine.rs` is the embedded driver, `Engine`: the core behind a mutex, stepped by whichever
//! thread has input. `Reply` effects go to the connection's `ReplySink`; `Read`s and the log's
//! sync after an append are returned to the caller as `Work` and performed after unlocking, then
//! reported (`PageRead`, `Durable`; each `Read` timed into `ServerStats::page_read_ns`, and the
//! network drivers' fetch service times added with `note_fetch_served`, passed to the core with
//! the traffic counters as `DriverCounters`). The log's own group commit shares fsyncs: the committer leads
//! its own fsync and everyone who appended meanwhile shares it, so no commit waits for a hand-off
//! to another thread. An installer thread runs install rounds and checkpoints and ticks the
//! core at `Core::next_deadline_us` (between 1 ms and 100 ms), woken early by a step that sets an
//! earlier deadline (a commit held back by fair retries, a two-phase timer). A page-cache hit of the embedded `fetch` is a query (`Core::fetch_cached`), not a step.
//! Without the installer thread (`background_flusher: false`, for deterministic tests) the caller
//! performs every effect before returning, and a caller that waits for an answer ticks the core
//! at `Core::answer_deadline_us` (`Engine::caller_tick_wait`, `Engine::tick_if_due`). `close` (or drop) installs everything, rotates the log
//! and deletes its old segments; `halt` stops as a crash would. After a storage failure (a failed
//! log or page-file write or fsync) the engine logs it once at ERROR, reports `Health::Failed`
//! (`Engine::health`, without the core's lock) and the `health` counters, refuses commits and new
//! sessions (the core answers `Connect` with `ServerFailed`), serves reads of committed data, and
//! writes nothing more, closing included; the way back is a new open. `Engine::open_read_only`
//! runs recovery, then refuses writing commits, flush rounds and bulk loads (`EngineError::
//! ReadOnly`) and never starts an install round. The engine records `thor_commit_seconds` and
//! `thor_fetch_seconds` into the `metrics` facade (no-ops without a recorder) and adds its own
//! counters (uptime, version, file sizes, health) to `ServerStats`. `BulkLoader` writes large databases
//! straight into pages; its packing is predictable from the objects' sizes (`first_page`), and a
//! loader that patches nothing writes its pages out as it goes (`write_out`).
//! `bin/thor-commit-loop.rs` is the fixture of the process-kill test.
//!
//! `group.rs` is `GroupEngine`, the threaded driver of one replica of a server's replica group
//! (`thor_replica::Member`), beside `Engine` rather than inside it (its module docs say why):
//! the Raft journal is the log, flushed outside the lock (thor log group commit) and reported
//! to the member, whose held messages leave only then; ticks on a thread; install rounds,
//! checkpoints and image fetches on a disk thread; a deposed member reopened from its disk in
//! place. `replica_net.rs` is the seam to the network (`ReplicaNet`; `LocalReplicas` delivers
//! between engines of one process). `member_io.rs` is the one copy of a member's disk effects,
//! which thor-replica's deterministic harness also uses.

pub mod dwb;
pub mod engine;
pub mod group;
pub mod io;
pub mod limits;
pub mod member_io;
pub mod packer;
pub mod replica_net;
pub mod served;

#[cfg(feature = "mutants")]
pub use thor_server_core::Mutant;
pub use thor_server_core::{
    BulkDone, CacheMode, CcConfig, CcCounters, CheckpointJob, CommitIn, CommitOutcome, ConnId,
    Core, CoreConfig, CoreStats, Credential, CredentialError, Credentials, DemoteCounters,
    DirectOp, DirectResult, DriverCounters, Effect, EngineError, FlushReport, Input, InstallJob,
    Installed, InvalidCommit, Need, PageCacheStats, PageCounters, PageJob, PrefetchCounters,
    ProtocolConfig, ReadError, Refusal, ResumeCounters, Scope, Ticket, Timestamp, TwoPcConfig,
    TwoPcCounters, TwoPcStats, WplCounters, empty_page, error_reply, refused_code,
};
pub use thor_server_core::{record, superblock};
pub use thor_study::{StudyOptions, WPL_CONFIG_DEFAULT};

pub use engine::{
    BulkLoader, BulkReport, CommitRequest, Engine, EngineOptions, EngineStats, Health, LocalPeers,
    PeerSink, ReplySink, Work,
};
pub use group::{GroupEngine, GroupError, GroupOptions, GroupStats, LocalReplicas};
pub use io::{Clock, CommitLog, DiskSide, SystemClock};
pub use packer::PagePacker;
pub use replica_net::{ImageFetchError, ReplicaNet};
pub use served::{Pending, Served};
pub use thor_replica::Durability;
