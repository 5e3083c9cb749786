//! `thor oo7 cluster`: OO7 with its two modules at two servers against both at one server
//! (thor-ecoop99 section 3.1's partitioning; the issue "Several servers").
//!
//! ```text
//! thor oo7 cluster --dir BASE [--size small] [--traversal t1,dynamic] [--cache-mb 64]
//!                  [--policy hac] [--runs 3] [--over embedded|tcp] [--out DIR] [--json]
//! ```
//!
//! `BASE` gets three databases (loaded on first use, reused after): `one`, an OO7 database of
//! the size with two modules at server 1; `s1` and `s2`, one module each (seeds differing, so
//! two modules of the same shape) at servers 1 and 2. Every run starts cold: the servers are
//! opened afresh (empty page caches) and the client starts with an empty cache. One server: a
//! session with the whole cache budget; two servers: a `Cluster` whose sessions get half each
//! (`thor_oo7::split` says how each workload runs). Over TCP each server listens on loopback
//! and the two reach each other through `TcpPeers`; embedded, they share the process and
//! `LocalPeers`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{Cluster, PolicyConfig, SessionConfig};
use thor_core::ServerId;
use thor_oo7::experiment::{RunConfig, Workload, run_in};
use thor_oo7::params::Params;
use thor_oo7::split::{SplitReport, run_split};
use thor_server::{Engine, EngineOptions, LocalPeers, PeerSink};
use thor_storage::FileDisk;

/// Options of `thor oo7 cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Where the three databases are (created and loaded if absent).
    #[arg(long)]
    dir: PathBuf,
    /// OO7 size of each module: small, medium, tiny.
    #[arg(long, default_value = "small")]
    size: String,
    /// Workloads, comma-separated: traversals that walk modules (t1, t1-, t6, ...) and
    /// `dynamic`.
    #[arg(long, value_delimiter = ',', default_value = "t1,dynamic")]
    traversal: Vec<String>,
    /// The client's cache budget in MiB (split evenly over two servers' sessions).
    #[arg(long, default_value_t = 64.0)]
    cache_mb: f64,
    /// The cache manager.
    #[arg(long, default_value = "hac")]
    policy: String,
    /// Runs per point (median and range reported).
    #[arg(long, value_parser = crate::at_least_one::<usize>, default_value_t = 3)]
    runs: usize,
    /// Where the servers are: in this process (embedded) or over loopback TCP.
    #[arg(long, value_enum, default_value = "tcp")]
    over: Over,
    /// Write CSV and JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Over {
    Embedded,
    Tcp,
}

#[derive(Debug, serde::Serialize)]
struct Point {
    traversal: String,
    servers: usize,
    /// Per run: fetches (all servers), elapsed and commit seconds.
    fetches: Vec<u64>,
    fetches_per_server: Vec<Vec<u64>>,
    elapsed_s: Vec<f64>,
    commit_s: Vec<f64>,
    parts_visited: u64,
    two_phase_commits: u64,
}

/// A database: created with server id `id` and loaded with `params` if `dir` has none.
fn ensure(dir: &Path, id: u32, params: &Params, quiet: bool) -> Result<()> {
    if dir.join("superblock").exists() || dir.join("SUPERBLOCK").exists() || is_db(dir) {
        return Ok(());
    }
    if !quiet {
        eprintln!("loading {} ({} module(s), server {id}) ...", dir.display(), params.modules);
    }
    std::fs::create_dir_all(dir)?;
    let disk = Arc::new(FileDisk::open_locked(dir, true, "thor oo7 cluster")?);
    let opts = EngineOptions {
        server_id: ServerId(id),
        background_flusher: false,
        ..EngineOptions::default()
    };
    let engine = Engine::create(disk, opts)?;
    thor_oo7::load::load(&engine, params, thor_oo7::load::LoadOptions::default(), |_, _| {})?;
    engine.close()?;
    Ok(())
}

/// Whether `dir` holds a database (it opens).
fn is_db(dir: &Path) -> bool {
    dir.is_dir()
        && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
        && thor_oo7::experiment::open_embedded(dir).is_ok()
}

/// A server of a run: its engine and, over TCP, its listener.
struct Node {
    engine: Arc<Engine>,
    server: Option<thor_net::Server>,
}

