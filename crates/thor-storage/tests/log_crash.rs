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
//!
//! [`crashes_never_lose_acknowledged_records_nor_look_like_corruption`] is the single-threaded
//! counterpart, where a seed replays everything: batches appended and flushed, the disk dying
//! after a random number of operations (in the middle of a flush, a rotation, or recovery
//! itself), a crash under MemDisk's full model (any subset of unsynced sectors, in any order)
//! at several sector sizes, and reopening, round after round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use thor_core::ids::Lsn;
use thor_storage::{
    DiskCounters, FaultDisk, FaultPlan, FileDisk, Log, LogOptions, MemDisk, SplitMix64,
    StorageError,
};

const THREADS: u64 = 4;
const RECORDS_PER_THREAD: u64 = 50;
const SEEDS: u64 = 200;
/// Seeds per sector size of the single-threaded crash property (each is a few milliseconds).
const CRASH_MODEL_SEEDS: u64 = 1000;

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

/// 16 threads each commit 1000 records through `wait_durable`: all are durable and each
/// thread's records are in its order. How many records an fsync carries depends on the
/// scheduler (on a loaded machine a leader may finish before anyone else runs), so it is not
/// asserted here; `a_flush_carries_every_record_appended_before_it` checks sharing exactly.
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
    assert!(s.flushes <= N * EACH, "{s:?}");
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

