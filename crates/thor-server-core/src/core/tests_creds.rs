//! Scenario tests of who may say what to a server: scoped credentials, revocation, peers that
//! are not clients, prepares naming servers this one does not know, and versions enforced.

use bytes::Bytes;
use thor_core::{PageId, ServerId};
use thor_wire::{
    CLIENT_TIE_BIT, Commit, ErrorCode, Hello, Participant, PeerMsg, Prefetch, PrefetchHint,
    Prepare, RefusedCode, Reply, ReplyBody, Request, RequestBody, Stamp, WIRE_VERSION,
};

use super::credentials::{Credentials, Scope};
use super::tests::{
    Harness, class_and_item, commit_body, config, error_code, item_class, refusal, replies_to,
};
use super::*;

const READER: &[u8] = b"reader-secret-0123456789";
const WRITER: &[u8] = b"writer-secret-0123456789";
const OPS: &[u8] = b"operator-secret-01234567";
const PEER2: &[u8] = b"server-2-secret-01234567";
const PEER3: &[u8] = b"server-3-secret-01234567";

fn table(entries: &[(&str, Scope, &[u8])]) -> Credentials {
    let mut c = Credentials::new();
    for (name, scope, secret) in entries {
        c.add(name, *scope, secret).unwrap();
    }
    c
}

/// The usual table: a reader, a writer, an operator and the peer credentials of servers 2, 3.
fn usual() -> Credentials {
    table(&[
        ("reader", Scope::ReadOnly, READER),
        ("writer", Scope::ReadWrite, WRITER),
        ("ops", Scope::Operator, OPS),
        ("server-2", Scope::Peer(ServerId(2)), PEER2),
        ("server-3", Scope::Peer(ServerId(3)), PEER3),
    ])
}

/// Server 1 with `credentials`, knowing server 2 as its peer.
fn server(credentials: Credentials) -> Harness {
    let mut cfg = config();
    cfg.protocol.credentials = credentials;
    cfg.twopc.peers = vec![ServerId(2)];
    Harness::with_id(cfg, ServerId(1))
}

/// Opens `conn` with `token` speaking versions `lo..=hi`; returns the reply to `Hello`.
fn hello(h: &mut Harness, conn: ConnId, token: &[u8], lo: u16, hi: u16) -> Reply {
    h.step(Input::Connect { conn });
    let mut hello = Hello::new(token.to_vec(), "creds");
    hello.min_version = lo;
    hello.max_version = hi;
    h.request(conn, 1, RequestBody::Hello(hello))
}

/// Sends one request and settles; returns its reply and whether the session closed.
fn ask(h: &mut Harness, conn: ConnId, id: u64, body: RequestBody) -> (Reply, bool) {
    ask_req(h, conn, id, Request::new(body))
}

fn ask_req(h: &mut Harness, conn: ConnId, id: u64, req: Request) -> (Reply, bool) {
    h.step(Input::Request { conn, id, req });
    let mut r = replies_to(&h.settle(), conn);
    assert_eq!(r.len(), 1, "one reply: {r:?}");
    let (rid, reply, close) = r.remove(0);
    assert_eq!(rid, id);
    (reply, close)
}

/// Asserts `Forbidden` with the session left open.
fn assert_forbidden((reply, close): (Reply, bool), needle: &str) {
    assert_eq!(error_code(&reply), Some(ErrorCode::Forbidden), "{reply:?}");
    let ReplyBody::Error { message, .. } = &reply.body else { unreachable!() };
    assert!(message.contains(needle), "{message:?} names {needle:?}");
    assert!(!close, "Forbidden leaves the session open");
}

fn is_page(r: &Reply) -> bool {
    matches!(r.body, ReplyBody::Page { .. })
}

fn stamp(now: u64) -> Stamp {
    Stamp { time_us: now, tie: CLIENT_TIE_BIT | 5 }
}

fn prepare(stamp: Stamp, co: Option<u32>, parts: &[(u32, bool)], commit: Commit) -> RequestBody {
    RequestBody::Prepare(Box::new(Prepare {
        stamp,
        coordinator: co.map(ServerId),
        participants: parts
            .iter()
            .map(|&(s, writes)| Participant { server: ServerId(s), writes })
            .collect(),
        commit,
    }))
}

