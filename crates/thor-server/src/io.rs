//! What a driver brings to the core: a clock, a commit log, and the disk side of a server (the
//! page file, the double-write buffer and the superblock), with the I/O the core's effects ask
//! for. The core never calls any of this; drivers do, on their own threads, without the core's
//! state locked.
//!
//! - [`Clock`]: loosely synchronised wall-clock time in microseconds. [`SystemClock`] reads the
//!   system's; the simulation has its own.
//! - [`CommitLog`]: the transaction log as the core's drivers see it (append in LSN order, make
//!   durable, truncate). `thor_storage::Log` is the one implementation today; a replicated log
//!   (a later issue) stands in behind the same trait.
//! - [`DiskSide`]: reads pages for fetches and validation ([`thor_server_core::Effect::Read`]),
//!   performs install rounds ([`thor_server_core::Effect::Install`]: installation reads, images,
//!   double-write buffer, page writes, fsync) and checkpoints
//!   ([`thor_server_core::Effect::Checkpoint`]: superblock, then log truncation).
//! - [`create`] and [`recover`]: making a database, and opening one by replaying its log into a
//!   new core within the MOB's budget (installing as it goes).
//! - [`DiskSide::backup_into`] and [`DiskSide::backup_to_dir`]: a consistent copy of a live
//!   database ([`thor_server_core::Effect::Backup`]). A backup is what a crash would leave with
//!   everything synced: the superblock, the page file and the log's durable records. Opening it
//!   runs ordinary recovery, whose replay from the checkpoint is idempotent over pages that
//!   already hold later installs (the crash case `docs/format.md` analyses), so it holds
//!   exactly the commits durable when the log's extent was taken. Install rounds and
//!   checkpoints wait while it copies (`quiesce`), so the page file does not change under the
//!   copy and the log keeps every segment from the checkpoint on; commits go on, and wait only
//!   if the MOB fills before the copy ends.
//! - [`DiskSide::image_into`]: the same copy without the log, over the database of a replica of
//!   a replicated server that lags behind its group's journals (thor-replica's
//!   `Out::FetchImage`): the replica's journal holds the records after the image's checkpoint.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::RwLock;
use thor_core::{Lsn, PageId, PageView, builtin, page};
use thor_storage::{Disk, FileDisk, Log, LogExtent, LogOptions, PageFile, StorageError};
use tracing::info;

use crate::dwb::DoubleWrite;
use crate::superblock::{self, Superblock};
use thor_server_core::EngineError;
use thor_server_core::{CheckpointJob, InstallJob, Installed};
use thor_server_core::{Core, CoreConfig, Effect, Input, ReadError};

/// The page file's name in a database directory.
pub const PAGE_FILE: &str = "pages";

/// Loosely synchronised wall-clock time, in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now_us(&self) -> u64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }
}

/// The log a core's driver appends to. See the module documentation.
pub trait CommitLog: Send + Sync + fmt::Debug {
    /// Buffers a record and returns its LSN (LSNs are given in call order). Must not wait for
    /// the disk while the caller keeps its unsynced bytes within the log's buffer (the core
    /// does, see [`CoreConfig::log_buffer_bytes`]).
    fn append(&self, record: &[u8]) -> Result<Lsn, StorageError>;
    /// [`CommitLog::append`] of a record the caller holds in a shared buffer, which the log
    /// may keep until it is written instead of copying it (a large commit's record).
    fn append_shared(&self, record: Bytes) -> Result<Lsn, StorageError> {
        self.append(&record)
    }
    /// Makes every record appended so far durable; returns the durable LSN.
    fn sync(&self) -> Result<Lsn, StorageError>;
    /// Whether records were appended that are not durable yet.
    fn has_unsynced(&self) -> bool;
    /// The LSN the next append gets.
    fn next_lsn(&self) -> Lsn;
    /// Records below `lsn` are no longer needed.
    fn truncate_before(&self, lsn: Lsn) -> Result<(), StorageError>;
    /// Makes everything durable and starts a new, empty segment, so that a following
    /// `truncate_before(next_lsn)` can drop the whole history (a clean shutdown).
    fn rotate(&self) -> Result<(), StorageError>;
    /// The files and bytes that hold every durable record and nothing else, for a backup.
    fn durable_extent(&self) -> Result<LogExtent, StorageError>;
    /// Bytes written, fsyncs and records made durable so far.
    fn counters(&self) -> (u64, u64, u64);
}

