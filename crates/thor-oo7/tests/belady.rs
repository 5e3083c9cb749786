//! Belady's optimum on a recorded run: the page string a traversal records gives the same count
//! under the fast MIN and its quadratic definition, and no cache manager, paged or HAC, has
//! fewer fetches than the optimum for the frames a page cache has at the same budget, hot or
//! cold.

mod common;

use thor_client::PolicyConfig;
use thor_oo7::experiment::{NoRunTrace, RunConfig, Workload, belady_fetches, page_string, run};
use thor_oo7::load::LoadOptions;
use thor_oo7::{Op, Params};
use thor_policy::belady::{min_misses, min_misses_reference};

fn cfg(policy: PolicyConfig, cache_bytes: usize, hot: bool) -> RunConfig {
    RunConfig {
        workload: Workload::Op(Op::T1),
        policy,
        cache_bytes,
        hot,
        seed: 1,
        background_replacement: true,
        repeat: 1,
        commit_every: 0,
        // Belady's floor is of fetches of pages one at a time.
        prefetch: thor_oo7::experiment::PrefetchSetting::OFF,
    }
}

#[test]
fn belady_on_a_recorded_page_string() {
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &Params::tiny(), LoadOptions::default());
    let e = common::endpoint(dir.path());
    let refs = page_string(&e, &cfg(PolicyConfig::Fpc, 64 << 20, false)).unwrap().refs;
    assert!(refs.len() > 100, "{} page visits", refs.len());
    assert!(refs.windows(2).all(|w| w[0] != w[1]), "consecutive repeats collapsed");
    // The same string whatever records it: the traversal's accesses do not depend on the cache.
    let again = page_string(&e, &cfg("s3fifo".parse().unwrap(), 1 << 20, false)).unwrap().refs;
    assert_eq!(refs, again);
    for frames in [4, 8, 16, 40] {
        assert_eq!(min_misses(&refs, frames), min_misses_reference(&refs, frames), "{frames}");
    }
    // No manager beats the optimum at the frames the page caches had.
    for hot in [false, true] {
        let s = page_string(&e, &cfg(PolicyConfig::Fpc, 64 << 20, hot)).unwrap();
        for budget in [160 << 10, 320 << 10] {
            let fpc = run(&e, &cfg(PolicyConfig::Fpc, budget, hot), NoRunTrace).unwrap();
            let optimum = belady_fetches(&s, fpc.usable_frames);
            assert!(optimum <= fpc.fetches, "hot {hot}: {optimum} > FPC's {}", fpc.fetches);
            for p in ["clock", "arc", "s3fifo", "wtinylfu", "quickstore"] {
                let r = run(&e, &cfg(p.parse().unwrap(), budget, hot), NoRunTrace).unwrap();
                let optimum = belady_fetches(&s, r.usable_frames);
                assert!(optimum <= r.fetches, "{p} hot {hot}: {optimum} > {}", r.fetches);
            }
        }
    }
}