/// Group commit without depending on the scheduler: records appended by several threads
/// before anyone waits all go to disk in the first flush, and the other waiters join it.
#[test]
fn a_flush_carries_every_record_appended_before_it() {
    let disk = MemDisk::new();
    let (log, _) = Log::open(Arc::new(disk), LogOptions::default()).unwrap();
    let log = Arc::new(log);
    let lsns: Vec<Lsn> = (0..8)
        .map(|t| {
            let log = log.clone();
            thread::spawn(move || log.append(&payload(t, 0)).unwrap())
        })
        .map(|h| h.join().unwrap())
        .collect();
    let last = *lsns.iter().max().unwrap();
    log.wait_durable(last).unwrap();
    for lsn in &lsns {
        log.wait_durable(*lsn).unwrap();
    }
    let s = log.stats();
    assert_eq!((s.flushes, s.records_synced, s.records_per_fsync_max), (1, 8, 8), "{s:?}");
    assert_eq!((s.durable_waits, s.waits_joined), (9, 8), "{s:?}");
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

/// What the single-threaded crash property knows about the log.
struct History {
    /// The payload of every LSN assigned and not lost (index = LSN - 1).
    appended: Vec<Vec<u8>>,
    /// The highest LSN reported durable.
    acked: u64,
    /// The highest `truncate_before` point requested: records below may be gone.
    floor: u64,
}

impl History {
    /// Checks what a reopen returned and forgets the records it lost.
    fn recovered(&mut self, ctx: &str, records: &[(Lsn, Vec<u8>)], next: Lsn) {
        let end = next.0 - 1;
        assert!(
            end >= self.acked,
            "{ctx}: acknowledged LSN {} lost (log ends at {end})",
            self.acked
        );
        assert!(end <= self.appended.len() as u64, "{ctx}: LSN {end} was never appended");
        if let Some((first, _)) = records.first() {
            assert!(first.0 <= self.floor.max(1), "{ctx}: records below {} are gone", first.0);
        }
        for (k, (lsn, bytes)) in records.iter().enumerate() {
            assert_eq!(lsn.0, records[0].0.0 + k as u64, "{ctx}: LSNs not contiguous");
            assert_eq!(bytes, &self.appended[lsn.0 as usize - 1], "{ctx}: record {lsn} differs");
        }
        assert_eq!(records.last().map_or(end, |r| r.0.0), end, "{ctx}: records end early");
        // What was lost was never acknowledged, and its LSNs will be assigned again.
        self.appended.truncate(end as usize);
    }
}

/// How often the crash property met each kind of recovery, to show it exercises them.
#[derive(Debug, Default)]
struct Seen {
    /// Opens that cut a torn tail.
    torn: u64,
    /// Of those, tails with intact records of the same batch after the bad one.
    torn_with_survivors: u64,
    /// Opens that rewrote an unfinished segment header.
    headers_rewritten: u64,
    /// Opens that the dying disk stopped.
    opens_died: u64,
}

/// One seed of the crash property; see the module documentation.
fn crash_model_case(seed: u64, sector_bytes: usize, seen: &mut Seen) {
    let mut rng = SplitMix64::new(seed);
    let disk = FaultDisk::wrap(MemDisk::with_sector_bytes(sector_bytes));
    let opts = LogOptions {
        segment_bytes: 200 + rng.below(800),
        buffer_bytes_max: 128 + rng.below(512) as usize,
        record_bytes_max: 300,
        read_chunk_bytes: 64,
        ..LogOptions::default()
    };
    let mut h = History { appended: Vec::new(), acked: 0, floor: 0 };
    for round in 0..8 {
        let ctx = format!("seed {seed}, sector {sector_bytes}, round {round}");
        // Sometimes the disk dies during recovery itself.
        if rng.below(6) == 0 {
            let ops = disk.counters().ops;
            disk.set_plan(FaultPlan {
                die_after_ops: Some(ops + rng.below(40)),
                ..FaultPlan::default()
            });
        }
        let log = match Log::open(Arc::new(disk.clone()), opts.clone()) {
            Ok((log, rec)) => {
                h.recovered(&ctx, &rec.records, rec.next_lsn);
                let report = log.open_report();
                if let Some(t) = &report.torn_tail {
                    seen.torn += 1;
                    seen.torn_with_survivors += u64::from(t.intact_records_cut > 0);
                }
                seen.headers_rewritten += u64::from(report.header_rewritten.is_some());
                log
            }
            Err(e) => {
                // Only the dying disk may stop recovery: a crash never looks like corruption.
                assert!(
                    matches!(e, StorageError::InjectedFault { .. }),
                    "{ctx}: open after a crash failed: {e}"
                );
                seen.opens_died += 1;
                disk.crash(rng.next_u64());
                continue;
            }
        };
        disk.set_plan(FaultPlan::default());
        // The disk dies somewhere in this round's workload, or one of its fsyncs fails (leaving
        // that flush's batch unsynced for the crash to tear), or neither happens.
        let c = disk.counters();
        disk.set_plan(if rng.coin() {
            FaultPlan { die_after_ops: Some(c.ops + rng.below(150)), ..FaultPlan::default() }
        } else {
            FaultPlan { fail_sync_at: Some(c.syncs + 1 + rng.below(12)), ..FaultPlan::default() }
        });
        'work: for _ in 0..rng.below(12) {
            for _ in 0..1 + rng.below(6) {
                let mut p = (h.appended.len() as u64 + 1).to_le_bytes().to_vec();
                // Small records span few sectors, so a tear often keeps some whole.
                let bound = if rng.coin() { 200 } else { 24 };
                let len = rng.below(bound) as usize;
                p.extend(std::iter::repeat_n(rng.next_u64() as u8, len));
                let Ok(lsn) = log.append(&p) else { break 'work };
                assert_eq!(lsn.0, h.appended.len() as u64 + 1, "{ctx}");
                h.appended.push(p);
                h.acked = h.acked.max(log.durable_lsn().0);
            }
            if rng.below(4) != 0 {
                if log.flush().is_err() {
                    break;
                }
                h.acked = log.durable_lsn().0;
            }
            if rng.below(5) == 0 {
                let t = h.acked.saturating_sub(rng.below(10));
                // Recorded before the call: a call that fails may still have removed segments.
                h.floor = h.floor.max(t);
                if log.truncate_before(Lsn(t)).is_err() {
                    break;
                }
            }
        }
        drop(log);
        disk.crash(rng.next_u64());
    }
    disk.set_plan(FaultPlan::default());
    let (_, rec) = Log::open(Arc::new(disk.clone()), opts)
        .unwrap_or_else(|e| panic!("seed {seed}, sector {sector_bytes}: final open: {e}"));
    h.recovered(&format!("seed {seed}, final"), &rec.records, rec.next_lsn);
}

/// Over many seeds and sector sizes: every record acknowledged durable survives, the log always
/// opens after a crash (never reports corruption), and what it returns is a prefix of what was
/// appended (above the truncation point).
#[test]
fn crashes_never_lose_acknowledged_records_nor_look_like_corruption() {
    let mut seen = Seen::default();
    for sector in [16, 64, 512] {
        for seed in 0..CRASH_MODEL_SEEDS {
            crash_model_case(seed, sector, &mut seen);
        }
    }
    // The seeds reach every kind of recovery, including the one the batch rule is for.
    assert!(seen.torn_with_survivors > 0, "{seen:?}");
    assert!(seen.headers_rewritten > 0, "{seen:?}");
    assert!(seen.opens_died > 0, "{seen:?}");
    println!("{seen:?}");
}
