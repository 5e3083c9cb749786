//! thor-recovery: the QuickStore recovery schemes (`papers/quickstore-recovery-sigmod95.txt`)
//! as pure parts that the client library and the server core drive.
//!
//! thor's own commit path ships modified *objects* to the server, which logs them and keeps them
//! in its modified object buffer (MOB). The paper compares page-shipping schemes that make
//! updates recoverable in other ways; this crate holds the parts of them that are logic rather
//! than I/O:
//!
//! - [`diff`]: update detection. Page diffing (PD), sub-page diffing (SD) and sub-page logging
//!   (SL) against saved pre-images, with the paper's minimum-traffic merging of regions, kept
//!   inside the objects the transaction wrote.
//! - [`record`]: the page record, the byte layout of a page's changed regions (redo bytes, and
//!   undo bytes for records sent before commit); encode, checked decode, apply and undo.
//! - [`rbuf`]: the client's recovery buffer of saved pages or blocks, FIFO when full.
//! - [`wpl`]: whole-page logging's server side: the WPL table, its log records, checkpoints,
//!   and restart by one backward pass to the last checkpoint.
//! - [`limits`]: every bound, with its reason.
//!
//! *Architecture invariant:* no I/O, no clock, no threads. Every buffer is bounded by a setting
//! or a constant of [`limits`]; decoding untrusted bytes never panics (every malformation is a
//! typed error).

pub mod diff;
pub mod error;
pub mod limits;
pub mod rbuf;
pub mod record;
pub mod wpl;

pub use diff::{Differ, Images, MergeCost, Pieces, PreImage, Span};
pub use error::{BufferError, DiffError, RecordError, WplError};
pub use rbuf::{BeforeWrite, Copies, RecoveryBuffer, RecoveryBufferConfig};
pub use record::{PageRecord, RecordHeader};
pub use wpl::{WplConfig, WplTable};

use std::fmt;

/// A transaction as the recovery schemes name it: the key by which restart matches page
/// records and page images to commit records, and an abort finds what to take back. The server
/// assigns it (for example the session's client id in the high half and a per-session counter
/// in the low half), so that it is unique across the log's lifetime.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct TxnId(pub u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}
