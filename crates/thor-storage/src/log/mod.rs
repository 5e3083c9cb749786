//! The transaction log: append-only, checksummed records in numbered segment files, made
//! durable by group commit, recovered by rules that tell a torn tail from corruption.
//!
//! # Segment layout
//!
//! The log is a sequence of files named `{prefix}.{first_lsn:016x}` (lowercase hex), where
//! `first_lsn` is the LSN of the segment's first record: `log.0000000000000001`,
//! `log.00000000000003e9`, ... Each starts with a 24-byte header, then records packed back to
//! back with no padding. All integers are little-endian.
//!
//! ```text
//!  0            8          12         16                 24
//!  +------------+----------+----------+------------------+--------- ... ---------+
//!  | "thor-log" | version  |  crc32c  |    first_lsn     |  records              |
//!  |  8 bytes   |   u32    |   u32    |       u64        |                       |
//!  +------------+----------+----------+------------------+--------- ... ---------+
//!   crc32c covers bytes 0..12 and 16..24
//! ```
//!
//! `version` is [`LOG_FORMAT_VERSION`]; a segment of another version is refused with
//! [`StorageError::UnsupportedFormat`] (format 1, which had no header, is recognised by its
//! first record). `first_lsn` must equal the name's.
//!
//! # Record layout
//!
//! ```text
//!  0        4        8                16       20                  20 + len
//!  +--------+--------+----------------+--------+--------- ... ------+
//!  | crc32c |  len   |      lsn       | batch  |     payload        |
//!  |  u32   |  u32   |      u64       |  u32   |    len bytes       |
//!  +--------+--------+----------------+--------+--------- ... ------+
//!           \____________________ covered by crc32c ________________/
//! ```
//!
//! - `crc32c`: CRC-32C (Castagnoli) of everything after it: the rest of the header and the
//!   payload. Covering the LSN means a stale record in a reused or misnamed file is rejected
//!   even if its payload is intact; covering `len` and `batch` means no header field is taken
//!   on trust once the record is accepted.
//! - `len`: payload bytes, at most `LogOptions::record_bytes_max` (itself at most
//!   [`RECORD_BYTES_MAX_LIMIT`]).
//! - `lsn`: the record's log sequence number. LSNs start at 1 and increase by exactly 1 per
//!   record, across segments, forever.
//! - `batch`: the record's index in its *flush batch* (0 for the batch's first record), so the
//!   batch's first LSN is `lsn - batch`. Recovery needs it to tell a torn tail from corruption
//!   (below). Within a segment the indexes go 0, 1, 2, ... and restart at 0 with each batch;
//!   a segment's first record has index 0.
//!
//! # Flush batches and segments
//!
//! A flush batch is what one group-commit flush writes: every record appended since the
//! previous flush, in one `write_at` at the end of the active segment followed by one fsync.
//! The next batch is written only after that fsync succeeded (one leader at a time; a failure
//! poisons the log), so at any moment at most one batch is not yet durable: the last one.
//!
//! A batch goes to one segment: once the active segment holds at least `segment_bytes` (and
//! at least one record), the next flush starts a new segment before writing. Rotation order:
//!
//! 1. the old segment is fully fsynced (every flush ends with an fsync of what it wrote, and
//!    `open` fsyncs the segment it will append to), then
//! 2. the new file is created, its header written and fsynced, and the directory fsynced, then
//! 3. the batch is written to the new file and fsynced.
//!
//! So every segment but the newest is complete and durable, and a crash can damage only the
//! newest one's last batch (or leave the newest segment's header unfinished, with nothing after
//! it). [`Log::truncate_before`] deletes whole segments whose records are all below the given
//! LSN, oldest first, syncing the directory after each, so the surviving segments are always a
//! contiguous suffix; it never deletes the active segment, which is why the next LSN survives
//! even when everything has been truncated: it is derived from the newest segment's name plus
//! its intact records.
//!
//! # Recovery
//!
//! [`Log::open_streaming`] checks the segments' names and headers, then streams the newest
//! segment's records, checking each (length bound, length against the bytes left, CRC, LSN =
//! previous + 1, batch index; see [`record::Checker`]). If it reaches the end, the log is
//! intact. Otherwise let `b` be the offset of the first bad record and `e` the LSN it should
//! carry. A crash leaves the last batch with any subset of its sectors written (see
//! [`MemDisk`](crate::MemDisk)'s crash model), so intact records may *follow* a bad one; but
//! only records of the same, unsynced batch. Recovery therefore scans the rest of the segment
//! for intact records (at every offset, since the bad record's length cannot be trusted; a
//! candidate needs a believable header and a good CRC):
//!
//! - an intact record whose batch starts **after** `e` proves that the bad record's batch was
//!   fsynced before a later one was written: it was damaged after it was durable. That is
//!   **corruption**: `open` fails with [`StorageError::Corrupt`] naming the segment and `b`.
//! - otherwise (nothing intact after `b`, or only records whose batch starts at or before `e`,
//!   i.e. the bad record's own batch) it is a **torn tail**: that batch was never fsynced, so no
//!   `wait_durable` reported any of it durable. The bytes from `b` on are copied to a file
//!   `{prefix}.{e:016x}.torn` (`.torn.1`, ... if taken), which is fsynced with its directory
//!   entry *before* the segment is cut at `b` (`set_len` + fsync), so a crash during recovery
//!   never loses them. The cut is logged with `tracing::warn!` and described in
//!   [`OpenReport::torn_tail`]; if it leaves the log without any record, that is logged with
//!   `tracing::error!` and [`TornTail::log_emptied`] says so. Nothing is ever cut silently.
//!   The `.torn` files are never read or deleted by the log: they are evidence for a human.
//!
//! Every segment but the newest was complete and durable before the next was created, so a
//! bad record anywhere else, or a segment whose name does not continue the previous segment's
//! LSNs (a gap or an overlap), is corruption too; the [`LogReader`] finds those as it passes
//! them (open does not read older segments' records, see below). A newest segment whose header
//! is missing or incomplete and that holds nothing else is a creation a crash interrupted: its
//! header is rewritten ([`OpenReport::header_rewritten`]). An older segment like that, or any
//! other bad header, is corruption.
//!
//! What the rule cannot tell apart: damage to the **last** batch after it was fsynced (bit rot
//! in the final records, with nothing written after them) looks exactly like a tear, and is cut
//! as one; that is why the cut bytes are kept and the cut is loud. A candidate record in the
//! garbage of a tear passes the checks only by a CRC-32C collision among headers that already
//! carry a believable length, LSN and batch; even then it can only turn a tear into a refusal
//! to open, never into accepted data.
//!
//! `open` then fsyncs the active segment and the directory, so everything the log reports is
//! durable even if the previous process died before its own fsync.
//!
//! # Reading the log, and memory
//!
//! - [`Log::open_streaming`] returns the log and an [`OpenReport`]. It reads only the newest
//!   segment (to find a torn tail) and the older segments' headers, through buffers of
//!   `LogOptions::read_chunk_bytes`: its memory is about **2 × `read_chunk_bytes`**, whatever
//!   the size of the log or of its records.
//! - [`Log::reader`]`(from)` then streams the durable records with LSN ≥ `from` through a
//!   [`LogReader`], checking every record it passes: memory is **`read_chunk_bytes` plus the
//!   largest record returned** (at most `record_bytes_max` plus its 20-byte header). This is
//!   what a server should use to replay from its checkpoint.
//! - [`Log::open`] is the old convenience: `open_streaming` plus a reader from the oldest
//!   record, collected into [`Recovered::records`]. It holds the whole log in memory; use it
//!   for small logs and tests only.
//! - [`Log::backward_reader`] returns the durable records newest first through a
//!   [`LogBackReader`] (for a restart that reads back to a checkpoint, as whole-page logging's
//!   does), with the same checks: it indexes one segment at a time with a forward pass, then
//!   reads each record again by its offset and checks it again. Memory: `read_chunk_bytes`,
//!   8 bytes per record of one segment, and the record returned.
//! - [`inspect::inspect`] is for offline checkers: it walks every segment with the same checks
//!   without opening the log, and *reports* a torn tail or an unfinished header where open
//!   would repair them, writing nothing (see [`inspect`]).
//!
//! # Group commit
//!
//! [`Log::append`] encodes the record into an in-memory buffer under a mutex and returns its
//! LSN at once; LSNs are assigned in call order. [`Log::wait_durable`] returns once the record
//! is written and fsynced:
//!
//! ```text
//!   appenders ──► [ pending buffer ] ──swap──► [ in-flight batch ] ──write_at + fsync──► disk
//!                  (fills meanwhile)             (one leader, no lock held)
//! ```
//!
//! The first waiter that finds no flush in progress becomes the *leader*: it swaps the pending
//! buffer with an empty spare (double buffering), releases the mutex, writes the whole batch
//! with one `write_at` and one `sync`, then advances the durable LSN and wakes everyone.
//! [`Log::append_shared`] takes a record the caller already holds in a shared buffer: a large
//! one (at least [`SHARED_RECORD_BYTES_MIN`]) is not copied into the pending buffer, only its
//! header is, and the flush writes the batch in pieces, the record's bytes straight from the
//! caller's buffer (a commit of 99,000 objects copied 6.7 MB there, most of it first touches
//! of fresh memory). The bytes on disk are the same either way.
//! Waiters whose LSN the flush covered return; the rest elect the next leader. Meanwhile new
//! appends go to the fresh pending buffer, so appenders never wait for the disk unless the
//! buffer bound is hit. With `n` committers and fsync latency `t`, each fsync carries roughly
//! the records appended during the previous one: [`LogStats`] reports records per fsync. The
//! pending buffer is the next flush batch, so `append` numbers records within it (`batch`).
//!
//! # Bounds
//!
//! - `buffer_bytes_max` bounds appended-but-unwritten bytes (pending + in flight). An append
//!   that would exceed it waits for the flush in progress, or, when none is, performs one
//!   itself. A single record larger than the bound is accepted once nothing else is unwritten
//!   and goes to disk alone. It is at most [`BUFFER_BYTES_MAX_LIMIT`], so a batch's record
//!   indexes fit the 32-bit `batch` field.
//! - `record_bytes_max` rejects larger payloads with [`StorageError::RecordTooLarge`] before
//!   anything is buffered; recovery treats a longer length field as a bad record.
//! - `read_chunk_bytes` bounds the read buffers of recovery and readers (see above).
//!
//! # Failures
//!
//! If a write, fsync, segment creation or directory sync of a flush fails, the log is
//! *poisoned*: the leader and every later `append`, `wait_durable` and `truncate_before` get
//! [`StorageError::Poisoned`]. After a failed fsync nobody knows what reached the disk (Linux
//! may even drop the dirty pages and report success next time), so retrying would risk
//! acknowledging lost records. The owner must drop the log and reopen it; recovery decides
//! what survived. A record is reported durable only after an fsync that covered it succeeded.
//! Records appended but never made durable are simply lost when the log is dropped.

