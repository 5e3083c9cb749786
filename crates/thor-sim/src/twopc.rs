//! The simulated cluster of N servers (one to three): real cores, each over its own
//! [`MemDisk`], clients whose transactions span them (two-phase commit, `thor_wire::twopc`),
//! a network between everyone, and faults, advanced one event at a time from a queue ordered
//! by virtual time and insertion, all from one seed.
//!
//! With [`TwoPcSimConfig::replicas`] set ([`TwoPcSimConfig::for_seed_groups`]), every server
//! is a replica group instead of one process: `groups.rs` says how clients find the leader,
//! where peer messages go, the groups' faults and the end's check of the replicas' pages; the
//! clients, the transactions, the history, money and liveness checks below are the same. The
//! single-server seeds replay exactly as before groups existed (nothing of the groups draws
//! from the run's stream unless a run has them).
//!
//! # What runs
//!
//! Every server holds a few *accounts* (objects with a writer, a transaction number and a
//! balance). Each client runs transactions that fetch the accounts they use from their servers
//! and then prepare at every server they touched, with a timestamp the client chooses:
//!
//! - *transfers* between two accounts on different servers (both servers write; the first
//!   coordinates), sometimes with a third server read-only (it reads an account there);
//! - *audits* that read one account on each of two servers (read-only: no coordinator; every
//!   participant answers the client).
//!
//! With one server (a quarter of the seeds, [`TwoPcSimConfig::servers`]) a transfer moves money
//! between two of its accounts and an audit reads two, each a single-server `Commit` (the
//! server has no peers); the history then orders commits by their LSN, the server's serial
//! order.
//!
//! Two kinds of client run side by side: the hand-written *simulated* clients (this file),
//! which build their requests themselves, and, in two thirds of the seeds, *real* clients
//! (`real.rs`): thor's own client protocol, one [`thor_client::proto::ClientCore`] per server
//! as `thor_client::Cluster` keeps one session per server, doing the same transfers and audits
//! through the cores' `prepare`/`finish_part` (with one server, `commit`, or a read-only
//! commit at the client, `commit_here`). Both kinds join the same history, conservation and
//! liveness checks; a seed without real clients and with several servers replays exactly as
//! before they existed (both are drawn from a stream of their own).
//!
//! Each server's core is driven as a real driver would: appends go to the log's buffer and a
//! log-sync event reports durability (group commit); reads, install rounds and checkpoints are
//! I/O events; a tick every [`TICK_US`] drives two-phase commit's timeouts. (A group's core is
//! driven by its `Member`: appends are proposals, durability is a majority's, disk effects
//! are performed at once, and the replica's tick every [`RAFT_TICK_US`] is the core's too.)
//!
//! # Faults
//!
//! - *Server crash* at any event (within the run's budget) or halfway through a log sync,
//!   install or checkpoint: its disk keeps any subset of unsynced writes (torn at sector
//!   granularity), its connections break, messages to it are lost, and it recovers after a
//!   delay, with its transactions in doubt.
//! - *Lost client message:* the connection breaks (as over TCP); a transaction whose outcome
//!   its client did not learn is *uncertain*.
//! - *Lost, delayed or reordered server-to-server message*: dropped with the configured chance,
//!   each delivered after its own latency (so they reorder freely).
//!
//! # Liveness
//!
//! Once every client has run its transactions, faults stop and crashed servers recover. Once
//! every server is up and has settled what the faults left (no part in doubt, no transaction
//! coordinated, for 20 ms so that nothing is still on its way; this must happen within ten
//! vote timeouts), every client runs again until it has committed
//! `liveness::CALM_COMMITS` times, and after every event the run checks (with the
//! single-server world's checker, `liveness::Progress`) that no client's transaction has taken
//! longer than half the vote timeout and that no client has gone a vote timeout without a
//! commit, and that no server has held a prepared part longer than half the vote timeout
//! (`Liveness`). A stall (a part held, or a
//! client kept waiting, until a timeout although the outcome was known) fails the run like a
//! safety violation, with its replay command. Over the 10,000 seeds of `tests/twopc.rs`
//! (real clients and one-server runs included) settling took at most 408 ms of virtual time,
//! and under the check the longest-held part 7.8 ms, against the bound of 100 ms; the longest
//! transaction took 32 ms, against 100 ms, and the longest a client went without a commit
//! 63 ms, against 200 ms. The transactions over 12 ms were all in one-server runs with real
//! clients (seed 9: a single-server commit answered 30 ms after it arrived, with nothing else
//! traced in between); before those runs existed the longest took 8.4 ms. The mutant that
//! drops an early no vote fails the check (`tests/mutants.rs`), with simulated clients and
//! with real clients alone.
//!
//! # The judgement
//!
//! At the end the run continues until no server has a transaction in doubt or one it still
//! coordinates. Then the final state of every account is fetched, and:
//!
//! - the history (every transaction that reached its prepare, with what it read and wrote; a
//!   transfer committed if its coordinator said so, aborted if refused, uncertain otherwise) is
//!   conflict-serializable in the clients' timestamp order ([`serial::check_with`] with
//!   `order_must_serialize`), ending in exactly the final state; an uncertain transaction whose
//!   write anyone saw counts as committed and must then be installed at *every* server, so a
//!   transaction committed at one server and not another is an anomaly;
//! - replaying the committed transfers in that order keeps the total of all balances, and the
//!   final balances add up to the opening total.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageView, RawRef, ServerId, VarKind};
use thor_server::TwoPcConfig;
use thor_server::io;
use thor_server::{CommitIn, ConnId, CoreConfig, DirectOp, DirectResult, Effect, Input};
use thor_storage::{MemDisk, SplitMix64};
use thor_wire::{
    CLIENT_TIE_BIT, Commit, ErrorCode, Hello, Participant, PeerMsg, Prepare, Reply, ReplyBody,
    Request, RequestBody, Stamp,
};

use crate::check::Violation;
use crate::liveness::{Bounds, Progress};
use crate::server::{self, EventQueue, Process, io_violation};
use raft::eraftpb::Message;
use thor_history as serial;
use thor_replica::MemberMutant;

mod groups;
mod real;

pub use groups::{FAULT_EVERY_US, InDoubtKill, KillPoint, RAFT_TICK_US};

/// Virtual microseconds between ticks of each server.
pub const TICK_US: u64 = 10_000;

/// Events a run may take before it is declared stuck.
const EVENTS_MAX: u64 = 300_000;

/// Events a run with replica groups may take before it is declared stuck: every replica
/// ticks every [`RAFT_TICK_US`] and its Raft messages are events too.
const GROUP_EVENTS_MAX: u64 = 4_000_000;

/// How long the cluster must stay settled after the faults stop before the liveness check
/// starts: longer than any message of the faulty part of the run takes to land (0.4 ms) and
/// than the work it starts (a prepare that arrives and is logged, a few disk latencies of at
/// most 2 ms), so that nothing the faults left is still on its way.
const SETTLED_QUIET_US: u64 = 20_000;

/// Where an account's fields are in its object.
pub(crate) const WRITER_AT: usize = 4;
pub(crate) const TXN_AT: usize = 8;
pub(crate) const BALANCE_AT: usize = 12;
/// Every account's balance before the first transfer.
pub(crate) const OPENING: u32 = 1_000;

