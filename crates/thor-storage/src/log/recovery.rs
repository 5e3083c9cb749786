//! Recovery: what [`Log::open_streaming`](crate::Log::open_streaming) does before the log takes
//! appends. The rules and the reasons for them are in [`crate::log`]'s "Recovery" section; this
//! module carries them out:
//!
//! 1. list the segments, check their names and (cheaply) their headers;
//! 2. stream the newest segment's records through a [`Cursor`] until the end or the first
//!    record that fails a check;
//! 3. after a bad record, scan the rest of the segment for intact records ([`scan_after`]): one
//!    from a later flush batch means the bad record is corruption, and open refuses;
//! 4. otherwise the bad record starts a torn tail: copy the tail to a `.torn` file, make that
//!    durable, cut the segment, fsync it, and say so (a `tracing` warning and the report).
//!
//! Memory: one [`Window`] of `read_chunk_bytes` for the scan, one more for checksums of
//! candidate records in the forward scan and for copying a torn tail. Nothing depends on the
//! size of the log or of a record.

use std::sync::Arc;

use thor_core::ids::Lsn;

use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;
use crate::limits::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, TORN_FILES_PER_LSN_MAX};
use crate::log::record::{Defect, Header};
use crate::log::segment::{
    Cursor, HeaderVerdict, Step, Window, crc_of_range, encode_header, judge_header,
    parse_segment_name, segment_name, torn_name,
};
use crate::log::{
    Active, LOG_FORMAT_VERSION, LogOptions, LogStats, OpenReport, SegmentInfo, TornTail,
};

/// What recovery leaves for [`Log`](crate::Log) to start from.
#[derive(Debug)]
pub(crate) struct Recovery {
    /// Every segment, oldest first; the last is the active one.
    pub segments: Vec<SegmentInfo>,
    /// The segment to append to, cut and fsynced.
    pub active: Active,
    /// What open found and did.
    pub report: OpenReport,
    /// The counters of what recovery did (fsyncs, directory syncs, segments created, records
    /// checked, bytes cut).
    pub stats: LogStats,
}

pub(crate) fn corrupt(what: &'static str, name: &str, offset: u64, why: String) -> StorageError {
    StorageError::Corrupt { what, name: name.to_string(), offset, why }
}

/// The error for a segment header that is not one this build can read.
pub(crate) fn bad_header(verdict: HeaderVerdict, name: &str) -> StorageError {
    match verdict {
        HeaderVerdict::OtherVersion(found) => StorageError::UnsupportedFormat {
            what: "log segment",
            name: name.to_string(),
            found,
            supported: LOG_FORMAT_VERSION,
        },
        HeaderVerdict::Unfinished => corrupt(
            "log segment header",
            name,
            0,
            "header missing or incomplete in a segment that is not the newest".to_string(),
        ),
        HeaderVerdict::Bad(why) => corrupt("log segment header", name, 0, why),
        HeaderVerdict::Good => corrupt("log segment header", name, 0, "(no defect)".to_string()),
    }
}

/// Reads the first bytes of segment `file` (up to a header's worth) and judges them.
pub(crate) fn read_header(
    file: &dyn DiskFile,
    file_len: u64,
    first_lsn: Lsn,
) -> Result<HeaderVerdict, StorageError> {
    let mut head = [0u8; SEGMENT_HEADER_BYTES];
    // At most a header's worth, so the conversion is exact.
    let n = file_len.min(SEGMENT_HEADER_BYTES as u64) as usize;
    file.read_exact_at(0, &mut head[..n])?;
    Ok(judge_header(&head[..n], file_len, first_lsn))
}

/// Creates segment `first_lsn` durably: the file, its header (written and fsynced), then its
/// directory entry. Records are written to it only after this returns, so a crash leaves
/// either no file, an unfinished one (see [`HeaderVerdict::Unfinished`]), or a good empty one.
pub(crate) fn create_segment(
    disk: &dyn Disk,
    prefix: &str,
    first_lsn: Lsn,
) -> Result<Active, StorageError> {
    let name = segment_name(prefix, first_lsn);
    let file = disk.open(&name, true)?;
    if !file.is_empty()? {
        // The caller listed every segment, so a non-empty file with the new name is not ours
        // to overwrite.
        return Err(corrupt(
            "log segment",
            &name,
            0,
            "new segment file already has contents".to_string(),
        ));
    }
    file.write_at(0, &encode_header(first_lsn))?;
    file.sync()?;
    disk.sync_dir()?;
    Ok(Active { name, file, len: SEGMENT_HEADER_BYTES as u64 })
}

