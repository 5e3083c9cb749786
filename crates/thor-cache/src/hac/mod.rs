//! HAC: hybrid adaptive caching (`papers/hac-sosp97.txt` sections 2.3 and 3,
//! `papers/thor-ecoop99.txt` section 5).
//!
//! Page caching keeps whole pages: cheap, and good when a page's objects are used together, but
//! a page with one hot object and fifty cold ones wastes the space of fifty. Object caching keeps
//! single objects but fragments memory and pays per-object bookkeeping. HAC is both: it fetches
//! and caches pages, and when it needs room it *compacts* frames whose pages are poorly used,
//! keeping only their hot objects. Pages with good locality stay intact; from the others only
//! the useful objects stay, packed together.
//!
//! # Frames
//!
//! The cache is one arena of page-sized frames ([`crate::arena`]). An *intact* frame holds a
//! page as fetched (header, objects, offset table); a *compacted* frame holds objects kept from
//! other frames, laid out one after another from its start with no header. Either way the
//! indirection table ([`crate::core`]) says where each installed object is, so objects can move
//! and leave without touching the references to them.
//!
//! ```text
//!   arena   [ F0 intact p17 ][ F1 compacted ][ F2 free ][ F3 intact p9 ][ F4 target ] ...
//!                                  ▲                                        ▲
//!                   objects kept from p3, p12, p40        where kept objects go next
//! ```
//!
//! # Compaction (section 3.1)
//!
//! To free a frame HAC picks a *victim* V, drops its cold objects and moves its hot ones, in
//! address order (so objects from one page stay together), to the end of the current *target*
//! frame T:
//!
//! ```text
//!   (a) the hot objects fit in T            (b) they do not
//!
//!   V [ a . . b . c ]   T [ x y z _ _ _ ]   V [ a b . c . d ]   T [ x y z w v _ ]
//!   ───────────────────────────────────     ─────────────────────────────────────
//!   V [ free        ]   T [ x y z a b c ]   V [ c d _ _ _ _ ]   T [ x y z w v a b ]
//!                                           T is full: it joins the candidate set;
//!   V receives the next page.               V is the new target; free another frame.
//! ```
//!
//! *The duplicate case.* A fetched page P may hold a copy of an object o that is installed
//! elsewhere (it was kept by an earlier compaction of P's old frame, or P was fetched again).
//! Nothing happens at the fetch: P's copy is simply never installed, because o's entry points
//! at the installed copy. If P's frame is compacted, the copy is dropped with P's other
//! uninstalled objects. If instead the frame holding the installed copy is compacted and o is
//! kept, o moves back into its slot in P rather than into the target
//! ([`CacheCore::home_slot`](crate::core::CacheCore::home_slot)).
//!
//! # Usage (section 3.2, [`usage`])
//!
//! 4 usage bits per object: an access sets the top bit ([`Hac::touch`](CacheManager::touch),
//! on the hit path), and scanning a frame at the primary pointer decays its objects (add one,
//! shift right). A frame's usage `<T, H>`: the threshold T is the smallest usage such that
//! the fraction H of its objects above T is below the retention fraction R; compacting the
//! frame keeps the objects above T. Modified objects are kept whatever their usage (no-steal)
//! and count as hot at every threshold.
//!
//! # Choosing victims (sections 3.2.3 and 3.2.4, [`candidates`])
//!
//! Computing a frame's usage scans its objects, so it is done for a few frames per fetch (an
//! *epoch*) and remembered for E epochs in the *candidate set*, from which the least valuable
//! frame is taken in O(log E). Frames enter the set from a CLOCK-like sweep over the frames:
//!
//! ```text
//!             primary                secondary 1             secondary 2
//!               ▼                        ▼                       ▼
//!   frames [ . . S S S . . . . . . . . . s s s . . . . . . . . . s s s . . . . . ]
//!            usage computed and           added only if fewer than R of their
//!            objects decayed              objects are installed (T = 0)
//! ```
//!
//! Each epoch the primary pointer computes the usage of S frames (decaying their objects) and
//! adds them; each of the N secondary pointers, spaced equally around the frames, looks at S
//! frames' installed-object counts (no scan) and adds those with fewer than a fraction R
//! installed, whose threshold is 0: they are mostly objects nobody used since the page came,
//! and evicting them promptly is what keeps pages with poor locality from filling the cache.
//! A newly fetched page lands in a frame a pointer just passed, so it is protected until the
//! pointers come round, about `1 / ((N + 1) S)` of the frames later.
//!
//! The victim is the least valuable candidate that is not pinned (ties: the most recently
//! added, whose usage is freshest). A target that fills up joins the candidate set: the objects
//! compacted into it may be colder than those of the frames already there. Usage in the set may
//! be old; that only means a victim may give back less room than expected, because an object
//! used since its frame was added has a usage above the threshold and is kept.
//!
//! # Pins, no-steal, created objects
//!
//! - A frame with a view into it (`FrameMeta::pins`) is never chosen, so a viewed object never
//!   moves or leaves (section 3.2.4's invariant, with views instead of the stack).
//! - Modified objects are kept by compaction and moved like others; they never leave before the
//!   transaction ends. A frame holding only modified objects is passed over: compacting it
//!   would free nothing.
//! - Created objects live in `New` frames that HAC never touches during their transaction; at
//!   commit the frame becomes a compacted frame (its objects are already packed) and enters the
//!   candidate set, so the created objects stay cached while they are used.
//!
//! # Replacement off the critical path (section 3.3)
//!
//! One frame is always free for the next fetched page; the next one is freed while the fetch
//! is on the wire ([`ClientCache::while_fetching`](crate::ClientCache::while_fetching)). With
//! `background_replacement: false` (HAC-FG in the paper) frames are freed when pages arrive.
//!
//! # Settings
//!
//! [`HacParams`]: R = 2/3, E = 20, N = 2, S = 3 (the paper's Table 1), all settable; the bounds
//! are in [`limits`].

