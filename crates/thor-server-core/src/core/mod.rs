//! The server core: one synchronous state machine that takes inputs and emits effects.
//!
//! The core is the whole of a server's logic (sessions, commit, fetch, the MOB, installation,
//! checkpoints) and none of its I/O. It reads no clock, spawns no thread and touches no disk or
//! socket: a driver feeds it [`Input`]s with [`Core::step`] and performs the [`Effect`]s it
//! returns. Two drivers exist: the threaded embedded server ([`crate::Engine`], which the TCP
//! server in `thor-net` also drives) and the deterministic whole-cluster simulation
//! (`thor-sim`), which runs the same core in one thread with a seeded scheduler.
//!
//! ```text
//!                  ┌──────────────────────── Core::step(now, input, &mut effects) ───────┐
//!  Connect ───────►│ sessions: Hello, scopes, versions, limits, per-client order         │
//!  Request ───────►│ fetch ── cache hit: reply ── miss: Read ─────────────────────────────┼──► Reply / Done
//!  ProtocolError ─►│ commit queue (FIFO): validate ── Need pages: Read ── no room: wait   │──► Read
//!  Disconnect ────►│        └─ prepare: allocate, build the record ─► Append ─────────────┼──► Append
//!  Direct ────────►│ Durable ─► publish into the MOB ─► CommitOk                          │
//!  Durable ───────►│ installs: oldest MOB pages ─► Install ─► Installed ─► Checkpoint     │──► Install
//!  PageRead ──────►│                                                                      │──► Checkpoint
//!  Installed ─────►│                                                                      │
//!  Checkpointed ──►│                                                                      │
//!  LogFailed ─────►│                                                                      │
//!  Tick ──────────►└──────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! # Commit: prepare, then publish
//!
//! A commit is *prepared* when it passes validation, gets its orefs and its record, and is
//! appended ([`Effect::Append`], LSNs in effect order: the driver must append in that order).
//! It is *published* when the driver reports the log durable up to its LSN
//! ([`Input::Durable`]): its versions enter the MOB (fetches see them from then on) and its
//! client gets `CommitOk`. So *acknowledged means durable*, and no fetch sees a commit before
//! its record is durable.
//!
//! Commits are prepared one at a time in arrival order (the *commit queue*). The head waits,
//! and with it every later commit, while it needs page images that are not cached (the core
//! asks for them with [`Effect::Read`]), while the MOB has no room for it (an install round
//! frees room), or while the log holds more unsynced bytes than the driver's log buffer takes
//! ([`CoreConfig::log_buffer_bytes`]; a durable report frees them), so that a driver's log
//! append never waits for the disk.
//!
//! How a request becomes a commit and a commit becomes log records is the *commit path*'s
//! (`commit_path::CommitPath`, installed with [`Core::set_commit_path`]): object shipping
//! (one commit record; the default, here) or one of the QuickStore study's page modes
//! (thor-study: page-diffing translators, whole-page logging with its own records, table,
//! checkpoints and truncation floor). The path's hooks are the only places the mode shows:
//! page requests, `pump`, `durable`, `needs_room`, `installed` and the checkpoint call them
//! and never branch on the mode. The seam's docs state what any path may do to the log.
//!
//! # Per-client order
//!
//! A client's replies leave in the order of its requests (the protocol promises it). A request
//! that cannot be answered at once (a commit, a fetch that reads the disk) holds back the
//! client's later requests, which queue in its session (at most
//! [`thor_wire::limits::IN_FLIGHT_MAX`]); other clients are not held back.
//!
//! # Time
//!
//! Every input comes with `now`, microseconds from the driver's [`crate::io::Clock`]: loosely
//! synchronised wall-clock time. The core uses it for idle installation, and (with concurrency
//! control) for transaction timestamps. [`Input::Tick`] lets time pass without other input.

pub(crate) mod cc;
pub(crate) mod commit_path;
pub(crate) mod credentials;
pub(crate) mod demote;
pub(crate) mod fair;
pub(crate) mod install;
mod invariants;
mod leaves;
mod orefset;
pub(crate) mod prefetch;
pub(crate) mod resume;
mod sessions;
pub(crate) mod store;
pub(crate) mod twopc;

use std::collections::VecDeque;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::{ClientId, FormatError, Lsn, PageId, ServerId};
use thor_wire::limits::{FRAME_BYTES_MAX, FRAME_BYTES_SETTING_MIN, TOKEN_BYTES_MAX};
use thor_wire::{
    Commit, ErrorCode, RefusedCode, Reply, ReplyBody, Request, ServerStats, WireError,
};

use crate::error::{EngineError, InvalidCommit};
use crate::limits;
use crate::superblock::Superblock;
use install::{CheckpointJob, FlushReport, InstallJob, Installed, PageJob};
use sessions::Sessions;
use store::{CommitIn, CommitOutcome, Images, Stop, Store, Tail};

/// A connection, as the driver names it. Chosen by the driver, unique among open connections.
pub type ConnId = u64;

/// A direct operation's handle, chosen by the driver (the embedded API).
pub type Ticket = u64;

/// Settings of a core. The page size and server id come from the superblock.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Memory budget of the MOB; commits wait for installation beyond it.
    pub mob_bytes: usize,
    /// Memory budget of the page cache.
    pub page_cache_bytes: usize,
    /// Pages installed per round.
    pub flush_batch_pages: usize,
    /// Installation starts when the MOB exceeds this percentage of its budget.
    pub flush_start_percent: usize,
    /// Installation also starts when the MOB is not empty, no commit is in flight and none
    /// arrived for this long, so that the log stays short and recovery fast.
    pub idle_flush_after_us: u64,
    /// Most log bytes appended and not yet durable: the driver's log buffer. The core holds
    /// commits back beyond it so that an append never waits for the disk.
    pub log_buffer_bytes: usize,
    /// The largest log record the driver's log accepts.
    pub record_bytes_max: usize,
    /// Sessions: credentials, connection limit, frame limit.
    pub protocol: ProtocolConfig,
    /// Bounds of concurrency control.
    pub cc: cc::CcConfig,
    /// Timeouts and bounds of two-phase commit.
    pub twopc: twopc::TwoPcConfig,
    /// Where pages clients read and demote go in the page cache (inclusive LRU, or DEMOTE's
    /// exclusive placement; see [`crate::pagecache`]).
    pub page_cache_mode: crate::pagecache::CacheMode,
    /// Most further pages one `Prefetch` reply carries, whatever the client asks
    /// ([`prefetch`]); 0 answers every `Prefetch` with its page alone.
    pub prefetch_pages_max: usize,
    /// The key of the core's one keyed hash (demotion's hashes of pages sent, see
    /// `crate::siphash`). The core takes no OS randomness: a driver that serves untrusted
    /// clients draws this from the OS when it opens (thor-server's `Engine` does), a
    /// simulation derives it from its seed. The default is a fixed, public key.
    pub hash_key: [u64; 2],
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            mob_bytes: limits::MOB_BYTES_DEFAULT,
            page_cache_bytes: limits::PAGE_CACHE_BYTES_DEFAULT,
            flush_batch_pages: limits::FLUSH_BATCH_PAGES_DEFAULT,
            flush_start_percent: limits::FLUSH_START_PERCENT,
            idle_flush_after_us: limits::IDLE_FLUSH_AFTER_US,
            log_buffer_bytes: limits::LOG_BUFFER_BYTES_DEFAULT,
            record_bytes_max: limits::LOG_RECORD_BYTES_MAX_DEFAULT,
            cc: cc::CcConfig::default(),
            twopc: twopc::TwoPcConfig::default(),
            protocol: ProtocolConfig::default(),
            page_cache_mode: crate::pagecache::CacheMode::Inclusive,
            prefetch_pages_max: thor_wire::limits::PREFETCH_PAGES_MAX,
            hash_key: [0x7468_6f72_2d63_6f72, 0x652d_6b65_792d_3331],
        }
    }
}

/// What the server asks of and promises to its clients.
#[derive(Debug, Clone)]
pub struct ProtocolConfig {
    /// The single secret every client must present in `Hello` (`--token-file`,
    /// `THOR_TOKEN`): a credential of scope [`credentials::Scope::All`], whose holders may do
    /// everything, speak as any server this one knows included. Empty, with no
    /// `credentials` either, means no authentication: any client that speaks the protocol is
    /// admitted with every scope.
    pub token: Vec<u8>,
    /// Scoped credentials (`--credentials FILE`), several so that one can be revoked:
    /// [`credentials`]. Give either these or `token`, not both.
    pub credentials: credentials::Credentials,
    /// Most sessions open at once; more connections are refused with `Error(Busy)`.
    pub sessions_max: usize,
    /// The largest frame a connection accepts once its session is open, announced in
    /// `HelloOk` and enforced by the driver (before `Hello` the driver enforces
    /// [`limits::PRE_HELLO_FRAME_BYTES_MAX`]).
    pub max_frame_bytes: usize,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        ProtocolConfig {
            token: Vec::new(),
            credentials: credentials::Credentials::new(),
            sessions_max: limits::SESSIONS_MAX_DEFAULT,
            max_frame_bytes: FRAME_BYTES_MAX,
        }
    }
}

impl ProtocolConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.token.len() > TOKEN_BYTES_MAX {
            return Err(EngineError::BadOptions(format!(
                "the token is {} bytes, the protocol allows {TOKEN_BYTES_MAX}",
                self.token.len()
            )));
        }
        if !self.token.is_empty() && !self.credentials.is_empty() {
            return Err(EngineError::BadOptions(
                "give either a token or credentials, not both".into(),
            ));
        }
        if self.sessions_max == 0 {
            return Err(EngineError::BadOptions("sessions_max must be at least 1".into()));
        }
        if !(FRAME_BYTES_SETTING_MIN..=FRAME_BYTES_MAX).contains(&self.max_frame_bytes) {
            return Err(EngineError::BadOptions(format!(
                "max_frame_bytes must be between {FRAME_BYTES_SETTING_MIN} and {FRAME_BYTES_MAX}"
            )));
        }
        Ok(())
    }
}

/// An operation of the embedded API, answered by [`Effect::Done`] with the same ticket.
#[derive(Debug)]
pub enum DirectOp {
    /// Commit these versions and created objects (no session, no concurrency control).
    Commit(CommitIn),
    /// The current bytes of a page.
    Fetch(PageId),
    /// Run one install round now (after the one in flight, if any).
    FlushRound,
    /// Start a bulk load: install everything, then hand the allocator to the loader. Answered
    /// with the first page the loader may write.
    BulkBegin,
    /// A bulk load wrote and synced these pages: make them part of the database.
    BulkFinish(BulkDone),
    /// A bulk load gave up; nothing it wrote is part of the database.
    BulkAbort,
}

/// What a bulk load wrote.
#[derive(Debug, Clone)]
pub struct BulkDone {
    /// The first page written.
    pub first: PageId,
    /// The slot count of every page written, in order.
    pub slots: Vec<u16>,
    /// The last page's free bytes.
    pub last_free: usize,
}

/// The answer to a [`DirectOp`].
#[derive(Debug)]
pub enum DirectResult {
    /// To [`DirectOp::Commit`], once durable.
    Committed(Result<CommitOutcome, EngineError>),
    /// To [`DirectOp::Fetch`].
    Page(Result<Bytes, EngineError>),
    /// To [`DirectOp::FlushRound`], once the round's checkpoint is durable.
    Flushed(Result<FlushReport, EngineError>),
    /// To [`DirectOp::BulkBegin`]: the first page the loader writes.
    BulkBegun(Result<PageId, EngineError>),
    /// To [`DirectOp::BulkFinish`], once the new superblock is durable; and to
    /// [`DirectOp::BulkAbort`].
    BulkEnded(Result<(), EngineError>),
}

/// Why a page could not be read.
#[derive(Debug, Clone)]
pub enum ReadError {
    /// The bytes are damaged.
    Corrupt(FormatError),
    /// The disk failed.
    Storage(String),
}

