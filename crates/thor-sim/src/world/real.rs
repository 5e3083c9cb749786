//! Real clients: thor's own client protocol ([`thor_client::proto::ClientCore`]) in the
//! simulated world, under its crashes, lost connections and latencies.
//!
//! A real client is driven here the way `Session` drives its core, one message at a time: the
//! core builds every request (with its piggybacked acknowledgements, discards, demotions and
//! contention report) and takes every reply (applying invalidations before the body, dooming
//! the open transaction they hit, ending commits). The world only carries the messages and
//! records what the client observed, so a bug in the client's protocol shows to the same
//! checkers as a bug in the server's: a stale read that committed is a cycle in the history.
//!
//! Each transaction reads one to three cells (or two accounts, a third of the time, for a
//! transfer) through [`ClientCore::read`], fetching on a miss, and writes its client's number
//! and the transaction's into some of them ([`ClientCore::write`]), so that every write is a
//! unique version the checkers can trace; one that writes nothing first tries the core's
//! read-only commit at the client ([`ClientCore::commit_here`]), which must be serializable
//! too (it joins the history unordered, as a read-only transaction validated at the server
//! does). A doomed transaction is abandoned (it never reached a commit, so it is not in the
//! history) and the next one starts after a think time.
//!
//! A broken connection goes to [`ClientCore::disconnected`]; on the next connection the
//! client resumes its session ([`ClientCore::resume`], as a reconnecting `Session` does: its
//! commits carry ids), and the `Resume`'s answer ends a commit whose answer was lost:
//! committed, not done (it joins the history as aborted: a server that says so wrongly shows
//! as a read of an aborted write), or unknown (the recovered log decides, as for the
//! simulated clients' uncertain commits).
//!
//! Every choice a real client makes is drawn from a stream of its own (its seed is the run's
//! with the client's number mixed in), so a run without real clients draws what it drew
//! before they existed. What the world draws for its messages (latency, loss) comes from the
//! run's stream.

use std::time::Duration;

use thor_client::SessionConfig;
use thor_client::proto::{ClientCore, Event, Read, Seeds};
use thor_core::Oref;
use thor_core::le::u32_at;
use thor_server::ConnId;
use thor_storage::SplitMix64;
use thor_wire::{Reply, ReplyBody, Request, RequestBody};

use super::{ACCOUNTS, CELL_TXN_AT, CELL_WRITER_AT, Ev, Msg, World, serial, version_of};
use crate::check::Violation;

/// The client caches of real clients: in a third of the clients eight frames of 4 KB, fewer
/// than a run's database spans (with the larger cells of half the seeds) plus what a prefetch
/// brings, so that replacement evicts pages under the faults; the others hold everything.
const REAL_CACHE_BYTES: [usize; 3] = [32 << 10, 256 << 10, 4 << 20];

/// What a real client waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RealWaiting {
    Nothing,
    Hello,
    /// The `Resume` of its session on a new connection.
    Resume,
    /// The refresh the core asked for at `begin`.
    Refresh,
    /// A fetch (or prefetch) of the open transaction's read.
    Fetch,
    /// The commit of transaction `t`.
    Commit(u32),
}

/// A transaction in progress at a real client.
#[derive(Debug)]
struct RealTxn {
    /// The cells it reads, in order.
    cells: Vec<Oref>,
    /// What it read: each cell and the version it saw.
    read: Vec<(Oref, serial::Version)>,
    /// A bank transfer: this amount moves from the first cell (an account) to the second.
    transfer: Option<i64>,
    /// Whether it wrote each cell it read (at once after reading it, while the cache surely
    /// holds it: a later write could find it evicted).
    wrote: Vec<bool>,
}

/// A real client (see the module documentation).
pub(super) struct RealClient {
    /// Its number, after the simulated clients'.
    pub id: u32,
    pub conn: Option<ConnId>,
    pub waiting: RealWaiting,
    /// The protocol core: made at the first `HelloOk`, kept across connections.
    core: Option<ClientCore>,
    /// Its choices.
    rng: SplitMix64,
    /// The core's configuration.
    session: SessionConfig,
    pub next_id: u64,
    next_txn: u32,
    /// Commits completed (acknowledged, refused, or ended by a broken connection).
    pub done: usize,
    txn: Option<RealTxn>,
    /// The history entry of the commit in flight (or in doubt after a broken connection).
    in_flight: Option<(u32, serial::Txn)>,
}

