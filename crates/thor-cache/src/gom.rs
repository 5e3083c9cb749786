//! GOM: dual buffering, a page buffer and an object buffer split statically
//! (`papers/hac-sosp97.txt` section 4, after Kemper and Kossmann [KK94]).
//!
//! The HAC paper compares HAC with GOM, "the dual-buffering system with the lowest miss rates in
//! the literature": the client cache is partitioned *statically* into a page buffer and an
//! object buffer, each managed by perfect LRU. A miss fetches a page into the page buffer and
//! evicts its least recently used page P; rather than dropping all of P's objects, GOM copies
//! the recently used ones to the object buffer, making room there by evicting the least
//! recently used objects. If P is fetched again, its objects in the object buffer are put back
//! into P at once. The split is a setting (`gom:obj=0.3`); the paper's GOM figures were tuned
//! by hand per cache size and traversal, which `thor oo7 sweep --policies gom:obj=...` redoes.
//!
//! ```text
//!   page buffer (LRU of pages)                 object buffer (LRU of objects)
//!   [ p9 ][ p17 ][ p3 ][ p40 ] ... ──evict p40──►  [ a b c | d e _ _ ][ f g h i | _ ]
//!       ▲                          used objects         ▲ frames packed from the front
//!       └── p40 fetched again: its objects go back into their slots in p40
//! ```
//!
//! # Rules chosen
//!
//! - *A use* of a page is an access to any of its objects, counted once per visit as FPC does
//!   ([`crate::fpc`]); a use of an object in the object buffer moves it to the object LRU's
//!   recently-used end (exact, an intrusive list over entry indices: no hash on the hit path).
//! - *Recently used objects* of an evicted page: the objects *installed* from it, which in thor
//!   are exactly those accessed since the page was fetched (installation is lazy, on first use;
//!   following a reference only makes an entry). That is KK94's copy-on-displacement of the
//!   objects used during the page's residence. Objects that came back from the object buffer
//!   when the page returned count as used: they are installed in it.
//! - Copied objects enter the object buffer at its recently-used end (in address order, so
//!   objects of one page stay together): the page was the least recently used one, but its
//!   used objects were each used while it was resident, and the copy is where GOM decides to
//!   keep them.
//! - An object of the evicted page whose page copy is resident in another frame (a superseded
//!   copy was evicted after a newer fetch) goes back to that copy's slot rather than into the
//!   object buffer, as HAC's duplicate case does.
//! - *Refetch:* when a page is installed, each of its objects resident in the object buffer
//!   moves into its slot in the new copy (`CacheCore::home_slot`), bytes as they are. The
//!   cached copy wins over the fetched one: it is the one the entry names, it may hold the
//!   current transaction's writes (no-steal), and a newer committed version would have been
//!   invalidated out of the cache before the fetch reply was installed. An object whose slot
//!   has another size, or whose object-buffer frame is pinned, stays where it is (the page's
//!   copy is then never installed, the duplicate case).
//!
//! # Space in the object buffer: packing, not buddies
//!
//! GOM manages the object buffer with a buddy system. Thor's frames are page-sized and the
//! core's compacted frames are packed from the front, so this manager keeps objects packed
//! instead: a copied object is appended to the current *target* frame; when no frame has room
//! and the buffer has all its frames, least recently used objects are evicted one at a time
//! until the frame of the last one evicted has room for the object, and that frame is packed
//! (its live objects slid to its start) and becomes the target. So objects leave in exact LRU
//! order, as in GOM, but space is reused by moving bytes (counted in
//! `ReplacementStats::frames_compacted`, one per packing) rather than lost to rounding up to a
//! power of two. The difference favours this GOM: a buddy system wastes on average a quarter of
//! each block to internal fragmentation (the paper blames part of GOM's extra misses on
//! fragmentation), which packing does not; packing evicts a little more than the bytes needed
//! when the room freed is spread over frames. Hit-time costs (perfect LRU on every object
//! access) are not modelled, as for FPC.
//!
//! # The split
//!
//! The object buffer may hold `obj` (a fraction, default [`GomParams::DEFAULT`]) of the usable
//! frames, and never so many that fewer than [`MIN_FRAMES`] are left for pages. It starts
//! empty and grows as pages are evicted: when a copied object finds no room and the buffer has
//! fewer frames than its share, the evicted page's own frame becomes an object frame (its used
//! objects packed inside it, as HAC's victim becomes the target), and another page is evicted
//! for the frame asked for. When the tables take frames from the budget, or the page buffer has
//! nothing it may evict (pinned or modified pages), an object frame is emptied and given back.
//!
//! # Pins, no-steal, created objects
//!
//! A pinned page frame or one holding modified objects is never evicted (it goes back to the
//! recently-used end, as in FPC). In the object buffer, an object that is modified or whose
//! frame is pinned never leaves, and a pinned frame is never packed. Created objects are
//! FPC's: dropped at commit (fetched again in their pages), unless a view pins their frame,
//! which then joins the page buffer.

use thor_core::{Oid, Oref, PageView};
use thor_policy::{DenseSlots, Lru, Placement, Policy};

use crate::core::{CacheCore, Entry, F_LIVE, F_MODIFIED, FrameKind, FrameMeta, NIL, NOT_RESIDENT};
use crate::error::CacheError;
use crate::limits::MIN_FRAMES;
use crate::manager::{CacheManager, ReplacementStats};
use crate::timer::ReplacementTimer;

