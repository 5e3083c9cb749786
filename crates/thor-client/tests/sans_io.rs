//! The client's protocol core ([`ClientCore`]) driven without I/O: several cores against a real
//! server core (`thor_server::Core` over a `MemDisk`), message by message, in one thread, with
//! no sleeps and no threads. The test is the network: it hands each request a core returns to
//! the server core and each reply back to the core that asked, in an order it chooses, so that
//! one client's commit lands between another's read and commit. Time is a number the test
//! advances.
//!
//! The database: one setup commit creates two counters, `thor.Bytes` objects large enough that
//! each fills most of a page of its own, and points root slots 0 and 1 at them. A counter's
//! value is the first 8 bytes of its byte part.

use std::sync::Arc;

use thor_client::proto::{ClientCore, Event, PartOutcome, Read, Seeds};
use thor_client::{ClientError, ConflictCause, SessionConfig};
use thor_core::{Oref, RawRef, ServerId, builtin};
use thor_server::io::{self, DiskSide};
use thor_server::{CommitLog, ConnId, Core, CoreConfig, Effect, Input, StudyOptions, TwoPcConfig};
use thor_storage::{Log, LogOptions, MemDisk};
use thor_wire::{
    CLIENT_TIE_BIT, Commit, Hello, Participant, PeerMsg, Reply, ReplyBody, Request, RequestBody,
    ServerInfo, Stamp,
};

const PAGE_SIZE: usize = 4096;
/// Bytes of each counter's byte part: more than half a page, so no two share a page.
const COUNTER_BYTES: usize = PAGE_SIZE * 5 / 8;
/// A nanosecond in the core's time, a microsecond in the server's.
const US: u64 = 1_000;

/// A message from one server core to another: its addressee and the message.
type PeerSend = (ServerId, PeerMsg);

/// The server: its core, and the disk side and log that perform its effects synchronously.
struct Server {
    core: Core,
    disk: DiskSide,
    log: Arc<Log>,
    now_us: u64,
    conns: ConnId,
    ids: u64,
}

impl Server {
    fn new() -> Server {
        Server::of(1, 1)
    }

    /// Server `id` of `n` (peers of one another for two-phase commit).
    fn of(id: u32, n: u32) -> Server {
        let disk = MemDisk::new();
        io::create(&disk, PAGE_SIZE, ServerId(id)).unwrap();
        let twopc =
            TwoPcConfig { peers: (1..=n).map(ServerId).collect(), ..TwoPcConfig::default() };
        let cfg = CoreConfig { twopc, ..CoreConfig::default() };
        let r = io::recover(Arc::new(disk), cfg, LogOptions::default(), &StudyOptions::default())
            .unwrap();
        Server { core: r.core, disk: r.disk_side, log: r.log, now_us: 1, conns: 0, ids: 0 }
    }

    /// Steps `input` and every input its effects lead to (appends are synced at once, reads
    /// and install rounds performed at once); returns the replies it sent. Messages to other
    /// servers are refused: see [`Server::step_peers`].
    fn step(&mut self, input: Input) -> Vec<(ConnId, Reply)> {
        let (replies, peers) = self.step_peers(input);
        assert!(peers.is_empty(), "a message to another server: {peers:?}");
        replies
    }

    /// [`Server::step`], returning the messages to other servers too.
    fn step_peers(&mut self, input: Input) -> (Vec<(ConnId, Reply)>, Vec<PeerSend>) {
        let mut inputs = vec![input];
        let mut replies = Vec::new();
        let mut peers = Vec::new();
        while let Some(input) = inputs.pop() {
            let mut fx = Vec::new();
            self.core.step(self.now_us, input, &mut fx);
            for e in fx {
                match e {
                    Effect::Reply { conn, reply, .. } => replies.push((conn, reply)),
                    Effect::Append { lsn, record } => {
                        assert_eq!(CommitLog::append_shared(&*self.log, record).unwrap(), lsn);
                        let durable = CommitLog::sync(&*self.log).unwrap();
                        inputs.push(Input::Durable { lsn: durable });
                    }
                    Effect::Done { .. } => {}
                    e @ (Effect::Read { .. } | Effect::Install(_) | Effect::Checkpoint(_)) => {
                        inputs.extend(self.disk.perform(&e, &*self.log));
                    }
                    Effect::Peer { to, msg } => peers.push((to, msg)),
                    e @ Effect::Backup { .. } => panic!("no backups: {e:?}"),
                }
            }
        }
        (replies, peers)
    }

