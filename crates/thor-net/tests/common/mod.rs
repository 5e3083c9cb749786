//! Shared fixtures of the network tests: a server on a temporary database, raw socket helpers,
//! and a small schema built with thor-core.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, RawRef, VarKind};
use thor_net::{ClientConfig, NetConfig, Server, TcpTransport};
use thor_server::{Engine, EngineOptions, ProtocolConfig};
use thor_storage::{Disk, FileDisk};
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{
    Commit, ErrorCode, Reply, ReplyBody, Request, RequestBody, Transport, decode_reply,
};

/// A safety net so that a broken server fails a test instead of hanging it; never a timing
/// assertion.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(20);

/// Engine options for tests: small pages so that a few hundred objects span several pages.
pub fn opts() -> EngineOptions {
    EngineOptions { page_size: 4096, ..EngineOptions::default() }
}

/// A database in a temporary directory.
pub struct Db {
    pub dir: tempfile::TempDir,
}

impl Db {
    pub fn new() -> Db {
        Db { dir: tempfile::tempdir().unwrap() }
    }

    pub fn disk(&self) -> Arc<dyn Disk> {
        Arc::new(FileDisk::open_dir(self.dir.path(), true).unwrap())
    }

    pub fn create(&self) -> Arc<Engine> {
        self.create_with(ProtocolConfig::default())
    }

    pub fn create_with(&self, protocol: ProtocolConfig) -> Arc<Engine> {
        Arc::new(Engine::create(self.disk(), EngineOptions { protocol, ..opts() }).unwrap())
    }

    pub fn open(&self) -> Arc<Engine> {
        Arc::new(Engine::open(self.disk(), opts()).unwrap())
    }
}

/// A server for `engine` on 127.0.0.1.
pub fn serve(engine: Arc<Engine>, net: NetConfig) -> (Arc<Engine>, Server) {
    let server = Server::start("127.0.0.1:0", engine.clone(), net).unwrap();
    (engine, server)
}

pub fn client_config(token: &[u8]) -> ClientConfig {
    ClientConfig {
        token: token.to_vec(),
        client_name: "test".into(),
        io_timeout: Some(SAFETY_TIMEOUT),
        ..ClientConfig::default()
    }
}

pub fn connect(addr: SocketAddr, token: &[u8]) -> TcpTransport {
    TcpTransport::connect(addr, &client_config(token)).unwrap()
}

/// `test.Item`: next (ref), seq (u32), then a byte payload.
pub fn item_class() -> ClassDesc {
    ClassDesc::new("test.Item", 8, &[0], VarKind::Bytes).unwrap()
}

pub fn item(class: u32, next: u32, seq: u32, payload: &[u8]) -> Vec<u8> {
    let c = item_class();
    let mut o = c.new_object(class, payload.len());
    put_u32(&mut o, 4, next);
    put_u32(&mut o, 8, seq);
    let at = c.var_offset();
    o[at..at + payload.len()].copy_from_slice(payload);
    o
}

pub fn tag(i: u32) -> u32 {
    RawRef::tagged_word(i)
}

pub fn next_of(obj: &[u8]) -> u32 {
    u32_at(obj, 4)
}

pub fn seq_of(obj: &[u8]) -> u32 {
    u32_at(obj, 8)
}

pub fn commit_req(versions: Vec<(Oref, Vec<u8>)>, created: Vec<Vec<u8>>) -> Request {
    Request::new(RequestBody::Commit(Commit {
        reads: versions.iter().map(|(o, _)| *o).collect(),
        versions: versions.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
        created: created.into_iter().map(Bytes::from).collect(),
        id: None,
        leaves: Vec::new(),
    }))
}

/// Commits and expects success; returns the created orefs.
pub fn commit_ok(
    t: &mut dyn Transport,
    versions: Vec<(Oref, Vec<u8>)>,
    created: Vec<Vec<u8>>,
) -> Vec<Oref> {
    match t.round_trip(&commit_req(versions, created)).unwrap().body {
        ReplyBody::CommitOk { created, .. } => created,
        other => panic!("commit failed: {other:?}"),
    }
}

/// Fetches a page and expects it.
pub fn fetch(t: &mut dyn Transport, page: PageId) -> Bytes {
    match t.round_trip(&Request::new(RequestBody::Fetch { page })).unwrap().body {
        ReplyBody::Page { page: p, bytes } => {
            assert_eq!(p, page);
            bytes
        }
        other => panic!("fetch of {page:?} failed: {other:?}"),
    }
}

/// Reads one object through a fetch of its page.
pub fn read(t: &mut dyn Transport, oref: Oref) -> Vec<u8> {
    let page = fetch(t, oref.page().unwrap());
    PageView::parse(&page).unwrap().object(oref.oid()).unwrap().to_vec()
}

/// Every allocated page's bytes, by fetching them until `NoSuchPage`.
pub fn all_pages(t: &mut dyn Transport) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut p = PageId::FIRST;
    loop {
        match t.round_trip(&Request::new(RequestBody::Fetch { page: p })).unwrap().body {
            ReplyBody::Page { bytes, .. } => out.push(bytes),
            ReplyBody::Error { code: ErrorCode::NoSuchPage, .. } => return out,
            other => panic!("unexpected {other:?}"),
        }
        p = p.next().unwrap();
    }
}

