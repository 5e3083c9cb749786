//! A session that survives a broken connection: timeouts, reconnecting with backoff, keeping
//! the cache where the server can prove it current, and learning the outcome of a commit
//! whose answer was lost.
//!
//! # Timeouts
//!
//! Nothing a session does waits for ever by default. Connecting and the handshake take at
//! most [`SessionConfig::connect_timeout`](crate::SessionConfig::connect_timeout); a request
//! waits for its reply at most [`SessionConfig::request_timeout`](crate::SessionConfig::request_timeout)
//! (a fetch, a refresh: a server that answers at all answers these in milliseconds), a commit
//! at most [`SessionConfig::commit_timeout`](crate::SessionConfig::commit_timeout) (it waits
//! for the log's fsync, and maybe behind a full commit queue), a backup for ever (it copies
//! the database). A timeout breaks the connection like any other fault
//! (`TransportError::TimedOut`).
//!
//! # Reconnecting
//!
//! A session made with a [`Dialer`] ([`Session::connect`](crate::Session::connect); `thor::connect`
//! makes one) reconnects by itself when its connection breaks: the server restarted, it was
//! stopped, a request timed out, the network failed. It dials again with bounded, jittered
//! exponential backoff ([`ReconnectConfig`]), at most for `give_up_after`; the dialer is
//! told the attempt's number, so that one that knows several addresses of a server can try
//! each in turn. A session of a replicated server ([`Session::connect_group`](crate::Session::connect_group))
//! dials its group instead ([`crate::group`]): it follows a replica's `Error(NotLeader)` to the
//! leader it names (also when a request is answered so: the leader lost its group), else
//! tries the next replica, and fails with [`ClientError::NoLeader`] if none served within
//! `give_up_after`. What the application sees:
//!
//! ```text
//!   connection breaks ──► the open transaction is aborted in the cache
//!        │                (the call that noticed, and every later one of that transaction,
//!        │                 fails with ClientError::Conflict { cause: Disconnected })
//!        ▼
//!   dial, Resume ──► cache kept (what changed meanwhile invalidated) or dropped
//!        │
//!        ▼  commit in flight?
//!   Committed ──► commit() returns Ok as if the answer had come
//!   NotCommitted ──► commit() returns Conflict { cause: Disconnected }: run it again
//!   Unknown ──► commit() returns CommitUnknown; Session::commit_outcome asks again later
//! ```
//!
//! [`Session::run`](crate::Session::run) retries a transaction after `Disconnected` like after
//! any conflict, and never after `CommitUnknown` unless
//! [`SessionConfig::run_retries_unknown`](crate::SessionConfig::run_retries_unknown) says so.
//! [`Ref`](crate::Ref)s stay valid: a reference is an oref and a hint of where the object is
//! in the cache, and a hint that no longer holds is looked up again by oref.
//!
//! # Keeping the cache
//!
//! Every reply of a version-5 server carries a *seen stamp*: the newest change it had made
//! visible, and whether every invalidation up to it has been sent to this client
//! (`thor_wire::resume`). The session keeps the newest stamp (`high`) and the newest one
//! that came with every invalidation (`complete`). On a new connection it sends `Resume`
//! with both, the pages it caches anything of and its session key; the server keeps the
//! cache only if both stamps are points of its own history of changes, and then sends the
//! invalidations of everything that changed on those pages since `complete`; otherwise the
//! session drops every cached copy. thor-server-core's `core/resume.rs` has the argument why this is
//! sound, including a restarted server and a database replaced by a backup. Page-based
//! commit modes keep page images beside the cache: a session in one of them drops its cache
//! on a reconnect.
//!
//! A view of an object that the server could not vouch for (the cache was dropped while the
//! view lived) keeps its bytes until the view is dropped; the transaction it belonged to was
//! aborted, and a new transaction refuses to start while such a view lives
//! ([`ClientError::Usage`]), since its stale bytes would be read without the server knowing.
//!
//! # The lost commit
//!
//! A commit that writes, of a session that reconnects, to a version-5 server carries an id
//! the session chose at random; the server keeps it in the commit's log record. When the answer does not come, the session
//! reconnects and asks with `Resume`; the server closes the old connection (so nothing of it
//! can commit later), waits for what it had prepared, and looks for the id in its history.
//! A commit of a page-based mode, or to an older server, has no id: its outcome is unknown. A
//! transaction that wrote nothing needs none: whatever became of its commit, it changed
//! nothing, so it is reported aborted (`Disconnected`) and run again.
//!
//! A two-phase commit over several servers ([`crate::Cluster`]) whose answers were lost is not
//! asked about: it is [`ClientError::CommitUnknown`], and each server's session reconnects by
//! itself at its next request.
//!
//! # Who does what
//!
//! Dialing, timeouts and the backoff between attempts are the session's (it is the driver).
//! What a new connection means for the protocol is the core's ([`crate::proto`]):
//! `ClientCore::adopt` checks the new `HelloOk` and forgets what was owed to the old
//! connection's server, `ClientCore::resume_body` decides what of the cache to offer and builds
//! the `Resume`, and `ClientCore::resumed` applies the answer. A driver without a session uses
//! the same steps through `ClientCore::disconnected` and `ClientCore::resume`.

