//! `oo7-lmdb`: OO7 over LMDB beside thor (issues 15 and 16).
//!
//! ```text
//! oo7-lmdb load --dir LDB --size medium             # thor-oo7's database, into LMDB
//! oo7-lmdb verify --dir LDB                         # every value against thor-oo7's model
//! oo7-lmdb run --dir LDB --thor-dir DB --runs 11    # cold and hot T6, T1-, T1; T2b's commit
//! oo7-lmdb footprint --dir LDB --thor-dir DB --thor-cache-mb 27   # smallest fault-free memory
//! ```
//!
//! The `child-*` commands are the measured processes the others start; they print JSON.

mod child;
mod footprint;
mod run;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use oo7_lmdb::store;
use thor_oo7::{Op, Params};

/// OO7 over LMDB, the memory-mapped B-tree store that issues 15 and 16 compare thor with: the
/// same database as thor-oo7's generator (same preset and seed), one LMDB value per object
/// with its lists and strings inline, and the measurements the issues quote, beside thor's.
#[derive(Debug, Parser)]
#[command(name = "oo7-lmdb", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Generate an OO7 database with thor-oo7's generator and load it into a new LMDB
    /// environment.
    Load(LoadArgs),
    /// Check every value of an environment against thor-oo7's model of its parameters.
    Verify(VerifyArgs),
    /// Time cold and hot traversals and T2b's commit over LMDB and, with --thor-dir, over thor
    /// (the `thor oo7 run` command), alternating in one sitting; prints a table.
    Run(RunArgs),
    /// Find the smallest memory-cgroup limit under which a hot traversal runs without a major
    /// page fault (LMDB) or without a fetch or a major fault (thor, with --thor-dir), by
    /// bisection over fresh processes. Needs root and a memory cgroup controller.
    Footprint(FootprintArgs),
    #[command(hide = true)]
    ChildRun(ChildRunArgs),
    #[command(hide = true)]
    ChildT2b(ChildT2bArgs),
    #[command(hide = true)]
    ChildProbe(ChildProbeArgs),
    #[command(hide = true)]
    ChildProbeThor(ChildProbeThorArgs),
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// The new environment's directory (must not hold a database).
    #[arg(long)]
    dir: PathBuf,
    /// The preset: tiny, small, medium, large, qs-small or qs-big.
    #[arg(long, default_value = "medium")]
    size: String,
    /// The generator's seed (thor's default when absent, as `thor oo7 load`).
    #[arg(long)]
    seed: Option<u64>,
    /// Documents after their composite part's connections (as `thor oo7 load
    /// --doc-placement`): before-parts or after-connections.
    #[arg(long)]
    doc_placement: Option<String>,
    /// Print JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// The environment's directory.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The LMDB environment (`oo7-lmdb load`).
    #[arg(long)]
    dir: PathBuf,
    /// Read-only traversals to time, comma-separated (t6, t1-, t1, t1+).
    #[arg(long, default_value = "t6,t1-,t1", value_delimiter = ',')]
    traversals: Vec<String>,
    /// Rounds: cold processes per traversal and store.
    #[arg(long, default_value_t = 11)]
    runs: u32,
    /// Hot runs after the cold one in each LMDB process.
    #[arg(long, default_value_t = 3)]
    hot_repeats: u32,
    /// T2b runs per store, each on a fresh copy of the database (0: none).
    #[arg(long, default_value_t = 5)]
    t2b_runs: u32,
    /// thor's database (`thor oo7 load`, same preset and seed) to run beside LMDB.
    #[arg(long)]
    thor_dir: Option<PathBuf>,
    /// The `thor` binary (default: `thor` beside this program, e.g. target/release/thor).
    #[arg(long)]
    thor_bin: Option<PathBuf>,
    /// thor's client cache manager.
    #[arg(long, default_value = "hac")]
    thor_policy: String,
    /// thor's client cache, MiB.
    #[arg(long, default_value_t = 256.0)]
    thor_cache_mb: f64,
    /// Where T2b's copies go (default: the directory holding --dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Write every sample and summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct FootprintArgs {
    /// The LMDB environment to probe.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// thor's database to probe as well (its hot run on an embedded server, in process).
    #[arg(long)]
    thor_dir: Option<PathBuf>,
    /// thor's client cache, MiB: at least its zero-fetch minimum for the traversal (the
    /// `occupancy` example of thor-oo7 finds it); required with --thor-dir.
    #[arg(long)]
    thor_cache_mb: Option<f64>,
    /// thor's client cache manager.
    #[arg(long, default_value = "hac")]
    thor_policy: String,
    /// The embedded server's page cache, MiB (thor's default is 64).
    #[arg(long, default_value_t = 64.0)]
    thor_server_cache_mb: f64,
    /// Open LMDB with MDB_NORDAHEAD (no kernel readahead around the map's page faults).
    #[arg(long)]
    lmdb_no_readahead: bool,
    /// The traversal (read-only).
    #[arg(long, default_value = "t1")]
    traversal: String,
    /// The smallest limit to try, MiB.
    #[arg(long, default_value_t = 8.0)]
    lo_mib: f64,
    /// The largest limit to try, MiB (the hot runs must not fault there).
    #[arg(long, default_value_t = 256.0)]
    hi_mib: f64,
    /// The bisection's grid, MiB.
    #[arg(long, default_value_t = 0.25)]
    step_mib: f64,
    /// Hot runs per probe, all of which must be free of major faults.
    #[arg(long, default_value_t = 2)]
    hot_runs: u32,
    /// Probes at the answer that must pass too (a failure moves it up one step).
    #[arg(long, default_value_t = 2)]
    confirm: u32,
    /// Seconds after which a probe is killed and fails (a thrashing one).
    #[arg(long, default_value_t = 60)]
    probe_timeout_s: u64,
    /// Write every probe as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ChildRunArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    traversal: String,
    #[arg(long, default_value_t = 1)]
    hot: u32,
}

