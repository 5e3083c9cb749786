//! The machinery every client cache manager shares: frames, the indirection table, lazy
//! installation and swizzling, pins, modified and created objects, and the memory budget.
//!
//! Everything here is private to thor-cache: the client library reaches it only through
//! [`ClientCache`](crate::ClientCache)'s methods, so the invariants below are the cache's to
//! keep (and [`CacheCore::check_invariants`] checks them).
//!
//! ```text
//!   Ref (entry index, oref) ──► indirection table ──► entry { oref, loc, refs, usage, flags }
//!                                                              │ loc = byte offset in the arena
//!                                                              ▼
//!   arena:  [ frame 0: intact page 17 ][ frame 1: compacted ][ frame 2: free ] ...
//! ```
//!
//! # Indirection and lazy installation
//!
//! Applications and swizzled references name objects by their *entry* in the indirection table;
//! the entry says where the object is. Objects are installed lazily: a fetched page is copied into
//! a frame and nothing else happens until a reference to one of its objects is followed. Then the
//! object gets an entry (if it has none), its location is recorded, and its shape is checked
//! against its class once.
//!
//! That check is where untrusted bytes become trusted ones. A page comes from the server and
//! may be anything; `PageView::parse` checks its header and offset table when it is copied in,
//! and installation checks each object before anything reads it as an object: its class word
//! must be the oref of a stored object, its size must be what its class and count say, and each
//! reference word must be null or an even oref naming a page. A word with the spare bit set
//! would otherwise be taken for a swizzled reference, an index into the indirection table. A
//! malformed object is a [`CacheError::MalformedPage`] naming the page and the byte, and is not
//! installed; nothing of it is used.
//!
//! References inside cached objects are swizzled lazily and in place: the first time a reference
//! field is read, its oref is replaced by the target's entry index with the oref's spare bit
//! set, and the target entry's reference count goes up.
//!
//! # Reference counts
//!
//! An entry's `refs` counts swizzled words pointing at it. When an object leaves the cache its
//! swizzled words are scanned and the counts of their targets go down; an entry that is neither
//! resident nor referenced is freed. Counts saturate at `u16::MAX` (such entries are never freed:
//! a bounded leak, not a dangling index). Application handles are not counted: a handle carries
//! the oref it was made for and is checked against the entry on every use, so a freed or reused
//! entry is detected and the handle falls back to a lookup by oref.
//!
//! # Created objects
//!
//! Objects created by the current transaction live in frames of kind `New`, with an entry whose
//! oref is a tagged serial number (unique in the session) until the commit assigns their orefs.
//! The transaction's bookkeeping around them (which objects it created and modified, the undo
//! copies, commit and abort) is [`crate::txn`]'s.
//!
//! # The budget
//!
//! The configured size covers the frames *and* the tables (indirection table, oref index, frame
//! table). When the tables grow, frames are retired so that the sum stays within the budget; a
//! retired frame holds nothing, and is used again once the tables shrink (a large transaction's
//! read set and spill positions go when it ends).

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, RawRef, builtin};

use crate::arena::Arena;
use crate::demote::DemoteBuffer;
use crate::error::CacheError;
use crate::limits::{ENTRY_STEP_MAX, ENTRY_STEP_MIN, MIN_FRAMES, RELEASES_RETAINED, RENAMES_MAX};
use crate::lists::FrameLists;
use crate::orefindex::{OrefIndex, Vacant};
use crate::readset::ReadSet;

/// `Entry::loc` of an object that is not in the cache.
pub const NOT_RESIDENT: u32 = u32::MAX;
/// The null link.
pub const NIL: u32 = u32::MAX;

/// Entry flag: the object was modified by the current transaction (no-steal: it stays).
pub const F_MODIFIED: u8 = 1;
/// Entry flag: the object was read by the current transaction (it is in the read set).
pub const F_READ: u8 = 2;
/// Entry flag: the object was created by the current transaction and has no oref yet.
pub const F_NEW: u8 = 4;
/// Entry flag: the entry is allocated.
pub const F_LIVE: u8 = 8;
/// Entry flag: the slow path is resolving this entry (its page may be fetched and frames freed
/// meanwhile), so the entry must not be freed even if nothing else keeps it.
pub const F_RESOLVING: u8 = 16;
/// Entry flag: the object, modified or created by the current transaction, was stolen to the
/// spill store during it ([`crate::spill`]). While it is not resident its bytes are in the
/// store and `Entry::link` holds their position; once read back it stays marked until the
/// transaction ends, so that an abort discards it (its undo copy may name entries that were
/// freed after the steal released the object's references) and a commit stops using stale
/// page copies of it.
pub const F_SPILLED: u8 = 32;

/// The top usage bit, set on every access (see the HAC paper, section 3.2.1).
pub const USAGE_TOP: u8 = 0b1000;
/// The largest usage value.
pub const USAGE_MAX: u8 = 0b1111;

/// `USAGE_DECAY[d][u]`: usage value `u` after `d` decays (HAC's `u := (u + 1) >> 1`). Four
/// decays take every value to its floor (1, or 0 for 0), so `d` saturates at 4.
const USAGE_DECAY: [[u8; 16]; 5] = {
    let mut t = [[0u8; 16]; 5];
    let mut d = 0;
    while d < 5 {
        let mut u = 0;
        while u < 16 {
            let mut v = u as u8;
            let mut k = 0;
            while k < d {
                v = (v + 1) >> 1;
                k += 1;
            }
            t[d][u] = v;
            u += 1;
        }
        d += 1;
    }
    t
};

/// The usage value now of an entry whose stored usage byte is `stored`, in a frame decayed
/// `decays` times (mod 256).
///
/// An entry's `usage` byte holds the value in its low 4 bits and, in its high 4 bits, the
/// frame's decay count (mod 16) when the value was last written. Decaying a frame only counts
/// (`FrameMeta::decays`) and shifts the frame's histogram; each entry's value catches up when
/// it is next read. The count since the write is exact as long as it stays below 16, which HAC
/// keeps by rewriting the frame's entries on every 16th decay (`Hac::frame_usage`).
#[inline]
pub const fn usage_now(stored: u8, decays: u8) -> u8 {
    let d = (decays.wrapping_sub(stored >> 4) & 15) as usize;
    let d = if d > 4 { 4 } else { d };
    USAGE_DECAY[d][(stored & USAGE_MAX) as usize]
}

/// The usage byte of value `value` written in a frame decayed `decays` times.
#[inline]
pub const fn usage_stored(value: u8, decays: u8) -> u8 {
    (value & USAGE_MAX) | (decays << 4)
}

/// An indirection-table entry: 12 bytes. (A free entry's `oref` links the free list.)
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The object's oref (or, for a created object, a tagged serial number).
    pub oref: u32,
    /// Byte offset of the object in the arena, or [`NOT_RESIDENT`].
    pub loc: u32,
    /// Swizzled references to this entry (saturating).
    pub refs: u16,
    /// HAC usage: 4 bits of recency and frequency, and 4 bits of the frame's decay count when
    /// they were written (read it with [`usage_now`], [`CacheCore::usage`]).
    pub usage: u8,
    /// `F_*` flags.
    pub flags: u8,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 12);

impl Entry {
    const FREE: Entry = Entry { oref: 0, loc: NOT_RESIDENT, refs: 0, usage: 0, flags: 0 };
}

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Nothing; on the free list.
    Free,
    /// A page as fetched (its offset table intact).
    Intact,
    /// Objects kept from other frames, laid out one after another.
    Compacted,
    /// Objects created by the current transaction.
    New,
    /// Given up to the tables' share of the budget; never used again.
    Retired,
    /// Held by the manager for data of its own that is not objects (QuickStore's mapping
    /// objects, [`crate::paged`]): no objects, never installed from; the manager frees it.
    Meta,
    /// Held created objects of an aborted transaction while views still pinned it: its objects
    /// are gone, and the frame is freed once no view points into it
    /// ([`CacheCore::release_dead_frames`]).
    Dead,
}

/// Per-frame bookkeeping.
#[derive(Debug, Clone, Copy)]
pub struct FrameMeta {
    /// What the frame holds.
    pub kind: FrameKind,
    /// The page, for an intact frame.
    pub page: u32,
    /// Entries installed in this frame.
    pub installed: u32,
    /// Objects in the frame (installed or not).
    pub objects: u32,
    /// Bytes used from the start of the frame (compacted and new frames fill from the front).
    pub used: u32,
    /// Views currently pointing into this frame: it must not be reused or compacted.
    pub pins: u32,
    /// Modified objects in this frame: no-steal keeps them until commit or abort.
    pub modified: u32,
    /// An object of this frame was written since its page was installed: the frame's bytes
    /// are no longer the page the server sent, so it is not demoted.
    pub written: bool,
    /// The page came by prefetch (`ClientCache::install_prefetched`) and no object of it has
    /// been installed yet: counted as used at its first installation, as wasted if the frame
    /// leaves before that.
    pub prefetched: bool,
    /// The frame's installed, unmodified entries by usage value now: kept up to date wherever
    /// `installed` and `modified` change and wherever a usage changes, so that HAC computes a
    /// frame's usage without visiting its entries.
    pub by_usage: [u16; 16],
}

impl FrameMeta {
    /// An empty frame on the free list.
    pub const FREE: FrameMeta = FrameMeta {
        kind: FrameKind::Free,
        page: 0,
        installed: 0,
        objects: 0,
        used: 0,
        pins: 0,
        modified: 0,
        written: false,
        prefetched: false,
        by_usage: [0; 16],
    };

    /// Counts installed, unmodified entry `e` (of this frame, decayed `decays` times) in
    /// `by_usage`.
    #[inline]
    pub(crate) fn count_usage(&mut self, e: &Entry, decays: u8) {
        if e.flags & F_MODIFIED == 0 {
            self.by_usage[usize::from(usage_now(e.usage, decays))] += 1;
        }
    }

    /// Takes installed entry `e` (of this frame, decayed `decays` times) out of `by_usage`.
    #[inline]
    pub(crate) fn uncount_usage(&mut self, e: &Entry, decays: u8) {
        if e.flags & F_MODIFIED == 0 {
            self.by_usage[usize::from(usage_now(e.usage, decays))] -= 1;
        }
    }
}

/// Counters of the shared machinery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Pages copied into frames (one per fetch, and one per page prefetched).
    pub pages_installed: u64,
    /// Of those, pages that came by prefetch, beyond the page a fetch asked for.
    pub pages_prefetched: u64,
    /// Prefetched pages an object was installed from (used before their frame left).
    pub prefetched_used: u64,
    /// Prefetched pages whose frame left (evicted, compacted, superseded) before any object
    /// of it was installed: prefetch's waste.
    pub prefetched_unused: u64,
    /// Objects installed in the indirection table.
    pub objects_installed: u64,
    /// Reference words swizzled.
    pub swizzles: u64,
    /// Objects that left the cache.
    pub objects_discarded: u64,
    /// Entries freed.
    pub entries_freed: u64,
    /// Frames freed by replacement.
    pub frames_freed: u64,
    /// Frames retired to make room for the tables.
    pub frames_retired: u64,
    /// Retired frames used again once the tables shrank.
    pub frames_restored: u64,
    /// Objects created by transactions.
    pub objects_created: u64,
    /// Bytes of undo copies dropped to give memory back (an abort then discards the modified
    /// objects instead of restoring them).
    pub undo_bytes_dropped: u64,
    /// The most memory the cache held (usable frames and tables, as the budget counts them),
    /// sampled whenever it rebalances frames against tables. Above the budget when the tables
    /// alone leave fewer than the minimum frames (see [`CacheCore::rebalance`]), and for a
    /// moment after a steal that came before the spill positions were reserved
    /// (`spill_reserved`) or that made GOM keep its first object (its links are sized then).
    pub memory_bytes_max: u64,
}

