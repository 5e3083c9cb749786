//! `thor bench clients`: many clients running short transactions on shared objects, over TCP,
//! under concurrency control.
//!
//! A server (in this process, on loopback TCP, on a fresh database) holds `--accounts` objects
//! (the bank of [`crate::bank`]). Each of `--clients` client threads has its own session and
//! connection and runs transactions for `--seconds`:
//!
//! - `--workload transfers`: pick two different accounts at random, read both balances, move a
//!   random amount (at most what the first holds) from the first to the second, commit;
//! - `--workload counters` (the ZODB comparison, `bench/zodb/counters.py`): read 1 to 4 distinct
//!   counters; a quarter of the transactions commit there (read-only), the others increment a
//!   random non-empty subset of what they read;
//! - `--workload hot`: every transaction reads the first counter and increments it: one hot
//!   object, the case where one client can starve another (issue 32). The table then lists
//!   each client's commits, and `--attempts` sets how often a transaction may be retried.
//!
//! A conflict (the server's `Stale`, `Conflict` or `TooOld`, or an invalidation that hit the
//! running transaction) aborts the attempt; the client retries the same transaction after a
//! short jittered backoff. Few accounts mean high contention.
//!
//! Figures: committed transactions per second, the abort rate (aborted attempts over all
//! attempts), and the latency of a transaction from its first attempt to its commit (p50, p99).
//! At the end one session reads every account: the total must be the opening total (transfers)
//! or the number of committed increments (counters), or the command fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{Ref, Session, SessionConfig};
use thor_net::{ClientConfig, NetConfig, Server, TcpTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::FileDisk;

use crate::bank::{self, Account, version_of};

/// Attempts a transaction may take before the run fails (`SessionConfig::run_attempts_max`).
const RUN_ATTEMPTS: u32 = 10_000;
/// Each account's opening balance.
const OPENING: u64 = 1_000;

/// What each client's transactions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Workload {
    /// Read two accounts, move money from the first to the second, commit.
    Transfers,
    /// Read 1 to 4 counters; a quarter of the transactions stop there (read-only), the others
    /// increment a random non-empty subset of what they read (the ZODB comparison,
    /// `bench/zodb/counters.py`).
    Counters,
    /// Every transaction increments the first counter: one object every client writes.
    Hot,
}
/// Options of `thor bench clients`.
#[derive(Debug, Args)]
pub struct ClientsBench {
    /// Client counts to run, comma-separated (one thread, session and connection each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    clients: Vec<usize>,
    /// The transactions each client runs.
    #[arg(long, value_enum, default_value = "transfers")]
    workload: Workload,
    /// Accounts (counters, for `--workload counters`): few mean high contention.
    #[arg(long, default_value_t = 10_000)]
    accounts: usize,
    /// Seconds per run.
    #[arg(long, value_parser = crate::positive_seconds, allow_negative_numbers = true, default_value_t = 3.0)]
    seconds: f64,
    /// Directory to create the database in (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Attempts a transaction may take before the run fails
    /// (`SessionConfig::run_attempts_max`).
    #[arg(long, default_value_t = RUN_ATTEMPTS)]
    attempts: u32,
    /// The longest wait between attempts, in microseconds (`SessionConfig::run_backoff_max`;
    /// default: the session's).
    #[arg(long)]
    backoff_max_us: Option<u64>,
    /// Send read-only transactions to the server to be validated, as before wire version 7,
    /// instead of committing them at the client (`SessionConfig::read_only_at_client`).
    #[arg(long)]
    read_only_at_server: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One run's figures.
#[derive(Debug, serde::Serialize)]
struct Run {
    workload: Workload,
    clients: usize,
    accounts: usize,
    seconds: f64,
    committed: u64,
    /// Committed transactions that wrote nothing.
    read_only: u64,
    /// Attempts of transactions that write nothing which did not commit (refused by the
    /// server or hit by an invalidation), and their share of such attempts.
    read_only_refused: u64,
    read_only_refused_rate: f64,
    /// Of the read-only transactions committed, those committed at their client without a
    /// message (wire version 7: `thor_client::ClientStats::read_only_local`).
    read_only_local: u64,
    aborted: u64,
    commits_per_s: f64,
    abort_rate: f64,
    p50_us: f64,
    p99_us: f64,
    /// Each client's committed transactions, in client order: how fairly they shared.
    per_client: Vec<u64>,
    /// Why the server refused commits, and what else its concurrency control did.
    server: ServerCc,
}

/// The server's concurrency-control counters over one run.
#[derive(Debug, serde::Serialize)]
struct ServerCc {
    refused_stale: u64,
    refused_threshold: u64,
    refused_rule1: u64,
    refused_rule2a: u64,
    refused_rule2b: u64,
    retried_passed: u64,
    read_only_validated: u64,
    invalidations_sent: u64,
    invalidations_acked: u64,
    commits_per_fsync: f64,
    /// Aborts the clients found themselves (an invalidation hit the running transaction),
    /// as they reported them.
    client_invalidation_aborts: u64,
    /// Attempts the clients ran again, as they reported them.
    client_retries: u64,
    /// Fair retries: claims given to repeated losers, and commits held back for them.
    fair_claims: u64,
    fair_held: u64,
}

impl ServerCc {
    /// The counters of `st`, the server's statistics at the end of a run.
    fn of(st: &thor_wire::stats::ServerStats) -> ServerCc {
        ServerCc {
            refused_stale: st.refused_stale,
            refused_threshold: st.refused_threshold,
            refused_rule1: st.refused_rule1,
            refused_rule2a: st.refused_rule2a,
            refused_rule2b: st.refused_rule2b,
            retried_passed: st.retried_passed,
            read_only_validated: st.read_only_validated,
            invalidations_sent: st.invalidations_sent,
            invalidations_acked: st.invalidations_acked,
            commits_per_fsync: st.commits_per_fsync,
            client_invalidation_aborts: st.client_invalidation_aborts,
            client_retries: st.client_retries,
            fair_claims: st.fair_claims,
            fair_held: st.fair_held,
        }
    }
}

/// What one client did.
#[derive(Debug, Default)]
struct Tally {
    committed: u64,
    read_only: u64,
    /// Attempts of read-only transactions that did not commit.
    read_only_refused: u64,
    /// Read-only transactions committed at the client.
    read_only_local: u64,
    aborted: u64,
    /// Units added to the counters by committed transactions.
    increments: u64,
    latencies_us: Vec<f64>,
}

pub fn run(b: ClientsBench) -> Result<()> {
    let least = match b.workload {
        Workload::Transfers => 2,
        Workload::Counters => 4,
        Workload::Hot => 1,
    };
    if b.accounts < least {
        bail!("--accounts must be at least {least} for {:?}", b.workload);
    }
    if b.clients.contains(&0) {
        bail!("--clients must list counts of at least 1");
    }
    let mut runs = Vec::new();
    for &clients in &b.clients {
        if !b.json {
            eprintln!("{clients} client(s), {} accounts, {} s ...", b.accounts, b.seconds);
        }
        runs.push(one_run(&b, clients)?);
    }
    if b.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "runs": runs }))?);
        return Ok(());
    }
    print_tables(b.workload, &runs);
    Ok(())
}