impl std::fmt::Debug for RealClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealClient")
            .field("id", &self.id)
            .field("conn", &self.conn)
            .field("waiting", &self.waiting)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl RealClient {
    /// Real client `id` of the run of `seed`; `prefetch`: the run's clients prefetch this
    /// many further pages.
    pub(super) fn new(seed: u64, id: u32, prefetch: Option<u16>) -> RealClient {
        let mut rng = SplitMix64::new(seed ^ 0x4EA1_C11E_0000_0000 ^ u64::from(id) << 20);
        let session = SessionConfig {
            cache_bytes: REAL_CACHE_BYTES[rng.below(3) as usize],
            prefetch_pages: Some(prefetch.unwrap_or(0)),
            // Now and then a transaction collects the pending invalidations first.
            refresh_after: Some(Duration::from_millis(1 + rng.below(20))),
            read_only_at_client: rng.below(2) == 0,
            ..SessionConfig::default()
        };
        RealClient {
            id,
            conn: None,
            waiting: RealWaiting::Nothing,
            core: None,
            rng,
            session,
            next_id: 1,
            next_txn: 1,
            done: 0,
            txn: None,
            in_flight: None,
        }
    }
}

/// A client error the protocol did not expect: a violation (the core refused what the world
/// did, or the server answered nonsense).
fn broken(id: u32, what: &str, e: impl std::fmt::Display) -> Violation {
    Violation(format!("real client {id}: {what}: {e}"))
}

impl World {
    /// The world index of real client `r` (after the simulated clients).
    fn real_index(&self, r: usize) -> usize {
        self.clients.len() + r
    }

    /// Wakes every real client within the next millisecond (at the start, and when the calm
    /// begins), each at a time drawn from its own stream.
    pub(super) fn real_wake_all(&mut self) {
        for r in 0..self.real.len() {
            let d = self.real[r].rng.below(1_000);
            let c = self.real_index(r);
            self.at(d, Ev::ClientWake(c));
        }
    }

    /// A message arrives at real client `r` on `conn` (ignored if that connection is not its
    /// current one).
    pub(super) fn at_real_client(
        &mut self,
        r: usize,
        conn: ConnId,
        msg: Msg,
    ) -> Result<(), Violation> {
        if self.real[r].conn != Some(conn) {
            return Ok(());
        }
        let think = 10 + self.real[r].rng.below(1_500);
        match msg {
            Msg::Broken => {
                self.real_broken(r);
                Ok(())
            }
            Msg::Reply(rid, reply, close) => self.real_reply(r, (rid, reply, close), think),
            Msg::Connect | Msg::Request(..) => Err(Violation("a request sent to a client".into())),
        }
    }

    /// Frames the real clients' caches evicted in the run.
    pub(super) fn real_frames_evicted(&self) -> u64 {
        let cores = self.real.iter().filter_map(|c| c.core.as_ref());
        cores.map(|core| core.cache().stats().replacement.frames_evicted).sum()
    }

    fn now_ns(&self) -> u64 {
        self.now * 1_000
    }

    /// Sends real client `r`'s request on its connection.
    fn real_send(&mut self, r: usize, req: Request, waiting: RealWaiting) {
        let client = &mut self.real[r];
        let conn = client.conn.expect("connected");
        let id = client.next_id;
        client.next_id += 1;
        client.waiting = waiting;
        self.send_to_server(conn, Msg::Request(id, req));
    }

    /// Real client `r` decides what to do next.
    pub(super) fn real_wake(&mut self, r: usize) -> Result<(), Violation> {
        let c = self.real_index(r);
        if !self.has_work(c) || self.real[r].waiting != RealWaiting::Nothing {
            return Ok(());
        }
        if self.real[r].conn.is_none() {
            let conn = self.open_link(c);
            let client = &mut self.real[r];
            client.conn = Some(conn);
            client.waiting = RealWaiting::Hello;
            client.next_id = 2;
            self.greet(conn, "sim-real");
            return Ok(());
        }
        if self.real[r].txn.is_none() {
            self.real_begin(r)?;
            if self.real[r].waiting != RealWaiting::Nothing {
                return Ok(());
            }
        }
        self.real_advance(r)
    }

