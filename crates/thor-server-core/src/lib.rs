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
//! How a request becomes a commit and a commit becomes log records is one seam, the commit path
//! ([`CommitPath`], whose docs state what any commit path may do to the log): thor's own
//! object shipping ([`ObjectShipping`]) is here and the default; the QuickStore study's page
//! modes (the page-diffing translators and whole-page logging) are thor-study's, installed
//! with [`Core::set_commit_path`] (thor-study's `set_commit_mode`). A path sees the core
//! through the [`Store`]'s public methods (check, allocate, build, push a prepared commit,
//! replay), [`PathLog`] and [`PageReads`].
//!
//! # The seal
//!
//! The core reads no clock, spawns no thread, touches no file or socket and takes no OS
//! randomness. The compiler enforces it two ways:
//!
//! - its dependencies (thor-core, thor-wire, thor-policy) offer none of those, and it does
//!   not depend on thor-storage;
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
//!   [`PrefetchCounters`], [`ResumeCounters`], [`CacheMode`], [`PageCacheStats`];
//! - the commit-path seam: [`CommitPath`], [`ObjectShipping`], [`Store`] (through its public
//!   methods only), [`Checked`], [`PathCommit`], [`Prepared`], [`PrepareAt`], [`Images`],
//!   [`Stop`], [`ReplayedRecord`], [`PathLog`], [`PageReads`], [`PageStep`], [`Requester`],
//!   [`LogBytes`], and the counters a path reports: [`PathCounters`], [`PageCounters`],
//!   [`WplCounters`];
//! - errors: [`EngineError`], [`InvalidCommit`];
//! - four modules that are APIs in themselves: [`record`] (the log record codec, which the
//!   offline checker and the simulation's checker also read), [`superblock`] (the checkpoint
//!   codec), [`limits`] (every bound, with its reason), [`leafmerge`] (a commit's map-leaf
//!   delta applied to the leaf's current bytes, which validation calls when CLOCC refuses a
//!   commit only for leaves that carry deltas).
//!
//! With the test-only `mutants` feature it also exports `Mutant` and `Core::set_mutant`
//! (deliberately broken protocols the simulation must catch).
//!
//! # Invariants
//!
//! [`Core::check_invariants`] asserts the relations that hold between steps; the simulation
//! calls it after every step, and debug builds after every [`Core::step`].
//!
//! # Mechanisms, invariants and API boundary (the detail behind ARCHITECTURE.md)
//!
//! A server as a **sans-I/O core and its drivers**.
//!
//! `core/` is the whole of a server's logic and none of its I/O: one synchronous state machine,
//! `Core::step(now_us, Input, &mut Vec<Effect>)`. Inputs: `Connect`, `Request` (from an identified
//! connection), `ProtocolError`, `Disconnect`, `Direct` (the embedded API's commit, fetch, flush
//! round and bulk load, with a ticket), `Durable{lsn}` (the log is synced up to here), `PageRead`,
//! `Installed`, `Checkpointed`, `BackedUp`, `LogFailed` and `Tick`. Effects: `Reply` (to any
//! connection, zero, one or several per input), `Done` (a ticket's answer), `Append` (a log record,
//! LSNs in effect order), `Read` (a page the core needs), `Install` (an install round),
//! `Checkpoint` (a superblock write plus log truncation) and `Backup` (a client's `Backup`
//! request: the connection is busy, so its replies stay in order, until the driver reports
//! `BackedUp`). `sessions.rs` is the protocol (Hello, version, per-client reply order with at most
//! `IN_FLIGHT_MAX` requests held back, wire error codes, and who may say what: a request newer
//! than the connection's agreed version is `UnknownType` (`thor_wire::version`'s table), one
//! outside the session's scope `Forbidden`, a `Peer` message only from a session of that server's
//! peer credential and a server this one knows); `credentials.rs` is the credential table
//! (read-only, read-write, operator, `peer:ID`, and the single token's all), looked up in
//! constant time over every secret, parsed from `thor server --credentials`' file, replaced by
//! `Input::Credentials`, which closes the sessions of revoked credentials; `store.rs` holds the data (page cache, MOB, allocation, validation against
//! the stored classes, the log record built with one copy of the objects, which the MOB then
//! shares; prepared versions are not indexed per object: validation needs an object's class and
//! size, which never change, so the MOB's or the image's copy does, and checks a version's
//! references only if it changes one, since objects are never deleted); `mob.rs` is the MOB: per page,
//! the newest version of each of its objects in a vector sorted by oid, and per LSN one group
//! (its record's charge, the entries pinned there and their pages, which is the log order install
//! rounds follow), so a commit's versions cost no allocation or hash entry each; `install.rs` builds install rounds (all pending versions of the oldest MOB pages) and
//! their reports. A commit is *prepared* (validated, orefs allocated at the tail page in creation
//! order, record appended) and *published* (into the MOB, `CommitOk` sent) only on `Durable`.
//! Commits are prepared one at a time in arrival order; the head waits for page reads, for MOB
//! room and for log-buffer room. `core/tests.rs` drives the core with a hand-written harness, one
//! scenario per test. The page cache (`pagecache.rs`) is inclusive (LRU) or exclusive
//! (`CacheMode`, `EngineOptions::page_cache_mode`, `thor server --page-cache`): in exclusive mode
//! a page read for a client (from disk or a hit) goes to the evict-next end and a demoted page
//! (`PageCache::demote`: reordered if cached, stored at the evict-last end if its image comes with
//! it) to the evict-last end, the rule `thor-cachesim` applies to an MRU array under DEMOTE;
//! server reads and installed images are references in both. `core/demote.rs` takes demotions
//! from clients (protocol in `thor_wire::message`, `docs/format.md`): a notice reorders a cached
//! page or asks for an uncached one; the bytes that come are cached only if their keyed hash
//! (SipHash, random keys) equals that of the bytes sent to that session and no published commit
//! wrote the page since (a generation per publish, marks per written page, bounded with a floor).
//! Only pages sent without MOB versions are recorded (only they are page images). The simulation
//! runs half its seeds with the exclusive cache, cells spread over pages and clients demoting,
//! some with forged bytes that must never be cached.
//!
//! `core/commit_path.rs` is the seam between requests, the commit queue and the log
//! (`CommitPath`): the page requests (`PageRecords`, `PageCommit`) go to the path, which makes
//! them commits (reading the page images it needs through `PageReads`); the queue's head goes
//! through the path's gate, prepare and append; durability, install rounds, the checkpoint's
//! truncation floor and recovery's replay of the path's own record kinds (at or above
//! `record::FIRST_PATH_KIND`) call its hooks. Object shipping is the core's own path; the
//! QuickStore study's page-diffing translators and whole-page logging (issue 14) are
//! thor-study's (`pagecommit.rs`, `wpl.rs`, `path.rs`, its restart in `wpl_log.rs`), so no
//! mode branch is left here. A commit a path builds with records of its own (WPL's page
//! images before its commit record) is pushed with `Store::push_prepared`, which assigns the
//! LSNs in order; its objects' bytes may lie in any of its records (`Prepared::preceding`).
//!
//! *Architecture Invariant:* a prepared commit's first record is never below the superblock
//! checkpoint while it is prepared and not durable (`Prepared::first_lsn`), and the log is
//! never truncated below a path's truncation floor.
//!
//! `core/prefetch.rs` answers `Prefetch` (issue 16): the asked page as a fetch (a page-cache
//! hit, or the read it waits for), then, in the same step, up to the smaller of what the client
//! asked and `CoreConfig::prefetch_pages_max` (`EngineOptions`, `thor server --prefetch-max`)
//! further pages chosen by hint (the following pages in creation order, or the pages the asked
//! one refers to, most referred to first), passing over pages the session's directory lists and
//! pages that would need a disk read (`Store::compose_if_cached`, which counts no cache miss);
//! each page sent goes through `page_sent`, the one registration a fetched page has (directory,
//! two-phase commit's refetch marks, demotion). `core/tests_prefetch.rs` has one scenario per
//! behaviour.
//!
//! *Architecture Invariant:* a page sent by prefetch is in the session's directory before its
//! reply leaves, and is composed in the same step as the asked page.
//!
//! `cc.rs` is concurrency control, CLOCC (thor-ecoop99 section 4.2): timestamps (server clock,
//! then server id; always increasing), the validation queue with a per-object index of the latest
//! reader and writer and the committing writers, so that rules 1, 2a and 2b cost one lookup per
//! object; the threshold `VQ.t`, raised as the bounded queue drops its oldest committed entries
//! and to the timestamp of a transaction that names more than `CcConfig::reads_tracked_max`
//! objects (whose reads and writes are then not indexed, so the index stays bounded and a commit
//! of 99,000 objects makes no entry per object: while it is committing its writes are one
//! `OrefSet`, `core/orefset.rs`, a 512-bit map per page, which rule 1 checks beside the index);
//! a directory per session (pages sent, coarsened into page groups past a bound) and an invalid
//! set per session (exact per-sending acknowledgement counts). The core validates a commit when
//! it reaches the head of the commit queue (read-only ones at once), enters it as committing when
//! it is prepared, and marks it committed (adding invalidations to other sessions' sets) when its
//! record is durable; at the end of every step it puts pending invalidations on each session's
//! replies. Commit records carry timestamp and read set, so recovery restores the queue. A
//! committer's created objects put their pages in its directory (it keeps them cached without
//! fetching them). A rule-1 refusal (the transaction read what a committing transaction writes)
//! is held until the log is durable up to the newest prepared commit, so that it carries the
//! writer's invalidations and the client's next attempt reads the new version instead of failing
//! again on its stale copy.
//!
//! *Architecture Invariant:* a commit is validated and appended in one step, in commit-queue
//! order, so validation never races with another prepare; acknowledged commits are serializable in
//! timestamp order.
//!
//! `resume.rs` lets a client resume its session on a new connection (issue 38, wire version 5):
//! a bounded history of the changes made visible (`HISTORY_CHANGES_MAX`, `HISTORY_OREFS_MAX`),
//! each with the LSN of the record that published it (a commit's, or a two-phase part's decision
//! record), a mark (a digest of the record's timestamp and CRC-32C) and the objects it wrote,
//! rebuilt by recovery from the replayed records. Every reply of a version-5 connection is
//! stamped with the newest change at the end of its step and whether every invalidation up to it
//! was sent. `Resume` keeps a client's cache only if both its stamps are points of this history
//! (then its pages enter the session's directory and the objects changed on them since go into
//! its invalid set), closes an older connection of the same session key (its unvalidated commits
//! dropped), and answers what became of a commit by its id (kept in the kind-2 record), after the
//! log is durable up to what was prepared before. The module documentation has the argument why
//! this is sound (restarts, a database restored from a backup); `core/tests_resume.rs` has one
//! scenario per behaviour.
//!
//! *Architecture Invariant:* at the end of every step, the history holds every published change
//! (within its bounds), in LSN order, and no change with an LSN below its last is unpublished; a
//! client's cache is kept only when the history holds every change after the client's stamps.
//!
//! `twopc.rs` is two-phase commit (thor-ecoop99 section 4.2, the optimized form): the client
//! chooses the timestamp (a `thor_wire::Stamp`, its tie-breaker with bit 31 set so it never equals
//! a server id) and sends `Prepare` to every participant. A read-only participant validates at
//! exactly that timestamp (`Cc::validate_at`: no retry at a later one, since every participant
//! must use the same), enters it as committed, answers `Prepared` and votes; it takes no part in
//! phase two and writes no record. A writing part goes through the commit queue like a commit and
//! is appended as a *prepare* record (`record.rs` kind 3, the participant list after the
//! objects); when durable its created objects enter the MOB at once (their slots are allocated for
//! good: unreachable until the commit, garbage if it aborts) and its versions are *held*
//! (`store::Held`, counted against the MOB's budget) while it is in doubt. The coordinator (a
//! writing participant the client names) counts its own durable prepare and every other vote (a
//! `Query` is a repeated yes), appends the commit *decision* (kind 4, listing the writing
//! participants to tell), and on its durability publishes its part, answers `CommitOk` and sends
//! `Decide`, resending until each participant acknowledges (after its own decision record is
//! durable), then appends an *end* record (kind 5). A no vote, its own refusal, or
//! `TwoPcConfig::vote_timeout_us` aborts; abort is presumed, and a coordinator asked about a
//! transaction it has no record of answers abort and keeps a bounded *tombstone*, so a late
//! prepare is refused. A server takes part only in transactions whose servers it knows
//! (`TwoPcConfig::peers`, `thor server --peer`): a `Prepare` of a writing transaction naming any
//! other is refused at once (`UnknownServer`), before anything is logged, held or sent, so no client
//! can leave a part in doubt that could never be decided. Messages between servers are
//! `Effect::Peer` and `Input::Peer` (or `Peer` requests over a session of a peer credential,
//! whose sender id must be the credential's; either way only from a known server); every one is
//! idempotent, and `Tick` drives queries, resends and
//! timeouts. Recovery replays prepare records as in doubt (committing in the validation queue),
//! decisions as publish or drop, ends as forget; a coordinator's own undecided prepare aborts, a
//! decision without an end is resent. The checkpoint never passes the prepare of a part in doubt or
//! of a transaction still being told (`TwoPc::log_floor`), nor a record not yet durable (a decision
//! or end included). After a restart the threshold is raised to the clock plus
//! `limits::VALIDATION_LEAD_MAX_US` (1 ms): the read-only validations before the crash left no
//! record, and a client timestamp below one of them could otherwise validate a write that one of
//! them should have seen; none of them was more than that lead ahead of the clock (a prepare
//! further ahead waits for the clock). A database just created skips this. A coordinator asked
//! about a transaction below the threshold of which it has no record answers abort at once
//! (its prepare could never validate there); a no vote that comes before the client's prepare
//! is remembered, and the prepare is refused at once.
//! `core/tests_twopc.rs` has one scenario per behaviour over two or three cores whose messages the
//! test routes or drops, with restarts of either role.
//!
//! *Architecture Invariant:* a participant acknowledges a commit decision only once its own
//! decision record is durable, and a coordinator tells commit only once its decision record is
//! durable; so no restart of either side can turn a decided transaction back into an undecided
//! one, and presumed abort is never wrong.
//!
//!
//! *Architecture Invariant:* acknowledged means durable; no fetch sees a commit before its record
//! is durable (publish happens only on `Durable`).
//!
//! *Architecture Invariant:* the core reads no clock, spawns no thread and does no I/O; every
//! input carries `now` from the driver's `Clock`. Drivers never perform I/O while the core is
//! locked. Every queue in the core has a bound (`limits.rs`, `CoreConfig`): held-back requests per
//! client, sessions, MOB bytes, unsynced log bytes, one install round in flight.
//!
//! *Architecture Invariant:* the same core runs in three places: `Engine` (embedded and under
//! `thor-net`'s TCP server), and `thor-sim`'s deterministic cluster, where crashes at random steps
//! and `MemDisk`'s crash model check it over thousands of seeds. `tests/crash.rs` kills a
//! `FaultDisk` at random operations under the threaded engine; `docs/format.md` has the
//! case-by-case crash analysis of commit and install.
//!
//! `engine.rs`'s `PeerSink` is where an engine's messages to other servers go
//! (`EngineOptions::peers`; `Engine::peer_message` delivers one in): `LocalPeers` delivers straight
//! into the engines of one process (tests, in-process clusters), `thor_net::TcpPeers` over TCP.
//!
//! *Architecture Invariant:* a record the core builds from a commit it acknowledges decodes
//! with the record decoder recovery uses (one definition of an object's name, `Oref::object`; a
//! two-phase part's record is sized with its section, so the log never refuses it). If a record
//! recovery cannot read is ever found, opening fails with `EngineError::UnreadableRecord`
//! (LSN, segment, offset, what is wrong, and `thor check --repair`), never with a panic or a
//! silent cut.

