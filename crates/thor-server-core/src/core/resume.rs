//! Resuming a client's session on a new connection: which of its cached copies are still
//! current, and what became of the commit whose answer it lost (wire version 5,
//! `thor_wire::resume`).
//!
//! A session's concurrency-control state (its directory of pages sent and its invalid set,
//! [`super::cc`]) belongs to its connection and goes with it. A client whose connection broke
//! (a server restart, a client timeout, a network fault) still holds a cache of copies that
//! were current at some point; to keep them it must learn which changed since, and the server
//! must from then on invalidate them like copies it sent.
//!
//! # The history
//!
//! The server keeps a bounded **history** of the changes it made visible: for each, the LSN of
//! the log record whose durability published it (a commit's record; for a part of a two-phase
//! commit, its decision record), a *mark* and the objects it wrote (and, for a commit with a
//! client's id, that id and the orefs of its created objects).
//!
//! ```text
//!   base ── change(lsn 17, mark, writes) ── change(lsn 19, ...) ── ... ── change(lsn 93) = last
//!    │                                                                          │
//!    every change after base is in the history                 stamp on every reply now
//! ```
//!
//! Changes are kept in LSN order. That is publication order too, up to one step: a record
//! is published in the step that reports it durable, every record up to the durable point in
//! the same step, so at the end of every step no change with an LSN below the last is still
//! unpublished. Every reply of a version-5 connection carries the last change at the end of
//! its step as its *seen stamp*, and says whether every invalidation of this client up to it
//! has been sent (on this reply or before).
//!
//! # What the client proves, and why it is sound
//!
//! A client keeps two stamps: the newest it received (`high`) and the newest that came with
//! every invalidation (`complete`). Its cached copies then reflect no change after `high`
//! (every page it was sent was composed before the reply that brought it was stamped), and
//! every change up to `complete` to a page it holds has been applied to its cache (the
//! invalidation reached it, or it fetched the page afterwards). So its cache is the
//! database as of `complete`, except for objects changed after `complete`, which it may hold
//! in either version.
//!
//! On `Resume` it names both stamps and the pages it holds anything of. The server keeps the
//! cache (`Kept`) only if **both stamps are points of its own history**: equal to the base or
//! to a change it holds, LSN and mark alike. Then every change after `complete` is in the
//! history; the server puts each one's objects on the client's pages into the client's new
//! invalid set (they ride on the `Resumed` reply and later ones, acknowledged as usual) and
//! the pages into its new directory, so that every later change to them is invalidated as if
//! the server had sent them. What the client keeps is then exactly what CLOCC assumes of any
//! client: a copy is current unless it is in the invalid set.
//!
//! Why the marks matter: an LSN alone does not name a state. A database restored from a
//! backup taken at LSN 800 continues at 801 with other commits than the ones a client saw
//! from the original; a compacted or replaced database has other records everywhere. The
//! mark of a change is a 64-bit digest of its record's timestamp (the server's wall clock in
//! microseconds, or a client's stamp for a two-phase part, with its random tie) and of its
//! bytes' CRC-32C; two histories that agree on a change's LSN but differ in it differ in the
//! mark except with probability about 2^-64 (their timestamps differ already: they were
//! taken at different moments of different runs). Checking `high` as well as `complete`
//! matters when they differ: a client may hold copies up to `high` from a history that a
//! restore cut after `complete`; if `high` is not in the server's history, it cannot tell.
//!
//! Where the history does not reach, the server says it cannot tell (`Dropped`) and the
//! client drops every cached copy:
//!
//! - **A restart.** The history is rebuilt from the log records that recovery replays
//!   (from the superblock's checkpoint on), with the same LSNs and marks, so a client whose
//!   stamps are among them keeps its cache across a crash. The base of a new incarnation is
//!   a fresh mark (from the first input's time, the server id, the checkpoint and the next
//!   LSN), since the changes just before the replayed ones are not known: a client that saw
//!   no change of the replayed part cannot keep its cache. A clean shutdown checkpoints and
//!   truncates the whole log, so after it no client keeps its cache.
//! - **The bound.** The history holds at most [`crate::limits::HISTORY_CHANGES_MAX`] changes
//!   and [`crate::limits::HISTORY_OREFS_MAX`] orefs; the oldest change leaves first and its
//!   point becomes the base.
//! - **Too much changed**: more than half the invalid-set bound on the client's pages.
//!
//! # The lost commit
//!
//! A commit may carry an id its client chose (`CommitWithId`); the id goes into its log record
//! and into its history entry. A client whose connection broke while a commit was in flight
//! asks with `Resume` what became of it. The server must answer so that the answer stays true:
//!
//! 1. **Fence.** The client names its session with a random key on every connection. If an
//!    older connection of the same session is still open here (the server did not notice the
//!    break: it was stopped, or the network dropped the client's packets), the server closes
//!    it at once and drops its commits not yet validated, exactly as a disconnect does; a
//!    request of it that arrives later is refused by its closed session. From now on no commit
//!    of the old connection can be prepared.
//! 2. **Wait.** Commits already prepared complete, so the answer waits until the log is
//!    durable up to the last record prepared before the fence (or fails: then `Unknown`).
//! 3. **Look.** The commit, if it happened, is a change after the client's `high` stamp (it
//!    was sent after the reply that brought `high`). If `high` is a point of the history and
//!    no change after it has the id, it did not commit and never will (`NotCommitted`); if a
//!    change anywhere in the history has the id, it committed (`Committed`, with its LSN and
//!    created orefs); otherwise the server cannot tell (`Unknown`). After a restart the old
//!    connection is gone with the old process, and a commit is in the log (replayed, with its
//!    id) or lost with the unsynced tail.
//!
//! A storage failure makes every outcome `Unknown`: commits prepared then may or may not be
//! durable, which only recovery can tell.
//!
//! # Bounds
//!
//! The history's bounds above; the keys of open connections (one per connection that
//! resumed, removed when it closes); the resumes waiting for the log (one per connection at
//! most: its later requests wait behind it). The cost of a resume is one pass over the
//! changes after the client's stamp and a hash lookup per written object: at most
//! [`crate::limits::HISTORY_OREFS_MAX`] lookups.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};
use thor_core::{Lsn, Oref, PageId};
use thor_wire::version::VERSION_SETTLED;
use thor_wire::{HistoryPoint, Outcome, SeenRange};