impl CommitLog for Log {
    fn append(&self, record: &[u8]) -> Result<Lsn, StorageError> {
        Log::append(self, record)
    }

    fn append_shared(&self, record: Bytes) -> Result<Lsn, StorageError> {
        Log::append_shared(self, record)
    }

    fn sync(&self) -> Result<Lsn, StorageError> {
        self.flush()?;
        Ok(self.durable_lsn())
    }

    fn has_unsynced(&self) -> bool {
        self.durable_lsn().0 + 1 < self.next_lsn().0
    }

    fn next_lsn(&self) -> Lsn {
        Log::next_lsn(self)
    }

    fn truncate_before(&self, lsn: Lsn) -> Result<(), StorageError> {
        Log::truncate_before(self, lsn)
    }

    fn rotate(&self) -> Result<(), StorageError> {
        Log::rotate(self)
    }

    fn durable_extent(&self) -> Result<LogExtent, StorageError> {
        Log::durable_extent(self)
    }

    fn counters(&self) -> (u64, u64, u64) {
        let s = self.stats();
        (s.bytes_written, s.flushes, s.records_synced)
    }
}

/// The files of a database besides the log, and the I/O on them. Shared by a driver's threads
/// (every method takes `&self`).
#[derive(Debug)]
pub struct DiskSide {
    /// The database directory.
    pub disk: Arc<dyn Disk>,
    /// Bytes per page.
    pub page_size: usize,
    /// The page file.
    pub pages: PageFile,
    /// Torn-write protection for in-place page writes.
    pub dwb: DoubleWrite,
    /// Install rounds and checkpoints hold it shared; a backup holds it exclusively, so that
    /// neither the page file nor the log's older segments change while it copies them.
    quiesce: RwLock<()>,
}

/// Bytes a backup copies per read and write: bounded memory whatever the database's size.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;

impl DiskSide {
    /// Reads and checks the installed image of `page`.
    pub fn read_page(&self, page: PageId) -> Result<Bytes, ReadError> {
        let mut buf = vec![0u8; self.page_size];
        match self.pages.read(page.get(), &mut buf) {
            Ok(true) => {}
            Ok(false) => {
                return Err(ReadError::Corrupt(thor_core::FormatError::BadPageHeader(
                    "allocated page missing from the page file",
                )));
            }
            // An allocated page beyond the end of the file: the file lost its tail.
            Err(StorageError::UnexpectedEof { .. }) => {
                return Err(ReadError::Corrupt(thor_core::FormatError::BadPageHeader(
                    "the page file ends before this allocated page",
                )));
            }
            Err(e) => return Err(ReadError::Storage(e.to_string())),
        }
        PageView::parse_stored(&buf, page).map_err(ReadError::Corrupt)?;
        Ok(Bytes::from(buf))
    }

    /// Performs an install round: installation reads, new images, the double-write buffer,
    /// the page writes in runs of consecutive pages, and their fsync.
    pub fn install(&self, job: &InstallJob) -> Result<Installed, EngineError> {
        let (images, reads) = job.build(|p| {
            self.read_page(p).map_err(|e| match e {
                ReadError::Corrupt(source) => EngineError::CorruptPage { page: p, cause: source },
                ReadError::Storage(why) => EngineError::Read { page: p, why },
            })
        })?;
        let mut dwb_buf = Vec::new();
        self.dwb.write(&images, &mut dwb_buf)?;
        let pages = &job.pages;
        let mut i = 0;
        while i < pages.len() {
            let mut k = i + 1;
            while k < pages.len() && pages[k].page.get() == pages[k - 1].page.get() + 1 {
                k += 1;
            }
            let bytes = &images[i * self.page_size..k * self.page_size];
            self.pages.write_run(pages[i].page.get(), bytes)?;
            i = k;
        }
        self.pages.sync()?;
        Ok(Installed { images: Bytes::from(images), installation_reads: reads })
    }

