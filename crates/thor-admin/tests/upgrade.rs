//! `thor_admin::upgrade` on databases made with the engine directly, one behaviour per test:
//! it reads the committed state of a database that crashed (the log replayed in memory, the
//! source's files untouched, a torn tail included) and refuses damaged sources with an error,
//! never a panic.

// The engine fixtures thor-server's tests use (items, classes, tags), shared, not copied.
#[path = "../../thor-server/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{fields, item, item_class, tag};
use thor_admin::{UpgradeError, upgrade};
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, VarKind, builtin, page};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::{FileDisk, SplitMix64};

const PAGE_SIZE: usize = 4096;
/// Items in the chain (several 4 KiB pages of them).
const ITEMS: u32 = 300;

/// `test.Item` with a reference and a `u32` appended.
fn item_v2() -> ClassDesc {
    ClassDesc::new("test.Item", 20, &[0, 3], VarKind::Bytes).unwrap()
}

fn payload(i: u32) -> Vec<u8> {
    vec![i as u8; (i % 13) as usize]
}

fn open(dir: &Path) -> Engine {
    let disk = Arc::new(FileDisk::open_locked(dir, true, "upgrade test").unwrap());
    let opts =
        EngineOptions { page_size: PAGE_SIZE, background_flusher: false, ..Default::default() };
    match Engine::open(disk.clone(), opts.clone()) {
        Ok(e) => e,
        Err(thor_server::EngineError::NotADatabase) => Engine::create(disk, opts).unwrap(),
        Err(e) => panic!("{e}"),
    }
}

fn read(e: &Engine, oref: Oref) -> Vec<u8> {
    let page = e.fetch(oref.page().unwrap()).unwrap();
    PageView::parse(&page).unwrap().object(oref.oid()).unwrap().to_vec()
}

/// A database in `dir`: the item class, a chain of `ITEMS` items from root slot 0, then
/// `updates` commits that each set the first item's `seq`, and a chain of 40 items nothing
/// refers to. Returns the engine, still open.
fn chain_db(dir: &Path, updates: u32) -> Engine {
    let e = open(dir);
    let mut created = vec![item_class().to_class_object()];
    for i in 0..ITEMS {
        let next = if i + 1 < ITEMS { tag(i + 2) } else { 0 };
        created.push(item(tag(0), next, 7, i, &payload(i)));
    }
    let mut root = read(&e, builtin::ROOT);
    put_u32(&mut root, 8, tag(1));
    let out = e.commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created }).unwrap();
    let (class, first) = (out.created[0], out.created[1]);
    for k in 0..updates {
        let mut o = read(&e, first);
        put_u32(&mut o, 12, 1000 + k);
        e.commit(CommitRequest { versions: vec![(first, o)], created: vec![] }).unwrap();
    }
    let garbage = (0..40).map(|i| item(class.raw(), 0, 0, i, b"garbage")).collect();
    e.commit(CommitRequest { versions: vec![], created: garbage }).unwrap();
    e
}

/// Follows the chain from root slot 0 in the database in `dir` (opened with the engine) and
/// checks every item against `chain_db`; `v2`: the items have `item_v2`'s layout.
fn check_chain(dir: &Path, updates: u32, v2: bool) {
    let e = open(dir);
    let root = read(&e, builtin::ROOT);
    let mut at = Oref::from_raw(u32_at(&root, 8)).unwrap();
    let class = if v2 { item_v2() } else { item_class() };
    for i in 0..ITEMS {
        let o = read(&e, at);
        let desc = ClassDesc::from_class_object(&read(&e, Oref::from_raw(u32_at(&o, 0)).unwrap()))
            .unwrap();
        assert_eq!(desc, class);
        assert_eq!(class.check_shape(&o), Ok(payload(i).len()));
        let (next, owner, seq) = fields(&o);
        assert_eq!(owner, 7);
        let want_seq = if i == 0 && updates > 0 { 1000 + updates - 1 } else { i };
        assert_eq!(seq, want_seq, "item {i}");
        assert_eq!(&o[class.var_offset()..class.var_offset() + payload(i).len()], payload(i));
        if v2 {
            assert_eq!((u32_at(&o, 16), u32_at(&o, 20)), (0, 0), "appended fields are zero");
        }
        if i + 1 < ITEMS {
            at = Oref::from_raw(next).unwrap();
        } else {
            assert_eq!(next, 0);
        }
    }
    e.close().unwrap();
}

