//! thor: a transactional, persistent object store. This is the crate a program depends on.
//!
//! A program keeps its data as a graph of small typed objects that outlives it. It declares
//! its classes with [`class!`], and works in transactions through a [`Session`]. A session
//! caches objects and ships the changed ones to a server at commit. The server validates the
//! commit and makes it durable before it answers. There are two ways to reach a store:
//!
//! - [`open`]: the **embedded** store. A database directory runs in this process, on the same
//!   engine `thor server` runs. [`Database`] does the same and makes more sessions, one per
//!   thread.
//! - [`connect`]: a **server** (`thor server --dir DB --listen ADDR --create`) over TCP,
//!   shared by many processes; [`connect_tls`] over TLS, to a server started with
//!   `--tls-cert` and `--tls-key` ([`TlsClient`] says which CA to trust, and which client
//!   certificate to present if the server requires one); [`connect_group`] to a server that
//!   is a replica group (`1=db1:7400,2=db2:7400,3=db3:7400`), whose leader the session finds
//!   and follows by itself.
//!
//! Either way the result is a [`Session`], with the defaults the `thor` command uses
//! ([`SessionConfig::default`]: a 64 MiB client cache managed by HAC).
//!
//! A session with a server never waits for ever (connect, request and commit timeouts in
//! [`SessionConfig`]) and survives a broken connection: it reconnects by itself, keeps the
//! cached objects the server vouches for, reports the transaction that was open as a
//! conflict ([`ConflictCause::Disconnected`], which [`Session::run`] retries) and learns what
//! became of a commit whose answer was lost ([`ClientError::CommitUnknown`] only when nobody
//! can tell; [`Session::commit_outcome`]). `docs/guide.md` ("When the connection breaks")
//! says what a program sees.
//!
//! ```
//! thor::class! {
//!     /// A counter.
//!     pub class Counter("demo.Counter") { value: u64 }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("counters");
//! let s = thor::open(&path)?;
//! // One transaction creates the counter and points root slot 0 at it.
//! s.run(|s| {
//!     let c = s.create_fixed::<Counter>()?;
//!     s.set_root(0, c.as_ref())
//! })?;
//! // Another adds one. `run` commits, and runs the closure again after a conflict.
//! let n = s.run(|s| {
//!     let c = s.get(s.root::<Counter>(0)?)?;
//!     c.set(Counter::value, c.get(Counter::value) + 1)?;
//!     Ok::<_, thor::ClientError>(c.get(Counter::value))
//! })?;
//! assert_eq!(n, 1);
//! # Ok(()) }
//! ```
//!
//! # What is here
//!
//! - Reaching a store: [`open`], [`open_read_only`], [`Database`], [`connect`],
//!   [`connect_with`], [`connect_tls`], [`connect_tls_with`] and [`TlsClient`]; a replicated
//!   server: [`connect_group`], [`connect_group_with`]; several servers: [`connect_cluster`],
//!   [`Cluster`], [`ServerId`].
//! - Declaring classes: [`class!`]; [`Ref`] (a typed reference, stored in fields and root
//!   slots); the built-in classes [`Refs`] (a collection of references), [`Bytes`],
//!   [`Large`] and [`Any`]; the [`Class`] trait, for code generic over classes.
//! - Values besides numbers and references: `bool` and `Option` fields, strings ([`Str`],
//!   [`View::set_str`], [`View::get_str`]) and growable sequences ([`Seq`],
//!   [`Session::create_seq`], [`Session::seq`], [`SeqView`]).
//! - Transactions: [`Session`] (`get`, `create`, `root`, `set_root`, `commit`, `abort`, and
//!   [`Session::run`], which commits and retries on conflicts); [`View`], a pinned view of an
//!   object that reads its fields straight from the cache; [`SessionConfig`],
//!   [`PolicyConfig`].
//! - Changing a class: [`Upgrade`] rewrites a closed database into a new directory with
//!   fields appended to classes (and its garbage dropped); [`UpgradeReport`] says what it did.
//! - Errors: [`Error`] (opening, connecting, closing, and a session's), [`ClientError`] (a
//!   session's: what `run`'s closure returns), [`ConflictCause`] and [`TransportError`].
//!
//! The crates below (`thor-client`, `thor-net`, `thor-server`, ...) are the implementation;
//! `ARCHITECTURE.md` maps them.
//!
//! # Features
//!
//! `embedded` (default): [`open`], [`Database`] and [`Upgrade`]. It links the server engine and its storage.
//! A program that only connects to servers can turn it off (`default-features = false`) and
//! link neither the engine nor tokio.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! Orefs (`ids.rs`: 22-bit page id, 9-bit oid, a spare bit that clients use for swizzled references
//! and commits use for references to objects created in the same transaction), the page layout with
//! its offset table (`page.rs`), class descriptors and the object layout (`class.rs`), the built-in
//! classes and the root object in page 1 (`class::builtin`), values larger than a page as trees
//! (`large.rs`), CRC-32C (`checksum.rs`) and the format bounds (`limits.rs`).
//!
//! *Architecture Invariant:* no I/O, no clock. Decoding untrusted bytes never panics: every
//! malformation is a `FormatError` (property-tested on random and bit-flipped pages).
//!
//! *Architecture Invariant:* objects in a page are contiguous and in oid order, so sizes are never
//! stored; installing a version of a different size repacks the page without changing orefs.
//! Unused page bytes are zero, so equal contents give equal bytes.
//!
//! *Architecture Invariant:* one definition of a word that names a stored object:
//! `Oref::object` (spare bit clear, page id in `1..=PAGE_ID_MAX`; `NotAnObject` says why not).
//! The wire decoder and encoders, the server core's validation and the log-record decoder of
//! recovery and `thor check` all use it, so what the wire admits, the core acknowledges and
//! recovery reads back are the same set (issue 30; `thor_sim::acked` checks it).
//!
//! *API Boundary:* `Oref` (`object`, `check_object`, `names_object`), `NotAnObject`, `PageId`, `PageView` (checked read-only view; `PageView::object_in`
//! reads one object with only the checks that needs; `PageView::slot_count_in` the header's slot
//! count, for a page checked whole when it was read), `PageMut` (append, apply
//! versions, seal), `ClassDesc` (`extends`, `extended_by`: a stored class a narrower declaration
//! may read), `builtin`, `large::{encode, read, pieces_below_root}` (`read`
//! fetches at most the pieces the root's length needs, within the caller's limit).

