//! Log records: encoding, and checks that never trust the bytes they read.
//!
//! The layout is documented in [`crate::log`]. A [`Checker`] holds what the next record of a
//! segment must look like (its LSN, and how its batch index may follow the previous one) and
//! judges a record in two steps, so that a streaming reader can check a record without holding
//! it: [`Checker::check_header`] before reading the payload (is the length believable, do the
//! bytes left hold it?), [`Checker::accept`] once the checksum has been computed over it.
//! [`scan`] runs the same checks over a segment held in memory; the unit tests and property
//! tests below exercise the checks through it.
//!
//! Every length read from the bytes is checked against the bytes left and `record_bytes_max`
//! before use, and every LSN step is checked for overflow, so no input can make the checks
//! panic or allocate more than the input's size.

use std::fmt;
use std::ops::Range;

use thor_core::checksum::Crc32c;
use thor_core::ids::Lsn;

use crate::limits::RECORD_HEADER_BYTES;

/// Bytes a record with a payload of `payload_len` bytes occupies in a segment.
pub const fn encoded_len(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// A record header as stored (see [`crate::log`] for the layout). Nothing in it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// CRC-32C of header bytes 4..20 and the payload.
    pub crc: u32,
    /// Payload bytes.
    pub len: u32,
    /// The record's LSN.
    pub lsn: Lsn,
    /// The record's position in its flush batch (0 for the batch's first record).
    pub batch_index: u32,
}

impl Header {
    /// Reads a header from its 20 bytes.
    pub fn parse(bytes: &[u8; RECORD_HEADER_BYTES]) -> Header {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&bytes[8..16]);
        Header {
            crc: u32_at(0),
            len: u32_at(4),
            lsn: Lsn(u64::from_le_bytes(lsn)),
            batch_index: u32_at(16),
        }
    }

    /// The 20 bytes of this header.
    pub fn to_bytes(&self) -> [u8; RECORD_HEADER_BYTES] {
        let mut out = [0u8; RECORD_HEADER_BYTES];
        out[0..4].copy_from_slice(&self.crc.to_le_bytes());
        out[4..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..16].copy_from_slice(&self.lsn.0.to_le_bytes());
        out[16..20].copy_from_slice(&self.batch_index.to_le_bytes());
        out
    }

    /// The LSN of the first record of this record's flush batch, if the index does not point
    /// before LSN 1.
    pub fn batch_first(&self) -> Option<Lsn> {
        self.lsn.0.checked_sub(u64::from(self.batch_index)).filter(|&l| l > 0).map(Lsn)
    }

    /// A checksum started over the covered header fields (bytes 4..20); feed it the payload
    /// and compare the result with [`Header::crc`].
    pub fn crc_start(&self) -> Crc32c {
        let bytes = self.to_bytes();
        let mut crc = Crc32c::new();
        crc.update(&bytes[4..]);
        crc
    }
}

/// Appends the record `(lsn, batch_index, payload)` to `out`. The caller has checked that the
/// payload fits in the `u32` length field (`record_bytes_max <= RECORD_BYTES_MAX_LIMIT`).
pub fn encode_into(lsn: Lsn, batch_index: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(payload.len()));
    out.extend_from_slice(&header_of(lsn, batch_index, payload));
    out.extend_from_slice(payload);
}

/// The header of the record `(lsn, batch_index, payload)`: what precedes the payload in a
/// segment ([`encode_into`] writes both). The caller has checked the payload's length as for
/// [`encode_into`].
pub fn header_of(lsn: Lsn, batch_index: u32, payload: &[u8]) -> [u8; RECORD_HEADER_BYTES] {
    let len =
        u32::try_from(payload.len()).expect("payload length checked against record_bytes_max");
    let mut header = Header { crc: 0, len, lsn, batch_index };
    let mut crc = header.crc_start();
    crc.update(payload);
    header.crc = crc.finish();
    header.to_bytes()
}