mod backward;
pub mod inspect;
mod reader;
pub mod record;
mod recovery;
mod segment;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard};
use thor_core::ids::Lsn;

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::{
    BUFFER_BYTES_MAX_DEFAULT, BUFFER_BYTES_MAX_LIMIT, BUFFER_BYTES_MIN, BUFFER_KEEP_BYTES_MAX,
    LOG_PREFIX_BYTES_MAX, READ_CHUNK_BYTES_DEFAULT, READ_CHUNK_BYTES_MIN, RECORD_BYTES_MAX_DEFAULT,
    RECORD_BYTES_MAX_LIMIT, SEGMENT_BYTES_DEFAULT, SEGMENT_HEADER_BYTES, SHARED_RECORD_BYTES_MIN,
    TORN_FILES_PER_LSN_MAX,
};
pub use backward::LogBackReader;
pub use reader::LogReader;
pub use segment::{SEGMENT_MAGIC, parse_segment_name, segment_name, torn_name};

/// The version of the segment and record layouts described in the module documentation.
/// Version 1 had no segment header and no batch index; it is refused, not converted.
pub const LOG_FORMAT_VERSION: u32 = 2;

/// How a log is laid out and bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// File-name prefix of the segments (`{prefix}.{first_lsn:016x}`), so that several logs or
    /// other files can share a directory. Default `"log"`.
    pub prefix: String,
    /// A new segment is started by the first flush after the active segment reaches this many
    /// bytes; it bounds how much `truncate_before` must wait to free. Default
    /// [`SEGMENT_BYTES_DEFAULT`].
    pub segment_bytes: u64,
    /// Bound on appended-but-unwritten bytes; `append` blocks (or flushes) beyond it. At least
    /// [`BUFFER_BYTES_MIN`], at most [`BUFFER_BYTES_MAX_LIMIT`]. Default
    /// [`BUFFER_BYTES_MAX_DEFAULT`].
    pub buffer_bytes_max: usize,
    /// The largest payload `append` accepts, and the largest length recovery believes. At most
    /// [`RECORD_BYTES_MAX_LIMIT`]. Reopening with a smaller value than records were written
    /// with makes those records corrupt. Default [`RECORD_BYTES_MAX_DEFAULT`].
    pub record_bytes_max: usize,
    /// Bytes that recovery and [`LogReader`]s read at a time: with `record_bytes_max`, what
    /// bounds their memory (see the module documentation). At least [`READ_CHUNK_BYTES_MIN`].
    /// Default [`READ_CHUNK_BYTES_DEFAULT`].
    pub read_chunk_bytes: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            prefix: "log".to_string(),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            buffer_bytes_max: BUFFER_BYTES_MAX_DEFAULT,
            record_bytes_max: RECORD_BYTES_MAX_DEFAULT,
            read_chunk_bytes: READ_CHUNK_BYTES_DEFAULT,
        }
    }
}

