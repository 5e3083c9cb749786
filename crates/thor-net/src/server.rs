//! The TCP server: tokio around the synchronous request handler.
//!
//! ```text
//!  accept loop ──► handler.open_session() ──ok──► connection task (one per connection)
//!       │                    └──busy──► refusal task: Error(Busy), close
//!       │
//!  connection task:  loop {
//!       wait for a frame's first byte      (idle timeout; shutdown ends the wait)
//!       read the rest of the frame         (frame timeout; length checked first)
//!       parse + decode                     (error → Error reply, close)
//!       handler.handle(session, request)   (Commit on a blocking thread, the rest inline)
//!       write the reply                    (write timeout)
//!  }
//! ```
//!
//! # Limits
//!
//! - *Connections:* the handler's session limit. A connection beyond it gets `Error(Busy)` with
//!   request id 0 and is closed; at most [`REFUSALS_IN_FLIGHT_MAX`] refusals are written at once,
//!   beyond that connections are dropped without a word.
//! - *Frames:* the length word is checked against the handler's maximum frame size before
//!   anything else is read; an oversized frame gets `Error(FrameTooLarge)` unread. A frame's
//!   buffer grows with the bytes that arrive, not with the length announced.
//! - *Time:* a connection with no request for [`NetConfig::idle_timeout`] gets `Error(Timeout)`
//!   and is closed; so does one whose frame takes longer than [`NetConfig::frame_timeout`] to
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
//! The handler is synchronous. A commit blocks until its log record is fsynced (a millisecond
//! or more), so commits run on tokio's blocking pool with `spawn_blocking`: group commit needs
//! concurrent commits to wait *concurrently*, one thread each, so a small dedicated pool would
//! cap the group size, while the blocking pool grows to one thread per committing session (it is
//! sized to the session limit plus [`BLOCKING_THREADS_SPARE`]). Every other request runs inline on
//! the worker: a fetch is a page-cache lookup (about a microsecond) or one page read, and handing
//! it to another thread would cost more than it does.
//!
//! # Shutdown
//!
//! Shutdown stops accepting, lets every connection finish the request it is handling and send
//! its reply, then sends `Error(ShuttingDown)` (id 0) to connections waiting for a request and
//! closes them. A frame half received when shutdown begins is dropped unanswered.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thor_server::{Handler, Session};
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{ErrorCode, Frame, Reply, Request, RequestBody, WireError, frame_size};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tracing::{debug, info, warn};

use crate::error::NetError;
use crate::limits::{
    ACCEPT_ERROR_PAUSE, BLOCKING_THREADS_SPARE, CLOSE_LINGER, CLOSE_LINGER_BYTES_MAX,
    FRAME_BUFFER_INITIAL_BYTES, FRAME_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT, READ_BUFFER_BYTES,
    REFUSALS_IN_FLIGHT_MAX, REPLY_BUFFER_KEEP_BYTES, WRITE_TIMEOUT_DEFAULT,
};

/// Settings of the network server. The connection limit and the maximum frame size are the
/// handler's (`thor_server::HandlerConfig`), so that every transport enforces the same ones.
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
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            frame_timeout: FRAME_TIMEOUT_DEFAULT,
            write_timeout: WRITE_TIMEOUT_DEFAULT,
            worker_threads: 0,
        }
    }
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

/// Reads the rest of a frame whose first byte has arrived.
async fn read_rest<R: AsyncBufRead + Unpin>(r: &mut R, max_frame_bytes: usize) -> Read {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        match r.read(&mut prefix[got..]).await {
            Ok(0) => return Read::Bad(WireError::TruncatedFrame { got, len: prefix.len() }),
            Ok(n) => got += n,
            Err(e) => return Read::Io(e),
        }
    }
    let size = match frame_size(prefix, max_frame_bytes) {
        Ok(s) => s,
        Err(e) => return Read::Bad(e),
    };
    let mut buf = Vec::with_capacity(size.min(FRAME_BUFFER_INITIAL_BYTES));
    buf.extend_from_slice(&prefix);
    // `take` + `read_to_end` grows the buffer as bytes arrive, never to the announced size
    // ahead of them.
    if let Err(e) = (&mut *r).take((size - prefix.len()) as u64).read_to_end(&mut buf).await {
        return Read::Io(e);
    }
    if buf.len() < size {
        return Read::Bad(WireError::TruncatedFrame { got: buf.len(), len: size });
    }
    Read::Frame(Bytes::from(buf))
}

