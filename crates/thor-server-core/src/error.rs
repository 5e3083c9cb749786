//! Errors of the engine. Each variant tells the caller what to do about it.

use thor_core::StorageError;
use thor_core::{FormatError, Oref, PageId};

use crate::superblock::SuperblockError;

/// Why a commit was refused. The commit had no effect; the client should fix its request (these
/// are a client's mistakes, or an attack), not retry it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidCommit {
    /// The request is larger than the engine accepts in one commit.
    #[error("commit too large: {what} is {got}, the limit is {max}")]
    TooLarge {
        /// Which bound.
        what: &'static str,
        /// The request's value.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// A version names an object that does not exist.
    #[error("no object {0:?}")]
    NoSuchObject(Oref),
    /// An object names a class that is not a class object.
    #[error("object {oref:?} names {class:?} as its class, which is not a class")]
    NotAClass {
        /// The object (or `Oref::NULL` with `index` set for a created one).
        oref: Oref,
        /// The class word found.
        class: Oref,
    },
    /// An object does not match its class.
    #[error("object {what} does not match its class: {why}")]
    BadShape {
        /// Which object ("version of 3.4" or "created #2").
        what: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A reference field points to no existing or newly created object.
    #[error("object {what} has a dangling reference: {why}")]
    BadReference {
        /// Which object.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// A version changes an object's class or size; objects keep both for life.
    #[error("version of {oref:?} changes its {what}; objects keep their class and size")]
    Reshape {
        /// The object.
        oref: Oref,
        /// "class" or "size".
        what: &'static str,
    },
    /// A version would change a built-in class or a class object; classes are immutable.
    #[error("{0:?} is a class; classes cannot be modified")]
    ClassIsImmutable(Oref),
    /// The read set or a version holds an oref that names no object: null, tagged, or on
    /// page 0, which is never allocated (`thor_core::Oref::object`, the definition the wire
    /// and the log-record decoder use too).
    #[error("the {what} holds {word:#010x}, which names no object: {why}")]
    NamesNoObject {
        /// "read set" or "versions".
        what: &'static str,
        /// The word.
        word: u32,
        /// What is wrong with it.
        why: thor_core::NotAnObject,
    },
    /// The same object appears twice among the versions.
    #[error("object {0:?} is written twice in one commit")]
    Duplicate(Oref),
    /// A created object is bigger than a page (use a large object).
    #[error("created object #{index} is too large: {cause}")]
    ObjectTooLarge {
        /// Its index among the created objects.
        index: usize,
        /// Details.
        cause: FormatError,
    },
    /// A page-based commit (issue 14's modes) is not well formed: a record that does not
    /// parse, a region outside the objects written, a mode not the server's.
    #[error("page-based commit refused: {0}")]
    BadPageRecord(String),
}

/// What went wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The disk failed. For writes the engine has stopped accepting work ([`EngineError::Failed`]
    /// follows); reopen the database to recover from the log.
    #[error("storage: {0}")]
    Storage(StorageError),
    /// Bytes read from disk are damaged or not thor's: the database needs repair from a replica
    /// or backup. Nothing was changed.
    #[error("corrupt page {page}: {cause}")]
    CorruptPage {
        /// Which page.
        page: PageId,
        /// What is wrong with it.
        cause: FormatError,
    },
    /// The log holds a record that does not decode (its checksum passed, so this is a bug or a
    /// newer format).
    #[error("corrupt log record at LSN {lsn}: {why}")]
    CorruptRecord {
        /// Where.
        lsn: u64,
        /// What.
        why: String,
    },
    /// Recovery met a log record it cannot read (its checksum passed, so this is a bug of the
    /// build that wrote it or a format from another version): the database does not open with
    /// it. Every record before it is intact. `thor check --repair DIR` sets the record aside
    /// (keeping its bytes and a report beside the log) and the database opens.
    #[error(
        "log record at LSN {lsn} ({segment}, byte offset {offset}) cannot be read: {why}; every \
         record before it is intact. Run `thor check --repair` on the database directory: it \
         sets the record aside (its bytes are kept beside the log, with a report of what it \
         held) and the database opens"
    )]
    UnreadableRecord {
        /// The record's LSN.
        lsn: u64,
        /// The log segment file holding it.
        segment: String,
        /// The byte offset of its header in the segment.
        offset: u64,
        /// What is wrong with it.
        why: String,
    },
    /// The superblock is missing, damaged or of another format.
    #[error("superblock: {0}")]
    Superblock(SuperblockError),
    /// The directory holds no database; create one first.
    #[error("no database in this directory (create one with --create)")]
    NotADatabase,
    /// A database already exists where one was to be created.
    #[error("a database already exists here")]
    AlreadyExists,
    /// The options are not usable (for example an invalid page size).
    #[error("invalid options: {0}")]
    BadOptions(String),
    /// The page is not allocated.
    #[error("no page {0}")]
    NoSuchPage(u32),
    /// The commit was refused and had no effect.
    #[error("commit refused: {0}")]
    Invalid(InvalidCommit),
    /// All 2^22 pages are allocated.
    #[error("database full: no page ids left")]
    Full,
    /// A bulk load holds the allocator; try again when it finishes.
    #[error("a bulk load is in progress")]
    BulkLoadActive,
    /// An earlier write or fsync failed, so what is durable is unknown: the engine refuses work
    /// until it is reopened, which recovers from the log.
    #[error(
        "the server stopped after a storage failure ({0}); restart it (or reopen the \
         database) once the disk is repaired: recovery replays the log"
    )]
    Failed(String),
    /// The database was opened read-only (`thor::open_read_only`): it serves reads, and
    /// refuses every commit that writes, flush and bulk load. Open it read-write to write.
    #[error("the database is open read-only: it takes no writes")]
    ReadOnly,
    /// A page could not be read from the page file (the disk failed; nothing was changed).
    /// Concurrency control refused the transaction: it cannot take a place in the serial
    /// order. Run it again on fresh copies of the objects.
    #[error("transaction conflict: {0}")]
    Conflict(crate::core::cc::Refusal),
    /// Two-phase commit aborted the transaction everywhere (another participant refused, or
    /// did not vote in time). Run it again.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    #[error("reading page {page}: {why}")]
    Read {
        /// Which page.
        page: PageId,
        /// What failed.
        why: String,
    },
}

impl From<StorageError> for EngineError {
    fn from(e: StorageError) -> EngineError {
        EngineError::Storage(e)
    }
}

impl From<SuperblockError> for EngineError {
    fn from(e: SuperblockError) -> EngineError {
        EngineError::Superblock(e)
    }
}

impl From<InvalidCommit> for EngineError {
    fn from(e: InvalidCommit) -> EngineError {
        EngineError::Invalid(e)
    }
}