use std::time::{Duration, Instant};

use thor_wire::limits::RESUME_PAGES_MAX;
use thor_wire::{
    CacheVerdict, ErrorCode, Outcome, ReplyBody, RequestBody, Resume, ServerInfo, Transport,
    TransportError,
};

use super::{Inner, unexpected};
use crate::error::{ClientError, ConflictCause};
use crate::group::{GroupDialer, Next};
use crate::limits::{RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN, RECONNECT_GIVE_UP_DEFAULT};
use crate::proto::{ClientCore, splitmix64};

/// Opens a new connection to the session's server. It is called with the attempt's number
/// (0 first, counting from the break), so that a dialer that knows several addresses of a
/// server can try each in turn.
pub type Dialer = Box<dyn FnMut(u32) -> Result<Box<dyn Transport>, ClientError> + Send>;

/// How a session opens its connections: one dialer of the application's, or a replica group
/// that the session follows to its leader.
pub(crate) enum Redial {
    /// The application's dialer ([`Session::connect`](crate::Session::connect)).
    One(Dialer),
    /// A replica group ([`Session::connect_group`](crate::Session::connect_group)).
    Group(GroupDialer),
}

impl Redial {
    /// Opens a connection: attempt `attempt` since the break.
    fn dial(&mut self, attempt: u32) -> Result<Box<dyn Transport>, ClientError> {
        match self {
            Redial::One(d) => d(attempt),
            Redial::Group(g) => g.dial(),
        }
    }

    /// The connection opened last serves the session.
    fn served(&mut self) {
        if let Redial::Group(g) = self {
            g.route_mut().served();
        }
    }

    /// The connection opened last (or serving) failed with `e`: where the next attempt goes,
    /// and whether it may go at once.
    pub(super) fn failed(&mut self, e: &ClientError) -> Next {
        match self {
            Redial::One(_) => Next::Another,
            Redial::Group(g) => g.route_mut().failed(e),
        }
    }
}

/// How a session reconnects after its connection broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectConfig {
    /// How long to keep trying before the call that noticed the break fails with the last
    /// error; the next call tries again. The default, a minute, outlasts a server's restart
    /// (recovery replays the log since the last checkpoint) without hanging a program that
    /// should report the outage.
    pub give_up_after: Duration,
    /// The wait after the first failed attempt; it doubles with each further one, up to
    /// `backoff_max`, each a random point in its upper half, so that the clients of a
    /// restarted server do not all come back in the same millisecond.
    pub backoff_min: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
}

impl Default for ReconnectConfig {
    fn default() -> Self {
        ReconnectConfig {
            give_up_after: RECONNECT_GIVE_UP_DEFAULT,
            backoff_min: RECONNECT_BACKOFF_MIN,
            backoff_max: RECONNECT_BACKOFF_MAX,
        }
    }
}

/// What became of a commit whose answer was lost ([`crate::Session::commit_outcome`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// It committed at this LSN.
    Committed(thor_core::Lsn),
    /// It did not commit, and never will.
    NotCommitted,
    /// The server cannot tell (a restart after a clean shutdown, its history's bound, a
    /// storage failure, a commit without an id): read the objects the transaction wrote to
    /// find out.
    Unknown,
}

