//! The oref index: from an object's oref to its indirection-table entry, page by page.
//!
//! Installing an object or swizzling a reference must find the object's entry if it has one
//! (an object has at most one entry). An oref is a page id and an object number below 512, and
//! a traversal converts a fetched page's objects together, so the index follows the
//! clustering: one *directory* per page that has entries, holding a 512-bit map of the object
//! numbers that have an entry and the entries' indices in object-number order.
//!
//! ```text
//!   page map: page 17 ──► dir { oids: 0010 0110 0000 ...   (oids 2, 5, 6 have entries)
//!                               entries: [ 40, 41, 97 ] }  (oid 5's entry is the rank of
//!                                                          bit 5 among the set bits: 41)
//! ```
//!
//! A lookup finds the page's directory (a hash of the page id, skipped when the page is the
//! one looked up last, as it is for most swizzles of a page being converted), tests the oid's
//! bit, and reads the entry index at the bit's rank: no probing, no key comparison, no hash of
//! the object number, and the words it touches are the page's, which the page's other lookups
//! have just touched. An entry's own line is touched only on a hit (where a swizzle counts the
//! reference in it anyway).
//!
//! Memory: 4 bytes an entry in the directory's array (grown by half when full, at most 64
//! slots at a time, so at most a third of it, and at most 256 bytes, is slack), plus about 130
//! bytes a page that has entries (the directory's maps and header, its slots in the page map
//! and the directory list). On hot T1- on OO7 medium (about 80 entries a page) that is 6.4
//! bytes an entry, against 7.5 for the open-addressed table of 4-byte slots at most 70% full
//! it replaced (5.7 to 11.4 as it filled and doubled); a page with a single entry costs about
//! 130 bytes.
//!
//! The directory also counts the page's resident installed objects
//! ([`OrefIndex::add_resident`]): what tells the cache whether anything of the page is still
//! cached. An object with a resident copy has an entry, so its page has a directory; a
//! directory goes when it has neither entries nor resident objects.
//!
//! Keys are oref words (page id above bit 10, oid in bits 1-9, bit 0 clear) and tagged serial
//! words of created objects (bit 0 set). A serial word's "page" is its bits above bit 10 with
//! bit 31 set, so created objects are grouped 512 at a time, apart from every page.

use std::cell::Cell;

use rustc_hash::FxHashMap;

/// Words of a directory's map of object numbers.
const WORDS: usize = thor_core::ids::OIDS_PER_PAGE / 64;
/// Fewest entry slots a directory's array grows by.
const GROW_MIN: usize = 8;
/// Most entry slots a directory's array grows by: the headroom the budget keeps for the
/// index's next growth covers one such step.
const GROW_MAX: usize = 64;

/// The directory of one page's entries.
#[derive(Debug, Clone, Default)]
struct Dir {
    /// Bit `oid` is set when the object has an entry.
    oids: [u64; WORDS],
    /// Set bits in the words before each word: a rank is one word's count away (the default
    /// target has no popcount instruction; counting seven words was most of a lookup).
    before: [u16; WORDS],
    /// Entry indices in oid order: the entry of `oid` is at the rank of its bit.
    entries: Vec<u32>,
    /// Resident installed objects of the page (stored orefs only).
    resident: u32,
}

impl Dir {
    #[inline]
    fn rank(&self, oid: usize) -> usize {
        let w = oid / 64;
        self.before[w] as usize + (self.oids[w] & ((1u64 << (oid % 64)) - 1)).count_ones() as usize
    }

    /// Sets or clears bit `oid` (which must be clear or set).
    #[inline]
    fn flip(&mut self, oid: usize, set: bool) {
        let w = oid / 64;
        self.oids[w] ^= 1 << (oid % 64);
        for b in &mut self.before[w + 1..] {
            if set {
                *b += 1;
            } else {
                *b -= 1;
            }
        }
    }

    #[inline]
    fn has(&self, oid: usize) -> bool {
        self.oids[oid / 64] & (1 << (oid % 64)) != 0
    }
}

