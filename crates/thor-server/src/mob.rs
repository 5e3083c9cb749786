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
//! Versions are not copied into the MOB: each is a slice ([`Bytes`]) of its commit's record
//! buffer, the one copy a commit's objects get on their way to the log. A record's buffer lives
//! as long as any of its versions is buffered, so the MOB charges each record's bytes once,
//! while at least one of its versions is here, plus a fixed overhead per entry: the charge is
//! the memory actually held, however versions are superseded or installed.
//!
//! *Invariant:* the three indexes hold exactly the same (oref, LSN) pairs.
//! *Invariant:* `bytes` is the sum of [`ENTRY_OVERHEAD_BYTES`] per entry plus the length of every
//! record that still has an entry; the server keeps it within its budget by making commits wait
//! for the flusher.

use std::collections::BTreeMap;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::{Lsn, Oid, Oref, PageId};

/// Bytes charged for an entry besides its data: the three index entries and the allocation.
/// An estimate, deliberately generous, so that the budget bounds real memory.
pub const ENTRY_OVERHEAD_BYTES: usize = 96;

/// The most memory a commit of `objects` objects in a record of `record_bytes` bytes can add
/// to the MOB: what a commit must find room for before it is accepted.
pub fn commit_cost(objects: usize, record_bytes: usize) -> usize {
    objects * ENTRY_OVERHEAD_BYTES + record_bytes
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
    /// The object's bytes: a slice of the commit's record, shared with fetches and the flusher
    /// without copying.
    pub data: Bytes,
}

/// The charge of one record: its bytes, held while any of its versions is buffered.
#[derive(Debug, Clone, Copy)]
struct RecordCharge {
    /// The record's length.
    bytes: usize,
    /// Buffered versions that are slices of it.
    live: usize,
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
    /// The records that buffered versions are slices of, by the LSN that wrote them.
    records: FxHashMap<Lsn, RecordCharge>,
    /// Memory charged (see the module documentation).
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

    /// Buffers `data` (a slice of the record of commit `lsn`, `record_bytes` long) as the newest
    /// version of `oref`. An older version than the buffered one is ignored (as happens when
    /// recovery replays a record whose effect a later record supersedes), except that an older
    /// creation pins its record (see [`MobEntry::pin`]).
    pub fn insert(
        &mut self,
        oref: Oref,
        lsn: Lsn,
        created: bool,
        data: Bytes,
        record_bytes: usize,
    ) {
        let page = oref.page().expect("MOB entries name real pages");
        match self.entries.get_mut(&oref) {
            Some(old) if old.lsn > lsn => {
                // An older creation of an object buffered with a newer version (recovery puts
                // WPL copies back before replaying the older records that created their
                // objects): the creation record must stay pinned until the object is
                // installed, so the entry takes its pin.
                if created && lsn < old.pin {
                    let old_pin = old.pin;
                    old.pin = lsn;
                    old.created = true;
                    self.fifo.remove(&(old_pin, oref));
                    self.fifo.insert((lsn, oref), ());
                } else if created {
                    old.created = true;
                }
            }
            Some(old) => {
                let (old_lsn, old_pin, old_created) = (old.lsn, old.pin, old.created);
                self.fifo.remove(&(old_pin, oref));
                self.release(old_lsn);
                self.charge(lsn, record_bytes);
                // A version of an object created by an earlier, still buffered commit still
                // needs the page to make room for it, and keeps the creation record pinned.
                let (created, pin) = if old_created { (true, old_pin) } else { (created, lsn) };
                self.entries.insert(oref, MobEntry { lsn, pin, created, data });
                self.fifo.insert((pin, oref), ());
            }
            None => {
                self.bytes += ENTRY_OVERHEAD_BYTES;
                self.charge(lsn, record_bytes);
                self.entries.insert(oref, MobEntry { lsn, pin: lsn, created, data });
                self.fifo.insert((lsn, oref), ());
                self.by_page.entry(page).or_default().push(oref.oid());
            }
        }
    }

    /// Counts one more version of record `lsn`, charging the record if it is new here.
    fn charge(&mut self, lsn: Lsn, record_bytes: usize) {
        let r = self.records.entry(lsn).or_insert(RecordCharge { bytes: record_bytes, live: 0 });
        if r.live == 0 {
            self.bytes += r.bytes;
        }
        r.live += 1;
    }

