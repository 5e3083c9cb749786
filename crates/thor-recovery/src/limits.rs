//! Every bound of the recovery formats and buffers, with the reason for it; the compile-time
//! assertions below keep the relations between them true.

use thor_core::limits::{PAGE_HEADER_BYTES, PAGE_SIZE_MAX, PAGE_SIZE_MIN};

/// Bytes each region of a page record costs besides its images: its offset and its length, two
/// `u16`s (pages are at most 32 KiB, so both fit).
///
/// This is the `H` of the paper's merging rule (section 3.2.2). ESM's records each carried a
/// header of about 50 bytes (LSN, transaction, previous LSN, page, ...), so merging paid off
/// across gaps of up to 25 bytes. Here everything the regions of one page share (the page, the
/// transaction, the format, which images follow) is said once, in the page record's header
/// ([`PAGE_RECORD_HEADER_BYTES`]), which a page's records pay once whatever the merge choices;
/// the marginal cost of one more region is only where it is and how long. With undo images the
/// rule then merges across gaps of at most 2 bytes, and across at most 4 without.
pub const REGION_HEADER_BYTES: usize = 4;

/// Bytes of a page record's header: format, flags, region count, page id, transaction.
pub const PAGE_RECORD_HEADER_BYTES: usize = 16;

/// The smallest sub-page block (SD, SL): the paper tried 8 to 64 bytes. Smaller blocks would
/// spend more on bookkeeping (a slot per block) than on the bytes copied.
pub const BLOCK_BYTES_MIN: usize = 8;
/// The block size of the paper's SD and SL measurements, and ours unless set.
pub const BLOCK_BYTES_DEFAULT: usize = 64;

/// The most regions a page record may hold. Regions are disjoint, non-empty and separated by at
/// least one byte (touching regions are one region), so a page has at most half its bytes'
/// worth; the count is a `u16`.
pub const REGIONS_MAX: usize = PAGE_SIZE_MAX / 2;

/// The largest page record: a header, the most regions, and both images of every byte after
/// the page header.
pub const PAGE_RECORD_BYTES_MAX: usize =
    PAGE_RECORD_HEADER_BYTES + REGIONS_MAX * REGION_HEADER_BYTES + 2 * PAGE_SIZE_MAX;

/// Bytes of a WPL page-image record's header (kind, reserved, page id, transaction); the page
/// follows.
pub const WPL_IMAGE_HEADER_BYTES: usize = 16;
/// Bytes of a WPL commit record.
pub const WPL_COMMIT_BYTES: usize = 16;
/// Bytes of a WPL checkpoint record's header (kind, reserved, entry count).
pub const WPL_CHECKPOINT_HEADER_BYTES: usize = 8;
/// Bytes of one entry of a WPL checkpoint record (page, status, LSN, transaction).
pub const WPL_CHECKPOINT_ENTRY_BYTES: usize = 24;
/// The most entries a WPL table, and so a checkpoint record, may hold: one per page a database
/// can have (22-bit page ids), each possibly with one uncommitted copy beside its committed
/// one. A checkpoint record is then at most 192 MiB, which a server writes only if every page
/// of the largest database is waiting to be installed; a real bound is the table size a server
/// is configured with ([`crate::wpl::WplConfig::entries_max`]).
pub const WPL_ENTRIES_MAX: usize = 2 * (1 << 22);

const _: () = assert!(REGIONS_MAX <= u16::MAX as usize);
const _: () = assert!(PAGE_SIZE_MAX <= u16::MAX as usize + 1);
const _: () = assert!(BLOCK_BYTES_MIN.is_power_of_two() && BLOCK_BYTES_DEFAULT.is_power_of_two());
const _: () = assert!(BLOCK_BYTES_DEFAULT <= PAGE_SIZE_MIN);
// A region never covers the page header, so a page has room for regions after it.
const _: () = assert!(PAGE_HEADER_BYTES < PAGE_SIZE_MIN);
const _: () = assert!(PAGE_RECORD_BYTES_MAX <= u32::MAX as usize);
