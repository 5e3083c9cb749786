//! `thor bench engine`: the storage engine's figures on a real disk.
//!
//! - commits per second and commits per fsync with 1, 4 and 16 committing threads (group
//!   commit: concurrent commits share a log fsync);
//! - fetch latency of a cached page with and without MOB versions to apply, and of a page read
//!   from the page file;
//! - bulk-load speed in MB/s (pages written and synced).
//!
//! `thor bench net`: the protocol's figures over loopback TCP (the synchronous client transport
//! against the tokio server, in this process) and through the in-process transport:
//!
//! - fetch round trip p50/p99 and pages per second, with one client and with several;
//! - commit latency p50/p99 of a small transaction (one new version, one created object);
//! - with `--unix`, fetches over a Unix-domain socket server too ([`thor_net::UnixTransport`]);
//! - with `--tls`, fetches and commits over TLS too (a second server on the same engine, with
//!   a throwaway CA and certificate made for the run; [`thor_net::TlsTransport`]), beside the
//!   same runs over plain TCP;
//! - with `--floor`, the loopback floor with as many clients, measured in the same run
//!   (`crate::floor`: a blocking ping-pong of a page-sized reply over TCP, and over a Unix
//!   socket with `--unix`), so that each fetch row has the floor it is held to beside it
//!   (issue 16: fetch p50 within 1.5x of it).
//!
//! Each measurement runs on a fresh database in a temporary directory (or `--dir`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use thor_core::le::put_u32;
use thor_core::{ClassDesc, Oref, PageId, VarKind};
use thor_net::{
    ClientConfig, LocalTransport, NetConfig, Server, TcpTransport, Threading, TlsClient, TlsServer,
    TlsTransport, UnixTransport,
};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::FileDisk;
use thor_wire::{Commit, ReplyBody, Request, RequestBody};

use crate::oo7_penalty::{Spread, spread};

/// Benchmarks of thor's components.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Debug, Subcommand)]
enum BenchWhat {
    /// Commit throughput, fetch latency and bulk-load speed of the storage engine.
    Engine(EngineBench),
    /// Fetch and commit round trips over loopback TCP, against the in-process transport.
    Net(NetBench),
    /// Many clients transferring between accounts over TCP: throughput, aborts, latency.
    Clients(crate::bench_clients::ClientsBench),
    /// One client process running transfers against a running server, surviving restarts and
    /// recording its history (the kill test's client).
    TransferClient(crate::transfer_client::TransferClient),
    /// One client process running transfers between accounts at different servers of a
    /// cluster (two-phase commit), surviving restarts and recording its history.
    ClusterClient(crate::cluster_client::ClusterClient),
    /// Commit latency at one server against two, read-only against read-write, over TCP.
    Twopc(crate::bench_twopc::TwoPcBench),
    /// Two server processes and 1-8 client processes doing cross-server transfers and
    /// audits, with no faults or a server SIGKILLed every few seconds: throughput, aborts,
    /// latency, time from a kill to the next acknowledged transfer.
    CrossServer(crate::bench_cross::CrossBench),
}

#[derive(Debug, Args)]
struct EngineBench {
    /// Directory to create the benchmark databases in (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds per commit-throughput run.
    #[arg(long, value_parser = crate::positive_seconds, allow_negative_numbers = true, default_value_t = 3.0)]
    seconds: f64,
    /// Megabytes of objects to bulk-load.
    #[arg(long, value_parser = crate::at_least_one::<u64>, allow_negative_numbers = true, default_value_t = 256)]
    bulk_mb: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.what {
        BenchWhat::Engine(b) => engine(b),
        BenchWhat::Net(b) => net(b),
        BenchWhat::Clients(b) => crate::bench_clients::run(b),
        BenchWhat::TransferClient(b) => crate::transfer_client::run(b),
        BenchWhat::ClusterClient(b) => crate::cluster_client::run(b),
        BenchWhat::Twopc(b) => crate::bench_twopc::run(b),
        BenchWhat::CrossServer(b) => crate::bench_cross::run(b),
    }
}

fn class() -> ClassDesc {
    ClassDesc::new("bench.Item", 12, &[0], VarKind::Bytes).expect("valid class")
}

fn item(class_word: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut o = class().new_object(class_word, len);
    put_u32(&mut o, 12, seq);
    o
}

