//! Changing a class through the facade: `thor::Upgrade` rewrites a closed database into a new
//! directory, one behaviour per test. The class `test.Person` is declared twice, as `v1` (the
//! stored layout) and `v2` (two fields appended); variants with incompatible changes live in
//! their own modules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thor::{
    Any, ClientError, Error, Incompatibility, Ref, Refs, Session, Upgrade, UpgradeError,
    UpgradeReport,
};

mod v1 {
    thor::class! {
        /// A person: an id, an age, a best friend, a document (a large object), and friends.
        pub class Person("test.Person") {
            id: u64,
            age: u32,
            best: thor::Ref<Person>,
            doc: thor::Ref<thor::Any>,
        }
        var refs<Person>;
    }
}

mod v2 {
    thor::class! {
        /// `v1::Person` with `height` and `partner` appended.
        pub class Person("test.Person") {
            id: u64,
            age: u32,
            best: thor::Ref<Person>,
            doc: thor::Ref<thor::Any>,
            height: u32,
            partner: thor::Ref<Person>,
        }
        var refs<Person>;
    }
}

/// `age` removed.
mod removed {
    thor::class! {
        pub class Person("test.Person") {
            id: u64,
            best: thor::Ref<Person>,
            doc: thor::Ref<thor::Any>,
        }
        var refs<Person>;
    }
}

/// `age` (a `u32`) turned into a reference.
mod retyped {
    thor::class! {
        pub class Person("test.Person") {
            id: u64,
            age: thor::Ref<Person>,
            best: thor::Ref<Person>,
            doc: thor::Ref<thor::Any>,
        }
        var refs<Person>;
    }
}

/// `best` and `age` swapped.
mod reordered {
    thor::class! {
        pub class Person("test.Person") {
            id: u64,
            best: thor::Ref<Person>,
            age: u32,
            doc: thor::Ref<thor::Any>,
        }
        var refs<Person>;
    }
}

/// The variable part turned into bytes.
mod var_changed {
    thor::class! {
        pub class Person("test.Person") {
            id: u64,
            age: u32,
            best: thor::Ref<Person>,
            doc: thor::Ref<thor::Any>,
        }
        var bytes;
    }
}

thor::class! {
    /// A note: a number and some text. Never upgraded.
    pub class Note("test.Note") { number: u64 }
    var bytes;
}

/// `Note` with 400 bytes appended: a note whose text nearly fills a page no longer fits.
mod big_note {
    thor::class! {
        pub class Note("test.Note") { number: u64, extra: [u8; 400] }
        var bytes;
    }
}

/// Persons written (several 8 KiB pages of them).
const PERSONS: usize = 2000;
/// Notes written.
const NOTES: usize = 300;
/// Notes made garbage (plus the collection that held them).
const GARBAGE_NOTES: usize = 150;
/// The large object's bytes.
const DOC_BYTES: usize = 40_000;

fn doc_bytes() -> Vec<u8> {
    (0..DOC_BYTES).map(|i| (i * 7 % 251) as u8).collect()
}

/// What each person holds, from its index: `(id, age, best, friends, has_doc)`.
fn person(i: usize) -> (u64, u32, usize, Vec<usize>, bool) {
    let friends = (0..i % 4).map(|k| (i * 31 + k * 17 + 1) % PERSONS).collect();
    (1_000_000 + i as u64, (i % 97) as u32, (i * 7 + 3) % PERSONS, friends, i.is_multiple_of(250))
}

fn note_text(i: usize) -> Vec<u8> {
    vec![(i % 256) as u8; i % 40]
}

