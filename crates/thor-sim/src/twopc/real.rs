//! Real clients in the cluster of several servers: thor's own client protocol
//! ([`thor_client::proto::ClientCore`]) runs the two-phase world's transfers and audits beside
//! the simulated clients, under the same crashes, lost connections and latencies.
//!
//! A real client keeps one core per server, as `thor_client::Cluster` keeps one `Session`
//! per server, and is the two-phase commit's client side the way `Cluster` is: it begins the
//! transaction at each server it uses (a core may ask for a refresh first), reads each account
//! through [`ClientCore::read`] (fetching on a miss), writes the transfer's new balances with
//! [`ClientCore::write`], then sends every server its part ([`ClientCore::prepare`]) under
//! one header (the stamp, the coordinator: the server of the first write, and the
//! participants) and ends every part that voted with the decision
//! ([`ClientCore::finish_part`]): the coordinator's `CommitOk`, or, with no coordinator (an
//! audit, read-only), every part's vote. The cores build every request (piggybacked
//! acknowledgements, discards, the refresh decision) and apply every reply (invalidations
//! before the body, dooming the open transaction they hit); the world only carries messages.
//!
//! With several servers an audit goes to the servers too: a core may commit a read-only
//! transaction by itself ([`ClientCore::commit_here`]) only when its server said its reads
//! were settled, which a server with peers never says, and the parts of a transaction over
//! several servers are serializable only together, which no single core can judge. With one
//! server (no peers) a transaction is a plain commit ([`ClientCore::commit`]), and an audit
//! first tries `commit_here`, which the history checker judges like any other commit.
//!
//! Faults: a broken connection goes to [`ClientCore::disconnected`] (an open transaction is
//! doomed; a part whose answer was awaited is aborted in that core), and the next use of the
//! server connects again and resumes the session ([`ClientCore::resume`]). A transaction that
//! loses a server before it is prepared is abandoned (it is not in the history); one that
//! loses its coordinator's answer (or, read-only, any part's) is *uncertain*, as a simulated
//! client's is, and joins the history as such: the final state decides it. Every transaction
//! joins the same liveness check as the simulated clients' (one open step from its start to
//! its end).
//!
//! Each real client's configuration (cache size, refresh interval, prefetch) comes from a
//! stream of its own; what it does at run time (which accounts, how much) is drawn from the
//! run's stream, as the simulated clients' choices are. Whether a seed runs real clients is
//! drawn from a stream of its own ([`clients_of`]), so a seed without them replays exactly as
//! before they existed.

use std::time::Duration;

use thor_client::proto::{ClientCore, Event, PartOutcome, Read, Seeds};
use thor_client::{ClientError, SessionConfig};
use thor_core::Lsn;
use thor_core::Oref;
use thor_core::le::u32_at;
use thor_server::ConnId;
use thor_storage::SplitMix64;
use thor_wire::{Reply, ReplyBody, Request, Stamp};

use super::{BALANCE_AT, TXN_AT, Use, Violation, WRITER_AT, World, participants_of, stamp_of};

/// How many real clients seed `seed` runs (none in a third of the seeds, one or two in the
/// others), and whether it runs one server (a quarter of the seeds); a seed with neither
/// replays as before either existed.
pub(super) fn merged_of(seed: u64) -> (usize, bool) {
    let mut r = SplitMix64::new(seed ^ 0x4EA1_2BC0_0000_0000);
    let real = [0, 1, 2][r.below(3) as usize];
    (real, r.below(4) == 0)
}

/// What a real client's connection to one server waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    /// `HelloOk` on a new connection.
    Hello,
    /// The answer to the `Resume` of the session on a new connection.
    Resume,
    /// The refresh the core asked for at `begin`.
    Refresh,
    /// A fetch of an account the transaction reads.
    Fetch,
    /// The answer to the transaction's part (`Prepare`).
    Part,
}

/// A part of the open transaction, once it is prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PartState {
    /// The server is not a participant.
    None,
    /// Its answer is awaited.
    Awaiting,
    /// It voted yes (the orefs of its created objects: none here); the core holds the part
    /// for [`ClientCore::finish_part`].
    Voted(Vec<Oref>),
    /// It was refused: the core aborted it, and the transaction aborts.
    Ended,
    /// Its answer (or, after it voted, its connection) was lost, or the server answered
    /// neither a vote nor a refusal: the core aborted it, but the transaction may commit.
    Lost,
}

