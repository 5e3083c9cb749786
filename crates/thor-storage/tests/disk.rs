//! The Disk backends: one conformance suite run on all three, then MemDisk's crash model and
//! FaultDisk's fault plan, behaviour by behaviour.

use std::collections::BTreeSet;
use std::sync::Arc;

use thor_storage::{Disk, DiskFile, FaultDisk, FaultPlan, FileDisk, MemDisk, StorageError};

fn read_all(f: &dyn DiskFile) -> Vec<u8> {
    let len = f.len().unwrap() as usize;
    let mut buf = vec![0u8; len];
    f.read_exact_at(0, &mut buf).unwrap();
    buf
}

fn write_file(disk: &dyn Disk, name: &str, bytes: &[u8]) -> Arc<dyn DiskFile> {
    let f = disk.open(name, true).unwrap();
    f.set_len(0).unwrap();
    f.write_at(0, bytes).unwrap();
    f
}

/// Everything every backend must do the same way.
fn conformance(disk: &dyn Disk) {
    assert!(disk.list().unwrap().is_empty());
    assert!(!disk.exists("a").unwrap());
    assert!(disk.open("a", false).unwrap_err().is_not_found());

    let f = disk.open("a", true).unwrap();
    assert_eq!(f.name(), "a");
    assert_eq!(f.len().unwrap(), 0);
    assert!(f.is_empty().unwrap());
    f.write_at(0, b"hello").unwrap();
    // A write past the end zero-fills the gap.
    f.write_at(10, b"world").unwrap();
    assert_eq!(f.len().unwrap(), 15);
    assert_eq!(read_all(&*f), b"hello\0\0\0\0\0world");

    // Reads are short only at the end of the file.
    let mut buf = [0xAAu8; 10];
    assert_eq!(f.read_at(10, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"world");
    assert_eq!(f.read_at(15, &mut buf).unwrap(), 0);
    assert_eq!(f.read_at(1 << 40, &mut buf).unwrap(), 0);
    assert!(matches!(
        f.read_exact_at(10, &mut buf),
        Err(StorageError::UnexpectedEof { offset: 10, len: 10, .. })
    ));
    let mut five = [0u8; 5];
    f.read_exact_at(10, &mut five).unwrap();
    assert_eq!(&five, b"world");

    // set_len truncates and extends with zeros.
    f.set_len(3).unwrap();
    assert_eq!(read_all(&*f), b"hel");
    f.set_len(6).unwrap();
    assert_eq!(read_all(&*f), b"hel\0\0\0");
    f.sync().unwrap();

    // Another handle on the same name sees the same bytes; open(create) does not truncate.
    let g = disk.open("a", true).unwrap();
    assert_eq!(read_all(&*g), b"hel\0\0\0");
    assert!(disk.exists("a").unwrap());

    // Rename moves; renaming onto an existing name replaces it atomically.
    write_file(disk, "b", b"B");
    disk.rename("a", "c").unwrap();
    assert!(!disk.exists("a").unwrap());
    assert_eq!(disk.list().unwrap(), vec!["b".to_string(), "c".to_string()]);
    disk.rename("b", "c").unwrap();
    assert_eq!(disk.list().unwrap(), vec!["c".to_string()]);
    assert_eq!(read_all(&*disk.open("c", false).unwrap()), b"B");
    assert!(disk.rename("missing", "x").unwrap_err().is_not_found());
    // Renaming a file onto itself changes nothing.
    disk.rename("c", "c").unwrap();
    assert_eq!(disk.list().unwrap(), vec!["c".to_string()]);

    // Remove; a handle open on a removed file keeps working (Unix semantics).
    let h = disk.open("c", false).unwrap();
    disk.remove("c").unwrap();
    assert!(!disk.exists("c").unwrap());
    assert!(disk.remove("c").unwrap_err().is_not_found());
    h.write_at(1, b"x").unwrap();
    assert_eq!(read_all(&*h), b"Bx");
    assert!(disk.list().unwrap().is_empty());

    // list is sorted.
    for name in ["zeta", "alpha", "log.0000000000000002", "log.0000000000000001"] {
        disk.open(name, true).unwrap();
    }
    assert_eq!(
        disk.list().unwrap(),
        vec!["alpha", "log.0000000000000001", "log.0000000000000002", "zeta"]
    );

    // Names that are not plain names are refused by every operation.
    for bad in ["", ".", "..", "../escape", "sub/file", "nul\0"] {
        let is_invalid =
            |r: Result<(), StorageError>| matches!(r, Err(StorageError::InvalidName { .. }));
        assert!(is_invalid(disk.open(bad, true).map(drop)), "{bad:?}");
        assert!(is_invalid(disk.exists(bad).map(drop)), "{bad:?}");
        assert!(is_invalid(disk.remove(bad)), "{bad:?}");
        assert!(is_invalid(disk.rename("alpha", bad)), "{bad:?}");
    }
    disk.sync_dir().unwrap();
}

#[test]
fn file_disk_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let disk = FileDisk::open_dir(dir.path().join("db"), true).unwrap();
    conformance(&disk);
    // Directories inside are not files of the disk.
    std::fs::create_dir(dir.path().join("db").join("subdir")).unwrap();
    assert!(!disk.list().unwrap().contains(&"subdir".to_string()));
}