use thor_wire::{CacheVerdict, Reply, ReplyBody, Resume, Resumed, Seen};

use super::{ConnId, Core, Effect};
use crate::limits::{HISTORY_CHANGES_MAX, HISTORY_OREFS_MAX};

/// The mark of a change: a digest of its record's timestamp (`time_us`, `tie`: the server id
/// or a client's random tie) and of its bytes' CRC-32C (SplitMix64's finaliser over each word
/// in turn, so every bit of each moves every bit of the result).
pub(crate) fn mark(time_us: u64, tie: u32, crc: u32) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c908u64;
    for w in [time_us, u64::from(tie) << 32 | u64::from(crc)] {
        h = mix(h ^ w);
    }
    h
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One change in the history.
#[derive(Debug, Clone)]
struct Change {
    /// Its point (LSN and mark).
    point: HistoryPoint,
    /// The existing objects it wrote (created objects change no client's copy).
    writes: Vec<Oref>,
    /// The id its client gave the commit, and the orefs of its created objects.
    commit: Option<(u64, Vec<Oref>)>,
}

impl Change {
    /// Orefs it holds, for the history's bound.
    fn orefs(&self) -> usize {
        self.writes.len() + self.commit.as_ref().map_or(0, |(_, c)| c.len())
    }
}

/// The bounded history of changes (see the module documentation).
#[derive(Debug)]
pub(crate) struct History {
    /// Every change after this point is in `changes`.
    base: HistoryPoint,
    /// Whether `base` was chosen (at the first step of this incarnation).
    base_set: bool,
    /// The changes, in LSN order.
    changes: VecDeque<Change>,
    /// Orefs the changes hold.
    orefs: usize,
    /// Most changes kept.
    changes_max: usize,
    /// Most orefs kept.
    orefs_max: usize,
}

