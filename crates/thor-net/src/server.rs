//! The network server: tokio around the server core's embedded driver ([`thor_server::Engine`]),
//! on loopback or remote TCP and on Unix-domain sockets. It drives the engine through
//! [`thor_server::Served`], so a replica group member's driver ([`thor_server::GroupEngine`])
//! is served the same way (with [`NetConfig::replicas`] for its group's requests).
//!
//! ```text
//!  accept loop ──► connection task (one per connection, on one thread)
//!   (ticks an engine without its installer thread at its deadlines)
//!                    engine.connect(sink)          (a session slot, before anything is read)
//!                    [TLS handshake]               (under the handshake deadline)
//!                    loop {
//!                      write every reply in the outbox
//!                      select {
//!                        shutdown,
//!                        the outbox woken (a reply from another thread),
//!                        the handshake deadline (until HelloOk is sent),
//!                        a frame read (idle and frame timeouts, size limits, server-wide
//!                          in-flight bytes charged as they arrive)
//!                          ── check, decode ── engine.request(...)
//!                          ── work (disk reads) to the blocking pool
//!                      }
//!                    }
//! ```
//!
//! The core answers through the connection's sink, now (a page-cache hit) or later (a commit,
//! once the log's fsync made it durable; a fetch that read the disk). It keeps each
//! connection's replies in request order and holds back a connection's later requests while
//! one is deferred. A reply delivered while the connection's own task is inside
//! `Engine::request` is written by that task as soon as the call returns, before it yields:
//! a fetch that hits the page cache crosses no channel and wakes no other task or thread, and
//! its reply is first written with `try_write` (one system call, no timer). The next frame's
//! read is started before the reply goes out, so a frame half read is never lost.
//!
//! # Timing fetches
//!
//! Each fetch (and prefetch) is timed from the moment its decoded request is handed to
//! `Engine::request` to the moment its reply is taken from the outbox to be written
//! ([`Engine::note_fetch_served`], `ServerStats::fetch_service_ns` and `fetches_served`): the
//! core's step, the page-cache lookup and copy, any disk read on the blocking pool and the
//! wake-up after it, but not the reply's encoding and write, nor the request's read. Two clock
//! reads a fetch, against tens of microseconds of a round trip. A client subtracts it from its
//! own round-trip time to tell the network from the server (`thor oo7 penalty --figures`).
//!
//! # Threads
//!
//! [`Threading::PerThread`] (the default) runs one single-threaded runtime per thread and deals
//! connections out to them in turn: a connection stays on its thread, which waits in its own
//! `epoll` and is woken by the kernel for its sockets alone. [`Threading::WorkStealing`] is
//! tokio's multi-threaded runtime, which balances busy connections across threads at the price
//! of waking other workers on every readiness event. `thor bench net --work-stealing` measures
//! one against the other; the figures are in `docs/net.md`.
//!
//! # Limits
//!
//! - *Connections:* the core's session slots (`thor_server::ProtocolConfig::sessions_max`).
//!   A connection takes a slot when it is accepted, before `Hello` (and before a TLS
//!   handshake). Connections that have not said `Hello` hold at most a quarter of the slots,
//!   and the oldest of them gives way to a newer connection; only when every slot is an
//!   authenticated session's is a new connection refused with `Error(Busy)` (request id 0)
//!   and closed (over TLS, closed before the handshake completes). See the core's
//!   `sessions` module, *Slots*.
//! - *Handshake:* a connection must complete its TLS handshake (if any) and have its `Hello`
//!   answered within [`NetConfig::handshake_timeout`] of being accepted, or it gets
//!   `Error(Timeout)` and is closed: silent connections do not hold slots for the idle timeout.
//! - *Frames:* before its session is open (`HelloOk` sent), a connection may send frames of at
//!   most [`PRE_HELLO_FRAME_BYTES_MAX`]; after, the core's maximum frame size. The length word
//!   is checked before anything else is read; an oversized frame gets `Error(FrameTooLarge)`
//!   unread.
//! - *Memory across connections:* frame bytes are charged as they arrive, not as announced.
//!   A frame's buffer grows by doubling (16 KiB, 32 KiB, ... up to its length) and each step
//!   is charged to the server-wide pool of [`NetConfig::in_flight_bytes_max`] bytes before
//!   the bytes that fill it are read: a connection holds at most twice what it has sent (and
//!   at least 16 KiB), never what it announced, so an idle or slow sender takes nothing from
//!   others. The charge stays until the request (and every slice of it the core keeps, such
//!   as a commit waiting in the commit queue) is dropped.
//!
//!   A connection whose next step does not fit in the pool waits (its frame timeout stops
//!   meanwhile: the wait is the server's doing), unless it can take the *reserve*: room for
//!   one more frame of the largest size, held by one frame at a time until that frame is
//!   dropped. Without it, frames half received could fill the pool and each wait for room
//!   the others hold, for ever; with it, one of them always completes, is served and gives
//!   its room back. So the server holds at most `in_flight_bytes_max` plus one largest frame
//!   (plus pre-`Hello` frames, below). A connection that holds the reserve and then stalls is
//!   ended by its frame timeout.
//!
//!   Frames before `Hello` are not charged to the pool and never wait: they are at most
//!   [`PRE_HELLO_FRAME_BYTES_MAX`] each, one per slot, so a new client's `Hello` is never
//!   held up behind large frames.
//! - *Time:* a connection with no request for [`NetConfig::idle_timeout`] gets `Error(Timeout)`
//!   and is closed, unless it is waiting for a reply (a backup, or a commit behind one, may
//!   take longer than the idle timeout; the client is not idle, the server is busy); so does
//!   one whose frame takes longer than [`NetConfig::frame_timeout`] to arrive once its first
//!   byte has (slowloris; time spent waiting for room in the pool does not count), or that
//!   does not read a reply within [`NetConfig::write_timeout`].
//! - *Authentication failures* (a `Hello` refused as `Unauthenticated`, a TLS handshake that
//!   fails) are logged at WARN with the peer's address, once per connection.
//!
//! # TLS
//!
//! With [`NetConfig::tls`] set, every TCP connection is a TLS stream (rustls; see
//! [`crate::tls`]). The handshake runs in the connection's own task, on the thread the
//! connection was dealt to, after the socket has joined that thread's reactor, and under the
//! handshake deadline; the accept loop never waits for it. A TLS stream is split into halves
//! that share it, and has no `try_write`: every reply is written with `write_all` and a flush.
//! Plain TCP keeps its `try_write` path unchanged.
//!
//! Every protocol error closes the connection after the error reply: once a frame is bad, the
//! stream's framing cannot be trusted. Closing *lingers*: the server shuts down its sending side
//! and discards what the client still sends for up to [`CLOSE_LINGER`], so that unread input does
//! not turn the close into a TCP reset that would destroy the error reply in flight.
//!
//! # Blocking work
//!
//! No async worker touches the disk: the work a request leaves (reading a page the page cache
//! lacks, for a fetch or a commit's validation) runs on tokio's blocking pool. Commits wait for
//! durability without holding any thread: the engine's log writer reports them durable and the
//! core answers them through their sinks.
//!
//! # Shutdown
//!
//! Shutdown stops accepting and stops reading requests; every connection sends the replies it
//! is still owed for requests already handed to the core, then `Error(ShuttingDown)` (id 0),
//! and closes. A frame half received when shutdown begins is dropped unanswered.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::time::{Duration, Instant};

