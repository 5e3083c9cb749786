//! The modified object buffer (MOB): committed object versions not yet installed in their pages.
//!
//! Thor ships objects, not pages, at commit (`papers/thor-ecoop99.txt` section 6). Installing
//! each object in its page at commit time would need the page first (an *installation read*)
//! and make every commit wait for the disk. Instead, a commit is made durable by the log and its
//! new versions wait here; a background flusher later installs them, many per page at once.
//!
//! ```text
//!   commit (durable in log) ──► MOB ──► flusher: read page, install all its versions,
//!                                │        write page, truncate the log prefix
//!   fetch(page) ◄── page image + MOB versions of that page
//! ```
//!
//! Three indexes over one set of entries:
//! - `entries`: oref → the newest version (older versions of the same object are dropped when a
//!   newer one arrives: only the newest is ever installed or fetched);
//! - `fifo`: (LSN, oref) in log order, so the flusher takes the oldest versions first and the
//!   log can be truncated below the oldest LSN still buffered;
//! - `by_page`: page → the objects of that page in the MOB, for fetches and for installing every
//!   pending version of a page in one write (write absorption).
//!
//! *Invariant:* the three indexes hold exactly the same (oref, LSN) pairs.
//! *Invariant:* `bytes` is the sum of [`entry_cost`] over the entries; the engine keeps it within
//! its budget by making commits wait for the flusher.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use thor_core::{Lsn, Oid, Oref, PageId};

/// Bytes charged for an entry besides its data: the three index entries and the allocation.
/// An estimate, deliberately generous, so that the budget bounds real memory.
pub const ENTRY_OVERHEAD_BYTES: usize = 96;

/// The memory an entry of `data_len` bytes is charged for.
pub fn entry_cost(data_len: usize) -> usize {
    data_len + ENTRY_OVERHEAD_BYTES
}

/// One buffered version.
#[derive(Debug, Clone)]
pub struct MobEntry {
    /// The commit that wrote it.
    pub lsn: Lsn,
    /// Its place in the FIFO: `lsn`, except for an object created by a buffered commit and
    /// modified again since, which keeps its creation LSN here. That pins the log at the
    /// creation record until the object is installed, so that every object created below the
    /// checkpoint is in the page file (recovery relies on it to know which pages are on disk).
    pub pin: Lsn,
    /// Whether the object was created by that commit (the page may not hold it yet).
    pub created: bool,
    /// The object's bytes, shared with fetches and the flusher without copying.
    pub data: Arc<[u8]>,
}

/// The modified object buffer. See the module documentation.
#[derive(Debug, Default)]
pub struct Mob {
    /// The newest buffered version of each object.
    entries: FxHashMap<Oref, MobEntry>,
    /// Buffered versions in log order.
    fifo: BTreeMap<(Lsn, Oref), ()>,
    /// The buffered objects of each page.
    by_page: FxHashMap<PageId, Vec<Oid>>,
    /// Sum of the entries' costs.
    bytes: usize,
}

impl Mob {
    /// An empty MOB.
    pub fn new() -> Mob {
        Mob::default()
    }

    /// Memory charged to buffered versions.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of buffered versions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The oldest LSN the buffered versions still need from the log.
    pub fn oldest_lsn(&self) -> Option<Lsn> {
        self.fifo.keys().next().map(|(lsn, _)| *lsn)
    }

    /// Buffers `data` as the newest version of `oref`, written by commit `lsn`. Versions must
    /// arrive in LSN order per object; an older version than the buffered one is ignored (as
    /// happens when recovery replays a record whose effect a later record supersedes).
    pub fn insert(&mut self, oref: Oref, lsn: Lsn, created: bool, data: Arc<[u8]>) {
        let page = oref.page().expect("MOB entries name real pages");
        match self.entries.get_mut(&oref) {
            Some(old) if old.lsn > lsn => {}
            Some(old) => {
                self.fifo.remove(&(old.pin, oref));
                self.bytes -= entry_cost(old.data.len());
                self.bytes += entry_cost(data.len());
                // A version of an object created by an earlier, still buffered commit still
                // needs the page to make room for it, and keeps the creation record pinned.
                let (created, pin) = if old.created { (true, old.pin) } else { (created, lsn) };
                *old = MobEntry { lsn, pin, created, data };
                self.fifo.insert((pin, oref), ());
            }
            None => {
                self.bytes += entry_cost(data.len());
                self.entries.insert(oref, MobEntry { lsn, pin: lsn, created, data });
                self.fifo.insert((lsn, oref), ());
                self.by_page.entry(page).or_default().push(oref.oid());
            }
        }
    }

    /// The newest buffered version of `oref`.
    pub fn get(&self, oref: Oref) -> Option<&MobEntry> {
        self.entries.get(&oref)
    }