    /// Performs a checkpoint: the superblock, then the log truncation it allows.
    pub fn checkpoint(&self, job: &CheckpointJob, log: &dyn CommitLog) -> Result<(), EngineError> {
        write_superblock(&*self.disk, &job.superblock)?;
        if let Some(lsn) = job.truncate_before {
            log.truncate_before(lsn)?;
        }
        Ok(())
    }

    /// Performs one effect that needs only the disk side and the log, synchronously, and
    /// returns the input that reports it (`None` for effects that are not I/O).
    pub fn perform(&self, effect: &Effect, log: &dyn CommitLog) -> Option<Input> {
        match effect {
            Effect::Read { page } => {
                Some(Input::PageRead { page: *page, result: self.read_page(*page) })
            }
            // A threaded driver holds `hold_installs` around these and the core's report of
            // them (see there); a single-threaded one needs nothing.
            Effect::Install(job) => Some(Input::Installed {
                job: job.id,
                result: self.install(job).map_err(|e| e.to_string()),
            }),
            Effect::Checkpoint(job) => Some(Input::Checkpointed {
                job: job.id,
                result: self.checkpoint(job, log).map_err(|e| e.to_string()),
            }),
            // Where a backup may go, and whether the engine may take one, is the driver's to
            // decide (`Engine` serves them; see `resolve_backup_request`).
            Effect::Backup { conn, id, .. } => Some(Input::BackedUp {
                conn: *conn,
                id: *id,
                result: Err("this server takes no backups".to_string()),
            }),
            Effect::Append { .. }
            | Effect::Reply { .. }
            | Effect::Done { .. }
            | Effect::Peer { .. } => None,
        }
    }
}

impl DiskSide {
    /// Held (shared) by a threaded driver from the start of an install round or checkpoint
    /// until the core has stepped its outcome; a backup holds it exclusively. So a backup
    /// never copies a page file that a round is writing, nor one a failed round left torn
    /// before the core knew it failed (the backup's `ready` check then sees the failure).
    pub fn hold_installs(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.quiesce.read()
    }

    /// Waits for the install round or checkpoint in progress (if any) and holds new ones off
    /// while the guard lives: what a group member's driver holds while it reopens the member
    /// from its disk, so that no round of the stopped member writes under the new one.
    pub fn hold_all(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.quiesce.write()
    }

    /// Copies the database into `dest`, which must hold no database: the superblock, the page
    /// file and the log's durable extent, each synced, then `dest`'s directory. Waits for an
    /// install round or checkpoint in progress and holds new ones off until done; commits go
    /// on. The copy opens as a database holding exactly the commits up to the returned LSN.
    ///
    /// `ready` runs once installs are held off, before anything is copied: the driver refuses
    /// there if its server has failed (only recovery may repair what a failure left).
    pub fn backup_into(
        &self,
        log: &dyn CommitLog,
        dest: &dyn Disk,
        ready: impl FnOnce() -> Result<(), EngineError>,
    ) -> Result<thor_wire::BackupInfo, EngineError> {
        if dest.exists(superblock::FILE)? {
            return Err(EngineError::AlreadyExists);
        }
        let _exclusive = self.quiesce.write();
        ready()?;
        // The log's extent first: the page file can only hold installs of commits at or below
        // it (installs wait for us, and only durable commits are ever installed).
        let extent = log.durable_extent()?;
        // Grown to the largest piece copied (at most a chunk): a small database's backup does
        // not zero a whole chunk.
        let mut buf = Vec::new();
        let page_bytes = copy_file(&*self.disk, dest, PAGE_FILE, None, &mut buf)?;
        let mut log_bytes = 0;
        for (name, bytes) in &extent.segments {
            log_bytes += copy_file(&*self.disk, dest, name, Some(*bytes), &mut buf)?;
        }
        // The superblock last, as `create` does: a copy cut short is not a database.
        copy_file(&*self.disk, dest, superblock::FILE, None, &mut buf)?;
        dest.sync_dir()?;
        Ok(thor_wire::BackupInfo { lsn: extent.durable_lsn, page_bytes, log_bytes })
    }

