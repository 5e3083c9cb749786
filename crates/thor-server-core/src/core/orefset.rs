//! A set of orefs kept as one 512-bit map per page: what a commit's writes are checked and
//! indexed with when they are many.
//!
//! ```text
//!   index: page ──► slot        maps: [ [u64; 8] … ]   bit `oid` of a page's map: a member
//! ```
//!
//! An object number has 9 bits, so a page's members fit in 64 bytes, and a set of 99,000 orefs
//! over 4,000 pages (OO7's T2b) is 4,000 hash entries and 256 KB of maps where a hash set of
//! orefs had 99,000 entries. Consecutive orefs of one page (a commit lists its objects page by
//! page when the client wrote them so) skip the hash lookup: the last page looked up is kept.
//!
//! *Invariant:* each page of `index` has exactly one map, and `pages` lists the pages of
//! `index` in the order they were first added.

use rustc_hash::FxHashMap;
use thor_core::ids::OIDS_PER_PAGE;
use thor_core::{Oid, Oref, PageId};

/// Words of one page's map.
const WORDS: usize = OIDS_PER_PAGE / 64;
const _: () = assert!(WORDS * 64 == OIDS_PER_PAGE, "a page's oids fill whole words");

/// A set of orefs. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct OrefSet {
    /// Each page's slot in `maps` and `pages`.
    index: FxHashMap<PageId, u32>,
    /// One map per page, bit `oid` set for a member.
    maps: Vec<[u64; WORDS]>,
    /// The pages, in the order they were first added.
    pages: Vec<PageId>,
    /// The last page looked up and its slot.
    last: Option<(PageId, u32)>,
}

impl OrefSet {
    /// An empty set.
    pub fn new() -> OrefSet {
        OrefSet::default()
    }

    /// Adds `oref`, which must name an object (not null, not on page 0: the caller checks it
    /// with `Oref::check_object`); returns whether it was not a member. An oref that names no
    /// object is never added, and the answer is then `false`, which is not "already a member":
    /// callers refuse such orefs before they get here.
    pub fn insert(&mut self, oref: Oref) -> bool {
        let Some(page) = oref.page() else { return false };
        let slot = match self.last {
            Some((p, s)) if p == page => s,
            _ => {
                let next = self.maps.len() as u32;
                let s = *self.index.entry(page).or_insert(next);
                if s == next {
                    self.maps.push([0; WORDS]);
                    self.pages.push(page);
                }
                self.last = Some((page, s));
                s
            }
        };
        let (w, b) = bit(oref.oid());
        let word = &mut self.maps[slot as usize][w];
        let new = *word & b == 0;
        *word |= b;
        new
    }

    /// Whether `oref` is a member.
    pub fn contains(&self, oref: Oref) -> bool {
        let Some(page) = oref.page() else { return false };
        let slot = match self.last {
            Some((p, s)) if p == page => s,
            _ => match self.index.get(&page) {
                Some(s) => *s,
                None => return false,
            },
        };
        let (w, b) = bit(oref.oid());
        self.maps[slot as usize][w] & b != 0
    }

    /// The members, page by page in the order pages were first added, each page's in oid order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = Oref> + '_ {
        self.pages.iter().zip(&self.maps).flat_map(|(page, map)| {
            map.iter().enumerate().flat_map(move |(w, word)| {
                let mut bits = *word;
                std::iter::from_fn(move || {
                    if bits == 0 {
                        return None;
                    }
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    let oid = Oid::new((w * 64) as u16 + b as u16).expect("within a page");
                    Some(Oref::new(*page, oid))
                })
            })
        })
    }
}

/// The word and bit of `oid` in a page's map.
fn bit(oid: Oid) -> (usize, u64) {
    (oid.index() / 64, 1u64 << (oid.index() % 64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn oref(p: u32, o: u16) -> Oref {
        Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
    }

    #[test]
    fn null_is_never_a_member() {
        let mut s = OrefSet::new();
        assert!(!s.insert(Oref::NULL));
        assert!(!s.contains(Oref::NULL));
        let page_zero = Oref::from_raw(8).unwrap();
        assert!(!s.insert(page_zero));
        assert!(!s.contains(page_zero));
        assert_eq!(s.iter().count(), 0);
    }

    proptest! {
        /// The set against a `BTreeSet`: inserts, lookups and iteration.
        #[test]
        fn matches_model(
            ops in proptest::collection::vec((1u32..8, 0u16..512, any::<bool>()), 1..300),
        ) {
            let mut s = OrefSet::new();
            let mut model = BTreeSet::new();
            for (p, o, add) in ops {
                let r = oref(p, o);
                if add {
                    prop_assert_eq!(s.insert(r), model.insert(r));
                } else {
                    prop_assert_eq!(s.contains(r), model.contains(&r));
                }
            }
            let mut got: Vec<Oref> = s.iter().collect();
            prop_assert_eq!(got.len(), model.len());
            got.sort();
            prop_assert_eq!(got, model.iter().copied().collect::<Vec<_>>());
            for r in &model {
                prop_assert!(s.contains(*r));
            }
        }
    }
}