/// A transaction in progress at a real client.
#[derive(Debug)]
struct RealTxn {
    id: u32,
    uses: Vec<Use>,
    /// What a transfer moves (at most what the first account holds).
    amount: u32,
    /// Per server: the transaction is begun in its core.
    begun: Vec<bool>,
    stamp: Stamp,
    coordinator: Option<usize>,
    /// Per server, once prepared.
    parts: Vec<PartState>,
    prepared: bool,
    /// Known outcome: committed (at the coordinator's LSN; 0 for a read-only transaction) or
    /// aborted.
    outcome: Option<Result<Lsn, ()>>,
    /// Abandoned before its prepare (doomed, or a connection broke), or its outcome cannot be
    /// learned (the coordinator's answer, or a read-only part's, was lost).
    broken: bool,
    started_us: u64,
}

/// A real client (see the module documentation).
pub(super) struct RealClient {
    /// One core per server, made at the first `HelloOk` from it and kept across connections.
    cores: Vec<Option<ClientCore>>,
    /// Per server: the connection the client uses (or waits to hear is broken).
    conns: Vec<Option<ConnId>>,
    /// Per server: what its connection waits for, and the id of the request it awaits.
    waiting: Vec<(Wait, u64)>,
    session: SessionConfig,
    rng: SplitMix64,
    txn: Option<RealTxn>,
    next_txn: u32,
}

impl RealClient {
    /// Real client `c` (its world index) of the run of `seed` with `servers` servers.
    pub(super) fn new(seed: u64, c: usize, servers: usize) -> RealClient {
        let mut rng = SplitMix64::new(seed ^ 0x4EA1_C11E_2BC0_0000 ^ (c as u64) << 20);
        let session = SessionConfig {
            cache_bytes: [32 << 10, 1 << 20][rng.below(2) as usize],
            prefetch_pages: Some(rng.below(3) as u16),
            // Now and then a transaction collects the pending invalidations first.
            refresh_after: Some(Duration::from_millis(1 + rng.below(20))),
            ..SessionConfig::default()
        };
        RealClient {
            cores: (0..servers).map(|_| None).collect(),
            conns: vec![None; servers],
            waiting: vec![(Wait::Nothing, 0); servers],
            session,
            rng,
            txn: None,
            next_txn: 1,
        }
    }

    /// What it is doing, for a liveness violation.
    pub(super) fn describe(&self) -> String {
        match &self.txn {
            Some(t) => format!(
                "its transaction {} started at {} us, stamp {}, waiting {:?}, parts {:?}",
                t.id, t.started_us, t.stamp, self.waiting, t.parts
            ),
            None => format!("no transaction, waiting {:?}", self.waiting),
        }
    }

    /// Whether a request of the open transaction (a refresh, fetch or part) awaits its
    /// answer at some server.
    fn txn_waits(&self) -> bool {
        self.waiting.iter().any(|(w, _)| matches!(w, Wait::Refresh | Wait::Fetch | Wait::Part))
    }
}

/// A client error the protocol did not expect: a violation.
fn broken(c: usize, what: &str, e: impl std::fmt::Display) -> Violation {
    Violation(format!("real client {c}: {what}: {e}"))
}

impl World {
    fn real(&mut self, c: usize) -> &mut RealClient {
        self.clients[c].real.as_mut().expect("a real client")
    }

    fn now_ns(&self) -> u64 {
        self.now * 1_000
    }

    /// Real client `c` sends `req` to server `s` and waits for its answer.
    fn real_send(&mut self, c: usize, s: usize, req: Request, wait: Wait) {
        let id = self.transmit(c, s, req);
        self.real(c).waiting[s] = (wait, id);
    }

