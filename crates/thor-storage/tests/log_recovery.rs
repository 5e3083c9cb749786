//! The log's recovery rules and its streaming reader, one behaviour per test: a bad record is a
//! torn tail only when nothing of a later flush batch follows it; a torn tail is cut, kept in a
//! `.torn` file and reported loudly; an interrupted segment creation is finished; other
//! formats are refused; readers stream records in bounded memory and check what they pass.
//!
//! The logs here live in one segment unless said otherwise, with records of a fixed size, so
//! that a record's offset is arithmetic: `SEGMENT_HEADER + (lsn - 1) * RECORD`.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use thor_core::ids::Lsn;
use thor_storage::log::{parse_segment_name, segment_name};
use thor_storage::{Disk, Log, LogOptions, MemDisk, OpenReport, StorageError};

const SEGMENT_HEADER: usize = 24;
const RECORD_HEADER: usize = 20;
const PAYLOAD: usize = 30;
const RECORD: usize = RECORD_HEADER + PAYLOAD;
const SEGMENT: &str = "log.0000000000000001";

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 20,
        buffer_bytes_max: 4096,
        record_bytes_max: 1024,
        read_chunk_bytes: 64,
        ..LogOptions::default()
    }
}

/// The payload of LSN `lsn`: fixed size, recognisable.
fn payload(lsn: u64) -> Vec<u8> {
    let mut p = format!("record {lsn:>6} ").into_bytes();
    p.resize(PAYLOAD, b'.');
    p
}

fn offset_of(lsn: u64) -> usize {
    SEGMENT_HEADER + (lsn as usize - 1) * RECORD
}

/// A log whose records 1.. were written in flush batches of the given sizes.
fn batched_log(batches: &[usize]) -> MemDisk {
    let disk = MemDisk::new();
    let (log, _) = Log::open(Arc::new(disk.clone()), opts()).unwrap();
    let mut lsn = 1;
    for &n in batches {
        for _ in 0..n {
            assert_eq!(log.append(&payload(lsn)).unwrap(), Lsn(lsn));
            lsn += 1;
        }
        log.flush().unwrap();
    }
    assert_eq!(log.stats().flushes, batches.len() as u64);
    disk
}

/// Zeroes record `lsn`'s bytes, as a sector of an unsynced write that never landed would.
fn zero_record(disk: &MemDisk, lsn: u64) {
    disk.edit_file(SEGMENT, |b| b[offset_of(lsn)..offset_of(lsn + 1)].fill(0)).unwrap();
}

fn open_streaming(disk: &MemDisk) -> Result<(Log, OpenReport), StorageError> {
    Log::open_streaming(Arc::new(disk.clone()), opts())
}

/// Every record a reader from the oldest returns.
fn read_all(log: &Log) -> Vec<(u64, Vec<u8>)> {
    let mut r = log.reader(log.first_lsn()).unwrap();
    let mut out = Vec::new();
    while let Some((lsn, p)) = r.next().unwrap() {
        out.push((lsn.0, p.to_vec()));
    }
    out
}

fn expect_records(log: &Log, from: u64, to: u64) {
    let want: Vec<_> = (from..to).map(|l| (l, payload(l))).collect();
    assert_eq!(read_all(log), want);
}

// ---------------------------------------------------------------------------------------------
// Capturing what recovery logs: a minimal tracing subscriber.

/// Events recorded by [`Capture`]: level and formatted fields.
type Events = Arc<Mutex<Vec<(tracing::Level, String)>>>;

/// A subscriber that records every event, so that tests can check what was said.
struct Capture(Events);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with a capturing subscriber and returns its result and the events logged.
fn logged<T>(f: impl FnOnce() -> T) -> (T, Vec<(tracing::Level, String)>) {
    let events = Events::default();
    let out = tracing::subscriber::with_default(Capture(events.clone()), f);
    let events = events.lock().unwrap().clone();
    (out, events)
}

// ---------------------------------------------------------------------------------------------
// The batch rule.

