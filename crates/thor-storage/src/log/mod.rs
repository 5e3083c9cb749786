//! The transaction log: append-only, checksummed records in numbered segment files, made
//! durable by group commit.
//!
//! # Record layout
//!
//! Every record is a 16-byte header followed by its payload. All integers are little-endian.
//!
//! ```text
//!  0        4        8                16                 16 + len
//!  +--------+--------+----------------+--------- ... ----+
//!  |  len   | crc32c |      lsn       |     payload      |
//!  |  u32   |  u32   |      u64       |    len bytes     |
//!  +--------+--------+----------------+--------- ... ----+
//!                    \________ covered by crc32c ________/
//! ```
//!
//! - `len`: payload bytes, at most `LogOptions::record_bytes_max` (itself at most
//!   [`RECORD_BYTES_MAX_LIMIT`]).
//! - `crc32c`: CRC-32C (Castagnoli) of the 8 `lsn` bytes followed by the payload, computed
//!   incrementally. Covering the LSN means a stale record left in a reused or misnamed file is
//!   rejected even if its payload is intact; `len` is not covered but is checked by the
//!   checksum indirectly (a wrong length selects the wrong bytes).
//! - `lsn`: the record's log sequence number. LSNs start at 1 and increase by exactly 1 per
//!   record, across segments, forever.
//!
//! Records are packed back to back with no padding; a segment holds whole records only, except
//! for a torn tail after a crash. [`LOG_FORMAT_VERSION`] names this layout.
//!
//! # Segments
//!
//! The log is a sequence of files named `{prefix}.{first_lsn:016x}` (lowercase hex), where
//! `first_lsn` is the LSN of the segment's first record: `log.0000000000000001`,
//! `log.00000000000003e9`, ... A fresh log creates segment 1. Records are appended to the newest
//! (*active*) segment; once it holds at least `segment_bytes`, the next flush starts a new one.
//! Rotation order is what makes recovery's rules sound:
//!
//! 1. the old segment is fully fsynced (every flush ends with an fsync of what it wrote, and
//!    `open` fsyncs the segment it will append to), then
//! 2. the new file is created and the directory fsynced, then
//! 3. records are written to the new file and fsynced.
//!
//! So every segment but the newest is complete and durable, and a crash can damage only the
//! newest one's tail. [`Log::truncate_before`] deletes whole segments whose records are all
//! below the given LSN, oldest first, syncing the directory after each, so the surviving
//! segments are always a contiguous suffix; it never deletes the active segment, which is why
//! the next LSN survives even when everything has been truncated: it is derived from the
//! newest segment's name plus its intact records.
//!
//! # Recovery
//!
//! [`Log::open`] reads the segments in LSN order and checks each record (length bound, length
//! against the bytes left, CRC, LSN = previous + 1; see [`record::scan`]).
//!
//! - A bad record in the **newest** segment is a torn tail: an unfinished flush that no
//!   `wait_durable` reported durable. The file is cut at the last intact record (`set_len` +
//!   fsync) and the cut bytes are counted in `Recovered::torn_bytes_cut`. (Bit rot inside the
//!   newest segment cannot be told apart from a tear and is cut the same way.)
//! - A bad record in an **older** segment, or a segment whose name does not continue the
//!   previous segment's LSNs (a gap or an overlap), is corruption: those files were complete and
//!   durable before the next was created. `open` fails with [`StorageError::Corrupt`] naming
//!   the file and offset; nothing is skipped.
//!
//! `open` then fsyncs the active segment and the directory, so everything it returns is durable
//! even if the previous process died before its own fsync.
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
//! Waiters whose LSN the flush covered return; the rest elect the next leader. Meanwhile new
//! appends go to the fresh pending buffer, so appenders never wait for the disk unless the
//! buffer bound is hit. With `n` committers and fsync latency `t`, each fsync carries roughly
//! the records appended during the previous one: [`LogStats`] reports records per fsync.
//!
//! # Bounds
//!
//! - `buffer_bytes_max` bounds appended-but-unwritten bytes (pending + in flight). An append
//!   that would exceed it waits for the flush in progress, or, when none is, performs one
//!   itself. A single record larger than the bound is accepted once nothing else is unwritten
//!   and goes to disk alone.
//! - `record_bytes_max` rejects larger payloads with [`StorageError::RecordTooLarge`] before
//!   anything is buffered; recovery treats a longer length field as a bad record.
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

