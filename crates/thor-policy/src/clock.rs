//! CLOCK (second chance): LRU's approximation with one reference bit per block.
//!
//! The blocks sit on a ring that a hand sweeps. A reference only sets the block's bit, so a hit
//! costs one store and no list surgery. To evict, the hand looks at the block under it: if its
//! bit is set, the bit is cleared and the hand moves on (the block gets a second chance);
//! otherwise that block is the victim.
//!
//! ```text
//!                 hand
//!                  v
//!        ... <- [b4:1] <- [b9:0] <- [b2:1] <- ...      (ring, bit after the colon)
//!   evict: b4 has its bit set -> clear it, pass; b9's is clear -> evict b9
//! ```
//!
//! The ring is kept as a list whose head is under the hand: passing a block moves it from the
//! head to the tail, and the tail is "just behind the hand", the position swept last. So the
//! list order is the order in which the hand will reach the blocks, and placements map onto it:
//!
//! - `Referenced` (a block just read): at the tail with its bit *clear*, as in the CAR paper's
//!   CLOCK (Bansal and Modha, FAST '04): a block read once and never again goes on the first
//!   sweep that reaches it.
//! - `EvictLast`: at the tail with its bit *set*: it survives a full sweep.
//! - `EvictNext`: under the hand with its bit clear: the next victim.

use super::{
    BlockId, Placement, Policy, PolicyError, PolicyKind, check_capacity,
    index::{HashSlots, SlotIndex},
    list::{List, Slab},
};

/// Second-chance CLOCK (see the module documentation).
#[derive(Debug, Clone)]
pub struct Clock<I: SlotIndex = HashSlots> {
    /// Slots for exactly `capacity` blocks.
    slab: Slab,
    /// The ring, cut at the hand: the head is under the hand.
    ring: List,
    /// `referenced[slot]`: the block in `slot` was referenced since the hand last passed it.
    referenced: Vec<bool>,
    /// Block id to slot.
    index: I,
    /// The most blocks cached at once.
    capacity: usize,
}

impl Clock<HashSlots> {
    /// A cache of `capacity` blocks with any `u64` ids.
    pub fn new(capacity: usize) -> Result<Self, PolicyError> {
        Self::with_index(capacity, HashSlots::new())
    }
}

impl<I: SlotIndex> Clock<I> {
    /// A cache of `capacity` blocks using `index` to find them.
    pub fn with_index(capacity: usize, mut index: I) -> Result<Self, PolicyError> {
        check_capacity(capacity)?;
        index.reserve(capacity);
        Ok(Clock {
            slab: Slab::new(capacity),
            ring: List::new(),
            referenced: vec![false; capacity],
            index,
            capacity,
        })
    }

    /// Puts an unlinked `slot` where `at` says.
    #[inline]
    fn link(&mut self, slot: u32, at: Placement) {
        match at {
            Placement::Referenced => {
                self.ring.push_tail(&mut self.slab, slot);
                self.referenced[slot as usize] = false;
            }
            Placement::EvictLast => {
                self.ring.push_tail(&mut self.slab, slot);
                self.referenced[slot as usize] = true;
            }
            Placement::EvictNext => {
                self.ring.push_head(&mut self.slab, slot);
                self.referenced[slot as usize] = false;
            }
        }
    }

    /// Whether the block is referenced (for tests of the model).
    #[cfg(test)]
    pub(crate) fn is_referenced(&self, id: BlockId) -> Option<bool> {
        self.index.get(id).map(|slot| self.referenced[slot as usize])
    }
}

impl<I: SlotIndex> Policy for Clock<I> {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Clock
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn len(&self) -> usize {
        self.ring.len()
    }

    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        self.index.get(id).is_some()
    }

    #[inline]
    fn touch(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        self.referenced[slot as usize] = true;
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
        self.link(slot, at);
        Ok(())
    }

    fn place(&mut self, id: BlockId, at: Placement) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        if at == Placement::Referenced {
            self.referenced[slot as usize] = true;
        } else {
            self.ring.unlink(&mut self.slab, slot);
            self.link(slot, at);
        }
        true
    }

    fn remove(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.remove(id) else { return false };
        self.ring.unlink(&mut self.slab, slot);
        self.slab.release(slot);
        true
    }

    fn evict(&mut self, _incoming: Option<BlockId>) -> Option<BlockId> {
        // Each pass clears one bit, so after at most `len` passes the head's bit is clear.
        loop {
            let slot = self.ring.head()?;
            if std::mem::take(&mut self.referenced[slot as usize]) {
                self.ring.move_to_tail(&mut self.slab, slot);
                continue;
            }
            self.ring.unlink(&mut self.slab, slot);
            let id = self.slab.id(slot);
            self.index.remove(id);
            self.slab.release(slot);
            return Some(id);
        }
    }

    fn clear(&mut self) {
        self.slab.clear();
        self.ring.clear();
        self.referenced.fill(false);
        self.index.clear();
    }

    fn snapshot(&self, out: &mut Vec<BlockId>) {
        self.ring.for_each(&self.slab, |slot| out.push(self.slab.id(slot)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn referenced_blocks_get_a_second_chance() {
        let mut clock = Clock::new(3).unwrap();
        for b in [1, 2, 3] {
            clock.insert(b, Placement::Referenced).unwrap();
        }
        clock.touch(1);
        clock.touch(2);
        // The hand passes 1 and 2 (clearing their bits) and takes 3.
        assert_eq!(clock.evict(None), Some(3));
        assert_eq!(clock.is_referenced(1), Some(false));
        // Now 1 is under the hand with a clear bit.
        assert_eq!(clock.evict(None), Some(1));
        clock.insert(7, Placement::EvictNext).unwrap();
        assert_eq!(clock.evict(None), Some(7));
    }
}