/// Every file of a directory but `LOCK`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    (tmp, src, dst)
}

#[test]
fn upgrade_reads_what_a_crashed_database_committed() {
    let (_tmp, src, dst) = dirs();
    // `halt` stops as a crash would: nothing installed, every commit only in the log.
    chain_db(&src, 3).halt();
    let before = snapshot(&src);
    let report = upgrade(&src, &dst, &[item_v2()]).unwrap();
    assert_eq!(snapshot(&src), before, "the source's files, log included, are untouched");
    assert_eq!(report.classes[0].instances, u64::from(ITEMS));
    assert_eq!(report.dropped, 40);
    check_chain(&dst, 3, true);
    // The new database holds everything in its page file: it opens replaying nothing.
    let log: u64 = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("log."))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(log <= 24, "at most an empty segment's header: {log} bytes");
    // The source still recovers by itself, as before.
    check_chain(&src, 3, false);
}

#[test]
fn a_torn_log_tail_is_cut_in_memory_only() {
    let (_tmp, src, dst) = dirs();
    chain_db(&src, 2).halt();
    // Half a record at the end of the newest segment: what a crash during its write leaves.
    let seg = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("log."))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0x5a; 13]);
    std::fs::write(&seg, &bytes).unwrap();
    let before = snapshot(&src);
    upgrade(&src, &dst, &[]).unwrap();
    assert_eq!(snapshot(&src), before, "the torn tail is still there, and no .torn file");
    check_chain(&dst, 2, false);
}

/// Writes `value` at byte `at` of object `oref` in the page file of the closed database in
/// `dir`, resealing the page (as a buggy writer would: the checksum passes).
fn poke(dir: &Path, oref: Oref, at: usize, value: u32) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(dir.join("pages")).unwrap();
    let off = u64::from(oref.page_raw()) * PAGE_SIZE as u64;
    let mut pg = vec![0u8; PAGE_SIZE];
    f.read_exact_at(&mut pg, off).unwrap();
    let range = PageView::parse(&pg).unwrap().object_range(oref.oid()).unwrap();
    put_u32(&mut pg, range.start + at, value);
    page::seal(&mut pg);
    f.write_all_at(&pg, off).unwrap();
}

/// The orefs and sizes of every object of the closed database in `dir`.
fn objects(dir: &Path) -> Vec<(Oref, usize)> {
    let e = open(dir);
    let mut out = Vec::new();
    for p in 1..=e.stats().pages_allocated {
        let id = PageId::new(p).unwrap();
        let bytes = e.fetch(id).unwrap();
        for (oid, o) in PageView::parse(&bytes).unwrap().objects() {
            out.push((Oref::new(id, oid), o.len()));
        }
    }
    e.close().unwrap();
    out
}

/// A copy of the closed database in `from`, in a new directory `to`.
fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for (name, bytes) in snapshot(from) {
        std::fs::write(to.join(name), bytes).unwrap();
    }
}

