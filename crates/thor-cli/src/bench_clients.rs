//! `thor bench clients`: many clients transferring money between accounts, over TCP, under
//! concurrency control.
//!
//! A server (in this process, on loopback TCP, on a fresh database) holds `--accounts`
//! accounts with 1,000 units each. Each of `--clients` client threads has its own session and
//! connection and runs transactions for `--seconds`: pick two different accounts at random,
//! read both balances, move a random amount (at most what the first holds) from the first to
//! the second, commit. A conflict (the server's `Stale`, `Conflict` or `TooOld`, or an
//! invalidation that hit the running transaction) aborts the attempt; the client retries the
//! same transfer after a short jittered backoff. Few accounts mean high contention.
//!
//! Figures: committed transfers per second, the abort rate (aborted attempts over all
//! attempts), and the latency of a transfer from its first attempt to its commit (p50, p99).
//! At the end one session reads every account: the total must be unchanged, or the command
//! fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{ClientError, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, NetConfig, Server, TcpTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::FileDisk;

thor_client::class! {
    /// A bank account of the benchmark.
    pub class Account("bench.Account") {
        balance: u64,
    }
}

thor_client::class! {
    /// Up to [`CHUNK`] accounts.
    pub class Accounts("bench.Accounts") {}
    var refs<Account>;
}

thor_client::class! {
    /// The chunks of accounts, from root slot 0.
    pub class Bank("bench.Bank") {}
    var refs<Accounts>;
}

/// Accounts per chunk object (4 KiB of references: fits any page size).
const CHUNK: usize = 1000;
/// Each account's opening balance.
const OPENING: u64 = 1_000;

