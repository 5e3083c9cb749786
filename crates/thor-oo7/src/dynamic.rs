//! The HAC paper's dynamic traversal (section 4.1.1).
//!
//! A sequence of operations over two databases. Each operation picks a database (the hot one
//! with probability 0.9), follows a random path from the root of its assembly tree to one
//! composite part, and runs T1-, T1 or T1+ on that part's graph. Of 7,500 operations only the
//! last 5,000 are measured; after the 5,000th the hot and cold databases swap roles, so the
//! measured part includes a shift of the working set.
//!
//! # Two databases
//!
//! The two "databases" are two modules of one database (load it with `modules: 2`): each
//! module is a complete medium-sized OO7 database with its own assembly tree, composite parts
//! and pages. The client library talks to one server per session, and for the client cache, the
//! only thing measured, two modules on one server and two servers are the same thing: two
//! disjoint sets of pages reached through two roots. (Shared links between the modules exist
//! but are never traversed.)
//!
//! # The mix
//!
//! The paper tunes HAC with a mix "such that 80% of the object accesses are performed by T1-
//! operations and 20% by T1 operations". T1- visits half as many parts as T1, so that is a T1-
//! operation with probability 8/9 and T1 with 1/9 ([`DynamicConfig::paper`]). The mix is a
//! setting.
//!
//! # Randomness
//!
//! Operation `i` draws from its own stream ([`crate::rng::Rng::stream`] with tag `RUN`), first
//! the database, then the traversal, then the path. Thor and the native baseline therefore make
//! the same choices, and a run is reproducible from its seed.

use crate::error::Oo7Error;
use crate::limits::DYNAMIC_OPS_MAX;
use crate::ops::{GraphMode, Op};
use crate::rng::{Rng, tag};

/// Settings of a dynamic traversal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DynamicConfig {
    /// Operations in all.
    pub ops: u32,
    /// Operations run before measuring starts.
    pub warmup_ops: u32,
    /// The hot and cold databases swap roles after this many operations.
    pub shift_at: u32,
    /// Probability that an operation goes to the hot database.
    pub hot_fraction: f64,
    /// Relative weights of T1-, T1 and T1+ operations.
    pub mix: [f64; 3],
    /// Seed of the choices.
    pub seed: u64,
}

impl DynamicConfig {
    /// The paper's workload: 7,500 operations, 2,500 unmeasured, the shift after 5,000, 90% to
    /// the hot database, 80% of accesses from T1- and 20% from T1.
    pub fn paper() -> DynamicConfig {
        DynamicConfig {
            ops: 7_500,
            warmup_ops: 2_500,
            shift_at: 5_000,
            hot_fraction: 0.9,
            mix: [8.0, 1.0, 0.0],
            seed: 1,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), Oo7Error> {
        let bad = |m: &str| Err(Oo7Error::BadParams(format!("dynamic traversal: {m}")));
        if self.ops == 0 || self.ops as usize > DYNAMIC_OPS_MAX {
            return bad("operations must be in 1..=10,000,000");
        }
        if self.warmup_ops >= self.ops {
            return bad("the warm-up must leave operations to measure");
        }
        if !(0.0..=1.0).contains(&self.hot_fraction) {
            return bad("the hot fraction must be in 0..=1");
        }
        if self.mix.iter().any(|w| !w.is_finite() || *w < 0.0)
            || self.mix.iter().sum::<f64>() <= 0.0
        {
            return bad("the mix needs non-negative weights, not all zero");
        }
        Ok(())
    }

    /// Operation `i`'s database (0 or 1), traversal, and the stream for its path.
    pub fn op(&self, i: u32) -> (usize, Op, Rng) {
        let mut r = Rng::stream(self.seed, tag::RUN, u64::from(i));
        let hot = usize::from(i >= self.shift_at);
        let db = if r.unit() < self.hot_fraction { hot } else { 1 - hot };
        let total: f64 = self.mix.iter().sum();
        let x = r.unit() * total;
        let op = if x < self.mix[0] {
            Op::T1Minus
        } else if x < self.mix[0] + self.mix[1] || self.mix[2] == 0.0 {
            Op::T1
        } else {
            Op::T1Plus
        };
        (db, op, r)
    }
}

/// The graph mode of a dynamic operation.
pub(crate) fn mode(op: Op) -> GraphMode {
    op.graph_mode().expect("dynamic operations are graph traversals")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_mix_gives_80_percent_of_accesses_to_t1_minus() {
        let c = DynamicConfig::paper();
        c.validate().unwrap();
        let (mut minus, mut t1, mut hot) = (0u32, 0u32, 0u32);
        for i in 0..c.ops {
            let (db, op, _) = c.op(i);
            match op {
                Op::T1Minus => minus += 1,
                Op::T1 => t1 += 1,
                _ => panic!("no T1+ in the paper mix"),
            }
            hot += u32::from(db == usize::from(i >= c.shift_at));
        }
        // T1- reads half as much as T1.
        let share = f64::from(minus) * 0.5 / (f64::from(minus) * 0.5 + f64::from(t1));
        assert!((0.75..0.85).contains(&share), "{share}");
        assert!((0.87..0.93).contains(&(f64::from(hot) / f64::from(c.ops))));
        assert_eq!(c.op(17).0, c.op(17).0, "reproducible");
    }
}
