//! thor-client: the library applications use to reach a thor server.
//!
//! - [`Session`]: a connection, a client cache (HAC or FPC, by [`SessionConfig`]) and the
//!   current transaction; fetches pages on misses and ships object versions at commit.
//!   Transactions are optimistic (CLOCC): [`Session::run`] runs one and retries it when
//!   concurrency control refuses it ([`ClientError::Conflict`]). Requests time out, and a
//!   session made with a [`Dialer`] ([`Session::connect`]) survives a broken connection
//!   ([`session::reconnect`]).
//! - [`proto`]: the client's protocol as a sans-I/O state machine, [`proto::ClientCore`]
//!   (time passed in, no transport, no blocking), which `Session` drives; its object-level API
//!   lets a non-blocking driver (a simulator of many clients in one thread) run the real
//!   client protocol.
//! - [`typed`]: classes declared once with [`class!`], typed references [`Ref`], and
//!   [`View`]s that read fields straight from the cached bytes.
//! - [`cluster`]: [`Cluster`], sessions with several servers, references across them through
//!   surrogates ([`XRef`]), and transactions that commit at all of them or none (two-phase
//!   commit).
//! - [`spill`]: the file a session's cache steals a transaction's objects to when they
//!   outgrow it, so a transaction may write more than the cache holds.
//! - [`limits`]: every bound on what a session does for one request of the application.
//!
//! ```no_run
//! # fn demo(transport: Box<dyn thor_wire::Transport>) -> Result<(), thor_client::ClientError> {
//! use thor_client::{Ref, Session, SessionConfig};
//! thor_client::class! {
//!     pub class Counter("demo.Counter") { value: u64 }
//! }
//! let s = Session::new(transport, SessionConfig::default())?;
//! let c = s.create_fixed::<Counter>()?;
//! c.set(Counter::value, 1)?;
//! let r: Ref<Counter> = c.as_ref();
//! drop(c);
//! s.set_root(0, r)?;
//! s.commit()?;
//! let c = s.get(s.root::<Counter>(0)?)?;
//! assert_eq!(c.get(Counter::value), 1);
//! # Ok(()) }
//! ```
//!
//! *Architecture invariant:* the client talks to the server only through a
//! [`thor_wire::Transport`], so tests and embedded uses run it over an in-process transport.
//! Its only other I/O is the spill file ([`spill`]), an unlinked temporary file that holds
//! nothing past the transaction that wrote it. The protocol itself ([`proto::ClientCore`])
//! does no I/O at all: it returns requests and takes replies, with time passed in; `Session`
//! is the driver that owns the transport, the clock and the waits.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The library applications use (`session.rs`, `typed.rs`), over the protocol core
//! (`proto.rs`, `proto/objects.rs`). A `Session` owns a transport (`thor_wire::Transport`) and
//! a `ClientCore`, which owns the `ClientCache`, which holds the current transaction (read set,
//! modified objects with their undo copies, created objects); the core drives it through the
//! cache's transaction interface and keeps beside it only the class slots pointed at classes
//! the transaction created. Commit ships the new versions of modified objects and the created
//! objects as the cache exports them (object shipping, never pages; all of them exported
//! straight into one buffer, `ClientCache::export_append`, that the request's slices share), with references to created
//! objects tagged by their index in the commit; abort restores the undo copies and drops created
//! objects. `spill.rs` is the cache's spill store for transactions larger than the cache
//! (`FileSpill`: a file in the temporary directory unlinked as soon as it is made, so a crashed
//! client leaves nothing and loses only its uncommitted transaction; appends through a bounded
//! write buffer, `limits::SPILL_BUFFER_BYTES`; truncated at the end of each transaction), set up
//! by `Session::new` unless `SessionConfig::spill_bytes_max` is 0 or the commit mode is
//! page-based. `read_large` reads a large object's tree within a piece budget: what a well-formed
//! tree of the length its root claims has, and at most `limits::LARGE_PIECES_MAX`, so a server
//! that serves a tree with a cycle or shared pieces gets an error, not a session reading for
//! ever. `latency.rs` is the `LatencyHistogram` every session records its fetches in (HdrHistogram from the
//! `hdrhistogram` crate, 1 ns to an hour at 2 significant digits: 36 KiB fixed, percentiles within
//! 1%, exact maximum and sum beside it, no allocation per sample), read with
//! `Session::fetch_latency`. The typed API: `class!` declares a
//! class once (its layout and so its stored descriptor follow from the field list); `Ref<T>` is an
//! entry index plus the oref it was made for; `View<T>` pins an object and reads fields straight
//! from the cached bytes; writes go through the transaction. Classes are found (or created) by name
//! in the schema directory, root slot 15. Fields may also be `bool` (a word, nonzero true),
//! `Option<T>` (a tag word and the value; `Option<Ref<T>>` is a reference, null `None`).
//! `values.rs` has the values whose length changes, as objects of their own since objects keep
//! their size: strings (`Str`, class `thor.Str`, immutable UTF-8; `View::{get_str, set_str}`,
//! `Session::{create_str, read_str}`) and sequences (`Seq<T>`, class `thor.Seq`: a header with
//! length, element type and a storage object of `thor.Bytes` or `thor.Refs` that a push past its
//! room replaces by one twice as large, so references to the header stay valid; `SeqView`).
//! Both are bounded by one object per page (`ClientError::TooLong`); malformed stored values
//! (not UTF-8, a length past the storage, another element type) are `ClientError::BadValue`.
//! `tests/values.rs` checks each kind through commit and a fresh session, growth, abort,
//! malformed values, a conflict, and sequences against a `Vec` model.
//! The stored class of a declaration must equal it or *extend* it (`ClassDesc::extends`: the
//! same name, reference slots and variable part, a longer fixed part whose extra words are not
//! references); an extension is read and written through the declaration (`Inner::class_fixed`
//! keeps each class slot's stored fixed part: typed views of classes with a variable part find its
//! count word after it, and `create` makes objects of the stored size), and
//! `Session::stored_class` says what is stored. Any other difference is
//! `ClientError::SchemaMismatch`; appending fields is done offline (`thor::Upgrade`).
//! `tests/class_extension.rs` has both sides of the rule.
//!
//! `pagemode.rs` is the client half of the QuickStore study's page-based commit modes (issue 14),
//! used when the server's `HelloOk` names one (in `wpl` no copy, diff or record: the written pages
//! go whole with their fetched `version`, take the commit's LSN after it, and are dropped after
//! an abort so that a retry after WPL's page rule fetches them fresh): the session keeps the page images it fetched
//! beside the cache (bounded by `RecoveryConfig::shadow_pages`; HAC keeps objects, not pages, and
//! an image gives each object's place in its page), calls the recovery buffer
//! (`thor_recovery::RecoveryBuffer`, `RecoveryConfig::buffer_pages`, `block_bytes`) on each
//! object's first write of a transaction (its own set of written objects decides "first"; no
//! change to thor-cache), sends the records of the oldest page with undo bytes (`PageRecords`)
//! when the buffer is full, steals the oldest written page when the written pages fill the
//! images' bound (its records with undo and, ESM and WPL, the page whole go in a `PageRecords`;
//! its image is dropped, and a later write fetches it again and lays the transaction's objects
//! back in), and at commit builds each written page (image, saved units laid back,
//! written objects' new bytes from `ClientCache::export`), diffs it (PD, SD) or logs the saved
//! blocks (SL), and sends `PageCommit` with the read set, the write set, the created objects, the
//! records and, in ESM modes, the pages. `Session::page_mode_stats` counts records, early
//! records, bytes, pages shipped, pages stolen, copies and image refetches; `ClientStats::bytes_shipped`
//! counts everything a commit ships in every mode. `tests/page_modes.rs` runs every mode against
//! a model and through disk deaths and crashes.
//!
//! *Architecture Invariant:* no I/O of its own: everything goes through a `Transport`, so tests run
//! the client over the in-process transport.
//!
//! `cluster.rs` is `Cluster`: a `Session` per server, opened on first need through the
//! application's `Connector` (a fixed list of servers, each slot a `OnceCell`, so sessions are
//! borrowed from `&Cluster`), each with its own cache, directory and invalid set. `XRef` is a
//! reference with its server. A *surrogate* (class `thor.Surrogate`, an ordinary typed class: the
//! target's server id and oref) refers to an object at another server; `Cluster::resolve`/`get`
//! follow one hop, `Cluster::refer` returns the reference to store (the target's own at the same
//! server, else a surrogate this cluster made before, else a new one in the transaction; the
//! target must be committed). `Cluster::commit` commits a one-server transaction as that
//! session's commit; over several it picks the timestamp (wall clock, random tie-breaker), the
//! coordinator (the home server if it writes, else the first writer; none if nothing is written),
//! sends every part (`Session::part_send`, which ships what `commit` would in a `Prepare`), then
//! reads every answer and applies the coordinator's decision (or, read-only, everyone's) to each
//! part's cache. A part whose answer was lost while the coordinator committed is aborted in its
//! cache (its session reconnects by itself, and the resume invalidates what the part wrote); a
//! two-phase commit whose answers were lost is `ClientError::CommitUnknown`. `tests/cluster.rs` runs two engines over
//! `LocalPeers`: a reference followed across servers, a transfer over two servers, a stale part
//! refused and aborted everywhere, a read-only participant that hears nothing back, a read-only
//! transaction with no coordinator, and lost votes that the coordinator's timeout aborts.
//!
//! Prefetch (issue 16, `SessionConfig::prefetch_pages` and `prefetch_hint`): a fetch becomes a
//! `Prefetch` asking for up to a window of further pages; frames for all of them are freed while
//! it is on the wire, they are installed with `install_prefetched` (those already held
//! skipped), and the asked page last, so that none of them evicts it. `prefetch.rs` is the
//! window: it starts at the setting, halves when a prefetched page was evicted unused or when
//! the last fetch's pages went unused until the next miss, grows with use, probes with one page
//! every 32 fetches at 0, and never asks for more than an eighth of the frames. The default is
//! 32 pages, following ones, over a network transport and off over an in-process one
//! (`Transport::in_process`), as measured in `docs/oo7.md` ("Prefetch (issue 16)");
//! `Session::prefetch` says what the session applies. Not in the page-based commit modes.
//! Read-ahead (`SessionConfig::read_ahead`, off by default: on loopback it did not pay, see docs/oo7.md "Read-ahead"; with the `Following` hint only):
//! when a reply brought at least half the pages it asked for, the session at once sends a
//! `Prefetch` for the first uncached page after them, as many pages as the last request asked
//! for (the window is left alone; a prefetched page evicted unused since it last moved stops
//! it), and frees frames for them, without waiting;
//! the traversal goes on with what it has, and the next miss takes that reply first (if it holds
//! the page, the miss makes no request; if not, read-ahead pauses for two fetches). At most one
//! is in flight, and every other request (`round_trip`, commit, prepare, `fetch_image`) settles
//! it first, its pages installed with views pinned, so the server sees the same one-at-a-time
//! order of requests and its invalidations doom the transaction before a commit is built
//! (`ClientStats::{reads_ahead, reads_ahead_hit}`).
//! `tests/prefetch.rs` has one scenario per behaviour.
//!
//! Concurrency control (CLOCC, `papers/thor-ecoop99.txt` section 4.1) at the client: every
//! request piggybacks the cache's acknowledgements and discarded pages (within the room the
//! server's frame limit leaves; put back in the cache if the request cannot be sent), and every
//! reply's invalidations are applied before its body is used. An invalidation of an object the
//! open transaction read or wrote *dooms* it: it is aborted in the cache at once, and the next
//! slow-path access or commit returns `ClientError::Conflict { cause: Invalidated }` (hits do
//! not look: the hit path costs what it did); a `CommitOk` reply is the exception, since the
//! server validated that transaction. Commits, read-only ones included, carry the read set; the
//! server's `Stale`, `Conflict` and `TooOld` refusals become `ClientError::Conflict` with that
//! cause, the transaction aborted. `Session::run` runs a closure as a transaction and retries it
//! on conflicts with bounded, jittered exponential backoff (`SessionConfig::run_attempts_max`,
//! `run_backoff_min`, `run_backoff_max`; SplitMix64 seeded by the client id). With
//! `SessionConfig::refresh_after` (1 s by default), a transaction whose first access comes that
//! long after the last reply first makes an `Abort` round trip, the cheapest request, to collect
//! pending invalidations. On a connection that agreed on wire version 6, the next request
//! carries a contention report (`thor_wire::contention`): the transactions an invalidation
//! doomed and the attempts `run` made again since the last report, and the object of the latest
//! doom, which the server counts (its refusal counters never see those aborts) and which its
//! fair retries treat as a loss on that object. `tests/clocc.rs` has one scenario per behaviour.
//!
//! A broken connection (`session/reconnect.rs`, issue 38): every request waits for its reply at
//! most `SessionConfig::request_timeout` (a commit `commit_timeout`, set on the transport per
//! request with `Transport::set_timeout`). A session made with a `Dialer` (`Session::connect`;
//! `thor::connect` builds one, `Cluster` one per server from its `Connector`) reconnects by
//! itself when a request fails or the server closes the connection (`Timeout`, `ShuttingDown`,
//! `SessionExpired`): the open transaction is aborted in the cache and reported as
//! `ClientError::Conflict { cause: Disconnected }`, the session dials with jittered exponential
//! backoff (`ReconnectConfig`; the attempt's number goes to the dialer, which may rotate over
//! addresses) and sends `Resume` with its key, the seen stamps of the replies it received and
//! the pages it caches anything of (`ClientCache::cached_pages`); the server keeps the cache
//! (invalidating what changed) or the session drops it (`ClientCache::invalidate_all`). A commit
//! carries a random id (`CommitWithId`) when it writes; if its answer is lost the `Resume` asks,
//! and the commit ends as if answered (committed), as a `Disconnected` conflict (not committed,
//! which `run` retries) or as `ClientError::CommitUnknown` (which `run` retries only with
//! `SessionConfig::run_retries_unknown`). `Session::{commit_outcome, reconnect_stats}`.
//! `tests/reconnect.rs` runs sessions over TCP against servers that crash and come back, a
//! proxy that stops forwarding, and a cluster.
//!
//! A replicated server (`group.rs`, issue 33): `Session::connect_group` takes a `GroupDialer`
//! (each replica's id and dialer); `group::Route`, without I/O, picks the replica to dial: the
//! one that served last, the leader an `Error(NotLeader)` names (at once, once in a row), else
//! the next one after the reconnect's backoff. `NotLeader` at the handshake, at the resume or
//! answering any request breaks the connection and the session resumes at the leader as after
//! any break; giving up after `give_up_after` is `ClientError::NoLeader`.
//! `ReconnectStats::{redirects, failovers}`, `Session::replica`; `Cluster::with_groups` (a
//! `GroupConnector`) gives each server's session its group; `ServerAddr::parse` reads a group
//! address (`1=h:7401,2=h:7402`). `tests/group_dialer.rs` runs sessions against fake replicas
//! in front of real network servers.
//!
//! *Architecture Invariant:* a `Session` is single-threaded (`!Sync`); views hold raw pointers to
//! pinned objects, never borrows of the session's state, and every method borrows that state only
//! for its own duration.
//!
//! *Architecture Invariant:* the session never touches the cache's tables: every access, write and
//! commit step is a `ClientCache` method, so the cache's invariants are the cache's to keep. Every
//! bound on the work one call may do for a faulty server is in `limits.rs`.
//!
//! *API Boundary:* `Cluster::{new, session, root, resolve, get, create, refer, commit, abort,
//! run, stats}`, `XRef`, `Surrogate`, `Connector`, `ClusterStats`;
//! `Session::{connect, commit_outcome, reconnect_stats}`, `Dialer`, `ReconnectConfig`,
//! `ReconnectStats`, `CommitOutcome`; `Session::{connect_group, replica}`, `group::{GroupDialer,
//! Replica, ReplicaDialer, Route, ServerAddr, not_leader}`, `Cluster::with_groups`,
//! `GroupConnector`;
//! `Session::{new, get, create, root, set_root, commit, abort, run, create_large,
//! read_large, stored_class, stats, cache_stats, server_stats, server_backup, has_page, ref_to, page_mode_stats,
//! commit_mode, prefetch}`, `prefetch::{Window, PROBE_EVERY}`, `SessionConfig`, `ClientStats`, `RecoveryConfig`, `PageModeStats`,
//! `View::{get, set, var_len, var_bytes, set_var_bytes, read_var_bytes, write_var_bytes, var_ref,
//! set_var_ref, get_str, set_str}`, `Ref`, `class!`, `Str`, `Seq`, `SeqView`, `Elem`,
//! `Session::{create_str, read_str, create_seq, seq}`, `max_str_bytes`, `ClientError`
//! (`is_conflict`), `ConflictCause`.

pub mod cluster;
pub mod error;
pub mod group;
pub mod latency;
mod leaflog;
pub mod limits;
pub mod map;
pub mod pagemode;
pub mod prefetch;
pub mod proto;
pub mod session;
pub mod spill;
pub mod typed;
pub mod values;

pub use cluster::{Cluster, ClusterStats, Connector, GroupConnector, Surrogate, XRef};
pub use error::{ClientError, ConflictCause};
pub use group::{GroupDialer, Replica, ReplicaDialer, ServerAddr};
pub use latency::LatencyHistogram;
pub use map::{KeyEncode, Map, MapIter, MapKey, MapValue, MapView, PrefixKey};
pub use pagemode::{PageModeStats, RecoveryConfig};
pub use session::{
    ClientStats, CommitInfo, CommitOutcome, Dialer, ReconnectConfig, ReconnectStats, SCHEMA_SLOT,
    Session, SessionConfig, View,
};
pub use thor_cache::{HacParams, PolicyConfig};
pub use typed::{Any, Bytes, Class, Field, Large, Ref, Refs};
pub use values::{Elem, Seq, SeqView, Str, max_str_bytes};

#[doc(hidden)]
pub use thor_core;
