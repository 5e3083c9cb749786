//! The synchronous TCP client transport.
//!
//! One blocking `std::net::TcpStream` per session: the client library is synchronous, and a
//! blocking socket read is the lowest-latency way for one thread to wait for one reply.
//! `TCP_NODELAY` is set because every request is one small write that the server must see at
//! once (Nagle's algorithm would hold it back waiting for the previous reply's ack). A request
//! is encoded into one buffer and written with one system call; replies are read through a
//! buffer, and a `Page` reply's bytes are a zero-copy slice of the frame read.
//!
//! [`TcpTransport::connect`] performs the `Hello` handshake, so a `TcpTransport` is always an
//! open session.
//!
//! # Timeouts
//!
//! Nothing waits for ever by default. Connecting and the handshake together take at most
//! [`ClientConfig::connect_timeout`] (a server that accepts the connection and never answers
//! `Hello`, or one that is stopped, fails the connect in that time); each reply then waits at
//! most [`ClientConfig::io_timeout`], which a session changes per request with
//! [`Transport::set_timeout`] (a commit may wait for an fsync and a queue, a fetch should
//! not). A timeout is [`TransportError::TimedOut`] and breaks the transport: the late reply
//! would answer the wrong request.
//!
//! [`UnixTransport`] is the same transport over a Unix-domain stream socket (a server started
//! with `thor server --listen unix:PATH`): for a client on the server's machine it skips TCP's
//! loopback path (segmentation, checksums, acknowledgements), which the floor measurement in
//! `thor oo7 penalty` puts at a few microseconds of each round trip here. Both are
//! [`StreamTransport`], generic over the socket.
//!
//! [`TlsTransport`] is the same transport inside a TLS stream over TCP
//! (`rustls::StreamOwned`, blocking like the socket under it), for a server started with
//! `--tls-cert` (see [`crate::tls`]). [`TlsTransport::connect`] completes the TLS handshake
//! before `Hello`, so a server whose certificate the client does not trust is refused before
//! the token is sent.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use thor_wire::limits::{FRAME_BYTES_MAX, IN_FLIGHT_MAX};
use thor_wire::{
    Frame, Hello, Reply, ReplyBody, Request, RequestBody, ServerInfo, Transport, TransportError,
    WireError, frame_size,
};

use crate::limits::{
    CONNECT_TIMEOUT_DEFAULT, FRAME_BUFFER_INITIAL_BYTES, IO_TIMEOUT_DEFAULT, READ_BUFFER_BYTES,
};

/// Settings of a client connection, for every transport.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The secret the server expects in `Hello` (empty when it has none).
    pub token: Vec<u8>,
    /// A name for the server's logs.
    pub client_name: String,
    /// How long connecting and the `Hello` handshake may take together (a Unix-domain
    /// connect does not wait on a network: there it bounds the handshake).
    pub connect_timeout: Duration,
    /// How long waiting for one reply (or writing one request) may take before the transport
    /// fails with [`TransportError::TimedOut`]; `None` waits for ever. The default,
    /// [`IO_TIMEOUT_DEFAULT`], is generous for a commit, which waits for the server's fsync;
    /// a session sets its own per request ([`Transport::set_timeout`]).
    pub io_timeout: Option<Duration>,
    /// The largest reply frame accepted; a larger one fails the transport.
    pub max_frame_bytes: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: Vec::new(),
            client_name: format!("thor-client/{}", std::process::id()),
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            io_timeout: Some(IO_TIMEOUT_DEFAULT),
            max_frame_bytes: FRAME_BYTES_MAX,
        }
    }
}

/// The `Hello` for `config`.
pub(crate) fn hello(config: &ClientConfig) -> Request {
    Request::new(RequestBody::Hello(Hello::new(
        Bytes::copy_from_slice(&config.token),
        config.client_name.clone(),
    )))
}

/// Interprets the reply to `Hello`.
pub(crate) fn hello_outcome(reply: Reply) -> Result<ServerInfo, TransportError> {
    match reply.body {
        ReplyBody::HelloOk(info) => Ok(info),
        ReplyBody::Error { code, message } => Err(TransportError::Refused { code, message }),
        other => Err(TransportError::Unexpected(format!("{} in answer to Hello", other.name()))),
    }
}

