//! Sessions: the protocol state of each connection, inside the core.
//!
//! A connection the driver reports ([`crate::core::Input::Connect`]) gets a session unless as
//! many are open as allowed ([`ProtocolConfig::sessions_max`]): then it is answered
//! `Error(Busy)` and closed. A session moves through three states:
//!
//! ```text
//!              Hello (token ok, versions overlap)
//!  AwaitingHello ──────────────────────────────────► Open ──── Goodbye ────► Closed
//!        │                                            │                        ▲
//!        └── anything else, wrong token, bad version ─┴── second Hello ────────┘
//! ```
//!
//! Every reply that moves a session to `Closed` carries `close`: the driver sends it, then
//! closes the connection (and reports [`crate::core::Input::Disconnect`]). Requests that fail
//! without breaking the protocol (a fetch of a page that does not exist, a refused commit)
//! leave the session open.
//!
//! # Order
//!
//! Replies to one connection leave in request order. While a request of the connection is
//! deferred (a commit waiting for durability, a fetch waiting for a disk read), the session is
//! *busy* and later requests are *held back* in it, at most
//! [`thor_wire::limits::IN_FLIGHT_MAX`] (a client that sends more than the protocol allows
//! in flight gets `Error(UnexpectedMessage)` and is closed).
//!
//! # From engine errors to wire codes
//!
//! | engine result                          | reply                                         |
//! |----------------------------------------|-----------------------------------------------|
//! | commit `Ok`                            | `CommitOk` (only once durable)                |
//! | `Invalid(InvalidCommit::*)`            | `CommitRefused` with one `RefusedCode` each   |
//! | `Full`                                 | `CommitRefused(DatabaseFull)`                 |
//! | `BulkLoadActive`                       | `CommitRefused(RetryLater)`                   |
//! | `NoSuchPage` (fetch)                   | `Error(NoSuchPage)`, session stays open       |
//! | `CorruptPage`, `CorruptRecord`         | `Error(CorruptData)`, session stays open      |
//! | `Storage`, `Read`, `Failed`            | `Error(ServerFailed)`, session stays open     |
//! | anything else                          | `Error(Internal)`, session closed             |
//!
//! | `Conflict(Stale)`, `(TooOld)`, rules    | `CommitRefused(Stale / TooOld / Conflict)`    |
//!
//! The read set, the piggybacked acks and discarded pages, and the invalidations on replies
//! are concurrency control's ([`super::cc`]); the core hands them over.
//!
//! *Authentication* compares the token in `Hello` with the configured one in time independent
//! of where they differ; an empty configured token admits everyone.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use thor_core::{ClientId, Oref, PageId, ServerId};
use thor_wire::limits::IN_FLIGHT_MAX;
use thor_wire::{
    ErrorCode, Hello, Reply, ReplyBody, Request, RequestBody, ServerInfo, WIRE_VERSION,
    WIRE_VERSION_MIN, WireError,
};

use super::store::CommitIn;
use super::{ConnId, Effect, ProtocolConfig};

/// Where a session is in the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Only `Hello` is accepted.
    AwaitingHello,
    /// Authenticated.
    Open {
        /// The id given in `HelloOk`.
        client: ClientId,
        /// The name the client gave, for logs.
        name: String,
        /// Whether `HelloOk` invited the client to demote pages (version 2, exclusive cache).
        demotes: bool,
    },
    /// Nothing more is accepted; the connection is being closed.
    Closed,
}

/// One connection's session.
#[derive(Debug)]
struct Session {
    /// Where it is in the protocol.
    state: State,
    /// Whether a request of it is deferred (its reply not sent yet).
    busy: bool,
    /// Requests received while busy, oldest first.
    held: VecDeque<(u64, Request)>,
}

