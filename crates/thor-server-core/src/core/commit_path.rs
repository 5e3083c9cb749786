//! The server's commit path: the seam between the requests, the commit queue and the log.
//!
//! A server's commits reach the log through one [`CommitPath`], installed with
//! [`Core::set_commit_path`](super::Core::set_commit_path):
//!
//! - **object shipping** ([`ObjectShipping`], thor's own and the default): one commit record
//!   per commit (kind 2, or kind 3 for a two-phase part) holding the new versions; it takes
//!   no page requests;
//! - **the QuickStore study's page modes** live outside the core, in thor-study: the
//!   page-diffing modes (PD-REDO, PD-ESM, SD-ESM, SL-ESM) translate page records into an
//!   ordinary [`CommitIn`] ([`CommitPath::page_commit`]) and log it as object shipping does;
//!   whole-page logging logs page images and a commit record of its own, keeps a table of the
//!   copies not yet home, its own checkpoint records and truncation floor.
//!
//! It is the client's seam seen from the server (thor-client's `session::commit_path`, with
//! the same names). The hooks are exactly what the page modes need, so that the core's `pump`
//! reads gate, validate, prepare, append, and `durable`, `needs_room`, `installed` and the
//! checkpoint have no branch on the mode:
//!
//! ```text
//!  PageRecords ──► path.page_records (staged, answered Ack)
//!  PageCommit ──► path.page_commit (page images through PageReads; reads ──► path.page_read)
//!        └─► CommitIn ──► commit queue
//!  head of the queue ──► core's gate (failed, read-only, MOB room, path.log_bytes)
//!        └─ path.needs_room, path.gate ──► validation (CLOCC / 2PC)
//!        ──► path.prepare (orefs, records) ──► path.append (Append × n, LSN order)
//!  Durable(lsn) ──► store.publish ──► path.durable(lsn, published)
//!  install round ──► path.installed(page, version) × pages ──► checkpoint job truncating
//!        below min(superblock checkpoint, path.truncation_floor) ──► path.installed_round
//!  recovery: Core::replay ──► path.replay (the path's own record kinds), else the store's
//!        ──► path.replayed_all
//! ```
//!
//! # What any commit path may do to the log
//!
//! This is the contract a replicated log must keep too (issue 33 puts Raft behind it):
//!
//! 1. **Append in LSN order, only through effects.** A path appends records by pushing
//!    [`Effect::Append`]s whose LSNs are the store's next LSNs, consecutive and in effect
//!    order ([`PathLog::append`] for records of its own, [`CommitPath::append`] for a prepared
//!    commit's records, whose LSNs `prepare` assigned). Nothing else writes the log, and no
//!    record is appended while recovering or after the server failed
//!    ([`PathLog::may_append`]). Every record fits `record_bytes_max`
//!    ([`CommitPath::log_bytes`] tells the core's gate before anything is appended).
//! 2. **Acknowledge only what is durable.** A commit is answered when the log is durable up to
//!    its last record (its commit record, the highest of its LSNs): the core does that, and a
//!    path learns of it in [`CommitPath::durable`]. A path's records below a durable commit
//!    record (page images) are durable with it; the driver reports durability as a prefix.
//! 3. **Hold the truncation floor.** The log is truncated only below the superblock's
//!    checkpoint *and* below [`CommitPath::truncation_floor`]: a path keeps every record its
//!    recovery reads (WPL: the newest durable checkpoint record and every copy it lists).
//!    A path never truncates anything itself.
//! 4. **Replay its own records.** Recovery replays the log forward from the superblock's
//!    checkpoint; records of kinds the path owns go to [`CommitPath::replay`], which must
//!    rebuild what forward replay needs (the created objects' allocation, the versions that
//!    go back into the MOB) from records at or above the truncation floor alone.
//!
//! A path keeps its state behind these hooks; what it needs of the core comes in as
//! arguments (the [`Store`] to prepare into, a [`PathLog`] to append through, [`PageReads`]
//! for page images), and a failure it cannot recover from stops the server
//! ([`PathLog::fail`], or an `Err` from a hook), since its state no longer matches the log.

use std::any::Any;

use bytes::Bytes;
use thor_core::{Lsn, PageId};
use thor_wire::{CommitMode, PageCommit, PageRecords};

