//! ARC: the adaptive replacement cache of Megiddo and Modha (FAST '03).
//!
//! ARC splits the cache between blocks seen once recently (T1) and blocks seen at least twice
//! (T2), and remembers the ids of blocks it recently evicted from each (the "ghost" lists B1 and
//! B2, which hold no data). A miss on a ghost is evidence that the corresponding list was too
//! small, so ARC moves its target size `p` for T1 towards it:
//!
//! ```text
//!            <-- B1 (ghosts) --><---- T1 ---->|<---- T2 ----><-- B2 (ghosts) -->
//!   LRU end of B1 ... MRU of B1 | LRU .. MRU  |  MRU .. LRU  | MRU of B2 ... LRU end of B2
//!                               |<---- c resident blocks --->|
//!                               ^ target: |T1| = p
//! ```
//!
//! # Mapping onto the `Policy` contract
//!
//! The paper's algorithm handles a request in one step; here it is split into the contract's
//! `touch` / `evict` / `insert`, with the same result when the caller follows the contract
//! (checked against a transcription of the paper's pseudo-code by the model tests):
//!
//! - `touch(x)` on a resident block is the paper's case I: move x to T2's MRU end.
//! - `evict(Some(x))` on a full cache does the directory bookkeeping and `REPLACE(x, p)` of cases
//!   II to IV, adapting `p` first when x is a ghost (and marking the ghost "adapted" so that the
//!   `insert` that follows does not adapt twice), and returns the resident block it evicted.
//! - `insert(x, Referenced)` puts a ghost hit at T2's MRU end and a new block at T1's MRU end,
//!   first trimming the directory so that `|T1| + |B1| <= c` and `|T1|+|T2|+|B1|+|B2| <= 2c`.
//!
//! Choices the paper does not need to make:
//!
//! - `p` moves by whole blocks (`max(1, |B2| / |B1|)` in integer division, as most
//!   implementations do).
//! - When `REPLACE` would take from an empty list (T2 empty with `|T1| <= p`, reachable when `p`
//!   has grown to `c`), it takes from the other.
//! - `EvictNext` puts a block at T1's LRU end and `EvictLast` at T1's MRU end (an explicit
//!   placement is not a reference, so it never promotes to T2). Placing a block explicitly drops
//!   any ghost of it without adapting `p`.
//! - `remove` forgets a block, resident or ghost. After removals the cache can be below capacity
//!   while ghosts exist; then an `insert` only trims the directory and never evicts a resident
//!   block (the paper's case IV would).

use super::{
    BlockId, Placement, Policy, PolicyError, PolicyKind, check_capacity,
    index::{HashSlots, SlotIndex},
    list::{List, Slab},
};

/// Which of ARC's four lists a slot is on (low bits of its tag).
const T1: u8 = 0;
const T2: u8 = 1;
const B1: u8 = 2;
const B2: u8 = 3;
/// Tag bits naming the list.
const LIST_MASK: u8 = 0b11;
/// Tag bit: this ghost already moved `p` (set by `evict`, consumed by `insert`).
const ADAPTED: u8 = 0b100;

/// The adaptive replacement cache (see the module documentation).
#[derive(Debug, Clone)]
pub struct Arc<I: SlotIndex = HashSlots> {
    /// Slots for `2 * capacity` ids: resident blocks and ghosts.
    slab: Slab,
    /// The four lists, indexed by `T1`, `T2`, `B1`, `B2`. Heads are LRU ends.
    lists: [List; 4],
    /// `tag[slot]`: the list the slot is on, plus the `ADAPTED` bit.
    tag: Vec<u8>,
    /// Block id to slot, for resident blocks and ghosts alike.
    index: I,
    /// `c`: the most resident blocks.
    capacity: usize,
    /// ARC's target size of T1, in `0..=c`.
    target_t1: usize,
}

impl Arc<HashSlots> {
    /// A cache of `capacity` blocks with any `u64` ids.
    pub fn new(capacity: usize) -> Result<Self, PolicyError> {
        Self::with_index(capacity, HashSlots::new())
    }
}

impl<I: SlotIndex> Arc<I> {
    /// A cache of `capacity` blocks using `index` to find them (the index holds up to twice that
    /// many ids, for the ghosts).
    pub fn with_index(capacity: usize, mut index: I) -> Result<Self, PolicyError> {
        check_capacity(capacity)?;
        let slots = 2 * capacity;
        index.reserve(slots);
        Ok(Arc {
            slab: Slab::new(slots),
            lists: [List::new(); 4],
            tag: vec![0; slots],
            index,
            capacity,
            target_t1: 0,
        })
    }

    /// ARC's current target size for T1 (for reports and tests).
    pub fn target_t1(&self) -> usize {
        self.target_t1
    }

