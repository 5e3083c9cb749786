//! The embedded server: the core driven by threads, with a blocking API.
//!
//! An [`Engine`] owns a [`Core`] behind a mutex and performs its effects. Every caller steps
//! the core on its own thread for as long as the core's own work takes (a page-cache hit, a
//! validation) and does its I/O after unlocking: no disk read, write or fsync ever happens
//! while the core is locked.
//!
//! ```text
//!   callers (embedded API, LocalTransport, TCP connection tasks)
//!      │ lock ─ Core::step ─ route effects ─ unlock
//!      │   Reply ──────────► the connection's ReplySink (a queue; never blocks)
//!      │   Done ───────────► the waiting caller's slot
//!      │   Append ─────────► log.append (in memory: the core bounds unsynced bytes),
//!      │                     and the caller's Work says: sync the log
//!      │   Read ───────────► returned to the caller as Work: it reads the page unlocked
//!      │   Install/Checkpoint► the installer thread's queue
//!      ▼
//!   the caller, unlocked: page reads ─► step PageRead; log.sync ─► step Durable
//!   installer thread:   install round or checkpoint ─► step Installed / Checkpointed;
//!                       a Tick at the core's deadline, every 100 ms at the latest (idle
//!                       installation); a step that sets an earlier deadline wakes it
//! ```
//!
//! *Group commit:* whoever appends a record syncs the log after unlocking, through the log's
//! own group commit: one caller leads the write and fsync, and everyone who appended meanwhile
//! waits for it and shares it, so each fsync carries every commit that arrived during the
//! previous one. The committer's own thread leads its fsync (no hand-off to another thread on
//! the commit path); a TCP driver performs this work on its blocking pool. Every caller then
//! reports what became durable; reports are idempotent (`publish` up to an LSN).
//!
//! *Without threads* ([`EngineOptions::background_flusher`] false) the caller performs every
//! effect itself before the call returns: reads, install rounds, checkpoints and the log's
//! fsync (concurrent callers share fsyncs through the log's own group commit). Tests use this
//! for determinism; the behaviour is the same. Nothing then ticks the core but its callers: a
//! caller that waits for an answer (a direct operation, an in-process transport's reply, the
//! TCP accept loop) wakes at the core's [`Core::answer_deadline_us`] and ticks
//! ([`Engine::caller_tick_wait`]), so that a commit held back by fair retries is released at
//! the end of its bounded wait even when the holder's session runs on the waiting thread.
//!
//! *Shutdown* ([`Engine::close`], or dropping the engine) installs everything in the MOB and
//! truncates the log, so that the next open replays nothing.
//!
//! # A storage failure
//!
//! When a write or fsync of the log or the page file fails (a full disk, `EIO`), the core
//! stops writing ([`Input::LogFailed`], or a failed install round or checkpoint): what is
//! durable is unknown until recovery reads the disk again, so nothing more may be
//! acknowledged. The engine then
//!
//! - logs the cause once, at ERROR, with what follows and what to do;
//! - says so in [`Engine::health`] ([`Health::Failed`]) and in its counters (`health`,
//!   `storage_failures`, `sessions_refused_failed` in [`thor_wire::ServerStats`]);
//! - refuses every commit (waiting, in flight or new: `ServerFailed`, outcome unknown for
//!   those in flight) and every new session (`ServerFailed` instead of `HelloOk`, and the
//!   connection closed), so that clients learn why instead of reconnecting in a loop;
//! - goes on serving reads of committed data to the sessions already open: fetches read the
//!   page file and the MOB, which hold only what was acknowledged;
//! - writes nothing more: no install round, no checkpoint, and closing it does not install
//!   (the next open replays the log).
//!
//! It does not repair itself in place: after a failed fsync only what recovery reads back
//! from the disk can be trusted (the kernel may have dropped the unsynced pages), so the way
//! back is a new open, once the disk is repaired. `thor server` exits (status 75) so that its
//! supervisor restarts it; an open on a disk still full fails without leaving anything behind.
//!
//! # Metrics
//!
//! The engine records two latency histograms into the `metrics` facade:
//! `thor_commit_seconds` (a network commit, from its request handed to [`Engine::request`] to
//! its answer; an embedded [`Engine::commit`] from call to return) and `thor_fetch_seconds`
//! (what a network driver reports with [`Engine::note_fetch_served`]). Without a recorder
//! installed (the program's choice; `thor server --metrics-listen` installs a Prometheus one
//! before it opens the engine) they cost nothing. Everything else is a counter of
//! [`Engine::server_stats`], which an exporter reads at each scrape.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;
use thor_core::{Oref, PageId, PageMut, PageView, ServerId, page};
use thor_storage::{Disk, LogOptions, StorageError};
use thor_wire::{Reply, Request, RequestBody, WireError};
use tracing::{debug, error, warn};

use crate::io::{self, Clock, CommitLog, DiskSide, SystemClock};
use crate::limits;
use crate::packer::PagePacker;
use thor_server_core::FlushReport;
use thor_server_core::{
    BulkDone, ConnId, Core, CoreConfig, CoreStats, DirectOp, DirectResult, DriverCounters, Effect,
    Input, ProtocolConfig, Ticket,
};
use thor_server_core::{CommitIn, CommitOutcome, empty_page};
use thor_server_core::{EngineError, InvalidCommit};

/// Settings of an engine. `page_size` and `server_id` matter only when creating a database.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Bytes per page of a new database.
    pub page_size: usize,
    /// The id of a new database's server.
    pub server_id: ServerId,
    /// Memory budget of the MOB; commits wait for installation beyond it.
    pub mob_bytes: usize,
    /// Memory budget of the page cache.
    pub page_cache_bytes: usize,
    /// Pages installed per round.
    pub flush_batch_pages: usize,
    /// Installation starts when the MOB exceeds this percentage of its budget.
    pub flush_start_percent: usize,
    /// Whether to run the installer thread (install rounds, checkpoints, idle ticks). Without
    /// it every call performs its own I/O before returning (deterministic tests).
    pub background_flusher: bool,
    /// Settings of the transaction log.
    pub log: LogOptions,
    /// Sessions: credentials (or the single token), connection limit, frame limit.
    pub protocol: ProtocolConfig,
    /// Bounds of concurrency control (validation queue, directories, invalid sets).
    pub cc: thor_server_core::CcConfig,
    /// Where backups asked for over the protocol go (`thor server --backup-dir`): a client
    /// names a relative path inside it. `None` (the default) refuses them; [`Engine::backup`]
    /// takes any path, being the program's own call.
    pub backup_dir: Option<std::path::PathBuf>,
    /// Where pages clients read go in the page cache: inclusive LRU (the default) or DEMOTE's
    /// exclusive placement ([`thor_server_core::CacheMode`]).
    pub page_cache_mode: thor_server_core::CacheMode,
    /// Timeouts and bounds of two-phase commit.
    pub twopc: thor_server_core::TwoPcConfig,
    /// Where messages to other servers go (two-phase commit). `None`: a server on its own;
    /// its messages to peers are dropped (and transactions that name peers cannot commit).
    pub peers: Option<Arc<dyn PeerSink>>,
    /// How clients' commits are made recoverable (`thor server --commit-mode`): thor's own
    /// `obj` (the default) or one of the QuickStore study's page-based modes
    /// (`core::pagecommit`), told to every client in `HelloOk`. A server setting: the log and
    /// the page file are the same in every mode, so a database can be served in any.
    pub commit_mode: thor_wire::CommitMode,
    /// Most further pages the server adds to one `Prefetch` reply, whatever the client asks
    /// (`thor server --prefetch-max`; `core::prefetch`). 0 turns prefetch off at the server:
    /// every `Prefetch` is answered with its page alone.
    pub prefetch_pages_max: usize,
}