    /// Starts real client `r`'s next transaction: chooses its cells, and begins it in the
    /// core (which may ask for a refresh first).
    fn real_begin(&mut self, r: usize) -> Result<(), Violation> {
        let n = self.cells.len() as u64;
        let rng = &mut self.real[r].rng;
        let mut cells = Vec::new();
        let mut transfer = None;
        if rng.below(3) == 0 {
            let from = rng.below(ACCOUNTS as u64) as usize;
            let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
            cells.extend([self.cells[from], self.cells[to]]);
            transfer = Some(1 + rng.below(50) as i64);
        } else {
            for _ in 0..1 + rng.below(3) {
                let o = self.cells[rng.below(n) as usize];
                if !cells.contains(&o) {
                    cells.push(o);
                }
            }
        }
        self.real[r].txn = Some(RealTxn { cells, read: Vec::new(), transfer, wrote: Vec::new() });
        let now = self.now_ns();
        let id = self.real[r].id;
        let core = self.real[r].core.as_mut().expect("connected");
        if core.in_transaction() {
            // Aborted by a broken connection (the core keeps it open, doomed, for its driver
            // to end).
            core.abort().map_err(|e| broken(id, "abort", e))?;
        }
        if let Some(req) = core.begin(now).map_err(|e| broken(id, "begin", e))? {
            self.real_send(r, req, RealWaiting::Refresh);
        }
        Ok(())
    }

    /// Reads real client `r`'s open transaction's cells until one misses (its fetch is sent),
    /// then writes and commits.
    fn real_advance(&mut self, r: usize) -> Result<(), Violation> {
        let id = self.real[r].id;
        loop {
            let client = &mut self.real[r];
            let txn = client.txn.as_mut().expect("a transaction");
            let Some(&o) = txn.cells.get(txn.read.len()) else { break };
            let core = client.core.as_mut().expect("connected");
            match core.read(o) {
                Ok(Read::Hit(bytes)) => {
                    let v = version_of(u32_at(&bytes, CELL_WRITER_AT), u32_at(&bytes, CELL_TXN_AT));
                    txn.read.push((o, v));
                    // A transfer writes both accounts; another transaction each cell it read
                    // with probability 1/2, keeping its balance.
                    let write = txn.transfer.is_some() || client.rng.below(2) == 0;
                    txn.wrote.push(write);
                    if write {
                        let t = client.next_txn;
                        let w = core
                            .write(o, CELL_WRITER_AT, &id.to_le_bytes())
                            .and_then(|()| core.write(o, CELL_TXN_AT, &t.to_le_bytes()));
                        w.map_err(|e| broken(id, "write", e))?;
                    }
                }
                Ok(Read::Send(req)) => {
                    self.real_send(r, *req, RealWaiting::Fetch);
                    return Ok(());
                }
                Err(e) if e.is_conflict() => return self.real_doomed(r),
                Err(e) => return Err(broken(id, "read", e)),
            }
        }
        self.real_commit(r)
    }

    /// Real client `r`'s transaction was doomed by an invalidation: it ends (it never reached
    /// a commit) and the next one starts after a while.
    fn real_doomed(&mut self, r: usize) -> Result<(), Violation> {
        self.out.real_doomed += 1;
        let client = &mut self.real[r];
        client.txn = None;
        let core = client.core.as_mut().expect("connected");
        if core.in_transaction() {
            core.abort().map_err(|e| broken(client.id, "abort", e))?;
        }
        let d = 10 + client.rng.below(1_500);
        let c = self.real_index(r);
        self.at(d, Ev::ClientWake(c));
        Ok(())
    }

