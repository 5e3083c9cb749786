//! Page records: every scheme's records turn the old page into the new one and back, their
//! size is the merging rule's minimum, and no byte string makes the decoder panic.

use super::*;
use crate::diff::{Differ, MergeCost, Pieces};
use proptest::prelude::*;

const PAGE: usize = 1024;

/// A page before and after a transaction: objects cut at random points after the header, some
/// of them written, random bytes of the written ones changed.
#[derive(Debug, Clone)]
struct Case {
    old: Vec<u8>,
    new: Vec<u8>,
    writable: Vec<Span>,
    /// Blocks copied by SD/SL (every block holding a changed byte, and some others that were
    /// written back to their old values or only about to be written).
    block_bytes: usize,
    copied: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(any::<u8>(), PAGE),
        proptest::collection::btree_set(PAGE_HEADER_BYTES + 1..PAGE, 0..40),
        proptest::collection::vec(any::<bool>(), 41),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..200),
        prop_oneof![Just(8usize), Just(16), Just(64), Just(128)],
        proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    )
        .prop_map(|(old, cuts, written, edits, block_bytes, extra)| {
            let mut bounds = vec![PAGE_HEADER_BYTES];
            bounds.extend(cuts);
            bounds.push(PAGE);
            let writable: Vec<Span> = bounds
                .windows(2)
                .zip(&written)
                .filter(|(_, w)| **w)
                .map(|(b, _)| Span::new(b[0], b[1]))
                .collect();
            let mut new = old.clone();
            let writable_bytes: Vec<usize> = writable.iter().flat_map(|w| w.start..w.end).collect();
            let mut copied = std::collections::BTreeSet::new();
            if !writable_bytes.is_empty() {
                for (at, v) in edits {
                    let i = writable_bytes[at.index(writable_bytes.len())];
                    new[i] = v;
                    copied.insert(i / block_bytes);
                }
                for at in extra {
                    copied.insert(writable_bytes[at.index(writable_bytes.len())] / block_bytes);
                }
            }
            Case { old, new, writable, block_bytes, copied: copied.into_iter().collect() }
        })
}

fn header(images: Images) -> RecordHeader {
    RecordHeader { page: PageId::new(7).unwrap(), txn: TxnId(0x1234_5678_9abc), images }
}

/// Encodes the regions, parses the record back and checks the round trip of its header.
fn encode_checked<P: PreImage + ?Sized>(
    regions: &[Span],
    images: Images,
    new: &[u8],
    pre: &P,
) -> Vec<u8> {
    let mut bytes = vec![0xEE]; // records append: something before must stay
    let n = encode(&header(images), regions, new, pre, &mut bytes).unwrap();
    assert_eq!(n, bytes.len() - 1);
    assert_eq!(n, encoded_bytes(regions, images));
    assert_eq!(bytes[0], 0xEE);
    bytes.remove(0);
    let rec = PageRecord::parse(&bytes, PAGE).unwrap();
    assert_eq!(rec.header(), header(images));
    assert_eq!(rec.regions().map(|r| r.span()).collect::<Vec<_>>(), regions);
    bytes
}

