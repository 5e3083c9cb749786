//! Scenario tests of prefetch at the server (`super::prefetch`): which pages a `Prefetch`
//! reply carries, and that each is registered for invalidations exactly as a fetched page.

use bytes::Bytes;
use thor_core::le::put_u32;
use thor_core::{ClassDesc, Oref, PageId, RawRef, VarKind, builtin};
use thor_wire::{Prefetch, PrefetchHint, Reply, ReplyBody, Request, RequestBody};

use super::tests::{Harness, config, refusal, replies_to};
use super::*;

/// Payload bytes of a filler object: one to a 4 KiB page.
const BIG_BYTES: u32 = 3000;

/// The database of these tests: a hub (a `thor.Refs`) that refers to the fillers 5, 3, 5, 2,
/// 3, 5 and to 1, and five fillers of one page each after it. Returns the hub and the fillers
/// (index 0 is unused: `big[i]` is filler i).
fn hub_and_fillers(h: &mut Harness) -> (Oref, Vec<Oref>) {
    h.connect(1, b"");
    let big = ClassDesc::new("t.Big", 8, &[0], VarKind::Bytes).unwrap();
    let r = h.commit_body_of(1, 2, vec![], vec![big.to_class_object()]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    let class = created[0];
    let refs = builtin::desc(builtin::REFS).unwrap();
    let targets = [5u32, 3, 5, 2, 3, 5, 1];
    let mut hub = refs.new_object(builtin::REFS.raw(), targets.len());
    for (k, t) in targets.iter().enumerate() {
        // Created object t of this commit (the hub is 0).
        put_u32(&mut hub, refs.var_offset() + 4 * k, RawRef::tagged_word(*t));
    }
    let mut objs = vec![hub];
    objs.extend((1..=5).map(|_| big.new_object(class.raw(), BIG_BYTES as usize)));
    let r = h.commit_body_of(1, 3, vec![], objs);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    (created[0], created)
}

fn page(o: Oref) -> PageId {
    o.page().unwrap()
}

fn prefetch(page: PageId, extra: u16, hint: PrefetchHint) -> RequestBody {
    RequestBody::Prefetch(Prefetch { page, extra, hint })
}

fn pages_of(r: &Reply) -> Vec<PageId> {
    match &r.body {
        ReplyBody::Pages(pages) => pages.iter().map(|(p, _)| *p).collect(),
        other => panic!("{other:?}"),
    }
}

impl Harness {
    fn commit_body_of(
        &mut self,
        conn: ConnId,
        id: u64,
        versions: Vec<(Oref, Vec<u8>)>,
        created: Vec<Vec<u8>>,
    ) -> Reply {
        let body = RequestBody::Commit(thor_wire::Commit {
            reads: vec![],
            versions: versions.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
            created: created.into_iter().map(Bytes::from).collect(),
            id: None,
            leaves: Vec::new(),
        });
        self.request(conn, id, body)
    }
}

#[test]
fn prefetch_sends_the_pages_the_asked_page_refers_to_most_referred_first() {
    let mut h = Harness::new(config());
    let (hub, big) = hub_and_fillers(&mut h);
    h.connect(2, b"");
    let r = h.request(2, 4, prefetch(page(hub), 8, PrefetchHint::Referenced));
    // Filler 1 may share the hub's page; the page asked for is never sent twice.
    let mut expected = vec![page(hub), page(big[5]), page(big[3]), page(big[2])];
    if page(big[1]) != page(hub) {
        expected.push(page(big[1]));
    }
    assert_eq!(pages_of(&r), expected);
    // Each page is what a fetch gives.
    let ReplyBody::Pages(pages) = r.body else { unreachable!() };
    h.connect(3, b"");
    for (i, (p, bytes)) in pages.iter().enumerate() {
        let f = h.request(3, 10 + i as u64, RequestBody::Fetch { page: *p });
        assert_eq!(f.body, ReplyBody::Page { page: *p, bytes: bytes.clone() });
    }
    // At most `extra`.
    let r = h.request(2, 5, RequestBody::Stats);
    assert!(r.invalidations.is_empty());
    h.connect(4, b"");
    let r = h.request(4, 2, prefetch(page(hub), 1, PrefetchHint::Referenced));
    assert_eq!(pages_of(&r), vec![page(hub), page(big[5])]);
    let st = h.core.server_stats();
    assert_eq!(st.prefetch_requests, 2);
    assert_eq!(st.pages_prefetched, expected.len() as u64 - 1 + 1);
}

#[test]
fn prefetch_sends_no_page_the_client_may_cache() {
    let mut h = Harness::new(config());
    let (hub, big) = hub_and_fillers(&mut h);
    h.connect(2, b"");
    h.request(2, 4, RequestBody::Fetch { page: page(big[5]) });
    let r = h.request(2, 5, prefetch(page(hub), 2, PrefetchHint::Referenced));
    assert_eq!(pages_of(&r), vec![page(hub), page(big[3]), page(big[2])], "5 is cached");
    // The client drops filler 5's and 3's pages: reported on the request itself, they are
    // gone from the directory before the prefetch is chosen, and come again.
    let pb =
        thor_wire::Piggyback { discarded: vec![page(big[5]), page(big[3])], ..Default::default() };
    h.step(Input::Request {
        conn: 2,
        id: 6,
        req: Request { body: prefetch(page(hub), 2, PrefetchHint::Referenced), piggyback: pb },
    });
    let r = replies_to(&h.settle(), 2).remove(0).1;
    assert_eq!(pages_of(&r), vec![page(hub), page(big[5]), page(big[3])]);
}

#[test]
fn prefetched_pages_are_invalidated_like_fetched_ones() {
    let mut h = Harness::new(config());
    let (hub, big) = hub_and_fillers(&mut h);
    let class = {
        let r = h.request(1, 9, RequestBody::Fetch { page: page(big[3]) });
        let ReplyBody::Page { bytes, .. } = r.body else { panic!() };
        let o = thor_core::PageView::parse(&bytes).unwrap().object(big[3].oid()).unwrap().to_vec();
        thor_core::le::u32_at(&o, 0)
    };
    h.connect(2, b"");
    let r = h.request(2, 4, prefetch(page(hub), 1, PrefetchHint::Referenced));
    assert_eq!(pages_of(&r), vec![page(hub), page(big[5])]);
    // Client 1 changes filler 5 (prefetched by 2) and filler 3 (never sent to 2).
    let big_desc = ClassDesc::new("t.Big", 8, &[0], VarKind::Bytes).unwrap();
    let mut v = big_desc.new_object(class, BIG_BYTES as usize);
    v[8] = 1;
    let r = h.commit_body_of(1, 10, vec![(big[5], v.clone()), (big[3], v)], vec![]);
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let r = h.request(2, 5, RequestBody::Stats);
    assert_eq!(r.invalidations, vec![big[5]], "the prefetched page's change, and only it");
    // A transaction of client 2 that read its stale prefetched copy is refused.
    let r = h.request(
        2,
        6,
        RequestBody::Commit(thor_wire::Commit { reads: vec![big[5]], ..Default::default() }),
    );
    assert_eq!(refusal(&r), Some(thor_wire::RefusedCode::Stale));
}

#[test]
fn prefetch_passes_over_pages_that_need_a_disk_read() {
    let cfg = CoreConfig { page_cache_bytes: 2 * 4096, ..config() };
    let mut h = Harness::new(cfg);
    let (hub, big) = hub_and_fillers(&mut h);
    // Install everything: the two-page cache keeps only the last pages installed.
    h.step(Input::Direct { ticket: 1, op: DirectOp::FlushRound });
    h.settle();
    let cached = h.core.page_cache_order();
    h.connect(2, b"");
    h.step(Input::Request {
        conn: 2,
        id: 4,
        req: Request::new(prefetch(page(hub), 8, PrefetchHint::Referenced)),
    });
    // The hub's page itself is read (the fetch waits for it); no other read is asked for.
    let reads: Vec<PageId> = h
        .pending
        .iter()
        .filter_map(|e| match e {
            Effect::Read { page } => Some(*page),
            _ => None,
        })
        .collect();
    assert!(reads.iter().all(|p| *p == page(hub)), "{reads:?}");
    let r = replies_to(&h.settle(), 2).remove(0).1;
    let got = pages_of(&r);
    assert_eq!(got[0], page(hub));
    for p in &got[1..] {
        assert!(cached.contains(p), "{p:?} was cached: {cached:?}");
    }
    assert!(got.len() < 5, "some referenced pages were not cached: {got:?}");
    assert!(h.core.server_stats().prefetch_uncached > 0);
    // What was passed over is not in client 2's directory; what was sent is.
    for b in &big[1..] {
        assert_eq!(h.core.cc.directory_has(2, page(*b)), got.contains(&page(*b)), "{b:?}");
    }
}

#[test]
fn following_prefetch_sends_the_next_pages_up_to_the_tail_and_the_servers_cap() {
    let mut h = Harness::new(config());
    let (_, big) = hub_and_fillers(&mut h);
    h.connect(2, b"");
    let r = h.request(2, 4, prefetch(page(big[2]), 8, PrefetchHint::Following));
    let tail = h.core.stats().pages_allocated;
    let expected: Vec<PageId> = (page(big[2]).get()..=tail).filter_map(PageId::new).collect();
    assert_eq!(pages_of(&r), expected, "to the tail and no further");
    let cfg = CoreConfig { prefetch_pages_max: 1, ..config() };
    let mut h = Harness::new(cfg);
    let (_, big) = hub_and_fillers(&mut h);
    h.connect(2, b"");
    let r = h.request(2, 4, prefetch(page(big[1]), 8, PrefetchHint::Following));
    assert_eq!(pages_of(&r), vec![page(big[1]), page(big[2])], "the server's cap");
    let cfg = CoreConfig { prefetch_pages_max: 0, ..config() };
    let mut h = Harness::new(cfg);
    let (_, big) = hub_and_fillers(&mut h);
    h.connect(2, b"");
    let r = h.request(2, 4, prefetch(page(big[1]), 8, PrefetchHint::Following));
    assert_eq!(pages_of(&r), vec![page(big[1])], "off at the server: the page alone");
}

#[test]
fn a_prefetch_of_a_missing_page_is_answered_as_a_fetch_is() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let r = h.request(1, 2, prefetch(PageId::new(99).unwrap(), 4, PrefetchHint::Following));
    assert!(
        matches!(r.body, ReplyBody::Error { code: thor_wire::ErrorCode::NoSuchPage, .. }),
        "{r:?}"
    );
    let r = h.request(1, 3, RequestBody::Stats);
    assert!(matches!(r.body, ReplyBody::Stats(_)), "the session stays open");
}
