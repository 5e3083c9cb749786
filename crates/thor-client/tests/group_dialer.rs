//! Sessions of a server that is a replica group (`thor_client::group`), over TCP: each
//! replica is a fake in this process that answers the handshake with `Error(NotLeader)` (naming
//! a leader or not), is down (closes every connection at once), or serves by forwarding to a
//! real network server; a serving replica can turn its open connections away mid-session with
//! `Error(NotLeader)`, hold back its replies, or die. The database behind the serving replicas
//! is one engine, crashed and restarted where a test fails its leader over, so that the
//! session resumes at the new leader on the same history. Nothing in a test reconnects or
//! redirects by hand: the sessions do.
//!
//! No timing assertion: a test waits for an event, bounded by a safety timeout.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use thor_client::{
    ClientError, Cluster, GroupDialer, ReconnectConfig, Ref, Replica, ReplicaDialer, Session,
    SessionConfig, XRef,
};
use thor_core::ServerId;
use thor_net::{ClientConfig, TcpTransport};
use thor_server::LocalPeers;
use thor_wire::limits::{FRAME_BYTES_MAX, FRAME_PREFIX_BYTES};
use thor_wire::{ErrorCode, Reply, Transport, TransportError};

use common::restarts::{self, Counter, Node, SAFETY, add, read};

const COUNTERS: usize = 4;

/// What a fake replica does with a new connection.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Answers the handshake with `Error(NotLeader)` naming this leader (or none), closes.
    NotLeader(Option<u64>),
    /// Forwards the connection to the server at this address: the leader.
    Serve(SocketAddr),
    /// Closes the connection at once: a replica that is down, as a client sees it.
    Down,
}

/// One open connection a serving replica forwards: both streams, to cut it.
type Served = (TcpStream, TcpStream);

/// A fake replica: a listener whose behaviour the test switches.
#[derive(Clone)]
struct Fake {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// Connections accepted.
    accepted: Arc<AtomicU64>,
    /// The connections forwarded now.
    served: Arc<Mutex<Vec<Served>>>,
    /// Replies held back on the connections forwarded now (the server answers, the client
    /// never hears).
    frozen: Arc<AtomicBool>,
    /// If set, the next request on a forwarded connection is answered `Error(NotLeader)`
    /// naming this (a leader that lost its group), and the connection closed.
    turn_away: Arc<Mutex<Option<Option<u64>>>>,
}

