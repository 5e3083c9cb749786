//! `thor server`: serve one database over TCP until Ctrl-C or SIGTERM.
//!
//! ```text
//! thor server --dir DIR --listen ADDR [--create] [--page-kb K] [--token-file F] [--direct-io]
//!             [--server-id N] [--peer ID=HOST:PORT ...] [--prefetch-max N]
//! ```
//!
//! Several servers form a cluster: each has its own directory and id (`--server-id` when it is
//! created; the id is stored) and is told where the others listen (`--peer`, once per other
//! server), so that two-phase commit's messages reach them. Every server of a cluster uses the
//! same token, which also admits the servers' sessions to each other.
//!
//! `--listen unix:PATH` serves a Unix-domain socket instead of TCP (`thor_net::UnixTransport`
//! connects to it).
//!
//! The token comes from `--token-file` (the file's bytes, without a trailing newline) or else
//! from the `THOR_TOKEN` environment variable; with neither, clients need no token. On a signal
//! the server stops accepting, answers the requests in flight, closes every connection, installs
//! the MOB into the page file (so that the next start has no log to replay) and exits.
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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use thor_net::{NetConfig, Server, Threading};
use thor_server::limits::SESSIONS_MAX_DEFAULT;
use thor_server::{Engine, EngineError, EngineOptions, ProtocolConfig};
use thor_storage::FileDisk;
use tracing::{info, warn};

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
    dir: PathBuf,
    /// The address to listen on: HOST:PORT for TCP (port 0 picks a free port), or
    /// unix:PATH for a Unix-domain socket created at PATH, for clients on this machine (it
    /// skips TCP's loopback path; the file must not exist, and is removed at shutdown).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// Create the database if the directory holds none.
    #[arg(long)]
    create: bool,
    /// Page size in KiB of a database created now (a power of two from 1 to 32).
    #[arg(long, value_parser = crate::page_kb, allow_negative_numbers = true, default_value_t = 8)]
    page_kb: usize,
    /// A file holding the token clients must present (default: $THOR_TOKEN, else none).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Most client connections at once; more are refused with a Busy error.
    #[arg(long, default_value_t = SESSIONS_MAX_DEFAULT)]
    max_connections: usize,
    /// The largest request frame a client may send, in MiB.
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 64)]
    max_frame_mb: usize,
    /// Seconds a connection may wait between requests before it is closed.
    #[arg(long, default_value_t = 300)]
    idle_timeout_s: u64,
    /// Serve the server's counters to Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9400).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// The directory `thor backup --server` writes backups into (each under the name the
    /// client gives). Without it the server takes no backups over the network.
    #[arg(long)]
    backup_dir: Option<PathBuf>,
    /// The page cache's size in MiB.
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true)]
    page_cache_mb: Option<f64>,
    /// Where pages clients read go in the page cache: inclusive (LRU: the page becomes the
    /// most recently used) or exclusive (DEMOTE: it goes next, since the client holds it).
    #[arg(long, value_enum, default_value = "inclusive")]
    page_cache: PageCacheMode,
    /// Read the database's files with direct I/O (O_DIRECT), around the operating system's
    /// page cache, so that a page the server's page cache misses is a real device read (for
    /// experiments such as DEMOTE; slower otherwise). Writes stay buffered. Needs a file system
    /// that supports O_DIRECT, such as ext4 or xfs; one that refuses it is an error at start.
    #[arg(long)]
    direct_io: bool,
    /// The id of a database created now (objects at other servers name it). An existing
    /// database keeps its id; giving a different one is an error.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    server_id: Option<u32>,
    /// Where another server of the cluster listens, as ID=HOST:PORT (repeat for each). Needed
    /// for transactions that use several servers (two-phase commit between them).
    #[arg(long = "peer", value_parser = parse_peer)]
    peers: Vec<(u32, std::net::SocketAddr)>,
    /// How commits are made recoverable: obj (thor's own: objects shipped, logged, kept in the
    /// MOB) or one of the QuickStore recovery study's page-based modes: pd-redo, pd-esm,
    /// sd-esm, sl-esm (clients diff pages against a recovery buffer and ship page records, and
    /// in the ESM modes the dirty pages too), wpl (clients ship the dirty pages whole and the
    /// server logs them whole). Clients follow the server's mode.
    #[arg(long, default_value = "obj", value_parser = parse_commit_mode)]
    commit_mode: thor_wire::CommitMode,
    /// Most further pages the server adds to one prefetch reply, whatever a client asks
    /// (0: prefetch off at this server; every `Prefetch` gets its page alone).
    #[arg(long, default_value_t = thor_wire::limits::PREFETCH_PAGES_MAX)]
    prefetch_max: usize,
    /// Threads serving connections (0: one per core).
    #[arg(long, default_value_t = 0)]
    net_threads: usize,
    /// Serve connections on tokio's work-stealing runtime instead of a single-threaded runtime
    /// per thread (the default, which answers a fetch without waking another thread).
    #[arg(long)]
    work_stealing: bool,
}

