//! Sessions that survive a broken connection (`thor_client::session::reconnect`), over TCP to
//! real network servers in this process: the server crashes and comes back at another port
//! (the dialer follows it, as it would follow a replica), or a proxy between client and
//! server stops forwarding. Nothing in a test reconnects by hand: the sessions do.
//!
//! No timing assertion: a test waits for an event, bounded by a safety timeout.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thor_client::{
    ClientError, Cluster, CommitOutcome, ConflictCause, Ref, Session, SessionConfig, XRef,
};
use thor_core::ServerId;
use thor_net::{NetConfig, Server};
use thor_server::{Engine, LocalPeers};

use common::restarts::{self, Counter, Node, SAFETY, add, dialer_to, read};

const COUNTERS: usize = 8;

fn config() -> SessionConfig {
    restarts::config(Duration::from_secs(2))
}

fn session(node: &Node) -> Session {
    Session::connect(node.dialer(), config()).unwrap()
}

fn setup(s: &Session) -> Vec<Ref<Counter>> {
    restarts::setup(s, COUNTERS)
}

fn counters(s: &Session) -> Vec<Ref<Counter>> {
    restarts::counters(s, COUNTERS)
}

#[test]
fn session_survives_server_restart() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    add(&s, refs[0], 1);
    node.crash_and_restart();
    // The session goes on by itself: the transaction's first attempt meets the broken
    // connection and is run again on the new one.
    add(&s, refs[0], 1);
    assert_eq!(read(&s, refs[0]), 2);
    let r = s.reconnect_stats();
    assert_eq!((r.breaks, r.reconnects), (1, 1), "{r:?}");
    // A new session sees what this one committed, before and after the crash.
    assert_eq!(read(&session(&node), refs[0]), 2);
}

#[test]
fn refs_stay_valid_across_reconnect() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    let values: Vec<u64> = refs.iter().map(|r| read(&s, *r)).collect();
    node.crash_and_restart();
    // Another client changes one of them while this session is away.
    add(&session(&node), refs[3], 7);
    for (i, r) in refs.iter().enumerate() {
        let want = values[i] + if i == 3 { 7 } else { 0 };
        assert_eq!(read(&s, *r), want, "counter {i} through a reference made before the crash");
    }
    // References stored in objects, and the root, lead to the same objects.
    assert_eq!(counters(&s), refs);
}

#[test]
fn open_transaction_is_aborted_by_reconnect() {
    let mut node = Node::start(ServerId(1), None);
    let refs = setup(&session(&node));
    // A client that has read counters 0 and 1 only.
    let s = session(&node);
    let refs: Vec<Ref<Counter>> = counters(&s).into_iter().zip(refs).map(|(r, _)| r).collect();
    read(&s, refs[1]);
    // Its transaction writes counter 0; the server crashes before it reads counter 2.
    let c0 = s.get(refs[0]).unwrap();
    c0.set(Counter::value, 999).unwrap();
    drop(c0);
    node.crash_and_restart();
    // Counter 2 is not cached: its fetch meets the broken connection. The session reconnects
    // and says the transaction is aborted.
    let err = s.get(refs[2]).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, ClientError::Conflict { cause: ConflictCause::Disconnected, .. }),
        "{err}"
    );
    // Aborted for good: reading on or committing says so, and commits nothing.
    let err = s.get(refs[3]).map(|_| ()).unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let err = s.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let fresh = session(&node);
    assert_eq!(read(&fresh, refs[0]), 0, "the aborted write never reached the server");
    // The session's cache went back to before the transaction, and it goes on.
    assert_eq!(read(&s, refs[0]), 0);
    add(&s, refs[0], 5);
    assert_eq!(read(&fresh, refs[0]), 5);
    assert_eq!(s.reconnect_stats().aborted, 1);
}

#[test]
fn a_transaction_that_only_read_is_run_again_after_a_lost_commit() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    read(&s, refs[1]);
    node.crash_and_restart();
    // Every read hits the cache; the commit meets the broken connection and `run` runs the
    // transaction again, without asking what became of a commit that changed nothing.
    let attempts = AtomicU64::new(0);
    let v = s.run::<_, thor_client::ClientError>(|s| {
        attempts.fetch_add(1, Ordering::Relaxed);
        Ok(s.get(refs[1])?.get(Counter::value))
    });
    assert_eq!(v.unwrap(), 100);
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(s.reconnect_stats().outcomes, [0, 0, 0], "nothing was asked");
}

