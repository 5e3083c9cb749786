//! The client's protocol as a sans-I/O state machine: [`ClientCore`].
//!
//! A client has three layers, split the way the server's core and its engine are:
//!
//! ```text
//!   typed API        Session, View, Ref, classes, schema        (session.rs, typed.rs)
//!        │ calls
//!   driver           Inner: a Transport, Instant → now_ns, blocking recv, timeouts,
//!        │ calls     reconnect dialing, backoff sleeps              (session.rs, reconnect.rs)
//!   protocol core    ClientCore: the cache, the transaction, every request's piggyback,
//!                    every reply's effect, the refresh decision, commit ids, backoff jitter
//! ```
//!
//! The core owns the client cache and all protocol state, and never touches a transport, a
//! clock, a thread or randomness it was not given: time comes in as `now_ns` (nanoseconds on
//! the driver's monotonic clock, from any origin) on the calls that need it; the seeds of the
//! session key and of commit ids come in at [`ClientCore::new`]; the cache's replacement timers
//! and the sampled conversion time read the [`StatClock`] the driver passes (or none). Its
//! outputs are [`Request`]s for the driver to send and typed results for the replies the driver
//! feeds back.
//!
//! # What the core does
//!
//! - **Requests** ([`ClientCore::request`]): a body with what rides on it, within what the
//!   server's frame limit leaves after the body: the contention report (version 6), the
//!   acknowledgements of applied invalidations, the pages discarded, the pages demoted and the
//!   demoted pages' bytes the server asked for. A request the driver could not send goes back
//!   through [`ClientCore::unsent`], which requeues what rode on it.
//! - **Replies** ([`ClientCore::apply`]): the reply's stamp is noted (`reconnect`), the
//!   demotions it answers are settled, its invalidations are applied before anything uses the
//!   body, and the first one that hit the open transaction is returned (the driver dooms the
//!   transaction with [`ClientCore::doom`] unless the reply is a commit's answer).
//! - **Transactions**: the refresh decision ([`ClientCore::needs_refresh`]: a transaction whose
//!   first access comes [`SessionConfig::refresh_after`] after the last reply first collects
//!   the pending invalidations), the doomed state, local abort, commit requests and their ids,
//!   the outcome of a commit (`ClientCore::committed`), the backoff of retries with its
//!   jitter, and the read-ahead decision (`ClientCore::ahead_page`).
//!
//! # The object-level API
//!
//! For a driver that does not block (the deterministic simulator, which runs many clients and
//! servers in one thread), [`objects`] puts these together into a small API over orefs: begin a
//! transaction ([`ClientCore::begin`]: a refresh request when one is due), read an object
//! ([`ClientCore::read`]: its bytes on a hit, the fetch to send on a miss), write bytes of it
//! ([`ClientCore::write`]), commit ([`ClientCore::commit`]: the request) or prepare a part of a
//! transaction over several servers ([`ClientCore::prepare`], ended by
//! [`ClientCore::finish_part`]), and feed the reply to whatever was sent
//! ([`ClientCore::receive`]: an [`Event`]). One request is outstanding at a
//! time, as on a session's connection. `Session` does not go through that API (it keeps its
//! blocking loops, its read-ahead and its page-mode commit path, which make round trips of their
//! own in the middle of an operation); it uses the same primitives, so both speak one protocol.
//!
//! Broken connections: [`ClientCore::disconnected`] ends what was in flight (an open
//! transaction is aborted, a commit whose answer was lost is in doubt), and
//! [`ClientCore::resume`] adopts a new connection's `HelloOk` and builds the `Resume` that
//! keeps the cache where the server can vouch for it and asks about the commit in doubt; its
//! answer ends that commit. `Session` uses the same `adopt`, `Resume` body and answer.
//!
//! What is not in the core: the page modes' commit path and their round trips before the
//! commit (`session::page_path`, which takes the driver); dialing, timeouts and the backoff
//! between reconnect attempts (`session::reconnect`, the driver's); and the two-phase commit's
//! client side (choosing the stamp and the coordinator, deciding from the votes), which is
//! [`crate::cluster`]'s for sessions and the driver's for cores ([`ClientCore::prepare`],
//! [`ClientCore::finish_part`]).

pub mod objects;
mod read_only;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_cache::timer::StatClock;
use thor_cache::{CacheConfig, ClientCache};
use thor_core::{ClassDesc, Lsn, Oref, PageId};
use thor_wire::limits::{
    ACKS_MAX, CONTENTION_COUNT_MAX, DEMOTED_PAGES_MAX, DISCARDED_PAGES_MAX, PREFETCH_PAGES_MAX,
};
use thor_wire::version::VERSION_CONTENTION;
use thor_wire::{Piggyback, PrefetchHint, Reply, Request, RequestBody, ServerInfo};

