//! `thor oo7 multi`: several OO7 clients at once, and the exclusive server page cache study.
//!
//! ```text
//!   thor oo7 multi --dir DIR --traversal NAME --clients 1,2,3 --mode private|shared
//!                  [--seconds S | --repeat R] [--server ADDR]
//!                  [--page-cache inclusive,exclusive --server-cache-mb 1,2,4 [--runs K]
//!                   [--direct-io] [--out DIR] [--trace-out DIR] [--sim]]
//! ```
//!
//! Every run gets a freshly opened server (with `--dir`, in this process on a loopback TCP
//! port), so no run starts with pages a previous one left in the server's page cache.
//!
//! # The server cache study (issue 13, DEMOTE)
//!
//! With `--page-cache` and/or `--server-cache-mb` the runs form a grid: every server cache size
//! times every placement times every client count, `--runs` times each. Per point the table
//! shows what the *server* did over the timed phase (its counters are read at the gate, when
//! every client has warmed up, and at the end): pages fetched, the fraction served from the
//! page cache, the pages read from the page file for fetches (with `--direct-io`, device reads:
//! the OS page cache is bypassed), the bytes of pages clients demoted into it, and the clients'
//! mean time per traversal (median over the runs, with min and max). The speedup column is
//! inclusive's median time over exclusive's at the same size and client count.
//!
//! `--sim` replays each point's recorded page visits ([`thor_oo7::multi::PageTrace`]) through
//! the cache-hierarchy simulator with the live run's sizes (each client's page frames, the
//! server's page cache in pages) and the matching design (inclusive: `lru-lru-none`;
//! exclusive: `lru-mru-demote`), and prints its counts beside the live ones. `--trace-out`
//! writes the same visits as CSV files that `thor sim demote --trace` replays, and prints the
//! command.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use thor_oo7::Op;
use thor_oo7::experiment::Endpoint;
use thor_oo7::multi::{
    Length, MultiConfig, MultiReport, Progress, Sharing, check_modules, database_modules,
    run_multi_with,
};
use thor_server::CacheMode;
use thor_server::EngineOptions;
use thor_storage::DirectReadStats;
use thor_wire::ServerStats;

use crate::oo7::{MIB, open_database_with, policy};
use crate::plot::{ChartSpec, Legend, Series, line_chart};

/// `thor oo7 multi`.
#[derive(Debug, Args)]
pub struct MultiArgs {
    /// The database directory. A server is started in this process on a loopback TCP port,
    /// and every client connects to it over TCP, as to a `thor server`.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    dir: Option<PathBuf>,
    /// The address of a running `thor server` instead of --dir.
    #[arg(long, conflicts_with = "dir")]
    server: Option<String>,
    /// The server's token (with --server).
    #[arg(long, default_value = "")]
    token: String,
    /// The traversal every client runs, one transaction each time: t1, t1-, t1+, t2a, t2b,
    /// t2c, t3a, t3b, t3c, t4, t5 or t6 (those that walk a module's assembly tree).
    #[arg(long)]
    traversal: String,
    /// Client counts, comma-separated: one run per count, each client a thread with its own
    /// session and connection.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    clients: Vec<usize>,
    /// private: client i traverses module i (the database needs as many modules as clients:
    /// `thor oo7 load --modules N`); shared: every client traverses module 0.
    #[arg(long, default_value = "private")]
    mode: String,
    /// Length of each run's timed phase in seconds, after every client's cold warm-up
    /// traversal (default 5 unless --repeat is given). The traversal running at the end is
    /// finished and counted.
    #[arg(long, conflicts_with = "repeat", value_parser = crate::positive_seconds, allow_negative_numbers = true)]
    seconds: Option<f64>,
    /// Timed traversals per client instead of a time (after the cold warm-up traversal).
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true)]
    repeat: Option<u32>,
    /// Each client's cache manager: hac or fpc.
    #[arg(long, default_value = "hac")]
    policy: String,
    /// Each client's cache size in MiB (frames and tables; may be fractional).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true, default_value_t = 64.0)]
    cache_mb: f64,
    /// Further pages each fetch asks for (prefetch; 0, the default here: one page per fetch,
    /// as `--sim`'s replay and the DEMOTE study count them).
    #[arg(long, default_value_t = 0)]
    prefetch: u16,
    /// How the server chooses prefetched pages: next or refs.
    #[arg(long, default_value = "next")]
    prefetch_hint: thor_wire::PrefetchHint,
    /// Replace in the foreground (HAC-FG) instead of while fetches are on the wire.
    #[arg(long)]
    foreground: bool,
    /// Seed of the random backoff after conflicts (client i uses stream i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Server page cache placements to compare, comma-separated: inclusive (LRU: a page read
    /// for a client becomes the most recently used) and/or exclusive (DEMOTE: it goes next,
    /// and pages clients drop are demoted into the cache). With --dir only.
    #[arg(long, value_enum, value_delimiter = ',', requires = "dir")]
    page_cache: Vec<Placement>,
    /// Server page cache sizes in MiB, comma-separated: one run per size and placement. With
    /// --dir only [default: the server's default size].
    #[arg(long, value_delimiter = ',', value_parser = crate::positive_size, allow_negative_numbers = true, requires = "dir")]
    server_cache_mb: Vec<f64>,
    /// Runs of every point (each on a fresh server); times are the median, with min and max.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 1)]
    runs: u32,
    /// Write the table as CSV and JSON, and plots of hit fraction, device reads and time
    /// against the server cache size, into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Record every client's page visits and write each point's (first run's) as a CSV trace
    /// `thor sim demote --trace` replays, into this directory (created if missing).
    #[arg(long, value_name = "DIR", requires = "dir")]
    trace_out: Option<PathBuf>,
    /// Read the database around the OS page cache (O_DIRECT), so that a server page-cache miss
    /// is a device read, as the study assumes; needs a file system that supports it (ext4,
    /// xfs; not tmpfs). With --dir only.
    #[arg(long, requires = "dir")]
    direct_io: bool,
    /// Record every client's page visits and replay each point's (first run's) through the
    /// cache-hierarchy simulator at the live sizes; print its counts beside the live ones.
    #[arg(long, requires = "dir")]
    sim: bool,
}

