//! The spill file: where a session's cache puts the modified and created objects of a
//! transaction that outgrows it (`thor_cache::spill` has the mechanism and the record format).
//!
//! The file is created in the temporary directory on the first steal and unlinked at once: it
//! lives as long as the open descriptor, so a client that crashes leaves no file behind and
//! loses only its uncommitted transaction (the server never saw any of it). Records are
//! appended through a write buffer of [`SPILL_BUFFER_BYTES`] and read with positional reads;
//! a read of a record still in the buffer is served from it. The file is truncated when the
//! transaction ends. The cache's cap bounds what one transaction writes; the buffer is the
//! only memory the file holds, outside the cache's budget and reported in its stats.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use thor_cache::SpillStore;

use crate::limits::SPILL_BUFFER_BYTES;

/// Distinguishes the spill files of the sessions of one process.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// A spill store in an unlinked temporary file.
#[derive(Debug)]
pub struct FileSpill {
    /// The directory the file is made in.
    dir: PathBuf,
    /// The file, once a record was appended.
    file: Option<File>,
    /// Appended records not written yet; they start at file offset `buffer_at`.
    buffer: Vec<u8>,
    /// The file offset of the buffer's first byte.
    buffer_at: u64,
}

impl FileSpill {
    /// A store whose file will be made in `dir` (the system's temporary directory by
    /// default) when first needed.
    pub fn new(dir: PathBuf) -> FileSpill {
        FileSpill { dir, file: None, buffer: Vec::new(), buffer_at: 0 }
    }

    fn file(&mut self) -> Result<&File, String> {
        if self.file.is_none() {
            let name = format!(
                "thor-spill-{}-{}",
                std::process::id(),
                NEXT_FILE.fetch_add(1, Ordering::Relaxed)
            );
            let path = self.dir.join(name);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| format!("create {}: {e}", path.display()))?;
            // Unlinked at once: the file goes with the descriptor, even if the client crashes.
            std::fs::remove_file(&path).map_err(|e| format!("unlink {}: {e}", path.display()))?;
            self.file = Some(f);
        }
        Ok(self.file.as_ref().expect("just made"))
    }

    /// Writes the buffer to the file.
    fn flush(&mut self) -> Result<(), String> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let at = self.buffer_at;
        let buffer = std::mem::take(&mut self.buffer);
        let written = self.file().and_then(|f| {
            f.write_all_at(&buffer, at).map_err(|e| format!("write of the spill file: {e}"))
        });
        self.buffer = buffer;
        written?;
        self.buffer_at += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

impl SpillStore for FileSpill {
    fn append(&mut self, record: &[u8]) -> Result<u64, String> {
        if self.buffer.len() + record.len() > SPILL_BUFFER_BYTES {
            self.flush()?;
        }
        if record.len() > SPILL_BUFFER_BYTES {
            // Cannot happen (a record is at most a page and a header) but costs nothing to
            // handle: written straight through.
            let at = self.buffer_at;
            self.file()?
                .write_all_at(record, at)
                .map_err(|e| format!("write of the spill file: {e}"))?;
            self.buffer_at += record.len() as u64;
            return Ok(at);
        }
        let at = self.buffer_at + self.buffer.len() as u64;
        self.buffer.extend_from_slice(record);
        Ok(at)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), String> {
        let end = offset.checked_add(out.len() as u64).ok_or("read past any file")?;
        if offset >= self.buffer_at {
            // Records never straddle the buffer's start: each is appended whole.
            let start = (offset - self.buffer_at) as usize;
            let src = self
                .buffer
                .get(start..start + out.len())
                .ok_or_else(|| format!("read of bytes {offset}..{end} past the spill's end"))?;
            out.copy_from_slice(src);
            return Ok(());
        }
        if end > self.buffer_at {
            return Err(format!("read of bytes {offset}..{end} across the write buffer"));
        }
        let f = self.file.as_ref().ok_or("read of a spill file never written")?;
        f.read_exact_at(out, offset).map_err(|e| format!("read of the spill file: {e}"))
    }

    fn clear(&mut self) {
        self.buffer.clear();
        self.buffer.shrink_to(SPILL_BUFFER_BYTES);
        self.buffer_at = 0;
        // Give the disk space back. If truncation fails the next transaction overwrites the
        // file from its start anyway: records are written at their offsets.
        if let Some(f) = &self.file {
            let _ = f.set_len(0);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.buffer.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_from_the_buffer_and_the_file() {
        let mut s = FileSpill::new(std::env::temp_dir());
        let mut offsets = Vec::new();
        // Enough records to flush the buffer several times.
        for k in 0..(3 * SPILL_BUFFER_BYTES / 64) {
            let rec = vec![(k % 251) as u8; 64];
            offsets.push((s.append(&rec).unwrap(), (k % 251) as u8));
        }
        for &(at, b) in &offsets {
            let mut out = [0u8; 64];
            s.read_at(at, &mut out).unwrap();
            assert_eq!(out, [b; 64], "record at {at}");
        }
        s.clear();
        assert_eq!(s.append(&[7; 8]).unwrap(), 0, "a cleared store starts again at 0");
        let mut out = [0u8; 8];
        assert!(s.read_at(8, &mut out).is_err(), "nothing past the end");
    }
}
