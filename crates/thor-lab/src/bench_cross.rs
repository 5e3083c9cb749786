//! `thor bench cross-server`: two `thor server` processes and 1, 2, 4, 8 client processes doing
//! cross-server transfers and audits (`thor bench cluster-client`: every transaction touches
//! an account at each server, so every commit is a two-phase commit; one in eight is a
//! read-only audit), with no faults or with a server SIGKILLed and restarted every
//! `--kill-every-s` seconds, alternating between the two.
//!
//! What it reports per client count, from the clients' histories (each line carries when its
//! transaction began and when its commit was answered, wall-clock microseconds) and their
//! final counts:
//!
//! - cross-server commits per second (transfers and audits acknowledged), and transfers alone;
//! - the abort rate: aborted over committed plus aborted (aborts before commit included);
//! - commit latency of acknowledged transactions, from the transaction's start to its answer:
//!   p50, p99 and max;
//! - with kills: for each kill, the time from the SIGKILL to the first acknowledged
//!   cross-server transfer answered after it (median, p90, max), which covers the restart,
//!   recovery, the clients' reconnection and any stall of two-phase commit behind the crash.
//!
//! The servers are real processes of this binary (`std::env::current_exe`), on files in a
//! temporary directory (or `--dir`), with fsync, over loopback TCP; their logs go to
//! `server-N.log` there. Issue 32 sets its goals in these terms.

