//! Errors of starting and stopping a network server. (A client transport's errors are
//! `thor_wire::TransportError`, shared with every transport.)

/// Why the network server could not start, run or stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The listening address could not be bound: it is in use, not local, or not allowed.
    /// Choose another address.
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The operating system's reason.
        cause: std::io::Error,
    },
    /// The async runtime could not start (out of threads or memory).
    #[error("cannot start the network runtime: {0}")]
    Runtime(std::io::Error),
    /// Waiting for a shutdown signal failed (signal handlers could not be installed).
    #[error("cannot wait for signals: {0}")]
    Signal(std::io::Error),
    /// The accept loop stopped abnormally (a bug); connections were closed.
    #[error("the server task failed: {0}")]
    Task(String),
}
