//! Several clients running an OO7 traversal at once, each on its own module or all on one.
//!
//! # The run
//!
//! ```text
//!   setup session: read the database's module count, check the mode can be run
//!   client i (one thread, one session, one connection each):
//!       connect, open the database
//!       warm-up: one cold traversal, committed (retried on conflicts)   ── not measured
//!       ───────────── gate: every client has warmed up; the clock starts ─────────────
//!       until the deadline (--seconds) or for R traversals (--repeat):
//!           traverse module m(i), commit; on a conflict abort, back off, run it again
//!       close
//! ```
//!
//! In *private* mode client `i` traverses module `i`; in *shared* mode every client traverses
//! module 0. A traversal walks one module's assembly tree and works on the private composite
//! parts of its base assemblies ([`Db::run_on_module`]); OO7 draws those from the base
//! assembly's own module, so private clients read and write disjoint objects, and only the
//! objects every session reads when it opens the database (the root, the parameters, the module
//! list, the schema) are common to them, and never written. Shared writers conflict.
//!
//! Each traversal is one transaction. The update traversals change every object they update
//! each time (T2 increments x and y, T3 steps the build date back and forth, T5 swaps two
//! words), nothing is restored between runs, and repeating them is what OO7's own repeated
//! runs do. T3 also updates the build-date index, one B+-tree shared by all modules, so T3
//! clients conflict on its nodes even in private mode.
//!
//! # Conflicts
//!
//! Under optimistic concurrency control the server may refuse a commit (or, once the client
//! applies invalidations, an access may find that the transaction read a stale object); the
//! transaction then had no effect. The client aborts it, sleeps for a jittered, exponentially
//! growing and bounded time ([`Backoff`]) and runs the traversal again from the start, counting
//! an abort. A traversal refused [`CONFLICTS_IN_A_ROW_MAX`] times in a row fails the run
//! ([`Oo7Error::Conflicts`]) rather than spinning for ever; in a timed run a client stops
//! retrying at the deadline.
//!
//! # What is measured
//!
//! Per client, over the timed phase only: traversals completed (committed), commits, aborts
//! (refused attempts), pages fetched, atomic parts visited, updates, commit time, and the time
//! from the common start to the end of the client's last traversal; traversals per second is
//! the ratio. In a timed run the traversal running at the deadline is finished and counted.
//! The total sums the counts; its rate is total traversals over the longest client's time, the
//! window in which all of them were done. The cold warm-up is reported apart (its time and
//! aborts) and counts in nothing else.
//!
//! With [`MultiConfig::record_pages`] the run also records every client's page visits (a
//! visit is an access to an object on a page other than the one the client's previous access
//! was on: repeating a visit changes nothing in an LRU cache) in one global order, the order in
//! which the clients' threads made them ([`PageTrace`]). Written as a `client,block` CSV it is
//! what `thor sim` replays, so the simulator can be run on the request streams the live clients
//! issued ([`PageTrace::write_csv`]). The visits the clients made before the gate are counted
//! apart ([`PageTrace::warmup`]): they warm the caches in the simulator too.
//!
//! On a machine shared with other work, elapsed time says little about the store; CPU time
//! says more. On Linux each client reports its thread's CPU time over the timed phase, and the
//! total the whole process's (the clients, and the server too when it runs in this process)
//! from the common start until every client is done, with the cores that makes busy on average.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use thor_client::{ClientError, PolicyConfig, Session, SessionConfig};

use crate::error::Oo7Error;
use crate::experiment::{Endpoint, connect_as, process_cpu, thread_cpu};
use crate::limits::{
    BACKOFF_MAX_US, BACKOFF_MIN_US, CLIENTS_MAX, CONFLICTS_IN_A_ROW_MAX, PAGE_STRING_MAX,
};
use crate::ops::{Op, OpResult};
use crate::rng::{Rng, tag};
use crate::traverse::{Db, Trace};

/// Whether a failed attempt is a concurrency-control conflict (abort and run it again) rather
/// than an error. The one place that knows how the client library reports conflicts.
fn is_conflict(e: &ClientError) -> bool {
    e.is_conflict()
}

/// Which module each client traverses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// Client `i` on module `i`: no object in common.
    Private,
    /// Every client on module 0.
    Shared,
}

