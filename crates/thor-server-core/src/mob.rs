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
//! One index over the entries, grouped by page, and one small table per commit:
//!
//! ```text
//!   pages:  page ──► [ (oid, entry) … ] sorted by oid    the newest version of each object
//!   groups: LSN  ──► { record bytes, live, pinned, pages }   one per commit still buffered
//! ```
//!
//! - `pages` finds a version with one lookup of its page (a few thousand at most, however many
//!   objects) and a binary search among the page's versions; a fetch or an install round takes
//!   a page's versions in one slice. Older versions of an object are dropped when a newer one
//!   arrives: only the newest is ever installed or fetched.
//! - `groups` is the log order: per LSN, how many buffered versions are slices of that record
//!   (`live`: the record's bytes are charged while it is nonzero), how many entries are *pinned*
//!   there ([`MobEntry::pin`]) and the pages of those entries, in the order they arrived. The
//!   oldest group with a pin is the oldest LSN the log must keep; its pages are what the
//!   flusher installs first.
//!
//! A commit of 99,000 objects used to cost three index entries per object (a hash map, a B-tree
//! of (LSN, oref) and a per-page list); it now costs a push into its page's sorted vector (in
//! order, for a commit that writes a page's objects in oid order) and one group. Nothing is
//! allocated per object.
//!
//! Versions are not copied into the MOB: each is a slice ([`Bytes`]) of its commit's record
//! buffer, the one copy a commit's objects get on their way to the log. A record's buffer lives
//! as long as any of its versions is buffered, so the MOB charges each record's bytes once,
//! while at least one of its versions is here, plus a fixed overhead per entry: the charge is
//! the memory actually held, however versions are superseded or installed.
//!
//! *Invariant:* every entry is in its page's vector, in oid order, at most once; a page's
//! vector is never empty; a group's `live` counts the entries whose `lsn` is its LSN and its
//! `pinned` the entries whose `pin` is; a group with neither is removed; every entry pinned at
//! a group's LSN has its page in that group's `pages` (which may also name pages whose entries
//! left or moved since).
//! *Invariant:* `bytes` is the sum of [`ENTRY_OVERHEAD_BYTES`] per entry plus the record bytes
//! of every group with a live version; the server keeps it within its budget by making commits
//! wait for the flusher.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::{Lsn, Oid, Oref, PageId};

/// Bytes charged for an entry besides its data: its place in its page's vector and the
/// record's share. An estimate, deliberately generous, so that the budget bounds real memory.
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
    /// Its place in the log order: `lsn`, except for an object created by a buffered commit
    /// and modified again since, which keeps its creation LSN here. That pins the log at the
    /// creation record until the object is installed, so that every object created below the
    /// checkpoint is in the page file (recovery relies on it to know which pages are on disk).
    pub pin: Lsn,
    /// Whether the object was created by that commit (the page may not hold it yet).
    pub created: bool,
    /// The object's bytes: a slice of the commit's record, shared with fetches and the flusher
    /// without copying.
    pub data: Bytes,
}

/// What the MOB keeps per LSN. See the module documentation.
#[derive(Debug, Clone, Default)]
struct Group {
    /// The record's length: charged while `live` is nonzero.
    record_bytes: usize,
    /// Buffered versions that are slices of this record.
    live: usize,
    /// Entries pinned here.
    pinned: usize,
    /// The pages of the entries pinned here, each once per run of arrivals (a page whose
    /// entries left or were pinned elsewhere since may still be named).
    pages: Vec<PageId>,
}

/// The modified object buffer. See the module documentation.
#[derive(Debug, Default)]
pub struct Mob {
    /// The newest buffered version of each object, per page, in oid order.
    pages: FxHashMap<PageId, Vec<(Oid, MobEntry)>>,
    /// Per LSN: its record's charge, its pins and their pages.
    groups: BTreeMap<Lsn, Group>,
    /// Buffered versions.
    len: usize,
    /// Memory charged (see the module documentation).
    bytes: usize,
    /// Where `insert_all` gathers a run of objects of a page new to the MOB, so that the
    /// page's vector is allocated once at its size (kept between calls: no allocation).
    run: Vec<(Oid, MobEntry)>,
    /// How many times the MOB was changed: every method that takes `&mut self` and changes
    /// an entry, a group, `len` or `bytes` adds one (`insert_all`, `remove_installed`; the
    /// others call these). No other code can reach the fields, so equal counts mean an
    /// unchanged MOB.
    changes: u64,
    /// `changes + 1` as of the last [`Mob::check_sums`] walk that passed (0: none yet), so
    /// that the core, which checks after every step, walks the MOB only after it changed. An
    /// atomic rather than a `Cell` so that the MOB stays `Sync`; only `check_sums` reads it.
    walked: AtomicU64,
}

