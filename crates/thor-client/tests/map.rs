//! The persistent ordered map (`thor_client::map`) against `BTreeMap` models, across
//! commits, aborts and crashes of an embedded engine over `MemDisk`, and scenario tests of
//! what concurrency control sees. One behaviour per test.
//!
//! The model tests use 1 KiB pages (a leaf of `u64 → u64` holds 23 entries), so that a few
//! hundred keys make a tree of several levels that splits and merges often.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use thor_client::{ClientError, Map, PolicyConfig, Ref, Session, SessionConfig, Str};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

fn opts(page_size: usize) -> EngineOptions {
    EngineOptions { page_size, background_flusher: false, ..EngineOptions::default() }
}

fn engine(disk: &MemDisk, page_size: usize) -> Arc<Engine> {
    Arc::new(Engine::create(Arc::new(disk.clone()), opts(page_size)).unwrap())
}

/// A session with no prefetch (each miss fetches one page, so `fetches` counts nodes) and
/// no refresh (requests go when the test says).
fn session(h: &Arc<Engine>) -> Session {
    session_with(h, SessionConfig::default().run_attempts_max)
}

/// [`session`] with `run` making up to `attempts` attempts.
fn session_with(h: &Arc<Engine>, attempts: u32) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let cfg = SessionConfig {
        run_attempts_max: attempts,
        cache_bytes: 16 << 20,
        policy: PolicyConfig::HAC,
        prefetch_pages: Some(0),
        refresh_after: None,
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        ..SessionConfig::default()
    };
    Session::new(Box::new(t), cfg).unwrap()
}

/// A map of `K → V` in root slot 0 of a new engine.
fn with_map<K: thor_client::MapKey, V: thor_client::MapValue>(
    page_size: usize,
) -> (MemDisk, Arc<Engine>) {
    let disk = MemDisk::new();
    let h = engine(&disk, page_size);
    let s = session(&h);
    s.run(|s| {
        let m = s.create_map::<K, V>()?;
        s.set_root(0, m)
    })
    .unwrap();
    (disk, h)
}

fn entries<K: thor_client::MapKey, V: thor_client::MapValue>(
    s: &Session,
) -> Result<Vec<(K, V)>, ClientError> {
    let m = s.map(s.root::<Map<K, V>>(0)?)?;
    m.iter()?.collect()
}

// ------------------------------------------------------------------------------------------
// Model tests.

#[derive(Debug, Clone)]
enum Op<K> {
    Insert(K, u64),
    Remove(K),
    Get(K),
    Range(K, K),
    First,
    Last,
    Clear,
    Commit,
    Abort,
    Crash,
}

fn op<K: std::fmt::Debug + Clone>(
    key: impl Strategy<Value = K> + Clone,
) -> impl Strategy<Value = Op<K>> {
    prop_oneof![
        40 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        20 => key.clone().prop_map(Op::Remove),
        5 => key.clone().prop_map(Op::Get),
        3 => (key.clone(), key).prop_map(|(a, b)| Op::Range(a, b)),
        1 => Just(Op::First),
        1 => Just(Op::Last),
        1 => Just(Op::Clear),
        6 => Just(Op::Commit),
        2 => Just(Op::Abort),
        1 => Just(Op::Crash),
    ]
}