/// Counters a driver keeps of its log and connections, reported with inputs so that the core
/// can answer `Stats` with them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DriverCounters {
    /// Record bytes written to the log.
    pub log_bytes: u64,
    /// Log fsyncs.
    pub log_fsyncs: u64,
    /// Log records made durable.
    pub log_records: u64,
    /// Frame bytes received.
    pub bytes_received: u64,
    /// Frame bytes sent.
    pub bytes_sent: u64,
    /// Nanoseconds network drivers spent serving fetches (`ServerStats::fetch_service_ns`).
    pub fetch_service_ns: u64,
    /// Fetches they timed.
    pub fetches_served: u64,
    /// Nanoseconds reading pages from disk for `Effect::Read`.
    pub page_read_ns: u64,
    /// What the driver knows of itself, passed through to `ServerStats` as it gives them:
    /// health (`thor_wire::stats::HEALTH_*`), uptime, version, the files' sizes, the MOB's
    /// budget.
    pub health: u64,
    /// See `ServerStats::uptime_s`.
    pub uptime_s: u64,
    /// See `ServerStats::server_version`.
    pub server_version: u64,
    /// See `ServerStats::database_bytes`.
    pub database_bytes: u64,
    /// See `ServerStats::log_disk_bytes`.
    pub log_disk_bytes: u64,
}

/// Something that happened, for the core to act on.
#[derive(Debug)]
pub enum Input {
    /// A client connected. The core answers `Error(Busy)` and closes if the session limit
    /// is reached.
    Connect {
        /// The driver's name for the connection.
        conn: ConnId,
    },
    /// A decoded request from a connection.
    Request {
        /// Which connection.
        conn: ConnId,
        /// The request id of its frame (echoed in the reply).
        id: u64,
        /// The request.
        req: Request,
    },
    /// Bytes from a connection did not decode: the core answers with the error's code and
    /// closes the session.
    ProtocolError {
        /// Which connection.
        conn: ConnId,
        /// The frame's request id if it was known (0 otherwise).
        id: u64,
        /// What was wrong.
        error: WireError,
    },
    /// A connection closed (by either side). Its session ends; replies still owed to it are
    /// dropped; its commit, if prepared, still completes.
    Disconnect {
        /// Which connection.
        conn: ConnId,
    },
    /// An operation of the embedded API.
    Direct {
        /// Echoed in [`Effect::Done`].
        ticket: Ticket,
        /// What to do.
        op: DirectOp,
    },
    /// Every log record up to `lsn` is durable.
    Durable {
        /// The durable point.
        lsn: Lsn,
    },
    /// A read asked for by [`Effect::Read`] completed.
    PageRead {
        /// Which page.
        page: PageId,
        /// Its installed image (checked), or why not.
        result: Result<Bytes, ReadError>,
    },
    /// An install round's pages are durable in place (or it failed).
    Installed {
        /// The round.
        job: u64,
        /// The new images, or why the round failed.
        result: Result<Installed, String>,
    },
    /// A checkpoint's superblock is durable and the log truncated (or it failed).
    Checkpointed {
        /// The checkpoint.
        job: u64,
        /// Whether it succeeded.
        result: Result<(), String>,
    },
    /// The log failed (a write or fsync): nothing more can be made durable until the server
    /// is reopened.
    LogFailed {
        /// Why.
        why: String,
    },
    /// A backup the core asked for ([`Effect::Backup`]) is complete and durable (or failed).
    BackedUp {
        /// The connection that asked.
        conn: ConnId,
        /// Its request id.
        id: u64,
        /// What the copy holds, or why it failed.
        result: Result<thor_wire::BackupInfo, String>,
    },
    /// A message from another server (two-phase commit), delivered by a driver that talks to
    /// peers directly. Peers may also send them as `Peer` requests over a session.
    Peer {
        /// The message.
        msg: thor_wire::PeerMsg,
    },
    /// Time passed.
    Tick,
    /// The server's credentials change (`thor server` re-read its credentials file on
    /// SIGHUP): the new table replaces the old one, and every open session whose credential is
    /// gone or has a new secret is told `Error(Unauthenticated)` (request id 0) and closed
    /// ([`credentials`]). A table with the single token is given as
    /// [`credentials::Credentials::single_token`].
    Credentials(credentials::Credentials),
}

impl Input {
    /// Whether the core reads the time of this input: commits (the time of the last commit
    /// decides idle installation) and ticks. For other inputs a driver may pass the last time
    /// it read instead of reading its clock again (the core keeps the largest time it has
    /// seen, so a stale value changes nothing); a page-cache hit then costs no clock read.
    pub fn reads_time(&self) -> bool {
        match self {
            Input::Request { req, .. } => matches!(
                req.body,
                thor_wire::RequestBody::Commit(_) | thor_wire::RequestBody::Prepare(_)
            ),
            Input::Direct { op, .. } => matches!(op, DirectOp::Commit(_)),
            Input::Tick => true,
            _ => false,
        }
    }
}

/// Something the driver must do.
#[derive(Debug)]
pub enum Effect {
    /// Send a reply to a connection (and close it afterwards if `close`).
    Reply {
        /// Which connection.
        conn: ConnId,
        /// The request id it answers (0 for errors that answer no request).
        id: u64,
        /// The reply.
        reply: Reply,
        /// Close the connection after sending.
        close: bool,
    },
    /// Answer a direct operation.
    Done {
        /// The operation's ticket.
        ticket: Ticket,
        /// The answer.
        result: DirectResult,
    },
    /// Append a record to the log, in effect order; report its durability with
    /// [`Input::Durable`].
    Append {
        /// The LSN the log will give it (the driver may check).
        lsn: Lsn,
        /// The record's payload.
        record: Bytes,
    },
    /// Read the installed image of a page from the page file and report it with
    /// [`Input::PageRead`].
    Read {
        /// Which page.
        page: PageId,
    },
    /// Perform an install round and report it with [`Input::Installed`].
    Install(InstallJob),
    /// Write a superblock (and truncate the log) and report it with [`Input::Checkpointed`].
    Checkpoint(CheckpointJob),
    /// Send a message to another server (two-phase commit). Delivery may fail: the protocol
    /// resends what matters on [`Input::Tick`].
    Peer {
        /// The server.
        to: ServerId,
        /// The message.
        msg: thor_wire::PeerMsg,
    },
    /// Copy the database into the new directory `path` (superblock, page file, the log's
    /// durable records) with no install round or checkpoint running meanwhile, and report it
    /// with [`Input::BackedUp`]. The connection is busy until then, so its replies stay in
    /// request order.
    Backup {
        /// The connection that asked.
        conn: ConnId,
        /// Its request id.
        id: u64,
        /// Where, on the server's machine.
        path: String,
    },
}

/// Who is waiting for an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A request of a connection.
    Conn { conn: ConnId, id: u64 },
    /// A direct operation.
    Direct(Ticket),
}

impl Origin {
    /// The connection, for a request.
    fn conn(self) -> Option<ConnId> {
        match self {
            Origin::Conn { conn, .. } => Some(conn),
            Origin::Direct(_) => None,
        }
    }
}

/// A fetch waiting for its page's read: who gets the answer, and what a `Prefetch` asked for
/// beyond the page.
type Fetcher = (Origin, Option<prefetch::Ahead>);

/// A commit waiting in the queue.
#[derive(Debug)]
struct Queued {
    /// Who gets the answer.
    origin: Origin,
    /// The commit.
    commit: CommitIn,
    /// Page images read for its validation.
    images: Images,
    /// Pages whose reads it waits for.
    waiting_for: Vec<PageId>,
    /// Whether it was counted as waiting for MOB space, and for the log buffer.
    counted_waits: (bool, bool),
    /// A part of a two-phase commit (a `Prepare`), or `None` for a commit.
    twopc: Option<Box<twopc::TxnInfo>>,
    /// The map leaves validation merged (`leaves`): their versions in `commit` are the merged
    /// bytes, which the committer's cache does not hold.
    merged: Vec<thor_core::Oref>,
}

/// Where a bulk load is.
/// What a phase of [`Core::pump`] did with the head of the commit queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// Passed: on to the next phase.
    Go,
    /// Answered (refused, parked or prepared): on to the next commit.
    Next,
    /// Must wait (for room, pages or the log): the pump stops.
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    /// None.
    Idle,
    /// Installing everything before the loader may start; the ticket to answer.
    Draining(Ticket),
    /// The loader owns the allocator.
    Active,
    /// The loader finished; its superblock is being written; the ticket to answer.
    Finishing(Ticket),
}

/// An install round in flight.
#[derive(Debug)]
struct Round {
    /// Its job id.
    job: u64,
    /// The pages and the versions it installs (the job without its bytes).
    pages: Vec<(PageId, Vec<(thor_core::Oid, Lsn)>)>,
    /// Its report, filled in when installed.
    report: FlushReport,
    /// Direct `FlushRound`s answered when it is checkpointed.
    waiters: Vec<Ticket>,
    /// Whether the pages are installed and the checkpoint is being written.
    installed: bool,
}

/// Monotonic counters of the core.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    commits: u64,
    read_only_commits: u64,
    versions_committed: u64,
    objects_created: u64,
    commits_refused: u64,
    fetches: u64,
    fetch_versions_applied: u64,
    fetch_reads: u64,
    installation_reads: u64,
    validation_reads: u64,
    flush_rounds: u64,
    pages_written: u64,
    versions_installed: u64,
    mob_waits: u64,
    log_waits: u64,
    leaf_merges: u64,
    leaf_merges_refused: u64,
}

/// Counters of everything the core does, as of one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CoreStats {
    /// Commits acknowledged.
    pub commits: u64,
    /// Of those, read-only ones (acknowledged without a log record).
    pub read_only_commits: u64,
    /// Object versions committed (excluding created objects).
    pub versions_committed: u64,
    /// Objects created.
    pub objects_created: u64,
    /// Commits refused as invalid.
    pub commits_refused: u64,
    /// Record bytes written to the log (as the driver reports).
    pub log_bytes: u64,
    /// Log fsyncs (as the driver reports).
    pub log_fsyncs: u64,
    /// Mean commits sharing one log fsync (group commit).
    pub commits_per_fsync: f64,
    /// Bytes charged to the MOB now.
    pub mob_bytes: usize,
    /// Versions in the MOB now.
    pub mob_entries: usize,
    /// Fetches served.
    pub fetches: u64,
    /// MOB versions applied to fetched pages.
    pub fetch_versions_applied: u64,
    /// Page cache hits.
    pub cache_hits: u64,
    /// Page cache misses.
    pub cache_misses: u64,
    /// Pages read from disk for fetches.
    pub fetch_reads: u64,
    /// Pages read from disk by install rounds before installing into them.
    pub installation_reads: u64,
    /// Pages read from disk to validate commits.
    pub validation_reads: u64,
    /// Install rounds.
    pub flush_rounds: u64,
    /// Pages written by install rounds.
    pub pages_written: u64,
    /// Versions installed by install rounds.
    pub versions_installed: u64,
    /// Versions installed per page written: write absorption.
    pub write_absorption: f64,
    /// Commits that waited for MOB space.
    pub mob_waits: u64,
    /// Commits that waited for the log buffer to drain.
    pub log_waits: u64,
    /// The current checkpoint (log records below it are installed).
    pub checkpoint: u64,
    /// Pages allocated (the tail page id).
    pub pages_allocated: u32,
    /// Commits waiting in the queue now.
    pub commits_queued: usize,
    /// Whole-page logging: page images and checkpoint records appended, copies the table
    /// dropped when their page went home, commits refused by the page rule, copies restored
    /// into the MOB at recovery (all zero in other modes).
    pub wpl: commit_path::WplCounters,
    /// Copies in the WPL table now.
    pub wpl_table: usize,
    /// Prefetch: requests, pages sent beyond the asked ones, candidates passed over.
    pub prefetch: prefetch::PrefetchCounters,
    /// Requests refused as outside their session's credential's scope (`Forbidden`).
    pub requests_forbidden: u64,
    /// Sessions closed because their credential was revoked (`Input::Credentials`).
    pub sessions_revoked: u64,
    /// Map leaves merged: commits that CLOCC refused only because other keys of a map leaf
    /// changed since their client read it, committed with their leaf deltas applied to the
    /// leaves' newest versions (`leafmerge`; counted per leaf).
    pub leaf_merges: u64,
    /// Commits with leaf deltas refused although a merge was tried: a key they read changed,
    /// the result did not fit the leaf, something else was stale, or a leaf was not in memory.
    pub leaf_merges_refused: u64,
}

