//! `thor server`: serve one database over TCP until Ctrl-C or SIGTERM.
//!
//! ```text
//! thor server --dir DIR --listen ADDR [--create] [--page-kb K] [--direct-io]
//!             [--credentials FILE | --token-file F] [--server-id N] [--peer ID=HOST:PORT ...]
//!             [--prefetch-max N]
//! ```
//!
//! With `--replica-id R --group R=HOST:PORT,...` (and `--join` for a new replica) the process
//! is one replica of a replicated server instead: `crate::replica` and `docs/replication.md`.
//!
//! Several servers form a cluster: each has its own directory and id (`--server-id` when it is
//! created; the id is stored) and is told where the others listen (`--peer`, once per other
//! server), so that two-phase commit's messages reach them. A server takes part only in
//! transactions whose servers it knows this way: a prepare naming any other is refused at once.
//!
//! # Who may connect
//!
//! `--credentials FILE` gives scoped credentials, one `NAME SCOPE SECRET` a line
//! (thor-server-core's `core/credentials.rs` has the format): `read-only`, `read-write`, `operator`
//! (adds `Stats` and `Backup`) and `peer:ID` (the messages of server ID, and nothing else). A
//! client presents a secret as its token. A server presents the secret of the first `peer:ID`
//! line of its own id to its peers, so one file can serve a whole cluster; with `--peer`, the
//! file must have a `peer:` line for this server and for every peer. The file is re-read on
//! SIGHUP: sessions of credentials that are gone (or whose secret changed) are closed, the
//! others get their new scope; a file that does not parse is reported and the credentials in
//! use are kept. The server warns when the file is readable by others than its owner.
//!
//! Without it, the single token comes from `--token-file` (the file's bytes, without a trailing
//! newline; re-read on SIGHUP too) or else from the `THOR_TOKEN` environment variable; it is a
//! credential of every scope, which peers present too (and so may speak as any server of the
//! cluster). With neither, clients need no token and get every scope.
//!
//! On SIGINT or SIGTERM the server stops accepting, answers the requests in flight, closes every
//! connection, installs the MOB into the page file (so that the next start has no log to
//! replay) and exits.
//!
//! `--listen unix:PATH` serves a Unix-domain socket instead of TCP (`thor_net::UnixTransport`
//! connects to it).
//!
//! TLS: `--tls-cert PEM --tls-key PEM` serve every connection over TLS with that certificate
//! chain and key; `--tls-client-ca PEM` also requires each client to present a certificate
//! signed by that CA. `--peer-tls-ca PEM` makes the connections to the peers TLS, checking
//! their certificates against that CA (and their IP address as given in `--peer`, or the name
//! given with `--peer-tls-name`); this server's `--tls-cert` is its client certificate towards
//! peers that require one. `--handshake-timeout-s` bounds how long a new connection may take
//! to finish its TLS handshake and `Hello`.
//!
//! `--metrics-listen ADDR` serves `GET /metrics` (Prometheus) and `GET /health` (200 while the
//! server serves, 503 once its storage failed: what a load balancer asks) on a second port;
//! names and types are in `crate::stats` and the guide. At shutdown that endpoint stops
//! first, so the engine's last handle is the server's and closing it checkpoints.
//!
//! # A storage failure
//!
//! When a write or fsync of the log or the page file fails (a full disk, `EIO`), the engine
//! logs the cause at ERROR once, refuses commits and new sessions with the reason, and serves
//! reads of committed data to the sessions open (`thor_server::engine`). The server then
//! gives health checks and scrapers [`STORAGE_FAILURE_GRACE`] to see it (`/health` answers
//! 503, `thor stats` says FAILED), shuts down as on SIGTERM (without the checkpoint, which
//! would need the disk) and exits with status 75 (`EX_TEMPFAIL`). It does not stay up failed:
//! after a failed fsync only a new open can tell what is durable, a server that can never
//! commit again holds clients and the port for nothing, and an exit is what a supervisor
//! (systemd's `Restart=on-failure`, Kubernetes) sees and acts on. The restart is the recovery:
//! on a disk still full the open fails and leaves nothing behind (so a restart loop never
//! makes things worse); once space is back it replays the log and serves every acknowledged
//! commit.
//!
//! `--direct-io` reads the database's files with `O_DIRECT` (`FileDisk::with_direct_reads`), so
//! that a page the server's page cache misses is read from the device, not copied from the OS
//! page cache: what the DEMOTE experiment needs a miss to cost. At shutdown the server logs
//! how many direct reads it made.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_core::ServerId;
use thor_net::{NetConfig, Server, TcpPeers, Threading};
use thor_server::limits::{CREDENTIALS_FILE_BYTES_MAX, SESSIONS_MAX_DEFAULT};
use thor_server::{Credentials, Engine, EngineError, EngineOptions, ProtocolConfig, Scope};
use thor_storage::FileDisk;
use tracing::{debug, info, warn};