/// A new version of item `item` (class `class`): its reference cleared.
fn rewrite(class: thor_core::Oref, item: thor_core::Oref) -> Commit {
    Commit {
        reads: vec![item],
        versions: vec![(item, Bytes::from(item_class().new_object(class.raw(), 0)))],
        created: vec![],
        id: None,
        leaves: Vec::new(),
    }
}

#[test]
fn read_only_credential_cannot_commit() {
    let mut h = server(usual());
    h.connect(1, WRITER);
    let (class, item) = class_and_item(&mut h, 1);
    assert!(matches!(hello(&mut h, 2, READER, 1, WIRE_VERSION).body, ReplyBody::HelloOk(_)));
    let lsn = h.core.next_lsn();
    // A commit that writes (a new version, or a created object) is refused before anything is
    // validated or logged, and the session stays open.
    assert_forbidden(ask(&mut h, 2, 2, RequestBody::Commit(rewrite(class, item))), "read-write");
    let create = commit_body(vec![], vec![item_class().new_object(class.raw(), 0)]);
    assert_forbidden(ask(&mut h, 2, 3, create), "Commit that writes");
    let (page, close) = ask(&mut h, 2, 4, RequestBody::Fetch { page: item.page().unwrap() });
    assert!(is_page(&page) && !close, "the reader still reads: {page:?}");
    // A prepare that writes here is a write too, even with nothing in it.
    let p = prepare(stamp(h.now), Some(2), &[(1, true), (2, true)], Commit::default());
    assert_forbidden(ask(&mut h, 2, 5, p), "Prepare that writes");
    assert_eq!(h.core.next_lsn(), lsn, "nothing was logged");
    // A read-only commit is a read: validated like any other and answered at once with the
    // last durable LSN, never logged.
    let before = h.core.stats().read_only_commits;
    let read = Commit { reads: vec![item], ..Commit::default() };
    let (ok, close) = ask(&mut h, 2, 6, RequestBody::Commit(read));
    let ReplyBody::CommitOk { created, .. } = ok.body else { panic!("{ok:?}") };
    assert!(created.is_empty() && !close);
    assert_eq!(h.core.stats().read_only_commits, before + 1);
    assert_eq!(h.core.next_lsn(), lsn, "a read-only commit is not logged");
    // The writer's commit goes through.
    let (ok, _) = ask(&mut h, 1, 7, RequestBody::Commit(rewrite(class, item)));
    assert!(matches!(ok.body, ReplyBody::CommitOk { .. }), "{ok:?}");
    assert_eq!(h.core.server_stats().auth_failures, 0);
    assert_eq!(h.core.stats().requests_forbidden, 3);
}

#[test]
fn forbidden_on_a_connection_older_than_the_code_is_unauthenticated() {
    let mut h = server(usual());
    h.connect(1, WRITER);
    let (class, item) = class_and_item(&mut h, 1);
    // Version 4 has no `Forbidden`: the nearest code it knows, and the session closes.
    assert!(matches!(hello(&mut h, 2, READER, 1, 4).body, ReplyBody::HelloOk(i) if i.version == 4));
    let (r, close) = ask(&mut h, 2, 2, RequestBody::Commit(rewrite(class, item)));
    assert_eq!(error_code(&r), Some(ErrorCode::Unauthenticated), "{r:?}");
    assert!(close);
}

