//! The simulated clients' half of the page-based commit modes (`pd-redo`, `pd-esm`, `sd-esm`,
//! `sl-esm`, `wpl`; issue 14): a transaction's new object versions turned into what a page-mode
//! client sends, built with `thor_recovery`'s recovery buffer, differ and record encoder as
//! thor-client's `pagemode.rs` builds it.
//!
//! ```text
//!  each written object, in order ──► RecoveryBuffer::before_write(page, object's span, image)
//!        │ MakeRoom { oldest }            copies the page (PD) or its blocks (SD, SL)
//!        ▼
//!  oldest's record so far, with undo ──► PageRecords (sent before the commit, staged by the
//!                                        server); the image takes its new bytes; released
//!  at the end, each written page: diff (PD, SD) or the saved blocks (SL) ──► PageCommit
//!        records (redo only), ESM: the page whole (sealed)
//! ```
//!
//! The images are the pages the transaction fetched: every written object's page is fetched
//! by the transaction first (the simulated client keeps no cache), and the client holds back
//! the acknowledgement of any invalidation of an object on those pages until its commit is
//! answered, so a stale image is refused by CLOCC (the client's invalid set), never applied.
//! A small recovery buffer (a setting of the run) makes records go before the commit, and so
//! does a bound on the written pages a client holds (`steal_pages`, as thor-client's bound on
//! its page images): past it the oldest written page is *stolen*, its records so far (with
//! undo) and, ESM and WPL, the page whole go in a `PageRecords`, and the page is sent again
//! at commit only if it is written again after that.
//!
//! In `wpl` mode nothing is copied or diffed: each written page goes whole, as fetched with the
//! written objects laid in, carrying the `version` it was fetched with (`build_wpl`).

use bytes::Bytes;
use thor_core::{Oref, PageId, PageView};
use thor_recovery::record::{self, RecordHeader};
use thor_recovery::{
    BeforeWrite, Copies, Differ, Images, MergeCost, RecoveryBuffer, RecoveryBufferConfig, Span,
    TxnId,
};
use thor_wire::{CommitMode, PageCommit, PageRecords};

use crate::check::Violation;

/// How a simulated page-mode client's recovery buffer is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageClientConfig {
    /// `M`, in pages' worth of bytes (at least 1).
    pub buffer_pages: usize,
    /// SD's and SL's block size: a power of two from 8 bytes to the page size.
    pub block_bytes: usize,
    /// Most written pages held before the oldest is stolen (sent before the commit); 0: never.
    pub steal_pages: usize,
}

/// What a page-mode transaction sends: records before its commit (each in its own
/// `PageRecords`, as the client's recovery buffer releases one page at a time), then the
/// commit.
#[derive(Debug)]
pub(crate) struct PageTxn {
    pub early: Vec<PageRecords>,
    pub commit: PageCommit,
}

fn broken(why: impl std::fmt::Display) -> Violation {
    Violation(format!("a simulated page-mode client could not build its commit: {why}"))
}

/// One page the transaction writes: its image (as fetched, or as last sent early) and the
/// written objects' spans and new bytes, in first-write order.
struct PageWork {
    page: PageId,
    image: Vec<u8>,
    written: Vec<(Span, Bytes)>,
    /// Written since the page was last stolen (or at all): what the commit must send for it.
    dirty: bool,
    /// When it last became dirty, for stealing the oldest.
    since: usize,
}

impl PageWork {
    /// The image with every written object's new bytes laid in.
    fn current(&self) -> Vec<u8> {
        let mut cur = self.image.clone();
        for (s, b) in &self.written {
            cur[s.start..s.end].copy_from_slice(b);
        }
        cur
    }
}

