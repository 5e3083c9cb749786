//! [`MemDisk`] and [`FaultDisk`]: in-memory disks with an exact crash model and a fault plan.
//!
//! # The crash model
//!
//! The model is deliberately as weak as POSIX allows for file contents, so that code surviving
//! it survives a real file system. For every file it keeps
//!
//! ```text
//!   durable image ── what a crash cannot take away (as of the file's last sync)
//!   pending ops   ── write_at / set_len calls since that sync, in call order
//!   live image    ── durable image with all pending ops applied: what reads see
//! ```
//!
//! and for the directory a *durable namespace* (as of the last `sync_dir`), the *live
//! namespace*, and the create / rename / remove operations between them, in call order.
//!
//! - [`DiskFile::sync`] applies the file's pending ops to its durable image and clears them.
//! - [`Disk::sync_dir`] makes the live namespace durable. Syncing a file does not make its name
//!   durable: a file created and synced but never `sync_dir`ed may vanish.
//!
//! [`MemDisk::crash`]`(seed)` replaces the live state by one that a power failure could leave,
//! drawn from a [`SplitMix64`] seeded with `seed` (so a seed replays a crash exactly, given the
//! same history):
//!
//! 1. **Namespace**: a random prefix (possibly empty, possibly all) of the namespace operations
//!    since the last `sync_dir` is replayed on the durable namespace. Files created since then
//!    may vanish; renames and removes may be undone; but never out of order, so a rename is
//!    never kept while an earlier create is lost.
//! 2. **Contents**: for each file in that namespace, in name order, starting from its durable
//!    image:
//!    - every pending `write_at` is split into *sector pieces* at the multiples of the disk's
//!      sector size ([`MemDisk::sector_bytes`], default [`MEM_SECTOR_BYTES_DEFAULT`]), counted
//!      from the start of the file, not of the write. Each write is lost, lands whole, or is
//!      *torn*: then each of its pieces lands or not, independently. A torn write can keep a
//!      later sector and lose an earlier one.
//!    - every pending `set_len(n)` lands or not. One that lands zeroes the bytes from `n` on,
//!      as a truncation followed by a re-extension would.
//!    - everything that lands is applied in a random order, whatever the call order: an
//!      earlier write can be lost while a later one is kept, and overlapping writes can land
//!      in either order (sector by sector).
//!    - the file's length is chosen separately, as file systems keep it in metadata: it is the
//!      durable length or the live length after one of the pending ops. Landed bytes beyond
//!      it are cut; bytes below it that nothing landed on read as zeros (the "null bytes after
//!      a crash" that XFS and ext4 in writeback mode show).
//! 3. The result becomes both the live and the durable state: the disk is rebooted and usable.
//!
//! ## Why this suffices
//!
//! For file contents POSIX promises only that `fsync` (here `fdatasync`) makes earlier writes
//! durable; until then a write may reach the medium in whole, in part or not at all, in any
//! order with other unsynced writes, because the page cache writes back pages in any order and
//! the device reorders its queue. The smallest unit a device writes atomically is a sector
//! (512 bytes on the drives that promise anything; 4 KiB on many), which is why tears happen at
//! sector granularity and never inside a sector. A model that tore at byte granularity would
//! be harsher, but only a little: code that is correct at the 512-byte default is correct at
//! any larger sector, since a larger sector is a union of smaller pieces landing together.
//! Tests can lower the sector size ([`MemDisk::with_sector_bytes`]) to make tears likelier in
//! small files. What the model leaves out is corruption that no crash causes (bit rot, stale
//! data of other files exposed by `data=writeback`): that is the job of checksums, and tests
//! inject it with [`MemDisk::edit_file`].
//!
//! For the namespace the model is *stronger* than POSIX, which promises nothing about the
//! order in which unsynced creates, renames and removes persist. Linux's journaling file
//! systems (ext4, XFS, btrfs) do commit them in order, and more to the point thor never
//! depends on the order: every namespace change that a later step relies on is followed by
//! `sync_dir` before that step (the log syncs the directory after creating a segment and after
//! each removal; the server's superblock is written to a temporary file, synced, renamed and
//! the directory synced). A prefix of the namespace operations is therefore all a crash can do
//! to a correct thor, and keeping the model at prefixes keeps the outcomes few enough for the
//! seeded tests to cover.
//!
//! Every [`DiskFile`] opened before the crash, and every clone of the disk other than the one
//! `crash` was called on, then fails every [`Disk`]/[`DiskFile`] operation with
//! [`StorageError::StaleHandle`]: in the model the process that held them died, so a test can
//! neither keep writing through them nor accidentally read stale state. Clones made *from the
//! crashing handle* after the crash are live. (So hold the disk by value and give the engine
//! `Arc::new(disk.clone())`; an `Arc<MemDisk>` shared with the engine shares one handle.)
//! The test helpers ([`MemDisk::file_bytes`], [`MemDisk::edit_file`], counters, fault plan)
//! ignore epochs: they are the test's view of the medium, not the dead process's.
//!
//! # Faults
//!
//! A [`FaultPlan`] (normally set through [`FaultDisk`]; a [`MemDisk`] has an empty one) makes
//! chosen operations fail with [`StorageError::InjectedFault`]:
//!
//! - `fail_write_at: Some(n)`: the `n`-th write (counting `write_at` and `set_len` calls from 1
//!   since the disk was created or last crashed) fails. Its effect is still recorded as a
//!   pending (unsynced) op, because a failed write may or may not have reached the medium; the
//!   next crash decides.
//! - `fail_sync_at: Some(n)`: the `n`-th sync (file `sync` and `sync_dir` calls) fails and makes
//!   nothing durable. The pending ops stay pending: after a failed fsync nobody knows what is
//!   on the medium, and a later crash may keep any prefix.
//! - `die_after_ops: Some(n)`: every operation after the `n`-th (of any kind, including reads)
//!   fails and has no effect: the disk died.
//! - `capacity_bytes: Some(n)`: the disk is full at `n` bytes. A `write_at` or `set_len` that
//!   would take the sum of the live lengths of the named files past `n` fails with no effect,
//!   as `ENOSPC` (`StorageError::Io` whose source is the operating system's "No space left on
//!   device"), so code sees exactly what a full file system gives it; writes within a file's
//!   length, shrinking, reads, syncs, creates of empty files and removes go on working, as on a
//!   full ext4 or xfs. Raising or clearing the capacity is "space freed": the same handles
//!   work again. Full-disk tests use this instead of a small tmpfs, so that CI can run them.
//!
//! [`DiskCounters`] report the numbers of operations, writes and syncs so that a test can run a
//! workload once, then pick `n` at random. A crash clears the plan and the counters.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::{MEM_FILE_BYTES_MAX, MEM_SECTOR_BYTES_DEFAULT};
use crate::rng::SplitMix64;