use bytes::Bytes;
use thor_server::limits::PRE_HELLO_FRAME_BYTES_MAX;
use thor_server::{ConnId, ReplySink, Served};
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{ErrorCode, Frame, Reply, ReplyBody, Request, RequestBody, WireError, frame_size};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant as TokioInstant, timeout, timeout_at};
use tracing::{debug, info, warn};

use crate::error::NetError;
use crate::limits::{
    ACCEPT_ERROR_PAUSE, CLOSE_LINGER, FRAME_BUFFER_INITIAL_BYTES, FRAME_TIMEOUT_DEFAULT,
    HANDSHAKE_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT, IN_FLIGHT_BYTES_MAX_DEFAULT,
    READ_BUFFER_BYTES, REPLY_BUFFER_KEEP_BYTES, WRITE_TIMEOUT_DEFAULT,
};
use crate::tls::TlsServer;

/// Settings of the network server. The connection limit and the maximum frame size are the
/// core's (`thor_server::ProtocolConfig`), so that every transport enforces the same ones.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// How long a connection may wait between requests before it is closed.
    pub idle_timeout: Duration,
    /// How long a frame may take to arrive once its first byte has.
    pub frame_timeout: Duration,
    /// How long writing one reply may take.
    pub write_timeout: Duration,
    /// Threads serving connections in the runtime(s) [`Server::start`] builds; 0 means one
    /// per core.
    pub worker_threads: usize,
    /// How [`Server::start`] spreads connections over its threads.
    pub threading: Threading,
    /// Most bytes of received frames held at once across all connections, beyond which frames
    /// wait for room (see the module documentation, *Limits*: frames are charged as their
    /// bytes arrive, and one more frame of the largest size may be received beyond it, from
    /// the reserve). Raised to the core's maximum frame size if smaller.
    pub in_flight_bytes_max: usize,
    /// How long a connection may take, from being accepted, to finish its TLS handshake (if
    /// any) and have its `Hello` answered.
    pub handshake_timeout: Duration,
    /// TLS for every TCP connection: the server's certificate and key, and the CA of the
    /// client certificates it requires, if any. `None` serves plain TCP.
    pub tls: Option<TlsServer>,
    /// Where the requests between the replicas of a group go (`thor_wire::replica`), if this
    /// server is a replica (`crate::replicas`): each is checked by the engine's core
    /// (`Engine::screen`) and served by it on the blocking pool. `None`: the core answers
    /// them `UnknownType`, as a server that runs no group.
    pub replicas: Option<Arc<crate::replicas::ReplicaService>>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            frame_timeout: FRAME_TIMEOUT_DEFAULT,
            write_timeout: WRITE_TIMEOUT_DEFAULT,
            worker_threads: 0,
            threading: Threading::default(),
            in_flight_bytes_max: IN_FLIGHT_BYTES_MAX_DEFAULT,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            tls: None,
            replicas: None,
        }
    }
}

/// How [`Server::start`] runs its connections (see the module documentation, *Threads*).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Threading {
    /// A single-threaded tokio runtime per thread, connections dealt out to them in turn: a
    /// connection stays on its thread, which waits in its own `epoll` and is woken by the
    /// kernel for its sockets alone, with no other worker to notify or steal from.
    #[default]
    PerThread,
    /// tokio's multi-threaded, work-stealing runtime: busy threads' connections move to idle
    /// ones, at the price of waking other workers to look for work.
    WorkStealing,
}

/// Counters of the network server.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Frame bytes charged now, in the pool and the reserve (received or about to be, not yet
    /// dropped; frames before `Hello` are not charged).
    pub in_flight_bytes: AtomicUsize,
    /// The most frame bytes ever charged at once.
    pub in_flight_bytes_peak: AtomicUsize,
    /// Times a frame found no room in the pool for its next bytes and waited.
    pub frames_waited: AtomicU64,
    /// Frames completed with the reserve (see the module documentation, *Limits*).
    pub frames_from_reserve: AtomicU64,
    /// Connections closed for not completing their handshake (TLS and `Hello`) in time.
    pub handshakes_timed_out: AtomicU64,
    /// TLS handshakes that failed (an untrusted or missing client certificate, a client that
    /// does not speak TLS, a broken connection).
    pub tls_handshakes_failed: AtomicU64,
}

/// The outcome of reading one frame.
enum Read {
    /// A whole frame, length word included.
    Frame(Bytes),
    /// The client closed the connection between frames.
    Eof,
    /// No frame started within the idle timeout.
    Idle,
    /// A started frame did not complete within the frame timeout.
    Slow,
    /// The frame is unacceptable (too large, too short, cut off by EOF).
    Bad(WireError),
    /// The connection failed.
    Io(std::io::Error),
}

/// The server-wide bound on frame bytes held (see the module documentation, *Limits*).
struct Budget {
    /// The pool: one permit per byte, `in_flight_bytes_max` of them.
    pool: Arc<Semaphore>,
    /// The reserve: one permit, for one frame at a time, which may then take the rest of its
    /// bytes (at most the largest frame) without charging the pool.
    reserve: Arc<Semaphore>,
}

/// What one frame is charged: a share of the pool and perhaps the reserve, given back when the
/// last slice of the frame is dropped.
struct Charge {
    /// Its permits in the pool.
    pool: Option<OwnedSemaphorePermit>,
    /// The reserve, if the frame took it.
    reserve: Option<OwnedSemaphorePermit>,
    /// Bytes charged (in the pool and under the reserve), counted in the stats.
    bytes: usize,
    /// Counters to update when it goes.
    stats: Arc<NetStats>,
}

impl Charge {
    fn new(stats: Arc<NetStats>) -> Charge {
        Charge { pool: None, reserve: None, bytes: 0, stats }
    }

