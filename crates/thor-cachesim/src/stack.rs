//! LRU stack-depth analysis, and the paper's prediction of inclusive versus exclusive hit
//! fractions from it (section 3).
//!
//! # Stack depth
//!
//! Keep every block ever referenced on a stack, most recent on top. A reference finds its block
//! at some depth (1 = on top) and moves it to the top. An LRU cache of `C` blocks holds exactly
//! the top `C` blocks of this stack, so a reference hits in it iff its depth is at most `C`: one
//! pass over a trace gives the hit fraction of LRU caches of *every* size (Mattson et al., 1970).
//! First references have no depth ("cold").
//!
//! # Computing it in O(log n) per reference
//!
//! Give every reference a time position, and mark, for each block, the position of its most
//! recent reference. The depth of a reference to `b` is one plus the number of marks after
//! `b`'s previous mark (each is a distinct block referenced since). A Fenwick tree over positions
//! counts marks in a suffix in O(log n):
//!
//! ```text
//!   positions:  1  2  3  4  5  6  7        trace: a b c b a  -> next: c
//!   block:      a  b  c  b  a
//!   mark:       .  .  1  1  1              (a's mark moved 1 -> 5, b's 2 -> 4)
//!   depth(c) = 1 + marks after position 3 = 1 + 2 = 3
//! ```
//!
//! The tree has room for twice the number of distinct blocks; when positions run out, the live
//! marks are renumbered `1..=live` in order (amortised O(1) per reference), so memory is bounded
//! by the number of blocks, not the length of the trace.
//!
//! # The prediction
//!
//! With `H(C)` the hit fraction of an LRU cache of `C` blocks, a client of `N_c` blocks over an
//! array of `N_a` blocks gets (the paper's section 3, both levels LRU, one client):
//!
//! ```text
//!               client      array                       disk
//!   inclusive   H(N_c)      H(max(N_c, N_a)) - H(N_c)    1 - H(max(N_c, N_a))
//!   exclusive   H(N_c)      H(N_c + N_a) - H(N_c)        1 - H(N_c + N_a)
//! ```
//!
//! and mean latencies from the cost model (equation 1; disk reads priced as random, since a stack
//! analysis knows nothing of block adjacency). The exclusive latency is given both without
//! demotion costs (equation 1) and with one demotion per client miss, which is what an exclusive
//! hierarchy does in steady state (the paper's equation 5 approximates this by doubling the cost
//! of an array hit).

use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::cost::{CostModel, Served, Usage};
use crate::hierarchy::Demotion;
use crate::limits::MAX_STACK_DEPTH;

/// A histogram of LRU stack depths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackDepths {
    /// `cumulative[d]`: counted references with depth at most `d + 1`, for depths up to
    /// `max_depth` (cumulative, so hit fractions are one lookup).
    cumulative: Vec<u64>,
    /// Counted references deeper than `max_depth`.
    deeper: u64,
    /// Counted first references.
    cold: u64,
    /// All counted references.
    total: u64,
}