pub mod record;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, MutexGuard};
use thor_core::ids::Lsn;

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::{
    BUFFER_BYTES_MAX_DEFAULT, BUFFER_BYTES_MIN, BUFFER_KEEP_BYTES_MAX, LOG_PREFIX_BYTES_MAX,
    RECORD_BYTES_MAX_DEFAULT, RECORD_BYTES_MAX_LIMIT, SEGMENT_BYTES_DEFAULT,
};

/// The version of the record and segment layout described in the module documentation.
pub const LOG_FORMAT_VERSION: u32 = 1;

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
    /// [`BUFFER_BYTES_MIN`]. Default [`BUFFER_BYTES_MAX_DEFAULT`].
    pub buffer_bytes_max: usize,
    /// The largest payload `append` accepts, and the largest length recovery believes. At most
    /// [`RECORD_BYTES_MAX_LIMIT`]. Reopening with a smaller value than records were written
    /// with makes those records corrupt. Default [`RECORD_BYTES_MAX_DEFAULT`].
    pub record_bytes_max: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            prefix: "log".to_string(),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            buffer_bytes_max: BUFFER_BYTES_MAX_DEFAULT,
            record_bytes_max: RECORD_BYTES_MAX_DEFAULT,
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
        if self.segment_bytes == 0 {
            return bad("segment_bytes must be positive".to_string());
        }
        if self.buffer_bytes_max < BUFFER_BYTES_MIN {
            return bad(format!("buffer_bytes_max must be at least {BUFFER_BYTES_MIN}"));
        }
        if self.record_bytes_max > RECORD_BYTES_MAX_LIMIT {
            return bad(format!("record_bytes_max must be at most {RECORD_BYTES_MAX_LIMIT}"));
        }
        Ok(())
    }
}

/// What [`Log::open`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Every intact record still in the log, in LSN order (contiguous LSNs). Records below a
    /// `truncate_before` point may still be here: only whole segments are deleted.
    pub records: Vec<(Lsn, Vec<u8>)>,
    /// The LSN the next `append` will get.
    pub next_lsn: Lsn,
    /// Bytes of a torn tail cut off the newest segment (0 after a clean shutdown).
    pub torn_bytes_cut: u64,
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
    /// Fsyncs of segment files (flushes plus the one `open` does).
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
    /// Records recovered by `open`.
    pub records_recovered: u64,
    /// Bytes of torn tail cut by `open`.
    pub torn_bytes_cut: u64,
}

/// The segment being appended to.
#[derive(Debug, Clone)]
struct Active {
    /// Its file name.
    name: String,
    /// The open file.
    file: Arc<dyn DiskFile>,
    /// Bytes of whole records in it: where the next flush writes.
    len: u64,
}

