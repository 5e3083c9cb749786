//! Concurrency control: CLOCC at a server (thor-ecoop99 section 4.2).
//!
//! Every transaction that commits here gets a [`Timestamp`] (the server's clock and its id);
//! the serial order of transactions is timestamp order. A transaction `T` is validated with
//! its read object set (ROS: the objects it read, plus the ones it wrote) and its modified
//! object set (MOS), in this order:
//!
//! 1. **Invalid set.** If an object `T` used is in the invalid set of `T`'s client, `T` read a
//!    stale copy: refused `Stale`.
//! 2. **Threshold.** If `T`'s timestamp is below `VQ.t`, refused `TooOld`.
//! 3. **Rule 1.** An uncommitted `S` earlier than `T` wrote an object `T` read: refused.
//! 4. **Rule 2.** A later `S` read an object `T` writes (2a), or wrote an object `T` read (2b).
//!    Where the paper allows it (2a, and 2b with `S` committed) `T` is retried once with a
//!    fresh timestamp later than everything in the queue; otherwise refused.
//!
//! A transaction that passes enters the *validation queue* (VQ): read-only ones as committed
//! at once, read-write ones as committing until their log record is durable, then committed.
//! At that moment every client whose *directory* says it was sent the page of an object `T`
//! modified gets that object in its *invalid set*, and the invalidation rides on the next reply
//! to that client; the client's acknowledgement (on a later request) removes it.
//!
//! # Data structures and their bounds
//!
//! - The VQ is a map from timestamp to the entry's sets, plus an index per object of the
//!   latest reader and writer timestamps and the uncommitted writers, so each rule costs one
//!   lookup per object of `T`, not a scan of the queue. The queue keeps at most
//!   [`CcConfig::vq_entries_max`] entries and none older than [`CcConfig::threshold_delta_us`]:
//!   dropping the oldest committed entries raises the threshold `VQ.t` above them, so no
//!   transaction they could refuse is ever validated again.
//! - A transaction that names more than [`CcConfig::reads_tracked_max`] objects (OO7's T2b
//!   reads 500,000 and writes 99,000) is not indexed per object: its timestamp raises the
//!   threshold, which refuses every transaction its reads or writes could refuse by rule 2
//!   (those validated later at an earlier timestamp), and while it is committing its writes are
//!   kept as one [`OrefSet`] (a 512-bit map per page) that rule 1 checks beside the index.
//!   Indexing T2b's writes cost two hash operations per object on the commit path, for rule 2
//!   checks the threshold makes.
//! - A directory holds the pages sent to a client, at most [`CcConfig::directory_pages_max`];
//!   past that it is *coarsened*: it remembers groups of 2^k consecutive pages (k grows by 3
//!   each time), which costs extra invalidations for pages of a group the client never had, but
//!   no extra aborts. A coarse directory ignores discarded-page notices (it cannot tell whether
//!   the rest of a group is still cached).
//! - An invalid set holds at most [`CcConfig::invalid_max`] objects. A client that leaves more
//!   unacknowledged has its session expired (`Error(SessionExpired)`), so a client that stops
//!   reading replies cannot grow the server's memory.
//!
//! # Acknowledgements
//!
//! The server sends each invalidation once. An object invalidated again after it was sent (a
//! second commit changed it before the client's ack arrived) is sent again, and leaves the
//! invalid set only once every sending of it has been acknowledged, so that an ack of an early
//! invalidation never clears a later one the client has not seen.
//!
//! # Fair retries
//!
//! Validation is first come, first served, which lets a client that commits back to back
//! starve one that keeps losing to it. [`Cc`] also keeps the claims of repeated losers
//! (`super::fair`): a session's losses count up from its refusals ([`Cc::lost`]) and the
//! invalidation aborts its client reports, until it commits ([`Cc::committed`]) or validates a
//! transaction that writes nothing. The core holds back other sessions' commits that write a
//! claimed object; the rules themselves are unchanged.
//!
//! # After a crash
//!
//! The VQ is restored from the commit records after the checkpoint (each carries its timestamp
//! and ROS); the threshold starts at the earliest restored timestamp (older entries went with
//! the truncated log) and timestamps continue above the latest. Directories and invalid sets
//! belong to sessions, which a crash ends: a client starts a new session with an empty cache,
//! so empty invalid sets are the conservative choice.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use thor_core::{Oref, PageId};

use super::ConnId;
use super::fair::{Claims, FairConfig};
use super::orefset::OrefSet;

/// A transaction's place in the serial order: the server clock's microseconds, then the
/// server's id, so that timestamps from different servers never tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    /// Microseconds since the Unix epoch, from the server's clock.
    pub time_us: u64,
    /// The id of the server that assigned it.
    pub server: u32,
}

impl Timestamp {
    /// The next timestamp after `self` at the same server.
    fn successor(self) -> Timestamp {
        Timestamp { time_us: self.time_us + 1, server: self.server }
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.time_us, self.server)
    }
}

/// Bounds of the concurrency-control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// Most entries in the validation queue.
    pub vq_entries_max: usize,
    /// Committed entries older than this (by their timestamp against the clock) leave the
    /// queue, raising the threshold. The paper suggests minutes for a wide-area system.
    pub threshold_delta_us: u64,
    /// Most page entries in one client's directory before it is coarsened.
    pub directory_pages_max: usize,
    /// Most unacknowledged invalidations of one client before its session expires.
    pub invalid_max: usize,
    /// Most objects (read and written) a transaction is recorded for one by one in the
    /// per-object index. A transaction that names more (a traversal of a whole database)
    /// raises the threshold to its timestamp instead: the only thing its reads and its
    /// committed writes are kept for is refusing transactions validated later with earlier
    /// timestamps (rules 2a and 2b), and the threshold refuses every such transaction. While
    /// it is committing, its writes are one [`OrefSet`] that rule 1 checks. The index stays
    /// bounded, a read-only traversal of 437,000 objects costs no table of that size, and a
    /// commit of 99,000 objects no index entry per object.
    pub reads_tracked_max: usize,
    /// Fair retries (`super::fair`): how long a repeated loser's claim holds back its rivals,
    /// and after how many losses in a row it gets one.
    pub fair: FairConfig,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            vq_entries_max: crate::limits::VQ_ENTRIES_MAX,
            threshold_delta_us: crate::limits::VQ_THRESHOLD_DELTA_US,
            directory_pages_max: crate::limits::DIRECTORY_PAGES_MAX,
            invalid_max: crate::limits::INVALID_SET_MAX,
            reads_tracked_max: crate::limits::READS_TRACKED_MAX,
            fair: FairConfig::default(),
        }
    }
}

