//! The storage engine of a thor server: commits, fetches, the flusher and recovery.
//!
//! ```text
//!            commit(versions, created)                         fetch(page)
//!                   │                                              │
//!   validate against classes, allocate orefs,            page cache ─or─ page file
//!   patch references, append the log record                         │
//!                   │                                     + pending MOB versions
//!         group commit: wait until durable                          │
//!                   │                                            page bytes
//!          publish into the MOB (LSN order)
//!                   │
//!   flusher: oldest MOB pages ─► installation reads ─► apply all versions per page
//!            ─► double-write buffer ─► page file ─► superblock checkpoint ─► log truncation
//! ```
//!
//! # Invariants
//!
//! - *Acknowledged means durable:* [`Engine::commit`] returns only after the commit's record is
//!   fsynced; nothing reads a commit (the MOB holds only published records) before that.
//! - *Objects keep their class and size for life.* A version must have the class and size of the
//!   object it replaces, so installing versions never overflows a page and the flusher cannot
//!   fail because of what a client sent. Collections grow by allocating a bigger object.
//! - *Allocation is sequential:* new objects go to the tail page in creation order, then to the
//!   next page; pages are opened in LSN order. This is the clustering OO7 relies on.
//! - *Checkpoint:* every record below the superblock's checkpoint LSN is installed in the page
//!   file, and every page up to the superblock's allocation page has an image on disk. Pages
//!   after it are *fresh*: recovery rebuilds them from empty with the log, which still holds
//!   every record that created an object in them (the MOB pins creation records, see
//!   [`crate::mob::MobEntry::pin`]).
//! - *A failed write stops the engine:* after a storage error on the log or page file nothing
//!   more is accepted ([`EngineError::Failed`]); reopening recovers from the log.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rustc_hash::{FxHashMap, FxHashSet};
use thor_core::class::check_refs;
use thor_core::le::{put_u32, u32_at};
use thor_core::limits::{OFFSET_ENTRY_BYTES, PAGE_HEADER_BYTES, is_valid_page_size};
use thor_core::{
    ClassDesc, FormatError, Lsn, Oid, Oref, PageId, PageMut, PageView, RawRef, ServerId, builtin,
    page,
};
use thor_storage::{Disk, Log, LogOptions, PageFile, StorageError};

use crate::dwb::DoubleWrite;
use crate::error::{EngineError, InvalidCommit};
use crate::limits;
use crate::mob::{Mob, entry_cost};
use crate::pagecache::PageCache;
use crate::record::{self, RecordObject};
use crate::superblock::{self, Superblock};

/// The page file's name in a database directory.
pub const PAGE_FILE: &str = "pages";

/// Settings of an engine. `page_size` and `server_id` matter only when creating a database.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Bytes per page of a new database.
    pub page_size: usize,
    /// The id of a new database's server.
    pub server_id: ServerId,
    /// Memory budget of the MOB; commits wait for the flusher beyond it.
    pub mob_bytes: usize,
    /// Memory budget of the page cache.
    pub page_cache_bytes: usize,
    /// Pages installed per flusher round.
    pub flush_batch_pages: usize,
    /// The flusher starts when the MOB exceeds this percentage of its budget.
    pub flush_start_percent: usize,
    /// Whether to run the flusher on a background thread. Without it, callers drive flushing
    /// with [`Engine::flush_round`] (deterministic tests) and commits that find the MOB full
    /// flush in the foreground.
    pub background_flusher: bool,
    /// Settings of the transaction log.
    pub log: LogOptions,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            page_size: thor_core::limits::PAGE_SIZE_DEFAULT,
            server_id: ServerId(1),
            mob_bytes: limits::MOB_BYTES_DEFAULT,
            page_cache_bytes: limits::PAGE_CACHE_BYTES_DEFAULT,
            flush_batch_pages: limits::FLUSH_BATCH_PAGES_DEFAULT,
            flush_start_percent: limits::FLUSH_START_PERCENT,
            background_flusher: true,
            log: LogOptions::default(),
        }
    }
}

/// A commit: new versions of existing objects and newly created objects.
///
/// Reference words in any object (and the class word of a created object) may be tagged
/// ([`RawRef::Tagged`]) with an index into `created`: the engine allocates the created objects
/// in order and replaces those words by their orefs.
#[derive(Debug, Clone, Default)]
pub struct CommitRequest {
    /// New versions: the object's oref and its complete new bytes.
    pub versions: Vec<(Oref, Vec<u8>)>,
    /// Created objects in creation order (which is their clustering order).
    pub created: Vec<Vec<u8>>,
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The commit's log sequence number (its place in the serial order of this server).
    pub lsn: Lsn,
    /// The orefs given to the created objects, in request order.
    pub created: Vec<Oref>,
}

/// What one flusher round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Pages written.
    pub pages: usize,
    /// Versions installed into them.
    pub versions: usize,
    /// Pages that had to be read from disk first.
    pub installation_reads: usize,
    /// The checkpoint after the round.
    pub checkpoint: Lsn,
}

/// Counters of everything the engine does, as of one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    /// Commits acknowledged.
    pub commits: u64,
    /// Of those, read-only ones (acknowledged without a log record).
    pub read_only_commits: u64,
    /// Object versions committed (excluding created objects).
    pub versions_committed: u64,
    /// Objects created.
    pub objects_created: u64,
    /// Commits refused as invalid.
    pub commits_refused: u64,
    /// Record bytes appended to the log.
    pub log_bytes: u64,
    /// Log fsyncs.
    pub log_fsyncs: u64,
    /// Mean commits sharing one log fsync (group commit).
    pub commits_per_fsync: f64,
    /// Bytes charged to the MOB now.
    pub mob_bytes: usize,
    /// Versions in the MOB now.
    pub mob_entries: usize,
    /// Fetches served.
    pub fetches: u64,
    /// MOB versions applied to fetched pages.
    pub fetch_versions_applied: u64,
    /// Page cache hits.
    pub cache_hits: u64,
    /// Page cache misses.
    pub cache_misses: u64,
    /// Pages read from disk for fetches.
    pub fetch_reads: u64,
    /// Pages read from disk by the flusher before installing into them.
    pub installation_reads: u64,
    /// Pages read from disk to validate commits.
    pub validation_reads: u64,
    /// Flusher rounds.
    pub flush_rounds: u64,
    /// Pages written by the flusher.
    pub pages_written: u64,
    /// Versions installed by the flusher.
    pub versions_installed: u64,
    /// Versions installed per page written: write absorption.
    pub write_absorption: f64,
    /// Commits that waited for MOB space.
    pub mob_waits: u64,
    /// The current checkpoint (log records below it are installed).
    pub checkpoint: u64,
    /// Pages allocated (the tail page id).
    pub pages_allocated: u32,
}