/// Settings of GOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GomParams {
    /// Thousandths of the usable frames given to the object buffer (the rest is the page
    /// buffer). Thousandths keep the setting exact and comparable.
    pub object_permille: u16,
}

/// Largest object share, in thousandths: the page buffer keeps a tenth of the cache at least,
/// so that pages with good locality still have somewhere to live (and a fetch a frame).
pub const OBJECT_PERMILLE_MAX: u16 = 900;

impl Default for GomParams {
    fn default() -> Self {
        GomParams::DEFAULT
    }
}

impl GomParams {
    /// Four fifths of the cache for objects, the best split measured on the paper's GOM
    /// workload (T1- of the small OO7 database, 8 KB pages; `thor oo7 sweep --policies
    /// gom:obj=0.1,...`): hot, 0.8 gave 2,542 / 14 / 0 fetches at 1 / 2 / 3 MB against 3,036 /
    /// 1,563 / 488 for 0.2 and 3,080 / 831 / 0 for 0.5, and cold 2,458 / 878 / 751 against
    /// 3,000 / 1,687 / 895 and 2,921 / 1,197 / 751; 0.9 starves the page buffer (2,936 hot at
    /// 1 MB). Even T1, which uses most objects of a page, keeps few of a page's objects per
    /// visit of it at these sizes, so the object buffer pays. The paper tuned the split per
    /// size and traversal; so should a study.
    pub const DEFAULT: GomParams = GomParams { object_permille: 800 };

    /// Parses the settings after `gom:` (`obj=0.3`; empty gives the default).
    pub(crate) fn parse(settings: &str) -> Result<GomParams, CacheError> {
        let mut p = GomParams::DEFAULT;
        for kv in settings.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
            let bad = || {
                CacheError::BadConfig(format!(
                    "GOM setting {kv:?}: expected obj=F, the object buffer's share of the \
                     cache, a decimal from 0 to 0.{} with at most 3 digits",
                    OBJECT_PERMILLE_MAX / 100
                ))
            };
            let v = match kv.split_once('=') {
                Some((k, v)) if k.trim() == "obj" => v.trim(),
                _ => return Err(bad()),
            };
            let permille = parse_permille(v).ok_or_else(bad)?;
            if permille > OBJECT_PERMILLE_MAX {
                return Err(bad());
            }
            p.object_permille = permille;
        }
        Ok(p)
    }

    /// Frames of `usable` the object buffer may hold.
    pub fn object_frames(&self, usable: usize) -> usize {
        let share = usable * usize::from(self.object_permille) / 1000;
        share.min(usable.saturating_sub(MIN_FRAMES))
    }
}

/// `0.3`, `.25`, `0`, `0.125` as thousandths; `None` if not such a decimal or above 1.
fn parse_permille(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit())
        || int.len() > 1
        || (int.is_empty() && frac.is_empty())
    {
        return None;
    }
    let int: u16 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut f: u16 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    for _ in frac.len()..3 {
        f *= 10;
    }
    let p = int * 1000 + f;
    (p <= 1000).then_some(p)
}

impl std::fmt::Display for GomParams {
    /// `gom`, or `gom:obj=F` for a split other than the default.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("gom")?;
        if *self != GomParams::DEFAULT {
            let p = self.object_permille;
            let mut frac = format!("{:03}", p % 1000);
            while frac.ends_with('0') {
                frac.pop();
            }
            if frac.is_empty() {
                write!(f, ":obj={}", p / 1000)?;
            } else {
                write!(f, ":obj={}.{frac}", p / 1000)?;
            }
        }
        Ok(())
    }
}

/// What a frame is to GOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Not GOM's: free, retired, or created objects of the current transaction.
    None,
    /// In the page buffer (ordered by `Gom::pages`).
    Page,
    /// In the object buffer.
    Object,
}

/// `Gom::next` of an entry not in the object LRU.
const OUT: u32 = u32::MAX - 1;

/// What evicting a page did.
enum Evicted {
    /// Its frame is free.
    Freed,
    /// Its frame joined the object buffer (holding its used objects): evict another.
    BecameObjectFrame,
    /// No page may be evicted (all pinned or modified).
    Nothing,
}

/// The GOM cache manager. See the module documentation.
#[derive(Debug)]
pub struct Gom {
    /// The split.
    params: GomParams,
    /// Page-buffer frames in LRU order.
    pages: Lru<DenseSlots>,
    /// The page-buffer frame touched last, or `u32::MAX`: a touch of it is not a new visit.
    last: u32,
    /// Per frame: what it is to GOM.
    role: Vec<Role>,
    /// The object buffer's frames (at most one entry per frame).
    object_frames: Vec<u32>,
    /// Per frame: bytes of the objects GOM placed in it that it has not seen leave. An upper
    /// bound on live bytes (an invalidated object leaves behind GOM's back); exact after a
    /// packing.
    live: Vec<u32>,
    /// The object frame copied objects are appended to, or [`NIL`].
    target: u32,
    /// Object LRU, an intrusive list over entry indices: towards the least recently used end.
    /// `OUT` for entries not in the list. Grown to the indirection table's capacity when an
    /// object joins (counted in the budget).
    next: Vec<u32>,
    /// Towards the most recently used end.
    prev: Vec<u32>,
    /// Most recently used object, or [`NIL`].
    head: u32,
    /// Least recently used object, or [`NIL`].
    tail: u32,
    /// Page frames passed over in one eviction (pinned or modified), put back after it.
    skipped: Vec<u64>,
    /// Objects passed over while making room (modified, or in a pinned frame).
    held: Vec<u32>,
    /// A frame's installed objects as (location, entry), sorted (reused buffer).
    order: Vec<(u32, u32)>,
    /// Oids of a fetched page (reused buffer).
    oids: Vec<u16>,
    /// Frames, for the fixed part of the memory estimate.
    frames: usize,
    /// Counters: `frames_evicted` pages evicted, `objects_kept` objects copied into the object
    /// buffer, `objects_moved_home` objects put back into their refetched (or resident) page,
    /// `frames_compacted` object frames packed, `objects_dropped` objects that left.
    stats: ReplacementStats,
}

