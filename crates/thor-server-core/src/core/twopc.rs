//! Two-phase commit: a transaction over several servers (thor-ecoop99 section 4.2).
//!
//! The client chose the transaction's timestamp (a [`Stamp`]) and sent a `Prepare` to every
//! participant (`thor_wire::twopc` has the messages). This module is both roles of a server:
//!
//! - **Participant.** A read-only participant validates at once, enters the transaction in
//!   its validation queue as committed, answers the client and votes to the coordinator; it
//!   takes no part in phase two. A writing participant queues the part like a commit; at the
//!   head of the queue it validates at exactly the client's timestamp and appends a *prepare*
//!   record (kind 3: the versions, created objects and the participant list). When that record
//!   is durable its created objects enter the MOB (their slots are allocated for good: they are
//!   unreachable until the commit and stay as garbage if it aborts), its versions are *held*,
//!   and it votes yes and answers the client `Prepared`. It is *in doubt* until the decision.
//!   On commit it appends a decision record and, once that is durable, publishes the held
//!   versions into the MOB, marks the transaction committed (invalidations to every client
//!   that has the pages, the committer's included: it may have fetched a page while in doubt)
//!   and acknowledges. On abort it drops the versions at once.
//! - **Coordinator** (a writing participant the client named). Its own part is prepared like
//!   any participant's; it collects the others' votes (a `Query` counts as a yes, unless the
//!   transaction cannot commit here: *Presumed abort*); when its own part is durable and every
//!   vote is yes it appends the commit decision, and when that is
//!   durable it publishes its part, answers the client `CommitOk` (three message delays after
//!   the client's prepare) and tells the writing participants, resending until each
//!   acknowledges, then appends an *end* record and forgets the transaction. A no vote, its own
//!   refusal or [`TwoPcConfig::vote_timeout_us`] without every vote aborts: it answers the
//!   client `Aborted`, tells the writing participants and remembers the answer (a
//!   *tombstone*).
//!
//! # Nothing waits for a timeout once the outcome is known
//!
//! The vote timeout is for votes that may never come (a participant that crashed, a message
//! lost). Every path on which the outcome is already decided acts at once (issue 32):
//!
//! - **An early no vote.** A participant's no that reaches the coordinator before the client's
//!   prepare is remembered as a tombstone; the prepare is then refused `Aborted` at once, and
//!   the coordinator never prepares (nor holds) its own part.
//! - **Early yes votes.** A coordinator that aborts before the client's prepare came (a no, or
//!   its timeout) tells the participants whose early votes it holds: they are in doubt.
//! - **A refused prepare.** A coordinator that refuses the client's prepare before validation
//!   (timestamp too far ahead, a server it does not know, too many transactions) aborts and
//!   keeps a tombstone; a participant that does votes no.
//! - **A session that ends** while its part waits (for the clock, or a read-only part for a
//!   part in doubt here) votes no, as one that ends while its part is queued does.
//!
//! # A vote that will never come
//!
//! A participant that crashed before its prepare record was durable has, after its restart,
//! no record of the transaction and will never vote; nor will one whose client's prepare was
//! lost. A coordinator that has had the client's prepare and still misses votes
//! [`TwoPcConfig::ask_vote_after_us`] later (100 ms) asks those participants
//! (`PeerMsg::AskVote`), and again at that interval until the vote timeout. The participant
//! answers:
//!
//! - its part prepared (record durable): yes again (its first vote may have been lost);
//! - its part on its way (queued for validation, waiting for the clock or for a part in
//!   doubt, its record not yet durable): nothing; the vote comes when the part gets there;
//! - no record and none coming: no, and it remembers the abort (a tombstone), so that the
//!   client's prepare, should it arrive late (merely delayed in the network, or behind
//!   another request of its session), is refused `Aborted` and nothing is prepared. A
//!   tombstone below the validation threshold is not kept: such a prepare fails validation
//!   anyway.
//!
//! The coordinator aborts on the no at once (presumed abort). Sound: a participant answers no
//! only when it has never voted yes (a yes is sent only once the prepare record is durable,
//! and a durable part survives a restart, so it is found); and a no that crosses a yes already
//! counted changes nothing once the coordinator decided commit. Should a participant forget
//! its tombstone (the cap) and prepare the late prepare after all, its yes reaches a
//! coordinator that aborted and has had the client's prepare already (it asks only then): it
//! answers abort, or takes the yes for an early vote of a transaction whose prepare never
//! comes, and aborts when that prepare does not come (below); it never commits. A read-only
//! participant keeps no record of its part in the log, but remembers for the vote timeout
//! that it voted yes (at most [`crate::limits::TWOPC_READ_ONLY_YES_MAX`]), and says yes
//! again: its validated entry in the validation queue constrains every later validation, so
//! the first yes still stands. One it forgot says no, and the transaction aborts. Peers older
//! than wire version 7 are not asked (thor-net's `TcpPeers` does not send them the message):
//! their missing votes wait for the vote timeout, as before.
//!
//! # A prepare that will never come
//!
//! The client's prepare to the coordinator may be lost (its connection broke) while the
//! other participants prepared and voted yes. Those early votes used to keep the coordinator
//! waiting for the vote timeout (2 s), and the participants in doubt, holding their parts
//! against every conflicting transaction. A client sends all its prepares at once, and a
//! participant votes only once its prepare record is durable, so the coordinator's prepare,
//! if it is coming at all, arrives first or within the network's jitter. A coordinator that
//! has a vote (or a query) but not the client's prepare [`TwoPcConfig::prepare_wait_us`]
//! (100 ms) after the first of them aborts and tells the voters, keeping a tombstone so that
//! a prepare that does come later is refused `Aborted`. Sound as any abort before a commit
//! decision is (presumed abort). A prepare waiting here for the clock
//! (*No validation ahead of the clock*) counts as come.
//!
//! # Presumed abort, and when "no record" means abort
//!
//! A coordinator asked about a transaction (a query, or a vote) of which it has no record
//! answers abort at once, keeping a tombstone, when it *cannot commit it*: a tombstone says so,
//! or the timestamp is below the validation threshold, where its own part could never validate
//! ([`Core::cannot_commit`]). After a restart the threshold is the clock at recovery plus
//! [`crate::limits::VALIDATION_LEAD_MAX_US`] ([`Core::recovered_at`]). A participant prepared
//! its part at most that lead ahead of its own clock, so with clocks synchronized to within
//! the restart's duration (11 ms measured), a restarted coordinator answers abort at the first
//! query about every transaction prepared before the crash; with clocks further apart, a
//! query about a timestamp at or above its threshold is an early vote, as below, and the
//! participant learns the abort at the vote timeout. A coordinator that is asked about
//! a transaction at or above the threshold may still receive its client's prepare (the
//! participant's prepare came first): that query counts as an early yes vote, bounded by the
//! vote timeout, and if the prepare never comes the abort is told to the voter then. Tombstones
//! are capped and expire below the threshold ([`crate::limits::TWOPC_TOMBSTONES_MAX`]).
//!
//! # No validation ahead of the clock
//!
//! A prepare whose timestamp is more than [`crate::limits::VALIDATION_LEAD_MAX_US`] ahead of
//! this server's clock waits (parked, one per session) until the clock is that close; beyond
//! [`TwoPcConfig::future_max_us`] it is refused. So a restart need only refuse client
//! timestamps up to its clock plus the lead (it used to refuse `future_max_us`, 200 ms).
//!
//! # Restart
//!
//! Recovery replays the records from the checkpoint: a prepare without a decision is in doubt
//! again (held versions, committing in the validation queue); the participant asks its
//! coordinator ([`TwoPcConfig::query_after_us`]) until it learns the outcome (a coordinator
//! with no record answers abort, see *Presumed abort*). A coordinator
//! that finds its own prepare undecided aborts it (nobody can have been told commit: the
//! decision is sent only once durable); one that finds a commit decision without an end
//! resends it. The checkpoint never passes the prepare record of a transaction still in doubt
//! or still being told ([`TwoPc::log_floor`]), so the log keeps what restart needs.
//!
//! # What still blocks
//!
//! A participant in doubt whose coordinator is gone for good waits for ever: its held
//! versions stay out of the MOB, its validation-queue entry refuses conflicting transactions,
//! and the log cannot be truncated below its prepare record. Two-phase commit cannot do better;
//! replicating the coordinator (a later issue) removes the case.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::{Lsn, Oref, ServerId};
use thor_wire::{Participant, PeerMsg, Prepare, RefusedCode, Reply, ReplyBody, Stamp};

use super::cc::{Refusal, Timestamp};
use super::store::{CommitIn, Held, Replay};
use super::{Core, Effect, Origin, Queued};
use crate::error::EngineError;
use crate::record::{self, PrepareSection};

