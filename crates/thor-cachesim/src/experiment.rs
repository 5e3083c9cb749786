//! The paper's experiments: Table 2, the bandwidth sweep, and the calibration of the cost model.
//!
//! All three start from the same simulations: each of the paper's three synthetic workloads
//! ([`PaperWorkload`]) run through each design at the paper's cache sizes ([`run_paper`]). The
//! rest is arithmetic on the resulting counts (see [`crate::cost`]): Table 2 prices them under a
//! cost model, the sweep prices them at many bandwidths, and the calibration solves for the cost
//! model that reproduces five of the paper's latencies.

use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::cost::{COMPONENTS, CostModel, CostTotals, Usage};
use crate::hierarchy::Design;
use crate::limits::MAX_SWEEP_POINTS;
use crate::paper::{self, PaperWorkload, TABLE2, Table2Row};
use crate::run::{IndexKind, RunConfig, RunCounts, simulate};
use crate::stats::ClassCounts;

/// One workload's runs through several designs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRuns {
    /// The workload.
    pub workload: PaperWorkload,
    /// One run per design.
    pub runs: Vec<RunCounts>,
}

impl WorkloadRuns {
    /// The counts of `design`, if it was run.
    pub fn counts(&self, design: Design) -> Option<&ClassCounts> {
        self.runs.iter().find(|r| r.config.design == design).map(|r| &r.total)
    }
}

/// The paper's workloads run through a set of designs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaperRuns {
    /// The seed of every workload.
    pub seed: u64,
    /// One entry per workload, in [`PaperWorkload::ALL`] order.
    pub workloads: Vec<WorkloadRuns>,
}

impl PaperRuns {
    /// The counts of `design` on `workload`.
    pub fn counts(
        &self,
        workload: PaperWorkload,
        design: Design,
    ) -> Result<&ClassCounts, SimError> {
        self.workloads
            .iter()
            .find(|w| w.workload == workload)
            .and_then(|w| w.counts(design))
            .ok_or_else(|| SimError::config(format!("{design} was not run on {}", workload.name())))
    }
}

/// Runs each of `workloads` (at the paper's sizes, seeded with `seed`) through each of
/// `designs`. `progress(done, total)` counts requests simulated.
pub fn run_paper(
    seed: u64,
    workloads: &[PaperWorkload],
    designs: &[Design],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PaperRuns, SimError> {
    let per_design: Vec<u64> = workloads.iter().map(|w| w.spec(seed).requests_per_client).collect();
    let total: u64 = per_design.iter().sum::<u64>() * designs.len() as u64;
    let mut done = 0u64;
    let mut out = Vec::with_capacity(workloads.len());
    for (&workload, &requests) in workloads.iter().zip(&per_design) {
        let trace = workload.spec(seed).generate()?;
        let mut runs = Vec::with_capacity(designs.len());
        for &design in designs {
            let config = RunConfig {
                design,
                client_blocks: paper::CLIENT_BLOCKS,
                array_blocks: paper::ARRAY_BLOCKS,
                warmup_requests: workload.warmup_requests(),
                index: IndexKind::Auto,
            };
            runs.push(simulate(&trace, &config, &mut |n| progress(done + n, total))?);
            done += requests;
        }
        out.push(WorkloadRuns { workload, runs });
    }
    Ok(PaperRuns { seed, workloads: out })
}

/// The designs Table 2 and the calibration need: the paper's eight.
pub fn table2_designs() -> Vec<Design> {
    Design::PAPER.to_vec()
}

/// One row of Table 2: the paper's figures beside ours under one cost model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Table2Entry {
    /// The paper's row (its figures are the "paper" columns).
    pub paper: Table2Row,
    /// Our mean latency of the base design.
    pub base_ms: f64,
    /// Our mean latency of the proposed design.
    pub proposed_ms: f64,
    /// Our speedup, base over proposed.
    pub speedup: f64,
}

impl Table2Entry {
    /// Relative differences from the paper: (base, proposed, speedup), e.g. 0.05 for 5% above.
    /// The speedup is compared with the paper's printed speedup (which is within 2% of the ratio
    /// of its printed latencies in every row).
    pub fn relative_errors(&self) -> (f64, f64, f64) {
        let rel = |ours: f64, theirs: f64| ours / theirs - 1.0;
        (
            rel(self.base_ms, self.paper.base_ms),
            rel(self.proposed_ms, self.paper.proposed_ms),
            rel(self.speedup, self.paper.speedup),
        )
    }
}

