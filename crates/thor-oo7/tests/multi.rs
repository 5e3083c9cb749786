//! Traversals of one module, on the tiny database with several modules over the embedded
//! server.

mod common;

use thor_oo7::load::LoadOptions;
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