    /// The ghost ids (B1 then B2, each from its LRU end), for tests and diagnostics.
    pub fn ghosts(&self, out: &mut Vec<BlockId>) {
        for list in [B1, B2] {
            self.lists[list as usize].for_each(&self.slab, |s| out.push(self.slab.id(s)));
        }
    }

    #[inline]
    fn list_of(&self, slot: u32) -> u8 {
        self.tag[slot as usize] & LIST_MASK
    }

    #[inline]
    fn len_of(&self, list: u8) -> usize {
        self.lists[list as usize].len()
    }

    /// Moves `slot` from its list to the tail (MRU end) or head of `to`.
    fn move_slot(&mut self, slot: u32, to: u8, at_tail: bool) {
        let from = self.list_of(slot);
        self.lists[from as usize].unlink(&mut self.slab, slot);
        if at_tail {
            self.lists[to as usize].push_tail(&mut self.slab, slot);
        } else {
            self.lists[to as usize].push_head(&mut self.slab, slot);
        }
        self.tag[slot as usize] = to;
    }

    /// Deletes the LRU entry of ghost list `list`, if any.
    fn drop_ghost_lru(&mut self, list: u8) {
        if let Some(slot) = self.lists[list as usize].pop_head(&mut self.slab) {
            self.index.remove(self.slab.id(slot));
            self.slab.release(slot);
        }
    }

    /// The paper's `REPLACE(x, p)`: demotes the LRU block of T1 or T2 to its ghost list and
    /// returns it. `incoming_in_b2` is "x is in B2".
    fn replace(&mut self, incoming_in_b2: bool) -> Option<BlockId> {
        let t1 = self.len_of(T1);
        let from_t1 = t1 >= 1 && ((incoming_in_b2 && t1 == self.target_t1) || t1 > self.target_t1)
            || self.len_of(T2) == 0;
        let (from, to) = if from_t1 { (T1, B1) } else { (T2, B2) };
        let slot = self.lists[from as usize].head()?;
        self.move_slot(slot, to, true);
        Some(self.slab.id(slot))
    }

    /// Keeps the directory within ARC's bounds before a new id joins T1: `|T1| + |B1| <= c` and
    /// at most `2c` ids in all (so a slab slot is free).
    fn trim_directory_for_new(&mut self) {
        if self.len_of(T1) + self.len_of(B1) >= self.capacity && self.len_of(B1) > 0 {
            self.drop_ghost_lru(B1);
        }
        while self.index_len() >= 2 * self.capacity {
            if self.len_of(B2) > 0 {
                self.drop_ghost_lru(B2);
            } else if self.len_of(B1) > 0 {
                self.drop_ghost_lru(B1);
            } else {
                break;
            }
        }
    }

    /// Ids on all four lists.
    #[inline]
    fn index_len(&self) -> usize {
        self.lists.iter().map(List::len).sum()
    }

    /// Trims B1 after an explicit placement may have grown T1 past the bound.
    fn trim_b1(&mut self) {
        while self.len_of(T1) + self.len_of(B1) > self.capacity && self.len_of(B1) > 0 {
            self.drop_ghost_lru(B1);
        }
    }

    /// Forgets `slot` entirely.
    fn forget(&mut self, slot: u32) {
        let list = self.list_of(slot);
        self.lists[list as usize].unlink(&mut self.slab, slot);
        self.index.remove(self.slab.id(slot));
        self.slab.release(slot);
    }
}