/// Opens the databases in `dirs` (server ids 1, 2, ...) as peers of each other.
fn open(dirs: &[PathBuf], over: Over) -> Result<Vec<Node>> {
    let listeners: Vec<std::net::TcpListener> = (0..dirs.len())
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()?;
    let addrs: Vec<std::net::SocketAddr> =
        listeners.iter().map(|l| l.local_addr()).collect::<std::io::Result<_>>()?;
    let local = LocalPeers::new();
    let mut nodes = Vec::new();
    for (i, (dir, listener)) in dirs.iter().zip(listeners).enumerate() {
        let peers: Arc<dyn PeerSink> = match over {
            Over::Embedded => local.clone(),
            Over::Tcp => {
                let others = (0..dirs.len())
                    .filter(|&j| j != i)
                    .map(|j| (ServerId(j as u32 + 1), addrs[j]))
                    .collect();
                let cfg = thor_net::ClientConfig {
                    client_name: format!("oo7 cluster server {}", i + 1),
                    ..Default::default()
                };
                thor_net::TcpPeers::start(&others, &cfg)?
            }
        };
        let twopc = thor_server::TwoPcConfig {
            peers: (1..=dirs.len() as u32).filter(|&j| j != i as u32 + 1).map(ServerId).collect(),
            ..Default::default()
        };
        let opts = EngineOptions { peers: Some(peers), twopc, ..EngineOptions::default() };
        let disk = Arc::new(FileDisk::open_locked(dir, false, "thor oo7 cluster")?);
        let engine = Arc::new(Engine::open(disk, opts)?);
        if engine.server_id().0 != i as u32 + 1 {
            bail!("{} holds server {}, expected {}", dir.display(), engine.server_id().0, i + 1);
        }
        local.register(&engine);
        let server = match over {
            Over::Embedded => None,
            Over::Tcp => {
                Some(thor_net::Server::start_on(listener, engine.clone(), Default::default())?)
            }
        };
        nodes.push(Node { engine, server });
    }
    // A server just opened refuses client timestamps up to 1 ms past its clock at recovery
    // (`thor_server_core::limits::VALIDATION_LEAD_MAX_US`: read-only validations before a
    // crash leave no record): the run starts after that.
    std::thread::sleep(Duration::from_millis(20));
    Ok(nodes)
}

fn transport(n: &Node) -> Result<Box<dyn thor_wire::Transport>, thor_client::ClientError> {
    let cfg =
        thor_net::ClientConfig { client_name: "thor oo7 cluster".into(), ..Default::default() };
    Ok(match &n.server {
        Some(s) => Box::new(thor_net::TcpTransport::connect(s.local_addr(), &cfg)?),
        None => Box::new(thor_net::LocalTransport::connect(n.engine.clone(), &cfg)?),
    })
}

fn close(nodes: Vec<Node>) -> Result<()> {
    for n in nodes {
        if let Some(s) = n.server {
            s.shutdown()?;
        }
    }
    Ok(())
}

pub fn run(a: ClusterArgs) -> Result<()> {
    let mut one = Params::preset(&a.size)?;
    one.modules = 2;
    let mut half = Params::preset(&a.size)?;
    half.modules = 1;
    let dirs = [a.dir.join("one"), a.dir.join("s1"), a.dir.join("s2")];
    ensure(&dirs[0], 1, &one, a.json)?;
    ensure(&dirs[1], 1, &half, a.json)?;
    let second = Params { seed: half.seed.wrapping_add(1), ..half };
    ensure(&dirs[2], 2, &second, a.json)?;
    let policy: PolicyConfig = a.policy.parse().map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
    let cache_bytes = (a.cache_mb * 1048576.0) as usize;
    let mut points = Vec::new();
    for t in &a.traversal {
        let workload: Workload = t.parse().with_context(|| format!("--traversal {t}"))?;
        for servers in [1usize, 2] {
            let mut p = Point {
                traversal: workload.name().to_string(),
                servers,
                fetches: Vec::new(),
                fetches_per_server: Vec::new(),
                elapsed_s: Vec::new(),
                commit_s: Vec::new(),
                parts_visited: 0,
                two_phase_commits: 0,
            };
            for run in 0..a.runs {
                if !a.json {
                    eprintln!(
                        "{} on {servers} server(s), run {} of {} ...",
                        p.traversal,
                        run + 1,
                        a.runs
                    );
                }
                if servers == 1 {
                    let nodes = open(&dirs[..1], a.over)?;
                    let s = thor_client::Session::new(
                        transport(&nodes[0])?,
                        SessionConfig { cache_bytes, policy, ..SessionConfig::default() },
                    )?;
                    let cfg = RunConfig {
                        workload,
                        policy,
                        cache_bytes,
                        hot: false,
                        seed: thor_oo7::params::DEFAULT_SEED,
                        background_replacement: true,
                        repeat: 1,
                        commit_every: 0,
                        prefetch: thor_oo7::experiment::PrefetchSetting::default(),
                    };
                    let r = run_in(&s, &cfg, thor_oo7::experiment::NoRunTrace)?;
                    drop(s);
                    close(nodes)?;
                    p.fetches.push(r.fetches);
                    p.fetches_per_server.push(vec![r.fetches]);
                    p.elapsed_s.push(r.elapsed_s);
                    p.commit_s.push(r.commit_s);
                    p.parts_visited = r.parts_visited;
                } else {
                    let nodes = open(&dirs[1..], a.over)?;
                    let r = run_on_two(&nodes, cache_bytes, policy, workload)?;
                    close(nodes)?;
                    p.fetches.push(r.fetches.iter().sum());
                    p.fetches_per_server.push(r.fetches.clone());
                    p.elapsed_s.push(r.elapsed_s);
                    p.commit_s.push(r.commit_s);
                    p.parts_visited = r.parts_visited;
                    p.two_phase_commits = r.two_phase_commits;
                }
            }
            points.push(p);
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&points)?);
    } else {
        print_table(&a, &points);
    }
    if let Some(dir) = &a.out {
        write_out(dir, &points)?;
    }
    Ok(())
}

