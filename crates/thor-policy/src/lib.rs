//! Block (page) replacement policies: the order in which a fixed-size cache gives up blocks.
//!
//! This crate is the one copy of LRU, MRU, CLOCK, ARC, S3-FIFO and W-TinyLFU in thor. The server's page cache keeps
//! its order in [`Lru`], the client's FPC cache manager (`thor-cache`) in an [`Lru`] over a
//! [`DenseSlots`] index, and the cache-hierarchy simulator (`thor-cachesim`) runs every
//! [`PolicyKind`] through [`AnyPolicy`]: the simulator evaluates exactly the code that ships.
//! A policy knows nothing of pages, objects or I/O; it orders `u64` block ids.
//!
//! # The vocabulary: two ends of a queue
//!
//! Every policy here is described as a queue with two ends, following the DEMOTE paper
//! (`papers/demote-exclusive-caching.txt`, section 4.1):
//!
//! ```text
//!      evict-next end                                      evict-last end
//!   (the next victim)                                      (kept longest if unused)
//!         head  [ b7 ] <-> [ b2 ] <-> [ b9 ] <-> [ b4 ]  tail
//! ```
//!
//! What differs between policies is where a *reference* puts a block:
//!
//! | policy | a reference (hit, or insertion of a block just read) puts it ... |
//! |--------|------------------------------------------------------------------|
//! | LRU    | at the evict-last end: the least recently used block goes first   |
//! | MRU    | at the evict-next end: the most recently used block goes first    |
//! | CLOCK  | sets its reference bit; the hand gives referenced blocks a second chance |
//! | ARC    | into the recency (T1) or frequency (T2) list, adapting their split |
//! | S3-FIFO | new blocks into a small FIFO, ghost hits into the main one; a hit bumps a 2-bit count |
//! | W-TinyLFU | into an LRU window; its overflow enters the main SLRU only if seen more often than the victim |
//!
//! A caller can also place a block explicitly at either end ([`Placement::EvictNext`],
//! [`Placement::EvictLast`]) without it counting as a reference. That is what DEMOTE needs: a disk
//! array puts demoted blocks at the evict-last end whatever its policy, while disk reads and read
//! hits follow the policy's own reference rule ([`Placement::Referenced`]). With LRU that rule is
//! "evict last" and with MRU "evict next", which gives exactly the paper's four array behaviours.
//!
//! # The contract
//!
//! A policy tracks *which* blocks are cached and in what order; it holds no data. Its caller
//! keeps the data (frames, pages) and drives it:
//!
//! ```text
//!   hit:   policy.touch(b)                      -> true
//!   miss:  if policy.is_full() { v = policy.evict(Some(b)); drop v's data }
//!          policy.insert(b, Placement::Referenced)
//! ```
//!
//! [`Policy::evict`] is told the block about to come in because ARC's choice of victim depends
//! on it (a block coming back from ARC's B2 history list tips a tie towards evicting from T1).
//! `insert` never evicts: it fails with [`PolicyError::Full`] instead, so the caller always sees
//! every eviction (a client must demote or write back its victim before reading the new block).
//!
//! Pinning is the caller's business: a cache that must not evict a block while it is in use
//! [`Policy::remove`]s it for that time and inserts it again afterwards.
//!
//! # Cost
//!
//! Every operation is O(1) (CLOCK's `evict` is amortised O(1): each sweep step clears a bit that
//! a reference set) and allocation-free after construction: the order is kept in intrusive
//! doubly-linked lists over one preallocated slab ([`list`]), and the block-to-slot map is either
//! an `FxHashMap` reserved to its final size or a dense array ([`index`]).
//!
//! [`belady`] is the offline optimum on a recorded reference string: the floor under every
//! policy's miss count.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The page replacement policies, one copy for the whole system: `Lru`, `Mru`, `Clock`, `Arc`,
//! `S3Fifo` (`s3fifo.rs`: small, main and ghost FIFO queues with 2-bit frequencies, SOSP '23) and
//! `WTinyLfu` (`tinylfu.rs`: an LRU window before a segmented LRU, admission by a count-min
//! `FrequencySketch` of 4-bit counters halved every 10 C references) behind one `Policy` trait,
//! and `AnyPolicy` to choose one at run time with match dispatch. `belady.rs` is the offline
//! optimum: `min_misses` (Belady's MIN on a recorded reference string, O(n log n) with a lazy
//! max-heap of next uses), `min_misses_from` / `min_misses_warm` (a run starting with pages
//! cached: MIN less the filling misses those pages can save, exact for a warm start, checked by
//! brute force over starting sets) and `min_misses_reference` (the quadratic definition it is
//! tested against). A
//! policy tracks which blocks (`u64` ids) are cached and in what order and holds no data; its
//! caller keeps the frames and drives it: `touch` on a hit, `evict(Some(incoming))` when full,
//! `insert(id, Placement)`, `place`, `remove`.
//! `Placement::{Referenced, EvictNext, EvictLast}` is the vocabulary of DEMOTE: reads follow the
//! policy's own reference rule (LRU: evict last; MRU: evict next), demoted pages go to the evict-last
//! end. The server's page cache keeps its order in `Lru`, FPC (thor-cache) in an `Lru` over a
//! `DenseSlots` index of frames, and thor-cachesim runs every policy unchanged through `AnyPolicy`.
//!
//! *Architecture Invariant:* every policy operation is O(1) (CLOCK's `evict` amortised) and
//! allocates nothing after construction: intrusive doubly-linked lists over one preallocated slab
//! (`list.rs`) and a block-to-slot index reserved to its final size (`HashSlots`, an `FxHashMap`)
//! or a dense array for dense ids (`DenseSlots`).
//!
//! *Architecture Invariant:* `insert` never evicts by itself (it fails with `PolicyError::Full`), so
//! the caller sees every eviction and can demote or write back the victim first. Pinning is done by
//! removing a block from its policy while pinned.
//!
//! *Architecture Invariant:* each policy is checked against a naive `VecDeque` model on random
//! operation sequences (`model_tests.rs`); ARC against a transcription of Megiddo and Modha's
//! pseudo-code, S3-FIFO against a transcription of the paper's Algorithm 1, W-TinyLFU against
//! `VecDeque` lists over the same sketch (the sketch has its own tests); `min_misses` against
//! `min_misses_reference` on random strings.
//!
//! *Architecture Invariant:* every bound is in `limits.rs` (`MAX_CAPACITY`: ARC's slab of twice
//! the capacity in `u32` slots; `DENSE_ID_BOUND_MAX`), checked against each other at compile time.
//!
//! *API Boundary:* `Policy`, `Placement`, `PolicyKind`, `PolicyError`, `AnyPolicy`, `Lru`, `Mru`,
//! `Clock`, `Arc`, `S3Fifo`, `WTinyLfu`, `FrequencySketch`, `belady`, `SlotIndex`, `HashSlots`, `DenseSlots`, `BlockId`, `MAX_CAPACITY`, `limits`.

