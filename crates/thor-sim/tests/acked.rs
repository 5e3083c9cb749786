//! Every acknowledged commit recovers (issue 30), on random programs: the bounded run of the
//! fuzz target's harness (`thor_sim::acked`) that CI runs without cargo-fuzz.
//!
//! `THOR_ACKED_PROGRAMS` sets how many programs (default 20,000; each is a fresh database, a
//! dozen requests, a crash, a recovery and a backup); `THOR_ACKED_SEED` the first seed.

use std::time::Instant;

use thor_sim::acked::{self, AckedRun};
use thor_storage::SplitMix64;

fn programs() -> u64 {
    std::env::var("THOR_ACKED_PROGRAMS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000)
}

fn first_seed() -> u64 {
    std::env::var("THOR_ACKED_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// A program of random bytes from `seed`.
fn program(seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let len = 8 + (rng.next_u64() % 400) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Programs that found bugs, run on every change.
///
/// - 19899: a whole-page-logging commit's copy restored by recovery went into the MOB under
///   its image record's LSN, not its commit's: the page was served after the crash with an
///   older version than before (thor-study's `WplLog::restored`).
/// - 193721: recovery put a whole-page-logging copy into the MOB whole, and its stale bytes of
///   an object a two-phase part wrote (prepared before the WPL commit, decided after it, so
///   published under an older LSN) hid that part's committed version after the crash
///   (thor-study's `WplReplay::restore`).
#[test]
fn programs_that_found_bugs_pass() {
    for seed in [19899, 193721] {
        if let Err(f) = acked::run(&program(seed)) {
            panic!("seed {seed}: {f}");
        }
    }
}

/// `THOR_ACKED_TRACE=<seed>` prints what the program of one seed does.
#[test]
fn a_program_can_be_traced() {
    let seed = std::env::var("THOR_ACKED_TRACE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let t = acked::trace(&program(seed));
    if std::env::var("THOR_ACKED_TRACE").is_ok() {
        eprintln!("{t}");
    }
    assert!(t.contains("Ok(()) AckedRun"), "{t}");
}

#[test]
fn acknowledged_commits_recover_from_random_programs() {
    let n = programs();
    let start = Instant::now();
    let mut total = AckedRun::default();
    for seed in first_seed()..first_seed() + n {
        let input = program(seed);
        match acked::run(&input) {
            Ok(r) => {
                total.steps += r.steps;
                total.requests += r.requests;
                total.wire_refused += r.wire_refused;
                total.refused += r.refused;
                total.acked += r.acked;
                total.acked_writing += r.acked_writing;
                total.records += r.records;
            }
            Err(f) => panic!("seed {seed} (THOR_ACKED_SEED={seed} THOR_ACKED_PROGRAMS=1): {f}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{n} programs in {secs:.1} s ({:.0}/s): {total:?}", n as f64 / secs);
    // The programs reach the engine and get commits through, not only refusals.
    assert!(total.acked_writing > n / 4, "{total:?}");
    assert!(total.wire_refused > 0 && total.refused > 0, "{total:?}");
}