/// Where a cache's budget goes: what [`CacheCore::occupancy`] reports, to find why a cache
/// needs more memory than the objects in use and their entries (issue 15's "bare minimum").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// The budget: frames (not retired) plus tables plus the headroom kept for their growth.
    pub budget_bytes: usize,
    /// Bytes per frame.
    pub page_bytes: usize,
    /// Frames holding a page as fetched.
    pub intact_frames: usize,
    /// Of those, frames whose page a newer copy superseded (kept for their installed objects).
    pub superseded_frames: usize,
    /// Objects in intact frames, installed or not.
    pub intact_objects: usize,
    /// Installed objects in intact frames.
    pub intact_installed: usize,
    /// Their bytes.
    pub intact_installed_bytes: usize,
    /// Frames of objects kept by compaction.
    pub compacted_frames: usize,
    /// Installed objects in compacted frames (and in frames of created objects).
    pub compacted_installed: usize,
    /// Their bytes.
    pub compacted_installed_bytes: usize,
    /// Bytes filled in compacted frames (installed objects and dead space of objects that left).
    pub compacted_used_bytes: usize,
    /// Free frames (one is kept free for the next fetch, one more freed during it).
    pub free_frames: usize,
    /// Frames given up to the tables.
    pub retired_frames: usize,
    /// Frames of created objects, mapping pages, and dead frames.
    pub other_frames: usize,
    /// Installed objects with usage 0 (not used since the primary pointer decayed them, or
    /// since their installation by the slow path without an access).
    pub installed_unused: usize,
    /// Live indirection-table entries.
    pub entries: usize,
    /// Bytes of the indirection table (its capacity).
    pub entry_bytes: usize,
    /// Bytes of the oref index.
    pub index_bytes: usize,
    /// Bytes of the read set.
    pub read_set_bytes: usize,
    /// Bytes of the manager's own tables.
    pub manager_bytes: usize,
    /// Bytes of all tables ([`CacheCore::table_bytes`]).
    pub table_bytes: usize,
    /// Bytes kept free in the budget for the tables' next growth.
    pub headroom_bytes: usize,
}

impl Occupancy {
    /// Installed objects' bytes plus 16 bytes of entry each: what an ideal cache of these
    /// objects would need.
    pub fn bare_minimum_bytes(&self) -> usize {
        self.intact_installed_bytes
            + self.compacted_installed_bytes
            + (self.intact_installed + self.compacted_installed) * std::mem::size_of::<Entry>()
    }
}

/// Where the slow path of an access got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The object is in the cache at this location.
    Resident(u32),
    /// Its page must be fetched.
    Page(PageId),
    /// Its class must be loaded (the class object's oref).
    Class(Oref),
    /// Its page is resident but does not hold it: the cached page predates the object (created
    /// by a commit since it was fetched). Fetch the page again; if the new copy lacks it too,
    /// the object does not exist.
    Stale(PageId),
}

/// See the module documentation.
#[derive(Debug)]
pub struct CacheCore {
    /// The frames.
    pub(crate) arena: Arena,
    /// Bytes per page and frame.
    pub(crate) page_size: usize,
    /// log2(page_size).
    shift: u32,
    /// Per-frame bookkeeping, indexed by frame.
    pub(crate) frames: Vec<FrameMeta>,
    /// Per frame, the times HAC's primary pointer decayed its objects (mod 256; see
    /// [`usage_now`]). Apart from [`FrameMeta`] because the hit path reads it on every access
    /// (HAC's `touch`): a byte per frame stays in the processor's nearest cache where the
    /// frame table's 60 bytes per frame did not. Any value is a valid start (entries store
    /// usage relative to it), so freeing a frame leaves it as it is.
    pub(crate) decays: Vec<u8>,
    /// Per frame, the entries installed in it ([`FrameLists`]: blocks of indices, so that
    /// replacement's visits of a frame's entries overlap their cache misses).
    pub(crate) installed: FrameLists,
    /// Free frames.
    pub(crate) free: Vec<u32>,
    /// The indirection table. Its allocation is reserved once for as many entries as the
    /// whole budget could hold ([`reserve_table`]): memory that is never touched is never
    /// backed by the kernel, and growing the table within it never copies it (a `realloc` of a
    /// table on the allocator's heap copied it whole at every step: 6% of a cold OO7 T1).
    pub(crate) entries: Vec<Entry>,
    /// The table's capacity as the budget counts it: grows in [`CacheCore::entry_step`]s as
    /// the table fills, whatever the reservation behind it.
    entries_counted: usize,
    /// Head of the free-entry list.
    free_entry: u32,
    /// Allocated entries.
    live_entries: usize,
    /// oref word (or tagged serial) → entry.
    index: OrefIndex,
    /// Resident intact pages → frame.
    pages: FxHashMap<u32, u32>,
    /// The page [`CacheCore::locate`] found last and its frame (page 0: none): installing a
    /// page's objects looks the same page up again and again.
    last_page: std::cell::Cell<(u32, u32)>,
    /// The class [`CacheCore::locate`] checked an object against last, likewise.
    last_class: Option<(u32, Arc<ClassDesc>)>,
    /// Class oref → descriptor, for shape checks and reference scans.
    classes: FxHashMap<u32, Arc<ClassDesc>>,
    /// Entries read by the current transaction.
    pub(crate) reads: ReadSet,
    /// The frame created objects are being put in, or [`NIL`].
    pub(crate) new_frame: u32,
    /// Next serial number for a created object.
    next_serial: u32,
    /// Serial → oref of created objects after their commit, oldest first in `rename_order`.
    renames: FxHashMap<u32, u32>,
    /// Order of `renames`, for bounding it.
    rename_order: VecDeque<u32>,
    /// The memory budget (frames plus tables).
    budget_bytes: usize,
    /// Bytes of the manager's own tables (candidate set, LRU list), reported by the manager so
    /// that the budget covers them like the indirection table.
    manager_bytes: usize,
    /// Entries whose reference counts [`CacheCore::store_ref`] will decrement when the
    /// transaction ends (one element per overwritten swizzled word).
    ///
    /// Outside the budget, like the undo copies: both are the transaction's record of what
    /// to do at its end, and both grow with its writes to resident objects, where no frame
    /// can be freed to make room (a transaction that clears a thousand references would
    /// otherwise push the cache past its budget until its next slow path). The transaction's
    /// own stores bound it, 4 bytes each; its allocation beyond [`RELEASES_RETAINED`] is given
    /// back when the transaction ends.
    deferred_releases: Vec<u32>,
    /// Invalidated objects that could not leave the cache yet (modified by the current
    /// transaction, or in a pinned frame); see [`CacheCore::invalidate`].
    /// Entries and the oref each was invalidated for (an entry may be freed and reused for
    /// another object meanwhile).
    pending_invalid: Vec<(u32, u32)>,
    /// Invalidations applied (the object left the cache, or was not in it), waiting for the
    /// client library to acknowledge them to the server ([`CacheCore::take_acks`]). Outside the
    /// budget, like the undo copies: at most the invalidations received since the last request.
    acks: Vec<Oref>,
    /// Pages of which nothing may be cached any more, waiting to be reported to the server
    /// ([`CacheCore::take_discarded`] checks again before reporting: a page may have come
    /// back). Outside the budget: at most the pages dropped between two requests.
    discarded: Vec<u32>,
    /// Discarded pages the current transaction read an object of: not reported before it ends
    /// ([`CacheCore::take_discarded`]), and kept apart so that each request does not check
    /// them again (a long transaction holds thousands). Back in `discarded` when the
    /// transaction ends. At most a few times the pages of the read set: deduplicated when it
    /// grows past that.
    discarded_held: Vec<u32>,
    /// Frames not retired.
    usable_frames: usize,
    /// Retired frames, the last retired on top: what comes back when the tables shrink.
    retired: Vec<u32>,
    /// Dead frames waiting for their views to go.
    dead: Vec<u32>,
    /// Reused buffer for the targets of an object's swizzled references (eviction is on the
    /// replacement path, so it must not allocate per object).
    ref_scratch: Vec<u32>,
    /// Reused buffer for the entries of a frame being evicted.
    list_scratch: Vec<u32>,
    /// The targets of the swizzled references of the objects discarded since the last
    /// [`CacheCore::end_discards`], and those objects' entries ([`CacheCore::discard_batched`]).
    /// At most a frame's worth: a page of reference words, and its objects.
    batch_targets: Vec<u32>,
    batch_dropped: Vec<u32>,
    /// While a transaction spills: per entry, its record's position in the spill store, or
    /// [`NIL`] ([`crate::spill`]). Empty otherwise.
    spill_pos: Vec<u32>,
    /// Spilling is on (the client cache has a spill store): a transaction that writes may
    /// steal, and then needs `spill_pos`.
    pub(crate) spill_possible: bool,
    /// Bytes of the objects the current transaction modified or created (as first written
    /// or made), while spilling is on; zeroed when it ends.
    txn_own_bytes: usize,
    /// Spilling is on and the transaction's own objects take half of the frames: the
    /// headroom keeps room for `spill_pos` at its full size, so that a first steal (which
    /// happens exactly when nothing else can be freed) does not take the cache past its
    /// budget. Not from the first write: the table is 4 bytes for every entry, and a
    /// transaction that writes a little would pay for it in frames (T2b on medium at 24 MiB:
    /// a third more fetches). A transaction that steals before reserving (its own objects
    /// under half the frames, the rest pinned) goes past the budget by the table until its
    /// next replacement. Cleared when the transaction ends
    /// ([`CacheCore::clear_spill_positions`]).
    spill_reserved: bool,
    /// Pages dropped intact, held for demotion (off unless the server takes demotions).
    pub(crate) demote: DemoteBuffer,
    /// Counters.
    pub(crate) stats: CoreStats,
}

/// An empty vector with room reserved for `n` elements, or less if the system refuses that
/// much address space (then it grows by reallocation beyond what it got). The reservation is
/// address space, not memory: the allocator maps large blocks without touching them, so only
/// the elements written are backed, and those are what the budget counts. (Under strict
/// overcommit, `vm.overcommit_memory = 2`, the reservation does count against the commit
/// limit: the entry table's and the list pool's are each about the budget's size. A refused
/// reservation is halved until one is granted.)
pub(crate) fn reserve_table<T>(n: usize) -> Vec<T> {
    let mut v = Vec::new();
    let mut n = n;
    while n > 0 && v.try_reserve_exact(n).is_err() {
        n /= 2;
    }
    v
}

impl CacheCore {
    /// A cache of `budget_bytes` (frames and tables) over pages of `page_size` bytes.
    pub(crate) fn new(budget_bytes: usize, page_size: usize) -> Result<CacheCore, CacheError> {
        if !thor_core::limits::is_valid_page_size(page_size) {
            return Err(CacheError::BadConfig(format!("invalid page size {page_size}")));
        }
        let frames = budget_bytes / page_size;
        if frames < MIN_FRAMES + 1 {
            return Err(CacheError::BadConfig(format!(
                "a cache of {budget_bytes} bytes holds fewer than {} pages of {page_size} bytes",
                MIN_FRAMES + 1
            )));
        }
        if budget_bytes > u32::MAX as usize {
            return Err(CacheError::BadConfig("cache budget above 4 GiB".into()));
        }
        let mut c = CacheCore {
            arena: Arena::new(frames, page_size),
            page_size,
            shift: page_size.trailing_zeros(),
            frames: vec![FrameMeta::FREE; frames],
            decays: vec![0; frames],
            installed: FrameLists::new(frames, budget_bytes),
            free: (0..frames as u32).rev().collect(),
            entries: reserve_table(budget_bytes / std::mem::size_of::<Entry>()),
            entries_counted: 0,
            free_entry: NIL,
            live_entries: 0,
            index: OrefIndex::new(),
            // At most one page per frame: never grows.
            pages: FxHashMap::with_capacity_and_hasher(frames, Default::default()),
            last_page: std::cell::Cell::new((0, 0)),
            last_class: None,
            classes: FxHashMap::default(),
            reads: ReadSet::new(),
            new_frame: NIL,
            next_serial: 0,
            renames: FxHashMap::default(),
            rename_order: VecDeque::new(),
            budget_bytes,
            manager_bytes: 0,
            deferred_releases: Vec::new(),
            pending_invalid: Vec::new(),
            acks: Vec::new(),
            discarded: Vec::new(),
            discarded_held: Vec::new(),
            usable_frames: frames,
            retired: Vec::with_capacity(frames),
            dead: Vec::new(),
            ref_scratch: Vec::new(),
            list_scratch: Vec::new(),
            batch_targets: Vec::new(),
            batch_dropped: Vec::new(),
            spill_pos: Vec::new(),
            spill_possible: false,
            txn_own_bytes: 0,
            spill_reserved: false,
            demote: DemoteBuffer::default(),
            stats: CoreStats::default(),
        };
        for (oref, desc) in builtin::classes() {
            c.classes.insert(oref.raw(), Arc::new(desc.clone()));
        }
        c.rebalance();
        Ok(c)
    }

