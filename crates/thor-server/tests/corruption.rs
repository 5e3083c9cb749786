//! Damaged bytes on disk: every case gives a clear error or is cut off as a torn log tail,
//! never a panic and never silently wrong data.

mod common;

use common::*;
use thor_core::{Oref, PageId};
use thor_server::{CommitRequest, Engine, EngineError, superblock};
use thor_storage::{Disk, MemDisk};

/// A database with two generations of data: one installed in the page file (and the log
/// truncated), one only in the log. Returns the disk, the objects and their expected bytes.
fn opts() -> thor_server::EngineOptions {
    let mut o = small_opts();
    o.log.segment_bytes = 4096;
    o
}

fn populated() -> (MemDisk, Vec<(Oref, Vec<u8>)>) {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk.clone()), opts()).unwrap();
    let class = install_class(&e);
    let mut expected = Vec::new();
    for round in 0..2u32 {
        for batch in 0..5u32 {
            let created: Vec<Vec<u8>> = (0..30)
                .map(|i| item(class.raw(), 0, round, batch * 100 + i, &[i as u8; 37]))
                .collect();
            let out =
                e.commit(CommitRequest { versions: vec![], created: created.clone() }).unwrap();
            expected.extend(out.created.into_iter().zip(created));
        }
        if round == 0 {
            e.flush_all().unwrap();
        }
    }
    // As a crash would leave it: the second generation only in the log.
    e.halt();
    (disk, expected)
}

/// Opens and reads everything back. Returns Ok(true) if every object has its expected bytes,
/// Ok(false) if the data is a consistent prefix (objects created later are missing, a torn log
/// tail was cut), and Err on any reported error. Panics on silently wrong bytes.
fn open_and_read(disk: &MemDisk, expected: &[(Oref, Vec<u8>)]) -> Result<bool, EngineError> {
    let e = Engine::open(arc(disk.clone()), opts())?;
    let mut missing = 0;
    for (oref, want) in expected {
        let page = oref.page().unwrap();
        if page.get() > e.stats().pages_allocated {
            missing += 1;
            continue;
        }
        let bytes = e.fetch(page)?;
        let v = thor_core::PageView::parse(&bytes).expect("fetched pages are valid");
        match v.object(oref.oid()) {
            Some(got) => assert_eq!(got, &want[..], "silently wrong bytes for {oref:?}"),
            None => missing += 1,
        }
    }
    Ok(missing == 0)
}

#[test]
fn intact_database_reads_back() {
    let (disk, expected) = populated();
    assert!(open_and_read(&disk, &expected).unwrap());
}

#[test]
fn a_damaged_superblock_is_a_clear_error() {
    let (disk, expected) = populated();
    disk.edit_file(superblock::FILE, |b| b[30] ^= 0x10).unwrap();
    let err = open_and_read(&disk, &expected).unwrap_err();
    assert!(matches!(err, EngineError::Superblock(_)), "{err}");
    assert!(err.to_string().contains("damaged"), "{err}");
    disk.edit_file(superblock::FILE, |b| b.truncate(20)).unwrap();
    assert!(matches!(open_and_read(&disk, &expected), Err(EngineError::Superblock(_))));
    disk.edit_file(superblock::FILE, |b| b.clear()).unwrap();
    assert!(matches!(open_and_read(&disk, &expected), Err(EngineError::Superblock(_))));
}

#[test]
fn a_damaged_page_is_reported_when_read() {
    let (disk, expected) = populated();
    let page = expected[100].0.page().unwrap();
    assert_ne!(page, PageId::FIRST);
    let other = expected[149].0.page().unwrap();
    assert_ne!(page, other);
    let ps = small_opts().page_size;
    // Without a copy in the double-write buffer (later flushes overwrite it) nothing can
    // repair the page: it must be reported.
    disk.edit_file("dwb", Vec::clear).unwrap();
    disk.edit_file("pages", |b| b[page.index() * ps + 700] ^= 0x01).unwrap();
    let e = Engine::open(arc(disk.clone()), opts()).unwrap();
    match e.fetch(page) {
        Err(EngineError::CorruptPage { page: p, .. }) => assert_eq!(p, page),
        Err(other) => panic!("expected a corrupt page error, got {other}"),
        Ok(_) => panic!("a damaged page was served"),
    }
    // Other pages still serve.
    assert!(e.fetch(other).is_ok());
    if let Err(err) = e.fetch(PageId::FIRST) {
        panic!("{err}")
    }
}