/// Counters of a session's reconnects ([`crate::Session::reconnect_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReconnectStats {
    /// Connections that broke.
    pub breaks: u64,
    /// Reconnects that succeeded.
    pub reconnects: u64,
    /// Dial attempts that failed.
    pub failed_attempts: u64,
    /// Time from a break to the reconnected session, summed.
    pub reconnect_time: Duration,
    /// The longest of those.
    pub reconnect_time_max: Duration,
    /// Resumes whose server kept the cache.
    pub caches_kept: u64,
    /// Resumes whose server could not tell, so that the cache was dropped.
    pub caches_dropped: u64,
    /// Installed objects in the cache just before the last resume.
    pub last_objects_before: u64,
    /// Of those, still installed after it.
    pub last_objects_kept: u64,
    /// All resumes: installed objects before, and kept.
    pub objects_before: u64,
    /// See `objects_before`.
    pub objects_kept: u64,
    /// Transactions aborted by a break.
    pub aborted: u64,
    /// Lost commits whose outcome was learned: committed, not committed, unknown.
    pub outcomes: [u64; 3],
    /// A replica group's `Error(NotLeader)` answers, at the handshake or to a request, that
    /// sent the session on to the leader they named or to the next replica
    /// ([`crate::group`]). Always 0 for a session that does not dial a group.
    pub redirects: u64,
    /// Connections that served at another replica of the group than the one that served
    /// before: the leader changed (or the session was sent elsewhere).
    pub failovers: u64,
}

/// Whether a failed dial is worth trying again: the server may come back, or have room.
fn transient(e: &ClientError) -> bool {
    match e {
        ClientError::Transport(TransportError::Refused { code, .. }) => {
            !matches!(code, ErrorCode::Unauthenticated | ErrorCode::UnsupportedVersion)
        }
        ClientError::Transport(_) => true,
        ClientError::Server { code, .. } => code.closes_connection(),
        _ => false,
    }
}

/// Whether a transport error left the connection as it was: nothing was sent (a request over
/// a limit, too many in flight) or nothing was waited for.
pub(super) fn unsent(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::BadRequest(_)
            | TransportError::TooManyInFlight { .. }
            | TransportError::NothingInFlight
    )
}

/// Whether a reply's error means the connection is gone for a reason a new connection cures
/// (the server idled it out, is shutting down, or dropped the session's state; a replica no
/// longer leads its group).
pub(super) fn closes_for_reconnect(body: &ReplyBody) -> bool {
    matches!(
        body,
        ReplyBody::Error {
            code: ErrorCode::Timeout
                | ErrorCode::ShuttingDown
                | ErrorCode::SessionExpired
                | ErrorCode::NotLeader,
            ..
        }
    )
}

/// The wait after failed attempt `attempt` (from 0): doubling from `backoff_min` up to
/// `backoff_max`, a random point (`jitter`'s next) in its upper half.
pub(super) fn backoff(r: &ReconnectConfig, attempt: u32, jitter: &mut u64) -> Duration {
    let min = r.backoff_min.as_nanos() as u64;
    let max = (r.backoff_max.as_nanos() as u64).max(min);
    let cap = min.saturating_mul(1u64 << attempt.min(62)).min(max);
    let half = cap / 2;
    Duration::from_nanos(cap - half + splitmix64(jitter) % (half + 1))
}

/// The first connection of a session of a replica group: dials as a reconnect does (the
/// leader named by a `NotLeader` at once, else the next replica after the backoff) for at
/// most `r.give_up_after`.
pub(super) fn first_in_group(
    group: &mut GroupDialer,
    r: &ReconnectConfig,
) -> Result<Box<dyn Transport>, ClientError> {
    let started = Instant::now();
    let mut jitter = random_u64();
    let mut attempt = 0u32;
    let mut redirected = false;
    loop {
        let e = match group.dial() {
            Ok(t) => {
                group.route_mut().served();
                return Ok(t);
            }
            Err(e) if transient(&e) => e,
            Err(e) => return Err(e),
        };
        let next = group.route_mut().failed(&e);
        let at_once = next == Next::Redirected && !redirected;
        redirected = at_once;
        let wait = if at_once { Duration::ZERO } else { backoff(r, attempt, &mut jitter) };
        if started.elapsed() + wait > r.give_up_after {
            let (attempts, waited) = (attempt + 1, started.elapsed());
            return Err(ClientError::NoLeader { attempts, waited, last: Box::new(e) });
        }
        std::thread::sleep(wait);
        attempt = attempt.saturating_add(1);
    }
}

