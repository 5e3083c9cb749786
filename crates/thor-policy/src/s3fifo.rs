//! S3-FIFO: three static FIFO queues (Yang, Zhang, Qiu, Yue and Vinayak, SOSP '23).
//!
//! Most blocks of a workload are used once and never again ("one-hit wonders"). S3-FIFO filters
//! them out with a small FIFO queue in front of the main one, and remembers the ids of blocks it
//! filtered out in a ghost queue, so that a block that comes back soon goes straight to the main
//! queue:
//!
//! ```text
//!   new block ──► S (small, 10%) ──freq > 1──► M (main, 90%) ──freq > 0: back in, freq - 1──┐
//!                   │                            ▲    │                                    │
//!                   └── else: id ──► G (ghost) ──┘    └── freq 0: evicted       ◄──────────┘
//!                                    (ids only; a miss on a ghost inserts into M)
//! ```
//!
//! Each resident block has a 2-bit frequency: a hit adds one (saturating at 3) and costs one
//! store, no list surgery, like CLOCK. To evict, if S holds at least its share (a tenth of the
//! capacity, at least one block) the block at S's head leaves S: into M if it was hit more than
//! once since it came (Algorithm 1 of the paper: `freq > 1`), else out of the cache with its id
//! kept in G; otherwise M's head leaves M, or goes round again with its frequency decremented.
//! G remembers as many ids as M's share; its oldest id is forgotten when it is full.
//!
//! # Mapping onto the `Policy` contract
//!
//! - `evict` returns exactly one resident block: S's eviction moves blocks into M until one
//!   leaves (falling back to M when S runs empty), and M's gives blocks second chances until one
//!   has frequency 0. M is bounded by the capacity less S, implicitly, since every eviction
//!   removes one block in all.
//! - A block moving from S to M starts there with frequency 0 (it earns M's second chances with
//!   hits in M, as in the authors' libCacheSim implementation).
//! - `insert(x, Referenced)` puts x at S's tail, or at M's tail if x is a ghost (the ghost is
//!   consumed). An explicit placement is not a reference: `EvictNext` puts a block at S's head and
//!   `EvictLast` at M's tail, both with frequency 0 (as ARC maps them onto T1's ends: S is where
//!   blocks go first, M where they stay longest).
//! - `remove` forgets a block, resident or ghost.

use super::{
    BlockId, Placement, Policy, PolicyError, PolicyKind, check_capacity,
    index::{HashSlots, SlotIndex},
    list::{List, Slab},
};

/// Which queue a slot is on (the low bits of its tag).
const S: u8 = 0;
const M: u8 = 1;
const G: u8 = 2;
/// Tag bits naming the queue.
const QUEUE_MASK: u8 = 0b11;
/// The frequency lives in the tag's bits 2 and 3.
const FREQ_SHIFT: u8 = 2;
/// The largest frequency (2 bits).
const FREQ_MAX: u8 = 3;
/// A block leaves S for M when its frequency is above this (the paper's Algorithm 1).
const MOVE_TO_MAIN_ABOVE: u8 = 1;

/// S3-FIFO (see the module documentation).
#[derive(Debug, Clone)]
pub struct S3Fifo<I: SlotIndex = HashSlots> {
    /// Slots for `capacity` resident blocks and as many ghosts.
    slab: Slab,
    /// S, M and G, indexed by `S`, `M`, `G`; heads leave first.
    queues: [List; 3],
    /// `tag[slot]`: the queue, and the frequency of a resident block.
    tag: Vec<u8>,
    /// Block id to slot, for resident blocks and ghosts alike.
    index: I,
    /// The most resident blocks.
    capacity: usize,
    /// S's share: while S holds at least this many, evictions take from S.
    small_target: usize,
    /// The most ids G remembers (M's share).
    ghost_capacity: usize,
}

impl S3Fifo<HashSlots> {
    /// A cache of `capacity` blocks with any `u64` ids.
    pub fn new(capacity: usize) -> Result<Self, PolicyError> {
        Self::with_index(capacity, HashSlots::new())
    }
}

