//! Sessions and transactions.
//!
//! A [`Session`] is one client's connection to one server together with its cache. It is
//! always inside a transaction: the first access starts one, [`Session::commit`] or
//! [`Session::abort`] ends it and the next access starts the next (Thor's model,
//! `papers/thor-ecoop99.txt` section 2).
//!
//! ```text
//!   get(ref) ──hit──► view (pinned) ──► get(field) / set(field, v)
//!      │ miss                                 │ first write: undo copy, modified mark
//!      ▼                                      ▼
//!   fetch page: send ─► free a frame ─► recv ─► install     commit: ship new versions of
//!                                                           modified objects + created objects
//! ```
//!
//! The transaction's state lives in the cache (`thor_cache::txn`): its read set, its modified
//! objects with an undo copy of each taken at the first write ([`ClientCache::before_write`](thor_cache::ClientCache::before_write)),
//! and the objects it created. The session drives it through that small interface and never
//! touches the cache's tables. Commit ships only objects, never pages: the new versions of
//! modified objects and the created objects as [`ClientCache::export`](thor_cache::ClientCache::export) writes them, with
//! references to created objects tagged by their index in the commit. Abort puts the undo
//! copies back and drops the created objects ([`ClientCache::abort_done`](thor_cache::ClientCache::abort_done)).
//!
//! # Concurrency control (CLOCC)
//!
//! Transactions are optimistic (`papers/thor-ecoop99.txt` section 4): a transaction runs on
//! cached copies without asking anyone, and the server validates it at commit against its read
//! set (the cache's `reads`, which the hit path already keeps) and its writes. Read-only
//! transactions are sent too: a read of a stale copy is as wrong as a write. The client's share:
//!
//! ```text
//!   every request  ──► piggyback: acks (invalidations applied)  +  pages discarded
//!   every reply    ◄── invalidations: applied before the body is used
//!                        │ hit an object the open transaction read or wrote?
//!                        ▼
//!                      abort in the cache now (invalidated modified objects are discarded,
//!                      not restored); the next slow-path access or commit returns
//!                      ClientError::Conflict { cause: Invalidated }
//! ```
//!
//! - **Invalidations** ride on every reply; the cache drops the objects and
//!   says whether the open transaction used one. If it did, the transaction is *doomed*: it is
//!   aborted in the cache at once (so its stale copies are gone and the acknowledgements can
//!   go out), and the application learns of it at its next slow-path access or commit, which
//!   return [`ClientError::Conflict`]; hits in between stay as cheap as ever. A commit reply
//!   is the exception: a `CommitOk` means the server validated the transaction, so changes
//!   announced with it come after it in the serial order.
//! - **Acknowledgements and discarded pages** ride on every request, within
//!   what the server's frame limit leaves after the body. If a request cannot be sent they go
//!   back to the cache, to ride on the next one: an acknowledgement must not be lost, or the
//!   object stays in the server's invalid set and every commit that reads it is refused. (Once
//!   a request is sent, a transport failure ends the session: the server's state for it goes
//!   with the connection.)
//! - **Refusals** (`Stale`, `Conflict`, `TooOld`) become [`ClientError::Conflict`], the
//!   transaction aborted. [`Session::run`] runs a transaction and retries it on conflicts,
//!   with bounded, jittered exponential backoff.
//! - **An idle client** would hear of invalidations only at its next request, so its next
//!   transaction could run on copies long stale and be refused at commit. With
//!   [`SessionConfig::refresh_after`], a transaction whose first access comes that long after
//!   the last reply first makes a cheap round trip (an `Abort`, which the server answers with
//!   `Ack` and nothing else) to collect them.
//!
//! # The protocol core and its driver
//!
//! The protocol is not the session's own: it lives in a sans-I/O state machine,
//! [`ClientCore`] ([`crate::proto`]), which owns the cache and every piece of protocol state
//! (the transaction, doomed or not, the acknowledgements and contention to report, the stamps,
//! commit ids, the refresh decision, backoff jitter) and never touches a transport, a clock or
//! a thread. The session's state, `Inner`, is that core plus what drives it: the transport,
//! the clock's origin (the core's `now_ns` is the time since the session was made), reply
//! timeouts and the dialer. `Inner` dereferences to its core, so the driver's code reads the
//! protocol state as its own fields. Sending is `ClientCore::request` then the transport
//! (`ClientCore::unsent` if it could not send); receiving is the transport's blocking `recv`
//! then `ClientCore::apply`. What stays in the session: the typed API (views, pins, classes,
//! the schema), the blocking loops of an access (resolve, fetch, install, again), prefetch's
//! and read-ahead's requests (their decisions are the core's), the commit path's round trips
//! (the page modes), reconnecting and resuming ([`reconnect`]), and two-phase commit's parts.
//!
//! # A broken connection
//!
//! Every request waits for its reply a bounded time ([`SessionConfig::request_timeout`],
//! [`SessionConfig::commit_timeout`]). A session made with a way to reconnect
//! ([`Session::connect`]) survives a broken connection: it reconnects with backoff, keeps its
//! cache where the server can prove the copies current, reports the open transaction aborted
//! ([`ConflictCause::Disconnected`], which [`Session::run`] retries) and learns the outcome of
//! a commit whose answer was lost. [`reconnect`] explains it.
//!
//! # Single-threaded by construction
//!
//! A session is `Send` but not `Sync`: its state sits in an `UnsafeCell` and every method takes
//! `&self`, so views (which borrow the session) can be held while other objects are read. Each
//! method borrows the state mutably for its own duration only and never calls back into
//! application code while doing so; views hold a pointer to their (pinned) object, not a borrow
//! of the state.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_cache::core::Need;
use thor_cache::{CacheError, CacheStats, PolicyConfig};
use thor_core::le::u32_at;
use thor_core::{
    ClassDesc, FormatError, Lsn, Oref, PageId, RawRef, ServerId, VarKind, builtin, large,
};
use thor_wire::{Prefetch, PrefetchHint, Reply, ReplyBody, RequestBody, ServerInfo, Transport};

use crate::error::{ClientError, ConflictCause};
use crate::proto::{ClientCore, DEAD_VIEW, PartOutcome, Seeds};

pub(crate) mod commit_path;
pub(crate) mod page_path;
pub mod reconnect;
use crate::latency::LatencyHistogram;
use crate::limits::{LARGE_PIECES_MAX, SLOW_PATH_ROUNDS_MAX};
use crate::pagemode::{PageModeStats, RecoveryConfig};
use crate::typed::{Any, Class, Field, FieldType, NoVar, Ref, Refs, VarPart, VarSpec};
use commit_path::{Built, Kept};
pub use reconnect::{CommitOutcome, Dialer, ReconnectConfig, ReconnectStats};

/// The root slot that holds the schema directory (the list of class objects). Applications
/// use slots `0..SCHEMA_SLOT`.
pub const SCHEMA_SLOT: usize = builtin::ROOT_SLOTS - 1;

/// Settings of a session.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Client cache size in bytes (frames and tables). The default is 64 MiB, as in the `thor`
    /// command.
    pub cache_bytes: usize,
    /// The cache manager. The default is HAC with the paper's settings
    /// ([`PolicyConfig::HAC`]), as in the `thor` command: it keeps the hot objects of a page
    /// rather than the whole page, so the same cache holds more of what a program uses
    /// (`docs/oo7.md` has the measurements). [`PolicyConfig::Fpc`] keeps whole pages.
    pub policy: PolicyConfig,
    /// Free cache frames while fetches are on the wire (the default) or in the foreground.
    pub background_replacement: bool,
    /// Most attempts [`Session::run`] makes at a transaction that keeps conflicting (0 counts
    /// as 1). The default, 10, lets a transaction through contention that aborts most
    /// attempts, and bounds what a hopeless one costs.
    pub run_attempts_max: u32,
    /// [`Session::run`]'s wait after the first conflict; it doubles with each further one, up to
    /// `run_backoff_max`. Each wait is jittered: a random point in its upper half, so clients
    /// that conflicted with each other do not retry in step. The default, 100 µs, is a few
    /// round trips on a local network: a conflict with one other transaction usually clears in
    /// that time.
    pub run_backoff_min: Duration,
    /// The longest wait between two attempts of [`Session::run`]. The default, 1 ms, is short
    /// because the server takes turns for the client (fair retries, thor-server-core's
    /// `core::fair`): a client that keeps losing on an object lines up for it, and its rivals'
    /// commits of it are held back at the server (at most 20 ms each) while it is its turn,
    /// so waiting longer here only hands the object to whoever is not waiting. With the
    /// earlier 50 ms, the client whose turn came was still backing off while one rival
    /// committed back to back: eight clients on one counter over loopback TCP got 6 to 6,816
    /// commits each in 5 s, and 16 clients on 4 counters 1 to 9,825; with 1 ms, 630 to 652
    /// and 399 to 698 (`thor bench clients --workload hot --clients 8`; issue 32). Against a
    /// server without fair retries (older than wire version 6, or with them turned off) a
    /// longer wait may serve better.
    pub run_backoff_max: Duration,
    /// How stale an idle client's copies may get: a transaction whose first access comes longer
    /// than this after the last reply from the server first makes a round trip that brings the
    /// invalidations pending for this client (`None`: never). A client that talks to the server
    /// more often than this never pays for it. The default, 1 s, costs an idle client one round
    /// trip per transaction that starts after a pause, and spares it running on copies that went
    /// stale during the pause only to be refused at commit.
    pub refresh_after: Option<Duration>,
    /// Pages the cache may hold for demotion when the server takes demoted pages (its page
    /// cache is exclusive): a page the cache drops intact is offered back to the server, and
    /// sent if the server wants it (`thor_cache::demote`). 0 never demotes. The default is
    /// [`thor_cache::limits::DEMOTE_PAGES_DEFAULT`].
    pub demote_pages: usize,
    /// The recovery buffer and page images of the page-based commit modes
    /// ([`crate::pagemode`]), used when the server's commit mode is one of them.
    pub recovery: RecoveryConfig,
    /// Most bytes a transaction may spill: when its modified and created objects outgrow the
    /// cache they are stolen to an unlinked file in the temporary directory ([`crate::spill`],
    /// `thor_cache::spill`) and read back when used again, rather than failing with
    /// `CacheError::Full`; past this cap the transaction fails with `CacheError::SpillFull`.
    /// 0 turns spilling off. The default is [`crate::limits::SPILL_BYTES_DEFAULT`]. Not
    /// used with the page-based commit modes, whose recovery buffer keeps pages in the cache.
    pub spill_bytes_max: u64,
    /// Further pages to ask for with each fetch (prefetch, `thor_wire::prefetch`): the server
    /// adds up to this many pages the client does not cache, chosen by `prefetch_hint`, to
    /// the reply, so that one round trip brings several pages. `Some(0)` turns prefetch off
    /// (plain `Fetch`); `None`, the default, is [`crate::limits::PREFETCH_PAGES_DEFAULT`] over
    /// a network transport and off over an in-process one ([`Transport::in_process`]), where
    /// a round trip costs little more than a page and prefetch did not pay. Prefetched pages
    /// take frames like fetched ones and are evicted like them; a session asks for at most an
    /// eighth of its frames at once
    /// ([`crate::limits::PREFETCH_FRAMES_DIVISOR`]), and fewer while its cache evicts
    /// prefetched pages before they are used ([`crate::prefetch`]'s window). Used with servers
    /// that speak version 4 and in `obj` commit mode (the page modes keep fetched pages'
    /// images and fetch as before). `docs/oo7.md` ("Prefetch (issue 16)") has the
    /// measurements behind the default.
    pub prefetch_pages: Option<u16>,
    /// How the server chooses the prefetched pages: the pages after the fetched one in
    /// creation order (the default: objects are clustered in creation order, and on OO7 it
    /// saves more round trips than references do) or the pages the fetched page refers to.
    pub prefetch_hint: PrefetchHint,
    /// Read ahead while prefetching with [`PrefetchHint::Following`]: when a fetch's reply
    /// brought at least half the pages it asked for, ask at once, before the application
    /// goes on, for the pages after them, so that their transfer overlaps the client's work
    /// on the pages it has (one such request in flight at most; see `Inner::read_ahead`).
    /// Off by default: over loopback TCP it changed cold OO7 T1 and T1- by less than their
    /// spread at 256 MiB, cost T6 and T1- a few percent, and at 4 MiB prefetched more pages
    /// that were evicted unused (`docs/oo7.md`, "Read-ahead"). It changes nothing where the
    /// session does not prefetch.
    pub read_ahead: bool,
    /// How long connecting to the server and the handshake may take together, for the
    /// session's first connection and each reconnect attempt (the dialer applies it:
    /// `thor::connect_with` does). The default is
    /// [`crate::limits::CONNECT_TIMEOUT_DEFAULT`].
    pub connect_timeout: Duration,
    /// How long a request other than a commit (a fetch, a refresh, `server_stats`) waits for
    /// its reply before the connection counts as broken (`None`: for ever). The default is
    /// [`crate::limits::REQUEST_TIMEOUT_DEFAULT`].
    pub request_timeout: Option<Duration>,
    /// How long a commit waits for its answer before the connection counts as broken and the
    /// outcome is asked for after reconnecting (`None`: for ever). The default is
    /// [`crate::limits::COMMIT_TIMEOUT_DEFAULT`].
    pub commit_timeout: Option<Duration>,
    /// How the session reconnects after a broken connection ([`reconnect`]; only a session
    /// made with a way to reconnect, [`Session::connect`]).
    pub reconnect: ReconnectConfig,
    /// Whether [`Session::run`] runs a transaction again after
    /// [`ClientError::CommitUnknown`]: its commit may have happened, so running it again may
    /// apply it twice. Off by default; turn it on for transactions whose second application
    /// does no harm (idempotent ones).
    pub run_retries_unknown: bool,
    /// Whether a transaction that wrote nothing commits at the client, without a message,
    /// when the last reply vouched for the state it read (`read_only`, wire version 7). On by
    /// default: such a transaction is serializable and never refused for a change it did not
    /// see, but it may read a state as old as the last reply (at most
    /// [`SessionConfig::refresh_after`] old when a transaction begins). Off, it is sent to
    /// the server and validated, and refused if anything it read has changed since.
    pub read_only_at_client: bool,
    /// Whether commits carry leaf deltas of the maps' point operations (wire version 8,
    /// `crate::leaflog`), so that the server can merge a commit that changed other keys of a
    /// map leaf than a concurrent one did instead of refusing it (`docs/clocc.md`, "Map
    /// leaves"). On by default; off, every such commit conflicts as on an older server (for
    /// measuring what the merge does).
    pub leaf_deltas: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            cache_bytes: 64 << 20,
            policy: PolicyConfig::HAC,
            background_replacement: true,
            run_attempts_max: 10,
            run_backoff_min: Duration::from_micros(100),
            run_backoff_max: Duration::from_millis(1),
            refresh_after: Some(Duration::from_secs(1)),
            demote_pages: thor_cache::limits::DEMOTE_PAGES_DEFAULT,
            recovery: RecoveryConfig::default(),
            spill_bytes_max: crate::limits::SPILL_BYTES_DEFAULT,
            prefetch_pages: None,
            prefetch_hint: PrefetchHint::Following,
            read_ahead: false,
            connect_timeout: crate::limits::CONNECT_TIMEOUT_DEFAULT,
            request_timeout: Some(crate::limits::REQUEST_TIMEOUT_DEFAULT),
            commit_timeout: Some(crate::limits::COMMIT_TIMEOUT_DEFAULT),
            reconnect: ReconnectConfig::default(),
            run_retries_unknown: false,
            read_only_at_client: true,
            leaf_deltas: true,
        }
    }
}

