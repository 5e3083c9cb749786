//! Micro-benchmarks of the client cache alone (no server, no session):
//!
//! - `access`: the hit path, `ClientCache::access` on a resident, installed object (one entry
//!   load, an oref compare, a residency check, the manager's `touch`, the read-set flag), in ns
//!   per access, for HAC and FPC;
//! - `replacement`: the time to free one frame in steady state, in µs per freed frame, for HAC
//!   and FPC, measured by the cache's own replacement timer (`CacheStats::replacement_time`)
//!   around the work `while_fetching` does while a fetch would be on the wire;
//! - `conversion`: installing and swizzling a fetched OO7-like page the way T1 reads it (the
//!   HAC paper's conversion overhead, issue 16), in ns per page; the objects installed and
//!   references swizzled per page are printed, so per-object costs follow. `convert` times
//!   what the session counts as conversion (`resolve` and `follow`); `copy_and_convert` adds
//!   `install_page`, the copy of the page into its frame and the check of its structure.
//!
//! Run: `cargo bench -p thor-cache --bench cache`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use thor_cache::core::Need;
use thor_cache::{CacheConfig, ClientCache, PolicyConfig};
use thor_core::{ClassDesc, Oid, Oref, PageId, PageMut, VarKind};

const PAGE: usize = 8192;
/// Objects per page: about 40 objects of 180 bytes, like OO7's atomic parts and connections.
const PER_PAGE: u16 = 40;
const PAYLOAD: usize = 160;

fn oref(p: u32, o: u16) -> Oref {
    Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
}

fn class() -> (Oref, ClassDesc) {
    (oref(1, 7), ClassDesc::new("bench.T", 8, &[0], VarKind::Bytes).unwrap())
}

/// Page `p`: objects each referencing an object of a page `stride` further on.
fn page(p: u32, pages: u32) -> Vec<u8> {
    let (c, desc) = class();
    let mut b = vec![0u8; PAGE];
    let mut pm = PageMut::init(&mut b, PageId::new(p).unwrap()).unwrap();
    for o in 0..PER_PAGE {
        let mut obj = desc.new_object(c.raw(), PAYLOAD);
        let to = 2 + (p - 2 + 7) % pages;
        thor_core::le::put_u32(&mut obj, 4, oref(to, (o * 3) % PER_PAGE).raw());
        pm.append(&obj).unwrap();
    }
    b
}

fn cache(policy: PolicyConfig, budget: usize) -> ClientCache {
    let mut c = ClientCache::new(CacheConfig {
        budget_bytes: budget,
        page_size: PAGE,
        policy,
        background_replacement: true,
    })
    .unwrap();
    // The cache reads no clock of its own: the benchmark gives it one for its replacement timer.
    c.set_clock(monotonic_ns);
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    c
}

/// Nanoseconds since the first call.
fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

fn policies() -> [(&'static str, PolicyConfig); 2] {
    [("hac", PolicyConfig::HAC), ("fpc", PolicyConfig::Fpc)]
}

fn access(c: &mut Criterion) {
    let mut g = c.benchmark_group("access");
    for (name, policy) in policies() {
        // 64 pages, every object installed: 2,560 objects, all hits.
        let mut cache = cache(policy, 8 << 20);
        let mut handles = Vec::new();
        for p in 2..66 {
            cache.install_page(PageId::new(p).unwrap(), &page(p, 64)).unwrap();
            for o in 0..PER_PAGE {
                let i = cache.entry_for(oref(p, o)).unwrap();
                assert!(matches!(cache.resolve(i).unwrap(), Need::Resident(_)));
                handles.push((i, oref(p, o).raw()));
            }
        }
        g.throughput(Throughput::Elements(handles.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut sum = 0u32;
                for &(i, o) in &handles {
                    sum = sum.wrapping_add(cache.access(black_box(i), o).unwrap());
                }
                sum
            })
        });
    }
    g.finish();
}

