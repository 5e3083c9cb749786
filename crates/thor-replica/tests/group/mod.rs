//! A deterministic harness of thor servers as replica groups: every replica a real
//! [`Member`] (a `thor_server_core::Core` and a [`thor_replica::Replica`]) over its own
//! `MemDisk` holding a database and the group's journal, a seeded network between them, and
//! a client that commits through the embedded API (`DirectOp::Commit`) to whichever replica
//! serves.
//!
//! Disk effects are performed at once, as `thor_server::io::recover` performs its install
//! rounds; a crash loses what a replica did not sync (`MemDisk::crash`); a member that asks to
//! restart (`Out::Restart`) is reopened from its disk. Every acknowledged commit is recorded
//! (its object and bytes), and the checks read the objects back from each replica's committed
//! pages (installed image plus the MOB's versions), whatever its phase.

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::Message;
use thor_core::{ClassDesc, Lsn, Oref, PageId, PageView, RawRef, ServerId, VarKind};
use thor_replica::member::{Member, MemberConfig, MemberError, MemberMutant, Out, Phase};
use thor_replica::{ReplicaConfig, Role};
use thor_server::io::{self, DiskSide};
use thor_server::member_io;
use thor_server::{CommitIn, CoreConfig, DirectOp, DirectResult, Effect, Input, ReadError};
use thor_storage::{Disk, MemDisk, SplitMix64};
use thor_wire::{Hello, Request, RequestBody};

/// Virtual microseconds per tick.
pub const TICK_US: u64 = 1_000;
/// Ticks within which a group whose majority can talk has a serving leader.
pub const SERVE_TICKS_MAX: u64 = 300;
/// Ticks within which a commit to a serving leader of such a group is answered.
pub const COMMIT_TICKS_MAX: u64 = 300;

/// How a group is built.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    pub replicas: u64,
    pub seed: u64,
    pub loss_per_mille: u64,
    pub delay_ticks_max: u64,
    /// The MOB's budget: small, so that replay runs install rounds and checkpoints.
    pub mob_bytes: usize,
    pub retain_entries: u64,
    pub mutant: Option<MemberMutant>,
}

impl GroupConfig {
    pub fn new(replicas: u64, seed: u64) -> Self {
        GroupConfig {
            replicas,
            seed,
            loss_per_mille: 0,
            delay_ticks_max: 1,
            mob_bytes: 8 << 10,
            // Generous: a replica down for a scenario's commits catches up by log.
            retain_entries: 1_000,
            mutant: None,
        }
    }
}

struct Node {
    disk: MemDisk,
    member: Option<Member>,
    disk_side: Option<DiskSide>,
    /// Removed from the group (it applied a membership without itself): never restarted.
    removed: bool,
}

/// An acknowledged commit: the object it created and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub oref: Oref,
    pub lsn: Lsn,
    pub bytes: Bytes,
}

/// A page's version and its objects (object id, bytes), as the checks compare them.
pub type PageContents = (Lsn, Vec<(u16, Vec<u8>)>);

/// The group. See the module documentation.
pub struct Group {
    pub cfg: GroupConfig,
    rng: SplitMix64,
    now: u64,
    nodes: BTreeMap<u64, Node>,
    /// (due tick, seq) → (from, message).
    network: BTreeMap<(u64, u64), (u64, Message)>,
    seq: u64,
    partition: Option<Vec<BTreeSet<u64>>>,
    desc: ClassDesc,
    next_ticket: u64,
    /// Tickets outstanding: ticket → (replica, object bytes).
    outstanding: BTreeMap<u64, (u64, Bytes)>,
    /// Answers: ticket → the outcome (`None`: refused or failed).
    answers: BTreeMap<u64, Option<Acked>>,
    /// Every acknowledged commit.
    pub acked: Vec<Acked>,
    /// Restarts asked for by members.
    pub restarts: u64,
    /// Database images copied to lagging replicas.
    pub images: u64,
    /// Image fetches fail while set (as when no replica holding one can be reached).
    pub refuse_images: bool,
    /// Image fetches that failed.
    pub image_failures: u64,
    /// Commits the serving core refused, why.
    pub refusals: Vec<String>,
    /// Connections' replies seen: (replica, conn) → the replies.
    pub replies: BTreeMap<(u64, u64), Vec<thor_wire::Reply>>,
    /// Membership changes each replica applied: (replica, the voters after).
    pub memberships: Vec<(u64, Vec<u64>)>,
}