use super::store::{CommitIn, Images, Prepared, ReplayedRecord, Stop, Store};
use super::{ConnId, Effect, Origin};
use crate::error::{EngineError, InvalidCommit};
use crate::record::PrepareSection;

/// How a server's commits reach the log (see the module documentation). The page hooks
/// (`page_records`, `page_commit`, `page_read`, `disconnect`) default to refusing every page
/// request, as thor's own object shipping does.
pub trait CommitPath: std::fmt::Debug + Send + Any {
    /// The commit mode clients must commit in.
    fn mode(&self) -> CommitMode;

    /// The path as `Any`, so that the crate that made it can reach its own state again
    /// (thor-study's restart hands a rebuilt table to the path it installed).
    fn as_any_mut(&mut self) -> &mut dyn Any;

    /// Whether the path holds log state of its own (a table recovery rebuilt, copies not yet
    /// home): replacing it would lose what the log still needs.
    fn keeps_log_state(&self) -> bool;

    /// The log bytes `c` becomes on this path and its largest single record, a two-phase
    /// part's section of `section_bytes` included (the core's gate checks both against the
    /// log's bounds before anything is appended).
    fn log_bytes(&self, c: &CommitIn, section_bytes: usize) -> LogBytes {
        let record = c.record_bytes();
        LogBytes { total: record + section_bytes, largest: record + section_bytes }
    }

    /// Whether `c` must wait before it is prepared for room of the path's own (the core checks
    /// the MOB's and the log buffer's); an install round or a durable report frees it.
    fn needs_room(&self, c: &CommitIn) -> bool;

