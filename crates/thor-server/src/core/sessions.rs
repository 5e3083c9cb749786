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
//! # Who may say what
//!
//! *Authentication* looks the token of `Hello` up among the server's credentials
//! ([`super::credentials`]), comparing it with every secret in time that depends only on the
//! lengths; the credential that matches gives the session its [`Scope`] (a server with no
//! credentials and no token admits everyone with every scope). Then each request is checked,
//! in this order, before it has any effect:
//!
//! 1. *Version*: a request the connection's agreed version does not have (`Prefetch` before
//!    4, `Prepare` and `Peer` before 3, demotion sections before 2: the table is
//!    `thor_wire::version`) is `Error(UnknownType)`, and the session closes, as for a type
//!    number the server has never heard of.
//! 2. *Scope*: a request outside the session's scope ([`Need`]) is `Error(Forbidden)` and the
//!    session stays open; its piggybacked acks and discarded pages still count (they only
//!    report what the client did). Connections that agreed on a version before 5 do not know
//!    `Forbidden`: they get `Unauthenticated` and are closed.
//! 3. A `Peer` message must also come from a server this one knows (`TwoPcConfig::peers`),
//!    else `Error(Forbidden)`.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use thor_core::{ClientId, Oref, PageId, ServerId};
use thor_wire::limits::IN_FLIGHT_MAX;
use thor_wire::{
    ErrorCode, Hello, RefusedCode, Reply, ReplyBody, Request, RequestBody, ServerInfo,
    WIRE_VERSION, WIRE_VERSION_MIN, WireError,
};

use super::credentials::{Credentials, Need, Scope};
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
        /// The protocol version agreed in `HelloOk`: nothing newer is accepted.
        version: u16,
        /// What the session's credential allows.
        scope: Scope,
        /// The credential's name (`None`: the server had no credentials), which a new table
        /// must still have, with the same secret, for the session to stay open.
        credential: Option<String>,
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
    /// Requests refused as outside their session's scope (`Forbidden`).
    pub forbidden: u64,
    /// Sessions closed because their credential was revoked.
    pub sessions_revoked: u64,
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
}

impl Action {
    /// What the core does for a request an open session may make, or the answer the sessions
    /// give themselves (`Abort`, `Goodbye`; a second `Hello`, which `admit` answers first).
    fn of(body: RequestBody) -> Result<Action, (Reply, bool)> {
        Ok(match body {
            RequestBody::Fetch { page } => Action::Fetch(page),
            RequestBody::Prefetch(p) => Action::Prefetch(p),
            RequestBody::Commit(commit) => Action::Commit(CommitIn::from(commit)),
            RequestBody::PageRecords(r) => Action::PageRecords(r),
            RequestBody::PageCommit(c) => Action::PageCommit(c),
            RequestBody::Stats => Action::Stats,
            RequestBody::Backup { path } => Action::Backup(path),
            RequestBody::Prepare(p) => Action::Prepare(p),
            RequestBody::Peer(m) => Action::Peer(m),
            RequestBody::Abort => return Err((Reply::new(ReplyBody::Ack), false)),
            RequestBody::Goodbye => return Err((Reply::new(ReplyBody::Ack), true)),
            RequestBody::Hello(_) => {
                return Err((Reply::error(ErrorCode::UnexpectedMessage, "a second Hello"), true));
            }
        })
    }
}

/// Every session of a core.
#[derive(Debug)]
pub struct Sessions {
    /// Settings.
    cfg: ProtocolConfig,
    /// Who may open a session, and with what scope: the configured credentials, or the
    /// single token as one credential; empty, everyone with every scope.
    credentials: Credentials,
    /// Open connections.
    conns: FxHashMap<ConnId, Session>,
    /// The next client id to give out (ids start at 1; 0 is never a session's).
    next_client: u32,
    /// Counters.
    counters: SessionCounters,
}

