//! Bounds of the object and page formats. Every constant says why it has its value; the
//! compile-time assertions below keep the relations between them true.

use crate::ids::OIDS_PER_PAGE;

/// The smallest page size a database may be created with. Smaller pages would leave too little
/// room for the header and a useful number of objects.
pub const PAGE_SIZE_MIN: usize = 1024;
/// The largest page size. Offsets in the offset table are 16 bits and `data_end` must be able to
/// point one past the last object, so a page must be smaller than 64 KiB; 32 KiB is the largest
/// power of two below that.
pub const PAGE_SIZE_MAX: usize = 32 * 1024;
/// The page size of a database when none is asked for: the papers' 8 KB.
pub const PAGE_SIZE_DEFAULT: usize = 8 * 1024;

/// Bytes of the page header (see [`crate::page`]).
pub const PAGE_HEADER_BYTES: usize = 24;
/// Bytes of one offset-table entry.
pub const OFFSET_ENTRY_BYTES: usize = 2;
/// Bytes of an object header (the class oref).
pub const OBJECT_HEADER_BYTES: usize = 4;
/// Objects start at 4-byte boundaries so that every field word is aligned.
pub const OBJECT_ALIGN: usize = 4;

/// The largest object a page of `page_size` bytes can hold: the page minus its header and one
/// offset-table entry. Larger values are stored as trees ([`crate::large`]).
pub const fn max_object_bytes(page_size: usize) -> usize {
    (page_size - PAGE_HEADER_BYTES - OFFSET_ENTRY_BYTES) & !(OBJECT_ALIGN - 1)
}

/// The longest class name, in bytes of UTF-8.
pub const CLASS_NAME_MAX_BYTES: usize = 64;
/// The largest fixed part of a class: the fixed part must fit in the smallest page.
pub const CLASS_FIXED_MAX_BYTES: usize = max_object_bytes(PAGE_SIZE_MIN) - OBJECT_HEADER_BYTES - 4;
/// The longest field name a class descriptor records, in bytes of UTF-8 (its length is a byte).
pub const CLASS_FIELD_NAME_MAX_BYTES: usize = 64;
/// The longest class descriptor (with its field names): the class object, a `thor.Class`
/// instance (header, count, descriptor), must fit in the smallest page.
pub const CLASS_DESC_MAX_BYTES: usize = max_object_bytes(PAGE_SIZE_MIN) - OBJECT_HEADER_BYTES - 4;

/// Whether `page_size` is a page size a database can use.
pub const fn is_valid_page_size(page_size: usize) -> bool {
    page_size.is_power_of_two() && page_size >= PAGE_SIZE_MIN && page_size <= PAGE_SIZE_MAX
}

const _: () = assert!(is_valid_page_size(PAGE_SIZE_DEFAULT));
const _: () = assert!(PAGE_SIZE_MAX < u16::MAX as usize + 1);
// A page full of the smallest objects (a header only) must still be addressable by 9-bit oids
// in the smallest page; in larger pages the oid space, not the bytes, is the limit.
const _: () = assert!(
    PAGE_HEADER_BYTES + OIDS_PER_PAGE * (OFFSET_ENTRY_BYTES + OBJECT_HEADER_BYTES) > PAGE_SIZE_MIN
);
const _: () = assert!(PAGE_HEADER_BYTES.is_multiple_of(8));
