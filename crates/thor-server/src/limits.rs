//! Bounds of the driver, with the reasons for their values, and the core's
//! ([`thor_server_core::limits`], re-exported here so that every bound of a server has one
//! home to look in).

pub use thor_server_core::limits::*;

/// Pages a bulk load keeps in memory (so that references in them can still be patched) before
/// writing the oldest out: 512 MiB of 8 KB pages.
pub const BULK_WINDOW_PAGES: usize = 65_536;

/// The source engine's page cache during an upgrade ([`crate::upgrade`](mod@crate::upgrade)). The walk reads
/// pages in order, and marking revisits a page only when a later page refers back to it, so a
/// modest cache serves it; the upgrade's memory stays small beside the map it must keep.
pub const UPGRADE_SOURCE_PAGE_CACHE_BYTES: usize = 16 << 20;

/// Pages an upgrade lets its bulk loader hold before writing them out (it patches nothing, so
/// it needs no window): 2 MiB runs of 8 KiB pages, long writes at a small memory cost.
pub const UPGRADE_WRITE_OUT_PAGES: u64 = 256;

const _: () = assert!(UPGRADE_WRITE_OUT_PAGES > 0);
const _: () = assert!((UPGRADE_WRITE_OUT_PAGES as usize) < BULK_WINDOW_PAGES);

// The core restates the log's figures it budgets with (it cannot depend on thor-storage):
// they must be the log's.
const _: () = assert!(LOG_RECORD_HEADER_BYTES == thor_storage::limits::RECORD_HEADER_BYTES);
const _: () = assert!(LOG_BUFFER_BYTES_DEFAULT == thor_storage::limits::BUFFER_BYTES_MAX_DEFAULT);
const _: () =
    assert!(LOG_RECORD_BYTES_MAX_DEFAULT == thor_storage::limits::RECORD_BYTES_MAX_DEFAULT);
const _: () = assert!(log_record_len(7) == thor_storage::log::record::encoded_len(7));