impl LogOptions {
    fn validate(&self) -> Result<(), StorageError> {
        let bad = |why: String| Err(StorageError::InvalidArgument(why));
        if self.prefix.is_empty() || self.prefix.len() > LOG_PREFIX_BYTES_MAX {
            return bad(format!("log prefix must be 1 to {LOG_PREFIX_BYTES_MAX} bytes"));
        }
        validate_name(&segment_name(&self.prefix, Lsn(1)))?;
        validate_name(&torn_name(&self.prefix, Lsn(u64::MAX), TORN_FILES_PER_LSN_MAX - 1))?;
        if self.segment_bytes == 0 {
            return bad("segment_bytes must be positive".to_string());
        }
        if self.buffer_bytes_max < BUFFER_BYTES_MIN
            || self.buffer_bytes_max > BUFFER_BYTES_MAX_LIMIT
        {
            return bad(format!(
                "buffer_bytes_max must be {BUFFER_BYTES_MIN} to {BUFFER_BYTES_MAX_LIMIT}"
            ));
        }
        if self.record_bytes_max > RECORD_BYTES_MAX_LIMIT {
            return bad(format!("record_bytes_max must be at most {RECORD_BYTES_MAX_LIMIT}"));
        }
        if self.read_chunk_bytes < READ_CHUNK_BYTES_MIN {
            return bad(format!("read_chunk_bytes must be at least {READ_CHUNK_BYTES_MIN}"));
        }
        Ok(())
    }
}