/// How long a server whose storage failed stays up (refusing commits and sessions, serving
/// reads, answering `/health` with 503) before it exits with [`EXIT_STORAGE_FAILED`]: enough
/// for a load balancer's health check and a scrape to see the failure.
pub const STORAGE_FAILURE_GRACE: Duration = Duration::from_secs(5);

/// The exit status of a server that stopped because its storage failed: `EX_TEMPFAIL`
/// (sysexits.h), "a temporary failure; retry later": restart it once the disk is repaired.
pub const EXIT_STORAGE_FAILED: u8 = 75;

/// How often the failure watcher looks at the engine's health (a lock-free read).
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// The error `thor server` ends with after a storage failure; `main` exits with
/// [`EXIT_STORAGE_FAILED`] for it.
#[derive(Debug, thiserror::Error)]
#[error("stopped after a storage failure ({0}); restart the server once the disk is repaired")]
pub struct StorageFailed(pub String);

/// Serve a database over TCP.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The database directory.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// The address to listen on: HOST:PORT for TCP (port 0 picks a free port), or
    /// unix:PATH for a Unix-domain socket created at PATH, for clients on this machine (it
    /// skips TCP's loopback path; the file must not exist, and is removed at shutdown).
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub(crate) listen: String,
    /// Create the database if the directory holds none.
    #[arg(long)]
    pub(crate) create: bool,
    /// Page size in KiB of a database created now (a power of two from 1 to 32).
    #[arg(long, value_parser = crate::page_kb, allow_negative_numbers = true, default_value_t = 8)]
    pub(crate) page_kb: usize,
    /// A file of scoped credentials, one `NAME SCOPE SECRET` a line (`#` starts a comment).
    /// SCOPE is read-only (fetch, transactions that write nothing), read-write (+ commits
    /// that write), operator (+ stats and backup) or peer:ID (the two-phase commit messages
    /// of server ID, nothing else); SECRET is at least 16 bytes, what a client presents as its
    /// token. With --peer, this server presents its own peer:ID line's secret to its peers.
    /// Re-read on SIGHUP: sessions of credentials no longer in it are closed. Instead of
    /// --token-file and THOR_TOKEN.
    #[arg(long, conflicts_with = "token_file")]
    pub(crate) credentials: Option<PathBuf>,
    /// A file holding the single token every client and peer server presents, which allows
    /// everything (default: $THOR_TOKEN, else no authentication). Re-read on SIGHUP. See
    /// --credentials for scoped, revocable ones.
    #[arg(long)]
    pub(crate) token_file: Option<PathBuf>,
    /// Most client connections at once; more are refused with a Busy error.
    #[arg(long, default_value_t = SESSIONS_MAX_DEFAULT)]
    pub(crate) max_connections: usize,
    /// The largest request frame a client may send, in MiB.
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 64)]
    pub(crate) max_frame_mb: usize,
    /// Seconds a connection may wait between requests before it is closed.
    #[arg(long, default_value_t = 300)]
    pub(crate) idle_timeout_s: u64,
    /// Serve the server's counters to Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9400).
    #[arg(long)]
    pub(crate) metrics_listen: Option<String>,
    /// The directory `thor backup --server` writes backups into (each under the name the
    /// client gives). Without it the server takes no backups over the network.
    #[arg(long)]
    pub(crate) backup_dir: Option<PathBuf>,
    /// The page cache's size in MiB (default 64).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true)]
    pub(crate) page_cache_mb: Option<f64>,
    /// The MOB's budget in MiB (default 64): committed versions not yet installed into their
    /// pages. Commits wait for installation beyond it; it also bounds the memory recovery
    /// needs after a crash, and the log a backup copies is about this much.
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true)]
    pub(crate) mob_mb: Option<f64>,
    /// Where pages clients read go in the page cache: inclusive (LRU: the page becomes the
    /// most recently used) or exclusive (DEMOTE: it goes next, since the client holds it).
    #[arg(long, value_enum, default_value = "inclusive")]
    page_cache: PageCacheMode,
    /// Read the database's files with direct I/O (O_DIRECT), around the operating system's
    /// page cache, so that a page the server's page cache misses is a real device read (for
    /// experiments such as DEMOTE; slower otherwise). Writes stay buffered. Needs a file system
    /// that supports O_DIRECT, such as ext4 or xfs; one that refuses it is an error at start.
    #[arg(long)]
    pub(crate) direct_io: bool,
    /// The id of a database created now (objects at other servers name it). An existing
    /// database keeps its id; giving a different one is an error.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) server_id: Option<u32>,
    /// Where another server of the cluster listens, as ID=HOST:PORT (repeat for each). Needed
    /// for transactions that use several servers (two-phase commit between them): a prepare
    /// naming a server not given here is refused, and so are messages from one.
    #[arg(long = "peer", value_parser = thor_lab::args::parse_peer)]
    pub(crate) peers: Vec<(u32, std::net::SocketAddr)>,
    /// How commits are made recoverable: obj (thor's own: objects shipped, logged, kept in the
    /// MOB) or one of the QuickStore recovery study's page-based modes: pd-redo, pd-esm,
    /// sd-esm, sl-esm (clients diff pages against a recovery buffer and ship page records, and
    /// in the ESM modes the dirty pages too), wpl (clients ship the dirty pages whole and the
    /// server logs them whole). Clients follow the server's mode.
    #[arg(long, default_value = "obj", value_parser = parse_commit_mode)]
    pub(crate) commit_mode: thor_wire::CommitMode,
    /// Most further pages the server adds to one prefetch reply, whatever a client asks
    /// (0: prefetch off at this server; every `Prefetch` gets its page alone).
    #[arg(long, default_value_t = thor_wire::limits::PREFETCH_PAGES_MAX)]
    pub(crate) prefetch_max: usize,
    /// Threads serving connections (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub(crate) net_threads: usize,
    /// Serve connections on tokio's work-stealing runtime instead of a single-threaded runtime
    /// per thread (the default, which answers a fetch without waking another thread).
    #[arg(long)]
    pub(crate) work_stealing: bool,
    /// Seconds a new connection may take to finish its TLS handshake (if any) and say Hello;
    /// a connection silent for longer is closed, so that it does not hold a slot.
    #[arg(long, value_parser = crate::at_least_one::<u64>, allow_negative_numbers = true, default_value_t = thor_net::limits::HANDSHAKE_TIMEOUT_DEFAULT.as_secs())]
    pub(crate) handshake_timeout_s: u64,
    /// Serve TLS: the server's certificate chain (PEM, leaf first). Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1, unencrypted).
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); a client without one fails the
    /// TLS handshake. Needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// Reach the peers (--peer) over TLS, trusting the certificates this CA (PEM) signed.
    /// This server's --tls-cert, if given, is presented to peers that require client
    /// certificates.
    #[arg(long)]
    pub(crate) peer_tls_ca: Option<PathBuf>,
    /// The name to check every peer's certificate against, instead of the IP address given
    /// in --peer (for a cluster whose servers share one certificate). Needs --peer-tls-ca.
    #[arg(long, requires = "peer_tls_ca")]
    pub(crate) peer_tls_name: Option<String>,
    /// Run as replica R of a replica group (see --group): the server's database is
    /// replicated by Raft over the group, and only the group's leader serves clients.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), requires = "group")]
    pub(crate) replica_id: Option<u64>,
    /// The group's replicas, R=HOST:PORT,R=HOST:PORT,... (this replica's own included: it
    /// listens there). Every founding replica gets the same list, --server-id and --page-kb,
    /// and --create the first time. Needs --replica-id.
    #[arg(long, value_parser = thor_lab::args::parse_addrs, requires = "replica_id")]
    pub(crate) group: Option<thor_lab::args::Addrs>,
    /// Start a new, empty replica that joins the group of --group (its founders) as a
    /// non-voter: it votes once the group's leader added it (`GroupEngine::change_membership`;
    /// there is no `thor group add` command yet), and catches up from the leader. It listens
    /// at --listen.
    #[arg(long, requires = "replica_id", conflicts_with = "create")]
    pub(crate) join: bool,
    /// A replicated peer server, ID=R=HOST:PORT,R=HOST:PORT,... (repeat for each): two-phase
    /// commit's messages go to its leader, following its replicas' NotLeader answers. Like
    /// --peer otherwise.
    #[arg(long = "peer-group", value_parser = thor_lab::args::parse_server_group)]
    pub(crate) peer_groups: Vec<(u32, thor_lab::args::Addrs)>,
    /// When a replica group acknowledges a commit: once a majority holds it on disk (`disk`,
    /// the default: no crash loses it), or in memory with the fsync behind by at most
    /// --memory-flush-ms (`memory`, Thor's setting: one replica's crash loses nothing
    /// acknowledged, a simultaneous power loss of a majority loses the last interval's
    /// commits; docs/cluster.md, "Durability of a replica group"). Needs --replica-id.
    #[arg(long, value_enum, default_value_t = Durability::Disk, requires = "replica_id")]
    pub(crate) durability: Durability,
    /// With --durability memory: how often the journal is fsynced behind the
    /// acknowledgements, in milliseconds.
    #[arg(long, default_value_t = thor_server::limits::GROUP_MEMORY_FLUSH_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=10_000), requires = "replica_id")]
    pub(crate) memory_flush_ms: u64,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Durability {
    /// A majority's disks.
    Disk,
    /// A majority's memory, the fsync behind.
    Memory,
}