mod arc;
pub mod belady;
mod clock;
mod index;
pub mod limits;
mod list;
mod lru;
mod s3fifo;
mod tinylfu;

use std::fmt;
use std::str::FromStr;

pub use arc::Arc;
pub use clock::Clock;
pub use index::{DenseSlots, HashSlots, SlotIndex};
pub use limits::MAX_CAPACITY;
pub use lru::{Lru, Mru};
pub use s3fifo::S3Fifo;
pub use tinylfu::{FrequencySketch, WTinyLfu};

/// The name of a block (a page id, a disk block number). Policies only compare and hash it.
pub type BlockId = u64;

/// Where [`Policy::insert`] or [`Policy::place`] puts a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Wherever the policy puts a block that has just been referenced (read, or hit). For LRU
    /// that is the evict-last end; for MRU the evict-next end.
    Referenced,
    /// At the end the policy evicts from next, without counting as a reference.
    EvictNext,
    /// At the end the policy evicts from last, without counting as a reference (where an array
    /// keeps demoted blocks).
    EvictLast,
}

/// The policies this crate provides, by name (for command lines and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Least recently used: [`Lru`].
    Lru,
    /// Most recently used: [`Mru`].
    Mru,
    /// Second-chance CLOCK: [`Clock`].
    Clock,
    /// Adaptive replacement cache: [`Arc`].
    Arc,
    /// Three static FIFO queues: [`S3Fifo`].
    S3Fifo,
    /// A window LRU and a segmented LRU with frequency admission: [`WTinyLfu`].
    WTinyLfu,
}

impl PolicyKind {
    /// Every kind, in a fixed order.
    pub const ALL: [PolicyKind; 6] = [
        PolicyKind::Lru,
        PolicyKind::Mru,
        PolicyKind::Clock,
        PolicyKind::Arc,
        PolicyKind::S3Fifo,
        PolicyKind::WTinyLfu,
    ];

