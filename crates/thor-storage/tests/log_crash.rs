//! Crash and concurrency tests of the log.
//!
//! Threads append and wait for durability while the disk crashes at a random point, dies, or
//! fails one write or fsync (poisoning the log), with or without a thread truncating the log
//! under them. After the crash the log is reopened and checked:
//!
//! - every record whose `wait_durable` returned `Ok` is present, intact, in order;
//! - every record present is exactly one that was appended with that LSN (no partially
//!   visible or invented record), and LSNs are contiguous;
//! - the recovered log keeps working and survives a clean reopen unchanged.
//!
//! Each case is one seed; a failure message names it, and the seed fixes the crash outcome
//! (thread interleaving is up to the scheduler, so the workload itself is not replayed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use thor_core::ids::Lsn;
use thor_storage::{
    DiskCounters, FaultDisk, FaultPlan, FileDisk, Log, LogOptions, MemDisk, SplitMix64,
};

const THREADS: u64 = 4;
const RECORDS_PER_THREAD: u64 = 50;
const SEEDS: u64 = 200;

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 512,
        buffer_bytes_max: 1024,
        record_bytes_max: 256,
        ..LogOptions::default()
    }
}

fn payload(thread: u64, i: u64) -> Vec<u8> {
    format!("[t{thread} r{i}]").repeat(1 + (i % 4) as usize).into_bytes()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Power fails at a random moment while the threads run.
    Crash,
    /// The disk dies at a random moment; the threads fail; then power fails.
    Die,
    /// One random write fails (the log poisons itself); then power fails.
    FailWrite,
    /// One random fsync fails (the log poisons itself); then power fails.
    FailSync,
}

/// What the workload did, as far as the threads know.
#[derive(Default)]
struct Workload {
    /// Every record appended: LSN -> payload.
    appended: Mutex<HashMap<u64, Vec<u8>>>,
    /// The highest LSN whose `wait_durable` returned `Ok`.
    acked: AtomicU64,
    /// The highest `truncate_before` point requested.
    floor: AtomicU64,
    /// Set when the writers are done, to stop the truncator.
    done: AtomicBool,
}

/// Runs the writers (and optionally a truncator) against `log` until they finish or fail;
/// `during` runs on this thread meanwhile (to crash or kill the disk).
fn workload(
    log: &Arc<Log>,
    seed: u64,
    truncate: bool,
    during: impl FnOnce(&[thread::JoinHandle<()>]),
) -> Arc<Workload> {
    let w = Arc::new(Workload::default());
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (log, w) = (log.clone(), w.clone());
        handles.push(thread::spawn(move || {
            let mut rng = SplitMix64::new(seed.wrapping_mul(1000).wrapping_add(t));
            for i in 0..RECORDS_PER_THREAD {
                let p = payload(t, i);
                let Ok(lsn) = log.append(&p) else { return };
                w.appended.lock().unwrap().insert(lsn.0, p);
                if rng.below(3) != 0 {
                    if log.wait_durable(lsn).is_err() {
                        return;
                    }
                    w.acked.fetch_max(lsn.0, Ordering::SeqCst);
                }
            }
            let _ = log.flush().map(|()| w.acked.fetch_max(log.durable_lsn().0, Ordering::SeqCst));
        }));
    }
    let truncator = truncate.then(|| {
        let (log, w) = (log.clone(), w.clone());
        thread::spawn(move || {
            while !w.done.load(Ordering::SeqCst) {
                let t = log.durable_lsn().0.saturating_sub(10);
                // Record the request before making it: recovery may only lose records below it.
                w.floor.fetch_max(t, Ordering::SeqCst);
                if log.truncate_before(Lsn(t)).is_err() {
                    return;
                }
                thread::yield_now();
            }
        })
    });
    during(&handles);
    for h in handles {
        h.join().unwrap();
    }
    w.done.store(true, Ordering::SeqCst);
    if let Some(h) = truncator {
        h.join().unwrap();
    }
    w
}

/// Disk operations of a fault-free run, to place faults inside the workload.
fn calibration() -> DiskCounters {
    static C: OnceLock<DiskCounters> = OnceLock::new();
    *C.get_or_init(|| {
        let disk = FaultDisk::new();
        let (log, _) = Log::open(Arc::new(disk.clone()), opts()).unwrap();
        workload(&Arc::new(log), 0, true, |_| {});
        disk.counters()
    })
}

fn wait_for_ops(disk: &FaultDisk, ops: u64, handles: &[thread::JoinHandle<()>]) {
    while disk.counters().ops < ops && !handles.iter().all(|h| h.is_finished()) {
        thread::yield_now();
    }
}

