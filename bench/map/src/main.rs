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
//! Each run prints one JSON object (`--json`) or a few lines of text: rates are operations per
//! second of wall-clock time, and the load average at the start is recorded because the
//! machine is shared.

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
    /// thor: commits carry no map leaf deltas, so the server merges nothing (every commit that
    /// changed a leaf another changed meanwhile conflicts, as before the merge was built).
    #[arg(long)]
    no_leaf_deltas: bool,
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

/// What one run measured.
#[derive(Debug, Default)]
struct Figures {
    load_secs: f64,
    cold_secs: f64,
    hot_secs: f64,
    scan_secs: f64,
    scan_keys: usize,
    conc_secs: f64,
    conc_inserts: usize,
    conc_commits: u64,
    conc_conflicts: u64,
    db_bytes: u64,
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.n == 0 || a.batch == 0 || a.conc_batch == 0 {
        bail!("--n, --batch and --conc-batch must be positive");
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
    let f = match a.engine {
        Engine::Thor => run_thor(&a, &dir, &keys, &probes, lo, hi)?,
        Engine::Lmdb => run_lmdb(&a, &dir, &keys, &probes, lo, hi)?,
    };
    let expect_scan = keys.iter().filter(|&&k| (lo..hi).contains(&k)).count();
    if f.scan_keys != expect_scan {
        bail!("the scan found {} keys, the load inserted {expect_scan} in its range", f.scan_keys);
    }
    if !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let rate = |n: usize, s: f64| n as f64 / s;
    let conc_total = a.clients * a.conc_inserts;
    let abort_rate = f.conc_conflicts as f64 / (f.conc_commits + f.conc_conflicts).max(1) as f64;
    if a.json {
        let out = json!({
            "engine": format!("{:?}", a.engine).to_lowercase(),
            "n": a.n, "batch": a.batch, "lookups": a.lookups, "clients": a.clients,
            "conc_inserts_per_client": a.conc_inserts, "conc_batch": a.conc_batch,
            "loadavg_at_start": load_avg.trim(),
            "load_secs": f.load_secs, "load_inserts_per_sec": rate(a.n, f.load_secs),
            "cold_lookups_per_sec": rate(a.lookups, f.cold_secs),
            "hot_lookups_per_sec": rate(a.lookups, f.hot_secs),
            "scan_keys": f.scan_keys, "scan_secs": f.scan_secs,
            "scan_keys_per_sec": rate(f.scan_keys, f.scan_secs),
            "conc_inserts": f.conc_inserts, "conc_secs": f.conc_secs,
            "conc_inserts_per_sec": rate(f.conc_inserts, f.conc_secs),
            "conc_commits": f.conc_commits, "conc_conflicts": f.conc_conflicts,
            "conc_abort_rate": abort_rate, "db_bytes_after_load": f.db_bytes,
            "leaf_deltas": !a.no_leaf_deltas,
        });
        println!("{out}");
    } else {
        println!("engine {:?}, n {}, load average at start {}", a.engine, a.n, load_avg.trim());
        println!("load     {:>12.0} inserts/s ({:.2} s)", rate(a.n, f.load_secs), f.load_secs);
        println!("cold     {:>12.0} lookups/s", rate(a.lookups, f.cold_secs));
        println!("hot      {:>12.0} lookups/s", rate(a.lookups, f.hot_secs));
        println!("scan     {:>12.0} keys/s ({} keys)", rate(f.scan_keys, f.scan_secs), f.scan_keys);
        println!(
            "{} clients {:>8.0} committed inserts/s, abort rate {:.3} ({} of {conc_total} keys)",
            a.clients,
            rate(f.conc_inserts, f.conc_secs),
            abort_rate,
            f.conc_inserts
        );
    }
    Ok(())
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
    keys: &[u64],
    probes: &[u64],
    lo: u64,
    hi: u64,
) -> Result<Figures> {
    let mut f = Figures::default();
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
    f.db_bytes = dir_bytes(dir);

    let db = Database::open(dir)?;
    let s = db.session_with(thor_config(a))?;
    let lookups = |s: &thor::Session| -> Result<f64> {
        let t = Instant::now();
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
        Ok(t.elapsed().as_secs_f64())
    };
    f.cold_secs = lookups(&s)?;
    f.hot_secs = lookups(&s)?;
    let t = Instant::now();
    f.scan_keys = s.run(|s| {
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
    f.scan_secs = t.elapsed().as_secs_f64();
    drop(s);

    let t = Instant::now();
    let per_client = thor_concurrent(a, &db)?;
    f.conc_secs = t.elapsed().as_secs_f64();
    for (n, c, x) in per_client {
        f.conc_inserts += n;
        f.conc_commits += c;
        f.conc_conflicts += x;
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
    keys: &[u64],
    probes: &[u64],
    lo: u64,
    hi: u64,
) -> Result<Figures> {
    let mut f = Figures::default();
    {
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
    let lookups = || -> Result<f64> {
        let t = Instant::now();
        for chunk in probes.chunks(a.batch) {
            let r = env.read_txn()?;
            for &k in chunk {
                let v = db.get(&r, &k.to_be_bytes())?;
                if v != Some(&(k ^ VALUE_MASK).to_be_bytes()[..]) {
                    bail!("a loaded key is missing");
                }
            }
        }
        Ok(t.elapsed().as_secs_f64())
    };
    f.cold_secs = lookups()?;
    f.hot_secs = lookups()?;
    let t = Instant::now();
    {
        let r = env.read_txn()?;
        let (lo_b, hi_b) = (lo.to_be_bytes(), hi.to_be_bytes());
        let range = (Bound::Included(&lo_b[..]), Bound::Excluded(&hi_b[..]));
        for e in db.range(&r, &range)? {
            let (k, v) = e?;
            let k = u64::from_be_bytes(k.try_into()?);
            if v != (k ^ VALUE_MASK).to_be_bytes() {
                bail!("a scanned value is wrong");
            }
            f.scan_keys += 1;
        }
    }
    f.scan_secs = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let per_client = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.clients)
            .map(|i| {
                let env = &env;
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
    Ok(f)
}