    /// Charges `more` bytes: from the pool, or, once the frame holds the reserve, from that.
    /// When the pool lacks room, waits for whichever comes first: room in the pool, or the
    /// reserve. Returns false if the budget is gone (the server is stopping).
    async fn grow(&mut self, more: usize, budget: &Budget) -> bool {
        debug_assert!(more > 0 && more <= FRAME_BYTES_MAX);
        if self.reserve.is_none() {
            let permit = match budget.pool.clone().try_acquire_many_owned(more as u32) {
                Ok(p) => Some(p),
                Err(TryAcquireError::Closed) => return false,
                Err(TryAcquireError::NoPermits) => {
                    self.stats.frames_waited.fetch_add(1, Relaxed);
                    tokio::select! {
                        p = budget.pool.clone().acquire_many_owned(more as u32) => match p {
                            Ok(p) => Some(p),
                            Err(_) => return false,
                        },
                        r = budget.reserve.clone().acquire_owned() => match r {
                            Ok(r) => {
                                self.stats.frames_from_reserve.fetch_add(1, Relaxed);
                                self.reserve = Some(r);
                                None
                            }
                            Err(_) => return false,
                        },
                    }
                }
            };
            match (&mut self.pool, permit) {
                (Some(held), Some(p)) => held.merge(p),
                (held @ None, Some(p)) => *held = Some(p),
                (_, None) => {}
            }
        }
        self.bytes += more;
        let now = self.stats.in_flight_bytes.fetch_add(more, Relaxed) + more;
        self.stats.in_flight_bytes_peak.fetch_max(now, Relaxed);
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.stats.in_flight_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// A received frame's buffer together with what it is charged.
struct Held {
    /// The frame.
    buf: Vec<u8>,
    /// Its charge under the server-wide bound (nothing for a frame before `Hello`).
    _charge: Charge,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

/// What the frame reader needs.
struct ReaderCtx {
    /// Settings.
    cfg: Arc<NetConfig>,
    /// The server-wide bound on frame bytes held.
    budget: Arc<Budget>,
    /// Counters.
    stats: Arc<NetStats>,
    /// The frame limit now: [`PRE_HELLO_FRAME_BYTES_MAX`] until the session opens.
    max_frame: Arc<AtomicUsize>,
    /// Whether the session is open (`HelloOk` sent): frames before are not charged.
    opened: Arc<AtomicBool>,
    /// Requests of this connection handed to the core and not answered yet: while there are
    /// any, the connection is not idle.
    owed: Arc<AtomicUsize>,
}

impl ReaderCtx {
    /// The reading side's context of a connection whose writing side tracks `progress`.
    fn new(shared: &ConnShared, progress: &Progress) -> ReaderCtx {
        ReaderCtx {
            cfg: shared.cfg.clone(),
            budget: shared.budget.clone(),
            stats: shared.stats.clone(),
            max_frame: progress.max_frame.clone(),
            opened: progress.opened.clone(),
            owed: progress.owed.clone(),
        }
    }
}

/// The buffer size a frame of `size` bytes grows to from `cap`: double, at least the initial
/// size, at most the frame.
fn next_capacity(cap: usize, size: usize) -> usize {
    (cap * 2).max(FRAME_BUFFER_INITIAL_BYTES).min(size)
}

/// Reads the rest of a frame whose first byte has arrived. The frame timeout runs from now,
/// stopped while the frame waits for room under the server-wide bound.
async fn read_rest<R: AsyncBufRead + Unpin>(r: &mut R, ctx: &ReaderCtx) -> Read {
    let mut deadline = TokioInstant::now() + ctx.cfg.frame_timeout;
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        match timeout_at(deadline, r.read(&mut prefix[got..])).await {
            Err(_) => return Read::Slow,
            Ok(Ok(0)) => return Read::Bad(WireError::TruncatedFrame { got, len: 4 }),
            Ok(Ok(n)) => got += n,
            Ok(Err(e)) => return Read::Io(e),
        }
    }
    let size = match frame_size(prefix, ctx.max_frame.load(Relaxed)) {
        Ok(s) => s,
        Err(e) => return Read::Bad(e),
    };
    let mut charge = Charge::new(ctx.stats.clone());
    // Before Hello a frame is small and uncharged: it never waits behind others' frames.
    let charged = ctx.opened.load(Relaxed);
    let mut cap = 0;
    let mut buf = Vec::new();
    while buf.len() < size {
        if buf.len() == cap {
            // Room for the next bytes, charged before they are read: the buffer holds at
            // most twice what has arrived.
            let next = if charged { next_capacity(cap, size) } else { size };
            if charged {
                let waiting = TokioInstant::now();
                if !charge.grow(next - cap, &ctx.budget).await {
                    return Read::Eof;
                }
                deadline += waiting.elapsed();
            }
            buf.reserve_exact(next - buf.len());
            cap = next;
            if buf.is_empty() {
                buf.extend_from_slice(&prefix);
                continue;
            }
        }
        let room = (cap - buf.len()) as u64;
        match timeout_at(deadline, (&mut *r).take(room).read_buf(&mut buf)).await {
            Err(_) => return Read::Slow,
            Ok(Err(e)) => return Read::Io(e),
            Ok(Ok(0)) => {
                return Read::Bad(WireError::TruncatedFrame { got: buf.len(), len: size });
            }
            Ok(Ok(_)) => {}
        }
    }
    Read::Frame(Bytes::from_owner(Held { buf, _charge: charge }))
}

/// Waits for the next frame under the idle timeout (which does not run out while a reply is
/// owed), then reads it.
async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R, ctx: &ReaderCtx) -> Read {
    loop {
        match timeout(ctx.cfg.idle_timeout, r.fill_buf()).await {
            Err(_) if ctx.owed.load(Relaxed) > 0 => continue,
            Err(_) => return Read::Idle,
            Ok(Err(e)) => return Read::Io(e),
            Ok(Ok([])) => return Read::Eof,
            Ok(Ok(_)) => break,
        }
    }
    // The frame timeout covers the length word and the body, not a wait for room under the
    // in-flight bound (see `read_rest`).
    read_rest(r, ctx).await
}

/// Reads the next frame of a connection, taking its reader and giving it back with the frame:
/// the connection task keeps this future across its `select!` (a frame half read when a reply
/// goes out is not lost) and starts the next one once a frame is in.
async fn next_frame<R: AsyncRead + Unpin>(
    mut r: BufReader<R>,
    ctx: Arc<ReaderCtx>,
) -> (BufReader<R>, Read) {
    let read = read_frame(&mut r, &ctx).await;
    (r, read)
}

/// A connected byte stream the server serves: loopback or remote TCP, a Unix-domain socket, or
/// TLS over either.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The receiving half.
    type R: AsyncRead + Unpin + Send + 'static;
    /// The sending half.
    type W: AsyncWrite + Unpin + Send + 'static;
    /// Splits the stream so that a frame can be half read while a reply is written.
    fn split(self) -> (Self::R, Self::W);
    /// Writes what the socket accepts now, without waiting (`WouldBlock` if nothing).
    fn try_write(w: &Self::W, buf: &[u8]) -> std::io::Result<usize>;
}

/// A socket as accepted, which can move to the reactor of the thread that serves it.
pub(crate) trait Accepted: Stream + Sized {
    /// The socket, no longer registered with the reactor of the runtime that accepted it.
    type Std: Send + 'static;
    /// Takes the socket out of its runtime's reactor.
    fn into_std(self) -> std::io::Result<Self::Std>;
    /// Registers the socket with the reactor of the runtime this is called in.
    fn from_std(s: Self::Std) -> std::io::Result<Self>;
}

impl Stream for TcpStream {
    type R = tokio::net::tcp::OwnedReadHalf;
    type W = tokio::net::tcp::OwnedWriteHalf;
    fn split(self) -> (Self::R, Self::W) {
        self.into_split()
    }
    fn try_write(w: &Self::W, buf: &[u8]) -> std::io::Result<usize> {
        w.try_write(buf)
    }
}

impl Accepted for TcpStream {
    type Std = std::net::TcpStream;
    fn into_std(self) -> std::io::Result<Self::Std> {
        TcpStream::into_std(self)
    }
    fn from_std(s: Self::Std) -> std::io::Result<Self> {
        TcpStream::from_std(s)
    }
}