    /// Delivers `req` on `conn` and returns the reply to it.
    /// A commit the server holds back for another session's claim (fair retries) is answered
    /// once the claim ends or its hold runs out: time passes to the core's deadlines, each a
    /// tick, until the reply comes (a bounded number of them).
    fn call(&mut self, conn: ConnId, req: Request) -> Reply {
        self.ids += 1;
        let mut replies = self.step(Input::Request { conn, id: self.ids, req });
        for _ in 0..16 {
            if !replies.is_empty() {
                break;
            }
            let deadline = self.core.next_deadline_us().expect("a held commit has a deadline");
            self.now_us = self.now_us.max(deadline);
            replies = self.step(Input::Tick);
        }
        assert_eq!(replies.len(), 1, "one reply per request: {replies:?}");
        let (to, reply) = replies.pop().unwrap();
        assert_eq!(to, conn);
        reply
    }

    /// Opens a connection: `Hello`, answered with what the core needs to start.
    fn connect(&mut self) -> (ConnId, ServerInfo) {
        self.conns += 1;
        let conn = self.conns;
        assert!(self.step(Input::Connect { conn }).is_empty());
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], "sans-io")));
        match self.call(conn, hello).body {
            ReplyBody::HelloOk(info) => (conn, info),
            other => panic!("hello answered with {other:?}"),
        }
    }
}

/// One client: a protocol core and its connection.
struct Client {
    core: ClientCore,
    conn: ConnId,
}

impl Client {
    fn new(server: &mut Server, seed: u64) -> Client {
        let (conn, info) = server.connect();
        let cfg = SessionConfig { prefetch_pages: Some(0), ..SessionConfig::default() };
        let seeds = Seeds { key: seed, commit_ids: seed ^ 0x5eed };
        let core = ClientCore::new(info, cfg, seeds, None, false).unwrap();
        Client { core, conn }
    }

    /// A client that can resume after a broken connection: its commits carry ids, and its
    /// first request registers its key.
    fn resumable(server: &mut Server, seed: u64) -> Client {
        let (conn, info) = server.connect();
        let cfg = SessionConfig { prefetch_pages: Some(0), ..SessionConfig::default() };
        let seeds = Seeds { key: seed, commit_ids: seed ^ 0x5eed };
        let core = ClientCore::new(info, cfg, seeds, None, true).unwrap();
        let mut c = Client { core, conn };
        let req = c.core.resume(info).unwrap().expect("a version-5 server resumes");
        assert!(matches!(c.exchange(server, req, 0), Event::Resumed { .. }));
        c
    }

    /// The connection breaks (the server hears of it too); then a new one resumes the
    /// session. Returns what the `Resume`'s reply did.
    fn break_and_resume(&mut self, server: &mut Server, now_ns: u64) -> Event {
        assert!(server.step(Input::Disconnect { conn: self.conn }).is_empty());
        self.core.disconnected();
        let (conn, info) = server.connect();
        self.conn = conn;
        let req = self.core.resume(info).unwrap().expect("a version-5 server resumes");
        self.exchange(server, req, now_ns)
    }

    /// Sends `req` and feeds its reply back at `now_ns`.
    fn exchange(&mut self, server: &mut Server, req: Request, now_ns: u64) -> Event {
        server.now_us = now_ns / US;
        let reply = server.call(self.conn, req);
        self.core.receive(reply, now_ns).unwrap()
    }