    /// Before validation: refuses what this path can never take (`Err`), and may append
    /// records of its own first (a checkpoint that is due).
    fn gate(&mut self, c: &CommitIn, log: &mut PathLog<'_>) -> Result<(), EngineError>;

    /// Prepares `c` into the store: orefs for its created objects and its records with their
    /// LSNs (the store's `pending` then ends with it), or the pages it needs, or a refusal.
    fn prepare(&mut self, store: &mut Store, c: &CommitIn, at: PrepareAt<'_>) -> Result<(), Stop>;

    /// Appends the records of `p`, just prepared, in LSN order; `Err` stops the server.
    fn append(&mut self, p: &Prepared, fx: &mut Vec<Effect>) -> Result<(), String>;

    /// The log is durable up to `durable`; `published` are the commits published now (in
    /// LSN order), before their clients are answered. `Err` stops the server.
    fn durable(&mut self, durable: Lsn, published: &[Prepared]) -> Result<(), String>;

    /// An install round wrote `page` home at `version` (durable once the round's checkpoint
    /// is).
    fn installed(&mut self, page: PageId, version: Lsn);

    /// Where the log may be truncated after an install round whose superblock checkpoint is
    /// `checkpoint`: at most `checkpoint`, lower to keep what the path's recovery reads;
    /// `None` keeps the whole log.
    fn truncation_floor(&self, checkpoint: Lsn) -> Option<Lsn>;

    /// An install round planned its checkpoint: the path may append records of its own (WPL
    /// logs its table without the copies the round took home).
    fn installed_round(&mut self, log: &mut PathLog<'_>);

    /// Recovery's forward replay meets `rec` at `lsn`: `Some` if it is of a kind this path
    /// owns (and what it replayed to), `None` for the store's own records.
    fn replay(
        &mut self,
        store: &mut Store,
        lsn: Lsn,
        rec: &Bytes,
    ) -> Option<Result<ReplayedRecord, EngineError>>;

    /// Recovery replayed every record (before the store learns the log's end): what the path
    /// restored and replay did not meet goes into the store now.
    fn replayed_all(&mut self, _store: &mut Store) {}

    /// `PageRecords` (records and stolen pages sent before commit): staged for the commit, or
    /// the reason they are refused (answered as malformed; the session stays open).
    fn page_records(
        &mut self,
        _conn: ConnId,
        r: PageRecords,
        _page_size: usize,
    ) -> Result<(), String> {
        let mode = self.mode();
        if !r.records.is_empty() {
            return Err(format!("the server's commit mode is {mode}, which takes no page records"));
        }
        if !r.pages.is_empty() {
            return Err(format!("the server's commit mode is {mode}, which takes no pages"));
        }
        Ok(())
    }

    /// `PageCommit`: the commit it becomes, a refusal, or `Waiting` for the page images
    /// [`PageReads::committed_image`] did not have (each then comes to `page_read`).
    fn page_commit(
        &mut self,
        _from: Requester,
        c: PageCommit,
        _reads: &mut PageReads<'_>,
    ) -> PageStep {
        let why =
            format!("the client committed in mode {}, the server's is {}", c.mode, self.mode());
        PageStep::Refused(InvalidCommit::BadPageRecord(why).into())
    }

    /// A page read completed (`image`: its committed image, the MOB's versions applied, or
    /// why it could not be read): the page commits that now have every image they waited
    /// for, as commits or refusals.
    fn page_read(
        &mut self,
        _page: PageId,
        _image: Result<&Bytes, &EngineError>,
    ) -> Vec<(Requester, Result<CommitIn, EngineError>)> {
        Vec::new()
    }

    /// Whether a page commit waits for a page read (`page_read` would take the image).
    fn waits_for_pages(&self) -> bool {
        false
    }

    /// A connection closed: what it staged goes.
    fn disconnect(&mut self, _conn: ConnId) {}

    /// The path's counters (zero on object shipping).
    fn counters(&self) -> PathCounters {
        PathCounters::default()
    }
}

/// The log bytes a commit becomes ([`CommitPath::log_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBytes {
    /// Bytes of all its records.
    pub total: usize,
    /// Bytes of its largest record.
    pub largest: usize,
}

/// Who sent a page commit (opaque: the path hands it back with the commit it became).
#[derive(Debug, Clone, Copy)]
pub struct Requester(pub(crate) Origin);

impl Requester {
    /// The connection it came on (`None` for a direct operation).
    pub fn conn(&self) -> Option<ConnId> {
        self.0.conn()
    }
}

/// What [`CommitPath::page_commit`] made of a page commit.
#[derive(Debug)]
pub enum PageStep {
    /// The commit, for the queue.
    Commit(CommitIn),
    /// Refused.
    Refused(EngineError),
    /// Waiting for page reads ([`CommitPath::page_read`]).
    Waiting,
}

/// The committed page images a page commit needs: from the page cache and the MOB, or read
/// from disk (asked here, delivered to [`CommitPath::page_read`]).
#[derive(Debug)]
pub struct PageReads<'a> {
    store: &'a mut Store,
    /// Pages to read.
    pub(crate) read: Vec<PageId>,
    /// MOB versions applied to the images handed out.
    pub(crate) applied: u64,
}

impl<'a> PageReads<'a> {
    pub(crate) fn new(store: &'a mut Store) -> PageReads<'a> {
        PageReads { store, read: Vec::new(), applied: 0 }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.store.page_size
    }

    /// The committed image of `page` (installed image and the MOB's versions), or `None`
    /// when it must be read first: the core reads it and hands it to `page_read`.
    pub fn committed_image(&mut self, page: PageId) -> Result<Option<Bytes>, EngineError> {
        match self.store.compose(page)? {
            Some((img, applied)) => {
                self.applied += applied as u64;
                Ok(Some(img))
            }
            None => {
                if !self.read.contains(&page) {
                    self.read.push(page);
                }
                Ok(None)
            }
        }
    }
}

/// Counters of the page modes (reported in `ServerStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCounters {
    /// Page-based commits handed to the commit path.
    pub page_commits: u64,
    /// Page records received (at commit and before).
    pub records: u64,
    /// Page records received before commit.
    pub records_early: u64,
    /// Dirty pages received before commit (stolen from a client's memory; also counted in
    /// `pages_shipped`).
    pub pages_early: u64,
    /// Bytes of page records received.
    pub record_bytes: u64,
    /// Dirty pages received whole.
    pub pages_shipped: u64,
    /// Pages read from disk to apply records to.
    pub redo_reads: u64,
}

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

/// A commit path's counters: the study's page modes report theirs here (the core only adds
/// them to its statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// The page modes'.
    pub pages: PageCounters,
    /// Whole-page logging's.
    pub wpl: WplCounters,
    /// Copies in the WPL table now.
    pub wpl_table: usize,
}

