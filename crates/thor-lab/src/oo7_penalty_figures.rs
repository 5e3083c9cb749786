//! `thor oo7 penalty --figures`: the HAC paper's Figures 9, 10 and 11 (section 4.4).
//!
//! The paper splits the miss penalty of each static traversal, at "the experimental point where
//! replacement overhead was maximal" (hot runs; 0.16 MB for T6, 5 MB for T1-, 12 MB for T1 and
//! 20 MB for T1+ there), with replacement in the foreground (HAC-FG):
//!
//! ```text
//!   miss penalty = fetch time + replacement + conversion              (Figure 9)
//!   replacement  = usage computation + page compaction + stack scan   (Figure 10)
//!   fetch time   = client + network + server + disk                   (Figure 11)
//! ```
//!
//! Here each traversal runs hot at the size `--at` gives it, HAC-FG, once per `--runs`, over
//! the chosen transport. What is measured and how:
//!
//! - *fetch time, replacement, conversion*: the session's counters (`fetch_time` runs from the
//!   request to the page installed and so includes foreground replacement, which is taken out;
//!   `conversion_time` is installing objects and swizzling; the cache's `replacement_time`).
//! - *Figure 11's split*: a [`TimedTransport`] wraps the session's transport and times every
//!   fetch request's `send` and the `recv` of its reply. Over the in-process transport, `send`
//!   steps the server's core on the calling thread (its cache lookup, the page copy, and any
//!   disk read), so `send` is the *server* and `recv` the in-process hop (the *network*); over
//!   TCP, `send` and `recv` together are *network and server*, and the server's own share is
//!   what its network driver timed for the run's fetches (`ServerStats::fetch_service_ns`,
//!   read with a `Stats` request before and after the measured run: from the request handed
//!   to the engine to its reply handed to the writer); the *network* is the rest (the
//!   round trip's wire and both sides' socket calls, encoding and decoding). *Disk* is the
//!   direct-read time of the database file ([`thor_storage::FileDisk`]'s counters) when the
//!   server reads around the OS page cache (`--direct-reads`), and is taken out of the server
//!   (or network-and-server) time; without it, reads hit the OS page cache and are part of the
//!   server time, and disk is reported as not measured. *Client* is the rest of the fetch time:
//!   building the request, the piggybacked lists, copying the page into its frame.
//! - *Figure 10's split*: the cache times replacement as a whole and, inside HAC's (and
//!   FPC's) `free_frame`, its *usage computation* (the pointers' scans, usage computation and
//!   decay, the candidate set, choosing the victim) and its *compaction* (moving kept objects,
//!   dropping the others, releasing their references) with the clock the session injects
//!   (`thor_cache::timer`, every call timed, not sampled); *other* is the whole minus the two
//!   (the budget's rebalancing, the loop, the clock reads). Thor's *stack scan* has no
//!   equivalent here (live views are a list that the session pins, see `thor-client`), so
//!   there is no third part. Managers that do not split (GOM, the paged policies) report zero
//!   parts and their whole as other. What replacement did per fetch is counted beside it
//!   (frames scanned, candidates added, frames compacted and evicted, objects kept, moved home
//!   and dropped).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::json;
use thor_client::{PolicyConfig, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport, TcpTransport};
use thor_oo7::experiment::{Endpoint, NoRunTrace, PrefetchSetting, RunConfig, Workload, run_in};
use thor_wire::{Reply, Request, RequestBody, ServerInfo, Transport, TransportError};

use crate::oo7::MIB;
use crate::oo7_penalty::{Over, Spread, spread};
use crate::plot::{ChartSpec, bar_chart, stacked_bar_chart};

/// Nanoseconds a session's fetch requests spent in `send` and in the `recv` of their replies.
#[derive(Debug, Default)]
pub struct TransportTimes {
    /// Fetch requests sent.
    fetches: AtomicU64,
    /// Nanoseconds inside `send` of fetch requests.
    send_ns: AtomicU64,
    /// Nanoseconds inside `recv` of their replies.
    recv_ns: AtomicU64,
}

