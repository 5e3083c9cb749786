//! Segment files: their names, their header, and a streaming cursor over their records.
//!
//! The layouts are documented in [`crate::log`]. This module holds the pieces that both
//! recovery ([`Log::open_streaming`](crate::Log::open_streaming)) and the
//! [`LogReader`](crate::log::LogReader) use:
//!
//! - [`segment_name`] / [`parse_segment_name`] and [`torn_name`]: the file names;
//! - [`encode_header`] / [`judge_header`]: the 24-byte segment header;
//! - [`Window`]: a bounded read buffer over a file, so that nothing ever holds a whole segment;
//! - [`Cursor`]: reads a segment's records one by one through a window, checking each with a
//!   [`Checker`], and holds a record's payload in memory only when asked to.

use std::sync::Arc;

use thor_core::checksum::Crc32c;
use thor_core::ids::Lsn;

use crate::disk::DiskFile;
use crate::error::StorageError;
use crate::limits::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::log::LOG_FORMAT_VERSION;
use crate::log::record::{Checker, Defect, Header};

/// The first 8 bytes of every segment of [`LOG_FORMAT_VERSION`] 2 and later.
pub const SEGMENT_MAGIC: [u8; 8] = *b"thor-log";

/// The file name of the segment whose first record has LSN `first`.
pub fn segment_name(prefix: &str, first: Lsn) -> String {
    format!("{prefix}.{:016x}", first.0)
}

/// The first LSN encoded in `name` if it is a segment name of this prefix (exactly 16
/// lowercase hex digits after `{prefix}.`), else `None`.
pub fn parse_segment_name(prefix: &str, name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix(prefix)?.strip_prefix('.')?;
    if digits.len() != 16
        || !digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(digits, 16).ok().map(Lsn)
}

/// The name of the file that keeps the bytes of a torn tail whose first lost record had LSN
/// `lsn`: `{prefix}.{lsn:016x}.torn`, or with `.{n}` appended for the `n`-th such file of the
/// same LSN (a crash during recovery can cut the same tail twice). Never a segment name.
pub fn torn_name(prefix: &str, lsn: Lsn, n: u32) -> String {
    if n == 0 {
        format!("{prefix}.{:016x}.torn", lsn.0)
    } else {
        format!("{prefix}.{:016x}.torn.{n}", lsn.0)
    }
}

/// The header of the segment whose first record has LSN `first_lsn`.
pub fn encode_header(first_lsn: Lsn) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut out = [0u8; SEGMENT_HEADER_BYTES];
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&first_lsn.0.to_le_bytes());
    let crc = header_crc(&out);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32C of a segment header's bytes other than the checksum itself (0..12 and 16..24).
fn header_crc(h: &[u8; SEGMENT_HEADER_BYTES]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(&h[0..12]);
    crc.update(&h[16..24]);
    crc.finish()
}

/// What a segment's first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderVerdict {
    /// A header of this format, naming the expected first LSN.
    Good,
    /// The file is no longer than a header and holds only the expected header's bytes or
    /// zeros: a segment whose creation a crash interrupted before its header was durable.
    /// Nothing was ever written after it (records follow only a synced header).
    Unfinished,
    /// A log segment of another format version.
    OtherVersion(u32),
    /// Not a header of a segment with this name; why.
    Bad(String),
}

