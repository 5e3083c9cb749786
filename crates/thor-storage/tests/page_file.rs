//! The page file: geometry, runs, torn files, durability and counters.

use thor_storage::{Disk, FileDisk, MemDisk, PageFile, PageFileStats, StorageError};

const PS: usize = 1024;

fn page(fill: u8) -> Vec<u8> {
    vec![fill; PS]
}

/// Reads, writes and runs behave the same on every backend.
fn roundtrip(disk: &dyn Disk) {
    let pf = PageFile::open(disk, "pages", PS, true).unwrap();
    assert_eq!(pf.page_size(), PS);
    assert_eq!(pf.len_pages().unwrap(), 0);
    let mut buf = page(0xEE);
    // Beyond the end: never written, and the buffer is left alone.
    assert!(!pf.read(0, &mut buf).unwrap());
    assert_eq!(buf, page(0xEE));

    pf.write(3, &page(3)).unwrap();
    assert_eq!(pf.len_pages().unwrap(), 4);
    // Pages below the highest written one read as zeros.
    assert!(pf.read(1, &mut buf).unwrap());
    assert_eq!(buf, page(0));
    assert!(pf.read(3, &mut buf).unwrap());
    assert_eq!(buf, page(3));
    assert!(!pf.read(4, &mut buf).unwrap());

    // A run of three pages is one write call.
    let mut run = page(5);
    run.extend(page(6));
    run.extend(page(7));
    pf.write_run(5, &run).unwrap();
    for (id, fill) in [(5, 5), (6, 6), (7, 7)] {
        assert!(pf.read(id, &mut buf).unwrap());
        assert_eq!(buf, page(fill));
    }
    pf.sync().unwrap();
    assert_eq!(pf.len_pages().unwrap(), 8);
    assert_eq!(
        pf.stats(),
        PageFileStats { pages_read: 5, pages_written: 4, write_calls: 2, syncs: 1 }
    );

    // A reopened page file sees the same pages.
    drop(pf);
    let pf = PageFile::open(disk, "pages", PS, false).unwrap();
    assert!(pf.read(6, &mut buf).unwrap());
    assert_eq!(buf, page(6));
}

#[test]
fn pages_roundtrip_in_memory() {
    roundtrip(&MemDisk::new());
}

#[test]
fn pages_roundtrip_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    roundtrip(&FileDisk::open_dir(dir.path(), false).unwrap());
}

#[test]
fn a_partial_last_page_is_a_torn_file_not_a_missing_page() {
    let disk = MemDisk::new();
    let pf = PageFile::open(&disk, "pages", PS, true).unwrap();
    pf.write_run(0, &[page(1), page(2)].concat()).unwrap();
    disk.edit_file("pages", |b| b.truncate(PS + 100)).unwrap();
    let mut buf = page(0);
    assert!(pf.read(0, &mut buf).unwrap());
    assert!(
        matches!(pf.read(1, &mut buf), Err(StorageError::UnexpectedEof { offset, .. }) if offset == PS as u64)
    );
    assert!(!pf.read(2, &mut buf).unwrap());
    // The partial page is not counted.
    assert_eq!(pf.len_pages().unwrap(), 1);
}

#[test]
fn wrong_buffer_sizes_and_page_sizes_are_refused() {
    let disk = MemDisk::new();
    for bad in [0, 100, 1000, 3 * 1024, 64 * 1024] {
        assert!(matches!(
            PageFile::open(&disk, "pages", bad, true),
            Err(StorageError::InvalidArgument(_))
        ));
    }
    let pf = PageFile::open(&disk, "pages", PS, true).unwrap();
    let invalid = |r: Result<(), StorageError>| matches!(r, Err(StorageError::InvalidArgument(_)));
    assert!(invalid(pf.read(0, &mut [0u8; 10]).map(drop)));
    assert!(invalid(pf.write(0, &[0u8; PS + 1])));
    assert!(invalid(pf.write_run(0, &[])));
    assert!(invalid(pf.write_run(0, &vec![0u8; PS * 2 + 1])));
    assert!(invalid(pf.write_run(u32::MAX, &vec![0u8; PS * 2])));
    // The last page id itself is fine (offsets are 64-bit).
    assert!(!pf.read(u32::MAX, &mut page(0)).unwrap());
}

#[test]
fn open_without_create_needs_the_file() {
    let disk = MemDisk::new();
    assert!(PageFile::open(&disk, "pages", PS, false).unwrap_err().is_not_found());
}

#[test]
fn a_created_page_file_and_its_synced_pages_survive_a_crash() {
    for seed in 0..30 {
        let disk = MemDisk::new();
        let pf = PageFile::open(&disk, "pages", PS, true).unwrap();
        pf.write(0, &page(9)).unwrap();
        pf.sync().unwrap();
        pf.write(1, &page(8)).unwrap();
        disk.crash(seed);
        let pf = PageFile::open(&disk, "pages", PS, false).unwrap();
        let mut buf = page(0);
        assert!(pf.read(0, &mut buf).unwrap());
        assert_eq!(buf, page(9));
        // The unsynced page is gone, whole, or torn: never anything else.
        match pf.read(1, &mut buf) {
            Ok(false) | Err(StorageError::UnexpectedEof { .. }) => {}
            Ok(true) => assert!(buf.iter().all(|&b| b == 8 || b == 0), "seed {seed}"),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}