#[test]
fn operator_scope_needed_for_backup_and_stats() {
    let mut h = server(usual());
    for (conn, token) in [(1, READER), (2, WRITER), (3, OPS)] {
        h.connect(conn, token);
    }
    for conn in [1, 2] {
        assert_forbidden(ask(&mut h, conn, 10, RequestBody::Stats), "an operator credential");
        let backup = RequestBody::Backup { path: "copy".into() };
        h.step(Input::Request { conn, id: 11, req: Request::new(backup) });
        assert!(
            !h.pending.iter().any(|e| matches!(e, Effect::Backup { .. })),
            "no backup is asked of the driver"
        );
        let (_, reply, close) = replies_to(&h.settle(), conn).remove(0);
        assert_forbidden((reply, close), "Backup");
        let (page, _) = ask(&mut h, conn, 12, RequestBody::Fetch { page: PageId::FIRST });
        assert!(is_page(&page), "the session goes on");
    }
    let (stats, _) = ask(&mut h, 3, 20, RequestBody::Stats);
    assert!(matches!(stats.body, ReplyBody::Stats(_)), "{stats:?}");
    h.step(Input::Request {
        conn: 3,
        id: 21,
        req: Request::new(RequestBody::Backup { path: "copy".into() }),
    });
    assert!(
        h.pending.iter().any(|e| matches!(e, Effect::Backup { conn: 3, id: 21, .. })),
        "the operator's backup goes to the driver"
    );
}

#[test]
fn revoked_credential_is_refused() {
    let alice: &[u8] = b"alice-secret-0123456789a";
    let bob: &[u8] = b"bob-secret-0123456789abc";
    let carol: &[u8] = b"carol-secret-0123456789a";
    let mut h =
        server(table(&[("alice", Scope::ReadWrite, alice), ("bob", Scope::ReadWrite, bob)]));
    h.connect(1, alice);
    h.connect(2, bob);
    let (class, item) = class_and_item(&mut h, 2);
    // Alice is revoked and Carol added: Alice's open session is told and closed at once.
    let next = table(&[("bob", Scope::ReadWrite, bob), ("carol", Scope::ReadOnly, carol)]);
    h.step(Input::Credentials(next));
    let out = h.settle();
    let r = replies_to(&out, 1);
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!((r[0].0, error_code(&r[0].1), r[0].2), (0, Some(ErrorCode::Unauthenticated), true));
    assert!(replies_to(&out, 2).is_empty(), "Bob's session is untouched");
    assert!(is_page(&ask(&mut h, 2, 3, RequestBody::Fetch { page: PageId::FIRST }).0));
    // Alice cannot come back; Carol can.
    let r = hello(&mut h, 3, alice, 1, WIRE_VERSION);
    assert_eq!(error_code(&r), Some(ErrorCode::Unauthenticated), "{r:?}");
    assert!(matches!(hello(&mut h, 4, carol, 1, WIRE_VERSION).body, ReplyBody::HelloOk(_)));
    // Bob keeps his secret but loses write: his open session has the new scope at once.
    let demoted = table(&[("bob", Scope::ReadOnly, bob), ("carol", Scope::ReadOnly, carol)]);
    h.step(Input::Credentials(demoted));
    assert!(h.settle().is_empty(), "nobody is closed");
    assert_forbidden(ask(&mut h, 2, 5, RequestBody::Commit(rewrite(class, item))), "read-write");
    // A new secret for Bob's name revokes the old one (and Carol, left out, goes too).
    let bob2: &[u8] = b"bob-secret-2-0123456789a";
    h.step(Input::Credentials(table(&[("bob", Scope::ReadWrite, bob2)])));
    let out = h.settle();
    for conn in [2, 4] {
        let r = replies_to(&out, conn);
        let got = (r[0].0, error_code(&r[0].1), r[0].2);
        assert_eq!(got, (0, Some(ErrorCode::Unauthenticated), true), "connection {conn}");
    }
    h.connect(6, bob2);
    assert_eq!(h.core.server_stats().auth_failures, 1);
    assert_eq!(h.core.stats().sessions_revoked, 3, "Alice, then Bob and Carol");
}

