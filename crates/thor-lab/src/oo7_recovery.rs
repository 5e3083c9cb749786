//! `thor oo7 recovery-study`: the QuickStore recovery study (issue 14,
//! `papers/quickstore-recovery-sigmod95.txt`) run inside thor, every commit mode beside `obj`.
//!
//! ```text
//!   thor oo7 recovery-study --dir DIR [--modes obj,pd-redo,pd-esm,sd-esm,sl-esm,wpl]
//!        [--traversals t2a,t2b,t2c] [--clients 1,2,3,4,5] [--repeat R]
//!        [--buffer-mb 8,4] [--block-bytes 64] [--cache-mb M | --memory-mb M] [--out DIR]
//! ```
//!
//! `--server-cache-mb` and `--direct-io` set the server's page cache and make its misses
//! device reads, for the paper's big database, where the modules in use outgrow the server's
//! memory.
//!
//! `--memory-mb M` is the paper's setting: each client has `M` of memory for persistent data;
//! `obj` and `wpl` use it all as their cache, a diffing mode splits it between its cache and
//! its recovery buffer (12 MB = 8 + 4 for PD-ESM-4, 11.5 + 0.5 for PD-ESM-1/2). A page mode
//! also keeps page images beside its object cache (thor-client `pagemode.rs`), at most as many
//! as its cache has pages' worth of bytes; past that, written pages are stolen (sent before
//! the commit, the paper's eviction of a dirty page), which the table counts (`--images-mb`
//! sets that bound).
//!
//! `DIR` holds an OO7 database with a module per client (the paper's small database:
//! `thor oo7 load --dir DIR --size qs-small`). Every point gets a freshly opened server in this
//! process, in the point's commit mode, on a loopback TCP port; each client (a thread with its
//! own session and connection) runs its traversal on its private module once to warm its
//! cache, then `--repeat` times as separate transactions, as in the paper (caches warm across
//! transactions). The page modes run once per recovery buffer size (`--buffer-mb`: the paper's
//! unconstrained case and, e.g., PD-ESM-4's 4 MB); `obj` and `wpl` have no recovery buffer
//! (WPL copies nothing before an update: its client ships the written pages whole and the
//! server logs them whole).
//!
//! Per point: the response time (mean over clients of their time per traversal), the
//! throughput (traversals per second, all clients), and per committed transaction the bytes the
//! clients shipped, the page records (and those sent early) and their bytes, the pages shipped
//! whole, and the server's log bytes, REDO page reads and WPL page images logged. Each point
//! runs `--runs` times (a fresh server each time): the times are the median with the range,
//! the counts the first run's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use thor_client::RecoveryConfig;
use thor_oo7::Op;
use thor_oo7::experiment::Endpoint;
use thor_oo7::multi::{Length, MultiConfig, MultiReport, Sharing, check_modules, database_modules};
use thor_server::EngineOptions;
use thor_wire::{CommitMode, ServerStats};

use crate::oo7::{MIB, open_database_with, policy};
use crate::plot::{ChartSpec, Legend, Series, bar_chart, line_chart};

