//! Two-phase commit's links to a replicated server (`TcpPeers::start_groups`): a replica that
//! answers `NotLeader` sends the link to the replica it names; an unreachable replica sends it
//! to the next address; a replica that steps down mid-session does too. The servers here are
//! fakes speaking the wire protocol on raw sockets: they answer `Hello` with `HelloOk` (or
//! `NotLeader`) and every `Peer` message with `Ack` (or `NotLeader`), and record what came.

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use thor_core::{ClientId, ServerId, builtin};
use thor_net::{PeerAddrs, TcpPeers};
use thor_server::PeerSink;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{
    CommitMode, ErrorCode, PeerMsg, Reply, ReplyBody, RequestBody, ServerInfo, Stamp,
    decode_request, not_leader_message,
};

/// How a fake replica answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `HelloOk`, then `Ack` to every peer message.
    Leader,
    /// `NotLeader` naming this replica at `Hello`.
    Follower(Option<u64>),
    /// `HelloOk`, `Ack` to the first `n` messages, then `NotLeader` naming the replica.
    StepsDownAfter(usize, u64),
}

/// A fake replica on 127.0.0.1.
struct Fake {
    addr: SocketAddr,
    /// Peer messages it acknowledged.
    got: Arc<Mutex<Vec<PeerMsg>>>,
    /// Connections it accepted.
    connections: Arc<Mutex<usize>>,
}

impl Fake {
    fn start(role: Role) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (g, c) = (got.clone(), connections.clone());
        std::thread::spawn(move || {
            let mut acked = 0usize;
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                *c.lock().unwrap() += 1;
                serve(s, role, &g, &mut acked);
            }
        });
        Fake { addr, got, connections }
    }

    fn got(&self) -> Vec<PeerMsg> {
        self.got.lock().unwrap().clone()
    }
}

/// Reads one request frame; `None` at the end of the stream.
fn read_request(s: &mut TcpStream) -> Option<(u64, thor_wire::Request)> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).ok()?;
    let len = u32::from_le_bytes(prefix) as usize;
    let mut f = prefix.to_vec();
    f.resize(4 + len, 0);
    s.read_exact(&mut f[4..]).ok()?;
    Some(decode_request(Bytes::from(f), FRAME_BYTES_MAX).unwrap())
}

fn serve(mut s: TcpStream, role: Role, got: &Mutex<Vec<PeerMsg>>, acked: &mut usize) {
    s.set_read_timeout(Some(SAFETY_TIMEOUT)).unwrap();
    let Some((id, hello)) = read_request(&mut s) else { return };
    assert!(matches!(hello.body, RequestBody::Hello(_)));
    if let Role::Follower(leader) = role {
        let r = Reply::error(ErrorCode::NotLeader, &not_leader_message(leader));
        send_raw(&mut s, &r.to_frame(id).unwrap());
        return;
    }
    let info = ServerInfo {
        version: thor_wire::WIRE_VERSION,
        server_id: ServerId(7),
        page_size: 4096,
        root: builtin::ROOT,
        client_id: ClientId(1),
        max_frame_bytes: FRAME_BYTES_MAX,
        demotions: false,
        commit_mode: CommitMode::default(),
    };
    send_raw(&mut s, &Reply::new(ReplyBody::HelloOk(info)).to_frame(id).unwrap());
    while let Some((id, req)) = read_request(&mut s) {
        let RequestBody::Peer(m) = req.body else { panic!("a peer message, got {req:?}") };
        if let Role::StepsDownAfter(n, leader) = role
            && *acked >= n
        {
            let r = Reply::error(ErrorCode::NotLeader, &not_leader_message(Some(leader)));
            send_raw(&mut s, &r.to_frame(id).unwrap());
            return;
        }
        *acked += 1;
        got.lock().unwrap().push(m);
        send_raw(&mut s, &Reply::new(ReplyBody::Ack).to_frame(id).unwrap());
    }
}

