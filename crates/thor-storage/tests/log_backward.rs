//! The log read backward ([`thor_storage::LogBackReader`]), one behaviour per test: every
//! durable record newest first across segments, a snapshot's end, truncation, and damage
//! (bit flips, a missing segment, a file changed between the index pass and the read) always
//! an error naming the file, never a panic and never a wrong record.

use std::sync::Arc;

use proptest::prelude::*;
use thor_core::ids::Lsn;
use thor_storage::log::parse_segment_name;
use thor_storage::{Disk, Log, LogBackReader, LogOptions, MemDisk, StorageError};

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 300,
        buffer_bytes_max: 4096,
        record_bytes_max: 1024,
        // Small reads, so that records span read buffers.
        read_chunk_bytes: 64,
        ..LogOptions::default()
    }
}

/// Record `i`'s payload: its number and a length that varies (some longer than a read chunk,
/// some empty).
fn payload(i: u64) -> Vec<u8> {
    let len = (i * 37 % 200) as usize;
    (0..len).map(|k| (i as u8).wrapping_mul(31).wrapping_add(k as u8)).collect()
}

/// A log of records 1..=n, flushed in batches of 1 to 3, over several segments.
fn log_of(n: u64) -> MemDisk {
    let disk = MemDisk::new();
    let (log, _) = Log::open_streaming(Arc::new(disk.clone()), small()).unwrap();
    for i in 1..=n {
        assert_eq!(log.append(&payload(i)).unwrap(), Lsn(i));
        if i % 3 == 0 || i % 7 == 0 {
            log.flush().unwrap();
        }
    }
    log.flush().unwrap();
    disk
}

fn segments(disk: &dyn Disk) -> Vec<String> {
    let mut v: Vec<String> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| parse_segment_name("log", n).is_some())
        .collect();
    v.sort();
    v
}

fn reopen(disk: &MemDisk) -> Log {
    Log::open_streaming(Arc::new(disk.clone()), small()).unwrap().0
}