use crate::error::{ClientError, ConflictCause};
use crate::limits::PREFETCH_FRAMES_DIVISOR;
use crate::pagemode::PageState;
use crate::session::commit_path::{CommitPath, ObjectShipping};
use crate::session::page_path::PageModes;
use crate::session::{ClientStats, CommitInfo, CommitOutcome, Part, ReconnectStats, SessionConfig};
use crate::typed::Class;

pub use objects::{Event, PartOutcome, Read};

/// Fetches made without reading ahead after a read-ahead that did not hold the page the next
/// miss wanted ([`SessionConfig::read_ahead`]).
pub(crate) const AHEAD_COOL_FETCHES: u32 = 2;
/// Pages after a reply's last one looked at for one the cache does not hold, to read ahead.
const AHEAD_SKIP_MAX: u32 = 4;

/// One conversion call in this many is timed (a power of two).
const CONVERSION_SAMPLE_EVERY: u64 = 64;

/// A slot of [`ClientCore::views`] whose view was dropped while later ones live.
pub(crate) const DEAD_VIEW: u32 = u32::MAX;

/// Conversion time, sampled. Reading the clock costs about 35 ns on this machine (two reads a
/// call), as much as installing an object or swizzling a reference, so timing every call
/// roughly doubled the conversion time it reported (and slowed the traversal by as much). One
/// call in [`CONVERSION_SAMPLE_EVERY`] is timed, the first included, and the total is the
/// sampled calls' mean times all calls: the calls are many (hundreds per fetched page) and
/// alike, so the estimate's error is small next to the run-to-run spread. One in 16 still
/// cost 2.8% of a cold OO7 T1 on medium (`perf`: 150,000 clock reads); one in 64 leaves
/// about 19,000 timed calls in that run. The clock is the driver's ([`StatClock`]); without
/// one nothing is timed.
#[derive(Debug, Default)]
pub(crate) struct ConversionClock {
    /// The clock, in nanoseconds (`None`: conversion is not timed).
    clock: Option<StatClock>,
    /// Conversion calls (installations and swizzles).
    calls: u64,
    /// Calls timed.
    sampled: u64,
    /// Their time, in nanoseconds.
    sampled_ns: u64,
}

impl ConversionClock {
    /// Counts a call; the clock reading if this one is timed.
    #[inline]
    pub(crate) fn start(&mut self) -> Option<u64> {
        self.calls += 1;
        let clock = self.clock?;
        (self.calls & (CONVERSION_SAMPLE_EVERY - 1) == 1).then(clock)
    }

    /// Ends a call begun by [`ConversionClock::start`].
    #[inline]
    pub(crate) fn stop(&mut self, t: Option<u64>) {
        if let (Some(t), Some(clock)) = (t, self.clock) {
            self.sampled += 1;
            self.sampled_ns += clock().saturating_sub(t);
        }
    }

    /// The estimated time of all calls.
    pub(crate) fn estimate(&self) -> Duration {
        if self.sampled == 0 {
            return Duration::ZERO;
        }
        let ns = u128::from(self.sampled_ns) * u128::from(self.calls) / u128::from(self.sampled);
        Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }
}

/// The seeds a core's random choices start from (the driver's to draw).
#[derive(Debug, Clone, Copy)]
pub struct Seeds {
    /// The session's key, the same on every connection (`thor_wire::Resume::key`).
    pub key: u64,
    /// The state of the generator of commit ids.
    pub commit_ids: u64,
}

