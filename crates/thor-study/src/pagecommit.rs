//! The page-based commit modes at the server (issue 14, `papers/quickstore-recovery-sigmod95.txt`):
//! PD-REDO, PD-ESM, SD-ESM and SL-ESM beside thor's own `obj` mode, and the entry of WPL
//! (whole-page logging: [`PageCommits::page_commit`] in `wpl` mode here, the rest in
//! `crate::wpl`), whose commits carry pages and no records. These are the page hooks of the
//! core's commit-path seam (`thor_server_core::CommitPath::page_records`, `page_commit`,
//! `page_read`, `disconnect`), which [`crate::StudyPath`] routes here.
//!
//! # What arrives
//!
//! A client in a page mode describes its updates as *page records* (`thor_recovery::record`):
//! the changed regions of one page, found by diffing the page against the copy its recovery
//! buffer took at the first update. Records the recovery buffer had to send before commit come
//! in `PageRecords` requests, with undo bytes; the rest come with `PageCommit`, which also
//! carries the read set, the write set (the objects the regions lie in) and the created
//! objects, and in the ESM modes every dirty page whole.
//!
//! ```text
//!  PageRecords (undo; stolen pages) ──► staged per connection (bounded), never applied
//!                                        before commit
//!  PageCommit ──► mode checked ──► records parsed (staged ones of the same txn first);
//!                  pages: the staged ones, each replaced by the commit's copy if it ships one
//!                  │
//!                  ├─ ESM: the written objects' bytes come from the shipped pages
//!                  └─ REDO: each page's committed image (page cache + MOB, or read from
//!                     disk: the head parks until the read comes) with the records' redo
//!                     applied in order
//!                  ▼
//!      every region inside a written object, else refused (`BadPageRecord`)
//!                  ▼
//!      CommitIn { reads, versions: the written objects' new bytes, created }
//!                  ▼
//!      thor's commit path: CLOCC validation per object, the commit record forced to the log,
//!      CommitOk once durable, the versions into the MOB, installed later
//! ```
//!
//! # Why records are staged, not applied, before commit
//!
//! The paper's ESM server applies a record sent before commit to its cached page at once and
//! keeps its undo bytes to take it back on abort (the page may be stolen to disk meanwhile).
//! thor's invariant is stronger: no fetch ever sees a transaction before its commit record is
//! durable (other clients fetch the same pages, and CLOCC validates per object). So early
//! records wait, per connection and bounded by [`STAGED_BYTES_MAX`], and are applied in the
//! same step as the commit's own records. Their undo bytes travel (the study counts them) and
//! are checked by the decoder, but are never needed: an abort, a refusal, a newer transaction
//! number or a disconnect drops what is staged, and nothing of it ever reached a page or the
//! log. A crash loses the staging, which held nothing acknowledged.
//!
//! # Why the result is thor's commit record
//!
//! The records are applied at commit to the committed image, which yields the complete new
//! bytes of every written object; those are logged as thor's commit record (kind 2) and go
//! through the MOB. A region logged as such could not be replayed without its page (the log is
//! replayed into the MOB, before any page is read); the whole object can. So recovery, the
//! install rounds and the double-write buffer are `obj` mode's and the crash analysis of
//! `docs/format.md` covers every page mode unchanged, while what the client produces and ships
//! (the study's subject) is the paper's.
//!
//! # Why a stale base is harmless
//!
//! A region overwrites bytes of one written object; the object's other bytes come from the
//! server's committed image. If that image's version of the object is not the one the client
//! diffed against, some commit wrote the object after the client's copy was sent, and CLOCC,
//! which validates every written object as read, refuses the transaction. A commit that passes
//! validation was diffed against exactly the image its records are applied to.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::{Oref, PageId, PageView};
use thor_recovery::{Images, PageRecord};
use thor_server_core::{
    CommitIn, ConnId, EngineError, InvalidCommit, PageCounters, PageReads, PageStep, Requester,
};
use thor_wire::{CommitMode, PageCommit, PageRecords};

