//! Every operation of the suite gives the same answer on thor and on the native baseline built
//! from the same seed, in sequence (updates and structural changes included), and a database
//! loaded with every reference patched by commit instead of in the loader's window is the same
//! database, and so is one whose objects are padded to GOM's sizes (HAC-BIG's).

mod common;

use thor_oo7::load::{LoadOptions, Padding};
use thor_oo7::native::NativeDb;
use thor_oo7::rng::{Rng, tag};
use thor_oo7::traverse::Db;
use thor_oo7::{Op, Params};

fn suite_agrees(opts: LoadOptions) {
    let params = Params::tiny();
    let dir = tempfile::tempdir().unwrap();
    common::load(dir.path(), &params, opts);
    let e = common::endpoint(dir.path());
    let s = common::session(&e);
    let mut db = Db::open(&s).unwrap();
    assert_eq!(db.params(), &params);
    assert_eq!(db.padding(), opts.padding);
    let mut native = NativeDb::generate(&params, |_| {}).unwrap();
    let mut rt = Rng::stream(9, tag::RUN, 0);
    let mut rn = Rng::stream(9, tag::RUN, 0);
    // Twice through, so that updates and structural changes are seen by later operations.
    for round in 0..2 {
        for op in Op::ALL {
            let t = db.run(op, &mut rt).unwrap();
            s.commit().unwrap();
            let n = native.run(op, &mut rn).unwrap();
            assert_eq!(t, n, "{} in round {round}", op.name());
        }
    }
}

#[test]
fn every_operation_agrees_with_the_native_baseline() {
    suite_agrees(LoadOptions::default());
}

#[test]
fn references_patched_after_the_load_give_the_same_database() {
    suite_agrees(LoadOptions { defer_all_patches: true, ..LoadOptions::default() });
}

/// Every operation, structural inserts (which create objects at the padded size) and deletes
/// included, gives the native baseline's answers on the padded database too.
#[test]
fn objects_padded_to_gom_sizes_give_the_same_answers() {
    suite_agrees(LoadOptions { padding: Padding::Gom, ..LoadOptions::default() });
}

#[test]
fn traversal_counts_follow_the_spec_on_small() {
    let params = Params::small();
    let mut native = NativeDb::generate(&params, |_| {}).unwrap();
    let mut r = Rng::new(1);
    // 729 base assemblies x 3 private composite parts x 20 atomic parts.
    assert_eq!(native.run(Op::T1, &mut r).unwrap().parts_visited, 43_740);
    assert_eq!(native.run(Op::T6, &mut r).unwrap().parts_visited, 2_187);
    assert_eq!(native.run(Op::T1Minus, &mut r).unwrap().parts_visited, 2_187 * 10);
    let t2c = native.run(Op::T2c, &mut r).unwrap();
    assert_eq!(t2c.updates, 4 * 43_740);
}