/// Where an engine's messages to other servers go (two-phase commit).
pub trait PeerSink: Send + Sync + std::fmt::Debug {
    /// Sends `msg` to server `to`. Called outside the engine's lock, so an implementation may
    /// deliver straight into another engine ([`Engine::peer_message`]); it should not block for
    /// long. Delivery may fail silently: the protocol resends what matters on its timeouts.
    fn send(&self, to: ServerId, msg: thor_wire::PeerMsg);
}

/// Engines of one process that are each other's peers: a [`PeerSink`] that delivers straight
/// into the engine registered under the destination's id (for tests, and for clusters run in
/// one process). Messages to an unregistered server, or while [`LocalPeers::set_dropping`]
/// is on, are lost, as they may be over a network.
#[derive(Debug, Default)]
pub struct LocalPeers {
    engines: parking_lot::Mutex<FxHashMap<ServerId, std::sync::Weak<Engine>>>,
    dropping: AtomicBool,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

impl LocalPeers {
    /// An empty registry.
    pub fn new() -> Arc<LocalPeers> {
        Arc::new(LocalPeers::default())
    }

    /// Messages to `engine`'s server go to `engine` from now on.
    pub fn register(&self, engine: &Arc<Engine>) {
        self.engines.lock().insert(engine.server_id(), Arc::downgrade(engine));
    }

    /// Loses every message while `on` (a partition, for tests).
    pub fn set_dropping(&self, on: bool) {
        self.dropping.store(on, Relaxed);
    }

    /// Messages delivered and lost so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.delivered.load(Relaxed), self.dropped.load(Relaxed))
    }
}

impl PeerSink for LocalPeers {
    fn send(&self, to: ServerId, msg: thor_wire::PeerMsg) {
        let target = self.engines.lock().get(&to).and_then(std::sync::Weak::upgrade);
        match target {
            Some(e) if !self.dropping.load(Relaxed) => {
                self.delivered.fetch_add(1, Relaxed);
                e.peer_message(msg);
            }
            _ => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            page_size: thor_core::limits::PAGE_SIZE_DEFAULT,
            server_id: ServerId(1),
            mob_bytes: limits::MOB_BYTES_DEFAULT,
            page_cache_bytes: limits::PAGE_CACHE_BYTES_DEFAULT,
            flush_batch_pages: limits::FLUSH_BATCH_PAGES_DEFAULT,
            flush_start_percent: limits::FLUSH_START_PERCENT,
            background_flusher: true,
            log: LogOptions::default(),
            protocol: ProtocolConfig::default(),
            cc: thor_server_core::CcConfig::default(),
            backup_dir: None,
            page_cache_mode: thor_server_core::CacheMode::Inclusive,
            twopc: thor_server_core::TwoPcConfig::default(),
            peers: None,
            commit_mode: thor_wire::CommitMode::Obj,
            prefetch_pages_max: thor_wire::limits::PREFETCH_PAGES_MAX,
        }
    }
}

impl EngineOptions {
    pub(crate) fn core_config(&self) -> CoreConfig {
        CoreConfig {
            mob_bytes: self.mob_bytes,
            page_cache_bytes: self.page_cache_bytes,
            flush_batch_pages: self.flush_batch_pages,
            flush_start_percent: self.flush_start_percent,
            idle_flush_after_us: limits::IDLE_FLUSH_AFTER_US,
            log_buffer_bytes: self.log.buffer_bytes_max,
            record_bytes_max: self.log.record_bytes_max,
            protocol: self.protocol.clone(),
            cc: self.cc,
            twopc: self.twopc.clone(),
            page_cache_mode: self.page_cache_mode,
            prefetch_pages_max: self.prefetch_pages_max,
            hash_key: os_hash_key(),
        }
    }
}

/// A fresh key for the core's keyed hash ([`CoreConfig::hash_key`]), from the OS's randomness:
/// the core takes none itself, so the driver draws it (std's `RandomState` is seeded from the
/// OS; hashing two constants under two fresh states gives two independent words).
fn os_hash_key() -> [u64; 2] {
    use std::hash::BuildHasher;
    let a = std::collections::hash_map::RandomState::new().hash_one(0x6b65_7930u64);
    let b = std::collections::hash_map::RandomState::new().hash_one(0x6b65_7931u64);
    [a, b]
}

/// A commit: new versions of existing objects and newly created objects (see
/// [`CommitIn`], which this converts into without copying).
#[derive(Debug, Clone, Default)]
pub struct CommitRequest {
    /// New versions: the object's oref and its complete new bytes.
    pub versions: Vec<(Oref, Vec<u8>)>,
    /// Created objects in creation order (which is their clustering order).
    pub created: Vec<Vec<u8>>,
}

impl From<CommitRequest> for CommitIn {
    fn from(r: CommitRequest) -> CommitIn {
        CommitIn {
            versions: r.versions.into_iter().map(|(o, v)| (o, Bytes::from(v))).collect(),
            created: r.created.into_iter().map(Bytes::from).collect(),
            reads: Vec::new(),
            ts: None,
            pages: None,
            id: None,
            leaves: Vec::new(),
        }
    }
}

/// Counters of everything the engine does.
pub type EngineStats = CoreStats;

/// Where the replies to one connection go. Called with the core locked: it must not block
/// (a queue push). The core sends each connection at most one reply per request it
/// received, and a connection has at most `IN_FLIGHT_MAX` requests in flight, so a queue per
/// connection holds at most that many (plus one final error) replies.
pub trait ReplySink: Send + Sync {
    /// Takes the reply to request `id` (0: no request); `close` asks the driver to close the
    /// connection after sending it.
    fn deliver(&self, id: u64, reply: Reply, close: bool);
}

/// I/O a caller must perform after a step, without the lock: reads, the log's sync after an
/// append (and, without threads, install rounds and checkpoints).
#[derive(Debug, Default)]
#[must_use = "the work must be performed (Engine::settle) or handed to a thread that does"]
pub struct Work {
    /// Effects to perform.
    effects: Vec<Effect>,
    /// Whether records were appended that this caller must make durable.
    sync: bool,
}

impl Work {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.effects.is_empty() && !self.sync
    }
}

/// A direct operation's answer slot.
#[derive(Default)]
struct Slot {
    /// The answer, once given.
    result: Mutex<Option<DirectResult>>,
    /// Signalled when it is.
    ready: Condvar,
}

/// Whether an engine can serve, as a load balancer's health check or an operator asks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// It serves reads and commits.
    Serving,
    /// It was opened read-only ([`Engine::open_read_only`]): it serves reads and refuses
    /// writes, by design.
    ReadOnly,
    /// Its storage failed: it refuses commits and new sessions, serves reads of committed data
    /// to the sessions already open, and needs a restart once the disk is repaired (see the
    /// module documentation).
    Failed {
        /// What failed, as the first failure said it.
        cause: String,
        /// When, in the engine clock's microseconds.
        since_us: u64,
    },
}

