//! [`LogBackReader`]: the durable records of a log from the newest to the oldest, in bounded
//! memory, with every record checked.
//!
//! Restart of whole-page logging (`thor_recovery::wpl::restart`, the QuickStore paper's WPL)
//! reads the log backward from its end to the newest checkpoint. The record layout (see
//! [`crate::log`]) has no back links: a record's start is known only from the one before it.
//! So the reader takes one segment at a time, newest first, and *indexes* it with one forward
//! pass (the same checks as [`LogReader`](crate::LogReader): length bound, bytes left, CRC,
//! LSN sequence, batch index; payloads are checksummed a chunk at a time, never held whole),
//! keeping only each record's offset. It then returns that segment's records newest first,
//! reading each again by its offset and checking it again (its header must carry the LSN and
//! a length that the index pass accepted, and its CRC must match), since the file could have
//! changed between the two reads: no byte is trusted because it was good a moment ago.
//!
//! ```text
//!   segments:  [ log.1 ] [ log.3e9 ] [ log.7d1 (active, durable up to a snapshot) ]
//!   prev():                            ◄── index pass ──►, then records newest first
//!              then log.3e9 the same way, then log.1, then None
//! ```
//!
//! Segments are checked to follow each other: a segment's records must end exactly where the
//! next one begins (or, for the active segment, at the durable end of the snapshot), so a
//! missing or overlapping segment is [`StorageError::Corrupt`], as for the forward reader.
//!
//! *Cost:* a backward pass that stops in segment `k` reads the segments after `k` twice (the
//! index pass, then the records) and segment `k` too. A format with back links would read
//! them once; this one needs no format change, and a WPL restart reads about the log written
//! since its newest checkpoint, which the checkpoint interval bounds.
//!
//! *Memory:* the read window of `read_chunk_bytes`, the index of one segment (8 bytes per
//! record: at most the segment's bytes / 20), and the caller's buffer, which holds the record
//! returned (at most `record_bytes_max`).
//!
//! Like the forward reader it reads a snapshot (records appended later are not returned) and
//! must not race [`Log::truncate_before`](crate::Log::truncate_before) over segments it has
//! yet to open.

use std::sync::Arc;

use thor_core::checksum::Crc32c;
use thor_core::ids::Lsn;

use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;
use crate::limits::RECORD_HEADER_BYTES;
use crate::log::SegmentInfo;
use crate::log::record::Header;
use crate::log::recovery::{bad_header, corrupt, read_header, record_defect};
use crate::log::segment::{Cursor, HeaderVerdict, Step};

/// The durable records of a log, newest first; see the module documentation. Made by
/// [`Log::backward_reader`](crate::Log::backward_reader).
#[derive(Debug)]
pub struct LogBackReader {
    /// The directory holding the segments.
    disk: Arc<dyn Disk>,
    /// The segments of the snapshot, oldest first; the last is the active one.
    segments: Vec<SegmentInfo>,
    /// Segments not yet indexed: `segments[..left]`.
    left: usize,
    /// Bytes of the active segment that held durable records at the snapshot.
    last_end: u64,
    /// The LSN after the last durable record at the snapshot.
    end_lsn: Lsn,
    /// The largest payload believed.
    record_bytes_max: usize,
    /// Bytes read at a time by the index pass.
    chunk: usize,
    /// The segment whose records are being returned: its file, name, first LSN and the bytes
    /// the index pass read.
    current: Option<Indexed>,
    /// Where the segment that was indexed last begins (the end the next older segment's
    /// records must reach).
    next_first: Lsn,
}

/// A segment after its index pass.
#[derive(Debug)]
struct Indexed {
    file: Arc<dyn DiskFile>,
    name: String,
    first_lsn: Lsn,
    end: u64,
    /// The offsets of the records not yet returned, oldest first: record `i` has LSN
    /// `first_lsn + i`.
    offsets: Vec<u64>,
}

impl LogBackReader {
    /// A reader over `segments` (non-empty; the last is the active one, durable up to
    /// `last_end` bytes and `end_lsn`).
    pub(crate) fn new(
        disk: Arc<dyn Disk>,
        segments: Vec<SegmentInfo>,
        last_end: u64,
        end_lsn: Lsn,
        record_bytes_max: usize,
        chunk: usize,
    ) -> LogBackReader {
        let left = segments.len();
        LogBackReader {
            disk,
            segments,
            left,
            last_end,
            end_lsn,
            record_bytes_max,
            chunk,
            current: None,
            next_first: end_lsn,
        }
    }

