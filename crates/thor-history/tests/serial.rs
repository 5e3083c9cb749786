//! The history checker (`thor_history`): each anomaly it must find, found exactly, and
//! histories made by executing transactions serially on a model, which must pass (also at
//! 100,000 transactions, quickly) and must stop passing when one read is made stale.

use std::collections::HashMap;
use std::time::Instant;

use proptest::prelude::*;
use thor_history::{
    Anomaly, Edge, EdgeKind, History, INITIAL, ObjId, Options, ReplayError, Status, Txn, Version,
    check, check_conserved_total, check_with, replay_in_order,
};
use thor_storage::SplitMix64;

const X: ObjId = 10;
const Y: ObjId = 20;

fn edge(from: u64, kind: EdgeKind, obj: ObjId, to: u64) -> Edge {
    Edge { from, to, kind, obj }
}

#[test]
fn serial_history_passes() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, 101).read(Y, INITIAL).write(Y, 201));
    h.add_committed(Txn::new(3, 1).read(X, 101).read(Y, 201));
    h.add_committed(Txn::new(4, 2).read(X, 101).write(X, 401).read(X, 401));
    let s = check(&h, Some(&[(X, 401), (Y, 201)])).unwrap();
    assert_eq!(s.committed, 4);
    assert_eq!(s.writes, 3);
    assert_eq!(s.objects, 2);
    assert_eq!(s.serial_order, vec![1, 2, 3, 4]);
    assert_eq!(s.reads, 6, "the read of its own write is not counted");
}

#[test]
fn lost_update_is_found() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).write(X, 101).ordered(1));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).write(X, 201).ordered(2));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::LostUpdate { obj: X, read: INITIAL, writers: [1, 2] })
    );
}

#[test]
fn write_skew_cycle_is_found() {
    // Each reads both objects, then writes the one the other did not: rw both ways.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).read(Y, INITIAL).write(X, 101).ordered(1));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).read(Y, INITIAL).write(Y, 201).ordered(2));
    assert_eq!(
        check(&h, Some(&[(X, 101), (Y, 201)])),
        Err(Anomaly::Cycle {
            txns: vec![1, 2],
            edges: vec![edge(1, EdgeKind::ReadWrite, Y, 2), edge(2, EdgeKind::ReadWrite, X, 1)],
        })
    );
}

#[test]
fn read_of_aborted_write_is_found() {
    let mut h = History::new();
    h.add_aborted(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, 101));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::ReadOfAbortedWrite { reader: 2, writer: 1, obj: X, version: 101 })
    );
}

#[test]
fn read_of_unknown_write_is_found() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, 777));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::ReadOfUnknownWrite { reader: 1, obj: X, version: 777 })
    );
}

#[test]
fn fractured_read_cycle_is_found() {
    // Txn 2 sees txn 1's write of x but not its write of y.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101).write(Y, 102).ordered(1));
    h.add_committed(Txn::new(2, 2).read(X, 101).read(Y, INITIAL).ordered(2));
    assert_eq!(
        check(&h, Some(&[(X, 101), (Y, 102)])),
        Err(Anomaly::Cycle {
            txns: vec![1, 2],
            edges: vec![edge(1, EdgeKind::WriteRead, X, 2), edge(2, EdgeKind::ReadWrite, Y, 1)],
        })
    );
}

#[test]
fn shortest_cycle_is_reported() {
    // A long ww chain 1 -> 2 -> .. -> 6 on x, and txn 6 read y before txn 5 wrote it... the
    // only cycle is 5 -ww-> 6 -rw-> 5, which is what must be reported, not a longer path.
    let mut h = History::new();
    let mut prev = INITIAL;
    for i in 1..=6u64 {
        let mut t = Txn::new(i, 1).read(X, prev).write(X, 100 + i).ordered(i);
        if i == 5 {
            t = t.write(Y, 500);
        }
        if i == 6 {
            t = t.read(Y, INITIAL);
        }
        prev = 100 + i;
        h.add_committed(t);
    }
    assert_eq!(
        check(&h, None),
        Err(Anomaly::Cycle {
            txns: vec![5, 6],
            edges: vec![edge(5, EdgeKind::WriteWrite, X, 6), edge(6, EdgeKind::ReadWrite, Y, 5)],
        })
    );
}