impl Health {
    /// Whether the engine takes new sessions and commits (a load balancer's "ready").
    pub fn is_serving(&self) -> bool {
        matches!(self, Health::Serving)
    }

    /// The number `ServerStats::health` carries.
    pub fn code(&self) -> u64 {
        match self {
            Health::Serving => thor_wire::stats::HEALTH_SERVING,
            Health::Failed { .. } => thor_wire::stats::HEALTH_FAILED,
            Health::ReadOnly => thor_wire::stats::HEALTH_READ_ONLY,
        }
    }
}

/// Everything behind the core lock.
struct Locked {
    /// The state machine.
    core: Core,
    /// Where each connection's replies go.
    sinks: FxHashMap<ConnId, Arc<dyn ReplySink>>,
    /// Callers waiting for direct operations.
    slots: FxHashMap<Ticket, Arc<Slot>>,
    /// The direct operation being stepped now, and its answer if the step gave it at once (a
    /// page-cache hit): the caller then takes it without a slot, an allocation or a wake-up.
    direct: (Ticket, Option<DirectResult>),
    /// The last ticket handed out.
    next_ticket: Ticket,
    /// Reused effect buffer.
    fx: Vec<Effect>,
    /// When each network commit in flight was handed to the core, by connection and request
    /// id, for `thor_commit_seconds`. Bounded by the sessions times `IN_FLIGHT_MAX`: an entry
    /// leaves with its answer or its connection.
    commits_started: FxHashMap<(ConnId, u64), std::time::Instant>,
}

/// Shared by the engine handle and its threads.
struct Shared {
    /// The core and its routing tables.
    locked: Mutex<Locked>,
    /// Page file, double-write buffer, superblock.
    disk_side: DiskSide,
    /// The transaction log.
    log: Arc<dyn CommitLog>,
    /// The time source.
    clock: Arc<dyn Clock>,
    /// Whether the installer thread runs.
    threaded: bool,
    /// Install rounds and checkpoints for the installer thread.
    jobs: Mutex<VecDeque<Effect>>,
    /// Wakes the installer.
    jobs_wake: Condvar,
    /// When the installer means to wake next (the clock's microseconds; `u64::MAX` before it
    /// first sleeps), written under the core's lock: a step that sets an earlier deadline
    /// ([`Core::next_deadline_us`]: a held commit's wait, a two-phase timer) wakes it, so that
    /// it ticks then and not up to [`TICK`] later.
    installer_wake_us: AtomicU64,
    /// Set (under the jobs lock) by a step that woke the installer for an earlier deadline:
    /// it computes its wait again instead of ticking.
    rewake: AtomicBool,
    /// Set to stop the threads.
    stop: AtomicBool,
    /// The next connection id.
    next_id: AtomicU64,
    /// The last time read from `clock`, for inputs that do not read the time (see
    /// [`Input::reads_time`]).
    last_now: AtomicU64,
    /// Frame bytes received and sent by network drivers.
    traffic: (AtomicU64, AtomicU64),
    /// Nanoseconds network drivers spent serving fetches, and the fetches they timed
    /// ([`Engine::note_fetch_served`]).
    served: (AtomicU64, AtomicU64),
    /// Nanoseconds reading pages for `Effect::Read` (fetches and validation).
    page_read_ns: AtomicU64,
    /// Where backups asked for over the protocol go.
    backup_dir: Option<std::path::PathBuf>,
    /// Where messages to other servers go.
    peers: Option<Arc<dyn PeerSink>>,
    /// When the engine opened (the clock's microseconds), for `ServerStats::uptime_s`.
    started_us: u64,
    /// Whether it serves read-only ([`Engine::open_read_only`]).
    read_only: bool,
    /// The first storage failure and when it happened, once the engine has seen (and logged)
    /// it; kept outside the core's lock so that health checks never wait for the core.
    failure: Mutex<Option<(String, u64)>>,
    /// Whether `failure` is set (a lock-free check on every step).
    failure_seen: AtomicBool,
    /// The log's file-name prefix, to tell its segments in `ServerStats::log_disk_bytes`.
    log_prefix: String,
    /// `thor_commit_seconds` in the program's `metrics` recorder (a no-op without one).
    commit_seconds: metrics::Histogram,
    /// `thor_fetch_seconds`, likewise.
    fetch_seconds: metrics::Histogram,
}

/// The name of the commit latency histogram in the `metrics` recorder.
pub const COMMIT_SECONDS: &str = "thor_commit_seconds";
/// The name of the fetch latency histogram in the `metrics` recorder.
pub const FETCH_SECONDS: &str = "thor_fetch_seconds";

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("disk", &self.disk_side.disk).finish_non_exhaustive()
    }
}

/// The embedded server. See the module documentation. Share it with `Arc<Engine>`; every
/// method takes `&self`.
#[derive(Debug)]
pub struct Engine {
    /// State shared with the threads.
    shared: Arc<Shared>,
    /// The installer thread.
    threads: Vec<JoinHandle<()>>,
    /// Whether `close` ran.
    closed: AtomicBool,
}

impl Engine {
    /// Creates a database in `disk` (which must not hold one) and opens it.
    pub fn create(disk: Arc<dyn Disk>, opts: EngineOptions) -> Result<Engine, EngineError> {
        io::create(&*disk, opts.page_size, opts.server_id)?;
        // A new database has validated nothing: no reason to refuse early client timestamps.
        Engine::open_inner(disk, opts, Arc::new(SystemClock), true)
    }

    /// Opens the database in `disk`, recovering from the log.
    pub fn open(disk: Arc<dyn Disk>, opts: EngineOptions) -> Result<Engine, EngineError> {
        Engine::open_with_clock(disk, opts, Arc::new(SystemClock))
    }

