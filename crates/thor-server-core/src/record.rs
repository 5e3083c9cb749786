//! The commit record: what the engine writes to the transaction log for one commit.
//!
//! The log (thor-storage) frames each record with its length, CRC-32C and LSN; this is the
//! payload inside. It holds the final bytes of every object the commit wrote, with references to
//! objects the commit created already replaced by their allocated orefs, so that replaying it
//! needs nothing but the record; and the transaction's timestamp and read set, so that recovery
//! can restore the validation queue (concurrency control).
//!
//! ```text
//! 0     1     2         4          8              16           20          24
//! +-----+-----+---------+----------+--------------+------------+-----------+----------------+
//! |kind | 0   | 0 (u16) | count u32| ts time u64  | ts srv u32 | reads u32 | reads × oref   |
//! +-----+-----+---------+----------+--------------+------------+-----------+----------------+
//! then count × object:
//!         oref u32 | len u16 | flags u16 | len bytes (the object, a multiple of 4)
//!         flags bit 0: created by this commit
//! ```
//!
//! Every oref of a record, in its read set and its objects, names a stored object: spare bit
//! clear, page id in `1..=PAGE_ID_MAX` (`thor_core::Oref::object`). That is the definition the
//! wire decoder admits and the core validates with, so a record the core builds from an
//! acknowledged commit always decodes here.
//!
//! Kind 2 is this layout. Kind 1 (written before concurrency control existed) has no
//! timestamp, read count or reads: its objects follow the first 8 bytes. Both decode; only
//! kind 2 is written.
//!
//! A kind-2 record may carry the commit's id, which its client chose (wire version 5's
//! `CommitWithId`), so that the client can learn the commit's outcome after its connection
//! broke, even across a server restart (`core::resume`): byte 1 is then [`FLAG_COMMIT_ID`]
//! and the record ends with the id (u64, not 0) after the objects. Builds before this
//! addition refuse such a record ("unknown kind"); a database closed cleanly has none left
//! in its log (the close truncates it).
//!
//! Two-phase commit (a transaction over several servers, `core::twopc`) adds three kinds:
//!
//! ```text
//! kind 3, prepared: kind 2's layout (the timestamp is the client's stamp), then
//!         coordinator u32 | P u16 | P × ( server u32 | writes u8 )
//!         the part of a transaction prepared here, not yet decided: its created objects are
//!         allocated (and published at once, unreachable until the commit), its versions are
//!         held until a decision record
//! kind 4, decision:  4 | flags u8 | 0 u16 | P u32 | time u64 | tie u32 | P × server u32
//!         flags bit 0: commit (else abort); bit 1: written by the coordinator, with the
//!         writing participants it must tell (P of them); a participant's has P = 0
//! kind 5, end:       5 | 0 | 0 u16 | 0 u32 | time u64 | tie u32
//!         the coordinator: every participant acknowledged the decision; forget it
//! ```

use thor_core::limits::{OBJECT_ALIGN, OBJECT_HEADER_BYTES};
use thor_core::{NotAnObject, Oref, ServerId, le};

/// A committed transaction without a concurrency-control section (old databases).
pub const KIND_COMMIT_V1: u8 = 1;
/// A committed transaction with its timestamp and read set.
pub const KIND_COMMIT: u8 = 2;
/// A transaction's part prepared here by two-phase commit, not yet decided.
pub const KIND_PREPARE: u8 = 3;
/// The decision on a prepared transaction.
pub const KIND_DECIDE: u8 = 4;
/// A coordinator's note that every participant applied its decision.
pub const KIND_END: u8 = 5;

/// The lowest kind a commit path's own records may have (`CommitPath::replay` gets them): no
/// kind of this module is at or above it, so records of a path (thor-study's whole-page
/// logging uses 6 to 8) share the log with the store's.
pub const FIRST_PATH_KIND: u8 = 6;
const _: () = assert!(KIND_END < FIRST_PATH_KIND && KIND_COMMIT_V1 > 0);
/// Byte 1 of a kind-2 record: the record ends with the commit's id.
pub const FLAG_COMMIT_ID: u8 = 1;
/// Bytes of a commit id at the end of a record.
pub const COMMIT_ID_BYTES: usize = 8;
const DECIDE_COMMIT: u8 = 1;
const DECIDE_COORDINATOR: u8 = 2;
/// Most participants a prepare or decision record lists (`thor_wire::limits::PARTICIPANTS_MAX`).
const PARTICIPANTS_MAX: usize = thor_wire::limits::PARTICIPANTS_MAX;
const HEADER_BYTES: usize = 8;
/// Timestamp (12 bytes) and read count (4).
const CC_BYTES: usize = 16;
const OBJECT_PREFIX_BYTES: usize = 8;
const FLAG_CREATED: u16 = 1;

/// One object of a commit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordObject<'a> {
    /// Which object.
    pub oref: Oref,
    /// Whether the commit created it.
    pub created: bool,
    /// Its new bytes.
    pub data: &'a [u8],
}

/// The concurrency-control section of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordCc<'a> {
    /// The transaction's timestamp: clock microseconds (0 in kind-1 records).
    pub ts_us: u64,
    /// The timestamp's server id.
    pub ts_server: u32,
    /// The id the client gave the commit (kind 2 with [`FLAG_COMMIT_ID`]), if any.
    pub id: Option<u64>,
    /// The read set, 4 bytes per oref (checked by `decode`).
    reads: &'a [u8],
}