#[test]
fn peer_message_on_client_connection_is_refused() {
    let mut h = server(usual());
    h.connect(1, OPS);
    h.connect(2, PEER2);
    // (At a timestamp above the threshold the open raised: one below it could never commit
    // here, and a query about it would be answered abort at once.)
    let query = RequestBody::Peer(PeerMsg::Query { stamp: stamp(5_000), from: ServerId(2) });
    // A client, even an operator, cannot speak as a server: nothing happens (a query about a
    // transaction this server does not coordinate would count as an early yes vote).
    assert_forbidden(ask(&mut h, 1, 2, query.clone()), "peer credential of server 2");
    assert_eq!(h.core.twopc_stats().coordinating, 0);
    // A peer is no client either.
    assert_forbidden(ask(&mut h, 2, 3, RequestBody::Fetch { page: PageId::FIRST }), "Fetch");
    let c = Commit { reads: vec![thor_core::builtin::ROOT], ..Commit::default() };
    assert_forbidden(ask(&mut h, 2, 4, RequestBody::Commit(c)), "Commit");
    assert_forbidden(ask(&mut h, 2, 5, RequestBody::Stats), "Stats");
    // Server 2 with its own credential is heard.
    assert_eq!(ask(&mut h, 2, 6, query).0.body, ReplyBody::Ack);
    assert_eq!(h.core.twopc_stats().coordinating, 1, "its vote is remembered");
}

#[test]
fn peer_claiming_another_id_is_refused() {
    let mut h = server(usual());
    h.connect(2, PEER2);
    h.connect(3, PEER3);
    // Above the threshold the open raised (a vote below it is answered abort at once).
    let vote = |from| RequestBody::Peer(PeerMsg::Vote { stamp: stamp(5_000), from, yes: true });
    // Server 2's credential speaking as server 3 (or as this server).
    assert_forbidden(ask(&mut h, 2, 2, vote(ServerId(3))), "peer credential of server 3");
    assert_forbidden(ask(&mut h, 2, 3, vote(ServerId(1))), "peer credential of server 1");
    // Server 3's own credential, but this server does not know server 3 (no --peer for it).
    assert_forbidden(ask(&mut h, 3, 4, vote(ServerId(3))), "does not know server 3");
    assert_eq!(h.core.twopc_stats().coordinating, 0, "no vote was taken");
    // The single token may speak as any server this one knows, and only those.
    let mut cfg = config();
    cfg.protocol.token = b"cluster".to_vec();
    cfg.twopc.peers = vec![ServerId(2)];
    let mut h = Harness::with_id(cfg, ServerId(1));
    h.connect(1, b"cluster");
    assert_forbidden(ask(&mut h, 1, 2, vote(ServerId(3))), "does not know server 3");
    assert_eq!(ask(&mut h, 1, 3, vote(ServerId(2))).0.body, ReplyBody::Ack);
    assert_eq!(h.core.twopc_stats().coordinating, 1, "the early vote is remembered");
    // Messages a driver delivers directly are held to the same list.
    let msg = PeerMsg::Vote { stamp: stamp(9_000), from: ServerId(4), yes: true };
    h.step(Input::Peer { msg });
    h.settle();
    assert_eq!(h.core.twopc_stats().coordinating, 1, "server 4 is unknown");
}