#[test]
fn file_disk_open_dir_without_create_needs_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    assert!(FileDisk::open_dir(dir.path().join("missing"), false).unwrap_err().is_not_found());
    std::fs::write(dir.path().join("plain"), b"x").unwrap();
    assert!(matches!(
        FileDisk::open_dir(dir.path().join("plain"), false),
        Err(StorageError::InvalidArgument(_))
    ));
}

#[test]
fn mem_disk_conforms() {
    conformance(&MemDisk::new());
}

#[test]
fn fault_disk_conforms() {
    conformance(&FaultDisk::new());
}

// ---------------------------------------------------------------------------------------------
// The crash model.

/// A disk holding durable file `f` = "AAAA" (name and contents synced).
fn durable_base() -> MemDisk {
    let disk = MemDisk::new();
    let f = write_file(&disk, "f", b"AAAA");
    f.sync().unwrap();
    disk.sync_dir().unwrap();
    disk
}

#[test]
fn synced_data_survives_every_crash() {
    for seed in 0..50 {
        let disk = durable_base();
        disk.crash(seed);
        assert_eq!(disk.file_bytes("f").unwrap(), b"AAAA", "seed {seed}");
    }
}

#[test]
fn unsynced_writes_leave_a_prefix_possibly_torn() {
    let mut seen = BTreeSet::new();
    for seed in 0..300 {
        let disk = durable_base();
        let f = disk.open("f", false).unwrap();
        f.write_at(4, b"BBBB").unwrap();
        f.write_at(8, b"CCCC").unwrap();
        disk.crash(seed);
        let got = disk.file_bytes("f").unwrap();
        // Contiguous appends: every outcome is the durable image plus a byte prefix of them.
        let full = b"AAAABBBBCCCC";
        assert!(got.len() >= 4 && full.starts_with(&got), "seed {seed}: {got:?}");
        seen.insert(got.len());
    }
    // Nothing, everything, whole writes and torn writes all happen for some seed.
    for len in [4, 6, 8, 10, 12] {
        assert!(seen.contains(&len), "no seed left {len} bytes: {seen:?}");
    }
}

#[test]
fn writes_are_kept_in_order_never_a_later_one_without_an_earlier_one() {
    for seed in 0..200 {
        let disk = durable_base();
        let f = disk.open("f", false).unwrap();
        f.write_at(0, b"1111").unwrap();
        f.write_at(0, b"2222").unwrap();
        f.write_at(0, b"3333").unwrap();
        disk.crash(seed);
        let got = disk.file_bytes("f").unwrap();
        // A torn write overwrites a prefix of the previous contents.
        let ok = [b"AAAA", b"1111", b"2222", b"3333"].iter().enumerate().any(|(i, base)| {
            let next: &[u8] = [b"1111", b"2222", b"3333", b"----"][i];
            (0..=4).any(|k| got[..k] == next[..k] && got[k..] == base[k..])
        });
        assert!(ok, "seed {seed}: {:?}", String::from_utf8_lossy(&got));
    }
}

#[test]
fn sync_makes_writes_durable() {
    for seed in 0..50 {
        let disk = durable_base();
        let f = disk.open("f", false).unwrap();
        f.write_at(4, b"BBBB").unwrap();
        f.sync().unwrap();
        f.write_at(8, b"CCCC").unwrap();
        disk.crash(seed);
        let got = disk.file_bytes("f").unwrap();
        assert!(got.starts_with(b"AAAABBBB") && b"AAAABBBBCCCC".starts_with(&got), "seed {seed}");
    }
}

#[test]
fn unsynced_set_len_may_be_undone() {
    let mut seen = BTreeSet::new();
    for seed in 0..100 {
        let disk = durable_base();
        disk.open("f", false).unwrap().set_len(1).unwrap();
        disk.crash(seed);
        seen.insert(disk.file_bytes("f").unwrap());
    }
    assert_eq!(seen, BTreeSet::from([b"A".to_vec(), b"AAAA".to_vec()]));
}

