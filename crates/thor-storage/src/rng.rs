//! A tiny deterministic PRNG (SplitMix64) for simulated crashes.
//!
//! [`MemDisk::crash`](crate::MemDisk::crash) must turn one seed into one crash outcome on every
//! platform and with every version of every dependency, so that a failing seed printed by a
//! test replays exactly. A dozen lines of SplitMix64 guarantee that; an external crate's stream
//! may change between releases. Tests may use it for the same reason.

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, passes BigCrush, and every seed
/// (including 0) gives a good stream.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    /// The generator's whole state: advanced by a fixed odd constant per draw.
    state: u64,
}

impl SplitMix64 {
    /// A generator whose stream is determined by `seed` alone.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0). The modulo bias is below 2^-32 for the small `n`
    /// used here, which does not matter for choosing crash points.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A value in `0..=n`.
    pub fn up_to(&mut self, n: usize) -> usize {
        // `n + 1` cannot overflow a u64 for any in-memory length.
        self.below(n as u64 + 1) as usize
    }

    /// True with probability 1/2.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_in_range() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        // The reference output of SplitMix64 seeded with 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            assert!(r.up_to(3) <= 3);
        }
        assert_eq!(r.below(0), 0);
    }
}