impl<'a> RecordCc<'a> {
    /// The section of a transaction at `(ts_us, ts_server)` that read nothing.
    pub const fn without_reads(ts_us: u64, ts_server: u32) -> RecordCc<'static> {
        RecordCc { ts_us, ts_server, id: None, reads: &[] }
    }

    /// The read set.
    pub fn reads(&self) -> impl ExactSizeIterator<Item = Oref> + 'a {
        self.reads.chunks_exact(4).map(|w| Oref::object(le::u32_at(w, 0)).expect("checked"))
    }
}

/// Appends the record of a commit at `(ts_us, ts_server)` that read `reads` and writes
/// `objects` to `out`.
pub fn encode<'a>(
    ts: (u64, u32),
    reads: &[Oref],
    objects: impl ExactSizeIterator<Item = RecordObject<'a>>,
    out: &mut Vec<u8>,
) {
    let mut b = RecordBuilder::with_capacity(0, ts, reads);
    for o in objects {
        b.push(o.oref, o.created, o.data);
    }
    out.extend_from_slice(&b.finish());
}

/// The two-phase section of a prepare record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrepareSection {
    /// The coordinator.
    pub coordinator: ServerId,
    /// Every participant and whether it writes.
    pub participants: Vec<(ServerId, bool)>,
}

impl PrepareSection {
    /// Bytes it adds to a record.
    pub fn encoded_len(&self) -> usize {
        6 + 5 * self.participants.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.coordinator.0.to_le_bytes());
        out.extend_from_slice(&(self.participants.len() as u16).to_le_bytes());
        for (s, w) in &self.participants {
            out.extend_from_slice(&s.0.to_le_bytes());
            out.push(u8::from(*w));
        }
    }
}

/// A decision record's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The transaction's stamp (time, tie).
    pub ts: (u64, u32),
    /// Commit or abort.
    pub commit: bool,
    /// Written by the coordinator (then `tell` lists the writing participants to inform).
    pub coordinator: bool,
    /// The participants the coordinator must tell.
    pub tell: Vec<ServerId>,
}

/// The record of a decision.
pub fn encode_decision(d: &Decision) -> Vec<u8> {
    let flags = (if d.commit { DECIDE_COMMIT } else { 0 })
        | (if d.coordinator { DECIDE_COORDINATOR } else { 0 });
    let mut out = Vec::with_capacity(HEADER_BYTES + 12 + 4 * d.tell.len());
    out.extend_from_slice(&[KIND_DECIDE, flags, 0, 0]);
    out.extend_from_slice(&(d.tell.len() as u32).to_le_bytes());
    out.extend_from_slice(&d.ts.0.to_le_bytes());
    out.extend_from_slice(&d.ts.1.to_le_bytes());
    for s in &d.tell {
        out.extend_from_slice(&s.0.to_le_bytes());
    }
    out
}

/// The record of a coordinator's end of a transaction.
pub fn encode_end(ts: (u64, u32)) -> Vec<u8> {
    let mut out = vec![KIND_END, 0, 0, 0, 0, 0, 0, 0];
    out.extend_from_slice(&ts.0.to_le_bytes());
    out.extend_from_slice(&ts.1.to_le_bytes());
    out
}

/// Any record, decoded (see [`decode_any`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// A commit (kinds 1 and 2).
    Commit(RecordCc<'a>),
    /// A prepared part of a transaction over several servers (kind 3).
    Prepare(RecordCc<'a>, PrepareSection),
    /// A decision (kind 4).
    Decide(Decision),
    /// A coordinator is done with a transaction (kind 5).
    End((u64, u32)),
}

/// Decodes a record of any kind, checking every field; calls `f` for each object of a commit
/// or prepare record, in order.
pub fn decode_any<'a>(
    rec: &'a [u8],
    f: impl FnMut(RecordObject<'a>),
) -> Result<Record<'a>, RecordError> {
    match rec.first() {
        Some(&KIND_DECIDE) => {
            if rec.len() < HEADER_BYTES + 12 {
                return Err(RecordError("decision shorter than its header"));
            }
            let flags = rec[1];
            if flags & !(DECIDE_COMMIT | DECIDE_COORDINATOR) != 0 || rec[2..4] != [0, 0] {
                return Err(RecordError("unknown decision flags"));
            }
            let n = le::u32_at(rec, 4) as usize;
            let body = &rec[HEADER_BYTES + 12..];
            if n > PARTICIPANTS_MAX || body.len() != 4 * n {
                return Err(RecordError("decision participant count"));
            }
            Ok(Record::Decide(Decision {
                ts: (le::u64_at(rec, HEADER_BYTES), le::u32_at(rec, HEADER_BYTES + 8)),
                commit: flags & DECIDE_COMMIT != 0,
                coordinator: flags & DECIDE_COORDINATOR != 0,
                tell: body.chunks_exact(4).map(|w| ServerId(le::u32_at(w, 0))).collect(),
            }))
        }
        Some(&KIND_END) => {
            if rec.len() != HEADER_BYTES + 12 || rec[1..8].iter().any(|&b| b != 0) {
                return Err(RecordError("end record layout"));
            }
            Ok(Record::End((le::u64_at(rec, HEADER_BYTES), le::u32_at(rec, HEADER_BYTES + 8))))
        }
        Some(&KIND_PREPARE) => {
            let (cc, pos) = decode_objects(rec, f)?;
            Ok(Record::Prepare(cc, prepare_section(&rec[pos..])?))
        }
        _ => {
            let (mut cc, mut pos) = decode_objects(rec, f)?;
            if rec[0] == KIND_COMMIT && rec[1] == FLAG_COMMIT_ID {
                if rec.len() - pos != COMMIT_ID_BYTES {
                    return Err(RecordError("commit id"));
                }
                match le::u64_at(rec, pos) {
                    0 => return Err(RecordError("commit id 0")),
                    id => cc.id = Some(id),
                }
                pos += COMMIT_ID_BYTES;
            }
            if pos != rec.len() {
                return Err(RecordError("trailing bytes"));
            }
            Ok(Record::Commit(cc))
        }
    }
}