/// Changes to one group that a batch insert accumulates instead of looking the group up per
/// object.
#[derive(Debug, Default)]
struct Delta {
    /// Versions of the group's record added, less those replaced within the batch.
    live: isize,
    /// Entries pinned at the group's LSN added, less those whose pin moved.
    pinned: isize,
    /// Pages of the entries pinned there, as `Group::pages` lists them.
    pages: Vec<PageId>,
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
        self.len
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The oldest LSN the buffered versions still need from the log.
    pub fn oldest_lsn(&self) -> Option<Lsn> {
        self.groups.iter().find(|(_, g)| g.pinned > 0).map(|(l, _)| *l)
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
        self.insert_all(lsn, record_bytes, std::iter::once((oref, created, data)));
    }

    /// [`Mob::insert`] for every object of one record (LSN `lsn`, `record_bytes` long): the
    /// record's group is looked up once, not per object.
    pub fn insert_all(
        &mut self,
        lsn: Lsn,
        record_bytes: usize,
        objects: impl IntoIterator<Item = (Oref, bool, Bytes)>,
    ) {
        self.changes += 1;
        let mut here = Delta::default();
        let mut objects = objects.into_iter().peekable();
        while let Some((oref, created, data)) = objects.next() {
            let page = oref.page().expect("MOB entries name real pages");
            let oid = oref.oid();
            if !self.pages.contains_key(&page) {
                // A page new to the MOB: its run of objects in increasing oid order (how a
                // commit lists a page's objects) are all new entries; the vector is made at
                // its size instead of doubling per page.
                let mut run = std::mem::take(&mut self.run);
                run.push((oid, MobEntry { lsn, pin: lsn, created, data }));
                while let Some((o, created, data)) = objects.next_if(|(o, _, _)| {
                    o.page() == Some(page) && run.last().is_some_and(|(l, _)| *l < o.oid())
                }) {
                    run.push((o.oid(), MobEntry { lsn, pin: lsn, created, data }));
                }
                let n = run.len();
                self.len += n;
                self.bytes += n * ENTRY_OVERHEAD_BYTES;
                here.live += n as isize;
                here.pinned += n as isize;
                note_page(&mut here.pages, page);
                let mut vs = Vec::with_capacity(n);
                vs.append(&mut run);
                self.pages.insert(page, vs);
                self.run = run;
                continue;
            }
            let vs = self.pages.get_mut(&page).expect("checked");
            let at = match vs.binary_search_by_key(&oid, |(o, _)| *o) {
                Ok(at) => at,
                Err(at) => {
                    self.bytes += ENTRY_OVERHEAD_BYTES;
                    self.len += 1;
                    let e = MobEntry { lsn, pin: lsn, created, data };
                    vs.insert(at, (oid, e));
                    here.live += 1;
                    here.pinned += 1;
                    note_page(&mut here.pages, page);
                    continue;
                }
            };
            let old = &mut vs[at].1;
            if old.lsn > lsn {
                // An older creation of an object buffered with a newer version (recovery puts
                // WPL copies back before replaying the older records that created their
                // objects): the creation record must stay pinned until the object is
                // installed, so the entry takes its pin.
                if created && lsn < old.pin {
                    let old_pin = old.pin;
                    old.pin = lsn;
                    old.created = true;
                    unpin(&mut self.groups, &mut here, lsn, old_pin);
                    here.pinned += 1;
                    note_page(&mut here.pages, page);
                } else if created {
                    old.created = true;
                }
                continue;
            }
            let (old_lsn, old_pin, old_created) = (old.lsn, old.pin, old.created);
            // A version of an object created by an earlier, still buffered commit still needs
            // the page to make room for it, and keeps the creation record pinned.
            let (created, pin) = if old_created { (true, old_pin) } else { (created, lsn) };
            *old = MobEntry { lsn, pin, created, data };
            here.live += 1;
            release(&mut self.groups, &mut self.bytes, &mut here, lsn, old_lsn);
            if pin != old_pin {
                unpin(&mut self.groups, &mut here, lsn, old_pin);
                here.pinned += 1;
                note_page(&mut here.pages, page);
            }
        }
        self.charge(lsn, record_bytes, here);
    }