#[test]
fn a_truncated_page_file_is_reported() {
    let (disk, expected) = populated();
    let ps = small_opts().page_size;
    let last_installed = expected[..150].iter().map(|(o, _)| o.page().unwrap()).max().unwrap();
    disk.edit_file("dwb", Vec::clear).unwrap();
    disk.edit_file("pages", |b| b.truncate(last_installed.index() * ps + 100)).unwrap();
    let r = open_and_read(&disk, &expected);
    assert!(matches!(r, Err(EngineError::CorruptPage { .. } | EngineError::Storage(_))), "{r:?}");
}

fn log_segments(disk: &MemDisk) -> Vec<String> {
    disk.list().unwrap().into_iter().filter(|n| n.starts_with("log.")).collect()
}

#[test]
fn a_torn_page_is_repaired_from_the_double_write_buffer() {
    let (disk, expected) = populated();
    let page = expected[149].0.page().unwrap();
    let ps = small_opts().page_size;
    disk.edit_file("pages", |b| b[page.index() * ps + 2000..(page.index() + 1) * ps].fill(0))
        .unwrap();
    assert!(open_and_read(&disk, &expected).unwrap());
}

#[test]
fn a_damaged_newest_log_record_is_cut_as_a_torn_tail() {
    let (disk, expected) = populated();
    let newest = log_segments(&disk).pop().unwrap();
    let len = disk.file_bytes(&newest).unwrap().len();
    // Damage the last record: recovery cuts it and everything after it, nothing else.
    disk.edit_file(&newest, |b| b[len - 3] ^= 0x40).unwrap();
    let complete = open_and_read(&disk, &expected).unwrap();
    assert!(!complete, "the cut record's objects are gone");
    // The objects installed before the log was truncated are all intact.
    assert!(open_and_read(&disk, &expected[..150]).unwrap());
}

#[test]
fn a_damaged_older_log_segment_is_an_error() {
    let (disk, expected) = populated();
    let segs = log_segments(&disk);
    assert!(segs.len() >= 2, "the workload spans several segments: {segs:?}");
    disk.edit_file(&segs[0], |b| {
        let at = b.len() / 2;
        b[at] ^= 0x01;
    })
    .unwrap();
    let err = open_and_read(&disk, &expected).unwrap_err();
    assert!(matches!(err, EngineError::Storage(ref s) if s.is_corruption()), "{err}");
}

#[test]
fn random_bit_flips_anywhere_never_panic_or_return_wrong_bytes() {
    let (clean, expected) = populated();
    let files = clean.list().unwrap();
    let mut seed = 0x1234_5678_u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    for _ in 0..300 {
        let disk = MemDisk::new();
        for f in &files {
            let bytes = clean.file_bytes(f).unwrap();
            let h = disk.open(f, true).unwrap();
            h.write_at(0, &bytes).unwrap();
            h.sync().unwrap();
        }
        disk.sync_dir().unwrap();
        let f = &files[next() as usize % files.len()];
        let len = disk.file_bytes(f).unwrap().len();
        if len == 0 {
            continue;
        }
        let flips = 1 + next() % 4;
        disk.edit_file(f, |b| {
            for _ in 0..flips {
                let at = next() as usize % len;
                b[at] ^= 1 << (next() % 8);
            }
        })
        .unwrap();
        // Any outcome but a panic or wrong bytes (checked inside) is acceptable.
        let _ = open_and_read(&disk, &expected);
    }
}