impl TransportTimes {
    fn get(&self) -> (u64, u64, u64) {
        (
            self.fetches.load(Ordering::Relaxed),
            self.send_ns.load(Ordering::Relaxed),
            self.recv_ns.load(Ordering::Relaxed),
        )
    }
}

/// A transport that times fetch requests and their replies (see the module documentation).
/// Requests are answered in order, so the reply to a fetch is the next `recv` after it when,
/// as in a session's fetch, nothing else is in flight; `fetch_in_flight` says whether it is.
pub struct TimedTransport {
    /// The real transport.
    inner: Box<dyn Transport>,
    /// Where the times go.
    times: Arc<TransportTimes>,
    /// Whether the oldest request in flight is a fetch.
    fetch_in_flight: bool,
}

impl Transport for TimedTransport {
    fn server(&self) -> &ServerInfo {
        self.inner.server()
    }

    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        let fetch = matches!(req.body, RequestBody::Fetch { .. });
        let t = Instant::now();
        let r = self.inner.send(req);
        if fetch && r.is_ok() {
            self.times.fetches.fetch_add(1, Ordering::Relaxed);
            self.times.send_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.fetch_in_flight = true;
        }
        r
    }

    fn recv(&mut self) -> Result<Reply, TransportError> {
        let t = Instant::now();
        let r = self.inner.recv();
        if std::mem::take(&mut self.fetch_in_flight) {
            self.times.recv_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        r
    }
}

/// What `--figures` needs from `thor oo7 penalty`'s arguments.
pub struct FiguresConfig<'a> {
    /// `TRAVERSAL=MIB` per traversal: where each one's miss penalty is taken.
    pub at: &'a [String],
    /// The cache manager (HAC, as the paper; another one for comparison).
    pub policy: PolicyConfig,
    /// Its name as given.
    pub policy_name: &'a str,
    /// Replace in the foreground (the paper's Figure 9 is HAC-FG); false only if asked.
    pub foreground: bool,
    /// Measured runs per traversal.
    pub runs: u32,
    /// Operation seed.
    pub seed: u64,
    /// The transport.
    pub over: Over,
    /// Whether the server reads around the OS page cache (so disk time is measured).
    pub direct_reads: bool,
    /// The server's page cache size, MiB (None: the engine's default).
    pub server_cache_mb: Option<f64>,
    /// Output directory.
    pub out: Option<&'a Path>,
    /// Print JSON.
    pub json: bool,
    /// The database.
    pub dir: &'a Path,
}

/// One measured hot run of one traversal, per fetch.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    traversal: String,
    cache_mb: f64,
    run: u32,
    fetches: u64,
    /// Figure 9, microseconds per fetch.
    fetch_us: f64,
    replacement_us: f64,
    conversion_us: f64,
    /// Figure 10, microseconds per fetch: replacement's usage computation, compaction, and the
    /// rest (the whole minus the two).
    usage_us: f64,
    compaction_us: f64,
    replacement_other_us: f64,
    /// Figure 11, microseconds per fetch (None: not measured in this configuration).
    client_us: f64,
    network_us: Option<f64>,
    server_us: Option<f64>,
    network_and_server_us: f64,
    disk_us: Option<f64>,
    /// Over TCP, fetches the server timed per fetch the client made (1 when every fetch of
    /// the run was timed, as it should be with one session).
    server_timed_per_fetch: Option<f64>,
    /// Disk reads per fetch (direct reads only).
    disk_reads_per_fetch: Option<f64>,
    /// Figure 10: replacement's work per fetch.
    frames_scanned: f64,
    candidates_added: f64,
    frames_compacted: f64,
    frames_evicted: f64,
    objects_kept: f64,
    objects_moved_home: f64,
    objects_dropped: f64,
    /// The run's elapsed time without commit, seconds.
    elapsed_s: f64,
}

