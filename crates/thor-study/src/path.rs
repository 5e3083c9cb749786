//! [`StudyPath`]: the QuickStore study's commit path, installed in a server core behind its
//! seam (`thor_server_core::CommitPath`) for every page mode, and [`set_commit_mode`], which
//! chooses the path for a commit mode.
//!
//! One path serves every page mode, because whole-page logging's log state outlives its mode:
//! a server restarted in another mode after running `wpl` keeps the table recovery rebuilt
//! (copies not yet home) until install rounds take them home, so the path keeps it whatever
//! mode its page requests are in:
//!
//! ```text
//!  page requests ──► crate::pagecommit (translated in the path's mode)
//!  a commit with pages (wpl) ──► crate::wpl: its gate, prepare, append, durable ...
//!  any other commit ──► object shipping (the core's ObjectShipping)
//!  log hooks (installed, truncation floor, checkpoint) ──► the WPL table, if the path has one
//!  recovery: WPL records ──► crate::wpl::WplReplay
//! ```

use std::any::Any;

use bytes::Bytes;
use thor_core::{Lsn, PageId};
use thor_recovery::{WplConfig, WplTable};
use thor_server_core::{
    CommitIn, CommitPath, ConnId, Core, Effect, EngineError, LogBytes, ObjectShipping, PageReads,
    PageStep, PathCounters, PathLog, PrepareAt, Prepared, ReplayedRecord, Requester, Stop, Store,
};
use thor_wire::{CommitMode, PageCommit, PageRecords};

use crate::pagecommit::PageCommits;
use crate::wpl::{self, WplLog, WplReplay};

/// How a server commits: its commit mode and the bounds of its WPL table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudyOptions {
    /// The commit mode clients must commit in.
    pub mode: CommitMode,
    /// The WPL table's bounds (used once the server logs whole pages).
    pub wpl: WplConfig,
}

impl Default for StudyOptions {
    fn default() -> Self {
        StudyOptions { mode: CommitMode::Obj, wpl: wpl::WPL_CONFIG_DEFAULT }
    }
}

/// Sets `core`'s commit mode: thor's own object shipping for `obj` (unless the installed
/// path holds log state, which it keeps), else a [`StudyPath`] (the one installed, given the
/// new mode, or a new one). Call it before replay (thor-server's `io::recover` does), so that
/// the log's WPL records meet the path that replays them, and again whenever the mode changes.
pub fn set_commit_mode(core: &mut Core, opts: &StudyOptions) -> Result<(), EngineError> {
    WplTable::new(opts.wpl)
        .map_err(|e| EngineError::BadOptions(format!("the WPL table's bounds: {e}")))?;
    if let Some(path) = core.commit_path_mut().as_any_mut().downcast_mut::<StudyPath>() {
        path.wpl_cfg = opts.wpl;
        path.set_mode(opts.mode);
        if !path.keeps_log_state() && opts.mode == CommitMode::Obj {
            core.set_commit_path(Box::new(ObjectShipping));
        }
        return Ok(());
    }
    if opts.mode != CommitMode::Obj {
        core.set_commit_path(Box::new(StudyPath::new(opts)));
    }
    Ok(())
}

/// The study's commit path in `core`, installed (in the core's mode) if another is.
pub(crate) fn study_path(core: &mut Core, cfg: WplConfig) -> &mut StudyPath {
    let mode = core.commit_mode();
    if core.commit_path_mut().as_any_mut().downcast_mut::<StudyPath>().is_none() {
        core.set_commit_path(Box::new(StudyPath::new(&StudyOptions { mode, wpl: cfg })));
    }
    core.commit_path_mut().as_any_mut().downcast_mut::<StudyPath>().expect("installed")
}

/// The QuickStore study's commit path (see the module documentation).
#[derive(Debug)]
pub struct StudyPath {
    /// The commit mode page requests must be in.
    mode: CommitMode,
    /// The page modes' translation state.
    pages: PageCommits,
    /// Whole-page logging's log state, once the server logs whole pages (or recovery rebuilt
    /// its table).
    wpl: Option<WplLog>,
    /// The bounds a new WPL table gets.
    wpl_cfg: WplConfig,
    /// Forward replay of WPL's records.
    replay: WplReplay,
    /// The shipped pages of the WPL commit just prepared, in image order (its append tells
    /// the table).
    prepared_pages: Vec<PageId>,
}

impl StudyPath {
    /// A path in `opts.mode` (with an empty WPL table in `wpl` mode).
    pub fn new(opts: &StudyOptions) -> StudyPath {
        let mut p = StudyPath {
            mode: CommitMode::Obj,
            pages: PageCommits::default(),
            wpl: None,
            wpl_cfg: opts.wpl,
            replay: WplReplay::default(),
            prepared_pages: Vec::new(),
        };
        p.set_mode(opts.mode);
        p
    }