/// Which operations of a [`MemDisk`]/[`FaultDisk`] fail. See the module documentation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Fail the write (`write_at` or `set_len`) with this 1-based number.
    pub fail_write_at: Option<u64>,
    /// Fail the sync (`sync` or `sync_dir`) with this 1-based number.
    pub fail_sync_at: Option<u64>,
    /// Fail every operation numbered above this: the disk died.
    pub die_after_ops: Option<u64>,
    /// The disk is full at this many bytes: writes that would grow the files' total live
    /// length past it fail with `ENOSPC` and no effect (see the module documentation).
    pub capacity_bytes: Option<u64>,
}

/// Operations counted since the disk was created or last crashed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounters {
    /// Every [`Disk`] and [`DiskFile`] call that reached the model (stale handles excluded).
    pub ops: u64,
    /// `write_at` and `set_len` calls: what `FaultPlan::fail_write_at` counts.
    pub writes: u64,
    /// Bytes passed to `write_at`.
    pub bytes_written: u64,
    /// `sync` and `sync_dir` calls: what `FaultPlan::fail_sync_at` counts.
    pub syncs: u64,
    /// Operations that failed because of the fault plan.
    pub faults_injected: u64,
}

/// An unsynced change to a file, kept so that a crash can apply any subset of them.
#[derive(Debug, Clone)]
enum PendingOp {
    /// `write_at(offset, data)`.
    Write {
        /// Where the write starts.
        offset: u64,
        /// The bytes written, kept so a crash can land all, none or some sectors of them.
        data: Vec<u8>,
    },
    /// `set_len(len)`: the new length.
    SetLen(u64),
}

impl PendingOp {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            PendingOp::Write { offset, data } => write_into(image, *offset, data),
            PendingOp::SetLen(len) => resize(image, *len),
        }
    }
}