impl Group {
    pub fn new(cfg: GroupConfig) -> Group {
        let mut g = Group {
            cfg,
            rng: SplitMix64::new(cfg.seed ^ 0x6_7209),
            now: 0,
            nodes: BTreeMap::new(),
            network: BTreeMap::new(),
            seq: 0,
            partition: None,
            desc: ClassDesc::new("test.Item", 16, &[], VarKind::None).expect("a valid class"),
            next_ticket: 1,
            outstanding: BTreeMap::new(),
            answers: BTreeMap::new(),
            acked: Vec::new(),
            restarts: 0,
            images: 0,
            refuse_images: false,
            image_failures: 0,
            refusals: Vec::new(),
            replies: BTreeMap::new(),
            memberships: Vec::new(),
        };
        for id in 1..=cfg.replicas {
            let disk = MemDisk::with_sector_bytes(64);
            io::create(&disk, 4096, ServerId(1)).expect("create");
            g.nodes.insert(id, Node { disk, member: None, disk_side: None, removed: false });
            g.start(id);
        }
        g
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!("seed {} tick {}: {what}\n{}", self.cfg.seed, self.now, self.describe())
    }

    pub fn describe(&self) -> String {
        let mut s = format!("  refusals: {:?}\n", &self.refusals[..self.refusals.len().min(3)]);
        for (id, n) in &self.nodes {
            match &n.member {
                Some(m) => s += &format!("  {id}: {:?}\n", m.status()),
                None => s += &format!("  {id}: down\n"),
            }
        }
        s
    }

    fn core_config(&self) -> CoreConfig {
        CoreConfig {
            mob_bytes: self.cfg.mob_bytes,
            flush_start_percent: 50,
            page_cache_bytes: 4 * 4096,
            flush_batch_pages: 2,
            log_buffer_bytes: 64 << 10,
            ..CoreConfig::default()
        }
    }

    /// Opens replica `id` from its disk alone (thor-server's `member_io::open_member`, as the
    /// threaded engine does).
    fn start(&mut self, id: u64) {
        let cfg = self.core_config();
        let founders: Vec<u64> = (1..=self.cfg.replicas).collect();
        let seed = self.cfg.seed;
        let mcfg =
            MemberConfig { retain_entries: self.cfg.retain_entries, mutant: self.cfg.mutant };
        let node = self.nodes.get_mut(&id).expect("known");
        let disk = Arc::new(node.disk.clone()) as Arc<dyn Disk>;
        let opened = member_io::open_member(
            disk,
            cfg,
            mcfg,
            ReplicaConfig::new(id, seed ^ id),
            Some(&founders),
        )
        .expect("the member opens");
        node.member = Some(opened.member);
        node.disk_side = Some(opened.disk_side);
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn is_up(&self, id: u64) -> bool {
        self.nodes[&id].member.is_some()
    }

    pub fn member(&self, id: u64) -> Option<&Member> {
        self.nodes[&id].member.as_ref()
    }

    /// The replica that serves as leader (the highest term's), if any.
    pub fn serving(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|(id, n)| n.member.as_ref().map(|m| (*id, m.status())))
            .filter(|(_, s)| matches!(s.phase, Phase::Serving { .. }))
            .max_by_key(|(_, s)| s.replica.term)
            .map(|(id, _)| id)
    }

    pub fn can_talk(&self, a: u64, b: u64) -> bool {
        match &self.partition {
            None => true,
            Some(groups) => groups.iter().any(|g| g.contains(&a) && g.contains(&b)),
        }
    }

    pub fn partition(&mut self, groups: &[&[u64]]) {
        self.partition = Some(groups.iter().map(|g| g.iter().copied().collect()).collect());
    }

