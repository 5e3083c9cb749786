//! thor's client cache managers. No I/O: everything here is a pure data structure driven by
//! its caller, so the OO7 experiments run exactly the code that ships. The page replacement
//! policies FPC orders its frames with are the `thor-policy` crate.
//!
//! - [`arena`]: the preallocated frames;
//! - [`core`]: the indirection table, lazy installation, swizzling, pins, created and modified
//!   objects, and the memory budget that covers frames and tables;
//! - [`manager`]: the [`CacheManager`] trait (a replacement strategy over the core) and
//!   [`ClientCache`], which runs the one a [`CacheConfig`] names;
//! - [`hac`]: HAC, hybrid adaptive caching: pages, and only the hot objects of the pages
//!   that are poorly used (the paper's client cache);
//! - [`fpc`]: FPC, whole pages with perfect LRU (`thor_policy::Lru`);
//! - [`gom`]: GOM, dual buffering: a page buffer and an object buffer split statically, each
//!   perfect LRU, the used objects of evicted pages copied to the object buffer;
//! - [`paged`]: whole pages in any `thor_policy` order: QuickStore (CLOCK and its mapping
//!   objects), CLOCK, ARC, S3-FIFO, W-TinyLFU;
//! - [`spill`]: transactions larger than the cache: modified and created objects stolen to a
//!   bounded spill store and read back, shipped from it at commit;
//! - [`txn`]: the current transaction's cache state (undo copies, created objects, the read
//!   set), the commit's export format, commit, abort and invalidation;
//! - [`timer`]: replacement's timers (the whole, usage computation, compaction) and the clock
//!   the caller injects for them;
//! - [`limits`]: every bound, with its reason.
//!
//! *Architecture invariant:* no I/O, no clock: replacement is timed (a measurement) with a clock
//! the caller gives ([`ClientCache::set_clock`]), and not at all without one.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! Client cache managers; no I/O, no clock.
//!
//! The client cache (`core.rs`, `manager.rs`): one preallocated `Arena` of page-sized frames
//! (`arena.rs`, raw-pointer access so that pinned views outlive cache calls), each *intact* (a page
//! as fetched), *compacted* (objects kept from other frames, packed from the frame's start), *new*
//! (objects created by the current transaction), free or retired. The indirection table holds one
//! 12-byte `Entry` per installed or referenced object (oref, location, reference count, 4 usage
//! bits and 4 of its frame's decay count, flags); each frame's installed entries are listed in
//! blocks of 16 indices from one pool (`lists.rs`), so that compaction and eviction, which visit
//! them all, overlap the entries' cache misses instead of chasing a list through them; each
//! frame keeps its unmodified objects' counts by usage value (`FrameMeta::by_usage`), so that
//! HAC's scan computes and decays a frame's usage without visiting its entries (an entry's value
//! catches up on its next read, `core::usage_now`; the decay counts are a byte per frame apart
//! from `FrameMeta`, `CacheCore::decays`, because the hit path reads one on every access); objects are installed lazily on first use and references
//! swizzled lazily, in place, to entry indices. The oref index (`orefindex.rs`) finds an oref's
//! entry through its page: a page map from page id to a record that holds up to three keys inline
//! or names the page's directory, a 512-bit map of the object numbers with an entry and their
//! entry indices in object-number order (the entry is at the rank of the oid's bit), so a lookup
//! is a test and a load in words the page's other lookups have just touched, without probing or
//! hashing the object number; the page map is skipped when the page is the one looked up last.
//! About 6 bytes an entry on OO7's T1 (4 an entry plus slack plus ~140 a page with a directory),
//! 29 bytes a page of one to three entries (T6); the records also count each page's resident
//! objects (what says a page may be reported as discarded). `ClientCache` pairs the core with a `CacheManager`
//! chosen by `PolicyConfig` (`fpc`, `hac`, `hac:r=2/3,e=20,n=2,s=3`, `quickstore`, `clock`, `arc`,
//! `s3fifo`, `wtinylfu`, `gom`, `gom:obj=0.5`), dispatched by `match`; its
//! hit path `access` is one entry load, an oref compare, a residency check, the manager's `touch`
//! and the read-set flag. `while_fetching` frees the next frame while a fetch is on the wire
//! (background replacement; `background_replacement: false` is HAC-FG), `while_fetching_pages`
//! as many as a prefetch may bring. `install_prefetched` installs a page that came by prefetch
//! with a fetched page's checks and frame, flagged in `FrameMeta::prefetched` until an object of
//! it is installed: `CoreStats::{pages_prefetched, prefetched_used, prefetched_unused}` count the
//! pages prefetched, used, and whose frame left first (`prefetch_outcomes`, what the session's
//! prefetch window reads); `CacheStats::fetches` does not count them. Conversion (installing
//! and swizzling what the application reaches of a fetched page) is benchmarked by `cargo bench -p
//! thor-cache --bench cache -- conversion` on an OO7-like page read as T1 reads it; with the
//! per-page index its cost is spread over the installation's checks (page and object ranges,
//! the class's shape, the stored references), the read set, the budget check on every slow-path
//! call and the entry allocation, a few to ten percent each (docs/oo7.md, "Conversion").
//!
//! - FPC (`fpc.rs`): whole pages, perfect LRU over `thor_policy::Lru`; created objects are dropped at
//!   commit.
//! - Paged caches (`paged.rs`): whole pages in the order of any `thor_policy` policy, keyed by page
//!   id so that ARC's, S3-FIFO's and W-TinyLFU's history follows a page across fetches; the policy
//!   sees one reference per visit to a page (consecutive accesses to one frame collapsed, as FPC
//!   does). `quickstore` is CLOCK plus QuickStore's mapping objects, modelled: the mapping objects
//!   of `m` consecutive pages share a mapping page (`quickstore:m=64` by default) that must be
//!   resident when one of them is fetched; if it is not, its fetch is counted
//!   (`ReplacementStats::extra_fetches`, part of `CacheStats::fetches`) and it takes a frame
//!   (`FrameKind::Meta`) under the same CLOCK. `clock`, `arc`, `s3fifo`, `wtinylfu` are the plain
//!   policies.
//! - GOM (`gom.rs`, Kemper and Kossmann's dual buffering as `papers/hac-sosp97.txt` section 4
//!   describes it): a static split of the frames (`gom:obj=F`, the object buffer's share, default
//!   0.8, measured best on T1-) into a page buffer (whole pages, perfect LRU over visits, as
//!   FPC) and an object buffer (compacted frames, exact object LRU: an intrusive list over entry indices, which is why
//!   `CacheManager::touch` gets the index). The objects installed from an evicted page, i.e. used
//!   since its fetch, are copied to the object buffer, evicting its least recently used objects
//!   for room; when a page is fetched again its objects there move back into their slots (the
//!   cached copy wins: it may hold the transaction's writes). Room is reused by packing a frame
//!   (its live objects slid down) instead of GOM's buddy blocks, which avoids buddy rounding waste;
//!   the buffer grows to its share by taking evicted pages' frames and lends a frame back when the
//!   page buffer has nothing evictable.
//! - HAC (`hac/`, after `papers/hac-sosp97.txt` section 3): usage bits set on access and decayed
//!   (`(u + 1) >> 1`) when the primary scan pointer passes; frame usage `<T, H>` with exact
//!   fractions (`hac/usage.rs`); a candidate set of the last E epochs' frames, one sorted bucket
//!   per epoch under a tournament tree, O(log E) removal of the least valuable, ties to the most
//!   recently added (`hac/candidates.rs`); a primary pointer and N secondary pointers scanning S
//!   frames per fetch; compaction of a victim's hot objects into the target frame in address
//!   order, the victim becoming the target when the target overflows, a filled target joining the
//!   candidate set; the duplicate case (a kept copy moves back into its resident page); created
//!   objects kept after commit as a compacted frame. `HacParams` defaults to the paper's R = 2/3,
//!   E = 20, N = 2, S = 3.
//!
//! *Architecture Invariant:* a frame with a view into it (`FrameMeta::pins`) is never compacted or
//! evicted, so a viewed object never moves or leaves; an object modified by the current
//! transaction is never evicted before commit or abort: HAC keeps and may move it, FPC keeps its
//! page, GOM keeps its page or keeps it in the object buffer (and may move it home). It leaves
//! only by a steal to the spill store, below.
//!
//! Spilling (`spill.rs`, issue 15): when replacement finds nothing to free but the transaction's
//! own objects and a `SpillStore` was given (`ClientCache::set_spill`; thor-client's is an
//! unlinked temporary file, `thor_client::spill`), every modified or created object outside a
//! pinned frame is *stolen*: written as a checksummed record (references unswizzled, created
//! objects named by their serials), its references released, its entry kept (`F_SPILLED`, the
//! record's position in a 4-byte-an-entry table made at the first steal, counted in the budget
//! and dropped when the transaction ends; once the transaction's own objects take half of the
//! frames the headroom reserves that table, since the steal comes when nothing else can be
//! freed), a frame of created objects freed whole, an intact frame that is its
//! page's copy unmapped. The slow path reads a stolen object back into the transaction's frames
//! of created objects, checked like a fetched object; the commit exports it from its record (the
//! server sees an ordinary commit); a commit unmaps page copies older than it; an abort discards
//! every stolen object (its undo copy names entries the steal released). The store holds at most
//! the cap given per transaction (`CacheError::SpillFull`) and is emptied when the transaction
//! ends; `CacheStats::spill` counts steals, records, bytes and read-backs.
//!
//! *Architecture Invariant:* a stolen object's bytes exist only in its record until it is read
//! back; a record is checked (oref, length, CRC-32C, class shape, every reference an oref or a
//! live created object's serial) before use, and a bad one is `CacheError::SpillCorrupt`, never
//! a panic (`spill::tests`; scenario tests in `thor-client/tests/spill.rs` for HAC, FPC and GOM).
//!
//! Demotion (`demote.rs`): when the server takes demoted pages, replacement copies a frame
//! that holds its page intact and unwritten (FPC's eviction, HAC's victim) into a small buffer
//! outside the budget, swizzled references turned back into orefs (`CacheCore::
//! capture_for_demotion`), and the session reports it, sends the bytes the server asks for, and
//! drops the rest.
//!
//! The current transaction's state is the cache's too (`txn.rs`): the read set (an entry flag
//! and per-page bitmaps, `readset.rs`), the modified objects with their undo copies (one buffer,
//! taken at the first write), the created objects (their serials consecutive, so an object's index
//! in the commit is its serial's distance from the transaction's first) and their frames. The
//! client library drives it through a small interface: `before_write`, `store_ref`, `create`,
//! `for_each_read`/`modified`/`created`/`export` to build the commit, `commit_done`,
//! `abort_done`, and `invalidate`, which answers whether the transaction used the object (the
//! library aborts it then). Undo copies and the reference-count decrements deferred to the
//! transaction's end are outside the budget (both grow with writes to resident objects, where no
//! frame can be freed for them); modified objects inside it.
//!
//! The cache keeps the client's side of CLOCC (`papers/thor-ecoop99.txt` section 4.1) exact.
//! An invalidation drops the object (now, or at the end of the transaction if the transaction
//! modified it or a view pins it), stops installing from its page's copy, and is queued for
//! acknowledgement (`take_acks`) only once applied: until then the server must keep refusing
//! commits that read the stale copy. Resident objects are counted per page, so that a page is
//! queued as discarded (`take_discarded`) only when neither its copy nor any object of it is
//! cached; it is reported neither while a fetch of it is on the wire nor while the current
//! transaction has read an object of it (the server stops invalidating a reported page, and a
//! concurrent write of what the transaction read would commit unnoticed). The undo log is an
//! optimization: when replacement needs room and the copies pass a quarter of the budget
//! (`limits::UNDO_BUDGET_DIVISOR`) they are dropped; an abort then discards a modified object
//! it cannot restore, as it does an invalidated modified one (whose undo copy is stale), and the
//! next access fetches the committed version.
//!
//! *Architecture Invariant:* the boundary is sealed: the client library sees `ClientCache`'s
//! methods only. The core's tables, the arena and the undo copies are private to thor-cache, and
//! every method that changes them keeps the invariants below (a store of a reference checks that
//! the object was written by the transaction and that the offset is a reference slot; creation
//! takes only fresh instances of registered classes with null references; a commit reply's orefs
//! are checked before anything is renamed). Views read and write scalar fields through
//! `object_ptr`, a raw pointer that stays valid while the object's frame is pinned.
//!
//! *Architecture Invariant:* no byte of a fetched page is trusted. The page's structure is checked
//! (`PageView::parse`) when it is copied into a frame; each object is checked when it is installed,
//! before anything reads it as an object: its class word names a stored object, its size is what
//! its class and count say, and every reference word is null or an even oref naming a page (an odd
//! word would be taken for a swizzled entry index). A malformation is `CacheError::MalformedPage`
//! naming the page and the byte, and the object is not installed. A class word keeps the first
//! descriptor registered for it. Property-tested on random, bit-flipped and word-overwritten pages
//! (`tests/fetched_pages.rs`).
//!
//! *Architecture Invariant:* the budget covers frames, tables and the manager's own tables, with
//! headroom for the next growth of the tables that grow on the hit path; `CoreStats::memory_bytes_max`
//! records the most the cache held at any rebalance (the model test checks it); frames are retired to
//! make room, and come back (one frame short of the share) when the tables shrink, as when a
//! large transaction's read set (dropped at its end if above a sixteenth of the budget) and
//! spill positions go. The entry table grows by at most `limits::ENTRY_STEP_MAX` (8,192) entries, since
//! the step is held twice (headroom before a growth, unused capacity after it). A growth only
//! counts the step: the entry table and the list pool reserve address space for the whole budget
//! once (`core::reserve_table`; untouched memory is not backed), so they never copy themselves,
//! and the budget counts what they grew into, not the reservation. The arena asks for
//! transparent huge pages (`madvise`, Linux): a cold run's first touch of its frames takes one
//! fault per 2 MiB instead of two per page.
//! `ClientCache::occupancy` says where a budget goes (frames by kind, installed objects' bytes,
//! tables, headroom, against installed bytes plus an entry each); the `occupancy` example of
//! thor-oo7 prints it for a hot OO7 run (docs/oo7.md, "Where the memory goes"). `ClientCache::check_invariants` checks lists, counts, exact reference counts and the
//! budget (`CacheCore::check_invariants`), and that the undo copies, modified marks and created
//! objects agree; the model-based tests run it after every step (`hac/tests.rs` at the cache
//! level, `thor-client/tests/model.rs` through a session, HAC, FPC and GOM; `paged.rs` runs the
//! cache-level one, `hac::tests::random_workload`, for every paged manager, `gom.rs` at several
//! splits). Every bound is in `limits.rs`.
//!
//! Replacement's timers (`timer.rs`): `ClientCache::set_clock` takes a `StatClock` (a `fn() -> u64`
//! of monotonic nanoseconds; thor-client's session gives one) and times every call that frees
//! frames as a whole (`CacheStats::replacement_time`) and, through the `ReplacementTimer`
//! that `CacheManager::free_frame` takes, HAC's and FPC's two parts: *usage computation*
//! (the pointers' scans, usage and decay, the candidate set, choosing victims; FPC's LRU) and
//! *compaction* (moving kept objects, dropping the others, releasing their references, evicting)
//! (`CacheStats::{usage_time, compaction_time}`, the HAC paper's Figure 10; thor has no stack
//! scan). Managers that leave the timer alone (GOM, the paged ones) are timed only as a whole. Every
//! call is timed, not sampled (a frame costs microseconds; the split adds one clock read a frame
//! and two a victim), so the parts are disjoint intervals inside the whole.
//!
//! *Architecture Invariant:* thor-cache reads no clock: without `set_clock` nothing is timed and
//! every time reads zero (tests inject a counting clock to check the split's arithmetic).
//!
//! *Architecture Invariant:* a page is reported discarded only while nothing of it is cached and the
//! current transaction has read nothing of it; an invalidation is acknowledged only once its object
//! has left the cache (`tests/discarded.rs` checks the first against a model of the server's
//! directory).
//!
//! *Architecture Invariant:* an entry is never freed while something can still name it by index:
//! a swizzled word, the read set (the commit lists it by index), an undo copy (reference-count
//! decrements from stores wait for the end of the transaction), or the slow path resolving it.
//!
//! *API Boundary:* `ClientCache::{new, access, resolve, rebind, while_fetching,
//! while_fetching_pages, install_page, install_prefetched, prefetch_outcomes, has_page, class_word, class, register_class, object, copy_unswizzled, object_ptr, oref_of,
//! follow, ref_word, entry_for, lookup, location, pin, unpin, release_dead_frames, usable_frames,
//! check_invariants, stats, policy_name, set_clock}` and the transaction's `ClientCache::{create,
//! before_write, store_ref, modified, created, read_count, for_each_read, created_index, export,
//! export_append, commit_done, abort_done, invalidate, take_acks, requeue_acks, take_discarded,
//! requeue_discarded, page_cached, drop_undo_copies, undo_bytes, set_spill, spill_stats,
//! spill_bytes}`; `SpillStore`, `MemSpill`, `SpillStats`, `NewObject`, `Invalidation`, `CacheConfig`,
//! `PolicyConfig`, `HacParams`, `PagedParams`, `GomParams`, `Fraction`, `CacheStats`, `ReplacementStats`,
//! `StatClock`, `ReplacementTimer`, `CacheError`,
//! `core::Need`, `limits`. (`CacheCore` and `CacheManager` are public types with crate-private
//! innards: the managers' interface to the core.)

pub mod arena;
pub mod core;
pub mod demote;
pub mod error;
pub mod fpc;
pub mod gom;
pub mod hac;
pub mod limits;
pub mod lists;
pub mod manager;
pub mod orefindex;
pub mod paged;
pub mod readset;
pub mod spill;
pub mod timer;
pub mod txn;

pub use error::CacheError;
pub use gom::{Gom, GomParams};
pub use hac::{Fraction, Hac, HacParams};
pub use manager::{
    CacheConfig, CacheManager, CacheStats, ClientCache, PolicyConfig, ReplacementStats,
};
pub use paged::{Paged, PagedParams};
pub use spill::{MemSpill, SpillStats, SpillStore};
pub use timer::{ReplacementTimer, StatClock};
pub use txn::{Invalidation, NewObject};