/// Monotonic counters updated without the state lock.
#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    read_only_commits: AtomicU64,
    versions_committed: AtomicU64,
    objects_created: AtomicU64,
    commits_refused: AtomicU64,
    fetches: AtomicU64,
    fetch_versions_applied: AtomicU64,
    fetch_reads: AtomicU64,
    installation_reads: AtomicU64,
    validation_reads: AtomicU64,
    flush_rounds: AtomicU64,
    pages_written: AtomicU64,
    versions_installed: AtomicU64,
    mob_waits: AtomicU64,
}

/// A prepared commit: in the log, not yet known durable, not yet visible.
#[derive(Debug)]
struct Pending {
    lsn: Lsn,
    objects: Vec<(Oref, bool, Arc<[u8]>)>,
}

/// Where new objects go.
#[derive(Debug, Clone, Copy)]
struct Tail {
    /// The page being filled.
    page: PageId,
    /// Its free bytes (objects and offset entries).
    free: usize,
    /// Its offset-table entries (the next oid).
    slots: usize,
}

const SLOTS_UNKNOWN: u16 = u16::MAX;

/// Everything behind the engine's lock.
#[derive(Debug)]
struct State {
    /// Published versions waiting to be installed.
    mob: Mob,
    /// Installed page images.
    cache: PageCache,
    /// The allocation point.
    tail: Tail,
    /// Offset-table size of each page, where known ([`SLOTS_UNKNOWN`] otherwise): the
    /// existence check for references. Exact because objects are never deleted and only the
    /// tail page gains objects.
    slots: Vec<u16>,
    /// Decoded class objects.
    classes: FxHashMap<Oref, Arc<ClassDesc>>,
    /// Prepared commits in LSN order.
    pending: VecDeque<Pending>,
    /// The newest prepared version of each object in `pending`, so validation of the next
    /// commit sees it before it is published.
    pending_objs: FxHashMap<Oref, (Lsn, Arc<[u8]>)>,
    /// Pages with no image on disk yet: they start from empty.
    fresh: FxHashSet<PageId>,
    /// (LSN that opened the page, page), for pages opened since the checkpoint.
    opened: VecDeque<(Lsn, PageId)>,
    /// The superblock as last written.
    superblock: Superblock,
    /// Incremented by every flusher round; a fetch that read the disk without the lock uses it
    /// to detect that its image may be stale.
    install_epoch: u64,
    /// Whether a bulk load owns the allocator.
    bulk_active: bool,
    /// Set when the engine is dropped: the flusher exits.
    shutdown: bool,
    /// Whether someone is waiting for MOB space (the flusher should run even below its start
    /// threshold).
    flush_wanted: bool,
}

/// Shared by the engine handle and the flusher thread.
#[derive(Debug)]
struct Inner {
    /// The database directory.
    disk: Arc<dyn Disk>,
    /// Bytes per page.
    page_size: usize,
    /// Runtime settings.
    opts: EngineOptions,
    /// The page file.
    pages: PageFile,
    /// The transaction log.
    log: Log,
    /// Torn-write protection for in-place page writes.
    dwb: DoubleWrite,
    /// See [`State`].
    state: Mutex<State>,
    /// Signalled when the MOB shrinks or the engine fails.
    mob_space: Condvar,
    /// Signalled when the flusher has work.
    flush_wake: Condvar,
    /// Held for a whole flusher round or bulk load: they write pages and the superblock.
    flush_lock: Mutex<()>,
    /// Set after a storage failure on a write path.
    failed: AtomicBool,
    /// Counters.
    counters: Counters,
}

/// A thor storage engine over one database directory. Share it with `Arc<Engine>`; every
/// method takes `&self` and is safe to call from many threads.
#[derive(Debug)]
pub struct Engine {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
}

fn write_superblock(disk: &dyn Disk, sb: &Superblock) -> Result<(), StorageError> {
    let f = disk.open(superblock::TMP_FILE, true)?;
    f.set_len(0)?;
    f.write_at(0, &sb.encode())?;
    f.sync()?;
    drop(f);
    disk.rename(superblock::TMP_FILE, superblock::FILE)?;
    disk.sync_dir()
}

