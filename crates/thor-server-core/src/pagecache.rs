//! The server's page cache: installed page images, least recently used first out, sized in bytes.
//!
//! It holds pages exactly as they are on disk (the latest installs); fetches add the MOB's
//! pending versions on the way out. Images are shared ([`Bytes`]) so a fetch of a page without
//! pending versions sends the cached bytes without copying them.
//!
//! *Invariant:* an image here is never older than the page on disk: every install replaces the
//! image of every page it wrote, and a page read from disk is inserted only if no install
//! completed while it was being read (the core's install generation).
//!
//! # Inclusive and exclusive
//!
//! Client caches sit above this one, which is the hierarchy the DEMOTE paper is about
//! (`papers/demote-exclusive-caching.txt`). [`CacheMode::Inclusive`] is plain LRU: a page a
//! client reads becomes the most recently used here too, so both levels tend to hold the same
//! pages. [`CacheMode::Exclusive`] is DEMOTE's: a page read *for a client* (from disk or a
//! hit) goes to the evict-next end, since the client holds it now, and a page a client demotes
//! ([`PageCache::demote`]) goes to the evict-last end. Reads the server makes for itself
//! (validation, installation) and installed images are references in both modes. This is the
//! rule `thor-cachesim` applies to an MRU array under DEMOTE, so the simulator and the live
//! server can be compared on the same requests.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::PageId;
use thor_policy::{Lru, Placement, Policy};

/// How the cache places the pages clients read and demote. See the module documentation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// LRU: a page a client reads becomes the most recently used.
    #[default]
    Inclusive,
    /// DEMOTE: a page a client reads goes to the evict-next end, a demoted one to evict-last.
    Exclusive,
}

impl CacheMode {
    /// The mode's name, as the command line and the stats say it.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Inclusive => "inclusive",
            CacheMode::Exclusive => "exclusive",
        }
    }
}

/// What a demotion did ([`PageCache::demote`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demoted {
    /// The page was cached: it moved to the evict-last end; no data was needed.
    Reordered,
    /// The page was not cached and its image was given: it is cached at the evict-last end.
    Stored,
    /// The page was not cached and no image was given (or the cache holds nothing): the client
    /// must send the page for it to be kept.
    NeedsData,
}

/// Hit and miss counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Lookups that found the page.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Pages evicted to stay within the budget.
    pub evictions: u64,
    /// Demotions of a cached page: reordered, no data.
    pub demotions_reordered: u64,
    /// Demotions that brought a page's image.
    pub demotions_stored: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct PageCache {
    /// The images, by page.
    pages: FxHashMap<PageId, Bytes>,
    /// The eviction order: the same LRU the client caches and the simulator use.
    order: Option<Lru>,
    /// Where client reads and demotions go.
    mode: CacheMode,
    /// Counters.
    stats: PageCacheStats,
}

impl PageCache {
    /// An inclusive cache of at most `capacity_bytes` of `page_size`-byte pages.
    #[cfg(test)]
    pub fn new(capacity_bytes: usize, page_size: usize) -> PageCache {
        PageCache::with_mode(capacity_bytes, page_size, CacheMode::Inclusive)
    }

    /// A cache of at most `capacity_bytes` of `page_size`-byte pages in `mode`.
    pub fn with_mode(capacity_bytes: usize, page_size: usize, mode: CacheMode) -> PageCache {
        let capacity = capacity_bytes / page_size;
        PageCache {
            pages: FxHashMap::default(),
            // A zero-page cache keeps nothing; the policy needs a positive capacity.
            order: (capacity > 0).then(|| Lru::new(capacity).expect("capacity within bounds")),
            mode,
            stats: PageCacheStats::default(),
        }
    }

    /// Asserts the cache's relations: the eviction order holds as many pages as are cached,
    /// and no more than its capacity; a zero-page cache holds nothing. (Constant time: the core
    /// calls it after every step.)
    pub fn check_invariants(&self) {
        match &self.order {
            Some(o) => {
                assert_eq!(o.len(), self.pages.len(), "the order holds the cached pages");
                assert!(o.len() <= o.capacity(), "the page cache within its capacity");
            }
            None => assert!(self.pages.is_empty(), "a zero-page cache keeps nothing"),
        }
    }

    /// The mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// Where a page a client reads goes.
    fn client_placement(&self) -> Placement {
        match self.mode {
            CacheMode::Inclusive => Placement::Referenced,
            CacheMode::Exclusive => Placement::EvictNext,
        }
    }

    /// [`PageCache::get`] for a client's fetch: in exclusive mode a hit goes to the evict-next
    /// end (the client holds the page now).
    pub fn get_for_client(&mut self, page: PageId) -> Option<Bytes> {
        let Some(img) = self.pages.get(&page).cloned() else {
            self.stats.misses += 1;
            return None;
        };
        let at = self.client_placement();
        if let Some(o) = self.order.as_mut() {
            o.place(u64::from(page.get()), at);
        }
        self.stats.hits += 1;
        Some(img)
    }

