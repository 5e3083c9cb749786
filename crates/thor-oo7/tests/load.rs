//! The loader: object counts are the spec's, a seed gives the same database files byte for
//! byte, a cold traversal fetches each page it touches exactly once, and padding objects to
//! GOM's sizes grows the database by exactly the padding and changes no traversal's result.

mod common;

use std::collections::BTreeSet;

use thor_client::{PolicyConfig, SessionConfig};
use thor_oo7::experiment::{RunConfig, Workload, connect, run_in};
use thor_oo7::load::{LoadOptions, LoadReport, Padding};
use thor_oo7::rng::Rng;
use thor_oo7::traverse::Db;
use thor_oo7::{Op, Params};

/// The database's files and their bytes, except the directory lock, which names the process
/// that held it and when (two loads a second apart differ there, not in the database).
fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != "LOCK"))
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn small_has_the_spec_counts() {
    let dir = tempfile::tempdir().unwrap();
    let r = common::load(dir.path(), &Params::small(), LoadOptions::default());
    let c = r.counts;
    assert_eq!((c.modules, c.manuals, c.complex_assemblies, c.base_assemblies), (1, 1, 364, 729));
    assert_eq!((c.composite_parts, c.documents), (500, 500));
    assert_eq!((c.atomic_parts, c.connections), (10_000, 30_000));
    // One type string per design object and connection.
    assert_eq!(c.type_strings, 1 + 364 + 729 + 500 + 10_000 + 30_000);
    assert_eq!(r.deferred_patches, 0);
}

#[test]
fn the_same_seed_gives_identical_files_and_another_seed_does_not() {
    let p = Params::tiny();
    let (a, b, c) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::load(a.path(), &p, LoadOptions::default());
    common::load(b.path(), &p, LoadOptions::default());
    common::load(c.path(), &Params { seed: p.seed + 1, ..p }, LoadOptions::default());
    let (fa, fb, fc) = (files(a.path()), files(b.path()), files(c.path()));
    assert!(
        fa.iter().any(|(n, d)| n == "pages" && !d.is_empty()),
        "{:?}",
        fa.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(fa, fb);
    assert_ne!(fa, fc);
}

/// Runs `op` cold with a cache big enough to never evict; returns its fetches and the distinct
/// pages of every object the session accessed.
fn cold(dir: &std::path::Path, op: Op) -> (u64, usize) {
    let e = common::endpoint(dir);
    let s = connect(
        &e,
        SessionConfig {
            cache_bytes: 64 << 20,
            policy: PolicyConfig::Fpc,
            background_replacement: true,
            ..SessionConfig::default()
        },
    )
    .unwrap();
    let mut pages = BTreeSet::new();
    // The root's page: the session reads it for the schema and the roots.
    pages.insert(1);
    let cfg = RunConfig {
        workload: Workload::Op(op),
        policy: PolicyConfig::Fpc,
        cache_bytes: 64 << 20,
        hot: false,
        seed: 1,
        background_replacement: true,
        repeat: 1,
        commit_every: 0,
        prefetch: thor_oo7::experiment::PrefetchSetting::default(),
    };
    let r = run_in(&s, &cfg, |o: Option<thor_core::Oref>, _: bool| {
        if let Some(o) = o {
            pages.insert(o.page_raw());
        }
    })
    .unwrap();
    assert_eq!(r.frames_evicted, 0);
    (s.stats().fetches, pages.len())
}

#[test]
fn cold_t1_and_t6_fetch_each_page_they_touch_once() {
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &Params::small(), LoadOptions::default());
    for op in [Op::T1, Op::T6, Op::T1Minus] {
        let (fetches, pages) = cold(dir.path(), op);
        assert_eq!(fetches, pages as u64, "{}", op.name());
    }
}

/// Bytes GOM's sizes add to the objects of a load: the header's 8 bytes and 8 per reference
/// slot, per instance of each OO7 class (the built-in collections, strings and texts keep
/// their sizes).
fn gom_extra_bytes(r: &LoadReport) -> u64 {
    let c = r.counts;
    // Index objects: three index headers (one reference) and the nodes (none in the fixed part).
    let (headers, nodes) = (3, c.index_objects - 3);
    c.modules * (8 + 4 * 8)
        + c.manuals * (8 + 2 * 8)
        + c.complex_assemblies * (8 + 4 * 8)
        + c.base_assemblies * (8 + 5 * 8)
        + c.composite_parts * (8 + 6 * 8)
        + c.documents * (8 + 2 * 8)
        + c.atomic_parts * (8 + 4 * 8)
        + c.connections * (8 + 3 * 8)
        + 8 // the parameters object
        + headers * (8 + 8)
        + nodes * 8
}

#[test]
fn gom_padding_grows_the_database_by_the_padding_and_leaves_every_traversal_alone() {
    let p = Params::small();
    let opts = |padding| LoadOptions { page_size: 4096, padding, ..LoadOptions::default() };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let plain = common::load(a.path(), &p, opts(Padding::None));
    let big = common::load(b.path(), &p, opts(Padding::Gom));
    assert_eq!((plain.padding, big.padding), (Padding::None, Padding::Gom));
    assert_eq!(plain.counts, big.counts);
    assert_eq!(big.object_bytes - plain.object_bytes, gom_extra_bytes(&plain));
    // Every object at GOM's sizes would be larger still: collections, strings and texts cannot
    // be padded.
    assert_eq!(plain.gom_object_bytes, big.gom_object_bytes);
    assert!(big.gom_object_bytes > big.object_bytes);
    assert!(big.pages > plain.pages, "{} pages against {}", big.pages, plain.pages);

    {
        let (ea, eb) = (common::endpoint(a.path()), common::endpoint(b.path()));
        let (sa, sb) = (common::session(&ea), common::session(&eb));
        let (mut da, mut db) = (Db::open(&sa).unwrap(), Db::open(&sb).unwrap());
        assert_eq!((da.padding(), db.padding()), (Padding::None, Padding::Gom));
        for op in [Op::T1, Op::T6, Op::T1Minus, Op::T1Plus, Op::Q1, Op::Q7, Op::T2b] {
            let (mut ra, mut rb) = (Rng::new(3), Rng::new(3));
            let x = da.run(op, &mut ra).unwrap();
            let y = db.run(op, &mut rb).unwrap();
            assert_eq!(x, y, "{}", op.name());
            sa.commit().unwrap();
            sb.commit().unwrap();
        }
    }
    // Cold, a traversal fetches each page it touches once on either database, and T1 touches
    // more pages of the padded one. (T6 need not: it reads a composite part and its first
    // atomic part, and whether the two share a page depends on where the page breaks fall.)
    let mut fetches = vec![];
    for op in [Op::T1, Op::T6] {
        let (fa, pa) = cold(a.path(), op);
        let (fb, pb) = cold(b.path(), op);
        assert_eq!((fa, fb), (pa as u64, pb as u64), "{}", op.name());
        fetches.push((fa, fb));
    }
    assert!(fetches[0].1 > fetches[0].0, "T1: {:?}", fetches[0]);
}