#[test]
fn uncertain_commit_seen_counts_as_committed() {
    // Seen by a committed read.
    let mut h = History::new();
    h.add_uncertain(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, 101).write(Y, 201));
    let s = check(&h, Some(&[(X, 101), (Y, 201)])).unwrap();
    assert_eq!((s.committed, s.uncertain_committed.clone(), s.uncertain_aborted), (2, vec![1], 0));
    assert_eq!(s.serial_order, vec![1, 2]);

    // Seen only through another uncertain transaction that a committed one saw.
    let mut h = History::new();
    h.add_uncertain(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_uncertain(Txn::new(2, 1).read(X, 101).write(Y, 201));
    h.add_committed(Txn::new(3, 2).read(Y, 201));
    let s = check(&h, None).unwrap();
    assert_eq!(s.uncertain_committed, vec![1, 2]);

    // Seen only in the final state; then it is committed, so a second writer that read the
    // initial version too lost its update.
    let mut h = History::new();
    h.add_uncertain(Txn::new(1, 1).read(X, INITIAL).write(X, 101).write(Y, 102));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).write(X, 201));
    assert_eq!(
        check(&h, Some(&[(X, 201), (Y, 102)])),
        Err(Anomaly::LostUpdate { obj: X, read: INITIAL, writers: [1, 2] })
    );
}

#[test]
fn uncertain_commit_unseen_counts_as_aborted() {
    // Nobody saw its write of x, so it did not commit, and txn 2 lost no update.
    let mut h = History::new();
    h.add_uncertain(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).write(X, 201));
    let s = check(&h, Some(&[(X, 201)])).unwrap();
    assert_eq!((s.committed, s.uncertain_committed.len(), s.uncertain_aborted), (1, 0, 1));
    assert_eq!(s.serial_order, vec![2]);
}

#[test]
fn final_state_mismatch_is_found() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, 101).write(X, 201).write(Y, 202));
    assert_eq!(
        check(&h, Some(&[(X, 101), (Y, 202)])),
        Err(Anomaly::FinalStateMismatch { obj: X, expected: 201, found: Some(101) })
    );
    assert_eq!(
        check(&h, Some(&[(X, 201)])),
        Err(Anomaly::FinalStateMismatch { obj: Y, expected: 202, found: None })
    );
    // An object nobody committed a write of must be at its initial version.
    h.add_aborted(Txn::new(3, 3).write(99, 301));
    assert_eq!(
        check(&h, Some(&[(X, 201), (Y, 202), (99, 301)])),
        Err(Anomaly::FinalStateMismatch { obj: 99, expected: INITIAL, found: Some(301) })
    );
    assert!(check(&h, Some(&[(X, 201), (Y, 202), (99, INITIAL)])).is_ok());
}

#[test]
fn duplicate_write_is_found() {
    // A commit applied twice under two ids writes the same value twice.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101));
    h.add_committed(Txn::new(2, 1).write(X, 101));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::DuplicateWrite { obj: X, version: 101, writers: [1, 2] })
    );
}

#[test]
fn malformed_histories_are_refused() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1));
    h.add_aborted(Txn::new(1, 1));
    assert_eq!(check(&h, None), Err(Anomaly::DuplicateTxnId { txn: 1 }));
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, INITIAL));
    assert_eq!(check(&h, None), Err(Anomaly::WriteOfInitialVersion { txn: 1, obj: X }));
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101).write(X, 102));
    assert_eq!(check(&h, None), Err(Anomaly::ObjectWrittenTwice { txn: 1, obj: X }));
}

