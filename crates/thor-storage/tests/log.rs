//! The transaction log, one behaviour per test: LSNs, segments, truncation, bounds, recovery of
//! torn tails, corruption, poisoning.

use std::sync::Arc;

use proptest::prelude::*;
use thor_core::ids::Lsn;
use thor_storage::log::{parse_segment_name, segment_name};
use thor_storage::{
    Disk, FaultDisk, FaultPlan, FileDisk, Log, LogOptions, MemDisk, Recovered, StorageError,
};

/// Bytes of a segment header and of a record header (see `thor_storage::log`).
const SEGMENT_HEADER: usize = 24;
const RECORD_HEADER: usize = 20;

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 200,
        buffer_bytes_max: 1024,
        record_bytes_max: 512,
        // Small reads, so that records span read buffers.
        read_chunk_bytes: 64,
        ..LogOptions::default()
    }
}

fn open(disk: &MemDisk, opts: &LogOptions) -> (Log, Recovered) {
    Log::open(Arc::new(disk.clone()), opts.clone()).unwrap()
}

fn payload(i: u64) -> Vec<u8> {
    format!("record number {i}").into_bytes()
}

/// Appends records `from..to` (payload(i) for LSN i) and makes them durable.
fn fill(log: &Log, from: u64, to: u64) {
    for i in from..to {
        assert_eq!(log.append(&payload(i)).unwrap(), Lsn(i));
    }
    log.flush().unwrap();
}

fn segments(disk: &dyn Disk) -> Vec<String> {
    disk.list().unwrap().into_iter().filter(|n| parse_segment_name("log", n).is_some()).collect()
}

fn check_records(rec: &Recovered, from: u64, to: u64) {
    let want: Vec<(Lsn, Vec<u8>)> = (from..to).map(|i| (Lsn(i), payload(i))).collect();
    assert_eq!(rec.records, want);
    assert_eq!(rec.next_lsn, Lsn(to));
}

#[test]
fn a_fresh_log_creates_segment_one_durably() {
    for seed in 0..10 {
        let disk = MemDisk::new();
        let (log, rec) = open(&disk, &small());
        assert_eq!(rec, Recovered { records: vec![], next_lsn: Lsn(1), torn_bytes_cut: 0 });
        assert_eq!(log.next_lsn(), Lsn(1));
        assert_eq!(log.durable_lsn(), Lsn(0));
        drop(log);
        disk.crash(seed);
        assert_eq!(segments(&disk), vec!["log.0000000000000001"]);
        // The segment's header is durable too, and nothing else is in it.
        assert_eq!(disk.file_bytes("log.0000000000000001").unwrap().len(), SEGMENT_HEADER);
    }
}

#[test]
fn lsns_are_consecutive_and_reopen_returns_every_durable_record() {
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &LogOptions::default());
    fill(&log, 1, 51);
    assert_eq!(log.durable_lsn(), Lsn(50));
    // Appended but never made durable: lost when the log is dropped.
    log.append(b"never flushed").unwrap();
    drop(log);
    let (log, rec) = open(&disk, &LogOptions::default());
    check_records(&rec, 1, 51);
    assert_eq!(log.next_lsn(), Lsn(51));
    assert_eq!(log.durable_lsn(), Lsn(50));
    assert_eq!(log.stats().records_recovered, 50);
}

#[test]
fn empty_payloads_are_records_too() {
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &small());
    log.append(b"").unwrap();
    log.append(b"x").unwrap();
    log.append(b"").unwrap();
    log.flush().unwrap();
    drop(log);
    let (_, rec) = open(&disk, &small());
    assert_eq!(rec.records, vec![(Lsn(1), vec![]), (Lsn(2), b"x".to_vec()), (Lsn(3), vec![])]);
}

#[test]
fn wait_durable_on_zero_returns_and_on_an_unassigned_lsn_errs() {
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &small());
    log.wait_durable(Lsn::ZERO).unwrap();
    assert!(matches!(log.wait_durable(Lsn(1)), Err(StorageError::InvalidArgument(_))));
    let l = log.append(b"a").unwrap();
    log.wait_durable(l).unwrap();
    // Waiting again for a durable record costs nothing.
    log.wait_durable(l).unwrap();
    assert_eq!(log.stats().flushes, 1);
}