/// The TLS settings of the server's listener, from `--tls-cert`, `--tls-key` and
/// `--tls-client-ca`.
pub(crate) fn server_tls(args: &ServerArgs) -> Result<Option<thor_net::TlsServer>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    let tls = thor_net::TlsServer::from_files(cert, key, args.tls_client_ca.as_deref())
        .context("setting up TLS (--tls-cert, --tls-key, --tls-client-ca)")?;
    Ok(Some(tls))
}

/// The TLS settings of the connections to the peers, from `--peer-tls-ca`,
/// `--peer-tls-name` and this server's own certificate.
pub(crate) fn peer_tls(args: &ServerArgs) -> Result<Option<thor_net::TlsClient>> {
    let Some(ca) = &args.peer_tls_ca else { return Ok(None) };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => thor_net::TlsClient::with_identity_files(ca, cert, key),
        _ => thor_net::TlsClient::from_ca_file(ca),
    }
    .context("setting up TLS to the peers (--peer-tls-ca)")?;
    let tls = match &args.peer_tls_name {
        Some(name) => tls.with_server_name(name).context("--peer-tls-name")?,
        None => tls,
    };
    Ok(Some(tls))
}

/// `--commit-mode`.
fn parse_commit_mode(s: &str) -> Result<thor_wire::CommitMode, String> {
    thor_wire::CommitMode::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = thor_wire::CommitMode::ALL.iter().map(|m| m.name()).collect();
        format!("unknown commit mode {s:?}; one of {}", names.join(", "))
    })
}

