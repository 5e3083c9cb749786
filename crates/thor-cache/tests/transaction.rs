//! The cache's transaction interface as the client library uses it, through `ClientCache`'s
//! public methods only: first writes and undo copies, stores of references, creation, the
//! exported form of objects, commit, abort and invalidation, for both managers.
//!
//! The test class `test.Node`: `[class | ref | tag: u32 | count | refs...]`.

use std::sync::Arc;

use thor_cache::core::Need;
use thor_cache::{CacheConfig, CacheError, ClientCache, Invalidation, PolicyConfig};
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oid, Oref, PageId, PageMut, RawRef, VarKind, builtin};

const PAGE: usize = 4096;
const REF_AT: usize = 4;
const TAG_AT: usize = 8;
const VAR_AT: usize = 16;

fn oref(p: u32, o: u16) -> Oref {
    Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
}

fn class() -> (Oref, ClassDesc) {
    (oref(1, 9), ClassDesc::new("test.Node", 8, &[0], VarKind::Refs).unwrap())
}

/// A node with tag `tag`, its fixed reference to `to` and `refs` references in its variable
/// part, all to `to`.
fn node(tag: u32, to: Option<Oref>, refs: usize) -> Vec<u8> {
    let (c, desc) = class();
    let mut o = desc.new_object(c.raw(), refs);
    for k in 0..=refs {
        let at = if k == 0 { REF_AT } else { VAR_AT + 4 * (k - 1) };
        put_u32(&mut o, at, to.map_or(0, Oref::raw));
    }
    put_u32(&mut o, TAG_AT, tag);
    o
}

fn page_of(page: u32, objs: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    let mut p = PageMut::init(&mut b, PageId::new(page).unwrap()).unwrap();
    for o in objs {
        p.append(o).unwrap();
    }
    b
}

fn managers() -> [PolicyConfig; 2] {
    [PolicyConfig::HAC, PolicyConfig::Fpc]
}

/// A cache holding page 2: objects 2.0 → 2.1 → 2.2 → null, each with one variable reference
/// like its fixed one.
fn cache(policy: PolicyConfig) -> ClientCache {
    let mut c = ClientCache::new(CacheConfig {
        budget_bytes: 32 * PAGE,
        page_size: PAGE,
        policy,
        background_replacement: true,
    })
    .unwrap();
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    let objs = [node(0, Some(oref(2, 1)), 1), node(1, Some(oref(2, 2)), 1), node(2, None, 1)];
    c.install_page(PageId::new(2).unwrap(), &page_of(2, &objs)).unwrap();
    c
}

/// Accesses `o` (installing it): its entry and location.
fn get(c: &mut ClientCache, o: Oref) -> (u32, u32) {
    let i = c.entry_for(o).unwrap();
    match c.resolve(i).unwrap() {
        Need::Resident(loc) => (i, loc),
        other => panic!("{o:?}: {other:?}"),
    }
}

fn tag(c: &ClientCache, loc: u32) -> u32 {
    u32_at(c.object(loc), TAG_AT)
}

/// Writes tag `t` into the object at `loc` the way a view does, through its pointer.
fn write_tag(c: &mut ClientCache, loc: u32, t: u32) {
    // SAFETY: the object is resident at `loc` and no cache call runs while the pointer is used;
    // the tag is a scalar field within the object.
    unsafe { c.object_ptr(loc).add(TAG_AT).cast::<u32>().write_unaligned(t.to_le()) };
}

#[test]
fn abort_puts_back_the_undo_copy_taken_at_the_first_write() {
    for policy in managers() {
        let mut c = cache(policy);
        let (a, la) = get(&mut c, oref(2, 0));
        let (b, _) = get(&mut c, oref(2, 1));
        c.follow(la, REF_AT).unwrap();
        c.before_write(a).unwrap();
        write_tag(&mut c, la, 100);
        // A second write takes no second copy: the undo copy is the object before the first.
        c.before_write(a).unwrap();
        write_tag(&mut c, la, 200);
        c.store_ref(a, REF_AT, None).unwrap();
        assert_eq!(c.modified().collect::<Vec<_>>(), vec![a]);
        c.check_invariants().unwrap();
        c.abort_done();
        assert_eq!(tag(&c, la), 0);
        assert_eq!(c.follow(la, REF_AT).unwrap().map(|(t, _)| t), Some(b));
        assert_eq!(c.modified().len(), 0);
        assert_eq!(c.read_count(), 0, "the read set ends with the transaction");
        c.check_invariants().unwrap();
    }
}