    /// Opens the database in `disk` with a clock of the caller's.
    pub fn open_with_clock(
        disk: Arc<dyn Disk>,
        opts: EngineOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, EngineError> {
        Engine::open_inner(disk, opts, clock, false)
    }

    /// Opens the database in `disk` to read only: recovery runs as for [`Engine::open`], but
    /// the engine then refuses every writing commit, flush round and bulk load
    /// ([`EngineError::ReadOnly`]), runs no install round or checkpoint, has no installer
    /// thread and does not install at close. Recovery itself writes (a torn tail's cut, pages
    /// restored from the double-write buffer, install rounds when the MOB fills), so give it a
    /// disk that keeps those writes in memory: an `OverlayDisk` over a `ReadOnlyDisk`
    /// (`thor::open_read_only` does), and nothing reaches the directory.
    pub fn open_read_only(disk: Arc<dyn Disk>, opts: EngineOptions) -> Result<Engine, EngineError> {
        let opts = EngineOptions { background_flusher: false, ..opts };
        Engine::open_mode(disk, opts, Arc::new(SystemClock), false, true)
    }

    /// Opens; `created` says the database was made just now (see [`Core::created_now`]).
    fn open_inner(
        disk: Arc<dyn Disk>,
        opts: EngineOptions,
        clock: Arc<dyn Clock>,
        created: bool,
    ) -> Result<Engine, EngineError> {
        Engine::open_mode(disk, opts, clock, created, false)
    }

    /// Opens, read-write or read-only.
    fn open_mode(
        disk: Arc<dyn Disk>,
        opts: EngineOptions,
        clock: Arc<dyn Clock>,
        created: bool,
        read_only: bool,
    ) -> Result<Engine, EngineError> {
        let start_us = clock.now_us();
        let study = thor_study::StudyOptions { mode: opts.commit_mode, ..Default::default() };
        let mut rec = io::recover(disk, opts.core_config(), opts.log.clone(), &study)?;
        if created {
            rec.core.created_now();
        } else {
            rec.core.recovered_at(start_us);
        }
        if read_only {
            rec.core.set_read_only();
        }
        let shared = Arc::new(Shared {
            locked: Mutex::new(Locked {
                core: rec.core,
                sinks: FxHashMap::default(),
                slots: FxHashMap::default(),
                direct: (0, None),
                next_ticket: 0,
                fx: Vec::new(),
                commits_started: FxHashMap::default(),
            }),
            disk_side: rec.disk_side,
            log: rec.log,
            clock,
            threaded: opts.background_flusher,
            jobs: Mutex::new(VecDeque::new()),
            jobs_wake: Condvar::new(),
            installer_wake_us: AtomicU64::new(u64::MAX),
            rewake: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            last_now: AtomicU64::new(start_us),
            traffic: (AtomicU64::new(0), AtomicU64::new(0)),
            served: (AtomicU64::new(0), AtomicU64::new(0)),
            page_read_ns: AtomicU64::new(0),
            backup_dir: opts.backup_dir.clone(),
            peers: opts.peers.clone(),
            started_us: start_us,
            read_only,
            failure: Mutex::new(None),
            failure_seen: AtomicBool::new(false),
            log_prefix: opts.log.prefix.clone(),
            commit_seconds: metrics::histogram!(COMMIT_SECONDS),
            fetch_seconds: metrics::histogram!(FETCH_SECONDS),
        });
        let mut threads = Vec::new();
        if shared.threaded {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name("thor-installer".into())
                .spawn(move || installer(&s))
                .map_err(|source| StorageError::Io {
                    op: "spawn engine thread",
                    name: "thor-installer".to_string(),
                    cause: source,
                })?;
            threads.push(h);
        }
        Ok(Engine { shared, threads, closed: AtomicBool::new(false) })
    }

    /// Bytes per page of this database.
    pub fn page_size(&self) -> usize {
        self.shared.disk_side.page_size
    }

    /// This server's id.
    pub fn server_id(&self) -> ServerId {
        self.shared.locked.lock().core.server_id()
    }

    /// The persistent root object.
    pub fn root(&self) -> Oref {
        self.shared.locked.lock().core.root()
    }

    /// The protocol settings (credentials, connection and frame limits).
    pub fn protocol(&self) -> ProtocolConfig {
        self.shared.locked.lock().core.config().protocol.clone()
    }

    /// Commits `req`: validates it, makes it durable, and makes it visible to fetches. Returns
    /// once the commit is durable.
    pub fn commit(&self, req: CommitRequest) -> Result<CommitOutcome, EngineError> {
        self.commit_in(req.into())
    }

    /// [`Engine::commit`] for a commit already in shared buffers.
    pub fn commit_in(&self, c: CommitIn) -> Result<CommitOutcome, EngineError> {
        let started = std::time::Instant::now();
        let r = match self.direct(DirectOp::Commit(c)) {
            DirectResult::Committed(r) => r,
            other => unreachable!("commit answered with {other:?}"),
        };
        self.shared.commit_seconds.record(started.elapsed().as_secs_f64());
        r
    }

    /// Whether the engine serves, serves read-only, or has failed (see the module
    /// documentation). Never waits for the core.
    pub fn health(&self) -> Health {
        if let Some((cause, since_us)) = self.shared.failure.lock().clone() {
            return Health::Failed { cause, since_us };
        }
        if self.shared.read_only { Health::ReadOnly } else { Health::Serving }
    }

    /// The current bytes of page `page`: its installed image with every published MOB version
    /// applied.
    pub fn fetch(&self, page: PageId) -> Result<Bytes, EngineError> {
        // A hit needs no I/O and has no effects: answer it without a step.
        if let Some(r) = self.shared.locked.lock().core.fetch_cached(page) {
            return r;
        }
        match self.direct(DirectOp::Fetch(page)) {
            DirectResult::Page(r) => r,
            other => unreachable!("fetch answered with {other:?}"),
        }
    }

    /// Runs one install round now (after the one in flight, if any). Returns what it did; a
    /// round with an empty MOB does nothing.
    pub fn flush_round(&self) -> Result<FlushReport, EngineError> {
        match self.direct(DirectOp::FlushRound) {
            DirectResult::Flushed(r) => r,
            other => unreachable!("flush answered with {other:?}"),
        }
    }

    /// Installs everything in the MOB and truncates the log.
    pub fn flush_all(&self) -> Result<(), EngineError> {
        loop {
            let r = self.flush_round()?;
            if r.pages == 0 && self.shared.locked.lock().core.is_quiescent() {
                return Ok(());
            }
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        let mut l = self.shared.locked.lock();
        self.shared.refresh_counters(&mut l.core, OwnCounters::default());
        l.core.stats()
    }

    /// Writes a consistent copy of the live database into the new directory `dest` (which must
    /// not exist): see [`DiskSide::backup_to_dir`]. Commits go on meanwhile; install rounds
    /// and checkpoints wait. The copy opens as a database (`thor check` passes it) and holds
    /// exactly the commits up to the returned LSN, which include every commit acknowledged
    /// before this call.
    pub fn backup(&self, dest: &std::path::Path) -> Result<thor_wire::BackupInfo, EngineError> {
        self.shared.disk_side.backup_to_dir(&*self.shared.log, dest, || self.shared.not_failed())
    }

    /// [`Engine::backup`] into a disk of the caller's (which must hold no database).
    pub fn backup_into(&self, dest: &dyn Disk) -> Result<thor_wire::BackupInfo, EngineError> {
        self.shared.disk_side.backup_into(&*self.shared.log, dest, || self.shared.not_failed())
    }

    /// The counters as the wire's `Stats` reply carries them (engine and sessions), with the
    /// engine's own: health, uptime, version, the files' sizes on disk (listed and measured
    /// now, outside the core's lock).
    pub fn server_stats(&self) -> thor_wire::ServerStats {
        let own = self.shared.own_counters();
        let mut l = self.shared.locked.lock();
        self.shared.refresh_counters(&mut l.core, own);
        l.core.server_stats()
    }

    /// The client of a connection's open session, for logs.
    pub fn client_of(&self, conn: ConnId) -> Option<thor_core::ClientId> {
        self.shared.locked.lock().core.client_of(conn)
    }

    /// Installs everything, truncates the log and stops the threads: the next open replays
    /// nothing. Dropping the engine does the same and logs a failure instead of returning it.
    pub fn close(mut self) -> Result<(), EngineError> {
        self.shutdown()
    }

    /// Stops the engine as a crash would once every acknowledged commit is on disk: no
    /// install, no checkpoint, so the next open replays the log. For tests and tools that
    /// exercise recovery; programs use [`Engine::close`].
    pub fn halt(mut self) {
        self.closed.store(true, Relaxed);
        self.stop_threads();
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        if self.closed.swap(true, Relaxed) {
            return Ok(());
        }
        let failed = self.shared.locked.lock().core.failed().map(str::to_string);
        if failed.is_none() && self.shared.read_only {
            // Nothing to install: a read-only engine never wrote (its recovery's writes went
            // where its disk keeps them).
            self.stop_threads();
            return Ok(());
        }
        let result = match failed {
            Some(why) => Err(EngineError::Failed(why)),
            None => self.flush_all(),
        };
        self.stop_threads();
        result?;
        // Everything is installed and the superblock says so: the whole log is history. Start
        // a new segment and drop the old ones, so that the next open reads nothing and the
        // directory does not keep up to a segment of dead records.
        let checkpoint = self.shared.locked.lock().core.checkpoint();
        let log = &self.shared.log;
        if checkpoint == log.next_lsn() {
            log.rotate()?;
            log.truncate_before(checkpoint)?;
        }
        Ok(())
    }

    fn stop_threads(&mut self) {
        self.shared.stop.store(true, Relaxed);
        self.shared.jobs_wake.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }

    /// Starts a bulk load: installs everything pending, then hands the allocator to the loader
    /// until it finishes. Commits that create objects are refused meanwhile.
    pub fn bulk_load(&self) -> Result<BulkLoader<'_>, EngineError> {
        let first = match self.direct(DirectOp::BulkBegin) {
            DirectResult::BulkBegun(r) => r?,
            other => unreachable!("bulk begin answered with {other:?}"),
        };
        Ok(BulkLoader {
            engine: self,
            window: VecDeque::new(),
            window_first: first,
            packer: PagePacker::new(first, self.page_size()),
            pages_written: 0,
            slots: Vec::new(),
            objects: 0,
            bytes: 0,
            finished: false,
        })
    }

    /// Runs a direct operation to its answer, performing its I/O on this thread where the
    /// engine has no thread for it.
    fn direct(&self, op: DirectOp) -> DirectResult {
        let (work, slot) = {
            let mut l = self.shared.locked.lock();
            // Tickets are counted under the lock (no atomic on the hit path); 0 means none.
            l.next_ticket += 1;
            let ticket = l.next_ticket;
            l.direct = (ticket, None);
            let work = self.shared.step_locked(&mut l, Input::Direct { ticket, op });
            let answer = std::mem::take(&mut l.direct).1;
            match answer {
                Some(result) => (work, Err(result)),
                None => {
                    // Answered by a later step, on whichever thread performs its I/O.
                    let slot = Arc::new(Slot::default());
                    l.slots.insert(ticket, slot.clone());
                    (work, Ok(slot))
                }
            }
        };
        self.settle(work);
        let slot = match slot {
            Ok(slot) => slot,
            Err(result) => return result,
        };
        loop {
            // Filled already (by a step on another thread): no need to ask the core.
            if let Some(result) = slot.result.lock().take() {
                return result;
            }
            // Read before the slot's lock: a step holds the core's lock while it fills slots.
            let wait = self.caller_tick_wait();
            let mut r = slot.result.lock();
            if let Some(result) = r.take() {
                return result;
            }
            match wait {
                None => slot.ready.wait(&mut r),
                Some(d) => {
                    if slot.ready.wait_for(&mut r, d).timed_out() && r.is_none() {
                        drop(r);
                        self.tick_if_due();
                    }
                }
            }
        }
    }

    /// For a caller that waits for an answer of this engine (a direct operation, an
    /// in-process transport's reply, a network driver): how long it may sleep before it must
    /// call [`Engine::tick_if_due`], between [`TICK_MIN`] and [`TICK`]. `None`: the engine's
    /// installer thread ticks the core at its deadlines, nobody else need.
    ///
    /// Without that thread nothing else would: a commit held back for another session's
    /// claim (fair retries) is released by a tick at the end of its wait, and when the
    /// claim's holder runs on the waiting caller's own thread (one thread driving two
    /// in-process sessions) no other step comes. Each waiting caller then wakes at the core's
    /// [`Core::answer_deadline_us`] and ticks, so the held commit waits its bound (20 ms),
    /// not for ever; with no deadline it looks again every [`TICK`], since another thread's
    /// step may set one.
    pub fn caller_tick_wait(&self) -> Option<Duration> {
        if self.shared.threaded {
            return None;
        }
        let deadline = self.shared.locked.lock().core.answer_deadline_us();
        Some(match deadline {
            Some(d) => Duration::from_micros(d.saturating_sub(self.shared.clock.now_us()))
                .clamp(TICK_MIN, TICK),
            None => TICK,
        })
    }

    /// Ticks the core if one of its deadlines that answer waiting requests
    /// ([`Core::answer_deadline_us`]) has come: what a caller that waited
    /// [`Engine::caller_tick_wait`] does.
    pub fn tick_if_due(&self) {
        let work = {
            let mut l = self.shared.locked.lock();
            let now = self.shared.clock.now_us();
            if l.core.answer_deadline_us().is_none_or(|d| d > now) {
                return;
            }
            self.shared.step_locked(&mut l, Input::Tick)
        };
        self.settle(work);
    }

    // ---- The connection API, for transports (in-process and TCP). ----

    /// Opens a connection whose replies go to `sink`. A connection beyond the session limit
    /// gets `Error(Busy)` with `close` through its sink.
    pub fn connect(&self, sink: Arc<dyn ReplySink>) -> ConnId {
        let conn = self.shared.next_id.fetch_add(1, Relaxed);
        let mut l = self.shared.locked.lock();
        l.sinks.insert(conn, sink);
        let work = self.shared.step_locked(&mut l, Input::Connect { conn });
        drop(l);
        self.settle(work);
        conn
    }

    /// Hands a decoded request of `conn` to the core. Replies go to the connection's sink
    /// (now or later); the returned work must be performed, off any async executor (it may
    /// read the disk).
    pub fn request(&self, conn: ConnId, id: u64, req: Request) -> Work {
        // Measured before the lock: it lists and measures files.
        let own = matches!(req.body, RequestBody::Stats).then(|| self.shared.own_counters());
        let mut l = self.shared.locked.lock();
        match req.body {
            RequestBody::Stats => {
                self.shared.refresh_counters(&mut l.core, own.unwrap_or_default())
            }
            RequestBody::Commit(_) | RequestBody::PageCommit(_) => {
                l.commits_started.insert((conn, id), std::time::Instant::now());
            }
            _ => {}
        }
        self.shared.step_locked(&mut l, Input::Request { conn, id, req })
    }

    /// Checks a request of `conn` that the transport serves itself instead of handing it to
    /// [`Engine::request`] (a replica group's requests, `thor_wire::replica`) against the
    /// connection's session, as the core checks every request (open and idle session, agreed
    /// version, credential scope: `thor_server_core::Core::screen`). Returns whether the
    /// transport may serve it; otherwise the refusal went to the connection's sink.
    pub fn screen(&self, conn: ConnId, id: u64, req: &Request) -> bool {
        let mut l = self.shared.locked.lock();
        let mut fx = Vec::new();
        let ok = l.core.screen(conn, id, req, &mut fx);
        for effect in fx {
            if let Effect::Reply { conn, id, reply, close } = effect
                && let Some(sink) = l.sinks.get(&conn)
            {
                sink.deliver(id, reply, close);
            }
        }
        ok
    }

    /// Reports bytes from `conn` that did not decode: the error reply goes to its sink, with
    /// `close`.
    pub fn protocol_error(&self, conn: ConnId, id: u64, error: WireError) {
        let mut l = self.shared.locked.lock();
        let work = self.shared.step_locked(&mut l, Input::ProtocolError { conn, id, error });
        drop(l);
        self.settle(work);
    }

    /// Closes `conn`: its session ends and its sink is dropped.
    pub fn disconnect(&self, conn: ConnId) {
        let mut l = self.shared.locked.lock();
        l.sinks.remove(&conn);
        if !l.commits_started.is_empty() {
            l.commits_started.retain(|(c, _), _| *c != conn);
        }
        let work = self.shared.step_locked(&mut l, Input::Disconnect { conn });
        drop(l);
        self.settle(work);
    }

    /// Performs `work` on this thread (blocking I/O), and whatever it leads to.
    pub fn settle(&self, work: Work) {
        self.shared.settle(work);
    }

    /// Delivers a message from another server (two-phase commit).
    pub fn peer_message(&self, msg: thor_wire::PeerMsg) {
        let work = self.shared.report(Input::Peer { msg });
        self.settle(work);
    }

    /// Replaces the server's credentials (`thor server` does on SIGHUP): every open session
    /// whose credential is gone or has a new secret is told `Error(Unauthenticated)` and
    /// closed ([`Input::Credentials`]).
    pub fn set_credentials(&self, credentials: thor_server_core::Credentials) {
        let work = self.shared.report(Input::Credentials(credentials));
        self.settle(work);
    }

    /// Two-phase commit's state and counters.
    pub fn twopc_stats(&self) -> thor_server_core::TwoPcStats {
        self.shared.locked.lock().core.twopc_stats()
    }

    /// Lets time pass for the core (timeouts of two-phase commit), for engines without the
    /// installer thread, whose ticks do it otherwise.
    pub fn tick(&self) {
        let work = self.shared.report(Input::Tick);
        self.settle(work);
    }

    /// Counts frame bytes a network driver received and sent.
    pub fn note_traffic(&self, received: u64, sent: u64) {
        self.shared.traffic.0.fetch_add(received, Relaxed);
        self.shared.traffic.1.fetch_add(sent, Relaxed);
    }

    /// Counts one fetch a network driver served in `ns` nanoseconds, from the request handed
    /// to [`Engine::request`] to its reply handed to the writer (`ServerStats::
    /// fetch_service_ns`, what lets a client split the server's share of a fetch from the
    /// network's).
    pub fn note_fetch_served(&self, ns: u64) {
        self.shared.served.0.fetch_add(ns, Relaxed);
        self.shared.served.1.fetch_add(1, Relaxed);
        self.shared.fetch_seconds.record(ns as f64 / 1e9);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            warn!("closing the engine: {e}");
        }
    }
}