    /// [`PageCache::insert`] of a page read from disk for a client: at the evict-next end in
    /// exclusive mode.
    pub fn insert_for_client(&mut self, page: PageId, image: Bytes) {
        let at = self.client_placement();
        self.insert_at(page, image, at);
    }

    /// A client demotes `page`, which it dropped from its cache: if cached here it moves to
    /// the evict-last end ([`Demoted::Reordered`]); else `image`, if given, is cached there
    /// ([`Demoted::Stored`]), evicting the next victim if the cache is full. The caller has
    /// checked that `image` is the page's current image (a stale one must not be stored).
    pub fn demote(&mut self, page: PageId, image: Option<Bytes>) -> Demoted {
        let id = u64::from(page.get());
        let Some(order) = self.order.as_mut() else { return Demoted::NeedsData };
        if order.place(id, Placement::EvictLast) {
            self.stats.demotions_reordered += 1;
            return Demoted::Reordered;
        }
        let Some(image) = image else { return Demoted::NeedsData };
        self.insert_at(page, image, Placement::EvictLast);
        self.stats.demotions_stored += 1;
        Demoted::Stored
    }

    /// The cached pages from the evict-next end (for tests and diagnostics).
    pub fn order(&self) -> Vec<PageId> {
        let mut ids = Vec::with_capacity(self.pages.len());
        if let Some(o) = self.order.as_ref() {
            o.snapshot(&mut ids);
        }
        ids.into_iter().map(|id| PageId::new(id as u32).expect("cached ids are page ids")).collect()
    }