#[test]
fn export_unswizzles_references_and_tags_created_objects() {
    for policy in managers() {
        let mut c = cache(policy);
        let (a, la) = get(&mut c, oref(2, 0));
        get(&mut c, oref(2, 1));
        let x = c.create(&node(7, None, 2)).unwrap();
        let y = c.create(&node(8, None, 0)).unwrap();
        assert_eq!(c.created(), &[x.entry, y.entry]);
        assert_eq!(c.created_index(y.serial), Some(1));
        assert_eq!(c.created_index(oref(2, 0).raw()), None);
        // x → y and 2.1; 2.0 → x.
        let (b, _) = c.follow(la, REF_AT).unwrap().unwrap();
        c.store_ref(x.entry, REF_AT, Some(y.entry)).unwrap();
        c.store_ref(x.entry, VAR_AT, Some(b)).unwrap();
        c.before_write(a).unwrap();
        c.store_ref(a, REF_AT, Some(x.entry)).unwrap();
        let mut out = Vec::new();
        c.export(a, &mut out).unwrap();
        assert_eq!(u32_at(&out, REF_AT), RawRef::tagged_word(0), "x is created object 0");
        assert_eq!(u32_at(&out, VAR_AT), oref(2, 1).raw(), "never swizzled: as stored");
        c.export(x.entry, &mut out).unwrap();
        assert_eq!(u32_at(&out, 0), class().0.raw());
        assert_eq!(u32_at(&out, REF_AT), RawRef::tagged_word(1), "y is created object 1");
        assert_eq!(u32_at(&out, VAR_AT), oref(2, 1).raw(), "swizzled, then unswizzled");
        assert_eq!(u32_at(&out, VAR_AT + 4), 0);
        // Objects the transaction did not write are not exported.
        assert!(matches!(
            c.export(c.lookup(oref(2, 1).raw()).unwrap(), &mut out),
            Err(CacheError::Internal(_))
        ));
        c.check_invariants().unwrap();
    }
}

#[test]
fn export_append_lays_objects_end_to_end_as_export_makes_them() {
    for policy in managers() {
        let mut c = cache(policy);
        let (a, la) = get(&mut c, oref(2, 0));
        let x = c.create(&node(7, None, 2)).unwrap();
        let (b, _) = c.follow(la, REF_AT).unwrap().unwrap();
        c.store_ref(x.entry, VAR_AT, Some(b)).unwrap();
        c.before_write(a).unwrap();
        c.store_ref(a, REF_AT, Some(x.entry)).unwrap();
        let (mut one, mut expected) = (Vec::new(), vec![0xAB; 3]);
        for i in [a, x.entry] {
            c.export(i, &mut one).unwrap();
            expected.extend_from_slice(&one);
        }
        // Appended after bytes already there, references patched at the object's own place.
        let mut all = vec![0xAB; 3];
        c.export_append(a, &mut all).unwrap();
        c.export_append(x.entry, &mut all).unwrap();
        assert_eq!(all, expected);
        // A refusal leaves the buffer as it was.
        let not_written = c.lookup(oref(2, 1).raw()).unwrap();
        assert!(matches!(c.export_append(not_written, &mut all), Err(CacheError::Internal(_))));
        assert_eq!(all, expected);
        c.check_invariants().unwrap();
    }
}