impl Sharing {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Sharing::Private => "private",
            Sharing::Shared => "shared",
        }
    }

    /// The module client `client` traverses.
    pub fn module_of(self, client: usize) -> usize {
        match self {
            Sharing::Private => client,
            Sharing::Shared => 0,
        }
    }
}

impl std::str::FromStr for Sharing {
    type Err = Oo7Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "private" => Ok(Sharing::Private),
            "shared" => Ok(Sharing::Shared),
            _ => {
                Err(Oo7Error::BadParams(format!("unknown mode {s:?} (expected private or shared)")))
            }
        }
    }
}

/// How long the timed phase lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    /// Every client traverses until this many seconds have passed since the common start.
    Seconds(f64),
    /// Every client completes this many traversals.
    Repeat(u32),
}

/// Settings of a multi-client run.
#[derive(Debug, Clone, Copy)]
pub struct MultiConfig {
    /// The traversal (one that [`Op::walks_modules`]).
    pub op: Op,
    /// Clients, each a thread with its own session and connection.
    pub clients: usize,
    /// Which module each client traverses.
    pub sharing: Sharing,
    /// How long the timed phase lasts.
    pub length: Length,
    /// Each client's cache manager.
    pub policy: PolicyConfig,
    /// Each client's cache size (frames and tables).
    pub cache_bytes: usize,
    /// Free frames while fetches are on the wire (HAC) or in the foreground (HAC-FG).
    pub background_replacement: bool,
    /// Seed of the backoff's jitter (client `i` draws from stream `i`).
    pub seed: u64,
    /// Record the clients' page visits ([`MultiReport::page_trace`]).
    pub record_pages: bool,
    /// Each client's recovery buffer and page images, used when the server runs a page-based
    /// commit mode (issue 14's study, `thor oo7 recovery-study`).
    pub recovery: thor_client::RecoveryConfig,
    /// Each client's prefetch ([`crate::experiment::PrefetchSetting::OFF`] for fetch counts
    /// of one page per fetch, as a simulator replaying the recorded visits counts them).
    pub prefetch: crate::experiment::PrefetchSetting,
}

impl MultiConfig {
    /// Checks the settings that do not depend on the database.
    pub fn validate(&self) -> Result<(), Oo7Error> {
        if !self.op.walks_modules() {
            let ok: Vec<&str> =
                Op::ALL.iter().filter(|o| o.walks_modules()).map(|o| o.name()).collect();
            return Err(Oo7Error::BadParams(format!(
                "{} does not walk a module's assembly tree; a multi-client run takes {}",
                self.op.name(),
                ok.join(", ")
            )));
        }
        if self.clients == 0 || self.clients > CLIENTS_MAX {
            return Err(Oo7Error::BadParams(format!(
                "{} clients: a run takes 1 to {CLIENTS_MAX}",
                self.clients
            )));
        }
        match self.length {
            Length::Seconds(s) if !(s.is_finite() && s > 0.0) => {
                Err(Oo7Error::BadParams(format!("{s} seconds: the run needs a positive time")))
            }
            Length::Repeat(0) => Err(Oo7Error::BadParams("0 traversals per client".into())),
            _ => Ok(()),
        }
    }
}

/// Checks that a database with `modules` modules can run `clients` clients in mode `sharing`.
pub fn check_modules(modules: usize, clients: usize, sharing: Sharing) -> Result<(), Oo7Error> {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match sharing {
        Sharing::Private if modules < clients => Err(Oo7Error::BadParams(format!(
            "the database has {modules} module{}; private mode with {clients} clients needs \
             {clients}: load it with --modules {clients}",
            plural(modules)
        ))),
        _ if modules == 0 => Err(Oo7Error::NotOo7("the database has no module".into())),
        _ => Ok(()),
    }
}

/// The number of modules of the database at `endpoint` (one short session).
pub fn database_modules(endpoint: &Endpoint) -> Result<usize, Oo7Error> {
    let s = connect_as(endpoint, SessionConfig::default(), "oo7 multi setup")?;
    let n = Db::open(&s)?.module_count();
    let _ = s.close();
    Ok(n)
}

