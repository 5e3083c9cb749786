//! Traversals of one module, and several clients running them at once (`thor_oo7::multi`), on
//! the tiny database with several modules over the embedded server.

mod common;

use thor_client::PolicyConfig;
use thor_oo7::load::LoadOptions;
use thor_oo7::multi::{Length, MultiConfig, Sharing, run_multi};
use thor_oo7::rng::Rng;
use thor_oo7::traverse::Db;
use thor_oo7::{Oo7Error, Op, Params};

#[test]
fn the_modules_traversals_add_up_to_the_whole_traversal() {
    let params = Params { modules: 3, ..Params::tiny() };
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &params, LoadOptions::default());
    let e = common::endpoint(dir.path());
    let s = common::session(&e);
    let mut db = Db::open(&s).unwrap();
    assert_eq!(db.module_count(), 3);
    for op in [Op::T1, Op::T6, Op::T2b] {
        let whole = db.run(op, &mut Rng::new(1)).unwrap();
        s.commit().unwrap();
        let mut sum = thor_oo7::ops::OpResult::default();
        for m in 0..3 {
            let one = db.run_on_module(op, m).unwrap();
            s.commit().unwrap();
            // Every module has the same shape, so each is a third of the whole.
            assert_eq!(3 * one.parts_visited, whole.parts_visited, "{} on module {m}", op.name());
            sum += one;
        }
        assert_eq!(sum, whole, "{}", op.name());
    }
    assert!(matches!(db.run_on_module(Op::T1, 3), Err(Oo7Error::BadParams(_))));
    assert!(matches!(db.run_on_module(Op::Q1, 0), Err(Oo7Error::UnknownOperation(_))));
}

#[test]
fn clients_traverse_their_own_module_or_the_shared_one() {
    let params = Params { modules: 2, ..Params::tiny() };
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &params, LoadOptions::default());
    let e = common::endpoint(dir.path());
    let per_module = {
        let s = common::session(&e);
        let t1 = Db::open(&s).unwrap().run_on_module(Op::T1, 0).unwrap().parts_visited;
        s.commit().unwrap();
        t1
    };
    let cfg = |sharing, clients| MultiConfig {
        op: Op::T1,
        clients,
        sharing,
        length: Length::Repeat(2),
        policy: PolicyConfig::Fpc,
        cache_bytes: 16 << 20,
        background_replacement: true,
        seed: 1,
        record_pages: false,
        recovery: Default::default(),
        prefetch: thor_oo7::experiment::PrefetchSetting::default(),
    };
    for sharing in [Sharing::Private, Sharing::Shared] {
        let mut ticks = 0;
        let r = run_multi(&e, &cfg(sharing, 2), &mut |_| ticks += 1).unwrap();
        assert!(ticks >= 1);
        assert_eq!((r.clients, r.modules, r.per_client.len()), (2, 2, 2));
        for (i, c) in r.per_client.iter().enumerate() {
            assert_eq!(c.client, i);
            assert_eq!(c.module, sharing.module_of(i));
            // A read-only traversal on a warm cache of its own module: no conflict, no fetch.
            assert_eq!((c.traversals, c.commits, c.aborts, c.fetches), (2, 2, 0, 0));
            assert_eq!(c.parts_visited, 2 * per_module);
            assert!(c.warmup_s > 0.0 && c.traversals_per_s > 0.0);
        }
        assert_eq!((r.total.traversals, r.total.commits, r.total.aborts), (4, 4, 0));
    }
    let e3 = run_multi(&e, &cfg(Sharing::Private, 3), &mut |_| {}).unwrap_err().to_string();
    assert!(e3.contains("load it with --modules 3"), "{e3}");
}

/// The misses of an LRU cache of `blocks` pages on `visits`, counting those after `skip`
/// visits.
fn lru_misses(visits: &[u32], blocks: usize, skip: usize) -> u64 {
    let mut cache: std::collections::VecDeque<u32> = Default::default();
    let mut misses = 0;
    for (i, &p) in visits.iter().enumerate() {
        if let Some(at) = cache.iter().position(|&q| q == p) {
            cache.remove(at);
        } else {
            misses += u64::from(i >= skip);
            if cache.len() == blocks {
                cache.pop_back();
            }
        }
        cache.push_front(p);
    }
    misses
}

#[test]
fn a_recorded_run_is_each_clients_page_string_and_fpc_misses_it_like_lru() {
    let params = Params { modules: 2, ..Params::tiny() };
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &params, LoadOptions::default());
    let e = common::endpoint(dir.path());
    for background_replacement in [true, false] {
        let cfg = MultiConfig {
            op: Op::T1,
            clients: 2,
            sharing: Sharing::Private,
            length: Length::Repeat(2),
            policy: PolicyConfig::Fpc,
            // A few frames, fewer than a module's pages: the clients miss in every traversal.
            cache_bytes: 100 << 10,
            background_replacement,
            seed: 1,
            record_pages: true,
            recovery: Default::default(),
            // LRU's misses are of one page per fetch.
            prefetch: thor_oo7::experiment::PrefetchSetting::OFF,
        };
        let r = run_multi(&e, &cfg, &mut |_| {}).unwrap();
        let t = r.page_trace.as_ref().expect("the run was recorded");
        assert!(t.warmup > 0 && (t.warmup as usize) < t.visits.len());
        let mut csv = Vec::new();
        t.write_csv(&mut csv, &["a test".to_string()]).unwrap();
        let text = String::from_utf8(csv).unwrap();
        assert!(text.contains("\n# a test\n") && text.contains("\nclient,block\n"), "{text}");
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), t.visits.len() + 1);
        for (i, c) in r.per_client.iter().enumerate() {
            assert!(c.fetches > 0, "{c:?}");
            let mine: Vec<(usize, u32)> = t
                .visits
                .iter()
                .enumerate()
                .filter(|(_, v)| usize::from(v.0) == i)
                .map(|(k, v)| (k, v.1))
                .collect();
            // A visit is a change of page: never the same page twice in a row.
            assert!(mine.windows(2).all(|w| w[0].1 != w[1].1));
            let skip = mine.iter().take_while(|(k, _)| (*k as u64) < t.warmup).count();
            let pages: Vec<u32> = mine.iter().map(|v| v.1).collect();
            // FPC is exact LRU over the frames it lets pages occupy: all of them, less the one
            // kept free for the next fetch when replacement runs while fetches are on the wire.
            // The tables may still retire a frame in the timed phase (the oref index frees a
            // page's directory when its entries go and makes it again when they come back), and
            // a frame retired goes from the bottom of the LRU stack: LRU's inclusion property
            // then puts the misses between those of the most and of the fewest frames.
            let bg = usize::from(background_replacement);
            let (most, fewest) = (c.frames_start - bg, c.frames - bg);
            let (low, high) = (lru_misses(&pages, most, skip), lru_misses(&pages, fewest, skip));
            assert!(
                (low..=high).contains(&c.fetches),
                "client {i}, {fewest} to {most} frames, background {background_replacement}: \
                 {} fetches, LRU {low} to {high}",
                c.fetches
            );
            if most == fewest {
                assert_eq!(c.fetches, low);
            }
        }
    }
}