/// `--page-cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Placement {
    /// LRU.
    Inclusive,
    /// DEMOTE's placement, and demotions from clients.
    Exclusive,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::Inclusive => "inclusive",
            Placement::Exclusive => "exclusive",
        }
    }

    fn mode(self) -> CacheMode {
        match self {
            Placement::Inclusive => CacheMode::Inclusive,
            Placement::Exclusive => CacheMode::Exclusive,
        }
    }

    /// The simulator's design for this placement (client caches are LRU), by the name
    /// `thor sim demote --designs` takes: `Design::BASELINE` and `Design::PROPOSED`.
    fn design(self) -> &'static str {
        match self {
            Placement::Inclusive => "LRU-LRU-none",
            Placement::Exclusive => "LRU-MRU-demote",
        }
    }
}

/// Seconds of a run's timed phase when neither --seconds nor --repeat is given.
const MULTI_SECONDS_DEFAULT: f64 = 5.0;

/// `thor oo7 multi`.
pub fn multi(a: MultiArgs) -> anyhow::Result<()> {
    let op: Op = a.traversal.parse()?;
    let sharing: Sharing = a.mode.parse()?;
    let length = match (a.seconds, a.repeat) {
        (_, Some(r)) => Length::Repeat(r),
        (Some(s), None) => Length::Seconds(s),
        (None, None) => Length::Seconds(MULTI_SECONDS_DEFAULT),
    };
    let pc = policy(&a.policy)?;
    if a.sim && !cfg!(feature = "sim") {
        anyhow::bail!(crate::NO_SIM);
    }
    let record = a.sim || a.trace_out.is_some();
    let cfg = |clients, record_pages| MultiConfig {
        op,
        clients,
        sharing,
        length,
        policy: pc,
        cache_bytes: (a.cache_mb * MIB) as usize,
        background_replacement: !a.foreground,
        seed: a.seed,
        record_pages,
        recovery: Default::default(),
        prefetch: thor_oo7::experiment::PrefetchSetting {
            pages: Some(a.prefetch),
            hint: a.prefetch_hint,
            read_ahead: false,
        },
    };
    if a.clients.is_empty() {
        bail!("--clients needs at least one count");
    }
    for &n in &a.clients {
        cfg(n, false).validate()?;
    }
    for dir in [&a.out, &a.trace_out].into_iter().flatten() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let sizes: Vec<Option<f64>> = if a.server_cache_mb.is_empty() {
        vec![None]
    } else {
        a.server_cache_mb.iter().map(|&m| Some(m)).collect()
    };
    let placements: Vec<Option<Placement>> = if a.page_cache.is_empty() {
        vec![None]
    } else {
        a.page_cache.iter().map(|&p| Some(p)).collect()
    };
    let grid = sizes.len() * placements.len() > 1 || sizes[0].is_some() || placements[0].is_some();
    let mut points = Vec::new();
    for &cache_mb in &sizes {
        for &placement in &placements {
            for &clients in &a.clients {
                let mut point = GridPoint::new(cache_mb, placement, clients);
                for run in 0..a.runs {
                    let c = cfg(clients, record && run == 0);
                    let what = point.label(run, a.runs);
                    let (r, server) = run_point(&a, &c, cache_mb, placement, &what)?;
                    point.add(r, server);
                }
                if record {
                    point.replay(&a, op)?;
                }
                points.push(point);
            }
        }
    }
    let even: Vec<(Option<f64>, Option<f64>)> = points
        .iter()
        .map(|p| (break_even_mbit_s(p, &points), break_even_from_reads(p, &points)))
        .collect();
    for (p, (t, r)) in points.iter_mut().zip(even) {
        p.break_even_mbit_s = t;
        p.break_even_reads_mbit_s = r;
    }
    if a.json {
        let v = if grid {
            json!({ "points": points })
        } else {
            json!({ "runs": points.iter().flat_map(|p| &p.runs).collect::<Vec<_>>() })
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let runs: Vec<MultiReport> = points.iter().flat_map(|p| p.runs.clone()).collect();
        print!("{}", multi_table(&runs));
        if grid || record {
            print!("{}", grid_table(&points));
        }
        if a.sim {
            print!("{}", sim_table(&points));
        }
    }
    if let Some(out) = &a.out {
        write_grid(out, &points, op, sharing)?;
    }
    Ok(())
}

/// Runs one point once: on a freshly opened server with `--dir` (the page cache `cache_mb` and
/// `placement` say, or the defaults), or on the server `--server` names. Returns the run and,
/// for a server in this process, what that server did over the timed phase.
fn run_point(
    a: &MultiArgs,
    cfg: &MultiConfig,
    cache_mb: Option<f64>,
    placement: Option<Placement>,
    what: &str,
) -> anyhow::Result<(MultiReport, Option<ServerDelta>)> {
    let length = cfg.length;
    let bar = multi_progress(cfg.clients, length);
    bar.set_prefix(what.to_string());
    let context = || {
        format!("{} with {} {} client(s), {what}", cfg.op.name(), cfg.clients, cfg.sharing.name())
    };
    let Some(dir) = &a.dir else {
        let addr = a.server.clone().context("give --dir or --server")?;
        let endpoint = Endpoint::Tcp { addr, token: a.token.as_bytes().to_vec() };
        let modules = database_modules(&endpoint).context("reading the database's modules")?;
        check_modules(modules, cfg.clients, cfg.sharing)?;
        let r = run_multi_with(&endpoint, cfg, &mut |p| show_progress(&bar, length, p), &|| {})
            .with_context(context)?;
        bar.finish_and_clear();
        return Ok((r, None));
    };
    let mut opts = EngineOptions::default();
    if let Some(mb) = cache_mb {
        opts.page_cache_bytes = (mb * MIB) as usize;
    }
    if let Some(p) = placement {
        opts.page_cache_mode = p.mode();
    }
    let cache_bytes = opts.page_cache_bytes;
    let (engine, disk) = open_database_with(dir, opts, a.direct_io)?;
    let server = thor_net::Server::start("127.0.0.1:0", engine.clone(), Default::default())
        .context("starting the loopback server")?;
    let endpoint = Endpoint::Tcp { addr: server.local_addr().to_string(), token: Vec::new() };
    let modules = database_modules(&endpoint).context("reading the database's modules")?;
    check_modules(modules, cfg.clients, cfg.sharing)?;
    let at_gate: Mutex<Option<(ServerStats, DirectReadStats)>> = Mutex::new(None);
    let at_start = || {
        let now = (engine.server_stats(), disk.direct_read_stats());
        *at_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
    };
    let r = run_multi_with(&endpoint, cfg, &mut |p| show_progress(&bar, length, p), &at_start)
        .with_context(context)?;
    bar.finish_and_clear();
    let after = engine.server_stats();
    let device_after = disk.direct_read_stats();
    server.shutdown().context("stopping the loopback server")?;
    let before = at_gate.into_inner().unwrap_or_else(|e| e.into_inner());
    let cache_pages = cache_bytes / engine.page_size();
    // The engine (and with it the directory lock) goes when the last handle does: here.
    drop(engine);
    drop(disk);
    let delta = before.map(|(b, device_before)| {
        let mut d = ServerDelta::between(&b, &after, cache_pages);
        if a.direct_io {
            let reads = device_after.reads.saturating_sub(device_before.reads);
            let ns = device_after.read_ns.saturating_sub(device_before.read_ns);
            d.device_reads = Some(reads);
            d.device_read_us = (reads > 0).then(|| ns as f64 / reads as f64 / 1000.0);
        }
        d
    });
    Ok((r, delta))
}

/// What the server did over a run's timed phase: its counters at the end less those at the
/// gate.
#[derive(Debug, Clone, Default, Serialize)]
struct ServerDelta {
    /// Pages the page cache holds at most.
    cache_pages: usize,
    /// Fetches the server answered.
    fetches: u64,
    /// Fetches that missed the page cache and waited for a read of the page file (a fetch
    /// that finds the page being read for another client joins that read).
    reads: u64,
    /// Reads the disk made around the OS page cache (with --direct-io): device reads, all
    /// files. Fewer than `reads` when fetches joined reads in flight.
    device_reads: Option<u64>,
    /// The mean time of those device reads, in microseconds.
    device_read_us: Option<f64>,
    /// Fetches answered from the page cache: `fetches - reads`.
    hits: u64,
    /// `hits / fetches` (0 without fetches).
    hit_fraction: f64,
    /// Pages clients reported demoted.
    demote_notices: u64,
    /// Demotions of pages the cache held: reordered, no data.
    demotions_reordered: u64,
    /// Demoted pages whose bytes the server asked for.
    demotions_wanted: u64,
    /// Demoted pages stored in the cache.
    demotions_stored: u64,
    /// Demoted pages refused.
    demotions_refused: u64,
    /// Bytes of demoted pages received.
    demoted_bytes: u64,
    /// Frame bytes sent to clients.
    bytes_sent: u64,
}

impl ServerDelta {
    fn between(b: &ServerStats, e: &ServerStats, cache_pages: usize) -> ServerDelta {
        let d = |f: fn(&ServerStats) -> u64| f(e).saturating_sub(f(b));
        let fetches = d(|s| s.fetches);
        let reads = d(|s| s.fetch_reads);
        let hits = fetches.saturating_sub(reads);
        ServerDelta {
            cache_pages,
            fetches,
            reads,
            device_reads: None,
            device_read_us: None,
            hits,
            hit_fraction: if fetches == 0 { 0.0 } else { hits as f64 / fetches as f64 },
            demote_notices: d(|s| s.demote_notices),
            demotions_reordered: d(|s| s.demotions_reordered),
            demotions_wanted: d(|s| s.demotions_wanted),
            demotions_stored: d(|s| s.demotions_stored),
            demotions_refused: d(|s| s.demotions_refused),
            demoted_bytes: d(|s| s.demoted_bytes),
            bytes_sent: d(|s| s.bytes_sent),
        }
    }
}

/// The simulator's counts for a point's recorded visits, beside the live ones.
#[derive(Debug, Clone, Serialize)]
struct SimCounts {
    /// The design replayed.
    design: String,
    /// Blocks per client cache: each live client's page frames at the end of the timed phase,
    /// less the frame kept free for the next fetch with background replacement (the fewest of
    /// them here; each client is replayed at its own).
    client_blocks: usize,
    /// Each client's cache size in blocks.
    client_sizes: Vec<usize>,
    /// Blocks in the array (server) cache: the live page cache's pages.
    array_blocks: usize,
    /// Visits that warmed the caches uncounted (the clients' warm-ups).
    warmup: u64,
    /// Visits counted.
    requests: u64,
    /// Visits that missed the client caches: the live clients' fetches.
    client_misses: u64,
    /// Misses served by the array cache: the live server's page cache hits.
    array_hits: u64,
    /// Misses served by the disk: the live server's reads.
    disk_reads: u64,
    /// Demotions that carried a block to the array cache: the live server's stored ones.
    demotions_transferred: u64,
    /// Demotions of blocks the array cache held: the live server's reordered ones.
    demotions_reordered: u64,
}

/// One point of the grid, all its runs.
#[derive(Debug, Clone, Serialize)]
struct GridPoint {
    /// The server's page cache size (`None`: the default).
    server_cache_mb: Option<f64>,
    /// Its placement (`None`: the server's default).
    placement: Option<Placement>,
    /// Clients.
    clients: usize,
    /// Each run's mean time per traversal over its clients, in ms.
    ms_per_traversal: Vec<f64>,
    /// What the server did, per run (with --dir).
    server: Vec<ServerDelta>,
    /// The simulator's replay of the first run (with --sim).
    sim: Option<SimCounts>,
    /// The first run's trace file (with --trace-out).
    trace_file: Option<String>,
    /// For an exclusive point with an inclusive one at the same size and client count: the
    /// link bandwidth (Mbit/s) below which demotion stops paying ([`break_even_mbit_s`]).
    break_even_mbit_s: Option<f64>,
    /// The same from the device reads demotion saved and their measured cost, not from the
    /// traversal times ([`break_even_from_reads`]; with --direct-io).
    break_even_reads_mbit_s: Option<f64>,
    /// The runs.
    runs: Vec<MultiReport>,
}

impl GridPoint {
    fn new(server_cache_mb: Option<f64>, placement: Option<Placement>, clients: usize) -> Self {
        GridPoint {
            server_cache_mb,
            placement,
            clients,
            ms_per_traversal: Vec::new(),
            server: Vec::new(),
            sim: None,
            trace_file: None,
            break_even_mbit_s: None,
            break_even_reads_mbit_s: None,
            runs: Vec::new(),
        }
    }

    /// The progress bar's prefix for run `run` of `runs`.
    fn label(&self, run: u32, runs: u32) -> String {
        let mut s = format!("{} client(s)", self.clients);
        if let Some(p) = self.placement {
            let _ = write!(s, ", {}", p.name());
        }
        if let Some(mb) = self.server_cache_mb {
            let _ = write!(s, ", {mb} MiB");
        }
        if runs > 1 {
            let _ = write!(s, ", run {} of {runs}", run + 1);
        }
        s
    }

    fn add(&mut self, r: MultiReport, server: Option<ServerDelta>) {
        self.ms_per_traversal.push(ms_per_traversal(&r));
        self.server.extend(server);
        self.runs.push(r);
    }

    /// The median time per traversal, with min and max.
    fn time(&self) -> (f64, f64, f64) {
        let s = crate::oo7_penalty::spread(self.ms_per_traversal.clone());
        (s.median, s.min, s.max)
    }

    /// The server cache size as the tables show it.
    fn size_label(&self) -> String {
        self.server_cache_mb.map_or_else(|| "default".into(), |m| format!("{m}"))
    }

    /// The placement as the tables show it.
    fn placement_label(&self) -> &'static str {
        self.placement.map_or("default", Placement::name)
    }

    /// Writes the first run's page visits as a trace file (with --trace-out) and replays them
    /// through the simulator (with --sim).
    fn replay(&mut self, a: &MultiArgs, op: Op) -> anyhow::Result<()> {
        let Some(first) = self.runs.first() else { return Ok(()) };
        let Some(trace) = &first.page_trace else { return Ok(()) };
        let placement = self.placement.unwrap_or(Placement::Inclusive);
        // The pages a client's cache holds: its frames at the end of the timed phase (tables
        // grow, so the fewest it had), less the one a cache that replaces while fetches are on
        // the wire keeps free for the next fetch.
        let reserve = usize::from(!a.foreground);
        let sizes: Vec<usize> =
            first.per_client.iter().map(|c| c.frames.saturating_sub(reserve)).collect();
        let client_blocks = sizes.iter().copied().min().unwrap_or(0);
        let uniform = sizes.iter().all(|&b| b == client_blocks);
        let array_blocks = self.server.first().map_or(0, |s| s.cache_pages);
        let about = vec![
            format!(
                "thor oo7 multi: {} on {} modules, {} clients, {} {} MiB client caches ({client_blocks} frames)",
                op.name(),
                first.mode.name(),
                self.clients,
                first.policy,
                first.cache_bytes as f64 / MIB
            ),
            format!("server page cache: {} of {array_blocks} pages", placement.name()),
            format!("pages each client's cache holds, in client order: {sizes:?}"),
        ];
        let mut csv = Vec::new();
        trace.write_csv(&mut csv, &about)?;
        if let Some(dir) = &a.trace_out {
            let name = format!(
                "{}-{}-{}c.csv",
                placement.name(),
                self.server_cache_mb.map_or_else(|| "default".into(), |m| format!("{m}mb")),
                self.clients
            );
            let path = dir.join(name);
            std::fs::write(&path, &csv).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote {} page visits to {}; replay: thor sim demote --trace {} --warmup {} \
                 --client-blocks {client_blocks} --array-blocks {array_blocks} --designs {}{}",
                trace.visits.len(),
                path.display(),
                path.display(),
                trace.warmup,
                placement.design(),
                if uniform {
                    ""
                } else {
                    " (the clients' caches differ in size; --sim replays each at its own)"
                }
            );
            self.trace_file = Some(path.display().to_string());
        }
        if a.sim && client_blocks > 0 && array_blocks > 0 {
            self.sim =
                Some(replay(&csv, placement, client_blocks, array_blocks, trace.warmup, &sizes)?);
        }
        Ok(())
    }
}