/// Runs `ops` against a map and a `BTreeMap` model: every result agrees, a commit keeps the
/// transaction's changes, an abort and a crash (with the reopen of the engine on what the
/// disk kept) drop them, and after each the whole map equals the committed model.
fn check_model<K>(ops: Vec<Op<K>>, seed: u64)
where
    K: thor_client::MapKey + thor_client::KeyEncode + Ord + Clone + std::fmt::Debug,
{
    let (disk, mut h) = with_map::<K, u64>(1024);
    let mut s = session(&h);
    let mut committed: BTreeMap<K, u64> = BTreeMap::new();
    let mut model = committed.clone();
    for (i, o) in ops.into_iter().enumerate() {
        let whole = matches!(o, Op::Commit | Op::Abort | Op::Crash | Op::Clear);
        let m = s.map(s.root::<Map<K, u64>>(0).unwrap()).unwrap();
        match o {
            Op::Insert(k, v) => {
                assert_eq!(m.insert(k.clone(), v).unwrap(), model.insert(k, v), "op {i}");
            }
            Op::Remove(k) => assert_eq!(m.remove(&k).unwrap(), model.remove(&k), "op {i}"),
            Op::Get(k) => {
                assert_eq!(m.get(&k).unwrap(), model.get(&k).copied(), "op {i}");
                assert_eq!(m.contains_key(&k).unwrap(), model.contains_key(&k));
            }
            Op::Range(a, b) => {
                let (a, b) = if a <= b { (a, b) } else { (b, a) };
                let got: Vec<(K, u64)> =
                    m.range(a.clone()..b.clone()).unwrap().map(Result::unwrap).collect();
                let want: Vec<(K, u64)> =
                    model.range(a.clone()..b.clone()).map(|(k, v)| (k.clone(), *v)).collect();
                assert_eq!(got, want, "op {i}: range {a:?}..{b:?}");
                let got: Vec<(K, u64)> =
                    m.range(a.clone()..=b.clone()).unwrap().map(Result::unwrap).collect();
                let want: Vec<(K, u64)> =
                    model.range(a..=b).map(|(k, v)| (k.clone(), *v)).collect();
                assert_eq!(got, want, "op {i}: inclusive range");
            }
            Op::First => {
                assert_eq!(
                    m.first().unwrap(),
                    model.first_key_value().map(|(k, v)| (k.clone(), *v))
                )
            }
            Op::Last => {
                assert_eq!(m.last().unwrap(), model.last_key_value().map(|(k, v)| (k.clone(), *v)))
            }
            Op::Clear => {
                m.clear().unwrap();
                model.clear();
            }
            Op::Commit => {
                drop(m);
                s.commit().unwrap();
                committed = model.clone();
            }
            Op::Abort => {
                drop(m);
                s.abort();
                model = committed.clone();
            }
            Op::Crash => {
                drop(m);
                drop(s);
                drop(h);
                disk.crash(seed ^ i as u64);
                h = Arc::new(Engine::open(Arc::new(disk.clone()), opts(1024)).unwrap());
                s = session(&h);
                model = committed.clone();
            }
        }
        if !whole && i % 16 != 0 {
            continue;
        }
        let got: Vec<(K, u64)> = entries::<K, u64>(&s).unwrap();
        let want: Vec<(K, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(got, want, "after op {i}");
    }
    let m = s.map(s.root::<Map<K, u64>>(0).unwrap()).unwrap();
    assert_eq!(m.len().unwrap(), model.len());
    assert_eq!(m.is_empty().unwrap(), model.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_map_of_integers_behaves_like_a_btreemap(
        ops in proptest::collection::vec(op(0u64..400), 1..500),
        seed in any::<u64>(),
    ) {
        check_model(ops, seed);
    }

    #[test]
    fn a_map_of_signed_integers_behaves_like_a_btreemap(
        ops in proptest::collection::vec(op(-200i64..200), 1..300),
        seed in any::<u64>(),
    ) {
        check_model(ops, seed);
    }

    /// Keys of very different lengths (up to the bound in 1 KiB pages): splits and merges by
    /// bytes, separators of every size.
    #[test]
    fn a_map_of_strings_behaves_like_a_btreemap(
        ops in proptest::collection::vec(op("[a-d]{0,3}|[a-d]{20,48}"), 1..300),
        seed in any::<u64>(),
    ) {
        check_model(ops, seed);
    }

    #[test]
    fn a_map_of_byte_strings_behaves_like_a_btreemap(
        ops in proptest::collection::vec(op(proptest::collection::vec(0u8..4, 0..12)), 1..300),
        seed in any::<u64>(),
    ) {
        check_model(ops, seed);
    }
}

// ------------------------------------------------------------------------------------------
// Values that are references.

thor_client::class! {
    /// A user, the value of a map of references.
    pub class User("test.User") {
        id: u64,
        name: Ref<Str>,
    }
}

/// Values of type `Ref<T>` are reference slots: they survive commit and a fresh session, a
/// leaf of them splits at the fanout (300 entries in 8 KiB pages need three leaves), and
/// removing most of them merges the leaves back.
#[test]
fn a_map_of_references_keeps_its_objects() {
    let (_disk, h) = with_map::<String, Ref<User>>(8192);
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<String, Ref<User>>>(0)?)?;
        for i in 0..300u64 {
            let u = s.create_fixed::<User>()?;
            u.set(User::id, i)?;
            u.set_str(User::name, &format!("user {i}"))?;
            assert_eq!(m.insert(format!("u{i:04}"), u.as_ref())?, None);
        }
        Ok::<_, ClientError>(())
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<String, Ref<User>>>(0)?)?;
        assert_eq!(m.len()?, 300);
        for (i, e) in m.iter()?.enumerate() {
            let (k, u) = e?;
            assert_eq!(k, format!("u{i:04}"));
            let u = s.get(u)?;
            assert_eq!(u.get(User::id), i as u64);
            assert_eq!(u.get_str(User::name)?, format!("user {i}"));
        }
        for i in (0..300u64).filter(|i| i % 10 != 0) {
            assert!(m.remove(format!("u{i:04}").as_str())?.is_some());
        }
        Ok::<_, ClientError>(())
    })
    .unwrap();
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<String, Ref<User>>>(0)?)?;
        let keys: Vec<String> = m.iter()?.map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
        let want: Vec<String> = (0..300).step_by(10).map(|i| format!("u{i:04}")).collect();
        assert_eq!(keys, want);
        let (k, u) = m.last()?.unwrap();
        assert_eq!((k.as_str(), s.get(u)?.get(User::id)), ("u0290", 290));
        Ok::<_, ClientError>(())
    })
    .unwrap();
}