/// A Fenwick (binary indexed) tree of counts over positions `1..=n`.
#[derive(Debug)]
struct Fenwick {
    /// `tree[i]` covers positions `(i - lowbit(i), i]`; index 0 unused.
    tree: Vec<u32>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick { tree: vec![0; n + 1] }
    }

    fn add(&mut self, mut i: usize, delta: i32) {
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum over positions `1..=i`.
    fn prefix(&self, mut i: usize) -> u32 {
        let mut sum = 0u32;
        while i > 0 {
            sum = sum.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        sum
    }

    /// Rebuilds the tree with one mark at each of positions `1..=live` and none after, in O(n).
    fn rebuild(&mut self, live: usize) {
        self.tree.fill(0);
        for i in 1..self.tree.len() {
            if i <= live {
                self.tree[i] += 1;
            }
            let parent = i + (i & i.wrapping_neg());
            if parent < self.tree.len() {
                let v = self.tree[i];
                self.tree[parent] += v;
            }
        }
    }
}

impl StackDepths {
    /// Analyses a stream of dense block numbers below `block_count`. The first `warmup`
    /// references fill the stack and are not counted; depths above `max_depth` are counted
    /// together.
    pub fn analyze(
        blocks: impl IntoIterator<Item = u32>,
        block_count: u32,
        warmup: u64,
        max_depth: usize,
    ) -> Result<Self, SimError> {
        if max_depth == 0 || max_depth > MAX_STACK_DEPTH {
            return Err(SimError::config(format!("max depth must be 1..={MAX_STACK_DEPTH}")));
        }
        let n = block_count as usize;
        let capacity = 2 * n + 16;
        // last[b]: position of b's latest reference, 0 if none; owner[p]: block referenced at p.
        let mut last = vec![0u32; n];
        let mut owner = vec![0u32; capacity + 1];
        let mut tree = Fenwick::new(capacity);
        let mut histogram = vec![0u64; max_depth];
        let (mut deeper, mut cold, mut total) = (0u64, 0u64, 0u64);
        let mut live = 0usize;
        let mut next = 1usize;
        for (i, b) in blocks.into_iter().enumerate() {
            if next > capacity {
                // Renumber the live marks 1..=live, keeping their order.
                let mut renumbered = 0u32;
                for p in 1..next {
                    let blk = owner[p];
                    if last[blk as usize] == p as u32 {
                        renumbered += 1;
                        owner[renumbered as usize] = blk;
                        last[blk as usize] = renumbered;
                    }
                }
                debug_assert_eq!(renumbered as usize, live);
                tree.rebuild(live);
                next = live + 1;
            }
            let counted = i as u64 >= warmup;
            let Some(slot) = last.get(b as usize).copied() else {
                return Err(SimError::config(format!("block {b} not below {block_count}")));
            };
            if slot != 0 {
                let after = live as u32 - tree.prefix(slot as usize);
                let depth = after as usize + 1;
                if counted {
                    match histogram.get_mut(depth - 1) {
                        Some(h) => *h += 1,
                        None => deeper += 1,
                    }
                }
                tree.add(slot as usize, -1);
                live -= 1;
            } else if counted {
                cold += 1;
            }
            total += u64::from(counted);
            tree.add(next, 1);
            owner[next] = b;
            last[b as usize] = next as u32;
            live += 1;
            next += 1;
        }
        let mut cumulative = histogram;
        let mut running = 0u64;
        for c in &mut cumulative {
            running += *c;
            *c = running;
        }
        Ok(StackDepths { cumulative, deeper, cold, total })
    }

    /// References counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Counted first references (misses in a cache of any size).
    pub fn cold(&self) -> u64 {
        self.cold
    }

    /// Counted references deeper than the analysis resolved.
    pub fn deeper(&self) -> u64 {
        self.deeper
    }

    /// The deepest depth resolved.
    pub fn max_depth(&self) -> usize {
        self.cumulative.len()
    }

    /// `H(C)`: the hit fraction of an LRU cache of `cache_blocks` blocks (capped at the deepest
    /// resolved depth).
    pub fn hit_fraction(&self, cache_blocks: usize) -> f64 {
        if self.total == 0 || cache_blocks == 0 {
            return 0.0;
        }
        let d = cache_blocks.min(self.cumulative.len());
        self.cumulative[d - 1] as f64 / self.total as f64
    }

    /// The paper's section-3 prediction for a client of `client_blocks` over an array of
    /// `array_blocks` (see the module documentation).
    pub fn predict(
        &self,
        client_blocks: usize,
        array_blocks: usize,
        cost: &CostModel,
    ) -> Prediction {
        let hc = self.hit_fraction(client_blocks);
        let inclusive_agg = self.hit_fraction(client_blocks.max(array_blocks));
        let exclusive_agg = self.hit_fraction(client_blocks + array_blocks);
        let level = |aggregate: f64, demote: bool| {
            let (ha, hd) = (aggregate - hc, 1.0 - aggregate);
            let mut usage = Usage::default();
            usage.add_scaled(Usage::of(Served::Client, Demotion::None), hc);
            usage.add_scaled(Usage::of(Served::Array, Demotion::None), ha);
            usage.add_scaled(Usage::of(Served::DiskRandom, Demotion::None), hd);
            let ideal = cost.latency_ms(&usage);
            if demote {
                usage.add_scaled(Usage { demote_transfers: 1.0, ..Usage::default() }, ha + hd);
            }
            Predicted {
                client_hit_fraction: hc,
                array_hit_fraction: ha,
                disk_fraction: hd,
                mean_latency_ms: ideal,
                mean_latency_with_demotions_ms: cost.latency_ms(&usage),
            }
        };
        Prediction { inclusive: level(inclusive_agg, false), exclusive: level(exclusive_agg, true) }
    }
}

/// Predicted measures for one kind of hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// Fraction of requests hitting in the client.
    pub client_hit_fraction: f64,
    /// Fraction hitting in the array.
    pub array_hit_fraction: f64,
    /// Fraction going to disk.
    pub disk_fraction: f64,
    /// Mean latency by the paper's equation 1 (no demotion costs).
    pub mean_latency_ms: f64,
    /// Mean latency with one demotion per client miss (equal to `mean_latency_ms` for the
    /// inclusive hierarchy, which does not demote).
    pub mean_latency_with_demotions_ms: f64,
}