/// Judges the first `min(file_len, 24)` bytes `head` of segment file whose name says its first
/// LSN is `first_lsn`. Never panics.
pub fn judge_header(head: &[u8], file_len: u64, first_lsn: Lsn) -> HeaderVerdict {
    let expected = encode_header(first_lsn);
    if head == expected {
        return HeaderVerdict::Good;
    }
    if file_len <= SEGMENT_HEADER_BYTES as u64
        && head.iter().zip(expected.iter()).all(|(&b, &e)| b == 0 || b == e)
    {
        return HeaderVerdict::Unfinished;
    }
    // Format 1 had no segment header: its files start with a record whose LSN (bytes 8..16)
    // is the one in the name. Recognising it turns "garbage" into "old format".
    if head.get(0..8).is_some_and(|m| m != SEGMENT_MAGIC)
        && head.get(8..16).is_some_and(|l| l == first_lsn.0.to_le_bytes())
    {
        return HeaderVerdict::OtherVersion(1);
    }
    let Some(h) = head.first_chunk::<SEGMENT_HEADER_BYTES>() else {
        return HeaderVerdict::Bad(format!("segment header cut short ({} bytes)", head.len()));
    };
    if h[0..8] != SEGMENT_MAGIC {
        return HeaderVerdict::Bad("no log segment header (wrong magic)".to_string());
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    let stored = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    if stored != header_crc(h) {
        return HeaderVerdict::Bad("segment header checksum mismatch".to_string());
    }
    if version != LOG_FORMAT_VERSION {
        return HeaderVerdict::OtherVersion(version);
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&h[16..24]);
    let lsn = Lsn(u64::from_le_bytes(lsn));
    if lsn != first_lsn {
        return HeaderVerdict::Bad(format!(
            "segment header says its first LSN is {lsn}, its name says {first_lsn}"
        ));
    }
    HeaderVerdict::Good
}

/// A read buffer over a file: bytes `[start, start + filled)` of it, refilled in chunks. It
/// holds at most a chunk (less if the file is smaller), and grows beyond that only when asked
/// for a longer range at once (a whole record).
#[derive(Debug)]
pub struct Window {
    /// The bytes held; `buf.len()` is the capacity in use (at least one chunk once used).
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    start: u64,
    /// How many bytes of `buf` hold file data.
    filled: usize,
    /// Bytes read at a time.
    chunk: usize,
}

impl Window {
    /// An empty window that reads `chunk` bytes at a time (allocated on first use).
    pub fn new(chunk: usize) -> Window {
        Window { buf: Vec::new(), start: 0, filled: 0, chunk }
    }

    /// The bytes held now (for the memory bound's tests).
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes `[at, at + len)` if the window holds them, without reading.
    pub fn held(&self, at: u64, len: usize) -> Option<&[u8]> {
        if len == 0 {
            return Some(&[]);
        }
        let lo = usize::try_from(at.checked_sub(self.start)?).ok()?;
        self.buf.get(lo..lo.checked_add(len)?).filter(|_| lo + len <= self.filled)
    }

    /// Bytes `[at, at + len)` of `file`, reading what the window does not hold yet. The caller
    /// guarantees `at + len <= end` and that `file` holds `end` bytes; a file shorter than that
    /// is [`StorageError::UnexpectedEof`].
    pub fn get(
        &mut self,
        file: &dyn DiskFile,
        at: u64,
        len: usize,
        end: u64,
    ) -> Result<&[u8], StorageError> {
        if len == 0 {
            return Ok(&[]);
        }
        let held_end = self.start + self.filled as u64;
        if at >= self.start && at + len as u64 <= held_end {
            // Both lie within the window, whose length is a usize.
            let lo = (at - self.start) as usize;
            return Ok(&self.buf[lo..lo + len]);
        }
        if at >= self.start && at < held_end {
            // Keep the held bytes from `at` on; read only what follows them.
            let lo = (at - self.start) as usize;
            self.buf.copy_within(lo..self.filled, 0);
            self.filled -= lo;
        } else {
            self.filled = 0;
        }
        self.start = at;
        // A chunk, or less when fewer bytes are left: a small segment costs a small buffer.
        let left = usize::try_from(end.saturating_sub(at)).unwrap_or(usize::MAX);
        let capacity = len.max(self.chunk.min(left));
        if self.buf.len() < capacity {
            self.buf.resize(capacity, 0);
        }
        let from = self.start + self.filled as u64;
        // At most the free room, which is a usize.
        let want = ((self.buf.len() - self.filled) as u64).min(end.saturating_sub(from)) as usize;
        let got = file.read_at(from, &mut self.buf[self.filled..self.filled + want])?;
        self.filled += got;
        if self.filled < len {
            return Err(StorageError::UnexpectedEof {
                name: file.name().to_string(),
                offset: at,
                len,
            });
        }
        Ok(&self.buf[..len])
    }
}

/// CRC-32C of bytes `[at, at + len)` of `file`, read through `window` one chunk at a time.
pub fn crc_of_range(
    file: &dyn DiskFile,
    window: &mut Window,
    mut crc: Crc32c,
    at: u64,
    len: u64,
    end: u64,
) -> Result<u32, StorageError> {
    let mut pos = at;
    let stop = at + len;
    while pos < stop {
        // At most one chunk, which is a usize.
        let n = (stop - pos).min(window.chunk as u64) as usize;
        crc.update(window.get(file, pos, n, end)?);
        pos += n as u64;
    }
    Ok(crc.finish())
}

/// One step of a [`Cursor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An intact record, the next in sequence.
    Record {
        /// Its LSN.
        lsn: Lsn,
        /// Its offset in the segment.
        offset: u64,
        /// Whether its payload was kept: then [`Cursor::payload`] returns it.
        kept: bool,
    },
    /// The end of the bytes to read, reached cleanly.
    End,
    /// The record at `offset` fails a check; the cursor stays there.
    Defect {
        /// Where the defective record starts.
        offset: u64,
        /// Why it fails.
        defect: Defect,
    },
}

