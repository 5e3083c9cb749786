//! `thor::check`: the offline checker through the facade, one behaviour per test.

use thor::{CheckError, Refs};

thor::class! {
    /// A note: a number.
    pub class Note("test.Note") { number: u64 }
}

/// A closed database holding a list of `n` notes in root slot 0.
fn database(n: usize) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let s = thor::open(tmp.path()).unwrap();
    s.run(|s| {
        let list = s.create::<Refs<Note>>(n)?;
        for i in 0..n {
            let note = s.create_fixed::<Note>()?;
            note.set(Note::number, i as u64)?;
            list.set_var_ref(i, note.as_ref())?;
        }
        s.set_root(0, list.as_ref())
    })
    .unwrap();
    s.close().unwrap();
    tmp
}

#[test]
fn check_finds_a_closed_database_healthy() {
    let db = database(100);
    let report = thor::check(db.path()).unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems());
    assert_eq!(report.problems_total(), 0);
    assert!(report.counts().objects >= 101, "{:?}", report.counts());
    assert!(report.counts().references >= 100, "{:?}", report.counts());
}

#[test]
fn check_names_the_page_a_damaged_byte_is_in() {
    let db = database(2000);
    // One more commit, of the root (page 1) only: the double-write buffer's last round, whose
    // intact copies would stand in for a torn in-place page, then holds no copy of page 2.
    let s = thor::open(db.path()).unwrap();
    s.run(|s| {
        let list = s.root::<Refs<Note>>(0)?;
        s.set_root(1, list)
    })
    .unwrap();
    s.close().unwrap();
    let facts = thor::check(db.path()).unwrap().facts().clone();
    assert!(facts.alloc_page >= 3, "{facts:?}");
    // A byte in the middle of page 2, which holds notes: its checksum no longer matches.
    let pages = db.path().join("pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    let page = 2;
    bytes[page * facts.page_size + facts.page_size / 2] ^= 0xff;
    std::fs::write(&pages, &bytes).unwrap();
    let report = thor::check(db.path()).unwrap();
    assert!(!report.is_healthy());
    let first = report.problems()[0].to_string();
    assert!(first.starts_with(&format!("page {page}")), "{first}");
}

#[test]
fn check_refuses_what_is_not_a_database() {
    let tmp = tempfile::tempdir().unwrap();
    let err = thor::check(tmp.path()).unwrap_err();
    assert!(matches!(err, CheckError::NotADatabase(_)), "{err}");
    let err = thor::check(tmp.path().join("missing")).unwrap_err();
    assert!(matches!(err, CheckError::NotADatabase(_)), "{err}");
}

#[test]
fn check_refuses_a_database_in_use() {
    let db = database(1);
    let open = thor::Database::open(db.path()).unwrap();
    let err = thor::check(db.path()).unwrap_err();
    assert!(matches!(err, CheckError::InUse { .. }), "{err}");
    drop(open);
    assert!(thor::check(db.path()).unwrap().is_healthy());
}