#[test]
fn commit_gives_created_objects_their_orefs_and_ends_the_transaction() {
    for policy in managers() {
        let mut c = cache(policy);
        let (a, la) = get(&mut c, oref(2, 0));
        // A class created by the transaction, and an instance of it that names it by serial.
        let desc = ClassDesc::new("test.Leaf", 4, &[], VarKind::None).unwrap();
        let k = c.create(&desc.to_class_object()).unwrap();
        c.register_class(k.serial, Arc::new(desc.clone())).unwrap();
        let leaf = c.create(&desc.new_object(k.serial, 0)).unwrap();
        let mut out = Vec::new();
        c.export(leaf.entry, &mut out).unwrap();
        assert_eq!(u32_at(&out, 0), RawRef::tagged_word(0), "its class is created object 0");
        c.before_write(a).unwrap();
        c.store_ref(a, REF_AT, Some(leaf.entry)).unwrap();
        write_tag(&mut c, la, 5);
        let orefs = [oref(9, 0), oref(9, 1)];
        c.commit_done(&orefs).unwrap();
        assert_eq!(c.modified().len() + c.created().len() + c.read_count(), 0);
        assert_eq!(tag(&c, la), 5, "committed writes stay");
        assert_eq!(c.ref_word(la, REF_AT), oref(9, 1).raw(), "the reference names the new oref");
        assert!(c.class(oref(9, 0).raw()).is_some(), "the class is known by its oref");
        // Handles made before the commit still find the objects.
        let i = c.rebind(leaf.entry, leaf.serial).unwrap();
        assert_eq!(c.oref_of(i), oref(9, 1).raw());
        if let Some(loc) = c.location(i, oref(9, 1).raw()) {
            assert_eq!(c.class_word(loc), oref(9, 0).raw(), "the class word is the oref");
        }
        c.check_invariants().unwrap();
    }
}

#[test]
fn a_commit_reply_with_impossible_orefs_changes_nothing() {
    for policy in managers() {
        let mut c = cache(policy);
        let (_, _) = get(&mut c, oref(2, 0));
        let x = c.create(&node(1, None, 0)).unwrap();
        c.create(&node(2, None, 0)).unwrap();
        for (orefs, what) in [
            (vec![oref(9, 0)], "one oref for two objects"),
            (vec![oref(9, 0), oref(9, 0)], "the same oref twice"),
            (vec![oref(9, 0), Oref::NULL], "null"),
            (vec![oref(9, 0), oref(2, 0)], "an oref the cache already has"),
        ] {
            let err = c.commit_done(&orefs).unwrap_err();
            assert!(matches!(err, CacheError::BadCommitReply(_)), "{what}: {err:?}");
            assert_eq!(c.created().len(), 2, "{what}");
            assert_eq!(c.created_index(x.serial), Some(0), "{what}");
            c.check_invariants().unwrap();
        }
        c.abort_done();
        assert_eq!(c.lookup(x.serial), None, "created objects go with the abort");
        c.check_invariants().unwrap();
    }
}

#[test]
fn invalidating_an_object_the_transaction_used_is_a_conflict() {
    let mut c = cache(PolicyConfig::HAC);
    get(&mut c, oref(2, 0));
    let (b, _) = get(&mut c, oref(2, 1));
    c.before_write(b).unwrap();
    // Read: it leaves the cache now, and the transaction must abort.
    assert_eq!(c.invalidate(oref(2, 0)), Invalidation { evicted: true, conflict: true });
    // Modified: it stays until the transaction ends (no-steal).
    assert_eq!(c.invalidate(oref(2, 1)), Invalidation { evicted: false, conflict: true });
    // Neither read nor cached as an object: no conflict.
    assert_eq!(c.invalidate(oref(2, 2)), Invalidation { evicted: false, conflict: false });
    c.check_invariants().unwrap();
    c.abort_done();
    assert_eq!(c.location(b, oref(2, 1).raw()), None, "the modified object left at the abort");
    let i = c.entry_for(oref(2, 1)).unwrap();
    assert_eq!(c.resolve(i).unwrap(), Need::Page(PageId::new(2).unwrap()), "refetched");
    c.check_invariants().unwrap();
}