pub mod candidates;
pub mod usage;

#[cfg(test)]
pub(crate) mod tests;

use crate::core::{
    CacheCore, Entry, F_MODIFIED, FrameKind, FrameMeta, NIL, USAGE_MAX, USAGE_TOP, usage_now,
    usage_stored,
};
use crate::error::CacheError;
use crate::limits;
use crate::manager::{CacheManager, ReplacementStats};
use crate::timer::ReplacementTimer;

use candidates::{Candidate, CandidateSet};
use usage::{FrameUsage, UsageHistogram, decayed};

/// A fraction `num / den` in (0, 1], exact (R = 2/3 is not a binary float).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fraction {
    /// Numerator.
    pub num: u32,
    /// Denominator.
    pub den: u32,
}

impl Fraction {
    /// 2/3, the paper's R.
    pub const TWO_THIRDS: Fraction = Fraction { num: 2, den: 3 };

    /// `num / den`, if it is in (0, 1] with a denominator of at most
    /// [`limits::RETENTION_DENOMINATOR_MAX`].
    pub fn new(num: u32, den: u32) -> Result<Fraction, CacheError> {
        if num == 0 || num > den || den > limits::RETENTION_DENOMINATOR_MAX {
            return Err(CacheError::BadConfig(format!(
                "retention fraction {num}/{den} must be in (0, 1] with a denominator of at most {}",
                limits::RETENTION_DENOMINATOR_MAX
            )));
        }
        Ok(Fraction { num, den })
    }

    /// Whether `part / whole` is below this fraction (`false` for an empty whole).
    #[inline]
    pub fn exceeds(self, part: u32, whole: u32) -> bool {
        u64::from(part) * u64::from(self.den) < u64::from(self.num) * u64::from(whole)
    }
}

impl std::fmt::Display for Fraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

impl std::str::FromStr for Fraction {
    type Err = CacheError;
    /// `2/3` or a decimal such as `0.67`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || CacheError::BadConfig(format!("bad fraction {s:?} (expected like 2/3 or 0.67)"));
        if let Some((n, d)) = s.split_once('/') {
            let n = n.trim().parse().map_err(|_| bad())?;
            let d = d.trim().parse().map_err(|_| bad())?;
            return Fraction::new(n, d);
        }
        let (int, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
        if frac.len() > 4 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let int: u32 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
        let den = 10u32.pow(frac.len() as u32);
        let f: u32 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| bad())? };
        let num = int.checked_mul(den).and_then(|x| x.checked_add(f)).ok_or_else(bad)?;
        Fraction::new(num, den)
    }
}

