//! The client's half of the page-based commit modes (issue 14,
//! `papers/quickstore-recovery-sigmod95.txt`): PD-REDO, PD-ESM, SD-ESM, SL-ESM and WPL.
//!
//! *WPL* (whole-page logging) uses only the page images: no copy before a write, no diff, no
//! record; at commit each written page goes whole, as its image with the written objects laid
//! in, carrying the `version` it was fetched with (the server refuses the commit if the page
//! was written since: WPL's page rule). After a commit the images take the commit's LSN as
//! their version; after an abort (a refusal by the page rule among them) the written pages'
//! images are dropped, so the next attempt fetches them fresh.
//!
//! The server says its mode in `HelloOk`; in a page mode the session commits with
//! `PageCommit` instead of `Commit`, and this module produces what that carries. The session
//! reaches it through its commit path (`session/commit_path.rs`, the `CommitPath` trait): the
//! page modes' implementation, `PageModes` in `session/page_path.rs`, holds the session's side
//! (fetching images, sending records early, building the `PageCommit`); this module holds
//! the state and the page arithmetic.
//!
//! # The client's pages
//!
//! QuickStore's client holds whole pages in its buffer pool and diffs them. thor's cache holds
//! objects (HAC keeps a page's hot objects, not the page), so the session keeps the *page
//! images* it needs beside the cache: the bytes of every page it fetched, as fetched
//! (`shadow`, bounded by [`RecoveryConfig::shadow_pages`], oldest dropped first, never a page
//! written by the open transaction). A page's image gives each object's place in the page (its
//! offset table) and the bytes around it; the cache gives each written object's new bytes
//! ([`ClientCache::export`](thor_cache::ClientCache::export)). A write to a page whose image was
//! dropped fetches the image again (counted in [`PageModeStats::image_fetches`]) without
//! touching the cache.
//!
//! # Copy on first update, diff at the end
//!
//! ```text
//!  first write of object X in page P ──► RecoveryBuffer::before_write(P, X's span, image of P)
//!        │ MakeRoom { oldest }                    copies the unit(s): the page (PD) or the
//!        ▼                                        64-byte blocks (SD, SL) not yet copied
//!  records of `oldest` (with undo) ──► PageRecords ──► server stages them; release; again
//!
//!  commit: for each page written:  current = image ⊕ saved units ⊕ written objects' new bytes
//!          diff (PD, SD) or log the saved blocks (SL) against the saved units, inside the
//!          written objects' spans, merged at minimum cost ──► page record (redo only)
//!          ESM: the current page whole as well
//! ```
//!
//! *Invariant:* the current page is built on top of the saved units, so that a byte outside
//! the written objects is equal in both (the diff refuses a change there rather than log
//! another client's update): a newer fetch of the page may have changed a neighbour since the
//! copy. The written objects' bytes are the cache's, which equal the image's at the first write
//! (both come from the same fetch or this client's own commit, and an invalidation of a
//! written object aborts the transaction).
//!
//! Records sent before commit change the page the next records are relative to: the image
//! takes the written objects' bytes at that point (it then holds uncommitted bytes, so an
//! abort drops those images) and the units copied afterwards start from there.
//!
//! The hook into the cache is the session's own: [`Session`](crate::Session)'s write path
//! calls its commit path's `before_write` after `ClientCache::before_write`, which in the page
//! modes calls [`PageState::first_write`], and a set of written objects decides whether it is
//! the first.
//!
//! # Dirty pages leave before commit (the paper's eviction of a dirty page)
//!
//! The images are bounded ([`RecoveryConfig::shadow_pages`]), written pages' included. When a
//! first write to a page not yet written would make the written pages more than the bound,
//! the oldest written page is *stolen*: its records so far go to the server with undo bytes
//! and, in the ESM modes and WPL, the page whole (one `PageRecords`), its saved units are
//! released and its image is dropped. The server stages what it got until the commit
//! (thor-study's `pagecommit.rs`). The written objects keep their new bytes in the cache
//! (no-steal there), so a later write to the page fetches the committed image again and lays
//! the transaction's objects back into it ([`PageState::restore_image`]); the page is then
//! written again and goes at commit as any other (ESM and WPL: the newer copy replaces the
//! stolen one at the server). A stolen page not written again sends nothing more.
//!
//! ```text
//!  first write to page P, P not written, written pages == bound
//!        ▼
//!  oldest written page Q: records (undo) + Q whole (ESM, WPL) ──► PageRecords ──► staged
//!  Q's image dropped, units released, Q's objects remembered as stolen
//!        ▼
//!  later first write to Q: image fetched, Q's objects' bytes laid in, Q written again
//! ```

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};
use thor_core::{PageId, PageView};
use thor_recovery::diff::Span;
use thor_recovery::record::{self, RecordHeader};
use thor_recovery::{
    BeforeWrite, Copies, Differ, Images, MergeCost, PreImage, RecoveryBuffer, RecoveryBufferConfig,
    TxnId,
};
use thor_wire::CommitMode;