/// What [`Log::open`] found: the whole log in memory (see the module documentation for when to
/// prefer [`Log::open_streaming`] and a [`LogReader`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Every intact record still in the log, in LSN order (contiguous LSNs). Records below a
    /// `truncate_before` point may still be here: only whole segments are deleted.
    pub records: Vec<(Lsn, Vec<u8>)>,
    /// The LSN the next `append` will get.
    pub next_lsn: Lsn,
    /// Bytes of a torn tail cut off the newest segment (0 after a clean shutdown); the details
    /// are in [`Log::open_report`].
    pub torn_bytes_cut: u64,
}

/// What [`Log::open_streaming`] (and [`Log::open`]) found and did. Also kept by the log:
/// [`Log::open_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// The LSN the next `append` will get.
    pub next_lsn: Lsn,
    /// The first LSN of the oldest segment: the log holds the records from here to `next_lsn`
    /// (a reader checks that as it reads them).
    pub first_lsn: Lsn,
    /// Segment files in the log.
    pub segments: u64,
    /// Whether there was no segment and open created the first (a new log).
    pub created: bool,
    /// Intact records in the newest segment, after any cut.
    pub newest_segment_records: u64,
    /// The torn tail cut off the newest segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// The newest segment, if its header had never become durable (a crash interrupted its
    /// creation) and open rewrote it. It held no records.
    pub header_rewritten: Option<String>,
}

/// A torn tail that [`Log::open_streaming`] cut off the newest segment: the last flush batch,
/// never fsynced, from its first damaged record on. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// The segment that was cut.
    pub segment: String,
    /// Where it was cut: the offset of the first bad record, now the segment's length.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// The LSN the first cut record would have had; the next append gets it.
    pub first_lost_lsn: Lsn,
    /// The file in the log's directory that keeps the cut bytes, durably.
    pub kept_in: String,
    /// Why the first cut record failed its check.
    pub defect: String,
    /// Intact records of the same (unsynced) batch found after the bad one and cut with it:
    /// sectors of the batch that landed while an earlier one did not.
    pub intact_records_cut: u64,
    /// Whether the cut left the log without any record at all (it is then also logged as an
    /// error, not just a warning).
    pub log_emptied: bool,
}

/// The durable part of a log, as [`Log::durable_extent`] found it: what a backup copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogExtent {
    /// Every record up to this LSN is in the extent, and no later one.
    pub durable_lsn: Lsn,
    /// Segment files, oldest first, with the bytes of each to copy from its start.
    pub segments: Vec<(String, u64)>,
}

/// A snapshot of the log's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogStats {
    /// Records appended since open.
    pub records_appended: u64,
    /// Payload bytes appended since open.
    pub payload_bytes_appended: u64,
    /// Bytes written to segments by flushes (headers included).
    pub bytes_written: u64,
    /// Group-commit flushes: each is one `write_at` and one fsync.
    pub flushes: u64,
    /// Fsyncs of segment files: flushes, segment headers, and the one `open` does.
    pub fsyncs: u64,
    /// Directory syncs (segment creation and deletion, open).
    pub dir_syncs: u64,
    /// Records made durable by flushes; `records_synced / flushes` is the group-commit factor.
    pub records_synced: u64,
    /// The most records one flush made durable.
    pub records_per_fsync_max: u64,
    /// `records_synced / flushes` (0 before the first flush).
    pub records_per_fsync_mean: f64,
    /// `wait_durable` calls that returned `Ok` (commits acknowledged); `durable_waits /
    /// flushes` is commits per fsync.
    pub durable_waits: u64,
    /// Of those, the calls that did not lead a flush themselves: their record was made durable
    /// by another thread's fsync (or already was).
    pub waits_joined: u64,
    /// Flushes led by `append` because the buffer bound was hit.
    pub flushes_forced_by_append: u64,
    /// Appends that had to wait for buffer space.
    pub appends_blocked: u64,
    /// Segments created (including the first of a fresh log).
    pub segments_created: u64,
    /// Segments deleted by `truncate_before`.
    pub segments_deleted: u64,
    /// Segment files the log currently consists of.
    pub segments_live: u64,
    /// Records read and checked at open: those of the newest segment for
    /// [`Log::open_streaming`], every record for [`Log::open`].
    pub records_recovered: u64,
    /// Bytes of torn tail cut by `open`.
    pub torn_bytes_cut: u64,
}

/// The segment being appended to.
#[derive(Debug, Clone)]
pub(crate) struct Active {
    /// Its file name.
    name: String,
    /// The open file.
    file: Arc<dyn DiskFile>,
    /// Bytes of header and whole records in it: where the next flush writes.
    len: u64,
}

/// A segment file of the log.
#[derive(Debug, Clone)]
pub(crate) struct SegmentInfo {
    /// The LSN of its first record (also encoded in its name and header).
    first_lsn: Lsn,
    /// Its file name.
    name: String,
}