/// Writes `data` at `offset` of `image`, zero-filling any gap, as a file system does. An empty
/// write changes nothing, even past the end: `pwrite` of zero bytes does not extend a file.
fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let start = usize::try_from(offset).expect("in-memory file offset fits in usize");
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn resize(image: &mut Vec<u8>, len: u64) {
    image.resize(usize::try_from(len).expect("in-memory file length fits in usize"), 0);
}

/// The contents of one file (an inode: renames move it between names).
#[derive(Debug, Default)]
struct FileData {
    /// What reads see.
    live: Vec<u8>,
    /// What survives a crash for certain.
    durable: Vec<u8>,
    /// Changes since the last sync, in call order; a crash keeps any subset of them, in any
    /// order (see the module documentation).
    pending: Vec<PendingOp>,
}

/// A file's contents, shared by the namespaces that name it and the handles open on it, so that
/// an open handle keeps working after its name is removed (as on Unix).
type Inode = Arc<Mutex<FileData>>;

/// A namespace change since the last `sync_dir`, kept so that a crash can replay a prefix.
#[derive(Debug, Clone)]
enum NsOp {
    /// A file was created.
    Create {
        /// Its name.
        name: String,
        /// Its contents, which the replay binds to the name.
        inode: Inode,
    },
    /// A file was renamed (replacing any file named `to`).
    Rename {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
    },
    /// A file was removed.
    Remove {
        /// Its name.
        name: String,
    },
}

/// What kind of operation is being counted, for the fault plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// Reads, opens, listings and other namespace operations: only `die_after_ops` applies.
    Other,
    /// `write_at` and `set_len`: counted for `fail_write_at`.
    Write,
    /// `sync` and `sync_dir`: counted for `fail_sync_at`.
    Sync,
}

/// The whole simulated medium, behind one lock so that a crash sees a consistent snapshot and
/// every operation is atomic with respect to it.
#[derive(Debug, Default)]
struct Model {
    /// Incremented by each crash; handles from an older epoch are stale.
    epoch: u64,
    /// Names as operations see them.
    live: BTreeMap<String, Inode>,
    /// Names as of the last `sync_dir`.
    durable: BTreeMap<String, Inode>,
    /// Namespace changes since the last `sync_dir`, in order.
    ns_ops: Vec<NsOp>,
    /// Which operations fail.
    plan: FaultPlan,
    /// What has been done since creation or the last crash.
    counters: DiskCounters,
}

/// How the fault plan rules on one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Do it.
    Proceed,
    /// Fail it, but (for a write) still record its effect as pending.
    FailAfterEffect,
    /// Fail it with no effect.
    Fail,
}

impl Model {
    fn check_epoch(&self, epoch: u64, name: &str) -> Result<(), StorageError> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(StorageError::StaleHandle { name: name.to_string() })
        }
    }

    /// Counts one operation and asks the fault plan about it.
    fn count(&mut self, kind: OpKind) -> Verdict {
        let c = &mut self.counters;
        c.ops += 1;
        let verdict = if self.plan.die_after_ops.is_some_and(|n| c.ops > n) {
            Verdict::Fail
        } else {
            match kind {
                OpKind::Other => Verdict::Proceed,
                OpKind::Write => {
                    c.writes += 1;
                    if self.plan.fail_write_at == Some(c.writes) {
                        Verdict::FailAfterEffect
                    } else {
                        Verdict::Proceed
                    }
                }
                OpKind::Sync => {
                    c.syncs += 1;
                    if self.plan.fail_sync_at == Some(c.syncs) {
                        Verdict::Fail
                    } else {
                        Verdict::Proceed
                    }
                }
            }
        };
        if verdict != Verdict::Proceed {
            c.faults_injected += 1;
        }
        verdict
    }

    /// The sum of the live lengths of the named files: what a capacity is measured against.
    fn used_bytes(&self) -> u64 {
        self.live.values().map(|inode| inode.lock().live.len() as u64).sum()
    }

    /// Counts an operation that has no effect to undo: fails it if the plan says so.
    fn admit(&mut self, kind: OpKind, op: &'static str, name: &str) -> Result<(), StorageError> {
        match self.count(kind) {
            Verdict::Proceed => Ok(()),
            Verdict::Fail | Verdict::FailAfterEffect => Err(injected(op, name)),
        }
    }

    /// The state a crash leaves; see the module documentation.
    fn crash(&mut self, seed: u64, sector_bytes: usize) {
        let mut rng = SplitMix64::new(seed);
        let keep_ns = rng.up_to(self.ns_ops.len());
        let mut names = self.durable.clone();
        for op in &self.ns_ops[..keep_ns] {
            match op {
                NsOp::Create { name, inode } => {
                    names.insert(name.clone(), Arc::clone(inode));
                }
                NsOp::Rename { from, to } => {
                    // The prefix replays the live history, so `from` exists; stay total anyway.
                    if let Some(inode) = names.remove(from) {
                        names.insert(to.clone(), inode);
                    }
                }
                NsOp::Remove { name } => {
                    names.remove(name);
                }
            }
        }
        let mut survivors = BTreeMap::new();
        for (name, inode) in names {
            let image = crashed_image(&inode.lock(), sector_bytes, &mut rng);
            let fresh = FileData { live: image.clone(), durable: image, pending: Vec::new() };
            survivors.insert(name, Arc::new(Mutex::new(fresh)));
        }
        self.live = survivors.clone();
        self.durable = survivors;
        self.ns_ops.clear();
        self.epoch += 1;
        self.plan = FaultPlan::default();
        self.counters = DiskCounters::default();
    }
}

