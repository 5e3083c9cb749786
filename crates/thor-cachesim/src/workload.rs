//! Synthetic workloads: the paper's RANDOM, SEQUENTIAL and ZIPF (section 3), for one client or
//! several.
//!
//! # Patterns
//!
//! Each pattern draws one-block reads from a working set of `blocks` blocks numbered `0..blocks`:
//!
//! - **RANDOM**: every block equally likely, independently (a TPC-C-like load).
//! - **SEQUENTIAL**: `0, 1, ..., blocks-1, 0, 1, ...` forever (a looping scan).
//! - **ZIPF**: block `i` (0-based) with probability proportional to `1 / (i+1)^s`; the paper's
//!   "Zipf-like" distribution is `s = 1`. Block 0 is the most popular. The paper's 90/6/4 split of
//!   requests over the three thirds of its 49,152 blocks (section 4.6) is a consequence of `s = 1`
//!   and this size, not a separate definition; [`zipf_region_shares`] computes it.
//!
//! # Several clients
//!
//! With `clients > 1` the clients issue requests in round-robin order (client 0, 1, ..., 0, 1, ...),
//! one request at a time, as the paper's experiments let each read finish before the next began:
//!
//! - [`Sharing::Disjoint`]: each client runs its own independent stream (its own PRNG stream) over
//!   its own blocks, offset by `client * blocks`. The array sees the union.
//! - [`Sharing::Conjoint`]: the clients run in lock-step over one stream: every request of the
//!   stream is issued by client 0 (the "leader"), then by client 1, and so on (section 6).
//!
//! # Determinism
//!
//! A workload is a pure function of its [`WorkloadSpec`], including the seed: the PRNG is
//! xoshiro256++ seeded with `seed` (and, for disjoint clients, a per-client stream derived from
//! it), and ZIPF uses `rand_distr`'s rejection-inversion sampler, which is exact for `1/i^s`.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::limits::{MAX_CLIENTS, MAX_DISTINCT_BLOCKS, MAX_TRACE_REQUESTS};
use crate::trace::{Request, Trace};

/// The access pattern of one client's stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "pattern", rename_all = "snake_case")]
pub enum Pattern {
    /// Uniform over `blocks` blocks.
    Random {
        /// The working-set size.
        blocks: u64,
    },
    /// A loop over `blocks` blocks.
    Sequential {
        /// The loop length.
        blocks: u64,
    },
    /// Block `i` with probability proportional to `1/(i+1)^exponent`.
    Zipf {
        /// The working-set size.
        blocks: u64,
        /// The skew; the paper's "Zipf-like" workload is 1.
        exponent: f64,
    },
}

impl Pattern {
    /// The working-set size of one stream.
    pub fn blocks(&self) -> u64 {
        match *self {
            Pattern::Random { blocks }
            | Pattern::Sequential { blocks }
            | Pattern::Zipf { blocks, .. } => blocks,
        }
    }

    /// The paper's name for the pattern.
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Random { .. } => "RANDOM",
            Pattern::Sequential { .. } => "SEQUENTIAL",
            Pattern::Zipf { .. } => "ZIPF",
        }
    }
}

/// How several clients' streams relate (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharing {
    /// Independent streams over disjoint blocks.
    Disjoint,
    /// One stream, issued by every client in lock-step.
    Conjoint,
}

/// Everything that determines a synthetic workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The pattern of each client's stream.
    pub pattern: Pattern,
    /// The number of clients, `1..=MAX_CLIENTS`.
    pub clients: u16,
    /// How the clients' streams relate; irrelevant with one client.
    pub sharing: Sharing,
    /// Requests issued by each client (warm-up included).
    pub requests_per_client: u64,
    /// The PRNG seed; the same spec always yields the same trace.
    pub seed: u64,
}

