//! The map leaf merge at validation (`super::leaves`): commits that CLOCC refuses only because
//! another commit changed other keys of a map leaf they wrote are merged; anything else is
//! refused as before.

use bytes::Bytes;
use thor_core::mapnode::{self, COUNT_AT};
use thor_core::{Oref, PageView};
use thor_wire::{Commit, LeafDelta, RefusedCode, Reply, ReplyBody, Request, RequestBody};

use super::tests::{Harness, config, refusal, replies_to, two_items};
use super::*;

/// The entry area of a node in the harness's 4 KiB pages.
fn room() -> usize {
    mapnode::area_bytes(4096)
}

/// A leaf of 8-byte values holding `entries` (keys of two bytes), of class `class`.
fn leaf(class: Oref, entries: &[(u16, u64)]) -> Vec<u8> {
    let d = mapnode::desc();
    let mut obj = d.new_object(class.raw(), room());
    let vals: Vec<([u8; 2], [u8; 8])> =
        entries.iter().map(|(k, v)| (k.to_be_bytes(), v.to_le_bytes())).collect();
    let mut area = Vec::new();
    mapnode::encode_area(vals.iter().map(|(k, v)| (&k[..], &v[..])), &mut area);
    obj[COUNT_AT..COUNT_AT + 4].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    let at = d.var_offset();
    obj[at..at + area.len()].copy_from_slice(&area);
    obj
}

fn val(v: u64) -> Option<Bytes> {
    Some(Bytes::from(v.to_le_bytes().to_vec()))
}

/// Commits the map node class and one leaf holding `entries`; returns the class and the leaf.
fn class_and_leaf(h: &mut Harness, entries: &[(u16, u64)]) -> (Oref, Oref) {
    let class_obj = mapnode::desc().to_class_object();
    let r = h.request(1, 40, super::tests::commit_body(vec![], vec![class_obj]));
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    let class = created[0];
    let r = h.request(1, 41, super::tests::commit_body(vec![], vec![leaf(class, entries)]));
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    (class, created[0])
}

/// A commit that read `reads`, writes `bytes` to `leaf` and carries a delta: the keys it read
/// there with what it saw, and its operations.
fn leaf_commit(
    leaf: Oref,
    reads: &[Oref],
    bytes: Vec<u8>,
    seen: &[(u16, Option<Bytes>)],
    ops: &[(u16, Option<Bytes>)],
) -> RequestBody {
    let own = |l: &[(u16, Option<Bytes>)]| {
        l.iter()
            .map(|(k, v)| (Bytes::from(k.to_be_bytes().to_vec()), v.clone()))
            .collect::<Vec<_>>()
    };
    RequestBody::Commit(Commit {
        reads: reads.to_vec(),
        versions: vec![(leaf, Bytes::from(bytes))],
        created: vec![],
        id: None,
        leaves: vec![LeafDelta {
            leaf,
            refs: false,
            vbytes: 8,
            root: true,
            reads: own(seen),
            ops: own(ops),
        }],
    })
}

/// The committed bytes of `o`, as a fetch of its page shows them.
fn fetched(h: &mut Harness, conn: ConnId, id: u64, o: Oref) -> Vec<u8> {
    let r = h.request(conn, id, RequestBody::Fetch { page: o.page().unwrap() });
    let ReplyBody::Page { bytes, .. } = r.body else { panic!("{r:?}") };
    PageView::parse(&bytes).unwrap().object(o.oid()).unwrap().to_vec()
}

fn ok(r: &Reply) -> bool {
    matches!(r.body, ReplyBody::CommitOk { .. })
}

/// Two clients read a leaf {1} and insert different keys: the second commit, refused as
/// stale without the merge, commits with its insert applied to the first's leaf, and its
/// client is told that its copy of the leaf is not the one installed.
#[test]
fn a_commit_refused_only_for_a_leaf_with_a_delta_is_merged() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, l) = class_and_leaf(&mut h, &[(1, 10)]);
    h.request(2, 3, RequestBody::Fetch { page: l.page().unwrap() });
    let a = leaf_commit(l, &[l], leaf(class, &[(1, 10), (2, 20)]), &[(2, None)], &[(2, val(20))]);
    assert!(ok(&h.request(1, 4, a)));
    let b = leaf_commit(l, &[l], leaf(class, &[(1, 10), (3, 30)]), &[(3, None)], &[(3, val(30))]);
    let r = h.request(2, 4, b);
    assert!(ok(&r), "{r:?}");
    assert_eq!(r.invalidations, vec![l], "the committer's copy of the leaf is not installed");
    let st = h.core.stats();
    assert_eq!((st.leaf_merges, st.leaf_merges_refused), (1, 0));
    let wire = h.core.server_stats();
    assert_eq!((wire.leaf_merges, wire.leaf_merges_refused), (1, 0), "thor stats shows them");
    assert_eq!(fetched(&mut h, 1, 5, l), leaf(class, &[(1, 10), (2, 20), (3, 30)]));
    // Without its acknowledgement, a commit that used the stale copy is refused as ever.
    let c = leaf_commit(l, &[l], leaf(class, &[(1, 11)]), &[(1, val(10))], &[(1, val(11))]);
    let mut req = Request::new(c.clone());
    req.piggyback.acks = vec![l];
    h.step(Input::Request { conn: 2, id: 6, req });
    let r = replies_to(&h.settle(), 2).remove(0).1;
    assert!(ok(&r), "acknowledged, it reads the merged leaf: {r:?}");
}

