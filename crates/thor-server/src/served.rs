//! What a transport serves: [`Served`], the connection API that both drivers offer, a single
//! server's [`crate::Engine`] and a replica group member's [`crate::GroupEngine`], so that
//! `thor-net`'s TCP server runs either without knowing which.
//!
//! The API is the engines' own (connect, request, settle, disconnect, ...); the one difference
//! is the work a request leaves: each engine has its own type (`engine::Work`,
//! `group::GroupWork`), carried here as an opaque [`Pending`] that only the engine that made
//! it can settle. A request that leaves nothing (a page-cache hit, the common case) makes no
//! `Pending` and allocates nothing.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use thor_server_core::{ConnId, ProtocolConfig};
use thor_wire::{Request, WireError};

use crate::engine::ReplySink;

/// I/O a request left, to be performed off any async executor with [`Served::settle`] of the
/// engine that made it.
#[must_use = "the work must be performed (Served::settle)"]
pub struct Pending(pub(crate) Box<dyn Any + Send>);

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

/// The connection API a transport drives (see the module documentation). Every method is
/// the engine's inherent one of the same name.
pub trait Served: Send + Sync + std::fmt::Debug {
    /// Opens a connection whose replies go to `sink`.
    fn connect(&self, sink: Arc<dyn ReplySink>) -> ConnId;
    /// Hands a decoded request to the engine; `Some` work must be performed with
    /// [`Served::settle`] off any async executor.
    fn request(&self, conn: ConnId, id: u64, req: Request) -> Option<Pending>;
    /// Performs work [`Served::request`] returned (blocking I/O).
    fn settle(&self, work: Pending);
    /// Checks a request the transport serves itself (a replica group's), as the core checks
    /// its own; false: refused (the refusal went to the connection's sink) or held.
    fn screen(&self, conn: ConnId, id: u64, req: &Request) -> bool;
    /// Reports bytes from `conn` that did not decode.
    fn protocol_error(&self, conn: ConnId, id: u64, error: WireError);
    /// Closes `conn`.
    fn disconnect(&self, conn: ConnId);
    /// Counts bytes received and sent.
    fn note_traffic(&self, received: u64, sent: u64);
    /// Records the service time of one fetch.
    fn note_fetch_served(&self, ns: u64);
    /// The protocol settings (frame limit, sessions).
    fn protocol(&self) -> ProtocolConfig;
    /// How long a transport should wait before [`Served::tick_if_due`], if the engine needs
    /// its callers to tick it (see `Engine::caller_tick_wait`).
    fn caller_tick_wait(&self) -> Option<Duration>;
    /// Ticks the engine if a deadline came.
    fn tick_if_due(&self);
}

impl Served for crate::Engine {
    fn connect(&self, sink: Arc<dyn ReplySink>) -> ConnId {
        crate::Engine::connect(self, sink)
    }
    fn request(&self, conn: ConnId, id: u64, req: Request) -> Option<Pending> {
        let work = crate::Engine::request(self, conn, id, req);
        (!work.is_empty()).then(|| Pending(Box::new(work)))
    }
    fn settle(&self, work: Pending) {
        match work.0.downcast::<crate::engine::Work>() {
            Ok(w) => crate::Engine::settle(self, *w),
            Err(_) => unreachable!("work of another engine settled on an Engine"),
        }
    }
    fn screen(&self, conn: ConnId, id: u64, req: &Request) -> bool {
        crate::Engine::screen(self, conn, id, req)
    }
    fn protocol_error(&self, conn: ConnId, id: u64, error: WireError) {
        crate::Engine::protocol_error(self, conn, id, error)
    }
    fn disconnect(&self, conn: ConnId) {
        crate::Engine::disconnect(self, conn)
    }
    fn note_traffic(&self, received: u64, sent: u64) {
        crate::Engine::note_traffic(self, received, sent)
    }
    fn note_fetch_served(&self, ns: u64) {
        crate::Engine::note_fetch_served(self, ns)
    }
    fn protocol(&self) -> ProtocolConfig {
        crate::Engine::protocol(self)
    }
    fn caller_tick_wait(&self) -> Option<Duration> {
        crate::Engine::caller_tick_wait(self)
    }
    fn tick_if_due(&self) {
        crate::Engine::tick_if_due(self)
    }
}

impl Served for crate::GroupEngine {
    fn connect(&self, sink: Arc<dyn ReplySink>) -> ConnId {
        crate::GroupEngine::connect(self, sink)
    }
    fn request(&self, conn: ConnId, id: u64, req: Request) -> Option<Pending> {
        let work = crate::GroupEngine::request(self, conn, id, req);
        (!work.is_empty()).then(|| Pending(Box::new(work)))
    }
    fn settle(&self, work: Pending) {
        match work.0.downcast::<crate::group::GroupWork>() {
            Ok(w) => crate::GroupEngine::settle(self, *w),
            Err(_) => unreachable!("work of another engine settled on a GroupEngine"),
        }
    }
    fn screen(&self, conn: ConnId, id: u64, req: &Request) -> bool {
        crate::GroupEngine::screen(self, conn, id, req)
    }
    fn protocol_error(&self, conn: ConnId, id: u64, error: WireError) {
        crate::GroupEngine::protocol_error(self, conn, id, error)
    }
    fn disconnect(&self, conn: ConnId) {
        crate::GroupEngine::disconnect(self, conn)
    }
    fn note_traffic(&self, _received: u64, _sent: u64) {}
    fn note_fetch_served(&self, _ns: u64) {}
    fn protocol(&self) -> ProtocolConfig {
        crate::GroupEngine::protocol(self)
    }
    // The group engine's ticker thread steps its member: no caller ticks it.
    fn caller_tick_wait(&self) -> Option<Duration> {
        None
    }
    fn tick_if_due(&self) {}
}