impl<I: SlotIndex> Policy for Arc<I> {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Arc
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn len(&self) -> usize {
        self.len_of(T1) + self.len_of(T2)
    }

    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        self.index.get(id).is_some_and(|slot| self.list_of(slot) <= T2)
    }

    #[inline]
    fn touch(&mut self, id: BlockId) -> bool {
        match self.index.get(id) {
            Some(slot) if self.list_of(slot) <= T2 => {
                self.move_slot(slot, T2, true);
                true
            }
            _ => false,
        }
    }

    fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError> {
        let existing = self.index.get(id);
        if let Some(slot) = existing
            && self.list_of(slot) <= T2
        {
            return Err(PolicyError::AlreadyCached { id });
        }
        if self.len() >= self.capacity {
            return Err(PolicyError::Full { capacity: self.capacity });
        }
        if let Some(slot) = existing {
            if at == Placement::Referenced {
                // Cases II and III: a ghost hit enters T2, adapting p unless `evict` already did.
                let tag = self.tag[slot as usize];
                if tag & ADAPTED == 0 {
                    self.adapt(tag & LIST_MASK);
                }
                self.move_slot(slot, T2, true);
                return Ok(());
            }
            // An explicit placement is not a reference: drop the history, insert as new.
            self.forget(slot);
        }
        self.trim_directory_for_new();
        let slot = self.slab.alloc(id).ok_or(PolicyError::Full { capacity: self.capacity })?;
        if let Err(e) = self.index.insert(id, slot) {
            self.slab.release(slot);
            return Err(e);
        }
        self.tag[slot as usize] = T1;
        match at {
            Placement::Referenced | Placement::EvictLast => {
                self.lists[T1 as usize].push_tail(&mut self.slab, slot)
            }
            Placement::EvictNext => self.lists[T1 as usize].push_head(&mut self.slab, slot),
        }
        Ok(())
    }

    fn place(&mut self, id: BlockId, at: Placement) -> bool {
        let Some(slot) = self.index.get(id).filter(|&s| self.list_of(s) <= T2) else {
            return false;
        };
        match at {
            Placement::Referenced => self.move_slot(slot, T2, true),
            Placement::EvictLast => {
                let list = self.list_of(slot);
                self.lists[list as usize].move_to_tail(&mut self.slab, slot);
            }
            Placement::EvictNext => {
                self.move_slot(slot, T1, false);
                self.trim_b1();
            }
        }
        true
    }

    fn remove(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        let resident = self.list_of(slot) <= T2;
        self.forget(slot);
        resident
    }

    fn evict(&mut self, incoming: Option<BlockId>) -> Option<BlockId> {
        if self.len() == 0 {
            return None;
        }
        let ghost = incoming.and_then(|x| self.index.get(x)).filter(|&s| self.list_of(s) > T2);
        match ghost {
            Some(slot) => {
                let tag = self.tag[slot as usize];
                if tag & ADAPTED == 0 {
                    self.adapt(tag & LIST_MASK);
                    self.tag[slot as usize] |= ADAPTED;
                }
                self.replace(tag & LIST_MASK == B2)
            }
            None if incoming.is_some() => {
                // Case IV: x is in no list.
                let (t1, b1) = (self.len_of(T1), self.len_of(B1));
                if t1 + b1 >= self.capacity {
                    if t1 < self.capacity && b1 > 0 {
                        self.drop_ghost_lru(B1);
                        self.replace(false)
                    } else {
                        // T1 fills the cache: its LRU block leaves without a ghost.
                        let slot = self.lists[T1 as usize].head()?;
                        let victim = self.slab.id(slot);
                        self.forget(slot);
                        Some(victim)
                    }
                } else {
                    if self.index_len() >= 2 * self.capacity {
                        self.drop_ghost_lru(B2);
                    }
                    self.replace(false)
                }
            }
            None => self.replace(false),
        }
    }

    fn clear(&mut self) {
        self.slab.clear();
        self.lists = [List::new(); 4];
        self.tag.fill(0);
        self.index.clear();
        self.target_t1 = 0;
    }

    fn snapshot(&self, out: &mut Vec<BlockId>) {
        for list in [T1, T2] {
            self.lists[list as usize].for_each(&self.slab, |s| out.push(self.slab.id(s)));
        }
    }
}

impl<I: SlotIndex> Arc<I> {
    /// Moves `p` after a hit on ghost list `list` (the paper's cases II and III).
    fn adapt(&mut self, list: u8) {
        let (b1, b2) = (self.len_of(B1).max(1), self.len_of(B2).max(1));
        if list == B1 {
            let delta = (b2 / b1).max(1);
            self.target_t1 = (self.target_t1 + delta).min(self.capacity);
        } else {
            let delta = (b1 / b2).max(1);
            self.target_t1 = self.target_t1.saturating_sub(delta);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ghost_hit_grows_the_list_it_came_from() {
        let mut arc = Arc::new(2).unwrap();
        for b in [1, 2] {
            arc.insert(b, Placement::Referenced).unwrap();
        }
        assert!(arc.touch(2)); // 2 moves to T2
        // 3 misses: T1 is above its target (0), so its LRU block 1 becomes a B1 ghost.
        assert_eq!(arc.evict(Some(3)), Some(1));
        arc.insert(3, Placement::Referenced).unwrap();
        let mut ghosts = Vec::new();
        arc.ghosts(&mut ghosts);
        assert_eq!(ghosts, [1]);
        // 1 comes back: a B1 hit, so the target of T1 grows to 1 and, T1 being at its target,
        // T2's LRU block 2 makes room; 1 joins T2.
        assert_eq!(arc.evict(Some(1)), Some(2));
        assert_eq!(arc.target_t1(), 1);
        arc.insert(1, Placement::Referenced).unwrap();
        let mut order = Vec::new();
        arc.snapshot(&mut order);
        assert_eq!(order, [3, 1]);
        ghosts.clear();
        arc.ghosts(&mut ghosts);
        assert_eq!(ghosts, [2]);
    }
}