#[cfg(unix)]
impl Stream for tokio::net::UnixStream {
    type R = tokio::net::unix::OwnedReadHalf;
    type W = tokio::net::unix::OwnedWriteHalf;
    fn split(self) -> (Self::R, Self::W) {
        self.into_split()
    }
    fn try_write(w: &Self::W, buf: &[u8]) -> std::io::Result<usize> {
        w.try_write(buf)
    }
}

#[cfg(unix)]
impl Accepted for tokio::net::UnixStream {
    type Std = std::os::unix::net::UnixStream;
    fn into_std(self) -> std::io::Result<Self::Std> {
        tokio::net::UnixStream::into_std(self)
    }
    fn from_std(s: Self::Std) -> std::io::Result<Self> {
        tokio::net::UnixStream::from_std(s)
    }
}

/// TLS over an accepted socket. Its halves share the TLS state (tokio's `split`), and it has
/// no non-blocking write: a record must be encrypted and may not go out whole, so every reply
/// takes the waiting path (`write_all`, then `flush`).
impl<S: Stream> Stream for tokio_rustls::server::TlsStream<S> {
    type R = tokio::io::ReadHalf<Self>;
    type W = tokio::io::WriteHalf<Self>;
    fn split(self) -> (Self::R, Self::W) {
        tokio::io::split(self)
    }
    fn try_write(_: &Self::W, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::WouldBlock.into())
    }
}

/// A listening socket the server accepts connections on.
pub(crate) trait Listen: Send + 'static {
    /// What it accepts.
    type S: Accepted;
    /// The next connection and the peer's name for logs.
    fn accept_one(&self) -> impl Future<Output = std::io::Result<(Self::S, String)>> + Send + '_;
}

impl Listen for TcpListener {
    type S = TcpStream;
    async fn accept_one(&self) -> std::io::Result<(TcpStream, String)> {
        let (s, peer) = self.accept().await?;
        // Every request is one small write the client waits on: do not hold replies back.
        let _ = s.set_nodelay(true);
        Ok((s, peer.to_string()))
    }
}

#[cfg(unix)]
impl Listen for tokio::net::UnixListener {
    type S = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<(tokio::net::UnixStream, String)> {
        let (s, peer) = self.accept().await?;
        let name = match peer.as_pathname() {
            Some(p) => format!("unix:{}", p.display()),
            None => "unix client".to_owned(),
        };
        Ok((s, name))
    }
}

/// The replies the core delivered to one connection and its task has not written yet.
///
/// Bounded by the core: at most one reply per request received, at most `IN_FLIGHT_MAX` + 1
/// requests in flight per connection, the errors answering requests dropped past that bound
/// (`thor_server::limits::DROPPED_IDS_MAX`), and one final error.
#[derive(Default)]
struct Outbox {
    /// The replies, oldest first: (request id, reply, close after it).
    queue: parking_lot::Mutex<VecDeque<(u64, Reply, bool)>>,
    /// Set while the connection's own task is inside `Engine::request`: it writes what the
    /// core delivered as soon as that returns, so a page-cache hit wakes nobody.
    inline: AtomicBool,
    /// Wakes the connection task for a reply delivered from another thread (a commit made
    /// durable by the log writer, a page read on the blocking pool). A wake-up that finds the
    /// task busy is kept as a permit, so none is lost.
    notify: Notify,
}

/// The sink of a connection: the core's replies go into its [`Outbox`].
struct OutboxSink(Arc<Outbox>);

impl ReplySink for OutboxSink {
    fn deliver(&self, id: u64, reply: Reply, close: bool) {
        // Called with the core locked: a push and at most one wake-up, never a write.
        self.0.queue.lock().push_back((id, reply, close));
        if !self.0.inline.load(SeqCst) {
            self.0.notify.notify_one();
        }
    }
}

/// One connection's writing side.
struct Conn<W> {
    /// The socket's sending half.
    w: W,
    /// The client's name, for logs.
    peer: String,
    /// The engine.
    engine: Arc<dyn Served>,
    /// The core's name for this connection.
    id: ConnId,
    /// Settings.
    cfg: Arc<NetConfig>,
    /// Reused encoding buffer for replies.
    out: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> Conn<W> {
    /// Sends `reply` as the answer to request `id`. Returns false if the connection failed.
    ///
    /// Replies are bounded by the protocol's frame limit, not by the connection's (which bounds
    /// what the server accepts); every reply is smaller than the request it answers anyway,
    /// except a page, which fits the smallest frame setting.
    ///
    /// The reply is first written without waiting (`try_write`): a page fits the socket's
    /// send buffer, so the usual reply costs one system call and no timer. Only what the socket
    /// does not take now is written under the write timeout.
    async fn send<S: Stream<W = W>>(&mut self, id: u64, reply: &Reply) -> bool {
        if self.out.capacity() > REPLY_BUFFER_KEEP_BYTES {
            // Do not keep a large reply's buffer for the life of the connection.
            self.out = Vec::new();
        }
        self.out.clear();
        if let Err(e) = reply.encode(id, FRAME_BYTES_MAX, &mut self.out) {
            warn!(peer = %self.peer, "cannot encode a {} reply: {e}", reply.body.name());
            self.out.clear();
            let fallback = Reply::error(ErrorCode::Internal, &format!("reply not encodable: {e}"));
            if fallback.encode(id, FRAME_BYTES_MAX, &mut self.out).is_err() {
                return false;
            }
        }
        let mut done = 0;
        while done < self.out.len() {
            match S::try_write(&self.w, &self.out[done..]) {
                Ok(0) => {
                    debug!(peer = %self.peer, "write failed: the socket took nothing");
                    return false;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = %self.peer, "write failed: {e}");
                    return false;
                }
            }
        }
        if done < self.out.len() {
            // `flush` sends what a TLS stream still holds; a socket's does nothing.
            let write = async {
                self.w.write_all(&self.out[done..]).await?;
                self.w.flush().await
            };
            match timeout(self.cfg.write_timeout, write).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(peer = %self.peer, "write failed: {e}");
                    return false;
                }
                Err(_) => {
                    debug!(peer = %self.peer, "write timed out");
                    return false;
                }
            }
        }
        self.engine.note_traffic(0, self.out.len() as u64);
        true
    }
}

/// Shuts down the sending side, for a bounded time, so that the client reads the last reply
/// and then the end of the stream.
async fn linger_close<W: AsyncWrite + Unpin>(mut w: W) {
    let _ = timeout(CLOSE_LINGER, w.shutdown()).await;
}

/// Completes once shutdown has begun. (The guard `wait_for` returns is dropped here, not held
/// across the connection's awaits.)
async fn stopping(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|stop| *stop).await.is_err() {
        // The server is gone without signalling: treat it as shutdown.
    }
}

