//! `thor server --replica-id R --group 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`: one replica of a
//! replicated server (issue 33).
//!
//! ```text
//! thor server --dir DIR --replica-id R --group R=HOST:PORT,... [--create] [--server-id N]
//!             [--page-kb K] [--credentials FILE | --token-file F] [--peer ID=HOST:PORT ...]
//!             [--peer-group ID=R=HOST:PORT,R=HOST:PORT,... ...]
//! thor server --dir DIR --replica-id R --group <founders> --join --listen HOST:PORT
//! ```
//!
//! The process runs a `thor_server::GroupEngine` (the server's core on a Raft replica, its
//! journal and database in `--dir`) served by thor-net's TCP server, with
//! `thor_net::TcpReplicas` to the other replicas (where `--group` says they listen) and a
//! `thor_net::ReplicaService` answering theirs (Raft's messages, database images, set aside
//! in `DIR/replica-images`). Only the group's leader serves clients; the others answer a
//! client's requests `Error(NotLeader)` naming it, and clients given the group's addresses
//! (`thor_client`'s group sessions, `--peer-group` of other servers) follow it.
//!
//! *Founding a group:* every founding replica gets the same `--group` (its own address
//! included: it listens there), `--server-id` (the group's id, which its clients and peers
//! name) and `--page-kb`, and `--create` the first time; each creates the same empty database
//! and the same founding membership.
//!
//! *Credentials:* the replicas speak to each other on sessions of the group's own peer
//! credential (`peer:N` for `--server-id N`, or the single token), which `--credentials` must
//! hold; a client's credential, or another server's, is refused as a replica.
//!
//! *A new replica* starts with `--join` (an empty database, the founders' membership, not a
//! voter) at `--listen`, and takes part once `thor group add --replica-id R --addr HOST:PORT`
//! added it: the change carries its address to every replica, which link to it. `thor group
//! remove` takes a replica out; it stops. A replica restarted later learns the replicas added
//! since its `--group` from the changes it replays, if its journal still holds them: give it
//! the group as it is now.
//!
//! TLS: `--tls-cert`/`--tls-key` as for a server; `--peer-tls-ca` (and `--peer-tls-name`)
//! make the links to the other replicas TLS as they do the peers'.
//!
//! Not in this mode yet: `--metrics-listen`, `--listen unix:PATH`, re-reading the
//! credentials on SIGHUP, and the exit after a storage failure (a replica whose storage fails
//! stops voting and serving, and says so once at ERROR; the group goes on without it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use thor_core::ServerId;
use thor_lab::args::Addrs;
use thor_net::{ReplicaService, Server, TcpReplicas};
use thor_server::{Credentials, GroupEngine, GroupOptions, ProtocolConfig};
use thor_storage::FileDisk;
use tracing::info;

use crate::server::{
    AuthSource, LatePeers, ServerArgs, engine_options, net_config, peer_tls, peer_token,
    refuse_foreign_dir, start_peers, tls_mode,
};

/// Where a replica sets database images aside for the replicas that copy them (inside its
/// directory).
pub(crate) const IMAGES_DIR: &str = "replica-images";

/// Where this replica listens: its own entry in `--group`, or `--listen` for one that joins.
fn listen_addr(args: &ServerArgs, me: u64, group: &[(u64, SocketAddr)]) -> Result<SocketAddr> {
    let own = group.iter().find(|(id, _)| *id == me).map(|(_, a)| *a);
    Ok(match (args.join, own) {
        (false, Some(a)) => a,
        (false, None) => bail!("--group has no address for replica {me} (this one)"),
        (true, Some(_)) => {
            bail!("replica {me} is a founder in --group: --join starts a replica the group lacks")
        }
        (true, None) => args.listen.parse().with_context(|| {
            format!("--listen {}: a joining replica listens at HOST:PORT", args.listen)
        })?,
    })
}

/// The group engine's settings: the server's, and `--durability`, `--memory-flush-ms`.
fn group_options(
    args: &ServerArgs,
    me: u64,
    config: ProtocolConfig,
    late: Option<Arc<LatePeers>>,
) -> GroupOptions {
    let mut opts = GroupOptions::new(me, engine_options(args, config, late));
    opts.durability = match args.durability {
        crate::server::Durability::Disk => thor_server::Durability::Disk,
        crate::server::Durability::Memory => thor_server::Durability::Memory,
    };
    opts.memory_flush = std::time::Duration::from_millis(args.memory_flush_ms);
    opts
}