#[derive(Debug, Args)]
struct ChildProbeArgs {
    #[command(flatten)]
    run: ChildRunArgs,
    #[arg(long)]
    no_readahead: bool,
}

#[derive(Debug, Args)]
struct ChildT2bArgs {
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct ChildProbeThorArgs {
    #[command(flatten)]
    run: ChildRunArgs,
    #[arg(long)]
    policy: String,
    #[arg(long)]
    cache_mb: f64,
    #[arg(long)]
    server_cache_mb: f64,
}

/// A read-only traversal this crate runs.
fn read_only_op(name: &str) -> Result<Op> {
    let op: Op = name.parse()?;
    if op.writes() || !oo7_lmdb::traverse::supports(op) {
        bail!("{name}: give a read-only traversal that runs over LMDB (t6, t1-, t1, t1+)");
    }
    Ok(op)
}

fn mib_to_bytes(what: &str, mib: f64) -> Result<usize> {
    if !(mib > 0.0 && mib <= oo7_lmdb::limits::CGROUP_LIMIT_MAX_MIB) {
        bail!("{what} must be in (0, {}] MiB", oo7_lmdb::limits::CGROUP_LIMIT_MAX_MIB);
    }
    Ok((mib * (1u64 << 20) as f64) as usize)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Load(a) => load(a),
        Cmd::Verify(a) => {
            let env = store::open_env(&a.dir, store::EnvConfig::READ_ONLY)?;
            let db = store::open_db(&env)?;
            let txn = env.read_txn()?;
            let meta = store::read_meta(&db, &txn)?;
            eprintln!("regenerating thor-oo7's model of {:?}", meta.params);
            let model = thor_oo7::native::NativeDb::generate(&meta.params, |_| {})?;
            store::verify(&db, &txn, &model)?;
            println!(
                "{}: all {} objects equal thor-oo7's model",
                a.dir.display(),
                meta.counts.total()
            );
            Ok(())
        }
        Cmd::Run(a) => run_cmd(a),
        Cmd::Footprint(a) => footprint_cmd(a),
        Cmd::ChildRun(a) => {
            print_json(&child::child_run(&a.dir, read_only_op(&a.traversal)?, a.hot)?)
        }
        Cmd::ChildT2b(a) => print_json(&child::child_t2b(&a.dir)?),
        Cmd::ChildProbe(ChildProbeArgs { run: a, no_readahead }) => print_json(
            &child::child_probe_lmdb(&a.dir, read_only_op(&a.traversal)?, a.hot, !no_readahead)?,
        ),
        Cmd::ChildProbeThor(a) => {
            let p = child::ThorProbe {
                cache_bytes: mib_to_bytes("--cache-mb", a.cache_mb)?,
                policy: a.policy.parse()?,
                server_cache_bytes: mib_to_bytes("--server-cache-mb", a.server_cache_mb)?,
            };
            let op = read_only_op(&a.run.traversal)?;
            print_json(&child::child_probe_thor(&a.run.dir, op, a.run.hot, p)?)
        }
    }
}