/// The client's protocol state machine (see the module documentation). Fields are the
/// crate's: `Session` reads them as its own (its `Inner` dereferences to its core).
pub struct ClientCore {
    pub(crate) info: ServerInfo,
    pub(crate) cache: ClientCache,
    /// Class slot → class word in this database (0: not looked up yet).
    pub(crate) class_words: Vec<u32>,
    /// Class slot → bytes of the fixed part of the class stored for it, set with
    /// `class_words`: the declaration's `C::FIXED_BYTES`, or more when the stored class extends
    /// the declaration (`ClassDesc::extends`). Typed views of a class with a variable part find
    /// its count word after this many bytes, and `create` makes objects of the stored size.
    /// Never cleared (a view may outlive the abort that forgets the slot's class word), only
    /// set again when the slot is looked up again.
    pub(crate) class_fixed: Vec<u32>,
    /// Class slot → the descriptor `create` makes the slot's objects from (the declaration,
    /// or the declaration extended to the stored class's fixed part), set with
    /// `class_fixed` so that a create clones an `Arc`, not the descriptor's field names.
    pub(crate) class_descs: Vec<Option<Arc<ClassDesc>>>,
    /// The schema directory as read: class name → (class word, descriptor).
    pub(crate) schema: Option<FxHashMap<String, (u32, ClassDesc)>>,
    /// Class slots the current transaction pointed at classes it created, with the created
    /// class's serial: at commit they take the class's oref, at abort they are looked up again.
    pub(crate) new_class_slots: Vec<(usize, u32)>,
    /// Counters; `conversion_time` is filled in from `conversion` when they are read.
    pub(crate) stats: ClientStats,
    /// Installation and swizzling time, sampled.
    pub(crate) conversion: ConversionClock,
    /// Locations of the live views, in creation order ([`DEAD_VIEW`] for one dropped out of
    /// order). A view's object must not move or leave the cache; rather than counting a pin in
    /// the object's frame on every access (a cache miss per `get`), the core keeps this small
    /// list and pins the frames only while it runs something that may move objects (fetch,
    /// create, commit, abort, applying invalidations): see [`ClientCore::pinned`]. This is how
    /// Thor kept its invariant too: replacement scanned the stack for pointers (HAC paper,
    /// section 3.2.4). A driver without views leaves it empty.
    pub(crate) views: Vec<u32>,
    /// Nesting depth of pinned sections: the views' pins are in their frames while it is
    /// above zero.
    pub(crate) pinned_depth: u32,
    /// The settings (retries' attempts and backoff, the refresh interval, prefetch).
    pub(crate) cfg: SessionConfig,
    /// Whether a transaction is open: something was accessed or created since the last commit
    /// or abort. The first access of a transaction checks for a refresh
    /// ([`SessionConfig::refresh_after`]); `Session::run` refuses to start inside one.
    pub(crate) in_transaction: bool,
    /// Whether the cache's serials are this process's alone (a block from
    /// `crate::typed::identity`, set by the session's driver): then a commit records the orefs
    /// its created objects got, for `Ref` equality. A core driven by a simulation keeps its
    /// own serials from 0 and records nothing, so that it stays deterministic.
    pub(crate) unique_serials: bool,
    /// Set when an invalidation hit the open transaction (the message names the object). The
    /// transaction was aborted in the cache at once; the application learns of it at its next
    /// slow-path access or commit ([`ClientError::Conflict`] with
    /// [`ConflictCause::Invalidated`]), and a commit or abort clears it. Hits do not look at
    /// it: they stay as cheap as before, and whatever the application does meanwhile is
    /// thrown away by that commit or abort.
    pub(crate) doomed: Option<String>,
    /// The contention not yet reported to the server (`thor_wire::contention`, version 6):
    /// transactions an invalidation doomed, attempts run again, and the object of the latest
    /// doom. It rides on the next request of a connection that agreed on version 6, so that
    /// the server counts the aborts it never saw and its fair retries see this client lose.
    pub(crate) unreported: thor_wire::Contention,
    /// The class of the object whose invalidation doomed the transaction, looked up before
    /// its copy left the cache ([`ClientCore::doom`] names it in the message).
    pub(crate) hit_class: Option<String>,
    /// How transactions are committed: object shipping, or the page modes when the server
    /// runs one (`session::commit_path`).
    pub(crate) path: &'static dyn CommitPath,
    /// The page modes' state (images, recovery buffer), exactly when `path` is the page
    /// modes' ([`crate::pagemode`]).
    pub(crate) pages: Option<PageState>,
    /// Prefetch's window, when the client prefetches ([`SessionConfig::prefetch_pages`]).
    pub(crate) prefetch: Option<crate::prefetch::Window>,
    /// The read-ahead in flight, if any: the page it asks for and the further pages. While
    /// it is in flight no other request is sent (the driver takes its reply first), so the
    /// server sees the same one-at-a-time sequence of requests as without read-ahead.
    pub(crate) ahead: Option<(PageId, u16)>,
    /// Fetches to make before reading ahead again, after a read-ahead that did not hold the
    /// page the next miss wanted.
    pub(crate) ahead_cool: u32,
    /// When the last reply arrived, on the driver's clock (for
    /// [`SessionConfig::refresh_after`]).
    pub(crate) last_reply_ns: u64,
    /// State of the generator of retries' backoff jitter (SplitMix64), seeded from the
    /// client id so that clients do not retry in step.
    pub(crate) jitter: u64,
    /// The session's key, the same on every connection (`thor_wire::Resume::key`).
    pub(crate) key: u64,
    /// The stamps of the replies received (`reconnect`): `None` until a version-5 server
    /// stamped one that came with every invalidation.
    pub(crate) seen: Option<thor_wire::SeenRange>,
    /// The last reply's stamp was complete and settled: a read-only transaction may commit
    /// here (`read_only`).
    pub(crate) settled: bool,
    /// State of the generator of commit ids (SplitMix64).
    pub(crate) ids: u64,
    /// Whether commits carry an id to ask about them after a lost answer: the driver can
    /// reconnect and ask.
    pub(crate) asks_outcomes: bool,
    /// A commit whose answer was lost and whose outcome is not learned yet.
    pub(crate) unresolved: Option<u64>,
    /// The outcome of the last commit whose answer was lost, once learned.
    pub(crate) last_outcome: Option<CommitOutcome>,
    /// What the open transaction did to map leaves by point operations, for its commit's leaf
    /// deltas ([`crate::leaflog`]); cleared when a transaction begins.
    pub(crate) leaf_logs: crate::leaflog::LeafLogs,
    /// Reconnect counters.
    pub(crate) reconnect: ReconnectStats,
    /// Views lived through a dropped cache: no transaction starts until they are gone.
    pub(crate) stale_views: bool,
    /// What the reply the object-level API waits for answers ([`objects`]).
    pub(crate) pending: Option<objects::Pending>,
    /// The part of a transaction over several servers that voted and waits for its end
    /// ([`ClientCore::finish_part`]).
    pub(crate) voted: Option<Part>,
    /// The commit whose answer a broken connection lost, until resuming learns its outcome
    /// ([`ClientCore::disconnected`], [`ClientCore::resume`]).
    pub(crate) in_doubt: Option<Part>,
    /// The entry whose page the object-level API fetched again because the cached copy did
    /// not hold it (`Need::Stale`); a second miss of the same kind is `NoSuchObject`.
    pub(crate) stale_refetch: Option<u32>,
}