/// `--page-cache`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PageCacheMode {
    /// LRU.
    Inclusive,
    /// DEMOTE's placement.
    Exclusive,
}

/// Where a server's credentials come from; re-read on SIGHUP.
#[derive(Debug, Clone)]
pub(crate) enum AuthSource {
    /// `--credentials FILE`.
    Credentials(PathBuf),
    /// `--token-file FILE`: the single token.
    TokenFile(PathBuf),
    /// `THOR_TOKEN`: the single token, fixed for the process's life.
    Env,
    /// No authentication.
    Off,
}

impl AuthSource {
    fn of(args: &ServerArgs) -> AuthSource {
        match (&args.credentials, &args.token_file) {
            (Some(f), _) => AuthSource::Credentials(f.clone()),
            (None, Some(f)) => AuthSource::TokenFile(f.clone()),
            (None, None) if std::env::var_os("THOR_TOKEN").is_some_and(|t| !t.is_empty()) => {
                AuthSource::Env
            }
            (None, None) => AuthSource::Off,
        }
    }

    /// Reads the credentials: a table, the single token as a table of one, or none.
    fn read(&self) -> Result<Credentials> {
        match self {
            AuthSource::Credentials(f) => read_credentials_file(f),
            AuthSource::TokenFile(f) => {
                let t = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
                let t = trim_newlines(t);
                if t.is_empty() {
                    bail!(
                        "the token file {} is empty (omit --token-file to run without authentication)",
                        f.display()
                    );
                }
                Ok(Credentials::single_token(&t))
            }
            AuthSource::Env => {
                let t = std::env::var("THOR_TOKEN").map(String::into_bytes).unwrap_or_default();
                Ok(Credentials::single_token(&t))
            }
            AuthSource::Off => Ok(Credentials::new()),
        }
    }

    pub(crate) fn describe(&self, c: &Credentials) -> String {
        match self {
            AuthSource::Credentials(f) => format!("{} credentials from {}", c.len(), f.display()),
            AuthSource::TokenFile(f) => format!("the token in {}", f.display()),
            AuthSource::Env => "the token in THOR_TOKEN".into(),
            AuthSource::Off => "off".into(),
        }
    }
}

fn trim_newlines(mut t: Vec<u8>) -> Vec<u8> {
    while t.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        t.pop();
    }
    t
}

/// Reads a `--credentials` file: bounded, UTF-8, at least one credential; warns when others
/// than its owner may read it (it holds secrets).
fn read_credentials_file(f: &Path) -> Result<Credentials> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(f).with_context(|| format!("reading {}", f.display()))?;
    let mode = file.metadata().with_context(|| format!("reading {}", f.display()))?.mode();
    let mut text = String::new();
    file.take(CREDENTIALS_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (UTF-8 text)", f.display()))?;
    if text.len() as u64 > CREDENTIALS_FILE_BYTES_MAX {
        bail!("{} is larger than {CREDENTIALS_FILE_BYTES_MAX} bytes", f.display());
    }
    let c = Credentials::parse(&text).with_context(|| format!("in {}", f.display()))?;
    if c.is_empty() {
        bail!(
            "{} holds no credential (a server with none admits everyone: omit --credentials for that)",
            f.display()
        );
    }
    if mode & 0o077 != 0 {
        warn!(
            "{} holds secrets and may be read by others than its owner (mode {:o}): chmod 600 it",
            f.display(),
            mode & 0o777
        );
    }
    Ok(c)
}

/// The secret server `me` presents to its peers: the single token, or its own `peer:ME`
/// credential's (`None` if the table has none); empty without authentication.
pub(crate) fn peer_token(c: &Credentials, me: ServerId) -> Option<Vec<u8>> {
    match c.iter().next() {
        None => Some(Vec::new()),
        Some(only) if only.scope() == Scope::All => Some(only.secret().to_vec()),
        Some(_) => c.peer_secret(me).map(<[u8]>::to_vec),
    }
}

