//! The one error type of thor-storage, defined here so that the server core, which must not
//! depend on a crate that touches files, can carry it in its own errors (thor-storage
//! re-exports it as `thor_storage::StorageError`).
//!
//! Each variant tells the caller what to do about it:
//!
//! - [`Io`](StorageError::Io), [`InjectedFault`](StorageError::InjectedFault): the disk failed.
//!   For the log this is fatal (it poisons itself); for anything else, stop using what failed.
//! - [`NotFound`](StorageError::NotFound): the file is not there; create it or report it.
//! - [`UnexpectedEof`](StorageError::UnexpectedEof), [`Corrupt`](StorageError::Corrupt): bytes
//!   on disk are not what this crate wrote (a torn write outside the log tail, bit rot, someone
//!   else's file). Refuse to start; never guess.
//! - [`UnsupportedFormat`](StorageError::UnsupportedFormat): the files were written by another
//!   version of thor in a layout this build does not read. Use the matching build; never
//!   "repair".
//! - [`DirectIoUnsupported`](StorageError::DirectIoUnsupported): direct reads were asked for
//!   on a file system that refuses `O_DIRECT`. Put the database on one that supports it (ext4,
//!   xfs, btrfs), or run without direct reads.
//! - [`Locked`](StorageError::Locked): another process (or another open in this one) holds
//!   the database directory. Stop it, or use another directory.
//! - [`Poisoned`](StorageError::Poisoned): an earlier write or fsync of the log failed, so what
//!   is durable is unknown. Drop the engine and reopen; recovery decides what survived.
//! - [`StaleHandle`](StorageError::StaleHandle): a handle from before a simulated crash was used
//!   (tests only); the process that held it is, in the model, dead.
//! - [`RecordTooLarge`](StorageError::RecordTooLarge), [`InvalidName`](StorageError::InvalidName),
//!   [`InvalidArgument`](StorageError::InvalidArgument): the caller's mistake; fix the call.

/// What went wrong in a storage operation. See the module documentation for what each variant
/// asks of the caller.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The operating system reported an error.
    #[error("{op} {name}: {cause}")]
    Io {
        /// The operation that failed (`"open"`, `"write"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory it was applied to.
        name: String,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// A file that was required to exist does not.
    #[error("{name}: no such file")]
    NotFound {
        /// The missing file.
        name: String,
    },
    /// A read needed more bytes than the file holds.
    #[error("{name}: unexpected end of file reading {len} bytes at offset {offset}")]
    UnexpectedEof {
        /// The file read.
        name: String,
        /// Where the read started.
        offset: u64,
        /// How many bytes were asked for.
        len: usize,
    },
    /// Bytes on disk fail a check: a checksum, a length, a sequence number.
    #[error("corrupt {what} in {name} at offset {offset}: {why}")]
    Corrupt {
        /// The kind of structure that is damaged (`"log record"`, `"page"`, ...).
        what: &'static str,
        /// The file holding it.
        name: String,
        /// The byte offset of the damaged structure within the file.
        offset: u64,
        /// Which check failed.
        why: String,
    },
    /// A file in a format version this build does not read.
    #[error("{name}: {what} of format version {found}; this build reads version {supported}")]
    UnsupportedFormat {
        /// The kind of file (`"log segment"`, ...).
        what: &'static str,
        /// The file.
        name: String,
        /// The version it carries.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file system refuses direct I/O (`open` with `O_DIRECT` failed with `EINVAL`) for a
    /// file of a `thor_storage::FileDisk` opened with direct reads.
    #[error(
        "{path}: the file system does not support direct I/O (O_DIRECT): {cause}; put the \
         database on one that does (ext4, xfs, btrfs), or run without direct reads"
    )]
    DirectIoUnsupported {
        /// The file (or directory) that could not be opened for direct reads.
        path: String,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// The database directory is locked by another holder.
    #[error("database {path} is in use by {holder}")]
    Locked {
        /// The directory.
        path: String,
        /// Who holds it, as written in its lock file (pid, program, host, since when), or
        /// what is known when that cannot be read.
        holder: String,
    },
    /// A write or fsync of the log failed earlier, so what is durable is unknown: reopen the
    /// log and let recovery decide.
    #[error("log poisoned by an earlier failure ({cause}); reopen to recover")]
    Poisoned {
        /// The failure that poisoned the log.
        cause: String,
    },
    /// A failure injected by `thor_storage::FaultDisk`'s fault plan.
    #[error("injected fault: {op} {name}")]
    InjectedFault {
        /// The operation that was made to fail.
        op: &'static str,
        /// The file it was applied to (empty for directory operations).
        name: String,
    },
    /// A handle opened before a simulated crash was used after it.
    #[error("{name}: handle from before a simulated crash")]
    StaleHandle {
        /// The file (or `"disk"`) the handle referred to.
        name: String,
    },
    /// A log record's payload is larger than the configured bound.
    #[error("log record of {len} bytes exceeds the {max}-byte limit")]
    RecordTooLarge {
        /// The payload's length.
        len: usize,
        /// The configured `record_bytes_max`.
        max: usize,
    },
    /// A file name that is not a plain name within one directory.
    #[error("invalid file name {name:?}: {why}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An argument is out of range (a buffer of the wrong size, inconsistent options, an LSN
    /// that was never assigned).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl StorageError {
    /// Whether this is [`StorageError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }

    /// Whether this is [`StorageError::Locked`].
    pub fn is_locked(&self) -> bool {
        matches!(self, StorageError::Locked { .. })
    }

    /// Whether this is [`StorageError::DirectIoUnsupported`].
    pub fn is_direct_io_unsupported(&self) -> bool {
        matches!(self, StorageError::DirectIoUnsupported { .. })
    }

    /// Whether this is [`StorageError::Poisoned`].
    pub fn is_poisoned(&self) -> bool {
        matches!(self, StorageError::Poisoned { .. })
    }

    /// Whether this is [`StorageError::Corrupt`] or [`StorageError::UnexpectedEof`]: bytes on
    /// disk that this crate did not write.
    pub fn is_corruption(&self) -> bool {
        matches!(self, StorageError::Corrupt { .. } | StorageError::UnexpectedEof { .. })
    }

    /// Builds an [`StorageError::Io`], mapping "not found" to [`StorageError::NotFound`] so that
    /// callers can match one variant whatever the backend.
    pub fn io(op: &'static str, name: &str, source: std::io::Error) -> StorageError {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound { name: name.to_string() }
        } else {
            StorageError::Io { op, name: name.to_string(), cause: source }
        }
    }
}
