//! Fair retries: a session that keeps losing on the same object eventually wins.
//!
//! # Why CLOCC alone starves a client
//!
//! Validation is first come, first served. Two clients incrementing one counter are not equal
//! after the first conflict: the winner holds the current version in its cache and commits
//! again one round trip later, while the loser must learn of the change (a refusal, or an
//! invalidation that dooms its transaction at the client), fetch the new version and commit,
//! two round trips in which the winner commits again. Backoff makes it worse, since each loss
//! makes the loser wait longer while the winner does not wait at all. Measured over TCP (issue
//! 32): 10,803 commits against 1 in 5 s, three runs out of three.
//!
//! # Claims
//!
//! The server remembers repeated losers. A session *loses* when validation refuses its writing
//! transaction, or when its client aborts a transaction because an invalidation named an
//! object it used (the client reports that on its next request: `thor_wire::contention`).
//! Its losses count up until it commits. At its [`FairConfig::losses_min`]-th loss in a row on
//! an object that no other session holds a live claim on, it gets a *claim* on the object,
//! for [`FairConfig::hold_us`]:
//!
//! ```text
//!   A commits o ─► B refused (Stale o) ─► B refused again: B claims o for hold_us
//!   A's next commit writes o: held back (parked at the server, not refused)
//!   B fetches o, commits ──────────► B's commit is durable: the claim ends
//!   A's held commit is validated now ─► refused Stale o (A read the old o): A loses, and so on
//! ```
//!
//! While a claim is live, a commit of another session that writes the claimed object is held
//! back at the head of the commit queue: taken out of the queue and kept until the claim ends
//! (the holder's writing commit is durable, the holder commits anything, its session ends) or
//! expires, then put back at the front of the queue and validated. Held commits are not
//! refused: a refusal would grow the rival's backoff the way losing grew the loser's, and the
//! two would trade places instead of taking turns.
//!
//! Only the object lost on is claimed (a session holds at most
//! [`crate::limits::FAIR_CLAIMS_PER_SESSION_MAX`] claims; a further one replaces its oldest),
//! and only commits that *write* it are held back: a reader of it does not stand in the
//! holder's way (the holder's commit gets a later timestamp than the reader's, rule 2a does
//! not apply). Read-only commits, two-phase parts and commits that carry their own timestamp
//! are never held: they are answered or prepared where they are (a part held back would hold
//! its coordinator's vote; that is left to two-phase commit's own timeouts).
//!
//! # Why this stays serializable
//!
//! Holding a commit back only delays its validation. When it is released it is validated by
//! the unchanged rules, with a fresh timestamp and against the invalid set of that moment,
//! exactly as a commit whose message arrived that late would be. CLOCC admits only
//! serializable histories whatever order and timing commits arrive in, so no delay can make it
//! admit another. Nothing else changes: no commit is accepted that validation refused, and the
//! holder gets no exemption from any rule, only the absence of rivals.
//!
//! # Bounds
//!
//! - A held commit waits at most [`FairConfig::hold_us`] from when it was first held, however
//!   claims come and go meanwhile; then it is validated regardless (counted in
//!   `fair_held_timed_out`). [`crate::Core::next_deadline_us`] wakes the driver for it.
//! - A claim lives at most [`FairConfig::hold_us`] and is never extended: a holder that does
//!   not commit in time (its application gave up) delays its rivals that long once.
//! - Claims: at most [`crate::limits::FAIR_CLAIMS_PER_SESSION_MAX`] per session; a session's
//!   claims and loss count go with it. Held commits: at most one per session (a session has
//!   one commit in flight) and [`crate::limits::FAIR_HELD_MAX`] in all.
//!
//! A client that reports invalidation aborts it did not have can earn claims sooner; it gains
//! turns bounded as above, never a commit validation would refuse.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use thor_core::Oref;

use super::{ConnId, Core, Queued};
use crate::limits::{FAIR_CLAIMS_PER_SESSION_MAX, FAIR_HELD_MAX};

/// The settings of fair retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairConfig {
    /// How long a claim lives, and the longest a held commit waits in all (0 turns fair
    /// retries off: no claims, nothing held back).
    pub hold_us: u64,
    /// Losses in a row after which a session claims the object it lost on.
    pub losses_min: u32,
}

impl Default for FairConfig {
    fn default() -> Self {
        FairConfig {
            hold_us: crate::limits::FAIR_HOLD_US,
            losses_min: crate::limits::FAIR_LOSSES_MIN,
        }
    }
}

