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

use std::sync::Arc;

use thor_core::{ClassDesc, Oref, PageId, RawRef};

use crate::core::{
    CacheCore, CoreStats, Entry, F_LIVE, F_READ, F_RESOLVING, F_SPILLED, FrameMeta, NOT_RESIDENT,
    Need,
};
use crate::error::CacheError;
use crate::fpc::Fpc;
use crate::gom::{Gom, GomParams};
use crate::hac::{Hac, HacParams};
use crate::limits::UNDO_BUDGET_DIVISOR;
use crate::paged::{Paged, PagedParams};
use crate::spill::{Spill, SpillStats};
use crate::timer::{ReplacementTimer, StatClock};
use crate::txn::Transaction;

/// Counters a replacement strategy keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplacementStats {
    /// Frames freed by evicting them whole (FPC; HAC: victims of which nothing was kept; GOM:
    /// pages evicted from its page buffer).
    pub frames_evicted: u64,
    /// Victims compacted: their hot objects moved elsewhere (HAC). Each either freed its frame
    /// or became the compaction target. GOM: object-buffer frames packed to reuse the room of
    /// evicted objects.
    pub frames_compacted: u64,
    /// Objects kept by compaction (HAC), or copied from evicted pages into the object buffer
    /// (GOM).
    pub objects_kept: u64,
    /// Objects dropped from the cache (installed or not).
    pub objects_dropped: u64,
    /// Kept objects that moved back into their resident page rather than to the target: the
    /// duplicate case (HAC); objects put back into their page when it was fetched again (GOM).
    pub objects_moved_home: u64,
    /// Frames whose usage the primary pointer computed (HAC).
    pub frames_scanned: u64,
    /// Frames added to the candidate set, by the pointers, by filling up with compacted
    /// objects, or at the commit of their created objects (HAC).
    pub candidates_added: u64,
    /// Compaction targets that filled up and joined the candidate set (HAC).
    pub targets_filled: u64,
    /// Fetches the manager's model adds to the pages the client fetched: QuickStore's mapping
    /// objects ([`crate::paged`]). Counted in [`CacheStats::fetches`].
    pub extra_fetches: u64,
}

/// A replacement strategy: decides which frame to free and how. See the module documentation.
pub trait CacheManager: std::fmt::Debug {
    /// A short name ("fpc", "hac", "quickstore", ...).
    fn name(&self) -> &'static str;

    /// An access hit entry `entry` (index `index` in the indirection table) in frame `frame`,
    /// whose decay count is `decays` ([`CacheCore::decays`]): record the use. This is on the
    /// hit path of every object access, so it must be a few instructions, and should read
    /// `meta` only when it changes something (the frame table is a cache miss where the
    /// decay counts are not). (The index is for managers that order objects, GOM's object
    /// buffer: it names the object without a hash probe.)
    fn touch(
        &mut self,
        entry: &mut Entry,
        index: u32,
        meta: &mut FrameMeta,
        decays: u8,
        frame: u32,
    );

    /// A fetched page was installed in `frame`.
    fn page_installed(&mut self, core: &mut CacheCore, frame: u32);

    /// Frees at least one frame (onto `core.free`), or fails if nothing can be freed. A
    /// manager that splits its work adds the time of its parts (usage computation and victim
    /// selection, compaction and eviction) to `timer` ([`crate::timer`]); one that does not
    /// leaves it alone, and its replacement is timed only as a whole.
    fn free_frame(
        &mut self,
        core: &mut CacheCore,
        timer: &mut ReplacementTimer,
    ) -> Result<(), CacheError>;

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
    /// Whole pages in a `thor_policy` policy's order: QuickStore, CLOCK, ARC, S3-FIFO,
    /// W-TinyLFU ([`crate::paged`]).
    Paged(PagedParams),
    /// GOM's dual buffering: a page buffer and an object buffer split statically
    /// ([`crate::gom`]).
    Gom(GomParams),
}

impl PolicyConfig {
    /// HAC with the paper's settings.
    pub const HAC: PolicyConfig = PolicyConfig::Hac(HacParams::PAPER);
}

