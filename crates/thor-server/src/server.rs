//! The server's request handler: the protocol around the engine, without sockets.
//!
//! A [`Handler`] turns each decoded [`Request`] of a client into engine calls and answers with a
//! [`Reply`]. It is synchronous and does no I/O of its own (the engine does the disk I/O), so
//! it runs the same behind TCP (`thor-net`), behind the in-process transport, and in tests that
//! call it directly.
//!
//! # Sessions
//!
//! Every connection has a [`Session`], opened with [`Handler::open_session`]. The handler bounds
//! how many are open at once ([`HandlerConfig::sessions_max`]); a session gives its slot back
//! when dropped. A session moves through three states:
//!
//! ```text
//!              Hello (token ok, versions overlap)
//!  AwaitingHello ──────────────────────────────────► Open ──── Goodbye ────► Closed
//!        │                                            │                        ▲
//!        └── anything else, wrong token, bad version ─┴── second Hello ────────┘
//! ```
//!
//! Every reply to a request that moves the session to `Closed` has [`Response::close`] set: the
//! transport sends the reply, then closes the connection. Requests that fail without breaking
//! the protocol (a fetch of a page that does not exist, a refused commit) leave the session open.
//!
//! # From engine errors to wire codes
//!
//! | engine result                          | reply                                         |
//! |----------------------------------------|-----------------------------------------------|
//! | commit `Ok`                            | `CommitOk` (only after the log fsync)         |
//! | `Invalid(InvalidCommit::*)`            | `CommitRefused` with one [`RefusedCode`] each |
//! | `Full`                                 | `CommitRefused(DatabaseFull)`                 |
//! | `BulkLoadActive`                       | `CommitRefused(RetryLater)`                   |
//! | `NoSuchPage` (fetch)                   | `Error(NoSuchPage)`, session stays open       |
//! | `CorruptPage`, `CorruptRecord`         | `Error(CorruptData)`, session stays open      |
//! | `Storage`, `Failed`                    | `Error(ServerFailed)`, session stays open     |
//! | anything else                          | `Error(Internal)`, session closed             |
//!
//! The read set and the piggybacked acks and discarded pages are accepted and counted but not
//! used yet: concurrency control (CLOCC) will validate with them. Replies carry no invalidations
//! yet for the same reason.
//!
//! *Authentication* compares the token in `Hello` with the configured one in time independent
//! of where they differ; an empty configured token admits everyone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use bytes::Bytes;
use thor_core::{ClientId, PageId};
use thor_wire::limits::{FRAME_BYTES_MAX, FRAME_BYTES_SETTING_MIN, TOKEN_BYTES_MAX};
use thor_wire::{
    Commit, ErrorCode, Hello, RefusedCode, Reply, ReplyBody, Request, RequestBody, ServerInfo,
    ServerStats, WIRE_VERSION, WIRE_VERSION_MIN, WireError,
};

use crate::engine::{CommitRequest, Engine};
use crate::error::{EngineError, InvalidCommit};
use crate::limits::{self, SESSIONS_MAX_DEFAULT};

// The wire must be able to carry every commit the engine accepts, and no more objects than it
// accepts (a bigger wire bound would only turn into refusals after decoding).
const _: () = assert!(thor_wire::limits::COMMIT_OBJECTS_MAX == limits::COMMIT_OBJECTS_MAX);

/// Settings of a handler.
#[derive(Debug, Clone)]
pub struct HandlerConfig {
    /// The secret every client must present in `Hello`. Empty means no authentication: any
    /// client that speaks the protocol is admitted.
    pub token: Vec<u8>,
    /// Most sessions open at once; [`Handler::open_session`] refuses more.
    pub sessions_max: usize,
    /// The largest frame a connection accepts, announced to clients in `HelloOk` and enforced
    /// by the transport.
    pub max_frame_bytes: usize,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        HandlerConfig {
            token: Vec::new(),
            sessions_max: SESSIONS_MAX_DEFAULT,
            max_frame_bytes: FRAME_BYTES_MAX,
        }
    }
}

