//! Update detection: which bytes of a page a transaction changed, as the fewest record bytes.
//!
//! # Three ways to find the changes
//!
//! The paper (`papers/quickstore-recovery-sigmod95.txt`, section 3) keeps, at the client, the
//! value a page had before the transaction first wrote it, and compares it with the page when
//! log records must be produced (at commit, when the page leaves the client's cache, or when the
//! recovery buffer needs room):
//!
//! - **PD, page diffing**: the whole page was copied on its first update; compare every byte.
//! - **SD, sub-page diffing**: the page is cut into blocks (64 bytes by default) and only a
//!   block about to be written is copied, on its first update; compare the copied blocks.
//! - **SL, sub-page logging**: the same copies, but no comparison: every copied block is logged
//!   whole.
//!
//! All three see the saved bytes as a [`PreImage`]: pieces of the page (one piece for PD, one
//! per copied block for SD and SL) with their old contents, under the *copy-on-first-update
//! contract*: a byte outside every piece has not changed since the copies were taken.
//!
//! # Regions, and when to merge them
//!
//! Comparison yields maximal runs of changed bytes. Each run could be one region of a record,
//! but a region costs a header (`H` bytes: where it is, how long) besides its images, and two
//! regions separated by a gap of `g` unchanged bytes can instead be one region that also carries
//! the gap:
//!
//! ```text
//!   separate:  H + k·|R1|          +  H + k·|R2|
//!   merged:    H + k·(|R1| + g + |R2|)
//! ```
//!
//! where `k` is the number of images a region carries: 2 when it carries the old bytes (undo)
//! beside the new ones (redo), 1 for redo alone. Merging saves `H - k·g`, so two regions merge
//! exactly when `k·g <= H`; with undo that is the paper's rule `2·size(D) <= H` (ties merge, as
//! in the paper, giving fewer regions for the same bytes). The decision for one gap does not
//! depend on any other gap or on the regions' sizes, so deciding gap by gap, left to right,
//! gives the minimum total, whatever order the regions were found in ([`MergeCost`]; the tests
//! check it against a brute-force search over every merge choice and over every covering of the
//! changed bytes by disjoint regions).
//!
//! # Only the objects the transaction wrote
//!
//! ESM held a page lock, so a record could cover any byte of the page. thor validates
//! transactions object by object (CLOCC): another client may commit a change to a neighbouring
//! object of the same page while this transaction runs. A region that spanned a gap reaching
//! into that neighbour would carry this client's stale copy of it and undo the other commit.
//! So every diff is given the *writable spans*, the extents of the objects the transaction
//! wrote on the page (sorted; touching spans count as one, because both objects are validated
//! by the commit), and a region never leaves the writable span it starts in. Inside a written
//! object, gap bytes are what the transaction read and validation checks that they are
//! current, so carrying them is safe. A changed byte outside every writable span is refused
//! ([`DiffError::ChangeOutsideWritable`]): the client changed an object it did not declare, or a
//! swizzled reference leaked into the image it diffed. SL clips its blocks to the writable
//! spans for the same reason, so "whole blocks" here means whole blocks of written objects.
//!
//! # Cost of the hot path
//!
//! A [`Differ`] keeps its scratch vectors (the changed runs, the coalesced writable spans) from
//! one diff to the next, and the regions go into a vector the caller reuses: after warm-up a
//! diff allocates nothing. Comparison skips equal bytes eight at a time.

use crate::error::DiffError;
use crate::limits::REGION_HEADER_BYTES;

/// A byte range `start..end` of a page. `Copy`, unlike `Range`, so regions live in plain
/// vectors.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Span {
    /// The first byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// The span `start..end`.
    pub const fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// Bytes in the span.
    pub const fn len(self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the span holds no byte.
    pub const fn is_empty(self) -> bool {
        self.end <= self.start
    }
}

/// Which images a region carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Images {
    /// The new bytes only: records produced at commit, which the server applies (or discards,
    /// if the commit is refused) without ever needing the old bytes.
    Redo,
    /// The new bytes and the old ones: records sent before commit (the recovery buffer needed
    /// room, the page left the client's cache), which the server applies at once and must be
    /// able to take back if the transaction aborts.
    RedoUndo,
}

impl Images {
    /// How many copies of a region's bytes a record carries (`k` in the merging rule).
    pub const fn count(self) -> usize {
        match self {
            Images::Redo => 1,
            Images::RedoUndo => 2,
        }
    }
}

/// The cost model of regions, which decides merging.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MergeCost {
    /// Bytes a region costs besides its images (`H`).
    pub header_bytes: usize,
    /// The images each region carries (`k` = `images.count()`).
    pub images: Images,
}

impl MergeCost {
    /// The cost of this crate's page records ([`REGION_HEADER_BYTES`] per region).
    pub const fn format(images: Images) -> MergeCost {
        MergeCost { header_bytes: REGION_HEADER_BYTES, images }
    }