/// Counters of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientStats {
    /// Pages fetched (round trips for pages: a prefetch counts once).
    pub fetches: u64,
    /// Pages that came with a fetch by prefetch and were installed.
    pub pages_prefetched: u64,
    /// Prefetched pages not installed because the cache held the page already.
    pub prefetch_skipped: u64,
    /// Read-ahead requests sent ([`SessionConfig::read_ahead`]); each also counts in
    /// `fetches` once its reply is in.
    pub reads_ahead: u64,
    /// Read-aheads whose reply held the page of the miss that waited for it.
    pub reads_ahead_hit: u64,
    /// Time waiting for fetches (including the overlapped replacement).
    pub fetch_time: Duration,
    /// Transactions committed.
    pub commits: u64,
    /// Time committing (building the request and waiting for the server).
    pub commit_time: Duration,
    /// Transactions aborted (by the application or refused by the server).
    pub aborts: u64,
    /// Object accesses that missed the hit path (installation, fetch, or stale handle).
    pub slow_accesses: u64,
    /// Time converting objects to the in-cache format: installing them and swizzling.
    /// Estimated from a sample of the calls (`proto::ConversionClock`).
    pub conversion_time: Duration,
    /// Bytes of object versions shipped at commit.
    pub bytes_shipped: u64,
    /// Transactions aborted by concurrency control: refused by the server (`Stale`,
    /// `Conflict`, `TooOld`) or hit by an invalidation. Also counted in `aborts`.
    pub conflicts: u64,
    /// Attempts [`Session::run`] made again after a conflict.
    pub retries: u64,
    /// Invalidations applied (objects the server said changed).
    pub invalidations: u64,
    /// Round trips made only to collect invalidations, after [`SessionConfig::refresh_after`].
    pub refreshes: u64,
    /// Read-only transactions committed at the client without a message (`read_only`); also
    /// counted in `commits`.
    pub read_only_local: u64,
}

impl ClientStats {
    /// Conversion (install and swizzle) time per fetch, the HAC paper's measure of the cost of
    /// turning fetched pages into the in-cache format (section 4.4).
    pub fn conversion_time_per_fetch(&self) -> Duration {
        thor_cache::manager::per(self.conversion_time, self.fetches)
    }

    /// Time per fetch, round trip and overlapped replacement included.
    pub fn fetch_time_per_fetch(&self) -> Duration {
        thor_cache::manager::per(self.fetch_time, self.fetches)
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit's place in the server's serial order.
    pub lsn: thor_core::Lsn,
    /// Objects created.
    pub created: usize,
    /// Existing objects modified.
    pub modified: usize,
}

/// The clock the session gives its core for the cache's replacement timers and the sampled
/// conversion time (thor-cache and the core read none of their own, `thor_cache::timer`):
/// monotonic nanoseconds since the process's first call.
fn stat_clock_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The session's state: the protocol core and what drives it (see the module documentation
/// for how it is borrowed). It dereferences to its [`ClientCore`], so the driver's code reads
/// the protocol state as its own fields; the core never sees the driver.
pub(crate) struct Inner {
    /// The protocol: the cache, the transaction and every request's and reply's share of
    /// the protocol ([`crate::proto`]).
    core: ClientCore,
    transport: Box<dyn Transport>,
    /// The origin of the core's time (`now_ns`): when the session was made.
    epoch: Instant,
    /// The latency of every fetch (request sent to page installed, as `stats.fetch_time`
    /// sums), for its p50 and p99: fixed size, no allocation per fetch.
    fetch_latency: LatencyHistogram,
    /// How to open a new connection when this one breaks (`None`: the session ends with it).
    dialer: Option<reconnect::Redial>,
    /// The connection broke: the next request reconnects first.
    broken: bool,
    /// When it broke (for the reconnect's time).
    broke_at: Instant,
    /// The reply timeout set on the transport now (`None`: not set since it was made).
    timeout_now: Option<Option<Duration>>,
}

impl std::ops::Deref for Inner {
    type Target = ClientCore;
    #[inline(always)]
    fn deref(&self) -> &ClientCore {
        &self.core
    }
}

impl std::ops::DerefMut for Inner {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut ClientCore {
        &mut self.core
    }
}

/// How an attempt of [`Session::run`] or [`crate::Cluster::run`] failed.
pub(crate) enum Failed<E> {
    /// The closure failed, and nothing shows a conflict: the application's decision.
    App(E),
    /// The closure failed after a conflict hit the attempt: run it again.
    Conflicted(E),
    /// The commit failed.
    Thor(ClientError),
}

impl<E: From<ClientError>> Failed<E> {
    /// The error `run` returns.
    pub(crate) fn into_app(self) -> E {
        match self {
            Failed::App(e) | Failed::Conflicted(e) => e,
            Failed::Thor(e) => e.into(),
        }
    }
}

/// A client session: a connection to a server, a cache, and the current transaction.
pub struct Session {
    inner: UnsafeCell<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// A pinned view of one object of class `C`: reads come straight from the cached bytes; the
/// object neither moves nor leaves the cache while the view lives.
pub struct View<'s, C: Class + ?Sized> {
    s: &'s Session,
    /// The object's entry.
    idx: u32,
    /// The oref (or serial) of the entry, for [`View::as_ref`].
    oref: u32,
    /// The object's location in the arena.
    loc: u32,
    /// Pointer to the object's first byte.
    ptr: *mut u8,
    /// This view's place in the session's list of live views (see `ClientCore::views`).
    slot: u32,
    _c: PhantomData<fn() -> C>,
}

impl<C: Class + ?Sized> Drop for View<'_, C> {
    #[inline]
    fn drop(&mut self) {
        self.s.inner().drop_view(self.slot);
    }
}

impl<C: Class + ?Sized> std::fmt::Debug for View<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "View<{}>({:?})", std::any::type_name::<C>(), Ref::<C>::new(self.idx, self.oref))
    }
}

/// Reading and writing one field type in an object.
pub trait Access: FieldType {
    /// Reads the field at byte `off` of the viewed object.
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self;
    /// Writes the field (the caller has recorded the write in the transaction).
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError>;
}

macro_rules! scalar_access {
    ($t:ty) => {
        impl Access for $t {
            #[inline]
            fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                // SAFETY: the object is pinned at `ptr` and at least as large as its stored
                // class's fixed part (checked when it was installed), which is at least `C`'s
                // (the stored class equals or extends `C`, `Inner::register`); field offsets
                // come from `C`'s layout, so `off + size` is within the object.
                unsafe { std::ptr::copy_nonoverlapping(v.ptr.add(off), b.as_mut_ptr(), b.len()) };
                <$t>::from_le_bytes(b)
            }
            fn store<C: Class + ?Sized>(
                self,
                v: &View<'_, C>,
                off: usize,
            ) -> Result<(), ClientError> {
                let b = self.to_le_bytes();
                // SAFETY: as for `load`.
                unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.ptr.add(off), b.len()) };
                Ok(())
            }
        }
    };
}
/// `bool` is stored as a word: 0 is false, and any other value reads as true (a program writes
/// 1), so no stored word makes a read fail.
impl Access for bool {
    #[inline]
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
        u32::load(v, off) != 0
    }
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError> {
        u32::from(self).store(v, off)
    }
}

