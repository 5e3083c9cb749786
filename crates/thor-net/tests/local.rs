//! The in-process transport behaves like a TCP connection without the socket: same handshake,
//! same replies, same limits.

mod common;

use std::sync::Arc;

use common::*;
use thor_core::{PageId, builtin};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, ProtocolConfig};
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

fn handler(config: ProtocolConfig) -> (Db, Arc<Engine>) {
    let db = Db::new();
    let h = db.create_with(config);
    (db, h)
}

#[test]
fn the_local_transport_commits_and_fetches_like_tcp() {
    let (_db, h) = handler(ProtocolConfig::default());
    let mut t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    assert_eq!(t.server().root, builtin::ROOT);
    assert_eq!(t.server().page_size, 4096);
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let objs = commit_ok(
        &mut t,
        vec![],
        vec![item(class.raw(), tag(1), 1, b"a"), item(class.raw(), 0, 2, b"b")],
    );
    let first = read(&mut t, objs[0]);
    assert_eq!(next_of(&first), objs[1].raw());
    // The same bytes as the engine has.
    let page = objs[0].page().unwrap();
    assert_eq!(&fetch(&mut t, page)[..], &h.fetch(page).unwrap()[..]);
    // Pipelining works the same way.
    t.send(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap();
    t.send(&Request::new(RequestBody::Stats)).unwrap();
    assert!(matches!(t.recv().unwrap().body, ReplyBody::Page { .. }));
    assert!(matches!(t.recv().unwrap().body, ReplyBody::Stats(_)));
    assert!(matches!(t.recv(), Err(TransportError::NothingInFlight)));
    // Goodbye ends the session like a closed socket.
    assert_eq!(t.round_trip(&Request::new(RequestBody::Goodbye)).unwrap().body, ReplyBody::Ack);
    assert!(matches!(t.send(&Request::new(RequestBody::Stats)), Err(TransportError::Closed)));
}

#[test]
fn the_local_transport_enforces_tokens_limits_and_frame_sizes() {
    let config = ProtocolConfig {
        token: b"k".to_vec(),
        sessions_max: 1,
        max_frame_bytes: 64 << 10,
        ..ProtocolConfig::default()
    };
    let (_db, h) = handler(config);
    let wrong = ClientConfig { token: b"x".to_vec(), ..ClientConfig::default() };
    match LocalTransport::connect(h.clone(), &wrong) {
        Err(TransportError::Refused { code: ErrorCode::Unauthenticated, .. }) => {}
        other => panic!("{other:?}"),
    }
    let right = ClientConfig { token: b"k".to_vec(), ..ClientConfig::default() };
    let mut t = LocalTransport::connect(h.clone(), &right).unwrap();
    match LocalTransport::connect(h.clone(), &right) {
        Err(TransportError::Refused { code: ErrorCode::Busy, .. }) => {}
        other => panic!("{other:?}"),
    }
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let big: Vec<Vec<u8>> = (0..40).map(|i| item(class.raw(), 0, i, &[1; 2000])).collect();
    assert!(matches!(
        t.round_trip(&commit_req(vec![], big)),
        Err(TransportError::BadRequest(thor_wire::WireError::FrameTooLarge { .. }))
    ));
    drop(t);
    // The slot is free again once the transport is dropped.
    LocalTransport::connect(h, &right).unwrap();
}

/// One thread drives two in-process sessions of an engine without its installer thread, as
/// thor-client's tests do. Session B lost twice on an object and so claimed it (fair retries),
/// and its next request armed the claim; session A's commit of the object is then held back
/// for B, whose commit could only come from this same thread. A's wait ends at the hold
/// bound, by the tick its own wait makes (`Engine::caller_tick_wait`), instead of never.
#[test]
fn a_commit_held_for_a_session_on_the_same_thread_is_released_at_the_hold_bound() {
    let db = Db::new();
    let opts = thor_server::EngineOptions { background_flusher: false, ..opts() };
    let h = Arc::new(Engine::create(db.disk(), opts).unwrap());
    let mut a = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let mut b = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let class = commit_ok(&mut a, vec![], vec![item_class().to_class_object()])[0];
    let x = commit_ok(&mut a, vec![], vec![item(class.raw(), 0, 0, b"x")])[0];
    // B reads x, A writes it, and B's write of its copy is refused: twice.
    for seq in 1..=2 {
        let old = read(&mut b, x);
        commit_ok(&mut a, vec![(x, item(class.raw(), 0, seq * 10, b"x"))], vec![]);
        let r = b.round_trip(&commit_req(vec![(x, old)], vec![])).unwrap();
        assert!(matches!(r.body, ReplyBody::CommitRefused { .. }), "{r:?}");
    }
    assert_eq!(h.server_stats().fair_claims, 1, "B claimed x");
    read(&mut b, x);
    // A writes x again: held back for B, and released when the claim runs out (its hold
    // began when B armed it, just before A's wait; either bound ends A's wait).
    commit_ok(&mut a, vec![(x, item(class.raw(), 0, 99, b"x"))], vec![]);
    assert_eq!(h.server_stats().fair_held, 1, "A's commit was held back");
    assert_eq!(seq_of(&read(&mut a, x)), 99);
}
