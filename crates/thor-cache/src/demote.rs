//! Demotion at the client: the pages the cache drops intact, kept in their stored form until
//! the server says whether it wants them (`papers/demote-exclusive-caching.txt`; the protocol
//! is in `thor_wire::message`).
//!
//! When replacement empties a frame that holds a page intact (FPC evicting it, HAC freeing a
//! victim that is still the page's mapped copy) and no object in it is modified, the core
//! copies the frame here, with every reference swizzled in place turned back into its oref:
//! the bytes the server sent. The page then goes through three states:
//!
//! ```text
//!   captured ──(reported as demoted on the next request)──► noticed ──(the reply wants it)──► wanted
//!       │                                               │                               │
//!       └─ dropped: buffer full (oldest first),          └─ dropped: not wanted          └─ sent on
//!          page fetched again                                                              the next
//!                                                                                          request
//! ```
//!
//! # Bounds
//!
//! At most `max` pages are held (a setting; 0 turns demotion off). They are outside the cache's
//! budget, like the undo copies: a few pages (the default is
//! [`crate::limits::DEMOTE_PAGES_DEFAULT`]), since a page is captured at a fetch and answered
//! by the next reply. Buffers are reused, so a steady stream of demotions allocates only for
//! the pages actually sent.

use bytes::Bytes;
use thor_core::PageId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Captured,
    Noticed,
    Wanted,
}

#[derive(Debug)]
struct Held {
    page: u32,
    state: State,
    bytes: Vec<u8>,
}

/// Demotion counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DemoteStats {
    /// Pages captured when their frame was emptied.
    pub captured: u64,
    /// Pages reported as demoted.
    pub noticed: u64,
    /// Pages whose bytes were sent.
    pub sent: u64,
    /// Bytes of pages sent.
    pub bytes_sent: u64,
    /// Captured pages dropped unsent (buffer full, not wanted, fetched again).
    pub dropped: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct DemoteBuffer {
    max: usize,
    /// Oldest first.
    held: Vec<Held>,
    spare: Vec<Vec<u8>>,
    pub(crate) stats: DemoteStats,
}

