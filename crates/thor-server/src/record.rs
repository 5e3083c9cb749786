//! The commit record: what the engine writes to the transaction log for one commit.
//!
//! The log (thor-storage) frames each record with its length, CRC-32C and LSN; this is the
//! payload inside. It holds the final bytes of every object the commit wrote, with references to
//! objects the commit created already replaced by their allocated orefs, so that replaying it
//! needs nothing but the record.
//!
//! ```text
//! 0     1     2         4          8
//! +-----+-----+---------+----------+------------------------------------------+
//! |kind | 0   | 0 (u16) | count u32| count × object                           |
//! +-----+-----+---------+----------+------------------------------------------+
//! object: oref u32 | len u16 | flags u16 | len bytes (the object, a multiple of 4)
//!         flags bit 0: created by this commit
//! ```

use thor_core::limits::{OBJECT_ALIGN, OBJECT_HEADER_BYTES};
use thor_core::{Oref, le};

/// The only record kind so far: a committed transaction.
pub const KIND_COMMIT: u8 = 1;
const HEADER_BYTES: usize = 8;
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

/// Appends the record of a commit writing `objects` to `out`.
pub fn encode<'a>(objects: impl ExactSizeIterator<Item = RecordObject<'a>>, out: &mut Vec<u8>) {
    out.push(KIND_COMMIT);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(objects.len() as u32).to_le_bytes());
    for o in objects {
        out.extend_from_slice(&o.oref.raw().to_le_bytes());
        out.extend_from_slice(&(o.data.len() as u16).to_le_bytes());
        out.extend_from_slice(&(if o.created { FLAG_CREATED } else { 0 }).to_le_bytes());
        out.extend_from_slice(o.data);
    }
}

/// Bytes of a record holding `objects` objects with `data_bytes` bytes of object data in all.
pub const fn encoded_len(objects: usize, data_bytes: usize) -> usize {
    HEADER_BYTES + objects * OBJECT_PREFIX_BYTES + data_bytes
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
    /// A builder whose buffer is allocated once for `capacity` record bytes (see
    /// [`encoded_len`]).
    pub fn with_capacity(capacity: usize) -> RecordBuilder {
        let mut buf = Vec::with_capacity(capacity.max(HEADER_BYTES));
        buf.push(KIND_COMMIT);
        buf.extend_from_slice(&[0; HEADER_BYTES - 1]);
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

/// Decodes a commit record, checking every field, and calls `f` for each object in order.
pub fn decode<'a>(rec: &'a [u8], mut f: impl FnMut(RecordObject<'a>)) -> Result<(), RecordError> {
    if rec.len() < HEADER_BYTES {
        return Err(RecordError("shorter than its header"));
    }
    if rec[0] != KIND_COMMIT || rec[1..4] != [0, 0, 0] {
        return Err(RecordError("unknown kind"));
    }
    let count = le::u32_at(rec, 4) as usize;
    let mut pos = HEADER_BYTES;
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
    Ok(())
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
        let mut out = Vec::new();
        encode(objs.iter().cloned(), &mut out);
        let mut got = Vec::new();
        decode(&out, |o| got.push(o)).unwrap();
        assert_eq!(got, objs);
        let mut b = RecordBuilder::with_capacity(encoded_len(2, a.len() + b.len()));
        let ra = b.push(objs[0].oref, true, &a);
        let rb = b.push(objs[1].oref, false, objs[1].data);
        assert_eq!(&b.bytes_mut(ra)[..], &a);
        assert_eq!(&b.bytes_mut(rb)[..], objs[1].data);
        let built = b.finish();
        assert_eq!(built.len(), encoded_len(2, 12));
        assert_eq!(built, out, "the builder and the encoder agree");
        assert!(decode(&out[..out.len() - 1], |_| {}).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes, |_| {});
        }
    }
}