    /// Whether two regions `gap` bytes apart cost no more as one: `k·gap <= H`.
    #[inline]
    pub const fn merges(self, gap: usize) -> bool {
        self.images.count() * gap <= self.header_bytes
    }

    /// Bytes one region costs.
    pub const fn region_bytes(self, span: Span) -> usize {
        self.header_bytes + self.images.count() * span.len()
    }

    /// Bytes a set of regions costs.
    pub fn regions_bytes(self, spans: &[Span]) -> usize {
        spans.iter().map(|&s| self.region_bytes(s)).sum()
    }
}

/// The saved bytes of a page: pieces of it with their contents before the transaction's first
/// update of each.
///
/// *Contract:* [`pieces`](PreImage::pieces) are in increasing offset order, do not overlap and
/// lie inside the page, and every byte outside them is unchanged since the copies were taken
/// (the copy-on-first-update rule). The first three are checked by every user; the last is
/// the caller's promise, and breaking it loses updates, which is why the recovery buffer
/// (`crate::rbuf`) is the one place that takes copies.
pub trait PreImage {
    /// The size of the page the pieces belong to.
    fn page_bytes(&self) -> usize;
    /// The saved pieces: `(offset in the page, old bytes)`.
    fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> + '_;
}

/// A whole saved page (PD) is a pre-image of one piece.
impl PreImage for [u8] {
    fn page_bytes(&self) -> usize {
        self.len()
    }

    fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        std::iter::once((0, self))
    }
}

/// A pre-image given as a list of pieces, for callers that keep their copies elsewhere than in
/// a recovery buffer (and for tests).
#[derive(Clone, Copy, Debug)]
pub struct Pieces<'a> {
    /// The size of the page.
    pub page_bytes: usize,
    /// `(offset, old bytes)`, in increasing offset order.
    pub pieces: &'a [(usize, &'a [u8])],
}

impl PreImage for Pieces<'_> {
    fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        self.pieces.iter().copied()
    }
}

/// Checks that `pre`'s pieces are ordered, disjoint and inside a page of `page_len` bytes,
/// calling `f` on each.
pub(crate) fn for_each_checked_piece<P: PreImage + ?Sized>(
    pre: &P,
    page_len: usize,
    mut f: impl FnMut(usize, &[u8]),
) -> Result<(), DiffError> {
    if pre.page_bytes() != page_len {
        return Err(DiffError::PageSizeMismatch { pre: pre.page_bytes(), page: page_len });
    }
    let mut prev_end = 0;
    for (offset, old) in pre.pieces() {
        if offset < prev_end {
            return Err(DiffError::BadPreImage("pieces out of order or overlapping"));
        }
        let end = match offset.checked_add(old.len()) {
            Some(end) if end <= page_len => end,
            _ => return Err(DiffError::BadPreImage("piece reaches past the page")),
        };
        prev_end = end;
        f(offset, old);
    }
    Ok(())
}

/// Finds regions of changed bytes and merges them at minimum cost. Reuse one per thread: its
/// scratch vectors make every diff after the first allocation-free.
#[derive(Debug, Default)]
pub struct Differ {
    /// Maximal runs of changed bytes (PD, SD) or copied block pieces (SL), in page order.
    runs: Vec<Span>,
    /// The writable spans with touching ones joined.
    ranges: Vec<Span>,
}

impl Differ {
    /// A differ whose scratch space fits the worst page of `page_size` bytes (every other byte
    /// changed), so that it never grows.
    pub fn new(page_size: usize) -> Differ {
        Differ {
            runs: Vec::with_capacity(page_size / 2 + 1),
            ranges: Vec::with_capacity(page_size / 2 + 1),
        }
    }

    /// PD and SD: compares each piece of `pre` with `page` and writes into `out` (cleared
    /// first) the regions of minimum cost under `cost` that cover every changed byte and stay
    /// inside `writable`.
    pub fn diff<P: PreImage + ?Sized>(
        &mut self,
        pre: &P,
        page: &[u8],
        writable: &[Span],
        cost: MergeCost,
        out: &mut Vec<Span>,
    ) -> Result<(), DiffError> {
        self.runs.clear();
        let runs = &mut self.runs;
        for_each_checked_piece(pre, page.len(), |offset, old| {
            changed_runs(old, &page[offset..offset + old.len()], offset, runs);
        })?;
        coalesce(writable, page.len(), &mut self.ranges)?;
        merge_into(&self.runs, &self.ranges, cost, out)
    }

