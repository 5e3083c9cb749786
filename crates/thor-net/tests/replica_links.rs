//! The links between the replicas of a group over TCP (`thor_net::replicas`): thor-net
//! servers in one process, each with a fake replica handler, and `TcpReplicas` sending to
//! them. Raft messages arrive in order per link; a full queue drops and counts; only the
//! group's peer credential may speak as a replica; a database image of a real small database
//! is copied and opens with the same pages; a copy cut short by the source's disappearance
//! leaves the old superblock; an image older than asked is reported `TooOld`.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use common::*;
use thor_core::{Lsn, PageId, ServerId, builtin};
use thor_net::replicas::{REPLICA_QUEUE_MAX, ReplicaServiceConfig};
use thor_net::{DeliverError, NetConfig, ReplicaHandler, ReplicaService, Server, TcpReplicas};
use thor_server::io::{self, DiskSide};
use thor_server::superblock::Superblock;
use thor_server::{Credentials, EngineError, ImageFetchError, ProtocolConfig, ReplicaNet};
use thor_storage::{Disk, DiskFile, FileDisk, StorageError};
use thor_wire::{
    ErrorCode, ImageFile, RaftMsg, ReplicaReply, ReplicaRequest, Reply, ReplyBody, Request,
    RequestBody, Transport,
};

/// The group's id: the engines' server id (`EngineOptions::default`).
const GROUP: ServerId = ServerId(1);
const PEER_SECRET: &[u8] = b"peer-secret-of-group-1-0123456789";
const CLIENT_SECRET: &[u8] = b"client-secret-0123456789abcdef";
const OTHER_PEER_SECRET: &[u8] = b"peer-secret-of-group-2-0123456789";

fn credentials() -> Credentials {
    Credentials::parse(&format!(
        "group-1 peer:1 {}\nalice read-write {}\ngroup-2 peer:2 {}\n",
        std::str::from_utf8(PEER_SECRET).unwrap(),
        std::str::from_utf8(CLIENT_SECRET).unwrap(),
        std::str::from_utf8(OTHER_PEER_SECRET).unwrap(),
    ))
    .unwrap()
}

/// A replica handler that records the Raft messages it takes, optionally held at a gate, and
/// makes images of a source database (if it has one).
#[derive(Debug, Default)]
struct Fake {
    /// This replica's id: messages for another are refused.
    me: u64,
    got: Mutex<Vec<(u64, Bytes)>>,
    arrived: Condvar,
    /// While true, `deliver` waits (after recording that it was entered).
    held: Mutex<bool>,
    released: Condvar,
    entered: Mutex<u64>,
    source: Option<DiskSide>,
}

impl Fake {
    fn new(me: u64, source: Option<DiskSide>) -> Arc<Fake> {
        Arc::new(Fake { me, source, ..Fake::default() })
    }

    /// Waits (bounded) until `n` messages arrived, and returns them.
    fn wait_for(&self, n: usize) -> Vec<(u64, Bytes)> {
        let g = self.got.lock().unwrap();
        let (g, t) = self.arrived.wait_timeout_while(g, SAFETY_TIMEOUT, |g| g.len() < n).unwrap();
        assert!(!t.timed_out(), "only {} of {n} messages arrived", g.len());
        g.clone()
    }

    fn hold(&self, on: bool) {
        *self.held.lock().unwrap() = on;
        self.released.notify_all();
    }
}

impl ReplicaHandler for Fake {
    fn deliver(&self, from: u64, to: u64, msg: Bytes) -> Result<(), DeliverError> {
        if to != self.me {
            return Err(DeliverError::WrongReplica { to });
        }
        *self.entered.lock().unwrap() += 1;
        self.arrived.notify_all();
        let held = self.held.lock().unwrap();
        let _unused = self.released.wait_while(held, |h| *h).unwrap();
        self.got.lock().unwrap().push((from, msg));
        self.arrived.notify_all();
        Ok(())
    }

    fn checkpoint(&self) -> Result<Lsn, EngineError> {
        let ds = self.source.as_ref().ok_or(EngineError::NotADatabase)?;
        Ok(io::read_superblock(&*ds.disk)?.checkpoint)
    }

    fn image_into(&self, dest: &dyn Disk) -> Result<Superblock, EngineError> {
        self.source.as_ref().ok_or(EngineError::NotADatabase)?.image_into(dest)
    }
}