/// The records of one scheme reproduce the new page from the old, and undo restores the old.
fn check_round_trip(bytes: &[u8], case: &Case, images: Images) {
    let rec = PageRecord::parse(bytes, PAGE).unwrap();
    let mut page = case.old.clone();
    rec.apply_redo(&mut page).unwrap();
    assert!(page == case.new, "redo did not reproduce the modified page");
    match images {
        Images::RedoUndo => {
            rec.apply_undo(&mut page).unwrap();
            assert!(page == case.old, "undo did not restore the old page");
        }
        Images::Redo => assert_eq!(rec.apply_undo(&mut page), Err(RecordError::NoUndo)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_scheme_reproduces_the_modified_page_and_undo_restores_the_old(case in case()) {
        let blocks: Vec<(usize, &[u8])> = case
            .copied
            .iter()
            .map(|&b| (b * case.block_bytes, &case.old[b * case.block_bytes..(b + 1) * case.block_bytes]))
            .collect();
        let sub_page = Pieces { page_bytes: PAGE, pieces: &blocks };
        let mut d = Differ::new(PAGE);
        let mut regions = Vec::new();
        for images in [Images::Redo, Images::RedoUndo] {
            let cost = MergeCost::format(images);
            // PD: the whole page was saved.
            d.diff(&case.old[..], &case.new, &case.writable, cost, &mut regions).unwrap();
            let pd_bytes = (!regions.is_empty()).then(|| encoded_bytes(&regions, images));
            if regions.is_empty() {
                prop_assert!(case.old == case.new);
            } else {
                let bytes = encode_checked(&regions, images, &case.new, &case.old[..]);
                check_round_trip(&bytes, &case, images);
            }
            // SD: only the copied blocks were saved; the same changes are found, so the same
            // record.
            d.diff(&sub_page, &case.new, &case.writable, cost, &mut regions).unwrap();
            prop_assert_eq!((!regions.is_empty()).then(|| encoded_bytes(&regions, images)), pd_bytes);
            if !regions.is_empty() {
                let bytes = encode_checked(&regions, images, &case.new, &sub_page);
                check_round_trip(&bytes, &case, images);
            }
            // SL: whole copied blocks, no comparison; never smaller than SD's record.
            d.blocks(&sub_page, PAGE, &case.writable, cost, &mut regions).unwrap();
            if !regions.is_empty() {
                let bytes = encode_checked(&regions, images, &case.new, &sub_page);
                prop_assert!(Some(bytes.len()) >= pd_bytes);
                check_round_trip(&bytes, &case, images);
            }
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(rec) = PageRecord::parse(&bytes, PAGE) {
            let mut page = vec![0u8; PAGE];
            rec.apply_redo(&mut page).unwrap();
            let _ = rec.apply_undo(&mut page);
        }
    }

    #[test]
    fn a_damaged_record_is_refused_or_still_a_valid_record(
        case in case(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut d = Differ::new(PAGE);
        let mut regions = Vec::new();
        d.diff(&case.old[..], &case.new, &case.writable, MergeCost::format(Images::RedoUndo), &mut regions).unwrap();
        prop_assume!(!regions.is_empty());
        let mut bytes = Vec::new();
        encode(&header(Images::RedoUndo), &regions, &case.new, &case.old[..], &mut bytes).unwrap();
        let mut damaged = bytes.clone();
        for (at, bit) in flips {
            let i = at.index(damaged.len());
            damaged[i] ^= 1 << bit;
        }
        // A flip in the header or a region header is usually refused; a flip in the data is
        // not detectable here (the log's and the wire's checksums catch it), but whatever
        // parses must apply within the page.
        if let Ok(rec) = PageRecord::parse(&damaged, PAGE) {
            let mut page = case.old.clone();
            rec.apply_redo(&mut page).unwrap();
        }
        let truncated = &bytes[..cut.index(bytes.len())];
        prop_assert!(PageRecord::parse(truncated, PAGE).is_err());
    }
}

#[test]
fn the_layout_is_as_documented() {
    let mut page = vec![0u8; PAGE];
    let old = page.clone();
    page[100] = 0xAA;
    page[101] = 0xBB;
    let mut bytes = Vec::new();
    encode(&header(Images::RedoUndo), &[Span::new(100, 102)], &page, &old[..], &mut bytes).unwrap();
    assert_eq!(
        bytes,
        [
            &[1u8, 1, 1, 0][..],                // format, flags (UNDO), one region
            &7u32.to_le_bytes(),                // page id
            &0x1234_5678_9abcu64.to_le_bytes(), // txn
            &100u16.to_le_bytes(),              // offset
            &2u16.to_le_bytes(),                // len
            &[0xAA, 0xBB],                      // redo
            &[0, 0],                            // undo
        ]
        .concat()
    );
}

#[test]
fn malformed_records_name_what_is_wrong() {
    let mut page = vec![0u8; PAGE];
    let old = page.clone();
    page[100] = 1;
    page[200] = 2;
    let mut good = Vec::new();
    encode(
        &header(Images::Redo),
        &[Span::new(100, 101), Span::new(200, 201)],
        &page,
        &old[..],
        &mut good,
    )
    .unwrap();
    let with = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        PageRecord::parse(&b, PAGE).unwrap_err()
    };
    assert_eq!(with(0, 9), RecordError::UnknownFormat(9));
    assert_eq!(with(1, 2), RecordError::UnknownFlags(2));
    assert_eq!(with(2, 0), RecordError::BadRegionCount(0));
    assert_eq!(with(2, 3), RecordError::Truncated { at: good.len() });
    assert_eq!(with(2, 1), RecordError::TrailingBytes { extra: 5 });
    assert!(matches!(with(16, 10), RecordError::BadRegion { why: "covers the page header", .. }));
    assert!(matches!(with(18, 0), RecordError::BadRegion { why: "empty", .. }));
    // The second region moved before the first.
    assert!(matches!(with(21, 50), RecordError::BadRegion { offset: 50, .. }));
    let mut bad_page = good.clone();
    bad_page[4..8].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(PageRecord::parse(&bad_page, PAGE).unwrap_err(), RecordError::BadPageId(0));
    assert_eq!(PageRecord::parse(&good, 1000).unwrap_err(), RecordError::BadPageSize(1000));
    let rec = PageRecord::parse(&good, PAGE).unwrap();
    let mut small = vec![0u8; 2048];
    assert!(matches!(rec.apply_redo(&mut small), Err(RecordError::PageSizeMismatch { .. })));
    // A region reaching past the page: the same record checked against smaller pages is fine,
    // but one at the end of the page plus one byte is not.
    let mut out = Vec::new();
    assert!(matches!(
        encode(&header(Images::Redo), &[Span::new(PAGE - 1, PAGE + 1)], &page, &old[..], &mut out),
        Err(RecordError::BadRegion { why: "reaches past the page", .. })
    ));
    assert!(matches!(
        encode(
            &header(Images::Redo),
            &[Span::new(100, 101), Span::new(101, 102)],
            &page,
            &old[..],
            &mut out
        ),
        Err(RecordError::BadRegion { .. })
    ));
    assert_eq!(
        encode(&header(Images::Redo), &[], &page, &old[..], &mut out),
        Err(RecordError::BadRegionCount(0))
    );
    assert!(out.is_empty(), "a refused record appends nothing");
}