#[cfg(feature = "embedded")]
mod embedded;
mod error;
#[cfg(feature = "embedded")]
mod upgrade;

use std::net::ToSocketAddrs;

#[cfg(feature = "embedded")]
pub use embedded::Database;
pub use error::Error;
/// What [`check`] found, and why it could not check.
#[cfg(feature = "embedded")]
pub use thor_admin::check::{CheckError, Report as CheckReport};
pub use thor_client::class;
/// A server's id: names a server of a [`Cluster`] (`thor server --server-id`).
pub use thor_client::thor_core::ServerId;
pub use thor_client::{
    Any, Bytes, Class, ClientError, ClientStats, Cluster, ClusterStats, CommitInfo, CommitOutcome,
    ConflictCause, Connector, Dialer, Elem, GroupConnector, GroupDialer, Large, PolicyConfig,
    ReconnectConfig, ReconnectStats, Ref, Refs, Replica, ReplicaDialer, SCHEMA_SLOT, Seq, SeqView,
    ServerAddr, Session, SessionConfig, Str, Surrogate, View, XRef, max_str_bytes,
};
/// The persistent ordered map (`thor_client::map`, the guide's "Collections").
pub use thor_client::{KeyEncode, Map, MapIter, MapKey, MapValue, MapView, PrefixKey};
pub use thor_net::{TlsClient, TlsError};
/// Whether an embedded database serves, serves read-only, or has failed ([`Database::health`]).
#[cfg(feature = "embedded")]
pub use thor_server::Health;
/// A connection to a server, for a [`Connector`] or [`Dialer`] of the program's own.
pub use thor_wire::Transport;
pub use thor_wire::{BackupInfo, TransportError};
#[cfg(feature = "embedded")]
pub use upgrade::{ClassUpgrade, Incompatibility, Upgrade, UpgradeError, UpgradeReport};

