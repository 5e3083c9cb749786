//! The experiment driver: a database on the embedded server (or a remote one), a session with
//! a cache policy and size, an operation run hot or cold, and the papers' measurements.
//!
//! # Hot and cold
//!
//! A *cold* run starts with an empty client cache and measures one run of the operation. A
//! *hot* run runs the operation once to warm the cache, commits, and measures the second run,
//! as both papers did ("we preload the caches by running a traversal twice and timing the
//! second run"). Each run is one transaction; `elapsed_s` excludes its commit, which is
//! reported as `commit_s` (the papers report elapsed times without commit).
//!
//! # What is measured
//!
//! Over the measured run only: fetches and their time, replacement time (freeing frames,
//! including HAC's compaction) and its usage-computation and compaction parts, conversion time (installing objects and swizzling), the
//! elapsed time, the commit time, and the counters of the cache. The same run on the native
//! baseline gives the time without a store ([`run_native`]).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thor_client::{PolicyConfig, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport, TcpTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::FileDisk;
use thor_wire::Transport;

use crate::dynamic::{DynamicConfig, mode};
use crate::error::Oo7Error;
use crate::native::NativeDb;
use crate::ops::{Op, OpResult};
use crate::params::Params;
use crate::rng::{Rng, tag};
use crate::traverse::{Db, PartOp, Trace};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workload {
    /// One OO7 operation.
    Op(Op),
    /// The dynamic traversal.
    Dynamic(DynamicConfig),
}

impl Workload {
    /// The name (the operation's, or "dynamic").
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Op(op) => op.name(),
            Workload::Dynamic(_) => "dynamic",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = Oo7Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("dynamic") {
            Ok(Workload::Dynamic(DynamicConfig::paper()))
        } else {
            Ok(Workload::Op(s.parse()?))
        }
    }
}

/// Where the server is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A server in this process, over the in-process transport.
    Embedded(Arc<Engine>),
    /// A `thor server` over TCP.
    Tcp {
        /// Its address.
        addr: String,
        /// The token it expects (empty: none).
        token: Vec<u8>,
    },
}

/// Opens the database in `dir` on an embedded server.
pub fn open_embedded(dir: &Path) -> Result<Arc<Engine>, Oo7Error> {
    Ok(open_embedded_with(dir, EngineOptions::default(), false)?.0)
}

/// Opens the database in `dir` on an embedded server with `opts` (a page cache's size and
/// placement, say), reading its files around the OS page cache with `direct_reads` (so that a
/// server page-cache miss is a device read). Returns the disk too, for its direct-read
/// counters.
pub fn open_embedded_with(
    dir: &Path,
    opts: EngineOptions,
    direct_reads: bool,
) -> Result<(Arc<Engine>, FileDisk), Oo7Error> {
    let disk = FileDisk::open_locked(dir, false, "thor oo7")?.with_direct_reads(direct_reads)?;
    let engine = Engine::open(Arc::new(disk.clone()), opts)?;
    Ok((Arc::new(engine), disk))
}

/// A new session at `endpoint`.
pub fn connect(endpoint: &Endpoint, cfg: SessionConfig) -> Result<Session, Oo7Error> {
    connect_with(endpoint, cfg, ClientConfig::default())
}

/// A new session at `endpoint` that names itself `client_name` in the server's logs.
pub fn connect_as(
    endpoint: &Endpoint,
    cfg: SessionConfig,
    client_name: &str,
) -> Result<Session, Oo7Error> {
    let c = ClientConfig { client_name: client_name.to_string(), ..ClientConfig::default() };
    connect_with(endpoint, cfg, c)
}

fn connect_with(
    endpoint: &Endpoint,
    cfg: SessionConfig,
    client: ClientConfig,
) -> Result<Session, Oo7Error> {
    let t: Box<dyn Transport> = match endpoint {
        Endpoint::Embedded(h) => Box::new(LocalTransport::connect(h.clone(), &client)?),
        Endpoint::Tcp { addr, token } => {
            let c = ClientConfig { token: token.clone(), ..client };
            Box::new(TcpTransport::connect(addr.as_str(), &c)?)
        }
    };
    Ok(Session::new(t, cfg)?)
}