/// What a run does. [`TwoPcSimConfig::for_seed`] derives one from a seed.
#[derive(Debug, Clone)]
pub struct TwoPcSimConfig {
    /// The seed of every random choice.
    pub seed: u64,
    /// Servers (1 to 3). With one, every transaction is a single-server commit (`Commit`, no
    /// two-phase commit), and the server has no peers.
    pub servers: usize,
    /// Clients (at most 15).
    pub clients: usize,
    /// Accounts per server.
    pub accounts: usize,
    /// Transactions each client runs to their end (or to an uncertain end).
    pub txns_per_client: usize,
    /// Most server crashes in the run.
    pub crashes_max: usize,
    /// Chance per event of a server crash, in parts per million.
    pub crash_ppm: u64,
    /// Chance per log sync, install or checkpoint that the disk dies halfway, in ppm.
    pub io_death_ppm: u64,
    /// Chance per client message that it is lost (its connection breaks), in ppm.
    pub loss_ppm: u64,
    /// Chance per server-to-server message that it is lost, in ppm.
    pub peer_loss_ppm: u64,
    /// Real clients (thor's own client protocol, one `ClientCore` per server: `real.rs`),
    /// beside the simulated ones; `clients + real_clients` is at most 15.
    pub real_clients: usize,
    /// Print every event to stderr.
    pub trace: bool,
    /// Replicas per server: 0, every server a single process (crashing as a whole, with its
    /// own log); 1 or more, every server a replica group of that many `Member`s
    /// (`twopc/groups.rs`), whose faults are the groups' (the server crash and I/O death
    /// settings above are then unused).
    pub replicas: usize,
    /// With groups: the chance per Raft message that it is lost, in ppm.
    pub raft_loss_ppm: u64,
    /// With groups: most replica crashes in the run (the coordinator leaders killed
    /// included).
    pub replica_crashes_max: usize,
    /// With groups: whether replicas crash and groups are partitioned at random.
    pub group_faults: bool,
    /// With groups: journal entries kept below what checkpoints allow compacting
    /// (`MemberConfig::retain_entries`; a small number sends lagging replicas snapshots).
    pub retain_entries: u64,
    /// With groups: every member the deliberately broken `MemberMutant` (tests only).
    pub member_mutant: Option<MemberMutant>,
    /// With groups: the scripted fault of the scenario
    /// `participant_learns_outcome_from_new_coordinator_leader` (see `InDoubtKill`).
    pub kill_coordinator_leader_in_doubt: Option<KillPoint>,
}