/// Why a record fails its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defect {
    /// Fewer bytes remain than a header needs.
    ShortHeader {
        /// Bytes remaining.
        have: u64,
    },
    /// The length field exceeds `record_bytes_max`.
    TooLong {
        /// The stored length.
        len: u64,
        /// The bound in force.
        max: usize,
    },
    /// The payload runs past the end of the segment.
    ShortPayload {
        /// The stored length.
        len: u64,
        /// Payload bytes remaining.
        have: u64,
    },
    /// The stored checksum does not match the header and payload.
    BadCrc {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// The record is intact but not the next in sequence.
    WrongLsn {
        /// The LSN that should come next.
        expected: Lsn,
        /// The LSN stored.
        found: Lsn,
    },
    /// The record is intact but its batch index does not follow the previous record's (a
    /// segment's first record starts a batch; later ones continue it or start the next).
    WrongBatchIndex {
        /// The previous record's index (`None` at the start of a segment).
        previous: Option<u32>,
        /// The index stored.
        found: u32,
    },
    /// The record would need LSN `u64::MAX`, which is never assigned.
    LsnOverflow,
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Defect::ShortHeader { have } => {
                write!(f, "record header cut short ({have} of {RECORD_HEADER_BYTES} bytes)")
            }
            Defect::TooLong { len, max } => {
                write!(f, "record length {len} exceeds the {max}-byte limit")
            }
            Defect::ShortPayload { len, have } => {
                write!(f, "record payload cut short ({have} of {len} bytes)")
            }
            Defect::BadCrc { stored, computed } => {
                write!(
                    f,
                    "record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                )
            }
            Defect::WrongLsn { expected, found } => {
                write!(f, "record has LSN {found}, expected {expected}")
            }
            Defect::WrongBatchIndex { previous: None, found } => {
                write!(f, "a segment's first record has batch index {found}, expected 0")
            }
            Defect::WrongBatchIndex { previous: Some(p), found } => {
                write!(
                    f,
                    "record has batch index {found} after {p}, expected 0 or {}",
                    *p as u64 + 1
                )
            }
            Defect::LsnOverflow => write!(f, "LSN space exhausted"),
        }
    }
}

/// What the next record of a segment must look like. Feed it each record in order.
#[derive(Debug, Clone)]
pub struct Checker {
    /// The LSN the next record must carry.
    next_lsn: Lsn,
    /// The previous record's batch index (`None` before the segment's first record).
    previous_index: Option<u32>,
    /// The largest payload believed.
    record_bytes_max: usize,
}

impl Checker {
    /// A checker for a segment whose first record must carry `first_lsn`.
    pub fn new(first_lsn: Lsn, record_bytes_max: usize) -> Checker {
        Checker { next_lsn: first_lsn, previous_index: None, record_bytes_max }
    }

    /// The LSN the next record must carry: after the last accepted record, the segment's next.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Judges a header before its payload is read: `room` is the number of segment bytes after
    /// the header. Returns the payload length to read.
    pub fn check_header(&self, header: &Header, room: u64) -> Result<usize, Defect> {
        // LSN u64::MAX is never assigned, so that "the next LSN" always exists.
        if self.next_lsn.0 == u64::MAX {
            return Err(Defect::LsnOverflow);
        }
        let too_long = Defect::TooLong { len: u64::from(header.len), max: self.record_bytes_max };
        let len = usize::try_from(header.len).map_err(|_| too_long.clone())?;
        if len > self.record_bytes_max {
            return Err(too_long);
        }
        if u64::from(header.len) > room {
            return Err(Defect::ShortPayload { len: u64::from(header.len), have: room });
        }
        Ok(len)
    }

    /// Judges a record whose header passed [`Checker::check_header`], given the checksum
    /// computed over it; on success the record is accepted and the checker moves past it.
    pub fn accept(&mut self, header: &Header, computed_crc: u32) -> Result<(), Defect> {
        // Checked again (check_header does too) because the `+ 1` below relies on it: LSN
        // u64::MAX is never assigned, so that "the next LSN" always exists.
        if self.next_lsn.0 == u64::MAX {
            return Err(Defect::LsnOverflow);
        }
        if computed_crc != header.crc {
            return Err(Defect::BadCrc { stored: header.crc, computed: computed_crc });
        }
        if header.lsn != self.next_lsn {
            return Err(Defect::WrongLsn { expected: self.next_lsn, found: header.lsn });
        }
        let follows = match self.previous_index {
            None => header.batch_index == 0,
            Some(p) => header.batch_index == 0 || Some(header.batch_index) == p.checked_add(1),
        };
        if !follows {
            return Err(Defect::WrongBatchIndex {
                previous: self.previous_index,
                found: header.batch_index,
            });
        }
        self.next_lsn = Lsn(self.next_lsn.0 + 1);
        self.previous_index = Some(header.batch_index);
        Ok(())
    }
}

/// What [`scan`] found in a segment's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The intact records, in order: each LSN with its payload's byte range in the input.
    pub records: Vec<(Lsn, Range<usize>)>,
    /// The offset just past the last intact record: where the next record goes.
    pub intact_end: usize,
    /// The LSN the next record must have.
    pub next_lsn: Lsn,
    /// The first defective record, if the scan stopped before the end: its offset and why.
    pub defect: Option<(usize, Defect)>,
}

