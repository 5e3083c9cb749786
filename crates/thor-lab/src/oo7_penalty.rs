//! `thor oo7 penalty`: the miss penalty of cold traversals beside the loopback floor.
//!
//! Issue 16 splits a miss into fetch time, replacement and conversion (the HAC paper's section
//! 4.4, Figure 9) and asks for each at a stated proportion of what the machine allows. This
//! command is the instrument: per traversal, run cold over a loopback TCP server started in
//! this process (or the embedded server), it prints
//!
//! - fetches, fetch time in total and per fetch (mean, p50, p99, from the session's histogram);
//! - conversion (installing and swizzling) per page and per object installed, replacement per
//!   fetch, and conversion over fetch time (Figure 9's proportion; the goal is at most 10%);
//! - the floor, measured in the same run ([`crate::floor`]): a blocking ping-pong of a page
//!   sized reply over loopback TCP and over a Unix socket, p50 and p99, with the two ends
//!   placed by the scheduler (as thor's client and server are) and pinned to one CPU (no
//!   cross-CPU wake-up: the transfer alone); and thor's fetch p50 and p99 over the TCP
//!   floor's (the goal is at most 1.5), and its p50 over the pinned floor's;
//! - with `--clients N`, the same for N clients running the traversal at once, beside a floor
//!   of N ping-pongs at once.
//!
//! Each of `--runs` runs measures the floor, then every traversal once, cold (a new session
//! with an empty cache); the table gives the median and the range over the runs, so that a
//! figure taken on a busy machine shows its spread. With several prefetch settings
//! (`--prefetch 0,8 --prefetch-hint refs,next`), each run runs every traversal once per
//! setting, one after the other, so that the settings alternate in one sitting; the table has
//! a row per traversal and setting, with the pages that came by prefetch, how many were used
//! and how many were evicted unused. Before the first run, every traversal runs
//! once unmeasured so that the server's page cache (and the OS's) holds the pages: the figures
//! are of the network and the client, which is what the floor measures, not of the disk.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::json;
use thor_oo7::experiment::{
    Endpoint, NoRunTrace, PrefetchSetting, RunConfig, RunReport, Workload, run,
};

use crate::floor::{FloorConfig, FloorReport, Socket};
use crate::oo7::{MIB, open_database_with, policy};
use crate::plot::{ChartSpec, bar_chart};

/// Where the client's server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    /// A `thor_net` server on 127.0.0.1 in this process, over TCP.
    Tcp,
    /// The embedded server, through the in-process transport (no socket).
    Embedded,
}

