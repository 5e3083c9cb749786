//! FPC: whole pages, perfect LRU.
//!
//! The page-caching baseline of the HAC paper (section 4.2.1): identical to HAC (same frames,
//! indirection table, lazy installation and swizzling) except that it evicts whole pages, the
//! least recently used first. Every object access touches its frame in an exact LRU list, so
//! "recently used" is exact, not approximated by a clock.
//!
//! Frames that are pinned (a view points into them) or hold modified objects (no-steal) are
//! passed over; they go back to the recently-used end, since they are in use.
//!
//! A touch of the frame touched last is skipped: that frame is already at the recently-used
//! end, so moving it there again changes nothing. Accesses follow the clustering, so this
//! removes most list moves from the hit path without making LRU any less exact.

use crate::core::{CacheCore, Entry, FrameKind, FrameMeta};
use crate::error::CacheError;
use crate::manager::{CacheManager, ReplacementStats};
use crate::timer::ReplacementTimer;
use thor_policy::{DenseSlots, Lru, Placement, Policy};

/// See the module documentation.
#[derive(Debug)]
pub struct Fpc {
    /// Intact frames in LRU order.
    lru: Lru<DenseSlots>,
    /// Counters.
    stats: ReplacementStats,
    /// Frames passed over in one `free_frame` call (reused buffer).
    skipped: Vec<u64>,
    /// Frames the LRU list can hold, for the memory estimate.
    frames: usize,
    /// The frame at the recently-used end of `lru` when known, or `u32::MAX`. Anything that
    /// puts another frame there resets it.
    last: u32,
}

/// Bytes per frame of the LRU list: a 16-byte list node and a 4-byte slot in the dense index.
const LRU_BYTES_PER_FRAME: usize = 20;

impl Fpc {
    /// FPC over `frames` frames.
    pub fn new(frames: usize) -> Result<Fpc, CacheError> {
        let index =
            DenseSlots::new(frames as u64).map_err(|e| CacheError::BadConfig(e.to_string()))?;
        let lru =
            Lru::with_index(frames, index).map_err(|e| CacheError::BadConfig(e.to_string()))?;
        Ok(Fpc {
            lru,
            stats: ReplacementStats::default(),
            skipped: Vec::new(),
            frames,
            last: u32::MAX,
        })
    }
}

impl CacheManager for Fpc {
    fn name(&self) -> &'static str {
        "fpc"
    }

    #[inline]
    fn touch(
        &mut self,
        _entry: &mut Entry,
        _index: u32,
        _meta: &mut FrameMeta,
        _decays: u8,
        frame: u32,
    ) {
        if frame != self.last {
            self.lru.touch(frame as u64);
            self.last = frame;
        }
    }

    fn page_installed(&mut self, _core: &mut CacheCore, frame: u32) {
        // A freshly fetched page is the most recently used.
        let _ = self.lru.insert(frame as u64, Placement::Referenced);
        self.last = frame;
    }

    /// Usage computation is taking the least recently used frame that can go; compaction is
    /// evicting it (dropping its objects and releasing their references).
    fn free_frame(
        &mut self,
        core: &mut CacheCore,
        timer: &mut ReplacementTimer,
    ) -> Result<(), CacheError> {
        let mut freed = false;
        let start = timer.now();
        while let Some(v) = self.lru.evict(None) {
            let fm = &core.frames[v as usize];
            if fm.pins > 0 || fm.modified > 0 {
                self.skipped.push(v);
                continue;
            }
            self.stats.objects_dropped += u64::from(fm.objects);
            let chosen = timer.usage_since(start);
            core.evict_frame(v as u32);
            timer.compaction_since(chosen);
            self.stats.frames_evicted += 1;
            freed = true;
            break;
        }
        for v in self.skipped.drain(..) {
            let _ = self.lru.insert(v, Placement::Referenced);
        }
        self.last = u32::MAX;
        if freed { Ok(()) } else { Err(CacheError::Full { frames: core.usable_frames() }) }
    }

    fn new_frame_committed(&mut self, core: &mut CacheCore, frame: u32) {
        // FPC caches pages as the server has them; created objects are fetched again when
        // used, in their pages.
        let fm = &mut core.frames[frame as usize];
        debug_assert_eq!(fm.kind, FrameKind::New);
        if fm.pins > 0 {
            // A view still points into it: keep its objects (as a compacted frame) and let LRU
            // evict it once the view is gone.
            fm.kind = FrameKind::Compacted;
            let _ = self.lru.insert(u64::from(frame), Placement::Referenced);
            self.last = frame;
            return;
        }
        core.evict_frame(frame);
    }

    fn frame_released(&mut self, frame: u32) {
        self.lru.remove(frame as u64);
        if self.last == frame {
            self.last = u32::MAX;
        }
    }

    fn table_bytes(&self) -> usize {
        self.frames * LRU_BYTES_PER_FRAME + self.skipped.capacity() * 8
    }

    fn stats(&self) -> ReplacementStats {
        self.stats
    }
}
