//! The latency model: what each kind of request costs, and the two calibrations of it.
//!
//! # Components
//!
//! A request's latency is the sum of the components it used (the paper's equation 1, extended
//! with demotions and a two-speed disk):
//!
//! ```text
//!   client hit                 T_c
//!   array hit                  T_c + T_a
//!   disk read                  T_c + T_a + T_d          T_d = sequential or random
//!   ... plus, on a client miss that demoted its victim:
//!       data transferred       + T_demote                (the block crosses the link)
//!       reordered or rejected  + T_control               (a command and its answer, no data)
//! ```
//!
//! `T_a` and `T_demote` each have a fixed part (array controller, protocol) and the wire time of
//! one block at the link bandwidth, so the bandwidth sweep of the paper's section 5 changes only
//! those ([`LinkScaling::Wire`], the default). The paper does not say how its simulator's link
//! slowed down; [`LinkScaling::Proportional`] is the other extreme, in which everything that
//! crosses the link (`T_a`, `T_demote`, `T_control`) takes time inversely proportional to the
//! bandwidth, scaled from its value at 1 Gbit/s. `docs/sim.md` shows that only the second
//! reproduces the paper's crossover near 50 Mbit/s. A disk read is *sequential* when its block follows the previous disk read's block (in
//! the original block numbering); the disk then streams it (no seek, no rotational delay) in
//! `T_d,seq` instead of `T_d,random`.
//!
//! # Two calibrations
//!
//! - [`CostModel::round`]: the paper's round numbers (section 4.2): `T_c = 0`, `T_a = 0.2 ms`
//!   for a 4 KB read over 1 Gbit/s, `T_d = 10 ms` (one disk speed: the paper gives only this
//!   average), and a demotion that moves data costing as much as an array read (section 6: "a
//!   demotion roughly doubled the cost of a request that hit in the array cache"). The paper
//!   gives no figure for a demotion that moves no data; 0.02 ms (a tenth of an array read: one
//!   command and its answer) is used here. With these costs only *ratios* of latencies (the
//!   speedups) are comparable with the paper, whose absolute numbers came from Pantheon's
//!   calibrated disk and link models.
//! - [`CostModel::calibrated`]: the same structure with the five free components (`T_a`,
//!   `T_demote`, `T_control`, `T_d,seq`, `T_d,random`) solved from five of the paper's Table 2
//!   latencies and this simulator's own hit counts (`thor sim calibrate` redoes the fit and
//!   prints it; `docs/sim.md` shows it). The other Table 2 entries are then predictions.

use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::hierarchy::Demotion;

/// Where a request was served, with disk reads split by the disk model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Served {
    /// A client hit.
    Client,
    /// An array hit.
    Array,
    /// A disk read of the block after the previous disk read's block.
    DiskSequential,
    /// Any other disk read.
    DiskRandom,
}

impl Served {
    /// All of them, in class order.
    pub const ALL: [Served; 4] =
        [Served::Client, Served::Array, Served::DiskSequential, Served::DiskRandom];
}

/// All demotion outcomes, in class order.
pub const DEMOTIONS: [Demotion; 4] =
    [Demotion::None, Demotion::Transferred, Demotion::Reordered, Demotion::Rejected];

/// The number of request classes: every (served, demotion) pair.
pub const CLASSES: usize = 16;

/// The class index of a request: `served * 4 + demotion`.
#[inline]
pub fn class(served: Served, demotion: Demotion) -> usize {
    served as usize * 4 + demotion as usize
}

/// The (served, demotion) pair of a class index.
pub fn class_parts(class: usize) -> (Served, Demotion) {
    (Served::ALL[class / 4], DEMOTIONS[class % 4])
}

/// The cost components a request can use, as a vector (see [`Usage`]).
pub const COMPONENTS: usize = 6;

/// How many of each cost component a request (or, averaged, a workload) used. Mean latency is
/// the dot product of a usage with a cost model's component costs, which is what makes the cost
/// model cheap to vary (bandwidth sweeps) and to fit (calibration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Client lookups (every request makes one).
    pub client: f64,
    /// Reads answered by the array (array hits and disk reads alike cross the link).
    pub array_reads: f64,
    /// Demotions that moved a block.
    pub demote_transfers: f64,
    /// Demotions that moved no data (reordered or rejected).
    pub demote_controls: f64,
    /// Sequential disk reads.
    pub disk_sequential: f64,
    /// Random disk reads.
    pub disk_random: f64,
}

impl Usage {
    /// The components used by one request of class `(served, demotion)`.
    pub fn of(served: Served, demotion: Demotion) -> Usage {
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        Usage {
            client: 1.0,
            array_reads: flag(served != Served::Client),
            demote_transfers: flag(demotion == Demotion::Transferred),
            demote_controls: flag(matches!(demotion, Demotion::Reordered | Demotion::Rejected)),
            disk_sequential: flag(served == Served::DiskSequential),
            disk_random: flag(served == Served::DiskRandom),
        }
    }