/// What one client did in the timed phase (and, apart, in its warm-up).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientReport {
    /// The client (0-based).
    pub client: usize,
    /// The module it traversed (0-based, in the root's module list).
    pub module: usize,
    /// Traversals completed (each committed).
    pub traversals: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Attempts refused for conflicts (each aborted and run again).
    pub aborts: u64,
    /// Seconds from the common start to the end of the client's last traversal.
    pub elapsed_s: f64,
    /// `traversals / elapsed_s`.
    pub traversals_per_s: f64,
    /// Pages fetched.
    pub fetches: u64,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Updates applied (by committed traversals).
    pub updates: u64,
    /// Seconds committing (successful and refused commits).
    pub commit_s: f64,
    /// CPU seconds of the client's thread over the timed phase (Linux only).
    pub cpu_s: Option<f64>,
    /// Seconds the cold warm-up traversal took, retries included.
    pub warmup_s: f64,
    /// Conflicts of the warm-up traversal.
    pub warmup_aborts: u64,
    /// Page frames the client's cache had when the timed phase started (its budget less its
    /// tables; the tables only grow, so this is the most it had in the timed phase).
    pub frames_start: usize,
    /// Page frames the client's cache had at the end (the fewest in the timed phase).
    pub frames: usize,
    /// Demoted pages whose bytes the client sent its server in the timed phase.
    pub demoted_pages: u64,
    /// Bytes the client's commits shipped in the timed phase (objects, or page records and
    /// pages in a page-based commit mode).
    pub bytes_shipped: u64,
    /// Page records sent in the timed phase (page-based commit modes).
    pub page_records: u64,
    /// Of those, the ones sent before commit because the recovery buffer was full.
    pub page_records_early: u64,
    /// Bytes of those page records.
    pub page_record_bytes: u64,
    /// Dirty pages shipped whole in the timed phase (ESM modes, WPL).
    pub pages_shipped: u64,
    /// Dirty pages stolen before their commit in the timed phase (page-based commit modes:
    /// the client's page images were full; ESM and WPL also count them in `pages_shipped`).
    pub pages_stolen: u64,
}

/// The sums over all clients.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Traversals completed.
    pub traversals: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Attempts refused for conflicts.
    pub aborts: u64,
    /// The longest client's time.
    pub elapsed_s: f64,
    /// `traversals / elapsed_s`.
    pub traversals_per_s: f64,
    /// `aborts / (commits + aborts)`.
    pub abort_rate: f64,
    /// Pages fetched.
    pub fetches: u64,
    /// CPU seconds of the client threads (Linux only).
    pub client_cpu_s: Option<f64>,
    /// CPU seconds of the whole process over the timed phase: the clients, and the server
    /// when it runs in this process (Linux only; resolves 10 ms).
    pub process_cpu_s: Option<f64>,
    /// `process_cpu_s / elapsed_s`: cores busy on average.
    pub cores_busy: Option<f64>,
}

impl Totals {
    /// The sums of `clients`.
    pub fn of(clients: &[ClientReport]) -> Totals {
        let mut t =
            Totals { client_cpu_s: clients.iter().map(|c| c.cpu_s).sum(), ..Totals::default() };
        for c in clients {
            t.traversals += c.traversals;
            t.commits += c.commits;
            t.aborts += c.aborts;
            t.fetches += c.fetches;
            t.elapsed_s = t.elapsed_s.max(c.elapsed_s);
        }
        t.traversals_per_s = rate(t.traversals, t.elapsed_s);
        let attempts = t.commits + t.aborts;
        t.abort_rate = if attempts == 0 { 0.0 } else { t.aborts as f64 / attempts as f64 };
        t
    }
}

/// `n / secs`, 0 for no time.
fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// What a multi-client run did.
#[derive(Debug, Clone, Serialize)]
pub struct MultiReport {
    /// The traversal.
    pub traversal: String,
    /// `private` or `shared`.
    pub mode: Sharing,
    /// Clients.
    pub clients: usize,
    /// Each client's cache manager.
    pub policy: String,
    /// Each client's cache size.
    pub cache_bytes: usize,
    /// The timed phase's length in seconds, for a timed run.
    pub seconds: Option<f64>,
    /// Traversals per client, for a counted run.
    pub repeat: Option<u32>,
    /// Whether each client's cold first traversal is excluded (always: see the module
    /// documentation).
    pub warmup_excluded: bool,
    /// Modules in the database.
    pub modules: usize,
    /// Per client, in client order.
    pub per_client: Vec<ClientReport>,
    /// The sums.
    pub total: Totals,
    /// The clients' page visits, when recorded ([`MultiConfig::record_pages`]).
    #[serde(skip)]
    pub page_trace: Option<PageTrace>,
}