/// Everything the mutex protects.
struct State {
    /// The LSN the next append gets.
    next_lsn: Lsn,
    /// Every record up to this LSN has been written and fsynced.
    durable_lsn: Lsn,
    /// Encoded records not yet taken by a flush (LSNs after the in-flight batch's): the next
    /// flush batch.
    pending: Vec<u8>,
    /// Payloads of records in the pending batch that are not copied into `pending`
    /// ([`Log::append_shared`]): each goes right after the first `at` bytes of `pending`
    /// (its header's end), in order.
    shared: Vec<(usize, Bytes)>,
    /// Bytes of the payloads in `shared`.
    shared_bytes: usize,
    /// Records in `pending`: the batch index the next append gets. Below 2^32 because
    /// `pending` holds at most `buffer_bytes_max` bytes (or one record) of records of at least
    /// a header each (see the assertions in [`crate::limits`]).
    pending_records: u32,
    /// An empty buffer kept for the next swap, so steady-state flushing does not allocate.
    spare: Vec<u8>,
    /// Bytes of the batch a leader is writing now (0 when no flush is in progress); counts
    /// against `buffer_bytes_max` together with `pending`.
    in_flight_bytes: usize,
    /// Whether a leader is flushing; at most one at a time.
    flushing: bool,
    /// Why the log is poisoned, once a flush failed.
    poisoned: Option<String>,
    /// The segment being appended to. Only the leader writes to it (outside the lock, on a
    /// clone of this), and updates it when it relocks.
    active: Active,
    /// Every segment of the log, oldest first; the last is the active one.
    segments: VecDeque<SegmentInfo>,
    /// Counters; `records_per_fsync_mean` and `segments_live` are filled in by `stats()`.
    stats: LogStats,
}

/// The transaction log. `Send + Sync`: share it by reference or `Arc` among committing
/// threads. See the module documentation for the protocol.
pub struct Log {
    /// The directory holding the segments.
    disk: Arc<dyn Disk>,
    /// Layout and bounds, fixed at open.
    opts: LogOptions,
    /// What open found and did, for callers that used [`Log::open`].
    report: OpenReport,
    /// Buffers, LSNs, the active segment and counters.
    state: Mutex<State>,
    /// Signalled after every flush (success or failure): wakes waiters for durability and
    /// appenders waiting for buffer space.
    flushed: Condvar,
    /// Serialises `truncate_before` calls so that two never delete the same segment.
    truncating: Mutex<()>,
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Log");
        d.field("disk", &self.disk).field("opts", &self.opts);
        if let Some(st) = self.state.try_lock() {
            d.field("next_lsn", &st.next_lsn)
                .field("durable_lsn", &st.durable_lsn)
                .field("active", &st.active.name)
                .field("poisoned", &st.poisoned);
        }
        d.finish()
    }
}

impl Log {
    /// Opens the log in `disk` (creating segment 1 if there is none), recovering as the module
    /// documentation describes, without reading older segments' records: memory stays within
    /// about two `read_chunk_bytes`. Read the records with [`Log::reader`].
    ///
    /// Fails with [`StorageError::Corrupt`] (naming the file and offset) for damage that no
    /// crash explains, and [`StorageError::UnsupportedFormat`] for a log of another version.
    pub fn open_streaming(
        disk: Arc<dyn Disk>,
        opts: LogOptions,
    ) -> Result<(Log, OpenReport), StorageError> {
        opts.validate()?;
        let rec = recovery::recover(&*disk, &opts)?;
        let next_lsn = rec.report.next_lsn;
        let state = State {
            next_lsn,
            durable_lsn: Lsn(next_lsn.0.saturating_sub(1)),
            pending: Vec::new(),
            shared: Vec::new(),
            shared_bytes: 0,
            pending_records: 0,
            spare: Vec::new(),
            in_flight_bytes: 0,
            flushing: false,
            poisoned: None,
            active: rec.active,
            segments: rec.segments.into(),
            stats: rec.stats,
        };
        let log = Log {
            disk,
            opts,
            report: rec.report.clone(),
            state: Mutex::new(state),
            flushed: Condvar::new(),
            truncating: Mutex::new(()),
        };
        Ok((log, rec.report))
    }

    /// Opens the log like [`Log::open_streaming`] and returns every intact record still in it,
    /// in LSN order, read and checked with a [`LogReader`]. Holds the whole log in memory:
    /// prefer `open_streaming` and a reader for anything but small logs.
    pub fn open(disk: Arc<dyn Disk>, opts: LogOptions) -> Result<(Log, Recovered), StorageError> {
        let (log, report) = Log::open_streaming(disk, opts)?;
        let mut records = Vec::new();
        let mut reader = log.reader(log.first_lsn())?;
        while let Some((lsn, payload)) = reader.next()? {
            records.push((lsn, payload.to_vec()));
        }
        log.state.lock().stats.records_recovered = records.len() as u64;
        let torn_bytes_cut = report.torn_tail.as_ref().map_or(0, |t| t.bytes);
        Ok((log, Recovered { records, next_lsn: report.next_lsn, torn_bytes_cut }))
    }

