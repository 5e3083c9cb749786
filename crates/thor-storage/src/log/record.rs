//! Log records: encoding, and a scanner that never trusts the bytes it reads.
//!
//! The layout is documented in [`crate::log`]. [`scan`] walks a segment's bytes and stops at
//! the first record that fails a check, reporting where and why; the caller decides whether
//! that is a torn tail (the newest segment) or corruption (any older one). Every length read
//! from the bytes is checked against the remaining bytes and `record_bytes_max` before use,
//! and every LSN step is checked for overflow, so no input can make it panic or allocate
//! more than the input's size.

use std::fmt;
use std::ops::Range;

use thor_core::checksum::Crc32c;
use thor_core::ids::Lsn;

use crate::limits::RECORD_HEADER_BYTES;

/// Bytes a record with a payload of `payload_len` bytes occupies in a segment.
pub const fn encoded_len(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// The checksum stored in a record: CRC-32C over the LSN (8 bytes, little-endian) and then the
/// payload, fed incrementally so the payload is never copied for it.
pub fn record_crc(lsn: Lsn, payload: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(&lsn.0.to_le_bytes());
    crc.update(payload);
    crc.finish()
}

/// Appends the record `(lsn, payload)` to `out`. The caller has checked that the payload fits
/// in the `u32` length field (`record_bytes_max <= RECORD_BYTES_MAX_LIMIT`).
pub fn encode_into(lsn: Lsn, payload: &[u8], out: &mut Vec<u8>) {
    let len =
        u32::try_from(payload.len()).expect("payload length checked against record_bytes_max");
    out.reserve(encoded_len(payload.len()));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&record_crc(lsn, payload).to_le_bytes());
    out.extend_from_slice(&lsn.0.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Why the scan stopped before the end of the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defect {
    /// Fewer bytes remain than a header needs.
    ShortHeader {
        /// Bytes remaining.
        have: usize,
    },
    /// The length field exceeds `record_bytes_max`.
    TooLong {
        /// The stored length.
        len: u64,
        /// The bound in force.
        max: usize,
    },
    /// The payload runs past the end of the bytes.
    ShortPayload {
        /// The stored length.
        len: usize,
        /// Payload bytes remaining.
        have: usize,
    },
    /// The stored checksum does not match the LSN and payload.
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
            Defect::LsnOverflow => write!(f, "LSN space exhausted"),
        }
    }
}

/// What [`scan`] found in a segment.
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