/// Opens the embedded database in directory `path`, creating it if absent, and returns a
/// session on it. This is [`Database::open`] followed by [`Database::session`]. The session
/// keeps the database open; when the session is dropped (or [`Session::close`]d), the database
/// closes. Closing installs everything into the page file and truncates the log, so the next
/// open replays nothing. For more than one session, or to see whether closing succeeded, use
/// [`Database`].
///
/// Fails with [`Error::Locked`] if the database is open elsewhere (in another process, or in
/// this one), [`Error::NotADirectory`] if `path` is a file, [`Error::NotADatabase`] if it is a
/// directory that holds other files.
#[cfg(feature = "embedded")]
pub fn open(path: impl AsRef<std::path::Path>) -> Result<Session, Error> {
    Database::open(path)?.session()
}

/// Opens the embedded database in directory `path` to read it, writing nothing to the
/// directory, and returns a session on it: [`Database::open_read_only`] followed by
/// [`Database::session`]. Its transactions read the committed state; a commit that writes is
/// refused. Works on a full disk or a read-only mount, beside other readers.
///
/// Fails with [`Error::Locked`] if the database is open read-write, [`Error::NotADatabase`]
/// if the directory holds none (nothing is created).
#[cfg(feature = "embedded")]
pub fn open_read_only(path: impl AsRef<std::path::Path>) -> Result<Session, Error> {
    Database::open_read_only(path)?.session()
}

/// Checks the closed database in directory `path` offline, as `thor check` does: every page,
/// object and reference of the committed state, and the log from the checkpoint on. Nothing is
/// written; the directory is shared with other readers, and a database open read-write is
/// refused ([`CheckError::InUse`]).
///
/// `Ok` whatever the database holds: [`CheckReport::is_healthy`] says whether it is
/// consistent, [`CheckReport::problems`] where it is not (page and oid, or log segment, offset
/// and LSN). `Err` when it cannot be checked at all (not a database, in use, an I/O error).
/// The module documentation of `thor_admin::check` says what is checked.
#[cfg(feature = "embedded")]
pub fn check(path: impl AsRef<std::path::Path>) -> Result<CheckReport, CheckError> {
    thor_admin::check(path.as_ref(), &thor_admin::CheckOptions::default(), &thor_admin::NoProgress)
}

/// Connects to a thor server (`thor server --listen ADDR`) and opens a session, with the
/// defaults the `thor` command uses. `token` is the secret the server was started with
/// (`--token-file` or `THOR_TOKEN`); give an empty one (`""`) for a server without one.
///
/// Fails with [`Error::Connect`] if nothing answers at `addr` within the connect timeout
/// ([`SessionConfig::connect_timeout`]: a stopped server, or one that accepts and never
/// answers, fails with [`TransportError::TimedOut`]), or if the server refuses the session
/// ([`TransportError::Refused`]: a wrong token, too many connections). Once connected, the
/// session reconnects to `addr` by itself when the connection breaks.
pub fn connect(
    addr: impl ToSocketAddrs + std::fmt::Debug,
    token: impl AsRef<[u8]>,
) -> Result<Session, Error> {
    connect_with(addr, token, SessionConfig::default())
}

/// The transport settings the `thor` command uses, with `token` and the session's timeouts.
fn client_config(token: &[u8], config: &SessionConfig) -> thor_net::ClientConfig {
    thor_net::ClientConfig {
        token: token.to_vec(),
        connect_timeout: config.connect_timeout,
        io_timeout: config.request_timeout,
        ..thor_net::ClientConfig::default()
    }
}

/// The facade's error for a session that could not be made: a transport's failure is a
/// failure to connect to `addr`.
fn connect_error(addr: String, e: ClientError) -> Error {
    match e {
        ClientError::Transport(source) => Error::Connect { addr, cause: source },
        e => Error::Client(e),
    }
}

