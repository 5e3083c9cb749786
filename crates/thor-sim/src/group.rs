//! The replicated-server world (issue 33, a first slice of groups in the simulation): one thor
//! server run as a replica group of three [`Member`]s (`thor_replica`), each a real core and a
//! raft-rs replica over its own [`MemDisk`] (the database and the group's journal), under one
//! seeded scheduler with faults, and a client that commits to whichever replica serves.
//!
//! ```text
//!   client ── DirectOp::Commit ──► serving member ── proposals ──► followers (replay, install)
//!     ▲  retries on a refusal or      │ Out::Send ─► network: loss, delay (so reordering),
//!     │  a leader that stopped         │              partitions (minority, majority, leader
//!     └──── Done(Committed) ◄──────────┘              isolated)
//!   faults: replica crashes (the disk loses or tears what was not synced) and restarts
//! ```
//!
//! Each run draws from a stream of its own (`seed ^ GROUP_STREAM`), so the other worlds' seeds
//! replay as before. Faults run for [`FAULT_TICKS`]; then every replica restarts, the network
//! heals, and the run is judged:
//!
//! - *liveness:* a serving leader within [`SERVE_TICKS_MAX`] ticks, and a commit acknowledged
//!   within [`COMMIT_TICKS_MAX`] more;
//! - *no acknowledged commit lost:* once every replica has replayed everything committed,
//!   every object an acknowledged commit created is in every replica's committed pages
//!   (installed image plus the MOB's versions), with its bytes;
//! - *the same pages:* replicas that applied the same index hold the same objects and page
//!   versions on every page;
//! - a member's own errors (a gap in the LSNs it replays, a proposal it cannot account for)
//!   fail the run.
//!
//! Half the seeds compact their journals after 40 to 80 entries (the rest keep them): a
//! replica further behind than that is sent a snapshot and asks for a database image
//! (`thor_replica::Out::FetchImage`); the world copies one from a running replica it can talk
//! to, the leader first (`DiskSide::image_into`), or reports the fetch failed (the member asks
//! again later). A replica for which no image could be had within the member's bound would be
//! retired for the rest of the run and counted (`GroupOutcome::retired`); in 10,000 seeds none
//! is (23 images copied, while 4,856 journals were compacted; before images existed, the same
//! 23 replicas were retired). Lost snapshot messages are reported to their leader, as a
//! transport would.
//!
//! The replica model (opening, disk effects at once, image copies, committed pages) is
//! `crate::replicas`, shared with the cluster world's groups (`twopc/groups.rs`), which adds
//! what this world has not: real clients that resume their sessions on a new leader, and
//! two-phase commit across groups. Not here: crashes inside a sync or an install round (disk
//! effects are performed at once, in both replicated worlds).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use raft::SnapshotStatus;
use raft::eraftpb::{Message, MessageType};
use thor_core::{ClassDesc, Lsn, Oref, RawRef, ServerId, VarKind};
use thor_replica::member::{Member, MemberConfig, MemberError, MemberMutant, Out, Phase};
use thor_server::io::{self, DiskSide};
use thor_server::superblock::Superblock;
use thor_server::{CommitIn, CoreConfig, DirectOp, DirectResult, Input};
use thor_storage::{MemDisk, SplitMix64};

use crate::check::Violation;
use crate::replicas::{self, Node, Pages, Performed, perform};