/// `thor oo7 recovery-study`.
#[derive(Debug, Args)]
pub struct RecoveryArgs {
    /// The database directory (an OO7 database with at least as many modules as clients).
    #[arg(long)]
    dir: PathBuf,
    /// The commit modes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "obj,pd-redo,pd-esm,sd-esm,sl-esm,wpl")]
    modes: Vec<String>,
    /// The traversals, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "t2a,t2b,t2c")]
    traversals: Vec<String>,
    /// Client counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    clients: Vec<usize>,
    /// Timed traversals per client (each its own transaction), after one warm-up.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Recovery buffer sizes in MiB for the page modes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    buffer_mb: Vec<f64>,
    /// SD's and SL's block size in bytes.
    #[arg(long, default_value_t = 64)]
    block_bytes: usize,
    /// Each client's cache in MiB, whatever the mode.
    #[arg(long, default_value_t = 64.0, conflicts_with = "memory_mb")]
    cache_mb: f64,
    /// Each client's memory in MiB, as the paper gives it: `obj` and `wpl` take it all as
    /// their cache, a diffing mode its cache plus its recovery buffer (so its cache is this
    /// less the buffer).
    #[arg(long)]
    memory_mb: Option<f64>,
    /// The page modes' page images kept beside the cache, in MiB: past them a written page is
    /// stolen (sent before its commit). Default: as many as the cache has pages' worth.
    #[arg(long)]
    images_mb: Option<f64>,
    /// Each client's cache manager.
    #[arg(long, default_value = "hac")]
    policy: String,
    /// The server's page cache in MiB (default: the server's default, 64 MiB). The paper's
    /// server had 36 MB for modules of 6.6 MB (small) and 24.3 MB (big).
    #[arg(long)]
    server_cache_mb: Option<f64>,
    /// The server reads pages around the OS page cache (`O_DIRECT`), so that a server-cache
    /// miss costs a device read, as the paper's did.
    #[arg(long)]
    direct_io: bool,
    /// Runs per point: the response time and throughput are the median, with the range.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Write CSV, JSON and plots here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One point of the grid.
#[derive(Debug, Clone, Serialize)]
struct Point {
    mode: String,
    /// The recovery buffer in MiB (the diffing modes), or `None` (`obj`, `wpl`).
    buffer_mb: Option<f64>,
    /// Each client's cache in MiB.
    cache_mb: f64,
    traversal: String,
    clients: usize,
    /// Mean over clients of their milliseconds per traversal: the median over the runs, and
    /// the lowest and highest.
    response_ms: f64,
    response_ms_min: f64,
    response_ms_max: f64,
    /// Traversals per second, all clients: the median over the runs, the lowest, the highest.
    throughput: f64,
    throughput_min: f64,
    throughput_max: f64,
    /// Runs of the point.
    runs: u32,
    /// Transactions committed in the timed phase.
    commits: u64,
    /// Conflicts (aborted and run again).
    aborts: u64,
    /// Bytes the clients shipped per committed transaction (objects, records, pages).
    shipped_bytes_per_txn: f64,
    /// Page records per transaction, and those sent before commit.
    records_per_txn: f64,
    early_records_per_txn: f64,
    /// Bytes of page records per transaction, and in 8 KiB pages' worth (the paper's
    /// "log-record pages").
    record_bytes_per_txn: f64,
    record_pages_per_txn: f64,
    /// Dirty pages shipped whole per transaction (ESM, WPL).
    pages_per_txn: f64,
    /// What the clients shipped per transaction besides whole pages (objects, created objects,
    /// page records, write sets), in 8 KiB pages' worth: the paper's "log-record pages" for
    /// every mode, `obj`'s objects included.
    log_pages_per_txn: f64,
    /// Dirty pages stolen before commit per transaction (the page images were full).
    stolen_per_txn: f64,
    /// Server log bytes per transaction.
    log_bytes_per_txn: f64,
    /// Pages the server read to apply records to (REDO), per transaction.
    redo_reads_per_txn: f64,
    /// Page images the server logged (WPL), per transaction.
    wpl_images_per_txn: f64,
}

fn parse_mode(name: &str) -> anyhow::Result<CommitMode> {
    CommitMode::from_name(name).with_context(|| {
        let names: Vec<&str> = CommitMode::ALL.iter().map(|m| m.name()).collect();
        format!("unknown commit mode {name:?}; one of {}", names.join(", "))
    })
}

fn parse_op(name: &str) -> anyhow::Result<Op> {
    Op::ALL
        .iter()
        .copied()
        .find(|o| o.name() == name)
        .with_context(|| format!("unknown traversal {name:?}"))
}

/// `thor oo7 recovery-study`.
pub fn recovery_study(a: RecoveryArgs) -> anyhow::Result<()> {
    let modes: Vec<CommitMode> = a.modes.iter().map(|m| parse_mode(m)).collect::<Result<_, _>>()?;
    let ops: Vec<Op> = a.traversals.iter().map(|t| parse_op(t)).collect::<Result<_, _>>()?;
    if a.clients.is_empty() || a.buffer_mb.iter().any(|b| !(b.is_finite() && *b > 0.0)) {
        bail!("give at least one client count and positive recovery buffer sizes");
    }
    if let Some(m) = a.memory_mb {
        let largest = a.buffer_mb.iter().copied().fold(0.0, f64::max);
        let diffing = modes.iter().any(|m| m.sends_records());
        if !(m.is_finite() && m > 0.0) || (diffing && m - largest < 1.0) {
            bail!(
                "--memory-mb {m} must leave at least 1 MiB of cache beside the largest recovery \
                 buffer ({largest} MiB)"
            );
        }
    } else if !(a.cache_mb.is_finite() && a.cache_mb > 0.0) {
        bail!("--cache-mb must be positive");
    }
    if a.images_mb.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        bail!("--images-mb must be positive");
    }
    if a.server_cache_mb.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        bail!("--server-cache-mb must be positive");
    }
    let policy = policy(&a.policy)?;
    let mut points = Vec::new();
    for &op in &ops {
        for &mode in &modes {
            let buffers: Vec<Option<f64>> = if mode.sends_records() {
                a.buffer_mb.iter().map(|b| Some(*b)).collect()
            } else {
                vec![None]
            };
            for buffer_mb in buffers {
                for &clients in &a.clients {
                    let cache_mb = match a.memory_mb {
                        Some(m) => m - buffer_mb.unwrap_or(0.0),
                        None => a.cache_mb,
                    };
                    let runs: Vec<Point> = (0..a.runs.max(1))
                        .map(|_| run_point(&a, op, mode, buffer_mb, cache_mb, clients, policy))
                        .collect::<Result<_, _>>()?;
                    let p = summary(runs);
                    eprintln!(
                        "{} {}{} {} client(s): {:.1} ms, {:.2}/s, {:.0} B shipped/txn",
                        p.traversal,
                        p.mode,
                        buffer_mb.map(|b| format!("-{b}MB")).unwrap_or_default(),
                        p.clients,
                        p.response_ms,
                        p.throughput,
                        p.shipped_bytes_per_txn
                    );
                    points.push(p);
                }
            }
        }
    }
    print!("{}", table(&points));
    println!(
        "(times: median and range over {} run(s) per point, on a machine that may be shared)",
        a.runs.max(1)
    );
    if let Some(out) = &a.out {
        write_out(out, &points)?;
    }
    Ok(())
}

