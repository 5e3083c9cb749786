//! LRU and MRU: one recency queue, two reference rules.
//!
//! Both keep the cached blocks in one list ordered by when they were last placed, and both evict
//! from the head. They differ only in where a reference puts a block:
//!
//! ```text
//!               head (evict next)                      tail (evict last)
//!   LRU:  least recently used  ...  ...  ...  most recently used   <- references go here
//!   MRU:  most recently used   ...  ...  ...  least recently used
//!           ^ references go here
//! ```
//!
//! So an MRU cache filled by a sequential scan keeps the first blocks of the scan and churns one
//! slot, which is what makes it the right client policy for looping sequential workloads and
//! what gives the DEMOTE paper's MRU array its "eject the block just read first" behaviour.
//! Explicit placements (`EvictNext`, `EvictLast`) put a block at the head or the tail in both.

use super::{
    BlockId, Placement, Policy, PolicyError, PolicyKind, check_capacity,
    index::{HashSlots, SlotIndex},
    list::{List, Slab},
};

/// The shared machinery of [`Lru`] and [`Mru`]: one list, one slab, one index.
#[derive(Debug, Clone)]
struct RecencyQueue<I> {
    /// Slots for exactly `capacity` blocks.
    slab: Slab,
    /// The replacement order; the head is evicted next.
    list: List,
    /// Block id to slot.
    index: I,
    /// The most blocks cached at once.
    capacity: usize,
}

impl<I: SlotIndex> RecencyQueue<I> {
    fn new(capacity: usize, mut index: I) -> Result<Self, PolicyError> {
        check_capacity(capacity)?;
        index.reserve(capacity);
        Ok(RecencyQueue { slab: Slab::new(capacity), list: List::new(), index, capacity })
    }

    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        self.index.get(id).is_some()
    }

    /// Moves a cached block to the head (`to_head`) or the tail.
    #[inline]
    fn move_to(&mut self, id: BlockId, to_head: bool) -> bool {
        let Some(slot) = self.index.get(id) else { return false };
        if to_head {
            self.list.move_to_head(&mut self.slab, slot);
        } else {
            self.list.move_to_tail(&mut self.slab, slot);
        }
        true
    }

    #[inline]
    fn insert(&mut self, id: BlockId, to_head: bool) -> Result<(), PolicyError> {
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
        if to_head {
            self.list.push_head(&mut self.slab, slot);
        } else {
            self.list.push_tail(&mut self.slab, slot);
        }
        Ok(())
    }

    #[inline]
    fn remove(&mut self, id: BlockId) -> bool {
        let Some(slot) = self.index.remove(id) else { return false };
        self.list.unlink(&mut self.slab, slot);
        self.slab.release(slot);
        true
    }

    #[inline]
    fn evict(&mut self) -> Option<BlockId> {
        let slot = self.list.pop_head(&mut self.slab)?;
        let id = self.slab.id(slot);
        self.index.remove(id);
        self.slab.release(slot);
        Some(id)
    }

    fn clear(&mut self) {
        self.slab.clear();
        self.list.clear();
        self.index.clear();
    }

    fn snapshot(&self, out: &mut Vec<BlockId>) {
        self.list.for_each(&self.slab, |slot| out.push(self.slab.id(slot)));
    }
}

/// Generates a recency policy type: `$to_head_on_reference` says whether a reference puts the
/// block at the head (MRU) or the tail (LRU).
macro_rules! recency_policy {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $to_head_on_reference:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name<I: SlotIndex = HashSlots> {
            /// The queue; see the module documentation for its order.
            queue: RecencyQueue<I>,
        }

        impl $name<HashSlots> {
            /// A cache of `capacity` blocks with any `u64` ids.
            pub fn new(capacity: usize) -> Result<Self, PolicyError> {
                Self::with_index(capacity, HashSlots::new())
            }
        }

        impl<I: SlotIndex> $name<I> {
            /// A cache of `capacity` blocks using `index` to find them.
            pub fn with_index(capacity: usize, index: I) -> Result<Self, PolicyError> {
                Ok($name { queue: RecencyQueue::new(capacity, index)? })
            }

            /// Whether `at` means "the head" for this policy.
            #[inline]
            fn to_head(at: Placement) -> bool {
                match at {
                    Placement::Referenced => $to_head_on_reference,
                    Placement::EvictNext => true,
                    Placement::EvictLast => false,
                }
            }
        }

        impl<I: SlotIndex> Policy for $name<I> {
            fn kind(&self) -> PolicyKind {
                $kind
            }
            #[inline]
            fn capacity(&self) -> usize {
                self.queue.capacity
            }
            #[inline]
            fn len(&self) -> usize {
                self.queue.list.len()
            }
            #[inline]
            fn contains(&self, id: BlockId) -> bool {
                self.queue.contains(id)
            }
            #[inline]
            fn touch(&mut self, id: BlockId) -> bool {
                self.queue.move_to(id, $to_head_on_reference)
            }
            #[inline]
            fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError> {
                self.queue.insert(id, Self::to_head(at))
            }
            #[inline]
            fn place(&mut self, id: BlockId, at: Placement) -> bool {
                self.queue.move_to(id, Self::to_head(at))
            }
            #[inline]
            fn remove(&mut self, id: BlockId) -> bool {
                self.queue.remove(id)
            }
            #[inline]
            fn evict(&mut self, _incoming: Option<BlockId>) -> Option<BlockId> {
                self.queue.evict()
            }
            fn clear(&mut self) {
                self.queue.clear()
            }
            fn snapshot(&self, out: &mut Vec<BlockId>) {
                self.queue.snapshot(out)
            }
        }
    };
}

recency_policy!(
    /// Least recently used: a reference moves the block to the evict-last end.
    Lru,
    PolicyKind::Lru,
    false
);

recency_policy!(
    /// Most recently used: a reference moves the block to the evict-next end.
    Mru,
    PolicyKind::Mru,
    true
);

#[cfg(test)]
mod tests {
    use super::*;

    fn order(p: &impl Policy) -> Vec<BlockId> {
        let mut out = Vec::new();
        p.snapshot(&mut out);
        out
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru = Lru::new(3).unwrap();
        for b in [1, 2, 3] {
            lru.insert(b, Placement::Referenced).unwrap();
        }
        assert!(lru.touch(1));
        assert_eq!(order(&lru), [2, 3, 1]);
        assert_eq!(lru.insert(4, Placement::Referenced), Err(PolicyError::Full { capacity: 3 }));
        assert_eq!(lru.evict(Some(4)), Some(2));
        lru.insert(4, Placement::EvictNext).unwrap();
        assert_eq!(order(&lru), [4, 3, 1]);
        assert_eq!(lru.insert(3, Placement::Referenced), Err(PolicyError::AlreadyCached { id: 3 }));
    }

    #[test]
    fn mru_evicts_the_most_recently_used() {
        let mut mru = Mru::new(3).unwrap();
        for b in [1, 2, 3] {
            mru.insert(b, Placement::Referenced).unwrap();
        }
        assert_eq!(order(&mru), [3, 2, 1]);
        assert!(mru.touch(1));
        assert_eq!(mru.evict(None), Some(1));
        mru.insert(9, Placement::EvictLast).unwrap();
        assert_eq!(order(&mru), [3, 2, 9]);
        assert!(mru.place(9, Placement::Referenced));
        assert_eq!(order(&mru), [9, 3, 2]);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut lru = Lru::new(0).unwrap();
        assert!(lru.is_full());
        assert_eq!(lru.insert(1, Placement::Referenced), Err(PolicyError::Full { capacity: 0 }));
        assert_eq!(lru.evict(None), None);
    }
}
