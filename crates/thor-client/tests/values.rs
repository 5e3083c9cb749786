//! Strings, booleans, options and sequences, through commit and back from the server in a
//! fresh session (so the values come from the store, not the writer's cache). One behaviour
//! per test, and a model test of sequences against a `Vec`.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use thor_client::{ClientError, Ref, Seq, Session, Str};
use thor_server::Engine;

thor_client::class! {
    /// A person with every kind of richer value.
    pub class Person("test.Person") {
        name: Ref<Str>,
        nickname: Option<Ref<Str>>,
        age: Option<u32>,
        height: Option<f64>,
        retired: bool,
        verified: Option<bool>,
        scores: Ref<Seq<u64>>,
        friends: Ref<Seq<Ref<Person>>>,
    }
}

use common::engine;

fn session(h: &Arc<Engine>) -> Session {
    common::session_with(h, 4 << 20)
}

#[test]
fn every_value_kind_comes_back_from_the_server() {
    let h = engine();
    let s = session(&h);
    s.run(|s| {
        let p = s.create_fixed::<Person>()?;
        p.set_str(Person::name, "Ada Lovelace, née Byron")?;
        p.set(Person::age, Some(36))?;
        p.set(Person::height, Some(1.65))?;
        p.set(Person::retired, true)?;
        p.set(Person::verified, Some(false))?;
        let scores = s.create_seq::<u64>()?;
        s.seq(scores)?.extend_from_slice(&[3, 1, 4, 1, 5, 9, 2, 6])?;
        p.set(Person::scores, scores)?;
        let friends = s.create_seq::<Ref<Person>>()?;
        s.seq(friends)?.push(p.as_ref())?;
        p.set(Person::friends, friends)?;
        s.set_root(0, p.as_ref())
    })
    .unwrap();
    drop(s);

    let s = session(&h);
    s.run(|s| {
        let p = s.get(s.root::<Person>(0)?)?;
        assert_eq!(p.get_str(Person::name)?, "Ada Lovelace, née Byron");
        assert_eq!(p.get(Person::nickname), None);
        assert_eq!(p.get(Person::age), Some(36));
        assert_eq!(p.get(Person::height), Some(1.65));
        assert!(p.get(Person::retired));
        assert_eq!(p.get(Person::verified), Some(false));
        assert_eq!(s.seq(p.get(Person::scores))?.to_vec()?, vec![3, 1, 4, 1, 5, 9, 2, 6]);
        let friends = s.seq(p.get(Person::friends))?;
        assert_eq!(friends.len(), 1);
        assert_eq!(s.canonical(friends.get(0)?)?, s.canonical(p.as_ref())?);
        // Options go back to None; a new object's are None already.
        p.set(Person::age, None)?;
        p.set(Person::nickname, Some(s.create_str("Ada")?))?;
        assert_eq!(p.get(Person::age), None);
        assert_eq!(s.read_str(p.get(Person::nickname).unwrap())?, "Ada");
        let q = s.create_fixed::<Person>()?;
        assert_eq!((q.get(Person::age), q.get(Person::verified)), (None, None));
        assert_eq!(q.get_str(Person::name)?, "", "a null string reads as empty");
        Ok::<_, thor_client::ClientError>(())
    })
    .unwrap();
}

#[test]
fn a_sequence_that_outgrows_its_storage_keeps_its_references() {
    let h = engine();
    let s = session(&h);
    let seq = s
        .run(|s| {
            let seq = s.create_seq::<Ref<Person>>()?;
            s.set_root(0, seq)?;
            Ok::<_, thor_client::ClientError>(seq)
        })
        .unwrap();
    // Grow it past several storage objects, across transactions, each element a new person
    // whose age is its index.
    let max = s.run(|s| Ok::<_, ClientError>(s.seq(seq)?.capacity_max())).unwrap();
    assert_eq!(max, u32::MAX as usize, "the header's length bounds a sequence");
    for chunk in 0..4 {
        s.run(|s| {
            let v = s.seq(seq)?;
            for i in 0..100 {
                let p = s.create_fixed::<Person>()?;
                p.set(Person::age, Some(chunk * 100 + i))?;
                v.push(p.as_ref())?;
            }
            Ok::<_, thor_client::ClientError>(())
        })
        .unwrap();
    }
    drop(s);
    let s = session(&h);
    s.run(|s| {
        // The reference taken from the root before any of that growth still reads it all.
        let v = s.seq(s.root::<Seq<Ref<Person>>>(0)?)?;
        assert_eq!(v.len(), 400);
        for i in 0..400 {
            assert_eq!(s.get(v.get(i)?)?.get(Person::age), Some(i as u32));
        }
        Ok::<_, thor_client::ClientError>(())
    })
    .unwrap();
}

#[test]
fn a_long_string_is_refused_by_length_and_a_sequence_passes_a_page() {
    let h = engine();
    let s = session(&h);
    s.run(|s| {
        let v = s.create_seq::<u64>()?;
        let seq = s.seq(v)?;
        // One object held 8,156 / 8 of them; chunks hold any number.
        let past_a_page = 8156 / 8 + 1;
        seq.extend_from_slice(&vec![7; past_a_page])?;
        seq.push(1)?;
        assert_eq!(seq.len(), past_a_page + 1);
        assert_eq!(seq.get(past_a_page)?, 1);
        let long = "x".repeat(thor_client::max_str_bytes(8192) + 1);
        assert!(matches!(s.create_str(&long), Err(ClientError::TooLong { what: "string", .. })));
        s.create_str(&long[1..])?;
        Ok::<_, ClientError>(())
    })
    .unwrap();
}

