//! Scenario tests of resuming sessions (`super::resume`): seen stamps on replies, a cache
//! kept or dropped on a new connection, and the outcome of a commit whose answer was lost.

use bytes::Bytes;
use thor_core::{Oref, PageId};
use thor_wire::{
    CacheVerdict, Commit, ErrorCode, Hello, Outcome, Reply, ReplyBody, Request, RequestBody,
    Resume, Resumed, SeenRange,
};

use super::tests::{Harness, config, item_of, replies_to, two_items, txn};
use super::*;

/// The seen stamp of a reply (version 5).
fn seen(r: &Reply) -> SeenRange {
    let s = r.seen.expect("a version-5 reply carries the seen section");
    assert!(s.complete, "every invalidation was on it or before: {r:?}");
    SeenRange { high: s.stamp, complete: s.stamp }
}

fn resume(
    key: u64,
    seen: Option<SeenRange>,
    commit: Option<u64>,
    pages: Vec<PageId>,
) -> RequestBody {
    RequestBody::Resume(Resume { key, seen, commit, pages })
}

fn resumed(r: &Reply) -> Resumed {
    match &r.body {
        ReplyBody::Resumed(x) => x.clone(),
        other => panic!("{other:?}"),
    }
}

fn commit_with_id(id: u64, versions: Vec<(Oref, Vec<u8>)>, created: Vec<Vec<u8>>) -> RequestBody {
    RequestBody::Commit(Commit {
        reads: vec![],
        versions: versions.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
        created: created.into_iter().map(Bytes::from).collect(),
        id: Some(id),
        leaves: Vec::new(),
    })
}

fn page(o: Oref) -> PageId {
    o.page().unwrap()
}

#[test]
fn replies_of_version_5_carry_the_newest_change() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let before = seen(&h.request(1, 2, RequestBody::Abort)).high;
    let r = h.request(1, 3, txn(class, &[], &[x], 5));
    let ReplyBody::CommitOk { lsn, .. } = r.body else { panic!("{r:?}") };
    let after = seen(&r).high;
    assert_eq!(after.lsn, lsn, "the commit's own reply names it");
    assert_ne!(after, before);
    // A client of version 4 hears nothing of it.
    h.step(Input::Connect { conn: 2 });
    let old = Hello { max_version: 4, ..Hello::new(&b""[..], "old") };
    let r = h.request(2, 1, RequestBody::Hello(old));
    assert!(matches!(r.body, ReplyBody::HelloOk(_)) && r.seen.is_none(), "{r:?}");
    assert!(h.request(2, 2, RequestBody::Abort).seen.is_none());
}

#[test]
fn a_resumed_session_is_told_what_changed_on_its_pages_while_away() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, y) = two_items(&mut h, 1);
    // Client A fetches the page of x and y, then its connection breaks.
    h.connect(2, b"");
    let r = h.request(2, 2, RequestBody::Fetch { page: page(x) });
    let stamp = seen(&r);
    h.step(Input::Disconnect { conn: 2 });
    // Meanwhile x changes.
    h.request(1, 3, txn(class, &[], &[x], 5));
    // A resumes on connection 3, saying it holds that page: x is invalidated, y is not.
    h.connect(3, b"");
    let r = h.request(3, 2, resume(9, Some(stamp), None, vec![page(x)]));
    assert_eq!(resumed(&r), Resumed { cache: CacheVerdict::Kept, outcome: None });
    assert_eq!(r.invalidations, vec![x]);
    assert!(r.seen.unwrap().complete);
    // The page is in its directory from now on: a change to y reaches it.
    h.request(1, 4, txn(class, &[], &[y], 6));
    assert_eq!(h.request(3, 3, RequestBody::Abort).invalidations, vec![y]);
    // A client that says it holds nothing of the page hears of neither.
    h.connect(4, b"");
    let r = h.request(4, 2, resume(10, Some(stamp), None, vec![]));
    assert_eq!(resumed(&r).cache, CacheVerdict::Kept);
    assert!(r.invalidations.is_empty());
    assert_eq!(h.core.resume.counters.caches_kept, 2);
}

#[test]
fn a_cache_is_kept_across_a_crash_when_the_log_holds_the_clients_stamp() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, y) = two_items(&mut h, 1);
    h.connect(2, b"");
    let stamp = seen(&h.request(2, 2, RequestBody::Fetch { page: page(x) }));
    h.request(1, 3, txn(class, &[], &[y], 5));
    // The server crashes; recovery replays the log, and the history with it.
    let mut h = Harness::open(h.disk.clone(), config());
    h.connect(3, b"");
    let r = h.request(3, 2, resume(9, Some(stamp), None, vec![page(x)]));
    assert_eq!(resumed(&r).cache, CacheVerdict::Kept);
    assert_eq!(r.invalidations, vec![y]);
    // Nothing changed since: a stamp of the replayed history keeps everything.
    let now = seen(&r);
    h.connect(4, b"");
    let r = h.request(4, 2, resume(10, Some(now), None, vec![page(x)]));
    assert_eq!(resumed(&r).cache, CacheVerdict::Kept);
    assert!(r.invalidations.is_empty());
}

