//! A deterministic harness: a replica group in one thread, over `MemDisk`s and a seeded
//! network, with the checks every run makes.
//!
//! ```text
//!            seed ──► SplitMix64 ──► loss, delay (so reordering), crash tears
//!   ┌────────┐   msgs   ┌───────────────────────────┐   msgs   ┌────────┐
//!   │ node 1 │ ───────► │ network: in flight, each   │ ───────► │ node 2 │ ...
//!   │Replica │          │ due at a tick; partitions  │          │Replica │
//!   │MemDisk │          │ drop what crosses them     │          │MemDisk │
//!   └────────┘          └───────────────────────────┘          └────────┘
//! ```
//!
//! Each node is a [`Replica`] over a [`RaftLog`] on its own [`MemDisk`], and an application:
//! the sequence of records it applied (its "database"), whose encoding is the snapshot image.
//! [`Cluster::tick`] advances every live replica's clock, delivers the messages that are due,
//! and runs every replica's [`Replica::ready`] and (at once, or some ticks later, by seed)
//! [`Replica::persist`], routing what it sends through the network.
//! Crashes drop a replica and crash its disk (unsynced writes lost or torn, by seed); restarts
//! reopen it from the disk alone.
//!
//! # Checks (each a panic naming the seed)
//!
//! - *Same sequence everywhere:* the first replica to apply index `i` fixes what `i` holds
//!   (its term and record); every replica that applies `i`, now or after a restart or from a
//!   snapshot image, must apply exactly that.
//! - *Acknowledged means committed:* a proposal acknowledged by its replica must be what index
//!   `i` holds, with the proposal's term and bytes, at the moment it is acknowledged; and
//!   [`Cluster::check_acknowledged_everywhere`] checks that every acknowledged record is in
//!   every live replica's applied sequence at its index once that replica applied that far.
//! - *Liveness* is the caller's: [`Cluster::run_until`] waits for a condition within a bound
//!   of ticks and reports whether it held.
//!
//! Nothing here reads a clock or OS randomness: a seed replays a run exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use raft::SnapshotStatus;
use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2, Message, MessageType};
use thor_storage::{Disk, FaultDisk, FaultPlan, MemDisk, SplitMix64};

use crate::error::ProposeError;
use crate::replica::{Apply, Durability, Effects, Mutant, Proposal, Replica, ReplicaConfig, Role};
use crate::storage::{RaftLog, journal_options};

/// Messages the simulated network holds at once; past it a new message is dropped (which Raft
/// tolerates), so a storm cannot grow memory without bound.
pub const NETWORK_IN_FLIGHT_MAX: usize = 20_000;

/// The simulated network's faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConfig {
    /// Messages lost, per thousand.
    pub loss_per_mille: u64,
    /// Each message is delivered 1 to `delay_ticks_max` ticks after it was sent, drawn per
    /// message, so messages overtake each other.
    pub delay_ticks_max: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig { loss_per_mille: 0, delay_ticks_max: 1 }
    }
}

/// How a cluster is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The founding members are `1..=replicas`.
    pub replicas: u64,
    /// The run's seed: network, crashes and every replica's election timeouts.
    pub seed: u64,
    /// The network's faults.
    pub net: NetConfig,
    /// Every replica compacts its log after this many applied entries (so that lagging and new
    /// replicas catch up from a snapshot), or never.
    pub compact_every: Option<u64>,
    /// Per thousand: how often a replica defers the fsync of what it journalled to a later
    /// tick (the window in which a crash loses unsynced writes).
    pub defer_sync_per_mille: u64,
    /// Every replica runs this deliberately broken variant (checker tests only).
    pub mutant: Option<Mutant>,
    /// Every replica's durability setting.
    pub durability: Durability,
    /// In [`Durability::Memory`]: every replica flushes its journal (the fsync behind) every
    /// this many ticks; `None`, only when a test calls [`Cluster::flush`].
    pub flush_every_ticks: Option<u64>,
}

impl ClusterConfig {
    /// `replicas` founding members, a perfect network, no compaction.
    pub fn new(replicas: u64, seed: u64) -> Self {
        ClusterConfig {
            replicas,
            seed,
            net: NetConfig::default(),
            compact_every: None,
            defer_sync_per_mille: 0,
            mutant: None,
            durability: Durability::Disk,
            flush_every_ticks: Some(1),
        }
    }
}