    pub fn heal(&mut self) {
        self.partition = None;
    }

    /// Crashes replica `id`: the disk loses (or tears) what was not synced.
    pub fn crash(&mut self, id: u64) {
        let seed = self.rng.next_u64();
        let node = self.nodes.get_mut(&id).expect("known");
        if node.member.take().is_some() {
            node.disk_side = None;
            node.disk.crash(seed);
            self.drop_tickets_of(id);
        }
    }

    pub fn restart(&mut self, id: u64) {
        if !self.is_up(id) && !self.nodes[&id].removed {
            self.start(id);
        }
    }

    /// A new replica `id` with an empty database (as every founder's was) and an empty
    /// journal bootstrapped with the founders' membership, so that replaying the group's log
    /// from its first entry rebuilds the membership; it is no voter (and never campaigns)
    /// until a change adding it applies. It waits for the leader's entries or snapshot.
    pub fn add_node(&mut self, id: u64) {
        assert!(!self.nodes.contains_key(&id), "replica {id} exists");
        let disk = MemDisk::with_sector_bytes(64);
        io::create(&disk, 4096, ServerId(1)).expect("create");
        self.nodes.insert(id, Node { disk, member: None, disk_side: None, removed: false });
        self.start(id);
    }

    /// Proposes `change` at the serving leader; its answer.
    pub fn propose_membership(
        &mut self,
        change: thor_replica::MembershipChange,
    ) -> Result<thor_replica::Proposal, thor_replica::ProposeError> {
        let id = self.elect();
        self.propose_membership_at(id, change)
    }

    /// Proposes `change` at replica `id`, whatever its role; its answer.
    pub fn propose_membership_at(
        &mut self,
        id: u64,
        change: thor_replica::MembershipChange,
    ) -> Result<thor_replica::Proposal, thor_replica::ProposeError> {
        self.member_mut(id).propose_membership(change)
    }

    /// Whether replica `id` was removed from the group.
    pub fn is_removed(&self, id: u64) -> bool {
        self.nodes[&id].removed
    }

    fn drop_tickets_of(&mut self, id: u64) {
        let gone: Vec<u64> =
            self.outstanding.iter().filter(|(_, (r, _))| *r == id).map(|(t, _)| *t).collect();
        for t in gone {
            self.outstanding.remove(&t);
            self.answers.insert(t, None);
        }
    }

    /// One tick: every member's clock, the messages due, everything that follows.
    pub fn tick(&mut self) {
        self.now += 1;
        let now_us = self.now * TICK_US;
        for id in self.ids() {
            let mut out = Vec::new();
            let r = match self.nodes.get_mut(&id).and_then(|n| n.member.as_mut()) {
                Some(m) => m.tick(now_us, &mut out),
                None => continue,
            };
            self.handle(id, r, out);
        }
        while let Some(e) = self.network.first_entry() {
            if e.key().0 > self.now {
                break;
            }
            let (from, msg) = e.remove();
            let to = msg.to;
            if !self.can_talk(from, to) {
                continue;
            }
            let mut out = Vec::new();
            let r = match self.nodes.get_mut(&to).and_then(|n| n.member.as_mut()) {
                Some(m) => m.step_peer(now_us, msg, &mut out),
                None => continue,
            };
            self.handle(to, r, out);
        }
    }

    pub fn run_until(&mut self, max_ticks: u64, mut done: impl FnMut(&Group) -> bool) -> bool {
        for _ in 0..max_ticks {
            if done(self) {
                return true;
            }
            self.tick();
        }
        done(self)
    }

    /// Waits for a serving leader; returns it.
    pub fn elect(&mut self) -> u64 {
        if !self.run_until(SERVE_TICKS_MAX, |g| g.serving().is_some()) {
            self.fail("no serving leader within bound");
        }
        self.serving().expect("serving")
    }

