//! What the tests of sessions that outlive their connection share (`reconnect.rs`,
//! `group_dialer.rs`): counters that each fill a page, and a network server in this process
//! that crashes and comes back at another port, on a disk that survives it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thor_client::{ClientError, Dialer, ReconnectConfig, Ref, Refs, Session, SessionConfig};
use thor_core::ServerId;
use thor_net::{ClientConfig, NetConfig, Server, TcpTransport};
use thor_server::{Engine, EngineOptions, LocalPeers, TwoPcConfig};
use thor_storage::MemDisk;

thor_client::class! {
    /// A counter with a payload that gives each its own page (so one can change while another
    /// stays cached).
    pub class Counter("test.Counter") {
        value: u64,
    }
    var bytes;
}

/// Bytes of a counter's payload: with 4 KiB pages, one counter per page.
pub const PAYLOAD: usize = 3000;

/// A safety net for reconnects in these tests (never a timing assertion).
pub const SAFETY: Duration = Duration::from_secs(20);

/// A server that can crash and come back, on a disk that survives it.
pub struct Node {
    pub disk: Arc<MemDisk>,
    pub opts: EngineOptions,
    pub engine: Option<Arc<Engine>>,
    pub server: Option<Server>,
    /// Where the server listens now: the sessions' dialers read it on every attempt.
    pub addr: Arc<Mutex<SocketAddr>>,
    pub peers: Option<Arc<LocalPeers>>,
}

impl Node {
    pub fn start(id: ServerId, peers: Option<Arc<LocalPeers>>) -> Node {
        let opts = EngineOptions {
            page_size: 4096,
            server_id: id,
            // Single servers: no background installs, so the log (and the history with it)
            // reaches back to the clients' stamps after a crash. Two-phase commit needs the
            // ticking thread (vote timeouts, queries).
            background_flusher: peers.is_some(),
            peers: peers.clone().map(|p| p as Arc<dyn thor_server::PeerSink>),
            // A coordinator whose participant went away aborts soon.
            // The servers of the cluster tests are 1 and 2; each knows both.
            twopc: TwoPcConfig {
                peers: vec![ServerId(1), ServerId(2)],
                vote_timeout_us: 200_000,
                query_after_us: 20_000,
                ..TwoPcConfig::default()
            },
            ..EngineOptions::default()
        };
        let disk = Arc::new(MemDisk::new());
        let engine = Arc::new(Engine::create(disk.clone(), opts.clone()).unwrap());
        if let Some(p) = &peers {
            p.register(&engine);
        }
        let server = Server::start("127.0.0.1:0", engine.clone(), NetConfig::default()).unwrap();
        let addr = Arc::new(Mutex::new(server.local_addr()));
        Node { disk, opts, engine: Some(engine), server: Some(server), addr, peers }
    }

    /// Where the server listens now.
    pub fn addr(&self) -> SocketAddr {
        *self.addr.lock().unwrap()
    }

    /// Commits the server acknowledged since it last started.
    pub fn commits(&self) -> u64 {
        self.engine.as_ref().unwrap().server_stats().commits
    }

    /// Crashes the server (every acknowledged commit is durable, nothing is installed or
    /// checkpointed: the next open replays the log) and starts it again on a new port.
    pub fn crash_and_restart(&mut self) {
        drop(self.server.take());
        let engine = self.engine.take().unwrap();
        match Arc::try_unwrap(engine) {
            Ok(e) => e.halt(),
            Err(_) => panic!("the engine is still shared after its server stopped"),
        }
        let engine = Arc::new(Engine::open(self.disk.clone(), self.opts.clone()).unwrap());
        if let Some(p) = &self.peers {
            p.register(&engine);
        }
        let server = Server::start("127.0.0.1:0", engine.clone(), NetConfig::default()).unwrap();
        *self.addr.lock().unwrap() = server.local_addr();
        self.engine = Some(engine);
        self.server = Some(server);
    }

    /// A dialer that follows the server to wherever it listens.
    pub fn dialer(&self) -> Dialer {
        dialer_to(self.addr.clone())
    }
}

/// A dialer to wherever `addr` says.
pub fn dialer_to(addr: Arc<Mutex<SocketAddr>>) -> Dialer {
    Box::new(move |_attempt| {
        let a = *addr.lock().unwrap();
        let cfg =
            ClientConfig { connect_timeout: Duration::from_secs(2), ..ClientConfig::default() };
        Ok(Box::new(TcpTransport::connect(a, &cfg)?) as Box<dyn thor_wire::Transport>)
    })
}

/// Sessions that reconnect quickly, bounded by [`SAFETY`], with requests and commits given up
/// after `timeout`.
pub fn config(timeout: Duration) -> SessionConfig {
    SessionConfig {
        refresh_after: None,
        prefetch_pages: Some(0),
        request_timeout: Some(timeout),
        commit_timeout: Some(timeout),
        reconnect: ReconnectConfig {
            give_up_after: SAFETY,
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(100),
        },
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        ..SessionConfig::default()
    }
}

/// Creates `n` counters (each on its own page), rooted in slot 0; returns them.
pub fn setup(s: &Session, n: usize) -> Vec<Ref<Counter>> {
    s.run(|s| {
        let list = s.create::<Refs<Counter>>(n)?;
        for i in 0..n {
            let c = s.create::<Counter>(PAYLOAD)?;
            c.set(Counter::value, 100 * i as u64)?;
            list.set_var_ref(i, c.as_ref())?;
        }
        s.set_root(0, list.as_ref())?;
        Ok::<_, ClientError>(())
    })
    .unwrap();
    counters(s, n)
}

/// The `n` counters rooted in slot 0.
pub fn counters(s: &Session, n: usize) -> Vec<Ref<Counter>> {
    s.run(|s| {
        let list = s.get(s.root::<Refs<Counter>>(0)?)?;
        Ok::<_, ClientError>((0..n).map(|i| s.canonical(list.var_ref(i)).unwrap()).collect())
    })
    .unwrap()
}

pub fn read(s: &Session, r: Ref<Counter>) -> u64 {
    s.run(|s| Ok::<_, ClientError>(s.get(r)?.get(Counter::value))).unwrap()
}

pub fn add(s: &Session, r: Ref<Counter>, delta: u64) {
    s.run(|s| {
        let c = s.get(r)?;
        c.set(Counter::value, c.get(Counter::value) + delta)
    })
    .unwrap();
}
