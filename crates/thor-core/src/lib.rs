//! thor-core: the names and byte formats every other thor crate agrees on.
//!
//! - [`ids`]: orefs (22-bit page id, 9-bit object id, one spare bit), page and object ids,
//!   server and client ids, LSNs.
//! - [`page`]: the page layout with its offset table; checked views and in-place building.
//! - [`class`]: class descriptors (which fields are references), the object layout, and the
//!   built-in classes every database starts with.
//! - [`large`]: values larger than a page as trees of page-sized pieces.
//! - [`checksum`]: CRC-32C, the one checksum of every format.
//! - [`limits`]: every bound of the formats, with the reasons for it.
//!
//! *Architecture invariant:* this crate does no I/O, reads no clock and never panics on bytes
//! it is asked to decode: every malformation is a [`FormatError`].

pub mod checksum;
pub mod class;
pub mod error;
pub mod ids;
pub mod large;
pub mod le;
pub mod limits;
pub mod page;
pub mod storage_error;

pub use class::{ClassDesc, VarKind, builtin};
pub use error::FormatError;
pub use ids::{ClientId, Lsn, NotAnObject, Oid, Oref, PageId, RawRef, ServerId};
pub use page::{PageMut, PageView};
pub use storage_error::StorageError;