/// One simulated server: its disk, its replica while it runs, and its application state.
#[derive(Debug)]
struct Node {
    /// The node's disk; survives crashes (minus unsynced writes). Fault-injecting, so that a
    /// test can fail an fsync: the records it covered are written but not durable, and the
    /// crash that follows may tear them.
    disk: FaultDisk,
    /// Whether an fsync failure was injected: the replica's next error is expected, and
    /// crashes it (as a server stops when its log is poisoned).
    sync_fault_armed: bool,
    /// Whether it was a founding member (bootstrapped with the founding membership).
    founder: bool,
    /// The running replica, or `None` while crashed.
    replica: Option<Replica>,
    /// The records applied, in index order: the application's state.
    state: Vec<(u64, Bytes)>,
    /// The last index applied (records, no-ops and membership changes alike).
    applied: u64,
    /// The index of the last compaction.
    compacted: u64,
}

/// What index `i` holds, as first applied anywhere.
#[derive(Debug, Clone, PartialEq)]
struct Fixed {
    term: u64,
    record: Option<Bytes>,
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Messages delivered.
    pub delivered: u64,
    /// Messages dropped by loss, partitions, down replicas or the network bound.
    pub dropped: u64,
    /// Proposals acknowledged.
    pub acknowledged: u64,
    /// Proposals reported lost (their index committed with another term).
    pub lost: u64,
    /// Snapshots installed by followers.
    pub restores: u64,
    /// Crashes.
    pub crashes: u64,
    /// Crashes that followed an injected fsync failure.
    pub failed_syncs: u64,
}

/// A replica group in one thread. See the module documentation.
#[derive(Debug)]
pub struct Cluster {
    cfg: ClusterConfig,
    rng: SplitMix64,
    now: u64,
    nodes: BTreeMap<u64, Node>,
    /// In flight: (due tick, sequence number) → (from, message).
    network: BTreeMap<(u64, u64), (u64, Message)>,
    seq: u64,
    /// The partition: replicas in different groups cannot talk. `None`: everyone can.
    groups: Option<Vec<BTreeSet<u64>>>,
    /// What each index holds, fixed by the first replica that applied it.
    fixed: BTreeMap<u64, Fixed>,
    /// Proposals made and not yet resolved: (replica, index) → (term, record), the record
    /// `None` for a membership change.
    proposed: BTreeMap<(u64, u64), (u64, Option<Bytes>)>,
    /// Every acknowledged proposal and its record.
    acknowledged: BTreeMap<u64, (u64, Bytes)>,
    /// Every proposal reported lost.
    lost: Vec<(u64, Proposal)>,
    stats: SimStats,
}

fn encode_image(state: &[(u64, Bytes)]) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    for (i, r) in state {
        out.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&(r.len() as u64).to_le_bytes());
        out.extend_from_slice(r);
    }
    Bytes::from(out)
}

fn decode_image(image: &[u8]) -> Vec<(u64, Bytes)> {
    if image.is_empty() {
        return Vec::new();
    }
    let u64_at = |at: usize| u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"));
    let n = u64_at(0) as usize;
    let mut at = 8;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (i, len) = (u64_at(at), u64_at(at + 8) as usize);
        at += 16;
        out.push((i, Bytes::copy_from_slice(&image[at..at + len])));
        at += len;
    }
    out
}

impl Cluster {
    /// Founds a group of `cfg.replicas` replicas, all up, none leading yet.
    pub fn new(cfg: ClusterConfig) -> Cluster {
        let mut c = Cluster {
            cfg,
            rng: SplitMix64::new(cfg.seed),
            now: 0,
            nodes: BTreeMap::new(),
            network: BTreeMap::new(),
            seq: 0,
            groups: None,
            fixed: BTreeMap::new(),
            proposed: BTreeMap::new(),
            acknowledged: BTreeMap::new(),
            lost: Vec::new(),
            stats: SimStats::default(),
        };
        for id in 1..=cfg.replicas {
            let node = Node {
                disk: FaultDisk::wrap(MemDisk::with_sector_bytes(64)),
                sync_fault_armed: false,
                founder: true,
                replica: None,
                state: Vec::new(),
                applied: 0,
                compacted: 0,
            };
            c.nodes.insert(id, node);
            c.start(id);
        }
        c
    }

    fn fail(&self, what: String) -> ! {
        panic!("seed {} tick {}: {what}", self.cfg.seed, self.now)
    }