    /// Counts one version of record `lsn` fewer, releasing the record's charge with its last.
    fn release(&mut self, lsn: Lsn) {
        let r = self.records.get_mut(&lsn).expect("every entry's record is charged");
        r.live -= 1;
        if r.live == 0 {
            self.bytes -= r.bytes;
            self.records.remove(&lsn);
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
        let pin = e.pin;
        self.entries.remove(&oref);
        self.fifo.remove(&(pin, oref));
        self.bytes -= ENTRY_OVERHEAD_BYTES;
        self.release(lsn);
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

    fn data(n: u8) -> Bytes {
        Bytes::from(vec![n; 8])
    }

    #[test]
    fn newest_version_wins_and_fifo_follows() {
        let mut m = Mob::new();
        m.insert(oref(2, 0), Lsn(1), true, data(1), 8);
        m.insert(oref(3, 0), Lsn(2), false, data(2), 8);
        m.insert(oref(2, 0), Lsn(3), false, data(3), 8);
        assert_eq!(m.len(), 2);
        assert_eq!(&*m.get(oref(2, 0)).unwrap().data, &[3; 8]);
        assert!(m.get(oref(2, 0)).unwrap().created, "still needs room in its page");
        assert_eq!(m.oldest_lsn(), Some(Lsn(1)), "the creation record stays pinned");
        assert_eq!(m.oldest_pages(10), vec![PageId::new(2).unwrap(), PageId::new(3).unwrap()]);
        m.insert(oref(3, 0), Lsn(4), false, data(4), 8);
        assert_eq!(m.get(oref(3, 0)).unwrap().pin, Lsn(4), "plain versions are not pinned");
        // A stale replay does not overwrite.
        m.insert(oref(2, 0), Lsn(1), true, data(1), 8);
        assert_eq!(&*m.get(oref(2, 0)).unwrap().data, &[3; 8]);
        assert!(!m.remove_if(oref(2, 0), Lsn(1)));
        assert!(m.remove_if(oref(2, 0), Lsn(3)));
        assert!(m.remove_if(oref(3, 0), Lsn(4)));
        assert!(m.is_empty());
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn an_older_creation_arriving_after_a_newer_version_pins_its_record() {
        // Recovery puts a WPL copy's objects back (LSN 9) before replaying the record that
        // created one of them (LSN 4): the copy's bytes stay, the creation's pin is taken.
        let mut m = Mob::new();
        m.insert(oref(2, 0), Lsn(9), false, data(9), 8);
        assert_eq!(m.oldest_lsn(), Some(Lsn(9)));
        m.insert(oref(2, 0), Lsn(4), true, data(4), 8);
        let e = m.get(oref(2, 0)).unwrap();
        assert_eq!((&*e.data, e.lsn, e.pin, e.created), (&[9u8; 8][..], Lsn(9), Lsn(4), true));
        assert_eq!(m.oldest_lsn(), Some(Lsn(4)), "the creation record stays in the log");
        assert_eq!(m.bytes(), ENTRY_OVERHEAD_BYTES + 8, "nothing of the stale version is kept");
        // A plain older version changes nothing.
        m.insert(oref(2, 0), Lsn(2), false, data(2), 8);
        assert_eq!(m.get(oref(2, 0)).unwrap().pin, Lsn(4));
        assert!(m.remove_if(oref(2, 0), Lsn(9)));
        assert!(m.is_empty() && m.oldest_lsn().is_none());
    }

    #[test]
    fn a_record_is_charged_once_while_any_of_its_versions_is_buffered() {
        let mut m = Mob::new();
        let rec = Bytes::from(vec![7u8; 100]);
        m.insert(oref(2, 0), Lsn(1), false, rec.slice(0..8), 100);
        m.insert(oref(2, 1), Lsn(1), false, rec.slice(8..16), 100);
        assert_eq!(m.bytes(), 2 * ENTRY_OVERHEAD_BYTES + 100);
        // Superseding one version moves its share to the new record; the old one stays charged
        // for the other version.
        m.insert(oref(2, 0), Lsn(2), false, data(2), 8);
        assert_eq!(m.bytes(), 2 * ENTRY_OVERHEAD_BYTES + 100 + 8);
        assert!(m.remove_if(oref(2, 1), Lsn(1)));
        assert_eq!(m.bytes(), ENTRY_OVERHEAD_BYTES + 8, "the last version frees the record");
        assert!(m.remove_if(oref(2, 0), Lsn(2)));
        assert_eq!(m.bytes(), 0);
        assert_eq!(commit_cost(2, 100), 2 * ENTRY_OVERHEAD_BYTES + 100);
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
                    m.insert(r, lsn, false, data(i as u8), 8);
                    model.insert(r, (lsn, i as u8));
                }
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.bytes(), model.len() * (ENTRY_OVERHEAD_BYTES + 8));
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