    /// Copies this database's image (page file, double-write buffer, superblock: what a crash
    /// would leave of it, without any log) over the database in `dest`, for a replica of a
    /// replicated server that lags behind what its group's journals keep (thor-replica's
    /// `Out::FetchImage`). `dest` keeps every other file (the replica's journal). Holds install
    /// rounds and checkpoints off while it copies, as [`DiskSide::backup_into`] does, so the
    /// image is one a crash could have left: recovery from its superblock's checkpoint with
    /// the records after it gives the database. The superblock is written last, atomically: a
    /// copy cut short leaves `dest` with its old superblock, whose checkpoint is below what the
    /// replica needs, so the replica asks again. Returns the image's superblock.
    pub fn image_into(&self, dest: &dyn Disk) -> Result<Superblock, EngineError> {
        let _exclusive = self.quiesce.write();
        let sb = read_superblock(&*self.disk)?;
        let mut buf = Vec::new();
        copy_file(&*self.disk, dest, PAGE_FILE, None, &mut buf)?;
        if self.disk.exists(crate::dwb::FILE)? {
            copy_file(&*self.disk, dest, crate::dwb::FILE, None, &mut buf)?;
        } else if dest.exists(crate::dwb::FILE)? {
            // No buffer here: `dest`'s own must not "repair" the copied pages on open.
            let f = dest.open(crate::dwb::FILE, false)?;
            f.set_len(0)?;
            f.sync()?;
        }
        write_superblock(dest, &sb)?;
        Ok(sb)
    }

    /// [`DiskSide::backup_into`] a new directory `path`: the copy is made in a sibling
    /// directory named `.NAME.partial`, locked while it is written, and renamed to `path` once
    /// complete and synced, so that `path` is either absent or a whole backup, never a partial
    /// one. Refuses a `path` that exists or whose parent does not (the same rule as `thor
    /// compact`: a mistyped path creates nothing). A leftover `.NAME.partial` of an
    /// interrupted backup (not locked, holding only a database's files) is removed, with a log
    /// line, and the backup goes on, as an interrupted `thor compact`'s temporary directory is
    /// reclaimed; one another backup is writing (locked), or holding other files, is refused.
    pub fn backup_to_dir(
        &self,
        log: &dyn CommitLog,
        path: &Path,
        ready: impl FnOnce() -> Result<(), EngineError>,
    ) -> Result<thor_wire::BackupInfo, EngineError> {
        let bad =
            |why: &str| EngineError::BadOptions(format!("backup to {}: {why}", path.display()));
        if path.exists() {
            return Err(bad("it exists; give a new path"));
        }
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| bad("no file name"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(bad("its parent directory does not exist"));
        }
        let partial = parent.join(format!(".{name}.partial"));
        let io = |op: &'static str, e: std::io::Error| {
            EngineError::from(StorageError::Io { op, name: path.display().to_string(), cause: e })
        };
        let leftover = partial.exists();
        if !leftover {
            std::fs::create_dir(&partial).map_err(|e| io("create backup dir", e))?;
        }
        let dest = FileDisk::open_locked(&partial, false, "thor backup").map_err(|e| match e {
            StorageError::Locked { holder, .. } => {
                bad(&format!("{} is being written by another backup ({holder})", partial.display()))
            }
            e => e.into(),
        })?;
        if leftover {
            // Ours to reclaim only if it holds what a backup writes and nothing else.
            let files = dest.list()?;
            if let Some(foreign) = files.iter().find(|f| !is_database_file(f)) {
                return Err(bad(&format!(
                    "{} holds `{foreign}`, which no backup writes; move it away",
                    partial.display()
                )));
            }
            for f in &files {
                dest.remove(f)?;
            }
            dest.sync_dir()?;
            info!(
                partial = %partial.display(),
                files = files.len(),
                "removed the partial copy an interrupted backup left; backing up afresh"
            );
        }
        let info = self.backup_into(log, &dest, ready);
        drop(dest);
        let info = match info {
            Ok(info) => info,
            Err(e) => {
                // Nothing at `path`; the partial copy is no use to anyone.
                let _ = std::fs::remove_dir_all(&partial);
                return Err(e);
            }
        };
        std::fs::rename(&partial, path).map_err(|e| io("rename backup dir", e))?;
        std::fs::File::open(&parent).and_then(|d| d.sync_all()).map_err(|e| io("fsync dir", e))?;
        Ok(info)
    }
}