/// Table 2 under `cost`.
pub fn table2(runs: &PaperRuns, cost: &CostModel) -> Result<Vec<Table2Entry>, SimError> {
    TABLE2
        .iter()
        .map(|row| {
            let base_ms = runs.counts(row.workload, row.base)?.mean_latency_ms(cost);
            let proposed_ms = runs.counts(row.workload, row.proposed)?.mean_latency_ms(cost);
            Ok(Table2Entry { paper: *row, base_ms, proposed_ms, speedup: base_ms / proposed_ms })
        })
        .collect()
}

/// Mean latencies of two designs over a range of link bandwidths.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The link bandwidth.
    pub bits_per_second: f64,
    /// Mean latency of the base design.
    pub base_ms: f64,
    /// Mean latency of the proposed design.
    pub proposed_ms: f64,
}

/// `points` bandwidths spaced evenly on a log scale from `from` to `to` bit/s, inclusive.
pub fn log_spaced(from: f64, to: f64, points: usize) -> Result<Vec<f64>, SimError> {
    if !(from > 0.0 && to > from && from.is_finite() && to.is_finite()) {
        return Err(SimError::config("bandwidth range must be 0 < from < to"));
    }
    if !(2..=MAX_SWEEP_POINTS).contains(&points) {
        return Err(SimError::config(format!("sweep points must be 2..={MAX_SWEEP_POINTS}")));
    }
    let (lo, hi) = (from.ln(), to.ln());
    Ok((0..points).map(|i| (lo + (hi - lo) * i as f64 / (points - 1) as f64).exp()).collect())
}

/// Prices `base` and `proposed` at each bandwidth.
pub fn sweep(
    base: &ClassCounts,
    proposed: &ClassCounts,
    cost: &CostModel,
    bandwidths: &[f64],
) -> Vec<SweepPoint> {
    bandwidths
        .iter()
        .map(|&bps| {
            let c = cost.with_bandwidth(bps);
            SweepPoint {
                bits_per_second: bps,
                base_ms: base.mean_latency_ms(&c),
                proposed_ms: proposed.mean_latency_ms(&c),
            }
        })
        .collect()
}

/// Where two designs' latency curves cross as the link slows down.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Crossover {
    /// Below this bandwidth the base design is faster; above it the proposed one.
    At {
        /// The bandwidth at which both are equally fast.
        bits_per_second: f64,
        /// The wire time of one block at that bandwidth.
        wire_ms: f64,
    },
    /// The proposed design is at least as fast at every bandwidth.
    ProposedAlwaysFaster,
    /// The base design is at least as fast at every bandwidth.
    BaseAlwaysFaster,
}

/// Solves for the crossover exactly. Under either [`LinkScaling`](crate::cost::LinkScaling) a
/// design's mean latency is affine in `x = 1 / bandwidth`: `A + S x`, where `A` is its latency
/// over an infinitely fast link and `S x` its link time. The two designs are equally fast at
/// `x = (A_base - A_prop) / (S_prop - S_base)`.
pub fn crossover(base: &ClassCounts, proposed: &ClassCounts, cost: &CostModel) -> Crossover {
    let (ub, up) = (base.usage(), proposed.usage());
    let infinite = cost.with_bandwidth(f64::INFINITY);
    let reference = cost.with_bandwidth(crate::cost::PAPER_LINK_BITS_PER_SECOND);
    let x_ref = 1.0 / crate::cost::PAPER_LINK_BITS_PER_SECOND;
    let affine = |u| {
        let a = infinite.latency_ms(u);
        (a, (reference.latency_ms(u) - a) / x_ref)
    };
    let ((ab, sb), (ap, sp)) = (affine(&ub), affine(&up));
    let gain = ab - ap;
    let extra_slope = sp - sb;
    if extra_slope <= 0.0 {
        return if gain >= 0.0 {
            Crossover::ProposedAlwaysFaster
        } else {
            Crossover::BaseAlwaysFaster
        };
    }
    if gain <= 0.0 {
        return Crossover::BaseAlwaysFaster;
    }
    let bits_per_second = extra_slope / gain;
    Crossover::At { bits_per_second, wire_ms: cost.with_bandwidth(bits_per_second).wire_ms() }
}

/// One equation of the calibration: a paper latency and the usage of the run it describes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibrationPoint {
    /// Which paper figure.
    pub label: &'static str,
    /// The workload.
    pub workload: PaperWorkload,
    /// The design.
    pub design: Design,
    /// The paper's mean latency.
    pub paper_ms: f64,
    /// Our run's mean use of each cost component.
    pub usage: Usage,
    /// Whether the fit used this point (else it is a prediction).
    pub fitted: bool,
}