/// The tables of `thor bench clients`: throughput, each client's share, the server's counters.
fn print_tables(workload: Workload, runs: &[Run]) {
    match workload {
        Workload::Transfers => {
            println!(
                "\ntransfers between accounts (read two balances, write both), over loopback TCP"
            )
        }
        Workload::Counters => println!(
            "\nshared counters (read 1 to 4, a quarter read-only, the others increment some), over loopback TCP"
        ),
        Workload::Hot => {
            println!("\none hot counter that every transaction increments, over loopback TCP")
        }
    }
    println!(
        "{:>8} {:>9} {:>10} {:>9} {:>9} {:>11} {:>8} {:>9} {:>9}",
        "clients",
        "accounts",
        "committed",
        "read-only",
        "aborted",
        "commits/s",
        "aborts",
        "p50 us",
        "p99 us"
    );
    for r in runs {
        println!(
            "{:>8} {:>9} {:>10} {:>9} {:>9} {:>11.0} {:>7.1}% {:>9.0} {:>9.0}",
            r.clients,
            r.accounts,
            r.committed,
            r.read_only,
            r.aborted,
            r.commits_per_s,
            100.0 * r.abort_rate,
            r.p50_us,
            r.p99_us
        );
    }
    print_read_only(runs);
    println!("\neach client's commits (smallest share over largest)");
    for r in runs {
        let (min, max) = (r.per_client.iter().min(), r.per_client.iter().max());
        let ratio = match (min, max) {
            (Some(&a), Some(&b)) if b > 0 => a as f64 / b as f64,
            _ => 0.0,
        };
        let each: Vec<String> = r.per_client.iter().map(u64::to_string).collect();
        println!("{:>8} {:>6.3}  {}", r.clients, ratio, each.join(" "));
    }
    println!("\nat the server: refusals by cause, invalidations, group commit");
    println!(
        "{:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>10} {:>8}",
        "clients",
        "stale",
        "thresh",
        "rule1",
        "rule2a",
        "rule2b",
        "retried",
        "inval sent",
        "inval ack",
        "c/fsync"
    );
    for r in runs {
        let c = &r.server;
        println!(
            "{:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>10} {:>8.2}",
            r.clients,
            c.refused_stale,
            c.refused_threshold,
            c.refused_rule1,
            c.refused_rule2a,
            c.refused_rule2b,
            c.retried_passed,
            c.invalidations_sent,
            c.invalidations_acked,
            c.commits_per_fsync
        );
    }
    println!("\nreported by the clients, and fair retries");
    println!(
        "{:>8} {:>12} {:>9} {:>8} {:>8}",
        "clients", "inval abort", "retries", "claims", "held"
    );
    for r in runs {
        let c = &r.server;
        println!(
            "{:>8} {:>12} {:>9} {:>8} {:>8}",
            r.clients, c.client_invalidation_aborts, c.client_retries, c.fair_claims, c.fair_held
        );
    }
}