fn run_point(
    a: &RecoveryArgs,
    op: Op,
    mode: CommitMode,
    buffer_mb: Option<f64>,
    cache_mb: f64,
    clients: usize,
    policy: thor_client::PolicyConfig,
) -> anyhow::Result<Point> {
    let mut opts = EngineOptions { commit_mode: mode, ..EngineOptions::default() };
    if let Some(mb) = a.server_cache_mb {
        opts.page_cache_bytes = (mb * MIB) as usize;
    }
    let (engine, disk) = open_database_with(&a.dir, opts, a.direct_io)?;
    let page_size = engine.page_size();
    let server = thor_net::Server::start("127.0.0.1:0", engine.clone(), Default::default())
        .context("starting the loopback server")?;
    let endpoint = Endpoint::Tcp { addr: server.local_addr().to_string(), token: Vec::new() };
    let modules = database_modules(&endpoint).context("reading the database's modules")?;
    check_modules(modules, clients, Sharing::Private)?;
    let recovery = RecoveryConfig {
        buffer_pages: buffer_mb.map_or(1, |mb| ((mb * MIB) as usize / page_size).max(1)),
        block_bytes: a.block_bytes,
        shadow_pages: a.images_mb.map_or(0, |mb| ((mb * MIB) as usize / page_size).max(1)),
    };
    let cfg = MultiConfig {
        op,
        clients,
        sharing: Sharing::Private,
        length: Length::Repeat(a.repeat),
        policy,
        cache_bytes: (cache_mb * MIB) as usize,
        background_replacement: true,
        seed: 14,
        record_pages: false,
        recovery,
        // The page modes fetch one page at a time (the session does not prefetch in them).
        prefetch: thor_oo7::experiment::PrefetchSetting::OFF,
    };
    let before = std::sync::Mutex::new(None::<ServerStats>);
    let at_start = || {
        *before.lock().unwrap_or_else(|e| e.into_inner()) = Some(engine.server_stats());
    };
    let r = thor_oo7::multi::run_multi_with(&endpoint, &cfg, &mut |_| {}, &at_start)
        .with_context(|| format!("{} in mode {mode} with {clients} client(s)", op.name()))?;
    let after = engine.server_stats();
    server.shutdown().context("stopping the loopback server")?;
    drop(engine);
    drop(disk);
    let before = before.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_default();
    let mut p = point(mode, buffer_mb, clients, page_size, &r, &before, &after);
    p.cache_mb = cache_mb;
    Ok(p)
}

