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
//! # Slots
//!
//! A session holds one of [`ProtocolConfig::sessions_max`] slots from the moment its
//! connection is reported, before `Hello`. Connections that have not said `Hello` yet hold at
//! most a quarter of the slots ([`pre_hello_sessions_max`]), and never keep a newer
//! connection out:
//!
//! - when a new connection would make more than the pre-`Hello` share, or finds every slot
//!   taken while some are held by connections still waiting for `Hello`, the *oldest* such
//!   connection is closed with `Error(Busy)` (id 0) and the new one takes its place;
//! - only when every slot belongs to an authenticated session is the new connection refused
//!   with `Error(Busy)`.
//!
//! So silent connections (a peer that connects and never speaks) cannot lock clients out: a
//! client's connection pushes the oldest silent one out, and its `Hello` follows at once. The
//! driver adds a handshake deadline (thor-net's `NetConfig::handshake_timeout`), so a silent
//! connection is also closed after a few seconds. A flood of new connections faster than a
//! client's round trip can still push that client out before its `Hello` arrives; it is told
//! `Busy` and may retry. Sessions being closed (their last reply on its way) hold no slot; at
//! most [`CLOSING_SESSIONS_MAX`] of them are kept, beyond which new connections are refused
//! until the drivers report them gone.
//!
//! # Order
//!
//! Replies to one connection leave in request order. While a request of the connection is
//! deferred (a commit waiting for durability, a fetch waiting for a disk read), the session is
//! *busy* and later requests are *held back* in it, at most
//! [`thor_wire::limits::IN_FLIGHT_MAX`]. A client that sends more than that has broken the
//! protocol, and is still answered in order:
//!
//! ```text
//!   deferred  held 1 .. held 16   overflow  later ...
//!   ────────  ─────────────────   ──────────────────
//!   real replies, in order        Error(UnexpectedMessage) each, in order, none executed;
//!                                 the last one closes the connection
//! ```
//!
//! Every request handed to the core before the overflow is served as usual. The request that
//! overflows the bound, and every later one, is *dropped*: it never takes effect, and once
//! the requests before it are answered each dropped one is answered with an error carrying
//! its own id; the last of those closes the session. At most [`DROPPED_IDS_MAX`] dropped ids
//! are remembered; later ones are counted and named by the last error.
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
use crate::limits::{CLOSING_SESSIONS_MAX, DROPPED_IDS_MAX, PRE_HELLO_SESSIONS_SHARE};

/// Most sessions that may wait for `Hello` at once with `sessions_max` slots: a share of them
/// (see the module documentation, *Slots*), at least one.
pub fn pre_hello_sessions_max(sessions_max: usize) -> usize {
    (sessions_max / PRE_HELLO_SESSIONS_SHARE).max(1)
}

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
    /// The order of connection (a count of connects): the oldest session waiting for `Hello`
    /// is the one closed to make room.
    since: u64,
    /// Ids of the requests dropped past the in-flight bound, oldest first (at most
    /// [`DROPPED_IDS_MAX`]); none of them is executed. Once any is, every later request is
    /// dropped too, and the session closes after answering them.
    dropped: Vec<u64>,
    /// Requests dropped beyond those whose ids are kept.
    dropped_uncounted: u64,
    /// Why the first request was dropped, if not for the in-flight bound: a request the
    /// driver serves itself arrived while the session was busy ([`Sessions::screen`]).
    dropped_why: Option<&'static str>,
}

impl Session {
    /// Whether the session dropped a request past the in-flight bound (and so drops every
    /// later one and will close).
    fn overflowed(&self) -> bool {
        !self.dropped.is_empty()
    }

    /// Forgets the requests it held back or dropped: its connection is closing with a reply
    /// that says so.
    fn forget_queued(&mut self) {
        self.held.clear();
        self.dropped.clear();
        self.dropped_uncounted = 0;
        self.dropped_why = None;
    }
}