mod core;
mod error;
pub mod leafmerge;
pub mod limits;
mod mob;
mod mutants;
mod pagecache;
pub mod record;
mod siphash;
pub mod superblock;

pub use crate::core::cc::{CcConfig, CcCounters, Refusal, Timestamp};
pub use crate::core::commit_path::{
    CommitPath, LogBytes, ObjectShipping, PageCounters, PageReads, PageStep, PathCounters, PathLog,
    PrepareAt, Requester, WplCounters,
};
pub use crate::core::credentials::{Credential, CredentialError, Credentials, Need, Scope};
pub use crate::core::demote::DemoteCounters;
pub use crate::core::install::{CheckpointJob, FlushReport, InstallJob, Installed, PageJob};
pub use crate::core::prefetch::PrefetchCounters;
pub use crate::core::resume::ResumeCounters;
pub use crate::core::store::{
    Checked, CommitIn, CommitOutcome, Images, PathCommit, Prepared, ReplayedRecord, Stop, Store,
    empty_page,
};
pub use crate::core::twopc::{TwoPcConfig, TwoPcCounters, TwoPcStats};
pub use crate::core::{
    BulkDone, ConnId, Core, CoreConfig, CoreStats, DirectOp, DirectResult, DriverCounters, Effect,
    Input, ProtocolConfig, ReadError, Ticket, error_reply, refused_code,
};
pub use crate::error::{EngineError, InvalidCommit};
#[cfg(feature = "mutants")]
pub use crate::mutants::Mutant;
pub use crate::pagecache::{CacheMode, PageCacheStats};
