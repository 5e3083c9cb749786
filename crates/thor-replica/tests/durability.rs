//! The two durability settings (`Durability::Disk`, `Durability::Memory`): in memory mode a
//! replica acknowledges before its fsync, a single replica's crash loses nothing acknowledged,
//! and a simultaneous power loss of a majority loses the commits of the last flush interval,
//! after which a replica that kept such an entry stops loudly when it meets the group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::Message;
use thor_replica::sim::{Cluster, ClusterConfig, NetConfig};
use thor_replica::{
    Apply, Durability, Proposal, RaftLog, Replica, ReplicaConfig, ReplicaError, Role,
    journal_options,
};
use thor_storage::{Disk, MemDisk, SplitMix64};

fn memory_cluster(replicas: u64, seed: u64, flush_every_ticks: Option<u64>) -> Cluster {
    let mut cfg = ClusterConfig::new(replicas, seed);
    cfg.durability = Durability::Memory;
    cfg.flush_every_ticks = flush_every_ticks;
    Cluster::new(cfg)
}

/// A follower whose fsync has not run (nobody flushes) still acknowledges: the commit is
/// acknowledged with no fsync anywhere on its path, and every replica holds it unflushed.
/// The same commit on disk takes fsyncs (the contrast that makes the count meaningful).
#[test]
fn memory_mode_acknowledges_before_fsync() {
    for seed in 0..20 {
        let mut c = memory_cluster(3, seed, None);
        assert!(c.run_until(500, |c| c.leader().is_some()), "seed {seed}: a leader");
        // The leader's first entry and one record: elections (synced votes) are over.
        c.commit(Bytes::from_static(b"warm"), 300).expect("the first commit");
        let ids = c.ids();
        let before: Vec<u64> = ids.iter().map(|id| c.syncs(*id)).collect();
        let index = c.commit(Bytes::from_static(b"r1"), 300).expect("acknowledged in memory");
        let after: Vec<u64> = ids.iter().map(|id| c.syncs(*id)).collect();
        assert_eq!(before, after, "seed {seed}: no fsync on an acknowledgement's path");
        let leader = c.leader().expect("still leads");
        let holders: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| c.replica(*id).is_some_and(|r| r.status().last_index >= index))
            .collect();
        assert!(holders.len() >= 2, "seed {seed}: a majority holds it: {holders:?}");
        for id in &holders {
            assert!(c.replica(*id).expect("up").unflushed(), "seed {seed}: {id} not flushed");
        }
        assert!(holders.iter().any(|id| *id != leader), "seed {seed}: a follower acknowledged");
        // The fsync behind makes it durable, once.
        for id in &ids {
            c.flush(*id);
            assert!(!c.replica(*id).expect("up").unflushed());
        }
        c.check_acknowledged_everywhere();

        let mut d = Cluster::new(ClusterConfig::new(3, seed));
        assert!(d.run_until(500, |c| c.leader().is_some()));
        d.commit(Bytes::from_static(b"warm"), 300).expect("the first commit");
        let before: u64 = ids.iter().map(|id| d.syncs(*id)).sum();
        d.commit(Bytes::from_static(b"r1"), 300).expect("acknowledged on disk");
        let after: u64 = ids.iter().map(|id| d.syncs(*id)).sum();
        assert!(after >= before + 2, "seed {seed}: on disk a majority fsyncs before the ack");
    }
}

