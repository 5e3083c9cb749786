//! Page records: the regions of one page a transaction changed, with their new bytes and, when
//! sent before commit, their old bytes.
//!
//! One layout serves PD, SD and SL (they differ in how the regions were found, not in what a
//! region is), on the wire from client to server and as a log record's payload at the server.
//!
//! ```text
//! 0      1       2          4          8                    16
//! +------+-------+----------+----------+--------------------+
//! | fmt  | flags | regions  | page id  |        txn         |   header (16 bytes)
//! +------+-------+----------+----------+--------------------+
//!   u8     u8      u16        u32        u64
//!
//! then `regions` times, in increasing offset order:
//! +----------+----------+-------------------+-------------------+
//! | offset   | len      | redo: len bytes   | undo: len bytes   |   undo only if flags & UNDO
//! +----------+----------+-------------------+-------------------+
//!   u16        u16
//! ```
//!
//! - `fmt` is [`PAGE_RECORD_FORMAT`]; a record of another format is refused.
//! - `flags` bit 0 (`UNDO`): every region carries its old bytes after its new ones. Records a
//!   client sends before commit set it (the server applies them at once and must be able to
//!   take them back if the transaction aborts); records sent at commit do not (the server
//!   discards them if the commit is refused, and after a crash a record without a commit record
//!   is never applied). Other bits are reserved and zero.
//! - `regions`: 1 to [`REGIONS_MAX`]. A record with nothing to say is not sent.
//! - `page id`: the page, `1..=2^22 - 1`.
//! - `txn`: the transaction the record belongs to; restart matches records to commit records by
//!   it, and an abort finds the records to undo by it.
//! - A region: `offset` at least 24 (no region covers the page header: the header is the
//!   server's, not an object's), `len` at least 1, `offset + len` at most the page size; each
//!   region starts at least one byte after the previous one ends (touching regions are written
//!   as one, which is always cheaper).
//!
//! Regions are byte ranges of objects, which keep their place in a page for life (a version
//! keeps its object's size, and creation appends), so a record applies to any later version of
//! the page, not only to the one it was diffed against.
//!
//! *Decoding never panics.* [`PageRecord::parse`] checks every field and the exact length
//! before anything is read as a region, so the views and [`apply_redo`](PageRecord::apply_redo)
//! / [`apply_undo`](PageRecord::apply_undo) index nothing unchecked. The encoder refuses
//! whatever the decoder would refuse.

use thor_core::PageId;
use thor_core::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use thor_core::limits::{PAGE_HEADER_BYTES, is_valid_page_size};

use crate::TxnId;
use crate::diff::{Images, PreImage, Span, for_each_checked_piece};
use crate::error::RecordError;
use crate::limits::{PAGE_RECORD_HEADER_BYTES, REGION_HEADER_BYTES, REGIONS_MAX};

/// The page record format version, stored in every record.
pub const PAGE_RECORD_FORMAT: u8 = 1;
/// Flag bit: every region carries undo bytes.
const FLAG_UNDO: u8 = 1;

const OFF_FORMAT: usize = 0;
const OFF_FLAGS: usize = 1;
const OFF_COUNT: usize = 2;
const OFF_PAGE: usize = 4;
const OFF_TXN: usize = 8;

/// What a page record's header says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecordHeader {
    /// The page the regions belong to.
    pub page: PageId,
    /// The transaction that changed them.
    pub txn: TxnId,
    /// Whether the regions carry undo bytes.
    pub images: Images,
}

/// Checks one region against the format's rules, given where the previous one ended.
fn check_region(
    offset: usize,
    len: usize,
    prev_end: Option<usize>,
    page_size: usize,
) -> Result<(), RecordError> {
    let bad = |why| Err(RecordError::BadRegion { offset, len, why });
    if len == 0 {
        return bad("empty");
    }
    if offset < PAGE_HEADER_BYTES {
        return bad("covers the page header");
    }
    if offset + len > page_size {
        return bad("reaches past the page");
    }
    if let Some(prev_end) = prev_end
        && offset <= prev_end
    {
        return bad("overlaps, touches or precedes the previous region");
    }
    Ok(())
}

/// Bytes a record of these regions takes.
pub fn encoded_bytes(regions: &[Span], images: Images) -> usize {
    PAGE_RECORD_HEADER_BYTES
        + regions.iter().map(|r| REGION_HEADER_BYTES + images.count() * r.len()).sum::<usize>()
}

