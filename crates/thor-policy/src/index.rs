//! Maps from a block id to the slab slot that describes it.
//!
//! Every policy needs "where is block `b`?" on every request. Two answers ship:
//!
//! - [`HashSlots`]: an `FxHashMap<BlockId, u32>` sized for the policy's slot count up front, so
//!   it never grows (and so never allocates) on the hot path. Any `u64` id works. This is what a
//!   client cache keyed by page id uses.
//! - [`DenseSlots`]: a plain array indexed by the id itself, for id spaces that are dense and
//!   bounded (`0..bound`), such as a simulator's synthetic blocks or a page file's page numbers.
//!   A lookup is one load, with no hashing; the price is four bytes per possible id.
//!
//! Policies are generic over [`SlotIndex`] and default to [`HashSlots`].

use rustc_hash::FxHashMap;

use super::{BlockId, PolicyError, list::NIL};

/// A map from block id to slot, with room for a fixed number of entries.
pub trait SlotIndex: std::fmt::Debug {
    /// The slot holding `id`, if any.
    fn get(&self, id: BlockId) -> Option<u32>;
    /// Records that `id` is in `slot`. `id` must not be present. Fails only when `id` is outside
    /// the index's id space (a [`DenseSlots`] bound).
    fn insert(&mut self, id: BlockId, slot: u32) -> Result<(), PolicyError>;
    /// Forgets `id`, returning its slot.
    fn remove(&mut self, id: BlockId) -> Option<u32>;
    /// Forgets every id.
    fn clear(&mut self);
    /// Makes sure `entries` ids fit without further allocation. Called once by the policy's
    /// constructor.
    fn reserve(&mut self, entries: usize);
}

/// A hash map from any `u64` block id to its slot (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct HashSlots {
    /// The map; reserved to the policy's slot count at construction so it never grows.
    map: FxHashMap<BlockId, u32>,
}

impl HashSlots {
    /// An empty index; the policy reserves room for its slots.
    pub fn new() -> Self {
        HashSlots::default()
    }
}

impl SlotIndex for HashSlots {
    #[inline]
    fn get(&self, id: BlockId) -> Option<u32> {
        self.map.get(&id).copied()
    }

    #[inline]
    fn insert(&mut self, id: BlockId, slot: u32) -> Result<(), PolicyError> {
        let old = self.map.insert(id, slot);
        debug_assert!(old.is_none(), "block {id} indexed twice");
        Ok(())
    }

    #[inline]
    fn remove(&mut self, id: BlockId) -> Option<u32> {
        self.map.remove(&id)
    }

    fn clear(&mut self) {
        self.map.clear();
    }

    fn reserve(&mut self, entries: usize) {
        self.map.reserve(entries.saturating_sub(self.map.len()));
    }
}

/// An array indexed directly by block id, for ids in `0..bound` (see the module documentation).
#[derive(Debug, Clone)]
pub struct DenseSlots {
    /// `slots[id]` is the slot of block `id`, or `NIL` when `id` is not present.
    slots: Vec<u32>,
}

impl DenseSlots {
    /// The largest id space a dense index accepts ([`crate::limits::DENSE_ID_BOUND_MAX`]).
    pub const MAX_BOUND: u64 = crate::limits::DENSE_ID_BOUND_MAX;

    /// An index for ids `0..bound`.
    pub fn new(bound: u64) -> Result<Self, PolicyError> {
        if bound > Self::MAX_BOUND {
            return Err(PolicyError::IdBoundTooLarge { bound, max: Self::MAX_BOUND });
        }
        Ok(DenseSlots { slots: vec![NIL; bound as usize] })
    }

    /// The exclusive upper bound on ids.
    pub fn bound(&self) -> u64 {
        self.slots.len() as u64
    }
}

impl SlotIndex for DenseSlots {
    #[inline]
    fn get(&self, id: BlockId) -> Option<u32> {
        match self.slots.get(usize::try_from(id).ok()?) {
            Some(&slot) if slot != NIL => Some(slot),
            _ => None,
        }
    }

    #[inline]
    fn insert(&mut self, id: BlockId, slot: u32) -> Result<(), PolicyError> {
        let bound = self.bound();
        match usize::try_from(id).ok().and_then(|i| self.slots.get_mut(i)) {
            Some(entry) => {
                debug_assert_eq!(*entry, NIL, "block {id} indexed twice");
                *entry = slot;
                Ok(())
            }
            None => Err(PolicyError::IdOutOfRange { id, bound }),
        }
    }

    #[inline]
    fn remove(&mut self, id: BlockId) -> Option<u32> {
        let entry = self.slots.get_mut(usize::try_from(id).ok()?)?;
        let slot = std::mem::replace(entry, NIL);
        (slot != NIL).then_some(slot)
    }

    fn clear(&mut self) {
        self.slots.fill(NIL);
    }

    fn reserve(&mut self, _entries: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_rejects_ids_outside_its_bound() {
        let mut index = DenseSlots::new(4).unwrap();
        index.insert(3, 7).unwrap();
        assert_eq!(index.get(3), Some(7));
        assert_eq!(index.get(4), None);
        assert_eq!(index.insert(4, 1), Err(PolicyError::IdOutOfRange { id: 4, bound: 4 }));
        assert_eq!(index.remove(3), Some(7));
        assert_eq!(index.remove(3), None);
        assert!(DenseSlots::new(DenseSlots::MAX_BOUND + 1).is_err());
    }
}