/// The server core. See the module documentation.
#[derive(Debug)]
pub struct Core {
    /// Settings.
    cfg: CoreConfig,
    /// The object state.
    store: Store,
    /// Connections and their sessions.
    sessions: Sessions,
    /// Commits not yet prepared, in arrival order.
    queue: VecDeque<Queued>,
    /// Outstanding page reads: the install generation when each was issued, and the fetches
    /// waiting for it (with what each `Prefetch` asked for beyond the page).
    reads: FxHashMap<PageId, (u64, Vec<Fetcher>)>,
    /// Incremented by every completed install round; a read issued before one may be stale.
    install_gen: u64,
    /// The install round in flight.
    round: Option<Round>,
    /// `FlushRound`s waiting for the next round to start.
    flush_waiters: Vec<Ticket>,
    /// The next job id (install rounds and checkpoints).
    next_job: u64,
    /// The bulk load state.
    bulk: Bulk,
    /// Why the core stopped accepting writes, after a storage failure.
    failed: Option<String>,
    /// Connections refused because of `failed` (new sessions are not admitted to a failed
    /// server: it could never commit for them).
    refused_failed: u64,
    /// Opened read-only ([`Core::set_read_only`]): writing commits are refused, nothing is
    /// installed.
    read_only: bool,
    /// When the last commit arrived (`now` of its input).
    last_commit_us: u64,
    /// The `now` of the input being handled.
    now_us: u64,
    /// Counters.
    counters: Counters,
    /// Prefetch's counters.
    prefetch: prefetch::PrefetchCounters,
    /// The driver's log and traffic counters.
    driver: DriverCounters,
    /// Connections whose held-back requests may proceed now (drained at the end of a step).
    to_drain: Vec<ConnId>,
    /// Who waits for each prepared commit, by LSN.
    prepared_origin: FxHashMap<Lsn, Origin>,
    /// Rule-1 refusals held until the log is durable up to the LSN given, which covers the
    /// committing writer that caused them: answered then, they carry its invalidations, so the
    /// client's next attempt reads the new version instead of failing again on its stale copy.
    /// At most one per connection (a connection's later requests wait for its commit's answer).
    held_refusals: Vec<(Lsn, Origin, cc::Refusal)>,
    /// Whether the log is still being replayed: rounds start only when recovery asks.
    recovering: bool,
    /// Concurrency control: timestamps, validation queue, directories, invalid sets.
    cc: cc::Cc,
    /// Demotions from clients to an exclusive page cache.
    demotions: demote::Demotions,
    /// The timestamp and the committing connection of each prepared commit, by LSN.
    prepared_cc: FxHashMap<Lsn, (cc::Timestamp, Option<ConnId>)>,
    /// The map leaves each prepared commit had merged (`leaves`), by LSN: its committer is
    /// sent their invalidation with its answer.
    prepared_merged: FxHashMap<Lsn, Vec<thor_core::Oref>>,
    /// Two-phase commit: parts in doubt, transactions coordinated here.
    twopc: twopc::TwoPc,
    /// Commits held back for repeated losers' claims (`fair`).
    held: fair::Held,
    /// How requests become commits and commits reach the log (`commit_path`): object
    /// shipping, or a page mode of thor-study's.
    path: Box<dyn commit_path::CommitPath>,
    /// Resuming sessions on new connections: the history of changes, session keys, seen
    /// stamps (`resume`).
    resume: resume::Resumes,
    /// The deliberately broken protocol this core runs (tests only, `crate::mutants`).
    #[cfg(feature = "mutants")]
    mutant: Option<crate::mutants::Mutant>,
}

impl Core {
    /// A core over a database whose superblock is `sb`. Feed it the log from the checkpoint
    /// with [`Core::replay`], then call [`Core::finish_recovery`].
    pub fn new(cfg: CoreConfig, sb: Superblock) -> Result<Core, EngineError> {
        cfg.protocol.validate()?;
        if cfg.mob_bytes == 0 || cfg.log_buffer_bytes == 0 {
            return Err(EngineError::BadOptions("budgets must be positive".into()));
        }
        let store = Store::new(sb, cfg.page_cache_bytes, cfg.page_cache_mode);
        let cc = cc::Cc::new(cfg.cc, store.superblock().server_id.0);
        Ok(Core {
            cc,
            twopc: twopc::TwoPc::new(cfg.twopc.clone()),
            held: fair::Held::default(),
            demotions: demote::Demotions::new(cfg.hash_key),
            #[cfg(feature = "mutants")]
            mutant: None,
            prepared_cc: FxHashMap::default(),
            prepared_merged: FxHashMap::default(),
            path: Box::new(commit_path::ObjectShipping),
            resume: resume::Resumes::new(),
            sessions: Sessions::new(cfg.protocol.clone()),
            cfg,
            store,
            queue: VecDeque::new(),
            reads: FxHashMap::default(),
            install_gen: 0,
            round: None,
            flush_waiters: Vec::new(),
            next_job: 1,
            bulk: Bulk::Idle,
            failed: None,
            refused_failed: 0,
            read_only: false,
            last_commit_us: 0,
            now_us: 0,
            counters: Counters::default(),
            prefetch: prefetch::PrefetchCounters::default(),
            driver: DriverCounters::default(),
            to_drain: Vec::new(),
            prepared_origin: FxHashMap::default(),
            held_refusals: Vec::new(),
            recovering: true,
        })
    }

    /// Replays one durable log record (recovery, before any other input).
    pub fn replay(&mut self, lsn: Lsn, record: Bytes) -> Result<(), EngineError> {
        let crc = thor_core::checksum::crc32c(&record);
        let replayed = match self.path.replay(&mut self.store, lsn, &record) {
            Some(r) => r?.0,
            None => self.store.replay(lsn, record)?,
        };
        match replayed {
            store::Replay::Commit(r) => {
                if r.ts != cc::Timestamp::default() {
                    self.cc.restore(r.ts, &r.reads, &r.writes);
                }
                let commit = r.id.map(|id| (id, r.created));
                self.note_change(lsn, (r.ts.time_us, r.ts.server, crc), r.writes, commit);
            }
            store::Replay::Nothing => {}
            other => self.twopc_replay(lsn, other),
        }
        Ok(())
    }

    /// Whether the MOB is over its budget (during recovery the driver then runs an install
    /// round, see [`Core::start_round`], before replaying more).
    pub fn mob_over_budget(&self) -> bool {
        self.store.mob.bytes() > self.cfg.mob_bytes
    }

    /// The page new objects went to as of the superblock's checkpoint (`None`: the first):
    /// it and the pages below it are on disk; pages above it may have no home image yet.
    pub fn alloc_page_at_checkpoint(&self) -> Option<PageId> {
        self.store.superblock().alloc_page
    }

    /// The tail page and whether it is fresh (recovery reads its image unless it is).
    pub fn tail_page(&self) -> (PageId, bool) {
        let p = self.store.tail_page();
        (p, self.store.is_fresh(p))
    }

    /// Ends recovery: the log continues at `log_next`, and `image` is the installed image of
    /// the tail page (`None` if fresh).
    pub fn finish_recovery(
        &mut self,
        log_next: Lsn,
        image: Option<Bytes>,
    ) -> Result<(), EngineError> {
        self.path.replayed_all(&mut self.store);
        self.store.replayed_all(log_next);
        self.store.set_tail_from(image)?;
        let floor = self.cc.last_ts();
        self.cc.recovered(floor);
        self.twopc.raise_after_recovery = true;
        self.recovering = false;
        Ok(())
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.store.page_size
    }

    /// This server's id.
    pub fn server_id(&self) -> ServerId {
        self.store.superblock().server_id
    }

    /// The persistent root object.
    pub fn root(&self) -> thor_core::Oref {
        self.store.superblock().root
    }

    /// The settings.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// The LSN the next record gets.
    pub fn next_lsn(&self) -> Lsn {
        self.store.next_lsn()
    }

    /// Checks a request of `conn` that the driver serves itself instead of stepping it in (a
    /// replica group's requests, which thor-net's server hands to its replica handler), as
    /// every request is checked (`sessions::Sessions::screen`): open and idle session, agreed
    /// version, credential scope. Returns whether the driver may serve it; otherwise the
    /// refusal (to send to the connection) is in `fx`.
    pub fn screen(
        &mut self,
        conn: ConnId,
        id: u64,
        req: &thor_wire::Request,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let me = self.server_id();
        self.sessions.screen(conn, id, req, me, fx)
    }

    /// Whether a storage failure stopped the core.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Connections refused so far because the core had failed.
    pub fn refused_failed(&self) -> u64 {
        self.refused_failed
    }

    /// Serves the database read-only from now on (`thor::open_read_only`): fetches and
    /// read-only transactions go on, every writing commit, flush round and bulk load is
    /// refused with [`EngineError::ReadOnly`], and no install round starts, so the core never
    /// asks its driver to write.
    pub fn set_read_only(&mut self) {
        self.read_only = true;
    }

    /// Whether the core serves read-only ([`Core::set_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether there is nothing left to install and nothing in flight (a clean shutdown can
    /// stop now: the log holds nothing the pages lack).
    pub fn is_quiescent(&self) -> bool {
        self.store.mob.is_empty()
            && self.store.pending().is_empty()
            && self.round.is_none()
            && self.queue.is_empty()
    }

    /// Makes this core one replica of a replica group: it never stamps replies *settled*
    /// (see `TwoPc::replicated`), so clients send it their read-only transactions. The group
    /// member (`thor_replica::Member`) calls it when it opens.
    pub fn serve_as_replica(&mut self) {
        self.twopc.replicated = true;
    }

    /// The checkpoint of the last superblock the core handed out: the log below it is no
    /// longer needed.
    pub fn checkpoint(&self) -> Lsn {
        self.store.superblock().checkpoint
    }

    /// The client a connection's session belongs to, once `Hello` succeeded.
    pub fn client_of(&self, conn: ConnId) -> Option<ClientId> {
        self.sessions.client_of(conn)
    }

    /// The name a connection's client gave in `Hello`.
    pub fn client_name(&self, conn: ConnId) -> Option<&str> {
        self.sessions.name_of(conn)
    }

    /// Whether an install round is in flight.
    pub fn round_in_flight(&self) -> bool {
        self.round.is_some()
    }