/// A random 64-bit word: the process's hasher keys (random per process) over the time and a
/// counter. For session keys and the seed of commit ids, not for secrets.
pub(super) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

/// What a reconnect brought.
pub(super) struct Resumed {
    /// What became of the commit asked about (`None`: none was asked, or the server could not
    /// be asked).
    pub outcome: Option<Outcome>,
}

impl Inner {
    /// The timeout for a request with `body`: a commit waits for an fsync (and maybe a queue),
    /// a backup copies the database, anything else should be quick. Set on the transport
    /// when it changes.
    pub(super) fn timeout_for(&mut self, body: &RequestBody) {
        let t = match body {
            RequestBody::Commit(_)
            | RequestBody::Prepare(_)
            | RequestBody::PageCommit(_)
            | RequestBody::PageRecords(_) => self.cfg.commit_timeout,
            RequestBody::Backup { .. } => None,
            _ => self.cfg.request_timeout,
        };
        if self.timeout_now != Some(t) {
            self.transport.set_timeout(t);
            self.timeout_now = Some(t);
        }
    }

    /// The connection broke (`cause` says how) outside a commit: the open transaction is
    /// aborted, and the session reconnects. Returns the error for the caller: a conflict
    /// (`Disconnected`) if it reconnected, so that the transaction runs again; the error that
    /// stopped it otherwise.
    pub(super) fn lost(&mut self, cause: ClientError) -> ClientError {
        if self.dialer.is_none() {
            // The session ends with its connection: the transport reports it from now on.
            return cause;
        }
        self.break_connection();
        self.turned_away(&cause);
        let message = format!(
            "the connection to the server broke ({cause}); the session reconnected and aborted \
             the transaction: run it again"
        );
        if self.in_transaction && self.doomed.is_none() {
            self.core.pinned(ClientCore::abort_local);
            self.stats.conflicts += 1;
            self.reconnect.aborted += 1;
            self.doomed = Some(message.clone());
        }
        match self.reconnect(None) {
            Ok(_) => ClientError::Conflict { cause: ConflictCause::Disconnected, message },
            Err(e) => e,
        }
    }

    /// The serving connection ended with `cause`: a group's `Error(NotLeader)` sends the next
    /// attempt to the leader it names (or the next replica), and counts.
    pub(super) fn turned_away(&mut self, cause: &ClientError) {
        if crate::group::not_leader(cause).is_some()
            && let Some(d) = self.dialer.as_mut()
        {
            d.failed(cause);
        }
    }

    /// Marks the connection broken (the next request reconnects first).
    pub(super) fn break_connection(&mut self) {
        if !self.broken {
            self.broken = true;
            self.reconnect.breaks += 1;
            self.broke_at = Instant::now();
        }
        self.ahead = None;
    }

    /// Reconnects if the connection is broken (and the session can), before a request.
    pub(super) fn ensure_connected(&mut self) -> Result<(), ClientError> {
        if !self.broken {
            return Ok(());
        }
        if self.dialer.is_none() {
            return Err(ClientError::Transport(TransportError::Broken));
        }
        self.reconnect(None).map(|_| ())
    }