/// Counters of the sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionCounters {
    /// Sessions open now.
    pub sessions_open: u64,
    /// Sessions opened since start.
    pub sessions_opened: u64,
    /// Connections refused for the session limit.
    pub sessions_refused: u64,
    /// Requests received.
    pub requests: u64,
    /// Malformed frames and protocol violations.
    pub protocol_errors: u64,
    /// `Hello`s with a wrong token.
    pub auth_failures: u64,
    /// Invalidation acks received.
    pub acks_received: u64,
    /// Discarded-page notices received.
    pub discarded_pages_received: u64,
}

/// What `HelloOk` tells a client besides what the sessions know.
#[derive(Debug, Clone, Copy)]
pub struct InfoParts {
    /// The server's id.
    pub server_id: ServerId,
    /// Bytes per page.
    pub page_size: usize,
    /// The root object.
    pub root: Oref,
    /// Whether the page cache takes demoted pages (it is exclusive).
    pub demotions: bool,
    /// The server's commit mode.
    pub commit_mode: thor_wire::CommitMode,
}

/// What the core must do with a request the sessions admitted.
#[derive(Debug)]
pub enum Action {
    /// Answered already (or nothing to do).
    Done,
    /// Serve a fetch.
    Fetch(PageId),
    /// Serve a fetch with further pages (`super::prefetch`).
    Prefetch(thor_wire::Prefetch),
    /// Serve a commit.
    Commit(CommitIn),
    /// Answer with the counters.
    Stats,
    /// Stage page records sent before commit (`super::pagecommit`).
    PageRecords(thor_wire::PageRecords),
    /// Serve a page-based commit (`super::pagecommit`).
    PageCommit(thor_wire::PageCommit),
    /// Have the driver write a backup to this path (on the server's machine).
    Backup(String),
    /// Prepare a part of a transaction over several servers.
    Prepare(Box<thor_wire::Prepare>),
    /// A message from another server (answered `Ack` at once).
    Peer(thor_wire::PeerMsg),
    /// Resume a session on this connection (`super::resume`).
    Resume(thor_wire::Resume),
}

/// Every session of a core.
#[derive(Debug)]
pub struct Sessions {
    /// Settings.
    cfg: ProtocolConfig,
    /// Open connections.
    conns: FxHashMap<ConnId, Session>,
    /// The next client id to give out (ids start at 1; 0 is never a session's).
    next_client: u32,
    /// Counters.
    counters: SessionCounters,
}