/// The first run's counts (a run's counts vary only with conflicts and timing of installs)
/// with the median and range of the times.
fn summary(runs: Vec<Point>) -> Point {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let m = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        (m, v[0], v[n - 1])
    };
    let (r, r_min, r_max) = median(runs.iter().map(|p| p.response_ms).collect());
    let (t, t_min, t_max) = median(runs.iter().map(|p| p.throughput).collect());
    let n = runs.len() as u32;
    let mut p = runs.into_iter().next().expect("at least one run");
    (p.response_ms, p.response_ms_min, p.response_ms_max) = (r, r_min, r_max);
    (p.throughput, p.throughput_min, p.throughput_max) = (t, t_min, t_max);
    p.runs = n;
    p
}

fn point(
    mode: CommitMode,
    buffer_mb: Option<f64>,
    clients: usize,
    page_size: usize,
    r: &MultiReport,
    before: &ServerStats,
    after: &ServerStats,
) -> Point {
    let commits = r.total.commits;
    let per = |x: u64| if commits == 0 { 0.0 } else { x as f64 / commits as f64 };
    let sum =
        |f: fn(&thor_oo7::multi::ClientReport) -> u64| r.per_client.iter().map(f).sum::<u64>();
    let times: Vec<f64> = r
        .per_client
        .iter()
        .filter(|c| c.traversals > 0)
        .map(|c| c.elapsed_s * 1000.0 / c.traversals as f64)
        .collect();
    let record_bytes = sum(|c| c.page_record_bytes);
    let pages = sum(|c| c.pages_shipped);
    let other_bytes = sum(|c| c.bytes_shipped).saturating_sub(pages * page_size as u64);
    Point {
        mode: mode.name().to_string(),
        buffer_mb,
        cache_mb: 0.0,
        traversal: r.traversal.clone(),
        clients,
        response_ms: times.iter().sum::<f64>() / times.len().max(1) as f64,
        response_ms_min: 0.0,
        response_ms_max: 0.0,
        throughput: r.total.traversals_per_s,
        throughput_min: 0.0,
        throughput_max: 0.0,
        runs: 1,
        commits,
        aborts: r.total.aborts,
        shipped_bytes_per_txn: per(sum(|c| c.bytes_shipped)),
        records_per_txn: per(sum(|c| c.page_records)),
        early_records_per_txn: per(sum(|c| c.page_records_early)),
        record_bytes_per_txn: per(record_bytes),
        record_pages_per_txn: per(record_bytes) / 8192.0,
        pages_per_txn: per(pages),
        log_pages_per_txn: per(other_bytes) / 8192.0,
        stolen_per_txn: per(sum(|c| c.pages_stolen)),
        log_bytes_per_txn: per(after.log_bytes.saturating_sub(before.log_bytes)),
        redo_reads_per_txn: per(after.redo_reads.saturating_sub(before.redo_reads)),
        wpl_images_per_txn: per(after.wpl_images.saturating_sub(before.wpl_images)),
    }
}

/// A chart's file stem, y label, and y value of a point.
type Chart = (&'static str, &'static str, fn(&Point) -> f64);

fn label(p: &Point) -> String {
    match p.buffer_mb {
        Some(b) => format!("{}-{b}MB", p.mode),
        None => p.mode.clone(),
    }
}

fn table(points: &[Point]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:<16} {:>5} {:>3} {:>22} {:>9} {:>12} {:>8} {:>8} {:>10} {:>8} {:>8} {:>10} {:>8} {:>8}",
        "trav",
        "mode",
        "cache",
        "cl",
        "resp ms (min-max)",
        "trav/s",
        "shipped/txn",
        "rec/txn",
        "early",
        "recB/txn",
        "pg/txn",
        "stolen",
        "logB/txn",
        "redo/txn",
        "wpl/txn"
    );
    for p in points {
        let _ = writeln!(
            s,
            "{:<5} {:<16} {:>5} {:>3} {:>22} {:>9.2} {:>12.0} {:>8.1} {:>8.1} {:>10.0} {:>8.1} {:>8.1} {:>10.0} {:>8.1} {:>8.1}",
            p.traversal,
            label(p),
            p.cache_mb,
            p.clients,
            format!("{:.1} ({:.1}-{:.1})", p.response_ms, p.response_ms_min, p.response_ms_max),
            p.throughput,
            p.shipped_bytes_per_txn,
            p.records_per_txn,
            p.early_records_per_txn,
            p.record_bytes_per_txn,
            p.pages_per_txn,
            p.stolen_per_txn,
            p.log_bytes_per_txn,
            p.redo_reads_per_txn,
            p.wpl_images_per_txn
        );
    }
    s
}

