//! Backups of a live engine: taken while writer threads commit and install rounds run, a backup
//! opens as a database and holds exactly a committed prefix.
//!
//! Each writer's commit `i` sets all of its counter objects to seq `i` and creates one item with
//! seq `i` (chained to its previous item). A state is a committed prefix for a writer if its
//! counters agree on one `k` and its items have exactly the seqs `1..=k`; for the backup, `k`
//! must be at least the writer's acknowledged commits when the backup was asked for and at most
//! one more than when it returned (the commit in flight then may be durable, and so in the
//! backup, before its acknowledgement reaches the writer), and the backup's LSN must be what
//! its state says.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};

use common::*;
use thor_core::le::u32_at;
use thor_core::{Oref, builtin};
use thor_server::{CommitRequest, Engine, EngineError, EngineOptions};
use thor_storage::{FileDisk, MemDisk};

const WRITERS: u32 = 3;
const COUNTERS_EACH: usize = 4;
/// Owners at or above this mark counters (owner = COUNTER + writer); below, items (owner =
/// writer).
const COUNTER: u32 = 1000;

/// Threaded options with a small MOB and short log segments, so that install rounds,
/// checkpoints and log truncation all run while the backup copies.
fn live_opts() -> EngineOptions {
    let mut o = small_opts();
    o.background_flusher = true;
    o.mob_bytes = 32 * 1024;
    o.log.segment_bytes = 16 * 1024;
    o
}

/// Each writer's counters agree on `k` and its items are exactly `1..=k`: returns `k` by writer.
fn prefix_of(engine: &Engine) -> BTreeMap<u32, u32> {
    let mut counters: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut items: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (oref, o) in scan(engine) {
        if builtin::is_builtin(oref) || u32_at(&o, 0) == builtin::META.raw() {
            continue;
        }
        let (_, owner, seq) = fields(&o);
        if owner >= COUNTER {
            counters.entry(owner - COUNTER).or_default().push(seq);
        } else {
            items.entry(owner).or_default().push(seq);
        }
    }
    let mut out = BTreeMap::new();
    for (w, cs) in counters {
        assert_eq!(cs.len(), COUNTERS_EACH, "writer {w}'s counters");
        let k = cs[0];
        assert!(cs.iter().all(|&s| s == k), "writer {w}'s counters disagree: {cs:?}");
        let mut seqs = items.remove(&w).unwrap_or_default();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=k).collect::<Vec<_>>(), "writer {w}'s items");
        out.insert(w, k);
    }
    assert!(items.is_empty(), "items of writers without counters: {items:?}");
    out
}

/// Writer `w`'s counters, created in one commit.
fn setup(engine: &Engine, class: Oref, w: u32) -> Vec<Oref> {
    let created =
        (0..COUNTERS_EACH).map(|_| item(class.raw(), 0, COUNTER + w, 0, &[0; 8])).collect();
    engine.commit(CommitRequest { versions: vec![], created }).unwrap().created
}

/// Commits until `stop`, counting acknowledged commits in `acked`.
fn write(
    engine: &Engine,
    class: Oref,
    w: u32,
    counters: &[Oref],
    acked: &AtomicU32,
    stop: &AtomicBool,
) {
    let mut last = 0;
    while !stop.load(SeqCst) {
        let seq = acked.load(SeqCst) + 1;
        let versions = counters
            .iter()
            .map(|o| (*o, item(class.raw(), 0, COUNTER + w, seq, &[seq as u8; 8])))
            .collect();
        let created = vec![item(class.raw(), last, w, seq, &[seq as u8; 64])];
        let out = engine.commit(CommitRequest { versions, created }).unwrap();
        last = out.created[0].raw();
        acked.store(seq, SeqCst);
    }
}

