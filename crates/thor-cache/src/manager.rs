//! The cache-manager trait and the client cache that runs one.
//!
//! A [`CacheManager`] is a replacement strategy over the shared machinery of [`CacheCore`]:
//! it hears about accesses and fetched pages and, when asked, frees a frame, by evicting a page
//! (FPC) or compacting the hot objects of a frame into another (HAC). [`ClientCache`] pairs a
//! core with the manager chosen by [`CacheConfig`] and gives the client library one interface,
//! so HAC and FPC are interchangeable by a setting wherever a cache is used.
//!
//! # Replacement off the critical path
//!
//! The cache keeps one frame free for the page being fetched. With background replacement (the
//! default) the client calls [`ClientCache::while_fetching`] after sending a fetch and before
//! reading the reply; the next frame is freed then, overlapping the round trip. In the
//! foreground mode (HAC-FG in the paper) frames are freed only when a page arrives.

use std::time::Duration;

use thor_core::{Oref, PageId, RawRef};

use crate::core::{CacheCore, CoreStats, Entry, F_READ, F_RESOLVING, NOT_RESIDENT, Need};
use crate::error::CacheError;
use crate::fpc::Fpc;
use crate::hac::{Hac, HacParams};

/// Counters a replacement strategy keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplacementStats {
    /// Frames freed by evicting them whole (FPC; HAC: victims of which nothing was kept).
    pub frames_evicted: u64,
    /// Victims compacted: their hot objects moved elsewhere (HAC). Each either freed its frame
    /// or became the compaction target.
    pub frames_compacted: u64,
    /// Objects kept by compaction (HAC).
    pub objects_kept: u64,
    /// Objects dropped from the cache (installed or not).
    pub objects_dropped: u64,
    /// Kept objects that moved back into their resident page rather than to the target: the
    /// duplicate case (HAC).
    pub objects_moved_home: u64,
    /// Frames whose usage the primary pointer computed (HAC).
    pub frames_scanned: u64,
    /// Frames added to the candidate set, by the pointers, by filling up with compacted
    /// objects, or at the commit of their created objects (HAC).
    pub candidates_added: u64,
    /// Compaction targets that filled up and joined the candidate set (HAC).
    pub targets_filled: u64,
}

/// A replacement strategy: decides which frame to free and how. See the module documentation.
pub trait CacheManager: std::fmt::Debug {
    /// A short name ("fpc", "hac").
    fn name(&self) -> &'static str;

    /// An access hit entry `entry` in frame `frame`: record the use. This is on the hit path of
    /// every object access, so it must be a few instructions.
    fn touch(&mut self, entry: &mut Entry, frame: u32);

    /// A fetched page was installed in `frame`.
    fn page_installed(&mut self, core: &mut CacheCore, frame: u32);

    /// Frees at least one frame (onto `core.free`), or fails if nothing can be freed.
    fn free_frame(&mut self, core: &mut CacheCore) -> Result<(), CacheError>;

    /// The transaction that created the objects in `frame` committed: the objects have orefs
    /// now. Keep them (as compacted objects) or evict the frame.
    fn new_frame_committed(&mut self, core: &mut CacheCore, frame: u32);

    /// `frame` was emptied outside the manager (for example an aborted transaction's created
    /// objects): forget it.
    fn frame_released(&mut self, frame: u32);

    /// Bytes of memory the manager's own tables hold; the cache's budget covers them.
    fn table_bytes(&self) -> usize;

    /// Counters.
    fn stats(&self) -> ReplacementStats;
}

/// Which cache manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyConfig {
    /// Whole pages, perfect LRU.
    Fpc,
    /// Hybrid adaptive caching with these settings.
    Hac(HacParams),
}

impl PolicyConfig {
    /// HAC with the paper's settings.
    pub const HAC: PolicyConfig = PolicyConfig::Hac(HacParams::PAPER);
}

impl std::str::FromStr for PolicyConfig {
    type Err = CacheError;
    /// `fpc`, `hac`, or `hac:` followed by HAC settings (`hac:r=2/3,e=20,n=2,s=3`, any subset).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, settings) = lower.split_once(':').unwrap_or((lower.as_str(), ""));
        match (name, settings) {
            ("fpc", "") => Ok(PolicyConfig::Fpc),
            ("hac", settings) => Ok(PolicyConfig::Hac(settings.parse()?)),
            _ => Err(CacheError::BadConfig(format!(
                "unknown cache policy {s:?} (expected fpc, hac or hac:r=2/3,e=20,n=2,s=3)"
            ))),
        }
    }
}