/// Writes the v1 database into `dir`: persons in a `thor.Refs` in root slot 0 (written in
/// several transactions), the large object in slot 1, notes in slot 2, then garbage (notes
/// reached from slot 3, then unlinked). Closes it.
fn write_v1(dir: &Path) {
    let s = thor::open(dir).unwrap();
    s.run(|s| {
        let all = s.create::<Refs<v1::Person>>(PERSONS)?;
        let doc = s.create_large(&doc_bytes())?;
        s.set_root(0, all.as_ref())?;
        s.set_root(1, doc)
    })
    .unwrap();
    // Create the persons in batches, then link them.
    for chunk in (0..PERSONS).collect::<Vec<_>>().chunks(500) {
        s.run::<_, thor::ClientError>(|s| {
            let all = s.get(s.root::<Refs<v1::Person>>(0)?)?;
            let doc = s.root::<Any>(1)?;
            for &i in chunk {
                let (id, age, _, friends, has_doc) = person(i);
                let p = s.create::<v1::Person>(friends.len())?;
                p.set(v1::Person::id, id)?;
                p.set(v1::Person::age, age)?;
                if has_doc {
                    p.set(v1::Person::doc, doc)?;
                }
                all.set_var_ref(i, p.as_ref())?;
            }
            Ok(())
        })
        .unwrap();
    }
    s.run::<_, thor::ClientError>(|s| {
        let all = s.get(s.root::<Refs<v1::Person>>(0)?)?;
        for i in 0..PERSONS {
            let (_, _, best, friends, _) = person(i);
            let p = s.get(all.var_ref(i))?;
            p.set(v1::Person::best, all.var_ref(best))?;
            for (k, f) in friends.iter().enumerate() {
                p.set_var_ref(k, all.var_ref(*f))?;
            }
        }
        Ok(())
    })
    .unwrap();
    write_notes(&s, 2, NOTES);
    write_notes(&s, 3, GARBAGE_NOTES);
    s.run(|s| s.set_root(3, Ref::<Refs<Note>>::NULL)).unwrap();
    s.close().unwrap();
}

fn write_notes(s: &Session, slot: usize, n: usize) {
    s.run(|s| {
        let list = s.create::<Refs<Note>>(n)?;
        for i in 0..n {
            let note = s.create::<Note>(note_text(i).len())?;
            note.set(Note::number, i as u64)?;
            note.set_var_bytes(&note_text(i))?;
            list.set_var_ref(i, note.as_ref())?;
        }
        s.set_root(slot, list.as_ref())
    })
    .unwrap();
}

/// Reads the whole graph with v1 and checks it against what `write_v1` wrote.
fn check_v1(s: &Session) {
    s.run::<_, thor::ClientError>(|s| {
        let all = s.get(s.root::<Refs<v1::Person>>(0)?)?;
        assert_eq!(all.var_len(), PERSONS);
        let keys: Vec<u32> = (0..PERSONS).map(|i| all.var_ref(i).key()).collect();
        for i in 0..PERSONS {
            let (id, age, best, friends, has_doc) = person(i);
            let p = s.get(all.var_ref(i))?;
            assert_eq!(p.get(v1::Person::id), id);
            assert_eq!(p.get(v1::Person::age), age);
            assert_eq!(p.get(v1::Person::best).key(), keys[best], "person {i}'s best friend");
            assert_eq!(p.var_len(), friends.len());
            for (k, f) in friends.iter().enumerate() {
                assert_eq!(p.var_ref(k).key(), keys[*f], "person {i}'s friend {k}");
            }
            assert_eq!(!p.get(v1::Person::doc).is_null(), has_doc);
        }
        Ok(())
    })
    .unwrap();
    check_notes_and_doc(s);
}