/// A blocking TCP connection to a thor server, with an open session.
pub type TcpTransport = StreamTransport<TcpStream>;

/// A blocking Unix-domain socket connection to a thor server on this machine, with an open
/// session.
#[cfg(unix)]
pub type UnixTransport = StreamTransport<UnixStream>;

/// A TLS stream over a blocking TCP socket.
pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A blocking TLS connection to a thor server (`thor server --tls-cert ...`), with an open
/// session.
pub type TlsTransport = StreamTransport<TlsStream>;

/// A blocking stream-socket connection to a thor server, with an open session: TCP
/// ([`TcpTransport`]) or a Unix-domain socket ([`UnixTransport`]).
#[derive(Debug)]
pub struct StreamTransport<S> {
    /// The socket with a read buffer; writes go to the socket directly.
    stream: BufReader<S>,
    /// What the server said in `HelloOk`.
    info: ServerInfo,
    /// The id of the next request (ids start at 1: 0 marks errors that answer no request).
    next_id: u64,
    /// Ids of the requests sent and not yet answered, oldest first.
    in_flight: VecDeque<u64>,
    /// Set after an error that leaves the stream in an unknown state.
    broken: bool,
    /// The socket's read and write timeout now (`None`: none), changed only when a caller asks
    /// for another one, so that a request costs no extra system call.
    timeout: Option<Duration>,
    /// The largest reply frame accepted.
    max_reply_bytes: usize,
    /// The largest request frame the server accepts (from `HelloOk`).
    max_request_bytes: usize,
    /// Reused encoding buffer.
    out: Vec<u8>,
}

/// Whether an I/O error is a socket timeout (`SO_RCVTIMEO` / `SO_SNDTIMEO` expired).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// The transport error for an I/O error while waiting for `what`: a timeout of `after` is
/// [`TransportError::TimedOut`], anything else [`TransportError::Io`].
fn io_error(e: std::io::Error, what: &'static str, after: Option<Duration>) -> TransportError {
    match after {
        Some(after) if is_timeout(&e) => TransportError::TimedOut { what, after },
        _ => TransportError::Io(e),
    }
}

/// Reads one reply frame. A clean end of stream between frames is [`TransportError::Closed`];
/// a socket timeout (of `timeout`, the socket's setting) is [`TransportError::TimedOut`].
fn read_reply<S: Read>(
    r: &mut BufReader<S>,
    max_frame_bytes: usize,
    what: &'static str,
    timeout: Option<Duration>,
) -> Result<(u64, Reply), TransportError> {
    match read_reply_inner(r, max_frame_bytes) {
        Err(TransportError::Io(e)) => Err(io_error(e, what, timeout)),
        other => other,
    }
}

fn read_reply_inner<S: Read>(
    r: &mut BufReader<S>,
    max_frame_bytes: usize,
) -> Result<(u64, Reply), TransportError> {
    if r.fill_buf()?.is_empty() {
        return Err(TransportError::Closed);
    }
    let mut prefix = [0u8; 4];
    r.read_exact(&mut prefix).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => {
            TransportError::BadReply(WireError::TruncatedFrame { got: 0, len: 4 })
        }
        _ => TransportError::Io(e),
    })?;
    let size = frame_size(prefix, max_frame_bytes).map_err(TransportError::BadReply)?;
    let mut buf = Vec::with_capacity(size.min(FRAME_BUFFER_INITIAL_BYTES));
    buf.extend_from_slice(&prefix);
    // The first bytes into the initial buffer; once they have all arrived the peer is sending
    // the frame it announced, and the rest goes into room reserved for it at once. Growing
    // the buffer by doubling as bytes arrive copied a 33-page prefetch reply (270 KB) five
    // times over.
    let first = (size - 4).min(FRAME_BUFFER_INITIAL_BYTES - 4);
    r.take(first as u64).read_to_end(&mut buf)?;
    if buf.len() == 4 + first && buf.len() < size {
        buf.reserve_exact(size - buf.len());
        r.take((size - buf.len()) as u64).read_to_end(&mut buf)?;
    }
    if buf.len() < size {
        return Err(TransportError::BadReply(WireError::TruncatedFrame {
            got: buf.len(),
            len: size,
        }));
    }
    let frame =
        Frame::parse(Bytes::from(buf), max_frame_bytes).map_err(TransportError::BadReply)?;
    let reply = Reply::decode(&frame).map_err(TransportError::BadReply)?;
    Ok((frame.id, reply))
}