/// An optional value is a tag word and the value: tag 0 is `None` (the value's bytes are then
/// zero), any other tag `Some` (a program writes 1). A new object's fields are zero: `None`.
impl<T: crate::typed::OptionalValue + Access> Access for Option<T> {
    #[inline]
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
        if u32::load(v, off) == 0 { None } else { Some(T::load(v, off + 4)) }
    }
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError> {
        match self {
            None => {
                0u32.store(v, off)?;
                // SAFETY: as for the scalar fields: the value's bytes follow the tag within
                // the field.
                unsafe { std::ptr::write_bytes(v.ptr.add(off + 4), 0, T::SIZE) };
                Ok(())
            }
            Some(x) => {
                1u32.store(v, off)?;
                x.store(v, off + 4)
            }
        }
    }
}

/// An optional reference is a reference slot: null is `None`.
impl<T: ?Sized + 'static> Access for Option<Ref<T>> {
    #[inline]
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
        let r: Ref<T> = Ref::load(v, off);
        if r.is_null() { None } else { Some(r) }
    }
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError> {
        self.unwrap_or(Ref::NULL).store(v, off)
    }
}

scalar_access!(u32);
scalar_access!(i32);
scalar_access!(f32);
scalar_access!(u64);
scalar_access!(i64);
scalar_access!(f64);

impl<const N: usize> Access for [u8; N] {
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
        let mut b = [0u8; N];
        // SAFETY: as for the scalar fields.
        unsafe { std::ptr::copy_nonoverlapping(v.ptr.add(off), b.as_mut_ptr(), N) };
        b
    }
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError> {
        // SAFETY: as for the scalar fields.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), v.ptr.add(off), N) };
        Ok(())
    }
}

impl<T: ?Sized + 'static> Access for Ref<T> {
    #[inline(always)]
    fn load<C: Class + ?Sized>(v: &View<'_, C>, off: usize) -> Self {
        v.ref_at(off)
    }
    fn store<C: Class + ?Sized>(self, v: &View<'_, C>, off: usize) -> Result<(), ClientError> {
        v.s.inner().store_ref(v.idx, off, self.idx, self.oref)
    }
}

impl<'s, C: Class + ?Sized> View<'s, C> {
    /// The reference word at byte `off` of the object (within it: a field offset of `C`'s
    /// layout or a checked index into the variable part) as a handle, swizzling it if needed.
    #[inline(always)]
    fn ref_at<T: ?Sized>(&self, off: usize) -> Ref<T> {
        // SAFETY: `off + 4` lies within the pinned object (see the callers).
        let w = u32::from_le(unsafe { self.ptr.add(off).cast::<u32>().read_unaligned() });
        if w & 1 == 1 {
            let i = w >> 1;
            return Ref::new(i, self.s.inner().cache.oref_of(i));
        }
        if w == 0 {
            return Ref::NULL;
        }
        let (i, o) = self.s.inner().core.swizzle(self.loc, off, w);
        Ref::new(i, o)
    }

    /// Reads a field.
    #[inline]
    pub fn get<F: Access>(&self, field: Field<C, F>) -> F {
        F::load(self, field.offset())
    }

    /// Writes a field through the transaction (the first write of an object takes its undo
    /// copy).
    pub fn set<F: Access>(&self, field: Field<C, F>, value: F) -> Result<(), ClientError> {
        self.s.inner().before_write(self.idx)?;
        value.store(self, field.offset())
    }

    /// The session the view belongs to.
    pub(crate) fn session(&self) -> &'s Session {
        self.s
    }

    /// A reference to this object.
    pub fn as_ref(&self) -> Ref<C> {
        Ref::new(self.idx, self.oref)
    }

    /// Where the object sits in the cache's arena. It does not change while the view lives:
    /// the object is pinned. For tests and diagnostics.
    pub fn location(&self) -> u32 {
        self.loc
    }

    /// The name of the object's class (for untyped views).
    pub fn class_name(&self) -> String {
        let cache = &self.s.inner().cache;
        let w = cache.class_word(self.loc);
        cache.class(w).map_or_else(|| "?".to_string(), |d| d.name().to_string())
    }

    /// The class word of the object (its class's oref once stored).
    pub fn class_word(&self) -> u32 {
        self.s.inner().cache.class_word(self.loc)
    }

    fn desc(&self) -> Arc<ClassDesc> {
        let cache = &self.s.inner().cache;
        let w = cache.class_word(self.loc);
        cache.class(w).cloned().expect("installed objects have loaded classes")
    }

    /// The kind of the object's variable part and the offset of its count word. For a typed
    /// view the kind is `C`'s: [`Session::get`] checked that the object's class is the one
    /// registered for `C`, which has `C`'s variable part (it equals or extends `C::desc()`,
    /// `ClassDesc::extends`). The count word follows the *stored* fixed part: a constant of
    /// `C` for the built-in classes, else the session's record of the stored class (longer
    /// than `C::FIXED_BYTES` when the stored class extends `C`). Only untyped views look the
    /// class itself up.
    #[inline]
    fn var_layout(&self) -> (VarKind, usize) {
        if C::ANY {
            let d = self.desc();
            (d.var(), d.count_offset())
        } else if C::Var::KIND == VarKind::None || C::BUILTIN.is_some() {
            (C::Var::KIND, thor_core::limits::OBJECT_HEADER_BYTES + C::FIXED_BYTES)
        } else {
            // A typed view exists only after `class_word::<C>` registered the slot.
            let fixed = self.s.inner().class_fixed.get(C::slot()).map_or(C::FIXED_BYTES, |&f| {
                debug_assert!(f as usize >= C::FIXED_BYTES, "a stored class extends C");
                f as usize
            });
            (C::Var::KIND, thor_core::limits::OBJECT_HEADER_BYTES + fixed)
        }
    }

    /// Elements in the variable part (0 without one).
    #[inline]
    pub fn var_len(&self) -> usize {
        match self.var_layout() {
            (VarKind::None, _) => 0,
            (_, count) => {
                // SAFETY: the count word is within the object (checked at installation).
                u32::from_le_bytes(unsafe { self.ptr.add(count).cast::<[u8; 4]>().read() }) as usize
            }
        }
    }

    /// A copy of the variable byte part.
    pub fn var_bytes(&self) -> Vec<u8> {
        let (kind, count) = self.var_layout();
        if kind != VarKind::Bytes {
            return Vec::new();
        }
        let n = self.var_len();
        let mut out = vec![0u8; n];
        // SAFETY: the byte part lies within the object (shape checked at installation).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(count + 4), out.as_mut_ptr(), n) };
        out
    }

    /// The variable byte part where it lies: a pointer to its first byte and its length
    /// (`None` without a byte part). The pointer is valid for reads of that many bytes while
    /// the view lives (the object is pinned and keeps its size). The bytes change only through
    /// writes of the object and the undo of an abort, so a caller that makes a slice of them
    /// keeps it only while none can happen (no call into the session or a view's writer).
    /// For readers of many small pieces of one object (the map's node search, `crate::map`),
    /// which a copy per piece ([`View::read_var_bytes`]) slows down.
    #[inline]
    pub(crate) fn var_bytes_raw(&self) -> Option<(*const u8, usize)> {
        let (kind, count) = self.var_layout();
        if kind != VarKind::Bytes {
            return None;
        }
        // SAFETY: the byte part (after its count word) lies within the pinned object (shape
        // checked at installation).
        Some((unsafe { self.ptr.add(count + 4) }.cast_const(), self.var_len()))
    }

    /// Copies bytes `at..at + out.len()` of the variable byte part into `out`, without
    /// allocating. Fails with [`ClientError::Usage`] past the part's end or without a byte part.
    pub fn read_var_bytes(&self, at: usize, out: &mut [u8]) -> Result<(), ClientError> {
        let (kind, count) = self.var_layout();
        if kind != VarKind::Bytes || at.checked_add(out.len()).is_none_or(|e| e > self.var_len()) {
            return Err(ClientError::Usage("read_var_bytes past the end of the byte part"));
        }
        // SAFETY: the range lies within the byte part, which lies within the pinned object.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(count + 4 + at), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Overwrites bytes `at..at + bytes.len()` of the variable byte part through the
    /// transaction. Fails with [`ClientError::Usage`] past the part's end (a byte part keeps
    /// its length for the object's life).
    pub fn write_var_bytes(&self, at: usize, bytes: &[u8]) -> Result<(), ClientError> {
        let (kind, count) = self.var_layout();
        if kind != VarKind::Bytes || at.checked_add(bytes.len()).is_none_or(|e| e > self.var_len())
        {
            return Err(ClientError::Usage("write_var_bytes past the end of the byte part"));
        }
        self.s.inner().before_write(self.idx)?;
        // SAFETY: as for `read_var_bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(count + 4 + at), bytes.len())
        };
        Ok(())
    }

    /// Replaces the variable byte part; `bytes` must have the object's length (objects keep
    /// their size: the length chosen at `create` is the length for the object's life; a value
    /// that grows belongs in a [`crate::Seq`] or a new object).
    pub fn set_var_bytes(&self, bytes: &[u8]) -> Result<(), ClientError> {
        let (kind, count) = self.var_layout();
        if kind != VarKind::Bytes || bytes.len() != self.var_len() {
            return Err(ClientError::Usage("set_var_bytes needs a byte part of the same length"));
        }
        self.s.inner().before_write(self.idx)?;
        // SAFETY: as for `var_bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(count + 4), bytes.len())
        };
        Ok(())
    }
}

impl<'s, C: Class + ?Sized> View<'s, C>
where
    C::Var: VarRefsTarget,
{
    /// Reference `i` of the variable part.
    #[inline]
    pub fn var_ref(&self, i: usize) -> Ref<<C::Var as VarRefsTarget>::Target> {
        let (_, count) = self.var_layout();
        assert!(i < self.var_len(), "reference index {i} out of range");
        self.ref_at(count + 4 + 4 * i)
    }

    /// Stores reference `i` of the variable part.
    pub fn set_var_ref(
        &self,
        i: usize,
        r: Ref<<C::Var as VarRefsTarget>::Target>,
    ) -> Result<(), ClientError> {
        let (_, count) = self.var_layout();
        if i >= self.var_len() {
            return Err(ClientError::Usage("reference index out of range"));
        }
        let inner = self.s.inner();
        inner.before_write(self.idx)?;
        inner.store_ref(self.idx, count + 4 + 4 * i, r.idx, r.oref)
    }
}

/// Variable parts holding references.
pub trait VarRefsTarget: VarSpec {
    /// The class referenced.
    type Target: ?Sized + 'static;
}
impl<T: ?Sized + 'static> VarRefsTarget for crate::typed::VarRefs<T> {
    type Target = T;
}

impl Session {
    /// A session over an open transport (the handshake is the transport's job). It ends when
    /// the connection breaks (every later call fails); [`Session::connect`] makes one that
    /// reconnects.
    pub fn new(transport: Box<dyn Transport>, cfg: SessionConfig) -> Result<Session, ClientError> {
        Session::with_dialer(transport, cfg, None)
    }

    /// A session over a connection that `dialer` opens, which reconnects through it when the
    /// connection breaks ([`reconnect`]). The first connection is dialed once (attempt 0);
    /// its failure is returned.
    pub fn connect(mut dialer: Dialer, cfg: SessionConfig) -> Result<Session, ClientError> {
        let transport = dialer(0)?;
        Session::with_dialer(transport, cfg, Some(reconnect::Redial::One(dialer)))
    }

    /// A session with a server that is a replica group ([`crate::group`]): it connects to
    /// the group's leader, following the replicas' `Error(NotLeader)` answers (or trying each
    /// in turn), and when the connection breaks or the leader loses its group it finds the new
    /// leader and resumes there by itself, as [`Session::connect`]'s session does after a
    /// broken connection. The first connection, like every reconnect, tries for at most
    /// [`ReconnectConfig::give_up_after`](crate::ReconnectConfig::give_up_after)
    /// ([`SessionConfig::reconnect`]), then fails with [`ClientError::NoLeader`].
    pub fn connect_group(
        mut group: crate::group::GroupDialer,
        cfg: SessionConfig,
    ) -> Result<Session, ClientError> {
        let transport = reconnect::first_in_group(&mut group, &cfg.reconnect)?;
        Session::with_dialer(transport, cfg, Some(reconnect::Redial::Group(group)))
    }