/// Parses `t1=12,t6=0.5` entries.
fn parse_at(at: &[String]) -> anyhow::Result<Vec<(Workload, f64)>> {
    let mut v = Vec::new();
    for e in at {
        let (t, mb) = e
            .split_once('=')
            .with_context(|| format!("--at {e:?}: expected TRAVERSAL=MIB, as t1=12"))?;
        let w: Workload = t.trim().parse().with_context(|| format!("traversal {t:?}"))?;
        if matches!(w, Workload::Dynamic(_)) {
            bail!("--at: the figures are of the static traversals, not {t}");
        }
        let mb: f64 = mb.trim().parse().with_context(|| format!("--at {e:?}: size in MiB"))?;
        if !(mb > 0.0 && mb.is_finite()) {
            bail!("--at {e:?}: the size must be positive");
        }
        v.push((w, mb));
    }
    if v.is_empty() {
        bail!("--figures needs --at TRAVERSAL=MIB,... (the paper: t6=0.16,t1-=5,t1=12,t1+=20)");
    }
    Ok(v)
}

fn per(x: f64, n: u64) -> f64 {
    if n == 0 { 0.0 } else { x / n as f64 }
}

pub fn figures(c: &FiguresConfig<'_>) -> anyhow::Result<()> {
    let points = parse_at(c.at)?;
    let mut opts = thor_server::EngineOptions::default();
    if let Some(mb) = c.server_cache_mb {
        opts.page_cache_bytes = (mb * MIB) as usize;
    }
    let (engine, disk) = crate::oo7::open_database_with(c.dir, opts, c.direct_reads)?;
    let (server, endpoint) = crate::oo7_penalty::serve_over(c.over, &engine)?;
    let mut samples = Vec::new();
    for r in 1..=c.runs {
        for &(w, mb) in &points {
            eprintln!("run {r}/{}: hot {} at {mb} MiB ...", c.runs, w.name());
            samples.push(one(c, &endpoint, &disk, w, mb, r)?);
        }
    }
    if let Some(s) = server {
        s.shutdown().context("stopping the loopback server")?;
    }
    let names: Vec<(String, f64)> =
        points.iter().map(|(w, mb)| (w.name().to_string(), *mb)).collect();
    let sums: Vec<Summary> = names
        .iter()
        .map(|(t, mb)| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| &s.traversal == t).collect();
            let col = |f: &dyn Fn(&Sample) -> Option<f64>| {
                let xs: Vec<f64> = mine.iter().filter_map(|s| f(s)).collect();
                spread(xs)
            };
            let fields: Vec<(&'static str, Spread)> = vec![
                ("fetches", col(&|s| Some(s.fetches as f64))),
                ("fetch_us", col(&|s| Some(s.fetch_us))),
                ("replacement_us", col(&|s| Some(s.replacement_us))),
                ("conversion_us", col(&|s| Some(s.conversion_us))),
                ("usage_us", col(&|s| Some(s.usage_us))),
                ("compaction_us", col(&|s| Some(s.compaction_us))),
                ("replacement_other_us", col(&|s| Some(s.replacement_other_us))),
                ("client_us", col(&|s| Some(s.client_us))),
                ("network_us", col(&|s| s.network_us)),
                ("server_us", col(&|s| s.server_us)),
                ("network_and_server_us", col(&|s| Some(s.network_and_server_us))),
                ("disk_us", col(&|s| s.disk_us)),
                ("frames_scanned", col(&|s| Some(s.frames_scanned))),
                ("candidates_added", col(&|s| Some(s.candidates_added))),
                ("frames_compacted", col(&|s| Some(s.frames_compacted))),
                ("frames_evicted", col(&|s| Some(s.frames_evicted))),
                ("objects_kept", col(&|s| Some(s.objects_kept))),
                ("objects_moved_home", col(&|s| Some(s.objects_moved_home))),
                ("objects_dropped", col(&|s| Some(s.objects_dropped))),
            ];
            Summary { traversal: t.clone(), cache_mb: *mb, fields }
        })
        .collect();
    // Over TCP the server's driver times its fetches; in process the transport's send is the
    // server.
    let measured_server = true;
    let measured_split = matches!(c.policy, PolicyConfig::Hac(_) | PolicyConfig::Fpc);
    let measured_disk = c.direct_reads;
    let settings = json!({
        "dir": c.dir.display().to_string(),
        "policy": c.policy_name,
        "foreground": c.foreground,
        "over": c.over,
        "runs": c.runs,
        "direct_reads": c.direct_reads,
        "server_cache_mb": c.server_cache_mb,
        "seed": c.seed,
        "server_time_measured": measured_server,
        "disk_time_measured": measured_disk,
        "replacement_split_measured": measured_split,
    });
    let text = table(c, &sums, measured_server, measured_disk, measured_split);
    if let Some(dir) = c.out {
        write_out(dir, &samples, &sums, measured_server, measured_disk)?;
        std::fs::write(dir.join("figures.txt"), &text)?;
        let v = json!({ "settings": settings, "samples": samples });
        std::fs::write(dir.join("figures.json"), serde_json::to_string_pretty(&v)?)?;
    }
    if c.json {
        let v = json!({ "settings": settings, "samples": samples });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

/// A session on `endpoint` whose transport times its fetches into `times`, with a cache of
/// `cache_bytes` and one page per fetch (the paper's figures are of one page per fetch).
fn timed_session(
    c: &FiguresConfig<'_>,
    endpoint: &Endpoint,
    times: &Arc<TransportTimes>,
    cache_bytes: usize,
) -> anyhow::Result<Session> {
    let client = ClientConfig::default();
    let inner: Box<dyn Transport> = match endpoint {
        Endpoint::Embedded(e) => Box::new(LocalTransport::connect(e.clone(), &client)?),
        Endpoint::Tcp { addr, .. } => Box::new(TcpTransport::connect(addr.as_str(), &client)?),
    };
    let t = TimedTransport { inner, times: times.clone(), fetch_in_flight: false };
    let config = SessionConfig {
        cache_bytes,
        policy: c.policy,
        background_replacement: !c.foreground,
        prefetch_pages: Some(0),
        ..SessionConfig::default()
    };
    Ok(Session::new(Box::new(t), config)?)
}

/// One hot run of `w` at `mb` MiB: a warm-up run, then the measured one, in one session.
fn one(
    c: &FiguresConfig<'_>,
    endpoint: &Endpoint,
    disk: &thor_storage::FileDisk,
    w: Workload,
    mb: f64,
    run: u32,
) -> anyhow::Result<Sample> {
    let times = Arc::new(TransportTimes::default());
    let cache_bytes = (mb * MIB) as usize;
    let s = timed_session(c, endpoint, &times, cache_bytes)?;
    // A hot run is the second of two runs in one session, as `RunConfig::hot` does; the
    // counters below are taken around the second alone.
    let cfg = RunConfig {
        workload: w,
        policy: c.policy,
        cache_bytes,
        hot: false,
        seed: c.seed,
        background_replacement: !c.foreground,
        repeat: 1,
        commit_every: 0,
        prefetch: PrefetchSetting::OFF,
    };
    run_in(&s, &cfg, NoRunTrace).with_context(|| format!("warming with {}", w.name()))?;
    // The server's counters around the measured run (a `Stats` round trip each, outside the
    // session's counters and the fetch timers): over TCP its driver's fetch service time.
    let sv0 = s.server_stats().context("reading the server's counters")?;
    let (c0, k0, t0, d0) = (s.stats(), s.cache_stats(), times.get(), disk.direct_read_stats());
    let rep = run_in(&s, &cfg, NoRunTrace).with_context(|| format!("running {}", w.name()))?;
    let (c1, k1, t1, d1) = (s.stats(), s.cache_stats(), times.get(), disk.direct_read_stats());
    let sv1 = s.server_stats().context("reading the server's counters")?;
    let _ = s.close();
    let fetches = c1.fetches - c0.fetches;
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let replacement = us(k1.replacement_time.saturating_sub(k0.replacement_time));
    let usage = us(k1.usage_time.saturating_sub(k0.usage_time));
    let compaction = us(k1.compaction_time.saturating_sub(k0.compaction_time));
    let fetch_total = us(c1.fetch_time.saturating_sub(c0.fetch_time));
    let conversion = us(c1.conversion_time.saturating_sub(c0.conversion_time));
    let send = (t1.1 - t0.1) as f64 / 1e3;
    let recv = (t1.2 - t0.2) as f64 / 1e3;
    let disk_us = c.direct_reads.then(|| (d1.read_ns - d0.read_ns) as f64 / 1e3);
    // Foreground replacement happens inside the fetch's timing (while the reply is installed);
    // background replacement too (while the request is on the wire). Either way it is taken
    // out of the fetch time, as the paper's Figure 9 separates them.
    let fetch_pure = (fetch_total - replacement).max(0.0);
    let wire = send + recv;
    let client_us = (fetch_pure - wire).max(0.0);
    let net_server = (wire - disk_us.unwrap_or(0.0)).max(0.0);
    let (network, server) = match c.over {
        Over::Embedded => (Some(recv), Some((send - disk_us.unwrap_or(0.0)).max(0.0))),
        Over::Tcp => {
            // The server's service of the run's fetches (disk reads included), never more
            // than the round trips it is inside; the network is the rest of the round trips.
            let service =
                (sv1.fetch_service_ns.saturating_sub(sv0.fetch_service_ns) as f64 / 1e3).min(wire);
            (Some(wire - service), Some((service - disk_us.unwrap_or(0.0)).max(0.0)))
        }
    };
    let server_timed = (c.over == Over::Tcp)
        .then(|| per(sv1.fetches_served.saturating_sub(sv0.fetches_served) as f64, fetches));
    let f = |x: f64| per(x, fetches);
    let r = |a: u64, b: u64| per((a - b) as f64, fetches);
    Ok(Sample {
        traversal: w.name().to_string(),
        cache_mb: mb,
        run,
        fetches,
        fetch_us: f(fetch_pure),
        replacement_us: f(replacement),
        conversion_us: f(conversion),
        usage_us: f(usage),
        compaction_us: f(compaction),
        replacement_other_us: f((replacement - usage - compaction).max(0.0)),
        client_us: f(client_us),
        network_us: network.map(f),
        server_us: server.map(f),
        network_and_server_us: f(net_server),
        disk_us: disk_us.map(f),
        server_timed_per_fetch: server_timed,
        disk_reads_per_fetch: c.direct_reads.then(|| r(d1.reads, d0.reads)),
        frames_scanned: r(k1.replacement.frames_scanned, k0.replacement.frames_scanned),
        candidates_added: r(k1.replacement.candidates_added, k0.replacement.candidates_added),
        frames_compacted: r(k1.replacement.frames_compacted, k0.replacement.frames_compacted),
        frames_evicted: r(k1.replacement.frames_evicted, k0.replacement.frames_evicted),
        objects_kept: r(k1.replacement.objects_kept, k0.replacement.objects_kept),
        objects_moved_home: r(k1.replacement.objects_moved_home, k0.replacement.objects_moved_home),
        objects_dropped: r(k1.replacement.objects_dropped, k0.replacement.objects_dropped),
        elapsed_s: rep.elapsed_s,
    })
}

fn get(fields: &[(&'static str, Spread)], name: &str) -> Spread {
    fields.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).expect("a field of the summary")
}

/// Median (min-max) when more than one run.
fn cell(s: Spread, prec: usize, runs: u32) -> String {
    if runs > 1 {
        format!("{:.prec$} ({:.prec$}-{:.prec$})", s.median, s.min, s.max)
    } else {
        format!("{:.prec$}", s.median)
    }
}

/// One traversal's figures over the runs: (field, median and range), in table order.
struct Summary {
    /// The traversal.
    traversal: String,
    /// The cache size it ran at.
    cache_mb: f64,
    /// Every figure.
    fields: Vec<(&'static str, Spread)>,
}

type Summaries = [Summary];

fn table(c: &FiguresConfig<'_>, sums: &Summaries, server: bool, disk: bool, split: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "miss penalty of hot traversals, {}{}, over {}; microseconds per fetch, median (min-max) of {} run(s)",
        c.policy_name,
        if c.foreground { " (foreground replacement)" } else { "" },
        match c.over {
            Over::Tcp => "loopback TCP",
            Over::Embedded => "the in-process transport",
        },
        c.runs
    );
    let _ = writeln!(o, "\nFigure 9: miss penalty = fetch + replacement + conversion");
    let _ = writeln!(
        o,
        "{:<6} {:>8} {:>9} {:>22} {:>22} {:>22} {:>9} {:>9}",
        "trav", "MiB", "fetches", "fetch us", "replacement us", "conversion us", "repl/f", "conv/f"
    );
    for Summary { traversal: t, cache_mb: mb, fields: f } in sums {
        let fe = get(f, "fetch_us").median;
        let _ = writeln!(
            o,
            "{:<6} {:>8} {:>9} {:>22} {:>22} {:>22} {:>9.2} {:>9.2}",
            t,
            mb,
            cell(get(f, "fetches"), 0, c.runs),
            cell(get(f, "fetch_us"), 1, c.runs),
            cell(get(f, "replacement_us"), 1, c.runs),
            cell(get(f, "conversion_us"), 1, c.runs),
            get(f, "replacement_us").median / fe.max(f64::MIN_POSITIVE),
            get(f, "conversion_us").median / fe.max(f64::MIN_POSITIVE),
        );
    }
    let _ = writeln!(
        o,
        "\nFigure 10: replacement per fetch = usage computation + compaction + other (no stack scan: thor pins live views instead){}",
        if split { "" } else { "; this manager does not split its time (all of it is other)" }
    );
    let _ = writeln!(
        o,
        "{:<6} {:>22} {:>22} {:>22} {:>22}",
        "trav", "repl us", "usage us", "compaction us", "other us"
    );
    for Summary { traversal: t, fields: f, .. } in sums {
        let _ = writeln!(
            o,
            "{:<6} {:>22} {:>22} {:>22} {:>22}",
            t,
            cell(get(f, "replacement_us"), 1, c.runs),
            cell(get(f, "usage_us"), 1, c.runs),
            cell(get(f, "compaction_us"), 1, c.runs),
            cell(get(f, "replacement_other_us"), 1, c.runs),
        );
    }
    work_table(&mut o, c, sums);
    figure11_table(&mut o, c, sums, server, disk);
    o
}

/// The table of replacement's work per fetch (medians), appended to `o`.
fn work_table(o: &mut String, c: &FiguresConfig<'_>, sums: &Summaries) {
    let _ = writeln!(o, "\nreplacement's work per fetch (medians)");
    let _ = writeln!(
        o,
        "{:<6} {:>14} {:>9} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9}",
        "trav",
        "repl us",
        "scanned",
        "cand.added",
        "compacted",
        "evicted",
        "kept",
        "moved home",
        "dropped"
    );
    for Summary { traversal: t, fields: f, .. } in sums {
        let m = |n| get(f, n).median;
        let _ = writeln!(
            o,
            "{:<6} {:>14} {:>9.2} {:>10.2} {:>10.2} {:>9.2} {:>9.1} {:>10.1} {:>9.1}",
            t,
            cell(get(f, "replacement_us"), 1, c.runs),
            m("frames_scanned"),
            m("candidates_added"),
            m("frames_compacted"),
            m("frames_evicted"),
            m("objects_kept"),
            m("objects_moved_home"),
            m("objects_dropped"),
        );
    }
}

/// Figure 11's table (fetch time = client + network + server + disk), appended to `o`, with
/// what was not measured (`server`, `disk`: whether those shares were).
fn figure11_table(
    o: &mut String,
    c: &FiguresConfig<'_>,
    sums: &Summaries,
    server: bool,
    disk: bool,
) {
    let _ = writeln!(o, "\nFigure 11: fetch time = client + network + server + disk");
    let _ = writeln!(
        o,
        "{:<6} {:>20} {:>20} {:>20} {:>20} {:>20}",
        "trav", "client us", "network us", "server us", "network+server us", "disk us"
    );
    let na = "not measured".to_string();
    for Summary { traversal: t, fields: f, .. } in sums {
        let _ = writeln!(
            o,
            "{:<6} {:>20} {:>20} {:>20} {:>20} {:>20}",
            t,
            cell(get(f, "client_us"), 1, c.runs),
            if server { cell(get(f, "network_us"), 1, c.runs) } else { na.clone() },
            if server { cell(get(f, "server_us"), 1, c.runs) } else { na.clone() },
            cell(get(f, "network_and_server_us"), 1, c.runs),
            if disk { cell(get(f, "disk_us"), 1, c.runs) } else { na.clone() },
        );
    }
    if c.over == Over::Tcp {
        let _ = writeln!(
            o,
            "(over TCP the server's share is its driver's time from the request handed to the engine to the reply handed to the writer, ServerStats::fetch_service_ns; the network is the rest of the round trip)"
        );
    }
    if !disk {
        let _ = writeln!(
            o,
            "(disk not measured: the server read through the OS page cache; give --direct-reads, and a small --server-cache-mb for misses)"
        );
    }
}

/// `samples.csv`: every run's sample, one line each.
fn samples_csv(samples: &[Sample]) -> String {
    let mut s = String::from(
        "traversal,cache_mb,run,fetches,fetch_us,replacement_us,conversion_us,usage_us,compaction_us,replacement_other_us,client_us,network_us,server_us,network_and_server_us,disk_us,server_timed_per_fetch,disk_reads_per_fetch,frames_scanned,candidates_added,frames_compacted,frames_evicted,objects_kept,objects_moved_home,objects_dropped,elapsed_s\n",
    );
    let o = |x: Option<f64>| x.map_or_else(String::new, |v| v.to_string());
    for x in samples {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.traversal,
            x.cache_mb,
            x.run,
            x.fetches,
            x.fetch_us,
            x.replacement_us,
            x.conversion_us,
            x.usage_us,
            x.compaction_us,
            x.replacement_other_us,
            x.client_us,
            o(x.network_us),
            o(x.server_us),
            x.network_and_server_us,
            o(x.disk_us),
            o(x.server_timed_per_fetch),
            o(x.disk_reads_per_fetch),
            x.frames_scanned,
            x.candidates_added,
            x.frames_compacted,
            x.frames_evicted,
            x.objects_kept,
            x.objects_moved_home,
            x.objects_dropped,
            x.elapsed_s
        );
    }
    s
}

/// The charts of Figures 9, 10 (and replacement's work) and 11, from the medians of `sums`,
/// one group of bars per traversal and cache size (`groups`).
fn figure_charts(
    dir: &Path,
    sums: &Summaries,
    groups: &[String],
    server: bool,
    disk: bool,
    over_tcp: bool,
) -> anyhow::Result<()> {
    let med = |c: &str| -> Vec<f64> { sums.iter().map(|s| get(&s.fields, c).median).collect() };
    let spec = |title: &str, y: &str| ChartSpec {
        title: title.into(),
        y_label: y.into(),
        ..ChartSpec::default()
    };
    stacked_bar_chart(
        &dir.join("figure9"),
        &spec("Figure 9: miss penalty per fetch (medians)", "microseconds per fetch"),
        groups,
        &[
            ("fetch".to_string(), med("fetch_us")),
            ("replacement".to_string(), med("replacement_us")),
            ("conversion".to_string(), med("conversion_us")),
        ],
    )?;
    stacked_bar_chart(
        &dir.join("figure10"),
        &spec("Figure 10: replacement per fetch (medians)", "microseconds per fetch"),
        groups,
        &[
            ("usage computation".to_string(), med("usage_us")),
            ("compaction".to_string(), med("compaction_us")),
            ("other".to_string(), med("replacement_other_us")),
        ],
    )?;
    bar_chart(
        &dir.join("figure10-work"),
        &spec("Figure 10: replacement's work per fetch (medians)", "per fetch"),
        groups,
        &[
            ("frames scanned".to_string(), med("frames_scanned")),
            ("candidates added".to_string(), med("candidates_added")),
            ("frames compacted".to_string(), med("frames_compacted")),
            ("frames evicted".to_string(), med("frames_evicted")),
            (
                "objects kept / 100".to_string(),
                med("objects_kept").iter().map(|x| x / 100.0).collect(),
            ),
        ],
    )?;
    let mut parts = vec![("client".to_string(), med("client_us"))];
    if server {
        let network = if over_tcp { "network" } else { "network (in-process hop)" };
        parts.push((network.to_string(), med("network_us")));
        parts.push(("server".to_string(), med("server_us")));
    } else {
        parts.push(("network and server".to_string(), med("network_and_server_us")));
    }
    if disk {
        parts.push(("disk".to_string(), med("disk_us")));
    }
    stacked_bar_chart(
        &dir.join("figure11"),
        &spec("Figure 11: fetch time per fetch (medians)", "microseconds per fetch"),
        groups,
        &parts,
    )?;
    Ok(())
}

/// `figure9.csv`, `figure10.csv`, `figure11.csv` (medians and ranges), `samples.csv` and the
/// three charts.
fn write_out(
    dir: &Path,
    samples: &[Sample],
    sums: &Summaries,
    server: bool,
    disk: bool,
) -> anyhow::Result<()> {
    let over_tcp = samples.iter().any(|s| s.server_timed_per_fetch.is_some());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("samples.csv"), samples_csv(samples))?;
    let groups: Vec<String> =
        sums.iter().map(|s| format!("{} ({} MiB)", s.traversal, s.cache_mb)).collect();
    let csv = |name: &str, cols: &[&str]| -> anyhow::Result<()> {
        let mut s = String::from("traversal,cache_mb");
        for c in cols {
            let _ = write!(s, ",{c},{c}_min,{c}_max");
        }
        s.push('\n');
        for Summary { traversal: t, cache_mb: mb, fields: f } in sums {
            let _ = write!(s, "{t},{mb}");
            for c in cols {
                let v = get(f, c);
                let _ = write!(s, ",{},{},{}", v.median, v.min, v.max);
            }
            s.push('\n');
        }
        let p: PathBuf = dir.join(name);
        std::fs::write(&p, s).with_context(|| format!("writing {}", p.display()))
    };
    csv("figure9.csv", &["fetches", "fetch_us", "replacement_us", "conversion_us"])?;
    csv(
        "figure10.csv",
        &[
            "replacement_us",
            "usage_us",
            "compaction_us",
            "replacement_other_us",
            "frames_scanned",
            "candidates_added",
            "frames_compacted",
            "frames_evicted",
            "objects_kept",
            "objects_moved_home",
            "objects_dropped",
        ],
    )?;
    let mut f11 = vec!["client_us"];
    if server {
        f11.extend(["network_us", "server_us"]);
    }
    f11.push("network_and_server_us");
    if disk {
        f11.push("disk_us");
    }
    csv("figure11.csv", &f11)?;
    figure_charts(dir, sums, &groups, server, disk, over_tcp)?;
    Ok(())
}