/// Whether `name` is a file a database directory (or a backup being written) holds.
fn is_database_file(name: &str) -> bool {
    [superblock::FILE, superblock::TMP_FILE, PAGE_FILE, crate::dwb::FILE].contains(&name)
        || name.starts_with("log.")
}

/// Where a backup asked for over the protocol goes: `name` under `dir`, the directory the
/// server's operator chose (`thor server --backup-dir`). `name` must be a relative path of
/// plain components (no `..`, no `.`, no root), so that a client can only ever write inside
/// that directory; without one the server takes no backups over the network.
pub fn resolve_backup_request(
    dir: Option<&Path>,
    name: &str,
) -> Result<std::path::PathBuf, EngineError> {
    let Some(dir) = dir else {
        return Err(EngineError::BadOptions(
            "this server takes no backups over the network (start it with a backup directory, \
             `thor server --backup-dir DIR`)"
                .to_string(),
        ));
    };
    // Checked on the text, not on `Path::components` (which drops `.` and doubled slashes).
    let plain = !name.is_empty()
        && !name.contains('\0')
        && name.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    if !plain {
        return Err(EngineError::BadOptions(format!(
            "backup name {name:?} is not a relative path of plain names (no leading or trailing /, \
             no . or ..): backups go inside the server's backup directory"
        )));
    }
    Ok(dir.join(name))
}

/// Copies the first `len` bytes of `name` (all of it for `None`) from `src` to a new file of
/// the same name in `dest` through `buf`, and syncs it; returns the bytes copied.
fn copy_file(
    src: &dyn Disk,
    dest: &dyn Disk,
    name: &str,
    len: Option<u64>,
    buf: &mut Vec<u8>,
) -> Result<u64, StorageError> {
    let from = src.open(name, false)?;
    let len = match len {
        Some(n) => n,
        None => from.len()?,
    };
    let to = dest.open(name, true)?;
    to.set_len(0)?;
    let mut off = 0u64;
    while off < len {
        let n = BACKUP_CHUNK_BYTES.min((len - off) as usize);
        if buf.len() < n {
            buf.resize(n, 0);
        }
        from.read_exact_at(off, &mut buf[..n])?;
        to.write_at(off, &buf[..n])?;
        off += n as u64;
    }
    to.sync()?;
    Ok(len)
}

/// Writes a superblock atomically: a temporary file, synced, renamed over the old one, and the
/// directory synced. A crash leaves either the old or the new one.
pub fn write_superblock(disk: &dyn Disk, sb: &Superblock) -> Result<(), StorageError> {
    let f = disk.open(superblock::TMP_FILE, true)?;
    f.set_len(0)?;
    f.write_at(0, &sb.encode())?;
    f.sync()?;
    drop(f);
    disk.rename(superblock::TMP_FILE, superblock::FILE)?;
    disk.sync_dir()
}