use crate::error::ClientError;

/// Settings of the page modes' client side (unused in `obj` mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// `M`: the recovery buffer in pages' worth of memory (the paper's PD-ESM-4 has 4 MB of
    /// 8 KB pages: 512). The default, 1024 (8 MiB of 8 KiB pages), is the paper's
    /// unconstrained case for the small OO7 database's T2 traversals.
    pub buffer_pages: usize,
    /// The block of SD and SL: a power of two from 8 bytes to the page size. The paper's 64.
    pub block_bytes: usize,
    /// Most page images kept beside the cache, written pages' included (past it the oldest
    /// written page is stolen: sent before commit). 0 (the default): as many as the cache has
    /// pages' worth of bytes.
    pub shadow_pages: usize,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            buffer_pages: 1024,
            block_bytes: thor_recovery::limits::BLOCK_BYTES_DEFAULT,
            shadow_pages: 0,
        }
    }
}

/// What the page modes did, for the study's reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageModeStats {
    /// Page records sent (at commit and before).
    pub records: u64,
    /// Page records sent before commit (the recovery buffer made room).
    pub records_early: u64,
    /// Bytes of page records sent.
    pub record_bytes: u64,
    /// Dirty pages shipped whole (ESM).
    pub pages_shipped: u64,
    /// Bytes of dirty pages shipped.
    pub page_bytes: u64,
    /// Page images fetched again for a write (the image had been dropped, or lacked an object
    /// created since).
    pub image_fetches: u64,
    /// Dirty pages stolen before commit: their images left the client's memory after their
    /// records (and, ESM and WPL, the pages whole: also in `pages_shipped`) went early.
    pub pages_stolen: u64,
    /// Units copied into the recovery buffer.
    pub copies: u64,
    /// Bytes copied into the recovery buffer.
    pub copied_bytes: u64,
}

/// One written object of the open transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Written {
    /// Its cache entry (for its new bytes).
    pub entry: u32,
    /// Its oref word.
    pub oref: u32,
    /// Its bytes in the page.
    pub span: Span,
}

/// The page modes' per-session state.
#[derive(Debug)]
pub(crate) struct PageState {
    mode: CommitMode,
    page_size: usize,
    /// Copies of units before the transaction's first write to each.
    rbuf: RecoveryBuffer,
    differ: Differ,
    /// Page images, as fetched or as this client last committed or sent them.
    shadow: FxHashMap<PageId, Vec<u8>>,
    /// Shadow pages in insertion order, for dropping the oldest.
    shadow_order: VecDeque<PageId>,
    shadow_max: usize,
    /// The transaction number (in records' headers); a new one per transaction.
    pub txn: u64,
    /// Objects written by the open transaction (stored orefs) whose units are saved now: a
    /// write of one needs no copy. A page's objects leave it when its records go early (their
    /// units are released, and the next write must copy them again).
    written_orefs: FxHashSet<u32>,
    /// Written objects per page, in first-write order.
    written: FxHashMap<PageId, Vec<Written>>,
    /// Pages whose image took uncommitted bytes (records sent early).
    dirty_images: Vec<PageId>,
    /// Written objects of the pages stolen in the open transaction (their images are gone;
    /// their new bytes are in the cache), per page, until the page is written again.
    stolen: FxHashMap<PageId, Vec<Written>>,
    regions: Vec<Span>,
    pub stats: PageModeStats,
}

