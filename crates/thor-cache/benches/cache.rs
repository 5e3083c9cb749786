//! Micro-benchmarks of the client cache alone (no server, no session):
//!
//! - `access`: the hit path, `ClientCache::access` on a resident, installed object (one entry
//!   load, an oref compare, a residency check, the manager's `touch`, the read-set flag), in ns
//!   per access, for HAC and FPC;
//! - `replacement`: the time to free one frame in steady state, in µs per freed frame, for HAC
//!   and FPC, measured by the cache's own replacement timer (`CacheStats::replacement_time`)
//!   around the work `while_fetching` does while a fetch would be on the wire.
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
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    c
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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = access, replacement
}
criterion_main!(benches);