/// A live or expired claim on one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    /// The session that holds it.
    conn: ConnId,
    /// When it ends unless its holder commits first.
    until_us: u64,
}

/// What fair retries know of one session that lost.
#[derive(Debug, Default)]
struct Loser {
    /// Losses since its last commit.
    losses: u32,
    /// The objects it claimed, oldest first (their claims may have expired).
    claimed: SmallVec<[Oref; FAIR_CLAIMS_PER_SESSION_MAX]>,
}

/// Counters of fair retries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FairCounters {
    /// Claims given.
    pub claims: u64,
    /// Claims that ended unused (expired before their holder committed).
    pub claims_expired: u64,
    /// Commits held back for a claim.
    pub held: u64,
    /// Held commits released because their wait ran out while the claim still stood.
    pub held_timed_out: u64,
    /// Transactions clients aborted after an invalidation, as they reported.
    pub invalidation_aborts: u64,
    /// Attempts clients ran again after a conflict, as they reported.
    pub retries: u64,
}

/// The claims of repeated losers (owned by concurrency control, which sees the losses and
/// the commits). See the module documentation.
#[derive(Debug, Default)]
pub struct Claims {
    cfg: FairConfig,
    /// Claims by object (a claim stays here after it expires, until its holder commits, leaves
    /// or claims past its bound, or another session claims the object).
    by_object: FxHashMap<Oref, Claim>,
    /// Sessions that lost since their last commit.
    losers: FxHashMap<ConnId, Loser>,
    /// The latest time it was told of (a commit's timestamp can run ahead of the clock, so
    /// whether a claim had expired when its holder committed is judged by this).
    now_us: u64,
    counters: FairCounters,
}

impl Claims {
    /// No claims, with settings `cfg`.
    pub fn new(cfg: FairConfig) -> Claims {
        Claims { cfg, ..Claims::default() }
    }

    /// The counters.
    pub fn counters(&self) -> FairCounters {
        self.counters
    }

    /// How long a claim lives and a held commit waits at most.
    pub fn hold_us(&self) -> u64 {
        self.cfg.hold_us
    }

    /// `conn`'s transaction lost, on `object` if the cause named one. Returns whether the loss
    /// earned a claim on it.
    pub fn lost(&mut self, conn: ConnId, object: Option<Oref>, now_us: u64) -> bool {
        self.now_us = self.now_us.max(now_us);
        if self.cfg.hold_us == 0 {
            return false;
        }
        let l = self.losers.entry(conn).or_default();
        l.losses = l.losses.saturating_add(1);
        let Some(o) = object else { return false };
        if l.losses < self.cfg.losses_min {
            return false;
        }
        match self.by_object.get(&o) {
            // A live claim stands, the session's own included (claims are never extended).
            Some(c) if c.until_us > now_us => return false,
            Some(c) if c.conn != conn => {
                // An expired claim of another session: it goes, unused.
                let other = c.conn;
                self.counters.claims_expired += 1;
                if let Some(ol) = self.losers.get_mut(&other) {
                    ol.claimed.retain(|x| *x != o);
                }
            }
            Some(_) => self.counters.claims_expired += 1,
            None => {}
        }
        let l = self.losers.get_mut(&conn).expect("entered above");
        l.claimed.retain(|x| *x != o);
        if l.claimed.len() >= FAIR_CLAIMS_PER_SESSION_MAX {
            let oldest = l.claimed.remove(0);
            self.by_object.remove(&oldest);
        }
        l.claimed.push(o);
        let until_us = now_us.saturating_add(self.cfg.hold_us);
        self.by_object.insert(o, Claim { conn, until_us });
        self.counters.claims += 1;
        true
    }

    /// `conn` committed (or validated a transaction that writes nothing): it lost no more, and
    /// its claims end (counted as expired if they had).
    pub fn won(&mut self, conn: ConnId) {
        self.forget(conn, self.now_us);
    }

    /// `conn`'s session ended (its claims go, not counted as expired).
    pub fn disconnect(&mut self, conn: ConnId) {
        self.forget(conn, 0);
    }

    fn forget(&mut self, conn: ConnId, now_us: u64) {
        let Some(l) = self.losers.remove(&conn) else { return };
        for o in l.claimed {
            if let Some(c) = self.by_object.get(&o)
                && c.conn == conn
            {
                if c.until_us <= now_us {
                    self.counters.claims_expired += 1;
                }
                self.by_object.remove(&o);
            }
        }
    }

