//! The threaded driver of a replica group member: a [`GroupEngine`] runs one replica of a
//! thor server's group (a `thor_replica::Member`: the server's core on a Raft replica) over
//! real files, with threads, as [`crate::Engine`] runs a single server's core.
//!
//! # Why an engine beside `Engine`, not `Engine` generalized
//!
//! `Engine` is built around a log of its own (`CommitLog`: append under the lock, the
//! committer's fsync, checkpoints that truncate it), backups that copy that log, bulk loads and
//! read-only opens. A member has none of these: its log is the Raft journal, its appends are
//! proposals acknowledged by a majority, its core is replaced on a restart or an image install.
//! Threading a member through every path of `Engine` would put a group branch in each of them;
//! a separate engine keeps `Engine` as it is and offers, under the same names, the part of its
//! API that `thor-net`'s server uses ([`GroupEngine::connect`], [`GroupEngine::request`],
//! [`GroupEngine::settle`], [`GroupEngine::disconnect`], [`GroupEngine::protocol_error`],
//! [`GroupEngine::peer_message`], [`GroupEngine::health`], [`GroupEngine::server_stats`],
//! [`GroupEngine::halt`], [`GroupEngine::close`]), plus the embedded
//! [`GroupEngine::commit`] and [`GroupEngine::fetch`], and what a group needs:
//! [`GroupEngine::replica_message`], [`GroupEngine::group_stats`], [`GroupEngine::image_into`].
//!
//! # Threads and the lock
//!
//! ```text
//!   callers (embedded API, transports)        ticker thread (every `tick`)
//!      │ lock ─ Member::step / tick / step_peer / persisted ─ route Out ─ unlock
//!      │   Core(Reply) ────────► the connection's ReplySink (a queue; never blocks)
//!      │   Core(Done) ─────────► the waiting caller's slot
//!      │   DirectRefused ──────► the waiting caller's slot (NotLeader)
//!      │   Core(Install/Checkpoint), FetchImage ► the disk thread's queue (bounded)
//!      │   Send, Core(Read/Peer/Backup), ReadTail, journal sync, Restart ► GroupWork
//!      ▼
//!   the caller, unlocked (GroupWork): Raft messages ─► ReplicaNet::send; page and tail reads;
//!   journal flush (thor log group commit) ─► Member::persisted(durable LSN); a restart
//!   disk thread: install rounds and checkpoints (holding DiskSide::hold_installs), image
//!   fetches (ReplicaNet::fetch_image, the leader first, then every other voter)
//! ```
//!
//! *No disk I/O under the lock:* the member runs with [`Member::defer_sync`]: its Raft readies
//! are journalled (buffered) under the lock and made durable by whoever stepped it, after
//! unlocking, through the journal's thor log, whose group commit shares one fsync among every
//! thread that appended meanwhile (the same as `Engine`'s log). Two rare events sync under the
//! lock (see `Member::defer_sync`): a leader's snapshot installed, and a journal compaction at
//! a checkpoint.
//!
//! *Durability before messages:* the messages that report entries or votes persisted (append
//! responses, votes) are held by the replica until [`Member::persisted`] reports the flush
//! that covers them; only then are they handed out and sent. A leader's own entries count
//! towards its commit index only once persisted too, so an acknowledged commit is on a
//! majority's disks (raft-rs's rules, `thor_replica::Replica::persist`).
//!
//! # Durability
//!
//! [`GroupOptions::durability`] picks when an acknowledged commit counts as durable (see
//! `thor_replica::Replica`'s "Durability settings" for the full account):
//!
//! - [`Durability::Disk`] (the default): on a majority's disks, as above. Nothing
//!   acknowledged is lost by any crash, even of every replica at once.
//! - [`Durability::Memory`] (Thor's setting): in a majority's memory. A replica reports its
//!   entries persisted as soon as they are journalled (buffered), so a follower's append
//!   response leaves and the leader counts its own copy without waiting for a disk; a
//!   flusher thread fsyncs the journal behind, every [`GroupOptions::memory_flush`], outside
//!   the lock, never on an acknowledgement's path. Votes and term changes are still synced
//!   before their messages (a lost vote could elect two leaders in a term). One replica's
//!   crash loses nothing acknowledged (the others hold it in memory, and send it again), as
//!   long as the rest of its majority stays up and reachable until the crashed replica
//!   caught up. A *simultaneous power loss of a majority* loses the acknowledged commits of
//!   the last flush interval; a replica that had applied one and kept it stops loudly when it
//!   meets the group again (`ReplicaError::Diverged`: the engine fails, one ERROR line) and
//!   must be replaced by a new replica restored from an image. The disk thread fsyncs the
//!   journal before each install round and checkpoint, so a database never reflects an entry
//!   its journal could lose. Not caught: a replica that kept a lost entry only in a database
//!   checkpoint whose journal was since compacted past it (the entry's term is gone with the
//!   compaction, so the leader's appends show no conflict): its database silently holds a
//!   commit the group lost.
//!
//! *Stale work:* a restart or an image install replaces the member or its disk side; every
//! piece of work carries the generation it was made in, and a report from an older one is
//! dropped (its member is gone).
//!
//! # Sessions on every replica
//!
//! The member admits client sessions only while it serves: elsewhere its answer to a request
//! is `Error(NotLeader)`, closing. But every replica must take sessions of its group's other
//! replicas (Raft's messages flow from followers to the leader too) and of operators
//! (`thor group status` asks each replica's `Stats`). So a `Hello` (of a version that knows
//! groups) reaching a replica that does not serve opens a *side-door* session: it is stepped
//! into the member's core directly (which authenticates it as any session), never into the
//! member, and stays a side-door session for its life. On it the core answers `Hello`,
//! `Stats` (with the `group_*` counters), `Abort` and `Goodbye`; replica requests are
//! checked by [`GroupEngine::screen`] (the core's `screen`, on every replica) and served by
//! the transport; anything else is the leader's: `Error(NotLeader)`, closing, and the client
//! follows it. A restart or an image install replaces the core: the side-door sessions close
//! (`ShuttingDown`) and their owners reconnect.
//!
//! # Restart, image, storage failure
//!
//! - `Out::Restart` (a deposed leader, a lost proposal): the member is dropped, every
//!   connection is closed (`Error(ShuttingDown)` with close; clients reconnect to the leader)
//!   and every embedded caller told [`GroupError::Stopped`] (outcome unknown). Once the disk
//!   thread's round in progress ends and the old journal's buffered records are flushed, the
//!   member is reopened from its disk as after a crash ([`member_io::open_member`]).
//! - `Out::FetchImage`: the disk thread copies an image over the database with
//!   [`ReplicaNet::fetch_image`] (the leader the member knows first, then every other voter),
//!   reopens the disk side ([`member_io::install_image`]) and reports it.
//! - A storage failure (a journal fsync, an install round or checkpoint, a member error) is
//!   loud as in `Engine`: one ERROR line, [`Health::Failed`], [`GroupError::Failed`] for every
//!   waiting and later commit. The member is dropped (it stops voting and answering, like a
//!   crashed replica: the group goes on without it); the way back is a new open.
//!
//! # Creating a group
//!
//! [`GroupEngine::create`] makes an empty database and bootstraps the journal with the
//! founding voters; every founding replica does the same with the same `EngineOptions`
//! (page size, server id), so all start from the same empty database and the same membership
//! (`io::create` is deterministic). [`GroupEngine::open`] opens an existing replica.
//!
//! # Ticks
//!
//! The ticker steps `Member::tick` every [`GroupOptions::tick`] (default
//! [`limits::GROUP_TICK_MS_DEFAULT`] ms, election after [`GroupOptions::election_ticks`]):
//! Raft's clock, and a serving core's time (its fair-retry and two-phase timers fire at the
//! next tick, so at most one tick late).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};
use protobuf::Message as _;
use raft::eraftpb::Message;
use rustc_hash::{FxHashMap, FxHashSet};
use thor_core::{Lsn, Oref, PageId};
use thor_replica::{
    Durability, Member, MemberConfig, MemberError, Out, Phase, ReplicaConfig, Role,
};
use thor_server_core::superblock::Superblock;
use thor_server_core::{
    CommitIn, CommitOutcome, ConnId, DirectOp, DirectResult, Effect, EngineError, Input, Ticket,
};
use thor_storage::{Disk, Log, StorageError};
use thor_wire::version::VERSION_GROUPS;
use thor_wire::{ErrorCode, Reply, ReplyBody, Request, RequestBody, WireError};
use tracing::{debug, error, info, warn};

