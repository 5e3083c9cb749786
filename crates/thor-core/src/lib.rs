//! thor-core: the names and byte formats every other thor crate agrees on.
//!
//! - [`ids`]: orefs (22-bit page id, 9-bit object id, one spare bit), page and object ids,
//!   server and client ids, LSNs.
//! - [`page`]: the page layout with its offset table; checked views and in-place building.
//! - [`class`]: class descriptors (which fields are references, and optionally every field's name
//!   and type), the object layout, and the built-in classes every database starts with.
//! - [`large`]: values larger than a page as trees of page-sized pieces.
//! - [`checksum`]: CRC-32C, the one checksum of every format.
//! - [`limits`]: every bound of the formats, with the reasons for it.
//!
//! *Architecture invariant:* this crate does no I/O, reads no clock and never panics on bytes
//! it is asked to decode: every malformation is a [`FormatError`].
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! Orefs (`ids.rs`: 22-bit page id, 9-bit oid, a spare bit that clients use for swizzled references
//! and commits use for references to objects created in the same transaction), the page layout with
//! its offset table (`page.rs`), class descriptors and the object layout (`class.rs`), the built-in
//! classes and the root object in page 1 (`class::builtin`), values larger than a page as trees
//! (`large.rs`), CRC-32C (`checksum.rs`) and the format bounds (`limits.rs`).
//!
//! *Architecture Invariant:* no I/O, no clock. Decoding untrusted bytes never panics: every
//! malformation is a `FormatError` (property-tested on random and bit-flipped pages).
//!
//! *Architecture Invariant:* objects in a page are contiguous and in oid order, so sizes are never
//! stored; installing a version of a different size repacks the page without changing orefs.
//! Unused page bytes are zero, so equal contents give equal bytes.
//!
//! *Architecture Invariant:* one definition of a word that names a stored object:
//! `Oref::object` (spare bit clear, page id in `1..=PAGE_ID_MAX`; `NotAnObject` says why not).
//! The wire decoder and encoders, the server core's validation and the log-record decoder of
//! recovery and `thor check` all use it, so what the wire admits, the core acknowledges and
//! recovery reads back are the same set (issue 30; `thor_sim::acked` checks it).
//!
//! *API Boundary:* `Oref` (`object`, `check_object`, `names_object`), `NotAnObject`, `PageId`, `PageView` (checked read-only view; `PageView::object_in`
//! reads one object with only the checks that needs; `PageView::slot_count_in` the header's slot
//! count, for a page checked whole when it was read), `PageMut` (append, apply
//! versions, seal), `ClassDesc` (`extends`, `extended_by`: a stored class a narrower declaration
//! may read), `builtin`, `large::{encode, read, pieces_below_root}` (`read`
//! fetches at most the pieces the root's length needs, within the caller's limit).

pub mod checksum;
pub mod class;
pub mod error;
pub mod ids;
pub mod large;
pub mod le;
pub mod limits;
pub mod mapnode;
pub mod page;
pub mod storage_error;

pub use class::{ClassDesc, FieldKind, Scalar, VarElem, VarKind, builtin};
pub use error::FormatError;
pub use ids::{ClientId, Lsn, NotAnObject, Oid, Oref, PageId, RawRef, ServerId};
pub use page::{PageMut, PageView};
pub use storage_error::StorageError;
