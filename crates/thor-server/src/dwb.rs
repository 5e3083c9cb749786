//! The double-write buffer: protection of in-place page writes against tearing.
//!
//! The flusher overwrites pages in place. A crash in the middle of a page write can leave a page
//! that is half old, half new (a *torn* page): its checksum fails, and the MOB versions in the
//! log cannot rebuild it because they hold only the modified objects, not the whole page. So
//! before writing pages in place, the flusher writes them all to this file and syncs it:
//!
//! ```text
//! flush round:  dwb ← pages; sync(dwb)  ──►  page file ← pages; sync(page file)
//!                                                         ──► superblock checkpoint, log truncation
//! ```
//!
//! At recovery every intact page in the buffer whose in-place copy is torn or older is written
//! back. If the crash tore the buffer itself, the page file was not yet touched in that round,
//! so the torn buffer entries are simply ignored.
//!
//! ```text
//! 0      4        8           12       16
//! +------+--------+-----------+--------+------------------------+
//! | magic| count  | page size | crc    | count sealed pages ... |
//! +------+--------+-----------+--------+------------------------+
//! crc: CRC-32C of bytes 0..12; each page carries its own checksum and page id.
//! ```

use std::sync::Arc;

use thor_core::checksum::crc32c;
use thor_core::le::{put_u32, u32_at};
use thor_core::{PageId, PageView};
use thor_storage::{Disk, DiskFile, StorageError};

/// The file name.
pub const FILE: &str = "dwb";
const MAGIC: u32 = 0x4257_4454; // "TDWB"
const HEADER_BYTES: usize = 16;

/// The double-write file of a database.
#[derive(Debug)]
pub struct DoubleWrite {
    /// The open file.
    file: Arc<dyn DiskFile>,
    /// Bytes per page.
    page_size: usize,
}

impl DoubleWrite {
    /// Opens (creating if missing) the double-write file.
    pub fn open(disk: &dyn Disk, page_size: usize) -> Result<DoubleWrite, StorageError> {
        let file = disk.open(FILE, true)?;
        Ok(DoubleWrite { file, page_size })
    }

    /// Writes `pages` (concatenated sealed pages) and syncs: afterwards they survive any crash.
    /// `buf` is scratch space for the header and pages.
    pub fn write(&self, pages: &[u8], buf: &mut Vec<u8>) -> Result<(), StorageError> {
        let count = pages.len() / self.page_size;
        buf.clear();
        buf.resize(HEADER_BYTES, 0);
        put_u32(buf, 0, MAGIC);
        put_u32(buf, 4, count as u32);
        put_u32(buf, 8, self.page_size as u32);
        let crc = crc32c(&buf[..12]);
        put_u32(buf, 12, crc);
        buf.extend_from_slice(pages);
        self.file.write_at(0, buf)?;
        self.file.sync()
    }

    /// The intact pages of the buffer, with their ids. Torn or foreign content yields nothing:
    /// it can only come from a round that had not yet touched the page file.
    pub fn intact_pages(&self) -> Result<Vec<(PageId, Vec<u8>)>, StorageError> {
        let mut header = [0u8; HEADER_BYTES];
        if self.file.len()? < HEADER_BYTES as u64 {
            return Ok(Vec::new());
        }
        self.file.read_exact_at(0, &mut header)?;
        if u32_at(&header, 0) != MAGIC
            || crc32c(&header[..12]) != u32_at(&header, 12)
            || u32_at(&header, 8) as usize != self.page_size
        {
            return Ok(Vec::new());
        }
        let count = u32_at(&header, 4) as usize;
        let mut out = Vec::new();
        for i in 0..count {
            let mut page = vec![0u8; self.page_size];
            let off = (HEADER_BYTES + i * self.page_size) as u64;
            if self.file.read_at(off, &mut page)? != self.page_size {
                break;
            }
            let Some(id) = PageId::new(u32_at(&page, 4)) else { continue };
            if PageView::parse_stored(&page, id).is_ok() {
                out.push((id, page));
            }
        }
        Ok(out)
    }
}