/// Xored into a seed for this world's stream of draws.
const GROUP_STREAM: u64 = 0x6752_4f55_5053;
/// Virtual microseconds per tick.
const TICK_US: u64 = 1_000;
/// Replicas per group.
const REPLICAS: u64 = 3;
/// Ticks of faults and load.
pub const FAULT_TICKS: u64 = 400;
/// Ticks within which, once every replica runs and the network is whole, one serves.
pub const SERVE_TICKS_MAX: u64 = 300;
/// Ticks within which a serving leader of such a group acknowledges a commit.
pub const COMMIT_TICKS_MAX: u64 = 300;
/// Ticks within which every replica has replayed everything committed, after that.
const SETTLE_TICKS_MAX: u64 = 600;
/// Commits the client keeps outstanding at once.
const OUTSTANDING_MAX: usize = 3;

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupOutcome {
    /// Commits acknowledged.
    pub acked: u64,
    /// Commits refused or abandoned (their leader stopped serving, or crashed).
    pub abandoned: u64,
    /// Replica crashes.
    pub crashes: u64,
    /// Members that stopped and were reopened (deposed leaders).
    pub restarts: u64,
    /// Partitions made.
    pub partitions: u64,
    /// Leaders that came to serve.
    pub leaders: u64,
    /// Install rounds the replicas ran (replay over the MOB's budget, and the leader's).
    pub rounds: u64,
    /// Database images copied to replicas that lagged behind what the journals keep.
    pub images: u64,
    /// Image fetches that failed (no reachable replica held one) and were retried.
    pub image_failures: u64,
    /// Replicas retired because no image could be fetched for them
    /// (`MemberError::ImageUnavailable`).
    pub retired: u64,
    /// Replicas whose journal was compacted by the end.
    pub compacted: u64,
    /// The tick the run ended at.
    pub ticks: u64,
}

#[derive(Debug, Clone)]
struct Acked {
    oref: Oref,
    payload: u64,
}

struct World {
    seed: u64,
    rng: SplitMix64,
    now: u64,
    loss_per_mille: u64,
    delay_ticks_max: u64,
    retain_entries: u64,
    mutant: Option<MemberMutant>,
    nodes: BTreeMap<u64, Node>,
    network: BTreeMap<(u64, u64), (u64, Message)>,
    seq: u64,
    partition: Option<Vec<BTreeSet<u64>>>,
    desc: ClassDesc,
    next_ticket: u64,
    /// ticket → (replica, payload).
    outstanding: BTreeMap<u64, (u64, u64)>,
    acked: Vec<Acked>,
    next_payload: u64,
    out: GroupOutcome,
    /// Phases last seen, to count leaders that came to serve.
    serving: BTreeSet<(u64, u64)>,
    /// Replicas for which no image could be fetched: never restarted.
    retired: BTreeSet<u64>,
}

/// Runs seed `seed` of the replicated-server world.
pub fn run_group(seed: u64) -> Result<GroupOutcome, Violation> {
    run_group_with(seed, None)
}

/// Runs seed `seed` with every member the deliberately broken `mutant` (or correct).
pub fn run_group_with(seed: u64, mutant: Option<MemberMutant>) -> Result<GroupOutcome, Violation> {
    let mut rng = SplitMix64::new(seed ^ GROUP_STREAM);
    let loss_per_mille = rng.below(80);
    let delay_ticks_max = 1 + rng.below(4);
    // Half the seeds compact their journals often, under every replica.
    let retain_entries = if rng.coin() { 40 + rng.below(40) } else { 1_000 };
    let mut w = World {
        seed,
        rng,
        now: 0,
        loss_per_mille,
        delay_ticks_max,
        retain_entries,
        mutant,
        nodes: BTreeMap::new(),
        network: BTreeMap::new(),
        seq: 0,
        partition: None,
        desc: ClassDesc::new("sim.Item", 16, &[], VarKind::None).expect("a valid class"),
        next_ticket: 1,
        outstanding: BTreeMap::new(),
        acked: Vec::new(),
        next_payload: 1,
        out: GroupOutcome::default(),
        serving: BTreeSet::new(),
        retired: BTreeSet::new(),
    };
    for id in 1..=REPLICAS {
        let disk = MemDisk::with_sector_bytes(64);
        io::create(&disk, 4096, ServerId(1)).map_err(|e| w.violation(format!("create: {e}")))?;
        w.nodes.insert(id, Node::new(disk));
        w.start(id)?;
    }
    w.faults()?;
    w.judge()?;
    w.out.ticks = w.now;
    Ok(w.out)
}