impl WorkloadSpec {
    /// Checks the spec against the simulator's limits.
    pub fn validate(&self) -> Result<(), SimError> {
        let blocks = self.pattern.blocks();
        if self.clients == 0 || self.clients as usize > MAX_CLIENTS {
            return Err(SimError::config(format!("clients must be 1..={MAX_CLIENTS}")));
        }
        if blocks == 0 {
            return Err(SimError::config("a workload needs at least one block"));
        }
        let streams = match self.sharing {
            Sharing::Disjoint => u64::from(self.clients),
            Sharing::Conjoint => 1,
        };
        if blocks.checked_mul(streams).is_none_or(|total| total > MAX_DISTINCT_BLOCKS) {
            return Err(SimError::config(format!(
                "{blocks} blocks x {streams} streams exceeds {MAX_DISTINCT_BLOCKS} blocks"
            )));
        }
        let total = self.requests_per_client.checked_mul(u64::from(self.clients));
        if total.is_none_or(|t| t > MAX_TRACE_REQUESTS) {
            return Err(SimError::config(format!(
                "{} requests x {} clients exceeds {MAX_TRACE_REQUESTS}",
                self.requests_per_client, self.clients
            )));
        }
        if let Pattern::Zipf { exponent, .. } = self.pattern
            && !(exponent.is_finite() && exponent >= 0.0)
        {
            return Err(SimError::config("the Zipf exponent must be finite and >= 0"));
        }
        Ok(())
    }

    /// Generates the trace.
    pub fn generate(&self) -> Result<Trace, SimError> {
        self.validate()?;
        let clients = self.clients;
        let blocks = self.pattern.blocks();
        let (streams, offset_per_stream) = match self.sharing {
            Sharing::Disjoint => (clients as usize, blocks),
            Sharing::Conjoint => (1, 0),
        };
        let mut generators: Vec<StreamGen> = (0..streams)
            .map(|s| StreamGen::new(self.pattern, stream_seed(self.seed, s as u64)))
            .collect::<Result<_, _>>()?;
        let total = self.requests_per_client * u64::from(clients);
        let mut requests = Vec::with_capacity(total as usize);
        for _ in 0..self.requests_per_client {
            match self.sharing {
                Sharing::Disjoint => {
                    for (c, generator) in generators.iter_mut().enumerate() {
                        let block = generator.next_block() + c as u64 * offset_per_stream;
                        requests.push(Request { client: c as u16, block: block as u32 });
                    }
                }
                Sharing::Conjoint => {
                    let block = generators[0].next_block() as u32;
                    for c in 0..clients {
                        requests.push(Request { client: c, block });
                    }
                }
            }
        }
        Trace::from_dense(requests, clients, (blocks * streams as u64) as u32)
    }
}

