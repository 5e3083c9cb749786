//! `map-bench`: issue 34's map figures for thor's persistent `Map<u64, u64>` and for LMDB
//! (heed) as the embedded peer, the same workload in one binary (`bench/zodb/map.py` runs it
//! over ZODB/ZEO).
//!
//! # The workload (both engines)
//!
//! 1. **load**: `--n` inserts of random `u64` keys (a SplitMix64 stream from `--seed`, values
//!    `key ^ VALUE_MASK`), `--batch` per transaction, into an empty map on a new directory.
//! 2. **lookups cold**: the database is closed and opened again (thor: a new engine and a new
//!    session, so the server's page cache and the client cache are empty; LMDB: the
//!    environment reopened, which keeps nothing of its own). The operating system's page
//!    cache is *not* dropped (the machine is shared), so "cold" means cold in the process,
//!    warm in the kernel, for both. `--lookups` point lookups of keys drawn from the loaded
//!    ones, `--batch` per read transaction; every lookup must find its value.
//! 3. **lookups hot**: the same lookups again in the same session / environment.
//! 4. **scan**: a range `[lo, lo + u64::MAX / 10)` from a random `lo` (about 10% of the
//!    keys, since keys are uniform), in one read transaction; the count is reported.
//! 5. **concurrent**: `--clients` threads, each with its own session (thor: over the
//!    in-process transport of the one embedded database) or its own write transactions
//!    (LMDB: one writer at a time, so it never aborts), each inserting `--conc-inserts`
//!    random distinct keys of its own stream in transactions of `--conc-batch`. thor's
//!    `Session::run` retries a transaction refused by concurrency control with the same keys;
//!    the abort rate is conflicts / (commits + conflicts) of those transactions. Their
//!    commits carry map leaf deltas, which the server merges when two change different keys
//!    of one leaf; `--no-leaf-deltas` turns that off (the figures from before the merge).
//!
//! `--only` picks phases (the load always runs, unless `--reuse` finds a kept database): for
//! example `map-bench thor --only lookups-hot,scan --repeat 5` measures the read path alone,
//! single-threaded, five times in one process (a phase whose cache state needs the earlier
//! ones gets an untimed pass of lookups first, so hot is hot and the scan's leaves are cached
//! as in the full run).
//!
//! Each run prints one JSON object (`--json`) or a few lines of text: rates are operations per
//! second of wall-clock time, and the load average at the start is recorded because the
//! machine is shared. The hot lookups and the scan also give their rate per second of the
//! process's CPU time (every thread: thor's engine threads count), which the other processes
//! on a shared machine disturb far less than the wall clock (a scan of 100,000 keys takes a
//! few milliseconds, about a scheduler's time slice).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use heed::types::Bytes;
use heed::{CommitOrAbort, Env, EnvOpenOptions};
use serde_json::json;
use thor::{Database, Map, PolicyConfig, SessionConfig};

/// XORed into a key to make its value, so a lookup can check what it read.
const VALUE_MASK: u64 = 0x5bd1_e995_5bd1_e995;

/// LMDB's map size: far above 1 M entries of 16 bytes plus the concurrent inserts.
const LMDB_MAP_BYTES: usize = 4 << 30;

/// The root slot holding the map in thor.
const MAP_ROOT: usize = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    Thor,
    Lmdb,
}

/// A measured phase after the load (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    LookupsCold,
    LookupsHot,
    Scan,
    Concurrent,
}

#[derive(Debug, Parser)]
#[command(
    about = "thor's Map<u64, u64> against LMDB: load, lookups cold and hot, scan, concurrent inserts"
)]
struct Args {
    /// The engine to measure.
    engine: Engine,
    /// Keys loaded.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// Inserts per load transaction, and lookups per read transaction.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Point lookups, cold and then hot.
    #[arg(long, default_value_t = 1_000_000)]
    lookups: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Keys each concurrent client inserts.
    #[arg(long, default_value_t = 20_000)]
    conc_inserts: usize,
    /// Inserts per concurrent transaction.
    #[arg(long, default_value_t = 100)]
    conc_batch: usize,
    /// thor's client cache per session, in MiB.
    #[arg(long, default_value_t = 128)]
    cache_mib: usize,
    /// Seed of the key streams.
    #[arg(long, default_value_t = 34)]
    seed: u64,
    /// Directory to create the database in (a new temporary directory if absent; removed at
    /// the end either way unless --keep).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the database directory.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// The phases to measure after the load (all by default).
    #[arg(long, value_delimiter = ',', default_value = "lookups-cold,lookups-hot,scan,concurrent")]
    only: Vec<Phase>,
    /// Times to run each of the hot lookups and the scan (each time is reported; the
    /// headline figure is their median).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// With `--dir`: if the directory already holds a database (kept by an earlier run with
    /// `--keep` and the same `--n` and `--seed`), skip the load and use it. The lookups and
    /// the scan still check every value and the count against the key stream.
    #[arg(long)]
    reuse: bool,
    /// thor: commits carry no map leaf deltas, so the server merges nothing (every commit that
    /// changed a leaf another changed meanwhile conflicts, as before the merge was built).
    #[arg(long)]
    no_leaf_deltas: bool,
}