/// Bytes of a record that read `reads` objects and holds `objects` objects with `data_bytes`
/// bytes of object data in all.
pub const fn encoded_len(reads: usize, objects: usize, data_bytes: usize) -> usize {
    HEADER_BYTES + CC_BYTES + reads * 4 + objects * OBJECT_PREFIX_BYTES + data_bytes
}

/// Builds a commit record in one buffer, object by object, so that a commit's objects are
/// copied exactly once on their way from the request to the log: the caller copies each object
/// straight into the record and patches it there ([`RecordBuilder::push`] returns where its
/// bytes landed), and the finished buffer is shared by the log append and the MOB.
#[derive(Debug)]
pub struct RecordBuilder {
    /// The record so far; the object count in the header is written by `finish`.
    buf: Vec<u8>,
    /// Objects pushed.
    count: u32,
    /// The commit's id, written at the end by `finish` ([`FLAG_COMMIT_ID`]).
    id: Option<u64>,
}

impl RecordBuilder {
    /// A builder for the record of a transaction at `ts` (clock microseconds, server id) that
    /// read `reads`, whose buffer is allocated once for `capacity` record bytes (see
    /// [`encoded_len`]).
    pub fn with_capacity(capacity: usize, ts: (u64, u32), reads: &[Oref]) -> RecordBuilder {
        let mut buf = Vec::with_capacity(capacity.max(HEADER_BYTES + CC_BYTES + reads.len() * 4));
        buf.push(KIND_COMMIT);
        buf.extend_from_slice(&[0; HEADER_BYTES - 1]);
        buf.extend_from_slice(&ts.0.to_le_bytes());
        buf.extend_from_slice(&ts.1.to_le_bytes());
        buf.extend_from_slice(&(reads.len() as u32).to_le_bytes());
        // The read set in one pass over a zeroed run of the buffer: a commit may have read
        // 500,000 objects, and a capacity check per oref cost more than its copy.
        let start = buf.len();
        buf.resize(start + 4 * reads.len(), 0);
        for (w, r) in buf[start..].chunks_exact_mut(4).zip(reads) {
            w.copy_from_slice(&r.raw().to_le_bytes());
        }
        RecordBuilder { buf, count: 0, id: None }
    }

    /// Makes the record carry the commit's id (not 0; kind 2 only: a prepared part's outcome
    /// is its transaction's, which its stamp names).
    pub fn with_id(mut self, id: u64) -> RecordBuilder {
        debug_assert_ne!(id, 0, "commit ids are not 0");
        self.id = Some(id);
        self
    }

    /// Appends an object; returns the range of its bytes in the record, to patch them in place
    /// with [`RecordBuilder::bytes_mut`].
    pub fn push(&mut self, oref: Oref, created: bool, data: &[u8]) -> std::ops::Range<usize> {
        debug_assert!(data.len() <= u16::MAX as usize, "objects fit in a page");
        let mut prefix = [0u8; OBJECT_PREFIX_BYTES];
        prefix[..4].copy_from_slice(&oref.raw().to_le_bytes());
        prefix[4..6].copy_from_slice(&(data.len() as u16).to_le_bytes());
        prefix[6..].copy_from_slice(&(if created { FLAG_CREATED } else { 0 }).to_le_bytes());
        self.buf.reserve(OBJECT_PREFIX_BYTES + data.len());
        self.buf.extend_from_slice(&prefix);
        let start = self.buf.len();
        self.buf.extend_from_slice(data);
        self.count += 1;
        start..self.buf.len()
    }

    /// The record's bytes in `range` (as returned by `push`), to patch.
    pub fn bytes_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.buf[range]
    }

    /// The finished record.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf[4..8].copy_from_slice(&self.count.to_le_bytes());
        if let Some(id) = self.id {
            self.buf[1] = FLAG_COMMIT_ID;
            self.buf.extend_from_slice(&id.to_le_bytes());
        }
        self.buf
    }

    /// The finished record of a prepared part (kind 3): the same layout with the two-phase
    /// section after the objects.
    pub fn finish_prepared(mut self, section: &PrepareSection) -> Vec<u8> {
        self.buf[0] = KIND_PREPARE;
        self.id = None;
        section.put(&mut self.buf);
        self.finish()
    }
}

