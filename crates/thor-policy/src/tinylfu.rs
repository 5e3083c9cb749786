//! W-TinyLFU: a small LRU window in front of a segmented LRU, with admission by frequency
//! (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM ToS
//! 2017; the design Caffeine ships).
//!
//! ```text
//!   new block ──► window (LRU, 1%) ──its LRU block, the candidate──┐
//!                                                                  ▼  duel: admitted if the
//!   main (SLRU, 99%):  probation (20%) ──hit──► protected (80%)     sketch counts it more often
//!                       ▲ LRU block = the victim    │ overflow       than the victim
//!                       └───────────────────────────┘
//! ```
//!
//! Every reference (hit or insertion) is counted in a [`FrequencySketch`], a count-min sketch of
//! 4-bit counters over 4 rows that forgets by halving every counter after `10 * capacity`
//! increments. When the window holds more than its share, its least recently used block is the
//! *candidate* for the main cache: it is admitted if the sketch counts it more often than the main
//! cache's victim (the LRU block of probation, or of protected if probation is empty), which is
//! then evicted; otherwise the candidate is evicted. A hit in probation promotes the block to
//! protected, whose overflow goes back to probation's MRU end.
//!
//! # Mapping onto the `Policy` contract
//!
//! - `evict` returns exactly one resident block. If the window is at its share (the block
//!   about to come in would overflow it), its LRU block is the candidate and the loser of the
//!   duel leaves; otherwise the main cache's LRU block (probation first), else the window's.
//! - `insert(x, Referenced)` counts x and puts it at the window's MRU end; if that overflows
//!   the window (the cache had room, so the main cache has), the window's LRU block moves to
//!   probation without a duel: admission is decided only when something must leave. Explicit placements
//!   are not references and are not counted: `EvictNext` puts a block at probation's LRU end (the
//!   main cache's next victim) and `EvictLast` at protected's MRU end.
//! - `remove` forgets a block; its counts stay in the sketch (they age out).

use super::{
    BlockId, Placement, Policy, PolicyError, PolicyKind, check_capacity,
    index::{HashSlots, SlotIndex},
    list::{List, Slab},
};

/// Which list a slot is on.
const WINDOW: u8 = 0;
const PROBATION: u8 = 1;
const PROTECTED: u8 = 2;

/// Rows of the sketch: each block has one counter per row; its estimate is the smallest.
const SKETCH_ROWS: usize = 4;
/// Counters per 64-bit word (4 bits each).
const COUNTERS_PER_WORD: usize = 16;
/// The largest count (4 bits).
const COUNT_MAX: u64 = 15;
/// The sketch halves every counter after this many increments per cached block (TinyLFU's
/// sample size W = 10 C).
const SAMPLE_PER_BLOCK: u64 = 10;
/// Counters per row per cached block (rounded up to a power of two): enough that collisions
/// are rare among the blocks the sample sees.
const COUNTERS_PER_BLOCK: usize = 4;
/// Seeds of the rows' hash functions (odd 64-bit constants).
const ROW_SEEDS: [u64; SKETCH_ROWS] =
    [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0xD6E8_FEB8_6659_FD93];

/// A count-min sketch of 4-bit counters with periodic halving: TinyLFU's frequency estimate.
///
/// Deterministic (fixed hash seeds), so a run replays exactly. The estimate never undercounts
/// a block's references since the last halving, up to 15.
#[derive(Debug, Clone)]
pub struct FrequencySketch {
    /// `SKETCH_ROWS` rows of `width` counters, 16 to a word, row after row.
    words: Vec<u64>,
    /// Counters per row, a power of two.
    width: usize,
    /// Increments since the last halving (halved with the counters).
    additions: u64,
    /// Increments after which every counter is halved.
    sample: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of `capacity` blocks.
    pub fn new(capacity: usize) -> FrequencySketch {
        let width = (capacity.max(1) * COUNTERS_PER_BLOCK).next_power_of_two().max(64);
        FrequencySketch {
            words: vec![0; SKETCH_ROWS * width / COUNTERS_PER_WORD],
            width,
            additions: 0,
            sample: SAMPLE_PER_BLOCK * capacity.max(1) as u64,
        }
    }

    /// Bytes of counters.
    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The word and bit shift of `id`'s counter in `row`.
    #[inline]
    fn position(&self, id: BlockId, row: usize) -> (usize, u32) {
        // A multiply-xorshift mix per row; the top bits are the best mixed.
        let mut h = (id ^ ROW_SEEDS[row]).wrapping_mul(ROW_SEEDS[(row + 1) % SKETCH_ROWS]);
        h ^= h >> 29;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 32;
        let counter = row * self.width + (h as usize & (self.width - 1));
        (counter / COUNTERS_PER_WORD, ((counter % COUNTERS_PER_WORD) * 4) as u32)
    }

