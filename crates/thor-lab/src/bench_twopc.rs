//! `thor bench twopc`: commit latency at one server against two, read-only against
//! read-write, over loopback TCP (thor-ecoop99 section 4.2: a read-write transaction over
//! several servers learns its outcome after three message delays, a read-only one after two,
//! one at a single server skips two-phase commit).
//!
//! Two servers run in this process, each a real `thor server` stack (an engine on files in a
//! temporary directory, with fsync, behind the TCP server, peers over TCP), and one client
//! (`thor_client::Cluster`) runs transactions of five kinds, one kind at a time: a write at
//! one server, a read at one server, writes at both, reads at both, and a write at one with a
//! read at the other (a read-only participant). Every object a transaction touches is cached,
//! so what is timed is the commit: from `Cluster::commit` to its return. Each kind runs
//! `--txns` transactions after a warm-up, `--runs` times; the table gives the median of the
//! runs' p50 and p99 with their range.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use thor_client::{Cluster, ClusterStats, LatencyHistogram, SessionConfig, XRef};
use thor_core::ServerId;
use thor_net::{ClientConfig, NetConfig, Server, TcpPeers, TcpTransport};
use thor_server::{Engine, EngineOptions, PeerSink};
use thor_storage::FileDisk;

use crate::bank::Account;

/// Options of `thor bench twopc`.
#[derive(Debug, Args)]
pub struct TwoPcBench {
    /// Directory for the two databases (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Transactions timed per kind and run.
    #[arg(long, value_parser = crate::at_least_one::<usize>, default_value_t = 2000)]
    txns: usize,
    /// Runs per kind.
    #[arg(long, value_parser = crate::at_least_one::<usize>, default_value_t = 3)]
    runs: usize,
    /// Write CSV, JSON and a chart of p50 and p99 per kind here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Where the servers are: over loopback TCP (each behind its TCP server, peers over TCP) or
    /// in this process (in-process transport, peers delivered directly).
    #[arg(long, value_enum, default_value = "tcp")]
    over: Over,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Over {
    Tcp,
    Embedded,
}

const S1: ServerId = ServerId(1);
const S2: ServerId = ServerId(2);

/// What a kind of transaction does at each server: write, read, or nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Use {
    Write,
    Read,
    None,
}

const KINDS: [(&str, Use, Use); 5] = [
    ("1 server, read-write", Use::Write, Use::None),
    ("1 server, read-only", Use::Read, Use::None),
    ("2 servers, read-write", Use::Write, Use::Write),
    ("2 servers, read-only", Use::Read, Use::Read),
    ("2 servers, write 1 + read 1", Use::Write, Use::Read),
];

#[derive(Debug, serde::Serialize)]
struct KindResult {
    kind: &'static str,
    /// Per run: p50 and p99 in microseconds.
    p50_us: Vec<f64>,
    p99_us: Vec<f64>,
    mean_us: Vec<f64>,
    txns_per_run: usize,
    /// Server-to-server messages sent per transaction (both servers, last run).
    peer_messages_per_txn: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::MAX, f64::min), v.iter().copied().fold(0.0, f64::max))
}

/// A server of the bench: its engine and, over TCP, its TCP server and peers.
struct Node {
    engine: Arc<Engine>,
    server: Option<Server>,
    peers: Option<Arc<TcpPeers>>,
}

pub fn run(b: TwoPcBench) -> Result<()> {
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    let base = b.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let local = thor_server::LocalPeers::new();
    let nodes = start_nodes(&b, &base, &local)?;
    let targets: HashMap<ServerId, (Arc<Engine>, Option<SocketAddr>)> = nodes
        .iter()
        .map(|n| {
            (n.engine.server_id(), (n.engine.clone(), n.server.as_ref().map(|s| s.local_addr())))
        })
        .collect();
    let connect = Box::new(move |id: ServerId| {
        let cfg = ClientConfig { client_name: "thor bench twopc".into(), ..Default::default() };
        let (engine, addr) = &targets[&id];
        Ok(match addr {
            Some(a) => Box::new(TcpTransport::connect(*a, &cfg)?) as Box<dyn thor_wire::Transport>,
            None => Box::new(thor_net::LocalTransport::connect(engine.clone(), &cfg)?),
        })
    });
    let c = Cluster::new(&[S1, S2], S1, connect, SessionConfig::default())?;
    // An account at each server, in root slot 0.
    let mut accounts = Vec::new();
    for id in [S1, S2] {
        let a = c.create_fixed::<Account>(id)?;
        c.session(id)?.set_root(0, a.r)?;
        c.commit()?;
        accounts.push(XRef::at(id, c.session(id)?.root::<Account>(0)?));
    }
    let mut results = Vec::new();
    for (kind, u1, u2) in KINDS {
        if !b.json {
            eprintln!("{kind}: {} runs of {} transactions ...", b.runs, b.txns);
        }
        let mut r = KindResult {
            kind,
            p50_us: Vec::new(),
            p99_us: Vec::new(),
            mean_us: Vec::new(),
            txns_per_run: b.txns,
            peer_messages_per_txn: 0.0,
        };
        for _ in 0..b.runs {
            let sent_before = peer_total(&nodes, &local);
            let mut lat = LatencyHistogram::new();
            for i in 0..(b.txns + b.txns / 10) {
                let mut value = 0;
                for (x, u) in accounts.iter().zip([u1, u2]) {
                    match u {
                        Use::None => {}
                        Use::Read => value += c.get(*x)?.get(Account::balance),
                        Use::Write => {
                            let v = c.get(*x)?;
                            v.set(Account::balance, v.get(Account::balance) + 1)?;
                        }
                    }
                }
                std::hint::black_box(value);
                let t = Instant::now();
                c.commit().with_context(|| format!("{kind}: commit"))?;
                // The first tenth warms up (connections, caches, the servers' queues).
                if i >= b.txns / 10 {
                    lat.record(t.elapsed());
                }
            }
            let sent = peer_total(&nodes, &local) - sent_before;
            r.peer_messages_per_txn = sent as f64 / (b.txns + b.txns / 10) as f64;
            r.p50_us.push(us(lat.percentile(0.50)));
            r.p99_us.push(us(lat.percentile(0.99)));
            r.mean_us.push(us(lat.sum()) / lat.count() as f64);
        }
        results.push(r);
    }
    if b.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_results(&b, &results, &c.stats());
    }
    if let Some(dir) = &b.out {
        write_out(dir, &results)?;
    }
    for n in nodes {
        if let Some(s) = n.server {
            s.shutdown()?;
        }
        drop(n.engine);
    }
    Ok(())
}