/// The section-3 prediction for inclusive and exclusive hierarchies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Both levels LRU, no demotion.
    pub inclusive: Predicted,
    /// A perfectly exclusive hierarchy of the same sizes.
    pub exclusive: Predicted,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Depths by brute force: the position in an explicit stack.
    fn naive(trace: &[u32]) -> Vec<Option<usize>> {
        let mut stack: Vec<u32> = Vec::new();
        trace
            .iter()
            .map(|&b| {
                let depth = stack.iter().rev().position(|&x| x == b).map(|p| p + 1);
                if let Some(d) = depth {
                    stack.remove(stack.len() - d);
                }
                stack.push(b);
                depth
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn depths_match_an_explicit_stack(
            trace in proptest::collection::vec(0u32..12, 0..300),
            max_depth in 1usize..14,
        ) {
            let depths = StackDepths::analyze(trace.iter().copied(), 12, 0, max_depth).unwrap();
            let want = naive(&trace);
            let cold = want.iter().filter(|d| d.is_none()).count() as u64;
            proptest::prop_assert_eq!(depths.cold(), cold);
            for c in 1..=max_depth {
                let hits = want.iter().filter(|d| d.is_some_and(|d| d <= c)).count();
                let h = if trace.is_empty() { 0.0 } else { hits as f64 / trace.len() as f64 };
                proptest::prop_assert!((depths.hit_fraction(c) - h).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn hand_worked_depths_and_prediction() {
        // a b c b a c: depths -, -, -, 2, 3, 3.
        let d = StackDepths::analyze([0, 1, 2, 1, 0, 2], 3, 0, 8).unwrap();
        assert_eq!((d.total(), d.cold()), (6, 3));
        assert_eq!(d.hit_fraction(1), 0.0);
        assert_eq!(d.hit_fraction(2), 1.0 / 6.0);
        assert_eq!(d.hit_fraction(3), 3.0 / 6.0);
        // A client of 1 over an array of 2: inclusive is as big as the array (2), exclusive as
        // both (3).
        let p = d.predict(1, 2, &CostModel::round());
        assert_eq!(p.inclusive.array_hit_fraction, 1.0 / 6.0);
        assert_eq!(p.exclusive.array_hit_fraction, 3.0 / 6.0);
        // Warm-up references fill the stack but are not counted.
        let d = StackDepths::analyze([0, 1, 2, 1, 0, 2], 3, 3, 8).unwrap();
        assert_eq!((d.total(), d.cold()), (3, 0));
    }
}