fn recovery_err(e: impl std::fmt::Display) -> ClientError {
    ClientError::PageMode(e.to_string())
}

impl PageState {
    /// The state of a session with a server in `mode` (page-based), a cache of `cache_bytes`.
    pub fn new(
        mode: CommitMode,
        page_size: usize,
        cache_bytes: usize,
        cfg: RecoveryConfig,
    ) -> Result<PageState, ClientError> {
        let copies = match mode {
            CommitMode::SdEsm | CommitMode::SlEsm => {
                Copies::Blocks { block_bytes: cfg.block_bytes }
            }
            _ => Copies::Page,
        };
        // WPL copies nothing before a write: its buffer is never used, so it is the smallest.
        let buffer_pages = if mode == CommitMode::Wpl { 1 } else { cfg.buffer_pages };
        let rbuf =
            RecoveryBuffer::new(RecoveryBufferConfig { page_size, pages: buffer_pages, copies })
                .map_err(recovery_err)?;
        let shadow_max =
            if cfg.shadow_pages == 0 { (cache_bytes / page_size).max(1) } else { cfg.shadow_pages };
        Ok(PageState {
            mode,
            page_size,
            rbuf,
            differ: Differ::new(page_size),
            shadow: FxHashMap::default(),
            shadow_order: VecDeque::new(),
            shadow_max,
            txn: 1,
            written_orefs: FxHashSet::default(),
            written: FxHashMap::default(),
            dirty_images: Vec::new(),
            stolen: FxHashMap::default(),
            regions: Vec::new(),
            stats: PageModeStats::default(),
        })
    }

    /// The mode.
    pub fn mode(&self) -> CommitMode {
        self.mode
    }

    /// Keeps a fetched page's image (replacing an older one), dropping the oldest images
    /// beyond the bound except those the open transaction wrote.
    pub fn put_image(&mut self, page: PageId, bytes: &[u8]) {
        // A stolen page's image must take the transaction's bytes first (`restore_image`).
        if bytes.len() != self.page_size || self.stolen.contains_key(&page) {
            return;
        }
        match self.shadow.get_mut(&page) {
            Some(img) => img.copy_from_slice(bytes),
            None => {
                self.shadow.insert(page, bytes.to_vec());
                self.shadow_order.push_back(page);
            }
        }
        self.trim(page);
    }

    /// Drops the oldest images beyond the bound, never a written page's nor `page`'s.
    fn trim(&mut self, page: PageId) {
        // Each round drops one image or moves a kept page to the back, so a full turn ends it.
        let mut turns = self.shadow_order.len();
        while self.shadow.len() > self.shadow_max && turns > 0 {
            turns -= 1;
            let Some(p) = self.shadow_order.pop_front() else { break };
            if self.written.contains_key(&p) || p == page {
                self.shadow_order.push_back(p);
            } else {
                self.shadow.remove(&p);
            }
        }
    }

    /// The written page to steal before `page` is first written, if the written pages fill
    /// the images' bound: the oldest of them.
    pub fn steal_victim(&self, page: PageId) -> Option<PageId> {
        if self.written.len() < self.shadow_max || self.written.contains_key(&page) {
            return None;
        }
        self.shadow_order.iter().copied().find(|p| self.written.contains_key(p))
    }

    /// Whether `page` was stolen in the open transaction and not written since.
    pub fn is_stolen(&self, page: PageId) -> bool {
        self.stolen.contains_key(&page)
    }

