//! The errors of the OO7 crate. Each variant says what the caller should do.

use thor_client::ClientError;
use thor_server::EngineError;

/// What went wrong generating, loading or running OO7.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Oo7Error {
    /// The parameters are outside the bounds of `thor_oo7::limits`: choose others.
    #[error("bad parameters: {0}")]
    BadParams(String),
    /// The storage engine failed (the database directory may be unusable: load it again).
    #[error("engine: {0}")]
    Engine(EngineError),
    /// The storage layer failed opening the database directory.
    #[error("storage: {0}")]
    Storage(thor_storage::StorageError),
    /// The client library failed (the session is unusable: open a new one).
    #[error("client: {0}")]
    Client(ClientError),
    /// The transport could not connect.
    #[error("transport: {0}")]
    Transport(thor_wire::TransportError),
    /// The database is not an OO7 database, or not the one this program generates: load it
    /// again.
    #[error("not an OO7 database: {0}")]
    NotOo7(String),
    /// A traversal found the database inconsistent with its parameters (a bug or a damaged
    /// database).
    #[error("inconsistent database: {0}")]
    Inconsistent(String),
    /// A multi-client run's traversal was refused for conflicts too many times in a row
    /// (`limits::CONFLICTS_IN_A_ROW_MAX`): other clients keep changing what it reads. Run
    /// fewer clients, or each on its own module.
    #[error("client {client} gave up {op} after {aborts} conflicts in a row (the last: {last})")]
    Conflicts {
        /// The client (0-based).
        client: usize,
        /// The traversal.
        op: &'static str,
        /// Conflicts in a row.
        aborts: u32,
        /// The last conflict, as the client library reported it.
        last: String,
    },
    /// The traversal or query name is unknown.
    #[error("unknown operation {0:?}")]
    UnknownOperation(String),
}

impl From<EngineError> for Oo7Error {
    fn from(e: EngineError) -> Oo7Error {
        Oo7Error::Engine(e)
    }
}

impl From<thor_storage::StorageError> for Oo7Error {
    fn from(e: thor_storage::StorageError) -> Oo7Error {
        Oo7Error::Storage(e)
    }
}

impl From<ClientError> for Oo7Error {
    fn from(e: ClientError) -> Oo7Error {
        Oo7Error::Client(e)
    }
}

impl From<thor_wire::TransportError> for Oo7Error {
    fn from(e: thor_wire::TransportError) -> Oo7Error {
        Oo7Error::Transport(e)
    }
}
