//! The candidate set (`papers/hac-sosp97.txt` section 3.2.3): the frames whose usage was
//! computed during the last E epochs (an epoch is a fetch), from which victims are chosen.
//!
//! # Layout
//!
//! One bucket per epoch in a ring, each sorted by value with its least valuable candidate at the
//! end, and a tournament tree over the buckets whose every node names the bucket holding the
//! least valuable tail in its subtree:
//!
//! ```text
//!                      [b2]                    root: the least valuable candidate overall
//!               [b0]           [b2]
//!           [b0]   [b1]    [b2]    [b3]        leaves: one per epoch bucket
//!   bucket  b0      b1      b2      b3  ...    (E buckets in a ring; `current` receives
//!           ..      ..      ..      ..          this epoch's candidates; the next epoch
//!           F17     F40     F3      F9  ← tail  empties the oldest)
//! ```
//!
//! Removing the least valuable candidate pops the tail of the root's bucket and replays the
//! bucket's leaf-to-root path: O(log E). Starting an epoch empties the bucket of the epoch E
//! ago (its candidates have been in the set for E epochs, so their usage is out of date) and
//! replays its path: O(log E). Inserting goes into the current bucket (a few candidates per
//! epoch: `S × (N + 1)` from the scan plus any frame filled by compaction) and replays its path.
//!
//! Among candidates of equal usage the one added most recently is less valuable, so it goes
//! first: its usage information is the most accurate (section 3.2.4).
//!
//! The set does not know frames' states. A frame is named together with its *stamp*, a
//! per-frame counter its owner bumps whenever the frame's contents change wholesale (freed,
//! refilled, made the compaction target, or added to the set again); a candidate whose stamp is
//! old is stale and the owner drops it when it comes out.

use std::cmp::Ordering;

use super::usage::FrameUsage;

/// "No bucket" in the tournament tree.
const NONE: u32 = u32::MAX;

/// A frame in the candidate set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The frame.
    pub frame: u32,
    /// The frame's stamp when it was added: the candidate is stale if the stamp moved on.
    pub stamp: u32,
    /// Its usage when added.
    pub usage: FrameUsage,
    /// Insertion order, for ties: later is less valuable.
    pub seq: u64,
}