/// A replica's server: an engine (whose sessions screen the replica requests) and `handler`.
struct Replica {
    server: Option<Server>,
    service: Arc<ReplicaService>,
    _db: Db,
    _images: tempfile::TempDir,
}

impl Replica {
    fn start(handler: Arc<Fake>) -> Replica {
        Replica::start_with(handler, |_| {})
    }

    fn start_with(handler: Arc<Fake>, tune: impl FnOnce(&mut ReplicaServiceConfig)) -> Replica {
        let db = Db::new();
        let protocol = ProtocolConfig { credentials: credentials(), ..ProtocolConfig::default() };
        let images = tempfile::tempdir().unwrap();
        let mut cfg = ReplicaServiceConfig::new(images.path().join("images"));
        tune(&mut cfg);
        let service = ReplicaService::new(handler, cfg).unwrap();
        let net = NetConfig { replicas: Some(service.clone()), ..NetConfig::default() };
        let server = Server::start("127.0.0.1:0", db.create_with(protocol), net).unwrap();
        Replica { server: Some(server), service, _db: db, _images: images }
    }

    fn addr(&self) -> SocketAddr {
        self.server.as_ref().unwrap().local_addr()
    }
}

fn links(me: u64, to: &[(u64, SocketAddr)], token: &[u8]) -> Arc<TcpReplicas> {
    let addrs: HashMap<u64, SocketAddr> = to.iter().copied().collect();
    TcpReplicas::start(me, GROUP, &addrs, &client_config(token), None).unwrap()
}

fn msg(i: u32) -> Bytes {
    Bytes::from(i.to_le_bytes().to_vec())
}