/// Reads and checks the records of one segment in order, through a bounded [`Window`].
#[derive(Debug)]
pub struct Cursor {
    /// The segment.
    file: Arc<dyn DiskFile>,
    /// How many of its bytes to read (the file's length, or a snapshot of the active
    /// segment's length).
    end: u64,
    /// Where the next record starts.
    offset: u64,
    /// What the next record must look like.
    checker: Checker,
    /// The read buffer.
    window: Window,
    /// Where the last kept payload lies in the file (offset, length); the window holds it.
    kept: Option<(u64, usize)>,
}

impl Cursor {
    /// A cursor over the records of segment `file` (whose header the caller has checked),
    /// reading its bytes up to `end`.
    pub fn new(
        file: Arc<dyn DiskFile>,
        first_lsn: Lsn,
        end: u64,
        record_bytes_max: usize,
        chunk: usize,
    ) -> Cursor {
        Cursor {
            file,
            end,
            offset: SEGMENT_HEADER_BYTES as u64,
            checker: Checker::new(first_lsn, record_bytes_max),
            window: Window::new(chunk),
            kept: None,
        }
    }

    /// The LSN the next record must carry.
    pub fn next_lsn(&self) -> Lsn {
        self.checker.next_lsn()
    }

    /// The bytes the cursor reads up to.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The read buffer's size now (for the memory bound's tests).
    pub fn buffer_bytes(&self) -> usize {
        self.window.capacity()
    }

    /// The payload of the record the last [`Cursor::step`] returned with `kept: true` (empty
    /// if there is none).
    pub fn payload(&self) -> &[u8] {
        self.kept.and_then(|(at, len)| self.window.held(at, len)).unwrap_or(&[])
    }