/// The result of [`calibrate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// The solved totals (exact, unrounded).
    pub totals: CostTotals,
    /// Every paper latency we can compare, with whether it was fitted.
    pub points: Vec<CalibrationPoint>,
}

impl Calibration {
    /// `(point, our latency under `model`)` for every point.
    pub fn predictions(&self, model: &CostModel) -> Vec<(CalibrationPoint, f64)> {
        self.points.iter().map(|p| (*p, model.latency_ms(&p.usage))).collect()
    }
}

/// The paper latencies the calibration can use, and whether it fits them (five, one per free
/// component) or predicts them.
fn calibration_targets() -> Vec<(&'static str, PaperWorkload, Design, f64, bool)> {
    let [random, seq_lru, seq_mru, zipf] = TABLE2;
    let lru_lru_demote = Design { demote: true, ..Design::BASELINE };
    vec![
        ("SEQ. (MRU client) base", seq_mru.workload, seq_mru.base, seq_mru.base_ms, true),
        (
            "SEQ. (MRU client) proposed",
            seq_mru.workload,
            seq_mru.proposed,
            seq_mru.proposed_ms,
            true,
        ),
        ("SEQ. (LRU client) base", seq_lru.workload, seq_lru.base, seq_lru.base_ms, true),
        (
            "SEQ. (LRU client) proposed",
            seq_lru.workload,
            seq_lru.proposed,
            seq_lru.proposed_ms,
            true,
        ),
        ("RANDOM base", random.workload, random.base, random.base_ms, true),
        ("RANDOM proposed", random.workload, random.proposed, random.proposed_ms, false),
        ("ZIPF base", zipf.workload, zipf.base, zipf.base_ms, false),
        ("ZIPF proposed", zipf.workload, zipf.proposed, zipf.proposed_ms, false),
        (
            "ZIPF LRU-LRU-demote",
            PaperWorkload::Zipf,
            lru_lru_demote,
            paper::ZIPF_LRU_LRU_DEMOTE_MS,
            false,
        ),
    ]
}

/// Solves for the five free cost components (array read, demotion transfer, demotion control,
/// sequential and random disk read; `T_c = 0`, 1 Gbit/s, 4 KB) that make our runs reproduce the
/// five fitted paper latencies exactly. See `docs/sim.md` for why these five.
pub fn calibrate(runs: &PaperRuns) -> Result<Calibration, SimError> {
    let mut points = Vec::new();
    for (label, workload, design, paper_ms, fitted) in calibration_targets() {
        let usage = runs.counts(workload, design)?.usage();
        points.push(CalibrationPoint { label, workload, design, paper_ms, usage, fitted });
    }
    // Unknowns are components 1..COMPONENTS (the client lookup costs 0).
    const N: usize = COMPONENTS - 1;
    let mut a = [[0.0f64; N + 1]; N];
    for (row, p) in points.iter().filter(|p| p.fitted).enumerate() {
        let u = p.usage.to_array();
        a[row][..N].copy_from_slice(&u[1..]);
        a[row][N] = p.paper_ms;
    }
    let x = solve(a).ok_or_else(|| SimError::config("calibration equations are singular"))?;
    let totals = CostTotals {
        array_ms: x[0],
        demote_transfer_ms: x[1],
        demote_control_ms: x[2],
        disk_sequential_ms: x[3],
        disk_random_ms: x[4],
    };
    Ok(Calibration { totals, points })
}

/// Gaussian elimination with partial pivoting on an augmented `N x (N+1)` matrix.
fn solve<const N: usize, const M: usize>(mut a: [[f64; M]; N]) -> Option<[f64; N]> {
    for col in 0..N {
        let pivot = (col..N).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col];
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (x, p) in r[col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut x = [0.0; N];
    for i in 0..N {
        x[i] = a[i][N] / a[i][i];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_inverts_a_small_system() {
        // x + y = 3, x - y = 1.
        let x = solve([[1.0, 1.0, 3.0], [1.0, -1.0, 1.0]]).unwrap();
        assert!((x[0] - 2.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12);
        assert!(solve([[1.0, 1.0, 3.0], [2.0, 2.0, 6.0]]).is_none());
    }

    #[test]
    fn log_spacing_hits_both_ends() {
        let b = log_spaced(10e6, 1e9, 3).unwrap();
        assert!((b[0] - 10e6).abs() < 1e-3 && (b[1] - 100e6).abs() < 1e-3);
        assert!((b[2] - 1e9).abs() < 1e-3);
        assert!(log_spaced(1e9, 10e6, 3).is_err());
        assert!(log_spaced(1.0, 2.0, MAX_SWEEP_POINTS + 1).is_err());
    }
}