impl History {
    pub(crate) fn new(changes_max: usize, orefs_max: usize) -> History {
        History {
            base: HistoryPoint::default(),
            base_set: false,
            changes: VecDeque::new(),
            orefs: 0,
            changes_max: changes_max.max(1),
            orefs_max,
        }
    }

    /// Chooses this incarnation's base once (see the module documentation): a mark no other
    /// incarnation gives its base.
    pub(crate) fn set_base(&mut self, now_us: u64, server: u32, checkpoint: Lsn, next: Lsn) {
        if self.base_set {
            return;
        }
        self.base_set = true;
        let m = mark(now_us, server, (checkpoint.0 ^ next.0.rotate_left(17)) as u32);
        self.base = HistoryPoint { lsn: Lsn(0), mark: mix(m ^ next.0) };
    }

    /// The newest change, or the base if there is none.
    pub(crate) fn last(&self) -> HistoryPoint {
        self.changes.back().map_or(self.base, |c| c.point)
    }

    /// Records a change published now (or replayed). Keeps LSN order (changes of one step
    /// may come out of order: see the module documentation) and the bounds.
    pub(crate) fn add(
        &mut self,
        lsn: Lsn,
        mark: u64,
        writes: Vec<Oref>,
        commit: Option<(u64, Vec<Oref>)>,
    ) {
        let change = Change { point: HistoryPoint { lsn, mark }, writes, commit };
        self.orefs += change.orefs();
        if lsn <= self.base.lsn && self.base.lsn > Lsn(0) {
            // Older than what the history stands for: it cannot be placed (a replayed
            // decision whose prepare is gone, see `forget_through`).
            return;
        }
        let at = self.changes.partition_point(|c| c.point.lsn < lsn);
        debug_assert!(
            self.changes.get(at).is_none_or(|c| c.point.lsn != lsn),
            "two changes at one LSN"
        );
        self.changes.insert(at, change);
        while self.changes.len() > self.changes_max
            || (self.orefs > self.orefs_max && !self.changes.is_empty())
        {
            let old = self.changes.pop_front().expect("not empty");
            self.orefs -= old.orefs();
            self.base = old.point;
        }
        debug_assert!(self.changes.len() <= self.changes_max);
    }

    /// A change at `lsn` whose objects are not known (recovery replayed a two-phase decision
    /// whose prepare record is below the checkpoint): nothing at or before it can be a
    /// client's point any more, since a client that saw only what came before would miss it.
    pub(crate) fn forget_through(&mut self, lsn: Lsn) {
        while self.changes.front().is_some_and(|c| c.point.lsn <= lsn) {
            let old = self.changes.pop_front().expect("checked");
            self.orefs -= old.orefs();
        }
        // A mark no change has: no client holds this point.
        self.base = HistoryPoint { lsn, mark: mix(self.base.mark ^ lsn.0 ^ 0x5f5f) };
    }

    /// Where the changes after `p` start in `changes`, if `p` is a point of this history (the
    /// base or a change, LSN and mark alike); `None` if the history cannot tell what came
    /// after it.
    fn after(&self, p: HistoryPoint) -> Option<usize> {
        if p == self.base {
            return Some(0);
        }
        let at = self.changes.partition_point(|c| c.point.lsn < p.lsn);
        match self.changes.get(at) {
            Some(c) if c.point == p => Some(at + 1),
            _ => None,
        }
    }

