//! [`FileDisk`]: a [`Disk`] over a real directory.
//!
//! Reads and writes are positional (`pread`/`pwrite` through `std::os::unix::fs::FileExt`), so a
//! handle is shared by threads without a seek position or a lock. [`DiskFile::sync`] is
//! `fdatasync` ([`std::fs::File::sync_data`]): the log and page file never depend on metadata
//! other than the length, which `fdatasync` does persist. [`Disk::sync_dir`] opens the directory
//! and `fsync`s it, which is what makes creates, renames and removes durable on Linux.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;

/// A directory of real files.
#[derive(Debug, Clone)]
pub struct FileDisk {
    /// The directory every name is resolved in.
    dir: PathBuf,
}

impl FileDisk {
    /// Uses directory `path`. With `create`, the directory (and its parents) is created if
    /// missing; without it, a missing directory is [`StorageError::NotFound`].
    pub fn open_dir(path: impl AsRef<Path>, create: bool) -> Result<FileDisk, StorageError> {
        let dir = path.as_ref().to_path_buf();
        let shown = dir.display().to_string();
        if create {
            std::fs::create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &shown, e))?;
        }
        let meta = std::fs::metadata(&dir).map_err(|e| StorageError::io("stat dir", &shown, e))?;
        if !meta.is_dir() {
            return Err(StorageError::InvalidArgument(format!("{shown} is not a directory")));
        }
        Ok(FileDisk { dir })
    }

    /// The directory this disk lives in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> Result<PathBuf, StorageError> {
        validate_name(name)?;
        Ok(self.dir.join(name))
    }
}

impl Disk for FileDisk {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        let path = self.path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)
            .map_err(|e| StorageError::io("open", name, e))?;
        Ok(Arc::new(RealFile { file, name: name.to_string() }))
    }

    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        let path = self.path_of(name)?;
        match std::fs::metadata(&path) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StorageError::io("stat", name, e)),
        }
    }

    fn remove(&self, name: &str) -> Result<(), StorageError> {
        let path = self.path_of(name)?;
        std::fs::remove_file(path).map_err(|e| StorageError::io("remove", name, e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError> {
        let src = self.path_of(from)?;
        let dst = self.path_of(to)?;
        std::fs::rename(src, dst).map_err(|e| StorageError::io("rename", from, e))
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        let shown = self.dir.display().to_string();
        let mut names = Vec::new();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| StorageError::io("list", &shown, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("list", &shown, e))?;
            let is_file =
                entry.file_type().map_err(|e| StorageError::io("list", &shown, e))?.is_file();
            // Names that are not UTF-8 or not plain names were not made through this API; they
            // are not ours to show (and could not be opened through it anyway).
            if let Some(name) = entry.file_name().to_str()
                && is_file
                && validate_name(name).is_ok()
            {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        let shown = self.dir.display().to_string();
        let dir = File::open(&self.dir).map_err(|e| StorageError::io("open dir", &shown, e))?;
        dir.sync_all().map_err(|e| StorageError::io("fsync dir", &shown, e))
    }
}

/// An open real file.
#[derive(Debug)]
struct RealFile {
    /// The open file; positional I/O needs no lock.
    file: File,
    /// Its name within the disk, for error messages.
    name: String,
}

impl DiskFile for RealFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        // `pread` may return fewer bytes than asked before the end of the file (signals, some
        // file systems); loop so that callers only see short reads at the end.
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io("read", &self.name, e)),
            }
        }
        Ok(done)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        self.file.write_all_at(data, offset).map_err(|e| StorageError::io("write", &self.name, e))
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.file.sync_data().map_err(|e| StorageError::io("fsync", &self.name, e))
    }

    fn len(&self) -> Result<u64, StorageError> {
        Ok(self.file.metadata().map_err(|e| StorageError::io("stat", &self.name, e))?.len())
    }

    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        self.file.set_len(len).map_err(|e| StorageError::io("truncate", &self.name, e))
    }
}