    /// Real client `r` read (and wrote) everything: it commits.
    fn real_commit(&mut self, r: usize) -> Result<(), Violation> {
        let client = &mut self.real[r];
        let (id, t) = (client.id, client.next_txn);
        let txn = client.txn.take().expect("a transaction");
        let mut h = serial::Txn::new(u64::from(id) << 32 | u64::from(t), id);
        for (o, v) in &txn.read {
            h = h.read(u64::from(o.raw()), *v);
        }
        let core = client.core.as_mut().expect("connected");
        for (i, (o, v)) in txn.read.iter().enumerate() {
            if !txn.wrote[i] {
                continue;
            }
            let moved = match (txn.transfer, i) {
                (Some(x), 0) => -x,
                (Some(x), _) => x,
                (None, _) => 0,
            };
            if let Some(&b) = self.balances.get(&(u64::from(o.raw()), *v)) {
                self.balances.insert((u64::from(o.raw()), version_of(id, t)), b + moved);
            }
            h = h.write(u64::from(o.raw()), version_of(id, t));
        }
        client.next_txn += 1;
        if h.writes.is_empty() {
            match core.commit_here() {
                Ok(Some(_)) => {
                    self.trace(|| format!("real client {id} txn {t} committed read-only here"));
                    self.history.add_committed(h);
                    self.out.real_read_only_here += 1;
                    return self.real_committed(r);
                }
                Ok(None) => {}
                Err(e) if e.is_conflict() => return self.real_doomed(r),
                Err(e) => return Err(broken(id, "commit here", e)),
            }
        }
        let req = match core.commit(self.now * 1_000) {
            Ok(req) => req,
            Err(e) if e.is_conflict() => return self.real_doomed(r),
            Err(e) => return Err(broken(id, "commit", e)),
        };
        if let RequestBody::Commit(c) = &req.body
            && c.versions.is_empty()
            && c.created.is_empty()
        {
            let conn = client.conn.expect("connected");
            self.read_only.insert((conn, client.next_id));
        }
        client.in_flight = Some((t, h));
        self.real_send(r, req, RealWaiting::Commit(t));
        Ok(())
    }

    /// Real client `r` committed (acknowledged): it counts, and goes on after a while.
    fn real_committed(&mut self, r: usize) -> Result<(), Violation> {
        let c = self.real_index(r);
        self.real[r].done += 1;
        self.out.real_commits += 1;
        self.progress.committed(c, self.now);
        let d = 10 + self.real[r].rng.below(1_500);
        self.at(d, Ev::ClientWake(c));
        Ok(())
    }

    /// Real client `r`'s connection broke: the core learns it (its open transaction is
    /// aborted, a commit awaiting its answer is in doubt), and it reconnects later.
    pub(super) fn real_broken(&mut self, r: usize) {
        let c = self.real_index(r);
        self.progress.answered(c);
        let client = &mut self.real[r];
        if let Some(core) = client.core.as_mut() {
            core.disconnected();
        }
        client.txn = None;
        client.conn = None;
        client.waiting = RealWaiting::Nothing;
        let d = 500 + self.rng.below(5_000);
        self.at(d, Ev::ClientWake(c));
    }

    /// Real client `r` got the reply `rid` on its connection.
    pub(super) fn real_reply(
        &mut self,
        r: usize,
        (rid, reply, close): (u64, Reply, bool),
        think: u64,
    ) -> Result<(), Violation> {
        let c = self.real_index(r);
        let waiting = std::mem::replace(&mut self.real[r].waiting, RealWaiting::Nothing);
        self.progress.answered(c);
        let id = self.real[r].id;
        let sent = self.real[r].next_id - 1;
        if rid != sent {
            return Err(Violation(format!(
                "real client {id} got the reply to request {rid}, waiting for {sent}"
            )));
        }
        if close {
            return Err(Violation(format!("real client {id}'s connection closed by the server")));
        }
        self.out.invalidations += reply.invalidations.len() as u64;
        if waiting == RealWaiting::Hello {
            return self.real_hello(r, reply);
        }
        let now = self.now_ns();
        let core = self.real[r].core.as_mut().expect("connected");
        let event = core.receive(reply, now).map_err(|e| broken(id, "receive", e))?;
        match (waiting, event) {
            (RealWaiting::Refresh | RealWaiting::Fetch, Event::Ready | Event::Fetched(_)) => {
                self.real_advance(r)
            }
            (RealWaiting::Refresh | RealWaiting::Fetch, Event::Doomed(_)) => self.real_doomed(r),
            (RealWaiting::Commit(_), event) => self.real_outcome(r, event, false, think),
            (RealWaiting::Resume, event) => self.real_outcome(r, event, true, think),
            (w, e) => Err(Violation(format!("real client {id} waiting for {w:?} got {e:?}"))),
        }
    }

