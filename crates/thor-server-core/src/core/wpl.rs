//! Whole-page logging (WPL) in the core (issue 14, `papers/quickstore-recovery-sigmod95.txt`
//! section 3.4): the commit path's WPL steps, the WPL table, its checkpoints, and the pages
//! leaving it when install rounds write them home.
//!
//! ```text
//!  PageCommit (mode wpl, written pages whole) ──► pagecommit: versions taken from the pages
//!      ──► commit queue ──► gate: table room (else wait, like a full MOB), checkpoint if due
//!      ──► CLOCC ──► Store::prepare_wpl: page rule, images (kind 6), commit record (kind 7)
//!      ──► table.log_page × pages, table.commit_appended ──► Append × (pages + 1)
//!  Durable ──► MOB gets the versions (slices of the images) ──► table.commit_durable ──► CommitOk
//!  install round writes a page home (version >= the copy's LSN) ──► table.installed
//!      ──► checkpoint record (kind 8) of the table ──► durable: table.checkpoint_durable
//!  superblock checkpoint job: the log truncated below min(superblock checkpoint,
//!      table.truncation_point())
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
//! the commit record is durable, so restart (`crate::wpl_log::restart`: one backward pass to
//! the newest checkpoint with a committed-transactions list) finds every image of it. The
//! superblock checkpoint may pass a copy's image (the MOB keeps the commit's versions under
//! the commit record's LSN), but the log is never truncated below the oldest copy the newest
//! durable WPL checkpoint lists, nor below that checkpoint. At recovery (`crate::io::recover`)
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

use super::store::CommitIn;
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

/// The core's WPL state.
#[derive(Debug)]
pub struct WplState {
    /// The table of logged pages.
    pub table: WplTable,
    /// The newest checkpoint record appended and not yet durable.
    pending_checkpoint: Option<Lsn>,
    /// Sorts checkpoint entries (kept to reuse its memory).
    scratch: Vec<WplEntry>,
    /// Counters.
    pub counters: WplCounters,
}

impl WplState {
    /// A state around `table`.
    pub fn new(table: WplTable) -> WplState {
        WplState {
            table,
            pending_checkpoint: None,
            scratch: Vec::new(),
            counters: WplCounters::default(),
        }
    }
}

/// What the gate before a WPL commit's validation says.
pub(super) enum Gate {
    /// Validate and prepare it.
    Go,
    /// Refuse it.
    Refuse(EngineError),
}

impl Core {
    /// The WPL table's bounds.
    fn wpl_config(&self) -> WplConfig {
        self.cfg.wpl
    }

    /// Starts whole-page logging with an empty table, unless recovery rebuilt one.
    pub(super) fn wpl_start(&mut self) {
        if self.pages.wpl.is_none() {
            let table = WplTable::new(self.wpl_config()).expect("checked by Core::new");
            self.pages.wpl = Some(WplState::new(table));
        }
    }

