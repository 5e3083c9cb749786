//! How many pages a session's next fetch asks the server to add: prefetch's window.
//!
//! A prefetched page pays when the traversal uses it before the cache evicts it: a round trip
//! saved for the price of a page on the wire and its installation. A page never used costs
//! that price for nothing, and in a cache that must evict to take it, also the frame it took
//! (freed by evicting or compacting something the traversal may still need) and the
//! replacement work. Where prefetch goes wrong (`docs/oo7.md`, "Prefetch (issue 16)"):
//!
//! - a cache much smaller than what the traversal reads (OO7's T1 at 4 MiB): HAC evicts a page
//!   that nobody has used yet first, so prefetched pages leave unused and add to the
//!   thrashing;
//! - a client that reads here and there (a lookup by key): the pages after the one it reads
//!   are of no use to it, and each miss would wait for a reply many pages long;
//! - a traversal that reads a page or two of each cluster (T6): most pages the server adds are
//!   never used, even in a cache that keeps them all.
//!
//! The window follows what the cache reports between two fetches: the prefetched pages *used*
//! (an object installed from them) and those *evicted unused* (`CoreStats::prefetched_used`
//! and `prefetched_unused`), with multiplicative decrease, as TCP's congestion window on a
//! loss:
//!
//! ```text
//!   start at the setting (max)
//!   a prefetched page evicted unused ────────────────────────► window / 2
//!   the last fetch brought pages and no prefetched page was
//!   used since ──────────────────────────────────────────────► window / 2
//!   else pages used ──► window + 1, and at least twice the pages used (up to max)
//!   window 0 ──► every PROBE_EVERY fetches ask for one page, to find out whether the
//!                traversal has moved on to where prefetch pays again
//! ```
//!
//! With nothing evicted and something used between fetches the window stays at the setting
//! (cold T1 at 256 MiB, which uses every page the server guesses, soon or late); a cache that
//! thrashes, or a client whose misses use none of the pages that came with them, drives it to
//! 0 within a few fetches, and prefetch then costs one page per [`PROBE_EVERY`] fetches. A
//! traversal that uses a page or two of each reply (T6) keeps its window: counting the pages
//! still unused some fetches after they came as waste was tried, and it closed T1's window
//! too, whose pages are used late but used.

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
    /// Pages the last fetch brought by prefetch.
    brought: u64,
}

impl Window {
    /// A window that starts at `max`, given the cache's counters now.
    pub fn new(max: u16, used: u64, unused: u64) -> Window {
        Window { max, now: max, probe_in: PROBE_EVERY, seen: (used, unused), brought: 0 }
    }

    /// The fetch just made brought `pages` pages by prefetch.
    pub fn brought(&mut self, pages: u64) {
        self.brought = pages;
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
        let brought = std::mem::take(&mut self.brought);
        if dw > 0 || (du == 0 && brought > 0) {
            self.now /= 2;
        } else if du > 0 {
            let twice = u16::try_from(du.saturating_mul(2)).unwrap_or(u16::MAX);
            self.now = self.now.saturating_add(1).max(twice).min(self.max);
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

impl Window {
    /// Whether a prefetched page was evicted unused since the window last looked
    /// ([`Window::next`]), given the cache's counter of such pages: a read-ahead, which does
    /// not move the window, is not sent then.
    pub fn wasted_since(&self, unused: u64) -> bool {
        unused > self.seen.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `events` (per fetch: prefetched pages used and evicted unused since the last
    /// one) through a window of `max`; returns what each fetch asked for.
    /// Every fetch brings as many pages as it asked for.
    fn drive(max: u16, events: &[(u64, u64)]) -> Vec<u16> {
        let mut w = Window::new(max, 0, 0);
        let (mut used, mut unused) = (0, 0);
        events
            .iter()
            .map(|&(u, x)| {
                used += u;
                unused += x;
                let n = w.next(used, unused);
                w.brought(u64::from(n));
                n
            })
            .collect()
    }

    #[test]
    fn a_traversal_that_uses_its_pages_keeps_the_whole_window() {
        assert_eq!(drive(8, &[(0, 0), (3, 0), (8, 0), (1, 0)]), vec![8, 8, 8, 8]);
    }

    #[test]
    fn waste_halves_the_window_and_use_grows_it_back() {
        let got = drive(8, &[(0, 1), (0, 2), (1, 0), (1, 0), (1, 0), (2, 1), (3, 0)]);
        assert_eq!(got, vec![4, 2, 3, 4, 5, 2, 6], "up by one, or to twice the pages used");
    }

    #[test]
    fn misses_that_use_none_of_the_pages_that_came_close_the_window() {
        // A lookup here and there: nothing the server adds is ever used.
        let got = drive(16, &[(0, 0); 6]);
        assert_eq!(got, vec![16, 8, 4, 2, 1, 0]);
        // A fetch that brought nothing (the server had none to add) says nothing.
        let mut w = Window::new(16, 0, 0);
        assert_eq!(w.next(0, 0), 16);
        w.brought(0);
        assert_eq!(w.next(0, 0), 16);
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
        w.brought(1);
        assert_eq!(w.next(1, 4), 2, "used: twice the pages used");
        w.brought(2);
        assert_eq!(w.next(3, 4), 4);
    }

    #[test]
    fn the_window_never_exceeds_the_setting_and_zero_stays_off() {
        assert!(drive(3, &[(5, 0); 10]).iter().all(|&n| n == 3));
        assert!(drive(0, &[(0, 0); 100]).iter().all(|&n| n == 0), "0 never probes");
    }
}