/// Appends to `out` the record of `regions` of `page` (the current image), taking undo bytes
/// from `pre` when `header.images` asks for them. Returns the bytes appended. Nothing is
/// appended on error.
pub fn encode<P: PreImage + ?Sized>(
    header: &RecordHeader,
    regions: &[Span],
    page: &[u8],
    pre: &P,
    out: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    let page_size = page.len();
    if !is_valid_page_size(page_size) {
        return Err(RecordError::BadPageSize(page_size));
    }
    if regions.is_empty() || regions.len() > REGIONS_MAX {
        return Err(RecordError::BadRegionCount(regions.len()));
    }
    let mut prev_end = None;
    for r in regions {
        check_region(r.start, r.len(), prev_end, page_size)?;
        prev_end = Some(r.end);
    }
    // The pieces are checked before any byte is written, so a bad pre-image appends nothing.
    if header.images == Images::RedoUndo {
        for_each_checked_piece(pre, page_size, |_, _| {}).map_err(RecordError::PreImage)?;
    }

    let start = out.len();
    let total = encoded_bytes(regions, header.images);
    out.resize(start + PAGE_RECORD_HEADER_BYTES, 0);
    let h = &mut out[start..];
    h[OFF_FORMAT] = PAGE_RECORD_FORMAT;
    h[OFF_FLAGS] = if header.images == Images::RedoUndo { FLAG_UNDO } else { 0 };
    put_u16(h, OFF_COUNT, regions.len() as u16);
    put_u32(h, OFF_PAGE, header.page.get());
    put_u64(h, OFF_TXN, header.txn.0);
    out.reserve(total - PAGE_RECORD_HEADER_BYTES);

    // Pieces and regions are both sorted, so one pass over the pieces serves every region; a
    // piece may reach into the next region, so it is only dropped once it ends before one.
    let mut pieces = pre.pieces().peekable();
    for r in regions {
        out.extend_from_slice(&(r.start as u16).to_le_bytes());
        out.extend_from_slice(&(r.len() as u16).to_le_bytes());
        out.extend_from_slice(&page[r.start..r.end]);
        if header.images == Images::RedoUndo {
            // The old bytes: the current ones where no copy was taken (unchanged, by the
            // copy-on-first-update contract), the copies' where one was.
            let undo_at = out.len();
            out.extend_from_slice(&page[r.start..r.end]);
            while let Some(&(offset, old)) = pieces.peek() {
                let piece_end = offset + old.len();
                if piece_end <= r.start {
                    pieces.next();
                    continue;
                }
                if offset >= r.end {
                    break;
                }
                let from = offset.max(r.start);
                let to = piece_end.min(r.end);
                out[undo_at + (from - r.start)..undo_at + (to - r.start)]
                    .copy_from_slice(&old[from - offset..to - offset]);
                if piece_end > r.end {
                    break;
                }
                pieces.next();
            }
        }
    }
    debug_assert_eq!(out.len() - start, total);
    Ok(total)
}

/// A checked view of an encoded page record.
#[derive(Clone, Copy, Debug)]
pub struct PageRecord<'a> {
    /// The whole record, exactly (checked).
    bytes: &'a [u8],
    /// The page size the regions were checked against.
    page_size: usize,
    /// The decoded header.
    header: RecordHeader,
    /// Regions in the record.
    count: usize,
}