/// Bytes per frame of the fixed tables: the page LRU (a 16-byte node and a 4-byte dense slot),
/// the role (1), the live bytes (4).
const BYTES_PER_FRAME: usize = 20 + 1 + 4;

impl Gom {
    /// GOM over `frames` frames.
    pub fn new(frames: usize, params: GomParams) -> Result<Gom, CacheError> {
        if params.object_permille > OBJECT_PERMILLE_MAX {
            return Err(CacheError::BadConfig(format!(
                "GOM object share {}/1000 above {OBJECT_PERMILLE_MAX}/1000",
                params.object_permille
            )));
        }
        let index =
            DenseSlots::new(frames as u64).map_err(|e| CacheError::BadConfig(e.to_string()))?;
        let pages =
            Lru::with_index(frames, index).map_err(|e| CacheError::BadConfig(e.to_string()))?;
        Ok(Gom {
            params,
            pages,
            last: u32::MAX,
            role: vec![Role::None; frames],
            object_frames: Vec::with_capacity(frames),
            live: vec![0; frames],
            target: NIL,
            next: Vec::new(),
            prev: Vec::new(),
            head: NIL,
            tail: NIL,
            skipped: Vec::new(),
            held: Vec::new(),
            order: Vec::new(),
            oids: Vec::new(),
            frames,
            stats: ReplacementStats::default(),
        })
    }

    /// The settings.
    pub fn params(&self) -> GomParams {
        self.params
    }

    /// Frames in the object buffer now.
    pub fn object_buffer_frames(&self) -> usize {
        self.object_frames.len()
    }

    // ----- the object LRU -----

    fn lru_linked(&self, i: u32) -> bool {
        self.next.get(i as usize).is_some_and(|&n| n != OUT)
    }

    fn lru_remove(&mut self, i: u32) {
        if !self.lru_linked(i) {
            return;
        }
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.next[i as usize] = OUT;
        self.prev[i as usize] = OUT;
    }

    /// Puts entry `i` at the most recently used end (first taking it out if it is in).
    fn lru_push_front(&mut self, core: &CacheCore, i: u32) {
        if i as usize >= self.next.len() {
            // Room for every entry the table holds now: grows with the table, in its steps.
            let n = core.entry_capacity().max(i as usize + 1);
            self.next.resize(n, OUT);
            self.prev.resize(n, OUT);
        }
        self.lru_remove(i);
        self.link_front(i);
    }