    /// The image of `page`, marking it used.
    #[cfg(test)]
    pub fn get(&mut self, page: PageId) -> Option<Bytes> {
        match self.pages.get(&page) {
            Some(img) => {
                if let Some(o) = self.order.as_mut() {
                    o.touch(u64::from(page.get()));
                }
                self.stats.hits += 1;
                Some(img.clone())
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// The image of `page` without counting a lookup or changing the order.
    pub fn peek(&self, page: PageId) -> Option<&Bytes> {
        self.pages.get(&page)
    }

    /// Inserts or replaces the image of `page` as the most recently used, evicting the least
    /// recently used page if the cache is full.
    pub fn insert(&mut self, page: PageId, image: Bytes) {
        self.insert_at(page, image, Placement::Referenced);
    }

    /// Inserts or replaces the image of `page` at `at`, evicting the next victim if the
    /// cache is full.
    fn insert_at(&mut self, page: PageId, image: Bytes, at: Placement) {
        let Some(order) = self.order.as_mut() else { return };
        let id = u64::from(page.get());
        if self.pages.insert(page, image).is_some() {
            order.place(id, at);
            return;
        }
        if order.is_full()
            && let Some(victim) = order.evict(Some(id))
        {
            let victim = PageId::new(victim as u32).expect("cached ids are page ids");
            self.pages.remove(&victim);
            self.stats.evictions += 1;
        }
        order.insert(id, at).expect("room was made");
    }

    /// Counters so far.
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }

    /// Pages held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether no page is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u32) -> PageId {
        PageId::new(n).unwrap()
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = PageCache::new(3 * 1024, 1024);
        for n in 1..=3 {
            c.insert(p(n), Bytes::from(vec![n as u8; 4]));
        }
        assert!(c.get(p(1)).is_some());
        c.insert(p(4), Bytes::from(vec![4u8; 4]));
        assert!(c.peek(p(2)).is_none(), "2 was least recently used");
        assert!(c.peek(p(1)).is_some());
        assert_eq!(c.len(), 3);
        assert_eq!(c.stats().evictions, 1);
        assert!(c.get(p(2)).is_none());
        assert_eq!(c.stats().misses, 1);
    }

    fn img(n: u32) -> Bytes {
        Bytes::from(vec![n as u8; 4])
    }

    /// An exclusive cache of three 1 KiB pages holding 1, 2, 3 (3 most recently referenced).
    fn exclusive() -> PageCache {
        let mut c = PageCache::with_mode(3 * 1024, 1024, CacheMode::Exclusive);
        for n in 1..=3 {
            c.insert(p(n), img(n));
        }
        assert_eq!(c.order(), vec![p(1), p(2), p(3)]);
        c
    }

    #[test]
    fn read_for_client_goes_to_evict_next() {
        let mut c = exclusive();
        // A page read from disk for a client: the next to go, ahead of the older pages.
        c.insert_for_client(p(4), img(4));
        assert_eq!(c.order(), vec![p(4), p(2), p(3)], "1 was evicted, 4 goes next");
        // A hit for a client moves the page there too; an inclusive cache would keep it.
        assert!(c.get_for_client(p(3)).is_some());
        assert_eq!(c.order(), vec![p(3), p(4), p(2)]);
        let mut inclusive = PageCache::new(3 * 1024, 1024);
        for n in 1..=3 {
            inclusive.insert(p(n), img(n));
        }
        inclusive.insert_for_client(p(4), img(4));
        assert_eq!(inclusive.order(), vec![p(2), p(3), p(4)]);
    }

    #[test]
    fn demoted_page_lands_at_evict_last() {
        let mut c = exclusive();
        assert_eq!(c.demote(p(9), Some(img(9))), Demoted::Stored);
        assert_eq!(c.order(), vec![p(2), p(3), p(9)], "1 made room; 9 goes last");
        assert_eq!(c.peek(p(9)), Some(&img(9)));
        assert_eq!(c.stats().demotions_stored, 1);
    }

    #[test]
    fn demotion_of_cached_page_is_control_only() {
        let mut c = exclusive();
        // No image is needed for a page the cache holds: it only moves.
        assert_eq!(c.demote(p(1), None), Demoted::Reordered);
        assert_eq!(c.order(), vec![p(2), p(3), p(1)]);
        assert_eq!(c.peek(p(1)), Some(&img(1)), "the cached image stays");
        // A page it does not hold needs its image.
        assert_eq!(c.demote(p(7), None), Demoted::NeedsData);
        assert_eq!(c.order(), vec![p(2), p(3), p(1)]);
        assert_eq!((c.stats().demotions_reordered, c.stats().demotions_stored), (1, 0));
        // A cache of no pages keeps nothing.
        let mut none = PageCache::with_mode(0, 1024, CacheMode::Exclusive);
        assert_eq!(none.demote(p(1), Some(img(1))), Demoted::NeedsData);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        /// What a client does to the server's cache.
        #[derive(Debug, Clone)]
        enum Op {
            /// A client reads the page.
            ClientRead(u32),
            /// The server reads it for itself (validation, installation).
            ServerRead(u32),
            /// The client demotes it, sending its image if the server lacks it.
            Demote(u32),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (1u32..12).prop_map(Op::ClientRead),
                1 => (1u32..12).prop_map(Op::ServerRead),
                2 => (1u32..12).prop_map(Op::Demote),
            ]
        }

        proptest! {
            /// The exclusive cache against a list kept from the evict-next end, with a client
            /// cache of four pages above it that demotes what it evicts: the order matches the
            /// model after every step, and after a demotion the page is in the server's cache
            /// and not in the client's.
            #[test]
            fn exclusive_cache_matches_its_model(
                ops in proptest::collection::vec(op(), 1..200),
                capacity in 1usize..6,
            ) {
                let mut c = PageCache::with_mode(capacity * 1024, 1024, CacheMode::Exclusive);
                let mut model: Vec<u32> = Vec::new();
                let mut client: Vec<u32> = Vec::new(); // LRU, least recent first
                let put = |model: &mut Vec<u32>, n: u32, last: bool| {
                    if let Some(i) = model.iter().position(|&x| x == n) {
                        model.remove(i);
                    } else if model.len() == capacity {
                        model.remove(0);
                    }
                    if last { model.push(n) } else { model.insert(0, n) }
                };
                for op in ops {
                    match op {
                        Op::ClientRead(n) => {
                            if let Some(i) = client.iter().position(|&x| x == n) {
                                client.remove(i);
                                client.push(n);
                                continue; // a client hit: the server sees nothing
                            }
                            if client.len() == 4 {
                                let victim = client.remove(0);
                                let had = model.contains(&victim);
                                let d = c.demote(p(victim), Some(img(victim)));
                                prop_assert_eq!(d, if had { Demoted::Reordered } else { Demoted::Stored });
                                put(&mut model, victim, true);
                                prop_assert!(c.peek(p(victim)).is_some());
                                prop_assert!(!client.contains(&victim));
                            }
                            if c.get_for_client(p(n)).is_some() {
                                prop_assert!(model.contains(&n));
                                put(&mut model, n, false);
                            } else {
                                prop_assert!(!model.contains(&n));
                                c.insert_for_client(p(n), img(n));
                                put(&mut model, n, false);
                            }
                            client.push(n);
                        }
                        Op::ServerRead(n) => {
                            c.insert(p(n), img(n));
                            put(&mut model, n, true);
                        }
                        Op::Demote(n) => {
                            // Only a page the client holds can be demoted; it then drops it.
                            let Some(i) = client.iter().position(|&x| x == n) else { continue };
                            client.remove(i);
                            c.demote(p(n), Some(img(n)));
                            put(&mut model, n, true);
                            prop_assert!(c.peek(p(n)).is_some() && !client.contains(&n));
                        }
                    }
                    let want: Vec<PageId> = model.iter().map(|&n| p(n)).collect();
                    prop_assert_eq!(c.order(), want);
                }
            }
        }
    }
}