#[test]
fn corrupt_middle_record_refuses_open() {
    let disk = batched_log(&[3, 3, 3]);
    let before = disk.file_bytes(SEGMENT).unwrap();
    // A bit flip in LSN 5, in the middle of the second batch: batch 3 was written after batch
    // 2 was fsynced, so LSN 5 was durable when it was damaged.
    disk.edit_file(SEGMENT, |b| b[offset_of(5) + RECORD_HEADER + 3] ^= 0x08).unwrap();
    match open_streaming(&disk) {
        Err(StorageError::Corrupt { what: "log record", name, offset, why }) => {
            assert_eq!(name, SEGMENT);
            assert_eq!(offset, offset_of(5) as u64);
            assert!(why.contains("checksum") && why.contains("later flush batch"), "{why}");
            assert!(why.contains(&format!("offset {}", offset_of(7))), "{why}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Nothing was cut or kept aside: refusing leaves the evidence where it was.
    let mut flipped = before.clone();
    flipped[offset_of(5) + RECORD_HEADER + 3] ^= 0x08;
    assert_eq!(disk.file_bytes(SEGMENT).unwrap(), flipped);
    assert_eq!(disk.list().unwrap(), vec![SEGMENT.to_string()]);
}

#[test]
fn a_bad_record_followed_by_a_later_batch_is_refused() {
    // LSN 6 ends batch 2; the records after it are batch 3's.
    let disk = batched_log(&[3, 3, 4]);
    zero_record(&disk, 6);
    let err = open_streaming(&disk).unwrap_err();
    assert!(
        matches!(&err, StorageError::Corrupt { offset, .. } if *offset == offset_of(6) as u64),
        "{err}"
    );
    assert!(err.is_corruption());
}

#[test]
fn a_torn_middle_of_the_last_batch_is_cut_with_the_rest_of_its_batch() {
    // The last batch is LSNs 7..=10. Whichever of its records a crash lost (a sector that did
    // not land while later ones did), the records after it are of the same batch: a tear.
    for lost in 7..=10 {
        let disk = batched_log(&[3, 3, 4]);
        let len = disk.file_bytes(SEGMENT).unwrap().len();
        zero_record(&disk, lost);
        let ((log, report), events) = logged(|| open_streaming(&disk).unwrap());
        let tail = report.torn_tail.as_ref().expect("a torn tail");
        assert_eq!(tail.offset, offset_of(lost) as u64, "lost {lost}");
        assert_eq!(tail.bytes, (len - offset_of(lost)) as u64);
        assert_eq!(tail.first_lost_lsn, Lsn(lost));
        assert_eq!(tail.intact_records_cut, 10 - lost, "lost {lost}");
        assert!(!tail.log_emptied);
        assert_eq!(report.next_lsn, Lsn(lost));
        assert_eq!(report.newest_segment_records, lost - 1);
        expect_records(&log, 1, lost);
        assert!(events.iter().any(|(l, _)| *l == tracing::Level::WARN));
    }
}

#[test]
fn torn_tail_is_cut_and_kept() {
    let disk = batched_log(&[3, 3, 3]);
    let full = disk.file_bytes(SEGMENT).unwrap();
    // A crash left 10 bytes of LSN 8's record and nothing after it.
    disk.edit_file(SEGMENT, |b| b.truncate(offset_of(8) + 10)).unwrap();
    let ((log, report), events) = logged(|| open_streaming(&disk).unwrap());

    let tail = report.torn_tail.clone().expect("a torn tail");
    assert_eq!(tail.segment, SEGMENT);
    assert_eq!(tail.offset, offset_of(8) as u64);
    assert_eq!(tail.bytes, 10);
    assert_eq!(tail.first_lost_lsn, Lsn(8));
    assert_eq!(tail.kept_in, "log.0000000000000008.torn");
    assert!(tail.defect.contains("cut short"), "{}", tail.defect);
    assert_eq!(tail.intact_records_cut, 0);
    assert!(!tail.log_emptied);
    assert_eq!(log.open_report(), &report);
    assert_eq!(log.stats().torn_bytes_cut, 10);

    // The cut bytes are kept, durably, and the segment ends at the last intact record.
    assert_eq!(disk.file_bytes(&tail.kept_in).unwrap(), full[offset_of(8)..offset_of(8) + 10]);
    assert_eq!(disk.file_bytes(SEGMENT).unwrap(), full[..offset_of(8)]);
    drop(log);
    // Open synced all of it: a crash now changes nothing.
    disk.crash(7);
    assert_eq!(disk.file_bytes(&tail.kept_in).unwrap().len(), 10);
    assert_eq!(disk.file_bytes(SEGMENT).unwrap().len(), offset_of(8));

    // It was said, at warning level, with where the bytes went.
    let warning = events
        .iter()
        .find(|(l, _)| *l == tracing::Level::WARN)
        .map(|(_, text)| text.clone())
        .expect("a warning");
    assert!(warning.contains(SEGMENT) && warning.contains(&tail.kept_in), "{warning}");

    // Appending continues where the cut was; a second tear at the same LSN keeps its bytes in a
    // second file rather than overwrite the first.
    let (log, report) = open_streaming(&disk).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(log.append(&payload(8)).unwrap(), Lsn(8));
    log.flush().unwrap();
    drop(log);
    disk.edit_file(SEGMENT, |b| b[offset_of(8) + 25] ^= 1).unwrap();
    let (log, report) = open_streaming(&disk).unwrap();
    assert_eq!(report.torn_tail.unwrap().kept_in, "log.0000000000000008.torn.1");
    expect_records(&log, 1, 8);
    // Kept files are not segments: a reopen ignores them.
    let segs: Vec<_> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| parse_segment_name("log", n).is_some())
        .collect();
    assert_eq!(segs, vec![SEGMENT.to_string()]);
}

/// On a full disk the torn tail cannot be copied out: each open fails, and leaves the
/// directory as it found it (no empty `.torn.N` file per attempt, which after 64 attempts
/// made the log refuse to open at all). Once space is back the tail is kept in one file.
#[test]
fn failed_opens_on_a_full_disk_leave_no_torn_files() {
    use thor_storage::FaultDisk;
    let mem = batched_log(&[3, 3, 3]);
    mem.edit_file(SEGMENT, |b| b.truncate(offset_of(8) + 10)).unwrap();
    let disk = FaultDisk::wrap(mem.clone());
    let before = disk.list().unwrap();
    let used = disk.used_bytes();
    disk.set_capacity(Some(used));
    for attempt in 0..100 {
        let err = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "attempt {attempt}: {err}");
        assert_eq!(disk.list().unwrap(), before, "attempt {attempt} left a file behind");
    }
    // A copy that a crash cut short (here: an empty file, as the old code left) is reused.
    disk.open("log.0000000000000008.torn", true).unwrap();
    disk.set_capacity(None);
    let (log, report) = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap();
    assert_eq!(report.torn_tail.unwrap().kept_in, "log.0000000000000008.torn");
    expect_records(&log, 1, 8);
    drop(log);
    let torn: Vec<_> = disk.list().unwrap().into_iter().filter(|n| n.contains(".torn")).collect();
    assert_eq!(torn, ["log.0000000000000008.torn"]);
}

/// An open that copied the tail out and then failed before the cut (the disk filled up in
/// between) is followed by one that finds the same bytes already kept: no second file.
#[test]
fn a_tail_already_kept_is_not_kept_twice() {
    let disk = batched_log(&[3, 3, 3]);
    let full = disk.file_bytes(SEGMENT).unwrap();
    disk.edit_file(SEGMENT, |b| b.truncate(offset_of(8) + 10)).unwrap();
    let f = disk.open("log.0000000000000008.torn", true).unwrap();
    f.write_at(0, &full[offset_of(8)..offset_of(8) + 10]).unwrap();
    drop(f);
    let (_log, report) = open_streaming(&disk).unwrap();
    assert_eq!(report.torn_tail.unwrap().kept_in, "log.0000000000000008.torn");
    let torn: Vec<_> = disk.list().unwrap().into_iter().filter(|n| n.contains(".torn")).collect();
    assert_eq!(torn, ["log.0000000000000008.torn"]);
}

#[test]
fn a_cut_that_empties_the_log_is_reported_as_an_error() {
    let disk = batched_log(&[4]);
    zero_record(&disk, 1);
    let ((log, report), events) = logged(|| open_streaming(&disk).unwrap());
    let tail = report.torn_tail.expect("a torn tail");
    assert!(tail.log_emptied);
    assert_eq!(tail.intact_records_cut, 3);
    assert_eq!(report.next_lsn, Lsn(1));
    assert_eq!(report.newest_segment_records, 0);
    assert!(read_all(&log).is_empty());
    let error = events.iter().find(|(l, _)| *l == tracing::Level::ERROR).expect("an error event");
    assert!(error.1.contains("without any record"), "{}", error.1);
}

#[test]
fn a_cut_that_leaves_older_segments_does_not_empty_the_log() {
    let disk = MemDisk::new();
    let small = LogOptions { segment_bytes: 100, ..opts() };
    let (log, _) = Log::open(Arc::new(disk.clone()), small.clone()).unwrap();
    for lsn in 1..=6 {
        log.append(&payload(lsn)).unwrap();
        log.flush().unwrap();
    }
    drop(log);
    let newest =
        disk.list().unwrap().into_iter().rfind(|n| parse_segment_name("log", n).is_some()).unwrap();
    let first = parse_segment_name("log", &newest).unwrap();
    // Tear the newest segment's only record.
    disk.edit_file(&newest, |b| b.truncate(SEGMENT_HEADER + 5)).unwrap();
    let (log, report) = Log::open_streaming(Arc::new(disk.clone()), small).unwrap();
    let tail = report.torn_tail.expect("a torn tail");
    assert!(!tail.log_emptied);
    assert_eq!(report.newest_segment_records, 0);
    assert_eq!(report.next_lsn, first);
    assert_eq!(read_all(&log).len() as u64, first.0 - 1);
}

// ---------------------------------------------------------------------------------------------
// Segment headers.

#[test]
fn an_interrupted_segment_creation_is_finished_at_open() {
    // A crash during rotation can leave the new segment empty or with zeros where its header
    // should be (the length landed, the data did not); nothing was written after it.
    for junk in [vec![], vec![0u8; SEGMENT_HEADER], vec![0u8; 7]] {
        let disk = batched_log(&[3, 2]);
        let name = segment_name("log", Lsn(6));
        let f = disk.open(&name, true).unwrap();
        f.write_at(0, &junk).unwrap();
        f.sync().unwrap();
        disk.sync_dir().unwrap();
        let ((log, report), events) = logged(|| open_streaming(&disk).unwrap());
        assert_eq!(report.header_rewritten.as_deref(), Some(name.as_str()));
        assert_eq!(report.next_lsn, Lsn(6));
        assert_eq!(report.torn_tail, None);
        assert!(events.iter().any(|(l, t)| *l == tracing::Level::WARN && t.contains(&name)));
        expect_records(&log, 1, 6);
        assert_eq!(log.append(&payload(6)).unwrap(), Lsn(6));
        log.flush().unwrap();
        drop(log);
        let (log, report) = open_streaming(&disk).unwrap();
        assert_eq!(report.header_rewritten, None);
        expect_records(&log, 1, 7);
    }
}

#[test]
fn an_older_segment_without_its_header_is_corruption() {
    let disk = batched_log(&[3, 2]);
    // A later segment exists, so the first one's header was durable once.
    disk.open(&segment_name("log", Lsn(6)), true).unwrap();
    disk.edit_file(SEGMENT, |b| b[..SEGMENT_HEADER].fill(0)).unwrap();
    let err = open_streaming(&disk).unwrap_err();
    assert!(
        matches!(&err, StorageError::Corrupt { what: "log segment header", name, .. } if name == SEGMENT),
        "{err}"
    );
}

#[test]
fn a_damaged_segment_header_is_corruption() {
    let disk = batched_log(&[3]);
    disk.edit_file(SEGMENT, |b| b[18] ^= 1).unwrap();
    let err = open_streaming(&disk).unwrap_err();
    assert!(matches!(&err, StorageError::Corrupt { what: "log segment header", .. }), "{err}");
}

#[test]
fn a_log_of_format_1_is_refused_naming_its_version() {
    // Format 1: no segment header, records `len u32 | crc u32 | lsn u64 | payload`.
    let disk = MemDisk::new();
    let mut old = Vec::new();
    old.extend_from_slice(&3u32.to_le_bytes());
    let mut crc_input = 1u64.to_le_bytes().to_vec();
    crc_input.extend_from_slice(b"abc");
    old.extend_from_slice(&thor_core::checksum::crc32c(&crc_input).to_le_bytes());
    old.extend_from_slice(&1u64.to_le_bytes());
    old.extend_from_slice(b"abc");
    disk.open(SEGMENT, true).unwrap().write_at(0, &old).unwrap();
    match open_streaming(&disk) {
        Err(e @ StorageError::UnsupportedFormat { found: 1, supported: 2, .. }) => {
            assert!(e.to_string().contains("format version 1"), "{e}");
        }
        other => panic!("expected an unsupported format, got {other:?}"),
    }
    // Refused, not rewritten.
    assert_eq!(disk.file_bytes(SEGMENT).unwrap(), old);
}

// ---------------------------------------------------------------------------------------------
// Streaming reads.

/// A log over several segments (about 3 records each) with records 1..=30, one batch each.
fn multi_segment_log() -> (MemDisk, LogOptions) {
    let disk = MemDisk::new();
    let o = LogOptions { segment_bytes: 150, ..opts() };
    let (log, _) = Log::open(Arc::new(disk.clone()), o.clone()).unwrap();
    for lsn in 1..=30 {
        log.append(&payload(lsn)).unwrap();
        log.flush().unwrap();
    }
    assert!(log.stats().segments_live >= 5);
    (disk, o)
}

#[test]
fn a_reader_streams_the_records_from_any_lsn() {
    let (disk, o) = multi_segment_log();
    let (log, report) = Log::open_streaming(Arc::new(disk.clone()), o).unwrap();
    assert_eq!(report.next_lsn, Lsn(31));
    assert_eq!(report.first_lsn, Lsn(1));
    for from in [1, 2, 4, 5, 17, 30, 31] {
        let mut r = log.reader(Lsn(from)).unwrap();
        assert_eq!(r.end_lsn(), Lsn(31));
        let mut want = from;
        while let Some((lsn, p)) = r.next().unwrap() {
            assert_eq!((lsn, p), (Lsn(want), payload(want).as_slice()));
            want += 1;
        }
        assert_eq!(want, 31, "from {from}");
        // Exhausted readers stay exhausted.
        assert_eq!(r.next().unwrap(), None);
    }
    assert!(matches!(log.reader(Lsn(32)), Err(StorageError::InvalidArgument(_))));
}

#[test]
fn a_reader_refuses_to_start_below_the_truncated_records() {
    let (disk, o) = multi_segment_log();
    let (log, _) = Log::open_streaming(Arc::new(disk), o).unwrap();
    log.truncate_before(Lsn(10)).unwrap();
    let first = log.first_lsn();
    assert!(first > Lsn(1) && first <= Lsn(10));
    assert!(matches!(log.reader(Lsn(first.0 - 1)), Err(StorageError::InvalidArgument(_))));
    let mut r = log.reader(first).unwrap();
    assert_eq!(r.next().unwrap().map(|(l, _)| l), Some(first));
}

#[test]
fn a_reader_returns_only_what_was_durable_when_it_was_made() {
    let disk = batched_log(&[3]);
    let (log, _) = open_streaming(&disk).unwrap();
    let mut r = log.reader(Lsn(1)).unwrap();
    log.append(&payload(4)).unwrap();
    log.flush().unwrap();
    let mut seen = Vec::new();
    while let Some((lsn, _)) = r.next().unwrap() {
        seen.push(lsn.0);
    }
    assert_eq!(seen, vec![1, 2, 3]);
    expect_records(&log, 1, 5);
}

#[test]
fn open_streaming_leaves_older_segments_to_the_reader_which_names_file_and_offset() {
    let (disk, o) = multi_segment_log();
    let segs: Vec<_> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| parse_segment_name("log", n).is_some())
        .collect();
    // Damage the second record of the second segment.
    let second_first = parse_segment_name("log", &segs[1]).unwrap();
    let at = SEGMENT_HEADER + RECORD + RECORD_HEADER + 1;
    disk.edit_file(&segs[1], |b| b[at] ^= 0x20).unwrap();
    // Open reads only headers of older segments, so it succeeds...
    let (log, report) = Log::open_streaming(Arc::new(disk.clone()), o.clone()).unwrap();
    assert_eq!(report.next_lsn, Lsn(31));
    // ... and a reader passing the damage reports it with the file and offset.
    let mut r = log.reader(Lsn(1)).unwrap();
    let err = loop {
        match r.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the damage was not found"),
            Err(e) => break e,
        }
    };
    match err {
        StorageError::Corrupt { what: "log record", name, offset, .. } => {
            assert_eq!(name, segs[1]);
            assert_eq!(offset, (SEGMENT_HEADER + RECORD) as u64);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // A reader starting after the damaged segment never reads it.
    let third_first = parse_segment_name("log", &segs[2]).unwrap();
    assert!(third_first > second_first);
    let mut r = log.reader(third_first).unwrap();
    let mut n = 0;
    while r.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 31 - third_first.0);
    // The convenience open reads everything, so it refuses.
    assert!(Log::open(Arc::new(disk), o).unwrap_err().is_corruption());
}

