//! `oo7-lmdb run`: cold and hot traversals and T2b's commit, over LMDB and (with `--thor-dir`)
//! over thor with the `thor` command, alternating in one sitting.
//!
//! Each round runs, per traversal, one LMDB process (a cold run, then `--hot-repeats` hot
//! ones), one `thor oo7 run` (cold: a fresh process, embedded server and empty client cache)
//! and one `thor oo7 run --hot` (a warm-up run, then the measured one in the same session).
//! Alternating the stores within a round spreads the shared machine's noise over both. Before
//! the first round every database file is read through, so the OS page cache is warm for both,
//! and each round checks that both stores gave the same answers (parts visited, updates,
//! result).
//!
//! T2b runs on a fresh copy of each database (copied, synced, still in the OS page cache):
//! over LMDB as one write transaction whose commit writes the dirty pages and syncs; over thor
//! as `thor oo7 run --traversal t2b` (cold), whose commit ships the modified objects to the
//! embedded server, which logs them durably before it replies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use oo7_lmdb::limits::{CHILD_TIMEOUT_S, RUNS_MAX};
use oo7_lmdb::stats::Summary;
use oo7_lmdb::store;
use oo7_lmdb::sys;
use serde::Serialize;
use serde_json::json;
use thor_oo7::{Op, Params};

use crate::child::{self, RunOut, Sample, T2bOut};

/// `run`'s settings.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The LMDB environment.
    pub dir: PathBuf,
    /// The read-only traversals to time.
    pub traversals: Vec<Op>,
    /// Rounds (cold processes per traversal and store).
    pub runs: u32,
    /// Hot runs per LMDB process.
    pub hot_repeats: u32,
    /// T2b copies per store (0: no T2b).
    pub t2b_runs: u32,
    /// thor's side: the `thor` binary and database, if given.
    pub thor: Option<ThorSide>,
    /// Where T2b's copies go (a directory on the same file system as the databases).
    pub work_dir: PathBuf,
    /// Where to write every sample as JSON.
    pub json: Option<PathBuf>,
}

/// thor's side of the comparison.
#[derive(Debug, Clone)]
pub struct ThorSide {
    /// The `thor` binary.
    pub bin: PathBuf,
    /// The database directory.
    pub dir: PathBuf,
    /// `--policy`.
    pub policy: String,
    /// `--cache-mb`.
    pub cache_mb: f64,
}

/// What `thor oo7 run --json` reports that is used here.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct ThorReport {
    /// Elapsed time of the measured run (without its commit).
    pub elapsed_s: f64,
    /// CPU time of the measured run.
    pub cpu_s: Option<f64>,
    /// The commit's time.
    pub commit_s: f64,
    /// Fetches in the measured run.
    pub fetches: u64,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates.
    pub updates: u64,
    /// The answer.
    pub result: u64,
    /// Bytes of object versions shipped at commit.
    pub bytes_shipped: u64,
}

/// The parameters of the thor database in `dir` (opens it briefly: no other process may hold
/// it).
pub fn thor_params(dir: &Path) -> Result<Params> {
    let engine = thor_oo7::experiment::open_embedded(dir)
        .with_context(|| format!("opening the thor database in {}", dir.display()))?;
    let endpoint = thor_oo7::experiment::Endpoint::Embedded(engine);
    let s = thor_oo7::experiment::connect(&endpoint, thor_client::SessionConfig::default())?;
    let p = *thor_oo7::traverse::Db::open(&s)?.params();
    s.close()?;
    Ok(p)
}

/// The LMDB database's parameters.
pub fn lmdb_params(dir: &Path) -> Result<Params> {
    let env = store::open_env(dir, store::EnvConfig::READ_ONLY)?;
    let db = store::open_db(&env)?;
    Ok(store::meta(&env, &db)?.params)
}

/// The regular files of `path` (a directory), or `path` itself (a file).
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    Ok(if path.is_dir() {
        std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect()
    } else {
        vec![path.to_path_buf()]
    })
}