impl Fake {
    fn start(mode: Mode) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let f = Fake {
            addr: listener.local_addr().unwrap(),
            mode: Arc::new(Mutex::new(mode)),
            accepted: Arc::default(),
            served: Arc::default(),
            frozen: Arc::default(),
            turn_away: Arc::default(),
        };
        let me = f.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                me.accepted.fetch_add(1, Ordering::Relaxed);
                let mode = *me.mode.lock().unwrap();
                match mode {
                    Mode::Down => drop(client),
                    Mode::NotLeader(hint) => {
                        std::thread::spawn(move || answer_not_leader(client, hint));
                    }
                    Mode::Serve(to) => {
                        let Ok(server) = TcpStream::connect(to) else { continue };
                        let keep = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        me.served.lock().unwrap().push(keep);
                        me.forward_requests(
                            client.try_clone().unwrap(),
                            server.try_clone().unwrap(),
                        );
                        me.forward_replies(server, client);
                    }
                }
            }
        });
        f
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// The replica dies: every forwarded connection is cut, new ones are closed at once.
    fn die(&self) {
        self.set(Mode::Down);
        for (c, s) in self.served.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Client to server, frame by frame, so that a request can be answered `NotLeader`.
    fn forward_requests(&self, mut from: TcpStream, mut to: TcpStream) {
        let turn_away = self.turn_away.clone();
        std::thread::spawn(move || {
            while let Some(frame) = read_frame(&mut from) {
                if let Some(hint) = *turn_away.lock().unwrap() {
                    let id = u64::from_le_bytes(frame[12..20].try_into().unwrap());
                    let reply =
                        Reply::error(ErrorCode::NotLeader, &thor_wire::not_leader_message(hint));
                    let _ = from.write_all(&reply.to_frame(id).unwrap());
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
                if to.write_all(&frame).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }

    /// Server to client; while frozen, what was read is held back for good.
    fn forward_replies(&self, mut from: TcpStream, mut to: TcpStream) {
        let frozen = self.frozen.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if frozen.load(Ordering::Relaxed) {
                    // The connection is dead to the client; it ends when the replica dies.
                    continue;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }
}

/// One whole frame (length word included), or `None` at the end of the stream.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    s.read_exact(&mut prefix).ok()?;
    let size = thor_wire::frame_size(prefix, FRAME_BYTES_MAX).ok()?;
    let mut frame = vec![0u8; size];
    frame[..FRAME_PREFIX_BYTES].copy_from_slice(&prefix);
    s.read_exact(&mut frame[FRAME_PREFIX_BYTES..]).ok()?;
    Some(frame)
}

/// Reads the `Hello` and answers `Error(NotLeader)` naming `hint`, as a follower does.
fn answer_not_leader(mut s: TcpStream, hint: Option<u64>) {
    let Some(frame) = read_frame(&mut s) else { return };
    let Ok((id, _hello)) = thor_wire::decode_request(frame.into(), FRAME_BYTES_MAX) else {
        return;
    };
    let reply = Reply::error(ErrorCode::NotLeader, &thor_wire::not_leader_message(hint));
    let _ = s.write_all(&reply.to_frame(id).unwrap());
    let _ = s.shutdown(Shutdown::Both);
}

fn transport_to(addr: SocketAddr) -> Result<Box<dyn Transport>, ClientError> {
    let cfg = ClientConfig { connect_timeout: Duration::from_secs(2), ..ClientConfig::default() };
    Ok(Box::new(TcpTransport::connect(addr, &cfg)?) as Box<dyn Transport>)
}

/// The group of `replicas` (id, fake), dialed in that order.
fn group(replicas: &[(u64, &Fake)]) -> GroupDialer {
    group_at(replicas.iter().map(|(id, f)| (*id, f.addr)).collect())
}

fn group_at(replicas: Vec<(u64, SocketAddr)>) -> GroupDialer {
    let replicas = replicas
        .into_iter()
        .map(|(id, addr)| {
            let dial: ReplicaDialer = Box::new(move || transport_to(addr));
            Replica { id, dial }
        })
        .collect();
    GroupDialer::new(replicas).unwrap()
}

fn config() -> SessionConfig {
    restarts::config(Duration::from_secs(5))
}

/// A plain session straight to `node` (no group), to check what the group's session did.
fn direct(node: &Node) -> Session {
    let addr = node.addr();
    Session::connect(Box::new(move |_| transport_to(addr)), config()).unwrap()
}

fn setup(s: &Session) -> Vec<Ref<Counter>> {
    restarts::setup(s, COUNTERS)
}

#[test]
fn client_follows_not_leader_hint() {
    let node = Node::start(ServerId(1), None);
    let r1 = Fake::start(Mode::NotLeader(Some(3)));
    let r2 = Fake::start(Mode::NotLeader(Some(3)));
    let r3 = Fake::start(Mode::Serve(node.addr()));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2), (3, &r3)]), config()).unwrap();
    assert_eq!(s.replica(), Some(3));
    let refs = setup(&s);
    add(&s, refs[1], 5);
    assert_eq!(read(&direct(&node), refs[1]), 105);
    // Replica 1 named replica 3, and the session went straight there.
    assert_eq!((r1.accepted(), r2.accepted()), (1, 0));
    let r = s.reconnect_stats();
    assert_eq!((r.redirects, r.failovers, r.breaks), (1, 0, 0), "{r:?}");
}

#[test]
fn client_tries_next_replica_when_hint_unknown() {
    let node = Node::start(ServerId(1), None);
    // Replica 1 knows no leader; replica 2 names one that is not in the session's group.
    let r1 = Fake::start(Mode::NotLeader(None));
    let r2 = Fake::start(Mode::NotLeader(Some(9)));
    let r3 = Fake::start(Mode::Serve(node.addr()));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2), (3, &r3)]), config()).unwrap();
    assert_eq!(s.replica(), Some(3));
    let refs = setup(&s);
    assert_eq!(read(&s, refs[2]), 200);
    assert_eq!((r1.accepted(), r2.accepted(), r3.accepted()), (1, 1, 1));
    assert_eq!(s.reconnect_stats().redirects, 2);
}

