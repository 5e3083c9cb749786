//! Memory bounded by settings, not by history: after a crash that left tens of megabytes of
//! log behind, opening replays it within the MOB's byte budget, installing pages as it goes,
//! and a clean shutdown leaves nothing to replay. A counting global allocator records the peak
//! of live heap bytes during the open. (One test in this binary, so that nothing else
//! allocates meanwhile; the disk is a real directory so that written pages do not count as
//! heap, as they would with `MemDisk`.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::{Disk, FileDisk};

/// Live heap bytes.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most live heap bytes since the last [`reset_peak`].
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting.
struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are only
// bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc` above, i.e. by `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn reset_peak() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

fn peak_above(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

fn log_bytes(disk: &FileDisk) -> u64 {
    disk.list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("log.") && !n.ends_with(".torn"))
        .map(|n| disk.open(&n, false).unwrap().len().unwrap())
        .sum()
}

fn opts(mob_bytes: usize) -> EngineOptions {
    EngineOptions {
        mob_bytes,
        page_cache_bytes: 1 << 20,
        background_flusher: false,
        ..EngineOptions::default()
    }
}

#[test]
fn recovery_replays_a_large_log_within_the_mob_budget() {
    const COMMITS: u32 = 40;
    const ITEMS: u32 = 800;
    const PAYLOAD: usize = 1000;
    const MOB: usize = 2 << 20;
    let dir = tempfile::tempdir().unwrap();
    let disk = FileDisk::open_dir(dir.path(), true).unwrap();

    // A MOB large enough that nothing is installed before the crash: the whole history is in
    // the log.
    let e = Engine::create(arc(disk.clone()), opts(1 << 30)).unwrap();
    let class = install_class(&e);
    let mut last = Vec::new();
    for c in 0..COMMITS {
        let created = (0..ITEMS).map(|i| item(class.raw(), 0, c, i, &[c as u8; PAYLOAD])).collect();
        last = e.commit(CommitRequest { versions: vec![], created }).unwrap().created;
    }
    e.halt();
    let log = log_bytes(&disk);
    assert!(log > 30 << 20, "the crash left a large log: {log} bytes");

    let base = reset_peak();
    let e = Engine::open(arc(disk.clone()), opts(MOB)).unwrap();
    let peak = peak_above(base);
    eprintln!("open after a crash: log {log} bytes, heap peak {peak} bytes above base");
    let s = e.stats();
    assert!(s.mob_bytes <= MOB, "the MOB is within its budget after the open: {s:?}");
    assert!(s.pages_written > 0, "replay installed pages as it went");
    // The budget: the MOB, the page cache, the log's read chunk and its largest record (one
    // commit, about 0.8 MB), the records the MOB shares, plus a few megabytes for indexes and
    // install batches. Far below the log, which is what an open that held the log would need.
    let bound = MOB + (1 << 20) + 2 * (1 << 20) + 8 * (1 << 20);
    assert!(peak < bound, "open peaked at {peak} heap bytes above base; bound {bound}, log {log}");
    assert!(peak < log as usize / 2, "open peaked at {peak} heap bytes, log is {log}");
    for (i, o) in last.iter().enumerate().step_by(97) {
        assert_eq!(fields(&read(&e, *o).unwrap()), (0, COMMITS - 1, i as u32));
    }

    // A clean shutdown installs everything and truncates the log: nothing is left to replay.
    e.close().unwrap();
    let after = log_bytes(&disk);
    assert!(after < 64 * 1024, "a clean shutdown truncated the log to {after} bytes");
}