/// Reads every regular file of `dir` (or `dir` itself, a file) so the OS page cache holds it;
/// returns pages resident after, and pages in all.
pub fn warm(path: &Path) -> Result<(u64, u64)> {
    let files = files_of(path)?;
    let (mut res, mut all) = (0, 0);
    for f in files {
        sys::read_through(&f)?;
        let (r, a) = sys::resident_pages(&f)?;
        res += r;
        all += a;
    }
    Ok((res, all))
}

fn timeout() -> Duration {
    Duration::from_secs(CHILD_TIMEOUT_S)
}

fn thor_cmd(t: &ThorSide, dir: &Path, op: Op, hot: bool) -> Command {
    let mut c = Command::new(&t.bin);
    c.args(["oo7", "run", "-q", "--dir"])
        .arg(dir)
        .args(["--traversal", op.name(), "--policy", &t.policy, "--cache-mb"])
        .arg(t.cache_mb.to_string())
        .arg("--json");
    if hot {
        c.arg("--hot");
    }
    c
}

/// Copies every regular file of `src` into the new directory `dst` and syncs them.
fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir(dst).with_context(|| format!("creating {}", dst.display()))?;
    for e in std::fs::read_dir(src)? {
        let p = e?.path();
        if !p.is_file() || p.file_name().is_some_and(|n| n == "LOCK" || n == "lock.mdb") {
            continue;
        }
        let to = dst.join(p.file_name().expect("a file has a name"));
        std::fs::copy(&p, &to).with_context(|| format!("copying {}", p.display()))?;
        std::fs::File::open(&to)?.sync_all()?;
    }
    Ok(())
}

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string()
}

fn same(op: Op, a: (u64, u64, u64), b: (u64, u64, u64)) -> Result<()> {
    if a != b {
        bail!(
            "{}: LMDB answered (parts, updates, result) = {a:?}, thor {b:?}: not the same database?",
            op.name()
        );
    }
    Ok(())
}

/// What the rounds of cold and hot traversals measured, per traversal (in `s.traversals`'
/// order).
struct Traversals {
    lmdb: Vec<(Op, Vec<RunOut>)>,
    thor_cold: Vec<Vec<ThorReport>>,
    thor_hot: Vec<Vec<ThorReport>>,
}

/// What the T2b rounds measured: LMDB's, and thor's with the bytes its process wrote.
struct T2bs {
    lmdb: Vec<T2bOut>,
    thor: Vec<(ThorReport, u64)>,
}

/// Runs the comparison and prints its table.
pub fn run(s: &RunSettings) -> Result<()> {
    if s.runs == 0 || s.runs > RUNS_MAX || s.hot_repeats > RUNS_MAX || s.t2b_runs > RUNS_MAX {
        bail!("--runs must be in 1..={RUNS_MAX}, --hot-repeats and --t2b-runs in 0..={RUNS_MAX}");
    }
    if s.hot_repeats == 0 {
        bail!("--hot-repeats must be at least 1");
    }
    let exe = std::env::current_exe()?;
    let params = lmdb_params(&s.dir)?;
    if let Some(t) = &s.thor {
        let tp = thor_params(&t.dir)?;
        if tp != params {
            bail!("the databases differ: LMDB's was generated with {params:?}, thor's with {tp:?}");
        }
    }
    let lmdb_file = s.dir.join(store::DATA_FILE);
    let (r, a) = warm(&lmdb_file)?;
    eprintln!("OS page cache: LMDB's data file {r} of {a} pages resident");
    if let Some(t) = &s.thor {
        let (r, a) = warm(&t.dir)?;
        eprintln!("OS page cache: thor's database files {r} of {a} pages resident");
    }
    let load_before = load_avg();

    let trav = traversals(s, &exe)?;
    let t2b = t2b_rounds(s, &exe)?;
    let load_after = load_avg();
    let json_trav = print_traversals(s, params, &trav, &load_before, &load_after);
    print_t2b(&t2b);
    if let Some(path) = &s.json {
        write_json(s, path, params, json_trav, &t2b, (load_before.as_str(), load_after.as_str()))?;
    }
    Ok(())
}