/// Timeouts, bounds and peers of two-phase commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwoPcConfig {
    /// The other servers this one may commit transactions with: the ones it can reach
    /// (`thor server --peer ID=ADDR`, the ids of an in-process cluster). A `Prepare` of a
    /// transaction that writes is refused at once (`UnknownServer`) unless every participant
    /// is this server or one of these, since a part whose coordinator this server cannot reach
    /// would stay in doubt for ever; `Peer` messages from any other server are refused. Empty:
    /// a server on its own, which commits only transactions that use it alone (and read-only
    /// ones across servers, which need no message between servers).
    pub peers: Vec<ServerId>,
    /// A coordinator that has not had every vote this long after the client's prepare (or the
    /// first vote) aborts.
    pub vote_timeout_us: u64,
    /// A participant in doubt asks its coordinator for the decision this often.
    pub query_after_us: u64,
    /// A coordinator that has had the client's prepare but not every vote this long (since
    /// the prepare, or since it last asked) asks the participants that have not voted
    /// (`PeerMsg::AskVote`), until the vote timeout. See *A vote that will never come*.
    pub ask_vote_after_us: u64,
    /// A coordinator that has had a participant's vote (or query) but not the client's
    /// prepare this long aborts, telling the voters: the prepare was lost (a client's
    /// prepares leave together, and a participant votes only after its prepare record is
    /// durable, so a prepare still on its way this much later is all but impossible). See
    /// *A prepare that will never come*.
    pub prepare_wait_us: u64,
    /// A coordinator resends a commit decision to participants that did not acknowledge it
    /// this often.
    pub resend_after_us: u64,
    /// Most transactions in doubt here at once; more prepares are refused (`RetryLater`).
    pub parts_max: usize,
    /// Most transactions this server coordinates at once (early votes included).
    pub coords_max: usize,
    /// Most aborted transactions remembered (presumed-abort answers, aborts, early no votes);
    /// the oldest are forgotten first, and those below the validation threshold expire (see
    /// [`crate::limits::TWOPC_TOMBSTONES_MAX`]).
    pub tombstones_max: usize,
    /// A prepare whose timestamp is further ahead of this server's clock is refused; one
    /// ahead by less, but by more than [`crate::limits::VALIDATION_LEAD_MAX_US`], waits for
    /// the clock.
    pub future_max_us: u64,
}

impl Default for TwoPcConfig {
    fn default() -> Self {
        TwoPcConfig {
            peers: Vec::new(),
            vote_timeout_us: 2_000_000,
            query_after_us: 500_000,
            ask_vote_after_us: 100_000,
            prepare_wait_us: 100_000,
            resend_after_us: 500_000,
            parts_max: 4096,
            coords_max: 4096,
            tombstones_max: crate::limits::TWOPC_TOMBSTONES_MAX,
            future_max_us: 200_000,
        }
    }
}

/// Counters of two-phase commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TwoPcCounters {
    /// Parts prepared here (writing participant or coordinator).
    pub prepared: u64,
    /// Read-only parts validated here.
    pub read_only: u64,
    /// Transactions this server decided to commit, as coordinator.
    pub decided_commit: u64,
    /// Transactions this server decided to abort, as coordinator.
    pub decided_abort: u64,
    /// Parts committed here as participant.
    pub parts_committed: u64,
    /// Parts aborted here as participant.
    pub parts_aborted: u64,
    /// Queries sent while in doubt.
    pub queries_sent: u64,
    /// Presumed-abort answers (queries or votes about an unknown transaction).
    pub presumed_aborts: u64,
    /// Transactions that waited for a part in doubt here instead of being refused (rule 1).
    pub parked: u64,
    /// No votes that arrived before the client's prepare, remembered so that the prepare is
    /// refused at once.
    pub early_no_votes: u64,
    /// Prepares that waited for the clock (their timestamp was more than
    /// [`crate::limits::VALIDATION_LEAD_MAX_US`] ahead of it).
    pub waited_for_clock: u64,
    /// Requests for a missing vote sent, as coordinator (`PeerMsg::AskVote`).
    pub votes_asked: u64,
    /// Requests for a vote answered no, as participant: no record of the transaction and
    /// none coming (it restarted since, or the client's prepare has not come).
    pub asked_votes_no: u64,
    /// Requests for a vote answered yes again by a read-only participant, whose validated
    /// part is still in the validation queue (its first vote was lost).
    pub asked_read_only_yes: u64,
    /// Transactions aborted as coordinator because the client's prepare did not come
    /// [`TwoPcConfig::prepare_wait_us`] after a participant's vote.
    pub prepares_missed: u64,
}

/// What the client's prepare said about the transaction, kept with its queued part.
#[derive(Debug, Clone)]
pub(crate) struct TxnInfo {
    pub stamp: Stamp,
    pub coordinator: ServerId,
    pub participants: Vec<Participant>,
}

/// A writing part prepared here (the coordinator's own included).
#[derive(Debug)]
struct Part {
    coordinator: ServerId,
    /// Its prepare record.
    lsn: Lsn,
    /// The versions, once the prepare record is durable.
    held: Option<Held>,
    /// A plain participant's client, answered `Prepared` once durable.
    origin: Option<Origin>,
    /// The committing client's connection here: it holds the new versions once the
    /// transaction commits, so its copies are not invalidated (unless it refetched).
    committer: Option<super::ConnId>,
    /// The objects it writes (the pages a refetch would bring old versions of).
    writes: Vec<Oref>,
    /// Orefs of the objects it created here.
    created: Vec<Oref>,
    /// When it last asked the coordinator.
    last_query_us: u64,
    /// The coordinator decided abort before the prepare record was durable.
    aborted_early: bool,
    /// A commit decision record is appended and not yet durable.
    committing: bool,
    /// When it was prepared here (its record appended), or 0 if restored by recovery: how
    /// long it has held its objects ([`Core::twopc_oldest_part_us`]).
    since_us: u64,
}

/// Where a coordinated transaction is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CoordState {
    /// Collecting votes.
    Voting,
    /// The commit decision record is appended, not yet durable.
    Deciding,
    /// Committed; these writing participants have not acknowledged.
    Telling { unacked: Vec<ServerId>, last_send_us: u64 },
}

/// A transaction this server coordinates.
#[derive(Debug)]
struct Coord {
    /// The other participants; `None` while only votes arrived, before the client's prepare.
    others: Option<Vec<Participant>>,
    /// Other participants that voted yes.
    yes: Vec<ServerId>,
    /// The client, answered with the outcome.
    origin: Option<Origin>,
    started_us: u64,
    state: CoordState,
    /// Restored by recovery undecided: it aborts.
    recovered: bool,
    /// Its own prepare record, which the log keeps until the end record.
    lsn: Option<Lsn>,
    /// When it last asked the participants that have not voted for their votes (or had the
    /// client's prepare): it asks again [`TwoPcConfig::ask_vote_after_us`] later.
    last_ask_us: u64,
}

impl Coord {
    /// The other participants whose votes it still waits for (none before the client's
    /// prepare, which names them).
    fn missing_votes(&self) -> impl Iterator<Item = ServerId> + '_ {
        self.others.iter().flatten().map(|o| o.server).filter(|s| !self.yes.contains(s))
    }
}

/// Work held back until a part in doubt here is decided (see [`Core::park`]).
#[derive(Debug)]
pub(super) enum ParkedWork {
    /// A commit or two-phase part that was at the head of the commit queue.
    Queued(Queued),
    /// A read-only commit.
    ReadOnly(Origin, CommitIn),
    /// A two-phase prepare: a read-only part waiting for a part in doubt, or any part waiting
    /// for the clock (its timestamp ahead of it by more than the lead).
    Prepare(Origin, Prepare),
}

/// The connection a parked piece of work came on.
fn parked_conn(w: &ParkedWork) -> Option<super::ConnId> {
    match w {
        ParkedWork::Queued(q) => q.origin.conn(),
        ParkedWork::ReadOnly(o, _) | ParkedWork::Prepare(o, _) => o.conn(),
    }
}

#[derive(Debug)]
struct Parked {
    /// The part in doubt it waits for; `None`: it waits for the clock only (a prepare whose
    /// timestamp is ahead of it, see [`crate::limits::VALIDATION_LEAD_MAX_US`]).
    on: Option<Stamp>,
    /// When it gives up waiting (and is refused as it would have been), or, waiting for the
    /// clock, when it runs.
    until_us: u64,
    /// The refusal it got (`None`: waiting for the clock, it is run again, not refused).
    refusal: Option<Refusal>,
    work: ParkedWork,
}

/// What a durable record lets happen.
#[derive(Debug, Clone, Copy)]
enum AfterDurable {
    /// A participant's commit decision.
    PartCommitted(Stamp),
    /// The coordinator's commit decision.
    CoordCommitted(Stamp),
}

