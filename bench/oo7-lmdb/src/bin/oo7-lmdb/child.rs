//! The measured runs, each in a process of its own, and how the parent starts them.
//!
//! A cold run is the first traversal of a fresh process after it opened (mapped) the
//! environment: the map has no page-table entries yet, so every page the traversal touches is
//! at least a minor fault, and with the OS page cache warm at most that. The process then runs
//! the traversal again, hot, in the same environment. Each child prints one JSON object on
//! standard output; the parent reads it from a file (so a chatty child can never block on a
//! full pipe) and waits with a deadline.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use heed::Env;
use oo7_lmdb::cgroup::MemoryCgroup;
use oo7_lmdb::limits::CHILD_OUTPUT_MAX;
use oo7_lmdb::store::{self, Db, EnvConfig};
use oo7_lmdb::sys::{self, Exit, IoCounters, Resident, Usage};
use oo7_lmdb::traverse::Traverser;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use thor_oo7::Op;
use thor_oo7::experiment::{
    Endpoint, NoRunTrace, RunConfig, Workload, connect, open_embedded_with, run_in,
};

/// One measured traversal over LMDB.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Sample {
    /// Elapsed time: the read transaction's begin, the traversal and the transaction's end.
    pub elapsed_s: f64,
    /// CPU time of the thread over the same span.
    pub cpu_s: Option<f64>,
    /// Minor page faults in the span.
    pub minflt: u64,
    /// Major page faults in the span.
    pub majflt: u64,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates applied.
    pub updates: u64,
    /// The operation's answer.
    pub result: u64,
}

/// Runs `op` once in a read transaction and measures it.
pub fn timed(env: &Env, db: &Db<'_>, t: &mut Traverser, op: Op) -> Result<Sample> {
    let u0 = sys::usage_self();
    let c0 = sys::thread_cpu();
    let start = Instant::now();
    let mut txn = env.read_txn()?;
    let r = t.run(db, &mut txn, op)?;
    drop(txn);
    let elapsed = start.elapsed();
    let c1 = sys::thread_cpu();
    let u1 = sys::usage_self();
    Ok(Sample {
        elapsed_s: elapsed.as_secs_f64(),
        cpu_s: c0.zip(c1).map(|(a, b)| b.saturating_sub(a).as_secs_f64()),
        minflt: u1.minflt - u0.minflt,
        majflt: u1.majflt - u0.majflt,
        parts_visited: r.parts_visited,
        updates: r.updates,
        result: r.result,
    })
}

/// What `child-run` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOut {
    /// The first traversal after opening the environment.
    pub cold: Sample,
    /// The repeats that follow it in the same environment.
    pub hot: Vec<Sample>,
}

/// `child-run`: open the environment, run `op` cold, then `hot` times more.
pub fn child_run(dir: &Path, op: Op, hot: u32) -> Result<RunOut> {
    let env = store::open_env(dir, EnvConfig::READ_ONLY)?;
    let db = store::open_db(&env)?;
    let meta = store::meta(&env, &db)?;
    let mut t = Traverser::new(&meta);
    let cold = timed(&env, &db, &mut t, op)?;
    let hot = (0..hot).map(|_| timed(&env, &db, &mut t, op)).collect::<Result<_>>()?;
    Ok(RunOut { cold, hot })
}

/// What `child-t2b` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct T2bOut {
    /// The traversal with its updates, in the write transaction, before the commit.
    pub traverse_s: f64,
    /// The commit: LMDB writes the transaction's dirty pages and the meta page, with an
    /// `fdatasync` after each.
    pub commit_s: f64,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates applied.
    pub updates: u64,
    /// I/O counters over the commit.
    pub commit_io: IoCounters,
    /// The data file's size before the transaction.
    pub file_bytes_before: u64,
    /// The data file's size after the commit.
    pub file_bytes_after: u64,
}