impl Args {
    fn runs(&self, p: Phase) -> bool {
        self.only.contains(&p)
    }
}

/// SplitMix64: a stream of well-spread `u64`s from a seed (distinct for distinct states, as it
/// is a bijection of a counter).
#[derive(Debug, Clone)]
struct Keys(u64);

impl Keys {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The process's CPU time so far, in seconds (every thread).
fn cpu_now() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to write; the clock id is a constant
    // every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return 0.0;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Time a phase took: wall-clock and the process's CPU seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    wall: f64,
    cpu: f64,
}

/// A started measurement.
struct Stopwatch {
    wall: Instant,
    cpu: f64,
}

impl Stopwatch {
    fn start() -> Self {
        Stopwatch { wall: Instant::now(), cpu: cpu_now() }
    }

    fn stop(&self) -> Spent {
        Spent { wall: self.wall.elapsed().as_secs_f64(), cpu: cpu_now() - self.cpu }
    }
}

/// What one run measured.
#[derive(Debug, Default)]
struct Figures {
    /// 0 when the load was skipped (`--reuse`).
    load_secs: f64,
    cold_secs: f64,
    /// One per `--repeat`: wall-clock and process CPU seconds.
    hot_secs: Vec<Spent>,
    /// One per `--repeat`.
    scan_secs: Vec<Spent>,
    scan_keys: usize,
    conc_secs: f64,
    conc_inserts: usize,
    conc_commits: u64,
    conc_conflicts: u64,
    db_bytes: u64,
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.n == 0 || a.batch == 0 || a.conc_batch == 0 || a.repeat == 0 {
        bail!("--n, --batch, --conc-batch and --repeat must be positive");
    }
    if a.reuse && a.dir.is_none() {
        bail!("--reuse needs --dir");
    }
    let load_avg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new().prefix("map-bench").tempdir()?;
            tmp.path().join("db")
        }
    };
    // The load's keys, and the lookups' (indices into them), fixed by the seed.
    let mut ks = Keys(a.seed);
    let keys: Vec<u64> = (0..a.n).map(|_| ks.next()).collect();
    let mut pick = Keys(a.seed ^ 0xc0ff_ee00);
    let probes: Vec<u64> =
        (0..a.lookups).map(|_| keys[(pick.next() % a.n as u64) as usize]).collect();
    let lo = pick.next() % (u64::MAX - u64::MAX / 10);
    let hi = lo + u64::MAX / 10;
    let load = !(a.reuse && dir.exists());
    let f = match a.engine {
        Engine::Thor => run_thor(&a, &dir, load, &keys, &probes, lo, hi)?,
        Engine::Lmdb => run_lmdb(&a, &dir, load, &keys, &probes, lo, hi)?,
    };
    let expect_scan = keys.iter().filter(|&&k| (lo..hi).contains(&k)).count();
    if a.runs(Phase::Scan) && f.scan_keys != expect_scan {
        bail!("the scan found {} keys, the load inserted {expect_scan} in its range", f.scan_keys);
    }
    if !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report(&a, &f, load_avg.trim());
    Ok(())
}