/// Most bytes of page records staged for one connection's open transaction. The client's
/// recovery buffer sends early records only when it is full, so a transaction stages about as
/// much as it writes; 64 MiB is a frame's worth, above OO7 T2B on the small database (about
/// 8 MB of records with undo) and far below a server's memory.
pub const STAGED_BYTES_MAX: usize = 64 << 20;

// The wire admits every record the recovery crate can encode.
const _: () = assert!(
    thor_wire::limits::PAGE_RECORD_BYTES_MAX >= thor_recovery::limits::PAGE_RECORD_BYTES_MAX
);

/// What one connection's open transaction sent before its commit.
#[derive(Debug, Default)]
struct Staged {
    /// The transaction they belong to.
    txn: u64,
    /// The records, in arrival order (each checked by the decoder).
    records: Vec<Bytes>,
    /// Dirty pages stolen from the client (ESM, WPL), each checked as a stored page; a page
    /// stolen twice keeps its newer copy.
    pages: Vec<(PageId, Bytes)>,
    /// Bytes of records and pages, against [`STAGED_BYTES_MAX`]; `usize::MAX` once something
    /// of the transaction was refused (its commit is then refused too).
    bytes: usize,
}

/// A page-based commit waiting for page images.
#[derive(Debug)]
struct Parked {
    from: Requester,
    commit: PageCommit,
    /// Every record to apply, early ones first, in order.
    records: Vec<Bytes>,
    /// The images at hand: the committed image of each page to apply records to.
    images: Vec<(PageId, Bytes)>,
    /// Pages still being read.
    waiting: Vec<PageId>,
    /// Bytes per page.
    page_size: usize,
}

/// The page modes' state in a server: what connections staged, the commits waiting for page
/// reads, and the counters.
#[derive(Debug, Default)]
pub struct PageCommits {
    /// Early records per connection (removed at commit, refusal and disconnect).
    staged: FxHashMap<ConnId, Staged>,
    /// Commits waiting for page reads: at most one per connection (a session's later
    /// requests wait for its commit's answer), so bounded by the connection limit.
    parked: Vec<Parked>,
    /// Counters.
    pub counters: PageCounters,
}

impl Staged {
    /// Marks the transaction refused: what it staged goes, and its commit will be refused.
    fn poison(&mut self) {
        self.bytes = usize::MAX;
        self.records = Vec::new();
        self.pages = Vec::new();
    }

    /// `c`'s pages with the staged ones its commit does not ship again added, or why the
    /// commit must be refused.
    fn merge_into(self, c: &mut PageCommit) -> Result<Vec<Bytes>, &'static str> {
        if self.txn != c.txn {
            // Staged under an older transaction number: that transaction ended unanswered.
            return Ok(Vec::new());
        }
        if self.bytes == usize::MAX {
            return Err("what this transaction sent before its commit was refused");
        }
        for (p, bytes) in self.pages {
            if !c.pages.iter().any(|(q, _)| *q == p) {
                c.pages.push((p, bytes));
            }
        }
        Ok(self.records)
    }
}

fn bad(why: impl Into<String>) -> EngineError {
    EngineError::Invalid(InvalidCommit::BadPageRecord(why.into()))
}

/// Checks what a `PageRecords` carries for a server in `mode`.
fn check_early(r: &PageRecords, mode: CommitMode, page_size: usize) -> Result<(), String> {
    if !r.records.is_empty() && !mode.sends_records() {
        return Err(format!("the server's commit mode is {mode}, which takes no page records"));
    }
    if !r.pages.is_empty() && !mode.ships_pages() {
        return Err(format!("the server's commit mode is {mode}, which takes no pages"));
    }
    for (i, (p, bytes)) in r.pages.iter().enumerate() {
        if r.pages[..i].iter().any(|(q, _)| q == p) {
            return Err(format!("page {p} stolen twice in one message"));
        }
        if bytes.len() != page_size {
            return Err("a stolen page of another size".into());
        }
        PageView::parse_stored(bytes, *p).map_err(|e| format!("stolen page {p}: {e}"))?;
    }
    for rec in &r.records {
        let p = PageRecord::parse(rec, page_size).map_err(|e| e.to_string())?;
        let h = p.header();
        if h.txn.0 != r.txn || h.images != Images::RedoUndo {
            return Err("an early record must name its transaction and carry undo".into());
        }
    }
    Ok(())
}