    /// Whether this core runs mutant `m` (always `false` without the `mutants` feature).
    #[cfg(feature = "mutants")]
    fn mutated(&self, m: crate::mutants::Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// Whether this core runs mutant `m` (always `false` without the `mutants` feature).
    #[cfg(not(feature = "mutants"))]
    fn mutated(&self, _: crate::mutants::Mutant) -> bool {
        false
    }

    #[cfg(feature = "mutants")]
    pub(crate) fn set_mutant_inner(&mut self, m: crate::mutants::Mutant) {
        self.mutant = Some(m);
        self.cc.mutant = Some(m);
    }

    /// When the driver must step the core next (with [`Input::Tick`] if nothing else
    /// arrives), in the driver's microseconds: the earliest of the idle install (a MOB left
    /// unchanged for [`CoreConfig::idle_flush_after_us`]) and two-phase commit's timers
    /// (queries, vote timeouts, resends) and the end of a held commit's wait (`fair`). `None`:
    /// nothing waits on time, and only an input
    /// can make the core act. A deadline at or before the last `now` means "step now".
    /// (quinn-proto's `poll_timeout`: the driver sleeps to it, and need not poll.)
    pub fn next_deadline_us(&self) -> Option<u64> {
        let idle = (self.round.is_none()
            && self.failed.is_none()
            && !self.recovering
            && !self.read_only
            && !self.store.mob.is_empty()
            && self.store.pending().is_empty())
        .then(|| self.last_commit_us.saturating_add(self.cfg.idle_flush_after_us));
        [idle, self.twopc_deadline_us(), self.fair_deadline_us()].into_iter().flatten().min()
    }

    /// The earliest of [`Core::next_deadline_us`]'s deadlines at which a request may be
    /// answered (or a message sent) by a tick: two-phase commit's timers and the end of a held
    /// commit's wait, without the idle install, which answers nobody. A driver without a
    /// thread of its own that ticks (an engine without its installer) has its waiting callers
    /// tick here: without a tick a commit held back for a claim whose holder runs on the same
    /// thread would wait for ever.
    pub fn answer_deadline_us(&self) -> Option<u64> {
        [self.twopc_deadline_us(), self.fair_deadline_us()].into_iter().flatten().min()
    }

    /// Updates the driver's counters (log and traffic) that `Stats` reports.
    pub fn set_driver_counters(&mut self, c: DriverCounters) {
        self.driver = c;
    }

    /// Handles one input at time `now_us`, appending what the driver must do to `fx`.
    pub fn step(&mut self, now_us: u64, input: Input, fx: &mut Vec<Effect>) {
        let first = fx.len();
        self.step_inner(now_us, input, fx);
        self.attach_invalidations(&mut fx[first..]);
        self.stamp_replies(&mut fx[first..]);
        #[cfg(debug_assertions)]
        self.check_invariants();
    }

    /// Puts each connection's pending invalidations on its first reply of this step (every
    /// reply carries them, paper section 4.2), at most [`thor_wire::limits::INVALIDATIONS_MAX`]
    /// per reply; the rest go on later replies. The demoted pages the server wants ride the
    /// same way.
    fn attach_invalidations(&mut self, fx: &mut [Effect]) {
        for e in fx {
            let Effect::Reply { conn, reply, .. } = e else { continue };
            if self.cc.has_unsent(*conn) {
                let room = thor_wire::limits::INVALIDATIONS_MAX - reply.invalidations.len();
                let more = self.cc.take_invalidations(*conn, room);
                reply.invalidations.extend(more);
            }
            if reply.wanted.is_empty() && self.demotions.has_wanted(*conn) {
                reply.wanted = self.demotions.take_wanted(*conn);
            }
        }
    }

    fn step_inner(&mut self, now_us: u64, input: Input, fx: &mut Vec<Effect>) {
        self.now_us = self.now_us.max(now_us);
        let (server, checkpoint) = (self.store.superblock().server_id.0, self.checkpoint());
        self.resume.history.set_base(self.now_us, server, checkpoint, self.store.next_lsn());
        if self.twopc.raise_after_recovery {
            // Read-only validations before the crash left no record; refuse every client
            // timestamp that could lie below one of them (see `Core::recovered_at`).
            let now = self.now_us;
            self.recovered_at(now);
        }
        match input {
            Input::Connect { conn } => match &self.failed {
                // A failed server can never commit for a new session, and a client that
                // reconnected in a loop against it would never learn why: refuse it at once,
                // saying so, and close (as for `Busy`).
                Some(why) => {
                    self.refused_failed += 1;
                    let reply = Reply::error(
                        ErrorCode::ServerFailed,
                        &format!(
                            "the server's storage failed ({why}); it takes no new sessions \
                             until it is restarted"
                        ),
                    );
                    fx.push(Effect::Reply { conn, id: 0, reply, close: true });
                }
                None => self.sessions.connect(conn, fx),
            },
            Input::Request { conn, id, req } => self.request(conn, id, req, fx),
            Input::ProtocolError { conn, id, error } => {
                self.sessions.protocol_error(conn, id, &error, fx)
            }
            Input::Disconnect { conn } => {
                // Commits of the session not yet validated go with it: validating them needs
                // its invalid set, which leaves with the session (without it a transaction
                // that read a copy invalidated meanwhile would pass). Its client treats them
                // as of unknown outcome. Prepared ones complete.
                self.drop_unvalidated(conn, fx);
                self.sessions.disconnect(conn);
                self.cc.disconnect(conn);
                self.demotions.disconnect(conn);
                self.path.disconnect(conn);
                self.resume.disconnect(conn);
            }
            Input::Direct { ticket, op } => self.direct(ticket, op, fx),
            Input::Durable { lsn } => self.durable(lsn, fx),
            Input::PageRead { page, result } => self.page_read(page, result, fx),
            Input::Installed { job, result } => self.installed(job, result, fx),
            Input::Checkpointed { job, result } => self.checkpointed(job, result, fx),
            Input::LogFailed { why } => self.fail(why, fx),
            Input::BackedUp { conn, id, result } => {
                let reply = match result {
                    Ok(info) => Reply::new(ReplyBody::BackupDone(info)),
                    Err(why) => Reply::error(ErrorCode::ServerFailed, &format!("backup: {why}")),
                };
                self.reply(conn, id, reply, false, fx);
            }
            Input::Peer { msg } => {
                // From a driver that talks to peers directly (in-process clusters): trusted as
                // the sender it names, but only a server this one knows takes part here.
                if self.knows_server(msg.from()) {
                    self.peer_message(msg, fx)
                }
            }
            Input::Tick => self.twopc_tick(fx),
            Input::Credentials(c) => {
                self.sessions.set_credentials(c.clone(), fx);
                self.cfg.protocol.credentials = c;
                self.cfg.protocol.token.clear();
            }
        }
        self.run_unparked(fx);
        self.fair_release();
        self.pump(fx);
        // Validating may end a claim (its holder refused again, or committing): the commits
        // it held go back to the queue now, not at a later step (their deadline is later).
        while self.fair_release() {
            self.pump(fx);
        }
        self.maybe_start_round(fx);
        self.drain(fx);
    }

    /// Answers `origin` with a commit's outcome.
    fn answer_commit(
        &mut self,
        origin: Origin,
        r: Result<CommitOutcome, EngineError>,
        fx: &mut Vec<Effect>,
    ) {
        match origin {
            Origin::Direct(ticket) => {
                fx.push(Effect::Done { ticket, result: DirectResult::Committed(r) })
            }
            Origin::Conn { conn, id } => {
                let (reply, close) = match r {
                    Ok(out) => (
                        Reply::new(ReplyBody::CommitOk { lsn: out.lsn, created: out.created }),
                        false,
                    ),
                    Err(EngineError::Conflict(refusal)) => {
                        let (mut reply, close) = error_reply(&EngineError::Conflict(refusal));
                        if let ReplyBody::CommitRefused { message, .. } = &mut reply.body
                            && let Some(name) = refusal.object().and_then(|o| self.class_name_of(o))
                        {
                            message.push_str(&format!(" (an object of class {name})"));
                        }
                        (reply, close)
                    }
                    Err(e) => error_reply(&e),
                };
                self.reply(conn, id, reply, close, fx);
            }
        }
    }

    /// The name of object `o`'s class if the server knows it without reading the disk (its
    /// version in the MOB, or its page in the page cache, and a class descriptor it has
    /// loaded): for messages, which a refusal should not delay with I/O.
    fn class_name_of(&mut self, o: thor_core::Oref) -> Option<String> {
        let word = match self.store.mob.get(o) {
            Some(e) => thor_core::le::u32_at(&e.data, 0),
            None => {
                let page = self.store.cache.peek(o.page()?)?.clone();
                let view = thor_core::PageView::parse(&page).ok()?;
                thor_core::le::u32_at(view.object(o.oid())?, 0)
            }
        };
        let class = thor_core::Oref::from_raw(word)?;
        self.store.class_desc_cached(class).map(|d| d.name().to_string())
    }

    /// Answers `origin` with a fetch's outcome.
    fn answer_fetch(
        &mut self,
        origin: Origin,
        page: PageId,
        ahead: Option<prefetch::Ahead>,
        r: Result<Bytes, EngineError>,
        fx: &mut Vec<Effect>,
    ) {
        match origin {
            Origin::Direct(ticket) => {
                fx.push(Effect::Done { ticket, result: DirectResult::Page(r) })
            }
            Origin::Conn { conn, id } => {
                let (reply, close) = match r {
                    Ok(bytes) => {
                        self.page_sent(conn, page, &bytes);
                        match ahead {
                            None => (Reply::new(ReplyBody::Page { page, bytes }), false),
                            Some(ahead) => {
                                // The further pages are composed and registered in this same
                                // step, after the asked one (see `prefetch`).
                                let more = self.prefetch_pages(conn, page, &bytes, ahead);
                                let mut pages = Vec::with_capacity(1 + more.len());
                                pages.push((page, bytes));
                                pages.extend(more);
                                (Reply::new(ReplyBody::Pages(pages)), false)
                            }
                        }
                    }
                    Err(e) => error_reply(&e),
                };
                self.reply(conn, id, reply, close, fx);
            }
        }
    }

    /// Sends a deferred reply to `conn` and lets its held-back requests proceed.
    fn reply(&mut self, conn: ConnId, id: u64, reply: Reply, close: bool, fx: &mut Vec<Effect>) {
        if self.sessions.deferred_answered(conn, close) {
            fx.push(Effect::Reply { conn, id, reply, close });
            self.to_drain.push(conn);
        }
    }

    /// Handles the held-back requests of connections whose deferred reply went out.
    fn drain(&mut self, fx: &mut Vec<Effect>) {
        while let Some(conn) = self.to_drain.pop() {
            while let Some((id, req)) = self.sessions.next_held(conn) {
                self.handle(conn, id, req, fx);
                // Stop at the first request that is deferred in turn.
                if self.sessions.is_busy(conn) {
                    break;
                }
            }
            // Requests dropped past the in-flight bound are answered after every one before
            // them (`sessions`, *Order*).
            self.sessions.answer_dropped(conn, fx);
        }
        // Handling a held-back request can start reads or prepare commits.
        self.pump(fx);
        self.maybe_start_round(fx);
    }

    fn request(&mut self, conn: ConnId, id: u64, req: Request, fx: &mut Vec<Effect>) {
        if self.sessions.hold_back(conn, id, &req, fx) {
            return;
        }
        self.handle(conn, id, req, fx);
    }

    /// Handles a request whose turn has come.
    fn handle(&mut self, conn: ConnId, id: u64, mut req: Request, fx: &mut Vec<Effect>) {
        use sessions::Action;
        // A request the connection's agreed version does not have is an unknown type to it,
        // whatever it carries: nothing of it is taken in.
        if self.sessions.outdated(conn, id, &req, fx) {
            return;
        }
        // Acks and discarded pages first: a commit in the same request is validated against
        // the invalid set they leave. (They count even if the request itself turns out to be
        // outside the session's scope: they only report what the client did.)
        if self.sessions.client_of(conn).is_some() {
            let pb = std::mem::take(&mut req.piggyback);
            self.sessions.count_piggyback(&pb);
            self.cc.piggyback(conn, &pb.acks, &pb.discarded);
            // A report may earn the session a claim; any request of a repeated loser arms its
            // claims (`fair`).
            if let Some(c) = &pb.contention {
                self.cc.claims_mut().reported(conn, c, self.now_us);
            }
            self.cc.claims_mut().active(conn, self.now_us);
            // Demotion only from sessions invited to it. It does not touch the directory: the
            // client reports a demoted page as discarded too, when CLOCC allows. Data first,
            // then notices, then discards, so that none forgets what the one before needs.
            if self.sessions.demotes(conn) {
                for (page, bytes) in pb.demoted_pages {
                    self.demotions.data(conn, page, bytes, &mut self.store.cache);
                }
                for &page in &pb.demoted {
                    self.demotions.notice(conn, page, &mut self.store.cache);
                }
            }
            for &page in &pb.discarded {
                self.demotions.discarded(conn, page);
            }
        }
        match self.sessions.admit(conn, id, req, self.server_info_parts(), fx) {
            Action::Done => {}
            Action::Fetch(page) => {
                self.sessions.set_busy(conn);
                self.fetch(Origin::Conn { conn, id }, page, None, fx);
            }
            Action::Prefetch(p) => {
                self.sessions.set_busy(conn);
                let ahead = prefetch::Ahead { extra: p.extra, hint: p.hint };
                self.fetch(Origin::Conn { conn, id }, p.page, Some(ahead), fx);
            }
            Action::Commit(c) => {
                self.sessions.set_busy(conn);
                self.commit(Origin::Conn { conn, id }, c, fx);
            }
            Action::Prepare(p) => {
                self.sessions.set_busy(conn);
                self.prepare_request(Origin::Conn { conn, id }, *p, fx);
            }
            Action::Peer(msg) if !self.knows_server(msg.from()) => {
                let from = msg.from().0;
                let why = format!(
                    "server {} does not know server {from} (it has no --peer {from}=HOST:PORT), so it takes no part in transactions with it",
                    self.server_id().0
                );
                self.sessions.forbid(conn, id, &why, fx);
            }
            Action::Peer(msg) => {
                fx.push(Effect::Reply {
                    conn,
                    id,
                    reply: Reply::new(ReplyBody::Ack),
                    close: false,
                });
                self.peer_message(msg, fx);
            }
            Action::Backup(path) => {
                self.sessions.set_busy(conn);
                fx.push(Effect::Backup { conn, id, path });
            }
            Action::PageRecords(r) => {
                // Answered at once, like `Stats`: the session was never busy with it.
                let reply = match self.path.page_records(conn, r, self.store.page_size) {
                    Ok(()) => Reply::new(ReplyBody::Ack),
                    Err(why) => Reply::error(thor_wire::ErrorCode::Malformed, &why),
                };
                fx.push(Effect::Reply { conn, id, reply, close: false });
            }
            Action::PageCommit(c) => {
                self.sessions.set_busy(conn);
                self.page_commit(Origin::Conn { conn, id }, c, fx);
            }
            Action::Resume(r) => self.resume_request(conn, id, r, fx),
            Action::Stats => {
                let stats = Box::new(self.server_stats());
                fx.push(Effect::Reply {
                    conn,
                    id,
                    reply: Reply::new(ReplyBody::Stats(stats)),
                    close: false,
                });
            }
        }
    }

    /// Installs the commit path (`commit_path`): thor-study's page modes, or object shipping
    /// back. Before any client connects (`Engine` does it from its options); a path that
    /// keeps log state (a WPL table recovery rebuilt) may be replaced only by one its maker
    /// gave that state to (thor-study does: `thor_study::set_commit_mode`).
    pub fn set_commit_path(&mut self, path: Box<dyn commit_path::CommitPath>) {
        self.path = path;
    }

    /// The commit path installed (thor-study reaches its own path's state through
    /// `CommitPath::as_any_mut`).
    pub fn commit_path_mut(&mut self) -> &mut dyn commit_path::CommitPath {
        &mut *self.path
    }

    /// The server's commit mode: its commit path's.
    pub fn commit_mode(&self) -> thor_wire::CommitMode {
        self.path.mode()
    }

    /// The store, for a commit path that restores state into it at recovery (thor-study's
    /// whole-page logging forgets the layout of the pages it restored copies of).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// `PageCommit`: the commit path makes it a commit (reading page images it needs first,
    /// in which case it answers from `page_read`).
    fn page_commit(&mut self, origin: Origin, c: thor_wire::PageCommit, fx: &mut Vec<Effect>) {
        let mut reads = commit_path::PageReads::new(&mut self.store);
        let step = self.path.page_commit(commit_path::Requester(origin), c, &mut reads);
        let (read, applied) = (std::mem::take(&mut reads.read), reads.applied);
        self.counters.fetch_versions_applied += applied;
        for page in read {
            self.want_read(page, None, fx);
        }
        match step {
            commit_path::PageStep::Commit(c) => self.page_committed(origin, Ok(c), fx),
            commit_path::PageStep::Refused(e) => self.page_committed(origin, Err(e), fx),
            commit_path::PageStep::Waiting => {}
        }
    }

    /// A page commit became `c`: into the commit queue, or answered with its refusal.
    fn page_committed(
        &mut self,
        origin: Origin,
        c: Result<CommitIn, EngineError>,
        fx: &mut Vec<Effect>,
    ) {
        match c {
            Ok(c) => self.commit(origin, c, fx),
            Err(e) => self.answer_commit(origin, Err(e), fx),
        }
    }

    /// The page modes' counters as `ServerStats` fields (the others default).
    fn page_stats(&self) -> thor_wire::ServerStats {
        let c = self.path.counters();
        let (p, w) = (c.pages, c.wpl);
        thor_wire::ServerStats {
            commit_mode: u64::from(self.path.mode().code()),
            page_commits: p.page_commits,
            page_records: p.records,
            page_records_early: p.records_early,
            page_record_bytes: p.record_bytes,
            pages_shipped: p.pages_shipped,
            redo_reads: p.redo_reads,
            wpl_images: w.images,
            wpl_checkpoints: w.checkpoints,
            wpl_installed: w.installed,
            wpl_restored: w.restored,
            wpl_page_rule_refusals: w.page_rule_refusals,
            wpl_table: c.wpl_table as u64,
            pages_early: p.pages_early,
            ..thor_wire::ServerStats::default()
        }
    }

    /// What `HelloOk` tells a client.
    fn server_info_parts(&self) -> sessions::InfoParts {
        sessions::InfoParts {
            server_id: self.store.superblock().server_id,
            page_size: self.store.page_size,
            root: self.store.superblock().root,
            demotions: self.store.cache.mode() == crate::pagecache::CacheMode::Exclusive,
            commit_mode: self.path.mode(),
        }
    }

    fn direct(&mut self, ticket: Ticket, op: DirectOp, fx: &mut Vec<Effect>) {
        match op {
            DirectOp::Commit(c) => self.commit(Origin::Direct(ticket), c, fx),
            DirectOp::Fetch(page) => self.fetch(Origin::Direct(ticket), page, None, fx),
            DirectOp::FlushRound => {
                if let Some(why) = &self.failed {
                    let e = EngineError::Failed(why.clone());
                    fx.push(Effect::Done { ticket, result: DirectResult::Flushed(Err(e)) });
                } else if self.read_only {
                    let e = EngineError::ReadOnly;
                    fx.push(Effect::Done { ticket, result: DirectResult::Flushed(Err(e)) });
                } else {
                    self.flush_waiters.push(ticket);
                }
            }
            DirectOp::BulkBegin => {
                if self.read_only {
                    let r = DirectResult::BulkBegun(Err(EngineError::ReadOnly));
                    fx.push(Effect::Done { ticket, result: r });
                } else if self.bulk != Bulk::Idle {
                    let r = DirectResult::BulkBegun(Err(EngineError::BulkLoadActive));
                    fx.push(Effect::Done { ticket, result: r });
                } else {
                    self.bulk = Bulk::Draining(ticket);
                }
            }
            DirectOp::BulkFinish(done) => {
                let last = PageId::new(done.first.get() + done.slots.len() as u32 - 1)
                    .filter(|_| !done.slots.is_empty());
                match (self.bulk, last) {
                    (Bulk::Active, Some(last)) => {
                        let slots = *done.slots.last().expect("not empty") as usize;
                        let tail = Tail { page: last, free: done.last_free, slots };
                        self.store.bulk_loaded(done.first, &done.slots, tail);
                        let job = self.next_job();
                        self.bulk = Bulk::Finishing(ticket);
                        fx.push(Effect::Checkpoint(CheckpointJob {
                            id: job,
                            superblock: self.store.superblock().clone(),
                            truncate_before: None,
                        }));
                    }
                    (Bulk::Active, None) => {
                        self.bulk = Bulk::Idle;
                        fx.push(Effect::Done { ticket, result: DirectResult::BulkEnded(Ok(())) });
                    }
                    _ => {
                        let e = EngineError::BadOptions("no bulk load is active".into());
                        fx.push(Effect::Done { ticket, result: DirectResult::BulkEnded(Err(e)) });
                    }
                }
            }
            DirectOp::BulkAbort => {
                if self.bulk == Bulk::Active {
                    self.bulk = Bulk::Idle;
                }
                fx.push(Effect::Done { ticket, result: DirectResult::BulkEnded(Ok(())) });
            }
        }
    }

    fn next_job(&mut self) -> u64 {
        let j = self.next_job;
        self.next_job += 1;
        j
    }

    fn fetch(
        &mut self,
        origin: Origin,
        page: PageId,
        ahead: Option<prefetch::Ahead>,
        fx: &mut Vec<Effect>,
    ) {
        match self.fetch_cached(page) {
            Some(r) => self.answer_fetch(origin, page, ahead, r, fx),
            None => {
                self.counters.fetches += 1;
                self.counters.fetch_reads += 1;
                self.want_read(page, Some((origin, ahead)), fx);
            }
        }
    }

    /// Fetches `page` if that needs no I/O (a page-cache hit, a fresh page, or an error), as
    /// [`DirectOp::Fetch`] would answer it; `None` when the page must be read, and then the
    /// caller steps [`DirectOp::Fetch`]. A query with no effects, so the embedded driver
    /// answers hits without building and routing effects.
    pub fn fetch_cached(&mut self, page: PageId) -> Option<Result<Bytes, EngineError>> {
        let r = match self.store.compose(page) {
            Ok(Some((bytes, applied))) => {
                self.counters.fetch_versions_applied += applied as u64;
                Ok(bytes)
            }
            Ok(None) => return None,
            Err(e) => Err(e),
        };
        self.counters.fetches += 1;
        Some(r)
    }

    /// Asks for `page` to be read (once, however many wait for it).
    fn want_read(&mut self, page: PageId, waiter: Option<Fetcher>, fx: &mut Vec<Effect>) {
        let issued = self.install_gen;
        let entry = self.reads.entry(page).or_insert_with(|| {
            fx.push(Effect::Read { page });
            (issued, Vec::new())
        });
        if let Some(w) = waiter {
            entry.1.push(w);
        }
    }

    fn page_read(&mut self, page: PageId, result: Result<Bytes, ReadError>, fx: &mut Vec<Effect>) {
        let Some((issued, waiters)) = self.reads.remove(&page) else { return };
        let image = match result {
            Ok(img) => {
                if issued == self.install_gen {
                    // Read for a client's fetch: the client holds it now (an exclusive cache
                    // puts it at the evict-next end); for validation only, a reference.
                    if waiters.is_empty() {
                        self.store.cache.insert(page, img.clone());
                    } else {
                        self.store.cache.insert_for_client(page, img.clone());
                    }
                    Ok(img)
                } else if let Some(cached) = self.store.cache.peek(page) {
                    // An install round wrote the page while it was being read: the cached
                    // image is the newer one.
                    Ok(cached.clone())
                } else {
                    // The image read may predate an install; read again.
                    self.reads.insert(page, (self.install_gen, waiters));
                    fx.push(Effect::Read { page });
                    return;
                }
            }
            Err(e) => Err(e),
        };
        let failure = |e: &ReadError| match e {
            ReadError::Corrupt(source) => EngineError::CorruptPage { page, cause: source.clone() },
            ReadError::Storage(why) => EngineError::Read { page, why: why.clone() },
        };
        for (w, ahead) in waiters {
            let r = match &image {
                Ok(img) => self.store.with_mob(page, img.clone()).map(|(b, n)| {
                    self.counters.fetch_versions_applied += n as u64;
                    b
                }),
                Err(e) => Err(failure(e)),
            };
            self.answer_fetch(w, page, ahead, r, fx);
        }
        if self.path.waits_for_pages() {
            let composed = match &image {
                Ok(img) => self.store.with_mob(page, img.clone()).map(|(b, _)| b),
                Err(e) => Err(failure(e)),
            };
            for (from, c) in self.path.page_read(page, composed.as_ref()) {
                self.page_committed(from.0, c, fx);
            }
        }
        // Only the head of the commit queue is validated, so only it can wait for a page.
        let Some(head) = self.queue.front_mut() else { return };
        let Some(i) = head.waiting_for.iter().position(|p| *p == page) else { return };
        head.waiting_for.swap_remove(i);
        match image {
            Ok(img) => head.images.push((page, img)),
            Err(e) => {
                let q = self.queue.pop_front().expect("checked");
                self.answer_commit(q.origin, Err(failure(&e)), fx);
            }
        }
    }

    fn commit(&mut self, origin: Origin, c: CommitIn, fx: &mut Vec<Effect>) {
        self.last_commit_us = self.now_us;
        if let Some(why) = &self.failed {
            let e = EngineError::Failed(why.clone());
            return self.answer_commit(origin, Err(e), fx);
        }
        if c.is_read_only() {
            // A read-only transaction changes nothing, so there is nothing to make durable: no
            // log record and no fsync. It is validated like any other (it may have read a
            // stale copy, or what a committing transaction is writing), and enters the
            // validation queue as committed. Its read set is held to the same definition of
            // an object's name as a writing commit's (`Store::validate`).
            if let Err(e) = store::check_names(&c) {
                self.counters.commits_refused += 1;
                return self.answer_commit(origin, Err(e.into()), fx);
            }
            let conn = origin.conn();
            match self.cc.validate(conn, &c.reads, &[], c.ts, self.now_us) {
                Ok(ts) => {
                    self.cc.insert(ts, &c.reads, &[], true, self.now_us);
                    self.counters.commits += 1;
                    self.counters.read_only_commits += 1;
                    let out = CommitOutcome { lsn: self.store.durable_lsn(), created: Vec::new() };
                    self.answer_commit(origin, Ok(out), fx);
                }
                Err(r) => match self.in_doubt_writer(&r) {
                    Some(on) => self.park(on, r, twopc::ParkedWork::ReadOnly(origin, c)),
                    None => self.refuse(origin, r, fx),
                },
            }
            return;
        }
        self.queue.push_back(Queued {
            origin,
            commit: c,
            images: Vec::new(),
            waiting_for: Vec::new(),
            counted_waits: (false, false),
            twopc: None,
            merged: Vec::new(),
        });
    }

    /// Drops the queued (and parked) commits of `conn`, whose session ends. The head of the
    /// queue may be waiting for page reads; those complete into the page cache regardless.
    fn drop_unvalidated(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        self.fair_drop(conn);
        if !self.queue.iter().any(|q| q.origin.conn() == Some(conn)) && !self.twopc_parks(conn) {
            return;
        }
        let mut dropped = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for q in std::mem::take(&mut self.queue) {
            if q.origin.conn() == Some(conn) {
                dropped.push(q);
            } else {
                kept.push_back(q);
            }
        }
        self.queue = kept;
        dropped.extend(self.twopc_unpark_conn(conn, fx));
        for q in dropped {
            if let Some(info) = q.twopc {
                self.twopc_abandoned(&info, fx);
            }
        }
    }

    /// Answers a commit that concurrency control refused.
    ///
    /// A rule-1 refusal (the transaction read what a committing transaction writes) waits
    /// until the log is durable up to the newest prepared commit: the writer's invalidations
    /// then ride on the refusal (`held_refusals`).
    fn refuse(&mut self, origin: Origin, r: cc::Refusal, fx: &mut Vec<Effect>) {
        self.cc.count_refusal(&r);
        self.counters.commits_refused += 1;
        if matches!(r, cc::Refusal::Rule1(_))
            && let Some(p) = self.store.pending().back()
        {
            self.held_refusals.push((p.lsn, origin, r));
            return;
        }
        self.answer_commit(origin, Err(EngineError::Conflict(r)), fx);
    }

    /// Answers the held refusals whose writers are durable (all of them with `all`).
    fn release_refusals(&mut self, durable: Lsn, all: bool, fx: &mut Vec<Effect>) {
        if self.held_refusals.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held_refusals);
        for (lsn, origin, r) in held {
            if all || lsn <= durable {
                self.answer_commit(origin, Err(EngineError::Conflict(r)), fx);
            } else {
                self.held_refusals.push((lsn, origin, r));
            }
        }
    }