#[test]
fn blind_writes_without_order_keys_are_unordered() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101));
    h.add_committed(Txn::new(2, 2).write(X, 201));
    assert_eq!(check(&h, None), Err(Anomaly::UnorderedWrites { obj: X, writers: vec![1, 2] }));

    // With keys on the blind writers, the read-modify-write chains hang off them.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101).ordered(5));
    h.add_committed(Txn::new(2, 2).read(X, 101).write(X, 102));
    h.add_committed(Txn::new(3, 3).write(X, 201).ordered(1));
    h.add_committed(Txn::new(4, 3).read(X, 201).write(X, 202));
    h.add_committed(Txn::new(5, 4).read(X, INITIAL).write(X, 1));
    let s = check(&h, Some(&[(X, 102)])).unwrap();
    assert_eq!(s.serial_order, vec![5, 3, 4, 1, 2]);
    assert_eq!(
        check(&h, Some(&[(X, 202)])),
        Err(Anomaly::FinalStateMismatch { obj: X, expected: 102, found: Some(202) })
    );

    // A single blind writer needs no key.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).write(X, 101));
    h.add_committed(Txn::new(2, 2).write(X, 201));
    h.add_committed(Txn::new(3, 2).read(X, 201).write(X, 202));
    assert_eq!(check(&h, Some(&[(X, 202)])).unwrap().serial_order, vec![1, 2, 3]);
}

#[test]
fn duplicate_order_key_is_found() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).write(X, 101).ordered(7));
    h.add_committed(Txn::new(2, 2).write(X, 201).ordered(7));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::DuplicateOrderKey { obj: X, order: 7, writers: [1, 2] })
    );
}

#[test]
fn circular_reads_without_order_keys_are_a_cycle() {
    // Each read the other's write of x: no chain from the initial version reaches them.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, 201).write(X, 101));
    h.add_committed(Txn::new(2, 2).read(X, 101).write(X, 201));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::Cycle {
            txns: vec![1, 2],
            edges: vec![edge(1, EdgeKind::WriteRead, X, 2), edge(2, EdgeKind::WriteRead, X, 1)],
        })
    );
}

#[test]
fn non_repeatable_read_is_a_cycle() {
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).read(X, 201).ordered(1));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).write(X, 201).ordered(2));
    assert_eq!(
        check(&h, None),
        Err(Anomaly::Cycle {
            txns: vec![1, 2],
            edges: vec![edge(1, EdgeKind::ReadWrite, X, 2), edge(2, EdgeKind::WriteRead, X, 1)],
        })
    );
}

#[test]
fn order_keys_against_dependencies_are_found_when_asked() {
    // Serializable (2 then 1), but the keys say 1 then 2.
    let mut h = History::new();
    h.add_committed(Txn::new(1, 1).read(X, INITIAL).write(X, 101).ordered(1));
    h.add_committed(Txn::new(2, 2).read(X, INITIAL).ordered(2));
    let s = check(&h, None).unwrap();
    assert_eq!((s.edges_against_order, s.serial_order.clone()), (1, vec![2, 1]));
    assert_eq!(
        check_with(&h, None, &Options { order_must_serialize: true }),
        Err(Anomaly::EdgeAgainstOrder {
            edge: edge(2, EdgeKind::ReadWrite, X, 1),
            from_order: 2,
            to_order: 1
        })
    );
}

/// Bank transfers on a model: accounts `0..accounts`, each starting with 100; a version's
/// balance is in `balances`. Returns the history and the balances of every version.
fn bank(seed: u64, txns: u64, accounts: u64) -> (History, HashMap<Version, i64>) {
    let mut rng = SplitMix64::new(seed);
    let mut state: Vec<(Version, i64)> = vec![(INITIAL, 100); accounts as usize];
    let mut balances = HashMap::from([(INITIAL, 100)]);
    let mut h = History::new();
    for id in 1..=txns {
        let a = rng.below(accounts);
        let b = (a + 1 + rng.below(accounts - 1)) % accounts;
        let amount = rng.below(50) as i64;
        let (va, vb) = (id * 2, id * 2 + 1);
        let (ba, bb) = (state[a as usize].1 - amount, state[b as usize].1 + amount);
        balances.insert(va, ba);
        balances.insert(vb, bb);
        h.add_committed(
            Txn::new(id, 0)
                .read(a, state[a as usize].0)
                .read(b, state[b as usize].0)
                .write(a, va)
                .write(b, vb)
                .ordered(id),
        );
        state[a as usize] = (va, ba);
        state[b as usize] = (vb, bb);
    }
    (h, balances)
}