/// A copy of every durable file of `disk` (as a backup holds), on a new disk.
fn copy_of(disk: &super::testdisk::Disk) -> super::testdisk::Disk {
    std::rc::Rc::new(std::cell::RefCell::new(disk.borrow().durable_copy()))
}

#[test]
fn a_stamp_from_another_history_drops_the_cache() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let backup = copy_of(&h.disk);
    // The original goes on: x becomes 5, and client A sees that.
    h.request(1, 3, txn(class, &[], &[x], 5));
    h.connect(2, b"");
    let stamp = seen(&h.request(2, 2, RequestBody::Fetch { page: page(x) }));
    // The database is replaced by the backup, which goes on differently at the same LSNs.
    let mut r = Harness::open(backup, config());
    r.now = h.now + 1_000;
    r.connect(1, b"");
    let c = r.request(1, 3, txn(class, &[], &[x], 7));
    let ReplyBody::CommitOk { lsn, .. } = c.body else { panic!("{c:?}") };
    assert_eq!(lsn, stamp.high.lsn, "the same LSN in both histories");
    r.connect(3, b"");
    let reply = r.request(3, 2, resume(9, Some(stamp), None, vec![page(x)]));
    assert_eq!(resumed(&reply).cache, CacheVerdict::Dropped);
    assert!(reply.invalidations.is_empty(), "nothing promised: the client drops it all");
    // A change to the page later is not announced to it either: its directory is empty.
    r.request(1, 4, txn(class, &[], &[x], 8));
    assert!(r.request(3, 3, RequestBody::Abort).invalidations.is_empty());
}

#[test]
fn a_clean_shutdown_leaves_no_history_to_resume_from() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    h.request(1, 3, txn(class, &[], &[x], 5));
    h.connect(2, b"");
    let stamp = seen(&h.request(2, 2, RequestBody::Fetch { page: page(x) }));
    // Everything installed and the log truncated, as a close does.
    h.step(Input::Direct { ticket: 1, op: DirectOp::FlushRound });
    h.settle();
    let mut h = Harness::open(h.disk.clone(), config());
    h.connect(3, b"");
    let r = h.request(3, 2, resume(9, Some(stamp), None, vec![page(x)]));
    assert_eq!(resumed(&r).cache, CacheVerdict::Dropped);
}

#[test]
fn the_outcome_of_a_commit_whose_answer_was_lost_is_learned() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    // Client A registers its session and commits with an id; the answer is lost.
    h.connect(2, b"");
    let stamp = seen(&h.request(2, 2, resume(42, None, None, vec![])));
    let r =
        h.request(2, 3, commit_with_id(77, vec![(x, item_of(class, 5))], vec![item_of(class, 6)]));
    let ReplyBody::CommitOk { lsn, created } = r.body else { panic!("{r:?}") };
    h.step(Input::Disconnect { conn: 2 });
    h.connect(3, b"");
    let r = h.request(3, 2, resume(42, Some(stamp), Some(77), vec![page(x)]));
    let got = resumed(&r);
    assert_eq!(got.outcome, Some(Outcome::Committed { lsn, created: created.clone() }));
    // Its own write comes as an invalidation: the client's cache went back to before it.
    assert_eq!(r.invalidations, vec![x]);
    // A commit that never arrived did not commit, and never will.
    h.connect(4, b"");
    let r = h.request(4, 2, resume(43, Some(stamp), Some(78), vec![]));
    assert_eq!(resumed(&r).outcome, Some(Outcome::NotCommitted));
    // After a crash the id is read back from the log.
    let mut h = Harness::open(h.disk.clone(), config());
    h.connect(5, b"");
    let r = h.request(5, 2, resume(42, None, Some(77), vec![]));
    assert_eq!(resumed(&r).outcome, Some(Outcome::Committed { lsn, created }));
    // The stamp is a change the log held: a missing id after it did not commit.
    h.connect(6, b"");
    let r = h.request(6, 2, resume(44, Some(stamp), Some(79), vec![]));
    assert_eq!(resumed(&r).outcome, Some(Outcome::NotCommitted));
    // Without a point of the history, a missing id is unknown.
    let elsewhere = thor_wire::HistoryPoint { lsn: stamp.high.lsn, mark: stamp.high.mark ^ 1 };
    let other = SeenRange { high: elsewhere, complete: elsewhere };
    h.connect(7, b"");
    let r = h.request(7, 2, resume(45, Some(other), Some(79), vec![]));
    assert_eq!(
        resumed(&r),
        Resumed { cache: CacheVerdict::Dropped, outcome: Some(Outcome::Unknown) }
    );
}

