//! Replica groups in the two-phase world (issue 33): with [`TwoPcSimConfig::replicas`] set,
//! every server id is a group of that many [`Member`]s (`thor_replica`), each a real core and a
//! raft-rs replica over its own [`MemDisk`], run through the replica model the one-group world
//! uses too (`crate::replicas`: opening from the disk alone, disk effects performed at once,
//! database images copied to lagging replicas).
//!
//! ```text
//!   client ── Hello ──► replica r of group s ── serving? ── admitted: the core serves it
//!     ▲                        │ no: Error(NotLeader, hint) and the connection closes
//!     └─ connects to the hinted (or next) replica, the ClientCore resumes its session
//!   server s's core ── PeerMsg ──► group t's serving leader (none serves: dropped; resent)
//!   replica ── Raft message ──► replica of the same group: lost, delayed (reordered), cut off
//!                               by a partition
//! ```
//!
//! - *Clients* (simulated and real) talk to one replica of a group: the world keeps, per
//!   client and server, the replica it aims at. A replica that does not serve answers the
//!   first request of a connection `Error(NotLeader)` naming the leader it knows, and closes
//!   it; the client aims at the hinted replica (or the next one, without a hint, or when a
//!   connection is refused because the replica is down) and connects again, and a real
//!   client's `ClientCore` resumes its session there (`disconnected`, then `resume`) exactly
//!   as after a broken connection. A replica that crashes or restarts (a deposed leader,
//!   `Out::Restart`) breaks every connection it had.
//! - *Two-phase commit* between servers: a core's peer message goes to the destination group's
//!   serving leader when it lands (the highest term's, if two think they serve), or is
//!   dropped while none serves; the protocol resends on its timeouts, and a participant in
//!   doubt asks the coordinator group's new leader, whose core restored what it coordinates
//!   from the replicated log.
//! - *Faults* (drawn every [`FAULT_EVERY_US`] while the faults last): a replica crashes (its
//!   disk keeps any subset of unsynced writes) and restarts after a while; the serving leader
//!   of a group that coordinates a transaction is killed (between a prepare and its
//!   decision); a group is partitioned (its leader isolated, a minority cut off, or every
//!   replica apart: no majority), and heals after a while. Raft messages are lost with the
//!   run's chance and each lands after its own latency (so they reorder).
//! - *When the faults stop* every partition heals and every replica restarts; the run's
//!   liveness check then needs every group whole with a serving leader and nothing in doubt
//!   within its bound, and the calm's transactions to complete within theirs.
//! - *The judgement* adds to the history, money and liveness checks of the two-phase world:
//!   once every replica of a group has applied everything committed, replicas that applied the
//!   same index hold the same pages (so no follower lost an acknowledged commit either: the
//!   final state the history was judged against is the leader's); a member's own errors (a gap
//!   in the LSNs it replays, a proposal it cannot account for) fail the run.
//!
//! *Found here:* a leader cut off from its group still serves until Raft's check-quorum
//! timeout deposes it, and its core answered peers alone: a coordinator's `Decide` for a part
//! prepared under a later leader was acknowledged (`DecideAck`) by the deposed one, which
//! never saw it, and the coordinator forgot the transaction while the group's log held the
//! part in doubt, which the next leader then aborted (seed 27451, `tests/twopc_groups.rs`'s
//! `a_deposed_leader_cannot_acknowledge_a_decision_alone`). `thor_replica::Member` now holds
//! every answer a leader gives alone until the group confirms it leads.
//!
//! The scenario `participant_learns_outcome_from_new_coordinator_leader`
//! ([`TwoPcSimConfig::kill_coordinator_leader_in_doubt`]) kills the coordinator group's
//! serving leader once a participant group's leader holds a part in doubt (before the
//! coordinator decided, or once it decided to commit: [`KillPoint`]), and drops every
//! peer message from the coordinator group to the participant group until the coordinator
//! group has a new serving leader: the participant can then learn the outcome only from that
//! new leader ([`InDoubtKill`] records when each happened).

use std::collections::{BTreeMap, BTreeSet};

use raft::SnapshotStatus;
use raft::eraftpb::{Message, MessageType};
use thor_core::{Lsn, ServerId};
use thor_replica::member::{Member, MemberConfig, MemberError, Out, Phase};
use thor_server::io;
use thor_server::superblock::Superblock;
use thor_server::{ConnId, Core, CoreConfig, DirectResult, Effect, Input};
use thor_storage::{MemDisk, SplitMix64};