/// Options of `thor bench clients`.
#[derive(Debug, Args)]
pub struct ClientsBench {
    /// Client counts to run, comma-separated (one thread, session and connection each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    clients: Vec<usize>,
    /// Accounts: few mean high contention.
    #[arg(long, default_value_t = 10_000)]
    accounts: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Directory to create the database in (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One run's figures.
#[derive(Debug, serde::Serialize)]
struct Run {
    clients: usize,
    accounts: usize,
    seconds: f64,
    committed: u64,
    aborted: u64,
    commits_per_s: f64,
    abort_rate: f64,
    p50_us: f64,
    p99_us: f64,
}

/// What one client did.
#[derive(Debug, Default)]
struct Tally {
    committed: u64,
    aborted: u64,
    latencies_us: Vec<f64>,
}

pub fn run(b: ClientsBench) -> Result<()> {
    if b.accounts < 2 {
        bail!("--accounts must be at least 2");
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
    println!("\ntransfers between accounts (read two balances, write both), over loopback TCP");
    println!(
        "{:>8} {:>9} {:>10} {:>9} {:>11} {:>8} {:>9} {:>9}",
        "clients", "accounts", "committed", "aborted", "commits/s", "aborts", "p50 us", "p99 us"
    );
    for r in &runs {
        println!(
            "{:>8} {:>9} {:>10} {:>9} {:>11.0} {:>7.1}% {:>9.0} {:>9.0}",
            r.clients,
            r.accounts,
            r.committed,
            r.aborted,
            r.commits_per_s,
            100.0 * r.abort_rate,
            r.p50_us,
            r.p99_us
        );
    }
    Ok(())
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
    let connect = move |name: String| -> Result<Session> {
        let cfg = ClientConfig { client_name: name, ..ClientConfig::default() };
        let t = TcpTransport::connect(addr, &cfg)?;
        Ok(Session::new(Box::new(t), SessionConfig::default())?)
    };
    let accounts = open_bank(&connect("setup".into())?, b.accounts)?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut threads = Vec::new();
    for c in 0..clients {
        let stop = stop.clone();
        let n = b.accounts;
        threads.push(std::thread::spawn(move || -> Result<Tally> {
            let s = connect(format!("bench client {c}"))?;
            let accounts = load_bank(&s, n)?;
            transfers(&s, &accounts, c as u64, &stop)
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(b.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    for t in threads {
        let t = t.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        all.committed += t.committed;
        all.aborted += t.aborted;
        all.latencies_us.extend(t.latencies_us);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let total = total_balance(&connect("audit".into())?, &accounts)?;
    let want = OPENING * b.accounts as u64;
    if total != want {
        bail!("the accounts hold {total} units in all, not {want}: money was created or lost");
    }
    server.shutdown()?;
    all.latencies_us.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let l = &all.latencies_us;
        if l.is_empty() { 0.0 } else { l[((l.len() - 1) as f64 * p) as usize] }
    };
    let attempts = all.committed + all.aborted;
    Ok(Run {
        clients,
        accounts: b.accounts,
        seconds: elapsed,
        committed: all.committed,
        aborted: all.aborted,
        commits_per_s: all.committed as f64 / elapsed,
        abort_rate: if attempts == 0 { 0.0 } else { all.aborted as f64 / attempts as f64 },
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    })
}

/// Creates the accounts and the directory to them, in one transaction; returns the accounts.
fn open_bank(s: &Session, n: usize) -> Result<Vec<Ref<Account>>> {
    let chunks = n.div_ceil(CHUNK);
    let bank = s.create::<Bank>(chunks)?;
    let mut accounts = Vec::with_capacity(n);
    for c in 0..chunks {
        let len = CHUNK.min(n - c * CHUNK);
        let chunk = s.create::<Accounts>(len)?;
        for i in 0..len {
            let a = s.create::<Account>(0)?;
            a.set(Account::balance, OPENING)?;
            chunk.set_var_ref(i, a.as_ref())?;
            accounts.push(a.as_ref());
        }
        bank.set_var_ref(c, chunk.as_ref())?;
    }
    let bank = bank.as_ref();
    s.set_root(0, bank)?;
    s.commit().context("committing the accounts")?;
    // References made in the creating transaction name it; after the commit, their objects'
    // stored names.
    accounts.iter().map(|a| Ok(s.canonical(*a)?)).collect()
}

/// Reads the directory of accounts in a client's session.
fn load_bank(s: &Session, n: usize) -> Result<Vec<Ref<Account>>> {
    let bank = s.get(s.root::<Bank>(0)?)?;
    let mut out = Vec::with_capacity(n);
    for c in 0..bank.var_len() {
        let chunk = s.get(bank.var_ref(c))?;
        for i in 0..chunk.var_len() {
            out.push(chunk.var_ref(i));
        }
    }
    s.commit()?;
    if out.len() != n {
        bail!("the bank has {} accounts, expected {n}", out.len());
    }
    Ok(out)
}

fn total_balance(s: &Session, accounts: &[Ref<Account>]) -> Result<u64> {
    let mut total = 0;
    for a in accounts {
        total += s.get(*a)?.get(Account::balance);
    }
    s.commit()?;
    Ok(total)
}

/// Whether a failed attempt is a concurrency-control conflict (retry it) rather than an error.
fn is_conflict(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { code, .. } if code.is_conflict())
}

/// Runs transfers until `stop`; counts them.
fn transfers(
    s: &Session,
    accounts: &[Ref<Account>],
    seed: u64,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut rng = thor_storage::SplitMix64::new(0x5EED ^ seed);
    let mut t = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let n = accounts.len() as u64;
        let from = rng.below(n) as usize;
        let mut to = rng.below(n - 1) as usize;
        if to >= from {
            to += 1;
        }
        let want = 1 + rng.below(100);
        let began = Instant::now();
        let mut backoff_us = 50u64;
        loop {
            let attempt = (|| -> Result<(), ClientError> {
                let a = s.get(accounts[from])?;
                let b = s.get(accounts[to])?;
                let amount = want.min(a.get(Account::balance));
                a.set(Account::balance, a.get(Account::balance) - amount)?;
                b.set(Account::balance, b.get(Account::balance) + amount)?;
                drop((a, b));
                s.commit()?;
                Ok(())
            })();
            match attempt {
                Ok(()) => {
                    t.committed += 1;
                    t.latencies_us.push(began.elapsed().as_secs_f64() * 1e6);
                    break;
                }
                Err(e) if is_conflict(&e) => {
                    s.abort();
                    t.aborted += 1;
                    if stop.load(Ordering::Relaxed) {
                        return Ok(t);
                    }
                    let jitter = rng.below(backoff_us + 1);
                    std::thread::sleep(Duration::from_micros(backoff_us / 2 + jitter));
                    backoff_us = (backoff_us * 2).min(20_000);
                }
                Err(e) => return Err(e).context("transfer"),
            }
        }
    }
    Ok(t)
}