#[test]
fn client_resumes_on_new_leader_after_failover() {
    let mut node = Node::start(ServerId(1), None);
    let r1 = Fake::start(Mode::Serve(node.addr()));
    let r2 = Fake::start(Mode::NotLeader(Some(1)));
    let r3 = Fake::start(Mode::NotLeader(Some(1)));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2), (3, &r3)]), config()).unwrap();
    let refs = setup(&s);
    for r in &refs {
        read(&s, *r);
    }
    // The commit reaches the leader, which makes it durable; its answer never comes back,
    // and the leader dies. Replica 2 is elected and serves the same history (the database
    // restarted from its log); replica 3 names it.
    r1.frozen.store(true, Ordering::Relaxed);
    let commits = node.commits();
    let (f1, f2, f3) = (r1.clone(), r2.clone(), r3.clone());
    let failover = std::thread::spawn(move || {
        let deadline = Instant::now() + SAFETY;
        while node.commits() == commits {
            assert!(Instant::now() < deadline, "the commit never reached the leader");
            std::thread::sleep(Duration::from_millis(2));
        }
        f1.die();
        node.crash_and_restart();
        f2.set(Mode::Serve(node.addr()));
        f3.set(Mode::NotLeader(Some(2)));
        node
    });
    let c = s.get(refs[0]).unwrap();
    c.set(Counter::value, 42).unwrap();
    drop(c);
    // The session learns at the new leader that its commit happened: no error at all.
    let info = s.commit().unwrap();
    assert!(info.lsn.0 > 0);
    let node = failover.join().unwrap();
    assert_eq!(s.replica(), Some(2));
    let r = s.reconnect_stats();
    assert_eq!((r.breaks, r.reconnects, r.failovers, r.outcomes), (1, 1, 1, [1, 0, 0]), "{r:?}");
    assert_eq!(r.caches_kept, 1, "the new leader vouched for the cache: {r:?}");
    // It goes on there, and another client sees everything it committed.
    add(&s, refs[3], 1);
    let other = direct(&node);
    assert_eq!((read(&other, refs[0]), read(&other, refs[3])), (42, 301));
}

#[test]
fn leader_that_loses_its_group_sends_client_to_the_new_leader() {
    let node = Node::start(ServerId(1), None);
    let r1 = Fake::start(Mode::Serve(node.addr()));
    let r2 = Fake::start(Mode::NotLeader(Some(1)));
    let r3 = Fake::start(Mode::NotLeader(Some(1)));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2), (3, &r3)]), config()).unwrap();
    let refs = setup(&s);
    // Replica 1 loses its group to replica 3: it answers the session's next request
    // `NotLeader(3)` and closes; it turns new connections away the same way.
    r3.set(Mode::Serve(node.addr()));
    r2.set(Mode::NotLeader(Some(3)));
    r1.set(Mode::NotLeader(Some(3)));
    *r1.turn_away.lock().unwrap() = Some(Some(3));
    // The transaction's fetch meets the NotLeader: run runs it again at replica 3.
    let attempts = AtomicU64::new(0);
    s.run(|s| {
        attempts.fetch_add(1, Ordering::Relaxed);
        let c = s.get(refs[2])?;
        c.set(Counter::value, c.get(Counter::value) + 7)
    })
    .unwrap();
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(s.replica(), Some(3));
    assert_eq!(r2.accepted(), 0, "the session went where replica 1 sent it");
    let r = s.reconnect_stats();
    assert_eq!((r.redirects, r.failovers, r.aborted), (1, 1, 1), "{r:?}");
    assert_eq!(read(&direct(&node), refs[2]), 207);
}

#[test]
fn commit_turned_away_by_a_deposed_leader_runs_again_at_the_new_leader() {
    let node = Node::start(ServerId(1), None);
    let r1 = Fake::start(Mode::Serve(node.addr()));
    let r2 = Fake::start(Mode::NotLeader(Some(1)));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2)]), config()).unwrap();
    let refs = setup(&s);
    let commits = node.commits();
    // The first attempt reads from the cache; its commit reaches replica 1 after it lost its
    // group to replica 2, which answers it `NotLeader(2)` without committing. The session
    // asks replica 2, learns the commit did not happen, and `run` runs it again there.
    let attempts = AtomicU64::new(0);
    s.run(|s| {
        if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
            r2.set(Mode::Serve(node.addr()));
            r1.set(Mode::NotLeader(Some(2)));
            *r1.turn_away.lock().unwrap() = Some(Some(2));
        }
        let c = s.get(refs[1])?;
        c.set(Counter::value, c.get(Counter::value) + 1)
    })
    .unwrap();
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(node.commits(), commits + 1, "committed once, at the new leader");
    assert_eq!(s.replica(), Some(2));
    let r = s.reconnect_stats();
    assert_eq!((r.redirects, r.failovers, r.outcomes), (1, 1, [0, 1, 0]), "{r:?}");
    assert_eq!(read(&direct(&node), refs[1]), 101);
}