impl Shared {
    /// Steps the core with `input` and routes its effects; returns the I/O left to the caller.
    fn step_locked(&self, l: &mut Locked, input: Input) -> Work {
        let now = if input.reads_time() {
            let now = self.clock.now_us();
            self.last_now.store(now, Relaxed);
            now
        } else {
            self.last_now.load(Relaxed)
        };
        let mut fx = std::mem::take(&mut l.fx);
        l.core.step(now, input, &mut fx);
        let mut work = Work::default();
        let mut followups = Vec::new();
        loop {
            for effect in fx.drain(..) {
                match effect {
                    Effect::Reply { conn, id, reply, close } => {
                        if !l.commits_started.is_empty()
                            && let Some(t) = l.commits_started.remove(&(conn, id))
                        {
                            self.commit_seconds.record(t.elapsed().as_secs_f64());
                        }
                        if let Some(sink) = l.sinks.get(&conn) {
                            sink.deliver(id, reply, close);
                        }
                    }
                    Effect::Done { ticket, result } if ticket == l.direct.0 => {
                        l.direct.1 = Some(result);
                    }
                    Effect::Done { ticket, result } => {
                        if let Some(slot) = l.slots.remove(&ticket) {
                            *slot.result.lock() = Some(result);
                            slot.ready.notify_one();
                        }
                    }
                    Effect::Append { lsn, record } => match self.log.append_shared(record) {
                        Ok(got) => {
                            // The core numbers records and the log stores them: a record
                            // at another LSN than the core's would make every later durable
                            // report, checkpoint and truncation wrong, so this is checked in
                            // every build, not only in debug ones.
                            assert_eq!(got, lsn, "the log and the core agree on LSNs");
                            work.sync = true;
                        }
                        Err(e) => followups.push(Input::LogFailed { why: e.to_string() }),
                    },
                    // A backup copies whole files, and a peer may be another engine in this
                    // process: outside the lock, by the caller.
                    e @ (Effect::Read { .. } | Effect::Backup { .. } | Effect::Peer { .. }) => {
                        work.effects.push(e)
                    }
                    e @ (Effect::Install(_) | Effect::Checkpoint(_)) => {
                        if self.threaded {
                            self.jobs.lock().push_back(e);
                            self.jobs_wake.notify_one();
                        } else {
                            work.effects.push(e);
                        }
                    }
                }
            }
            match followups.pop() {
                Some(input) => l.core.step(now, input, &mut fx),
                None => break,
            }
        }
        l.fx = fx;
        if !self.failure_seen.load(Relaxed)
            && let Some(why) = l.core.failed()
        {
            self.note_failure(why, now);
        }
        if self.threaded {
            self.wake_installer_for(l.core.next_deadline_us(), now);
        }
        work
    }