/// What `body` needs of its session's scope, at server `me`. A commit, page commit or prepare
/// that writes nothing here is a read: it is validated and never logged (a prepare whose
/// participant entry for this server says it writes is a write even with an empty body, since
/// it would be prepared, held in doubt and logged).
pub(crate) fn need(body: &RequestBody, me: ServerId) -> Need {
    match body {
        RequestBody::Hello(_) | RequestBody::Abort | RequestBody::Goodbye => Need::Any,
        RequestBody::Fetch { .. } | RequestBody::Prefetch(_) => Need::Read,
        RequestBody::Commit(c) => {
            if c.versions.is_empty() && c.created.is_empty() {
                Need::Read
            } else {
                Need::Write
            }
        }
        RequestBody::PageRecords(_) => Need::Write,
        RequestBody::PageCommit(c) => {
            let writes = !(c.writes.is_empty()
                && c.created.is_empty()
                && c.records.is_empty()
                && c.pages.is_empty());
            if writes { Need::Write } else { Need::Read }
        }
        RequestBody::Prepare(p) => {
            let here = p.participants.iter().any(|q| q.server == me && q.writes);
            let writes = here || !p.commit.versions.is_empty() || !p.commit.created.is_empty();
            if writes { Need::Write } else { Need::Read }
        }
        RequestBody::Stats | RequestBody::Backup { .. } => Need::Operate,
        RequestBody::Peer(m) => Need::Peer(m.from()),
    }
}

/// What a request is called in a `Forbidden` message.
fn what(body: &RequestBody, need: Need) -> String {
    match (body, need) {
        (RequestBody::Peer(m), _) => format!("a Peer message from server {}", m.from().0),
        (_, Need::Write) => format!("a {} that writes", body.name()),
        _ => format!("a {}", body.name()),
    }
}

/// The reply to a request outside the session's scope: `Forbidden` (the session stays open),
/// or on a connection older than the code `Unauthenticated`, closing it.
fn forbidden(version: u16, message: &str) -> (Reply, bool) {
    if version >= ErrorCode::Forbidden.since() {
        (Reply::error(ErrorCode::Forbidden, message), false)
    } else {
        (Reply::error(ErrorCode::Unauthenticated, message), true)
    }
}

