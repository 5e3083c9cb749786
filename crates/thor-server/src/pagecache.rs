//! The server's page cache: installed page images, least recently used first out, sized in bytes.
//!
//! It holds pages exactly as they are on disk (the latest installs); fetches add the MOB's
//! pending versions on the way out. Images are shared ([`Bytes`]) so a fetch of a page without
//! pending versions sends the cached bytes without copying them.
//!
//! *Invariant:* an image here is never older than the page on disk: every install replaces the
//! image of every page it wrote, and a page read from disk is inserted only if no install
//! completed while it was being read (the core's install generation).

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::PageId;
use thor_policy::{Lru, Placement, Policy};

/// Hit and miss counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Lookups that found the page.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Pages evicted to stay within the budget.
    pub evictions: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct PageCache {
    /// The images, by page.
    pages: FxHashMap<PageId, Bytes>,
    /// The eviction order: the same LRU the client caches and the simulator use.
    order: Option<Lru>,
    /// Counters.
    stats: PageCacheStats,
}

impl PageCache {
    /// A cache of at most `capacity_bytes` of `page_size`-byte pages.
    pub fn new(capacity_bytes: usize, page_size: usize) -> PageCache {
        let capacity = capacity_bytes / page_size;
        PageCache {
            pages: FxHashMap::default(),
            // A zero-page cache keeps nothing; the policy needs a positive capacity.
            order: (capacity > 0).then(|| Lru::new(capacity).expect("capacity within bounds")),
            stats: PageCacheStats::default(),
        }
    }

    /// The image of `page`, marking it used.
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
        let Some(order) = self.order.as_mut() else { return };
        let id = u64::from(page.get());
        if self.pages.insert(page, image).is_some() {
            order.touch(id);
            return;
        }
        if order.is_full()
            && let Some(victim) = order.evict(Some(id))
        {
            let victim = PageId::new(victim as u32).expect("cached ids are page ids");
            self.pages.remove(&victim);
            self.stats.evictions += 1;
        }
        order.insert(id, Placement::Referenced).expect("room was made");
    }

    /// Counters so far.
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether no page is held.
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
}