    /// Opens replica `id` from its disk alone.
    fn start(&mut self, id: u64) {
        let founders: Vec<u64> = (1..=self.cfg.replicas).collect();
        let node = self.nodes.get_mut(&id).expect("known node");
        assert!(node.replica.is_none(), "replica {id} is already running");
        let disk = Arc::new(node.disk.clone()) as Arc<dyn Disk>;
        let log = if node.founder {
            RaftLog::bootstrap(disk, journal_options(), &founders)
        } else {
            RaftLog::open(disk, journal_options())
        };
        let log =
            log.unwrap_or_else(|e| panic!("seed {}: replica {id} reopens: {e}", self.cfg.seed));
        let rcfg = ReplicaConfig {
            mutant: self.cfg.mutant,
            durability: self.cfg.durability,
            ..ReplicaConfig::new(id, self.cfg.seed ^ id)
        };
        let replica = Replica::open(rcfg, log)
            .unwrap_or_else(|e| panic!("seed {}: replica {id} starts: {e}", self.cfg.seed));
        node.state = decode_image(&replica.snapshot_image());
        node.applied = replica.status().snapshot_index;
        node.compacted = node.applied;
        node.replica = Some(replica);
        let state = node.state.clone();
        self.check_image(id, &state);
    }

    /// The current tick.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The run's counters.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// The ids of every node (running or not).
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Whether replica `id` runs.
    pub fn is_up(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.replica.is_some())
    }

    /// Replica `id`, if it runs.
    pub fn replica(&self, id: u64) -> Option<&Replica> {
        self.nodes.get(&id).and_then(|n| n.replica.as_ref())
    }

    /// The records replica `id` applied, in index order.
    pub fn applied_records(&self, id: u64) -> &[(u64, Bytes)] {
        &self.nodes[&id].state
    }

    /// The last index replica `id` applied.
    pub fn applied_index(&self, id: u64) -> u64 {
        self.nodes[&id].applied
    }

    /// Every acknowledged proposal: index → (term, record).
    pub fn acknowledged(&self) -> &BTreeMap<u64, (u64, Bytes)> {
        &self.acknowledged
    }

    /// Every proposal reported lost, with its replica.
    pub fn lost(&self) -> &[(u64, Proposal)] {
        &self.lost
    }

    /// The running leader of the highest term, if any.
    pub fn leader(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|(id, n)| n.replica.as_ref().map(|r| (r.status(), *id)))
            .filter(|(s, _)| s.role == Role::Leader)
            .max_by_key(|(s, _)| s.term)
            .map(|(_, id)| id)
    }

    /// Whether `a` and `b` can talk under the current partition.
    pub fn can_talk(&self, a: u64, b: u64) -> bool {
        match &self.groups {
            None => true,
            Some(groups) => groups.iter().any(|g| g.contains(&a) && g.contains(&b)),
        }
    }

    /// Splits the network into `groups`; a replica in no group is isolated.
    pub fn partition(&mut self, groups: &[&[u64]]) {
        self.groups = Some(groups.iter().map(|g| g.iter().copied().collect()).collect());
    }

    /// Lets everyone talk again.
    pub fn heal(&mut self) {
        self.groups = None;
    }

    /// Changes the network's faults.
    pub fn set_net(&mut self, net: NetConfig) {
        self.cfg.net = net;
    }

    /// Crashes replica `id`: it stops, its disk loses (or tears) what was not synced, and its
    /// application state is gone. Its unresolved proposals will never be acknowledged.
    pub fn crash(&mut self, id: u64) {
        let seed = self.rng.next_u64();
        let node = self.nodes.get_mut(&id).expect("known node");
        if node.replica.take().is_none() {
            return;
        }
        node.disk.crash(seed);
        node.sync_fault_armed = false;
        node.state.clear();
        node.applied = 0;
        self.proposed.retain(|(r, _), _| *r != id);
        self.stats.crashes += 1;
    }

    /// Makes replica `id`'s next fsync fail: what it covered is written but not durable. The
    /// replica's journal is then poisoned, its next `advance` fails, and the harness crashes
    /// it (a crash that may tear those writes).
    pub fn fail_next_sync(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("known node");
        if node.replica.is_some() {
            let syncs = node.disk.counters().syncs;
            node.disk.set_plan(FaultPlan { fail_sync_at: Some(syncs + 1), ..FaultPlan::default() });
            node.sync_fault_armed = true;
        }
    }

    /// Withdraws every planned disk fault (an fsync failure not yet reached).
    pub fn clear_disk_faults(&mut self) {
        for n in self.nodes.values_mut() {
            n.disk.set_plan(FaultPlan::default());
            n.sync_fault_armed = false;
        }
    }

    /// Restarts a crashed replica from its disk.
    pub fn restart(&mut self, id: u64) {
        if !self.is_up(id) {
            self.start(id);
        }
    }

    /// Adds node `id` with an empty disk, running but not yet a member: it joins when a
    /// membership change adding it commits, and catches up from the leader.
    pub fn add_node(&mut self, id: u64) {
        assert!(!self.nodes.contains_key(&id), "node {id} exists");
        let node = Node {
            disk: FaultDisk::wrap(MemDisk::with_sector_bytes(64)),
            sync_fault_armed: false,
            founder: false,
            replica: None,
            state: Vec::new(),
            applied: 0,
            compacted: 0,
        };
        self.nodes.insert(id, node);
        self.start(id);
    }

    /// Proposes `record` on replica `id`.
    pub fn propose(&mut self, id: u64, record: Bytes) -> Result<Proposal, ProposeError> {
        let Some(r) = self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) else {
            return Err(ProposeError::NotLeader { leader: None });
        };
        let p = r.propose(record.clone())?;
        self.proposed.insert((id, p.index), (p.term, Some(record)));
        Ok(p)
    }

    /// Proposes a membership change on replica `id`: `add` and `remove` voters.
    pub fn propose_membership(
        &mut self,
        id: u64,
        add: &[u64],
        remove: &[u64],
    ) -> Result<Proposal, ProposeError> {
        let Some(r) = self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) else {
            return Err(ProposeError::NotLeader { leader: None });
        };
        let mut cc = ConfChangeV2::default();
        let single = |t: ConfChangeType, node_id: u64| {
            let mut s = ConfChangeSingle::default();
            s.set_change_type(t);
            s.node_id = node_id;
            s
        };
        let mut changes: Vec<ConfChangeSingle> =
            add.iter().map(|n| single(ConfChangeType::AddNode, *n)).collect();
        changes.extend(remove.iter().map(|n| single(ConfChangeType::RemoveNode, *n)));
        cc.set_changes(changes.into());
        let p = r.propose_membership(cc)?;
        self.proposed.insert((id, p.index), (p.term, None));
        Ok(p)
    }

    /// One tick: every running replica's clock advances, the messages due are delivered, and
    /// every replica's effects are handled.
    pub fn tick(&mut self) {
        self.now += 1;
        for n in self.nodes.values_mut() {
            if let Some(r) = n.replica.as_mut() {
                r.tick();
            }
        }
        self.deliver_due();
        self.advance_all();
        if self.cfg.durability == Durability::Memory
            && let Some(every) = self.cfg.flush_every_ticks
            && self.now.is_multiple_of(every.max(1))
        {
            let ids: Vec<u64> = self.nodes.keys().copied().collect();
            for id in ids {
                self.flush(id);
            }
        }
    }

    /// Replica `id`'s fsync behind ([`Replica::flush`]), if it is up; an error after an
    /// injected fsync failure crashes it.
    pub fn flush(&mut self, id: u64) {
        let Some(r) = self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) else {
            return;
        };
        match r.flush() {
            Ok(()) => {}
            Err(_) if self.nodes[&id].sync_fault_armed => {
                self.stats.failed_syncs += 1;
                self.crash(id);
            }
            Err(e) => self.fail(format!("replica {id} flushes: {e}")),
        }
    }

    /// How many fsyncs replica `id`'s disk has done (its journal's syncs, the flushes
    /// behind included).
    pub fn syncs(&self, id: u64) -> u64 {
        self.nodes[&id].disk.counters().syncs
    }

    /// Runs ticks until `done` holds (checked before each tick) or `max_ticks` have passed;
    /// returns whether it held.
    pub fn run_until(&mut self, max_ticks: u64, mut done: impl FnMut(&Cluster) -> bool) -> bool {
        for _ in 0..max_ticks {
            if done(self) {
                return true;
            }
            self.tick();
        }
        done(self)
    }

    /// Proposes `record` on the leader (retrying, as a client would, while there is none or
    /// the proposal is lost) until it is acknowledged, within `max_ticks`. Returns its index.
    pub fn commit(&mut self, record: Bytes, max_ticks: u64) -> Option<u64> {
        let deadline = self.now + max_ticks;
        while self.now < deadline {
            if let Some(l) = self.leader()
                && let Ok(p) = self.propose(l, record.clone())
            {
                // Wait for this proposal to resolve (acknowledged, lost, or its replica gone),
                // or, as a client's timeout would, give up on it once its replica no longer
                // leads its term: its fate is then decided only when some leader commits its
                // index, which may take long. (It may still commit: then the record is there
                // twice, which a real client's retry must tolerate.)
                while self.now < deadline
                    && self.proposed.contains_key(&(l, p.index))
                    && self.replica(l).is_some_and(|r| {
                        let s = r.status();
                        s.role == Role::Leader && s.term == p.term
                    })
                {
                    self.tick();
                }
                if self
                    .acknowledged
                    .get(&p.index)
                    .is_some_and(|(t, r)| *t == p.term && *r == record)
                {
                    return Some(p.index);
                }
                continue;
            }
            self.tick();
        }
        None
    }

    fn deliver_due(&mut self) {
        while let Some(entry) = self.network.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (from, msg) = entry.remove();
            let to = msg.to;
            let is_snapshot = msg.msg_type == MessageType::MsgSnapshot;
            let ok = self.can_talk(from, to) && self.is_up(to);
            if !ok {
                self.stats.dropped += 1;
                if is_snapshot {
                    self.report_snapshot(from, to, SnapshotStatus::Failure);
                }
                continue;
            }
            let r = self.nodes.get_mut(&to).and_then(|n| n.replica.as_mut()).expect("up");
            // A refused message is dropped, as a real transport would.
            let _ = r.step(msg);
            self.stats.delivered += 1;
            if is_snapshot {
                self.report_snapshot(from, to, SnapshotStatus::Finish);
            }
        }
    }

    fn report_snapshot(&mut self, from: u64, to: u64, status: SnapshotStatus) {
        if let Some(r) = self.nodes.get_mut(&from).and_then(|n| n.replica.as_mut()) {
            r.report_snapshot(to, status);
        }
    }

    fn send(&mut self, from: u64, msgs: Vec<Message>) {
        for m in msgs {
            let lost = self.rng.below(1000) < self.cfg.net.loss_per_mille;
            if lost || !self.can_talk(from, m.to) || self.network.len() >= NETWORK_IN_FLIGHT_MAX {
                self.stats.dropped += 1;
                if m.msg_type == MessageType::MsgSnapshot {
                    self.report_snapshot(from, m.to, SnapshotStatus::Failure);
                }
                continue;
            }
            let due = self.now + 1 + self.rng.below(self.cfg.net.delay_ticks_max.max(1));
            self.seq += 1;
            self.network.insert((due, self.seq), (from, m));
        }
    }

    /// Runs every replica's readies. Each journals them, then persists them at once, or, with
    /// probability `defer_sync_per_mille`, in a later tick: a crash in between loses what was
    /// journalled but not synced, which no peer was told was durable.
    fn advance_all(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            self.run_replica(id, Replica::ready);
            let due = self.replica(id).is_some_and(Replica::needs_sync);
            if due && self.rng.below(1000) >= self.cfg.defer_sync_per_mille {
                self.run_replica(id, Replica::persist);
            }
        }
    }

    /// Runs `step` (ready or persist) on replica `id` if it is up and handles its effects; an
    /// error after an injected fsync failure crashes it.
    fn run_replica(
        &mut self,
        id: u64,
        step: fn(&mut Replica) -> Result<Effects, crate::error::ReplicaError>,
    ) {
        let Some(r) = self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) else {
            return;
        };
        match step(r) {
            Ok(fx) => self.handle(id, fx),
            Err(_) if self.nodes[&id].sync_fault_armed => {
                self.stats.failed_syncs += 1;
                self.crash(id);
            }
            Err(e) => self.fail(format!("replica {id}: {e}")),
        }
    }

    fn handle(&mut self, id: u64, fx: Effects) {
        if let Some(restore) = &fx.restore {
            let state = decode_image(&restore.image);
            self.check_image(id, &state);
            let node = self.nodes.get_mut(&id).expect("known node");
            node.state = state;
            node.applied = restore.index;
            node.compacted = node.compacted.max(restore.index);
            self.stats.restores += 1;
        }
        for c in &fx.committed {
            let record = match &c.apply {
                Apply::Record(r) => Some(r.clone()),
                Apply::Membership { .. } | Apply::Noop => None,
            };
            let got = Fixed { term: c.term, record: record.clone() };
            match self.fixed.get(&c.index) {
                Some(f) if *f != got => self.fail(format!(
                    "replica {id} applied {got:?} at {}, where {f:?} was applied before",
                    c.index
                )),
                Some(_) => {}
                None => {
                    self.fixed.insert(c.index, got);
                }
            }
            let applied = self.nodes[&id].applied;
            if c.index != applied + 1 {
                self.fail(format!("replica {id} applied {} after {applied}", c.index));
            }
            let node = self.nodes.get_mut(&id).expect("known node");
            node.applied = c.index;
            if let Some(r) = record {
                node.state.push((c.index, r));
            }
        }
        for p in &fx.acknowledged {
            let Some((term, record)) = self.proposed.remove(&(id, p.index)) else {
                self.fail(format!("replica {id} acknowledged {p:?}, which it never proposed"));
            };
            let f = self.fixed.get(&p.index).cloned();
            if term != p.term || f != Some(Fixed { term, record: record.clone() }) {
                self.fail(format!(
                    "replica {id} acknowledged {p:?} ({record:?}) but index {} holds {f:?}",
                    p.index
                ));
            }
            // A membership change: checked above, nothing more to remember.
            let Some(record) = record else { continue };
            if let Some(prev) = self.acknowledged.insert(p.index, (term, record)) {
                self.fail(format!("index {} acknowledged twice (before: {prev:?})", p.index));
            }
            self.stats.acknowledged += 1;
        }
        for p in fx.lost.iter().chain(&fx.undecided) {
            self.proposed.remove(&(id, p.index));
        }
        for p in &fx.lost {
            if self.acknowledged.get(&p.index).is_some_and(|(t, _)| *t == p.term) {
                self.fail(format!("replica {id} reported acknowledged {p:?} lost"));
            }
            self.lost.push((id, *p));
            self.stats.lost += 1;
        }
        self.send(id, fx.messages);
        self.maybe_compact(id);
    }

    /// An image installed or reopened must agree with what each of its indexes holds.
    fn check_image(&self, id: u64, state: &[(u64, Bytes)]) {
        for (i, r) in state {
            if let Some(f) = self.fixed.get(i)
                && f.record.as_ref() != Some(r)
            {
                self.fail(format!("replica {id}'s image holds {r:?} at {i}, where {f:?} applied"));
            }
        }
    }

    fn maybe_compact(&mut self, id: u64) {
        let Some(every) = self.cfg.compact_every else { return };
        let node = self.nodes.get_mut(&id).expect("known node");
        if node.applied < node.compacted + every {
            return;
        }
        let image = encode_image(&node.state);
        let r = node.replica.as_mut().expect("running");
        match r.compact(image) {
            Ok(()) => node.compacted = node.applied,
            Err(_) if node.sync_fault_armed => {
                self.stats.failed_syncs += 1;
                self.crash(id);
            }
            Err(e) => self.fail(format!("replica {id} compacts: {e}")),
        }
    }

    /// Checks that every acknowledged record is in every running replica's applied sequence
    /// at its index, for each replica that has applied that far.
    pub fn check_acknowledged_everywhere(&self) {
        for (id, n) in &self.nodes {
            if n.replica.is_none() {
                continue;
            }
            let have: BTreeMap<u64, &Bytes> = n.state.iter().map(|(i, r)| (*i, r)).collect();
            for (i, (_, record)) in self.acknowledged.range(..=n.applied) {
                if have.get(i) != Some(&record) {
                    self.fail(format!(
                        "replica {id} applied up to {} but holds {:?} at acknowledged index {i}",
                        n.applied,
                        have.get(i)
                    ));
                }
            }
        }
    }

    /// Every replica's status, one line each, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = format!("tick {}, partition {:?}\n", self.now, self.groups);
        for (id, n) in &self.nodes {
            match &n.replica {
                Some(r) => {
                    out += &format!(
                        "  {id}: {:?} voters {:?} applied {}\n",
                        r.status(),
                        r.conf_state().voters,
                        n.applied
                    )
                }
                None => out += &format!("  {id}: down\n"),
            }
        }
        out
    }

    /// Whether every running member has applied at least up to `index`.
    pub fn all_applied(&self, index: u64) -> bool {
        self.nodes.values().filter(|n| n.replica.is_some()).all(|n| n.applied >= index)
    }
}