use super::{Ev, TwoPcSimConfig, Violation, World, core_config};
use crate::replicas::{self, Node, Performed, perform};

/// Virtual microseconds between a replica's ticks: Raft's clock (an election after 10 to 20
/// ticks without a leader, heartbeats every 2), and a serving core's timers.
pub const RAFT_TICK_US: u64 = 2_000;

/// Virtual microseconds between two draws of a group fault while the faults last.
pub const FAULT_EVERY_US: u64 = 5_000;

/// Events the setup's commit or a final read may take to be answered by a serving leader.
const DIRECT_EVENTS_MAX: u64 = 200_000;

/// Events within which, at the end, every replica of every group has applied everything
/// committed (the network whole, nobody down, nothing left to do but catch up).
const CATCH_UP_EVENTS_MAX: u64 = 400_000;

/// A group core's `CoreConfig::idle_flush_after_us`.
const IDLE_FLUSH_AFTER_US: u64 = 10_000;

/// Xored into a seed for the group settings' stream of draws.
const GROUPS_STREAM: u64 = 0x2bc0_6752_4f55_5053;

/// When the scripted kill of [`TwoPcSimConfig::kill_coordinator_leader_in_doubt`] strikes:
/// the coordinator group's serving leader is killed while a participant group's leader holds
/// a part in doubt, and
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillPoint {
    /// the coordinator has not decided (it coordinates a transaction and has decided none):
    /// what its group's log holds decides, a commit record or none (presumed abort);
    BeforeDecision,
    /// the coordinator decided to commit (its commit record is in its group's log, the
    /// decision sent and held back): the participant must learn that it committed.
    AfterCommitDecision,
}

/// When the scripted kill of [`TwoPcSimConfig::kill_coordinator_leader_in_doubt`] happened,
/// and what followed (virtual microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InDoubtKill {
    /// The coordinator's server id (its group's leader was killed).
    pub coordinator: u32,
    /// The participant's server id (its leader held a part in doubt then).
    pub participant: u32,
    /// The term the killed leader served.
    pub killed_term: u64,
    /// When the leader was killed.
    pub killed_at: u64,
    /// When the coordinator group's next leader came to serve.
    pub new_leader_at: Option<u64>,
    /// When the participant's leader had no part in doubt any more, after the kill.
    pub decided_at: Option<u64>,
    /// The participant's parts (committed, aborted) as participant when the leader was
    /// killed (its core's counters).
    pub parts_before: (u64, u64),
    /// How the participant decided: `Some(true)` its parts committed grew, `Some(false)` its
    /// parts aborted did.
    pub participant_committed: Option<bool>,
}

impl TwoPcSimConfig {
    /// The configuration of seed `seed` of the two-phase world with replica groups: the
    /// servers, clients and client faults of [`TwoPcSimConfig::for_seed`], every server a
    /// group of one, three or five replicas (a fifth, three fifths, a fifth of the seeds),
    /// with Raft's message loss and the replicas' crashes drawn from a stream of their own.
    pub fn for_seed_groups(seed: u64) -> TwoPcSimConfig {
        let mut r = SplitMix64::new(seed ^ GROUPS_STREAM);
        let replicas = [1, 3, 3, 3, 5][r.below(5) as usize];
        TwoPcSimConfig {
            replicas,
            raft_loss_ppm: [0, 20_000, 80_000][r.below(3) as usize],
            replica_crashes_max: 2 + r.below(6) as usize,
            group_faults: true,
            // Half the seeds compact their journals after a few entries, so that replicas that
            // lag are sent snapshots and copy database images.
            retain_entries: if r.coin() { 4 + r.below(20) } else { 1_000 },
            ..TwoPcSimConfig::for_seed(seed)
        }
    }
}

/// A server run as a replica group.
pub(super) struct Group {
    /// Replica id (1..=n) → the replica.
    pub nodes: BTreeMap<u64, Node>,
    /// The replicas that can talk to each other, while a partition lasts.
    partition: Option<Vec<BTreeSet<u64>>>,
    /// Incremented by every partition, so that the heal of an earlier one does nothing.
    partition_seq: u64,
    /// Replicas for which no database image could be fetched: never restarted.
    retired: BTreeSet<u64>,
    /// (replica, term) of every leader seen serving, to count them.
    serving_seen: BTreeSet<(u64, u64)>,
}