    /// As an array, in the order of [`CostModel::component_costs`].
    pub fn to_array(self) -> [f64; COMPONENTS] {
        [
            self.client,
            self.array_reads,
            self.demote_transfers,
            self.demote_controls,
            self.disk_sequential,
            self.disk_random,
        ]
    }

    /// `self + k * other`.
    pub fn add_scaled(&mut self, other: Usage, k: f64) {
        self.client += k * other.client;
        self.array_reads += k * other.array_reads;
        self.demote_transfers += k * other.demote_transfers;
        self.demote_controls += k * other.demote_controls;
        self.disk_sequential += k * other.disk_sequential;
        self.disk_random += k * other.disk_random;
    }

    /// Blocks (of data) that crossed the client-array link.
    pub fn blocks_on_link(&self) -> f64 {
        self.array_reads + self.demote_transfers
    }
}

/// How link costs change with the link's bandwidth (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkScaling {
    /// Only the wire time of a block depends on the bandwidth; controller and protocol costs are
    /// fixed.
    Wire,
    /// Every cost that involves the link (array reads, demotions of either kind) is its value at
    /// the paper's 1 Gbit/s, times 1 Gbit/s over the bandwidth.
    Proportional,
}

/// Costs of each component of a request (see the module documentation). All times are in
/// milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// `T_c`: a lookup in the client's cache (charged to every request).
    pub client_ms: f64,
    /// The fixed part of `T_a` (array controller and protocol), without the wire time.
    pub array_fixed_ms: f64,
    /// The fixed part of a demotion that moves data, without the wire time.
    pub demote_fixed_ms: f64,
    /// A demotion that moves no data (reordered or rejected): one command and its answer.
    pub demote_control_ms: f64,
    /// `T_d` for a disk read that follows the previous one.
    pub disk_sequential_ms: f64,
    /// `T_d` for any other disk read.
    pub disk_random_ms: f64,
    /// The client-array link's bandwidth.
    pub link_bits_per_second: f64,
    /// The block size, for the wire time (the paper's runs used 4 KB blocks).
    pub block_bytes: u32,
    /// How link costs follow `link_bits_per_second`.
    pub link_scaling: LinkScaling,
}

/// The paper's link: 1 Gbit/s Fibre Channel (section 4.2).
pub const PAPER_LINK_BITS_PER_SECOND: f64 = 1e9;
/// The paper's block size: 4 KB (section 4.2).
pub const PAPER_BLOCK_BYTES: u32 = 4096;

impl CostModel {
    /// The paper's round numbers (see the module documentation).
    pub fn round() -> Self {
        Self::from_totals(&CostTotals {
            array_ms: 0.2,
            demote_transfer_ms: 0.2,
            demote_control_ms: 0.02,
            disk_sequential_ms: 10.0,
            disk_random_ms: 10.0,
        })
    }

    /// Costs fitted to the paper's Table 2 (see the module documentation and `docs/sim.md`).
    /// These are the values `thor sim calibrate` derives, rounded to 0.01 ms.
    pub fn calibrated() -> Self {
        Self::from_totals(&CALIBRATED_TOTALS)
    }

    /// A model with the paper's link, `T_c = 0`, and the given totals at that link speed.
    pub fn from_totals(totals: &CostTotals) -> Self {
        let wire = wire_ms(PAPER_BLOCK_BYTES, PAPER_LINK_BITS_PER_SECOND);
        CostModel {
            client_ms: 0.0,
            array_fixed_ms: totals.array_ms - wire,
            demote_fixed_ms: totals.demote_transfer_ms - wire,
            demote_control_ms: totals.demote_control_ms,
            disk_sequential_ms: totals.disk_sequential_ms,
            disk_random_ms: totals.disk_random_ms,
            link_bits_per_second: PAPER_LINK_BITS_PER_SECOND,
            block_bytes: PAPER_BLOCK_BYTES,
            link_scaling: LinkScaling::Wire,
        }
    }

    /// The same model with link costs scaled as `scaling` says.
    pub fn with_link_scaling(self, scaling: LinkScaling) -> Self {
        CostModel { link_scaling: scaling, ..self }
    }

    /// The same model over a link of `bits_per_second`.
    pub fn with_bandwidth(self, bits_per_second: f64) -> Self {
        CostModel { link_bits_per_second: bits_per_second, ..self }
    }