/// `thor oo7 penalty`.
#[derive(Debug, Args)]
pub struct PenaltyArgs {
    /// The OO7 database (`thor oo7 load`).
    #[arg(long)]
    dir: PathBuf,
    /// Traversals, comma-separated, each run cold.
    #[arg(long, value_delimiter = ',', default_value = "t6,t1-,t1")]
    traversals: Vec<String>,
    /// The client cache manager: hac or fpc.
    #[arg(long, default_value = "hac")]
    policy: String,
    /// Client cache size in MiB (frames and tables).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true, default_value_t = 256.0)]
    cache_mb: f64,
    /// How the client reaches the server.
    #[arg(long, value_enum, default_value_t = Over::Tcp)]
    over: Over,
    /// Runs, each measuring the floor and every traversal once; figures are the median and
    /// range over them.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 3)]
    runs: u32,
    /// Timed round trips of each floor measurement.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 10_000)]
    round_trips: u32,
    /// Untimed round trips before them.
    #[arg(long, default_value_t = 1_000)]
    warmup: u32,
    /// Also run this many clients at once (each its own session and connection, the same cold
    /// traversal) after the single client, with a floor of as many ping-pongs at once; 1: no.
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 1)]
    clients: usize,
    /// Seed of the operations' random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replace in the foreground (HAC-FG) instead of while fetches are on the wire.
    #[arg(long)]
    foreground: bool,
    /// Further pages each fetch asks for (prefetch), comma-separated to compare settings in
    /// one sitting (0: off); default: the session's (32 over TCP, off embedded).
    #[arg(long, value_delimiter = ',')]
    prefetch: Vec<u16>,
    /// How the server chooses prefetched pages, comma-separated to compare: refs (the pages
    /// the fetched page refers to) or next (the pages after it in creation order).
    #[arg(long, value_delimiter = ',', default_value = "refs")]
    prefetch_hint: Vec<thor_wire::PrefetchHint>,
    /// Read ahead with the hint next (true or false), comma-separated to compare: with true,
    /// a reply that brought at least half its pages is followed at once by a request for the
    /// pages after them, whose transfer overlaps the traversal's work.
    #[arg(long, value_delimiter = ',', default_value = "false")]
    read_ahead: Vec<bool>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write samples.csv, summary.csv and penalty.png/.svg (medians in microseconds)
    /// into this directory (with --figures: figure9/10/11.csv and .png/.svg, samples.csv,
    /// figures.json and figures.txt).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Instead of cold runs against the floor: the HAC paper's Figures 9, 10 and 11, each
    /// traversal hot at the size --at gives it, with replacement in the foreground (HAC-FG).
    #[arg(long, requires = "at")]
    figures: bool,
    /// With --figures: TRAVERSAL=MIB for each traversal, the cache size of its worst-case
    /// replacement point (the paper's: t6=0.16,t1-=5,t1=12,t1+=20, with its smaller tables).
    #[arg(long, value_delimiter = ',')]
    at: Vec<String>,
    /// With --figures: the server reads its database around the OS page cache, so that disk
    /// time is measured (Figure 11's disk).
    #[arg(long)]
    direct_reads: bool,
    /// With --figures: the server's page cache in MiB (small, with --direct-reads, for the
    /// server misses of the paper's configuration; default: the engine's).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true)]
    server_cache_mb: Option<f64>,
}

/// One traversal's measured cold run, with the floor of the same run.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    /// The traversal.
    traversal: String,
    /// The prefetch setting (`off`, or hint and pages: `refs:8`).
    prefetch: String,
    /// Which run (from 1).
    run: u32,
    /// The run's figures (fetches, times in seconds, counters).
    #[serde(skip)]
    report: RunReport,
    /// The derived figures, in [`FIELDS`] order.
    #[serde(flatten)]
    values: BTreeMap<&'static str, f64>,
}

/// The figures of a sample, in table and CSV order, with what each means.
const FIELDS: [(&str, &str); 27] = [
    ("fetches", "round trips for pages (pages fetched, not counting those prefetched with them)"),
    ("pages_prefetched", "pages that came by prefetch with a fetch"),
    ("prefetch_used", "prefetched pages an object was installed from during the run"),
    ("prefetch_evicted_unused", "prefetched pages evicted before any object of theirs was used"),
    ("elapsed_s", "the traversal's time, without commit"),
    ("fetch_s", "time fetching (request to page installed)"),
    ("fetch_us_mean", "fetch time per fetch"),
    ("fetch_us_p50", "median fetch latency"),
    ("fetch_us_p99", "99th percentile fetch latency"),
    ("conversion_s", "time installing objects and swizzling"),
    ("conversion_us_per_page", "conversion per page brought, fetched or prefetched"),
    ("conversion_ns_per_object", "conversion per object installed"),
    ("replacement_s", "time freeing frames"),
    ("replacement_us_per_fetch", "replacement per fetch"),
    ("conversion_to_fetch", "conversion over fetch time (Figure 9; goal <= 0.10)"),
    ("replacement_to_fetch", "replacement over fetch time (goal <= 0.16)"),
    ("floor_tcp_us_p50", "loopback TCP ping-pong median, same run, ends placed by the scheduler"),
    ("floor_tcp_us_p99", "loopback TCP ping-pong 99th percentile, placed by the scheduler"),
    ("floor_tcp_pinned_us_p50", "loopback TCP ping-pong median, both ends pinned to one CPU"),
    ("floor_tcp_pinned_us_p99", "loopback TCP ping-pong 99th percentile, pinned"),
    ("floor_unix_us_p50", "Unix socket ping-pong median, placed by the scheduler"),
    ("floor_unix_us_p99", "Unix socket ping-pong 99th percentile, placed by the scheduler"),
    ("floor_unix_pinned_us_p50", "Unix socket ping-pong median, pinned to one CPU"),
    ("floor_unix_pinned_us_p99", "Unix socket ping-pong 99th percentile, pinned"),
    ("fetch_p50_to_tcp_floor", "fetch p50 over TCP floor p50 (goal <= 1.5)"),
    ("fetch_p99_to_tcp_floor", "fetch p99 over TCP floor p99 (goal <= 1.5)"),
    ("fetch_p50_to_pinned_tcp_floor", "fetch p50 over pinned TCP floor p50"),
];