    /// Real client `r`'s `HelloOk`: the core is made at the first, and every connection
    /// resumes the session (the first registers its key).
    fn real_hello(&mut self, r: usize, reply: Reply) -> Result<(), Violation> {
        let id = self.real[r].id;
        let ReplyBody::HelloOk(info) = reply.body else {
            return Err(Violation(format!("real client {id}'s Hello answered {:?}", reply.body)));
        };
        let client = &mut self.real[r];
        if client.core.is_none() {
            let seeds = Seeds { key: client.rng.next_u64(), commit_ids: client.rng.next_u64() };
            let core = ClientCore::new(info, client.session, seeds, None, true)
                .map_err(|e| broken(id, "a new core", e))?;
            client.core = Some(core);
        }
        let core = client.core.as_mut().expect("made");
        match core.resume(info).map_err(|e| broken(id, "resume", e))? {
            Some(req) => self.real_send(r, req, RealWaiting::Resume),
            None => return Err(Violation(format!("real client {id}: the server cannot resume"))),
        }
        Ok(())
    }

    /// What ended real client `r`'s commit (its answer, or the answer to the `Resume` that
    /// asked about it after a broken connection: `resumed`); a `Resume` that ended nothing lets
    /// the client go on.
    fn real_outcome(
        &mut self,
        r: usize,
        event: Event,
        resumed: bool,
        think: u64,
    ) -> Result<(), Violation> {
        let c = self.real_index(r);
        let id = self.real[r].id;
        let in_flight = self.real[r].in_flight.take();
        match (event, in_flight) {
            (Event::Committed(info), Some((t, h))) => {
                let ordered = !h.writes.is_empty();
                if ordered && resumed {
                    // Acknowledged now, by the `Resume`'s answer: the record must be durable
                    // and the transaction's (and from now on survive every crash).
                    let txn = self.checker.commit_ok(info.lsn)?;
                    if txn != (id, t) {
                        return Err(Violation(format!(
                            "real client {id}'s Resume says txn {t} committed at LSN {}, which holds txn {txn:?}",
                            info.lsn
                        )));
                    }
                }
                if ordered && !self.checker.is_acked((id, t)) {
                    return Err(Violation(format!(
                        "real client {id} got CommitOk (LSN {}) for txn {t}, which the log does not hold acknowledged",
                        info.lsn
                    )));
                }
                self.trace(|| format!("real client {id} txn {t} committed at {}", info.lsn));
                let h = if ordered { h.ordered(info.lsn.0) } else { h };
                self.history.add_committed(h);
                self.real_committed(r)
            }
            (Event::Refused(e), Some((t, h))) => {
                self.trace(|| format!("real client {id} txn {t} refused ({e})"));
                self.out.refused += 1;
                self.real[r].done += 1;
                self.history.add_aborted(h);
                self.at(think, Ev::ClientWake(c));
                Ok(())
            }
            (Event::Unknown(_) | Event::Resumed { .. }, Some((t, h))) => {
                // The outcome is not known here: the recovered log decides. (A read-only
                // commit carries no id to ask about; it is not in the log, so it counts as
                // aborted, which it may be.)
                self.trace(|| format!("real client {id} txn {t} uncertain"));
                self.out.uncertain += 1;
                self.real[r].done += 1;
                self.uncertain.push(((id, t), h));
                self.at(think, Ev::ClientWake(c));
                Ok(())
            }
            (Event::Resumed { .. }, None) => {
                self.at(think, Ev::ClientWake(c));
                Ok(())
            }
            (e, f) => Err(Violation(format!(
                "real client {id}: {e:?} answers the commit in flight {:?}",
                f.map(|f| f.0)
            ))),
        }
    }
}
