//! The simulation of a cluster of one to three servers over many seeds: transfers between
//! accounts on different servers commit with two-phase commit (with one server, a quarter of
//! the seeds, with single-server commits, ordered by LSN) while servers crash (at any
//! event, and inside log syncs, installs and checkpoints), client connections break and
//! server-to-server messages are lost, delayed and reordered. Every run is judged at the end
//! (`thor_sim::twopc`): every transaction all or nothing across servers, the history
//! serializable in the clients' timestamp order and ending in the final state, and the money
//! conserved. After the faults stop, every run also checks liveness: the clients' further
//! transactions each end, and every prepared part is decided, within half the vote timeout.
//!
//! Two thirds of the seeds run one or two real clients (thor's own client protocol, one
//! `ClientCore` per server, `thor_sim::twopc`'s `real.rs`) beside the simulated ones; the
//! `real_clients_*` test runs real clients alone (half as many seeds again), so that more
//! than 10,000 runs have real clients in them.
//!
//! `THOR_SIM_TWOPC_SEEDS` sets how many seeds the two `seeds_*` tests run between them
//! (default 10,000); `THOR_SIM_SEED=N` with the `replay` test replays one seed with its trace
//! (`THOR_SIM_REAL_ONLY=1`: the seed's run with real clients only, as `real_only` makes it).

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
    assert!(sum.real_commits > 100 && sum.real_doomed > 0 && sum.real_uncertain > 0, "{sum:?}");
    assert!(sum.one_server_runs > 0 && sum.real_read_only_here > 0, "{sum:?}");
}

/// Seed `seed`'s run with real clients only (two or three), and no simulated client.
fn real_only(seed: u64) -> TwoPcSimConfig {
    TwoPcSimConfig {
        clients: 0,
        real_clients: 2 + (seed % 2) as usize,
        ..TwoPcSimConfig::for_seed(seed)
    }
}

#[test]
fn real_clients_alone_commit_across_servers_through_every_fault() {
    let n = (total_seeds() / 2).max(1);
    let mut sum = TwoPcOutcome::default();
    for seed in 0..n {
        match run_twopc(&real_only(seed)) {
            Ok(o) => sum.absorb(&o),
            Err(f) => panic!(
                "{f}\n  (real clients only: THOR_SIM_SEED={seed} THOR_SIM_REAL_ONLY=1 cargo test -p thor-sim --test twopc replay -- --nocapture)"
            ),
        }
    }
    eprintln!("real clients only: {sum:?}");
    assert_eq!(sum.committed, sum.real_commits, "only real clients commit: {sum:?}");
    if n >= 200 {
        assert!(sum.real_commits > 0 && sum.aborted > 0 && sum.real_uncertain > 0, "{sum:?}");
        assert!(sum.crashes > 0 && sum.lost_connections > 0, "{sum:?}");
    }
}

/// A part of a transaction that may have committed, ended without the decision (its
/// coordinator's answer or its own lost), used to put back the copies from before the
/// transaction, which the server, taking the writer to hold the new versions, never
/// invalidated: the next transaction read one and validated, a lost update. Real-only seed 28
/// found it (`ClientCore::finish_part` with `PartOutcome::Unknown`, and `disconnected`, now
/// drop what the part wrote). The seed passes, with the real clients keeping their sessions.
#[test]
fn a_part_ended_without_its_decision_leaves_no_stale_copy() {
    let out = run_twopc(&real_only(28)).unwrap_or_else(|f| panic!("{f}"));
    assert!(out.real_commits > 0, "{out:?}");
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
    let real_only_run = std::env::var("THOR_SIM_REAL_ONLY").is_ok_and(|v| v == "1");
    let mut cfg = if real_only_run { real_only(seed) } else { TwoPcSimConfig::for_seed(seed) };
    cfg.trace = true;
    match run_twopc(&cfg) {
        Ok(o) => eprintln!("seed {seed}: {o:?}"),
        Err(f) => panic!("{f}"),
    }
}
