//! Per-frame lists of installed entries, in blocks from one shared pool.
//!
//! Replacement visits every entry installed in a frame (HAC's compaction, FPC's eviction). With
//! the list threaded through the entries themselves, each step waited for the previous entry's
//! cache miss to learn the next index: most of HAC's compaction time on a memory-bound run. Here
//! a frame's entry indices sit in blocks of [`BLOCK`], so the loads of the entries a block
//! names are independent and overlap; only the step from block to block is a dependent load.
//!
//! ```text
//!   frame f ─► List { first, last, len }      blocks (one pool, a free chain through `next`)
//!                │                            ┌────────────────────┬──────┐
//!                └──────────────────────────► │ 16 entry indices   │ next ├──► ... ─► last block
//!                                             └────────────────────┴──────┘   (len % 16 used)
//! ```
//!
//! Why blocks and not a growable array per frame: an array keeps the capacity of the fullest
//! its frame ever was (or reallocates as it refills), and that slack cost 5% of a 16 MiB cache
//! on OO7 T1. A block pool wastes less than a block per frame, never allocates while its free
//! chain has blocks, and emptying a frame returns its whole chain at once.
//!
//! Order inside a list means nothing: removal moves the last index into the hole.

/// Entry indices per block.
pub const BLOCK: usize = 16;

const NIL: u32 = u32::MAX;

/// Bytes a block costs: its indices and its link.
const BLOCK_BYTES: usize = BLOCK * 4 + 4;

/// One frame's list: its first and last blocks and its length.
#[derive(Debug, Clone, Copy)]
struct List {
    first: u32,
    last: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List { first: NIL, last: NIL, len: 0 };
}

/// The installed lists of every frame.
#[derive(Debug)]
pub struct FrameLists {
    lists: Vec<List>,
    blocks: Vec<[u32; BLOCK]>,
    /// Next block of a list (or of the free chain).
    next: Vec<u32>,
    /// The pool's capacity in blocks as the budget counts it. `blocks` and `next` are
    /// reserved once for as many blocks as the budget could hold (address space, not memory:
    /// see [`crate::core::reserve_table`]), so the pool grows without copying itself; this is
    /// the part of the reservation it has grown into, in steps of a thirty-second.
    counted: usize,
    free: u32,
    free_blocks: usize,
}

impl FrameLists {
    /// Empty lists for `frames` frames, in a cache whose budget is `budget_bytes` (which
    /// bounds the pool the lists can be counted for, and so its reservation).
    pub fn new(frames: usize, budget_bytes: usize) -> FrameLists {
        let reserve = budget_bytes / BLOCK_BYTES;
        FrameLists {
            lists: vec![List::EMPTY; frames],
            blocks: crate::core::reserve_table(reserve),
            next: crate::core::reserve_table(reserve),
            counted: 0,
            free: NIL,
            free_blocks: 0,
        }
    }

    /// Entries in frame `f`'s list.
    #[inline]
    pub fn len(&self, f: u32) -> usize {
        self.lists[f as usize].len as usize
    }

    /// Adds `i` to frame `f`'s list. Returns true if the pool grew (its memory is counted in
    /// the tables, so the caller checks the budget).
    #[inline]
    pub fn push(&mut self, f: u32, i: u32) -> bool {
        let l = self.lists[f as usize];
        let at = l.len as usize % BLOCK;
        let mut grew = false;
        let last = if at == 0 {
            let (b, g) = self.alloc_block();
            grew = g;
            if l.first == NIL {
                self.lists[f as usize].first = b;
            } else {
                self.next[l.last as usize] = b;
            }
            self.lists[f as usize].last = b;
            b
        } else {
            l.last
        };
        self.blocks[last as usize][at] = i;
        self.lists[f as usize].len += 1;
        grew
    }

    fn alloc_block(&mut self) -> (u32, bool) {
        if self.free != NIL {
            let b = self.free;
            self.free = self.next[b as usize];
            self.next[b as usize] = NIL;
            self.free_blocks -= 1;
            return (b, false);
        }
        let grew = self.blocks.len() == self.counted;
        if grew {
            // Grow by a thirty-second (at least 16 blocks): the pool's slack, and the headroom
            // the budget keeps for its growth, stay small (an eighth cost a 24 MiB cache on
            // OO7 T1 a few hundred more fetches).
            self.counted += self.step();
            let len = self.blocks.len();
            if self.blocks.capacity() < self.counted {
                self.blocks.reserve_exact(self.counted - len);
            }
            if self.next.capacity() < self.counted {
                self.next.reserve_exact(self.counted - len);
            }
        }
        self.blocks.push([NIL; BLOCK]);
        self.next.push(NIL);
        ((self.blocks.len() - 1) as u32, grew)
    }

    /// Blocks the pool grows by next.
    fn step(&self) -> usize {
        (self.counted / 32).max(16)
    }