/// The median of `xs` (the mean of the middle two for an even count); 0 for none.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Prints the figures of the phases that ran.
fn report(a: &Args, f: &Figures, load_avg: &str) {
    let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let rates = |n: usize, ss: &[f64]| ss.iter().map(|&s| rate(n, s)).collect::<Vec<_>>();
    let wall = |xs: &[Spent]| xs.iter().map(|x| x.wall).collect::<Vec<_>>();
    let cpu = |xs: &[Spent]| xs.iter().map(|x| x.cpu).collect::<Vec<_>>();
    let hot = rates(a.lookups, &wall(&f.hot_secs));
    let hot_cpu = rates(a.lookups, &cpu(&f.hot_secs));
    let scan = rates(f.scan_keys, &wall(&f.scan_secs));
    let scan_cpu = rates(f.scan_keys, &cpu(&f.scan_secs));
    let conc_total = a.clients * a.conc_inserts;
    let abort_rate = f.conc_conflicts as f64 / (f.conc_commits + f.conc_conflicts).max(1) as f64;
    let phases: Vec<String> = a
        .only
        .iter()
        .map(|p| p.to_possible_value().expect("no skipped variants").get_name().to_string())
        .collect();
    if a.json {
        let out = json!({
            "engine": format!("{:?}", a.engine).to_lowercase(),
            "n": a.n, "batch": a.batch, "lookups": a.lookups, "clients": a.clients,
            "conc_inserts_per_client": a.conc_inserts, "conc_batch": a.conc_batch,
            "phases": phases, "repeat": a.repeat,
            "loadavg_at_start": load_avg,
            "load_secs": f.load_secs, "load_inserts_per_sec": rate(a.n, f.load_secs),
            "cold_lookups_per_sec": rate(a.lookups, f.cold_secs),
            "hot_lookups_per_sec": median(&hot), "hot_lookups_per_sec_runs": hot,
            "hot_lookups_per_cpu_sec_runs": hot_cpu,
            "scan_keys": f.scan_keys, "scan_secs": median(&wall(&f.scan_secs)),
            "scan_keys_per_sec": median(&scan), "scan_keys_per_sec_runs": scan,
            "scan_keys_per_cpu_sec_runs": scan_cpu,
            "conc_inserts": f.conc_inserts, "conc_secs": f.conc_secs,
            "conc_inserts_per_sec": rate(f.conc_inserts, f.conc_secs),
            "conc_commits": f.conc_commits, "conc_conflicts": f.conc_conflicts,
            "conc_abort_rate": abort_rate, "db_bytes_after_load": f.db_bytes,
            "leaf_deltas": !a.no_leaf_deltas,
        });
        println!("{out}");
        return;
    }
    println!("engine {:?}, n {}, load average at start {load_avg}", a.engine, a.n);
    if f.load_secs > 0.0 {
        println!("load     {:>12.0} inserts/s ({:.2} s)", rate(a.n, f.load_secs), f.load_secs);
    }
    if a.runs(Phase::LookupsCold) {
        println!("cold     {:>12.0} lookups/s", rate(a.lookups, f.cold_secs));
    }
    let list = |xs: &[f64]| xs.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ");
    if a.runs(Phase::LookupsHot) {
        println!("hot      {:>12.0} lookups/s (runs: {})", median(&hot), list(&hot));
        println!("  per CPU s {:>9.0} (runs: {})", median(&hot_cpu), list(&hot_cpu));
    }
    if a.runs(Phase::Scan) {
        println!(
            "scan     {:>12.0} keys/s ({} keys; runs: {})",
            median(&scan),
            f.scan_keys,
            list(&scan)
        );
        println!("  per CPU s {:>9.0} (runs: {})", median(&scan_cpu), list(&scan_cpu));
    }
    if a.runs(Phase::Concurrent) {
        println!(
            "{} clients {:>8.0} committed inserts/s, abort rate {:.3} ({} of {conc_total} keys)",
            a.clients,
            rate(f.conc_inserts, f.conc_secs),
            abort_rate,
            f.conc_inserts
        );
    }
}

/// Bytes in the files of `dir` (the database's size on disk).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

fn thor_config(a: &Args) -> SessionConfig {
    SessionConfig {
        cache_bytes: a.cache_mib << 20,
        policy: PolicyConfig::HAC,
        // Concurrent inserts retry until they commit: the figure is the abort rate, not a
        // give-up rate.
        run_attempts_max: 10_000,
        leaf_deltas: !a.no_leaf_deltas,
        ..SessionConfig::default()
    }
}