impl TwoPcSimConfig {
    /// The configuration of seed `seed`.
    pub fn for_seed(seed: u64) -> TwoPcSimConfig {
        let mut r = SplitMix64::new(seed ^ 0x0002_9C00_2BC0_0000);
        // Real clients, and the single-server runs, are drawn from a stream of their own, so
        // that a seed with neither replays as before they existed.
        let (real_clients, one_server) = real::merged_of(seed);
        let servers = 2 + r.below(2) as usize;
        TwoPcSimConfig {
            seed,
            servers: if one_server { 1 } else { servers },
            clients: 2 + r.below(3) as usize,
            accounts: 2 + r.below(3) as usize,
            txns_per_client: 4 + r.below(8) as usize,
            crashes_max: r.below(4) as usize,
            crash_ppm: [0, 2_000, 8_000][r.below(3) as usize],
            io_death_ppm: [0, 50_000, 150_000][r.below(3) as usize],
            loss_ppm: [0, 5_000, 20_000][r.below(3) as usize],
            peer_loss_ppm: [0, 50_000, 200_000][r.below(3) as usize],
            real_clients,
            trace: false,
            replicas: 0,
            raft_loss_ppm: 0,
            replica_crashes_max: 0,
            group_faults: false,
            retain_entries: 1_000,
            member_mutant: None,
            kill_coordinator_leader_in_doubt: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TwoPcOutcome {
    /// A hash of every event in order and of every client message's and peer message's
    /// contents: equal for equal runs, in one process or two (nothing in it comes from random
    /// state).
    pub trace_hash: u64,
    /// Events processed.
    pub events: u64,
    /// Transactions their client was told committed.
    pub committed: u64,
    /// Transactions refused or aborted.
    pub aborted: u64,
    /// Transactions whose outcome the client never learned.
    pub uncertain: u64,
    /// Transactions that used three servers.
    pub three_server: u64,
    /// Server crashes.
    pub crashes: u64,
    /// Server-to-server messages lost.
    pub peer_lost: u64,
    /// Client connections broken by lost messages.
    pub lost_connections: u64,
    /// How long the cluster took to settle what the faults left (virtual microseconds from
    /// the faults' end until no part is in doubt and no transaction coordinated).
    pub settle_us: u64,
    /// Under the liveness check (after the faults stopped and the cluster settled): the
    /// longest a client's transaction took, in virtual microseconds.
    pub calm_txn_us_max: u64,
    /// Under the liveness check: the longest a server held a prepared part.
    pub calm_part_us_max: u64,
    /// Under the liveness check: the longest a client went without a commit.
    pub calm_commit_us_max: u64,
    /// Transactions of real clients their coordinator (or, read-only, every server) said
    /// committed.
    pub real_commits: u64,
    /// Transactions of real clients doomed (by an invalidation or a broken connection) before
    /// they were prepared.
    pub real_doomed: u64,
    /// Transactions of real clients whose outcome they never learned.
    pub real_uncertain: u64,
    /// Read-only transactions a real client committed by itself (one server, which said its
    /// reads were settled: `ClientCore::commit_here`).
    pub real_read_only_here: u64,
    /// Runs of one server (every transaction a single-server commit).
    pub one_server_runs: u64,
    /// With groups: replica crashes (the coordinator leaders killed included).
    pub replica_crashes: u64,
    /// With groups: members reopened from their disks (deposed leaders).
    pub replica_restarts: u64,
    /// With groups: serving leaders of a group that coordinated a transaction, killed.
    pub coordinator_leader_kills: u64,
    /// With groups: partitions made.
    pub partitions: u64,
    /// With groups: leaders that came to serve.
    pub group_leaders: u64,
    /// With groups: clients turned away by a replica that does not serve (`NotLeader`).
    pub redirects: u64,
    /// With groups: database images copied to replicas behind what the journals keep.
    pub images: u64,
    /// With groups: image fetches that failed and were asked again.
    pub image_failures: u64,
    /// With groups: replicas retired for want of an image (`MemberError::ImageUnavailable`).
    pub replicas_retired: u64,
    /// With groups: Raft messages lost (by chance or a partition).
    pub raft_lost: u64,
    /// With groups: peer messages dropped because no replica of their group served.
    pub peer_unserved: u64,
    /// With groups: replicas whose pages were compared at the end.
    pub replicas_compared: u64,
    /// The scripted kill of the scenario, if it happened (one run's; not summed).
    pub in_doubt_kill: Option<InDoubtKill>,
}

impl TwoPcOutcome {
    /// Adds run `o` to a sum of runs: its counts are added, its maxima (`settle_us`, the calm's
    /// `_max` fields) taken; the trace hash, which belongs to one run, is left as it is.
    pub fn absorb(&mut self, o: &TwoPcOutcome) {
        self.events += o.events;
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.uncertain += o.uncertain;
        self.three_server += o.three_server;
        self.crashes += o.crashes;
        self.peer_lost += o.peer_lost;
        self.lost_connections += o.lost_connections;
        self.settle_us = self.settle_us.max(o.settle_us);
        self.calm_txn_us_max = self.calm_txn_us_max.max(o.calm_txn_us_max);
        self.calm_part_us_max = self.calm_part_us_max.max(o.calm_part_us_max);
        self.calm_commit_us_max = self.calm_commit_us_max.max(o.calm_commit_us_max);
        self.real_commits += o.real_commits;
        self.real_doomed += o.real_doomed;
        self.real_uncertain += o.real_uncertain;
        self.real_read_only_here += o.real_read_only_here;
        self.one_server_runs += o.one_server_runs;
        self.replica_crashes += o.replica_crashes;
        self.replica_restarts += o.replica_restarts;
        self.coordinator_leader_kills += o.coordinator_leader_kills;
        self.partitions += o.partitions;
        self.group_leaders += o.group_leaders;
        self.redirects += o.redirects;
        self.images += o.images;
        self.image_failures += o.image_failures;
        self.replicas_retired += o.replicas_retired;
        self.raft_lost += o.raft_lost;
        self.peer_unserved += o.peer_unserved;
        self.replicas_compared += o.replicas_compared;
    }
}

/// A run that found a violation.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "seed {seed}: {violation} (at event {event}, virtual time {time_us} us)\n  replay: {replay}"
)]
pub struct TwoPcFailure {
    /// The seed.
    pub seed: u64,
    /// The command that replays the run (a seed of single servers, or of groups).
    pub replay: String,
    /// What went wrong.
    pub violation: Violation,
    /// The event it was found at.
    pub event: u64,
    /// The virtual time then.
    pub time_us: u64,
}

#[derive(Debug)]
enum Ev {
    /// A request arrives at a server on a connection.
    ToServer(usize, ConnId, Request, u64),
    /// A reply from a server (or the news that the connection broke: `None`) arrives at a
    /// client.
    ToClient(usize, usize, ConnId, Option<(u64, Reply)>),
    /// A connection's break reaches its server.
    Disconnect(usize, ConnId),
    /// A message from another server (the last field: its sender) arrives (if the receiver
    /// has not restarted since; a group's serving leader gets it).
    Peer(usize, u32, PeerMsg, usize),
    LogSync(usize, u32),
    Io(usize, u32, Effect),
    Tick(usize, u32),
    Restart(usize),
    /// A client starts its next step.
    Wake(usize),
    /// A Raft message within group `.0` from replica `.1` lands.
    Raft(usize, u64, Box<Message>),
    /// Replica `.1` of group `.0` ticks (if it is still process `.2`).
    ReplicaTick(usize, u64, u32),
    /// Replica `.1` of group `.0`, crashed, restarts.
    ReplicaRestart(usize, u64),
    /// Group `.0`'s partition `.1` heals.
    Heal(usize, u64),
    /// The next draw of a group fault.
    GroupFault,
}

struct Server {
    /// A single server's process (unused by a group).
    p: Process,
    accounts: Vec<Oref>,
    /// With replica groups: the server's group (`groups.rs`).
    group: Option<Box<groups::Group>>,
}

/// A client's connection to one server.
#[derive(Debug, Clone)]
struct Link {
    conn: ConnId,
    /// Broken; the client has not learned it yet (it sends nothing more on it, and reconnects
    /// only once it knows: what it read on this session is not to be used on another).
    dead: bool,
    /// Invalidations received and not yet acknowledged.
    acks: Vec<Oref>,
    last_to_server: u64,
    last_to_client: u64,
}

/// One account a transaction uses.
#[derive(Debug, Clone, Copy)]
struct Use {
    server: usize,
    account: usize,
    writes: bool,
    /// What it read: (writer, txn, balance).
    seen: Option<(u32, u32, u32)>,
}

#[derive(Debug, Default)]
struct Txn {
    id: u32,
    uses: Vec<Use>,
    amount: u32,
    /// Request ids of the fetches, per use.
    fetch_ids: Vec<u64>,
    /// The servers still to answer the prepare (server, request id).
    awaiting: Vec<(usize, u64)>,
    stamp: Stamp,
    coordinator: Option<usize>,
    /// Known outcome: Some(true) committed, Some(false) aborted.
    outcome: Option<bool>,
    prepared: bool,
    /// A connection broke before the outcome was known.
    broken: bool,
    /// When the client started it (its first fetch).
    started_us: u64,
    /// With one server: the LSN of its commit, as acknowledged.
    lsn: Option<thor_core::Lsn>,
}

/// A client: its connections, and what drives them. A simulated client's transaction is
/// [`Client::txn`]; a real client (`real`) is driven by thor's client protocol and keeps
/// `txn` empty.
struct Client {
    links: Vec<Option<Link>>,
    next_id: u64,
    done: usize,
    txn: Option<Txn>,
    next_txn: u32,
    /// A real client's protocol cores and transaction (`real.rs`).
    real: Option<Box<real::RealClient>>,
}

struct World {
    cfg: TwoPcSimConfig,
    rng: SplitMix64,
    now: u64,
    seq: u64,
    queue: EventQueue<Ev>,
    servers: Vec<Server>,
    clients: Vec<Client>,
    /// Connection -> (client, server).
    conns: FxHashMap<ConnId, (usize, usize)>,
    next_conn: ConnId,
    desc: ClassDesc,
    class: Vec<Oref>,
    history: serial::History,
    /// (object, version) -> balance, for the conservation check.
    balances: FxHashMap<(serial::ObjId, serial::Version), u32>,
    out: TwoPcOutcome,
    faults: bool,
    /// A violation found where it cannot be returned at once (reported by the next event).
    deferred_violation: Option<Violation>,
    /// When the faults stopped.
    faults_stopped_at: Option<u64>,
    /// Since when the cluster has been settled, after the faults stopped.
    settled_since: Option<u64>,
    /// The clients' progress once the faults stopped and the cluster settled, and its check
    /// (see [`Liveness`]).
    progress: Progress,
    /// With groups: connection -> the replica it was made to, and that replica's epoch then.
    conn_replica: FxHashMap<ConnId, (u64, u32)>,
    /// With groups: (client, server) -> the replica the client connects to next.
    aim: FxHashMap<(usize, usize), u64>,
    /// With groups: answers of direct operations not yet collected.
    direct_done: Vec<(u64, DirectResult)>,
    /// The scripted kill, once it happened.
    in_doubt_kill: Option<InDoubtKill>,
}

/// The liveness check (issue 32): once the faults of a run have stopped, the cluster settles
/// what they left within [`Liveness::settle_us_max`]; from then on every client's
/// transaction ends within [`Liveness::txn_us_max`] of its start, and no server holds a
/// prepared part longer than [`Liveness::part_us_max`]. A run that breaks any fails like a
/// safety violation, with its replay command.
///
/// What the faults left may take timeouts to settle: a vote or a client's prepare lost costs
/// the vote timeout, and a transaction held back behind that part may meet the same fate, so
/// the leftovers may chain (one link per client at most). Once settled, nothing in the
/// protocol needs to wait for a timeout: a transaction of a fault-free cluster takes a few
/// round trips and log syncs, a few milliseconds of virtual time. The bounds are half the
/// vote timeout, so a part held (or a client kept waiting) until the vote timeout when the
/// outcome was already known, as issue 32's stalls did, fails the run.
#[derive(Debug, Clone, Copy)]
struct Liveness {
    settle_us_max: u64,
    txn_us_max: u64,
    part_us_max: u64,
    /// Longest a client may go without a commit: a few transactions refused by conflicts
    /// with the other clients, each ending within a few round trips.
    commit_us_max: u64,
}

impl Liveness {
    fn of(cfg: &TwoPcConfig) -> Liveness {
        Liveness {
            settle_us_max: 10 * cfg.vote_timeout_us,
            txn_us_max: cfg.vote_timeout_us / 2,
            part_us_max: cfg.vote_timeout_us / 2,
            commit_us_max: cfg.vote_timeout_us,
        }
    }
}

/// The settings of every server of a run of `servers` servers (ids 1..=servers), each of
/// which knows all the others as peers.
pub(crate) fn core_config(servers: usize, seed: u64) -> CoreConfig {
    CoreConfig {
        flush_start_percent: 50,
        mob_bytes: 8 << 10,
        page_cache_bytes: 4 * 4096,
        flush_batch_pages: 2,
        log_buffer_bytes: 64 << 10,
        twopc: TwoPcConfig {
            // One server alone has no peers (and so may say its reads are settled).
            peers: if servers == 1 {
                Vec::new()
            } else {
                (1..=servers as u32).map(ServerId).collect()
            },
            vote_timeout_us: 200_000,
            query_after_us: 40_000,
            resend_after_us: 40_000,
            future_max_us: 20_000,
            ..TwoPcConfig::default()
        },
        hash_key: crate::hash_key(seed),
        ..CoreConfig::default()
    }
}

/// The two-phase stamp of client `c`'s transaction `id` prepared at `now`: the time, and a
/// tie-breaker unique to the transaction (the client's number and the transaction's).
fn stamp_of(c: usize, id: u32, now: u64) -> Stamp {
    Stamp { time_us: now, tie: CLIENT_TIE_BIT | ((c as u32 + 1) << 16) | (id & 0xffff) }
}

/// The participants of a transaction that uses `uses` (each server once, writing if any of
/// its uses writes), and its coordinator: the server of the first write (`None`: read-only).
fn participants_of(uses: &[Use]) -> (Vec<Participant>, Option<usize>) {
    let mut ps: Vec<Participant> = Vec::new();
    for u in uses {
        match ps.iter_mut().find(|p| p.server.0 as usize == u.server + 1) {
            Some(p) => p.writes |= u.writes,
            None => {
                ps.push(Participant { server: ServerId(u.server as u32 + 1), writes: u.writes })
            }
        }
    }
    (ps, uses.iter().find(|u| u.writes).map(|u| u.server))
}

fn obj_id(server: usize, o: Oref) -> serial::ObjId {
    ((server as u64 + 1) << 32) | u64::from(o.raw())
}

fn version_of(writer: u32, txn: u32) -> serial::Version {
    (u64::from(writer) << 32) | u64::from(txn)
}

/// Runs one simulation of a cluster; returns what it did, or the first violation found.
pub fn run_twopc(cfg: &TwoPcSimConfig) -> Result<TwoPcOutcome, TwoPcFailure> {
    let seed = cfg.seed;
    let replay = if cfg.replicas > 0 {
        format!(
            "THOR_SIM_SEED={seed} THOR_SIM_TRACE=1 cargo test --release -p thor-sim --test twopc_groups replay -- --nocapture"
        )
    } else {
        format!(
            "THOR_SIM_SEED={seed} cargo test -p thor-sim --test twopc replay -- --nocapture\n     or: thor sim twopc --seed {seed} --trace"
        )
    };
    let fail = |w: &World, v: Violation| TwoPcFailure {
        seed: cfg.seed,
        replay: replay.clone(),
        violation: v,
        event: w.out.events,
        time_us: w.now,
    };
    let mut w = World::new(cfg.clone());
    if let Err(v) = w.setup() {
        return Err(fail(&w, v));
    }
    match w.run() {
        Ok(()) => Ok(w.out),
        Err(v) => Err(fail(&w, v)),
    }
}

impl World {
    fn new(cfg: TwoPcSimConfig) -> World {
        let rng = SplitMix64::new(cfg.seed);
        let desc = ClassDesc::new("sim.Account", 12, &[], VarKind::None).expect("a valid class");
        let clients = (0..cfg.clients + cfg.real_clients)
            .map(|c| Client {
                links: vec![None; cfg.servers],
                next_id: 1,
                done: 0,
                txn: None,
                next_txn: 1,
                real: (c >= cfg.clients)
                    .then(|| Box::new(real::RealClient::new(cfg.seed, c, cfg.servers))),
            })
            .collect();
        let servers = (0..cfg.servers)
            .map(|_| Server { p: Process::new(MemDisk::new()), accounts: Vec::new(), group: None })
            .collect();
        World {
            rng,
            now: 1_000_000,
            seq: 0,
            queue: EventQueue::default(),
            servers,
            clients,
            conns: FxHashMap::default(),
            next_conn: 1,
            desc,
            class: Vec::new(),
            history: serial::History::new(),
            balances: FxHashMap::default(),
            out: TwoPcOutcome {
                one_server_runs: u64::from(cfg.servers == 1),
                ..TwoPcOutcome::default()
            },
            faults: true,
            deferred_violation: None,
            faults_stopped_at: None,
            settled_since: None,
            progress: Progress::default(),
            conn_replica: FxHashMap::default(),
            aim: FxHashMap::default(),
            direct_done: Vec::new(),
            in_doubt_kill: None,
            cfg,
        }
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.cfg.trace {
            eprintln!("{:>10} {}", self.now, what());
        }
    }