impl std::fmt::Display for PolicyConfig {
    /// The form [`FromStr`](std::str::FromStr) reads: `fpc`, `hac`, or `hac:` with the
    /// settings that differ from the paper's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyConfig::Fpc => f.write_str("fpc"),
            PolicyConfig::Hac(p) if *p == HacParams::PAPER => f.write_str("hac"),
            PolicyConfig::Hac(p) => write!(f, "hac:{p}"),
        }
    }
}

/// Settings of a client cache.
#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// Memory for frames and tables together.
    pub budget_bytes: usize,
    /// Bytes per page (the server's).
    pub page_size: usize,
    /// The replacement strategy.
    pub policy: PolicyConfig,
    /// Free frames while a fetch is on the wire (true) or when its reply arrives (false).
    pub background_replacement: bool,
}

/// The manager chosen at run time, dispatched by `match` (cheaper than a trait object on the
/// hit path).
#[derive(Debug)]
enum Manager {
    Fpc(Fpc),
    Hac(Hac),
}

macro_rules! with_manager {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Manager::Fpc($m) => $e,
            Manager::Hac($m) => $e,
        }
    };
}

/// Adds an object to the read set on its first access in a transaction: out of line, so the
/// hit path stays small enough to inline everywhere.
#[cold]
#[inline(never)]
fn first_read(reads: &mut crate::readset::ReadSet, oref: u32) {
    reads.insert(oref);
}

/// Counters of a client cache.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// The shared machinery's counters.
    pub core: CoreStats,
    /// The manager's counters.
    pub replacement: ReplacementStats,
    /// Time spent freeing frames.
    pub replacement_time: Duration,
    /// Live indirection-table entries.
    pub entries: usize,
    /// Bytes of frames and tables.
    pub memory_bytes: usize,
    /// Frames not retired.
    pub usable_frames: usize,
}

impl CacheStats {
    /// Pages fetched into the cache (each fetch installs one).
    pub fn fetches(&self) -> u64 {
        self.core.pages_installed
    }

    /// Replacement time per fetch: with background replacement this is the work overlapped
    /// with each fetch's round trip; in foreground mode it adds to each miss.
    pub fn replacement_time_per_fetch(&self) -> Duration {
        per(self.replacement_time, self.fetches())
    }

    /// Replacement time per frame freed.
    pub fn replacement_time_per_frame(&self) -> Duration {
        per(self.replacement_time, self.core.frames_freed)
    }
}

/// `total / n`, zero for no events.
pub fn per(total: Duration, n: u64) -> Duration {
    if n == 0 { Duration::ZERO } else { total.div_f64(n as f64) }
}

/// A client cache: the shared core and its manager.
#[derive(Debug)]
pub struct ClientCache {
    /// The shared machinery (public for the client library and tests).
    pub core: CacheCore,
    /// The replacement strategy.
    manager: Manager,
    /// log2 of the page size: a location's frame is `loc >> frame_shift`.
    frame_shift: u32,
    /// Whether frames are freed while fetches are on the wire.
    background: bool,
    /// Time spent in replacement.
    replacement_time: Duration,
    /// Frames of created objects in the current transaction.
    new_frames: Vec<u32>,
}

impl ClientCache {
    /// A cache with the given settings.
    pub fn new(cfg: CacheConfig) -> Result<ClientCache, CacheError> {
        let mut core = CacheCore::new(cfg.budget_bytes, cfg.page_size)?;
        let frames = core.frames.len();
        let manager = match cfg.policy {
            PolicyConfig::Fpc => Manager::Fpc(Fpc::new(frames)?),
            PolicyConfig::Hac(params) => Manager::Hac(Hac::new(frames, params)?),
        };
        // The manager's tables come out of the same budget: free frames make way for them.
        core.set_manager_bytes(with_manager!(&manager, m => m.table_bytes()));
        core.rebalance();
        Ok(ClientCache {
            frame_shift: cfg.page_size.trailing_zeros(),
            core,
            manager,
            background: cfg.background_replacement,
            replacement_time: Duration::ZERO,
            new_frames: Vec::new(),
        })
    }