#[test]
fn an_invalidation_is_acknowledged_once_the_object_has_left() {
    for policy in managers() {
        let mut c = cache(policy);
        get(&mut c, oref(2, 0));
        let (b, _) = get(&mut c, oref(2, 1));
        c.before_write(b).unwrap();
        // Read: it leaves now. Never cached: nothing to drop. Both are applied at once.
        c.invalidate(oref(2, 0));
        c.invalidate(oref(5, 3));
        // Modified: it stays until the transaction ends, and so does the server's entry, so
        // that a commit reading it would still be refused.
        c.invalidate(oref(2, 1));
        assert_eq!(c.take_acks(usize::MAX), vec![oref(2, 0), oref(5, 3)]);
        c.abort_done();
        assert_eq!(c.take_acks(usize::MAX), vec![oref(2, 1)], "applied when it left");
        assert!(c.take_acks(usize::MAX).is_empty(), "each once");
        c.check_invariants().unwrap();
    }
}

#[test]
fn acknowledgements_not_sent_go_back_ahead_of_later_ones() {
    let mut c = cache(PolicyConfig::HAC);
    for o in 0..3 {
        c.invalidate(oref(6, o));
    }
    let first = c.take_acks(2);
    assert_eq!(first, vec![oref(6, 0), oref(6, 1)]);
    c.invalidate(oref(6, 3));
    c.requeue_acks(first);
    assert_eq!(c.take_acks(usize::MAX), vec![oref(6, 0), oref(6, 1), oref(6, 2), oref(6, 3)]);
}

#[test]
fn abort_after_the_undo_copies_were_dropped_discards_the_modified_objects() {
    for policy in managers() {
        let mut c = cache(policy);
        let (a, la) = get(&mut c, oref(2, 0));
        c.before_write(a).unwrap();
        write_tag(&mut c, la, 100);
        assert!(c.undo_bytes() > 0);
        c.drop_undo_copies();
        assert_eq!(c.undo_bytes(), 0);
        assert!(c.stats().core.undo_bytes_dropped > 0);
        // An object first written after the drop gets a copy again.
        let (b, lb) = get(&mut c, oref(2, 1));
        c.before_write(b).unwrap();
        write_tag(&mut c, lb, 200);
        c.check_invariants().unwrap();
        c.abort_done();
        // `a` cannot be restored: it leaves, and so does its page's copy (which it may sit
        // in), so that the next access fetches the committed version.
        assert_eq!(c.location(a, oref(2, 0).raw()), None);
        let i = c.entry_for(oref(2, 0)).unwrap();
        assert_eq!(c.resolve(i).unwrap(), Need::Page(PageId::new(2).unwrap()));
        // `b` is restored in place.
        assert_eq!(c.location(b, oref(2, 1).raw()), Some(lb));
        assert_eq!(tag(&c, lb), 1);
        c.check_invariants().unwrap();
    }
}

#[test]
fn undo_copies_are_dropped_when_replacement_needs_room() {
    for policy in managers() {
        // 16 frames. Each page holds a big object (2.8 KB) and a small one; the transaction
        // writes the big objects of 6 pages, so its undo copies pass a quarter of the budget,
        // then reads 20 more pages, so replacement must free frames.
        let mut c = ClientCache::new(CacheConfig {
            budget_bytes: 16 * PAGE,
            page_size: PAGE,
            policy,
            background_replacement: true,
        })
        .unwrap();
        let (cl, desc) = class();
        c.register_class(cl.raw(), Arc::new(desc)).unwrap();
        let objs = [node(0, None, 700), node(1, None, 0)];
        let fetch_and_get = |c: &mut ClientCache, o: Oref| {
            let p = o.page().unwrap();
            if !c.has_page(p) {
                c.while_fetching().unwrap();
                c.install_page(p, &page_of(p.get(), &objs)).unwrap();
            }
            get(c, o)
        };
        let mut written = Vec::new();
        for p in 2..8 {
            let (i, loc) = fetch_and_get(&mut c, oref(p, 0));
            c.before_write(i).unwrap();
            write_tag(&mut c, loc, 1000);
            written.push((i, oref(p, 0)));
        }
        assert!(c.undo_bytes() > 16 * PAGE / 4);
        assert_eq!(c.stats().core.undo_bytes_dropped, 0, "{policy}: no room needed yet");
        for p in 8..28 {
            fetch_and_get(&mut c, oref(p, 1));
        }
        assert!(c.stats().core.undo_bytes_dropped > 0, "{policy}: copies dropped");
        assert_eq!(c.undo_bytes(), 0, "{policy}");
        c.check_invariants().unwrap();
        c.abort_done();
        // No copy to put back: every written object left, and its next access fetches it.
        for (i, o) in written {
            assert_eq!(c.location(i, o.raw()), None, "{policy}: {o:?}");
            let i = c.entry_for(o).unwrap();
            assert_eq!(c.resolve(i).unwrap(), Need::Page(o.page().unwrap()), "{policy}: {o:?}");
        }
        c.check_invariants().unwrap();
    }
}