    /// Dials until a new connection resumes the session, with jittered exponential backoff,
    /// for at most [`ReconnectConfig::give_up_after`]; asks about `commit` if given (or about
    /// the commit still unresolved from an earlier break). Fails with the last error, or at
    /// once with one that another attempt would not cure (a wrong token, another server).
    pub(super) fn reconnect(&mut self, commit: Option<u64>) -> Result<Resumed, ClientError> {
        debug_assert!(self.broken, "reconnect after a break");
        let started = Instant::now();
        let give_up = self.cfg.reconnect.give_up_after;
        let mut attempt = 0u32;
        // Whether the last attempt went at once to a leader a replica named: the next one
        // waits, so that replicas naming each other (an election under way) cannot spin.
        let mut redirected = false;
        loop {
            let dialer = self.dialer.as_mut().expect("callers check for a dialer");
            let tried = dialer.dial(attempt).and_then(|t| self.adopt(t, commit));
            match tried {
                Ok(r) => {
                    self.dialer.as_mut().expect("dialed through it").served();
                    let took = self.broke_at.elapsed();
                    let s = &mut self.reconnect;
                    s.reconnects += 1;
                    s.reconnect_time += took;
                    s.reconnect_time_max = s.reconnect_time_max.max(took);
                    return Ok(r);
                }
                Err(e) if transient(&e) => {
                    self.reconnect.failed_attempts += 1;
                    self.broken = true;
                    let dialer = self.dialer.as_mut().expect("dialed through it");
                    let group = matches!(dialer, Redial::Group(_));
                    let at_once = dialer.failed(&e) == Next::Redirected && !redirected;
                    redirected = at_once;
                    let r = self.cfg.reconnect;
                    let wait = if at_once {
                        Duration::ZERO
                    } else {
                        backoff(&r, attempt, &mut self.core.jitter)
                    };
                    if started.elapsed() + wait > give_up {
                        if group {
                            let (attempts, waited) = (attempt + 1, started.elapsed());
                            return Err(ClientError::NoLeader {
                                attempts,
                                waited,
                                last: Box::new(e),
                            });
                        }
                        return Err(e);
                    }
                    std::thread::sleep(wait);
                    attempt = attempt.saturating_add(1);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes a new connection: checks that it reached the same database's server, then
    /// resumes the session on it.
    fn adopt(
        &mut self,
        transport: Box<dyn Transport>,
        commit: Option<u64>,
    ) -> Result<Resumed, ClientError> {
        self.core.adopt(*transport.server())?;
        self.transport = transport;
        self.broken = false;
        self.timeout_now = None;
        let commit = commit.or(self.unresolved);
        match self.resume(commit) {
            Ok(r) => Ok(r),
            Err(e) => {
                self.break_connection();
                Err(e)
            }
        }
    }

    /// Resumes the session on the new connection (see the module documentation).
    fn resume(&mut self, commit: Option<u64>) -> Result<Resumed, ClientError> {
        let before = self.installed_objects();
        let Some(resume) = self.core.resume_body(commit, before) else {
            return Ok(Resumed { outcome: commit.map(|_| Outcome::Unknown) });
        };
        self.timeout_for(&RequestBody::Abort);
        let sent = self.send_raw(resume, None);
        let (reply, _) = sent.and_then(|()| self.recv_raw()).map_err(ClientError::Transport)?;
        let r = match reply.body {
            ReplyBody::Resumed(r) => r,
            other => return Err(unexpected(other)),
        };
        self.core.resumed(&r, commit, before);
        Ok(Resumed { outcome: r.outcome })
    }
}

impl ClientCore {
    /// Takes a new connection whose server said `new` (`HelloOk`): checks that it is the same
    /// database's server in the same commit mode, and adopts what it says (version, frame
    /// limit, demotions). Acknowledgements and demotions owed to the old connection's server
    /// are forgotten (its invalid set went with it), and a read-ahead in flight is gone.
    pub fn adopt(&mut self, new: ServerInfo) -> Result<(), ClientError> {
        let old = self.info;
        if new.server_id != old.server_id || new.page_size != old.page_size || new.root != old.root
        {
            return Err(ClientError::ServerChanged(format!(
                "the server at this address is server {} with {}-byte pages, this session's was \
                 server {} with {}-byte pages",
                new.server_id.0, new.page_size, old.server_id.0, old.page_size
            )));
        }
        if new.commit_mode != old.commit_mode {
            return Err(ClientError::ServerChanged(format!(
                "the server now commits in mode {:?}, this session's in {:?}",
                new.commit_mode, old.commit_mode
            )));
        }
        self.info = new;
        self.ahead = None;
        let demote = if new.demotions { self.cfg.demote_pages } else { 0 };
        self.cache.set_demotion(demote);
        // Demoted pages the old connection's server wanted are not this one's business.
        self.cache.demotions_answered(&[]);
        if new.version < 4 {
            self.prefetch = None;
        }
        // Acknowledgements of invalidations the old connection's server sent: that server's
        // invalid set is gone.
        self.cache.forget_acks();
        Ok(())
    }

    /// The `Resume` to send on a new connection, asking about `commit` if given; `before` is
    /// the installed objects before (for the counters). The cache is dropped first where the
    /// server could not vouch for it: its copies are kept beside it (the page modes), no stamp
    /// came with every invalidation yet, or its pages do not fit the request. `None` for a
    /// server that cannot resume (before version 5): the cache is dropped, and a commit asked
    /// about has an unknown outcome.
    pub(crate) fn resume_body(&mut self, commit: Option<u64>, before: u64) -> Option<RequestBody> {
        if self.info.version < 5 {
            // No resume: the server cannot tell what changed, nor what became of a commit.
            self.drop_cache();
            self.count_resume(false, before);
            return None;
        }
        if self.path.keeps_pages() {
            // The page modes' images and recovery buffer are kept beside the cache.
            self.drop_cache();
        }
        let mut pages = self.cache.cached_pages();
        let fits = pages.len() <= RESUME_PAGES_MAX
            && 128 + 4 * pages.len() <= self.info.max_frame_bytes.saturating_sub(4096);
        if self.seen.is_none() || !fits {
            if !pages.is_empty() {
                self.drop_cache();
            }
            pages.clear();
        }
        Some(RequestBody::Resume(Resume { key: self.key, seen: self.seen, commit, pages }))
    }

    /// Applies the server's answer to `Resume` (which asked about `commit`; `before` as for
    /// [`ClientCore::resume_body`]): the cache dropped if the server could not vouch for it,
    /// the counters, and the outcome of the commit whose answer was lost.
    pub(crate) fn resumed(&mut self, r: &thor_wire::Resumed, commit: Option<u64>, before: u64) {
        if r.cache == CacheVerdict::Dropped {
            self.drop_cache();
        }
        self.count_resume(r.cache != CacheVerdict::Dropped, before);
        if let (Some(_), Some(o)) = (commit, &r.outcome) {
            let k = match o {
                Outcome::Committed { .. } => 0,
                Outcome::NotCommitted => 1,
                Outcome::Unknown => 2,
            };
            self.reconnect.outcomes[k] += 1;
        }
        if commit.is_some() && commit == self.unresolved {
            self.unresolved = None;
            self.last_outcome = r.outcome.as_ref().map(outcome_of);
        }
    }

    /// Counts a resume and the installed objects it kept of `before`.
    fn count_resume(&mut self, kept: bool, before: u64) {
        let after = self.installed_objects();
        let s = &mut self.reconnect;
        if kept {
            s.caches_kept += 1;
        } else {
            s.caches_dropped += 1;
        }
        s.last_objects_before = before;
        s.last_objects_kept = after.min(before);
        s.objects_before += before;
        s.objects_kept += after.min(before);
    }

    /// Installed objects in the cache now (a walk of every frame).
    pub(crate) fn installed_objects(&self) -> u64 {
        let o = self.cache.occupancy();
        (o.intact_installed + o.compacted_installed) as u64
    }

    /// Drops every cached copy: the server cannot vouch for them. Objects pinned by views
    /// leave when the views go; until then no transaction may start (`Inner::begin`).
    fn drop_cache(&mut self) {
        self.pinned(|core| {
            core.cache.invalidate_all();
        });
        // The acknowledgements this queued are for invalidations no server sent.
        self.cache.forget_acks();
        self.stale_views = self.views.iter().any(|&v| v != crate::proto::DEAD_VIEW);
        // The schema may have changed with the database (a restored backup).
        self.schema = None;
        self.class_words.iter_mut().for_each(|w| *w = 0);
        let path = self.path;
        path.cache_dropped(self);
    }
}

/// The public form of a server's outcome.
pub(super) fn outcome_of(o: &Outcome) -> CommitOutcome {
    match o {
        Outcome::Committed { lsn, .. } => CommitOutcome::Committed(*lsn),
        Outcome::NotCommitted => CommitOutcome::NotCommitted,
        Outcome::Unknown => CommitOutcome::Unknown,
    }
}
