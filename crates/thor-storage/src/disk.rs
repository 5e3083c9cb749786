//! The disk abstraction: a flat directory of named files.
//!
//! Everything durable in thor goes through [`Disk`] and [`DiskFile`], so the same engine code
//! runs on real files ([`FileDisk`](crate::FileDisk)), in memory ([`MemDisk`](crate::MemDisk))
//! and on a disk that fails and crashes on purpose ([`FaultDisk`](crate::FaultDisk)).
//!
//! # Durability contract
//!
//! The traits promise exactly what POSIX promises, no more, so that code which is correct on
//! [`MemDisk`](crate::MemDisk)'s strict crash model is correct on a real file system:
//!
//! - [`DiskFile::write_at`] and [`DiskFile::set_len`] change the *live* contents only; after a
//!   crash, unsynced writes to a file may be lost in any subset and reach the medium in any
//!   order, and a write may be torn: any subset of its sectors lands. An extending write may
//!   leave the new length with zeros where its data did not land.
//! - [`DiskFile::sync`] (fdatasync) makes every earlier write to that file durable.
//! - Creating, renaming and removing files changes the *live* namespace only; after a crash
//!   these may be undone until [`Disk::sync_dir`] returns. Syncing a file does **not** make its
//!   directory entry durable.
//! - [`Disk::rename`] atomically replaces the target: a crash leaves the old or the new binding,
//!   never neither.
//!
//! # Names
//!
//! Names are plain file names within the one directory: non-empty, at most
//! [`FILE_NAME_BYTES_MAX`] bytes, no `/`, `\` or NUL, and not `.` or `..`. Every backend
//! rejects the same names, so a test on memory catches what a real directory would refuse.

use std::sync::Arc;

use crate::error::StorageError;
use crate::limits::FILE_NAME_BYTES_MAX;

/// A directory of named files. Object-safe: the engine holds an `Arc<dyn Disk>`.
pub trait Disk: Send + Sync + std::fmt::Debug {
    /// Opens file `name` for reading and writing. With `create`, a missing file is created
    /// empty (durable only after [`Disk::sync_dir`]); without it, a missing file is
    /// [`StorageError::NotFound`].
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError>;
    /// Whether file `name` exists.
    fn exists(&self, name: &str) -> Result<bool, StorageError>;
    /// Removes file `name` ([`StorageError::NotFound`] if missing). Handles already open keep
    /// working, as on Unix.
    fn remove(&self, name: &str) -> Result<(), StorageError>;
    /// Renames `from` to `to`, atomically replacing `to` if it exists.
    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError>;
    /// The names of all files, sorted.
    fn list(&self) -> Result<Vec<String>, StorageError>;
    /// Makes every earlier create, rename and remove durable.
    fn sync_dir(&self) -> Result<(), StorageError>;
}

/// An open file. Positional reads and writes only, so one handle can be shared by threads.
pub trait DiskFile: Send + Sync + std::fmt::Debug {
    /// The file's name within its disk, for error messages.
    fn name(&self) -> &str;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read. Short only at the
    /// end of the file (0 at or past it).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError>;
    /// Reads exactly `buf.len()` bytes at `offset`, or fails with
    /// [`StorageError::UnexpectedEof`] if the file ends first.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let n = self.read_at(offset, buf)?;
        if n == buf.len() {
            Ok(())
        } else {
            Err(StorageError::UnexpectedEof {
                name: self.name().to_string(),
                offset,
                len: buf.len(),
            })
        }
    }
    /// Writes all of `data` at `offset`, extending the file (with zeros in any gap) if needed.
    /// Not durable until [`DiskFile::sync`].
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError>;
    /// Makes every earlier write and length change of this file durable (fdatasync).
    fn sync(&self) -> Result<(), StorageError>;
    /// The file's current (live) length in bytes.
    fn len(&self) -> Result<u64, StorageError>;
    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool, StorageError> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends (with zeros) the file to `len` bytes. Not durable until
    /// [`DiskFile::sync`].
    fn set_len(&self, len: u64) -> Result<(), StorageError>;
}

/// Checks that `name` is a plain file name (see the module documentation).
pub fn validate_name(name: &str) -> Result<(), StorageError> {
    let why = if name.is_empty() {
        "empty"
    } else if name.len() > FILE_NAME_BYTES_MAX {
        "longer than 255 bytes"
    } else if name == "." || name == ".." {
        "names the directory itself or its parent"
    } else if name.contains(['/', '\\', '\0']) {
        "contains a path separator or NUL"
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidName { name: name.to_string(), why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["log.0000000000000001", "pages", "a..b", ".hidden"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(256);
        for bad in ["", ".", "..", "a/b", "../x", "a\\b", "a\0b", long.as_str()] {
            assert!(matches!(validate_name(bad), Err(StorageError::InvalidName { .. })), "{bad:?}");
        }
    }
}