    /// A client's report of what it met since its last one (`thor_wire::contention`): counted,
    /// and an invalidation abort is a loss on the object named.
    pub fn reported(&mut self, conn: ConnId, c: &thor_wire::Contention, now_us: u64) {
        self.counters.invalidation_aborts += u64::from(c.invalidation_aborts);
        self.counters.retries += u64::from(c.retries);
        if c.invalidation_aborts > 0 {
            self.lost(conn, c.object, now_us);
        }
    }

    /// The first object of `writes` that another session than `conn` holds a live claim on,
    /// with the claim's end.
    pub fn against(&mut self, conn: ConnId, writes: &[Oref], now_us: u64) -> Option<(Oref, u64)> {
        self.now_us = self.now_us.max(now_us);
        if self.by_object.is_empty() {
            return None;
        }
        writes.iter().find_map(|o| {
            let c = self.by_object.get(o)?;
            (c.conn != conn && c.until_us > now_us).then_some((*o, c.until_us))
        })
    }

    /// Whether another session than `conn` holds a live claim on `o`.
    pub fn stands(&self, o: Oref, conn: ConnId, now_us: u64) -> bool {
        self.by_object.get(&o).is_some_and(|c| c.conn != conn && c.until_us > now_us)
    }

    /// Asserts that claims and losers agree and keep their bounds.
    pub fn check_invariants(&self) {
        for (o, c) in &self.by_object {
            let l = self.losers.get(&c.conn).expect("a claim's holder is a loser");
            assert!(l.claimed.contains(o), "claim on {o} listed by its holder {}", c.conn);
        }
        for l in self.losers.values() {
            assert!(l.claimed.len() <= FAIR_CLAIMS_PER_SESSION_MAX, "claims per session");
        }
    }
}

/// A commit held back for a claim.
#[derive(Debug)]
struct HeldCommit {
    /// The commit, as it was at the head of the queue.
    q: Queued,
    /// Its session.
    conn: ConnId,
    /// The claimed object it writes.
    on: Oref,
    /// When it goes back to the queue even if the claim stands: the claim's end or the end
    /// of its own longest wait, whichever is first.
    until_us: u64,
}

/// The commits held back for claims. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Held commits, in the order they were held.
    commits: Vec<HeldCommit>,
    /// When each session's commit in flight was first held: its wait is bounded from then,
    /// whatever claims come and go. Removed when the commit is validated or dropped.
    since: FxHashMap<ConnId, u64>,
}

impl Core {
    /// Holds the head of the commit queue back if another session's live claim covers an
    /// object it writes, and its wait has not run out. Returns whether it did (the head is
    /// gone from the queue).
    pub(super) fn fair_hold_head(&mut self, writes: &[Oref]) -> bool {
        let head = self.queue.front().expect("a head to hold");
        let Some(conn) = head.origin.conn() else { return false };
        if head.twopc.is_some() || head.commit.ts.is_some() {
            return false;
        }
        let now = self.now_us;
        let Some((on, claim_until)) = self.cc.claims_mut().against(conn, writes, now) else {
            self.held.since.remove(&conn);
            return false;
        };
        let since = *self.held.since.entry(conn).or_insert(now);
        let wait_until = since.saturating_add(self.cc.claims().hold_us());
        if wait_until <= now || self.held.commits.len() >= FAIR_HELD_MAX {
            // Waited long enough (or too many wait): validated as without fair retries.
            self.held.since.remove(&conn);
            return false;
        }
        let q = self.queue.pop_front().expect("checked");
        let until_us = claim_until.min(wait_until);
        self.held.commits.push(HeldCommit { q, conn, on, until_us });
        self.cc.claims_mut().counters.held += 1;
        true
    }

    /// Puts the held commits whose claim ended, or whose wait ran out, back at the front of
    /// the commit queue, in the order they were held (they arrived before what is queued).
    pub(super) fn fair_release(&mut self) {
        if self.held.commits.is_empty() {
            return;
        }
        let now = self.now_us;
        let held = std::mem::take(&mut self.held.commits);
        let mut out = Vec::new();
        for h in held {
            let stands = self.cc.claims().stands(h.on, h.conn, now);
            if stands && h.until_us > now {
                self.held.commits.push(h);
                continue;
            }
            if stands {
                self.cc.claims_mut().counters.held_timed_out += 1;
            }
            out.push(h.q);
        }
        for q in out.into_iter().rev() {
            self.queue.push_front(q);
        }
    }

    /// Drops `conn`'s held commit (its session ends; unvalidated commits go with it).
    pub(super) fn fair_drop(&mut self, conn: ConnId) {
        self.held.commits.retain(|h| h.conn != conn);
        self.held.since.remove(&conn);
    }