    /// The frame holding arena offset `loc`.
    #[inline]
    pub(crate) fn frame_of(&self, loc: u32) -> u32 {
        loc >> self.shift
    }

    /// Byte offset of frame `f`.
    #[inline]
    pub(crate) fn frame_base(&self, f: u32) -> usize {
        (f as usize) << self.shift
    }

    /// Bytes of memory the tables use now.
    pub fn table_bytes(&self) -> usize {
        self.entries_counted * std::mem::size_of::<Entry>()
            + self.index.memory_bytes()
            + self.pages.capacity() * 9
            + self.frames.capacity() * std::mem::size_of::<FrameMeta>()
            + self.decays.capacity()
            + self.retired.capacity() * 4
            + self.installed.memory_bytes()
            + self.spill_pos.capacity() * 4
            + self.renames.capacity() * 9
            + self.rename_order.capacity() * 4
            + self.reads.memory_bytes()
            + self.pending_invalid.capacity() * 8
            + self.manager_bytes
    }

    /// Where the budget goes now, frame by frame and table by table (see [`Occupancy`]).
    /// A walk of every frame's installed list: for reports, not for the hit path.
    pub fn occupancy(&self) -> Occupancy {
        let mut o = Occupancy {
            budget_bytes: self.budget_bytes,
            page_bytes: self.page_size,
            entries: self.live_entries,
            entry_bytes: self.entries_counted * std::mem::size_of::<Entry>(),
            index_bytes: self.index.memory_bytes(),
            read_set_bytes: self.reads.memory_bytes(),
            table_bytes: self.table_bytes(),
            manager_bytes: self.manager_bytes,
            headroom_bytes: self.headroom_bytes(),
            ..Occupancy::default()
        };
        for (f, fm) in self.frames.iter().enumerate() {
            let mut bytes = 0;
            for i in self.installed.iter(f as u32) {
                let e = self.entries[i as usize];
                bytes += self.object_size(e.loc);
                if usage_now(e.usage, self.decays[f]) == 0 {
                    o.installed_unused += 1;
                }
            }
            let fm_installed = fm.installed as usize;
            match fm.kind {
                FrameKind::Intact => {
                    o.intact_frames += 1;
                    o.intact_objects += fm.objects as usize;
                    o.intact_installed += fm_installed;
                    o.intact_installed_bytes += bytes;
                    if self.pages.get(&fm.page) != Some(&(f as u32)) {
                        o.superseded_frames += 1;
                    }
                }
                FrameKind::Compacted => {
                    o.compacted_frames += 1;
                    o.compacted_installed += fm_installed;
                    o.compacted_installed_bytes += bytes;
                    o.compacted_used_bytes += fm.used as usize;
                }
                FrameKind::New => {
                    o.other_frames += 1;
                    o.compacted_installed += fm_installed;
                    o.compacted_installed_bytes += bytes;
                }
                FrameKind::Free => o.free_frames += 1,
                FrameKind::Retired => o.retired_frames += 1,
                FrameKind::Meta | FrameKind::Dead => o.other_frames += 1,
            }
        }
        o
    }

    /// Records the size of the manager's tables, so the budget covers them. Call
    /// [`CacheCore::rebalance`] afterwards.
    pub(crate) fn set_manager_bytes(&mut self, bytes: usize) {
        self.manager_bytes = bytes;
    }

    /// Frames in use or available (not retired).
    pub fn usable_frames(&self) -> usize {
        self.usable_frames
    }

    /// The configured budget.
    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// Frames plus tables: what the budget bounds.
    pub fn memory_bytes(&self) -> usize {
        self.usable_frames * self.page_size + self.table_bytes()
    }

    /// Frames the tables' share of the budget still allows, keeping room for the next growth
    /// of the tables that grow between two chances to free frames.
    fn frames_allowed(&self) -> usize {
        self.frames_allowed_beside(self.table_bytes())
    }

    /// [`CacheCore::frames_allowed`] beside tables of `tables` bytes.
    fn frames_allowed_beside(&self, tables: usize) -> usize {
        self.budget_bytes.saturating_sub(tables + self.headroom_bytes()) >> self.shift
    }

    /// Entries the indirection table grows by when full: a quarter of its size, bounded so
    /// that the budget's share moves smoothly.
    fn entry_step(&self) -> usize {
        (self.entries_counted / 4).clamp(ENTRY_STEP_MIN, ENTRY_STEP_MAX)
    }

    /// The indirection table's capacity as the budget counts it.
    #[inline]
    pub(crate) fn entry_capacity(&self) -> usize {
        self.entries_counted
    }

    /// Memory kept in reserve for the next growth of the tables that can grow when the cache
    /// cannot free a frame: the indirection table and oref index (swizzling a reference allocates
    /// an entry) and the read set (the hit path appends to it). Growth is then covered by the
    /// reserve, so the budget holds at every moment; [`CacheCore::rebalance`], run after each
    /// allocation and by the client cache on its slow path, restores the reserve.
    fn headroom_bytes(&self) -> usize {
        // The index grows by at most a directory and its maps; the read set doubles; the
        // installed lists' pool by a
        // thirty-second.
        self.entry_step() * std::mem::size_of::<Entry>()
            + self.index.growth_bytes()
            + self.reads.growth_bytes()
            + self.installed.growth_bytes()
            + self.spill_reserve_bytes()
    }

    /// What a steal may still add to the spill positions: the table at the entry table's
    /// size after its next growth step, less what it holds. Zero until the transaction's own
    /// objects took half of the frames (`spill_reserved`).
    fn spill_reserve_bytes(&self) -> usize {
        if !self.spill_reserved {
            return 0;
        }
        ((self.entries_counted + self.entry_step()) * 4)
            .saturating_sub(self.spill_pos.capacity() * 4)
    }

    /// The transaction now holds `size` more bytes that no frame can give up (an object
    /// modified or created): with spilling on, once they take half of the frames, reserve the
    /// spill positions' room from then on.
    #[inline]
    fn own_bytes_grew(&mut self, size: usize) {
        if self.spill_possible && !self.spill_reserved {
            self.txn_own_bytes += size;
            if self.txn_own_bytes * 2 >= self.usable_frames * self.page_size {
                self.spill_reserved = true;
            }
        }
    }

    /// Retires free frames while the tables push the total over the budget. Returns how many
    /// more frames must be retired once they are freed (the caller asks replacement for them).
    pub(crate) fn rebalance(&mut self) -> usize {
        let tables = self.table_bytes();
        let allowed = self.frames_allowed_beside(tables).max(MIN_FRAMES);
        while self.usable_frames > allowed {
            let Some(f) = self.free.pop() else { break };
            self.frames[f as usize] = FrameMeta { kind: FrameKind::Retired, ..FrameMeta::FREE };
            self.installed.clear(f);
            self.retired.push(f);
            self.usable_frames -= 1;
            self.stats.frames_retired += 1;
        }
        // The tables shrank (a large transaction's read set and spill positions went with
        // it): retired frames come back, one frame short of the share so that a table
        // growing and shrinking by a little does not retire and restore a frame each time.
        while self.usable_frames + 1 < allowed {
            let Some(f) = self.retired.pop() else { break };
            self.frames[f as usize] = FrameMeta::FREE;
            self.free.push(f);
            self.usable_frames += 1;
            self.stats.frames_restored += 1;
        }
        let held = (self.usable_frames * self.page_size + tables) as u64;
        self.stats.memory_bytes_max = self.stats.memory_bytes_max.max(held);
        self.usable_frames.saturating_sub(allowed)
    }

    // ----- entries -----

    /// The entry for `oref_word` (an oref, or a tagged serial of a created object), if any.
    #[inline]
    pub(crate) fn lookup(&self, oref_word: u32) -> Option<u32> {
        self.index.get(oref_word)
    }

    /// The entry for `oref`, allocating a non-resident one if there is none.
    pub(crate) fn entry_for(&mut self, oref: Oref) -> Result<u32, CacheError> {
        match self.index.find(oref.raw()) {
            Ok(i) => Ok(i),
            Err(vacant) => self.alloc_entry(oref.raw(), Some(vacant)),
        }
    }

    /// Allocates an entry for `oref_word` and adds it to the index (where `vacant` says, if the
    /// caller looked it up).
    fn alloc_entry(&mut self, oref_word: u32, vacant: Option<Vacant>) -> Result<u32, CacheError> {
        let entries_cap = self.entries_counted;
        let i = if self.free_entry != NIL {
            let i = self.free_entry;
            self.free_entry = self.entries[i as usize].oref;
            i
        } else {
            if self.entries.len() >= RawRef::TAG_MAX as usize {
                return Err(CacheError::TableFull);
            }
            if self.entries.len() == self.entries_counted {
                // Grow in bounded steps, covered by the headroom kept in the budget; within
                // the reservation this only counts the step.
                self.entries_counted += self.entry_step();
                let len = self.entries.len();
                if self.entries.capacity() < self.entries_counted {
                    self.entries.reserve_exact(self.entries_counted - len);
                }
            }
            self.entries.push(Entry::FREE);
            (self.entries.len() - 1) as u32
        };
        self.entries[i as usize] =
            Entry { oref: oref_word, loc: NOT_RESIDENT, refs: 0, usage: 0, flags: F_LIVE };
        let index_grew = match vacant {
            Some(v) => self.index.fill(v, i),
            None => self.index.insert(oref_word, i),
        };
        self.live_entries += 1;
        // Restore the headroom right away if a free frame can give it, when this allocation
        // used it (the table or the index grew). Otherwise the tables are as they were and
        // the next slow path rebalances for any other growth (the read set's), which the
        // headroom covers meanwhile: a rebalance per swizzle was 6-8% of conversion
        // (`cargo bench -p thor-cache --bench cache -- conversion`).
        if self.entries_counted != entries_cap || index_grew {
            self.rebalance();
        }
        Ok(i)
    }

    /// Frees entry `i` (which must be neither resident nor referenced).
    fn free_entry_at(&mut self, i: u32) {
        let e = self.entries[i as usize];
        debug_assert!(e.loc == NOT_RESIDENT && e.refs == 0);
        self.index.remove_mapped(e.oref, i);
        // A free entry is never resident and has no flags, so no handle's hit path (which
        // compares the oref and checks the location) takes it for an object.
        self.entries[i as usize] = Entry { oref: self.free_entry, ..Entry::FREE };
        self.free_entry = i;
        self.live_entries -= 1;
        self.stats.entries_freed += 1;
    }

    /// Frees entry `i` if nothing keeps it: not resident, not referenced, not created or
    /// modified by the current transaction, not being resolved by the slow path. The read set
    /// does not keep entries: it records orefs ([`ReadSet`]), so a transaction may read more
    /// objects than the cache holds.
    pub(crate) fn maybe_free_entry(&mut self, i: u32) {
        let e = self.entries[i as usize];
        if e.flags & F_LIVE != 0
            && e.loc == NOT_RESIDENT
            && e.refs == 0
            && e.flags & (F_NEW | F_MODIFIED | F_RESOLVING | F_SPILLED) == 0
        {
            self.free_entry_at(i);
        }
    }

    /// Allocated entries.
    pub fn live_entries(&self) -> usize {
        self.live_entries
    }

    // ----- classes -----