/// Runs recovery; see the module documentation.
pub(crate) fn recover(disk: &dyn Disk, opts: &LogOptions) -> Result<Recovery, StorageError> {
    let mut stats = LogStats::default();
    let mut segments: Vec<SegmentInfo> = disk
        .list()?
        .into_iter()
        .filter_map(|name| {
            parse_segment_name(&opts.prefix, &name).map(|first_lsn| SegmentInfo { first_lsn, name })
        })
        .collect();
    segments.sort_by_key(|s| s.first_lsn);

    let Some(newest) = segments.last().cloned() else {
        return create_log(disk, opts, stats);
    };
    check_older_segments(disk, &segments)?;
    // The newest segment: header, then every record.
    let file = disk.open(&newest.name, false)?;
    let (file_len, header_rewritten) = newest_header(&*file, &newest)?;
    let mut cursor = Cursor::new(
        Arc::clone(&file),
        newest.first_lsn,
        file_len,
        opts.record_bytes_max,
        opts.read_chunk_bytes,
    );
    let mut records = 0u64;
    let bad = loop {
        match cursor.step(None)? {
            Step::Record { .. } => records += 1,
            Step::End => break None,
            Step::Defect { offset, defect } => break Some((offset, defect)),
        }
    };
    let next_lsn = cursor.next_lsn();
    let mut torn_tail = None;
    if let Some((offset, defect)) = bad {
        let intact = match scan_after(&*file, file_len, offset, next_lsn, newest.first_lsn, opts)? {
            After::SameBatch { intact } => intact,
            After::LaterBatch { offset: later, lsn, batch_first } => {
                let why = format!(
                    "{defect}, but the intact record at offset {later} (LSN {lsn}) belongs to a \
                     later flush batch (from LSN {batch_first}): this record's batch had been \
                     fsynced before that one was written, so it was damaged after it was durable"
                );
                return Err(corrupt("log record", &newest.name, offset, why));
            }
        };
        let kept_in = keep_torn_tail(disk, &*file, opts, next_lsn, offset, file_len)?;
        file.set_len(offset)?;
        let log_emptied = records == 0 && segments.len() == 1;
        let tail = TornTail {
            segment: newest.name.clone(),
            offset,
            bytes: file_len - offset,
            first_lost_lsn: next_lsn,
            kept_in,
            defect: defect.to_string(),
            intact_records_cut: intact,
            log_emptied,
        };
        warn_torn(&tail, records);
        stats.torn_bytes_cut = tail.bytes;
        torn_tail = Some(tail);
    }
    // Make everything the log will report durable, whoever wrote it (the previous process may
    // have died between its write and its fsync), including the cut and a rewritten header.
    file.sync()?;
    stats.fsyncs += 1;
    // The newest segment's directory entry may never have been synced.
    disk.sync_dir()?;
    stats.dir_syncs += 1;
    stats.records_recovered = records;
    let len = torn_tail.as_ref().map_or(file_len, |t| t.offset);
    let report = OpenReport {
        next_lsn,
        first_lsn: segments[0].first_lsn,
        segments: segments.len() as u64,
        created: false,
        newest_segment_records: records,
        torn_tail,
        header_rewritten,
    };
    let active = Active { name: newest.name, file, len };
    Ok(Recovery { segments, active, report, stats })
}

/// Recovery of a log with no segment: its first one, for LSN 1.
fn create_log(
    disk: &dyn Disk,
    opts: &LogOptions,
    mut stats: LogStats,
) -> Result<Recovery, StorageError> {
    let active = create_segment(disk, &opts.prefix, Lsn(1))?;
    stats.fsyncs += 1;
    stats.dir_syncs += 1;
    stats.segments_created += 1;
    let segments = vec![SegmentInfo { first_lsn: Lsn(1), name: active.name.clone() }];
    let report = OpenReport {
        next_lsn: Lsn(1),
        first_lsn: Lsn(1),
        segments: 1,
        created: true,
        newest_segment_records: 0,
        torn_tail: None,
        header_rewritten: None,
    };
    Ok(Recovery { segments, active, report, stats })
}

/// Checks the segments' names and, all but the newest, their headers. Their records are
/// checked by the reader, which must read them anyway; reading them here too would double the
/// cost of every open.
fn check_older_segments(disk: &dyn Disk, segments: &[SegmentInfo]) -> Result<(), StorageError> {
    for seg in segments {
        if seg.first_lsn == Lsn::ZERO {
            return Err(corrupt(
                "log segment",
                &seg.name,
                0,
                "segment named for LSN 0".to_string(),
            ));
        }
    }
    for seg in &segments[..segments.len().saturating_sub(1)] {
        let file = disk.open(&seg.name, false)?;
        let verdict = read_header(&*file, file.len()?, seg.first_lsn)?;
        if verdict != HeaderVerdict::Good {
            return Err(bad_header(verdict, &seg.name));
        }
    }
    Ok(())
}

