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
//!
//! A server may be a replica group: `--server ID=R=HOST:PORT,R=HOST:PORT,...` gives server
//! `ID`'s replicas (`thor_client::group`), e.g. `--server 1=11=db1:7401,12=db2:7401,13=db3:7401`.
//! That server's session finds the group's leader and follows it through failovers by itself
//! (for up to `--reconnect-s` without a leader); the cluster is remade only when that fails.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_client::{
    ClientError, Cluster, CommitInfo, GroupConnector, ReconnectConfig, Ref, SessionConfig, View,
    XRef,
};
use thor_core::ServerId;
use thor_net::{ClientConfig, TcpTransport};

use thor_storage::SplitMix64;

use crate::bank::{self, Account, Recorder, Teller, lost, run_transfers};

/// Options of `thor bench cluster-client`.
#[derive(Debug, Args)]
pub struct ClusterClient {
    /// A server of the cluster, as ID=HOST:PORT, or ID=GROUP for a replicated server with
    /// GROUP its replicas as R=HOST:PORT,R=HOST:PORT,... (e.g. 1=11=h:7401,12=h:7402,13=h:7403);
    /// repeat for each server, two at least.
    #[arg(long = "server", value_parser = crate::args::parse_server_group, required = true)]
    servers: Vec<(u32, crate::args::Addrs)>,
    #[command(flatten)]
    h: crate::bank::HistoryArgs,
}

/// The name of account `r` at `server` in the history.
fn object(server: ServerId, r: Ref<Account>) -> u64 {
    u64::from(server.0) << 32 | u64::from(r.oref().map_or(0, |o| o.raw()))
}

fn cluster(a: &ClusterClient) -> Result<Cluster> {
    let ids: Vec<ServerId> = a.servers.iter().map(|&(id, _)| ServerId(id)).collect();
    let cfg = ClientConfig {
        client_name: format!("cluster client {}", a.h.client),
        token: a.h.token.as_bytes().to_vec(),
        ..ClientConfig::default()
    };
    let patience = Duration::from_secs_f64(a.h.reconnect_s);
    if a.servers.iter().any(|(_, addrs)| matches!(addrs, crate::args::Addrs::Group(_))) {
        return cluster_of_groups(a, cfg, patience);
    }
    let addrs: HashMap<ServerId, SocketAddr> = a
        .servers
        .iter()
        .filter_map(|(id, addrs)| match addrs {
            crate::args::Addrs::One(addr) => Some((ServerId(*id), *addr)),
            crate::args::Addrs::Group(_) => None,
        })
        .collect();
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

/// A cluster where some server is a replica group: each group's session follows its leader
/// for up to `patience` without one (a server that is no group is retried as before).
fn cluster_of_groups(a: &ClusterClient, cfg: ClientConfig, patience: Duration) -> Result<Cluster> {
    let mut addrs: Vec<(ServerId, Option<u64>, SocketAddr)> = Vec::new();
    let mut groups = Vec::new();
    for (id, at) in &a.servers {
        let server = ServerId(*id);
        match at {
            crate::args::Addrs::One(addr) => {
                addrs.push((server, None, *addr));
                groups.push((server, Vec::new()));
            }
            crate::args::Addrs::Group(replicas) => {
                addrs.extend(replicas.iter().map(|&(r, addr)| (server, Some(r), addr)));
                groups.push((server, replicas.iter().map(|&(r, _)| r).collect()));
            }
        }
    }
    let connect: GroupConnector = Box::new(move |server, replica| {
        let Some(&(_, _, addr)) = addrs.iter().find(|(s, r, _)| *s == server && *r == replica)
        else {
            return Err(ClientError::UnknownServer(server.0));
        };
        // A replica is dialed once per attempt: the session's group dialer retries.
        let give_up = Instant::now() + if replica.is_some() { Duration::ZERO } else { patience };
        loop {
            match TcpTransport::connect(addr, &cfg) {
                Ok(t) => return Ok(Box::new(t) as Box<dyn thor_wire::Transport>),
                Err(_) if Instant::now() < give_up => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(ClientError::from(e)),
            }
        }
    });
    let session = SessionConfig {
        reconnect: ReconnectConfig { give_up_after: patience, ..ReconnectConfig::default() },
        ..SessionConfig::default()
    };
    Ok(Cluster::with_groups(&groups, groups[0].0, connect, session)?)
}

/// A cluster and the accounts of every server's bank.
struct Clustered {
    c: Cluster,
    /// The servers, in `--server` order.
    ids: Vec<ServerId>,
    accounts: HashMap<ServerId, Vec<Ref<Account>>>,
}

impl Teller for Clustered {
    type Acct = XRef<Account>;
    type Object = u64;

    /// An account at one server and one at another.
    fn pick(&self, rng: &mut SplitMix64) -> [XRef<Account>; 2] {
        let ids = &self.ids;
        let i = rng.below(ids.len() as u64) as usize;
        let j = (i + 1 + rng.below(ids.len() as u64 - 1) as usize) % ids.len();
        let (si, sj) = (ids[i], ids[j]);
        let from = self.accounts[&si][rng.below(self.accounts[&si].len() as u64) as usize];
        let to = self.accounts[&sj][rng.below(self.accounts[&sj].len() as u64) as usize];
        [XRef::at(si, from), XRef::at(sj, to)]
    }

    fn get(&self, a: XRef<Account>) -> Result<View<'_, Account>, ClientError> {
        self.c.get(a)
    }

    fn object(&self, a: XRef<Account>) -> u64 {
        object(a.server, a.r)
    }

    fn commit(&self) -> Result<CommitInfo, ClientError> {
        self.c.commit()
    }

    fn abort(&self) {
        self.c.abort();
    }
}

pub fn run(a: ClusterClient) -> Result<()> {
    if a.servers.len() < 2 {
        bail!("a cluster needs two --server at least");
    }
    let ids: Vec<ServerId> = a.servers.iter().map(|&(id, _)| ServerId(id)).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(a.h.seconds);
    let mut rec = Recorder::open(&a.h)?;
    let mut rng = SplitMix64::new(0xC1A5 ^ u64::from(a.h.client));
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
    let clusters = run_transfers(&a.h, deadline, &mut rec, &mut rng, || {
        let c = cluster(&a)?;
        let mut accounts: HashMap<ServerId, Vec<Ref<Account>>> = HashMap::new();
        for &id in &ids {
            match c.session(id).and_then(bank::load_bank) {
                Ok(x) if !x.is_empty() => {
                    accounts.insert(id, x);
                }
                Ok(_) => bail!("server {} has an empty bank", id.0),
                Err(e) if lost(&e) => return Ok(None),
                Err(e) => return Err(e).context("loading the banks"),
            }
        }
        Ok(Some(Clustered { c, ids: ids.clone(), accounts }))
    })?;
    rec.finish(&format!("{clusters} cluster session(s)"))
}