#[test]
fn abort_restores_a_sequence_and_drops_its_new_storage() {
    let h = engine();
    let s = session(&h);
    let seq = s
        .run(|s| {
            let v = s.create_seq::<i32>()?;
            s.seq(v)?.extend_from_slice(&[1, 2, 3])?;
            s.set_root(0, v)?;
            Ok::<_, thor_client::ClientError>(v)
        })
        .unwrap();
    let v = s.seq(seq).unwrap();
    v.extend_from_slice(&[4, 5, 6, 7, 8]).unwrap(); // grows
    v.set(0, -1).unwrap();
    assert_eq!(v.pop().unwrap(), Some(8));
    drop(v);
    s.abort();
    assert_eq!(s.run(|s| s.seq(seq)?.to_vec()).unwrap(), vec![1, 2, 3]);
}

#[test]
fn a_sequence_read_as_another_element_type_is_a_bad_value() {
    let h = engine();
    let s = session(&h);
    let seq = s.run(|s| s.create_seq::<u32>()).unwrap();
    let as_floats: Ref<Seq<f64>> = seq.cast();
    let err = s.run(|s| s.seq(as_floats).map(|_| ())).unwrap_err();
    assert!(matches!(err, ClientError::BadValue(_)), "{err}");
}

#[test]
fn malformed_stored_values_are_errors_not_panics() {
    let h = engine();
    let s = session(&h);
    // A string object holding bytes that are not UTF-8, and a sequence header claiming more
    // elements than its storage holds, both written through the ordinary API.
    s.run(|s| {
        let t = s.create::<Str>(3)?;
        t.set_var_bytes(&[0x66, 0xff, 0x6f])?;
        let v = s.create_seq::<u8>()?;
        s.seq(v)?.extend_from_slice(b"abc")?;
        let header = s.get(v.cast::<thor_client::values::SeqHeader>())?;
        header.set(thor_client::values::SeqHeader::len, 1_000)?;
        s.set_root(0, t.as_ref())?;
        s.set_root(1, v)
    })
    .unwrap();
    drop(s);
    let s = session(&h);
    let err = s.run(|s| s.read_str(s.root::<Str>(0)?)).unwrap_err();
    assert!(matches!(err, ClientError::BadValue(_)), "{err}");
    let err = s.run(|s| s.seq(s.root::<Seq<u8>>(1)?)?.get(0)).unwrap_err();
    assert!(matches!(err, ClientError::BadValue(_)), "{err}");
}

#[test]
fn two_sessions_pushing_to_one_sequence_conflict() {
    let h = engine();
    let a = session(&h);
    let b = session(&h);
    let seq = a
        .run(|s| {
            let v = s.create_seq::<u64>()?;
            s.seq(v)?.push(0)?;
            s.set_root(0, v)?;
            Ok::<_, thor_client::ClientError>(v)
        })
        .unwrap();
    let seq_b = b.run(|s| s.root::<Seq<u64>>(0)).unwrap();
    // Both read the sequence; A commits a push first, so B's push, made on the old copy,
    // cannot commit.
    a.seq(seq).unwrap().push(1).unwrap();
    b.seq(seq_b).unwrap().push(2).unwrap();
    a.commit().unwrap();
    let err = b.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    // Run again, B sees A's push and adds its own after it.
    b.run(|s| s.seq(seq_b)?.push(2)).unwrap();
    // A's copy is of the state of its last reply, before B's push: a read-only transaction
    // would commit on it (docs/clocc.md, "Read-only transactions"). `sync` brings B's push.
    a.sync().unwrap();
    assert_eq!(a.run(|s| s.seq(seq)?.to_vec()).unwrap(), vec![0, 1, 2]);
}

/// An operation on a sequence, for the model test.
#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    Pop,
    Set(usize, u32),
    Truncate(usize),
    Extend(Vec<u32>),
    Commit,
    Abort,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u32>().prop_map(Op::Push),
        2 => Just(Op::Pop),
        2 => (0usize..64, any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => (0usize..64).prop_map(Op::Truncate),
        1 => proptest::collection::vec(any::<u32>(), 0..40).prop_map(Op::Extend),
        2 => Just(Op::Commit),
        1 => Just(Op::Abort),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A sequence behaves as a `Vec` across commits and aborts, and a fresh session reads the
    /// committed one.
    #[test]
    fn a_sequence_behaves_as_a_vec(ops in proptest::collection::vec(op(), 1..60)) {
        let h = engine();
        let s = session(&h);
        let seq = s.run(|s| { let v = s.create_seq::<u32>()?; s.set_root(0, v)?; Ok::<_, thor_client::ClientError>(v) }).unwrap();
        let (mut committed, mut open): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
        for op in ops {
            let v = s.seq(seq).unwrap();
            match op {
                Op::Push(x) => { v.push(x).unwrap(); open.push(x); }
                Op::Pop => prop_assert_eq!(v.pop().unwrap(), open.pop()),
                Op::Set(i, x) => {
                    let r = v.set(i, x);
                    if i < open.len() { r.unwrap(); open[i] = x; } else { prop_assert!(r.is_err()); }
                }
                Op::Truncate(n) => { v.truncate(n).unwrap(); open.truncate(n); }
                Op::Extend(xs) => { v.extend_from_slice(&xs).unwrap(); open.extend(xs); }
                Op::Commit => { drop(v); s.commit().unwrap(); committed = open.clone(); }
                Op::Abort => { drop(v); s.abort(); open = committed.clone(); }
            }
            let v = s.seq(seq).unwrap();
            prop_assert_eq!(v.to_vec().unwrap(), open.clone());
            s.check_cache().unwrap();
        }
        s.commit().unwrap();
        let fresh = session(&h);
        let stored = fresh.run(|s| s.seq(s.root::<Seq<u32>>(0)?)?.to_vec()).unwrap();
        prop_assert_eq!(stored, open);
    }
}