/// Everything a connection task needs besides its socket.
struct ConnShared {
    /// The engine.
    engine: Arc<dyn Served>,
    /// Settings.
    cfg: Arc<NetConfig>,
    /// The server-wide bound on frame bytes held.
    budget: Arc<Budget>,
    /// Counters.
    stats: Arc<NetStats>,
    /// The TLS handshake of every connection, if the server speaks TLS.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// How a connection ends.
enum End {
    /// At once: the client left or the socket failed.
    Drop,
    /// After sending this error (if any) and shutting down the sending side.
    Close(Option<Reply>),
}

/// The reply that tells a client the server is going away.
fn shutting_down() -> Reply {
    Reply::error(ErrorCode::ShuttingDown, "the server is shutting down")
}

/// The fetches of one connection handed to the core and not answered yet, with the time each
/// was handed over: what `ServerStats::fetch_service_ns` times (see [`FetchTimes::answered`]).
/// At most one entry per request in flight, which the core bounds.
#[derive(Default)]
struct FetchTimes(VecDeque<(u64, Instant)>);

impl FetchTimes {
    /// Request `rid`, a fetch, is about to be handed to the core.
    fn handing(&mut self, rid: u64) {
        self.0.push_back((rid, Instant::now()));
    }

    /// The reply to request `rid` is about to be written: if it answers a fetch, count the
    /// fetch's service time. Replies come in request order, so a fetch's entry is at the
    /// front; entries before it (none, unless a reply was never delivered) go with it.
    fn answered(&mut self, rid: u64, engine: &dyn Served) {
        if let Some(k) = self.0.iter().position(|&(id, _)| id == rid) {
            let (_, t) = self.0[k];
            self.0.drain(..=k);
            engine.note_fetch_served(t.elapsed().as_nanos() as u64);
        }
    }
}

/// What the connection task tracks of its session besides the core's view.
struct Progress {
    /// Requests handed to the core and not answered yet.
    owed: Arc<AtomicUsize>,
    /// The frame limit now.
    max_frame: Arc<AtomicUsize>,
    /// Whether `HelloOk` went out (the handshake deadline no longer applies).
    opened: Arc<AtomicBool>,
    /// Fetches in flight, for their service time.
    fetches: FetchTimes,
    /// The id of the replica request being served (`NetConfig::replicas`), 0 for none:
    /// served outside the core, so the connection takes no other request meanwhile.
    replica_busy: Arc<AtomicU64>,
}

impl Progress {
    /// A new connection's: nothing owed, the pre-`Hello` frame limit, not opened.
    fn new() -> Progress {
        Progress {
            owed: Arc::new(AtomicUsize::new(0)),
            max_frame: Arc::new(AtomicUsize::new(PRE_HELLO_FRAME_BYTES_MAX)),
            opened: Arc::new(AtomicBool::new(false)),
            fetches: FetchTimes::default(),
            replica_busy: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// Writes every reply in `outbox`, in order. Returns how the connection ends if it must.
async fn flush<S: Stream>(
    conn: &mut Conn<S::W>,
    outbox: &Outbox,
    progress: &mut Progress,
) -> Option<End> {
    loop {
        let next = outbox.queue.lock().pop_front();
        let (rid, reply, close_after) = next?;
        if rid != 0 {
            // Only this task changes it; the reader reads it.
            let _ = progress.owed.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
            progress.fetches.answered(rid, &*conn.engine);
            let _ = progress.replica_busy.compare_exchange(rid, 0, Relaxed, Relaxed);
        }
        match &reply.body {
            ReplyBody::HelloOk(_) => {
                progress.max_frame.store(conn.engine.protocol().max_frame_bytes, Relaxed);
                progress.opened.store(true, Relaxed);
            }
            ReplyBody::Error { code: ErrorCode::Unauthenticated, message } => {
                // The operator's one sign of a client with a wrong token (or an attack).
                warn!(peer = %conn.peer, "refused a Hello: {message}");
            }
            _ => {}
        }
        if !conn.send::<S>(rid, &reply).await {
            return Some(End::Drop);
        }
        if close_after {
            return Some(End::Close(None));
        }
    }
}

/// One accepted connection, start to end: it takes a session slot at once (before any TLS
/// handshake, so that the core's slot policy covers connections that never finish one), then
/// performs the TLS handshake if the server speaks TLS, under the handshake deadline, and
/// serves the stream.
async fn connection<S: Stream>(
    stream: S,
    peer: String,
    shared: Arc<ConnShared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let outbox = Arc::new(Outbox::default());
    let engine = shared.engine.clone();
    let id = engine.connect(Arc::new(OutboxSink(outbox.clone())));
    let handshake_deadline = TokioInstant::now() + shared.cfg.handshake_timeout;
    let Some(acceptor) = shared.tls.clone() else {
        let at = Known { outbox, id, handshake_deadline };
        return serve_connection(stream, peer, shared, shutdown, at).await;
    };
    // The core may close the connection before the handshake completes (no slot for it, or
    // it was the oldest waiting for Hello): a reply that closes is in the outbox then, and
    // nothing can be said to a client that cannot read it yet.
    let closed_by_core = |outbox: &Outbox| outbox.queue.lock().iter().any(|(_, _, close)| *close);
    let handshake = timeout_at(handshake_deadline, acceptor.accept(stream));
    tokio::pin!(handshake);
    let tls = loop {
        if closed_by_core(&outbox) {
            debug!(%peer, "closed before the TLS handshake completed (no session slot)");
            break None;
        }
        tokio::select! {
            biased;
            () = outbox.notify.notified() => {}
            () = stopping(&mut shutdown) => break None,
            done = &mut handshake => match done {
                Ok(Ok(tls)) => break Some(tls),
                Ok(Err(e)) => {
                    shared.stats.tls_handshakes_failed.fetch_add(1, Relaxed);
                    warn!(%peer, "TLS handshake failed: {e}");
                    break None;
                }
                Err(_) => {
                    shared.stats.handshakes_timed_out.fetch_add(1, Relaxed);
                    debug!(%peer, "no TLS handshake within the handshake deadline");
                    break None;
                }
            },
        }
    };
    match tls {
        Some(tls) => {
            let at = Known { outbox, id, handshake_deadline };
            serve_connection(tls, peer, shared, shutdown, at).await
        }
        None => engine.disconnect(id),
    }
}

/// A connection the core knows: its outbox, its id and when its handshake must be done.
struct Known {
    /// Where the core's replies arrive.
    outbox: Arc<Outbox>,
    /// The core's name for the connection.
    id: ConnId,
    /// When `HelloOk` must have gone out.
    handshake_deadline: TokioInstant,
}

/// Serves one connection's stream, start to end, in one task: it reads a frame, hands the
/// request to the core and writes the reply, with no hop to another task or thread on the way
/// (on a page-cache hit the core answers inside `Engine::request`, and the reply goes out
/// before the task yields). Replies the core delivers later, from other threads, wake it
/// through its outbox.
async fn serve_connection<S: Stream>(
    stream: S,
    peer: String,
    shared: Arc<ConnShared>,
    mut shutdown: watch::Receiver<bool>,
    known: Known,
) {
    let Known { outbox, id, handshake_deadline } = known;
    let (rd, w) = stream.split();
    let engine = shared.engine.clone();
    let mut conn =
        Conn { w, peer, engine: engine.clone(), id, cfg: shared.cfg.clone(), out: Vec::new() };
    let mut progress = Progress::new();
    let ctx = Arc::new(ReaderCtx::new(&shared, &progress));
    let mut reading =
        Box::pin(next_frame(BufReader::with_capacity(READ_BUFFER_BYTES, rd), ctx.clone()));
    let handshake = tokio::time::sleep_until(handshake_deadline);
    tokio::pin!(handshake);
    // No more frames are read: shutdown began, or the stream's framing is lost (a bad frame;
    // the core answers it with an error that closes the connection).
    let mut reading_done = false;
    let mut draining = false;
    let end = loop {
        if let Some(end) = flush::<S>(&mut conn, &outbox, &mut progress).await {
            break end;
        }
        let owed = progress.owed.load(Relaxed);
        if draining && owed == 0 {
            break End::Close(Some(shutting_down()));
        }
        let opened = progress.opened.load(Relaxed);
        tokio::select! {
            biased;
            () = outbox.notify.notified() => {}
            () = stopping(&mut shutdown), if !draining => draining = true,
            // A Hello handed to the core is answered at once, so a connection that owes
            // nothing and has not opened its session has not said Hello.
            () = &mut handshake, if !opened && owed == 0 => {
                shared.stats.handshakes_timed_out.fetch_add(1, Relaxed);
                debug!(peer = %conn.peer, "no Hello within the handshake deadline");
                break End::Close(Some(Reply::error(
                    ErrorCode::Timeout,
                    "no Hello within the handshake deadline",
                )));
            }
            (r, read) = &mut reading, if !draining && !reading_done => {
                let bytes = match read {
                    Read::Frame(b) => b,
                    other => match not_a_frame(other, &conn) {
                        Some(end) => break end,
                        // A bad frame: the stream's framing is lost.
                        None => {
                            reading_done = true;
                            continue;
                        }
                    },
                };
                // Read ahead: the next frame's future starts now and runs while replies go out.
                reading.set(next_frame(r, ctx.clone()));
                hand_over(&conn, &outbox, &mut progress, bytes);
            }
        }
    };
    // A frame half received is dropped unanswered.
    drop(reading);
    finish::<S>(conn, end).await
}

/// The end of the connection a read that brought no frame means, or `None` for a bad frame
/// (the core answers it with an error that closes the connection; no more frames are read).
#[cold]
fn not_a_frame<W>(read: Read, conn: &Conn<W>) -> Option<End> {
    match read {
        Read::Frame(_) => unreachable!("a frame is handed over, not ended on"),
        Read::Eof => Some(End::Drop),
        Read::Idle => Some(End::Close(Some(Reply::error(
            ErrorCode::Timeout,
            "no request within the idle timeout",
        )))),
        Read::Slow => Some(End::Close(Some(Reply::error(
            ErrorCode::Timeout,
            "the frame did not arrive in time",
        )))),
        Read::Bad(e) => {
            debug!(peer = %conn.peer, "bad frame: {e}");
            conn.engine.protocol_error(conn.id, 0, e);
            None
        }
        Read::Io(e) => {
            debug!(peer = %conn.peer, "read failed: {e}");
            Some(End::Drop)
        }
    }
}

/// Decodes a frame and hands its request to the core, on the connection's task (a request
/// the core answers at once, a page-cache hit, has its reply in the outbox on return; work
/// that must wait for the disk goes to the blocking pool). A frame that does not parse or
/// decode is reported to the core, which answers it with an error.
#[inline]
fn hand_over<W>(conn: &Conn<W>, outbox: &Arc<Outbox>, progress: &mut Progress, bytes: Bytes) {
    conn.engine.note_traffic(bytes.len() as u64, 0);
    let frame = match Frame::parse(bytes, progress.max_frame.load(Relaxed)) {
        Ok(f) => f,
        Err(e) => {
            debug!(peer = %conn.peer, "bad frame: {e}");
            conn.engine.protocol_error(conn.id, 0, e);
            return;
        }
    };
    let rid = frame.id;
    let req = match Request::decode(&frame) {
        Ok(r) => r,
        Err(e) => {
            debug!(peer = %conn.peer, id = rid, "malformed request: {e}");
            conn.engine.protocol_error(conn.id, rid, e);
            return;
        }
    };
    drop(frame);
    if progress.replica_busy.load(Relaxed) != 0 {
        replica_overlap(conn, outbox, progress, rid, &req);
        return;
    }
    if let (RequestBody::Replica(_), Some(service)) = (&req.body, &conn.cfg.replicas) {
        serve_replica(conn, outbox, progress, service, rid, req);
        return;
    }
    if matches!(req.body, RequestBody::Fetch { .. } | RequestBody::Prefetch(_)) {
        progress.fetches.handing(rid);
    }
    progress.owed.fetch_add(1, Relaxed);
    outbox.inline.store(true, SeqCst);
    let work = conn.engine.request(conn.id, rid, req);
    outbox.inline.store(false, SeqCst);
    if let Some(work) = work {
        let engine = conn.engine.clone();
        tokio::task::spawn_blocking(move || engine.settle(work));
    }
}

/// Serves a replica request (`NetConfig::replicas`) once the core has screened it, on the
/// blocking pool: its answer goes to the outbox as the core's do. The connection takes no
/// other request until it is written (`Progress::replica_busy`).
#[cold]
fn serve_replica<W>(
    conn: &Conn<W>,
    outbox: &Arc<Outbox>,
    progress: &mut Progress,
    service: &Arc<crate::replicas::ReplicaService>,
    rid: u64,
    req: Request,
) {
    progress.owed.fetch_add(1, Relaxed);
    // The core's refusal, if any, is in the outbox on return.
    if !conn.engine.screen(conn.id, rid, &req) {
        return;
    }
    let RequestBody::Replica(r) = req.body else { unreachable!("a replica request") };
    // An id of 0 answers no request (errors of the connection): a replica request that uses
    // it cannot be told from one, so it is not marked busy and may be overtaken.
    progress.replica_busy.store(rid, Relaxed);
    let (service, sink) = (service.clone(), OutboxSink(outbox.clone()));
    tokio::task::spawn_blocking(move || {
        let (reply, close) = service.serve(r);
        sink.deliver(rid, reply, close);
    });
}

/// A request that arrived while a replica request of the connection is being served: replies
/// could overtake each other, so the client broke the protocol; the connection closes.
#[cold]
fn replica_overlap<W>(
    conn: &Conn<W>,
    outbox: &Arc<Outbox>,
    progress: &mut Progress,
    rid: u64,
    req: &Request,
) {
    debug!(peer = %conn.peer, "a {} while a replica request is served", req.body.name());
    progress.owed.fetch_add(1, Relaxed);
    let msg = format!("a {} while a replica request is unanswered", req.body.name());
    OutboxSink(outbox.clone()).deliver(rid, Reply::error(ErrorCode::UnexpectedMessage, &msg), true);
}

/// Ends the connection as `end` says: at once, or after sending its error and with a
/// lingering close; the core forgets it either way.
async fn finish<S: Stream>(mut conn: Conn<S::W>, end: End) {
    match end {
        End::Drop => conn.engine.disconnect(conn.id),
        End::Close(reply) => {
            let sent = match reply {
                Some(r) => conn.send::<S>(0, &r).await,
                None => true,
            };
            conn.engine.disconnect(conn.id);
            if sent {
                linger_close(conn.w).await;
            }
        }
    }
}

/// Serves `engine` on `listener` until `shutdown` completes, then shuts down gracefully (see
/// the module documentation) and returns once every connection is closed. Runs on the caller's
/// tokio runtime; reads of pages the page cache lacks need its blocking pool.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<dyn Served>,
    config: NetConfig,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_stats(listener, engine, config, Arc::new(NetStats::default()), &[], shutdown).await
}

/// [`serve`] on a Unix-domain socket: for clients on the same machine, which skip TCP's
/// loopback path (see the module documentation). The socket file is the caller's to remove.
#[cfg(unix)]
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    engine: Arc<dyn Served>,
    config: NetConfig,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_stats(listener, engine, config, Arc::new(NetStats::default()), &[], shutdown).await
}

/// The accept loop. Connections run on `spread`'s runtimes in turn, or on the caller's when it
/// is empty.
async fn serve_with_stats<L: Listen>(
    listener: L,
    engine: Arc<dyn Served>,
    config: NetConfig,
    stats: Arc<NetStats>,
    spread: &[tokio::runtime::Handle],
    shutdown: impl Future<Output = ()>,
) {
    let mut next = 0usize;
    let max_frame = engine.protocol().max_frame_bytes;
    let pool = config.in_flight_bytes_max.max(max_frame).min(Semaphore::MAX_PERMITS);
    let budget =
        Budget { pool: Arc::new(Semaphore::new(pool)), reserve: Arc::new(Semaphore::new(1)) };
    let tls = config.tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.rustls_config()));
    let shared = Arc::new(ConnShared {
        engine,
        cfg: Arc::new(config),
        budget: Arc::new(budget),
        stats,
        tls,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // An engine without its installer thread is ticked from here at its deadlines (a
        // commit held back by fair retries, two-phase commit's timers): nothing else would.
        let tick = shared.engine.caller_tick_wait();
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(tick.unwrap_or(Duration::MAX)), if tick.is_some() => {
                let engine = shared.engine.clone();
                tokio::task::spawn_blocking(move || engine.tick_if_due());
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    warn!("a connection task failed: {e}");
                }
            }
            accepted = listener.accept_one() => match accepted {
                Ok((stream, peer)) => {
                    debug!(%peer, "connection accepted");
                    let (shared, stop) = (shared.clone(), stop_rx.clone());
                    match spread.get(next % spread.len().max(1)) {
                        Some(rt) => {
                            next = next.wrapping_add(1);
                            // A socket's readiness is reported by the reactor of the runtime
                            // that registered it: moved as it is, every request would wake
                            // the accepting thread, which would wake the connection's. So it
                            // leaves this reactor and joins the one of the thread it runs on.
                            let std = match stream.into_std() {
                                Ok(s) => s,
                                Err(e) => {
                                    warn!(%peer, "cannot hand the connection to a thread: {e}");
                                    continue;
                                }
                            };
                            tasks.spawn_on(
                                async move {
                                    match L::S::from_std(std) {
                                        Ok(s) => connection(s, peer, shared, stop).await,
                                        Err(e) => warn!(%peer, "cannot serve the connection: {e}"),
                                    }
                                },
                                rt,
                            );
                        }
                        None => {
                            tasks.spawn(connection(stream, peer, shared, stop));
                        }
                    }
                }
                Err(e) => {
                    warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    drop(listener);
    let open = tasks.len();
    info!(connections = open, "shutting down: finishing requests in flight");
    let _ = stop_tx.send(true);
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            warn!("a connection task failed: {e}");
        }
    }
    info!("all connections closed");
}

/// Completes when the process receives Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown_signal() -> std::io::Result<()> {
    ShutdownSignal::register()?.wait().await
}

