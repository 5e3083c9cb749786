//! The whole-cluster simulation over many seeds: a server and several clients in one thread,
//! with server crashes (at any step, and inside I/O), lost connections and every latency drawn
//! from the seed. Every run is judged by the checker (`thor_sim::check`): after every crash and
//! at the end, every acknowledged commit is present and no unacknowledged one is partly
//! visible, and every page sent shows exactly what was durable. In half the seeds the server's
//! page cache is exclusive and clients demote pages to it, some of them forged: a forged page
//! must never be cached, and a stale one accepted would show as a stale read to the checker.
//! In a third of the seeds clients fetch with prefetch and cache the pages they get
//! (`SimConfig::prefetch`): a prefetched page the server did not register for invalidations,
//! or a page reported discarded while a transaction still reads it, shows as a committed stale
//! read to the serializability checker. In two thirds of the seeds one or two *real* clients
//! run thor's own client protocol (`thor_client::proto::ClientCore`) beside the simulated ones
//! (`SimConfig::real_clients`; `tests/real_clients.rs` forces them on).
//!
//! `THOR_SIM_SEEDS` sets how many seeds the four `seeds_*` tests run between them (default
//! 10,000); `THOR_SIM_SEED=N` with the `replay` test replays one seed with its trace printed.
//! `thor sim cluster --seeds N --start S` runs any number of further seeds.

use thor_sim::{Outcome, SimConfig, run};

fn total_seeds() -> u64 {
    std::env::var("THOR_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000)
}

/// Runs the `part`-th quarter of the seeds; panics with the first failure's replay command.
fn quarter(part: u64) -> Outcome {
    let n = total_seeds();
    let (from, to) = (n * part / 4, n * (part + 1) / 4);
    let mut sum = Outcome::default();
    for seed in from..to {
        match run(&SimConfig::for_seed(seed)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => panic!("{f}"),
        }
    }
    sum
}

#[test]
fn seeds_first_quarter() {
    quarter(0);
}

#[test]
fn seeds_second_quarter() {
    quarter(1);
}

#[test]
fn seeds_third_quarter() {
    quarter(2);
}

#[test]
fn seeds_fourth_quarter() {
    let sum = quarter(3);
    eprintln!("the last quarter of the seeds: {sum:?}");
    // The runs exercise what they claim to: crashes (and recoveries), broken connections,
    // uncertain commits, install rounds, checked reads, backups.
    if total_seeds() >= 400 {
        assert!(sum.crashes > 0 && sum.lost_connections > 0 && sum.uncertain > 0, "{sum:?}");
        assert!(sum.install_rounds > 0 && sum.pages_checked > 0 && sum.acked > 0, "{sum:?}");
        assert!(sum.backups > 0, "{sum:?}");
        // Demotion to the exclusive page cache, forged pages included (all refused).
        assert!(sum.demotions_sent > 0 && sum.demotions_forged > 0, "{sum:?}");
        // Prefetch: pages prefetched, read from clients' caches, and reported discarded.
        assert!(sum.pages_prefetched > 0 && sum.cached_reads > 0 && sum.discards > 0, "{sum:?}");
        // Real clients (thor's client protocol): commits, read-only ones at the client, and
        // transactions doomed by invalidations.
        assert!(sum.real_commits > 0 && sum.real_read_only_here > 0, "{sum:?}");
        assert!(sum.real_doomed > 0, "{sum:?}");
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 7, 4242] {
        let a = run(&SimConfig::for_seed(seed)).unwrap();
        let b = run(&SimConfig::for_seed(seed)).unwrap();
        assert_eq!(a, b, "seed {seed} replays exactly");
    }
    let a = run(&SimConfig::for_seed(1)).unwrap();
    let b = run(&SimConfig::for_seed(2)).unwrap();
    assert_ne!(a.trace_hash, b.trace_hash, "different seeds give different runs");
}

/// The environment variable that makes [`a_seed_gives_the_same_trace_in_two_processes`] the
/// child: it runs the seed it names and prints its trace hash.
const TRACE_CHILD: &str = "THOR_SIM_TRACE_CHILD";

/// What FoundationDB checks of its simulator: one seed gives the same run in two processes, so
/// nothing in a run depends on a process's state (its random hash keys, addresses, time). The
/// test spawns itself twice as the child, which prints the trace hash of each seed (every
/// event, every message's contents, every record's bytes), and compares both with its own.
#[test]
fn a_seed_gives_the_same_trace_in_two_processes() {
    let seeds = [3u64, 11, 4243];
    if let Ok(which) = std::env::var(TRACE_CHILD) {
        let seed: u64 = which.parse().expect("a seed");
        let o = run(&SimConfig::for_seed(seed)).unwrap();
        println!("trace-hash {seed} {:#018x} {}", o.trace_hash, o.events);
        return;
    }
    let me = std::env::current_exe().expect("the test binary");
    for seed in seeds {
        let here = run(&SimConfig::for_seed(seed)).unwrap();
        let want = format!("trace-hash {seed} {:#018x} {}", here.trace_hash, here.events);
        for child in 0..2 {
            let out = std::process::Command::new(&me)
                .args(["--exact", "a_seed_gives_the_same_trace_in_two_processes", "--nocapture"])
                .env(TRACE_CHILD, seed.to_string())
                .output()
                .expect("the child runs");
            assert!(out.status.success(), "child {child}: {out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let got = stdout.lines().find(|l| l.starts_with("trace-hash")).expect("a trace line");
            assert_eq!(got, want, "seed {seed}, child {child} against this process");
        }
    }
}

#[test]
fn replay() {
    let seed = std::env::var("THOR_SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut cfg = SimConfig::for_seed(seed);
    cfg.trace = std::env::var("THOR_SIM_SEED").is_ok();
    match run(&cfg) {
        Ok(o) => eprintln!("seed {seed}: {o:?}"),
        Err(f) => panic!("{f}"),
    }
}