    /// Applies what one record's objects changed (`here`) to the record's group: its live and
    /// pinned counts, its pages, and the record's charge.
    fn charge(&mut self, lsn: Lsn, record_bytes: usize, here: Delta) {
        if here.live == 0 && here.pinned == 0 && here.pages.is_empty() {
            return;
        }
        let g = self.groups.entry(lsn).or_default();
        let was_live = g.live > 0;
        g.live = (g.live as isize + here.live) as usize;
        g.pinned = (g.pinned as isize + here.pinned) as usize;
        if g.pages.is_empty() {
            g.pages = here.pages;
        } else {
            for p in here.pages {
                note_page(&mut g.pages, p);
            }
        }
        // The record is charged from its first live version to its last (a WPL commit's
        // versions and its created objects share an LSN with different record lengths: the
        // first charged stands, as it did when each record had its own charge entry).
        match (was_live, g.live > 0) {
            (false, true) => {
                g.record_bytes = record_bytes;
                self.bytes += record_bytes;
            }
            (true, false) => self.bytes -= g.record_bytes,
            _ => {}
        }
        if g.live == 0 && g.pinned == 0 {
            self.groups.remove(&lsn);
        }
    }

    /// The newest buffered version of `oref`.
    pub fn get(&self, oref: Oref) -> Option<&MobEntry> {
        let vs = self.pages.get(&oref.page()?)?;
        let at = vs.binary_search_by_key(&oref.oid(), |(o, _)| *o).ok()?;
        Some(&vs[at].1)
    }

    /// Whether page `page` has buffered versions.
    pub fn has_page(&self, page: PageId) -> bool {
        self.pages.contains_key(&page)
    }

    /// Calls `f` for each buffered version of page `page`, in oid order.
    pub fn for_page<'a>(&'a self, page: PageId, mut f: impl FnMut(Oid, &'a MobEntry)) {
        if let Some(vs) = self.pages.get(&page) {
            for (oid, e) in vs {
                f(*oid, e);
            }
        }
    }

    /// The distinct pages of the oldest buffered versions, in log order (within one commit, in
    /// the order its objects arrived), until `max_pages` pages are found: what the flusher
    /// installs next so that the log prefix can go.
    pub fn oldest_pages(&self, max_pages: usize) -> Vec<PageId> {
        let mut pages: Vec<PageId> = Vec::new();
        for (lsn, g) in &self.groups {
            if g.pinned == 0 {
                continue;
            }
            for &p in &g.pages {
                if pages.contains(&p) {
                    continue;
                }
                // A page named here whose entries left, or were pinned elsewhere since.
                let pinned_here =
                    self.pages.get(&p).is_some_and(|vs| vs.iter().any(|(_, e)| e.pin == *lsn));
                if !pinned_here {
                    continue;
                }
                if pages.len() == max_pages {
                    return pages;
                }
                pages.push(p);
            }
        }
        pages
    }

    /// Removes the version of `oref` written by `lsn` if it is still the buffered one (a newer
    /// version that arrived while the flusher was writing stays). Returns whether it was removed.
    #[cfg(test)]
    pub fn remove_if(&mut self, oref: Oref, lsn: Lsn) -> bool {
        let Some(page) = oref.page() else { return false };
        self.remove_installed(page, &[(oref.oid(), lsn)]) == 1
    }

