//! The log's memory bounds, measured: a counting global allocator records the peak of live
//! heap bytes while `Log::open_streaming` recovers a log of tens of megabytes, and while a
//! reader streams it. (One test in this binary, so that nothing else allocates meanwhile.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use thor_core::ids::Lsn;
use thor_storage::{Log, LogOptions, MemDisk};

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

/// Starts a new peak measurement; returns the live bytes now.
fn reset_peak() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// How far the live bytes rose above `base` since [`reset_peak`].
fn peak_above(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

#[test]
fn open_and_reading_stay_within_the_read_chunk_and_the_largest_record() {
    const CHUNK: usize = 64 * 1024;
    const RECORD: usize = 300 * 1024;
    const RECORDS: u64 = 80;
    let opts = LogOptions {
        segment_bytes: 4 << 20,
        record_bytes_max: 1 << 20,
        read_chunk_bytes: CHUNK,
        ..LogOptions::default()
    };
    let disk = MemDisk::new();
    {
        let (log, _) = Log::open(Arc::new(disk.clone()), opts.clone()).unwrap();
        let payload = vec![0x5Au8; RECORD];
        for _ in 0..RECORDS {
            log.append(&payload).unwrap();
            log.flush().unwrap();
        }
    }
    let total = RECORD * RECORDS as usize;
    // Slack for names, handles and the log's own small structures.
    let slack = 64 * 1024;

    let base = reset_peak();
    let (log, report) = Log::open_streaming(Arc::new(disk.clone()), opts.clone()).unwrap();
    let open_peak = peak_above(base);
    assert_eq!(report.next_lsn, Lsn(RECORDS + 1));
    assert!(open_peak <= 2 * CHUNK + slack, "open_streaming held {open_peak} bytes");

    let base = reset_peak();
    let mut reader = log.reader(Lsn(1)).unwrap();
    let mut n = 0;
    while let Some((_, p)) = reader.next().unwrap() {
        assert_eq!(p.len(), RECORD);
        n += 1;
    }
    drop(reader);
    let read_peak = peak_above(base);
    assert_eq!(n, RECORDS);
    assert!(read_peak <= CHUNK + RECORD + slack, "the reader held {read_peak} bytes");
    drop(log);

    // The convenience open holds the whole log: the measurement sees it.
    let base = reset_peak();
    let (_, rec) = Log::open(Arc::new(disk), opts).unwrap();
    assert_eq!(rec.records.len() as u64, RECORDS);
    assert!(peak_above(base) >= total, "Log::open held only {} bytes", peak_above(base));
}