    /// Prepares queued commits, in order, until one must wait. Each head passes four phases:
    /// the gate (the server takes writes, there is room, the record fits), validation (a
    /// timestamp from concurrency control, or two-phase commit's), preparation (orefs and the
    /// record, or the pages it needs) and the append. A phase that answers the head (a
    /// refusal) moves on to the next; one that must wait stops the pump.
    /// Puts commits taken out of the queue (held back by fair retries, parked behind a part
    /// in doubt) back at its front, in their order, but behind a head whose prepare is under
    /// way (it waits for page reads): a page read is matched only against the head
    /// ([`Core::page_read`]), so a head pushed back would wait for a read already answered.
    fn requeue_front(&mut self, commits: Vec<Queued>) {
        let at = usize::from(self.queue.front().is_some_and(|q| !q.waiting_for.is_empty()));
        for q in commits.into_iter().rev() {
            self.queue.insert(at, q);
        }
    }

    fn pump(&mut self, fx: &mut Vec<Effect>) {
        while let Some(head) = self.queue.front() {
            if !head.waiting_for.is_empty() {
                return;
            }
            match self.gate_head(fx) {
                Pumped::Go => {}
                Pumped::Next => continue,
                Pumped::Wait => return,
            }
            let Some((ts, writes)) = self.validate_head(fx) else { continue };
            match self.prepare_head(ts, &writes, fx) {
                Pumped::Go | Pumped::Next => continue,
                Pumped::Wait => return,
            }
        }
    }