/// Why validation refused a transaction. Each names an object involved, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The object is in the client's invalid set: the transaction used a stale copy.
    Stale(Oref),
    /// The timestamp is below the threshold.
    TooOld {
        /// The transaction's timestamp.
        ts: Timestamp,
        /// `VQ.t`.
        threshold: Timestamp,
    },
    /// Rule 1: an earlier, uncommitted transaction wrote the object the transaction read.
    Rule1(Oref),
    /// Rule 2a: a later transaction read the object this one writes.
    Rule2a(Oref),
    /// Rule 2b: a later transaction wrote the object this one read.
    Rule2b(Oref),
    /// Whole-page logging's page rule: a commit wrote or created an object on this page
    /// after the client's copy of it was sent, so the copy cannot be logged whole (see
    /// thor-study's `wpl::prepare`). Answered as `Stale`: run again on a fresh copy of the page.
    PageWritten(thor_core::PageId),
}

impl Refusal {
    /// The object the refusal names, if it names one.
    pub fn object(&self) -> Option<Oref> {
        match *self {
            Refusal::Stale(o) | Refusal::Rule1(o) | Refusal::Rule2a(o) | Refusal::Rule2b(o) => {
                Some(o)
            }
            Refusal::TooOld { .. } | Refusal::PageWritten(_) => None,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Stale(o) => write!(f, "object {o} changed after this client's copy was sent"),
            Refusal::TooOld { ts, threshold } => {
                write!(f, "timestamp {ts} is below the validation threshold {threshold}")
            }
            Refusal::Rule1(o) => {
                write!(f, "rule 1: an earlier transaction that is still committing wrote {o}")
            }
            Refusal::Rule2a(o) => write!(f, "rule 2a: a later transaction read {o}"),
            Refusal::Rule2b(o) => write!(f, "rule 2b: a later transaction wrote {o}"),
            Refusal::PageWritten(p) => {
                write!(f, "page {p} was written after this client's copy of it was sent")
            }
        }
    }
}

/// Counters of concurrency control.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CcCounters {
    /// Transactions refused by the invalid-set check.
    pub refused_stale: u64,
    /// Refused for a timestamp below the threshold.
    pub refused_threshold: u64,
    /// Refused by rule 1.
    pub refused_rule1: u64,
    /// Refused by rule 2a.
    pub refused_rule2a: u64,
    /// Refused by rule 2b.
    pub refused_rule2b: u64,
    /// Transactions that failed rule 2 at their first timestamp and passed at a later one.
    pub retried_passed: u64,
    /// Read-only transactions validated.
    pub read_only_validated: u64,
    /// Transactions whose reads raised the threshold instead of being recorded one by one
    /// ([`CcConfig::reads_tracked_max`]).
    pub reads_by_threshold: u64,
    /// Invalidations added to invalid sets.
    pub invalidations_added: u64,
    /// Invalidations sent on replies (an object sent twice counts twice).
    pub invalidations_sent: u64,
    /// Acknowledgements that matched a sent invalidation.
    pub invalidations_acked: u64,
    /// Times a directory was coarsened.
    pub directories_coarsened: u64,
    /// Sessions expired for too many unacknowledged invalidations.
    pub sessions_expired: u64,
}

/// What concurrency control knows about one object: enough to apply rules 1 and 2 with one
/// lookup.
#[derive(Debug, Clone, Default)]
struct ObjInfo {
    /// The latest timestamp of a queued transaction that read it.
    max_read: Timestamp,
    /// The latest timestamp of a committed transaction that wrote it.
    max_write: Timestamp,
    /// Timestamps of queued transactions that wrote it and are still committing: almost
    /// always none or one, so one is held inline (a commit of 99,000 objects allocated a vector
    /// per object).
    uncommitted: SmallVec<[Timestamp; 1]>,
}

/// One transaction in the validation queue.
#[derive(Debug, Clone)]
struct Entry {
    /// Objects read (may include written ones) that the index holds: none for a transaction
    /// the threshold stands for.
    ros: Vec<Oref>,
    /// Objects written.
    mos: Vec<Oref>,
    /// Whether its commit is final.
    committed: bool,
    /// Whether its writes are in the per-object index (else, while it is committing, in
    /// [`Cc::big`], and once committed nowhere: the threshold stands for them).
    indexed: bool,
}

/// An invalidation waiting for its acknowledgement.
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    /// Invalidated again since last sent: must be sent (again).
    unsent: bool,
    /// Sendings not yet acknowledged.
    sent: u32,
}

/// The pages sent to one client.
#[derive(Debug, Default)]
struct Directory {
    /// Entries are `page >> shift`: exact pages at 0, groups of 2^shift pages above.
    shift: u32,
    /// The entries.
    pages: FxHashSet<u32>,
}

impl Directory {
    fn contains(&self, page: PageId) -> bool {
        self.pages.contains(&(page.get() >> self.shift))
    }

    /// Adds a page; coarsens past `max`. Returns whether it coarsened.
    fn add(&mut self, page: PageId, max: usize) -> bool {
        self.pages.insert(page.get() >> self.shift);
        let mut coarsened = false;
        while self.pages.len() > max && self.shift < 32 {
            // Each step divides the number of entries by up to 8; at shift 32 one entry covers
            // every page.
            let step = 3.min(32 - self.shift);
            self.shift += step;
            self.pages = self.pages.iter().map(|p| p.checked_shr(step).unwrap_or(0)).collect();
            coarsened = true;
        }
        coarsened
    }