    /// Begins a transaction, making the refresh round trip if the core asks for one.
    fn begin(&mut self, server: &mut Server, now_ns: u64) -> Option<Event> {
        let req = self.core.begin(now_ns).unwrap()?;
        Some(self.exchange(server, req, now_ns))
    }

    /// Reads `oref` to the end: fetches until it hits. A doom on the way is the error.
    fn read(&mut self, server: &mut Server, oref: Oref, now_ns: u64) -> Result<Vec<u8>, Event> {
        for _ in 0..4 {
            match self.core.read(oref).unwrap() {
                Read::Hit(bytes) => return Ok(bytes),
                Read::Send(req) => match self.exchange(server, *req, now_ns) {
                    Event::Fetched(_) => {}
                    e => return Err(e),
                },
            }
        }
        panic!("a read that never hits");
    }

    /// The counter `c`'s value in the open transaction.
    fn value(&mut self, server: &mut Server, c: Oref, now_ns: u64) -> Result<u64, Event> {
        self.read(server, c, now_ns).map(|b| value_of(&b))
    }

    /// Writes `v` into counter `c` (read in the open transaction).
    fn set(&mut self, c: Oref, v: u64) {
        self.core.write(c, value_at(), &v.to_le_bytes()).unwrap();
    }
}

/// Where a counter's value starts: after the header and the byte part's count.
fn value_at() -> usize {
    builtin::desc(builtin::BYTES).unwrap().var_offset()
}

fn value_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[value_at()..value_at() + 8].try_into().unwrap())
}

/// Creates the two counters (value 0) with one commit of a client that speaks the wire
/// protocol itself, and returns their orefs.
fn setup(server: &mut Server) -> (Oref, Oref) {
    let mut admin = Client::new(server, 1);
    assert!(admin.begin(server, 0).is_none());
    let root = admin.core.server().root;
    let mut root_bytes = admin.read(server, root, 0).unwrap();
    let refs = builtin::desc(builtin::REFS).unwrap();
    for k in 0..2u32 {
        let off = refs.var_offset() + 4 * k as usize;
        root_bytes[off..off + 4].copy_from_slice(&RawRef::tagged_word(k).to_le_bytes());
    }
    let counter =
        builtin::desc(builtin::BYTES).unwrap().new_object(builtin::BYTES.raw(), COUNTER_BYTES);
    let commit = Commit {
        reads: vec![root],
        versions: vec![(root, root_bytes.into())],
        created: vec![counter.clone().into(), counter.into()],
        id: None,
        leaves: Vec::new(),
    };
    match server.call(admin.conn, Request::new(RequestBody::Commit(commit))).body {
        ReplyBody::CommitOk { created, .. } => {
            assert_eq!(created.len(), 2);
            (created[0], created[1])
        }
        other => panic!("setup commit answered with {other:?}"),
    }
}

/// Client `cl` increments counter `c` in a transaction of its own and commits it.
fn increment(cl: &mut Client, server: &mut Server, c: Oref, now: u64) {
    assert!(cl.begin(server, now).is_none());
    let v = cl.value(server, c, now).unwrap();
    cl.set(c, v + 1);
    let req = cl.core.commit(now).unwrap();
    assert!(matches!(cl.exchange(server, req, now), Event::Committed(_)));
}

/// A fresh client's reading of counter `c`.
fn committed_value(server: &mut Server, c: Oref) -> u64 {
    let mut reader = Client::new(server, 99);
    assert!(reader.begin(server, 0).is_none());
    let v = reader.value(server, c, 0).unwrap();
    let req = reader.core.commit(0).unwrap();
    assert!(matches!(reader.exchange(server, req, 0), Event::Committed(_)));
    v
}

fn is_invalidated(e: &ClientError) -> bool {
    matches!(e, ClientError::Conflict { cause: ConflictCause::Invalidated, .. })
}

