//! Errors of the client cache. Each variant says what the caller should do.

use thor_core::Oref;

/// What went wrong in the client cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The configuration cannot work (too small a budget, a bad page size): fix the settings.
    #[error("cache configuration: {0}")]
    BadConfig(String),
    /// Every frame is pinned, modified or reserved, so nothing can be freed: commit or abort the
    /// transaction, drop views, or use a bigger cache.
    #[error(
        "the cache is full of pinned or modified objects ({frames} frames); commit, drop views or enlarge the cache"
    )]
    Full {
        /// Usable frames.
        frames: usize,
    },
    /// The indirection table has 2^31 entries.
    #[error("the indirection table is full")]
    TableFull,
    /// A page from the server is malformed: the server or the network is faulty.
    #[error("page {page} from the server is malformed: {why}")]
    BadPage {
        /// The page.
        page: u32,
        /// What is wrong.
        why: String,
    },
    /// An object from the server does not match its class.
    #[error("object {oref:?} is malformed: {why}")]
    BadObject {
        /// The object.
        oref: Oref,
        /// What is wrong.
        why: &'static str,
    },
    /// A reference names an object its page does not hold.
    #[error("no object {0:?} in its page")]
    NoSuchObject(Oref),
    /// A created object is larger than a page: store it as a large object.
    #[error("object of {size} bytes does not fit in a page")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// A broken internal invariant: a bug in thor.
    #[error("internal error in the client cache: {0}")]
    Internal(&'static str),
}