impl std::str::FromStr for PolicyConfig {
    type Err = CacheError;
    /// `fpc`, `hac`, or `hac:` followed by HAC settings (`hac:r=2/3,e=20,n=2,s=3`, any subset);
    /// `quickstore` (or `quickstore:m=N`, N mapping objects per mapping page), `clock`, `arc`,
    /// `s3fifo`, `wtinylfu`; `gom` (or `gom:obj=F`, the object buffer's share of the cache).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, settings) = lower.split_once(':').unwrap_or((lower.as_str(), ""));
        if let Some(p) = PagedParams::parse(name, settings) {
            return p.map(PolicyConfig::Paged);
        }
        match (name, settings) {
            ("fpc", "") => Ok(PolicyConfig::Fpc),
            ("hac", settings) => Ok(PolicyConfig::Hac(settings.parse()?)),
            ("gom", settings) => Ok(PolicyConfig::Gom(GomParams::parse(settings)?)),
            _ => Err(CacheError::BadConfig(format!(
                "unknown cache policy {s:?} (expected fpc, hac, hac:r=2/3,e=20,n=2,s=3, quickstore, quickstore:m=64, clock, arc, s3fifo, wtinylfu, gom or gom:obj=0.8)"
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
            PolicyConfig::Paged(p) => write!(f, "{p}"),
            PolicyConfig::Gom(p) => write!(f, "{p}"),
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
pub(crate) enum Manager {
    Fpc(Fpc),
    Hac(Hac),
    Paged(Paged),
    Gom(Gom),
}

macro_rules! with_manager {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Manager::Fpc($m) => $e,
            Manager::Hac($m) => $e,
            Manager::Paged($m) => $e,
            Manager::Gom($m) => $e,
        }
    };
}

impl Manager {
    /// See [`CacheManager::new_frame_committed`].
    pub(crate) fn new_frame_committed(&mut self, core: &mut CacheCore, frame: u32) {
        with_manager!(self, m => m.new_frame_committed(core, frame));
    }

    /// See [`CacheManager::frame_released`].
    pub(crate) fn frame_released(&mut self, frame: u32) {
        with_manager!(self, m => m.frame_released(frame));
    }
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
    /// Time spent freeing frames, as a whole (zero without a clock,
    /// [`ClientCache::set_clock`]).
    pub replacement_time: Duration,
    /// The part of `replacement_time` spent computing usage and choosing victims: HAC's
    /// pointer scans, usage computation and decay, candidate set; FPC's LRU. Zero for managers
    /// that do not split their work (GOM, the paged policies): see [`crate::timer`].
    pub usage_time: Duration,
    /// The part of `replacement_time` spent compacting and evicting victims: moving kept
    /// objects, dropping the others and releasing their references. Zero for managers that do
    /// not split their work. `usage_time + compaction_time <= replacement_time`.
    pub compaction_time: Duration,
    /// The spill's counters (transactions larger than the cache, [`crate::spill`]).
    pub spill: SpillStats,
    /// Live indirection-table entries.
    pub entries: usize,
    /// Bytes of frames and tables.
    pub memory_bytes: usize,
    /// Frames not retired.
    pub usable_frames: usize,
}

impl CacheStats {
    /// Fetches: pages fetched into the cache (each installs one; pages that came by prefetch
    /// with another's fetch are not fetches), plus those the manager models beyond them
    /// (QuickStore's mapping objects).
    pub fn fetches(&self) -> u64 {
        self.core.pages_installed - self.core.pages_prefetched + self.replacement.extra_fetches
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

/// A client cache: the shared core, its manager and the current transaction's state.
///
/// # The boundary
///
/// The client library sees only this type's methods; the core's tables, the arena and the
/// transaction's undo copies are private to thor-cache, so every change to them keeps the
/// cache's invariants (reference counts, no-steal, the read set, the budget). Objects are named
/// by their *entry* (an index into the indirection table, what a swizzled reference holds) or,
/// while a view holds one still, by their *location* (an offset into the arena): views read and
/// write scalar fields through [`ClientCache::object_ptr`], and everything else (references,
/// the first write, commit and abort) goes through a method. The transaction's half of the
/// interface is in [`crate::txn`].
#[derive(Debug)]
pub struct ClientCache {
    /// The shared machinery.
    pub(crate) core: CacheCore,
    /// The replacement strategy.
    pub(crate) manager: Manager,
    /// log2 of the page size: a location's frame is `loc >> frame_shift`.
    frame_shift: u32,
    /// Whether frames are freed while fetches are on the wire.
    background: bool,
    /// Time spent in replacement, as a whole, in the clock's nanoseconds.
    replacement_ns: u64,
    /// The clock replacement is timed with, and its parts' times.
    timer: ReplacementTimer,
    /// The current transaction: its undo copies, created objects and their frames.
    pub(crate) tx: Transaction,
    /// Where the transaction's objects go when they outgrow the cache ([`crate::spill`]).
    pub(crate) spill: Spill,
}

impl ClientCache {
    /// A cache with the given settings.
    pub fn new(cfg: CacheConfig) -> Result<ClientCache, CacheError> {
        let mut core = CacheCore::new(cfg.budget_bytes, cfg.page_size)?;
        let frames = core.frames.len();
        let manager = match cfg.policy {
            PolicyConfig::Fpc => Manager::Fpc(Fpc::new(frames)?),
            PolicyConfig::Hac(params) => Manager::Hac(Hac::new(frames, params)?),
            PolicyConfig::Paged(params) => Manager::Paged(Paged::new(frames, params)?),
            PolicyConfig::Gom(params) => Manager::Gom(Gom::new(frames, params)?),
        };
        // The manager's tables come out of the same budget: free frames make way for them.
        core.set_manager_bytes(with_manager!(&manager, m => m.table_bytes()));
        core.rebalance();
        Ok(ClientCache {
            frame_shift: cfg.page_size.trailing_zeros(),
            core,
            manager,
            background: cfg.background_replacement,
            replacement_ns: 0,
            timer: ReplacementTimer::OFF,
            tx: Transaction::default(),
            spill: Spill::default(),
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
        let f = loc >> self.frame_shift;
        // In bounds: a resident entry's location is in the arena, which the frames cover.
        let decays = self.core.decays[f as usize];
        // HAC's common case inline, before the dispatch: an object already used since its
        // frame's last decay changes nothing (`Hac::touch` would return at once).
        if !(matches!(self.manager, Manager::Hac(_))
            && crate::hac::used_since_decay(e.usage, decays))
        {
            let meta = &mut self.core.frames[f as usize];
            with_manager!(&mut self.manager, m => m.touch(e, i, meta, decays, f));
        }
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
            // The tables outgrew their share (swizzling allocates entries on the hit path, the
            // per-page counts of resident objects grow on installation): free frames to retire
            // now, before the object is located (replacement may move it). The copy of its page
            // is held in place meanwhile, so that the page a fetch just brought in is not the
            // frame given up for the tables before its object is installed.
            let page_frame = Oref::from_raw(self.core.entries[i as usize].oref)
                .and_then(|o| o.page())
                .and_then(|p| self.core.page_frame(p));
            let base = page_frame.map(|f| self.core.frame_base(f) as u32);
            if let Some(loc) = base {
                self.core.pin(loc);
            }
            let freed = self.free_frames_until(0);
            if let Some(loc) = base {
                self.core.unpin(loc);
            }
            freed?;
        }
        let e = self.core.entries[i as usize];
        let need = if e.loc == NOT_RESIDENT && e.flags & F_SPILLED != 0 {
            // Stolen by this transaction: its bytes are in the spill store, not in any page.
            Need::Resident(self.read_back(i)?)
        } else {
            self.core.locate(i)?
        };
        if let Need::Resident(_) = need {
            self.core.entries[i as usize].flags &= !F_RESOLVING;
            let oref = self.core.entries[i as usize].oref;
            self.access(i, oref);
        }
        Ok(need)
    }

    /// Times replacement with `clock` from now on ([`crate::timer`]): the whole of every call
    /// that frees frames and, for HAC and FPC, its usage and compaction parts. Without a clock
    /// (the default) nothing is timed: thor-cache reads no clock of its own.
    pub fn set_clock(&mut self, clock: StatClock) {
        self.timer = ReplacementTimer::new(Some(clock));
    }

    pub(crate) fn free_frames_until(&mut self, n: usize) -> Result<(), CacheError> {
        let start = self.timer.now();
        let mut extra = self.core.rebalance();
        if (self.core.free.len() < n || extra > 0)
            && self.tx.undo_bytes_over(self.core.budget_bytes() / UNDO_BUDGET_DIVISOR)
        {
            // Room is needed and the undo log (outside the budget) holds a lot of memory: it
            // goes first. The undo log is an optimization (`papers/thor-ecoop99.txt` section
            // 4.1); an abort then discards the objects it cannot restore.
            self.drop_undo_copies();
        }
        let mut result = Ok(());
        while self.core.free.len() < n || extra > 0 {
            let freed = with_manager!(&mut self.manager, m => {
                m.free_frame(&mut self.core, &mut self.timer)
            });
            self.core.set_manager_bytes(with_manager!(&self.manager, m => m.table_bytes()));
            if let Err(e) = freed {
                // Nothing left to free but the transaction's own objects (and pinned frames):
                // with a spill store they are stolen, and replacement tries again. A steal
                // that finds nothing more ends it.
                match e {
                    CacheError::Full { .. } if self.spill_enabled() => match self.steal_all() {
                        Ok(true) => {
                            extra = self.core.rebalance();
                            continue;
                        }
                        Ok(false) => result = Err(e),
                        Err(spill) => result = Err(spill),
                    },
                    _ => result = Err(e),
                }
                break;
            }
            extra = self.core.rebalance();
        }
        self.replacement_ns += self.timer.now().saturating_sub(start);
        result
    }

    /// Call after sending a fetch and before reading its reply: frees the frame the *next*
    /// fetch will use (background replacement). Does nothing in foreground mode.
    ///
    /// A cache too full of pinned and modified objects to free that second frame is not an
    /// error here: the fetch in flight has its frame, and the shortage is reported when a
    /// frame is needed and cannot be had.
    pub fn while_fetching(&mut self) -> Result<(), CacheError> {
        self.while_fetching_pages(1)
    }

    /// [`ClientCache::while_fetching`] for a fetch that may bring `pages` pages (a prefetch):
    /// frees frames for all of them, and the next one, while the request is on the wire, so
    /// that installing them waits for no replacement.
    pub fn while_fetching_pages(&mut self, pages: usize) -> Result<(), CacheError> {
        if !self.background {
            return Ok(());
        }
        match self.free_frames_until(1 + pages.max(1)) {
            Err(CacheError::Full { .. }) if !self.core.free.is_empty() => Ok(()),
            other => other,
        }
    }

    /// Installs a fetched page.
    pub fn install_page(&mut self, page: PageId, bytes: &[u8]) -> Result<(), CacheError> {
        self.install(page, bytes).map(|_| ())
    }

    /// Installs a page that came by prefetch, with a fetched page's checks; it takes a frame
    /// like any page (freed by the manager as for a fetch) and is evicted like any other. The
    /// cache counts it as prefetched, and as used at the first installation of one of its
    /// objects or as wasted if its frame leaves first ([`CoreStats`]'s `prefetched_*`).
    /// The caller does not install a page it holds already ([`ClientCache::has_page`]).
    pub fn install_prefetched(&mut self, page: PageId, bytes: &[u8]) -> Result<(), CacheError> {
        let f = self.install(page, bytes)?;
        self.core.mark_prefetched(f);
        Ok(())
    }

    fn install(&mut self, page: PageId, bytes: &[u8]) -> Result<u32, CacheError> {
        self.free_frames_until(1)?;
        let f = self.core.take_free_frame().ok_or(CacheError::Internal("no free frame"))?;
        if let Err(e) = self.core.install_page(f, page, bytes) {
            self.core.release_frame(f);
            return Err(e);
        }
        with_manager!(&mut self.manager, m => m.page_installed(&mut self.core, f));
        Ok(f)
    }

    /// Whether page `page` is resident.
    pub fn has_page(&self, page: PageId) -> bool {
        self.core.page_frame(page).is_some()
    }

    // ----- objects, for views -----

    /// The class word (header) of the resident object at `loc`: its class's oref, or the tagged
    /// serial of a class created by the current transaction.
    #[inline(always)]
    pub fn class_word(&self, loc: u32) -> u32 {
        self.core.class_word(loc)
    }

    /// The descriptor registered for class word `class_word`, if any.
    #[inline]
    pub fn class(&self, class_word: u32) -> Option<&Arc<ClassDesc>> {
        self.core.class(class_word)
    }

    /// Registers the descriptor of class `class_word` (a class object's oref, or the serial of
    /// one created by the current transaction). Fails if another descriptor is registered under
    /// that word already (see [`CacheError::ClassChanged`]).
    pub fn register_class(
        &mut self,
        class_word: u32,
        desc: Arc<ClassDesc>,
    ) -> Result<(), CacheError> {
        self.core.register_class(class_word, desc)
    }

    /// The bytes of the resident object at `loc`, as cached (swizzled words included), for the
    /// duration of the borrow.
    pub fn object(&self, loc: u32) -> &[u8] {
        self.core.arena.bytes(loc as usize, self.core.object_size(loc))
    }

    /// Copies the resident object at `loc` into `out` (replacing its contents) with its
    /// references unswizzled: orefs, and tagged serials for objects created by the current
    /// transaction.
    pub fn copy_unswizzled(&self, loc: u32, out: &mut Vec<u8>) {
        self.core.copy_unswizzled(loc, out);
    }

    /// A pointer to the first byte of the resident object at `loc`, for views that read and
    /// write its scalar fields without a call per field. It stays valid while the object stays
    /// where it is: while a pin ([`ClientCache::pin`]) holds its frame or no cache call runs
    /// that may move objects (fetching, creating, commit, abort). Writes through it must be
    /// preceded by [`ClientCache::before_write`] and must not touch reference words (those go
    /// through [`ClientCache::store_ref`]) or the count of a variable part.
    #[inline(always)]
    pub fn object_ptr(&self, loc: u32) -> *mut u8 {
        self.core.arena.base().wrapping_add(loc as usize)
    }

    /// The oref word (or, for an object created by the current transaction, the tagged serial)
    /// of entry `i`, which a swizzled reference word `(i << 1) | 1` names. `i` must come from
    /// such a word: a swizzled word keeps its entry alive.
    #[inline(always)]
    pub fn oref_of(&self, i: u32) -> u32 {
        self.core.entries[i as usize].oref
    }

    /// Follows the reference word at byte `off` of the resident object at `loc` (an offset of a
    /// reference word of its class), swizzling it in place: the target's entry and the oref
    /// word it was made for, or `None` for null.
    pub fn follow(&mut self, loc: u32, off: usize) -> Result<Option<(u32, u32)>, CacheError> {
        self.core.follow(loc, off)
    }

    /// The reference word at byte `off` of the resident object at `loc`, unswizzled: an oref
    /// word, or the tagged serial of an object created by the current transaction.
    pub fn ref_word(&self, loc: u32, off: usize) -> u32 {
        self.core.ref_word(loc, off)
    }

    /// The entry for `oref`, allocating a non-resident one if there is none.
    pub fn entry_for(&mut self, oref: Oref) -> Result<u32, CacheError> {
        self.core.entry_for(oref)
    }

    /// The entry for `oref_word` (an oref, or the tagged serial of a created object), if any.
    pub fn lookup(&self, oref_word: u32) -> Option<u32> {
        self.core.lookup(oref_word)
    }

    /// Where the object a handle `(i, oref)` names is resident, if it is, without counting an
    /// access (no usage bit, no read set) and without fetching. For tests and diagnostics.
    pub fn location(&self, i: u32, oref: u32) -> Option<u32> {
        let core = &self.core;
        let i = match core.entries.get(i as usize) {
            Some(e) if e.oref == oref && e.flags & F_LIVE != 0 => i,
            _ => core.lookup(oref).or_else(|| core.renamed(oref).and_then(|w| core.lookup(w)))?,
        };
        let loc = core.entries[i as usize].loc;
        (loc != NOT_RESIDENT).then_some(loc)
    }

    // ----- pins -----

    /// Pins the frame holding `loc`: nothing in it moves or leaves until [`ClientCache::unpin`].
    #[inline]
    pub fn pin(&mut self, loc: u32) {
        self.core.pin(loc);
    }

    /// Undoes one [`ClientCache::pin`].
    #[inline]
    pub fn unpin(&mut self, loc: u32) {
        self.core.unpin(loc);
    }

    /// Frees the frames kept for views of an aborted transaction's created objects that no pin
    /// holds any more. Call with every live view's pin in place.
    pub fn release_dead_frames(&mut self) {
        self.core.release_dead_frames();
    }

    /// Frames not retired.
    pub fn usable_frames(&self) -> usize {
        self.core.usable_frames()
    }

    /// Checks the cache's invariants: the core's (lists, counts, exact reference counts, the
    /// budget; see `CacheCore::check_invariants`) and the transaction's (every undo copy
    /// belongs to a resident object marked modified, and only those are marked; every created
    /// object is resident and marked created). It walks everything: for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.core.check_invariants()?;
        self.check_transaction()
    }

    /// Where the budget goes now (a walk of every frame: for reports).
    pub fn occupancy(&self) -> crate::core::Occupancy {
        self.core.occupancy()
    }

    /// Counters.
    /// Prefetched pages used and evicted unused so far ([`CoreStats`]'s `prefetched_used`
    /// and `prefetched_unused`), without building the whole [`CacheStats`].
    pub fn prefetch_outcomes(&self) -> (u64, u64) {
        (self.core.stats.prefetched_used, self.core.stats.prefetched_unused)
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            core: self.core.stats,
            replacement: with_manager!(&self.manager, m => m.stats()),
            replacement_time: Duration::from_nanos(self.replacement_ns),
            usage_time: Duration::from_nanos(self.timer.usage_ns()),
            compaction_time: Duration::from_nanos(self.timer.compaction_ns()),
            spill: self.spill_stats(),
            entries: self.core.live_entries(),
            memory_bytes: self.core.memory_bytes(),
            usable_frames: self.core.usable_frames(),
        }
    }
}