/// A transaction that overwrites many swizzled references, some naming objects nothing else
/// names and some naming one object many times, keeps the cache within its budget at every
/// step, and the reference counts exact after commit and after abort. (The decrements it
/// defers to the transaction's end were counted in the budget, with no chance to free frames
/// for them: clearing a thousand references overshot it.)
#[test]
fn overwriting_many_references_keeps_the_budget_and_the_counts() {
    for policy in managers() {
        for commit in [false, true] {
            let mut c = cache(policy);
            let (cl, desc) = class();
            // Object 3.0: 800 references, each to an object of its own on pages 4 to 7
            // (never fetched: their entries exist only for these references). Object 8.0:
            // 800 references, all to 2.2.
            let mut spread = desc.new_object(cl.raw(), 800);
            for k in 0..800 {
                let to = oref(4 + k as u32 / 200, (k % 200) as u16);
                put_u32(&mut spread, VAR_AT + 4 * k, to.raw());
            }
            put_u32(&mut spread, REF_AT, oref(2, 2).raw());
            let same = node(0, Some(oref(2, 2)), 800);
            c.install_page(PageId::new(3).unwrap(), &page_of(3, &[spread])).unwrap();
            c.install_page(PageId::new(8).unwrap(), &page_of(8, &[same])).unwrap();
            let (a, la) = get(&mut c, oref(3, 0));
            let (b, lb) = get(&mut c, oref(8, 0));
            for k in 0..800 {
                c.follow(la, VAR_AT + 4 * k).unwrap();
                c.follow(lb, VAR_AT + 4 * k).unwrap();
            }
            c.check_invariants().unwrap();
            c.before_write(a).unwrap();
            c.before_write(b).unwrap();
            for round in 0..3 {
                for k in 0..800 {
                    c.store_ref(a, VAR_AT + 4 * k, None).unwrap();
                    c.store_ref(b, VAR_AT + 4 * k, None).unwrap();
                    if round < 2 {
                        // Put one back, to be overwritten again next round.
                        c.store_ref(b, VAR_AT + 4 * k, Some(b)).unwrap();
                    }
                }
                c.check_invariants().unwrap_or_else(|e| panic!("{policy}, round {round}: {e}"));
            }
            if commit {
                c.commit_done(&[]).unwrap();
            } else {
                c.abort_done();
                for k in 0..800 {
                    assert!(c.follow(la, VAR_AT + 4 * k).unwrap().is_some(), "{policy}: put back");
                }
            }
            c.check_invariants().unwrap_or_else(|e| panic!("{policy}, commit {commit}: {e}"));
        }
    }
}

/// A reference moved from one object to another and aborted: the object written first is
/// restored first, and releasing its current words must not free the target while the undo
/// copy of the other, restored next, still names it. (Why `store_ref` defers every decrement,
/// even of a count that stays above 0.)
#[test]
fn a_reference_moved_between_objects_survives_abort() {
    for policy in managers() {
        let mut c = cache(policy);
        let x = oref(4, 0);
        let objs = [node(0, Some(x), 0), node(1, None, 0)];
        c.install_page(PageId::new(3).unwrap(), &page_of(3, &objs)).unwrap();
        let (a, la) = get(&mut c, oref(3, 0));
        let (b, lb) = get(&mut c, oref(3, 1));
        let (xi, _) = c.follow(la, REF_AT).unwrap().unwrap();
        c.before_write(b).unwrap();
        c.before_write(a).unwrap();
        c.store_ref(b, REF_AT, Some(xi)).unwrap();
        c.store_ref(a, REF_AT, None).unwrap();
        c.check_invariants().unwrap();
        c.abort_done();
        c.check_invariants().unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(c.follow(la, REF_AT).unwrap(), Some((xi, x.raw())), "{policy}");
        assert_eq!(c.follow(lb, REF_AT).unwrap(), None, "{policy}");
    }
}