    fn mix(&mut self, words: &[u64]) {
        for w in words {
            self.out.trace_hash = (self.out.trace_hash ^ w).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    fn chance(&mut self, ppm: u64) -> bool {
        self.faults && ppm > 0 && self.rng.below(1_000_000) < ppm
    }

    fn latency(&mut self) -> u64 {
        20 + self.rng.below(400)
    }

    fn disk_latency(&mut self) -> u64 {
        50 + self.rng.below(2_000)
    }

    fn start(&mut self, s: usize) -> Result<(), Violation> {
        let what = format!("server {}'s database after a crash", s + 1);
        crate::check::offline(&self.servers[s].p.disk, &what)?;
        let study = thor_server::StudyOptions::default();
        let cfg = core_config(self.cfg.servers, self.cfg.seed);
        self.servers[s]
            .p
            .start(cfg, &study)
            .map_err(|e| Violation(format!("server {} does not open: {e}", s + 1)))?;
        // As `thor-server`'s engine does at an open: the threshold is raised from the clock
        // at recovery, not from the first input, which may come later.
        self.servers[s].p.node.as_mut().expect("started").core.recovered_at(self.now);
        let e = self.servers[s].p.epoch;
        self.at(TICK_US, Ev::Tick(s, e));
        Ok(())
    }

    /// Creates each server's database, its account class and accounts.
    fn setup(&mut self) -> Result<(), Violation> {
        for s in 0..self.cfg.servers {
            if self.cfg.replicas > 0 {
                self.group_setup(s)?;
            } else {
                io::create(&self.servers[s].p.disk, 4096, ServerId(s as u32 + 1))
                    .map_err(|e| Violation(format!("create: {e}")))?;
                self.start(s)?;
            }
            let mut created = vec![Bytes::from(self.desc.to_class_object())];
            for _ in 0..self.cfg.accounts {
                let mut a = self.desc.new_object(RawRef::tagged_word(0), 0);
                put_u32(&mut a, BALANCE_AT, OPENING);
                created.push(Bytes::from(a));
            }
            let op = DirectOp::Commit(CommitIn { created, ..CommitIn::default() });
            let out = match self.settle_now(s, Input::Direct { ticket: 1, op })?.pop() {
                Some(DirectResult::Committed(Ok(out))) => out,
                other => return Err(Violation(format!("setup commit: {other:?}"))),
            };
            self.class.push(out.created[0]);
            for &o in &out.created[1..] {
                self.servers[s].accounts.push(o);
                self.balances.insert((obj_id(s, o), serial::INITIAL), OPENING);
            }
        }
        // The accounts start at version INITIAL (writer 0, txn 0), so the setup is not a
        // transaction of the history.
        // Clients start once the servers take timestamps near their clocks (after an open,
        // those up to `future_max_us` ahead of the clock are refused).
        let after = core_config(self.cfg.servers, self.cfg.seed).twopc.future_max_us + 1_000;
        for c in 0..self.clients.len() {
            let d = after + self.rng.below(1_000);
            self.at(d, Ev::Wake(c));
        }
        if self.cfg.replicas > 0 && self.cfg.group_faults {
            self.at(FAULT_EVERY_US, Ev::GroupFault);
        }
        Ok(())
    }

    /// Steps server `s` and performs everything at once (setup and the final reads).
    fn settle_now(&mut self, s: usize, input: Input) -> Result<Vec<DirectResult>, Violation> {
        if self.is_group(s) {
            return self.group_settle_now(s, input);
        }
        let node = self.servers[s].p.node.as_mut().expect("the server is up");
        server::settle_now(node, self.now, input, &mut ())
    }

    fn run(&mut self) -> Result<(), Violation> {
        let mut quiet_since: Option<u64> = None;
        let events_max = if self.cfg.replicas > 0 { GROUP_EVENTS_MAX } else { EVENTS_MAX };
        loop {
            self.out.events += 1;
            if self.out.events > events_max {
                return Err(Violation("the run does not finish (stuck?)".into()));
            }
            let faulty_done = self.clients.iter().all(|c| c.done >= self.cfg.txns_per_client);
            if faulty_done && self.faults {
                // Faults stop; crashed servers come back; the protocol finishes what the
                // faults left; then the clients run again, under the liveness check.
                self.faults = false;
                self.faults_stopped_at = Some(self.now);
                self.groups_heal();
                self.trace(|| "clients done: faults stop".into());
            }
            if let (Some(stopped), false) = (self.faults_stopped_at, self.progress.calm()) {
                self.maybe_calm(stopped)?;
            }
            if self.progress.all_done() {
                let settled = (0..self.cfg.servers).all(|s| self.server_settled(s));
                if settled {
                    let since = *quiet_since.get_or_insert(self.now);
                    // A little longer, so that late messages land and change nothing.
                    if self.now > since + 200_000 {
                        return self.judge();
                    }
                } else {
                    quiet_since = None;
                }
            }
            let Some(((t, _), ev)) = self.queue.pop_first() else {
                return Err(Violation("the event queue ran dry".into()));
            };
            self.now = self.now.max(t);
            if self.cfg.replicas == 0
                && self.out.crashes < self.cfg.crashes_max as u64
                && self.chance(self.cfg.crash_ppm)
            {
                let s = self.rng.below(self.cfg.servers as u64) as usize;
                self.crash(s, "at a random event");
            }
            self.event(ev)?;
            self.scripted_kill();
            self.check_liveness()?;
        }
    }

    /// After the faults stopped at `stopped`: once every server is up and has settled what
    /// they left, the liveness check starts and the clients run again.
    fn maybe_calm(&mut self, stopped: u64) -> Result<(), Violation> {
        let settled = (0..self.cfg.servers).all(|s| self.server_settled(s));
        let l = self.liveness();
        if !settled {
            self.settled_since = None;
            if self.now - stopped > l.settle_us_max {
                let left: Vec<String> = (0..self.cfg.servers)
                    .map(|s| match self.core_of(s) {
                        Some(core) => {
                            let t = core.twopc_stats();
                            format!(
                                "server {}: {} in doubt, {} coordinated",
                                s + 1,
                                t.in_doubt,
                                t.coordinating
                            )
                        }
                        None => format!("server {}: down (no serving leader)", s + 1),
                    })
                    .collect();
                return Err(Violation(format!(
                    "liveness: the cluster has not settled {} us after the faults stopped (bound {} us): {}",
                    self.now - stopped,
                    l.settle_us_max,
                    left.join(", ")
                )));
            }
            return Ok(());
        }
        let since = *self.settled_since.get_or_insert(self.now);
        if self.now - since < SETTLED_QUIET_US {
            return Ok(());
        }
        self.out.settle_us = since - stopped;
        self.progress.begin(self.now, self.clients.len());
        self.trace(|| "settled: the liveness check starts".into());
        for c in 0..self.clients.len() {
            let d = 1 + self.rng.below(1_000);
            self.at(d, Ev::Wake(c));
        }
        Ok(())
    }

    fn liveness(&self) -> Liveness {
        Liveness::of(&core_config(self.cfg.servers, self.cfg.seed).twopc)
    }

    /// The liveness check (see [`Liveness`]), after every event once it holds.
    fn check_liveness(&mut self) -> Result<(), Violation> {
        let Some(calm) = self.progress.from() else { return Ok(()) };
        let l = self.liveness();
        let bounds = Bounds { wait_us_max: l.txn_us_max, commit_us_max: l.commit_us_max };
        let clients = &self.clients;
        let who = |c: usize| match (&clients[c].txn, &clients[c].real) {
            (Some(t), _) => format!(
                "client {c} (its transaction {} started at {} us, stamp {})",
                t.id, t.started_us, t.stamp
            ),
            (None, Some(r)) => format!("real client {c} ({})", r.describe()),
            (None, None) => format!("client {c}"),
        };
        let checked = self.progress.check(self.now, bounds, who);
        self.out.calm_txn_us_max = self.progress.wait_us_seen;
        self.out.calm_commit_us_max = self.progress.commit_us_seen;
        checked?;
        for s in 0..self.cfg.servers {
            let Some(core) = self.core_of(s) else {
                return Err(Violation(format!(
                    "liveness: server {} is down (a group: no replica serves) {} us into the fault-free run",
                    s + 1,
                    self.now - calm
                )));
            };
            let Some(since) = core.twopc_oldest_part_us() else { continue };
            let held = self.now - since.max(calm);
            self.out.calm_part_us_max = self.out.calm_part_us_max.max(held);
            if held > l.part_us_max {
                return Err(Violation(format!(
                    "liveness: server {} has held a prepared part for {held} us (prepared at {since} us) in a fault-free cluster with every server up (bound {} us)",
                    s + 1,
                    l.part_us_max
                )));
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: Ev) -> Result<(), Violation> {
        if let Some(v) = self.deferred_violation.take() {
            return Err(v);
        }
        match ev {
            Ev::ToServer(s, conn, req, id) => {
                self.mix(&[self.now, 1, s as u64, conn, id, crate::digest_request(id, &req)]);
                self.trace(|| format!("server {} gets {} {id} on {conn}", s + 1, req.body.name()));
                let down = !self.is_group(s) && self.servers[s].p.node.is_none();
                if down || !self.conns.contains_key(&conn) {
                    return Ok(());
                }
                self.step(s, Input::Request { conn, id, req })
            }
            Ev::Disconnect(s, conn) => {
                if self.is_group(s) || self.servers[s].p.node.is_some() {
                    self.step(s, Input::Disconnect { conn })?;
                }
                Ok(())
            }
            Ev::ToClient(c, s, conn, msg) => {
                let digest = msg.as_ref().map_or(0, |(id, r)| crate::digest_reply(*id, r));
                self.mix(&[self.now, 2, c as u64, conn, digest]);
                self.trace(|| match &msg {
                    Some((id, r)) => {
                        format!("client {c} gets {} for {id} from server {}", r.body.name(), s + 1)
                    }
                    None => format!("client {c} loses its connection to server {}", s + 1),
                });
                if let Some((_, r)) = &msg
                    && let ReplyBody::Error { code: ErrorCode::NotLeader, message } = &r.body
                    && self.is_group(s)
                {
                    // A replica that does not serve turned the client away; the connection's
                    // close follows, and the client connects to the leader it named.
                    let hint = thor_wire::not_leader_hint(message);
                    self.redirected(c, s, conn, hint);
                    return Ok(());
                }
                self.at_client(c, s, conn, msg)
            }
            Ev::Peer(s, epoch, msg, from) => {
                let digest = crate::digest_bytes(format!("{msg:?}").as_bytes());
                self.mix(&[self.now, 3, s as u64, digest]);
                if self.is_group(s) {
                    if self.peer_held(from, s) {
                        self.out.peer_lost += 1;
                        return Ok(());
                    }
                } else if !self.servers[s].p.live(epoch) {
                    return Ok(());
                }
                self.trace(|| format!("server {} gets {msg:?}", s + 1));
                self.step(s, Input::Peer { msg })
            }
            Ev::LogSync(s, epoch) => self.log_sync(s, epoch),
            Ev::Io(s, epoch, e) => self.io(s, epoch, e),
            Ev::Tick(s, epoch) => {
                if !self.servers[s].p.live(epoch) {
                    return Ok(());
                }
                self.at(TICK_US, Ev::Tick(s, epoch));
                self.step(s, Input::Tick)
            }
            Ev::Restart(s) => {
                self.trace(|| format!("server {} restarts", s + 1));
                self.start(s)
            }
            Ev::Wake(c) => self.wake(c),
            Ev::Raft(s, from, msg) => self.raft_deliver(s, from, msg),
            Ev::ReplicaTick(s, id, epoch) => self.replica_tick(s, id, epoch),
            Ev::ReplicaRestart(s, id) => self.replica_back(s, id),
            Ev::Heal(s, seq) => {
                self.heal(s, seq);
                Ok(())
            }
            Ev::GroupFault => self.group_fault(),
        }
    }

    fn step(&mut self, s: usize, input: Input) -> Result<(), Violation> {
        if self.is_group(s) {
            return self.group_input(s, input);
        }
        let Some(node) = self.servers[s].p.node.as_mut() else { return Ok(()) };
        let mut fx = Vec::new();
        crate::step_checked(&mut node.core, self.now, input, &mut fx)?;
        self.route(s, fx)
    }

    fn route(&mut self, s: usize, fx: Vec<Effect>) -> Result<(), Violation> {
        for e in fx {
            match e {
                Effect::Reply { conn, id, reply, close } => {
                    self.trace(|| {
                        format!("server {} replies {} to {id} on {conn}", s + 1, reply.body.name())
                    });
                    self.send_to_client(conn, Some((id, reply)));
                    if close {
                        self.break_link(conn);
                    }
                }
                Effect::Append { lsn, record } => {
                    if self.servers[s].p.append(lsn, record)? {
                        let d = self.disk_latency();
                        let e = self.servers[s].p.epoch;
                        self.at(d, Ev::LogSync(s, e));
                    }
                }
                Effect::Peer { to, msg } => {
                    let t = to.0 as usize;
                    if t == 0 || t > self.cfg.servers || t == s + 1 {
                        return Err(Violation(format!(
                            "server {} messages server {}",
                            s + 1,
                            to.0
                        )));
                    }
                    if self.chance(self.cfg.peer_loss_ppm) {
                        self.out.peer_lost += 1;
                        continue;
                    }
                    let d = self.latency();
                    let e = self.servers[t - 1].p.epoch;
                    self.at(d, Ev::Peer(t - 1, e, msg, s));
                }
                Effect::Done { .. } => {}
                Effect::Backup { .. } => return Err(Violation("a backup nobody asked for".into())),
                e @ (Effect::Read { .. } | Effect::Install(_) | Effect::Checkpoint(_)) => {
                    let d = self.disk_latency();
                    let ep = self.servers[s].p.epoch;
                    self.at(d, Ev::Io(s, ep, e));
                }
            }
        }
        Ok(())
    }

    fn maybe_die_midway(&mut self, s: usize) -> bool {
        if self.out.crashes >= self.cfg.crashes_max as u64 || !self.chance(self.cfg.io_death_ppm) {
            return false;
        }
        let extra = self.rng.below(12);
        self.servers[s].p.plan_death(extra);
        true
    }

    fn log_sync(&mut self, s: usize, epoch: u32) -> Result<(), Violation> {
        if !self.servers[s].p.live(epoch) {
            return Ok(());
        }
        let dies = self.maybe_die_midway(s);
        let r = self.servers[s].p.sync_log();
        if dies {
            self.crash(s, "during a log sync");
            return Ok(());
        }
        let lsn = r.map_err(io_violation)?;
        self.step(s, Input::Durable { lsn })
    }

    fn io(&mut self, s: usize, epoch: u32, effect: Effect) -> Result<(), Violation> {
        if !self.servers[s].p.live(epoch) {
            return Ok(());
        }
        let dies = !matches!(effect, Effect::Read { .. }) && self.maybe_die_midway(s);
        let input = self.servers[s].p.perform(&effect);
        if dies {
            self.crash(s, "during an install or checkpoint");
            return Ok(());
        }
        match input {
            Some(i) => self.step(s, i),
            None => Ok(()),
        }
    }

    fn crash(&mut self, s: usize, why: &str) {
        if self.servers[s].p.node.is_none() {
            return;
        }
        self.trace(|| format!("server {} crashes {why}", s + 1));
        self.mix(&[self.now, 8, s as u64]);
        self.out.crashes += 1;
        let seed = self.rng.next_u64();
        self.servers[s].p.kill(seed);
        let broken: Vec<ConnId> =
            self.conns.iter().filter(|(_, (_, sv))| *sv == s).map(|(c, _)| *c).collect();
        for conn in broken {
            self.break_link(conn);
        }
        let d = 1_000 + self.rng.below(30_000);
        self.at(d, Ev::Restart(s));
    }

    /// Breaks a connection: the client learns it after a latency, the server too.
    fn break_link(&mut self, conn: ConnId) {
        let Some((c, s)) = self.conns.remove(&conn) else { return };
        if let Some(l) = self.clients[c].links[s].as_mut().filter(|l| l.conn == conn) {
            l.dead = true;
        }
        let d = self.latency();
        self.at(d, Ev::ToClient(c, s, conn, None));
        let d = self.latency();
        self.at(d, Ev::Disconnect(s, conn));
    }

    fn send_to_client(&mut self, conn: ConnId, msg: Option<(u64, Reply)>) {
        let Some(&(c, s)) = self.conns.get(&conn) else { return };
        if self.chance(self.cfg.loss_ppm) {
            self.out.lost_connections += 1;
            self.break_link(conn);
            return;
        }
        let d = self.latency();
        let link = self.clients[c].links[s].as_mut().expect("a live connection has its link");
        let t = (self.now + d).max(link.last_to_client + 1);
        link.last_to_client = t;
        let delay = t - self.now;
        self.at(delay, Ev::ToClient(c, s, conn, msg));
    }

    /// Client `c` sends `body` to server `s` (connecting first if it must); returns the id.
    fn send(&mut self, c: usize, s: usize, body: RequestBody) -> u64 {
        if self.clients[c].links[s].is_none() && !self.connect(c, s, "sim") {
            let id = self.clients[c].next_id;
            self.clients[c].next_id += 1;
            return id;
        }
        self.send_on_link(c, s, body)
    }

    /// Opens client `c`'s connection to server `s` and sends its `Hello` (with `name`):
    /// `true`, or `false` if the server is down and refuses it (the client learns that the
    /// connection is broken).
    fn connect(&mut self, c: usize, s: usize, name: &str) -> bool {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(conn, (c, s));
        self.clients[c].links[s] = Some(Link {
            conn,
            dead: false,
            acks: Vec::new(),
            last_to_server: 0,
            last_to_client: 0,
        });
        let refused = if self.is_group(s) {
            !self.group_accepts(c, s, conn)
        } else {
            self.servers[s].p.node.is_none()
        };
        if refused {
            // Refused: the client learns that the connection is broken.
            self.conns.remove(&conn);
            self.clients[c].links[s] = None;
            let d = self.latency();
            self.at(d, Ev::ToClient(c, s, conn, None));
            return false;
        }
        // The connection opens at once (a model of the accept), then Hello travels.
        // Any step may emit effects for others (work that waited, timeouts): routed.
        if let Err(v) = self.step(s, Input::Connect { conn }) {
            self.deferred_violation.get_or_insert(v);
        }
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], name)));
        self.transmit(c, s, hello);
        true
    }