/// A raw socket to the server, with the safety timeout.
pub fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(SAFETY_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(SAFETY_TIMEOUT)).unwrap();
    s
}

/// Reads one reply frame from a raw socket; `None` at end of stream.
pub fn read_frame(s: &mut TcpStream) -> Option<(u64, Reply)> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match s.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return None,
            Ok(0) => panic!("stream ended inside a frame prefix"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && got == 0 => return None,
            Err(e) => panic!("read failed: {e}"),
        }
    }
    let len = u32::from_le_bytes(prefix) as usize;
    let mut f = prefix.to_vec();
    f.resize(4 + len, 0);
    s.read_exact(&mut f[4..]).unwrap();
    Some(decode_reply(Bytes::from(f), FRAME_BYTES_MAX).unwrap())
}

/// Expects an `Error` reply with `code` (and request id `id`), then the end of the stream.
pub fn expect_error_and_close(s: &mut TcpStream, code: ErrorCode, id: u64) {
    let (got_id, reply) = read_frame(s).expect("an error reply before the close");
    match reply.body {
        ReplyBody::Error { code: c, message } => {
            assert_eq!(c, code, "message: {message}");
            assert_eq!(got_id, id);
        }
        other => panic!("expected Error({code}), got {other:?}"),
    }
    assert!(read_frame(s).is_none(), "the server closes the connection after the error");
}

/// Sends bytes on a raw socket (ignoring a reset: the server may already have closed).
pub fn send_raw(s: &mut TcpStream, bytes: &[u8]) {
    let _ = s.write_all(bytes);
}

/// Half-closes a raw socket's sending side.
pub fn end_raw(s: &TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
}

/// Waits (bounded by the safety timeout: a broken server fails the test, never hangs it)
/// until `f` holds.
pub fn wait_until(mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < SAFETY_TIMEOUT, "the server never got there");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Shut, every sync of a [`GatedDisk`] waits until it opens: a commit then stays deferred
/// (waiting for the log to be durable) for as long as a test needs, with no timing involved.
#[derive(Debug, Default)]
pub struct Gate {
    shut: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    pub fn shut(&self) {
        *self.shut.lock().unwrap() = true;
    }

    pub fn open(&self) {
        *self.shut.lock().unwrap() = false;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut shut = self.shut.lock().unwrap();
        while *shut {
            shut = self.opened.wait(shut).unwrap();
        }
    }
}

/// A disk whose file syncs pass through a [`Gate`].
#[derive(Debug)]
pub struct GatedDisk {
    inner: Arc<dyn Disk>,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn thor_storage::DiskFile>,
    gate: Arc<Gate>,
}

impl Disk for GatedDisk {
    fn open(
        &self,
        name: &str,
        create: bool,
    ) -> Result<Arc<dyn thor_storage::DiskFile>, thor_storage::StorageError> {
        let inner = self.inner.open(name, create)?;
        Ok(Arc::new(GatedFile { inner, gate: self.gate.clone() }))
    }
    fn exists(&self, name: &str) -> Result<bool, thor_storage::StorageError> {
        self.inner.exists(name)
    }
    fn remove(&self, name: &str) -> Result<(), thor_storage::StorageError> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), thor_storage::StorageError> {
        self.inner.rename(from, to)
    }
    fn list(&self) -> Result<Vec<String>, thor_storage::StorageError> {
        self.inner.list()
    }
    fn sync_dir(&self) -> Result<(), thor_storage::StorageError> {
        self.inner.sync_dir()
    }
}

impl thor_storage::DiskFile for GatedFile {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, thor_storage::StorageError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), thor_storage::StorageError> {
        self.inner.write_at(offset, data)
    }
    fn sync(&self) -> Result<(), thor_storage::StorageError> {
        self.gate.pass();
        self.inner.sync()
    }
    fn len(&self) -> Result<u64, thor_storage::StorageError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), thor_storage::StorageError> {
        self.inner.set_len(len)
    }
}

impl Db {
    /// A new database on a disk whose syncs wait while the returned gate is shut (it starts
    /// open).
    pub fn create_gated(&self, protocol: ProtocolConfig) -> (Arc<Engine>, Arc<Gate>) {
        let gate = Arc::new(Gate::default());
        let disk = Arc::new(GatedDisk { inner: self.disk(), gate: gate.clone() });
        let engine = Engine::create(disk, EngineOptions { protocol, ..opts() }).unwrap();
        (Arc::new(engine), gate)
    }
}

/// Opens a session on a raw socket with `Hello` and expects `HelloOk`.
pub fn raw_hello(s: &mut TcpStream, token: &[u8]) {
    let h = Request::new(RequestBody::Hello(thor_wire::Hello::new(token.to_vec(), "raw")));
    send_raw(s, &h.to_frame(1).unwrap());
    let (_, r) = read_frame(s).unwrap();
    assert!(matches!(r.body, ReplyBody::HelloOk(_)), "{r:?}");
}

/// Whether the server has sent nothing on `s` and not closed it (checked without waiting).
pub fn quiet_and_open(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let quiet = matches!(s.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    quiet
}