/// `child-t2b`: T2b as one write transaction on the environment in `dir` (a fresh copy).
pub fn child_t2b(dir: &Path) -> Result<T2bOut> {
    let file = dir.join(store::DATA_FILE);
    let size = || -> Result<u64> { Ok(std::fs::metadata(&file)?.len()) };
    let file_bytes_before = size()?;
    let env = store::open_env(dir, EnvConfig::WRITABLE)?;
    let db = store::open_db(&env)?;
    let meta = store::meta(&env, &db)?;
    let mut t = Traverser::new(&meta);
    let start = Instant::now();
    let mut w = env.write_txn()?;
    let r = t.run(&db, &mut w, Op::T2b)?;
    let traverse_s = start.elapsed().as_secs_f64();
    let io0 = IoCounters::now();
    let c = Instant::now();
    w.commit()?;
    let commit_s = c.elapsed().as_secs_f64();
    let commit_io = IoCounters::now().since(&io0);
    drop(env);
    Ok(T2bOut {
        traverse_s,
        commit_s,
        parts_visited: r.parts_visited,
        updates: r.updates,
        commit_io,
        file_bytes_before,
        file_bytes_after: size()?,
    })
}

/// What a footprint probe prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeOut {
    /// The warm-up run's elapsed time.
    pub warmup_s: f64,
    /// Its major faults (the database comes in from the disk here).
    pub warmup_majflt: u64,
    /// Fetches of the warm-up (thor only).
    pub warmup_fetches: Option<u64>,
    /// Elapsed time of each hot run.
    pub hot_s: Vec<f64>,
    /// Major faults over all hot runs: the probe passes with none.
    pub hot_majflt: u64,
    /// Fetches over all hot runs (thor only): the probe passes with none.
    pub hot_fetches: Option<u64>,
    /// The process's resident memory after the hot runs.
    pub resident: Resident,
}

/// `child-probe` over LMDB: a warm-up run of `op`, then `hot` runs that must not fault.
pub fn child_probe_lmdb(dir: &Path, op: Op, hot: u32, readahead: bool) -> Result<ProbeOut> {
    let env = store::open_env(dir, EnvConfig { readahead, ..EnvConfig::READ_ONLY })?;
    let db = store::open_db(&env)?;
    let meta = store::meta(&env, &db)?;
    let mut t = Traverser::new(&meta);
    let w = timed(&env, &db, &mut t, op)?;
    let runs = (0..hot).map(|_| timed(&env, &db, &mut t, op)).collect::<Result<Vec<_>>>()?;
    Ok(ProbeOut {
        warmup_s: w.elapsed_s,
        warmup_majflt: w.majflt,
        warmup_fetches: None,
        hot_s: runs.iter().map(|s| s.elapsed_s).collect(),
        hot_majflt: runs.iter().map(|s| s.majflt).sum(),
        hot_fetches: None,
        resident: Resident::now(),
    })
}

/// Settings of thor's side of a footprint probe.
#[derive(Debug, Clone, Copy)]
pub struct ThorProbe {
    /// The client cache budget (frames and tables).
    pub cache_bytes: usize,
    /// The client cache manager.
    pub policy: thor_client::PolicyConfig,
    /// The embedded server's page cache budget.
    pub server_cache_bytes: usize,
}