/// Starts the writers on `engine`, lets them commit, takes a backup with `take` in the middle
/// of their load, and checks what it holds once opened with `open`.
fn backup_under_load(
    engine: Arc<Engine>,
    take: impl FnOnce(&Engine) -> thor_wire::BackupInfo,
    open: impl FnOnce() -> Engine,
) {
    let class = install_class(&engine);
    let acked: Arc<Vec<AtomicU32>> = Arc::new((0..WRITERS).map(|_| AtomicU32::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (engine, acked, stop) = (engine.clone(), acked.clone(), stop.clone());
            let counters = setup(&engine, class, w);
            std::thread::spawn(move || {
                write(&engine, class, w, &counters, &acked[w as usize], &stop)
            })
        })
        .collect();
    // Some load first, so that rounds have installed and the log has rotated.
    while acked.iter().map(|a| a.load(SeqCst)).min() < Some(50) {
        std::thread::yield_now();
    }
    assert!(engine.stats().pages_written > 0, "install rounds ran before the backup");
    let before: Vec<u32> = acked.iter().map(|a| a.load(SeqCst)).collect();
    let info = take(&engine);
    let after: Vec<u32> = acked.iter().map(|a| a.load(SeqCst)).collect();
    // The writers go on after the backup returned: installs and checkpoints resume.
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    assert!(info.page_bytes > 0 && info.log_bytes > 0, "{info:?}");

    let copy = open();
    let held = prefix_of(&copy);
    assert_eq!(held.len(), WRITERS as usize, "every writer's counters are in the backup");
    for (w, k) in &held {
        // Each writer has at most one commit in flight: it may be durable (and so in the
        // backup) before its acknowledgement reaches the writer.
        let (b, a) = (before[*w as usize], after[*w as usize]);
        assert!(
            b <= *k && *k <= a + 1,
            "writer {w}: backup holds {k}, acknowledged {b} before, {a} after"
        );
    }
    // The LSN names the prefix: the class, the writers' setups and every held commit.
    let commits: u64 = held.values().map(|&k| u64::from(k)).sum();
    assert_eq!(info.lsn.0, 1 + u64::from(WRITERS) + commits, "{info:?}, {held:?}");
    // The live engine is whole too, and holds at least what the backup does.
    let live = prefix_of(&engine);
    assert!(held.iter().all(|(w, k)| live[w] >= *k));
    // The copy is a working database.
    let more = setup(&copy, class, WRITERS);
    assert_eq!(more.len(), COUNTERS_EACH);
}

#[test]
fn a_backup_under_commit_load_holds_exactly_a_committed_prefix() {
    let engine = Arc::new(Engine::create(arc(MemDisk::new()), live_opts()).unwrap());
    let dest = MemDisk::new();
    let d = dest.clone();
    backup_under_load(
        engine,
        |e| e.backup_into(&d).unwrap(),
        || Engine::open(arc(dest), live_opts()).unwrap(),
    );
}

#[test]
fn a_backup_to_a_directory_opens_as_a_database() {
    let tmp = tempfile::tempdir().unwrap();
    let src = FileDisk::open_dir(tmp.path().join("db"), true).unwrap();
    let engine = Arc::new(Engine::create(arc(src), live_opts()).unwrap());
    let to = tmp.path().join("backup");
    let t = to.clone();
    backup_under_load(
        engine,
        |e| e.backup(&t).unwrap(),
        || Engine::open(arc(FileDisk::open_dir(&to, false).unwrap()), live_opts()).unwrap(),
    );
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".partial")), "no partial copy left: {names:?}");
}

#[test]
fn a_backup_refuses_an_existing_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::create(arc(MemDisk::new()), small_opts()).unwrap();
    let taken = tmp.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    let err = engine.backup(&taken).unwrap_err();
    assert!(err.to_string().contains("it exists; give a new path"), "{err}");
    let err = engine.backup(&tmp.path().join("no/such/parent")).unwrap_err();
    assert!(err.to_string().contains("parent directory does not exist"), "{err}");
    // A disk that already holds a database.
    let other = MemDisk::new();
    drop(Engine::create(arc(other.clone()), small_opts()).unwrap());
    assert!(matches!(engine.backup_into(&other), Err(EngineError::AlreadyExists)));
}

#[test]
fn a_server_whose_install_round_failed_refuses_to_back_up() {
    // Unthreaded: the round runs inside `flush_round`, so the failure is known when it returns.
    let disk = thor_storage::FaultDisk::new();
    let engine = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&engine);
    setup(&engine, class, 0);
    // The next write is the round's: the double-write buffer or a page.
    let writes = disk.counters().writes;
    disk.set_plan(thor_storage::FaultPlan {
        fail_write_at: Some(writes + 1),
        ..Default::default()
    });
    assert!(engine.flush_round().is_err(), "the round failed");
    disk.set_plan(thor_storage::FaultPlan::default());
    let err = engine.backup_into(&MemDisk::new()).unwrap_err();
    assert!(matches!(err, EngineError::Failed(_)), "{err}");
}

#[test]
fn an_interrupted_backup_is_cleaned_up_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::create(arc(MemDisk::new()), small_opts()).unwrap();
    // What a backup killed half-way leaves: its hidden directory with part of a copy.
    let partial = tmp.path().join(".nightly.partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(partial.join("pages"), [7u8; 4096]).unwrap();
    std::fs::write(partial.join("log.0000000000000001"), [1u8; 100]).unwrap();
    std::fs::write(partial.join("LOCK"), b"pid 1\n").unwrap();
    let dest = tmp.path().join("nightly");
    engine.backup(&dest).unwrap();
    assert!(!partial.exists(), "the leftover was reclaimed and renamed into place");
    drop(Engine::open(arc(FileDisk::open_dir(&dest, false).unwrap()), small_opts()).unwrap());
    // A directory of that name holding something no backup writes is not ours: refused.
    let partial = tmp.path().join(".other.partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(partial.join("notes.txt"), b"mine").unwrap();
    let err = engine.backup(&tmp.path().join("other")).unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert!(partial.join("notes.txt").exists());
}