/// Why a record could not be decoded. The log's CRC makes this mean a bug or a format from
/// another version, never a torn write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed commit record: {0}")]
pub struct RecordError(pub &'static str);

/// Decodes a commit record (kinds 1 and 2), checking every field, calls `f` for each object in
/// order, and returns the concurrency-control section. Other kinds are refused; see
/// [`decode_any`].
pub fn decode<'a>(
    rec: &'a [u8],
    f: impl FnMut(RecordObject<'a>),
) -> Result<RecordCc<'a>, RecordError> {
    if !matches!(rec.first(), Some(&(KIND_COMMIT | KIND_COMMIT_V1))) {
        return Err(RecordError("unknown kind"));
    }
    match decode_any(rec, f)? {
        Record::Commit(cc) => Ok(cc),
        _ => unreachable!("kinds 1 and 2 decode as commits"),
    }
}

/// Decodes the header, the concurrency-control section and the objects of a record of kind 1,
/// 2 or 3; returns the section and where the objects end.
fn decode_objects<'a>(
    rec: &'a [u8],
    mut f: impl FnMut(RecordObject<'a>),
) -> Result<(RecordCc<'a>, usize), RecordError> {
    if rec.len() < HEADER_BYTES {
        return Err(RecordError("shorter than its header"));
    }
    let flags_ok = rec[1] == 0 || (rec[0] == KIND_COMMIT && rec[1] == FLAG_COMMIT_ID);
    if !matches!(rec[0], KIND_COMMIT | KIND_COMMIT_V1 | KIND_PREPARE)
        || !flags_ok
        || rec[2..4] != [0, 0]
    {
        return Err(RecordError("unknown kind"));
    }
    let mut cc = RecordCc::without_reads(0, 0);
    let mut pos = HEADER_BYTES;
    if rec[0] != KIND_COMMIT_V1 {
        if rec.len() - pos < CC_BYTES {
            return Err(RecordError("timestamp runs past the end"));
        }
        cc.ts_us = le::u64_at(rec, pos);
        cc.ts_server = le::u32_at(rec, pos + 8);
        let n = le::u32_at(rec, pos + 12) as usize;
        pos += CC_BYTES;
        if (rec.len() - pos) / 4 < n {
            return Err(RecordError("read set runs past the end"));
        }
        let reads = &rec[pos..pos + 4 * n];
        for w in reads.chunks_exact(4) {
            Oref::object(le::u32_at(w, 0)).map_err(|e| RecordError(in_reads(e)))?;
        }
        cc.reads = reads;
        pos += 4 * n;
    }
    let count = le::u32_at(rec, 4) as usize;
    for _ in 0..count {
        if rec.len() - pos < OBJECT_PREFIX_BYTES {
            return Err(RecordError("object prefix runs past the end"));
        }
        let oref = Oref::object(le::u32_at(rec, pos)).map_err(|e| RecordError(e.why()))?;
        let len = le::u16_at(rec, pos + 4) as usize;
        let flags = le::u16_at(rec, pos + 6);
        if flags & !FLAG_CREATED != 0 {
            return Err(RecordError("unknown flags"));
        }
        if len < OBJECT_HEADER_BYTES || !len.is_multiple_of(OBJECT_ALIGN) {
            return Err(RecordError("object length"));
        }
        pos += OBJECT_PREFIX_BYTES;
        if rec.len() - pos < len {
            return Err(RecordError("object runs past the end"));
        }
        f(RecordObject { oref, created: flags & FLAG_CREATED != 0, data: &rec[pos..pos + len] });
        pos += len;
    }
    Ok((cc, pos))
}

/// What [`salvage`] made of a record that does not decode: the record to put in its place,
/// which decodes, and what was left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// The record to write in place of the bad one, under the same LSN: it decodes
    /// ([`decode_any`]).
    pub record: Vec<u8>,
    /// What the record held that the new one does not, one line each, for the report.
    pub dropped: Vec<String>,
    /// Whether only read-set words were left out. The read set feeds nothing but concurrency
    /// control's validation queue after a restart, so nothing committed is lost, and no later
    /// record can depend on it.
    pub lossless: bool,
    /// Objects the record created that were left out (their orefs could be read): later
    /// records may refer to them.
    pub dropped_created: Vec<Oref>,
}

/// The record that changes nothing: a commit (kind 2) at timestamp 0 that read and wrote
/// nothing. What [`salvage`] puts in place of a record of which nothing can be kept.
pub fn empty_commit() -> Vec<u8> {
    RecordBuilder::with_capacity(0, (0, 0), &[]).finish()
}