/// The floor measurements of one run: TCP and Unix, placed by the scheduler and pinned.
#[derive(Debug, Clone, Serialize)]
struct Floors {
    /// TCP, the ends placed by the scheduler.
    tcp: FloorReport,
    /// TCP, both ends on one CPU.
    tcp_pinned: FloorReport,
    /// Unix socket, placed by the scheduler.
    unix: FloorReport,
    /// Unix socket, both ends on one CPU.
    unix_pinned: FloorReport,
}

/// `a / b`, or 0 when `b` is 0 (a run without fetches has no per-fetch figures).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn sample(traversal: &str, prefetch: &str, run: u32, r: RunReport, f: &Floors) -> Sample {
    let fetches = r.fetches as f64;
    // Pages that came: one a round trip, plus those prefetched with it (a read-ahead's own page
    // is among its prefetched ones, and its round trip among the fetches).
    let pages = (r.fetches + r.pages_prefetched).saturating_sub(r.reads_ahead) as f64;
    let v = [
        fetches,
        r.pages_prefetched as f64,
        r.prefetch_used as f64,
        r.prefetch_evicted_unused as f64,
        r.elapsed_s,
        r.fetch_s,
        ratio(r.fetch_s * 1e6, fetches),
        r.fetch_us_p50,
        r.fetch_us_p99,
        r.conversion_s,
        ratio(r.conversion_s * 1e6, pages),
        ratio(r.conversion_s * 1e9, r.objects_installed as f64),
        r.replacement_s,
        ratio(r.replacement_s * 1e6, fetches),
        ratio(r.conversion_s, r.fetch_s),
        ratio(r.replacement_s, r.fetch_s),
        f.tcp.p50_us,
        f.tcp.p99_us,
        f.tcp_pinned.p50_us,
        f.tcp_pinned.p99_us,
        f.unix.p50_us,
        f.unix.p99_us,
        f.unix_pinned.p50_us,
        f.unix_pinned.p99_us,
        ratio(r.fetch_us_p50, f.tcp.p50_us),
        ratio(r.fetch_us_p99, f.tcp.p99_us),
        ratio(r.fetch_us_p50, f.tcp_pinned.p50_us),
    ];
    let values = FIELDS.iter().zip(v).map(|(&(name, _), x)| (name, x)).collect();
    Sample {
        traversal: traversal.to_string(),
        prefetch: prefetch.to_string(),
        run,
        report: r,
        values,
    }
}