    /// Page requests from now on are in `mode`; choosing `wpl` starts whole-page logging with
    /// an empty table unless the path has one (another mode keeps it: it holds log state).
    fn set_mode(&mut self, mode: CommitMode) {
        self.mode = mode;
        if mode == CommitMode::Wpl && self.wpl.is_none() {
            let table = WplTable::new(self.wpl_cfg).expect("checked by set_commit_mode");
            self.wpl = Some(WplLog::new(table));
        }
    }

    /// Recovery rebuilt `table`; `copies` are its committed copies (page, the copy's LSN, its
    /// image, its home's version). From here on the path logs whole pages' commits through
    /// the table, whatever its mode: the copies must go home, and replay meets WPL records.
    /// Returns the pages whose copies replay will see (their layout in the store must be
    /// forgotten) and how many.
    pub(crate) fn restored(
        &mut self,
        table: WplTable,
        copies: Vec<(PageId, Lsn, Bytes, Lsn)>,
    ) -> Result<Vec<PageId>, EngineError> {
        let (log, kept) = WplLog::restored(table, copies)?;
        self.wpl = Some(log);
        let mut pages = Vec::with_capacity(kept.len());
        for (page, lsn, image) in kept {
            self.replay.restore(page, lsn, image);
            pages.push(page);
        }
        Ok(pages)
    }
}

impl CommitPath for StudyPath {
    fn mode(&self) -> CommitMode {
        self.mode
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn keeps_log_state(&self) -> bool {
        self.wpl.is_some()
    }

    fn log_bytes(&self, c: &CommitIn, section_bytes: usize) -> LogBytes {
        match &c.pages {
            Some(pages) => {
                let (total, largest) = wpl::log_bytes(c, pages);
                LogBytes { total, largest }
            }
            None => ObjectShipping.log_bytes(c, section_bytes),
        }
    }

    fn needs_room(&self, c: &CommitIn) -> bool {
        match (&self.wpl, &c.pages) {
            (Some(w), Some(pages)) => w.needs_room(pages),
            _ => false,
        }
    }

    fn gate(&mut self, c: &CommitIn, log: &mut PathLog<'_>) -> Result<(), EngineError> {
        match (&mut self.wpl, &c.pages) {
            (Some(w), Some(pages)) => w.gate(pages, log),
            _ => ObjectShipping.gate(c, log),
        }
    }

    /// A WPL commit (not a two-phase part: those are prepared as object shipping prepares
    /// them) is prepared by `wpl::prepare`; every other commit as object shipping does.
    fn prepare(&mut self, store: &mut Store, c: &CommitIn, at: PrepareAt<'_>) -> Result<(), Stop> {
        let Some(w) = self.wpl.as_mut().filter(|_| c.pages.is_some() && !at.is_two_phase_part())
        else {
            return ObjectShipping.prepare(store, c, at);
        };
        match wpl::prepare(store, c, at.images, at.allow_create, at.ts) {
            Ok(pages) => {
                self.prepared_pages = pages;
                Ok(())
            }
            Err(e) => {
                if let Stop::Fail(EngineError::Conflict(thor_server_core::Refusal::PageWritten(
                    _,
                ))) = &e
                {
                    w.counters.page_rule_refusals += 1;
                }
                Err(e)
            }
        }
    }

    /// The page images, then the commit record; the table hears of every record before the
    /// driver appends it.
    fn append(&mut self, p: &Prepared, fx: &mut Vec<Effect>) -> Result<(), String> {
        let Some(w) = self.wpl.as_mut().filter(|_| p.is_path_built()) else {
            return ObjectShipping.append(p, fx);
        };
        for (lsn, record) in p.preceding() {
            fx.push(Effect::Append { lsn: *lsn, record: record.clone() });
        }
        fx.push(Effect::Append { lsn: p.lsn(), record: p.record().clone() });
        let pages = std::mem::take(&mut self.prepared_pages);
        assert_eq!(pages.len(), p.preceding().len(), "one image per page just prepared");
        w.appended(p, &pages)
    }

    fn durable(&mut self, durable: Lsn, published: &[Prepared]) -> Result<(), String> {
        self.wpl.as_mut().map_or(Ok(()), |w| w.durable(durable, published))
    }

    fn installed(&mut self, page: PageId, version: Lsn) {
        if let Some(w) = &mut self.wpl {
            w.installed(page, version);
        }
    }

    fn truncation_floor(&self, checkpoint: Lsn) -> Option<Lsn> {
        match &self.wpl {
            Some(w) => w.truncation_floor(checkpoint),
            None => Some(checkpoint),
        }
    }

    fn installed_round(&mut self, log: &mut PathLog<'_>) {
        if let Some(w) = &mut self.wpl {
            w.installed_round(log);
        }
    }

    fn replay(
        &mut self,
        store: &mut Store,
        lsn: Lsn,
        rec: &Bytes,
    ) -> Option<Result<ReplayedRecord, EngineError>> {
        if wpl::is_wpl(rec) {
            Some(self.replay.replay(store, lsn, rec))
        } else {
            self.replay.other_record();
            None
        }
    }

    fn replayed_all(&mut self, store: &mut Store) {
        self.replay.replayed_all(store);
    }

    fn page_records(
        &mut self,
        conn: ConnId,
        r: PageRecords,
        page_size: usize,
    ) -> Result<(), String> {
        self.pages.page_records(conn, r, self.mode, page_size)
    }

    fn page_commit(
        &mut self,
        from: Requester,
        c: PageCommit,
        reads: &mut PageReads<'_>,
    ) -> PageStep {
        self.pages.page_commit(from, c, self.mode, reads)
    }

    fn page_read(
        &mut self,
        page: PageId,
        image: Result<&Bytes, &EngineError>,
    ) -> Vec<(Requester, Result<CommitIn, EngineError>)> {
        self.pages.page_read(page, image)
    }

    fn waits_for_pages(&self) -> bool {
        self.pages.waits_for_pages()
    }

    fn disconnect(&mut self, conn: ConnId) {
        self.pages.disconnect(conn);
    }

    fn counters(&self) -> PathCounters {
        PathCounters {
            pages: self.pages.counters,
            wpl: self.wpl.as_ref().map(|w| w.counters).unwrap_or_default(),
            wpl_table: self.wpl.as_ref().map_or(0, WplLog::table_len),
        }
    }
}

#[cfg(test)]
mod tests {
    use thor_core::{Lsn, PageId, ServerId, builtin};
    use thor_server_core::superblock::Superblock;
    use thor_server_core::{Core, CoreConfig};
    use thor_wire::CommitMode;