    fn with_dialer(
        transport: Box<dyn Transport>,
        cfg: SessionConfig,
        dialer: Option<reconnect::Redial>,
    ) -> Result<Session, ClientError> {
        let info = *transport.server();
        // Prefetch's default is off over an in-process transport, where a round trip costs
        // little more than a page.
        let prefetch_pages = Some(cfg.prefetch_pages.unwrap_or(if transport.in_process() {
            0
        } else {
            crate::limits::PREFETCH_PAGES_DEFAULT
        }));
        let seeds = Seeds { key: reconnect::random_u64(), commit_ids: reconnect::random_u64() };
        let core_cfg = SessionConfig { prefetch_pages, ..cfg };
        let mut core =
            ClientCore::new(info, core_cfg, seeds, Some(stat_clock_ns), dialer.is_some())?;
        // Serials of a block no other live session uses: a tagged word names one object in
        // the process, which `Ref` equality relies on (`crate::typed::identity`).
        core.cache.set_next_serial(crate::typed::identity::first_serial());
        core.unique_serials = true;
        if core.pages.is_none() && cfg.spill_bytes_max > 0 {
            let store = crate::spill::FileSpill::new(std::env::temp_dir());
            core.cache.set_spill(Box::new(store), cfg.spill_bytes_max)?;
        }
        let now = Instant::now();
        let s = Session {
            inner: UnsafeCell::new(Inner {
                core,
                transport,
                epoch: now,
                fetch_latency: LatencyHistogram::new(),
                dialer,
                broken: false,
                broke_at: now,
                timeout_now: None,
            }),
        };
        let inner = s.inner();
        if inner.dialer.is_some() && info.version >= 5 {
            // Register the session's key with its server (and take the first stamp): a
            // later connection's `Resume` closes this one if it is still open.
            let key = inner.key;
            let resume = thor_wire::Resume { key, seen: None, commit: None, pages: vec![] };
            match inner.round_trip(RequestBody::Resume(resume)) {
                Ok(r) => match r.body {
                    ReplyBody::Resumed(_) => {}
                    other => return Err(unexpected(other)),
                },
                // The replica stopped leading (or the connection broke) between the
                // handshake and the resume: the session reconnected at the leader, whose
                // `Resume` registered the key. A group's session never shows the application
                // a `NotLeader`.
                Err(ClientError::Conflict { cause: ConflictCause::Disconnected, .. })
                    if matches!(inner.dialer, Some(reconnect::Redial::Group(_))) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(s)
    }

    /// The open transaction's map leaf logs ([`crate::leaflog`]), for the map's point
    /// operations (the borrow is used within one call, as [`Session::inner`]'s are).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn leaf_logs(&self) -> &mut crate::leaflog::LeafLogs {
        &mut self.inner().core.leaf_logs
    }

    #[allow(clippy::mut_from_ref)]
    #[inline]
    fn inner(&self) -> &mut Inner {
        // SAFETY: `Session` is not `Sync`, so only this thread reaches the cell. Every caller
        // uses the returned borrow within one method and does not call a method that borrows
        // it again while the first borrow is in use (see the module documentation); views keep
        // raw pointers into the arena, never borrows of `Inner`.
        unsafe { &mut *self.inner.get() }
    }

    /// What the server said about itself.
    pub fn server(&self) -> ServerInfo {
        self.inner().info
    }

    /// A view of the object `r` names, fetching its page if needed. Fails if `r` is null or
    /// the object is not of class `C`.
    #[inline(always)]
    pub fn get<C: Class + ?Sized>(&self, r: Ref<C>) -> Result<View<'_, C>, ClientError> {
        let inner = self.inner();
        if !inner.in_transaction {
            inner.begin()?;
        }
        let (idx, oref, loc) = match inner.cache.access(r.idx, r.oref) {
            Some(loc) => (r.idx, r.oref, loc),
            None => inner.slow_get(r.idx, r.oref)?,
        };
        let ptr = inner.cache.object_ptr(loc);
        if !C::ANY {
            // SAFETY: `ptr` points at the resident object at `loc`, whose first four bytes are
            // its class word (the invariant every field read of a view relies on).
            let got = u32::from_le(unsafe { ptr.cast::<u32>().read_unaligned() });
            if got != inner.known_class_word::<C>() {
                let want = inner.class_word::<C>()?;
                if got != want {
                    return Err(inner.type_mismatch::<C>(got));
                }
            }
        }
        let slot = inner.push_view(loc);
        Ok(View { s: self, idx, oref, loc, ptr, slot, _c: PhantomData })
    }

    /// Creates an object of class `C`, which has a variable part, with `var_len` elements in
    /// it (bytes or references), all fields zero (null references). It gets its oref when the
    /// transaction commits. If the database stores `C` extended (`ClassDesc::extends`), the
    /// object has the stored size, its extra bytes zero. A class without a variable part is
    /// made by [`Session::create_fixed`]; asking this for one does not compile:
    ///
    /// ```compile_fail
    /// # thor_client::class! { pub class Point("doc.Point") { x: u32 } }
    /// # fn demo(s: &thor_client::Session) -> Result<(), thor_client::ClientError> {
    /// s.create::<Point>(0)?; // Point has no variable part: `s.create_fixed::<Point>()`
    /// # Ok(()) }
    /// ```
    pub fn create<C: Class + ?Sized>(&self, var_len: usize) -> Result<View<'_, C>, ClientError>
    where
        C::Var: VarPart,
    {
        self.create_dyn::<C>(var_len)
    }