#[test]
fn segments_rotate_and_are_named_after_their_first_lsn() {
    let disk = MemDisk::new();
    let opts = small();
    let (log, _) = open(&disk, &opts);
    // One flush per record: each record is ~36 bytes, so a 200-byte segment holds 5 after its
    // 24-byte header.
    for i in 1..=30 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    let segs = segments(&disk);
    assert!(segs.len() >= 4, "{segs:?}");
    assert_eq!(segs[0], segment_name("log", Lsn(1)));
    let firsts: Vec<u64> = segs.iter().map(|n| parse_segment_name("log", n).unwrap().0).collect();
    let stats = log.stats();
    assert_eq!(stats.segments_created, segs.len() as u64);
    assert_eq!(stats.segments_live, segs.len() as u64);
    drop(log);
    let (_, rec) = open(&disk, &opts);
    check_records(&rec, 1, 31);
    // Each segment's name is the LSN of its first record, and every segment but the last
    // reached the size bound before the next began.
    for (i, first) in firsts.iter().enumerate() {
        assert!(rec.records.iter().any(|(l, _)| l.0 == *first));
        if i + 1 < segs.len() {
            let len = disk.file_bytes(&segs[i]).unwrap().len() as u64;
            assert!(len >= opts.segment_bytes, "{} holds {len} bytes", segs[i]);
        }
    }
}

#[test]
fn truncate_before_deletes_whole_old_segments_only() {
    let disk = MemDisk::new();
    let opts = small();
    let (log, _) = open(&disk, &opts);
    for i in 1..=30 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    let before = segments(&disk);
    let second = parse_segment_name("log", &before[1]).unwrap();
    // A point inside segment 2 frees segment 1 only.
    log.truncate_before(Lsn(second.0 + 1)).unwrap();
    let after = segments(&disk);
    assert_eq!(after, before[1..].to_vec());
    assert_eq!(log.stats().segments_deleted, 1);
    drop(log);
    let (_, rec) = open(&disk, &opts);
    check_records(&rec, second.0, 31);
}

#[test]
fn truncating_everything_never_restarts_lsns() {
    let disk = MemDisk::new();
    let opts = small();
    let (log, _) = open(&disk, &opts);
    for i in 1..=30 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    log.truncate_before(Lsn(u64::MAX)).unwrap();
    // The active segment stays.
    let segs = segments(&disk);
    assert_eq!(segs.len(), 1);
    drop(log);
    let (log, rec) = open(&disk, &opts);
    assert_eq!(rec.next_lsn, Lsn(31));
    assert_eq!(rec.records.last().map(|r| r.0), Some(Lsn(30)));
    assert_eq!(log.append(b"next").unwrap(), Lsn(31));
    log.flush().unwrap();
    // Even when the surviving segment holds no record at all, its name carries the LSN.
    for i in 32..=40 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    log.truncate_before(Lsn(u64::MAX)).unwrap();
    drop(log);
    let (_, rec) = open(&disk, &opts);
    assert_eq!(rec.next_lsn, Lsn(41));
}

#[test]
fn rotate_then_truncate_leaves_one_empty_segment_and_keeps_lsns() {
    let disk = MemDisk::new();
    let opts = LogOptions { segment_bytes: 1 << 20, ..small() };
    let (log, _) = open(&disk, &opts);
    // Appended but not flushed: rotate makes them durable first.
    for i in 1..=20 {
        log.append(&payload(i)).unwrap();
    }
    log.rotate().unwrap();
    assert_eq!(log.durable_lsn(), Lsn(20));
    assert_eq!(segments(&disk).len(), 2);
    // A second rotate finds the active segment empty and does nothing.
    log.rotate().unwrap();
    assert_eq!(segments(&disk).len(), 2);
    log.truncate_before(Lsn(21)).unwrap();
    let segs = segments(&disk);
    assert_eq!(segs, vec![segment_name("log", Lsn(21))]);
    assert_eq!(disk.open(&segs[0], false).unwrap().len().unwrap(), SEGMENT_HEADER as u64);
    drop(log);
    let (log, rec) = open(&disk, &opts);
    assert!(rec.records.is_empty());
    assert_eq!(rec.next_lsn, Lsn(21));
    fill(&log, 21, 25);
    drop(log);
    let (_, rec) = open(&disk, &opts);
    check_records(&rec, 21, 25);
}

#[test]
fn a_record_over_the_bound_is_refused_and_changes_nothing() {
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &small());
    assert!(matches!(
        log.append(&[0u8; 513]),
        Err(StorageError::RecordTooLarge { len: 513, max: 512 })
    ));
    assert_eq!(log.next_lsn(), Lsn(1));
    assert_eq!(log.append(&[0u8; 512]).unwrap(), Lsn(1));
}