#[test]
fn prepare_with_unknown_coordinator_is_refused() {
    // A server with no peers at all (the case of issue 30: it used to hold the part in doubt
    // for ever, refusing every later transaction on its objects).
    let mut h = Harness::with_id(config(), ServerId(1));
    h.connect(1, b"");
    let (class, item) = class_and_item(&mut h, 1);
    let lsn = h.core.next_lsn();
    let now = h.now + 300_000;
    h.now = now;
    let cases = [
        (Some(2), vec![(1, true), (2, true)], "its coordinator, server 2"),
        (Some(1), vec![(1, true), (3, false)], "a participant, server 3"),
        (Some(2), vec![(1, false), (2, true)], "its coordinator, server 2"),
    ];
    for (i, (co, parts, needle)) in cases.into_iter().enumerate() {
        let writes = parts[0].1;
        let commit = if writes {
            rewrite(class, item)
        } else {
            Commit { reads: vec![item], ..Commit::default() }
        };
        let id = 10 + i as u64;
        h.step(Input::Request {
            conn: 1,
            id,
            req: Request::new(prepare(stamp(now), co, &parts, commit)),
        });
        let out = h.settle();
        assert!(!out.iter().any(|e| matches!(e, Effect::Peer { .. })), "nobody is told: {out:?}");
        let r = replies_to(&out, 1);
        assert_eq!(refusal(&r[0].1), Some(RefusedCode::UnknownServer), "case {i}: {r:?}");
        let ReplyBody::CommitRefused { message, .. } = &r[0].1.body else { unreachable!() };
        assert!(message.contains(needle), "case {i}: {message}");
    }
    assert_eq!(h.core.next_lsn(), lsn, "nothing was logged");
    let st = h.core.twopc_stats();
    assert_eq!((st.in_doubt, st.coordinating, st.held_bytes, st.counters.prepared), (0, 0, 0, 0));
    // The objects are free at once: a commit on them is not held up by a part in doubt.
    h.now += 1;
    let (ok, _) = ask(&mut h, 1, 20, RequestBody::Commit(rewrite(class, item)));
    assert!(matches!(ok.body, ReplyBody::CommitOk { .. }), "{ok:?}");
    // A read-only transaction across servers needs no message between them: still served.
    let read = Commit { reads: vec![item], ..Commit::default() };
    let p = prepare(stamp(h.now + 10), None, &[(1, false), (2, false)], read);
    let (r, _) = ask(&mut h, 1, 21, p);
    assert!(matches!(r.body, ReplyBody::Prepared { .. }), "{r:?}");
    // And after a restart nothing is in doubt.
    let disk = h.disk.clone();
    drop(h);
    let h2 = Harness::open(disk, config());
    assert_eq!(h2.core.twopc_stats().in_doubt, 0);
    // A connection of version 3 or 4 does not know the code: it is told `Other`, same message.
    let mut h = Harness::with_id(config(), ServerId(1));
    assert!(matches!(hello(&mut h, 1, b"", 3, 4).body, ReplyBody::HelloOk(_)));
    h.now += 300_000;
    let p = prepare(stamp(h.now), Some(2), &[(1, true), (2, true)], Commit::default());
    let (r, close) = ask(&mut h, 1, 2, p);
    assert_eq!(refusal(&r), Some(RefusedCode::Other), "{r:?}");
    assert!(!close);
}

#[test]
fn newer_message_on_old_version_is_unknown() {
    let mut h = server(Credentials::new());
    let prefetch = RequestBody::Prefetch(Prefetch {
        page: PageId::FIRST,
        extra: 4,
        hint: PrefetchHint::Following,
    });
    let prep = prepare(stamp(5), None, &[(1, false), (2, false)], Commit::default());
    let peer = RequestBody::Peer(PeerMsg::Query { stamp: stamp(5), from: ServerId(2) });
    let mut demoting = Request::new(RequestBody::Fetch { page: PageId::FIRST });
    demoting.piggyback.demoted = vec![PageId::FIRST];
    let cases: Vec<(u16, Request, &str)> = vec![
        (1, Request::new(prefetch.clone()), "Prefetch needs protocol version 4"),
        (3, Request::new(prefetch.clone()), "Prefetch needs protocol version 4"),
        (1, Request::new(prep.clone()), "Prepare needs protocol version 3"),
        (2, Request::new(peer), "Peer needs protocol version 3"),
        (1, demoting, "Fetch with demotion sections needs protocol version 2"),
    ];
    for (i, (version, req, needle)) in cases.into_iter().enumerate() {
        let conn = 100 + i as u64;
        let r = hello(&mut h, conn, b"", 1, version);
        assert!(matches!(r.body, ReplyBody::HelloOk(info) if info.version == version));
        let before = h.core.stats().fetches;
        let (r, close) = ask_req(&mut h, conn, 2, req);
        assert_eq!(error_code(&r), Some(ErrorCode::UnknownType), "case {i}: {r:?}");
        let ReplyBody::Error { message, .. } = &r.body else { unreachable!() };
        assert!(message.contains(needle), "case {i}: {message}");
        assert!(close, "an unknown type closes the connection");
        assert_eq!(h.core.stats().fetches, before, "case {i}: nothing was served");
    }
    // The same messages on connections that agreed on their versions are served.
    assert!(matches!(hello(&mut h, 1, b"", 1, 4).body, ReplyBody::HelloOk(_)));
    assert!(matches!(ask(&mut h, 1, 2, prefetch).0.body, ReplyBody::Pages(_)));
    assert!(matches!(hello(&mut h, 2, b"", 1, 3).body, ReplyBody::HelloOk(_)));
    h.now += 300_000;
    let prep = prepare(stamp(h.now), None, &[(1, false), (2, false)], Commit::default());
    assert!(matches!(ask(&mut h, 2, 3, prep).0.body, ReplyBody::Prepared { .. }));
}

