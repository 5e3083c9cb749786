//! The benchmark's random source: SplitMix64, split into one stream per entity.
//!
//! The original OO7 generator used C's `random()`; `oo7-spec.md` leaves the choice to us, asking
//! only that a seed reproduce the database byte for byte. This module is that choice, written
//! down so that another implementation can reproduce our databases exactly.
//!
//! # The generator
//!
//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
//! OOPSLA 2014): a 64-bit state advanced by the golden-ratio increment and hashed by a fixed
//! mixing function. It passes BigCrush, needs no tables, and, most useful here, any 64-bit value
//! is a good seed, so streams can be derived by hashing.
//!
//! ```text
//! next():  state += 0x9E37_79B9_7F4A_7C15
//!          z = state
//!          z = (z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9
//!          z = (z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB
//!          return z ^ (z >> 31)
//! ```
//!
//! # Streams
//!
//! Every entity that draws random values has its own stream, seeded by
//! `mix(mix(seed ^ tag * K1) ^ index * K2)` (see [`Rng::stream`]): the module, each assembly and
//! each composite part (which draws for its atomic parts and connections too). The values an
//! entity gets therefore do not depend on the order in which entities are generated, which lets
//! the generator plan the assembly links before it writes any object, and lets the native
//! baseline and the thor loader share one plan.
//!
//! # Ranges
//!
//! [`Rng::below`] maps a draw to `[0, n)` by Lemire's multiply-shift, `(x * n) >> 64`: no
//! division, no loop, and a bias below `n / 2^64`, which no OO7 measurement can see.

/// A SplitMix64 generator. See the module documentation.
#[derive(Debug, Clone)]
pub struct Rng {
    /// The generator state (advanced by the golden-ratio increment on every draw).
    state: u64,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective mix of 64 bits.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Stream tags: which kind of entity a stream belongs to.
pub mod tag {
    /// A module (its date and type).
    pub const MODULE: u64 = 1;
    /// A complex assembly.
    pub const COMPLEX: u64 = 2;
    /// A base assembly (its date, type and the composite parts it uses).
    pub const BASE: u64 = 3;
    /// A composite part (its own values, its atomic parts' and its connections').
    pub const COMPOSITE: u64 = 4;
    /// The random choices of a traversal or query run (not the database).
    pub const RUN: u64 = 5;
}

impl Rng {
    /// A generator seeded with `seed` directly.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The stream of entity `index` of kind `tag` (see [`tag`]) under the database seed.
    pub fn stream(seed: u64, tag: u64, index: u64) -> Rng {
        let a = mix64(seed ^ tag.wrapping_mul(0xD1B5_4A32_D192_ED03));
        Rng::new(mix64(a ^ index.wrapping_mul(0xAEF1_7502_108E_F2D9)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// A uniform value in `[0, n)` (`n > 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform value in `[lo, hi]`.
    #[inline]
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        debug_assert!(lo <= hi);
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }

    /// A uniform value in `[0, 1)` with 53 bits.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // The reference sequence for seed 1234567 (from the authors' Java implementation,
        // `java.util.SplittableRandom`'s mixing function applied to the same increments).
        let mut r = Rng::new(1_234_567);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            vec![6_457_827_717_110_365_317, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423]
        );
    }

    #[test]
    fn streams_are_independent_of_order_and_distinct() {
        let a = Rng::stream(7, tag::COMPOSITE, 3).next_u64();
        let _ = Rng::stream(7, tag::COMPOSITE, 4).next_u64();
        assert_eq!(a, Rng::stream(7, tag::COMPOSITE, 3).next_u64());
        assert_ne!(a, Rng::stream(7, tag::BASE, 3).next_u64());
        assert_ne!(a, Rng::stream(8, tag::COMPOSITE, 3).next_u64());
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            let v = r.range(1000, 1999);
            assert!((1000..=1999).contains(&v));
            assert!(r.below(3) < 3);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