/// Where a commit is prepared: the page images at hand, whether it may create objects, its
/// timestamp, and a two-phase part's section.
#[derive(Debug)]
pub struct PrepareAt<'a> {
    /// The committed images of the pages validation and preparation read.
    pub images: &'a Images,
    /// False during a bulk load.
    pub allow_create: bool,
    /// The commit's timestamp (time, server).
    pub ts: (u64, u32),
    /// A two-phase part's section, `None` for every other commit.
    pub(crate) section: Option<&'a PrepareSection>,
}

impl PrepareAt<'_> {
    /// Whether the commit is a part of a two-phase commit (prepared as object shipping
    /// prepares it, on every path).
    pub fn is_two_phase_part(&self) -> bool {
        self.section.is_some()
    }
}

/// The log as a path may use it outside a commit's own records: the next LSN, appends of
/// plain records in LSN order, and a failure that stops the server.
#[derive(Debug)]
pub struct PathLog<'a> {
    store: &'a mut Store,
    fx: &'a mut Vec<Effect>,
    /// Whether records may be appended: not while recovering (recovery's driver appends
    /// nothing), not once the server failed.
    open: bool,
    /// Why the path's state no longer matches the log, if it does not.
    failure: Option<String>,
}

impl<'a> PathLog<'a> {
    /// The log of `store`, appending into `fx` if `open`.
    pub(crate) fn new(store: &'a mut Store, fx: &'a mut Vec<Effect>, open: bool) -> PathLog<'a> {
        PathLog { store, fx, open, failure: None }
    }

    /// Whether the path may append now.
    pub fn may_append(&self) -> bool {
        self.open && self.failure.is_none()
    }

    /// The LSN the next record appended gets.
    pub fn next_lsn(&self) -> Lsn {
        self.store.next_lsn()
    }

    /// Appends `record` at the next LSN (counted in the log buffer until durable).
    pub fn append(&mut self, record: Vec<u8>) -> Lsn {
        assert!(self.may_append(), "a path appended while the log is closed to it");
        let lsn = self.store.append_plain(&record);
        self.fx.push(Effect::Append { lsn, record: Bytes::from(record) });
        lsn
    }

    /// The path's state no longer matches the log: the core stops the server.
    pub fn fail(&mut self, why: String) {
        self.failure.get_or_insert(why);
    }

    /// The failure reported, if any (the core acts on it after the hook).
    pub(crate) fn into_failure(self) -> Option<String> {
        self.failure
    }
}

/// Thor's own commit path: one commit record per commit, nothing kept beside the store, no
/// page requests. Its hooks are public so that a path of another crate can do what it does
/// for the commits it does not handle itself.
#[derive(Debug, Default, Clone, Copy)]
pub struct ObjectShipping;

impl CommitPath for ObjectShipping {
    fn mode(&self) -> CommitMode {
        CommitMode::Obj
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn keeps_log_state(&self) -> bool {
        false
    }

    fn needs_room(&self, _: &CommitIn) -> bool {
        false
    }

    fn gate(&mut self, c: &CommitIn, _: &mut PathLog<'_>) -> Result<(), EngineError> {
        match c.pages {
            None => Ok(()),
            Some(_) => {
                let why = "a whole-page commit to a server not in wpl mode".to_string();
                Err(InvalidCommit::BadPageRecord(why).into())
            }
        }
    }

    fn prepare(&mut self, store: &mut Store, c: &CommitIn, at: PrepareAt<'_>) -> Result<(), Stop> {
        store.prepare(c, at.images, at.allow_create, at.ts, at.section).map(drop)
    }

    fn append(&mut self, p: &Prepared, fx: &mut Vec<Effect>) -> Result<(), String> {
        fx.push(Effect::Append { lsn: p.lsn, record: p.record.clone() });
        Ok(())
    }

    fn durable(&mut self, _: Lsn, _: &[Prepared]) -> Result<(), String> {
        Ok(())
    }

    fn installed(&mut self, _: PageId, _: Lsn) {}

    fn truncation_floor(&self, checkpoint: Lsn) -> Option<Lsn> {
        Some(checkpoint)
    }

    fn installed_round(&mut self, _: &mut PathLog<'_>) {}

    fn replay(
        &mut self,
        _: &mut Store,
        _: Lsn,
        _: &Bytes,
    ) -> Option<Result<ReplayedRecord, EngineError>> {
        None
    }
}