/// Why a handler could not be made or a session opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The configuration is not usable; fix it.
    #[error("invalid handler configuration: {0}")]
    BadConfig(String),
    /// As many sessions are open as the configuration allows: refuse the connection (with
    /// `Error(Busy)`) and let the client retry later.
    #[error("too many sessions (the limit is {max})")]
    Busy {
        /// The limit.
        max: usize,
    },
}

/// What the handler answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The reply to send.
    pub reply: Reply,
    /// Whether to close the connection after sending the reply (the session is closed).
    pub close: bool,
}

impl Response {
    fn keep(reply: Reply) -> Response {
        Response { reply, close: false }
    }

    fn close(reply: Reply) -> Response {
        Response { reply, close: true }
    }
}

/// Counters of the handler, shared with its sessions.
#[derive(Debug, Default)]
struct Counters {
    sessions_opened: AtomicU64,
    sessions_refused: AtomicU64,
    requests: AtomicU64,
    protocol_errors: AtomicU64,
    auth_failures: AtomicU64,
    acks_received: AtomicU64,
    discarded_pages_received: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
}

/// State shared by a handler and the sessions it opened (which may outlive it).
#[derive(Debug, Default)]
struct Shared {
    /// Sessions open now: incremented by `open_session`, decremented when a session drops.
    sessions_open: AtomicUsize,
    /// The next client id to give out (ids start at 1; 0 is never a session's).
    next_client: AtomicU32,
    /// Counters.
    counters: Counters,
}

/// Where a session is in the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SessionState {
    /// Only `Hello` is accepted.
    AwaitingHello,
    /// Authenticated.
    Open {
        /// The id given in `HelloOk`.
        client_id: ClientId,
        /// The name the client gave, for logs.
        name: String,
    },
    /// Nothing more is accepted; the connection is being closed.
    Closed,
}

/// One client's session at a handler: its protocol state and its slot among the open
/// sessions. Dropping it frees the slot.
#[derive(Debug)]
pub struct Session {
    /// Where the session is in the protocol.
    state: SessionState,
    /// The handler's shared state, to free the slot on drop.
    shared: Arc<Shared>,
}

impl Session {
    /// The client id, once `Hello` succeeded.
    pub fn client_id(&self) -> Option<ClientId> {
        match &self.state {
            SessionState::Open { client_id, .. } => Some(*client_id),
            _ => None,
        }
    }

    /// The name the client gave in `Hello`, once it succeeded.
    pub fn client_name(&self) -> Option<&str> {
        match &self.state {
            SessionState::Open { name, .. } => Some(name),
            _ => None,
        }
    }

    /// Whether `Hello` succeeded and the session is not closed.
    pub fn is_open(&self) -> bool {
        matches!(self.state, SessionState::Open { .. })
    }

    /// Whether the session is closed (the connection should be closed).
    pub fn is_closed(&self) -> bool {
        self.state == SessionState::Closed
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.sessions_open.fetch_sub(1, Relaxed);
    }
}

/// The protocol handler of one server: shared by all its connections (`Arc<Handler>`); every
/// method takes `&self`.
#[derive(Debug)]
pub struct Handler {
    /// The storage engine.
    engine: Arc<Engine>,
    /// Settings.
    config: HandlerConfig,
    /// Sessions and counters.
    shared: Arc<Shared>,
}

/// Compares two byte strings in time that depends only on their lengths, so that a client
/// cannot find the token byte by byte by timing refusals.
fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The refusal code of each way a commit can be invalid.
pub fn refused_code(e: &InvalidCommit) -> RefusedCode {
    match e {
        InvalidCommit::TooLarge { .. } => RefusedCode::TooLarge,
        InvalidCommit::NoSuchObject(_) => RefusedCode::NoSuchObject,
        InvalidCommit::NotAClass { .. } => RefusedCode::NotAClass,
        InvalidCommit::BadShape { .. } => RefusedCode::BadShape,
        InvalidCommit::BadReference { .. } => RefusedCode::BadReference,
        InvalidCommit::Reshape { .. } => RefusedCode::Reshape,
        InvalidCommit::ClassIsImmutable(_) => RefusedCode::ClassIsImmutable,
        InvalidCommit::Duplicate(_) => RefusedCode::Duplicate,
        InvalidCommit::ObjectTooLarge { .. } => RefusedCode::ObjectTooLarge,
    }
}