#[test]
fn a_reader_finds_a_missing_segment() {
    let (disk, o) = multi_segment_log();
    let segs: Vec<_> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| parse_segment_name("log", n).is_some())
        .collect();
    disk.remove(&segs[2]).unwrap();
    let (log, _) = Log::open_streaming(Arc::new(disk), o).unwrap();
    let mut r = log.reader(Lsn(1)).unwrap();
    let err = loop {
        match r.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the gap was not found"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&err, StorageError::Corrupt { what: "log segment sequence", name, .. } if *name == segs[3]),
        "{err}"
    );
}

#[test]
fn memory_is_bounded_by_the_read_chunk_and_the_largest_record() {
    // Records of many sizes, some far larger than the 64-byte read chunk.
    let disk = MemDisk::new();
    let o = LogOptions { record_bytes_max: 5000, ..opts() };
    let (log, _) = Log::open(Arc::new(disk.clone()), o.clone()).unwrap();
    let sizes: Vec<usize> = (0..40).map(|i| (i * 397) % 4500).collect();
    for (i, &n) in sizes.iter().enumerate() {
        log.append(&vec![i as u8; n]).unwrap();
        if i % 3 == 0 {
            log.flush().unwrap();
        }
    }
    log.flush().unwrap();
    drop(log);
    let (log, _) = Log::open_streaming(Arc::new(disk), o.clone()).unwrap();
    let mut r = log.reader(Lsn(1)).unwrap();
    let mut largest = 0;
    let mut i = 0;
    while let Some((lsn, p)) = r.next().unwrap() {
        assert_eq!(lsn, Lsn(i as u64 + 1));
        assert_eq!(p, vec![i as u8; sizes[i]].as_slice());
        largest = largest.max(p.len());
        assert!(
            r.buffer_bytes() <= o.read_chunk_bytes.max(largest + RECORD_HEADER),
            "{}",
            r.buffer_bytes()
        );
        i += 1;
    }
    assert_eq!(i, sizes.len());
    // Skipping records below the start never holds them whole: start at a record smaller than
    // one before it, and the buffer is no larger than the chunk or that record.
    let i = (1..sizes.len()).find(|&i| sizes[..i].iter().any(|&n| n > sizes[i] + 1000)).unwrap();
    let mut r = log.reader(Lsn(i as u64 + 1)).unwrap();
    let (lsn, _) = r.next().unwrap().unwrap();
    assert_eq!(lsn, Lsn(i as u64 + 1));
    assert!(r.buffer_bytes() <= o.read_chunk_bytes.max(sizes[i] + RECORD_HEADER));
}