fn write_out(out: &Path, points: &[Point]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut csv = String::from(
        "traversal,mode,buffer_mb,cache_mb,clients,runs,response_ms,response_ms_min,\
         response_ms_max,throughput,throughput_min,throughput_max,commits,aborts,\
         shipped_bytes_per_txn,records_per_txn,early_records_per_txn,record_bytes_per_txn,\
         record_pages_per_txn,pages_per_txn,log_pages_per_txn,stolen_per_txn,\
         log_bytes_per_txn,redo_reads_per_txn,wpl_images_per_txn\n",
    );
    for p in points {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{:.1},{:.3},{:.3},{:.1},{:.4},{:.3},{:.4},{:.3},{:.1},{:.3},{:.3}",
            p.traversal,
            p.mode,
            p.buffer_mb.map(|b| b.to_string()).unwrap_or_default(),
            p.cache_mb,
            p.clients,
            p.runs,
            p.response_ms,
            p.response_ms_min,
            p.response_ms_max,
            p.throughput,
            p.throughput_min,
            p.throughput_max,
            p.commits,
            p.aborts,
            p.shipped_bytes_per_txn,
            p.records_per_txn,
            p.early_records_per_txn,
            p.record_bytes_per_txn,
            p.record_pages_per_txn,
            p.pages_per_txn,
            p.log_pages_per_txn,
            p.stolen_per_txn,
            p.log_bytes_per_txn,
            p.redo_reads_per_txn,
            p.wpl_images_per_txn
        );
    }
    std::fs::write(out.join("recovery-study.csv"), csv)?;
    std::fs::write(out.join("recovery-study.json"), serde_json::to_string_pretty(points)?)?;
    let mut traversals: Vec<&str> = points.iter().map(|p| p.traversal.as_str()).collect();
    traversals.dedup();
    for t in traversals {
        let of_t: Vec<&Point> = points.iter().filter(|p| p.traversal == t).collect();
        let mut labels: Vec<String> = of_t.iter().map(|p| label(p)).collect();
        labels.dedup();
        let series = |y: fn(&Point) -> f64| -> Vec<Series> {
            labels
                .iter()
                .map(|l| {
                    let pts =
                        of_t.iter().filter(|p| label(p) == *l).map(|p| (p.clients as f64, y(p)));
                    Series::line(l.clone(), pts.collect())
                })
                .collect()
        };
        let charts: [Chart; 3] = [
            ("response", "response time (ms per traversal)", |p| p.response_ms),
            ("throughput", "throughput (traversals/s)", |p| p.throughput),
            ("shipped", "client writes (KiB per transaction)", |p| {
                p.shipped_bytes_per_txn / 1024.0
            }),
        ];
        for (stem, y_label, y) in charts {
            let spec = ChartSpec {
                title: format!("{t}: {y_label} against clients"),
                x_label: "clients".into(),
                y_label: y_label.into(),
                legend: Legend::UpperRight,
                ..ChartSpec::default()
            };
            line_chart(&out.join(format!("recovery-{t}-{stem}")), &spec, &series(y))?;
        }
        // The paper's "client writes" (its Figures 9 and 14): pages per transaction each
        // scheme ships, whole pages and the rest in pages' worth, at the fewest clients run
        // (a transaction's writes do not depend on the others).
        let fewest = of_t.iter().map(|p| p.clients).min().unwrap_or(1);
        let at: Vec<&Point> = of_t.iter().copied().filter(|p| p.clients == fewest).collect();
        let groups: Vec<String> = at.iter().map(|p| label(p)).collect();
        let bars = [
            (
                "total pages".to_string(),
                at.iter().map(|p| p.pages_per_txn + p.log_pages_per_txn).collect(),
            ),
            ("log-record pages".to_string(), at.iter().map(|p| p.log_pages_per_txn).collect()),
        ];
        let spec = ChartSpec {
            title: format!("{t}: client writes per transaction ({fewest} client(s))"),
            y_label: "8 KiB pages per transaction".into(),
            ..ChartSpec::default()
        };
        bar_chart(&out.join(format!("recovery-{t}-writes")), &spec, &groups, &bars)?;
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}