    /// SL: the regions that log every saved piece whole (clipped to `writable`), merged at
    /// minimum cost. No byte is compared.
    pub fn blocks<P: PreImage + ?Sized>(
        &mut self,
        pre: &P,
        page_len: usize,
        writable: &[Span],
        cost: MergeCost,
        out: &mut Vec<Span>,
    ) -> Result<(), DiffError> {
        coalesce(writable, page_len, &mut self.ranges)?;
        self.runs.clear();
        let (runs, ranges) = (&mut self.runs, &self.ranges);
        // Pieces and ranges are both sorted: one cursor over the ranges, never moving back
        // past a range that may still overlap a later piece.
        let mut j = 0;
        for_each_checked_piece(pre, page_len, |offset, old| {
            let piece = Span::new(offset, offset + old.len());
            while j < ranges.len() && ranges[j].end <= piece.start {
                j += 1;
            }
            let mut k = j;
            while k < ranges.len() && ranges[k].start < piece.end {
                let clipped =
                    Span::new(piece.start.max(ranges[k].start), piece.end.min(ranges[k].end));
                push_run(runs, clipped);
                k += 1;
            }
        })?;
        merge_into(&self.runs, &self.ranges, cost, out)
    }

    /// Merges given runs (sorted, disjoint, non-empty; touching is allowed) at minimum cost
    /// inside `writable`, for callers that found changes their own way, and for tests.
    pub fn merge(
        &mut self,
        runs: &[Span],
        writable: &[Span],
        page_len: usize,
        cost: MergeCost,
        out: &mut Vec<Span>,
    ) -> Result<(), DiffError> {
        coalesce(writable, page_len, &mut self.ranges)?;
        merge_into(runs, &self.ranges, cost, out)
    }
}

/// Appends `run`, joining it to the last run if they touch.
#[inline]
fn push_run(runs: &mut Vec<Span>, run: Span) {
    match runs.last_mut() {
        Some(last) if last.end == run.start => last.end = run.end,
        _ => runs.push(run),
    }
}

/// Joins touching writable spans into `out` (cleared first), checking order and bounds.
fn coalesce(writable: &[Span], page_len: usize, out: &mut Vec<Span>) -> Result<(), DiffError> {
    out.clear();
    let mut prev_end = 0;
    for &span in writable {
        if span.is_empty() {
            return Err(DiffError::BadWritable("empty span"));
        }
        if span.start < prev_end {
            return Err(DiffError::BadWritable("spans out of order or overlapping"));
        }
        if span.end > page_len {
            return Err(DiffError::BadWritable("span reaches past the page"));
        }
        prev_end = span.end;
        push_run(out, span);
    }
    Ok(())
}

/// The merging rule: runs in page order, each joined to the previous region when both lie in
/// the same writable range and the gap is worth carrying, otherwise started as a new region.
fn merge_into(
    runs: &[Span],
    ranges: &[Span],
    cost: MergeCost,
    out: &mut Vec<Span>,
) -> Result<(), DiffError> {
    out.clear();
    let mut r = 0; // the writable range the current run must lie in
    let mut last_in_range = false; // whether `out`'s last region lies in `ranges[r]`
    let mut prev_end = 0;
    for &run in runs {
        if run.is_empty() || run.start < prev_end {
            return Err(DiffError::BadPreImage("runs empty, out of order or overlapping"));
        }
        prev_end = run.end;
        while r < ranges.len() && ranges[r].end <= run.start {
            r += 1;
            last_in_range = false;
        }
        let Some(range) = ranges.get(r) else {
            return Err(DiffError::ChangeOutsideWritable { offset: run.start });
        };
        if run.start < range.start {
            return Err(DiffError::ChangeOutsideWritable { offset: run.start });
        }
        if run.end > range.end {
            return Err(DiffError::ChangeOutsideWritable { offset: range.end });
        }
        match out.last_mut() {
            Some(last) if last_in_range && cost.merges(run.start - last.end) => last.end = run.end,
            _ => {
                out.push(run);
                last_in_range = true;
            }
        }
    }
    Ok(())
}

/// Appends to `runs` the maximal runs where `old` and `new` (equal lengths) differ, at page
/// offset `base`, joining a run to the previous one if they touch (a change crossing a block
/// boundary in SD).
fn changed_runs(old: &[u8], new: &[u8], base: usize, runs: &mut Vec<Span>) {
    debug_assert_eq!(old.len(), new.len());
    let mut i = 0;
    while let Some(start) = first_difference(old, new, i) {
        let mut end = start + 1;
        while end < old.len() && old[end] != new[end] {
            end += 1;
        }
        push_run(runs, Span::new(base + start, base + end));
        i = end;
    }
}

/// The first index at or after `from` where `a` and `b` differ, skipping equal bytes eight at a
/// time.
#[inline]
fn first_difference(a: &[u8], b: &[u8], from: usize) -> Option<usize> {
    const WORD: usize = 8;
    let n = a.len();
    let mut i = from;
    while i + WORD <= n {
        let x = u64::from_ne_bytes(a[i..i + WORD].try_into().expect("8-byte slice"));
        let y = u64::from_ne_bytes(b[i..i + WORD].try_into().expect("8-byte slice"));
        if x != y {
            break;
        }
        i += WORD;
    }
    (i..n).find(|&j| a[j] != b[j])
}

#[cfg(test)]
mod tests;