/// SIGINT and SIGTERM handlers, installed when this is made: a signal that arrives after
/// [`ShutdownSignal::register`] returns is seen by [`ShutdownSignal::wait`], however late the
/// wait starts (a program may announce that it is ready in between).
#[derive(Debug)]
pub struct ShutdownSignal {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers. Must run inside a tokio runtime.
    pub fn register() -> std::io::Result<ShutdownSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignal {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(ShutdownSignal {})
        }
    }

    /// Resolves at the first SIGINT or SIGTERM since [`ShutdownSignal::register`].
    pub async fn wait(mut self) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => Ok(()),
                _ = self.term.recv() => Ok(()),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            tokio::signal::ctrl_c().await
        }
    }
}

/// A TCP server running on a runtime of its own: for `thor server`, tests, benchmarks and
/// embedding in synchronous programs. Dropping it shuts it down gracefully. Its methods block,
/// so call them from synchronous code, not from inside another tokio runtime.
///
/// Shutdown returns once every connection is closed: after the requests in flight are answered
/// and each closing connection has lingered (at most [`CLOSE_LINGER`]).
#[derive(Debug)]
pub struct Server {
    /// The runtime the accept loop runs on (and with [`Threading::WorkStealing`] every
    /// connection); with [`Threading::PerThread`], the first of `more`.
    runtime: Option<Arc<tokio::runtime::Runtime>>,
    /// With [`Threading::PerThread`]: every single-threaded runtime (the first is `runtime`),
    /// each driven by a thread of `drivers`.
    more: Vec<Arc<tokio::runtime::Runtime>>,
    /// The threads driving `more`; they return when `halt` fires.
    drivers: Vec<std::thread::JoinHandle<()>>,
    /// Stops the driver threads, after the accept loop and every connection have ended.
    halt: Option<watch::Sender<bool>>,
    /// The address it listens on (with the port the system chose for port 0).
    local_addr: SocketAddr,
    /// The socket file of a Unix-socket server.
    unix_path: Option<std::path::PathBuf>,
    /// Fired to begin a graceful shutdown.
    stop: Option<oneshot::Sender<()>>,
    /// The accept loop; completes when every connection is closed.
    task: Option<tokio::task::JoinHandle<()>>,
    /// Counters.
    stats: Arc<NetStats>,
    /// Whether shutdown ran.
    stopped: AtomicBool,
}

