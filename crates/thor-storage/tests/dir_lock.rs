//! The database directory lock of `FileDisk::open_locked`, one behaviour per test: a second
//! opener (in this process or another) is refused with the holder named; the lock goes with
//! the last clone; a stale lock file left by a dead holder is no obstacle; the lock file is out
//! of the disk's reach; a garbled lock file never breaks the error.

use std::path::Path;
use std::process::Command;

use thor_storage::file_disk::LOCK_FILE;
use thor_storage::{Disk, FileDisk, StorageError};

/// Set in the environment of the child process that `second_opener_is_refused` starts: the
/// directory the child tries to lock.
const CHILD_DIR: &str = "THOR_STORAGE_LOCK_PROBE_DIR";

/// What the child process prints, for the parent to check.
const PROBE: &str = "LOCK-PROBE";

/// Runs this test binary again, as the child of `second_opener_is_refused`, trying to lock
/// `dir`; returns the child's probe line.
fn probe_from_another_process(dir: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "second_opener_is_refused", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        // The harness prints the test's name on the same line, before the probe's output.
        .find_map(|l| l.split_once(PROBE).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no probe line in the child's output: {stdout}"))
        .trim()
        .to_string()
}

/// The child's side: try the lock once and say what happened. (The parent checks it.)
fn child_probe(dir: &str) {
    match FileDisk::open_locked(dir, false, "lock probe") {
        Ok(_) => println!("{PROBE} acquired"),
        Err(e) => println!("{PROBE} refused: {e}"),
    }
}

fn locked_error(r: Result<FileDisk, StorageError>) -> (String, String, String) {
    match r {
        Err(e @ StorageError::Locked { .. }) => {
            let message = e.to_string();
            let StorageError::Locked { path, holder } = e else { unreachable!() };
            (path, holder, message)
        }
        other => panic!("expected the directory to be locked, got {other:?}"),
    }
}

#[test]
fn second_opener_is_refused() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child_probe(&dir);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let disk = FileDisk::open_locked(&dir, true, "thor test server").unwrap();
    assert!(disk.is_locked());
    let pid = std::process::id();

    // In this process: refused, naming the holder.
    let (path, holder, message) = locked_error(FileDisk::open_locked(&dir, false, "second"));
    assert_eq!(path, dir.display().to_string());
    assert!(
        holder.starts_with(&format!("pid {pid} (this process) (thor test server)")),
        "{holder}"
    );
    assert!(holder.contains(", since 2"), "{holder}");
    assert!(
        message.starts_with(&format!("database {} is in use by pid {pid}", dir.display())),
        "{message}"
    );

    // From another process: refused the same way.
    let seen = probe_from_another_process(&dir);
    assert!(seen.starts_with("refused: database"), "{seen}");
    assert!(seen.contains(&format!("pid {pid} (thor test server)")), "{seen}");

    // Once released, the other process gets it; when it exits, the kernel releases its lock,
    // leaving a LOCK file that names it but is not held.
    drop(disk);
    assert_eq!(probe_from_another_process(&dir), "acquired");
    let stale = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
    assert!(stale.contains("program lock probe"), "{stale}");
    let again = FileDisk::open_locked(&dir, false, "after the probe").unwrap();
    let now = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
    assert!(now.starts_with(&format!("pid {pid}\nprogram after the probe\n")), "{now}");
    drop(again);
}

#[test]
fn the_lock_is_released_when_the_last_clone_drops() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = FileDisk::open_locked(tmp.path(), false, "first").unwrap();
    let clone = disk.clone();
    drop(disk);
    locked_error(FileDisk::open_locked(tmp.path(), false, "second"));
    drop(clone);
    let second = FileDisk::open_locked(tmp.path(), false, "second").unwrap();
    assert!(second.is_locked());
    // An unlocked disk on the same directory is not refused: only lockers exclude each other.
    assert!(!FileDisk::open_dir(tmp.path(), false).unwrap().is_locked());
}

#[test]
fn a_stale_lock_file_is_not_a_held_lock() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(LOCK_FILE), "pid 1\nprogram long dead\n").unwrap();
    let disk = FileDisk::open_locked(tmp.path(), false, "fresh").unwrap();
    let text = std::fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
    assert!(text.starts_with(&format!("pid {}\nprogram fresh\n", std::process::id())), "{text}");
    drop(disk);
}

#[test]
fn a_locked_disk_keeps_its_lock_file_out_of_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = FileDisk::open_locked(tmp.path(), false, "owner").unwrap();
    disk.open("data", true).unwrap();
    assert_eq!(disk.list().unwrap(), vec!["data".to_string()]);
    let reserved = |r: Result<(), StorageError>| matches!(r, Err(StorageError::InvalidName { .. }));
    assert!(reserved(disk.open(LOCK_FILE, false).map(drop)));
    assert!(reserved(disk.remove(LOCK_FILE)));
    assert!(reserved(disk.rename(LOCK_FILE, "x")));
    assert!(reserved(disk.rename("data", LOCK_FILE)));
    assert!(tmp.path().join(LOCK_FILE).exists());
}

#[test]
fn a_garbled_lock_file_still_gives_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = FileDisk::open_locked(tmp.path(), false, "owner").unwrap();
    // Something else overwrote the holder's text (flock is advisory; the file is not).
    let mut junk = vec![0xFFu8; 10_000];
    junk.extend_from_slice(b"\npid 77\n");
    std::fs::write(tmp.path().join(LOCK_FILE), &junk).unwrap();
    let (_, holder, _) = locked_error(FileDisk::open_locked(tmp.path(), false, "second"));
    assert_eq!(holder, "an unknown holder (its LOCK file names no pid)");
    let mut long = b"pid 42\nprogram ".to_vec();
    long.extend(std::iter::repeat_n(b'p', 5000));
    std::fs::write(tmp.path().join(LOCK_FILE), &long).unwrap();
    let (_, holder, _) = locked_error(FileDisk::open_locked(tmp.path(), false, "second"));
    assert!(holder.starts_with("pid 42 (ppp") && holder.len() < 300, "{holder}");
    drop(disk);
}

/// Every file of `dir` with its bytes and modification time: what "writes nothing" compares.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                meta.modified().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn read_only_opens_share_the_directory_and_exclude_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let writer = FileDisk::open_locked(dir, false, "a writer").unwrap();
    writer.open("data", true).unwrap().write_at(0, b"abc").unwrap();
    // A reader is refused while the writer holds the directory, with the writer named.
    let err = FileDisk::open_read_only(dir).unwrap_err();
    assert!(err.to_string().contains("a writer"), "{err}");
    drop(writer);

    let before = snapshot(dir);
    let r1 = FileDisk::open_read_only(dir).unwrap();
    let r2 = FileDisk::open_read_only(dir).unwrap();
    assert!(r1.holds_shared_lock());
    assert_eq!(r1.list().unwrap(), ["data"], "the lock file is not a database file");
    let mut buf = [0u8; 3];
    r2.open("data", false).unwrap().read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"abc");
    // A writer is refused while readers hold it, and told who.
    let (_, holder, _) = locked_error(FileDisk::open_locked(dir, false, "a second writer"));
    assert!(holder.contains("read-only opener"), "{holder}");
    assert_eq!(snapshot(dir), before, "read-only opens and a refused writer wrote nothing");
    drop(r1);
    drop(r2);
    FileDisk::open_locked(dir, false, "a writer again").unwrap();
}