use crate::engine::{CommitRequest, EngineOptions, Health, ReplySink};
use crate::io::{self, Clock, DiskSide, SystemClock};
use crate::limits;
use crate::member_io;
use crate::replica_net::{ImageFetchError, ReplicaNet};

/// How a group engine runs.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// The server's settings (MOB, page cache, protocol, two-phase commit, peers...). Its `log`
    /// options are unused: the journal is the log.
    pub engine: EngineOptions,
    /// This replica's id in the group (non-zero).
    pub replica_id: u64,
    /// The Raft tick.
    pub tick: Duration,
    /// Ticks without a leader before campaigning (randomized in `[n, 2n)`).
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// The seed of the replica's randomized election timeouts.
    pub seed: u64,
    /// The member's settings (journal entries retained past a checkpoint).
    pub member: MemberConfig,
    /// When an acknowledged commit counts as durable: on a majority's disks
    /// ([`Durability::Disk`], the default) or in a majority's memory with the fsync behind
    /// ([`Durability::Memory`]; see the module documentation's "Durability").
    pub durability: Durability,
    /// In [`Durability::Memory`]: how often the journal is fsynced behind the
    /// acknowledgements (default [`limits::GROUP_MEMORY_FLUSH_MS_DEFAULT`] ms). Unused on disk.
    pub memory_flush: Duration,
}

impl GroupOptions {
    /// Replica `replica_id` with the default ticks and a seed from the OS.
    pub fn new(replica_id: u64, engine: EngineOptions) -> GroupOptions {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(replica_id);
        GroupOptions {
            engine,
            replica_id,
            tick: Duration::from_millis(limits::GROUP_TICK_MS_DEFAULT),
            election_ticks: limits::GROUP_ELECTION_TICKS_DEFAULT,
            heartbeat_ticks: limits::GROUP_HEARTBEAT_TICKS_DEFAULT,
            seed,
            member: MemberConfig::default(),
            durability: Durability::Disk,
            memory_flush: Duration::from_millis(limits::GROUP_MEMORY_FLUSH_MS_DEFAULT),
        }
    }

    fn replica_config(&self) -> ReplicaConfig {
        ReplicaConfig {
            election_ticks: self.election_ticks,
            heartbeat_ticks: self.heartbeat_ticks,
            durability: self.durability,
            ..ReplicaConfig::new(self.replica_id, self.seed)
        }
    }
}

/// Why a group engine call failed. Each variant says what the caller should do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// This replica does not serve: send the request to `leader` if known, else retry after
    /// an election. Nothing was written.
    #[error("this replica does not lead its group (leader: {leader:?})")]
    NotLeader {
        /// The leader this replica knows.
        leader: Option<u64>,
    },
    /// The replica stopped (deposed, or a proposal lost) while the commit was in flight: its
    /// outcome is unknown here. Ask the group's leader (a session resume learns it).
    #[error("the replica restarted; the commit's outcome is unknown here")]
    Stopped,
    /// The replica's storage failed (or it was halted): it serves nothing more until
    /// reopened.
    #[error("replica failed: {0}")]
    Failed(String),
    /// The core refused or failed the operation (an invalid commit, a conflict...).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// No answer within [`limits::GROUP_COMMIT_WAIT_MAX_MS`]: the outcome is unknown.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// Opening the member from its disk failed.
    #[error(transparent)]
    Open(#[from] member_io::OpenMemberError),
    /// The membership change cannot be made (a replica already a voter, not a voter, the
    /// leader itself, the group's last voter): fix the change. Nothing was proposed.
    #[error("membership change refused: {0}")]
    ChangeRefused(String),
    /// Another membership change is still in flight, or too much is proposed: retry once it
    /// applied.
    #[error("busy: {0}")]
    Busy(String),
}

/// What a replica knows of its group, for operators (`thor stats`, `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    /// This replica's id.
    pub id: u64,
    /// Whether its member is running (false while it reopens, after a failure or a halt).
    pub running: bool,
    /// Its Raft role.
    pub role: Option<Role>,
    /// Whether it serves clients (a leader that finished recovery).
    pub serving: bool,
    /// Its term.
    pub term: u64,
    /// The leader it knows.
    pub leader: Option<u64>,
    /// Raft's commit index.
    pub commit_index: u64,
    /// The last index applied (replayed, or a serving leader's own).
    pub applied_index: u64,
    /// The last index in its journal.
    pub last_index: u64,
    /// Its snapshot (compaction) index.
    pub snapshot_index: u64,
    /// The next LSN its core's log continues at.
    pub next_lsn: Lsn,
    /// On a leader, each follower's matched index and its lag behind the leader's last index:
    /// `(id, matched, lag)`.
    pub followers: Vec<(u64, u64, u64)>,
    /// Raft messages sent, received, and refused (undecodable, misaddressed, oversized).
    pub messages_sent: u64,
    /// See `messages_sent`.
    pub messages_received: u64,
    /// See `messages_sent`.
    pub messages_refused: u64,
    /// Journal flushes run by this engine (each may be shared by several threads).
    pub journal_syncs: u64,
    /// Times the member was reopened from its disk (`Out::Restart`).
    pub restarts: u64,
    /// Database images installed, and fetches that failed.
    pub images_installed: u64,
    /// See `images_installed`.
    pub image_failures: u64,
}

/// A direct operation's answer.
#[derive(Debug)]
enum Answer {
    Done(DirectResult),
    NotLeader(Option<u64>),
    Stopped,
    Failed(String),
}

#[derive(Default)]
struct Slot {
    result: Mutex<Option<Answer>>,
    ready: Condvar,
}

/// A job for the disk thread.
#[derive(Debug)]
enum Job {
    /// An install round or checkpoint of generation `.0`.
    Core(u64, Effect),
    /// A database image for generation `.0`, at checkpoint `.1` or later.
    Image(u64, Lsn),
}

/// Everything behind the lock.
struct Locked {
    /// The member; `None` while it reopens, after a failure or once halted.
    member: Option<Member>,
    /// Its database's disk side (replaced on an image install or a reopen).
    side: Arc<DiskSide>,
    /// The thor log under its journal.
    journal: Arc<Log>,
    /// Incremented whenever `member` or `side` is replaced: work of an older one is dropped.
    generation: u64,
    sinks: FxHashMap<ConnId, Arc<dyn ReplySink>>,
    /// Connections served by the side door (see *Sessions on every replica*): opened while
    /// the member did not serve, stepped into its core directly, never into the member.
    door: FxHashSet<ConnId>,
    slots: FxHashMap<Ticket, Arc<Slot>>,
    next_ticket: Ticket,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    refused: AtomicU64,
    syncs: AtomicU64,
    restarts: AtomicU64,
    images: AtomicU64,
    image_failures: AtomicU64,
}

struct Shared {
    id: u64,
    disk: Arc<dyn Disk>,
    opts: GroupOptions,
    net: Arc<dyn ReplicaNet>,
    clock: Arc<dyn Clock>,
    locked: Mutex<Locked>,
    jobs: Mutex<VecDeque<Job>>,
    jobs_wake: Condvar,
    /// Wakes the ticker early (a stop).
    tick_wake: (Mutex<()>, Condvar),
    stop: AtomicBool,
    failure: Mutex<Option<(String, u64)>>,
    failure_seen: AtomicBool,
    /// Held shared while a journal flush runs, exclusively by a restart while it flushes the
    /// old journal once before reopening: no flush of the old journal runs under the new one.
    journal_gate: RwLock<()>,
    /// Serializes restarts.
    restarting: Mutex<()>,
    next_conn: AtomicU64,
    counters: Counters,
    /// The index of the last membership change this replica applied, and its waiters
    /// ([`GroupEngine::change_membership`]).
    membership: (Mutex<u64>, Condvar),
}