/// The peers `--peer` names that the credentials give no way to authenticate (no `peer:ID`
/// line); none for the single token or without authentication.
fn unknown_peers(c: &Credentials, peers: &[(u32, std::net::SocketAddr)]) -> Vec<u32> {
    if c.iter().all(|x| x.scope() == Scope::All) {
        return Vec::new();
    }
    peers.iter().map(|&(id, _)| id).filter(|&id| c.peer_secret(ServerId(id)).is_none()).collect()
}

/// The peers of `thor server`, started once the database is open: the credential a server
/// presents to its peers is the one of its own id, which an existing database knows. Messages
/// before then (recovery's queries) are dropped; two-phase commit resends what matters.
#[derive(Debug, Default)]
pub(crate) struct LatePeers(pub(crate) OnceLock<Arc<TcpPeers>>);

impl thor_server::PeerSink for LatePeers {
    fn send(&self, to: ServerId, msg: thor_wire::PeerMsg) {
        match self.0.get() {
            Some(p) => p.send(to, msg),
            None => debug!("peers not started yet: dropped {msg:?} to server {}", to.0),
        }
    }
}

/// The engine's settings from the flags (a server's, or a replica's core's).
pub(crate) fn engine_options(
    args: &ServerArgs,
    protocol: ProtocolConfig,
    peers: Option<Arc<LatePeers>>,
) -> EngineOptions {
    EngineOptions {
        page_size: args.page_kb * 1024,
        server_id: thor_core::ServerId(args.server_id.unwrap_or(1)),
        peers: peers.map(|p| p as Arc<dyn thor_server::PeerSink>),
        twopc: thor_server::TwoPcConfig {
            peers: args
                .peers
                .iter()
                .map(|&(id, _)| ServerId(id))
                .chain(args.peer_groups.iter().map(|(id, _)| ServerId(*id)))
                .collect(),
            ..Default::default()
        },
        protocol,
        backup_dir: args.backup_dir.clone(),
        page_cache_bytes: args
            .page_cache_mb
            .map_or(EngineOptions::default().page_cache_bytes, |mb| (mb * 1048576.0) as usize),
        mob_bytes: args
            .mob_mb
            .map_or(EngineOptions::default().mob_bytes, |mb| (mb * 1048576.0) as usize),
        page_cache_mode: match args.page_cache {
            PageCacheMode::Inclusive => thor_server::CacheMode::Inclusive,
            PageCacheMode::Exclusive => thor_server::CacheMode::Exclusive,
        },
        commit_mode: args.commit_mode,
        prefetch_pages_max: args.prefetch_max,
        ..EngineOptions::default()
    }
}

/// Opens the database; returns the engine and (a clone of) its disk, whose direct-read
/// counters are the engine's.
fn open_engine(
    args: &ServerArgs,
    protocol: ProtocolConfig,
    peers: Option<Arc<LatePeers>>,
) -> Result<(Engine, FileDisk)> {
    let opts = engine_options(args, protocol, peers);
    if !args.create && !args.dir.is_dir() {
        bail!("{} does not exist; pass --create to create a database there", args.dir.display());
    }
    if args.create {
        refuse_foreign_dir(&args.dir)?;
    }
    let file_disk = FileDisk::open_locked(&args.dir, args.create, "thor server")
        .and_then(|d| d.with_direct_reads(args.direct_io))
        .with_context(|| format!("opening {}", args.dir.display()))?;
    let disk = Arc::new(file_disk.clone());
    let engine = match Engine::open(disk.clone(), opts.clone()) {
        Ok(e) => {
            if args.create {
                info!(
                    "opened the existing database (page size {} KiB; --page-kb does not apply)",
                    e.page_size() / 1024
                );
            }
            Ok(e)
        }
        Err(EngineError::NotADatabase) if args.create => {
            let e = Engine::create(disk, opts).context("creating the database")?;
            info!("created a database with {} KiB pages", e.page_size() / 1024);
            Ok(e)
        }
        Err(EngineError::NotADatabase) => {
            bail!("{} holds no thor database; pass --create to create one", args.dir.display())
        }
        Err(e) => Err(e).with_context(|| format!("opening the database in {}", args.dir.display())),
    }?;
    if let Some(id) = args.server_id
        && engine.server_id().0 != id
    {
        bail!(
            "{} holds the database of server {}, not {id} (a server's id is fixed when it is created)",
            args.dir.display(),
            engine.server_id().0
        );
    }
    if let Some(&(id, _)) = args.peers.iter().find(|(id, _)| *id == engine.server_id().0) {
        bail!("--peer {id}=... names this server itself");
    }
    Ok((engine, file_disk))
}