/// Reads the whole graph with v2: every old field and reference as written, the appended
/// fields zero.
fn check_v2(s: &Session) {
    s.run::<_, thor::ClientError>(|s| {
        let all = s.get(s.root::<Refs<v2::Person>>(0)?)?;
        assert_eq!(all.var_len(), PERSONS);
        let keys: Vec<u32> = (0..PERSONS).map(|i| all.var_ref(i).key()).collect();
        let doc = s.root::<Any>(1)?;
        for i in 0..PERSONS {
            let (id, age, best, friends, has_doc) = person(i);
            let p = s.get(all.var_ref(i))?;
            assert_eq!(p.get(v2::Person::id), id);
            assert_eq!(p.get(v2::Person::age), age);
            assert_eq!(p.get(v2::Person::best).key(), keys[best], "person {i}'s best friend");
            assert_eq!(p.var_len(), friends.len());
            for (k, f) in friends.iter().enumerate() {
                assert_eq!(p.var_ref(k).key(), keys[*f], "person {i}'s friend {k}");
            }
            let d = p.get(v2::Person::doc);
            assert_eq!(!d.is_null(), has_doc);
            if has_doc {
                assert_eq!(d.key(), doc.key(), "person {i}'s document is the large object");
            }
            assert_eq!(p.get(v2::Person::height), 0, "appended fields read zero");
            assert!(p.get(v2::Person::partner).is_null(), "appended references read null");
        }
        Ok(())
    })
    .unwrap();
    check_notes_and_doc(s);
}

fn check_notes_and_doc(s: &Session) {
    s.run::<_, thor::ClientError>(|s| {
        let notes = s.get(s.root::<Refs<Note>>(2)?)?;
        assert_eq!(notes.var_len(), NOTES);
        for i in 0..NOTES {
            let n = s.get(notes.var_ref(i))?;
            assert_eq!(n.get(Note::number), i as u64);
            assert_eq!(n.var_bytes(), note_text(i));
        }
        assert_eq!(s.read_large(s.root::<Any>(1)?)?, doc_bytes());
        assert!(s.root::<Refs<Note>>(3)?.is_null());
        Ok(())
    })
    .unwrap();
}

/// Every file of a directory but the lock (whose holder line every opener rewrites), by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

/// Everything in a directory's parent: the upgrade leaves no temporary directory behind.
fn siblings(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A v1 database in a new temporary directory: `(tempdir, src, dst)`.
fn v1_database() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("v1");
    write_v1(&src);
    let dst = tmp.path().join("v2");
    (tmp, src, dst)
}

fn upgrade_v2(src: &Path, dst: &Path) -> UpgradeReport {
    Upgrade::new(src, dst).class::<v2::Person>().run().unwrap()
}

#[test]
fn upgraded_database_reads_old_fields_and_zero_new_ones() {
    let (_tmp, src, dst) = v1_database();
    let before = files(&src);
    let report = upgrade_v2(&src, &dst);

    let class = &report.classes[0];
    assert_eq!(class.name, "test.Person");
    assert_eq!((class.old_fixed_bytes, class.new_fixed_bytes), (20, 28));
    assert_eq!(class.instances, PERSONS as u64);
    assert_eq!(class.class_objects, 1);
    assert!(report.pages > 3, "{report:?}");

    check_v2(&thor::open(&dst).unwrap());

    // The source is unchanged, and still opens with v1.
    assert_eq!(files(&src), before);
    check_v1(&thor::open(&src).unwrap());
}

#[test]
fn appended_fields_can_be_written_and_committed() {
    let (_tmp, src, dst) = v1_database();
    upgrade_v2(&src, &dst);
    let s = thor::open(&dst).unwrap();
    s.run::<_, thor::ClientError>(|s| {
        let all = s.get(s.root::<Refs<v2::Person>>(0)?)?;
        for i in 0..PERSONS {
            let p = s.get(all.var_ref(i))?;
            p.set(v2::Person::height, 150 + i as u32 % 50)?;
            p.set(v2::Person::partner, all.var_ref((i + 1) % PERSONS))?;
        }
        Ok(())
    })
    .unwrap();
    // New objects of the new layout too.
    s.run(|s| {
        let p = s.create::<v2::Person>(0)?;
        p.set(v2::Person::height, 7)?;
        s.set_root(4, p.as_ref())
    })
    .unwrap();
    s.close().unwrap();

    let s = thor::open(&dst).unwrap();
    s.run::<_, thor::ClientError>(|s| {
        let all = s.get(s.root::<Refs<v2::Person>>(0)?)?;
        for i in 0..PERSONS {
            let p = s.get(all.var_ref(i))?;
            assert_eq!(p.get(v2::Person::height), 150 + i as u32 % 50);
            assert_eq!(p.get(v2::Person::partner).key(), all.var_ref((i + 1) % PERSONS).key());
        }
        assert_eq!(s.get(s.root::<v2::Person>(4)?)?.get(v2::Person::height), 7);
        Ok(())
    })
    .unwrap();
    check_notes_and_doc(&s);
}

