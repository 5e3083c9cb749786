//! The in-process transport: a client session that calls the server's handler directly.
//!
//! No socket, no encoding and no extra thread: `send` runs the request through the handler on
//! the caller's thread and keeps the reply until `recv`. It is what `thor demo` and embedded
//! experiments use, and the baseline the TCP transport's overhead is measured against.
//!
//! It enforces what a TCP connection would: requests over a protocol limit or the server's
//! frame size are refused ([`thor_wire::Request::frame_bytes`] computes the size without
//! encoding), the session counts against the server's connection limit, and after a reply that
//! closes the session every call fails as on a closed socket.

use std::collections::VecDeque;
use std::sync::Arc;

use thor_server::{Handler, HandlerError, Session};
use thor_wire::limits::IN_FLIGHT_MAX;
use thor_wire::{
    ErrorCode, Reply, ReplyBody, Request, ServerInfo, Transport, TransportError, WireError,
};

use crate::client::{ClientConfig, hello, hello_outcome};

/// A session with a handler in the same process.
#[derive(Debug)]
pub struct LocalTransport {
    /// The server's handler.
    handler: Arc<Handler>,
    /// This client's session at the handler.
    session: Session,
    /// What the server said in `HelloOk`.
    info: ServerInfo,
    /// Replies computed by `send` and not yet taken by `recv`, oldest first.
    replies: VecDeque<Reply>,
    /// Set once the handler closed the session: further sends fail as on a closed socket.
    closed: bool,
}

impl LocalTransport {
    /// Opens a session with `handler` (`Hello` with `config`'s token and name; the timeouts do
    /// not apply). Fails with [`TransportError::Refused`] as a TCP connection would.
    pub fn connect(
        handler: Arc<Handler>,
        config: &ClientConfig,
    ) -> Result<LocalTransport, TransportError> {
        let mut session = handler.open_session().map_err(|e| match e {
            HandlerError::Busy { .. } => refused(handler.busy_reply()),
            other => {
                TransportError::Refused { code: ErrorCode::Internal, message: other.to_string() }
            }
        })?;
        let response = handler.handle(&mut session, hello(config));
        let info = hello_outcome(response.reply)?;
        Ok(LocalTransport { handler, session, info, replies: VecDeque::new(), closed: false })
    }

    /// The handler this transport talks to.
    pub fn handler(&self) -> &Arc<Handler> {
        &self.handler
    }
}

fn refused(reply: Reply) -> TransportError {
    match reply.body {
        ReplyBody::Error { code, message } => TransportError::Refused { code, message },
        other => TransportError::Unexpected(other.name().to_owned()),
    }
}

impl Transport for LocalTransport {
    fn server(&self) -> &ServerInfo {
        &self.info
    }

    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        if self.replies.len() >= IN_FLIGHT_MAX {
            return Err(TransportError::TooManyInFlight { max: IN_FLIGHT_MAX });
        }
        let size = req.frame_bytes().map_err(TransportError::BadRequest)?;
        let max = self.info.max_frame_bytes;
        if size > max {
            return Err(TransportError::BadRequest(WireError::FrameTooLarge {
                len: size as u64,
                max,
            }));
        }
        let response = self.handler.handle(&mut self.session, req.clone());
        self.closed = response.close;
        self.replies.push_back(response.reply);
        Ok(())
    }

    fn recv(&mut self) -> Result<Reply, TransportError> {
        self.replies.pop_front().ok_or(TransportError::NothingInFlight)
    }
}