impl World {
    fn violation(&self, what: String) -> Violation {
        let mut s = format!("group seed {} tick {}: {what}\n", self.seed, self.now);
        for (id, n) in &self.nodes {
            match &n.run {
                Some((m, _)) => s += &format!("  {id}: {:?}\n", m.status()),
                None => s += &format!("  {id}: down\n"),
            }
        }
        s += &format!(
            "  replay: THOR_SIM_SEED={} cargo test -p thor-sim --test groups replay -- --nocapture",
            self.seed
        );
        Violation(s)
    }

    fn core_config(&self) -> CoreConfig {
        CoreConfig {
            mob_bytes: 8 << 10,
            flush_start_percent: 50,
            page_cache_bytes: 4 * 4096,
            flush_batch_pages: 2,
            log_buffer_bytes: 64 << 10,
            hash_key: crate::hash_key(self.seed),
            ..CoreConfig::default()
        }
    }

    /// Opens replica `id` from its disk alone: the database without a log of its own, and the
    /// group's journal.
    fn start(&mut self, id: u64) -> Result<(), Violation> {
        let cfg = self.core_config();
        let founders: Vec<u64> = (1..=REPLICAS).collect();
        let mcfg = MemberConfig { retain_entries: self.retain_entries, mutant: self.mutant };
        let opened =
            replicas::open(&self.nodes[&id].disk, id, &founders, self.seed ^ id, cfg, mcfg);
        match opened {
            Ok(run) => {
                self.nodes.get_mut(&id).expect("known").run = Some(run);
                Ok(())
            }
            Err(e) => Err(self.violation(format!("replica {id} does not open: {e}"))),
        }
    }