    /// The objects of stolen `page` whose bytes [`Self::restore_image`] lays in.
    pub fn stolen_on(&self, page: PageId) -> &[Written] {
        self.stolen.get(&page).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The committed image of stolen `page`, fetched again, with `objects` (the stolen
    /// objects' spans and new bytes, from the cache) laid in: the page as the server has it
    /// staged. Its objects are written again (without saved units: a next write copies).
    pub fn restore_image(
        &mut self,
        page: PageId,
        bytes: &[u8],
        objects: &[(Span, Vec<u8>)],
    ) -> Result<(), ClientError> {
        if bytes.len() != self.page_size {
            return Err(ClientError::Unexpected("a page image of another size"));
        }
        let Some(written) = self.stolen.remove(&page) else {
            return Err(ClientError::Unexpected("restore of a page not stolen"));
        };
        let mut img = bytes.to_vec();
        for (span, b) in objects {
            if b.len() != span.len() || span.end > img.len() {
                return Err(ClientError::Unexpected("a written object changed size"));
            }
            img[span.start..span.end].copy_from_slice(b);
        }
        self.shadow.insert(page, img);
        self.shadow_order.push_back(page);
        self.dirty_images.push(page);
        self.written.insert(page, written);
        self.trim(page);
        Ok(())
    }

    /// After `page`'s records (and page) went before commit to free its memory: the image and
    /// saved units go, and its objects are remembered for a later write of the page.
    pub fn stolen(&mut self, page: PageId, had_record: bool) {
        self.stats.records_early += u64::from(had_record);
        self.stats.pages_stolen += 1;
        let written = self.written.remove(&page).unwrap_or_default();
        for w in &written {
            self.written_orefs.remove(&w.oref);
        }
        self.stolen.entry(page).or_default().extend(written);
        self.shadow.remove(&page);
        self.shadow_order.retain(|q| *q != page);
        self.dirty_images.retain(|q| *q != page);
        self.rbuf.release(page);
    }

    /// Whether `oref` has been written in the open transaction.
    pub fn is_written(&self, oref: u32) -> bool {
        self.written_orefs.contains(&oref)
    }

    /// The span of object `oid` in the image of `page`, if the image is here and has it.
    pub fn object_span(&self, page: PageId, oid: thor_core::Oid) -> Option<Span> {
        let img = self.shadow.get(&page)?;
        let r = PageView::parse(img).ok()?.object_range(oid)?;
        Some(Span::new(r.start, r.end))
    }

    /// Before the first write of object `oref` (entry `entry`) at `span` of `page`: copies the
    /// units, or names the page whose records must be sent to make room.
    pub fn first_write(
        &mut self,
        oref: u32,
        entry: u32,
        page: PageId,
        span: Span,
    ) -> Result<Option<PageId>, ClientError> {
        let img = self.shadow.get(&page).ok_or(ClientError::Unexpected("no page image"))?;
        if self.mode == CommitMode::Wpl {
            // WPL saves nothing and diffs nothing: the page goes whole at commit.
            self.note_written(oref, entry, page, span);
            return Ok(None);
        }
        let before = self.rbuf.stats();
        match self.rbuf.before_write(page, span, img).map_err(recovery_err)? {
            BeforeWrite::Ready => {}
            BeforeWrite::MakeRoom { oldest } => return Ok(Some(oldest)),
        }
        let after = self.rbuf.stats();
        self.stats.copies += after.copies - before.copies;
        self.stats.copied_bytes += after.copied_bytes - before.copied_bytes;
        self.note_written(oref, entry, page, span);
        Ok(None)
    }

    fn note_written(&mut self, oref: u32, entry: u32, page: PageId, span: Span) {
        self.written_orefs.insert(oref);
        let on_page = self.written.entry(page).or_default();
        if !on_page.iter().any(|w| w.entry == entry) {
            on_page.push(Written { entry, oref, span });
        }
    }

    /// The written objects of `page` (entries and spans).
    pub fn written_on(&self, page: PageId) -> &[Written] {
        self.written.get(&page).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The pages written by the open transaction, in no particular order.
    pub fn written_pages(&self) -> Vec<PageId> {
        let mut v: Vec<PageId> = self.written.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The current image of `page`: its image, with the saved units laid back (so that
    /// nothing outside the written objects differs from them), then `objects`' new bytes
    /// (each written object's span and bytes).
    pub fn current(
        &self,
        page: PageId,
        objects: &[(Span, Vec<u8>)],
    ) -> Result<Vec<u8>, ClientError> {
        let mut cur =
            self.shadow.get(&page).ok_or(ClientError::Unexpected("no page image"))?.clone();
        if let Some(pre) = self.rbuf.pre_image(page) {
            for (at, old) in pre.pieces() {
                cur[at..at + old.len()].copy_from_slice(old);
            }
        }
        for (span, bytes) in objects {
            if bytes.len() != span.len() {
                return Err(ClientError::Unexpected("a written object changed size"));
            }
            cur[span.start..span.end].copy_from_slice(bytes);
        }
        Ok(cur)
    }

    /// The record of `page`'s changes from its saved units to `cur` (`None` if nothing
    /// changed or nothing is saved), with undo bytes when `images` asks.
    pub fn record(
        &mut self,
        page: PageId,
        cur: &[u8],
        images: Images,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        let mut spans: Vec<Span> = self.written_on(page).iter().map(|w| w.span).collect();
        spans.sort_unstable_by_key(|s| s.start);
        spans.dedup();
        let Some(pre) = self.rbuf.pre_image(page) else { return Ok(None) };
        let cost = MergeCost::format(images);
        let r = if self.mode == CommitMode::SlEsm {
            self.differ.blocks(&pre, cur.len(), &spans, cost, &mut self.regions)
        } else {
            self.differ.diff(&pre, cur, &spans, cost, &mut self.regions)
        };
        r.map_err(recovery_err)?;
        if self.regions.is_empty() {
            return Ok(None);
        }
        let header = RecordHeader { page, txn: TxnId(self.txn), images };
        let mut out = Vec::with_capacity(record::encoded_bytes(&self.regions, images));
        record::encode(&header, &self.regions, cur, &pre, &mut out).map_err(recovery_err)?;
        self.stats.records += 1;
        self.stats.record_bytes += out.len() as u64;
        Ok(Some(out))
    }

    /// After `page`'s records went early: the image takes `cur` (uncommitted now) and the
    /// saved units go, so that later copies start from `cur`.
    pub fn sent_early(&mut self, page: PageId, cur: Vec<u8>, had_record: bool) {
        self.stats.records_early += u64::from(had_record);
        for w in self.written.get(&page).map(Vec::as_slice).unwrap_or(&[]) {
            self.written_orefs.remove(&w.oref);
        }
        self.shadow.insert(page, cur);
        if !self.dirty_images.contains(&page) {
            self.dirty_images.push(page);
        }
        self.rbuf.release(page);
    }

    /// Counts an ESM page shipped.
    pub fn shipped(&mut self, bytes: usize) {
        self.stats.pages_shipped += 1;
        self.stats.page_bytes += bytes as u64;
    }

    /// The transaction committed at `lsn` with these final images of its pages. Under WPL
    /// the server logged each page with `version` = `lsn`, so the images say so: the next
    /// commit of the page then passes the page rule unless another commit wrote it since.
    pub fn committed(&mut self, images: Vec<(PageId, Vec<u8>)>, lsn: thor_core::Lsn) {
        for (page, mut img) in images {
            if self.mode == CommitMode::Wpl
                && let Ok(mut p) = thor_core::PageMut::open(&mut img)
            {
                p.set_version(lsn);
            }
            self.shadow.insert(page, img);
        }
        self.dirty_images.clear();
        self.end();
    }

    /// The transaction ended without committing: images holding its bytes are dropped (the
    /// next write fetches them again). Under WPL every written page's image goes too: a
    /// refusal by the page rule means the image is older than the page, and the next attempt
    /// must ship a fresh one.
    pub fn aborted(&mut self) {
        let mut drop_pages = std::mem::take(&mut self.dirty_images);
        if self.mode == CommitMode::Wpl {
            drop_pages.extend(self.written.keys().copied());
        }
        for p in drop_pages {
            self.shadow.remove(&p);
            self.shadow_order.retain(|q| *q != p);
        }
        self.end();
    }

    fn end(&mut self) {
        self.rbuf.clear();
        self.stolen.clear();
        self.written.clear();
        self.written_orefs.clear();
        self.txn += 1;
    }
}