impl PageCommits {
    /// Forgets a connection's staged records.
    pub fn disconnect(&mut self, conn: ConnId) {
        self.staged.remove(&conn);
    }

    /// Whether a commit waits for a page read.
    pub fn waits_for_pages(&self) -> bool {
        !self.parked.is_empty()
    }

    /// `PageRecords`: checks and stages early records and stolen pages (the core answers
    /// `Ack`). A malformed record or page, or staging beyond [`STAGED_BYTES_MAX`], is
    /// refused (the session stays open) and poisons the transaction's staging, so that its
    /// commit is refused rather than applied without what was dropped.
    pub fn page_records(
        &mut self,
        conn: ConnId,
        r: PageRecords,
        mode: CommitMode,
        page_size: usize,
    ) -> Result<(), String> {
        let result = check_early(&r, mode, page_size);
        let staged = self.staged.entry(conn).or_default();
        if staged.txn != r.txn {
            *staged = Staged { txn: r.txn, ..Staged::default() };
        }
        let record_bytes: usize = r.records.iter().map(Bytes::len).sum();
        let added = record_bytes + r.pages.len() * page_size;
        match result {
            Ok(()) if staged.bytes.saturating_add(added) <= STAGED_BYTES_MAX => {
                staged.bytes += added;
                let c = &mut self.counters;
                c.records += r.records.len() as u64;
                c.records_early += r.records.len() as u64;
                c.record_bytes += record_bytes as u64;
                c.pages_shipped += r.pages.len() as u64;
                c.pages_early += r.pages.len() as u64;
                staged.records.extend(r.records);
                for (p, bytes) in r.pages {
                    match staged.pages.iter_mut().find(|(q, _)| *q == p) {
                        // The older copy's bytes stay counted: the bound is on what was sent.
                        Some(old) => old.1 = bytes,
                        None => staged.pages.push((p, bytes)),
                    }
                }
                Ok(())
            }
            Ok(()) => {
                // Poisoned: the commit of this transaction is refused (its txn matches a
                // staging marked over the bound).
                staged.poison();
                Err("page records and pages staged beyond the bound".into())
            }
            Err(why) => {
                staged.poison();
                Err(why)
            }
        }
    }

    /// `PageCommit`: gathers the records and the images they apply to (waiting for reads),
    /// and makes the commit thor's commit path takes.
    pub fn page_commit(
        &mut self,
        from: Requester,
        mut c: PageCommit,
        mode: CommitMode,
        reads: &mut PageReads<'_>,
    ) -> PageStep {
        let staged = from.conn().and_then(|conn| self.staged.remove(&conn));
        if c.mode != mode.code() || !mode.is_page_based() {
            let why = format!("the client committed in mode {}, the server's is {mode}", c.mode);
            return PageStep::Refused(bad(why));
        }
        let page_size = reads.page_size();
        // The commit's own pages are checked before the staged ones join them (those were
        // checked when they came).
        for (i, (p, bytes)) in c.pages.iter().enumerate() {
            if c.pages[..i].iter().any(|(q, _)| q == p) {
                return PageStep::Refused(bad(format!("page {p} shipped twice")));
            }
            if bytes.len() != page_size {
                return PageStep::Refused(bad("a shipped page of another size"));
            }
            if let Err(e) = PageView::parse_stored(bytes, *p) {
                return PageStep::Refused(bad(format!("shipped page {p}: {e}")));
            }
        }
        self.counters.records += c.records.len() as u64;
        self.counters.record_bytes += c.records.iter().map(|r| r.len() as u64).sum::<u64>();
        self.counters.pages_shipped += c.pages.len() as u64;
        let mut records = match staged.map_or(Ok(Vec::new()), |s| s.merge_into(&mut c)) {
            Ok(r) => r,
            Err(why) => return PageStep::Refused(bad(why)),
        };
        if mode == CommitMode::Wpl {
            return self.wpl_page_commit(c);
        }
        for rec in &c.records {
            match PageRecord::parse(rec, page_size) {
                Ok(p) if p.header().txn.0 == c.txn => {}
                Ok(_) => return PageStep::Refused(bad("a record of another transaction")),
                Err(e) => return PageStep::Refused(bad(e.to_string())),
            }
        }
        records.extend(c.records.iter().cloned());
        // The pages whose committed image is needed: every page with a written object or a
        // record that was not shipped whole.
        let mut need: Vec<PageId> = Vec::new();
        for o in &c.writes {
            match o.page() {
                Some(p) => need.push(p),
                None => return PageStep::Refused(bad("a write of oref 0")),
            }
        }
        for rec in &records {
            need.push(PageRecord::parse(rec, page_size).expect("checked").header().page);
        }
        need.sort_unstable();
        need.dedup();
        need.retain(|p| !c.pages.iter().any(|(q, _)| q == p));
        let mut parked =
            Parked { from, commit: c, records, images: Vec::new(), waiting: Vec::new(), page_size };
        for page in need {
            match reads.committed_image(page) {
                Ok(Some(img)) => parked.images.push((page, img)),
                Ok(None) => {
                    self.counters.redo_reads += 1;
                    parked.waiting.push(page);
                }
                Err(e) => return PageStep::Refused(e),
            }
        }
        if parked.waiting.is_empty() {
            match self.finish(parked) {
                Ok(c) => PageStep::Commit(c),
                Err(e) => PageStep::Refused(e),
            }
        } else {
            self.parked.push(parked);
            PageStep::Waiting
        }
    }