/// The rounds of cold and hot traversals, each in child processes, with a line per round
/// on stderr.
fn traversals(s: &RunSettings, exe: &Path) -> Result<Traversals> {
    let mut lmdb: Vec<(Op, Vec<RunOut>)> = s.traversals.iter().map(|&o| (o, vec![])).collect();
    let mut thor_cold: Vec<Vec<ThorReport>> = vec![vec![]; s.traversals.len()];
    let mut thor_hot: Vec<Vec<ThorReport>> = vec![vec![]; s.traversals.len()];
    for round in 0..s.runs {
        for (i, &op) in s.traversals.iter().enumerate() {
            let mut c = Command::new(exe);
            c.args(["child-run", "--dir"]).arg(&s.dir).args(["--traversal", op.name()]);
            c.args(["--hot", &s.hot_repeats.to_string()]);
            let (out, _) = child::spawn_ok::<RunOut>(c, timeout())?;
            let l = out.cold;
            let mut line = format!(
                "round {}/{} {:>3}: LMDB cold {:8.2} ms ({} minor, {} major faults), hot {:8.2} ms",
                round + 1,
                s.runs,
                op.name(),
                l.elapsed_s * 1e3,
                l.minflt,
                l.majflt,
                out.hot[0].elapsed_s * 1e3
            );
            if let Some(t) = &s.thor {
                let (cold, _) =
                    child::spawn_ok::<ThorReport>(thor_cmd(t, &t.dir, op, false), timeout())?;
                let (hot, _) =
                    child::spawn_ok::<ThorReport>(thor_cmd(t, &t.dir, op, true), timeout())?;
                for r in [&cold, &hot] {
                    same(
                        op,
                        (l.parts_visited, l.updates, l.result),
                        (r.parts_visited, r.updates, r.result),
                    )?;
                }
                line += &format!(
                    " | thor cold {:8.2} ms ({} fetches), hot {:8.2} ms ({} fetches)",
                    cold.elapsed_s * 1e3,
                    cold.fetches,
                    hot.elapsed_s * 1e3,
                    hot.fetches
                );
                thor_cold[i].push(cold);
                thor_hot[i].push(hot);
            }
            eprintln!("{line}");
            lmdb[i].1.push(out);
        }
    }

    Ok(Traversals { lmdb, thor_cold, thor_hot })
}

/// The T2b rounds, each on fresh copies of the databases, with a line per round on stderr.
fn t2b_rounds(s: &RunSettings, exe: &Path) -> Result<T2bs> {
    let mut lmdb_t2b: Vec<T2bOut> = Vec::new();
    let mut thor_t2b: Vec<(ThorReport, u64)> = Vec::new();
    for round in 0..s.t2b_runs {
        let tmp = tempfile::Builder::new()
            .prefix("oo7-lmdb-t2b-")
            .tempdir_in(&s.work_dir)
            .with_context(|| format!("a directory for T2b's copies in {}", s.work_dir.display()))?;
        let copy = tmp.path().join("lmdb");
        copy_dir(&s.dir, &copy)?;
        let mut c = Command::new(exe);
        c.args(["child-t2b", "--dir"]).arg(&copy);
        let (out, _) = child::spawn_ok::<T2bOut>(c, timeout())?;
        let mut line = format!(
            "T2b {}/{}: LMDB traversal {:.1} ms, commit {:.2} ms ({:.2} MB written in {} calls)",
            round + 1,
            s.t2b_runs,
            out.traverse_s * 1e3,
            out.commit_s * 1e3,
            out.commit_io.wchar as f64 / 1e6,
            out.commit_io.syscw
        );
        if let Some(t) = &s.thor {
            let copy = tmp.path().join("thor");
            copy_dir(&t.dir, &copy)?;
            let (r, u) =
                child::spawn_ok::<ThorReport>(thor_cmd(t, &copy, Op::T2b, false), timeout())?;
            same(Op::T2b, (out.parts_visited, out.updates, 0), (r.parts_visited, r.updates, 0))?;
            line += &format!(
                " | thor traversal {:.1} ms, commit {:.2} ms ({:.2} MB shipped; process wrote {:.2} MB)",
                r.elapsed_s * 1e3,
                r.commit_s * 1e3,
                r.bytes_shipped as f64 / 1e6,
                u.oublock as f64 * 512.0 / 1e6
            );
            thor_t2b.push((r, u.oublock * 512));
        }
        eprintln!("{line}");
        lmdb_t2b.push(out);
    }
    Ok(T2bs { lmdb: lmdb_t2b, thor: thor_t2b })
}