fn replacement(c: &mut Criterion) {
    let mut g = c.benchmark_group("replacement");
    // 4 MB of cache (512 frames) cycling over 2,048 pages: every fetch needs a freed frame.
    let pages = 2048u32;
    let images: Vec<Vec<u8>> = (0..pages).map(|k| page(2 + k, pages)).collect();
    for (name, policy) in policies() {
        let mut cache = cache(policy, 4 << 20);
        let mut next = 0u32;
        // One fetch: replacement while "on the wire", install, then use a quarter of the
        // page's objects (following one reference each), so HAC has hot objects to keep.
        let mut fetch = |cache: &mut ClientCache| {
            let p = 2 + next % pages;
            cache.while_fetching().unwrap();
            cache.install_page(PageId::new(p).unwrap(), &images[(p - 2) as usize]).unwrap();
            for o in (0..PER_PAGE).step_by(4) {
                let i = cache.entry_for(oref(p, o)).unwrap();
                if let Need::Resident(loc) = cache.resolve(i).unwrap() {
                    cache.follow(loc, 4).unwrap();
                }
            }
            next = next.wrapping_add(1);
        };
        // Warm up to steady state: the cache full, the pointers going round.
        for _ in 0..4 * pages {
            fetch(&mut cache);
        }
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let before = cache.stats().replacement_time;
                let freed = cache.stats().core.frames_freed;
                for _ in 0..iters {
                    fetch(&mut cache);
                }
                let st = cache.stats();
                // One frame freed per fetch in steady state (retirements aside).
                debug_assert!(st.core.frames_freed - freed >= iters / 2);
                st.replacement_time - before
            })
        });
        let st = cache.stats();
        eprintln!(
            "{name}: {} fetches, {:?} replacement per freed frame, {:?}",
            st.fetches(),
            st.replacement_time_per_frame(),
            st.replacement
        );
    }
    g.finish();
}

/// OO7's layout (`thor-oo7/src/schema.rs`) of an atomic part and what hangs off it: the part
/// (40 bytes), its type string, its `to` and `from` collections, its three outgoing connections
/// and their type strings: ten objects, 220 bytes (240 with their offset-table slots). An 8 KB
/// page holds 33 such groups, 330
/// objects averaging 22 bytes, as OO7's pages of atomic parts do.
mod oo7 {
    use super::*;
    use thor_core::builtin;

    /// Groups per page.
    pub const GROUPS: u16 = 33;
    /// Objects per group: part, type, to, from, 3 connections, 3 types.
    const PER_GROUP: u16 = 10;
    /// Byte offsets of the references followed by T1.
    pub const PART_TO: usize = 4 + 4 * 6;
    pub const CONN_TO: usize = 4 + 4 * 3;
    /// Byte offset of the first element of a `Refs`.
    pub const REFS_FIRST: usize = 8;

    pub fn part_class() -> (Oref, ClassDesc) {
        // id, kind, build_date, x, y, doc_id, to, from, part_of.
        (oref(1, 10), ClassDesc::new("bench.AtomicPart", 36, &[1, 6, 7, 8], VarKind::None).unwrap())
    }

    pub fn conn_class() -> (Oref, ClassDesc) {
        // kind, length, from, to.
        (oref(1, 11), ClassDesc::new("bench.Connection", 16, &[0, 2, 3], VarKind::None).unwrap())
    }

    /// The oref of group `g`'s part in page `p`.
    pub fn part(p: u32, g: u16) -> Oref {
        oref(p, g * PER_GROUP)
    }

    /// Page `p`: connection `k` of group `g` goes to group `(g + k + 1) % GROUPS` of the same
    /// page, except that the last connection of every fourth group goes to the next page (OO7
    /// clusters a composite part's graph, which spans pages).
    pub fn page(p: u32) -> Vec<u8> {
        let (pc, pd) = part_class();
        let (cc, cd) = conn_class();
        let bytes = builtin::desc(builtin::BYTES).unwrap();
        let refs = builtin::desc(builtin::REFS).unwrap();
        let mut b = vec![0u8; PAGE];
        let mut pm = PageMut::init(&mut b, PageId::new(p).unwrap()).unwrap();
        for g in 0..GROUPS {
            let base = g * PER_GROUP;
            let o = |k: u16| oref(p, base + k).raw();
            let mut obj = pd.new_object(pc.raw(), 0);
            thor_core::le::put_u32(&mut obj, 4, g as u32);
            thor_core::le::put_u32(&mut obj, 8, o(1));
            thor_core::le::put_u32(&mut obj, PART_TO, o(2));
            thor_core::le::put_u32(&mut obj, PART_TO + 4, o(3));
            assert_eq!(pm.append(&obj).unwrap().index(), base as usize);
            let mut kind = bytes.new_object(builtin::BYTES.raw(), 10);
            kind[8..18].copy_from_slice(b"type003\0\0\0");
            pm.append(&kind).unwrap();
            let mut to = refs.new_object(builtin::REFS.raw(), 3);
            for k in 0..3 {
                thor_core::le::put_u32(&mut to, REFS_FIRST + 4 * k, o(4 + k as u16));
            }
            pm.append(&to).unwrap();
            let mut from = refs.new_object(builtin::REFS.raw(), 3);
            for k in 0..3u16 {
                let src = (g + GROUPS - k - 1) % GROUPS;
                thor_core::le::put_u32(
                    &mut from,
                    REFS_FIRST + 4 * k as usize,
                    oref(p, src * PER_GROUP + 4 + k).raw(),
                );
            }
            pm.append(&from).unwrap();
            for k in 0..3u16 {
                let mut c = cd.new_object(cc.raw(), 0);
                thor_core::le::put_u32(&mut c, 4, o(7 + k));
                thor_core::le::put_u32(&mut c, 12, oref(p, base).raw());
                let target = if k == 2 && g % 4 == 0 {
                    part(p + 1, g)
                } else {
                    part(p, (g + k + 1) % GROUPS)
                };
                thor_core::le::put_u32(&mut c, CONN_TO, target.raw());
                pm.append(&c).unwrap();
            }
            for _ in 0..3 {
                pm.append(&kind).unwrap();
            }
        }
        b
    }