    /// Wakes the installer if the core's `deadline` comes after `now` and before the
    /// installer means to wake. Called with the core's lock held, which `tick_wait` also holds
    /// while it plans. A deadline already due is left to the installer's own wait (at most
    /// [`TICK_MIN`] once it planned for it): one that a tick did not move would otherwise
    /// wake it at every step.
    fn wake_installer_for(&self, deadline: Option<u64>, now: u64) {
        let Some(d) = deadline else { return };
        if d <= now || d >= self.installer_wake_us.load(Relaxed) {
            return;
        }
        // No second wake for the same deadline before the installer plans again.
        self.installer_wake_us.store(d, Relaxed);
        let _jobs = self.jobs.lock();
        self.rewake.store(true, Relaxed);
        self.jobs_wake.notify_one();
    }

    /// Says a storage failure once: at ERROR, with what follows and what to do, and in
    /// [`Engine::health`].
    #[cold]
    fn note_failure(&self, why: &str, now_us: u64) {
        if self.failure_seen.swap(true, Relaxed) {
            return;
        }
        *self.failure.lock() = Some((why.to_string(), now_us));
        error!(
            cause = why,
            "storage failed: {why}. The server refuses commits and new sessions from now on \
             and serves reads of committed data to the sessions open; nothing acknowledged is \
             lost. Free space or repair the disk, then restart the server (recovery replays \
             the log)"
        );
    }

    /// What the engine counts of itself (outside the core) for `ServerStats`: health,
    /// uptime, version and the files' sizes. Lists and measures files: call it unlocked.
    fn own_counters(&self) -> OwnCounters {
        let (database_bytes, log_disk_bytes) = self.disk_bytes();
        let health = if self.failure_seen.load(Relaxed) {
            thor_wire::stats::HEALTH_FAILED
        } else if self.read_only {
            thor_wire::stats::HEALTH_READ_ONLY
        } else {
            thor_wire::stats::HEALTH_SERVING
        };
        let version = |part: &str| part.parse::<u64>().unwrap_or(0);
        OwnCounters {
            health,
            uptime_s: self.clock.now_us().saturating_sub(self.started_us) / 1_000_000,
            server_version: thor_wire::stats::version_number(
                version(env!("CARGO_PKG_VERSION_MAJOR")),
                version(env!("CARGO_PKG_VERSION_MINOR")),
                version(env!("CARGO_PKG_VERSION_PATCH")),
            ),
            database_bytes,
            log_disk_bytes,
        }
    }

