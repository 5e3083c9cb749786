//! Prefetch at the server: the further pages a `Prefetch` reply carries
//! (`thor_wire::prefetch`, issue 16).
//!
//! A client asks for page `p` and up to `extra` more; the server, which has `p`'s bytes in hand
//! before the client does, picks them:
//!
//! ```text
//!   Prefetch {p, extra, hint}
//!        │
//!        ▼
//!   compose p (page cache + MOB, or a disk read the fetch waits for, as Fetch)
//!        │
//!        ▼
//!   candidates by hint ── referenced: the pages p's objects refer to, most referred to first
//!        │              └ following:  p+1, p+2, ... (creation order), up to the tail
//!        ▼
//!   keep a candidate only if: not p, not in the session's directory (the client may cache
//!   it), composable without I/O (cached or fresh); stop at min(extra, the server's cap)
//!        │
//!        ▼
//!   every page sent ──► registered as a fetched page is (directory, two-phase commit's
//!                        refetch marks, demotion's record of the bytes sent)
//! ```
//!
//! Only pages the server can send without reading the disk are sent: a prefetch is a guess,
//! and a guess must not make the asked page wait for a read of another. The candidates are
//! taken from the page's bytes as the server composed them (its own, so `PageView::parse` and
//! the class's shape are checked anyway and a malformed object is passed over, never a
//! panic), and classes are looked up only where they are known without I/O.
//!
//! *Invariant:* a page sent by prefetch is in the session's directory before the reply leaves,
//! exactly as a fetched page, so every later commit that changes one of its objects
//! invalidates the client's copy. Prefetched pages are composed in the same step as the asked
//! page, so they show exactly the commits published before that step, as the asked page does.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::le::u32_at;
use thor_core::{Oref, PageId, PageView, RawRef};
use thor_wire::PrefetchHint;

use super::{ConnId, Core};

/// What a `Prefetch` asked for beyond its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ahead {
    /// Most further pages.
    pub(super) extra: u16,
    /// How to choose them.
    pub(super) hint: PrefetchHint,
}

/// Counters of prefetch at the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefetchCounters {
    /// `Prefetch` requests answered with pages.
    pub requests: u64,
    /// Pages sent beyond the asked ones.
    pub pages: u64,
    /// Candidates passed over because they were not cached (a disk read would have brought
    /// them).
    pub uncached: u64,
}

/// Candidates examined per page sent, at most: bounds the work of a `Following` prefetch
/// whose next pages the client mostly caches already.
const CANDIDATES_PER_PAGE: usize = 4;

impl Core {
    /// The pages to send to `conn` after `page` (whose bytes, as composed for the reply, are
    /// `bytes`): at most `ahead.extra` and the server's own cap, chosen by `ahead.hint`, each
    /// composed now and registered as sent.
    pub(super) fn prefetch_pages(
        &mut self,
        conn: ConnId,
        page: PageId,
        bytes: &Bytes,
        ahead: Ahead,
    ) -> Vec<(PageId, Bytes)> {
        self.prefetch.requests += 1;
        let max = usize::from(ahead.extra)
            .min(self.cfg.prefetch_pages_max)
            .min(thor_wire::limits::PREFETCH_PAGES_MAX);
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        let candidates = match ahead.hint {
            PrefetchHint::Referenced => self.referenced_pages(page, bytes),
            // `PrefetchHint` is non-exhaustive; any other hint is the creation order.
            _ => {
                let tail = self.store.tail_page().get();
                let last = tail.min(page.get().saturating_add((max * CANDIDATES_PER_PAGE) as u32));
                (page.get() + 1..=last).filter_map(PageId::new).collect()
            }
        };
        for q in candidates.into_iter().take(max * CANDIDATES_PER_PAGE) {
            if out.len() >= max {
                break;
            }
            if q == page || q > self.store.tail_page() || self.cc.directory_has(conn, q) {
                continue;
            }
            match self.store.compose_if_cached(q) {
                None => self.prefetch.uncached += 1,
                // A page that does not compose is not sent: the client would refuse it, and
                // a fetch of it will report the error to whoever needs it.
                Some(Err(_)) => {}
                Some(Ok((b, applied))) => {
                    self.counters.fetch_versions_applied += applied as u64;
                    self.page_sent(conn, q, &b);
                    out.push((q, b));
                }
            }
        }
        self.prefetch.pages += out.len() as u64;
        out
    }

    /// The pages `page`'s objects refer to (not `page` itself), most referred to first, then
    /// in the order of their first reference. Objects whose class is not known without I/O,
    /// or that do not have their class's shape, are passed over.
    fn referenced_pages(&mut self, page: PageId, bytes: &Bytes) -> Vec<PageId> {
        let Ok(view) = PageView::parse(bytes) else { return Vec::new() };
        // Page id -> (references, first seen).
        let mut counts: FxHashMap<u32, (u32, u32)> = FxHashMap::default();
        let mut seen = 0u32;
        for (_, obj) in view.objects() {
            if obj.len() < thor_core::limits::OBJECT_HEADER_BYTES {
                continue;
            }
            let Some(class) = Oref::from_raw(u32_at(obj, 0)) else { continue };
            let Some(desc) = self.store.class_desc_cached(class) else { continue };
            if desc.check_shape(obj).is_err() {
                continue;
            }
            desc.for_each_ref_offset(obj, |off| {
                let RawRef::Oref(o) = RawRef::decode(u32_at(obj, off)) else {
                    return;
                };
                let Some(p) = o.page() else { return };
                if p == page {
                    return;
                }
                let e = counts.entry(p.get()).or_insert((0, seen));
                e.0 += 1;
                seen += 1;
            });
        }
        let mut ranked: Vec<(u32, (u32, u32))> = counts.into_iter().collect();
        ranked.sort_unstable_by_key(|&(_, (n, first))| (std::cmp::Reverse(n), first));
        ranked.into_iter().filter_map(|(p, _)| PageId::new(p)).collect()
    }

    /// Registers page `page`, whose bytes `bytes` go to `conn` now (fetched or prefetched):
    /// from now on the client may cache its objects, so commits that change them must
    /// invalidate its copies.
    pub(super) fn page_sent(&mut self, conn: ConnId, page: PageId, bytes: &Bytes) {
        self.cc.page_sent(conn, page);
        self.twopc_page_sent(conn, page);
        // The client may give the page back when it drops it, if these bytes are the page's
        // image (no MOB versions in them, not a fresh page).
        if self.sessions.demotes(conn)
            && !self.store.mob.has_page(page)
            && !self.store.is_fresh(page)
        {
            self.demotions.page_sent(conn, page, bytes);
        }
    }
}