#[test]
fn an_invalidation_dooms_the_rival_and_its_retry_commits() {
    let mut server = Server::new();
    let (c, other) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::new(&mut server, 3);
    let mut now = 10 * US;

    // Both read the counter: the reads interleave.
    assert!(a.begin(&mut server, now).is_none());
    assert!(b.begin(&mut server, now).is_none());
    let va = a.value(&mut server, c, now).unwrap();
    let vb = b.value(&mut server, c, now).unwrap();
    assert_eq!((va, vb), (0, 0));

    // A increments and commits first.
    a.set(c, va + 1);
    let req = a.core.commit(now).unwrap();
    now += 10 * US;
    let Event::Committed(info) = a.exchange(&mut server, req, now) else { panic!("A commits") };
    assert_eq!(info.modified, 1);

    // B goes on: its next request's reply brings the invalidation of its copy, which dooms it.
    b.set(c, vb + 1);
    now += 10 * US;
    match b.read(&mut server, other, now) {
        Err(Event::Doomed(e)) => assert!(is_invalidated(&e), "{e}"),
        r => panic!("B should be doomed, got {r:?}"),
    }
    assert!(b.core.is_doomed());
    match b.core.read(c) {
        Err(e) => assert!(is_invalidated(&e), "{e}"),
        Ok(r) => panic!("a doomed transaction reads on: {r:?}"),
    }
    match b.core.commit(now) {
        Err(e) => assert!(is_invalidated(&e), "{e}"),
        Ok(r) => panic!("a doomed transaction commits: {r:?}"),
    }
    assert!(!b.core.in_transaction(), "the doomed commit ended the transaction");
    assert!(b.core.backoff(1) > std::time::Duration::ZERO);

    // B's retry reads A's value (its stale copy left the cache) and commits.
    now += 10 * US;
    assert!(b.begin(&mut server, now).is_none());
    let vb = b.value(&mut server, c, now).unwrap();
    assert_eq!(vb, 1, "the retry sees A's increment");
    b.set(c, vb + 1);
    let req = b.core.commit(now).unwrap();
    assert!(matches!(b.exchange(&mut server, req, now), Event::Committed(_)));

    let s = b.core.stats();
    assert_eq!((s.commits, s.conflicts, s.retries), (1, 1, 1));
    assert_eq!(committed_value(&mut server, c), 2);
}

#[test]
fn a_commit_on_a_stale_copy_is_refused_and_its_retry_commits() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::new(&mut server, 3);
    let now = 10 * US;
    assert!(a.begin(&mut server, now).is_none());
    assert!(b.begin(&mut server, now).is_none());
    let va = a.value(&mut server, c, now).unwrap();
    let vb = b.value(&mut server, c, now).unwrap();
    a.set(c, va + 1);
    b.set(c, vb + 1);
    let req = a.core.commit(now).unwrap();
    assert!(matches!(a.exchange(&mut server, req, now), Event::Committed(_)));
    // B's commit goes out before any reply told it of A's: the server refuses it.
    let req = b.core.commit(now).unwrap();
    match b.exchange(&mut server, req, now) {
        Event::Refused(e) => assert!(e.is_conflict(), "{e}"),
        e => panic!("B's stale commit should be refused, got {e:?}"),
    }
    assert!(!b.core.in_transaction());
    assert!(b.begin(&mut server, now).is_none());
    let vb = b.value(&mut server, c, now).unwrap();
    assert_eq!(vb, 1);
    b.set(c, vb + 1);
    let req = b.core.commit(now).unwrap();
    assert!(matches!(b.exchange(&mut server, req, now), Event::Committed(_)));
    assert_eq!(committed_value(&mut server, c), 2);
}