/// A part of a pending op that a crash lets reach the medium.
#[derive(Debug, Clone, Copy)]
enum Landed<'a> {
    /// One sector piece of a write: `bytes` at `offset`, within one sector.
    Piece {
        /// Where the piece starts.
        offset: u64,
        /// Its bytes.
        bytes: &'a [u8],
    },
    /// A `set_len(n)`: zeroes everything from `n` on.
    SetLen(u64),
}

/// What a crash leaves of one file: its durable image with a random subset of its pending ops
/// (writes possibly torn into sector pieces) applied in a random order, cut or zero-extended
/// to a length it had at some point since the last sync. See the module documentation.
fn crashed_image(data: &FileData, sector_bytes: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let sector = sector_bytes as u64;
    let mut landed = Vec::new();
    // The lengths the file had: durable, then after each pending op.
    let mut lengths = Vec::with_capacity(data.pending.len() + 1);
    let mut len = data.durable.len() as u64;
    lengths.push(len);
    for op in &data.pending {
        match op {
            PendingOp::Write { offset, data: bytes } => {
                if !bytes.is_empty() {
                    len = len.max(offset + bytes.len() as u64);
                }
                // 0: lost, 1: lands whole, 2: torn (each sector piece lands or not).
                let fate = rng.below(3);
                let mut start = *offset;
                let end = offset + bytes.len() as u64;
                while start < end {
                    // The piece ends at the next sector boundary of the file, or the write's end.
                    let piece_end = ((start / sector + 1) * sector).min(end);
                    if fate == 1 || (fate == 2 && rng.coin()) {
                        // Both bounds lie within the write, whose bytes are in memory.
                        let lo = (start - offset) as usize;
                        let hi = (piece_end - offset) as usize;
                        landed.push(Landed::Piece { offset: start, bytes: &bytes[lo..hi] });
                    }
                    start = piece_end;
                }
            }
            PendingOp::SetLen(n) => {
                len = *n;
                if rng.coin() {
                    landed.push(Landed::SetLen(*n));
                }
            }
        }
        lengths.push(len);
    }
    // Fisher-Yates: the order in which the landed parts reach the medium.
    for i in (1..landed.len()).rev() {
        let j = rng.up_to(i);
        landed.swap(i, j);
    }
    let mut image = data.durable.clone();
    for part in &landed {
        match *part {
            Landed::Piece { offset, bytes } => write_into(&mut image, offset, bytes),
            Landed::SetLen(n) => {
                // Zero from `n` on, keeping the image's extent: the length is decided below.
                let n = usize::try_from(n).expect("in-memory file length fits in usize");
                if n < image.len() {
                    image[n..].fill(0);
                }
            }
        }
    }
    let chosen = lengths[rng.below(lengths.len() as u64) as usize];
    resize(&mut image, chosen);
    image
}

/// Linux's errno for "No space left on device", so that a full [`MemDisk`] fails as a full file
/// system does (and messages read the same).
const ENOSPC: i32 = 28;