/// I/O a caller performs after a step, without the lock ([`GroupEngine::settle`]).
#[derive(Default)]
#[must_use = "the work must be performed (GroupEngine::settle)"]
pub struct GroupWork {
    generation: u64,
    side: Option<Arc<DiskSide>>,
    journal: Option<Arc<Log>>,
    effects: Vec<Effect>,
    sends: Vec<Message>,
    tail: Option<PageId>,
    sync: bool,
    restart: bool,
}

impl std::fmt::Debug for GroupWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWork")
            .field("effects", &self.effects.len())
            .field("sends", &self.sends.len())
            .field("sync", &self.sync)
            .field("restart", &self.restart)
            .finish_non_exhaustive()
    }
}

impl GroupWork {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
            && self.sends.is_empty()
            && self.tail.is_none()
            && !self.sync
            && !self.restart
    }

    /// Adds `o`'s work to this. Work of an older generation than the other's is dropped: its
    /// member is gone (its messages may be lost, as any may; its reads and syncs would report
    /// to a member that never asked).
    fn absorb(&mut self, o: GroupWork) {
        if o.is_empty() || (!self.is_empty() && o.generation < self.generation) {
            return;
        }
        if self.is_empty() || o.generation > self.generation {
            *self = o;
            return;
        }
        self.effects.extend(o.effects);
        self.sends.extend(o.sends);
        self.tail = o.tail.or(self.tail);
        self.sync |= o.sync;
        self.restart |= o.restart;
    }
}

/// One replica of a thor server's group, driven by threads. See the module documentation.
pub struct GroupEngine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for GroupEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupEngine").field("id", &self.shared.id).finish_non_exhaustive()
    }
}

fn shutting_down(message: &str) -> Reply {
    Reply {
        body: ReplyBody::Error { code: ErrorCode::ShuttingDown, message: message.to_string() },
        invalidations: Vec::new(),
        wanted: Vec::new(),
        seen: None,
    }
}

impl GroupEngine {
    /// Creates an empty database on `disk` (which must hold none) as founding replica
    /// `opts.replica_id` of a group of `voters`, and opens it. Every founder does the same with
    /// the same engine options (see the module documentation).
    pub fn create(
        disk: Arc<dyn Disk>,
        opts: GroupOptions,
        voters: &[u64],
        net: Arc<dyn ReplicaNet>,
    ) -> Result<Arc<GroupEngine>, GroupError> {
        io::create(&*disk, opts.engine.page_size, opts.engine.server_id)?;
        GroupEngine::start(disk, opts, Some(voters), net)
    }

    /// Opens the replica on `disk` (created by [`GroupEngine::create`]) as after a crash.
    pub fn open(
        disk: Arc<dyn Disk>,
        opts: GroupOptions,
        net: Arc<dyn ReplicaNet>,
    ) -> Result<Arc<GroupEngine>, GroupError> {
        GroupEngine::start(disk, opts, None, net)
    }

    fn start(
        disk: Arc<dyn Disk>,
        opts: GroupOptions,
        founders: Option<&[u64]>,
        net: Arc<dyn ReplicaNet>,
    ) -> Result<Arc<GroupEngine>, GroupError> {
        let mut opened = member_io::open_member(
            disk.clone(),
            opts.engine.core_config(),
            opts.member,
            opts.replica_config(),
            founders,
        )?;
        opened.member.defer_sync();
        let shared = Arc::new(Shared {
            id: opts.replica_id,
            disk,
            net,
            clock: Arc::new(SystemClock),
            locked: Mutex::new(Locked {
                member: Some(opened.member),
                side: Arc::new(opened.disk_side),
                journal: opened.journal,
                generation: 1,
                sinks: FxHashMap::default(),
                door: FxHashSet::default(),
                slots: FxHashMap::default(),
                next_ticket: 0,
            }),
            opts,
            jobs: Mutex::new(VecDeque::new()),
            jobs_wake: Condvar::new(),
            tick_wake: (Mutex::new(()), Condvar::new()),
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
            failure_seen: AtomicBool::new(false),
            journal_gate: RwLock::new(()),
            restarting: Mutex::new(()),
            next_conn: AtomicU64::new(1),
            counters: Counters::default(),
            membership: (Mutex::new(0), Condvar::new()),
        });
        let mut threads = Vec::new();
        let mut kinds = vec![
            ("thor-group-tick", ticker as fn(&Shared)),
            ("thor-group-disk", disk_thread as fn(&Shared)),
        ];
        if shared.opts.durability == Durability::Memory {
            kinds.push(("thor-group-flush", flusher as fn(&Shared)));
        }
        for (name, f) in kinds {
            let s = shared.clone();
            let h = std::thread::Builder::new().name(name.into()).spawn(move || f(&s)).map_err(
                |cause| StorageError::Io { op: "spawn group thread", name: name.into(), cause },
            );
            match h {
                Ok(h) => threads.push(h),
                Err(e) => {
                    shared.stop_threads(threads);
                    return Err(GroupError::Engine(e.into()));
                }
            }
        }
        Ok(Arc::new(GroupEngine { shared, threads: Mutex::new(threads) }))
    }

    /// This replica's id.
    pub fn replica_id(&self) -> u64 {
        self.shared.id
    }

    /// Whether the member runs (false while it reopens, after a failure or a halt).
    pub fn is_running(&self) -> bool {
        self.shared.locked.lock().member.is_some()
    }

    /// Whether the replica serves clients now (it leads and finished recovery).
    pub fn is_serving(&self) -> bool {
        self.shared.locked.lock().member.as_ref().is_some_and(Member::is_serving)
    }

    /// Takes a Raft message (raft-rs's protobuf encoding) from replica `from`. Bytes that do
    /// not decode, are larger than [`limits::REPLICA_MESSAGE_BYTES_MAX`], or do not claim to
    /// come from `from` to this replica are dropped and counted (`messages_refused`): Raft
    /// recovers from lost messages. Never panics on bad bytes. (raft-rs's protobuf 2 codec
    /// can be crashed by crafted messages, RUSTSEC-2024-0437: a transport must deliver only
    /// what authenticated group members send.)
    pub fn replica_message(&self, from: u64, msg: Bytes) {
        self.replica_messages([(from, msg)]);
    }

    /// [`GroupEngine::replica_message`] of several messages at once (each `(from, bytes)`):
    /// all are stepped, then the I/O they leave is performed once, so that one journal flush
    /// covers every append among them (a transport hands over what queued while the last
    /// flush ran: one fsync per batch rather than per message).
    pub fn replica_messages(&self, msgs: impl IntoIterator<Item = (u64, Bytes)>) {
        if self.shared.stop.load(Relaxed) {
            return;
        }
        let refused = |why: &str| {
            self.shared.counters.refused.fetch_add(1, Relaxed);
            debug!(why, "replica message refused");
        };
        let mut work = GroupWork::default();
        for (from, msg) in msgs {
            if msg.len() > limits::REPLICA_MESSAGE_BYTES_MAX {
                refused("oversized");
                continue;
            }
            let m = match Message::parse_from_bytes(&msg) {
                Ok(m) => m,
                Err(_) => {
                    refused("undecodable");
                    continue;
                }
            };
            if m.from != from || m.to != self.shared.id {
                refused("misaddressed");
                continue;
            }
            self.shared.counters.received.fetch_add(1, Relaxed);
            work.absorb(self.shared.step(|m2, now, out| m2.step_peer(now, m, out)));
        }
        self.settle(work);
    }