    /// The first LSN of the oldest segment of the snapshot: the oldest record the reader can
    /// return (equal to [`end_lsn`](Self::end_lsn) if the log holds none).
    pub fn first_lsn(&self) -> Lsn {
        self.segments.first().map_or(self.end_lsn, |s| s.first_lsn)
    }

    /// The LSN after the newest record the reader returns: the log's durable end at the
    /// snapshot.
    pub fn end_lsn(&self) -> Lsn {
        self.end_lsn
    }

    /// The record before the one returned last (the newest durable one, the first time): its
    /// payload replaces `buf`'s contents and its LSN is returned; `None` past the oldest.
    pub fn prev(&mut self, buf: &mut Vec<u8>) -> Result<Option<Lsn>, StorageError> {
        loop {
            if let Some(seg) = self.current.as_mut()
                && let Some(offset) = seg.offsets.pop()
            {
                let lsn = Lsn(seg.first_lsn.0 + seg.offsets.len() as u64);
                read_again(seg, offset, lsn, self.record_bytes_max, buf)?;
                return Ok(Some(lsn));
            }
            self.current = None;
            if self.left == 0 {
                return Ok(None);
            }
            self.left -= 1;
            self.index(self.left)?;
        }
    }

    /// The index pass over segment `i`: checks its header and every record, and keeps their
    /// offsets.
    fn index(&mut self, i: usize) -> Result<(), StorageError> {
        let seg = &self.segments[i];
        let last = i + 1 == self.segments.len();
        let file = self.disk.open(&seg.name, false)?;
        let file_len = file.len()?;
        let verdict = read_header(&*file, file_len, seg.first_lsn)?;
        if verdict != HeaderVerdict::Good {
            return Err(bad_header(verdict, &seg.name));
        }
        let end = if last { self.last_end.min(file_len) } else { file_len };
        let mut cursor =
            Cursor::new(Arc::clone(&file), seg.first_lsn, end, self.record_bytes_max, self.chunk);
        let mut offsets = Vec::new();
        loop {
            match cursor.step(None)? {
                Step::Record { offset, .. } => offsets.push(offset),
                Step::Defect { offset, defect } => {
                    return Err(record_defect(&seg.name, offset, &defect));
                }
                Step::End => break,
            }
        }
        if cursor.next_lsn() != self.next_first {
            let why = if last {
                format!(
                    "the segment's records end before LSN {}, but the log's durable end is \
                     LSN {} (the file changed under the log)",
                    cursor.next_lsn(),
                    self.next_first
                )
            } else {
                format!(
                    "the segment's records end before LSN {}, but the next segment starts at \
                     LSN {} (missing or overlapping segment)",
                    cursor.next_lsn(),
                    self.next_first
                )
            };
            return Err(corrupt("log segment sequence", &seg.name, end, why));
        }
        self.next_first = seg.first_lsn;
        self.current =
            Some(Indexed { file, name: seg.name.clone(), first_lsn: seg.first_lsn, end, offsets });
        Ok(())
    }
}

/// Reads the record at `offset` of `seg` into `buf`, checking that it is still the record the
/// index pass accepted there: LSN `lsn`, a believable length inside the indexed bytes, and its
/// CRC.
fn read_again(
    seg: &Indexed,
    offset: u64,
    lsn: Lsn,
    record_bytes_max: usize,
    buf: &mut Vec<u8>,
) -> Result<(), StorageError> {
    let changed = |why: String| corrupt("log record", &seg.name, offset, why);
    let mut head = [0u8; RECORD_HEADER_BYTES];
    seg.file.read_exact_at(offset, &mut head)?;
    let header = Header::parse(&head);
    if header.lsn != lsn {
        return Err(changed(format!(
            "read again, the record carries LSN {} where the index pass found LSN {lsn}",
            header.lsn
        )));
    }
    let len = header.len as usize;
    let payload_at = offset + RECORD_HEADER_BYTES as u64;
    if len > record_bytes_max || payload_at + header.len as u64 > seg.end {
        return Err(changed(format!("read again, the record's length {len} is not believable")));
    }
    buf.clear();
    buf.resize(len, 0);
    seg.file.read_exact_at(payload_at, buf)?;
    let mut crc: Crc32c = header.crc_start();
    crc.update(buf);
    if crc.finish() != header.crc {
        buf.clear();
        return Err(changed("read again, the record fails its checksum".to_string()));
    }
    Ok(())
}