    /// The objects on `pages` written by changes after `seen.complete`, if both stamps are
    /// points of this history and `complete` is not after `high`; `None` if it cannot tell.
    /// Stops (`None`) past `max` objects.
    pub(crate) fn changed_since(
        &self,
        seen: &SeenRange,
        pages: &FxHashSet<u32>,
        max: usize,
    ) -> Option<Vec<Oref>> {
        let high = self.after(seen.high)?;
        let complete = self.after(seen.complete)?;
        if complete > high {
            return None;
        }
        let mut out = Vec::new();
        let mut seen_orefs = FxHashSet::default();
        for c in self.changes.range(complete..) {
            for o in &c.writes {
                let on_page = o.page().is_some_and(|p| pages.contains(&p.get()));
                if on_page && seen_orefs.insert(*o) {
                    out.push(*o);
                    if out.len() > max {
                        return None;
                    }
                }
            }
        }
        Some(out)
    }

    /// What became of the commit `id`, sent after the client received `high` (`None`: the
    /// client has no stamp).
    pub(crate) fn outcome(&self, id: u64, high: Option<HistoryPoint>) -> Outcome {
        let found = self.changes.iter().find_map(|c| match &c.commit {
            Some((i, created)) if *i == id => Some((c.point.lsn, created.clone())),
            _ => None,
        });
        match found {
            Some((lsn, created)) => Outcome::Committed { lsn, created },
            None if high.and_then(|h| self.after(h)).is_some() => Outcome::NotCommitted,
            None => Outcome::Unknown,
        }
    }

    /// Changes held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.changes.len()
    }
}

/// A `Resume` whose answer waits for the log.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// Who asked.
    pub conn: ConnId,
    /// Its request id.
    pub id: u64,
    /// Answer once the log is durable up to here.
    pub until: Lsn,
    /// The commit asked about.
    pub commit: u64,
    /// The client's newest stamp.
    pub high: Option<HistoryPoint>,
    /// The cache verdict, decided when the request came.
    pub cache: thor_wire::CacheVerdict,
}

/// Counters of resumes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeCounters {
    /// `Resume` requests.
    pub resumes: u64,
    /// Of those, caches kept.
    pub caches_kept: u64,
    /// Caches dropped (the server could not tell).
    pub caches_dropped: u64,
    /// Invalidations a resume put into invalid sets.
    pub invalidations: u64,
    /// Older connections closed because their session resumed elsewhere.
    pub fenced: u64,
    /// Outcomes asked, and answered committed, not committed, unknown.
    pub outcomes: [u64; 3],
}

/// The resume state of a core.
#[derive(Debug)]
pub(crate) struct Resumes {
    /// The history of changes.
    pub history: History,
    /// Connections whose replies carry the seen section (they agreed on version 5), with the
    /// version agreed (from 7 the section may say settled).
    pub stamped: FxHashMap<ConnId, u16>,
    /// The connection of each session key, and back.
    keys: FxHashMap<u64, ConnId>,
    key_of: FxHashMap<ConnId, u64>,
    /// Resumes waiting for the log.
    pub waiting: Vec<Waiting>,
    /// Counters.
    pub counters: ResumeCounters,
}

impl Resumes {
    pub(crate) fn new() -> Resumes {
        Resumes {
            history: History::new(HISTORY_CHANGES_MAX, HISTORY_OREFS_MAX),
            stamped: FxHashMap::default(),
            keys: FxHashMap::default(),
            key_of: FxHashMap::default(),
            waiting: Vec::new(),
            counters: ResumeCounters::default(),
        }
    }

    /// Registers `key` as `conn`'s session; returns the older connection of the same session
    /// if it is still open.
    pub(crate) fn register(&mut self, key: u64, conn: ConnId) -> Option<ConnId> {
        if let Some(k) = self.key_of.insert(conn, key)
            && k != key
            && self.keys.get(&k) == Some(&conn)
        {
            self.keys.remove(&k);
        }
        self.keys.insert(key, conn).filter(|&old| old != conn)
    }

    /// A connection closed.
    pub(crate) fn disconnect(&mut self, conn: ConnId) {
        self.stamped.remove(&conn);
        if let Some(k) = self.key_of.remove(&conn)
            && self.keys.get(&k) == Some(&conn)
        {
            self.keys.remove(&k);
        }
        self.waiting.retain(|w| w.conn != conn);
    }