/// Several clients running one cold traversal at once, with the floor of as many ping-pongs.
#[derive(Debug, Clone, Serialize)]
struct Concurrent {
    /// The traversal.
    traversal: String,
    /// Which run (from 1).
    run: u32,
    /// Clients at once.
    clients: usize,
    /// Fetches of all clients.
    fetches: u64,
    /// The clients' fetch latencies together: median, microseconds.
    fetch_us_p50: f64,
    /// And 99th percentile.
    fetch_us_p99: f64,
    /// The floor with as many clients over TCP: median and 99th percentile, microseconds.
    floor_tcp_us_p50: f64,
    /// The floor's 99th percentile.
    floor_tcp_us_p99: f64,
    /// The same floor with each client and its server pinned to one CPU: median.
    floor_tcp_pinned_us_p50: f64,
    /// `fetch_us_p50 / floor_tcp_us_p50` (goal <= 1.5).
    fetch_p50_to_tcp_floor: f64,
    /// `fetch_us_p99 / floor_tcp_us_p99` (goal <= 1.5).
    fetch_p99_to_tcp_floor: f64,
}

/// Where the traversals reach `engine`: a loopback TCP server in this process (returned, to
/// keep it running) or the engine itself.
pub(crate) fn serve_over(
    over: Over,
    engine: &std::sync::Arc<thor_server::Engine>,
) -> anyhow::Result<(Option<thor_net::Server>, Endpoint)> {
    Ok(match over {
        Over::Tcp => {
            let s = thor_net::Server::start("127.0.0.1:0", engine.clone(), Default::default())
                .context("starting the loopback server")?;
            let addr = s.local_addr().to_string();
            (Some(s), Endpoint::Tcp { addr, token: Vec::new() })
        }
        Over::Embedded => (None, Endpoint::Embedded(engine.clone())),
    })
}

/// The median and range of a figure over the runs.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// The median and range of `xs` (all zero for none).
pub(crate) fn spread(mut xs: Vec<f64>) -> Spread {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let median = match n {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    };
    Spread {
        median,
        min: xs.first().copied().unwrap_or(0.0),
        max: xs.last().copied().unwrap_or(0.0),
    }
}

/// A traversal's figures over the runs, for one prefetch setting.
#[derive(Debug, Clone, Serialize)]
struct Summary {
    traversal: String,
    prefetch: String,
    runs: usize,
    #[serde(flatten)]
    fields: BTreeMap<&'static str, Spread>,
}

fn summarize(traversal: &str, prefetch: &str, samples: &[Sample]) -> Summary {
    let mine: Vec<&Sample> =
        samples.iter().filter(|s| s.traversal == traversal && s.prefetch == prefetch).collect();
    let fields = FIELDS
        .iter()
        .map(|&(name, _)| (name, spread(mine.iter().map(|s| s.values[name]).collect())))
        .collect();
    Summary {
        traversal: traversal.to_string(),
        prefetch: prefetch.to_string(),
        runs: mine.len(),
        fields,
    }
}