/// Replays one point's recorded page visits (`csv`) through the cache-hierarchy simulator at
/// the live sizes.
#[cfg(feature = "sim")]
fn replay(
    csv: &[u8],
    placement: Placement,
    client_blocks: usize,
    array_blocks: usize,
    warmup: u64,
    sizes: &[usize],
) -> anyhow::Result<SimCounts> {
    use thor_cachesim::cost::Served;
    use thor_cachesim::hierarchy::{Demotion, Design};
    use thor_cachesim::run::{IndexKind, RunConfig as SimConfig, simulate_sized};
    use thor_cachesim::trace::Trace;
    let t = Trace::parse_csv(std::io::Cursor::new(csv), Path::new("the recorded run"))?;
    let design = match placement {
        Placement::Inclusive => Design::BASELINE,
        Placement::Exclusive => Design::PROPOSED,
    };
    let config = SimConfig {
        design,
        client_blocks,
        array_blocks,
        warmup_requests: warmup,
        index: IndexKind::Auto,
    };
    let counts = simulate_sized(&t, &config, sizes, &mut |_| {})?;
    let total = &counts.total;
    let requests = total.total();
    let client_hits = total.served(Served::Client);
    Ok(SimCounts {
        design: config.design.to_string(),
        client_blocks,
        client_sizes: sizes.to_vec(),
        array_blocks,
        warmup,
        requests,
        client_misses: requests - client_hits,
        array_hits: total.served(Served::Array),
        disk_reads: total.served(Served::DiskRandom) + total.served(Served::DiskSequential),
        demotions_transferred: total.demotions(Demotion::Transferred),
        demotions_reordered: total.demotions(Demotion::Reordered),
    })
}