    /// Recovery rebuilt `table`; `copies` are its committed copies (page, the copy's LSN, its
    /// page image, and the version of the page's home, 0 if it has none on disk).
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
        let mut state = WplState::new(table);
        state.counters.restored = restored;
        self.pages.wpl = Some(state);
        Ok(())
    }

    /// Whether a WPL commit must wait before it is prepared: the table has no room for its
    /// pages (an install round frees it) or too many commits are in flight (durability
    /// frees them).
    pub(super) fn wpl_needs_room(&self, c: &CommitIn) -> bool {
        let (Some(pages), Some(w)) = (&c.wpl, &self.pages.wpl) else { return false };
        let cfg = w.table.config();
        pages.len() <= cfg.entries_max
            && (w.table.len() + pages.len() > cfg.entries_max || w.table.txns() >= cfg.txns_max)
    }

    /// Before a WPL commit is validated: refuses what the table can never take, and appends a
    /// checkpoint first when one is due (or none was ever written: restart needs one once the
    /// log's start is truncated).
    pub(super) fn wpl_gate(&mut self, c: &CommitIn, fx: &mut Vec<Effect>) -> Gate {
        let Some(pages) = &c.wpl else { return Gate::Go };
        let Some(w) = &self.pages.wpl else {
            let why = "a whole-page commit to a server not in wpl mode".to_string();
            return Gate::Refuse(InvalidCommit::BadPageRecord(why).into());
        };
        let cfg = w.table.config();
        if pages.len() > cfg.entries_max {
            return Gate::Refuse(
                InvalidCommit::TooLarge { what: "pages", got: pages.len(), max: cfg.entries_max }
                    .into(),
            );
        }
        // One uncommitted copy per page: the page rule makes a second one impossible for a
        // client that reports its copy's version truly; one that does not is refused here.
        if let Some((p, _)) = pages.iter().find(|(p, _)| w.table.uncommitted(*p).is_some()) {
            w_count_refusal(&mut self.pages.wpl);
            return Gate::Refuse(EngineError::Conflict(super::cc::Refusal::PageWritten(*p)));
        }
        let first = w.table.truncation_point().is_none() && !w.table.checkpoint_pending();
        if w.table.checkpoint_due() || first {
            self.wpl_checkpoint(fx);
        }
        Gate::Go
    }

    /// A WPL commit was prepared at `lsn` with these page images: the table hears of every
    /// record before the driver appends it.
    pub(super) fn wpl_prepared(
        &mut self,
        lsn: Lsn,
        images: &[(Lsn, PageId, Bytes)],
        fx: &mut Vec<Effect>,
    ) {
        let Some(w) = self.pages.wpl.as_mut() else { return };
        let txn = TxnId(lsn.0);
        let mut r = Ok(());
        for (at, page, _) in images {
            r = r.and_then(|()| w.table.log_page(txn, *page, *at));
        }
        r = r.and_then(|()| w.table.commit_appended(txn, lsn));
        w.counters.images += images.len() as u64;
        if let Err(e) = r {
            // The gate checked room, busy pages and the checkpoint interval: a refusal here
            // is a bug, and the table no longer matches the log.
            self.fail(format!("the WPL table refused a prepared commit: {e}"), fx);
        }
    }

    /// The log is durable up to `durable`; `committed` are the WPL commits published now.
    pub(super) fn wpl_durable(&mut self, durable: Lsn, committed: &[Lsn], fx: &mut Vec<Effect>) {
        let Some(w) = self.pages.wpl.as_mut() else { return };
        let mut r = Ok(());
        for lsn in committed {
            r = r.and_then(|()| w.table.commit_durable(TxnId(lsn.0)).map(drop));
        }
        if let Some(at) = w.pending_checkpoint
            && at <= durable
        {
            w.pending_checkpoint = None;
            w.table.checkpoint_durable(at);
        }
        if let Err(e) = r {
            self.fail(format!("the WPL table lost a commit: {e}"), fx);
        }
    }

    /// An install round wrote `page` home at `version` (durable): a committed copy it covers
    /// leaves the table.
    pub(super) fn wpl_installed(&mut self, page: PageId, version: Lsn) {
        let Some(w) = self.pages.wpl.as_mut() else { return };
        if let Some(c) = w.table.committed(page)
            && c.lsn <= version
            && w.table.installed(page, c.lsn)
        {
            w.counters.installed += 1;
        }
    }

    /// Where the log may be truncated after an install round whose superblock checkpoint is
    /// `checkpoint`: below it and below what WPL's restart reads (nothing while recovering,
    /// before the table is rebuilt, nor before a WPL checkpoint is durable).
    pub(super) fn wpl_truncation(&self, checkpoint: Lsn) -> Option<Lsn> {
        match &self.pages.wpl {
            _ if self.recovering => None,
            None => Some(checkpoint),
            Some(w) => w.table.truncation_point().map(|t| t.min(checkpoint)),
        }
    }

    /// Appends a checkpoint record of the table (not while recovering: recovery's driver
    /// appends nothing).
    pub(super) fn wpl_checkpoint(&mut self, fx: &mut Vec<Effect>) {
        if self.recovering || self.failed.is_some() {
            return;
        }
        let lsn = self.store.next_lsn;
        let Some(w) = self.pages.wpl.as_mut() else { return };
        let mut out = Vec::new();
        if let Err(e) = w.table.checkpoint_record(lsn, &mut w.scratch, &mut out) {
            return self.fail(format!("the WPL checkpoint: {e}"), fx);
        }
        w.pending_checkpoint = Some(lsn);
        w.counters.checkpoints += 1;
        let at = self.store.append_plain(&out);
        debug_assert_eq!(at, lsn);
        fx.push(Effect::Append { lsn, record: Bytes::from(out) });
    }

    /// WPL's counters (zero when the server never logged whole pages).
    pub fn wpl_counters(&self) -> WplCounters {
        self.pages.wpl.as_ref().map(|w| w.counters).unwrap_or_default()
    }

    /// Copies in the WPL table now.
    pub fn wpl_table_len(&self) -> usize {
        self.pages.wpl.as_ref().map_or(0, |w| w.table.len())
    }
}

impl Core {
    /// Counts a refusal by the page rule.
    pub(super) fn wpl_page_rule_refused(&mut self) {
        w_count_refusal(&mut self.pages.wpl);
    }
}

fn w_count_refusal(w: &mut Option<WplState>) {
    if let Some(w) = w {
        w.counters.page_rule_refusals += 1;
    }
}
