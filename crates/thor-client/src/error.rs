//! Errors of the client library. Each variant says what the application should do.
//!
//! The one an application meets in normal operation under contention is
//! [`ClientError::Conflict`]: concurrency control (CLOCC) decided that the transaction cannot
//! commit as it ran. It was aborted when the error was returned; run it again, on fresh copies
//! ([`Session::run`](crate::Session::run) does, with backoff). Every other error is not
//! cured by running the transaction again.

use thor_cache::CacheError;
use thor_core::FormatError;
use thor_wire::transport::TransportError;
use thor_wire::{ErrorCode, RefusedCode};

/// What went wrong in a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The connection failed or the server refused the session. A session that reconnects
    /// by itself (`Session::connect`, `thor::connect`) returns this only when it could not
    /// reconnect within `ReconnectConfig::give_up_after`, or another attempt would not help (a
    /// wrong token): its next call tries again. Without a way to reconnect, make a new
    /// session.
    #[error("transport: {0}")]
    Transport(TransportError),
    /// No replica of the server's group served the session within
    /// `ReconnectConfig::give_up_after` (`crate::group`): every replica was down, unreachable
    /// or answered that it does not lead (a group electing, or without a majority up). The
    /// open transaction, if any, was aborted. Bring a majority of the group's replicas up (or
    /// check the addresses given against `thor server --replica-id`); the session's next call
    /// tries again.
    #[error(
        "no replica of the server's group served within {waited:?} ({attempts} attempts; the \
         last: {last}): a majority of the group must be up to elect a leader; the next call \
         tries again"
    )]
    NoLeader {
        /// Attempts made.
        attempts: u32,
        /// How long they took.
        waited: std::time::Duration,
        /// The last attempt's error.
        last: Box<ClientError>,
    },
    /// The connection failed while a commit was in flight and the session could not learn
    /// whether it happened (the server could not tell, or could not be reached). The
    /// transaction was aborted locally. `Session::commit_outcome` asks again (after the
    /// server is back); if it cannot tell either, read the objects the transaction wrote.
    /// `Session::run` does not run the transaction again unless
    /// `SessionConfig::run_retries_unknown` says so.
    #[error("commit outcome unknown: {0}")]
    CommitUnknown(Box<ClientError>),
    /// The connection reached a different server or database than the session's (another
    /// server id, page size, root or commit mode): the address now names something else.
    /// The session cannot go on; make a new one.
    #[error("the server changed: {0}")]
    ServerChanged(String),
    /// The transaction is larger than one commit may be: its request (`what`: the whole
    /// frame, or one of its counts) is over the server's limit. Nothing was sent and the
    /// transaction was aborted, with no effect. Commit the work in smaller transactions (the
    /// guide's Limits table gives each bound).
    #[error(
        "the transaction is too large to commit: its {what} is {size}, the limit {max}; nothing was sent"
    )]
    TooLarge {
        /// What is over its limit: "commit frame (bytes)", or a count such as "read set".
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The transaction cannot commit under concurrency control: it used a copy that is no
    /// longer current, or does not fit in the serial order. It had no effect and was aborted
    /// when this error was returned (the cache dropped the stale copies it knows of). Run the
    /// transaction again: [`Session::run`](crate::Session::run) does.
    #[error("conflict ({cause}): {message}")]
    Conflict {
        /// What concurrency control found.
        cause: ConflictCause,
        /// Why, for humans: the server's message (the rule and an object), or the object an
        /// invalidation named.
        message: String,
    },
    /// The server refused the commit (it had no effect); the transaction was aborted. The code
    /// says why: fix the program (it wrote something invalid) or retry later if it says so.
    /// Concurrency-control refusals are [`ClientError::Conflict`] instead.
    #[error("commit refused: {code:?}: {message}")]
    Refused {
        /// Why, for programs.
        code: RefusedCode,
        /// Why, for humans.
        message: String,
    },
    /// The server answered a request with an error.
    #[error("server error {code:?}: {message}")]
    Server {
        /// Why, for programs.
        code: ErrorCode,
        /// Why, for humans.
        message: String,
    },
    /// A page-based commit mode's client side failed (the recovery buffer's settings, or a
    /// diff that found a change outside the objects written, which is a bug).
    #[error("page mode: {0}")]
    PageMode(String),
    /// The server answered something that does not answer the request: make a new session.
    #[error("unexpected reply: {0}")]
    Unexpected(&'static str),
    /// The client cache failed (full of pinned or modified objects, a malformed page).
    #[error("cache: {0}")]
    Cache(CacheError),
    /// The object is not of the class the reference says: the data does not match the program.
    #[error("type mismatch: expected {expected}, found {found}")]
    TypeMismatch {
        /// The class the program expected.
        expected: &'static str,
        /// The class of the stored object.
        found: String,
    },
    /// The database has a class of this name with a different layout than the program's, one
    /// that does not extend it either (an extension, which the program reads and writes, has a
    /// longer fixed part whose extra words are not references, and the same reference slots and
    /// variable part: `ClassDesc::extends`). If the program appended fields, upgrade the
    /// database offline (`thor::Upgrade`).
    /// Where both the stored descriptor and the declaration name their fields, a field of
    /// another name or type at the same offset is a mismatch too.
    #[error(
        "class {class} is stored with a different layout than this program declares ({reason}); \
         if fields were appended, upgrade the database into a new directory with thor::Upgrade"
    )]
    SchemaMismatch {
        /// The class name.
        class: &'static str,
        /// What differs, for a human (`ClassDesc::mismatch`).
        reason: String,
    },
    /// A class object in the database is malformed.
    #[error("bad class: {0}")]
    BadClass(String),
    /// A null reference was followed.
    #[error("null reference")]
    NullReference,
    /// A malformed large object.
    #[error("format: {0}")]
    Format(FormatError),
    /// A stored value is malformed: a string that is not UTF-8, a sequence whose length
    /// exceeds its storage or whose elements are of another type than the program reads. The
    /// data does not match the program (or is damaged): `thor check` the database.
    #[error("malformed value: {0}")]
    BadValue(String),
    /// A value is longer than thor can store in it: a string or sequence past the largest
    /// object a page holds. Store it another way (a large object, or split it).
    #[error("{what} of {len} is longer than the {max} a {what} can hold")]
    TooLong {
        /// What: "string", "sequence".
        what: &'static str,
        /// Its length (bytes of a string, elements of a sequence).
        len: usize,
        /// The most it can be.
        max: usize,
    },
    /// The program used the API wrongly (index out of range, wrong length).
    #[error("usage: {0}")]
    Usage(&'static str),
    /// A cluster was asked for a server it was not told of (a surrogate names it, or the
    /// program did): add it to the cluster's servers.
    #[error("server {0} is not one of this cluster's servers")]
    UnknownServer(u32),
    /// The connection for one server reached another: the cluster's addresses are wrong.
    #[error("expected server {expected}, the connection reached server {got}")]
    WrongServer {
        /// The server asked for.
        expected: u32,
        /// The server that answered.
        got: u32,
    },
}