#[test]
fn old_database_opened_with_new_declaration_points_at_the_upgrade() {
    let (_tmp, src, _dst) = v1_database();
    let s = thor::open(&src).unwrap();
    let reading = s
        .run(|s| {
            let all = s.get(s.root::<Refs<v2::Person>>(0)?)?;
            s.get(all.var_ref(0)).map(drop)
        })
        .unwrap_err();
    let creating = s.run(|s| s.create::<v2::Person>(0).map(drop)).unwrap_err();
    for err in [reading, creating] {
        assert!(matches!(err, ClientError::SchemaMismatch { class: "test.Person", .. }), "{err:?}");
        assert!(err.to_string().contains("thor::Upgrade"), "{err}");
    }
}

#[test]
fn unreachable_objects_are_dropped_and_counted() {
    let (_tmp, src, dst) = v1_database();
    let report = upgrade_v2(&src, &dst);
    // The garbage notes and their collection, and the schema directory that registering
    // `test.Note` replaced (a directory grows by copying).
    assert_eq!(report.dropped, GARBAGE_NOTES as u64 + 1 + 1, "{report:?}");
    assert_eq!(report.objects, report.source_objects - report.dropped, "{report:?}");
    assert_eq!(report.replaced_classes, 1);

    // Compacting the result again finds nothing more to drop, and changes no layout.
    let again = dst.with_file_name("again");
    let report2 = Upgrade::new(&dst, &again).run().unwrap();
    assert_eq!(report2.dropped, 0, "{report2:?}");
    assert_eq!(report2.objects, report.objects);
    assert_eq!(report2.pages, report.pages);
    assert!(report2.classes.is_empty());
    check_v2(&thor::open(&again).unwrap());
}

#[test]
fn compaction_without_classes_keeps_every_reachable_object() {
    let (_tmp, src, dst) = v1_database();
    let report = Upgrade::new(&src, &dst).run().unwrap();
    assert_eq!(report.dropped, GARBAGE_NOTES as u64 + 2);
    assert_eq!(report.replaced_classes, 0);
    check_v1(&thor::open(&dst).unwrap());
}

/// Runs an upgrade that must fail, and checks that it changed nothing: the source's files,
/// the names beside it (no destination, no temporary directory), what the destination holds.
fn refused(src: &Path, dst: &Path, upgrade: Upgrade) -> UpgradeError {
    let dst_files = |dst: &Path| dst.is_dir().then(|| files(dst));
    let (before, around, at_dst) = (files(src), siblings(src), dst_files(dst));
    let err = match upgrade.run() {
        Err(Error::Upgrade(e)) => e,
        other => panic!("expected an upgrade error, got {other:?}"),
    };
    assert_eq!(files(src), before, "the source is unchanged");
    assert_eq!(siblings(src), around, "nothing was created or removed beside it");
    assert_eq!(dst_files(dst), at_dst, "the destination is as it was");
    err
}

