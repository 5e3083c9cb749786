//! End to end over real TCP with real server processes: typed objects created and committed by
//! a client, the server killed with SIGKILL right after the acknowledgement (so only what was
//! durable survives), a new server process on the same directory, and a new session that reads
//! everything back. Abort over TCP leaves the store unchanged.

mod common;

use std::io::BufRead;
use std::net::SocketAddr;
use std::time::Duration;

use thor_client::{PolicyConfig, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};

thor_client::class! {
    /// A node of a binary tree with a payload.
    pub class Node("e2e.Node") {
        id: u32,
        left: Ref<Node>,
        right: Ref<Node>,
        weight: f64,
    }
    var bytes;
}

/// Starts a server creating its database if needed; its log is drained in the background so
/// it never blocks on a full pipe.
fn start(dir: &std::path::Path) -> (common::ServerProcess, SocketAddr) {
    let (server, addr, log) = common::start(dir, &["--create"], None);
    std::thread::spawn(move || for _ in log.lines() {});
    (server, addr)
}

fn session(addr: SocketAddr, cache_bytes: usize) -> Session {
    let cfg = ClientConfig { io_timeout: Some(Duration::from_secs(30)), ..ClientConfig::default() };
    let t = TcpTransport::connect(addr, &cfg).unwrap();
    Session::new(
        Box::new(t),
        SessionConfig { cache_bytes, policy: PolicyConfig::Fpc, ..SessionConfig::default() },
    )
    .unwrap()
}

/// Builds a complete binary tree of `depth` levels below `id`, in one transaction.
fn build(s: &Session, id: u32, depth: u32) -> Ref<Node> {
    let name = format!("node {id}");
    let n = s.create::<Node>(name.len()).unwrap();
    n.set(Node::id, id).unwrap();
    n.set(Node::weight, f64::from(id) * 0.5).unwrap();
    n.set_var_bytes(name.as_bytes()).unwrap();
    let r = n.as_ref();
    drop(n);
    if depth > 0 {
        let l = build(s, 2 * id, depth - 1);
        let rr = build(s, 2 * id + 1, depth - 1);
        let n = s.get(r).unwrap();
        n.set(Node::left, l).unwrap();
        n.set(Node::right, rr).unwrap();
    }
    r
}

/// Checks the tree below `r` and returns its node count.
fn check(s: &Session, r: Ref<Node>, id: u32, depth: u32) -> u32 {
    let n = s.get(r).unwrap();
    assert_eq!(n.get(Node::id), id);
    assert_eq!(n.get(Node::weight), f64::from(id) * 0.5);
    assert_eq!(n.var_bytes(), format!("node {id}").into_bytes());
    let (l, rr) = (n.get(Node::left), n.get(Node::right));
    drop(n);
    if depth == 0 {
        assert!(l.is_null() && rr.is_null());
        return 1;
    }
    1 + check(s, l, 2 * id, depth - 1) + check(s, rr, 2 * id + 1, depth - 1)
}

#[test]
fn typed_graph_survives_sigkill_of_the_server_after_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let depth = 12; // 8191 nodes over dozens of pages

    let (server, addr) = start(&dir);
    let s = session(addr, 64 << 20);
    let root = build(&s, 1, depth);
    s.set_root(0, root).unwrap();
    let info = s.commit().unwrap();
    assert_eq!(info.created, (1 << (depth + 1)) - 1 + 2);
    // Acknowledged means durable: kill the server without any chance to flush.
    server.kill();
    drop(s);

    let (server, addr) = start(&dir);
    let s = session(addr, 256 << 10); // a small cache: the read-back fetches and evicts
    let root = s.root::<Node>(0).unwrap();
    assert_eq!(check(&s, root, 1, depth), (1 << (depth + 1)) - 1);
    // Pages fetched, or prefetched with them (the session prefetches over TCP).
    let st = s.stats();
    assert!(st.fetches + st.pages_prefetched > 20, "the tree spans dozens of pages");

    // Abort over TCP: the change never reaches the server.
    let n = s.get(root).unwrap();
    n.set(Node::id, 777).unwrap();
    drop(n);
    s.create::<Node>(0).unwrap();
    s.abort();
    assert_eq!(s.get(root).unwrap().get(Node::id), 1);
    let other = session(addr, 1 << 20);
    assert_eq!(other.get(other.root::<Node>(0).unwrap()).unwrap().get(Node::id), 1);

    // A committed change is visible to a new session.
    s.get(root).unwrap().set(Node::weight, 42.0).unwrap();
    s.commit().unwrap();
    let third = session(addr, 1 << 20);
    assert_eq!(third.get(third.root::<Node>(0).unwrap()).unwrap().get(Node::weight), 42.0);
    server.kill();
}
