//! The visited set of the graph traversals: one word per atomic part, keyed by its dense id.
//!
//! T1 searches each composite part's graph with a fresh visited set. Clearing a hash set 2,187
//! times, or hashing 437,400 pointers, would be a large part of a hot traversal and would
//! differ between thor and native code; a dense array of epoch stamps indexed by the part's id
//! costs one load and one store per visit in both, and clearing it is bumping the epoch. The
//! comparison between thor and the native baseline then measures the object store, not the set.

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Visited {
    /// The epoch in which each id was last visited.
    marks: Vec<u32>,
    /// The current epoch; ids whose mark equals it are in the set.
    epoch: u32,
}

impl Visited {
    /// An empty set for ids below `capacity` (it grows for larger ids).
    pub fn new(capacity: usize) -> Visited {
        Visited { marks: vec![0; capacity], epoch: 1 }
    }

    /// Empties the set.
    #[inline]
    pub fn clear(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    /// Adds `id`; returns whether it was absent.
    #[inline]
    pub fn insert(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= self.marks.len() {
            self.marks.resize((i + 1).next_power_of_two(), 0);
        }
        let m = &mut self.marks[i];
        if *m == self.epoch {
            false
        } else {
            *m = self.epoch;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_empties_and_growth_works() {
        let mut v = Visited::new(4);
        assert!(v.insert(3));
        assert!(!v.insert(3));
        assert!(v.insert(100));
        v.clear();
        assert!(v.insert(3));
        assert!(v.insert(100));
        v.epoch = u32::MAX;
        v.clear();
        assert!(v.insert(3));
    }
}