    /// Commits `req` through the embedded API: answered once a majority of the group holds it
    /// durably, or refused ([`GroupError::NotLeader`] on a replica that does not serve).
    pub fn commit(&self, req: CommitRequest) -> Result<CommitOutcome, GroupError> {
        self.commit_in(req.into())
    }

    /// [`GroupEngine::commit`] for a commit already in shared buffers.
    pub fn commit_in(&self, c: CommitIn) -> Result<CommitOutcome, GroupError> {
        match self.direct(DirectOp::Commit(c))? {
            DirectResult::Committed(r) => Ok(r?),
            other => unreachable!("commit answered with {other:?}"),
        }
    }

    /// The current bytes of `page` as the serving core sees them (installed image with every
    /// committed version applied). Only a serving replica answers.
    pub fn fetch(&self, page: PageId) -> Result<Bytes, GroupError> {
        match self.direct(DirectOp::Fetch(page))? {
            DirectResult::Page(r) => Ok(r?),
            other => unreachable!("fetch answered with {other:?}"),
        }
    }

    /// The persistent root object.
    pub fn root(&self) -> Option<Oref> {
        self.shared.locked.lock().member.as_ref().map(|m| m.core().root())
    }

    fn direct(&self, op: DirectOp) -> Result<DirectResult, GroupError> {
        let slot = Arc::new(Slot::default());
        let work = {
            let mut l = self.shared.locked.lock();
            if l.member.is_none() {
                return Err(self.shared.not_running());
            }
            l.next_ticket += 1;
            let ticket = l.next_ticket;
            l.slots.insert(ticket, slot.clone());
            self.shared
                .step_locked(&mut l, |m, now, out| m.step(now, Input::Direct { ticket, op }, out))
        };
        self.settle(work);
        let deadline = Instant::now() + Duration::from_millis(limits::GROUP_COMMIT_WAIT_MAX_MS);
        let mut r = slot.result.lock();
        while r.is_none() {
            if slot.ready.wait_until(&mut r, deadline).timed_out() && r.is_none() {
                return Err(GroupError::TimedOut(Duration::from_millis(
                    limits::GROUP_COMMIT_WAIT_MAX_MS,
                )));
            }
        }
        match r.take().expect("answered") {
            Answer::Done(d) => Ok(d),
            Answer::NotLeader(leader) => Err(GroupError::NotLeader { leader }),
            Answer::Stopped => Err(GroupError::Stopped),
            Answer::Failed(why) => Err(GroupError::Failed(why)),
        }
    }

    /// Changes the group's membership (adds a replica, `context` its address, or removes
    /// one): proposed at this replica, which must be the serving leader, and answered once
    /// the change is applied here (at most [`limits::GROUP_COMMIT_WAIT_MAX_MS`]). Returns the
    /// change's Raft index. Errors: [`GroupError::NotLeader`] (ask the leader),
    /// [`GroupError::ChangeRefused`], [`GroupError::Busy`], [`GroupError::TimedOut`] (the
    /// outcome is unknown: look at the voters in `thor group status`).
    pub fn change_membership(
        &self,
        change: thor_replica::MembershipChange,
    ) -> Result<u64, GroupError> {
        use thor_replica::ProposeError;
        let (proposed, work) = {
            let mut l = self.shared.locked.lock();
            let Some(m) = l.member.as_mut() else { return Err(self.shared.not_running()) };
            let proposed = m.propose_membership(change).map_err(|e| match e {
                ProposeError::NotLeader { leader } => GroupError::NotLeader { leader },
                ProposeError::Busy => GroupError::Busy(e.to_string()),
                _ => GroupError::ChangeRefused(e.to_string()),
            })?;
            // The proposal's messages go out now rather than at the next tick.
            let work = self.shared.step_locked(&mut l, |m, now, out| m.tick(now, out));
            (proposed, work)
        };
        self.settle(work);
        let wait = Duration::from_millis(limits::GROUP_COMMIT_WAIT_MAX_MS);
        let deadline = Instant::now() + wait;
        let mut last = self.shared.membership.0.lock();
        while *last < proposed.index {
            if self.shared.membership.1.wait_until(&mut last, deadline).timed_out()
                && *last < proposed.index
            {
                return Err(GroupError::TimedOut(wait));
            }
        }
        Ok(proposed.index)
    }

    // ---- The connection API, as `Engine`'s, for transports. ----

    /// Opens a connection whose replies go to `sink`. A replica that does not serve answers
    /// its first request `Error(NotLeader)` naming the leader, and closes it.
    pub fn connect(&self, sink: Arc<dyn ReplySink>) -> ConnId {
        let conn = self.shared.next_conn.fetch_add(1, Relaxed);
        let work = {
            let mut l = self.shared.locked.lock();
            l.sinks.insert(conn, sink);
            self.shared.step_locked(&mut l, |m, now, out| m.step(now, Input::Connect { conn }, out))
        };
        self.settle(work);
        conn
    }

    /// Hands a decoded request of `conn` to the member; the returned work must be performed
    /// ([`GroupEngine::settle`]) off any async executor. A `Hello` that reaches a replica that
    /// does not serve opens a side-door session (see the module documentation, *Sessions on
    /// every replica*).
    pub fn request(&self, conn: ConnId, id: u64, req: Request) -> GroupWork {
        let mut l = self.shared.locked.lock();
        let Some(member) = l.member.as_ref() else {
            if let Some(sink) = l.sinks.get(&conn) {
                sink.deliver(id, shutting_down("this replica is restarting or failed"), true);
            }
            return GroupWork::default();
        };
        let door = l.door.contains(&conn)
            || (!member.is_serving()
                && !member.admitted().any(|c| c == conn)
                && matches!(&req.body, RequestBody::Hello(h) if h.max_version >= VERSION_GROUPS));
        if door {
            self.shared.side_door(&mut l, conn, id, req);
            return GroupWork::default();
        }
        self.shared
            .step_locked(&mut l, |m, now, out| m.step(now, Input::Request { conn, id, req }, out))
    }

    /// Checks a replica request (`thor_wire::replica`) of `conn` that the transport serves
    /// itself, as the core checks its own requests (`Core::screen`): on every replica, serving
    /// or not, since Raft's messages flow both ways. False: refused (the answer went to the
    /// connection's sink) or held.
    pub fn screen(&self, conn: ConnId, id: u64, req: &Request) -> bool {
        let mut l = self.shared.locked.lock();
        let Some(member) = l.member.as_mut() else {
            if let Some(sink) = l.sinks.get(&conn) {
                sink.deliver(id, shutting_down("this replica is restarting or failed"), true);
            }
            return false;
        };
        let mut fx = Vec::new();
        let ok = member.core_mut().screen(conn, id, req, &mut fx);
        self.shared.route_door(&l, fx);
        ok
    }

    /// The protocol settings (credentials, connection and frame limits).
    pub fn protocol(&self) -> thor_server_core::ProtocolConfig {
        self.shared.opts.engine.protocol.clone()
    }

    /// Reports bytes from `conn` that did not decode.
    pub fn protocol_error(&self, conn: ConnId, id: u64, error: WireError) {
        let work = {
            let mut l = self.shared.locked.lock();
            if l.door.contains(&conn) {
                let now = self.shared.now();
                let mut fx = Vec::new();
                if let Some(m) = l.member.as_mut() {
                    m.core_mut().step(now, Input::ProtocolError { conn, id, error }, &mut fx);
                }
                self.shared.route_door(&l, fx);
                return;
            }
            self.shared.step_locked(&mut l, |m, now, out| {
                m.step(now, Input::ProtocolError { conn, id, error }, out)
            })
        };
        self.settle(work);
    }