/// Replicas crash one at a time (the leader too), losing their journal's unflushed tail,
/// and restart, under load, message loss and delay, with flushes rare or never: every
/// acknowledged record is in every replica once it caught up, and the harness's checks (one
/// sequence everywhere, acknowledged means committed) hold throughout. A crash comes only
/// once every replica caught up with what was acknowledged (the condition the module docs
/// state: until then the crashed replica's copy is one of a majority's).
#[test]
fn memory_mode_single_crash_loses_nothing_acknowledged() {
    const SEEDS: u64 = 60;
    const TICKS: u64 = 600;
    let mut crashes = 0;
    for seed in 0..SEEDS {
        let mut rng = SplitMix64::new(seed ^ 0xD0_0AB1E);
        let replicas = if rng.coin() { 3 } else { 5 };
        let flush = [None, Some(25), Some(5)][rng.below(3) as usize];
        let mut cfg = ClusterConfig::new(replicas, seed);
        cfg.durability = Durability::Memory;
        cfg.flush_every_ticks = flush;
        cfg.net = NetConfig { loss_per_mille: rng.below(40), delay_ticks_max: 1 + rng.below(3) };
        let mut c = Cluster::new(cfg);
        let ids = c.ids();
        let mut down: Option<(u64, u64)> = None;
        let mut n = 0;
        for t in 0..TICKS {
            if rng.below(100) < 50
                && let Some(l) = c.leader()
            {
                n += 1;
                let _ = c.propose(l, Bytes::from(format!("s{seed}-{n}")));
            }
            match down {
                Some((id, at)) if t >= at => {
                    c.restart(id);
                    down = None;
                }
                Some(_) => {}
                None => {
                    let acked = c.acknowledged().keys().next_back().copied().unwrap_or(0);
                    if rng.below(100) < 3 && c.all_applied(acked) {
                        let pick = ids[rng.below(ids.len() as u64) as usize];
                        c.crash(pick);
                        crashes += 1;
                        down = Some((pick, t + 1 + rng.below(40)));
                    }
                }
            }
            c.tick();
        }
        if let Some((id, _)) = down {
            c.restart(id);
        }
        let last = c
            .commit(Bytes::from(format!("s{seed}-last")), 2_000)
            .unwrap_or_else(|| panic!("seed {seed}: progress after the crashes\n{}", c.describe()));
        assert!(
            c.run_until(2_000, |c| c.all_applied(last)),
            "seed {seed}: every replica catches up\n{}",
            c.describe()
        );
        c.check_acknowledged_everywhere();
        for id in &ids {
            let have: BTreeMap<u64, &Bytes> =
                c.applied_records(*id).iter().map(|(i, r)| (*i, r)).collect();
            for (i, (_, r)) in c.acknowledged() {
                assert_eq!(have.get(i), Some(&r), "seed {seed}: replica {id} at {i}");
            }
        }
    }
    assert!(crashes >= SEEDS, "crashes happened: {crashes}");
}

/// Three replicas over memory disks, driven by hand: which messages flow, who is up.
struct Group {
    disks: BTreeMap<u64, MemDisk>,
    up: BTreeMap<u64, Replica>,
    /// Replicas cut off from every other.
    cut: BTreeSet<u64>,
    /// Each replica's applied entries since it last opened: index → (term, record).
    applied: BTreeMap<u64, BTreeMap<u64, (u64, Bytes)>>,
    acked: Vec<Proposal>,
    /// Replicas stopped by an error, with it (a driver stops a replica whose call fails).
    stopped: Vec<(u64, ReplicaError)>,
}

impl Group {
    fn new() -> Group {
        let mut g = Group {
            disks: BTreeMap::new(),
            up: BTreeMap::new(),
            cut: BTreeSet::new(),
            applied: BTreeMap::new(),
            acked: Vec::new(),
            stopped: Vec::new(),
        };
        for id in 1..=3 {
            g.disks.insert(id, MemDisk::with_sector_bytes(64));
            g.start(id);
        }
        g
    }

    fn start(&mut self, id: u64) {
        let disk = Arc::new(self.disks[&id].clone()) as Arc<dyn Disk>;
        let log = RaftLog::bootstrap(disk, journal_options(), &[1, 2, 3]).expect("opens");
        let cfg = ReplicaConfig { durability: Durability::Memory, ..ReplicaConfig::new(id, 7) };
        self.up.insert(id, Replica::open(cfg, log).expect("starts"));
        self.applied.insert(id, BTreeMap::new());
    }

    /// A power loss: the replica stops and its disk keeps only what was synced.
    fn power_loss(&mut self, id: u64, seed: u64) {
        self.up.remove(&id);
        self.disks[&id].crash(seed);
    }

