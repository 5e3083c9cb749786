//! The embedded store through the facade: `thor::open` and `thor::Database`, one behaviour
//! per test.

use std::path::Path;
use std::sync::Arc;

use thor::{Database, Error, Ref, Refs, Session};

thor::class! {
    /// A note: a number and some text.
    pub class Note("test.Note") { number: u64, next: Ref<Note> }
    var bytes;
}

/// Commits `n` notes of `text_bytes` bytes each, in a list in root slot 0.
fn write_notes(s: &Session, n: usize, text_bytes: usize) {
    s.run(|s| {
        let list = s.create::<Refs<Note>>(n)?;
        for i in 0..n {
            let note = s.create::<Note>(text_bytes)?;
            note.set(Note::number, i as u64)?;
            note.set_var_bytes(&vec![i as u8; text_bytes])?;
            list.set_var_ref(i, note.as_ref())?;
        }
        s.set_root(0, list.as_ref())
    })
    .unwrap();
}

/// The numbers of the notes in root slot 0, checking each one's text.
fn read_notes(s: &Session) -> Vec<u64> {
    s.run::<_, thor::ClientError>(|s| {
        let list = s.get(s.root::<Refs<Note>>(0)?)?;
        let mut numbers = Vec::new();
        for i in 0..list.var_len() {
            let note = s.get(list.var_ref(i))?;
            assert!(note.var_bytes().iter().all(|b| *b == i as u8), "note {i}'s text");
            numbers.push(note.get(Note::number));
        }
        Ok(numbers)
    })
    .unwrap()
}

/// Bytes in the log's segments (a clean close leaves none but a segment header).
fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("log."))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Opens the database in `dir` with the engine directly and returns what recovery left in
/// the MOB: versions replayed from the log.
fn versions_replayed(dir: &Path) -> usize {
    let disk = Arc::new(thor_storage::FileDisk::open_locked(dir, false, "test").unwrap());
    let opts = thor_server::EngineOptions { background_flusher: false, ..Default::default() };
    let engine = thor_server::Engine::open(disk, opts).unwrap();
    let replayed = engine.stats().mob_entries;
    engine.close().unwrap();
    replayed
}

#[test]
fn open_creates_the_directory_and_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a").join("new.db");
    let s = thor::open(&path).unwrap();
    write_notes(&s, 3, 10);
    assert_eq!(read_notes(&s), [0, 1, 2]);
    assert!(path.join("superblock").is_file());
}

#[test]
fn data_survives_a_clean_close_and_the_next_open_replays_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("db");
    let db = Database::open(&path).unwrap();
    let s = db.session().unwrap();
    write_notes(&s, 200, 1000);
    assert!(log_bytes(&path) > 200_000, "the commit is in the log");
    drop(s);
    db.close().unwrap();
    assert!(log_bytes(&path) < 4096, "close truncated the log to {} bytes", log_bytes(&path));
    assert_eq!(versions_replayed(&path), 0);
    let s = thor::open(&path).unwrap();
    assert_eq!(read_notes(&s), (0..200).collect::<Vec<_>>());
}

#[test]
fn data_survives_dropping_the_session_which_closes_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("db");
    let s = thor::open(&path).unwrap();
    write_notes(&s, 200, 1000);
    drop(s);
    // Dropped, the last session closed the engine: the lock is free and the log truncated.
    assert!(log_bytes(&path) < 4096, "drop truncated the log to {} bytes", log_bytes(&path));
    assert_eq!(versions_replayed(&path), 0);
    let s = thor::open(&path).unwrap();
    assert_eq!(read_notes(&s), (0..200).collect::<Vec<_>>());
}

#[test]
fn session_close_closes_the_database_too() {
    let tmp = tempfile::tempdir().unwrap();
    let s = thor::open(tmp.path()).unwrap();
    write_notes(&s, 2, 1);
    s.close().unwrap();
    let s = thor::open(tmp.path()).unwrap();
    assert_eq!(read_notes(&s), [0, 1]);
}

#[test]
fn opening_a_file_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.txt");
    std::fs::write(&file, b"not a database").unwrap();
    let err = thor::open(&file).unwrap_err();
    assert!(matches!(&err, Error::NotADirectory { path } if *path == file), "{err:?}");
    assert!(err.to_string().contains("not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a database", "the file is untouched");
}

#[test]
fn a_directory_of_other_files_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"mine").unwrap();
    let err = thor::open(tmp.path()).unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    let mut names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["LOCK", "notes.txt"], "no database files were written");
}

#[test]
fn a_second_open_of_the_same_directory_is_refused_until_the_first_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let first = thor::open(tmp.path()).unwrap();
    for err in [thor::open(tmp.path()).unwrap_err(), Database::open(tmp.path()).unwrap_err()] {
        let Error::Locked { path, holder } = &err else { panic!("{err:?}") };
        assert_eq!(path, tmp.path());
        assert!(holder.contains(&format!("pid {}", std::process::id())), "{holder}");
        assert!(holder.contains("thor embedded"), "{holder}");
        assert!(err.to_string().contains("in use by"), "{err}");
    }
    drop(first);
    thor::open(tmp.path()).unwrap();
}