#[test]
fn a_synced_file_vanishes_if_its_directory_was_not_synced() {
    let mut outcomes = BTreeSet::new();
    for seed in 0..100 {
        let disk = durable_base();
        let g = write_file(&disk, "g", b"data");
        g.sync().unwrap();
        disk.crash(seed);
        let exists = disk.exists("g").unwrap();
        if exists {
            // If the name survived, the synced data did too.
            assert_eq!(disk.file_bytes("g").unwrap(), b"data");
        }
        outcomes.insert(exists);
    }
    assert_eq!(outcomes, BTreeSet::from([false, true]));
}

#[test]
fn sync_dir_makes_creates_renames_and_removes_durable() {
    for seed in 0..50 {
        let disk = durable_base();
        write_file(&disk, "g", b"G").sync().unwrap();
        write_file(&disk, "h", b"H").sync().unwrap();
        disk.rename("g", "f").unwrap();
        disk.remove("h").unwrap();
        disk.sync_dir().unwrap();
        disk.crash(seed);
        assert_eq!(disk.list().unwrap(), vec!["f".to_string()]);
        assert_eq!(disk.file_bytes("f").unwrap(), b"G");
    }
}

#[test]
fn an_unsynced_rename_is_atomic_old_or_new_never_neither() {
    let mut outcomes = BTreeSet::new();
    for seed in 0..100 {
        let disk = durable_base();
        write_file(&disk, "tmp", b"NEW").sync().unwrap();
        disk.sync_dir().unwrap();
        disk.rename("tmp", "f").unwrap();
        disk.crash(seed);
        let f = disk.file_bytes("f").unwrap();
        let tmp = disk.exists("tmp").unwrap();
        match (f.as_slice(), tmp) {
            (b"AAAA", true) => outcomes.insert("old"),
            (b"NEW", false) => outcomes.insert("new"),
            other => panic!("seed {seed}: impossible state {other:?}"),
        };
    }
    assert_eq!(outcomes.len(), 2);
}

#[test]
fn namespace_changes_survive_in_order() {
    for seed in 0..200 {
        let disk = durable_base();
        for name in ["n1", "n2", "n3"] {
            disk.open(name, true).unwrap();
        }
        disk.remove("f").unwrap();
        disk.crash(seed);
        let names = disk.list().unwrap();
        // Some prefix of [create n1, create n2, create n3, remove f] was kept.
        let ok = [
            vec!["f"],
            vec!["f", "n1"],
            vec!["f", "n1", "n2"],
            vec!["f", "n1", "n2", "n3"],
            vec!["n1", "n2", "n3"],
        ]
        .iter()
        .any(|v| *v == names);
        assert!(ok, "seed {seed}: {names:?}");
    }
}

#[test]
fn the_same_seed_replays_the_same_crash() {
    let run = |seed: u64| {
        let disk = durable_base();
        let f = disk.open("f", false).unwrap();
        for i in 0..20u8 {
            f.write_at(u64::from(i) * 3, &[i; 5]).unwrap();
        }
        disk.open("g", true).unwrap().write_at(0, b"gg").unwrap();
        disk.crash(seed);
        (disk.list().unwrap(), disk.file_bytes("f").unwrap())
    };
    for seed in 0..20 {
        assert_eq!(run(seed), run(seed));
    }
}

#[test]
fn handles_from_before_a_crash_are_stale() {
    let disk = durable_base();
    let other_clone = disk.clone();
    let f = disk.open("f", false).unwrap();
    disk.crash(1);
    let stale = |r: Result<(), StorageError>| matches!(r, Err(StorageError::StaleHandle { .. }));
    let mut buf = [0u8; 4];
    assert!(stale(f.read_at(0, &mut buf).map(drop)));
    assert!(stale(f.write_at(0, b"x")));
    assert!(stale(f.sync()));
    assert!(stale(f.len().map(drop)));
    assert!(stale(f.set_len(0)));
    // A clone other than the crashing handle belongs to the dead process too.
    assert!(stale(other_clone.open("f", false).map(drop)));
    assert!(stale(other_clone.remove("f")));
    assert!(stale(other_clone.sync_dir()));
    // ... and so do clones made from it later.
    assert!(stale(other_clone.clone().list().map(drop)));
    // The crashing handle and clones made from it after the crash are the rebooted disk.
    let fresh = disk.clone();
    let g = fresh.open("f", false).unwrap();
    assert_eq!(read_all(&*g), b"AAAA");
    g.write_at(4, b"B").unwrap();
    assert_eq!(disk.file_bytes("f").unwrap(), b"AAAAB");
}