    /// Every replica's readies and the messages they send, until none flows (bounded).
    fn settle(&mut self) {
        let mut msgs: Vec<Message> = Vec::new();
        for _ in 0..200 {
            let mut failed = Vec::new();
            for (id, r) in self.up.iter_mut() {
                let fx = match r.advance() {
                    Ok(fx) => fx,
                    Err(e) => {
                        failed.push((*id, e));
                        continue;
                    }
                };
                let applied = self.applied.get_mut(id).expect("known");
                for c in fx.committed {
                    if let Apply::Record(b) = c.apply {
                        applied.insert(c.index, (c.term, b));
                    }
                }
                self.acked.extend(fx.acknowledged);
                msgs.extend(fx.messages);
            }
            for (id, e) in failed {
                self.up.remove(&id);
                self.stopped.push((id, e));
            }
            if msgs.is_empty() {
                return;
            }
            for m in msgs.drain(..) {
                if self.cut.contains(&m.from) || self.cut.contains(&m.to) {
                    continue;
                }
                if let Some(r) = self.up.get_mut(&m.to) {
                    let _ = r.step(m);
                }
            }
        }
    }

    fn tick(&mut self) {
        for r in self.up.values_mut() {
            r.tick();
        }
        self.settle();
    }

    fn leader(&self) -> Option<u64> {
        self.up.iter().find(|(_, r)| r.status().role == Role::Leader).map(|(id, _)| *id)
    }

    fn elect(&mut self) -> u64 {
        for _ in 0..1_000 {
            if let Some(l) = self.leader() {
                return l;
            }
            self.tick();
        }
        panic!("no leader");
    }

    fn commit(&mut self, on: u64, record: &'static [u8]) -> Proposal {
        let p =
            self.up.get_mut(&on).expect("up").propose(Bytes::from_static(record)).expect("leads");
        for _ in 0..100 {
            self.settle();
            if self.acked.contains(&p) {
                return p;
            }
            self.tick();
        }
        panic!("{record:?} not acknowledged");
    }
}

/// A simultaneous power loss of a majority loses what was acknowledged in the last flush
/// interval: the group goes on without it (another entry takes its index). A replica that
/// had applied the lost entry and kept it (it had flushed) then meets the group and stops
/// loudly (`ReplicaError::Diverged`): it must be replaced from an image.
#[test]
fn memory_mode_majority_power_loss_loses_the_last_flush_interval_loudly() {
    let mut g = Group::new();
    let l = g.elect();
    g.commit(l, b"durable");
    for id in 1..=3 {
        g.up.get_mut(&id).expect("up").flush().expect("flushes");
    }
    let (a, c) = match l {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    // The third replica cannot hear: the next commit is in the memory of the other two.
    g.cut.insert(c);
    let lost = g.commit(l, b"acknowledged, then lost");
    for _ in 0..5 {
        g.tick();
    }
    assert_eq!(g.applied[&a].get(&lost.index).map(|(t, _)| *t), Some(lost.term), "a applied it");
    // `a` flushes (it keeps the entry, and its commit); the leader never did.
    g.up.get_mut(&a).expect("up").flush().expect("flushes");
    // The power loss of a majority: the leader and `a`; `a` stays down for now.
    g.power_loss(l, 1);
    g.power_loss(a, 2);
    g.cut.clear();
    g.start(l);
    let l2 = g.elect();
    let after = g.commit(l2, b"after the loss");
    assert!(after.index >= lost.index);
    let held = g.applied[&l2].get(&lost.index).cloned();
    assert_ne!(
        held.map(|(t, _)| t),
        Some(lost.term),
        "the group lost the acknowledged entry: another took index {}",
        lost.index
    );
    // `a` comes back with the lost entry committed and applied, and stops loudly: the
    // first append of the new leader contradicts what it committed.
    g.start(a);
    for _ in 0..200 {
        if !g.stopped.is_empty() {
            break;
        }
        g.tick();
    }
    match g.stopped.as_slice() {
        [(id, ReplicaError::Diverged(why))] if *id == a => {
            assert!(why.contains(&format!("index {}", lost.index)), "{why}")
        }
        other => panic!("replica {a} must stop as diverged, got {other:?}"),
    }
    assert!(!g.up.contains_key(&a));
    // The group goes on without it.
    g.commit(l2, b"and on");
}
