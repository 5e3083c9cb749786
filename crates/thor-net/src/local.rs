//! The in-process transport: a client session with an embedded server in the same process.
//!
//! No socket, no encoding and no extra thread: `send` steps the server's core on the caller's
//! thread (and performs any disk read it needs right there), and the reply waits in this
//! session's queue until `recv`. A commit's reply arrives once the engine's log writer made it
//! durable, so `recv` may wait for it (ticking an engine without its installer thread at its
//! deadlines meanwhile, see [`Engine::caller_tick_wait`]). It is what `thor demo` and embedded experiments use, and
//! the baseline the TCP transport's overhead is measured against.
//!
//! It enforces what a TCP connection would: requests over a protocol limit or the server's
//! frame size are refused ([`thor_wire::Request::frame_bytes`] computes the size without
//! encoding), the session counts against the server's connection limit, and after a reply that
//! closes the session every call fails as on a closed socket.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use thor_server::{ConnId, Engine, ReplySink};
use thor_wire::limits::IN_FLIGHT_MAX;
use thor_wire::{
    ErrorCode, Reply, ReplyBody, Request, ServerInfo, Transport, TransportError, WireError,
};

use crate::client::{ClientConfig, hello, hello_outcome};

/// Replies waiting for `recv`, oldest first (at most `IN_FLIGHT_MAX` plus a final error).
#[derive(Debug, Default)]
struct Inbox {
    /// (request id, reply, close after it).
    replies: Mutex<VecDeque<(u64, Reply, bool)>>,
    /// Signalled when a reply arrives.
    arrived: Condvar,
}

impl ReplySink for Inbox {
    fn deliver(&self, id: u64, reply: Reply, close: bool) {
        self.replies.lock().push_back((id, reply, close));
        self.arrived.notify_one();
    }
}

impl Inbox {
    /// The next reply. An engine without its installer thread is ticked from here at its
    /// deadlines ([`Engine::caller_tick_wait`]): a commit held back for a claim of a session
    /// this same thread drives (fair retries) is released by that tick at the end of its
    /// bounded wait, where nothing else would step the engine.
    fn wait(&self, engine: &Engine) -> (u64, Reply, bool) {
        loop {
            // The reply is usually there already (the request's step delivered it): take it
            // without asking the engine anything.
            if let Some(r) = self.replies.lock().pop_front() {
                return r;
            }
            // Read before the inbox's lock: a step holds the engine's lock while it delivers.
            let wait = engine.caller_tick_wait();
            let mut q = self.replies.lock();
            if let Some(r) = q.pop_front() {
                return r;
            }
            match wait {
                None => self.arrived.wait(&mut q),
                Some(d) => {
                    if self.arrived.wait_for(&mut q, d).timed_out() && q.is_empty() {
                        drop(q);
                        engine.tick_if_due();
                    }
                }
            }
        }
    }
}

/// A session with an engine in the same process.
#[derive(Debug)]
pub struct LocalTransport {
    /// The server.
    engine: Arc<Engine>,
    /// The core's name for this session's connection.
    conn: ConnId,
    /// Where the core puts this session's replies.
    inbox: Arc<Inbox>,
    /// What the server said in `HelloOk`.
    info: ServerInfo,
    /// The next request id.
    next_id: u64,
    /// Requests sent and not yet received.
    in_flight: usize,
    /// Set once the server closed the session: further sends fail as on a closed socket.
    closed: bool,
}

fn refused(reply: Reply) -> TransportError {
    match reply.body {
        ReplyBody::Error { code, message } => TransportError::Refused { code, message },
        other => TransportError::Unexpected(other.name().to_owned()),
    }
}

impl LocalTransport {
    /// Opens a session with `engine` (`Hello` with `config`'s token and name; the timeouts do
    /// not apply). Fails with [`TransportError::Refused`] as a TCP connection would.
    pub fn connect(
        engine: Arc<Engine>,
        config: &ClientConfig,
    ) -> Result<LocalTransport, TransportError> {
        let inbox = Arc::new(Inbox::default());
        let conn = engine.connect(inbox.clone());
        if let Some((_, reply, true)) = inbox.replies.lock().pop_front() {
            engine.disconnect(conn);
            return Err(refused(reply));
        }
        let work = engine.request(conn, 1, hello(config));
        engine.settle(work);
        let (_, reply, close) = inbox.wait(&engine);
        if close {
            engine.disconnect(conn);
        }
        let info = hello_outcome(reply)?;
        Ok(LocalTransport { engine, conn, inbox, info, next_id: 2, in_flight: 0, closed: false })
    }

    /// The engine this transport talks to.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// What a TCP connection would refuse before sending: a closed session, too many requests
    /// in flight, a request over a limit or the server's frame size.
    fn check(&self, req: &Request) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        if self.in_flight >= IN_FLIGHT_MAX {
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
        Ok(())
    }

    /// Steps the engine with `req` (checked) on this thread.
    fn hand_over(&mut self, req: Request) {
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight += 1;
        let work = self.engine.request(self.conn, id, req);
        self.engine.settle(work);
    }
}

impl Transport for LocalTransport {
    fn server(&self) -> &ServerInfo {
        &self.info
    }

    fn in_process(&self) -> bool {
        true
    }

    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        self.check(req)?;
        self.hand_over(req.clone());
        Ok(())
    }

    fn send_owned(&mut self, req: Request) -> Result<(), Box<(TransportError, Request)>> {
        if let Err(e) = self.check(&req) {
            return Err(Box::new((e, req)));
        }
        self.hand_over(req);
        Ok(())
    }

    fn recv(&mut self) -> Result<Reply, TransportError> {
        if self.in_flight == 0 {
            return Err(TransportError::NothingInFlight);
        }
        let (_, reply, close) = self.inbox.wait(&self.engine);
        self.in_flight -= 1;
        if close {
            self.closed = true;
            if let ReplyBody::Error { code: ErrorCode::ShuttingDown, .. } = reply.body {
                return Err(refused(reply));
            }
        }
        Ok(reply)
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        self.engine.disconnect(self.conn);
    }
}
