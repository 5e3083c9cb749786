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
//! an object it lines up for a *claim* on the object (*Many losers* below), and gets it at
//! once if nobody else holds a live one. The claim is *armed* by the session's next request, which comes after its client's backoff and
//! fetches the new version (or commits again), and from then holds rivals back for
//! [`FairConfig::hold_us`]:
//!
//! ```text
//!   A commits o ─► B refused (Stale o) ─► B refused again: B claims o
//!   B backs off (A commits on meanwhile) ─► B fetches o: the claim is armed
//!   A's next commit writes o: held back (parked at the server, not refused)
//!   B commits ──────────► B's commit is durable: the claim ends
//!   A's held commit is validated now ─► refused Stale o (A read the old o): A loses, and so on
//! ```
//!
//! While an armed claim stands, a commit of another session that writes the claimed object is
//! held back at the head of the commit queue: taken out of the queue and kept until the claim
//! ends (the holder's writing commit is durable, the holder commits anything, its session
//! ends) or expires, then put back at the front of the queue and validated. Held commits are
//! not refused: a refusal would grow the rival's backoff the way losing grew the loser's, and
//! the two would trade places instead of taking turns. A claim is not armed at once because
//! the holder's backoff is not the window a rival must keep out of (its fetch and commit are),
//! and holding rivals back through the backoff stalls the object for nothing: with 16 clients
//! on 4 counters that cut throughput by more than half. A claim not armed within
//! [`FairConfig::arm_within_us`] lapses, and an armed claim ends when its holder loses again
//! on another object (that attempt is over), so rivals do not wait out the hold for a commit
//! that will not come.
//!
//! # Many losers
//!
//! With more than two sessions on one object, one claim at a time is not enough: whoever
//! happened to lose when no claim stood got the next one, and the others kept losing (eight
//! clients on one counter, in this module's scenario test: 3 commits against 1,120). So the
//! repeated losers of an object *line up*: a session at its `losses_min`-th loss in a row
//! joins the object's line (one line per session, the object it lost on last; at most
//! [`crate::limits::FAIR_LINE_MAX`] in a line), and when a claim ends (its holder commits,
//! leaves, loses on another object, or lets it lapse) the first in line gets it. Who is held
//! back:
//!
//! - by an **armed** claim: every other session that writes the object, losers in line
//!   included, except the holders of armed claims (it is their turn elsewhere; two holders
//!   must not wait for each other);
//! - by a claim **not yet armed** (its holder backs off): only the sessions waiting in the
//!   object's line, which would take the turn it waits for. A session on a winning streak
//!   goes on, so an object does not stall through the holder's backoff (holding everyone
//!   back then cost about two thirds of the throughput with eight clients, and half with two).
//!
//! Eight clients on one counter then share it 216 to 229 commits each at 1,795 in all,
//! against 1,975 without lines (the scenario test `hot_counter_is_shared_fairly_among_eight`;
//! two clients are as before). *Fair* means here what the tests assert: every session's
//! commits at least a third of the largest session's.
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
//!   `fair_held_timed_out`). [`crate::Core::next_deadline_us`] (and
//!   [`crate::Core::answer_deadline_us`]) wakes the driver for it: a driver must tick then
//!   whenever something waits, or the held commit waits for ever (one thread driving two
//!   in-process sessions, the holder's and the rival's, steps nothing else meanwhile).
//! - A claim waits at most [`FairConfig::arm_within_us`] to be armed, then holds at most
//!   [`FairConfig::hold_us`], and is never extended: a holder that does not commit in time
//!   (its application gave up) delays its rivals that long once.
//! - Claims: at most [`crate::limits::FAIR_CLAIMS_PER_SESSION_MAX`] per session; a session's
//!   claims and loss count go with it. Held commits: at most one per session (a session has
//!   one commit in flight) and [`crate::limits::FAIR_HELD_MAX`] in all. Lines: a session
//!   waits in one at most, and leaves it when it commits or its session ends; a line holds
//!   at most [`crate::limits::FAIR_LINE_MAX`].
//!
//! A client that reports invalidation aborts it did not have can earn claims sooner; it gains
//! turns bounded as above, never a commit validation would refuse.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use thor_core::Oref;

use super::{ConnId, Core, Queued};
use crate::limits::{FAIR_CLAIMS_PER_SESSION_MAX, FAIR_HELD_MAX, FAIR_LINE_MAX};