fn run_thor(
    a: &Args,
    dir: &Path,
    load: bool,
    keys: &[u64],
    probes: &[u64],
    lo: u64,
    hi: u64,
) -> Result<Figures> {
    let mut f = Figures::default();
    if load {
        let db = Database::open(dir)?;
        {
            let s = db.session_with(thor_config(a))?;
            s.run(|s| {
                let m = s.create_map::<u64, u64>()?;
                s.set_root(MAP_ROOT, m)
            })?;
            let t = Instant::now();
            for chunk in keys.chunks(a.batch) {
                thor_insert(&s, chunk)?;
            }
            f.load_secs = t.elapsed().as_secs_f64();
        }
        db.close().context("closing after the load")?;
    }
    f.db_bytes = dir_bytes(dir);

    let db = Database::open(dir)?;
    let s = db.session_with(thor_config(a))?;
    let lookups = |s: &thor::Session| -> Result<Spent> {
        let t = Stopwatch::start();
        for chunk in probes.chunks(a.batch) {
            s.run(|s| {
                let m = s.map(s.root::<Map<u64, u64>>(MAP_ROOT)?)?;
                for &k in chunk {
                    if m.get(&k)? != Some(k ^ VALUE_MASK) {
                        return Err(thor::ClientError::Usage("a loaded key is missing"));
                    }
                }
                Ok(())
            })?;
        }
        Ok(t.stop())
    };
    let scan = |s: &thor::Session| -> Result<(usize, Spent)> {
        let t = Stopwatch::start();
        let n = s.run(|s| {
            let m = s.map(s.root::<Map<u64, u64>>(MAP_ROOT)?)?;
            let mut n = 0;
            for e in m.range(lo..hi)? {
                let (k, v) = e?;
                if v != k ^ VALUE_MASK {
                    return Err(thor::ClientError::Usage("a scanned value is wrong"));
                }
                n += 1;
            }
            Ok(n)
        })?;
        Ok((n, t.stop()))
    };
    let warm = a.runs(Phase::LookupsHot) || a.runs(Phase::Scan);
    if a.runs(Phase::LookupsCold) {
        f.cold_secs = lookups(&s)?.wall;
    } else if warm {
        lookups(&s)?;
    }
    for _ in 0..a.repeat {
        if a.runs(Phase::LookupsHot) {
            f.hot_secs.push(lookups(&s)?);
        }
        if a.runs(Phase::Scan) {
            let (n, secs) = scan(&s)?;
            f.scan_keys = n;
            f.scan_secs.push(secs);
        }
    }
    drop(s);

    if a.runs(Phase::Concurrent) {
        let t = Instant::now();
        let per_client = thor_concurrent(a, &db)?;
        f.conc_secs = t.elapsed().as_secs_f64();
        for (n, c, x) in per_client {
            f.conc_inserts += n;
            f.conc_commits += c;
            f.conc_conflicts += x;
        }
    }
    db.close().context("closing at the end")?;
    Ok(f)
}

/// Each of `a.clients` sessions inserts its own keys concurrently; per client: keys inserted,
/// commits and conflicts.
fn thor_concurrent(a: &Args, db: &Database) -> Result<Vec<(usize, u64, u64)>> {
    let sessions =
        (0..a.clients).map(|_| db.session_with(thor_config(a))).collect::<Result<Vec<_>, _>>()?;
    std::thread::scope(|sc| {
        let handles: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                sc.spawn(move || -> Result<(usize, u64, u64)> {
                    let mine = client_keys(a, i);
                    let before = s.stats();
                    for chunk in mine.chunks(a.conc_batch) {
                        thor_insert(&s, chunk)?;
                    }
                    let after = s.stats();
                    Ok((
                        mine.len(),
                        after.commits - before.commits,
                        after.conflicts - before.conflicts,
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect::<Result<Vec<_>>>()
    })
}

/// Inserts `chunk` into the map in one transaction (retried on conflicts by `run`).
fn thor_insert(s: &thor::Session, chunk: &[u64]) -> Result<(), thor::ClientError> {
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, u64>>(MAP_ROOT)?)?;
        for &k in chunk {
            m.insert(k, k ^ VALUE_MASK)?;
        }
        Ok(())
    })
}

/// The keys client `i` of the concurrent line inserts (its own stream).
fn client_keys(a: &Args, i: usize) -> Vec<u64> {
    let mut ks = Keys(a.seed.wrapping_add(1 + i as u64).wrapping_mul(0x1000_0001));
    (0..a.conc_inserts).map(|_| ks.next()).collect()
}

type Db<'e> = heed::Database<'e, Bytes, Bytes>;

fn lmdb_open(dir: &Path) -> Result<Env> {
    std::fs::create_dir_all(dir)?;
    let mut o = EnvOpenOptions::new();
    o.map_size(LMDB_MAP_BYTES).max_dbs(0);
    // SAFETY: the environment's files are this run's own, written only through LMDB, and
    // nothing truncates them while they are mapped.
    Ok(unsafe { o.open(dir)? })
}

/// The environment's unnamed database, created if absent.
fn lmdb_db(env: &Env) -> Result<Db<'_>> {
    let wtxn = env.write_txn()?;
    let db = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| {
            dbo.create_database::<Bytes, Bytes>(wtxn, None).map(CommitOrAbort::<_, ()>::Commit)
        })?
        .commit()
        .context("creating LMDB's unnamed database")?;
    Ok(db)
}