/// Checks the newest segment's header, rewriting one whose creation a crash interrupted.
/// Returns the segment's length and, if the header was rewritten, the segment's name.
fn newest_header(
    file: &dyn DiskFile,
    newest: &SegmentInfo,
) -> Result<(u64, Option<String>), StorageError> {
    match read_header(file, file.len()?, newest.first_lsn)? {
        HeaderVerdict::Good => Ok((file.len()?, None)),
        HeaderVerdict::Unfinished => {
            // A crash interrupted this segment's creation before its header was durable, and
            // nothing is written to a segment before that: finish the creation.
            tracing::warn!(
                segment = %newest.name,
                "log: the newest segment's header never became durable (a crash interrupted \
                 its creation); rewrote it. The segment holds no records."
            );
            // The file is no longer than a header, so this write restores it whole.
            file.write_at(0, &encode_header(newest.first_lsn))?;
            Ok((SEGMENT_HEADER_BYTES as u64, Some(newest.name.clone())))
        }
        other => Err(bad_header(other, &newest.name)),
    }
}

/// What follows a bad record in the newest segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Only intact records of the bad record's own flush batch (this many), or none.
    SameBatch {
        /// How many intact records were found after the bad one.
        intact: u64,
    },
    /// An intact record of a later flush batch.
    LaterBatch {
        /// Its offset.
        offset: u64,
        /// Its LSN.
        lsn: Lsn,
        /// The first LSN of its batch.
        batch_first: Lsn,
    },
}

/// Scans segment bytes `[bad, end)` for intact records after the bad record at `bad`, which
/// should have carried LSN `expected`. Every offset is tried, since the bad record's length
/// cannot be trusted; a candidate must look plausible (see [`plausible`]) before its checksum
/// is computed, and after an intact record the scan jumps over it, so the cost is one header
/// test per byte plus one checksum per intact record.
pub(crate) fn scan_after(
    file: &dyn DiskFile,
    end: u64,
    bad: u64,
    expected: Lsn,
    segment_first: Lsn,
    opts: &LogOptions,
) -> Result<After, StorageError> {
    let mut headers = Window::new(opts.read_chunk_bytes);
    let mut payloads = Window::new(opts.read_chunk_bytes);
    let mut intact = 0;
    let mut at = bad;
    while at + RECORD_HEADER_BYTES as u64 <= end {
        let bytes = headers.get(file, at, RECORD_HEADER_BYTES, end)?;
        let h = Header::parse(bytes.try_into().expect("the window returns the length asked for"));
        if let Some(batch_first) = plausible(&h, at, end, bad, expected, segment_first, opts) {
            let body = at + RECORD_HEADER_BYTES as u64;
            let crc = crc_of_range(file, &mut payloads, h.crc_start(), body, h.len.into(), end)?;
            if crc == h.crc {
                if batch_first > expected {
                    return Ok(After::LaterBatch { offset: at, lsn: h.lsn, batch_first });
                }
                intact += 1;
                at = body + u64::from(h.len);
                continue;
            }
        }
        at += 1;
    }
    Ok(After::SameBatch { intact })
}

/// Whether header `h` at offset `at` could be a record written after the bad record at `bad`
/// (which should have carried LSN `expected`) in a segment starting at LSN `segment_first`
/// and ending at `end`: its length within bounds and within the segment, its LSN after the bad
/// one by no more than the bytes between them allow, and its batch starting within the
/// segment (a batch goes to one segment). Returns the first LSN of its batch.
fn plausible(
    h: &Header,
    at: u64,
    end: u64,
    bad: u64,
    expected: Lsn,
    segment_first: Lsn,
    opts: &LogOptions,
) -> Option<Lsn> {
    let len = u64::from(h.len);
    let records_max = (end - bad) / RECORD_HEADER_BYTES as u64 + 1;
    let fits = len <= opts.record_bytes_max as u64
        && at + RECORD_HEADER_BYTES as u64 + len <= end
        && h.lsn >= expected
        && h.lsn.0 - expected.0 < records_max
        && h.lsn.0 != u64::MAX;
    let batch_first = h.batch_first()?;
    (fits && batch_first >= segment_first).then_some(batch_first)
}