/// Compares two byte strings in time that depends only on their lengths, so that a client
/// cannot find the token byte by byte by timing refusals.
fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    pub fn new(cfg: ProtocolConfig) -> Sessions {
        Sessions {
            cfg,
            conns: FxHashMap::default(),
            next_client: 1,
            counters: SessionCounters::default(),
        }
    }

    pub fn counters(&self) -> SessionCounters {
        SessionCounters { sessions_open: self.conns.len() as u64, ..self.counters }
    }

    /// A new connection: a session, or `Error(Busy)` and close.
    pub fn connect(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        if self.conns.len() >= self.cfg.sessions_max {
            self.counters.sessions_refused += 1;
            let max = self.cfg.sessions_max;
            let reply = Reply::error(
                ErrorCode::Busy,
                &format!("the server has its maximum of {max} connections"),
            );
            fx.push(Effect::Reply { conn, id: 0, reply, close: true });
            return;
        }
        self.counters.sessions_opened += 1;
        self.conns.insert(
            conn,
            Session { state: State::AwaitingHello, busy: false, held: VecDeque::new() },
        );
    }

    pub fn disconnect(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    /// Bytes that did not decode: the error's reply, and the session closes.
    pub fn protocol_error(&mut self, conn: ConnId, id: u64, err: &WireError, fx: &mut Vec<Effect>) {
        self.counters.protocol_errors += 1;
        if let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Closed;
            s.held.clear();
        }
        fx.push(Effect::Reply {
            conn,
            id,
            reply: Reply::error(err.code(), &err.to_string()),
            close: true,
        });
    }

    /// Counts a request and holds it back if its connection is busy. Returns true if the
    /// request was taken care of here (held back, or refused because too many are held).
    pub fn hold_back(
        &mut self,
        conn: ConnId,
        id: u64,
        req: &Request,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let Some(s) = self.conns.get_mut(&conn) else {
            // Not connected (a driver bug, or a request racing its own disconnect): nobody
            // would read the answer.
            return true;
        };
        if !s.busy {
            return false;
        }
        if s.held.len() >= IN_FLIGHT_MAX {
            self.counters.protocol_errors += 1;
            s.state = State::Closed;
            s.held.clear();
            let reply = Reply::error(
                ErrorCode::UnexpectedMessage,
                &format!("more than {IN_FLIGHT_MAX} requests in flight"),
            );
            fx.push(Effect::Reply { conn, id, reply, close: true });
            return true;
        }
        s.held.push_back((id, req.clone()));
        true
    }

    /// The next held-back request of `conn`, if it is not busy.
    pub fn next_held(&mut self, conn: ConnId) -> Option<(u64, Request)> {
        let s = self.conns.get_mut(&conn)?;
        if s.busy { None } else { s.held.pop_front() }
    }

    pub fn set_busy(&mut self, conn: ConnId) {
        if let Some(s) = self.conns.get_mut(&conn) {
            s.busy = true;
        }
    }

    pub fn is_busy(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|s| s.busy)
    }

    /// The deferred request of `conn` is answered now. Returns whether the connection is still
    /// there to receive the reply.
    pub fn deferred_answered(&mut self, conn: ConnId, close: bool) -> bool {
        let Some(s) = self.conns.get_mut(&conn) else { return false };
        if !s.busy {
            // No request of this connection is waiting: a second answer to one request would
            // break the client's reply order. (A core bug; the reply is not sent.)
            debug_assert!(false, "an answer for connection {conn}, which waits for none");
            return false;
        }
        s.busy = false;
        if close {
            s.state = State::Closed;
            s.held.clear();
        }
        true
    }

    /// Handles the protocol side of a request whose turn has come; returns what the core must
    /// do for it.
    pub fn admit(
        &mut self,
        conn: ConnId,
        id: u64,
        req: Request,
        info: InfoParts,
        fx: &mut Vec<Effect>,
    ) -> Action {
        self.counters.requests += 1;
        let Some(s) = self.conns.get(&conn) else { return Action::Done };
        let (reply, close) = match (&s.state, req.body) {
            (State::Closed, _) => {
                (Reply::error(ErrorCode::UnexpectedMessage, "the session is closed"), true)
            }
            (State::AwaitingHello, RequestBody::Hello(h)) => self.hello(conn, h, info),
            (State::AwaitingHello, body) => {
                self.counters.protocol_errors += 1;
                let msg = format!("{} before Hello", body.name());
                (Reply::error(ErrorCode::HelloRequired, &msg), true)
            }
            (State::Open { .. }, RequestBody::Hello(_)) => {
                self.counters.protocol_errors += 1;
                (Reply::error(ErrorCode::UnexpectedMessage, "a second Hello"), true)
            }
            (State::Open { .. }, RequestBody::Fetch { page }) => return Action::Fetch(page),
            (State::Open { .. }, RequestBody::Prefetch(p)) => return Action::Prefetch(p),
            (State::Open { .. }, RequestBody::Commit(commit)) => {
                return Action::Commit(CommitIn::from(commit));
            }
            (State::Open { .. }, RequestBody::PageRecords(r)) => return Action::PageRecords(r),
            (State::Open { .. }, RequestBody::PageCommit(c)) => return Action::PageCommit(c),
            (State::Open { .. }, RequestBody::Abort) => (Reply::new(ReplyBody::Ack), false),
            (State::Open { .. }, RequestBody::Stats) => return Action::Stats,
            (State::Open { .. }, RequestBody::Backup { path }) => return Action::Backup(path),
            (State::Open { .. }, RequestBody::Prepare(p)) => return Action::Prepare(p),
            (State::Open { .. }, RequestBody::Peer(m)) => return Action::Peer(m),
            (State::Open { .. }, RequestBody::Resume(r)) => return Action::Resume(r),
            (State::Open { .. }, RequestBody::Goodbye) => (Reply::new(ReplyBody::Ack), true),
        };
        if close && let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Closed;
            s.held.clear();
        }
        fx.push(Effect::Reply { conn, id, reply, close });
        Action::Done
    }

    fn hello(&mut self, conn: ConnId, h: Hello, info: InfoParts) -> (Reply, bool) {
        if !same_token(&h.token, &self.cfg.token) {
            self.counters.auth_failures += 1;
            return (Reply::error(ErrorCode::Unauthenticated, "wrong token"), true);
        }
        let lo = h.min_version.max(WIRE_VERSION_MIN);
        let hi = h.max_version.min(WIRE_VERSION);
        if lo > hi {
            let msg = format!(
                "the client speaks versions {}..={}, the server {WIRE_VERSION_MIN}..={WIRE_VERSION}",
                h.min_version, h.max_version
            );
            return (Reply::error(ErrorCode::UnsupportedVersion, &msg), true);
        }
        let client = ClientId(self.next_client);
        self.next_client += 1;
        // Demotion came with version 2; an older client never hears of it.
        let demotes = info.demotions && hi >= 2;
        if let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Open { client, name: h.client_name, demotes };
        }
        let info = ServerInfo {
            version: hi,
            server_id: info.server_id,
            page_size: info.page_size,
            root: info.root,
            client_id: client,
            max_frame_bytes: self.cfg.max_frame_bytes,
            demotions: demotes,
            commit_mode: info.commit_mode,
        };
        (Reply::new(ReplyBody::HelloOk(info)), false)
    }

    /// Counts a request's piggybacked acks and discarded pages (the core hands them to
    /// concurrency control).
    pub fn count_piggyback(&mut self, pb: &thor_wire::Piggyback) {
        self.counters.acks_received += pb.acks.len() as u64;
        self.counters.discarded_pages_received += pb.discarded.len() as u64;
    }

    /// Whether `conn`'s session was invited to demote pages.
    pub fn demotes(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|s| matches!(s.state, State::Open { demotes: true, .. }))
    }

    /// Ends `conn`'s session because concurrency control dropped its state: it is told
    /// `Error(SessionExpired)` (request id 0) and closed.
    pub fn expire(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        let Some(s) = self.conns.get_mut(&conn) else { return };
        if s.state == State::Closed {
            return;
        }
        s.state = State::Closed;
        s.held.clear();
        let msg = "too many unacknowledged invalidations; start a new session";
        fx.push(Effect::Reply {
            conn,
            id: 0,
            reply: Reply::error(ErrorCode::SessionExpired, msg),
            close: true,
        });
    }

    /// Ends `conn`'s session because its client resumed it on another connection
    /// (`super::resume`): it is told `Error(SessionExpired)` (request id 0) and closed, and a
    /// request of it that arrives later is refused.
    pub fn supersede(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        let Some(s) = self.conns.get_mut(&conn) else { return };
        if s.state == State::Closed {
            return;
        }
        s.state = State::Closed;
        s.held.clear();
        let msg = "this session resumed on a newer connection";
        fx.push(Effect::Reply {
            conn,
            id: 0,
            reply: Reply::error(ErrorCode::SessionExpired, msg),
            close: true,
        });
    }

    /// The client id of a connection's open session.
    pub fn client_of(&self, conn: ConnId) -> Option<ClientId> {
        match self.conns.get(&conn)?.state {
            State::Open { client, .. } => Some(client),
            _ => None,
        }
    }

    /// The name a connection's client gave in `Hello`.
    pub fn name_of(&self, conn: ConnId) -> Option<&str> {
        match &self.conns.get(&conn)?.state {
            State::Open { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abc", b"abd"));
        assert!(!same_token(b"", b"a"));
    }
}