fn injected(op: &'static str, name: &str) -> StorageError {
    StorageError::InjectedFault { op, name: name.to_string() }
}

/// The model shared by every clone of a disk and every handle opened on it.
struct Shared {
    /// The medium.
    model: Mutex<Model>,
    /// The unit a crash tears writes into, aligned to file offsets; fixed at creation.
    sector_bytes: usize,
}

/// An in-memory [`Disk`] with a live and a durable image per file and a durable namespace.
/// `Clone` gives another handle on the same medium (see the module documentation for how
/// clones behave across [`MemDisk::crash`]).
pub struct MemDisk {
    /// The medium, shared with clones and open files.
    shared: Arc<Shared>,
    /// The crash epoch this handle belongs to; it is stale once the model's epoch moves on,
    /// unless this handle is the one the crash was called on.
    epoch: AtomicU64,
}

impl Default for MemDisk {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for MemDisk {
    fn clone(&self) -> Self {
        MemDisk {
            shared: Arc::clone(&self.shared),
            epoch: AtomicU64::new(self.epoch.load(Ordering::Acquire)),
        }
    }
}

impl fmt::Debug for MemDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: formatting must not deadlock when called while the model is locked.
        let mut d = f.debug_struct("MemDisk");
        d.field("epoch", &self.epoch.load(Ordering::Relaxed));
        d.field("sector_bytes", &self.shared.sector_bytes);
        if let Some(m) = self.shared.model.try_lock() {
            d.field("files", &m.live.keys().collect::<Vec<_>>());
            d.field("unsynced_ns_ops", &m.ns_ops.len());
        }
        d.finish()
    }
}

impl MemDisk {
    /// An empty disk with sectors of [`MEM_SECTOR_BYTES_DEFAULT`] bytes.
    pub fn new() -> Self {
        Self::with_sector_bytes(MEM_SECTOR_BYTES_DEFAULT)
    }

    /// An empty disk whose crashes tear writes into sectors of `sector_bytes` bytes (aligned to
    /// file offsets; see the module documentation). Small sectors make tears likelier in the
    /// small files of tests.
    ///
    /// # Panics
    ///
    /// If `sector_bytes` is 0: a test's configuration mistake, not a condition to handle.
    pub fn with_sector_bytes(sector_bytes: usize) -> Self {
        assert!(sector_bytes > 0, "a sector holds at least one byte");
        let shared = Shared { model: Mutex::new(Model::default()), sector_bytes };
        MemDisk { shared: Arc::new(shared), epoch: AtomicU64::new(0) }
    }

    /// The unit a crash tears writes into.
    pub fn sector_bytes(&self) -> usize {
        self.shared.sector_bytes
    }

    fn lock_checked(&self) -> Result<parking_lot::MutexGuard<'_, Model>, StorageError> {
        let m = self.shared.model.lock();
        m.check_epoch(self.epoch.load(Ordering::Acquire), "disk")?;
        Ok(m)
    }

    /// Simulates a power failure followed by a reboot; see the module documentation for what
    /// survives. The same history and seed always give the same result. Afterwards this handle
    /// (and clones made from it) address the rebooted disk; every other handle is stale.
    pub fn crash(&self, seed: u64) {
        let mut m = self.shared.model.lock();
        m.crash(seed, self.shared.sector_bytes);
        self.epoch.store(m.epoch, Ordering::Release);
    }

    /// The live contents of file `name`, for tests.
    pub fn file_bytes(&self, name: &str) -> Result<Vec<u8>, StorageError> {
        let m = self.shared.model.lock();
        let inode =
            m.live.get(name).ok_or_else(|| StorageError::NotFound { name: name.to_string() })?;
        let bytes = inode.lock().live.clone();
        Ok(bytes)
    }

    /// Lets a test damage file `name` on the medium: `edit` gets the live contents, and the
    /// result becomes both live and durable (pending writes are folded in). Use it to flip bits
    /// or truncate, then reopen.
    pub fn edit_file<R>(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> Result<R, StorageError> {
        let m = self.shared.model.lock();
        let inode =
            m.live.get(name).ok_or_else(|| StorageError::NotFound { name: name.to_string() })?;
        let mut data = inode.lock();
        let result = edit(&mut data.live);
        data.durable = data.live.clone();
        data.pending.clear();
        Ok(result)
    }

    /// What has been done since the disk was created or last crashed.
    pub fn counters(&self) -> DiskCounters {
        self.shared.model.lock().counters
    }

    /// The fault plan in force.
    pub fn fault_plan(&self) -> FaultPlan {
        self.shared.model.lock().plan
    }

    /// Replaces the fault plan (a [`FaultDisk`] is the usual way to reach this).
    pub fn set_fault_plan(&self, plan: FaultPlan) {
        self.shared.model.lock().plan = plan;
    }
}

