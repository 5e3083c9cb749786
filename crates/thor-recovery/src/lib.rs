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
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The parts of the QuickStore recovery study's schemes (`papers/quickstore-recovery-sigmod95.txt`,
//! issue 14) that are logic, not I/O, shared by the client library (which produces records,
//! thor-client `pagemode.rs`) and the server (which applies them: thor-study's `pagecommit.rs`,
//! and for WPL its `wpl.rs` and `wpl_log.rs`). `diff.rs`: update detection against a saved
//! pre-image (`PreImage`: a whole page for PD, copied blocks for SD and SL), maximal runs of
//! changed bytes found eight bytes at a time, and the paper's minimum-traffic merging (two regions
//! merge when `k·gap <= H`, `k` the images per region, `H` = 4 bytes per region), confined to the
//! *writable spans*, the objects the transaction wrote (thor validates per object, so a region
//! reaching into a neighbour would undo another client's commit). `record.rs`: the page record
//! (one page's regions, redo bytes, undo bytes for records sent before commit), encode, checked
//! decode, apply and undo; the layout is in `docs/format.md`. `rbuf.rs`: the client's recovery
//! buffer, `M` pages' worth of memory in slots of one unit (a page for PD, a block for SD and SL)
//! allocated once, copy on first update, pages in FIFO order; when a write's copies do not fit it
//! copies nothing and names the oldest page, whose records the caller sends (with undo) before
//! releasing it and asking again. `wpl.rs`: whole-page logging's server side: the WPL table
//! (per page the committed copy not yet home and at most one uncommitted copy; a second
//! transaction's copy of a page is `PageBusy`), told of each record before it is appended and of
//! durability after; its log records (page image, commit, checkpoint); checkpoints that list the
//! table; the truncation point; and `restart`, one backward pass over a `BackwardLog` to the newest
//! checkpoint with a committed-transactions list. A WPL commit record may carry an uninterpreted
//! body (flags bit 0: `encode_commit_with`, `WplRecord::CommitWith`), where thor-server puts the
//! created objects and the written orefs.
//!
//! Why a crate of its own and not `thor-core/src/diff.rs`: thor-core is the format of what is
//! stored (ids, pages, objects); these are the formats and state machines of one family of
//! commit paths, with a client half and a server half that must agree byte for byte, like
//! thor-wire for messages. Kept apart, the schemes are testable alone, thor-core stays the small
//! dependency every crate pulls, and neither the cache nor the server core owns the other's half.
//!
//! *Architecture Invariant:* no I/O, no clock. Decoding untrusted bytes never panics: every
//! malformation of a page record is a `RecordError` (property-tested on random, bit-flipped and
//! truncated records), of a WPL record a `WplError::BadRecord` (property-tested on random bytes).
//!
//! *Architecture Invariant:* a region never covers a byte outside the objects the transaction
//! wrote, nor the page header; a change outside them is refused (`DiffError::ChangeOutsideWritable`),
//! never logged.
//!
//! *Architecture Invariant:* the merging rule is minimal: tested against a brute-force search over
//! every merge choice and over every covering of the changed bytes by disjoint regions, and on the
//! paper's Figure 2 cases.
//!
//! *Architecture Invariant:* the recovery buffer allocates nothing after it is built and keeps
//! the copy-on-first-update contract the diff relies on: a unit's copy is its value before the
//! transaction's first write to it, and a unit never copied has not changed. Checked against a
//! FIFO-of-maps model through writes, room-making, evictions, commits and aborts, with the
//! server's copy equal to the client's at every commit and restored exactly at every abort
//! (`rbuf/tests.rs`).
//!
//! *Architecture Invariant:* after WPL's restart, every page's copy named by the table, or else
//! its home, is the newest copy written by a transaction whose commit record is durable; a
//! checkpoint never lists an in-flight commit as uncommitted; the log is truncated only below
//! what the newest durable checkpoint needs. Checked on generated histories with a crash after
//! every step and the unsynced tail cut at every point, and with crashes mid-history after which
//! the restarted table carries on (`wpl/tests.rs`).
//!
//! *API Boundary:* `Differ::{new, diff, blocks, merge}`, `Span`, `Images`, `MergeCost`,
//! `PreImage`, `Pieces`, `record::{encode, encoded_bytes, PageRecord, RecordHeader, Region,
//! Regions, PAGE_RECORD_FORMAT}`, `wpl::{WplTable, WplConfig, LogCopy, WplEntry, WplRecord,
//! Checkpoint, encode_image, encode_commit, encode_checkpoint, decode, BackwardLog, restart,
//! Restarted, RestartError, is_wpl_kind, KIND_IMAGE, KIND_COMMIT, KIND_CHECKPOINT,
//! encode_commit_with}` (`WplTable::{txns, config, checkpoint_pending}` beside the table's
//! driving calls), `RecoveryBuffer::{new, before_write, pre_image, release, clear,
//! pages, oldest, is_saved, stats, check_invariants}`, `RecoveryBufferConfig`, `Copies`,
//! `BeforeWrite`, `SavedPage`, `BufferStats`, `TxnId`, `DiffError`, `RecordError`,
//! `BufferError`, `WplError`, `limits`.

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