    /// Real client `c` starts its next transaction if it has none and has work left, then
    /// advances it.
    pub(super) fn real_wake(&mut self, c: usize) -> Result<(), Violation> {
        if self.real(c).txn.is_none() {
            if !self.has_work(c) {
                return Ok(());
            }
            let (uses, amount) = self.choose_uses();
            let servers = self.cfg.servers;
            let now = self.now;
            let r = self.real(c);
            let id = r.next_txn;
            r.next_txn += 1;
            r.txn = Some(RealTxn {
                id,
                uses,
                amount,
                begun: vec![false; servers],
                stamp: Stamp::default(),
                coordinator: None,
                parts: vec![PartState::None; servers],
                prepared: false,
                outcome: None,
                broken: false,
                started_us: now,
            });
            self.trace(|| format!("real client {c} starts txn {id}"));
            self.progress.asked(c, self.now);
        }
        self.real_advance(c)
    }

    /// Advances real client `c`'s open transaction as far as it can go without an answer:
    /// connects, begins and reads at each server it uses in turn, then prepares.
    fn real_advance(&mut self, c: usize) -> Result<(), Violation> {
        let now_ns = self.now_ns();
        let Some(t) = self.real(c).txn.as_ref() else { return Ok(()) };
        if t.prepared || t.broken {
            return Ok(());
        }
        for i in 0..t.uses.len() {
            let s = self.real(c).txn.as_ref().expect("open").uses[i].server;
            if self.real(c).waiting[s].0 != Wait::Nothing {
                return Ok(());
            }
            if self.real(c).conns[s].is_none() {
                return self.real_connect(c, s);
            }
            let r = self.real(c);
            let core = r.cores[s].as_mut().expect("a resumed connection has its core");
            let t = r.txn.as_mut().expect("open");
            if !t.begun[s] {
                t.begun[s] = true;
                if let Some(req) = core.begin(now_ns).map_err(|e| broken(c, "begin", e))? {
                    self.real_send(c, s, req, Wait::Refresh);
                    return Ok(());
                }
            }
            if t.uses[i].seen.is_some() {
                continue;
            }
            let account = t.uses[i].account;
            let o = self.servers[s].accounts[account];
            let r = self.real(c);
            let core = r.cores[s].as_mut().expect("connected");
            match core.read(o) {
                Ok(Read::Hit(bytes)) => {
                    let seen = (
                        u32_at(&bytes, WRITER_AT),
                        u32_at(&bytes, TXN_AT),
                        u32_at(&bytes, BALANCE_AT),
                    );
                    r.txn.as_mut().expect("open").uses[i].seen = Some(seen);
                }
                Ok(Read::Send(req)) => {
                    self.real_send(c, s, *req, Wait::Fetch);
                    return Ok(());
                }
                Err(e) if e.is_conflict() => return self.real_abandon(c),
                Err(e) => return Err(broken(c, "read", e)),
            }
        }
        self.real_prepare(c)
    }

    /// Opens real client `c`'s connection to server `s` (its core resumes the session once
    /// the server says `HelloOk`).
    fn real_connect(&mut self, c: usize, s: usize) -> Result<(), Violation> {
        let conn_before = self.next_conn;
        let opened = self.connect(c, s, "sim-real");
        // The connection the client waits on: the one just opened (a refused one too, whose
        // break the client hears of).
        self.real(c).conns[s] = Some(conn_before);
        let id = self.clients[c].next_id - 1;
        self.real(c).waiting[s] = (Wait::Hello, if opened { id } else { 0 });
        Ok(())
    }

    /// Real client `c`'s open transaction is doomed (an invalidation hit it, or a connection
    /// broke) before its prepare: it is abandoned, and ends once no request of it is in
    /// flight.
    fn real_abandon(&mut self, c: usize) -> Result<(), Violation> {
        if let Some(t) = self.real(c).txn.as_mut()
            && !t.broken
        {
            t.broken = true;
            self.out.real_doomed += 1;
        }
        self.real_settle(c)
    }