    /// A simulated client's request: `body` with the acknowledgements of the invalidations
    /// it has received.
    fn send_on_link(&mut self, c: usize, s: usize, body: RequestBody) -> u64 {
        let mut req = Request::new(body);
        if let Some(link) = self.clients[c].links[s].as_mut().filter(|l| !l.dead) {
            req.piggyback.acks = std::mem::take(&mut link.acks);
        }
        self.transmit(c, s, req)
    }

    /// Client `c` sends `req` on its connection to server `s` (lost, with the connection,
    /// by the configured chance); returns its id.
    fn transmit(&mut self, c: usize, s: usize, req: Request) -> u64 {
        let id = self.clients[c].next_id;
        self.clients[c].next_id += 1;
        let lost = self.chance(self.cfg.loss_ppm);
        let d = self.latency();
        // The connection broke a moment ago (its Hello was lost): the client hears of it.
        let Some(link) = self.clients[c].links[s].as_mut().filter(|l| !l.dead) else { return id };
        let conn = link.conn;
        if lost {
            self.out.lost_connections += 1;
            self.break_link(conn);
            return id;
        }
        let t = (self.now + d).max(link.last_to_server + 1);
        link.last_to_server = t;
        let delay = t - self.now;
        self.at(delay, Ev::ToServer(s, conn, req, id));
        id
    }

