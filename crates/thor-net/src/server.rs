//! The TCP server: tokio around the server core's embedded driver ([`thor_server::Engine`]).
//!
//! ```text
//!  accept loop ──► engine.connect(sink) ──► connection task (one per connection)
//!                                              │
//!   frame reader task ── read, check, decode ──┤ frames (a channel of one)
//!   (idle and frame timeouts, size limits,     │
//!    server-wide in-flight bytes)              ▼
//!                          connection task:  select {
//!                              shutdown,
//!                              a reply from the core (its sink)  ── write it (close after it?)
//!                              a frame ── engine.request(conn, id, req) ── work (disk reads)
//!                                         on the blocking pool
//!                          }
//! ```
//!
//! The core answers through the connection's sink, now (a page-cache hit) or later (a commit,
//! once the log's fsync made it durable; a fetch that read the disk). It keeps each
//! connection's replies in request order and holds back a connection's later requests while
//! one is deferred, so the connection task only moves frames.
//!
//! # Limits
//!
//! - *Connections:* the core's session limit. A connection beyond it gets `Error(Busy)` with
//!   request id 0 and is closed.
//! - *Frames:* before its session is open (`HelloOk` sent), a connection may send frames of at
//!   most [`PRE_HELLO_FRAME_BYTES_MAX`]; after, the core's maximum frame size. The length word
//!   is checked before anything else is read; an oversized frame gets `Error(FrameTooLarge)`
//!   unread. A frame's buffer grows with the bytes that arrive, not with the length announced.
//! - *Memory across connections:* a frame's bytes count against [`NetConfig::in_flight_bytes_max`]
//!   from the moment its length is known until the request (and every slice of it the core
//!   keeps, such as a commit waiting in the commit queue) is dropped. A connection whose frame
//!   does not fit waits (its frame timeout has not started) until others' frames are done.
//! - *Time:* a connection with no request for [`NetConfig::idle_timeout`] gets `Error(Timeout)`
//!   and is closed, unless it is waiting for a reply (a backup, or a commit behind one, may
//!   take longer than the idle timeout; the client is not idle, the server is busy); so does one whose frame takes longer than [`NetConfig::frame_timeout`] to
//!   arrive once started (slowloris), or that does not read a reply within
//!   [`NetConfig::write_timeout`].
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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use thor_server::limits::PRE_HELLO_FRAME_BYTES_MAX;
use thor_server::{ConnId, Engine, ReplySink};
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{ErrorCode, Frame, Reply, ReplyBody, Request, WireError, frame_size};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tracing::{debug, info, warn};

use crate::error::NetError;
use crate::limits::{
    ACCEPT_ERROR_PAUSE, CLOSE_LINGER, CLOSE_LINGER_BYTES_MAX, FRAME_BUFFER_INITIAL_BYTES,
    FRAME_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT, IN_FLIGHT_BYTES_MAX_DEFAULT, READ_BUFFER_BYTES,
    REPLY_BUFFER_KEEP_BYTES, WRITE_TIMEOUT_DEFAULT,
};

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
    /// Worker threads of the runtime [`Server::start`] builds; 0 means one per core.
    pub worker_threads: usize,
    /// Most bytes of received frames held at once across all connections (see the module
    /// documentation). At least the core's maximum frame size, so that every frame fits.
    pub in_flight_bytes_max: usize,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            frame_timeout: FRAME_TIMEOUT_DEFAULT,
            write_timeout: WRITE_TIMEOUT_DEFAULT,
            worker_threads: 0,
            in_flight_bytes_max: IN_FLIGHT_BYTES_MAX_DEFAULT,
        }
    }
}

/// Counters of the network server.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Frame bytes held now (received, not yet dropped).
    pub in_flight_bytes: AtomicUsize,
    /// The most frame bytes ever held at once.
    pub in_flight_bytes_peak: AtomicUsize,
    /// Frames that waited for room under the in-flight bound.
    pub frames_waited: AtomicU64,
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

/// A received frame's buffer together with its share of the server-wide in-flight bound: the
/// share is given back when the last slice of the frame is dropped.
struct Held {
    /// The frame.
    buf: Vec<u8>,
    /// Its permits under the bound.
    _permit: OwnedSemaphorePermit,
    /// Counters to update when it goes.
    stats: Arc<NetStats>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stats.in_flight_bytes.fetch_sub(self.buf.len(), Relaxed);
    }
}