    /// Closes `conn`.
    pub fn disconnect(&self, conn: ConnId) {
        let work = {
            let mut l = self.shared.locked.lock();
            l.sinks.remove(&conn);
            if l.door.remove(&conn) {
                let now = self.shared.now();
                let mut fx = Vec::new();
                if let Some(m) = l.member.as_mut() {
                    m.core_mut().step(now, Input::Disconnect { conn }, &mut fx);
                }
                return;
            }
            self.shared
                .step_locked(&mut l, |m, now, out| m.step(now, Input::Disconnect { conn }, out))
        };
        self.settle(work);
    }

    /// Delivers a message from another server (two-phase commit).
    pub fn peer_message(&self, msg: thor_wire::PeerMsg) {
        let work = self.shared.step(|m, now, out| m.step(now, Input::Peer { msg }, out));
        self.settle(work);
    }

    /// Performs `work` on this thread (blocking I/O), and whatever it leads to.
    pub fn settle(&self, work: GroupWork) {
        self.shared.settle(work);
    }

    /// Whether the replica can serve (as far as its storage goes; [`GroupStats`] says whether
    /// it leads): [`Health::Failed`] after a storage failure or a halt.
    pub fn health(&self) -> Health {
        match self.shared.failure.lock().clone() {
            Some((cause, since_us)) => Health::Failed { cause, since_us },
            None => Health::Serving,
        }
    }

    /// The serving core's counters as the wire's `Stats` carries them (`None` while the
    /// member reopens or after a failure).
    pub fn server_stats(&self) -> Option<thor_wire::ServerStats> {
        let l = self.shared.locked.lock();
        let mut s = l.member.as_ref().map(|m| m.core().server_stats())?;
        self.shared.fill_stats(&l, &mut s);
        Some(s)
    }

    /// Role, term, indexes, leader and followers' lag.
    pub fn group_stats(&self) -> GroupStats {
        let l = self.shared.locked.lock();
        self.shared.group_stats(&l)
    }

    /// This replica's newest checkpoint LSN (its superblock's): the least an image of it
    /// holds ([`GroupEngine::image_into`]).
    pub fn checkpoint(&self) -> Result<Lsn, EngineError> {
        let side = {
            let l = self.shared.locked.lock();
            if l.member.is_none() || self.shared.stop.load(Relaxed) {
                return Err(EngineError::Failed("this replica is not running".into()));
            }
            l.side.clone()
        };
        Ok(io::read_superblock(&*side.disk)?.checkpoint)
    }

    /// Copies this replica's database image (superblock, page file, double-write buffer) into
    /// `dest` if its checkpoint is at least `min_lsn`: what another replica's
    /// `ReplicaNet::fetch_image` asks of this one. Install rounds wait meanwhile.
    pub fn image_into(&self, min_lsn: Lsn, dest: &dyn Disk) -> Result<Superblock, ImageFetchError> {
        let side = {
            let l = self.shared.locked.lock();
            if l.member.is_none() || self.shared.stop.load(Relaxed) {
                return Err(ImageFetchError::Unreachable {
                    replica: self.shared.id,
                    reason: "not running".into(),
                });
            }
            l.side.clone()
        };
        let have = io::read_superblock(&*side.disk)?.checkpoint;
        if have < min_lsn {
            return Err(ImageFetchError::TooOld { replica: self.shared.id, have, want: min_lsn });
        }
        Ok(side.image_into(dest)?)
    }

    /// Stops as a crash would: the threads end, the member is dropped, what the journal had
    /// not synced is lost (as the disk would lose it). Waiting callers get
    /// [`GroupError::Failed`].
    pub fn halt(&self) {
        self.shared.stop.store(true, Relaxed);
        let threads = std::mem::take(&mut *self.threads.lock());
        self.shared.stop_threads(threads);
        let mut l = self.shared.locked.lock();
        l.member = None;
        l.generation += 1;
        self.shared.drop_callers(&mut l, || Answer::Failed("halted".into()));
    }

    /// Stops cleanly: the threads end and the journal is flushed. Nothing is installed: a
    /// reopen replays the journal from the checkpoint, as followers always do.
    pub fn close(&self) -> Result<(), GroupError> {
        let journal = self.shared.locked.lock().journal.clone();
        self.halt();
        journal.flush().map_err(|e| GroupError::Engine(e.into()))
    }
}

impl Drop for GroupEngine {
    fn drop(&mut self) {
        if !self.shared.stop.load(Relaxed)
            && let Err(e) = self.close()
        {
            warn!("closing the group engine: {e}");
        }
    }
}

impl Shared {
    /// See [`GroupEngine::group_stats`].
    fn group_stats(&self, l: &Locked) -> GroupStats {
        let c = &self.counters;
        let mut g = GroupStats {
            id: self.id,
            running: l.member.is_some(),
            role: None,
            serving: false,
            term: 0,
            leader: None,
            commit_index: 0,
            applied_index: 0,
            last_index: 0,
            snapshot_index: 0,
            next_lsn: Lsn(0),
            followers: Vec::new(),
            messages_sent: c.sent.load(Relaxed),
            messages_received: c.received.load(Relaxed),
            messages_refused: c.refused.load(Relaxed),
            journal_syncs: c.syncs.load(Relaxed),
            restarts: c.restarts.load(Relaxed),
            images_installed: c.images.load(Relaxed),
            image_failures: c.image_failures.load(Relaxed),
        };
        if let Some(m) = &l.member {
            let s = m.status();
            g.role = Some(s.replica.role);
            g.serving = matches!(s.phase, Phase::Serving { .. });
            g.term = s.replica.term;
            g.leader = s.replica.leader;
            g.commit_index = s.replica.commit;
            g.applied_index = s.replica.applied;
            g.last_index = s.replica.last_index;
            g.snapshot_index = s.replica.snapshot_index;
            g.next_lsn = s.next_lsn;
            g.followers = m
                .replica()
                .progress()
                .into_iter()
                .map(|(id, matched)| (id, matched, s.replica.last_index.saturating_sub(matched)))
                .collect();
        }
        g
    }

    /// Fills the `group_*` counters of `s` (a `Stats` reply, or [`GroupEngine::server_stats`]).
    fn fill_stats(&self, l: &Locked, s: &mut thor_wire::ServerStats) {
        use thor_wire::stats::{
            GROUP_ROLE_CANDIDATE, GROUP_ROLE_FOLLOWER, GROUP_ROLE_PROMOTING, GROUP_ROLE_SERVING,
        };
        let g = self.group_stats(l);
        s.group_replica_id = g.id;
        s.group_voters = l.member.as_ref().map_or(0, |m| m.voters().len() as u64);
        s.group_role = match (g.role, g.serving) {
            (None, _) => 0,
            (Some(Role::Leader), true) => GROUP_ROLE_SERVING,
            (Some(Role::Leader), false) => GROUP_ROLE_PROMOTING,
            (Some(Role::Candidate | Role::PreCandidate), _) => GROUP_ROLE_CANDIDATE,
            (Some(Role::Follower), _) => GROUP_ROLE_FOLLOWER,
        };
        s.group_term = g.term;
        s.group_leader = g.leader.unwrap_or(0);
        s.group_commit_index = g.commit_index;
        s.group_applied_index = g.applied_index;
        s.group_lag_max = g
            .followers
            .iter()
            .filter(|(id, _, _)| *id != g.id)
            .map(|(_, matched, _)| g.commit_index.saturating_sub(*matched))
            .max()
            .unwrap_or(0);
        s.group_restarts = g.restarts;
        s.group_images_installed = g.images_installed;
    }

    /// Delivers the replies of a side-door step (the core's own, stepped directly), with the
    /// group's counters in a `Stats`.
    fn route_door(&self, l: &Locked, fx: Vec<Effect>) {
        for e in fx {
            match e {
                Effect::Reply { conn, id, mut reply, close } => {
                    if let ReplyBody::Stats(s) = &mut reply.body {
                        self.fill_stats(l, s);
                    }
                    if let Some(sink) = l.sinks.get(&conn) {
                        sink.deliver(id, reply, close);
                    }
                }
                other => debug!(replica = self.id, "side door: {other:?} ignored"),
            }
        }
    }