/// A map read as another key or value type than it was made with is refused, and a key past
/// the bound is `TooLong`.
#[test]
fn a_map_checks_its_types_and_key_length() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let s = session(&h);
    let r = s.root::<Map<u64, u64>>(0).unwrap();
    let wrong: Ref<Map<String, u64>> = r.cast();
    assert!(matches!(s.map(wrong), Err(ClientError::BadValue(_))));
    let wrong: Ref<Map<u64, u32>> = r.cast();
    assert!(matches!(s.map(wrong), Err(ClientError::BadValue(_))));
    s.abort();
    let (_disk, h) = with_map::<Vec<u8>, u64>(8192);
    let s = session(&h);
    let m = s.map(s.root::<Map<Vec<u8>, u64>>(0).unwrap()).unwrap();
    let max = m.key_bytes_max();
    assert_eq!(max, 1024);
    assert_eq!(m.insert(vec![1; max], 1).unwrap(), None);
    assert!(matches!(m.insert(vec![1; max + 1], 1), Err(ClientError::TooLong { .. })));
    assert_eq!(m.get(vec![1; max].as_slice()).unwrap(), Some(1));
    // Lookups share one key buffer: a refused key leaves it usable for the next.
    assert!(matches!(m.get(vec![1; max + 1].as_slice()), Err(ClientError::TooLong { .. })));
    assert!(matches!(
        m.contains_key(vec![1; max + 1].as_slice()),
        Err(ClientError::TooLong { .. })
    ));
    assert!(m.contains_key(vec![1; max].as_slice()).unwrap());
    assert_eq!(m.get([1u8, 1].as_slice()).unwrap(), None);
    assert_eq!(m.get(vec![1; max].as_slice()).unwrap(), Some(1));
}