    /// Client `c` starts a transaction (or, done, stops).
    fn wake(&mut self, c: usize) -> Result<(), Violation> {
        if self.clients[c].real.is_some() {
            return self.real_wake(c);
        }
        // While the faults last a client runs `txns_per_client`; then it waits for the calm,
        // in which it runs until it has committed `liveness::CALM_COMMITS` times.
        if self.clients[c].txn.is_some() || !self.has_work(c) {
            return Ok(());
        }
        let (uses, amount) = self.choose_uses();
        let id = self.clients[c].next_txn;
        self.clients[c].next_txn += 1;
        let mut txn = Txn { id, uses, amount, started_us: self.now, ..Txn::default() };
        for i in 0..txn.uses.len() {
            let u = txn.uses[i];
            let page = self.servers[u.server].accounts[u.account].page().expect("a real page");
            let rid = self.send(c, u.server, RequestBody::Fetch { page });
            txn.fetch_ids.push(rid);
        }
        self.trace(|| format!("client {c} starts txn {id}: {:?}", txn.uses));
        // The transaction is the client's open step for the liveness check.
        self.progress.asked(c, self.now);
        self.clients[c].txn = Some(txn);
        Ok(())
    }

    /// Whether client `c` has transactions left to run: while the faults last
    /// `txns_per_client`; then, once the calm has begun, until it has committed
    /// `liveness::CALM_COMMITS` times.
    fn has_work(&self, c: usize) -> bool {
        if self.progress.calm() {
            self.progress.wants_more(c)
        } else {
            self.faults && self.clients[c].done < self.cfg.txns_per_client
        }
    }

