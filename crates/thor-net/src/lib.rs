//! thor-net: thor's network edge — the only crate with sockets.
//!
//! - [`server`]: the tokio TCP server around `thor_server::Handler`: one task per connection,
//!   a bounded number of connections, per-connection frame limit, idle and frame timeouts,
//!   graceful shutdown, commits on blocking threads. [`Server`] runs it on a runtime of its own
//!   for synchronous programs (`thor server`, tests, benchmarks); [`serve`] runs it on yours.
//! - [`client`]: [`TcpTransport`], the synchronous client transport (`std::net`, one blocking
//!   socket per session, `TCP_NODELAY`), which opens its session with `Hello` on connect.
//! - [`local`]: [`LocalTransport`], the in-process transport that calls the handler directly.
//!
//! Both transports implement `thor_wire::Transport`, so the client library does not know which
//! it has.
//!
//! ```text
//!  thor-client ──Transport──┬── TcpTransport ══ TCP ══► Server (tokio) ──┐
//!                           └── LocalTransport ─────────────────────────┴─► Handler ─► Engine
//! ```
//!
//! *Architecture invariant:* no protocol logic here. Framing and decoding are thor-wire's;
//! sessions, authentication and the mapping of requests to the engine are the handler's. This
//! crate moves bytes, bounds time and memory per connection, and closes connections.

pub mod client;
pub mod error;
pub mod limits;
pub mod local;
pub mod server;

pub use client::{ClientConfig, TcpTransport};
pub use error::NetError;
pub use local::LocalTransport;
pub use server::{NetConfig, Server, serve, shutdown_signal};