    /// Real client `c` read every account: it writes the transfer's new balances and
    /// prepares at every server it used.
    fn real_prepare(&mut self, c: usize) -> Result<(), Violation> {
        let now = self.now;
        let mut t = self.real(c).txn.take().expect("open");
        if t.uses
            .iter()
            .any(|u| self.real(c).cores[u.server].as_ref().is_none_or(|k| k.is_doomed()))
        {
            // Doomed by a reply at another server since its read: nothing is sent.
            self.real(c).txn = Some(t);
            return self.real_abandon(c);
        }
        for i in 0..t.uses.len() {
            let u = t.uses[i];
            if !u.writes {
                continue;
            }
            let balance = self.new_balance(c, t.id, &t.uses, t.amount, i);
            let o = self.servers[u.server].accounts[u.account];
            let core = self.real(c).cores[u.server].as_mut().expect("connected");
            core.write(o, WRITER_AT, &(c as u32 + 1).to_le_bytes())
                .and_then(|()| core.write(o, TXN_AT, &t.id.to_le_bytes()))
                .and_then(|()| core.write(o, BALANCE_AT, &balance.to_le_bytes()))
                .map_err(|e| broken(c, "write", e))?;
        }
        t.stamp = stamp_of(c, t.id, now);
        let (participants, coordinator) = participants_of(&t.uses);
        t.coordinator = coordinator;
        let now_ns = self.now_ns();
        if self.cfg.servers == 1 {
            return self.real_commit(c, t);
        }
        for p in &participants {
            let s = p.server.0 as usize - 1;
            let header = (t.stamp, coordinator.map(|s| thor_core::ServerId(s as u32 + 1)));
            let core = self.real(c).cores[s].as_mut().expect("connected");
            let req = core
                .prepare(header.0, header.1, participants.clone(), now_ns)
                .map_err(|e| broken(c, "prepare", e))?;
            t.parts[s] = PartState::Awaiting;
            self.real_send(c, s, req, Wait::Part);
        }
        t.prepared = true;
        self.trace(|| format!("real client {c} prepares txn {} at {}", t.id, t.stamp));
        self.real(c).txn = Some(t);
        Ok(())
    }

    /// With one server: real client `c` commits `t` there, a read-only one at the client if
    /// the server's last reply said its reads were settled ([`ClientCore::commit_here`]: a
    /// server without peers says so), else with a `Commit`.
    fn real_commit(&mut self, c: usize, mut t: RealTxn) -> Result<(), Violation> {
        let now_ns = self.now_ns();
        let core = self.real(c).cores[0].as_mut().expect("connected");
        t.prepared = true;
        t.parts[0] = PartState::Awaiting;
        if t.uses.iter().all(|u| !u.writes) {
            match core.commit_here() {
                Ok(Some(info)) => {
                    self.trace(|| format!("real client {c} commits txn {} here", t.id));
                    self.out.real_read_only_here += 1;
                    t.parts[0] = PartState::Ended;
                    t.outcome = Some(Ok(info.lsn));
                    self.real(c).txn = Some(t);
                    return self.real_settle(c);
                }
                Ok(None) => {}
                Err(e) if e.is_conflict() => {
                    t.prepared = false;
                    self.real(c).txn = Some(t);
                    return self.real_abandon(c);
                }
                Err(e) => return Err(broken(c, "commit here", e)),
            }
        }
        let core = self.real(c).cores[0].as_mut().expect("connected");
        let req = core.commit(now_ns).map_err(|e| broken(c, "commit", e))?;
        self.trace(|| format!("real client {c} commits txn {}", t.id));
        self.real(c).txn = Some(t);
        self.real_send(c, 0, req, Wait::Part);
        Ok(())
    }

    /// A message arrives at real client `c` from server `s` on `conn`: a reply, or (`None`)
    /// the news that the connection broke. Messages of a connection the client no longer
    /// uses are ignored.
    pub(super) fn at_real_client(
        &mut self,
        c: usize,
        s: usize,
        conn: ConnId,
        msg: Option<(u64, Reply)>,
    ) -> Result<(), Violation> {
        if self.real(c).conns[s] != Some(conn) {
            return Ok(());
        }
        match msg {
            None => self.real_broken(c, s, conn),
            Some((rid, reply)) => self.real_reply(c, s, rid, reply),
        }
    }