/// The prefetch settings to compare: each page count with each hint and read-ahead choice (0
/// once, as off; read-ahead only where it applies), in the order given; none given: the
/// session's default with each hint.
fn settings(
    pages: &[u16],
    hints: &[thor_wire::PrefetchHint],
    read_ahead: &[bool],
) -> Vec<PrefetchSetting> {
    let pages: Vec<Option<u16>> =
        if pages.is_empty() { vec![None] } else { pages.iter().map(|&p| Some(p)).collect() };
    let mut out = Vec::new();
    for &pages in &pages {
        for &hint in hints {
            for &read_ahead in read_ahead {
                let mut s = if pages == Some(0) {
                    PrefetchSetting::OFF
                } else {
                    PrefetchSetting { pages, hint, read_ahead }
                };
                s.read_ahead = s.reads_ahead();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

pub fn penalty(a: PenaltyArgs) -> anyhow::Result<()> {
    let policy = policy(&a.policy)?;
    if a.figures {
        return figures(&a, policy);
    }
    let workloads = traversals(&a.traversals)?;
    let (engine, _disk) = open_database_with(&a.dir, thor_server::EngineOptions::default(), false)?;
    let page_bytes = engine.page_size();
    let (server, endpoint) = serve_over(a.over, &engine)?;
    let settings = settings(&a.prefetch, &a.prefetch_hint, &a.read_ahead);
    if settings.is_empty() {
        bail!("give at least one prefetch hint");
    }
    let cfg = |w: Workload, prefetch: PrefetchSetting| RunConfig {
        workload: w,
        policy,
        cache_bytes: (a.cache_mb * MIB) as usize,
        hot: false,
        seed: a.seed,
        background_replacement: !a.foreground,
        repeat: 1,
        commit_every: 0,
        prefetch,
    };
    let traverse_with = |w: Workload, p: PrefetchSetting| {
        run(&endpoint, &cfg(w, p), NoRunTrace).with_context(|| format!("running {}", w.name()))
    };
    let traverse = |w: Workload| traverse_with(w, settings[0]);
    // Warm the server's page cache and the OS's with every page the traversals read.
    let t = Instant::now();
    for &w in &workloads {
        eprintln!("warming the server with {} ...", w.name());
        traverse(w)?;
    }
    eprintln!("warm in {:.1} s", t.elapsed().as_secs_f64());
    let floor = |socket, clients, pin| {
        crate::floor::measure(&FloorConfig {
            socket,
            reply_bytes: page_bytes,
            round_trips: a.round_trips,
            warmup: a.warmup,
            clients,
            pin,
        })
        .with_context(|| format!("measuring the {} floor", socket.name()))
    };
    let mut floors = Vec::new();
    let mut samples = Vec::new();
    let mut concurrent = Vec::new();
    for r in 1..=a.runs {
        eprintln!("run {r}/{}: floor ({} round trips each) ...", a.runs, a.round_trips);
        let f = Floors {
            tcp: floor(Socket::Tcp, 1, false)?,
            tcp_pinned: floor(Socket::Tcp, 1, true)?,
            unix: floor(Socket::Unix, 1, false)?,
            unix_pinned: floor(Socket::Unix, 1, true)?,
        };
        for &w in &workloads {
            for &p in &settings {
                eprintln!("run {r}/{}: cold {}, prefetch {} ...", a.runs, w.name(), p.label());
                let report = traverse_with(w, p)?;
                // Labelled as the session applied it (the default differs by transport).
                let label = report.prefetch.label();
                samples.push(sample(w.name(), &label, r, report, &f));
            }
        }
        floors.push(json!({ "run": r, "floors": f }));
        if a.clients > 1 {
            eprintln!("run {r}/{}: floor with {} clients ...", a.runs, a.clients);
            let tcp_n = floor(Socket::Tcp, a.clients, false)?;
            let pinned_n = floor(Socket::Tcp, a.clients, true)?;
            for &w in &workloads {
                eprintln!(
                    "run {r}/{}: cold {}, {} clients at once ...",
                    a.runs,
                    w.name(),
                    a.clients
                );
                concurrent.push(at_once(w, r, a.clients, &traverse, &tcp_n, &pinned_n)?);
            }
        }
    }
    if let Some(s) = server {
        s.shutdown().context("stopping the loopback server")?;
    }
    let (labels, summaries) = summaries(&workloads, &samples);
    let settings = settings_json(&a, page_bytes, &labels);
    if let Some(dir) = &a.out {
        write_out(dir, &samples, &summaries)?;
    }
    if a.json {
        print_json(&settings, &floors, &samples, &summaries, &concurrent)?;
    } else {
        print!("{}", table(&a, page_bytes, &summaries));
        print!("{}", concurrent_table(&concurrent));
    }
    Ok(())
}

/// The `--traversals`, parsed; at least one.
fn traversals(names: &[String]) -> anyhow::Result<Vec<Workload>> {
    let workloads = names
        .iter()
        .map(|t| t.parse::<Workload>().with_context(|| format!("traversal {t:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if workloads.is_empty() {
        bail!("give at least one traversal");
    }
    Ok(workloads)
}

/// The prefetch settings as the sessions applied them (in the order they ran), and the
/// summary of each traversal under each.
fn summaries(workloads: &[Workload], samples: &[Sample]) -> (Vec<String>, Vec<Summary>) {
    let names: Vec<&str> = workloads.iter().map(|w| w.name()).collect();
    // The settings as the sessions applied them, in the order they ran.
    let mut labels: Vec<String> = Vec::new();
    for s in samples {
        if !labels.contains(&s.prefetch) {
            labels.push(s.prefetch.clone());
        }
    }
    let summaries: Vec<Summary> = names
        .iter()
        .flat_map(|t| labels.iter().map(move |l| (t, l)))
        .map(|(t, l)| summarize(t, l, samples))
        .collect();
    (labels, summaries)
}

/// `--json`: the whole run as one document on stdout.
fn print_json(
    settings: &serde_json::Value,
    floors: &[serde_json::Value],
    samples: &[Sample],
    summaries: &[Summary],
    concurrent: &[Concurrent],
) -> anyhow::Result<()> {
    let reports: Vec<_> =
        samples.iter().map(|s| json!({ "run": s.run, "report": s.report })).collect();
    let v = json!({
        "settings": settings,
        "fields": FIELDS.iter().map(|(n, d)| json!({ "name": n, "meaning": d })).collect::<Vec<_>>(),
        "floors": floors,
        "samples": samples,
        "summary": summaries,
        "concurrent": concurrent,
        "reports": reports,
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// `--figures`: the HAC paper's Figures 9 to 11 instead of the floor comparison.
fn figures(a: &PenaltyArgs, policy: thor_client::PolicyConfig) -> anyhow::Result<()> {
    crate::oo7_penalty_figures::figures(&crate::oo7_penalty_figures::FiguresConfig {
        at: &a.at,
        policy,
        policy_name: &a.policy,
        // The paper's Figure 9 is of foreground replacement (HAC-FG): the worst case.
        foreground: true,
        runs: a.runs,
        seed: a.seed,
        over: a.over,
        direct_reads: a.direct_reads,
        server_cache_mb: a.server_cache_mb,
        out: a.out.as_deref(),
        json: a.json,
        dir: &a.dir,
    })
}

/// The settings a penalty run reports beside its results.
fn settings_json(a: &PenaltyArgs, page_bytes: usize, labels: &[String]) -> serde_json::Value {
    json!({
        "dir": a.dir.display().to_string(),
        "policy": a.policy,
        "cache_mb": a.cache_mb,
        "over": a.over,
        "runs": a.runs,
        "page_bytes": page_bytes,
        "round_trips": a.round_trips,
        "warmup": a.warmup,
        "seed": a.seed,
        "background_replacement": !a.foreground,
        "prefetch": labels,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    })
}

/// Runs `w` cold in `clients` sessions at once (one thread each) and merges their fetch
/// latencies.
fn at_once(
    w: Workload,
    run: u32,
    clients: usize,
    traverse: &(dyn Fn(Workload) -> anyhow::Result<RunReport> + Sync),
    floor: &FloorReport,
    pinned: &FloorReport,
) -> anyhow::Result<Concurrent> {
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients).map(|_| scope.spawn(|| traverse(w))).collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?)
            .collect::<anyhow::Result<Vec<RunReport>>>()
    })?;
    let mut all = thor_client::LatencyHistogram::new();
    for r in &reports {
        all.merge(&r.fetch_latency);
    }
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let (p50, p99) = (us(all.percentile(0.5)), us(all.percentile(0.99)));
    Ok(Concurrent {
        traversal: w.name().to_string(),
        run,
        clients,
        fetches: reports.iter().map(|r| r.fetches).sum(),
        fetch_us_p50: p50,
        fetch_us_p99: p99,
        floor_tcp_us_p50: floor.p50_us,
        floor_tcp_us_p99: floor.p99_us,
        floor_tcp_pinned_us_p50: pinned.p50_us,
        fetch_p50_to_tcp_floor: ratio(p50, floor.p50_us),
        fetch_p99_to_tcp_floor: ratio(p99, floor.p99_us),
    })
}

/// The several-clients section: median (min-max) over the runs per traversal.
fn concurrent_table(c: &[Concurrent]) -> String {
    let mut out = String::new();
    let Some(first) = c.first() else { return out };
    let _ = writeln!(
        out,
        "\n{} clients at once, each its own session and connection; TCP floor with {} ping-pongs at once",
        first.clients, first.clients
    );
    let _ = writeln!(
        out,
        "{:<10} {:>24} {:>24} {:>24} {:>24} {:>24} {:>20}",
        "traversal",
        "fetch p50 us",
        "fetch p99 us",
        "floor p50 us",
        "floor p99 us",
        "pinned floor p50 us",
        "p50/floor"
    );
    // The traversals in the order they ran.
    let mut names: Vec<&str> = Vec::new();
    for x in c {
        if !names.contains(&x.traversal.as_str()) {
            names.push(&x.traversal);
        }
    }
    for t in names {
        let mine: Vec<&Concurrent> = c.iter().filter(|x| x.traversal == t).collect();
        let n = mine.len();
        let col = |f: fn(&Concurrent) -> f64, prec| {
            cell(&spread(mine.iter().map(|x| f(x)).collect()), prec, n)
        };
        let _ = writeln!(
            out,
            "{t:<10} {:>24} {:>24} {:>24} {:>24} {:>24} {:>20}",
            col(|x| x.fetch_us_p50, 1),
            col(|x| x.fetch_us_p99, 1),
            col(|x| x.floor_tcp_us_p50, 1),
            col(|x| x.floor_tcp_us_p99, 1),
            col(|x| x.floor_tcp_pinned_us_p50, 1),
            col(|x| x.fetch_p50_to_tcp_floor, 2),
        );
    }
    out
}

/// A cell: the median, and the range when there was more than one run.
fn cell(s: &Spread, prec: usize, runs: usize) -> String {
    if runs > 1 {
        format!("{:.prec$} ({:.prec$}-{:.prec$})", s.median, s.min, s.max)
    } else {
        format!("{:.prec$}", s.median)
    }
}

fn table(a: &PenaltyArgs, page_bytes: usize, sums: &[Summary]) -> String {
    let mut out = String::new();
    let runs = sums.first().map_or(0, |s| s.runs);
    let _ = writeln!(
        out,
        "cold traversals, {} {} MiB, over {}, {} KiB pages; median (min-max) of {} run(s)",
        a.policy,
        a.cache_mb,
        match a.over {
            Over::Tcp => "loopback TCP",
            Over::Embedded => "the in-process transport",
        },
        page_bytes / 1024,
        runs
    );
    // Columns: (header, field, decimals).
    let cols: [(&str, &str, usize); 19] = [
        ("elapsed ms", "elapsed_s", 1),
        ("fetches", "fetches", 0),
        ("prefetched", "pages_prefetched", 0),
        ("used", "prefetch_used", 0),
        ("evicted unused", "prefetch_evicted_unused", 0),
        ("fetch ms", "fetch_s", 1),
        ("fetch us", "fetch_us_mean", 1),
        ("p50 us", "fetch_us_p50", 1),
        ("p99 us", "fetch_us_p99", 1),
        ("conv us/page", "conversion_us_per_page", 1),
        ("conv ns/obj", "conversion_ns_per_object", 0),
        ("repl us/fetch", "replacement_us_per_fetch", 1),
        ("conv/fetch", "conversion_to_fetch", 2),
        ("tcp floor p50", "floor_tcp_us_p50", 1),
        ("pinned p50", "floor_tcp_pinned_us_p50", 1),
        ("unix floor p50", "floor_unix_us_p50", 1),
        ("p50/floor", "fetch_p50_to_tcp_floor", 2),
        ("p99/floor p99", "fetch_p99_to_tcp_floor", 2),
        ("p50/pinned", "fetch_p50_to_pinned_tcp_floor", 2),
    ];
    let rows: Vec<Vec<String>> = sums
        .iter()
        .map(|s| {
            let mut row = vec![s.traversal.clone(), s.prefetch.clone()];
            for &(_, f, prec) in &cols {
                let mut sp = s.fields[f];
                if f == "fetch_s" || f == "elapsed_s" {
                    sp = Spread { median: sp.median * 1e3, min: sp.min * 1e3, max: sp.max * 1e3 };
                }
                row.push(cell(&sp, prec, s.runs));
            }
            row
        })
        .collect();
    let header: Vec<String> = ["traversal", "prefetch"]
        .into_iter()
        .chain(cols.iter().map(|c| c.0))
        .map(String::from)
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r[i].len()).chain([header[i].len()]).max().unwrap_or(0))
        .collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 2 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  "));
    }
    if let Some(s) = sums.first() {
        let _ = writeln!(
            out,
            "\nloopback floor ({page_bytes}-byte reply to a 16-byte request, {} round trips, one client)",
            a.round_trips
        );
        for (name, p50, p99) in [
            ("tcp", "floor_tcp_us_p50", "floor_tcp_us_p99"),
            ("tcp, pinned", "floor_tcp_pinned_us_p50", "floor_tcp_pinned_us_p99"),
            ("unix", "floor_unix_us_p50", "floor_unix_us_p99"),
            ("unix, pinned", "floor_unix_pinned_us_p50", "floor_unix_pinned_us_p99"),
        ] {
            let _ = writeln!(
                out,
                "  {name:<12} p50 {} us   p99 {} us",
                cell(&s.fields[p50], 1, s.runs),
                cell(&s.fields[p99], 1, s.runs)
            );
        }
    }
    out
}

/// Writes samples.csv (every run), summary.csv (median, min and max per figure) and a bar
/// chart of the medians that are microseconds.
fn write_out(dir: &std::path::Path, samples: &[Sample], sums: &[Summary]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut csv = String::from("traversal,prefetch,run");
    for (f, _) in FIELDS {
        let _ = write!(csv, ",{f}");
    }
    csv.push('\n');
    for s in samples {
        let _ = write!(csv, "{},{},{}", s.traversal, s.prefetch, s.run);
        for (f, _) in FIELDS {
            let _ = write!(csv, ",{}", s.values[f]);
        }
        csv.push('\n');
    }
    let path = dir.join("samples.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let mut csv = String::from("traversal,prefetch,field,median,min,max\n");
    for s in sums {
        for (f, _) in FIELDS {
            let sp = s.fields[f];
            let _ = writeln!(
                csv,
                "{},{},{f},{},{},{}",
                s.traversal, s.prefetch, sp.median, sp.min, sp.max
            );
        }
    }
    let path = dir.join("summary.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let bars = [
        ("fetch p50", "fetch_us_p50"),
        ("fetch p99", "fetch_us_p99"),
        ("TCP floor p50", "floor_tcp_us_p50"),
        ("TCP floor p50, pinned", "floor_tcp_pinned_us_p50"),
        ("Unix floor p50", "floor_unix_us_p50"),
        ("conversion per page", "conversion_us_per_page"),
        ("replacement per fetch", "replacement_us_per_fetch"),
    ];
    let series: Vec<(String, Vec<f64>)> = bars
        .iter()
        .map(|(n, f)| (n.to_string(), sums.iter().map(|s| s.fields[f].median).collect()))
        .collect();
    let groups: Vec<String> = sums
        .iter()
        .map(|s| {
            if s.prefetch == "off" {
                s.traversal.clone()
            } else {
                format!("{} {}", s.traversal, s.prefetch)
            }
        })
        .collect();
    let spec = ChartSpec {
        title: "Miss penalty per fetch against the loopback floor (medians)".into(),
        y_label: "microseconds".into(),
        ..ChartSpec::default()
    };
    bar_chart(&dir.join("penalty"), &spec, &groups, &series)?;
    Ok(())
}