/// Without the simulators (a `thor` built without the `lab` feature) there is nothing to replay
/// through; `multi` refuses `--sim` before running anything.
#[cfg(not(feature = "sim"))]
fn replay(
    _csv: &[u8],
    _placement: Placement,
    _client_blocks: usize,
    _array_blocks: usize,
    _warmup: u64,
    _sizes: &[usize],
) -> anyhow::Result<SimCounts> {
    anyhow::bail!(crate::NO_SIM)
}

/// The inclusive point at `p`'s size and client count, if `p` is exclusive.
fn inclusive_twin<'a>(p: &GridPoint, points: &'a [GridPoint]) -> Option<&'a GridPoint> {
    if p.placement != Some(Placement::Exclusive) {
        return None;
    }
    points.iter().find(|q| {
        q.placement == Some(Placement::Inclusive)
            && q.server_cache_mb == p.server_cache_mb
            && q.clients == p.clients
    })
}

/// The link bandwidth below which demotion stops paying at exclusive point `p`, in Mbit/s.
///
/// Demotion costs link time: each demoted page's bytes cross the client's link, on a request
/// the client waits for. It saves the server reads it turns into cache hits. Measured here on
/// loopback, where the link is nearly free, the traversal's time saving `dt` (inclusive's
/// median time less exclusive's) is what the saved reads are worth; the `d` bytes a traversal
/// demotes take `8 d / B` seconds at `B` bit/s. Demotion pays while `8 d / B < dt`, so the
/// break-even is `B = 8 d / dt`. `None` when exclusive is not faster (it never pays here) or
/// without a twin; the model assumes the demoted bytes' wire time adds to the traversal's.
fn break_even_mbit_s(p: &GridPoint, points: &[GridPoint]) -> Option<f64> {
    let q = inclusive_twin(p, points)?;
    let dt_s = (q.time().0 - p.time().0) / 1000.0;
    let r = p.runs.first()?;
    let demoted = p.server.first()?.demoted_bytes as f64;
    if dt_s <= 0.0 || r.total.traversals == 0 {
        return None;
    }
    let per_traversal = demoted / r.total.traversals as f64;
    Some(8.0 * per_traversal / dt_s / 1e6)
}

