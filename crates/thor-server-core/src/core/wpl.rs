//! Whole-page logging (WPL) in the core (issue 14, `papers/quickstore-recovery-sigmod95.txt`
//! section 3.4): [`WholePageLogging`], the commit path (`super::commit_path::CommitPath`) of
//! the `wpl` mode: the WPL table, its checkpoints, and the pages leaving it when install
//! rounds write them home. Each step below is one hook of the seam:
//!
//! ```text
//!  PageCommit (mode wpl, written pages whole) ──► pagecommit: versions taken from the pages
//!      ──► commit queue ──► needs_room: table room (else wait, like a full MOB)
//!      ──► gate: the page rule, a checkpoint if due ──► CLOCC
//!      ──► prepare: Store::prepare_wpl: page rule, images (kind 6), commit record (kind 7)
//!      ──► append: Append × (pages + 1), table.log_page × pages, table.commit_appended
//!  Durable ──► MOB gets the versions (slices of the images) ──► durable: table.commit_durable
//!      ──► CommitOk
//!  install round writes a page home (version >= the copy's LSN) ──► installed: table.installed
//!      ──► installed_round: checkpoint record (kind 8) of the table
//!      ──► durable: table.checkpoint_durable
//!  superblock checkpoint job: the log truncated below truncation_floor: min(superblock
//!      checkpoint, table.truncation_point())
//!  recovery: replay: WPL records (Store::replay_wpl), once thor-study's restore installed
//!      the path with the rebuilt table (Core::wpl_restored)
//! ```
//!
//! # Why the MOB holds a WPL commit's versions
//!
//! thor serves fetches from installed pages plus the MOB's versions, and every other commit
//! path (obj, the ESM and REDO modes, two-phase commit, direct commits) goes through the MOB.
//! A WPL commit's versions are slices of its page images, so putting them in the MOB costs
//! no copy and keeps one answer to "what is committed": fetches, validation, invalidations,
//! demotion and install rounds need nothing new. The page images are what the *log* holds
//! for the commit (there is no kind-2 record of it), and the table names the committed copy
//! of each page that is not home yet. The paper's background reader re-reads a copy from the
//! log to install it; here the install round finds the copy's objects in the MOB (the paper's
//! own optimisation for pages still cached at commit time) and reads the home page only if it
//! is not cached. When the round's page is durable, the table drops the copy.
//!
//! # Crash safety
//!
//! A commit's images and its commit record are appended in one step; it is acknowledged when
//! the commit record is durable, so restart (`thor_study::wpl_log::restart`: one backward
//! pass to the newest checkpoint with a committed-transactions list) finds every image of it.
//! The superblock checkpoint may pass a copy's image (the MOB keeps the commit's versions
//! under the commit record's LSN), but the log is never truncated below the oldest copy the
//! newest durable WPL checkpoint lists, nor below that checkpoint (the path's truncation
//! floor). At recovery (thor-server's `io::recover`, calling `thor_study::wpl_log::restore`)
//! each committed copy the rebuilt table names is kept for the replay of its commit record,
//! which puts the objects the commit wrote back into the MOB under the commit's LSN, as
//! normal operation did, unless the page's home is at least as new (an install round wrote
//! it home before the crash). Only the written objects: the image's others may be older than
//! versions committed later under earlier LSNs (a two-phase part's, published at its
//! decision under its prepare record's LSN); see `Store::restore_page_copy`.

use bytes::Bytes;
use thor_core::{Lsn, PageId, PageView};
use thor_recovery::wpl::WplEntry;
use thor_recovery::{TxnId, WplConfig, WplTable};

use super::commit_path::{CommitPath, ObjectShipping, PathLog, PrepareAt};
use super::store::{CommitIn, Prepared, Replay, Stop, Store};
use super::{Core, Effect};
use crate::error::{EngineError, InvalidCommit};

/// The default bounds of a server's WPL table.
pub const WPL_CONFIG_DEFAULT: WplConfig = WplConfig {
    // 16,384 pages waiting in the log to go home: 128 MiB of 8 KiB pages, above the MOB's
    // default budget, so that the MOB, not the table, is what makes commits wait.
    entries_max: 16_384,
    // Commits prepared and not yet durable: the log buffer bounds them well below this.
    txns_max: 4_096,
    // Restart reads at most this many commits back past the checkpoint.
    commits_per_checkpoint: 1_024,
};

/// Counters of whole-page logging.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WplCounters {
    /// Page images appended.
    pub images: u64,
    /// Checkpoint records appended.
    pub checkpoints: u64,
    /// Copies dropped from the table because their page went home.
    pub installed: u64,
    /// Commits refused by the page rule.
    pub page_rule_refusals: u64,
    /// Copies put back into the MOB at recovery.
    pub restored: u64,
}