/// Builds the page-mode form of a transaction that read `reads`, writes `versions` (each an
/// existing object, on a page in `images`) and creates `created`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    mode: CommitMode,
    cfg: PageClientConfig,
    page_size: usize,
    txn: u64,
    reads: Vec<Oref>,
    versions: &[(Oref, Bytes)],
    created: Vec<Bytes>,
    images: &[(PageId, Bytes)],
) -> Result<PageTxn, Violation> {
    if mode == CommitMode::Wpl {
        return build_wpl(page_size, cfg.steal_pages, txn, reads, versions, created, images);
    }
    let copies = match mode {
        CommitMode::SdEsm | CommitMode::SlEsm => Copies::Blocks { block_bytes: cfg.block_bytes },
        _ => Copies::Page,
    };
    let mut rbuf =
        RecoveryBuffer::new(RecoveryBufferConfig { page_size, pages: cfg.buffer_pages, copies })
            .map_err(broken)?;
    let mut differ = Differ::new(page_size);
    let mut regions = Vec::new();
    let mut work: Vec<PageWork> = Vec::new();
    let mut early = Vec::new();
    for (n, (o, bytes)) in versions.iter().enumerate() {
        let (w, span) = locate_write(&mut work, images, page_size, *o, bytes)?;
        if let Some(k) = steal_victim(&work, w, cfg.steal_pages) {
            let (cur, rec) = so_far(mode, &mut differ, &mut regions, &rbuf, &work[k], txn)?;
            early.push(stolen(mode, &mut work[k], rec, cur, txn));
            rbuf.release(work[k].page);
        }
        if !work[w].dirty {
            (work[w].dirty, work[w].since) = (true, n);
        }
        let page = work[w].page;
        // Each round either copies (done) or sends one page's records and releases it; the
        // buffer holds at least one page, so a page alone always fits after every release.
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > work.len() + 1 {
                return Err(broken("the recovery buffer never made room"));
            }
            match rbuf.before_write(page, span, &work[w].image).map_err(broken)? {
                BeforeWrite::Ready => break,
                BeforeWrite::MakeRoom { oldest } => {
                    let k = work
                        .iter()
                        .position(|x| x.page == oldest)
                        .ok_or_else(|| broken("the buffer named a page never written"))?;
                    let (cur, rec) = so_far(mode, &mut differ, &mut regions, &rbuf, &work[k], txn)?;
                    if let Some(rec) = rec {
                        let records = vec![Bytes::from(rec)];
                        early.push(PageRecords { txn, records, pages: Vec::new() });
                    }
                    // Later copies of this page start from what was sent.
                    work[k].image = cur;
                    rbuf.release(oldest);
                }
            }
        }
        work[w].written.push((span, bytes.clone()));
    }
    let mut records = Vec::new();
    let mut pages = Vec::new();
    work.sort_by_key(|w| w.page);
    for w in work.iter().filter(|w| w.dirty) {
        let cur = w.current();
        if let Some(rec) =
            page_record(mode, &mut differ, &mut regions, &rbuf, w, &cur, txn, Images::Redo)?
        {
            records.push(Bytes::from(rec));
        }
        if mode.ships_pages() {
            let mut p = cur;
            thor_core::page::seal(&mut p);
            pages.push((w.page, Bytes::from(p)));
        }
    }
    let writes = versions.iter().map(|(o, _)| *o).collect();
    let commit = PageCommit { txn, mode: mode.code(), reads, writes, created, records, pages };
    Ok(PageTxn { early, commit })
}

/// The page work of the write of `o` (`bytes`, its new version), started from its page in
/// `images` if it is the page's first write, and where on the page the object lies.
fn locate_write(
    work: &mut Vec<PageWork>,
    images: &[(PageId, Bytes)],
    page_size: usize,
    o: Oref,
    bytes: &[u8],
) -> Result<(usize, Span), Violation> {
    let page = o.page().ok_or_else(|| broken("a write of oref 0"))?;
    let w = match work.iter().position(|w| w.page == page) {
        Some(w) => w,
        None => {
            let (_, img) = images
                .iter()
                .find(|(p, _)| *p == page)
                .ok_or_else(|| broken(format!("page {page} was not fetched")))?;
            if img.len() != page_size {
                return Err(broken(format!("page {page} fetched with another size")));
            }
            work.push(PageWork {
                page,
                image: img.to_vec(),
                written: Vec::new(),
                dirty: false,
                since: 0,
            });
            work.len() - 1
        }
    };
    let view = PageView::parse(&work[w].image).map_err(broken)?;
    let range = view.object_range(o.oid()).ok_or_else(|| broken(format!("{o:?} missing")))?;
    if range.len() != bytes.len() {
        return Err(broken(format!("{o:?} changed size")));
    }
    Ok((w, Span::new(range.start, range.end)))
}