impl Group {
    fn can_talk(&self, a: u64, b: u64) -> bool {
        match &self.partition {
            None => true,
            Some(sets) => sets.iter().any(|g| g.contains(&a) && g.contains(&b)),
        }
    }

    fn up(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| n.run.is_some()).map(|(id, _)| *id).collect()
    }

    /// The serving replica with the highest term, if any.
    fn serving_leader(&self) -> Option<u64> {
        replicas::serving_leader(&self.nodes)
    }

    fn member(&self, id: u64) -> Option<&Member> {
        self.nodes.get(&id).and_then(|n| n.run.as_ref()).map(|(m, _)| m)
    }

    /// Every replica not retired is up, and no partition cuts the group.
    fn whole(&self) -> bool {
        self.partition.is_none()
            && self.nodes.iter().all(|(id, n)| n.run.is_some() || self.retired.contains(id))
    }
}

impl World {
    pub(super) fn is_group(&self, s: usize) -> bool {
        self.servers[s].group.is_some()
    }

    fn group(&self, s: usize) -> &Group {
        self.servers[s].group.as_deref().expect("a group")
    }

    fn group_mut(&mut self, s: usize) -> &mut Group {
        self.servers[s].group.as_deref_mut().expect("a group")
    }

    fn node_mut(&mut self, s: usize, id: u64) -> &mut Node {
        self.group_mut(s).nodes.get_mut(&id).expect("a replica of the group")
    }

    /// The core that answers for server `s`: a single server's, or its group's serving
    /// leader's.
    pub(super) fn core_of(&self, s: usize) -> Option<&Core> {
        match &self.servers[s].group {
            None => self.servers[s].p.node.as_ref().map(|n| &n.core),
            Some(g) => g.serving_leader().and_then(|id| g.member(id)).map(|m| m.core()),
        }
    }

    /// Whether server `s` has settled what the faults left: up (a group: whole, with a
    /// serving leader), nothing in doubt, nothing it coordinates.
    pub(super) fn server_settled(&self, s: usize) -> bool {
        if self.is_group(s) && !self.group(s).whole() {
            return false;
        }
        self.core_of(s).is_some_and(|c| {
            let t = c.twopc_stats();
            t.in_doubt == 0 && t.coordinating == 0
        })
    }

    /// Creates server `s`'s group: every replica's database (each named server `s + 1`),
    /// then starts them.
    pub(super) fn group_setup(&mut self, s: usize) -> Result<(), Violation> {
        let mut nodes = BTreeMap::new();
        for id in 1..=self.cfg.replicas as u64 {
            let disk = MemDisk::new();
            io::create(&disk, 4096, ServerId(s as u32 + 1))
                .map_err(|e| Violation(format!("create: {e}")))?;
            nodes.insert(id, Node::new(disk));
        }
        self.servers[s].group = Some(Box::new(Group {
            nodes,
            partition: None,
            partition_seq: 0,
            retired: BTreeSet::new(),
            serving_seen: BTreeSet::new(),
        }));
        for id in 1..=self.cfg.replicas as u64 {
            self.replica_start(s, id)?;
        }
        Ok(())
    }

    /// Opens replica `id` of group `s` from its disk alone, and starts its ticks.
    fn replica_start(&mut self, s: usize, id: u64) -> Result<(), Violation> {
        let founders: Vec<u64> = (1..=self.cfg.replicas as u64).collect();
        let cfg = CoreConfig {
            // A leader idle for a little while installs and checkpoints, so that journals
            // are compacted within a run and lagging replicas are sent snapshots (the
            // accounts, rewritten in place, never fill the MOB).
            idle_flush_after_us: IDLE_FLUSH_AFTER_US,
            ..core_config(self.cfg.servers, self.cfg.seed)
        };
        let mcfg = MemberConfig {
            retain_entries: self.cfg.retain_entries,
            mutant: self.cfg.member_mutant,
        };
        let raft_seed = self.cfg.seed ^ ((s as u64 + 1) << 40) ^ id;
        let now = self.now;
        let node = self.node_mut(s, id);
        match replicas::open(&node.disk, id, &founders, raft_seed, cfg, mcfg) {
            Ok((mut m, ds)) => {
                // As `thor-server`'s engine does at an open: the threshold is raised from the
                // clock at recovery.
                m.core_mut().recovered_at(now);
                node.run = Some((m, ds));
                node.epoch += 1;
                let e = node.epoch;
                self.trace(|| format!("server {} replica {id} starts", s + 1));
                self.at(RAFT_TICK_US, Ev::ReplicaTick(s, id, e));
                Ok(())
            }
            Err(e) => Err(Violation(format!("server {} replica {id} does not open: {e}", s + 1))),
        }
    }