/// The group (page, or block of 512 serials) and object number of a key.
#[inline]
fn split(key: u32) -> (u32, usize) {
    let group = (key >> 10) | ((key & 1) << 31);
    (group, ((key >> 1) & 0x1FF) as usize)
}

/// Where [`OrefIndex::find`] did not find a key: what [`OrefIndex::fill`] needs to add it.
#[derive(Debug, Clone, Copy)]
pub struct Vacant {
    key: u32,
    /// The directory's slot, or `u32::MAX` if the page has none yet.
    slot: u32,
    /// The rank of the key's bit.
    rank: u32,
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct OrefIndex {
    /// Group → its slot in `dirs`.
    map: FxHashMap<u32, u32>,
    /// The directories; `None` for a slot on the free list.
    dirs: Vec<Option<Box<Dir>>>,
    /// Free slots of `dirs`.
    free: Vec<u32>,
    /// The group looked up last and its slot (`u32::MAX` group: none).
    last: Cell<(u32, u32)>,
    /// Keys held.
    len: usize,
    /// Entry slots allocated in the directories' arrays.
    slots: usize,
}

/// Bytes a directory's map slot costs: key, value and hashbrown's control byte.
const MAP_SLOT_BYTES: usize = 9;

impl OrefIndex {
    /// An empty index.
    pub fn new() -> OrefIndex {
        OrefIndex { last: Cell::new((u32::MAX, 0)), ..OrefIndex::default() }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages (and blocks of serials) with a directory.
    pub fn pages(&self) -> usize {
        self.map.len()
    }

    /// Bytes of memory held (as the budget counts them: allocations' sizes).
    pub fn memory_bytes(&self) -> usize {
        self.map.capacity() * MAP_SLOT_BYTES
            + self.dirs.capacity() * std::mem::size_of::<Option<Box<Dir>>>()
            + self.free.capacity() * 4
            + self.map.len() * std::mem::size_of::<Dir>()
            + self.slots * 4
    }

    /// Bytes the next insertion may add at most: a new directory, a growth of the page map and
    /// of the directory list, and the largest growth of a directory's array.
    pub fn growth_bytes(&self) -> usize {
        let map = if self.map.len() == self.map.capacity() {
            self.map.capacity().max(4) * MAP_SLOT_BYTES
        } else {
            0
        };
        let dirs = if self.free.is_empty() && self.dirs.len() == self.dirs.capacity() {
            self.dirs.capacity().max(4) * (std::mem::size_of::<Option<Box<Dir>>>() + 4)
        } else {
            0
        };
        map + dirs + std::mem::size_of::<Dir>() + GROW_MAX * 4
    }

    #[inline]
    fn slot_of(&self, group: u32) -> Option<u32> {
        let (g, s) = self.last.get();
        if g == group {
            return Some(s);
        }
        let s = *self.map.get(&group)?;
        self.last.set((group, s));
        Some(s)
    }

    #[inline]
    fn dir(&self, slot: u32) -> &Dir {
        self.dirs[slot as usize].as_deref().expect("mapped directories exist")
    }

    #[inline]
    fn dir_mut(&mut self, slot: u32) -> &mut Dir {
        self.dirs[slot as usize].as_deref_mut().expect("mapped directories exist")
    }

    /// The entry whose oref (or serial word) is `key`.
    #[inline]
    pub fn get(&self, key: u32) -> Option<u32> {
        let (group, oid) = split(key);
        let d = self.dir(self.slot_of(group)?);
        if !d.has(oid) {
            return None;
        }
        Some(d.entries[d.rank(oid)])
    }

    /// The entry whose oref (or serial word) is `key`, or where it would go: one lookup for
    /// a swizzle's find-or-insert ([`OrefIndex::fill`]).
    #[inline]
    pub fn find(&self, key: u32) -> Result<u32, Vacant> {
        let (group, oid) = split(key);
        let Some(s) = self.slot_of(group) else {
            return Err(Vacant { key, slot: u32::MAX, rank: 0 });
        };
        let d = self.dir(s);
        let rank = d.rank(oid);
        if d.has(oid) {
            return Ok(d.entries[rank]);
        }
        Err(Vacant { key, slot: s, rank: rank as u32 })
    }

    /// Maps the key [`OrefIndex::find`] did not find to entry `idx`. Nothing may have changed
    /// the index since the `find`. Returns whether the index's memory grew.
    #[inline]
    pub fn fill(&mut self, v: Vacant, idx: u32) -> bool {
        if v.slot == u32::MAX {
            return self.insert(v.key, idx);
        }
        let (_, oid) = split(v.key);
        let d = self.dirs[v.slot as usize].as_deref_mut().expect("mapped directories exist");
        debug_assert!(!d.has(oid) && d.rank(oid) == v.rank as usize);
        d.flip(oid, true);
        let grew = d.entries.len() == d.entries.capacity();
        if grew {
            let n = d.entries.len();
            d.entries.reserve_exact((n / 2).clamp(GROW_MIN, GROW_MAX));
            self.slots += d.entries.capacity() - n;
        }
        d.entries.insert(v.rank as usize, idx);
        self.len += 1;
        grew
    }

    /// The directory slot of `group`, made if missing.
    fn slot_or_insert(&mut self, group: u32) -> u32 {
        if let Some(s) = self.slot_of(group) {
            return s;
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.dirs.push(None);
                // Room for every slot on the free list, so that removals never allocate (the
                // growth is an insertion's, which the cache's headroom covers).
                if self.free.capacity() < self.dirs.len() {
                    self.free.reserve_exact(self.dirs.capacity() - self.free.len());
                }
                (self.dirs.len() - 1) as u32
            }
        };
        self.dirs[s as usize] = Some(Box::default());
        self.map.insert(group, s);
        self.last.set((group, s));
        s
    }