    /// Checks that every cost is finite and non-negative and the link is not stalled.
    pub fn validate(&self) -> Result<(), SimError> {
        let costs = [
            ("client", self.client_ms),
            ("array fixed", self.array_fixed_ms),
            ("demote fixed", self.demote_fixed_ms),
            ("demote control", self.demote_control_ms),
            ("disk sequential", self.disk_sequential_ms),
            ("disk random", self.disk_random_ms),
        ];
        for (what, ms) in costs {
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(SimError::config(format!("{what} cost {ms} ms is not a finite >= 0")));
            }
        }
        if self.link_bits_per_second.is_nan() || self.link_bits_per_second <= 0.0 {
            return Err(SimError::config("link bandwidth must be a number > 0"));
        }
        Ok(())
    }

    /// The time one block spends on the wire.
    pub fn wire_ms(&self) -> f64 {
        wire_ms(self.block_bytes, self.link_bits_per_second)
    }

    /// The cost of each component, in [`Usage::to_array`] order. An infinite bandwidth is
    /// allowed: it gives the costs without any link time.
    pub fn component_costs(&self) -> [f64; COMPONENTS] {
        let (array, demote, control) = match self.link_scaling {
            LinkScaling::Wire => {
                let wire = self.wire_ms();
                (self.array_fixed_ms + wire, self.demote_fixed_ms + wire, self.demote_control_ms)
            }
            LinkScaling::Proportional => {
                let at_reference = wire_ms(self.block_bytes, PAPER_LINK_BITS_PER_SECOND);
                let k = PAPER_LINK_BITS_PER_SECOND / self.link_bits_per_second;
                (
                    (self.array_fixed_ms + at_reference) * k,
                    (self.demote_fixed_ms + at_reference) * k,
                    self.demote_control_ms * k,
                )
            }
        };
        [self.client_ms, array, demote, control, self.disk_sequential_ms, self.disk_random_ms]
    }

    /// The mean latency of a workload with usage `usage`.
    pub fn latency_ms(&self, usage: &Usage) -> f64 {
        let costs = self.component_costs();
        usage.to_array().iter().zip(costs).map(|(u, c)| u * c).sum()
    }

    /// The latency of one request of class `(served, demotion)`.
    pub fn class_latency_ms(&self, served: Served, demotion: Demotion) -> f64 {
        self.latency_ms(&Usage::of(served, demotion))
    }

    /// The totals at this model's bandwidth, in the paper's terms.
    pub fn totals(&self) -> CostTotals {
        let c = self.component_costs();
        CostTotals {
            array_ms: c[1],
            demote_transfer_ms: c[2],
            demote_control_ms: c[3],
            disk_sequential_ms: c[4],
            disk_random_ms: c[5],
        }
    }
}

/// The wire time of `bytes` at `bits_per_second`, in milliseconds.
pub fn wire_ms(bytes: u32, bits_per_second: f64) -> f64 {
    f64::from(bytes) * 8.0 / bits_per_second * 1e3
}

/// A cost model's five free components as totals at the paper's 1 Gbit/s link: the form in which
/// the paper states costs and in which calibration solves for them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostTotals {
    /// `T_a`: an array read, wire time included.
    pub array_ms: f64,
    /// A demotion that moves a block, wire time included.
    pub demote_transfer_ms: f64,
    /// A demotion that moves no data.
    pub demote_control_ms: f64,
    /// A sequential disk read.
    pub disk_sequential_ms: f64,
    /// A random disk read.
    pub disk_random_ms: f64,
}

/// The calibrated totals (output of `thor sim calibrate --seed 1`, rounded to 0.01 ms).
pub const CALIBRATED_TOTALS: CostTotals = CostTotals {
    array_ms: 0.24,
    demote_transfer_ms: 0.24,
    demote_control_ms: 0.02,
    disk_sequential_ms: 1.43,
    disk_random_ms: 11.12,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_costs_are_the_papers() {
        let m = CostModel::round();
        let ms = |s, d| m.class_latency_ms(s, d);
        assert_eq!(ms(Served::Client, Demotion::None), 0.0);
        assert!((ms(Served::Array, Demotion::None) - 0.2).abs() < 1e-12);
        assert!((ms(Served::DiskRandom, Demotion::None) - 10.2).abs() < 1e-12);
        // An array hit plus a demotion: the 0.4 ms jump of the paper's figure 10.
        assert!((ms(Served::Array, Demotion::Transferred) - 0.4).abs() < 1e-12);
        // 4 KB at 10 Mbit/s is 3.2768 ms on the wire, for reads and demotions alike.
        let slow = m.with_bandwidth(10e6);
        let extra = slow.class_latency_ms(Served::Array, Demotion::Transferred) - 0.4;
        assert!((extra - 2.0 * (3.2768 - 0.032768)).abs() < 1e-9, "{extra}");
        // Proportional scaling: a hundredth of the bandwidth, a hundred times the link costs.
        let slow = m.with_link_scaling(LinkScaling::Proportional).with_bandwidth(10e6);
        let ms = slow.class_latency_ms(Served::Array, Demotion::Reordered);
        assert!((ms - 100.0 * (0.2 + 0.02)).abs() < 1e-9, "{ms}");
    }

    #[test]
    fn classes_round_trip() {
        for c in 0..CLASSES {
            let (s, d) = class_parts(c);
            assert_eq!(class(s, d), c);
        }
    }
}
