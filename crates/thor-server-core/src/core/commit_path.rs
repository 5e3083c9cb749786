//! The server's commit path: the seam between the commit queue and the log.
//!
//! A server prepares commits one way or another, chosen by its commit mode
//! ([`Core::set_commit_mode`](super::Core::set_commit_mode)):
//!
//! - **object shipping** ([`ObjectShipping`], the default and every mode but `wpl`): one
//!   commit record per commit (kind 2, or kind 3 for a two-phase part) holding the new
//!   versions; the page-diffing modes (PD-REDO, PD-ESM, SD-ESM, SL-ESM) translate their page
//!   records into such a commit before it is queued (`super::pagecommit`), so they ride this
//!   path too;
//! - **whole-page logging** ([`WholePageLogging`](super::wpl::WholePageLogging), the QuickStore
//!   study's `wpl` mode): page images and a commit record per commit, a table of the copies
//!   not yet home, its own checkpoint records and truncation floor (`super::wpl`).
//!
//! It is the client's seam seen from the server (thor-client's `session::commit_path`, with
//! the same names). [`CommitPath`] has exactly the hooks whole-page logging needs, so that the
//! core's `pump` reads gate, validate, prepare, append, and `durable`, `needs_room`,
//! `installed` and the checkpoint have no branch on the mode:
//!
//! ```text
//!  head of the queue ──► core's gate (failed, read-only, MOB room, log buffer)
//!        └─ path.needs_room, path.gate ──► validation (CLOCC / 2PC)
//!        ──► path.prepare (orefs, records) ──► path.append (Append × n, LSN order)
//!  Durable(lsn) ──► store.publish ──► path.durable(lsn, published)
//!  install round ──► path.installed(page, version) × pages ──► checkpoint job truncating
//!        below min(superblock checkpoint, path.truncation_floor) ──► path.installed_round
//!  recovery: Core::replay ──► path.replay (the path's own record kinds), else the store's
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
//!    (`CommitIn::largest_record` tells the core's gate before anything is appended).
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
//! arguments (the store to prepare into, a [`PathLog`] to append through), and a failure it
//! cannot recover from stops the server ([`PathLog::fail`], or an `Err` from a hook), since
//! its state no longer matches the log.

use bytes::Bytes;
use thor_core::{Lsn, PageId};

use super::Effect;
use super::store::{CommitIn, Images, Prepared, Replay, Stop, Store};
use super::wpl::WplCounters;
use crate::error::{EngineError, InvalidCommit};
use crate::record::PrepareSection;

/// How a server's commits reach the log (see the module documentation).
pub(crate) trait CommitPath: std::fmt::Debug + Send {
    /// Whether the path holds log state of its own (a table recovery rebuilt, copies not yet
    /// home): replacing it would lose what the log still needs, so a mode change keeps it.
    fn keeps_log_state(&self) -> bool;

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
    ) -> Option<Result<Replay, EngineError>>;

    /// Whole-page logging's counters and the copies in its table (zero on other paths).
    fn wpl_stats(&self) -> (WplCounters, usize);
}

/// Where a commit is prepared: the page images at hand, whether it may create objects, its
/// timestamp, and a two-phase part's section.
pub(crate) struct PrepareAt<'a> {
    /// The committed images of the pages validation and preparation read.
    pub images: &'a Images,
    /// False during a bulk load.
    pub allow_create: bool,
    /// The commit's timestamp (time, server).
    pub ts: (u64, u32),
    /// A two-phase part's section, `None` for every other commit.
    pub section: Option<&'a PrepareSection>,
}

/// The log as a path may use it outside a commit's own records: the next LSN, appends of
/// plain records in LSN order, and a failure that stops the server.
pub(crate) struct PathLog<'a> {
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
    pub fn new(store: &'a mut Store, fx: &'a mut Vec<Effect>, open: bool) -> PathLog<'a> {
        PathLog { store, fx, open, failure: None }
    }

    /// Whether the path may append now.
    pub fn may_append(&self) -> bool {
        self.open && self.failure.is_none()
    }

    /// The LSN the next record appended gets.
    pub fn next_lsn(&self) -> Lsn {
        self.store.next_lsn
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
    pub fn into_failure(self) -> Option<String> {
        self.failure
    }
}

/// Thor's own commit path: one commit record per commit, nothing kept beside the store.
#[derive(Debug, Default)]
pub(crate) struct ObjectShipping;

impl CommitPath for ObjectShipping {
    fn keeps_log_state(&self) -> bool {
        false
    }

    fn needs_room(&self, _: &CommitIn) -> bool {
        false
    }

    fn gate(&mut self, c: &CommitIn, _: &mut PathLog<'_>) -> Result<(), EngineError> {
        match c.wpl {
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

    fn replay(&mut self, _: &mut Store, _: Lsn, _: &Bytes) -> Option<Result<Replay, EngineError>> {
        None
    }

    fn wpl_stats(&self) -> (WplCounters, usize) {
        (WplCounters::default(), 0)
    }
}