    use super::*;

    fn core() -> Core {
        let sb = Superblock {
            page_size: 4096,
            server_id: ServerId(1),
            root: builtin::ROOT,
            checkpoint: Lsn(1),
            alloc_page: Some(PageId::FIRST),
            generation: 1,
        };
        Core::new(CoreConfig::default(), sb).expect("a core")
    }

    fn mode(core: &mut Core, mode: CommitMode) {
        set_commit_mode(core, &StudyOptions { mode, ..StudyOptions::default() }).expect("set");
    }

    /// Choosing `wpl` installs whole-page logging's path; choosing another mode afterwards
    /// keeps it, since it holds log state (copies not yet home) that only it can take home and
    /// truncate past.
    #[test]
    fn a_mode_change_keeps_a_commit_path_that_holds_log_state() {
        let mut core = core();
        assert!(!core.commit_path_mut().keeps_log_state(), "object shipping by default");
        assert_eq!(core.commit_mode(), CommitMode::Obj);
        mode(&mut core, CommitMode::Wpl);
        assert!(core.commit_path_mut().keeps_log_state(), "whole-page logging");
        mode(&mut core, CommitMode::Obj);
        assert!(core.commit_path_mut().keeps_log_state(), "kept");
        assert_eq!(core.commit_mode(), CommitMode::Obj);
    }

    /// A page-diffing mode installs the study's path without a WPL table; `obj` afterwards
    /// gives the core its own object shipping back.
    #[test]
    fn a_page_diffing_mode_holds_no_log_state_and_obj_restores_object_shipping() {
        let mut core = core();
        mode(&mut core, CommitMode::PdRedo);
        assert_eq!(core.commit_mode(), CommitMode::PdRedo);
        assert!(core.commit_path_mut().as_any_mut().downcast_mut::<StudyPath>().is_some());
        assert!(!core.commit_path_mut().keeps_log_state());
        mode(&mut core, CommitMode::Obj);
        assert!(core.commit_path_mut().as_any_mut().downcast_mut::<StudyPath>().is_none());
    }

    /// Bounds a WPL table cannot have are refused as options, before anything changes.
    #[test]
    fn impossible_wpl_bounds_are_refused() {
        let mut core = core();
        let wpl = WplConfig { entries_max: 0, ..crate::WPL_CONFIG_DEFAULT };
        let r = set_commit_mode(&mut core, &StudyOptions { mode: CommitMode::Wpl, wpl });
        assert!(matches!(r, Err(EngineError::BadOptions(_))), "{r:?}");
        assert_eq!(core.commit_mode(), CommitMode::Obj);
    }
}