impl StreamTransport<TcpStream> {
    /// Connects to the server at `addr` and opens a session (`Hello`). Fails with
    /// [`TransportError::Refused`] if the server refuses it (wrong token, no common version,
    /// too many connections).
    ///
    /// Connecting and the handshake take at most [`ClientConfig::connect_timeout`] together
    /// (per address tried); a server that accepts and never answers fails with
    /// [`TransportError::TimedOut`].
    pub fn connect(
        addr: impl ToSocketAddrs,
        config: &ClientConfig,
    ) -> Result<TcpTransport, TransportError> {
        let started = Instant::now();
        let stream = tcp_connect(addr, config)?;
        let left = config.connect_timeout.saturating_sub(started.elapsed());
        StreamTransport::open(stream, config, left)
    }

    /// The server's address.
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.get_ref().peer_addr()
    }
}

/// Opens a TCP connection to the first address of `addr` that answers within the connect
/// timeout, with the socket options every thor connection uses.
fn tcp_connect(
    addr: impl ToSocketAddrs,
    config: &ClientConfig,
) -> Result<TcpStream, TransportError> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, config.connect_timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address to connect to"))
        .into())
}

impl StreamTransport<TlsStream> {
    /// Connects to the server at `addr` (`HOST:PORT`) over TLS, checks its certificate
    /// against `tls` (its CA, and the host of `addr` or [`TlsClient::with_server_name`]'s
    /// name), then opens a session (`Hello`). Fails with [`TransportError::Io`] if the
    /// handshake fails (an untrusted certificate, a name the certificate does not hold, a
    /// client certificate the server refuses), and otherwise as [`TcpTransport::connect`].
    ///
    /// [`TlsClient::with_server_name`]: crate::tls::TlsClient::with_server_name
    pub fn connect(
        addr: &str,
        config: &ClientConfig,
        tls: &crate::tls::TlsClient,
    ) -> Result<TlsTransport, TransportError> {
        let name = tls.name_for(addr).map_err(|e| {
            TransportError::Io(std::io::Error::new(ErrorKind::InvalidInput, e.to_string()))
        })?;
        let started = Instant::now();
        let sock = tcp_connect(addr, config)?;
        // The TLS handshake and `Hello` share what is left of the connect timeout.
        let left = |started: Instant| config.connect_timeout.saturating_sub(started.elapsed());
        sock.set_timeouts(Some(left(started).max(TIMEOUT_MIN)))?;
        let conn = rustls::ClientConnection::new(tls.rustls_config(), name)
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?;
        let mut stream = rustls::StreamOwned::new(conn, sock);
        // The handshake now, so that an untrusted server fails here, clearly, and the token
        // is only ever sent encrypted to a server the client trusts.
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| io_error(e, "the TLS handshake", Some(config.connect_timeout)))?;
        }
        StreamTransport::open(stream, config, left(started))
    }

    /// The server's address.
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.get_ref().sock.peer_addr()
    }
}

#[cfg(unix)]
impl StreamTransport<UnixStream> {
    /// Connects to the server listening on the Unix-domain socket at `path` and opens a
    /// session (`Hello`); fails as [`TcpTransport::connect`] does. (Connecting to a local
    /// socket does not wait on a network, so there is no connect timeout.)
    pub fn connect(
        path: impl AsRef<std::path::Path>,
        config: &ClientConfig,
    ) -> Result<UnixTransport, TransportError> {
        let stream = UnixStream::connect(path)?;
        StreamTransport::open(stream, config, config.connect_timeout)
    }
}

/// A stream socket whose reads and writes can time out.
pub trait Socket: Read + Write + Send {
    /// Sets the read and the write timeout (`None`: none).
    fn set_timeouts(&self, timeout: Option<Duration>) -> std::io::Result<()>;
}

impl Socket for TcpStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

impl Socket for TlsStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.sock.set_timeouts(timeout)
    }
}

#[cfg(unix)]
impl Socket for UnixStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