#[test]
fn a_full_buffer_makes_append_flush_instead_of_growing() {
    let disk = MemDisk::new();
    let opts = LogOptions { buffer_bytes_max: 256, ..small() };
    let (log, _) = open(&disk, &opts);
    // 100 records of ~32 bytes without a single wait: the buffer can hold 8.
    for i in 1..=100 {
        log.append(&payload(i)).unwrap();
    }
    let s = log.stats();
    assert!(s.flushes_forced_by_append >= 10, "{s:?}");
    assert!(s.appends_blocked >= 10, "{s:?}");
    // Every flush wrote at most the bound.
    assert!(s.bytes_written <= s.flushes * 256, "{s:?}");
    log.flush().unwrap();
    drop(log);
    let (_, rec) = open(&disk, &opts);
    check_records(&rec, 1, 101);
}

#[test]
fn a_record_larger_than_the_buffer_goes_to_disk_alone() {
    let disk = MemDisk::new();
    let opts = LogOptions { buffer_bytes_max: 64, record_bytes_max: 4096, ..small() };
    let (log, _) = open(&disk, &opts);
    log.append(b"small").unwrap();
    let big = vec![0xB1u8; 3000];
    assert_eq!(log.append(&big).unwrap(), Lsn(2));
    assert_eq!(log.stats().flushes, 1, "the small record was flushed to make room");
    log.append(b"after").unwrap();
    log.flush().unwrap();
    drop(log);
    let (_, rec) = open(&disk, &opts);
    assert_eq!(rec.records[1].1, big);
    assert_eq!(rec.records.len(), 3);
}

#[test]
fn invalid_options_are_refused() {
    let disk: Arc<dyn Disk> = Arc::new(MemDisk::new());
    for opts in [
        LogOptions { prefix: String::new(), ..small() },
        LogOptions { prefix: "a/b".into(), ..small() },
        LogOptions { prefix: "x".repeat(300), ..small() },
        LogOptions { segment_bytes: 0, ..small() },
        LogOptions { buffer_bytes_max: 8, ..small() },
        LogOptions { record_bytes_max: usize::MAX, ..small() },
        LogOptions { buffer_bytes_max: usize::MAX, ..small() },
        LogOptions { read_chunk_bytes: 8, ..small() },
    ] {
        let err = Log::open(disk.clone(), opts.clone()).unwrap_err();
        assert!(
            matches!(err, StorageError::InvalidArgument(_) | StorageError::InvalidName { .. }),
            "{opts:?}: {err}"
        );
    }
}

#[test]
fn other_files_and_other_prefixes_are_left_alone() {
    let disk = MemDisk::new();
    for name in [
        "pages",
        "log.tmp",
        "log.00000000000000zz",
        "log.00000000000000AB",
        "logx.0000000000000005",
    ] {
        disk.open(name, true).unwrap().write_at(0, b"not a log").unwrap();
    }
    let (log, rec) = open(&disk, &small());
    assert_eq!(rec.next_lsn, Lsn(1));
    fill(&log, 1, 4);
    // A second log with another prefix in the same directory.
    let other = LogOptions { prefix: "undo".into(), ..small() };
    let (log2, _) = open(&disk, &other);
    fill(&log2, 1, 3);
    drop((log, log2));
    check_records(&open(&disk, &small()).1, 1, 4);
    assert_eq!(open(&disk, &other).1.records.len(), 2);
    assert_eq!(disk.file_bytes("logx.0000000000000005").unwrap(), b"not a log");
}

#[test]
fn the_log_works_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::open_dir(dir.path(), false).unwrap());
    let (log, _) = Log::open(disk.clone(), small()).unwrap();
    for i in 1..=20 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    log.truncate_before(Lsn(10)).unwrap();
    drop(log);
    let (log, rec) = Log::open(disk.clone(), small()).unwrap();
    assert_eq!(rec.next_lsn, Lsn(21));
    assert!(rec.records.first().unwrap().0 <= Lsn(10));
    assert_eq!(rec.records.last().unwrap(), &(Lsn(20), payload(20)));
    // A torn tail on a real file is cut too.
    let newest = segments(&*disk).pop().unwrap();
    let f = disk.open(&newest, false).unwrap();
    let len = f.len().unwrap();
    f.write_at(len, &[1, 2, 3]).unwrap();
    drop((log, f));
    let (log, rec2) = Log::open(disk.clone(), small()).unwrap();
    assert_eq!(rec2.torn_bytes_cut, 3);
    assert_eq!(rec2.records, rec.records);
    let kept = &log.open_report().torn_tail.as_ref().unwrap().kept_in;
    assert_eq!(std::fs::read(dir.path().join(kept)).unwrap(), [1, 2, 3]);
}