/// What the frame reader needs.
struct ReaderCtx {
    /// Settings.
    cfg: Arc<NetConfig>,
    /// The server-wide bound on frame bytes held.
    budget: Arc<Semaphore>,
    /// Counters.
    stats: Arc<NetStats>,
    /// The frame limit now: [`PRE_HELLO_FRAME_BYTES_MAX`] until the session opens.
    max_frame: Arc<AtomicUsize>,
    /// Requests of this connection handed to the core and not answered yet: while there are
    /// any, the connection is not idle.
    owed: Arc<AtomicUsize>,
}

/// Reads the rest of a frame whose first byte has arrived.
async fn read_rest<R: AsyncBufRead + Unpin>(r: &mut R, ctx: &ReaderCtx) -> Read {
    let mut prefix = [0u8; 4];
    let read_prefix = async {
        let mut got = 0;
        while got < prefix.len() {
            match r.read(&mut prefix[got..]).await {
                Ok(0) => return Err(Read::Bad(WireError::TruncatedFrame { got, len: 4 })),
                Ok(n) => got += n,
                Err(e) => return Err(Read::Io(e)),
            }
        }
        Ok(())
    };
    match timeout(ctx.cfg.frame_timeout, read_prefix).await {
        Err(_) => return Read::Slow,
        Ok(Err(read)) => return read,
        Ok(Ok(())) => {}
    }
    let size = match frame_size(prefix, ctx.max_frame.load(Relaxed)) {
        Ok(s) => s,
        Err(e) => return Read::Bad(e),
    };
    // Room under the server-wide bound before the frame's bytes are read. The frame timeout
    // does not run meanwhile: waiting here is the server's doing, not the client's.
    let permit = match ctx.budget.clone().try_acquire_many_owned(size as u32) {
        Ok(p) => p,
        Err(_) => {
            ctx.stats.frames_waited.fetch_add(1, Relaxed);
            match ctx.budget.clone().acquire_many_owned(size as u32).await {
                Ok(p) => p,
                Err(_) => return Read::Eof,
            }
        }
    };
    let now = ctx.stats.in_flight_bytes.fetch_add(size, Relaxed) + size;
    ctx.stats.in_flight_bytes_peak.fetch_max(now, Relaxed);
    let mut buf = Vec::with_capacity(size.min(FRAME_BUFFER_INITIAL_BYTES));
    buf.extend_from_slice(&prefix);
    let held = |buf: Vec<u8>, permit| {
        // `size` bytes are counted; the buffer holds at most that many.
        let extra = size - buf.len();
        ctx.stats.in_flight_bytes.fetch_sub(extra, Relaxed);
        Held { buf, _permit: permit, stats: ctx.stats.clone() }
    };
    // `take` + `read_to_end` grows the buffer as bytes arrive, never to the announced size
    // ahead of them.
    let mut body = (&mut *r).take((size - prefix.len()) as u64);
    match timeout(ctx.cfg.frame_timeout, body.read_to_end(&mut buf)).await {
        Err(_) => {
            drop(held(buf, permit));
            Read::Slow
        }
        Ok(Err(e)) => {
            drop(held(buf, permit));
            Read::Io(e)
        }
        Ok(Ok(_)) if buf.len() < size => {
            let got = buf.len();
            drop(held(buf, permit));
            Read::Bad(WireError::TruncatedFrame { got, len: size })
        }
        Ok(Ok(_)) => Read::Frame(Bytes::from_owner(held(buf, permit))),
    }
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

/// The frame reader of one connection: reads frames one after the other and hands each to the
/// connection task (a channel of one, so it reads ahead by at most one frame).
async fn frame_reader(mut r: BufReader<OwnedReadHalf>, ctx: ReaderCtx, tx: mpsc::Sender<Read>) {
    loop {
        let read = read_frame(&mut r, &ctx).await;
        let last = !matches!(read, Read::Frame(_));
        if tx.send(read).await.is_err() || last {
            return;
        }
    }
}

/// The sink of a TCP connection: replies queue for its task (see [`ReplySink`] for the bound).
struct TcpSink(mpsc::UnboundedSender<(u64, Reply, bool)>);

impl ReplySink for TcpSink {
    fn deliver(&self, id: u64, reply: Reply, close: bool) {
        // The task is gone only when the connection is closed: nobody is left to answer.
        let _ = self.0.send((id, reply, close));
    }
}

/// One connection's writing side.
struct Conn {
    /// The socket's sending half.
    w: OwnedWriteHalf,
    /// The client's address, for logs.
    peer: SocketAddr,
    /// The engine.
    engine: Arc<Engine>,
    /// The core's name for this connection.
    id: ConnId,
    /// Settings.
    cfg: Arc<NetConfig>,
    /// Reused encoding buffer for replies.
    out: Vec<u8>,
}

impl Conn {
    /// Sends `reply` as the answer to request `id`. Returns false if the connection failed.
    ///
    /// Replies are bounded by the protocol's frame limit, not by the connection's (which bounds
    /// what the server accepts); every reply is smaller than the request it answers anyway,
    /// except a page, which fits the smallest frame setting.
    async fn send(&mut self, id: u64, reply: &Reply) -> bool {
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
        match timeout(self.cfg.write_timeout, self.w.write_all(&self.out)).await {
            Ok(Ok(())) => {
                self.engine.note_traffic(0, self.out.len() as u64);
                true
            }
            Ok(Err(e)) => {
                debug!(peer = %self.peer, "write failed: {e}");
                false
            }
            Err(_) => {
                debug!(peer = %self.peer, "write timed out");
                false
            }
        }
    }
}

/// Shuts down the sending side, then discards input until the client closes, for a bounded time
/// and number of bytes.
async fn linger_close(mut w: OwnedWriteHalf, r: Option<BufReader<OwnedReadHalf>>) {
    let _ = timeout(CLOSE_LINGER, async {
        if w.shutdown().await.is_err() {
            return;
        }
        if let Some(mut r) = r {
            let mut sink = tokio::io::sink();
            let _ = tokio::io::copy(&mut (&mut r).take(CLOSE_LINGER_BYTES_MAX), &mut sink).await;
        }
    })
    .await;
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
    engine: Arc<Engine>,
    cfg: Arc<NetConfig>,
    budget: Arc<Semaphore>,
    stats: Arc<NetStats>,
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<ConnShared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (rd, w) = stream.into_split();
    let (reply_tx, mut replies) = mpsc::unbounded_channel();
    let engine = shared.engine.clone();
    let id = engine.connect(Arc::new(TcpSink(reply_tx)));
    let mut conn =
        Conn { w, peer, engine: engine.clone(), id, cfg: shared.cfg.clone(), out: Vec::new() };
    let max_frame = Arc::new(AtomicUsize::new(PRE_HELLO_FRAME_BYTES_MAX));
    // Requests handed to the core and not answered yet.
    let owed = Arc::new(AtomicUsize::new(0));
    let ctx = ReaderCtx {
        cfg: shared.cfg.clone(),
        budget: shared.budget.clone(),
        stats: shared.stats.clone(),
        max_frame: max_frame.clone(),
        owed: owed.clone(),
    };
    let (frames_tx, mut frames) = mpsc::channel(1);
    let reader =
        tokio::spawn(frame_reader(BufReader::with_capacity(READ_BUFFER_BYTES, rd), ctx, frames_tx));
    let mut draining = false;
    let close = |conn: Conn, reply: Option<Reply>, reader: tokio::task::JoinHandle<()>| async move {
        let mut conn = conn;
        reader.abort();
        let sent = match reply {
            Some(r) => conn.send(0, &r).await,
            None => true,
        };
        conn.engine.disconnect(conn.id);
        if sent {
            linger_close(conn.w, None).await;
        }
    };
    loop {
        tokio::select! {
            biased;
            Some((rid, reply, close_after)) = replies.recv() => {
                if rid != 0 {
                    // Only this task changes it; the reader reads it.
                    let _ = owed.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
                }
                if matches!(reply.body, ReplyBody::HelloOk(_)) {
                    max_frame.store(conn.engine.protocol().max_frame_bytes, Relaxed);
                }
                if !conn.send(rid, &reply).await {
                    reader.abort();
                    conn.engine.disconnect(conn.id);
                    return;
                }
                if close_after {
                    return close(conn, None, reader).await;
                }
                if draining && owed.load(Relaxed) == 0 {
                    let r = Reply::error(ErrorCode::ShuttingDown, "the server is shutting down");
                    return close(conn, Some(r), reader).await;
                }
            }
            () = stopping(&mut shutdown), if !draining => {
                draining = true;
                if owed.load(Relaxed) == 0 {
                    let r = Reply::error(ErrorCode::ShuttingDown, "the server is shutting down");
                    return close(conn, Some(r), reader).await;
                }
            }
            Some(read) = frames.recv(), if !draining => {
                let bytes = match read {
                    Read::Frame(b) => b,
                    Read::Eof => {
                        reader.abort();
                        conn.engine.disconnect(conn.id);
                        return;
                    }
                    Read::Idle => {
                        let r = Reply::error(ErrorCode::Timeout, "no request within the idle timeout");
                        return close(conn, Some(r), reader).await;
                    }
                    Read::Slow => {
                        let r = Reply::error(ErrorCode::Timeout, "the frame did not arrive in time");
                        return close(conn, Some(r), reader).await;
                    }
                    Read::Bad(e) => {
                        debug!(peer = %conn.peer, "bad frame: {e}");
                        conn.engine.protocol_error(conn.id, 0, e);
                        continue;
                    }
                    Read::Io(e) => {
                        debug!(peer = %conn.peer, "read failed: {e}");
                        reader.abort();
                        conn.engine.disconnect(conn.id);
                        return;
                    }
                };
                conn.engine.note_traffic(bytes.len() as u64, 0);
                let frame = match Frame::parse(bytes, max_frame.load(Relaxed)) {
                    Ok(f) => f,
                    Err(e) => {
                        debug!(peer = %conn.peer, "bad frame: {e}");
                        conn.engine.protocol_error(conn.id, 0, e);
                        continue;
                    }
                };
                let rid = frame.id;
                let req = match Request::decode(&frame) {
                    Ok(r) => r,
                    Err(e) => {
                        debug!(peer = %conn.peer, id = rid, "malformed request: {e}");
                        conn.engine.protocol_error(conn.id, rid, e);
                        continue;
                    }
                };
                drop(frame);
                owed.fetch_add(1, Relaxed);
                let work = conn.engine.request(conn.id, rid, req);
                if !work.is_empty() {
                    let engine = conn.engine.clone();
                    tokio::task::spawn_blocking(move || engine.settle(work));
                }
            }
            else => {
                // The reader ended and no reply is pending.
                conn.engine.disconnect(conn.id);
                return;
            }
        }
    }
}

/// Serves `engine` on `listener` until `shutdown` completes, then shuts down gracefully (see
/// the module documentation) and returns once every connection is closed. Runs on the caller's
/// tokio runtime; reads of pages the page cache lacks need its blocking pool.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: NetConfig,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_stats(listener, engine, config, Arc::new(NetStats::default()), shutdown).await
}