impl Candidate {
    /// Whether `self` should be freed before `other`: lower usage, or equal usage and added
    /// more recently.
    #[inline]
    pub fn before(&self, other: &Candidate) -> bool {
        match self.usage.value_cmp(&other.usage) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => self.seq > other.seq,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct CandidateSet {
    /// One bucket per epoch of the last E, each sorted so that its tail goes first.
    buckets: Vec<Vec<Candidate>>,
    /// The tournament tree: node 1 is the root, leaves start at `leaves`; each node holds the
    /// bucket whose tail goes first in its subtree, or [`NONE`].
    tree: Vec<u32>,
    /// Leaves in the tree: E rounded up to a power of two.
    leaves: usize,
    /// The bucket of the current epoch.
    current: usize,
    /// Next insertion number.
    seq: u64,
    /// Candidates in the set (stale ones included).
    len: usize,
}

impl CandidateSet {
    /// A set keeping candidates for `epochs` epochs (at least one).
    pub fn new(epochs: usize) -> CandidateSet {
        let epochs = epochs.max(1);
        let leaves = epochs.next_power_of_two();
        CandidateSet {
            buckets: vec![Vec::new(); epochs],
            tree: vec![NONE; 2 * leaves],
            leaves,
            current: 0,
            seq: 0,
            len: 0,
        }
    }

    /// Candidates held (stale ones included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory the set holds (for the cache's budget).
    pub fn memory_bytes(&self) -> usize {
        self.buckets.iter().map(|b| b.capacity()).sum::<usize>() * std::mem::size_of::<Candidate>()
            + self.buckets.capacity() * std::mem::size_of::<Vec<Candidate>>()
            + self.tree.capacity() * 4
    }

    /// Starts the next epoch: candidates added E epochs ago leave the set.
    pub fn start_epoch(&mut self) {
        self.current = (self.current + 1) % self.buckets.len();
        self.len -= self.buckets[self.current].len();
        self.buckets[self.current].clear();
        self.replay(self.current);
    }

    /// Adds frame `frame` (at stamp `stamp`) with usage `usage` in the current epoch.
    pub fn insert(&mut self, frame: u32, stamp: u32, usage: FrameUsage) {
        let c = Candidate { frame, stamp, usage, seq: self.seq };
        self.seq += 1;
        self.put(self.current, c);
    }

    /// Puts `c` back in bucket `bucket` (a candidate taken out by [`CandidateSet::pop`] and
    /// passed over, for example because its frame is pinned).
    pub fn put(&mut self, bucket: usize, c: Candidate) {
        let b = &mut self.buckets[bucket];
        // Sorted so that the candidate to go first is last: everything that goes after `c`
        // stays in front of it.
        let at = b.partition_point(|x| c.before(x));
        b.insert(at, c);
        self.len += 1;
        self.replay(bucket);
    }

    /// The candidate to free first (lowest usage, most recently added among equals) and the
    /// bucket it came from, removed from the set.
    pub fn pop(&mut self) -> Option<(usize, Candidate)> {
        let b = self.tree[1];
        if b == NONE {
            return None;
        }
        let b = b as usize;
        let c = self.buckets[b].pop().expect("the tree names non-empty buckets");
        self.len -= 1;
        self.replay(b);
        Some((b, c))
    }

    /// The candidate [`CandidateSet::pop`] would return, left in the set.
    pub fn peek(&self) -> Option<&Candidate> {
        let b = self.tree[1];
        (b != NONE).then(|| self.buckets[b as usize].last().expect("non-empty"))
    }

    /// Recomputes the tree nodes on the path from bucket `b`'s leaf to the root.
    fn replay(&mut self, b: usize) {
        let mut k = self.leaves + b;
        self.tree[k] = if self.buckets[b].is_empty() { NONE } else { b as u32 };
        while k > 1 {
            k /= 2;
            self.tree[k] = self.first_of(self.tree[2 * k], self.tree[2 * k + 1]);
        }
    }

    /// Of two buckets (or [`NONE`]), the one whose tail goes first.
    #[inline]
    fn first_of(&self, x: u32, y: u32) -> u32 {
        match (x, y) {
            (NONE, _) => y,
            (_, NONE) => x,
            _ => {
                let cx = self.buckets[x as usize].last().expect("non-empty");
                let cy = self.buckets[y as usize].last().expect("non-empty");
                if cx.before(cy) { x } else { y }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(t: u8, hot: u32, objects: u32) -> FrameUsage {
        FrameUsage { threshold: t, hot, objects }
    }

    fn drain(s: &mut CandidateSet) -> Vec<u32> {
        std::iter::from_fn(|| s.pop().map(|(_, c)| c.frame)).collect()
    }

    #[test]
    fn least_valuable_first_and_ties_to_the_most_recent() {
        let mut s = CandidateSet::new(20);
        s.insert(1, 0, u(2, 1, 4));
        s.insert(2, 0, u(0, 3, 6));
        s.start_epoch();
        s.insert(3, 0, u(0, 1, 6));
        s.insert(4, 0, u(2, 1, 4)); // same usage as frame 1, added later: goes first
        s.start_epoch();
        s.insert(5, 0, u(15, 0, 1));
        s.insert(6, 0, u(0, 1, 6)); // same as frame 3, later
        assert_eq!(s.len(), 6);
        assert_eq!(s.peek().map(|c| c.frame), Some(6));
        assert_eq!(drain(&mut s), vec![6, 3, 2, 4, 1, 5]);
        assert!(s.is_empty());
    }

    #[test]
    fn candidates_expire_after_e_epochs() {
        let mut s = CandidateSet::new(3);
        s.insert(1, 0, u(0, 0, 1)); // epoch 0: the least valuable
        s.start_epoch();
        s.insert(2, 0, u(5, 0, 1)); // epoch 1
        s.start_epoch();
        s.insert(3, 0, u(9, 0, 1)); // epoch 2
        assert_eq!(s.peek().map(|c| c.frame), Some(1));
        // Epoch 3 starts: frame 1 has been in the set for 3 epochs and leaves.
        s.start_epoch();
        assert_eq!(s.len(), 2);
        assert_eq!(s.peek().map(|c| c.frame), Some(2));
        s.start_epoch();
        s.start_epoch();
        assert!(s.is_empty());
        assert_eq!(s.pop(), None);
    }

    #[test]
    fn a_candidate_put_back_keeps_its_place() {
        let mut s = CandidateSet::new(4);
        s.insert(1, 0, u(0, 0, 1));
        s.insert(2, 0, u(1, 0, 1));
        s.start_epoch();
        s.insert(3, 0, u(2, 0, 1));
        let (b, c) = s.pop().unwrap();
        assert_eq!(c.frame, 1);
        let (_, next) = s.pop().unwrap();
        assert_eq!(next.frame, 2);
        s.put(b, c);
        assert_eq!(drain(&mut s), vec![1, 3]);
    }

    #[test]
    fn one_epoch_and_many_epochs() {
        let mut s = CandidateSet::new(1);
        s.insert(7, 0, u(3, 0, 1));
        s.insert(8, 0, u(1, 0, 1));
        assert_eq!(s.peek().map(|c| c.frame), Some(8));
        s.start_epoch();
        assert!(s.is_empty(), "with E = 1 candidates live one epoch");

        // E not a power of two; candidates spread over every bucket come out in order.
        let mut s = CandidateSet::new(37);
        let mut want = Vec::new();
        for f in 0..200u32 {
            let usage = u((f * 7 % 16) as u8, f % 5, 5);
            s.insert(f, 0, usage);
            want.push((usage, f));
            if f % 6 == 5 {
                s.start_epoch();
            }
        }
        // Nothing expired yet: 200 / 6 = 33 epochs < 37.
        want.sort_by(|a, b| a.0.value_cmp(&b.0).then(b.1.cmp(&a.1)));
        assert_eq!(drain(&mut s), want.iter().map(|w| w.1).collect::<Vec<_>>());
    }
}