    /// [`Mob::remove_if`] for versions of one page (`installed`, in oid order, as
    /// [`Mob::for_page`] gave them): one pass over the page's versions. Returns how many were
    /// removed.
    pub fn remove_installed(&mut self, page: PageId, installed: &[(Oid, Lsn)]) -> usize {
        self.changes += 1;
        let Some(vs) = self.pages.get_mut(&page) else { return 0 };
        let mut gone: Vec<(Lsn, Lsn)> = Vec::new();
        let mut next = installed.iter().peekable();
        vs.retain(|(oid, e)| {
            while next.next_if(|(o, _)| o < oid).is_some() {}
            match next.peek() {
                Some((o, l)) if o == oid && *l == e.lsn => {
                    next.next();
                    gone.push((e.lsn, e.pin));
                    false
                }
                _ => true,
            }
        });
        if vs.is_empty() {
            self.pages.remove(&page);
        }
        self.len -= gone.len();
        self.bytes -= gone.len() * ENTRY_OVERHEAD_BYTES;
        for (lsn, pin) in &gone {
            let g = self.groups.get_mut(lsn).expect("every entry's record has a group");
            g.live -= 1;
            if g.live == 0 {
                self.bytes -= g.record_bytes;
            }
            let g = self.groups.get_mut(pin).expect("every entry's pin has a group");
            g.pinned -= 1;
            for l in [lsn, pin] {
                if self.groups.get(l).is_some_and(|g| g.live == 0 && g.pinned == 0) {
                    self.groups.remove(l);
                }
            }
        }
        gone.len()
    }
}

impl Mob {
    /// The invariants a core asserts after every step, in one pass over the entries with no
    /// allocation: each page's entries non-empty and in oid order, each entry's pin not after
    /// its version, the entry count, every entry counted once live and once pinned over all
    /// groups, and the bytes equal to their sum (entries' overhead plus the records of live
    /// groups). [`Mob::check_invariants`] checks the per-group counts too (tests).
    ///
    /// A MOB that did not change since the last walk that passed (`changes`) is not walked
    /// again: the walk is a function of the MOB's state alone, so it would pass again. Most of
    /// a core's steps (fetches, ticks, acknowledgements) leave the MOB as it was; the
    /// simulation, which checks after every step, walked it for nothing.
    pub fn check_sums(&self) {
        if self.walked.load(Ordering::Relaxed) == self.changes + 1 {
            return;
        }
        self.walk_sums();
        self.walked.store(self.changes + 1, Ordering::Relaxed);
    }

    /// The walk of [`Mob::check_sums`].
    fn walk_sums(&self) {
        let mut n = 0;
        for (page, vs) in &self.pages {
            assert!(!vs.is_empty(), "page {page} has an empty vector");
            assert!(vs.windows(2).all(|w| w[0].0 < w[1].0), "page {page} out of oid order");
            assert!(vs.iter().all(|(_, e)| e.pin <= e.lsn), "page {page}: a pin after its version");
            n += vs.len();
        }
        assert_eq!(n, self.len, "MOB entries counted");
        let (mut live, mut pinned, mut bytes) = (0, 0, n * ENTRY_OVERHEAD_BYTES);
        for g in self.groups.values() {
            assert!(g.live > 0 || g.pinned > 0, "an empty group");
            live += g.live;
            pinned += g.pinned;
            if g.live > 0 {
                bytes += g.record_bytes;
            }
        }
        assert_eq!((live, pinned), (n, n), "every entry live in one group and pinned in one");
        assert_eq!(bytes, self.bytes, "the MOB's bytes are their sum");
    }

    /// Checks the invariants of the module documentation (tests).
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut live: BTreeMap<Lsn, usize> = BTreeMap::new();
        let mut pinned: BTreeMap<Lsn, usize> = BTreeMap::new();
        let mut n = 0;
        for (page, vs) in &self.pages {
            assert!(!vs.is_empty(), "page {page} has an empty vector");
            assert!(vs.windows(2).all(|w| w[0].0 < w[1].0), "page {page} out of oid order");
            for (_, e) in vs {
                assert!(e.pin <= e.lsn);
                *live.entry(e.lsn).or_default() += 1;
                *pinned.entry(e.pin).or_default() += 1;
                let g = &self.groups[&e.pin];
                assert!(g.pages.contains(page), "page {page} missing from group {:?}", e.pin);
                n += 1;
            }
        }
        assert_eq!(n, self.len);
        let mut bytes = n * ENTRY_OVERHEAD_BYTES;
        for (lsn, g) in &self.groups {
            assert_eq!(g.live, live.get(lsn).copied().unwrap_or(0), "live of {lsn:?}");
            assert_eq!(g.pinned, pinned.get(lsn).copied().unwrap_or(0), "pinned of {lsn:?}");
            assert!(g.live > 0 || g.pinned > 0, "empty group {lsn:?}");
            if g.live > 0 {
                bytes += g.record_bytes;
            }
        }
        assert_eq!(bytes, self.bytes);
    }
}

