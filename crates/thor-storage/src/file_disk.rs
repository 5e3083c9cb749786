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
//! *Read-only opens.* [`FileDisk::open_read_only`] is for programs that only read a database
//! (`thor check`, `thor::open_read_only`): it writes nothing at all, not even the holder line.
//! It takes a *shared* `flock` on the directory itself (a directory can be opened read-only
//! and locked without writing anything, where `LOCK` might not exist, as in a backup copy), and
//! [`FileDisk::open_locked`] takes an exclusive `flock` on the directory too, after `LOCK`'s:
//! so any number of readers may share a directory, and a writer and a reader exclude each
//! other. A writer refused by readers is told so ("a read-only opener"), since readers leave
//! no holder line; a reader refused by a writer gets the writer's holder line.
//!
//! While a disk holds the lock, `LOCK` is not one of its files: [`Disk::list`] leaves it out
//! and opening, removing or renaming it is [`StorageError::InvalidName`], so that no code
//! going through the disk (a cleanup of unknown files, say) can delete the lock from under
//! its holder and let a second opener in.
//!
//! # Direct reads
//!
//! A server's page cache is the point of the DEMOTE experiment (issue 13): a page the server
//! cache misses should cost a read from the device. With ordinary reads it does not: the OS
//! page cache below keeps every page the server wrote or read recently, so a "miss" is a
//! memory copy of a few microseconds, and the experiment measures nothing. Dropping the OS
//! cache needs root; [`FileDisk::with_direct_reads`] goes around it instead. Each file the disk
//! opens then has two descriptors:
//!
//! ```text
//!   write_at, set_len, sync, len ──> buffered fd (O_RDWR)  ──> OS page cache ──> device
//!   read_at ───────────────────────> direct fd (O_RDONLY | O_DIRECT) ──────────> device
//! ```
//!
//! Writes stay buffered, so the log's group commit, the flusher's runs and `fdatasync` behave
//! exactly as without the option. Reads never come from the OS cache: a read finds the bytes
//! on the device. They are nevertheless up to date: before a direct read Linux writes back the
//! dirty page-cache pages in its range (`filemap_write_and_wait_range`), so a read after an
//! unsynced buffered write sees that write, like a buffered read would. That writeback is a
//! cost (a read of a page the flusher just wrote, before its sync, waits for the device
//! write), never a durability promise: only [`DiskFile::sync`] makes a write durable.
//!
//! *Which files.* The option applies to every file the disk opens (not to [`LOCK_FILE`]).
//! While a server runs, the page file is the only file it reads (a fetch that misses the
//! server cache); the log, the double-write buffer and the superblock are read at open and
//! recovery only, where reading them directly is correct and merely slower. So "every file" is
//! "the page file" in the steady state, without this crate knowing the server's file names.
//!
//! *Alignment.* `O_DIRECT` needs the file offset, the length and the buffer address aligned
//! to the device's logical block size. Callers' reads are not (a page at any offset, a log
//! chunk of any length, a `Vec` buffer), so a direct read reads the enclosing range of
//! [`DIRECT_IO_ALIGN_BYTES`]-aligned blocks into an aligned bounce buffer (a `Vec` one block
//! longer than needed, used from its first aligned byte: no `unsafe`) and copies the asked
//! bytes out. An 8 KiB page at an 8 KiB offset is one aligned 8 KiB device read. At the end of
//! the file the device read comes back short (the kernel stops at the file's length), and the
//! caller gets the same short count a buffered read gives.
//!
//! *Cost.* Each direct read is a device read (tens of microseconds on an SSD, more on a disk,
//! versus a few microseconds from the OS cache), plus an allocation and a copy of the bounce
//! buffer (noise next to the device). There is no read-ahead. That is the point for the
//! experiment and a loss for everything else: leave the option off outside experiments.
//!
//! *Refusal.* A file system that does not support `O_DIRECT` makes `open` fail with `EINVAL`;
//! that is [`StorageError::DirectIoUnsupported`], naming the path. A locked disk checks at
//! [`FileDisk::with_direct_reads`] (on its lock file), so the error comes before anything is
//! opened; an unlocked one finds out at its first [`Disk::open`]. There is no silent fallback
//! to buffered reads. Note that tmpfs accepts `O_DIRECT` since Linux 6.6 (reads are memory
//! copies there: there is no device to go to), so an accepted flag does not prove a device.
//!
//! [`FileDisk::direct_read_stats`] counts the direct reads and their bytes (atomics shared by
//! the disk, its clones and its files), so an experiment can report device reads.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::{DIRECT_IO_ALIGN_BYTES, LOCK_FIELD_BYTES_MAX, LOCK_FILE_BYTES_MAX};

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
    /// With direct reads on (see the module documentation), their counters: shared by clones
    /// and by every file opened, so that one snapshot counts all of them. `None`: buffered.
    direct: Option<Arc<DirectCounters>>,
}