/// The page visits of a recorded run, all clients, in the order they were made.
#[derive(Debug, Clone, Default)]
pub struct PageTrace {
    /// `(client, page)`, in global order.
    pub visits: Vec<(u16, u32)>,
    /// Visits made before every client reached the gate (the warm-ups): these come first.
    pub warmup: u64,
}

impl PageTrace {
    /// Writes the visits as the `client,block` CSV that `thor sim --trace` reads, with comment
    /// lines naming the run (`about`, one line each) and the warm-up count.
    pub fn write_csv(&self, out: &mut dyn std::io::Write, about: &[String]) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
        writeln!(w, "# thor-cachesim block trace v1")?;
        for line in about {
            writeln!(w, "# {line}")?;
        }
        writeln!(
            w,
            "# warm-up visits (before every client's cold traversal ended): {}",
            self.warmup
        )?;
        writeln!(w, "client,block")?;
        for &(c, p) in &self.visits {
            writeln!(w, "{c},{p}")?;
        }
        w.flush()
    }
}

/// Records one client's page visits with their global order, shared by all clients through
/// [`Shared::visits`]: a run records at most [`PAGE_STRING_MAX`] visits in all.
struct PageRecorder<'a> {
    /// The run.
    shared: &'a Shared,
    /// The page of the client's previous access.
    last: Option<u32>,
    /// `(global order, page)`.
    visits: Vec<(u64, u32)>,
}

impl Trace for PageRecorder<'_> {
    #[inline]
    fn access(&mut self, oref: Option<thor_core::Oref>) {
        let Some(o) = oref else { return };
        let page = o.page_raw();
        if self.last == Some(page) {
            return;
        }
        self.last = Some(page);
        let seq = self.shared.visits.fetch_add(1, Ordering::Relaxed);
        if seq < PAGE_STRING_MAX as u64 {
            self.visits.push((seq, page));
        }
    }
}

/// Merges the clients' visits into one [`PageTrace`], or says that the run made too many.
fn merge_visits(per_client: Vec<Vec<(u64, u32)>>, gate: u64) -> Result<PageTrace, Oo7Error> {
    let total: usize = per_client.iter().map(Vec::len).sum();
    if total >= PAGE_STRING_MAX {
        return Err(Oo7Error::BadParams(format!(
            "the run visited more than {PAGE_STRING_MAX} pages: too long to record; run fewer \
             traversals (--repeat)"
        )));
    }
    let mut all: Vec<(u64, u16, u32)> = Vec::with_capacity(total);
    for (c, v) in per_client.into_iter().enumerate() {
        // Clients are at most CLIENTS_MAX (64), so the number fits.
        all.extend(v.into_iter().map(|(seq, p)| (seq, c as u16, p)));
    }
    all.sort_unstable_by_key(|v| v.0);
    let warmup = all.iter().take_while(|v| v.0 < gate).count() as u64;
    Ok(PageTrace { visits: all.into_iter().map(|(_, c, p)| (c, p)).collect(), warmup })
}

/// A snapshot of a run in progress, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Clients in the run.
    pub clients: usize,
    /// Clients done with their warm-up.
    pub warmed: usize,
    /// Timed traversals completed so far, all clients.
    pub traversals: u64,
    /// Conflicts so far (warm-up included), all clients.
    pub aborts: u64,
    /// Time since the common start, once every client has warmed up.
    pub timed: Option<Duration>,
}

/// The exponential backoff after a conflict: the `k`-th retry in a row sleeps a uniformly
/// random time in `[b/2, b)` with `b = min(BACKOFF_MIN_US * 2^k, BACKOFF_MAX_US)`. The jitter
/// keeps clients that conflicted with each other from retrying in step; the bound keeps a
/// client that lost many times in a row from sleeping through the run.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The jitter's source.
    rng: Rng,
    /// The current ceiling in microseconds.
    ceiling_us: u64,
}