/// Appends `page` to a group's pages unless it is the last one named.
fn note_page(pages: &mut Vec<PageId>, page: PageId) {
    if pages.last() != Some(&page) {
        pages.push(page);
    }
}

/// One version of record `old` fewer (its entry took a newer version from record `lsn`, whose
/// changes `here` accumulates), releasing the record's charge with its last.
fn release(
    groups: &mut BTreeMap<Lsn, Group>,
    bytes: &mut usize,
    here: &mut Delta,
    lsn: Lsn,
    old: Lsn,
) {
    if old == lsn {
        here.live -= 1;
        return;
    }
    let g = groups.get_mut(&old).expect("every entry's record has a group");
    g.live -= 1;
    if g.live == 0 {
        *bytes -= g.record_bytes;
        if g.pinned == 0 {
            groups.remove(&old);
        }
    }
}

/// One entry pinned at `old` fewer (see [`release`]).
fn unpin(groups: &mut BTreeMap<Lsn, Group>, here: &mut Delta, lsn: Lsn, old: Lsn) {
    if old == lsn {
        here.pinned -= 1;
        return;
    }
    let g = groups.get_mut(&old).expect("every entry's pin has a group");
    g.pinned -= 1;
    if g.live == 0 && g.pinned == 0 {
        groups.remove(&old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rustc_hash::{FxHashMap as HashMap, FxHashSet};

    fn oref(p: u32, o: u16) -> Oref {
        Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
    }

    fn data(n: u8) -> Bytes {
        Bytes::from(vec![n; 8])
    }

    #[test]
    fn check_sums_walks_again_after_every_change() {
        let mut m = Mob::new();
        m.insert(oref(2, 0), Lsn(1), true, data(1), 8);
        m.check_sums();
        // A broken sum the walk would catch goes unnoticed while nothing changes (the walk
        // already passed for this state) ...
        m.bytes += 1;
        m.check_sums();
        // ... and is caught by the first check after any change.
        m.insert(oref(3, 0), Lsn(2), false, data(2), 8);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.check_sums()));
        assert!(caught.is_err(), "the walk after an insert finds the broken sum");
        m.bytes -= 1;
        m.check_sums();
        m.len += 1;
        m.remove_installed(PageId::new(3).unwrap(), &[]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.check_sums()));
        assert!(caught.is_err(), "the walk after a removal finds the broken count");
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

    /// One operation of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        /// A commit of (page, oid, created) objects at the next LSN.
        Commit(Vec<(u32, u16, bool)>),
        /// A replayed record at an older LSN (`back` below the next one).
        Old { back: u64, page: u32, oid: u16, created: bool },
        /// An install round of one page.
        Install(u32),
        /// One version removed by oref, if buffered.
        Remove(u32, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => proptest::collection::vec((1u32..6, 0u16..6, any::<bool>()), 1..12)
                .prop_map(Op::Commit),
            // Page by page in oid order, as a client's commit mostly lists them.
            2 => proptest::collection::vec((1u32..6, 0u16..6, any::<bool>()), 1..12)
                .prop_map(|mut v| {
                    v.sort_by_key(|(p, o, _)| (*p, *o));
                    Op::Commit(v)
                }),
            1 => (1u64..6, 1u32..6, 0u16..6, any::<bool>())
                .prop_map(|(back, page, oid, created)| Op::Old { back, page, oid, created }),
            2 => (1u32..6).prop_map(Op::Install),
            1 => (1u32..6, 0u16..6).prop_map(|(p, o)| Op::Remove(p, o)),
        ]
    }

    /// What the model keeps per object: lsn, pin, created.
    type Model = HashMap<Oref, (Lsn, Lsn, bool)>;

    /// The model's insert: the rules of [`Mob::insert`] on a plain map.
    fn model_insert(m: &mut Model, r: Oref, lsn: Lsn, created: bool) {
        match m.get_mut(&r) {
            Some(e) if e.0 > lsn => {
                if created && lsn < e.1 {
                    e.1 = lsn;
                }
                e.2 |= created;
            }
            Some(e) => {
                *e = if e.2 { (lsn, e.1, true) } else { (lsn, lsn, created) };
            }
            None => {
                m.insert(r, (lsn, lsn, created));
            }
        }
    }

    fn record_bytes(lsn: Lsn) -> usize {
        100 + lsn.0 as usize
    }

    proptest! {
        /// The MOB against a map model: newest versions, pins, byte accounting, page order,
        /// log order, through batch inserts, stale replays, install rounds and removals.
        #[test]
        fn matches_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut m = Mob::new();
            let mut model = Model::default();
            let mut next = 10u64;
            for op in ops {
                match op {
                    Op::Commit(objs) => {
                        let lsn = Lsn(next);
                        next += 1;
                        let mut seen = FxHashSet::default();
                        let objs: Vec<_> = objs
                            .into_iter()
                            .filter(|(p, o, _)| seen.insert((*p, *o)))
                            .collect();
                        for (p, o, c) in &objs {
                            model_insert(&mut model, oref(*p, *o), lsn, *c);
                        }
                        m.insert_all(
                            lsn,
                            record_bytes(lsn),
                            objs.iter().map(|(p, o, c)| (oref(*p, *o), *c, data(lsn.0 as u8))),
                        );
                    }
                    Op::Old { back, page, oid, created } => {
                        let lsn = Lsn(next.saturating_sub(back).max(1));
                        model_insert(&mut model, oref(page, oid), lsn, created);
                        let d = data(lsn.0 as u8);
                        m.insert(oref(page, oid), lsn, created, d, record_bytes(lsn));
                    }
                    Op::Install(p) => {
                        let page = PageId::new(p).unwrap();
                        let mut keys = Vec::new();
                        m.for_page(page, |oid, e| keys.push((oid, e.lsn)));
                        // A newer version arriving during the round stays.
                        if let Some((oid, _)) = keys.first() {
                            let lsn = Lsn(next);
                            next += 1;
                            let r = Oref::new(page, *oid);
                            model_insert(&mut model, r, lsn, false);
                            m.insert(r, lsn, false, data(lsn.0 as u8), record_bytes(lsn));
                        }
                        let removed = m.remove_installed(page, &keys);
                        let mut expect = 0;
                        for (oid, lsn) in &keys {
                            let r = Oref::new(page, *oid);
                            if model.get(&r).is_some_and(|e| e.0 == *lsn) {
                                model.remove(&r);
                                expect += 1;
                            }
                        }
                        prop_assert_eq!(removed, expect);
                    }
                    Op::Remove(p, o) => {
                        let r = oref(p, o);
                        if let Some((l, _, _)) = model.get(&r).copied() {
                            prop_assert!(!m.remove_if(r, Lsn(l.0 + 1000)));
                            prop_assert!(m.remove_if(r, l));
                            model.remove(&r);
                        }
                    }
                }
                m.check_invariants();
                prop_assert_eq!(m.len(), model.len());
                let lsns: std::collections::BTreeSet<Lsn> = model.values().map(|e| e.0).collect();
                let bytes = model.len() * ENTRY_OVERHEAD_BYTES
                    + lsns.iter().map(|l| record_bytes(*l)).sum::<usize>();
                prop_assert_eq!(m.bytes(), bytes);
                prop_assert_eq!(m.oldest_lsn(), model.values().map(|e| e.1).min());
                for (r, (l, pin, c)) in &model {
                    let e = m.get(*r).unwrap();
                    prop_assert_eq!((e.lsn, e.pin, e.created), (*l, *pin, *c));
                    prop_assert_eq!(e.data[0], l.0 as u8);
                }
                // The oldest pages: every page with a version pinned at the oldest pin first.
                let all = m.oldest_pages(usize::MAX);
                let mut want: Vec<PageId> = model.keys().map(|r| r.page().unwrap()).collect();
                want.sort();
                want.dedup();
                let mut got = all.clone();
                got.sort();
                prop_assert_eq!(got, want, "every buffered page, once");
                if let Some(oldest) = m.oldest_lsn() {
                    let first = all[0];
                    let pinned = |(r, e): (&Oref, &(Lsn, Lsn, bool))| {
                        r.page() == Some(first) && e.1 == oldest
                    };
                    prop_assert!(model.iter().any(pinned));
                }
            }
        }
    }
}