    /// Serves a request of a side-door connection: `Hello`, `Stats`, `Abort` and `Goodbye`
    /// by the member's core directly; anything else is the leader's to serve
    /// (`Error(NotLeader)`, closing).
    fn side_door(&self, l: &mut Locked, conn: ConnId, id: u64, req: Request) {
        let now = self.now();
        let mut fx = Vec::new();
        let Some(m) = l.member.as_mut() else { return };
        if l.door.insert(conn) {
            m.core_mut().step(now, Input::Connect { conn }, &mut fx);
        }
        match req.body {
            RequestBody::Hello(_)
            | RequestBody::Stats
            | RequestBody::Abort
            | RequestBody::Goodbye => {
                m.core_mut().step(now, Input::Request { conn, id, req }, &mut fx);
            }
            _ => {
                let leader = m.status().replica.leader;
                let message = thor_wire::not_leader_message(leader);
                let reply = Reply {
                    body: ReplyBody::Error { code: ErrorCode::NotLeader, message },
                    invalidations: Vec::new(),
                    wanted: Vec::new(),
                    seen: None,
                };
                fx.push(Effect::Reply { conn, id, reply, close: true });
            }
        }
        self.route_door(l, fx);
    }

    fn now(&self) -> u64 {
        self.clock.now_us()
    }

    fn not_running(&self) -> GroupError {
        match self.failure.lock().clone() {
            Some((cause, _)) => GroupError::Failed(cause),
            None if self.stop.load(Relaxed) => GroupError::Failed("halted".into()),
            None => GroupError::Stopped,
        }
    }