impl Handler {
    /// A handler serving `engine` with `config`.
    pub fn new(engine: Arc<Engine>, config: HandlerConfig) -> Result<Handler, HandlerError> {
        if config.token.len() > TOKEN_BYTES_MAX {
            return Err(HandlerError::BadConfig(format!(
                "the token is {} bytes, the protocol allows {TOKEN_BYTES_MAX}",
                config.token.len()
            )));
        }
        if config.sessions_max == 0 {
            return Err(HandlerError::BadConfig("sessions_max must be at least 1".into()));
        }
        if !(FRAME_BYTES_SETTING_MIN..=FRAME_BYTES_MAX).contains(&config.max_frame_bytes) {
            return Err(HandlerError::BadConfig(format!(
                "max_frame_bytes must be between {FRAME_BYTES_SETTING_MIN} and {FRAME_BYTES_MAX}"
            )));
        }
        let shared = Arc::new(Shared { next_client: AtomicU32::new(1), ..Shared::default() });
        Ok(Handler { engine, config, shared })
    }

    /// The engine behind this handler.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The settings.
    pub fn config(&self) -> &HandlerConfig {
        &self.config
    }

    /// The largest frame a connection accepts.
    pub fn max_frame_bytes(&self) -> usize {
        self.config.max_frame_bytes
    }

    /// Opens a session for a new connection, or refuses it if as many are open as allowed.
    pub fn open_session(&self) -> Result<Session, HandlerError> {
        let max = self.config.sessions_max;
        let got = self
            .shared
            .sessions_open
            .fetch_update(Relaxed, Relaxed, |n| if n < max { Some(n + 1) } else { None });
        if got.is_err() {
            self.shared.counters.sessions_refused.fetch_add(1, Relaxed);
            return Err(HandlerError::Busy { max });
        }
        self.shared.counters.sessions_opened.fetch_add(1, Relaxed);
        Ok(Session { state: SessionState::AwaitingHello, shared: self.shared.clone() })
    }

    /// The reply to a connection refused by [`Handler::open_session`]: `Error(Busy)`.
    pub fn busy_reply(&self) -> Reply {
        Reply::error(
            ErrorCode::Busy,
            &format!("the server has its maximum of {} connections", self.config.sessions_max),
        )
    }

    /// The reply to bytes that did not decode (see [`WireError::code`]); the connection must
    /// be closed after it. Counts a protocol error.
    pub fn protocol_error(&self, session: Option<&mut Session>, err: &WireError) -> Reply {
        self.shared.counters.protocol_errors.fetch_add(1, Relaxed);
        if let Some(s) = session {
            s.state = SessionState::Closed;
        }
        Reply::error(err.code(), &err.to_string())
    }

    /// Counts frame bytes a transport received and sent (the in-process transport has none).
    pub fn note_traffic(&self, received: u64, sent: u64) {
        self.shared.counters.bytes_received.fetch_add(received, Relaxed);
        self.shared.counters.bytes_sent.fetch_add(sent, Relaxed);
    }