/// Settings of one measured run.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// What to run.
    pub workload: Workload,
    /// The cache manager.
    pub policy: PolicyConfig,
    /// Client cache size (frames and tables).
    pub cache_bytes: usize,
    /// Warm the cache with one run first (ignored by the dynamic traversal, which has its own
    /// warm-up operations).
    pub hot: bool,
    /// Seed of the operations' random choices (T7, queries, insert).
    pub seed: u64,
    /// Free frames while fetches are on the wire (HAC) or in the foreground (HAC-FG).
    pub background_replacement: bool,
    /// Measured runs of an operation (each its own transaction, after the warm-up if hot);
    /// the report is the run with the median elapsed time.
    pub repeat: u32,
    /// Commit after every this many composite parts (0: the operation is one transaction).
    /// Intermediate commits are timed into `commit_s`, not `elapsed_s`.
    pub commit_every: u32,
    /// The session's prefetch (pages per fetch and hint).
    pub prefetch: PrefetchSetting,
}

/// A session's prefetch ([`SessionConfig::prefetch_pages`], [`SessionConfig::prefetch_hint`]);
/// the default is the session's (on over TCP, off in process). In a [`RunReport`], the
/// setting as the session applied it (`pages` is then never `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PrefetchSetting {
    /// Further pages asked for with each fetch (0: off; `None`: the session's default for its
    /// transport).
    pub pages: Option<u16>,
    /// How the server chooses them.
    #[serde(serialize_with = "hint_name")]
    pub hint: thor_wire::PrefetchHint,
    /// Whether the session reads ahead ([`SessionConfig::read_ahead`]); in a [`RunReport`],
    /// whether it could (prefetch on, with the creation-order hint).
    pub read_ahead: bool,
}

fn hint_name<S: serde::Serializer>(h: &thor_wire::PrefetchHint, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(h.name())
}

impl Default for PrefetchSetting {
    fn default() -> Self {
        let d = SessionConfig::default();
        PrefetchSetting { pages: d.prefetch_pages, hint: d.prefetch_hint, read_ahead: d.read_ahead }
    }
}

impl PrefetchSetting {
    /// No prefetch.
    pub const OFF: PrefetchSetting = PrefetchSetting {
        pages: Some(0),
        hint: thor_wire::PrefetchHint::Following,
        read_ahead: false,
    };

    /// Whether read-ahead applies: asked for, with prefetch on and the creation-order hint.
    pub fn reads_ahead(&self) -> bool {
        self.read_ahead
            && self.pages != Some(0)
            && matches!(self.hint, thor_wire::PrefetchHint::Following)
    }

    /// A label for tables: `off`, `default`, or hint and pages (`next:16`), with `+ra` when
    /// the session reads ahead (`next:32+ra`).
    pub fn label(&self) -> String {
        let ra = if self.reads_ahead() { "+ra" } else { "" };
        match self.pages {
            None => format!("default{ra}"),
            Some(0) => "off".to_string(),
            Some(n) => format!("{}:{n}{ra}", self.hint),
        }
    }
}

