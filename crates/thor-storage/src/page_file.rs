//! [`PageFile`]: fixed-size pages at fixed offsets in one file.
//!
//! ```text
//!   offset 0        page_size      2*page_size            id*page_size
//!   +--------------+--------------+---- ... ----+---------------------+
//!   |   page 0     |   page 1     |             |   page id           |
//!   +--------------+--------------+---- ... ----+---------------------+
//! ```
//!
//! Page `id` lives at byte `id * page_size`; the file grows as higher pages are written (a gap
//! reads as zeros). The page file knows nothing of the page format: checksums, page ids in the
//! header and versions are thor-core's and the server's business. What it does check is the
//! geometry: a read of a page beyond the end of the file is "never written" (`Ok(false)`),
//! while a page cut short by the end of the file is a torn file and an error, because the file
//! only ever grows by whole pages.
//!
//! [`PageFile::write_run`] writes several contiguous pages in one call (a *segment* in the
//! Thor papers' sense), which is how the flusher turns many page writes into few large ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use thor_core::limits::is_valid_page_size;

use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;

/// A snapshot of a page file's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageFileStats {
    /// Pages read (each successful `read` that found a page).
    pub pages_read: u64,
    /// Pages written (a run of `n` pages counts `n`).
    pub pages_written: u64,
    /// `write_at` calls made: `pages_written / write_calls` is the mean run length.
    pub write_calls: u64,
    /// Syncs of the file.
    pub syncs: u64,
}

/// Counters updated without a lock by concurrent readers and writers.
#[derive(Debug, Default)]
struct Counters {
    /// See [`PageFileStats::pages_read`].
    pages_read: AtomicU64,
    /// See [`PageFileStats::pages_written`].
    pages_written: AtomicU64,
    /// See [`PageFileStats::write_calls`].
    write_calls: AtomicU64,
    /// See [`PageFileStats::syncs`].
    syncs: AtomicU64,
}

/// The page file of a server. Shareable by threads (`&PageFile`): every operation is
/// positional.
#[derive(Debug)]
pub struct PageFile {
    /// The open file.
    file: Arc<dyn DiskFile>,
    /// Bytes per page, fixed when the database was created.
    page_size: usize,
    /// What has been done, for the experiments' tables.
    counters: Counters,
}

impl PageFile {
    /// Opens page file `name` of `disk` with pages of `page_size` bytes (a valid thor page size:
    /// a power of two within `thor_core::limits`). With `create`, a missing file is created
    /// empty and the directory synced so that the file's existence is durable.
    pub fn open(
        disk: &dyn Disk,
        name: &str,
        page_size: usize,
        create: bool,
    ) -> Result<PageFile, StorageError> {
        if !is_valid_page_size(page_size) {
            return Err(StorageError::InvalidArgument(format!(
                "page size {page_size} is not a valid thor page size"
            )));
        }
        let existed = disk.exists(name)?;
        let file = disk.open(name, create)?;
        if !existed {
            disk.sync_dir()?;
        }
        Ok(PageFile { file, page_size, counters: Counters::default() })
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    fn offset(&self, id: u32) -> u64 {
        u64::from(id) * self.page_size as u64
    }

    fn check_len(&self, what: &str, len: usize, pages: usize) -> Result<(), StorageError> {
        if len == pages * self.page_size {
            Ok(())
        } else {
            Err(StorageError::InvalidArgument(format!(
                "{what}: buffer of {len} bytes, expected {pages} page(s) of {}",
                self.page_size
            )))
        }
    }

    /// Reads page `id` into `buf` (`buf.len() == page_size`). `Ok(false)` if the page lies
    /// beyond the end of the file (never written; `buf` is left as it was). A page cut short by
    /// the end of the file (a torn extension) is [`StorageError::UnexpectedEof`].
    pub fn read(&self, id: u32, buf: &mut [u8]) -> Result<bool, StorageError> {
        self.check_len("read", buf.len(), 1)?;
        let offset = self.offset(id);
        let n = self.file.read_at(offset, buf)?;
        if n == 0 {
            return Ok(false);
        }
        if n != buf.len() {
            // The file only grows by whole pages, so a partial last page is a torn extension.
            return Err(StorageError::UnexpectedEof {
                name: self.file.name().to_string(),
                offset,
                len: self.page_size,
            });
        }
        self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Writes page `id` (`page.len() == page_size`). Not durable until [`PageFile::sync`].
    pub fn write(&self, id: u32, page: &[u8]) -> Result<(), StorageError> {
        self.write_run(id, page)
    }

    /// Writes `n` contiguous pages starting at `first` in one call: `pages.len() == n *
    /// page_size` with `n >= 1`. Not durable until [`PageFile::sync`].
    pub fn write_run(&self, first: u32, pages: &[u8]) -> Result<(), StorageError> {
        let n = pages.len() / self.page_size;
        if n == 0 {
            return Err(StorageError::InvalidArgument("write_run: no pages".to_string()));
        }
        self.check_len("write_run", pages.len(), n)?;
        if u64::from(first) + n as u64 > u64::from(u32::MAX) + 1 {
            return Err(StorageError::InvalidArgument(format!(
                "write_run: {n} pages from {first} pass the last page id"
            )));
        }
        self.file.write_at(self.offset(first), pages)?;
        self.counters.pages_written.fetch_add(n as u64, Ordering::Relaxed);
        self.counters.write_calls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes every earlier write durable.
    pub fn sync(&self) -> Result<(), StorageError> {
        self.file.sync()?;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The number of whole pages in the file. A partial page at the end (a torn file) is not
    /// counted; reading it reports [`StorageError::UnexpectedEof`].
    pub fn len_pages(&self) -> Result<u32, StorageError> {
        let pages = self.file.len()? / self.page_size as u64;
        u32::try_from(pages).map_err(|_| StorageError::Corrupt {
            what: "page file",
            name: self.file.name().to_string(),
            offset: 0,
            why: format!("{pages} pages exceed the 32-bit page id space"),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PageFileStats {
        PageFileStats {
            pages_read: self.counters.pages_read.load(Ordering::Relaxed),
            pages_written: self.counters.pages_written.load(Ordering::Relaxed),
            write_calls: self.counters.write_calls.load(Ordering::Relaxed),
            syncs: self.counters.syncs.load(Ordering::Relaxed),
        }
    }
}
