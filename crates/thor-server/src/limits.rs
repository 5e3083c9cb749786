//! Bounds of the driver, with the reasons for their values, and the core's
//! ([`thor_server_core::limits`], re-exported here so that every bound of a server has one
//! home to look in).

pub use thor_server_core::limits::*;

/// Pages a bulk load keeps in memory (so that references in them can still be patched) before
/// writing the oldest out: 512 MiB of 8 KB pages.
pub const BULK_WINDOW_PAGES: usize = 65_536;

// The core restates the log's figures it budgets with (it cannot depend on thor-storage):
// they must be the log's.
const _: () = assert!(LOG_RECORD_HEADER_BYTES == thor_storage::limits::RECORD_HEADER_BYTES);
const _: () = assert!(LOG_BUFFER_BYTES_DEFAULT == thor_storage::limits::BUFFER_BYTES_MAX_DEFAULT);
const _: () =
    assert!(LOG_RECORD_BYTES_MAX_DEFAULT == thor_storage::limits::RECORD_BYTES_MAX_DEFAULT);
const _: () = assert!(log_record_len(7) == thor_storage::log::record::encoded_len(7));
