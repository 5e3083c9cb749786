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