impl Backoff {
    /// A backoff at its smallest ceiling.
    pub fn new(rng: Rng) -> Backoff {
        Backoff { rng, ceiling_us: BACKOFF_MIN_US }
    }

    /// The next sleep; raises the ceiling.
    pub fn next_delay(&mut self) -> Duration {
        let b = self.ceiling_us;
        let us = b / 2 + self.rng.below(b - b / 2);
        self.ceiling_us = (b * 2).min(BACKOFF_MAX_US);
        Duration::from_micros(us)
    }

    /// Back to the smallest ceiling (after a commit).
    pub fn reset(&mut self) {
        self.ceiling_us = BACKOFF_MIN_US;
    }
}

/// The state the clients of a run share.
#[derive(Debug, Default)]
struct Shared {
    /// Clients that reached the gate, and whether the run failed (no one waits then).
    gate: Mutex<(usize, bool)>,
    /// Wakes the clients waiting at the gate.
    opened: Condvar,
    /// The common start, set when the last client reaches the gate.
    start: OnceLock<Instant>,
    /// A client failed: the others stop.
    failed: AtomicBool,
    /// Clients done with their warm-up (progress).
    warmed: AtomicUsize,
    /// Timed traversals completed (progress).
    traversals: AtomicU64,
    /// Conflicts (progress).
    aborts: AtomicU64,
    /// The process's CPU time at the common start.
    start_cpu: OnceLock<Option<Duration>>,
    /// Page visits recorded so far, all clients: the next visit's global order.
    visits: AtomicU64,
    /// The value of `visits` when the gate opened: visits below it belong to the warm-ups.
    gate_visits: OnceLock<u64>,
}

impl Shared {
    /// Waits until all `clients` have arrived; returns the common start, or `None` if the run
    /// failed meanwhile. The last to arrive calls `at_start` before it opens the gate.
    fn arrive(&self, clients: usize, at_start: &AtStart<'_>) -> Option<Instant> {
        let mut g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        if g.0 == clients {
            at_start();
            self.gate_visits.get_or_init(|| self.visits.load(Ordering::Relaxed));
            self.start_cpu.get_or_init(process_cpu);
            self.start.get_or_init(Instant::now);
            self.opened.notify_all();
        }
        while g.0 < clients && !g.1 {
            g = self.opened.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        if g.1 { None } else { self.start.get().copied() }
    }

    /// Marks the run failed and releases everyone at the gate.
    fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.gate.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.opened.notify_all();
    }
}

/// Marks the run failed when a client's thread ends without disarming it: an error or a panic,
/// so that no other client waits at the gate for it.
struct FailGuard<'a> {
    /// The run.
    shared: &'a Shared,
    /// The client finished normally.
    disarmed: bool,
}

impl Drop for FailGuard<'_> {
    fn drop(&mut self) {
        if !self.disarmed {
            self.shared.fail();
        }
    }
}

/// What [`run_multi_with`] calls when every client has warmed up, just before the timed phase
/// starts (to read a server's counters, say).
pub type AtStart<'a> = dyn Fn() + Sync + 'a;