    fn stop_threads(&self, threads: Vec<JoinHandle<()>>) {
        self.stop.store(true, Relaxed);
        {
            let _j = self.jobs.lock();
            self.jobs_wake.notify_all();
        }
        {
            let _t = self.tick_wake.0.lock();
            self.tick_wake.1.notify_all();
        }
        for t in threads {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    fn step(
        &self,
        f: impl FnOnce(&mut Member, u64, &mut Vec<Out>) -> Result<(), MemberError>,
    ) -> GroupWork {
        let mut l = self.locked.lock();
        self.step_locked(&mut l, f)
    }

    /// Steps the member with `f` and routes what it asks; returns the I/O left to the caller.
    fn step_locked(
        &self,
        l: &mut Locked,
        f: impl FnOnce(&mut Member, u64, &mut Vec<Out>) -> Result<(), MemberError>,
    ) -> GroupWork {
        let mut work = GroupWork {
            generation: l.generation,
            side: Some(l.side.clone()),
            journal: Some(l.journal.clone()),
            ..GroupWork::default()
        };
        let Some(member) = l.member.as_mut() else { return GroupWork::default() };
        let now = self.now();
        let mut out = Vec::new();
        let r = f(member, now, &mut out);
        work.sync = member.needs_sync();
        let core_failed = member.core().failed().map(str::to_string);
        let mut overflow = false;
        let mut removed = false;
        for o in out {
            match o {
                Out::Core(Effect::Reply { conn, id, mut reply, close }) => {
                    if let ReplyBody::Stats(s) = &mut reply.body {
                        self.fill_stats(l, s);
                    }
                    if let Some(sink) = l.sinks.get(&conn) {
                        sink.deliver(id, reply, close);
                    }
                }
                Out::Core(Effect::Done { ticket, result }) => {
                    fill(l, ticket, Answer::Done(result));
                }
                Out::DirectRefused { ticket, leader } => fill(l, ticket, Answer::NotLeader(leader)),
                Out::Core(e @ (Effect::Install(_) | Effect::Checkpoint(_))) => {
                    overflow |= !self.queue_job(Job::Core(l.generation, e));
                }
                Out::Core(Effect::Append { lsn, .. }) => {
                    // The member turns appends into proposals; one here is a member bug.
                    error!(lsn = lsn.0, "a group member passed an append through");
                }
                Out::Core(e) => work.effects.push(e),
                Out::Send(m) => work.sends.push(m),
                Out::ReadTail { page } => work.tail = Some(page),
                Out::FetchImage { lsn, .. } => {
                    overflow |= !self.queue_job(Job::Image(l.generation, lsn));
                }
                Out::Restart(why) => {
                    info!(replica = self.id, ?why, "the member stops and reopens from its disk");
                    work.restart = true;
                }
                Out::Membership { index, voters, removed: gone, context } => {
                    info!(replica = self.id, index, ?voters, "the group's membership changed");
                    self.net.membership(&voters, &context);
                    {
                        let mut last = self.membership.0.lock();
                        *last = (*last).max(index);
                        self.membership.1.notify_all();
                    }
                    removed |= gone;
                }
            }
        }
        if removed {
            // Removed from its group: it takes no part any more. Its files stay as they are
            // (the operator deletes them); reopened, it would only follow as a non-voter.
            warn!(
                replica = self.id,
                "this replica was removed from its group: it stops serving and voting"
            );
            l.member = None;
            l.generation += 1;
            self.drop_callers(l, || {
                Answer::Failed("this replica was removed from its group".into())
            });
            return GroupWork::default();
        }
        if let Err(e) = r {
            self.fail(l, &format!("replica {}: {e}", self.id));
            return GroupWork::default();
        }
        if let Some(why) = core_failed {
            self.fail(l, &why);
            return GroupWork::default();
        }
        if overflow {
            self.fail(l, "more disk jobs than a member asks for: a member bug");
            return GroupWork::default();
        }
        work
    }

    /// Queues a disk job; false past [`limits::GROUP_DISK_JOBS_MAX`] (no correct member asks
    /// for this many, and losing an install round would wedge the core: the caller fails).
    fn queue_job(&self, job: Job) -> bool {
        let mut jobs = self.jobs.lock();
        if jobs.len() >= limits::GROUP_DISK_JOBS_MAX {
            return false;
        }
        jobs.push_back(job);
        self.jobs_wake.notify_one();
        true
    }

    /// A storage failure or a member error: said once at ERROR, the member dropped, every
    /// caller told.
    fn fail(&self, l: &mut Locked, why: &str) {
        if !self.failure_seen.swap(true, Relaxed) {
            *self.failure.lock() = Some((why.to_string(), self.now()));
            error!(
                replica = self.id,
                cause = why,
                "replica failed: {why}. It stops (no votes, no answers; the rest of its group \
                 goes on) and serves nothing more. Repair the disk, then restart it: it reopens \
                 from its disk and catches up from the group"
            );
        }
        l.member = None;
        l.generation += 1;
        let why = why.to_string();
        self.drop_callers(l, || Answer::Failed(why.clone()));
    }

    /// Closes every connection and answers every waiting caller (a restart, a failure).
    fn drop_callers(&self, l: &mut Locked, answer: impl Fn() -> Answer) {
        l.door.clear();
        for (_, sink) in l.sinks.drain() {
            sink.deliver(
                0,
                shutting_down("this replica stopped: reconnect to the group's leader"),
                true,
            );
        }
        for (_, slot) in l.slots.drain() {
            *slot.result.lock() = Some(answer());
            slot.ready.notify_one();
        }
    }

    fn settle(&self, mut work: GroupWork) {
        while !work.is_empty() {
            let mut next = GroupWork::default();
            let generation = work.generation;
            for m in work.sends.drain(..) {
                let to = m.to;
                match m.write_to_bytes() {
                    Ok(b) => {
                        self.counters.sent.fetch_add(1, Relaxed);
                        self.net.send(to, Bytes::from(b));
                    }
                    Err(e) => warn!(to, "a Raft message did not encode: {e}"),
                }
            }
            if work.sync
                && let Some(journal) = &work.journal
            {
                let flushed = {
                    let _gate = self.journal_gate.read();
                    self.counters.syncs.fetch_add(1, Relaxed);
                    journal.flush().map(|()| journal.durable_lsn())
                };
                let w = match flushed {
                    Ok(durable) => {
                        self.step_gen(generation, |m, now, out| m.persisted(now, durable, out))
                    }
                    Err(e) => {
                        let mut l = self.locked.lock();
                        if l.generation == generation {
                            self.fail(&mut l, &format!("journal fsync: {e}"));
                        }
                        GroupWork::default()
                    }
                };
                next.absorb(w);
            }
            if let Some(side) = &work.side {
                for e in work.effects.drain(..) {
                    let input = match &e {
                        Effect::Peer { to, msg } => {
                            match &self.opts.engine.peers {
                                Some(p) => p.send(*to, *msg),
                                None => debug!("no peers configured: dropped {msg:?}"),
                            }
                            continue;
                        }
                        other => member_io::perform(side, other),
                    };
                    if let Some(input) = input {
                        next.absorb(
                            self.step_gen(generation, |m, now, out| m.step(now, input, out)),
                        );
                    }
                }
                if let Some(page) = work.tail.take() {
                    let img = member_io::read_tail(side, page);
                    next.absorb(
                        self.step_gen(generation, |m, now, out| m.tail_read(now, page, img, out)),
                    );
                }
            }
            if work.restart {
                self.restart(generation);
            }
            work = next;
        }
    }

    /// Steps the member if it is still of `generation`.
    fn step_gen(
        &self,
        generation: u64,
        f: impl FnOnce(&mut Member, u64, &mut Vec<Out>) -> Result<(), MemberError>,
    ) -> GroupWork {
        let mut l = self.locked.lock();
        if l.generation != generation {
            return GroupWork::default();
        }
        self.step_locked(&mut l, f)
    }

    /// Reopens the member of `generation` from its disk (see the module documentation).
    fn restart(&self, generation: u64) {
        let _one = self.restarting.lock();
        let (side, journal) = {
            let mut l = self.locked.lock();
            if l.generation != generation || l.member.is_none() || self.stop.load(Relaxed) {
                return;
            }
            l.member = None;
            l.generation += 1;
            self.drop_callers(&mut l, || Answer::Stopped);
            (l.side.clone(), l.journal.clone())
        };
        self.counters.restarts.fetch_add(1, Relaxed);
        {
            // The old member's install round (if any) ends, and its journal's buffered
            // records are written once: a flush of the old journal after the reopen would
            // write at offsets the new one owns.
            let _rounds = side.hold_all();
            let _gate = self.journal_gate.write();
            if let Err(e) = journal.flush() {
                warn!(replica = self.id, "flushing the stopped member's journal: {e}");
            }
        }
        drop(journal);
        let opened = member_io::open_member(
            self.disk.clone(),
            self.opts.engine.core_config(),
            self.opts.member,
            self.opts.replica_config(),
            None,
        );
        let mut l = self.locked.lock();
        match opened {
            Ok(mut o) => {
                o.member.defer_sync();
                l.member = Some(o.member);
                l.side = Arc::new(o.disk_side);
                l.journal = o.journal;
                l.generation += 1;
            }
            Err(e) => self.fail(&mut l, &format!("reopening from the disk: {e}")),
        }
    }

    /// The disk thread's image fetch: the leader first, then every other voter.
    fn fetch_image(&self, generation: u64, lsn: Lsn) {
        let (sources, side) = {
            let l = self.locked.lock();
            let Some(m) = l.member.as_ref().filter(|_| l.generation == generation) else { return };
            let leader = m.status().replica.leader;
            let mut v: Vec<u64> =
                m.replica().conf_state().voters.into_iter().filter(|v| *v != self.id).collect();
            v.sort_by_key(|v| Some(*v) != leader);
            (v, l.side.clone())
        };
        let mut last = String::from("no other replica in the group");
        let mut got = None;
        for from in sources {
            let r = member_io::install_image(self.disk.clone(), |dest| {
                self.net.fetch_image(from, lsn, dest)
            });
            match r {
                Ok(x) => {
                    got = Some(x);
                    break;
                }
                Err(e) => last = format!("from replica {from}: {e}"),
            }
        }
        drop(side);
        let mut l = self.locked.lock();
        if l.generation != generation {
            return;
        }
        let result = match got {
            Some((sb, new_side)) => {
                self.counters.images.fetch_add(1, Relaxed);
                l.side = Arc::new(new_side);
                // The image replaces the core, and the side door's sessions with it.
                close_door(&mut l);
                Ok(sb)
            }
            None => {
                self.counters.image_failures.fetch_add(1, Relaxed);
                warn!(replica = self.id, "no database image at checkpoint {lsn} or later: {last}");
                Err(last)
            }
        };
        let work = self.step_locked(&mut l, |m, now, out| m.image_installed(now, result, out));
        drop(l);
        self.settle(work);
    }
}

/// Closes every side-door connection (their sessions are gone with the core that held them).
fn close_door(l: &mut Locked) {
    for conn in std::mem::take(&mut l.door) {
        if let Some(sink) = l.sinks.remove(&conn) {
            sink.deliver(0, shutting_down("this replica reopened: reconnect"), true);
        }
    }
}

fn fill(l: &mut Locked, ticket: Ticket, answer: Answer) {
    if let Some(slot) = l.slots.remove(&ticket) {
        *slot.result.lock() = Some(answer);
        slot.ready.notify_one();
    }
}

/// Waits until `next` (or until the engine stops); false once it stopped.
fn sleep_until(s: &Shared, next: Instant) -> bool {
    let mut g = s.tick_wake.0.lock();
    while !s.stop.load(Relaxed) && Instant::now() < next {
        s.tick_wake.1.wait_until(&mut g, next);
    }
    !s.stop.load(Relaxed)
}

/// The ticker thread: `Member::tick` every `opts.tick`.
fn ticker(s: &Shared) {
    let mut next = Instant::now() + s.opts.tick;
    loop {
        if !sleep_until(s, next) {
            return;
        }
        next += s.opts.tick;
        // A late tick does not make up the ticks missed (Raft's clock slows, never races).
        next = next.max(Instant::now());
        let work = s.step(|m, now, out| m.tick(now, out));
        s.settle(work);
    }
}

/// The flusher thread of [`Durability::Memory`]: every `opts.memory_flush`, the journal's
/// fsync behind the acknowledgements, outside the member's lock (appends go on meanwhile:
/// the thor log writes and syncs its batch unlocked). A ready that waits for durability (a
/// vote) is reported too, though its caller's own flush would report it anyway.
fn flusher(s: &Shared) {
    let mut next = Instant::now() + s.opts.memory_flush;
    loop {
        if !sleep_until(s, next) {
            return;
        }
        next = (next + s.opts.memory_flush).max(Instant::now());
        let (generation, journal) = {
            let l = s.locked.lock();
            if l.member.is_none() {
                continue;
            }
            (l.generation, l.journal.clone())
        };
        if journal.durable_lsn().0 + 1 >= journal.next_lsn().0 {
            continue;
        }
        let flushed = {
            let _gate = s.journal_gate.read();
            s.counters.syncs.fetch_add(1, Relaxed);
            journal.flush().map(|()| journal.durable_lsn())
        };
        let work = match flushed {
            Ok(durable) => s.step_gen(generation, |m, now, out| {
                if m.needs_sync() { m.persisted(now, durable, out) } else { Ok(()) }
            }),
            Err(e) => {
                let mut l = s.locked.lock();
                if l.generation == generation {
                    s.fail(&mut l, &format!("journal fsync behind: {e}"));
                }
                GroupWork::default()
            }
        };
        s.settle(work);
    }
}

/// The disk thread: install rounds, checkpoints and image fetches.
fn disk_thread(s: &Shared) {
    loop {
        let job = {
            let mut jobs = s.jobs.lock();
            while jobs.is_empty() && !s.stop.load(Relaxed) {
                s.jobs_wake.wait(&mut jobs);
            }
            if s.stop.load(Relaxed) {
                return;
            }
            jobs.pop_front().expect("not empty")
        };
        match job {
            Job::Core(generation, effect) => {
                let (side, journal) = {
                    let l = s.locked.lock();
                    if l.generation != generation {
                        continue;
                    }
                    (l.side.clone(), l.journal.clone())
                };
                if s.opts.durability == Durability::Memory {
                    // The database never gets ahead of the journal: what an install round or
                    // a checkpoint writes comes from entries fsynced first, so a replica whose
                    // database holds a commit its group later lost (a majority's power loss)
                    // also holds the entry, and stops as diverged when it meets the group.
                    let flushed = {
                        let _gate = s.journal_gate.read();
                        s.counters.syncs.fetch_add(1, Relaxed);
                        journal.flush()
                    };
                    if let Err(e) = flushed {
                        let mut l = s.locked.lock();
                        if l.generation == generation {
                            s.fail(&mut l, &format!("journal fsync before an install: {e}"));
                        }
                        continue;
                    }
                }
                drop(journal);
                let work = {
                    let _held = side.hold_installs();
                    match member_io::perform(&side, &effect) {
                        Some(input) => {
                            s.step_gen(generation, |m, now, out| m.step(now, input, out))
                        }
                        None => GroupWork::default(),
                    }
                };
                s.settle(work);
            }
            Job::Image(generation, lsn) => s.fetch_image(generation, lsn),
        }
    }
}

/// Replicas of one process delivering to each other: a hub of [`GroupEngine`]s registered by
/// replica id, and a [`ReplicaNet`] per sender ([`LocalReplicas::net_for`]). Each registered
/// replica has its own bounded inbox ([`limits::LOCAL_REPLICA_QUEUE_MAX`]) and delivery
/// thread, as each would have its own connections over a network: a send never steps another
/// engine on the sender's stack (an append and its response would otherwise recurse), and a
/// replica whose journal fsync is slow delays only its own messages. Links can be cut
/// ([`LocalReplicas::isolate`]); messages to a replica not registered, halted or cut off, or
/// past a full inbox, are lost, as over a network. [`ReplicaNet::fetch_image`] copies the
/// source engine's image ([`GroupEngine::image_into`]).
pub struct LocalReplicas {
    endpoints: Mutex<FxHashMap<u64, Arc<Endpoint>>>,
    isolated: Mutex<Vec<u64>>,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

/// One registered replica: its engine, inbox and delivery thread.
struct Endpoint {
    engine: Mutex<Weak<GroupEngine>>,
    inbox: Mutex<VecDeque<(u64, Bytes)>>,
    wake: Condvar,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for LocalReplicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalReplicas").field("counts", &self.counts()).finish_non_exhaustive()
    }
}

/// One replica's view of a [`LocalReplicas`] hub: the [`ReplicaNet`] its engine sends with.
#[derive(Debug)]
pub struct LocalReplicaNet {
    hub: Arc<LocalReplicas>,
    from: u64,
}

impl LocalReplicas {
    /// An empty hub.
    pub fn new() -> Arc<LocalReplicas> {
        Arc::new(LocalReplicas {
            endpoints: Mutex::new(FxHashMap::default()),
            isolated: Mutex::new(Vec::new()),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    /// The network replica `from` sends with.
    pub fn net_for(self: &Arc<Self>, from: u64) -> Arc<dyn ReplicaNet> {
        Arc::new(LocalReplicaNet { hub: self.clone(), from })
    }

    /// Messages to `engine`'s replica id go to `engine` from now on (a reopened replica is
    /// registered again).
    pub fn register(self: &Arc<Self>, engine: &Arc<GroupEngine>) {
        let id = engine.replica_id();
        let mut eps = self.endpoints.lock();
        if let Some(ep) = eps.get(&id) {
            *ep.engine.lock() = Arc::downgrade(engine);
            return;
        }
        let ep = Arc::new(Endpoint {
            engine: Mutex::new(Arc::downgrade(engine)),
            inbox: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let (e, hub) = (ep.clone(), Arc::downgrade(self));
        let t = std::thread::Builder::new()
            .name(format!("thor-local-replica-{id}"))
            .spawn(move || deliver(&e, &hub, id))
            .expect("spawning a local replica's delivery thread");
        *ep.thread.lock() = Some(t);
        eps.insert(id, ep);
    }

    /// Cuts replica `id` off (`true`) from every other, or reconnects it: messages and image
    /// copies from or to it are lost meanwhile.
    pub fn isolate(&self, id: u64, cut: bool) {
        let mut v = self.isolated.lock();
        v.retain(|x| *x != id);
        if cut {
            v.push(id);
        }
    }

    fn linked(&self, a: u64, b: u64) -> bool {
        let v = self.isolated.lock();
        !v.contains(&a) && !v.contains(&b)
    }

    /// Messages delivered and lost so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.delivered.load(Relaxed), self.dropped.load(Relaxed))
    }

    fn engine(&self, id: u64) -> Option<Arc<GroupEngine>> {
        // One lock at a time: the endpoint's is taken by its delivery thread.
        let ep = self.endpoints.lock().get(&id).cloned()?;
        ep.engine.lock().upgrade()
    }
}

impl Drop for LocalReplicas {
    fn drop(&mut self) {
        for (_, ep) in self.endpoints.lock().drain() {
            ep.stop.store(true, Relaxed);
            {
                let _q = ep.inbox.lock();
                ep.wake.notify_all();
            }
            if let Some(t) = ep.thread.lock().take()
                && t.thread().id() != std::thread::current().id()
            {
                let _ = t.join();
            }
        }
    }
}

/// A replica's delivery thread: its inbox into its engine.
fn deliver(ep: &Endpoint, hub: &Weak<LocalReplicas>, to: u64) {
    loop {
        // Everything queued meanwhile, as one batch (bounded by the inbox's own bound).
        let batch: Vec<(u64, Bytes)> = {
            let mut q = ep.inbox.lock();
            while q.is_empty() && !ep.stop.load(Relaxed) {
                ep.wake.wait(&mut q);
            }
            if ep.stop.load(Relaxed) {
                return;
            }
            q.drain(..).collect()
        };
        let Some(h) = hub.upgrade() else { return };
        // Not in the match's scrutinee: its guard would live through the delivery, whose
        // sends take the hub's lock while `engine()` holds that and waits for this one.
        let target = ep.engine.lock().upgrade();
        let Some(e) = target else {
            h.dropped.fetch_add(batch.len() as u64, Relaxed);
            continue;
        };
        let (linked, cut): (Vec<_>, Vec<_>) =
            batch.into_iter().partition(|(from, _)| h.linked(*from, to));
        h.dropped.fetch_add(cut.len() as u64, Relaxed);
        h.delivered.fetch_add(linked.len() as u64, Relaxed);
        e.replica_messages(linked);
    }
}

impl ReplicaNet for LocalReplicaNet {
    fn send(&self, to: u64, msg: Bytes) {
        let ep = self.hub.endpoints.lock().get(&to).cloned();
        let Some(ep) = ep.filter(|_| self.hub.linked(self.from, to)) else {
            self.hub.dropped.fetch_add(1, Relaxed);
            return;
        };
        let mut q = ep.inbox.lock();
        if q.len() >= limits::LOCAL_REPLICA_QUEUE_MAX {
            self.hub.dropped.fetch_add(1, Relaxed);
            return;
        }
        q.push_back((self.from, msg));
        ep.wake.notify_one();
    }

    fn fetch_image(
        &self,
        from: u64,
        min_lsn: Lsn,
        dest: &dyn Disk,
    ) -> Result<Superblock, ImageFetchError> {
        let unreachable =
            |reason: &str| ImageFetchError::Unreachable { replica: from, reason: reason.into() };
        if !self.hub.linked(self.from, from) {
            return Err(unreachable("cut off"));
        }
        let e = self.hub.engine(from).ok_or_else(|| unreachable("not registered"))?;
        e.image_into(min_lsn, dest)
    }
}