#[test]
fn incompatible_changes_are_refused_naming_the_class() {
    let (_tmp, src, dst) = v1_database();
    let cases: Vec<(Upgrade, &str)> = vec![
        (Upgrade::new(&src, &dst).class::<removed::Person>(), "removed"),
        (Upgrade::new(&src, &dst).class::<retyped::Person>(), "retyped"),
        (Upgrade::new(&src, &dst).class::<reordered::Person>(), "reordered"),
        (Upgrade::new(&src, &dst).class::<var_changed::Person>(), "var"),
    ];
    for (upgrade, what) in cases {
        let err = refused(&src, &dst, upgrade);
        let UpgradeError::Incompatible { class, why } = &err else {
            panic!("{what}: {err:?}");
        };
        assert_eq!(class, "test.Person");
        match what {
            "removed" => {
                assert_eq!(*why, Incompatibility::FixedPartShrinks { old_bytes: 20, new_bytes: 16 })
            }
            "retyped" => assert!(
                matches!(why, Incompatibility::ReferenceSlotChanges { slot: 2, byte: 12, .. }),
                "{why:?}"
            ),
            "reordered" => assert!(
                matches!(why, Incompatibility::ReferenceSlotChanges { slot: 2, .. }),
                "{why:?}"
            ),
            _ => assert!(matches!(why, Incompatibility::VarKindChanges { .. }), "{why:?}"),
        }
        assert!(err.to_string().contains("test.Person"), "{err}");
    }
    check_v1(&thor::open(&src).unwrap());
}

#[test]
fn classes_that_cannot_be_upgraded_are_refused() {
    let (_tmp, src, dst) = v1_database();
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<Refs<Note>>());
    assert!(matches!(&err, UpgradeError::BuiltinClass { class } if class == "thor.Refs"));
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<Any>());
    assert!(matches!(err, UpgradeError::BuiltinClass { .. }));
    let err =
        refused(&src, &dst, Upgrade::new(&src, &dst).class::<v2::Person>().class::<v2::Person>());
    assert!(matches!(&err, UpgradeError::DuplicateClass { class } if class == "test.Person"));

    thor::class! {
        pub class Stranger("test.Stranger") { x: u32 }
    }
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<Stranger>());
    assert!(matches!(&err, UpgradeError::UnknownClass { class } if class == "test.Stranger"));
}

#[test]
fn an_object_that_would_outgrow_its_page_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    let s = thor::open(&src).unwrap();
    // The largest note an 8 KiB page holds: 8164 bytes, 16 of them header, number and count.
    s.run(|s| {
        let n = s.create::<Note>(8164 - 16)?;
        s.set_root(0, n.as_ref())
    })
    .unwrap();
    s.close().unwrap();
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<big_note::Note>());
    assert!(
        matches!(&err, UpgradeError::ObjectTooLarge { class, bytes: 8564, max: 8164, .. } if class == "test.Note"),
        "{err:?}"
    );
}

#[test]
fn an_existing_destination_is_refused() {
    let (_tmp, src, dst) = v1_database();
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("mine"), b"keep").unwrap();
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<v2::Person>());
    assert!(matches!(&err, UpgradeError::DestinationExists { path } if *path == dst));
    assert_eq!(std::fs::read(dst.join("mine")).unwrap(), b"keep");
    // An empty directory is something too: the upgrade never writes into one.
    std::fs::remove_file(dst.join("mine")).unwrap();
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<v2::Person>());
    assert!(matches!(err, UpgradeError::DestinationExists { .. }));
}

#[test]
fn a_source_in_use_is_refused() {
    let (_tmp, src, dst) = v1_database();
    let s = thor::open(&src).unwrap();
    let err = refused(&src, &dst, Upgrade::new(&src, &dst).class::<v2::Person>());
    assert!(matches!(&err, UpgradeError::SourceInUse { path, .. } if *path == src), "{err:?}");
    assert!(err.to_string().contains("stop it first"), "{err}");
    drop(s);
    upgrade_v2(&src, &dst);
}

#[test]
fn a_directory_that_is_no_database_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("empty");
    std::fs::create_dir(&src).unwrap();
    let dst = tmp.path().join("dst");
    let err = refused(&src, &dst, Upgrade::new(&src, &dst));
    assert!(matches!(err, UpgradeError::NotADatabase { .. }), "{err:?}");
    assert_eq!(std::fs::read_dir(&src).unwrap().count(), 0, "no LOCK file was left");
}