/// Reads the superblock of the database in `disk`.
pub fn read_superblock(disk: &dyn Disk) -> Result<Superblock, EngineError> {
    if !disk.exists(superblock::FILE)? {
        return Err(EngineError::NotADatabase);
    }
    let f = disk.open(superblock::FILE, false)?;
    let len = f.len()?;
    let mut buf = vec![0u8; len.min(superblock::BYTES as u64 * 2) as usize];
    let n = f.read_at(0, &mut buf)?;
    buf.truncate(n);
    Ok(Superblock::decode(&buf)?)
}

/// Creates a database with pages of `page_size` bytes for server `server_id` in `disk`,
/// which must not hold one. The superblock goes last: a crash before it leaves no database,
/// not a broken one.
pub fn create(
    disk: &dyn Disk,
    page_size: usize,
    server_id: thor_core::ServerId,
) -> Result<(), EngineError> {
    if !thor_core::limits::is_valid_page_size(page_size) {
        return Err(EngineError::BadOptions(format!("invalid page size {page_size}")));
    }
    if disk.exists(superblock::FILE)? {
        return Err(EngineError::AlreadyExists);
    }
    let pages = PageFile::open(disk, PAGE_FILE, page_size, true)?;
    let mut first = builtin::first_page(page_size).expect("builtins fit a page");
    page::seal(&mut first);
    pages.write(PageId::FIRST.get(), &first)?;
    pages.sync()?;
    let sb = Superblock {
        page_size,
        server_id,
        root: builtin::ROOT,
        checkpoint: Lsn(1),
        alloc_page: Some(PageId::FIRST),
        generation: 1,
    };
    write_superblock(disk, &sb)?;
    Ok(())
}

/// Opens the disk side of the database in `disk` (repairing torn pages from the double-write
/// buffer) and reads its superblock, without opening any log: the first half of [`recover`].
/// A replicated server (thor-replica's group member) opens its database this way and replays
/// the records of its replica group's journal into a [`Core::new`] over the superblock
/// instead of a log of its own.
pub fn open_disk_side(disk: Arc<dyn Disk>) -> Result<(Superblock, DiskSide), EngineError> {
    let sb = read_superblock(&*disk)?;
    let page_size = sb.page_size;
    let pages = PageFile::open(&*disk, PAGE_FILE, page_size, false)?;
    let dwb = DoubleWrite::open(&*disk, page_size)?;
    restore_torn_pages(&pages, &dwb, page_size)?;
    Ok((sb, DiskSide { disk, page_size, pages, dwb, quiesce: RwLock::new(()) }))
}

/// What [`recover`] opened.
#[derive(Debug)]
pub struct Recovered {
    /// The core, ready for input.
    pub core: Core,
    /// The disk side.
    pub disk_side: DiskSide,
    /// The log, positioned after its last intact record.
    pub log: Arc<Log>,
    /// Log records replayed.
    pub records_replayed: u64,
    /// Install rounds run during recovery to stay within the MOB's budget.
    pub rounds: u64,
}