    /// The accounts of a client's next transaction, and the amount a transfer moves: an
    /// audit reads one account at each of two servers; a transfer writes one at each of two,
    /// sometimes reading a third server's too.
    fn choose_uses(&mut self) -> (Vec<Use>, u32) {
        if self.cfg.servers == 1 {
            return self.choose_uses_at_one();
        }
        let n = self.cfg.servers as u64;
        let a = self.rng.below(n) as usize;
        let b = (a + 1 + self.rng.below(n - 1) as usize) % self.cfg.servers;
        let pick =
            |w: &mut World, s: usize| w.rng.below(w.servers[s].accounts.len() as u64) as usize;
        let kind = self.rng.below(4);
        let mut uses = Vec::new();
        let (ua, ub) = (pick(self, a), pick(self, b));
        if kind == 0 {
            // An audit: read one account at each of two servers.
            uses.push(Use { server: a, account: ua, writes: false, seen: None });
            uses.push(Use { server: b, account: ub, writes: false, seen: None });
        } else {
            uses.push(Use { server: a, account: ua, writes: true, seen: None });
            uses.push(Use { server: b, account: ub, writes: true, seen: None });
            if kind == 1 && self.cfg.servers == 3 {
                let third = 3 - a - b;
                let u = pick(self, third);
                uses.push(Use { server: third, account: u, writes: false, seen: None });
                self.out.three_server += 1;
            }
        }
        let amount = 1 + self.rng.below(50) as u32;
        (uses, amount)
    }

    /// [`World::choose_uses`] with one server: an audit reads two of its accounts, a
    /// transfer writes two.
    fn choose_uses_at_one(&mut self) -> (Vec<Use>, u32) {
        let n = self.servers[0].accounts.len() as u64;
        let a = self.rng.below(n) as usize;
        let b = (a + 1 + self.rng.below(n - 1) as usize) % n as usize;
        let writes = self.rng.below(4) != 0;
        let uses = vec![
            Use { server: 0, account: a, writes, seen: None },
            Use { server: 0, account: b, writes, seen: None },
        ];
        let amount = 1 + self.rng.below(50) as u32;
        (uses, amount)
    }

    fn at_client(
        &mut self,
        c: usize,
        s: usize,
        conn: ConnId,
        msg: Option<(u64, Reply)>,
    ) -> Result<(), Violation> {
        if self.clients[c].real.is_some() {
            return self.at_real_client(c, s, conn, msg);
        }
        let one = self.cfg.servers == 1;
        let Some((id, reply)) = msg else {
            // A connection to server `s` broke: the session is over (the next request opens
            // another), and the transaction fails if it used the server: what it read there
            // belongs to the old session, whose invalidations it will never hear.
            if self.clients[c].links[s].as_ref().is_some_and(|l| l.conn == conn) {
                self.clients[c].links[s] = None;
            }
            let Some(t) = self.clients[c].txn.as_mut() else { return Ok(()) };
            if t.uses.iter().any(|u| u.server == s) {
                t.broken = true;
            }
            return self.maybe_finish(c);
        };
        if let Some(l) = self.clients[c].links[s].as_mut() {
            l.acks.extend(reply.invalidations.iter().copied());
        }
        let Some(t) = self.clients[c].txn.as_mut() else { return Ok(()) };
        // An invalidation of an account the open transaction read dooms it, as in the client
        // library: its acknowledgement goes on the next request, after which the server no
        // longer refuses the stale read, so the transaction must not be prepared.
        if !t.prepared
            && !reply.invalidations.is_empty()
            && t.uses.iter().any(|u| {
                u.server == s
                    && u.seen.is_some()
                    && reply.invalidations.contains(&self.servers[s].accounts[u.account])
            })
        {
            t.broken = true;
            return self.maybe_finish(c);
        }
        if let Some(i) = t.fetch_ids.iter().position(|&f| f == id) {
            t.fetch_ids[i] = 0;
            let ReplyBody::Page { bytes, .. } = &reply.body else {
                t.broken = true;
                return self.maybe_finish(c);
            };
            let u = t.uses[i];
            let o = self.servers[u.server].accounts[u.account];
            let view = PageView::parse(bytes).map_err(|e| Violation(format!("a page: {e}")))?;
            let obj = view.object(o.oid()).ok_or_else(|| Violation(format!("{o} is missing")))?;
            let t = self.clients[c].txn.as_mut().expect("checked");
            t.uses[i].seen =
                Some((u32_at(obj, WRITER_AT), u32_at(obj, TXN_AT), u32_at(obj, BALANCE_AT)));
            if t.fetch_ids.iter().all(|&f| f == 0) {
                self.prepare(c);
            }
            return Ok(());
        }
        if let Some(i) = t.awaiting.iter().position(|&(sv, rid)| sv == s && rid == id) {
            t.awaiting.remove(i);
            let coordinating = t.coordinator == Some(s);
            match &reply.body {
                // One server: its commit's answer (a read-only one's too) decides.
                ReplyBody::CommitOk { lsn, .. } if one => {
                    t.outcome = Some(true);
                    t.lsn = Some(*lsn);
                }
                ReplyBody::CommitRefused { .. } if one => t.outcome = Some(false),
                ReplyBody::CommitOk { .. } if coordinating => t.outcome = Some(true),
                ReplyBody::CommitRefused { .. } if coordinating || t.coordinator.is_none() => {
                    t.outcome = Some(false)
                }
                ReplyBody::Prepared { .. } if t.coordinator.is_none() && t.awaiting.is_empty() => {
                    if t.outcome.is_none() {
                        t.outcome = Some(true);
                    }
                }
                ReplyBody::Prepared { .. } | ReplyBody::CommitRefused { .. } => {}
                ReplyBody::Error { .. } => t.broken = true,
                other => {
                    return Err(Violation(format!("unexpected answer to a prepare: {other:?}")));
                }
            }
            return self.maybe_finish(c);
        }
        Ok(())
    }