#[test]
fn edit_file_damages_the_medium_durably() {
    let disk = durable_base();
    disk.edit_file("f", |b| b[1] ^= 0xFF).unwrap();
    disk.crash(3);
    assert_eq!(disk.file_bytes("f").unwrap(), [b'A', b'A' ^ 0xFF, b'A', b'A']);
    disk.edit_file("f", |b| b.truncate(2)).unwrap();
    assert_eq!(disk.file_bytes("f").unwrap().len(), 2);
    assert!(disk.edit_file("missing", |_| ()).unwrap_err().is_not_found());
}

// ---------------------------------------------------------------------------------------------
// The fault plan.

#[test]
fn the_nth_write_fails_and_may_still_land() {
    let disk = FaultDisk::new();
    let f = disk.open("f", true).unwrap();
    f.write_at(0, b"one").unwrap();
    let c = disk.counters();
    assert_eq!((c.writes, c.bytes_written), (1, 3));
    disk.set_plan(FaultPlan { fail_write_at: Some(c.writes + 2), ..FaultPlan::default() });
    f.write_at(3, b"two").unwrap();
    assert!(matches!(
        f.write_at(6, b"three"),
        Err(StorageError::InjectedFault { op: "write", .. })
    ));
    // Only that one: later writes work.
    f.write_at(11, b"four").unwrap();
    assert_eq!(disk.counters().faults_injected, 1);
    // The failed write reached the live image as an unsynced write.
    assert_eq!(disk.file_bytes("f").unwrap(), b"onetwothreefour");
}

#[test]
fn a_failed_sync_makes_nothing_durable() {
    let mut lost = false;
    for seed in 0..50 {
        let disk = FaultDisk::new();
        let f = disk.open("f", true).unwrap();
        disk.sync_dir().unwrap();
        f.write_at(0, b"data").unwrap();
        disk.set_plan(FaultPlan {
            fail_sync_at: Some(disk.counters().syncs + 1),
            ..FaultPlan::default()
        });
        assert!(matches!(f.sync(), Err(StorageError::InjectedFault { op: "fsync", .. })));
        disk.crash(seed);
        lost |= disk.file_bytes("f").unwrap().is_empty();
    }
    assert!(lost, "some crash after a failed sync loses the unsynced write");
}

#[test]
fn a_dead_disk_fails_everything_until_the_crash() {
    let disk = FaultDisk::new();
    let f = disk.open("f", true).unwrap();
    f.write_at(0, b"x").unwrap();
    f.sync().unwrap();
    disk.sync_dir().unwrap();
    disk.die();
    let injected =
        |r: Result<(), StorageError>| matches!(r, Err(StorageError::InjectedFault { .. }));
    let mut buf = [0u8; 1];
    assert!(injected(f.read_at(0, &mut buf).map(drop)));
    assert!(injected(f.write_at(0, b"y")));
    assert!(injected(f.sync()));
    assert!(injected(disk.open("g", true).map(drop)));
    assert!(injected(disk.list().map(drop)));
    // A write refused by a dead disk has no effect at all.
    assert_eq!(disk.file_bytes("f").unwrap(), b"x");
    disk.crash(0);
    assert_eq!(disk.plan(), FaultPlan::default());
    assert_eq!(disk.counters().ops, 0);
    let f = disk.open("f", false).unwrap();
    assert_eq!(read_all(&*f), b"x");
}

#[test]
fn die_after_ops_counts_every_operation() {
    let disk = FaultDisk::new();
    disk.set_plan(FaultPlan { die_after_ops: Some(3), ..FaultPlan::default() });
    let f = disk.open("f", true).unwrap(); // op 1
    f.write_at(0, b"a").unwrap(); // op 2
    assert_eq!(f.len().unwrap(), 1); // op 3
    assert!(matches!(f.len(), Err(StorageError::InjectedFault { .. })));
    assert_eq!(disk.counters().ops, 4);
}

#[test]
fn fault_disk_wraps_an_existing_medium() {
    let mem = MemDisk::new();
    write_file(&mem, "f", b"shared");
    let faulty = FaultDisk::wrap(mem.clone());
    assert_eq!(faulty.file_bytes("f").unwrap(), b"shared");
    faulty.die();
    // The plan lives in the medium, so every handle on it sees it.
    assert!(matches!(mem.list(), Err(StorageError::InjectedFault { .. })));
    assert_eq!(faulty.mem().fault_plan(), faulty.plan());
}