/// The two-phase commit state of a server. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct TwoPc {
    pub cfg: TwoPcConfig,
    parts: FxHashMap<Stamp, Part>,
    /// Prepare records not yet durable, by LSN.
    by_lsn: FxHashMap<Lsn, Stamp>,
    coords: BTreeMap<Stamp, Coord>,
    tombstones: BTreeSet<Stamp>,
    after_durable: BTreeMap<Lsn, AfterDurable>,
    /// Bytes of prepare records whose versions are held (outside the MOB).
    pub held_bytes: usize,
    pub counters: TwoPcCounters,
    /// Raise the threshold at the first input after recovery (when the time is known).
    pub raise_after_recovery: bool,
    /// Transactions that read what a part in doubt here writes, waiting for its decision.
    parked: Vec<Parked>,
    /// Parked work to run at the end of the step: `Some(refusal)` if its wait ran out.
    unparked: Vec<(ParkedWork, Option<Refusal>)>,
    /// Set while parked work is retried after its wait ran out: it is refused, not parked again.
    no_park: bool,
    /// Parts whose committing client fetched a page they write while they were in doubt (its
    /// copy may be the old version: it is invalidated too when the part commits).
    refetched: Vec<Stamp>,
    /// The latest timestamp given out when a reply was stamped *settled*
    /// (`Core::read_only_settled`): a writing part at or below it is refused, since a client
    /// may have committed a read-only transaction serialized after it on what it read.
    pub settled_floor: Timestamp,
    /// The core runs as one replica of a replica group (`Core::serve_as_replica`): it never
    /// says settled, since a leader that lost its term without knowing it yet would say so on
    /// a state a newer leader has moved past, and a client would commit a read-only
    /// transaction on it alone. Its read-only transactions come to the server, whose answer
    /// the group member gives only once the group confirms it still leads.
    pub replicated: bool,
    /// The read-only parts validated here that voted yes to a coordinator, with when, kept
    /// for the vote timeout (after it the coordinator asks no more) and at most
    /// [`crate::limits::TWOPC_READ_ONLY_YES_MAX`]: asked again for its vote (the first was
    /// lost), such a part says yes again instead of no. Forgetting one early is safe: the
    /// answer is then no, and the transaction aborts as it did before.
    read_only_yes: std::collections::VecDeque<(Stamp, u64)>,
}

fn ts_of(s: Stamp) -> Timestamp {
    Timestamp { time_us: s.time_us, server: s.tie }
}

fn stamp_of(ts: (u64, u32)) -> Stamp {
    Stamp { time_us: ts.0, tie: ts.1 }
}

impl TwoPc {
    pub fn new(cfg: TwoPcConfig) -> TwoPc {
        TwoPc { cfg, ..TwoPc::default() }
    }

    /// Remembers that the read-only part `stamp` voted yes at `now_us`, forgetting those older
    /// than the vote timeout and, beyond the cap, the oldest.
    fn remember_read_only_yes(&mut self, stamp: Stamp, now_us: u64) {
        let keep_us = self.cfg.vote_timeout_us;
        while let Some(&(_, at)) = self.read_only_yes.front() {
            if now_us.saturating_sub(at) < keep_us
                && self.read_only_yes.len() < crate::limits::TWOPC_READ_ONLY_YES_MAX
            {
                break;
            }
            self.read_only_yes.pop_front();
        }
        self.read_only_yes.push_back((stamp, now_us));
    }

    /// The oldest log record two-phase commit still needs: the prepare record of every part in
    /// doubt and of every transaction this server coordinates and has not ended.
    pub fn log_floor(&self) -> Option<Lsn> {
        let parts = self.parts.values().map(|p| p.lsn);
        let coords = self.coords.values().filter_map(|c| c.lsn);
        parts.chain(coords).min()
    }

    /// Parts in doubt (prepared, undecided) now.
    pub fn in_doubt(&self) -> usize {
        self.parts.len()
    }

    /// Transactions coordinated now.
    pub fn coordinating(&self) -> usize {
        self.coords.len()
    }
}

/// Two-phase commit at one server, as of one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TwoPcStats {
    /// Counters since the core started.
    pub counters: TwoPcCounters,
    /// Parts prepared here and not decided.
    pub in_doubt: usize,
    /// Transactions this server coordinates now.
    pub coordinating: usize,
    /// Bytes of prepare records whose versions wait for a decision.
    pub held_bytes: usize,
}

impl Core {
    /// Two-phase commit's state and counters.
    pub fn twopc_stats(&self) -> TwoPcStats {
        TwoPcStats {
            counters: self.twopc.counters,
            in_doubt: self.twopc.in_doubt(),
            coordinating: self.twopc.coordinating(),
            held_bytes: self.twopc.held_bytes,
        }
    }

    /// The database was created just now (it has never validated a transaction): the
    /// threshold need not be raised above the clock as after a restart.
    pub fn created_now(&mut self) {
        self.twopc.raise_after_recovery = false;
    }

    /// Recovery ended at `now_us` (the driver's clock at the open): the threshold is raised
    /// from then, not from the first input, which may come much later.
    ///
    /// Read-only validations before the crash left no record, nor did the read sets of
    /// commits whose records the checkpoint passed; a client timestamp below one of them must
    /// not validate. Nothing validated further ahead of the clock than
    /// [`crate::limits::VALIDATION_LEAD_MAX_US`] (prepares ahead wait for the clock; server
    /// timestamps run ahead only by a microsecond per transaction validated within one
    /// microsecond of clock, see the limit), so every one of them is at most the clock at the
    /// crash plus that lead, and the clock at recovery is later than the crash (the clock
    /// never goes back: the assumption the 200 ms window made too). The threshold is raised
    /// above the clock plus the lead: client timestamps taken after the restart validate at
    /// once (recovery outlasts the lead), where the threshold used to be 200 ms
    /// (`future_max_us`) ahead.
    pub fn recovered_at(&mut self, now_us: u64) {
        if self.twopc.raise_after_recovery {
            self.twopc.raise_after_recovery = false;
            self.now_us = self.now_us.max(now_us);
            let t = now_us.saturating_add(crate::limits::VALIDATION_LEAD_MAX_US + 1);
            self.cc.raise_threshold(Timestamp { time_us: t, server: 0 });
        }
    }

    /// When the part held longest here was prepared (0: restored by recovery), if any part is
    /// in doubt: the simulation's liveness check bounds how long a part is held.
    pub fn twopc_oldest_part_us(&self) -> Option<u64> {
        self.twopc.parts.values().map(|p| p.since_us).min()
    }

    fn me(&self) -> ServerId {
        self.store.superblock().server_id
    }

    /// Whether `id` is another server this one can reach ([`TwoPcConfig::peers`]).
    pub(super) fn knows_server(&self, id: ServerId) -> bool {
        id != self.me() && self.twopc.cfg.peers.contains(&id)
    }

    fn peer(&self, to: ServerId, msg: PeerMsg, fx: &mut Vec<Effect>) {
        debug_assert_ne!(to, self.me(), "a server never messages itself");
        fx.push(Effect::Peer { to, msg });
    }

    fn refuse_prepare(
        &mut self,
        origin: Origin,
        code: RefusedCode,
        why: &str,
        fx: &mut Vec<Effect>,
    ) {
        self.counters.commits_refused += 1;
        if let Origin::Conn { conn, id } = origin {
            let code = self.sessions.refused_code_for(conn, code);
            self.reply(conn, id, Reply::refused(code, why), false, fx);
        }
    }

    /// A read-only part of a two-phase commit: validated now, entered as committed, answered
    /// and voted on; there is no phase two. `p` names the transaction (its commit is empty:
    /// `c` is what was asked).
    fn prepare_read_only(&mut self, origin: Origin, p: Prepare, c: CommitIn, fx: &mut Vec<Effect>) {
        let me = self.me();
        let Prepare { stamp, coordinator, participants, .. } = p;
        let ts = ts_of(stamp);
        let conn = origin.conn();
        match self.cc.validate_at(conn, &c.reads, &[], ts) {
            Ok(ts) => {
                self.cc.insert(ts, &c.reads, &[], true, self.now_us);
                self.twopc.counters.read_only += 1;
                if let Some(co) = coordinator {
                    self.twopc.remember_read_only_yes(stamp, self.now_us);
                    self.peer(co, PeerMsg::Vote { stamp, from: me, yes: true }, fx);
                }
                if let Origin::Conn { conn, id } = origin {
                    let r = Reply::new(ReplyBody::Prepared { created: Vec::new() });
                    self.reply(conn, id, r, false, fx);
                }
            }
            Err(r) => {
                if let Some(on) = self.in_doubt_writer(&r) {
                    let commit = thor_wire::Commit {
                        reads: c.reads,
                        versions: Vec::new(),
                        created: Vec::new(),
                        id: None,
                        leaves: Vec::new(),
                    };
                    let p = Prepare { stamp, coordinator, participants, commit };
                    return self.park(on, r, ParkedWork::Prepare(origin, p));
                }
                if let Some(co) = coordinator {
                    self.peer(co, PeerMsg::Vote { stamp, from: me, yes: false }, fx);
                }
                self.cc.count_refusal(&r);
                self.counters.commits_refused += 1;
                self.answer_commit(origin, Err(EngineError::Conflict(r)), fx);
            }
        }
    }

