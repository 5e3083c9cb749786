//! The bounds of the offline tools, each with its reason.

use thor_server::limits::BULK_WINDOW_PAGES;

/// The source engine's page cache during an upgrade ([`crate::upgrade`](mod@crate::upgrade)).
/// The walk reads pages in order, and marking revisits a page only when a later page refers
/// back to it, so a modest cache serves it; the upgrade's memory stays small beside the map it
/// must keep.
pub const UPGRADE_SOURCE_PAGE_CACHE_BYTES: usize = 16 << 20;

/// Pages an upgrade lets its bulk loader hold before writing them out (it patches nothing, so
/// it needs no window): 2 MiB runs of 8 KiB pages, long writes at a small memory cost.
pub const UPGRADE_WRITE_OUT_PAGES: u64 = 256;

const _: () = assert!(UPGRADE_WRITE_OUT_PAGES > 0);
const _: () = assert!((UPGRADE_WRITE_OUT_PAGES as usize) < BULK_WINDOW_PAGES);