impl Disk for MemDisk {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        validate_name(name)?;
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "open", name)?;
        let inode = match m.live.get(name) {
            Some(inode) => Arc::clone(inode),
            None if create => {
                let inode: Inode = Arc::default();
                m.live.insert(name.to_string(), Arc::clone(&inode));
                m.ns_ops.push(NsOp::Create { name: name.to_string(), inode: Arc::clone(&inode) });
                inode
            }
            None => return Err(StorageError::NotFound { name: name.to_string() }),
        };
        Ok(Arc::new(MemFile {
            shared: Arc::clone(&self.shared),
            inode,
            name: name.to_string(),
            epoch: m.epoch,
        }))
    }

    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        validate_name(name)?;
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "stat", name)?;
        Ok(m.live.contains_key(name))
    }

    fn remove(&self, name: &str) -> Result<(), StorageError> {
        validate_name(name)?;
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "remove", name)?;
        if m.live.remove(name).is_none() {
            return Err(StorageError::NotFound { name: name.to_string() });
        }
        m.ns_ops.push(NsOp::Remove { name: name.to_string() });
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError> {
        validate_name(from)?;
        validate_name(to)?;
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "rename", from)?;
        if !m.live.contains_key(from) {
            return Err(StorageError::NotFound { name: from.to_string() });
        }
        // POSIX: renaming a file onto itself does nothing.
        if from != to {
            if let Some(inode) = m.live.remove(from) {
                m.live.insert(to.to_string(), inode);
            }
            m.ns_ops.push(NsOp::Rename { from: from.to_string(), to: to.to_string() });
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "list", "")?;
        // BTreeMap keys come out sorted.
        Ok(m.live.keys().cloned().collect())
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Sync, "fsync dir", "")?;
        m.durable = m.live.clone();
        m.ns_ops.clear();
        Ok(())
    }
}

/// An open file of a [`MemDisk`].
struct MemFile {
    /// The medium, for the lock, the epoch and the fault plan.
    shared: Arc<Shared>,
    /// The file's contents.
    inode: Inode,
    /// The name it was opened under, for error messages.
    name: String,
    /// The crash epoch it was opened in; it is stale after a crash.
    epoch: u64,
}

impl fmt::Debug for MemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemFile").field("name", &self.name).field("epoch", &self.epoch).finish()
    }
}

impl MemFile {
    fn lock_checked(&self) -> Result<parking_lot::MutexGuard<'_, Model>, StorageError> {
        let m = self.shared.model.lock();
        m.check_epoch(self.epoch, &self.name)?;
        Ok(m)
    }

    /// Applies a mutation both to the live image and to the pending list, honouring the plan.
    fn mutate(&self, op: &'static str, change: PendingOp) -> Result<(), StorageError> {
        let mut m = self.lock_checked()?;
        let verdict = m.count(OpKind::Write);
        if let PendingOp::Write { data, .. } = &change {
            m.counters.bytes_written += data.len() as u64;
        }
        if verdict == Verdict::Fail {
            return Err(injected(op, &self.name));
        }
        if let Some(capacity) = m.plan.capacity_bytes {
            let len = self.inode.lock().live.len() as u64;
            let new_len = match &change {
                PendingOp::Write { offset, data } if !data.is_empty() => {
                    len.max(offset + data.len() as u64)
                }
                PendingOp::Write { .. } => len,
                PendingOp::SetLen(n) => *n,
            };
            // Only growth needs space; the used total counts this file at its current length.
            if new_len > len && m.used_bytes() - len + new_len > capacity {
                m.counters.faults_injected += 1;
                return Err(StorageError::Io {
                    op,
                    name: self.name.clone(),
                    cause: std::io::Error::from_raw_os_error(ENOSPC),
                });
            }
        }
        let mut d = self.inode.lock();
        change.apply(&mut d.live);
        d.pending.push(change);
        if verdict == Verdict::FailAfterEffect {
            return Err(injected(op, &self.name));
        }
        Ok(())
    }
}