    /// A client's `Prepare` (the session is busy until it is answered).
    pub(super) fn prepare_request(&mut self, origin: Origin, p: Prepare, fx: &mut Vec<Effect>) {
        self.last_commit_us = self.now_us;
        let me = self.me();
        if let Some(why) = &self.failed {
            let e = EngineError::Failed(why.clone());
            self.refuse_vote(p.stamp, p.coordinator, fx);
            return self.answer_commit(origin, Err(e), fx);
        }
        // Nothing validates further ahead of the clock than the lead (see
        // `limits::VALIDATION_LEAD_MAX_US`): a prepare whose timestamp is ahead by more (a
        // client clock that runs ahead of this server's) waits for the clock to come close.
        // What waits is one request per session, so the session bound bounds it.
        let lead = crate::limits::VALIDATION_LEAD_MAX_US;
        let future_max = self.twopc.cfg.future_max_us;
        if p.stamp.time_us > self.now_us.saturating_add(lead)
            && p.stamp.time_us <= self.now_us.saturating_add(future_max)
        {
            self.twopc.counters.waited_for_clock += 1;
            let until_us = p.stamp.time_us - lead;
            let work = ParkedWork::Prepare(origin, p);
            self.twopc.parked.push(Parked { on: None, until_us, refusal: None, work });
            return;
        }
        let Prepare { stamp, coordinator, participants, commit } = p;
        let Some(mine) = participants.iter().find(|q| q.server == me).copied() else {
            let why = format!("server {} is not among the transaction's participants", me.0);
            return self.refuse_prepare(origin, RefusedCode::Other, &why, fx);
        };
        let c = CommitIn::from(commit);
        if !mine.writes && !c.is_read_only() {
            let why = "the prepare carries objects for a participant it calls read-only";
            self.refuse_vote(stamp, coordinator, fx);
            return self.refuse_prepare(origin, RefusedCode::Other, why, fx);
        }
        // A transaction that writes needs messages between its servers: this one must be able
        // to vote to (or be) the coordinator and, as coordinator, to tell every participant.
        // A part whose coordinator it cannot reach would stay in doubt across restarts, its
        // objects held and the log kept; so it is refused now, before anything is logged,
        // held or sent. (A read-only transaction has no coordinator and sends nothing.) A
        // coordinator it knows is told no, so that it aborts at once.
        if let Some(co) = coordinator
            && let Some(q) =
                participants.iter().find(|q| q.server != me && !self.knows_server(q.server))
        {
            let role = if q.server == co { "its coordinator" } else { "a participant" };
            let why = format!(
                "{role}, server {}, is not a server this one knows (it has no --peer {}=HOST:PORT); nothing was prepared",
                q.server.0, q.server.0
            );
            if co == me || self.knows_server(co) {
                self.refuse_vote(stamp, coordinator, fx);
            }
            return self.refuse_prepare(origin, RefusedCode::UnknownServer, &why, fx);
        }
        if stamp.time_us > self.now_us.saturating_add(future_max) {
            let why = format!(
                "timestamp {stamp} is more than {future_max} us ahead of this server's clock"
            );
            self.refuse_vote(stamp, coordinator, fx);
            return self.refuse_prepare(origin, RefusedCode::TooOld, &why, fx);
        }
        if self.twopc.tombstones.contains(&stamp) {
            // Aborted already: by this coordinator, or by a participant's no vote that came
            // before this prepare (remembered for this moment: the part is not prepared and
            // held until the vote timeout).
            return self.refuse_prepare(origin, RefusedCode::Aborted, "already aborted", fx);
        }
        if !mine.writes {
            let p =
                Prepare { stamp, coordinator, participants, commit: thor_wire::Commit::default() };
            return self.prepare_read_only(origin, p, c, fx);
        }
        let coordinator = coordinator.expect("Prepare::check: a writing transaction has one");
        if self.twopc.parts.len() >= self.twopc.cfg.parts_max
            || (coordinator == me
                && self.twopc.coords.len() >= self.twopc.cfg.coords_max
                && !self.twopc.coords.contains_key(&stamp))
        {
            self.refuse_vote(stamp, Some(coordinator), fx);
            let why = "too many transactions in two-phase commit here; retry";
            return self.refuse_prepare(origin, RefusedCode::RetryLater, why, fx);
        }
        self.queue_part(origin, TxnInfo { stamp, coordinator, participants }, c);
    }

    /// Queues a writing part the prepare checks passed (registering the transaction first if
    /// this server coordinates it): it is validated and prepared at the head of the queue.
    fn queue_part(&mut self, origin: Origin, info: TxnInfo, mut c: CommitIn) {
        let me = self.me();
        let TxnInfo { stamp, coordinator, .. } = info;
        if coordinator == me {
            let others: Vec<Participant> =
                info.participants.iter().filter(|q| q.server != me).copied().collect();
            let now = self.now_us;
            let e = self.twopc.coords.entry(stamp).or_insert_with(|| Coord {
                others: None,
                yes: Vec::new(),
                origin: None,
                started_us: now,
                state: CoordState::Voting,
                recovered: false,
                lsn: None,
                last_ask_us: now,
            });
            e.others = Some(others);
            e.origin = Some(origin);
            e.last_ask_us = now;
        }
        c.ts = Some(ts_of(stamp));
        self.queue.push_back(Queued {
            origin,
            commit: c,
            images: Vec::new(),
            waiting_for: Vec::new(),
            counted_waits: (false, false),
            twopc: Some(Box::new(info)),
            merged: Vec::new(),
        });
    }

    /// This server will not prepare its part of `stamp` (refused before validation), so the
    /// transaction cannot commit. A participant votes no to its coordinator (if it knows it);
    /// the coordinator itself aborts (telling the participants whose votes came already) and
    /// remembers the abort, so that every vote still to come is answered abort at once. No
    /// part is held until the vote timeout for an outcome that is already decided.
    fn refuse_vote(&mut self, stamp: Stamp, coordinator: Option<ServerId>, fx: &mut Vec<Effect>) {
        let me = self.me();
        match coordinator {
            Some(co) if co == me => {
                if self.twopc.coords.contains_key(&stamp) {
                    self.coord_abort(stamp, fx);
                } else {
                    self.tombstone(stamp);
                }
            }
            Some(co) if self.knows_server(co) => {
                self.peer(co, PeerMsg::Vote { stamp, from: me, yes: false }, fx);
            }
            _ => {}
        }
    }

    /// Validates and prepares the head of the queue, a two-phase part. Returns the refusal
    /// or the section for `Store::prepare`; the caller handles page reads.
    pub(super) fn twopc_validate(&mut self, writes: &[Oref]) -> Result<Timestamp, EngineError> {
        let head = self.queue.front().expect("called on the head");
        let info = head.twopc.as_ref().expect("a two-phase part");
        if self.twopc.tombstones.contains(&info.stamp) {
            return Err(EngineError::Aborted("the coordinator already aborted".into()));
        }
        let ts = ts_of(info.stamp);
        if ts <= self.twopc.settled_floor {
            // Only on a server with no peers (the only kind that stamps replies settled),
            // where a writing part is one whose sole participant is this server: its
            // timestamp is the client's, and a read-only transaction committed at a client on
            // a settled stamp is serialized after every change up to it.
            let threshold = self.twopc.settled_floor;
            return Err(EngineError::Conflict(Refusal::TooOld { ts, threshold }));
        }
        let conn = head.origin.conn();
        let reads = head.commit.reads.clone();
        self.cc.validate_at(conn, &reads, writes, ts).map_err(EngineError::Conflict)
    }

    /// Whether replies may be stamped *settled* (`thor_wire::Seen::settled`): every commit
    /// this server validates from now on is serialized after every change visible now, and
    /// no transaction serialized before one of them is undecided.
    ///
    /// Why it holds here. A commit's timestamp comes from this server's clock, after every
    /// timestamp given out before (`Cc::fresh_ts`), and commits become visible in the order
    /// they were validated, so the visible changes are a prefix of the timestamp order and
    /// every later validation sorts after them. The exceptions are two-phase parts, whose
    /// timestamp is the client's and may sort before changes already visible: so a server
    /// with peers never says settled (its parts are ordinary work, and a read-only
    /// transaction there is validated as before), and on one without, where a writing part
    /// can only name this server alone, no part may be in doubt and a part at or below the
    /// floor is refused (`TwoPc::settled_floor`). A restart raises the validation threshold
    /// above every timestamp the clock allowed before the crash, so the floor need not
    /// survive it.
    pub(super) fn read_only_settled(&self) -> bool {
        let me = self.me();
        !self.twopc.replicated
            && !self.twopc.cfg.peers.iter().any(|&p| p != me)
            && self.twopc.parts.is_empty()
    }