/// Prefix iteration gives exactly the keys that start with the prefix, in order.
#[test]
fn a_prefix_scan_gives_the_keys_that_start_with_it() {
    let (_disk, h) = with_map::<String, u32>(1024);
    let s = session(&h);
    let words = ["a", "ab", "abc", "abd", "ac", "b", "ba", "\u{e9}t\u{e9}", "\u{e9}t\u{e9}s"];
    s.run(|s| {
        let m = s.map(s.root::<Map<String, u32>>(0)?)?;
        for (i, w) in words.iter().enumerate() {
            m.insert(w.to_string(), i as u32)?;
        }
        for i in 0..200 {
            m.insert(format!("z{i:03}"), i)?;
        }
        Ok::<_, ClientError>(())
    })
    .unwrap();
    s.run(|s| {
        let m = s.map(s.root::<Map<String, u32>>(0)?)?;
        let keys = |p: &str| -> Result<Vec<String>, ClientError> {
            m.prefix(p)?.map(|e| e.map(|(k, _)| k)).collect()
        };
        assert_eq!(keys("ab")?, ["ab", "abc", "abd"]);
        assert_eq!(keys("b")?, ["b", "ba"]);
        assert_eq!(keys("\u{e9}t")?, ["\u{e9}t\u{e9}", "\u{e9}t\u{e9}s"]);
        assert_eq!(keys("z1")?.len(), 100);
        assert!(keys("q")?.is_empty());
        assert_eq!(keys("")?.len(), words.len() + 200);
        Ok::<_, ClientError>(())
    })
    .unwrap();
}

// ------------------------------------------------------------------------------------------
// Scenarios.

/// 100,000 entries inserted in a scattered order over many commits come back from a fresh
/// session in key order, and `len` counts them.
#[test]
fn a_map_of_100_000_entries_iterates_in_order() {
    const N: u64 = 100_000;
    let (_disk, h) = with_map::<u64, u64>(8192);
    let s = session(&h);
    // A permutation of 0..N: multiplication by a unit modulo N.
    let key = |i: u64| (i * 7_919) % N;
    for batch in 0..20 {
        s.run(|s| {
            let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
            for i in batch * (N / 20)..(batch + 1) * (N / 20) {
                m.insert(key(i), key(i) * 2)?;
            }
            Ok::<_, ClientError>(())
        })
        .unwrap();
    }
    drop(s);
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
        let mut n = 0;
        for e in m.iter()? {
            let (k, v) = e?;
            assert_eq!((k, v), (n, n * 2));
            n += 1;
        }
        assert_eq!(n, N);
        assert_eq!(m.len()?, N as usize);
        assert_eq!(m.first()?, Some((0, 0)));
        assert_eq!(m.last()?, Some((N - 1, (N - 1) * 2)));
        Ok::<_, ClientError>(())
    })
    .unwrap();
}

/// A range scan fetches the leaves that hold the range (and at most the one after), not the
/// map: the path's internal node is cached by an earlier lookup, and each node is a page.
#[test]
fn a_range_scan_reads_only_the_leaves_it_covers() {
    const N: u64 = 20_000;
    let (_disk, h) = with_map::<u64, u64>(8192);
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
        (0..N).try_for_each(|k| m.insert(k, k).map(drop))
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    let m = s.map(s.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(m.get(&0).unwrap(), Some(0));
    let before = s.stats().fetches;
    let got: Vec<u64> = m.range(10_000..11_000).unwrap().map(|e| e.unwrap().0).collect();
    let fetched = s.stats().fetches - before;
    assert_eq!(got, (10_000..11_000).collect::<Vec<_>>());
    // Keys inserted in order leave leaves half full: 190 entries of 20 bytes in a 7,632-byte
    // area. 1,000 keys span at most 7 of them, plus the one after that shows the end.
    let leaves_max = 1_000u64.div_ceil(190) + 2;
    assert!(fetched <= leaves_max, "a scan of 1,000 keys fetched {fetched} pages");
    assert!(fetched >= 1_000 / 381, "the scan fetched {fetched} pages");
    // The map has at least N / 381 leaves (full ones); the scan read a small part of them.
    let all_leaves = N / 381;
    assert!(fetched * 5 < all_leaves, "{fetched} of at least {all_leaves} leaves");
}

/// Two transactions that insert the same key into a map: the second to commit conflicts
/// (CLOCC sees its read of the leaf made stale by the first's write), and `run` retries it
/// to a result that saw the first's value.
#[test]
fn concurrent_inserts_of_the_same_key_conflict() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(ma.insert(5, 1).unwrap(), None);
    assert_eq!(mb.insert(5, 2).unwrap(), None);
    drop((ma, mb));
    a.commit().unwrap();
    let err = b.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let old = b
        .run(|s| {
            let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
            m.insert(5, 2)
        })
        .unwrap();
    assert_eq!(old, Some(1));
}