// ---------------------------------------------------------------------------------------------
// Recovery: torn tails are cut, corruption is reported.

/// A log of records 1..=30 over several segments; returns the disk and segment names.
fn multi_segment_log() -> (MemDisk, Vec<String>) {
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &small());
    for i in 1..=30 {
        log.append(&payload(i)).unwrap();
        log.flush().unwrap();
    }
    drop(log);
    let segs = segments(&disk);
    assert!(segs.len() >= 3);
    (disk, segs)
}

#[test]
fn a_torn_tail_is_cut_and_appending_continues_after_it() {
    let (disk, segs) = multi_segment_log();
    let newest = segs.last().unwrap();
    let full = disk.file_bytes(newest).unwrap().len();
    // Chop the last record in half.
    let last_len = RECORD_HEADER + payload(30).len();
    disk.edit_file(newest, |b| b.truncate(full - last_len / 2)).unwrap();
    let (log, rec) = open(&disk, &small());
    check_records(&rec, 1, 30);
    assert_eq!(rec.torn_bytes_cut, (last_len - last_len / 2) as u64);
    assert_eq!(log.stats().torn_bytes_cut, rec.torn_bytes_cut);
    assert_eq!(disk.file_bytes(newest).unwrap().len(), full - last_len);
    // The next record takes the lost one's LSN, and a reopen finds no tear.
    assert_eq!(log.append(b"replacement").unwrap(), Lsn(30));
    log.flush().unwrap();
    drop(log);
    let (_, rec) = open(&disk, &small());
    assert_eq!(rec.torn_bytes_cut, 0);
    assert_eq!(rec.records.last().unwrap(), &(Lsn(30), b"replacement".to_vec()));
}

#[test]
fn garbage_after_the_last_record_of_the_newest_segment_is_cut() {
    let (disk, segs) = multi_segment_log();
    disk.edit_file(segs.last().unwrap(), |b| b.extend_from_slice(&[0u8; 40])).unwrap();
    let (_, rec) = open(&disk, &small());
    check_records(&rec, 1, 31);
    assert_eq!(rec.torn_bytes_cut, 40);
}

#[test]
fn a_bit_flip_in_the_newest_segments_last_record_is_cut_as_a_torn_tail() {
    let (disk, segs) = multi_segment_log();
    let newest = segs.last().unwrap();
    let len = disk.file_bytes(newest).unwrap().len();
    // The last byte of the last record's payload: nothing valid follows it.
    disk.edit_file(newest, |b| b[len - 1] ^= 1).unwrap();
    let (_, rec) = open(&disk, &small());
    check_records(&rec, 1, 30);
    assert_eq!(rec.torn_bytes_cut, (RECORD_HEADER + payload(30).len()) as u64);
}