impl std::fmt::Debug for ClientCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCore")
            .field("client_id", &self.info.client_id)
            .field("in_transaction", &self.in_transaction)
            .field("doomed", &self.doomed)
            .finish_non_exhaustive()
    }
}

impl ClientCore {
    /// A core for a connection whose server said `info` (`HelloOk`), with `cfg`'s cache,
    /// policy, demotion, page-mode and prefetch settings (`cfg.prefetch_pages` as given:
    /// `None` is [`crate::limits::PREFETCH_PAGES_DEFAULT`]). `clock` times replacement and
    /// conversion for the counters (`None`: nothing is timed). `asks_outcomes`: commits carry an
    /// id so that a lost answer's outcome can be asked for after reconnecting. The cache spills
    /// nowhere; a driver with a disk sets a spill store on [`ClientCore::cache_mut`].
    pub fn new(
        info: ServerInfo,
        cfg: SessionConfig,
        seeds: Seeds,
        clock: Option<StatClock>,
        asks_outcomes: bool,
    ) -> Result<ClientCore, ClientError> {
        let mut cache = ClientCache::new(CacheConfig {
            budget_bytes: cfg.cache_bytes,
            page_size: info.page_size,
            policy: cfg.policy,
            background_replacement: cfg.background_replacement,
        })?;
        if let Some(clock) = clock {
            cache.set_clock(clock);
        }
        if info.demotions {
            cache.set_demotion(cfg.demote_pages);
        }
        let (path, pages): (&'static dyn CommitPath, _) = if info.commit_mode.is_page_based() {
            let state =
                PageState::new(info.commit_mode, info.page_size, cfg.cache_bytes, cfg.recovery)?;
            (&PageModes, Some(state))
        } else {
            (&ObjectShipping, None)
        };
        // Prefetch needs version 4's `Prefetch`; the page modes keep fetched pages' images
        // and fetch one page at a time.
        let n_prefetch = cfg.prefetch_pages.unwrap_or(crate::limits::PREFETCH_PAGES_DEFAULT);
        let prefetch = (n_prefetch > 0 && info.version >= 4 && pages.is_none()).then(|| {
            let max = usize::from(n_prefetch).min(PREFETCH_PAGES_MAX) as u16;
            let (used, unused) = cache.prefetch_outcomes();
            crate::prefetch::Window::new(max, used, unused)
        });
        Ok(ClientCore {
            info,
            cache,
            class_words: Vec::new(),
            class_fixed: Vec::new(),
            class_descs: Vec::new(),
            schema: None,
            new_class_slots: Vec::new(),
            stats: ClientStats::default(),
            conversion: ConversionClock { clock, ..ConversionClock::default() },
            views: Vec::new(),
            pinned_depth: 0,
            cfg,
            in_transaction: false,
            doomed: None,
            unreported: thor_wire::Contention::default(),
            hit_class: None,
            leaf_logs: crate::leaflog::LeafLogs::new(cfg.leaf_deltas),
            path,
            pages,
            prefetch,
            ahead: None,
            ahead_cool: 0,
            last_reply_ns: 0,
            jitter: u64::from(info.client_id.0) << 32 | u64::from(info.server_id.0),
            key: seeds.key,
            seen: None,
            settled: false,
            ids: seeds.commit_ids,
            asks_outcomes,
            unresolved: None,
            last_outcome: None,
            reconnect: ReconnectStats::default(),
            stale_views: false,
            unique_serials: false,
            pending: None,
            voted: None,
            in_doubt: None,
            stale_refetch: None,
        })
    }

    /// What the server said about itself.
    pub fn server(&self) -> &ServerInfo {
        &self.info
    }

    /// The cache, to read.
    pub fn cache(&self) -> &ClientCache {
        &self.cache
    }

    /// The cache, to change (a spill store, say). Changing the transaction's objects behind
    /// the core's back breaks its invariants.
    pub fn cache_mut(&mut self) -> &mut ClientCache {
        &mut self.cache
    }