    /// The upper-case name used in the DEMOTE paper's design names ("LRU-MRU-demote").
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "LRU",
            PolicyKind::Mru => "MRU",
            PolicyKind::Clock => "CLOCK",
            PolicyKind::Arc => "ARC",
            PolicyKind::S3Fifo => "S3FIFO",
            PolicyKind::WTinyLfu => "WTINYLFU",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| PolicyError::UnknownPolicy { name: s.chars().take(32).collect() })
    }
}

/// What can go wrong when driving a policy. Every variant is a caller mistake or a configuration
/// error; none is transient.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `insert` on a full cache: evict first.
    #[error("cache is full ({capacity} blocks): evict a block before inserting")]
    Full {
        /// The policy's capacity.
        capacity: usize,
    },
    /// `insert` of a block that is already cached: use `touch` or `place`.
    #[error("block {id} is already cached")]
    AlreadyCached {
        /// The block.
        id: BlockId,
    },
    /// A block id outside a [`DenseSlots`] index's range: use a larger bound or [`HashSlots`].
    #[error("block {id} is outside the dense index's range 0..{bound}")]
    IdOutOfRange {
        /// The block.
        id: BlockId,
        /// The index's exclusive bound.
        bound: u64,
    },
    /// A capacity above [`MAX_CAPACITY`].
    #[error("capacity {capacity} exceeds the maximum of {max} blocks")]
    CapacityTooLarge {
        /// The requested capacity.
        capacity: usize,
        /// [`MAX_CAPACITY`].
        max: usize,
    },
    /// A [`DenseSlots`] bound above [`DenseSlots::MAX_BOUND`].
    #[error("dense index bound {bound} exceeds the maximum of {max}")]
    IdBoundTooLarge {
        /// The requested bound.
        bound: u64,
        /// [`DenseSlots::MAX_BOUND`].
        max: u64,
    },
    /// A policy name that is not one of [`PolicyKind::ALL`].
    #[error(
        "unknown replacement policy {name:?} (expected LRU, MRU, CLOCK, ARC, S3FIFO or WTINYLFU)"
    )]
    UnknownPolicy {
        /// The name given (at most 32 characters of it).
        name: String,
    },
}

/// A block replacement policy: the bookkeeping of a fixed-capacity cache (see the crate
/// documentation for the contract).
pub trait Policy: fmt::Debug {
    /// Which policy this is.
    fn kind(&self) -> PolicyKind;

    /// The most blocks the cache holds.
    fn capacity(&self) -> usize;

    /// The number of blocks cached now.
    fn len(&self) -> usize;

    /// Whether no block is cached.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an insertion needs an eviction first.
    fn is_full(&self) -> bool {
        self.len() >= self.capacity()
    }

    /// Whether `id` is cached. Does not count as a reference.
    fn contains(&self, id: BlockId) -> bool;

    /// Records a reference to `id` if it is cached (a hit) and returns whether it was. A miss
    /// changes nothing (ARC's history is only consulted when the block is inserted).
    fn touch(&mut self, id: BlockId) -> bool;

    /// Starts caching `id`, which must not be cached, at `at`. Fails when the cache is full (call
    /// [`Policy::evict`] first) or when `id` is cached already; never evicts on its own.
    fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError>;

    /// Moves a cached `id` to `at` (`Referenced` is the same as [`Policy::touch`]). Returns
    /// whether `id` was cached; if not, nothing changes.
    fn place(&mut self, id: BlockId, at: Placement) -> bool;

    /// Stops caching `id` (and forgets any history of it). Returns whether it was cached.
    fn remove(&mut self, id: BlockId) -> bool;

    /// Chooses a victim, stops caching it and returns it; `None` only when the cache is empty.
    /// `incoming` is the block the caller is making room for, if any (ARC uses it).
    fn evict(&mut self, incoming: Option<BlockId>) -> Option<BlockId>;

    /// Forgets every block and all history.
    fn clear(&mut self);

    /// Appends the cached blocks to `out` in the policy's queue order, from the evict-next end
    /// (for CLOCK: in the order the hand reaches them; for ARC: T1 then T2, each from its LRU
    /// end). For tests and diagnostics; allocates only if `out` must grow.
    fn snapshot(&self, out: &mut Vec<BlockId>);
}