/// Makes a record that decodes out of `rec`, one that does not (recovery and `thor check`
/// refuse it), keeping everything of it that is well formed (`thor check --repair`):
///
/// - a commit (kinds 1 and 2) or a prepared part (kind 3) keeps its timestamp, the read-set
///   words that name objects, and every object whose prefix and bytes are well formed and
///   whose oref names an object; from the first object whose prefix or length cannot be read
///   on, the rest of the record is left out (where the next object starts is then unknown);
/// - a prepared part whose two-phase section does not decode is left out whole (its versions
///   could not be held for a decision it cannot be matched with): an empty commit takes its
///   place, and the transaction's outcome is asked for as for a part never prepared;
/// - a record of any other kind (a decision or end that does not decode, an unknown kind, a
///   whole-page-logging record) becomes an empty commit ([`empty_commit`]).
///
/// A record that decodes is returned unchanged with nothing dropped.
pub fn salvage(rec: &[u8]) -> Salvaged {
    if decode_any(rec, |_| {}).is_ok() {
        return Salvaged {
            record: rec.to_vec(),
            dropped: Vec::new(),
            lossless: true,
            dropped_created: Vec::new(),
        };
    }
    let whole = |why: String| Salvaged {
        record: empty_commit(),
        dropped: vec![why],
        lossless: false,
        dropped_created: Vec::new(),
    };
    let kind = rec.first().copied();
    if rec.len() < HEADER_BYTES
        || !matches!(kind, Some(KIND_COMMIT | KIND_COMMIT_V1 | KIND_PREPARE))
        || rec[1..4] != [0, 0, 0]
    {
        return whole(format!(
            "the whole record ({} bytes{}): its kind or header cannot be read",
            rec.len(),
            kind.map_or(String::new(), |k| format!(", kind {k}"))
        ));
    }
    let mut f =
        Found { dropped: Vec::new(), lossless: true, dropped_created: Vec::new(), framed: true };
    let (ts, reads, pos) = if rec[0] != KIND_COMMIT_V1 {
        match salvage_reads(rec, &mut f) {
            Some(r) => r,
            None => {
                return whole(format!(
                    "the whole record ({} bytes): its timestamp is cut off",
                    rec.len()
                ));
            }
        }
    } else {
        ((0, 0), Vec::new(), HEADER_BYTES)
    };
    let count = le::u32_at(rec, 4) as usize;
    let (objects, pos) = salvage_objects(rec, pos, count, &mut f);
    let Found { mut dropped, mut lossless, dropped_created, framed } = f;
    let mut b = RecordBuilder::with_capacity(0, ts, &reads);
    for (o, created, data) in &objects {
        b.push(*o, *created, data);
    }
    let record = if rec[0] == KIND_PREPARE {
        let section = if framed { prepare_section(&rec[pos..]).ok() } else { None };
        match section {
            Some(s) => b.finish_prepared(&s),
            None => {
                return whole(format!(
                    "the whole prepared part ({} bytes, {count} objects): its two-phase section \
                     cannot be read",
                    rec.len()
                ));
            }
        }
    } else {
        if framed && pos != rec.len() {
            dropped.push(format!("{} bytes after the last object", rec.len() - pos));
            lossless = false;
        }
        b.finish()
    };
    debug_assert!(decode_any(&record, |_| {}).is_ok(), "a salvaged record decodes");
    Salvaged { record, dropped, lossless, dropped_created }
}

/// An object [`salvage`] keeps: its oref, whether it was created, its bytes.
type SalvagedObject<'a> = (Oref, bool, &'a [u8]);

/// What [`salvage`] has found so far: what it dropped, whether nothing was lost, the orefs of
/// created objects it could not keep, and whether the objects can still be framed.
struct Found {
    dropped: Vec<String>,
    lossless: bool,
    dropped_created: Vec<Oref>,
    framed: bool,
}

/// The timestamp and the readable read set of a (non-V1) commit or prepare record, and where
/// its objects start; `None` when the timestamp is cut off.
fn salvage_reads(rec: &[u8], f: &mut Found) -> Option<((u64, u32), Vec<Oref>, usize)> {
    let mut pos = HEADER_BYTES;
    if rec.len() - pos < CC_BYTES {
        return None;
    }
    let ts = (le::u64_at(rec, pos), le::u32_at(rec, pos + 8));
    let n = le::u32_at(rec, pos + 12) as usize;
    pos += CC_BYTES;
    let present = ((rec.len() - pos) / 4).min(n);
    let mut reads = Vec::with_capacity(present);
    for i in 0..present {
        let w = le::u32_at(rec, pos + 4 * i);
        match Oref::object(w) {
            Ok(o) => reads.push(o),
            Err(e) => f.dropped.push(format!("read-set word {i} ({w:#010x}): {e}")),
        }
    }
    if present < n {
        f.dropped.push(format!(
            "the read set claims {n} words, the record holds {present}: the objects after it \
             cannot be found"
        ));
        f.lossless = false;
        f.framed = false;
    }
    Some((ts, reads, pos + 4 * present))
}

