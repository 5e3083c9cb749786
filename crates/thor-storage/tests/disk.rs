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
    // Writing nothing past the end does not extend the file (`pwrite` of zero bytes).
    f.write_at(100, b"").unwrap();
    assert_eq!(f.len().unwrap(), 15);

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
    for seed in 0..200 {
        let disk = durable_base();
        // Unsynced writes around and after the synced bytes must not disturb them.
        let f = disk.open("f", false).unwrap();
        f.write_at(4, &[b'B'; 700]).unwrap();
        f.write_at(2000, b"CC").unwrap();
        disk.crash(seed);
        let got = disk.file_bytes("f").unwrap();
        assert_eq!(&got[..4], b"AAAA", "seed {seed}");
    }
}

/// A disk with durable empty file `f`, sectors of `sector` bytes, and the given unsynced
/// writes; crashed with each seed in turn, giving the outcomes.
fn crash_outcomes(sector: usize, writes: &[(u64, &[u8])], seeds: u64) -> Vec<Vec<u8>> {
    (0..seeds)
        .map(|seed| {
            let disk = MemDisk::with_sector_bytes(sector);
            let f = disk.open("f", true).unwrap();
            f.sync().unwrap();
            disk.sync_dir().unwrap();
            for (offset, bytes) in writes {
                f.write_at(*offset, bytes).unwrap();
            }
            disk.crash(seed);
            disk.file_bytes("f").unwrap()
        })
        .collect()
}

#[test]
fn a_crash_can_keep_a_later_write_while_losing_an_earlier_one() {
    let outcomes = crash_outcomes(4, &[(0, b"1111"), (4, b"2222")], 300);
    // The file keeps its length (the metadata of the second write landed) while the first
    // write's data did not: zeros where it should be, the second write after them.
    assert!(outcomes.iter().any(|o| o == b"\0\0\0\x002222"), "no seed kept the later write alone");
    let possible: [&[u8]; 7] = [
        b"",
        b"1111",
        b"\0\0\0\0",
        b"11112222",
        b"1111\0\0\0\0",
        b"\0\0\0\x002222",
        b"\0\0\0\0\0\0\0\0",
    ];
    for o in &outcomes {
        assert!(possible.contains(&o.as_slice()), "impossible outcome {o:?}");
    }
}

#[test]
fn writes_tear_at_sector_granularity_aligned_to_file_offsets() {
    // A 40-byte write at offset 6 spans sectors of 8 bytes as pieces [6,8) [8,16) [16,24)
    // [24,32) [32,40) [40,46): each piece lands whole or not at all.
    let data: Vec<u8> = (1..=40).collect();
    let outcomes = crash_outcomes(8, &[(6, &data)], 400);
    let mut torn = 0;
    for o in &outcomes {
        assert!(o.is_empty() || o.len() == 46, "length {} is neither old nor new", o.len());
        for piece in [6..8, 8..16, 16..24, 24..32, 32..40, 40..46] {
            let Some(got) = o.get(piece.clone()) else { continue };
            let want = &data[piece.start - 6..piece.end - 6];
            assert!(
                got == want || got.iter().all(|&b| b == 0),
                "piece {piece:?} is partly written: {got:?}"
            );
        }
        if o.len() == 46 && o[6..].contains(&0) && o[6..].iter().any(|&b| b != 0) {
            torn += 1;
        }
        // Bytes before the write were never written: zero.
        assert!(o.iter().take(6).all(|&b| b == 0));
    }
    assert!(torn > 0, "no seed tore the write");
    // The default sector is 512 bytes: a write within one sector never tears.
    assert_eq!(MemDisk::new().sector_bytes(), 512);
    let within: Vec<u8> = vec![7; 500];
    for o in crash_outcomes(512, &[(10, &within)], 100) {
        let tail = &o[o.len().min(10)..];
        assert!(tail.is_empty() || tail == within || tail.iter().all(|&b| b == 0), "torn");
    }
}

#[test]
fn overlapping_unsynced_writes_may_land_in_either_order() {
    let outcomes: BTreeSet<Vec<u8>> =
        crash_outcomes(4, &[(0, b"11111111"), (4, b"2222")], 400).into_iter().collect();
    // In call order the second write wins its sector; landing first, it is overwritten.
    assert!(outcomes.contains(b"11112222".as_slice()), "{outcomes:?}");
    assert!(outcomes.contains(b"11111111".as_slice()), "{outcomes:?}");
    assert!(outcomes.contains(b"\0\0\0\x002222".as_slice()), "{outcomes:?}");
}

#[test]
fn sync_makes_writes_durable() {
    for seed in 0..100 {
        let disk = durable_base();
        let f = disk.open("f", false).unwrap();
        f.write_at(4, b"BBBB").unwrap();
        f.sync().unwrap();
        f.write_at(8, b"CCCC").unwrap();
        disk.crash(seed);
        let got = disk.file_bytes("f").unwrap();
        let ok: [&[u8]; 3] = [b"AAAABBBB", b"AAAABBBBCCCC", b"AAAABBBB\0\0\0\0"];
        assert!(ok.contains(&got.as_slice()), "seed {seed}: {got:?}");
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
    // Kept, undone, or the length undone while the zeroing beyond the new end landed.
    assert!(seen.contains(b"A".as_slice()) && seen.contains(b"AAAA".as_slice()), "{seen:?}");
    assert!(seen.is_subset(&BTreeSet::from([
        b"A".to_vec(),
        b"AAAA".to_vec(),
        b"A\0\0\0".to_vec()
    ])));
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
        // Small sectors, so that many pieces are drawn and shuffled.
        let disk = MemDisk::with_sector_bytes(4);
        let f = write_file(&disk, "f", b"AAAA");
        f.sync().unwrap();
        disk.sync_dir().unwrap();
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