/// One traversal with the modules split across the two servers of `nodes`, through a
/// cluster whose sessions share the cache budget.
fn run_on_two(
    nodes: &[Node],
    cache_bytes: usize,
    policy: PolicyConfig,
    workload: Workload,
) -> Result<SplitReport> {
    let ns: Vec<(Arc<Engine>, Option<std::net::SocketAddr>)> = nodes
        .iter()
        .map(|n| (n.engine.clone(), n.server.as_ref().map(|s| s.local_addr())))
        .collect();
    let connect = Box::new(move |id: ServerId| {
        let (e, addr) = &ns[id.0 as usize - 1];
        let cfg =
            thor_net::ClientConfig { client_name: "thor oo7 cluster".into(), ..Default::default() };
        Ok(match addr {
            Some(addr) => Box::new(thor_net::TcpTransport::connect(*addr, &cfg)?)
                as Box<dyn thor_wire::Transport>,
            None => Box::new(thor_net::LocalTransport::connect(e.clone(), &cfg)?),
        })
    });
    let cfg = SessionConfig { cache_bytes: cache_bytes / 2, policy, ..SessionConfig::default() };
    let ids = [ServerId(1), ServerId(2)];
    let c = Cluster::new(&ids, ids[0], connect, cfg)?;
    Ok(run_split(&c, ids, workload)?)
}

/// `OUT/oo7-cluster.csv` (one line per run) and `OUT/oo7-cluster.json`.
fn write_out(dir: &Path, points: &[Point]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut csv =
        String::from("traversal,servers,run,fetches,fetches_per_server,elapsed_ms,commit_ms\n");
    for p in points {
        for i in 0..p.fetches.len() {
            let per: Vec<String> = p.fetches_per_server[i].iter().map(u64::to_string).collect();
            csv.push_str(&format!(
                "{},{},{},{},{},{:.3},{:.3}\n",
                p.traversal,
                p.servers,
                i,
                p.fetches[i],
                per.join("+"),
                p.elapsed_s[i] * 1e3,
                p.commit_s[i] * 1e3
            ));
        }
    }
    std::fs::write(dir.join("oo7-cluster.csv"), csv)?;
    std::fs::write(dir.join("oo7-cluster.json"), serde_json::to_string_pretty(&points)?)?;
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn print_table(a: &ClusterArgs, points: &[Point]) {
    println!(
        "OO7 {} x 2 modules, cold, {} at {} MiB over {:?}: one server against the modules split over two (median of {} runs, min..max)",
        a.size, a.policy, a.cache_mb, a.over, a.runs
    );
    println!(
        "{:<10} {:>8} {:>10} {:>14} {:>12} {:>20} {:>12} {:>10}",
        "traversal",
        "servers",
        "fetches",
        "(per server)",
        "elapsed ms",
        "(min..max)",
        "commit ms",
        "2PC"
    );
    for p in points {
        let ms: Vec<f64> = p.elapsed_s.iter().map(|s| s * 1e3).collect();
        let (lo, hi) =
            (ms.iter().copied().fold(f64::MAX, f64::min), ms.iter().copied().fold(0.0, f64::max));
        let per = p
            .fetches_per_server
            .last()
            .map(|v| v.iter().map(u64::to_string).collect::<Vec<_>>().join("+"));
        println!(
            "{:<10} {:>8} {:>10} {:>14} {:>12.1} {:>20} {:>12.2} {:>10}",
            p.traversal,
            p.servers,
            p.fetches.last().copied().unwrap_or(0),
            per.unwrap_or_default(),
            median(&ms),
            format!("({lo:.1}..{hi:.1})"),
            median(&p.commit_s) * 1e3,
            p.two_phase_commits
        );
    }
}