    /// Maps `key` to entry `idx` (replacing what it was mapped to, if anything). Returns
    /// whether the index's memory grew.
    pub fn insert(&mut self, key: u32, idx: u32) -> bool {
        let (group, oid) = split(key);
        let pages = self.map.len();
        let s = self.slot_or_insert(group);
        let new_dir = self.map.len() != pages;
        let d = self.dirs[s as usize].as_deref_mut().expect("mapped directories exist");
        let r = d.rank(oid);
        if d.has(oid) {
            d.entries[r] = idx;
            return false;
        }
        d.flip(oid, true);
        let grew = new_dir || d.entries.len() == d.entries.capacity();
        if d.entries.len() == d.entries.capacity() {
            // Grow by half, in bounded steps: bounded slack and few reallocations.
            let n = d.entries.len();
            d.entries.reserve_exact((n / 2).clamp(GROW_MIN, GROW_MAX));
            self.slots += d.entries.capacity() - n;
        }
        d.entries.insert(r, idx);
        self.len += 1;
        grew
    }

    /// Unmaps `key`; returns the entry it was mapped to.
    pub fn remove(&mut self, key: u32) -> Option<u32> {
        let (group, oid) = split(key);
        let s = self.slot_of(group)?;
        let d = self.dir_mut(s);
        if !d.has(oid) {
            return None;
        }
        let r = d.rank(oid);
        d.flip(oid, false);
        let idx = d.entries.remove(r);
        self.len -= 1;
        self.maybe_drop(group, s);
        Some(idx)
    }

    /// Drops the directory of `group` (in slot `s`) if it holds nothing.
    fn maybe_drop(&mut self, group: u32, s: u32) {
        let d = self.dir(s);
        if !d.entries.is_empty() || d.resident > 0 {
            return;
        }
        let cap = d.entries.capacity();
        self.slots -= cap;
        self.dirs[s as usize] = None;
        self.free.push(s);
        self.map.remove(&group);
        if self.last.get().0 == group {
            self.last.set((u32::MAX, 0));
        }
    }