/// [`connect`] with session settings of the caller's: cache size and manager, retries,
/// timeouts ([`SessionConfig::connect_timeout`], [`SessionConfig::request_timeout`],
/// [`SessionConfig::commit_timeout`]) and reconnecting ([`SessionConfig::reconnect`]).
///
/// `addr` is resolved once; each reconnect attempt tries its addresses, starting from the
/// next one each time (so a name with several addresses spreads the attempts over them).
pub fn connect_with(
    addr: impl ToSocketAddrs + std::fmt::Debug,
    token: impl AsRef<[u8]>,
    config: SessionConfig,
) -> Result<Session, Error> {
    // `"host:port"` shows as itself, a socket address as itself; anything else (a tuple, a
    // slice) as the addresses it resolved to.
    let debug = format!("{addr:?}");
    let addrs: Vec<std::net::SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| {
            let addr = debug.trim_matches('"').to_string();
            Error::Connect { addr, cause: TransportError::Io(e) }
        })?
        .collect();
    let shown = match debug.strip_prefix('"').and_then(|d| d.strip_suffix('"')) {
        Some(name) => name.to_string(),
        None if debug.parse::<std::net::SocketAddr>().is_ok() => debug,
        None => addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
    };
    let client = client_config(token.as_ref(), &config);
    let dialer: Dialer = Box::new(move |attempt| {
        let start = attempt as usize % addrs.len().max(1);
        let order: Vec<std::net::SocketAddr> =
            addrs[start..].iter().chain(&addrs[..start]).copied().collect();
        let t = thor_net::TcpTransport::connect(&order[..], &client)?;
        Ok(Box::new(t) as Box<dyn thor_wire::Transport>)
    });
    Session::connect(dialer, config).map_err(|e| connect_error(shown, e))
}

/// Connects to a thor server that is a replica group and opens a session, with the defaults
/// the `thor` command uses. `group` lists the replicas as `ID=HOST:PORT` separated by commas,
/// the ids `thor server --replica-id` was given (`"1=db1:7400,2=db2:7400,3=db3:7400"`); one
/// `HOST:PORT` is taken as a group of one replica, id 0 ([`ServerAddr::parse`]).
///
/// The session connects to the group's leader: a replica that does not lead answers
/// `NotLeader` naming the leader it knows, and the session goes there (else to the next
/// replica, with backoff). When the leader dies or loses its group, the session finds the new
/// one and resumes there by itself, as [`connect`]'s session does after a broken connection
/// (the open transaction reported as a [`ConflictCause::Disconnected`] conflict, a commit
/// whose answer was lost learned at the new leader). [`Session::replica`] says which replica
/// serves, [`Session::reconnect_stats`] counts `redirects` and `failovers`. Fails with
/// [`Error::BadAddress`] if `group` cannot be read, [`Error::Connect`] if an address does not
/// resolve, and [`ClientError::NoLeader`] (as [`Error::Client`]) if no replica served within
/// [`ReconnectConfig::give_up_after`] (a minute by default).
///
/// ```no_run
/// # fn main() -> Result<(), thor::Error> {
/// let s = thor::connect_group("1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403", "secret")?;
/// println!("served by replica {:?}", s.replica());
/// # Ok(()) }
/// ```
pub fn connect_group(group: &str, token: impl AsRef<[u8]>) -> Result<Session, Error> {
    connect_group_with(group, token, SessionConfig::default(), None)
}

/// [`connect_group`] with session settings of the caller's, and over TLS with `tls` if given
/// (each replica's certificate must name its host, as for [`connect_tls`]).
pub fn connect_group_with(
    group: &str,
    token: impl AsRef<[u8]>,
    config: SessionConfig,
    tls: Option<&TlsClient>,
) -> Result<Session, Error> {
    let replicas = match ServerAddr::parse(group) {
        Ok(ServerAddr::Group(r)) => r,
        Ok(ServerAddr::One(a)) => vec![(0, a)],
        Err(why) => return Err(Error::BadAddress { addr: group.to_string(), why }),
    };
    let client = client_config(token.as_ref(), &config);
    let mut dialers = Vec::with_capacity(replicas.len());
    for (id, addr) in replicas {
        dialers.push(Replica { id, dial: replica_dialer(&addr, &client, tls)? });
    }
    let dialer = GroupDialer::new(dialers).map_err(Error::Client)?;
    Session::connect_group(dialer, config).map_err(|e| connect_error(group.to_string(), e))
}

/// Opens a connection to one address (the handshake included).
type Dial = ReplicaDialer;

/// A dialer of `addr` (`HOST:PORT`, resolved once now): over TLS with `tls`, else TCP.
fn replica_dialer(
    addr: &str,
    client: &thor_net::ClientConfig,
    tls: Option<&TlsClient>,
) -> Result<Dial, Error> {
    let client = client.clone();
    if let Some(tls) = tls {
        let (at, tls) = (addr.to_owned(), tls.clone());
        return Ok(Box::new(move || {
            let t = thor_net::TlsTransport::connect(&at, &client, &tls)?;
            Ok(Box::new(t) as Box<dyn Transport>)
        }));
    }
    let resolved: Vec<std::net::SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::Connect { addr: addr.to_owned(), cause: TransportError::Io(e) })?
        .collect();
    Ok(Box::new(move || {
        let t = thor_net::TcpTransport::connect(&resolved[..], &client)?;
        Ok(Box::new(t) as Box<dyn Transport>)
    }))
}