/// The link bandwidth below which demotion stops paying at exclusive point `p`, in Mbit/s,
/// from counts rather than times: the device reads exclusive saved against inclusive (first
/// runs) at the mean device read time measured in both, against the demoted bytes' wire time.
/// Demotion pays while `8 d / B < saved * t_read`. Steadier than [`break_even_mbit_s`] on a
/// busy machine, but it credits a saved read with its device time only (no queueing).
fn break_even_from_reads(p: &GridPoint, points: &[GridPoint]) -> Option<f64> {
    let q = inclusive_twin(p, points)?;
    let (e, i) = (p.server.first()?, q.server.first()?);
    let saved = i.device_reads?.checked_sub(e.device_reads?)?;
    let reads = i.device_reads? + e.device_reads?;
    let us = match (i.device_read_us, e.device_read_us) {
        (Some(a), Some(b)) if reads > 0 => {
            (a * i.device_reads? as f64 + b * e.device_reads? as f64) / reads as f64
        }
        (Some(a), None) => a,
        (None, Some(b)) => b,
        _ => return None,
    };
    if saved == 0 {
        return None;
    }
    Some(8.0 * e.demoted_bytes as f64 / (saved as f64 * us / 1e6) / 1e6)
}

/// A run's mean time per traversal over its clients (each client's elapsed time over its
/// traversals), in ms.
fn ms_per_traversal(r: &MultiReport) -> f64 {
    let per: Vec<f64> = r
        .per_client
        .iter()
        .filter(|c| c.traversals > 0)
        .map(|c| 1000.0 * c.elapsed_s / c.traversals as f64)
        .collect();
    if per.is_empty() { 0.0 } else { per.iter().sum::<f64>() / per.len() as f64 }
}

