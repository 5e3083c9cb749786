//! Demotion: clients give the pages they drop back to an exclusive page cache
//! (`papers/demote-exclusive-caching.txt`, with thor's server cache as the lower cache).
//!
//! A client that drops a page intact sends a *notice* on its next request. If the page cache
//! holds the page, it only moves to the evict-last end: no data travels. Otherwise the server
//! may *want* the page: it asks on the next reply, and the client sends the bytes on a later
//! request. The server keeps them only if they are still the page's current image:
//!
//! - **The bytes are the ones sent.** When the server sends a page to a session it keeps a
//!   keyed hash of it (SipHash keyed by `CoreConfig::hash_key`, secret to the driver, so a client
//!   cannot make a forged page match). Demoted bytes whose hash differs are refused: a client
//!   that sent its swizzled frame, a buggy or hostile one, never puts wrong bytes in the cache.
//!   The hash is kept only for pages sent exactly as installed (no MOB versions applied, not a
//!   fresh page): only those bytes are a page *image*, what the cache holds.
//! - **Nothing changed the page since.** Every published commit bumps a generation and marks
//!   the pages it wrote with it; a page written after the generation it was sent at is stale.
//!   Installs do not change what a page is (they move MOB versions into the image), so they do
//!   not count; and as the page was sent without MOB versions, an unchanged page has an
//!   unchanged image.
//!
//! # Bounds
//!
//! - Sent-page records: at most [`limits::DEMOTE_RECORDS_MAX`] over all sessions (a page sent
//!   when the table is full is not recorded and so is never taken back, only reordered). A
//!   session's records go when it ends, and a page's when the client discards it.
//! - Written-page marks: at most [`limits::DEMOTE_CHANGED_MAX`]. When full they are dropped and
//!   the generation at that moment becomes a floor: every page sent before it counts as
//!   changed. Conservative (a demotion refused that could have been kept), never wrong.
//! - Pages asked for and not yet received: at most [`DEMOTED_WANTED_MAX`] per session, so
//!   what a client must hold for the server is bounded too.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::PageId;
use thor_wire::limits::DEMOTED_WANTED_MAX;

use super::ConnId;
use crate::limits;
use crate::pagecache::{Demoted, PageCache};

/// What the server knows of a page it sent a session.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Keyed hash of the bytes sent.
    hash: u64,
    /// The commit generation when it was sent.
    generation: u64,
    /// The server asked for its bytes.
    asked: bool,
}

/// Demotion counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DemoteCounters {
    /// Notices received.
    pub notices: u64,
    /// Pages asked for.
    pub wanted: u64,
    /// Page data refused (changed, wrong bytes, or not asked for).
    pub refused: u64,
    /// Bytes of page data received.
    pub bytes: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Demotions {
    /// The key of the hash of sent pages (`CoreConfig::hash_key`).
    key: [u64; 2],
    sent: FxHashMap<ConnId, FxHashMap<PageId, Sent>>,
    records: usize,
    /// Pages asked for, to go on the session's next reply.
    wanted: FxHashMap<ConnId, Vec<PageId>>,
    /// Asked-for pages not received yet, per session.
    asked: FxHashMap<ConnId, usize>,
    /// The generation of the last published commit that wrote each page.
    changed: FxHashMap<PageId, u64>,
    generation: u64,
    /// Pages sent before this generation count as changed (see "Bounds").
    floor: u64,
    counters: DemoteCounters,
    /// How many times the records were changed: every `pub` method that takes `&mut self`
    /// adds one (the private ones are called only from those). No other code reaches the
    /// fields, so equal counts mean unchanged records.
    changes: u64,
    /// `(changes + 1, directories)` as of the last walk of [`Demotions::check_invariants`]
    /// that passed (`changes + 1` is 0: none yet). Atomics, not `Cell`s, to keep the core
    /// `Sync`; only `check_invariants` reads them.
    walked: [AtomicU64; 2],
}