/// A snapshot of a [`FileDisk`]'s direct-read counters ([`FileDisk::direct_read_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectReadStats {
    /// Reads served by the direct descriptor: each is one device read in practice (more only
    /// if the kernel returns a short count before the end of the file). Reads at or past the
    /// end of the file count too, though the kernel answers them without the device.
    pub reads: u64,
    /// Bytes handed to callers.
    pub bytes: u64,
    /// Bytes the device read: `bytes` rounded out to whole aligned blocks at both ends
    /// ([`DIRECT_IO_ALIGN_BYTES`]), up to the end of the file.
    pub device_bytes: u64,
    /// Nanoseconds spent waiting for the device reads (summed over concurrent readers): with
    /// `reads`, the mean cost of a device read on this machine, which an experiment needs
    /// beside its counts (a clock read costs tens of ns against a read's ~100 us).
    pub read_ns: u64,
}

/// Counters updated without a lock by concurrent readers; see [`DirectReadStats`].
#[derive(Debug, Default)]
struct DirectCounters {
    /// See [`DirectReadStats::reads`].
    reads: AtomicU64,
    /// See [`DirectReadStats::bytes`].
    bytes: AtomicU64,
    /// See [`DirectReadStats::device_bytes`].
    device_bytes: AtomicU64,
    /// See [`DirectReadStats::read_ns`].
    read_ns: AtomicU64,
}

/// A held `flock` on a directory's [`LOCK_FILE`] and on the directory itself: closing the
/// files releases them.
#[derive(Debug)]
struct DirLock {
    /// The open lock file; the lock lives as long as this descriptor.
    file: File,
    /// The directory, locked exclusively too, which excludes read-only openers (who lock it
    /// shared: see the module documentation).
    dir: File,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the descriptors releases the locks anyway; unlocking first says so
        // explicitly and costs nothing. Nothing useful can be done about a failure here.
        let _ = self.dir.unlock();
        let _ = self.file.unlock();
    }
}