/// Opens the database in `disk`: repairs torn pages from the double-write buffer, opens the
/// log, replays it from the checkpoint into a new core and finishes recovery. The MOB stays
/// within its budget: when replay fills it, an install round runs (and a checkpoint is
/// written) before replay goes on, so memory is bounded by the settings, not by the log.
pub fn recover(
    disk: Arc<dyn Disk>,
    cfg: CoreConfig,
    log_opts: LogOptions,
    study: &thor_study::StudyOptions,
) -> Result<Recovered, EngineError> {
    let (sb, disk_side) = open_disk_side(disk.clone())?;
    let page_size = sb.page_size;
    // Streaming: the log is read a chunk at a time, so an open holds the MOB's budget of
    // versions, not the log.
    let (log, report) = Log::open_streaming(disk.clone(), log_opts.clone())?;
    let log = Arc::new(log);
    let checkpoint = sb.checkpoint;
    let next_lsn = report.next_lsn;
    // Every record from the checkpoint to the log's end must be there: the checkpoint never
    // passes a record that is not durable, and truncation removes only records below it.
    if checkpoint > next_lsn {
        return Err(EngineError::CorruptRecord {
            lsn: checkpoint.0,
            why: format!("the superblock's checkpoint is past the log's end (LSN {next_lsn})"),
        });
    }
    let mut core = Core::new(cfg, sb)?;
    // The commit mode's path before replay: the log's records of a page mode meet the path
    // that replays them.
    thor_study::set_commit_mode(&mut core, study)?;
    let mut replayed = 0;
    let mut rounds = 0;
    let mut fx = Vec::new();
    let mut reader = log.reader(checkpoint).map_err(|e| EngineError::CorruptRecord {
        lsn: checkpoint.0,
        why: format!("the log no longer holds the records from the checkpoint on: {e}"),
    })?;
    let mut expected = checkpoint;
    let mut wpl_restored = false;
    while let Some((lsn, payload)) = reader.next()? {
        if lsn != expected {
            return Err(EngineError::CorruptRecord {
                lsn: expected.0,
                why: format!("missing from the log (the next record is LSN {lsn})"),
            });
        }
        expected = lsn.next();
        // The first WPL record replay meets: WPL's copies go back into the MOB before any
        // further replay (an install round during replay must see them; see `restore_wpl`).
        if !wpl_restored && thor_study::wpl_log::is_wpl_record(payload) {
            wpl_restored = true;
            restore_wpl(&mut core, &disk_side, &log, page_size, study.wpl)?;
        }
        if let Err(e) = core.replay(lsn, Bytes::copy_from_slice(payload)) {
            return Err(unreadable(&*disk, &log_opts, lsn, e));
        }
        replayed += 1;
        if core.mob_over_budget() {
            install_now(&mut core, &disk_side, &*log, &mut fx)?;
            rounds += 1;
        }
    }
    drop(reader);
    let (tail, fresh) = core.tail_page();
    let image = if fresh {
        None
    } else {
        Some(disk_side.read_page(tail).map_err(|e| match e {
            ReadError::Corrupt(source) => EngineError::CorruptPage { page: tail, cause: source },
            ReadError::Storage(why) => EngineError::Read { page: tail, why },
        })?)
    };
    core.finish_recovery(next_lsn, image)?;
    core.check_invariants();
    if replayed > 0 {
        info!(records = replayed, rounds, "recovered from the log");
    }
    Ok(Recovered { core, disk_side, log, records_replayed: replayed, rounds })
}

/// The error for a record replay could not read ([`EngineError::UnreadableRecord`]): where it
/// is, found by inspecting the log (only this failure pays for that pass), what is wrong, and
/// what to run. Other errors pass through.
fn unreadable(disk: &dyn Disk, opts: &LogOptions, lsn: Lsn, e: EngineError) -> EngineError {
    let EngineError::CorruptRecord { why, .. } = e else { return e };
    let mut place = None;
    let found = thor_storage::log::inspect::inspect(disk, opts, |r| {
        if r.lsn == lsn {
            place = Some((r.segment.to_string(), r.offset));
        }
    });
    match (found, place) {
        (Ok(_), Some((segment, offset))) => {
            EngineError::UnreadableRecord { lsn: lsn.0, segment, offset, why }
        }
        _ => EngineError::CorruptRecord { lsn: lsn.0, why },
    }
}

/// WPL's restart at recovery (the study's hook, `thor_study::wpl_log::restore`), reading
/// each named copy's home page from the page file.
fn restore_wpl(
    core: &mut Core,
    disk_side: &DiskSide,
    log: &Log,
    page_size: usize,
    cfg: thor_study::WplConfig,
) -> Result<(), EngineError> {
    let r = thor_study::wpl_log::restore(core, log, page_size, cfg, |page| {
        disk_side.read_page(page).map_err(|e| match e {
            ReadError::Corrupt(source) => EngineError::CorruptPage { page, cause: source },
            ReadError::Storage(why) => EngineError::Read { page, why },
        })
    })?;
    info!(copies = r.copies, checkpoint = ?r.checkpoint, "WPL restart");
    Ok(())
}