#[test]
fn raft_messages_arrive_in_order_per_link() {
    let (h1, h3) = (Fake::new(1, None), Fake::new(3, None));
    let (r1, r3) = (Replica::start(h1.clone()), Replica::start(h3.clone()));
    let net = links(2, &[(1, r1.addr()), (3, r3.addr())], PEER_SECRET);
    const N: u32 = 300;
    for i in 0..N {
        net.send(1, msg(i));
        net.send(3, msg(N + i));
    }
    let to1 = h1.wait_for(N as usize);
    let to3 = h3.wait_for(N as usize);
    assert!(to1.iter().all(|(from, _)| *from == 2));
    assert_eq!(
        to1.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
        (0..N).map(msg).collect::<Vec<_>>()
    );
    assert_eq!(
        to3.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
        (N..2 * N).map(msg).collect::<Vec<_>>()
    );
    // The last Acks may still be on their way back to the links.
    wait_until(|| net.counters().sent.load(std::sync::atomic::Ordering::Relaxed) == 2 * N as u64);
    assert_eq!(net.counters().dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
    // A replica nobody knows: dropped and counted, never blocking.
    net.send(9, msg(0));
    assert_eq!(net.counters().dropped.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_full_queue_drops_and_counts() {
    let h1 = Fake::new(1, None);
    let r1 = Replica::start(h1.clone());
    let net = links(2, &[(1, r1.addr())], PEER_SECRET);
    h1.hold(true);
    // The first message is taken by the link, which waits in the handler for its Ack ...
    net.send(1, msg(0));
    {
        let g = h1.entered.lock().unwrap();
        let (_g, t) = h1.arrived.wait_timeout_while(g, SAFETY_TIMEOUT, |n| *n == 0).unwrap();
        assert!(!t.timed_out(), "the first message reached the handler");
    }
    // ... so the queue takes exactly its bound, and the rest are dropped at once.
    for i in 1..=REPLICA_QUEUE_MAX as u32 + 10 {
        net.send(1, msg(i));
    }
    let dropped = || net.counters().dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dropped(), 10);
    h1.hold(false);
    let got = h1.wait_for(REPLICA_QUEUE_MAX + 1);
    let want: Vec<Bytes> = (0..=REPLICA_QUEUE_MAX as u32).map(msg).collect();
    assert_eq!(got.into_iter().map(|(_, m)| m).collect::<Vec<_>>(), want);
    assert_eq!(dropped(), 10);
}

fn raft(group: ServerId) -> Request {
    let m = RaftMsg { group, from: 2, to: 1, msg: msg(7) };
    Request::new(RequestBody::Replica(ReplicaRequest::Raft(m)))
}

fn error_code(r: &Reply) -> Option<ErrorCode> {
    match &r.body {
        ReplyBody::Error { code, .. } => Some(*code),
        _ => None,
    }
}

#[test]
fn a_client_credential_is_refused_with_forbidden() {
    let h1 = Fake::new(1, None);
    let r1 = Replica::start(h1.clone());
    let begin = Request::new(RequestBody::Replica(ReplicaRequest::ImageBegin { min_lsn: Lsn(0) }));
    for secret in [CLIENT_SECRET, OTHER_PEER_SECRET] {
        let mut t = connect(r1.addr(), secret);
        for req in [raft(GROUP), begin.clone()] {
            let r = t.round_trip(&req).unwrap();
            assert_eq!(error_code(&r), Some(ErrorCode::Forbidden), "{r:?}");
        }
    }
    // The group's own credential: a Raft message for the group is taken; one for another
    // group is not; one for another replica of the group is refused by the handler.
    let mut t = connect(r1.addr(), PEER_SECRET);
    assert!(matches!(t.round_trip(&raft(GROUP)).unwrap().body, ReplyBody::Ack));
    let r = t.round_trip(&raft(ServerId(2))).unwrap();
    assert_eq!(error_code(&r), Some(ErrorCode::Forbidden), "{r:?}");
    let wrong = RaftMsg { group: GROUP, from: 2, to: 3, msg: msg(8) };
    let r = t.round_trip(&Request::new(RequestBody::Replica(ReplicaRequest::Raft(wrong))));
    assert_eq!(error_code(&r.unwrap()), Some(ErrorCode::Forbidden));
    assert_eq!(h1.wait_for(1), vec![(2, msg(7))]);
}

#[test]
fn a_server_without_replicas_answers_unknown_type() {
    let db = Db::new();
    let (_engine, server) = serve(db.create(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    let r = t.round_trip(&raft(GROUP)).unwrap();
    assert_eq!(error_code(&r), Some(ErrorCode::UnknownType), "{r:?}");
}

/// A real small database: a few hundred objects over several 4 KiB pages, installed in the
/// page file and checkpointed. Returns its directory and a `DiskSide` over it.
fn source_database() -> (Db, DiskSide, Vec<PageId>) {
    let db = Db::new();
    let engine = db.create();
    let (_engine, server) = serve(engine.clone(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    let mut created = vec![item_class().to_class_object()];
    for i in 0..300u32 {
        created.push(item(tag(0), 0, i, &vec![i as u8; (i % 50) as usize]));
    }
    let orefs = commit_ok(&mut t, vec![], created);
    let mut pages: Vec<PageId> = orefs.iter().map(|o| o.page().unwrap()).collect();
    pages.push(builtin::ROOT.page().unwrap());
    pages.sort();
    pages.dedup();
    assert!(pages.len() > 3, "several pages");
    drop(t);
    server.shutdown().unwrap();
    engine.flush_all().unwrap();
    let (_, ds) = io::open_disk_side(db.disk()).unwrap();
    (db, ds, pages)
}

/// An old database at `dir` (another server's, never written): what `dest` holds before.
fn old_database(dir: &std::path::Path) -> (Arc<dyn Disk>, Superblock) {
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::open_dir(dir, true).unwrap());
    io::create(&*disk, 4096, ServerId(1)).unwrap();
    let sb = io::read_superblock(&*disk).unwrap();
    (disk, sb)
}

#[test]
fn an_image_of_a_real_database_is_copied_and_opens_with_the_same_pages() {
    let (_src, source, pages) = source_database();
    let want_sb = io::read_superblock(&*source.disk).unwrap();
    let h1 = Fake::new(1, Some(source));
    let r1 = Replica::start(h1.clone());
    let net = links(2, &[(1, r1.addr())], PEER_SECRET);
    let dest_dir = tempfile::tempdir().unwrap();
    let (dest, old) = old_database(dest_dir.path());
    assert!(old.checkpoint < want_sb.checkpoint);

    let sb = net.fetch_image(1, want_sb.checkpoint, &*dest).unwrap();
    assert_eq!(sb, want_sb);
    assert_eq!(io::read_superblock(&*dest).unwrap(), want_sb);
    let (_, copy) = io::open_disk_side(dest.clone()).unwrap();
    let source = h1.source.as_ref().unwrap();
    for p in &pages {
        assert_eq!(copy.read_page(*p).unwrap(), source.read_page(*p).unwrap(), "page {p:?}");
    }
    for name in [io::PAGE_FILE, thor_server::superblock::FILE] {
        assert_eq!(file_bytes(&*dest, name), file_bytes(&*source.disk, name), "{name}");
    }
    // The source let the image go at ImageEnd.
    assert_eq!(r1.service.images_open(), 0);
    let c = net.counters();
    assert_eq!(c.images_fetched.load(std::sync::atomic::Ordering::Relaxed), 1);
}

fn file_bytes(disk: &dyn Disk, name: &str) -> Vec<u8> {
    let f = disk.open(name, false).unwrap();
    let mut b = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(0, &mut b).unwrap();
    b
}

#[test]
fn an_image_older_than_asked_is_reported_too_old() {
    let (_src, source, _) = source_database();
    let have = io::read_superblock(&*source.disk).unwrap().checkpoint;
    let r1 = Replica::start(Fake::new(1, Some(source)));
    let net = links(2, &[(1, r1.addr())], PEER_SECRET);
    let dest_dir = tempfile::tempdir().unwrap();
    let (dest, old) = old_database(dest_dir.path());
    let want = Lsn(have.0 + 1000);
    match net.fetch_image(1, want, &*dest) {
        Err(ImageFetchError::TooOld { replica: 1, have: h, want: w }) => {
            assert_eq!((h, w), (have, want));
        }
        other => panic!("expected TooOld, got {other:?}"),
    }
    assert_eq!(io::read_superblock(&*dest).unwrap(), old);
    assert_eq!(r1.service.images_open(), 0);
}

/// What a [`Tripwire`] runs, once.
type Trip = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A disk that runs a tripwire at the first write to a file (then behaves as `inner`).
struct Tripwire {
    inner: Arc<dyn Disk>,
    armed: Trip,
}

impl std::fmt::Debug for Tripwire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tripwire").field("inner", &self.inner).finish()
    }
}

struct TripFile {
    inner: Arc<dyn DiskFile>,
    armed: Trip,
}

impl std::fmt::Debug for TripFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TripFile").field("inner", &self.inner).finish()
    }
}

impl Disk for Tripwire {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        let inner = self.inner.open(name, create)?;
        Ok(Arc::new(TripFile { inner, armed: self.armed.clone() }))
    }
    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        self.inner.exists(name)
    }
    fn remove(&self, name: &str) -> Result<(), StorageError> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError> {
        self.inner.rename(from, to)
    }
    fn list(&self) -> Result<Vec<String>, StorageError> {
        self.inner.list()
    }
    fn sync_dir(&self) -> Result<(), StorageError> {
        self.inner.sync_dir()
    }
}