/// Counters of the sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionCounters {
    /// Sessions open now.
    pub sessions_open: u64,
    /// Sessions opened since start.
    pub sessions_opened: u64,
    /// Connections refused for the session limit, or closed before `Hello` to make room for
    /// a newer one.
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
    /// Stage page records sent before commit (the commit path's, `super::commit_path`).
    PageRecords(thor_wire::PageRecords),
    /// Serve a page-based commit (the commit path's, `super::commit_path`).
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

impl Action {
    /// What the core does for a request an open session may make, or the answer the sessions
    /// give themselves (`Abort`, `Goodbye`; a second `Hello`, which `admit` answers first).
    // The answer is consumed at once by `admit`, never stored or passed up: its size costs a
    // move, and boxing it would allocate on every `Abort` (the idle client's refresh).
    #[allow(clippy::result_large_err)]
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
            RequestBody::Resume(r) => Action::Resume(r),
            RequestBody::Abort => return Err((Reply::new(ReplyBody::Ack), false)),
            RequestBody::Goodbye => return Err((Reply::new(ReplyBody::Ack), true)),
            RequestBody::Hello(_) => {
                return Err((Reply::error(ErrorCode::UnexpectedMessage, "a second Hello"), true));
            }
            // A transport that serves a replica group answers these itself, after
            // `Sessions::screen`; reaching the core means nothing here serves them (an
            // in-process transport, or a server that runs no group): to this server they are
            // an unknown type, and the session closes as for one.
            RequestBody::Replica(r) => {
                let msg = format!("{}: this server serves no replica group here", r.name());
                return Err((Reply::error(ErrorCode::UnknownType, &msg), true));
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
    /// Connections reported so far: orders sessions by age.
    connects: u64,
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
        // Resuming asks about the session's own cache and lost commit: what reading needs.
        RequestBody::Fetch { .. } | RequestBody::Prefetch(_) | RequestBody::Resume(_) => Need::Read,
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
        // Only a replica of this server's own group speaks to it as a replica, with the
        // group's peer credential (`peer:ID`, ID this server's id).
        RequestBody::Replica(_) => Need::Peer(me),
    }
}