#[test]
fn an_idle_client_refreshes_before_its_transaction_and_reads_the_new_value() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::new(&mut server, 3);
    let mut now = 10 * US;
    // B caches the counter in a read-only transaction.
    assert!(b.begin(&mut server, now).is_none());
    assert_eq!(b.value(&mut server, c, now).unwrap(), 0);
    let req = b.core.commit(now).unwrap();
    assert!(matches!(b.exchange(&mut server, req, now), Event::Committed(_)));
    // A increments it; B hears nothing (it sends nothing).
    increment(&mut a, &mut server, c, now);
    // Within `refresh_after` of its last reply B starts without a round trip; once it has
    // passed, the core asks for one, and its reply brings the invalidation before B reads.
    let after = SessionConfig::default().refresh_after.unwrap().as_nanos() as u64;
    assert!(!b.core.needs_refresh(now + after - 1));
    now += after;
    assert!(b.core.needs_refresh(now));
    assert!(matches!(b.begin(&mut server, now), Some(Event::Ready)));
    assert!(!b.core.is_doomed(), "nothing was open to doom");
    assert_eq!(b.value(&mut server, c, now).unwrap(), 1, "the refresh dropped the stale copy");
    assert_eq!(b.core.stats().refreshes, 1);
    let req = b.core.commit(now).unwrap();
    assert!(matches!(b.exchange(&mut server, req, now), Event::Committed(_)));
}

/// Delivers `input` to server `s` (index into `servers`) and every message between the
/// servers that follows, until none is left; returns the replies to clients, by server index.
fn deliver(servers: &mut [Server], s: usize, input: Input) -> Vec<(usize, ConnId, Reply)> {
    let mut queue = vec![(s, input)];
    let mut replies = Vec::new();
    while let Some((s, input)) = queue.pop() {
        let (got, peers) = servers[s].step_peers(input);
        replies.extend(got.into_iter().map(|(conn, r)| (s, conn, r)));
        for (to, msg) in peers {
            queue.insert(0, (to.0 as usize - 1, Input::Peer { msg }));
        }
    }
    replies
}

#[test]
fn a_transaction_over_two_servers_prepares_at_both_and_commits_with_the_coordinator() {
    let mut servers = vec![Server::of(1, 2), Server::of(2, 2)];
    let (c1, _) = setup(&mut servers[0]);
    let (c2, _) = setup(&mut servers[1]);
    // One client with a core per server.
    let mut x = Client::new(&mut servers[0], 5);
    let mut y = Client::new(&mut servers[1], 6);
    // Past the window after a start in which a server refuses two-phase stamps it cannot
    // order (`TooOld`).
    let now = 5_000_000 * US;
    // A second after their last reply (the cores were made at 0): each refreshes first.
    assert!(matches!(x.begin(&mut servers[0], now), Some(Event::Ready)));
    assert!(matches!(y.begin(&mut servers[1], now), Some(Event::Ready)));
    let v1 = x.value(&mut servers[0], c1, now).unwrap();
    let v2 = y.value(&mut servers[1], c2, now).unwrap();
    x.set(c1, v1 + 1);
    y.set(c2, v2 + 1);
    let stamp = Stamp { time_us: now / US, tie: CLIENT_TIE_BIT | 7 };
    let participants = vec![
        Participant { server: ServerId(1), writes: true },
        Participant { server: ServerId(2), writes: true },
    ];
    let coordinator = Some(ServerId(1));
    let px = x.core.prepare(stamp, coordinator, participants.clone(), now).unwrap();
    let py = y.core.prepare(stamp, coordinator, participants, now).unwrap();
    assert!(matches!(x.core.read(c1), Err(ClientError::Usage(_))), "one request at a time");
    // The participant's part first: it prepares, votes to the coordinator and answers.
    let mut replies = deliver(&mut servers, 1, Input::Request { conn: y.conn, id: 1, req: py });
    replies.extend(deliver(&mut servers, 0, Input::Request { conn: x.conn, id: 1, req: px }));
    let mut decision = None;
    let mut votes = 0;
    for (s, conn, reply) in replies {
        let core = if s == 0 { &mut x.core } else { &mut y.core };
        assert_eq!(conn, if s == 0 { x.conn } else { y.conn });
        match core.receive(reply, now).unwrap() {
            Event::Voted { lsn, created } => {
                assert!(created.is_empty());
                votes += 1;
                if let Some(lsn) = lsn {
                    assert_eq!(s, 0, "the coordinator decides");
                    decision = Some(lsn);
                }
            }
            e => panic!("a part should vote: {e:?}"),
        }
    }
    assert_eq!(votes, 2);
    let lsn = decision.expect("the coordinator committed");
    assert_eq!(
        x.core.finish_part(PartOutcome::Committed(lsn, &[]), now).unwrap().unwrap().modified,
        1
    );
    assert_eq!(
        y.core.finish_part(PartOutcome::Committed(lsn, &[]), now).unwrap().unwrap().modified,
        1
    );
    assert!(matches!(x.core.finish_part(PartOutcome::Aborted, now), Err(ClientError::Usage(_))));
    assert_eq!(committed_value(&mut servers[0], c1), 1);
    assert_eq!(committed_value(&mut servers[1], c2), 1);
}