    /// What open found and did (a torn tail cut, a header rewritten, ...).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// A reader over the durable records with LSN ≥ `from`, as of now (see [`LogReader`]).
    /// `from` must lie in `first_lsn()..=next_lsn()`: records below `first_lsn()` were
    /// truncated, and asking for them is [`StorageError::InvalidArgument`], so that a caller
    /// replaying from a checkpoint learns when records it needs are gone.
    pub fn reader(&self, from: Lsn) -> Result<LogReader, StorageError> {
        let st = self.state.lock();
        let first = st.segments.front().map_or(st.next_lsn, |s| s.first_lsn);
        if from < first {
            return Err(StorageError::InvalidArgument(format!(
                "log reader from LSN {from}: records below LSN {first} are no longer in the log"
            )));
        }
        if from > st.next_lsn {
            return Err(StorageError::InvalidArgument(format!(
                "log reader from LSN {from}: not assigned yet (next is {})",
                st.next_lsn
            )));
        }
        // Start at the last segment whose first LSN is at most `from`.
        let start = st.segments.iter().rposition(|s| s.first_lsn <= from).unwrap_or(0);
        let segments: Vec<SegmentInfo> = st.segments.iter().skip(start).cloned().collect();
        Ok(LogReader::new(
            Arc::clone(&self.disk),
            segments,
            st.active.len,
            Lsn(st.durable_lsn.0 + 1),
            from,
            self.opts.record_bytes_max,
            self.opts.read_chunk_bytes,
        ))
    }

    /// A reader of the durable records from the newest to the oldest, as of now (see
    /// [`LogBackReader`]): what a restart that reads back to a checkpoint uses.
    pub fn backward_reader(&self) -> LogBackReader {
        let st = self.state.lock();
        LogBackReader::new(
            Arc::clone(&self.disk),
            st.segments.iter().cloned().collect(),
            st.active.len,
            Lsn(st.durable_lsn.0 + 1),
            self.opts.record_bytes_max,
            self.opts.read_chunk_bytes,
        )
    }

    /// The first LSN of the oldest segment: the lowest LSN the log may still hold (equal to
    /// `next_lsn()` when it holds none). Moves up as `truncate_before` deletes segments.
    pub fn first_lsn(&self) -> Lsn {
        let st = self.state.lock();
        st.segments.front().map_or(st.next_lsn, |s| s.first_lsn)
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.opts
    }