    /// The gate of the commit at the head of the queue: the server takes writes, the MOB and
    /// the log buffer have room, its records fit the log, the page modes' own gate.
    fn gate_head(&mut self, fx: &mut Vec<Effect>) -> Pumped {
        let head = self.queue.front().expect("a head to gate");
        let refusal = match (&self.failed, self.read_only) {
            (Some(why), _) => Some(EngineError::Failed(why.clone())),
            (None, true) => Some(EngineError::ReadOnly),
            (None, false) => None,
        };
        if let Some(e) = refusal {
            let q = self.queue.pop_front().expect("checked");
            self.answer_commit(q.origin, Err(e), fx);
            return Pumped::Next;
        }
        // Room in the MOB for it and every prepared commit (a commit bigger than the whole
        // budget goes through once the MOB is empty, so that it cannot wait forever) and
        // in the log buffer.
        if self.needs_room(&head.commit) {
            let head = self.queue.front_mut().expect("checked");
            if !head.counted_waits.0 {
                head.counted_waits.0 = true;
                self.counters.mob_waits += 1;
            }
            return Pumped::Wait;
        }
        // A two-phase part's record carries its section after the objects: counted, so
        // that no record the log would refuse (which stops the server) is ever appended.
        let section_bytes =
            head.twopc.as_deref().map_or(0, |t| Core::twopc_section(t).encoded_len());
        let sized = self.path.log_bytes(&head.commit, section_bytes);
        let log_bytes = crate::limits::log_record_len(sized.total);
        let largest = sized.largest;
        if largest > self.cfg.record_bytes_max {
            let e = InvalidCommit::TooLarge {
                what: "record bytes",
                got: largest,
                max: self.cfg.record_bytes_max,
            };
            self.refuse_head(e.into(), fx);
            return Pumped::Next;
        }
        if self.store.unsynced_bytes() > 0
            && self.store.unsynced_bytes() + log_bytes > self.cfg.log_buffer_bytes
        {
            let head = self.queue.front_mut().expect("checked");
            if !head.counted_waits.1 {
                head.counted_waits.1 = true;
                self.counters.log_waits += 1;
            }
            return Pumped::Wait;
        }
        self.path_gate(fx)
    }

    /// Refuses the head of the queue as invalid before validation: a two-phase part as its
    /// validation would be (a no vote), any other commit counted and answered.
    fn refuse_head(&mut self, e: EngineError, fx: &mut Vec<Effect>) {
        let q = self.queue.pop_front().expect("a head to refuse");
        if q.twopc.is_some() {
            self.twopc_refused(q, e, fx);
            return;
        }
        self.counters.commits_refused += 1;
        self.answer_commit(q.origin, Err(e), fx);
    }

    /// The commit path's gate ([`commit_path::CommitPath::gate`]): what the path can never
    /// take is refused; it may append records of its own first.
    fn path_gate(&mut self, fx: &mut Vec<Effect>) -> Pumped {
        let head = self.queue.front().expect("a head to gate");
        let open = self.log_open_to_path();
        let mut log = commit_path::PathLog::new(&mut self.store, fx, open);
        let gated = self.path.gate(&head.commit, &mut log);
        if let Some(why) = log.into_failure() {
            self.fail(why, fx);
        }
        let Err(e) = gated else { return Pumped::Go };
        let q = self.queue.pop_front().expect("checked");
        match e {
            EngineError::Conflict(r) => self.refuse(q.origin, r, fx),
            e => {
                self.counters.commits_refused += 1;
                self.answer_commit(q.origin, Err(e), fx);
            }
        }
        Pumped::Next
    }

    /// Validates the head of the queue: its timestamp and the objects it writes, or `None`
    /// when it was refused or parked behind a transaction in doubt (the head is gone).
    fn validate_head(
        &mut self,
        fx: &mut Vec<Effect>,
    ) -> Option<(cc::Timestamp, Vec<thor_core::Oref>)> {
        let head = self.queue.front().expect("a head to validate");
        let writes: Vec<thor_core::Oref> = head.commit.versions.iter().map(|v| v.0).collect();
        if head.twopc.is_some() {
            return match self.twopc_validate(&writes) {
                Ok(ts) => Some((ts, writes)),
                Err(e) => {
                    let q = self.queue.pop_front().expect("checked");
                    if let EngineError::Conflict(r) = &e
                        && let Some(on) = self.in_doubt_writer(r)
                    {
                        self.park(on, *r, twopc::ParkedWork::Queued(q));
                    } else {
                        self.twopc_refused(q, e, fx);
                    }
                    None
                }
            };
        }
        if self.fair_hold_head(&writes) {
            return None;
        }
        let head = self.queue.front().expect("not held");
        let conn = head.origin.conn();
        if self.mutated(crate::mutants::Mutant::ValidationOff) {
            let ts = self.cc.validate(None, &[], &[], None, self.now_us);
            return Some((ts.expect("a fresh timestamp passes"), writes));
        }
        match self.cc.validate(conn, &head.commit.reads, &writes, head.commit.ts, self.now_us) {
            Ok(ts) => Some((ts, writes)),
            Err(r) => {
                if let leaves::Merged::Done(ts, merged) = self.merge_head(&r) {
                    self.queue.front_mut().expect("checked").merged = merged;
                    return Some((ts, writes));
                }
                let q = self.queue.pop_front().expect("checked");
                match self.in_doubt_writer(&r) {
                    Some(on) => self.park(on, r, twopc::ParkedWork::Queued(q)),
                    None => {
                        self.cc.lost(conn, &r, self.now_us);
                        self.refuse(q.origin, r, fx)
                    }
                }
                None
            }
        }
    }

    /// Prepares the validated head of the queue (orefs, the record) and appends it; or asks
    /// for the pages preparing it needs (`Wait`); or refuses it (`Next`).
    fn prepare_head(
        &mut self,
        ts: cc::Timestamp,
        writes: &[thor_core::Oref],
        fx: &mut Vec<Effect>,
    ) -> Pumped {
        let allow_create = self.bulk == Bulk::Idle;
        let head = self.queue.front().expect("a head to prepare");
        let section = head.twopc.as_deref().map(Core::twopc_section);
        let at = commit_path::PrepareAt {
            images: &head.images,
            allow_create,
            ts: (ts.time_us, ts.server),
            section: section.as_ref(),
        };
        match self.path.prepare(&mut self.store, &head.commit, at) {
            Ok(_) => {
                self.append_prepared(ts, writes, fx);
                Pumped::Go
            }
            Err(Stop::Need(pages)) => {
                for p in &pages {
                    self.counters.validation_reads += 1;
                    self.want_read(*p, None, fx);
                }
                self.queue.front_mut().expect("checked").waiting_for = pages;
                Pumped::Wait
            }
            Err(Stop::Fail(e)) => {
                let q = self.queue.pop_front().expect("checked");
                if q.twopc.is_some() {
                    self.twopc_refused(q, e, fx);
                } else if let EngineError::Conflict(r @ cc::Refusal::PageWritten(_)) = e {
                    self.refuse(q.origin, r, fx);
                } else {
                    if matches!(e, EngineError::Invalid(_)) {
                        self.counters.commits_refused += 1;
                    }
                    self.answer_commit(q.origin, Err(e), fx);
                }
                Pumped::Next
            }
        }
    }