impl Server {
    /// Starts serving `engine` on `addr` (use port 0 for any free port; see
    /// [`Server::local_addr`]).
    pub fn start(
        addr: &str,
        engine: Arc<dyn Served>,
        config: NetConfig,
    ) -> Result<Server, NetError> {
        let bind = |source| NetError::Bind { addr: addr.to_owned(), cause: source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        Server::start_on(listener, engine, config)
    }

    /// [`Server::start`] on a listener the caller bound (so that a program can fail on a bad
    /// address before it opens or creates anything).
    pub fn start_on(
        listener: std::net::TcpListener,
        engine: Arc<dyn Served>,
        config: NetConfig,
    ) -> Result<Server, NetError> {
        let local_addr = listener.local_addr().map_err(|source| NetError::Bind {
            addr: "the given listener".into(),
            cause: source,
        })?;
        let bind = |source| NetError::Bind { addr: local_addr.to_string(), cause: source };
        listener.set_nonblocking(true).map_err(bind)?;
        Server::start_with(engine, config, local_addr, None, |_| {
            TcpListener::from_std(listener).map_err(bind)
        })
    }

    /// Starts serving `engine` on a Unix-domain socket created at `path` (which must not
    /// exist; the caller removes it after shutdown): `thor server --listen unix:PATH`, for
    /// clients on this machine ([`crate::UnixTransport`]).
    #[cfg(unix)]
    pub fn start_unix(
        path: impl AsRef<std::path::Path>,
        engine: Arc<dyn Served>,
        config: NetConfig,
    ) -> Result<Server, NetError> {
        let path = path.as_ref();
        let bind =
            |source| NetError::Bind { addr: format!("unix:{}", path.display()), cause: source };
        let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind)?;
        Server::start_unix_on(listener, engine, config)
    }

