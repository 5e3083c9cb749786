//! `thor bench cluster-client`: one client process running transfers between accounts at
//! different servers of a cluster (two-phase commit), surviving server restarts and recording
//! every transaction it sent for commit, as `thor bench transfer-client` does for one server.
//!
//! Every server holds a bank in its root slot 0 (`--setup N` creates one of N accounts at each).
//! Each transaction takes an account at one server and one at another, and moves an amount
//! from the first to the second (seven in eight) or only reads both (an audit: a read-only
//! transaction over two servers). The history is the transfer client's JSON lines, with every
//! object named `server << 32 | oref`:
//!
//! ```text
//! {"id":N,"client":C,"outcome":"committed"|"aborted"|"uncertain",
//!  "reads":[[object,version],...],"writes":[[object,version,balance],...]}
//! ```
//!
//! When a server goes away the client drops its cluster, makes a new one (retrying each
//! connection for up to `--reconnect-s`) and goes on.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{ClientError, Cluster, Ref, SessionConfig, XRef};
use thor_core::ServerId;
use thor_net::{ClientConfig, TcpTransport};

use crate::bank::{self, Account, Outcome, Recorder, is_conflict, lost, version_of};

/// Options of `thor bench cluster-client`.
#[derive(Debug, Args)]
pub struct ClusterClient {
    /// A server of the cluster, as ID=HOST:PORT (repeat for each; two at least).
    #[arg(long = "server", value_parser = crate::args::parse_peer, required = true)]
    servers: Vec<(u32, SocketAddr)>,
    #[command(flatten)]
    h: crate::bank::HistoryArgs,
}

/// The name of account `r` at `server` in the history.
fn object(server: ServerId, r: Ref<Account>) -> u64 {
    u64::from(server.0) << 32 | u64::from(r.oref().map_or(0, |o| o.raw()))
}

fn cluster(a: &ClusterClient) -> Result<Cluster> {
    let addrs: HashMap<ServerId, SocketAddr> =
        a.servers.iter().map(|&(id, addr)| (ServerId(id), addr)).collect();
    let ids: Vec<ServerId> = a.servers.iter().map(|&(id, _)| ServerId(id)).collect();
    let cfg = ClientConfig {
        client_name: format!("cluster client {}", a.h.client),
        token: a.h.token.as_bytes().to_vec(),
        ..ClientConfig::default()
    };
    let patience = Duration::from_secs_f64(a.h.reconnect_s);
    let connect = Box::new(move |id: ServerId| {
        let addr = addrs[&id];
        let give_up = Instant::now() + patience;
        loop {
            match TcpTransport::connect(addr, &cfg) {
                Ok(t) => return Ok(Box::new(t) as Box<dyn thor_wire::Transport>),
                Err(e) if Instant::now() < give_up => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(ClientError::from(e)),
            }
        }
    });
    Ok(Cluster::new(&ids, ids[0], connect, SessionConfig::default())?)
}

pub fn run(a: ClusterClient) -> Result<()> {
    if a.servers.len() < 2 {
        bail!("a cluster needs two --server at least");
    }
    let ids: Vec<ServerId> = a.servers.iter().map(|&(id, _)| ServerId(id)).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(a.h.seconds);
    let mut rec = Recorder::open(&a.h)?;
    let mut rng = thor_storage::SplitMix64::new(0xC1A5 ^ u64::from(a.h.client));
    if let Some(n) = a.h.setup {
        if n < 1 {
            bail!("--setup needs at least 1 account per server");
        }
        let c = cluster(&a)?;
        for &id in &ids {
            let s = c.session(id)?;
            if s.root::<bank::Bank>(0).is_ok_and(|r| !r.is_null()) {
                bail!("server {} already has a bank in root slot 0", id.0);
            }
            bank::open_bank(s, n, a.h.opening)?;
        }
    }
    let mut attempt = 0u32;
    let mut clusters = 0u64;
    'outer: while !a.h.stopped(deadline) {
        let c = cluster(&a)?;
        clusters += 1;
        let mut accounts: HashMap<ServerId, Vec<Ref<Account>>> = HashMap::new();
        for &id in &ids {
            match c.session(id).and_then(bank::load_bank) {
                Ok(x) if !x.is_empty() => {
                    accounts.insert(id, x);
                }
                Ok(_) => bail!("server {} has an empty bank", id.0),
                Err(e) if lost(&e) => continue 'outer,
                Err(e) => return Err(e).context("loading the banks"),
            }
        }
        loop {
            if a.h.stopped(deadline) {
                break 'outer;
            }
            attempt = attempt.checked_add(1).context("attempt numbers ran out")?;
            rec.begin();
            let id = u64::from(a.h.client) << 32 | u64::from(attempt);
            let i = rng.below(ids.len() as u64) as usize;
            let j = (i + 1 + rng.below(ids.len() as u64 - 1) as usize) % ids.len();
            let (si, sj) = (ids[i], ids[j]);
            let from = accounts[&si][rng.below(accounts[&si].len() as u64) as usize];
            let to = accounts[&sj][rng.below(accounts[&sj].len() as u64) as usize];
            let audit = rng.below(8) == 0;
            let want = 1 + rng.below(100);
            let version = version_of(a.h.client, attempt);
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            let before = transfer(
                &c,
                [XRef::at(si, from), XRef::at(sj, to)],
                (!audit).then_some(want),
                version,
                &mut reads,
                &mut writes,
            );
            if let Err(e) = before {
                c.abort();
                if lost(&e) {
                    continue 'outer;
                }
                if is_conflict(&e) {
                    rec.aborted_early();
                    continue;
                }
                return Err(e).context("transfer");
            }
            let outcome = rec.outcome(c.commit())?;
            rec.record(id, outcome, &reads, &writes)?;
            if outcome == Outcome::Uncertain {
                continue 'outer;
            }
        }
    }
    rec.finish(&format!("{clusters} cluster session(s)"))
}

/// Reads both accounts and, for a transfer, moves up to `want` from the first to the second,
/// writing `version` into both.
fn transfer(
    c: &Cluster,
    pair: [XRef<Account>; 2],
    want: Option<u64>,
    version: u64,
    reads: &mut Vec<(u64, u64)>,
    writes: &mut Vec<(u64, u64, u64)>,
) -> Result<(), ClientError> {
    let a = c.get(pair[0])?;
    let b = c.get(pair[1])?;
    reads.push((object(pair[0].server, pair[0].r), a.get(Account::version)));
    reads.push((object(pair[1].server, pair[1].r), b.get(Account::version)));
    let Some(want) = want else { return Ok(()) };
    let amount = want.min(a.get(Account::balance));
    let (to_a, to_b) = (a.get(Account::balance) - amount, b.get(Account::balance) + amount);
    a.set(Account::balance, to_a)?;
    b.set(Account::balance, to_b)?;
    a.set(Account::version, version)?;
    b.set(Account::version, version)?;
    writes.push((object(pair[0].server, pair[0].r), version, to_a));
    writes.push((object(pair[1].server, pair[1].r), version, to_b));
    Ok(())
}