/// The read-only transactions' table, if any ran: committed, at the client, refused.
fn print_read_only(runs: &[Run]) {
    if runs.iter().all(|r| r.read_only == 0) {
        return;
    }
    println!("\nread-only transactions: committed, of them at the client, attempts refused");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>9}",
        "clients", "committed", "at client", "refused", "refused"
    );
    for r in runs {
        println!(
            "{:>8} {:>10} {:>10} {:>10} {:>8.2}%",
            r.clients,
            r.read_only,
            r.read_only_local,
            r.read_only_refused,
            100.0 * r.read_only_refused_rate
        );
    }
}

fn one_run(b: &ClientsBench, clients: usize) -> Result<Run> {
    let tmp;
    let dir = match &b.dir {
        Some(d) => d.join(format!("clients-{clients}")),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().join("db")
        }
    };
    let disk = FileDisk::open_locked(&dir, true, "thor bench clients")?;
    let engine = Arc::new(Engine::create(Arc::new(disk), EngineOptions::default())?);
    let server = Server::start("127.0.0.1:0", engine.clone(), NetConfig::default())?;
    let addr = server.local_addr();
    let (attempts, at_client) = (b.attempts, !b.read_only_at_server);
    let backoff_max = b
        .backoff_max_us
        .map_or(SessionConfig::default().run_backoff_max, std::time::Duration::from_micros);
    let connect = move |name: String| -> Result<Session> {
        let cfg = ClientConfig { client_name: name, ..ClientConfig::default() };
        let t = TcpTransport::connect(addr, &cfg)?;
        // Under high contention a transfer may lose many times in a row: retry for long.
        let cfg = SessionConfig {
            run_attempts_max: attempts,
            read_only_at_client: at_client,
            run_backoff_max: backoff_max,
            ..SessionConfig::default()
        };
        Ok(Session::new(Box::new(t), cfg)?)
    };
    let opening = match b.workload {
        Workload::Transfers => OPENING,
        Workload::Counters | Workload::Hot => 0,
    };
    let accounts = bank::open_bank(&connect("setup".into())?, b.accounts, opening)?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut threads = Vec::new();
    for c in 0..clients {
        let stop = stop.clone();
        let (n, workload) = (b.accounts, b.workload);
        threads.push(std::thread::spawn(move || -> Result<Tally> {
            let s = connect(format!("bench client {c}"))?;
            let accounts = bank::load_bank_of(&s, n)?;
            work(&s, workload, &accounts, c as u32, &stop)
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(b.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    let mut per_client = Vec::with_capacity(clients);
    for t in threads {
        let t = t.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        per_client.push(t.committed);
        all.committed += t.committed;
        all.read_only += t.read_only;
        all.read_only_refused += t.read_only_refused;
        all.read_only_local += t.read_only_local;
        all.aborted += t.aborted;
        all.increments += t.increments;
        all.latencies_us.extend(t.latencies_us);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let state = bank::read_all(&connect("audit".into())?, &accounts)?;
    let total: u64 = state.iter().map(|(balance, _)| balance).sum();
    let want = opening * b.accounts as u64 + all.increments;
    if total != want {
        bail!("the accounts hold {total} units in all, not {want}: a committed update was lost");
    }
    let server_cc = ServerCc::of(&engine.server_stats());
    server.shutdown()?;
    all.latencies_us.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let l = &all.latencies_us;
        if l.is_empty() { 0.0 } else { l[((l.len() - 1) as f64 * p) as usize] }
    };
    let attempts = all.committed + all.aborted;
    Ok(Run {
        workload: b.workload,
        clients,
        accounts: b.accounts,
        seconds: elapsed,
        committed: all.committed,
        read_only: all.read_only,
        read_only_refused: all.read_only_refused,
        read_only_refused_rate: refused_share(all.read_only_refused, all.read_only),
        read_only_local: all.read_only_local,
        aborted: all.aborted,
        commits_per_s: all.committed as f64 / elapsed,
        abort_rate: if attempts == 0 { 0.0 } else { all.aborted as f64 / attempts as f64 },
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        per_client,
        server: server_cc,
    })
}

/// The share of attempts refused, of `refused` attempts that failed and `committed` that
/// did not.
fn refused_share(refused: u64, committed: u64) -> f64 {
    let attempts = refused + committed;
    if attempts == 0 { 0.0 } else { refused as f64 / attempts as f64 }
}

/// One transaction to run until it commits: the accounts it reads, and what it adds to each
/// (transfers: the first gives, the second receives; counters: +1 or 0).
struct Plan {
    accounts: Vec<usize>,
    transfer: Option<u64>,
    increment: Vec<bool>,
}

fn draw(workload: Workload, n: usize, rng: &mut thor_storage::SplitMix64) -> Plan {
    let n64 = n as u64;
    match workload {
        Workload::Transfers => {
            let from = rng.below(n64) as usize;
            let mut to = rng.below(n64 - 1) as usize;
            if to >= from {
                to += 1;
            }
            Plan { accounts: vec![from, to], transfer: Some(1 + rng.below(100)), increment: vec![] }
        }
        Workload::Counters => {
            let k = 1 + rng.below(4) as usize;
            let mut accounts = Vec::with_capacity(k);
            while accounts.len() < k {
                let i = rng.below(n64) as usize;
                if !accounts.contains(&i) {
                    accounts.push(i);
                }
            }
            let increment = if rng.below(4) == 0 {
                vec![false; k]
            } else {
                loop {
                    let inc: Vec<bool> = (0..k).map(|_| rng.below(2) == 0).collect();
                    if inc.contains(&true) {
                        break inc;
                    }
                }
            };
            Plan { accounts, transfer: None, increment }
        }
        Workload::Hot => Plan { accounts: vec![0], transfer: None, increment: vec![true] },
    }
}

/// Runs transactions until `stop`; counts them. Each goes through [`Session::run`]: a conflict
/// aborts the attempt and the same transaction runs again after a jittered backoff.
fn work(
    s: &Session,
    workload: Workload,
    accounts: &[Ref<Account>],
    client: u32,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut rng = thor_storage::SplitMix64::new(0x5EED ^ u64::from(client));
    let mut t = Tally::default();
    let mut attempt = 0u32;
    let conflicts_before = s.stats().conflicts;
    let local_before = s.stats().read_only_local;
    while !stop.load(Ordering::Relaxed) {
        let plan = draw(workload, accounts.len(), &mut rng);
        let began = Instant::now();
        let first_attempt = attempt;
        let added = s
            .run::<_, thor_client::ClientError>(|s| {
                attempt += 1;
                let version = version_of(client, attempt);
                let mut added = 0;
                if let Some(want) = plan.transfer {
                    let a = s.get(accounts[plan.accounts[0]])?;
                    let b = s.get(accounts[plan.accounts[1]])?;
                    let amount = want.min(a.get(Account::balance));
                    a.set(Account::balance, a.get(Account::balance) - amount)?;
                    b.set(Account::balance, b.get(Account::balance) + amount)?;
                    a.set(Account::version, version)?;
                    b.set(Account::version, version)?;
                } else {
                    for (&i, &inc) in plan.accounts.iter().zip(&plan.increment) {
                        let c = s.get(accounts[i])?;
                        if inc {
                            c.set(Account::balance, c.get(Account::balance) + 1)?;
                            c.set(Account::version, version)?;
                            added += 1;
                        }
                    }
                }
                Ok(added)
            })
            .context("transaction")?;
        t.committed += 1;
        t.increments += added;
        if plan.transfer.is_none() && added == 0 {
            t.read_only += 1;
            // Every attempt but the one that committed was refused or doomed.
            t.read_only_refused += u64::from(attempt - first_attempt - 1);
        }
        t.latencies_us.push(began.elapsed().as_secs_f64() * 1e6);
    }
    t.aborted = s.stats().conflicts - conflicts_before;
    t.read_only_local = s.stats().read_only_local - local_before;
    Ok(t)
}