    /// One more resident installed object of `key`'s page. `key` must be in the index.
    #[inline]
    pub fn add_resident(&mut self, key: u32) {
        let (group, _) = split(key);
        let s = self.slot_of(group).expect("a resident object has an entry");
        self.dir_mut(s).resident += 1;
    }

    /// One resident installed object of `key`'s page fewer; returns whether none is left.
    pub fn sub_resident(&mut self, key: u32) -> bool {
        let (group, _) = split(key);
        let Some(s) = self.slot_of(group) else {
            debug_assert!(false, "uncounted resident object {key:#x}");
            return true;
        };
        let d = self.dir_mut(s);
        debug_assert!(d.resident > 0, "uncounted resident object {key:#x}");
        d.resident = d.resident.saturating_sub(1);
        let none = d.resident == 0;
        self.maybe_drop(group, s);
        none
    }

    /// Resident installed objects of page `page` (a page id).
    pub fn resident(&self, page: u32) -> u32 {
        self.slot_of(page).map_or(0, |s| self.dir(s).resident)
    }

    /// Every page with resident installed objects, and their number (for invariant checks).
    pub fn resident_pages(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.map.iter().filter_map(|(&g, &s)| {
            let n = self.dir(s).resident;
            (n > 0).then_some((g, n))
        })
    }

    /// Every key and its entry, page by page (for tests and invariant checks).
    pub fn for_each(&self, mut f: impl FnMut(u32, u32)) {
        for (&g, &s) in &self.map {
            let d = self.dir(s);
            let mut r = 0;
            for (k, &w) in d.oids.iter().enumerate() {
                let mut w = w;
                while w != 0 {
                    let oid = (k * 64 + w.trailing_zeros() as usize) as u32;
                    w &= w - 1;
                    let key = ((g & !(1 << 31)) << 10) | (oid << 1) | (g >> 31);
                    f(key, d.entries[r]);
                    r += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn oref(page: u32, oid: u32) -> u32 {
        (page << 10) | (oid << 1)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u32),
        Remove(u32, u32),
        Get(u32, u32),
        /// Every key of a page goes (a frame's objects evicted), its resident count too.
        DropPage(u32),
        AddResident(u32, u32),
        SubResident(u32, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few pages, so that directories fill, empty and come back; oids over the whole range
        // and clustered low, as OO7's are; serial words too.
        let page = prop_oneof![1u32..6, Just(0x3F_FFFF)];
        let oid = prop_oneof![0u32..40, 0u32..512];
        prop_oneof![
            4 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::Insert(p, o)),
            2 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::Remove(p, o)),
            2 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::Get(p, o)),
            1 => page.clone().prop_map(Op::DropPage),
            1 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::AddResident(p, o)),
            1 => (page, oid).prop_map(|(p, o)| Op::SubResident(p, o)),
        ]
    }