    /// The bytes of every file of the database, and of its log segments: listed and measured
    /// now (a handful of files). A file that cannot be measured counts as empty: these are
    /// gauges, not checks.
    fn disk_bytes(&self) -> (u64, u64) {
        let disk = &self.disk_side.disk;
        let Ok(names) = disk.list() else { return (0, 0) };
        let (mut all, mut log) = (0, 0);
        for name in names {
            let len = disk.open(&name, false).and_then(|f| f.len()).unwrap_or(0);
            all += len;
            if thor_storage::log::parse_segment_name(&self.log_prefix, &name).is_some() {
                log += len;
            }
        }
        (all, log)
    }

    /// Steps an input that reports completed I/O, then performs what follows.
    /// How long the installer may sleep before the core's next deadline, within
    /// [`TICK_MIN`]..=[`TICK`].
    /// Planned under the core's lock, so that a step that sets an earlier deadline sees the
    /// plan and wakes the installer ([`Shared::wake_installer_for`]).
    fn tick_wait(&self) -> Duration {
        let l = self.locked.lock();
        let now = self.clock.now_us();
        let wait = match l.core.next_deadline_us() {
            Some(d) => Duration::from_micros(d.saturating_sub(now)).clamp(TICK_MIN, TICK),
            None => TICK,
        };
        self.installer_wake_us.store(now.saturating_add(wait.as_micros() as u64), Relaxed);
        drop(l);
        wait
    }

    fn report(&self, input: Input) -> Work {
        let mut l = self.locked.lock();
        self.step_locked(&mut l, input)
    }

    /// Refuses a backup of a server that has failed: a failed install round or checkpoint may
    /// have left the files as only recovery can repair them.
    fn not_failed(&self) -> Result<(), EngineError> {
        match self.locked.lock().core.failed() {
            Some(why) => Err(EngineError::Failed(format!("no backup of a failed server: {why}"))),
            None => Ok(()),
        }
    }

    /// Performs one effect outside the core's lock and steps the core with its report. An
    /// install round or checkpoint holds installs (`DiskSide::hold_installs`) until the core
    /// knows its outcome; a backup asked for over the protocol goes where `backup_dir` allows.
    fn perform(&self, effect: &Effect) -> Work {
        let input = match effect {
            Effect::Peer { to, msg } => {
                match &self.peers {
                    Some(p) => p.send(*to, *msg),
                    None => debug!("no peers configured: dropped {msg:?} to server {}", to.0),
                }
                return Work::default();
            }
            Effect::Install(_) | Effect::Checkpoint(_) => {
                let _held = self.disk_side.hold_installs();
                return match self.disk_side.perform(effect, &*self.log) {
                    Some(input) => self.report(input),
                    None => Work::default(),
                };
            }
            Effect::Backup { conn, id, path } => {
                let result = io::resolve_backup_request(self.backup_dir.as_deref(), path)
                    .and_then(|dest| {
                        // A name like `2026/11/23` makes its directories, all inside the
                        // backup directory (the name has no `..`).
                        if let Some(parent) = dest.parent() {
                            std::fs::create_dir_all(parent).map_err(|source| StorageError::Io {
                                op: "create backup dirs",
                                name: parent.display().to_string(),
                                cause: source,
                            })?;
                        }
                        self.disk_side.backup_to_dir(&*self.log, &dest, || self.not_failed())
                    })
                    .map_err(|e| e.to_string());
                Input::BackedUp { conn: *conn, id: *id, result }
            }
            Effect::Read { .. } => {
                // Timed for `ServerStats::page_read_ns`: a read costs tens of microseconds
                // or more, two clock reads a few tens of nanoseconds.
                let t = std::time::Instant::now();
                let input = self.disk_side.perform(effect, &*self.log);
                self.page_read_ns.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
                match input {
                    Some(input) => input,
                    None => return Work::default(),
                }
            }
            other => match self.disk_side.perform(other, &*self.log) {
                Some(input) => input,
                None => return Work::default(),
            },
        };
        self.report(input)
    }

    fn settle(&self, mut work: Work) {
        loop {
            let mut next = Work::default();
            for effect in work.effects.drain(..) {
                let w = self.perform(&effect);
                next.effects.extend(w.effects);
                next.sync |= w.sync;
            }
            if work.sync {
                let input = match self.log.sync() {
                    Ok(lsn) => Input::Durable { lsn },
                    Err(e) => Input::LogFailed { why: e.to_string() },
                };
                let w = self.report(input);
                next.effects.extend(w.effects);
                next.sync |= w.sync;
            }
            if next.is_empty() {
                return;
            }
            work = next;
        }
    }

    /// Gives the core the log's and the network's counters, and the engine's own (for
    /// `Stats`).
    fn refresh_counters(&self, core: &mut Core, own: OwnCounters) {
        let (log_bytes, log_fsyncs, log_records) = self.log.counters();
        core.set_driver_counters(DriverCounters {
            log_bytes,
            log_fsyncs,
            log_records,
            bytes_received: self.traffic.0.load(Relaxed),
            bytes_sent: self.traffic.1.load(Relaxed),
            fetch_service_ns: self.served.0.load(Relaxed),
            fetches_served: self.served.1.load(Relaxed),
            page_read_ns: self.page_read_ns.load(Relaxed),
            health: own.health,
            uptime_s: own.uptime_s,
            server_version: own.server_version,
            database_bytes: own.database_bytes,
            log_disk_bytes: own.log_disk_bytes,
        });
    }
}

/// The engine's counters of itself, measured outside the core's lock ([`Shared::own_counters`]).
#[derive(Debug, Clone, Copy, Default)]
struct OwnCounters {
    /// `ServerStats::health`.
    health: u64,
    /// `ServerStats::uptime_s`.
    uptime_s: u64,
    /// `ServerStats::server_version`.
    server_version: u64,
    /// `ServerStats::database_bytes`.
    database_bytes: u64,
    /// `ServerStats::log_disk_bytes`.
    log_disk_bytes: u64,
}

/// The longest the installer goes without ticking the core when it has nothing else to do
/// (a deadline set by another thread's step is seen at the latest then).
const TICK: Duration = Duration::from_millis(100);

/// The shortest wait between ticks: a deadline that a tick does not move (nothing can be done
/// yet) is not polled in a loop.
const TICK_MIN: Duration = Duration::from_millis(1);