impl<I: SlotIndex> S3Fifo<I> {
    /// A cache of `capacity` blocks using `index` to find them (the index holds up to twice that
    /// many ids, for the ghosts).
    pub fn with_index(capacity: usize, mut index: I) -> Result<Self, PolicyError> {
        check_capacity(capacity)?;
        let slots = 2 * capacity;
        index.reserve(slots);
        let small_target = if capacity == 0 { 0 } else { (capacity / 10).max(1) };
        Ok(S3Fifo {
            slab: Slab::new(slots),
            queues: [List::new(); 3],
            tag: vec![0; slots],
            index,
            capacity,
            small_target,
            ghost_capacity: capacity - small_target,
        })
    }

    /// The ghost ids, oldest first (for tests and diagnostics).
    pub fn ghosts(&self, out: &mut Vec<BlockId>) {
        self.queues[G as usize].for_each(&self.slab, |s| out.push(self.slab.id(s)));
    }

    /// The frequency of a resident block (for tests and diagnostics).
    pub fn frequency(&self, id: BlockId) -> Option<u8> {
        let slot = self.index.get(id)?;
        (self.queue_of(slot) != G).then(|| self.freq_of(slot))
    }

    #[inline]
    fn queue_of(&self, slot: u32) -> u8 {
        self.tag[slot as usize] & QUEUE_MASK
    }

    #[inline]
    fn freq_of(&self, slot: u32) -> u8 {
        self.tag[slot as usize] >> FREQ_SHIFT
    }

    #[inline]
    fn set(&mut self, slot: u32, queue: u8, freq: u8) {
        self.tag[slot as usize] = queue | (freq << FREQ_SHIFT);
    }

    /// Resident blocks.
    #[inline]
    fn resident(&self) -> usize {
        self.queues[S as usize].len() + self.queues[M as usize].len()
    }

    /// Moves `slot` off its queue onto the tail (`at_tail`) or head of `to`, with `freq`.
    fn move_slot(&mut self, slot: u32, to: u8, at_tail: bool, freq: u8) {
        let from = self.queue_of(slot);
        self.queues[from as usize].unlink(&mut self.slab, slot);
        self.link(slot, to, at_tail, freq);
    }

    fn link(&mut self, slot: u32, to: u8, at_tail: bool, freq: u8) {
        if at_tail {
            self.queues[to as usize].push_tail(&mut self.slab, slot);
        } else {
            self.queues[to as usize].push_head(&mut self.slab, slot);
        }
        self.set(slot, to, freq);
    }

    /// Forgets `slot` entirely.
    fn forget(&mut self, slot: u32) {
        let q = self.queue_of(slot);
        self.queues[q as usize].unlink(&mut self.slab, slot);
        self.index.remove(self.slab.id(slot));
        self.slab.release(slot);
    }

    /// Evicts from S: blocks hit more than once move to M; the first other block leaves, its id
    /// kept in G. Falls back to M when S runs empty.
    fn evict_small(&mut self) -> Option<BlockId> {
        while let Some(slot) = self.queues[S as usize].head() {
            if self.freq_of(slot) > MOVE_TO_MAIN_ABOVE {
                self.move_slot(slot, M, true, 0);
                continue;
            }
            let id = self.slab.id(slot);
            if self.ghost_capacity == 0 {
                self.forget(slot);
                return Some(id);
            }
            if self.queues[G as usize].len() >= self.ghost_capacity
                && let Some(old) = self.queues[G as usize].head()
            {
                self.forget(old);
            }
            self.move_slot(slot, G, true, 0);
            return Some(id);
        }
        self.evict_main()
    }

    /// Evicts from M: blocks with a nonzero frequency go round again with one less; the first
    /// with frequency 0 leaves. Falls back to S when M is empty.
    fn evict_main(&mut self) -> Option<BlockId> {
        if self.queues[M as usize].len() == 0 {
            return if self.queues[S as usize].len() > 0 { self.evict_small() } else { None };
        }
        // Each pass decrements one frequency, so this ends within 3 * |M| passes.
        loop {
            let slot = self.queues[M as usize].head()?;
            let f = self.freq_of(slot);
            if f > 0 {
                self.queues[M as usize].move_to_tail(&mut self.slab, slot);
                self.set(slot, M, f - 1);
                continue;
            }
            let id = self.slab.id(slot);
            self.forget(slot);
            return Some(id);
        }
    }
}