/// What a measured run did. Times are seconds.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The operation.
    pub traversal: String,
    /// The cache manager.
    pub policy: String,
    /// Client cache size.
    pub cache_bytes: usize,
    /// Whether the cache was warmed first.
    pub hot: bool,
    /// Pages fetched, plus the fetches the manager models beyond them (QuickStore's mapping
    /// objects, `thor_cache::paged`). With prefetch, round trips for pages: the pages that came
    /// with them are `pages_prefetched`.
    pub fetches: u64,
    /// The session's prefetch, as it applied it.
    pub prefetch: PrefetchSetting,
    /// Pages that came by prefetch with a fetch and were installed.
    pub pages_prefetched: u64,
    /// Read-aheads sent (`SessionConfig::read_ahead`; counted in `fetches` once drained), and
    /// those whose reply held the page of the miss that waited for it.
    pub reads_ahead: u64,
    pub reads_ahead_hit: u64,
    /// Prefetched pages from which an object was installed (used) during the run.
    pub prefetch_used: u64,
    /// Prefetched pages evicted before any object of theirs was installed.
    pub prefetch_evicted_unused: u64,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates applied.
    pub updates: u64,
    /// The operation's answer.
    pub result: u64,
    /// Operations run (1, or the dynamic traversal's measured operations).
    pub ops: u64,
    /// Time of the measured run, without commits.
    pub elapsed_s: f64,
    /// CPU time of the measured run (mean over repeats), on Linux; includes intermediate
    /// commits when the operation commits every N composite parts.
    pub cpu_s: Option<f64>,
    /// Time committing.
    pub commit_s: f64,
    /// Time fetching (request to installed page, including overlapped replacement).
    pub fetch_s: f64,
    /// Median latency of one fetch of the measured run, in microseconds (from the session's
    /// histogram: within 1% of the exact value; 0 without fetches).
    pub fetch_us_p50: f64,
    /// 99th percentile of the fetch latency, in microseconds (as `fetch_us_p50`).
    pub fetch_us_p99: f64,
    /// The measured run's fetch latencies, to merge with other clients' (not serialized: the
    /// percentiles above say what a reader needs).
    #[serde(skip)]
    pub fetch_latency: thor_client::LatencyHistogram,
    /// Time freeing frames.
    pub replacement_s: f64,
    /// The part of `replacement_s` computing usage and choosing victims (HAC, FPC; zero for
    /// managers that do not split their work, `thor_cache::timer`).
    pub replacement_usage_s: f64,
    /// The part of `replacement_s` compacting and evicting victims (HAC, FPC; zero for
    /// managers that do not split their work).
    pub replacement_compaction_s: f64,
    /// Time installing objects and swizzling.
    pub conversion_s: f64,
    /// Objects installed in the indirection table.
    pub objects_installed: u64,
    /// Frames freed by evicting them whole.
    pub frames_evicted: u64,
    /// Frames freed by compaction.
    pub frames_compacted: u64,
    /// Objects kept by compaction.
    pub objects_kept: u64,
    /// Indirection-table entries at the end.
    pub entries: usize,
    /// Bytes of frames and tables at the end.
    pub memory_bytes: usize,
    /// The most bytes of frames and tables the cache held during the session (sampled when it
    /// balances frames against tables); above `cache_bytes` only when the tables alone left
    /// the cache fewer than its minimum frames.
    pub memory_bytes_max: u64,
    /// Bytes of the tables at the end (indirection table, oref index, read set, manager's
    /// tables): `memory_bytes` less the usable frames.
    pub table_bytes: usize,
    /// Bytes of object versions shipped at commit.
    pub bytes_shipped: u64,
    /// Objects the cache stole to the spill file because the transaction's writes outgrew it
    /// (`thor_cache::spill`); 0 when they fit.
    pub objects_spilled: u64,
    /// Bytes of spill records written.
    pub bytes_spilled: u64,
    /// Stolen objects read back because the transaction used them again.
    pub objects_read_back: u64,
    /// Frames not retired at the end: what a page cache had to hold pages (Belady's capacity at
    /// this budget, [`belady_fetches`]).
    pub usable_frames: usize,
}

/// Counters of a session at one moment.
#[derive(Debug, Clone)]
struct Snap {
    /// The session's counters.
    client: thor_client::ClientStats,
    /// The cache's counters.
    cache: thor_cache::CacheStats,
    /// The fetch latencies so far (the measured run's are the difference of two snapshots).
    fetch_latency: thor_client::LatencyHistogram,
}

