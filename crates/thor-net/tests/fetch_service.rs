//! The TCP server times each fetch it serves (`ServerStats::fetch_service_ns`,
//! `fetches_served`), so that a client can tell the server's share of a fetch from the
//! network's. Only that the counters move is checked: never a time.

mod common;

use common::*;
use thor_core::PageId;
use thor_net::NetConfig;
use thor_wire::stats::ServerStats;
use thor_wire::{ReplyBody, Request, RequestBody, Transport};

fn stats(t: &mut dyn Transport) -> ServerStats {
    match t.round_trip(&Request::new(RequestBody::Stats)).unwrap().body {
        ReplyBody::Stats(s) => *s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fetch_over_tcp_is_counted_and_timed_as_served_and_other_requests_are_not() {
    let db = Db::new();
    let (_engine, server) = serve(db.create(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    let before = stats(&mut t);
    for _ in 0..3 {
        fetch(&mut t, PageId::FIRST);
    }
    // Pipelined fetches are timed each from its own hand-over.
    for _ in 0..2 {
        t.send(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap();
    }
    for _ in 0..2 {
        assert!(matches!(t.recv().unwrap().body, ReplyBody::Page { .. }));
    }
    let after = stats(&mut t);
    assert_eq!(after.fetches_served - before.fetches_served, 5, "{after:?}");
    assert_eq!(after.fetches - before.fetches, 5);
    assert!(after.fetch_service_ns > before.fetch_service_ns, "{after:?}");
    // The Stats requests themselves are not fetches.
    let again = stats(&mut t);
    assert_eq!(again.fetches_served, after.fetches_served);
    drop(t);
    server.shutdown().unwrap();
}