/// The grid's table: per point, the server's counters (first run) and the time per traversal.
fn grid_table(points: &[GridPoint]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nserver page cache over the timed phase (first run; time: median [min-max] over runs; \
         even: the link Mbit/s below which demotion stops paying, from the times / from the \
         device reads saved)"
    );
    let _ = writeln!(
        s,
        "{:>9} {:>9} {:>7} {:>8} {:>8} {:>6} {:>8} {:>9} {:>7} {:>10} {:>26} {:>8} {:>11}",
        "cache MiB",
        "placement",
        "clients",
        "fetches",
        "hits",
        "hit %",
        "misses",
        "dev reads",
        "read us",
        "demoted MB",
        "ms per traversal",
        "speedup",
        "even Mbit/s"
    );
    for p in points {
        let (med, lo, hi) = p.time();
        let sv = p.server.first().cloned().unwrap_or_default();
        let speedup = match inclusive_twin(p, points) {
            Some(q) if med > 0.0 => format!("{:.2}", q.time().0 / med),
            _ => "-".into(),
        };
        let even = match (p.break_even_mbit_s, p.break_even_reads_mbit_s) {
            (None, None) => "-".to_string(),
            (t, r) => format!(
                "{}/{}",
                t.map_or_else(|| "-".into(), |b| format!("{b:.0}")),
                r.map_or_else(|| "-".into(), |b| format!("{b:.0}"))
            ),
        };
        let _ = writeln!(
            s,
            "{:>9} {:>9} {:>7} {:>8} {:>8} {:>6.1} {:>8} {:>9} {:>7} {:>10.2} {:>26} {:>8} {:>11}",
            p.size_label(),
            p.placement_label(),
            p.clients,
            sv.fetches,
            sv.hits,
            100.0 * sv.hit_fraction,
            sv.reads,
            sv.device_reads.map_or_else(|| "-".into(), |d| d.to_string()),
            sv.device_read_us.map_or_else(|| "-".into(), |u| format!("{u:.0}")),
            sv.demoted_bytes as f64 / 1e6,
            format!("{med:.2} [{lo:.2}-{hi:.2}] ({})", p.ms_per_traversal.len()),
            speedup,
            even
        );
    }
    s
}

