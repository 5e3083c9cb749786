//! What several integration tests share: an engine over a fresh `MemDisk`, and a HAC session
//! on it through the in-process transport.

#![allow(dead_code)]

pub mod restarts;

use std::sync::Arc;

use thor_client::{PolicyConfig, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

/// An engine over a fresh `MemDisk`, without the background flusher (the tests step it).
pub fn engine() -> Arc<Engine> {
    let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

/// A session on `h` with a HAC cache of `cache_bytes`.
pub fn session_with(h: &Arc<Engine>, cache_bytes: usize) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let cfg = SessionConfig { cache_bytes, policy: PolicyConfig::HAC, ..SessionConfig::default() };
    Session::new(Box::new(t), cfg).unwrap()
}