/// Runs `cfg` against the database at `endpoint`, calling `on_progress` from this thread about
/// ten times a second until every client is done.
pub fn run_multi(
    endpoint: &Endpoint,
    cfg: &MultiConfig,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<MultiReport, Oo7Error> {
    run_multi_with(endpoint, cfg, on_progress, &|| {})
}

/// [`run_multi`], calling `at_start` (from a client's thread) once every client has warmed up,
/// before any of them starts its timed phase.
pub fn run_multi_with(
    endpoint: &Endpoint,
    cfg: &MultiConfig,
    on_progress: &mut dyn FnMut(&Progress),
    at_start: &AtStart<'_>,
) -> Result<MultiReport, Oo7Error> {
    cfg.validate()?;
    let modules = database_modules(endpoint)?;
    check_modules(modules, cfg.clients, cfg.sharing)?;
    let shared = Shared::default();
    type Outcome = Result<(ClientReport, Vec<(u64, u32)>), Oo7Error>;
    let results: Vec<std::thread::Result<Outcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.clients)
            .map(|i| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("oo7 client {i}"))
                    .spawn_scoped(scope, move || {
                        let mut guard = FailGuard { shared, disarmed: false };
                        let r = client(endpoint, cfg, i, shared, at_start);
                        guard.disarmed = r.is_ok();
                        r
                    })
                    .expect("spawning a client thread")
            })
            .collect();
        while !handles.iter().all(|h| h.is_finished()) {
            on_progress(&Progress {
                clients: cfg.clients,
                warmed: shared.warmed.load(Ordering::Relaxed),
                traversals: shared.traversals.load(Ordering::Relaxed),
                aborts: shared.aborts.load(Ordering::Relaxed),
                timed: shared.start.get().map(Instant::elapsed),
            });
            std::thread::sleep(Duration::from_millis(100));
        }
        handles.into_iter().map(|h| h.join()).collect()
    });
    let end_cpu = process_cpu();
    let mut per_client = Vec::with_capacity(cfg.clients);
    let mut visits = Vec::with_capacity(cfg.clients);
    let mut first_err = None;
    for r in results {
        match r {
            Ok(Ok((c, v))) => {
                per_client.push(c);
                visits.push(v);
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let (seconds, repeat) = match cfg.length {
        Length::Seconds(s) => (Some(s), None),
        Length::Repeat(r) => (None, Some(r)),
    };
    let page_trace = if cfg.record_pages {
        let gate = shared.gate_visits.get().copied().unwrap_or(u64::MAX);
        Some(merge_visits(visits, gate)?)
    } else {
        None
    };
    let mut total = Totals::of(&per_client);
    if let (Some(Some(a)), Some(b)) = (shared.start_cpu.get(), end_cpu) {
        let cpu = b.saturating_sub(*a).as_secs_f64();
        total.process_cpu_s = Some(cpu);
        total.cores_busy = (total.elapsed_s > 0.0).then(|| cpu / total.elapsed_s);
    }
    Ok(MultiReport {
        traversal: cfg.op.name().to_string(),
        mode: cfg.sharing,
        clients: cfg.clients,
        policy: cfg.policy.to_string(),
        cache_bytes: cfg.cache_bytes,
        seconds,
        repeat,
        warmup_excluded: true,
        modules,
        total,
        per_client,
        page_trace,
    })
}

/// One client of the run (its thread's body), with its recorded page visits (empty unless
/// the run records them). See the module documentation.
fn client(
    endpoint: &Endpoint,
    cfg: &MultiConfig,
    i: usize,
    shared: &Shared,
    at_start: &AtStart<'_>,
) -> Result<(ClientReport, Vec<(u64, u32)>), Oo7Error> {
    let scfg = SessionConfig {
        cache_bytes: cfg.cache_bytes,
        policy: cfg.policy,
        background_replacement: cfg.background_replacement,
        recovery: cfg.recovery,
        prefetch_pages: cfg.prefetch.pages,
        prefetch_hint: cfg.prefetch.hint,
        read_ahead: cfg.prefetch.read_ahead,
        ..SessionConfig::default()
    };
    let s = connect_as(endpoint, scfg, &format!("oo7 multi client {i}"))?;
    if cfg.record_pages {
        let rec = PageRecorder { shared, last: None, visits: Vec::new() };
        let mut db = Db::with_trace(&s, rec)?;
        let rep = client_runs(&s, &mut db, cfg, i, shared, at_start)?;
        let visits = std::mem::take(&mut db.trace_mut().visits);
        drop(db);
        let _ = s.close();
        Ok((rep, visits))
    } else {
        let mut db = Db::open(&s)?;
        let rep = client_runs(&s, &mut db, cfg, i, shared, at_start)?;
        drop(db);
        let _ = s.close();
        Ok((rep, Vec::new()))
    }
}

/// A client's warm-up and timed traversals on its open database.
fn client_runs<T: Trace>(
    s: &Session,
    db: &mut Db<'_, T>,
    cfg: &MultiConfig,
    i: usize,
    shared: &Shared,
    at_start: &AtStart<'_>,
) -> Result<ClientReport, Oo7Error> {
    let module = cfg.sharing.module_of(i);
    let mut w = Worker {
        s,
        op: cfg.op,
        module,
        client: i,
        backoff: Backoff::new(Rng::stream(cfg.seed, tag::RUN, i as u64)),
        shared,
        aborts: 0,
    };
    let mut rep = ClientReport { client: i, module, ..ClientReport::default() };

    let t = Instant::now();
    let stop_never = || false;
    if w.traverse(db, &stop_never)?.is_none() {
        return Ok(rep);
    }
    rep.warmup_s = t.elapsed().as_secs_f64();
    rep.warmup_aborts = std::mem::take(&mut w.aborts);
    shared.warmed.fetch_add(1, Ordering::Relaxed);

    let Some(start) = shared.arrive(cfg.clients, at_start) else { return Ok(rep) };
    let before = s.stats();
    let pages_before = s.page_mode_stats().unwrap_or_default();
    let demoted_before = s.cache_demote_stats().sent;
    rep.frames_start = s.cache_stats().usable_frames;
    let cpu_before = thread_cpu();
    let deadline = match cfg.length {
        Length::Seconds(secs) => Some(start + Duration::from_secs_f64(secs)),
        Length::Repeat(_) => None,
    };
    let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut last_end = start;
    loop {
        if let Length::Repeat(r) = cfg.length
            && rep.traversals >= u64::from(r)
        {
            break;
        }
        if past_deadline() || shared.failed.load(Ordering::Relaxed) {
            break;
        }
        let Some(r) = w.traverse(db, &past_deadline)? else { break };
        last_end = Instant::now();
        rep.traversals += 1;
        rep.parts_visited += r.parts_visited;
        rep.updates += r.updates;
        shared.traversals.fetch_add(1, Ordering::Relaxed);
    }
    let after = s.stats();
    if let (Some(a), Some(b)) = (cpu_before, thread_cpu()) {
        rep.cpu_s = Some(b.saturating_sub(a).as_secs_f64());
    }
    rep.aborts = w.aborts;
    rep.commits = after.commits - before.commits;
    rep.fetches = after.fetches - before.fetches;
    rep.commit_s = after.commit_time.saturating_sub(before.commit_time).as_secs_f64();
    rep.elapsed_s = last_end.duration_since(start).as_secs_f64();
    rep.traversals_per_s = rate(rep.traversals, rep.elapsed_s);
    rep.frames = s.cache_stats().usable_frames;
    rep.demoted_pages = s.cache_demote_stats().sent - demoted_before;
    rep.bytes_shipped = after.bytes_shipped - before.bytes_shipped;
    let pages_after = s.page_mode_stats().unwrap_or_default();
    rep.page_records = pages_after.records - pages_before.records;
    rep.page_records_early = pages_after.records_early - pages_before.records_early;
    rep.page_record_bytes = pages_after.record_bytes - pages_before.record_bytes;
    rep.pages_shipped = pages_after.pages_shipped - pages_before.pages_shipped;
    rep.pages_stolen = pages_after.pages_stolen - pages_before.pages_stolen;
    Ok(rep)
}

/// A client's traversal loop state.
struct Worker<'a> {
    /// The client's session.
    s: &'a Session,
    /// The traversal.
    op: Op,
    /// The module it walks.
    module: usize,
    /// The client's number (for errors).
    client: usize,
    /// The sleeps between attempts.
    backoff: Backoff,
    /// The run.
    shared: &'a Shared,
    /// Conflicts since the counter was last taken.
    aborts: u64,
}

impl Worker<'_> {
    /// Runs the traversal as one transaction until it commits; `None` if `stop` said so (or
    /// another client failed) after a conflict.
    fn traverse<T: Trace>(
        &mut self,
        db: &mut Db<'_, T>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<OpResult>, Oo7Error> {
        let mut in_a_row = 0u32;
        loop {
            let attempt = db.run_on_module(self.op, self.module).and_then(|r| {
                self.s.commit()?;
                Ok(r)
            });
            let e = match attempt {
                Ok(r) => {
                    self.backoff.reset();
                    return Ok(Some(r));
                }
                Err(Oo7Error::Client(e)) if is_conflict(&e) => e,
                Err(e) => return Err(e),
            };
            // A refused commit has already aborted locally; an access that found a conflict
            // has not. Aborting twice is harmless.
            self.s.abort();
            self.aborts += 1;
            self.shared.aborts.fetch_add(1, Ordering::Relaxed);
            in_a_row += 1;
            if in_a_row >= CONFLICTS_IN_A_ROW_MAX {
                return Err(Oo7Error::Conflicts {
                    client: self.client,
                    op: self.op.name(),
                    aborts: in_a_row,
                    last: e.to_string(),
                });
            }
            if stop() || self.shared.failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(self.backoff.next_delay());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_mode_needs_a_module_per_client() {
        let e = check_modules(1, 5, Sharing::Private).unwrap_err().to_string();
        assert!(
            e.contains(
                "the database has 1 module; private mode with 5 clients needs 5: load it with \
                 --modules 5"
            ),
            "{e}"
        );
        let e = check_modules(3, 4, Sharing::Private).unwrap_err().to_string();
        assert!(e.contains("has 3 modules;"), "{e}");
        check_modules(5, 5, Sharing::Private).unwrap();
        check_modules(1, 5, Sharing::Shared).unwrap();
        assert_eq!(Sharing::Private.module_of(3), 3);
        assert_eq!(Sharing::Shared.module_of(3), 0);
    }

    #[test]
    fn only_traversals_of_the_assembly_tree_run_on_a_module() {
        let cfg = |op| MultiConfig {
            op,
            clients: 2,
            sharing: Sharing::Private,
            length: Length::Repeat(1),
            policy: PolicyConfig::Fpc,
            cache_bytes: 1 << 20,
            background_replacement: true,
            seed: 1,
            record_pages: false,
            recovery: Default::default(),
            prefetch: crate::experiment::PrefetchSetting::default(),
        };
        for op in [Op::T1, Op::T1Minus, Op::T2b, Op::T3a, Op::T4, Op::T5, Op::T6] {
            cfg(op).validate().unwrap();
        }
        for op in [Op::T7, Op::T8, Op::Q1, Op::Insert] {
            let e = cfg(op).validate().unwrap_err().to_string();
            assert!(e.contains("does not walk") && e.contains("t2b"), "{e}");
        }
        let bad = [
            MultiConfig { clients: 0, ..cfg(Op::T1) },
            MultiConfig { length: Length::Repeat(0), ..cfg(Op::T1) },
            MultiConfig { length: Length::Seconds(0.0), ..cfg(Op::T1) },
            MultiConfig { length: Length::Seconds(f64::NAN), ..cfg(Op::T1) },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    #[test]
    fn backoff_grows_within_its_bounds_and_resets() {
        let mut b = Backoff::new(Rng::new(7));
        let mut ceiling = BACKOFF_MIN_US;
        for _ in 0..40 {
            let d = b.next_delay().as_micros() as u64;
            assert!(d >= ceiling / 2 && d < ceiling, "{d} outside [{}, {ceiling})", ceiling / 2);
            ceiling = (ceiling * 2).min(BACKOFF_MAX_US);
        }
        assert_eq!(ceiling, BACKOFF_MAX_US);
        b.reset();
        assert!(b.next_delay().as_micros() < u128::from(BACKOFF_MIN_US));
    }

    #[test]
    fn totals_add_up_and_take_the_longest_time() {
        let c = |client, traversals, aborts, elapsed_s| ClientReport {
            client,
            traversals,
            commits: traversals,
            aborts,
            elapsed_s,
            fetches: 10,
            ..ClientReport::default()
        };
        let t = Totals::of(&[c(0, 6, 0, 2.0), c(1, 3, 3, 3.0)]);
        assert_eq!((t.traversals, t.commits, t.aborts, t.fetches), (9, 9, 3, 20));
        assert_eq!(t.elapsed_s, 3.0);
        assert_eq!(t.traversals_per_s, 3.0);
        assert_eq!(t.abort_rate, 0.25);
        let none = Totals::of(&[]);
        assert_eq!((none.traversals_per_s, none.abort_rate), (0.0, 0.0));
    }

    #[test]
    fn the_gate_opens_for_the_last_client_and_on_failure() {
        let s = Shared::default();
        std::thread::scope(|sc| {
            let h = sc.spawn(|| s.arrive(2, &|| {}));
            let mine = s.arrive(2, &|| {});
            assert!(mine.is_some());
            assert_eq!(h.join().unwrap(), mine);
        });
        let s = Shared::default();
        std::thread::scope(|sc| {
            let h = sc.spawn(|| s.arrive(2, &|| {}));
            s.fail();
            assert_eq!(h.join().unwrap(), None);
        });
    }
}