/// `child-probe-thor`: thor's `thor oo7 run --hot`, in this process so that major faults are
/// counted over the hot runs alone: the database on an embedded server, one session, a
/// warm-up run of `op`, then `hot` runs that must neither fetch nor fault.
pub fn child_probe_thor(dir: &Path, op: Op, hot: u32, p: ThorProbe) -> Result<ProbeOut> {
    let opts = thor_server::EngineOptions {
        page_cache_bytes: p.server_cache_bytes,
        ..thor_server::EngineOptions::default()
    };
    let (engine, _disk) = open_embedded_with(dir, opts, false)?;
    let endpoint = Endpoint::Embedded(engine);
    let s = connect(
        &endpoint,
        thor_client::SessionConfig {
            cache_bytes: p.cache_bytes,
            policy: p.policy,
            background_replacement: true,
            ..thor_client::SessionConfig::default()
        },
    )?;
    // Each `run_in` is one measured run in this session (the cache stays warm between them),
    // as `thor oo7 run --hot` runs the warm-up and the measured run in one session.
    let cfg = RunConfig {
        workload: Workload::Op(op),
        policy: p.policy,
        cache_bytes: p.cache_bytes,
        hot: false,
        seed: 1,
        background_replacement: true,
        repeat: 1,
        commit_every: 0,
        // In process the session does not prefetch by default.
        prefetch: thor_oo7::experiment::PrefetchSetting::default(),
    };
    let u0 = sys::usage_self();
    let w = run_in(&s, &cfg, NoRunTrace)?;
    let u1 = sys::usage_self();
    let mut hot_s = Vec::new();
    let mut hot_fetches = 0;
    for _ in 0..hot {
        let r = run_in(&s, &cfg, NoRunTrace)?;
        hot_s.push(r.elapsed_s);
        hot_fetches += r.fetches;
    }
    let u2 = sys::usage_self();
    let resident = Resident::now();
    let _ = s.close();
    Ok(ProbeOut {
        warmup_s: w.elapsed_s,
        warmup_majflt: u1.majflt - u0.majflt,
        warmup_fetches: Some(w.fetches),
        hot_s,
        hot_majflt: u2.majflt - u1.majflt,
        hot_fetches: Some(hot_fetches),
        resident,
    })
}

/// How a child ended, with its output.
#[derive(Debug)]
pub struct Ended<T> {
    /// Its exit.
    pub exit: Exit,
    /// Its resource usage.
    pub usage: Usage,
    /// Its JSON report, if it exited 0 and printed one.
    pub out: Option<T>,
    /// The last lines of its standard error (what went wrong, if anything).
    pub stderr_tail: String,
    /// Elapsed time of the whole process.
    pub wall_s: f64,
}

fn read_bounded(f: &mut File) -> Result<String> {
    f.rewind()?;
    let mut s = String::new();
    f.take(CHILD_OUTPUT_MAX as u64).read_to_string(&mut s)?;
    Ok(s)
}

/// Runs `cmd` (in `cgroup` if given) to completion or `timeout`, and parses its JSON output.
pub fn spawn<T: DeserializeOwned>(
    mut cmd: Command,
    cgroup: Option<&MemoryCgroup>,
    timeout: Duration,
) -> Result<Ended<T>> {
    let mut out = tempfile::tempfile().context("a temporary file for a child's output")?;
    let mut err = tempfile::tempfile().context("a temporary file for a child's errors")?;
    cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(err.try_clone()?);
    if let Some(cg) = cgroup {
        cg.enter_on_spawn(&mut cmd);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let (exit, usage) = sys::wait_with_usage(&mut child, timeout)?;
    let wall_s = start.elapsed().as_secs_f64();
    let stdout = read_bounded(&mut out)?;
    let stderr = read_bounded(&mut err)?;
    let lines: Vec<&str> = stderr.lines().collect();
    let stderr_tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    let parsed = if exit == Exit::Code(0) {
        Some(serde_json::from_str(&stdout).with_context(|| {
            format!("the output of {cmd:?} is not the expected JSON: {stdout:.300}")
        })?)
    } else {
        None
    };
    Ok(Ended { exit, usage, out: parsed, stderr_tail, wall_s })
}

/// [`spawn`], requiring success.
pub fn spawn_ok<T: DeserializeOwned>(cmd: Command, timeout: Duration) -> Result<(T, Usage)> {
    let what = format!("{cmd:?}");
    let e = spawn::<T>(cmd, None, timeout)?;
    match (e.exit, e.out) {
        (Exit::Code(0), Some(out)) => Ok((out, e.usage)),
        (exit, _) => bail!("{what} failed ({exit:?}): {}", e.stderr_tail),
    }
}