    /// Links entry `i` (in the list's range, not in it) at the most recently used end.
    #[inline]
    fn link_front(&mut self, i: u32) {
        self.prev[i as usize] = NIL;
        self.next[i as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    /// Whether entry `i` is an object GOM keeps in the object buffer (not a stale node of an
    /// object that left behind GOM's back, by invalidation).
    fn in_object_buffer(&self, core: &CacheCore, i: u32) -> bool {
        let e = &core.entries[i as usize];
        e.flags & F_LIVE != 0
            && e.loc != NOT_RESIDENT
            && self.role[core.frame_of(e.loc) as usize] == Role::Object
    }

    // ----- the object buffer -----

    /// Room for `size` bytes at the end of the target.
    fn target_room(&self, core: &CacheCore, size: usize) -> Option<u32> {
        if self.target == NIL {
            return None;
        }
        let t = &core.frames[self.target as usize];
        (t.used as usize + size <= core.page_size)
            .then(|| (core.frame_base(self.target) + t.used as usize) as u32)
    }

    /// Puts resident object `i` of `size` bytes (already out of its frame's list) at `to`, the
    /// end of an object frame, as the most recently used object.
    fn place(&mut self, core: &mut CacheCore, i: u32, to: u32, size: usize) {
        core.move_object(i, to, size);
        let f = core.frame_of(to);
        self.live[f as usize] += size as u32;
        self.lru_push_front(core, i);
    }

    /// Slides the live objects of object frame `f` (not pinned) to its start, in address order.
    fn pack(&mut self, core: &mut CacheCore, f: u32) {
        let fm = core.frames[f as usize];
        debug_assert!(fm.pins == 0, "a pinned frame is never packed");
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        core.detach_installed(f, &mut order);
        order.sort_unstable();
        // Compacted in place: it keeps its decay count (`CacheCore::decays`, which a frame's
        // reset leaves alone), against which its objects' usage is read.
        core.frames[f as usize] = FrameMeta { kind: FrameKind::Compacted, ..FrameMeta::FREE };
        let base = core.frame_base(f);
        for &(loc, i) in &order {
            let size = core.object_size(loc);
            // Each object moves down (or stays): those after it are untouched.
            let to = (base + core.frames[f as usize].used as usize) as u32;
            core.move_object(i, to, size);
        }
        self.live[f as usize] = core.frames[f as usize].used;
        self.order = order;
        self.stats.frames_compacted += 1;
    }

    /// Evicts least recently used objects until the frame of the last one evicted has room for
    /// `size` bytes, packs that frame and makes it the target. Objects that are modified or in
    /// a pinned frame are passed over (and become the most recently used: they are in use).
    /// If the buffer runs out first, any unpinned frame with room will do. False if none has.
    ///
    /// Room is made per object, as a buddy system allocates per object: making room for the
    /// rest of the evicted page at once packs a frame once per eviction instead of once per
    /// object (six times less replacement time on OO7 T1- at 1 MB) but evicts more, since the
    /// room freed is spread over frames (4% to 40% more fetches at 1 to 3 MB).
    fn make_room(&mut self, core: &mut CacheCore, size: usize) -> bool {
        let mut found = false;
        while self.tail != NIL {
            let i = self.tail;
            self.lru_remove(i);
            if !self.in_object_buffer(core, i) {
                continue;
            }
            let loc = core.entries[i as usize].loc;
            let f = core.frame_of(loc);
            if core.frames[f as usize].pins > 0 || core.entries[i as usize].flags & F_MODIFIED != 0
            {
                self.held.push(i);
                continue;
            }
            let sz = core.object_size(loc) as u32;
            core.unlink_installed(i);
            core.frames[f as usize].objects -= 1;
            core.discard(i);
            self.live[f as usize] = self.live[f as usize].saturating_sub(sz);
            self.stats.objects_dropped += 1;
            if core.page_size - self.live[f as usize] as usize >= size {
                self.pack(core, f);
                if core.frames[f as usize].used as usize + size <= core.page_size {
                    self.target = f;
                    found = true;
                    break;
                }
            }
        }
        if !found {
            // Everything evictable left (the rest is modified or pinned) without the last
            // evicted object's frame having room: another unpinned frame may have it.
            found = self.room_anywhere(core, size);
        }
        let mut held = std::mem::take(&mut self.held);
        for i in held.drain(..) {
            self.lru_push_front(core, i);
        }
        self.held = held;
        found
    }

    /// Packs an unpinned object frame with room for `size` bytes, if any, and makes it the
    /// target (after `make_room` ran out of objects to evict: a rare path, a scan of the
    /// buffer's frames).
    fn room_anywhere(&mut self, core: &mut CacheCore, size: usize) -> bool {
        let Some(k) = (0..self.object_frames.len()).find(|&k| {
            let f = self.object_frames[k] as usize;
            core.frames[f].pins == 0 && core.page_size - self.live[f] as usize >= size
        }) else {
            return false;
        };
        let f = self.object_frames[k];
        self.pack(core, f);
        if core.frames[f as usize].used as usize + size > core.page_size {
            return false;
        }
        self.target = f;
        true
    }

    /// Empties an object frame (the one with the fewest live bytes among those neither pinned
    /// nor holding modified objects) and frees it. False if there is none.
    fn free_object_frame(&mut self, core: &mut CacheCore) -> bool {
        let Some(k) = (0..self.object_frames.len())
            .filter(|&k| {
                let fm = &core.frames[self.object_frames[k] as usize];
                fm.pins == 0 && fm.modified == 0
            })
            .min_by_key(|&k| self.live[self.object_frames[k] as usize])
        else {
            return false;
        };
        let f = self.object_frames.swap_remove(k);
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        core.detach_installed(f, &mut order);
        for &(_, i) in &order {
            self.lru_remove(i);
            core.discard(i);
            self.stats.objects_dropped += 1;
        }
        self.order = order;
        self.role[f as usize] = Role::None;
        self.live[f as usize] = 0;
        if self.target == f {
            self.target = NIL;
        }
        core.release_frame(f);
        true
    }

    // ----- the page buffer -----

    /// Evicts the least recently used page that is neither pinned nor modified, copying its
    /// used objects to the object buffer.
    fn evict_page(&mut self, core: &mut CacheCore) -> Evicted {
        let mut victim = None;
        while let Some(v) = self.pages.evict(None) {
            let fm = &core.frames[v as usize];
            if fm.pins > 0 || fm.modified > 0 {
                self.skipped.push(v);
                continue;
            }
            victim = Some(v as u32);
            break;
        }
        for v in self.skipped.drain(..) {
            let _ = self.pages.insert(v, Placement::Referenced);
        }
        self.last = u32::MAX;
        let Some(v) = victim else { return Evicted::Nothing };
        self.role[v as usize] = Role::None;
        let fm = core.frames[v as usize];
        // An intact, unwritten page may go back down to the server.
        core.capture_for_demotion(v);
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        core.detach_installed(v, &mut order);
        order.sort_unstable();
        let mut dropped = u64::from(fm.objects.saturating_sub(fm.installed));
        let (mut kept, mut home) = (0u64, 0u64);
        core.unmap_page(v);
        let quota = self.params.object_frames(core.usable_frames());
        let mut in_place = false;
        // Once making room failed (everything left is modified or pinned), the rest of the
        // page's objects are dropped rather than each walking the whole buffer again.
        let mut no_room = quota == 0;
        for &(loc, i) in &order {
            let size = core.object_size(loc);
            let oref = core.entries[i as usize].oref;
            if let Some(to) = core.home_slot(oref, size, v) {
                core.move_object(i, to, size);
                home += 1;
                continue;
            }
            if !in_place {
                if let Some(to) = self.target_room(core, size) {
                    self.place(core, i, to, size);
                    kept += 1;
                    continue;
                }
                if self.object_frames.len() < quota {
                    // The buffer is below its share: this frame joins it, and the rest of the
                    // page's used objects are packed inside it (they fit: they were in it).
                    // It keeps its decay count (`CacheCore::decays`): the usage of the objects
                    // still to move is read against it.
                    core.frames[v as usize] =
                        FrameMeta { kind: FrameKind::Compacted, ..FrameMeta::FREE };
                    self.role[v as usize] = Role::Object;
                    self.live[v as usize] = 0;
                    self.object_frames.push(v);
                    self.target = v;
                    in_place = true;
                } else if no_room || !self.make_room(core, size) {
                    no_room = true;
                    core.discard(i);
                    dropped += 1;
                    continue;
                } else {
                    let to = self.target_room(core, size).expect("make_room made room");
                    self.place(core, i, to, size);
                    kept += 1;
                    continue;
                }
            }
            // In place: objects move down in address order, over bytes already processed.
            let to = (core.frame_base(v) + core.frames[v as usize].used as usize) as u32;
            self.place(core, i, to, size);
            kept += 1;
        }
        self.order = order;
        self.stats.frames_evicted += 1;
        self.stats.objects_kept += kept;
        self.stats.objects_moved_home += home;
        self.stats.objects_dropped += dropped;
        if in_place {
            return Evicted::BecameObjectFrame;
        }
        core.release_frame(v);
        Evicted::Freed
    }

    /// Page `frame` was just installed: its objects in the object buffer go back into it.
    fn bring_home(&mut self, core: &mut CacheCore, frame: u32) {
        let page = core.frames[frame as usize].page;
        if !core.has_resident_objects(page) {
            return;
        }
        let Some(pid) = thor_core::PageId::new(page) else { return };
        let mut oids = std::mem::take(&mut self.oids);
        oids.clear();
        {
            let view = PageView::assume_parsed(core.arena.frame(frame as usize));
            oids.extend(view.objects().map(|(oid, _)| oid.get()));
        }
        for &oid in &oids {
            let Some(oid) = Oid::new(oid) else { continue };
            let oref = Oref::new(pid, oid);
            let Some(i) = core.lookup(oref.raw()) else { continue };
            if !self.in_object_buffer(core, i) {
                continue;
            }
            let loc = core.entries[i as usize].loc;
            let from = core.frame_of(loc);
            if core.frames[from as usize].pins > 0 {
                continue;
            }
            let size = core.object_size(loc);
            let Some(to) = core.home_slot(oref.raw(), size, from) else { continue };
            debug_assert_eq!(core.frame_of(to), frame);
            core.unlink_installed(i);
            core.frames[from as usize].objects -= 1;
            self.live[from as usize] = self.live[from as usize].saturating_sub(size as u32);
            self.lru_remove(i);
            let modified = core.entries[i as usize].flags & F_MODIFIED != 0;
            core.move_object(i, to, size);
            if modified {
                // The frame no longer holds the page as the server sent it: not demoted.
                core.frames[frame as usize].written = true;
            }
            self.stats.objects_moved_home += 1;
        }
        self.oids = oids;
    }
}

impl CacheManager for Gom {
    fn name(&self) -> &'static str {
        "gom"
    }

    #[inline]
    fn touch(
        &mut self,
        _entry: &mut Entry,
        index: u32,
        _meta: &mut FrameMeta,
        _decays: u8,
        frame: u32,
    ) {
        match self.role[frame as usize] {
            Role::Object => {
                // Every object placed in the buffer is in the list; the check keeps a stray
                // touch from corrupting it.
                if self.head != index && self.lru_linked(index) {
                    self.lru_remove(index);
                    self.link_front(index);
                }
            }
            _ => {
                if frame != self.last {
                    self.pages.touch(u64::from(frame));
                    self.last = frame;
                }
            }
        }
    }

    fn page_installed(&mut self, core: &mut CacheCore, frame: u32) {
        // A freshly fetched page is the most recently used.
        let _ = self.pages.insert(u64::from(frame), Placement::Referenced);
        self.role[frame as usize] = Role::Page;
        self.last = frame;
        self.bring_home(core, frame);
    }

    fn free_frame(
        &mut self,
        core: &mut CacheCore,
        _timer: &mut ReplacementTimer,
    ) -> Result<(), CacheError> {
        loop {
            // The tables took frames from the budget: the object buffer gives back its excess.
            if self.object_frames.len() > self.params.object_frames(core.usable_frames())
                && self.free_object_frame(core)
            {
                return Ok(());
            }
            match self.evict_page(core) {
                Evicted::Freed => return Ok(()),
                // Bounded: the object buffer grows by a frame each time, up to its share.
                Evicted::BecameObjectFrame => continue,
                Evicted::Nothing => {
                    // Every page is pinned or modified: the object buffer lends a frame.
                    if self.free_object_frame(core) {
                        return Ok(());
                    }
                    return Err(CacheError::Full { frames: core.usable_frames() });
                }
            }
        }
    }

    fn new_frame_committed(&mut self, core: &mut CacheCore, frame: u32) {
        // As FPC: created objects are fetched again in their pages when used, unless a view
        // still points into their frame; then they stay, in the page buffer.
        let fm = &mut core.frames[frame as usize];
        debug_assert_eq!(fm.kind, FrameKind::New);
        if fm.pins > 0 {
            fm.kind = FrameKind::Compacted;
            let _ = self.pages.insert(u64::from(frame), Placement::Referenced);
            self.role[frame as usize] = Role::Page;
            self.last = frame;
            return;
        }
        core.evict_frame(frame);
    }

    fn frame_released(&mut self, frame: u32) {
        self.pages.remove(u64::from(frame));
        if self.role[frame as usize] == Role::Object {
            self.object_frames.retain(|&f| f != frame);
        }
        self.role[frame as usize] = Role::None;
        if self.last == frame {
            self.last = u32::MAX;
        }
        if self.target == frame {
            self.target = NIL;
        }
    }

    fn table_bytes(&self) -> usize {
        self.frames * BYTES_PER_FRAME
            + self.object_frames.capacity() * 4
            + (self.next.capacity() + self.prev.capacity()) * 4
            + self.skipped.capacity() * 8
            + self.held.capacity() * 4
            + self.order.capacity() * 8
            + self.oids.capacity() * 2
    }

    fn stats(&self) -> ReplacementStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use thor_core::PageId;

    use super::*;
    use crate::hac::tests::{
        PAGE, TAG_AT, access_fetching, cache, initial_tag, obj, op, oref, random_workload,
    };
    use crate::manager::{ClientCache, Manager, PolicyConfig};

    fn gom(permille: u16) -> PolicyConfig {
        PolicyConfig::Gom(GomParams { object_permille: permille })
    }

    fn manager(c: &ClientCache) -> &Gom {
        match &c.manager {
            Manager::Gom(g) => g,
            other => panic!("not GOM: {other:?}"),
        }
    }

    /// Whether object `o` is resident in the object buffer, and its tag there.
    fn in_buffer(c: &ClientCache, o: Oref) -> Option<u32> {
        let i = c.core.lookup(o.raw())?;
        manager(c)
            .in_object_buffer(&c.core, i)
            .then(|| c.core.arena.read_u32(c.core.entries[i as usize].loc as usize + TAG_AT))
    }

    fn resident(c: &ClientCache, o: Oref) -> bool {
        c.core.lookup(o.raw()).is_some_and(|i| c.core.entries[i as usize].loc != NOT_RESIDENT)
    }

    fn tag_of(c: &ClientCache, o: Oref) -> u32 {
        let i = c.core.lookup(o.raw()).unwrap();
        c.core.arena.read_u32(c.core.entries[i as usize].loc as usize + TAG_AT)
    }

    #[test]
    fn split_is_a_setting() {
        for (s, permille) in [
            ("gom", GomParams::DEFAULT.object_permille),
            ("GOM:obj=0.5", 500),
            ("gom:obj=.25", 250),
            ("gom: obj = 0.125", 125),
            ("gom:obj=0", 0),
            ("gom:obj=0.9", 900),
        ] {
            let p: PolicyConfig = s.parse().unwrap();
            assert_eq!(p, gom(permille), "{s}");
            assert_eq!(p.to_string().parse::<PolicyConfig>().unwrap(), p, "{s}");
        }
        assert_eq!(gom(500).to_string(), "gom:obj=0.5");
        assert_eq!(gom(125).to_string(), "gom:obj=0.125");
        assert_eq!(gom(0).to_string(), "gom:obj=0");
        assert_eq!(PolicyConfig::Gom(GomParams::DEFAULT).to_string(), "gom");
        for bad in
            ["gom:obj=1", "gom:obj=0.95", "gom:obj=-0.1", "gom:obj=", "gom:x=1", "gom:obj=0.1234"]
        {
            match bad.parse::<PolicyConfig>() {
                Err(CacheError::BadConfig(why)) => assert!(why.contains("obj="), "{bad}: {why}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let Err(CacheError::BadConfig(why)) = "nope".parse::<PolicyConfig>() else { panic!() };
        for name in ["fpc", "hac", "quickstore", "wtinylfu", "gom"] {
            assert!(why.contains(name), "{why}");
        }

        // The share bounds the object buffer, and leaves the page buffer its minimum.
        assert_eq!(GomParams { object_permille: 500 }.object_frames(40), 20);
        assert_eq!(GomParams { object_permille: 900 }.object_frames(4), 1);
        let committed = HashMap::new();
        for permille in [0, 200, 500, 900] {
            let mut c = cache(24, gom(permille), true);
            for round in 0..3u16 {
                for p in 2..60u32 {
                    access_fetching(&mut c, oref(p, round), &committed).unwrap();
                    let g = manager(&c);
                    assert!(g.object_buffer_frames() <= g.params.object_frames(c.usable_frames()));
                }
            }
            let g = manager(&c);
            if permille == 0 {
                assert_eq!(g.object_buffer_frames(), 0);
                assert_eq!(c.stats().replacement.objects_kept, 0);
            } else {
                // It grows when a copied object finds no room, up to its share.
                assert!(g.object_buffer_frames() > 0);
                assert!(c.stats().replacement.objects_kept > 0);
            }
            c.check_invariants().unwrap();
        }
    }

    /// With no object buffer GOM is FPC: the same pages, perfect LRU, the same misses.
    #[test]
    fn an_empty_object_buffer_is_fpc() {
        let committed = HashMap::new();
        let mut fetches = Vec::new();
        for policy in [PolicyConfig::Fpc, gom(0)] {
            let mut c = cache(20, policy, true);
            for round in 0..6u32 {
                for p in 2..50u32 {
                    let o = ((p * 7 + round * 3) % 12) as u16;
                    access_fetching(&mut c, oref(2 + (p * round) % 48, o), &committed).unwrap();
                }
            }
            fetches.push(c.stats().fetches());
        }
        assert_eq!(fetches[0], fetches[1]);
    }

    /// Fills the page buffer with pages 100.. (one access each) until `o`'s page is evicted.
    fn evict_page_of(c: &mut ClientCache, o: Oref, next: &mut u32) {
        let page = o.page().unwrap();
        let committed = HashMap::new();
        while c.has_page(page) {
            access_fetching(c, oref(*next, 0), &committed).unwrap();
            *next += 1;
        }
    }

    #[test]
    fn used_objects_of_an_evicted_page_move_to_the_object_buffer() {
        let committed = HashMap::new();
        let mut c = cache(24, gom(500), true);
        for o in [0, 3, 7] {
            access_fetching(&mut c, oref(2, o), &committed).unwrap();
        }
        let mut next = 100;
        evict_page_of(&mut c, oref(2, 0), &mut next);
        for o in [0, 3, 7] {
            assert_eq!(in_buffer(&c, oref(2, o)), Some(initial_tag(oref(2, o))), "2.{o}");
        }
        // Objects nobody used left with the page.
        for o in [1, 2, 4, 11] {
            assert!(!resident(&c, oref(2, o)), "2.{o}");
        }
        assert!(c.stats().replacement.objects_kept >= 3);
        // And they are hits: no fetch.
        let before = c.stats().fetches();
        for o in [0, 3, 7] {
            access_fetching(&mut c, oref(2, o), &committed).unwrap();
        }
        assert_eq!(c.stats().fetches(), before);
        c.check_invariants().unwrap();
    }

    #[test]
    fn objects_return_to_their_page_when_it_is_refetched() {
        let committed = HashMap::new();
        let mut c = cache(24, gom(500), true);
        for o in [0, 5] {
            access_fetching(&mut c, oref(2, o), &committed).unwrap();
        }
        let mut next = 100;
        evict_page_of(&mut c, oref(2, 0), &mut next);
        // The transaction writes 2.0 in the object buffer; 2.5 keeps its committed bytes.
        let (i0, loc0) = access_fetching(&mut c, oref(2, 0), &committed).unwrap();
        assert!(in_buffer(&c, oref(2, 0)).is_some());
        c.before_write(i0).unwrap();
        c.core.arena.write_u32(loc0 as usize + TAG_AT, 777);
        let i5 = c.core.lookup(oref(2, 5).raw()).unwrap();
        // An access to an object of page 2 the buffer lacks fetches the page (with the
        // committed, older tag of 2.0): both objects go back into it.
        let moved = c.stats().replacement.objects_moved_home;
        access_fetching(&mut c, oref(2, 1), &committed).unwrap();
        let g = c.core.page_frame(PageId::new(2).unwrap()).unwrap();
        for (o, i) in [(0u16, i0), (5, i5)] {
            let loc = c.core.entries[i as usize].loc;
            assert_eq!(c.core.frame_of(loc), g, "2.{o} is in its page");
            let view = PageView::assume_parsed(c.core.arena.frame(g as usize));
            let slot = view.object_range(Oid::new(o).unwrap()).unwrap();
            assert_eq!(loc as usize, c.core.frame_base(g) + slot.start, "2.{o} in its slot");
            assert_eq!(c.core.lookup(oref(2, o).raw()), Some(i), "the same entry");
            assert!(in_buffer(&c, oref(2, o)).is_none());
        }
        assert_eq!(c.stats().replacement.objects_moved_home - moved, 2);
        assert_eq!(tag_of(&c, oref(2, 0)), 777, "the transaction's write is kept");
        assert_eq!(tag_of(&c, oref(2, 5)), initial_tag(oref(2, 5)));
        assert_ne!(c.core.entries[i0 as usize].flags & F_MODIFIED, 0, "still modified");
        assert_eq!(c.core.frames[g as usize].modified, 1);
        c.check_invariants().unwrap();
        // No-steal holds with the object back in its page: the page stays until commit.
        evict_page_of_bounded(&mut c, &mut next, 60);
        assert!(c.has_page(PageId::new(2).unwrap()));
        assert_eq!(tag_of(&c, oref(2, 0)), 777);
        c.check_invariants().unwrap();
    }

    /// Fetches `n` new pages, one access each.
    fn evict_page_of_bounded(c: &mut ClientCache, next: &mut u32, n: u32) {
        let committed = HashMap::new();
        for _ in 0..n {
            access_fetching(c, oref(*next, 0), &committed).unwrap();
            *next += 1;
        }
    }

    #[test]
    fn object_buffer_evicts_least_recently_used_object() {
        // Pages of one object of 1,300 bytes: three fit in a frame. A share that gives the
        // object buffer exactly one frame (34 usable frames, once the tables have theirs).
        let committed = HashMap::new();
        let mut c = cache(41, gom(30), true);
        assert_eq!(manager(&c).params.object_frames(c.usable_frames()), 1);
        let big = |p: u32| oref(p, 0);
        let fetch_big = |c: &mut ClientCache, p: u32| {
            let objs = [obj(initial_tag(big(p)), 1300, None)];
            if !c.has_page(PageId::new(p).unwrap()) {
                crate::hac::tests::fetch(c, p, &objs);
            }
            crate::hac::tests::get(c, big(p));
        };
        let mut p = 2;
        // Fill the buffer: 2.0, 3.0, 4.0 evicted with their pages, in that order.
        while in_buffer(&c, big(4)).is_none() {
            assert!(p < 200, "4.0 never reached the object buffer");
            fetch_big(&mut c, p);
            p += 1;
        }
        assert_eq!(manager(&c).object_buffer_frames(), 1);
        for q in 2..=4 {
            assert!(in_buffer(&c, big(q)).is_some(), "{q}");
        }
        // 2.0 is used again: 3.0 is the least recently used now.
        let before = c.stats().fetches();
        let _ = access_fetching(&mut c, big(2), &committed);
        assert_eq!(c.stats().fetches(), before, "a hit in the object buffer");
        // The next page evicted needs room: 3.0 goes, and only it.
        let dropped = c.stats().replacement.objects_dropped;
        while c.stats().replacement.objects_dropped == dropped {
            fetch_big(&mut c, p);
            p += 1;
        }
        assert_eq!(c.stats().replacement.objects_dropped - dropped, 1);
        assert!(!resident(&c, big(3)), "the least recently used object left");
        assert!(in_buffer(&c, big(2)).is_some() && in_buffer(&c, big(4)).is_some());
        assert!(in_buffer(&c, big(5)).is_some(), "the newcomer took its room");
        assert_eq!(manager(&c).params.object_frames(c.usable_frames()), 1);
        assert!(c.stats().replacement.frames_compacted >= 1, "the frame was packed");
        c.check_invariants().unwrap();
    }

    #[test]
    fn modified_and_pinned_objects_stay_in_the_object_buffer() {
        let committed = HashMap::new();
        let mut c = cache(24, gom(300), true);
        let mut next = 100;
        for o in [0, 1] {
            access_fetching(&mut c, oref(2, o), &committed).unwrap();
        }
        evict_page_of(&mut c, oref(2, 0), &mut next);
        let (m, _) = access_fetching(&mut c, oref(2, 0), &committed).unwrap();
        c.before_write(m).unwrap();
        let (_, pinned) = access_fetching(&mut c, oref(2, 1), &committed).unwrap();
        c.pin(pinned);
        // Many pages later, with the buffer turned over many times, both are still there, and
        // the pinned one has not moved.
        for _ in 0..400 {
            for o in [0, 3] {
                access_fetching(&mut c, oref(next, o), &committed).unwrap();
            }
            next += 1;
        }
        assert!(c.stats().replacement.objects_dropped > 100);
        assert!(in_buffer(&c, oref(2, 0)).is_some());
        assert_eq!(c.location(c.lookup(oref(2, 1).raw()).unwrap(), oref(2, 1).raw()), Some(pinned));
        c.check_invariants().unwrap();
        c.unpin(pinned);
        c.commit_done(&[]).unwrap();
        for _ in 0..400 {
            access_fetching(&mut c, oref(next, 0), &committed).unwrap();
            next += 1;
        }
        assert!(!resident(&c, oref(2, 0)) && !resident(&c, oref(2, 1)), "gone once released");
        c.check_invariants().unwrap();
    }

    /// The case dual buffering is for: one hot object in each of more pages than the cache
    /// holds. FPC misses on every access; GOM keeps the hot objects in its object buffer.
    #[test]
    fn gom_keeps_the_used_objects_of_pages_it_evicts() {
        let committed = HashMap::new();
        let mut late = Vec::new();
        for policy in [PolicyConfig::Fpc, gom(500)] {
            let mut c = cache(24, policy, true);
            let mut n = 0;
            for round in 0..10 {
                for p in 2..62u32 {
                    let before = c.stats().fetches();
                    access_fetching(&mut c, oref(p, 0), &committed).unwrap();
                    if round >= 5 {
                        n += c.stats().fetches() - before;
                    }
                }
            }
            c.check_invariants().unwrap();
            late.push(n);
        }
        assert_eq!(late[0], 5 * 60);
        assert_eq!(late[1], 0, "every hot object fits in the object buffer");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The model test HAC, FPC and the paged managers run: reads correct, budget held,
        /// no-steal, pins respected, after every step; at splits from none to the largest.
        #[test]
        fn gom_keeps_its_invariants_under_random_workloads(
            ops in proptest::collection::vec(op(), 1..300),
            frames in 8usize..20,
            split in prop_oneof![Just(0u16), Just(200), Just(500), Just(OBJECT_PERMILLE_MAX)],
            background in any::<bool>(),
        ) {
            random_workload(gom(split), ops, frames, background)?;
        }
    }

    const _: () = assert!(PAGE == 4096);
}