/// Two transactions that insert different keys into one leaf both commit: the second, which
/// CLOCC alone would refuse (its copy of the leaf is stale), carries a delta of the leaf (it
/// saw its key absent, and inserted it) that the server merges onto the first's leaf
/// (docs/clocc.md, "Map leaves").
#[test]
fn concurrent_inserts_of_different_keys_in_one_leaf_both_commit() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(ma.insert(5, 1).unwrap(), None);
    assert_eq!(mb.insert(6, 2).unwrap(), None);
    drop((ma, mb));
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(h.stats().leaf_merges, 1);
    let s = session(&h);
    assert_eq!(entries::<u64, u64>(&s).unwrap(), [(5, 1), (6, 2)]);
}

/// Two transactions that remove different keys of one leaf both commit, the second merged.
#[test]
fn concurrent_removes_of_different_keys_in_one_leaf_both_commit() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    session(&h)
        .run(|s| {
            let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
            (0..10).try_for_each(|k| m.insert(k, k * 10).map(drop))
        })
        .unwrap();
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(ma.remove(&3).unwrap(), Some(30));
    assert_eq!(mb.remove(&7).unwrap(), Some(70));
    drop((ma, mb));
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(h.stats().leaf_merges, 1);
    let want: Vec<(u64, u64)> =
        (0..10).filter(|k| ![3, 7].contains(k)).map(|k| (k, k * 10)).collect();
    assert_eq!(entries::<u64, u64>(&session(&h)).unwrap(), want);
}

/// After a merge the committer's cached leaf is its own version, not the merged one installed:
/// the server invalidates it with the commit's answer, so the committer's next transaction
/// reads the leaf with both changes (and so does a new client). (The first client may still
/// read its own copy in a read-only transaction it commits locally: a snapshot from before
/// the merge, which is serializable there.)
#[test]
fn a_merged_leaf_is_read_back_with_both_changes() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    ma.insert(5, 1).unwrap();
    mb.insert(6, 2).unwrap();
    drop((ma, mb));
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(h.stats().leaf_merges, 1);
    for s in [&b, &session(&h)] {
        let got = s
            .run(|s| {
                let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
                Ok::<_, ClientError>((m.get(&5)?, m.get(&6)?))
            })
            .unwrap();
        assert_eq!(got, (Some(1), Some(2)));
    }
    // And the committer's next change of that leaf commits on the merged version.
    b.run(|s| s.map(s.root::<Map<u64, u64>>(0)?)?.insert(7, 3)).unwrap();
    assert_eq!(entries::<u64, u64>(&session(&h)).unwrap(), [(5, 1), (6, 2), (7, 3)]);
}

/// An invalidation of a leaf that the open transaction changed only by point operations,
/// arriving in the middle of it (here on the reply to a stats request), does not doom it: it
/// goes on with its own copy of the leaf, and its commit is merged onto the other's.
#[test]
fn an_invalidation_of_a_leaf_changed_by_point_operations_does_not_doom_the_transaction() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(ma.insert(5, 1).unwrap(), None);
    b.run(|s| s.map(s.root::<Map<u64, u64>>(0)?)?.insert(6, 2)).unwrap();
    a.server_stats().unwrap();
    assert_eq!(a.stats().invalidations, 1, "the leaf's invalidation reached a");
    assert_eq!(ma.insert(7, 3).unwrap(), None);
    drop(ma);
    a.commit().unwrap();
    assert_eq!(h.stats().leaf_merges, 1);
    assert_eq!(entries::<u64, u64>(&session(&h)).unwrap(), [(5, 1), (6, 2), (7, 3)]);
}

/// A transaction that scanned the map carries no delta: its view of the leaf is every entry,
/// which a key-by-key check cannot re-verify, so it conflicts as before.
#[test]
fn a_transaction_that_scanned_the_leaf_is_not_merged() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    ma.insert(5, 1).unwrap();
    assert_eq!(mb.len().unwrap(), 0);
    mb.insert(6, 2).unwrap();
    drop((ma, mb));
    a.commit().unwrap();
    let err = b.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(h.stats().leaf_merges, 0);
}