    /// Counts one reference to `id`.
    pub fn increment(&mut self, id: BlockId) {
        for row in 0..SKETCH_ROWS {
            let (w, shift) = self.position(id, row);
            if (self.words[w] >> shift) & COUNT_MAX < COUNT_MAX {
                self.words[w] += 1 << shift;
            }
        }
        self.additions += 1;
        if self.additions >= self.sample {
            self.halve();
        }
    }

    /// The estimated references to `id` (since counts were last halved, at most 15).
    pub fn estimate(&self, id: BlockId) -> u64 {
        (0..SKETCH_ROWS)
            .map(|row| {
                let (w, shift) = self.position(id, row);
                (self.words[w] >> shift) & COUNT_MAX
            })
            .min()
            .unwrap_or(0)
    }

    /// Halves every counter: old references count half as much as new ones.
    fn halve(&mut self) {
        for w in &mut self.words {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
        self.additions /= 2;
    }

    fn clear(&mut self) {
        self.words.fill(0);
        self.additions = 0;
    }
}

/// W-TinyLFU (see the module documentation).
#[derive(Debug, Clone)]
pub struct WTinyLfu<I: SlotIndex = HashSlots> {
    /// Slots for exactly `capacity` blocks.
    slab: Slab,
    /// Window, probation and protected; heads are LRU ends.
    lists: [List; 3],
    /// `which[slot]`: the list the slot is on.
    which: Vec<u8>,
    /// Block id to slot.
    index: I,
    /// The reference counts.
    sketch: FrequencySketch,
    /// The most resident blocks.
    capacity: usize,
    /// The window's share: above it, the window's LRU block duels for the main cache.
    window_target: usize,
    /// Protected's share of the main cache: above it, protected's LRU block is demoted.
    protected_target: usize,
}

impl WTinyLfu<HashSlots> {
    /// A cache of `capacity` blocks with any `u64` ids.
    pub fn new(capacity: usize) -> Result<Self, PolicyError> {
        Self::with_index(capacity, HashSlots::new())
    }
}

impl<I: SlotIndex> WTinyLfu<I> {
    /// A cache of `capacity` blocks using `index` to find them.
    pub fn with_index(capacity: usize, mut index: I) -> Result<Self, PolicyError> {
        check_capacity(capacity)?;
        index.reserve(capacity);
        let window_target = if capacity == 0 { 0 } else { (capacity / 100).max(1) };
        let main = capacity - window_target;
        Ok(WTinyLfu {
            slab: Slab::new(capacity),
            lists: [List::new(); 3],
            which: vec![0; capacity],
            index,
            sketch: FrequencySketch::new(capacity),
            capacity,
            window_target,
            protected_target: main * 8 / 10,
        })
    }

    /// The sketch (for tests, diagnostics and memory accounting).
    pub fn sketch(&self) -> &FrequencySketch {
        &self.sketch
    }

    /// Which list `id` is on: 0 window, 1 probation, 2 protected (for tests).
    pub fn segment(&self, id: BlockId) -> Option<u8> {
        self.index.get(id).map(|s| self.which[s as usize])
    }

    fn link(&mut self, slot: u32, to: u8, at_tail: bool) {
        if at_tail {
            self.lists[to as usize].push_tail(&mut self.slab, slot);
        } else {
            self.lists[to as usize].push_head(&mut self.slab, slot);
        }
        self.which[slot as usize] = to;
    }

    fn move_slot(&mut self, slot: u32, to: u8, at_tail: bool) {
        let from = self.which[slot as usize];
        self.lists[from as usize].unlink(&mut self.slab, slot);
        self.link(slot, to, at_tail);
    }

    /// Demotes protected's LRU blocks to probation's MRU end while protected is over its share.
    fn trim_protected(&mut self) {
        while self.lists[PROTECTED as usize].len() > self.protected_target {
            let Some(slot) = self.lists[PROTECTED as usize].head() else { break };
            self.move_slot(slot, PROBATION, true);
        }
    }

    /// Forgets `slot` and returns its block.
    fn drop_slot(&mut self, slot: u32) -> BlockId {
        let list = self.which[slot as usize];
        self.lists[list as usize].unlink(&mut self.slab, slot);
        let id = self.slab.id(slot);
        self.index.remove(id);
        self.slab.release(slot);
        id
    }

    /// The main cache's victim: probation's LRU block, else protected's.
    fn main_victim(&self) -> Option<u32> {
        self.lists[PROBATION as usize].head().or_else(|| self.lists[PROTECTED as usize].head())
    }
}

impl<I: SlotIndex> Policy for WTinyLfu<I> {
    fn kind(&self) -> PolicyKind {
        PolicyKind::WTinyLfu
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn len(&self) -> usize {
        self.lists.iter().map(List::len).sum()
    }

    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        self.index.get(id).is_some()
    }

