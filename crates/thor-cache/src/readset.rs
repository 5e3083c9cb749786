//! The read set of the current transaction: which objects it read, as bitmaps per page.
//!
//! Concurrency control needs the read set at commit (the ROS of CLOCC, `papers/thor-ecoop99.txt`
//! section 4.1). It must not keep objects or their indirection-table entries in the cache: a
//! transaction may read far more objects than the cache holds (OO7's T1 and T2b read 500,000).
//! So it is kept apart from the entries, as one 512-bit bitmap per page touched (a bit per
//! oid): 64 bytes per page whatever the number of objects read in it, naturally free of
//! duplicates when an object is read again after it left the cache and came back.
//!
//! ```text
//!   page 17 ─► [0010 0110 ... 0000]   (oids 2, 5, 6 read)
//!   page 40 ─► [1000 0000 ... 0001]
//! ```
//!
//! Insertion costs a hash lookup of the page, skipped when the page is in a small direct-mapped
//! cache of recent pages (reads follow the clustering, so that is the common case). The cache calls
//! [`ReadSet::insert`] only on an entry's first access in a transaction (the entry's read flag
//! filters the rest), so the hit path pays for it once per object.

use rustc_hash::FxHashMap;
use thor_core::ids::OIDS_PER_PAGE;
use thor_core::{Oid, Oref, PageId};

const WORDS: usize = OIDS_PER_PAGE / 64;
/// Lines of the recent-page cache (a power of two).
const RECENT: usize = 16;

/// See the module documentation.
#[derive(Debug)]
pub struct ReadSet {
    /// Page → index of its bitmap in `bits`.
    pages: FxHashMap<u32, u32>,
    /// The bitmaps, in order of first read.
    bits: Vec<([u64; WORDS], u32)>,
    /// Recently used pages and their bitmaps, direct-mapped by the page's low bits, to skip
    /// the hash lookup (a traversal moves among the few pages of a cluster). A page of 0
    /// marks an empty line.
    recent: [(u32, u32); RECENT],
    /// Objects in the set.
    len: usize,
}

impl Default for ReadSet {
    fn default() -> Self {
        ReadSet { pages: FxHashMap::default(), bits: Vec::new(), recent: [(0, 0); RECENT], len: 0 }
    }
}

impl ReadSet {
    /// An empty read set.
    pub fn new() -> ReadSet {
        ReadSet::default()
    }

    /// Adds `oref_word` if it is a stored oref (created objects are not read-set members: they
    /// did not exist before the transaction).
    #[inline]
    pub fn insert(&mut self, oref_word: u32) {
        let Some(oref) = Oref::from_raw(oref_word) else { return };
        let page = oref.page_raw();
        if page == 0 {
            return;
        }
        let line = page as usize & (RECENT - 1);
        let b = match self.recent[line] {
            (p, b) if p == page => b,
            _ => {
                let next = self.bits.len() as u32;
                let b = *self.pages.entry(page).or_insert(next);
                if b == next {
                    if self.bits.len() == self.bits.capacity() {
                        // Grow by a quarter, not double: the budget keeps the next growth in
                        // reserve, and a doubling of a large transaction's bitmaps took much
                        // of a small cache.
                        self.bits.reserve_exact(Self::bits_step(self.bits.capacity()));
                    }
                    self.bits.push(([0; WORDS], page));
                }
                self.recent[line] = (page, b);
                b
            }
        };
        let oid = oref.oid().index();
        let w = &mut self.bits[b as usize].0[oid / 64];
        let m = 1u64 << (oid % 64);
        if *w & m == 0 {
            *w |= m;
            self.len += 1;
        }
    }

    /// Whether `oref` is in the set.
    pub fn contains(&self, oref: Oref) -> bool {
        let Some(&b) = self.pages.get(&oref.page_raw()) else { return false };
        let oid = oref.oid().index();
        self.bits[b as usize].0[oid / 64] & (1 << (oid % 64)) != 0
    }

    /// Whether an object of page `page` is in the set.
    pub fn contains_page(&self, page: u32) -> bool {
        self.pages.contains_key(&page)
    }

    /// Pages with an object in the set.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Objects in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f` with every oref in the set, page by page in order of first read, oids
    /// ascending within a page.
    pub fn for_each(&self, mut f: impl FnMut(Oref)) {
        for (words, page) in &self.bits {
            let page = PageId::new(*page).expect("only stored orefs are inserted");
            for (k, &w) in words.iter().enumerate() {
                let mut w = w;
                while w != 0 {
                    let bit = w.trailing_zeros() as usize;
                    w &= w - 1;
                    let oid = Oid::new((k * 64 + bit) as u16).expect("bit index below 512");
                    f(Oref::new(page, oid));
                }
            }
        }
    }

    /// Empties the set, keeping its memory for the next transaction.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.bits.clear();
        self.recent = [(0, 0); RECENT];
        self.len = 0;
    }

    /// Bitmaps the set grows by when full: a quarter (at least 16).
    fn bits_step(capacity: usize) -> usize {
        (capacity / 4).max(16)
    }

    /// Bytes the set's next growth may add (a quarter more bitmaps, or a doubling of its page
    /// map).
    pub fn growth_bytes(&self) -> usize {
        let bits = if self.bits.len() == self.bits.capacity() {
            Self::bits_step(self.bits.capacity()) * std::mem::size_of::<([u64; WORDS], u32)>()
        } else {
            0
        };
        let pages = if self.pages.len() * 8 >= self.pages.capacity() * 7 {
            self.pages.capacity().max(4) * 9
        } else {
            0
        };
        bits + pages
    }

    /// Bytes of memory the set holds.
    pub fn memory_bytes(&self) -> usize {
        self.pages.capacity() * 9
            + self.bits.capacity() * std::mem::size_of::<([u64; WORDS], u32)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a set of orefs: membership, size, iteration; duplicates count once.
        #[test]
        fn matches_a_set(xs in proptest::collection::vec((1u32..40, 0u16..512), 0..400)) {
            let mut r = ReadSet::new();
            let mut model = BTreeSet::new();
            for (p, o) in xs {
                let oref = Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap());
                r.insert(oref.raw());
                model.insert(oref);
            }
            prop_assert_eq!(r.len(), model.len());
            let mut got = BTreeSet::new();
            r.for_each(|o| { got.insert(o); });
            prop_assert_eq!(&got, &model);
            for o in &model {
                prop_assert!(r.contains(*o));
            }
            r.clear();
            prop_assert!(r.is_empty());
            let mut n = 0;
            r.for_each(|_| n += 1);
            prop_assert_eq!(n, 0);
        }
    }

    #[test]
    fn created_objects_and_null_are_not_members() {
        let mut r = ReadSet::new();
        r.insert(0);
        r.insert(thor_core::RawRef::tagged_word(5));
        assert!(r.is_empty());
    }
}