/// A segment file of the log.
#[derive(Debug, Clone)]
struct SegmentInfo {
    /// The LSN of its first record (also encoded in its name).
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
    /// Encoded records not yet taken by a flush (LSNs after the in-flight batch's).
    pending: Vec<u8>,
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

/// The file name of the segment whose first record has LSN `first`.
pub fn segment_name(prefix: &str, first: Lsn) -> String {
    format!("{prefix}.{:016x}", first.0)
}

/// The first LSN encoded in `name` if it is a segment name of this prefix (exactly 16
/// lowercase hex digits after `{prefix}.`), else `None`.
pub fn parse_segment_name(prefix: &str, name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix(prefix)?.strip_prefix('.')?;
    if digits.len() != 16
        || !digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(digits, 16).ok().map(Lsn)
}

fn corrupt(what: &'static str, name: &str, offset: u64, why: String) -> StorageError {
    StorageError::Corrupt { what, name: name.to_string(), offset, why }
}

impl Log {
    /// Opens the log in `disk` (creating segment 1 if there is none) and returns every intact
    /// record still in it, in LSN order. See the module documentation for recovery.
    pub fn open(disk: Arc<dyn Disk>, opts: LogOptions) -> Result<(Log, Recovered), StorageError> {
        opts.validate()?;
        let mut stats = LogStats::default();
        let mut found: Vec<SegmentInfo> = disk
            .list()?
            .into_iter()
            .filter_map(|name| {
                parse_segment_name(&opts.prefix, &name)
                    .map(|first_lsn| SegmentInfo { first_lsn, name })
            })
            .collect();
        found.sort_by_key(|s| s.first_lsn);

        let mut records = Vec::new();
        let mut torn_bytes_cut = 0;
        let (active, next_lsn) = if found.is_empty() {
            let first = SegmentInfo { first_lsn: Lsn(1), name: segment_name(&opts.prefix, Lsn(1)) };
            let file = disk.open(&first.name, true)?;
            disk.sync_dir()?;
            stats.dir_syncs += 1;
            stats.segments_created += 1;
            let active = Active { name: first.name.clone(), file, len: 0 };
            found.push(first);
            (active, Lsn(1))
        } else {
            let mut expected: Option<Lsn> = None;
            let mut active = None;
            for (i, seg) in found.iter().enumerate() {
                if seg.first_lsn == Lsn::ZERO {
                    return Err(corrupt(
                        "log segment",
                        &seg.name,
                        0,
                        "segment named for LSN 0".to_string(),
                    ));
                }
                if let Some(exp) = expected
                    && exp != seg.first_lsn
                {
                    let why = format!(
                        "segment starts at LSN {} but the previous segment ends before LSN {exp} (missing or overlapping segment)",
                        seg.first_lsn
                    );
                    return Err(corrupt("log segment sequence", &seg.name, 0, why));
                }
                let newest = i + 1 == found.len();
                let file = disk.open(&seg.name, false)?;
                let file_len = file.len()?;
                let len = usize::try_from(file_len).map_err(|_| {
                    corrupt(
                        "log segment",
                        &seg.name,
                        0,
                        format!("{file_len} bytes do not fit in memory"),
                    )
                })?;
                let mut bytes = vec![0u8; len];
                file.read_exact_at(0, &mut bytes)?;
                let scan = record::scan(&bytes, seg.first_lsn, opts.record_bytes_max);
                if let Some((offset, defect)) = &scan.defect {
                    if !newest {
                        return Err(corrupt(
                            "log record",
                            &seg.name,
                            *offset as u64,
                            defect.to_string(),
                        ));
                    }
                    // A torn tail: nothing past the last intact record was ever acknowledged.
                    file.set_len(scan.intact_end as u64)?;
                    torn_bytes_cut = file_len - scan.intact_end as u64;
                }
                if newest {
                    // Make everything we are about to return durable, whoever wrote it.
                    file.sync()?;
                    stats.fsyncs += 1;
                }
                records.extend(
                    scan.records.iter().map(|(lsn, range)| (*lsn, bytes[range.clone()].to_vec())),
                );
                expected = Some(scan.next_lsn);
                if newest {
                    active =
                        Some(Active { name: seg.name.clone(), file, len: scan.intact_end as u64 });
                }
            }
            // The newest segment's directory entry may never have been synced.
            disk.sync_dir()?;
            stats.dir_syncs += 1;
            match (active, expected) {
                (Some(active), Some(next)) => (active, next),
                // `found` is non-empty, so the loop ran and set both.
                _ => {
                    return Err(StorageError::InvalidArgument(
                        "log open: no segment scanned".to_string(),
                    ));
                }
            }
        };
        stats.records_recovered = records.len() as u64;
        stats.torn_bytes_cut = torn_bytes_cut;
        let state = State {
            next_lsn,
            durable_lsn: Lsn(next_lsn.0.saturating_sub(1)),
            pending: Vec::new(),
            spare: Vec::new(),
            in_flight_bytes: 0,
            flushing: false,
            poisoned: None,
            active,
            segments: found.into(),
            stats,
        };
        let log = Log {
            disk,
            opts,
            state: Mutex::new(state),
            flushed: Condvar::new(),
            truncating: Mutex::new(()),
        };
        Ok((log, Recovered { records, next_lsn, torn_bytes_cut }))
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.opts
    }