use std::io::{BufRead, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::bank::wall_us;

/// Options of `thor bench cross-server`.
#[derive(Debug, Args)]
pub struct CrossBench {
    /// Client counts to run, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2, 4, 8])]
    clients: Vec<u32>,
    /// Seconds each client runs.
    #[arg(long, value_parser = crate::positive_seconds, default_value_t = 10.0)]
    seconds: f64,
    /// SIGKILL a server (the two in turn) this often and restart it; no faults without it.
    #[arg(long, value_parser = crate::positive_seconds)]
    kill_every_s: Option<f64>,
    /// Accounts at each server.
    #[arg(long, value_parser = crate::at_least_one::<usize>, default_value_t = 16)]
    accounts: usize,
    /// Directory for the databases and logs (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One run's figures.
#[derive(Debug, serde::Serialize)]
struct Row {
    clients: u32,
    seconds: f64,
    committed: u64,
    transfers: u64,
    aborted: u64,
    uncertain: u64,
    commits_per_s: f64,
    transfers_per_s: f64,
    abort_rate: f64,
    latency_ms_p50: f64,
    latency_ms_p99: f64,
    latency_ms_max: f64,
    kills: usize,
    /// Kills after which no transfer was acknowledged before the run ended.
    kills_without_ack: usize,
    kill_to_ack_ms_p50: Option<f64>,
    kill_to_ack_ms_p90: Option<f64>,
    kill_to_ack_ms_max: Option<f64>,
}

/// Slowest a server may take to listen after it is started (recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a client may run past its `--seconds` (reconnecting to a restarted server) before
/// the run is given up.
const CLIENT_GRACE: Duration = Duration::from_secs(90);

pub fn run(b: CrossBench) -> Result<()> {
    if b.clients.is_empty() || b.clients.contains(&0) {
        bail!("--clients needs counts of at least 1");
    }
    let tmp;
    let root = match &b.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().context("a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    let mut rows = Vec::new();
    for &n in &b.clients {
        let dir = root.join(format!("clients-{n}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        eprintln!("cross-server: {n} client(s) for {} s ...", b.seconds);
        rows.push(one_run(&b, n, &dir)?);
    }
    if b.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, b.kill_every_s);
    }
    Ok(())
}

/// Two servers on loopback ports, restartable at the same addresses.
struct Servers {
    dir: PathBuf,
    addrs: [SocketAddr; 2],
    procs: [Option<Child>; 2],
}

impl Servers {
    fn start(dir: &Path) -> Result<Servers> {
        let addrs = [free_addr()?, free_addr()?];
        let mut s = Servers { dir: dir.to_path_buf(), addrs, procs: [None, None] };
        s.spawn(0)?;
        s.spawn(1)?;
        Ok(s)
    }

    /// Starts server `k` (id `k + 1`), creating its database the first time, and waits until
    /// it listens.
    fn spawn(&mut self, k: usize) -> Result<()> {
        let (id, other) = (k + 1, 2 - k);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("server-{id}.log")))?;
        let child = Command::new(std::env::current_exe()?)
            .args(["server", "--create", "--dir"])
            .arg(self.dir.join(format!("db-{id}")))
            .args(["--listen", &self.addrs[k].to_string(), "--server-id", &id.to_string()])
            .args(["--peer", &format!("{other}={}", self.addrs[1 - k])])
            .env_remove("THOR_TOKEN")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a server")?;
        self.procs[k] = Some(child);
        wait_listening(self.addrs[k], &mut self.procs[k])
    }

    /// SIGKILLs server `k` and waits until it is gone.
    fn kill(&mut self, k: usize) -> Result<()> {
        if let Some(mut c) = self.procs[k].take() {
            c.kill().context("killing a server")?;
            c.wait()?;
        }
        Ok(())
    }

    fn args(&self) -> Vec<String> {
        (0..2).flat_map(|k| ["--server".into(), format!("{}={}", k + 1, self.addrs[k])]).collect()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for k in 0..2 {
            let _ = self.kill(k);
        }
    }
}

/// A loopback address with a free port (bound and released: the server started next binds it).
fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Waits until a server listens at `addr` (its process must stay up meanwhile).
fn wait_listening(addr: SocketAddr, proc: &mut Option<Child>) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = proc.as_mut().map(Child::try_wait).transpose()?.flatten() {
            bail!("the server at {addr} exited before listening ({status}); see its log");
        }
        if Instant::now() >= deadline {
            bail!("the server at {addr} did not listen within {START_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client process of `thor bench cluster-client` and its stderr, read on a thread.
struct ClientProc {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
    history: PathBuf,
}

fn client(servers: &Servers, id: u32, history: &Path, extra: &[String]) -> Result<ClientProc> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["bench", "cluster-client", "--client", &id.to_string(), "--history"])
        .arg(history)
        .args(servers.args())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting a client")?;
    let mut err = child.stderr.take().context("the client's stderr")?;
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Ok(ClientProc { child, stderr, history: history.to_path_buf() })
}

fn one_run(b: &CrossBench, n: u32, dir: &Path) -> Result<Row> {
    let mut servers = Servers::start(dir)?;
    let setup =
        ["--setup".to_string(), b.accounts.to_string(), "--seconds".into(), "0.000001".into()];
    let c = client(&servers, 1 << 30, &dir.join("setup.jsonl"), &setup)?;
    finish(c, Instant::now() + START_TIMEOUT)?;
    let extra =
        ["--seconds".to_string(), b.seconds.to_string(), "--reconnect-s".into(), "60".into()];
    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..n {
        clients.push(client(&servers, i, &dir.join(format!("history-{i}.jsonl")), &extra)?);
    }
    let mut kills = Vec::new();
    if let Some(every) = b.kill_every_s {
        let every = Duration::from_secs_f64(every);
        let end = started + Duration::from_secs_f64(b.seconds);
        let mut next = started + every;
        while next < end {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let k = kills.len() % 2;
            servers.kill(k)?;
            kills.push(wall_us());
            servers.spawn(k)?;
            next += every;
        }
    }
    let deadline = started + Duration::from_secs_f64(b.seconds) + CLIENT_GRACE;
    let mut counts = [0u64; 3];
    let mut lines = Vec::new();
    for c in clients {
        let history = c.history.clone();
        let out = finish(c, deadline)?;
        let got = final_counts(&out)
            .with_context(|| format!("a client's final counts, in its output:\n{out}"))?;
        for (t, g) in counts.iter_mut().zip(got) {
            *t += g;
        }
        lines.extend(read_history(&history)?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(servers);
    figures(n, elapsed, counts, &lines, &kills)
}

/// Waits for a client to exit (killing it at `deadline`) and returns its stderr; an error if
/// it failed.
fn finish(mut c: ClientProc, deadline: Instant) -> Result<String> {
    let status = loop {
        if let Some(s) = c.child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = c.child.kill();
            c.child.wait()?;
            bail!("a client ran past its time and was stopped");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = c.stderr.join().unwrap_or_default();
    if !status.success() {
        bail!("a client failed ({status}):\n{out}");
    }
    Ok(out)
}

/// A client's final line: `client C: X committed, Y aborted, Z uncertain, ...`.
fn final_counts(out: &str) -> Option<[u64; 3]> {
    let line = out.lines().rev().find(|l| l.starts_with("client ") && l.contains(" committed"))?;
    let (_, rest) = line.split_once(": ")?;
    let mut it = rest.split(", ").map(|p| p.split_whitespace().next()?.parse::<u64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// One history line's outcome, whether it wrote, and its times.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Line {
    committed: bool,
    transfer: bool,
    t0_us: u64,
    t1_us: u64,
}

fn read_history(path: &Path) -> Result<Vec<Line>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        // A client killed mid-line leaves a torn last line; the clients here are not killed.
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("a history line: {line}"))?;
        let num = |k: &str| v[k].as_u64().with_context(|| format!("{k} in {line}"));
        out.push(Line {
            committed: v["outcome"] == "committed",
            transfer: v["writes"].as_array().is_some_and(|w| !w.is_empty()),
            t0_us: num("t0_us")?,
            t1_us: num("t1_us")?,
        });
    }
    Ok(out)
}

/// The `q` quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i])
}

fn figures(n: u32, seconds: f64, counts: [u64; 3], lines: &[Line], kills: &[u64]) -> Result<Row> {
    let [committed, aborted, uncertain] = counts;
    if committed == 0 {
        bail!("no transaction committed: see the server logs");
    }
    let transfers = lines.iter().filter(|l| l.committed && l.transfer).count() as u64;
    let mut lat: Vec<f64> = lines
        .iter()
        .filter(|l| l.committed)
        .map(|l| l.t1_us.saturating_sub(l.t0_us) as f64 / 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    let mut acks: Vec<u64> =
        lines.iter().filter(|l| l.committed && l.transfer).map(|l| l.t1_us).collect();
    acks.sort_unstable();
    let mut to_ack: Vec<f64> = kills
        .iter()
        .filter_map(|&k| {
            let i = acks.partition_point(|&t| t <= k);
            acks.get(i).map(|&t| (t - k) as f64 / 1e3)
        })
        .collect();
    to_ack.sort_by(f64::total_cmp);
    Ok(Row {
        clients: n,
        seconds,
        committed,
        transfers,
        aborted,
        uncertain,
        commits_per_s: committed as f64 / seconds,
        transfers_per_s: transfers as f64 / seconds,
        abort_rate: aborted as f64 / (committed + aborted) as f64,
        latency_ms_p50: quantile(&lat, 0.50).unwrap_or(0.0),
        latency_ms_p99: quantile(&lat, 0.99).unwrap_or(0.0),
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        kills: kills.len(),
        kills_without_ack: kills.len() - to_ack.len(),
        kill_to_ack_ms_p50: quantile(&to_ack, 0.50),
        kill_to_ack_ms_p90: quantile(&to_ack, 0.90),
        kill_to_ack_ms_max: to_ack.last().copied(),
    })
}

fn print_table(rows: &[Row], kill_every: Option<f64>) {
    match kill_every {
        Some(s) => println!("two servers over loopback TCP, a server SIGKILLed every {s} s"),
        None => println!("two servers over loopback TCP, no faults"),
    }
    println!(
        "{:>7} {:>9} {:>11} {:>7} {:>8} {:>8} {:>8} {:>5} {:>22}",
        "clients",
        "commits/s",
        "transfers/s",
        "aborts",
        "p50 ms",
        "p99 ms",
        "max ms",
        "kills",
        "kill→ack ms p50/p90/max"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for r in rows {
        let to_ack = if r.kills == 0 {
            "-".to_string()
        } else {
            format!(
                "{}/{}/{}",
                ms(r.kill_to_ack_ms_p50),
                ms(r.kill_to_ack_ms_p90),
                ms(r.kill_to_ack_ms_max)
            )
        };
        println!(
            "{:>7} {:>9.1} {:>11.1} {:>6.1}% {:>8.1} {:>8.1} {:>8.1} {:>5} {:>22}",
            r.clients,
            r.commits_per_s,
            r.transfers_per_s,
            100.0 * r.abort_rate,
            r.latency_ms_p50,
            r.latency_ms_p99,
            r.latency_ms_max,
            r.kills,
            to_ack
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_final_counts_are_read_from_its_last_line() {
        let out =
            "warning: x\nclient 3: 120 committed, 7 aborted, 1 uncertain, 4 cluster session(s)\n";
        assert_eq!(final_counts(out), Some([120, 7, 1]));
        assert_eq!(final_counts("nothing\n"), None);
    }

    #[test]
    fn kill_to_ack_takes_the_first_transfer_answered_after_each_kill() {
        let l = |committed, transfer, t1_us| Line { committed, transfer, t0_us: 0, t1_us };
        let lines = [
            l(true, true, 1_000),
            l(true, false, 5_500), // an audit: not a transfer
            l(false, true, 5_700), // aborted
            l(true, true, 6_000),
            l(true, true, 9_000),
        ];
        let r = figures(2, 1.0, [4, 1, 0], &lines, &[5_000, 8_000, 10_000]).expect("figures");
        assert_eq!((r.kills, r.kills_without_ack), (3, 1));
        assert_eq!((r.kill_to_ack_ms_p50, r.kill_to_ack_ms_max), (Some(1.0), Some(1.0)));
        assert_eq!(r.transfers, 3);
        assert!((r.abort_rate - 0.2).abs() < 1e-9);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.0));
        assert_eq!(quantile(&v, 0.99), Some(4.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
