//! The merging rule against the paper's examples and against brute force.

use super::*;
use proptest::prelude::*;

fn s(start: usize, end: usize) -> Span {
    Span::new(start, end)
}

/// The paper's ESM cost: a header of about 50 bytes, before and after images.
const ESM: MergeCost = MergeCost { header_bytes: 50, images: Images::RedoUndo };

fn merged(runs: &[Span], writable: &[Span], page_len: usize, cost: MergeCost) -> Vec<Span> {
    let mut out = Vec::new();
    Differ::new(page_len).merge(runs, writable, page_len, cost, &mut out).expect("merge");
    out
}

#[test]
fn first_and_third_words_of_an_object_are_one_record_under_esm_headers() {
    // Section 3.2.2: words 1 and 3 of an object updated. Two records cost 2·50 + 2·(4 + 4) =
    // 116 bytes, one record 50 + 2·12 = 74.
    let runs = [s(0, 4), s(8, 12)];
    let object = [s(0, 16)];
    assert_eq!(ESM.regions_bytes(&runs), 116);
    let out = merged(&runs, &object, 16, ESM);
    assert_eq!(out, vec![s(0, 12)]);
    assert_eq!(ESM.regions_bytes(&out), 74);
}

#[test]
fn figure_2a_far_first_gap_logs_r1_alone_and_keeps_r2_open() {
    // D1 = 30: 2·30 > 50, so R1 is logged alone; D2 = 10: R2 and R3 merge.
    let (r1, r2, r3) = (s(0, 8), s(38, 46), s(56, 60));
    let out = merged(&[r1, r2, r3], &[s(0, 100)], 100, ESM);
    assert_eq!(out, vec![r1, s(38, 60)]);
}

#[test]
fn figure_2b_near_first_gap_merges_r1_r2_then_r3_is_separate() {
    // D1 = 20: 2·20 <= 50, R1 and R2 become R1'; D2 = 40: R1' and R3 are separate.
    let (r1, r2, r3) = (s(0, 8), s(28, 36), s(76, 80));
    let out = merged(&[r1, r2, r3], &[s(0, 100)], 100, ESM);
    assert_eq!(out, vec![s(0, 36), r3]);
}

#[test]
fn a_gap_at_exactly_half_the_header_merges() {
    // 2·25 = 50: either choice costs the same; the paper's rule (<=) takes one record.
    let runs = [s(0, 4), s(29, 33)];
    let out = merged(&runs, &[s(0, 40)], 40, ESM);
    assert_eq!(out, vec![s(0, 33)]);
    assert_eq!(ESM.regions_bytes(&out), ESM.regions_bytes(&runs));
    let out = merged(&[s(0, 4), s(30, 34)], &[s(0, 40)], 40, ESM);
    assert_eq!(out.len(), 2);
}

#[test]
fn thor_format_merges_across_two_bytes_with_undo_and_four_without() {
    let undo = MergeCost::format(Images::RedoUndo);
    let redo = MergeCost::format(Images::Redo);
    let w = [s(24, 64)];
    assert_eq!(merged(&[s(24, 25), s(27, 28)], &w, 64, undo), vec![s(24, 28)]);
    assert_eq!(merged(&[s(24, 25), s(28, 29)], &w, 64, undo), vec![s(24, 25), s(28, 29)]);
    assert_eq!(merged(&[s(24, 25), s(29, 30)], &w, 64, redo), vec![s(24, 30)]);
    assert_eq!(merged(&[s(24, 25), s(30, 31)], &w, 64, redo), vec![s(24, 25), s(30, 31)]);
}

#[test]
fn the_order_regions_are_found_in_does_not_matter() {
    // Section 3.2.2's closing argument: the decision depends on the gap alone. Merge the same
    // runs after reversing the page (right to left) and compare the cost.
    let runs = [s(0, 3), s(5, 6), s(40, 41), s(60, 70), s(71, 72)];
    let mirrored: Vec<Span> = runs.iter().rev().map(|r| s(100 - r.end, 100 - r.start)).collect();
    for cost in [ESM, MergeCost::format(Images::Redo), MergeCost::format(Images::RedoUndo)] {
        let a = merged(&runs, &[s(0, 100)], 100, cost);
        let b = merged(&mirrored, &[s(0, 100)], 100, cost);
        assert_eq!(cost.regions_bytes(&a), cost.regions_bytes(&b));
    }
}

#[test]
fn regions_never_cross_into_an_object_the_transaction_did_not_write() {
    // Objects at 24..40 (written), 40..56 (not written), 56..72 (written). The gap between the
    // two runs is small enough to merge under ESM's header, but it is another object.
    let runs = [s(36, 40), s(56, 60)];
    let out = merged(&runs, &[s(24, 40), s(56, 72)], 80, ESM);
    assert_eq!(out, runs.to_vec());
    // Two touching written objects count as one writable range: the same gap inside them merges.
    let out = merged(&[s(36, 38), s(40, 44)], &[s(24, 40), s(40, 56)], 80, ESM);
    assert_eq!(out, vec![s(36, 44)]);
}

