//! The client's view of a connection to a server: the [`Transport`] trait.
//!
//! A transport carries [`Request`]s to one server and brings back its [`Reply`]s, in order. It
//! is split into [`Transport::send`] and [`Transport::recv`] so that a client can work while a
//! request is on the wire: the HAC cache frees a frame for the page it is fetching between the
//! two calls. [`Transport::round_trip`] does both.
//!
//! A transport performs the `Hello` handshake when it is made (so a value of a transport type is
//! always an open, authenticated session) and numbers requests itself; callers never see request
//! ids. Implementations live in `thor-net`: TCP (`TcpTransport`) and in-process
//! (`LocalTransport`).
//!
//! ```text
//!   client                         transport                          server
//!     │ send(Fetch p) ───────────────► frame id=7 ───────────────────────►│
//!     │ (free a cache frame)                                              │
//!     │ recv() ◄──────────────────────── frame id=7 ◄────── Page p ───────│
//! ```
//!
//! *Errors and the connection:* an `Error` reply is a reply, returned by `recv` like any other
//! (its [`crate::ErrorCode`] says whether the server closes the connection after it). A
//! [`TransportError`] means the transport itself failed; after one, every call returns
//! [`TransportError::Broken`] and the client must make a new transport.

use std::time::Duration;

use crate::code::ErrorCode;
use crate::error::WireError;
use crate::message::{Reply, Request, ServerInfo};

/// Why a transport could not carry a request or bring back its reply. Each variant says what
/// the client should do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection failed (reset, timed out, unreachable). Make a new transport; the outcome
    /// of a commit in flight is unknown, so read its objects back before retrying it.
    #[error("connection failed: {0}")]
    Io(std::io::Error),
    /// The server closed the connection. Make a new transport; as for [`TransportError::Io`],
    /// a commit in flight may or may not have happened.
    #[error("the server closed the connection")]
    Closed,
    /// The server did not answer in time: it is stopped, overloaded or unreachable (a network
    /// that drops packets). The connection is closed, since the reply may still come and would
    /// answer the wrong request. Make a new transport (a session does it by itself); a commit
    /// in flight may or may not have happened. If the server is only slow, raise the timeout
    /// (`ClientConfig`, `SessionConfig`).
    #[error(
        "the server did not answer {what} within {after:?}: it is stopped, overloaded or \
         unreachable"
    )]
    TimedOut {
        /// What was waited for: "the handshake", "a reply".
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// The server refused to open a session (wrong token, no common version, too many
    /// connections). The code says which; fix the configuration or retry later.
    #[error("the server refused the session: {code}: {message}")]
    Refused {
        /// Why, for programs.
        code: ErrorCode,
        /// Why, for humans.
        message: String,
    },
    /// The request cannot be sent: a count or size is above a protocol limit or the server's
    /// frame size. Nothing was sent; split the work (commit smaller transactions).
    #[error("request cannot be sent: {0}")]
    BadRequest(WireError),
    /// The server sent bytes that do not decode: it is not a thor server of a compatible
    /// version, or there is a bug. Make a new transport.
    #[error("malformed reply: {0}")]
    BadReply(WireError),
    /// The server answered something that is not an answer to the request (a reply id out of
    /// order, a reply type the request cannot have). Make a new transport.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    /// An earlier error left the connection in an unknown state. Make a new transport.
    #[error("the connection is broken by an earlier error")]
    Broken,
    /// As many requests as a transport allows are waiting for replies: call `recv` first.
    #[error("{max} requests already in flight; receive a reply first")]
    TooManyInFlight {
        /// The bound ([`crate::limits::IN_FLIGHT_MAX`]).
        max: usize,
    },
    /// `recv` was called with no request waiting for a reply: a bug in the caller.
    #[error("no request is waiting for a reply")]
    NothingInFlight,
}

/// A connection to one server, as the client library sees it.
///
/// Requests are answered in the order they are sent; up to [`crate::limits::IN_FLIGHT_MAX`]
/// may be in flight at once.
pub trait Transport: Send {
    /// What the server said in its `HelloOk`: page size, root, client id, frame limit.
    fn server(&self) -> &ServerInfo;

    /// Sends `req` without waiting for its reply. Fails without sending if the request is over
    /// a limit ([`TransportError::BadRequest`]) or too many requests are in flight.
    fn send(&mut self, req: &Request) -> Result<(), TransportError>;

    /// [`Transport::send`] of a request the caller gives up, so that a transport that hands
    /// requests over without encoding them (the in-process one) need not copy it: a commit's
    /// request holds every new version and the read set. On failure the request comes back
    /// with the error (its piggybacked sections are the caller's to requeue), boxed: a failed
    /// send is rare and a request is large.
    fn send_owned(&mut self, req: Request) -> Result<(), Box<(TransportError, Request)>> {
        self.send(&req).map_err(|e| Box::new((e, req)))
    }

    /// Waits for the reply to the oldest request in flight.
    fn recv(&mut self) -> Result<Reply, TransportError>;

    /// How long [`Transport::recv`] (and the writing of [`Transport::send`]) may wait from now
    /// on before failing with [`TransportError::TimedOut`] (`None`: for ever). A session sets
    /// it before each request by what the request waits for: a commit waits for the log's
    /// fsync and maybe a queue, a fetch does not. Transports without a network (the in-process
    /// one) ignore it.
    fn set_timeout(&mut self, timeout: Option<Duration>) {
        let _ = timeout;
    }

    /// Whether the server is in this process (no socket: a round trip costs about what moving
    /// a page does), so that bringing several pages per request saves little. Sessions
    /// prefetch by default only over transports for which this is false.
    fn in_process(&self) -> bool {
        false
    }

    /// Sends `req` and waits for its reply. Requests sent earlier must have been received.
    fn round_trip(&mut self, req: &Request) -> Result<Reply, TransportError> {
        self.send(req)?;
        self.recv()
    }
}

impl From<std::io::Error> for TransportError {
    fn from(e: std::io::Error) -> TransportError {
        TransportError::Io(e)
    }
}