impl Sessions {
    pub fn new(cfg: ProtocolConfig) -> Sessions {
        let credentials = if cfg.credentials.is_empty() {
            Credentials::single_token(&cfg.token)
        } else {
            cfg.credentials.clone()
        };
        Sessions {
            credentials,
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
            (State::Open { scope, version, credential, .. }, body) => {
                let need = need(&body, info.server_id);
                if scope.allows(need) {
                    match Action::of(body) {
                        Ok(action) => return action,
                        Err(answer) => answer,
                    }
                } else {
                    self.counters.forbidden += 1;
                    let who = credential.as_deref().unwrap_or("(none)");
                    let msg = format!(
                        "credential {who} ({scope}) may not send {}; that needs {need}",
                        what(&body, need)
                    );
                    forbidden(*version, &msg)
                }
            }
        };
        if close && let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Closed;
            s.held.clear();
        }
        fx.push(Effect::Reply { conn, id, reply, close });
        Action::Done
    }

    fn hello(&mut self, conn: ConnId, h: Hello, info: InfoParts) -> (Reply, bool) {
        let (scope, credential) = if self.credentials.is_empty() {
            (Scope::All, None)
        } else {
            match self.credentials.find(&h.token) {
                Some(c) => (c.scope(), Some(c.name().to_owned())),
                None => {
                    self.counters.auth_failures += 1;
                    return (Reply::error(ErrorCode::Unauthenticated, "wrong token"), true);
                }
            }
        };
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
            s.state = State::Open {
                client,
                name: h.client_name,
                demotes,
                version: hi,
                scope,
                credential,
            };
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

    /// Refuses a request that the session's agreed protocol version does not have: it is an
    /// unknown type to that version, answered `Error(UnknownType)`, and the session closes.
    /// Returns whether it refused (the caller then does nothing more with the request).
    pub fn outdated(&mut self, conn: ConnId, id: u64, req: &Request, fx: &mut Vec<Effect>) -> bool {
        let Some(s) = self.conns.get_mut(&conn) else { return false };
        let State::Open { version, .. } = s.state else { return false };
        let needed = req.version_needed();
        if needed <= version {
            return false;
        }
        self.counters.protocol_errors += 1;
        s.state = State::Closed;
        s.held.clear();
        let alone = thor_wire::version::request_version(req.body.kind()).unwrap_or(needed);
        let what = if alone < needed {
            format!("{} with demotion sections", req.body.name())
        } else {
            req.body.name().to_owned()
        };
        let msg = format!(
            "{what} needs protocol version {needed}; this connection agreed on version {version}"
        );
        fx.push(Effect::Reply {
            conn,
            id,
            reply: Reply::error(ErrorCode::UnknownType, &msg),
            close: true,
        });
        true
    }

    /// Answers a request of `conn` that its scope allows but this server must refuse:
    /// `Forbidden` (or, before version 5, `Unauthenticated` and close).
    pub fn forbid(&mut self, conn: ConnId, id: u64, message: &str, fx: &mut Vec<Effect>) {
        let Some(s) = self.conns.get_mut(&conn) else { return };
        let State::Open { version, .. } = s.state else { return };
        self.counters.forbidden += 1;
        let (reply, close) = forbidden(version, message);
        if close {
            s.state = State::Closed;
            s.held.clear();
        }
        fx.push(Effect::Reply { conn, id, reply, close });
    }

    /// The refusal code to send `conn` for `code`: `code` itself, or [`RefusedCode::Other`]
    /// (same message) if the connection agreed on a version older than the code.
    pub fn refused_code_for(&self, conn: ConnId, code: RefusedCode) -> RefusedCode {
        match self.conns.get(&conn).map(|s| &s.state) {
            Some(State::Open { version, .. }) if *version < code.since() => RefusedCode::Other,
            _ => code,
        }
    }

    /// Replaces the credentials (see [`super::credentials`], "Revocation"): a session whose
    /// credential is gone or has a new secret is told `Error(Unauthenticated)` (id 0) and
    /// closed; the others take their credential's scope now. A session opened without
    /// credentials (there were none) is closed once there are some.
    pub fn set_credentials(&mut self, new: Credentials, fx: &mut Vec<Effect>) {
        let old = std::mem::replace(&mut self.credentials, new);
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort_unstable();
        for conn in conns {
            let s = self.conns.get_mut(&conn).expect("listed");
            let State::Open { scope, credential, .. } = &mut s.state else { continue };
            let kept = match credential.as_deref() {
                Some(name) => {
                    old.get(name).and_then(|c| self.credentials.still_has(name, c.secret()))
                }
                None => self.credentials.is_empty().then_some(Scope::All),
            };
            if let Some(now) = kept {
                *scope = now;
                continue;
            }
            let msg = match credential.as_deref() {
                Some(name) => format!("credential {name} was revoked"),
                None => "the server now requires credentials".to_owned(),
            };
            s.state = State::Closed;
            s.held.clear();
            self.counters.sessions_revoked += 1;
            fx.push(Effect::Reply {
                conn,
                id: 0,
                reply: Reply::error(ErrorCode::Unauthenticated, &msg),
                close: true,
            });
        }
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
    fn writes_need_write_and_peers_need_their_own_id() {
        use thor_wire::{Commit, Participant, PeerMsg, Prepare, Stamp};
        let me = ServerId(1);
        let read = Commit { reads: vec![thor_core::builtin::ROOT], ..Commit::default() };
        let write = Commit {
            versions: vec![(thor_core::builtin::ROOT, bytes::Bytes::from_static(&[0; 8]))],
            ..Commit::default()
        };
        let prep = |writes_here: bool, commit: Commit| {
            RequestBody::Prepare(Box::new(Prepare {
                stamp: Stamp { time_us: 1, tie: thor_wire::CLIENT_TIE_BIT },
                coordinator: Some(ServerId(2)),
                participants: vec![
                    Participant { server: me, writes: writes_here },
                    Participant { server: ServerId(2), writes: true },
                ],
                commit,
            }))
        };
        let stamp = Stamp { time_us: 1, tie: thor_wire::CLIENT_TIE_BIT };
        for (body, want) in [
            (RequestBody::Commit(read.clone()), Need::Read),
            (RequestBody::Commit(write.clone()), Need::Write),
            (prep(false, read.clone()), Need::Read),
            (prep(true, Commit::default()), Need::Write),
            (prep(false, write), Need::Write),
            (RequestBody::Stats, Need::Operate),
            (RequestBody::Backup { path: "b".into() }, Need::Operate),
            (RequestBody::Goodbye, Need::Any),
            (
                RequestBody::Peer(PeerMsg::Query { stamp, from: ServerId(3) }),
                Need::Peer(ServerId(3)),
            ),
        ] {
            assert_eq!(need(&body, me), want, "{}", body.name());
        }
    }
}