#[test]
fn a_change_outside_the_written_objects_is_refused() {
    let mut d = Differ::new(64);
    let mut out = Vec::new();
    let err = d.merge(&[s(30, 34)], &[s(32, 40)], 64, ESM, &mut out).unwrap_err();
    assert_eq!(err, DiffError::ChangeOutsideWritable { offset: 30 });
    let err = d.merge(&[s(36, 44)], &[s(32, 40)], 64, ESM, &mut out).unwrap_err();
    assert_eq!(err, DiffError::ChangeOutsideWritable { offset: 40 });
    let err = d.merge(&[s(50, 51)], &[s(32, 40)], 64, ESM, &mut out).unwrap_err();
    assert_eq!(err, DiffError::ChangeOutsideWritable { offset: 50 });
    let old = [0u8; 64];
    let mut new = [0u8; 64];
    new[10] = 1;
    let err = d.diff(&old[..], &new, &[s(32, 40)], ESM, &mut out).unwrap_err();
    assert_eq!(err, DiffError::ChangeOutsideWritable { offset: 10 });
}

#[test]
fn malformed_inputs_are_errors() {
    let mut d = Differ::new(64);
    let mut out = Vec::new();
    let page = [0u8; 64];
    assert!(matches!(
        d.diff(&page[..32], &page, &[], ESM, &mut out),
        Err(DiffError::PageSizeMismatch { .. })
    ));
    let bad_order: [(usize, &[u8]); 2] = [(8, &page[..8]), (4, &page[..8])];
    let pre = Pieces { page_bytes: 64, pieces: &bad_order };
    assert!(matches!(d.diff(&pre, &page, &[], ESM, &mut out), Err(DiffError::BadPreImage(_))));
    let past_end: [(usize, &[u8]); 1] = [(60, &page[..8])];
    let pre = Pieces { page_bytes: 64, pieces: &past_end };
    assert!(matches!(d.blocks(&pre, 64, &[], ESM, &mut out), Err(DiffError::BadPreImage(_))));
    for w in [[s(8, 16), s(4, 10)], [s(8, 8), s(9, 10)], [s(8, 16), s(60, 70)]] {
        assert!(matches!(
            d.diff(&page[..], &page, &w, ESM, &mut out),
            Err(DiffError::BadWritable(_))
        ));
    }
    assert!(matches!(
        d.merge(&[s(8, 12), s(10, 14)], &[s(0, 64)], 64, ESM, &mut out),
        Err(DiffError::BadPreImage(_))
    ));
}

#[test]
fn sub_page_diffing_joins_a_change_across_a_block_boundary() {
    let old = vec![0u8; 256];
    let mut new = old.clone();
    new[62..66].fill(7); // crosses the boundary between blocks 0..64 and 64..128
    new[200] = 1;
    let pieces: [(usize, &[u8]); 3] =
        [(0, &old[0..64]), (64, &old[64..128]), (192, &old[192..256])];
    let pre = Pieces { page_bytes: 256, pieces: &pieces };
    let mut out = Vec::new();
    let cost = MergeCost::format(Images::RedoUndo);
    Differ::new(256).diff(&pre, &new, &[s(24, 256)], cost, &mut out).unwrap();
    assert_eq!(out, vec![s(62, 66), s(200, 201)]);
}

#[test]
fn sub_page_logging_logs_copied_blocks_whole_within_written_objects() {
    let old = vec![0u8; 256];
    let pieces: [(usize, &[u8]); 3] =
        [(0, &old[0..64]), (64, &old[64..128]), (192, &old[192..256])];
    let pre = Pieces { page_bytes: 256, pieces: &pieces };
    let mut out = Vec::new();
    let cost = MergeCost::format(Images::RedoUndo);
    // Written objects 24..100 and 180..256: blocks 0 and 1 are clipped to 24..100 (one region,
    // the blocks touch), block 3 to 192..256.
    Differ::new(256).blocks(&pre, 256, &[s(24, 100), s(180, 256)], cost, &mut out).unwrap();
    assert_eq!(out, vec![s(24, 100), s(192, 256)]);
}

/// The cheapest merge choices, by trying every subset of the gaps that may be merged (those
/// inside one writable range). Runs must be inside the writable ranges.
fn brute_force_merge_choices(runs: &[Span], ranges: &[Span], cost: MergeCost) -> usize {
    let range_of = |r: Span| ranges.iter().position(|w| w.start <= r.start && r.end <= w.end);
    let gaps: Vec<usize> =
        (1..runs.len()).filter(|&i| range_of(runs[i - 1]) == range_of(runs[i])).collect();
    assert!(gaps.len() <= 16, "too many gaps for brute force");
    let mut best = usize::MAX;
    for mask in 0u32..(1 << gaps.len()) {
        let mut regions: Vec<Span> = Vec::new();
        for (i, &run) in runs.iter().enumerate() {
            let merge = gaps.iter().position(|&g| g == i).is_some_and(|bit| mask & (1 << bit) != 0);
            match regions.last_mut() {
                Some(last) if merge => last.end = run.end,
                _ => regions.push(run),
            }
        }
        best = best.min(cost.regions_bytes(&regions));
    }
    best
}

