//! Replacement's timers, and the clock they read, which the caller injects.
//!
//! The HAC paper splits replacement's cost (section 4.4, Figure 10) into *usage computation*
//! (scanning frames at the pointers, computing and decaying their usage, keeping the candidate
//! set and choosing the victim), *page compaction* (moving a victim's kept objects, dropping the
//! others and releasing their references) and *stack scanning* (Thor's replacement scanned the
//! stack for pointers into victims; thor has no such scan: live views are a list the session
//! pins, so it has no third part). [`ClientCache`](crate::ClientCache) times replacement as a
//! whole around every call that frees frames, and a manager that can split its work
//! ([`Hac`](crate::Hac), [`Fpc`](crate::fpc::Fpc)) times its two parts inside
//! [`CacheManager::free_frame`](crate::CacheManager::free_frame):
//!
//! ```text
//!   free_frames_until  ├──────────────────────────── whole ────────────────────────────────┤
//!   free_frame            ├─ usage ─┤├─ compaction ─┤├─ usage ─┤├─ compaction ─┤
//!                         scan, choose   victim 1      choose      victim 2 (the target
//!                                                                  overflowed: free another)
//! ```
//!
//! The parts are disjoint intervals inside the whole, so with a monotonic clock they never sum
//! to more than it; the rest (the budget's rebalancing, dropping undo copies, the loop, the clock
//! reads themselves) is the whole minus the parts.
//!
//! # The clock
//!
//! thor-cache reads no clock of its own (*Architecture Invariant:* no I/O, no clock). The client
//! gives the cache a [`StatClock`], a plain function returning monotonic nanoseconds
//! ([`ClientCache::set_clock`](crate::ClientCache::set_clock)); without one nothing is timed
//! and every time reads zero, so tests and simulations pay nothing and a test can inject a
//! counting clock and check the arithmetic exactly. A function pointer, not a trait object:
//! one indirect call on top of the clock read, nothing to allocate, and the timer stays `Copy`.
//!
//! Every call is timed, not a sample as the session's conversion clock does: a conversion call
//! costs about as much as a clock read, but freeing a frame costs microseconds (2 on OO7's T6,
//! 50 to 200 on T1), and the split adds one read per frame freed plus two per victim, about
//! 20 ns each on the machines measured (`docs/oo7.md`, Figure 10).

/// Monotonic nanoseconds since an arbitrary origin, for statistics only.
pub type StatClock = fn() -> u64;

/// Where a manager's [`free_frame`](crate::CacheManager::free_frame) adds the time
/// of its two parts.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplacementTimer {
    /// The clock; `None` times nothing.
    clock: Option<StatClock>,
    /// Nanoseconds in usage computation and victim selection.
    pub(crate) usage_ns: u64,
    /// Nanoseconds compacting and evicting victims.
    pub(crate) compaction_ns: u64,
}

impl ReplacementTimer {
    /// A timer that reads nothing (for managers called outside a [`crate::ClientCache`]).
    pub const OFF: ReplacementTimer =
        ReplacementTimer { clock: None, usage_ns: 0, compaction_ns: 0 };

    /// A timer that reads `clock`.
    pub fn new(clock: Option<StatClock>) -> ReplacementTimer {
        ReplacementTimer { clock, ..ReplacementTimer::OFF }
    }

    /// The clock now (zero without a clock).
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.map_or(0, |c| c())
    }

    /// Adds the time since `from` to usage computation; returns now (the next part's start).
    #[inline]
    pub fn usage_since(&mut self, from: u64) -> u64 {
        let now = self.now();
        self.usage_ns += now.saturating_sub(from);
        now
    }

    /// Adds the time since `from` to compaction; returns now (the next part's start).
    #[inline]
    pub fn compaction_since(&mut self, from: u64) -> u64 {
        let now = self.now();
        self.compaction_ns += now.saturating_sub(from);
        now
    }

    /// Nanoseconds of usage computation so far.
    pub fn usage_ns(&self) -> u64 {
        self.usage_ns
    }

    /// Nanoseconds of compaction so far.
    pub fn compaction_ns(&self) -> u64 {
        self.compaction_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static TICKS: AtomicU64 = AtomicU64::new(0);

    fn ticking() -> u64 {
        TICKS.fetch_add(10, Ordering::Relaxed)
    }

    #[test]
    fn parts_add_the_time_between_reads_and_chain() {
        let mut t = ReplacementTimer::new(Some(ticking));
        let a = t.now();
        let b = t.usage_since(a);
        let c = t.compaction_since(b);
        assert_eq!(t.usage_ns(), b - a);
        assert_eq!(t.compaction_ns(), c - b);
    }

    #[test]
    fn without_a_clock_nothing_is_timed() {
        let mut t = ReplacementTimer::OFF;
        let a = t.now();
        let b = t.usage_since(a);
        t.compaction_since(b);
        assert_eq!((t.usage_ns(), t.compaction_ns()), (0, 0));
    }
}
