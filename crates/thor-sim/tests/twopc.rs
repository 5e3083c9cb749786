//! The simulation of a cluster of two or three servers over many seeds: transfers between
//! accounts on different servers commit with two-phase commit while servers crash (at any
//! event, and inside log syncs, installs and checkpoints), client connections break and
//! server-to-server messages are lost, delayed and reordered. Every run is judged at the end
//! (`thor_sim::twopc`): every transaction all or nothing across servers, the history
//! serializable in the clients' timestamp order and ending in the final state, and the money
//! conserved. After the faults stop, every run also checks liveness: the clients' further
//! transactions each end, and every prepared part is decided, within half the vote timeout.
//!
//! `THOR_SIM_TWOPC_SEEDS` sets how many seeds the two `seeds_*` tests run between them
//! (default 10,000); `THOR_SIM_SEED=N` with the `replay` test replays one seed with its trace.

use thor_sim::twopc::{TwoPcOutcome, TwoPcSimConfig, run_twopc};

fn total_seeds() -> u64 {
    std::env::var("THOR_SIM_TWOPC_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000)
}

fn half(part: u64) -> TwoPcOutcome {
    let n = total_seeds();
    let (from, to) = (n * part / 2, n * (part + 1) / 2);
    let mut sum = TwoPcOutcome::default();
    for seed in from..to {
        match run_twopc(&TwoPcSimConfig::for_seed(seed)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => panic!("{f}"),
        }
    }
    sum
}

#[test]
fn seeds_first_half() {
    let s = half(0);
    eprintln!("first half: {s:?}");
    assert!(s.committed > 0, "some transactions commit: {s:?}");
}

#[test]
fn seeds_second_half() {
    let s = half(1);
    eprintln!("second half: {s:?}");
    assert!(s.committed > 0, "some transactions commit: {s:?}");
}

#[test]
fn runs_cover_what_they_claim() {
    // Over a few hundred seeds, every fault and every kind of transaction happens, so that a
    // passing run means something.
    let mut sum = TwoPcOutcome::default();
    for seed in 0..300 {
        let o = run_twopc(&TwoPcSimConfig::for_seed(seed)).unwrap_or_else(|f| panic!("{f}"));
        sum.absorb(&o);
    }
    assert!(sum.committed > 500, "{sum:?}");
    assert!(sum.aborted > 0 && sum.uncertain > 0, "{sum:?}");
    assert!(sum.three_server > 0 && sum.crashes > 50, "{sum:?}");
    assert!(sum.peer_lost > 0 && sum.lost_connections > 0, "{sum:?}");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [1, 77, 4242] {
        let a = run_twopc(&TwoPcSimConfig::for_seed(seed)).unwrap_or_else(|f| panic!("{f}"));
        let b = run_twopc(&TwoPcSimConfig::for_seed(seed)).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(a, b);
    }
}

#[test]
fn replay() {
    let Some(seed) = std::env::var("THOR_SIM_SEED").ok().and_then(|s| s.parse().ok()) else {
        return;
    };
    let mut cfg = TwoPcSimConfig::for_seed(seed);
    cfg.trace = true;
    match run_twopc(&cfg) {
        Ok(o) => eprintln!("seed {seed}: {o:?}"),
        Err(f) => panic!("{f}"),
    }
}