struct Db {
    // Fields drop in order: the engine closes (installing into its files) before the
    // temporary directory is deleted; the other way round it found its files gone and
    // logged a storage failure at every benchmark's end.
    engine: Arc<Engine>,
    class: Oref,
    _tmp: Option<tempfile::TempDir>,
}

fn fresh_db(base: &Option<PathBuf>, name: &str, opts: EngineOptions) -> Result<Db> {
    let (tmp, path) = match base {
        Some(b) => {
            let p = b.join(name);
            if p.exists() {
                std::fs::remove_dir_all(&p).with_context(|| format!("clearing {}", p.display()))?;
            }
            (None, p)
        }
        None => {
            let t = tempfile::tempdir().context("creating a temporary directory")?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    let disk = Arc::new(FileDisk::open_locked(&path, true, "thor bench")?);
    let engine = Arc::new(Engine::create(disk, opts)?);
    let class = engine
        .commit(CommitRequest { versions: vec![], created: vec![class().to_class_object()] })?
        .created[0];
    Ok(Db { _tmp: tmp, engine, class })
}

#[derive(Debug, serde::Serialize)]
struct CommitRun {
    threads: usize,
    commits: u64,
    commits_per_s: f64,
    fsyncs: u64,
    commits_per_fsync: f64,
    latency_us_p50: f64,
    latency_us_p99: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn commit_run(b: &EngineBench, threads: usize) -> Result<CommitRun> {
    let db = fresh_db(&b.dir, &format!("commits-{threads}"), EngineOptions::default())?;
    // Each thread owns one object and, per commit, writes a new version of it and creates one
    // small object: a typical small transaction.
    let mut owned = Vec::new();
    for _ in 0..threads {
        let out = db.engine.commit(CommitRequest {
            versions: vec![],
            created: vec![item(db.class.raw(), 0, 16)],
        })?;
        owned.push(out.created[0]);
    }
    let before = db.engine.stats();
    let deadline = Instant::now() + Duration::from_secs_f64(b.seconds);
    let handles: Vec<_> = owned
        .into_iter()
        .map(|oref| {
            let engine = db.engine.clone();
            let class = db.class;
            std::thread::spawn(move || -> Result<Vec<Duration>> {
                let mut lat = Vec::new();
                let mut seq = 0;
                while Instant::now() < deadline {
                    seq += 1;
                    let t = Instant::now();
                    engine.commit(CommitRequest {
                        versions: vec![(oref, item(class.raw(), seq, 16))],
                        created: vec![item(class.raw(), seq, 32)],
                    })?;
                    lat.push(t.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.join().map_err(|_| anyhow::anyhow!("a committing thread panicked"))??);
    }
    let after = db.engine.stats();
    lat.sort();
    let commits = after.commits - before.commits;
    let fsyncs = after.log_fsyncs - before.log_fsyncs;
    Ok(CommitRun {
        threads,
        commits,
        commits_per_s: commits as f64 / b.seconds,
        fsyncs,
        commits_per_fsync: commits as f64 / fsyncs.max(1) as f64,
        latency_us_p50: percentile(&lat, 0.5),
        latency_us_p99: percentile(&lat, 0.99),
    })
}

#[derive(Debug, serde::Serialize)]
struct FetchRun {
    case: &'static str,
    fetches: u64,
    ns_per_fetch: f64,
    mob_versions_per_page: f64,
}

/// Times `n` fetches of pages chosen by a simple PRNG among `pages`.
fn time_fetches(engine: &Engine, pages: &[PageId], n: u64) -> Result<f64> {
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    let t = Instant::now();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = pages[(x % pages.len() as u64) as usize];
        std::hint::black_box(engine.fetch(p)?);
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

fn fetch_runs(b: &EngineBench) -> Result<Vec<FetchRun>> {
    let opts = EngineOptions {
        background_flusher: false,
        mob_bytes: 1 << 30,
        page_cache_bytes: 256 << 20,
        ..EngineOptions::default()
    };
    let db = fresh_db(&b.dir, "fetch", opts)?;
    // 2,000 pages of 60-byte objects (about 130 per page), bulk-loaded.
    let mut orefs = Vec::new();
    {
        let mut l = db.engine.bulk_load()?;
        while orefs.len() < 2000 * 130 {
            orefs.push(l.add(&item(db.class.raw(), 0, 40))?);
        }
        l.finish()?;
    }
    let mut pages: Vec<PageId> = orefs.iter().filter_map(|o| o.page()).collect();
    pages.dedup();
    let n = 200_000;
    let mut runs = Vec::new();
    // Page file reads (through the OS cache): a fresh engine has an empty page cache.
    {
        let cold = time_fetches(&db.engine, &pages, pages.len() as u64)?;
        runs.push(FetchRun {
            case: "page cache miss (read from page file)",
            fetches: pages.len() as u64,
            ns_per_fetch: cold,
            mob_versions_per_page: 0.0,
        });
    }
    let hot = time_fetches(&db.engine, &pages, n)?;
    runs.push(FetchRun {
        case: "cached, no MOB versions",
        fetches: n,
        ns_per_fetch: hot,
        mob_versions_per_page: 0.0,
    });
    // Ten versions per page in the MOB.
    for chunk in orefs.chunks(130) {
        let versions =
            chunk.iter().step_by(13).map(|o| (*o, item(db.class.raw(), 1, 40))).collect();
        db.engine.commit(CommitRequest { versions, created: vec![] })?;
    }
    let s = db.engine.stats();
    let with_mob = time_fetches(&db.engine, &pages, n)?;
    runs.push(FetchRun {
        case: "cached, MOB versions applied",
        fetches: n,
        ns_per_fetch: with_mob,
        mob_versions_per_page: s.mob_entries as f64 / pages.len() as f64,
    });
    Ok(runs)
}

#[derive(Debug, serde::Serialize)]
struct BulkRun {
    objects: u64,
    bytes: u64,
    pages: u64,
    seconds: f64,
    mb_per_s: f64,
}

fn bulk_run(b: &EngineBench) -> Result<BulkRun> {
    let db = fresh_db(&b.dir, "bulk", EngineOptions::default())?;
    let target = b.bulk_mb << 20;
    let t = Instant::now();
    let mut l = db.engine.bulk_load()?;
    let mut prev: Option<Oref> = None;
    let mut seq = 0u32;
    while l.bytes() < target {
        seq += 1;
        // OO7-like objects: small, linked to their predecessor.
        let mut o = item(db.class.raw(), seq, 28);
        if let Some(p) = prev {
            put_u32(&mut o, 4, p.raw());
        }
        prev = Some(l.add(&o)?);
    }
    let objects = l.objects();
    let r = l.finish()?;
    let secs = t.elapsed().as_secs_f64();
    let page_bytes = r.pages * db.engine.page_size() as u64;
    Ok(BulkRun {
        objects,
        bytes: page_bytes,
        pages: r.pages,
        seconds: secs,
        mb_per_s: page_bytes as f64 / secs / 1e6,
    })
}

fn engine(b: EngineBench) -> Result<()> {
    let mut commits = Vec::new();
    for threads in [1, 4, 16] {
        if !b.json {
            eprintln!("commit throughput, {threads} thread(s), {} s ...", b.seconds);
        }
        commits.push(commit_run(&b, threads)?);
    }
    if !b.json {
        eprintln!("fetch latency ...");
    }
    let fetches = fetch_runs(&b)?;
    if !b.json {
        eprintln!("bulk load of {} MB ...", b.bulk_mb);
    }
    let bulk = bulk_run(&b)?;
    if b.json {
        let v = serde_json::json!({ "commits": commits, "fetches": fetches, "bulk_load": bulk });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("\ncommits (one version + one created object per commit, fsync per group)");
    println!(
        "{:>8} {:>10} {:>12} {:>8} {:>14} {:>10} {:>10}",
        "threads", "commits", "commits/s", "fsyncs", "commits/fsync", "p50 us", "p99 us"
    );
    for c in &commits {
        println!(
            "{:>8} {:>10} {:>12.0} {:>8} {:>14.2} {:>10.0} {:>10.0}",
            c.threads,
            c.commits,
            c.commits_per_s,
            c.fsyncs,
            c.commits_per_fsync,
            c.latency_us_p50,
            c.latency_us_p99
        );
    }
    println!("\nfetch latency (8 KB pages)");
    println!("{:<40} {:>10} {:>12} {:>16}", "case", "fetches", "ns/fetch", "versions/page");
    for f in &fetches {
        println!(
            "{:<40} {:>10} {:>12.0} {:>16.1}",
            f.case, f.fetches, f.ns_per_fetch, f.mob_versions_per_page
        );
    }
    println!("\nbulk load");
    println!(
        "{} objects, {} pages, {:.1} MB in {:.2} s: {:.0} MB/s",
        bulk.objects,
        bulk.pages,
        bulk.bytes as f64 / 1e6,
        bulk.seconds,
        bulk.mb_per_s
    );
    Ok(())
}

#[derive(Debug, Args)]
struct NetBench {
    /// Directory to create the benchmark database in (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds per run.
    #[arg(long, value_parser = crate::positive_seconds, allow_negative_numbers = true, default_value_t = 2.0)]
    seconds: f64,
    /// Clients of the concurrent runs (one thread and one connection each).
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 4)]
    clients: usize,
    /// Pages of objects to load (all of them fit the server's page cache).
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 2000)]
    pages: usize,
    /// Worker threads of the server's runtime (0: one per core).
    #[arg(long, default_value_t = 0)]
    server_threads: usize,
    /// Run the server on tokio's work-stealing runtime instead of a single-threaded runtime
    /// per thread (`thor_net::Threading`).
    #[arg(long)]
    work_stealing: bool,
    /// Also fetch over a Unix-domain socket (a second server on a socket in a temporary
    /// directory, serving the same engine).
    #[arg(long)]
    unix: bool,
    /// Also fetch and commit over TLS (a second server on the same engine, with a throwaway
    /// certificate made for the run).
    #[arg(long)]
    tls: bool,
    /// Also measure the loopback floor with each number of clients, in this run.
    #[arg(long)]
    floor: bool,
    /// Fetches only: skip the commit runs.
    #[arg(long)]
    fetch_only: bool,
    /// Rounds of the fetch measurements (floor and fetches, each number of clients); with
    /// `--floor`, each fetch's ratio to the floor of its own round is summarised as median and
    /// range over the rounds, so that a busy moment moves both sides of a ratio.
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 1)]
    runs: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Timed round trips per client of a floor measurement in `thor bench net --floor`.
const FLOOR_ROUND_TRIPS: u32 = 5_000;

/// Untimed round trips before them.
const FLOOR_WARMUP: u32 = 500;

#[derive(Debug, serde::Serialize)]
struct NetRun {
    /// Which round of `--runs` (0 for the commit runs).
    round: usize,
    op: &'static str,
    transport: &'static str,
    clients: usize,
    ops: u64,
    ops_per_s: f64,
    latency_us_p50: f64,
    latency_us_p99: f64,
}

/// Runs `op` on `clients` threads, each with its own transport from `connect` and its own state
/// from `setup`, for `seconds`; returns the operations and the latency of each.
fn drive<T, S>(
    clients: usize,
    seconds: f64,
    connect: impl Fn() -> Result<T> + Sync,
    setup: impl Fn(&mut T, usize) -> Result<S> + Sync,
    op: impl Fn(&mut T, &mut S, u64) -> Result<()> + Sync,
) -> Result<Vec<Duration>>
where
    T: thor_wire::Transport,
{
    let (connect, setup, op) = (&connect, &setup, &op);
    // Every client warms up, then all start timing together and stop at one deadline, so that
    // ops / seconds is the throughput of all of them running at once.
    let barrier = &std::sync::Barrier::new(clients);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || -> Result<Vec<Duration>> {
                    let mut t = connect()?;
                    let mut state = setup(&mut t, c)?;
                    // Warm up (connection buffers, caches) before timing.
                    for i in 0..100 {
                        op(&mut t, &mut state, i)?;
                    }
                    barrier.wait();
                    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                    let mut lat = Vec::new();
                    let mut i = 100;
                    while Instant::now() < deadline {
                        let start = Instant::now();
                        op(&mut t, &mut state, i)?;
                        lat.push(start.elapsed());
                        i += 1;
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??);
        }
        Ok(all)
    })
}

fn summarize(
    op: &'static str,
    transport: &'static str,
    clients: usize,
    seconds: f64,
    mut lat: Vec<Duration>,
) -> NetRun {
    lat.sort();
    NetRun {
        round: 0,
        op,
        transport,
        clients,
        ops: lat.len() as u64,
        ops_per_s: lat.len() as f64 / seconds.max(1e-9),
        latency_us_p50: percentile(&lat, 0.5),
        latency_us_p99: percentile(&lat, 0.99),
    }
}

/// The per-client state of a fetch run: a PRNG seed, different per client.
fn seed<T>(_: &mut T, client: usize) -> Result<u64> {
    Ok(0x2545_F491_4F6C_DD1D_u64 ^ ((client as u64 + 1) * 0x9E37_79B9))
}

fn fetch_op<T: thor_wire::Transport>(
    pages: &[PageId],
) -> impl Fn(&mut T, &mut u64, u64) -> Result<()> + Sync + '_ {
    move |t, x, _| {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let page = pages[(*x % pages.len() as u64) as usize];
        match t.round_trip(&Request::new(RequestBody::Fetch { page }))?.body {
            ReplyBody::Page { bytes, .. } => {
                std::hint::black_box(bytes);
                Ok(())
            }
            other => anyhow::bail!("fetch of {page:?} answered {}", other.name()),
        }
    }
}

fn commit_setup<T: thor_wire::Transport>(
    class: Oref,
) -> impl Fn(&mut T, usize) -> Result<Oref> + Sync {
    move |t, _| {
        let req = Request::new(RequestBody::Commit(Commit {
            created: vec![Bytes::from(item(class.raw(), 0, 16))],
            ..Commit::default()
        }));
        match t.round_trip(&req)?.body {
            ReplyBody::CommitOk { created, .. } => Ok(created[0]),
            other => anyhow::bail!("setup commit answered {other:?}"),
        }
    }
}

fn commit_op<T: thor_wire::Transport>(
    class: Oref,
) -> impl Fn(&mut T, &mut Oref, u64) -> Result<()> + Sync {
    move |t, owned, seq| {
        let seq = seq as u32;
        let req = Request::new(RequestBody::Commit(Commit {
            reads: vec![*owned],
            versions: vec![(*owned, Bytes::from(item(class.raw(), seq, 16)))],
            created: vec![Bytes::from(item(class.raw(), seq, 32))],
            id: None,
            leaves: Vec::new(),
        }));
        match t.round_trip(&req)?.body {
            ReplyBody::CommitOk { .. } => Ok(()),
            other => anyhow::bail!("commit answered {other:?}"),
        }
    }
}

fn net(b: NetBench) -> Result<()> {
    let db = fresh_db(&b.dir, "net", EngineOptions::default())?;
    let pages = net_pages(&db, b.pages)?;
    let handler = db.engine.clone();
    let threading = match b.work_stealing {
        true => Threading::WorkStealing,
        false => Threading::PerThread,
    };
    let net = NetConfig { worker_threads: b.server_threads, threading, ..NetConfig::default() };
    let server = Server::start("127.0.0.1:0", handler.clone(), net.clone())?;
    let addr = server.local_addr();
    let cfg = ClientConfig { client_name: "thor bench net".into(), ..ClientConfig::default() };
    let tcp = || TcpTransport::connect(addr, &cfg).map_err(anyhow::Error::from);
    let local = || LocalTransport::connect(handler.clone(), &cfg).map_err(anyhow::Error::from);

    let mut runs = Vec::new();
    let say = |what: &str| {
        if !b.json {
            eprintln!("{what}, {} s ...", b.seconds);
        }
    };
    let socket_dir = tempfile::tempdir().context("creating a directory for the socket")?;
    let socket = socket_dir.path().join("thor.sock");
    let unix_server =
        b.unix.then(|| Server::start_unix(&socket, handler.clone(), net.clone())).transpose()?;
    let unix = || UnixTransport::connect(&socket, &cfg).map_err(anyhow::Error::from);
    let tls_server = b.tls.then(|| tls_server(&handler, &net)).transpose()?;
    let tls = || -> Result<TlsTransport> {
        let (addr, _, client) = tls_server.as_ref().context("no TLS server")?;
        TlsTransport::connect(addr, &cfg, client).map_err(anyhow::Error::from)
    };
    let floor = |socket, clients| net_floor(socket, clients, db.engine.page_size());
    for (round, clients) in (0..b.runs).flat_map(|r| [(r, 1), (r, b.clients)]) {
        let first = runs.len();
        if b.runs > 1 && !b.json {
            eprintln!("round {} of {}:", round + 1, b.runs);
        }
        if b.floor {
            say(&format!("floor over TCP, {clients} client(s)"));
            runs.push(floor(crate::floor::Socket::Tcp, clients)?);
        }
        say(&format!("fetch over TCP, {clients} client(s)"));
        let lat = drive(clients, b.seconds, tcp, seed, fetch_op(&pages))?;
        runs.push(summarize("fetch", "tcp", clients, b.seconds, lat));
        if b.unix {
            if b.floor {
                say(&format!("floor over a Unix socket, {clients} client(s)"));
                runs.push(floor(crate::floor::Socket::Unix, clients)?);
            }
            say(&format!("fetch over a Unix socket, {clients} client(s)"));
            let lat = drive(clients, b.seconds, unix, seed, fetch_op(&pages))?;
            runs.push(summarize("fetch", "unix", clients, b.seconds, lat));
        }
        if b.tls {
            say(&format!("fetch over TLS, {clients} client(s)"));
            let lat = drive(clients, b.seconds, tls, seed, fetch_op(&pages))?;
            runs.push(summarize("fetch", "tls", clients, b.seconds, lat));
        }
        say(&format!("fetch in process, {clients} client(s)"));
        let lat = drive(clients, b.seconds, local, seed, fetch_op(&pages))?;
        runs.push(summarize("fetch", "in-process", clients, b.seconds, lat));
        for r in &mut runs[first..] {
            r.round = round;
        }
    }
    if let Some(s) = unix_server {
        s.shutdown()?;
    }
    for clients in [1, b.clients] {
        if b.fetch_only {
            break;
        }
        say(&format!("commit over TCP, {clients} client(s)"));
        let lat = drive(clients, b.seconds, tcp, commit_setup(db.class), commit_op(db.class))?;
        runs.push(summarize("commit", "tcp", clients, b.seconds, lat));
        if b.tls {
            say(&format!("commit over TLS, {clients} client(s)"));
            let lat = drive(clients, b.seconds, tls, commit_setup(db.class), commit_op(db.class))?;
            runs.push(summarize("commit", "tls", clients, b.seconds, lat));
        }
        say(&format!("commit in process, {clients} client(s)"));
        let lat = drive(clients, b.seconds, local, commit_setup(db.class), commit_op(db.class))?;
        runs.push(summarize("commit", "in-process", clients, b.seconds, lat));
    }
    server.shutdown()?;
    if let Some((_, s, _)) = tls_server {
        s.shutdown()?;
    }
    let ratios = floor_ratios(&runs);
    if b.json {
        let v = serde_json::json!({ "runs": runs, "against_floor": ratios });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_net(&runs, &ratios, db.engine.page_size(), b.runs);
    Ok(())
}

/// One floor measurement of `thor bench net --floor`: `clients` clients doing round trips of
/// a page's bytes (`reply_bytes`) over `socket`, with no store behind it.
fn net_floor(socket: crate::floor::Socket, clients: usize, reply_bytes: usize) -> Result<NetRun> {
    let r = crate::floor::measure(&crate::floor::FloorConfig {
        socket,
        reply_bytes,
        round_trips: FLOOR_ROUND_TRIPS,
        warmup: FLOOR_WARMUP,
        clients,
        pin: false,
    })?;
    Ok(NetRun {
        round: 0,
        op: "floor",
        transport: socket.name(),
        clients,
        ops: r.round_trips,
        // Each client runs its round trips back to back: throughput is clients over the
        // mean round trip.
        ops_per_s: clients as f64 * 1e6 / r.mean_us.max(f64::MIN_POSITIVE),
        latency_us_p50: r.p50_us,
        latency_us_p99: r.p99_us,
    })
}

/// A TLS server on a loopback port, beside the plain one, with a throwaway certificate:
/// its address, the server, and the client's settings that trust it.
fn tls_server(handler: &Arc<Engine>, net: &NetConfig) -> Result<(String, Server, TlsClient)> {
    let (server_tls, client_tls) = throwaway_tls()?;
    let tls_net = NetConfig { tls: Some(server_tls), ..net.clone() };
    let s = Server::start("127.0.0.1:0", handler.clone(), tls_net)?;
    Ok((s.local_addr().to_string(), s, client_tls))
}

/// Bulk-loads `n` pages of 130 small items each into `db` and reads every page once, so that
/// the runs measure the protocol and not page-file reads. Returns the pages.
fn net_pages(db: &Db, n: usize) -> Result<Vec<PageId>> {
    let per_page = 130;
    let mut pages = Vec::new();
    {
        let mut l = db.engine.bulk_load()?;
        for _ in 0..n * per_page {
            if let Some(p) = l.add(&item(db.class.raw(), 0, 40))?.page()
                && pages.last() != Some(&p)
            {
                pages.push(p);
            }
        }
        l.finish()?;
    }
    for p in &pages {
        db.engine.fetch(*p)?;
    }
    Ok(pages)
}

/// `thor bench net`'s tables: every run, then fetch against the floor (`rounds` rounds).
fn print_net(runs: &[NetRun], ratios: &[AgainstFloor], page_size: usize, rounds: usize) {
    println!(
        "\nround trips ({} KB pages; commit = one new version + one created object, fsynced)",
        page_size / 1024
    );
    println!(
        "{:<8} {:<11} {:>8} {:>10} {:>12} {:>10} {:>10}",
        "op", "transport", "clients", "ops", "ops/s", "p50 us", "p99 us"
    );
    for r in runs {
        println!(
            "{:<8} {:<11} {:>8} {:>10} {:>12.0} {:>10.1} {:>10.1}",
            r.op, r.transport, r.clients, r.ops, r.ops_per_s, r.latency_us_p50, r.latency_us_p99
        );
    }
    if !ratios.is_empty() {
        println!("\nfetch / floor of the same round, median (min-max) over {} round(s)", rounds);
        println!(
            "{:<11} {:>8} {:>11} {:>11} {:>22} {:>22}",
            "transport", "clients", "floor p50", "fetch p50", "p50 ratio", "p99 ratio"
        );
        for r in ratios {
            let range = |s: &Spread| format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max);
            println!(
                "{:<11} {:>8} {:>11.1} {:>11.1} {:>22} {:>22}",
                r.transport,
                r.clients,
                r.floor_p50_us.median,
                r.fetch_p50_us.median,
                range(&r.p50),
                range(&r.p99)
            );
        }
    }
}

/// A throwaway CA and a certificate for 127.0.0.1 it signed, made for one `--tls` run: the
/// server's settings and the client's (trusting that CA).
fn throwaway_tls() -> Result<(TlsServer, TlsClient)> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    let server = TlsServer::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), None)?;
    let client = TlsClient::from_ca_pem(ca.pem().as_bytes())?;
    Ok((server, client))
}