#[test]
fn a_resume_closes_the_old_connection_and_waits_for_what_it_prepared() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, y) = two_items(&mut h, 1);
    // Client A's old connection is still open here (the server did not see it break): one
    // commit of it is prepared and not yet durable, a second one waits behind it.
    h.connect(2, b"");
    let stamp = seen(&h.request(2, 2, resume(42, None, None, vec![])));
    h.connect(3, b"");
    h.step(Input::Request {
        conn: 2,
        id: 3,
        req: Request::new(commit_with_id(80, vec![(x, item_of(class, 1))], vec![])),
    });
    h.step(Input::Request {
        conn: 2,
        id: 4,
        req: Request::new(commit_with_id(81, vec![(y, item_of(class, 2))], vec![])),
    });
    // A resumes on a new connection and asks about the second one.
    h.step(Input::Request {
        conn: 3,
        id: 2,
        req: Request::new(resume(42, Some(stamp), Some(81), vec![])),
    });
    let out = h.settle();
    // The old connection is told why and closed; its prepared commit completed, the one
    // behind it did not.
    let old = replies_to(&out, 2);
    let closed = old.iter().find(|(id, _, _)| *id == 0).expect("the old connection is closed");
    assert!(
        closed.2
            && matches!(closed.1.body, ReplyBody::Error { code: ErrorCode::SessionExpired, .. })
    );
    let new = replies_to(&out, 3);
    assert_eq!(new.len(), 1, "{out:?}");
    assert_eq!(resumed(&new[0].1).outcome, Some(Outcome::NotCommitted));
    // The first one committed: asking about it says so.
    h.connect(4, b"");
    let r = h.request(4, 2, resume(42, Some(stamp), Some(80), vec![]));
    assert!(matches!(resumed(&r).outcome, Some(Outcome::Committed { .. })), "{r:?}");
    // A request of the old connection that arrives now is refused, never committed.
    h.step(Input::Request {
        conn: 2,
        id: 5,
        req: Request::new(commit_with_id(82, vec![(y, item_of(class, 3))], vec![])),
    });
    let out = h.settle();
    assert!(replies_to(&out, 2).iter().all(|(_, r, _)| matches!(r.body, ReplyBody::Error { .. })));
    h.connect(5, b"");
    let r = h.request(5, 2, resume(42, Some(stamp), Some(82), vec![]));
    assert_eq!(resumed(&r).outcome, Some(Outcome::NotCommitted));
    assert_eq!(h.core.resume.counters.fenced, 3, "each resume closed the one before");
}

/// Whether a reply says settled (version 7): a read-only transaction may commit at the client.
fn settled(r: &Reply) -> bool {
    r.seen.expect("a version-5 reply carries the seen section").settled
}

#[test]
fn a_server_without_peers_says_settled_to_clients_of_version_7() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    assert!(settled(&h.request(1, 2, RequestBody::Abort)));
    assert!(settled(&h.request(1, 3, txn(class, &[], &[x], 5))), "a commit's reply too");
    // A client of version 6 cannot read the bit: it is never set on its replies.
    h.step(Input::Connect { conn: 2 });
    let old = Hello { max_version: 6, ..Hello::new(&b""[..], "old") };
    let r = h.request(2, 1, RequestBody::Hello(old));
    assert!(matches!(r.body, ReplyBody::HelloOk(_)) && !settled(&r), "{r:?}");
    assert!(!settled(&h.request(2, 2, RequestBody::Abort)));
}

#[test]
fn a_server_with_peers_never_says_settled() {
    let mut cfg = config();
    cfg.twopc.peers = vec![thor_core::ServerId(8)];
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    assert!(!settled(&h.request(1, 2, RequestBody::Abort)));
    assert!(!settled(&h.request(1, 3, txn(class, &[], &[x], 5))));
}

/// A writing part's timestamp is its client's. On a server with no peers (which says
/// settled) such a part can only name this server alone; one whose timestamp is at or below
/// a timestamp given out before a settled reply would be serialized before a state a client
/// may have committed a read-only transaction on, so it is refused.
#[test]
fn a_writing_part_below_what_a_settled_reply_covered_is_refused() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    h.now += 1_000_000;
    h.request(1, 2, txn(class, &[], &[x], 5));
    assert!(settled(&h.request(1, 3, RequestBody::Abort)));
    let (threshold, last) = (h.core.cc.threshold(), h.core.cc.last_ts());
    assert!(last.time_us > threshold.time_us + 1, "{threshold:?} {last:?}");
    let me = h.core.store.superblock().server_id;
    let stamp = thor_wire::Stamp { time_us: last.time_us - 1, tie: thor_wire::CLIENT_TIE_BIT | 3 };
    let versions = vec![(x, Bytes::from(item_of(class, 6)))];
    let p = thor_wire::Prepare {
        stamp,
        coordinator: Some(me),
        participants: vec![thor_wire::Participant { server: me, writes: true }],
        commit: Commit { reads: vec![x], versions, created: vec![], id: None, leaves: Vec::new() },
    };
    let r = h.request(1, 4, RequestBody::Prepare(Box::new(p.clone())));
    assert_eq!(super::tests::refusal(&r), Some(thor_wire::RefusedCode::TooOld), "{r:?}");
    // Above it, the same part commits.
    let later = thor_wire::Stamp { time_us: h.now + 10, ..stamp };
    let r =
        h.request(1, 5, RequestBody::Prepare(Box::new(thor_wire::Prepare { stamp: later, ..p })));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
}
