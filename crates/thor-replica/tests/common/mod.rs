//! The seeded run shared by `seeds.rs` and `mutants.rs`: a replica group through random
//! faults, then healed, with the harness's checks and a liveness bound.

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use bytes::Bytes;
use thor_replica::Mutant;
use thor_replica::sim::{Cluster, ClusterConfig, NetConfig, SimStats};
use thor_storage::SplitMix64;

/// Ticks of faults and load per run.
const FAULT_TICKS: u64 = 300;
/// Ticks within which, once everyone can talk again, a leader must exist.
const LEADER_TICKS_MAX: u64 = 200;
/// Ticks within which, once there is a leader, a proposal must be acknowledged.
const COMMIT_TICKS_MAX: u64 = 300;

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: a number")))
}

/// One run; returns its counters and what was acknowledged, for the determinism check.
pub fn run(seed: u64) -> (SimStats, BTreeMap<u64, (u64, Bytes)>) {
    run_with(seed, None)
}

/// One run whose replicas are `mutant` (or correct).
pub fn run_with(seed: u64, mutant: Option<Mutant>) -> (SimStats, BTreeMap<u64, (u64, Bytes)>) {
    let mut rng = SplitMix64::new(seed ^ 0x5EED_F7E5_7000);
    let replicas = if rng.coin() { 3 } else { 5 };
    let mut cfg = ClusterConfig::new(replicas, seed);
    cfg.mutant = mutant;
    cfg.net = NetConfig { loss_per_mille: rng.below(80), delay_ticks_max: 1 + rng.below(4) };
    cfg.compact_every = rng.coin().then(|| 8 + rng.below(24));
    cfg.defer_sync_per_mille = [0, 300, 700][rng.below(3) as usize];
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
