//! The server's edges under pressure: what a connection may send before it authenticates, the
//! bound on frame bytes held across all connections, and what a client-only program links.

mod common;

use std::io::{ErrorKind, Read};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use thor_net::NetConfig;
use thor_server::ProtocolConfig;
use thor_server::limits::PRE_HELLO_FRAME_BYTES_MAX;
use thor_wire::{Commit, ErrorCode, Hello, ReplyBody, Request, RequestBody};

/// Waits (without a deadline of its own: the test's safety timeout bounds it) until `f` holds.
fn wait_until(mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < SAFETY_TIMEOUT, "the server never got there");
        std::thread::sleep(Duration::from_millis(2));
    }
}

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

#[test]
fn in_flight_bytes_are_bounded() {
    let db = Db::new();
    let max_frame = 128 << 10;
    let bound = 192 << 10;
    let protocol = ProtocolConfig { max_frame_bytes: max_frame, ..ProtocolConfig::default() };
    let net = NetConfig {
        in_flight_bytes_max: bound,
        frame_timeout: SAFETY_TIMEOUT,
        ..NetConfig::default()
    };
    let (engine, server) = serve(db.create_with(protocol), net);
    let addr = server.local_addr();
    let mut setup = connect(addr, b"");
    let class = commit_ok(&mut setup, vec![], vec![item_class().to_class_object()])[0];
    // Two commits of about 120 KiB: either fits the bound alone, both do not.
    let big = |seq: u32| {
        let created =
            (0..40).map(|i| Bytes::from(item(class.raw(), 0, seq * 100 + i, &[1; 3000]))).collect();
        Request::new(RequestBody::Commit(Commit {
            reads: vec![],
            versions: vec![],
            created,
            id: None,
        }))
        .to_frame(2)
        .unwrap()
    };
    let hello = |s: &mut std::net::TcpStream| {
        let h = Request::new(RequestBody::Hello(Hello::new(&b""[..], "raw"))).to_frame(1);
        send_raw(s, &h.unwrap());
        let (_, r) = read_frame(s).unwrap();
        assert!(matches!(r.body, ReplyBody::HelloOk(_)));
    };
    let (fa, fb) = (big(1), big(2));
    assert!(fa.len() <= max_frame && fa.len() * 2 > bound);
    let mut a = raw(addr);
    let mut b = raw(addr);
    hello(&mut a);
    hello(&mut b);
    // A sends its length and half its frame, then stalls: its bytes are held.
    send_raw(&mut a, &fa[..fa.len() / 2]);
    wait_until(|| server.stats().in_flight_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // B's whole frame must wait for room.
    send_raw(&mut b, &fb);
    wait_until(|| server.stats().frames_waited.load(std::sync::atomic::Ordering::Relaxed) == 1);
    b.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        matches!(b.read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "B is not answered while A holds the room"
    );
    b.set_nonblocking(false).unwrap();
    // A completes: both are answered, in turn.
    send_raw(&mut a, &fa[fa.len() / 2..]);
    for s in [&mut a, &mut b] {
        let (_, r) = read_frame(s).unwrap();
        assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    }
    let peak = server.stats().in_flight_bytes_peak.load(std::sync::atomic::Ordering::Relaxed);
    assert!(peak <= bound, "at most {bound} bytes held at once, saw {peak}");
    assert_eq!(engine.server_stats().commits, 3);
    drop((a, b, setup));
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
