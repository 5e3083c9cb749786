//! Counting what requests did, and turning counts into the paper's measures.
//!
//! A simulation only counts requests by class (where each was served, what its demotion did);
//! see [`crate::cost`]. Hit fractions come straight from the counts; latencies come from counts
//! and a cost model, so one simulation can be priced under any number of cost models, including
//! a whole bandwidth sweep, without running it again. Because every request of a class costs the
//! same, the latency distribution is exact: a step function with one step per class.

use serde::{Deserialize, Serialize};

use crate::cost::{CLASSES, CostModel, Served, Usage, class, class_parts};
use crate::hierarchy::Demotion;

/// Requests counted by class (see [`crate::cost::class`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCounts {
    /// `counts[class(served, demotion)]`.
    pub counts: [u64; CLASSES],
}

impl ClassCounts {
    /// Counts one request.
    #[inline]
    pub fn record(&mut self, served: Served, demotion: Demotion) {
        self.counts[class(served, demotion)] += 1;
    }

    /// Adds another set of counts.
    pub fn merge(&mut self, other: &ClassCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }

    /// Requests counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Requests that were served at `served`.
    pub fn served(&self, served: Served) -> u64 {
        (0..4).map(|d| self.counts[served as usize * 4 + d]).sum()
    }

    /// Requests whose demotion ended as `demotion`.
    pub fn demotions(&self, demotion: Demotion) -> u64 {
        (0..4).map(|s| self.counts[s * 4 + demotion as usize]).sum()
    }

    /// The mean use of each cost component per request.
    pub fn usage(&self) -> Usage {
        let total = self.total();
        let mut usage = Usage::default();
        if total == 0 {
            return usage;
        }
        for (c, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                let (served, demotion) = class_parts(c);
                usage.add_scaled(Usage::of(served, demotion), n as f64 / total as f64);
            }
        }
        usage
    }

    /// The mean latency under `cost`.
    pub fn mean_latency_ms(&self, cost: &CostModel) -> f64 {
        cost.latency_ms(&self.usage())
    }

    /// The latency distribution under `cost`: `(latency_ms, fraction of requests at or below)`
    /// at each distinct latency, ascending.
    pub fn cdf(&self, cost: &CostModel) -> Vec<(f64, f64)> {
        let total = self.total();
        let mut points: Vec<(f64, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(c, &n)| {
                let (served, demotion) = class_parts(c);
                (cost.class_latency_ms(served, demotion), n)
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len());
        let mut below = 0u64;
        for (ms, n) in points {
            below += n;
            let fraction = below as f64 / total as f64;
            match out.last_mut() {
                // Classes that cost the same (to a nanosecond) are one step.
                Some(last) if (last.0 - ms).abs() < 1e-6 => last.1 = fraction,
                _ => out.push((ms, fraction)),
            }
        }
        out
    }

    /// The measures of the paper's figures under `cost`.
    pub fn summary(&self, cost: &CostModel) -> Summary {
        let total = self.total();
        let frac = |n: u64| if total == 0 { 0.0 } else { n as f64 / total as f64 };
        let disk = self.served(Served::DiskSequential) + self.served(Served::DiskRandom);
        Summary {
            requests: total,
            client_hit_fraction: frac(self.served(Served::Client)),
            array_hit_fraction: frac(self.served(Served::Array)),
            disk_fraction: frac(disk),
            disk_sequential_fraction: frac(self.served(Served::DiskSequential)),
            demotes_transferred: self.demotions(Demotion::Transferred),
            demotes_reordered: self.demotions(Demotion::Reordered),
            demotes_rejected: self.demotions(Demotion::Rejected),
            mean_latency_ms: self.mean_latency_ms(cost),
            latency_cdf: self.cdf(cost),
        }
    }
}

/// The paper's measures for one run under one cost model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Requests measured (after warm-up).
    pub requests: u64,
    /// Fraction of requests that hit in the client.
    pub client_hit_fraction: f64,
    /// Fraction that missed in the client and hit in the array.
    pub array_hit_fraction: f64,
    /// Fraction that went to disk.
    pub disk_fraction: f64,
    /// Fraction that went to disk and were sequential reads (part of `disk_fraction`).
    pub disk_sequential_fraction: f64,
    /// Demotions that moved a block to the array.
    pub demotes_transferred: u64,
    /// Demotions of blocks the array had already (reorder only).
    pub demotes_reordered: u64,
    /// Demotions the array refused.
    pub demotes_rejected: u64,
    /// Mean latency per request.
    pub mean_latency_ms: f64,
    /// `(latency_ms, cumulative fraction)` steps.
    pub latency_cdf: Vec<(f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_and_mean_follow_the_counts() {
        let mut counts = ClassCounts::default();
        for _ in 0..2 {
            counts.record(Served::Client, Demotion::None);
        }
        counts.record(Served::Array, Demotion::Transferred);
        counts.record(Served::DiskRandom, Demotion::Transferred);
        let cost = CostModel::round();
        let mean = counts.mean_latency_ms(&cost);
        assert!((mean - (0.0 + 0.0 + 0.4 + 10.4) / 4.0).abs() < 1e-12);
        let cdf = counts.cdf(&cost);
        assert_eq!(cdf.len(), 3);
        assert_eq!(cdf[0], (0.0, 0.5));
        assert!((cdf[1].0 - 0.4).abs() < 1e-12 && cdf[1].1 == 0.75);
        assert_eq!(cdf[2].1, 1.0);
        let s = counts.summary(&cost);
        assert_eq!(s.demotes_transferred, 2);
        assert_eq!(s.client_hit_fraction, 0.5);
    }
}