/// The two servers, each with its own new database under `base`, peers of each other over
/// loopback TCP or in process (`local`).
fn start_nodes(
    b: &TwoPcBench,
    base: &Path,
    local: &Arc<thor_server::LocalPeers>,
) -> Result<Vec<Node>> {
    let listeners = [TcpListener::bind("127.0.0.1:0")?, TcpListener::bind("127.0.0.1:0")?];
    let addrs: [SocketAddr; 2] = [listeners[0].local_addr()?, listeners[1].local_addr()?];
    let mut nodes = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let id = ServerId(i as u32 + 1);
        let other = ServerId(2 - i as u32);
        let dir = base.join(format!("server-{}", id.0));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        let peers = match b.over {
            Over::Tcp => Some(TcpPeers::start(
                &HashMap::from([(other, addrs[1 - i])]),
                &ClientConfig {
                    client_name: format!("bench server {}", id.0),
                    ..Default::default()
                },
            )?),
            Over::Embedded => None,
        };
        let sink: Arc<dyn PeerSink> = match &peers {
            Some(p) => p.clone(),
            None => local.clone(),
        };
        let opts = EngineOptions {
            server_id: id,
            peers: Some(sink),
            twopc: thor_server::TwoPcConfig { peers: vec![other], ..Default::default() },
            ..EngineOptions::default()
        };
        let disk = Arc::new(FileDisk::open_locked(&dir, true, "thor bench twopc")?);
        let engine = Arc::new(Engine::create(disk, opts)?);
        local.register(&engine);
        let server = match b.over {
            Over::Tcp => Some(Server::start_on(listener, engine.clone(), NetConfig::default())?),
            Over::Embedded => None,
        };
        nodes.push(Node { engine, server, peers });
    }
    Ok(nodes)
}

/// The results as a table on stdout, with the client's commit counts (`st`).
fn print_results(b: &TwoPcBench, results: &[KindResult], st: &ClusterStats) {
    let over = match b.over {
        Over::Tcp => "over loopback TCP",
        Over::Embedded => "in process",
    };
    println!(
        "commit latency {over}, fsync on each server's log ({} runs of {} transactions per kind)",
        b.runs, b.txns
    );
    println!(
        "{:<30} {:>12} {:>20} {:>12} {:>20} {:>10}",
        "kind", "p50 us", "(min..max)", "p99 us", "(min..max)", "msgs/txn"
    );
    for r in results {
        let (a, z) = range(&r.p50_us);
        let (a9, z9) = range(&r.p99_us);
        println!(
            "{:<30} {:>12.0} {:>20} {:>12.0} {:>20} {:>10.1}",
            r.kind,
            median(&r.p50_us),
            format!("({a:.0}..{z:.0})"),
            median(&r.p99_us),
            format!("({a9:.0}..{z9:.0})"),
            r.peer_messages_per_txn
        );
    }
    println!(
        "client: {} one-server commits, {} two-phase ({} read-only), {} refused",
        st.single_server, st.two_phase, st.two_phase_read_only, st.two_phase_refused
    );
}

/// Messages between the servers so far.
fn peer_total(nodes: &[Node], local: &thor_server::LocalPeers) -> u64 {
    let tcp: u64 = nodes
        .iter()
        .filter_map(|n| n.peers.as_ref())
        .map(|p| p.counters().sent.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    tcp + local.counts().0
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn write_out(dir: &std::path::Path, results: &[KindResult]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut csv = String::from("kind,run,p50_us,p99_us,mean_us,peer_messages_per_txn\n");
    for r in results {
        for i in 0..r.p50_us.len() {
            csv.push_str(&format!(
                "{},{},{:.1},{:.1},{:.1},{:.2}\n",
                r.kind, i, r.p50_us[i], r.p99_us[i], r.mean_us[i], r.peer_messages_per_txn
            ));
        }
    }
    std::fs::write(dir.join("commit-latency.csv"), csv)?;
    std::fs::write(dir.join("commit-latency.json"), serde_json::to_string_pretty(results)?)?;
    let groups: Vec<String> = results.iter().map(|r| r.kind.to_string()).collect();
    let series = vec![
        ("p50".to_string(), results.iter().map(|r| median(&r.p50_us)).collect()),
        ("p99".to_string(), results.iter().map(|r| median(&r.p99_us)).collect()),
    ];
    let spec = crate::plot::ChartSpec {
        title: "Commit latency, one server against two (loopback TCP)".into(),
        x_label: "transaction".into(),
        y_label: "commit latency (us, median of runs)".into(),
        ..Default::default()
    };
    crate::plot::bar_chart(&dir.join("commit-latency"), &spec, &groups, &series)?;
    Ok(())
}
