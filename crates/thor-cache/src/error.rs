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
    /// The transaction's modified and created objects outgrew the cache and the spill store's
    /// cap too ([`crate::spill`]): abort it, then split it into smaller transactions or raise
    /// the cap. Nothing was lost: the objects that did not fit stayed in the cache.
    #[error(
        "the transaction's writes outgrew the cache and the spill cap ({bytes_max} bytes); abort, then split the transaction or raise the cap"
    )]
    SpillFull {
        /// The cap, in bytes of records per transaction.
        bytes_max: u64,
    },
    /// The spill store failed to write or read (a full or failing disk under the temporary
    /// directory): abort the transaction; check the directory's space.
    #[error("the spill store failed: {0}")]
    SpillFailed(String),
    /// A record read back from the spill store is not what was written (the file was changed
    /// under the client, or the disk returned wrong bytes): abort the transaction.
    #[error("spill record at byte {offset} is damaged: {why}")]
    SpillCorrupt {
        /// The record's offset in the store.
        offset: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// The indirection table has 2^31 entries.
    #[error("the indirection table is full")]
    TableFull,
    /// A page from the server holds something no correct server sends: a malformed header or
    /// offset table, a reference word with the spare (swizzle) bit set, a reference or class
    /// word naming no page, an object whose size does not match its class. The page is refused
    /// and nothing of it is used; the server or the network is faulty, so report it and make a
    /// new session.
    #[error("page {page} from the server is malformed at byte {offset}: {why}")]
    MalformedPage {
        /// The page.
        page: u32,
        /// Byte offset within the page of what is wrong (0 for the header).
        offset: u32,
        /// What is wrong.
        why: String,
    },
    /// The server described a class differently from the descriptor already registered under
    /// the same class word, which installed objects were checked against: class objects are
    /// immutable, so the server is faulty.
    #[error("class {class:#x} changed its layout")]
    ClassChanged {
        /// The class word.
        class: u32,
    },
    /// The server's reply to a commit gave the created objects orefs that cannot be theirs
    /// (null, repeated, already naming another cached object, or not one per created object).
    /// The server is faulty; the transaction's outcome there is unknown.
    #[error("commit reply with impossible orefs: {0}")]
    BadCommitReply(&'static str),
    /// A reference names an object its page does not hold.
    #[error("no object {0:?} in its page")]
    NoSuchObject(Oref),
    /// A created object is larger than a page: store it as a large object.
    #[error("object of {size} bytes does not fit in a page")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// An object handed to [`ClientCache::create`](crate::ClientCache::create) is not a fresh
    /// instance of a registered class (unknown class, wrong shape, a non-null reference): a bug
    /// in the caller.
    #[error("cannot create this object: {0}")]
    BadCreate(&'static str),
    /// A broken internal invariant, or a transaction call out of order (a write to an object
    /// not resident, a reference stored into an object the transaction did not write): a bug in
    /// thor.
    #[error("internal error in the client cache: {0}")]
    Internal(&'static str),
}