    /// Registers the descriptor of the class named by `class_word`: a class object's oref, or
    /// the tagged serial of a class object created by the current transaction.
    ///
    /// A class word keeps its first descriptor: installed objects were checked against it and
    /// their sizes are computed from it, so a different one (a server that changed a class
    /// object, which is immutable) is refused rather than letting those sizes change.
    pub(crate) fn register_class(
        &mut self,
        class_word: u32,
        desc: Arc<ClassDesc>,
    ) -> Result<(), CacheError> {
        match self.classes.get(&class_word) {
            Some(old) if **old != *desc => Err(CacheError::ClassChanged { class: class_word }),
            Some(_) => Ok(()),
            None => {
                self.classes.insert(class_word, desc);
                Ok(())
            }
        }
    }

    /// The descriptor of class `class_word`, if loaded.
    #[inline]
    pub(crate) fn class(&self, class_word: u32) -> Option<&Arc<ClassDesc>> {
        self.classes.get(&class_word)
    }

    /// The class word of the resident object at `loc`.
    #[inline]
    pub(crate) fn class_word(&self, loc: u32) -> u32 {
        self.arena.read_u32(loc as usize)
    }

    /// The size of the resident object at `loc` (its class is loaded: it was checked at
    /// installation).
    pub(crate) fn object_size(&self, loc: u32) -> usize {
        let desc =
            self.classes.get(&self.class_word(loc)).expect("installed objects have loaded classes");
        self.object_size_of(loc, desc)
    }

    /// Makes class `class_word` the memo `last_class` if it is loaded; returns whether it is.
    /// A frame's objects are mostly of a few classes, so replacement, which visits a frame's
    /// objects one after another, mostly pays no hash lookup and no reference count.
    #[inline]
    fn memo_class(&mut self, class_word: u32) -> bool {
        if matches!(&self.last_class, Some((w, _)) if *w == class_word) {
            return true;
        }
        match self.classes.get(&class_word) {
            Some(d) => {
                self.last_class = Some((class_word, d.clone()));
                true
            }
            None => false,
        }
    }

    /// [`CacheCore::object_size`] through the class memo ([`CacheCore::memo_class`]), for
    /// replacement's walks over a frame's objects.
    pub(crate) fn object_size_memo(&mut self, loc: u32) -> usize {
        if !self.memo_class(self.class_word(loc)) {
            // Not loaded: `object_size` says what is wrong (installed objects' classes are).
            return self.object_size(loc);
        }
        let (_, desc) = self.last_class.as_ref().expect("memo_class just set it");
        self.object_size_of(loc, desc)
    }

    /// [`CacheCore::object_size`] of the object at `loc` whose class `desc` the caller has.
    pub(crate) fn object_size_of(&self, loc: u32, desc: &ClassDesc) -> usize {
        let count = match desc.var() {
            thor_core::VarKind::None => 0,
            _ => self.arena.read_u32(loc as usize + desc.count_offset()) as usize,
        };
        desc.object_bytes(count)
    }

    // ----- pages and installation -----

    /// The frame holding page `page`, if resident.
    pub(crate) fn page_frame(&self, page: PageId) -> Option<u32> {
        self.pages.get(&page.get()).copied()
    }

