//! How many pages a session's next fetch asks the server to add: prefetch's window.
//!
//! A prefetched page pays when the traversal uses it before the cache evicts it: a round trip
//! saved for the price of a page on the wire. One evicted unused costs that page on the wire,
//! the frame it took (freed by evicting or compacting something the traversal may still
//! need) and the replacement work of freeing it. In a cache that holds what the traversal
//! reads (OO7's T1 at 256 MiB) nothing is evicted and every page the server guesses right is
//! a round trip saved; in a cache much smaller than that (T1 at 4 MiB) HAC evicts a page that
//! nobody has used yet first, so most prefetched pages leave unused and prefetch makes the
//! thrashing worse (`docs/oo7.md`, "Prefetch (issue 16)").
//!
//! The window follows what the cache reports (`CoreStats::prefetched_used` and
//! `prefetched_unused`), additive increase and multiplicative decrease, as TCP's congestion
//! window follows losses:
//!
//! ```text
//!   start at the setting (max)
//!   a prefetched page evicted unused since the last fetch ──► window / 2
//!   else a prefetched page used since the last fetch ───────► window + 1 (up to max)
//!   window 0 ──► every PROBE_EVERY fetches ask for one page, to find out whether the
//!                traversal has moved on to where prefetch pays again
//! ```
//!
//! With nothing evicted the window stays at the setting; a cache that thrashes drives it to
//! 0 within a few fetches, and prefetch then costs one page per [`PROBE_EVERY`] fetches.

/// Fetches between two probes (a fetch with one prefetched page) while the window is 0.
pub const PROBE_EVERY: u32 = 32;

/// Prefetch's window. See the module documentation.
#[derive(Debug, Clone)]
pub struct Window {
    /// The setting: the most pages a fetch asks for.
    max: u16,
    /// Pages the next fetch asks for.
    now: u16,
    /// Fetches left before the next probe while `now` is 0.
    probe_in: u32,
    /// The cache's counters of prefetched pages used and evicted unused when last seen.
    seen: (u64, u64),
}

impl Window {
    /// A window that starts at `max`, given the cache's counters now.
    pub fn new(max: u16, used: u64, unused: u64) -> Window {
        Window { max, now: max, probe_in: PROBE_EVERY, seen: (used, unused) }
    }

    /// The setting: the most pages a fetch asks for.
    pub fn max(&self) -> u16 {
        self.max
    }

    /// The pages the next fetch asks for, given the cache's counters of prefetched pages used
    /// and evicted unused so far.
    pub fn next(&mut self, used: u64, unused: u64) -> u16 {
        let (du, dw) = (used.saturating_sub(self.seen.0), unused.saturating_sub(self.seen.1));
        self.seen = (used, unused);
        if dw > 0 {
            self.now /= 2;
        } else if du > 0 {
            self.now = self.now.saturating_add(1).min(self.max);
        }
        if self.now > 0 {
            self.probe_in = PROBE_EVERY;
            return self.now;
        }
        self.probe_in -= 1;
        if self.probe_in == 0 {
            self.probe_in = PROBE_EVERY;
            return 1.min(self.max);
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `events` (per fetch: prefetched pages used and evicted unused since the last
    /// one) through a window of `max`; returns what each fetch asked for.
    fn drive(max: u16, events: &[(u64, u64)]) -> Vec<u16> {
        let mut w = Window::new(max, 0, 0);
        let (mut used, mut unused) = (0, 0);
        events
            .iter()
            .map(|&(u, x)| {
                used += u;
                unused += x;
                w.next(used, unused)
            })
            .collect()
    }

    #[test]
    fn a_cache_that_evicts_nothing_keeps_the_whole_window() {
        assert_eq!(drive(8, &[(0, 0), (3, 0), (8, 0), (0, 0)]), vec![8, 8, 8, 8]);
    }

    #[test]
    fn waste_halves_the_window_and_use_grows_it_back_one_at_a_time() {
        let got = drive(8, &[(0, 1), (0, 2), (1, 0), (1, 0), (0, 0), (2, 1)]);
        assert_eq!(got, vec![4, 2, 3, 4, 4, 2], "a fetch with both counts as waste");
    }

    #[test]
    fn a_thrashing_cache_stops_prefetching_but_for_a_probe_now_and_then() {
        let mut events = vec![(0, 1); 4];
        events.extend(vec![(0, 0); 2 * PROBE_EVERY as usize]);
        let got = drive(8, &events);
        assert_eq!(&got[..4], &[4, 2, 1, 0]);
        let probes: Vec<usize> =
            got.iter().enumerate().skip(4).filter(|(_, n)| **n > 0).map(|(i, _)| i).collect();
        assert_eq!(probes.len(), 2, "{got:?}");
        assert!(got[4..].iter().all(|&n| n <= 1));
        // A probe whose page is used opens the window again.
        let mut w = Window::new(8, 0, 0);
        for k in 1..=4 {
            w.next(0, k);
        }
        let probe = (0..PROBE_EVERY).map(|_| w.next(0, 4)).find(|&n| n > 0);
        assert_eq!(probe, Some(1));
        assert_eq!(w.next(1, 4), 1, "used: one more than 0");
        assert_eq!(w.next(2, 4), 2);
    }

    #[test]
    fn the_window_never_exceeds_the_setting_and_zero_stays_off() {
        assert!(drive(3, &[(5, 0); 10]).iter().all(|&n| n == 3));
        assert!(drive(0, &[(0, 0); 100]).iter().all(|&n| n == 0), "0 never probes");
    }
}