    fn up(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| n.run.is_some()).map(|(id, _)| *id).collect()
    }

    /// Replicas down that may restart (not retired).
    fn down(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(id, n)| n.run.is_none() && !self.retired.contains(id))
            .map(|(id, _)| *id)
            .collect()
    }

    fn member(&self, id: u64) -> Option<&Member> {
        self.nodes[&id].run.as_ref().map(|(m, _)| m)
    }

    fn serving_leader(&self) -> Option<u64> {
        replicas::serving_leader(&self.nodes)
    }

    fn can_talk(&self, a: u64, b: u64) -> bool {
        match &self.partition {
            None => true,
            Some(groups) => groups.iter().any(|g| g.contains(&a) && g.contains(&b)),
        }
    }

    fn pick(&mut self, from: &[u64]) -> Option<u64> {
        (!from.is_empty()).then(|| from[self.rng.below(from.len() as u64) as usize])
    }

    /// The run's faults and load.
    fn faults(&mut self) -> Result<(), Violation> {
        for _ in 0..FAULT_TICKS {
            let r = self.rng.below(1000);
            if r < 12 {
                if let Some(id) = self.pick(&self.up()) {
                    self.crash(id);
                }
            } else if r < 40 {
                if let Some(id) = self.pick(&self.down()) {
                    self.start(id)?;
                }
            } else if r < 52 {
                self.partition_some();
            } else if r < 75 {
                self.partition = None;
            }
            if self.outstanding.len() < OUTSTANDING_MAX && self.rng.below(100) < 40 {
                self.submit()?;
            }
            self.tick()?;
        }
        Ok(())
    }

    /// A partition: the leader isolated, a minority (one replica) cut off, or everyone apart.
    fn partition_some(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        let alone = match self.rng.below(3) {
            0 => self.serving_leader().or_else(|| self.pick(&ids)),
            1 => self.pick(&ids),
            _ => {
                self.partition = Some(ids.iter().map(|i| BTreeSet::from([*i])).collect());
                self.out.partitions += 1;
                return;
            }
        };
        let Some(alone) = alone else { return };
        let rest: BTreeSet<u64> = ids.iter().copied().filter(|i| *i != alone).collect();
        self.partition = Some(vec![BTreeSet::from([alone]), rest]);
        self.out.partitions += 1;
    }

    fn crash(&mut self, id: u64) {
        let seed = self.rng.next_u64();
        let node = self.nodes.get_mut(&id).expect("known");
        if node.run.take().is_some() {
            node.disk.crash(seed);
            self.out.crashes += 1;
            self.abandon(id);
        }
    }

    /// The client gives up on commits sent to `id` (its connection broke): their outcome is
    /// unknown to it, so they are never counted acknowledged.
    fn abandon(&mut self, id: u64) {
        let before = self.outstanding.len();
        self.outstanding.retain(|_, (r, _)| *r != id);
        self.out.abandoned += (before - self.outstanding.len()) as u64;
    }

    /// Submits a commit creating one object with a new payload to the serving leader.
    fn submit(&mut self) -> Result<(), Violation> {
        let Some(id) = self.serving_leader() else { return Ok(()) };
        let payload = self.next_payload;
        self.next_payload += 1;
        let mut obj = self.desc.new_object(RawRef::tagged_word(0), 0);
        obj[8..16].copy_from_slice(&payload.to_le_bytes());
        // Created object #0 is the class of #1 (each commit brings its own).
        let created = vec![Bytes::from(self.desc.to_class_object()), Bytes::from(obj)];
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.outstanding.insert(ticket, (id, payload));
        let op = DirectOp::Commit(CommitIn { created, ..CommitIn::default() });
        self.step(id, |m, now, out| m.step(now, Input::Direct { ticket, op }, out))
    }

    fn step(
        &mut self,
        id: u64,
        f: impl FnOnce(&mut Member, u64, &mut Vec<Out>) -> Result<(), MemberError>,
    ) -> Result<(), Violation> {
        let now_us = self.now * TICK_US;
        let mut out = Vec::new();
        let r = match self.nodes.get_mut(&id).and_then(|n| n.run.as_mut()) {
            Some((m, _)) => f(m, now_us, &mut out),
            None => return Ok(()),
        };
        match r {
            Ok(()) => self.handle(id, out),
            Err(e) => self.member_failed(id, e),
        }
    }

    /// A member's error. The one a member states for its operator: no database image could be
    /// fetched for it within its bound; it is retired for the rest of the run (as an operator
    /// would replace it) and the group goes on with the others, counted so that the figure is
    /// known. Any other error fails the run.
    fn member_failed(&mut self, id: u64, e: MemberError) -> Result<(), Violation> {
        if let MemberError::ImageUnavailable { .. } = e {
            self.nodes.get_mut(&id).expect("known").run = None;
            self.retired.insert(id);
            self.out.retired += 1;
            self.abandon(id);
            return Ok(());
        }
        Err(self.violation(format!("replica {id}: {e}")))
    }

    fn tick(&mut self) -> Result<(), Violation> {
        self.now += 1;
        for id in self.up() {
            self.step(id, |m, now, out| m.tick(now, out))?;
        }
        while let Some(e) = self.network.first_entry() {
            if e.key().0 > self.now {
                break;
            }
            let (from, msg) = e.remove();
            let to = msg.to;
            let snapshot = msg.msg_type == MessageType::MsgSnapshot;
            let delivered = self.can_talk(from, to) && self.nodes[&to].run.is_some();
            if delivered {
                self.step(to, |m, now, out| m.step_peer(now, msg, out))?;
            }
            if snapshot && let Some((m, _)) = self.nodes.get_mut(&from).and_then(|n| n.run.as_mut())
            {
                let status =
                    if delivered { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
                m.report_snapshot(to, status);
            }
        }
        for id in self.up() {
            if let Some(Phase::Serving { term }) = self.member(id).map(|m| m.status().phase)
                && self.serving.insert((id, term))
            {
                self.out.leaders += 1;
            }
        }
        Ok(())
    }

    fn handle(&mut self, id: u64, out: Vec<Out>) -> Result<(), Violation> {
        let now_us = self.now * TICK_US;
        let mut work = out;
        work.reverse();
        while let Some(o) = work.pop() {
            if self.nodes[&id].run.is_none() {
                return Ok(());
            }
            let mut more = Vec::new();
            let r = match o {
                Out::Send(msg) => {
                    self.send(id, msg);
                    Ok(())
                }
                Out::Core(e) => match perform(&self.run_mut(id).1, e) {
                    Performed::Input(input) => self.run_mut(id).0.step(now_us, input, &mut more),
                    Performed::Done { ticket, result } => {
                        self.answered(id, ticket, result)?;
                        Ok(())
                    }
                    Performed::Other(_) => Ok(()),
                },
                Out::ReadTail { page } => {
                    let (m, ds) = self.run_mut(id);
                    let img = ds.read_page(page);
                    m.tail_read(now_us, page, img, &mut more)
                }
                Out::DirectRefused { ticket, .. } => {
                    if self.outstanding.remove(&ticket).is_some() {
                        self.out.abandoned += 1;
                    }
                    Ok(())
                }
                Out::FetchImage { lsn, .. } => {
                    let got = self.fetch_image(id, lsn);
                    if got.is_err() {
                        self.out.image_failures += 1;
                    }
                    self.run_mut(id).0.image_installed(now_us, got, &mut more)
                }
                // This world never changes its membership.
                Out::Membership { .. } => Ok(()),
                Out::Restart(_) => {
                    // As a process restart: nothing lost from the disk, connections broken.
                    self.nodes.get_mut(&id).expect("known").run = None;
                    self.out.restarts += 1;
                    self.abandon(id);
                    return self.start(id);
                }
            };
            if let Err(e) = r {
                return self.member_failed(id, e);
            }
            work.extend(more.into_iter().rev());
        }
        Ok(())
    }

    /// Copies a database image whose checkpoint is at least `lsn` onto replica `id`'s disk
    /// from a running replica it can talk to (the leader it knows first), as a transport
    /// would, and reopens `id`'s disk side over it. Disk effects are performed at once in this
    /// world, so no install round is half written at any point between steps: every point is
    /// a consistent one.
    fn fetch_image(&mut self, id: u64, lsn: Lsn) -> Result<Superblock, String> {
        let leader = self.member(id).and_then(|m| m.status().replica.leader);
        let mut sources: Vec<u64> =
            self.up().into_iter().filter(|s| *s != id && self.can_talk(id, *s)).collect();
        sources.sort_by_key(|s| Some(*s) != leader);
        let (sb, ds) = replicas::copy_image(&self.nodes, &sources, &self.nodes[&id].disk, lsn)?;
        self.run_mut(id).1 = ds;
        self.out.images += 1;
        Ok(sb)
    }

    fn run_mut(&mut self, id: u64) -> &mut (Member, DiskSide) {
        self.nodes.get_mut(&id).and_then(|n| n.run.as_mut()).expect("up")
    }

    fn answered(&mut self, id: u64, ticket: u64, result: DirectResult) -> Result<(), Violation> {
        let Some((asked, payload)) = self.outstanding.remove(&ticket) else { return Ok(()) };
        if asked != id {
            return Err(self.violation(format!("ticket {ticket} answered by {id}, not {asked}")));
        }
        match result {
            DirectResult::Committed(Ok(out)) => {
                self.acked.push(Acked { oref: out.created[1], payload });
                self.out.acked += 1;
                Ok(())
            }
            DirectResult::Committed(Err(e)) => {
                Err(self.violation(format!("a serving leader refused a commit: {e}")))
            }
            other => Err(self.violation(format!("unexpected answer {other:?}"))),
        }
    }

    fn send(&mut self, from: u64, m: Message) {
        if self.rng.below(1000) < self.loss_per_mille || !self.can_talk(from, m.to) {
            // A lost snapshot is reported, as a transport would, or its leader waits for ever.
            if m.msg_type == MessageType::MsgSnapshot
                && let Some((member, _)) = self.nodes.get_mut(&from).and_then(|n| n.run.as_mut())
            {
                member.report_snapshot(m.to, SnapshotStatus::Failure);
            }
            return;
        }
        let due = self.now + 1 + self.rng.below(self.delay_ticks_max);
        self.seq += 1;
        self.network.insert((due, self.seq), (from, m));
    }

    /// Faults stop: everyone restarts, the network heals; then liveness, then the checks.
    fn judge(&mut self) -> Result<(), Violation> {
        self.partition = None;
        for id in self.down() {
            self.start(id)?;
        }
        let mut waited = 0;
        while self.serving_leader().is_none() {
            if waited == SERVE_TICKS_MAX {
                return Err(self.violation("no serving leader within bound after healing".into()));
            }
            self.tick()?;
            waited += 1;
        }
        let acked = self.out.acked;
        let mut waited = 0;
        while self.out.acked == acked {
            if waited == COMMIT_TICKS_MAX {
                return Err(self.violation("no commit acknowledged within bound".into()));
            }
            if self.outstanding.is_empty() {
                self.submit()?;
            }
            self.tick()?;
            waited += 1;
        }
        let mut waited = 0;
        while !self.settled() {
            if waited == SETTLE_TICKS_MAX {
                return Err(self.violation("replicas did not catch up within bound".into()));
            }
            self.tick()?;
            waited += 1;
        }
        let ids = self.up();
        let mut first: Option<(u64, Pages)> = None;
        for id in ids {
            let pages = self.pages(id)?;
            self.check_acked(id, &pages)?;
            match &first {
                None => first = Some((id, pages)),
                Some((f, p)) if *p != pages => {
                    return Err(self.violation(format!(
                        "replicas {f} and {id} applied the same index but hold different pages"
                    )));
                }
                Some(_) => {}
            }
        }
        self.out.compacted = self
            .up()
            .iter()
            .filter_map(|id| self.member(*id))
            .filter(|m| m.status().replica.snapshot_index > 0)
            .count() as u64;
        self.out.rounds = self
            .up()
            .iter()
            .filter_map(|id| self.member(*id))
            .map(|m| m.core().stats().flush_rounds)
            .sum();
        Ok(())
    }

    /// Whether every replica applied everything committed, with nothing left to replay and
    /// nothing proposed and undecided.
    fn settled(&self) -> bool {
        let ms: Vec<&Member> = self.up().iter().filter_map(|id| self.member(*id)).collect();
        replicas::settled(&ms)
    }

    /// Every page up to the tail at replica `id`: its version and objects, as committed
    /// (installed image plus the MOB's versions).
    fn pages(&mut self, id: u64) -> Result<Pages, Violation> {
        let (m, ds) = self.nodes.get_mut(&id).and_then(|n| n.run.as_mut()).expect("up");
        let r = replicas::pages(m, ds);
        r.map_err(|e| self.violation(format!("replica {id}: {e}")))
    }

    fn check_acked(&self, id: u64, pages: &Pages) -> Result<(), Violation> {
        for a in &self.acked {
            let page = a.oref.page().map(|p| p.get());
            let found = page
                .and_then(|p| pages.get(&p))
                .and_then(|(_, objs)| objs.iter().find(|(o, _)| *o == a.oref.oid().get()))
                .map(|(_, b)| &b[8..16] == a.payload.to_le_bytes().as_slice());
            if found != Some(true) {
                return Err(self.violation(format!(
                    "replica {id} lacks acknowledged payload {} at {}",
                    a.payload, a.oref
                )));
            }
        }
        Ok(())
    }
}