#[test]
fn a_dangling_reference_is_reported_not_followed() {
    let (tmp, healthy, _) = dirs();
    chain_db(&healthy, 0).close().unwrap();
    let e = open(&healthy);
    let first = Oref::from_raw(u32_at(&read(&e, builtin::ROOT), 8)).unwrap();
    e.close().unwrap();
    let oref = |page: u32, oid: u16| {
        Oref::new(PageId::new(page).unwrap(), thor_core::Oid::new(oid).unwrap()).raw()
    };
    // The first item's `next` (byte 4), then its class word (byte 0), names each in turn.
    let bad = [
        (oref(9999, 0), "outside pages 1 to the last page"),
        (2, "outside pages 1 to the last page"), // oid 1 of page 0
        (oref(2, 500), "which does not exist"),
        (0x31, "not a stored reference"), // a tagged word
    ];
    for (k, (word, why)) in bad.into_iter().enumerate() {
        for at in [4, 0] {
            let src = tmp.path().join(format!("src{k}-{at}"));
            copy_db(&healthy, &src);
            poke(&src, first, at, word);
            let before = snapshot(&src);
            let dst = tmp.path().join(format!("dst{k}-{at}"));
            let err = upgrade(&src, &dst, &[]).unwrap_err();
            let UpgradeError::Corrupt { why: got, .. } = &err else { panic!("{word:#x}: {err}") };
            // A bad class word is a bad class: the message names the class check.
            assert!(got.contains(why) || at == 0, "{word:#x} at {at}: {err}");
            assert!(err.to_string().contains("thor check"), "{err}");
            assert!(!dst.exists());
            assert_eq!(snapshot(&src), before);
        }
    }
}

#[test]
fn damaged_objects_give_errors_never_panics() {
    let (tmp, healthy, _) = dirs();
    chain_db(&healthy, 1).close().unwrap();
    let all = objects(&healthy);
    let mut corrupt = 0;
    for seed in 0..60u64 {
        let mut rng = SplitMix64::new(seed);
        let src = tmp.path().join(format!("src{seed}"));
        copy_db(&healthy, &src);
        // A word of a random object (class words included) becomes a random value, or one of
        // the values that trip each check.
        let (oref, len) = all[rng.next_u64() as usize % all.len()];
        let at = 4 * (rng.next_u64() as usize % (len / 4));
        let value = match rng.next_u64() % 6 {
            0 => rng.next_u64() as u32,
            1 => rng.next_u64() as u32 | 1,
            2 => Oref::new(PageId::new(3).unwrap(), thor_core::Oid::new(500).unwrap()).raw(),
            3 => builtin::ROOT.raw(),
            // Oid 1 of page 0, which does not exist (only the null word names page 0).
            4 => 2,
            _ => 0,
        };
        poke(&src, oref, at, value);
        let dst = tmp.path().join(format!("dst{seed}"));
        match upgrade(&src, &dst, &[item_v2()]) {
            Ok(_) => {
                // The damage was to a scalar, or to an unreachable object: the result opens.
                open(&dst).close().unwrap();
            }
            Err(UpgradeError::Corrupt { .. } | UpgradeError::Source { .. }) => {
                corrupt += 1;
                assert!(!dst.exists());
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(corrupt > 10, "most damage is found: {corrupt} of 60");
}

#[test]
fn an_empty_database_compacts_to_an_empty_one() {
    let (_tmp, src, dst) = dirs();
    open(&src).close().unwrap();
    let report = upgrade(&src, &dst, &[]).unwrap();
    assert_eq!((report.source_objects, report.objects, report.dropped), (6, 6, 0));
    assert_eq!(report.pages, 1);
    let e = open(&dst);
    assert_eq!(e.stats().pages_allocated, 1);
    assert_eq!(read(&e, builtin::ROOT), read(&open(&src), builtin::ROOT));
}

#[test]
fn a_destination_inside_the_source_is_refused() {
    let (_tmp, src, _) = dirs();
    chain_db(&src, 0).close().unwrap();
    let before = snapshot(&src);
    for dst in [src.join("new"), src.join("a").join("b")] {
        let err = upgrade(&src, &dst, &[]).unwrap_err();
        assert!(matches!(err, UpgradeError::DestinationInSource { .. }), "{err}");
    }
    assert_eq!(snapshot(&src), before);
}