    /// Real client `c`'s connection to server `s` broke: the core learns it, and the open
    /// transaction, if it used the server, is abandoned (before its prepare) or loses that
    /// part.
    fn real_broken(&mut self, c: usize, s: usize, conn: ConnId) -> Result<(), Violation> {
        let now_ns = self.now_ns();
        if self.clients[c].links[s].as_ref().is_some_and(|l| l.conn == conn) {
            self.clients[c].links[s] = None;
        }
        let r = self.real(c);
        r.conns[s] = None;
        r.waiting[s] = (Wait::Nothing, 0);
        if let Some(core) = r.cores[s].as_mut() {
            core.disconnected();
        }
        let Some(t) = r.txn.as_mut() else { return Ok(()) };
        if !t.uses.iter().any(|u| u.server == s) {
            return Ok(());
        }
        if !t.prepared {
            return self.real_abandon(c);
        }
        match std::mem::replace(&mut t.parts[s], PartState::Lost) {
            // The core aborted the part whose answer the break lost.
            PartState::Awaiting => {}
            // A part that voted is ended here without the decision, as `Cluster` ends a part
            // whose session broke: what it wrote leaves the cache (the transaction may yet
            // commit, and then the copies from before it are stale).
            PartState::Voted(_) => {
                let core = r.cores[s].as_mut().expect("it voted");
                core.finish_part(PartOutcome::Unknown, now_ns)
                    .map_err(|e| broken(c, "finish", e))?;
            }
            p @ (PartState::None | PartState::Ended | PartState::Lost) => t.parts[s] = p,
        }
        // The coordinator's answer (read-only: every part's vote) decides; lost, the outcome
        // is unknown here.
        if t.outcome.is_none() && t.coordinator.is_none_or(|co| co == s) {
            t.broken = true;
        }
        self.real_settle(c)
    }

    /// Real client `c` gets the reply `rid` from server `s`.
    fn real_reply(&mut self, c: usize, s: usize, rid: u64, reply: Reply) -> Result<(), Violation> {
        let (wait, sent) = std::mem::replace(&mut self.real(c).waiting[s], (Wait::Nothing, 0));
        if rid != sent || wait == Wait::Nothing {
            return Err(Violation(format!(
                "real client {c} got the reply to request {rid} from server {}, waiting for {sent} ({wait:?})",
                s + 1
            )));
        }
        if wait == Wait::Hello {
            return self.real_hello(c, s, reply);
        }
        let now_ns = self.now_ns();
        let core = self.real(c).cores[s].as_mut().expect("connected");
        let event = core.receive(reply, now_ns).map_err(|e| broken(c, "receive", e))?;
        self.trace(|| format!("real client {c}: server {} says {event:?}", s + 1));
        match (wait, event) {
            // The answer about a commit whose connection broke: its transaction already ended
            // as uncertain, and the final state decides it.
            (Wait::Resume, Event::Resumed { .. } | Event::Committed(_) | Event::Refused(_))
            | (Wait::Resume, Event::Unknown(_)) => self.real_wake(c),
            (Wait::Refresh | Wait::Fetch, Event::Ready | Event::Fetched(_)) => {
                if self.real(c).txn.as_ref().is_some_and(|t| t.broken) {
                    self.real_settle(c)
                } else {
                    self.real_advance(c)
                }
            }
            (Wait::Refresh | Wait::Fetch, Event::Doomed(_)) => self.real_abandon(c),
            (Wait::Part, event) => self.real_part(c, s, event),
            (w, e) => Err(Violation(format!("real client {c} waiting for {w:?} got {e:?}"))),
        }
    }

    /// Real client `c`'s `HelloOk` from server `s`: the core is made at the first, and every
    /// connection resumes the session (the first registers its key).
    fn real_hello(&mut self, c: usize, s: usize, reply: Reply) -> Result<(), Violation> {
        let ReplyBody::HelloOk(info) = reply.body else {
            return Err(Violation(format!("real client {c}'s Hello answered {:?}", reply.body)));
        };
        let r = self.real(c);
        if r.cores[s].is_none() {
            let seeds = Seeds { key: r.rng.next_u64(), commit_ids: r.rng.next_u64() };
            let core = ClientCore::new(info, r.session, seeds, None, true)
                .map_err(|e| broken(c, "a new core", e))?;
            r.cores[s] = Some(core);
        }
        let core = r.cores[s].as_mut().expect("made");
        match core.resume(info).map_err(|e| broken(c, "resume", e))? {
            Some(req) => {
                self.real_send(c, s, req, Wait::Resume);
                Ok(())
            }
            None => Err(Violation(format!("real client {c}: server {} cannot resume", s + 1))),
        }
    }