    /// Pages as a set, for [`History::changed_since`].
    pub(crate) fn page_set(pages: &[PageId]) -> FxHashSet<u32> {
        pages.iter().map(|p| p.get()).collect()
    }
}

impl Core {
    /// A change became visible (published or replayed) with the log record at `lsn`: the
    /// history notes it. `time_us` and `tie` are its timestamp, `crc` its record's CRC-32C.
    pub(super) fn note_change(
        &mut self,
        lsn: Lsn,
        (time_us, tie, crc): (u64, u32, u32),
        writes: Vec<Oref>,
        commit: Option<(u64, Vec<Oref>)>,
    ) {
        self.resume.history.add(lsn, mark(time_us, tie, crc), writes, commit);
    }

    /// Stamps the replies of version-5 connections with the newest change and whether every
    /// invalidation up to it has been sent (called when the step's invalidations are on its
    /// replies), and from version 7 whether the state is settled
    /// (`Core::read_only_settled`). A `HelloOk` of version 5 or later starts the stamping of
    /// its connection.
    pub(super) fn stamp_replies(&mut self, fx: &mut [Effect]) {
        let last = self.resume.history.last();
        let settled = self.read_only_settled();
        let mut said_settled = false;
        for e in fx {
            let Effect::Reply { conn, reply, .. } = e else { continue };
            if let ReplyBody::HelloOk(info) = &reply.body
                && info.version >= 5
            {
                self.resume.stamped.insert(*conn, info.version);
            }
            if let Some(&version) = self.resume.stamped.get(conn) {
                let complete = !self.cc.has_unsent(*conn);
                let settled = settled && version >= VERSION_SETTLED;
                said_settled |= settled;
                reply.seen = Some(Seen { stamp: last, complete, settled });
            }
        }
        if said_settled {
            // Every timestamp given out so far is at or above every visible change's.
            let floor = &mut self.twopc.settled_floor;
            *floor = (*floor).max(self.cc.last_ts());
        }
    }

    /// Handles `Resume` (see the module documentation): registers the session's key and
    /// closes an older connection of it, decides about the cache, and answers now or once
    /// the log is durable up to what was prepared before.
    pub(super) fn resume_request(
        &mut self,
        conn: ConnId,
        id: u64,
        r: Resume,
        fx: &mut Vec<Effect>,
    ) {
        self.resume.counters.resumes += 1;
        if let Some(old) = self.resume.register(r.key, conn) {
            self.fence(old, fx);
        }
        let cache = match &r.seen {
            None => CacheVerdict::None,
            Some(seen) => self.resume_cache(conn, seen, &r.pages, fx),
        };
        let high = r.seen.map(|s| s.high);
        let Some(commit) = r.commit else {
            let body = ReplyBody::Resumed(Resumed { cache, outcome: None });
            fx.push(Effect::Reply { conn, id, reply: Reply::new(body), close: false });
            return;
        };
        let until = Lsn(self.store.next_lsn().0.saturating_sub(1));
        if self.failed.is_none() && self.store.durable_lsn() < until {
            self.sessions.set_busy(conn);
            let w = Waiting { conn, id, until, commit, high, cache };
            self.resume.waiting.push(w);
            return;
        }
        let outcome = self.outcome_of(commit, high);
        let body = ReplyBody::Resumed(Resumed { cache, outcome: Some(outcome) });
        fx.push(Effect::Reply { conn, id, reply: Reply::new(body), close: false });
    }

    /// What became of commit `id` (the log is durable up to everything prepared before the
    /// client asked).
    fn outcome_of(&mut self, id: u64, high: Option<HistoryPoint>) -> Outcome {
        let outcome = if self.failed.is_some() {
            // Commits prepared when storage failed may or may not be durable.
            Outcome::Unknown
        } else {
            self.resume.history.outcome(id, high)
        };
        let k = match outcome {
            Outcome::Committed { .. } => 0,
            Outcome::NotCommitted => 1,
            Outcome::Unknown => 2,
        };
        self.resume.counters.outcomes[k] += 1;
        outcome
    }