/// What a writer refused by read-only openers is told: they leave no holder line.
const READERS: &str = "a read-only opener (thor check, or a program's thor::open_read_only)";

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
        Ok(FileDisk { dir, lock: None, direct: None })
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
        let dir = File::open(&disk.dir).map_err(|e| StorageError::io("open dir", &shown, e))?;
        match dir.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StorageError::Locked { path: shown, holder: READERS.to_string() });
            }
            Err(TryLockError::Error(e)) => return Err(StorageError::io("lock", &shown, e)),
        }
        // Write first, then cut to length: a second opener reading meanwhile sees the old
        // holder's text or ours, never an empty file.
        let text = holder_text(program);
        file.write_all_at(text.as_bytes(), 0)
            .and_then(|()| file.set_len(text.len() as u64))
            .map_err(|e| StorageError::io("write lock file", &shown, e))?;
        disk.lock = Some(Arc::new(DirLock { file, dir }));
        Ok(disk)
    }

    /// Opens directory `path` (which must exist) for reading only, writing nothing to it: a
    /// shared lock on the directory, so that no writer ([`FileDisk::open_locked`]) can change
    /// the files while the returned disk lives, while other readers may share it (see the
    /// module documentation). A directory held by a writer is [`StorageError::Locked`] naming
    /// the writer. The disk refuses every change, like [`FileDisk::read_only`]'s.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<ReadOnlyDisk, StorageError> {
        let disk = FileDisk::open_dir(path, false)?;
        let shown = disk.dir.display().to_string();
        let dir = File::open(&disk.dir).map_err(|e| StorageError::io("open dir", &shown, e))?;
        match dir.try_lock_shared() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // The writer's holder line, read without writing (or creating) anything.
                let holder = match File::open(disk.dir.join(LOCK_FILE)) {
                    Ok(f) => describe_holder(&f),
                    Err(_) => "another process (the directory has no LOCK file)".to_string(),
                };
                return Err(StorageError::Locked { path: shown, holder });
            }
            Err(TryLockError::Error(e)) => return Err(StorageError::io("lock", &shown, e)),
        }
        Ok(ReadOnlyDisk { disk, shared: Some(Arc::new(SharedLock { dir })) })
    }

    /// This disk with direct reads on or off: with `on`, every file it opens from now on reads
    /// with `O_DIRECT`, around the OS page cache, while writes stay buffered (see the module
    /// documentation). Files opened before keep the mode they were opened with, so call this
    /// right after opening the directory:
    ///
    /// ```no_run
    /// # use thor_storage::FileDisk;
    /// let disk = FileDisk::open_locked("/data/db", false, "thor server")?.with_direct_reads(true)?;
    /// # Ok::<(), thor_storage::StorageError>(())
    /// ```
    ///
    /// A locked disk checks at once that its file system accepts `O_DIRECT` (by opening its
    /// lock file so) and fails with [`StorageError::DirectIoUnsupported`] if not; an unlocked
    /// one reports that at its first [`Disk::open`]. Turning direct reads on again keeps the
    /// counters; off drops them.
    pub fn with_direct_reads(mut self, on: bool) -> Result<FileDisk, StorageError> {
        if !on {
            self.direct = None;
            return Ok(self);
        }
        if self.lock.is_some() {
            open_direct(&self.dir.join(LOCK_FILE), LOCK_FILE)?;
        }
        if self.direct.is_none() {
            self.direct = Some(Arc::new(DirectCounters::default()));
        }
        Ok(self)
    }

    /// Whether files opened now read with `O_DIRECT` ([`FileDisk::with_direct_reads`]).
    pub fn direct_reads(&self) -> bool {
        self.direct.is_some()
    }

    /// The direct reads made so far by the files of this disk and of its clones (all zero
    /// with direct reads off). Subtract two snapshots to count a phase.
    pub fn direct_read_stats(&self) -> DirectReadStats {
        self.direct.as_ref().map_or_else(DirectReadStats::default, |c| DirectReadStats {
            reads: c.reads.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            device_bytes: c.device_bytes.load(Ordering::Relaxed),
            read_ns: c.read_ns.load(Ordering::Relaxed),
        })
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
        let direct = match &self.direct {
            None => None,
            Some(counters) => {
                // Opened after the buffered descriptor, so that `create` has made the file.
                let direct = open_direct(&path, name)?;
                // Two opens by path could reach two files if the name was renamed over in
                // between; the direct descriptor must read what the buffered one writes.
                let (a, b) = (stat(&file, name)?, stat(&direct, name)?);
                if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
                    return Err(StorageError::io(
                        "open direct",
                        name,
                        std::io::Error::other("the file was replaced while being opened"),
                    ));
                }
                Some(DirectFile { file: direct, counters: counters.clone() })
            }
        };
        Ok(Arc::new(RealFile { file, direct, name: name.to_string() }))
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
    /// With direct reads on, the `O_DIRECT` descriptor that serves every read.
    direct: Option<DirectFile>,
    /// Its name within the disk, for error messages.
    name: String,
}

/// The read side of a file of a disk with direct reads.
#[derive(Debug)]
struct DirectFile {
    /// The same file opened read-only with `O_DIRECT`.
    file: File,
    /// The disk's counters.
    counters: Arc<DirectCounters>,
}

impl DiskFile for RealFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        match &self.direct {
            Some(d) => direct_read_at(&d.file, &d.counters, &self.name, offset, buf),
            None => read_full_at(&self.file, &self.name, offset, buf),
        }
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

/// Opens `path` read-only with `O_DIRECT`; a refusal of the flag (`EINVAL`) is
/// [`StorageError::DirectIoUnsupported`].
fn open_direct(path: &Path, name: &str) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| direct_open_error(path, name, e))
}

/// The error for a failed `O_DIRECT` open: `EINVAL` there means the file system does not do
/// direct I/O (the other arguments are fixed and valid); anything else is an ordinary failure.
fn direct_open_error(path: &Path, name: &str, e: std::io::Error) -> StorageError {
    if e.raw_os_error() == Some(libc::EINVAL) {
        StorageError::DirectIoUnsupported { path: path.display().to_string(), cause: e }
    } else {
        StorageError::io("open direct", name, e)
    }
}

fn stat(file: &File, name: &str) -> Result<std::fs::Metadata, StorageError> {
    file.metadata().map_err(|e| StorageError::io("stat", name, e))
}