/// Reads everything backward: the LSNs and payloads, or the first error.
fn read_all(r: &mut LogBackReader) -> (Vec<(Lsn, Vec<u8>)>, Option<StorageError>) {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    loop {
        match r.prev(&mut buf) {
            Ok(Some(lsn)) => out.push((lsn, buf.clone())),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[test]
fn every_durable_record_comes_back_newest_first_across_segments() {
    let disk = log_of(60);
    assert!(segments(&disk).len() >= 4, "{:?}", segments(&disk));
    let log = reopen(&disk);
    let mut r = log.backward_reader();
    assert_eq!((r.first_lsn(), r.end_lsn()), (Lsn(1), Lsn(61)));
    let (got, err) = read_all(&mut r);
    assert!(err.is_none(), "{err:?}");
    let want: Vec<(Lsn, Vec<u8>)> = (1..=60).rev().map(|i| (Lsn(i), payload(i))).collect();
    assert_eq!(got, want);
    // Past the oldest it stays at the end.
    assert_eq!(r.prev(&mut Vec::new()).unwrap(), None);
}

#[test]
fn an_empty_log_has_nothing_to_read_back() {
    let disk = MemDisk::new();
    let (log, _) = Log::open_streaming(Arc::new(disk.clone()), small()).unwrap();
    let mut r = log.backward_reader();
    assert_eq!((r.first_lsn(), r.end_lsn()), (Lsn(1), Lsn(1)));
    assert_eq!(r.prev(&mut Vec::new()).unwrap(), None);
}

#[test]
fn the_reader_sees_its_snapshot_not_later_or_unsynced_appends() {
    let disk = log_of(20);
    let log = reopen(&disk);
    let mut r = log.backward_reader();
    // Appended after the snapshot (and one of them made durable): not returned.
    log.append(b"later").unwrap();
    log.flush().unwrap();
    log.append(b"never durable").unwrap();
    let (got, err) = read_all(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.first().map(|g| g.0), Some(Lsn(20)));
    assert_eq!(got.len(), 20);
    // A new reader sees the durable one, not the unsynced one.
    let mut r = log.backward_reader();
    let mut buf = Vec::new();
    assert_eq!(r.prev(&mut buf).unwrap(), Some(Lsn(21)));
    assert_eq!(buf, b"later");
}

#[test]
fn after_truncation_the_reader_stops_at_the_oldest_segment_left() {
    let disk = log_of(60);
    let log = reopen(&disk);
    log.truncate_before(Lsn(30)).unwrap();
    let first = log.first_lsn();
    assert!(first > Lsn(1) && first <= Lsn(30), "{first}");
    let mut r = log.backward_reader();
    assert_eq!(r.first_lsn(), first);
    let (got, err) = read_all(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.last().map(|g| g.0), Some(first));
    assert_eq!(got.len() as u64, 61 - first.0);
}

#[test]
fn a_bit_flip_in_an_older_segment_is_corruption_after_the_newer_records() {
    let disk = log_of(60);
    let segs = segments(&disk);
    // Damage the second segment's last byte (a payload byte or a header byte of its last
    // record): open reads only the newest segment, so it opens.
    disk.edit_file(&segs[1], |b| {
        let n = b.len();
        b[n - 1] ^= 0x10;
    })
    .unwrap();
    let log = reopen(&disk);
    let second_first = parse_segment_name("log", &segs[2]).unwrap();
    let (got, err) = read_all(&mut log.backward_reader());
    match err {
        Some(StorageError::Corrupt { what: "log record", name, .. }) => assert_eq!(name, segs[1]),
        other => panic!("expected corruption of {}, got {other:?}", segs[1]),
    }
    // Every record of the newer segments came back, right, and nothing of the damaged one.
    let want: Vec<(Lsn, Vec<u8>)> =
        (second_first.0..=60).rev().map(|i| (Lsn(i), payload(i))).collect();
    assert_eq!(got, want);
}

#[test]
fn a_missing_middle_segment_is_a_gap_and_corruption() {
    let disk = log_of(60);
    let segs = segments(&disk);
    disk.remove(&segs[1]).unwrap();
    let log = reopen(&disk);
    let (_, err) = read_all(&mut log.backward_reader());
    assert!(
        matches!(&err, Some(StorageError::Corrupt { what: "log segment sequence", name, .. }) if *name == segs[0]),
        "{err:?}"
    );
}

#[test]
fn a_record_changed_after_the_index_pass_is_refused_when_read_again() {
    let disk = log_of(20);
    let segs = segments(&disk);
    let newest = segs.last().unwrap().clone();
    let log = reopen(&disk);
    let mut r = log.backward_reader();
    let mut buf = Vec::new();
    // The first call indexes the newest segment and returns its newest record.
    assert_eq!(r.prev(&mut buf).unwrap(), Some(Lsn(20)));
    // Now every byte after the segment header changes under the reader.
    disk.edit_file(&newest, |b| {
        for x in &mut b[24..] {
            *x ^= 0xA5;
        }
    })
    .unwrap();
    match r.prev(&mut buf) {
        Err(StorageError::Corrupt { name, why, .. }) => {
            assert_eq!(name, newest);
            assert!(why.contains("read again"), "{why}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Damage anywhere in any segment but the newest (which open checks and repairs): reading
    /// back never panics, every record returned is exactly the one written with that LSN, in
    /// order, and a damaged record stops the reader with an error.
    #[test]
    fn damage_never_panics_nor_returns_a_wrong_record(
        seg_pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        bits in 1u8..=255,
        cut in any::<bool>(),
    ) {
        let disk = log_of(45);
        let segs = segments(&disk);
        let victim = &segs[seg_pick.index(segs.len() - 1)];
        disk.edit_file(victim, |b| {
            let i = at.index(b.len());
            if cut { b.truncate(i.max(1)); } else { b[i] ^= bits; }
        }).unwrap();
        // Open checks every segment's header: damage there is refused at once (an error too).
        let Ok((log, _)) = Log::open_streaming(Arc::new(disk.clone()), small()) else {
            return Ok(());
        };
        let (got, err) = read_all(&mut log.backward_reader());
        let mut expect = 45;
        for (lsn, bytes) in &got {
            prop_assert_eq!(*lsn, Lsn(expect));
            prop_assert_eq!(bytes, &payload(expect));
            expect -= 1;
        }
        // Unless the damage fell on bytes no check covers (none: the header, the records and
        // the end of the file are all checked), the reader must have stopped at it.
        prop_assert!(err.is_some(), "damage went unnoticed: {} records read", got.len());
    }
}