    /// The manager's name.
    pub fn policy_name(&self) -> &'static str {
        with_manager!(&self.manager, m => m.name())
    }

    /// The hit path: the location of entry `i` if it is resident and still the object `oref`
    /// names, recording the access. `None` sends the caller to [`ClientCache::resolve`].
    #[inline(always)]
    pub fn access(&mut self, i: u32, oref: u32) -> Option<u32> {
        let e = self.core.entries.get_mut(i as usize)?;
        if e.oref != oref || e.loc == NOT_RESIDENT {
            return None;
        }
        let loc = e.loc;
        with_manager!(&mut self.manager, m => m.touch(e, loc >> self.frame_shift));
        if e.flags & F_READ == 0 {
            e.flags |= F_READ;
            first_read(&mut self.core.reads, oref);
        }
        Some(loc)
    }

    /// The entry for a handle `(i, oref)` whose hit path failed: the same entry if it is still
    /// the object, or the object's current entry (after the entry was reused, or the object was
    /// renamed by a commit).
    pub fn rebind(&mut self, i: u32, oref: u32) -> Result<u32, CacheError> {
        if self.core.entries.get(i as usize).is_some_and(|e| e.oref == oref && e.flags != 0) {
            return Ok(i);
        }
        let word = match RawRef::decode(oref) {
            RawRef::Oref(_) => oref,
            RawRef::Tagged(_) => self.core.renamed(oref).ok_or(CacheError::Internal(
                "handle to an object created by an aborted or long-past transaction",
            ))?,
        };
        if let Some(j) = self.core.lookup(word) {
            return Ok(j);
        }
        let o = Oref::from_raw(word).ok_or(CacheError::Internal("tagged oref"))?;
        self.core.entry_for(o)
    }

    /// The slow path: where entry `i` is, or what must be fetched first. On `Resident` the
    /// access is recorded as on the hit path.
    pub fn resolve(&mut self, i: u32) -> Result<Need, CacheError> {
        // The object is about to be read: put it in the read set now, and keep its entry
        // alive (see `CacheCore::maybe_free_entry`) while its page is fetched and frames are
        // freed, when the last reference to it might otherwise leave the cache. The mark goes
        // when the object is resident (or with the read set, if the slow path fails).
        let e = &mut self.core.entries[i as usize];
        e.flags |= F_RESOLVING;
        if e.flags & F_READ == 0 {
            e.flags |= F_READ;
            let oref = e.oref;
            self.core.reads.insert(oref);
        }
        if self.core.rebalance() > 0 {
            // The tables outgrew their share (swizzling allocates entries on the hit path):
            // free frames to retire now, before the object is located (replacement may move
            // it).
            self.free_frames_until(0)?;
        }
        let need = self.core.locate(i)?;
        if let Need::Resident(_) = need {
            self.core.entries[i as usize].flags &= !F_RESOLVING;
            let oref = self.core.entries[i as usize].oref;
            self.access(i, oref);
        }
        Ok(need)
    }

    fn free_frames_until(&mut self, n: usize) -> Result<(), CacheError> {
        let start = std::time::Instant::now();
        let mut extra = self.core.rebalance();
        let mut result = Ok(());
        while self.core.free.len() < n || extra > 0 {
            let freed = with_manager!(&mut self.manager, m => m.free_frame(&mut self.core));
            self.core.set_manager_bytes(with_manager!(&self.manager, m => m.table_bytes()));
            if let Err(e) = freed {
                result = Err(e);
                break;
            }
            extra = self.core.rebalance();
        }
        self.replacement_time += start.elapsed();
        result
    }

    /// Call after sending a fetch and before reading its reply: frees the frame the *next*
    /// fetch will use (background replacement). Does nothing in foreground mode.
    ///
    /// A cache too full of pinned and modified objects to free that second frame is not an
    /// error here: the fetch in flight has its frame, and the shortage is reported when a
    /// frame is needed and cannot be had.
    pub fn while_fetching(&mut self) -> Result<(), CacheError> {
        if !self.background {
            return Ok(());
        }
        match self.free_frames_until(2) {
            Err(CacheError::Full { .. }) if !self.core.free.is_empty() => Ok(()),
            other => other,
        }
    }

    /// Installs a fetched page.
    pub fn install_page(&mut self, page: PageId, bytes: &[u8]) -> Result<(), CacheError> {
        self.free_frames_until(1)?;
        let f = self.core.take_free_frame().ok_or(CacheError::Internal("no free frame"))?;
        if let Err(e) = self.core.install_page(f, page, bytes) {
            self.core.release_frame(f);
            return Err(e);
        }
        with_manager!(&mut self.manager, m => m.page_installed(&mut self.core, f));
        Ok(())
    }

    /// Whether page `page` is resident.
    pub fn has_page(&self, page: PageId) -> bool {
        self.core.page_frame(page).is_some()
    }

    /// Creates an object (its references already swizzled or null); returns its entry and the
    /// tagged serial that names it until commit.
    pub fn create(&mut self, bytes: &[u8]) -> Result<(u32, u32), CacheError> {
        thor_core::page::check_object_bytes(bytes, self.core.page_size)
            .map_err(|_| CacheError::TooLarge { size: bytes.len() })?;
        // Created objects are laid out like a compacted frame: no page header.
        if bytes.len() > self.core.page_size {
            return Err(CacheError::TooLarge { size: bytes.len() });
        }
        let loc = match self.core.new_object_room(bytes.len()) {
            Some(loc) => loc,
            None => {
                self.free_frames_until(2)?;
                let f = self.core.take_free_frame().ok_or(CacheError::Internal("no free frame"))?;
                self.core.start_new_frame(f);
                self.new_frames.push(f);
                self.core
                    .new_object_room(bytes.len())
                    .ok_or(CacheError::Internal("new frame full"))?
            }
        };
        self.core.create_at(loc, bytes)
    }

    /// The transaction committed: created entries get their orefs, modified marks and the read
    /// set are cleared, and the manager decides what becomes of the created objects' frames.
    pub fn commit_done(&mut self, created: &[(u32, Oref)], modified: &[u32]) {
        // Class words are never swizzled: a created object whose class was created by the same
        // transaction names it by its serial, which must become the class's oref now.
        let serials: rustc_hash::FxHashMap<u32, Oref> =
            created.iter().map(|&(i, oref)| (self.core.entries[i as usize].oref, oref)).collect();
        for &(i, _) in created {
            let loc = self.core.entries[i as usize].loc;
            if loc != NOT_RESIDENT {
                let w = self.core.class_word(loc);
                if let Some(class) = serials.get(&w) {
                    self.core.arena.write_u32(loc as usize, class.raw());
                }
            }
        }
        for (&serial, &oref) in &serials {
            if let Some(desc) = self.core.class(serial).cloned() {
                self.core.register_class(oref.raw(), desc);
            }
        }
        for &(i, oref) in created {
            self.core.rename(i, oref);
        }
        for &i in modified {
            self.core.refresh_page_copy(i);
            self.core.clear_modified(i);
        }
        self.core.apply_deferred_releases();
        self.core.clear_reads();
        self.core.close_new_frame();
        for f in std::mem::take(&mut self.new_frames) {
            with_manager!(&mut self.manager, m => m.new_frame_committed(&mut self.core, f));
        }
        self.core.retry_invalidations();
    }

    /// The server says object `oref` has a newer committed version: see
    /// [`CacheCore::invalidate`]. Returns whether the object left the cache now (otherwise it
    /// leaves when the transaction ends; a transaction that read or modified it is doomed).
    pub fn invalidate(&mut self, oref: Oref) -> bool {
        self.core.invalidate(oref)
    }

    /// The transaction aborted: `undo` holds the pre-transaction bytes of each modified entry;
    /// created objects are dropped.
    pub fn abort_done(&mut self, undo: &[(u32, Vec<u8>)], created: &[u32]) {
        for (i, bytes) in undo {
            self.core.restore_object(*i, bytes);
            self.core.clear_modified(*i);
        }
        // The undo copies are back: the decrements deferred during the transaction apply
        // now, before created objects (which some of them may concern) are dropped.
        self.core.apply_deferred_releases();
        for &i in created {
            self.core.drop_created(i);
        }
        self.core.clear_reads();
        self.core.close_new_frame();
        for f in std::mem::take(&mut self.new_frames) {
            with_manager!(&mut self.manager, m => m.frame_released(f));
            if self.core.frames[f as usize].pins > 0 {
                // A view of a dropped object still points here: keep the memory until it goes.
                self.core.mark_dead(f);
            } else {
                self.core.release_frame(f);
            }
        }
        self.core.retry_invalidations();
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            core: self.core.stats,
            replacement: with_manager!(&self.manager, m => m.stats()),
            replacement_time: self.replacement_time,
            entries: self.core.live_entries(),
            memory_bytes: self.core.memory_bytes(),
            usable_frames: self.core.usable_frames(),
        }
    }
}