/// HAC's settings (`papers/hac-sosp97.txt` Table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HacParams {
    /// R, the retention fraction: a frame's threshold keeps fewer than this fraction of its
    /// objects, and secondary pointers add frames with fewer than this fraction installed.
    /// Larger keeps more (fewer misses) but frees less per compaction (more compactions).
    pub retention: Fraction,
    /// E: epochs (fetches) a frame stays in the candidate set before its usage counts as stale.
    pub epochs: u32,
    /// N: secondary scan pointers, which find frames full of objects nobody used.
    pub secondary_pointers: u32,
    /// S: frames each pointer looks at per epoch; it also sets how fast usage decays.
    pub scan_frames: u32,
}

impl Default for HacParams {
    fn default() -> Self {
        HacParams::PAPER
    }
}

impl HacParams {
    /// The paper's settings: R = 2/3, E = 20, N = 2, S = 3.
    pub const PAPER: HacParams = HacParams {
        retention: Fraction::TWO_THIRDS,
        epochs: 20,
        secondary_pointers: 2,
        scan_frames: 3,
    };

    /// Checks the settings against [`limits`].
    pub fn validate(&self) -> Result<(), CacheError> {
        Fraction::new(self.retention.num, self.retention.den)?;
        let check = |what: &str, v: u32, lo: u32, hi: u32| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(CacheError::BadConfig(format!("HAC {what} = {v} is outside {lo}..={hi}")))
            }
        };
        check("E (epochs)", self.epochs, 1, limits::EPOCHS_MAX)?;
        check(
            "N (secondary pointers)",
            self.secondary_pointers,
            0,
            limits::SECONDARY_POINTERS_MAX,
        )?;
        check("S (frames scanned)", self.scan_frames, 1, limits::SCAN_FRAMES_MAX)
    }
}

impl std::fmt::Display for HacParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "r={},e={},n={},s={}",
            self.retention, self.epochs, self.secondary_pointers, self.scan_frames
        )
    }
}

impl std::str::FromStr for HacParams {
    type Err = CacheError;
    /// Comma-separated `key=value` settings over the defaults: `r=2/3,e=20,n=2,s=3` (any
    /// subset, any order; an empty string gives the defaults).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = HacParams::default();
        for kv in s.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                CacheError::BadConfig(format!("HAC setting {kv:?} is not key=value"))
            })?;
            let int = |v: &str| {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| CacheError::BadConfig(format!("HAC setting {kv:?}: not a number")))
            };
            match k.trim().to_ascii_lowercase().as_str() {
                "r" => p.retention = v.parse()?,
                "e" => p.epochs = int(v)?,
                "n" => p.secondary_pointers = int(v)?,
                "s" => p.scan_frames = int(v)?,
                _ => {
                    return Err(CacheError::BadConfig(format!(
                        "unknown HAC setting {k:?} (expected r, e, n or s)"
                    )));
                }
            }
        }
        p.validate()?;
        Ok(p)
    }
}

/// The HAC cache manager. See the module documentation.
#[derive(Debug)]
pub struct Hac {
    /// R, E, N, S.
    params: HacParams,
    /// Frames whose usage was computed in the last E epochs.
    candidates: CandidateSet,
    /// Per frame, bumped whenever the frame's contents change wholesale or it is added to the
    /// candidate set again: candidates carrying an older stamp are stale.
    stamps: Vec<u32>,
    /// The primary scan pointer; the secondary ones are at fixed distances from it.
    primary: usize,
    /// The frame kept objects are compacted into, or [`NIL`] before the first compaction.
    target: u32,
    /// Counters.
    stats: ReplacementStats,
    /// A victim's installed objects as (location, entry), sorted by location (reused buffer).
    order: Vec<(u32, u32)>,
    /// Candidates passed over while choosing a victim (pinned frames), put back afterwards.
    passed_over: Vec<(usize, Candidate)>,
}

impl Hac {
    /// HAC over `frames` frames.
    pub fn new(frames: usize, params: HacParams) -> Result<Hac, CacheError> {
        params.validate()?;
        Ok(Hac {
            params,
            candidates: CandidateSet::new(params.epochs as usize),
            stamps: vec![0; frames],
            primary: 0,
            target: NIL,
            stats: ReplacementStats::default(),
            order: Vec::new(),
            passed_over: Vec::new(),
        })
    }