#[test]
fn transfers_conserve_the_total_and_a_forgery_does_not() {
    let (mut h, mut balances) = bank(7, 2_000, 20);
    let accounts: Vec<ObjId> = (0..20).collect();
    let s = check(&h, None).unwrap();
    let total = check_conserved_total(&h, &s, &accounts, |_, v| balances[&v]).unwrap();
    assert_eq!(total, 2_000);
    let replayed = replay_in_order(&h, &s, |_| Ok::<(), String>(())).unwrap();

    // A serializable deposit from nowhere: read account 0's last version, add 1.
    let last = replayed.get(0);
    balances.insert(999_999, balances[&last] + 1);
    h.add_committed(Txn::new(999_999, 0).read(0, last).write(0, 999_999).ordered(1_000_000));
    let s = check(&h, None).unwrap();
    assert_eq!(
        check_conserved_total(&h, &s, &accounts, |_, v| balances[&v]),
        Err(ReplayError::Invariant {
            txn: 999_999,
            position: 2_000,
            error: "total is 2001, was 2000".to_string()
        })
    );
}

/// How generated transactions get order keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Every transaction, its serial position; blind writes allowed.
    All,
    /// Blind writers always, others with probability 1/2.
    Some,
    /// None; so no blind writes.
    None,
}

/// A history made by executing random transactions serially on a model store of `objects`
/// objects: some read-only, some read-modify-write, some blind writes, some reading their own
/// writes; a few aborted (never applied) and a few uncertain (applied or not). Returns the
/// history and the final state.
fn serial_history(
    seed: u64,
    txns: u64,
    objects: u64,
    keys: Keys,
) -> (History, Vec<(ObjId, Version)>) {
    let mut rng = SplitMix64::new(seed);
    let mut state: Vec<Version> = vec![INITIAL; objects as usize];
    let mut h = History::new();
    let mut next_version = 1;
    for id in 1..=txns {
        let mut t = Txn::new(id, rng.below(8) as u32);
        let mut touched = Vec::new();
        let mut blind = false;
        for _ in 0..1 + rng.below(4) {
            let obj = rng.below(objects);
            if touched.contains(&obj) {
                continue;
            }
            touched.push(obj);
            let r = rng.below(10);
            let read = r < 8 || keys == Keys::None;
            let write = r >= 5;
            if read {
                t = t.read(obj, state[obj as usize]);
            }
            if write {
                blind |= !read;
                t = t.write(obj, next_version);
                next_version += 1;
                if rng.below(4) == 0 {
                    t = t.read(obj, next_version - 1); // Its own write.
                }
            }
        }
        let keyed = match keys {
            Keys::All => true,
            Keys::Some => blind || rng.coin(),
            Keys::None => false,
        };
        if keyed {
            t.order = Some(id);
        }
        let status = match rng.below(20) {
            0 => Status::Aborted,
            1 => Status::Uncertain,
            _ => Status::Committed,
        };
        // An uncertain commit happened or not, at random.
        if status == Status::Committed || (status == Status::Uncertain && rng.coin()) {
            for &(obj, v) in &t.writes {
                state[obj as usize] = v;
            }
        }
        h.add(t, status);
    }
    let final_state = (0..objects).map(|o| (o, state[o as usize])).collect();
    (h, final_state)
}