/// The second commit read a key the first changed: no merge, refused as stale.
#[test]
fn a_merge_is_refused_when_a_key_read_changed_meanwhile() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, l) = class_and_leaf(&mut h, &[(1, 10)]);
    h.request(2, 3, RequestBody::Fetch { page: l.page().unwrap() });
    let a = leaf_commit(l, &[l], leaf(class, &[(1, 10), (2, 20)]), &[(2, None)], &[(2, val(20))]);
    assert!(ok(&h.request(1, 4, a)));
    // Client 2 inserts the same key, having seen it absent.
    let b = leaf_commit(l, &[l], leaf(class, &[(1, 10), (2, 21)]), &[(2, None)], &[(2, val(21))]);
    let r = h.request(2, 4, b);
    assert_eq!(refusal(&r), Some(RefusedCode::Stale), "{r:?}");
    let st = h.core.stats();
    assert_eq!((st.leaf_merges, st.leaf_merges_refused), (0, 1));
    assert_eq!(fetched(&mut h, 1, 5, l), leaf(class, &[(1, 10), (2, 20)]));
}

/// A commit stale in an object other than its leaves is refused, delta or not.
#[test]
fn a_stale_read_of_another_object_refuses_a_commit_with_a_delta() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (iclass, x, _) = two_items(&mut h, 1);
    let (class, l) = class_and_leaf(&mut h, &[(1, 10)]);
    for page in [x.page().unwrap(), l.page().unwrap()] {
        h.request(2, 3, RequestBody::Fetch { page });
    }
    // Client 1 changes x and the leaf; client 2 read both and inserts another key.
    let mut a = leaf_commit(l, &[l], leaf(class, &[(1, 10), (2, 20)]), &[(2, None)], &[]);
    if let RequestBody::Commit(c) = &mut a {
        c.versions.push((x, Bytes::from(super::tests::item_of(iclass, 5))));
    }
    assert!(ok(&h.request(1, 4, a)));
    // The leaf is named first, so the merge is tried, and refused for x.
    let b =
        leaf_commit(l, &[l, x], leaf(class, &[(1, 10), (3, 30)]), &[(3, None)], &[(3, val(30))]);
    let r = h.request(2, 4, b);
    assert_eq!(refusal(&r), Some(RefusedCode::Stale), "{r:?}");
    assert_eq!(h.core.stats().leaf_merges_refused, 1);
    assert_eq!(h.core.stats().leaf_merges, 0);
}

/// Both commits arrive before the first is durable (rule 1 would refuse the second): the
/// second merges onto the first's prepared version, and both changes are in the leaf.
#[test]
fn a_merge_onto_a_writer_still_committing_keeps_both_changes() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, l) = class_and_leaf(&mut h, &[(1, 10)]);
    h.request(2, 3, RequestBody::Fetch { page: l.page().unwrap() });
    let a = leaf_commit(l, &[l], leaf(class, &[(1, 10), (2, 20)]), &[(2, None)], &[(2, val(20))]);
    let b =
        leaf_commit(l, &[l], leaf(class, &[(3, 30)]), &[(1, val(10))], &[(1, None), (3, val(30))]);
    h.step(Input::Request { conn: 1, id: 4, req: Request::new(a) });
    h.step(Input::Request { conn: 2, id: 4, req: Request::new(b) });
    let out = h.settle();
    assert!(ok(&replies_to(&out, 1)[0].1));
    let r2 = &replies_to(&out, 2)[0].1;
    assert!(ok(r2), "{r2:?}");
    assert_eq!(h.core.stats().leaf_merges, 1);
    assert_eq!(h.core.cc.counters().refused_rule1, 0);
    assert_eq!(fetched(&mut h, 1, 5, l), leaf(class, &[(2, 20), (3, 30)]));
}

/// A merge whose result does not fit the leaf is refused (the client's retry splits it).
#[test]
fn a_merge_that_does_not_fit_the_leaf_is_refused() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    // Entries of a 2-byte key and an 8-byte value take 14 bytes: room for one more entry.
    let n = (room() / mapnode::entry_bytes(2, 8) - 1) as u16;
    let full: Vec<(u16, u64)> = (0..n).map(|k| (k, 0)).collect();
    let (class, l) = class_and_leaf(&mut h, &full);
    h.request(2, 3, RequestBody::Fetch { page: l.page().unwrap() });
    let with = |k: u16| {
        let mut e = full.clone();
        e.push((k, 1));
        leaf(class, &e)
    };
    assert!(ok(&h.request(
        1,
        4,
        leaf_commit(l, &[l], with(1000), &[(1000, None)], &[(1000, val(1))])
    )));
    let r = h.request(2, 4, leaf_commit(l, &[l], with(1001), &[(1001, None)], &[(1001, val(1))]));
    assert_eq!(refusal(&r), Some(RefusedCode::Stale), "{r:?}");
    assert_eq!(h.core.stats().leaf_merges_refused, 1);
}