    /// The settings.
    pub fn params(&self) -> HacParams {
        self.params
    }

    /// The current compaction target, if any.
    pub fn target(&self) -> Option<u32> {
        (self.target != NIL).then_some(self.target)
    }

    /// The candidate set (for tests and reports).
    pub fn candidates(&self) -> &CandidateSet {
        &self.candidates
    }

    /// The primary scan pointer.
    pub fn primary_pointer(&self) -> usize {
        self.primary
    }

    /// Whether frame `f` may be scanned and compacted: it holds a page or kept objects and is
    /// not the target (created objects' frames wait for their commit; free and retired frames
    /// hold nothing).
    #[inline]
    fn compactable(&self, core: &CacheCore, f: u32) -> bool {
        matches!(core.frames[f as usize].kind, FrameKind::Intact | FrameKind::Compacted)
            && f != self.target
    }

    /// The frame's candidate information, if any, is out of date from now on.
    #[inline]
    fn restamp(&mut self, f: u32) -> u32 {
        let s = &mut self.stamps[f as usize];
        *s = s.wrapping_add(1);
        *s
    }

    fn add_candidate(&mut self, f: u32, usage: FrameUsage) {
        let stamp = self.restamp(f);
        self.candidates.insert(f, stamp, usage);
        self.stats.candidates_added += 1;
    }

    /// The usage of frame `f` from its objects' current usage values, decaying them first if
    /// `decay` (a primary-pointer scan).
    ///
    /// The frame keeps its unmodified objects' counts by usage (`FrameMeta::by_usage`), so
    /// neither the usage nor the decay visits the objects' entries (a cache miss each, a
    /// quarter of a memory-bound run's time when it did). Decaying shifts the counts and
    /// counts the decay; each entry's value catches up when next read (`usage_now`). That
    /// needs fewer than 16 decays between an entry's write and its read, so every 16th decay
    /// also rewrites the frame's entries, decayed, at the new count.
    fn frame_usage(&self, core: &mut CacheCore, f: u32, decay: bool) -> FrameUsage {
        if decay {
            let decays = core.decays[f as usize];
            let next = decays.wrapping_add(1);
            if next.is_multiple_of(16) {
                // Decayed now and written at `next`: until the count reaches `next + 16`, when
                // this is done again, no entry is 16 or more decays behind.
                for i in core.installed.iter(f) {
                    let e = &mut core.entries[i as usize];
                    e.usage = usage_stored(decayed(usage_now(e.usage, decays)), next);
                }
            }
            let fm = &mut core.frames[f as usize];
            let mut by_usage = [0u16; 16];
            for (u, &n) in fm.by_usage.iter().enumerate() {
                by_usage[usize::from(decayed(u as u8))] += n;
            }
            fm.by_usage = by_usage;
            core.decays[f as usize] = next;
        }
        let fm = &core.frames[f as usize];
        let h = UsageHistogram { by_usage: fm.by_usage.map(u32::from), modified: fm.modified };
        h.frame_usage(fm.objects, self.params.retention)
    }

    /// One epoch's sweep: S frames at the primary pointer (usage computed, objects decayed)
    /// and S at each secondary pointer (added if few of their objects are installed).
    fn scan(&mut self, core: &mut CacheCore) {
        let n = core.frames.len();
        if n == 0 {
            return;
        }
        let s = self.params.scan_frames as usize;
        for k in 0..s {
            let f = ((self.primary + k) % n) as u32;
            if self.compactable(core, f) {
                let usage = self.frame_usage(core, f, true);
                self.add_candidate(f, usage);
                self.stats.frames_scanned += 1;
            }
        }
        let pointers = self.params.secondary_pointers as usize;
        let gap = n / (pointers + 1);
        for p in 1..=pointers {
            let start = self.primary + p * gap;
            for k in 0..s {
                let f = ((start + k) % n) as u32;
                if !self.compactable(core, f) {
                    continue;
                }
                let fm = &core.frames[f as usize];
                if fm.objects == 0 || self.params.retention.exceeds(fm.installed, fm.objects) {
                    // Uninstalled objects have usage 0 and fewer than R are installed, so the
                    // threshold is 0; the installed count bounds H from above.
                    let usage = FrameUsage { threshold: 0, hot: fm.installed, objects: fm.objects };
                    self.add_candidate(f, usage);
                }
            }
        }
        self.primary = (self.primary + s) % n;
    }