    /// Replica `id` of group `s` crashes: its disk keeps what a power failure allows, its
    /// connections break; it restarts after a while (at once once the faults stopped).
    fn replica_crash(&mut self, s: usize, id: u64, why: &str) {
        let seed = self.rng.next_u64();
        let node = self.node_mut(s, id);
        if node.run.take().is_none() {
            return;
        }
        node.disk.crash(seed);
        node.epoch += 1;
        self.out.replica_crashes += 1;
        self.mix(&[self.now, 9, s as u64, id]);
        self.trace(|| format!("server {} replica {id} crashes {why}", s + 1));
        self.replica_conns_break(s, id);
        let d = if self.faults { 5_000 + self.rng.below(45_000) } else { 1_000 };
        self.at(d, Ev::ReplicaRestart(s, id));
    }

    /// Breaks every client connection to replica `id` of group `s`.
    fn replica_conns_break(&mut self, s: usize, id: u64) {
        let mut broken: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(conn, (_, sv))| {
                *sv == s && self.conn_replica.get(conn).is_some_and(|(r, _)| *r == id)
            })
            .map(|(conn, _)| *conn)
            .collect();
        broken.sort_unstable();
        for conn in broken {
            self.break_link(conn);
        }
    }

    /// A member asked to be reopened from its disk (a deposed leader): as a process restart,
    /// nothing lost from the disk, its connections broken.
    fn replica_restart(&mut self, s: usize, id: u64) -> Result<(), Violation> {
        let node = self.node_mut(s, id);
        node.run = None;
        node.epoch += 1;
        self.out.replica_restarts += 1;
        self.replica_conns_break(s, id);
        self.replica_start(s, id)
    }

    /// The crashed replica `id` of group `s` restarts, unless it runs or was retired.
    pub(super) fn replica_back(&mut self, s: usize, id: u64) -> Result<(), Violation> {
        let g = self.group(s);
        if g.nodes[&id].run.is_some() || g.retired.contains(&id) {
            return Ok(());
        }
        self.replica_start(s, id)
    }

    /// Steps replica `id` of group `s` with `f` and carries out what it asks.
    fn replica_step(
        &mut self,
        s: usize,
        id: u64,
        f: impl FnOnce(&mut Member, u64, &mut Vec<Out>) -> Result<(), MemberError>,
    ) -> Result<(), Violation> {
        let now = self.now;
        let mut out = Vec::new();
        let r = match self.node_mut(s, id).run.as_mut() {
            Some((m, _)) => f(m, now, &mut out),
            None => return Ok(()),
        };
        match r {
            Ok(()) => self.replica_handle(s, id, out),
            Err(e) => self.replica_failed(s, id, e),
        }
    }

    fn replica_handle(&mut self, s: usize, id: u64, out: Vec<Out>) -> Result<(), Violation> {
        let epoch = self.group(s).nodes[&id].epoch;
        let mut work = out;
        work.reverse();
        while let Some(o) = work.pop() {
            let node = &self.group(s).nodes[&id];
            if node.run.is_none() || node.epoch != epoch {
                return Ok(());
            }
            let now = self.now;
            let mut more = Vec::new();
            let r = match o {
                Out::Send(msg) => {
                    self.raft_send(s, id, msg);
                    Ok(())
                }
                Out::Core(e) => {
                    let (m, ds) = self.node_mut(s, id).run.as_mut().expect("up");
                    match perform(ds, e) {
                        Performed::Input(input) => m.step(now, input, &mut more),
                        Performed::Done { ticket, result } => {
                            self.direct_done.push((ticket, result));
                            Ok(())
                        }
                        Performed::Other(e @ (Effect::Reply { .. } | Effect::Peer { .. })) => {
                            self.route(s, vec![e])?;
                            Ok(())
                        }
                        Performed::Other(e) => {
                            return Err(Violation(format!(
                                "server {} replica {id}: an effect nobody asked for: {e:?}",
                                s + 1
                            )));
                        }
                    }
                }
                Out::ReadTail { page } => {
                    let (m, ds) = self.node_mut(s, id).run.as_mut().expect("up");
                    let img = ds.read_page(page);
                    m.tail_read(now, page, img, &mut more)
                }
                // Only a serving leader is given direct operations; one that stopped serving
                // meanwhile leaves its operation unanswered, and the wait for it fails.
                Out::DirectRefused { .. } => Ok(()),
                // This world never changes a group's membership.
                Out::Membership { .. } => Ok(()),
                Out::FetchImage { lsn, .. } => {
                    let got = self.replica_image(s, id, lsn);
                    if got.is_err() {
                        self.out.image_failures += 1;
                    }
                    let (m, _) = self.node_mut(s, id).run.as_mut().expect("up");
                    m.image_installed(now, got, &mut more)
                }
                Out::Restart(why) => {
                    self.trace(|| format!("server {} replica {id} restarts: {why:?}", s + 1));
                    return self.replica_restart(s, id);
                }
            };
            if let Err(e) = r {
                return self.replica_failed(s, id, e);
            }
            work.extend(more.into_iter().rev());
        }
        self.note_serving(s, id);
        Ok(())
    }

    /// Counts a leader that came to serve, and notes it for the scripted kill.
    fn note_serving(&mut self, s: usize, id: u64) {
        let Some(Phase::Serving { term }) = self.group(s).member(id).map(|m| m.status().phase)
        else {
            return;
        };
        if !self.group_mut(s).serving_seen.insert((id, term)) {
            return;
        }
        self.out.group_leaders += 1;
        self.trace(|| format!("server {} replica {id} serves term {term}", s + 1));
        let now = self.now;
        if let Some(k) = self.in_doubt_kill.as_mut()
            && k.coordinator as usize == s + 1
            && term > k.killed_term
            && k.new_leader_at.is_none()
        {
            k.new_leader_at = Some(now);
        }
    }

    /// A member's error. The one a member states for its operator, that no database image
    /// could be fetched for it, retires it for the rest of the run (as an operator would
    /// replace it), counted; any other fails the run.
    fn replica_failed(&mut self, s: usize, id: u64, e: MemberError) -> Result<(), Violation> {
        if let MemberError::ImageUnavailable { .. } = e {
            let node = self.node_mut(s, id);
            node.run = None;
            node.epoch += 1;
            self.group_mut(s).retired.insert(id);
            self.out.replicas_retired += 1;
            self.replica_conns_break(s, id);
            return Ok(());
        }
        Err(Violation(format!("server {} replica {id}: {e}", s + 1)))
    }

    /// Copies a database image whose checkpoint is at least `lsn` onto replica `id` of group
    /// `s` from a running replica it can talk to (the leader it knows first).
    fn replica_image(&mut self, s: usize, id: u64, lsn: Lsn) -> Result<Superblock, String> {
        let g = self.group(s);
        let leader = g.member(id).and_then(|m| m.status().replica.leader);
        let mut sources: Vec<u64> =
            g.up().into_iter().filter(|r| *r != id && g.can_talk(id, *r)).collect();
        sources.sort_by_key(|r| Some(*r) != leader);
        let (sb, ds) = replicas::copy_image(&g.nodes, &sources, &g.nodes[&id].disk, lsn)?;
        self.node_mut(s, id).run.as_mut().expect("up").1 = ds;
        self.out.images += 1;
        Ok(sb)
    }

    /// Replica `from` of group `s` sends a Raft message: lost by the run's chance or a
    /// partition (a lost snapshot is reported to its leader, as a transport would), else
    /// landing after its own latency.
    fn raft_send(&mut self, s: usize, from: u64, msg: Message) {
        let cut = !self.group(s).can_talk(from, msg.to);
        if cut || self.chance(self.cfg.raft_loss_ppm) {
            self.out.raft_lost += 1;
            if msg.msg_type == MessageType::MsgSnapshot
                && let Some((m, _)) = self.node_mut(s, from).run.as_mut()
            {
                m.report_snapshot(msg.to, SnapshotStatus::Failure);
            }
            return;
        }
        let d = self.latency();
        self.at(d, Ev::Raft(s, from, Box::new(msg)));
    }

    /// A Raft message lands (if its sender and receiver can still talk and the receiver is
    /// up).
    pub(super) fn raft_deliver(
        &mut self,
        s: usize,
        from: u64,
        msg: Box<Message>,
    ) -> Result<(), Violation> {
        let to = msg.to;
        let snapshot = msg.msg_type == MessageType::MsgSnapshot;
        let g = self.group(s);
        let delivered = g.can_talk(from, to) && g.nodes.get(&to).is_some_and(|n| n.run.is_some());
        if delivered {
            self.replica_step(s, to, |m, now, out| m.step_peer(now, *msg, out))?;
        } else {
            self.out.raft_lost += 1;
        }
        if snapshot && let Some((m, _)) = self.node_mut(s, from).run.as_mut() {
            let status = if delivered { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
            m.report_snapshot(to, status);
        }
        Ok(())
    }

    /// A replica's tick, if it is still the process that scheduled it.
    pub(super) fn replica_tick(&mut self, s: usize, id: u64, epoch: u32) -> Result<(), Violation> {
        let node = &self.group(s).nodes[&id];
        if node.epoch != epoch || node.run.is_none() {
            return Ok(());
        }
        self.at(RAFT_TICK_US, Ev::ReplicaTick(s, id, epoch));
        self.replica_step(s, id, |m, now, out| m.tick(now, out))
    }

    /// An input for server `s`'s group: a client's (on the connection's replica, if it is
    /// still the process the connection was made to) or a peer's (to the serving leader).
    pub(super) fn group_input(&mut self, s: usize, input: Input) -> Result<(), Violation> {
        let conn = match &input {
            Input::Connect { conn } | Input::Request { conn, .. } => *conn,
            Input::Disconnect { conn } => {
                let conn = *conn;
                let Some((id, epoch)) = self.conn_replica.remove(&conn) else { return Ok(()) };
                if self.group(s).nodes[&id].epoch != epoch {
                    return Ok(());
                }
                return self.replica_step(s, id, |m, now, out| m.step(now, input, out));
            }
            Input::Peer { .. } => {
                let Some(id) = self.group(s).serving_leader() else {
                    self.out.peer_unserved += 1;
                    self.trace(|| format!("server {}: no replica serves, dropped", s + 1));
                    return Ok(());
                };
                self.trace(|| {
                    let term = self.group(s).member(id).map_or(0, |m| m.status().replica.term);
                    format!("server {}: to replica {id} (serving term {term})", s + 1)
                });
                return self.replica_step(s, id, |m, now, out| m.step(now, input, out));
            }
            other => {
                return Err(Violation(format!(
                    "server {}'s group got an input of no replica: {other:?}",
                    s + 1
                )));
            }
        };
        let Some(&(id, epoch)) = self.conn_replica.get(&conn) else { return Ok(()) };
        if self.group(s).nodes[&id].epoch != epoch {
            return Ok(());
        }
        self.replica_step(s, id, |m, now, out| m.step(now, input, out))
    }

    /// Client `c` opens connection `conn` to server `s`'s group: to the replica it aims at,
    /// if that replica runs (`false`: refused, and the client will aim at the next).
    pub(super) fn group_accepts(&mut self, c: usize, s: usize, conn: ConnId) -> bool {
        let n = self.cfg.replicas as u64;
        let id = *self.aim.entry((c, s)).or_insert(1);
        let node = &self.group(s).nodes[&id];
        if node.run.is_none() {
            self.aim.insert((c, s), id % n + 1);
            return false;
        }
        let epoch = node.epoch;
        self.conn_replica.insert(conn, (id, epoch));
        true
    }

    /// Client `c` was told `Error(NotLeader)` by server `s`'s replica on `conn`: it aims at
    /// the hinted leader next, or without a hint at the next replica.
    pub(super) fn redirected(&mut self, c: usize, s: usize, conn: ConnId, hint: Option<u64>) {
        let n = self.cfg.replicas as u64;
        self.out.redirects += 1;
        let was = self.conn_replica.get(&conn).map_or(1, |(r, _)| *r);
        let next = hint.filter(|h| (1..=n).contains(h)).unwrap_or(was % n + 1);
        self.aim.insert((c, s), next);
    }

    /// The group faults, drawn every [`FAULT_EVERY_US`] while the faults last.
    pub(super) fn group_fault(&mut self) -> Result<(), Violation> {
        if !self.faults || !self.cfg.group_faults {
            return Ok(());
        }
        self.at(FAULT_EVERY_US, Ev::GroupFault);
        let r = self.rng.below(1000);
        let s = self.rng.below(self.cfg.servers as u64) as usize;
        let budget = self.out.replica_crashes < self.cfg.replica_crashes_max as u64;
        if r < 60 && budget {
            let up = self.group(s).up();
            if !up.is_empty() {
                let id = up[self.rng.below(up.len() as u64) as usize];
                self.replica_crash(s, id, "at random");
            }
        } else if r < 100 && budget {
            // A coordinator group's leader dies between a prepare and its decision.
            let coordinating: Vec<usize> = (0..self.cfg.servers)
                .filter(|t| self.core_of(*t).is_some_and(|c| c.twopc_stats().coordinating > 0))
                .collect();
            if !coordinating.is_empty() {
                let t = coordinating[self.rng.below(coordinating.len() as u64) as usize];
                let id = self.group(t).serving_leader().expect("it coordinates");
                self.out.coordinator_leader_kills += 1;
                self.replica_crash(t, id, "while its core coordinates");
            }
        } else if r < 160 && self.cfg.replicas > 1 {
            self.partition(s);
        }
        Ok(())
    }

    /// Partitions group `s`: its leader isolated, one replica cut off (a minority), or every
    /// replica apart (no majority); it heals after a while.
    fn partition(&mut self, s: usize) {
        let ids: Vec<u64> = self.group(s).nodes.keys().copied().collect();
        let kind = self.rng.below(3);
        let random = ids[self.rng.below(ids.len() as u64) as usize];
        let sets = match kind {
            0 | 1 => {
                let alone = if kind == 0 {
                    self.group(s).serving_leader().unwrap_or(random)
                } else {
                    random
                };
                let rest: BTreeSet<u64> = ids.iter().copied().filter(|i| *i != alone).collect();
                vec![BTreeSet::from([alone]), rest]
            }
            _ => ids.iter().map(|i| BTreeSet::from([*i])).collect(),
        };
        self.trace(|| format!("server {} partitioned: {sets:?}", s + 1));
        let g = self.group_mut(s);
        g.partition = Some(sets);
        g.partition_seq += 1;
        let seq = g.partition_seq;
        self.out.partitions += 1;
        let d = 10_000 + self.rng.below(70_000);
        self.at(d, Ev::Heal(s, seq));
    }

    /// The partition `seq` of group `s` heals (if no later one replaced it).
    pub(super) fn heal(&mut self, s: usize, seq: u64) {
        let g = self.group_mut(s);
        if g.partition_seq == seq {
            g.partition = None;
        }
    }

    /// The faults stopped: every partition heals and every crashed replica restarts.
    pub(super) fn groups_heal(&mut self) {
        for s in 0..self.cfg.servers {
            if !self.is_group(s) {
                continue;
            }
            self.group_mut(s).partition = None;
            let down: Vec<u64> = self
                .group(s)
                .nodes
                .iter()
                .filter(|(_, n)| n.run.is_none())
                .map(|(id, _)| *id)
                .collect();
            for id in down {
                self.at(1_000, Ev::ReplicaRestart(s, id));
            }
        }
    }

    /// The scripted kill ([`TwoPcSimConfig::kill_coordinator_leader_in_doubt`]), after every
    /// event: once a group's serving leader coordinates while another's holds a part in
    /// doubt, the first is killed; then the participant's decision is watched for.
    pub(super) fn scripted_kill(&mut self) {
        let Some(point) = self.cfg.kill_coordinator_leader_in_doubt else { return };
        if let Some(k) = self.in_doubt_kill {
            let p = k.participant as usize - 1;
            let Some(t) = self.core_of(p).map(|c| c.twopc_stats()) else { return };
            if t.in_doubt == 0 && k.decided_at.is_none() {
                let (committed, aborted) = k.parts_before;
                let way = if t.counters.parts_committed > committed {
                    Some(true)
                } else {
                    (t.counters.parts_aborted > aborted).then_some(false)
                };
                let k = self.in_doubt_kill.as_mut().expect("some");
                k.decided_at = Some(self.now);
                k.participant_committed = way;
            }
            return;
        }
        let n = self.cfg.servers;
        let busy = |w: &World, s: usize, f: fn(&thor_server::TwoPcStats) -> bool| {
            w.core_of(s).is_some_and(|c| f(&c.twopc_stats()))
        };
        let coordinates: fn(&thor_server::TwoPcStats) -> bool = match point {
            KillPoint::BeforeDecision => {
                |t| t.coordinating > 0 && t.counters.decided_commit + t.counters.decided_abort == 0
            }
            KillPoint::AfterCommitDecision => |t| t.counters.decided_commit > 0,
        };
        let Some(co) = (0..n).find(|s| busy(self, *s, coordinates)) else { return };
        let Some(p) = (0..n).find(|s| *s != co && busy(self, *s, |t| t.in_doubt > 0)) else {
            return;
        };
        let id = self.group(co).serving_leader().expect("it coordinates");
        let Some(Phase::Serving { term }) = self.group(co).member(id).map(|m| m.status().phase)
        else {
            return;
        };
        let c = self.core_of(p).expect("it holds a part").twopc_stats().counters;
        self.in_doubt_kill = Some(InDoubtKill {
            parts_before: (c.parts_committed, c.parts_aborted),
            participant_committed: None,
            coordinator: co as u32 + 1,
            participant: p as u32 + 1,
            killed_term: term,
            killed_at: self.now,
            new_leader_at: None,
            decided_at: None,
        });
        self.out.coordinator_leader_kills += 1;
        self.replica_crash(co, id, "between a prepare and its decision (scripted)");
    }

    /// Whether a peer message from server `from` to server `to` is held back by the scripted
    /// kill: until the coordinator group's new leader serves, nothing of the coordinator's
    /// reaches the participant.
    pub(super) fn peer_held(&self, from: usize, to: usize) -> bool {
        self.in_doubt_kill.is_some_and(|k| {
            k.new_leader_at.is_none()
                && k.coordinator as usize == from + 1
                && k.participant as usize == to + 1
        })
    }

    /// Steps server `s`'s serving leader with `input` (a direct operation) once one serves,
    /// and runs the world's events until it is answered: the setup's commit and the final
    /// reads.
    pub(super) fn group_settle_now(
        &mut self,
        s: usize,
        input: Input,
    ) -> Result<Vec<DirectResult>, Violation> {
        let Input::Direct { ticket, .. } = &input else {
            return Err(Violation(format!("not a direct operation: {input:?}")));
        };
        let ticket = *ticket;
        let mut input = Some(input);
        for _ in 0..DIRECT_EVENTS_MAX {
            if let Some(i) = self.direct_done.iter().position(|(t, _)| *t == ticket) {
                return Ok(vec![self.direct_done.remove(i).1]);
            }
            if input.is_some()
                && let Some(id) = self.group(s).serving_leader()
            {
                let i = input.take().expect("some");
                self.replica_step(s, id, |m, now, out| m.step(now, i, out))?;
                continue;
            }
            let Some(((t, _), ev)) = self.queue.pop_first() else { break };
            self.now = self.now.max(t);
            self.event(ev)?;
        }
        Err(Violation(format!(
            "server {}'s group did not answer direct operation {ticket} within {DIRECT_EVENTS_MAX} events",
            s + 1
        )))
    }

    /// The end of a run with groups: once every replica has applied everything committed,
    /// replicas that applied the same index hold the same pages.
    pub(super) fn judge_groups(&mut self) -> Result<(), Violation> {
        if !(0..self.cfg.servers).any(|s| self.is_group(s)) {
            return Ok(());
        }
        let caught_up = |w: &World| {
            (0..w.cfg.servers).all(|s| {
                let g = w.group(s);
                let ms: Vec<&Member> = g.up().iter().filter_map(|id| g.member(*id)).collect();
                g.whole() && g.serving_leader().is_some() && replicas::settled(&ms)
            })
        };
        let mut n = 0;
        while !caught_up(self) {
            n += 1;
            let Some(((t, _), ev)) = self.queue.pop_first().filter(|_| n < CATCH_UP_EVENTS_MAX)
            else {
                return Err(Violation(format!(
                    "the replicas did not catch up within {CATCH_UP_EVENTS_MAX} events after the end"
                )));
            };
            self.now = self.now.max(t);
            self.event(ev)?;
        }
        for s in 0..self.cfg.servers {
            let ids = self.group(s).up();
            let mut first: Option<(u64, u64, replicas::Pages)> = None;
            for id in ids {
                let (m, ds) = self.node_mut(s, id).run.as_mut().expect("up");
                let applied = m.status().replica.applied;
                let pages = replicas::pages(m, ds)
                    .map_err(|e| Violation(format!("server {} replica {id}: {e}", s + 1)))?;
                self.out.replicas_compared += 1;
                match &first {
                    None => first = Some((id, applied, pages)),
                    Some((f, a, p)) if *a == applied && *p != pages => {
                        return Err(Violation(format!(
                            "server {} replicas {f} and {id} applied index {applied} but hold different pages",
                            s + 1
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}
