//! Object usage and frame usage (`papers/hac-sosp97.txt` sections 3.2.1 and 3.2.2).
//!
//! # Object usage
//!
//! Each installed object has 4 usage bits in its indirection-table entry. An access sets the
//! top bit; when the primary scan pointer passes the object's frame the value *decays*: one is
//! added, then it is shifted right.
//!
//! ```text
//!   access:  u := u | 0b1000
//!   decay:   u := (u + 1) >> 1        15 → 8 → 4 → 2 → 1 → 1 → ...      0 → 0
//! ```
//!
//! Each bit is one decay period, so a higher value means "used more recently, and when two
//! objects were last used in the same period, used in more of the periods before": LRU with a
//! bias towards frequently used objects. The "+ 1" keeps an object that was ever used at 1 or
//! more, apart from objects never used (0), which the paper found to cut miss rates by up to
//! 20%. Uninstalled objects and invalidated ones count as usage 0.
//!
//! # Frame usage
//!
//! A frame's usage is a pair `<T, H>`. `T`, the *threshold*, is the smallest usage value such
//! that the fraction `H` of the frame's objects whose usage is above `T` (the *hot* ones, kept
//! when the frame is compacted) is below the retention fraction `R`. With R = 2/3 (the paper's
//! Figure 3):
//!
//! ```text
//!   F1 usages  3 3 5 7 12 0      T=0: H=5/6   T=1: 5/6   T=2: 5/6   T=3: 3/6 < 2/3  → <3, 1/2>
//!   F2 usages  0 0 0 9 0 1       T=0: H=2/6 < 2/3                                   → <0, 1/3>
//! ```
//!
//! Object counts stand in for bytes (cheap, and close when objects are much smaller than a
//! page). *No-steal:* an object modified by the current transaction stays whatever its usage,
//! so it counts as hot at every threshold (the paper: "we use the maximum usage value for
//! modified objects"). If no threshold gets `H` below `R` because too many objects are
//! modified, `T` is the maximum usage and `H` the modified fraction: such a frame is the most
//! valuable of all and frees little.
//!
//! A frame F is *less valuable* than G if `F.T < G.T`, or `F.T = G.T` and `F.H < G.H`: its hot
//! objects are less hot, or equally hot but fewer of them are kept.

use std::cmp::Ordering;

use crate::core::{F_MODIFIED, USAGE_MAX, USAGE_TOP};

use super::Fraction;

/// Distinct usage values (4 bits).
pub const USAGE_VALUES: usize = USAGE_MAX as usize + 1;

const _: () = assert!(USAGE_TOP as usize <= USAGE_MAX as usize && USAGE_VALUES == 16);

/// An object's usage after an access: the top bit set.
#[inline]
pub const fn accessed(usage: u8) -> u8 {
    usage | USAGE_TOP
}

/// An object's usage after its frame was scanned at the primary pointer: add one, shift right.
#[inline]
pub const fn decayed(usage: u8) -> u8 {
    (usage + 1) >> 1
}

/// The usage `<T, H>` of a frame, with `H` kept as the fraction `hot / objects` so that
/// comparisons are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameUsage {
    /// `T`: objects with usage above it are kept when the frame is compacted.
    pub threshold: u8,
    /// Objects kept at `T` (usage above `T`, or modified): the numerator of `H`.
    pub hot: u32,
    /// Objects in the frame, installed or not: the denominator of `H`.
    pub objects: u32,
}

impl FrameUsage {
    /// The usage of a frame with nothing worth keeping (an empty frame).
    pub const EMPTY: FrameUsage = FrameUsage { threshold: 0, hot: 0, objects: 0 };

    /// `H` as a float, for reports.
    pub fn fraction_hot(&self) -> f64 {
        if self.objects == 0 { 0.0 } else { f64::from(self.hot) / f64::from(self.objects) }
    }