    fn discard(&mut self, page: PageId) {
        if self.shift == 0 {
            self.pages.remove(&page.get());
        }
    }
}

/// Concurrency-control state of one client (one session).
#[derive(Debug, Default)]
struct ClientState {
    /// Pages sent to it.
    directory: Directory,
    /// Its invalid set.
    invalid: FxHashMap<Oref, Pending>,
    /// Objects of `invalid` marked `unsent`, in the order they were invalidated.
    unsent: Vec<Oref>,
}

/// The server's CLOCC state. See the module documentation.
#[derive(Debug)]
pub struct Cc {
    cfg: CcConfig,
    /// This server's id, the low part of its timestamps.
    server: u32,
    /// The latest timestamp given out.
    last_ts: Timestamp,
    /// `VQ.t`: no transaction below it validates.
    threshold: Timestamp,
    /// Per-session state, by connection.
    clients: FxHashMap<ConnId, ClientState>,
    /// How many times a directory was changed (a page added or discarded, a client's state
    /// made or dropped): demotion's invariants depend on the directories and are not walked
    /// again while neither they nor demotion's records changed.
    directory_changes: u64,
    /// The validation queue, in timestamp order.
    vq: BTreeMap<Timestamp, Entry>,
    /// Per-object summary of the queue.
    objs: FxHashMap<Oref, ObjInfo>,
    /// The committing transactions that name more than [`CcConfig::reads_tracked_max`]
    /// objects, with their writes (see the module documentation). Rarely more than one.
    big: Vec<(Timestamp, OrefSet)>,
    /// Fair retries: repeated losers' claims (`super::fair`).
    claims: Claims,
    counters: CcCounters,
    /// The deliberately broken protocol (tests only, `crate::mutants`).
    #[cfg(feature = "mutants")]
    pub mutant: Option<crate::mutants::Mutant>,
}