/// The well-formed objects of a record from `pos` (`count` claimed), and where they end;
/// stops at the first that cannot be framed.
fn salvage_objects<'a>(
    rec: &'a [u8],
    mut pos: usize,
    count: usize,
    f: &mut Found,
) -> (Vec<SalvagedObject<'a>>, usize) {
    let mut objects: Vec<(Oref, bool, &[u8])> = Vec::new();
    for i in 0..count {
        if !f.framed {
            break;
        }
        let bad_frame = |why: &str| {
            format!(
                "objects {i} to {} of {count} ({} bytes from byte {pos}): {why}",
                count - 1,
                rec.len() - pos
            )
        };
        if rec.len() - pos < OBJECT_PREFIX_BYTES {
            f.dropped.push(bad_frame("the prefix of the first is cut off"));
            f.lossless = false;
            f.framed = false;
            break;
        }
        let w = le::u32_at(rec, pos);
        let len = le::u16_at(rec, pos + 4) as usize;
        let flags = le::u16_at(rec, pos + 6);
        let bad = if flags & !FLAG_CREATED != 0 {
            Some("the first has unknown flags")
        } else if len < OBJECT_HEADER_BYTES || !len.is_multiple_of(OBJECT_ALIGN) {
            Some("the first has a length that is no object's")
        } else if rec.len() - pos - OBJECT_PREFIX_BYTES < len {
            Some("the first runs past the end")
        } else {
            None
        };
        if let Some(why) = bad {
            f.dropped.push(bad_frame(why));
            if flags & FLAG_CREATED != 0 {
                f.dropped_created.extend(Oref::object(w));
            }
            f.lossless = false;
            f.framed = false;
            break;
        }
        let data = &rec[pos + OBJECT_PREFIX_BYTES..pos + OBJECT_PREFIX_BYTES + len];
        let created = flags & FLAG_CREATED != 0;
        match Oref::object(w) {
            Ok(o) => objects.push((o, created, data)),
            Err(e) => {
                f.dropped.push(format!("object {i} ({w:#010x}, {len} bytes): {e}"));
                f.lossless = false;
            }
        }
        pos += OBJECT_PREFIX_BYTES + len;
    }
    (objects, pos)
}

/// A prepare record's two-phase section (`rest`, what follows its objects), checked.
fn prepare_section(rest: &[u8]) -> Result<PrepareSection, RecordError> {
    if rest.len() < 6 {
        return Err(RecordError("prepare section runs past the end"));
    }
    let coordinator = ServerId(le::u32_at(rest, 0));
    let n = le::u16_at(rest, 4) as usize;
    if n > PARTICIPANTS_MAX || rest.len() != 6 + 5 * n {
        return Err(RecordError("prepare participant count"));
    }
    let mut participants = Vec::with_capacity(n);
    for p in rest[6..].chunks_exact(5) {
        let writes = match p[4] {
            0 => false,
            1 => true,
            _ => return Err(RecordError("participant writes flag")),
        };
        participants.push((ServerId(le::u32_at(p, 0)), writes));
    }
    Ok(PrepareSection { coordinator, participants })
}

