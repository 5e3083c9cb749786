//! The loader: object counts are the spec's, a seed gives the same database files byte for
//! byte, and a cold traversal fetches each page it touches exactly once.

mod common;

use std::collections::BTreeSet;

use thor_client::{PolicyConfig, SessionConfig};
use thor_oo7::experiment::{RunConfig, Workload, connect, run_in};
use thor_oo7::load::LoadOptions;
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