fn check_extent(name: &str, end: Option<u64>) -> Result<(), StorageError> {
    match end {
        Some(end) if end <= MEM_FILE_BYTES_MAX && usize::try_from(end).is_ok() => Ok(()),
        _ => Err(StorageError::InvalidArgument(format!(
            "{name}: file would exceed the in-memory size limit"
        ))),
    }
}

impl DiskFile for MemFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "read", &self.name)?;
        let d = self.inode.lock();
        let len = d.live.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        // offset < len <= usize::MAX, so both conversions are exact.
        let start = offset as usize;
        let n = buf.len().min(d.live.len() - start);
        buf[..n].copy_from_slice(&d.live[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        check_extent(&self.name, offset.checked_add(data.len() as u64))?;
        self.mutate("write", PendingOp::Write { offset, data: data.to_vec() })
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Sync, "fsync", &self.name)?;
        let mut d = self.inode.lock();
        let d = &mut *d;
        // Applying the pending ops costs what was written, not the file's size: syncing a big
        // log segment after a small append stays cheap.
        for op in d.pending.drain(..) {
            op.apply(&mut d.durable);
        }
        // Comparing the images would cost the file's size per sync; the lengths catch most slips.
        debug_assert_eq!(
            d.durable.len(),
            d.live.len(),
            "durable image equals live image after sync"
        );
        Ok(())
    }

    fn len(&self) -> Result<u64, StorageError> {
        let mut m = self.lock_checked()?;
        m.admit(OpKind::Other, "stat", &self.name)?;
        let len = self.inode.lock().live.len() as u64;
        Ok(len)
    }

    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        check_extent(&self.name, Some(len))?;
        self.mutate("truncate", PendingOp::SetLen(len))
    }
}

/// A [`MemDisk`] whose operations fail according to a [`FaultPlan`]; same crash model.
/// `Clone` gives another handle on the same medium and plan.
#[derive(Debug, Clone, Default)]
pub struct FaultDisk {
    /// The medium; the plan lives in it, so every clone sees the same plan.
    mem: MemDisk,
}

impl FaultDisk {
    /// An empty disk with no faults planned.
    pub fn new() -> Self {
        FaultDisk { mem: MemDisk::new() }
    }

    /// Fault injection over an existing medium (`mem` and the result share it and its plan).
    pub fn wrap(mem: MemDisk) -> Self {
        FaultDisk { mem }
    }

    /// The underlying medium, for the test helpers.
    pub fn mem(&self) -> &MemDisk {
        &self.mem
    }

    /// Replaces the fault plan. Numbers in it count from the disk's creation or last crash
    /// (see [`FaultDisk::counters`]).
    pub fn set_plan(&self, plan: FaultPlan) {
        self.mem.set_fault_plan(plan);
    }

    /// The plan in force.
    pub fn plan(&self) -> FaultPlan {
        self.mem.fault_plan()
    }

    /// The disk is full from now on at `capacity_bytes` (None: space is back); see
    /// [`FaultPlan::capacity_bytes`]. Keeps the rest of the plan.
    pub fn set_capacity(&self, capacity_bytes: Option<u64>) {
        self.mem.shared.model.lock().plan.capacity_bytes = capacity_bytes;
    }

    /// The sum of the live lengths of the files (what a capacity is measured against).
    pub fn used_bytes(&self) -> u64 {
        self.mem.shared.model.lock().used_bytes()
    }

    /// Makes every later operation fail: the disk died.
    pub fn die(&self) {
        let mut m = self.mem.shared.model.lock();
        m.plan.die_after_ops = Some(m.counters.ops);
    }

    /// Operations, writes and syncs so far (what the plan's numbers refer to).
    pub fn counters(&self) -> DiskCounters {
        self.mem.counters()
    }

    /// See [`MemDisk::crash`]. Also clears the plan: the rebooted disk works.
    pub fn crash(&self, seed: u64) {
        self.mem.crash(seed);
    }

    /// See [`MemDisk::file_bytes`].
    pub fn file_bytes(&self, name: &str) -> Result<Vec<u8>, StorageError> {
        self.mem.file_bytes(name)
    }