impl ClientError {
    /// Whether this is a concurrency-control conflict ([`ClientError::Conflict`]): the
    /// transaction was aborted and running it again may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ClientError::Conflict { .. })
    }

    /// The error for a commit the server refused with `code`: a conflict if concurrency
    /// control refused it, [`ClientError::Refused`] otherwise.
    pub(crate) fn refused(code: RefusedCode, message: String) -> ClientError {
        let cause = match code {
            RefusedCode::Stale => ConflictCause::Stale,
            RefusedCode::Conflict => ConflictCause::Conflict,
            RefusedCode::TooOld => ConflictCause::TooOld,
            RefusedCode::Aborted => ConflictCause::Aborted,
            _ => return ClientError::Refused { code, message },
        };
        ClientError::Conflict { cause, message }
    }
}

/// What concurrency control found wrong with a transaction ([`ClientError::Conflict`]). All
/// of them mean the same to the application: run the transaction again. The cause is for
/// statistics and diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConflictCause {
    /// The server found an object the transaction used in this client's invalid set: another
    /// transaction changed it after the copy was sent, and the invalidation had not reached
    /// the client (it rides on the refusal).
    Stale,
    /// The server's validation found the transaction out of place in the serial order against
    /// a transaction committing or committed near it (validation-queue rules 1, 2a, 2b).
    Conflict,
    /// The transaction's timestamp fell below the server's threshold: the server no longer
    /// remembers enough to validate it (a very slow commit, or a clock far behind).
    TooOld,
    /// An invalidation arrived for an object the transaction read or wrote: it ran on a copy
    /// that another transaction has changed, and cannot commit. Found by the client, without
    /// asking the server.
    Invalidated,
    /// Two-phase commit aborted the transaction: another of its servers refused its part, or
    /// did not vote in time.
    Aborted,
    /// The connection to the server broke while the transaction was open (or its commit did
    /// not happen before the break); the session reconnected and aborted it. Found by the
    /// client.
    Disconnected,
}

impl std::fmt::Display for ConflictCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConflictCause::Stale => "stale copy",
            ConflictCause::Conflict => "validation",
            ConflictCause::TooOld => "too old",
            ConflictCause::Invalidated => "invalidated",
            ConflictCause::Aborted => "aborted by another server",
            ConflictCause::Disconnected => "disconnected",
        })
    }
}

impl From<TransportError> for ClientError {
    fn from(e: TransportError) -> ClientError {
        ClientError::Transport(e)
    }
}

impl From<CacheError> for ClientError {
    fn from(e: CacheError) -> ClientError {
        ClientError::Cache(e)
    }
}

impl From<FormatError> for ClientError {
    fn from(e: FormatError) -> ClientError {
        ClientError::Format(e)
    }
}