    /// Answers the resumes that waited for the log to be durable up to `durable` (or all of
    /// them, after a storage failure).
    pub(super) fn resumes_durable(&mut self, durable: Lsn, fx: &mut Vec<Effect>) {
        if self.resume.waiting.is_empty() {
            return;
        }
        let failed = self.failed.is_some();
        let waiting = std::mem::take(&mut self.resume.waiting);
        for w in waiting {
            if !failed && w.until > durable {
                self.resume.waiting.push(w);
                continue;
            }
            let outcome = self.outcome_of(w.commit, w.high);
            let body = ReplyBody::Resumed(Resumed { cache: w.cache, outcome: Some(outcome) });
            self.reply(w.conn, w.id, Reply::new(body), false, fx);
        }
    }

    /// Decides about a resuming client's cache: kept (its pages into the new directory, the
    /// objects changed on them since its complete stamp into the new invalid set) if the
    /// history can tell, dropped otherwise.
    fn resume_cache(
        &mut self,
        conn: ConnId,
        seen: &SeenRange,
        pages: &[PageId],
        fx: &mut Vec<Effect>,
    ) -> CacheVerdict {
        let set = Resumes::page_set(pages);
        let max = self.cfg.cc.invalid_max / 2;
        let Some(changed) = self.resume.history.changed_since(seen, &set, max) else {
            self.resume.counters.caches_dropped += 1;
            return CacheVerdict::Dropped;
        };
        for p in pages {
            self.cc.page_sent(conn, *p);
        }
        self.resume.counters.invalidations += changed.len() as u64;
        if self.cc.invalidate_resumed(conn, &changed) {
            // Within the bound by the check above; a bug otherwise, and the client then
            // starts over like any expired session.
            debug_assert!(false, "a resume passed the invalid-set bound");
            self.sessions.expire(conn, fx);
        }
        self.resume.counters.caches_kept += 1;
        CacheVerdict::Kept
    }

