//! What can go wrong in `thor inspect`, one variant per thing the user does about it.

use std::path::PathBuf;

use thor_core::{FormatError, Oref};
use thor_wire::{ErrorCode, TransportError};

/// Why `thor inspect` could not answer. Each variant says what to do; the message is the one
/// line the command prints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The directory is not a database (missing, a file, no superblock): point at a
    /// database's directory.
    #[error("{} is not a database directory: {why}", dir.display())]
    NotADatabase {
        /// The directory given.
        dir: PathBuf,
        /// What is missing.
        why: String,
    },
    /// A server (or another program) has the database open read-write: inspect it through
    /// that server with `--connect ADDR`, or stop it first.
    #[error(
        "{} is in use by {holder}: inspect it through its server (thor inspect --connect \
         ADDR ...) or stop the server first",
        dir.display()
    )]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// The lock holder, as its `LOCK` file names it.
        holder: String,
    },
    /// Opening the database read-only failed (recovery refused the log, or the disk failed).
    /// A log record recovery cannot read is set aside by `thor check --repair DIR`.
    #[error("cannot open {} read-only: {cause}", dir.display())]
    Open {
        /// The directory.
        dir: PathBuf,
        /// Why (recovery's or the storage's error).
        cause: String,
    },
    /// The server could not be reached or refused the session (address, token, scope).
    #[error("cannot reach {addr}: {cause}")]
    Connect {
        /// The address given.
        addr: String,
        /// Why.
        cause: TransportError,
    },
    /// The connection failed while reading: run the command again.
    #[error("reading from the server failed: {0}")]
    Transport(#[from] TransportError),
    /// The server answered a request with an error (a read the session's scope does not
    /// allow, a storage failure).
    #[error("the server refused to read page {page}: {code}: {message}")]
    Server {
        /// The page asked for.
        page: u32,
        /// The server's code.
        code: ErrorCode,
        /// The server's words.
        message: String,
    },
    /// The text given is neither an oref (`PAGE.OID`, as printed) nor a root name
    /// (`root0`..`root14`, `schema`) nor a path starting with one.
    #[error("{0:?} is not an oref (PAGE.OID), a root name (root0..root14, schema) or a path")]
    BadTarget(String),
    /// The oref names no object of this database (its page is past the last one, or has no
    /// such object): check the oref.
    #[error("{oref} names no object: {why}")]
    UnknownObject {
        /// The oref.
        oref: Oref,
        /// Why not.
        why: String,
    },
    /// A root slot that holds nothing was named.
    #[error("root slot {slot} is empty")]
    EmptyRoot {
        /// The slot.
        slot: usize,
    },
    /// A path or `--follow` named a field the object's class does not have.
    #[error("{class} at {oref} has no field {field:?} (its fields: {fields})")]
    NoSuchField {
        /// The object.
        oref: Oref,
        /// Its class.
        class: String,
        /// The field asked for.
        field: String,
        /// The fields it has, comma-separated (or how to name its slots).
        fields: String,
    },
    /// A path or `--follow` went through a field or element that is not a reference.
    #[error("{what} of {oref} is not a reference ({ty}): there is nothing to follow")]
    NotARef {
        /// The object.
        oref: Oref,
        /// The field or element.
        what: String,
        /// Its type.
        ty: String,
    },
    /// A path or `--follow` went through a null reference.
    #[error("{what} of {oref} is null: there is nothing to follow")]
    NullRef {
        /// The object.
        oref: Oref,
        /// The field or element.
        what: String,
    },
    /// `map` was given an object that is not a `thor.Map`.
    #[error("{oref} is a {class}, not a map (thor.Map)")]
    NotAMap {
        /// The object.
        oref: Oref,
        /// Its class.
        class: String,
    },
    /// `seq` was given an object that is not a `thor.Seq`.
    #[error("{oref} is a {class}, not a sequence (thor.Seq)")]
    NotASeq {
        /// The object.
        oref: Oref,
        /// Its class.
        class: String,
    },
    /// `--from` does not parse as a key of the map's key type.
    #[error("--from {given:?} is not a key of this map ({key_type}): {why}")]
    BadKey {
        /// The text given.
        given: String,
        /// The map's key type.
        key_type: String,
        /// Why not.
        why: String,
    },
    /// The stored bytes are not what their class says (a damaged or foreign object): `thor
    /// check` says more.
    #[error("{oref} is malformed: {why}")]
    Malformed {
        /// The object.
        oref: Oref,
        /// What is wrong.
        why: String,
    },
    /// A page as served does not decode (a damaged page): `thor check` says more.
    #[error("page {page} does not decode: {cause}")]
    BadPage {
        /// The page.
        page: u32,
        /// The decoder's error.
        cause: FormatError,
    },
}
