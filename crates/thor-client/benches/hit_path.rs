//! The hit path through the session: the cost of an access to an object that is cached,
//! installed and reached through swizzled references, as an application sees it
//! (`Session::get` and one field read), in ns per object, for HAC and FPC.
//!
//! - `get_field`: `s.get(r)?.get(Node::val)` over handles held by the application;
//! - `walk`: a pointer chase, `s.get(cur)?` then `val` and `next` (a swizzled reference) per
//!   object, the shape of an OO7 traversal.
//!
//! Run: `cargo bench -p thor-client --bench hit_path`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use thor_client::{PolicyConfig, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

thor_client::class! {
    /// A node of a ring.
    pub class Node("bench.Node") {
        val: u64,
        next: Ref<Node>,
        pad: [u8; 20],
    }
}

/// Objects in the ring: 10,000 objects of 40 bytes, about 50 pages of 8 KB.
const N: usize = 10_000;

fn session(h: &Arc<Engine>, policy: PolicyConfig) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(
        Box::new(t),
        SessionConfig { cache_bytes: 64 << 20, policy, ..SessionConfig::default() },
    )
    .unwrap()
}

fn hit_path(c: &mut Criterion) {
    let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
    let engine = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let h = engine;
    {
        let s = session(&h, PolicyConfig::Fpc);
        let refs: Vec<Ref<Node>> = (0..N)
            .map(|i| {
                let v = s.create_fixed::<Node>().unwrap();
                v.set(Node::val, i as u64).unwrap();
                v.as_ref()
            })
            .collect();
        for i in 0..N {
            s.get(refs[i]).unwrap().set(Node::next, refs[(i + 1) % N]).unwrap();
        }
        s.set_root(0, refs[0]).unwrap();
        s.commit().unwrap();
    }
    let mut g = c.benchmark_group("hit_path");
    g.throughput(Throughput::Elements(N as u64));
    for (name, policy) in [("hac", PolicyConfig::HAC), ("fpc", PolicyConfig::Fpc)] {
        let s = session(&h, policy);
        let first: Ref<Node> = s.root(0).unwrap();
        // One walk fetches the pages, installs every object and swizzles every `next`.
        let mut handles = Vec::with_capacity(N);
        let mut cur = first;
        for _ in 0..N {
            handles.push(cur);
            cur = s.get(cur).unwrap().get(Node::next);
        }
        let fetches = s.stats().fetches;
        let (st, cs) = (s.stats(), s.cache_stats());
        eprintln!(
            "{name}: cold walk: {fetches} fetches, conversion (install + swizzle) {:?} per fetch, \
             replacement {:?} per fetch, {} entries",
            st.conversion_time_per_fetch(),
            cs.replacement_time_per_fetch(),
            cs.entries
        );
        g.bench_function(format!("get_field/{name}"), |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for &r in &handles {
                    sum = sum.wrapping_add(s.get(black_box(r)).unwrap().get(Node::val));
                }
                sum
            })
        });
        g.bench_function(format!("walk/{name}"), |b| {
            b.iter(|| {
                let mut sum = 0u64;
                let mut cur = first;
                for _ in 0..N {
                    let v = s.get(cur).unwrap();
                    sum = sum.wrapping_add(v.get(Node::val));
                    cur = v.get(Node::next);
                }
                sum
            })
        });
        assert_eq!(s.stats().fetches, fetches, "{name}: everything stayed cached");
        // Each transaction's read set grows with every object read; end it now and then.
        s.commit().unwrap();
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = hit_path
}
criterion_main!(benches);