    /// Every account of the transaction was read: prepare at every server it used.
    fn prepare(&mut self, c: usize) {
        let mut t = self.clients[c].txn.take().expect("a transaction");
        if t.broken {
            self.clients[c].txn = Some(t);
            let _ = self.maybe_finish(c);
            return;
        }
        t.stamp = stamp_of(c, t.id, self.now);
        let (participants, coordinator) = participants_of(&t.uses);
        t.coordinator = coordinator;
        if self.cfg.servers == 1 {
            let commit = self.single_commit(c, t.id, &t.uses, t.amount);
            let id = self.send(c, 0, RequestBody::Commit(commit));
            t.awaiting.push((0, id));
            t.prepared = true;
            self.clients[c].txn = Some(t);
            return;
        }
        for p in &participants {
            let s = p.server.0 as usize - 1;
            let mut commit = Commit::default();
            for (i, u) in t.uses.iter().enumerate().filter(|(_, u)| u.server == s) {
                let o = self.servers[s].accounts[u.account];
                commit.reads.push(o);
                if u.writes {
                    let balance = self.new_balance(c, t.id, &t.uses, t.amount, i);
                    let mut v = self.desc.new_object(self.class[s].raw(), 0);
                    put_u32(&mut v, WRITER_AT, c as u32 + 1);
                    put_u32(&mut v, TXN_AT, t.id);
                    put_u32(&mut v, BALANCE_AT, balance);
                    commit.versions.push((o, Bytes::from(v)));
                }
            }
            let p = Prepare {
                stamp: t.stamp,
                coordinator: t.coordinator.map(|s| ServerId(s as u32 + 1)),
                participants: participants.clone(),
                commit,
            };
            let id = self.send(c, s, RequestBody::Prepare(Box::new(p)));
            t.awaiting.push((s, id));
        }
        t.prepared = true;
        self.clients[c].txn = Some(t);
    }

    /// With one server: the commit of client `c`'s transaction `id`, which read `uses` and
    /// writes each of them that it writes.
    fn single_commit(&mut self, c: usize, id: u32, uses: &[Use], amount: u32) -> Commit {
        let mut commit = Commit::default();
        for (i, u) in uses.iter().enumerate() {
            let o = self.servers[0].accounts[u.account];
            commit.reads.push(o);
            if u.writes {
                let balance = self.new_balance(c, id, uses, amount, i);
                let mut v = self.desc.new_object(self.class[0].raw(), 0);
                put_u32(&mut v, WRITER_AT, c as u32 + 1);
                put_u32(&mut v, TXN_AT, id);
                put_u32(&mut v, BALANCE_AT, balance);
                commit.versions.push((o, Bytes::from(v)));
            }
        }
        commit
    }

    /// The order key of client `c`'s transaction in the history: its two-phase stamp, or with
    /// one server the LSN of its commit (the server's serial order), if it wrote and committed.
    fn order_of(
        &self,
        stamp: Stamp,
        uses: &[Use],
        committed_at: Option<thor_core::Lsn>,
    ) -> Option<u64> {
        if self.cfg.servers > 1 {
            return Some((stamp.time_us << 20) | u64::from(stamp.tie & 0xf_ffff));
        }
        committed_at.filter(|_| uses.iter().any(|u| u.writes)).map(|lsn| lsn.0)
    }

    /// Ends the client's transaction if its outcome is known (or cannot be), records it, and
    /// schedules the next.
    fn maybe_finish(&mut self, c: usize) -> Result<(), Violation> {
        let Some(t) = self.clients[c].txn.as_ref() else { return Ok(()) };
        let known = t.outcome.is_some() && (t.coordinator.is_some() || t.awaiting.is_empty());
        let read_only_refused = t.coordinator.is_none() && t.outcome == Some(false);
        if !(known || read_only_refused || t.broken) {
            return Ok(());
        }
        let t = self.clients[c].txn.take().expect("checked");
        if t.prepared {
            let order = self.order_of(t.stamp, &t.uses, t.lsn);
            self.record(c, t.id, order, &t.uses, t.outcome);
        }
        self.trace(|| format!("client {c} ends txn {}: {:?}", t.id, t.outcome));
        self.txn_ended(c, t.prepared && t.outcome == Some(true));
        Ok(())
    }

    /// Client `c`'s transaction ended (`committed`, or not): the liveness check hears of it,
    /// and the client's next transaction starts after a while.
    fn txn_ended(&mut self, c: usize, committed: bool) {
        self.progress.answered(c);
        if committed {
            self.progress.committed(c, self.now);
        }
        self.clients[c].done += 1;
        let d = 100 + self.rng.below(3_000);
        self.at(d, Ev::Wake(c));
    }

    /// The new balance of account `uses[i]` (written) of client `c`'s transfer `id` of
    /// `amount` (at most what the first account holds), remembered for the conservation
    /// check.
    fn new_balance(&mut self, c: usize, id: u32, uses: &[Use], amount: u32, i: usize) -> u32 {
        let (from, to) = (uses[0].seen.expect("read").2, uses[1].seen.expect("read").2);
        let amount = amount.min(from);
        let balance = if i == 0 { from - amount } else { to + amount };
        let u = uses[i];
        let o = self.servers[u.server].accounts[u.account];
        self.balances.insert((obj_id(u.server, o), version_of(c as u32 + 1, id)), balance);
        balance
    }

    /// Adds client `c`'s prepared transaction `id` to the history: what it read and wrote,
    /// with its `order` key ([`World::order_of`]), committed, aborted or (`None`) uncertain.
    fn record(
        &mut self,
        c: usize,
        id: u32,
        order: Option<u64>,
        uses: &[Use],
        outcome: Option<bool>,
    ) {
        let mut h = serial::Txn::new((u64::from(c as u32 + 1) << 32) | u64::from(id), c as u32 + 1);
        if let Some(key) = order {
            h = h.ordered(key);
        }
        for u in uses {
            let o = self.servers[u.server].accounts[u.account];
            let (w, x, _) = u.seen.expect("prepared transactions read everything");
            h = h.read(obj_id(u.server, o), version_of(w, x));
            if u.writes {
                h = h.write(obj_id(u.server, o), version_of(c as u32 + 1, id));
            }
        }
        match outcome {
            Some(true) => {
                self.out.committed += 1;
                self.history.add_committed(h);
            }
            Some(false) => {
                self.out.aborted += 1;
                self.history.add_aborted(h);
            }
            None => {
                self.out.uncertain += 1;
                self.history.add_uncertain(h);
            }
        }
    }

    /// The final judgement (see the module documentation).
    fn judge(&mut self) -> Result<(), Violation> {
        let mut state = Vec::new();
        let mut total = 0u64;
        for s in 0..self.cfg.servers {
            for o in self.servers[s].accounts.clone() {
                let page = o.page().expect("a real page");
                let bytes = match self
                    .settle_now(s, Input::Direct { ticket: 9, op: DirectOp::Fetch(page) })?
                    .pop()
                {
                    Some(DirectResult::Page(Ok(b))) => b,
                    other => return Err(Violation(format!("final fetch of {page}: {other:?}"))),
                };
                let view = PageView::parse(&bytes).map_err(|e| Violation(format!("{e}")))?;
                let obj = view.object(o.oid()).ok_or_else(|| Violation(format!("{o} is gone")))?;
                state.push((obj_id(s, o), version_of(u32_at(obj, WRITER_AT), u32_at(obj, TXN_AT))));
                total += u64::from(u32_at(obj, BALANCE_AT));
            }
        }
        self.trace(|| format!("final state: {state:x?}"));
        let opts = serial::Options { order_must_serialize: true };
        let summary = serial::check_with(&self.history, Some(&state), &opts)
            .map_err(|a| Violation(format!("not serializable: {a}")))?;
        let opening = u64::from(OPENING) * (self.cfg.servers * self.cfg.accounts) as u64;
        if total != opening {
            return Err(Violation(format!(
                "the accounts hold {total} at the end, {opening} at the start: a transfer committed at one server only"
            )));
        }
        let accounts: Vec<serial::ObjId> = state.iter().map(|(o, _)| *o).collect();
        let balances = &self.balances;
        serial::check_conserved_total(&self.history, &summary, &accounts, |o, v| {
            i64::from(*balances.get(&(o, v)).unwrap_or(&OPENING))
        })
        .map_err(|e| Violation(format!("money is not conserved: {e:?}")))?;
        self.judge_groups()?;
        self.out.in_doubt_kill = self.in_doubt_kill;
        Ok(())
    }
}
