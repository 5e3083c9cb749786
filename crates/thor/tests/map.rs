//! A persistent map (`thor::Map`) seen by the offline checker: its nodes are ordinary
//! objects and its references (children, the leaf chain, values of type `Ref<T>`) ordinary
//! reference slots, which `thor::check` follows.

use thor::{Map, Ref};

thor::class! {
    /// A note: a number.
    pub class Note("test.Note") { number: u64 }
}

#[test]
fn check_follows_the_references_of_a_map() {
    const N: u64 = 3_000;
    let tmp = tempfile::tempdir().unwrap();
    let s = thor::open(tmp.path()).unwrap();
    s.run(|s| {
        let notes = s.create_map::<u64, Ref<Note>>()?;
        let m = s.map(notes)?;
        for i in 0..N {
            let note = s.create_fixed::<Note>()?;
            note.set(Note::number, i)?;
            m.insert(i, note.as_ref())?;
        }
        s.set_root(0, notes)
    })
    .unwrap();
    s.close().unwrap();
    let report = thor::check(tmp.path()).unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems());
    // The values alone are N references; the nodes add their children and the leaf chain.
    assert!(report.counts().references > N, "{:?}", report.counts());
    let s = thor::open(tmp.path()).unwrap();
    s.run(|s| {
        let m = s.map(s.root::<Map<u64, Ref<Note>>>(0)?)?;
        let (k, note) = m.last()?.expect("not empty");
        assert_eq!((k, s.get(note)?.get(Note::number)), (N - 1, N - 1));
        Ok::<_, thor::ClientError>(())
    })
    .unwrap();
}