#[test]
fn close_with_sessions_alive_is_refused_and_the_last_drop_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Database::open(tmp.path()).unwrap();
    let s = db.session().unwrap();
    let other = db.clone();
    let err = db.close().unwrap_err();
    assert!(matches!(err, Error::InUse { users: 2, .. }), "{err:?}");
    write_notes(&s, 5, 1);
    drop(other);
    assert!(matches!(Database::open(tmp.path()), Err(Error::Locked { .. })), "still open");
    drop(s);
    let s = thor::open(tmp.path()).unwrap();
    assert_eq!(read_notes(&s), [0, 1, 2, 3, 4]);
}

#[test]
fn sessions_of_one_database_work_in_threads_and_see_each_others_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Database::open(tmp.path()).unwrap();
    write_notes(&db.session().unwrap(), 4, 1);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let db = &db;
            scope.spawn(move || {
                // Four threads on two notes conflict often: let `run` retry as long as needed.
                let cfg = thor::SessionConfig { run_attempts_max: 1000, ..Default::default() };
                let s = db.session_with(cfg).unwrap();
                for _ in 0..25 {
                    s.run(|s| {
                        let list = s.get(s.root::<Refs<Note>>(0)?)?;
                        let note = s.get(list.var_ref(t as usize % 2))?;
                        note.set(Note::number, note.get(Note::number) + 100)
                    })
                    .unwrap();
                }
            });
        }
    });
    let s = db.session().unwrap();
    assert_eq!(read_notes(&s), [5000, 5001, 2, 3], "every increment committed once");
    drop(s);
    db.close().unwrap();
}

#[test]
fn sessions_use_the_cli_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let s = thor::open(tmp.path()).unwrap();
    assert_eq!(s.policy_name(), "hac");
    let d = thor::SessionConfig::default();
    assert_eq!((d.cache_bytes, d.policy), (64 << 20, thor::PolicyConfig::HAC));
}

#[test]
fn a_backup_taken_while_a_session_is_open_opens_with_what_was_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Database::open(tmp.path().join("db")).unwrap();
    let s = db.session().unwrap();
    write_notes(&s, 300, 100);
    let dest = tmp.path().join("copy");
    let info = db.backup(&dest).unwrap();
    assert!(info.lsn.0 >= 1 && info.page_bytes > 0 && info.log_bytes > 0, "{info:?}");
    // A commit after the backup is not in it.
    s.run(|s| s.set_root(1, s.root::<Note>(0)?)).unwrap();
    assert!(matches!(db.backup(&dest), Err(Error::Backup { .. })), "the destination exists");
    let copy = thor::open(&dest).unwrap();
    assert_eq!(read_notes(&copy), (0..300).collect::<Vec<u64>>());
    assert!(copy.run(|s| s.root::<Note>(1)).unwrap().is_null());
}

/// Every file of `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let modified = e.metadata().unwrap().modified().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                modified,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn read_only_open_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    write_notes(&thor::open(&dir).unwrap(), 5, 100);
    // A crash left half a flush batch after the log's last record: a read-write open cuts it
    // into a `.torn` file; a read-only one must do that in memory.
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("log."))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&[0x5a; 37]);
    std::fs::write(&segment, bytes).unwrap();
    let before = snapshot(&dir);

    // Two readers share the directory and read every note.
    let a = Database::open_read_only(&dir).unwrap();
    let b = thor::open_read_only(&dir).unwrap();
    assert_eq!(a.health(), thor::Health::ReadOnly);
    assert_eq!(read_notes(&a.session().unwrap()), (0..5).collect::<Vec<_>>());
    assert_eq!(read_notes(&b), (0..5).collect::<Vec<_>>());
    // A writing commit is refused with the reason; the readers go on.
    let s = a.session().unwrap();
    let err = s
        .run(|s| {
            s.create::<Note>(4)?;
            Ok::<_, thor::ClientError>(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    // A read-write open waits for the readers, and is told who holds the directory.
    match Database::open(&dir) {
        Err(Error::Locked { holder, .. }) => assert!(holder.contains("read-only"), "{holder}"),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop((s, b));
    a.close().unwrap();
    assert_eq!(snapshot(&dir), before, "a read-only open changed the directory");

    // Only a read-write open repairs: it keeps the torn bytes in a file of their own.
    let s = thor::open(&dir).unwrap();
    assert_eq!(read_notes(&s), (0..5).collect::<Vec<_>>());
    drop(s);
    assert!(
        std::fs::read_dir(&dir)
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().contains(".torn") })
    );
    // Nothing to read is nothing created.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(Database::open_read_only(&empty), Err(Error::NotADatabase { .. })));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}