/// Why a read-set word of a record names no object (the same words the wire and the core
/// refuse: [`Oref::object`]).
const fn in_reads(e: NotAnObject) -> &'static str {
    match e {
        NotAnObject::Null => "null oref in reads",
        NotAnObject::Tagged => "tagged oref in reads",
        NotAnObject::PageZero => "oref on page 0 in reads",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use thor_core::{Oid, PageId};

    #[test]
    fn a_commit_id_rides_at_the_end_and_nothing_else_may() {
        let reads = [Oref::new(PageId::new(7).unwrap(), Oid::new(1).unwrap())];
        let data = [1u8, 0, 0, 0, 9, 9, 9, 9];
        let mut b = RecordBuilder::with_capacity(0, (1234, 5), &reads).with_id(42);
        b.push(Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap()), false, &data);
        let rec = b.finish();
        assert_eq!(rec[1], FLAG_COMMIT_ID);
        let cc = decode(&rec, |_| {}).unwrap();
        assert_eq!((cc.id, cc.ts_us, cc.reads().count()), (Some(42), 1234, 1));
        // Without the flag the id is trailing bytes; with it and no id, a short record.
        let mut plain = rec.clone();
        plain[1] = 0;
        assert!(decode(&plain, |_| {}).is_err());
        assert!(decode(&rec[..rec.len() - 8], |_| {}).is_err());
        let mut zero = rec.clone();
        let n = zero.len();
        zero[n - 8..].fill(0);
        assert!(decode(&zero, |_| {}).is_err());
        // Only kind 2 carries one.
        let mut prep = rec.clone();
        prep[0] = KIND_PREPARE;
        assert!(decode_any(&prep, |_| {}).is_err());
    }

    #[test]
    fn roundtrip() {
        let a = [1u8, 0, 0, 0, 9, 9, 9, 9];
        let b = [2u8, 0, 0, 0];
        let objs = [
            RecordObject {
                oref: Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap()),
                created: true,
                data: &a,
            },
            RecordObject {
                oref: Oref::new(PageId::new(5).unwrap(), Oid::new(0).unwrap()),
                created: false,
                data: &b,
            },
        ];
        let reads = [Oref::new(PageId::new(7).unwrap(), Oid::new(1).unwrap())];
        let mut out = Vec::new();
        encode((1234, 5), &reads, objs.iter().cloned(), &mut out);
        let mut got = Vec::new();
        let cc = decode(&out, |o| got.push(o)).unwrap();
        assert_eq!(got, objs);
        assert_eq!((cc.ts_us, cc.ts_server), (1234, 5));
        assert_eq!(cc.reads().collect::<Vec<_>>(), reads);
        let mut b =
            RecordBuilder::with_capacity(encoded_len(1, 2, a.len() + b.len()), (1234, 5), &reads);
        let ra = b.push(objs[0].oref, true, &a);
        let rb = b.push(objs[1].oref, false, objs[1].data);
        assert_eq!(&b.bytes_mut(ra)[..], &a);
        assert_eq!(&b.bytes_mut(rb)[..], objs[1].data);
        let built = b.finish();
        assert_eq!(built.len(), encoded_len(1, 2, 12));
        assert_eq!(built, out, "the builder and the encoder agree");
        assert!(decode(&out[..out.len() - 1], |_| {}).is_err());
    }

    /// Issue 30's record: a commit whose read set holds a word of page 0. Salvage leaves the
    /// word out and keeps the rest: nothing committed is lost.
    #[test]
    fn a_read_set_on_page_zero_is_salvaged_without_loss() {
        let good = Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap());
        let mut rec = RecordBuilder::with_capacity(0, (5, 6), &[good, good]).finish();
        rec[HEADER_BYTES + CC_BYTES + 4..HEADER_BYTES + CC_BYTES + 8]
            .copy_from_slice(&8u32.to_le_bytes());
        let obj = [7u8, 0, 0, 0, 1, 2, 3, 4];
        rec[4..8].copy_from_slice(&1u32.to_le_bytes());
        rec.extend_from_slice(&good.raw().to_le_bytes());
        rec.extend_from_slice(&[8, 0, 0, 0]);
        rec.extend_from_slice(&obj);
        assert_eq!(decode(&rec, |_| {}), Err(RecordError("oref on page 0 in reads")));
        let s = salvage(&rec);
        assert!(s.lossless, "{s:?}");
        assert_eq!(s.dropped.len(), 1);
        assert!(s.dropped[0].contains("0x00000008") && s.dropped[0].contains("page 0"), "{s:?}");
        let mut objects = Vec::new();
        let cc = decode(&s.record, |o| objects.push((o.oref, o.created, o.data.to_vec()))).unwrap();
        assert_eq!(cc.reads().collect::<Vec<_>>(), [good]);
        assert_eq!(objects, [(good, false, obj.to_vec())]);
        // A record of an unknown kind leaves nothing: the empty commit takes its place.
        let s = salvage(&[42, 0, 0, 0, 1, 2, 3]);
        assert_eq!(s.record, empty_commit());
        assert!(!s.lossless);
        assert!(decode(&empty_commit(), |_| panic!("no objects")).unwrap().reads().len() == 0);
    }

    #[test]
    fn kind_1_records_still_decode() {
        // Kind 1: the 8-byte header, then the objects.
        let mut rec = vec![KIND_COMMIT_V1, 0, 0, 0, 1, 0, 0, 0];
        let oref = Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap());
        rec.extend_from_slice(&oref.raw().to_le_bytes());
        rec.extend_from_slice(&[4, 0, 0, 0, 1, 0, 0, 0]);
        let mut n = 0;
        let cc = decode(&rec, |o| {
            assert_eq!(o.oref, oref);
            n += 1;
        })
        .unwrap();
        assert_eq!((n, cc.ts_us, cc.reads().len()), (1, 0, 0));
    }

    #[test]
    fn two_phase_records_roundtrip() {
        let a = [7u8, 0, 0, 0, 1, 0, 0, 0];
        let oref = Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap());
        let section = PrepareSection {
            coordinator: ServerId(2),
            participants: vec![(ServerId(1), false), (ServerId(2), true), (ServerId(9), true)],
        };
        let mut b = RecordBuilder::with_capacity(0, (99, 0x8000_0005), &[oref]);
        b.push(oref, false, &a);
        let rec = b.finish_prepared(&section);
        assert_eq!(rec.len(), encoded_len(1, 1, a.len()) + section.encoded_len());
        let mut n = 0;
        match decode_any(&rec, |o| {
            assert_eq!((o.oref, o.created, o.data), (oref, false, &a[..]));
            n += 1;
        })
        .unwrap()
        {
            Record::Prepare(cc, s) => {
                assert_eq!((cc.ts_us, cc.ts_server, n), (99, 0x8000_0005, 1));
                assert_eq!(s, section);
            }
            other => panic!("{other:?}"),
        }
        assert!(decode(&rec, |_| {}).is_err(), "a prepare is not a commit");
        assert!(decode_any(&rec[..rec.len() - 1], |_| {}).is_err());

        for d in [
            Decision { ts: (5, 6), commit: true, coordinator: true, tell: vec![ServerId(3)] },
            Decision { ts: (5, 6), commit: false, coordinator: false, tell: vec![] },
        ] {
            let rec = encode_decision(&d);
            assert_eq!(decode_any(&rec, |_| {}).unwrap(), Record::Decide(d));
            assert!(decode_any(&rec[..rec.len() - 1], |_| {}).is_err());
        }
        let rec = encode_end((5, 6));
        assert_eq!(decode_any(&rec, |_| {}).unwrap(), Record::End((5, 6)));
    }

    proptest! {
        #[test]
        fn a_built_record_decodes_to_its_reads_and_objects(
            reads in proptest::collection::vec((1u32..1000, 0u16..512), 0..300),
            objects in proptest::collection::vec(
                ((1u32..1000, 0u16..512), any::<bool>(), 1usize..20, any::<u8>()),
                0..40,
            ),
            capacity in 0usize..2,
        ) {
            let oref = |(p, o): (u32, u16)| Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap());
            let reads: Vec<Oref> = reads.into_iter().map(oref).collect();
            let objects: Vec<(Oref, bool, Vec<u8>)> = objects
                .into_iter()
                .map(|(o, c, words, fill)| (oref(o), c, vec![fill; 4 * words]))
                .collect();
            let bytes: usize = objects.iter().map(|(_, _, d)| d.len()).sum();
            // Exactly sized, or grown as it goes: the same record.
            let cap = capacity * encoded_len(reads.len(), objects.len(), bytes);
            let mut b = RecordBuilder::with_capacity(cap, (77, 3), &reads);
            for (o, c, d) in &objects {
                let r = b.push(*o, *c, d);
                prop_assert_eq!(&b.bytes_mut(r)[..], &d[..]);
            }
            let rec = b.finish();
            prop_assert_eq!(rec.len(), encoded_len(reads.len(), objects.len(), bytes));
            let mut got = Vec::new();
            let cc = decode(&rec, |o| got.push((o.oref, o.created, o.data.to_vec()))).unwrap();
            prop_assert_eq!((cc.ts_us, cc.ts_server), (77, 3));
            prop_assert_eq!(cc.reads().collect::<Vec<_>>(), reads);
            prop_assert_eq!(got, objects);
        }

        /// The decoder takes exactly the words the wire and the core take as objects'
        /// names (`Oref::object`), in the read set and as an object's oref: a record the core
        /// built from an acknowledged commit decodes, and one holding anything else does not.
        #[test]
        fn records_take_exactly_the_orefs_the_wire_takes(
            word in prop_oneof![any::<u32>(), 0u32..0x800],
            in_reads in any::<bool>(),
        ) {
            let good = Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap());
            let mut rec = RecordBuilder::with_capacity(0, (1, 1), &[good]).finish();
            if in_reads {
                rec[HEADER_BYTES + 12..HEADER_BYTES + 16].copy_from_slice(&2u32.to_le_bytes());
                rec.extend_from_slice(&word.to_le_bytes());
            } else {
                rec[4..8].copy_from_slice(&1u32.to_le_bytes());
                rec.extend_from_slice(&word.to_le_bytes());
                rec.extend_from_slice(&[4, 0, 0, 0, 7, 0, 0, 0]);
            }
            prop_assert_eq!(decode(&rec, |_| {}).is_ok(), Oref::object(word).is_ok());
        }

        /// Whatever the bytes, a salvaged record decodes; one that decodes is kept as it is;
        /// and what was a commit keeps every well-named read and every well-formed object up
        /// to the first whose frame is broken.
        #[test]
        fn a_salvaged_record_always_decodes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let s = salvage(&bytes);
            let decodes = decode_any(&s.record, |_| {}).is_ok();
            prop_assert!(decodes);
            if decode_any(&bytes, |_| {}).is_ok() {
                prop_assert_eq!(&s.record, &bytes);
                prop_assert!(s.dropped.is_empty());
            } else {
                prop_assert!(!s.dropped.is_empty());
            }
        }

        #[test]
        fn salvage_keeps_what_is_well_formed(
            reads in proptest::collection::vec(prop_oneof![any::<u32>(), 0u32..0x800, 0x400u32..0x10000], 0..8),
            objects in proptest::collection::vec((prop_oneof![any::<u32>(), 0x400u32..0x10000], any::<bool>(), 1usize..6), 0..6),
        ) {
            // A record written as the core once could write it: any words.
            let mut rec = vec![KIND_COMMIT, 0, 0, 0];
            rec.extend_from_slice(&(objects.len() as u32).to_le_bytes());
            rec.extend_from_slice(&7u64.to_le_bytes());
            rec.extend_from_slice(&9u32.to_le_bytes());
            rec.extend_from_slice(&(reads.len() as u32).to_le_bytes());
            for w in &reads {
                rec.extend_from_slice(&w.to_le_bytes());
            }
            for (w, created, words) in &objects {
                rec.extend_from_slice(&w.to_le_bytes());
                rec.extend_from_slice(&(4 * *words as u16).to_le_bytes());
                rec.extend_from_slice(&u16::from(*created).to_le_bytes());
                rec.extend_from_slice(&vec![0xab; 4 * words]);
            }
            let s = salvage(&rec);
            let mut got = Vec::new();
            let cc = decode(&s.record, |o| got.push((o.oref.raw(), o.created, o.data.len() / 4))).unwrap();
            prop_assert_eq!((cc.ts_us, cc.ts_server), (7, 9));
            let want_reads: Vec<u32> = reads.iter().copied().filter(|w| Oref::object(*w).is_ok()).collect();
            prop_assert_eq!(cc.reads().map(Oref::raw).collect::<Vec<_>>(), want_reads);
            let want: Vec<(u32, bool, usize)> = objects.iter().copied().filter(|(w, _, _)| Oref::object(*w).is_ok()).collect();
            prop_assert_eq!(&got, &want);
            let bad_reads = reads.iter().filter(|w| Oref::object(**w).is_err()).count();
            prop_assert_eq!(s.lossless, want.len() == objects.len());
            prop_assert_eq!(s.dropped.len(), bad_reads + objects.len() - want.len());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes, |_| {});
            let _ = decode_any(&bytes, |_| {});
        }

        #[test]
        fn decode_any_never_panics_on_two_phase_kinds(
            kind in 3u8..6,
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut rec = bytes;
            rec.insert(0, kind);
            let _ = decode_any(&rec, |_| {});
        }
    }
}