    /// `PageCommit` in `wpl` mode: every written page whole and no records. The written
    /// objects' bytes are taken from the shipped pages, and the commit goes to the queue with
    /// the pages, where whole-page logging's prepare checks the page rule and logs the pages.
    ///
    /// `c.pages` were checked by [`PageCommits::page_commit`] (the commit's own) or when they
    /// were staged (stolen ones): distinct, of the page size, each a well-formed stored page
    /// of the id it names.
    fn wpl_page_commit(&mut self, c: PageCommit) -> PageStep {
        if !c.records.is_empty() {
            return PageStep::Refused(bad("a WPL commit carries no page records"));
        }
        let views: Vec<PageView<'_>> =
            c.pages.iter().map(|(_, bytes)| PageView::assume_parsed(bytes)).collect();
        let mut versions = Vec::with_capacity(c.writes.len());
        let mut used = vec![false; c.pages.len()];
        for o in &c.writes {
            let Some(k) = c.pages.iter().position(|(p, _)| o.page() == Some(*p)) else {
                let why = format!("the page of written object {o} was not shipped");
                return PageStep::Refused(bad(why));
            };
            let Some(r) = views[k].object_range(o.oid()) else {
                return PageStep::Refused(EngineError::Invalid(InvalidCommit::NoSuchObject(*o)));
            };
            used[k] = true;
            versions.push((*o, c.pages[k].1.slice(r)));
        }
        if let Some(k) = used.iter().position(|u| !u) {
            let why = format!("page {} shipped with no written object", c.pages[k].0);
            return PageStep::Refused(bad(why));
        }
        drop(views);
        self.counters.page_commits += 1;
        // A commit that writes no existing object logs no page: its created objects go in
        // thor's ordinary commit record (the server allocates them, so no client page holds
        // them), which WPL's restart passes over and forward replay replays.
        let pages = if c.pages.is_empty() { None } else { Some(c.pages) };
        PageStep::Commit(CommitIn {
            versions,
            created: c.created,
            reads: c.reads,
            ts: None,
            pages,
            id: None,
            leaves: Vec::new(),
        })
    }

