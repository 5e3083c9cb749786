//! thor's own client protocol (`thor_client::proto::ClientCore`) under the simulator's faults:
//! runs where real clients commit beside the simulated ones, or alone, through crashes, lost
//! connections (each resumed with `ClientCore::resume`) and every latency drawn from the seed.
//! Their committed transactions join the history the serializability checker judges, and the
//! calm's liveness check covers them (`thor_sim::liveness`).
//!
//! `THOR_SIM_REAL_SEEDS` sets how many seeds each test runs (default 2,000);
//! `THOR_SIM_SEED=N` with the `replay_real` test replays one seed of the mixed runs with its
//! trace printed (`THOR_SIM_REAL_ONLY=1`: one of the runs with real clients only).

use thor_sim::{Outcome, SimConfig, run};

fn seeds() -> u64 {
    std::env::var("THOR_SIM_REAL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000)
}

/// Seed `seed`'s configuration with one to three real clients beside its simulated ones.
fn mixed(seed: u64) -> SimConfig {
    SimConfig { real_clients: 1 + (seed % 3) as usize, ..SimConfig::for_seed(seed) }
}

/// Seed `seed`'s configuration with real clients only (two to four).
fn real_only(seed: u64) -> SimConfig {
    SimConfig { clients: 0, real_clients: 2 + (seed % 3) as usize, ..SimConfig::for_seed(seed) }
}

/// Runs `cfg` of every seed; panics with the first failure's replay; sums what they did.
fn run_all(cfg: fn(u64) -> SimConfig, only: bool) -> Outcome {
    let mut sum = Outcome::default();
    for seed in 0..seeds() {
        match run(&cfg(seed)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => panic!(
                "{f}\n  (real clients forced on: the replay of this configuration is\n   THOR_SIM_SEED={} {}cargo test -p thor-sim --test real_clients replay_real -- --nocapture)",
                f.seed,
                if only { "THOR_SIM_REAL_ONLY=1 " } else { "" }
            ),
        }
    }
    sum
}

/// What the runs must have exercised, over enough seeds.
fn assert_exercised(sum: &Outcome) {
    eprintln!("{sum:?}");
    if seeds() >= 200 {
        assert!(sum.real_commits > 0 && sum.real_read_only_here > 0, "{sum:?}");
        assert!(sum.real_doomed > 0 && sum.refused > 0, "{sum:?}");
        assert!(sum.real_frames_evicted > 0, "{sum:?}");
        assert!(sum.crashes > 0 && sum.lost_connections > 0 && sum.uncertain > 0, "{sum:?}");
    }
}

#[test]
fn real_clients_beside_simulated_ones_stay_serializable_and_live() {
    assert_exercised(&run_all(mixed, false));
}

#[test]
fn real_clients_alone_stay_serializable_and_live() {
    assert_exercised(&run_all(real_only, true));
}

#[test]
fn a_run_with_real_clients_replays_exactly() {
    for seed in [1, 7, 4242] {
        let a = run(&mixed(seed)).unwrap();
        let b = run(&mixed(seed)).unwrap();
        assert_eq!(a, b, "seed {seed} replays exactly");
        assert!(a.real_commits > 0, "seed {seed}: {a:?}");
    }
}

#[test]
fn replay_real() {
    let Some(seed) = std::env::var("THOR_SIM_SEED").ok().and_then(|s| s.parse().ok()) else {
        return;
    };
    let only = std::env::var("THOR_SIM_REAL_ONLY").is_ok();
    let cfg = SimConfig { trace: true, ..if only { real_only(seed) } else { mixed(seed) } };
    match run(&cfg) {
        Ok(o) => eprintln!("{o:?}"),
        Err(f) => panic!("{f}"),
    }
}
