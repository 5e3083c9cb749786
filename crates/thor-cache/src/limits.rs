//! Every bound of the client cache, with the reason for it.
//!
//! The cache's memory is one budget that covers frames and tables ([`crate::core`]); the bounds
//! here are the shapes of that budget (how the tables grow, how many frames a cache needs) and
//! the bounds of the work HAC does per call. The settings HAC accepts (E, N, S, R) are bounded
//! here too, so a configuration from a command line cannot make a table absurdly large.

/// The smallest number of usable frames a cache works with: one being filled by a fetch, one
/// kept free for the next, one being compacted into.
pub const MIN_FRAMES: usize = 3;

/// Fewest entries the indirection table grows by: a 4 KB step, so that a small cache does not
/// reallocate its table on every few objects.
pub const ENTRY_STEP_MIN: usize = 256;
/// Most entries the indirection table grows by (128 KiB): growth is covered by headroom kept
/// in the budget, and the step is also the table's unused capacity after a growth, so a large
/// step keeps that many frames' worth of memory idle twice over. With 65,536 (1 MiB) hot T1-
/// on OO7 medium held 1.0 MiB of headroom and 0.87 MiB of unused entries at its zero-fetch
/// point (17.8 MiB; `cargo run --release -p thor-oo7 --example occupancy`). A growth only
/// counts the step: the table's address space is reserved once for the whole budget
/// (`core::reserve_table`), so it never copies itself (a `realloc` from the allocator's heap
/// copied the whole table at every step, 6% of a cold OO7 T1 on medium).
pub const ENTRY_STEP_MAX: usize = 1 << 13;

/// Renames of created objects kept after their commit, so that handles made before the commit
/// still resolve: at most this many (12 bytes each, counted in the budget). Older handles fall
/// back to an error naming the long-past transaction.
pub const RENAMES_MAX: usize = 1 << 16;

/// Bytes of undo-copy buffer kept between transactions. A transaction's undo copies live in
/// one buffer ([`crate::txn`]); keeping its allocation saves a reallocation per transaction,
/// but after a transaction that wrote most of the cache the buffer would hold that much memory
/// outside the budget for good, so anything beyond this is given back.
pub const UNDO_RETAINED_BYTES: usize = 1 << 20;

/// Deferred reference-count decrements (`CacheCore::store_ref`, 4 bytes each) whose
/// allocation is kept between transactions: 64 KiB. Like the undo copies' buffer they are
/// outside the budget, so after a transaction that overwrote many references the list gives
/// back what it holds beyond this.
pub const RELEASES_RETAINED: usize = 1 << 14;

/// Undo copies may hold up to `budget / UNDO_BUDGET_DIVISOR` bytes (outside the budget) before
/// replacement drops them when it needs room (`ClientCache::drop_undo_copies`): the undo log is
/// an optimization (`papers/thor-ecoop99.txt` section 4.1), and a transaction that writes most
/// of the cache should not double the client's memory for it.
pub const UNDO_BUDGET_DIVISOR: usize = 4;

/// Largest E (HAC): the candidate set's tree has E leaves rounded up to a power of two.
pub const EPOCHS_MAX: u32 = 4096;
/// Largest S (HAC): frames each pointer looks at per epoch (the paper studied 2 to 20).
pub const SCAN_FRAMES_MAX: u32 = 64;
/// Largest N (HAC; the paper studied 0 to 20).
pub const SECONDARY_POINTERS_MAX: u32 = 64;
/// Largest denominator of R (HAC): fractions are compared exactly in 64-bit products of a
/// count and a denominator.
pub const RETENTION_DENOMINATOR_MAX: u32 = 10_000;
/// Victims one call to free a frame may compact, per frame of the cache, before it gives up
/// with `CacheError::Full`. Each victim either frees a frame or becomes the target after
/// dropping its cold objects; a cache whose candidates keep everything (all modified, or all
/// hotter than their thresholds) would otherwise move objects round forever.
pub const VICTIMS_PER_FRAME_MAX: usize = 2;

// The entry table's growth step is a range.
const _: () = assert!(ENTRY_STEP_MIN <= ENTRY_STEP_MAX);
// Entry indices are swizzled into 31-bit tagged words; a step never overshoots that space.
const _: () = assert!(ENTRY_STEP_MAX < thor_core::RawRef::TAG_MAX as usize);

/// Pages a client holds for demotion by default when its server takes demotions
/// ([`crate::demote`]). A page is captured at a fetch, reported on the next request and sent
/// on the one after, so two or three are in the buffer in the steady state; 16 (128 KiB of
/// 8 KB pages, outside the budget) leaves room for bursts of replacement without holding much.
pub const DEMOTE_PAGES_DEFAULT: usize = 16;