    /// Handles one request of `session`. Blocks while the engine works: a commit returns only
    /// once it is durable (a log fsync), so asynchronous callers run this off their reactor.
    pub fn handle(&self, session: &mut Session, req: Request) -> Response {
        let c = &self.shared.counters;
        c.requests.fetch_add(1, Relaxed);
        c.acks_received.fetch_add(req.piggyback.acks.len() as u64, Relaxed);
        c.discarded_pages_received.fetch_add(req.piggyback.discarded.len() as u64, Relaxed);
        let response = match (&session.state, req.body) {
            (SessionState::Closed, _) => {
                Response::close(Reply::error(ErrorCode::UnexpectedMessage, "the session is closed"))
            }
            (SessionState::AwaitingHello, RequestBody::Hello(h)) => self.hello(session, h),
            (SessionState::AwaitingHello, body) => {
                c.protocol_errors.fetch_add(1, Relaxed);
                Response::close(Reply::error(
                    ErrorCode::HelloRequired,
                    &format!("{} before Hello", body.name()),
                ))
            }
            (SessionState::Open { .. }, RequestBody::Hello(_)) => {
                c.protocol_errors.fetch_add(1, Relaxed);
                Response::close(Reply::error(ErrorCode::UnexpectedMessage, "a second Hello"))
            }
            (SessionState::Open { .. }, RequestBody::Fetch { page }) => self.fetch(page),
            (SessionState::Open { .. }, RequestBody::Commit(commit)) => self.commit(commit),
            (SessionState::Open { .. }, RequestBody::Abort) => {
                Response::keep(Reply::new(ReplyBody::Ack))
            }
            (SessionState::Open { .. }, RequestBody::Stats) => {
                Response::keep(Reply::new(ReplyBody::Stats(Box::new(self.stats()))))
            }
            (SessionState::Open { .. }, RequestBody::Goodbye) => {
                Response::close(Reply::new(ReplyBody::Ack))
            }
        };
        if response.close {
            session.state = SessionState::Closed;
        }
        response
    }

    fn hello(&self, session: &mut Session, h: Hello) -> Response {
        if !same_token(&h.token, &self.config.token) {
            self.shared.counters.auth_failures.fetch_add(1, Relaxed);
            return Response::close(Reply::error(ErrorCode::Unauthenticated, "wrong token"));
        }
        let lo = h.min_version.max(WIRE_VERSION_MIN);
        let hi = h.max_version.min(WIRE_VERSION);
        if lo > hi {
            return Response::close(Reply::error(
                ErrorCode::UnsupportedVersion,
                &format!(
                    "the client speaks versions {}..={}, the server {WIRE_VERSION_MIN}..={WIRE_VERSION}",
                    h.min_version, h.max_version
                ),
            ));
        }
        let client_id = ClientId(self.shared.next_client.fetch_add(1, Relaxed));
        session.state = SessionState::Open { client_id, name: h.client_name };
        Response::keep(Reply::new(ReplyBody::HelloOk(ServerInfo {
            version: hi,
            server_id: self.engine.server_id(),
            page_size: self.engine.page_size(),
            root: self.engine.root(),
            client_id,
            max_frame_bytes: self.config.max_frame_bytes,
        })))
    }

    fn fetch(&self, page: PageId) -> Response {
        match self.engine.fetch(page) {
            // The page goes out without a copy: the reply shares the engine's buffer.
            Ok(bytes) => Response::keep(Reply::new(ReplyBody::Page {
                page,
                bytes: Bytes::from_owner(bytes),
            })),
            Err(e) => self.engine_error(e),
        }
    }

    fn commit(&self, c: Commit) -> Response {
        // The read set is for concurrency control, which does not exist yet.
        let req = CommitRequest {
            versions: c.versions.into_iter().map(|(o, b)| (o, b.to_vec())).collect(),
            created: c.created.into_iter().map(|b| b.to_vec()).collect(),
        };
        match self.engine.commit(req) {
            Ok(out) => Response::keep(Reply::new(ReplyBody::CommitOk {
                lsn: out.lsn,
                created: out.created,
            })),
            Err(e) => self.engine_error(e),
        }
    }

    /// The reply for an engine error (see the table in the module documentation).
    fn engine_error(&self, e: EngineError) -> Response {
        let msg = e.to_string();
        match e {
            EngineError::Invalid(ic) => Response::keep(Reply::refused(refused_code(&ic), &msg)),
            EngineError::Full => Response::keep(Reply::refused(RefusedCode::DatabaseFull, &msg)),
            EngineError::BulkLoadActive => {
                Response::keep(Reply::refused(RefusedCode::RetryLater, &msg))
            }
            EngineError::NoSuchPage(_) => Response::keep(Reply::error(ErrorCode::NoSuchPage, &msg)),
            EngineError::CorruptPage { .. } | EngineError::CorruptRecord { .. } => {
                Response::keep(Reply::error(ErrorCode::CorruptData, &msg))
            }
            EngineError::Storage(_) | EngineError::Failed => {
                Response::keep(Reply::error(ErrorCode::ServerFailed, &msg))
            }
            EngineError::Superblock(_)
            | EngineError::NotADatabase
            | EngineError::AlreadyExists
            | EngineError::BadOptions(_) => {
                Response::close(Reply::error(ErrorCode::Internal, &msg))
            }
        }
    }