    /// Steps member `id` with a core input.
    pub fn step(&mut self, id: u64, input: Input) {
        let now_us = self.now * TICK_US;
        let mut out = Vec::new();
        let r = match self.nodes.get_mut(&id).and_then(|n| n.member.as_mut()) {
            Some(m) => m.step(now_us, input, &mut out),
            None => return,
        };
        self.handle(id, r, out);
    }

    /// Submits a commit creating one object with payload `n` to replica `id`; returns the
    /// ticket.
    pub fn submit(&mut self, id: u64, n: u64) -> u64 {
        let mut obj = self.desc.new_object(RawRef::tagged_word(0), 0);
        obj[8..16].copy_from_slice(&n.to_le_bytes());
        let bytes = Bytes::from(obj);
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.outstanding.insert(ticket, (id, bytes.clone()));
        // Created object #0 is the class of #1 (each commit brings its own: no setup).
        let created = vec![Bytes::from(self.desc.to_class_object()), bytes];
        let op = DirectOp::Commit(CommitIn { created, ..CommitIn::default() });
        self.step(id, Input::Direct { ticket, op });
        ticket
    }

    /// Submits a read-only commit of what `reads` names to replica `id`; its ticket.
    pub fn submit_read_only(&mut self, id: u64, reads: Vec<Oref>) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.outstanding.insert(ticket, (id, Bytes::new()));
        let op = DirectOp::Commit(CommitIn { reads, ..CommitIn::default() });
        self.step(id, Input::Direct { ticket, op });
        ticket
    }

    /// The answer to `ticket`: `None` while outstanding, `Some(None)` refused or abandoned.
    pub fn answer(&self, ticket: u64) -> Option<Option<Acked>> {
        self.answers.get(&ticket).cloned()
    }

    /// Commits payload `n` as a client would: to the serving leader, again after a refusal or
    /// a lost answer, until acknowledged within `max_ticks`.
    pub fn commit(&mut self, n: u64, max_ticks: u64) -> Option<Acked> {
        let deadline = self.now + max_ticks;
        while self.now < deadline {
            let Some(l) = self.serving() else {
                self.tick();
                continue;
            };
            let t = self.submit(l, n);
            while self.now < deadline && self.answer(t).is_none() {
                let still = self.member(l).is_some_and(Member::is_serving);
                if !still {
                    // The leader stopped serving: its answer may never come (a client's
                    // broken connection); try again on the next leader.
                    self.outstanding.remove(&t);
                    break;
                }
                self.tick();
            }
            if let Some(Some(a)) = self.answer(t) {
                return Some(a);
            }
            // Refused or abandoned: a client waits a little before it retries.
            self.tick();
        }
        None
    }

    /// Commits `count` payloads from `first` on; every one must be acknowledged.
    pub fn commit_n(&mut self, first: u64, count: u64) -> Vec<Acked> {
        (first..first + count)
            .map(|n| {
                self.commit(n, COMMIT_TICKS_MAX)
                    .unwrap_or_else(|| self.fail(format!("commit {n} within bound")))
            })
            .collect()
    }

    /// Connects `conn` to replica `id` and says Hello at protocol version `version`; returns
    /// the replies it got.
    pub fn hello(&mut self, id: u64, conn: u64, version: u16) -> Vec<thor_wire::Reply> {
        self.step(id, Input::Connect { conn });
        let mut h = Hello::new(Bytes::new(), "test");
        h.max_version = version;
        let req = Request::new(RequestBody::Hello(h));
        self.step(id, Input::Request { conn, id: 1, req });
        self.replies.remove(&(id, conn)).unwrap_or_default()
    }

    fn handle(&mut self, id: u64, r: Result<(), MemberError>, out: Vec<Out>) {
        if let Err(e) = r {
            self.fail(format!("replica {id}: {e}"));
        }
        let now_us = self.now * TICK_US;
        let mut work: Vec<Out> = out;
        work.reverse();
        while let Some(o) = work.pop() {
            if !self.is_up(id) {
                return;
            }
            let mut more = Vec::new();
            let r = match o {
                Out::Send(m) => {
                    self.send(id, m);
                    Ok(())
                }
                Out::Core(e) => match self.perform(id, e) {
                    Some(input) => self.member_mut(id).step(now_us, input, &mut more),
                    None => Ok(()),
                },
                Out::ReadTail { page } => {
                    let img = member_io::read_tail(self.disk_side(id), page);
                    self.member_mut(id).tail_read(now_us, page, img, &mut more)
                }
                Out::DirectRefused { ticket, .. } => {
                    self.outstanding.remove(&ticket);
                    self.answers.insert(ticket, None);
                    Ok(())
                }
                Out::FetchImage { lsn, .. } => {
                    let got = self.fetch_image(id, lsn);
                    self.member_mut(id).image_installed(now_us, got, &mut more)
                }
                Out::Membership { voters, removed, .. } => {
                    self.memberships.push((id, voters));
                    if removed {
                        // Removed from the group: its driver stops it for good.
                        let node = self.nodes.get_mut(&id).expect("known");
                        node.member = None;
                        node.disk_side = None;
                        node.removed = true;
                        self.drop_tickets_of(id);
                        return;
                    }
                    Ok(())
                }
                Out::Restart(_) => {
                    self.restarts += 1;
                    let node = self.nodes.get_mut(&id).expect("known");
                    node.member = None;
                    node.disk_side = None;
                    self.drop_tickets_of(id);
                    self.start(id);
                    return;
                }
            };
            if let Err(e) = r {
                self.fail(format!("replica {id}: {e}"));
            }
            for m in more.into_iter().rev() {
                work.push(m);
            }
        }
    }

    /// Copies a database image whose checkpoint is at least `lsn` onto replica `id`'s disk
    /// from a replica it can reach (the leader first), as a transport would fetch it, and
    /// reopens `id`'s disk side over it. Disk effects are performed at once here, so no
    /// install round is ever half written: any point is a consistent one.
    fn fetch_image(
        &mut self,
        id: u64,
        lsn: Lsn,
    ) -> Result<thor_server::superblock::Superblock, String> {
        if self.refuse_images {
            self.image_failures += 1;
            return Err("image fetches refused by the test".into());
        }
        let leader = self.member(id).and_then(|m| m.status().replica.leader);
        let mut sources: Vec<u64> = self
            .ids()
            .into_iter()
            .filter(|s| *s != id && self.is_up(*s) && self.can_talk(id, *s))
            .collect();
        sources.sort_by_key(|s| Some(*s) != leader);
        for s in sources {
            let ds = self.disk_side(s);
            let Ok(sb) = io::read_superblock(&*ds.disk) else { continue };
            if sb.checkpoint < lsn {
                continue;
            }
            let dest = Arc::new(self.nodes[&id].disk.clone()) as Arc<dyn Disk>;
            let (sb, ds) = member_io::install_image(dest, |d| ds.image_into(d))?;
            self.images += 1;
            self.nodes.get_mut(&id).expect("known").disk_side = Some(ds);
            return Ok(sb);
        }
        Err(format!("no reachable replica holds an image at checkpoint {lsn} or later"))
    }

    fn member_mut(&mut self, id: u64) -> &mut Member {
        self.nodes.get_mut(&id).and_then(|n| n.member.as_mut()).expect("up")
    }

    fn disk_side(&self, id: u64) -> &DiskSide {
        self.nodes[&id].disk_side.as_ref().expect("up")
    }

    /// Performs a core effect (disk effects through thor-server's `member_io::perform`, as the
    /// threaded engine does); returns the input that reports it.
    fn perform(&mut self, id: u64, e: Effect) -> Option<Input> {
        match e {
            Effect::Done { ticket, result } => {
                let (r, bytes) = self.outstanding.remove(&ticket)?;
                assert_eq!(r, id, "answered by the replica asked");
                let a = match result {
                    // A read-only commit (`submit_read_only`): nothing created.
                    DirectResult::Committed(Ok(out)) if bytes.is_empty() => {
                        Some(Acked { oref: Oref::NULL, lsn: out.lsn, bytes })
                    }
                    DirectResult::Committed(Ok(out)) => {
                        let a = Acked { oref: out.created[1], lsn: out.lsn, bytes };
                        self.acked.push(a.clone());
                        Some(a)
                    }
                    DirectResult::Committed(Err(e)) => {
                        self.refusals.push(e.to_string());
                        None
                    }
                    other => self.fail(format!("unexpected answer {other:?}")),
                };
                self.answers.insert(ticket, a);
                None
            }
            Effect::Reply { conn, reply, .. } => {
                self.replies.entry((id, conn)).or_default().push(reply);
                None
            }
            other => member_io::perform(self.disk_side(id), &other),
        }
    }

    fn send(&mut self, from: u64, m: Message) {
        if self.rng.below(1000) < self.cfg.loss_per_mille || !self.can_talk(from, m.to) {
            return;
        }
        let due = self.now + 1 + self.rng.below(self.cfg.delay_ticks_max.max(1));
        self.seq += 1;
        self.network.insert((due, self.seq), (from, m));
    }

    /// The committed image of `page` at replica `id` (installed image plus the MOB's
    /// versions), whatever its phase.
    pub fn page(&mut self, id: u64, page: PageId) -> Vec<u8> {
        let img = match self.disk_side(id).read_page(page) {
            Ok(img) => vec![(page, img)],
            // Never installed: the core knows it fresh.
            Err(ReadError::Corrupt(_)) => Vec::new(),
            Err(e) => self.fail(format!("replica {id} reads page {page}: {e:?}")),
        };
        match self.member_mut(id).core_mut().store_mut().committed_page(page, &img) {
            Ok(Some(p)) => p,
            other => self.fail(format!("replica {id} composes page {page}: {other:?}")),
        }
    }

    /// The objects of every page up to the tail at replica `id`, with each page's version.
    pub fn pages(&mut self, id: u64) -> BTreeMap<u32, PageContents> {
        let tail = self.member(id).expect("up").core().tail_page().0;
        let mut out = BTreeMap::new();
        for p in PageId::FIRST.get()..=tail.get() {
            let page = PageId::new(p).expect("a page id");
            let img = self.page(id, page);
            let v = PageView::parse(&img).unwrap_or_else(|e| self.fail(format!("{e}")));
            let objects = v.objects().map(|(o, b)| (o.get(), b.to_vec())).collect();
            out.insert(p, (v.version(), objects));
        }
        out
    }

    /// Checks that every acknowledged commit's object is at replica `id`, with its bytes.
    pub fn check_acked_at(&mut self, id: u64) {
        for a in self.acked.clone() {
            let page = a.oref.page().expect("an object on a page");
            let img = self.page(id, page);
            let v = PageView::parse(&img).unwrap_or_else(|e| self.fail(format!("{e}")));
            // The payload (the class reference is rewritten when the commit creates it).
            if v.object(a.oref.oid()).map(|o| &o[8..16]) != Some(&a.bytes[8..16]) {
                self.fail(format!("replica {id} lacks acknowledged {a:?}"));
            }
        }
    }

    /// Lets every running replica replay everything committed, within the bound.
    pub fn settle(&mut self) {
        let ok = self.run_until(COMMIT_TICKS_MAX, |g| {
            let ss: Vec<_> = g.nodes.values().filter_map(|n| n.member.as_ref()).collect();
            let commit = ss.iter().map(|m| m.status().replica.commit).max().unwrap_or(0);
            ss.iter().all(|m| {
                let s = m.status();
                // Nothing in flight either: a serving core's prepared commits show in its pages.
                s.replica.applied >= commit
                    && s.replica.last_index == commit
                    && (!m.is_serving() || s.durable.0 + 1 == s.next_lsn.0)
                    && s.queued == 0
                    && !m.core().round_in_flight()
            })
        });
        if !ok {
            self.fail("the replicas did not catch up within bound");
        }
    }

    /// Whether replica `id` leads (any phase).
    pub fn leads(&self, id: u64) -> bool {
        self.member(id).is_some_and(|m| m.status().replica.role == Role::Leader)
    }
}