fn query(i: u64) -> PeerMsg {
    PeerMsg::Query { stamp: Stamp { time_us: i, tie: 1 }, from: ServerId(2) }
}

fn peers(group: &[(u64, SocketAddr)]) -> Arc<TcpPeers> {
    let addrs = HashMap::from([(ServerId(7), PeerAddrs { replicas: group.to_vec() })]);
    TcpPeers::start_groups(&addrs, &client_config(b""), None).unwrap()
}

/// An address where nothing listens (a port bound and let go).
fn nobody() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

#[test]
fn peers_follow_not_leader_to_the_named_replica() {
    let (a, b, c) = (
        Fake::start(Role::Follower(Some(3))),
        Fake::start(Role::Leader),
        Fake::start(Role::Leader),
    );
    let p = peers(&[(1, a.addr), (2, b.addr), (3, c.addr)]);
    p.send(ServerId(7), query(1));
    wait_until(|| p.counters().sent.load(Relaxed) == 1);
    assert_eq!(c.got(), vec![query(1)], "replica 3, which replica 1 named, got it");
    assert!(b.got().is_empty(), "replica 2 was skipped");
    assert_eq!(p.counters().moved.load(Relaxed), 1);
    // The link stays with the leader: the next message opens no new connection anywhere.
    p.send(ServerId(7), query(2));
    wait_until(|| p.counters().sent.load(Relaxed) == 2);
    assert_eq!(c.got(), vec![query(1), query(2)]);
    assert_eq!(*a.connections.lock().unwrap(), 1);
    assert_eq!(*c.connections.lock().unwrap(), 1);
    assert_eq!(p.counters().dropped.load(Relaxed), 0);
}

#[test]
fn peers_move_to_the_next_address_when_a_replica_is_down() {
    let b = Fake::start(Role::Leader);
    let p = peers(&[(1, nobody()), (2, b.addr)]);
    p.send(ServerId(7), query(1));
    wait_until(|| p.counters().sent.load(Relaxed) == 1);
    assert_eq!(b.got(), vec![query(1)]);
    assert_eq!(p.counters().moved.load(Relaxed), 1);
    assert_eq!(p.counters().dropped.load(Relaxed), 0);
}

#[test]
fn peers_follow_a_leader_that_steps_down_mid_session() {
    // Replica 1 leads for one message, then answers NotLeader naming replica 2.
    let (a, b) = (Fake::start(Role::StepsDownAfter(1, 2)), Fake::start(Role::Leader));
    let p = peers(&[(1, a.addr), (2, b.addr)]);
    p.send(ServerId(7), query(1));
    wait_until(|| p.counters().sent.load(Relaxed) == 1);
    p.send(ServerId(7), query(2));
    wait_until(|| p.counters().sent.load(Relaxed) == 2);
    assert_eq!(a.got(), vec![query(1)]);
    assert_eq!(b.got(), vec![query(2)], "the same message went on to the named leader");
    assert_eq!(p.counters().moved.load(Relaxed), 1);
}

#[test]
fn a_group_with_no_leader_drops_the_message_after_one_pass() {
    let (a, b) = (Fake::start(Role::Follower(None)), Fake::start(Role::Follower(Some(1))));
    let p = peers(&[(1, a.addr), (2, b.addr)]);
    p.send(ServerId(7), query(1));
    wait_until(|| p.counters().dropped.load(Relaxed) == 1);
    assert_eq!(p.counters().sent.load(Relaxed), 0);
    // One connect to each replica, bounded by the addresses: no loop between them.
    assert_eq!(*a.connections.lock().unwrap(), 1);
    assert_eq!(*b.connections.lock().unwrap(), 1);
}

#[test]
fn a_single_address_peer_that_is_down_drops_without_moving() {
    let p = peers(&[(0, nobody())]);
    p.send(ServerId(7), query(1));
    wait_until(|| p.counters().dropped.load(Relaxed) == 1);
    assert_eq!(p.counters().moved.load(Relaxed), 0);
}