/// Clients increment counters kept under shared keys of one leaf (a read and a write of the
/// key each) and insert keys of their own, concurrently, in transactions `run` retries. A
/// serial order of the committed transactions gives every counter the number of increments
/// made to it and every client's keys present: the final map must be exactly that, however
/// many of the commits the server merged.
#[test]
fn concurrent_map_clients_end_as_a_serial_order_would() {
    const CLIENTS: u64 = 4;
    const TXNS: u64 = 200;
    const SHARED: u64 = 16;
    let (_disk, h) = with_map::<u64, u64>(8192);
    let start = Arc::new(std::sync::Barrier::new(CLIENTS as usize));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (h, start) = (h.clone(), start.clone());
            std::thread::spawn(move || {
                let s = session_with(&h, 10_000);
                let mut counts = vec![0u64; SHARED as usize];
                let mut seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(c + 1);
                start.wait();
                for t in 0..TXNS {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let k = (seed >> 33) % SHARED;
                    s.run(|s| {
                        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
                        let v = m.get(&k)?.unwrap_or(0);
                        m.insert(k, v + 1)?;
                        m.insert(1_000 + c * TXNS + t, c)
                    })
                    .unwrap();
                    counts[k as usize] += 1;
                }
                counts
            })
        })
        .collect();
    let mut counts = vec![0u64; SHARED as usize];
    for t in threads {
        for (k, n) in t.join().unwrap().into_iter().enumerate() {
            counts[k] += n;
        }
    }
    let mut want: Vec<(u64, u64)> =
        (0..SHARED).filter(|&k| counts[k as usize] > 0).map(|k| (k, counts[k as usize])).collect();
    want.extend((0..CLIENTS).flat_map(|c| (0..TXNS).map(move |t| (1_000 + c * TXNS + t, c))));
    let stats = h.stats();
    assert_eq!(
        entries::<u64, u64>(&session(&h)).unwrap(),
        want,
        "merges {}, refused {}",
        stats.leaf_merges,
        stats.leaf_merges_refused
    );
}

/// Inserts of different keys into different leaves do not conflict: they share only reads
/// of the internal nodes.
#[test]
fn concurrent_inserts_into_different_leaves_both_commit() {
    let (_disk, h) = with_map::<u64, u64>(8192);
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
        (0..2_000).try_for_each(|k| m.insert(k * 10, k).map(drop))
    })
    .unwrap();
    let (a, b) = (session(&h), session(&h));
    let ma = a.map(a.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    let mb = b.map(b.root::<Map<u64, u64>>(0).unwrap()).unwrap();
    assert_eq!(ma.insert(5, 1).unwrap(), None);
    assert_eq!(mb.insert(19_995, 2).unwrap(), None);
    drop((ma, mb));
    a.commit().unwrap();
    b.commit().unwrap();
    let s = session(&h);
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
        assert_eq!((m.get(&5)?, m.get(&19_995)?, m.len()?), (Some(1), Some(2), 2_002));
        Ok::<_, ClientError>(())
    })
    .unwrap();
}