#[test]
fn cache_kept_when_nothing_changed() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    for r in &refs {
        read(&s, *r);
    }
    let fetches = s.stats().fetches;
    node.crash_and_restart();
    // One transaction reads every counter: after the resume all of them are still cached.
    let total = s
        .run(|s| {
            let mut t = 0;
            for r in &refs {
                t += s.get(*r)?.get(Counter::value);
            }
            Ok::<_, thor_client::ClientError>(t)
        })
        .unwrap();
    assert_eq!(total, (0..COUNTERS as u64).map(|i| 100 * i).sum::<u64>());
    let r = s.reconnect_stats();
    assert_eq!((r.caches_kept, r.caches_dropped), (1, 0), "{r:?}");
    assert!(r.last_objects_before >= COUNTERS as u64, "{r:?}");
    assert_eq!(r.last_objects_kept, r.last_objects_before, "nothing changed, nothing dropped");
    assert_eq!(s.stats().fetches, fetches, "no page fetched again");
}

#[test]
fn changed_objects_invalidated_on_reconnect() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    for r in &refs {
        read(&s, *r);
    }
    node.crash_and_restart();
    add(&session(&node), refs[4], 1);
    let fetches = s.stats().fetches;
    // The first attempt reads the stale copy of counter 4 from the cache and is refused (its
    // commit meets the broken connection, and never happened); the resume invalidated counter
    // 4, so the second attempt fetches its page and reads the new value.
    let got = s.run::<_, thor_client::ClientError>(|s| {
        Ok((s.get(refs[4])?.get(Counter::value), s.get(refs[5])?.get(Counter::value)))
    });
    assert_eq!(got.unwrap(), (401, 500));
    assert_eq!(s.stats().fetches, fetches + 1, "only counter 4's page came again");
    let r = s.reconnect_stats();
    assert_eq!(r.caches_kept, 1, "{r:?}");
    assert_eq!(r.last_objects_kept + 1, r.last_objects_before, "one object dropped: {r:?}");
}

#[test]
fn cache_dropped_when_the_server_cannot_tell() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    read(&s, refs[1]);
    // A clean shutdown installs everything and truncates the log: the restarted server has
    // no history to tell what changed since the client's stamp.
    drop(node.server.take());
    let engine = Arc::try_unwrap(node.engine.take().unwrap()).ok().unwrap();
    engine.close().unwrap();
    node.engine = Some(Arc::new(Engine::open(node.disk.clone(), node.opts.clone()).unwrap()));
    let server =
        Server::start("127.0.0.1:0", node.engine.clone().unwrap(), NetConfig::default()).unwrap();
    *node.addr.lock().unwrap() = server.local_addr();
    node.server = Some(server);
    assert_eq!(read(&s, refs[1]), 100);
    let r = s.reconnect_stats();
    assert_eq!((r.caches_kept, r.caches_dropped, r.last_objects_kept), (0, 1, 0), "{r:?}");
}

/// The two directions of one proxied connection: (client to server frozen, server to client
/// frozen).
type Freezes = (Arc<AtomicBool>, Arc<AtomicBool>);

