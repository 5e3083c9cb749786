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