    /// Closes `old`, an older connection of a session that resumed on another: its commits
    /// not yet validated go as on a disconnect, and it is told why and closed. Its prepared
    /// commits complete; nothing else of it can commit from now on.
    fn fence(&mut self, old: ConnId, fx: &mut Vec<Effect>) {
        self.resume.counters.fenced += 1;
        self.drop_unvalidated(old, fx);
        self.sessions.supersede(old, fx);
        self.cc.disconnect(old);
        self.demotions.disconnect(old);
        self.path.disconnect(old);
        self.resume.disconnect(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thor_core::Oid;

    fn o(page: u32, oid: u16) -> Oref {
        Oref::new(PageId::new(page).unwrap(), Oid::new(oid).unwrap())
    }

    fn pt(h: &History, lsn: u64) -> HistoryPoint {
        h.changes.iter().find(|c| c.point.lsn == Lsn(lsn)).unwrap().point
    }

    fn pages(p: &[u32]) -> FxHashSet<u32> {
        p.iter().copied().collect()
    }

    #[test]
    fn changes_after_a_known_point_on_the_clients_pages() {
        let mut h = History::new(100, 1000);
        h.set_base(5, 1, Lsn(1), Lsn(1));
        let base = h.last();
        h.add(Lsn(3), 33, vec![o(1, 0), o(2, 0)], None);
        h.add(Lsn(5), 55, vec![o(1, 1)], Some((9, vec![o(3, 0)])));
        h.add(Lsn(4), 44, vec![o(2, 1)], None);
        assert_eq!(h.last().lsn, Lsn(5), "kept in LSN order");
        let all = SeenRange { high: h.last(), complete: base };
        assert_eq!(h.changed_since(&all, &pages(&[1]), 10), Some(vec![o(1, 0), o(1, 1)]));
        let mid = SeenRange { high: pt(&h, 5), complete: pt(&h, 3) };
        assert_eq!(h.changed_since(&mid, &pages(&[1, 2]), 10), Some(vec![o(2, 1), o(1, 1)]));
        // Past the bound: cannot tell.
        assert_eq!(h.changed_since(&all, &pages(&[1, 2]), 2), None);
        // A point with another mark, one with an LSN not in the history, and a complete stamp
        // after the high one: cannot tell.
        let other = HistoryPoint { lsn: Lsn(4), mark: 45 };
        let gone = HistoryPoint { lsn: Lsn(6), mark: 66 };
        for seen in [
            SeenRange { high: other, complete: base },
            SeenRange { high: gone, complete: base },
            SeenRange { high: pt(&h, 3), complete: pt(&h, 4) },
        ] {
            assert_eq!(h.changed_since(&seen, &pages(&[1, 2]), 10), None, "{seen:?}");
        }
    }

    #[test]
    fn the_oldest_changes_leave_and_their_point_becomes_the_base() {
        let mut h = History::new(3, 1000);
        h.set_base(5, 1, Lsn(1), Lsn(1));
        let base = h.last();
        for l in 1..=5 {
            h.add(Lsn(l), l * 11, vec![o(1, l as u16)], None);
        }
        assert_eq!(h.len(), 3);
        let seen = |c| SeenRange { high: h.last(), complete: c };
        assert_eq!(h.changed_since(&seen(base), &pages(&[1]), 10), None, "the old base is gone");
        let two = HistoryPoint { lsn: Lsn(2), mark: 22 };
        assert_eq!(h.changed_since(&seen(two), &pages(&[1]), 10).unwrap().len(), 3);
        // The oref bound too: one change bigger than the bound leaves only itself's point.
        let mut h = History::new(100, 4);
        h.add(Lsn(1), 1, vec![o(1, 0); 2], None);
        h.add(Lsn(2), 2, vec![o(1, 1); 5], None);
        assert_eq!(h.len(), 0);
        assert_eq!(h.last(), HistoryPoint { lsn: Lsn(2), mark: 2 });
    }

    #[test]
    fn outcomes_need_the_id_or_a_known_point_to_say_no() {
        let mut h = History::new(100, 1000);
        h.set_base(5, 1, Lsn(1), Lsn(1));
        let base = h.last();
        h.add(Lsn(3), 33, vec![o(1, 0)], Some((7, vec![o(4, 0)])));
        assert_eq!(h.outcome(7, None), Outcome::Committed { lsn: Lsn(3), created: vec![o(4, 0)] });
        assert_eq!(h.outcome(8, Some(base)), Outcome::NotCommitted);
        assert_eq!(h.outcome(8, Some(HistoryPoint { lsn: Lsn(2), mark: 1 })), Outcome::Unknown);
        assert_eq!(h.outcome(8, None), Outcome::Unknown);
    }

    #[test]
    fn bases_of_two_incarnations_differ_and_marks_see_every_field() {
        let mut a = History::new(10, 10);
        let mut b = History::new(10, 10);
        a.set_base(1_000_000, 1, Lsn(7), Lsn(9));
        b.set_base(1_000_001, 1, Lsn(7), Lsn(9));
        assert_ne!(a.last(), b.last());
        let m = mark(5, 6, 7);
        assert_ne!(m, mark(5, 6, 8));
        assert_ne!(m, mark(5, 7, 7));
        assert_ne!(m, mark(6, 6, 7));
    }

    #[test]
    fn a_session_key_names_one_connection() {
        let mut r = Resumes::new();
        assert_eq!(r.register(42, 1), None);
        assert_eq!(r.register(42, 1), None, "the same connection again");
        assert_eq!(r.register(42, 2), Some(1), "a newer connection of the session");
        r.disconnect(1);
        assert_eq!(r.register(42, 3), Some(2), "closing the old one does not forget the new");
        r.disconnect(3);
        assert_eq!(r.register(42, 4), None);
    }
}