    /// Buffers a record and gives it the next LSN, without waiting for the disk (unless the
    /// buffer bound is hit: then it waits for, or performs, a flush). LSNs are assigned in call
    /// order, so a caller appending under its own lock gets LSN order equal to its own order.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, StorageError> {
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
            let unwritten = st.pending.len() + st.in_flight_bytes;
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
        record::encode_into(lsn, payload, &mut st.pending);
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

    /// Whether a failed write or fsync has poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.state.lock().poisoned.is_some()
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
        st.in_flight_bytes = batch.len();
        let batch_first = Lsn(st.durable_lsn.0 + 1);
        let batch_last = Lsn(st.next_lsn.0 - 1);
        let rotate = st.active.len >= self.opts.segment_bytes;
        let mut target = st.active.clone();

        let result =
            MutexGuard::unlocked(st, || self.write_batch(&mut target, rotate, batch_first, &batch));

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
                s.fsyncs += 1;
                s.bytes_written += batch.len() as u64;
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

    /// The I/O of one flush, without the lock: rotate if asked, then one write and one fsync.
    fn write_batch(
        &self,
        target: &mut Active,
        rotate: bool,
        first: Lsn,
        batch: &[u8],
    ) -> Result<(), StorageError> {
        if rotate {
            // The old segment was fsynced by the flush that wrote its last bytes (or by open),
            // so it is complete before the new one exists.
            let name = segment_name(&self.opts.prefix, first);
            let file = self.disk.open(&name, true)?;
            if !file.is_empty()? {
                // Recovery listed every segment, so a non-empty file with the new name is not
                // ours to overwrite.
                return Err(corrupt(
                    "log segment",
                    &name,
                    0,
                    "new segment file already has contents".to_string(),
                ));
            }
            self.disk.sync_dir()?;
            *target = Active { name, file, len: 0 };
        }
        target.file.write_at(target.len, batch)?;
        target.file.sync()?;
        target.len += batch.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_roundtrip_and_reject_lookalikes() {
        assert_eq!(segment_name("log", Lsn(1)), "log.0000000000000001");
        assert_eq!(segment_name("log", Lsn(0x3e9)), "log.00000000000003e9");
        for lsn in [1, 0x3e9, u64::MAX - 1] {
            assert_eq!(parse_segment_name("log", &segment_name("log", Lsn(lsn))), Some(Lsn(lsn)));
        }
        for other in [
            "log",
            "log.",
            "log.1",
            "log.00000000000003E9",
            "log.00000000000003e9.tmp",
            "logx.0000000000000001",
            "xlog.0000000000000001",
            "log.+000000000000001",
        ] {
            assert_eq!(parse_segment_name("log", other), None, "{other}");
        }
        // A prefix with a dot in it still parses exactly.
        assert_eq!(parse_segment_name("a.b", "a.b.0000000000000002"), Some(Lsn(2)));
    }

    #[test]
    fn default_options_are_valid() {
        LogOptions::default().validate().unwrap();
        assert_eq!(LogOptions::default().prefix, "log");
    }
}