    /// Whether page `page` has buffered versions.
    pub fn has_page(&self, page: PageId) -> bool {
        self.by_page.contains_key(&page)
    }

    /// Calls `f` for each buffered version of page `page`.
    pub fn for_page<'a>(&'a self, page: PageId, mut f: impl FnMut(Oid, &'a MobEntry)) {
        if let Some(oids) = self.by_page.get(&page) {
            for &oid in oids {
                let e = &self.entries[&Oref::new(page, oid)];
                f(oid, e);
            }
        }
    }

    /// The distinct pages of the oldest buffered versions, in log order, until `max_pages`
    /// pages are found: what the flusher installs next so that the log prefix can go.
    pub fn oldest_pages(&self, max_pages: usize) -> Vec<PageId> {
        let mut pages: Vec<PageId> = Vec::new();
        for (_, oref) in self.fifo.keys() {
            let p = oref.page().expect("MOB entries name real pages");
            if !pages.contains(&p) {
                if pages.len() == max_pages {
                    break;
                }
                pages.push(p);
            }
        }
        pages
    }

    /// Removes the version of `oref` written by `lsn` if it is still the buffered one (a newer
    /// version that arrived while the flusher was writing stays). Returns whether it was removed.
    pub fn remove_if(&mut self, oref: Oref, lsn: Lsn) -> bool {
        let Some(e) = self.entries.get(&oref) else { return false };
        if e.lsn != lsn {
            return false;
        }
        let cost = entry_cost(e.data.len());
        let pin = e.pin;
        self.entries.remove(&oref);
        self.fifo.remove(&(pin, oref));
        self.bytes -= cost;
        let page = oref.page().expect("MOB entries name real pages");
        if let Some(oids) = self.by_page.get_mut(&page) {
            oids.retain(|&o| o != oref.oid());
            if oids.is_empty() {
                self.by_page.remove(&page);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn oref(p: u32, o: u16) -> Oref {
        Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
    }

    fn data(n: u8) -> Arc<[u8]> {
        Arc::from(vec![n; 8])
    }

    #[test]
    fn newest_version_wins_and_fifo_follows() {
        let mut m = Mob::new();
        m.insert(oref(2, 0), Lsn(1), true, data(1));
        m.insert(oref(3, 0), Lsn(2), false, data(2));
        m.insert(oref(2, 0), Lsn(3), false, data(3));
        assert_eq!(m.len(), 2);
        assert_eq!(&*m.get(oref(2, 0)).unwrap().data, &[3; 8]);
        assert!(m.get(oref(2, 0)).unwrap().created, "still needs room in its page");
        assert_eq!(m.oldest_lsn(), Some(Lsn(1)), "the creation record stays pinned");
        assert_eq!(m.oldest_pages(10), vec![PageId::new(2).unwrap(), PageId::new(3).unwrap()]);
        m.insert(oref(3, 0), Lsn(4), false, data(4));
        assert_eq!(m.get(oref(3, 0)).unwrap().pin, Lsn(4), "plain versions are not pinned");
        // A stale replay does not overwrite.
        m.insert(oref(2, 0), Lsn(1), true, data(1));
        assert_eq!(&*m.get(oref(2, 0)).unwrap().data, &[3; 8]);
        assert!(!m.remove_if(oref(2, 0), Lsn(1)));
        assert!(m.remove_if(oref(2, 0), Lsn(3)));
        assert!(m.remove_if(oref(3, 0), Lsn(4)));
        assert!(m.is_empty());
        assert_eq!(m.bytes(), 0);
    }

    proptest! {
        /// The MOB against a map model: newest versions, byte accounting, page index, FIFO.
        #[test]
        fn matches_model(ops in proptest::collection::vec((1u32..6, 0u16..5, any::<bool>()), 1..200)) {
            let mut m = Mob::new();
            let mut model: HashMap<Oref, (Lsn, u8)> = HashMap::new();
            for (i, (p, o, remove)) in ops.into_iter().enumerate() {
                let r = oref(p, o);
                let lsn = Lsn(i as u64 + 1);
                if remove {
                    if let Some((l, _)) = model.get(&r).copied() {
                        prop_assert!(m.remove_if(r, l));
                        model.remove(&r);
                    }
                } else {
                    m.insert(r, lsn, false, data(i as u8));
                    model.insert(r, (lsn, i as u8));
                }
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.bytes(), model.len() * entry_cost(8));
                prop_assert_eq!(m.oldest_lsn(), model.values().map(|(l, _)| *l).min());
                for (r, (l, d)) in &model {
                    let e = m.get(*r).unwrap();
                    prop_assert_eq!(e.lsn, *l);
                    prop_assert_eq!(e.data[0], *d);
                    let mut seen = false;
                    m.for_page(r.page().unwrap(), |oid, _| seen |= oid == r.oid());
                    prop_assert!(seen);
                }
            }
        }
    }
}