/// One of the policies of this crate, chosen at run time, with match dispatch (cheaper than a
/// `Box<dyn Policy>` and without an allocation per cache).
#[derive(Debug, Clone)]
pub enum AnyPolicy<I: SlotIndex = HashSlots> {
    /// [`Lru`].
    Lru(Lru<I>),
    /// [`Mru`].
    Mru(Mru<I>),
    /// [`Clock`].
    Clock(Clock<I>),
    /// [`Arc`].
    Arc(Arc<I>),
    /// [`S3Fifo`].
    S3Fifo(S3Fifo<I>),
    /// [`WTinyLfu`].
    WTinyLfu(WTinyLfu<I>),
}

impl AnyPolicy<HashSlots> {
    /// A `kind` policy of `capacity` blocks over any `u64` ids.
    pub fn new(kind: PolicyKind, capacity: usize) -> Result<Self, PolicyError> {
        AnyPolicy::with_index(kind, capacity, HashSlots::new)
    }
}

impl AnyPolicy<DenseSlots> {
    /// A `kind` policy of `capacity` blocks over ids `0..id_bound`, indexed by a dense array.
    pub fn dense(kind: PolicyKind, capacity: usize, id_bound: u64) -> Result<Self, PolicyError> {
        let index = DenseSlots::new(id_bound)?;
        AnyPolicy::with_index(kind, capacity, || index)
    }
}

impl<I: SlotIndex> AnyPolicy<I> {
    /// A `kind` policy of `capacity` blocks over the index `make_index` returns (called once).
    pub fn with_index(
        kind: PolicyKind,
        capacity: usize,
        make_index: impl FnOnce() -> I,
    ) -> Result<Self, PolicyError> {
        Ok(match kind {
            PolicyKind::Lru => AnyPolicy::Lru(Lru::with_index(capacity, make_index())?),
            PolicyKind::Mru => AnyPolicy::Mru(Mru::with_index(capacity, make_index())?),
            PolicyKind::Clock => AnyPolicy::Clock(Clock::with_index(capacity, make_index())?),
            PolicyKind::Arc => AnyPolicy::Arc(Arc::with_index(capacity, make_index())?),
            PolicyKind::S3Fifo => AnyPolicy::S3Fifo(S3Fifo::with_index(capacity, make_index())?),
            PolicyKind::WTinyLfu => {
                AnyPolicy::WTinyLfu(WTinyLfu::with_index(capacity, make_index())?)
            }
        })
    }
}

/// Forwards a method call to whichever policy an [`AnyPolicy`] holds.
macro_rules! dispatch {
    ($self:expr, $p:ident => $call:expr) => {
        match $self {
            AnyPolicy::Lru($p) => $call,
            AnyPolicy::Mru($p) => $call,
            AnyPolicy::Clock($p) => $call,
            AnyPolicy::Arc($p) => $call,
            AnyPolicy::S3Fifo($p) => $call,
            AnyPolicy::WTinyLfu($p) => $call,
        }
    };
}

impl<I: SlotIndex> Policy for AnyPolicy<I> {
    fn kind(&self) -> PolicyKind {
        dispatch!(self, p => p.kind())
    }
    #[inline]
    fn capacity(&self) -> usize {
        dispatch!(self, p => p.capacity())
    }
    #[inline]
    fn len(&self) -> usize {
        dispatch!(self, p => p.len())
    }
    #[inline]
    fn contains(&self, id: BlockId) -> bool {
        dispatch!(self, p => p.contains(id))
    }
    #[inline]
    fn touch(&mut self, id: BlockId) -> bool {
        dispatch!(self, p => p.touch(id))
    }
    #[inline]
    fn insert(&mut self, id: BlockId, at: Placement) -> Result<(), PolicyError> {
        dispatch!(self, p => p.insert(id, at))
    }
    #[inline]
    fn place(&mut self, id: BlockId, at: Placement) -> bool {
        dispatch!(self, p => p.place(id, at))
    }
    #[inline]
    fn remove(&mut self, id: BlockId) -> bool {
        dispatch!(self, p => p.remove(id))
    }
    #[inline]
    fn evict(&mut self, incoming: Option<BlockId>) -> Option<BlockId> {
        dispatch!(self, p => p.evict(incoming))
    }
    fn clear(&mut self) {
        dispatch!(self, p => p.clear())
    }
    fn snapshot(&self, out: &mut Vec<BlockId>) {
        dispatch!(self, p => p.snapshot(out))
    }
}

/// Checks a capacity against [`MAX_CAPACITY`].
fn check_capacity(capacity: usize) -> Result<(), PolicyError> {
    if capacity > MAX_CAPACITY {
        return Err(PolicyError::CapacityTooLarge { capacity, max: MAX_CAPACITY });
    }
    Ok(())
}

#[cfg(test)]
mod model_tests;