/// Reads the records of a segment whose first record should carry `first_lsn`. Never panics,
/// whatever `bytes` holds.
pub fn scan(bytes: &[u8], first_lsn: Lsn, record_bytes_max: usize) -> Scan {
    let mut records = Vec::new();
    let mut off = 0usize;
    let mut expected = first_lsn;
    let defect = loop {
        let rest = &bytes[off..];
        if rest.is_empty() {
            break None;
        }
        // LSN u64::MAX is never assigned, so that "the next LSN" always exists.
        if expected.0 == u64::MAX {
            break Some((off, Defect::LsnOverflow));
        }
        let Some((header, body)) = rest.split_first_chunk::<RECORD_HEADER_BYTES>() else {
            break Some((off, Defect::ShortHeader { have: rest.len() }));
        };
        // `header` is a `[u8; 16]`, so these constant indices cannot fail.
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let mut lsn_bytes = [0u8; 8];
        lsn_bytes.copy_from_slice(&header[8..16]);
        let lsn = Lsn(u64::from_le_bytes(lsn_bytes));
        let Ok(len) = usize::try_from(len) else {
            break Some((off, Defect::TooLong { len: u64::from(len), max: record_bytes_max }));
        };
        if len > record_bytes_max {
            break Some((off, Defect::TooLong { len: len as u64, max: record_bytes_max }));
        }
        let Some(payload) = body.get(..len) else {
            break Some((off, Defect::ShortPayload { len, have: body.len() }));
        };
        let computed = record_crc(lsn, payload);
        if computed != stored {
            break Some((off, Defect::BadCrc { stored, computed }));
        }
        if lsn != expected {
            break Some((off, Defect::WrongLsn { expected, found: lsn }));
        }
        let start = off + RECORD_HEADER_BYTES;
        records.push((lsn, start..start + len));
        off = start + len;
        expected = Lsn(expected.0 + 1);
    };
    Scan { records, intact_end: off, next_lsn: expected, defect }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_all(first: u64, payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            encode_into(Lsn(first + i as u64), p, &mut out);
        }
        out
    }

    #[test]
    fn layout_is_as_documented() {
        let mut out = Vec::new();
        encode_into(Lsn(0x0102_0304_0506_0708), b"abc", &mut out);
        assert_eq!(out.len(), 16 + 3);
        assert_eq!(&out[0..4], &3u32.to_le_bytes());
        let mut crc_input = 0x0102_0304_0506_0708u64.to_le_bytes().to_vec();
        crc_input.extend_from_slice(b"abc");
        assert_eq!(&out[4..8], &thor_core::checksum::crc32c(&crc_input).to_le_bytes());
        assert_eq!(&out[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&out[16..], b"abc");
    }

    #[test]
    fn roundtrip() {
        let payloads = vec![b"one".to_vec(), Vec::new(), vec![7u8; 1000]];
        let bytes = encode_all(5, &payloads);
        let s = scan(&bytes, Lsn(5), 1 << 20);
        assert_eq!(s.defect, None);
        assert_eq!(s.intact_end, bytes.len());
        assert_eq!(s.next_lsn, Lsn(8));
        let got: Vec<_> = s.records.iter().map(|(l, r)| (l.0, bytes[r.clone()].to_vec())).collect();
        assert_eq!(got, vec![(5, payloads[0].clone()), (6, Vec::new()), (7, payloads[2].clone())]);
    }

    #[test]
    fn each_defect_is_named() {
        let bytes = encode_all(1, &[b"hello".to_vec()]);
        // Short header.
        let s = scan(&bytes[..10], Lsn(1), 100);
        assert_eq!(s.defect, Some((0, Defect::ShortHeader { have: 10 })));
        // Short payload.
        let s = scan(&bytes[..18], Lsn(1), 100);
        assert_eq!(s.defect, Some((0, Defect::ShortPayload { len: 5, have: 2 })));
        // Length over the bound.
        let s = scan(&bytes, Lsn(1), 4);
        assert_eq!(s.defect, Some((0, Defect::TooLong { len: 5, max: 4 })));
        // Flipped payload bit.
        let mut bad = bytes.clone();
        bad[17] ^= 0x10;
        assert!(matches!(scan(&bad, Lsn(1), 100).defect, Some((0, Defect::BadCrc { .. }))));
        // Intact record, wrong place in the sequence.
        let s = scan(&bytes, Lsn(2), 100);
        assert_eq!(s.defect, Some((0, Defect::WrongLsn { expected: Lsn(2), found: Lsn(1) })));
        assert_eq!(s.intact_end, 0);
        assert_eq!(s.next_lsn, Lsn(2));
    }

    #[test]
    fn lsn_overflow_is_a_defect_not_a_panic() {
        let mut bytes = Vec::new();
        encode_into(Lsn(u64::MAX - 1), b"x", &mut bytes);
        encode_into(Lsn(u64::MAX), b"y", &mut bytes);
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
            for (l, r) in &s.records {
                prop_assert!(r.end <= s.intact_end);
                prop_assert_eq!(record_crc(*l, &bytes[r.clone()]), u32::from_le_bytes(bytes[r.start - 12..r.start - 8].try_into().unwrap()));
            }
        }

        /// Valid records with one bit flipped: the records before the flip are intact, and the
        /// flipped record is never reported intact with different contents.
        #[test]
        fn bit_flips_are_caught(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8),
            flip in any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let good = encode_all(1, &payloads);
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
            let good = encode_all(9, &payloads);
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
