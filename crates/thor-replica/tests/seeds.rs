//! Many seeded runs of a replica group through random faults: crashes and restarts (disks
//! that lose unsynced writes), partitions (minority, majority, isolated leader), message loss,
//! delay and reordering, compaction and snapshots. Every run checks, as it goes, that all
//! replicas apply the same sequence and that every acknowledged record is what its index
//! holds; at the end, with the faults healed, that a leader is elected and a proposal commits
//! within a bound of ticks, and that every acknowledged record is in every replica at its
//! index.
//!
//! `THOR_REPLICA_SEEDS=N` runs seeds `0..N` (default 1,000); a failure names its seed, and
//! `THOR_REPLICA_SEED=S` replays that one alone.

use std::collections::BTreeMap;

use bytes::Bytes;
use thor_replica::sim::{Cluster, ClusterConfig, NetConfig, SimStats};
use thor_storage::SplitMix64;

const SEEDS_DEFAULT: u64 = 1_000;
/// Ticks of faults and load per run.
const FAULT_TICKS: u64 = 300;
/// Ticks within which, once everyone can talk again, a leader must exist.
const LEADER_TICKS_MAX: u64 = 200;
/// Ticks within which, once there is a leader, a proposal must be acknowledged.
const COMMIT_TICKS_MAX: u64 = 300;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: a number")))
}

/// One run; returns its counters and what was acknowledged, for the determinism check.
fn run(seed: u64) -> (SimStats, BTreeMap<u64, (u64, Bytes)>) {
    let mut rng = SplitMix64::new(seed ^ 0x5EED_F7E5_7000);
    let replicas = if rng.coin() { 3 } else { 5 };
    let mut cfg = ClusterConfig::new(replicas, seed);
    cfg.net = NetConfig { loss_per_mille: rng.below(80), delay_ticks_max: 1 + rng.below(4) };
    cfg.compact_every = rng.coin().then(|| 8 + rng.below(24));
    let mut c = Cluster::new(cfg);
    let ids = c.ids();
    let mut n = 0u64;
    for _ in 0..FAULT_TICKS {
        if rng.below(100) < 40
            && let Some(l) = c.leader()
        {
            n += 1;
            let _ = c.propose(l, Bytes::from(format!("s{seed}-{n}")));
        }
        if rng.below(1000) < 25 {
            let pick = ids[rng.below(ids.len() as u64) as usize];
            match rng.below(7) {
                0 => c.crash(pick),
                5 => c.fail_next_sync(pick),
                1 => c.restart(pick),
                2 => {
                    // A minority cut off (it may hold the leader).
                    let k = (replicas as usize - 1) / 2;
                    let start = rng.below(replicas) as usize;
                    let minority: Vec<u64> = (0..k).map(|j| ids[(start + j) % ids.len()]).collect();
                    let rest: Vec<u64> =
                        ids.iter().copied().filter(|i| !minority.contains(i)).collect();
                    c.partition(&[&minority, &rest]);
                }
                3 => {
                    // No majority anywhere: two halves and an isolated replica.
                    let (a, b): (Vec<u64>, Vec<u64>) = ids.iter().partition(|i| *i % 2 == 0);
                    c.partition(&[&a[..a.len() / 2 + a.len() % 2], &b[..b.len() / 2]]);
                }
                4 => {
                    if let Some(l) = c.leader() {
                        let rest: Vec<u64> = ids.iter().copied().filter(|i| *i != l).collect();
                        c.partition(&[&[l], &rest]);
                    }
                }
                _ => c.heal(),
            }
        }
        c.tick();
    }
    // Heal everything: every replica up, no disk fault pending, everyone can talk, messages
    // still delayed.
    c.heal();
    c.clear_disk_faults();
    c.set_net(NetConfig { loss_per_mille: 0, delay_ticks_max: cfg.net.delay_ticks_max });
    for id in &ids {
        c.restart(*id);
    }
    assert!(
        c.run_until(LEADER_TICKS_MAX, |c| c.leader().is_some()),
        "seed {seed}: no leader within {LEADER_TICKS_MAX} ticks after healing\n{}",
        c.describe()
    );
    let last =
        c.commit(Bytes::from(format!("s{seed}-final")), COMMIT_TICKS_MAX).unwrap_or_else(|| {
            panic!(
                "seed {seed}: nothing committed within {COMMIT_TICKS_MAX} ticks\n{}",
                c.describe()
            )
        });
    assert!(
        c.run_until(COMMIT_TICKS_MAX, |c| c.all_applied(last)),
        "seed {seed}: replicas did not catch up to {last}"
    );
    c.check_acknowledged_everywhere();
    (c.stats(), c.acknowledged().clone())
}

#[test]
fn seeded_runs_keep_every_acknowledged_record_and_recover_liveness() {
    if let Some(seed) = env_u64("THOR_REPLICA_SEED") {
        run(seed);
        return;
    }
    let seeds = env_u64("THOR_REPLICA_SEEDS").unwrap_or(SEEDS_DEFAULT);
    let mut total = SimStats::default();
    for seed in 0..seeds {
        let (s, _) = run(seed);
        total.acknowledged += s.acknowledged;
        total.lost += s.lost;
        total.crashes += s.crashes;
        total.failed_syncs += s.failed_syncs;
        total.restores += s.restores;
        total.dropped += s.dropped;
        total.delivered += s.delivered;
    }
    // The runs did exercise what they claim to.
    println!("{seeds} seeds: {total:?}");
    assert!(total.acknowledged > seeds * 20, "{total:?}");
    assert!(
        total.crashes > 0 && total.lost > 0 && total.restores > 0 && total.dropped > 0,
        "{total:?}"
    );
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 17, 99] {
        assert_eq!(run(seed), run(seed), "seed {seed} replays");
    }
}