/// WPL's form of a transaction: no records, each written page whole (as fetched, with the
/// written objects laid in, sealed) carrying the `version` it was fetched with, which the
/// server's page rule checks.
fn build_wpl(
    page_size: usize,
    steal_pages: usize,
    txn: u64,
    reads: Vec<Oref>,
    versions: &[(Oref, Bytes)],
    created: Vec<Bytes>,
    images: &[(PageId, Bytes)],
) -> Result<PageTxn, Violation> {
    let mut work: Vec<PageWork> = Vec::new();
    let mut early = Vec::new();
    for (n, (o, bytes)) in versions.iter().enumerate() {
        let (w, span) = locate_write(&mut work, images, page_size, *o, bytes)?;
        if let Some(k) = steal_victim(&work, w, steal_pages) {
            let cur = work[k].current();
            early.push(stolen(CommitMode::Wpl, &mut work[k], None, cur, txn));
        }
        if !work[w].dirty {
            (work[w].dirty, work[w].since) = (true, n);
        }
        work[w].written.push((span, bytes.clone()));
    }
    work.sort_by_key(|w| w.page);
    let pages = work
        .iter()
        .filter(|w| w.dirty)
        .map(|w| {
            let mut p = w.current();
            thor_core::page::seal(&mut p);
            (w.page, Bytes::from(p))
        })
        .collect();
    let writes = versions.iter().map(|(o, _)| *o).collect();
    let mode = CommitMode::Wpl.code();
    let commit = PageCommit { txn, mode, reads, writes, created, records: Vec::new(), pages };
    Ok(PageTxn { early, commit })
}

/// `w`'s current bytes and its record so far with undo (what goes before the commit).
fn so_far(
    mode: CommitMode,
    differ: &mut Differ,
    regions: &mut Vec<Span>,
    rbuf: &RecoveryBuffer,
    w: &PageWork,
    txn: u64,
) -> Result<(Vec<u8>, Option<Vec<u8>>), Violation> {
    let cur = w.current();
    let rec = page_record(mode, differ, regions, rbuf, w, &cur, txn, Images::RedoUndo)?;
    Ok((cur, rec))
}

/// The page to steal before `w` is written, if `w` is not dirty and the dirty pages are
/// `steal_pages` already (0: never steal): the one dirty the longest.
fn steal_victim(work: &[PageWork], w: usize, steal_pages: usize) -> Option<usize> {
    if steal_pages == 0 || work[w].dirty || work.iter().filter(|x| x.dirty).count() < steal_pages {
        return None;
    }
    (0..work.len()).filter(|&k| work[k].dirty).min_by_key(|&k| work[k].since)
}

/// Steals `w` (its current bytes `cur`, its record so far `rec`): what goes before the commit
/// for it. The page's image becomes `cur`, and it is clean until written again.
fn stolen(
    mode: CommitMode,
    w: &mut PageWork,
    rec: Option<Vec<u8>>,
    cur: Vec<u8>,
    txn: u64,
) -> PageRecords {
    let mut pages = Vec::new();
    if mode.ships_pages() {
        let mut p = cur.clone();
        thor_core::page::seal(&mut p);
        pages.push((w.page, Bytes::from(p)));
    }
    w.image = cur;
    w.written.clear();
    w.dirty = false;
    PageRecords { txn, records: rec.map(Bytes::from).into_iter().collect(), pages }
}

/// The record of `w`'s changes from its saved units to `cur`, or `None` if nothing is saved
/// or nothing changed.
#[allow(clippy::too_many_arguments)]
fn page_record(
    mode: CommitMode,
    differ: &mut Differ,
    regions: &mut Vec<Span>,
    rbuf: &RecoveryBuffer,
    w: &PageWork,
    cur: &[u8],
    txn: u64,
    images: Images,
) -> Result<Option<Vec<u8>>, Violation> {
    let Some(pre) = rbuf.pre_image(w.page) else { return Ok(None) };
    let mut spans: Vec<Span> = w.written.iter().map(|(s, _)| *s).collect();
    spans.sort_unstable_by_key(|s| s.start);
    spans.dedup();
    let cost = MergeCost::format(images);
    if mode == CommitMode::SlEsm {
        differ.blocks(&pre, cur.len(), &spans, cost, regions).map_err(broken)?;
    } else {
        differ.diff(&pre, cur, &spans, cost, regions).map_err(broken)?;
    }
    if regions.is_empty() {
        return Ok(None);
    }
    let header = RecordHeader { page: w.page, txn: TxnId(txn), images };
    let mut out = Vec::with_capacity(record::encoded_bytes(regions, images));
    record::encode(&header, regions, cur, &pre, &mut out).map_err(broken)?;
    Ok(Some(out))
}