/// What a request is called in a `Forbidden` message.
fn what(body: &RequestBody, need: Need) -> String {
    match (body, need) {
        (RequestBody::Peer(m), _) => format!("a Peer message from server {}", m.from().0),
        (RequestBody::Replica(r), _) => format!("a replica's {}", r.name()),
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
            connects: 0,
            counters: SessionCounters::default(),
        }
    }

    pub fn counters(&self) -> SessionCounters {
        let open = self.conns.values().filter(|s| s.state != State::Closed).count();
        SessionCounters { sessions_open: open as u64, ..self.counters }
    }

    /// A new connection: a session, or `Error(Busy)` and close. It may close the oldest
    /// connection still waiting for `Hello` to make room (see the module documentation,
    /// *Slots*).
    pub fn connect(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        let (mut live, mut awaiting) = (0, 0);
        for s in self.conns.values() {
            match s.state {
                State::Closed => {}
                State::AwaitingHello => (live, awaiting) = (live + 1, awaiting + 1),
                State::Open { .. } => live += 1,
            }
        }
        let closing = self.conns.len() - live;
        let max = self.cfg.sessions_max;
        let share = pre_hello_sessions_max(max);
        if closing >= CLOSING_SESSIONS_MAX || (live >= max && awaiting == 0) {
            self.refuse(conn, fx);
            return;
        }
        if awaiting >= share || live >= max {
            self.evict_oldest_awaiting(fx);
        }
        debug_assert!(self.conns.values().filter(|s| s.state != State::Closed).count() < max);
        self.counters.sessions_opened += 1;
        self.connects += 1;
        self.conns.insert(
            conn,
            Session {
                state: State::AwaitingHello,
                busy: false,
                held: VecDeque::new(),
                since: self.connects,
                dropped: Vec::new(),
                dropped_uncounted: 0,
                dropped_why: None,
            },
        );
    }

    /// Refuses a connection: every slot is an authenticated session's (or too many are
    /// closing).
    fn refuse(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        self.counters.sessions_refused += 1;
        let max = self.cfg.sessions_max;
        let reply = Reply::error(
            ErrorCode::Busy,
            &format!("the server has its maximum of {max} connections"),
        );
        fx.push(Effect::Reply { conn, id: 0, reply, close: true });
    }

    /// Closes the oldest connection still waiting for `Hello`, with `Error(Busy)`: its slot
    /// goes to a newer connection.
    fn evict_oldest_awaiting(&mut self, fx: &mut Vec<Effect>) {
        let oldest = self
            .conns
            .iter_mut()
            .filter(|(_, s)| s.state == State::AwaitingHello)
            .min_by_key(|(_, s)| s.since);
        let Some((&conn, s)) = oldest else { return };
        s.state = State::Closed;
        s.forget_queued();
        self.counters.sessions_refused += 1;
        let reply = Reply::error(
            ErrorCode::Busy,
            "no Hello yet and too many connections waiting for one: closed for a newer one",
        );
        fx.push(Effect::Reply { conn, id: 0, reply, close: true });
    }

    pub fn disconnect(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    /// Bytes that did not decode: the error's reply, and the session closes.
    pub fn protocol_error(&mut self, conn: ConnId, id: u64, err: &WireError, fx: &mut Vec<Effect>) {
        self.counters.protocol_errors += 1;
        if let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Closed;
            s.forget_queued();
        }
        fx.push(Effect::Reply {
            conn,
            id,
            reply: Reply::error(err.code(), &err.to_string()),
            close: true,
        });
    }

    /// Counts a request and holds it back if its connection is busy. Returns true if the
    /// request was taken care of here: held back, or dropped past the in-flight bound (see
    /// the module documentation, *Order*).
    pub fn hold_back(
        &mut self,
        conn: ConnId,
        id: u64,
        req: &Request,
        _fx: &mut Vec<Effect>,
    ) -> bool {
        let Some(s) = self.conns.get_mut(&conn) else {
            // Not connected (a driver bug, or a request racing its own disconnect): nobody
            // would read the answer.
            return true;
        };
        let overflow = s.busy && s.held.len() >= IN_FLIGHT_MAX;
        if !s.overflowed() && !overflow {
            if !s.busy {
                return false;
            }
            s.held.push_back((id, req.clone()));
            return true;
        }
        // Past the bound, or after a request that was: dropped, answered once the requests
        // before it are. The session stays busy or has held requests until then, since the
        // bound was crossed while it was busy and nothing is handled after the first drop.
        // Each dropped request counts as a protocol error.
        self.counters.protocol_errors += 1;
        if s.dropped.len() < DROPPED_IDS_MAX {
            s.dropped.push(id);
        } else {
            s.dropped_uncounted += 1;
        }
        true
    }

    /// Answers the requests of `conn` dropped past the in-flight bound, once every request
    /// before them is answered (the session is not busy and holds nothing back): an error
    /// each, in order, carrying its id; the last closes the session. Nothing if none was
    /// dropped.
    pub fn answer_dropped(&mut self, conn: ConnId, fx: &mut Vec<Effect>) {
        let Some(s) = self.conns.get_mut(&conn) else { return };
        if s.state == State::Closed {
            // Closed by a reply already sent (a held request's): the client knows the rest
            // is lost.
            s.forget_queued();
            return;
        }
        if !s.overflowed() || s.busy || !s.held.is_empty() {
            return;
        }
        let dropped = std::mem::take(&mut s.dropped);
        let uncounted = std::mem::take(&mut s.dropped_uncounted);
        let why = s.dropped_why.take();
        s.state = State::Closed;
        let last = dropped.len() - 1;
        for (k, id) in dropped.into_iter().enumerate() {
            let mut msg = match why {
                Some(why) => {
                    format!("request {id} dropped unexecuted: {why}; the connection closes")
                }
                None => format!(
                    "request {id} dropped unexecuted: more than {IN_FLIGHT_MAX} requests were \
                     in flight; the connection closes"
                ),
            };
            if k == last && uncounted > 0 {
                msg.push_str(&format!(" ({uncounted} later requests dropped unexecuted too)"));
            }
            let reply = Reply::error(ErrorCode::UnexpectedMessage, &msg);
            fx.push(Effect::Reply { conn, id, reply, close: k == last });
        }
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
    /// there to receive the reply. A reply that closes the session forgets what it held back
    /// or dropped: the client learns from it that the session is over.
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
            s.forget_queued();
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

    /// Checks a request the driver serves itself instead of handing it to the core (a
    /// replica group's requests, `thor_wire::replica`, which thor-net's server hands to its
    /// replica handler) exactly as [`Sessions::admit`] checks the core's own, in the same
    /// order: the session must be open, the request in its agreed version (else
    /// `UnknownType`, closing) and inside its credential's scope (else `Forbidden`); a Raft
    /// message must be for this server's group (else `Forbidden`). The session must also be
    /// idle (no earlier request of it unanswered): the driver answers on its own, and the
    /// core's replies and the driver's must not overtake each other, so a session that sends
    /// one behind an unanswered request broke the protocol: the request is dropped as one past
    /// the in-flight bound is, answered `UnexpectedMessage` after every request before it, and
    /// the session closes (see *Order*). Returns whether the driver may serve it; otherwise
    /// the refusal is in `fx`, or comes later.
    pub fn screen(
        &mut self,
        conn: ConnId,
        id: u64,
        req: &Request,
        me: ServerId,
        fx: &mut Vec<Effect>,
    ) -> bool {
        self.counters.requests += 1;
        let name = req.body.name();
        let early = match self.conns.get(&conn).map(|s| (&s.state, s)) {
            None => return false,
            Some((State::Closed, _)) => {
                Some((Reply::error(ErrorCode::UnexpectedMessage, "the session is closed"), true))
            }
            Some((State::AwaitingHello, _)) => {
                self.counters.protocol_errors += 1;
                let msg = format!("{name} before Hello");
                Some((Reply::error(ErrorCode::HelloRequired, &msg), true))
            }
            Some((State::Open { .. }, s)) if s.busy || !s.held.is_empty() || s.overflowed() => {
                // Answered, like a request past the in-flight bound, once every request
                // before it is (`answer_dropped`), so that no reply overtakes another; the
                // session then closes.
                self.counters.protocol_errors += 1;
                let s = self.conns.get_mut(&conn).expect("looked up above");
                if s.dropped.is_empty() {
                    s.dropped_why = Some("a replica request behind an unanswered request");
                }
                if s.dropped.len() < DROPPED_IDS_MAX {
                    s.dropped.push(id);
                } else {
                    s.dropped_uncounted += 1;
                }
                return false;
            }
            Some((State::Open { .. }, _)) => None,
        };
        let (reply, close) = match early {
            Some(answer) => answer,
            None => {
                if self.outdated(conn, id, req, fx) {
                    return false;
                }
                let Some(State::Open { scope, version, credential, .. }) =
                    self.conns.get(&conn).map(|s| &s.state)
                else {
                    return false;
                };
                let need = need(&req.body, me);
                let group = match &req.body {
                    RequestBody::Replica(thor_wire::ReplicaRequest::Raft(m)) => Some(m.group),
                    _ => None,
                };
                if !scope.allows(need) {
                    self.counters.forbidden += 1;
                    let who = credential.as_deref().unwrap_or("(none)");
                    let msg = format!(
                        "credential {who} ({scope}) may not send {}; that needs {need}",
                        what(&req.body, need)
                    );
                    forbidden(*version, &msg)
                } else if let Some(g) = group.filter(|g| *g != me) {
                    self.counters.forbidden += 1;
                    let msg = format!("a Raft message for group {}; this is group {}", g.0, me.0);
                    forbidden(*version, &msg)
                } else {
                    return true;
                }
            }
        };
        if close && let Some(s) = self.conns.get_mut(&conn) {
            s.state = State::Closed;
            s.forget_queued();
        }
        fx.push(Effect::Reply { conn, id, reply, close });
        false
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

    fn sessions(max: usize) -> Sessions {
        Sessions::new(ProtocolConfig { sessions_max: max, ..ProtocolConfig::default() })
    }

    fn info() -> InfoParts {
        InfoParts {
            server_id: ServerId(1),
            page_size: 4096,
            root: thor_core::builtin::ROOT,
            demotions: false,
            commit_mode: thor_wire::CommitMode::default(),
        }
    }

    /// Connects `conn` and opens its session with `Hello`.
    fn open(s: &mut Sessions, conn: ConnId) {
        let mut fx = Vec::new();
        s.connect(conn, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], "t")));
        s.admit(conn, 1, hello, info(), &mut fx);
        assert!(
            matches!(&fx[..], [Effect::Reply { reply, .. }] if matches!(reply.body, ReplyBody::HelloOk(_)))
        );
    }

    /// The connections closed with `Busy` among `fx`.
    fn busy(fx: &[Effect]) -> Vec<ConnId> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Reply { conn, reply, close: true, .. }
                    if matches!(reply.body, ReplyBody::Error { code: ErrorCode::Busy, .. }) =>
                {
                    Some(*conn)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn silent_connections_hold_a_share_of_the_slots_and_the_oldest_gives_way() {
        let mut s = sessions(16);
        let share = pre_hello_sessions_max(16);
        assert_eq!(share, 4);
        // Authenticated sessions take every slot but the share.
        for conn in 100..100 + (16 - share) as ConnId {
            open(&mut s, conn);
        }
        let mut fx = Vec::new();
        for conn in 1..=share as ConnId {
            s.connect(conn, &mut fx);
        }
        assert!(fx.is_empty(), "the share admits them");
        assert_eq!(s.counters().sessions_open, 16);
        // Every slot is taken, a share of them by silent connections: each newer connection
        // closes the oldest one waiting for Hello, and a client's gets in.
        for conn in 10..14 {
            s.connect(conn, &mut fx);
        }
        assert_eq!(busy(&fx), vec![1, 2, 3, 4]);
        fx.clear();
        s.connect(200, &mut fx);
        assert_eq!(busy(&fx), vec![10]);
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], "late")));
        fx.clear();
        s.admit(200, 1, hello, info(), &mut fx);
        assert!(
            matches!(&fx[..], [Effect::Reply { reply, .. }] if matches!(reply.body, ReplyBody::HelloOk(_)))
        );
        assert_eq!(s.counters().sessions_open, 16);
        assert_eq!(s.counters().sessions_refused, 5);
        // The closed ones leave when their drivers report them gone.
        for conn in [1, 2, 3, 4, 10] {
            s.disconnect(conn);
        }
        assert_eq!(s.conns.len(), 16);
    }

    #[test]
    fn silent_connections_alone_cannot_take_more_than_their_share() {
        let mut s = sessions(16);
        let mut fx = Vec::new();
        for conn in 1..=100 {
            s.connect(conn, &mut fx);
        }
        assert_eq!(busy(&fx).len(), 100 - pre_hello_sessions_max(16));
        assert_eq!(s.counters().sessions_open, pre_hello_sessions_max(16) as u64);
    }

    #[test]
    fn with_every_slot_authenticated_a_new_connection_is_refused() {
        let mut s = sessions(2);
        open(&mut s, 1);
        open(&mut s, 2);
        let mut fx = Vec::new();
        s.connect(3, &mut fx);
        assert_eq!(busy(&fx), vec![3]);
        assert_eq!(s.counters().sessions_refused, 1);
        s.disconnect(1);
        fx.clear();
        s.connect(4, &mut fx);
        assert!(fx.is_empty());
    }

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