#[test]
fn a_commit_whose_answer_is_lost_is_learned_on_resume() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::resumable(&mut server, 2);
    let now = 10 * US;
    assert!(a.begin(&mut server, now).is_none());
    let v = a.value(&mut server, c, now).unwrap();
    a.set(c, v + 1);
    let req = a.core.commit(now).unwrap();
    // The server commits, and its answer is lost with the connection.
    let lost = server.call(a.conn, req);
    assert!(matches!(lost.body, ReplyBody::CommitOk { .. }));
    match a.break_and_resume(&mut server, now) {
        Event::Committed(info) => assert_eq!(info.modified, 1),
        e => panic!("the resume should learn the commit happened: {e:?}"),
    }
    assert_eq!(a.core.stats().commits, 1);
    assert_eq!(committed_value(&mut server, c), 1);
}

#[test]
fn a_broken_connection_aborts_the_open_transaction_and_the_resumed_cache_is_told_what_changed() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::resumable(&mut server, 3);
    let now = 10 * US;
    // B caches the counter and is in a transaction when its connection breaks; meanwhile A
    // increments the counter.
    assert!(b.begin(&mut server, now).is_none());
    assert_eq!(b.value(&mut server, c, now).unwrap(), 0);
    increment(&mut a, &mut server, c, now);
    match b.break_and_resume(&mut server, now) {
        Event::Resumed { cache_kept } => assert!(cache_kept, "the server vouches for B's cache"),
        e => panic!("{e:?}"),
    }
    assert!(b.core.is_doomed(), "the open transaction was aborted");
    assert!(matches!(b.core.read(c), Err(ClientError::Conflict { .. })));
    assert!(matches!(b.core.commit(now), Err(ClientError::Conflict { .. })));
    // The resume brought the invalidation of the counter: the next transaction reads A's value.
    assert!(b.begin(&mut server, now).is_none());
    assert_eq!(b.value(&mut server, c, now).unwrap(), 1);
    let req = b.core.commit(now).unwrap();
    assert!(matches!(b.exchange(&mut server, req, now), Event::Committed(_)));
}