    /// Appends a prepared commit's records through the commit path (LSNs in effect order)
    /// and hands the head of the queue to whoever waits for its durability: two-phase commit
    /// for a part, else the prepared-commit tables.
    fn append_prepared(
        &mut self,
        ts: cc::Timestamp,
        writes: &[thor_core::Oref],
        fx: &mut Vec<Effect>,
    ) {
        let p = self.store.pending().back().expect("just prepared");
        if let Err(why) = self.path.append(p, fx) {
            self.fail(why, fx);
        }
        let p = self.store.pending().back().expect("just prepared");
        let created = p.created.clone();
        let lsn = p.lsn;
        let q = self.queue.pop_front().expect("the head was prepared");
        if q.twopc.is_some() {
            self.twopc_prepared(q, ts, writes, lsn, created);
            return;
        }
        let conn = q.origin.conn();
        self.cc.insert(ts, &q.commit.reads, writes, false, self.now_us);
        self.prepared_cc.insert(lsn, (ts, conn));
        self.prepared_origin.insert(lsn, q.origin);
        if !q.merged.is_empty() {
            self.prepared_merged.insert(lsn, q.merged);
        }
    }

    fn durable(&mut self, lsn: Lsn, fx: &mut Vec<Effect>) {
        let mut done = Vec::new();
        self.store.publish(lsn, |p| done.push(p));
        if let Err(why) = self.path.durable(lsn, &done) {
            self.fail(why, fx);
        }
        for p in done {
            if p.held {
                self.twopc_durable(p, fx);
                continue;
            }
            // A demoted copy of a page this commit wrote is stale from now on.
            self.demotions.pages_written(p.objects.iter().filter_map(|o| o.oref.page()));
            let versions = p.objects.iter().filter(|o| !o.created).count() as u64;
            self.counters.versions_committed += versions;
            self.counters.objects_created += p.objects.len() as u64 - versions;
            self.counters.commits += 1;
            let writes: Vec<thor_core::Oref> =
                p.objects.iter().filter(|o| !o.created).map(|o| o.oref).collect();
            let commit = p.id.map(|id| (id, p.created.clone()));
            let ts = self.prepared_cc.get(&p.lsn).map_or((0, 0), |(t, _)| (t.time_us, t.server));
            let crc = thor_core::checksum::crc32c(&p.record);
            self.note_change(p.lsn, (ts.0, ts.1, crc), writes, commit);
            if let Some((ts, committer)) = self.prepared_cc.remove(&p.lsn) {
                let mut expired = self.cc.committed(ts, committer);
                // The committer's copies of the leaves merged are its own bytes, not the ones
                // installed: their invalidation rides on its `CommitOk` (`leaves`).
                if let (Some(m), Some(conn)) = (self.prepared_merged.remove(&p.lsn), committer)
                    && self.cc.invalidate_merged(conn, &m)
                    && !expired.contains(&conn)
                {
                    expired.push(conn);
                }
                for conn in expired {
                    self.sessions.expire(conn, fx);
                }
                // The committer keeps its created objects cached (HAC does), so their pages are
                // in its directory from now on: a later change to them by another client must
                // be announced to it like any change to a page it fetched.
                if let Some(conn) = committer {
                    let mut last = None;
                    for page in p.created.iter().filter_map(|o| o.page()) {
                        if last != Some(page) {
                            self.cc.page_sent(conn, page);
                            last = Some(page);
                        }
                    }
                }
            }
            if let Some(origin) = self.prepared_origin.remove(&p.lsn) {
                let out = CommitOutcome { lsn: p.lsn, created: p.created };
                self.answer_commit(origin, Ok(out), fx);
            }
        }
        self.twopc_records_durable(lsn, fx);
        self.release_refusals(lsn, false, fx);
        self.resumes_durable(lsn, fx);
    }

    /// Starts an install round when one is due.
    fn maybe_start_round(&mut self, fx: &mut Vec<Effect>) {
        if self.round.is_some() || self.failed.is_some() || self.recovering || self.read_only {
            return;
        }
        let start = self.cfg.mob_bytes / 100 * self.cfg.flush_start_percent;
        let head_waits_for_room = self
            .queue
            .front()
            .is_some_and(|q| q.waiting_for.is_empty() && self.needs_room(&q.commit))
            && !self.store.mob.is_empty();
        let mob = &self.store.mob;
        let idle = !mob.is_empty()
            && self.store.pending().is_empty()
            && self.now_us.saturating_sub(self.last_commit_us) >= self.cfg.idle_flush_after_us;
        let draining = matches!(self.bulk, Bulk::Draining(_));
        let due = mob.bytes() > start
            || head_waits_for_room
            || idle
            || !self.flush_waiters.is_empty()
            || draining;
        if !due {
            return;
        }
        if mob.is_empty() {
            // Nothing to install: answer who asked.
            let report = FlushReport {
                checkpoint: self.store.superblock().checkpoint,
                ..FlushReport::default()
            };
            for t in std::mem::take(&mut self.flush_waiters) {
                fx.push(Effect::Done { ticket: t, result: DirectResult::Flushed(Ok(report)) });
            }
            if let Bulk::Draining(ticket) = self.bulk
                && self.store.pending().is_empty()
            {
                match self.store.tail_page().next() {
                    Some(first) => {
                        self.bulk = Bulk::Active;
                        let r = DirectResult::BulkBegun(Ok(first));
                        fx.push(Effect::Done { ticket, result: r });
                    }
                    None => {
                        self.bulk = Bulk::Idle;
                        let r = DirectResult::BulkBegun(Err(EngineError::Full));
                        fx.push(Effect::Done { ticket, result: r });
                    }
                }
            }
            return;
        }
        self.start_round(fx);
    }

    /// Whether `c` must wait for the MOB to shrink: the MOB plus every prepared commit plus `c`
    /// would exceed the budget. A commit alone bigger than the budget waits only until nothing
    /// else is buffered or prepared.
    fn needs_room(&self, c: &CommitIn) -> bool {
        let held = self.store.mob.bytes() + self.store.pending_mob_cost() + self.twopc.held_bytes;
        let cost = crate::mob::commit_cost(c.objects(), self.path.log_bytes(c, 0).total);
        (held > 0 && held + cost > self.cfg.mob_bytes) || self.path.needs_room(c)
    }

    /// Plans an install round of the oldest MOB pages and emits it (recovery calls this
    /// directly when the MOB is over budget). Does nothing if a round is in flight or the MOB
    /// is empty.
    pub fn start_round(&mut self, fx: &mut Vec<Effect>) {
        if self.round.is_some() || self.store.mob.is_empty() {
            return;
        }
        let mut pages = self.store.mob.oldest_pages(self.cfg.flush_batch_pages.max(1));
        pages.sort();
        let mut jobs = Vec::with_capacity(pages.len());
        let mut plan = Vec::with_capacity(pages.len());
        for page in pages {
            let mut versions = Vec::new();
            let mut keys = Vec::new();
            self.store.mob.for_page(page, |oid, e| {
                versions.push((oid, e.lsn, e.data.clone()));
                keys.push((oid, e.lsn));
            });
            jobs.push(PageJob {
                page,
                fresh: self.store.is_fresh(page),
                base: self.store.cache.peek(page).cloned(),
                versions,
            });
            plan.push((page, keys));
        }
        let job = self.next_job();
        let report = FlushReport {
            pages: jobs.len(),
            versions: plan.iter().map(|(_, v)| v.len()).sum(),
            ..FlushReport::default()
        };
        self.round = Some(Round {
            job,
            pages: plan,
            report,
            waiters: std::mem::take(&mut self.flush_waiters),
            installed: false,
        });
        fx.push(Effect::Install(InstallJob {
            id: job,
            page_size: self.store.page_size,
            pages: jobs,
        }));
    }

    fn installed(&mut self, job: u64, result: Result<Installed, String>, fx: &mut Vec<Effect>) {
        let Some(round) = self.round.as_mut().filter(|r| r.job == job && !r.installed) else {
            return;
        };
        let done = match result {
            Ok(d) => d,
            Err(why) => return self.fail(format!("install round failed: {why}"), fx),
        };
        let ps = self.store.page_size;
        round.installed = true;
        round.report.installation_reads = done.installation_reads;
        let pages = std::mem::take(&mut round.pages);
        for (i, (page, versions)) in pages.iter().enumerate() {
            let img = done.images.slice(i * ps..(i + 1) * ps);
            // The commit being validated may hold the page's image from before this round:
            // with the round's versions leaving the MOB, that image would hide them (a
            // created object would look absent, an old version current).
            if let Some(head) = self.queue.front_mut() {
                for (p, held) in head.images.iter_mut() {
                    if p == page {
                        *held = img.clone();
                    }
                }
            }
            let version = thor_core::PageView::assume_parsed(&img).version();
            self.store.installed_home(*page, img);
            self.path.installed(*page, version);
            self.store.mob.remove_installed(*page, versions);
        }
        self.install_gen += 1;
        // Two-phase commit keeps the prepare records of transactions in doubt or being told.
        let checkpoint = match self.twopc.log_floor() {
            Some(f) => self.store.checkpoint_lsn().min(f),
            None => self.store.checkpoint_lsn(),
        };
        let superblock = self.store.checkpoint_at(checkpoint);
        let c = &mut self.counters;
        c.flush_rounds += 1;
        c.pages_written += pages.len() as u64;
        c.versions_installed += pages.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
        c.installation_reads += done.installation_reads as u64;
        let round = self.round.as_mut().expect("checked");
        round.report.checkpoint = checkpoint;
        // Nothing is truncated while recovering: the commit path's floor may not be known
        // yet (WPL's table is rebuilt at the first WPL record replay meets).
        let truncate_before =
            if self.recovering { None } else { self.path.truncation_floor(checkpoint) };
        fx.push(Effect::Checkpoint(CheckpointJob { id: job, superblock, truncate_before }));
        let open = self.log_open_to_path();
        let mut log = commit_path::PathLog::new(&mut self.store, fx, open);
        self.path.installed_round(&mut log);
        if let Some(why) = log.into_failure() {
            self.fail(why, fx);
        }
    }

    /// Whether the commit path may append records of its own: not while recovering
    /// (recovery's driver appends nothing), not once the server failed.
    fn log_open_to_path(&self) -> bool {
        !self.recovering && self.failed.is_none()
    }

    fn checkpointed(&mut self, job: u64, result: Result<(), String>, fx: &mut Vec<Effect>) {
        if let Bulk::Finishing(ticket) = self.bulk {
            self.bulk = Bulk::Idle;
            let r = result.clone().map_err(EngineError::Failed);
            fx.push(Effect::Done { ticket, result: DirectResult::BulkEnded(r) });
            if let Err(why) = result {
                self.fail(format!("superblock write failed: {why}"), fx);
            }
            return;
        }
        let Some(round) = self.round.take_if(|r| r.job == job && r.installed) else { return };
        match result {
            Ok(()) => {
                for t in round.waiters {
                    let r = DirectResult::Flushed(Ok(round.report));
                    fx.push(Effect::Done { ticket: t, result: r });
                }
            }
            Err(why) => {
                for t in round.waiters {
                    let r = DirectResult::Flushed(Err(EngineError::Failed(why.clone())));
                    fx.push(Effect::Done { ticket: t, result: r });
                }
                self.fail(format!("checkpoint failed: {why}"), fx);
            }
        }
    }