fn snap(s: &Session) -> Snap {
    Snap { client: s.stats(), cache: s.cache_stats(), fetch_latency: s.fetch_latency() }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// CPU time of the calling thread so far, from Linux's `/proc/thread-self/schedstat` (its
/// first field is nanoseconds on a CPU). `None` elsewhere. Unlike elapsed time, it does not
/// count time the thread waited for a CPU, so it is what to compare on a shared machine.
pub fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// CPU time of the whole process so far (every thread, live or ended: user plus system), from
/// Linux's `/proc/self/stat` (fields 14 and 15, in clock ticks of 1/100 s, the fixed `USER_HZ`
/// of the kernel's interface). `None` elsewhere. Resolves 10 ms, so use it over seconds.
pub fn process_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The mean of `xs` (which must not be empty). CPU time is averaged, not taken at the median:
/// kernels may account it in scheduler ticks (4 ms here), which only a sum over many runs
/// resolves.
fn mean(xs: Vec<Duration>) -> Duration {
    xs.iter().sum::<Duration>() / xs.len() as u32
}

/// Runs `cfg` at `endpoint`, reporting every object access to `trace` (with whether it is in
/// the measured run). Returns the report and the tracer.
pub fn run<T: RunTrace>(
    endpoint: &Endpoint,
    cfg: &RunConfig,
    trace: T,
) -> Result<RunReport, Oo7Error> {
    let s = connect(
        endpoint,
        SessionConfig {
            cache_bytes: cfg.cache_bytes,
            policy: cfg.policy,
            background_replacement: cfg.background_replacement,
            prefetch_pages: cfg.prefetch.pages,
            prefetch_hint: cfg.prefetch.hint,
            read_ahead: cfg.prefetch.read_ahead,
            ..SessionConfig::default()
        },
    )?;
    let report = run_in(&s, cfg, trace)?;
    let _ = s.close();
    Ok(report)
}

/// A tracer that knows whether the measured run has started.
struct Phased<T> {
    /// The caller's tracer.
    f: T,
    /// Whether the measured run has started.
    measured: bool,
}

impl<T: RunTrace> Trace for Phased<T> {
    #[inline(always)]
    fn access(&mut self, oref: Option<thor_core::Oref>) {
        self.f.access(oref, self.measured)
    }
}

/// Receives every object access of a run, with whether it belongs to the measured run.
pub trait RunTrace {
    /// Object `oref` (`None`: created by the current transaction) is about to be accessed.
    fn access(&mut self, oref: Option<thor_core::Oref>, measured: bool);
}

impl<F: FnMut(Option<thor_core::Oref>, bool)> RunTrace for F {
    #[inline(always)]
    fn access(&mut self, oref: Option<thor_core::Oref>, measured: bool) {
        self(oref, measured)
    }
}

/// No tracing. Runs whose tracer is this compile their accesses without any tracing code, so
/// time measurements see the client alone. (A closure that tests whether to trace is a branch
/// and a call on every access: on hot T1 it cost up to a factor of 3, by the luck of inlining.)
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRunTrace;

impl RunTrace for NoRunTrace {
    #[inline(always)]
    fn access(&mut self, _oref: Option<thor_core::Oref>, _measured: bool) {}
}

/// [`run`] in an existing session.
pub fn run_in<T: RunTrace>(s: &Session, cfg: &RunConfig, trace: T) -> Result<RunReport, Oo7Error> {
    let mut db = Db::with_trace(s, Phased { f: trace, measured: false })?;
    db.set_commit_every(cfg.commit_every);
    let mut rng = Rng::stream(cfg.seed, tag::RUN, u64::MAX);
    let mut result = OpResult::default();
    let (before, ops, elapsed, commit): (Snap, u64, Duration, Duration);
    match cfg.workload {
        Workload::Op(op) => {
            if cfg.hot {
                db.run(op, &mut rng)?;
                s.commit()?;
            }
            db.trace_mut().measured = true;
            let mut runs = Vec::new();
            let mut cpus = Vec::new();
            for _ in 0..cfg.repeat.max(1) {
                let b = snap(s);
                let c0 = db.intermediate_commit_time();
                let cpu0 = thread_cpu();
                let t = Instant::now();
                let r = db.run(op, &mut rng)?;
                let e = t.elapsed();
                if let (Some(a), Some(b)) = (cpu0, thread_cpu()) {
                    cpus.push(b.saturating_sub(a));
                }
                let inner = db.intermediate_commit_time() - c0;
                let e = e.saturating_sub(inner);
                let tc = Instant::now();
                s.commit()?;
                runs.push((e, tc.elapsed() + inner, b, snap(s), r));
            }
            runs.sort_by_key(|r| r.0);
            let (e, c, b, a, r) = runs.swap_remove(runs.len() / 2);
            (elapsed, commit, before, result) = (e, c, b, r);
            ops = 1;
            let mut rep = report(s, cfg, before, a, result, ops, elapsed, commit);
            rep.cpu_s = (!cpus.is_empty()).then(|| secs(mean(cpus)));
            return Ok(rep);
        }
        Workload::Dynamic(d) => {
            d.validate()?;
            if db.module_count() < 2 {
                return Err(Oo7Error::BadParams(
                    "the dynamic traversal needs a database with two modules (load with --modules 2)".into(),
                ));
            }
            let mut start = None;
            let mut commit_time = Duration::ZERO;
            let mut b = None;
            for i in 0..d.ops {
                if i == d.warmup_ops {
                    db.trace_mut().measured = true;
                    b = Some(snap(s));
                    start = Some(Instant::now());
                    commit_time = Duration::ZERO;
                }
                let (m, op, mut r) = d.op(i);
                let cp = db.random_composite(m, &mut r)?;
                let out = db.part_op(cp, PartOp::Graph(mode(op)))?;
                if i >= d.warmup_ops {
                    result += out;
                }
                let tc = Instant::now();
                s.commit()?;
                commit_time += tc.elapsed();
            }
            let total = start.map(|t| t.elapsed()).unwrap_or_default();
            elapsed = total.saturating_sub(commit_time);
            commit = commit_time;
            before = b.expect("validated: measured operations exist");
            ops = u64::from(d.ops - d.warmup_ops);
        }
    }
    Ok(report(s, cfg, before, snap(s), result, ops, elapsed, commit))
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &Session,
    cfg: &RunConfig,
    before: Snap,
    after: Snap,
    result: OpResult,
    ops: u64,
    elapsed: Duration,
    commit: Duration,
) -> RunReport {
    let fetch_latency = after.fetch_latency.since(&before.fetch_latency);
    RunReport {
        traversal: cfg.workload.name().to_string(),
        // The configuration, not just the manager's name: two splits of GOM (or two HAC
        // settings) in one sweep are two series.
        policy: cfg.policy.to_string(),
        cache_bytes: cfg.cache_bytes,
        hot: cfg.hot,
        fetches: after.client.fetches - before.client.fetches
            + (after.cache.replacement.extra_fetches - before.cache.replacement.extra_fetches),
        prefetch: {
            let (pages, hint) = s.prefetch();
            let read_ahead = cfg.prefetch.read_ahead;
            PrefetchSetting { pages: Some(pages), hint, read_ahead }
        },
        pages_prefetched: after.client.pages_prefetched - before.client.pages_prefetched,
        reads_ahead: after.client.reads_ahead - before.client.reads_ahead,
        reads_ahead_hit: after.client.reads_ahead_hit - before.client.reads_ahead_hit,
        prefetch_used: after.cache.core.prefetched_used - before.cache.core.prefetched_used,
        prefetch_evicted_unused: after.cache.core.prefetched_unused
            - before.cache.core.prefetched_unused,
        parts_visited: result.parts_visited,
        updates: result.updates,
        result: result.result,
        ops,
        elapsed_s: secs(elapsed),
        cpu_s: None,
        commit_s: secs(commit),
        fetch_s: secs(after.client.fetch_time.saturating_sub(before.client.fetch_time)),
        fetch_us_p50: secs(fetch_latency.percentile(0.5)) * 1e6,
        fetch_us_p99: secs(fetch_latency.percentile(0.99)) * 1e6,
        fetch_latency,
        replacement_s: secs(
            after.cache.replacement_time.saturating_sub(before.cache.replacement_time),
        ),
        replacement_usage_s: secs(after.cache.usage_time.saturating_sub(before.cache.usage_time)),
        replacement_compaction_s: secs(
            after.cache.compaction_time.saturating_sub(before.cache.compaction_time),
        ),
        conversion_s: secs(
            after.client.conversion_time.saturating_sub(before.client.conversion_time),
        ),
        objects_installed: after.cache.core.objects_installed - before.cache.core.objects_installed,
        frames_evicted: after.cache.replacement.frames_evicted
            - before.cache.replacement.frames_evicted,
        frames_compacted: after.cache.replacement.frames_compacted
            - before.cache.replacement.frames_compacted,
        objects_kept: after.cache.replacement.objects_kept - before.cache.replacement.objects_kept,
        entries: after.cache.entries,
        memory_bytes: after.cache.memory_bytes,
        memory_bytes_max: after.cache.core.memory_bytes_max,
        table_bytes: after
            .cache
            .memory_bytes
            .saturating_sub(after.cache.usable_frames * s.server().page_size),
        bytes_shipped: after.client.bytes_shipped - before.client.bytes_shipped,
        objects_spilled: after.cache.spill.objects_spilled - before.cache.spill.objects_spilled,
        bytes_spilled: after.cache.spill.bytes_spilled - before.cache.spill.bytes_spilled,
        objects_read_back: after.cache.spill.objects_read_back
            - before.cache.spill.objects_read_back,
        usable_frames: after.cache.usable_frames,
    }
}

/// The page reference string of a run's measured part, for Belady's optimum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageString {
    /// The page of every object access of the measured run, consecutive repeats collapsed
    /// (what the paged managers count as references, and what changes no page cache's misses).
    pub refs: Vec<u64>,
    /// Pages accessed before the measured run began (opening the database; a hot run's warm-up):
    /// they may be cached when it starts. Sorted.
    pub before: Vec<u64>,
}