    /// The engine's counters and the handler's.
    pub fn stats(&self) -> ServerStats {
        let e = self.engine.stats();
        let c = &self.shared.counters;
        ServerStats {
            commits: e.commits,
            versions_committed: e.versions_committed,
            objects_created: e.objects_created,
            commits_refused: e.commits_refused,
            log_bytes: e.log_bytes,
            log_fsyncs: e.log_fsyncs,
            commits_per_fsync: e.commits_per_fsync,
            mob_bytes: e.mob_bytes as u64,
            mob_entries: e.mob_entries as u64,
            fetches: e.fetches,
            fetch_versions_applied: e.fetch_versions_applied,
            cache_hits: e.cache_hits,
            cache_misses: e.cache_misses,
            fetch_reads: e.fetch_reads,
            installation_reads: e.installation_reads,
            validation_reads: e.validation_reads,
            flush_rounds: e.flush_rounds,
            pages_written: e.pages_written,
            versions_installed: e.versions_installed,
            write_absorption: e.write_absorption,
            mob_waits: e.mob_waits,
            checkpoint: e.checkpoint,
            pages_allocated: e.pages_allocated as u64,
            sessions_open: self.shared.sessions_open.load(Relaxed) as u64,
            sessions_opened: c.sessions_opened.load(Relaxed),
            sessions_refused: c.sessions_refused.load(Relaxed),
            requests: c.requests.load(Relaxed),
            protocol_errors: c.protocol_errors.load(Relaxed),
            auth_failures: c.auth_failures.load(Relaxed),
            acks_received: c.acks_received.load(Relaxed),
            discarded_pages_received: c.discarded_pages_received.load(Relaxed),
            bytes_received: c.bytes_received.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineOptions;
    use thor_core::le::put_u32;
    use thor_core::{ClassDesc, Oref, RawRef, VarKind, builtin};
    use thor_storage::MemDisk;

    fn handler(token: &[u8], sessions_max: usize) -> Handler {
        let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
        let engine = Engine::create(Arc::new(MemDisk::new()), opts).unwrap();
        let config = HandlerConfig { token: token.to_vec(), sessions_max, ..Default::default() };
        Handler::new(Arc::new(engine), config).unwrap()
    }

    fn req(body: RequestBody) -> Request {
        Request::new(body)
    }

    fn hello(token: &[u8]) -> Request {
        req(RequestBody::Hello(Hello::new(token.to_vec(), "test")))
    }

    fn error_code(r: &Response) -> Option<ErrorCode> {
        match &r.reply.body {
            ReplyBody::Error { code, .. } => Some(*code),
            _ => None,
        }
    }

    fn refusal(r: &Response) -> Option<RefusedCode> {
        match &r.reply.body {
            ReplyBody::CommitRefused { code, .. } => Some(*code),
            _ => None,
        }
    }

    fn open(h: &Handler, token: &[u8]) -> Session {
        let mut s = h.open_session().unwrap();
        let r = h.handle(&mut s, hello(token));
        assert!(matches!(r.reply.body, ReplyBody::HelloOk(_)), "{r:?}");
        s
    }

    fn item_class() -> ClassDesc {
        ClassDesc::new("t.Item", 8, &[0], VarKind::None).unwrap()
    }

    fn commit(versions: Vec<(Oref, Vec<u8>)>, created: Vec<Vec<u8>>) -> Request {
        req(RequestBody::Commit(Commit {
            reads: vec![],
            versions: versions.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
            created: created.into_iter().map(Bytes::from).collect(),
        }))
    }

    #[test]
    fn hello_opens_the_session_and_says_what_the_client_needs() {
        let h = handler(b"", 4);
        let mut s = h.open_session().unwrap();
        let r = h.handle(&mut s, hello(b""));
        let ReplyBody::HelloOk(info) = r.reply.body else { panic!("{r:?}") };
        assert_eq!(info.version, WIRE_VERSION);
        assert_eq!(info.page_size, h.engine().page_size());
        assert_eq!(info.root, builtin::ROOT);
        assert_eq!(info.client_id, ClientId(1));
        assert_eq!(s.client_id(), Some(ClientId(1)));
        assert_eq!(s.client_name(), Some("test"));
        let s2 = open(&h, b"");
        assert_eq!(s2.client_id(), Some(ClientId(2)));
    }

    #[test]
    fn requests_before_hello_close_the_session() {
        let h = handler(b"", 4);
        let mut s = h.open_session().unwrap();
        let r = h.handle(&mut s, req(RequestBody::Fetch { page: PageId::FIRST }));
        assert_eq!(error_code(&r), Some(ErrorCode::HelloRequired));
        assert!(r.close && s.is_closed());
        let r = h.handle(&mut s, hello(b""));
        assert_eq!(error_code(&r), Some(ErrorCode::UnexpectedMessage));
    }

    #[test]
    fn wrong_tokens_and_versions_are_refused() {
        let h = handler(b"secret", 4);
        for token in [&b""[..], b"secreT", b"secret!"] {
            let mut s = h.open_session().unwrap();
            let r = h.handle(&mut s, hello(token));
            assert_eq!(error_code(&r), Some(ErrorCode::Unauthenticated));
            assert!(r.close);
        }
        assert_eq!(h.stats().auth_failures, 3);
        let mut s = h.open_session().unwrap();
        let mut future = Hello::new(&b"secret"[..], "future");
        future.min_version = WIRE_VERSION + 1;
        future.max_version = WIRE_VERSION + 5;
        let r = h.handle(&mut s, req(RequestBody::Hello(future)));
        assert_eq!(error_code(&r), Some(ErrorCode::UnsupportedVersion));
        let mut s = open(&h, b"secret");
        let r = h.handle(&mut s, hello(b"secret"));
        assert_eq!(error_code(&r), Some(ErrorCode::UnexpectedMessage));
        assert!(r.close);
    }

    #[test]
    fn sessions_are_bounded_and_give_their_slot_back() {
        let h = handler(b"", 2);
        let a = h.open_session().unwrap();
        let _b = h.open_session().unwrap();
        assert_eq!(h.open_session().unwrap_err(), HandlerError::Busy { max: 2 });
        assert_eq!(error_code(&Response::keep(h.busy_reply())), Some(ErrorCode::Busy));
        drop(a);
        let _c = h.open_session().unwrap();
        let st = h.stats();
        assert_eq!((st.sessions_open, st.sessions_opened, st.sessions_refused), (2, 3, 1));
    }

    #[test]
    fn fetch_returns_the_engine_page_or_no_such_page() {
        let h = handler(b"", 4);
        let mut s = open(&h, b"");
        let r = h.handle(&mut s, req(RequestBody::Fetch { page: PageId::FIRST }));
        let ReplyBody::Page { page, bytes } = r.reply.body else { panic!() };
        assert_eq!(page, PageId::FIRST);
        assert_eq!(&bytes[..], &h.engine().fetch(PageId::FIRST).unwrap()[..]);
        let r = h.handle(&mut s, req(RequestBody::Fetch { page: PageId::new(99).unwrap() }));
        assert_eq!(error_code(&r), Some(ErrorCode::NoSuchPage));
        assert!(!r.close && s.is_open(), "a missing page does not end the session");
    }

    #[test]
    fn commits_are_acknowledged_or_refused_with_their_code() {
        let h = handler(b"", 4);
        let mut s = open(&h, b"");
        let class_obj = item_class().to_class_object();
        let mut inst = item_class().new_object(RawRef::tagged_word(0), 0);
        put_u32(&mut inst, 4, RawRef::tagged_word(1)); // points at itself
        let r = h.handle(&mut s, commit(vec![], vec![class_obj, inst]));
        let ReplyBody::CommitOk { created, .. } = r.reply.body else { panic!("{r:?}") };
        let (class, obj) = (created[0], created[1]);

        let good = item_class().new_object(class.raw(), 0);
        let cases: Vec<(Request, RefusedCode)> = vec![
            (commit(vec![(obj, vec![0; 8])], vec![]), RefusedCode::Reshape),
            (commit(vec![(obj, vec![0; 16])], vec![]), RefusedCode::Reshape),
            (commit(vec![(class, good.clone())], vec![]), RefusedCode::ClassIsImmutable),
            (
                commit(vec![(obj, good.clone()), (obj, good.clone())], vec![]),
                RefusedCode::Duplicate,
            ),
            (commit(vec![], vec![item_class().new_object(obj.raw(), 0)]), RefusedCode::NotAClass),
            (commit(vec![], vec![vec![0; 4]]), RefusedCode::NotAClass),
            (
                commit(
                    vec![],
                    vec![{
                        let mut o = good.clone();
                        put_u32(
                            &mut o,
                            4,
                            Oref::new(PageId::new(50).unwrap(), thor_core::Oid::new(1).unwrap())
                                .raw(),
                        );
                        o
                    }],
                ),
                RefusedCode::BadReference,
            ),
            (
                commit(
                    vec![],
                    vec![{
                        let mut o = good.clone();
                        o.extend_from_slice(&[0; 4]);
                        o
                    }],
                ),
                RefusedCode::BadShape,
            ),
            (commit(vec![], vec![vec![0; 9000]]), RefusedCode::ObjectTooLarge),
            (
                commit(
                    vec![(
                        Oref::new(PageId::new(40).unwrap(), thor_core::Oid::new(0).unwrap()),
                        good.clone(),
                    )],
                    vec![],
                ),
                RefusedCode::NoSuchObject,
            ),
        ];
        let before = h.engine().stats().commits;
        for (i, (request, code)) in cases.into_iter().enumerate() {
            let r = h.handle(&mut s, request);
            assert_eq!(refusal(&r), Some(code), "case {i}: {r:?}");
            assert!(!r.close);
        }
        assert_eq!(h.engine().stats().commits, before);
        assert_eq!(
            refused_code(&InvalidCommit::TooLarge { what: "x", got: 2, max: 1 }),
            RefusedCode::TooLarge
        );
    }

    #[test]
    fn goodbye_acks_and_closes_and_stats_count() {
        let h = handler(b"", 4);
        let mut s = open(&h, b"");
        let mut r = req(RequestBody::Abort);
        r.piggyback.acks = vec![builtin::ROOT];
        r.piggyback.discarded = vec![PageId::FIRST, PageId::FIRST];
        assert_eq!(h.handle(&mut s, r).reply.body, ReplyBody::Ack);
        let r = h.handle(&mut s, req(RequestBody::Stats));
        let ReplyBody::Stats(st) = r.reply.body else { panic!() };
        assert_eq!((st.requests, st.acks_received, st.discarded_pages_received), (3, 1, 2));
        let r = h.handle(&mut s, req(RequestBody::Goodbye));
        assert_eq!(r.reply.body, ReplyBody::Ack);
        assert!(r.close && s.is_closed());
        let e = WireError::UnknownType(0x77);
        let reply = h.protocol_error(Some(&mut s), &e);
        assert!(matches!(reply.body, ReplyBody::Error { code: ErrorCode::UnknownType, .. }));
        assert_eq!(h.stats().protocol_errors, 1);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let engine =
            Arc::new(Engine::create(Arc::new(MemDisk::new()), EngineOptions::default()).unwrap());
        for config in [
            HandlerConfig { token: vec![0; TOKEN_BYTES_MAX + 1], ..Default::default() },
            HandlerConfig { sessions_max: 0, ..Default::default() },
            HandlerConfig { max_frame_bytes: 100, ..Default::default() },
        ] {
            assert!(matches!(
                Handler::new(engine.clone(), config),
                Err(HandlerError::BadConfig(_))
            ));
        }
        assert!(
            same_token(b"abc", b"abc") && !same_token(b"abc", b"abd") && !same_token(b"", b"a")
        );
    }
}
