//! `thor sim cluster`: the deterministic whole-cluster simulation (`thor-sim`) over any number
//! of seeds, or one seed with its trace, with the server in any commit mode. The test suite
//! runs 10,000 seeds in `obj` mode and 500 in each page mode; this runs more. `thor sim twopc`
//! does the same for the cluster world (`thor_sim::twopc`: one to three servers, simulated and
//! real clients, 10,000 seeds in the test suite).

use anyhow::bail;
use clap::Args;
use thor_sim::twopc::{TwoPcOutcome, TwoPcSimConfig, run_twopc};
use thor_sim::{Outcome, SimConfig, run};
use thor_wire::CommitMode;

use crate::sim::progress;

/// Arguments of `thor sim cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Run this one seed (with --trace, print every event).
    #[arg(long, conflicts_with_all = ["seeds", "start"])]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Print every event of the run (with --seed).
    #[arg(long, requires = "seed")]
    trace: bool,
    /// The server's commit mode (obj, pd-redo, pd-esm, sd-esm, sl-esm); in a page mode the
    /// simulated clients commit with page records.
    #[arg(long, default_value = "obj", value_parser = parse_mode)]
    commit_mode: CommitMode,
}

fn parse_mode(s: &str) -> Result<CommitMode, String> {
    CommitMode::from_name(s).ok_or_else(|| format!("no commit mode {s}"))
}

/// Runs `thor sim cluster`.
pub fn cluster(a: ClusterArgs) -> anyhow::Result<()> {
    if let Some(seed) = a.seed {
        let mut cfg = SimConfig::for_seed_in(seed, a.commit_mode);
        cfg.trace = a.trace;
        println!("seed {seed}: {cfg:?}");
        return match run(&cfg) {
            Ok(o) => {
                print_outcome(&o, 1);
                Ok(())
            }
            Err(f) => bail!("{f}"),
        };
    }
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let bar = progress(a.seeds, "seeds");
    let mut sum = Outcome::default();
    for seed in a.start..a.start.saturating_add(a.seeds) {
        match run(&SimConfig::for_seed_in(seed, a.commit_mode)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => {
                bar.abandon();
                bail!("{f}");
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!(
        "seeds {}..{} ({}): every run passed the checker",
        a.start,
        a.start + a.seeds,
        a.commit_mode
    );
    print_outcome(&sum, a.seeds);
    Ok(())
}

fn print_outcome(o: &Outcome, runs: u64) {
    println!("  runs                   {runs}");
    println!("  events                 {}", o.events);
    println!("  commits acknowledged   {}", o.acked);
    println!("  commits uncertain      {}", o.uncertain);
    println!("  commits refused (CC)   {}", o.refused);
    println!("  invalidations received {}", o.invalidations);
    println!("  history txns checked   {}", o.history_txns);
    println!("  server crashes         {}", o.crashes);
    println!("  connections lost       {}", o.lost_connections);
    println!("  install rounds         {}", o.install_rounds);
    println!("  pages checked          {}", o.pages_checked);
    println!("  backups checked        {}", o.backups);
    println!("  databases thor-checked {}", o.offline_checks);
    // Maxima over the runs (liveness, see thor_sim's `liveness` module).
    println!("  longest settle         {} us", o.settle_us);
    println!("  calm: longest wait     {} us", o.calm_wait_us_max);
    println!("  calm: longest no-commit {} us", o.calm_commit_us_max);
    if o.page_commits > 0 {
        println!("  page commits sent      {}", o.page_commits);
        println!("  early page records     {}", o.records_early);
    }
    if runs == 1 {
        println!("  trace hash             {:016x}", o.trace_hash);
    }
}

/// Arguments of `thor sim twopc`.
#[derive(Debug, Args)]
pub struct TwopcArgs {
    /// Run this one seed (with --trace, print every event).
    #[arg(long, conflicts_with_all = ["seeds", "start"])]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Print every event of the run (with --seed).
    #[arg(long, requires = "seed")]
    trace: bool,
}

/// Runs `thor sim twopc`.
pub fn twopc(a: TwopcArgs) -> anyhow::Result<()> {
    if let Some(seed) = a.seed {
        let mut cfg = TwoPcSimConfig::for_seed(seed);
        cfg.trace = a.trace;
        println!("seed {seed}: {cfg:?}");
        return match run_twopc(&cfg) {
            Ok(o) => {
                print_twopc_outcome(&o, 1);
                Ok(())
            }
            Err(f) => bail!("{f}"),
        };
    }
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let bar = progress(a.seeds, "seeds");
    let mut sum = TwoPcOutcome::default();
    for seed in a.start..a.start.saturating_add(a.seeds) {
        match run_twopc(&TwoPcSimConfig::for_seed(seed)) {
            Ok(o) => {
                sum.absorb(&o);
            }
            Err(f) => {
                bar.abandon();
                bail!("{f}");
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!("seeds {}..{}: every run passed the checks", a.start, a.start + a.seeds);
    print_twopc_outcome(&sum, a.seeds);
    Ok(())
}

fn print_twopc_outcome(o: &TwoPcOutcome, runs: u64) {
    println!("  runs                    {runs}");
    println!("  events                  {}", o.events);
    println!("  committed               {}", o.committed);
    println!("  aborted                 {}", o.aborted);
    println!("  uncertain               {}", o.uncertain);
    println!("  three-server txns       {}", o.three_server);
    println!("  server crashes          {}", o.crashes);
    println!("  peer messages lost      {}", o.peer_lost);
    println!("  connections lost        {}", o.lost_connections);
    println!("  one-server runs         {}", o.one_server_runs);
    println!("  real clients: committed {}", o.real_commits);
    println!("  real: committed here    {}", o.real_read_only_here);
    println!("  real: doomed            {}", o.real_doomed);
    println!("  real: uncertain         {}", o.real_uncertain);
    // Maxima over the runs (liveness).
    println!("  longest settle          {} us", o.settle_us);
    println!("  calm: longest txn       {} us", o.calm_txn_us_max);
    println!("  calm: longest part      {} us", o.calm_part_us_max);
    println!("  calm: longest no-commit {} us", o.calm_commit_us_max);
    if runs == 1 {
        println!("  trace hash              {:016x}", o.trace_hash);
    }
}
