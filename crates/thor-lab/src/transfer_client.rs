//! `thor bench transfer-client`: one client process running bank transfers against a running
//! server, surviving server restarts, and recording every transaction it sent for commit.
//!
//! It is the client side of the kill test (`tests/kill_transfers.rs`: eight of these while the
//! server is SIGKILLed and restarted), and a load generator against any `thor server` whose
//! root slot 0 holds a bank (`--setup` creates one in an empty database).
//!
//! Each transaction reads two accounts and either moves an amount from the first to the second
//! (seven in eight) or only reads them (an audit, validated like any transaction). Every write
//! stores a version unique to it ([`crate::bank::version_of`]), so the history is checkable:
//! the history file gets one JSON line per transaction that reached its commit:
//!
//! ```text
//! {"id":N,"client":C,"outcome":"committed"|"aborted"|"uncertain",
//!  "reads":[[oref,version],...],"writes":[[oref,version,balance],...]}
//! ```
//!
//! `uncertain` means the connection failed while the commit was in flight: it may or may not
//! have happened (the checker decides from what later transactions and the final state saw).
//! When the server goes away the client makes a new session (retrying the connection for up to
//! `--reconnect-s`), reloads the bank and goes on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{ClientError, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};

use crate::bank::{self, Account, Outcome, Recorder, is_conflict, lost, version_of};

/// Options of `thor bench transfer-client`.
#[derive(Debug, Args)]
pub struct TransferClient {
    /// The server's address.
    #[arg(long)]
    connect: SocketAddr,
    /// How long connecting and the handshake may take, in seconds.
    #[arg(long, value_parser = crate::positive_size, default_value_t = thor_client::limits::CONNECT_TIMEOUT_DEFAULT.as_secs_f64())]
    connect_timeout_s: f64,
    /// How long a request other than a commit waits for its reply, in seconds (0: for ever).
    #[arg(long, default_value_t = thor_client::limits::REQUEST_TIMEOUT_DEFAULT.as_secs_f64())]
    request_timeout_s: f64,
    /// How long a commit waits for its answer, in seconds (0: for ever).
    #[arg(long, default_value_t = thor_client::limits::COMMIT_TIMEOUT_DEFAULT.as_secs_f64())]
    commit_timeout_s: f64,
    #[command(flatten)]
    h: crate::bank::HistoryArgs,
}

/// `seconds` as a timeout; 0 (or less) waits for ever.
fn timeout(seconds: f64) -> Option<Duration> {
    (seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// What one session of the client ended with.
enum SessionEnd {
    /// The deadline passed or the stop file appeared.
    Stopped,
    /// The connection failed: make a new session.
    Lost,
}

pub fn run(a: TransferClient) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.h.seconds);
    let mut rec = Recorder::open(&a.h)?;
    let mut rng = thor_storage::SplitMix64::new(0x7A45 ^ u64::from(a.h.client));
    let mut attempt = 0u32;
    let mut sessions = 0u64;
    if let Some(n) = a.h.setup {
        if n < 2 {
            bail!("--setup needs at least 2 accounts");
        }
        let s = connect(&a)?;
        if s.root::<bank::Bank>(0).is_ok_and(|r| !r.is_null()) {
            bail!("the database already has a bank in root slot 0");
        }
        bank::open_bank(&s, n, a.h.opening)?;
    }
    loop {
        if a.h.stopped(deadline) {
            break;
        }
        let s = match connect(&a) {
            Ok(s) => s,
            Err(e) => bail!("no server at {} for {} s: {e:#}", a.connect, a.h.reconnect_s),
        };
        sessions += 1;
        let accounts = match bank::load_bank(&s) {
            Ok(x) if x.len() >= 2 => x,
            Ok(x) => bail!("the bank has {} accounts; transfers need 2", x.len()),
            Err(e) if lost(&e) => continue,
            Err(e) => return Err(e).context("loading the bank"),
        };
        let end = loop {
            if a.h.stopped(deadline) {
                break SessionEnd::Stopped;
            }
            attempt = attempt.checked_add(1).context("attempt numbers ran out")?;
            rec.begin();
            let id = u64::from(a.h.client) << 32 | u64::from(attempt);
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            let from = rng.below(accounts.len() as u64) as usize;
            let to = (from + 1 + rng.below(accounts.len() as u64 - 1) as usize) % accounts.len();
            let audit = rng.below(8) == 0;
            let want = 1 + rng.below(100);
            let version = version_of(a.h.client, attempt);
            let before_commit = transfer(
                &s,
                [accounts[from], accounts[to]],
                (!audit).then_some(want),
                version,
                &mut reads,
                &mut writes,
            );
            if let Err(e) = before_commit {
                // Not sent for commit: nobody saw it, nothing to record. A conflict here is an
                // invalidation of something it read; the next attempt reads afresh.
                s.abort();
                if lost(&e) {
                    break SessionEnd::Lost;
                }
                if is_conflict(&e) {
                    rec.aborted_early();
                    continue;
                }
                return Err(e).context("transfer");
            }
            // An abort at commit leaves nothing to undo.
            let outcome = rec.outcome(s.commit())?;
            rec.record(id, outcome, &reads, &writes)?;
            if outcome == Outcome::Uncertain {
                break SessionEnd::Lost;
            }
        };
        if matches!(end, SessionEnd::Stopped) {
            break;
        }
    }
    rec.finish(&format!("{sessions} session(s)"))
}

/// Reads both accounts and, for a transfer, moves up to `want` from the first to the second,
/// writing `version` into both.
fn transfer(
    s: &Session,
    pair: [Ref<Account>; 2],
    want: Option<u64>,
    version: u64,
    reads: &mut Vec<(u32, u64)>,
    writes: &mut Vec<(u32, u64, u64)>,
) -> Result<(), ClientError> {
    let a = s.get(pair[0])?;
    let b = s.get(pair[1])?;
    for (r, v) in pair.iter().zip([&a, &b]) {
        reads.push((oref_of(*r), v.get(Account::version)));
    }
    let Some(want) = want else { return Ok(()) };
    let amount = want.min(a.get(Account::balance));
    let (to_a, to_b) = (a.get(Account::balance) - amount, b.get(Account::balance) + amount);
    a.set(Account::balance, to_a)?;
    b.set(Account::balance, to_b)?;
    a.set(Account::version, version)?;
    b.set(Account::version, version)?;
    writes.push((oref_of(pair[0]), version, to_a));
    writes.push((oref_of(pair[1]), version, to_b));
    Ok(())
}

/// The account's stored name (a loaded reference is always stored).
fn oref_of(r: Ref<Account>) -> u32 {
    r.oref().map_or(0, |o| o.raw())
}

/// A new session, retrying the connection for up to `--reconnect-s`.
fn connect(a: &TransferClient) -> Result<Session> {
    let give_up = Instant::now() + Duration::from_secs_f64(a.h.reconnect_s);
    let cfg = ClientConfig {
        client_name: format!("transfer client {}", a.h.client),
        token: a.h.token.as_bytes().to_vec(),
        connect_timeout: Duration::from_secs_f64(a.connect_timeout_s),
        io_timeout: timeout(a.request_timeout_s),
        ..ClientConfig::default()
    };
    let session = SessionConfig {
        request_timeout: timeout(a.request_timeout_s),
        commit_timeout: timeout(a.commit_timeout_s),
        ..SessionConfig::default()
    };
    loop {
        let tried = TcpTransport::connect(a.connect, &cfg)
            .map_err(ClientError::from)
            .and_then(|t| Session::new(Box::new(t), session));
        match tried {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < give_up && lost(&e) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
