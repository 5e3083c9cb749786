//! The paper's experimental set-ups and the figures it reports, kept apart from the simulator so
//! that they can only ever appear as the "paper" column beside our own results.
//!
//! Source: `papers/demote-exclusive-caching.txt` (Wong, Ganger and Wilkes), sections 4 to 5 and
//! Table 2.

use serde::{Deserialize, Serialize};

use crate::hierarchy::Design;
use crate::workload::{Pattern, Sharing, WorkloadSpec};

/// N_c: client cache size in the synthetic experiments (64 MB of 4 KB blocks, section 4.2).
pub const CLIENT_BLOCKS: usize = 16_384;
/// N_a: array cache size in the synthetic experiments.
pub const ARRAY_BLOCKS: usize = 16_384;
/// N_rand = N_c + N_a (section 4.4).
pub const RANDOM_BLOCKS: u64 = 32_768;
/// N_seq = N_c + N_a - 1: "we needed to allow for the most recently referenced block being
/// double-cached" (section 4.5).
pub const SEQUENTIAL_BLOCKS: u64 = 32_767;
/// N_zipf = 1.5 (N_c + N_a) (section 4.6).
pub const ZIPF_BLOCKS: u64 = 49_152;
/// Measured requests per warm-up request: "N one-block read requests to warm up the system,
/// followed by 10 N one-block requests" (sections 4.4 to 4.6).
pub const MEASURED_PER_WARMUP: u64 = 10;

/// The paper's synthetic workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaperWorkload {
    /// Section 4.4.
    Random,
    /// Section 4.5.
    Sequential,
    /// Section 4.6.
    Zipf,
}

impl PaperWorkload {
    /// All three, in the paper's order.
    pub const ALL: [PaperWorkload; 3] =
        [PaperWorkload::Random, PaperWorkload::Sequential, PaperWorkload::Zipf];

    /// The paper's name.
    pub fn name(self) -> &'static str {
        self.pattern().name()
    }

    /// The access pattern at the paper's size.
    pub fn pattern(self) -> Pattern {
        match self {
            PaperWorkload::Random => Pattern::Random { blocks: RANDOM_BLOCKS },
            PaperWorkload::Sequential => Pattern::Sequential { blocks: SEQUENTIAL_BLOCKS },
            PaperWorkload::Zipf => Pattern::Zipf { blocks: ZIPF_BLOCKS, exponent: 1.0 },
        }
    }

    /// Warm-up requests: one working set's worth.
    pub fn warmup_requests(self) -> u64 {
        self.pattern().blocks()
    }

    /// The single-client workload: warm-up plus ten times as many measured requests.
    pub fn spec(self, seed: u64) -> WorkloadSpec {
        WorkloadSpec {
            pattern: self.pattern(),
            clients: 1,
            sharing: Sharing::Disjoint,
            requests_per_client: self.warmup_requests() * (1 + MEASURED_PER_WARMUP),
            seed,
        }
    }
}

/// One row of the paper's Table 2.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Table2Row {
    /// The row's label in the paper.
    pub label: &'static str,
    /// The workload.
    pub workload: PaperWorkload,
    /// The design the paper compares against.
    pub base: Design,
    /// The design the paper proposes for this workload.
    pub proposed: Design,
    /// The paper's mean latency of `base`.
    pub base_ms: f64,
    /// The paper's mean latency of `proposed`.
    pub proposed_ms: f64,
    /// The paper's speedup (base over proposed), as printed.
    pub speedup: f64,
}

/// The synthetic rows of Table 2. (The TRACE row, 5.92 ms / 5.59 ms / 1.06, needs the 1992 HP
/// `snake` trace, which is not available; see `docs/sim.md`.)
pub const TABLE2: [Table2Row; 4] = {
    use thor_policy::PolicyKind::{Lru, Mru};
    [
        Table2Row {
            label: "RANDOM",
            workload: PaperWorkload::Random,
            base: Design::BASELINE,
            proposed: Design::PROPOSED,
            base_ms: 4.77,
            proposed_ms: 0.64,
            speedup: 7.5,
        },
        Table2Row {
            label: "SEQ. (LRU client)",
            workload: PaperWorkload::Sequential,
            base: Design::BASELINE,
            proposed: Design::PROPOSED,
            base_ms: 1.67,
            proposed_ms: 0.48,
            speedup: 3.5,
        },
        Table2Row {
            label: "SEQ. (MRU client)",
            workload: PaperWorkload::Sequential,
            base: Design { client: Mru, array: Lru, demote: false },
            proposed: Design { client: Mru, array: Mru, demote: true },
            base_ms: 0.12,
            proposed_ms: 0.13,
            speedup: 0.9,
        },
        Table2Row {
            label: "ZIPF",
            workload: PaperWorkload::Zipf,
            base: Design::BASELINE,
            proposed: Design::PROPOSED,
            base_ms: 1.41,
            proposed_ms: 0.85,
            speedup: 1.7,
        },
    ]
};

/// Section 4.6: "The mean latency for LRU-LRU-demote is 1.19 ms" on ZIPF.
pub const ZIPF_LRU_LRU_DEMOTE_MS: f64 = 1.19;

/// Sections 5 and 7: demotion stops paying "only when the link had been slowed down by a factor
/// of about 20, to below 50 Mbit/s".
pub const CROSSOVER_BITS_PER_SECOND: f64 = 50e6;

/// Section 5: the bandwidth sweep runs from 1 Gbit/s down to 10 Mbit/s.
pub const SWEEP_BITS_PER_SECOND: (f64, f64) = (10e6, 1e9);