    /// A page read completed: parked commits waiting for it take its committed image (the
    /// read with the MOB's versions applied), and those with every image are done.
    pub fn page_read(
        &mut self,
        page: PageId,
        image: Result<&Bytes, &EngineError>,
    ) -> Vec<(Requester, Result<CommitIn, EngineError>)> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.parked.len() {
            let Some(w) = self.parked[i].waiting.iter().position(|p| *p == page) else {
                i += 1;
                continue;
            };
            let mut parked = self.parked.swap_remove(i);
            parked.waiting.swap_remove(w);
            match image {
                Ok(img) => parked.images.push((page, img.clone())),
                Err(e) => {
                    let e = EngineError::Read { page, why: e.to_string() };
                    done.push((parked.from, Err(e)));
                    continue;
                }
            }
            if parked.waiting.is_empty() {
                let from = parked.from;
                done.push((from, self.finish(parked)));
            } else {
                self.parked.push(parked);
            }
        }
        done
    }

    /// Applies the records and extracts the written objects: the commit.
    fn finish(&mut self, p: Parked) -> Result<CommitIn, EngineError> {
        let versions = expand(&p)?;
        self.counters.page_commits += 1;
        let Parked { commit, .. } = p;
        Ok(CommitIn {
            versions,
            created: commit.created,
            reads: commit.reads,
            ts: None,
            pages: None,
            id: None,
            leaves: Vec::new(),
        })
    }
}

/// The new bytes of every written object: records applied to the committed images (REDO), or
/// taken from the shipped pages (ESM). Every region must lie inside a written object.
fn expand(p: &Parked) -> Result<Vec<(Oref, Bytes)>, EngineError> {
    let c = &p.commit;
    let page_size = p.page_size;
    // Working copies of the pages records apply to; shipped pages are final already.
    let mut work: FxHashMap<PageId, Vec<u8>> = FxHashMap::default();
    for (page, img) in &p.images {
        work.insert(*page, img.to_vec());
    }
    let mut writes: FxHashMap<PageId, Vec<std::ops::Range<usize>>> = FxHashMap::default();
    for o in &c.writes {
        let page = o.page().expect("checked");
        let img: &[u8] = match c.pages.iter().find(|(q, _)| *q == page) {
            Some((_, b)) => b,
            None => work.get(&page).expect("every written page has an image"),
        };
        let view = PageView::parse(img).map_err(|e| bad(format!("page {page}: {e}")))?;
        let range = view.object_range(o.oid()).ok_or(InvalidCommit::NoSuchObject(*o))?;
        writes.entry(page).or_default().push(range);
    }
    // Touching objects form one writable range: the client's merging may join regions of
    // neighbours written both (a region never covers a byte of an object not written).
    for spans in writes.values_mut() {
        spans.sort_unstable_by_key(|r| r.start);
        let mut joined: Vec<std::ops::Range<usize>> = Vec::with_capacity(spans.len());
        for r in spans.drain(..) {
            match joined.last_mut() {
                Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
                _ => joined.push(r),
            }
        }
        *spans = joined;
    }
    for rec in &p.records {
        let r = PageRecord::parse(rec, page_size).map_err(|e| bad(e.to_string()))?;
        let page = r.header().page;
        let spans = writes.get(&page).map(Vec::as_slice).unwrap_or(&[]);
        for region in r.regions() {
            let s = region.span();
            if !spans.iter().any(|w| w.start <= s.start && s.end <= w.end) {
                return Err(bad(format!(
                    "a region of page {page} ({}..{}) outside the objects written",
                    s.start, s.end
                )));
            }
        }
        if c.pages.iter().any(|(q, _)| *q == page) {
            // ESM: the shipped page holds the result; the record is the log's and the
            // study's, checked but not applied.
            continue;
        }
        let buf = work.get_mut(&page).expect("every record's page has an image");
        r.apply_redo(buf).map_err(|e| bad(e.to_string()))?;
    }
    let mut versions = Vec::with_capacity(c.writes.len());
    for o in &c.writes {
        let page = o.page().expect("checked");
        let img: &[u8] = match c.pages.iter().find(|(q, _)| *q == page) {
            Some((_, b)) => b,
            None => &work[&page],
        };
        // Ranges were found on this image (records change object bytes, never the offset
        // table, which lies outside every object).
        let view = PageView::assume_parsed(img);
        let bytes = view.object(o.oid()).ok_or(InvalidCommit::NoSuchObject(*o))?;
        versions.push((*o, Bytes::copy_from_slice(bytes)));
    }
    Ok(versions)
}
