//! The errors of this crate, one enum per operation. Each variant says what the caller should
//! do: a [`DiffError`] is a bug of the caller (the pre-image or the set of written objects does
//! not describe the page), a [`RecordError`] is bytes that must be refused (a client's or a
//! disk's), a [`BufferError`] a configuration or a write to fix, a [`WplError`] either a
//! misuse by the server driver (an order the protocol forbids) or a log restart cannot trust.

use thor_core::PageId;

use crate::TxnId;

/// Why a page could not be diffed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiffError {
    /// The saved copy and the current page differ in length.
    #[error("pre-image of {pre} bytes does not match a page of {page} bytes")]
    PageSizeMismatch { pre: usize, page: usize },
    /// The pre-image's pieces are out of order, overlap, or reach past the page.
    #[error("malformed pre-image: {0}")]
    BadPreImage(&'static str),
    /// The writable spans are out of order, overlap, or reach past the page.
    #[error("malformed writable spans: {0}")]
    BadWritable(&'static str),
    /// A byte changed outside every writable span: the transaction changed an object it did not
    /// declare written (or a swizzled word leaked into the image). Logging it would overwrite
    /// another transaction's object, so the page is refused, not logged.
    #[error("byte {offset} changed outside the objects the transaction wrote")]
    ChangeOutsideWritable { offset: usize },
}

/// Why a page record could not be encoded, decoded or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The bytes end before the header or a region does.
    #[error("page record truncated at byte {at}")]
    Truncated { at: usize },
    /// Bytes follow the last region.
    #[error("{extra} bytes after the last region of a page record")]
    TrailingBytes { extra: usize },
    /// The format byte is not one this version knows.
    #[error("unknown page record format {0}")]
    UnknownFormat(u8),
    /// A reserved flag is set.
    #[error("unknown page record flags {0:#04x}")]
    UnknownFlags(u8),
    /// The page id is outside `1..=2^22 - 1`.
    #[error("page record names page {0}, outside the valid range")]
    BadPageId(u32),
    /// A record has no regions, or more than a page can have.
    #[error("page record with {0} regions")]
    BadRegionCount(usize),
    /// A region is empty, covers the page header, reaches past the page, or overlaps or
    /// precedes the previous region.
    #[error("bad region at offset {offset} (length {len}): {why}")]
    BadRegion { offset: usize, len: usize, why: &'static str },
    /// The page size given is not a valid page size.
    #[error("{0} is not a valid page size")]
    BadPageSize(usize),
    /// The page a record is applied to has a different size than it was decoded for.
    #[error("record for {record}-byte pages applied to a {page}-byte page")]
    PageSizeMismatch { record: usize, page: usize },
    /// The pre-image given to the encoder for undo bytes does not describe the page.
    #[error("pre-image for undo bytes: {0}")]
    PreImage(DiffError),
    /// Undo was asked of a record that carries no undo images (one sent at commit).
    #[error("page record carries no undo images")]
    NoUndo,
}

/// Why a recovery buffer could not be built or asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BufferError {
    /// The configuration is inconsistent (see the message).
    #[error("bad recovery buffer configuration: {0}")]
    BadConfig(&'static str),
    /// A write reaches outside the page or is empty.
    #[error("write of bytes {start}..{end} is not inside a {page_size}-byte page")]
    BadWrite { start: usize, end: usize, page_size: usize },
    /// The page image passed in has the wrong size.
    #[error("page image of {got} bytes, the buffer holds {page_size}-byte pages")]
    PageSize { got: usize, page_size: usize },
}

/// Why the WPL table refused an operation, or restart refused a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WplError {
    /// Another transaction holds an uncommitted copy of the page: whole pages carry every
    /// object of the page, so two uncommitted copies cannot both be installed. The second
    /// transaction must wait or abort (a page-level write conflict).
    #[error("page {page} has an uncommitted copy from transaction {holder}")]
    PageBusy { page: PageId, holder: TxnId },
    /// A bound of the configuration is zero or above its limit.
    #[error("bad WPL table configuration")]
    BadConfig,
    /// As many commits followed the last checkpoint as restart is allowed to read: write a
    /// checkpoint, then commit.
    #[error("checkpoint due before the next commit")]
    CheckpointDue,
    /// The table is at its configured size: install pages (or checkpoint and install) first.
    #[error("WPL table full ({0} entries)")]
    TableFull(usize),
    /// Log positions must increase: a record was reported at or below the last one.
    #[error("LSN {got} is not after the last logged LSN {last}")]
    LsnOrder { got: u64, last: u64 },
    /// The transaction holds no uncommitted copy (it committed, aborted or never logged one).
    #[error("no active transaction {0}")]
    NoSuchTxn(TxnId),
    /// As many transactions hold uncommitted copies as the table is configured for.
    #[error("too many transactions with uncommitted pages ({0})")]
    TooManyTxns(usize),
    /// The log does not reach back to a checkpoint but does not start at its beginning either:
    /// a prefix restart needs was truncated.
    #[error("log truncated before LSN {first} holds no checkpoint")]
    NoCheckpoint { first: u64 },
    /// A WPL log record does not decode.
    #[error("malformed WPL record at LSN {lsn}: {why}")]
    BadRecord { lsn: u64, why: &'static str },
    /// Restart met a committed transaction or table entry beyond its configured bounds.
    #[error("restart exceeded its bound: {0}")]
    RestartBound(&'static str),
}