impl Demotions {
    /// No pages sent yet; pages sent are hashed under `key` (secret from clients, so that
    /// none can make other bytes pass for a page it was sent).
    pub fn new(key: [u64; 2]) -> Demotions {
        Demotions {
            key,
            sent: FxHashMap::default(),
            records: 0,
            wanted: FxHashMap::default(),
            asked: FxHashMap::default(),
            changed: FxHashMap::default(),
            generation: 0,
            floor: 0,
            counters: DemoteCounters::default(),
            changes: 0,
            walked: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Counters.
    pub fn counters(&self) -> DemoteCounters {
        self.counters
    }

    /// Asserts what the module documentation promises: the record count is the records'
    /// number and within its bound, each session's asked-for count is its asked records and
    /// within [`DEMOTED_WANTED_MAX`], the written-page marks within theirs, the floor not past
    /// the generation. Calls `in_directory(conn, page)` for every page sent and not asked for:
    /// the client holds it, so concurrency control's directory must cover it.
    ///
    /// `directories` counts the changes to those directories ([`super::cc::Cc::directory_changes`]):
    /// the walk depends on the records and the directories alone, so when neither changed
    /// since the last walk that passed it is not repeated. (Demotion keeps a record of every
    /// page sent to every session: walking them all after every step of the simulation was
    /// the largest part of the time its invariants took.)
    pub fn check_invariants(
        &self,
        directories: u64,
        in_directory: impl FnMut(ConnId, PageId) -> bool,
    ) {
        let key = [self.changes + 1, directories];
        if key.iter().zip(&self.walked).all(|(k, w)| w.load(Ordering::Relaxed) == *k) {
            return;
        }
        self.walk(in_directory);
        for (k, w) in key.iter().zip(&self.walked) {
            w.store(*k, Ordering::Relaxed);
        }
    }

    /// The walk of [`Demotions::check_invariants`].
    fn walk(&self, mut in_directory: impl FnMut(ConnId, PageId) -> bool) {
        let records: usize = self.sent.values().map(|m| m.len()).sum();
        assert_eq!(records, self.records, "demotion records counted");
        assert!(self.records <= limits::DEMOTE_RECORDS_MAX);
        for (conn, m) in &self.sent {
            let asked = m.values().filter(|s| s.asked).count();
            assert_eq!(asked, self.asked.get(conn).copied().unwrap_or(0), "asked of {conn}");
            assert!(asked <= DEMOTED_WANTED_MAX);
            for (page, s) in m {
                assert!(s.generation <= self.generation);
                assert!(s.asked || in_directory(*conn, *page), "{conn} holds {page} off-directory");
            }
        }
        for (conn, n) in &self.asked {
            assert!(self.sent.contains_key(conn) || *n == 0, "asked without records: {conn}");
        }
        assert!(self.changed.len() <= limits::DEMOTE_CHANGED_MAX);
        assert!(self.floor <= self.generation.saturating_add(1));
        assert!(self.changed.values().all(|g| *g <= self.generation));
    }

    fn hash(&self, bytes: &[u8]) -> u64 {
        crate::siphash::hash(self.key, bytes)
    }

    /// `conn` was sent `page` as `bytes`, its installed image.
    pub fn page_sent(&mut self, conn: ConnId, page: PageId, bytes: &[u8]) {
        self.changes += 1;
        // A page asked for and fetched again instead: the client holds it, and its bytes
        // will not come (a client drops a demoted copy when the page returns).
        self.forget(conn, page);
        if self.records < limits::DEMOTE_RECORDS_MAX {
            let s = Sent { hash: self.hash(bytes), generation: self.generation, asked: false };
            self.sent.entry(conn).or_default().insert(page, s);
            self.records += 1;
        }
    }

    /// A commit that wrote objects of `pages` was published.
    pub fn pages_written(&mut self, pages: impl IntoIterator<Item = PageId>) {
        self.changes += 1;
        self.generation += 1;
        // A commit names a page once per object it writes there, one after the other: a page
        // is marked once per run (OO7's T2b: 4,000 marks, not 99,000).
        let mut last = None;
        for p in pages {
            if last == Some(p) {
                continue;
            }
            last = Some(p);
            if self.changed.len() >= limits::DEMOTE_CHANGED_MAX {
                self.changed.clear();
                self.floor = self.generation;
            }
            self.changed.insert(p, self.generation);
        }
    }

    fn unchanged(&self, page: PageId, s: &Sent) -> bool {
        s.generation >= self.floor && self.changed.get(&page).is_none_or(|&g| g <= s.generation)
    }

    fn forget(&mut self, conn: ConnId, page: PageId) -> Option<Sent> {
        let s = self.sent.get_mut(&conn)?.remove(&page)?;
        self.records -= 1;
        if s.asked
            && let Some(n) = self.asked.get_mut(&conn)
        {
            *n -= 1;
        }
        Some(s)
    }

    fn drop_asked(&mut self, conn: ConnId) {
        if let Some(m) = self.sent.get_mut(&conn) {
            let before = m.len();
            m.retain(|_, s| !s.asked);
            self.records -= before - m.len();
        }
        self.asked.remove(&conn);
        self.wanted.remove(&conn);
    }

    /// `conn` discarded `page`: unless the server asked for its bytes (which come on their
    /// own), nothing of it will come back.
    pub fn discarded(&mut self, conn: ConnId, page: PageId) {
        self.changes += 1;
        if self.sent.get(&conn).and_then(|m| m.get(&page)).is_some_and(|s| !s.asked) {
            self.forget(conn, page);
        }
    }

    /// `conn` demoted `page`: reorder it if cached, else ask for it if it is worth keeping.
    pub fn notice(&mut self, conn: ConnId, page: PageId, cache: &mut PageCache) {
        self.changes += 1;
        self.counters.notices += 1;
        match cache.demote(page, None) {
            Demoted::Reordered | Demoted::Stored => {
                self.forget(conn, page);
            }
            Demoted::NeedsData => {
                if self.asked.get(&conn).copied().unwrap_or(0) >= DEMOTED_WANTED_MAX {
                    // A client sends what was asked on its next request; one that has this
                    // many outstanding lost them (or never meant to send them): stop waiting.
                    self.drop_asked(conn);
                }
                let sent = self.sent.get(&conn).and_then(|m| m.get(&page)).copied();
                if !sent.is_some_and(|s| !s.asked && self.unchanged(page, &s)) {
                    self.forget(conn, page);
                    return;
                }
                if let Some(s) = self.sent.get_mut(&conn).and_then(|m| m.get_mut(&page)) {
                    s.asked = true;
                }
                *self.asked.entry(conn).or_insert(0) += 1;
                self.wanted.entry(conn).or_default().push(page);
                self.counters.wanted += 1;
            }
        }
    }

    /// `conn` sent the bytes of demoted `page`: keep them if they are its current image.
    pub fn data(&mut self, conn: ConnId, page: PageId, bytes: Bytes, cache: &mut PageCache) {
        self.changes += 1;
        self.counters.bytes += bytes.len() as u64;
        let ok = match self.forget(conn, page) {
            Some(s) if s.asked => self.unchanged(page, &s) && self.hash(&bytes) == s.hash,
            _ => false,
        };
        if !ok {
            self.counters.refused += 1;
            return;
        }
        cache.demote(page, Some(bytes));
    }

    /// The pages to ask `conn` for on its next reply (at most [`DEMOTED_WANTED_MAX`]).
    pub fn take_wanted(&mut self, conn: ConnId) -> Vec<PageId> {
        self.changes += 1;
        self.wanted.remove(&conn).unwrap_or_default()
    }

    /// Whether `conn` has pages to ask for.
    pub fn has_wanted(&self, conn: ConnId) -> bool {
        self.wanted.contains_key(&conn)
    }

    /// `conn`'s session ended.
    pub fn disconnect(&mut self, conn: ConnId) {
        self.changes += 1;
        if let Some(m) = self.sent.remove(&conn) {
            self.records -= m.len();
        }
        self.wanted.remove(&conn);
        self.asked.remove(&conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u32) -> PageId {
        PageId::new(n).unwrap()
    }

    fn cache() -> PageCache {
        PageCache::with_mode(4 * 1024, 1024, crate::pagecache::CacheMode::Exclusive)
    }

    #[test]
    fn the_invariants_are_walked_again_when_records_or_directories_change() {
        let mut d = Demotions::new([3, 4]);
        d.page_sent(1, p(3), &[7u8; 64]);
        let covered = |_: ConnId, _: PageId| true;
        let uncovered = |_: ConnId, _: PageId| false;
        d.check_invariants(0, covered);
        // Neither the records nor the directories changed: the walk that passed stands.
        d.check_invariants(0, uncovered);
        // A directory changed: the walk finds the page sent that it no longer covers.
        let walked = std::panic::catch_unwind(|| d.check_invariants(1, uncovered));
        assert!(walked.is_err(), "a page sent outside the directory is caught");
        d.check_invariants(1, covered);
        // The records changed: walked again.
        d.page_sent(1, p(4), &[7u8; 64]);
        let walked = std::panic::catch_unwind(|| d.check_invariants(1, uncovered));
        assert!(walked.is_err(), "a new record is checked");
    }

    #[test]
    fn a_page_is_taken_back_only_as_sent_and_unchanged() {
        let mut d = Demotions::new([3, 4]);
        let mut c = cache();
        let img = vec![7u8; 1024];
        d.page_sent(1, p(3), &img);
        d.notice(1, p(3), &mut c);
        assert_eq!(d.take_wanted(1), vec![p(3)]);
        // Other bytes: refused.
        let mut other = img.clone();
        other[100] ^= 1;
        d.data(1, p(3), Bytes::from(other), &mut c);
        assert_eq!(d.counters().refused, 1);
        assert!(c.peek(p(3)).is_none());
        // Asked again and sent right: kept.
        d.page_sent(1, p(3), &img);
        d.notice(1, p(3), &mut c);
        assert_eq!(d.take_wanted(1), vec![p(3)]);
        d.data(1, p(3), Bytes::from(img.clone()), &mut c);
        assert_eq!(c.peek(p(3)).map(|b| b.to_vec()), Some(img.clone()));
        assert_eq!(d.records, 0);
        // Unsolicited data: refused.
        d.data(1, p(4), Bytes::from(img), &mut c);
        assert_eq!(d.counters().refused, 2);
    }

    #[test]
    fn a_page_written_after_it_was_sent_is_not_asked_for_or_kept() {
        let mut d = Demotions::new([3, 4]);
        let mut c = cache();
        let img = vec![1u8; 1024];
        d.page_sent(1, p(3), &img);
        d.page_sent(1, p(4), &img);
        d.pages_written([p(3)]);
        d.notice(1, p(3), &mut c);
        assert!(d.take_wanted(1).is_empty(), "stale at the notice");
        d.notice(1, p(4), &mut c);
        assert_eq!(d.take_wanted(1), vec![p(4)]);
        d.pages_written([p(4)]);
        d.data(1, p(4), Bytes::from(img), &mut c);
        assert_eq!(d.counters().refused, 1, "stale when the data came");
        assert!(c.is_empty());
    }

    #[test]
    fn the_written_marks_are_bounded_by_a_floor() {
        let mut d = Demotions::new([3, 4]);
        d.page_sent(1, p(1), &[0u8; 1024]);
        for i in 0..=limits::DEMOTE_CHANGED_MAX as u32 {
            d.pages_written([p(2 + i)]);
        }
        assert!(d.changed.len() <= limits::DEMOTE_CHANGED_MAX);
        let s = d.sent[&1][&p(1)];
        assert!(!d.unchanged(p(1), &s), "sent before the floor: counts as changed");
    }

    #[test]
    fn a_session_asks_for_at_most_the_bound_and_forgets_all_at_disconnect() {
        let mut d = Demotions::new([3, 4]);
        let mut c = cache();
        for i in 1..=DEMOTED_WANTED_MAX as u32 {
            d.page_sent(1, p(i), &[0u8; 1024]);
            d.notice(1, p(i), &mut c);
        }
        assert_eq!(d.take_wanted(1).len(), DEMOTED_WANTED_MAX);
        // The next notice finds the session with the most outstanding: they are forgotten.
        d.page_sent(1, p(500), &[0u8; 1024]);
        d.notice(1, p(500), &mut c);
        assert_eq!(d.take_wanted(1), vec![p(500)]);
        assert_eq!(d.records, 1);
        d.disconnect(1);
        assert_eq!(d.records, 0);
    }
}