    /// The section of the prepare record for the head of the queue.
    pub(super) fn twopc_section(info: &TxnInfo) -> PrepareSection {
        PrepareSection {
            coordinator: info.coordinator,
            participants: info.participants.iter().map(|p| (p.server, p.writes)).collect(),
        }
    }

    /// A two-phase part at the head of the queue was refused (validation or checks).
    pub(super) fn twopc_refused(&mut self, q: Queued, e: EngineError, fx: &mut Vec<Effect>) {
        let info = q.twopc.expect("a two-phase part");
        if let EngineError::Conflict(r) = &e {
            self.cc.count_refusal(r);
        }
        self.counters.commits_refused += 1;
        let me = self.me();
        if info.coordinator == me {
            // The client waits on the coordinator's answer; if the transaction was aborted
            // already (the part waited past the vote timeout), it has had it.
            let waiting = self.twopc.coords.get_mut(&info.stamp).and_then(|c| c.origin.take());
            if let Some(origin) = waiting {
                self.answer_commit(origin, Err(e), fx);
            }
            self.coord_abort(info.stamp, fx);
        } else {
            self.peer(
                info.coordinator,
                PeerMsg::Vote { stamp: info.stamp, from: me, yes: false },
                fx,
            );
            self.answer_commit(q.origin, Err(e), fx);
        }
    }

    /// A two-phase part was prepared and its record appended at `lsn`.
    pub(super) fn twopc_prepared(
        &mut self,
        q: Queued,
        ts: Timestamp,
        writes: &[Oref],
        lsn: Lsn,
        created: Vec<Oref>,
    ) {
        let info = q.twopc.expect("a two-phase part");
        self.cc.insert(ts, &q.commit.reads, writes, false, self.now_us);
        let origin = (info.coordinator != self.me()).then_some(q.origin);
        self.twopc.parts.insert(
            info.stamp,
            Part {
                coordinator: info.coordinator,
                lsn,
                held: None,
                origin,
                committer: q.origin.conn(),
                writes: writes.to_vec(),
                created,
                last_query_us: self.now_us,
                aborted_early: false,
                committing: false,
                since_us: self.now_us,
            },
        );
        self.twopc.by_lsn.insert(lsn, info.stamp);
        self.twopc.counters.prepared += 1;
        if let Some(c) = self.twopc.coords.get_mut(&info.stamp) {
            c.lsn = Some(lsn);
        }
    }

    /// A two-phase part's prepare record is durable: its created objects are in the MOB, its
    /// versions are held. Vote (or, at the coordinator, count its own vote).
    pub(super) fn twopc_durable(&mut self, p: super::store::Prepared, fx: &mut Vec<Effect>) {
        let Some(stamp) = self.twopc.by_lsn.remove(&p.lsn) else { return };
        let versions: Vec<(Oref, std::ops::Range<usize>)> =
            p.objects.iter().filter(|o| !o.created).map(|o| (o.oref, o.range())).collect();
        self.counters.objects_created += p.created.len() as u64;
        let held = Held { lsn: p.lsn, record: p.record.clone(), versions };
        self.twopc.held_bytes += held.record.len();
        let me = self.me();
        let part = self.twopc.parts.get_mut(&stamp).expect("parts outlive their prepare");
        part.held = Some(held);
        if part.aborted_early {
            self.part_abort(stamp, fx);
            return;
        }
        if part.coordinator == me {
            self.maybe_decide(stamp, fx);
        } else {
            let co = part.coordinator;
            let created = part.created.clone();
            let origin = part.origin.take();
            self.peer(co, PeerMsg::Vote { stamp, from: me, yes: true }, fx);
            if let Some(Origin::Conn { conn, id }) = origin {
                self.reply(conn, id, Reply::new(ReplyBody::Prepared { created }), false, fx);
            }
        }
    }

    /// Decides commit if every vote is in.
    fn maybe_decide(&mut self, stamp: Stamp, fx: &mut Vec<Effect>) {
        let own_ready = self.twopc.parts.get(&stamp).is_some_and(|p| p.held.is_some());
        let skips_votes = self.mutated(crate::mutants::Mutant::CoordinatorSkipsVotes);
        let Some(c) = self.twopc.coords.get_mut(&stamp) else { return };
        if c.state != CoordState::Voting || c.recovered || !own_ready {
            return;
        }
        let Some(others) = &c.others else { return };
        if !skips_votes && !others.iter().all(|o| c.yes.contains(&o.server)) {
            return;
        }
        let tell: Vec<ServerId> = others.iter().filter(|o| o.writes).map(|o| o.server).collect();
        c.state = CoordState::Deciding;
        let d = record::Decision {
            ts: (stamp.time_us, stamp.tie),
            commit: true,
            coordinator: true,
            tell,
        };
        let lsn = self.append_plain(record::encode_decision(&d), fx);
        self.twopc.after_durable.insert(lsn, AfterDurable::CoordCommitted(stamp));
        if let Some(p) = self.twopc.parts.get_mut(&stamp) {
            p.committing = true;
        }
    }

    fn append_plain(&mut self, rec: Vec<u8>, fx: &mut Vec<Effect>) -> Lsn {
        let lsn = self.store.append_plain(&rec);
        fx.push(Effect::Append { lsn, record: Bytes::from(rec) });
        lsn
    }

    /// The coordinator aborts `stamp` (before deciding): tells the client (if still waiting),
    /// the writing participants, and drops its own part.
    fn coord_abort(&mut self, stamp: Stamp, fx: &mut Vec<Effect>) {
        let Some(c) = self.twopc.coords.get(&stamp) else { return };
        if c.state != CoordState::Voting {
            return;
        }
        let c = self.twopc.coords.remove(&stamp).expect("checked");
        self.twopc.counters.decided_abort += 1;
        self.tombstone(stamp);
        let me = self.me();
        // The writing participants; before the client's prepare, the ones known are those that
        // voted (early), which are in doubt: told now, not when they next ask.
        let tell: Vec<ServerId> = match &c.others {
            Some(others) => others.iter().filter(|o| o.writes).map(|o| o.server).collect(),
            None => c.yes.clone(),
        };
        for s in tell {
            self.peer(s, PeerMsg::Decide { stamp, from: me, commit: false }, fx);
        }
        if let Some(origin) = c.origin {
            self.counters.commits_refused += 1;
            let e = EngineError::Aborted("another participant refused or did not vote".into());
            self.answer_commit(origin, Err(e), fx);
        }
        self.part_abort(stamp, fx);
    }

    /// Remembers that `stamp` aborted. Tombstones below the validation threshold expire
    /// ([`Core::cannot_commit`] answers for them), and past the cap the oldest go (see
    /// [`crate::limits::TWOPC_TOMBSTONES_MAX`]).
    fn tombstone(&mut self, stamp: Stamp) {
        let threshold = self.cc.threshold();
        while self.twopc.tombstones.first().is_some_and(|s| ts_of(*s) < threshold) {
            self.twopc.tombstones.pop_first();
        }
        if ts_of(stamp) < threshold {
            return;
        }
        self.twopc.tombstones.insert(stamp);
        while self.twopc.tombstones.len() > self.twopc.cfg.tombstones_max {
            self.twopc.tombstones.pop_first();
        }
    }

    /// Aborts the part of `stamp` here, if any: drops the held versions (logging the abort so
    /// that a restart does not ask again) or, if its prepare record is not yet durable, marks
    /// it to be dropped then.
    fn part_abort(&mut self, stamp: Stamp, fx: &mut Vec<Effect>) {
        let Some(p) = self.twopc.parts.get_mut(&stamp) else { return };
        if p.committing {
            return;
        }
        if p.held.is_none() {
            p.aborted_early = true;
            return;
        }
        let p = self.twopc.parts.remove(&stamp).expect("checked");
        if let Some(h) = &p.held {
            self.twopc.held_bytes -= h.record.len();
        }
        self.cc.aborted(ts_of(stamp));
        self.twopc.refetched.retain(|s| *s != stamp);
        self.unpark(stamp);
        self.twopc.counters.parts_aborted += 1;
        let coordinator = p.coordinator == self.me();
        let d = record::Decision {
            ts: (stamp.time_us, stamp.tie),
            commit: false,
            coordinator,
            tell: Vec::new(),
        };
        self.append_plain(record::encode_decision(&d), fx);
        if let Some(Origin::Conn { conn, id }) = p.origin {
            self.counters.commits_refused += 1;
            let r = Reply::refused(RefusedCode::Aborted, "the coordinator aborted the transaction");
            self.reply(conn, id, r, false, fx);
        }
    }