#[test]
fn large_random_serial_history_passes_fast() {
    let (mut h, final_state) = serial_history(42, 100_000, 5_000, Keys::All);
    let start = Instant::now();
    let s = check(&h, Some(&final_state)).unwrap();
    let took = start.elapsed();
    eprintln!(
        "checked {} txns ({} committed, {} reads, {} writes, {} edges) in {took:?}",
        h.len(),
        s.committed,
        s.reads,
        s.writes,
        s.edges
    );
    assert!(s.committed > 90_000);
    assert_eq!(s.edges_against_order, 0, "the keys are the serial positions");
    let replayed = replay_in_order(&h, &s, |_| Ok::<(), String>(())).unwrap();
    let mut expected = final_state.clone();
    expected.retain(|&(_, v)| v != INITIAL);
    assert_eq!(replayed.to_sorted_vec(), expected);

    // Make one committed read-modify-write read the version before the one it read, whose
    // writer also read-modified-wrote: now both overwrote that older version.
    let (mut txns, statuses): (Vec<Txn>, Vec<Status>) =
        h.iter().map(|(t, s)| (t.clone(), s)).unzip();
    let mut writer: HashMap<(ObjId, Version), usize> = HashMap::new();
    for (i, t) in txns.iter().enumerate() {
        for &w in &t.writes {
            writer.insert(w, i);
        }
    }
    let rmw_read = |t: &Txn, obj: ObjId| {
        let own = |v| t.writes.contains(&(obj, v));
        t.reads.iter().find(|&&(o, v)| o == obj && !own(v)).map(|&(_, v)| v)
    };
    let (victim, read_at, obj, older, w) = (txns.len() / 2..txns.len())
        .filter(|&i| statuses[i] == Status::Committed)
        .find_map(|i| {
            txns[i].writes.iter().find_map(|&(obj, _)| {
                let v = rmw_read(&txns[i], obj)?;
                let w = *writer.get(&(obj, v))?;
                let older = rmw_read(&txns[w], obj)?;
                let at = txns[i].reads.iter().position(|&r| r == (obj, v))?;
                (statuses[w] == Status::Committed).then_some((i, at, obj, older, w))
            })
        })
        .expect("a read-modify-write of a read-modify-write");
    txns[victim].reads[read_at].1 = older;
    h = History::new();
    for (t, s) in txns.iter().zip(&statuses) {
        h.add(t.clone(), *s);
    }
    assert_eq!(
        check(&h, Some(&final_state)),
        Err(Anomaly::LostUpdate { obj, read: older, writers: [txns[w].id, txns[victim].id] })
    );
}

/// Shuffles `h`'s insertion order.
fn shuffled(h: &History, seed: u64) -> History {
    let mut all: Vec<(Txn, Status)> = h.iter().map(|(t, s)| (t.clone(), s)).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..all.len()).rev() {
        all.swap(i, rng.up_to(i));
    }
    let mut out = History::new();
    for (t, s) in all {
        out.add(t, s);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn serial_execution_passes_deterministically(
        seed in any::<u64>(),
        txns in 1u64..300,
        objects in 1u64..25,
        keys in prop_oneof![Just(Keys::All), Just(Keys::Some), Just(Keys::None)],
    ) {
        let (h, final_state) = serial_history(seed, txns, objects, keys);
        let s = check(&h, Some(&final_state));
        prop_assert!(s.is_ok(), "{}", s.unwrap_err());
        let s = s.unwrap();
        prop_assert_eq!(check(&h, Some(&final_state)), Ok(s.clone()));
        prop_assert_eq!(s.edges_against_order, 0);
        let strict = Options { order_must_serialize: true };
        prop_assert!(check_with(&h, Some(&final_state), &strict).is_ok());
        // The serial order found replays the history, to its final state.
        let replayed = replay_in_order(&h, &s, |_| Ok::<(), String>(()));
        prop_assert!(replayed.is_ok());
        let mut expected = final_state.clone();
        expected.retain(|&(_, v)| v != INITIAL);
        prop_assert_eq!(replayed.unwrap().to_sorted_vec(), expected);
        // The order the history was recorded in does not matter to the verdict.
        let s2 = check(&shuffled(&h, seed), Some(&final_state));
        prop_assert!(s2.is_ok(), "{}", s2.unwrap_err());
        prop_assert_eq!(s2.unwrap().committed, s.committed);
    }
}