/// A fetch row against the floor: each round's fetch over the same round's floor.
#[derive(Debug, serde::Serialize)]
struct AgainstFloor {
    transport: &'static str,
    clients: usize,
    floor_p50_us: Spread,
    fetch_p50_us: Spread,
    p50: Spread,
    p99: Spread,
}

/// Every fetch over a socket that has a floor measured in its round, by transport and
/// clients.
fn floor_ratios(runs: &[NetRun]) -> Vec<AgainstFloor> {
    let mut keys: Vec<(&'static str, usize)> = Vec::new();
    for r in runs.iter().filter(|r| r.op == "floor") {
        if !keys.contains(&(r.transport, r.clients)) {
            keys.push((r.transport, r.clients));
        }
    }
    let mut out = Vec::new();
    for (transport, clients) in keys {
        let (mut floor, mut fetch, mut p50, mut p99) = (vec![], vec![], vec![], vec![]);
        let rows = |op: &'static str| {
            runs.iter()
                .filter(move |r| r.op == op && r.transport == transport && r.clients == clients)
        };
        for f in rows("floor") {
            let Some(x) = rows("fetch").find(|x| x.round == f.round) else { continue };
            floor.push(f.latency_us_p50);
            fetch.push(x.latency_us_p50);
            p50.push(x.latency_us_p50 / f.latency_us_p50.max(f64::MIN_POSITIVE));
            p99.push(x.latency_us_p99 / f.latency_us_p99.max(f64::MIN_POSITIVE));
        }
        if !p50.is_empty() {
            out.push(AgainstFloor {
                transport,
                clients,
                floor_p50_us: spread(floor),
                fetch_p50_us: spread(fetch),
                p50: spread(p50),
                p99: spread(p99),
            });
        }
    }
    out
}
