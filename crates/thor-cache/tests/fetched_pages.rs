//! Pages from the server are untrusted bytes: the cache installs what is well formed and
//! refuses the rest with `CacheError::MalformedPage` naming the page and the byte, never a
//! panic, and never a word taken for what it is not.
//!
//! The test class `test.Node`: `[class | ref | tag: u32 | count | refs...]`, one fixed
//! reference slot and a variable part of references.

use std::sync::Arc;

use proptest::prelude::*;
use thor_cache::core::Need;
use thor_cache::{CacheConfig, CacheError, ClientCache, PolicyConfig};
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oid, Oref, PageId, PageMut, PageView, RawRef, VarKind, builtin};

const PAGE: usize = 4096;
/// The page the tests fetch.
const P: u32 = 7;
/// Offsets of the test class's fields within an object.
const REF_AT: usize = 4;
const TAG_AT: usize = 8;
const COUNT_AT: usize = 12;
const VAR_AT: usize = 16;

fn oref(p: u32, o: u16) -> Oref {
    Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
}

fn class() -> (Oref, ClassDesc) {
    (oref(1, 9), ClassDesc::new("test.Node", 8, &[0], VarKind::Refs).unwrap())
}

/// A node with tag `tag`, its fixed reference to `to`, and `refs` in its variable part.
fn node(tag: u32, to: Option<Oref>, refs: &[Oref]) -> Vec<u8> {
    let (c, desc) = class();
    let mut o = desc.new_object(c.raw(), refs.len());
    put_u32(&mut o, REF_AT, to.map_or(0, Oref::raw));
    put_u32(&mut o, TAG_AT, tag);
    for (k, r) in refs.iter().enumerate() {
        put_u32(&mut o, VAR_AT + 4 * k, r.raw());
    }
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

fn cache() -> ClientCache {
    let mut c = ClientCache::new(CacheConfig {
        budget_bytes: 32 * PAGE,
        page_size: PAGE,
        policy: PolicyConfig::HAC,
        background_replacement: true,
    })
    .unwrap();
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    c
}

/// Byte offset of object `oid` in page image `page`.
fn offset_in(page: &[u8], oid: u16) -> u32 {
    PageView::parse(page).unwrap().offset(Oid::new(oid).unwrap()).unwrap() as u32
}

/// Installs page `P` from `image` and resolves object `oid` of it.
fn resolve(c: &mut ClientCache, oid: u16) -> Result<Need, CacheError> {
    let i = c.entry_for(oref(P, oid))?;
    c.resolve(i)
}

/// The server sends a page whose object 1 has the spare (swizzle) bit set in its reference:
/// read as an entry index it would name some other object of the cache. Installing the object
/// fails, naming the page and the word's byte; its neighbours install and read as sent.
#[test]
fn malformed_reference_in_fetched_page() {
    let good = node(10, Some(oref(P, 2)), &[]);
    let mut bad = node(11, Some(oref(P, 0)), &[]);
    // The word of a swizzled reference to entry 0.
    put_u32(&mut bad, REF_AT, RawRef::tagged_word(0));
    let image = page_of(P, &[good, bad, node(12, None, &[])]);
    let mut c = cache();
    c.install_page(PageId::new(P).unwrap(), &image).unwrap();

    let Need::Resident(loc) = resolve(&mut c, 0).unwrap() else { panic!("object 0 installs") };
    let err = resolve(&mut c, 1).unwrap_err();
    let want = offset_in(&image, 1) + REF_AT as u32;
    match &err {
        CacheError::MalformedPage { page, offset, why } => {
            assert_eq!((*page, *offset), (P, want), "{err}");
            assert!(why.contains("spare"), "{why}");
        }
        other => panic!("expected a malformed page, got {other:?}"),
    }
    // Asking again gives the same answer: the object was not installed.
    assert_eq!(resolve(&mut c, 1).unwrap_err(), err);
    assert!(matches!(resolve(&mut c, 2).unwrap(), Need::Resident(_)));
    // The good object's reference swizzles to object 2 as usual.
    let (t, w) = c.follow(loc, REF_AT).unwrap().unwrap();
    assert_eq!(w, oref(P, 2).raw());
    assert_eq!(c.oref_of(t), oref(P, 2).raw());
    c.check_invariants().unwrap();
}

/// Every malformation installation looks for, one object each, with where it is reported.
#[test]
fn malformed_objects_are_refused_where_they_are() {
    let (c_oref, _) = class();
    let cases: Vec<(&str, Vec<u8>, usize, &str)> = vec![
        (
            "odd word in the variable part",
            {
                let mut o = node(1, None, &[oref(P, 0), oref(P, 0)]);
                put_u32(&mut o, VAR_AT + 4, RawRef::tagged_word(5));
                o
            },
            VAR_AT + 4,
            "spare",
        ),
        (
            "reference naming page 0",
            {
                let mut o = node(1, None, &[]);
                // Oid 3 of page 0: an even word, but no page.
                put_u32(&mut o, REF_AT, 3 << 1);
                o
            },
            REF_AT,
            "page 0",
        ),
        (
            "class word with the spare bit",
            {
                let mut o = node(1, None, &[]);
                put_u32(&mut o, 0, c_oref.raw() | 1);
                o
            },
            0,
            "class word",
        ),
        (
            "null class word",
            {
                let mut o = node(1, None, &[]);
                put_u32(&mut o, 0, 0);
                o
            },
            0,
            "class word",
        ),
        (
            "count beyond the object",
            {
                let mut o = node(1, None, &[oref(P, 0)]);
                put_u32(&mut o, COUNT_AT, 1000);
                o
            },
            0,
            "size",
        ),
        (
            "object shorter than its class's fixed part",
            {
                let o = node(1, None, &[]);
                o[..8].to_vec()
            },
            0,
            "shorter",
        ),
    ];
    for (what, obj, at, why_has) in cases {
        let image = page_of(P, &[node(0, None, &[]), obj, node(2, None, &[])]);
        let mut c = cache();
        c.install_page(PageId::new(P).unwrap(), &image).unwrap();
        match resolve(&mut c, 1) {
            Err(CacheError::MalformedPage { page, offset, why }) => {
                assert_eq!(page, P, "{what}");
                assert_eq!(offset, offset_in(&image, 1) + at as u32, "{what}: {why}");
                assert!(why.contains(why_has), "{what}: {why}");
            }
            other => panic!("{what}: expected a malformed page, got {other:?}"),
        }
        for neighbour in [0, 2] {
            assert!(matches!(resolve(&mut c, neighbour), Ok(Need::Resident(_))), "{what}");
        }
        c.check_invariants().unwrap();
    }
    // A page whose structure is wrong is refused whole, before any object is looked at.
    let mut c = cache();
    let mut image = page_of(P, &[node(0, None, &[])]);
    put_u32(&mut image, 4, P + 1);
    let err = c.install_page(PageId::new(P).unwrap(), &image).unwrap_err();
    assert!(matches!(err, CacheError::MalformedPage { page: P, offset: 0, .. }), "{err:?}");
    let err = c.install_page(PageId::new(P).unwrap(), &image[..100]).unwrap_err();
    assert!(matches!(err, CacheError::MalformedPage { page: P, .. }), "{err:?}");
    assert!(!c.has_page(PageId::new(P).unwrap()));
    c.check_invariants().unwrap();
}

/// A well-formed page of `n` nodes referencing each other, the page after, and null.
fn valid_page(n: u16, fanout: usize) -> Vec<u8> {
    let objs: Vec<Vec<u8>> = (0..n)
        .map(|o| {
            let refs: Vec<Oref> =
                (0..fanout).map(|k| oref(P + (k % 2) as u32, (o + k as u16) % n)).collect();
            node(u32::from(o), Some(oref(P, (o + 1) % n)), &refs)
        })
        .collect();
    page_of(P, &objs)
}

/// Drives a page through everything that reads it: installation of every object, following
/// every reference of the installed ones, the first write, export and abort. Returns how many
/// objects installed; panics only if the cache broke a promise.
fn drive(c: &mut ClientCache, image: &[u8]) -> usize {
    let page = PageId::new(P).unwrap();
    if let Err(e) = c.install_page(page, image) {
        assert!(matches!(e, CacheError::MalformedPage { page: P, .. }), "{e:?}");
        c.check_invariants().unwrap();
        return 0;
    }
    let slots = PageView::parse(image).unwrap().slot_count() as u16;
    let mut installed = Vec::new();
    for oid in 0..slots + 2 {
        let i = c.entry_for(oref(P, oid)).unwrap();
        match c.resolve(i) {
            Ok(Need::Resident(loc)) => installed.push((i, loc)),
            // Classes nobody registered, objects the page lacks: nothing is installed.
            Ok(Need::Class(_) | Need::Stale(_)) => {}
            Ok(Need::Page(p)) => panic!("page {p:?} is resident"),
            Err(CacheError::MalformedPage { page, offset, .. }) => {
                assert_eq!(page, P);
                assert!((offset as usize) < PAGE);
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let mut out = Vec::new();
    for &(i, loc) in &installed {
        let class = c.class(c.class_word(loc)).cloned().expect("installed objects have classes");
        let obj = c.object(loc).to_vec();
        assert_eq!(class.check_shape(&obj).map(|_| ()), Ok(()));
        let mut offs = Vec::new();
        class.for_each_ref_offset(&obj, |off| offs.push(off));
        for off in offs {
            if let Some((t, w)) = c.follow(loc, off).unwrap() {
                assert_eq!(w & 1, 0, "a followed reference is an oref");
                assert_eq!(c.oref_of(t), w);
            }
            assert_eq!(c.ref_word(loc, off) & 1, 0);
        }
        c.before_write(i).unwrap();
        c.export(i, &mut out).unwrap();
        assert_eq!(out.len(), obj.len());
        class.for_each_ref_offset(&out, |off| assert_eq!(u32_at(&out, off) & 1, 0));
    }
    c.check_invariants().unwrap();
    c.abort_done();
    c.check_invariants().unwrap();
    installed.len()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random pages, valid pages with random bits flipped, and valid pages with random words
    /// overwritten: each installs (and every installed object reads, swizzles and exports
    /// cleanly) or is refused with `MalformedPage`, never a panic.
    #[test]
    fn random_and_bit_flipped_pages_install_or_fail_cleanly(
        n in 1u16..40,
        fanout in 0usize..6,
        flips in proptest::collection::vec((0usize..PAGE * 8, any::<bool>()), 0..24),
        words in proptest::collection::vec((0usize..PAGE / 4, any::<u32>()), 0..6),
        random in proptest::collection::vec(any::<u8>(), PAGE),
        fully_random in proptest::bool::weighted(0.2),
    ) {
        let mut c = cache();
        let image = if fully_random {
            random
        } else {
            let mut image = valid_page(n, fanout);
            let data_end = PageView::parse(&image).unwrap().data_end();
            for (bit, in_objects) in flips {
                // Half the flips land in the objects, where the offset table cannot catch them.
                let bit = if in_objects { bit % (data_end * 8 - 24 * 8) + 24 * 8 } else { bit };
                image[bit / 8] ^= 1 << (bit % 8);
            }
            for (w, v) in words {
                put_u32(&mut image, 4 * w, v);
            }
            image
        };
        drive(&mut c, &image);
    }
}

/// The unmutated page of the property test installs completely, so the property is not
/// vacuous.
#[test]
fn a_valid_page_installs_every_object() {
    let mut c = cache();
    assert_eq!(drive(&mut c, &valid_page(30, 3)), 30);
    // The built-in classes are registered too: a page of them installs.
    let refs = builtin::desc(builtin::REFS).unwrap();
    let mut r = refs.new_object(builtin::REFS.raw(), 2);
    put_u32(&mut r, refs.var_offset(), oref(P, 0).raw());
    let image = page_of(P, &[r]);
    let mut c = cache();
    assert_eq!(drive(&mut c, &image), 1);
}

/// A prefetched page is installed with a fetched page's checks (a malformed one is refused,
/// and takes no frame), counts as used at the first installation of one of its objects, and
/// as wasted when it leaves the cache before that; a fetch of a page is not a prefetch.
#[test]
fn prefetched_pages_are_checked_and_counted_used_or_wasted() {
    let mut c = cache();
    let bad = vec![0xAB; PAGE];
    assert!(matches!(
        c.install_prefetched(PageId::new(9).unwrap(), &bad),
        Err(CacheError::MalformedPage { page: 9, .. })
    ));
    assert!(!c.has_page(PageId::new(9).unwrap()));
    let image = page_of(P, &[node(1, None, &[]), node(2, None, &[])]);
    c.install_prefetched(PageId::new(P).unwrap(), &image).unwrap();
    c.install_prefetched(PageId::new(8).unwrap(), &page_of(8, &[node(3, None, &[])])).unwrap();
    let st = c.stats();
    assert_eq!((st.core.pages_prefetched, st.fetches()), (2, 0), "prefetches are not fetches");
    assert!(matches!(resolve(&mut c, 0).unwrap(), Need::Resident(_)));
    assert!(matches!(resolve(&mut c, 1).unwrap(), Need::Resident(_)));
    assert_eq!(c.prefetch_outcomes(), (1, 0), "one page used, counted once");
    // Fill the cache with fetched pages until page 8, never used, leaves.
    let mut p = 20;
    while c.has_page(PageId::new(8).unwrap()) {
        c.while_fetching().unwrap();
        c.install_page(PageId::new(p).unwrap(), &page_of(p, &[node(p, None, &[])])).unwrap();
        p += 1;
        assert!(p < 200, "page 8 never left");
    }
    let (used, wasted) = c.prefetch_outcomes();
    assert_eq!((used, wasted), (1, 1));
    assert_eq!(c.stats().fetches(), u64::from(p - 20));
}
