//! The facade's error: why a store could not be opened, reached or closed, or what went wrong
//! in a session.
//!
//! Inside a transaction a program meets [`ClientError`] (the closure given to
//! [`Session::run`](crate::Session::run) returns it); [`Error`] wraps it, so a `main` that
//! returns `Result<(), thor::Error>` can use `?` on both. Each variant says what to do.
//!
//! # Printing an error
//!
//! Every error of thor's crates prints its whole cause in its own message ("connecting to
//! 127.0.0.1:7400: connection failed: Connection refused (os error 111)") and returns no
//! `source()`: a cause is in the message or in the variant's fields (`cause`, or the wrapped
//! error), never in both, so `{}`, anyhow's `{:#}` and a loop over `source()` each print
//! every cause exactly once. Match on the variants to act on a cause.

use thor_client::ClientError;
use thor_wire::TransportError;

/// What went wrong opening, reaching or closing a store, or in a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The path names a file, not a directory: a database is a directory of files. Choose
    /// another path.
    #[cfg(feature = "embedded")]
    #[error("{}: not a directory (a thor database is a directory)", path.display())]
    NotADirectory {
        /// The path given.
        path: std::path::PathBuf,
    },
    /// The directory holds files but no database: `open` creates a database only in a
    /// directory that is new or empty, so that a mistyped path never fills someone's folder
    /// with thor's files. Choose a new or empty directory.
    #[cfg(feature = "embedded")]
    #[error("{}: holds files but no thor database; give a new or empty directory", path.display())]
    NotADatabase {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// Another process, or another open in this one, has the database: a database has one
    /// opener at a time. Close the other, or share its sessions
    /// ([`Database::session`](crate::Database::session)) instead of opening again; for many
    /// processes, run `thor server` and [`connect`](crate::connect) to it.
    #[cfg(feature = "embedded")]
    #[error("database {} is in use by {holder}", path.display())]
    Locked {
        /// The directory.
        path: std::path::PathBuf,
        /// Who holds it: pid, program, host and since when, as its lock file says.
        holder: String,
    },
    /// The database could not be opened or created: the disk failed, or the directory holds
    /// damaged files or another format's. Nothing was changed; `cause` says which.
    #[cfg(feature = "embedded")]
    #[error("opening the database in {}: {cause}", path.display())]
    Open {
        /// The directory.
        path: std::path::PathBuf,
        /// The engine's reason.
        cause: thor_server::EngineError,
    },
    /// Closing failed to install everything into the page file. Every committed transaction
    /// is durable in the log regardless; the next open replays it.
    #[cfg(feature = "embedded")]
    #[error("closing the database in {}: {cause}", path.display())]
    Close {
        /// The directory.
        path: std::path::PathBuf,
        /// The engine's reason.
        cause: thor_server::EngineError,
    },
    /// [`Database::backup`](crate::Database::backup) could not make the copy: `path` exists,
    /// its parent does not, or the disk failed. Nothing was left at `path`.
    #[cfg(feature = "embedded")]
    #[error("backing up to {}: {cause}", path.display())]
    Backup {
        /// The destination given.
        path: std::path::PathBuf,
        /// The engine's reason.
        cause: thor_server::EngineError,
    },
    /// [`Database::close`](crate::Database::close) was called while sessions or other
    /// handles of the database were alive. The database stays open, and closes (the same
    /// way) when the last of them is dropped.
    #[cfg(feature = "embedded")]
    #[error("the database in {} is still in use by {users} session(s) or handle(s)", path.display())]
    InUse {
        /// The directory.
        path: std::path::PathBuf,
        /// Sessions and other handles alive.
        users: usize,
    },
    /// An [`Upgrade`](crate::Upgrade) did not happen: nothing exists at its destination and
    /// its source is unchanged. [`UpgradeError`](crate::UpgradeError) says why and what to do.
    #[cfg(feature = "embedded")]
    #[error(transparent)]
    Upgrade(#[from] thor_admin::UpgradeError),
    /// No connection to a server: nothing listens there, the name does not resolve, or the
    /// server refused the session (`TransportError::Refused`: a wrong token, a busy server).
    #[error("connecting to {addr}: {cause}")]
    Connect {
        /// The address given.
        addr: String,
        /// Why.
        cause: TransportError,
    },
    /// An address could not be read: a replica group is written `ID=HOST:PORT,...`
    /// (`thor_client::group`). `why` says what is wrong; fix the address.
    #[error("address {addr:?}: {why}")]
    BadAddress {
        /// The address given.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// A session failed; [`ClientError`] says what to do ([`ClientError::is_conflict`]: run
    /// the transaction again).
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl Error {
    /// Whether this is a concurrency-control conflict: the transaction was aborted, and
    /// running it again may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Client(e) if e.is_conflict())
    }
}
