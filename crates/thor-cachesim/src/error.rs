//! The simulator's one error type. Every variant says what to change.

use std::path::PathBuf;

use thor_policy::PolicyError;

/// What can go wrong setting up or running a simulation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A trace file could not be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// A trace file is malformed; `line` is 1-based.
    #[error("{path}:{line}: {message}")]
    TraceFormat {
        /// The file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// A setting is out of range: fix the command line or configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A design name that does not parse ("LRU-MRU-demote" is the expected shape).
    #[error(
        "unknown design {name:?}: expected CLIENT-ARRAY-none or CLIENT-ARRAY-demote, with policies LRU, MRU, CLOCK or ARC"
    )]
    UnknownDesign {
        /// The name given (at most 64 characters of it).
        name: String,
    },
    /// A replacement policy refused an operation or a configuration.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

impl SimError {
    /// A configuration error with a formatted message.
    pub(crate) fn config(message: impl Into<String>) -> Self {
        SimError::Config(message.into())
    }
}