async fn serve_with_stats(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: NetConfig,
    stats: Arc<NetStats>,
    shutdown: impl Future<Output = ()>,
) {
    let max_frame = engine.protocol().max_frame_bytes;
    let budget = config.in_flight_bytes_max.max(max_frame).min(Semaphore::MAX_PERMITS);
    let shared = Arc::new(ConnShared {
        engine,
        cfg: Arc::new(config),
        budget: Arc::new(Semaphore::new(budget)),
        stats,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    warn!("a connection task failed: {e}");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    debug!(%peer, "connection accepted");
                    tasks.spawn(connection(stream, peer, shared.clone(), stop_rx.clone()));
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
    /// The runtime the server's tasks run on.
    runtime: Option<tokio::runtime::Runtime>,
    /// The address it listens on (with the port the system chose for port 0).
    local_addr: SocketAddr,
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
    pub fn start(addr: &str, engine: Arc<Engine>, config: NetConfig) -> Result<Server, NetError> {
        let bind = |source| NetError::Bind { addr: addr.to_owned(), source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        Server::start_on(listener, engine, config)
    }

    /// [`Server::start`] on a listener the caller bound (so that a program can fail on a bad
    /// address before it opens or creates anything).
    pub fn start_on(
        listener: std::net::TcpListener,
        engine: Arc<Engine>,
        config: NetConfig,
    ) -> Result<Server, NetError> {
        let local_addr = listener
            .local_addr()
            .map_err(|source| NetError::Bind { addr: "the given listener".into(), source })?;
        let bind = |source| NetError::Bind { addr: local_addr.to_string(), source };
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all().thread_name("thor-net");
        if config.worker_threads > 0 {
            builder.worker_threads(config.worker_threads);
        }
        let runtime = builder.build().map_err(NetError::Runtime)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(listener).map_err(bind)?
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let stats = Arc::new(NetStats::default());
        let task =
            runtime.spawn(serve_with_stats(listener, engine, config, stats.clone(), async move {
                let _ = stopped.await;
            }));
        Ok(Server {
            runtime: Some(runtime),
            local_addr,
            stop: Some(stop),
            task: Some(task),
            stats,
            stopped: AtomicBool::new(false),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
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
        if let Some(rt) = self.runtime.take() {
            // Every connection task has ended; only blocking reads may remain.
            rt.shutdown_timeout(Duration::from_secs(1));
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
            budget: Arc::new(Semaphore::new(1 << 20)),
            stats: Arc::new(NetStats::default()),
            max_frame: Arc::new(AtomicUsize::new(PRE_HELLO_FRAME_BYTES_MAX)),
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