#[test]
fn a_created_object_takes_its_oref_at_commit_and_another_client_reads_it_through_the_root() {
    let mut server = Server::new();
    setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::new(&mut server, 3);
    let now = 10 * US;
    let root = a.core.server().root;
    let slot = builtin::desc(builtin::REFS).unwrap().var_offset() + 4 * 2;
    assert!(a.begin(&mut server, now).is_none());
    a.read(&mut server, root, now).unwrap();
    let mut bytes = builtin::desc(builtin::BYTES).unwrap().new_object(builtin::BYTES.raw(), 8);
    bytes[value_at()..value_at() + 8].copy_from_slice(&7u64.to_le_bytes());
    let made = a.core.create(&bytes).unwrap();
    assert!(made.oref().is_none(), "no oref before the commit");
    let r = a.core.handle(root).unwrap();
    // The count word of the root's reference part is no reference slot.
    let count = builtin::desc(builtin::REFS).unwrap().count_offset();
    assert!(matches!(a.core.set_ref(r, count, made), Err(ClientError::Usage(_))));
    a.core.set_ref(r, slot, made).unwrap();
    let req = a.core.commit(now).unwrap();
    let Event::Committed(info) = a.exchange(&mut server, req, now) else { panic!("A commits") };
    assert_eq!((info.created, info.modified), (1, 1));
    let oref = a.core.canonical(made).unwrap().oref().expect("an oref after the commit");
    // B finds it through root slot 2 and reads its value.
    assert!(b.begin(&mut server, now).is_none());
    let root_bytes = b.read(&mut server, root, now).unwrap();
    assert_eq!(u32::from_le_bytes(root_bytes[slot..slot + 4].try_into().unwrap()), oref.raw());
    assert_eq!(b.value(&mut server, oref, now).unwrap(), 7);
}

#[test]
fn reading_an_object_its_page_does_not_hold_fails_after_one_refetch() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let now = 10 * US;
    assert!(a.begin(&mut server, now).is_none());
    a.value(&mut server, c, now).unwrap();
    // The counter's page holds one object: a later object id on it names nothing.
    let missing = Oref::new(c.page().unwrap(), thor_core::Oid::new(c.oid().get() + 5).unwrap());
    let mut fetches = 0;
    let err = loop {
        match a.core.read(missing) {
            Ok(Read::Send(req)) => {
                fetches += 1;
                assert!(fetches <= 2, "a read that fetches for ever");
                assert!(matches!(a.exchange(&mut server, *req, now), Event::Fetched(_)));
            }
            Ok(Read::Hit(_)) => panic!("a hit on a missing object"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, ClientError::Cache(thor_cache::CacheError::NoSuchObject(o)) if o == missing)
    );
    assert_eq!(fetches, 1, "the cached page, then one fresh copy of it");
}

#[test]
fn a_prefetching_client_reads_the_second_counter_without_a_round_trip() {
    let mut server = Server::new();
    let (c, other) = setup(&mut server);
    let (conn, info) = server.connect();
    let cfg = SessionConfig { prefetch_pages: Some(4), ..SessionConfig::default() };
    let seeds = Seeds { key: 7, commit_ids: 8 };
    let mut a = Client { core: ClientCore::new(info, cfg, seeds, None, false).unwrap(), conn };
    let now = 10 * US;
    assert!(a.begin(&mut server, now).is_none());
    // The counters' pages follow one another; the first fetch brings the second with it.
    let first = c.page().unwrap().get().min(other.page().unwrap().get());
    let (lo, hi) = if c.page().unwrap().get() == first { (c, other) } else { (other, c) };
    assert_eq!(a.value(&mut server, lo, now).unwrap(), 0);
    let fetched = a.core.stats().fetches;
    assert!(a.core.stats().pages_prefetched >= 1, "{:?}", a.core.stats());
    match a.core.read(hi).unwrap() {
        Read::Hit(bytes) => assert_eq!(value_of(&bytes), 0),
        Read::Send(req) => panic!("the prefetched page should serve the read: {req:?}"),
    }
    assert_eq!(a.core.stats().fetches, fetched);
    let req = a.core.commit(now).unwrap();
    assert!(matches!(a.exchange(&mut server, req, now), Event::Committed(_)));
}

/// Where a client of [`interleaved_increments_of_three_clients_count_every_commit`] is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Begin,
    Read,
    Commit,
    Done,
}