/// Reads up to `buf.len()` bytes at `offset` through `file`, an `O_DIRECT` descriptor: reads
/// the enclosing aligned blocks into an aligned bounce buffer and copies the asked bytes out
/// (see the module documentation). Returns what a buffered read returns: short only at the
/// end of the file.
fn direct_read_at(
    file: &File,
    counters: &DirectCounters,
    name: &str,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, StorageError> {
    if buf.is_empty() {
        return Ok(0);
    }
    let align = DIRECT_IO_ALIGN_BYTES as u64;
    let start = offset - offset % align;
    // An end beyond u64 cannot be read by any path; say so as pread would (EINVAL).
    let Some(end) =
        offset.checked_add(buf.len() as u64).and_then(|e| e.checked_next_multiple_of(align))
    else {
        return Err(StorageError::io(
            "direct read",
            name,
            std::io::Error::from(ErrorKind::InvalidInput),
        ));
    };
    let span = usize::try_from(end - start).map_err(|_| {
        StorageError::InvalidArgument(format!("direct read of {} bytes", buf.len()))
    })?;
    // One block more than needed, so that an aligned `span` fits from the first aligned byte.
    let mut raw = vec![0u8; span + DIRECT_IO_ALIGN_BYTES];
    let skew = (DIRECT_IO_ALIGN_BYTES - raw.as_ptr() as usize % DIRECT_IO_ALIGN_BYTES)
        % DIRECT_IO_ALIGN_BYTES;
    let bounce = &mut raw[skew..skew + span];
    let mut done = 0;
    let t = std::time::Instant::now();
    while done < span {
        match file.read_at(&mut bounce[done..], start + done as u64) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                // A count that is not whole blocks means the file ended inside the last one;
                // reading on from an unaligned offset would be refused anyway.
                if done % DIRECT_IO_ALIGN_BYTES != 0 {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(StorageError::io("direct read", name, e)),
        }
    }
    let head = (offset - start) as usize;
    let got = done.saturating_sub(head).min(buf.len());
    buf[..got].copy_from_slice(&bounce[head..head + got]);
    counters.reads.fetch_add(1, Ordering::Relaxed);
    counters.bytes.fetch_add(got as u64, Ordering::Relaxed);
    counters.device_bytes.fetch_add(done as u64, Ordering::Relaxed);
    counters.read_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    Ok(got)
}

impl FileDisk {
    /// This directory as a [`Disk`] that can only read (for offline checkers): see
    /// [`ReadOnlyDisk`]. The lock, if held, stays held. Its reads are buffered whatever
    /// [`FileDisk::with_direct_reads`] says: offline checkers have no use for device reads.
    pub fn read_only(self) -> ReadOnlyDisk {
        ReadOnlyDisk { disk: self, shared: None }
    }
}

/// A held shared `flock` on a directory ([`FileDisk::open_read_only`]).
#[derive(Debug)]
struct SharedLock {
    /// The directory, open read-only; the lock lives as long as this descriptor.
    dir: File,
}

impl Drop for SharedLock {
    fn drop(&mut self) {
        let _ = self.dir.unlock();
    }
}

/// A [`Disk`] over a directory that can only read: files are opened with `File::open`
/// (read-only descriptors), [`LOCK_FILE`] cannot be opened, and every change (create, write,
/// sync, truncate, rename, remove) is refused with an error. Listing and existence checks go
/// to the underlying [`FileDisk`], which neither writes.
#[derive(Debug, Clone)]
pub struct ReadOnlyDisk {
    /// The directory (holding an exclusive lock when made by [`FileDisk::read_only`] from a
    /// locked disk).
    disk: FileDisk,
    /// The shared lock of [`FileDisk::open_read_only`], released with the last clone.
    shared: Option<Arc<SharedLock>>,
}

impl ReadOnlyDisk {
    /// The directory this disk reads.
    pub fn path(&self) -> &Path {
        &self.disk.dir
    }

    /// Whether this disk holds a shared lock of its own ([`FileDisk::open_read_only`]) rather
    /// than living under a writer's exclusive one ([`FileDisk::read_only`]).
    pub fn holds_shared_lock(&self) -> bool {
        self.shared.is_some()
    }
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
        // The lock file is the directory's, never one of a database's files.
        let mut names = self.disk.list()?;
        names.retain(|n| n != LOCK_FILE);
        Ok(names)
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
    use crate::page_file::PageFile;

    /// A fresh directory with direct reads on, and the same directory read buffered, or `None`
    /// (test skipped, said on stderr) where the file system refuses `O_DIRECT` (a tmpfs
    /// `TMPDIR` on Linux before 6.6).
    fn direct_and_buffered() -> Option<(tempfile::TempDir, FileDisk, FileDisk)> {
        let dir = tempfile::tempdir().unwrap();
        let buffered = FileDisk::open_dir(dir.path(), false).unwrap();
        let direct = buffered.clone().with_direct_reads(true).unwrap();
        match direct.open("probe", true) {
            Ok(_) => {}
            Err(e) if e.is_direct_io_unsupported() => {
                eprintln!("skipped: {e}");
                return None;
            }
            Err(e) => panic!("{e}"),
        }
        direct.remove("probe").unwrap();
        assert!(direct.direct_reads() && !buffered.direct_reads());
        Some((dir, direct, buffered))
    }

    /// Bytes that differ at every offset within a block and from block to block, so that a
    /// copy from the wrong place shows.
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31) ^ ((i / 4096) as u8) ^ seed).collect()
    }

    #[test]
    fn direct_reads_return_what_was_written() {
        let Some((_dir, direct, buffered)) = direct_and_buffered() else { return };
        let len = 3 * 4096 + 1234;
        let data = pattern(len, 7);
        let w = buffered.open("f", true).unwrap();
        w.write_at(0, &data).unwrap();
        w.sync().unwrap();
        let d = direct.open("f", false).unwrap();
        let b = buffered.open("f", false).unwrap();
        // (offset, length): aligned, unaligned, within one block, across one and several
        // block boundaries, a page at a page offset, up to the end, across it, past it.
        let cases: [(u64, usize); 14] = [
            (0, 4096),
            (0, 1),
            (1, 10),
            (4095, 2),
            (4000, 200),
            (100, 8192),
            (4096, 8192),
            (5000, 3 * 4096),
            (0, len),
            (len as u64 - 1, 1),
            (len as u64 - 100, 500),
            (3 * 4096, 4096),
            (len as u64, 10),
            (len as u64 + 5000, 4096),
        ];
        for (offset, n) in cases {
            let mut got = vec![0xAA; n];
            let mut want = vec![0xAA; n];
            let got_n = d.read_at(offset, &mut got).unwrap();
            let want_n = b.read_at(offset, &mut want).unwrap();
            assert_eq!(got_n, want_n, "count of ({offset}, {n})");
            assert_eq!(got, want, "bytes of ({offset}, {n})");
            let end = (offset as usize).min(len)..(offset as usize + n).min(len);
            assert_eq!(&got[..got_n], &data[end], "({offset}, {n}) against what was written");
        }
        // read_exact_at goes through read_at: the end of the file is the same error.
        let mut page = [0u8; 8192];
        assert!(matches!(
            d.read_exact_at(len as u64 - 100, &mut page),
            Err(StorageError::UnexpectedEof { .. })
        ));
        assert_eq!(d.read_at(0, &mut []).unwrap(), 0);
    }

    #[test]
    fn direct_read_sees_unsynced_buffered_writes() {
        let Some((_dir, direct, _buffered)) = direct_and_buffered() else { return };
        let f = direct.open("f", true).unwrap();
        let first = pattern(20_000, 1);
        f.write_at(0, &first).unwrap();
        f.sync().unwrap();
        // Overwrite in place and extend, without a sync: the dirty pages are in the OS cache
        // only, and the direct read must still see them (the kernel writes them back first).
        let second = pattern(6000, 2);
        f.write_at(3000, &second).unwrap();
        let tail = pattern(5000, 3);
        f.write_at(30_000, &tail).unwrap();
        let mut want = first.clone();
        want[3000..9000].copy_from_slice(&second);
        want.resize(30_000, 0);
        want.extend_from_slice(&tail);
        let mut got = vec![0u8; want.len() + 100];
        assert_eq!(f.read_at(0, &mut got).unwrap(), want.len());
        assert_eq!(&got[..want.len()], &want[..]);
        assert_eq!(f.len().unwrap(), want.len() as u64);
        // A cut made with set_len, also unsynced, is seen too.
        f.set_len(4000).unwrap();
        assert_eq!(f.read_at(0, &mut got).unwrap(), 4000);
        assert_eq!(&got[..4000], &want[..4000]);
    }

    #[test]
    fn direct_read_counters_count_reads_and_blocks() {
        let Some((_dir, direct, buffered)) = direct_and_buffered() else { return };
        let f = direct.open("f", true).unwrap();
        f.write_at(0, &pattern(10_000, 4)).unwrap();
        assert_eq!(direct.direct_read_stats(), DirectReadStats::default(), "writes are not reads");
        let mut buf = vec![0u8; 8192];
        // The file is 10_000 bytes: blocks 0 and 1, and 1808 bytes of block 2.
        assert_eq!(f.read_at(0, &mut buf).unwrap(), 8192); // aligned: blocks 0 and 1
        assert_eq!(f.read_at(4000, &mut buf[..200]).unwrap(), 200); // across: blocks 0 and 1
        assert_eq!(f.read_at(9000, &mut buf).unwrap(), 1000); // the end: part of block 2
        let got = direct.direct_read_stats();
        let want = DirectReadStats {
            reads: 3,
            bytes: 8192 + 200 + 1000,
            device_bytes: 8192 + 8192 + 1808,
            read_ns: got.read_ns,
        };
        assert_eq!(got, want);
        assert!(got.read_ns > 0, "three reads took some time");
        // Clones and the files they open share the counters.
        let clone = direct.clone();
        clone.open("f", false).unwrap().read_at(0, &mut buf[..1]).unwrap();
        assert_eq!(direct.direct_read_stats().reads, 4);
        // A buffered disk over the same directory counts nothing, and reads the same bytes.
        buffered.open("f", false).unwrap().read_at(0, &mut buf).unwrap();
        assert_eq!(buffered.direct_read_stats(), DirectReadStats::default());
        assert_eq!(direct.direct_read_stats().reads, 4);
        // Off drops the mode and the counters; files opened before keep reading directly.
        let off = clone.with_direct_reads(false).unwrap();
        assert!(!off.direct_reads());
        off.open("f", false).unwrap().read_at(0, &mut buf).unwrap();
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(direct.direct_read_stats().reads, 5);
    }

    #[test]
    fn page_file_over_direct_reads() {
        let Some((_dir, direct, _buffered)) = direct_and_buffered() else { return };
        let pages = PageFile::open(&direct, "pages", 8192, true).unwrap();
        let run: Vec<u8> = pattern(3 * 8192, 5);
        pages.write_run(2, &run).unwrap();
        let mut page = vec![0u8; 8192];
        for (i, id) in (2..5).enumerate() {
            assert!(pages.read(id, &mut page).unwrap());
            assert_eq!(page, run[i * 8192..(i + 1) * 8192]);
        }
        assert!(pages.read(1, &mut page).unwrap(), "a gap reads as zeros");
        assert!(page.iter().all(|b| *b == 0));
        assert!(!pages.read(5, &mut page).unwrap(), "beyond the end: never written");
        let s = direct.direct_read_stats();
        assert_eq!((s.reads, s.bytes, s.device_bytes), (5, 4 * 8192, 4 * 8192));
    }

    #[test]
    fn a_refused_direct_open_is_typed_and_names_the_path() {
        // No file system on a current Linux test machine refuses O_DIRECT (tmpfs accepts it
        // since 6.6), so this checks the mapping of the refusal the kernel gives (EINVAL).
        let path = Path::new("/db/pages");
        let e = direct_open_error(path, "pages", std::io::Error::from_raw_os_error(libc::EINVAL));
        assert!(e.is_direct_io_unsupported());
        let text = e.to_string();
        assert!(
            text.starts_with("/db/pages: the file system does not support direct I/O"),
            "{text}"
        );
        // Other failures stay what they are.
        let e = direct_open_error(path, "pages", std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(e, StorageError::Io { op: "open direct", .. }), "{e}");
        let e = direct_open_error(path, "pages", std::io::Error::from_raw_os_error(libc::ENOENT));
        assert!(e.is_not_found());
    }

    #[test]
    fn a_locked_disk_checks_direct_io_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let disk = FileDisk::open_locked(dir.path(), false, "test").unwrap();
        match disk.with_direct_reads(true) {
            Ok(disk) => {
                assert!(disk.direct_reads() && disk.is_locked());
                assert!(disk.list().unwrap().is_empty(), "the check leaves no file behind");
            }
            Err(e) => assert!(e.is_direct_io_unsupported(), "{e}"),
        }
    }

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