impl<I: SlotIndex> Policy for S3Fifo<I> {
    fn kind(&self) -> PolicyKind {
        PolicyKind::S3Fifo
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn len(&self) -> usize {
        self.resident()
    }

    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        self.index.get(id).is_some_and(|slot| self.queue_of(slot) != G)
    }

    #[inline]
    fn touch(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        let t = self.tag[slot as usize];
        if t & QUEUE_MASK == G {
            return false;
        }
        let f = (t >> FREQ_SHIFT).min(FREQ_MAX - 1) + 1;
        self.tag[slot as usize] = (t & QUEUE_MASK) | (f << FREQ_SHIFT);
        true
    }

    fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError> {
        let ghost = match self.index.get(id) {
            Some(slot) if self.queue_of(slot) != G => {
                return Err(PolicyError::AlreadyCached { id });
            }
            Some(slot) => Some(slot),
            None => None,
        };
        if self.resident() >= self.capacity {
            return Err(PolicyError::Full { capacity: self.capacity });
        }
        let slot = match ghost {
            // The ghost's slot becomes the resident block's.
            Some(slot) => {
                self.queues[G as usize].unlink(&mut self.slab, slot);
                slot
            }
            None => {
                // Residents and ghosts are each at most `capacity`, so a slot is free.
                let slot =
                    self.slab.alloc(id).ok_or(PolicyError::Full { capacity: self.capacity })?;
                if let Err(e) = self.index.insert(id, slot) {
                    self.slab.release(slot);
                    return Err(e);
                }
                slot
            }
        };
        match at {
            Placement::Referenced if ghost.is_some() => self.link(slot, M, true, 0),
            Placement::Referenced => self.link(slot, S, true, 0),
            Placement::EvictNext => self.link(slot, S, false, 0),
            Placement::EvictLast => self.link(slot, M, true, 0),
        }
        Ok(())
    }

    fn place(&mut self, id: BlockId, at: Placement) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        if self.queue_of(slot) == G {
            return false;
        }
        match at {
            Placement::Referenced => {
                self.touch(id);
            }
            Placement::EvictNext => self.move_slot(slot, S, false, 0),
            Placement::EvictLast => self.move_slot(slot, M, true, 0),
        }
        true
    }

    fn remove(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        let was_resident = self.queue_of(slot) != G;
        self.forget(slot);
        was_resident
    }

    fn evict(&mut self, _incoming: Option<BlockId>) -> Option<BlockId> {
        if self.queues[S as usize].len() >= self.small_target.max(1) {
            self.evict_small()
        } else {
            self.evict_main()
        }
    }

    fn clear(&mut self) {
        self.slab.clear();
        for q in &mut self.queues {
            q.clear();
        }
        self.tag.fill(0);
        self.index.clear();
    }

    fn snapshot(&self, out: &mut Vec<BlockId>) {
        for q in [S, M] {
            self.queues[q as usize].for_each(&self.slab, |s| out.push(self.slab.id(s)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hit_wonders_leave_from_the_small_queue_and_return_to_main() {
        // Capacity 10: S's share is 1.
        let mut c = S3Fifo::new(10).unwrap();
        for b in 0..10 {
            c.insert(b, Placement::Referenced).unwrap();
        }
        // Block 0 was hit twice: it moves to M, and 1 (never hit) is evicted into G.
        c.touch(0);
        c.touch(0);
        assert_eq!(c.evict(None), Some(1));
        let mut g = Vec::new();
        c.ghosts(&mut g);
        assert_eq!(g, [1]);
        assert_eq!(c.frequency(0), Some(0), "moved to M with frequency 0");
        // 1 comes back: a ghost hit goes straight to M.
        c.insert(1, Placement::Referenced).unwrap();
        let mut order = Vec::new();
        c.snapshot(&mut order);
        assert_eq!(order, [2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        assert!(!c.contains(42));
        assert!(!c.remove(42));
    }
}