/// The cheapest set of disjoint regions covering every changed byte, each inside one writable
/// range, by trying every such set: at each position, either skip an unchanged byte or start a
/// region of every possible length. This does not assume that regions end on changed bytes or
/// that only neighbouring runs merge.
fn brute_force_coverings(
    changed: &[bool],
    range_end: &[Option<usize>],
    cost: MergeCost,
    pos: usize,
) -> Option<usize> {
    if pos == changed.len() {
        return Some(0);
    }
    let mut best = None::<usize>;
    if !changed[pos] {
        best = brute_force_coverings(changed, range_end, cost, pos + 1);
    }
    if let Some(end) = range_end[pos] {
        for e in pos + 1..=end {
            if let Some(rest) = brute_force_coverings(changed, range_end, cost, e) {
                let total = cost.region_bytes(Span::new(pos, e)) + rest;
                best = Some(best.map_or(total, |b| b.min(total)));
            }
        }
    }
    best
}

fn cost_strategy() -> impl Strategy<Value = MergeCost> {
    (0usize..12, prop_oneof![Just(Images::Redo), Just(Images::RedoUndo)])
        .prop_map(|(header_bytes, images)| MergeCost { header_bytes, images })
}

/// A small page: which bytes are writable (as spans) and which changed (inside them). The page
/// is cut into objects at random points; some objects are written, and random bytes of those
/// changed. Neighbouring written objects give touching writable spans.
fn small_page(max_len: usize) -> impl Strategy<Value = (Vec<bool>, Vec<Span>)> {
    (4..=max_len)
        .prop_flat_map(|len| {
            let bits = || proptest::collection::vec(any::<bool>(), len);
            (bits(), bits(), bits())
        })
        .prop_map(|(cut_before, written, change)| {
            let len = cut_before.len();
            let mut writable = Vec::new();
            let mut changed = vec![false; len];
            let mut start = 0;
            for i in 1..=len {
                if i == len || cut_before[i] {
                    if written[start] {
                        writable.push(Span::new(start, i));
                        changed[start..i].copy_from_slice(&change[start..i]);
                    }
                    start = i;
                }
            }
            (changed, writable)
        })
}

fn runs_of(changed: &[bool]) -> Vec<Span> {
    let mut runs: Vec<Span> = Vec::new();
    for (i, &c) in changed.iter().enumerate() {
        if c {
            push_run(&mut runs, Span::new(i, i + 1));
        }
    }
    runs
}

proptest! {
    #[test]
    fn merging_is_minimal_over_every_merge_choice(
        (changed, writable) in small_page(40),
        cost in cost_strategy(),
    ) {
        let runs = runs_of(&changed);
        prop_assume!(runs.len() <= 14);
        let out = merged(&runs, &writable, changed.len(), cost);
        let mut ranges = Vec::new();
        coalesce(&writable, changed.len(), &mut ranges).unwrap();
        prop_assert_eq!(cost.regions_bytes(&out), brute_force_merge_choices(&runs, &ranges, cost));
        // And the regions cover every changed byte, inside the writable ranges.
        for r in &runs {
            prop_assert!(out.iter().any(|o| o.start <= r.start && r.end <= o.end));
        }
        for o in &out {
            prop_assert!(ranges.iter().any(|w| w.start <= o.start && o.end <= w.end));
        }
    }

    #[test]
    fn merging_is_minimal_over_every_covering(
        (changed, writable) in small_page(11),
        cost in cost_strategy(),
    ) {
        let runs = runs_of(&changed);
        let out = merged(&runs, &writable, changed.len(), cost);
        let mut ranges = Vec::new();
        coalesce(&writable, changed.len(), &mut ranges).unwrap();
        let mut range_end = vec![None; changed.len()];
        for w in &ranges {
            for e in range_end.iter_mut().take(w.end).skip(w.start) {
                *e = Some(w.end);
            }
        }
        let best = brute_force_coverings(&changed, &range_end, cost, 0).expect("a covering exists");
        prop_assert_eq!(cost.regions_bytes(&out), best);
    }

    #[test]
    fn diff_finds_exactly_the_changed_bytes(
        old in proptest::collection::vec(any::<u8>(), 1..300),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..40),
    ) {
        let mut new = old.clone();
        for (at, v) in edits {
            let i = at % new.len();
            new[i] = v;
        }
        let mut d = Differ::new(old.len());
        let mut out = Vec::new();
        // Header 0: merge only touching runs, so the regions are exactly the maximal runs.
        let exact = MergeCost { header_bytes: 0, images: Images::Redo };
        d.diff(&old[..], &new, &[Span::new(0, old.len())], exact, &mut out).unwrap();
        let expected = runs_of(&old.iter().zip(&new).map(|(a, b)| a != b).collect::<Vec<_>>());
        prop_assert_eq!(out, expected);
    }
}