/// The settings of fair retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairConfig {
    /// How long an armed claim holds back rivals, and the longest a held commit waits in all
    /// (0 turns fair retries off: no claims, nothing held back).
    pub hold_us: u64,
    /// How long a claim waits to be armed by its holder's next request (it holds no one back
    /// meanwhile): the holder's backoff, at most.
    pub arm_within_us: u64,
    /// Losses in a row after which a session claims the object it lost on.
    pub losses_min: u32,
}

impl FairConfig {
    /// Fair retries on, with the bounds of `crate::limits`.
    pub const ON: FairConfig = FairConfig {
        hold_us: crate::limits::FAIR_HOLD_US,
        arm_within_us: crate::limits::FAIR_ARM_WITHIN_US,
        losses_min: crate::limits::FAIR_LOSSES_MIN,
    };
}

impl FairConfig {
    /// Fair retries off: no claims, nothing held back (validation first come, first served).
    pub const OFF: FairConfig = FairConfig { hold_us: 0, ..FairConfig::ON };
}

impl Default for FairConfig {
    /// On ([`FairConfig::ON`]). A held commit is released by a step at the core's deadline
    /// ([`crate::Core::answer_deadline_us`]), so every driver ticks then whenever something
    /// waits: thor-server's engine (its installer thread, woken for an earlier deadline; or,
    /// without it, each waiting caller), its in-process transport and thor-net's server loop.
    fn default() -> Self {
        FairConfig::ON
    }
}

/// A live or expired claim on one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    /// The session that holds it.
    conn: ConnId,
    /// When it ends unless its holder commits first (armed: `hold_us` after it was armed; not
    /// yet: `arm_within_us` after it was given).
    until_us: u64,
    /// Whether its holder has made a request since it lost (armed claims hold rivals back).
    armed: bool,
}