    /// Takes the least valuable candidate whose frame can be compacted now: not stale, not
    /// pinned, and not made only of modified objects. Candidates passed over for a pin stay in
    /// the set; stale ones leave it.
    fn choose_victim(&mut self, core: &CacheCore) -> Option<Candidate> {
        let mut chosen = None;
        while let Some((bucket, c)) = self.candidates.pop() {
            if c.stamp != self.stamps[c.frame as usize] || !self.compactable(core, c.frame) {
                continue;
            }
            let fm = &core.frames[c.frame as usize];
            if fm.pins > 0 || (fm.modified > 0 && fm.modified == fm.objects) {
                self.passed_over.push((bucket, c));
                continue;
            }
            chosen = Some(c);
            break;
        }
        for (bucket, c) in self.passed_over.drain(..) {
            self.candidates.put(bucket, c);
        }
        chosen
    }

    /// The target is full: it joins the candidate set (its objects may be colder than those of
    /// the frames there) and stops being the target.
    fn target_filled(&mut self, core: &mut CacheCore) {
        let t = self.target;
        self.target = NIL;
        let usage = self.frame_usage(core, t, false);
        self.add_candidate(t, usage);
        self.stats.targets_filled += 1;
    }

    /// Compacts victim `v`: drops its objects with usage at most `threshold` (unless modified)
    /// and moves the others, in address order, back into their pages (the duplicate case) or to
    /// the target. Returns true if `v` was freed, false if the target overflowed and `v`
    /// became the target.
    fn compact(&mut self, core: &mut CacheCore, v: u32, threshold: u8) -> bool {
        let fm = core.frames[v as usize];
        debug_assert!(fm.pins == 0, "pinned frames are never compacted");
        // An intact, unwritten victim is the page as the server sent it: it may go back down.
        core.capture_for_demotion(v);
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        // Detach the frame's list: whatever stays is linked again where it goes.
        core.detach_installed(v, &mut order);
        order.sort_unstable();
        // Uninstalled copies and dead (invalidated) bytes go with the frame.
        let mut dropped = u64::from(fm.objects.saturating_sub(fm.installed));
        let mut kept = 0u64;
        // Detach the frame from its page.
        core.unmap_page(v);
        let mut in_place = false;
        for &(loc, i) in &order {
            let e = core.entries[i as usize];
            if e.flags & F_MODIFIED == 0 && usage_now(e.usage, core.decays[v as usize]) <= threshold
            {
                // Cold: leaves the cache; its references are released and its entry freed if
                // nothing refers to it. Later objects of `v` are untouched by in-place moves
                // (those only move objects down, over bytes already processed).
                core.discard_batched(i);
                dropped += 1;
                continue;
            }
            kept += 1;
            let size = core.object_size_memo(loc);
            if let Some(home) = core.home_slot(e.oref, size, v) {
                core.move_object(i, home, size);
                self.stats.objects_moved_home += 1;
                continue;
            }
            if !in_place {
                if self.target != NIL {
                    let t = &core.frames[self.target as usize];
                    if t.used as usize + size <= core.page_size {
                        let to = (core.frame_base(self.target) + t.used as usize) as u32;
                        core.move_object(i, to, size);
                        continue;
                    }
                    self.target_filled(core);
                }
                // The target overflowed (or there was none yet): the victim becomes the
                // target and the rest of its kept objects are compacted inside it.
                // It keeps its decay count (`CacheCore::decays`, which a frame's reset leaves
                // alone): its remaining objects' usage is read against it.
                core.frames[v as usize] =
                    FrameMeta { kind: FrameKind::Compacted, ..FrameMeta::FREE };
                self.restamp(v);
                self.target = v;
                in_place = true;
            }
            let to = (core.frame_base(v) + core.frames[v as usize].used as usize) as u32;
            core.move_object(i, to, size);
        }
        core.end_discards();
        self.order = order;
        self.stats.objects_kept += kept;
        self.stats.objects_dropped += dropped;
        // A frame counts once: evicted if nothing was kept, compacted otherwise.
        if kept == 0 {
            self.stats.frames_evicted += 1;
        } else {
            self.stats.frames_compacted += 1;
        }
        if in_place {
            return false;
        }
        self.restamp(v);
        core.release_frame(v);
        true
    }
}