    /// The "less valuable" order: `Less` if `self` is less valuable than `other`.
    pub fn value_cmp(&self, other: &FrameUsage) -> Ordering {
        self.threshold.cmp(&other.threshold).then_with(|| {
            // H = hot / objects; an empty frame has H = 0. Cross-multiplied, exact.
            let a = u64::from(self.hot) * u64::from(other.objects.max(1));
            let b = u64::from(other.hot) * u64::from(self.objects.max(1));
            a.cmp(&b)
        })
    }
}

/// Counts of a frame's objects by usage, built while scanning its installed entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageHistogram {
    /// Unmodified installed objects by usage value.
    pub by_usage: [u32; USAGE_VALUES],
    /// Modified objects (no-steal: kept at every threshold).
    pub modified: u32,
}

impl UsageHistogram {
    /// Counts one installed object with `usage` and `flags`.
    #[inline]
    pub fn add(&mut self, usage: u8, flags: u8) {
        if flags & F_MODIFIED != 0 {
            self.modified += 1;
        } else {
            self.by_usage[usize::from(usage & USAGE_MAX)] += 1;
        }
    }

    /// The frame's usage: the smallest threshold whose hot fraction is below `r`. `objects`
    /// counts every object of the frame; those not in the histogram (uninstalled, dead) have
    /// usage 0.
    pub fn frame_usage(&self, objects: u32, r: Fraction) -> FrameUsage {
        let installed: u32 = self.by_usage.iter().sum::<u32>() + self.modified;
        debug_assert!(installed <= objects, "{installed} installed of {objects}");
        let objects = objects.max(installed);
        if objects == 0 {
            return FrameUsage::EMPTY;
        }
        // hot(T) = modified + #{usage > T}; walk T upwards, dropping the objects at T.
        let mut above = installed - self.by_usage[0];
        for t in 0..=USAGE_MAX {
            if r.exceeds(above, objects) {
                return FrameUsage { threshold: t, hot: above, objects };
            }
            if t < USAGE_MAX {
                above -= self.by_usage[usize::from(t) + 1];
            }
        }
        // Even at the maximum threshold the modified objects keep H at or above R.
        FrameUsage { threshold: USAGE_MAX, hot: self.modified, objects }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Fraction = Fraction::TWO_THIRDS;

    fn usage_of(usages: &[u8], uninstalled: u32) -> FrameUsage {
        let mut h = UsageHistogram::default();
        for &u in usages {
            h.add(u, 0);
        }
        h.frame_usage(usages.len() as u32 + uninstalled, R)
    }

    #[test]
    fn the_papers_example_frame_needs_threshold_three() {
        // F1: at T = 2 five of six objects are hot (H = 5/6, not below 2/3), so T = 3.
        let f1 = usage_of(&[3, 3, 5, 7, 12, 0], 0);
        let mut h = UsageHistogram::default();
        [3, 3, 5, 7, 12, 0].iter().for_each(|&u| h.add(u, 0));
        let above_2 = h.by_usage[3..].iter().sum::<u32>();
        assert_eq!((above_2, 6), (5, 6), "H = 5/6 at T = 2");
        assert_eq!(f1, FrameUsage { threshold: 3, hot: 3, objects: 6 });
        // F2: T = 0 already keeps few enough.
        let f2 = usage_of(&[0, 0, 0, 9, 0, 1], 0);
        assert_eq!(f2, FrameUsage { threshold: 0, hot: 2, objects: 6 });
        assert_eq!(f2.value_cmp(&f1), Ordering::Less, "F2 is less valuable than F1");
    }

    #[test]
    fn uninstalled_objects_count_as_usage_zero() {
        // Two hot objects out of eight: T = 0 at once.
        let u = usage_of(&[15, 15], 6);
        assert_eq!(u, FrameUsage { threshold: 0, hot: 2, objects: 8 });
    }

    #[test]
    fn modified_objects_are_hot_at_every_threshold() {
        let mut h = UsageHistogram::default();
        h.add(0, F_MODIFIED);
        h.add(0, F_MODIFIED);
        h.add(15, 0);
        // Three objects, two modified: 2/3 is not below R at any threshold.
        assert_eq!(h.frame_usage(3, R), FrameUsage { threshold: USAGE_MAX, hot: 2, objects: 3 });
        // With a fourth, cold object the modified ones are 2/4 < R, but only once the
        // threshold passes the hot unmodified one: T = 15 keeps just the modified ones.
        h.add(1, 0);
        assert_eq!(h.frame_usage(4, R), FrameUsage { threshold: USAGE_MAX, hot: 2, objects: 4 });
        // With six objects, T = 1 keeps the modified ones and the usage-15 one: 3/6.
        assert_eq!(h.frame_usage(6, R), FrameUsage { threshold: 1, hot: 3, objects: 6 });
    }

    impl FrameUsage {
        /// Test helper: recomputes the expectation the slow way.
        fn min_t(self, h: &UsageHistogram) -> FrameUsage {
            let objects = self.objects;
            for t in 0..=USAGE_MAX {
                let hot = h.modified + h.by_usage[usize::from(t) + 1..].iter().sum::<u32>();
                if u64::from(hot) * 3 < 2 * u64::from(objects) {
                    return FrameUsage { threshold: t, hot, objects };
                }
            }
            FrameUsage { threshold: USAGE_MAX, hot: h.modified, objects }
        }
    }

    #[test]
    fn decay_adds_one_then_shifts() {
        assert_eq!(decayed(15), 8);
        assert_eq!(decayed(8), 4);
        assert_eq!(decayed(4), 2);
        assert_eq!(decayed(2), 1);
        assert_eq!(decayed(1), 1, "an object once used never looks unused");
        assert_eq!(decayed(0), 0);
        assert_eq!(decayed(accessed(1)), 5);
        assert_eq!(accessed(3), 11);
        // Decay never leaves 4 bits.
        assert!((0..=USAGE_MAX).all(|u| decayed(u) <= USAGE_MAX && accessed(u) <= USAGE_MAX));
    }

    #[test]
    fn less_valuable_order() {
        let a = FrameUsage { threshold: 1, hot: 1, objects: 4 };
        let b = FrameUsage { threshold: 1, hot: 2, objects: 6 };
        let c = FrameUsage { threshold: 2, hot: 0, objects: 6 };
        assert_eq!(a.value_cmp(&b), Ordering::Less, "same T, 1/4 < 1/3");
        assert_eq!(b.value_cmp(&c), Ordering::Less, "lower T first");
        assert_eq!(
            FrameUsage { threshold: 0, hot: 1, objects: 2 }.value_cmp(&FrameUsage {
                threshold: 0,
                hot: 2,
                objects: 4
            }),
            Ordering::Equal
        );
        assert_eq!(FrameUsage::EMPTY.value_cmp(&a), Ordering::Less);
    }

    #[test]
    fn frame_usage_matches_the_definition_on_all_small_frames() {
        // Exhaustive over frames of up to 4 objects with usages from a few values.
        let values = [0u8, 1, 2, 5, 8, 15];
        for n in 0..=4usize {
            let mut idx = vec![0usize; n];
            loop {
                let usages: Vec<u8> = idx.iter().map(|&k| values[k]).collect();
                let got = usage_of(&usages, 0);
                let mut h = UsageHistogram::default();
                usages.iter().for_each(|&u| h.add(u, 0));
                let want = if n == 0 {
                    FrameUsage::EMPTY
                } else {
                    FrameUsage { threshold: 0, hot: 0, objects: n as u32 }.min_t(&h)
                };
                assert_eq!(got, want, "{usages:?}");
                // Carry.
                let mut k = 0;
                while k < n {
                    idx[k] += 1;
                    if idx[k] < values.len() {
                        break;
                    }
                    idx[k] = 0;
                    k += 1;
                }
                if k == n {
                    break;
                }
            }
        }
    }
}