/// A cache big enough to keep every page opening a database reads (schema, roots, parameters).
const OPEN_CACHE_BYTES: usize = 64 << 20;

/// The page string of `cfg`'s run. The traversal's accesses do not depend on the cache, so one
/// recording serves every policy and size. At most [`crate::limits::PAGE_STRING_MAX`]
/// references.
pub fn page_string(endpoint: &Endpoint, cfg: &RunConfig) -> Result<PageString, Oo7Error> {
    let mut refs: Vec<u64> = Vec::new();
    let mut before: rustc_hash::FxHashSet<u64> = Default::default();
    let mut overflow = false;
    run(endpoint, cfg, |oref: Option<thor_core::Oref>, measured: bool| {
        let Some(o) = oref else { return };
        let page = u64::from(o.page_raw());
        if !measured {
            if before.len() < crate::limits::PAGE_STRING_MAX {
                before.insert(page);
            } else {
                overflow = true;
            }
        } else if refs.last() != Some(&page) {
            if refs.len() < crate::limits::PAGE_STRING_MAX {
                refs.push(page);
            } else {
                overflow = true;
            }
        }
    })?;
    if overflow {
        return Err(Oo7Error::BadParams(format!(
            "the run visits more than {} pages: too long a page string to record",
            crate::limits::PAGE_STRING_MAX
        )));
    }
    // Opening the database reads the schema and the roots without tracing them: the pages it
    // fetches are cached when any run starts. Open it again in a cache large enough to keep
    // them all, and ask.
    let s = connect(
        endpoint,
        SessionConfig {
            cache_bytes: cfg.cache_bytes.max(OPEN_CACHE_BYTES),
            policy: PolicyConfig::Fpc,
            ..SessionConfig::default()
        },
    )?;
    drop(Db::open(&s)?);
    for &p in &refs {
        if let Some(page) = u32::try_from(p).ok().and_then(thor_core::PageId::new)
            && s.has_page(page)
        {
            before.insert(p);
        }
    }
    let _ = s.close();
    let mut before: Vec<u64> = before.into_iter().collect();
    before.sort_unstable();
    Ok(PageString { refs, before })
}