    /// [`Server::start_unix`] on a listener the caller bound.
    #[cfg(unix)]
    pub fn start_unix_on(
        listener: std::os::unix::net::UnixListener,
        engine: Arc<dyn Served>,
        config: NetConfig,
    ) -> Result<Server, NetError> {
        let path =
            listener.local_addr().ok().and_then(|a| a.as_pathname().map(|p| p.to_path_buf()));
        let name = match &path {
            Some(p) => format!("unix:{}", p.display()),
            None => "an unnamed unix socket".to_owned(),
        };
        let bind = |source| NetError::Bind { addr: name.clone(), cause: source };
        listener.set_nonblocking(true).map_err(bind)?;
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Server::start_with(engine, config, unspecified, path, |_| {
            tokio::net::UnixListener::from_std(listener).map_err(bind)
        })
    }

    /// Builds the runtime, makes the listener inside it and spawns the accept loop.
    fn start_with<L: Listen>(
        engine: Arc<dyn Served>,
        config: NetConfig,
        local_addr: SocketAddr,
        unix_path: Option<std::path::PathBuf>,
        listener: impl FnOnce(&tokio::runtime::Runtime) -> Result<L, NetError>,
    ) -> Result<Server, NetError> {
        let threads = match config.worker_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let (runtime, more, drivers, halt) = match config.threading {
            Threading::WorkStealing => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("thor-net")
                    .worker_threads(threads)
                    .build()
                    .map_err(NetError::Runtime)?;
                (Arc::new(runtime), Vec::new(), Vec::new(), None)
            }
            Threading::PerThread => {
                let (halt, halted) = watch::channel(false);
                let mut more = Vec::with_capacity(threads);
                let mut drivers = Vec::with_capacity(threads);
                for i in 0..threads {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .thread_name("thor-net-blocking")
                        .build()
                        .map(Arc::new)
                        .map_err(NetError::Runtime)?;
                    let (driven, mut halted) = (rt.clone(), halted.clone());
                    let driver = std::thread::Builder::new()
                        .name(format!("thor-net-{i}"))
                        .spawn(move || {
                            driven.block_on(async move {
                                let _ = halted.wait_for(|h| *h).await;
                            })
                        })
                        .map_err(NetError::Runtime)?;
                    more.push(rt);
                    drivers.push(driver);
                }
                (more[0].clone(), more, drivers, Some(halt))
            }
        };
        let listener = {
            let _guard = runtime.enter();
            listener(&runtime)?
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let stats = Arc::new(NetStats::default());
        let spread: Vec<tokio::runtime::Handle> =
            more.iter().map(|rt| rt.handle().clone()).collect();
        let serving = stats.clone();
        let task = runtime.spawn(async move {
            serve_with_stats(listener, engine, config, serving, &spread, async move {
                let _ = stopped.await;
            })
            .await
        });
        Ok(Server {
            runtime: Some(runtime),
            more,
            drivers,
            halt,
            local_addr,
            unix_path,
            stop: Some(stop),
            task: Some(task),
            stats,
            stopped: AtomicBool::new(false),
        })
    }

    /// The address the server listens on (for a Unix-socket server, the unspecified address
    /// 0.0.0.0:0: see [`Server::unix_path`]).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The path of the Unix-domain socket the server listens on, if it is one.
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        self.unix_path.as_deref()
    }

    /// The network counters.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Blocks until the process receives Ctrl-C or SIGTERM.
    pub fn wait_for_signal(&self) -> Result<(), NetError> {
        self.wait_for_signal_after(|| {})
    }

    /// Installs the SIGINT and SIGTERM handlers, calls `ready` (say "listening" there: a signal
    /// sent as soon as that is seen must stop the server cleanly, not kill it), then waits for
    /// a signal.
    pub fn wait_for_signal_after(&self, ready: impl FnOnce()) -> Result<(), NetError> {
        match &self.runtime {
            Some(rt) => rt
                .block_on(async {
                    let signal = ShutdownSignal::register()?;
                    ready();
                    signal.wait().await
                })
                .map_err(NetError::Signal),
            None => {
                ready();
                Ok(())
            }
        }
    }

    /// Shuts down gracefully: stops accepting, finishes the requests in flight, closes every
    /// connection, and stops the runtime.
    pub fn shutdown(mut self) -> Result<(), NetError> {
        self.stop_now()
    }

    fn stop_now(&mut self) -> Result<(), NetError> {
        if self.stopped.swap(true, Relaxed) {
            return Ok(());
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let mut result = Ok(());
        if let (Some(rt), Some(task)) = (&self.runtime, self.task.take()) {
            result = rt.block_on(task).map_err(|e| NetError::Task(e.to_string()));
        }
        if let Some(halt) = self.halt.take() {
            let _ = halt.send(true);
        }
        for driver in self.drivers.drain(..) {
            if driver.join().is_err() {
                result = Err(NetError::Task("a server thread panicked".into()));
            }
        }
        // Every connection task has ended; only blocking reads may remain.
        for rt in self.runtime.take().into_iter().chain(self.more.drain(..)) {
            if let Ok(rt) = Arc::try_unwrap(rt) {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(idle_timeout: Duration, owed: Arc<AtomicUsize>) -> ReaderCtx {
        ReaderCtx {
            cfg: Arc::new(NetConfig { idle_timeout, ..NetConfig::default() }),
            budget: Arc::new(Budget {
                pool: Arc::new(Semaphore::new(1 << 20)),
                reserve: Arc::new(Semaphore::new(1)),
            }),
            stats: Arc::new(NetStats::default()),
            max_frame: Arc::new(AtomicUsize::new(PRE_HELLO_FRAME_BYTES_MAX)),
            opened: Arc::new(AtomicBool::new(false)),
            owed,
        }
    }

    /// Time is tokio's paused clock: it jumps to the next timer when every task waits.
    #[tokio::test(start_paused = true)]
    async fn a_connection_waiting_for_a_reply_is_not_idle() {
        let (_client, server) = tokio::io::duplex(64);
        let mut r = tokio::io::BufReader::new(server);
        let owed = Arc::new(AtomicUsize::new(1));
        let ctx = ctx(Duration::from_secs(1), owed.clone());
        let start = tokio::time::Instant::now();
        // The reply (a long backup, say) goes out after an hour; only then does the idle
        // timeout run.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            owed.store(0, Relaxed);
        });
        assert!(matches!(read_frame(&mut r, &ctx).await, Read::Idle));
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(3600), "{waited:?}");
        assert!(waited <= Duration::from_secs(3602), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_owed_nothing_times_out_when_idle() {
        let (_client, server) = tokio::io::duplex(64);
        let mut r = tokio::io::BufReader::new(server);
        let ctx = ctx(Duration::from_secs(1), Arc::new(AtomicUsize::new(0)));
        let start = tokio::time::Instant::now();
        assert!(matches!(read_frame(&mut r, &ctx).await, Read::Idle));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
