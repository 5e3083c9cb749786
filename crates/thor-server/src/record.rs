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
//! Kind 2 is this layout. Kind 1 (written before concurrency control existed) has no
//! timestamp, read count or reads: its objects follow the first 8 bytes. Both decode; only
//! kind 2 is written.

use thor_core::limits::{OBJECT_ALIGN, OBJECT_HEADER_BYTES};
use thor_core::{Oref, le};

/// A committed transaction without a concurrency-control section (old databases).
pub const KIND_COMMIT_V1: u8 = 1;
/// A committed transaction with its timestamp and read set.
pub const KIND_COMMIT: u8 = 2;
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
    /// The read set, 4 bytes per oref (checked by `decode`).
    reads: &'a [u8],
}

impl<'a> RecordCc<'a> {
    /// The section of a transaction at `(ts_us, ts_server)` that read nothing.
    pub const fn without_reads(ts_us: u64, ts_server: u32) -> RecordCc<'static> {
        RecordCc { ts_us, ts_server, reads: &[] }
    }

    /// The read set.
    pub fn reads(&self) -> impl ExactSizeIterator<Item = Oref> + 'a {
        self.reads.chunks_exact(4).map(|w| Oref::from_raw(le::u32_at(w, 0)).expect("checked"))
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
        for r in reads {
            buf.extend_from_slice(&r.raw().to_le_bytes());
        }
        RecordBuilder { buf, count: 0 }
    }

    /// Appends an object; returns the range of its bytes in the record, to patch them in place
    /// with [`RecordBuilder::bytes_mut`].
    pub fn push(&mut self, oref: Oref, created: bool, data: &[u8]) -> std::ops::Range<usize> {
        debug_assert!(data.len() <= u16::MAX as usize, "objects fit in a page");
        self.buf.extend_from_slice(&oref.raw().to_le_bytes());
        self.buf.extend_from_slice(&(data.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(&(if created { FLAG_CREATED } else { 0 }).to_le_bytes());
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
        self.buf
    }
}

/// Why a record could not be decoded. The log's CRC makes this mean a bug or a format from
/// another version, never a torn write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed commit record: {0}")]
pub struct RecordError(pub &'static str);

/// Decodes a commit record, checking every field, calls `f` for each object in order, and
/// returns the concurrency-control section.
pub fn decode<'a>(
    rec: &'a [u8],
    mut f: impl FnMut(RecordObject<'a>),
) -> Result<RecordCc<'a>, RecordError> {
    if rec.len() < HEADER_BYTES {
        return Err(RecordError("shorter than its header"));
    }
    if !matches!(rec[0], KIND_COMMIT | KIND_COMMIT_V1) || rec[1..4] != [0, 0, 0] {
        return Err(RecordError("unknown kind"));
    }
    let mut cc = RecordCc::without_reads(0, 0);
    let mut pos = HEADER_BYTES;
    if rec[0] == KIND_COMMIT {
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
            let o = Oref::from_raw(le::u32_at(w, 0)).ok_or(RecordError("tagged oref in reads"))?;
            if o.page().is_none() {
                return Err(RecordError("null oref in reads"));
            }
        }
        cc.reads = reads;
        pos += 4 * n;
    }
    let count = le::u32_at(rec, 4) as usize;
    for _ in 0..count {
        if rec.len() - pos < OBJECT_PREFIX_BYTES {
            return Err(RecordError("object prefix runs past the end"));
        }
        let oref = Oref::from_raw(le::u32_at(rec, pos)).ok_or(RecordError("tagged oref"))?;
        if oref.page().is_none() {
            return Err(RecordError("null oref"));
        }
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
    if pos != rec.len() {
        return Err(RecordError("trailing bytes"));
    }
    Ok(cc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use thor_core::{Oid, PageId};

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

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes, |_| {});
        }
    }
}