/// Checks the records held in `bytes` (a segment's bytes after its header), whose first record
/// should carry `first_lsn`, stopping at the first defect. Never panics, whatever `bytes`
/// holds. The log itself reads segments in a streaming way with the same [`Checker`].
pub fn scan(bytes: &[u8], first_lsn: Lsn, record_bytes_max: usize) -> Scan {
    let mut records = Vec::new();
    let mut checker = Checker::new(first_lsn, record_bytes_max);
    let mut off = 0usize;
    let defect = loop {
        let rest = &bytes[off..];
        if rest.is_empty() {
            break None;
        }
        let Some((header, body)) = rest.split_first_chunk::<RECORD_HEADER_BYTES>() else {
            break Some((off, Defect::ShortHeader { have: rest.len() as u64 }));
        };
        let header = Header::parse(header);
        let len = match checker.check_header(&header, body.len() as u64) {
            Ok(len) => len,
            Err(d) => break Some((off, d)),
        };
        // check_header made sure the body holds `len` bytes.
        let payload = &body[..len];
        let mut crc = header.crc_start();
        crc.update(payload);
        if let Err(d) = checker.accept(&header, crc.finish()) {
            break Some((off, d));
        }
        let start = off + RECORD_HEADER_BYTES;
        records.push((header.lsn, start..start + len));
        off = start + len;
    };
    Scan { records, intact_end: off, next_lsn: checker.next_lsn(), defect }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Records `first..` with the given payloads, in batches of `batch` records.
    fn encode_all(first: u64, payloads: &[Vec<u8>], batch: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            encode_into(Lsn(first + i as u64), (i % batch.max(1)) as u32, p, &mut out);
        }
        out
    }

    #[test]
    fn layout_is_as_documented() {
        let mut out = Vec::new();
        encode_into(Lsn(0x0102_0304_0506_0708), 0x0a0b_0c0d, b"abc", &mut out);
        assert_eq!(out.len(), 20 + 3);
        assert_eq!(&out[4..8], &3u32.to_le_bytes());
        assert_eq!(&out[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&out[16..20], &[0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(&out[20..], b"abc");
        // The checksum covers everything after itself: the rest of the header and the payload.
        assert_eq!(&out[0..4], &thor_core::checksum::crc32c(&out[4..]).to_le_bytes());
        let h = Header::parse(out[..20].try_into().unwrap());
        assert_eq!(h.batch_first(), Some(Lsn(0x0102_0304_0506_0708 - 0x0a0b_0c0d)));
    }

    #[test]
    fn roundtrip() {
        let payloads = vec![b"one".to_vec(), Vec::new(), vec![7u8; 1000]];
        let bytes = encode_all(5, &payloads, 2);
        let s = scan(&bytes, Lsn(5), 1 << 20);
        assert_eq!(s.defect, None);
        assert_eq!(s.intact_end, bytes.len());
        assert_eq!(s.next_lsn, Lsn(8));
        let got: Vec<_> = s.records.iter().map(|(l, r)| (l.0, bytes[r.clone()].to_vec())).collect();
        assert_eq!(got, vec![(5, payloads[0].clone()), (6, Vec::new()), (7, payloads[2].clone())]);
    }

    #[test]
    fn each_defect_is_named() {
        let bytes = encode_all(1, &[b"hello".to_vec()], 1);
        // Short header.
        let s = scan(&bytes[..10], Lsn(1), 100);
        assert_eq!(s.defect, Some((0, Defect::ShortHeader { have: 10 })));
        // Short payload.
        let s = scan(&bytes[..22], Lsn(1), 100);
        assert_eq!(s.defect, Some((0, Defect::ShortPayload { len: 5, have: 2 })));
        // Length over the bound.
        let s = scan(&bytes, Lsn(1), 4);
        assert_eq!(s.defect, Some((0, Defect::TooLong { len: 5, max: 4 })));
        // Flipped payload bit, flipped length bit, flipped batch-index bit: all checksummed.
        for at in [21, 4, 16] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            let d = scan(&bad, Lsn(1), 100).defect;
            assert!(
                matches!(d, Some((0, Defect::BadCrc { .. } | Defect::ShortPayload { .. }))),
                "{at}: {d:?}"
            );
        }
        // Intact record, wrong place in the sequence.
        let s = scan(&bytes, Lsn(2), 100);
        assert_eq!(s.defect, Some((0, Defect::WrongLsn { expected: Lsn(2), found: Lsn(1) })));
        assert_eq!(s.intact_end, 0);
        assert_eq!(s.next_lsn, Lsn(2));
    }

    #[test]
    fn batch_indexes_must_start_at_zero_and_count_up_or_restart() {
        let mut ok = Vec::new();
        for (lsn, idx) in [(1, 0), (2, 1), (3, 2), (4, 0), (5, 0), (6, 1)] {
            encode_into(Lsn(lsn), idx, b"x", &mut ok);
        }
        assert_eq!(scan(&ok, Lsn(1), 10).defect, None);
        let mut skip = Vec::new();
        encode_into(Lsn(1), 0, b"x", &mut skip);
        encode_into(Lsn(2), 2, b"x", &mut skip);
        assert_eq!(
            scan(&skip, Lsn(1), 10).defect.map(|d| d.1),
            Some(Defect::WrongBatchIndex { previous: Some(0), found: 2 })
        );
        let mut mid = Vec::new();
        encode_into(Lsn(1), 3, b"x", &mut mid);
        assert_eq!(
            scan(&mid, Lsn(1), 10).defect.map(|d| d.1),
            Some(Defect::WrongBatchIndex { previous: None, found: 3 })
        );
    }

    #[test]
    fn batch_first_never_points_before_lsn_one() {
        let h = Header { crc: 0, len: 0, lsn: Lsn(3), batch_index: 3 };
        assert_eq!(h.batch_first(), None);
        let h = Header { crc: 0, len: 0, lsn: Lsn(3), batch_index: 2 };
        assert_eq!(h.batch_first(), Some(Lsn(1)));
    }

    #[test]
    fn lsn_overflow_is_a_defect_not_a_panic() {
        let mut bytes = Vec::new();
        encode_into(Lsn(u64::MAX - 1), 0, b"x", &mut bytes);
        encode_into(Lsn(u64::MAX), 1, b"y", &mut bytes);
        let s = scan(&bytes, Lsn(u64::MAX - 1), 100);
        assert_eq!(s.records.len(), 1);
        assert_eq!(s.next_lsn, Lsn(u64::MAX));
        assert_eq!(s.defect.map(|d| d.1), Some(Defect::LsnOverflow));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes: no panic, and whatever is reported intact is consistent.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), first in any::<u64>()) {
            let s = scan(&bytes, Lsn(first), 256);
            prop_assert!(s.intact_end <= bytes.len());
            prop_assert_eq!(s.defect.is_none(), s.intact_end == bytes.len());
            for (_, r) in &s.records {
                prop_assert!(r.end <= s.intact_end);
                let stored = u32::from_le_bytes(bytes[r.start - 20..r.start - 16].try_into().unwrap());
                prop_assert_eq!(thor_core::checksum::crc32c(&bytes[r.start - 16..r.end]), stored);
            }
        }

        /// Valid records with one bit flipped: the records before the flip are intact, and the
        /// flipped record is never reported intact with different contents.
        #[test]
        fn bit_flips_are_caught(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8),
            batch in 1usize..4,
            flip in any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let good = encode_all(1, &payloads, batch);
            let mut bad = good.clone();
            let at = flip.index(bad.len());
            bad[at] ^= 1 << bit;
            let s = scan(&bad, Lsn(1), 256);
            // Every record reported intact is one of the originals, unchanged.
            for (l, r) in &s.records {
                let i = (l.0 - 1) as usize;
                prop_assert_eq!(&bad[r.clone()], payloads[i].as_slice());
            }
            // The scan stops at or before the record containing the flipped byte.
            prop_assert!(s.intact_end <= at);
            prop_assert!(s.defect.is_some());
        }

        /// A valid log cut anywhere: exactly the records wholly before the cut survive.
        #[test]
        fn truncations_keep_a_prefix(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            cut in any::<proptest::sample::Index>(),
        ) {
            let good = encode_all(9, &payloads, 3);
            let cut = cut.index(good.len() + 1);
            let s = scan(&good[..cut], Lsn(9), 256);
            let mut end = 0;
            let mut whole = 0;
            for p in &payloads {
                if end + encoded_len(p.len()) <= cut {
                    end += encoded_len(p.len());
                    whole += 1;
                } else {
                    break;
                }
            }
            prop_assert_eq!(s.records.len(), whole);
            prop_assert_eq!(s.intact_end, end);
            prop_assert_eq!(s.defect.is_some(), end != cut);
            prop_assert_eq!(s.next_lsn, Lsn(9 + whole as u64));
        }
    }
}