/// Runs one install round and its checkpoint synchronously (recovery, before the core has a
/// driver).
fn install_now(
    core: &mut Core,
    disk_side: &DiskSide,
    log: &dyn CommitLog,
    fx: &mut Vec<Effect>,
) -> Result<(), EngineError> {
    fx.clear();
    core.start_round(fx);
    while let Some(effect) = fx.pop() {
        if let Some(input) = disk_side.perform(&effect, log) {
            let mut more = Vec::new();
            core.step(0, input, &mut more);
            fx.extend(more);
        }
    }
    match core.failed() {
        Some(why) => Err(EngineError::Failed(why.to_string())),
        None => Ok(()),
    }
}

/// Writes back every intact page of the double-write buffer whose in-place copy is torn or
/// older (see [`crate::dwb`]).
fn restore_torn_pages(
    pages: &PageFile,
    dwb: &DoubleWrite,
    page_size: usize,
) -> Result<(), EngineError> {
    let mut restored = false;
    let mut cur = vec![0u8; page_size];
    for (id, img) in dwb.intact_pages()? {
        let good = PageView::parse_stored(&img, id).expect("intact_pages checked it").version();
        let keep = match pages.read(id.get(), &mut cur) {
            Ok(true) => PageView::parse_stored(&cur, id).is_ok_and(|v| v.version() >= good),
            Ok(false) => false,
            // A short page at the end of the file is a torn extension: rewrite it.
            Err(StorageError::UnexpectedEof { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if !keep {
            pages.write(id.get(), &img)?;
            restored = true;
        }
    }
    if restored {
        pages.sync()?;
    }
    Ok(())
}

#[cfg(test)]
mod backup_tests {
    use super::*;

    #[test]
    fn an_image_replaces_the_database_and_keeps_the_other_files() {
        let (src, dest) = (thor_storage::MemDisk::new(), thor_storage::MemDisk::new());
        create(&src, 4096, thor_core::ServerId(1)).unwrap();
        create(&dest, 4096, thor_core::ServerId(1)).unwrap();
        let mut sb = read_superblock(&src).unwrap();
        sb.checkpoint = Lsn(42);
        sb.generation = 7;
        write_superblock(&src, &sb).unwrap();
        // A second page, so that the page files differ.
        let (_, ds) = open_disk_side(Arc::new(src.clone())).unwrap();
        let mut second = vec![0u8; 4096];
        second[..4].copy_from_slice(b"page");
        ds.pages.write(2, &second).unwrap();
        let journal = dest.open("journal.0", true).unwrap();
        journal.write_at(0, b"raft").unwrap();

        let got = ds.image_into(&dest).unwrap();
        assert_eq!(got, sb);
        let (opened, _) = open_disk_side(Arc::new(dest.clone())).unwrap();
        assert_eq!(opened, sb);
        let bytes = |d: &dyn Disk, name: &str| {
            let f = d.open(name, false).unwrap();
            let mut b = vec![0u8; f.len().unwrap() as usize];
            f.read_exact_at(0, &mut b).unwrap();
            b
        };
        assert_eq!(bytes(&dest, PAGE_FILE), bytes(&src, PAGE_FILE));
        assert_eq!(bytes(&dest, "journal.0"), b"raft", "the replica's journal stays");
    }

    #[test]
    fn backup_requests_stay_inside_the_backup_directory() {
        let dir = Path::new("/srv/backups");
        let ok = |name| resolve_backup_request(Some(dir), name).unwrap();
        assert_eq!(ok("nightly"), dir.join("nightly"));
        assert_eq!(ok("2026/11/23"), dir.join("2026/11/23"));
        for bad in ["", "/etc/x", "../x", "a/../../x", "./x", "a/./b", "a//b", "a/", "a\0b", ".."] {
            assert!(resolve_backup_request(Some(dir), bad).is_err(), "{bad:?}");
        }
        let err = resolve_backup_request(None, "nightly").unwrap_err();
        assert!(err.to_string().contains("--backup-dir"), "{err}");
    }
}