/// Belady's optimal page replacement on `s` with `frames` frames: a floor under the fetches of
/// any page cache of that many frames whose run starts holding pages accessed before the
/// measured run (`thor_policy::belady::min_misses_from`). For a hot run, whose warm-up accessed
/// every page the measured run does, it is exact: the optimum from the best warm start.
pub fn belady_fetches(s: &PageString, frames: usize) -> u64 {
    thor_policy::belady::min_misses_from(&s.refs, frames, |p| s.before.binary_search(&p).is_ok())
}

/// What a native run did.
#[derive(Debug, Clone, Serialize)]
pub struct NativeReport {
    /// The operation.
    pub traversal: String,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates applied.
    pub updates: u64,
    /// The operation's answer.
    pub result: u64,
    /// Operations run.
    pub ops: u64,
    /// Time of the measured run.
    pub elapsed_s: f64,
    /// CPU time of the measured run (mean over repeats), on Linux.
    pub cpu_s: Option<f64>,
    /// Time to build the graph.
    pub generate_s: f64,
}

/// Runs `workload` on the native baseline built from `params`, hot (the second run is timed,
/// like a hot thor run; the native graph has no cache to warm, but the processor's caches do).
/// `repeat` runs are measured and the median reported.
pub fn run_native(
    params: &Params,
    workload: Workload,
    seed: u64,
    repeat: u32,
) -> Result<NativeReport, Oo7Error> {
    let t = Instant::now();
    let mut db = NativeDb::generate(params, |_| {})?;
    let generate_s = secs(t.elapsed());
    run_native_on(&mut db, workload, seed, repeat, generate_s)
}