/// Copies segment bytes `[from, to)` to a `.torn` file (see [`torn_name`]) a chunk at a time,
/// fsyncs it and the directory, and returns its name. Done before the cut, so that a crash in
/// between leaves the tail in the segment or in the file (or both), never in neither.
///
/// *Repeated opens leave nothing behind.* An open that fails after this (the disk is full, so
/// the cut cannot be made durable) is followed by another, which finds the same tail: a file
/// that already holds exactly these bytes is the one to keep (it is synced again and reused),
/// and a file holding a prefix of them (empty included) is an earlier copy cut short, by a
/// crash or by a full disk, whose name is reused. If the copy fails, the file is removed: the
/// bytes are still in the segment, which is not cut. So a retry loop of opens on a full disk
/// never adds a file, and the [`TORN_FILES_PER_LSN_MAX`] names are spent only on different
/// tails of the same LSN.
fn keep_torn_tail(
    disk: &dyn Disk,
    segment: &dyn DiskFile,
    opts: &LogOptions,
    lsn: Lsn,
    from: u64,
    to: u64,
) -> Result<String, StorageError> {
    // At most one chunk, which is a usize.
    let chunk = (to - from).min(opts.read_chunk_bytes as u64).max(1) as usize;
    let mut buf = vec![0u8; chunk];
    let mut theirs = vec![0u8; chunk];
    let mut name = None;
    for n in 0..TORN_FILES_PER_LSN_MAX {
        let candidate = torn_name(&opts.prefix, lsn, n);
        if !disk.exists(&candidate)? {
            name = Some(candidate);
            break;
        }
        let existing = disk.open(&candidate, false)?;
        match compare_copy(segment, from, to, &*existing, &mut buf, &mut theirs)? {
            Copy::Complete => {
                existing.sync()?;
                disk.sync_dir()?;
                return Ok(candidate);
            }
            Copy::Prefix => {
                name = Some(candidate);
                break;
            }
            Copy::Other => {}
        }
    }
    let Some(name) = name else {
        return Err(StorageError::InvalidArgument(format!(
            "{TORN_FILES_PER_LSN_MAX} files keeping torn log tails at LSN {lsn} already exist \
             ({}...); move them out of the database directory",
            torn_name(&opts.prefix, lsn, 0)
        )));
    };
    let copied = (|| {
        let out = disk.open(&name, true)?;
        let mut pos = from;
        while pos < to {
            let n = (to - pos).min(buf.len() as u64) as usize;
            segment.read_exact_at(pos, &mut buf[..n])?;
            out.write_at(pos - from, &buf[..n])?;
            pos += n as u64;
        }
        out.set_len(to - from)?;
        out.sync()?;
        disk.sync_dir()
    })();
    if let Err(e) = copied {
        // The segment still holds the tail (it is cut only after this returns): a copy that
        // could not be finished keeps nothing and must not stay to take a name.
        let _ = disk.remove(&name);
        let _ = disk.sync_dir();
        return Err(e);
    }
    Ok(name)
}

/// How an existing `.torn` file compares with the tail about to be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copy {
    /// It holds exactly the tail's bytes.
    Complete,
    /// It holds a prefix of them (possibly nothing): a copy cut short.
    Prefix,
    /// It holds something else: another tail's evidence, kept.
    Other,
}

/// Compares `file` with segment bytes `[from, to)`, a chunk at a time.
fn compare_copy(
    segment: &dyn DiskFile,
    from: u64,
    to: u64,
    file: &dyn DiskFile,
    ours: &mut [u8],
    theirs: &mut [u8],
) -> Result<Copy, StorageError> {
    let len = file.len()?;
    if len > to - from {
        return Ok(Copy::Other);
    }
    let mut pos = 0u64;
    while pos < len {
        let n = (len - pos).min(ours.len() as u64) as usize;
        segment.read_exact_at(from + pos, &mut ours[..n])?;
        file.read_exact_at(pos, &mut theirs[..n])?;
        if ours[..n] != theirs[..n] {
            return Ok(Copy::Other);
        }
        pos += n as u64;
    }
    Ok(if len == to - from { Copy::Complete } else { Copy::Prefix })
}

/// Says loudly what a cut did: a warning always, an error when the log is left with no record.
fn warn_torn(t: &TornTail, records_kept: u64) {
    tracing::warn!(
        segment = %t.segment,
        offset = t.offset,
        bytes = t.bytes,
        first_lost_lsn = %t.first_lost_lsn,
        kept_in = %t.kept_in,
        defect = %t.defect,
        intact_records_cut = t.intact_records_cut,
        records_kept = records_kept,
        "log: cut a torn tail (an unfinished flush that was never acknowledged) off the newest \
         segment; its bytes are kept in the named file"
    );
    if t.log_emptied {
        tracing::error!(
            segment = %t.segment,
            kept_in = %t.kept_in,
            "log: the torn-tail cut left the log without any record: everything it held was in \
             the one unfinished flush. If records were expected here, stop and inspect the kept \
             bytes before writing more."
        );
    }
}

/// The error for a record that fails its check where no tear is possible: anywhere the
/// reader passes (open has already cut the newest segment's torn tail).
pub(crate) fn record_defect(name: &str, offset: u64, defect: &Defect) -> StorageError {
    corrupt("log record", name, offset, defect.to_string())
}