/// Prints the traversals' tables (elapsed and CPU time); returns their JSON records.
fn print_traversals(
    s: &RunSettings,
    params: Params,
    trav: &Traversals,
    load_before: &str,
    load_after: &str,
) -> Vec<serde_json::Value> {
    let Traversals { lmdb, thor_cold, thor_hot } = trav;
    // ----- the table -----
    let ms = |xs: Vec<f64>| Summary::of(&xs).map(|s| s.show(1e3, 2)).unwrap_or("-".into());
    let sum = |xs: Vec<f64>| Summary::of(&xs);
    println!(
        "OO7 {} (seed {:#x}), {} rounds; median (min-max) in ms; load average {load_before} before, {load_after} after",
        if params == Params::medium() { "medium".to_string() } else { format!("{params:?}") },
        params.seed,
        s.runs
    );
    println!();
    println!(
        "| traversal | LMDB cold | LMDB hot | thor cold | thor hot | cold thor/LMDB | hot thor/LMDB |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut json_trav = Vec::new();
    for (i, (op, outs)) in lmdb.iter().enumerate() {
        let lc: Vec<f64> = outs.iter().map(|o| o.cold.elapsed_s).collect();
        let lh: Vec<f64> = outs.iter().flat_map(|o| o.hot.iter().map(|h| h.elapsed_s)).collect();
        let tc: Vec<f64> = thor_cold[i].iter().map(|r| r.elapsed_s).collect();
        let th: Vec<f64> = thor_hot[i].iter().map(|r| r.elapsed_s).collect();
        let ratio = |t: &[f64], l: &[f64]| match (sum(t.to_vec()), sum(l.to_vec())) {
            (Some(t), Some(l)) => format!("{:.2}", t.median / l.median),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            op.name(),
            ms(lc.clone()),
            ms(lh.clone()),
            ms(tc.clone()),
            ms(th.clone()),
            ratio(&tc, &lc),
            ratio(&th, &lh)
        );
        let cold_samples: Vec<Sample> = outs.iter().map(|o| o.cold).collect();
        json_trav.push(json!({
            "traversal": op.name(),
            "lmdb_cold_s": sum(lc), "lmdb_hot_s": sum(lh),
            "thor_cold_s": sum(tc), "thor_hot_s": sum(th),
            "lmdb_cold_minflt": sum(cold_samples.iter().map(|c| c.minflt as f64).collect()),
            "lmdb_cold_majflt": sum(cold_samples.iter().map(|c| c.majflt as f64).collect()),
            "thor_cold_fetches": sum(thor_cold[i].iter().map(|r| r.fetches as f64).collect()),
            "lmdb": outs, "thor_cold": thor_cold[i], "thor_hot": thor_hot[i],
        }));
    }
    // CPU time of the measuring thread: what the shared machine's other work does not
    // inflate (thor's embedded server runs on the client's thread, so its work is included).
    println!();
    println!("CPU time of the measured thread, median (min-max) in ms:");
    println!();
    println!("| traversal | LMDB cold | LMDB hot | thor cold | thor hot |");
    println!("|---|---|---|---|---|");
    for (i, (op, outs)) in lmdb.iter().enumerate() {
        let cpu = |xs: Vec<Option<f64>>| ms(xs.into_iter().flatten().collect());
        println!(
            "| {} | {} | {} | {} | {} |",
            op.name(),
            cpu(outs.iter().map(|o| o.cold.cpu_s).collect()),
            cpu(outs.iter().flat_map(|o| o.hot.iter().map(|h| h.cpu_s)).collect()),
            cpu(thor_cold[i].iter().map(|r| r.cpu_s).collect()),
            cpu(thor_hot[i].iter().map(|r| r.cpu_s).collect()),
        );
    }
    json_trav
}

/// Prints the T2b table, if T2b ran.
fn print_t2b(t2b: &T2bs) {
    let T2bs { lmdb: lmdb_t2b, thor: thor_t2b } = t2b;
    let ms = |xs: Vec<f64>| Summary::of(&xs).map(|s| s.show(1e3, 2)).unwrap_or("-".into());
    if !lmdb_t2b.is_empty() {
        println!();
        println!("| T2b | traversal | commit | bytes written at commit |");
        println!("|---|---|---|---|");
        println!(
            "| LMDB (one write transaction) | {} | {} | {} MB to write calls, {} MB to storage |",
            ms(lmdb_t2b.iter().map(|o| o.traverse_s).collect()),
            ms(lmdb_t2b.iter().map(|o| o.commit_s).collect()),
            Summary::of(&lmdb_t2b.iter().map(|o| o.commit_io.wchar as f64).collect::<Vec<_>>())
                .map(|s| s.show(1e-6, 2))
                .unwrap_or_default(),
            Summary::of(
                &lmdb_t2b.iter().map(|o| o.commit_io.write_bytes as f64).collect::<Vec<_>>()
            )
            .map(|s| s.show(1e-6, 2))
            .unwrap_or_default(),
        );
        if !thor_t2b.is_empty() {
            println!(
                "| thor (`thor oo7 run --traversal t2b`, cold) | {} | {} | {} MB of objects shipped; the process wrote {} MB in all |",
                ms(thor_t2b.iter().map(|(r, _)| r.elapsed_s).collect()),
                ms(thor_t2b.iter().map(|(r, _)| r.commit_s).collect()),
                Summary::of(
                    &thor_t2b.iter().map(|(r, _)| r.bytes_shipped as f64).collect::<Vec<_>>()
                )
                .map(|s| s.show(1e-6, 2))
                .unwrap_or_default(),
                Summary::of(&thor_t2b.iter().map(|(_, w)| *w as f64).collect::<Vec<_>>())
                    .map(|s| s.show(1e-6, 2))
                    .unwrap_or_default(),
            );
        }
    }
}

/// Writes everything measured as JSON to `path`.
fn write_json(
    s: &RunSettings,
    path: &Path,
    params: Params,
    json_trav: Vec<serde_json::Value>,
    t2b: &T2bs,
    (load_before, load_after): (&str, &str),
) -> Result<()> {
    let T2bs { lmdb: lmdb_t2b, thor: thor_t2b } = t2b;
    let v = json!({
        "params": format!("{params:?}"),
        "runs": s.runs, "hot_repeats": s.hot_repeats,
        "load_average_before": load_before, "load_average_after": load_after,
        "thor": s.thor.as_ref().map(|t| json!({"bin": t.bin, "dir": t.dir, "policy": t.policy, "cache_mb": t.cache_mb})),
        "traversals": json_trav,
        "lmdb_t2b": lmdb_t2b,
        "thor_t2b": thor_t2b.iter().map(|(r, w)| json!({"report": r, "process_write_bytes": w})).collect::<Vec<_>>(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&v)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