/// The live counts beside the simulator's, per point (first run).
fn sim_table(points: &[GridPoint]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nthe simulator on the same page visits and sizes (live: the first run's timed phase; a \
         miss that joins a read in flight is one device read, and the simulator's array hit)"
    );
    let _ = writeln!(
        s,
        "{:>9} {:>9} {:>7} {:>16} {:>7} {:>7} | {:>9} {:>9} {:>9} {:>9} {:>15} | {:>9} {:>9} {:>9} {:>15}",
        "cache MiB",
        "placement",
        "clients",
        "design",
        "frames",
        "pages",
        "fetches",
        "srv hits",
        "misses",
        "dev reads",
        "demoted/reord",
        "sim miss",
        "sim hits",
        "sim reads",
        "sim dem/reord"
    );
    for p in points {
        let (Some(sim), Some(sv)) = (&p.sim, p.server.first()) else { continue };
        let live_fetches: u64 = p.runs.first().map_or(0, |r| r.total.fetches);
        let _ = writeln!(
            s,
            "{:>9} {:>9} {:>7} {:>16} {:>7} {:>7} | {:>9} {:>9} {:>9} {:>9} {:>15} | {:>9} {:>9} {:>9} {:>15}",
            p.size_label(),
            p.placement_label(),
            p.clients,
            sim.design,
            sim.client_blocks,
            sim.array_blocks,
            live_fetches,
            sv.hits,
            sv.reads,
            sv.device_reads.map_or_else(|| "-".into(), |d| d.to_string()),
            format!("{}/{}", sv.demotions_stored, sv.demotions_reordered),
            sim.client_misses,
            sim.array_hits,
            sim.disk_reads,
            format!("{}/{}", sim.demotions_transferred, sim.demotions_reordered)
        );
    }
    s
}

/// A chart's y value of a point.
type Metric = fn(&GridPoint) -> f64;

/// Writes `multi.csv` (a line per run), `multi.json` and the charts into `out`.
fn write_grid(out: &Path, points: &[GridPoint], op: Op, sharing: Sharing) -> anyhow::Result<()> {
    let csv = grid_csv(points);
    let csv_path = out.join("multi.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    let json_path = out.join("multi.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&json!({ "points": points }))?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), json_path.display());
    // Charts against the server cache size need two sizes or more.
    let sized: Vec<&GridPoint> = points.iter().filter(|p| p.server_cache_mb.is_some()).collect();
    let mut sizes: Vec<f64> = sized.iter().filter_map(|p| p.server_cache_mb).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    if sizes.len() < 2 {
        return Ok(());
    }
    let counts: Vec<usize> = {
        let mut c: Vec<usize> = sized.iter().map(|p| p.clients).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let charts: [(&str, &str, Metric); 3] = [
        ("hits", "server page cache hits (% of fetches)", |p| {
            100.0 * p.server.first().map_or(0.0, |s| s.hit_fraction)
        }),
        ("reads", "device reads (--direct-io), else page-cache misses", |p| {
            p.server.first().map_or(0.0, |s| s.device_reads.unwrap_or(s.reads) as f64)
        }),
        ("time", "ms per traversal (median over runs)", |p| p.time().0),
    ];
    for (what, y_label, get) in charts {
        let mut series = Vec::new();
        for placement in [Placement::Inclusive, Placement::Exclusive] {
            for &n in &counts {
                let mut pts: Vec<(f64, f64)> = sized
                    .iter()
                    .filter(|p| p.placement == Some(placement) && p.clients == n)
                    .map(|p| (p.server_cache_mb.unwrap_or(0.0), get(p)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let name = if counts.len() == 1 {
                    placement.name().to_uppercase()
                } else {
                    format!("{} {n} clients", placement.name().to_uppercase())
                };
                series.push(Series::line(name, pts));
            }
        }
        if series.is_empty() || series.len() > crate::plot::MAX_SERIES {
            continue;
        }
        let spec = ChartSpec {
            title: format!(
                "{} on {} modules: {what} against the server page cache size",
                op.name().to_uppercase(),
                sharing.name()
            ),
            x_label: "server page cache (MiB)".into(),
            y_label: y_label.into(),
            legend: Legend::UpperRight,
            ..ChartSpec::default()
        };
        for f in line_chart(&out.join(format!("multi-{what}")), &spec, &series)? {
            eprintln!("wrote {}", f.display());
        }
    }
    Ok(())
}

/// The grid's runs as CSV, one line per run of each point.
fn grid_csv(points: &[GridPoint]) -> String {
    let mut csv = String::from(
        "server_cache_mb,placement,clients,run,traversals,aborts,client_fetches,server_fetches,\
         server_hits,hit_fraction,misses,device_reads,demote_notices,demotions_stored,demotions_reordered,\
         demotions_refused,demoted_bytes,ms_per_traversal\n",
    );
    for p in points {
        for (i, r) in p.runs.iter().enumerate() {
            let sv = p.server.get(i).cloned().unwrap_or_default();
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{:.6},{},{},{},{},{},{},{},{:.4}",
                p.server_cache_mb.map_or_else(String::new, |m| m.to_string()),
                p.placement.map_or("", Placement::name),
                p.clients,
                i + 1,
                r.total.traversals,
                r.total.aborts,
                r.total.fetches,
                sv.fetches,
                sv.hits,
                sv.hit_fraction,
                sv.reads,
                sv.device_reads.map_or_else(String::new, |d| d.to_string()),
                sv.demote_notices,
                sv.demotions_stored,
                sv.demotions_reordered,
                sv.demotions_refused,
                sv.demoted_bytes,
                p.ms_per_traversal[i]
            );
        }
    }
    csv
}

/// The progress bar of one multi-client run: seconds of the timed phase, or traversals.
fn multi_progress(clients: usize, length: Length) -> ProgressBar {
    let (total, what) = match length {
        Length::Seconds(s) => ((s * 10.0).ceil() as u64, "tenths of a second"),
        Length::Repeat(r) => (clients as u64 * u64::from(r), "traversals"),
    };
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:40}] {percent:>3}% {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("{clients} client(s)"));
    bar.set_message(format!("warming up (0 of {clients}); bar: {what}"));
    bar
}