#[test]
fn interleaved_increments_of_three_clients_count_every_commit() {
    const PER_CLIENT: u64 = 6;
    let mut server = Server::new();
    let (c, other) = setup(&mut server);
    let mut clients: Vec<(Client, Step, u64)> =
        (0..3).map(|i| (Client::new(&mut server, 10 + i), Step::Begin, 0)).collect();
    // A fixed, uneven schedule (SplitMix-like), so that clients overtake one another.
    let mut x: u64 = 0x1234_5678;
    let mut now = 0;
    let mut conflicts = 0;
    let mut steps = 0;
    while clients.iter().any(|(_, s, _)| *s != Step::Done) {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let i = (x >> 33) as usize % clients.len();
        now += 7 * US;
        let (cl, step, done) = &mut clients[i];
        match *step {
            Step::Done => {}
            Step::Begin => {
                if let Some(e) = cl.begin(&mut server, now) {
                    assert!(matches!(e, Event::Ready));
                }
                *step = Step::Read;
            }
            Step::Read => {
                // Every other attempt also reads the other counter: a fetch whose reply may
                // bring an invalidation that dooms the attempt.
                let read = cl.value(&mut server, c, now).and_then(|v| {
                    if (x >> 40) & 1 == 1 {
                        cl.value(&mut server, other, now).map(|_| v)
                    } else {
                        Ok(v)
                    }
                });
                match read {
                    Ok(v) => {
                        cl.set(c, v + 1);
                        *step = Step::Commit;
                    }
                    Err(Event::Doomed(e)) => {
                        assert!(is_invalidated(&e));
                        cl.core.abort().unwrap();
                        conflicts += 1;
                        *step = Step::Begin;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
            Step::Commit => match cl.core.commit(now) {
                Err(e) => {
                    assert!(is_invalidated(&e), "{e}");
                    conflicts += 1;
                    *step = Step::Begin;
                }
                Ok(req) => match cl.exchange(&mut server, req, now) {
                    Event::Committed(_) => {
                        *done += 1;
                        *step = if *done == PER_CLIENT { Step::Done } else { Step::Begin };
                    }
                    Event::Refused(e) => {
                        assert!(e.is_conflict(), "{e}");
                        conflicts += 1;
                        *step = Step::Begin;
                    }
                    e => panic!("{e:?}"),
                },
            },
        }
    }
    let committed: u64 = clients.iter().map(|(_, _, d)| d).sum();
    let counted: u64 = clients.iter().map(|(cl, _, _)| cl.core.stats().commits).sum();
    assert_eq!(committed, 3 * PER_CLIENT);
    assert_eq!(counted, committed);
    assert!(conflicts > 0, "the schedule interleaved no conflicting increments");
    assert_eq!(committed_value(&mut server, c), committed);
}

/// A transaction that only read commits at its client with no message when the last reply
/// was complete and settled (a server with no other peer): serialized right after the state
/// it read, even though another client changed what it read since.
#[test]
fn a_read_only_transaction_commits_here_on_the_state_its_last_reply_vouched_for() {
    let mut server = Server::new();
    let (c, _) = setup(&mut server);
    let mut a = Client::new(&mut server, 2);
    let mut b = Client::new(&mut server, 3);
    let now = 10 * US;
    assert!(a.begin(&mut server, now).is_none());
    assert_eq!(a.value(&mut server, c, now).unwrap(), 0);
    // B increments the counter and commits before A commits.
    increment(&mut b, &mut server, c, now);
    let info = a.core.commit_here().unwrap().expect("committed here");
    assert_eq!((info.created, info.modified), (0, 0));
    assert_eq!(a.core.stats().read_only_local, 1);
    // A transaction that writes is sent, and nothing is committed here.
    assert!(a.begin(&mut server, now).is_none());
    let v = a.value(&mut server, c, now).unwrap();
    a.set(c, v + 1);
    assert!(a.core.commit_here().unwrap().is_none());
    let req = a.core.commit(now).unwrap();
    assert!(!matches!(a.exchange(&mut server, req, now), Event::Committed(_)), "A read 0");
}