/// Runs replica `--replica-id` of the group `--group` until SIGINT or SIGTERM (see the module
/// documentation).
pub(crate) fn run(
    args: ServerArgs,
    source: AuthSource,
    credentials: Credentials,
    config: ProtocolConfig,
    tls: Option<thor_net::TlsServer>,
) -> Result<()> {
    let me = args.replica_id.expect("replica mode");
    let group = match &args.group {
        Some(Addrs::Group(g)) => g.clone(),
        _ => bail!("--group takes the replicas as R=HOST:PORT,R=HOST:PORT,..."),
    };
    let group_id = ServerId(args.server_id.unwrap_or(1));
    let listen = listen_addr(&args, me, &group)?;
    let founders: Vec<u64> = group.iter().map(|(id, _)| *id).collect();
    let Some(token) = peer_token(&credentials, group_id) else {
        bail!(
            "the credentials have no peer:{} line: the replicas of group {} could not \
             authenticate to each other",
            group_id.0,
            group_id.0
        );
    };
    let auth = source.describe(&credentials);
    let tls_mode = tls_mode(tls.as_ref());
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}"))?;

    let late = (!args.peers.is_empty() || !args.peer_groups.is_empty())
        .then(|| Arc::new(LatePeers::default()));
    let opts = group_options(&args, me, config, late.clone());
    let exists = args.dir.join(thor_server::superblock::FILE).exists();
    if !exists && !args.create && !args.join {
        bail!(
            "{} holds no replica; pass --create to found the group (or --join to add one)",
            args.dir.display()
        );
    }
    if !exists {
        refuse_foreign_dir(&args.dir)?;
    }
    let disk = FileDisk::open_locked(&args.dir, !exists, "thor server")
        .with_context(|| format!("opening {}", args.dir.display()))?;
    let addrs: HashMap<u64, SocketAddr> = group.iter().copied().collect();
    let link_cfg = thor_net::ClientConfig {
        token: token.clone(),
        client_name: format!("thor replica {me} of server {}", group_id.0),
        ..thor_net::ClientConfig::default()
    };
    let links = TcpReplicas::start(me, group_id, &addrs, &link_cfg, peer_tls(&args)?)?;
    let disk: Arc<dyn thor_storage::Disk> = Arc::new(disk);
    let engine = if exists {
        GroupEngine::open(disk, opts, links.clone())
            .with_context(|| format!("opening the replica in {}", args.dir.display()))?
    } else {
        // Founders start from the founding membership; a joiner from the same, which lacks it:
        // it is no voter until added.
        let e = GroupEngine::create(disk, opts, &founders, links.clone())
            .with_context(|| format!("creating the replica in {}", args.dir.display()))?;
        info!(
            "created replica {me} of server {} ({}) with {} KiB pages",
            group_id.0,
            if args.join { "joining" } else { "founding" },
            args.page_kb
        );
        e
    };
    if let Some(late) = &late {
        start_peers(&args, &credentials, group_id, late)?;
    }
    let service = ReplicaService::new(
        engine.clone(),
        thor_net::ReplicaServiceConfig::new(args.dir.join(IMAGES_DIR)),
    )
    .context("setting up the replica service")?;
    let mut net = net_config(&args, tls);
    net.replicas = Some(service);
    let server = Server::start_on(listener, engine.clone(), net)?;
    let at = server.local_addr();
    server.wait_for_signal_after(|| {
        info!(
            "listening on {at} (replica {me} of server {}, group {founders:?}{}, database {}, \
             authentication {auth}, TLS {tls_mode})",
            group_id.0,
            if args.join { ", joining" } else { "" },
            args.dir.display(),
        )
    })?;
    info!("signal received: shutting down");
    server.shutdown()?;
    match engine.close() {
        Ok(()) => info!("replica {me} stopped (its journal flushed)"),
        Err(e) => tracing::warn!("closing the replica: {e}"),
    }
    Ok(())
}