/// [`run_native`] on an existing graph.
pub fn run_native_on(
    db: &mut NativeDb,
    workload: Workload,
    seed: u64,
    repeat: u32,
    generate_s: f64,
) -> Result<NativeReport, Oo7Error> {
    let mut rng = Rng::stream(seed, tag::RUN, u64::MAX);
    let mut result = OpResult::default();
    let mut cpus = Vec::new();
    let elapsed;
    let ops;
    match workload {
        Workload::Op(op) => {
            db.run(op, &mut rng)?;
            let mut runs = Vec::new();
            for _ in 0..repeat.max(1) {
                let cpu0 = thread_cpu();
                let t = Instant::now();
                let r = db.run(op, &mut rng)?;
                let e = t.elapsed();
                if let (Some(a), Some(b)) = (cpu0, thread_cpu()) {
                    cpus.push(b.saturating_sub(a));
                }
                runs.push((e, r));
            }
            runs.sort_by_key(|r| r.0);
            (elapsed, result) = runs[runs.len() / 2];
            ops = 1;
        }
        Workload::Dynamic(d) => {
            d.validate()?;
            if db.modules.len() < 2 {
                return Err(Oo7Error::BadParams("the dynamic traversal needs two modules".into()));
            }
            let mut start = Instant::now();
            for i in 0..d.ops {
                if i == d.warmup_ops {
                    start = Instant::now();
                }
                let (m, op, mut r) = d.op(i);
                let cp = db.random_composite(m, &mut r);
                let out = db.part_op(cp, PartOp::Graph(mode(op)));
                if i >= d.warmup_ops {
                    result += out;
                }
            }
            elapsed = start.elapsed();
            ops = u64::from(d.ops - d.warmup_ops);
        }
    }
    Ok(NativeReport {
        traversal: workload.name().to_string(),
        parts_visited: result.parts_visited,
        updates: result.updates,
        result: result.result,
        ops,
        elapsed_s: secs(elapsed),
        cpu_s: (!cpus.is_empty()).then(|| secs(mean(cpus))),
        generate_s,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn process_cpu_counts_threads_that_ended() {
        let (Some(before), Some(_)) = (super::process_cpu(), super::thread_cpu()) else { return };
        std::thread::spawn(|| {
            // Spin for 50 ms of this thread's own CPU time, however busy the machine is.
            let start = super::thread_cpu().unwrap();
            let mut x = 0u64;
            while super::thread_cpu().unwrap() - start < std::time::Duration::from_millis(50) {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
        })
        .join()
        .unwrap();
        let after = super::process_cpu().unwrap();
        assert!(after >= before + std::time::Duration::from_millis(20), "{before:?} -> {after:?}");
    }
}
