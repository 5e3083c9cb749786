//! thor-net: thor's network edge — the only crate with sockets.
//!
//! - [`client`]: [`TcpTransport`], the synchronous client transport (`std::net`, one blocking
//!   socket per session, `TCP_NODELAY`), which opens its session with `Hello` on connect.
//!   Always built; it depends on the wire protocol only.
//! - [`server`] (feature `server`): the tokio TCP server around the server core's embedded
//!   driver (`thor_server::Engine`): one task per connection and a frame reader beside it,
//!   per-connection and server-wide frame limits, idle and frame timeouts, graceful shutdown,
//!   disk reads on the blocking pool. [`Server`] runs it on a runtime of its own for synchronous
//!   programs (`thor server`, tests, benchmarks); [`serve`] runs it on yours.
//! - [`local`] (feature `server`): [`LocalTransport`], the in-process transport that steps the
//!   engine's core directly.
//! - [`tls`]: TLS settings ([`TlsServer`], [`TlsClient`]) for the server's accept path, the
//!   blocking [`TlsTransport`] and the peers' connections (rustls with the `ring` provider).
//! - [`peers`] (feature `server`): [`TcpPeers`], how a server sends two-phase commit's messages
//!   to the other servers (a thread, a bounded queue and a client session per peer).
//! - [`replicas`] (feature `server`): [`TcpReplicas`], the links between the replicas of a
//!   replica group (Raft's messages, a thread and a bounded queue per replica, and the copy of
//!   a database image in chunks), and [`ReplicaService`], the serving side a [`Server`] hands
//!   those requests to (`NetConfig::replicas`) after the core has checked them.
//!
//! A program that only connects to servers depends on this crate without the `server` feature
//! and links neither the server engine nor tokio.
//!
//! Both transports implement `thor_wire::Transport`, so the client library does not know which
//! it has.
//!
//! ```text
//!  thor-client ──Transport──┬── TcpTransport ══ TCP ══► Server (tokio) ──┐
//!                           └── LocalTransport ─────────────────────────┴─► Engine ─► Core
//! ```
//!
//! *Architecture invariant:* no protocol logic here. Framing and decoding are thor-wire's;
//! sessions, authentication and the meaning of requests are the server core's. This crate
//! moves bytes, bounds time and memory per connection and across connections, and closes
//! connections.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The only crate with sockets. Without its `server` feature it is the client transport alone
//! (`client.rs`: `TcpTransport`, blocking `std::net`, `TCP_NODELAY`, `Hello` on connect; connect
//! and handshake within `ClientConfig::connect_timeout`, each reply within `io_timeout` or what
//! `Transport::set_timeout` set, else `TransportError::TimedOut`; `TlsTransport`, the same inside
//! a blocking `rustls::StreamOwned`), so a program that only connects to servers links neither
//! the engine nor tokio
//! (`tests/edges.rs::client_transport_does_not_link_the_server` checks the dependency tree).
//! `tls.rs`: `TlsServer` and `TlsClient`, rustls configurations (the `ring` provider, named
//! explicitly) from PEM: the server's certificate chain and key and the CA of the client
//! certificates it requires; the CA a client trusts, its own certificate, the server name.
//!
//! With `server`: `server.rs` is the tokio driver of the server core, over TCP and Unix-domain
//! sockets (`Stream`/`Listen` traits; `Server::start_unix`, `UnixTransport` on the client side).
//! Each connection is one task: it reads a frame, calls `Engine::request` with the connection's
//! id, and writes what the core delivered to its `ReplySink` (an `Outbox`) before it yields, so a
//! page-cache hit crosses no channel; replies delivered later from other threads (a durable
//! commit, a page read) wake it through the outbox. `Threading::PerThread` (default): a
//! single-threaded runtime per thread, connections dealt out in turn, each socket re-registered
//! with the reactor of the thread that serves it; `Threading::WorkStealing`: tokio's
//! multi-threaded runtime. Figures: `docs/net.md`. Frames before `Hello` are
//! capped at `PRE_HELLO_FRAME_BYTES_MAX` (4 KiB); after it at the session's frame limit, checked on
//! the length word. Request bytes in flight across all connections are bounded by
//! `NetConfig::in_flight_bytes_max`, charged as they arrive (a frame's buffer doubles as it
//! fills, each step charged before it is read into), with a one-frame reserve held by one frame at
//! a time so that frames half received cannot wait on each other for ever; frames before `Hello`
//! are not charged. A connection takes its session slot when accepted; the TLS handshake (if
//! `NetConfig::tls`) runs in its own task, and the TLS handshake and `Hello` must be done within
//! `NetConfig::handshake_timeout`. A refused `Hello` and a failed TLS handshake are logged at WARN
//! with the peer's address;
//! idle and slow-frame deadlines (the idle one does not run while the connection is owed a reply, so a long backup is not cut off); lingering closes so error replies survive; page reads that miss
//! the cache run on tokio's blocking pool, never on an async worker; a graceful shutdown answers
//! requests in flight. Each fetch (and prefetch) is timed from its decoded request handed to
//! `Engine::request` to its reply taken from the outbox for writing, and reported with
//! `Engine::note_fetch_served` (`ServerStats::{fetch_service_ns, fetches_served}`: the server's
//! share of a fetch, which a client cannot see from its side of the socket). `Server` runs it on its own runtime for synchronous callers (`thor server`,
//! tests, `thor bench net`). `local.rs`: `LocalTransport`, which drives an `Engine` in-process with
//! the same sessions and limits (and says `in_process`, so sessions over it do not prefetch by
//! default); it takes a request given up with `Transport::send_owned` as it is, so a commit's
//! versions and read set reach the core without a copy. `peers.rs`: `TcpPeers`, the `PeerSink` of `thor server --peer
//! ID=ADDR`: a thread, a bounded queue (`PEER_QUEUE_MAX`) and a client session per peer, opened
//! with this server's peer credential (`TcpPeers::set_token` changes it when `thor server`
//! re-reads its credentials; a refusal is logged as a warning), each message a `Peer` request
//! answered `Ack` (over TLS with `TcpPeers::start_tls`); a message that cannot go now is dropped
//! and counted (two-phase commit resends what matters), and an unreachable peer is retried after
//! `PEER_RETRY_AFTER`, not per message. A replicated peer has an address per replica
//! (`TcpPeers::start_groups`, `PeerAddrs`): its link follows `Error(NotLeader)` to the replica
//! the message names, or moves to the next address after a refused or broken connection, at
//! most `PEER_HOPS_MAX` connects per message, each counted (`PeerCounters::moved`); one address
//! behaves as before. `replicas.rs`: `TcpReplicas`, the
//! `thor_server::ReplicaNet` of a replica of a group: the same thread-and-bounded-queue link per
//! other replica (`REPLICA_QUEUE_MAX`) carrying `Raft` requests (wire version 10) on sessions of
//! the group's peer credential, dropping and counting what cannot go; and `fetch_image`, which
//! copies a database image from another replica in chunks (`ImageBegin`/`ImageChunk`/`ImageEnd`)
//! into a `Disk`, page file and double-write buffer first, each synced, the superblock last
//! (`thor_server::io::write_superblock`), so a copy cut short leaves the old superblock.
//! `ReplicaService` serves those requests when set in `NetConfig::replicas`: each is first
//! screened by the core (`Engine::screen`: open idle session, version, the group's peer
//! credential, else the core's refusal, a client's credential `Forbidden`), then served on the
//! blocking pool, one at a time per connection; Raft messages go to its `ReplicaHandler`, and
//! images are set aside by the handler (`DiskSide::image_into`) in a directory of their own
//! and read from there: at most `IMAGES_OPEN_MAX` open (each a full copy of the page file on
//! disk), removed at `ImageEnd`, after `IMAGE_IDLE_EXPIRY` idle, and when the service is
//! dropped.
//!
//! *Architecture Invariant:* no protocol logic here: framing and decoding are thor-wire's, sessions
//! and the meaning of requests the server core's. This crate moves bytes and bounds time and
//! memory: at most one frame buffered per connection, and a server-wide bound on bytes in flight
//! (charged as received, never as announced).
//!
//! *Architecture Invariant:* after any protocol error the connection is closed (its framing can no
//! longer be trusted); errors that concern one request (`NoSuchPage`, `CommitRefused`) leave it
//! open.
//!
//! *API Boundary:* `Server::{start, start_unix, local_addr, wait_for_signal, shutdown}`, `serve`,
//! `serve_unix`, `shutdown_signal`, `NetConfig`, `Threading`, `NetStats`, `TcpTransport::connect`,
//! `UnixTransport::connect`, `TlsTransport::connect`, `LocalTransport::connect`, `TcpPeers::start`,
//! `TcpPeers::start_tls`, `TcpPeers::start_groups`, `PeerAddrs`, `TcpReplicas::start`, `ReplicaService::new`, `ReplicaHandler`,
//! `DeliverError`, `ReplicaServiceConfig`, `NetConfig::replicas`, `TlsServer`, `TlsClient`, `TlsError`, `ClientConfig`, `NetError`.

pub mod client;
#[cfg(feature = "server")]
pub mod error;
pub mod limits;
#[cfg(feature = "server")]
pub mod local;
#[cfg(feature = "server")]
pub mod peers;
#[cfg(feature = "server")]
pub mod replicas;
#[cfg(feature = "server")]
pub mod server;
pub mod tls;

#[cfg(unix)]
pub use client::UnixTransport;
pub use client::{ClientConfig, StreamTransport, TcpTransport, TlsTransport};
#[cfg(feature = "server")]
pub use error::NetError;
#[cfg(feature = "server")]
pub use local::LocalTransport;
#[cfg(feature = "server")]
pub use peers::{PeerAddrs, TcpPeers};
#[cfg(feature = "server")]
pub use replicas::{
    DeliverError, ReplicaHandler, ReplicaService, ReplicaServiceConfig, TcpReplicas,
};
#[cfg(all(feature = "server", unix))]
pub use server::serve_unix;
#[cfg(feature = "server")]
pub use server::{NetConfig, NetStats, Server, ShutdownSignal, Threading, serve, shutdown_signal};
pub use tls::{TlsClient, TlsError, TlsServer};
