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
//!
//! `--connect` may name a replica group, `R=HOST:PORT,R=HOST:PORT,...` (`thor_client::group`):
//! the session then finds the group's leader, and after a failover the new one, by itself
//! (for up to `--reconnect-s` without a leader), resuming where it was: a commit whose answer
//! was lost is learned at the new leader, so fewer transactions end `uncertain`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{
    ClientError, CommitInfo, GroupDialer, ReconnectConfig, Ref, Replica, ReplicaDialer, Session,
    SessionConfig, View,
};
use thor_net::{ClientConfig, TcpTransport};

use thor_storage::SplitMix64;

use crate::bank::{self, Account, Recorder, Teller, lost, run_transfers};

/// Options of `thor bench transfer-client`.
#[derive(Debug, Args)]
pub struct TransferClient {
    /// The server's address, HOST:PORT; or its replica group, R=HOST:PORT,R=HOST:PORT,...
    /// (each replica's id as `thor server --replica-id` gave it), whose leader the session
    /// finds and follows.
    #[arg(long, value_parser = crate::args::parse_addrs)]
    connect: crate::args::Addrs,
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

/// One server's session and the accounts of its bank.
struct OneServer {
    s: Session,
    accounts: Vec<Ref<Account>>,
}

impl Teller for OneServer {
    type Acct = Ref<Account>;
    type Object = u32;

    fn pick(&self, rng: &mut SplitMix64) -> [Ref<Account>; 2] {
        let n = self.accounts.len();
        let from = rng.below(n as u64) as usize;
        let to = (from + 1 + rng.below(n as u64 - 1) as usize) % n;
        [self.accounts[from], self.accounts[to]]
    }

    fn get(&self, a: Ref<Account>) -> Result<View<'_, Account>, ClientError> {
        self.s.get(a)
    }

    /// The account's stored name (a loaded reference is always stored).
    fn object(&self, a: Ref<Account>) -> u32 {
        a.oref().map_or(0, |o| o.raw())
    }

    fn commit(&self) -> Result<CommitInfo, ClientError> {
        self.s.commit()
    }

    fn abort(&self) {
        self.s.abort();
    }
}

pub fn run(a: TransferClient) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.h.seconds);
    let mut rec = Recorder::open(&a.h)?;
    let mut rng = SplitMix64::new(0x7A45 ^ u64::from(a.h.client));
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
    let sessions = run_transfers(&a.h, deadline, &mut rec, &mut rng, || {
        let s = match connect(&a) {
            Ok(s) => s,
            Err(e) => bail!("no server at {:?} for {} s: {e:#}", a.connect, a.h.reconnect_s),
        };
        match bank::load_bank(&s) {
            Ok(accounts) if accounts.len() >= 2 => Ok(Some(OneServer { s, accounts })),
            Ok(x) => bail!("the bank has {} accounts; transfers need 2", x.len()),
            Err(e) if lost(&e) => Ok(None),
            Err(e) => Err(e).context("loading the bank"),
        }
    })?;
    rec.finish(&format!("{sessions} session(s)"))
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
    let addr = match &a.connect {
        crate::args::Addrs::One(addr) => *addr,
        crate::args::Addrs::Group(replicas) => {
            // The group's session retries by itself, for up to --reconnect-s.
            let replicas = replicas
                .iter()
                .map(|&(id, addr)| {
                    let cfg = cfg.clone();
                    let dial: ReplicaDialer = Box::new(move || {
                        Ok(Box::new(TcpTransport::connect(addr, &cfg)?)
                            as Box<dyn thor_wire::Transport>)
                    });
                    Replica { id, dial }
                })
                .collect();
            let reconnect = ReconnectConfig {
                give_up_after: Duration::from_secs_f64(a.h.reconnect_s),
                ..ReconnectConfig::default()
            };
            let session = SessionConfig { reconnect, ..session };
            return Ok(Session::connect_group(GroupDialer::new(replicas)?, session)?);
        }
    };
    loop {
        let tried = TcpTransport::connect(addr, &cfg)
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