/// Starts the peers of `engine` (`--peer`), authenticating with its peer credential.
pub(crate) fn start_peers(
    args: &ServerArgs,
    credentials: &Credentials,
    me: ServerId,
    late: &LatePeers,
) -> Result<Option<Arc<TcpPeers>>> {
    if args.peers.is_empty() && args.peer_groups.is_empty() {
        return Ok(None);
    }
    let Some(token) = peer_token(credentials, me) else {
        bail!(
            "the credentials have no peer:{} line: this server (id {}) could not authenticate to its peers",
            me.0,
            me.0
        );
    };
    let mut addrs: std::collections::HashMap<_, _> =
        args.peers.iter().map(|&(id, a)| (ServerId(id), thor_net::PeerAddrs::one(a))).collect();
    for (id, a) in &args.peer_groups {
        let replicas = match a {
            thor_lab::args::Addrs::One(a) => vec![(0, *a)],
            thor_lab::args::Addrs::Group(g) => g.clone(),
        };
        addrs.insert(ServerId(*id), thor_net::PeerAddrs { replicas });
    }
    let cfg = thor_net::ClientConfig {
        token,
        client_name: format!("thor server {} at {}", me.0, args.listen),
        ..thor_net::ClientConfig::default()
    };
    let peers = TcpPeers::start_groups(&addrs, &cfg, peer_tls(args)?)?;
    let _ = late.0.set(peers.clone());
    Ok(Some(peers))
}

/// Re-reads the credentials on every SIGHUP, on a thread of its own, for the life of the
/// process. The handler is installed before the server says it listens, so a SIGHUP never
/// kills it. The thread holds the engine weakly: shutdown's last reference stays the main
/// thread's, which closes (checkpoints) it.
fn reload_on_hangup(
    source: AuthSource,
    engine: Weak<Engine>,
    peers: Option<Arc<TcpPeers>>,
    peer_ids: Vec<(u32, std::net::SocketAddr)>,
) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the SIGHUP handler")?;
    let mut hup = {
        let _in_runtime = rt.enter();
        signal(SignalKind::hangup()).context("installing the SIGHUP handler")?
    };
    std::thread::Builder::new().name("thor-sighup".into()).spawn(move || {
        rt.block_on(async {
            while hup.recv().await.is_some() {
                reload(&source, &engine, peers.as_deref(), &peer_ids);
            }
        })
    })?;
    Ok(())
}

fn reload(
    source: &AuthSource,
    engine: &Weak<Engine>,
    peers: Option<&TcpPeers>,
    peer_ids: &[(u32, std::net::SocketAddr)],
) {
    if matches!(source, AuthSource::Env | AuthSource::Off) {
        info!(
            "SIGHUP: nothing to re-read (authentication: {})",
            source.describe(&Credentials::new())
        );
        return;
    }
    let credentials = match source.read() {
        Ok(c) => c,
        Err(e) => {
            warn!("SIGHUP: {e:#}; the credentials in use are kept");
            return;
        }
    };
    let Some(engine) = engine.upgrade() else { return };
    if let Some(p) = peers {
        match peer_token(&credentials, engine.server_id()) {
            Some(t) => p.set_token(t),
            None => warn!(
                "SIGHUP: no peer:{} line; this server keeps presenting its old peer credential",
                engine.server_id().0
            ),
        }
    }
    for id in unknown_peers(&credentials, peer_ids) {
        warn!("SIGHUP: no peer:{id} line: server {id} can no longer authenticate to this server");
    }
    let what = source.describe(&credentials);
    let before = engine.stats().sessions_revoked;
    engine.set_credentials(credentials);
    let closed = engine.stats().sessions_revoked - before;
    info!("SIGHUP: authentication is now {what}; {closed} sessions of revoked credentials closed");
}