    /// The counters.
    pub fn stats(&self) -> ClientStats {
        ClientStats { conversion_time: self.conversion.estimate(), ..self.stats }
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Whether an invalidation doomed the open transaction (it is aborted already; its next
    /// read or its commit fails with the conflict).
    pub fn is_doomed(&self) -> bool {
        self.doomed.is_some()
    }

    // ----- pins -----

    /// Records a new view of the object at `loc`; returns its slot.
    #[inline]
    pub(crate) fn push_view(&mut self, loc: u32) -> u32 {
        debug_assert_eq!(self.pinned_depth, 0, "views are made outside pinned sections");
        self.views.push(loc);
        (self.views.len() - 1) as u32
    }

    /// Forgets the view in `slot`.
    #[inline]
    pub(crate) fn drop_view(&mut self, slot: u32) {
        debug_assert_eq!(self.pinned_depth, 0, "views are dropped outside pinned sections");
        if slot as usize + 1 == self.views.len() {
            self.views.pop();
            while self.views.last() == Some(&DEAD_VIEW) {
                self.views.pop();
            }
        } else {
            self.views[slot as usize] = DEAD_VIEW;
        }
    }

    /// Enters a pinned section: on the outermost, every live view's frame is pinned.
    pub(crate) fn pin_views(&mut self) {
        if self.pinned_depth == 0 {
            for &loc in &self.views {
                if loc != DEAD_VIEW {
                    self.cache.pin(loc);
                }
            }
            // Frames kept only for views that are gone can go now.
            self.cache.release_dead_frames();
        }
        self.pinned_depth += 1;
    }

    /// Leaves a pinned section entered with [`ClientCore::pin_views`].
    pub(crate) fn unpin_views(&mut self) {
        self.pinned_depth -= 1;
        if self.pinned_depth == 0 {
            for &loc in &self.views {
                if loc != DEAD_VIEW {
                    self.cache.unpin(loc);
                }
            }
        }
    }

    /// Runs `f` with every live view's frame pinned, so that nothing `f` does (replacement,
    /// compaction, commit, abort, invalidation) moves or evicts an object a view points to.
    pub(crate) fn pinned<R>(&mut self, f: impl FnOnce(&mut ClientCore) -> R) -> R {
        self.pin_views();
        let r = f(self);
        self.unpin_views();
        r
    }

    // ----- classes -----

    pub(crate) fn type_mismatch<C: Class + ?Sized>(&self, got: u32) -> ClientError {
        let found = self
            .cache
            .class(got)
            .map_or_else(|| format!("class {got:#x}"), |d| d.name().to_string());
        ClientError::TypeMismatch { expected: C::NAME, found }
    }

    /// The class word of `C` if it is known without work, else 0: the hit path's check, one
    /// load. An installed object's class word is never 0 (null names no class, and an object
    /// is installed only with its class registered), so 0 sends the caller to the slow path,
    /// which registers `C`.
    #[inline(always)]
    pub(crate) fn known_class_word<C: Class + ?Sized>(&self) -> u32 {
        match C::BUILTIN {
            Some(b) => b.raw(),
            None => self.class_words.get(C::slot()).copied().unwrap_or(0),
        }
    }

    /// Registers the class object resident at `loc` as class `class`.
    pub(crate) fn register_class_at(&mut self, class: Oref, loc: u32) -> Result<(), ClientError> {
        if self.cache.class_word(loc) != thor_core::builtin::META.raw() {
            return Err(ClientError::BadClass(format!("{class:?} is not a class object")));
        }
        let desc = ClassDesc::from_class_object(self.cache.object(loc))
            .map_err(|e| ClientError::BadClass(e.to_string()))?;
        self.cache.register_class(class.raw(), Arc::new(desc))?;
        Ok(())
    }

    /// Swizzles the unswizzled, non-null reference word `w` at byte `off` of the object at
    /// `loc` (the first time it is read in the cache) and returns its handle `(entry, oref)`;
    /// `(u32::MAX, w)` when the table is full (an unbound handle, which resolves by oref on
    /// use), `(u32::MAX, 0)` for null (`Ref::NULL`).
    #[cold]
    #[inline(never)]
    pub(crate) fn swizzle(&mut self, loc: u32, off: usize, w: u32) -> (u32, u32) {
        let t = self.conversion.start();
        let r = match self.cache.follow(loc, off) {
            Ok(Some((i, o))) => (i, o),
            Ok(None) => (u32::MAX, 0),
            Err(_) => (u32::MAX, w),
        };
        self.conversion.stop(t);
        r
    }

    /// Stores a reference (handle `(idx, oref)`, or null) at byte `off` of the object of entry
    /// `obj`, which the transaction has written ([`ClientCache::before_write`]) or created.
    pub(crate) fn store_ref(
        &mut self,
        obj: u32,
        off: usize,
        idx: u32,
        oref: u32,
    ) -> Result<(), ClientError> {
        let target = if oref == 0 { None } else { Some(self.cache.rebind(idx, oref)?) };
        self.cache.store_ref(obj, off, target)?;
        Ok(())
    }

    // ----- prefetch and read-ahead -----

    /// How many further pages the next fetch asks for: prefetch's window
    /// ([`crate::prefetch`]) within an eighth of the cache's frames, or 0 (a plain `Fetch`)
    /// when the client does not prefetch.
    pub(crate) fn prefetch_extra(&mut self) -> u16 {
        let (used, unused) = self.cache.prefetch_outcomes();
        let frames = self.cache.usable_frames() / PREFETCH_FRAMES_DIVISOR;
        let Some(w) = &mut self.prefetch else { return 0 };
        let n = w.next(used, unused);
        usize::from(n).min(frames) as u16
    }

    /// Installs the pages a reply brought beyond the one asked for, except those the cache
    /// holds already. Returns how many it installed and the highest page id among them (0:
    /// none).
    pub(crate) fn install_prefetched(
        &mut self,
        pages: Vec<(PageId, Bytes)>,
    ) -> Result<(u64, u32), ClientError> {
        let mut brought = 0;
        let mut last = 0;
        for (q, bytes) in pages {
            last = last.max(q.get());
            if self.cache.has_page(q) {
                self.stats.prefetch_skipped += 1;
                continue;
            }
            self.cache.install_prefetched(q, &bytes)?;
            self.stats.pages_prefetched += 1;
            brought += 1;
        }
        if let Some(w) = &mut self.prefetch {
            w.brought(brought);
        }
        Ok((brought, last))
    }

    /// Whether to read ahead ([`SessionConfig::read_ahead`]) after a reply to a prefetch of
    /// `extra` further pages brought `brought` of them, the highest being page `last`, and
    /// which page: the first after `last` that the cache does not hold.
    ///
    /// Only when the server's pages follow in creation order (the hint `Following`) and it
    /// found at least half of what was asked: then the pages after them are the likely next
    /// ones. A read-ahead whose pages the next miss did not want stops reading ahead for
    /// [`AHEAD_COOL_FETCHES`] fetches (counted down here). Nothing is read ahead while the
    /// transaction is doomed (its next access fails anyway).
    pub(crate) fn ahead_page(&mut self, last: u32, brought: u64, extra: u16) -> Option<PageId> {
        if !self.cfg.read_ahead
            || self.ahead.is_some()
            || self.doomed.is_some()
            || self.prefetch.is_none()
            || !matches!(self.cfg.prefetch_hint, PrefetchHint::Following)
            || brought * 2 < u64::from(extra)
        {
            return None;
        }
        if self.ahead_cool > 0 {
            self.ahead_cool -= 1;
            return None;
        }
        let page = (1..=AHEAD_SKIP_MAX)
            .filter_map(|k| last.checked_add(k).and_then(PageId::new))
            .find(|&p| !self.cache.has_page(p))?;
        // As many pages as the request before it asked for. The window is not consulted:
        // it would read the pages just brought and not yet used as a miss that used none of
        // them and halve itself; it moves at the next demand fetch, which sees how the pages
        // of both replies were used. Only a prefetched page evicted unused meanwhile (the
        // cache is too small for what comes) stops the read-ahead.
        let (_, unused) = self.cache.prefetch_outcomes();
        if self.prefetch.as_ref().is_none_or(|w| w.wasted_since(unused)) {
            return None;
        }
        Some(page)
    }

    // ----- requests and replies -----

    /// The request for `body` with what rides on it: the contention report, the
    /// acknowledgements of applied invalidations and the pages discarded and demoted (never
    /// `fetching`, the page this request asks for), and the demoted pages' bytes the server
    /// asked for, as many as the server's frame limit leaves room for after the body. If the
    /// driver cannot send it, [`ClientCore::unsent`] takes it back.
    pub fn request(&mut self, body: RequestBody, fetching: Option<PageId>) -> Request {
        let mut req = Request::new(body);
        // The contention report first: its 12 bytes count against the room for the rest.
        if self.info.version >= VERSION_CONTENTION && !self.unreported.is_empty() {
            req.piggyback.contention = Some(std::mem::take(&mut self.unreported));
        }
        // A body over a limit fails when it is sent whatever rides on it.
        let room = req.frame_bytes().map_or(0, |n| self.info.max_frame_bytes.saturating_sub(n) / 4);
        let acks = self.cache.take_acks(ACKS_MAX.min(room));
        let room = room - acks.len();
        let discarded = self.cache.take_discarded(DISCARDED_PAGES_MAX.min(room), fetching);
        let room = room - discarded.len();
        let demoted = self.cache.take_demoted(DISCARDED_PAGES_MAX.min(room), fetching);
        // Demoted pages the server asked for, as many as fit in what is left of the frame
        // (`room` is in 4-byte words; two go to the demotion sections' counts).
        let room = room - demoted.len();
        let fit = room.saturating_sub(2) * 4 / (self.info.page_size + 8);
        let demoted_pages = self.cache.take_demoted_pages(DEMOTED_PAGES_MAX.min(fit));
        let contention = req.piggyback.contention.take();
        req.piggyback = Piggyback { acks, discarded, demoted, demoted_pages, contention };
        req
    }

    /// Takes back a request built by [`ClientCore::request`] that was not sent: what rode on
    /// it goes back to the cache for the next request (an acknowledgement must not be lost,
    /// or the object stays in the server's invalid set and every commit that reads it is
    /// refused). The demoted pages' bytes are not kept: the server stops waiting for them by
    /// itself.
    pub fn unsent(&mut self, req: Request) {
        let Piggyback { acks, discarded, demoted, contention, .. } = req.piggyback;
        self.cache.requeue_acks(acks);
        self.cache.requeue_discarded(&discarded);
        self.cache.requeue_demoted(&demoted);
        if let Some(c) = contention {
            // What happened since is added to it; the latest doom's object wins.
            let u = &mut self.unreported;
            let most = CONTENTION_COUNT_MAX as u32;
            u.invalidation_aborts = (u.invalidation_aborts + c.invalidation_aborts).min(most);
            u.retries = (u.retries + c.retries).min(most);
            u.object = u.object.or(c.object);
        }
    }

    /// Applies what a reply carries besides its body, before anything uses the body: its
    /// stamp, the demotions it answers (every demotion reported so far: one request at a
    /// time), and its invalidations, with the views' frames pinned (an object a view points at
    /// stays until the transaction ends). Returns the first invalidated object that the open
    /// transaction read or wrote, if any; the caller dooms the transaction with it
    /// ([`ClientCore::doom`]) unless the reply answers a commit.
    pub fn apply(&mut self, reply: &Reply, now_ns: u64) -> Option<Oref> {
        self.last_reply_ns = now_ns;
        self.note_seen(reply);
        self.note_settled(reply);
        self.cache.demotions_answered(&reply.wanted);
        if reply.invalidations.is_empty() {
            return None;
        }
        let hit = self.pinned(|core| {
            let mut hit = None;
            for &o in &reply.invalidations {
                // The class is looked up before the copy leaves, for the conflict's message,
                // and only until the first object the transaction used.
                let class =
                    if hit.is_none() { core.cache.class_name(o).map(str::to_owned) } else { None };
                // A map leaf whose every use is in a leaf log is checked key by key at the
                // server (`crate::leaflog`): its invalidation does not doom the transaction.
                let logged = core.cfg.leaf_deltas
                    && core.info.version >= thor_wire::version::VERSION_LEAF_DELTAS
                    && core.leaf_logs.covers(o);
                if core.cache.invalidate(o).conflict && hit.is_none() && !logged {
                    hit = Some(o);
                    core.hit_class = class;
                }
            }
            hit
        });
        self.stats.invalidations += reply.invalidations.len() as u64;
        hit
    }

    /// Notes a reply's seen stamp (`session::reconnect`).
    pub(crate) fn note_seen(&mut self, reply: &Reply) {
        let Some(s) = reply.seen else { return };
        let complete = if s.complete { Some(s.stamp) } else { self.seen.map(|r| r.complete) };
        self.seen = complete.map(|complete| thor_wire::SeenRange { high: s.stamp, complete });
    }

    /// A fresh commit id (never 0).
    pub(crate) fn next_commit_id(&mut self) -> u64 {
        loop {
            let id = splitmix64(&mut self.ids);
            if id != 0 {
                return id;
            }
        }
    }

    // ----- transactions -----

    /// Whether a transaction starting at `now_ns` first makes a round trip to collect the
    /// invalidations pending for this client: the last reply is older than
    /// [`SessionConfig::refresh_after`].
    pub fn needs_refresh(&self, now_ns: u64) -> bool {
        self.cfg.refresh_after.is_some_and(|after| {
            now_ns.saturating_sub(self.last_reply_ns) as u128 >= after.as_nanos()
        })
    }

    /// An invalidation of `o` hit the open transaction: it cannot commit. Abort it in the cache
    /// now (its stale copies leave, invalidated modified objects are discarded rather than
    /// restored, and their acknowledgements can go out); the application hears of it at its
    /// next slow-path access or commit.
    pub fn doom(&mut self, o: Oref) {
        if self.doomed.is_some() {
            return;
        }
        self.pinned(ClientCore::abort_local);
        self.stats.conflicts += 1;
        let u = &mut self.unreported;
        u.invalidation_aborts = (u.invalidation_aborts + 1).min(CONTENTION_COUNT_MAX as u32);
        u.object = Some(o);
        let class = match self.hit_class.take() {
            Some(name) => format!(" (an object of class {name})"),
            None => String::new(),
        };
        self.doomed = Some(format!("object {o}{class} changed after this client's copy was sent"));
    }

    /// The conflict error if the open transaction is doomed.
    pub fn check_doomed(&self) -> Result<(), ClientError> {
        match &self.doomed {
            None => Ok(()),
            Some(message) => Err(ClientError::Conflict {
                cause: ConflictCause::Invalidated,
                message: message.clone(),
            }),
        }
    }

    /// Ends the open transaction as aborted, locally: the cache's abort (unless an invalidation
    /// did it already, in which case what was done since is undone), no message to the server.
    pub fn end_aborted(&mut self) {
        self.in_transaction = false;
        if self.doomed.take().is_some() {
            // Counted when the invalidation aborted it.
            self.pinned(ClientCore::abort_cache);
        } else {
            self.pinned(ClientCore::abort_local);
        }
    }

    /// How long to wait after the `attempt`-th attempt (from 1) of a transaction conflicted,
    /// before the next: `run_backoff_min` doubled per earlier attempt, capped at
    /// `run_backoff_max`, then a random point in the upper half of that. Counts the retry, for
    /// the client's counters and the contention report.
    pub fn backoff(&mut self, attempt: u32) -> Duration {
        let min = self.cfg.run_backoff_min.as_nanos() as u64;
        let max = (self.cfg.run_backoff_max.as_nanos() as u64).max(min);
        let cap = min.saturating_mul(1u64 << (attempt - 1).min(63)).min(max);
        let half = cap / 2;
        let r = splitmix64(&mut self.jitter);
        self.stats.retries += 1;
        let u = &mut self.unreported;
        u.retries = (u.retries + 1).min(CONTENTION_COUNT_MAX as u32);
        Duration::from_nanos(cap - half + r % (half + 1))
    }

    /// Where the classes the open transaction created are among its created objects, for their
    /// slots to take the orefs the server gives them at commit.
    pub(crate) fn class_slots(&self) -> Vec<(usize, Option<u32>)> {
        self.new_class_slots
            .iter()
            .map(|&(slot, serial)| (slot, self.cache.created_index(serial)))
            .collect()
    }

    /// The server committed the transaction (`lsn`; the orefs of its created objects) at
    /// `now_ns`: the cache makes it so.
    pub(crate) fn committed(
        &mut self,
        part: Part,
        lsn: Lsn,
        orefs: &[Oref],
        now_ns: u64,
    ) -> Result<CommitInfo, ClientError> {
        // The tagged words the created objects had, to record their orefs for `Ref` equality.
        let words: Vec<u32> = if self.unique_serials {
            self.cache.created().iter().map(|&i| self.cache.oref_of(i)).collect()
        } else {
            Vec::new()
        };
        if let Err(e) = self.cache.commit_done(orefs) {
            // The server says it committed, with orefs that cannot be right: its outcome is
            // unknown; what it wrote leaves the cache (the transaction did commit).
            self.abort_unknown();
            return Err(ClientError::CommitUnknown(Box::new(e.into())));
        }
        crate::typed::identity::record(words.iter().zip(orefs).map(|(&w, o)| (w, o.raw())));
        // Classes created by this transaction now have orefs.
        self.new_class_slots.clear();
        for (slot, k) in part.class_slots {
            if let Some(k) = k {
                self.class_words[slot] = orefs[k as usize].raw();
            }
        }
        if part.n_created > 0 && self.schema.is_some() {
            // Re-read lazily: class words in it were serials.
            self.schema = None;
        }
        self.stats.commits += 1;
        self.stats.commit_time += Duration::from_nanos(now_ns.saturating_sub(part.started_ns));
        self.stats.bytes_shipped += part.shipped;
        Ok(CommitInfo { lsn, created: part.n_created, modified: part.n_modified })
    }

    /// Whether this client's part of the open transaction writes (modifies or creates).
    pub(crate) fn part_writes(&self) -> bool {
        self.cache.modified().len() > 0 || !self.cache.created().is_empty()
    }

    /// Aborts the transaction in the cache and counts it.
    pub(crate) fn abort_local(&mut self) {
        self.abort_cache();
        self.stats.aborts += 1;
    }

    /// Aborts, and counts, a transaction whose outcome is unknown (it may have committed at
    /// the server): as [`ClientCore::abort_local`], but the objects it modified leave the
    /// cache instead of going back to their copies from before it, which are stale if it
    /// committed (`ClientCache::abort_unknown`; found by thor-sim's real clients in the
    /// two-phase world: a part ended without its decision kept the old copies, and a later
    /// transaction read one and validated, a lost update).
    pub(crate) fn abort_unknown(&mut self) {
        self.abort_cache_with(true);
        self.stats.aborts += 1;
    }

    /// Aborts the transaction in the cache: undo copies back, created objects and the class
    /// slots pointed at created classes dropped.
    pub(crate) fn abort_cache(&mut self) {
        self.abort_cache_with(false);
    }

    fn abort_cache_with(&mut self, outcome_unknown: bool) {
        let created_any = !self.cache.created().is_empty();
        if outcome_unknown {
            self.cache.abort_unknown();
        } else {
            self.cache.abort_done();
        }
        let path = self.path;
        path.aborted(self);
        for (slot, _) in std::mem::take(&mut self.new_class_slots) {
            self.class_words[slot] = 0;
        }
        if created_any {
            self.schema = None;
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): one 64-bit word of state, well mixed, enough for
/// backoff jitter and commit ids.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