    /// Takes a free frame.
    pub(crate) fn take_free_frame(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Copies a fetched page into free frame `f` and checks its structure. The page must not be
    /// resident already.
    pub(crate) fn install_page(
        &mut self,
        f: u32,
        page: PageId,
        bytes: &[u8],
    ) -> Result<(), CacheError> {
        let malformed = |offset: usize, why: String| CacheError::MalformedPage {
            page: page.get(),
            offset: offset as u32,
            why,
        };
        if bytes.len() != self.page_size {
            return Err(malformed(
                0,
                format!("{} bytes, not a page of {}", bytes.len(), self.page_size),
            ));
        }
        let view = PageView::parse(bytes).map_err(|e| {
            // An offset-table entry gives the place; anything else is in the header.
            let at = match e {
                thor_core::FormatError::BadOffset { offset, .. } => offset as usize,
                _ => 0,
            };
            malformed(at, e.to_string())
        })?;
        if view.page_id() != page {
            return Err(malformed(0, format!("header names page {}", view.page_id().get())));
        }
        let objects = view.object_count() as u32;
        let base = self.frame_base(f);
        self.arena.copy_in(base, bytes);
        self.frames[f as usize] = FrameMeta {
            kind: FrameKind::Intact,
            page: page.get(),
            objects,
            used: self.page_size as u32,
            ..FrameMeta::FREE
        };
        // A page fetched again (its cached copy was stale) supersedes the old frame, which
        // stays until replacement empties it: objects installed from it keep their entries.
        if let Some(old) = self.pages.insert(page.get(), f) {
            self.prefetch_left(old);
        }
        self.last_page.set((page.get(), f));
        self.demote.forget(page.get());
        self.stats.pages_installed += 1;
        Ok(())
    }

    /// Forgets that frame `f` holds its page (the frame is being emptied or compacted), unless
    /// a newer copy of the page superseded it there already.
    pub(crate) fn unmap_page(&mut self, f: u32) {
        self.prefetch_left(f);
        let fm = self.frames[f as usize];
        if fm.kind == FrameKind::Intact && self.pages.get(&fm.page) == Some(&f) {
            self.pages.remove(&fm.page);
            if self.last_page.get().0 == fm.page {
                self.last_page.set((0, 0));
            }
            self.maybe_page_gone(fm.page);
        }
    }

    // ----- what the server must be told -----

    /// One more resident object of the page `oref_word` names (nothing for a created object).
    /// The count lives in the page's directory of the oref index, which the object's entry
    /// keeps: no hash of its own ([`OrefIndex::add_resident`]).
    pub(crate) fn count_resident(&mut self, oref_word: u32) {
        if oref_word & 1 == 0 && Oref::from_raw(oref_word).and_then(|o| o.page()).is_some() {
            self.index.add_resident(oref_word);
        }
    }

    /// One resident object fewer of the page `oref_word` names.
    pub(crate) fn uncount_resident(&mut self, oref_word: u32) {
        let Some(p) = Oref::from_raw(oref_word).and_then(|o| o.page()) else { return };
        if self.index.sub_resident(oref_word) {
            self.maybe_page_gone(p.get());
        }
    }

    /// Whether anything of page `page` is cached: its intact copy is mapped (a source of
    /// installation) or an object of it is resident somewhere (in its frame, a compacted one,
    /// an older copy of the page).
    pub(crate) fn page_cached(&self, page: u32) -> bool {
        self.pages.contains_key(&page) || self.index.resident(page) > 0
    }

    /// Every page of which something is cached (see [`CacheCore::page_cached`]), in order.
    pub(crate) fn cached_pages(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.pages.keys().copied().collect();
        v.extend(self.index.resident_pages().map(|(page, _)| page));
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Every oref with an entry (objects of existing pages; not the transaction's created
    /// objects, whose keys are serials).
    pub(crate) fn entry_orefs(&self) -> Vec<Oref> {
        let mut v = Vec::with_capacity(self.index.len());
        self.index.for_each(|key, _| {
            if let Some(o) = Oref::from_raw(key).filter(|o| o.page().is_some()) {
                v.push(o);
            }
        });
        v
    }

    /// Unmaps every page copy (each stops being a source of installation).
    pub(crate) fn unmap_all_pages(&mut self) {
        let frames: Vec<u32> = self.pages.values().copied().collect();
        for f in frames {
            self.unmap_page(f);
        }
    }

    /// Forgets the acknowledgements not yet sent.
    pub(crate) fn forget_acks(&mut self) {
        self.acks.clear();
    }

    /// Whether an object of page `page` is resident anywhere (installed from the page's copy or
    /// kept elsewhere).
    pub(crate) fn has_resident_objects(&self, page: u32) -> bool {
        self.index.resident(page) > 0
    }

    fn maybe_page_gone(&mut self, page: u32) {
        if !self.page_cached(page) {
            self.discarded.push(page);
        }
    }

    /// Up to `max` pages of which nothing is cached, to report as discarded.
    ///
    /// A queued page is checked again here, since it may have come back (fetched again) after
    /// it was queued; such a page is dropped from the queue. Two kinds wait in the queue
    /// instead of being reported:
    ///
    /// - `except`, the page the request that carries the report fetches: the report must not
    ///   race with that fetch (`docs/format.md`, "Concurrency control"). If the fetch fails
    ///   the page is still not cached, and a later request reports it.
    /// - a page the current transaction read an object of. Once the server drops a page from
    ///   the client's directory it sends no invalidation for it, so a commit by another
    ///   client of an object this transaction read would go unnoticed: neither the client nor
    ///   the server's invalid-set check would see the stale read. Such a page is reported
    ///   after the transaction ends.
    pub(crate) fn take_discarded(&mut self, max: usize, except: Option<PageId>) -> Vec<PageId> {
        let mut out = Vec::new();
        if self.discarded.is_empty() {
            return out;
        }
        let mut queue = std::mem::take(&mut self.discarded);
        // A page is queued each time it may have gone; report it once.
        queue.sort_unstable();
        queue.dedup();
        let mut held = std::mem::take(&mut self.discarded_held);
        queue.retain(|&p| {
            if self.page_cached(p) {
                return false;
            }
            if self.reads.contains_page(p) {
                held.push(p);
                return false;
            }
            if Some(p) == except.map(PageId::get) || out.len() >= max {
                return true;
            }
            out.push(PageId::new(p).expect("only stored pages are queued"));
            false
        });
        if held.len() > 2 * self.reads.pages() + 64 {
            // Pages dropped, fetched and dropped again queue again: keep one each.
            held.sort_unstable();
            held.dedup();
        }
        self.discarded = queue;
        self.discarded_held = held;
        out
    }

    /// Puts back pages taken by [`CacheCore::take_discarded`] whose report was not sent; they
    /// are checked again when next taken.
    pub(crate) fn requeue_discarded(&mut self, pages: &[PageId]) {
        self.discarded.extend(pages.iter().map(|p| p.get()));
    }

    /// Up to `max` applied invalidations to acknowledge, oldest first.
    pub(crate) fn take_acks(&mut self, max: usize) -> Vec<Oref> {
        let n = self.acks.len().min(max);
        self.acks.drain(..n).collect()
    }

    /// Puts back acknowledgements taken by [`CacheCore::take_acks`] that were not sent, ahead
    /// of the others. An acknowledgement must not be lost: the server keeps an object in the
    /// invalid set until every sending of it is acknowledged, and refuses every commit that
    /// reads the object meanwhile.
    pub(crate) fn requeue_acks(&mut self, acks: Vec<Oref>) {
        let rest = std::mem::replace(&mut self.acks, acks);
        self.acks.extend(rest);
    }

    /// Where the object named `oref_word` would go back into its page: its slot, if the page is
    /// resident in an intact frame other than `except` and the slot has exactly `size` bytes.
    /// This is HAC's duplicate case (`papers/hac-sosp97.txt` section 3.1): a fetched page may
    /// hold a copy of an object that is installed elsewhere; that copy is never installed, so
    /// the slot is free for the installed copy when its own frame is compacted. A slot of
    /// another size belongs to a version of another size: the object is compacted as usual.
    pub(crate) fn home_slot(&self, oref_word: u32, size: usize, except: u32) -> Option<u32> {
        let oref = Oref::from_raw(oref_word).filter(|o| !o.is_null())?;
        let page = oref.page()?;
        let f = *self.pages.get(&page.get())?;
        if f == except {
            return None;
        }
        let view = PageView::assume_parsed(self.arena.frame(f as usize));
        let range = view.object_range(oref.oid())?;
        (range.len() == size).then(|| (self.frame_base(f) + range.start) as u32)
    }

    /// After the commit of a new version of resident object `i`: if its page is resident in
    /// another frame (the duplicate case), that frame's uninstalled copy is now older than the
    /// committed version, and would be installed if the object left the cache. Write the new
    /// version into the page's slot, with its references unswizzled (uninstalled copies hold
    /// orefs; their swizzled words would not be counted), or if the slot has another size, stop
    /// using the page copy for installation.
    pub(crate) fn refresh_page_copy(&mut self, i: u32) {
        let e = self.entries[i as usize];
        let Some(oref) = Oref::from_raw(e.oref).filter(|o| !o.is_null()) else { return };
        let Some(page) = oref.page() else { return };
        if e.loc == NOT_RESIDENT {
            return;
        }
        let Some(&g) = self.pages.get(&page.get()) else { return };
        if g == self.frame_of(e.loc) {
            return;
        }
        let size = self.object_size(e.loc);
        let slot = {
            let view = PageView::assume_parsed(self.arena.frame(g as usize));
            view.object_range(oref.oid())
        };
        match slot {
            Some(r) if r.len() == size => {
                let to = self.frame_base(g) + r.start;
                self.arena.move_within(e.loc as usize, to, size);
                let Some(desc) = self.classes.get(&self.class_word(e.loc)).cloned() else { return };
                let mut offs = Vec::new();
                desc.for_each_ref_offset(self.arena.bytes(to, size), |off| offs.push(off));
                for off in offs {
                    let w = self.ref_word(e.loc, off);
                    self.arena.write_u32(to + off, w);
                }
            }
            // No slot (the page predates the object) or one of another size: the page copy
            // cannot stand in for the object.
            _ => self.unmap_page(g),
        }
    }

    /// Moves resident object `i` of `size` bytes to arena offset `to` and links it into the
    /// destination frame's installed list: into the free space at the end of a compacted frame
    /// (`to` is its `used` mark), into its slot in its resident page ([`CacheCore::home_slot`]),
    /// or lower in its own frame when that frame is compacted in place. The bytes move as they
    /// are, swizzled words included, so no reference count changes. The destination's
    /// `installed` and `modified` counts follow the object, and for a compacted destination
    /// `objects` and `used` too; the source frame's list and counts are the caller's business
    /// (compaction detaches the whole list first). The object keeps its usage value, read
    /// against the source frame's decay count, which must still be the one the entry was
    /// written under (a frame compacted in place keeps its count). The object must not be
    /// pinned: views point at it.
    pub(crate) fn move_object(&mut self, i: u32, to: u32, size: usize) {
        let from = self.entries[i as usize].loc;
        debug_assert_ne!(from, NOT_RESIDENT);
        if from != to {
            self.arena.move_within(from as usize, to as usize, size);
        }
        let value =
            usage_now(self.entries[i as usize].usage, self.decays[self.frame_of(from) as usize]);
        let f = self.frame_of(to);
        let base = self.frame_base(f);
        let fm = &mut self.frames[f as usize];
        let decays = self.decays[f as usize];
        let e = &mut self.entries[i as usize];
        e.loc = to;
        e.usage = usage_stored(value, decays);
        fm.installed += 1;
        if e.flags & F_MODIFIED != 0 {
            fm.modified += 1;
        }
        fm.count_usage(e, decays);
        if fm.kind == FrameKind::Compacted {
            debug_assert_eq!(to as usize, base + fm.used as usize, "appends go at the end");
            debug_assert!(fm.used as usize + size <= self.page_size, "the object fits");
            fm.objects += 1;
            fm.used += size as u32;
        }
        self.link_installed(f, i);
    }

    /// Adds entry `i` to frame `f`'s installed list (the caller counts it in the frame's meta).
    #[inline]
    fn link_installed(&mut self, f: u32, i: u32) {
        if self.installed.push(f, i) {
            // Covered by the headroom until now; retire frames if the tables outgrew their share.
            self.rebalance();
        }
    }

    /// Empties frame `f`'s installed list into `out` as `(location, entry)` pairs and zeroes
    /// its counts (`installed`, `modified`, `by_usage`); the caller moves or discards every
    /// entry.
    pub(crate) fn detach_installed(&mut self, f: u32, out: &mut Vec<(u32, u32)>) {
        let entries = &self.entries;
        out.extend(self.installed.iter(f).map(|i| (entries[i as usize].loc, i)));
        self.installed.clear(f);
        let fm = &mut self.frames[f as usize];
        fm.installed = 0;
        fm.modified = 0;
        fm.by_usage = [0; 16];
    }

    /// The server says object `oref` has a newer committed version than the cached one (an
    /// invalidation). Three things follow:
    ///
    /// - its page, if resident, stops being a source of lazy installation: the next access to
    ///   one of its uninstalled objects fetches the page again, with the new version;
    /// - its usage drops to 0, so it goes at its frame's next compaction (HAC paper, section
    ///   3.2.1: "we set the usage of invalid objects to 0");
    /// - if it is resident, neither modified by the current transaction nor in a pinned frame,
    ///   it leaves the cache now: its entry stops pointing at it (the next access fetches the
    ///   new version) and its bytes become dead space in its frame, counted as an object of
    ///   usage 0 until that frame is compacted or evicted. Otherwise it leaves at the end of the
    ///   transaction ([`CacheCore::retry_invalidations`]); the transaction that read it is
    ///   doomed anyway.
    ///
    /// Returns whether the object left the cache now.
    ///
    /// The invalidation is queued for acknowledgement ([`CacheCore::take_acks`]) once it is
    /// applied: now, or when the object finally leaves. Until then the server keeps it in the
    /// client's invalid set and refuses any commit that reads the stale copy.
    pub(crate) fn invalidate(&mut self, oref: Oref) -> bool {
        self.unmap_page_of(oref);
        let Some(i) = self.lookup(oref.raw()) else {
            self.acks.push(oref);
            return false;
        };
        self.set_usage(i, 0);
        if self.entries[i as usize].loc == NOT_RESIDENT {
            self.acks.push(oref);
            return false;
        }
        if self.evict_invalid(i, false) {
            self.acks.push(oref);
            return true;
        }
        self.pending_invalid.push((i, oref.raw()));
        false
    }

    /// Stops using the resident copy of `oref`'s page as a source of installation.
    pub(crate) fn unmap_page_of(&mut self, oref: Oref) {
        if let Some(&f) = oref.page().and_then(|p| self.pages.get(&p.get())) {
            self.unmap_page(f);
        }
    }

    /// Evicts the object of entry `i` (invalidated, or modified by an aborted transaction whose
    /// undo copy is gone) if nothing holds it in place: not modified or created by the current
    /// transaction, and, unless `force`, not in a pinned frame. Its bytes stay where they are
    /// as dead space, so forcing past a pin leaves a view reading the bytes it read before.
    pub(crate) fn evict_invalid(&mut self, i: u32, force: bool) -> bool {
        let e = self.entries[i as usize];
        if e.loc == NOT_RESIDENT {
            return true;
        }
        let f = self.frame_of(e.loc);
        if e.flags & (F_MODIFIED | F_NEW) != 0 || (!force && self.frames[f as usize].pins > 0) {
            return false;
        }
        // A walk of the frame's list: invalidations are rare.
        self.unlink_installed(i);
        self.discard(i);
        true
    }

    /// Steals resident entry `i`, modified or created by the current transaction, whose record
    /// is at `pos` in the spill store ([`crate::spill`]): its references are released as when
    /// any object leaves, and the entry stays (the transaction's marks keep it), its record's
    /// position in [`CacheCore::spill_position`]. The caller fixes the frame's list and counts.
    pub(crate) fn steal(&mut self, i: u32, pos: u32) {
        let loc = self.entries[i as usize].loc;
        debug_assert_ne!(loc, NOT_RESIDENT);
        self.release_refs(loc);
        if self.spill_pos.len() <= i as usize {
            // Sized to the table's capacity, exactly (no doubling slack): counted in the
            // tables while the transaction spills, and given back when it ends
            // (`clear_spill_positions`).
            let n = self.entries_counted;
            self.spill_pos.reserve_exact(n - self.spill_pos.len());
            self.spill_pos.resize(n, NIL);
        }
        self.spill_pos[i as usize] = pos;
        let e = &mut self.entries[i as usize];
        debug_assert!(e.flags & (F_MODIFIED | F_NEW) != 0, "only the transaction's objects");
        e.loc = NOT_RESIDENT;
        e.usage = 0;
        e.flags |= F_SPILLED;
        let (oref, new) = (e.oref, e.flags & F_NEW != 0);
        if !new {
            self.uncount_resident(oref);
        }
    }

    /// Puts stolen entry `i`, read back to `loc` (room from [`CacheCore::new_object_room`], its
    /// bytes copied there), into the frame of created objects.
    pub(crate) fn place_read_back(&mut self, i: u32, loc: u32, size: usize) {
        let f = self.frame_of(loc);
        let fm = &mut self.frames[f as usize];
        let decays = self.decays[f as usize];
        debug_assert_eq!(fm.kind, FrameKind::New);
        fm.used += size as u32;
        fm.objects += 1;
        fm.installed += 1;
        let e = &mut self.entries[i as usize];
        e.loc = loc;
        // Reading it back is an access.
        e.usage = usage_stored(USAGE_TOP, decays);
        if e.flags & F_MODIFIED != 0 {
            fm.modified += 1;
            fm.written = true;
        }
        fm.count_usage(e, decays);
        let (oref, new) = (e.oref, e.flags & F_NEW != 0);
        self.link_installed(f, i);
        if !new {
            self.count_resident(oref);
        }
    }

    /// Where stolen entry `i`'s record is in the spill store (in its units), if it was stolen
    /// in this transaction.
    pub(crate) fn spill_position(&self, i: u32) -> Option<u32> {
        self.spill_pos.get(i as usize).copied().filter(|&p| p != NIL)
    }

    /// Forgets the spill positions (the transaction ended, its store emptied).
    pub(crate) fn clear_spill_positions(&mut self) {
        self.spill_pos = Vec::new();
        self.txn_own_bytes = 0;
        self.spill_reserved = false;
    }

    /// The frame holding page `page` (a raw page id) as its source of installation.
    pub(crate) fn page_frame_raw(&self, page: u32) -> Option<u32> {
        self.pages.get(&page).copied()
    }

    /// Takes resident entry `i` out of its frame's installed list, fixing the frame's
    /// `installed` and `modified` counts (the entry keeps its location: the caller moves or
    /// discards it next). A walk of the list, so for paths that touch one object of a frame
    /// now and then (invalidations; GOM's object buffer).
    pub(crate) fn unlink_installed(&mut self, i: u32) {
        let f = self.frame_of(self.entries[i as usize].loc);
        let found = self.installed.remove(f, i);
        debug_assert!(found, "a resident entry is in its frame's list");
        let fm = &mut self.frames[f as usize];
        fm.installed -= 1;
        if self.entries[i as usize].flags & F_MODIFIED != 0 {
            fm.modified -= 1;
        }
        fm.uncount_usage(&self.entries[i as usize], self.decays[f as usize]);
    }

    /// At the end of a transaction: evicts the invalidated objects that had to stay (see
    /// [`CacheCore::invalidate`]) and are free to go now.
    pub(crate) fn retry_invalidations(&mut self) {
        let mut pending = std::mem::take(&mut self.pending_invalid);
        pending.retain(|&(i, oref)| {
            let e = self.entries[i as usize];
            let stays = e.flags & F_LIVE != 0 && e.oref == oref && !self.evict_invalid(i, false);
            if !stays {
                // Gone now (or gone before, with its entry): applied.
                self.acks.push(Oref::from_raw(oref).expect("stored orefs are invalidated"));
            }
            stays
        });
        self.pending_invalid = pending;
    }

    /// Slow path of an access to entry `i`: where the object is, or what is missing.
    pub(crate) fn locate(&mut self, i: u32) -> Result<Need, CacheError> {
        let e = self.entries[i as usize];
        if e.loc != NOT_RESIDENT {
            return Ok(Need::Resident(e.loc));
        }
        if e.flags & F_NEW != 0 {
            return Err(CacheError::Internal("created object not resident"));
        }
        let oref =
            Oref::from_raw(e.oref).ok_or(CacheError::Internal("tagged oref on a stored entry"))?;
        let page = oref.page().ok_or(CacheError::Internal("null oref in the table"))?;
        let f = match self.last_page.get() {
            (p, f) if p == page.get() => f,
            _ => {
                let Some(&f) = self.pages.get(&page.get()) else {
                    return Ok(Need::Page(page));
                };
                self.last_page.set((page.get(), f));
                f
            }
        };
        let base = self.frame_base(f);
        let range = {
            let view = PageView::assume_parsed(self.arena.frame(f as usize));
            match view.object_range(oref.oid()) {
                Some(r) => r,
                None => return Ok(Need::Stale(page)),
            }
        };
        let obj = self.arena.bytes(base + range.start, range.len());
        let malformed = |at: usize, why: &str| CacheError::MalformedPage {
            page: page.get(),
            offset: (range.start + at) as u32,
            why: format!("object {oref:?}: {why}"),
        };
        // The bytes are the server's, untrusted: before the object is installed (and so before
        // anything reads its words as entry indices or its size from its class), its class
        // word must name a stored class and every reference word must be a stored oref.
        let class_word = u32_at(obj, 0);
        let class = Oref::from_raw(class_word)
            .filter(|c| c.page().is_some())
            .ok_or_else(|| malformed(0, "the class word is not the oref of a stored object"))?;
        let desc = match &self.last_class {
            Some((w, d)) if *w == class_word => d,
            _ => {
                let Some(desc) = self.classes.get(&class_word) else {
                    return Ok(Need::Class(class));
                };
                // Classes are never unregistered: the cached descriptor stays right.
                self.last_class = Some((class_word, desc.clone()));
                &self.last_class.as_ref().expect("just set").1
            }
        };
        desc.check_shape(obj).map_err(|why| malformed(0, why))?;
        check_stored_refs(desc, obj).map_err(|(at, why)| malformed(at, why))?;
        let loc = (base + range.start) as u32;
        let fm = &mut self.frames[f as usize];
        let decays = self.decays[f as usize];
        if fm.prefetched {
            fm.prefetched = false;
            self.stats.prefetched_used += 1;
        }
        let e = &mut self.entries[i as usize];
        e.loc = loc;
        e.usage = usage_stored(0, decays);
        fm.installed += 1;
        fm.count_usage(e, decays);
        self.link_installed(f, i);
        self.stats.objects_installed += 1;
        self.count_resident(oref.raw());
        Ok(Need::Resident(loc))
    }

    /// Follows the reference word at byte `off` of the resident object at `loc`, swizzling it
    /// in place. Returns the target's entry and the oref word it was made for, or `None` for a
    /// null reference.
    pub(crate) fn follow(
        &mut self,
        loc: u32,
        off: usize,
    ) -> Result<Option<(u32, u32)>, CacheError> {
        let at = loc as usize + off;
        let w = self.arena.read_u32(at);
        if w & 1 == 1 {
            let i = w >> 1;
            return Ok(Some((i, self.entries[i as usize].oref)));
        }
        if w == 0 {
            return Ok(None);
        }
        let oref = Oref::from_raw(w).expect("spare bit is clear");
        let i = self.entry_for(oref)?;
        self.arena.write_u32(at, RawRef::tagged_word(i));
        let e = &mut self.entries[i as usize];
        e.refs = e.refs.saturating_add(1);
        self.stats.swizzles += 1;
        Ok(Some((i, w)))
    }

    /// The reference word at byte `off` of the object at `loc`, unswizzled: an oref word, or a
    /// tagged serial for a created object.
    pub(crate) fn ref_word(&self, loc: u32, off: usize) -> u32 {
        let w = self.arena.read_u32(loc as usize + off);
        if w & 1 == 1 { self.entries[(w >> 1) as usize].oref } else { w }
    }

    /// Copies the resident object at `loc` into `out` (replacing its contents) with every
    /// swizzled reference word replaced by the oref word of the entry it names: the object as
    /// the server stores it, except that references to objects created by the current
    /// transaction hold their tagged serials.
    pub(crate) fn copy_unswizzled(&self, loc: u32, out: &mut Vec<u8>) {
        let size = self.object_size(loc);
        self.arena.copy_out(loc as usize, size, out);
        let Some(desc) = self.classes.get(&self.class_word(loc)) else { return };
        desc.for_each_ref_offset(self.arena.bytes(loc as usize, size), |off| {
            let w = u32_at(out, off);
            if w & 1 == 1 {
                thor_core::le::put_u32(out, off, self.entries[(w >> 1) as usize].oref);
            }
        });
    }

    /// Stores a reference to entry `target` (or null) at byte `off` of the object at `loc`,
    /// keeping reference counts right.
    ///
    /// The count of the entry the word pointed at before is decremented only when the
    /// transaction ends ([`CacheCore::apply_deferred_releases`]): the object's undo copy may
    /// still name that entry, and if the count reached 0 now the entry could be freed and
    /// reused before an abort put the undo copy back. This is the HAC paper's lazy correction
    /// of reference counts at commit (section 2.3), for the decrements. (Not even a count
    /// that stays above 0 may be decremented now: an abort restores objects one at a time,
    /// and releasing the current words of an object restored early could take the count to 0
    /// while the undo copy of one restored later still names the entry.)
    pub(crate) fn store_ref(&mut self, loc: u32, off: usize, target: Option<u32>) {
        let at = loc as usize + off;
        let old = self.arena.read_u32(at);
        if old & 1 == 1 {
            self.deferred_releases.push(old >> 1);
        }
        let new = match target {
            Some(i) => {
                let e = &mut self.entries[i as usize];
                e.refs = e.refs.saturating_add(1);
                RawRef::tagged_word(i)
            }
            None => 0,
        };
        self.arena.write_u32(at, new);
    }

    /// At the end of a transaction (after an abort has put the undo copies back): applies the
    /// decrements [`CacheCore::store_ref`] deferred, freeing entries nothing keeps any more.
    pub(crate) fn apply_deferred_releases(&mut self) {
        let mut pending = std::mem::take(&mut self.deferred_releases);
        for &i in &pending {
            let e = &mut self.entries[i as usize];
            if e.flags & F_LIVE == 0 {
                continue;
            }
            if e.refs != u16::MAX {
                debug_assert!(e.refs > 0, "a deferred release of an unreferenced entry");
                e.refs = e.refs.saturating_sub(1);
            }
            self.maybe_free_entry(i);
        }
        pending.clear();
        pending.shrink_to(RELEASES_RETAINED);
        self.deferred_releases = pending;
    }

    /// Puts `undo` (the bytes entry `i` had before the transaction) back in place of its
    /// current bytes, fixing reference counts: the undo copy's references are counted before
    /// the current bytes' are released, so an entry both name never drops to 0 on the way.
    pub(crate) fn restore_object(&mut self, i: u32, undo: &[u8]) {
        let loc = self.entries[i as usize].loc;
        debug_assert_ne!(loc, NOT_RESIDENT, "modified objects stay resident (no-steal)");
        let Some(desc) = self.classes.get(&self.class_word(loc)).cloned() else {
            self.arena.copy_in(loc as usize, undo);
            return;
        };
        desc.for_each_ref_offset(undo, |off| {
            let w = u32_at(undo, off);
            if w & 1 == 1 {
                let e = &mut self.entries[(w >> 1) as usize];
                e.refs = e.refs.saturating_add(1);
            }
        });
        self.release_refs(loc);
        self.arena.copy_in(loc as usize, undo);
    }

    /// Decrements the counts of every entry the object at `loc` references (it is leaving the
    /// cache or being overwritten), freeing entries that nothing keeps.
    pub(crate) fn release_refs(&mut self, loc: u32) {
        let mut targets = std::mem::take(&mut self.ref_scratch);
        self.swizzled_targets(loc, &mut targets);
        for &i in &targets {
            let e = &mut self.entries[i as usize];
            if e.refs != u16::MAX {
                e.refs = e.refs.saturating_sub(1);
            }
            self.maybe_free_entry(i);
        }
        self.ref_scratch = targets;
    }

    /// The entries the swizzled reference words of the object at `loc` point to, into `out`
    /// (cleared first). Nothing if its class is not loaded (it was never installed, so nothing
    /// in it was swizzled).
    fn swizzled_targets(&self, loc: u32, out: &mut Vec<u32>) {
        out.clear();
        let Some(desc) = self.classes.get(&self.class_word(loc)) else { return };
        let obj = self.arena.bytes(loc as usize, desc.object_bytes(self.var_count(loc, desc)));
        desc.for_each_ref_offset(obj, |off| {
            let w = u32_at(obj, off);
            if w & 1 == 1 {
                out.push(w >> 1);
            }
        });
    }

    fn var_count(&self, loc: u32, desc: &ClassDesc) -> usize {
        match desc.var() {
            thor_core::VarKind::None => 0,
            _ => self.arena.read_u32(loc as usize + desc.count_offset()) as usize,
        }
    }

    /// [`CacheCore::discard`] for one of several objects leaving together (a frame's): the
    /// object leaves now, but the counts of the entries its references name are decremented,
    /// and the entries nothing keeps freed, at [`CacheCore::end_discards`], which must come
    /// before anything else allocates or frees an entry. Each decrement is a cache miss on a
    /// target entry; one after the other, each waited for the previous object's checks, while
    /// a batch of them in a tight loop overlaps the misses (a tenth of hot T1 at 8 MiB was
    /// these decrements).
    pub(crate) fn discard_batched(&mut self, i: u32) {
        let loc = self.entries[i as usize].loc;
        debug_assert_ne!(loc, NOT_RESIDENT);
        let word = self.class_word(loc);
        // Not loaded: never installed, so nothing in it was swizzled.
        if self.memo_class(word)
            && let Some((_, desc)) = &self.last_class
        {
            let obj = self.arena.bytes(loc as usize, desc.object_bytes(self.var_count(loc, desc)));
            let targets = &mut self.batch_targets;
            desc.for_each_ref_offset(obj, |off| {
                let w = u32_at(obj, off);
                if w & 1 == 1 {
                    targets.push(w >> 1);
                }
            });
        }
        let e = &mut self.entries[i as usize];
        e.loc = NOT_RESIDENT;
        e.usage = 0;
        let oref = e.oref;
        self.stats.objects_discarded += 1;
        self.uncount_resident(oref);
        self.batch_dropped.push(i);
    }

    /// Ends a batch of [`CacheCore::discard_batched`]: releases the discarded objects'
    /// references and frees the entries nothing keeps (targets and discarded objects alike).
    pub(crate) fn end_discards(&mut self) {
        let targets = std::mem::take(&mut self.batch_targets);
        for &t in &targets {
            let e = &mut self.entries[t as usize];
            if e.refs != u16::MAX {
                e.refs = e.refs.saturating_sub(1);
            }
        }
        // Freed last to first: a frame's objects come in oid order, and a page directory keeps
        // its entries in oid order, so freeing the highest first shifts nothing above it
        // (first to last shifted the rest of the directory on every removal).
        for &t in targets.iter().rev() {
            self.maybe_free_entry(t);
        }
        let dropped = std::mem::take(&mut self.batch_dropped);
        for &i in dropped.iter().rev() {
            self.maybe_free_entry(i);
        }
        self.batch_targets = targets;
        self.batch_targets.clear();
        self.batch_dropped = dropped;
        self.batch_dropped.clear();
    }

    /// The object of entry `i` leaves the cache (its frame is being reused): its references are
    /// released and the entry freed if nothing keeps it. The caller fixes the frame's lists.
    pub(crate) fn discard(&mut self, i: u32) {
        self.discard_batched(i);
        self.end_discards();
    }

    /// Replacement is about to empty frame `f`: if it holds its page intact (the page's mapped
    /// copy, nothing in it written since it came) and demotion is on, keep the page's stored
    /// form, every reference swizzled in place turned back into its oref (`crate::demote`).
    /// Must run before any object of the frame is discarded or moved: a swizzled word's
    /// target entry is kept alive by the word's count until then.
    pub(crate) fn capture_for_demotion(&mut self, f: u32) {
        if !self.demote.enabled() {
            return;
        }
        let fm = self.frames[f as usize];
        if fm.kind != FrameKind::Intact || fm.written || self.pages.get(&fm.page) != Some(&f) {
            return;
        }
        let Some(mut buf) = self.demote.buffer(fm.page, self.page_size) else { return };
        let base = self.frame_base(f);
        buf.copy_from_slice(self.arena.bytes(base, self.page_size));
        let mut offs = std::mem::take(&mut self.ref_scratch);
        for i in self.installed.iter(f) {
            let loc = self.entries[i as usize].loc;
            let Some(desc) = self.classes.get(&self.class_word(loc)) else { continue };
            let at = loc as usize - base;
            let size = desc.object_bytes(self.var_count(loc, desc));
            offs.clear();
            desc.for_each_ref_offset(&buf[at..at + size], |off| offs.push(off as u32));
            for &off in &offs {
                let w = u32_at(&buf, at + off as usize);
                if w & 1 == 1 {
                    // A live entry: the swizzled word holds a count on it.
                    let oref = self.entries.get((w >> 1) as usize).map_or(w, |e| e.oref);
                    put_u32(&mut buf, at + off as usize, oref);
                }
            }
        }
        self.ref_scratch = offs;
        self.demote.captured(fm.page, buf);
    }

    /// Empties frame `f` (an intact, compacted or new frame that is neither pinned nor holds
    /// modified objects): discards its installed objects and puts it on the free list.
    pub(crate) fn evict_frame(&mut self, f: u32) {
        let fm = self.frames[f as usize];
        debug_assert!(fm.pins == 0 && fm.modified == 0, "evicting a pinned or modified frame");
        self.capture_for_demotion(f);
        let mut list = std::mem::take(&mut self.list_scratch);
        list.clear();
        list.extend(self.installed.iter(f));
        self.installed.clear(f);
        for &i in &list {
            self.discard_batched(i);
        }
        self.end_discards();
        self.list_scratch = list;
        self.unmap_page(f);
        if self.new_frame == f {
            self.new_frame = NIL;
        }
        self.release_frame(f);
    }

    /// Counts frame `f`'s page as prefetched and never used if it is, as it leaves its frame
    /// (or stops being the page's copy).
    pub(crate) fn prefetch_left(&mut self, f: u32) {
        let fm = &mut self.frames[f as usize];
        if fm.prefetched {
            fm.prefetched = false;
            self.stats.prefetched_unused += 1;
        }
    }

    /// Marks the page just installed in frame `f` as prefetched.
    pub(crate) fn mark_prefetched(&mut self, f: u32) {
        self.frames[f as usize].prefetched = true;
        self.stats.pages_prefetched += 1;
    }

    /// Puts an emptied frame back on the free list (or retires it if the tables need room).
    pub(crate) fn release_frame(&mut self, f: u32) {
        self.prefetch_left(f);
        self.frames[f as usize] = FrameMeta::FREE;
        self.stats.frames_freed += 1;
        let retire = self.usable_frames > self.frames_allowed().max(MIN_FRAMES);
        self.installed.clear(f);
        if retire {
            self.frames[f as usize].kind = FrameKind::Retired;
            self.retired.push(f);
            self.usable_frames -= 1;
            self.stats.frames_retired += 1;
        } else {
            self.free.push(f);
        }
    }

    // ----- pins -----

    /// Pins the frame holding `loc`: it will not be reused or compacted until unpinned.
    #[inline]
    pub(crate) fn pin(&mut self, loc: u32) {
        let f = self.frame_of(loc);
        self.frames[f as usize].pins += 1;
    }

    /// Undoes one [`CacheCore::pin`].
    #[inline]
    pub(crate) fn unpin(&mut self, loc: u32) {
        let f = self.frame_of(loc);
        let fm = &mut self.frames[f as usize];
        debug_assert!(fm.pins > 0);
        fm.pins -= 1;
    }

    /// Frees the dead frames (kept for views of an aborted transaction's created objects) that
    /// no pin holds any more. Call with every live view's pin in place.
    pub(crate) fn release_dead_frames(&mut self) {
        let mut dead = std::mem::take(&mut self.dead);
        dead.retain(|&f| {
            if self.frames[f as usize].pins == 0 {
                self.release_frame(f);
                false
            } else {
                true
            }
        });
        self.dead = dead;
    }

    /// Marks frame `f` (an aborted transaction's created objects, which views still point at)
    /// dead: it holds nothing and is freed by [`CacheCore::release_dead_frames`] once unpinned.
    pub(crate) fn mark_dead(&mut self, f: u32) {
        let pins = self.frames[f as usize].pins;
        self.frames[f as usize] = FrameMeta { kind: FrameKind::Dead, pins, ..FrameMeta::FREE };
        self.installed.clear(f);
        self.dead.push(f);
    }

    // ----- transactions -----

    /// The usage value now of entry `i` (0 if it is not resident).
    pub fn usage(&self, i: u32) -> u8 {
        let e = &self.entries[i as usize];
        if e.loc == NOT_RESIDENT {
            return 0;
        }
        usage_now(e.usage, self.decays[self.frame_of(e.loc) as usize])
    }

    /// Sets the usage value of entry `i`, keeping its frame's counts by usage.
    pub(crate) fn set_usage(&mut self, i: u32, value: u8) {
        let e = &mut self.entries[i as usize];
        if e.loc == NOT_RESIDENT {
            e.usage = value & USAGE_MAX;
            return;
        }
        let f = (e.loc >> self.shift) as usize;
        let (fm, decays) = (&mut self.frames[f], self.decays[f]);
        fm.uncount_usage(e, decays);
        e.usage = usage_stored(value, decays);
        fm.count_usage(e, decays);
    }

    /// Records a use of resident entry `i` (HAC's access: the top usage bit set).
    pub(crate) fn mark_used(&mut self, i: u32) {
        let value = self.usage(i) | USAGE_TOP;
        self.set_usage(i, value);
    }

    /// Records the first write of entry `i` in the current transaction.
    pub(crate) fn mark_modified(&mut self, i: u32) {
        let e = &mut self.entries[i as usize];
        if e.flags & F_MODIFIED == 0 {
            let f = e.loc >> self.shift;
            let fm = &mut self.frames[f as usize];
            let decays = self.decays[f as usize];
            fm.uncount_usage(e, decays);
            e.flags |= F_MODIFIED;
            fm.modified += 1;
            fm.written = true;
            if self.spill_possible && !self.spill_reserved {
                let size = self.object_size_memo(self.entries[i as usize].loc);
                self.own_bytes_grew(size);
            }
        }
    }

    /// Clears the modified mark of entry `i` (commit or abort).
    pub(crate) fn clear_modified(&mut self, i: u32) {
        let e = &mut self.entries[i as usize];
        if e.flags & F_MODIFIED != 0 {
            e.flags &= !F_MODIFIED;
            // A stolen object left its frame's count when it left the frame.
            if e.loc != NOT_RESIDENT {
                let f = e.loc >> self.shift;
                let fm = &mut self.frames[f as usize];
                let decays = self.decays[f as usize];
                fm.modified -= 1;
                fm.count_usage(e, decays);
            }
        }
    }

    /// Clears the read set and the read marks of the entries still holding them (entries freed
    /// since lost their marks with them). Entries a failed slow path left marked as being
    /// resolved are released too.
    pub(crate) fn clear_reads(&mut self) {
        let reads = std::mem::take(&mut self.reads);
        if reads.len() * 8 > self.live_entries {
            // A large read set: one sequential pass over the table is cheaper than a random
            // index probe per object read.
            for i in 0..self.entries.len() as u32 {
                let e = &mut self.entries[i as usize];
                if e.flags & (F_READ | F_RESOLVING) != 0 {
                    let resolving = e.flags & F_RESOLVING != 0;
                    e.flags &= !(F_READ | F_RESOLVING);
                    if resolving {
                        self.maybe_free_entry(i);
                    }
                }
            }
        } else {
            reads.for_each(|oref| {
                if let Some(i) = self.index.get(oref.raw()) {
                    self.entries[i as usize].flags &= !(F_READ | F_RESOLVING);
                    self.maybe_free_entry(i);
                }
            });
        }
        // Keep the allocation: it is counted in the budget and reused by the next transaction,
        // unless a large transaction left it holding more than a sixteenth of the budget; then
        // its memory goes back to frames ([`CacheCore::rebalance`] restores retired ones).
        if reads.memory_bytes() <= self.budget_bytes / 16 {
            self.reads = reads;
            self.reads.clear();
        }
        // The pages held back for the transaction may be reported now (checked again first).
        self.discarded.append(&mut self.discarded_held);
    }

    /// Room for a created object of `size` bytes: the location, or `None` if a fresh frame is
    /// needed (the caller frees one and calls [`CacheCore::start_new_frame`]).
    pub(crate) fn new_object_room(&mut self, size: usize) -> Option<u32> {
        if self.new_frame == NIL {
            return None;
        }
        let fm = &self.frames[self.new_frame as usize];
        if fm.used as usize + size > self.page_size {
            return None;
        }
        Some((self.frame_base(self.new_frame) + fm.used as usize) as u32)
    }

    /// Makes free frame `f` the frame for created objects.
    pub(crate) fn start_new_frame(&mut self, f: u32) {
        self.frames[f as usize] = FrameMeta { kind: FrameKind::New, ..FrameMeta::FREE };
        self.arena.zero(self.frame_base(f), self.page_size);
        self.new_frame = f;
    }

    /// Creates an object from `bytes` at `loc` (from [`CacheCore::new_object_room`]); returns
    /// its entry and tagged serial. References in `bytes` must already be swizzled or null.
    pub(crate) fn create_at(&mut self, loc: u32, bytes: &[u8]) -> Result<(u32, u32), CacheError> {
        self.own_bytes_grew(bytes.len());
        let serial = self.next_serial;
        let word = RawRef::tagged_word(serial);
        let i = self.alloc_entry(word, None)?;
        // Only a created object consumes a serial: a transaction's serials are consecutive, so
        // a created object's place in the commit is its serial's distance from the first
        // (`crate::txn`).
        self.next_serial = (self.next_serial + 1) & RawRef::TAG_MAX;
        self.arena.copy_in(loc as usize, bytes);
        let f = self.frame_of(loc);
        let fm = &mut self.frames[f as usize];
        let decays = self.decays[f as usize];
        fm.used += bytes.len() as u32;
        fm.objects += 1;
        fm.installed += 1;
        let e = &mut self.entries[i as usize];
        e.loc = loc;
        e.flags |= F_NEW;
        // Creating an object uses it: it starts as recently used as an accessed one.
        e.usage = usage_stored(USAGE_TOP, decays);
        fm.count_usage(e, decays);
        self.link_installed(f, i);
        self.stats.objects_created += 1;
        Ok((i, word))
    }

    /// After a commit: created entry `i` is object `oref` now.
    pub(crate) fn rename(&mut self, i: u32, oref: Oref) {
        let old = self.entries[i as usize].oref;
        // The index finds entries by the oref in them: out under the old key, in under the new.
        if self.index.get(old) == Some(i) {
            self.index.remove(old);
        }
        let e = &mut self.entries[i as usize];
        e.oref = oref.raw();
        e.flags &= !F_NEW;
        let resident = e.loc != NOT_RESIDENT;
        if self.index.insert(oref.raw(), i) {
            self.rebalance();
        }
        if resident {
            // A stored object of `oref`'s page is cached now.
            self.count_resident(oref.raw());
        }
        if RawRef::decode(old) != RawRef::Oref(oref) {
            if self.rename_order.len() == RENAMES_MAX
                && let Some(o) = self.rename_order.pop_front()
            {
                self.renames.remove(&o);
            }
            self.renames.insert(old, oref.raw());
            self.rename_order.push_back(old);
        }
    }

    /// Makes `serial` the next created object's serial (see [`crate::ClientCache::set_next_serial`]).
    pub(crate) fn set_next_serial(&mut self, serial: u32) {
        self.next_serial = serial & RawRef::TAG_MAX;
    }

    /// The oref a created object got at its commit, if remembered.
    pub(crate) fn renamed(&self, serial_word: u32) -> Option<u32> {
        self.renames.get(&serial_word).copied()
    }

    /// Forgets the current new-object frame (after commit or abort).
    pub(crate) fn close_new_frame(&mut self) {
        self.new_frame = NIL;
    }

    /// Drops a created object of an aborted transaction: its entry is freed.
    pub(crate) fn drop_created(&mut self, i: u32) {
        let loc = self.entries[i as usize].loc;
        // A stolen object released its references when it was stolen.
        if loc != NOT_RESIDENT {
            self.release_refs(loc);
        }
        let e = &mut self.entries[i as usize];
        e.loc = NOT_RESIDENT;
        e.flags &= !(F_NEW | F_MODIFIED | F_READ | F_SPILLED);
        e.refs = 0;
        self.free_entry_at(i);
    }
}

impl CacheCore {
    /// Checks the core's invariants, for tests and debugging (it walks everything: O(cache)):
    ///
    /// - every frame's installed list holds exactly its `installed` live entries, each located
    ///   in that frame, with `modified` of them modified; free and retired frames hold nothing;
    /// - the objects of a frame do not overlap, and those of compacted and new frames lie
    ///   within the frame's `used` bytes;
    /// - every resident entry is in its frame's list, and the oref index leads back to it;
    /// - the page map names intact frames holding those pages;
    /// - every entry's reference count is the number of swizzled words naming it in resident
    ///   objects plus the releases deferred to the end of the transaction (unless saturated);
    /// - the count of resident objects per page is exact (a page is reported as discarded only
    ///   when it is unmapped and that count is 0);
    /// - memory stays within the budget.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut in_lists = vec![false; self.entries.len()];
        for f in 0..self.frames.len() {
            self.check_frame(f, &mut in_lists)?;
        }
        self.installed.check()?;
        self.check_entries(&in_lists)?;
        self.check_pages()
    }

    /// [`CacheCore::check_invariants`] for frame `f`: its installed list against its meta, its
    /// objects' places. Marks the entries of its list in `in_lists` (an entry in two lists is
    /// an error).
    fn check_frame(&self, f: usize, in_lists: &mut [bool]) -> Result<(), String> {
        let fm = &self.frames[f];
        let base = self.frame_base(f as u32);
        let mut objs: Vec<(usize, usize)> = Vec::new();
        let (mut n, mut modified) = (0u32, 0u32);
        let mut by_usage = [0u16; 16];
        for i in self.installed.iter(f as u32) {
            let e = self.entries.get(i as usize).ok_or(format!("frame {f}: bad entry {i}"))?;
            if e.flags & F_LIVE == 0 || e.loc == NOT_RESIDENT {
                return Err(format!("frame {f}: entry {i} in its list is not resident"));
            }
            if self.frame_of(e.loc) != f as u32 {
                return Err(format!("frame {f}: entry {i} is located in another frame"));
            }
            if std::mem::replace(&mut in_lists[i as usize], true) {
                return Err(format!("entry {i} is in two lists (or twice in one)"));
            }
            n += 1;
            modified += u32::from(e.flags & F_MODIFIED != 0);
            if e.flags & F_MODIFIED == 0 {
                by_usage[usize::from(usage_now(e.usage, self.decays[f]))] += 1;
            }
            objs.push((e.loc as usize, self.object_size(e.loc)));
        }
        if n != fm.installed || modified != fm.modified {
            return Err(format!(
                "frame {f}: list has {n} installed, {modified} modified; meta says {fm:?}"
            ));
        }
        if by_usage != fm.by_usage {
            return Err(format!(
                "frame {f}: its unmodified entries by usage are {by_usage:?}; meta says {fm:?}"
            ));
        }
        if matches!(fm.kind, FrameKind::Free | FrameKind::Retired | FrameKind::Meta)
            && n + fm.pins > 0
        {
            return Err(format!("frame {f}: {:?} but holds objects or pins", fm.kind));
        }
        if fm.installed > fm.objects && fm.kind != FrameKind::Free {
            return Err(format!("frame {f}: more installed than objects: {fm:?}"));
        }
        objs.sort_unstable();
        for w in objs.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("frame {f}: objects at {} and {} overlap", w[0].0, w[1].0));
            }
        }
        if matches!(fm.kind, FrameKind::Compacted | FrameKind::New)
            && objs.last().is_some_and(|&(loc, size)| loc + size > base + fm.used as usize)
        {
            return Err(format!("frame {f}: an object lies beyond the used bytes"));
        }
        Ok(())
    }

    /// [`CacheCore::check_invariants`] for the entries: each resident one in a frame's list
    /// (`in_lists`), in the oref index, and referenced as often as its count says.
    fn check_entries(&self, in_lists: &[bool]) -> Result<(), String> {
        let mut counted = vec![0u64; self.entries.len()];
        for &i in &self.deferred_releases {
            counted[i as usize] += 1;
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.flags & F_LIVE == 0 {
                continue;
            }
            if e.loc != NOT_RESIDENT && !in_lists[i] {
                return Err(format!("entry {i} is resident but in no frame's list"));
            }
            if e.flags & F_NEW == 0 && self.index.get(e.oref) != Some(i as u32) {
                return Err(format!("entry {i} ({:#x}) is not the map's entry", e.oref));
            }
            if e.loc == NOT_RESIDENT {
                continue;
            }
            let Some(desc) = self.classes.get(&self.class_word(e.loc)) else { continue };
            let obj = self.arena.bytes(e.loc as usize, self.object_size(e.loc));
            desc.for_each_ref_offset(obj, |off| {
                let w = u32_at(obj, off);
                if w & 1 == 1 {
                    counted[(w >> 1) as usize] += 1;
                }
            });
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.flags & F_LIVE != 0 && e.refs != u16::MAX && u64::from(e.refs) != counted[i] {
                return Err(format!("entry {i}: refs {} but {} references", e.refs, counted[i]));
            }
            if e.flags & F_LIVE == 0 && counted[i] > 0 {
                return Err(format!("free entry {i} is referenced {} times", counted[i]));
            }
        }
        Ok(())
    }

    /// [`CacheCore::check_invariants`] for the page map, the resident objects per page and the
    /// budget.
    fn check_pages(&self) -> Result<(), String> {
        for (&page, &f) in &self.pages {
            let fm = &self.frames[f as usize];
            if fm.kind != FrameKind::Intact || fm.page != page {
                return Err(format!("page {page} maps to frame {f}, which is {fm:?}"));
            }
        }
        // Resident objects per page, counted again: what decides that a page may be reported
        // as discarded.
        let mut resident: FxHashMap<u32, u32> = FxHashMap::default();
        for e in self.entries.iter().filter(|e| e.flags & F_LIVE != 0 && e.loc != NOT_RESIDENT) {
            if let Some(p) = Oref::from_raw(e.oref).and_then(|o| o.page()) {
                *resident.entry(p.get()).or_insert(0) += 1;
            }
        }
        let recorded: FxHashMap<u32, u32> = self.index.resident_pages().collect();
        if resident != recorded {
            return Err(format!(
                "resident objects per page: counted {resident:?}, recorded {recorded:?}"
            ));
        }
        if self.memory_bytes() > self.budget_bytes {
            return Err(format!(
                "{} bytes used of a {} budget",
                self.memory_bytes(),
                self.budget_bytes
            ));
        }
        Ok(())
    }
}