impl Cc {
    /// Empty state for server `server`.
    pub fn new(cfg: CcConfig, server: u32) -> Cc {
        Cc {
            cfg,
            server,
            last_ts: Timestamp { time_us: 0, server },
            threshold: Timestamp::default(),
            clients: FxHashMap::default(),
            directory_changes: 0,
            vq: BTreeMap::new(),
            objs: FxHashMap::default(),
            big: Vec::new(),
            claims: Claims::new(cfg.fair),
            counters: CcCounters::default(),
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }

    /// The counters.
    pub fn counters(&self) -> CcCounters {
        self.counters
    }

    /// Fair retries' claims (`super::fair`).
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Fair retries' claims, to count what the core holds back.
    pub fn claims_mut(&mut self) -> &mut Claims {
        &mut self.claims
    }

    /// Validation refused a transaction of `conn` for `r`: a loss, which may earn its session a
    /// claim on the object `r` names (`super::fair`). The embedded API's commits (`None`)
    /// never claim.
    pub fn lost(&mut self, conn: Option<ConnId>, r: &Refusal, now_us: u64) {
        if let Some(conn) = conn {
            self.claims.lost(conn, r.object(), now_us);
        }
    }

    /// Entries in the validation queue now.
    pub fn vq_len(&self) -> usize {
        self.vq.len()
    }

    /// Page entries in all directories now.
    pub fn directory_entries(&self) -> usize {
        self.clients.values().map(|c| c.directory.pages.len()).sum()
    }

    /// Unacknowledged invalidations of all clients now.
    pub fn invalid_entries(&self) -> usize {
        self.clients.values().map(|c| c.invalid.len()).sum()
    }

    /// `VQ.t`: nothing below it validates.
    pub fn threshold(&self) -> Timestamp {
        self.threshold
    }

    /// The latest timestamp given out.
    pub fn last_ts(&self) -> Timestamp {
        self.last_ts
    }

    /// A timestamp for a transaction validated now: the clock, but always after the last one
    /// and at or above the threshold (which a restart may have raised above the clock).
    pub fn fresh_ts(&self, now_us: u64) -> Timestamp {
        let t = Timestamp { time_us: now_us, server: self.server };
        // After the last one, with this server's tie (the last may be a client's stamp).
        let t = if t > self.last_ts {
            t
        } else {
            Timestamp { time_us: self.last_ts.time_us + 1, server: self.server }
        };
        if t >= self.threshold {
            t
        } else {
            Timestamp { time_us: self.threshold.time_us + 1, server: self.server }
        }
    }

    /// Raises the threshold to `ts`: nothing below it validates from now on. After a restart
    /// the validation queue has lost the read-only transactions validated before the crash
    /// (they leave no log record); a timestamp a client chose may lie below one of them, so
    /// every such timestamp the clock allowed before the crash is refused.
    pub fn raise_threshold(&mut self, ts: Timestamp) {
        self.threshold = self.threshold.max(ts);
    }

    /// Validates a transaction of a two-phase commit at exactly `ts` (the client's choice,
    /// the same at every participant, so no retry at a later one). Changes nothing.
    pub fn validate_at(
        &mut self,
        conn: Option<ConnId>,
        reads: &[Oref],
        writes: &[Oref],
        ts: Timestamp,
    ) -> Result<Timestamp, Refusal> {
        if let Some(c) = conn.and_then(|c| self.clients.get(&c))
            && !self.mutated(crate::mutants::Mutant::InvalidSetOff)
            && !c.invalid.is_empty()
            && let Some(o) = reads.iter().chain(writes).find(|o| c.invalid.contains_key(o))
        {
            return Err(Refusal::Stale(*o));
        }
        if ts < self.threshold {
            return Err(Refusal::TooOld { ts, threshold: self.threshold });
        }
        if self.vq.contains_key(&ts) {
            // Two transactions chose the same timestamp (a 2^-31 chance per microsecond):
            // the second must choose again.
            return Err(Refusal::TooOld { ts, threshold: self.threshold });
        }
        self.rules(reads, writes, &[], ts).map_err(|(r, _)| r)?;
        Ok(ts)
    }

    /// A committing transaction aborted (two-phase commit): its writes no longer hold back
    /// others. Its reads stay counted in the per-object summary, which can only cause
    /// refusals that were not needed, never accept one that was.
    pub fn aborted(&mut self, ts: Timestamp) {
        let Some(e) = self.vq.get(&ts) else { return };
        if e.committed {
            return;
        }
        let e = self.vq.remove(&ts).expect("checked");
        if !e.indexed {
            self.big.retain(|(u, _)| *u != ts);
            return;
        }
        for o in &e.mos {
            if let Some(info) = self.objs.get_mut(o) {
                info.uncommitted.retain(|u| *u != ts);
            }
        }
    }

    /// Restores a transaction prepared but not decided (two-phase commit) during recovery: it
    /// is committing until its decision.
    pub fn restore_committing(&mut self, ts: Timestamp, reads: &[Oref], writes: &[Oref]) {
        if self.vq.is_empty() && self.threshold < ts {
            self.threshold = ts;
        }
        let indexed = self.note_committing(ts, reads, writes);
        self.last_ts = self.last_ts.max(ts);
        let ros = if indexed { reads.to_vec() } else { Vec::new() };
        self.vq.insert(ts, Entry { ros, mos: writes.to_vec(), committed: false, indexed });
    }

    /// Enters a committing transaction's reads and writes: in the per-object index, or (more
    /// than [`CcConfig::reads_tracked_max`] objects) by raising the threshold to `ts` and
    /// keeping the writes as one set in [`Cc::big`] until it commits or aborts. Returns
    /// whether it went into the index.
    fn note_committing(&mut self, ts: Timestamp, reads: &[Oref], writes: &[Oref]) -> bool {
        if !self.note_reads(ts, reads, writes) {
            if !writes.is_empty() {
                let mut set = OrefSet::new();
                for o in writes {
                    set.insert(*o);
                }
                self.big.push((ts, set));
            }
            return false;
        }
        self.objs.reserve(writes.len());
        for o in writes {
            self.objs.entry(*o).or_default().uncommitted.push(ts);
        }
        true
    }

    /// Records that the transaction at `ts` read `reads` and wrote `writes` (rule 2a's
    /// `max_read`), one by one if they are at most [`CcConfig::reads_tracked_max`], else by
    /// raising the threshold to `ts`. Returns whether they went into the index (else the
    /// threshold stands for them, and for the transaction's committed writes too).
    fn note_reads(&mut self, ts: Timestamp, reads: &[Oref], writes: &[Oref]) -> bool {
        if reads.len() + writes.len() > self.cfg.reads_tracked_max {
            self.threshold = self.threshold.max(ts);
            self.counters.reads_by_threshold += 1;
            return false;
        }
        // At most one new entry per object named: grown once, not by doubling.
        self.objs.reserve(reads.len() + writes.len());
        for o in reads.iter().chain(writes) {
            let info = self.objs.entry(*o).or_default();
            info.max_read = info.max_read.max(ts);
        }
        true
    }

    /// Forgets a session's state (its connection ended), its claims included.
    pub fn disconnect(&mut self, conn: ConnId) {
        self.directory_changes += 1;
        self.clients.remove(&conn);
        self.claims.disconnect(conn);
    }

    /// Asserts its bounds and relations: the validation queue within its bound, each
    /// directory within its bound, and every invalidation waiting to be sent one the client
    /// has not acknowledged.
    pub fn check_invariants(&self) {
        assert!(self.vq.len() <= self.cfg.vq_entries_max.max(1), "VQ bound");
        for (conn, c) in &self.clients {
            assert!(
                c.directory.pages.len() <= self.cfg.directory_pages_max.max(1),
                "directory of {conn} within its bound"
            );
            assert!(c.directory.shift <= 32);
            for o in &c.unsent {
                assert!(c.invalid.contains_key(o), "unsent invalidation {o:?} of {conn} pending");
            }
        }
        self.claims.check_invariants();
    }

    /// Whether this runs mutant `m` (always `false` without the `mutants` feature).
    #[cfg(feature = "mutants")]
    fn mutated(&self, m: crate::mutants::Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// Whether this runs mutant `m` (always `false` without the `mutants` feature).
    #[cfg(not(feature = "mutants"))]
    fn mutated(&self, _: crate::mutants::Mutant) -> bool {
        false
    }

    /// Page `page` was sent to `conn`'s client.
    pub fn page_sent(&mut self, conn: ConnId, page: PageId) {
        let max = self.cfg.directory_pages_max;
        self.directory_changes += 1;
        let c = self.clients.entry(conn).or_default();
        if c.directory.add(page, max) {
            self.counters.directories_coarsened += 1;
        }
    }

    /// How many times a directory was changed: while it stays the same, every
    /// [`Cc::directory_has`] answers as before.
    pub fn directory_changes(&self) -> u64 {
        self.directory_changes
    }

    /// Whether `conn`'s directory holds `page` (the client may cache it: it was sent and not
    /// reported discarded, or its group was).
    pub fn directory_has(&self, conn: ConnId, page: PageId) -> bool {
        self.clients.get(&conn).is_some_and(|c| c.directory.contains(page))
    }

    /// The piggybacked section of a request from `conn`: acknowledged invalidations and pages
    /// the client no longer caches.
    pub fn piggyback(&mut self, conn: ConnId, acks: &[Oref], discarded: &[PageId]) {
        let Some(c) = self.clients.get_mut(&conn) else { return };
        for o in acks {
            let Some(p) = c.invalid.get_mut(o) else { continue };
            if p.sent == 0 {
                // Never sent: the client acknowledges something it was not told. Ignore it.
                continue;
            }
            p.sent -= 1;
            self.counters.invalidations_acked += 1;
            if p.sent == 0 && !p.unsent {
                c.invalid.remove(o);
            }
        }
        for p in discarded {
            c.directory.discard(*p);
        }
        self.directory_changes += u64::from(!discarded.is_empty());
    }

    /// Up to `max` invalidations for the next reply to `conn`, marked sent.
    pub fn take_invalidations(&mut self, conn: ConnId, max: usize) -> Vec<Oref> {
        let Some(c) = self.clients.get_mut(&conn) else { return Vec::new() };
        if c.unsent.is_empty() {
            return Vec::new();
        }
        let n = c.unsent.len().min(max);
        let out: Vec<Oref> = c.unsent.drain(..n).collect();
        for o in &out {
            let p = c.invalid.get_mut(o).expect("unsent objects are in the invalid set");
            p.unsent = false;
            p.sent += 1;
        }
        self.counters.invalidations_sent += out.len() as u64;
        out
    }

    /// Whether `conn` has invalidations waiting to be sent.
    pub fn has_unsent(&self, conn: ConnId) -> bool {
        self.clients.get(&conn).is_some_and(|c| !c.unsent.is_empty())
    }

    /// Validates a transaction of `conn` (`None`: the embedded API, which caches nothing) that
    /// read `reads` and writes `writes`, at `ts` (`None`: a fresh timestamp). Changes nothing
    /// but counters of retries, and, when a transaction that writes nothing passes, its
    /// session's claims (it has won: `super::fair`); on success returns the timestamp to
    /// [`Cc::insert`] it at.
    pub fn validate(
        &mut self,
        conn: Option<ConnId>,
        reads: &[Oref],
        writes: &[Oref],
        ts: Option<Timestamp>,
        now_us: u64,
    ) -> Result<Timestamp, Refusal> {
        let r = self.validate_rules(conn, reads, writes, &[], ts, now_us);
        if r.is_ok()
            && writes.is_empty()
            && let Some(conn) = conn
        {
            self.claims.won(conn);
        }
        r
    }

    /// Validates a transaction whose commit carries leaf deltas for `merged` (each of which it
    /// writes), to be merged onto the leaves' newest versions (`crate::leafmerge`): as
    /// [`Cc::validate`], except that `merged` are exempt from the invalid-set check and from
    /// rules 1 and 2b, whose job for them the merge does key by key (the transaction's
    /// observations of such a leaf are the keys its delta lists, checked against the version
    /// it is merged onto). They stay subject to rule 2a (nothing later in the serial order may
    /// have read what it writes), and the caller enters them in the queue as read and written
    /// like any object, so that later transactions are validated against the merged write.
    pub fn validate_merging(
        &mut self,
        conn: Option<ConnId>,
        reads: &[Oref],
        writes: &[Oref],
        merged: &[Oref],
        now_us: u64,
    ) -> Result<Timestamp, Refusal> {
        debug_assert!(merged.iter().all(|o| writes.contains(o)));
        self.validate_rules(conn, reads, writes, merged, None, now_us)
    }

    /// The uncommitted writers of `o` (transactions still committing that write it), indexed
    /// or not.
    pub fn uncommitted_writers(&self, o: Oref) -> Vec<Timestamp> {
        let indexed = self.objs.get(&o).map(|i| i.uncommitted.to_vec()).unwrap_or_default();
        let big = self.big.iter().filter(|(_, s)| s.contains(o)).map(|(u, _)| *u);
        indexed.into_iter().chain(big).collect()
    }

    fn validate_rules(
        &mut self,
        conn: Option<ConnId>,
        reads: &[Oref],
        writes: &[Oref],
        exempt: &[Oref],
        ts: Option<Timestamp>,
        now_us: u64,
    ) -> Result<Timestamp, Refusal> {
        if let Some(c) = conn.and_then(|c| self.clients.get(&c))
            && !c.invalid.is_empty()
            && let Some(o) = reads
                .iter()
                .chain(writes)
                .find(|o| c.invalid.contains_key(o) && !exempt.contains(o))
        {
            return Err(Refusal::Stale(*o));
        }
        let ts = ts.unwrap_or_else(|| self.fresh_ts(now_us));
        if ts < self.threshold {
            return Err(Refusal::TooOld { ts, threshold: self.threshold });
        }
        match self.rules(reads, writes, exempt, ts) {
            Err((r, true)) => {
                // Rule 2a, or 2b against a committed transaction: it may fit later in the
                // serial order. Retry once after everything queued.
                let later = self.fresh_ts(now_us);
                match self.rules(reads, writes, exempt, later) {
                    Ok(()) => {
                        self.counters.retried_passed += 1;
                        Ok(later)
                    }
                    Err((r2, _)) => Err(if later == ts { r } else { r2 }),
                }
            }
            Err((r, false)) => Err(r),
            Ok(()) => Ok(ts),
        }
    }

    /// Rules 1 and 2 at `ts` (rules 1 and 2b not for `exempt`); on failure, the refusal and
    /// whether a later timestamp may pass.
    fn rules(
        &self,
        reads: &[Oref],
        writes: &[Oref],
        exempt: &[Oref],
        ts: Timestamp,
    ) -> Result<(), (Refusal, bool)> {
        for o in reads.iter().chain(writes).filter(|o| !exempt.contains(o)) {
            for (u, set) in &self.big {
                if set.contains(*o) {
                    // Rule 1, or 2b against a transaction still committing (which the
                    // threshold, raised to `u`, normally refuses first).
                    let r = if *u < ts { Refusal::Rule1(*o) } else { Refusal::Rule2b(*o) };
                    return Err((r, false));
                }
            }
            let Some(info) = self.objs.get(o) else { continue };
            if info.uncommitted.iter().any(|&u| u < ts)
                && !self.mutated(crate::mutants::Mutant::Rule1Off)
            {
                return Err((Refusal::Rule1(*o), false));
            }
            if info.uncommitted.iter().any(|&u| u > ts) {
                // 2b against a transaction still committing: abort (external consistency).
                return Err((Refusal::Rule2b(*o), false));
            }
            if info.max_write > ts {
                return Err((Refusal::Rule2b(*o), true));
            }
        }
        for o in writes {
            if let Some(info) = self.objs.get(o)
                && info.max_read > ts
            {
                return Err((Refusal::Rule2a(*o), true));
            }
        }
        Ok(())
    }

    /// The earliest transaction still committing that writes `o`, if any: the writer a rule-1
    /// refusal about `o` is waiting on.
    pub fn uncommitted_writer(&self, o: Oref) -> Option<Timestamp> {
        let indexed = self.objs.get(&o).and_then(|i| i.uncommitted.iter().min().copied());
        let big = self.big.iter().filter(|(_, s)| s.contains(o)).map(|(u, _)| *u).min();
        indexed.into_iter().chain(big).min()
    }

    /// Counts a refusal that was answered.
    pub fn count_refusal(&mut self, r: &Refusal) {
        let c = &mut self.counters;
        match r {
            Refusal::Stale(_) | Refusal::PageWritten(_) => c.refused_stale += 1,
            Refusal::TooOld { .. } => c.refused_threshold += 1,
            Refusal::Rule1(_) => c.refused_rule1 += 1,
            Refusal::Rule2a(_) => c.refused_rule2a += 1,
            Refusal::Rule2b(_) => c.refused_rule2b += 1,
        }
    }

    /// Enters a validated transaction into the queue: committed at once if it is read-only,
    /// committing otherwise (until [`Cc::committed`]; a transaction that only creates objects
    /// writes no existing object but is committing until its record is durable).
    pub fn insert(
        &mut self,
        ts: Timestamp,
        reads: &[Oref],
        writes: &[Oref],
        read_only: bool,
        now_us: u64,
    ) {
        let committed = read_only;
        if committed {
            self.counters.read_only_validated += 1;
        }
        let indexed = if committed {
            self.note_reads(ts, reads, writes)
        } else {
            self.note_committing(ts, reads, writes)
        };
        self.last_ts = self.last_ts.max(ts);
        let ros = if indexed { reads.to_vec() } else { Vec::new() };
        self.vq.insert(ts, Entry { ros, mos: writes.to_vec(), committed, indexed });
        self.truncate(now_us);
    }

    /// The transaction at `ts`, written by `committer` (`None`: the embedded API), is durable:
    /// its entry becomes committed and every other client that was sent the page of an object
    /// it wrote gets that object in its invalid set. Returns the sessions whose invalid sets
    /// passed their bound (to expire).
    pub fn committed(&mut self, ts: Timestamp, committer: Option<ConnId>) -> Vec<ConnId> {
        if let Some(conn) = committer {
            // It won: its claims end and the commits they held back go on.
            self.claims.won(conn);
        }
        let Some(entry) = self.vq.get_mut(&ts) else { return Vec::new() };
        entry.committed = true;
        let mos = std::mem::take(&mut entry.mos);
        let indexed = entry.indexed;
        if indexed {
            for o in &mos {
                if let Some(info) = self.objs.get_mut(o) {
                    info.uncommitted.retain(|u| *u != ts);
                    info.max_write = info.max_write.max(ts);
                }
            }
        } else {
            // Not indexed: the threshold, raised to `ts` at insert, stands for its writes.
            self.big.retain(|(u, _)| *u != ts);
            self.threshold = self.threshold.max(ts);
        }
        let mut expired = Vec::new();
        // Only other sessions that were sent pages can hold a copy to invalidate (the embedded
        // API's single session committing its own writes has none).
        let others = self
            .clients
            .iter()
            .any(|(conn, c)| Some(*conn) != committer && !c.directory.pages.is_empty());
        for o in mos.iter().filter(|_| others) {
            let Some(page) = o.page() else { continue };
            for (conn, c) in self.clients.iter_mut() {
                if Some(*conn) == committer || !c.directory.contains(page) {
                    continue;
                }
                let p = c.invalid.entry(*o).or_default();
                if !p.unsent {
                    p.unsent = true;
                    c.unsent.push(*o);
                }
                self.counters.invalidations_added += 1;
                if c.invalid.len() > self.cfg.invalid_max && !expired.contains(conn) {
                    expired.push(*conn);
                }
            }
        }
        self.vq.get_mut(&ts).expect("checked").mos = mos;
        self.directory_changes += u64::from(!expired.is_empty());
        for conn in &expired {
            self.clients.remove(conn);
            self.counters.sessions_expired += 1;
        }
        expired
    }

    /// A resumed session's cached objects that changed while it was away
    /// (`super::resume`): into its invalid set, to be sent with its next reply, as if a
    /// commit had just changed them. Returns whether the set passed its bound (the caller
    /// expires the session then).
    pub fn invalidate_resumed(&mut self, conn: ConnId, objects: &[Oref]) -> bool {
        self.directory_changes += 1;
        let c = self.clients.entry(conn).or_default();
        for o in objects {
            let p = c.invalid.entry(*o).or_default();
            if !p.unsent {
                p.unsent = true;
                c.unsent.push(*o);
            }
        }
        self.counters.invalidations_added += objects.len() as u64;
        c.invalid.len() > self.cfg.invalid_max
    }

    /// The committer of a commit whose map leaves were merged (`super::leaves`) holds its own
    /// versions of them, not the ones installed: they go into its invalid set, to be sent with
    /// its next reply (its `CommitOk`) as if another commit had changed them. Returns whether
    /// the set passed its bound (the caller expires the session then).
    pub fn invalidate_merged(&mut self, conn: ConnId, leaves: &[Oref]) -> bool {
        self.invalidate_resumed(conn, leaves)
    }

    /// Restores a committed transaction from the log during recovery.
    pub fn restore(&mut self, ts: Timestamp, reads: &[Oref], writes: &[Oref]) {
        if self.vq.is_empty() && self.threshold < ts {
            // Entries before the first restored one went with the truncated log.
            self.threshold = ts;
        }
        let indexed = self.note_reads(ts, reads, writes);
        if indexed {
            for o in writes {
                let info = self.objs.entry(*o).or_default();
                info.max_write = info.max_write.max(ts);
            }
        }
        self.last_ts = self.last_ts.max(ts);
        let ros = if indexed { reads.to_vec() } else { Vec::new() };
        self.vq.insert(ts, Entry { ros, mos: writes.to_vec(), committed: true, indexed });
    }

    /// After recovery: timestamps continue above `floor` (the latest known before the crash)
    /// and nothing at or below it that was not restored can validate.
    pub fn recovered(&mut self, floor: Timestamp) {
        self.last_ts = self.last_ts.max(floor);
        if self.vq.is_empty() {
            self.threshold = self.threshold.max(floor.successor());
        }
    }

    /// Drops the oldest committed entries beyond the queue's bounds, raising the threshold
    /// above each one dropped.
    fn truncate(&mut self, now_us: u64) {
        let horizon = now_us.saturating_sub(self.cfg.threshold_delta_us);
        while let Some((&ts, e)) = self.vq.first_key_value() {
            let over = self.vq.len() > self.cfg.vq_entries_max;
            if !e.committed || !(over || ts.time_us < horizon) {
                break;
            }
            let (ts, e) = self.vq.pop_first().expect("checked");
            self.threshold = self.threshold.max(ts.successor());
            let mos = if e.indexed { &e.mos[..] } else { &[] };
            for o in e.ros.iter().chain(mos) {
                let forget = self.objs.get(o).is_some_and(|i| {
                    i.uncommitted.is_empty()
                        && i.max_read < self.threshold
                        && i.max_write < self.threshold
                });
                if forget {
                    self.objs.remove(o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(page: u32, oid: u16) -> Oref {
        Oref::new(PageId::new(page).unwrap(), thor_core::Oid::new(oid).unwrap())
    }

    fn cc() -> Cc {
        Cc::new(CcConfig::default(), 1)
    }

    #[test]
    fn timestamps_increase_even_when_the_clock_stands_still() {
        let mut c = cc();
        let a = c.validate(None, &[], &[o(1, 0)], None, 100).unwrap();
        c.insert(a, &[], &[o(1, 0)], false, 100);
        let b = c.fresh_ts(100);
        assert!(b > a);
        let back = c.fresh_ts(50);
        assert!(back > a, "a clock going backwards does not reorder");
    }

    #[test]
    fn rule_1_refuses_reading_what_a_committing_transaction_wrote() {
        let mut c = cc();
        let s = c.validate(None, &[], &[o(1, 0)], None, 100).unwrap();
        c.insert(s, &[], &[o(1, 0)], false, 100);
        assert_eq!(c.validate(None, &[o(1, 0)], &[], None, 101), Err(Refusal::Rule1(o(1, 0))));
        c.committed(s, None);
        assert!(c.validate(None, &[o(1, 0)], &[], None, 101).is_ok());
    }

    #[test]
    fn rule_2a_retries_later_and_2b_uncommitted_refuses() {
        let mut c = cc();
        let s = c.validate(None, &[o(1, 0)], &[], None, 100).unwrap();
        c.insert(s, &[o(1, 0)], &[], true, 100);
        // T at an earlier timestamp writes what S read: 2a, retried after S.
        let early = Timestamp { time_us: 50, server: 1 };
        let t = c.validate(None, &[], &[o(1, 0)], Some(early), 101).unwrap();
        assert!(t > s);
        assert_eq!(c.counters().retried_passed, 1);
        c.insert(t, &[], &[o(1, 0)], false, 101);
        // An earlier transaction reading what the committing T writes: 2b, not retried.
        let early2 = Timestamp { time_us: 60, server: 1 };
        assert_eq!(
            c.validate(None, &[o(1, 0)], &[], Some(early2), 102),
            Err(Refusal::Rule2b(o(1, 0)))
        );
    }

    #[test]
    fn a_transaction_reading_more_than_the_bound_raises_the_threshold_instead_of_the_index() {
        let mut c = Cc::new(CcConfig { reads_tracked_max: 4, ..CcConfig::default() }, 1);
        let reads: Vec<Oref> = (0..10).map(|i| o(1, i)).collect();
        // A big reader that also writes one object: its reads leave no index entries, its
        // write still holds back readers until it commits.
        let big = c.validate(None, &reads, &[o(2, 0)], None, 100).unwrap();
        c.insert(big, &reads, &[o(2, 0)], false, 100);
        assert_eq!(c.threshold(), big);
        assert!(c.objs.is_empty(), "nothing of it is indexed per object");
        assert_eq!(c.big.len(), 1, "its write is kept as a set while it commits");
        assert_eq!(c.counters().reads_by_threshold, 1);
        // A writer of something it read, at an earlier timestamp: refused (rule 2a would have
        // retried it; the threshold refuses it), never accepted.
        let early = Timestamp { time_us: 50, server: 1 };
        let r = c.validate(None, &[], &[o(1, 3)], Some(early), 101);
        assert!(matches!(r, Err(Refusal::TooOld { .. })), "{r:?}");
        // A later reader of its write while it commits: rule 1, as before.
        assert_eq!(c.validate(None, &[o(2, 0)], &[], None, 102), Err(Refusal::Rule1(o(2, 0))));
        // Later writers of what it read pass: they follow it in the serial order.
        let after = c.validate(None, &[], &[o(1, 3)], None, 103).unwrap();
        assert!(after > big);
        // A small transaction is indexed one object at a time, as before.
        c.insert(after, &[], &[o(1, 3)], false, 103);
        assert_eq!(c.objs.len(), 1);
        assert_eq!(c.counters().reads_by_threshold, 1);
        // Once it commits, its write set goes; the threshold stands for its writes.
        c.committed(big, None);
        assert!(c.big.is_empty());
        assert!(c.validate(None, &[o(2, 0)], &[], None, 104).is_ok());
        let r = c.validate(None, &[o(2, 0)], &[], Some(early), 104);
        assert!(matches!(r, Err(Refusal::TooOld { .. })), "{r:?}");
    }

    #[test]
    fn a_big_writer_holds_back_readers_of_its_writes_until_it_commits_or_aborts() {
        let mut c = Cc::new(CcConfig { reads_tracked_max: 4, ..CcConfig::default() }, 1);
        c.page_sent(8, PageId::new(3).unwrap());
        let writes: Vec<Oref> = (0..10).map(|i| o(3, i * 7)).collect();
        let big = c.validate(None, &[], &writes, None, 100).unwrap();
        c.insert(big, &[], &writes, false, 100);
        assert!(c.objs.is_empty());
        assert_eq!(c.uncommitted_writer(o(3, 14)), Some(big));
        assert_eq!(c.uncommitted_writer(o(3, 15)), None);
        assert_eq!(c.validate(None, &[o(3, 14)], &[], None, 101), Err(Refusal::Rule1(o(3, 14))));
        assert_eq!(c.validate(None, &[], &[o(3, 63)], None, 101), Err(Refusal::Rule1(o(3, 63))));
        assert!(c.validate(None, &[o(3, 15)], &[o(3, 16)], None, 101).is_ok());
        // Committed: the other session that holds page 3 is told of every write.
        assert!(c.committed(big, None).is_empty());
        let mut told = c.take_invalidations(8, 100);
        told.sort();
        assert_eq!(told, writes);
        assert!(c.validate(None, &[o(3, 14)], &[], None, 102).is_ok());
        // An aborted big part (two-phase commit) releases its writes too.
        let part = c.validate(None, &[], &writes, None, 103).unwrap();
        c.insert(part, &[], &writes, false, 103);
        assert!(c.validate(None, &[o(3, 0)], &[], None, 104).is_err());
        c.aborted(part);
        assert!(c.big.is_empty());
        assert!(c.validate(None, &[o(3, 0)], &[], None, 104).is_ok());
    }

    #[test]
    fn the_threshold_rises_as_the_queue_is_bounded() {
        let mut c = Cc::new(CcConfig { vq_entries_max: 4, ..CcConfig::default() }, 1);
        let mut first = None;
        for i in 0..10u16 {
            let ts = c.validate(None, &[o(1, i)], &[], None, 100 + u64::from(i)).unwrap();
            first.get_or_insert(ts);
            c.insert(ts, &[o(1, i)], &[], true, 100 + u64::from(i));
        }
        assert_eq!(c.vq_len(), 4);
        assert!(c.threshold() > first.unwrap());
        let r = c.validate(None, &[], &[o(2, 0)], first, 200);
        assert!(matches!(r, Err(Refusal::TooOld { .. })), "{r:?}");
        assert!(c.objs.len() <= 4, "the index shrinks with the queue");
    }

    #[test]
    fn invalidations_reach_other_clients_that_hold_the_page_until_acked() {
        let mut c = cc();
        c.page_sent(7, PageId::new(1).unwrap());
        c.page_sent(8, PageId::new(1).unwrap());
        c.page_sent(9, PageId::new(2).unwrap());
        let ts = c.validate(Some(7), &[o(1, 3)], &[o(1, 3)], None, 100).unwrap();
        c.insert(ts, &[o(1, 3)], &[o(1, 3)], false, 100);
        assert!(c.committed(ts, Some(7)).is_empty());
        assert!(!c.has_unsent(7), "the committer has the new version");
        assert!(!c.has_unsent(9), "client 9 never had page 1");
        assert_eq!(c.validate(Some(8), &[o(1, 3)], &[], None, 101), Err(Refusal::Stale(o(1, 3))));
        assert_eq!(c.take_invalidations(8, 100), vec![o(1, 3)]);
        assert!(c.take_invalidations(8, 100).is_empty(), "sent once");
        c.piggyback(8, &[o(1, 3)], &[]);
        assert!(c.validate(Some(8), &[o(1, 3)], &[], None, 102).is_ok());
    }

    #[test]
    fn an_early_ack_does_not_clear_a_later_invalidation() {
        let mut c = cc();
        c.page_sent(8, PageId::new(1).unwrap());
        for t in 0..2 {
            let ts = c.validate(None, &[], &[o(1, 3)], None, 100 + t).unwrap();
            c.insert(ts, &[], &[o(1, 3)], false, 100 + t);
            c.committed(ts, None);
            assert_eq!(c.take_invalidations(8, 100), vec![o(1, 3)]);
        }
        c.piggyback(8, &[o(1, 3)], &[]);
        assert!(c.validate(Some(8), &[o(1, 3)], &[], None, 200).is_err(), "one sending unacked");
        c.piggyback(8, &[o(1, 3)], &[]);
        assert!(c.validate(Some(8), &[o(1, 3)], &[], None, 201).is_ok());
    }

    #[test]
    fn directories_coarsen_and_still_cover_every_page_sent() {
        let mut c = Cc::new(CcConfig { directory_pages_max: 16, ..CcConfig::default() }, 1);
        for p in 1..=200 {
            c.page_sent(8, PageId::new(p * 5).unwrap());
        }
        assert!(c.counters().directories_coarsened > 0);
        assert!(c.directory_entries() <= 16);
        let d = &c.clients[&8].directory;
        for p in 1..=200 {
            assert!(d.contains(PageId::new(p * 5).unwrap()));
        }
    }

    #[test]
    fn discarded_pages_leave_the_directory() {
        let mut c = cc();
        c.page_sent(8, PageId::new(1).unwrap());
        c.piggyback(8, &[], &[PageId::new(1).unwrap()]);
        let ts = c.validate(None, &[], &[o(1, 3)], None, 100).unwrap();
        c.insert(ts, &[], &[o(1, 3)], false, 100);
        c.committed(ts, None);
        assert!(!c.has_unsent(8));
    }

    #[test]
    fn too_many_unacknowledged_invalidations_expire_the_session() {
        let mut c = Cc::new(CcConfig { invalid_max: 3, ..CcConfig::default() }, 1);
        c.page_sent(8, PageId::new(1).unwrap());
        let writes: Vec<Oref> = (0..5).map(|i| o(1, i)).collect();
        let ts = c.validate(None, &[], &writes, None, 100).unwrap();
        c.insert(ts, &[], &writes, false, 100);
        assert_eq!(c.committed(ts, None), vec![8]);
        assert_eq!(c.counters().sessions_expired, 1);
    }
}