#[test]
fn group_without_leader_fails_typed_after_the_bound_and_the_next_call_tries_again() {
    // Nothing listens at any replica's address: every connect is refused.
    let dead: Vec<(u64, SocketAddr)> = (1..=3)
        .map(|id| (id, TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()))
        .collect();
    let short = SessionConfig {
        reconnect: ReconnectConfig {
            give_up_after: Duration::from_millis(300),
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(50),
        },
        ..config()
    };
    let err = Session::connect_group(group_at(dead), short).unwrap_err();
    let ClientError::NoLeader { attempts, last, .. } = &err else { panic!("{err}") };
    assert!(*attempts >= 3, "every replica was tried: {err}");
    assert!(matches!(**last, ClientError::Transport(TransportError::Io(_))), "{err}");
    // Replicas that answer but know no leader (an election that cannot finish): the same
    // error, never the NotLeader itself.
    let node = Node::start(ServerId(1), None);
    let r1 = Fake::start(Mode::Serve(node.addr()));
    let r2 = Fake::start(Mode::NotLeader(None));
    let s = Session::connect_group(group(&[(1, &r1), (2, &r2)]), short).unwrap();
    let refs = setup(&s);
    r1.die();
    // A request (the cached counters would need none) meets the dead leader; the session
    // tries the group until the bound and says so.
    let err = s.server_stats().unwrap_err();
    assert!(matches!(err, ClientError::NoLeader { .. }), "{err}");
    // A leader again: the next call finds it by itself.
    r2.set(Mode::Serve(node.addr()));
    s.server_stats().unwrap();
    assert_eq!(s.replica(), Some(2));
    assert_eq!(read(&s, refs[1]), 100);
}

#[test]
fn single_address_session_behaves_as_before() {
    let node = Node::start(ServerId(1), None);
    // A plain dialer to a replica that does not lead: the first connection fails at once
    // with the server's refusal, as any refusal did before groups.
    let follower = Fake::start(Mode::NotLeader(Some(2)));
    let at = follower.addr;
    let err = Session::connect(Box::new(move |_| transport_to(at)), config()).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Transport(TransportError::Refused { code: ErrorCode::NotLeader, .. })
        ),
        "{err}"
    );
    assert_eq!(follower.accepted(), 1, "dialed once");
    // A plain dialer to a server: no group, no redirects; a broken connection is mended as
    // before.
    let leader = Fake::start(Mode::Serve(node.addr()));
    let at = leader.addr;
    let s = Session::connect(Box::new(move |_| transport_to(at)), config()).unwrap();
    let refs = setup(&s);
    leader.die();
    leader.set(Mode::Serve(node.addr()));
    add(&s, refs[0], 1);
    assert_eq!(read(&s, refs[0]), 1);
    assert_eq!(s.replica(), None);
    let r = s.reconnect_stats();
    assert_eq!((r.breaks, r.reconnects, r.redirects, r.failovers), (1, 1, 0, 0), "{r:?}");
}

#[test]
fn cluster_sessions_follow_each_servers_group() {
    let peers = LocalPeers::new();
    let n1 = Node::start(ServerId(1), Some(peers.clone()));
    let n2 = Node::start(ServerId(2), Some(peers.clone()));
    // Server 1's group: replica 11 follows, 12 leads. Server 2's: 21 leads, 22 follows.
    let f11 = Fake::start(Mode::NotLeader(Some(12)));
    let f12 = Fake::start(Mode::Serve(n1.addr()));
    let f21 = Fake::start(Mode::Serve(n2.addr()));
    let f22 = Fake::start(Mode::NotLeader(Some(21)));
    let addrs = [(11, f11.addr), (12, f12.addr), (21, f21.addr), (22, f22.addr)];
    let connect: thor_client::GroupConnector = Box::new(move |_server, replica| {
        let replica = replica.expect("every server here is a group");
        transport_to(addrs.iter().find(|(r, _)| *r == replica).unwrap().1)
    });
    let groups = [(ServerId(1), vec![11, 12]), (ServerId(2), vec![22, 21])];
    let cfg = SessionConfig { commit_timeout: Some(Duration::from_secs(10)), ..config() };
    let c = Cluster::with_groups(&groups, ServerId(1), connect, cfg).unwrap();
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
    // A transfer over both servers commits with two-phase commit between the leaders.
    c.run(|c| {
        let a = c.get(accounts[0])?;
        a.set(Counter::value, a.get(Counter::value) - 10)?;
        drop(a);
        let b = c.get(accounts[1])?;
        b.set(Counter::value, b.get(Counter::value) + 10)
    })
    .unwrap();
    let balances = c
        .run::<_, ClientError>(|c| {
            Ok((c.get(accounts[0])?.get(Counter::value), c.get(accounts[1])?.get(Counter::value)))
        })
        .unwrap();
    assert_eq!(balances, (90, 110));
    assert_eq!(c.session(ServerId(1)).unwrap().replica(), Some(12));
    assert_eq!(c.session(ServerId(2)).unwrap().replica(), Some(21));
    assert_eq!(c.session(ServerId(1)).unwrap().reconnect_stats().redirects, 1);
    assert_eq!(c.session(ServerId(2)).unwrap().reconnect_stats().redirects, 1);
    drop((n1, n2));
}