/// Checks that every reference word of `obj` (an object of class `desc` that passed
/// [`ClassDesc::check_shape`], straight from a fetched page) is a stored oref: null, or even
/// and naming a page. An odd word would be taken for a swizzled reference, an entry index, by
/// everything that reads installed objects. Returns the offending word's offset in `obj`.
fn check_stored_refs(desc: &ClassDesc, obj: &[u8]) -> Result<(), (usize, &'static str)> {
    let mut bad = Ok(());
    desc.for_each_ref_offset(obj, |off| {
        if bad.is_err() {
            return;
        }
        let w = u32_at(obj, off);
        if w & 1 == 1 {
            bad = Err((off, "a reference word has the spare (swizzle) bit set"));
        } else if w != 0 && Oref::from_raw(w).and_then(Oref::page).is_none() {
            bad = Err((off, "a reference word names page 0"));
        }
    });
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use thor_core::{ClassDesc, Oid, PageMut, VarKind};

    fn page_with(page: u32, objs: &[Vec<u8>]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        let mut p = PageMut::init(&mut b, PageId::new(page).unwrap()).unwrap();
        for o in objs {
            p.append(o).unwrap();
        }
        b
    }

    fn oref(p: u32, o: u16) -> Oref {
        Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
    }

    #[test]
    fn lazy_install_swizzle_and_discard() {
        let mut c = CacheCore::new(16 * 4096, 4096).unwrap();
        // A class with one reference slot, registered as the class at 1.7.
        let class = oref(1, 7);
        let desc = ClassDesc::new("T", 4, &[0], VarKind::None).unwrap();
        c.register_class(class.raw(), Arc::new(desc.clone())).unwrap();
        let mut a = desc.new_object(class.raw(), 0);
        thor_core::le::put_u32(&mut a, 4, oref(3, 0).raw());
        let b = desc.new_object(class.raw(), 0);
        let f = c.take_free_frame().unwrap();
        c.install_page(f, PageId::new(2).unwrap(), &page_with(2, &[a, b])).unwrap();
        let ia = c.entry_for(oref(2, 0)).unwrap();
        let Need::Resident(loc) = c.locate(ia).unwrap() else { panic!() };
        assert_eq!(c.frames[f as usize].installed, 1);
        // Following the reference swizzles it and creates a non-resident entry for 3.0.
        let (it, w) = c.follow(loc, 4).unwrap().unwrap();
        assert_eq!(w, oref(3, 0).raw());
        assert_eq!(c.entries[it as usize].refs, 1);
        assert_eq!(c.locate(it).unwrap(), Need::Page(PageId::new(3).unwrap()));
        assert_eq!(c.ref_word(loc, 4), oref(3, 0).raw());
        // Following again uses the swizzled word.
        assert_eq!(c.follow(loc, 4).unwrap(), Some((it, oref(3, 0).raw())));
        assert_eq!(c.stats.swizzles, 1);
        // Evicting the page discards the installed object and frees both entries.
        c.evict_frame(f);
        assert_eq!(c.live_entries(), 0);
        assert_eq!(c.page_frame(PageId::new(2).unwrap()), None);
    }

    #[test]
    fn unknown_classes_are_reported() {
        let mut c = CacheCore::new(16 * 4096, 4096).unwrap();
        let desc = ClassDesc::new("T", 4, &[], VarKind::None).unwrap();
        let f = c.take_free_frame().unwrap();
        c.install_page(
            f,
            PageId::new(2).unwrap(),
            &page_with(2, &[desc.new_object(oref(1, 9).raw(), 0)]),
        )
        .unwrap();
        let i = c.entry_for(oref(2, 0)).unwrap();
        assert_eq!(c.locate(i).unwrap(), Need::Class(oref(1, 9)));
        let missing = c.entry_for(oref(2, 5)).unwrap();
        assert_eq!(c.locate(missing).unwrap(), Need::Stale(PageId::new(2).unwrap()));
    }

    #[test]
    fn bad_pages_are_refused() {
        let mut c = CacheCore::new(16 * 4096, 4096).unwrap();
        let f = c.take_free_frame().unwrap();
        assert!(c.install_page(f, PageId::new(2).unwrap(), &vec![0xAB; 4096]).is_err());
        assert!(c.install_page(f, PageId::new(3).unwrap(), &page_with(2, &[])).is_err());
        assert!(c.install_page(f, PageId::new(2).unwrap(), &[0; 100]).is_err());
    }

    #[test]
    fn budget_includes_the_tables() {
        let mut c = CacheCore::new(64 * 4096, 4096).unwrap();
        assert!(c.memory_bytes() <= c.budget_bytes());
        // 4,000 entries take about a quarter of the budget: frames make way for them.
        for n in 0..4_000u32 {
            c.entry_for(oref(2 + n / 500, (n % 500) as u16)).unwrap();
        }
        let more = c.rebalance();
        assert_eq!(more, 0, "free frames were retired first");
        assert!(
            c.memory_bytes() <= c.budget_bytes(),
            "{} > {}",
            c.memory_bytes(),
            c.budget_bytes()
        );
        assert!(c.usable_frames() < 64);
    }
}
