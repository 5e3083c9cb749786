//! A latency histogram cheap enough to leave on: HdrHistogram with a fixed range.
//!
//! # Why
//!
//! A session's fetch time was a sum, which gives the mean of a miss but not its spread: the
//! miss-penalty work (issue 16) compares thor's fetch p50 and p99 with the loopback floor's, so
//! each fetch's latency must go into a distribution. A vector of samples grows with the run
//! (millions of fetches on a long multi-client run); a histogram has a fixed size, records a
//! sample with a few integer operations and no allocation, and answers any percentile within
//! a bounded relative error.
//!
//! # What it is
//!
//! The `hdrhistogram` crate (Gil Tene's HdrHistogram, the instrument latency work is usually
//! reported with), configured once for every histogram here:
//!
//! - values are nanoseconds from 1 ns to [`TRACKED_NS_MAX`] (one hour); a longer sample counts
//!   as one hour in the buckets (the exact maximum is kept beside them, so `max` is never
//!   rounded or clamped);
//! - [`SIGNIFICANT_DIGITS`] = 2: every bucket is at most 1% as wide as the values in it, so a
//!   percentile read from a bucket (its middle) is within 1% of the exact one;
//! - about 4,600 counters of 8 bytes (36 KiB), whatever the number of samples: the memory is
//!   fixed when the histogram is made, and recording never allocates.
//!
//! The sum of the samples is kept exactly beside the buckets (for the mean), as is the largest.

use std::time::Duration;

use hdrhistogram::Histogram;

/// The longest sample the buckets tell apart, in nanoseconds: one hour. Longer ones count as
/// this in percentiles (their exact maximum is kept).
pub const TRACKED_NS_MAX: u64 = 3_600 * 1_000_000_000;

/// Significant decimal digits of every bucket: 2 is 1% resolution.
pub const SIGNIFICANT_DIGITS: u8 = 2;

/// A distribution of durations with bounded memory (see the module documentation).
#[derive(Clone)]
pub struct LatencyHistogram {
    /// The buckets.
    hist: Histogram<u64>,
    /// The largest sample in nanoseconds, exact (a p100 that is not rounded to a bucket, and
    /// not clamped at [`TRACKED_NS_MAX`]).
    max_ns: u64,
    /// The sum of the samples in nanoseconds, exact (for the mean), saturating.
    sum_ns: u64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Thousands of counters would drown any log: show the summary a reader wants.
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50", &self.percentile(0.5))
            .field("p99", &self.percentile(0.99))
            .field("max", &self.max())
            .finish()
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.hist == other.hist && self.max_ns == other.max_ns && self.sum_ns == other.sum_ns
    }
}

impl Eq for LatencyHistogram {}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram (one allocation of its counters, the only one it makes).
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, TRACKED_NS_MAX, SIGNIFICANT_DIGITS)
            .expect("the bounds are valid: 1 <= low, high >= 2 * low, 2 significant digits");
        LatencyHistogram { hist, max_ns: 0, sum_ns: 0 }
    }

    /// Adds one sample. Durations beyond `u64::MAX` nanoseconds (584 years) count as that.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns);
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The sum of the samples (exact; the mean is this over [`count`](Self::count)).
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }

    /// The largest sample (zero if none).
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The `p` quantile (`p` in 0..=1, clamped; NaN reads as 0.5): the sample of rank
    /// `round((n - 1) * p)` in sorted order, as the middle of its bucket (within 1% of it),
    /// never above [`max`](Self::max). Zero if there are no samples.
    pub fn percentile(&self, p: f64) -> Duration {
        let n = self.count();
        if n == 0 {
            return Duration::ZERO;
        }
        let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
        let rank = ((n - 1) as f64 * p).round() as u64;
        // HdrHistogram's quantile q is the sample of rank ceil(q * n) - 1; half a sample past
        // `rank` lands on it whatever the rounding of the division.
        let q = (rank as f64 + 0.5) / n as f64;
        let bucket = self.hist.value_at_quantile(q);
        Duration::from_nanos(self.hist.median_equivalent(bucket).min(self.max_ns))
    }

    /// The samples recorded since `earlier`, a copy of this histogram taken before (counts
    /// only grow, so the difference is the later samples' distribution). The maximum is this
    /// histogram's, an upper bound on the later samples' own. A histogram that is not an
    /// earlier copy of this one gives an empty result.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut out = self.clone();
        if out.hist.subtract(&earlier.hist).is_err() {
            return LatencyHistogram::new();
        }
        out.sum_ns = self.sum_ns.saturating_sub(earlier.sum_ns);
        if out.count() == 0 {
            out.max_ns = 0;
        }
        out
    }

    /// Adds `other`'s samples (to combine clients or runs).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.hist.add(&other.hist).expect("histograms made by `new` share their range");
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// The cumulative distribution: for every non-empty bucket, its upper end (at most the
    /// maximum) and the fraction of samples at or below it (for plotting).
    pub fn cdf(&self) -> Vec<(Duration, f64)> {
        let total = self.count() as f64;
        let mut out = Vec::new();
        let mut seen = 0u64;
        for v in self.hist.iter_recorded() {
            seen += v.count_since_last_iteration();
            let hi = v.value_iterated_to().min(self.max_ns);
            out.push((Duration::from_nanos(hi), seen as f64 / total));
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

    /// Whether `got` is within the resolution of `want`'s bucket: 1% (plus a nanosecond for
    /// the smallest values, whose buckets are a nanosecond wide).
    fn close(got: u64, want: u64) -> bool {
        let want = want.min(TRACKED_NS_MAX);
        got.abs_diff(want) as f64 <= want as f64 / 100.0 + 1.0
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
        let p = h.percentile(0.99).as_nanos() as u64;
        assert!(close(p, 45_000), "{p}");
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
        let p = d.percentile(0.0).as_nanos() as u64;
        assert!(close(p, 100_000), "{p}");
        assert_eq!(h.since(&h).count(), 0);
        assert_eq!(h.since(&h).max(), Duration::ZERO);
        let mut m = before.clone();
        m.merge(&d);
        assert_eq!(m.count(), h.count());
        // Not an earlier copy: nothing, rather than nonsense.
        assert_eq!(before.since(&h).count(), 0);
    }

    #[test]
    fn memory_is_fixed_whatever_the_samples() {
        let mut h = LatencyHistogram::new();
        let buckets = h.hist.distinct_values();
        for i in 0..100_000u64 {
            h.record(Duration::from_nanos(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20));
        }
        h.record(Duration::MAX);
        assert_eq!(h.hist.distinct_values(), buckets, "no bucket was added");
        assert!(buckets * 8 <= 40 * 1024, "{buckets} counters");
        assert_eq!(h.count(), 100_001);
        assert_eq!(h.max(), Duration::from_nanos(u64::MAX), "the maximum is exact");
        assert!(h.percentile(1.0) <= h.max());
    }

    proptest! {
        /// Every percentile is within 1% of the sorted-vector model's sample, and the CDF rises
        /// to 1.
        #[test]
        fn percentiles_match_a_sorted_vector(
            samples in prop::collection::vec(
                prop_oneof![0u64..200, 0u64..5_000_000, 0u64..TRACKED_NS_MAX], 1..400),
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
                prop_assert!(close(got, want), "p{p}: {got} is not within 1% of {want}");
                prop_assert!(got <= *sorted.last().unwrap());
            }
            let cdf = h.cdf();
            prop_assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-12);
            prop_assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        }
    }
}