/// `load`: generates the database and loads it into a new environment.
fn load(a: LoadArgs) -> Result<()> {
    let mut params = Params::preset(&a.size)?;
    if let Some(seed) = a.seed {
        params.seed = seed;
    }
    if let Some(d) = &a.doc_placement {
        params.doc_placement = d.parse()?;
    }
    let t = Instant::now();
    eprintln!("generating {} (seed {:#x}) with thor-oo7's generator", a.size, params.seed);
    let mut last = Instant::now();
    let report = store::generate_and_load(&a.dir, &params, |done, total| {
        if last.elapsed() > Duration::from_millis(500) || done == total {
            eprintln!("  loading: {done} of {total} values");
            last = Instant::now();
        }
    })
    .with_context(|| format!("loading into {}", a.dir.display()))?;
    let secs = t.elapsed().as_secs_f64();
    if a.json {
        return print_json(&serde_json::json!({"report": report, "seconds": secs}));
    }
    let c = report.counts;
    println!("{} objects in {}", c.total(), a.dir.display());
    println!(
        "  {} modules, {} complex and {} base assemblies, {} composite parts and documents, {} atomic parts, {} connections",
        c.modules, c.complex, c.base, c.composites, c.atomic, c.conns
    );
    println!(
        "  {:.1} MB of values; B-tree depth {}, {} branch, {} leaf and {} overflow pages of {} bytes",
        report.value_bytes as f64 / 1e6,
        report.depth,
        report.branch_pages,
        report.leaf_pages,
        report.overflow_pages,
        report.page_size
    );
    println!(
        "  data file {:.1} MB; generated and loaded in {secs:.2} s",
        report.file_bytes as f64 / 1e6
    );
    Ok(())
}

/// `run`: the comparison's settings from the arguments, then the comparison.
fn run_cmd(a: RunArgs) -> Result<()> {
    let traversals = a.traversals.iter().map(|t| read_only_op(t)).collect::<Result<_>>()?;
    let thor = match a.thor_dir {
        None => None,
        Some(dir) => {
            let bin = match a.thor_bin {
                Some(b) => b,
                None => {
                    let exe = std::env::current_exe()?;
                    let b = exe.with_file_name("thor");
                    if !b.is_file() {
                        bail!(
                            "no `thor` beside {} (build it: cargo build --release -p thor-cli), or give --thor-bin",
                            exe.display()
                        );
                    }
                    b
                }
            };
            mib_to_bytes("--thor-cache-mb", a.thor_cache_mb)?;
            Some(run::ThorSide { bin, dir, policy: a.thor_policy, cache_mb: a.thor_cache_mb })
        }
    };
    let work_dir = match a.work_dir {
        Some(w) => w,
        None => std::path::absolute(&a.dir)?
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_else(std::env::temp_dir),
    };
    run::run(&run::RunSettings {
        dir: a.dir,
        traversals,
        runs: a.runs,
        hot_repeats: a.hot_repeats,
        t2b_runs: a.t2b_runs,
        thor,
        work_dir,
        json: a.json,
    })
}

/// `footprint`: the bisection's settings from the arguments, then the bisection.
fn footprint_cmd(a: FootprintArgs) -> Result<()> {
    let thor = match a.thor_dir {
        None => None,
        Some(dir) => {
            let Some(cache_mb) = a.thor_cache_mb else {
                bail!("--thor-dir needs --thor-cache-mb (thor's client cache for the probe)");
            };
            mib_to_bytes("--thor-cache-mb", cache_mb)?;
            mib_to_bytes("--thor-server-cache-mb", a.thor_server_cache_mb)?;
            let _: thor_client::PolicyConfig = a.thor_policy.parse()?;
            Some(footprint::ThorFootprint {
                dir,
                cache_mb,
                policy: a.thor_policy,
                server_cache_mb: a.thor_server_cache_mb,
            })
        }
    };
    footprint::footprint(&footprint::FootprintSettings {
        lmdb_dir: a.dir,
        lmdb_readahead: !a.lmdb_no_readahead,
        thor,
        traversal: read_only_op(&a.traversal)?,
        lo_mib: a.lo_mib,
        hi_mib: a.hi_mib,
        step_mib: a.step_mib,
        hot_runs: a.hot_runs,
        confirm: a.confirm,
        probe_timeout: Duration::from_secs(a.probe_timeout_s),
        json: a.json,
    })
}