    /// See [`MemDisk::edit_file`].
    pub fn edit_file<R>(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> Result<R, StorageError> {
        self.mem.edit_file(name, edit)
    }
}

impl Disk for FaultDisk {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        self.mem.open(name, create)
    }
    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        self.mem.exists(name)
    }
    fn remove(&self, name: &str) -> Result<(), StorageError> {
        self.mem.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError> {
        self.mem.rename(from, to)
    }
    fn list(&self) -> Result<Vec<String>, StorageError> {
        self.mem.list()
    }
    fn sync_dir(&self) -> Result<(), StorageError> {
        self.mem.sync_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_ops_apply_like_a_file_system() {
        let mut image = b"abc".to_vec();
        PendingOp::Write { offset: 5, data: b"xy".to_vec() }.apply(&mut image);
        assert_eq!(image, b"abc\0\0xy");
        PendingOp::SetLen(2).apply(&mut image);
        assert_eq!(image, b"ab");
        PendingOp::Write { offset: 1, data: b"ZZZ".to_vec() }.apply(&mut image);
        assert_eq!(image, b"aZZZ");
    }

    #[test]
    fn huge_offsets_are_refused_not_allocated() {
        let disk = MemDisk::new();
        let f = disk.open("f", true).unwrap();
        for offset in [MEM_FILE_BYTES_MAX, u64::MAX - 1, u64::MAX] {
            assert!(matches!(f.write_at(offset, b"x"), Err(StorageError::InvalidArgument(_))));
            assert!(matches!(
                f.set_len(offset.saturating_add(1)),
                Err(StorageError::InvalidArgument(_))
            ));
        }
        // Reads far past the end are just empty.
        assert_eq!(f.read_at(u64::MAX, &mut [0u8; 4]).unwrap(), 0);
        assert_eq!(f.len().unwrap(), 0);
    }

    #[test]
    fn sync_folds_pending_ops_into_the_durable_image() {
        let disk = MemDisk::new();
        let f = disk.open("f", true).unwrap();
        f.write_at(0, b"hello").unwrap();
        f.set_len(4).unwrap();
        let inode = Arc::clone(&disk.shared.model.lock().live["f"]);
        assert_eq!(inode.lock().pending.len(), 2);
        assert!(inode.lock().durable.is_empty());
        f.sync().unwrap();
        let d = inode.lock();
        assert!(d.pending.is_empty());
        assert_eq!(d.durable, b"hell");
        assert_eq!(d.live, b"hell");
    }

    #[test]
    fn a_full_disk_refuses_growth_with_enospc_until_space_is_back() {
        let disk = FaultDisk::new();
        let f = disk.open("f", true).unwrap();
        f.write_at(0, &[1; 100]).unwrap();
        disk.set_capacity(Some(120));
        // Within the file's length, and up to the capacity, writes go on.
        f.write_at(0, &[2; 100]).unwrap();
        f.write_at(100, &[3; 20]).unwrap();
        let g = disk.open("g", true).unwrap();
        let err = g.write_at(0, b"x").unwrap_err();
        assert!(
            matches!(&err, StorageError::Io { cause: source, .. } if source.raw_os_error() == Some(ENOSPC)),
            "{err}"
        );
        assert!(err.to_string().contains("No space left on device"), "{err}");
        assert!(f.set_len(121).is_err());
        assert_eq!(g.len().unwrap(), 0, "a refused write has no effect");
        // Shrinking frees space; clearing the capacity is space freed.
        f.set_len(100).unwrap();
        g.write_at(0, &[4; 20]).unwrap();
        assert!(g.write_at(20, b"y").is_err());
        disk.set_capacity(None);
        g.write_at(20, b"y").unwrap();
        assert_eq!(disk.used_bytes(), 121);
    }

    #[test]
    fn crash_drops_files_that_no_name_survives() {
        let disk = MemDisk::new();
        disk.open("gone", true).unwrap().write_at(0, b"x").unwrap();
        // Seed search is deterministic: find one where the create was not kept.
        let seed = (0..64)
            .find(|&s| {
                let d = MemDisk::new();
                d.open("gone", true).unwrap();
                d.crash(s);
                d.list().unwrap().is_empty()
            })
            .unwrap();
        disk.crash(seed);
        assert!(disk.list().unwrap().is_empty());
        assert!(disk.shared.model.lock().durable.is_empty());
    }
}