/// `--create` makes a database only where `thor::open` would: a missing or empty directory,
/// or one holding a database (opened as it is) or what a creation cut short leaves (the page
/// file, the superblock's temporary file, the lock file). A directory holding anything else is
/// someone else's: refused, naming a file, before anything is written.
pub(crate) fn refuse_foreign_dir(dir: &std::path::Path) -> Result<()> {
    // A missing directory is made; a file in its place is `FileDisk`'s to refuse.
    if !dir.is_dir() {
        return Ok(());
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    if names.iter().any(|n| n == thor_server::superblock::FILE) {
        return Ok(());
    }
    let ours = [
        thor_server::io::PAGE_FILE,
        thor_server::superblock::TMP_FILE,
        thor_storage::file_disk::LOCK_FILE,
        crate::replica::IMAGES_DIR,
    ];
    if let Some(foreign) = names.iter().find(|n| !ours.contains(&n.as_str())) {
        bail!(
            "{} holds {foreign:?} and no thor database; --create makes one only in an empty \
             directory (or one holding a database): give another --dir",
            dir.display()
        );
    }
    Ok(())
}

/// The socket `thor server` listens on.
pub(crate) enum Listener {
    /// `--listen HOST:PORT`.
    Tcp(std::net::TcpListener),
    /// `--listen unix:PATH`, with the path (removed at shutdown).
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

pub fn run(args: ServerArgs) -> Result<()> {
    let source = AuthSource::of(&args);
    if args.credentials.is_some() && std::env::var_os("THOR_TOKEN").is_some() {
        warn!("THOR_TOKEN is ignored: --credentials gives the credentials");
    }
    let credentials = source.read()?;
    check_peer_credentials(&args, &credentials)?;
    let auth = source.describe(&credentials);
    let config = protocol_config(&args, &credentials)?;
    // Certificates are read before anything is bound or opened: a bad file fails with nothing
    // made.
    let tls = server_tls(&args)?;
    if args.replica_id.is_some() {
        return crate::replica::run(args, source, credentials, config, tls);
    }
    let tls_mode = tls_mode(tls.as_ref());
    // Both addresses are bound before the database is opened or created: a bad address fails
    // with nothing made.
    let (listener, metrics) = bind(&args)?;
    // Before the engine opens, so that its latency histograms record into it.
    let recorder =
        metrics.as_ref().map(|_| crate::stats::MetricsServer::install_recorder()).transpose()?;
    let late = (!args.peers.is_empty() || !args.peer_groups.is_empty())
        .then(|| Arc::new(LatePeers::default()));
    let (engine, disk) = open_engine(&args, config, late.clone())?;
    let peers = match &late {
        Some(late) => start_peers(&args, &credentials, engine.server_id(), late)?,
        None => None,
    };
    let engine = Arc::new(engine);
    reload_on_hangup(source, Arc::downgrade(&engine), peers, args.peers.clone())?;
    let net = net_config(&args, tls);
    let (server, listening, socket_file) = match listener {
        Listener::Tcp(l) => {
            let server = Server::start_on(l, engine.clone(), net)?;
            let at = server.local_addr().to_string();
            (server, at, None)
        }
        Listener::Unix(l, path) => {
            (Server::start_unix_on(l, engine.clone(), net)?, args.listen.clone(), Some(path))
        }
    };
    let metrics = start_metrics(metrics, recorder, &engine)?;
    let watch = FailureWatch::start(Arc::downgrade(&engine))?;
    // "listening" is said once the signal handlers are in: a supervisor (or a test) that sends
    // SIGTERM as soon as it reads it gets a clean shutdown.
    server.wait_for_signal_after(|| {
        info!(
            "listening on {} (database {}, server id {}, {} KiB pages, authentication {}, TLS {}, at most {} connections, {} page cache, {} reads, commit mode {})",
            listening,
            args.dir.display(),
            engine.server_id().0,
            engine.page_size() / 1024,
            auth,
            tls_mode,
            args.max_connections,
            if engine.server_stats().page_cache_exclusive == 1 { "exclusive" } else { "inclusive" },
            if disk.direct_reads() { "direct (O_DIRECT)" } else { "buffered" },
            args.commit_mode,
        )
    })?;
    // The watcher goes first: it must hold no engine handle when the engine closes below.
    watch.stop();
    let failure = match engine.health() {
        thor_server::Health::Failed { cause, .. } => Some(cause),
        _ => None,
    };
    match &failure {
        Some(_) => info!("storage failed: shutting down"),
        None => info!("signal received: shutting down"),
    }
    server.shutdown()?;
    // The metrics endpoint holds an engine handle: it goes first, so that the engine below is
    // the last one and closing it checkpoints.
    if let Some(m) = metrics {
        m.shutdown();
    }
    if let Some(path) = socket_file
        && let Err(e) = std::fs::remove_file(&path)
    {
        warn!("cannot remove the socket file {}: {e}", path.display());
    }
    log_served(&engine, &disk);
    close_engine(engine);
    match failure {
        Some(cause) => Err(StorageFailed(cause).into()),
        None => Ok(()),
    }
}

/// The sessions' settings: the credentials, `--max-connections`, `--max-frame-mb`.
fn protocol_config(args: &ServerArgs, credentials: &Credentials) -> Result<ProtocolConfig> {
    let config = ProtocolConfig {
        credentials: credentials.clone(),
        sessions_max: args.max_connections,
        max_frame_bytes: args.max_frame_mb << 20,
        ..ProtocolConfig::default()
    };
    config.validate()?;
    Ok(config)
}

/// Starts the metrics endpoint on its bound listener (`--metrics-listen`), if any.
fn start_metrics(
    listener: Option<std::net::TcpListener>,
    recorder: Option<metrics_exporter_prometheus::PrometheusHandle>,
    engine: &Arc<Engine>,
) -> Result<Option<crate::stats::MetricsServer>> {
    let (Some(listener), Some(handle)) = (listener, recorder) else { return Ok(None) };
    let at = listener.local_addr()?;
    let m = crate::stats::MetricsServer::start(listener, engine.clone(), handle)?;
    info!("metrics on http://{at}/metrics (health on http://{at}/health)");
    Ok(Some(m))
}

/// Refuses credentials that would leave a peer unable to authenticate: a `--peer` without a
/// `peer:` line, or this server's own `peer:` line missing while it has peers.
pub(crate) fn check_peer_credentials(args: &ServerArgs, credentials: &Credentials) -> Result<()> {
    if let unknown @ [_, ..] = &unknown_peers(credentials, &args.peers)[..] {
        bail!(
            "the credentials have no peer: line for server(s) {unknown:?} given with --peer: they could not authenticate to this server"
        );
    }
    if let Some(me) = args.server_id
        && peer_token(credentials, ServerId(me)).is_none()
        && !args.peers.is_empty()
    {
        bail!(
            "the credentials have no peer:{me} line: this server could not authenticate to its peers"
        );
    }
    Ok(())
}

/// Binds `--listen` and `--metrics-listen`.
pub(crate) fn bind(args: &ServerArgs) -> Result<(Listener, Option<std::net::TcpListener>)> {
    let listener = match args.listen.strip_prefix("unix:") {
        Some(path) => {
            let path = PathBuf::from(path);
            let l = std::os::unix::net::UnixListener::bind(&path)
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            Listener::Unix(l, path)
        }
        None => Listener::Tcp(
            std::net::TcpListener::bind(&args.listen)
                .with_context(|| format!("cannot listen on {}", args.listen))?,
        ),
    };
    let metrics = match &args.metrics_listen {
        Some(a) => Some(
            std::net::TcpListener::bind(a)
                .with_context(|| format!("cannot listen for metrics on {a}"))?,
        ),
        None => None,
    };
    Ok((listener, metrics))
}

/// How the server's TLS is described in its "listening" line.
pub(crate) fn tls_mode(tls: Option<&thor_net::TlsServer>) -> &'static str {
    match tls {
        None => "off",
        Some(t) if t.requires_client_certificates() => "on, client certificates required",
        Some(_) => "on",
    }
}

/// The network configuration from the flags.
pub(crate) fn net_config(args: &ServerArgs, tls: Option<thor_net::TlsServer>) -> NetConfig {
    NetConfig {
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        worker_threads: args.net_threads,
        threading: match args.work_stealing {
            true => Threading::WorkStealing,
            false => Threading::PerThread,
        },
        handshake_timeout: Duration::from_secs(args.handshake_timeout_s),
        tls,
        ..NetConfig::default()
    }
}

/// Logs what the server served, at shutdown.
fn log_served(engine: &Engine, disk: &FileDisk) {
    let s = engine.server_stats();
    info!(
        "served {} sessions: {} requests, {} commits, {} fetches, {} protocol errors",
        s.sessions_opened, s.requests, s.commits, s.fetches, s.protocol_errors
    );
    if disk.direct_reads() {
        let d = disk.direct_read_stats();
        info!(
            "direct reads: {} ({} bytes asked, {} bytes read from the device)",
            d.reads, d.bytes, d.device_bytes
        );
    }
}

/// Closes the engine: its last handle checkpoints (installs the MOB, truncates the log).
fn close_engine(engine: Arc<Engine>) {
    // Every connection and the metrics endpoint are closed, so this is the last reference:
    // close checkpoints (installs the MOB, truncates the log) so that the next start replays
    // nothing.
    match Arc::try_unwrap(engine) {
        Ok(engine) => match engine.close() {
            Ok(()) => info!("checkpointed (the MOB is installed, the log truncated); stopped"),
            Err(e) => {
                warn!("checkpointing failed ({e}); the log will be replayed at the next start")
            }
        },
        Err(engine) => warn!(
            "{} other handles still hold the engine: stopping without the checkpoint; the log \
             will be replayed at the next start",
            Arc::strong_count(&engine) - 1
        ),
    }
}

/// A thread that waits for the engine's storage to fail, then (after
/// [`STORAGE_FAILURE_GRACE`]) sends this process SIGTERM, so that the server shuts down the
/// way it does on a signal. It holds an engine handle only for a look at its health, and
/// [`FailureWatch::stop`] ends it (at once, even during the grace) before the engine closes.
struct FailureWatch {
    /// Dropped to stop the thread: its waits are receives on the other end.
    stop: Option<std::sync::mpsc::Sender<()>>,
    /// The thread.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FailureWatch {
    fn start(engine: std::sync::Weak<Engine>) -> Result<FailureWatch> {
        use std::sync::mpsc::RecvTimeoutError::Timeout;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread =
            std::thread::Builder::new().name("thor-failure-watch".into()).spawn(move || {
                loop {
                    if !matches!(stopped.recv_timeout(HEALTH_POLL), Err(Timeout)) {
                        return;
                    }
                    let Some(e) = engine.upgrade() else { return };
                    let failed = matches!(e.health(), thor_server::Health::Failed { .. });
                    drop(e);
                    if failed {
                        break;
                    }
                }
                warn!(
                    "the server exits in {} s (status {EXIT_STORAGE_FAILED}) so that its \
                     supervisor restarts it once the disk is repaired",
                    STORAGE_FAILURE_GRACE.as_secs()
                );
                if matches!(stopped.recv_timeout(STORAGE_FAILURE_GRACE), Err(Timeout)) {
                    // SAFETY: kill(2) with this process's own pid and SIGTERM has no memory
                    // effects; the server's signal handler turns it into a graceful shutdown.
                    unsafe {
                        libc::kill(libc::getpid(), libc::SIGTERM);
                    }
                }
            })?;
        Ok(FailureWatch { stop: Some(stop), thread: Some(thread) })
    }

    /// Ends the thread and waits for it.
    fn stop(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            warn!("the failure watcher panicked");
        }
    }
}
