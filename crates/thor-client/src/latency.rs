//! A latency histogram cheap enough to leave on: a fixed array of log-linear buckets.
//!
//! # Why
//!
//! A session's fetch time was a sum, which gives the mean of a miss but not its spread: the
//! miss-penalty work (issue 16) compares thor's fetch p50 and p99 with the loopback floor's, so
//! each fetch's latency must go into a distribution. A vector of samples grows with the run
//! (millions of fetches on a long multi-client run); this histogram has a fixed size, records
//! a sample with a few integer operations and no allocation, and answers any percentile within
//! a bounded relative error.
//!
//! # Buckets
//!
//! Samples are nanoseconds (`u64`). Values below `2 * SUB` (64 ns) have a bucket each, so they
//! are exact. A larger value `v` with its highest set bit at position `e` falls in one of the
//! `SUB` equal-width buckets of the octave `[2^e, 2^(e+1))`:
//!
//! ```text
//!   v < 64:   index = v
//!   v >= 64:  e = 63 - leading_zeros(v)             (6 ..= 63)
//!             sub = (v >> (e - SUB_BITS)) - SUB     (0 ..= SUB-1, the bits below the top one)
//!             index = 2*SUB + (e - SUB_BITS - 1) * SUB + sub
//! ```
//!
//! A bucket of the octave starting at `2^e` is `2^(e - SUB_BITS)` wide, at most `1/SUB` of any
//! value in it: a percentile read from a bucket (its midpoint) is within 1/64 (1.6%) of the
//! exact one. Every `u64` has a bucket, so nothing is clamped: [`BUCKETS`] counters of 8 bytes,
//! 15 KiB in all, whatever the number of samples.

use std::time::Duration;

/// Bits of the sub-bucket index: `SUB = 2^SUB_BITS` buckets per octave.
const SUB_BITS: u32 = 5;

/// Buckets per octave above the exact range.
const SUB: u64 = 1 << SUB_BITS;

/// Buckets in all: `2 * SUB` exact ones, then `SUB` for each octave from `2^(SUB_BITS + 1)`
/// to `2^63`.
pub const BUCKETS: usize = (2 * SUB + (63 - SUB_BITS as u64) * SUB) as usize;

// The last bucket is the one of u64::MAX: every value has one.
const _: () = assert!(bucket_of(u64::MAX) == BUCKETS - 1);
const _: () = assert!(bucket_of(2 * SUB - 1) == 2 * SUB as usize - 1);
const _: () = assert!(bucket_of(2 * SUB) == 2 * SUB as usize);