/// Connects to a thor server over TLS (`thor server --tls-cert PEM --tls-key PEM`) and opens a
/// session, with the defaults the `thor` command uses. The server's certificate must be signed
/// by a CA `tls` trusts and name the host of `addr` (`HOST:PORT`; an IP address is checked
/// against the certificate's IP addresses), or the name given with
/// [`TlsClient::with_server_name`]. The token travels encrypted.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ca = std::fs::read("ca.pem")?;
/// let tls = thor::TlsClient::from_ca_pem(&ca)?;
/// let session = thor::connect_tls("db.example:7400", std::env::var("THOR_TOKEN")?, &tls)?;
/// # drop(session); Ok(()) }
/// ```
///
/// For a server started with `--tls-client-ca`, give the client's certificate and key too:
/// [`TlsClient::with_identity_pem`]. Fails with [`Error::Connect`] as [`connect`] does, and
/// when the TLS handshake fails ([`TransportError::Io`]: the server's certificate is not
/// trusted or does not name the host, or the server refused the client's certificate). Once
/// connected, the session reconnects (over TLS, to `addr`) by itself when the connection
/// breaks, as [`connect`]'s does.
pub fn connect_tls(addr: &str, token: impl AsRef<[u8]>, tls: &TlsClient) -> Result<Session, Error> {
    connect_tls_with(addr, token, tls, SessionConfig::default())
}

/// [`connect_tls`] with session settings of the caller's.
pub fn connect_tls_with(
    addr: &str,
    token: impl AsRef<[u8]>,
    tls: &TlsClient,
    config: SessionConfig,
) -> Result<Session, Error> {
    let client = client_config(token.as_ref(), &config);
    let (at, tls) = (addr.to_owned(), tls.clone());
    let dialer: Dialer = Box::new(move |_attempt| {
        let t = thor_net::TlsTransport::connect(&at, &client, &tls)?;
        Ok(Box::new(t) as Box<dyn thor_wire::Transport>)
    });
    Session::connect(dialer, config).map_err(|e| connect_error(addr.to_owned(), e))
}

/// Opens a [`Cluster`] over several servers (`thor server --server-id N --peer ...`, each
/// told of the others): `servers` gives each server's id and `HOST:PORT`, or its replica
/// group as [`connect_group`] takes it (`ID=HOST:PORT,...`: that server's session follows its
/// group's leader); the first is the home server, whose root [`Cluster::root`] reads. `token` is presented to every server. A
/// session to a server is opened on first use, and reconnects by itself as [`connect`]'s
/// does; a transaction that used several servers commits at all of them or none
/// (two-phase commit).
///
/// ```no_run
/// # fn main() -> Result<(), thor::Error> {
/// let c = thor::connect_cluster(&[(1, "127.0.0.1:7401"), (2, "127.0.0.1:7402")], "secret")?;
/// let home = c.session(thor::ServerId(1))?;
/// # drop(home); Ok(()) }
/// ```
///
/// Fails with [`Error::Connect`] if an address does not resolve; a server that does not answer
/// fails the first operation that needs it ([`ClientError::Transport`]), and one that answers
/// with another id than `servers` gives it fails with [`ClientError::WrongServer`].
pub fn connect_cluster(servers: &[(u32, &str)], token: impl AsRef<[u8]>) -> Result<Cluster, Error> {
    connect_cluster_with(servers, token, SessionConfig::default(), None)
}