impl DemoteBuffer {
    /// Whether demotion is on.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.max > 0
    }

    /// Holds at most `max` pages from now on (0: off, and everything held is dropped).
    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max;
        while self.held.len() > max {
            let h = self.held.remove(0);
            self.recycle(h);
        }
        self.spare.truncate(max);
    }

    fn recycle(&mut self, h: Held) {
        if h.state != State::Wanted || self.max == 0 {
            self.stats.dropped += 1;
        }
        if self.spare.len() < self.max {
            self.spare.push(h.bytes);
        }
    }

    /// A buffer of `page_size` bytes to capture `page` into, or `None` if nothing can make
    /// room (every held page is wanted and waits to be sent). The caller fills it completely
    /// and then calls [`DemoteBuffer::captured`].
    pub(crate) fn buffer(&mut self, page: u32, page_size: usize) -> Option<Vec<u8>> {
        if !self.enabled() {
            return None;
        }
        self.forget(page);
        if self.held.len() >= self.max {
            let i = self.held.iter().position(|h| h.state != State::Wanted)?;
            let h = self.held.remove(i);
            self.recycle(h);
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.resize(page_size, 0);
        Some(b)
    }

    /// `bytes` (from [`DemoteBuffer::buffer`]) hold `page`'s stored form.
    pub(crate) fn captured(&mut self, page: u32, bytes: Vec<u8>) {
        self.held.push(Held { page, state: State::Captured, bytes });
        self.stats.captured += 1;
    }

    /// `page` is in the cache again: its held copy is of no use.
    pub(crate) fn forget(&mut self, page: u32) {
        if let Some(i) = self.held.iter().position(|h| h.page == page) {
            let h = self.held.remove(i);
            self.recycle(h);
        }
    }

    /// Up to `max` captured pages (never `except`) to report as demoted: they are noticed now.
    pub(crate) fn notices(&mut self, max: usize, except: Option<PageId>) -> Vec<PageId> {
        let mut out = Vec::new();
        for h in &mut self.held {
            if out.len() >= max {
                break;
            }
            if h.state == State::Captured && Some(h.page) != except.map(PageId::get) {
                h.state = State::Noticed;
                self.stats.noticed += 1;
                out.push(PageId::new(h.page).expect("only stored pages are captured"));
            }
        }
        out
    }

    /// A request reporting `pages` as demoted could not be sent: they are captured again, to
    /// be reported on the next request.
    pub(crate) fn unnotice(&mut self, pages: &[PageId]) {
        for h in &mut self.held {
            if h.state == State::Noticed && pages.iter().any(|p| p.get() == h.page) {
                h.state = State::Captured;
            }
        }
    }

    /// A reply came: the noticed pages it wants are sent on the next request, the others are
    /// dropped (the client makes one request at a time, so every notice so far was answered).
    pub(crate) fn answered(&mut self, wanted: &[PageId]) {
        let mut i = 0;
        while i < self.held.len() {
            let h = &mut self.held[i];
            if h.state == State::Noticed {
                if wanted.iter().any(|p| p.get() == h.page) {
                    h.state = State::Wanted;
                } else {
                    let h = self.held.remove(i);
                    self.recycle(h);
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Up to `max` wanted pages and their bytes, to send.
    pub(crate) fn take_wanted(&mut self, max: usize) -> Vec<(PageId, Bytes)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.held.len() && out.len() < max {
            if self.held[i].state == State::Wanted {
                let h = self.held.remove(i);
                self.stats.sent += 1;
                self.stats.bytes_sent += h.bytes.len() as u64;
                let page = PageId::new(h.page).expect("only stored pages are captured");
                out.push((page, Bytes::from(h.bytes)));
                continue;
            }
            i += 1;
        }
        out
    }

    /// Pages held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u32) -> PageId {
        PageId::new(n).unwrap()
    }

    fn capture(d: &mut DemoteBuffer, page: u32) -> bool {
        match d.buffer(page, 64) {
            Some(mut b) => {
                b.fill(page as u8);
                d.captured(page, b);
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_page_goes_captured_noticed_wanted_sent() {
        let mut d = DemoteBuffer::default();
        d.set_max(4);
        assert!(capture(&mut d, 3) && capture(&mut d, 4) && capture(&mut d, 5));
        assert_eq!(d.notices(8, Some(p(5))), vec![p(3), p(4)], "not the page being fetched");
        assert!(d.notices(8, Some(p(5))).is_empty(), "each is noticed once");
        d.forget(5);
        d.answered(&[p(4)]);
        assert_eq!(d.len(), 1, "3 was not wanted");
        let sent = d.take_wanted(8);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, p(4));
        assert!(sent[0].1.iter().all(|&b| b == 4));
        assert_eq!(d.len(), 0);
        assert_eq!(
            (d.stats.captured, d.stats.noticed, d.stats.sent, d.stats.dropped),
            (3, 2, 1, 2)
        );
    }

    #[test]
    fn the_buffer_holds_at_most_max_and_never_drops_a_wanted_page() {
        let mut d = DemoteBuffer::default();
        d.set_max(2);
        assert!(capture(&mut d, 1) && capture(&mut d, 2));
        assert_eq!(d.notices(8, None).len(), 2);
        d.answered(&[p(1), p(2)]);
        assert!(!capture(&mut d, 3), "both held pages wait to be sent");
        assert_eq!(d.take_wanted(1).len(), 1);
        assert!(capture(&mut d, 3));
        assert!(capture(&mut d, 4), "the captured page 3 makes room, the wanted one stays");
        assert_eq!(d.len(), 2);
        assert_eq!(d.take_wanted(8).len(), 1);
    }

    #[test]
    fn a_page_fetched_again_or_unsent_is_handled() {
        let mut d = DemoteBuffer::default();
        d.set_max(4);
        assert!(capture(&mut d, 1));
        d.forget(1);
        assert_eq!(d.len(), 0);
        assert!(capture(&mut d, 2));
        assert_eq!(d.notices(8, None), vec![p(2)]);
        d.unnotice(&[p(2)]);
        assert_eq!(d.notices(8, None), vec![p(2)], "captured again after a failed send");
        d.set_max(0);
        assert_eq!(d.len(), 0);
        assert!(!d.enabled() && d.buffer(9, 64).is_none());
    }
}
