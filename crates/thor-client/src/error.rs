//! Errors of the client library. Each variant says what the application should do.

use thor_cache::CacheError;
use thor_core::FormatError;
use thor_wire::transport::TransportError;
use thor_wire::{ErrorCode, RefusedCode};

/// What went wrong in a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The connection failed or the server refused the session: make a new session.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The connection failed while a commit was in flight: it may or may not have happened.
    /// The transaction was aborted locally; read its objects in a new session to find out.
    #[error("commit outcome unknown: {0}")]
    CommitUnknown(Box<ClientError>),
    /// The server refused the commit (it had no effect); the transaction was aborted. The code
    /// says why: fix the program (it wrote something invalid) or retry later if it says so.
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
    /// The server answered something that does not answer the request: make a new session.
    #[error("unexpected reply: {0}")]
    Unexpected(&'static str),
    /// The client cache failed (full of pinned or modified objects, a malformed page).
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    /// The object is not of the class the reference says: the data does not match the program.
    #[error("type mismatch: expected {expected}, found {found}")]
    TypeMismatch {
        /// The class the program expected.
        expected: &'static str,
        /// The class of the stored object.
        found: String,
    },
    /// The database has a class of this name with a different layout than the program's.
    #[error("class {class} is stored with a different layout than this program declares")]
    SchemaMismatch {
        /// The class name.
        class: &'static str,
    },
    /// A class object in the database is malformed.
    #[error("bad class: {0}")]
    BadClass(String),
    /// A null reference was followed.
    #[error("null reference")]
    NullReference,
    /// A malformed large object.
    #[error("format: {0}")]
    Format(#[from] FormatError),
    /// The program used the API wrongly (index out of range, wrong length).
    #[error("usage: {0}")]
    Usage(&'static str),
}
