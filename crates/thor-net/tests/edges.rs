//! The server's edges under pressure: what a connection may send before it authenticates, the
//! bound on frame bytes held across all connections, and what a client-only program links.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use common::*;
use thor_core::PageId;
use thor_net::NetConfig;
use thor_server::ProtocolConfig;
use thor_server::limits::PRE_HELLO_FRAME_BYTES_MAX;
use thor_wire::{Commit, ErrorCode, Hello, ReplyBody, Request, RequestBody};

#[test]
fn oversized_frame_before_hello() {
    let db = Db::new();
    let (_engine, server) = serve(db.create(), NetConfig::default());
    let addr = server.local_addr();
    // A frame just over the cap, announced before Hello: refused unread, connection closed.
    let mut s = raw(addr);
    send_raw(&mut s, &((PRE_HELLO_FRAME_BYTES_MAX + 1) as u32).to_le_bytes());
    expect_error_and_close(&mut s, ErrorCode::FrameTooLarge, 0);
    // After Hello, a frame of the same size is an ordinary request.
    let mut t = connect(addr, b"");
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let two = vec![item(class.raw(), 0, 1, &[7; 3000]), item(class.raw(), 0, 2, &[7; 3000])];
    assert_eq!(commit_ok(&mut t, vec![], two).len(), 2);
    // The largest legitimate Hello fits under the cap.
    let h = Hello::new(
        Bytes::from(vec![b'k'; thor_wire::limits::TOKEN_BYTES_MAX]),
        "n".repeat(thor_wire::limits::CLIENT_NAME_BYTES_MAX),
    );
    let frame = Request::new(RequestBody::Hello(h)).to_frame(1).unwrap();
    assert!(frame.len() <= PRE_HELLO_FRAME_BYTES_MAX);
    server.shutdown().unwrap();
}

fn in_flight(server: &thor_net::Server) -> usize {
    server.stats().in_flight_bytes.load(Relaxed)
}

/// A commit frame of `objects` new items of about 3 KB each (request id 2).
fn big_commit(class: thor_core::Oref, seq: u32, objects: u32) -> Vec<u8> {
    let created = (0..objects)
        .map(|i| Bytes::from(item(class.raw(), 0, seq * 1000 + i, &[1; 3000])))
        .collect();
    Request::new(RequestBody::Commit(Commit {
        reads: vec![],
        versions: vec![],
        created,
        id: None,
        leaves: Vec::new(),
    }))
    .to_frame(2)
    .unwrap()
}

#[test]
fn declared_length_does_not_stall_others() {
    // The defaults: a 256 MiB bound, 64 MiB frames, a 30 s frame timeout.
    let db = Db::new();
    let (engine, server) = serve(db.create(), NetConfig::default());
    let addr = server.local_addr();
    // Four authenticated connections announce the largest frame and send nothing more.
    let mut stallers: Vec<_> = (0..4).map(|_| raw(addr)).collect();
    for s in &mut stallers {
        raw_hello(s, b"");
        send_raw(s, &((thor_wire::limits::FRAME_BYTES_MAX - 4) as u32).to_le_bytes());
    }
    // Each holds its first step (16 KiB), not the 64 MiB it announced.
    wait_until(|| in_flight(&server) == 4 * (16 << 10));
    // Another client connects (its Hello), fetches and commits, while they are connected. The
    // client's timeout (the safety net, 20 s) is shorter than the frame timeout (30 s) that
    // would free room if the announced lengths were charged.
    let mut t = connect(addr, b"");
    fetch(&mut t, PageId::FIRST);
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    commit_ok(&mut t, vec![], vec![item(class.raw(), 0, 1, b"after")]);
    for s in &mut stallers {
        assert!(quiet_and_open(s), "the stallers are still connected and unanswered");
    }
    assert_eq!(server.stats().frames_waited.load(Relaxed), 0, "nobody waited");
    assert_eq!(engine.server_stats().commits, 2);
    drop((t, stallers));
    server.shutdown().unwrap();
}

#[test]
fn half_received_frames_cannot_wait_on_each_other_for_ever() {
    let db = Db::new();
    // A pool of one largest frame (256 KiB): two frames half received fill it.
    let max_frame = 256 << 10;
    let protocol = ProtocolConfig { max_frame_bytes: max_frame, ..ProtocolConfig::default() };
    let net = NetConfig {
        in_flight_bytes_max: max_frame,
        frame_timeout: SAFETY_TIMEOUT * 2,
        ..NetConfig::default()
    };
    let (engine, server) = serve(db.create_with(protocol), net);
    let addr = server.local_addr();
    let mut setup = connect(addr, b"");
    let class = commit_ok(&mut setup, vec![], vec![item_class().to_class_object()])[0];
    let (fa, fb) = (big_commit(class, 1, 80), big_commit(class, 2, 80));
    assert!(fa.len() > 128 << 10 && fa.len() <= max_frame && fb.len() <= max_frame);
    let mut a = raw(addr);
    let mut b = raw(addr);
    raw_hello(&mut a, b"");
    raw_hello(&mut b, b"");
    // A and B each send 100 KiB of their frame: each buffer has grown to 128 KiB, charged,
    // and the pool (256 KiB) is full. Each needs more room to read the rest.
    let part = 100 << 10;
    send_raw(&mut a, &fa[..part]);
    wait_until(|| in_flight(&server) == 128 << 10);
    send_raw(&mut b, &fb[..part]);
    wait_until(|| in_flight(&server) == 256 << 10);
    // With the pool full, a new client still says Hello (frames before Hello are not
    // charged) and an open session's small request completes, from the reserve.
    let mut c = connect(addr, b"");
    fetch(&mut c, PageId::FIRST);
    fetch(&mut setup, PageId::FIRST);
    assert!(quiet_and_open(&mut a) && quiet_and_open(&mut b));
    // Both send the rest: each needs room the other holds. One completes from the reserve,
    // is served and gives its room back; then the other completes.
    send_raw(&mut a, &fa[part..]);
    send_raw(&mut b, &fb[part..]);
    for s in [&mut a, &mut b] {
        let (_, r) = read_frame(s).unwrap();
        assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    }
    let st = server.stats();
    assert!(st.frames_waited.load(Relaxed) >= 1);
    assert!(st.frames_from_reserve.load(Relaxed) >= 2, "the fetch and one commit");
    let peak = st.in_flight_bytes_peak.load(Relaxed);
    assert!(peak <= 2 * max_frame, "at most the pool and one frame: {peak}");
    assert_eq!(engine.server_stats().commits, 3);
    wait_until(|| in_flight(&server) == 0);
    drop((a, b, c, setup));
    server.shutdown().unwrap();
}

#[test]
fn client_transport_does_not_link_the_server() {
    // `cargo tree` of the crate as a client program depends on it (no `server` feature).
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-p", "thor-net", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("thor-wire"), "{tree}");
    for server_side in ["thor-server", "thor-storage", "tokio"] {
        assert!(!tree.contains(server_side), "a client-only build links {server_side}:\n{tree}");
    }
}