    /// Buffers a record and gives it the next LSN, without waiting for the disk (unless the
    /// buffer bound is hit: then it waits for, or performs, a flush). LSNs are assigned in call
    /// order, so a caller appending under its own lock gets LSN order equal to its own order.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, StorageError> {
        self.append_inner(payload, None)
    }

    /// [`Log::append`] of a record the caller holds in a shared buffer: one of at least
    /// [`SHARED_RECORD_BYTES_MIN`] bytes is kept by reference until its flush has written it,
    /// instead of being copied into the pending buffer. The same record on disk.
    pub fn append_shared(&self, payload: Bytes) -> Result<Lsn, StorageError> {
        if payload.len() < SHARED_RECORD_BYTES_MIN {
            return self.append_inner(&payload, None);
        }
        self.append_inner(&payload, Some(&payload))
    }

    /// `append`, keeping `shared` (the payload's own buffer) instead of copying it if given.
    fn append_inner(&self, payload: &[u8], shared: Option<&Bytes>) -> Result<Lsn, StorageError> {
        if payload.len() > self.opts.record_bytes_max {
            return Err(StorageError::RecordTooLarge {
                len: payload.len(),
                max: self.opts.record_bytes_max,
            });
        }
        let size = record::encoded_len(payload.len());
        let mut st = self.state.lock();
        let mut blocked = false;
        loop {
            if let Some(cause) = &st.poisoned {
                return Err(StorageError::Poisoned { cause: cause.clone() });
            }
            let unwritten = st.pending.len() + st.shared_bytes + st.in_flight_bytes;
            if unwritten == 0 || unwritten + size <= self.opts.buffer_bytes_max {
                break;
            }
            if !blocked {
                blocked = true;
                st.stats.appends_blocked += 1;
            }
            if st.flushing {
                self.flushed.wait(&mut st);
            } else {
                // Nobody is flushing and the buffer is full: waiting would deadlock a caller
                // that appends several records before waiting, so flush ourselves.
                st.stats.flushes_forced_by_append += 1;
                self.lead_flush(&mut st)?;
            }
        }
        let lsn = st.next_lsn;
        // u64::MAX is never assigned (recovery rejects it), so `lsn + 1` below cannot overflow.
        if lsn.0 == u64::MAX {
            return Err(StorageError::InvalidArgument("LSN space exhausted".to_string()));
        }
        let batch_index = st.pending_records;
        match shared {
            None => record::encode_into(lsn, batch_index, payload, &mut st.pending),
            Some(b) => {
                let header = record::header_of(lsn, batch_index, payload);
                st.pending.extend_from_slice(&header);
                let at = st.pending.len();
                st.shared.push((at, b.clone()));
                st.shared_bytes += b.len();
            }
        }
        // Below 2^32: see `State::pending_records`.
        st.pending_records += 1;
        st.next_lsn = Lsn(lsn.0 + 1);
        st.stats.records_appended += 1;
        st.stats.payload_bytes_appended += payload.len() as u64;
        Ok(lsn)
    }

    /// Returns once every record up to `lsn` is durable (written and fsynced), sharing one
    /// write and fsync with concurrent waiters (group commit; see the module documentation).
    /// `Lsn::ZERO` returns at once; an LSN not yet appended is an error.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), StorageError> {
        let mut st = self.state.lock();
        let mut led = false;
        loop {
            if let Some(cause) = &st.poisoned {
                return Err(StorageError::Poisoned { cause: cause.clone() });
            }
            if lsn <= st.durable_lsn {
                st.stats.durable_waits += 1;
                if !led {
                    st.stats.waits_joined += 1;
                }
                return Ok(());
            }
            if lsn >= st.next_lsn {
                return Err(StorageError::InvalidArgument(format!(
                    "wait_durable({lsn}): LSN not appended yet (next is {})",
                    st.next_lsn
                )));
            }
            if st.flushing {
                self.flushed.wait(&mut st);
            } else {
                // Our own flush covers `lsn` (everything not durable is pending when nobody is
                // flushing), so the next iteration returns.
                led = true;
                self.lead_flush(&mut st)?;
            }
        }
    }

    /// Makes every record appended so far durable.
    pub fn flush(&self) -> Result<(), StorageError> {
        let last = Lsn(self.next_lsn().0.saturating_sub(1));
        self.wait_durable(last)
    }

    /// Every record up to this LSN is durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.state.lock().durable_lsn
    }

    /// The LSN the next `append` will get.
    pub fn next_lsn(&self) -> Lsn {
        self.state.lock().next_lsn
    }

    /// What a copy of the log must hold to have every durable record and nothing else: each
    /// segment file, oldest first, with the bytes of it to copy. Every segment but the active
    /// one is complete and durable (module documentation), so all of it; the active one up to
    /// the end of its last fsynced batch (its `len` only moves once a flush's fsync succeeded,
    /// and a flush in progress writes after it). Appends after this call do not change those
    /// bytes; a concurrent [`Log::truncate_before`] can delete the oldest segments, so a caller
    /// that copies them holds truncation off (the server pauses checkpoints).
    pub fn durable_extent(&self) -> Result<LogExtent, StorageError> {
        let (durable_lsn, names, active_len) = {
            let st = self.state.lock();
            if let Some(cause) = &st.poisoned {
                return Err(StorageError::Poisoned { cause: cause.clone() });
            }
            let names: Vec<String> = st.segments.iter().map(|s| s.name.clone()).collect();
            debug_assert_eq!(names.last(), Some(&st.active.name), "the active segment is last");
            (st.durable_lsn, names, st.active.len)
        };
        let mut segments = Vec::with_capacity(names.len());
        let last = names.len().saturating_sub(1);
        for (i, name) in names.into_iter().enumerate() {
            let bytes = if i == last { active_len } else { self.disk.open(&name, false)?.len()? };
            segments.push((name, bytes));
        }
        Ok(LogExtent { durable_lsn, segments })
    }

    /// Whether a failed write or fsync has poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.state.lock().poisoned.is_some()
    }

    /// Makes everything appended durable, then starts a new, empty active segment at the next
    /// LSN, so that [`Log::truncate_before`] of that LSN can delete the whole history (it never
    /// deletes the active segment). Does nothing when the active segment holds no records (a
    /// segment without records must stay the last one: see `lead_flush`). A server calls this
    /// at a clean shutdown, once everything in the log is installed.
    pub fn rotate(&self) -> Result<(), StorageError> {
        self.flush()?;
        let mut st = self.state.lock();
        loop {
            if let Some(cause) = &st.poisoned {
                return Err(StorageError::Poisoned { cause: cause.clone() });
            }
            if st.flushing {
                self.flushed.wait(&mut st);
            } else if !st.pending.is_empty() {
                self.lead_flush(&mut st)?;
            } else {
                break;
            }
        }
        if st.active.len <= SEGMENT_HEADER_BYTES as u64 {
            return Ok(());
        }
        // Act as the flush leader, so that no append's flush writes to the old segment while
        // the new one is created outside the lock.
        st.flushing = true;
        let first = st.next_lsn;
        let created = MutexGuard::unlocked(&mut st, || {
            recovery::create_segment(&*self.disk, &self.opts.prefix, first)
        });
        st.flushing = false;
        self.flushed.notify_all();
        match created {
            Ok(active) => {
                st.segments.push_back(SegmentInfo { first_lsn: first, name: active.name.clone() });
                st.active = active;
                st.stats.segments_created += 1;
                st.stats.dir_syncs += 1;
                st.stats.fsyncs += 1;
                Ok(())
            }
            Err(e) => {
                let cause = e.to_string();
                st.poisoned = Some(cause.clone());
                Err(StorageError::Poisoned { cause })
            }
        }
    }

    /// Records with LSN < `lsn` are no longer needed: deletes, oldest first, every segment all
    /// of whose records are below `lsn`, syncing the directory after each. Never deletes the
    /// active segment. Records of a partly-needed segment stay (and are recovered by `open`).
    pub fn truncate_before(&self, lsn: Lsn) -> Result<(), StorageError> {
        let _serial = self.truncating.lock();
        loop {
            let victim = {
                let st = self.state.lock();
                if let Some(cause) = &st.poisoned {
                    return Err(StorageError::Poisoned { cause: cause.clone() });
                }
                // Segment 0's records all lie below segment 1's first LSN.
                match (st.segments.front(), st.segments.get(1)) {
                    (Some(oldest), Some(next)) if next.first_lsn <= lsn => oldest.name.clone(),
                    _ => return Ok(()),
                }
            };
            match self.disk.remove(&victim) {
                Ok(()) => {}
                // Already gone (a previous attempt removed it but failed to sync): fine.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            // Sync after each removal so that a crash never undoes an older removal while
            // keeping a newer one, which would leave a gap that recovery must call corruption.
            self.disk.sync_dir()?;
            let mut st = self.state.lock();
            // Only this function (serialised) removes from the front; rotation appends at the back.
            st.segments.pop_front();
            st.stats.segments_deleted += 1;
            st.stats.dir_syncs += 1;
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> LogStats {
        let st = self.state.lock();
        let mut s = st.stats;
        s.records_per_fsync_mean =
            if s.flushes == 0 { 0.0 } else { s.records_synced as f64 / s.flushes as f64 };
        s.segments_live = st.segments.len() as u64;
        s
    }

    /// Writes and fsyncs everything pending as the one leader. Called with the lock held, no
    /// flush in progress and something pending; returns with the lock held. On failure the log
    /// is poisoned and [`StorageError::Poisoned`] returned.
    fn lead_flush(&self, st: &mut MutexGuard<'_, State>) -> Result<(), StorageError> {
        debug_assert!(!st.flushing, "one leader at a time");
        debug_assert!(!st.pending.is_empty(), "a flush has something to write");
        st.flushing = true;
        let spare = std::mem::take(&mut st.spare);
        let batch = std::mem::replace(&mut st.pending, spare);
        let shared = std::mem::take(&mut st.shared);
        let shared_bytes = std::mem::take(&mut st.shared_bytes);
        st.pending_records = 0;
        st.in_flight_bytes = batch.len() + shared_bytes;
        let batch_first = Lsn(st.durable_lsn.0 + 1);
        let batch_last = Lsn(st.next_lsn.0 - 1);
        // Never rotate away from a segment without records: the reader would see the next
        // segment overlap it (both would claim the same first LSN).
        let rotate =
            st.active.len >= self.opts.segment_bytes && st.active.len > SEGMENT_HEADER_BYTES as u64;
        let mut target = st.active.clone();

        let result = MutexGuard::unlocked(st, || {
            self.write_batch(&mut target, rotate, batch_first, &batch, &shared)
        });
        drop(shared);

        st.flushing = false;
        st.in_flight_bytes = 0;
        // Wake everyone on success and failure alike: waiters must see the new durable LSN or
        // the poison, and blocked appenders the freed space.
        self.flushed.notify_all();
        match result {
            Ok(()) => {
                let records = batch_last.0 - st.durable_lsn.0;
                st.durable_lsn = batch_last;
                if rotate {
                    st.segments.push_back(SegmentInfo {
                        first_lsn: batch_first,
                        name: target.name.clone(),
                    });
                    st.stats.segments_created += 1;
                    st.stats.dir_syncs += 1;
                }
                st.active = target;
                let s = &mut st.stats;
                s.flushes += 1;
                // The batch's fsync, and the new segment header's.
                s.fsyncs += 1 + u64::from(rotate);
                s.bytes_written += (batch.len() + shared_bytes) as u64;
                s.records_synced += records;
                s.records_per_fsync_max = s.records_per_fsync_max.max(records);
                // Keep the batch's allocation as the next spare unless one huge batch made it
                // too big to be worth pinning.
                let mut batch = batch;
                if batch.capacity() <= BUFFER_KEEP_BYTES_MAX {
                    batch.clear();
                    st.spare = batch;
                }
                Ok(())
            }
            Err(e) => {
                let cause = e.to_string();
                st.poisoned = Some(cause.clone());
                Err(StorageError::Poisoned { cause })
            }
        }
    }

    /// The I/O of one flush, without the lock: rotate if asked, then one write (one per piece
    /// when `shared` payloads go between `batch`'s bytes) and one fsync.
    fn write_batch(
        &self,
        target: &mut Active,
        rotate: bool,
        first: Lsn,
        batch: &[u8],
        shared: &[(usize, Bytes)],
    ) -> Result<(), StorageError> {
        if rotate {
            // The old segment was fsynced by the flush that wrote its last bytes (or by open),
            // so it is complete before the new one exists; the new one's header is durable
            // before any record is written to it.
            *target = recovery::create_segment(&*self.disk, &self.opts.prefix, first)?;
        }
        let mut end = target.len;
        let mut from = 0;
        for (at, payload) in shared {
            for piece in [&batch[from..*at], &payload[..]] {
                if !piece.is_empty() {
                    target.file.write_at(end, piece)?;
                    end += piece.len() as u64;
                }
            }
            from = *at;
        }
        if from < batch.len() {
            target.file.write_at(end, &batch[from..])?;
            end += (batch.len() - from) as u64;
        }
        target.file.sync()?;
        target.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_are_valid() {
        LogOptions::default().validate().unwrap();
        assert_eq!(LogOptions::default().prefix, "log");
    }

    #[test]
    fn the_longest_prefix_leaves_room_for_torn_file_names() {
        let opts = LogOptions { prefix: "p".repeat(LOG_PREFIX_BYTES_MAX), ..LogOptions::default() };
        opts.validate().unwrap();
        let longer = LogOptions { prefix: "p".repeat(LOG_PREFIX_BYTES_MAX + 1), ..opts };
        assert!(longer.validate().is_err());
    }
}
