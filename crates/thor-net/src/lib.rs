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
//! - [`peers`] (feature `server`): [`TcpPeers`], how a server sends two-phase commit's messages
//!   to the other servers (a thread, a bounded queue and a client session per peer).
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

pub mod client;
#[cfg(feature = "server")]
pub mod error;
pub mod limits;
#[cfg(feature = "server")]
pub mod local;
#[cfg(feature = "server")]
pub mod peers;
#[cfg(feature = "server")]
pub mod server;

#[cfg(unix)]
pub use client::UnixTransport;
pub use client::{ClientConfig, StreamTransport, TcpTransport};
#[cfg(feature = "server")]
pub use error::NetError;
#[cfg(feature = "server")]
pub use local::LocalTransport;
#[cfg(feature = "server")]
pub use peers::TcpPeers;
#[cfg(all(feature = "server", unix))]
pub use server::serve_unix;
#[cfg(feature = "server")]
pub use server::{NetConfig, NetStats, Server, ShutdownSignal, Threading, serve, shutdown_signal};