/// A map whose stored nodes are damaged (or written by someone else) gives
/// `ClientError::BadValue`, never a panic or an endless iteration: an entry offset past the
/// area, a count past the fanout, and a leaf chain that loops back on itself.
#[test]
fn a_malformed_map_is_a_bad_value_not_a_panic_or_a_loop() {
    use thor_client::map::{MapHeader, MapNode};
    let bad = |r: Result<(), ClientError>| {
        assert!(matches!(r, Err(ClientError::BadValue(_))), "{r:?}");
    };
    // Two levels: a root over leaves (400 entries need two leaves of 8 KiB).
    let build = || {
        let (_disk, h) = with_map::<u64, u64>(8192);
        let s = session(&h);
        s.run(|s| {
            let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
            (0..400).try_for_each(|k| m.insert(k, k).map(drop))
        })
        .unwrap();
        (h, s)
    };
    let root = |s: &Session| -> Ref<MapNode> {
        let header = s.get(s.root::<MapHeader>(0).unwrap()).unwrap();
        header.get(MapHeader::root)
    };
    let first_leaf = |s: &Session| -> Ref<MapNode> {
        let r = s.get(root(s)).unwrap();
        r.get(thor_client::Field::<MapNode, Ref<MapNode>>::at(16))
    };
    fn map(s: &Session) -> thor_client::MapView<'_, u64, u64> {
        s.map(s.root::<Map<u64, u64>>(0).unwrap()).unwrap()
    }

    // An entry offset past the area.
    let (_h, s) = build();
    s.get(first_leaf(&s)).unwrap().write_var_bytes(0, &[0xff, 0xff]).unwrap();
    bad(map(&s).get(&0).map(drop));
    bad(map(&s).insert(0, 1).map(drop));
    s.abort();

    // A key length past the longest key, read in place by a lookup and by an iteration.
    let (_h, s) = build();
    let leaf = s.get(first_leaf(&s)).unwrap();
    let mut dir0 = [0u8; 2];
    leaf.read_var_bytes(0, &mut dir0).unwrap();
    leaf.write_var_bytes(u16::from_le_bytes(dir0) as usize, &[0xff, 0xff]).unwrap();
    drop(leaf);
    bad(map(&s).get(&0).map(drop));
    bad(map(&s).iter().and_then(|mut i| i.next().transpose()).map(drop));
    bad(map(&s).first().map(drop));
    s.abort();

    // A count past the fanout in an internal node.
    let (_h, s) = build();
    let count = thor_client::Field::<MapNode, u32>::at(4);
    s.get(root(&s)).unwrap().set(count, 10_000).unwrap();
    bad(map(&s).get(&0).map(drop));
    s.abort();

    // A leaf whose `next` is itself: iteration and `len` stop with an error.
    let (_h, s) = build();
    let leaf = first_leaf(&s);
    let next = thor_client::Field::<MapNode, Ref<MapNode>>::at(12);
    s.get(leaf).unwrap().set(next, leaf).unwrap();
    let m = map(&s);
    let got: Vec<Result<(u64, u64), ClientError>> = m.iter().unwrap().collect();
    assert!(got.len() <= 400, "{} items", got.len());
    assert!(matches!(got.last(), Some(Err(ClientError::BadValue(_)))));
    bad(m.len().map(drop));
}

/// Four clients insert and remove keys of their own concurrently, in small transactions that
/// `run` retries on conflicts (splits, merges and shared leaves make many): every committed
/// change is in the map at the end, in order, and nothing else is. 1 KiB pages make the tree
/// split and merge often.
#[test]
fn concurrent_clients_changing_their_own_keys_keep_every_committed_change() {
    const CLIENTS: u64 = 4;
    const KEYS: u64 = 1_000;
    let (_disk, h) = with_map::<u64, u64>(1024);
    let start = Arc::new(std::sync::Barrier::new(CLIENTS as usize));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (h, start) = (h.clone(), start.clone());
            std::thread::spawn(move || {
                // The clients' keys interleave, so they share every leaf: many attempts.
                let s = session_with(&h, 10_000);
                start.wait();
                // Client c owns the keys k with k % CLIENTS == c; it inserts them in batches
                // of 10, then removes every third.
                let mine: Vec<u64> = (0..KEYS).map(|i| i * CLIENTS + c).collect();
                for batch in mine.chunks(10) {
                    s.run(|s| {
                        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
                        batch.iter().try_for_each(|&k| m.insert(k, k + 1).map(drop))
                    })
                    .unwrap();
                }
                for batch in mine.chunks(30) {
                    s.run(|s| {
                        let m = s.map(s.root::<Map<u64, u64>>(0)?)?;
                        for &k in batch.iter().step_by(3) {
                            assert_eq!(m.remove(&k)?, Some(k + 1));
                        }
                        Ok::<_, ClientError>(())
                    })
                    .unwrap();
                }
                s.stats().conflicts
            })
        })
        .collect();
    let conflicts: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let s = session(&h);
    let want: Vec<(u64, u64)> = (0..KEYS * CLIENTS)
        .filter(|k| !(k / CLIENTS).is_multiple_of(3))
        .map(|k| (k, k + 1))
        .collect();
    assert_eq!(entries::<u64, u64>(&s).unwrap(), want, "after {conflicts} conflicts");
}