/// What fair retries know of one session that lost.
#[derive(Debug, Default)]
struct Loser {
    /// Losses since its last commit.
    losses: u32,
    /// The objects it claimed, oldest first (their claims may have expired).
    claimed: SmallVec<[Oref; FAIR_CLAIMS_PER_SESSION_MAX]>,
    /// The object in whose line it waits for a claim (at most one: the one it lost on last).
    waiting: Option<Oref>,
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
    /// The repeated losers waiting for a claim on each object, first come first (see *Many
    /// losers* in the module documentation). A session waits in one line at most.
    lines: FxHashMap<Oref, std::collections::VecDeque<ConnId>>,
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
        // A holder that lost again on another object has had its turn on the ones it claimed:
        // those armed claims end now, and the commits they held back go on, rather than
        // waiting out the hold for a commit that will not come. (A loss on the claimed object
        // itself keeps the claim: it lost to a rival's commit validated before the claim was
        // armed, and its next attempt, within the hold, is the one the claim is for.)
        let by_object = &mut self.by_object;
        let mut spent = SmallVec::<[Oref; FAIR_CLAIMS_PER_SESSION_MAX]>::new();
        l.claimed.retain(|x| {
            let done =
                Some(*x) != object && by_object.get(x).is_some_and(|c| c.conn == conn && c.armed);
            if done {
                by_object.remove(x);
                spent.push(*x);
            }
            !done
        });
        let repeated = l.losses >= self.cfg.losses_min;
        for x in spent {
            self.promote(x, now_us);
        }
        let Some(o) = object else { return false };
        if !repeated {
            return false;
        }
        if let Some(c) = self.by_object.get(&o)
            && c.conn == conn
        {
            // Its own claim, live or not, is not extended; an expired one goes, and the line
            // (which it joins again) decides who is next.
            if c.until_us > now_us {
                return false;
            }
            self.counters.claims_expired += 1;
            self.by_object.remove(&o);
            self.losers.get_mut(&conn).expect("entered above").claimed.retain(|x| *x != o);
        }
        self.join_line(conn, o);
        match self.by_object.get(&o) {
            // A live claim of another session stands: it waits in line.
            Some(c) if c.until_us > now_us => return false,
            Some(c) => {
                // An expired claim of another session: it goes, unused.
                let other = c.conn;
                self.counters.claims_expired += 1;
                self.by_object.remove(&o);
                if let Some(ol) = self.losers.get_mut(&other) {
                    ol.claimed.retain(|x| *x != o);
                }
            }
            None => {}
        }
        self.promote(o, now_us);
        self.by_object.get(&o).is_some_and(|c| c.conn == conn)
    }

    /// `conn` waits in `o`'s line (leaving the line it waited in before), unless it is there
    /// already or the line is full ([`FAIR_LINE_MAX`]: it then competes as without a line).
    fn join_line(&mut self, conn: ConnId, o: Oref) {
        let l = self.losers.get_mut(&conn).expect("a loser");
        if l.waiting == Some(o) {
            return;
        }
        if let Some(before) = l.waiting.take()
            && let Some(line) = self.lines.get_mut(&before)
        {
            line.retain(|c| *c != conn);
            if line.is_empty() {
                self.lines.remove(&before);
            }
        }
        let line = self.lines.entry(o).or_default();
        if line.len() < FAIR_LINE_MAX {
            line.push_back(conn);
            self.losers.get_mut(&conn).expect("a loser").waiting = Some(o);
        }
    }

    /// Nobody holds a claim on `o` now: the first session waiting in its line gets it, not yet
    /// armed (its next request arms it).
    fn promote(&mut self, o: Oref, now_us: u64) {
        if self.by_object.contains_key(&o) {
            return;
        }
        let Some(line) = self.lines.get_mut(&o) else { return };
        let Some(conn) = line.pop_front() else { return };
        if line.is_empty() {
            self.lines.remove(&o);
        }
        let l = self.losers.get_mut(&conn).expect("a session in a line is a loser");
        l.waiting = None;
        l.claimed.retain(|x| *x != o);
        let mut evicted = None;
        if l.claimed.len() >= FAIR_CLAIMS_PER_SESSION_MAX {
            let oldest = l.claimed.remove(0);
            if self.by_object.get(&oldest).is_some_and(|c| c.conn == conn) {
                self.by_object.remove(&oldest);
                evicted = Some(oldest);
            }
        }
        let l = self.losers.get_mut(&conn).expect("checked");
        l.claimed.push(o);
        let until_us = now_us.saturating_add(self.cfg.arm_within_us);
        self.by_object.insert(o, Claim { conn, until_us, armed: false });
        self.counters.claims += 1;
        // The claim it gave up makes room for the next in that object's line (not `conn`,
        // which waited in `o`'s line only).
        if let Some(oldest) = evicted {
            self.promote(oldest, now_us);
        }
    }

    /// `conn` made a request: its claims not yet armed are armed, and hold rivals back for
    /// `hold_us` from now. (The request that follows a loss comes after the client's backoff: it
    /// fetches the new version or commits again, and that is the window a rival's commit must
    /// not fall into. Holding rivals back during the backoff would stall the object for
    /// nothing.)
    pub fn active(&mut self, conn: ConnId, now_us: u64) {
        self.now_us = self.now_us.max(now_us);
        let Some(l) = self.losers.get(&conn) else { return };
        for o in &l.claimed {
            if let Some(c) = self.by_object.get_mut(o)
                && c.conn == conn
                && !c.armed
                && c.until_us > now_us
            {
                c.armed = true;
                c.until_us = now_us.saturating_add(self.cfg.hold_us);
            }
        }
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
        if let Some(o) = l.waiting
            && let Some(line) = self.lines.get_mut(&o)
        {
            line.retain(|c| *c != conn);
            if line.is_empty() {
                self.lines.remove(&o);
            }
        }
        for o in l.claimed {
            if let Some(c) = self.by_object.get(&o)
                && c.conn == conn
            {
                if c.until_us <= now_us {
                    self.counters.claims_expired += 1;
                }
                self.by_object.remove(&o);
                // The next in line has its turn.
                self.promote(o, self.now_us);
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

    /// The first object of `writes` whose claim holds `conn` back ([`Claims::stands`]), with
    /// the claim's end; `None` if `conn` itself holds an armed claim: it is its turn, and two
    /// holders must not wait for each other.
    pub fn against(&mut self, conn: ConnId, writes: &[Oref], now_us: u64) -> Option<(Oref, u64)> {
        self.now_us = self.now_us.max(now_us);
        if self.by_object.is_empty() {
            return None;
        }
        writes.iter().find_map(|o| {
            let c = self.by_object.get(o)?;
            self.stands(*o, conn, now_us).then_some((*o, c.until_us))
        })
    }

    /// Whether `conn` holds a live armed claim.
    fn is_holder(&self, conn: ConnId, now_us: u64) -> bool {
        self.losers.get(&conn).is_some_and(|l| {
            l.claimed.iter().any(|o| {
                self.by_object
                    .get(o)
                    .is_some_and(|c| c.conn == conn && c.armed && c.until_us > now_us)
            })
        })
    }

    /// Whether the claim on `o` holds `conn` back now. An armed claim of another session holds
    /// back everyone but the holders of armed claims (it is their turn elsewhere, and two
    /// holders must not wait for each other). A claim not yet armed (its holder backs off)
    /// holds back only the sessions waiting behind it in `o`'s line: they would take the
    /// turn it is waiting for, while a session on a winning streak is let go as before.
    pub fn stands(&self, o: Oref, conn: ConnId, now_us: u64) -> bool {
        let Some(c) = self.by_object.get(&o) else { return false };
        if c.conn == conn || c.until_us <= now_us || self.is_holder(conn, now_us) {
            return false;
        }
        c.armed || self.losers.get(&conn).is_some_and(|l| l.waiting == Some(o))
    }

    /// Asserts that claims and losers agree and keep their bounds.
    pub fn check_invariants(&self) {
        for (o, c) in &self.by_object {
            let l = self.losers.get(&c.conn).expect("a claim's holder is a loser");
            assert!(l.claimed.contains(o), "claim on {o} listed by its holder {}", c.conn);
        }
        for (conn, l) in &self.losers {
            assert!(l.claimed.len() <= FAIR_CLAIMS_PER_SESSION_MAX, "claims per session");
            if let Some(o) = l.waiting {
                let line = self.lines.get(&o).expect("a waiting session's line");
                assert_eq!(line.iter().filter(|c| *c == conn).count(), 1, "in its line once");
            }
        }
        for (o, line) in &self.lines {
            assert!(!line.is_empty() && line.len() <= FAIR_LINE_MAX, "line bounds");
            for c in line {
                let waiting = self.losers.get(c).and_then(|l| l.waiting);
                assert_eq!(waiting, Some(*o), "{c} in the line of {o} waits there");
            }
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
    /// Returns whether it released any.
    pub(super) fn fair_release(&mut self) -> bool {
        if self.held.commits.is_empty() {
            return false;
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
        let released = !out.is_empty();
        self.requeue_front(out);
        released
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
        Claims::new(FairConfig { hold_us: 100, arm_within_us: 1000, losses_min: 2 })
    }

    #[test]
    fn a_second_loss_in_a_row_claims_the_object_armed_by_the_next_request() {
        let mut c = claims();
        assert!(!c.lost(7, Some(o(1)), 10), "one loss is ordinary contention");
        assert!(c.against(8, &[o(1)], 10).is_none());
        assert!(c.lost(7, Some(o(1)), 20));
        assert!(c.against(8, &[o(1)], 21).is_none(), "not armed: 7 is backing off");
        c.active(7, 30);
        assert_eq!(c.against(8, &[o(2), o(1)], 31), Some((o(1), 130)));
        assert_eq!(c.against(7, &[o(1)], 31), None, "the holder is not held back");
        assert_eq!(c.against(8, &[o(1)], 130), None, "expired");
        c.check_invariants();
        assert_eq!(c.counters().claims, 1);
    }

    #[test]
    fn a_claim_not_armed_in_time_holds_no_one_back() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        c.lost(7, Some(o(1)), 1);
        c.active(7, 1001);
        assert!(c.against(8, &[o(1)], 1002).is_none());
        // Another loser takes the expired claim.
        c.lost(8, Some(o(1)), 1003);
        assert!(c.lost(8, Some(o(1)), 1004));
        assert_eq!(c.counters().claims_expired, 1);
        c.check_invariants();
    }

    #[test]
    fn a_live_claim_is_neither_taken_nor_extended() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        assert!(c.lost(7, Some(o(1)), 10));
        c.lost(8, Some(o(1)), 20);
        assert!(!c.lost(8, Some(o(1)), 30), "7 holds it");
        assert!(!c.lost(7, Some(o(1)), 40), "its claim, not armed yet, stands as it was");
        c.active(7, 50);
        c.active(7, 60);
        assert_eq!(c.against(9, &[o(1)], 60), Some((o(1), 150)), "armed once");
        // Expired: the next loser takes it.
        assert!(c.lost(8, Some(o(1)), 150));
        c.active(8, 151);
        assert_eq!(c.against(9, &[o(1)], 151), Some((o(1), 251)));
        assert_eq!(c.counters().claims_expired, 1);
        c.check_invariants();
    }

    #[test]
    fn committing_or_leaving_ends_claims_and_losses() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        c.lost(7, Some(o(1)), 1);
        c.active(7, 2);
        c.won(7);
        assert!(c.against(8, &[o(1)], 3).is_none());
        assert!(!c.lost(7, Some(o(1)), 4), "the count started again");
        c.lost(7, Some(o(1)), 5);
        c.active(7, 6);
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
        c.active(7, 5);
        assert!(c.against(8, &[o(0)], 5).is_none(), "the oldest claim made room");
        let last = FAIR_CLAIMS_PER_SESSION_MAX as u16;
        assert!(c.against(8, &[o(last)], 5).is_some());
    }

    #[test]
    fn holders_are_not_held_back_by_each_other() {
        let mut c = claims();
        assert!(!c.lost(7, Some(o(1)), 0));
        assert!(c.lost(7, Some(o(1)), 1));
        c.active(7, 2);
        assert!(c.against(8, &[o(1)], 3).is_some(), "8 has not lost");
        c.lost(8, Some(o(2)), 3);
        assert!(c.lost(8, Some(o(2)), 4), "8 claims o(2)");
        assert!(c.against(8, &[o(1)], 5).is_some(), "an armed claim holds back a loser too");
        c.active(8, 6);
        assert!(c.against(8, &[o(1)], 7).is_none(), "8's turn on o(2): it goes on");
        assert!(!c.stands(o(1), 8, 7));
        assert!(c.against(7, &[o(2)], 7).is_none(), "so does 7");
        c.check_invariants();
    }

    #[test]
    fn losers_take_turns_in_the_order_they_lined_up() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        assert!(c.lost(7, Some(o(1)), 1), "7 claims o(1)");
        for conn in [8, 9] {
            c.lost(conn, Some(o(1)), 2);
            assert!(!c.lost(conn, Some(o(1)), 3), "{conn} waits in line");
        }
        c.check_invariants();
        // 7 backs off: its claim, not armed, holds back those in line behind it only.
        assert!(c.against(8, &[o(1)], 4).is_some() && c.against(9, &[o(1)], 4).is_some());
        assert!(c.against(10, &[o(1)], 4).is_none(), "a session on a winning streak goes on");
        c.active(7, 5);
        assert!(c.against(10, &[o(1)], 6).is_some(), "armed: everyone else waits");
        // 7 commits: 8 is next, then 9.
        c.won(7);
        assert!(c.against(8, &[o(1)], 7).is_none(), "8's turn");
        assert!(c.against(9, &[o(1)], 7).is_some(), "9 waits behind 8");
        assert!(c.against(7, &[o(1)], 7).is_none(), "7 is no longer in line");
        c.check_invariants();
        c.disconnect(8);
        assert!(c.against(9, &[o(1)], 8).is_none(), "8 left: 9's turn");
        c.active(9, 9);
        assert!(c.against(8, &[o(1)], 10).is_some() || c.against(7, &[o(1)], 10).is_some());
        assert_eq!(c.counters().claims, 3);
        c.check_invariants();
    }

    #[test]
    fn a_holder_that_loses_again_releases_its_rivals_and_may_claim_anew() {
        let mut c = claims();
        c.lost(7, Some(o(1)), 0);
        c.lost(7, Some(o(1)), 1);
        c.active(7, 2);
        assert!(c.against(9, &[o(1)], 3).is_some());
        // Its attempt lost on another object: the claim on o(1) is spent, one on o(2) begins.
        assert!(c.lost(7, Some(o(2)), 4));
        assert!(!c.stands(o(1), 9, 5) && c.against(9, &[o(2)], 5).is_none(), "not armed yet");
        c.active(7, 6);
        assert_eq!(c.against(9, &[o(1), o(2)], 7), Some((o(2), 106)));
        c.check_invariants();
    }

    #[test]
    fn off_means_no_claims() {
        let mut c = Claims::new(FairConfig { hold_us: 0, arm_within_us: 0, losses_min: 1 });
        assert!(!c.lost(7, Some(o(1)), 0));
        c.active(7, 1);
        assert!(c.against(8, &[o(1)], 1).is_none());
    }

    #[test]
    fn reported_invalidation_aborts_count_and_are_losses() {
        let mut c = claims();
        let r = thor_wire::Contention { invalidation_aborts: 1, retries: 1, object: Some(o(3)) };
        c.reported(7, &r, 0);
        c.reported(7, &r, 1);
        c.active(7, 1);
        assert!(c.against(8, &[o(3)], 2).is_some());
        let f = c.counters();
        assert_eq!((f.invalidation_aborts, f.retries), (2, 2));
    }
}