/// Whether an entry whose stored usage is `usage`, in a frame decayed `decays` times, was
/// used since that frame's last decay (its top usage bit set at the frame's current count):
/// then an access changes nothing.
#[inline(always)]
pub(crate) fn used_since_decay(usage: u8, decays: u8) -> bool {
    (usage ^ usage_stored(USAGE_TOP, decays)) & !(USAGE_MAX ^ USAGE_TOP) == 0
}

impl CacheManager for Hac {
    fn name(&self) -> &'static str {
        "hac"
    }

    #[inline]
    fn touch(
        &mut self,
        entry: &mut Entry,
        _index: u32,
        frame: &mut FrameMeta,
        decays: u8,
        _f: u32,
    ) {
        // Already used since the frame's last decay: nothing changes (the common case, which
        // reads the entry and the frame's decay count, not its `FrameMeta`; the hit path
        // checks it before calling).
        if used_since_decay(entry.usage, decays) {
            return;
        }
        frame.uncount_usage(entry, decays);
        entry.usage = usage_stored(usage_now(entry.usage, decays) | USAGE_TOP, decays);
        frame.count_usage(entry, decays);
    }

    fn page_installed(&mut self, _core: &mut CacheCore, frame: u32) {
        // Not a candidate until a pointer reaches it: a fresh page is protected for a while.
        self.restamp(frame);
    }

    /// Times the paper's two parts (section 4.4, Figure 10): *usage computation* is the
    /// epoch's scan, any extra scans and choosing each victim from the candidate set; *page
    /// compaction* is each `compact` (which also computes the usage of a target that fills up,
    /// a frame's counts and no scan, so it stays with compaction). One clock read at the start
    /// and one at each boundary.
    fn free_frame(
        &mut self,
        core: &mut CacheCore,
        timer: &mut ReplacementTimer,
    ) -> Result<(), CacheError> {
        let mut lap = timer.now();
        self.candidates.start_epoch();
        self.scan(core);
        let frames = core.frames.len();
        // A whole revolution of the pointers finds every compactable frame.
        let revolution = frames / self.params.scan_frames as usize + 1;
        let mut extra_scans = 0;
        let mut victims = 0;
        loop {
            let Some(victim) = self.choose_victim(core) else {
                if extra_scans >= revolution {
                    timer.usage_since(lap);
                    return Err(CacheError::Full { frames: core.usable_frames() });
                }
                extra_scans += 1;
                self.scan(core);
                continue;
            };
            lap = timer.usage_since(lap);
            let freed = self.compact(core, victim.frame, victim.usage.threshold);
            lap = timer.compaction_since(lap);
            if freed {
                return Ok(());
            }
            victims += 1;
            if victims > frames * limits::VICTIMS_PER_FRAME_MAX {
                return Err(CacheError::Full { frames: core.usable_frames() });
            }
        }
    }

    fn new_frame_committed(&mut self, core: &mut CacheCore, frame: u32) {
        // The created objects are packed from the frame's start like compacted ones, all of
        // them installed: keep them as a compacted frame, a candidate like any other.
        let fm = &mut core.frames[frame as usize];
        debug_assert_eq!(fm.kind, FrameKind::New);
        debug_assert_eq!(fm.installed, fm.objects);
        fm.kind = FrameKind::Compacted;
        let usage = self.frame_usage(core, frame, false);
        self.add_candidate(frame, usage);
    }

    fn frame_released(&mut self, frame: u32) {
        self.restamp(frame);
        if self.target == frame {
            self.target = NIL;
        }
    }

    fn table_bytes(&self) -> usize {
        self.stamps.capacity() * 4
            + self.candidates.memory_bytes()
            + self.order.capacity() * 8
            + self.passed_over.capacity() * std::mem::size_of::<(usize, Candidate)>()
    }

    fn stats(&self) -> ReplacementStats {
        self.stats
    }
}