    fn touch(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        self.sketch.increment(id);
        match self.which[slot as usize] {
            PROBATION => {
                self.move_slot(slot, PROTECTED, true);
                self.trim_protected();
            }
            list => self.lists[list as usize].move_to_tail(&mut self.slab, slot),
        }
        true
    }

    fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError> {
        if self.index.get(id).is_some() {
            return Err(PolicyError::AlreadyCached { id });
        }
        let Some(slot) = self.slab.alloc(id) else {
            return Err(PolicyError::Full { capacity: self.capacity });
        };
        if let Err(e) = self.index.insert(id, slot) {
            self.slab.release(slot);
            return Err(e);
        }
        match at {
            Placement::Referenced => {
                self.sketch.increment(id);
                self.link(slot, WINDOW, true);
                // The cache had room, so the main cache has room too: the window's overflow
                // moves there without a duel (admission is decided only when something must
                // leave).
                if self.lists[WINDOW as usize].len() > self.window_target
                    && let Some(lru) = self.lists[WINDOW as usize].head()
                {
                    self.move_slot(lru, PROBATION, true);
                }
            }
            Placement::EvictNext => self.link(slot, PROBATION, false),
            Placement::EvictLast => {
                self.link(slot, PROTECTED, true);
                self.trim_protected();
            }
        }
        Ok(())
    }

    fn place(&mut self, id: BlockId, at: Placement) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        match at {
            Placement::Referenced => {
                self.touch(id);
            }
            Placement::EvictNext => self.move_slot(slot, PROBATION, false),
            Placement::EvictLast => {
                self.move_slot(slot, PROTECTED, true);
                self.trim_protected();
            }
        }
        true
    }

    fn remove(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        self.drop_slot(slot);
        true
    }

    fn evict(&mut self, _incoming: Option<BlockId>) -> Option<BlockId> {
        // A window at its share would overflow with the next block: its LRU block is the
        // candidate for the main cache, through the duel.
        if self.lists[WINDOW as usize].len() >= self.window_target.max(1)
            && let Some(candidate) = self.lists[WINDOW as usize].head()
        {
            let Some(victim) = self.main_victim() else {
                return Some(self.drop_slot(candidate));
            };
            let (c, v) = (self.slab.id(candidate), self.slab.id(victim));
            if self.sketch.estimate(c) > self.sketch.estimate(v) {
                self.move_slot(candidate, PROBATION, true);
                return Some(self.drop_slot(victim));
            }
            return Some(self.drop_slot(candidate));
        }
        let slot = self.main_victim().or_else(|| self.lists[WINDOW as usize].head())?;
        Some(self.drop_slot(slot))
    }

    fn clear(&mut self) {
        self.slab.clear();
        for l in &mut self.lists {
            l.clear();
        }
        self.index.clear();
        self.sketch.clear();
    }

    fn snapshot(&self, out: &mut Vec<BlockId>) {
        for l in [WINDOW, PROBATION, PROTECTED] {
            self.lists[l as usize].for_each(&self.slab, |s| out.push(self.slab.id(s)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sketch_never_undercounts_before_it_halves() {
        let mut s = FrequencySketch::new(64);
        // 600 increments stay below the sample of 640.
        for id in 0..100u64 {
            for _ in 0..(id % 7) {
                s.increment(id);
            }
        }
        for id in 0..100u64 {
            assert!(s.estimate(id) >= id % 7, "block {id}");
        }
        assert_eq!(s.estimate(1_000_000), 0, "a block never counted, in an almost empty sketch");
        for _ in 0..40 {
            s.increment(5);
        }
        assert_eq!(s.estimate(5), 15, "counters saturate at 15");
        // The sample of 640 is reached: everything halves.
        for _ in 0..400 {
            s.increment(7);
        }
        assert!(s.estimate(5) < 15, "halved: {}", s.estimate(5));
    }

    #[test]
    fn a_frequent_block_beats_a_scan() {
        // Capacity 100: a window of 1, main of 99.
        let mut c = WTinyLfu::new(100).unwrap();
        let request = |c: &mut WTinyLfu, b: BlockId| {
            if !c.touch(b) {
                if c.is_full() {
                    c.evict(Some(b));
                }
                c.insert(b, Placement::Referenced).unwrap();
            }
        };
        for round in 0..5 {
            for b in 0..50 {
                request(&mut c, b);
            }
            // A scan of blocks seen once each does not push the hot ones out.
            for b in 0..200 {
                request(&mut c, 1000 + round * 1000 + b);
            }
        }
        let hot = (0..50).filter(|&b| c.contains(b)).count();
        assert!(hot >= 45, "{hot} of 50 hot blocks kept");
    }
}
