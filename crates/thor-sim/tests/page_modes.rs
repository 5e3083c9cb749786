//! Crash tests of the page-based commit modes (issue 14) in the whole-cluster simulation: the
//! server runs `pd-redo`, `pd-esm`, `sd-esm`, `sl-esm` or `wpl`, and its clients commit with
//! `PageCommit` (diffed page records, and in the ESM modes the dirty pages whole) and send
//! `PageRecords` with undo before the commit when their small recovery buffer is full; in
//! `wpl` they ship the written pages whole and nothing else, and the server logs them whole
//! (small WPL tables drawn per seed make commits wait for install rounds and checkpoints come
//! every few commits; every restart runs WPL's backward pass). In half the seeds clients also
//! steal dirty pages before the commit (their records with undo and, ESM and WPL, the pages
//! whole go in `PageRecords`, and the server stages them until the commit). Every
//! fault of the cluster test applies: server crashes at any step and inside I/O, lost
//! connections (a commit in flight becomes uncertain, early records are dropped with the
//! session), latencies drawn from the seed. Every run is judged by both checkers: every
//! acknowledged commit survives every crash, no unacknowledged one is partly visible, every
//! page sent shows exactly what was durable (`thor_sim::check`), and the history of what the
//! clients read and wrote is serializable in log order with the bank's total conserved
//! (`thor_history`).
//!
//! `THOR_SIM_SEEDS` sets how many seeds each mode runs (default 500); `THOR_SIM_SEED=N
//! THOR_SIM_MODE=sd-esm` with the `replay` test replays one seed with its trace printed.
//! `thor sim cluster --commit-mode MODE --seeds N` runs any number of further seeds.

use thor_sim::{Outcome, SimConfig, run};
use thor_wire::CommitMode;

fn seeds() -> u64 {
    std::env::var("THOR_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(500)
}

/// Runs every seed in `mode`; panics with the first failure's replay command.
fn all_seeds(mode: CommitMode) -> Outcome {
    let n = seeds();
    let mut sum = Outcome::default();
    for seed in 0..n {
        match run(&SimConfig::for_seed_in(seed, mode)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => panic!("{f}"),
        }
    }
    eprintln!("{mode}, {n} seeds: {sum:?}");
    // The runs exercise what they claim to: page commits acknowledged across crashes and
    // broken connections, uncertain ones, refusals, records sent before their commit, install
    // rounds, backups, and forged demotions to the exclusive page cache.
    if n >= 200 {
        assert!(sum.page_commits > 0 && sum.acked > 0 && sum.crashes > 0, "{sum:?}");
        assert!(sum.lost_connections > 0 && sum.uncertain > 0 && sum.refused > 0, "{sum:?}");
        assert!(sum.install_rounds > 0, "{sum:?}");
        assert!(sum.backups > 0 && sum.demotions_forged > 0, "{sum:?}");
        if mode == CommitMode::Wpl {
            // No records; copies go home through install rounds, come back from the log at
            // restart when they had not, and the page rule refuses stale pages.
            assert_eq!(sum.records_early, 0, "{sum:?}");
            assert!(sum.wpl_installed > 0 && sum.wpl_restored > 0, "{sum:?}");
            assert!(sum.wpl_page_rule_refusals > 0, "{sum:?}");
        } else {
            assert!(sum.records_early > 0, "{sum:?}");
        }
        // Dirty pages stolen before the commit travel whole in ESM and WPL.
        assert_eq!(sum.pages_stolen > 0, mode.ships_pages(), "{sum:?}");
    }
    sum
}

#[test]
fn pd_redo_survives_crashes_and_stays_serializable() {
    all_seeds(CommitMode::PdRedo);
}

#[test]
fn pd_esm_survives_crashes_and_stays_serializable() {
    all_seeds(CommitMode::PdEsm);
}

#[test]
fn sd_esm_survives_crashes_and_stays_serializable() {
    all_seeds(CommitMode::SdEsm);
}

#[test]
fn sl_esm_survives_crashes_and_stays_serializable() {
    all_seeds(CommitMode::SlEsm);
}

#[test]
fn wpl_survives_crashes_and_stays_serializable() {
    all_seeds(CommitMode::Wpl);
}

#[test]
fn a_page_mode_seed_gives_the_same_trace() {
    for mode in [CommitMode::PdRedo, CommitMode::SlEsm, CommitMode::Wpl] {
        for seed in [3, 99] {
            let a = run(&SimConfig::for_seed_in(seed, mode)).unwrap();
            let b = run(&SimConfig::for_seed_in(seed, mode)).unwrap();
            assert_eq!(a, b, "seed {seed} in {mode} replays exactly");
        }
    }
}

#[test]
fn replay() {
    let seed = std::env::var("THOR_SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mode = std::env::var("THOR_SIM_MODE")
        .ok()
        .map(|m| CommitMode::from_name(&m).unwrap_or_else(|| panic!("no commit mode {m}")))
        .unwrap_or(CommitMode::PdRedo);
    let mut cfg = SimConfig::for_seed_in(seed, mode);
    cfg.trace = std::env::var("THOR_SIM_SEED").is_ok();
    match run(&cfg) {
        Ok(o) => eprintln!("seed {seed} ({mode}): {o:?}"),
        Err(f) => panic!("{f}"),
    }
}
