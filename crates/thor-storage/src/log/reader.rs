//! [`LogReader`]: the durable records of a log, one at a time, in bounded memory.
//!
//! A reader is made by [`Log::reader`](crate::Log::reader) from a snapshot of the log: its
//! segments from the one holding the first wanted LSN on, and the durable end of the active
//! segment at that moment. It then reads the segment files itself (it owns an `Arc` of the
//! disk, not a borrow of the log), so it can outlive the call that made it and run beside
//! appends: records appended after the snapshot are not returned.
//!
//! Every record it passes is checked, including those below the wanted LSN in the first
//! segment (they are checksummed a chunk at a time, never held whole). Open has already cut the
//! newest segment's torn tail, so no defect is a tear here: any bad record is
//! [`StorageError::Corrupt`] naming the file and offset, and so is a segment that does not
//! continue the previous one's LSNs (a missing or overlapping segment).
//!
//! Memory: one read buffer of `read_chunk_bytes`, grown to hold the largest record returned
//! (at most `record_bytes_max` plus its header) when a record is larger than a chunk.
//!
//! A reader must not race [`Log::truncate_before`](crate::Log::truncate_before) over the
//! segments it has yet to open: a segment deleted under it is [`StorageError::NotFound`].
//! Truncation only deletes segments below the checkpoint, which a reader started at the
//! checkpoint never needs.

use std::sync::Arc;

use thor_core::ids::Lsn;

use crate::disk::Disk;
use crate::error::StorageError;
use crate::log::SegmentInfo;
use crate::log::recovery::{bad_header, corrupt, read_header, record_defect};
use crate::log::segment::{Cursor, HeaderVerdict, Step};

/// A lending iterator over the durable records of a log with LSN ≥ a starting point; see the
/// module documentation. Made by [`Log::reader`](crate::Log::reader).
#[derive(Debug)]
pub struct LogReader {
    /// The directory holding the segments.
    disk: Arc<dyn Disk>,
    /// The segments to read, from the one holding `from` to the active one (a snapshot).
    segments: Vec<SegmentInfo>,
    /// The index in `segments` of the segment being read (or to open next).
    index: usize,
    /// Bytes of the last segment that held durable records when the reader was made.
    last_end: u64,
    /// The LSN after the last durable record when the reader was made.
    end_lsn: Lsn,
    /// The first LSN to return.
    from: Lsn,
    /// The largest payload believed.
    record_bytes_max: usize,
    /// Bytes read at a time.
    chunk: usize,
    /// The open segment's cursor.
    cursor: Option<Cursor>,
}

impl LogReader {
    /// A reader over `segments` (non-empty; the last is the active one, durable up to
    /// `last_end` bytes and `end_lsn`), returning records from `from` on.
    pub(crate) fn new(
        disk: Arc<dyn Disk>,
        segments: Vec<SegmentInfo>,
        last_end: u64,
        end_lsn: Lsn,
        from: Lsn,
        record_bytes_max: usize,
        chunk: usize,
    ) -> LogReader {
        LogReader {
            disk,
            segments,
            index: 0,
            last_end,
            end_lsn,
            from,
            record_bytes_max,
            chunk,
            cursor: None,
        }
    }

    /// The LSN after the last record this reader returns: the log's durable end when the reader
    /// was made.
    pub fn end_lsn(&self) -> Lsn {
        self.end_lsn
    }

    /// The bytes of read buffer held now: at most `read_chunk_bytes`, or the largest record
    /// returned so far with its header if that is larger. For tests of the memory bound.
    pub fn buffer_bytes(&self) -> usize {
        self.cursor.as_ref().map_or(0, Cursor::buffer_bytes)
    }

    /// The next record (its LSN and payload), or `None` after the last durable one. The payload
    /// borrows the reader's buffer until the next call.
    #[allow(
        clippy::should_implement_trait,
        reason = "a lending iterator: the payload borrows the reader, which Iterator cannot express"
    )]
    pub fn next(&mut self) -> Result<Option<(Lsn, &[u8])>, StorageError> {
        let lsn = loop {
            if self.cursor.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let cursor = self.cursor.as_mut().expect("opened above");
            match cursor.step(Some(self.from))? {
                Step::Record { lsn, kept: true, .. } => break lsn,
                Step::Record { kept: false, .. } => {}
                Step::Defect { offset, defect } => {
                    return Err(record_defect(&self.segments[self.index].name, offset, &defect));
                }
                Step::End => {
                    let next = cursor.next_lsn();
                    let end = cursor.end();
                    self.cursor = None;
                    self.index += 1;
                    match self.segments.get(self.index) {
                        Some(seg) if seg.first_lsn != next => {
                            let why = format!(
                                "segment starts at LSN {} but the previous segment ends before \
                                 LSN {next} (missing or overlapping segment)",
                                seg.first_lsn
                            );
                            return Err(corrupt("log segment sequence", &seg.name, 0, why));
                        }
                        Some(_) => {}
                        None if next != self.end_lsn => {
                            let last = &self.segments[self.index - 1];
                            let why = format!(
                                "the segment's records end before LSN {next}, but the log's \
                                 durable end is LSN {} (the file changed under the log)",
                                self.end_lsn
                            );
                            return Err(corrupt("log segment", &last.name, end, why));
                        }
                        None => return Ok(None),
                    }
                }
            }
        };
        let cursor = self.cursor.as_ref().expect("a record was just read through it");
        Ok(Some((lsn, cursor.payload())))
    }

    /// Opens the segment at `index` and checks its header; `false` when none is left.
    fn open_next(&mut self) -> Result<bool, StorageError> {
        let Some(seg) = self.segments.get(self.index) else { return Ok(false) };
        let last = self.index + 1 == self.segments.len();
        let file = self.disk.open(&seg.name, false)?;
        let file_len = file.len()?;
        let verdict = read_header(&*file, file_len, seg.first_lsn)?;
        if verdict != HeaderVerdict::Good {
            return Err(bad_header(verdict, &seg.name));
        }
        // The active segment is read only up to its durable end at the snapshot; a flush may
        // be writing beyond it.
        let end = if last { self.last_end.min(file_len) } else { file_len };
        self.cursor =
            Some(Cursor::new(file, seg.first_lsn, end, self.record_bytes_max, self.chunk));
        Ok(true)
    }
}