#[test]
fn writes_out_of_order_are_refused() {
    let mut c = cache(PolicyConfig::HAC);
    let (a, la) = get(&mut c, oref(2, 0));
    let (b, _) = get(&mut c, oref(2, 1));
    // A reference stored into an object the transaction has not written.
    assert!(matches!(c.store_ref(a, REF_AT, Some(b)), Err(CacheError::Internal(_))));
    c.before_write(a).unwrap();
    // At the tag (not a reference), the count word, beyond the object, the class word.
    for off in [TAG_AT, VAR_AT - 4, VAR_AT + 4, 0, 1 << 20] {
        assert!(matches!(c.store_ref(a, off, Some(b)), Err(CacheError::Internal(_))), "{off}");
    }
    // To a free entry, or through one.
    assert!(matches!(c.store_ref(a, REF_AT, Some(1 << 20)), Err(CacheError::Internal(_))));
    assert!(matches!(c.before_write(1 << 20), Err(CacheError::Internal(_))));
    c.store_ref(a, VAR_AT, Some(b)).unwrap();
    assert_eq!(c.ref_word(la, VAR_AT), oref(2, 1).raw());
    c.check_invariants().unwrap();
}

#[test]
fn create_takes_fresh_instances_of_registered_classes_only() {
    let mut c = cache(PolicyConfig::HAC);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (node(1, Some(oref(2, 0)), 0), "a reference that is not null"),
        (
            {
                let mut o = node(1, None, 1);
                put_u32(&mut o, 0, oref(1, 30).raw());
                o
            },
            "an unknown class",
        ),
        (node(1, None, 1)[..12].to_vec(), "a shape that is not its class's"),
        (vec![0; 2], "shorter than a header"),
    ];
    for (bytes, what) in cases {
        assert!(matches!(c.create(&bytes), Err(CacheError::BadCreate(_))), "{what}");
    }
    let big = builtin::desc(builtin::BYTES).unwrap().new_object(builtin::BYTES.raw(), PAGE);
    assert!(matches!(c.create(&big), Err(CacheError::TooLarge { .. })));
    assert!(c.created().is_empty());
    c.check_invariants().unwrap();
}

#[test]
fn a_class_keeps_its_first_descriptor() {
    let mut c = cache(PolicyConfig::HAC);
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    let other = ClassDesc::new("test.Node", 12, &[0], VarKind::Refs).unwrap();
    assert_eq!(
        c.register_class(cl.raw(), Arc::new(other)),
        Err(CacheError::ClassChanged { class: cl.raw() })
    );
}

/// What a reconnecting session uses: the pages it caches anything of, and dropping
/// everything when its server cannot vouch for it.
#[test]
fn cached_pages_are_listed_and_everything_can_be_invalidated() {
    for policy in managers() {
        let mut c = cache(policy);
        let (_, loc) = get(&mut c, oref(2, 1));
        assert_eq!(tag(&c, loc), 1);
        assert_eq!(c.cached_pages(), vec![PageId::new(2).unwrap()], "{policy:?}");
        // A transaction read 2.0: dropping everything is a conflict for it.
        get(&mut c, oref(2, 0));
        assert!(c.invalidate_all(), "{policy:?}");
        c.abort_done();
        assert!(c.cached_pages().is_empty(), "{policy:?}: {:?}", c.cached_pages());
        // Its acknowledgements are for a server that sent no invalidation.
        c.forget_acks();
        assert!(c.take_acks(usize::MAX).is_empty());
        // The next access needs the page again.
        let i = c.entry_for(oref(2, 1)).unwrap();
        assert!(matches!(c.resolve(i).unwrap(), Need::Page(p) if p.get() == 2), "{policy:?}");
        c.check_invariants().unwrap();
    }
}