    /// Publishes a committed part's held versions and marks it committed; its decision
    /// record is at `decided` (the change the resume history notes, `super::resume`).
    fn part_publish(&mut self, stamp: Stamp, decided: Lsn, fx: &mut Vec<Effect>) -> Option<Part> {
        let p = self.twopc.parts.remove(&stamp)?;
        let h = p.held.as_ref().expect("a decided part is durable");
        self.store.publish_held(h);
        let crc = thor_core::checksum::crc32c(&h.record);
        self.note_change(decided, (stamp.time_us, stamp.tie, crc), p.writes.clone(), None);
        self.twopc.held_bytes -= h.record.len();
        self.demotions.pages_written(h.versions.iter().filter_map(|(o, _)| o.page()));
        self.counters.versions_committed += h.versions.len() as u64;
        self.counters.commits += 1;
        // Every client that has the pages is told, except the committing one, which holds the
        // new versions, unless it fetched one of the pages while the part was in doubt (then
        // its copy may be the old version).
        let refetched = self.twopc.refetched.iter().position(|s| *s == stamp);
        let committer = match refetched {
            Some(i) => {
                self.twopc.refetched.swap_remove(i);
                None
            }
            None => p.committer,
        };
        for conn in self.cc.committed(ts_of(stamp), committer) {
            self.sessions.expire(conn, fx);
        }
        self.unpark(stamp);
        Some(p)
    }

    /// A page goes to `conn`: if `conn` committed a part still in doubt that writes an object
    /// on it, its copy of that object may be the old version.
    pub(super) fn twopc_page_sent(&mut self, conn: super::ConnId, page: thor_core::PageId) {
        if self.twopc.parts.is_empty() {
            return;
        }
        for (stamp, p) in &self.twopc.parts {
            let writes_page = p.writes.iter().any(|o| o.page() == Some(page));
            if p.committer == Some(conn) && writes_page && !self.twopc.refetched.contains(stamp) {
                self.twopc.refetched.push(*stamp);
            }
        }
    }

    /// Whether a refusal is rule 1 against a part in doubt here: then the transaction waits
    /// for the part's decision instead (the paper aborts it; but a client that commits over
    /// two servers and goes on with the same objects would then fail its next transaction
    /// every time, since the participants learn the decision a message later than it does).
    /// Returns the part's stamp.
    pub(super) fn in_doubt_writer(&self, r: &Refusal) -> Option<Stamp> {
        if self.twopc.no_park || self.twopc.parts.is_empty() {
            return None;
        }
        let Refusal::Rule1(o) = r else { return None };
        let w = self.cc.uncommitted_writer(*o)?;
        let stamp = Stamp { time_us: w.time_us, tie: w.server };
        self.twopc.parts.get(&stamp).is_some_and(|p| p.held.is_some()).then_some(stamp)
    }

    /// Whether `conn` has parked work.
    pub(super) fn twopc_parks(&self, conn: super::ConnId) -> bool {
        self.twopc.parked.iter().any(|p| parked_conn(&p.work) == Some(conn))
    }