fn crash_case(seed: u64, fault: Fault, truncate: bool) {
    let ctx = format!("seed {seed}, {fault:?}, truncate {truncate}");
    let disk = FaultDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), opts()).unwrap();
    let log = Arc::new(log);
    let cal = calibration();
    let mut rng = SplitMix64::new(seed);
    match fault {
        Fault::FailWrite => disk.set_plan(FaultPlan {
            fail_write_at: Some(1 + disk.counters().writes + rng.below(cal.writes)),
            ..FaultPlan::default()
        }),
        Fault::FailSync => disk.set_plan(FaultPlan {
            fail_sync_at: Some(1 + disk.counters().syncs + rng.below(cal.syncs)),
            ..FaultPlan::default()
        }),
        Fault::Crash | Fault::Die => {}
    }
    let point = rng.below(cal.ops + 1);
    let w = workload(&log, seed, truncate, |handles| match fault {
        Fault::Crash => {
            wait_for_ops(&disk, point, handles);
            disk.crash(seed);
        }
        Fault::Die => {
            wait_for_ops(&disk, point, handles);
            disk.die();
        }
        Fault::FailWrite | Fault::FailSync => {}
    });
    if fault != Fault::Crash {
        disk.crash(seed);
    }
    drop(log);

    let (log, rec) =
        Log::open(Arc::new(disk.clone()), opts()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let appended = w.appended.lock().unwrap();
    let acked = w.acked.load(Ordering::SeqCst);
    let floor = w.floor.load(Ordering::SeqCst).max(1);
    let end = rec.next_lsn.0 - 1;
    assert!(end >= acked, "{ctx}: acknowledged LSN {acked} lost (log ends at {end})");
    if let Some((first, _)) = rec.records.first() {
        assert!(
            first.0 <= floor,
            "{ctx}: records from {} on survive, but only below {floor} were truncated",
            first.0
        );
        assert_eq!(rec.records.last().unwrap().0.0, end, "{ctx}");
    }
    for (k, (lsn, bytes)) in rec.records.iter().enumerate() {
        assert_eq!(lsn.0, rec.records[0].0.0 + k as u64, "{ctx}: LSNs not contiguous");
        assert_eq!(
            appended.get(&lsn.0),
            Some(bytes),
            "{ctx}: record {lsn} is not what was appended"
        );
    }

    // The recovered log works, and a clean reopen sees exactly the same plus the new records.
    for i in 0..3 {
        log.append(format!("after {i}").as_bytes()).unwrap();
    }
    log.flush().unwrap();
    drop(log);
    let (_, again) = Log::open(Arc::new(disk.clone()), opts()).unwrap();
    assert_eq!(again.torn_bytes_cut, 0, "{ctx}");
    assert_eq!(again.next_lsn, Lsn(rec.next_lsn.0 + 3), "{ctx}");
    let old: Vec<_> = again.records.iter().filter(|r| r.0 < rec.next_lsn).cloned().collect();
    let kept: Vec<_> =
        rec.records.iter().filter(|r| old.first().is_some_and(|o| r.0 >= o.0)).cloned().collect();
    assert_eq!(old, kept, "{ctx}");
}

#[test]
fn acknowledged_records_survive_a_crash_at_any_point() {
    for seed in 0..SEEDS {
        crash_case(seed, Fault::Crash, seed % 2 == 0);
    }
}

#[test]
fn acknowledged_records_survive_the_disk_dying() {
    for seed in 0..SEEDS {
        crash_case(seed, Fault::Die, seed % 2 == 1);
    }
}

#[test]
fn a_failed_write_poisons_and_recovery_is_exact() {
    for seed in 0..SEEDS {
        crash_case(seed, Fault::FailWrite, seed % 2 == 0);
    }
}

#[test]
fn a_failed_fsync_poisons_and_recovery_is_exact() {
    for seed in 0..SEEDS {
        crash_case(seed, Fault::FailSync, seed % 2 == 1);
    }
}

/// 16 threads each commit 1000 records through `wait_durable`: all are durable, each thread's
/// records are in its order, and fsyncs are shared (group commit).
#[test]
fn sixteen_committers_share_fsyncs() {
    const N: u64 = 16;
    const EACH: u64 = 1000;
    let disk = MemDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), LogOptions::default()).unwrap();
    let log = Arc::new(log);
    let handles: Vec<_> = (0..N)
        .map(|t| {
            let log = log.clone();
            thread::spawn(move || {
                for i in 0..EACH {
                    let lsn = log.append(&payload(t, i)).unwrap();
                    log.wait_durable(lsn).unwrap();
                    assert!(log.durable_lsn() >= lsn);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = log.stats();
    assert_eq!(s.records_appended, N * EACH);
    assert_eq!(s.records_synced, N * EACH);
    assert_eq!(s.durable_waits, N * EACH);
    assert!(s.flushes < N * EACH, "group commit never batched: {s:?}");
    assert!(s.records_per_fsync_max > 1, "{s:?}");
    // A 16 MiB buffer never fills with 16 small records: nobody waited for the disk to append.
    assert_eq!(s.appends_blocked, 0, "{s:?}");
    drop(log);

    let (_, rec) = Log::open(Arc::new(disk), LogOptions::default()).unwrap();
    assert_eq!(rec.records.len() as u64, N * EACH);
    let mut next = vec![0u64; N as usize];
    for (_, bytes) in &rec.records {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let (t, i) = text[2..text.find(']').unwrap()].split_once(" r").unwrap();
        let (t, i): (usize, u64) = (t.parse().unwrap(), i.parse().unwrap());
        assert_eq!(i, next[t], "thread {t}'s records out of order");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == EACH));
}

/// The same on real files, with real fsyncs (fewer records: fsyncs are slow).
#[test]
fn committers_share_fsyncs_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FileDisk::open_dir(dir.path(), false).unwrap());
    let (log, _) = Log::open(disk.clone(), LogOptions::default()).unwrap();
    let log = Arc::new(log);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            thread::spawn(move || {
                for i in 0..25 {
                    let lsn = log.append(&payload(t, i)).unwrap();
                    log.wait_durable(lsn).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(log.stats().records_synced, 100);
    drop(log);
    let (_, rec) = Log::open(disk, LogOptions::default()).unwrap();
    assert_eq!(rec.records.len(), 100);
}