/// A TCP proxy in front of a server: each connection is pumped both ways by two threads, and
/// the connections open now can be made to stop forwarding one direction (a stopped server
/// or a network that drops packets, as a client sees it). New connections forward normally.
struct Proxy {
    addr: SocketAddr,
    /// For each connection: (client to server frozen, server to client frozen).
    conns: Arc<Mutex<Vec<Freezes>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: Arc<Mutex<SocketAddr>>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<_>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (conns.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(*target.lock().unwrap()) else { continue };
                let up = Arc::new(AtomicBool::new(false));
                let down = Arc::new(AtomicBool::new(false));
                c.lock().unwrap().push((up.clone(), down.clone()));
                pump(client.try_clone().unwrap(), server.try_clone().unwrap(), up);
                pump(server, client, down);
            }
        });
        Proxy { addr, conns, stop }
    }

    /// The connections open now stop forwarding requests (`up`) and/or replies (`down`).
    fn freeze(&self, up: bool, down: bool) {
        for (u, d) in self.conns.lock().unwrap().iter() {
            u.store(up, Ordering::Relaxed);
            d.store(down, Ordering::Relaxed);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to` until either closes; while `frozen`, holds what it read.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            while frozen.load(Ordering::Relaxed) {
                // Held back for good: the connection is dead to the other side.
                std::thread::sleep(Duration::from_millis(20));
                if to.peer_addr().is_err() {
                    return;
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

fn session_via(proxy: &Proxy) -> Session {
    Session::connect(dialer_to(Arc::new(Mutex::new(proxy.addr))), config()).unwrap()
}

#[test]
fn commit_in_flight_outcome_is_learned() {
    let node = Node::start(ServerId(1), None);
    let proxy = Proxy::start(node.addr.clone());
    let s = session_via(&proxy);
    let refs = setup(&s);
    let other = session(&node);
    // The commit reaches the server, which commits it; its answer never comes back. The
    // commit times out, the session reconnects, asks, and learns it committed.
    let c = s.get(refs[0]).unwrap();
    c.set(Counter::value, 42).unwrap();
    drop(c);
    proxy.freeze(false, true);
    let info = s.commit().unwrap();
    assert!(info.lsn.0 > 0);
    assert_eq!(read(&other, refs[0]), 42);
    assert_eq!(s.reconnect_stats().outcomes, [1, 0, 0]);
    // The commit never reaches the server: the session learns it did not happen, and `run`
    // runs the transaction again (once: the counter goes up by one).
    let attempts = AtomicU64::new(0);
    let before = read(&other, refs[1]);
    s.run(|s| {
        if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
            proxy.freeze(true, false);
        }
        let c = s.get(refs[1])?;
        c.set(Counter::value, c.get(Counter::value) + 1)
    })
    .unwrap();
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(read(&other, refs[1]), before + 1, "applied exactly once");
    assert_eq!(s.reconnect_stats().outcomes, [1, 1, 0]);
    // Nothing is left to learn.
    assert_eq!(s.commit_outcome().unwrap(), Some(CommitOutcome::NotCommitted));
}

#[test]
fn a_commit_whose_outcome_cannot_be_learned_is_not_run_again() {
    let mut node = Node::start(ServerId(1), None);
    let proxy = Proxy::start(node.addr.clone());
    let s = session_via(&proxy);
    let refs = setup(&s);
    // The commit reaches the server and its answer is lost; the server then shuts down
    // cleanly (the close truncates its log, and its history with it) before the session
    // asks. Nobody can tell the session what became of its commit.
    let commits = node.engine.as_ref().unwrap().server_stats().commits;
    let restarter = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + SAFETY;
        while node.engine.as_ref().unwrap().server_stats().commits == commits {
            assert!(std::time::Instant::now() < deadline, "the commit never reached the server");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(node.server.take());
        let engine = Arc::try_unwrap(node.engine.take().unwrap()).ok().unwrap();
        engine.close().unwrap();
        node.engine = Some(Arc::new(Engine::open(node.disk.clone(), node.opts.clone()).unwrap()));
        let server =
            Server::start("127.0.0.1:0", node.engine.clone().unwrap(), NetConfig::default())
                .unwrap();
        *node.addr.lock().unwrap() = server.local_addr();
        node.server = Some(server);
        node
    });
    let attempts = AtomicU64::new(0);
    let r = s.run(|s| {
        attempts.fetch_add(1, Ordering::Relaxed);
        proxy.freeze(false, true);
        let c = s.get(refs[2])?;
        c.set(Counter::value, 7)
    });
    let node = restarter.join().unwrap();
    assert!(matches!(r, Err(ClientError::CommitUnknown(_))), "{r:?}");
    assert_eq!(attempts.load(Ordering::Relaxed), 1, "run did not run it again");
    assert_eq!(s.commit_outcome().unwrap(), Some(CommitOutcome::Unknown));
    // It did commit: reading tells.
    assert_eq!(read(&session(&node), refs[2]), 7);
}

#[test]
fn silent_server_request_times_out_and_the_session_comes_back() {
    let node = Node::start(ServerId(1), None);
    let refs = setup(&session(&node));
    let proxy = Proxy::start(node.addr.clone());
    let cfg = SessionConfig { request_timeout: Some(Duration::from_millis(300)), ..config() };
    let s = Session::connect(dialer_to(Arc::new(Mutex::new(proxy.addr))), cfg).unwrap();
    read(&s, refs[0]);
    // The server stops answering (every connection open now is frozen; the proxy still
    // accepts new ones, which reach the server). A fetch times out, the session reconnects
    // through the proxy and the transaction is reported aborted.
    proxy.freeze(true, true);
    let err = s.run::<_, thor_client::ClientError>(|s| Ok(s.get(refs[6])?.get(Counter::value)));
    assert_eq!(err.unwrap(), 600, "run retried after the timeout, on a new connection");
    assert!(s.reconnect_stats().reconnects >= 1);
}

#[test]
fn cluster_sessions_survive_a_server_restart() {
    let peers = LocalPeers::new();
    let n1 = Node::start(ServerId(1), Some(peers.clone()));
    let mut n2 = Node::start(ServerId(2), Some(peers.clone()));
    let addrs = [(ServerId(1), n1.addr.clone()), (ServerId(2), n2.addr.clone())];
    let connect: thor_client::Connector = Box::new(move |id: ServerId| {
        let a = addrs.iter().find(|(s, _)| *s == id).unwrap().1.clone();
        (dialer_to(a))(0)
    });
    // A commit waits longer than a coordinator waits for a vote: a part lost with its
    // server's connection comes back as the coordinator's abort, which `run` retries.
    let cfg = SessionConfig { commit_timeout: Some(Duration::from_secs(10)), ..config() };
    let c = Cluster::new(&[ServerId(1), ServerId(2)], ServerId(1), connect, cfg).unwrap();
    let mut accounts = Vec::new();
    for id in [ServerId(1), ServerId(2)] {
        c.run(|c| {
            let a = c.create::<Counter>(id, 0)?;
            c.session(id)?.get(a.r)?.set(Counter::value, 100)?;
            c.session(id)?.set_root(0, a.r)
        })
        .unwrap();
        let s = c.session(id).unwrap();
        accounts.push(XRef::at(id, s.run(|s| s.root::<Counter>(0)).unwrap()));
    }
    let transfer = |c: &Cluster, amount: u64| {
        c.run(|c| {
            let a = c.get(accounts[0])?;
            a.set(Counter::value, a.get(Counter::value) - amount)?;
            drop(a);
            let b = c.get(accounts[1])?;
            b.set(Counter::value, b.get(Counter::value) + amount)
        })
    };
    transfer(&c, 10).unwrap();
    n2.crash_and_restart();
    // The transfer over both servers goes on: server 2's session reconnects by itself.
    transfer(&c, 5).unwrap();
    let balances = c
        .run::<_, thor_client::ClientError>(|c| {
            Ok((c.get(accounts[0])?.get(Counter::value), c.get(accounts[1])?.get(Counter::value)))
        })
        .unwrap();
    assert_eq!(balances, (85, 115));
    assert!(c.session(ServerId(2)).unwrap().reconnect_stats().reconnects >= 1);
    drop(n1);
}

#[test]
fn a_view_held_across_a_dropped_cache_must_go_before_the_next_transaction() {
    let mut node = Node::start(ServerId(1), None);
    let s = session(&node);
    let refs = setup(&s);
    // A view held while the server restarts cleanly (no history: the cache is dropped).
    let v = s.get(refs[1]).unwrap();
    assert_eq!(v.get(Counter::value), 100);
    drop(node.server.take());
    let engine = Arc::try_unwrap(node.engine.take().unwrap()).ok().unwrap();
    engine.close().unwrap();
    node.engine = Some(Arc::new(Engine::open(node.disk.clone(), node.opts.clone()).unwrap()));
    let server =
        Server::start("127.0.0.1:0", node.engine.clone().unwrap(), NetConfig::default()).unwrap();
    *node.addr.lock().unwrap() = server.local_addr();
    node.server = Some(server);
    // The transaction's commit meets the broken connection: it read only, so it is reported
    // aborted; the resume found nothing to vouch for the cache, which is dropped.
    let err = s.commit().unwrap_err();
    assert!(
        matches!(err, ClientError::Conflict { cause: ConflictCause::Disconnected, .. }),
        "{err}"
    );
    assert_eq!(s.reconnect_stats().caches_dropped, 1);
    // The view's object could not leave while the view lives: no transaction starts.
    assert!(matches!(s.get(refs[2]).map(|_| ()), Err(ClientError::Usage(_))));
    drop(v);
    assert_eq!(read(&s, refs[1]), 100);
}