    /// Reads and checks the next record. Its payload is held in memory (and available from
    /// [`Cursor::payload`]) only if `keep_from` is given and the record's LSN is at least that;
    /// otherwise its checksum is computed a chunk at a time, so that skipping a record never
    /// holds it whole.
    pub fn step(&mut self, keep_from: Option<Lsn>) -> Result<Step, StorageError> {
        self.kept = None;
        let at = self.offset;
        if at >= self.end {
            return Ok(Step::End);
        }
        let room = self.end - at;
        if room < RECORD_HEADER_BYTES as u64 {
            return Ok(Step::Defect { offset: at, defect: Defect::ShortHeader { have: room } });
        }
        let bytes = self.window.get(&*self.file, at, RECORD_HEADER_BYTES, self.end)?;
        let header =
            Header::parse(bytes.try_into().expect("the window returns the length asked for"));
        let len = match self.checker.check_header(&header, room - RECORD_HEADER_BYTES as u64) {
            Ok(len) => len,
            Err(defect) => return Ok(Step::Defect { offset: at, defect }),
        };
        let payload_at = at + RECORD_HEADER_BYTES as u64;
        let keep = keep_from.is_some_and(|from| header.lsn >= from);
        let crc = if keep {
            let mut crc = header.crc_start();
            crc.update(self.window.get(&*self.file, payload_at, len, self.end)?);
            crc.finish()
        } else {
            crc_of_range(
                &*self.file,
                &mut self.window,
                header.crc_start(),
                payload_at,
                len as u64,
                self.end,
            )?
        };
        if let Err(defect) = self.checker.accept(&header, crc) {
            return Ok(Step::Defect { offset: at, defect });
        }
        self.offset = payload_at + len as u64;
        if keep {
            // Still held: nothing was read since the payload was fetched.
            self.kept = Some((payload_at, len));
        }
        Ok(Step::Record { lsn: header.lsn, offset: at, kept: keep })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip_and_reject_lookalikes() {
        assert_eq!(segment_name("log", Lsn(1)), "log.0000000000000001");
        assert_eq!(segment_name("log", Lsn(0x3e9)), "log.00000000000003e9");
        for lsn in [1, 0x3e9, u64::MAX - 1] {
            assert_eq!(parse_segment_name("log", &segment_name("log", Lsn(lsn))), Some(Lsn(lsn)));
        }
        for other in [
            "log",
            "log.",
            "log.1",
            "log.00000000000003E9",
            "log.00000000000003e9.tmp",
            "log.00000000000003e9.torn",
            "logx.0000000000000001",
            "xlog.0000000000000001",
            "log.+000000000000001",
        ] {
            assert_eq!(parse_segment_name("log", other), None, "{other}");
        }
        // A prefix with a dot in it still parses exactly.
        assert_eq!(parse_segment_name("a.b", "a.b.0000000000000002"), Some(Lsn(2)));
        assert_eq!(torn_name("log", Lsn(0x3e9), 0), "log.00000000000003e9.torn");
        assert_eq!(torn_name("log", Lsn(0x3e9), 2), "log.00000000000003e9.torn.2");
        assert_eq!(parse_segment_name("log", &torn_name("log", Lsn(1), 1)), None);
    }

    #[test]
    fn headers_are_judged() {
        let h = encode_header(Lsn(7));
        assert_eq!(&h[0..8], b"thor-log");
        assert_eq!(judge_header(&h, 100, Lsn(7)), HeaderVerdict::Good);
        // A complete header with no records after it is a good, empty segment.
        assert_eq!(judge_header(&h, 24, Lsn(7)), HeaderVerdict::Good);
        assert!(matches!(judge_header(&h, 100, Lsn(8)), HeaderVerdict::Bad(_)));
        // An interrupted creation: empty, zeros, or the header itself with nothing after.
        assert_eq!(judge_header(&[], 0, Lsn(7)), HeaderVerdict::Unfinished);
        assert_eq!(judge_header(&[0; 24], 24, Lsn(7)), HeaderVerdict::Unfinished);
        assert_eq!(judge_header(&h[..10], 10, Lsn(7)), HeaderVerdict::Unfinished);
        // The header with records after it is judged as a header, not as unfinished.
        let mut bad = h;
        bad[20] ^= 1;
        assert!(matches!(judge_header(&bad, 100, Lsn(7)), HeaderVerdict::Bad(_)));
        // Garbage of header size is not unfinished.
        assert!(matches!(judge_header(&[0xAA; 24], 24, Lsn(7)), HeaderVerdict::Bad(_)));
        // Another version, and format 1 (no header, a record of the named LSN first).
        let mut v9 = h;
        v9[8] = 9;
        let crc = header_crc(&v9);
        v9[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(judge_header(&v9, 100, Lsn(7)), HeaderVerdict::OtherVersion(9));
        let mut v1 = [0u8; 24];
        v1[8..16].copy_from_slice(&7u64.to_le_bytes());
        v1[0] = 3;
        assert_eq!(judge_header(&v1, 100, Lsn(7)), HeaderVerdict::OtherVersion(1));
    }
}
