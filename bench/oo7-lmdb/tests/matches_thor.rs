//! OO7 over LMDB answers as thor does, on the same database: the loader writes thor-oo7's
//! database value for value, and every traversal gives thor's counts (parts visited, updates,
//! result), in sequence, so updates are seen by the traversals after them.

use std::path::Path;

use heed::Env;
use oo7_lmdb::store::{self, Db, EnvConfig};
use oo7_lmdb::traverse::Traverser;
use thor_client::{PolicyConfig, SessionConfig};
use thor_oo7::experiment::{Endpoint, connect, open_embedded};
use thor_oo7::load::{LoadOptions, load_dir};
use thor_oo7::native::NativeDb;
use thor_oo7::ops::OpResult;
use thor_oo7::rng::Rng;
use thor_oo7::traverse::Db as ThorDb;
use thor_oo7::{Op, Params};

/// Runs `op` over LMDB: a read transaction, or a committed write transaction for updates.
fn lmdb_run(env: &Env, db: &Db<'_>, t: &mut Traverser, op: Op) -> OpResult {
    if op.writes() {
        let mut w = env.write_txn().unwrap();
        let r = t.run(db, &mut w, op).unwrap();
        w.commit().unwrap();
        r
    } else {
        let mut r = env.read_txn().unwrap();
        t.run(db, &mut r, op).unwrap()
    }
}

/// Loads `params` as thor and as LMDB and runs `ops` on both (and on the native model) in
/// sequence; every answer must be the same, and LMDB's values must equal the model's after.
fn agree(params: Params, ops: &[Op]) {
    let thor_dir = tempfile::tempdir().unwrap();
    load_dir(thor_dir.path(), &params, LoadOptions::default(), |_, _| {}).unwrap();
    let endpoint = Endpoint::Embedded(open_embedded(thor_dir.path()).unwrap());
    let s = connect(
        &endpoint,
        SessionConfig {
            cache_bytes: 64 << 20,
            policy: PolicyConfig::Fpc,
            ..SessionConfig::default()
        },
    )
    .unwrap();
    let mut thor = ThorDb::open(&s).unwrap();
    assert_eq!(thor.params(), &params);

    let lmdb_dir = tempfile::tempdir().unwrap();
    let mut native = NativeDb::generate(&params, |_| {}).unwrap();
    let env = store::open_env(&lmdb_dir.path().join("db"), EnvConfig::WRITABLE).unwrap();
    let report = store::load(&env, &native, |_, _| {}).unwrap();
    assert_eq!(report.counts, store::counts(&native));
    let db = store::open_db(&env).unwrap();
    {
        let r = env.read_txn().unwrap();
        store::verify(&db, &r, &native).unwrap();
        let meta = store::read_meta(&db, &r).unwrap();
        assert_eq!(meta.params, params);
    }
    let meta = store::read_meta(&db, &env.read_txn().unwrap()).unwrap();
    let mut t = Traverser::new(&meta);
    // The traversals make no random choices; the generator is the same for all three.
    let mut rng = Rng::new(1);
    for &op in ops {
        let want = thor.run(op, &mut rng).unwrap();
        s.commit().unwrap();
        let n = native.run(op, &mut rng).unwrap();
        assert_eq!(n, want, "{}: native against thor", op.name());
        let got = lmdb_run(&env, &db, &mut t, op);
        assert_eq!(got, want, "{}: LMDB against thor", op.name());
    }
    // The updates changed the same parts the same number of times.
    store::verify(&db, &env.read_txn().unwrap(), &native).unwrap();
    assert_small_dir(lmdb_dir.path());
}

/// The test's databases stay small (the map is address space, not disk).
fn assert_small_dir(dir: &Path) {
    let len = std::fs::metadata(dir.join("db").join(store::DATA_FILE)).unwrap().len();
    assert!(len < 64 << 20, "{len} bytes");
}

#[test]
fn every_traversal_agrees_with_thor_on_tiny_in_sequence() {
    agree(
        Params::tiny(),
        &[
            Op::T6,
            Op::T1Minus,
            Op::T1,
            Op::T1Plus,
            Op::T2a,
            Op::T2b,
            Op::T2c,
            Op::T1,
            Op::T2b,
            Op::T6,
        ],
    );
}

#[test]
fn t6_t1_minus_t1_and_t2b_agree_with_thor_on_small() {
    agree(Params::small(), &[Op::T6, Op::T1Minus, Op::T1, Op::T2b, Op::T1]);
}

#[test]
fn another_seed_gives_another_database() {
    let p = Params { seed: 99, ..Params::tiny() };
    let other = NativeDb::generate(&Params::tiny(), |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = store::open_env(dir.path(), EnvConfig::WRITABLE).unwrap();
    store::load(&env, &NativeDb::generate(&p, |_| {}).unwrap(), |_, _| {}).unwrap();
    let db = store::open_db(&env).unwrap();
    let err = store::verify(&db, &env.read_txn().unwrap(), &other).unwrap_err();
    assert!(err.to_string().contains("differs"), "{err}");
}

#[test]
fn unsupported_operations_and_missing_databases_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = store::open_env(&dir.path().join("none"), EnvConfig::READ_ONLY).unwrap_err();
    assert!(err.to_string().contains("oo7-lmdb load"), "{err}");
    let env = store::open_env(dir.path(), EnvConfig::WRITABLE).unwrap();
    let n = NativeDb::generate(&Params::tiny(), |_| {}).unwrap();
    store::load(&env, &n, |_, _| {}).unwrap();
    let db = store::open_db(&env).unwrap();
    let meta = store::read_meta(&db, &env.read_txn().unwrap()).unwrap();
    let mut t = Traverser::new(&meta);
    let err = t.run(&db, &mut env.read_txn().unwrap(), Op::Q1).unwrap_err();
    assert!(err.to_string().contains("not run over LMDB"), "{err}");
    let err = t.run(&db, &mut env.read_txn().unwrap(), Op::T2b).unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    // A second load into the same environment is refused.
    assert!(store::load(&env, &n, |_, _| {}).is_err());
}
