//! [`FileDisk`]: a [`Disk`] over a real directory.
//!
//! Reads and writes are positional (`pread`/`pwrite` through `std::os::unix::fs::FileExt`), so a
//! handle is shared by threads without a seek position or a lock. [`DiskFile::sync`] is
//! `fdatasync` ([`std::fs::File::sync_data`]): the log and page file never depend on metadata
//! other than the length, which `fdatasync` does persist. [`Disk::sync_dir`] opens the directory
//! and `fsync`s it, which is what makes creates, renames and removes durable on Linux.
//!
//! # The directory lock
//!
//! Two processes (or two opens in one process) running a database in the same directory would
//! each believe they own the log and the page file, and destroy both. [`FileDisk::open_locked`]
//! prevents that: it takes an exclusive `flock` ([`File::try_lock`]) on the file [`LOCK_FILE`]
//! in the directory, and writes the holder into it:
//!
//! ```text
//! pid 1234
//! program thor server
//! host db1
//! since 2026-05-01T12:00:00Z
//! ```
//!
//! A second opener fails at once with [`StorageError::Locked`], whose message names the holder
//! ("database /x is in use by pid 1234 (thor server) on db1, since 2026-05-01T12:00:00Z"). The
//! lock belongs to the disk and its clones; it is released when the last of them is dropped.
//!
//! *Stale lock files.* After a crash (of the process or the machine) the `LOCK` file stays,
//! still naming the dead holder, but it is not a held lock: the kernel releases a `flock` when
//! the process holding it dies, so the next opener takes the lock and rewrites the file. No
//! pid check, timeout or manual cleanup is needed, and a leftover file never blocks a restart.
//! `flock` is reliable on local file systems; on network file systems it may not exclude other
//! machines, which thor does not support as a database location.
//!
//! While a disk holds the lock, `LOCK` is not one of its files: [`Disk::list`] leaves it out
//! and opening, removing or renaming it is [`StorageError::InvalidName`], so that no code
//! going through the disk (a cleanup of unknown files, say) can delete the lock from under
//! its holder and let a second opener in.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::{LOCK_FIELD_BYTES_MAX, LOCK_FILE_BYTES_MAX};

/// The name of the lock file in a directory opened with [`FileDisk::open_locked`].
pub const LOCK_FILE: &str = "LOCK";

/// A directory of real files.
#[derive(Debug, Clone)]
pub struct FileDisk {
    /// The directory every name is resolved in.
    dir: PathBuf,
    /// The directory lock, if this disk was opened with [`FileDisk::open_locked`]; shared by
    /// clones, so that it is released when the last of them is dropped.
    lock: Option<Arc<DirLock>>,
}

/// A held `flock` on a directory's [`LOCK_FILE`]: closing the file releases it.
#[derive(Debug)]
struct DirLock {
    /// The open lock file; the lock lives as long as this descriptor.
    file: File,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlocking first says so explicitly
        // and costs nothing. Nothing useful can be done about a failure here.
        let _ = self.file.unlock();
    }
}

impl FileDisk {
    /// Uses directory `path`. With `create`, the directory (and its parents) is created if
    /// missing; without it, a missing directory is [`StorageError::NotFound`].
    pub fn open_dir(path: impl AsRef<Path>, create: bool) -> Result<FileDisk, StorageError> {
        let dir = path.as_ref().to_path_buf();
        let shown = dir.display().to_string();
        if dir.exists() && !dir.is_dir() {
            return Err(StorageError::InvalidArgument(format!(
                "{shown} is a file, not a database directory"
            )));
        }
        if create {
            std::fs::create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &shown, e))?;
        }
        let meta = std::fs::metadata(&dir).map_err(|e| StorageError::io("stat dir", &shown, e))?;
        if !meta.is_dir() {
            return Err(StorageError::InvalidArgument(format!("{shown} is not a directory")));
        }
        Ok(FileDisk { dir, lock: None })
    }

    /// Uses directory `path` like [`FileDisk::open_dir`], holding an exclusive lock on it until
    /// the disk and all its clones are dropped (see the module documentation). `program` says
    /// who the holder is (e.g. `"thor server"`) for the error a second opener gets:
    /// [`StorageError::Locked`], naming the holder's pid, program, host and start time.
    pub fn open_locked(
        path: impl AsRef<Path>,
        create: bool,
        program: &str,
    ) -> Result<FileDisk, StorageError> {
        let mut disk = FileDisk::open_dir(path, create)?;
        let shown = disk.dir.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(disk.dir.join(LOCK_FILE))
            .map_err(|e| StorageError::io("open lock file", &shown, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StorageError::Locked { path: shown, holder: describe_holder(&file) });
            }
            Err(TryLockError::Error(e)) => return Err(StorageError::io("lock", &shown, e)),
        }
        // Write first, then cut to length: a second opener reading meanwhile sees the old
        // holder's text or ours, never an empty file.
        let text = holder_text(program);
        file.write_all_at(text.as_bytes(), 0)
            .and_then(|()| file.set_len(text.len() as u64))
            .map_err(|e| StorageError::io("write lock file", &shown, e))?;
        disk.lock = Some(Arc::new(DirLock { file }));
        Ok(disk)
    }

    /// Whether this disk holds its directory's lock (was opened with
    /// [`FileDisk::open_locked`]).
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }

    /// The directory this disk lives in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> Result<PathBuf, StorageError> {
        validate_name(name)?;
        if self.lock.is_some() && name == LOCK_FILE {
            return Err(StorageError::InvalidName {
                name: name.to_string(),
                why: "reserved for the directory lock",
            });
        }
        Ok(self.dir.join(name))
    }
}