fn run_lmdb(
    a: &Args,
    dir: &Path,
    load: bool,
    keys: &[u64],
    probes: &[u64],
    lo: u64,
    hi: u64,
) -> Result<Figures> {
    let mut f = Figures::default();
    if load {
        let env = lmdb_open(dir)?;
        let db = lmdb_db(&env)?;
        let t = Instant::now();
        for chunk in keys.chunks(a.batch) {
            let mut w = env.write_txn()?;
            for &k in chunk {
                db.put(&mut w, &k.to_be_bytes(), &(k ^ VALUE_MASK).to_be_bytes())?;
            }
            w.commit()?;
        }
        f.load_secs = t.elapsed().as_secs_f64();
        env.prepare_for_closing().wait();
    }
    f.db_bytes = dir_bytes(dir);
    let env = lmdb_open(dir)?;
    let db = lmdb_db(&env)?;
    let lookups = || -> Result<Spent> {
        let t = Stopwatch::start();
        for chunk in probes.chunks(a.batch) {
            let r = env.read_txn()?;
            for &k in chunk {
                let v = db.get(&r, &k.to_be_bytes())?;
                if v != Some(&(k ^ VALUE_MASK).to_be_bytes()[..]) {
                    bail!("a loaded key is missing");
                }
            }
        }
        Ok(t.stop())
    };
    let scan = || -> Result<(usize, Spent)> {
        let t = Stopwatch::start();
        let r = env.read_txn()?;
        let (lo_b, hi_b) = (lo.to_be_bytes(), hi.to_be_bytes());
        let range = (Bound::Included(&lo_b[..]), Bound::Excluded(&hi_b[..]));
        let mut n = 0;
        for e in db.range(&r, &range)? {
            let (k, v) = e?;
            let k = u64::from_be_bytes(k.try_into()?);
            if v != (k ^ VALUE_MASK).to_be_bytes() {
                bail!("a scanned value is wrong");
            }
            n += 1;
        }
        drop(r);
        Ok((n, t.stop()))
    };
    let warm = a.runs(Phase::LookupsHot) || a.runs(Phase::Scan);
    if a.runs(Phase::LookupsCold) {
        f.cold_secs = lookups()?.wall;
    } else if warm {
        lookups()?;
    }
    for _ in 0..a.repeat {
        if a.runs(Phase::LookupsHot) {
            f.hot_secs.push(lookups()?);
        }
        if a.runs(Phase::Scan) {
            let (n, secs) = scan()?;
            f.scan_keys = n;
            f.scan_secs.push(secs);
        }
    }
    if a.runs(Phase::Concurrent) {
        lmdb_concurrent(a, &env, db, &mut f)?;
    }
    Ok(f)
}

/// The 8-client line on LMDB: each client inserts its own keys, one write transaction at a
/// time (LMDB has one writer; they queue).
fn lmdb_concurrent(a: &Args, env: &Env, db: Db<'_>, f: &mut Figures) -> Result<()> {
    let t = Instant::now();
    let per_client = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.clients)
            .map(|i| {
                sc.spawn(move || -> Result<(usize, u64)> {
                    let mine = client_keys(a, i);
                    let mut commits = 0;
                    for chunk in mine.chunks(a.conc_batch) {
                        let mut w = env.write_txn()?;
                        for &k in chunk {
                            db.put(&mut w, &k.to_be_bytes(), &(k ^ VALUE_MASK).to_be_bytes())?;
                        }
                        w.commit()?;
                        commits += 1;
                    }
                    Ok((mine.len(), commits))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    f.conc_secs = t.elapsed().as_secs_f64();
    for (n, c) in per_client {
        f.conc_inserts += n;
        f.conc_commits += c;
    }
    Ok(())
}