/// A replica request (wire version 10) as the driver screens it (`Core::screen`): whether it
/// may serve it, and the refusal the core gave otherwise.
fn screen(h: &mut Harness, conn: ConnId, id: u64, body: RequestBody) -> (bool, Vec<Effect>) {
    let mut fx = Vec::new();
    let ok = h.core.screen(conn, id, &Request::new(body), &mut fx);
    (ok, fx)
}

fn raft_to(group: u32) -> RequestBody {
    RequestBody::Replica(thor_wire::ReplicaRequest::Raft(thor_wire::RaftMsg {
        group: ServerId(group),
        from: 2,
        to: 1,
        msg: Bytes::from_static(b"m"),
    }))
}

fn only_reply(fx: Vec<Effect>) -> (u64, Reply, bool) {
    let mut r: Vec<_> = fx
        .into_iter()
        .filter_map(|e| match e {
            Effect::Reply { id, reply, close, .. } => Some((id, reply, close)),
            _ => None,
        })
        .collect();
    assert_eq!(r.len(), 1, "one reply: {r:?}");
    r.remove(0)
}

#[test]
fn replica_requests_need_the_groups_own_peer_credential() {
    const OWN: &[u8] = b"server-1-secret-01234567";
    let mut creds = usual();
    creds.add("server-1", Scope::Peer(ServerId(1)), OWN).unwrap();
    let mut h = server(creds);
    let image = || RequestBody::Replica(thor_wire::ReplicaRequest::ImageBegin { min_lsn: Lsn(0) });
    // A client's credential, and another server's peer credential: Forbidden, session open.
    for (conn, token) in [(1, WRITER), (2, PEER2), (3, OPS)] {
        hello(&mut h, conn, token, 1, WIRE_VERSION);
        for body in [raft_to(1), image()] {
            let (ok, fx) = screen(&mut h, conn, 5, body);
            assert!(!ok);
            let (id, reply, close) = only_reply(fx);
            assert_eq!(id, 5);
            assert_forbidden((reply, close), "peer:1");
        }
    }
    // The group's own credential: admitted, unless a Raft message names another group.
    hello(&mut h, 4, OWN, 1, WIRE_VERSION);
    assert!(screen(&mut h, 4, 6, raft_to(1)).0);
    assert!(screen(&mut h, 4, 7, image()).0);
    let (ok, fx) = screen(&mut h, 4, 8, raft_to(2));
    assert!(!ok);
    let (_, reply, close) = only_reply(fx);
    assert_forbidden((reply, close), "group 2");
}

#[test]
fn replica_requests_are_checked_for_version_and_hello() {
    let mut h = server(Credentials::new());
    // Before Hello.
    h.step(Input::Connect { conn: 1 });
    let (ok, fx) = screen(&mut h, 1, 3, raft_to(1));
    assert!(!ok);
    let (_, reply, close) = only_reply(fx);
    assert_eq!(error_code(&reply), Some(ErrorCode::HelloRequired));
    assert!(close);
    // On a connection that agreed on version 9: an unknown type, closing.
    hello(&mut h, 2, b"", 1, 9);
    let (ok, fx) = screen(&mut h, 2, 3, raft_to(1));
    assert!(!ok);
    let (_, reply, close) = only_reply(fx);
    assert_eq!(error_code(&reply), Some(ErrorCode::UnknownType));
    assert!(close);
    // Handed to the core itself (no transport serves them): an unknown type too.
    hello(&mut h, 3, b"", 1, WIRE_VERSION);
    let (reply, close) = ask(&mut h, 3, 4, raft_to(1));
    assert_eq!(error_code(&reply), Some(ErrorCode::UnknownType), "{reply:?}");
    assert!(close);
}