impl DiskFile for TripFile {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let trip = self.armed.lock().unwrap().take();
        if let Some(trip) = trip {
            trip();
        }
        self.inner.write_at(offset, data)
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.inner.sync()
    }
    fn len(&self) -> Result<u64, StorageError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        self.inner.set_len(len)
    }
}

#[test]
fn a_source_gone_mid_copy_leaves_the_old_superblock() {
    let (_src, source, _) = source_database();
    let want = io::read_superblock(&*source.disk).unwrap().checkpoint;
    let mut r1 = Replica::start(Fake::new(1, Some(source)));
    let net = links(2, &[(1, r1.addr())], PEER_SECRET);
    let dest_dir = tempfile::tempdir().unwrap();
    let (inner, old) = old_database(dest_dir.path());
    // At the copy's first write (the first chunk of the page file is in hand), the source
    // server stops: every later chunk request finds the connection closed.
    let server = Mutex::new(r1.server.take());
    let stop: Box<dyn FnOnce() + Send> = Box::new(move || {
        if let Some(s) = server.lock().unwrap().take() {
            s.shutdown().unwrap();
        }
    });
    let dest = Tripwire { inner: inner.clone(), armed: Arc::new(Mutex::new(Some(stop))) };
    match net.fetch_image(1, want, &dest) {
        Err(ImageFetchError::Unreachable { replica: 1, .. }) => {}
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(dest.armed.lock().unwrap().is_none(), "the copy began before the source went");
    assert_eq!(io::read_superblock(&*inner).unwrap(), old);
    let c = net.counters();
    assert_eq!(c.image_failures.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn an_idle_image_expires_and_its_copier_must_begin_again() {
    let (_src, source, _) = source_database();
    // An expiry of zero: an image is idle too long by the next request.
    let r1 = Replica::start_with(Fake::new(1, Some(source)), |c| {
        c.idle_expiry = std::time::Duration::ZERO;
    });
    let (reply, close) = r1.service.serve(ReplicaRequest::ImageBegin { min_lsn: Lsn(0) });
    assert!(!close);
    let ReplyBody::Replica(ReplicaReply::Image(info)) = reply.body else {
        panic!("expected Image, got {reply:?}")
    };
    assert_eq!(r1.service.images_open(), 1);
    let chunk = ReplicaRequest::ImageChunk { image: info.image, file: ImageFile::Pages, offset: 0 };
    let (reply, _) = r1.service.serve(chunk);
    assert_eq!(error_code(&reply), Some(ErrorCode::SessionExpired), "{reply:?}");
    assert_eq!(r1.service.images_open(), 0);
    let expired = r1.service.counters().images_expired.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(expired, 1);
    let dir = r1._images.path().join("images");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "its files are gone");
}

#[test]
fn images_open_at_once_are_bounded() {
    let (_src, source, _) = source_database();
    let r1 = Replica::start_with(Fake::new(1, Some(source)), |c| c.images_max = 1);
    let begin = || r1.service.serve(ReplicaRequest::ImageBegin { min_lsn: Lsn(0) });
    let (first, _) = begin();
    let ReplyBody::Replica(ReplicaReply::Image(info)) = first.body else { panic!("{first:?}") };
    let (second, close) = begin();
    assert_eq!(error_code(&second), Some(ErrorCode::Busy), "{second:?}");
    assert!(close);
    let (end, _) = r1.service.serve(ReplicaRequest::ImageEnd { image: info.image });
    assert!(matches!(end.body, ReplyBody::Ack));
    let (third, _) = begin();
    assert!(matches!(third.body, ReplyBody::Replica(ReplicaReply::Image(_))), "{third:?}");
}

#[test]
fn a_replica_request_behind_a_deferred_commit_closes_the_session_after_its_reply() {
    // A commit waits for its log's fsync (the gate is shut). A Raft message behind it on the
    // same connection must not overtake its reply: it is refused once the commit is answered,
    // and the session closes.
    let db = Db::new();
    let protocol = ProtocolConfig { credentials: credentials(), ..ProtocolConfig::default() };
    let (engine, gate) = db.create_gated(protocol);
    let images = tempfile::tempdir().unwrap();
    let service =
        ReplicaService::new(Fake::new(1, None), ReplicaServiceConfig::new(images.path())).unwrap();
    let net = NetConfig { replicas: Some(service), ..NetConfig::default() };
    let server = Server::start("127.0.0.1:0", engine.clone(), net).unwrap();
    let mut s = raw(server.local_addr());
    raw_hello(&mut s, CLIENT_SECRET);
    gate.shut();
    let commit = commit_req(vec![], vec![item_class().to_class_object()]);
    send_raw(&mut s, &commit.to_frame(2).unwrap());
    send_raw(&mut s, &raft(GROUP).to_frame(3).unwrap());
    // The Raft message reached the core (and was set aside) while the commit waits.
    wait_until(|| engine.server_stats().protocol_errors == 1);
    gate.open();
    let (id, r) = read_frame(&mut s).unwrap();
    assert_eq!(id, 2);
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let (id, r) = read_frame(&mut s).unwrap();
    assert_eq!(id, 3);
    assert_eq!(error_code(&r), Some(ErrorCode::UnexpectedMessage), "{r:?}");
    assert!(read_frame(&mut s).is_none(), "the connection closes");
    server.shutdown().unwrap();
}

#[test]
fn a_request_while_a_replica_request_is_served_closes_the_session() {
    let h1 = Fake::new(1, None);
    let r1 = Replica::start(h1.clone());
    let mut s = raw(r1.addr());
    raw_hello(&mut s, PEER_SECRET);
    h1.hold(true);
    send_raw(&mut s, &raft(GROUP).to_frame(2).unwrap());
    {
        let g = h1.entered.lock().unwrap();
        let (_g, t) = h1.arrived.wait_timeout_while(g, SAFETY_TIMEOUT, |n| *n == 0).unwrap();
        assert!(!t.timed_out(), "the message reached the handler");
    }
    // A second request before the first's answer: refused, and the connection closes.
    send_raw(&mut s, &raft(GROUP).to_frame(3).unwrap());
    let (id, r) = read_frame(&mut s).unwrap();
    assert_eq!(id, 3);
    assert_eq!(error_code(&r), Some(ErrorCode::UnexpectedMessage), "{r:?}");
    assert!(read_frame(&mut s).is_none(), "the connection closes");
    h1.hold(false);
    assert_eq!(h1.wait_for(1).len(), 1, "the first message was still delivered");
}