/// The text written into [`LOCK_FILE`] by a new holder: one `key value` line per field.
fn holder_text(program: &str) -> String {
    let mut text = format!("pid {}\nprogram {}\n", std::process::id(), one_line(program));
    if let Some(host) = hostname() {
        text.push_str(&format!("host {}\n", one_line(&host)));
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    text.push_str(&format!("since {}\n", utc_timestamp(now)));
    text
}

/// `s` on one line, without control characters, at most [`LOCK_FIELD_BYTES_MAX`] bytes: lock
/// files are read back into error messages.
fn one_line(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().map(|c| if c.is_control() { ' ' } else { c }) {
        if out.len() + c.len_utf8() > LOCK_FIELD_BYTES_MAX {
            break;
        }
        out.push(c);
    }
    out.trim().to_string()
}

/// The machine's name, where it is cheap to learn (Linux's `/proc`, else `$HOSTNAME`).
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Who holds the lock, from the lock file's text (untrusted: written by another process, or
/// by anything). Never fails: says what it can.
fn describe_holder(file: &File) -> String {
    let mut buf = vec![0u8; LOCK_FILE_BYTES_MAX];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&buf[..n]);
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ').map(one_line))
            .filter(|v| !v.is_empty())
    };
    let Some(pid) = field("pid") else {
        return "an unknown holder (its LOCK file names no pid)".to_string();
    };
    let mut out = format!("pid {pid}");
    if pid == std::process::id().to_string() {
        out.push_str(" (this process)");
    }
    if let Some(program) = field("program") {
        out.push_str(&format!(" ({program})"));
    }
    if let Some(host) = field("host") {
        out.push_str(&format!(" on {host}"));
    }
    if let Some(since) = field("since") {
        out.push_str(&format!(", since {since}"));
    }
    out
}

/// `secs` after the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`, without a date library: days to a
/// civil date by Howard Hinnant's `civil_from_days` (proleptic Gregorian).
fn utc_timestamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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
            // The lock file of a locked disk is the directory's, not one of the disk's files.
            if let Some(name) = entry.file_name().to_str()
                && is_file
                && validate_name(name).is_ok()
                && !(self.lock.is_some() && name == LOCK_FILE)
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
        read_full_at(&self.file, &self.name, offset, buf)
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

/// Reads up to `buf.len()` bytes of `file` at `offset`. `pread` may return fewer bytes than
/// asked before the end of the file (signals, some file systems); this loops so that callers
/// only see short reads at the end.
fn read_full_at(
    file: &File,
    name: &str,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, StorageError> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(StorageError::io("read", name, e)),
        }
    }
    Ok(done)
}

impl FileDisk {
    /// This directory as a [`Disk`] that can only read (for offline checkers): see
    /// [`ReadOnlyDisk`]. The lock, if held, stays held.
    pub fn read_only(self) -> ReadOnlyDisk {
        ReadOnlyDisk { disk: self }
    }
}

/// A [`Disk`] over a directory that can only read: files are opened with `File::open`
/// (read-only descriptors), [`LOCK_FILE`] cannot be opened, and every change (create, write,
/// sync, truncate, rename, remove) is refused with an error. Listing and existence checks go
/// to the underlying [`FileDisk`], which neither writes.
#[derive(Debug)]
pub struct ReadOnlyDisk {
    disk: FileDisk,
}

fn refused(op: &str, name: &str) -> StorageError {
    StorageError::InvalidArgument(format!("read-only disk: refused to {op} {name}"))
}

impl Disk for ReadOnlyDisk {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        validate_name(name)?;
        if name == LOCK_FILE {
            return Err(StorageError::InvalidName {
                name: name.to_string(),
                why: "reserved for the directory lock",
            });
        }
        match File::open(self.disk.dir.join(name)) {
            Ok(file) => Ok(Arc::new(ReadOnlyFile { file, name: name.to_string() })),
            Err(e) if e.kind() == ErrorKind::NotFound && create => Err(refused("create", name)),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Err(StorageError::NotFound { name: name.to_string() })
            }
            Err(e) => Err(StorageError::io("open", name, e)),
        }
    }

    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        self.disk.exists(name)
    }

    fn remove(&self, name: &str) -> Result<(), StorageError> {
        Err(refused("remove", name))
    }

    fn rename(&self, from: &str, _to: &str) -> Result<(), StorageError> {
        Err(refused("rename", from))
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        self.disk.list()
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        Err(refused("sync", "the directory"))
    }
}

/// A file of a [`ReadOnlyDisk`]: a descriptor opened without write access.
#[derive(Debug)]
struct ReadOnlyFile {
    file: File,
    /// Its name within the disk, for error messages.
    name: String,
}

impl DiskFile for ReadOnlyFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        read_full_at(&self.file, &self.name, offset, buf)
    }

    fn write_at(&self, _offset: u64, _data: &[u8]) -> Result<(), StorageError> {
        Err(refused("write", &self.name))
    }

    fn sync(&self) -> Result<(), StorageError> {
        Err(refused("sync", &self.name))
    }

    fn len(&self) -> Result<u64, StorageError> {
        Ok(self.file.metadata().map_err(|e| StorageError::io("stat", &self.name, e))?.len())
    }

    fn set_len(&self, _len: u64) -> Result<(), StorageError> {
        Err(refused("truncate", &self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(utc_timestamp(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn lock_file_fields_are_one_bounded_line() {
        assert_eq!(one_line("thor\nserver\t"), "thor server");
        assert_eq!(one_line(&"x".repeat(1000)).len(), LOCK_FIELD_BYTES_MAX);
        assert_eq!(one_line(&"é".repeat(1000)).len(), LOCK_FIELD_BYTES_MAX);
        let text = holder_text("thor\nserver");
        assert!(text.starts_with(&format!("pid {}\nprogram thor server\n", std::process::id())));
        assert!(text.contains("since "));
    }
}
