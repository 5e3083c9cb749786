//! The one error type of the library; the binary adds context with `anyhow`.

use std::path::PathBuf;

use crate::format::{FormatError, Tag};

/// What can go wrong loading, traversing or measuring OO7 over LMDB.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// LMDB refused an operation (its message says which).
    #[error("LMDB: {0}")]
    Lmdb(heed::Error),
    /// A value is malformed: the database is damaged or of another format; load it again.
    #[error("{0}")]
    Format(FormatError),
    /// thor-oo7 refused the parameters, or an operation it does not know.
    #[error("OO7: {0}")]
    Oo7(thor_oo7::Oo7Error),
    /// A value the database must hold is absent: it was not loaded completely; load it again.
    #[error("{} {index} is missing from the database (loaded partly? load it again)", tag.name())]
    Missing {
        /// The class.
        tag: Tag,
        /// The index.
        index: u32,
    },
    /// A database too large for this format's keys.
    #[error("{count} {}s do not fit the key's 28-bit index (at most {max})", tag.name())]
    TooLarge {
        /// The class.
        tag: Tag,
        /// Objects of it.
        count: usize,
        /// The most a key can name.
        max: u32,
    },
    /// The operation is not one this crate runs over LMDB.
    #[error("{0} is not run over LMDB (T1, T1-, T1+, T2a, T2b, T2c and T6 are)")]
    Unsupported(&'static str),
    /// A write on a read-only transaction (a bug in the caller).
    #[error("{0} writes, and was given a read-only transaction")]
    ReadOnly(&'static str),
    /// A database's contents differ from thor-oo7's model of the same parameters.
    #[error("the LMDB database differs from thor-oo7's model: {0}")]
    Mismatch(String),
    /// A file or directory could not be read or written.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

impl BenchError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> BenchError {
        BenchError::Io { path: path.into(), cause: source }
    }
}

impl From<heed::Error> for BenchError {
    fn from(e: heed::Error) -> BenchError {
        BenchError::Lmdb(e)
    }
}

impl From<FormatError> for BenchError {
    fn from(e: FormatError) -> BenchError {
        BenchError::Format(e)
    }
}

impl From<thor_oo7::Oo7Error> for BenchError {
    fn from(e: thor_oo7::Oo7Error) -> BenchError {
        BenchError::Oo7(e)
    }
}