    /// Server `s`'s answer to real client `c`'s part.
    fn real_part(&mut self, c: usize, s: usize, event: Event) -> Result<(), Violation> {
        let t = self.real(c).txn.as_mut().expect("a part belongs to the open transaction");
        match event {
            // One server: the commit's answer ends it (the core ended the transaction).
            Event::Committed(info) => {
                t.parts[s] = PartState::Ended;
                t.outcome = Some(Ok(info.lsn));
            }
            Event::Voted { lsn, created } => {
                t.parts[s] = PartState::Voted(created);
                match (lsn, t.coordinator) {
                    (Some(lsn), Some(co)) if co == s => t.outcome = Some(Ok(lsn)),
                    (Some(_), _) => {
                        return Err(Violation(format!(
                            "real client {c}: server {} committed a part it does not coordinate",
                            s + 1
                        )));
                    }
                    (None, None) => {
                        let all = t
                            .parts
                            .iter()
                            .all(|p| matches!(p, PartState::None | PartState::Voted(_)));
                        if all && t.outcome.is_none() {
                            t.outcome = Some(Ok(Lsn(0)));
                        }
                    }
                    (None, Some(co)) if co == s => {
                        return Err(Violation(format!(
                            "real client {c}: its coordinator, server {}, answered Prepared",
                            s + 1
                        )));
                    }
                    (None, Some(_)) => {}
                }
            }
            // An error that is not a refusal (the server's `Error`) says nothing of the
            // outcome.
            Event::Refused(ClientError::Server { .. } | ClientError::Unexpected(_)) => {
                t.parts[s] = PartState::Lost;
                if t.coordinator.is_none_or(|co| co == s) && t.outcome.is_none() {
                    t.broken = true;
                }
            }
            Event::Refused(_) => {
                t.parts[s] = PartState::Ended;
                if t.coordinator.is_none_or(|co| co == s) {
                    t.outcome = Some(Err(()));
                }
            }
            e => return Err(Violation(format!("real client {c}: a part answered {e:?}"))),
        }
        self.real_settle(c)
    }

    /// Ends real client `c`'s transaction once it is decided (or abandoned, or its outcome
    /// cannot be learned) and no request of it is in flight: every part that voted is ended
    /// with the decision, every other core's transaction aborted; a prepared transaction
    /// joins the history; the next starts after a while.
    fn real_settle(&mut self, c: usize) -> Result<(), Violation> {
        let now_ns = self.now_ns();
        let r = self.real(c);
        let Some(t) = r.txn.as_ref() else { return Ok(()) };
        if !(t.broken || t.outcome.is_some()) || r.txn_waits() {
            return Ok(());
        }
        let t = r.txn.take().expect("checked");
        let decided = match &t.outcome {
            Some(Ok(lsn)) => Some(*lsn),
            _ => None,
        };
        let maybe_committed = !matches!(t.outcome, Some(Err(())));
        let r = self.real(c);
        for (s, part) in t.parts.iter().enumerate() {
            let Some(core) = r.cores[s].as_mut() else { continue };
            match part {
                PartState::Voted(created) => {
                    let outcome = match decided {
                        Some(lsn) => PartOutcome::Committed(lsn, created.as_slice()),
                        // Ended without the decision, by a transaction that may have
                        // committed: what the part wrote leaves the cache.
                        None if maybe_committed => PartOutcome::Unknown,
                        None => PartOutcome::Aborted,
                    };
                    core.finish_part(outcome, now_ns).map_err(|e| broken(c, "finish", e))?;
                }
                _ if core.in_transaction() => core.abort().map_err(|e| broken(c, "abort", e))?,
                _ => {}
            }
        }
        let outcome = match (t.outcome, t.broken) {
            (Some(o), _) => Some(o.is_ok()),
            (None, _) => None,
        };
        if t.prepared {
            let order = self.order_of(t.stamp, &t.uses, decided);
            self.record(c, t.id, order, &t.uses, outcome);
            match outcome {
                Some(true) => self.out.real_commits += 1,
                None => self.out.real_uncertain += 1,
                Some(false) => {}
            }
        }
        self.trace(|| format!("real client {c} ends txn {}: {outcome:?}", t.id));
        self.txn_ended(c, t.prepared && outcome == Some(true));
        Ok(())
    }
}