    proptest! {
        /// Inserts, removals, lookups, growth of directories and eviction of a page's entries,
        /// against a map; orefs and serial words (odd keys) alike.
        #[test]
        fn matches_a_map(ops in proptest::collection::vec(op(), 1..800), serial in any::<bool>()) {
            let key = |p: u32, o: u32| oref(p, o) | u32::from(serial && p == 1);
            let mut idx = OrefIndex::new();
            let mut model: HashMap<u32, u32> = HashMap::new();
            let mut resident: HashMap<u32, u32> = HashMap::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Insert(p, o) => {
                        next += 1;
                        let (before, room) = (idx.memory_bytes(), idx.growth_bytes());
                        // Half the inserts go through find and fill, as swizzles do.
                        let grew = match idx.find(key(p, o)) {
                            Err(v) if next % 2 == 0 => idx.fill(v, next),
                            Ok(i) => {
                                prop_assert_eq!(Some(i), model.get(&key(p, o)).copied());
                                idx.insert(key(p, o), next)
                            }
                            Err(_) => idx.insert(key(p, o), next),
                        };
                        // What the budget relies on: a growth is reported (the cache then
                        // rebalances) and is within the headroom kept for it.
                        prop_assert_eq!(grew, idx.memory_bytes() > before);
                        prop_assert!(idx.memory_bytes() <= before + room);
                        model.insert(key(p, o), next);
                    }
                    Op::Remove(p, o) => {
                        let want = model.remove(&key(p, o));
                        // A page's directory stays while it has resident objects.
                        prop_assert_eq!(idx.remove(key(p, o)), want);
                    }
                    Op::Get(p, o) => {
                        prop_assert_eq!(idx.get(key(p, o)), model.get(&key(p, o)).copied());
                    }
                    Op::DropPage(p) => {
                        let keys: Vec<u32> =
                            model.keys().copied().filter(|&k| split(k).0 == split(key(p, 0)).0).collect();
                        for k in keys {
                            prop_assert_eq!(idx.remove(k), model.remove(&k));
                        }
                        let g = split(key(p, 0)).0;
                        while resident.get(&g).copied().unwrap_or(0) > 0 {
                            let n = resident.get_mut(&g).unwrap();
                            *n -= 1;
                            prop_assert_eq!(idx.sub_resident(key(p, 0)), *n == 0);
                        }
                        prop_assert_eq!(idx.resident(g), 0);
                    }
                    Op::AddResident(p, o) => {
                        if model.contains_key(&key(p, o)) {
                            idx.add_resident(key(p, o));
                            *resident.entry(split(key(p, o)).0).or_insert(0) += 1;
                        }
                    }
                    Op::SubResident(p, o) => {
                        let g = split(key(p, o)).0;
                        if let Some(n) = resident.get_mut(&g).filter(|n| **n > 0) {
                            *n -= 1;
                            prop_assert_eq!(idx.sub_resident(key(p, o)), *n == 0);
                        }
                    }
                }
                prop_assert_eq!(idx.len(), model.len());
                let mut seen = HashMap::new();
                idx.for_each(|k, i| { seen.insert(k, i); });
                prop_assert_eq!(&seen, &model);
                for (g, n) in &resident {
                    prop_assert_eq!(idx.resident(*g), *n);
                }
                // A directory exists exactly for a page with keys or resident objects.
                let mut groups: std::collections::HashSet<u32> =
                    model.keys().map(|&k| split(k).0).collect();
                groups.extend(resident.iter().filter(|(_, n)| **n > 0).map(|(g, _)| *g));
                prop_assert_eq!(idx.pages(), groups.len());
            }
            // Everything removed: nothing held but the page map's and the list's capacity.
            for (k, _) in model.drain() {
                let before = idx.memory_bytes();
                idx.remove(k);
                prop_assert!(idx.memory_bytes() <= before, "a removal never allocates");
            }
            for (g, n) in resident.drain() {
                for _ in 0..n {
                    idx.sub_resident(((g & !(1 << 31)) << 10) | (g >> 31));
                }
            }
            prop_assert_eq!(idx.pages(), 0);
            prop_assert_eq!(idx.slots, 0);
        }
    }

    #[test]
    fn a_full_page_and_its_memory() {
        let mut idx = OrefIndex::new();
        for o in (0..512).rev() {
            idx.insert(oref(9, o), 1000 + o);
        }
        for o in 0..512 {
            assert_eq!(idx.get(oref(9, o)), Some(1000 + o));
        }
        assert_eq!(idx.get(oref(10, 0)), None);
        assert_eq!(idx.get(oref(9, 0) | 1), None, "a serial word is another key");
        // 4 bytes an entry plus at most half again of slack, plus the directory.
        assert!(idx.memory_bytes() <= 512 * 6 + 256, "{}", idx.memory_bytes());
        for o in 0..512 {
            assert_eq!(idx.remove(oref(9, o)), Some(1000 + o));
        }
        assert_eq!(idx.pages(), 0);
        assert_eq!(idx.slots, 0);
    }
}