/// Waits for the next frame under the idle timeout, then reads it under the frame timeout.
async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R, max: usize, cfg: &NetConfig) -> Read {
    match timeout(cfg.idle_timeout, r.fill_buf()).await {
        Err(_) => return Read::Idle,
        Ok(Err(e)) => return Read::Io(e),
        Ok(Ok([])) => return Read::Eof,
        Ok(Ok(_)) => {}
    }
    match timeout(cfg.frame_timeout, read_rest(r, max)).await {
        Err(_) => Read::Slow,
        Ok(read) => read,
    }
}

/// One connection's state in its task.
struct Conn {
    /// The socket, with a read buffer (writes go straight through).
    stream: BufReader<TcpStream>,
    /// The client's address, for logs.
    peer: SocketAddr,
    /// The handler shared by all connections.
    handler: Arc<Handler>,
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
        let sock = self.stream.get_mut();
        match timeout(self.cfg.write_timeout, sock.write_all(&self.out)).await {
            Ok(Ok(())) => {
                self.handler.note_traffic(0, self.out.len() as u64);
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

    /// Sends a final reply (if any), then closes with a linger (see the module documentation).
    async fn close_with(mut self, id: u64, reply: Option<Reply>) {
        if let Some(r) = reply
            && !self.send(id, &r).await
        {
            return;
        }
        linger_close(self.stream).await;
    }
}

/// Shuts down the sending side, then discards input until the client closes, for a bounded time
/// and number of bytes.
async fn linger_close<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) {
    let _ = timeout(CLOSE_LINGER, async {
        if stream.shutdown().await.is_err() {
            return;
        }
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut (&mut stream).take(CLOSE_LINGER_BYTES_MAX), &mut sink).await;
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

async fn connection(mut conn: Conn, mut session: Session, mut shutdown: watch::Receiver<bool>) {
    let max = conn.handler.max_frame_bytes();
    loop {
        let read = tokio::select! {
            biased;
            () = stopping(&mut shutdown) => {
                let r = Reply::error(ErrorCode::ShuttingDown, "the server is shutting down");
                return conn.close_with(0, Some(r)).await;
            }
            read = read_frame(&mut conn.stream, max, &conn.cfg) => read,
        };
        let bytes = match read {
            Read::Frame(b) => b,
            Read::Eof => return,
            Read::Idle => {
                let r = Reply::error(ErrorCode::Timeout, "no request within the idle timeout");
                return conn.close_with(0, Some(r)).await;
            }
            Read::Slow => {
                let r = Reply::error(ErrorCode::Timeout, "the frame did not arrive in time");
                return conn.close_with(0, Some(r)).await;
            }
            Read::Bad(e) => {
                debug!(peer = %conn.peer, "bad frame: {e}");
                let r = conn.handler.protocol_error(Some(&mut session), &e);
                return conn.close_with(0, Some(r)).await;
            }
            Read::Io(e) => {
                debug!(peer = %conn.peer, "read failed: {e}");
                return;
            }
        };
        conn.handler.note_traffic(bytes.len() as u64, 0);
        let frame = match Frame::parse(bytes, max) {
            Ok(f) => f,
            Err(e) => {
                debug!(peer = %conn.peer, "bad frame: {e}");
                let r = conn.handler.protocol_error(Some(&mut session), &e);
                return conn.close_with(0, Some(r)).await;
            }
        };
        let id = frame.id;
        let req = match Request::decode(&frame) {
            Ok(r) => r,
            Err(e) => {
                debug!(peer = %conn.peer, id, "malformed request: {e}");
                let r = conn.handler.protocol_error(Some(&mut session), &e);
                return conn.close_with(id, Some(r)).await;
            }
        };
        let response = if matches!(req.body, RequestBody::Commit(_)) {
            let handler = conn.handler.clone();
            let job = tokio::task::spawn_blocking(move || {
                let response = handler.handle(&mut session, req);
                (session, response)
            });
            match job.await {
                Ok((s, response)) => {
                    session = s;
                    response
                }
                Err(e) => {
                    warn!(peer = %conn.peer, id, "the commit handler failed: {e}");
                    let r = Reply::error(ErrorCode::Internal, "the server failed on this request");
                    return conn.close_with(id, Some(r)).await;
                }
            }
        } else {
            conn.handler.handle(&mut session, req)
        };
        if response.close {
            return conn.close_with(id, Some(response.reply)).await;
        }
        if !conn.send(id, &response.reply).await {
            return;
        }
    }
}

/// Answers a connection beyond the limit with `Error(Busy)` and closes it.
async fn refuse(stream: TcpStream, reply: Reply, handler: Arc<Handler>) {
    let mut out = Vec::new();
    let mut stream = stream;
    if reply.encode(0, FRAME_BYTES_MAX, &mut out).is_ok()
        && timeout(CLOSE_LINGER, stream.write_all(&out)).await.is_ok_and(|r| r.is_ok())
    {
        handler.note_traffic(0, out.len() as u64);
    }
    linger_close(stream).await;
}

/// Serves `handler` on `listener` until `shutdown` completes, then shuts down gracefully (see
/// the module documentation) and returns once every connection is closed. Runs on the caller's
/// tokio runtime; commits need its blocking pool.
pub async fn serve(
    listener: TcpListener,
    handler: Arc<Handler>,
    config: NetConfig,
    shutdown: impl Future<Output = ()>,
) {
    let cfg = Arc::new(config);
    let (stop_tx, stop_rx) = watch::channel(false);
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
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
                    match handler.open_session() {
                        Ok(session) => {
                            debug!(%peer, "connection accepted");
                            let conn = Conn {
                                stream: BufReader::with_capacity(READ_BUFFER_BYTES, stream),
                                peer,
                                handler: handler.clone(),
                                cfg: cfg.clone(),
                                out: Vec::new(),
                            };
                            tasks.spawn(connection(conn, session, stop_rx.clone()));
                        }
                        Err(e) => {
                            debug!(%peer, "connection refused: {e}");
                            if let Ok(permit) = refusals.clone().try_acquire_owned() {
                                let (reply, h) = (handler.busy_reply(), handler.clone());
                                tasks.spawn(async move {
                                    refuse(stream, reply, h).await;
                                    drop(permit);
                                });
                            }
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
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// A TCP server running on a runtime of its own: for `thor server`, tests, benchmarks and
/// embedding in synchronous programs. Dropping it shuts it down gracefully. Its methods block,
/// so call them from synchronous code, not from inside another tokio runtime.
///
/// Shutdown returns once every connection is closed: after the requests in flight are answered
/// and each closing connection has lingered (at most [`CLOSE_LINGER`], less if its client
/// closes its end).
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
}

impl Server {
    /// Starts serving `handler` on `addr` (use port 0 for any free port; see
    /// [`Server::local_addr`]).
    pub fn start(addr: &str, handler: Arc<Handler>, config: NetConfig) -> Result<Server, NetError> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .enable_all()
            .thread_name("thor-net")
            .max_blocking_threads(handler.config().sessions_max + BLOCKING_THREADS_SPARE);
        if config.worker_threads > 0 {
            builder.worker_threads(config.worker_threads);
        }
        let runtime = builder.build().map_err(NetError::Runtime)?;
        let listener = runtime
            .block_on(TcpListener::bind(addr))
            .map_err(|source| NetError::Bind { addr: addr.to_owned(), source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| NetError::Bind { addr: addr.to_owned(), source })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = runtime.spawn(serve(listener, handler, config, async move {
            let _ = stopped.await;
        }));
        Ok(Server { runtime: Some(runtime), local_addr, stop: Some(stop), task: Some(task) })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Blocks until the process receives Ctrl-C or SIGTERM.
    pub fn wait_for_signal(&self) -> Result<(), NetError> {
        match &self.runtime {
            Some(rt) => rt.block_on(shutdown_signal()).map_err(NetError::Signal),
            None => Ok(()),
        }
    }

    /// Shuts down gracefully: stops accepting, finishes the requests in flight, closes every
    /// connection, and stops the runtime.
    pub fn shutdown(mut self) -> Result<(), NetError> {
        self.stop_now()
    }

    fn stop_now(&mut self) -> Result<(), NetError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let mut result = Ok(());
        if let (Some(rt), Some(task)) = (&self.runtime, self.task.take()) {
            result = rt.block_on(task).map_err(|e| NetError::Task(e.to_string()));
        }
        if let Some(rt) = self.runtime.take() {
            // Every connection task has ended; only idle blocking threads remain.
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