/// The installer thread: install rounds and checkpoints, and ticks at the core's deadline
/// ([`Core::next_deadline_us`]), or every [`TICK`] at the latest. A step on another thread
/// that sets an earlier deadline wakes it to plan again ([`Shared::wake_installer_for`]).
fn installer(s: &Shared) {
    loop {
        // Read before taking the jobs lock: a step holds the core's lock while it queues jobs.
        let wait = s.tick_wait();
        let (job, timed_out) = {
            let mut jobs = s.jobs.lock();
            let mut timed_out = false;
            if jobs.is_empty() && !s.stop.load(Relaxed) && !s.rewake.swap(false, Relaxed) {
                timed_out = s.jobs_wake.wait_for(&mut jobs, wait).timed_out();
                s.rewake.store(false, Relaxed);
            }
            if s.stop.load(Relaxed) && jobs.is_empty() {
                return;
            }
            (jobs.pop_front(), timed_out)
        };
        let work = match job {
            Some(effect) => s.perform(&effect),
            None if timed_out => s.report(Input::Tick),
            // Woken for an earlier deadline: plan the wait again.
            None => continue,
        };
        s.settle(work);
    }
}

/// A bulk load: objects written straight into fresh pages, bypassing the log and the MOB, for
/// creating large databases fast. Nothing is visible until [`BulkLoader::finish`]; a loader
/// dropped without finishing leaves the database as it was.
///
/// Objects are placed in the order they are given, like commits. The most recent
/// [`limits::BULK_WINDOW_PAGES`] pages stay in memory so that references in them can still be
/// patched with [`BulkLoader::object_mut`] (OO7 creates assemblies before the parts they point
/// to); older pages are written out.
#[derive(Debug)]
pub struct BulkLoader<'e> {
    /// The engine that handed over its allocator.
    engine: &'e Engine,
    /// Pages not yet written, oldest first.
    window: VecDeque<Vec<u8>>,
    /// The page id of `window[0]`.
    window_first: PageId,
    /// Where each object goes: the rule the offline rewrite plans by too.
    packer: PagePacker,
    /// Pages written so far.
    pages_written: u64,
    /// The slot count of every page written so far, in order.
    slots: Vec<u16>,
    /// Objects added.
    objects: u64,
    /// Object bytes added.
    bytes: u64,
    /// Whether `finish` ran.
    finished: bool,
}

/// What a bulk load did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkReport {
    /// Objects loaded.
    pub objects: u64,
    /// Object bytes loaded.
    pub bytes: u64,
    /// Pages written.
    pub pages: u64,
}

impl BulkLoader<'_> {
    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.engine.page_size()
    }

    fn last_page_id(&self) -> PageId {
        PageId::new(self.window_first.get() + self.window.len() as u32 - 1)
            .expect("window is not empty")
    }

    /// Adds an object and returns its oref. Its class must be a stored class or one added
    /// earlier in this load; the bytes are trusted (the loader is the database's own code).
    pub fn add(&mut self, obj: &[u8]) -> Result<Oref, EngineError> {
        page::check_object_bytes(obj, self.page_size())
            .map_err(|source| InvalidCommit::ObjectTooLarge { index: 0, cause: source })?;
        let oref = self.packer.place(obj.len())?;
        let id = oref.page().expect("the packer places objects in real pages");
        // The window is empty only before the first object: `write_out` keeps the last page.
        if self.window.is_empty() || id != self.last_page_id() {
            if self.window.len() == limits::BULK_WINDOW_PAGES {
                self.write_oldest(self.window.len() / 2)?;
            }
            self.window.push_back(empty_page(id, self.page_size()));
        }
        let last = self.window.back_mut().expect("a page is open");
        let oid = PageMut::open(last)
            .expect("loader pages are valid")
            .append(obj)
            .map_err(|cause| EngineError::CorruptPage { page: id, cause })?;
        assert_eq!(oid, oref.oid(), "the page packer and the page agree on where objects go");
        self.objects += 1;
        self.bytes += obj.len() as u64;
        Ok(oref)
    }

    /// The bytes of an object added in this load and still in memory, for patching references.
    pub fn object_mut(&mut self, oref: Oref) -> Result<&mut [u8], EngineError> {
        let page = oref.page().ok_or(EngineError::NoSuchPage(0))?;
        let idx = page
            .get()
            .checked_sub(self.window_first.get())
            .map(|i| i as usize)
            .filter(|&i| i < self.window.len())
            .ok_or(EngineError::NoSuchPage(page.get()))?;
        let buf = &mut self.window[idx];
        let range = PageView::parse(buf)
            .expect("loader pages are valid")
            .object_range(oref.oid())
            .ok_or(InvalidCommit::NoSuchObject(oref))?;
        Ok(&mut buf[range])
    }

    /// The bytes of an object added in this load and still in memory.
    pub fn object(&self, oref: Oref) -> Option<&[u8]> {
        let idx = oref.page()?.get().checked_sub(self.window_first.get())? as usize;
        let buf = self.window.get(idx)?;
        let range = PageView::parse(buf).ok()?.object_range(oref.oid())?;
        Some(&buf[range])
    }

    fn write_oldest(&mut self, n: usize) -> Result<(), EngineError> {
        let n = n.min(self.window.len());
        if n == 0 {
            return Ok(());
        }
        let mut run = Vec::with_capacity(n * self.page_size());
        for mut page in self.window.drain(..n) {
            self.slots
                .push(PageView::parse(&page).expect("loader pages are valid").slot_count() as u16);
            page::seal(&mut page);
            run.extend_from_slice(&page);
        }
        self.engine.shared.disk_side.pages.write_run(self.window_first.get(), &run)?;
        self.window_first = PageId::new(self.window_first.get() + n as u32).expect("in range");
        self.pages_written += n as u64;
        Ok(())
    }

    /// The page the load's first object goes to (the page after the allocation page when the
    /// load began). Objects are packed from there by the [`PagePacker`]'s rule, in the order
    /// given: a caller that knows every size in advance knows every oref in advance (a packer of
    /// its own from this page gives them).
    pub fn first_page(&self) -> PageId {
        PageId::new(self.window_first.get() - self.pages_written as u32)
            .expect("the first loaded page is a page")
    }

    /// Writes every page in memory but the last out now (the last may still receive
    /// objects). For loaders that patch nothing, so that their memory stays at a page or so
    /// instead of [`limits::BULK_WINDOW_PAGES`]; objects in pages written out can no longer be
    /// patched with [`BulkLoader::object_mut`].
    pub fn write_out(&mut self) -> Result<(), EngineError> {
        self.write_oldest(self.window.len().saturating_sub(1))
    }

    /// Objects added so far.
    pub fn objects(&self) -> u64 {
        self.objects
    }

    /// Object bytes added so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes the remaining pages, makes them durable and part of the database.
    pub fn finish(mut self) -> Result<BulkReport, EngineError> {
        self.finished = true;
        let first = self.first_page();
        let last_free =
            self.window.back().map_or(0, |p| PageView::parse(p).expect("valid").free_bytes());
        self.write_oldest(self.window.len())?;
        self.engine.shared.disk_side.pages.sync()?;
        let done = BulkDone { first, slots: std::mem::take(&mut self.slots), last_free };
        match self.engine.direct(DirectOp::BulkFinish(done)) {
            DirectResult::BulkEnded(r) => r?,
            other => unreachable!("bulk finish answered with {other:?}"),
        }
        Ok(BulkReport { objects: self.objects, bytes: self.bytes, pages: self.pages_written })
    }
}

impl Drop for BulkLoader<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Pages written so far lie beyond the allocation page: unreachable, and overwritten
            // (as fresh pages) when allocation gets there.
            let _ = self.engine.direct(DirectOp::BulkAbort);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn engine_is_shareable() {
        fn is<T: Send + Sync>() {}
        is::<super::Engine>();
    }
}