    /// When a held commit's wait ends (the driver must step the core then).
    pub(super) fn fair_deadline_us(&self) -> Option<u64> {
        self.held.commits.iter().map(|h| h.until_us).min()
    }

    /// Commits held now (tests).
    #[cfg(test)]
    pub(super) fn held_len(&self) -> usize {
        self.held.commits.len()
    }

    /// Asserts the held commits' bounds: at most one per session, each with its start.
    pub(super) fn fair_check_invariants(&self) {
        assert!(self.held.commits.len() <= FAIR_HELD_MAX, "held commits bound");
        for (i, h) in self.held.commits.iter().enumerate() {
            assert!(self.held.since.contains_key(&h.conn), "held commit of {} has a start", h.conn);
            assert!(
                self.held.commits[..i].iter().all(|g| g.conn != h.conn),
                "one held commit per session"
            );
            assert!(h.q.origin.conn() == Some(h.conn));
        }
        self.cc.claims().check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use thor_core::{Oid, PageId};

    use super::*;

    fn o(i: u16) -> Oref {
        Oref::new(PageId::new(1).unwrap(), Oid::new(i).unwrap())
    }

    fn claims() -> Claims {
        Claims::new(FairConfig { hold_us: 100, losses_min: 2 })
    }

    #[test]
    fn a_second_loss_in_a_row_claims_the_object_for_a_while() {
        let mut c = claims();
        assert!(!c.lost(7, Some(o(1)), 10), "one loss is ordinary contention");
        assert!(c.against(8, &[o(1)], 10).is_none());
        assert!(c.lost(7, Some(o(1)), 20));
        assert_eq!(c.against(8, &[o(2), o(1)], 21), Some((o(1), 120)));
        assert_eq!(c.against(7, &[o(1)], 21), None, "the holder is not held back");
        assert_eq!(c.against(8, &[o(1)], 120), None, "expired");
        c.check_invariants();
        assert_eq!(c.counters().claims, 1);
    }

    #[test]
    fn a_live_claim_is_neither_taken_nor_extended() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        assert!(c.lost(7, Some(o(1)), 10));
        c.lost(8, Some(o(1)), 20);
        assert!(!c.lost(8, Some(o(1)), 30), "7 holds it");
        assert!(!c.lost(7, Some(o(1)), 40), "not extended");
        assert_eq!(c.against(8, &[o(1)], 50), Some((o(1), 110)));
        // Expired: the next loser takes it.
        assert!(c.lost(8, Some(o(1)), 110));
        assert_eq!(c.against(7, &[o(1)], 111), Some((o(1), 210)));
        assert_eq!(c.counters().claims_expired, 1);
        c.check_invariants();
    }

    #[test]
    fn committing_or_leaving_ends_claims_and_losses() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        c.lost(7, Some(o(1)), 1);
        c.won(7);
        assert!(c.against(8, &[o(1)], 3).is_none());
        assert!(!c.lost(7, Some(o(1)), 4), "the count started again");
        c.lost(7, Some(o(1)), 5);
        c.disconnect(7);
        assert!(c.against(8, &[o(1)], 7).is_none());
        c.check_invariants();
    }

    #[test]
    fn a_session_claims_at_most_its_bound() {
        let mut c = claims();
        c.lost(7, None, 0);
        for i in 0..=FAIR_CLAIMS_PER_SESSION_MAX as u16 {
            c.lost(7, Some(o(i)), u64::from(i));
            c.check_invariants();
        }
        assert!(c.against(8, &[o(0)], 5).is_none(), "the oldest claim made room");
        let last = FAIR_CLAIMS_PER_SESSION_MAX as u16;
        assert!(c.against(8, &[o(last)], 5).is_some());
    }

    #[test]
    fn off_means_no_claims() {
        let mut c = Claims::new(FairConfig { hold_us: 0, losses_min: 1 });
        assert!(!c.lost(7, Some(o(1)), 0));
        assert!(c.against(8, &[o(1)], 0).is_none());
    }

    #[test]
    fn reported_invalidation_aborts_count_and_are_losses() {
        let mut c = claims();
        let r = thor_wire::Contention { invalidation_aborts: 1, retries: 1, object: Some(o(3)) };
        c.reported(7, &r, 0);
        c.reported(7, &r, 1);
        assert!(c.against(8, &[o(3)], 2).is_some());
        let f = c.counters();
        assert_eq!((f.invalidation_aborts, f.retries), (2, 2));
    }
}
