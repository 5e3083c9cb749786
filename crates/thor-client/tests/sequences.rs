//! Sequences of any length (`thor_client::values`): trees of chunks under directories, read
//! back from the server in fresh sessions, through crashes of the store, and from the legacy
//! one-object layout. One behaviour per test, and a model test against a `Vec`.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use thor_client::values::SeqHeader;
use thor_client::{Any, ClientError, Ref, Refs, Seq, Session};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

thor_client::class! {
    /// An element a sequence of references points at.
    pub class Item("test.Item") {
        id: u32,
    }
}

fn opts(page_size: usize) -> EngineOptions {
    EngineOptions { page_size, background_flusher: false, ..EngineOptions::default() }
}

fn engine_on(disk: &MemDisk, page_size: usize) -> Arc<Engine> {
    Arc::new(Engine::create(Arc::new(disk.clone()), opts(page_size)).unwrap())
}

fn session(h: &Arc<Engine>) -> Session {
    common::session_with(h, 16 << 20)
}

/// A sequence with more than 100,000 elements, three levels deep in 1 KiB pages (chunks of
/// 128 `u32`s, directories of 247), built over several transactions, reads back in order in a
/// fresh session by `iter`, `get` and `to_vec`, and shrinks and grows again across levels.
#[test]
fn a_sequence_of_more_than_100_000_elements_reads_back_in_order() {
    const N: u32 = 120_000;
    let h = engine_on(&MemDisk::new(), 1024);
    let s = session(&h);
    let seq = s
        .run(|s| {
            let v = s.create_seq::<u32>()?;
            s.set_root(0, v)?;
            Ok::<_, ClientError>(v)
        })
        .unwrap();
    for batch in 0..N / 10_000 {
        s.run(|s| {
            let v = s.seq(seq)?;
            (batch * 10_000..(batch + 1) * 10_000).try_for_each(|i| v.push(i * 3))
        })
        .unwrap();
    }
    drop(s);
    let s = session(&h);
    s.run(|s| {
        let v = s.seq(s.root::<Seq<u32>>(0)?)?;
        assert_eq!(v.len(), N as usize);
        let mut expect = 0;
        for x in v.iter() {
            assert_eq!(x?, expect * 3);
            expect += 1;
        }
        assert_eq!(expect, N);
        for i in [0, 127, 128, 31_615, 31_616, 31_617, 99_999, N as usize - 1] {
            assert_eq!(v.get(i)?, i as u32 * 3, "element {i}");
        }
        assert!(matches!(v.get(N as usize), Err(ClientError::Usage(_))));
        // Down to two levels, then one, then back up past the old length.
        v.truncate(20_000)?;
        assert_eq!(v.get(19_999)?, 59_997);
        v.truncate(100)?;
        assert_eq!(v.to_vec()?, (0..100).map(|i| i * 3).collect::<Vec<u32>>());
        v.extend_from_slice(&(100..40_000).map(|i| i * 3).collect::<Vec<u32>>())?;
        assert_eq!(v.to_vec()?, (0..40_000).map(|i| i * 3).collect::<Vec<u32>>());
        Ok::<_, ClientError>(())
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    let back = s.run(|s| s.seq(s.root::<Seq<u32>>(0)?)?.to_vec()).unwrap();
    assert_eq!(back, (0..40_000).map(|i| i * 3).collect::<Vec<u32>>());
}

/// A sequence of references past the one-object limit of 2,039 (8 KiB pages) keeps each
/// reference, through `remove` and `swap_remove` too.
#[test]
fn a_sequence_of_references_passes_a_page_and_removes_elements() {
    let h = engine_on(&MemDisk::new(), 8192);
    let s = session(&h);
    let seq = s
        .run(|s| {
            let v = s.create_seq::<Ref<Item>>()?;
            let view = s.seq(v)?;
            for i in 0..5_000 {
                let item = s.create_fixed::<Item>()?;
                item.set(Item::id, i)?;
                view.push(item.as_ref())?;
            }
            s.set_root(0, v)?;
            Ok::<_, ClientError>(v)
        })
        .unwrap();
    // Through the root: a fresh session reads it too (a `Ref` belongs to its session).
    let ids = |s: &Session| -> Result<Vec<u32>, ClientError> {
        let v = s.seq(s.root::<Seq<Ref<Item>>>(0)?)?;
        v.iter().map(|r| Ok(s.get(r?)?.get(Item::id))).collect()
    };
    let mut model: Vec<u32> = (0..5_000).collect();
    assert_eq!(s.run(ids).unwrap(), model);
    s.run(|s| {
        let v = s.seq(seq)?;
        // From the first chunk, from the middle of a later one, and the last.
        for i in [0, 2_600, 4_997] {
            let r = v.remove(i)?;
            assert_eq!(s.get(r)?.get(Item::id), model.remove(i));
        }
        let r = v.swap_remove(10)?;
        assert_eq!(s.get(r)?.get(Item::id), model.swap_remove(10));
        Ok::<_, ClientError>(())
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    assert_eq!(s.run(ids).unwrap(), model);
}

/// One append to a long sequence logs about a chunk, not the whole storage: measured through
/// the engine's log counter around a commit that pushes one `u64` onto 5,000. (Before chunks,
/// the sequence's one storage object, 8 KiB at that length, went to the log at every push.)
#[test]
fn appending_to_a_long_sequence_logs_a_small_record() {
    let h = engine_on(&MemDisk::new(), 8192);
    let s = session(&h);
    let seq = s
        .run(|s| {
            let v = s.create_seq::<u64>()?;
            s.seq(v)?.extend_from_slice(&(0..5_000).collect::<Vec<u64>>())?;
            Ok::<_, ClientError>(v)
        })
        .unwrap();
    let mut logged = Vec::new();
    for i in 0..20 {
        let before = h.stats().log_bytes;
        s.run(|s| s.seq(seq)?.push(5_000 + i)).unwrap();
        logged.push(h.stats().log_bytes - before);
    }
    // The same measure for a write to a sequence in the layout before chunks (one storage
    // object of 1,019 u64s, which is what every push to such a sequence rewrote).
    let flat = s
        .run(|s| {
            let storage = s.create::<thor_client::Bytes>(1_019 * 8)?;
            let header = s.create_fixed::<SeqHeader>()?;
            header.set(SeqHeader::len, 1_019)?;
            header.set(SeqHeader::elem, <u64 as thor_client::Elem>::CODE)?;
            header.set(SeqHeader::storage, storage.as_ref().cast())?;
            Ok::<_, ClientError>(header.as_ref().cast::<Seq<u64>>())
        })
        .unwrap();
    let before = h.stats().log_bytes;
    s.run(|s| s.seq(flat)?.set(1_018, 7)).unwrap();
    let flat_logged = h.stats().log_bytes - before;
    let max = *logged.iter().max().unwrap();
    eprintln!(
        "log bytes per append onto 5,000 u64s: {logged:?}; one write to a one-object \
         sequence of 1,019: {flat_logged}"
    );
    assert!(flat_logged > 8_000, "the old layout logs its whole storage: {flat_logged}");
    // A chunk is 1 KiB; the header, the record's framing and a directory now and then come
    // on top. The old layout logged over 8,000 bytes here.
    assert!(max < 2 * 1024, "an append logged {max} bytes: {logged:?}");
    assert_eq!(s.run(|s| Ok::<_, ClientError>(s.seq(seq)?.len())).unwrap(), 5_020);
}

/// A sequence written in the legacy layout (a header whose element word is the bare element
/// code, and one storage object) reads as it is, and converts on the first write that
/// changes its length: in place when it fits a chunk, into chunks when it does not.
#[test]
fn a_legacy_one_object_sequence_reads_and_converts_on_write() {
    let h = engine_on(&MemDisk::new(), 8192);
    let s = session(&h);
    // Built as the code before chunks built it: header fields and a thor.Refs storage.
    let legacy =
        |s: &Session, n: usize, capacity: usize| -> Result<Ref<Seq<Ref<Item>>>, ClientError> {
            let storage = s.create::<Refs<Any>>(capacity)?;
            for i in 0..n {
                let item = s.create_fixed::<Item>()?;
                item.set(Item::id, i as u32)?;
                storage.set_var_ref(i, item.as_ref().cast())?;
            }
            let header = s.create_fixed::<SeqHeader>()?;
            header.set(SeqHeader::len, n as u32)?;
            header.set(SeqHeader::elem, <Ref<Item> as thor_client::Elem>::CODE)?;
            header.set(SeqHeader::storage, storage.as_ref().cast())?;
            Ok(header.as_ref().cast())
        };
    s.run(|s| {
        s.set_root(0, legacy(s, 3, 4)?)?;
        s.set_root(1, legacy(s, 2_000, 2_039)?)
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    // Root slot 0 holds the small one, 1 the large one (a `Ref` belongs to its session).
    let ids = |s: &Session, slot: usize| -> Result<Vec<u32>, ClientError> {
        let r = s.root::<Seq<Ref<Item>>>(slot)?;
        s.seq(r)?.iter().map(|x| Ok(s.get(x?)?.get(Item::id))).collect()
    };
    assert_eq!(s.run(|s| ids(s, 0)).unwrap(), vec![0, 1, 2]);
    assert_eq!(s.run(|s| ids(s, 1)).unwrap(), (0..2_000).collect::<Vec<u32>>());
    let elem_word = |s: &Session, slot: usize| -> Result<u32, ClientError> {
        Ok(s.get(s.root::<SeqHeader>(slot)?)?.get(SeqHeader::elem))
    };
    assert_eq!(s.run(|s| elem_word(s, 0)).unwrap(), 9, "reading converts nothing");
    s.run(|s| {
        let item = s.create_fixed::<Item>()?;
        item.set(Item::id, 3)?;
        s.seq(s.root::<Seq<Ref<Item>>>(0)?)?.push(item.as_ref())?;
        s.seq(s.root::<Seq<Ref<Item>>>(1)?)?.pop()?;
        Ok::<_, ClientError>(())
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    assert_eq!(s.run(|s| ids(s, 0)).unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(s.run(|s| ids(s, 1)).unwrap(), (0..1_999).collect::<Vec<u32>>());
    for slot in [0, 1] {
        let word = s.run(|s| elem_word(s, slot)).unwrap();
        assert_eq!((word & 0xff, (word >> 8) & 0xff), (9, 1), "converted to a tree: {word:#x}");
    }
}

/// An operation on a sequence, for the model test.
#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    Pop,
    Set(usize, u32),
    Truncate(usize),
    Extend(u32, usize),
    Remove(usize),
    SwapRemove(usize),
    Clear,
    Commit,
    Abort,
    /// The store's machine loses power: the engine goes, the disk crashes, the database is
    /// opened again (and the open transaction is lost).
    Crash(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u32>().prop_map(Op::Push),
        2 => Just(Op::Pop),
        2 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => any::<usize>().prop_map(Op::Truncate),
        // Long enough to cross chunks (128 u32s in 1 KiB pages) and directories (247 chunks).
        3 => (any::<u32>(), 0usize..3_000).prop_map(|(x, n)| Op::Extend(x, n)),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => any::<usize>().prop_map(Op::SwapRemove),
        1 => Just(Op::Clear),
        3 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => any::<u64>().prop_map(Op::Crash),
    ]
}

/// Applies `op` to the sequence and to the model.
fn apply(
    v: &thor_client::SeqView<'_, u32>,
    open: &mut Vec<u32>,
    op: &Op,
) -> Result<(), TestCaseError> {
    let at = |i: usize| if open.is_empty() { i } else { i % (open.len() + 1) };
    match *op {
        Op::Push(x) => {
            v.push(x).unwrap();
            open.push(x);
        }
        Op::Pop => prop_assert_eq!(v.pop().unwrap(), open.pop()),
        Op::Set(i, x) => {
            let i = at(i);
            let r = v.set(i, x);
            if i < open.len() {
                r.unwrap();
                open[i] = x;
            } else {
                prop_assert!(r.is_err());
            }
        }
        Op::Truncate(n) => {
            let n = at(n);
            v.truncate(n).unwrap();
            open.truncate(n);
        }
        Op::Extend(x, n) => {
            let xs: Vec<u32> = (0..n as u32).map(|k| x.wrapping_add(k)).collect();
            v.extend_from_slice(&xs).unwrap();
            open.extend(xs);
        }
        Op::Remove(i) | Op::SwapRemove(i) => {
            let i = at(i);
            let got = match op {
                Op::Remove(_) => v.remove(i),
                _ => v.swap_remove(i),
            };
            if i < open.len() {
                let want = match op {
                    Op::Remove(_) => open.remove(i),
                    _ => open.swap_remove(i),
                };
                prop_assert_eq!(got.unwrap(), want);
            } else {
                prop_assert!(got.is_err());
            }
        }
        Op::Clear => {
            v.clear().unwrap();
            open.clear();
        }
        Op::Commit | Op::Abort | Op::Crash(_) => unreachable!("handled by the caller"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A long sequence behaves as a `Vec` across commits, aborts and crashes of the store (in
    /// 1 KiB pages, so that a few thousand elements make a tree of two levels), and a fresh
    /// session reads the committed one.
    #[test]
    fn a_long_sequence_behaves_as_a_vec_across_crashes(ops in proptest::collection::vec(op(), 1..40)) {
        let disk = MemDisk::new();
        let mut h = engine_on(&disk, 1024);
        let mut s = session(&h);
        s.run(|s| {
            let v = s.create_seq::<u32>()?;
            s.set_root(0, v)
        })
        .unwrap();
        let (mut committed, mut open): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
        for op in &ops {
            match op {
                Op::Commit => {
                    s.commit().unwrap();
                    committed = open.clone();
                }
                Op::Abort => {
                    s.abort();
                    open = committed.clone();
                }
                Op::Crash(seed) => {
                    drop(s);
                    drop(h);
                    disk.crash(*seed);
                    h = Arc::new(Engine::open(Arc::new(disk.clone()), opts(1024)).unwrap());
                    s = session(&h);
                    open = committed.clone();
                }
                op => apply(&s.seq(s.root::<Seq<u32>>(0).unwrap()).unwrap(), &mut open, op)?,
            }
            let got = s.seq(s.root::<Seq<u32>>(0).unwrap()).unwrap().to_vec().unwrap();
            prop_assert_eq!(got, open.clone(), "after {:?}", op);
        }
        s.commit().unwrap();
        let fresh = session(&h);
        let stored = fresh.run(|s| s.seq(s.root::<Seq<u32>>(0)?)?.to_vec()).unwrap();
        prop_assert_eq!(stored, open);
    }
}