/// The bucket of `ns`.
const fn bucket_of(ns: u64) -> usize {
    if ns < 2 * SUB {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    let sub = (ns >> (e - SUB_BITS)) - SUB;
    (2 * SUB + (e - SUB_BITS - 1) as u64 * SUB + sub) as usize
}

/// The smallest value of bucket `i` and the bucket's width (values `lo .. lo + width`).
fn bucket_range(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < 2 * SUB {
        return (i, 1);
    }
    let octave = (i - 2 * SUB) / SUB; // 0 for the octave starting at 2^(SUB_BITS + 1)
    let sub = (i - 2 * SUB) % SUB;
    let e = octave + u64::from(SUB_BITS) + 1;
    let width = 1u64 << (e - u64::from(SUB_BITS));
    ((SUB + sub) * width, width)
}

/// A distribution of durations with bounded memory (see the module documentation).
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Samples per bucket. Boxed so that a session's state stays small to move.
    counts: Box<[u64; BUCKETS]>,
    /// Samples in all (the sum of `counts`).
    total: u64,
    /// The largest sample in nanoseconds, exact (a p100 that is not rounded to a bucket).
    max_ns: u64,
    /// The sum of the samples in nanoseconds, exact (for the mean), saturating.
    sum_ns: u64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The 1,920 counters would drown any log: show the summary a reader wants.
        f.debug_struct("LatencyHistogram")
            .field("count", &self.total)
            .field("p50", &self.percentile(0.5))
            .field("p99", &self.percentile(0.99))
            .field("max", &self.max())
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram (one allocation of [`BUCKETS`] counters, the only one it makes).
    pub fn new() -> Self {
        LatencyHistogram { counts: Box::new([0; BUCKETS]), total: 0, max_ns: 0, sum_ns: 0 }
    }

    /// Adds one sample. Durations beyond `u64::MAX` nanoseconds (584 years) count as that.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The sum of the samples (exact; the mean is this over [`count`](Self::count)).
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }

    /// The largest sample (zero if none).
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The `p` quantile (`p` in 0..=1, clamped): the sample of rank `round((n - 1) * p)` in
    /// sorted order, as the midpoint of its bucket (within 1/64 of it), never above
    /// [`max`](Self::max). Zero if there are no samples.
    pub fn percentile(&self, p: f64) -> Duration {
        match self.rank_bucket(p) {
            None => Duration::ZERO,
            Some(i) => {
                let (lo, width) = bucket_range(i);
                Duration::from_nanos((lo + width / 2).min(self.max_ns))
            }
        }
    }

    /// The bucket holding the sample of rank `round((n - 1) * p)`.
    fn rank_bucket(&self, p: f64) -> Option<usize> {
        if self.total == 0 {
            return None;
        }
        let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
        let rank = ((self.total - 1) as f64 * p).round() as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return Some(i);
            }
        }
        // The counts sum to `total`, which is above `rank`.
        None
    }

    /// The samples recorded since `earlier`, a copy of this histogram taken before (counts
    /// only grow, so the difference is the later samples' distribution). The maximum is this
    /// histogram's, an upper bound on the later samples' own.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut out = self.clone();
        for (c, e) in out.counts.iter_mut().zip(earlier.counts.iter()) {
            *c = c.saturating_sub(*e);
        }
        out.total = out.counts.iter().sum();
        out.sum_ns = self.sum_ns.saturating_sub(earlier.sum_ns);
        if out.total == 0 {
            out.max_ns = 0;
        }
        out
    }

    /// Adds `other`'s samples (to combine clients or runs).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (c, o) in self.counts.iter_mut().zip(other.counts.iter()) {
            *c += *o;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// The cumulative distribution: for every non-empty bucket, its upper end and the fraction
    /// of samples at or below it (for plotting; at most [`BUCKETS`] points).
    pub fn cdf(&self) -> Vec<(Duration, f64)> {
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            seen += c;
            let (lo, width) = bucket_range(i);
            let hi = lo.saturating_add(width - 1).min(self.max_ns);
            out.push((Duration::from_nanos(hi), seen as f64 / self.total as f64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The model's percentile: rank `round((n - 1) * p)` of the sorted samples.
    fn model(sorted: &[u64], p: f64) -> u64 {
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut next = 0u64;
        for i in 0..BUCKETS {
            let (lo, width) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i} starts where {} ends", i.wrapping_sub(1));
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(lo + (width - 1)), i);
            // The relative width is the error bound of the module documentation.
            assert!(lo < 2 * SUB || width * SUB <= lo, "bucket {i}: {width} wide at {lo}");
            next = lo.wrapping_add(width);
        }
        assert_eq!(next, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn empty_and_single() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.percentile(0.5), Duration::ZERO);
        assert_eq!(h.count(), 0);
        assert!(h.cdf().is_empty());
        h.record(Duration::from_micros(45));
        assert_eq!(h.count(), 1);
        assert_eq!(h.max(), Duration::from_micros(45));
        // A single sample: every percentile is its bucket, capped at the exact maximum.
        let p = h.percentile(0.99).as_nanos() as f64;
        assert!((p - 45_000.0).abs() <= 45_000.0 / 64.0, "{p}");
        assert!(h.percentile(f64::NAN) <= h.max());
        assert_eq!(h.cdf().len(), 1);
    }

    #[test]
    fn since_is_the_later_samples() {
        let mut h = LatencyHistogram::new();
        for us in [10, 20, 30] {
            h.record(Duration::from_micros(us));
        }
        let before = h.clone();
        for _ in 0..5 {
            h.record(Duration::from_micros(100));
        }
        let d = h.since(&before);
        assert_eq!(d.count(), 5);
        assert_eq!(d.sum(), Duration::from_micros(500));
        let p = d.percentile(0.0).as_nanos() as f64;
        assert!((p - 100_000.0).abs() <= 100_000.0 / 64.0, "{p}");
        assert_eq!(h.since(&h).count(), 0);
        assert_eq!(h.since(&h).max(), Duration::ZERO);
        let mut m = before.clone();
        m.merge(&d);
        assert_eq!(m.count(), h.count());
    }

    #[test]
    fn memory_is_fixed_whatever_the_samples() {
        let mut h = LatencyHistogram::new();
        let size = std::mem::size_of_val(&*h.counts);
        for i in 0..100_000u64 {
            h.record(Duration::from_nanos(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20));
        }
        h.record(Duration::MAX);
        assert_eq!(std::mem::size_of_val(&*h.counts), size);
        assert_eq!(size, BUCKETS * 8);
        assert!(size <= 16 * 1024, "{size} bytes");
        assert_eq!(h.count(), 100_001);
        assert_eq!(h.max(), Duration::from_nanos(u64::MAX));
    }

    proptest! {
        /// Every percentile lies in the bucket of the sorted-vector model's sample, so it is
        /// within the bucket's width (1/64 of the value, or exact below 64 ns).
        #[test]
        fn percentiles_match_a_sorted_vector(
            samples in prop::collection::vec(
                prop_oneof![0u64..200, 0u64..5_000_000, any::<u64>()], 1..400),
            ps in prop::collection::vec(0.0f64..=1.0, 1..8),
        ) {
            let mut h = LatencyHistogram::new();
            for &s in &samples {
                h.record(Duration::from_nanos(s));
            }
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            prop_assert_eq!(h.count(), sorted.len() as u64);
            prop_assert_eq!(h.max().as_nanos() as u64, *sorted.last().unwrap());
            for p in ps.into_iter().chain([0.0, 0.5, 0.99, 1.0]) {
                let want = model(&sorted, p);
                let got = h.percentile(p).as_nanos() as u64;
                let (lo, width) = bucket_range(bucket_of(want));
                prop_assert!(got >= lo && got - lo < width,
                    "p{p}: {got} outside bucket {lo}+{width} of {want}");
                prop_assert!(got <= *sorted.last().unwrap());
            }
            // The CDF rises to 1 and its points are increasing.
            let cdf = h.cdf();
            prop_assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-12);
            prop_assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        }
    }
}