    /// Reads page `p` as T1 does: every part of the page, its `to` collection, its connections
    /// and their `to` references (reaching the next parts by swizzled references, as a
    /// traversal does). Returns (objects installed, references swizzled).
    pub fn traverse(cache: &mut ClientCache, p: u32, reached: &mut [u32]) -> (u32, u32) {
        let (mut installed, mut swizzled) = (0, 0);
        reached.fill(u32::MAX);
        let resolve = |cache: &mut ClientCache, i: u32| match cache.resolve(i).unwrap() {
            Need::Resident(loc) => loc,
            n => panic!("{n:?}"),
        };
        for g in 0..GROUPS {
            let i = match reached[g as usize] {
                u32::MAX => cache.entry_for(part(p, g)).unwrap(),
                i => i,
            };
            let loc = resolve(cache, i);
            let (ti, _) = cache.follow(loc, PART_TO).unwrap().unwrap();
            let tloc = resolve(cache, ti);
            installed += 2;
            swizzled += 1;
            for k in 0..3 {
                let (ci, _) = cache.follow(tloc, REFS_FIRST + 4 * k).unwrap().unwrap();
                let cloc = resolve(cache, ci);
                let (pi, w) = cache.follow(cloc, CONN_TO).unwrap().unwrap();
                installed += 1;
                swizzled += 2;
                if let Some(pp) = Oref::from_raw(w).and_then(|o| o.page())
                    && pp.get() == p
                {
                    reached[Oref::from_raw(w).unwrap().oid().index() / PER_GROUP as usize] = pi;
                }
            }
        }
        (installed, swizzled)
    }
}

fn conversion(c: &mut Criterion) {
    let mut g = c.benchmark_group("conversion");
    // Pages per fresh cache: a batch is timed from a cache that has none of them, so every
    // page is a cold one. 3,072 pages (24 MB, 500,000 objects installed) in a 64 MB cache
    // never need replacement, and grow the tables to cold T1's on OO7 medium (3,484 pages,
    // 497,697 entries), past the processor's caches as there.
    const BATCH: u32 = 3072;
    let images: Vec<Vec<u8>> = (0..BATCH).map(|k| oo7::page(2 + k)).collect();
    let fresh = || {
        let mut c = cache(PolicyConfig::HAC, 64 << 20);
        for (cl, d) in [oo7::part_class(), oo7::conn_class()] {
            c.register_class(cl.raw(), Arc::new(d)).unwrap();
        }
        c
    };
    let mut reached = vec![u32::MAX; oo7::GROUPS as usize];
    {
        let mut c = fresh();
        c.install_page(PageId::new(2).unwrap(), &images[0]).unwrap();
        let (inst, sw) = oo7::traverse(&mut c, 2, &mut reached);
        eprintln!("conversion: per page {inst} objects installed, {sw} references swizzled");
    }
    g.throughput(Throughput::Elements(1));
    for copy in [false, true] {
        let name = if copy { "copy_and_convert" } else { "convert" };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let n = (iters - done).min(BATCH as u64) as u32;
                    let mut c = fresh();
                    if copy {
                        let t = std::time::Instant::now();
                        for k in 0..n {
                            c.install_page(PageId::new(2 + k).unwrap(), &images[k as usize])
                                .unwrap();
                            oo7::traverse(&mut c, 2 + k, &mut reached);
                        }
                        total += t.elapsed();
                    } else {
                        for k in 0..n {
                            c.install_page(PageId::new(2 + k).unwrap(), &images[k as usize])
                                .unwrap();
                        }
                        let t = std::time::Instant::now();
                        for k in 0..n {
                            oo7::traverse(&mut c, 2 + k, &mut reached);
                        }
                        total += t.elapsed();
                    }
                    done += n as u64;
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = access, replacement, conversion
}
criterion_main!(benches);