    /// The entries of frame `f`'s list.
    #[inline]
    pub fn iter(&self, f: u32) -> impl Iterator<Item = u32> + '_ {
        let l = self.lists[f as usize];
        let mut b = l.first;
        let mut left = l.len as usize;
        std::iter::from_fn(move || {
            if b == NIL || left == 0 {
                return None;
            }
            let n = left.min(BLOCK);
            let block = &self.blocks[b as usize][..n];
            b = self.next[b as usize];
            left -= n;
            Some(block.iter().copied())
        })
        .flatten()
    }

    /// Empties frame `f`'s list, its blocks back in the pool.
    pub fn clear(&mut self, f: u32) {
        let l = std::mem::replace(&mut self.lists[f as usize], List::EMPTY);
        if l.first == NIL {
            return;
        }
        self.next[l.last as usize] = self.free;
        self.free = l.first;
        self.free_blocks += (l.len as usize).div_ceil(BLOCK);
    }

    /// Takes `i` out of frame `f`'s list (the last entry takes its place). A scan of the list:
    /// for paths that remove one entry now and then. False if `i` is not in it.
    pub fn remove(&mut self, f: u32, i: u32) -> bool {
        let l = self.lists[f as usize];
        let Some(pos) = self.iter(f).position(|j| j == i) else { return false };
        let end = l.len as usize - 1;
        let moved = self.blocks[l.last as usize][end % BLOCK];
        let mut b = l.first;
        for _ in 0..pos / BLOCK {
            b = self.next[b as usize];
        }
        self.blocks[b as usize][pos % BLOCK] = moved;
        self.lists[f as usize].len -= 1;
        if end.is_multiple_of(BLOCK) {
            // The last block emptied: back to the pool, its predecessor (if any) the last.
            let last = l.last;
            if l.first == last {
                self.lists[f as usize] = List::EMPTY;
            } else {
                let mut p = l.first;
                while self.next[p as usize] != last {
                    p = self.next[p as usize];
                }
                self.next[p as usize] = NIL;
                self.lists[f as usize].last = p;
            }
            self.next[last as usize] = self.free;
            self.free = last;
            self.free_blocks += 1;
        }
        true
    }

    /// Bytes of memory the lists use.
    pub fn memory_bytes(&self) -> usize {
        self.lists.capacity() * std::mem::size_of::<List>() + self.counted * BLOCK_BYTES
    }

    /// Bytes the pool may grow by at once.
    pub fn growth_bytes(&self) -> usize {
        self.step() * BLOCK_BYTES
    }

    /// Checks that every block is in exactly one list or the free chain, and that each list's
    /// blocks match its length. For tests.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.blocks.len()];
        let mark = |b: u32, seen: &mut Vec<bool>| -> Result<(), String> {
            let s = seen.get_mut(b as usize).ok_or(format!("block {b} out of range"))?;
            if std::mem::replace(s, true) {
                return Err(format!("block {b} is in two chains"));
            }
            Ok(())
        };
        for (f, l) in self.lists.iter().enumerate() {
            let want = (l.len as usize).div_ceil(BLOCK);
            let (mut b, mut n, mut last) = (l.first, 0, NIL);
            while b != NIL {
                mark(b, &mut seen)?;
                n += 1;
                last = b;
                b = self.next[b as usize];
            }
            if n != want || last != l.last {
                return Err(format!("frame {f}: {n} blocks for {} entries, last {last}", l.len));
            }
        }
        let (mut b, mut n) = (self.free, 0);
        while b != NIL {
            mark(b, &mut seen)?;
            n += 1;
            b = self.next[b as usize];
        }
        if n != self.free_blocks || seen.iter().any(|s| !s) {
            return Err(format!("free chain has {n} blocks, counted {}", self.free_blocks));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes, removals and clears on a few frames against a vector per frame: the same
        /// entries (as sets), and the pool's chains intact.
        #[test]
        fn lists_match_a_vector_per_frame(
            ops in proptest::collection::vec((0u32..4, 0u32..3, 0u32..200), 1..600)
        ) {
            let mut lists = FrameLists::new(4, 1 << 20);
            let mut model: Vec<Vec<u32>> = vec![Vec::new(); 4];
            let mut next_id = 0;
            for (f, op, x) in ops {
                match op {
                    0 => {
                        lists.push(f, next_id);
                        model[f as usize].push(next_id);
                        next_id += 1;
                    }
                    1 => {
                        let m = &mut model[f as usize];
                        if m.is_empty() {
                            prop_assert!(!lists.remove(f, x + 1_000_000));
                        } else {
                            let i = m.swap_remove(x as usize % m.len());
                            prop_assert!(lists.remove(f, i));
                        }
                    }
                    _ => {
                        if x % 8 == 0 {
                            lists.clear(f);
                            model[f as usize].clear();
                        }
                    }
                }
                lists.check().map_err(TestCaseError::fail)?;
                for g in 0..4u32 {
                    let mut got: Vec<u32> = lists.iter(g).collect();
                    let mut want = model[g as usize].clone();
                    got.sort_unstable();
                    want.sort_unstable();
                    prop_assert_eq!(got, want);
                    prop_assert_eq!(lists.len(g), model[g as usize].len());
                }
            }
        }
    }

    #[test]
    fn a_cleared_frame_gives_its_blocks_back() {
        let mut lists = FrameLists::new(2, 1 << 20);
        for i in 0..40 {
            lists.push(0, i);
        }
        let bytes = lists.memory_bytes();
        lists.clear(0);
        for i in 0..40 {
            assert!(!lists.push(1, i), "the pool does not grow: the blocks are reused");
        }
        assert_eq!(lists.memory_bytes(), bytes);
        lists.check().unwrap();
    }
}