impl<'a> PageRecord<'a> {
    /// Checks `bytes` as one whole page record for pages of `page_size` bytes.
    pub fn parse(bytes: &'a [u8], page_size: usize) -> Result<PageRecord<'a>, RecordError> {
        if !is_valid_page_size(page_size) {
            return Err(RecordError::BadPageSize(page_size));
        }
        if bytes.len() < PAGE_RECORD_HEADER_BYTES {
            return Err(RecordError::Truncated { at: bytes.len() });
        }
        if bytes[OFF_FORMAT] != PAGE_RECORD_FORMAT {
            return Err(RecordError::UnknownFormat(bytes[OFF_FORMAT]));
        }
        let flags = bytes[OFF_FLAGS];
        if flags & !FLAG_UNDO != 0 {
            return Err(RecordError::UnknownFlags(flags));
        }
        let images = if flags & FLAG_UNDO != 0 { Images::RedoUndo } else { Images::Redo };
        let count = u16_at(bytes, OFF_COUNT) as usize;
        if count == 0 || count > REGIONS_MAX {
            return Err(RecordError::BadRegionCount(count));
        }
        let raw_page = u32_at(bytes, OFF_PAGE);
        let page = PageId::new(raw_page).ok_or(RecordError::BadPageId(raw_page))?;
        let txn = TxnId(u64_at(bytes, OFF_TXN));

        let mut at = PAGE_RECORD_HEADER_BYTES;
        let mut prev_end = None;
        for _ in 0..count {
            if bytes.len() - at < REGION_HEADER_BYTES {
                return Err(RecordError::Truncated { at: bytes.len() });
            }
            let offset = u16_at(bytes, at) as usize;
            let len = u16_at(bytes, at + 2) as usize;
            check_region(offset, len, prev_end, page_size)?;
            prev_end = Some(offset + len);
            at += REGION_HEADER_BYTES;
            let body = images.count() * len;
            if bytes.len() - at < body {
                return Err(RecordError::Truncated { at: bytes.len() });
            }
            at += body;
        }
        if at != bytes.len() {
            return Err(RecordError::TrailingBytes { extra: bytes.len() - at });
        }
        Ok(PageRecord { bytes, page_size, header: RecordHeader { page, txn, images }, count })
    }

    /// The header.
    pub fn header(&self) -> RecordHeader {
        self.header
    }

    /// The number of regions.
    pub fn region_count(&self) -> usize {
        self.count
    }

    /// The record's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The regions, in page order.
    pub fn regions(&self) -> Regions<'a> {
        Regions {
            bytes: self.bytes,
            at: PAGE_RECORD_HEADER_BYTES,
            left: self.count,
            undo: self.header.images == Images::RedoUndo,
        }
    }

    /// Writes the new bytes of every region into `page`.
    pub fn apply_redo(&self, page: &mut [u8]) -> Result<(), RecordError> {
        self.check_page(page)?;
        for r in self.regions() {
            page[r.offset..r.offset + r.redo.len()].copy_from_slice(r.redo);
        }
        Ok(())
    }

    /// Writes the old bytes of every region into `page`, taking the record back. Records of one
    /// page are taken back newest first.
    pub fn apply_undo(&self, page: &mut [u8]) -> Result<(), RecordError> {
        self.check_page(page)?;
        if self.header.images != Images::RedoUndo {
            return Err(RecordError::NoUndo);
        }
        for r in self.regions() {
            if let Some(undo) = r.undo {
                page[r.offset..r.offset + undo.len()].copy_from_slice(undo);
            }
        }
        Ok(())
    }

    fn check_page(&self, page: &[u8]) -> Result<(), RecordError> {
        if page.len() != self.page_size {
            return Err(RecordError::PageSizeMismatch { record: self.page_size, page: page.len() });
        }
        Ok(())
    }
}

/// One region of a checked record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Region<'a> {
    /// Where the region starts in the page.
    pub offset: usize,
    /// The new bytes.
    pub redo: &'a [u8],
    /// The old bytes, when the record carries them.
    pub undo: Option<&'a [u8]>,
}

impl Region<'_> {
    /// The bytes of the page the region covers.
    pub fn span(&self) -> Span {
        Span::new(self.offset, self.offset + self.redo.len())
    }
}

/// The regions of a checked record. Iterating cannot fail: [`PageRecord::parse`] checked every
/// bound.
#[derive(Clone, Debug)]
pub struct Regions<'a> {
    bytes: &'a [u8],
    at: usize,
    left: usize,
    undo: bool,
}

impl<'a> Iterator for Regions<'a> {
    type Item = Region<'a>;

    fn next(&mut self) -> Option<Region<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let offset = u16_at(self.bytes, self.at) as usize;
        let len = u16_at(self.bytes, self.at + 2) as usize;
        self.at += REGION_HEADER_BYTES;
        let redo = &self.bytes[self.at..self.at + len];
        self.at += len;
        let undo = if self.undo {
            let undo = &self.bytes[self.at..self.at + len];
            self.at += len;
            Some(undo)
        } else {
            None
        };
        Some(Region { offset, redo, undo })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Regions<'_> {}

#[cfg(test)]
mod tests;