/// Whole-page logging's commit path: the WPL table, its pending checkpoint and counters.
#[derive(Debug)]
pub(crate) struct WholePageLogging {
    /// The table of logged pages.
    table: WplTable,
    /// The newest checkpoint record appended and not yet durable.
    pending_checkpoint: Option<Lsn>,
    /// Sorts checkpoint entries (kept to reuse its memory).
    scratch: Vec<WplEntry>,
    /// Counters.
    counters: WplCounters,
}

impl WholePageLogging {
    /// A path around `table`.
    pub fn new(table: WplTable) -> WholePageLogging {
        WholePageLogging {
            table,
            pending_checkpoint: None,
            scratch: Vec::new(),
            counters: WplCounters::default(),
        }
    }

    /// Appends a checkpoint record of the table (not while the log is closed to the path:
    /// recovery's driver appends nothing, nor does a failed server).
    fn checkpoint(&mut self, log: &mut PathLog<'_>) {
        if !log.may_append() {
            return;
        }
        let lsn = log.next_lsn();
        let mut out = Vec::new();
        if let Err(e) = self.table.checkpoint_record(lsn, &mut self.scratch, &mut out) {
            return log.fail(format!("the WPL checkpoint: {e}"));
        }
        self.pending_checkpoint = Some(lsn);
        self.counters.checkpoints += 1;
        let at = log.append(out);
        assert_eq!(at, lsn, "the checkpoint record went where it says it is");
    }
}

impl CommitPath for WholePageLogging {
    fn keeps_log_state(&self) -> bool {
        true
    }

    /// A WPL commit waits while the table has no room for its pages (an install round frees
    /// it) or too many commits are in flight (durability frees them).
    fn needs_room(&self, c: &CommitIn) -> bool {
        let Some(pages) = &c.wpl else { return false };
        let cfg = self.table.config();
        pages.len() <= cfg.entries_max
            && (self.table.len() + pages.len() > cfg.entries_max
                || self.table.txns() >= cfg.txns_max)
    }

    /// Refuses what the table can never take, and appends a checkpoint first when one is due
    /// (or none was ever written: restart needs one once the log's start is truncated).
    fn gate(&mut self, c: &CommitIn, log: &mut PathLog<'_>) -> Result<(), EngineError> {
        let Some(pages) = &c.wpl else { return Ok(()) };
        let cfg = self.table.config();
        if pages.len() > cfg.entries_max {
            let max = cfg.entries_max;
            return Err(InvalidCommit::TooLarge { what: "pages", got: pages.len(), max }.into());
        }
        // One uncommitted copy per page: the page rule makes a second one impossible for a
        // client that reports its copy's version truly; one that does not is refused here.
        if let Some((p, _)) = pages.iter().find(|(p, _)| self.table.uncommitted(*p).is_some()) {
            self.counters.page_rule_refusals += 1;
            return Err(EngineError::Conflict(super::cc::Refusal::PageWritten(*p)));
        }
        let first = self.table.truncation_point().is_none() && !self.table.checkpoint_pending();
        if self.table.checkpoint_due() || first {
            self.checkpoint(log);
        }
        Ok(())
    }

    /// A WPL commit (not a two-phase part: those are prepared as object shipping prepares
    /// them) is prepared by `Store::prepare_wpl`; every other commit as object shipping does.
    fn prepare(&mut self, store: &mut Store, c: &CommitIn, at: PrepareAt<'_>) -> Result<(), Stop> {
        if c.wpl.is_none() || at.section.is_some() {
            return ObjectShipping.prepare(store, c, at);
        }
        let r = store.prepare_wpl(c, at.images, at.allow_create, at.ts).map(drop);
        if let Err(Stop::Fail(EngineError::Conflict(super::cc::Refusal::PageWritten(_)))) = &r {
            self.counters.page_rule_refusals += 1;
        }
        r
    }

    /// The page images, then the commit record; the table hears of every record before the
    /// driver appends it.
    fn append(&mut self, p: &Prepared, fx: &mut Vec<Effect>) -> Result<(), String> {
        let Some(w) = &p.wpl else { return ObjectShipping.append(p, fx) };
        for (lsn, _, record) in &w.images {
            fx.push(Effect::Append { lsn: *lsn, record: record.clone() });
        }
        fx.push(Effect::Append { lsn: p.lsn, record: p.record.clone() });
        let txn = TxnId(p.lsn.0);
        let mut r = Ok(());
        for (at, page, _) in &w.images {
            r = r.and_then(|()| self.table.log_page(txn, *page, *at));
        }
        r = r.and_then(|()| self.table.commit_appended(txn, p.lsn));
        self.counters.images += w.images.len() as u64;
        // The gate checked room, busy pages and the checkpoint interval: a refusal here is a
        // bug, and the table no longer matches the log.
        r.map_err(|e| format!("the WPL table refused a prepared commit: {e}"))
    }

