//! The one error type of thor-storage ([`StorageError`]; defined in thor-core so that the
//! server core can carry it without depending on this crate).

pub use thor_core::StorageError;