fn show_progress(bar: &ProgressBar, length: Length, p: &Progress) {
    match p.timed {
        None => bar.set_message(format!("warming up ({} of {} done)", p.warmed, p.clients)),
        Some(t) => {
            bar.set_position(match length {
                Length::Seconds(_) => (t.as_secs_f64() * 10.0) as u64,
                Length::Repeat(_) => p.traversals,
            });
            bar.set_message(format!("{} traversals, {} aborts", p.traversals, p.aborts));
        }
    }
}

/// The table of multi-client runs: one line per client, a total per run and the process's
/// CPU time.
fn multi_table(rs: &[MultiReport]) -> String {
    let mut s = String::new();
    let Some(first) = rs.first() else { return s };
    let length = match (first.seconds, first.repeat) {
        (Some(secs), _) => format!("{secs} s per run"),
        (_, Some(r)) => format!("{r} traversals per client"),
        _ => String::new(),
    };
    let _ = writeln!(
        s,
        "{} on {} modules ({} in the database), {} {:.1} MiB cache per client, {}; each \
         client's cold first traversal excluded",
        first.traversal,
        first.mode.name(),
        first.modules,
        first.policy,
        first.cache_bytes as f64 / MIB,
        length
    );
    let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |c| format!("{c:.2}"));
    let _ = writeln!(
        s,
        "{:>7} {:>6} {:>6} {:>10} {:>8} {:>7} {:>8} {:>9} {:>9} {:>8} {:>8}",
        "clients",
        "client",
        "module",
        "traversals",
        "commits",
        "aborts",
        "fetches",
        "elapsed s",
        "trav/s",
        "cpu s",
        "warmup s"
    );
    for r in rs {
        for c in &r.per_client {
            let _ = writeln!(
                s,
                "{:>7} {:>6} {:>6} {:>10} {:>8} {:>7} {:>8} {:>9.3} {:>9.2} {:>8} {:>8.3}",
                r.clients,
                c.client,
                c.module,
                c.traversals,
                c.commits,
                c.aborts,
                c.fetches,
                c.elapsed_s,
                c.traversals_per_s,
                opt(c.cpu_s),
                c.warmup_s
            );
        }
        let t = &r.total;
        let _ = writeln!(
            s,
            "{:>7} {:>6} {:>6} {:>10} {:>8} {:>7} {:>8} {:>9.3} {:>9.2} {:>8}",
            r.clients,
            "total",
            "",
            t.traversals,
            t.commits,
            t.aborts,
            t.fetches,
            t.elapsed_s,
            t.traversals_per_s,
            opt(t.client_cpu_s),
        );
        let _ = writeln!(
            s,
            "{:>7} {:>6}   abort rate {:.1}%; process CPU {} s, {} cores busy",
            "",
            "",
            100.0 * t.abort_rate,
            opt(t.process_cpu_s),
            opt(t.cores_busy)
        );
    }
    s
}