    /// Takes `conn`'s parked work away (its session ended); returns the queued commits among it
    /// (a read-only commit needs nothing more: it wrote nothing and nobody waits for it). A part
    /// of a two-phase commit that waited (for the clock, or a read-only part for a part in
    /// doubt) will never vote: its coordinator is told no now ([`Core::twopc_abandoned`])
    /// rather than left to wait for the vote timeout.
    pub(super) fn twopc_unpark_conn(
        &mut self,
        conn: super::ConnId,
        fx: &mut Vec<Effect>,
    ) -> Vec<Queued> {
        let (mine, rest): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.twopc.parked)
            .into_iter()
            .partition(|p| parked_conn(&p.work) == Some(conn));
        self.twopc.parked = rest;
        let mut queued = Vec::new();
        for p in mine {
            match p.work {
                ParkedWork::Queued(q) => queued.push(q),
                ParkedWork::Prepare(_, p) => {
                    if let Some(coordinator) = p.coordinator {
                        let info =
                            TxnInfo { stamp: p.stamp, coordinator, participants: p.participants };
                        self.twopc_abandoned(&info, fx);
                    }
                }
                ParkedWork::ReadOnly(..) => {}
            }
        }
        queued
    }

    /// A two-phase part whose session ended before it was validated: it will never be
    /// prepared here, so the transaction cannot commit. Tell the coordinator (or, here, abort).
    pub(super) fn twopc_abandoned(&mut self, info: &TxnInfo, fx: &mut Vec<Effect>) {
        let me = self.me();
        if info.coordinator == me {
            if let Some(c) = self.twopc.coords.get_mut(&info.stamp) {
                c.origin = None;
            }
            self.coord_abort(info.stamp, fx);
        } else {
            self.peer(
                info.coordinator,
                PeerMsg::Vote { stamp: info.stamp, from: me, yes: false },
                fx,
            );
        }
    }

    /// Holds `work` until the part `on` is decided (or its wait runs out).
    pub(super) fn park(&mut self, on: Stamp, refusal: Refusal, work: ParkedWork) {
        let until_us = self.now_us.saturating_add(self.twopc.cfg.vote_timeout_us);
        self.twopc.counters.parked += 1;
        self.twopc.parked.push(Parked { on: Some(on), until_us, refusal: Some(refusal), work });
    }

    /// The part `stamp` was decided: what waited for it runs again at the end of the step
    /// (commits go back to the front of the queue in their order; read-only ones are
    /// validated again).
    fn unpark(&mut self, stamp: Stamp) {
        if self.twopc.parked.is_empty() {
            return;
        }
        let (ready, rest): (Vec<Parked>, Vec<Parked>) =
            std::mem::take(&mut self.twopc.parked).into_iter().partition(|p| p.on == Some(stamp));
        self.twopc.parked = rest;
        self.twopc.unparked.extend(ready.into_iter().map(|p| (p.work, None)));
    }

    /// Runs the work that was unparked, and refuses what waited too long.
    pub(super) fn run_unparked(&mut self, fx: &mut Vec<Effect>) {
        let now = self.now_us;
        if self.twopc.parked.iter().any(|p| p.until_us <= now) {
            let (late, rest): (Vec<Parked>, Vec<Parked>) =
                std::mem::take(&mut self.twopc.parked).into_iter().partition(|p| p.until_us <= now);
            self.twopc.parked = rest;
            self.twopc.unparked.extend(late.into_iter().map(|p| (p.work, p.refusal)));
        }
        if self.twopc.unparked.is_empty() {
            return;
        }
        let work = std::mem::take(&mut self.twopc.unparked);
        let mut front = Vec::new();
        for (w, refusal) in work {
            // Waited too long: refused as it would have been at first.
            self.twopc.no_park = refusal.is_some();
            match w {
                ParkedWork::Queued(q) => match refusal {
                    Some(r) if q.twopc.is_some() => {
                        self.twopc_refused(q, EngineError::Conflict(r), fx)
                    }
                    Some(r) => self.refuse(q.origin, r, fx),
                    None => front.push(q),
                },
                ParkedWork::ReadOnly(origin, c) => match refusal {
                    Some(r) => self.refuse(origin, r, fx),
                    None => self.commit(origin, c, fx),
                },
                ParkedWork::Prepare(origin, p) => self.prepare_request(origin, p, fx),
            }
            self.twopc.no_park = false;
        }
        self.requeue_front(front);
    }

    /// A record appended by two-phase commit is durable up to `lsn`.
    pub(super) fn twopc_records_durable(&mut self, lsn: Lsn, fx: &mut Vec<Effect>) {
        while let Some((&l, _)) = self.twopc.after_durable.first_key_value() {
            if l > lsn {
                break;
            }
            let (l, what) = self.twopc.after_durable.pop_first().expect("checked");
            match what {
                AfterDurable::PartCommitted(stamp) => {
                    if let Some(p) = self.part_publish(stamp, l, fx) {
                        self.twopc.counters.parts_committed += 1;
                        let me = self.me();
                        self.peer(p.coordinator, PeerMsg::DecideAck { stamp, from: me }, fx);
                    }
                }
                AfterDurable::CoordCommitted(stamp) => {
                    let p = self.part_publish(stamp, l, fx);
                    self.twopc.counters.decided_commit += 1;
                    let Some(c) = self.twopc.coords.get_mut(&stamp) else { continue };
                    let unacked: Vec<ServerId> =
                        c.others.iter().flatten().filter(|o| o.writes).map(|o| o.server).collect();
                    c.state =
                        CoordState::Telling { unacked: unacked.clone(), last_send_us: self.now_us };
                    if let Some(origin) = c.origin.take() {
                        let created = p.map(|p| p.created).unwrap_or_default();
                        let out = super::store::CommitOutcome { lsn: l, created };
                        self.answer_commit(origin, Ok(out), fx);
                    }
                    let me = self.me();
                    for s in &unacked {
                        self.peer(*s, PeerMsg::Decide { stamp, from: me, commit: true }, fx);
                    }
                    if unacked.is_empty() {
                        self.coord_end(stamp, fx);
                    }
                }
            }
        }
    }

    fn coord_end(&mut self, stamp: Stamp, fx: &mut Vec<Effect>) {
        if self.twopc.coords.remove(&stamp).is_some() {
            self.append_plain(record::encode_end((stamp.time_us, stamp.tie)), fx);
        }
    }

    /// A message from another server.
    pub(super) fn peer_message(&mut self, msg: PeerMsg, fx: &mut Vec<Effect>) {
        let me = self.me();
        if msg.from() == me {
            // A server never messages itself (its own vote and decision are counted where
            // they are made): a message claiming to be from this server is not one of its
            // own, and answering it would mean messaging itself.
            return;
        }
        match msg {
            PeerMsg::Vote { stamp, from, yes } => {
                if !yes {
                    return self.vote_no(stamp, fx);
                }
                self.vote_yes(stamp, from, fx);
            }
            PeerMsg::Query { stamp, from } => {
                let committed = matches!(
                    self.twopc.coords.get(&stamp).map(|c| &c.state),
                    Some(CoordState::Telling { .. })
                );
                if committed {
                    self.peer(from, PeerMsg::Decide { stamp, from: me, commit: true }, fx);
                } else {
                    self.vote_yes(stamp, from, fx);
                }
            }
            PeerMsg::Decide { stamp, from, commit } => {
                if self.twopc.parts.get(&stamp).is_some_and(|p| p.coordinator != from) {
                    // Only the part's coordinator decides it: a decision from another server
                    // (a confused or forged peer) changes nothing.
                    return;
                }
                let Some(p) = self.twopc.parts.get_mut(&stamp) else {
                    // Decided and forgotten (or never prepared here): acknowledge a commit so
                    // that the coordinator can end.
                    if commit {
                        let co = msg.from();
                        self.peer(co, PeerMsg::DecideAck { stamp, from: me }, fx);
                    }
                    return;
                };
                if !commit {
                    return self.part_abort(stamp, fx);
                }
                if p.committing || p.held.is_none() {
                    // A commit decision is only sent once every part is durable; a repeat
                    // while the record is being written needs nothing.
                    return;
                }
                p.committing = true;
                let d = record::Decision {
                    ts: (stamp.time_us, stamp.tie),
                    commit: true,
                    coordinator: false,
                    tell: Vec::new(),
                };
                let lsn = self.append_plain(record::encode_decision(&d), fx);
                self.twopc.after_durable.insert(lsn, AfterDurable::PartCommitted(stamp));
                if self.mutated(crate::mutants::Mutant::ParticipantAcksEarly) {
                    self.peer(from, PeerMsg::DecideAck { stamp, from: me }, fx);
                }
            }
            PeerMsg::AskVote { stamp, from } => self.vote_asked(stamp, from, fx),
            PeerMsg::DecideAck { stamp, from } => {
                let Some(c) = self.twopc.coords.get_mut(&stamp) else { return };
                let CoordState::Telling { unacked, .. } = &mut c.state else { return };
                unacked.retain(|s| *s != from);
                if unacked.is_empty() {
                    self.coord_end(stamp, fx);
                }
            }
        }
    }

    /// A no vote: the transaction aborts. If the client's prepare has not arrived yet (no
    /// entry, or only early votes), the abort is remembered (a tombstone) so that the prepare
    /// is refused at once when it comes, and this server never prepares its own part: without
    /// the tombstone it would prepare, hold its objects and wait for a vote that never comes
    /// until the vote timeout (issue 32's first cause of stalls).
    fn vote_no(&mut self, stamp: Stamp, fx: &mut Vec<Effect>) {
        if self.twopc.coords.contains_key(&stamp) {
            return self.coord_abort(stamp, fx);
        }
        if self.twopc.tombstones.contains(&stamp) {
            return;
        }
        if self.mutated(crate::mutants::Mutant::CoordinatorDropsEarlyNo) {
            return;
        }
        self.twopc.counters.early_no_votes += 1;
        self.tombstone(stamp);
    }

    /// Whether this coordinator can no longer commit `stamp`, of which it has no record: its
    /// own part could never validate, since every timestamp below the validation threshold is
    /// refused (`Cc::validate_at`). After a restart the threshold is the clock at recovery
    /// plus [`crate::limits::VALIDATION_LEAD_MAX_US`] (above every timestamp validated before
    /// the crash), so every transaction a participant prepared before the crash is below it
    /// when the clocks agree to within the restart's duration.
    /// A transaction at or above it may still see its client's prepare arrive: a vote or query
    /// about it is remembered as an early vote instead (bounded by the vote timeout).
    fn cannot_commit(&self, stamp: Stamp) -> bool {
        self.twopc.tombstones.contains(&stamp) || ts_of(stamp) < self.cc.threshold()
    }

    /// A yes vote (or a query, which repeats one) from `from`.
    fn vote_yes(&mut self, stamp: Stamp, from: ServerId, fx: &mut Vec<Effect>) {
        let refuse = self.cannot_commit(stamp)
            || self.twopc.coords.len() >= self.twopc.cfg.coords_max
            || self.twopc.parts.contains_key(&stamp);
        match self.twopc.coords.get_mut(&stamp) {
            Some(c) => {
                if c.state == CoordState::Voting && !c.yes.contains(&from) {
                    c.yes.push(from);
                }
                self.maybe_decide(stamp, fx);
            }
            None if refuse => self.presume_abort(stamp, from, fx),
            None => {
                // The client's prepare has not arrived yet: remember the vote (the vote
                // timeout bounds how long).
                let now = self.now_us;
                self.twopc.coords.insert(
                    stamp,
                    Coord {
                        others: None,
                        yes: vec![from],
                        origin: None,
                        started_us: now,
                        state: CoordState::Voting,
                        recovered: false,
                        lsn: None,
                        last_ask_us: now,
                    },
                );
            }
        }
    }

    fn presume_abort(&mut self, stamp: Stamp, to: ServerId, fx: &mut Vec<Effect>) {
        self.twopc.counters.presumed_aborts += 1;
        self.tombstone(stamp);
        let me = self.me();
        self.peer(to, PeerMsg::Decide { stamp, from: me, commit: false }, fx);
    }

    /// Time passed: queries, vote timeouts, resends, and the threshold after a restart.
    /// The earliest time at which two-phase commit acts on time alone: a participant's query,
    /// a coordinator's vote timeout, a decision's resend ([`Core::twopc_tick`]), parked work
    /// giving up ([`Core::run_unparked`]). `None`: nothing is waiting on time.
    pub(super) fn twopc_deadline_us(&self) -> Option<u64> {
        let me = self.me();
        let c = &self.twopc.cfg;
        let queries = self
            .twopc
            .parts
            .values()
            .filter(|p| p.coordinator != me && p.held.is_some() && !p.committing)
            .map(|p| p.last_query_us.saturating_add(c.query_after_us));
        let coords = self.twopc.coords.iter().filter_map(|(&stamp, co)| match &co.state {
            CoordState::Voting if co.recovered => Some(0),
            CoordState::Voting => {
                let timeout = co.started_us.saturating_add(c.vote_timeout_us);
                let ask = co
                    .missing_votes()
                    .next()
                    .map(|_| co.last_ask_us.saturating_add(c.ask_vote_after_us));
                let missed = co
                    .others
                    .is_none()
                    .then(|| co.started_us.saturating_add(c.prepare_wait_us))
                    .filter(|_| !self.prepare_parked(stamp));
                [ask, missed]
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or(Some(timeout), |t| Some(t.min(timeout)))
            }
            CoordState::Deciding => None,
            CoordState::Telling { last_send_us, .. } => {
                Some(last_send_us.saturating_add(c.resend_after_us))
            }
        });
        let parked = self.twopc.parked.iter().map(|p| p.until_us);
        queries.chain(coords).chain(parked).min()
    }

    /// Asserts two-phase commit's bookkeeping: the held bytes are the held records' sum, every
    /// prepare record by LSN names its part, every part's and coordinator's record was
    /// appended, versions are held only once durable, and a decision is told to each
    /// participant once.
    pub(super) fn twopc_check_invariants(&self) {
        let held: usize =
            self.twopc.parts.values().filter_map(|p| p.held.as_ref()).map(|h| h.record.len()).sum();
        assert_eq!(held, self.twopc.held_bytes, "two-phase held bytes are their sum");
        for (lsn, stamp) in &self.twopc.by_lsn {
            let p = self.twopc.parts.get(stamp);
            assert!(p.is_some_and(|p| p.lsn == *lsn), "prepare at {lsn:?} names its part");
        }
        for p in self.twopc.parts.values() {
            assert!(p.lsn < self.store.next_lsn(), "a part's prepare record was appended");
            if let Some(h) = &p.held {
                assert!(h.lsn <= self.store.durable_lsn(), "versions held once durable");
            }
        }
        for c in self.twopc.coords.values() {
            if let Some(lsn) = c.lsn {
                assert!(lsn < self.store.next_lsn());
            }
            if let CoordState::Telling { unacked, .. } = &c.state {
                assert!(unacked.windows(2).all(|w| w[0] != w[1]), "each participant told once");
            }
        }
    }

    pub(super) fn twopc_tick(&mut self, fx: &mut Vec<Effect>) {
        let now = self.now_us;
        let me = self.me();
        let (query_after_us, vote_timeout_us, resend_after_us) = {
            let c = &self.twopc.cfg;
            (c.query_after_us, c.vote_timeout_us, c.resend_after_us)
        };
        let mut queries = Vec::new();
        for (stamp, p) in self.twopc.parts.iter_mut() {
            if p.coordinator != me
                && p.held.is_some()
                && !p.committing
                && now.saturating_sub(p.last_query_us) >= query_after_us
            {
                p.last_query_us = now;
                queries.push((*stamp, p.coordinator));
            }
        }
        queries.sort_unstable();
        for (stamp, co) in queries {
            self.twopc.counters.queries_sent += 1;
            self.peer(co, PeerMsg::Query { stamp, from: me }, fx);
        }
        let prepare_wait_us = self.twopc.cfg.prepare_wait_us;
        let mut abort = Vec::new();
        let mut missed = Vec::new();
        let mut resend = Vec::new();
        for (stamp, c) in self.twopc.coords.iter_mut() {
            match &mut c.state {
                CoordState::Voting => {
                    let waited = now.saturating_sub(c.started_us);
                    if c.recovered || waited >= vote_timeout_us {
                        abort.push(*stamp);
                    } else if c.others.is_none() && waited >= prepare_wait_us {
                        missed.push(*stamp);
                    }
                }
                CoordState::Deciding => {}
                CoordState::Telling { unacked, last_send_us } => {
                    if now.saturating_sub(*last_send_us) >= resend_after_us {
                        *last_send_us = now;
                        resend.extend(unacked.iter().map(|s| (*stamp, *s)));
                    }
                }
            }
        }
        for stamp in abort {
            self.coord_abort(stamp, fx);
        }
        for stamp in missed {
            if !self.prepare_parked(stamp) {
                self.twopc.counters.prepares_missed += 1;
                self.coord_abort(stamp, fx);
            }
        }
        for (stamp, s) in resend {
            self.peer(s, PeerMsg::Decide { stamp, from: me, commit: true }, fx);
        }
        self.ask_votes(fx);
    }

    /// Asks the participants whose votes a coordinator still waits for, once
    /// [`TwoPcConfig::ask_vote_after_us`] passed since the client's prepare or the last ask
    /// (see *A vote that will never come*).
    fn ask_votes(&mut self, fx: &mut Vec<Effect>) {
        let (now, me, after) = (self.now_us, self.me(), self.twopc.cfg.ask_vote_after_us);
        let mut asks = Vec::new();
        for (stamp, c) in self.twopc.coords.iter_mut() {
            if c.state != CoordState::Voting
                || c.recovered
                || now.saturating_sub(c.last_ask_us) < after
            {
                continue;
            }
            let before = asks.len();
            asks.extend(c.missing_votes().map(|s| (*stamp, s)));
            if asks.len() > before {
                c.last_ask_us = now;
            }
        }
        for (stamp, s) in asks {
            self.twopc.counters.votes_asked += 1;
            self.peer(s, PeerMsg::AskVote { stamp, from: me }, fx);
        }
    }

    /// The coordinator `from` asks for this server's vote on `stamp`. A part prepared here
    /// votes yes again (its first vote may have been lost); a part on its way (queued, waiting,
    /// or its prepare record not yet durable) votes when it gets there, so nothing is said
    /// now. With no record and none coming the answer is no, and the abort is remembered (a
    /// tombstone) so that the client's prepare, should it come late, is refused: the
    /// participant never votes yes after it said no.
    fn vote_asked(&mut self, stamp: Stamp, from: ServerId, fx: &mut Vec<Effect>) {
        let me = self.me();
        if self.twopc.coords.contains_key(&stamp) {
            // This server coordinates it: the question is not one it can be asked.
            return;
        }
        if let Some(p) = self.twopc.parts.get(&stamp) {
            if p.coordinator == from && p.held.is_some() && !p.aborted_early && !p.committing {
                self.peer(from, PeerMsg::Vote { stamp, from: me, yes: true }, fx);
            }
            return;
        }
        if !self.twopc.tombstones.contains(&stamp) && self.twopc_part_coming(stamp) {
            return;
        }
        if self.twopc.read_only_yes.iter().any(|&(s, _)| s == stamp) {
            // A read-only part validated here (it keeps no other record): it voted yes, and
            // that vote was lost. Its entry in the validation queue constrains every later
            // validation, so the yes stands.
            self.twopc.counters.asked_read_only_yes += 1;
            return self.peer(from, PeerMsg::Vote { stamp, from: me, yes: true }, fx);
        }
        self.twopc.counters.asked_votes_no += 1;
        self.tombstone(stamp);
        self.peer(from, PeerMsg::Vote { stamp, from: me, yes: false }, fx);
    }

    /// Whether the client's prepare of `stamp` waits here for the clock (before it is
    /// queued, so before the transaction is registered as coordinated here).
    fn prepare_parked(&self, stamp: Stamp) -> bool {
        self.twopc
            .parked
            .iter()
            .any(|p| matches!(&p.work, ParkedWork::Prepare(_, p) if p.stamp == stamp))
    }

    /// Whether a part of `stamp` is on its way here: queued for validation, or waiting (for
    /// the clock, or for a part in doubt here).
    fn twopc_part_coming(&self, stamp: Stamp) -> bool {
        let queued = |q: &Queued| q.twopc.as_ref().is_some_and(|i| i.stamp == stamp);
        self.queue.iter().any(queued)
            || self.twopc.parked.iter().any(|p| match &p.work {
                ParkedWork::Queued(q) => queued(q),
                ParkedWork::Prepare(_, p) => p.stamp == stamp,
                ParkedWork::ReadOnly(..) => false,
            })
    }

    /// Replays a two-phase record at `lsn` (recovery). `r` is what the store made of it.
    pub(super) fn twopc_replay(&mut self, lsn: Lsn, r: Replay) {
        let me = self.me();
        match r {
            Replay::Commit(_) | Replay::Nothing => unreachable!("replayed in Core::replay"),
            Replay::Prepare(rep, section, held) => {
                let stamp = stamp_of((rep.ts.time_us, rep.ts.server));
                let held_lsn = held.lsn;
                self.cc.restore_committing(rep.ts, &rep.reads, &rep.writes);
                self.twopc.held_bytes += held.record.len();
                self.twopc.parts.insert(
                    stamp,
                    Part {
                        coordinator: section.coordinator,
                        lsn: held.lsn,
                        held: Some(held),
                        origin: None,
                        committer: None,
                        writes: rep.writes.clone(),
                        created: Vec::new(),
                        last_query_us: 0,
                        aborted_early: false,
                        committing: false,
                        since_us: 0,
                    },
                );
                if section.coordinator == me {
                    let others = section
                        .participants
                        .iter()
                        .filter(|(s, _)| *s != me)
                        .map(|&(server, writes)| Participant { server, writes })
                        .collect();
                    self.twopc.coords.insert(
                        stamp,
                        Coord {
                            others: Some(others),
                            yes: Vec::new(),
                            origin: None,
                            started_us: 0,
                            state: CoordState::Voting,
                            recovered: true,
                            lsn: Some(held_lsn),
                            last_ask_us: 0,
                        },
                    );
                }
            }
            Replay::Decide(d) => {
                let stamp = stamp_of(d.ts);
                if let Some(p) = self.twopc.parts.remove(&stamp) {
                    let h = p.held.expect("replayed parts hold their versions");
                    self.twopc.held_bytes -= h.record.len();
                    if d.commit {
                        self.store.publish_held(&h);
                        self.cc.committed(ts_of(stamp), None);
                        let crc = thor_core::checksum::crc32c(&h.record);
                        let mark = (stamp.time_us, stamp.tie, crc);
                        self.note_change(lsn, mark, p.writes, None);
                    } else {
                        self.cc.aborted(ts_of(stamp));
                    }
                } else if d.commit {
                    // Its prepare is below the checkpoint: what it wrote is installed but not
                    // known here, so no client point before it can be trusted.
                    self.resume.history.forget_through(lsn);
                }
                if d.coordinator {
                    if d.commit {
                        if let Some(c) = self.twopc.coords.get_mut(&stamp) {
                            c.recovered = false;
                            c.state = CoordState::Telling { unacked: d.tell, last_send_us: 0 };
                        }
                    } else {
                        self.twopc.coords.remove(&stamp);
                    }
                }
            }
            Replay::End(ts) => {
                self.twopc.coords.remove(&stamp_of(ts));
            }
        }
    }
}