/// [`connect_cluster`] with session settings of the caller's (each server's session gets
/// them: its own cache of `config.cache_bytes`), and over TLS with `tls` if given.
pub fn connect_cluster_with(
    servers: &[(u32, &str)],
    token: impl AsRef<[u8]>,
    config: SessionConfig,
    tls: Option<&TlsClient>,
) -> Result<Cluster, Error> {
    let Some(&(home, _)) = servers.first() else {
        return Err(Error::Client(ClientError::Usage("a cluster needs at least one server")));
    };
    let parsed: Vec<(u32, ServerAddr)> = servers
        .iter()
        .map(|&(id, addr)| match ServerAddr::parse(addr) {
            Ok(a) => Ok((id, a)),
            Err(why) => Err(Error::BadAddress { addr: addr.to_owned(), why }),
        })
        .collect::<Result<_, _>>()?;
    if parsed.iter().any(|(_, a)| matches!(a, ServerAddr::Group(_))) {
        return cluster_of_groups(&parsed, token.as_ref(), config, tls);
    }
    let mut addrs = Vec::with_capacity(servers.len());
    for &(id, addr) in servers {
        let resolved: Vec<std::net::SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| Error::Connect { addr: addr.to_owned(), cause: TransportError::Io(e) })?
            .collect();
        addrs.push((ServerId(id), addr.to_owned(), resolved));
    }
    let client = client_config(token.as_ref(), &config);
    let tls = tls.cloned();
    let connect: Connector = Box::new(move |id: ServerId| {
        let Some((_, name, resolved)) = addrs.iter().find(|(s, _, _)| *s == id) else {
            return Err(ClientError::UnknownServer(id.0));
        };
        let t: Box<dyn Transport> = match &tls {
            Some(tls) => Box::new(thor_net::TlsTransport::connect(name, &client, tls)?),
            None => Box::new(thor_net::TcpTransport::connect(&resolved[..], &client)?),
        };
        Ok(t)
    });
    let ids: Vec<ServerId> = servers.iter().map(|&(id, _)| ServerId(id)).collect();
    Ok(Cluster::new(&ids, ServerId(home), connect, config)?)
}

/// [`connect_cluster_with`] where some server is a replica group: one dialer per replica (a
/// server that is no group: one for the server), and [`Cluster::with_groups`].
fn cluster_of_groups(
    servers: &[(u32, ServerAddr)],
    token: &[u8],
    config: SessionConfig,
    tls: Option<&TlsClient>,
) -> Result<Cluster, Error> {
    let client = client_config(token, &config);
    let mut dials: Vec<(ServerId, Option<u64>, Dial)> = Vec::new();
    let mut groups = Vec::with_capacity(servers.len());
    for (id, addr) in servers {
        let server = ServerId(*id);
        match addr {
            ServerAddr::One(a) => {
                dials.push((server, None, replica_dialer(a, &client, tls)?));
                groups.push((server, Vec::new()));
            }
            ServerAddr::Group(replicas) => {
                for (r, a) in replicas {
                    dials.push((server, Some(*r), replica_dialer(a, &client, tls)?));
                }
                groups.push((server, replicas.iter().map(|(r, _)| *r).collect()));
            }
        }
    }
    let connect: GroupConnector = Box::new(move |server, replica| {
        match dials.iter_mut().find(|(s, r, _)| *s == server && *r == replica) {
            Some((_, _, dial)) => dial(),
            None => Err(ClientError::UnknownServer(server.0)),
        }
    });
    let home = groups[0].0;
    Ok(Cluster::with_groups(&groups, home, connect, config)?)
}

/// Connects to a thor server on the same machine through its Unix-domain socket
/// (`thor server --listen unix:PATH`), which skips TCP's loopback path; otherwise as
/// [`connect`].
#[cfg(unix)]
pub fn connect_unix(
    path: impl AsRef<std::path::Path>,
    token: impl AsRef<[u8]>,
) -> Result<Session, Error> {
    connect_unix_with(path, token, SessionConfig::default())
}

/// [`connect_unix`] with session settings of the caller's.
#[cfg(unix)]
pub fn connect_unix_with(
    path: impl AsRef<std::path::Path>,
    token: impl AsRef<[u8]>,
    config: SessionConfig,
) -> Result<Session, Error> {
    let client = client_config(token.as_ref(), &config);
    let path = path.as_ref().to_path_buf();
    let shown = format!("unix:{}", path.display());
    let dialer: Dialer = Box::new(move |_attempt| {
        let t = thor_net::UnixTransport::connect(&path, &client)?;
        Ok(Box::new(t) as Box<dyn thor_wire::Transport>)
    });
    Session::connect(dialer, config).map_err(|e| connect_error(shown, e))
}

/// The README's Rust examples, compiled and run as doc tests (`cargo test -p thor --doc`), so
/// that what the README shows works.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The user guide's Rust examples (`docs/guide.md`), compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
pub struct GuideDoctests;