/// The smallest socket timeout: a zero `Duration` means "none" to the socket calls, so a
/// deadline already passed waits this long instead.
const TIMEOUT_MIN: Duration = Duration::from_millis(1);

impl<S: Socket> StreamTransport<S> {
    /// Opens a session on a connected socket: sends `Hello` and reads the answer, within
    /// `handshake` (what is left of the connect timeout); then the socket waits at most
    /// [`ClientConfig::io_timeout`] per reply.
    fn open(
        stream: S,
        config: &ClientConfig,
        handshake: Duration,
    ) -> Result<StreamTransport<S>, TransportError> {
        let handshake = handshake.max(TIMEOUT_MIN);
        stream.set_timeouts(Some(handshake))?;
        let mut stream = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
        let mut out = Vec::new();
        hello(config).encode(1, FRAME_BYTES_MAX, &mut out).map_err(TransportError::BadRequest)?;
        let what = "the handshake (Hello)";
        // (`flush` sends what a TLS stream still holds; a socket has nothing to flush.)
        let w = stream.get_mut();
        w.write_all(&out)
            .and_then(|()| w.flush())
            .map_err(|e| io_error(e, what, Some(handshake)))?;
        let (id, reply) = read_reply(&mut stream, config.max_frame_bytes, what, Some(handshake))?;
        let info = hello_outcome(reply)?;
        if id != 1 {
            return Err(TransportError::Unexpected(format!("HelloOk with request id {id}")));
        }
        let timeout = config.io_timeout.map(|t| t.max(TIMEOUT_MIN));
        stream.get_ref().set_timeouts(timeout)?;
        Ok(StreamTransport {
            stream,
            info,
            next_id: 2,
            in_flight: VecDeque::new(),
            broken: false,
            timeout,
            max_reply_bytes: config.max_frame_bytes,
            max_request_bytes: info.max_frame_bytes,
            out,
        })
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn fail<T>(&mut self, e: TransportError) -> Result<T, TransportError> {
        self.broken = true;
        Err(e)
    }
}

impl<S: Socket> Transport for StreamTransport<S> {
    fn server(&self) -> &ServerInfo {
        &self.info
    }

    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        if self.broken {
            return Err(TransportError::Broken);
        }
        if self.in_flight.len() >= IN_FLIGHT_MAX {
            return Err(TransportError::TooManyInFlight { max: IN_FLIGHT_MAX });
        }
        let id = self.next_id;
        self.out.clear();
        req.encode(id, self.max_request_bytes, &mut self.out)
            .map_err(TransportError::BadRequest)?;
        // (`flush` sends what a TLS stream still holds; a socket has nothing to flush.)
        let w = self.stream.get_mut();
        if let Err(e) = w.write_all(&self.out).and_then(|()| w.flush()) {
            return self.fail(io_error(e, "a request to be taken", self.timeout));
        }
        self.next_id += 1;
        self.in_flight.push_back(id);
        Ok(())
    }

    fn recv(&mut self) -> Result<Reply, TransportError> {
        if self.broken {
            return Err(TransportError::Broken);
        }
        let Some(&expected) = self.in_flight.front() else {
            return Err(TransportError::NothingInFlight);
        };
        let (id, reply) =
            match read_reply(&mut self.stream, self.max_reply_bytes, "a reply", self.timeout) {
                Ok(r) => r,
                Err(e) => return self.fail(e),
            };
        if id == expected {
            self.in_flight.pop_front();
            if let ReplyBody::Error { code, .. } = &reply.body
                && code.closes_connection()
            {
                self.broken = true;
            }
            return Ok(reply);
        }
        if id == 0 && matches!(reply.body, ReplyBody::Error { .. }) {
            // An error that answers no request (timeout, shutdown, bad frame): the server is
            // closing the connection and the requests in flight are lost.
            self.broken = true;
            self.in_flight.clear();
            return Ok(reply);
        }
        self.fail(TransportError::Unexpected(format!(
            "reply with request id {id}, expected {expected}"
        )))
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) {
        let timeout = timeout.map(|t| t.max(TIMEOUT_MIN));
        if timeout == self.timeout || self.broken {
            return;
        }
        if self.stream.get_ref().set_timeouts(timeout).is_err() {
            // The socket is gone: the next call reports it.
            self.broken = true;
            return;
        }
        self.timeout = timeout;
    }
}
