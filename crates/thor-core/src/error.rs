//! Errors of decoding and building pages, objects and classes.
//!
//! Bytes that reach these decoders come from disks and networks and are not trusted: every
//! malformation maps to a variant here, never to a panic. The variants name what is wrong so
//! that a caller can tell corruption (report it, refuse the page) from a full page (allocate
//! elsewhere) from a client's mistake (reject its commit).

use crate::ids::{Oid, Oref};

/// What is wrong with a page, an object or a class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The buffer's length is not a valid page size.
    #[error("page buffer of {0} bytes is not a valid page size")]
    BadPageSize(usize),
    /// The page's stored checksum does not match its contents: the bytes were damaged.
    #[error("page checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    PageChecksum { stored: u32, computed: u32 },
    /// The page header claims a different page id than the one read: misdirected or stale.
    #[error("page header says page {found}, expected page {expected}")]
    WrongPageId { expected: u32, found: u32 },
    /// A header field is out of range.
    #[error("bad page header: {0}")]
    BadPageHeader(&'static str),
    /// An offset-table entry points outside the object area or breaks the oid ordering.
    #[error("bad offset {offset} for {oid:?}: {why}")]
    BadOffset { oid: Oid, offset: u16, why: &'static str },
    /// No object with this id is in the page.
    #[error("no object {0:?} in the page")]
    NoSuchObject(Oid),
    /// The page lacks room for what was asked.
    #[error("page full: {needed} bytes needed, {free} free")]
    PageFull { needed: usize, free: usize },
    /// All 512 object ids of the page are taken.
    #[error("page has no free object id")]
    NoFreeOid,
    /// An object is larger than any page can hold; store it as a large object instead.
    #[error("object of {size} bytes exceeds the {max}-byte limit of a page")]
    ObjectTooLarge { size: usize, max: usize },
    /// An object's bytes are malformed on their own (too short, misaligned).
    #[error("malformed object: {0}")]
    BadObject(&'static str),
    /// An object does not have the shape its class prescribes.
    #[error("object {oref:?} does not match class {class}: {why}")]
    ClassMismatch { oref: Oref, class: String, why: &'static str },
    /// A class descriptor is malformed.
    #[error("malformed class descriptor: {0}")]
    BadClass(&'static str),
    /// A large object's tree is malformed.
    #[error("malformed large object: {0}")]
    BadLarge(&'static str),
}
