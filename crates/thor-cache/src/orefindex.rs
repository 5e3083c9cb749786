//! The oref index: from an object's oref to its indirection-table entry.
//!
//! Installing an object or swizzling a reference must find the object's entry if it has one
//! (an object has at most one entry). A general hash map from oref to entry index would store
//! every key twice (in the map and in the entry) and cost 10 to 20 bytes per entry with its
//! load factor and growth; on OO7, whose objects average 24 bytes, that doubles the tables. This
//! index stores only entry indices, in an open-addressed table with linear probing; the key of
//! a slot is the oref *in the entry it names*, read when probing. At most 70% full, it costs
//! under 6 bytes per entry.
//!
//! ```text
//!   slots:  [ NIL | 17 | NIL | 4 | 9 | NIL | ... ]      hash(oref) → first slot to probe
//!                  │          │   │
//!   entries:  ... [4: oref 2.7] ... [9: oref 5.1] ... [17: oref 3.0]
//! ```
//!
//! Deletion shifts later members of the probe run back (no tombstones), so lookups stay short
//! however many objects come and go.
//!
//! *Invariant:* the caller removes an entry's slot before changing the entry's oref, and
//! inserts after setting it; every slot names a live entry whose oref hashes to a position at or
//! before it in its probe run.

use crate::core::Entry;

const EMPTY: u32 = u32::MAX;

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct OrefIndex {
    /// Entry indices, or [`EMPTY`].
    slots: Vec<u32>,
    /// Occupied slots.
    len: usize,
}

#[inline]
fn hash(key: u32, mask: usize) -> usize {
    // Fibonacci hashing: orefs of one page differ only in their low bits; the multiplication
    // spreads them over the high bits, which the rotation brings down to where the mask looks.
    let h = key.wrapping_mul(0x9E37_79B9);
    (h.rotate_left(16) ^ h) as usize & mask
}

impl Default for OrefIndex {
    fn default() -> Self {
        OrefIndex::with_capacity(16)
    }
}

impl OrefIndex {
    /// An index with room for about `n` keys before it grows.
    pub fn with_capacity(n: usize) -> OrefIndex {
        let cap = (n * 10 / 7 + 1).next_power_of_two().max(16);
        OrefIndex { slots: vec![EMPTY; cap], len: 0 }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }

    /// Bytes the index would hold after its next growth.
    pub fn next_memory_bytes(&self) -> usize {
        if (self.len + 1) * 10 > self.slots.len() * 7 {
            self.slots.len() * 8
        } else {
            self.memory_bytes()
        }
    }

    /// The entry whose oref is `key`.
    #[inline]
    pub fn get(&self, key: u32, entries: &[Entry]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = hash(key, mask);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if entries[s as usize].oref == key {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds entry `idx`, whose oref (the key) is `entries[idx].oref` and not in the index.
    pub fn insert(&mut self, idx: u32, entries: &[Entry]) {
        if (self.len + 1) * 10 > self.slots.len() * 7 {
            self.grow(entries);
        }
        let mask = self.slots.len() - 1;
        let mut i = hash(entries[idx as usize].oref, mask);
        while self.slots[i] != EMPTY {
            debug_assert_ne!(entries[self.slots[i] as usize].oref, entries[idx as usize].oref);
            i = (i + 1) & mask;
        }
        self.slots[i] = idx;
        self.len += 1;
    }

    /// Removes the slot of entry `idx` (whose oref is still its key). Returns whether it was
    /// there.
    pub fn remove(&mut self, idx: u32, entries: &[Entry]) -> bool {
        let mask = self.slots.len() - 1;
        let key = entries[idx as usize].oref;
        let mut i = hash(key, mask);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return false;
            }
            if s == idx {
                break;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: move later members of the run into the hole when their home
        // position does not lie cyclically in (hole, their slot].
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = hash(entries[s as usize].oref, mask);
            let in_between =
                if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !in_between {
                self.slots[hole] = s;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        true
    }

    fn grow(&mut self, entries: &[Entry]) {
        let bigger = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|&s| s != EMPTY) {
            let mut i = hash(entries[s as usize].oref, mask);
            while self.slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn entry(oref: u32) -> Entry {
        Entry { oref, loc: 0, link: 0, refs: 0, usage: 0, flags: 8 }
    }

    proptest! {
        /// Random inserts and removes against a map, with keys chosen to collide often.
        #[test]
        fn matches_a_map(ops in proptest::collection::vec((any::<bool>(), 0u32..300), 1..600)) {
            let mut entries: Vec<Entry> = Vec::new();
            let mut idx = OrefIndex::with_capacity(4);
            let mut model: HashMap<u32, u32> = HashMap::new();
            for (add, k) in ops {
                let key = k * 1024; // orefs of page k, oid 0: low bits equal
                if add && !model.contains_key(&key) {
                    entries.push(entry(key));
                    let i = (entries.len() - 1) as u32;
                    idx.insert(i, &entries);
                    model.insert(key, i);
                } else if !add && let Some(i) = model.remove(&key) {
                    prop_assert!(idx.remove(i, &entries));
                    entries[i as usize].oref = u32::MAX - 1; // the caller reuses or frees it
                }
                prop_assert_eq!(idx.len(), model.len());
                for (k, i) in &model {
                    prop_assert_eq!(idx.get(*k, &entries), Some(*i));
                }
                prop_assert_eq!(idx.get(7, &entries), None);
            }
        }
    }
}