    /// Stops accepting writes after a storage failure: what is durable is unknown until the
    /// database is reopened (recovery decides). Everything waiting for durability fails.
    fn fail(&mut self, why: String, fx: &mut Vec<Effect>) {
        if self.failed.is_some() {
            return;
        }
        self.failed = Some(why.clone());
        let mut abandoned = Vec::new();
        self.store.abandon_pending(|p| abandoned.push(p.lsn));
        for lsn in abandoned {
            // Its timestamp goes too: nothing of it will be published.
            self.prepared_cc.remove(&lsn);
            self.prepared_merged.remove(&lsn);
            if let Some(origin) = self.prepared_origin.remove(&lsn) {
                self.answer_commit(origin, Err(EngineError::Failed(why.clone())), fx);
            }
        }
        while let Some(q) = self.queue.pop_front() {
            self.answer_commit(q.origin, Err(EngineError::Failed(why.clone())), fx);
        }
        // Refused either way: they need not wait for a durability that will not come.
        self.release_refusals(Lsn(0), true, fx);
        self.resumes_durable(Lsn(0), fx);
        if let Some(round) = self.round.take() {
            for t in round.waiters {
                let r = DirectResult::Flushed(Err(EngineError::Failed(why.clone())));
                fx.push(Effect::Done { ticket: t, result: r });
            }
        }
        for t in std::mem::take(&mut self.flush_waiters) {
            let r = DirectResult::Flushed(Err(EngineError::Failed(why.clone())));
            fx.push(Effect::Done { ticket: t, result: r });
        }
        match self.bulk {
            Bulk::Draining(t) => {
                let r = DirectResult::BulkBegun(Err(EngineError::Failed(why.clone())));
                fx.push(Effect::Done { ticket: t, result: r });
            }
            Bulk::Finishing(t) => {
                let r = DirectResult::BulkEnded(Err(EngineError::Failed(why.clone())));
                fx.push(Effect::Done { ticket: t, result: r });
            }
            Bulk::Idle | Bulk::Active => {}
        }
        self.bulk = Bulk::Idle;
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CoreStats {
        let c = &self.counters;
        let cache = self.store.cache.stats();
        let d = &self.driver;
        let path = self.path.counters();
        CoreStats {
            commits: c.commits,
            read_only_commits: c.read_only_commits,
            versions_committed: c.versions_committed,
            objects_created: c.objects_created,
            commits_refused: c.commits_refused,
            log_bytes: d.log_bytes,
            log_fsyncs: d.log_fsyncs,
            commits_per_fsync: if d.log_fsyncs == 0 {
                0.0
            } else {
                d.log_records as f64 / d.log_fsyncs as f64
            },
            mob_bytes: self.store.mob.bytes(),
            mob_entries: self.store.mob.len(),
            fetches: c.fetches,
            fetch_versions_applied: c.fetch_versions_applied,
            cache_hits: cache.hits,
            cache_misses: cache.misses,
            fetch_reads: c.fetch_reads,
            installation_reads: c.installation_reads,
            validation_reads: c.validation_reads,
            flush_rounds: c.flush_rounds,
            pages_written: c.pages_written,
            versions_installed: c.versions_installed,
            write_absorption: if c.pages_written == 0 {
                0.0
            } else {
                c.versions_installed as f64 / c.pages_written as f64
            },
            mob_waits: c.mob_waits,
            log_waits: c.log_waits,
            checkpoint: self.store.superblock().checkpoint.0,
            pages_allocated: self.store.tail_page().get(),
            commits_queued: self.queue.len(),
            wpl: path.wpl,
            wpl_table: path.wpl_table,
            prefetch: self.prefetch,
            requests_forbidden: self.sessions.counters().forbidden,
            sessions_revoked: self.sessions.counters().sessions_revoked,
            leaf_merges: c.leaf_merges,
            leaf_merges_refused: c.leaf_merges_refused,
        }
    }

    /// The page cache's pages from its evict-next end (for tests and diagnostics).
    pub fn page_cache_order(&self) -> Vec<PageId> {
        self.store.cache.order()
    }

    /// The image the page cache holds for `page`, if any (for tests and the simulator).
    pub fn page_cache_image(&self, page: PageId) -> Option<Bytes> {
        self.store.cache.peek(page).cloned()
    }

    /// The counters as the wire's `Stats` reply carries them.
    pub fn server_stats(&self) -> ServerStats {
        let e = self.stats();
        let s = self.sessions.counters();
        let c = self.cc.counters();
        let d = self.demotions.counters();
        let t = self.twopc_stats();
        let f = self.cc.claims().counters();
        ServerStats {
            commits: e.commits,
            versions_committed: e.versions_committed,
            objects_created: e.objects_created,
            commits_refused: e.commits_refused,
            log_bytes: e.log_bytes,
            log_fsyncs: e.log_fsyncs,
            commits_per_fsync: e.commits_per_fsync,
            mob_bytes: e.mob_bytes as u64,
            mob_entries: e.mob_entries as u64,
            fetches: e.fetches,
            fetch_versions_applied: e.fetch_versions_applied,
            cache_hits: e.cache_hits,
            cache_misses: e.cache_misses,
            fetch_reads: e.fetch_reads,
            installation_reads: e.installation_reads,
            validation_reads: e.validation_reads,
            flush_rounds: e.flush_rounds,
            pages_written: e.pages_written,
            versions_installed: e.versions_installed,
            write_absorption: e.write_absorption,
            mob_waits: e.mob_waits,
            checkpoint: e.checkpoint,
            pages_allocated: e.pages_allocated as u64,
            sessions_open: s.sessions_open,
            sessions_opened: s.sessions_opened,
            sessions_refused: s.sessions_refused,
            requests: s.requests,
            protocol_errors: s.protocol_errors,
            auth_failures: s.auth_failures,
            acks_received: s.acks_received,
            discarded_pages_received: s.discarded_pages_received,
            bytes_received: self.driver.bytes_received,
            bytes_sent: self.driver.bytes_sent,
            refused_stale: c.refused_stale,
            refused_threshold: c.refused_threshold,
            refused_rule1: c.refused_rule1,
            refused_rule2a: c.refused_rule2a,
            refused_rule2b: c.refused_rule2b,
            retried_passed: c.retried_passed,
            read_only_validated: c.read_only_validated,
            invalidations_added: c.invalidations_added,
            invalidations_sent: c.invalidations_sent,
            invalidations_acked: c.invalidations_acked,
            invalid_entries: self.cc.invalid_entries() as u64,
            directory_entries: self.cc.directory_entries() as u64,
            directories_coarsened: c.directories_coarsened,
            vq_len: self.cc.vq_len() as u64,
            sessions_expired: c.sessions_expired,
            page_cache_exclusive: u64::from(
                self.store.cache.mode() == crate::pagecache::CacheMode::Exclusive,
            ),
            demotions_reordered: self.store.cache.stats().demotions_reordered,
            demotions_stored: self.store.cache.stats().demotions_stored,
            demote_notices: d.notices,
            demotions_wanted: d.wanted,
            demotions_refused: d.refused,
            demoted_bytes: d.bytes,
            twopc_prepared: t.counters.prepared,
            twopc_read_only: t.counters.read_only,
            twopc_decided_commit: t.counters.decided_commit,
            twopc_decided_abort: t.counters.decided_abort,
            twopc_parts_committed: t.counters.parts_committed,
            twopc_parts_aborted: t.counters.parts_aborted,
            twopc_in_doubt: t.in_doubt as u64,
            twopc_coordinating: t.coordinating as u64,
            twopc_presumed_aborts: t.counters.presumed_aborts,
            prefetch_requests: e.prefetch.requests,
            pages_prefetched: e.prefetch.pages,
            prefetch_uncached: e.prefetch.uncached,
            fetch_service_ns: self.driver.fetch_service_ns,
            fetches_served: self.driver.fetches_served,
            page_read_ns: self.driver.page_read_ns,
            health: self.driver.health,
            storage_failures: u64::from(self.failed.is_some()),
            sessions_refused_failed: self.refused_failed,
            uptime_s: self.driver.uptime_s,
            server_version: self.driver.server_version,
            database_bytes: self.driver.database_bytes,
            log_disk_bytes: self.driver.log_disk_bytes,
            mob_bytes_max: self.cfg.mob_bytes as u64,
            client_invalidation_aborts: f.invalidation_aborts,
            client_retries: f.retries,
            fair_claims: f.claims,
            fair_held: f.held,
            fair_held_timed_out: f.held_timed_out,
            fair_claims_expired: f.claims_expired,
            leaf_merges: self.counters.leaf_merges,
            leaf_merges_refused: self.counters.leaf_merges_refused,
            twopc_prepares_missed: t.counters.prepares_missed,
            ..self.page_stats()
        }
    }
}

/// The reply (and whether to close) for an engine error. See the table in
/// [`crate::core::sessions`].
pub fn error_reply(e: &EngineError) -> (Reply, bool) {
    let msg = e.to_string();
    match e {
        EngineError::Invalid(ic) => (Reply::refused(refused_code(ic), &msg), false),
        EngineError::Full => (Reply::refused(RefusedCode::DatabaseFull, &msg), false),
        EngineError::BulkLoadActive => (Reply::refused(RefusedCode::RetryLater, &msg), false),
        // No code of its own in the protocol's list: `Other`, whose message says why.
        EngineError::ReadOnly => (Reply::refused(RefusedCode::Other, &msg), false),
        EngineError::Aborted(_) => (Reply::refused(RefusedCode::Aborted, &msg), false),
        EngineError::Conflict(r) => {
            let code = match r {
                cc::Refusal::Stale(_) | cc::Refusal::PageWritten(_) => RefusedCode::Stale,
                cc::Refusal::TooOld { .. } => RefusedCode::TooOld,
                _ => RefusedCode::Conflict,
            };
            (Reply::refused(code, &msg), false)
        }
        EngineError::NoSuchPage(_) => (Reply::error(ErrorCode::NoSuchPage, &msg), false),
        EngineError::CorruptPage { .. }
        | EngineError::CorruptRecord { .. }
        | EngineError::UnreadableRecord { .. } => {
            (Reply::error(ErrorCode::CorruptData, &msg), false)
        }
        EngineError::Storage(_) | EngineError::Failed(_) | EngineError::Read { .. } => {
            (Reply::error(ErrorCode::ServerFailed, &msg), false)
        }
        _ => (Reply::error(ErrorCode::Internal, &msg), true),
    }
}

/// The refusal code of each way a commit can be invalid.
pub fn refused_code(e: &InvalidCommit) -> RefusedCode {
    match e {
        InvalidCommit::TooLarge { .. } => RefusedCode::TooLarge,
        InvalidCommit::NoSuchObject(_) | InvalidCommit::NamesNoObject { .. } => {
            RefusedCode::NoSuchObject
        }
        InvalidCommit::NotAClass { .. } => RefusedCode::NotAClass,
        InvalidCommit::BadShape { .. } => RefusedCode::BadShape,
        InvalidCommit::BadReference { .. } => RefusedCode::BadReference,
        InvalidCommit::Reshape { .. } => RefusedCode::Reshape,
        InvalidCommit::ClassIsImmutable(_) => RefusedCode::ClassIsImmutable,
        InvalidCommit::Duplicate(_) => RefusedCode::Duplicate,
        InvalidCommit::ObjectTooLarge { .. } => RefusedCode::ObjectTooLarge,
        InvalidCommit::BadPageRecord(_) => RefusedCode::Other,
    }
}

impl From<Commit> for CommitIn {
    fn from(c: Commit) -> CommitIn {
        CommitIn {
            versions: c.versions,
            created: c.created,
            reads: c.reads,
            ts: None,
            pages: None,
            id: c.id,
            leaves: c.leaves,
        }
    }
}

#[cfg(test)]
mod testdisk;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_creds;
#[cfg(test)]
mod tests_fair;
#[cfg(test)]
mod tests_leaves;
#[cfg(test)]
mod tests_prefetch;
#[cfg(test)]
mod tests_resume;
#[cfg(test)]
mod tests_twopc;
#[cfg(test)]
mod tests_valid;