fn read_superblock(disk: &dyn Disk) -> Result<Superblock, EngineError> {
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

fn empty_page(page: PageId, page_size: usize) -> Vec<u8> {
    let mut b = vec![0u8; page_size];
    PageMut::init(&mut b, page).expect("valid page size");
    b
}

impl Engine {
    /// Creates a database in `disk` (which must not hold one) and opens it.
    pub fn create(disk: Arc<dyn Disk>, opts: EngineOptions) -> Result<Engine, EngineError> {
        if !is_valid_page_size(opts.page_size) {
            return Err(EngineError::BadOptions(format!("invalid page size {}", opts.page_size)));
        }
        if disk.exists(superblock::FILE)? {
            return Err(EngineError::AlreadyExists);
        }
        let pages = PageFile::open(&*disk, PAGE_FILE, opts.page_size, true)?;
        let mut first = builtin::first_page(opts.page_size).expect("builtins fit a page");
        page::seal(&mut first);
        pages.write(PageId::FIRST.get(), &first)?;
        pages.sync()?;
        let sb = Superblock {
            page_size: opts.page_size,
            server_id: opts.server_id,
            root: builtin::ROOT,
            checkpoint: Lsn(1),
            alloc_page: Some(PageId::FIRST),
            generation: 1,
        };
        // The superblock goes last: a crash before it leaves no database, not a broken one.
        write_superblock(&*disk, &sb)?;
        Engine::open(disk, opts)
    }

    /// Opens the database in `disk`, recovering from the log.
    pub fn open(disk: Arc<dyn Disk>, opts: EngineOptions) -> Result<Engine, EngineError> {
        let sb = read_superblock(&*disk)?;
        let page_size = sb.page_size;
        let pages = PageFile::open(&*disk, PAGE_FILE, page_size, false)?;
        let dwb = DoubleWrite::open(&*disk, page_size)?;
        restore_torn_pages(&pages, &dwb, page_size)?;
        let (log, recovered) = Log::open(disk.clone(), opts.log.clone())?;

        let alloc_page = sb.alloc_page.unwrap_or(PageId::FIRST);
        let mut mob = Mob::new();
        let mut fresh = FxHashSet::default();
        let mut opened = VecDeque::new();
        let mut tail_page = alloc_page;
        for (lsn, payload) in &recovered.records {
            if *lsn < sb.checkpoint {
                continue;
            }
            record::decode(payload, |o| {
                let page = o.oref.page().expect("record decoder checks orefs");
                if o.created && page > tail_page {
                    let mut p = tail_page;
                    while p < page {
                        p = p.next().expect("page is below the maximum");
                        fresh.insert(p);
                        opened.push_back((*lsn, p));
                    }
                    tail_page = page;
                }
                mob.insert(o.oref, *lsn, o.created, Arc::from(o.data));
            })
            .map_err(|e| EngineError::CorruptRecord { lsn: lsn.0, why: e.to_string() })?;
        }

        let state = State {
            mob,
            cache: PageCache::new(opts.page_cache_bytes, page_size),
            tail: Tail { page: tail_page, free: 0, slots: 0 },
            slots: Vec::new(),
            classes: FxHashMap::default(),
            pending: VecDeque::new(),
            pending_objs: FxHashMap::default(),
            fresh,
            opened,
            superblock: sb,
            install_epoch: 0,
            bulk_active: false,
            shutdown: false,
            flush_wanted: false,
        };
        let inner = Arc::new(Inner {
            disk,
            page_size,
            opts,
            pages,
            log,
            dwb,
            state: Mutex::new(state),
            mob_space: Condvar::new(),
            flush_wake: Condvar::new(),
            flush_lock: Mutex::new(()),
            failed: AtomicBool::new(false),
            counters: Counters::default(),
        });
        {
            let mut st = inner.state.lock();
            let img = inner.current_page(&mut st, tail_page)?;
            let v = PageView::parse(&img)
                .map_err(|e| EngineError::CorruptPage { page: tail_page, source: e })?;
            st.tail = Tail { page: tail_page, free: v.free_bytes(), slots: v.slot_count() };
            inner.set_slots(&mut st, tail_page, v.slot_count());
        }
        let flusher = if inner.opts.background_flusher {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("thor-flusher".into())
                    .spawn(move || i.flusher_loop())
                    .map_err(|source| StorageError::Io {
                        op: "spawn flusher thread",
                        name: String::new(),
                        source,
                    })?,
            )
        } else {
            None
        };
        Ok(Engine { inner, flusher })
    }

    /// Bytes per page of this database.
    pub fn page_size(&self) -> usize {
        self.inner.page_size
    }

    /// This server's id.
    pub fn server_id(&self) -> ServerId {
        self.inner.state.lock().superblock.server_id
    }

    /// The persistent root object.
    pub fn root(&self) -> Oref {
        self.inner.state.lock().superblock.root
    }

    /// Commits `req`: validates it, makes it durable, and makes it visible to fetches. Returns
    /// once the commit is durable.
    pub fn commit(&self, req: CommitRequest) -> Result<CommitOutcome, EngineError> {
        self.inner.commit(req)
    }

    /// The current bytes of page `page`: its installed image with every published MOB version
    /// applied.
    pub fn fetch(&self, page: PageId) -> Result<Arc<[u8]>, EngineError> {
        self.inner.fetch(page)
    }

    /// Runs one flusher round now (installs the oldest MOB pages). Returns what it did; a round
    /// with an empty MOB does nothing.
    pub fn flush_round(&self) -> Result<FlushReport, EngineError> {
        self.inner.flush_round()
    }

    /// Installs everything in the MOB and truncates the log.
    pub fn flush_all(&self) -> Result<(), EngineError> {
        loop {
            let r = self.inner.flush_round()?;
            if r.pages == 0 {
                return Ok(());
            }
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        self.inner.stats()
    }

    /// Starts a bulk load: installs everything pending, then hands the allocator to the loader
    /// until it finishes. Commits that create objects are refused meanwhile.
    pub fn bulk_load(&self) -> Result<BulkLoader<'_>, EngineError> {
        self.flush_all()?;
        let guard = self.inner.flush_lock.lock();
        let first = {
            let mut st = self.inner.state.lock();
            if st.bulk_active {
                return Err(EngineError::BulkLoadActive);
            }
            st.bulk_active = true;
            st.tail.page.next().ok_or(EngineError::Full)?
        };
        Ok(BulkLoader {
            engine: &self.inner,
            _guard: guard,
            window: VecDeque::new(),
            window_first: first,
            pages_written: 0,
            objects: 0,
            bytes: 0,
            finished: false,
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.inner.state.lock().shutdown = true;
        self.inner.flush_wake.notify_all();
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
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

fn what_version(oref: Oref) -> String {
    format!("version of {oref:?}")
}

fn what_created(i: usize) -> String {
    format!("created #{i}")
}

impl Inner {
    fn check_alive(&self) -> Result<(), EngineError> {
        if self.failed.load(Relaxed) { Err(EngineError::Failed) } else { Ok(()) }
    }

    /// Records a storage failure on a write path: from now on the engine refuses work.
    fn fail(&self, e: StorageError) -> EngineError {
        self.failed.store(true, Relaxed);
        self.mob_space.notify_all();
        EngineError::Storage(e)
    }

    fn set_slots(&self, st: &mut State, page: PageId, slots: usize) {
        let i = page.index();
        if st.slots.len() <= i {
            st.slots.resize(i + 1, SLOTS_UNKNOWN);
        }
        st.slots[i] = slots as u16;
    }

    /// The installed image of `page` (not including the MOB), reading the disk under the lock
    /// if it is not cached. Fresh pages are empty.
    fn installed_image(
        &self,
        st: &mut State,
        page: PageId,
        reads: &AtomicU64,
    ) -> Result<Arc<[u8]>, EngineError> {
        if st.fresh.contains(&page) {
            return Ok(Arc::from(empty_page(page, self.page_size)));
        }
        if let Some(img) = st.cache.get(page) {
            return Ok(img);
        }
        let img = self.read_page(page)?;
        reads.fetch_add(1, Relaxed);
        st.cache.insert(page, img.clone());
        Ok(img)
    }

    /// Reads and checks a page from the page file.
    fn read_page(&self, page: PageId) -> Result<Arc<[u8]>, EngineError> {
        let mut buf = vec![0u8; self.page_size];
        if !self.pages.read(page.get(), &mut buf)? {
            return Err(EngineError::CorruptPage {
                page,
                source: FormatError::BadPageHeader("allocated page missing from the page file"),
            });
        }
        PageView::parse_stored(&buf, page)
            .map_err(|source| EngineError::CorruptPage { page, source })?;
        Ok(Arc::from(buf))
    }

    /// The page as a fetch would see it: installed image plus published MOB versions.
    fn current_page(&self, st: &mut State, page: PageId) -> Result<Vec<u8>, EngineError> {
        let img = self.installed_image(st, page, &self.counters.validation_reads)?;
        let mut buf = img.to_vec();
        apply_mob(&st.mob, page, &mut buf)
            .map_err(|source| EngineError::CorruptPage { page, source })?;
        Ok(buf)
    }

    /// The offset-table size of `page`, counting every prepared allocation.
    fn slots_of(&self, st: &mut State, page: PageId) -> Result<usize, EngineError> {
        if page > st.tail.page {
            return Ok(0);
        }
        if let Some(&n) = st.slots.get(page.index())
            && n != SLOTS_UNKNOWN
        {
            return Ok(n as usize);
        }
        let img = self.current_page(st, page)?;
        let n = PageView::parse(&img).expect("current_page yields valid pages").slot_count();
        self.set_slots(st, page, n);
        Ok(n)
    }

    /// Whether `oref` names an object that exists (counting prepared commits).
    fn exists(&self, st: &mut State, oref: Oref) -> Result<bool, EngineError> {
        let Some(page) = oref.page() else { return Ok(false) };
        Ok(oref.oid().index() < self.slots_of(st, page)?)
    }

    /// Calls `f` with the newest bytes of `oref` (prepared, published or installed).
    fn with_object<R>(
        &self,
        st: &mut State,
        oref: Oref,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, EngineError> {
        if let Some((_, d)) = st.pending_objs.get(&oref) {
            return Ok(Some(f(d)));
        }
        if let Some(e) = st.mob.get(oref) {
            return Ok(Some(f(&e.data)));
        }
        let Some(page) = oref.page() else { return Ok(None) };
        if page > st.tail.page {
            return Ok(None);
        }
        let img = self.installed_image(st, page, &self.counters.validation_reads)?;
        let v =
            PageView::parse(&img).map_err(|source| EngineError::CorruptPage { page, source })?;
        Ok(v.object(oref.oid()).map(f))
    }

    /// The descriptor of the stored class `class`.
    fn class_desc(&self, st: &mut State, class: Oref) -> Result<Arc<ClassDesc>, EngineError> {
        if let Some(d) = st.classes.get(&class) {
            return Ok(d.clone());
        }
        let not_a_class = || InvalidCommit::NotAClass { oref: Oref::NULL, class };
        let desc = if let Some(d) = builtin::desc(class) {
            d.clone()
        } else if class == builtin::ROOT || !self.exists(st, class)? {
            return Err(not_a_class().into());
        } else {
            self.with_object(st, class, ClassDesc::from_class_object)?
                .ok_or_else(not_a_class)?
                .map_err(|_| not_a_class())?
        };
        let desc = Arc::new(desc);
        st.classes.insert(class, desc.clone());
        Ok(desc)
    }

    fn commit(&self, mut req: CommitRequest) -> Result<CommitOutcome, EngineError> {
        self.check_alive()?;
        if req.versions.is_empty() && req.created.is_empty() {
            // A read-only transaction changes nothing, so there is nothing to make durable: no
            // log record and no fsync. Everything it could have read was published, hence
            // durable; its place in the serial order is after the last durable commit.
            self.counters.commits.fetch_add(1, Relaxed);
            self.counters.read_only_commits.fetch_add(1, Relaxed);
            return Ok(CommitOutcome { lsn: self.log.durable_lsn(), created: Vec::new() });
        }
        let n_objects = req.versions.len() + req.created.len();
        if n_objects > limits::COMMIT_OBJECTS_MAX {
            return Err(InvalidCommit::TooLarge {
                what: "objects",
                got: n_objects,
                max: limits::COMMIT_OBJECTS_MAX,
            }
            .into());
        }
        let n_bytes: usize = req.versions.iter().map(|(_, v)| v.len()).sum::<usize>()
            + req.created.iter().map(Vec::len).sum::<usize>();
        if n_bytes > limits::COMMIT_BYTES_MAX {
            return Err(InvalidCommit::TooLarge {
                what: "bytes",
                got: n_bytes,
                max: limits::COMMIT_BYTES_MAX,
            }
            .into());
        }
        let cost: usize = req.versions.iter().map(|(_, v)| entry_cost(v.len())).sum::<usize>()
            + req.created.iter().map(|v| entry_cost(v.len())).sum::<usize>();

        let mut st = self.state.lock();
        // Back-pressure: wait until the MOB has room (an oversized commit goes through once the
        // MOB is empty, so that it cannot wait forever).
        let mut waited = false;
        while !st.mob.is_empty() && st.mob.bytes() + cost > self.opts.mob_bytes {
            self.check_alive()?;
            waited = true;
            if self.opts.background_flusher {
                st.flush_wanted = true;
                self.flush_wake.notify_one();
                self.mob_space.wait_for(&mut st, Duration::from_millis(100));
            } else {
                drop(st);
                self.flush_round()?;
                st = self.state.lock();
            }
        }
        if waited {
            self.counters.mob_waits.fetch_add(1, Relaxed);
        }
        if st.bulk_active && !req.created.is_empty() {
            return Err(EngineError::BulkLoadActive);
        }

        let descs = match self.validate(&mut st, &req) {
            Ok(d) => d,
            Err(e) => {
                if matches!(e, EngineError::Invalid(_)) {
                    self.counters.commits_refused.fetch_add(1, Relaxed);
                }
                return Err(e);
            }
        };
        let lsn = self.log.next_lsn();
        let created = self.allocate(&mut st, &req.created, lsn)?;

        // Patch tagged references now that every created object has an oref.
        let mut offs = Vec::new();
        let mut patch = |obj: &mut [u8], desc: &ClassDesc, header: bool| {
            offs.clear();
            if header {
                offs.push(0);
            }
            desc.for_each_ref_offset(obj, |o| offs.push(o));
            for &off in &offs {
                if let RawRef::Tagged(i) = RawRef::decode(u32_at(obj, off)) {
                    put_u32(obj, off, created[i as usize].raw());
                }
            }
        };
        for (i, obj) in req.created.iter_mut().enumerate() {
            patch(obj, &descs.created[i], true);
        }
        for (i, (_, obj)) in req.versions.iter_mut().enumerate() {
            patch(obj, &descs.versions[i], false);
        }

        let objects: Vec<(Oref, bool, Arc<[u8]>)> = req
            .versions
            .into_iter()
            .map(|(o, v)| (o, false, Arc::from(v)))
            .chain(created.iter().zip(req.created).map(|(o, v)| (*o, true, Arc::from(v))))
            .collect();
        let mut rec = Vec::with_capacity(8 + n_bytes + 8 * n_objects);
        record::encode(
            objects.iter().map(|(oref, created, data)| RecordObject {
                oref: *oref,
                created: *created,
                data,
            }),
            &mut rec,
        );
        let got = self.log.append(&rec).map_err(|e| self.fail(e))?;
        debug_assert_eq!(got, lsn, "appends happen under the state lock");
        for (oref, _, data) in &objects {
            st.pending_objs.insert(*oref, (lsn, data.clone()));
        }
        st.pending.push_back(Pending { lsn, objects });
        drop(st);

        self.log.wait_durable(lsn).map_err(|e| self.fail(e))?;

        let mut st = self.state.lock();
        self.publish(&mut st);
        let start = self.opts.mob_bytes / 100 * self.opts.flush_start_percent;
        if st.mob.bytes() > start {
            self.flush_wake.notify_one();
        }
        drop(st);
        self.counters.commits.fetch_add(1, Relaxed);
        Ok(CommitOutcome { lsn, created })
    }

    /// Moves every durable prepared commit into the MOB, in LSN order.
    fn publish(&self, st: &mut State) {
        let durable = self.log.durable_lsn();
        while st.pending.front().is_some_and(|p| p.lsn <= durable) {
            let p = st.pending.pop_front().expect("checked");
            let mut versions = 0;
            let mut created = 0;
            for (oref, is_new, data) in p.objects {
                if st.pending_objs.get(&oref).is_some_and(|(l, _)| *l == p.lsn) {
                    st.pending_objs.remove(&oref);
                }
                if is_new {
                    created += 1
                } else {
                    versions += 1
                }
                st.mob.insert(oref, p.lsn, is_new, data);
            }
            self.counters.versions_committed.fetch_add(versions, Relaxed);
            self.counters.objects_created.fetch_add(created, Relaxed);
        }
    }

    /// Checks a commit against the store; returns the class of every object.
    fn validate(&self, st: &mut State, req: &CommitRequest) -> Result<Descs, EngineError> {
        let n_created = req.created.len();
        // Classes created by this commit first: other created objects may be their instances.
        let mut created_class: Vec<Option<Arc<ClassDesc>>> = vec![None; n_created];
        for (i, obj) in req.created.iter().enumerate() {
            if obj.len() >= 4 && u32_at(obj, 0) == builtin::META.raw() {
                let d = ClassDesc::from_class_object(obj).map_err(|_| InvalidCommit::BadShape {
                    what: what_created(i),
                    why: "malformed class object",
                })?;
                created_class[i] = Some(Arc::new(d));
            }
        }
        let mut descs = Descs { created: Vec::with_capacity(n_created), versions: Vec::new() };
        for (i, obj) in req.created.iter().enumerate() {
            page::check_object_bytes(obj, self.page_size)
                .map_err(|source| InvalidCommit::ObjectTooLarge { index: i, source })?;
            let desc = match RawRef::decode(u32_at(obj, 0)) {
                RawRef::Tagged(t) => created_class
                    .get(t as usize)
                    .and_then(Clone::clone)
                    .ok_or_else(|| InvalidCommit::BadReference {
                        what: what_created(i),
                        why: format!("class is created object #{t}, which is not a class"),
                    })?,
                RawRef::Oref(c) => self.class_desc(st, c)?,
            };
            self.check_object(st, &desc, obj, n_created, || what_created(i))?;
            descs.created.push(desc);
        }
        let mut seen = FxHashSet::default();
        for (oref, obj) in &req.versions {
            let oref = *oref;
            if !seen.insert(oref) {
                return Err(InvalidCommit::Duplicate(oref).into());
            }
            if builtin::is_builtin(oref) && oref != builtin::ROOT {
                return Err(InvalidCommit::ClassIsImmutable(oref).into());
            }
            if !self.exists(st, oref)? {
                return Err(InvalidCommit::NoSuchObject(oref).into());
            }
            let (class_word, size) = self
                .with_object(st, oref, |old| (u32_at(old, 0), old.len()))?
                .ok_or(InvalidCommit::NoSuchObject(oref))?;
            if class_word == builtin::META.raw() {
                return Err(InvalidCommit::ClassIsImmutable(oref).into());
            }
            if obj.len() < 4 || u32_at(obj, 0) != class_word {
                return Err(InvalidCommit::Reshape { oref, what: "class" }.into());
            }
            if obj.len() != size {
                return Err(InvalidCommit::Reshape { oref, what: "size" }.into());
            }
            let class = Oref::from_raw(class_word).expect("stored class words are orefs");
            let desc = self.class_desc(st, class)?;
            self.check_object(st, &desc, obj, n_created, || what_version(oref))?;
            descs.versions.push(desc);
        }
        Ok(descs)
    }

    /// Checks an object's shape against its class and that every reference names an existing
    /// object or one of the `n_created` objects of the commit.
    fn check_object(
        &self,
        st: &mut State,
        desc: &ClassDesc,
        obj: &[u8],
        n_created: usize,
        what: impl Fn() -> String,
    ) -> Result<(), EngineError> {
        desc.check_shape(obj).map_err(|why| InvalidCommit::BadShape { what: what(), why })?;
        check_refs(desc, obj, |r| match r {
            RawRef::Tagged(t) if (t as usize) < n_created => Ok(()),
            RawRef::Tagged(t) => Err(InvalidCommit::BadReference {
                what: what(),
                why: format!("created object #{t} does not exist"),
            }
            .into()),
            RawRef::Oref(o) if o.is_null() => Ok(()),
            RawRef::Oref(o) => {
                if self.exists(st, o)? {
                    Ok(())
                } else {
                    Err(InvalidCommit::BadReference {
                        what: what(),
                        why: format!("{o:?} does not exist"),
                    }
                    .into())
                }
            }
        })
    }

    /// Gives orefs to `created`, in order, at the tail. `lsn` is the commit's LSN (for the
    /// record of opened pages).
    fn allocate(
        &self,
        st: &mut State,
        created: &[Vec<u8>],
        lsn: Lsn,
    ) -> Result<Vec<Oref>, EngineError> {
        let mut out = Vec::with_capacity(created.len());
        let max_free = self.page_size - PAGE_HEADER_BYTES;
        for obj in created {
            let need = obj.len() + OFFSET_ENTRY_BYTES;
            if need > st.tail.free || st.tail.slots == thor_core::ids::OIDS_PER_PAGE {
                let next = st.tail.page.next().ok_or(EngineError::Full)?;
                st.fresh.insert(next);
                st.opened.push_back((lsn, next));
                st.tail = Tail { page: next, free: max_free, slots: 0 };
            }
            let oid = Oid::new(st.tail.slots as u16).expect("checked against OIDS_PER_PAGE");
            out.push(Oref::new(st.tail.page, oid));
            st.tail.slots += 1;
            st.tail.free -= need;
            let (page, slots) = (st.tail.page, st.tail.slots);
            self.set_slots(st, page, slots);
        }
        Ok(out)
    }

    fn fetch(&self, page: PageId) -> Result<Arc<[u8]>, EngineError> {
        self.counters.fetches.fetch_add(1, Relaxed);
        let mut st = self.state.lock();
        if page > st.tail.page {
            return Err(EngineError::NoSuchPage(page.get()));
        }
        let base = if st.fresh.contains(&page) {
            Arc::from(empty_page(page, self.page_size))
        } else if let Some(img) = st.cache.get(page) {
            img
        } else {
            // Read without the lock so that other fetches and commits proceed; if a flusher
            // round installed pages meanwhile, the image may be older than the MOB now assumes,
            // so read again under the lock.
            let epoch = st.install_epoch;
            drop(st);
            let img = self.read_page(page)?;
            self.counters.fetch_reads.fetch_add(1, Relaxed);
            st = self.state.lock();
            if st.install_epoch == epoch {
                st.cache.insert(page, img.clone());
                img
            } else {
                self.installed_image(&mut st, page, &self.counters.fetch_reads)?
            }
        };
        if !st.mob.has_page(page) {
            return Ok(base);
        }
        let mut buf = base.to_vec();
        let n = apply_mob(&st.mob, page, &mut buf)
            .map_err(|source| EngineError::CorruptPage { page, source })?;
        drop(st);
        self.counters.fetch_versions_applied.fetch_add(n as u64, Relaxed);
        page::seal(&mut buf);
        Ok(Arc::from(buf))
    }

    fn flush_round(&self) -> Result<FlushReport, EngineError> {
        self.check_alive()?;
        let _round = self.flush_lock.lock();
        // Snapshot the oldest pages' versions and whatever images are cached.
        struct Job {
            page: PageId,
            fresh: bool,
            base: Option<Arc<[u8]>>,
            versions: Vec<(Oid, Lsn, Arc<[u8]>)>,
        }
        let mut jobs: Vec<Job> = {
            let st = self.state.lock();
            st.mob
                .oldest_pages(self.opts.flush_batch_pages.max(1))
                .into_iter()
                .map(|page| {
                    let mut versions = Vec::new();
                    st.mob.for_page(page, |oid, e| versions.push((oid, e.lsn, e.data.clone())));
                    Job {
                        page,
                        fresh: st.fresh.contains(&page),
                        base: st.cache.peek(page).cloned(),
                        versions,
                    }
                })
                .collect()
        };
        if jobs.is_empty() {
            let st = self.state.lock();
            return Ok(FlushReport { checkpoint: st.superblock.checkpoint, ..Default::default() });
        }
        jobs.sort_by_key(|j| j.page);

        // Build the new images: installation reads where needed, then every version at once.
        let mut out = vec![0u8; jobs.len() * self.page_size];
        let mut report = FlushReport { pages: jobs.len(), ..Default::default() };
        let mut scratch = Vec::new();
        for (j, buf) in jobs.iter().zip(out.chunks_mut(self.page_size)) {
            if j.fresh {
                PageMut::init(buf, j.page).expect("valid page size");
            } else {
                let base = match &j.base {
                    Some(b) => b.clone(),
                    None => {
                        report.installation_reads += 1;
                        self.read_page(j.page)?
                    }
                };
                buf.copy_from_slice(&base);
            }
            let mut vs: Vec<(Oid, &[u8])> =
                j.versions.iter().map(|(o, _, d)| (*o, &d[..])).collect();
            let mut p = PageMut::open(buf)
                .map_err(|source| EngineError::CorruptPage { page: j.page, source })?;
            p.apply(&mut vs, &mut scratch)
                .map_err(|source| EngineError::CorruptPage { page: j.page, source })?;
            let newest = j.versions.iter().map(|(_, l, _)| *l).max().unwrap_or(Lsn::ZERO);
            let version = p.view().version().max(newest);
            p.set_version(version);
            p.seal();
            report.versions += j.versions.len();
        }

        // Torn-write protection, then in place, in runs of consecutive pages.
        let mut dwb_buf = Vec::new();
        self.dwb.write(&out, &mut dwb_buf).map_err(|e| self.fail(e))?;
        let mut i = 0;
        while i < jobs.len() {
            let mut k = i + 1;
            while k < jobs.len() && jobs[k].page.get() == jobs[k - 1].page.get() + 1 {
                k += 1;
            }
            let bytes = &out[i * self.page_size..k * self.page_size];
            self.pages.write_run(jobs[i].page.get(), bytes).map_err(|e| self.fail(e))?;
            i = k;
        }
        self.pages.sync().map_err(|e| self.fail(e))?;

        // The pages are durable: drop the installed versions and move the checkpoint.
        let sb = {
            let mut st = self.state.lock();
            for (j, img) in jobs.iter().zip(out.chunks(self.page_size)) {
                st.cache.insert(j.page, Arc::from(img));
                st.fresh.remove(&j.page);
                for (oid, lsn, _) in &j.versions {
                    st.mob.remove_if(Oref::new(j.page, *oid), *lsn);
                }
            }
            st.install_epoch += 1;
            let next = self.log.next_lsn();
            let checkpoint = [st.mob.oldest_lsn(), st.pending.front().map(|p| p.lsn)]
                .into_iter()
                .flatten()
                .fold(next, Lsn::min);
            // The allocation page as of the checkpoint: the last page opened below it.
            while st.opened.front().is_some_and(|(l, _)| *l < checkpoint) {
                let (_, p) = st.opened.pop_front().expect("checked");
                st.superblock.alloc_page = Some(p);
            }
            st.superblock.checkpoint = checkpoint;
            st.superblock.generation += 1;
            report.checkpoint = checkpoint;
            st.superblock.clone()
        };
        self.mob_space.notify_all();
        write_superblock(&*self.disk, &sb).map_err(|e| self.fail(e))?;
        self.log.truncate_before(sb.checkpoint).map_err(|e| self.fail(e))?;

        let c = &self.counters;
        c.flush_rounds.fetch_add(1, Relaxed);
        c.pages_written.fetch_add(report.pages as u64, Relaxed);
        c.versions_installed.fetch_add(report.versions as u64, Relaxed);
        c.installation_reads.fetch_add(report.installation_reads as u64, Relaxed);
        Ok(report)
    }

    fn flusher_loop(&self) {
        loop {
            {
                let mut st = self.state.lock();
                let start = self.opts.mob_bytes / 100 * self.opts.flush_start_percent;
                while !st.shutdown && !st.flush_wanted && st.mob.bytes() <= start {
                    self.flush_wake.wait_for(&mut st, Duration::from_millis(500));
                    // Idle flushing: install whatever is buffered when nothing else happens,
                    // so that the log stays short and recovery fast.
                    if !st.mob.is_empty() && st.pending.is_empty() {
                        break;
                    }
                }
                if st.shutdown {
                    return;
                }
                st.flush_wanted = false;
            }
            if self.failed.load(Relaxed) {
                return;
            }
            if self.flush_round().is_err() {
                // The engine is marked failed (write errors) or a page is corrupt; either way
                // commits waiting for space must hear about it rather than hang.
                self.failed.store(true, Relaxed);
                self.mob_space.notify_all();
                return;
            }
        }
    }

    fn stats(&self) -> EngineStats {
        let c = &self.counters;
        let st = self.state.lock();
        let log = self.log.stats();
        let cache = st.cache.stats();
        let pages_written = c.pages_written.load(Relaxed);
        let versions_installed = c.versions_installed.load(Relaxed);
        EngineStats {
            commits: c.commits.load(Relaxed),
            read_only_commits: c.read_only_commits.load(Relaxed),
            versions_committed: c.versions_committed.load(Relaxed),
            objects_created: c.objects_created.load(Relaxed),
            commits_refused: c.commits_refused.load(Relaxed),
            log_bytes: log.bytes_written,
            log_fsyncs: log.fsyncs,
            commits_per_fsync: if log.fsyncs == 0 {
                0.0
            } else {
                log.records_appended as f64 / log.fsyncs as f64
            },
            mob_bytes: st.mob.bytes(),
            mob_entries: st.mob.len(),
            fetches: c.fetches.load(Relaxed),
            fetch_versions_applied: c.fetch_versions_applied.load(Relaxed),
            cache_hits: cache.hits,
            cache_misses: cache.misses,
            fetch_reads: c.fetch_reads.load(Relaxed),
            installation_reads: c.installation_reads.load(Relaxed),
            validation_reads: c.validation_reads.load(Relaxed),
            flush_rounds: c.flush_rounds.load(Relaxed),
            pages_written,
            versions_installed,
            write_absorption: if pages_written == 0 {
                0.0
            } else {
                versions_installed as f64 / pages_written as f64
            },
            mob_waits: c.mob_waits.load(Relaxed),
            checkpoint: st.superblock.checkpoint.0,
            pages_allocated: st.tail.page.get(),
        }
    }
}

/// The class of every object of a validated commit, in request order.
struct Descs {
    created: Vec<Arc<ClassDesc>>,
    versions: Vec<Arc<ClassDesc>>,
}

/// Applies the MOB's versions of `page` to `buf` (a valid page); returns how many.
fn apply_mob(mob: &Mob, page: PageId, buf: &mut [u8]) -> Result<usize, FormatError> {
    if !mob.has_page(page) {
        return Ok(0);
    }
    let mut vs: Vec<(Oid, &[u8])> = Vec::new();
    let mut newest = Lsn::ZERO;
    mob.for_page(page, |oid, e| {
        vs.push((oid, &e.data));
        newest = newest.max(e.lsn);
    });
    let n = vs.len();
    let mut p = PageMut::open(buf)?;
    let mut scratch = Vec::new();
    p.apply(&mut vs, &mut scratch)?;
    let version = p.view().version().max(newest);
    p.set_version(version);
    Ok(n)
}

/// A bulk load: objects written straight into fresh pages, bypassing the log and the MOB, for
/// creating large databases fast. Nothing is visible until [`BulkLoader::finish`]; a loader
/// dropped without finishing leaves the database as it was.
///
/// Objects are placed in the order they are given, like commits. The most recent
/// [`limits::BULK_WINDOW_PAGES`] pages stay in memory so that references in them can still be
/// patched with [`BulkLoader::object_mut`] (OO7 creates assemblies before the parts they point
/// to); older pages are written out.
#[derive(Debug)]
pub struct BulkLoader<'e> {
    engine: &'e Inner,
    _guard: parking_lot::MutexGuard<'e, ()>,
    /// Pages not yet written, oldest first.
    window: VecDeque<Vec<u8>>,
    /// The page id of `window[0]`.
    window_first: PageId,
    /// Pages written so far.
    pages_written: u64,
    /// Objects added.
    objects: u64,
    /// Object bytes added.
    bytes: u64,
    /// Whether `finish` ran.
    finished: bool,
}

/// What a bulk load did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkReport {
    /// Objects loaded.
    pub objects: u64,
    /// Object bytes loaded.
    pub bytes: u64,
    /// Pages written.
    pub pages: u64,
}

impl BulkLoader<'_> {
    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.engine.page_size
    }

    fn last_page_id(&self) -> PageId {
        PageId::new(self.window_first.get() + self.window.len() as u32 - 1)
            .expect("window is not empty")
    }

    /// Adds an object and returns its oref. Its class must be a stored class or one added
    /// earlier in this load; the bytes are trusted (the loader is the database's own code).
    pub fn add(&mut self, obj: &[u8]) -> Result<Oref, EngineError> {
        page::check_object_bytes(obj, self.engine.page_size)
            .map_err(|source| InvalidCommit::ObjectTooLarge { index: 0, source })?;
        let last_id = PageId::new(self.window_first.get() + self.window.len() as u32 - 1);
        if let (Some(last), Some(id)) = (self.window.back_mut(), last_id) {
            let mut p = PageMut::open(last).expect("loader pages are valid");
            match p.append(obj) {
                Ok(oid) => {
                    self.objects += 1;
                    self.bytes += obj.len() as u64;
                    return Ok(Oref::new(id, oid));
                }
                Err(FormatError::PageFull { .. } | FormatError::NoFreeOid) => {}
                Err(e) => return Err(EngineError::CorruptPage { page: id, source: e }),
            }
        }
        let id = if self.window.is_empty() {
            self.window_first
        } else {
            self.last_page_id().next().ok_or(EngineError::Full)?
        };
        if self.window.len() == limits::BULK_WINDOW_PAGES {
            self.write_oldest(self.window.len() / 2)?;
        }
        let mut page = empty_page(id, self.engine.page_size);
        let oid = PageMut::open(&mut page).expect("fresh page").append(obj).expect("fits");
        self.window.push_back(page);
        self.objects += 1;
        self.bytes += obj.len() as u64;
        Ok(Oref::new(id, oid))
    }

    /// The bytes of an object added in this load and still in memory, for patching references.
    pub fn object_mut(&mut self, oref: Oref) -> Result<&mut [u8], EngineError> {
        let page = oref.page().ok_or(EngineError::NoSuchPage(0))?;
        let idx = page
            .get()
            .checked_sub(self.window_first.get())
            .map(|i| i as usize)
            .filter(|&i| i < self.window.len())
            .ok_or(EngineError::NoSuchPage(page.get()))?;
        let buf = &mut self.window[idx];
        let range = PageView::parse(buf)
            .expect("loader pages are valid")
            .object_range(oref.oid())
            .ok_or(InvalidCommit::NoSuchObject(oref))?;
        Ok(&mut buf[range])
    }

    /// The bytes of an object added in this load and still in memory.
    pub fn object(&self, oref: Oref) -> Option<&[u8]> {
        let idx = oref.page()?.get().checked_sub(self.window_first.get())? as usize;
        let buf = self.window.get(idx)?;
        let range = PageView::parse(buf).ok()?.object_range(oref.oid())?;
        Some(&buf[range])
    }

    fn write_oldest(&mut self, n: usize) -> Result<(), EngineError> {
        let n = n.min(self.window.len());
        if n == 0 {
            return Ok(());
        }
        let mut run = Vec::with_capacity(n * self.engine.page_size);
        for mut page in self.window.drain(..n) {
            page::seal(&mut page);
            run.extend_from_slice(&page);
        }
        self.engine.pages.write_run(self.window_first.get(), &run)?;
        self.window_first = PageId::new(self.window_first.get() + n as u32).expect("in range");
        self.pages_written += n as u64;
        Ok(())
    }

    /// Objects added so far.
    pub fn objects(&self) -> u64 {
        self.objects
    }

    /// Object bytes added so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes the remaining pages, makes them durable and part of the database.
    pub fn finish(mut self) -> Result<BulkReport, EngineError> {
        if self.window.is_empty() {
            self.finished = true;
            self.engine.state.lock().bulk_active = false;
            return Ok(BulkReport { objects: 0, bytes: 0, pages: 0 });
        }
        let last = self.last_page_id();
        let last_view = {
            let v = PageView::parse(self.window.back().expect("not empty")).expect("valid");
            (v.free_bytes(), v.slot_count())
        };
        let mut slots = Vec::new();
        for p in &self.window {
            slots.push(PageView::parse(p).expect("valid").slot_count());
        }
        let window_first = self.window_first;
        self.write_oldest(self.window.len())?;
        self.engine.pages.sync()?;
        let sb = {
            let mut st = self.engine.state.lock();
            for (i, n) in slots.into_iter().enumerate() {
                let p = PageId::new(window_first.get() + i as u32).expect("in range");
                self.engine.set_slots(&mut st, p, n);
            }
            st.tail = Tail { page: last, free: last_view.0, slots: last_view.1 };
            // Every page up to `last` now has an image on disk: pages before the load were all
            // installed when it started, and the loaded ones were just synced.
            st.superblock.alloc_page = Some(last);
            st.superblock.generation += 1;
            st.bulk_active = false;
            st.superblock.clone()
        };
        write_superblock(&*self.engine.disk, &sb).map_err(|e| self.engine.fail(e))?;
        self.finished = true;
        Ok(BulkReport { objects: self.objects, bytes: self.bytes, pages: self.pages_written })
    }
}

impl Drop for BulkLoader<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Pages written so far lie beyond the allocation page: unreachable, and overwritten
            // (as fresh pages) when allocation gets there.
            self.engine.state.lock().bulk_active = false;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn engine_is_shareable() {
        fn is<T: Send + Sync>() {}
        is::<super::Engine>();
    }
}