#[test]
fn a_bit_flip_in_the_newest_segments_first_record_is_corruption_when_later_batches_follow() {
    let (disk, segs) = multi_segment_log();
    let newest = segs.last().unwrap();
    // Every record was its own flush batch, so the records after the damaged one prove it was
    // durable before they were written.
    disk.edit_file(newest, |b| b[SEGMENT_HEADER + RECORD_HEADER + 2] ^= 1).unwrap();
    match Log::open(Arc::new(disk.clone()), small()) {
        Err(StorageError::Corrupt { what: "log record", name, offset, why }) => {
            assert_eq!(&name, newest);
            assert_eq!(offset, SEGMENT_HEADER as u64);
            assert!(why.contains("later flush batch"), "{why}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_bit_flip_in_an_older_segment_is_corruption_with_file_and_offset() {
    let (disk, segs) = multi_segment_log();
    let rec_len = (RECORD_HEADER + payload(1).len()) as u64;
    // The second record of the first segment, first payload byte.
    let second = SEGMENT_HEADER as u64 + rec_len;
    disk.edit_file(&segs[0], |b| b[second as usize + RECORD_HEADER] ^= 0x40).unwrap();
    match Log::open(Arc::new(disk.clone()), small()) {
        Err(StorageError::Corrupt { what: "log record", name, offset, why }) => {
            assert_eq!(name, segs[0]);
            assert_eq!(offset, second);
            assert!(why.contains("checksum"), "{why}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_truncated_older_segment_is_corruption() {
    let (disk, segs) = multi_segment_log();
    disk.edit_file(&segs[1], |b| {
        let n = b.len();
        b.truncate(n - 3);
    })
    .unwrap();
    let err = Log::open(Arc::new(disk.clone()), small()).unwrap_err();
    assert!(matches!(&err, StorageError::Corrupt { name, .. } if *name == segs[1]), "{err}");
}

#[test]
fn a_missing_middle_segment_is_a_gap_and_corruption() {
    let (disk, segs) = multi_segment_log();
    disk.remove(&segs[1]).unwrap();
    let err = Log::open(Arc::new(disk.clone()), small()).unwrap_err();
    assert!(
        matches!(&err, StorageError::Corrupt { what: "log segment sequence", name, .. } if *name == segs[2]),
        "{err}"
    );
}

#[test]
fn a_segment_named_for_lsn_zero_is_corruption() {
    let disk = MemDisk::new();
    disk.open("log.0000000000000000", true).unwrap();
    assert!(Log::open(Arc::new(disk), small()).unwrap_err().is_corruption());
}

#[test]
fn a_record_with_the_wrong_lsn_in_an_older_segment_is_corruption() {
    let (disk, segs) = multi_segment_log();
    // Rename segment 2 so that its name no longer matches its header and records.
    let first = parse_segment_name("log", &segs[1]).unwrap();
    let bytes = disk.file_bytes(&segs[1]).unwrap();
    disk.remove(&segs[1]).unwrap();
    let wrong = segment_name("log", Lsn(first.0 - 1));
    disk.open(&wrong, true).unwrap().write_at(0, &bytes).unwrap();
    assert!(Log::open(Arc::new(disk), small()).unwrap_err().is_corruption());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever is done to the bytes of any segment, open never panics: it either fails with a
    /// corruption error or returns a contiguous run of the original records. (Damage to the
    /// newest segment is refused too when a later flush batch follows it, and every record
    /// here is its own batch.)
    #[test]
    fn damaged_segments_never_panic_and_never_yield_wrong_records(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let (disk, segs) = multi_segment_log();
        let victim = which.get(&segs).clone();
        disk.edit_file(&victim, |b| {
            for (at, byte, kind) in &edits {
                if b.is_empty() {
                    break;
                }
                let i = at.index(b.len());
                match kind {
                    0 => b[i] ^= byte | 1,
                    1 => b.truncate(i),
                    _ => b.insert(i, *byte),
                }
            }
        }).unwrap();
        match Log::open(Arc::new(disk.clone()), small()) {
            Ok((_, rec)) => {
                let first = rec.records.first().map_or(rec.next_lsn.0, |r| r.0.0);
                prop_assert_eq!(first, 1);
                for (k, (lsn, bytes)) in rec.records.iter().enumerate() {
                    prop_assert_eq!(lsn.0, first + k as u64);
                    prop_assert_eq!(bytes, &payload(lsn.0));
                }
                // Only the newest segment may lose records to a cut.
                if victim != *segs.last().unwrap() {
                    prop_assert_eq!(rec.next_lsn, Lsn(31));
                }
            }
            Err(e) => {
                prop_assert!(
                    e.is_corruption() || matches!(e, StorageError::UnsupportedFormat { .. }),
                    "{}",
                    e
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Poisoning.

fn poisoned<T: std::fmt::Debug>(r: Result<T, StorageError>) -> bool {
    matches!(r, Err(StorageError::Poisoned { .. }))
}

#[test]
fn a_failed_write_poisons_the_log_for_everyone() {
    let disk = FaultDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), small()).unwrap();
    fill_fault(&log, 1, 4);
    disk.set_plan(FaultPlan {
        fail_write_at: Some(disk.counters().writes + 1),
        ..FaultPlan::default()
    });
    let l = log.append(b"doomed").unwrap();
    let err = log.wait_durable(l).unwrap_err();
    assert!(
        matches!(&err, StorageError::Poisoned { cause } if cause.contains("injected")),
        "{err}"
    );
    assert!(log.is_poisoned());
    assert_eq!(log.durable_lsn(), Lsn(3));
    // Everything after fails too, even though the disk works again.
    assert!(poisoned(log.append(b"more")));
    assert!(poisoned(log.wait_durable(l)));
    assert!(poisoned(log.wait_durable(Lsn(2))));
    assert!(poisoned(log.truncate_before(Lsn(2))));
    drop(log);
    // Reopening recovers the durable records, and perhaps the one whose write "failed".
    let (_, rec) = Log::open(Arc::new(disk.clone()), small()).unwrap();
    assert!(rec.records.len() == 3 || rec.records.len() == 4);
    assert_eq!(
        &rec.records[..3],
        &[(Lsn(1), payload(1)), (Lsn(2), payload(2)), (Lsn(3), payload(3))]
    );
}

#[test]
fn a_failed_fsync_poisons_the_log_and_nothing_is_reported_durable() {
    let disk = FaultDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), small()).unwrap();
    fill_fault(&log, 1, 3);
    disk.set_plan(FaultPlan {
        fail_sync_at: Some(disk.counters().syncs + 1),
        ..FaultPlan::default()
    });
    let l = log.append(b"unsure").unwrap();
    assert!(poisoned(log.wait_durable(l)));
    assert_eq!(log.durable_lsn(), Lsn(2));
    assert!(poisoned(log.append(b"more")));
    assert!(poisoned(log.flush()));
}

#[test]
fn a_failed_rotation_poisons_the_log() {
    let disk = FaultDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), small()).unwrap();
    // Fill the first segment past its bound so the next flush rotates.
    for i in 1..=7 {
        log.append(&payload(i)).unwrap();
    }
    log.flush().unwrap();
    // The rotation's directory sync is the next sync.
    disk.set_plan(FaultPlan {
        fail_sync_at: Some(disk.counters().syncs + 1),
        ..FaultPlan::default()
    });
    let l = log.append(b"in the new segment").unwrap();
    assert!(poisoned(log.wait_durable(l)));
    drop(log);
    disk.crash(7);
    let (_, rec) = Log::open(Arc::new(disk.clone()), small()).unwrap();
    assert_eq!(rec.next_lsn, Lsn(8));
}

fn fill_fault(log: &Log, from: u64, to: u64) {
    fill(log, from, to);
}

#[test]
fn shared_records_are_written_as_copied_ones_are() {
    // The same records, appended by copy into one log and shared into another: the segments
    // are the same bytes, whatever mix of small (copied anyway) and large records a batch has.
    let big = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|k| (k * 7 + i) as u8).collect() };
    let min = thor_storage::limits::SHARED_RECORD_BYTES_MIN;
    let batches: Vec<Vec<Vec<u8>>> = vec![
        vec![payload(1), big(2, min), payload(3), big(4, min + 13), big(5, 3 * min)],
        vec![big(6, 2 * min + 1)],
        vec![payload(7)],
        vec![big(8, min), payload(9)],
    ];
    let (copied, shared) = (MemDisk::new(), MemDisk::new());
    let opts = LogOptions::default();
    let (a, _) = open(&copied, &opts);
    let (b, _) = open(&shared, &opts);
    for batch in &batches {
        for p in batch {
            let lsn = a.append(p).unwrap();
            assert_eq!(b.append_shared(bytes::Bytes::from(p.clone())).unwrap(), lsn);
        }
        a.flush().unwrap();
        b.flush().unwrap();
    }
    assert_eq!(a.stats().bytes_written, b.stats().bytes_written);
    drop((a, b));
    for name in segments(&copied) {
        assert_eq!(copied.file_bytes(&name).unwrap(), shared.file_bytes(&name).unwrap(), "{name}");
    }
    assert_eq!(segments(&copied), segments(&shared));
    let (_, rec) = open(&shared, &opts);
    let want: Vec<(Lsn, Vec<u8>)> =
        batches.concat().into_iter().enumerate().map(|(i, p)| (Lsn(i as u64 + 1), p)).collect();
    assert_eq!(rec.records, want);
}

#[test]
fn a_shared_record_counts_against_the_buffer_bound() {
    // A shared record's bytes are unwritten as much as a copied one's: the next append that
    // would pass the bound flushes first, and every record is recovered.
    let min = thor_storage::limits::SHARED_RECORD_BYTES_MIN;
    let opts = LogOptions { buffer_bytes_max: 2 * min, ..LogOptions::default() };
    let disk = MemDisk::new();
    let (log, _) = open(&disk, &opts);
    let p = vec![7u8; min + min / 2];
    for _ in 0..3 {
        log.append_shared(bytes::Bytes::from(p.clone())).unwrap();
    }
    assert!(log.stats().flushes_forced_by_append >= 2);
    log.flush().unwrap();
    drop(log);
    let (_, rec) = open(&disk, &opts);
    assert_eq!(rec.records.len(), 3);
    assert!(rec.records.iter().all(|(_, r)| *r == p));
}