    /// Creates an object of class `C`, which has no variable part, all fields zero (null
    /// references), as [`Session::create`] does for classes with one.
    pub fn create_fixed<C: Class<Var = NoVar> + ?Sized>(&self) -> Result<View<'_, C>, ClientError> {
        self.create_dyn::<C>(0)
    }

    /// [`Session::create`] for any class, for code generic over classes with and without a
    /// variable part: a nonzero `var_len` for a class without one is refused at run time
    /// ([`ClientError::Usage`]) rather than at compile time.
    pub fn create_dyn<C: Class + ?Sized>(
        &self,
        var_len: usize,
    ) -> Result<View<'_, C>, ClientError> {
        let inner = self.inner();
        if !inner.in_transaction {
            inner.begin()?;
        }
        let class_word = inner.class_word::<C>()?;
        if C::Var::KIND == VarKind::None && var_len != 0 {
            return Err(ClientError::Usage("class has no variable part"));
        }
        let bytes = match C::BUILTIN {
            Some(b) => builtin::desc(b).expect("builtin").new_object(class_word, var_len),
            None => {
                // `class_word::<C>` registered the slot, which sets its descriptor.
                let desc = inner.class_descs[C::slot()].as_ref().expect("registered slot");
                desc.new_object(class_word, var_len)
            }
        };
        let made = inner.pinned(|inner| inner.cache.create(&bytes))?;
        let slot = inner.push_view(made.loc);
        let ptr = inner.cache.object_ptr(made.loc);
        Ok(View {
            s: self,
            idx: made.entry,
            oref: made.serial,
            loc: made.loc,
            ptr,
            slot,
            _c: PhantomData,
        })
    }

    /// The layout the database stores under `C`'s class name, if it has one yet (a class the
    /// current transaction created counts): equal to `C::desc()`, or extending it
    /// (`ClassDesc::extends`: `C`'s views read and write its instances, [`Session::create`]
    /// makes them at the stored size), or neither (then [`Session::get`] and
    /// [`Session::create`] of `C` fail with [`ClientError::SchemaMismatch`]). `None` if no class
    /// of that name is stored (the first `create` of `C` stores `C::desc()`). A built-in class's
    /// layout is its own. Reads the schema directory on first use, like the first `get`.
    pub fn stored_class<C: Class + ?Sized>(&self) -> Result<Option<ClassDesc>, ClientError> {
        if C::ANY {
            return Err(ClientError::Usage("Any names no stored class"));
        }
        if let Some(b) = C::BUILTIN {
            return Ok(builtin::desc(b).cloned());
        }
        let inner = self.inner();
        if !inner.in_transaction {
            inner.begin()?;
        }
        inner.load_schema()?;
        let schema = inner.schema.as_ref().expect("loaded");
        Ok(schema.get(C::NAME).map(|(_, d)| d.clone()))
    }

    /// The current form of `r`: after the commit of the transaction that created an object,
    /// references made before the commit name it by a temporary serial and references read
    /// after it by its oref; both give the same canonical reference (for comparisons and maps).
    pub fn canonical<C: ?Sized>(&self, r: Ref<C>) -> Result<Ref<C>, ClientError> {
        if r.is_null() {
            return Ok(r);
        }
        let inner = self.inner();
        let i = inner.cache.rebind(r.idx, r.oref)?;
        Ok(Ref::new(i, inner.cache.oref_of(i)))
    }

    /// The reference in root slot `slot` (`0..SCHEMA_SLOT`), seen as class `C`.
    pub fn root<C: Class + ?Sized>(&self, slot: usize) -> Result<Ref<C>, ClientError> {
        if slot >= SCHEMA_SLOT {
            return Err(ClientError::Usage("root slot out of range"));
        }
        let root = self.get(self.root_ref()?)?;
        Ok(root.var_ref(slot).cast())
    }

    /// Points root slot `slot` (`0..SCHEMA_SLOT`) at `r`.
    pub fn set_root<C: ?Sized + 'static>(&self, slot: usize, r: Ref<C>) -> Result<(), ClientError> {
        if slot >= SCHEMA_SLOT {
            return Err(ClientError::Usage("root slot out of range"));
        }
        let root = self.get(self.root_ref()?)?;
        root.set_var_ref(slot, r.cast())
    }

    fn root_ref(&self) -> Result<Ref<Refs<Any>>, ClientError> {
        let inner = self.inner();
        let root = inner.info.root;
        let idx = inner.cache.entry_for(root)?;
        Ok(Ref::new(idx, root.raw()))
    }

    /// Stores `data` as a large object (a tree of page-sized pieces) created by this
    /// transaction.
    pub fn create_large(&self, data: &[u8]) -> Result<Ref<crate::typed::Any>, ClientError> {
        let inner = self.inner();
        if !inner.in_transaction {
            inner.begin()?;
        }
        let objs = large::encode(data, large::LeafKind::Bytes, inner.info.page_size);
        let mut made: Vec<(u32, u32)> = Vec::with_capacity(objs.len());
        // Create every piece with its references null, then point them at each other.
        let mut pending = Vec::new();
        for obj in &objs {
            let class = thor_core::le::u32_at(obj, 0);
            let desc =
                builtin::desc(Oref::from_raw(class).expect("builtin class")).expect("builtin");
            let mut bytes = obj.clone();
            let mut offs = Vec::new();
            desc.for_each_ref_offset(obj, |o| offs.push(o));
            for &off in &offs {
                pending.push((made.len(), off, thor_core::le::u32_at(obj, off)));
                bytes[off..off + 4].fill(0);
            }
            let obj = inner.pinned(|inner| inner.cache.create(&bytes))?;
            made.push((obj.entry, obj.serial));
        }
        // A value larger than the cache has had its earlier pieces stolen to the spill store
        // by the time the later ones exist (`thor_cache::spill`): each owner is made resident
        // (read back if stolen, with the views' frames pinned) before its references are
        // stored. Storing a reference frees nothing, so the owner stays resident meanwhile.
        // `pending` holds each owner's references together.
        let mut k = 0;
        while k < pending.len() {
            let owner = pending[k].0;
            let (entry, serial) = made[owner];
            inner.pinned(|inner| inner.resolve_handle(entry, serial))?;
            while k < pending.len() && pending[k].0 == owner {
                let (_, off, word) = pending[k];
                k += 1;
                if let RawRef::Tagged(j) = RawRef::decode(word) {
                    inner.cache.store_ref(entry, off, Some(made[j as usize].0))?;
                }
            }
        }
        Ok(Ref::new(made[0].0, made[0].1))
    }

    /// Reads a whole large object.
    ///
    /// The tree comes from the server and is not trusted: its shape is checked as it is read,
    /// and the pieces visited are bounded by what a well-formed tree of the length its root
    /// claims has, and by [`LARGE_PIECES_MAX`]. A tree whose references form a cycle, or name
    /// the same piece over and over, is a [`ClientError::Format`] (`FormatError::BadLarge`)
    /// after at most that many pieces, not a loop.
    pub fn read_large(&self, r: Ref<crate::typed::Any>) -> Result<Vec<u8>, ClientError> {
        let root = self.get(r)?;
        let inner = self.inner();
        let mut bytes = Vec::new();
        inner.cache.copy_unswizzled(root.loc, &mut bytes);
        drop(root);
        let page_size = inner.info.page_size;
        large::read(&bytes, page_size, LARGE_PIECES_MAX, |word| self.piece_bytes(word))
    }

    /// The bytes of the piece of a large object that the (unswizzled) reference word `word`
    /// names, unswizzled.
    fn piece_bytes(&self, word: u32) -> Result<Vec<u8>, ClientError> {
        let inner = self.inner();
        let idx = match RawRef::decode(word) {
            // An object the current transaction created: its serial names it.
            RawRef::Tagged(_) => inner
                .cache
                .lookup(word)
                .ok_or(ClientError::Cache(CacheError::Internal("unknown created piece")))?,
            RawRef::Oref(o) if !o.is_null() => inner.cache.entry_for(o)?,
            RawRef::Oref(_) => {
                return Err(FormatError::BadLarge("a piece reference is null").into());
            }
        };
        let v = self.get::<Any>(Ref::new(idx, word))?;
        let inner = self.inner();
        let mut out = Vec::new();
        inner.cache.copy_unswizzled(v.loc, &mut out);
        Ok(out)
    }

    /// Commits the current transaction; the next access starts a new one. Read-only
    /// transactions go to the server too, which validates their reads.
    ///
    /// On a refusal the transaction is aborted (its effects undone in the cache) and the error
    /// says why: [`ClientError::Conflict`] if concurrency control refused it or an invalidation
    /// hit it earlier (run it again), [`ClientError::Refused`] if it wrote something invalid.
    pub fn commit(&self) -> Result<CommitInfo, ClientError> {
        self.inner().pinned(Inner::commit)
    }

    /// Aborts the current transaction: modified objects get their old bytes back (those an
    /// invalidation or memory pressure left without a valid old version leave the cache, to be
    /// fetched again), created objects disappear.
    pub fn abort(&self) {
        let inner = self.inner();
        inner.end_aborted();
        // A round trip, which brings the invalidations pending for this client before the next
        // transaction; a failure here changes nothing for the client (a broken connection is
        // mended, or reported, by the next request).
        if !inner.broken {
            let _ = inner.round_trip(RequestBody::Abort);
        }
    }

    /// Brings the session up to date with one round trip: the invalidations pending for it
    /// arrive, so the next transaction sees every commit acknowledged (to any client) before
    /// this call. Read-only transactions commit on the state of the last reply
    /// (docs/clocc.md, "Read-only transactions"), which without this may be as old as
    /// [`SessionConfig::refresh_after`]; call it where the application knows of a commit it
    /// did not make (another client told it so) and must see it. Outside a transaction only.
    pub fn sync(&self) -> Result<(), ClientError> {
        let inner = self.inner();
        if inner.in_transaction {
            return Err(ClientError::Usage("sync inside a transaction: commit or abort it first"));
        }
        inner.ensure_connected()?;
        inner.refresh()
    }

    /// Runs a transaction: calls `f`, then commits, and on a conflict
    /// ([`ClientError::is_conflict`]) runs it again, up to
    /// [`SessionConfig::run_attempts_max`] attempts in all, waiting between attempts with
    /// jittered exponential backoff ([`SessionConfig::run_backoff_min`] to
    /// [`SessionConfig::run_backoff_max`]). Returns what the successful attempt of `f`
    /// returned, or the last conflict once the attempts are used up, or at once any other
    /// error. An attempt that fails is aborted, whatever failed.
    ///
    /// `f` is the whole transaction: it must neither commit nor abort, and it must be safe to
    /// run again (each attempt sees the database afresh; effects outside the database are the
    /// caller's to undo). `run` starts a transaction, so it fails with
    /// [`ClientError::Usage`] if one is open.
    ///
    /// # The application's errors
    ///
    /// `f` fails with any error type `E` that a [`ClientError`] converts into, so that `?`
    /// works on thor's calls inside it and the application's own errors come back as
    /// themselves: an `Err` from `f` aborts the transaction (the writes made before it are
    /// undone) and `run` returns it, unless the attempt was hit by a conflict (a thor call in
    /// `f` failed with one, which `?` converted, or the transaction was doomed by an
    /// invalidation or a broken connection before `f` gave up): then the application's
    /// decision rested on a state that is gone, and `f` runs again like after any conflict.
    /// Conflicts at commit are [`ClientError`]s and come back converted into `E`.
    ///
    /// Where nothing in the closure fixes `E` (it ends with `Ok(..)` and uses `?` on thor's
    /// calls only), name it: `s.run::<_, ClientError>(..)`, or `Ok::<_, ClientError>(..)`.
    ///
    /// ```no_run
    /// # thor_client::class! { pub class Account("demo.Account") { balance: u64 } }
    /// # use thor_client::{ClientError, Ref, Session};
    /// #[derive(Debug)]
    /// enum BankError {
    ///     Insufficient { balance: u64 },
    ///     Db(ClientError),
    /// }
    /// impl From<ClientError> for BankError {
    ///     fn from(e: ClientError) -> Self {
    ///         BankError::Db(e)
    ///     }
    /// }
    ///
    /// fn withdraw(s: &Session, a: Ref<Account>, amount: u64) -> Result<u64, BankError> {
    ///     s.run(|s| {
    ///         let acc = s.get(a)?;
    ///         let balance = acc.get(Account::balance);
    ///         if balance < amount {
    ///             return Err(BankError::Insufficient { balance });
    ///         }
    ///         acc.set(Account::balance, balance - amount)?;
    ///         Ok(balance - amount)
    ///     })
    /// }
    /// ```
    pub fn run<T, E: From<ClientError>>(
        &self,
        mut f: impl FnMut(&Session) -> Result<T, E>,
    ) -> Result<T, E> {
        let inner = self.inner();
        if inner.in_transaction {
            return Err(
                ClientError::Usage("run starts a transaction: end the open one first").into()
            );
        }
        let attempts = inner.cfg.run_attempts_max.max(1);
        let mut attempt = 1;
        loop {
            let conflicts = self.conflicts_seen();
            let result = match f(self) {
                // A commit that fails has aborted the transaction.
                Ok(v) => self.commit().map(|_| v).map_err(Failed::Thor),
                Err(e) => {
                    let conflicted = self.conflicts_seen() != conflicts || self.is_doomed();
                    self.inner().end_aborted();
                    Err(if conflicted { Failed::Conflicted(e) } else { Failed::App(e) })
                }
            };
            let retry = match &result {
                Ok(_) | Err(Failed::App(_)) => false,
                Err(Failed::Conflicted(_)) => true,
                Err(Failed::Thor(e)) => {
                    e.is_conflict()
                        || (matches!(e, ClientError::CommitUnknown(_))
                            && self.inner().cfg.run_retries_unknown)
                }
            };
            if retry && attempt < attempts {
                // The core counts the retry and reports it to the server.
                let wait = self.inner().backoff(attempt);
                std::thread::sleep(wait);
                attempt += 1;
                continue;
            }
            return result.map_err(Failed::into_app);
        }
    }

    /// Transactions this session has seen aborted by a conflict (refused, invalidated, cut by
    /// a broken connection): [`Session::run`] compares it before and after an attempt whose
    /// closure failed, to tell a conflict converted into the application's error from the
    /// application's own.
    pub(crate) fn conflicts_seen(&self) -> u64 {
        self.inner().stats.conflicts
    }

    /// Whether an invalidation or a broken connection doomed the open transaction.
    pub(crate) fn is_doomed(&self) -> bool {
        self.inner().doomed.is_some()
    }

    /// The session's counters.
    pub fn stats(&self) -> ClientStats {
        self.inner().core.stats()
    }

    /// The most pages each fetch asks the server to add (0: the session does not prefetch)
    /// and how the server chooses them: [`SessionConfig::prefetch_pages`] as this session
    /// applies it.
    pub fn prefetch(&self) -> (u16, PrefetchHint) {
        let inner = self.inner();
        (inner.prefetch.as_ref().map_or(0, |w| w.max()), inner.cfg.prefetch_hint)
    }

    /// The distribution of the session's fetch latencies so far (a copy; take one before and
    /// one after a run and use [`LatencyHistogram::since`] for the run's own).
    pub fn fetch_latency(&self) -> LatencyHistogram {
        self.inner().fetch_latency.clone()
    }

    /// The cache's demotion counters (pages given back to an exclusive server cache).
    pub fn cache_demote_stats(&self) -> thor_cache::demote::DemoteStats {
        self.inner().cache.demote_stats()
    }

    /// What the page-based commit modes did (`None` in `obj` mode).
    pub fn page_mode_stats(&self) -> Option<PageModeStats> {
        self.inner().pages.as_ref().map(|p| p.stats)
    }

    /// The server's commit mode, as `HelloOk` said.
    pub fn commit_mode(&self) -> thor_wire::CommitMode {
        self.inner().info.commit_mode
    }

    /// The cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner().cache.stats()
    }

    /// Where the cache's budget goes now: frames by kind, installed objects' bytes, tables,
    /// headroom. A walk of every frame, for reports and diagnostics.
    pub fn cache_occupancy(&self) -> thor_cache::core::Occupancy {
        self.inner().cache.occupancy()
    }

    /// The cache manager's name.
    pub fn policy_name(&self) -> &'static str {
        self.inner().cache.policy_name()
    }

    /// Where the object `r` names sits in the cache's arena, if it is resident. Counts no
    /// access (no usage bit, no read set) and fetches nothing. For tests and diagnostics.
    pub fn resident_location<C: ?Sized>(&self, r: Ref<C>) -> Option<u32> {
        self.inner().cache.location(r.idx, r.oref)
    }

    /// Checks the cache's internal invariants (`ClientCache::check_invariants`: lists, counts,
    /// reference counts, the budget, the transaction's undo copies and created objects). It
    /// walks the whole cache; for tests.
    pub fn check_cache(&self) -> Result<(), String> {
        self.inner().cache.check_invariants()
    }

    /// The server's counters.
    pub fn server_stats(&self) -> Result<thor_wire::stats::ServerStats, ClientError> {
        let inner = self.inner();
        inner.ensure_connected()?;
        let reply = match inner.round_trip(RequestBody::Stats) {
            // Reconnected: asking again changes nothing.
            Err(ClientError::Conflict { cause: ConflictCause::Disconnected, .. }) => {
                inner.round_trip(RequestBody::Stats)?
            }
            r => r?,
        };
        match reply.body {
            ReplyBody::Stats(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// Asks the server to write a consistent copy of its database into `path`, a new directory
    /// on the *server's* machine; returns once the copy is complete and durable. The copy holds
    /// every commit up to the returned LSN, and opens as a database. Fails with
    /// [`ClientError::Server`] if the server could not make it (the path exists, its parent
    /// does not, the disk failed); nothing is left at `path` then.
    pub fn server_backup(&self, path: &str) -> Result<thor_wire::BackupInfo, ClientError> {
        let inner = self.inner();
        inner.ensure_connected()?;
        let reply = inner.round_trip(RequestBody::Backup { path: path.to_string() })?;
        match reply.body {
            ReplyBody::BackupDone(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// Ends the session politely (a broken connection needs no goodbye).
    pub fn close(self) -> Result<(), ClientError> {
        let inner = self.inner();
        if inner.broken {
            return Ok(());
        }
        inner.dialer = None;
        inner.core.asks_outcomes = false;
        inner.round_trip(RequestBody::Goodbye)?;
        Ok(())
    }

    /// What became of the last commit whose answer was lost ([`ClientError::CommitUnknown`]):
    /// asks the server if it was not learned yet (reconnecting if the connection is broken).
    /// `None` if no commit lost its answer. [`CommitOutcome::Unknown`] means the server cannot
    /// tell: read the objects the transaction wrote.
    pub fn commit_outcome(&self) -> Result<Option<CommitOutcome>, ClientError> {
        let inner = self.inner();
        if inner.unresolved.is_none() {
            return Ok(inner.last_outcome.clone());
        }
        if inner.in_transaction {
            return Err(ClientError::Usage("commit_outcome asks between transactions"));
        }
        if inner.dialer.is_none() || inner.info.version < 5 {
            return Ok(Some(CommitOutcome::Unknown));
        }
        if !inner.broken {
            // Ask on a new connection: `Resume` is the question, and it closes this one.
            inner.break_connection();
        }
        inner.reconnect(None)?;
        Ok(inner.last_outcome.clone())
    }

    /// The session's reconnect counters.
    pub fn reconnect_stats(&self) -> ReconnectStats {
        let inner = self.inner();
        let mut r = inner.reconnect;
        if let Some(reconnect::Redial::Group(g)) = &inner.dialer {
            r.redirects = g.route().redirects();
            r.failovers = g.route().failovers();
        }
        r
    }

    /// The replica of the server's group that served this session last (its id, as `thor
    /// server --replica-id` gave it); `None` for a session that does not dial a group.
    pub fn replica(&self) -> Option<u64> {
        match &self.inner().dialer {
            Some(reconnect::Redial::Group(g)) => g.route().leader_id(),
            _ => None,
        }
    }

    /// Whether a copy of page `page` is in the cache (a source of objects not yet installed).
    /// Objects of a page may stay cached after its copy left (HAC keeps them). For tests and
    /// diagnostics.
    pub fn has_page(&self, page: PageId) -> bool {
        self.inner().cache.has_page(page)
    }
}

/// Checks a `Pages` reply to a prefetch of `page` with up to `extra` further pages. The
/// decoder saw to it that there is at least one page, no page twice, and at most the
/// protocol's bound; the rest is the client's to check.
pub(crate) fn check_pages(
    pages: &[(PageId, Bytes)],
    page: PageId,
    extra: u16,
) -> Result<(), ClientError> {
    if pages[0].0 != page {
        return Err(ClientError::Unexpected("page other than asked"));
    }
    if pages.len() > 1 + usize::from(extra) {
        return Err(ClientError::Unexpected("more prefetched pages than asked for"));
    }
    Ok(())
}

/// The error for a commit request the transport refused to send (`reconnect::unsent`): over
/// a limit, it is [`ClientError::TooLarge`], never an unknown outcome.
fn unsent_commit(e: thor_wire::TransportError) -> ClientError {
    use thor_wire::{TransportError, WireError};
    match e {
        TransportError::BadRequest(WireError::FrameTooLarge { len, max }) => {
            ClientError::TooLarge { what: "commit frame (bytes)", size: len, max: max as u64 }
        }
        TransportError::BadRequest(WireError::LimitExceeded { what, got, max }) => {
            ClientError::TooLarge { what, size: got, max }
        }
        e => ClientError::Transport(e),
    }
}

pub(crate) fn unexpected(body: ReplyBody) -> ClientError {
    match body {
        ReplyBody::Error { code, message } => ClientError::Server { code, message },
        other => ClientError::Unexpected(other.name()),
    }
}

impl Inner {
    /// Runs `f` with every live view's frame pinned, so that nothing `f` does (fetching,
    /// replacement, compaction, commit, abort) moves or evicts an object a view points to.
    fn pinned<R>(&mut self, f: impl FnOnce(&mut Inner) -> R) -> R {
        self.core.pin_views();
        let r = f(self);
        self.core.unpin_views();
        r
    }

    /// The core's time now: nanoseconds since the session was made.
    #[inline]
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The slow path of an access: rebinds a stale handle, installs the object, fetches its
    /// page or loads its class as needed.
    #[cold]
    fn slow_get(&mut self, idx: u32, oref: u32) -> Result<(u32, u32, u32), ClientError> {
        self.pinned(|inner| inner.slow_get_pinned(idx, oref))
    }

    fn slow_get_pinned(&mut self, idx: u32, oref: u32) -> Result<(u32, u32, u32), ClientError> {
        if oref == 0 {
            return Err(ClientError::NullReference);
        }
        self.stats.slow_accesses += 1;
        let i = self.cache.rebind(idx, oref)?;
        let mut refetched = false;
        // Each round makes progress (a page or class arrives) unless the cache is so small
        // that making room evicts what was just fetched: give up then instead of spinning.
        let mut rounds = 0;
        loop {
            // An invalidation that arrived with the last round (or before) may have doomed the
            // transaction: say so rather than go on.
            self.check_doomed()?;
            rounds += 1;
            if rounds > SLOW_PATH_ROUNDS_MAX {
                return Err(ClientError::Cache(thor_cache::CacheError::Full {
                    frames: self.cache.usable_frames(),
                }));
            }
            let t = self.conversion.start();
            let need = self.cache.resolve(i);
            self.conversion.stop(t);
            let need = need?;
            match need {
                Need::Resident(loc) => return Ok((i, self.cache.oref_of(i), loc)),
                Need::Page(p) => self.fetch(p)?,
                Need::Class(c) => self.load_class(c)?,
                Need::Stale(p) if !refetched => {
                    refetched = true;
                    self.fetch(p)?;
                }
                Need::Stale(_) => {
                    let o = Oref::from_raw(self.cache.oref_of(i)).unwrap_or(Oref::NULL);
                    return Err(ClientError::Cache(thor_cache::CacheError::NoSuchObject(o)));
                }
            }
        }
    }

    fn fetch(&mut self, page: PageId) -> Result<(), ClientError> {
        let t = Instant::now();
        if self.ahead.is_some() {
            // The read-ahead's reply first: it may hold the page.
            let got = self.drain_ahead(Some(page))?;
            if got {
                self.stats.reads_ahead_hit += 1;
                let took = t.elapsed();
                self.stats.fetch_time += took;
                self.fetch_latency.record(took);
                return Ok(());
            }
            self.ahead_cool = crate::proto::AHEAD_COOL_FETCHES;
        }
        let extra = self.prefetch_extra();
        if extra > 0 {
            self.fetch_ahead(page, extra)?;
        } else {
            self.send(RequestBody::Fetch { page }, Some(page))?;
            // Free the next frame while the request is on the wire; the reply must be read
            // even if that fails, to keep the connection in step.
            let room = self.cache.while_fetching();
            let reply = self.recv_checked();
            let reply = reply?;
            room?;
            match reply.body {
                ReplyBody::Page { page: got, bytes } if got == page => {
                    self.cache.install_page(page, &bytes)?;
                    // The page modes keep the image beside the cache ([`crate::pagemode`]).
                    if let Some(pages) = &mut self.pages {
                        pages.put_image(page, &bytes);
                    }
                }
                ReplyBody::Page { .. } => {
                    return Err(ClientError::Unexpected("page other than asked"));
                }
                other => return Err(unexpected(other)),
            }
        }
        let took = t.elapsed();
        self.stats.fetches += 1;
        self.stats.fetch_time += took;
        self.fetch_latency.record(took);
        Ok(())
    }

    /// A fetch of `page` with up to `extra` further pages in the reply (`Prefetch`).
    ///
    /// Frames for all of them are freed while the request is on the wire. The reply's
    /// invalidations are applied first, as on any reply; then the further pages are installed,
    /// each with a fetched page's checks, except those the cache holds already, and the page
    /// asked for last, so that no prefetched page's installation can evict it before the
    /// access that asked for it installs its object.
    fn fetch_ahead(&mut self, page: PageId, extra: u16) -> Result<(), ClientError> {
        let hint = self.cfg.prefetch_hint;
        self.send(RequestBody::Prefetch(Prefetch { page, extra, hint }), Some(page))?;
        let room = self.cache.while_fetching_pages(1 + usize::from(extra));
        let reply = self.recv_checked();
        let reply = reply?;
        room?;
        let mut pages = match reply.body {
            ReplyBody::Pages(pages) => pages,
            other => return Err(unexpected(other)),
        };
        check_pages(&pages, page, extra)?;
        let (_, asked) = pages.swap_remove(0);
        let (brought, last) = self.install_prefetched(pages)?;
        self.cache.install_page(page, &asked)?;
        self.read_ahead(last.max(page.get()), brought, extra);
        Ok(())
    }

    /// Reads ahead ([`SessionConfig::read_ahead`]) after a reply to a prefetch of `extra`
    /// further pages brought `brought` of them, the highest being page `last`: asks now for
    /// the first page after `last` that the cache does not hold, with as many further pages
    /// as that request asked for, and frees frames for them, without waiting for the reply. The traversal goes on
    /// meanwhile with the pages it has; the next miss (or any other request) takes the reply
    /// first ([`Inner::drain_ahead`]).
    ///
    /// Whether and what to read ahead is the core's decision ([`ClientCore::ahead_page`]). A
    /// read-ahead that fails to send is dropped: the next miss fetches as before, and the send
    /// error recurs there if the connection is gone.
    fn read_ahead(&mut self, last: u32, brought: u64, extra: u16) {
        let Some(page) = self.core.ahead_page(last, brought, extra) else { return };
        let hint = self.cfg.prefetch_hint;
        if self.send(RequestBody::Prefetch(Prefetch { page, extra, hint }), Some(page)).is_err() {
            return;
        }
        self.ahead = Some((page, extra));
        self.stats.reads_ahead += 1;
        // Room for the pages while they are on the wire; a failure here shows again when
        // they are installed (an installation makes room itself).
        let _ = self.cache.while_fetching_pages(1 + usize::from(extra));
    }

    /// Takes the reply to the read-ahead in flight and installs its pages (all as prefetched
    /// pages: none was asked for by an access). Returns whether the cache then holds `want`,
    /// the page of the miss that waits for it (and if so, reads ahead again).
    /// A refusal of the read-ahead's page (past the end of the database, say) installs
    /// nothing; a reply that closes the connection fails as any would.
    fn drain_ahead(&mut self, want: Option<PageId>) -> Result<bool, ClientError> {
        let Some((page, extra)) = self.ahead.take() else { return Ok(false) };
        self.stats.fetches += 1;
        let reply = self.recv_checked()?;
        match reply.body {
            ReplyBody::Pages(pages) => {
                check_pages(&pages, page, extra)?;
                let (brought, last) = self.install_prefetched(pages)?;
                if want.is_some_and(|p| self.cache.has_page(p)) {
                    // Streaming on: the traversal is where the read-ahead guessed.
                    self.read_ahead(last.max(page.get()), brought, extra);
                    return Ok(true);
                }
                Ok(false)
            }
            ReplyBody::Error { code, .. } if !code.closes_connection() => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    /// Takes the reply to the read-ahead in flight, if any, before another request: views'
    /// frames are pinned while its pages are installed, as on a fetch.
    fn settle_ahead(&mut self) -> Result<(), ClientError> {
        if self.ahead.is_none() {
            return Ok(());
        }
        self.pinned(|inner| inner.drain_ahead(None).map(|_| ()))
    }

    // ----- requests, replies and concurrency control -----

    /// Sends a request with what rides on it: the acknowledgements of applied invalidations
    /// and the pages discarded (never `fetching`, the page this request asks for), as many as
    /// the server's frame limit leaves room for after the body. If the request cannot be
    /// sent, they go back to the cache for the next one.
    fn send(&mut self, body: RequestBody, fetching: Option<PageId>) -> Result<(), ClientError> {
        self.ensure_connected()?;
        self.send_raw(body, fetching).map_err(|e| match e {
            // Nothing was sent and the connection is fine.
            e if reconnect::unsent(&e) => ClientError::Transport(e),
            e => self.lost(ClientError::Transport(e)),
        })
    }

    /// [`Inner::send`] without mending a broken connection: the transport's error as it is.
    fn send_raw(
        &mut self,
        body: RequestBody,
        fetching: Option<PageId>,
    ) -> Result<(), thor_wire::TransportError> {
        // Every path that sends settles the read-ahead first: the next reply to arrive would
        // be the read-ahead's, not this request's.
        debug_assert!(self.ahead.is_none(), "a request sent while a read-ahead is in flight");
        self.timeout_for(&body);
        let req = self.core.request(body, fetching);
        // Given up, not lent: the in-process transport hands it to the server without a copy.
        if let Err(failed) = self.transport.send_owned(req) {
            let (e, req) = *failed;
            self.core.unsent(req);
            return Err(e);
        }
        Ok(())
    }

    /// Waits for the reply to the request in flight and applies the invalidations on it,
    /// before anything uses its body. Returns the reply and the first invalidated object that
    /// the open transaction read or wrote, if any.
    fn recv(&mut self) -> Result<(Reply, Option<Oref>), ClientError> {
        match self.recv_raw() {
            Ok((reply, _)) if reconnect::closes_for_reconnect(&reply.body) => {
                Err(self.lost(unexpected(reply.body)))
            }
            Ok(r) => Ok(r),
            Err(e) => Err(self.lost(ClientError::Transport(e))),
        }
    }

    /// [`Inner::recv`] without mending a broken connection: the transport's error as it is.
    fn recv_raw(&mut self) -> Result<(Reply, Option<Oref>), thor_wire::TransportError> {
        let reply = self.transport.recv()?;
        let now = self.now_ns();
        let hit = self.core.apply(&reply, now);
        Ok((reply, hit))
    }

    /// [`Inner::recv`] for every request but a commit: an invalidation that hit the open
    /// transaction dooms it.
    fn recv_checked(&mut self) -> Result<Reply, ClientError> {
        let (reply, hit) = self.recv()?;
        if let Some(o) = hit {
            self.doom(o);
        }
        Ok(reply)
    }

    /// Sends a request (not a fetch or commit) and waits for its reply.
    fn round_trip(&mut self, body: RequestBody) -> Result<Reply, ClientError> {
        self.settle_ahead()?;
        self.send(body, None)?;
        self.recv_checked()
    }

    /// The first access or creation of a transaction: if the last reply is older than
    /// [`SessionConfig::refresh_after`], first collect the invalidations pending for this
    /// client with the cheapest round trip there is (`Abort` with no transaction open: the
    /// server answers `Ack` and changes nothing).
    #[cold]
    #[inline(never)]
    fn begin(&mut self) -> Result<(), ClientError> {
        // A broken connection is mended first: nothing of the transaction is cached yet.
        self.ensure_connected()?;
        if self.stale_views {
            if self.views.iter().any(|&v| v != DEAD_VIEW) {
                return Err(ClientError::Usage(
                    "views held across a reconnect whose server could not vouch for the cache: \
                     drop them before the next transaction",
                ));
            }
            // Their objects can leave now.
            self.stale_views = false;
            self.core.pinned(ClientCore::abort_cache);
        }
        if self.core.needs_refresh(self.now_ns()) {
            self.stats.refreshes += 1;
            self.refresh()?;
        }
        self.in_transaction = true;
        self.core.leaf_logs.clear();
        Ok(())
    }

    /// Collects the invalidations pending for this client with the cheapest round trip there
    /// is (`Abort` with no transaction open: the server answers `Ack` and changes nothing).
    fn refresh(&mut self) -> Result<(), ClientError> {
        match self.round_trip(RequestBody::Abort) {
            // Reconnected: the resume brought what the refresh would have.
            Err(ClientError::Conflict { cause: ConflictCause::Disconnected, .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(r) => match r.body {
                ReplyBody::Ack => Ok(()),
                other => Err(unexpected(other)),
            },
        }
    }

    fn load_class(&mut self, class: Oref) -> Result<(), ClientError> {
        let idx = self.cache.entry_for(class)?;
        let (_, _, loc) = self.slow_get(idx, class.raw())?;
        self.core.register_class_at(class, loc)
    }

    /// The class word of `C` in this database, registering the class (creating its class
    /// object in the current transaction) if it is new.
    #[inline]
    fn class_word<C: Class + ?Sized>(&mut self) -> Result<u32, ClientError> {
        if let Some(b) = C::BUILTIN {
            return Ok(b.raw());
        }
        let slot = C::slot();
        if let Some(&w) = self.class_words.get(slot)
            && w != 0
        {
            return Ok(w);
        }
        self.register::<C>(slot)
    }

    #[cold]
    fn register<C: Class + ?Sized>(&mut self, slot: usize) -> Result<u32, ClientError> {
        let desc = C::desc();
        debug_assert_eq!(desc.fixed_bytes(), C::FIXED_BYTES, "class! computes FIXED_BYTES");
        self.load_schema()?;
        let schema = self.schema.as_ref().expect("loaded");
        // A stored class equal to the declaration or extending it (a longer fixed part whose
        // extra words are not references) is read and written through the declaration; any
        // other difference is refused. Views rely on this: every field offset of `C` is within
        // the stored fixed part, which the cache checked each installed object against.
        // Where both name their fields, names and types must agree too (`ClassDesc::mismatch`);
        // a class stored before descriptors named fields is matched on its layout alone.
        let (word, fixed) = match schema.get(C::NAME) {
            Some((w, stored)) => match stored.mismatch(&desc) {
                None => (*w, stored.fixed_bytes()),
                Some(reason) => return Err(ClientError::SchemaMismatch { class: C::NAME, reason }),
            },
            None => (self.create_class(&desc)?, desc.fixed_bytes()),
        };
        // What `create` makes the slot's objects from: the declaration at the stored size.
        let made = match fixed.checked_sub(desc.fixed_bytes()) {
            Some(0) => desc,
            Some(extra) => desc.extended_by(extra)?,
            None => return Err(CacheError::Internal("stored class shorter than C").into()),
        };
        if self.class_words.len() <= slot {
            self.class_words.resize(slot + 1, 0);
            self.class_fixed.resize(slot + 1, 0);
            self.class_descs.resize(slot + 1, None);
        }
        self.class_words[slot] = word;
        self.class_fixed[slot] = fixed as u32;
        self.class_descs[slot] = Some(Arc::new(made));
        if RawRef::decode(word) != RawRef::Oref(Oref::from_raw(word).unwrap_or(Oref::NULL)) {
            self.new_class_slots.push((slot, word));
        }
        Ok(word)
    }

    /// Reads the schema directory (root slot [`SCHEMA_SLOT`]) if not read yet.
    fn load_schema(&mut self) -> Result<(), ClientError> {
        if self.schema.is_some() {
            return Ok(());
        }
        let mut schema = FxHashMap::default();
        let dir = self.root_slot_word(SCHEMA_SLOT)?;
        if dir != 0 {
            let (di, doref) = self.word_handle(dir)?;
            let (_, _, first) = self.resolve_handle(di, doref)?;
            let refs = builtin::desc(builtin::REFS).expect("builtin");
            let n = u32_at(self.cache.object(first), refs.count_offset()) as usize;
            for k in 0..n {
                // Loading a class may fetch pages and evict the directory's page: find it again.
                let (_, _, dloc) = self.resolve_handle(di, doref)?;
                let Some((ci, coref)) = self.cache.follow(dloc, refs.var_offset() + 4 * k)? else {
                    continue;
                };
                let (_, _, cloc) = self.resolve_handle(ci, coref)?;
                let desc = ClassDesc::from_class_object(self.cache.object(cloc))
                    .map_err(|e| ClientError::BadClass(e.to_string()))?;
                self.cache.register_class(coref, Arc::new(desc.clone()))?;
                schema.insert(desc.name().to_string(), (coref, desc));
            }
        }
        self.schema = Some(schema);
        Ok(())
    }

    /// The (unswizzled) word in root slot `slot`.
    fn root_slot_word(&mut self, slot: usize) -> Result<u32, ClientError> {
        let root = self.info.root;
        let ri = self.cache.entry_for(root)?;
        let (_, _, loc) = self.resolve_handle(ri, root.raw())?;
        let refs = builtin::desc(builtin::REFS).expect("builtin");
        Ok(self.cache.ref_word(loc, refs.var_offset() + 4 * slot))
    }

    fn word_handle(&mut self, word: u32) -> Result<(u32, u32), ClientError> {
        match RawRef::decode(word) {
            RawRef::Oref(o) => Ok((self.cache.entry_for(o)?, word)),
            RawRef::Tagged(_) => {
                let i =
                    self.cache.lookup(word).ok_or(ClientError::Usage("unknown created object"))?;
                Ok((i, word))
            }
        }
    }

    fn resolve_handle(&mut self, idx: u32, oref: u32) -> Result<(u32, u32, u32), ClientError> {
        match self.cache.access(idx, oref) {
            Some(loc) => Ok((idx, oref, loc)),
            None => self.slow_get(idx, oref),
        }
    }

    /// Creates a class object and a new schema directory listing it; returns the class's
    /// tagged serial.
    fn create_class(&mut self, desc: &ClassDesc) -> Result<u32, ClientError> {
        let obj = desc.to_class_object();
        let class = self.pinned(|inner| inner.cache.create(&obj))?;
        let (ci, cword) = (class.entry, class.serial);
        self.cache.register_class(cword, Arc::new(desc.clone()))?;

        // The directory grows by copying: objects keep their size.
        let refs = builtin::desc(builtin::REFS).expect("builtin");
        let old = self.root_slot_word(SCHEMA_SLOT)?;
        let mut entries: Vec<u32> = Vec::new();
        if old != 0 {
            let (oi, ooref) = self.word_handle(old)?;
            let (_, _, oloc) = self.resolve_handle(oi, ooref)?;
            let n = u32_at(self.cache.object(oloc), refs.count_offset()) as usize;
            for k in 0..n {
                let (_, _, oloc) = self.resolve_handle(oi, ooref)?;
                if let Some((ti, _)) = self.cache.follow(oloc, refs.var_offset() + 4 * k)? {
                    entries.push(ti);
                }
            }
        }
        entries.push(ci);
        let bytes = refs.new_object(builtin::REFS.raw(), entries.len());
        let dir = self.pinned(|inner| inner.cache.create(&bytes))?;
        let (di, dword) = (dir.entry, dir.serial);
        for (k, t) in entries.iter().enumerate() {
            self.cache.store_ref(di, refs.var_offset() + 4 * k, Some(*t))?;
        }
        // Point the root at the new directory.
        let root = self.info.root;
        let ri = self.cache.entry_for(root)?;
        self.resolve_handle(ri, root.raw())?;
        self.before_write(ri)?;
        self.cache.store_ref(ri, refs.var_offset() + 4 * SCHEMA_SLOT, Some(di))?;
        if let Some(s) = self.schema.as_mut() {
            s.insert(desc.name().to_string(), (cword, desc.clone()));
        }
        debug_assert_eq!(self.cache.lookup(dword), Some(di));
        Ok(cword)
    }

    /// The cache's `before_write`, then the commit path's (the page modes copy the object's
    /// units into their recovery buffer, [`commit_path`]). Only the page modes have a hook
    /// there (and page state): object shipping's writes make no call through the seam.
    fn before_write(&mut self, i: u32) -> Result<(), ClientError> {
        self.cache.before_write(i)?;
        if self.pages.is_some() && self.doomed.is_none() {
            let path = self.path;
            path.before_write(self, i)?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<CommitInfo, ClientError> {
        let t = self.now_ns();
        // The read-ahead's reply before the commit is built: its invalidations may doom the
        // transaction, which must be known before anything is sent.
        let settled = self.settle_ahead();
        if let Err(e) = settled.and_then(|()| self.check_doomed()) {
            self.end_aborted();
            return Err(e);
        }
        if let Some(info) = self.commit_read_only_locally() {
            return Ok(info);
        }
        self.in_transaction = false;
        let path = self.path;
        let Built { body, shipped, n_modified, n_created, id, kept } = match path.request(self) {
            Ok(c) => c,
            Err(e) => {
                self.abort_local();
                return Err(e);
            }
        };
        // Where the classes this transaction created are among its created objects, for their
        // slots to take the orefs the server gives them.
        let class_slots = self.class_slots();
        // The invalidations on the reply are applied whatever it says, but they doom nothing: a
        // refused transaction is aborted anyway, and a committed one was validated by the
        // server, so the changes they announce come after it in the serial order.
        let writes = n_modified + n_created > 0;
        let part = Part { class_slots, n_created, n_modified, shipped, started_ns: t };
        if let Err(e) = self.send_raw(body, None) {
            if reconnect::unsent(&e) {
                // Nothing left the client: the transaction had no effect.
                self.abort_local();
                return Err(unsent_commit(e));
            }
            if self.dialer.is_none() {
                self.abort_unknown();
                return Err(ClientError::CommitUnknown(Box::new(ClientError::Transport(e))));
            }
            return self.commit_lost(part, kept, id, writes, ClientError::Transport(e));
        }
        let reply = match self.recv_raw() {
            Ok((r, _)) if reconnect::closes_for_reconnect(&r.body) => {
                return self.commit_lost(part, kept, id, writes, unexpected(r.body));
            }
            Ok((r, _)) => r,
            Err(e) => {
                return self.commit_lost(part, kept, id, writes, ClientError::Transport(e));
            }
        };
        match reply.body {
            ReplyBody::CommitOk { lsn, created: orefs } => {
                let now = self.now_ns();
                let r = self.core.committed(part, lsn, &orefs, now);
                if r.is_ok() {
                    path.committed(self, kept, lsn);
                }
                r
            }
            ReplyBody::CommitRefused { code, message } => {
                self.abort_local();
                let e = ClientError::refused(code, message);
                if e.is_conflict() {
                    self.stats.conflicts += 1;
                }
                Err(e)
            }
            other => {
                self.abort_local();
                Err(unexpected(other))
            }
        }
    }

    /// Ends the transaction whose commit a broken connection cut short, when it is known not
    /// to have happened (or did not matter): aborted in the cache, and a `Disconnected`
    /// conflict that `run` retries.
    fn aborted_by_break(&mut self, message: String) -> ClientError {
        self.abort_local();
        self.stats.conflicts += 1;
        self.reconnect.aborted += 1;
        ClientError::Conflict { cause: ConflictCause::Disconnected, message }
    }

    /// The connection broke (`cause`) while the commit was in flight: reconnects, asks the
    /// server what became of commit `id` (`reconnect`), and ends the transaction accordingly:
    /// committed as if the answer had come, aborted with a conflict if it did not happen,
    /// aborted with [`ClientError::CommitUnknown`] if nobody can tell. A transaction that
    /// wrote nothing (`writes` false) is reported aborted with a conflict: run again, it reads
    /// afresh, and its first attempt changed nothing either way.
    fn commit_lost(
        &mut self,
        part: Part,
        kept: Kept,
        id: Option<u64>,
        writes: bool,
        cause: ClientError,
    ) -> Result<CommitInfo, ClientError> {
        if self.dialer.is_none() {
            self.abort_unknown();
            return Err(ClientError::CommitUnknown(Box::new(cause)));
        }
        self.break_connection();
        self.turned_away(&cause);
        if id.is_some() {
            self.unresolved = id;
            self.last_outcome = None;
        }
        let outcome = match self.reconnect(id) {
            Ok(r) => r.outcome,
            // A transaction that wrote nothing has no outcome to speak of.
            Err(e) if !writes => {
                self.abort_local();
                return Err(e);
            }
            Err(e) => {
                self.abort_unknown();
                return Err(ClientError::CommitUnknown(Box::new(e)));
            }
        };
        match outcome {
            Some(thor_wire::Outcome::Committed { lsn, created }) => {
                let now = self.now_ns();
                let r = self.core.committed(part, lsn, &created, now);
                if r.is_ok() {
                    let path = self.path;
                    path.committed(self, kept, lsn);
                }
                r
            }
            _ if !writes => Err(self.aborted_by_break(format!(
                "the connection broke ({cause}) during the commit of a transaction that wrote \
                 nothing; the session reconnected: run it again"
            ))),
            Some(thor_wire::Outcome::NotCommitted) => Err(self.aborted_by_break(format!(
                "the connection broke ({cause}) before the commit was done; the session \
                 reconnected and the server says it did not happen: run it again"
            ))),
            _ => {
                self.abort_unknown();
                Err(ClientError::CommitUnknown(Box::new(cause)))
            }
        }
    }

    /// Sends this session's part of a transaction over several servers (`Prepare`), without
    /// waiting for the answer. On an error the part is aborted in the cache.
    fn part_send(&mut self, header: PrepareHeader) -> Result<Part, ClientError> {
        let t = self.now_ns();
        let settled = self.settle_ahead();
        if let Err(e) = settled.and_then(|()| self.check_doomed()) {
            self.end_aborted();
            return Err(e);
        }
        self.in_transaction = false;
        let (commit, shipped) = match self.commit_request() {
            Ok(c) => c,
            Err(e) => {
                self.abort_local();
                return Err(e);
            }
        };
        let class_slots = self.class_slots();
        let part = Part {
            class_slots,
            n_created: commit.created.len(),
            n_modified: commit.versions.len(),
            shipped,
            started_ns: t,
        };
        let p = thor_wire::Prepare {
            stamp: header.stamp,
            coordinator: header.coordinator,
            participants: header.participants,
            commit,
        };
        if let Err(e) = self.ensure_connected() {
            self.abort_local();
            return Err(e);
        }
        if let Err(e) = self.send_raw(RequestBody::Prepare(Box::new(p)), None) {
            // Not sent whole: the server cannot prepare it. The connection is mended by the
            // next request.
            self.break_connection();
            self.abort_unknown();
            return Err(ClientError::CommitUnknown(Box::new(ClientError::Transport(e))));
        }
        Ok(part)
    }
}

/// What a commit keeps while its answer is on the way.
#[derive(Debug)]
pub(crate) struct Part {
    /// Where the classes the transaction created are among its created objects.
    pub(crate) class_slots: Vec<(usize, Option<u32>)>,
    pub(crate) n_created: usize,
    pub(crate) n_modified: usize,
    pub(crate) shipped: u64,
    /// When the commit started, on the core's clock.
    pub(crate) started_ns: u64,
}

/// The two-phase commit header of a part: the same for every participant.
#[derive(Debug, Clone)]
pub(crate) struct PrepareHeader {
    pub stamp: thor_wire::Stamp,
    pub coordinator: Option<ServerId>,
    pub participants: Vec<thor_wire::Participant>,
}

/// What became of a part at its server.
#[derive(Debug)]
pub(crate) enum PartReply {
    /// Prepared (a participant): the orefs of the objects it created there.
    Prepared(Vec<Oref>),
    /// Committed (the coordinator's answer, which decides the transaction).
    Committed(Lsn, Vec<Oref>),
    /// Refused; the error says why.
    Refused(ClientError),
    /// The connection failed: the outcome at this server is unknown.
    Lost(ClientError),
}

impl Session {
    /// Whether a transaction is open here (something was read, written or created since the
    /// last commit or abort).
    pub(crate) fn part_open(&self) -> bool {
        self.inner().in_transaction
    }

    /// See [`Inner::part_writes`].
    pub(crate) fn part_writes(&self) -> bool {
        self.inner().part_writes()
    }

    /// Sends this session's part of a transaction over several servers.
    pub(crate) fn part_send(&self, header: PrepareHeader) -> Result<Part, ClientError> {
        self.inner().pinned(|i| i.part_send(header))
    }

    /// Waits for the answer to the part sent last.
    pub(crate) fn part_recv(&self) -> PartReply {
        let inner = self.inner();
        // A broken connection here loses the part's answer; the next request of this session
        // reconnects (a two-phase commit's outcome is not asked for: `reconnect`).
        let got = match inner.recv_raw() {
            Ok((r, _)) if reconnect::closes_for_reconnect(&r.body) => {
                inner.break_connection();
                let e = unexpected(r.body);
                inner.turned_away(&e);
                Err(e)
            }
            Ok(r) => Ok(r),
            Err(e) => {
                inner.break_connection();
                Err(ClientError::Transport(e))
            }
        };
        match got {
            Ok((r, _)) => match r.body {
                ReplyBody::Prepared { created } => PartReply::Prepared(created),
                ReplyBody::CommitOk { lsn, created } => PartReply::Committed(lsn, created),
                ReplyBody::CommitRefused { code, message } => {
                    PartReply::Refused(ClientError::refused(code, message))
                }
                other => PartReply::Refused(unexpected(other)),
            },
            Err(e) => PartReply::Lost(e),
        }
    }

    /// Ends a part: committed with the orefs its server gave the created objects, aborted, or
    /// with its outcome unknown here (what it wrote leaves the cache).
    pub(crate) fn part_end(
        &self,
        part: Part,
        outcome: PartOutcome<'_>,
    ) -> Result<CommitInfo, ClientError> {
        let inner = self.inner();
        let now = inner.now_ns();
        let none = CommitInfo { lsn: Lsn(0), created: 0, modified: 0 };
        Ok(inner.core.pinned(|c| c.end_part(part, outcome, now))?.unwrap_or(none))
    }

    /// A reference to the object `oref` of this session's server, seen as class `C` (checked
    /// when it is read).
    pub fn ref_to<C: ?Sized>(&self, oref: Oref) -> Result<Ref<C>, ClientError> {
        let inner = self.inner();
        let idx = inner.cache.entry_for(oref)?;
        Ok(Ref::new(idx, oref.raw()))
    }
}

// `Session` must stay `!Sync` (its cell is not synchronised); it is `Send` when its transport
// and cache are.
#[cfg(test)]
fn _assert_send() {
    fn is<T: Send>() {}
    is::<Session>();
}