/// `--peer ID=HOST:PORT`.
pub(crate) fn parse_peer(s: &str) -> Result<(u32, std::net::SocketAddr), String> {
    let (id, addr) = s.split_once('=').ok_or("expected ID=HOST:PORT, e.g. 2=127.0.0.1:7401")?;
    let id: u32 = id.trim().parse().map_err(|_| format!("server id {id:?} is not a number"))?;
    if id == 0 {
        return Err("server ids start at 1".into());
    }
    use std::net::ToSocketAddrs;
    let addr = addr
        .trim()
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} names no address"))?;
    Ok((id, addr))
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

fn token(args: &ServerArgs) -> Result<Vec<u8>> {
    let mut t = match &args.token_file {
        Some(f) => std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
        None => std::env::var("THOR_TOKEN").map(String::into_bytes).unwrap_or_default(),
    };
    while t.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        t.pop();
    }
    if args.token_file.is_some() && t.is_empty() {
        bail!("the token file is empty (omit --token-file to run without authentication)");
    }
    Ok(t)
}

/// Opens the database; returns the engine and (a clone of) its disk, whose direct-read
/// counters are the engine's.
fn open_engine(args: &ServerArgs, protocol: ProtocolConfig) -> Result<(Engine, FileDisk)> {
    let peers = if args.peers.is_empty() {
        None
    } else {
        let addrs: std::collections::HashMap<_, _> =
            args.peers.iter().map(|&(id, a)| (thor_core::ServerId(id), a)).collect();
        let cfg = thor_net::ClientConfig {
            token: protocol.token.clone(),
            client_name: format!("thor server at {}", args.listen),
            ..thor_net::ClientConfig::default()
        };
        let p: Arc<dyn thor_server::PeerSink> = thor_net::TcpPeers::start(&addrs, &cfg)?;
        Some(p)
    };
    let opts = EngineOptions {
        page_size: args.page_kb * 1024,
        server_id: thor_core::ServerId(args.server_id.unwrap_or(1)),
        peers,
        protocol,
        backup_dir: args.backup_dir.clone(),
        page_cache_bytes: args
            .page_cache_mb
            .map_or(EngineOptions::default().page_cache_bytes, |mb| (mb * 1048576.0) as usize),
        page_cache_mode: match args.page_cache {
            PageCacheMode::Inclusive => thor_server::pagecache::CacheMode::Inclusive,
            PageCacheMode::Exclusive => thor_server::pagecache::CacheMode::Exclusive,
        },
        commit_mode: args.commit_mode,
        prefetch_pages_max: args.prefetch_max,
        ..EngineOptions::default()
    };
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

/// `--create` makes a database only where `thor::open` would: a missing or empty directory,
/// or one holding a database (opened as it is) or what a creation cut short leaves (the page
/// file, the superblock's temporary file, the lock file). A directory holding anything else is
/// someone else's: refused, naming a file, before anything is written.
fn refuse_foreign_dir(dir: &std::path::Path) -> Result<()> {
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
enum Listener {
    /// `--listen HOST:PORT`.
    Tcp(std::net::TcpListener),
    /// `--listen unix:PATH`, with the path (removed at shutdown).
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

pub fn run(args: ServerArgs) -> Result<()> {
    let token = token(&args)?;
    let config = ProtocolConfig {
        token,
        sessions_max: args.max_connections,
        max_frame_bytes: args.max_frame_mb << 20,
    };
    config.validate()?;
    let auth = !config.token.is_empty();
    // Both addresses are bound before the database is opened or created: a bad address fails
    // with nothing made.
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
    // Before the engine opens, so that its latency histograms record into it.
    let recorder = match &metrics {
        Some(_) => Some(crate::stats::MetricsServer::install_recorder()?),
        None => None,
    };
    let (engine, disk) = open_engine(&args, config)?;
    let engine = Arc::new(engine);
    let net = NetConfig {
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        worker_threads: args.net_threads,
        threading: match args.work_stealing {
            true => Threading::WorkStealing,
            false => Threading::PerThread,
        },
        ..NetConfig::default()
    };
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
    let metrics = match (metrics, recorder) {
        (Some(listener), Some(handle)) => {
            let at = listener.local_addr()?;
            let m = crate::stats::MetricsServer::start(listener, engine.clone(), handle)?;
            info!("metrics on http://{at}/metrics (health on http://{at}/health)");
            Some(m)
        }
        _ => None,
    };
    let watch = FailureWatch::start(Arc::downgrade(&engine))?;
    // "listening" is said once the signal handlers are in: a supervisor (or a test) that sends
    // SIGTERM as soon as it reads it gets a clean shutdown.
    server.wait_for_signal_after(|| {
        info!(
            "listening on {} (database {}, server id {}, {} KiB pages, authentication {}, at most {} connections, {} page cache, {} reads, commit mode {})",
            listening,
            args.dir.display(),
            engine.server_id().0,
            engine.page_size() / 1024,
            if auth { "on" } else { "off" },
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
    match failure {
        Some(cause) => Err(StorageFailed(cause).into()),
        None => Ok(()),
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