    fn durable(&mut self, durable: Lsn, published: &[Prepared]) -> Result<(), String> {
        let mut r = Ok(());
        for p in published.iter().filter(|p| p.wpl.is_some()) {
            r = r.and_then(|()| self.table.commit_durable(TxnId(p.lsn.0)).map(drop));
        }
        if let Some(at) = self.pending_checkpoint
            && at <= durable
        {
            self.pending_checkpoint = None;
            self.table.checkpoint_durable(at);
        }
        r.map_err(|e| format!("the WPL table lost a commit: {e}"))
    }

    /// A committed copy the written page covers leaves the table.
    fn installed(&mut self, page: PageId, version: Lsn) {
        if let Some(c) = self.table.committed(page)
            && c.lsn <= version
            && self.table.installed(page, c.lsn)
        {
            self.counters.installed += 1;
        }
    }

    /// Below the superblock's checkpoint and below what WPL's restart reads (nothing before a
    /// WPL checkpoint is durable).
    fn truncation_floor(&self, checkpoint: Lsn) -> Option<Lsn> {
        self.table.truncation_point().map(|t| t.min(checkpoint))
    }

    /// The copies this round took home leave the log's needs once a checkpoint record without
    /// them is durable.
    fn installed_round(&mut self, log: &mut PathLog<'_>) {
        self.checkpoint(log);
    }

    fn replay(
        &mut self,
        store: &mut Store,
        lsn: Lsn,
        rec: &Bytes,
    ) -> Option<Result<Replay, EngineError>> {
        let wpl = rec.first().is_some_and(|k| thor_recovery::wpl::is_wpl_kind(*k));
        wpl.then(|| store.replay_wpl(lsn, rec.clone()))
    }

    fn wpl_stats(&self) -> (WplCounters, usize) {
        (self.counters, self.table.len())
    }
}

impl Core {
    /// Starts whole-page logging with an empty table, unless recovery rebuilt one.
    pub(super) fn wpl_start(&mut self) {
        if !self.path.keeps_log_state() {
            let table = WplTable::new(self.cfg.wpl).expect("checked by Core::new");
            self.path = Box::new(WholePageLogging::new(table));
        }
    }

    /// Recovery rebuilt `table`; `copies` are its committed copies (page, the copy's LSN, its
    /// page image, and the version of the page's home, 0 if it has none on disk). From here on
    /// the server's commit path is whole-page logging, whatever its mode: the copies must go
    /// home, and replay meets WPL records.
    ///
    /// - A copy whose home is at least as new went home before the crash: it leaves the
    ///   table (a home at version `h` holds every commit to the page up to `h`).
    /// - Any other copy's objects, every object of the page, go into the MOB under the copy's
    ///   LSN. Forward replay (`Store::replay`) brings back each commit from the checkpoint on,
    ///   but only the objects it wrote: a commit whose commit record is at or above the
    ///   checkpoint and its images below it (its versions, kept in the MOB under the commit
    ///   record's LSN, held the checkpoint there) is seen only through the newest copy of each
    ///   of its pages, which holds its objects. The MOB keeps the newest version of each
    ///   object whatever the order of arrival, and every commit newer than the copy to one of
    ///   its objects is replayed (it is not home: the home is older than the copy).
    pub fn wpl_restored(
        &mut self,
        mut table: WplTable,
        copies: Vec<(PageId, Lsn, Bytes, Lsn)>,
    ) -> Result<(), EngineError> {
        let mut restored = 0;
        for (page, lsn, image, home) in copies {
            // The copy's objects were committed at its commit record's LSN, which its image
            // carries as its page version (`Store::prepare_wpl`), above the image record's
            // own `lsn`: the MOB takes them under that LSN, as the commit published them, so
            // that the page is served after recovery with the version it had before (under
            // `lsn` it went back to it: found by `thor_sim::acked`).
            let committed = PageView::parse_stored(&image, page)
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?
                .version()
                .max(lsn);
            if home >= committed {
                table.installed(page, lsn);
                continue;
            }
            self.store
                .restore_page_copy(page, committed, image)
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
            restored += 1;
        }
        let mut path = WholePageLogging::new(table);
        path.counters.restored = restored;
        self.path = Box::new(path);
        Ok(())
    }

    /// WPL's counters (zero when the server never logged whole pages).
    pub fn wpl_counters(&self) -> WplCounters {
        self.path.wpl_stats().0
    }

    /// Copies in the WPL table now.
    pub fn wpl_table_len(&self) -> usize {
        self.path.wpl_stats().1
    }
}