/// The seed of stream `stream` of a workload seeded with `seed`: a SplitMix64 step, so that
/// nearby seeds and streams give unrelated PRNG states.
fn stream_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed.wrapping_add(stream.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One client's stream generator.
#[derive(Debug)]
struct StreamGen {
    /// The pattern and its state.
    kind: GenKind,
    /// The stream's PRNG.
    rng: Xoshiro256PlusPlus,
}

/// Per-pattern generator state.
#[derive(Debug)]
enum GenKind {
    /// Uniform over `0..blocks`.
    Random { blocks: u64 },
    /// The next block of the loop, and the loop length.
    Sequential { next: u64, blocks: u64 },
    /// The Zipf sampler (yields ranks `1..=blocks`).
    Zipf { sampler: Zipf<f64>, blocks: u64 },
}

impl StreamGen {
    fn new(pattern: Pattern, seed: u64) -> Result<Self, SimError> {
        let kind = match pattern {
            Pattern::Random { blocks } => GenKind::Random { blocks },
            Pattern::Sequential { blocks } => GenKind::Sequential { next: 0, blocks },
            Pattern::Zipf { blocks, exponent } => GenKind::Zipf {
                sampler: Zipf::new(blocks as f64, exponent)
                    .map_err(|e| SimError::config(format!("Zipf distribution: {e}")))?,
                blocks,
            },
        };
        Ok(StreamGen { kind, rng: Xoshiro256PlusPlus::seed_from_u64(seed) })
    }

    #[inline]
    fn next_block(&mut self) -> u64 {
        match &mut self.kind {
            GenKind::Random { blocks } => self.rng.random_range(0..*blocks),
            GenKind::Sequential { next, blocks } => {
                let b = *next;
                *next = if b + 1 == *blocks { 0 } else { b + 1 };
                b
            }
            GenKind::Zipf { sampler, blocks } => {
                // Ranks are 1-based floats in [1, blocks]; clamp guards the float edge.
                let rank = sampler.sample(&mut self.rng) as u64;
                rank.clamp(1, *blocks) - 1
            }
        }
    }
}

/// The share of requests that a Zipf distribution over `blocks` blocks with exponent `s` sends to
/// each of `regions` equal, consecutive regions of blocks (most popular first). For the paper's
/// 49,152 blocks, `s = 1` and three regions this is about 90%, 6% and 4%.
pub fn zipf_region_shares(blocks: u64, exponent: f64, regions: u64) -> Vec<f64> {
    let weight = |i: u64| 1.0 / ((i + 1) as f64).powf(exponent);
    let total: f64 = (0..blocks).map(weight).sum();
    (0..regions)
        .map(|r| {
            let (lo, hi) = (r * blocks / regions, (r + 1) * blocks / regions);
            (lo..hi).map(weight).sum::<f64>() / total
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: Pattern, clients: u16, sharing: Sharing, n: u64) -> WorkloadSpec {
        WorkloadSpec { pattern, clients, sharing, requests_per_client: n, seed: 7 }
    }

    #[test]
    fn sequential_loops_and_clients_interleave() {
        let t =
            spec(Pattern::Sequential { blocks: 3 }, 2, Sharing::Disjoint, 4).generate().unwrap();
        let got: Vec<(u16, u32)> = t.requests().iter().map(|r| (r.client, r.block)).collect();
        assert_eq!(got, [(0, 0), (1, 3), (0, 1), (1, 4), (0, 2), (1, 5), (0, 0), (1, 3)]);
        assert_eq!(t.block_count(), 6);
        let t = spec(Pattern::Random { blocks: 50 }, 3, Sharing::Conjoint, 10).generate().unwrap();
        for step in t.requests().chunks(3) {
            assert!(step.iter().all(|r| r.block == step[0].block));
            assert_eq!(step.iter().map(|r| r.client).collect::<Vec<_>>(), [0, 1, 2]);
        }
    }

    #[test]
    fn a_seed_reproduces_a_workload() {
        let s = spec(Pattern::Zipf { blocks: 1000, exponent: 1.0 }, 2, Sharing::Disjoint, 500);
        assert_eq!(s.generate().unwrap(), s.generate().unwrap());
        let other = WorkloadSpec { seed: 8, ..s };
        assert_ne!(s.generate().unwrap(), other.generate().unwrap());
    }

    #[test]
    fn zipf_matches_its_definition() {
        // The paper's sizes give its 90/6/4 split.
        let shares = zipf_region_shares(49_152, 1.0, 3);
        assert!((shares[0] - 0.90).abs() < 0.01, "{shares:?}");
        assert!((shares[1] - 0.06).abs() < 0.01, "{shares:?}");
        assert!((shares[2] - 0.04).abs() < 0.01, "{shares:?}");
        // And the sampler follows 1/i: block 0 about twice as often as block 1.
        let t = spec(Pattern::Zipf { blocks: 30, exponent: 1.0 }, 1, Sharing::Disjoint, 200_000)
            .generate()
            .unwrap();
        let mut counts = [0u64; 30];
        for r in t.requests() {
            counts[r.block as usize] += 1;
        }
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 2.0).abs() < 0.1, "{ratio}");
        let ratio = counts[0] as f64 / counts[9] as f64;
        assert!((ratio - 10.0).abs() < 1.0, "{ratio}");
    }

    #[test]
    fn limits_are_enforced() {
        assert!(spec(Pattern::Random { blocks: 0 }, 1, Sharing::Disjoint, 1).generate().is_err());
        assert!(spec(Pattern::Random { blocks: 1 }, 0, Sharing::Disjoint, 1).generate().is_err());
        let huge = spec(Pattern::Random { blocks: 1 << 40 }, 1, Sharing::Disjoint, 1);
        assert!(huge.generate().is_err());
        let many = spec(Pattern::Random { blocks: 10 }, 4, Sharing::Disjoint, 1 << 40);
        assert!(many.generate().is_err());
        let bad = spec(Pattern::Zipf { blocks: 10, exponent: f64::NAN }, 1, Sharing::Disjoint, 1);
        assert!(bad.generate().is_err());
    }
}
