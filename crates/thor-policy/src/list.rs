//! Intrusive doubly-linked lists over one preallocated slab of nodes.
//!
//! Every policy in this crate keeps its replacement order in one or more lists whose nodes live
//! in a single `Vec` allocated up front. A node is named by its slot number (`u32`), so links are
//! four bytes and a node (block id plus two links) is sixteen: a 16,384-block cache keeps its whole
//! order in 256 KiB, and moving a block to either end is four stores.
//!
//! ```text
//!   slab:  [ 0 | 1 | 2 | 3 | 4 | 5 ]        free list: 4 -> 5 -> NIL
//!            ^       ^   ^
//!   list:  head=2 <-> 0 <-> 3=tail          (slot 1 belongs to another list)
//! ```
//!
//! Free slots are chained through their `next` link, so allocating and freeing a slot never
//! touches the allocator. The lists do not know which slots are theirs; the owning policy keeps
//! that straight (in debug builds, `List::check` walks a list and verifies its links).

use super::BlockId;

/// The "no slot" link value.
pub(crate) const NIL: u32 = u32::MAX;

/// One slab entry: a cached (or remembered) block and its neighbours in whichever list holds it.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// The block this slot describes; meaningless while the slot is free.
    id: BlockId,
    /// The neighbour towards the head (the evict-next end), or `NIL`.
    prev: u32,
    /// The neighbour towards the tail, or `NIL`; for a free slot, the next free slot.
    next: u32,
}

/// A fixed pool of list nodes shared by one policy's lists.
#[derive(Debug, Clone)]
pub(crate) struct Slab {
    /// The nodes; its length is the pool size and never changes after construction.
    nodes: Vec<Node>,
    /// Head of the chain of free slots (linked through `next`), or `NIL` when every slot is used.
    free: u32,
}

impl Slab {
    /// A pool of `slots` free nodes. `slots` must be below `u32::MAX` (checked by the policies'
    /// constructors, which report it as an error).
    pub(crate) fn new(slots: usize) -> Self {
        debug_assert!(slots < NIL as usize);
        let nodes = (0..slots)
            .map(|i| Node {
                id: 0,
                prev: NIL,
                next: if i + 1 < slots { (i + 1) as u32 } else { NIL },
            })
            .collect();
        Slab { nodes, free: if slots == 0 { NIL } else { 0 } }
    }

    /// Takes a free slot for `id`, or `None` when the pool is exhausted.
    pub(crate) fn alloc(&mut self, id: BlockId) -> Option<u32> {
        let slot = self.free;
        if slot == NIL {
            return None;
        }
        let node = &mut self.nodes[slot as usize];
        self.free = node.next;
        *node = Node { id, prev: NIL, next: NIL };
        Some(slot)
    }

    /// Returns an unlinked slot to the pool.
    pub(crate) fn release(&mut self, slot: u32) {
        let node = &mut self.nodes[slot as usize];
        node.prev = NIL;
        node.next = self.free;
        self.free = slot;
    }

    /// The block held in `slot`.
    #[inline]
    pub(crate) fn id(&self, slot: u32) -> BlockId {
        self.nodes[slot as usize].id
    }

    /// Returns every slot to the pool.
    pub(crate) fn clear(&mut self) {
        let slots = self.nodes.len();
        *self = Slab::new(slots);
    }
}

/// One doubly-linked list of slab slots. The head is the end a policy evicts from next.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    /// First slot (the evict-next end), or `NIL`.
    head: u32,
    /// Last slot (the evict-last end), or `NIL`.
    tail: u32,
    /// Number of slots on the list, kept so that `len` is O(1).
    len: u32,
}

impl List {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        List { head: NIL, tail: NIL, len: 0 }
    }

    /// Number of slots on the list.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// The head slot (evicted next), or `None` when empty.
    #[inline]
    pub(crate) fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Links an unlinked `slot` in at the head.
    pub(crate) fn push_head(&mut self, slab: &mut Slab, slot: u32) {
        let node = &mut slab.nodes[slot as usize];
        node.prev = NIL;
        node.next = self.head;
        if self.head == NIL {
            self.tail = slot;
        } else {
            slab.nodes[self.head as usize].prev = slot;
        }
        self.head = slot;
        self.len += 1;
    }

    /// Links an unlinked `slot` in at the tail.
    pub(crate) fn push_tail(&mut self, slab: &mut Slab, slot: u32) {
        let node = &mut slab.nodes[slot as usize];
        node.next = NIL;
        node.prev = self.tail;
        if self.tail == NIL {
            self.head = slot;
        } else {
            slab.nodes[self.tail as usize].next = slot;
        }
        self.tail = slot;
        self.len += 1;
    }

    /// Unlinks `slot`, which must be on this list.
    pub(crate) fn unlink(&mut self, slab: &mut Slab, slot: u32) {
        let Node { prev, next, .. } = slab.nodes[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            slab.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab.nodes[next as usize].prev = prev;
        }
        let node = &mut slab.nodes[slot as usize];
        node.prev = NIL;
        node.next = NIL;
        self.len -= 1;
    }

    /// Unlinks and returns the head slot.
    pub(crate) fn pop_head(&mut self, slab: &mut Slab) -> Option<u32> {
        let slot = self.head()?;
        self.unlink(slab, slot);
        Some(slot)
    }

    /// Moves `slot` (on this list) to the head; a no-op when it is already there.
    pub(crate) fn move_to_head(&mut self, slab: &mut Slab, slot: u32) {
        if self.head != slot {
            self.unlink(slab, slot);
            self.push_head(slab, slot);
        }
    }

    /// Moves `slot` (on this list) to the tail; a no-op when it is already there.
    pub(crate) fn move_to_tail(&mut self, slab: &mut Slab, slot: u32) {
        if self.tail != slot {
            self.unlink(slab, slot);
            self.push_tail(slab, slot);
        }
    }

    /// Calls `f` on every slot from head to tail.
    pub(crate) fn for_each(&self, slab: &Slab, mut f: impl FnMut(u32)) {
        let mut slot = self.head;
        while slot != NIL {
            f(slot);
            slot = slab.nodes[slot as usize].next;
        }
    }

    /// Forgets every slot (the caller clears the slab too).
    pub(crate) fn clear(&mut self) {
        *self = List::new();
    }

    /// Walks the list and checks that links agree in both directions and with `len`.
    #[cfg(test)]
    pub(crate) fn check(&self, slab: &Slab) {
        let mut count = 0;
        let mut prev = NIL;
        let mut slot = self.head;
        while slot != NIL {
            assert_eq!(slab.nodes[slot as usize].prev, prev, "back link of slot {slot}");
            prev = slot;
            slot = slab.nodes[slot as usize].next;
            count += 1;
            assert!(count <= self.len, "list longer than its length (cycle?)");
        }
        assert_eq!(prev, self.tail);
        assert_eq!(count, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &List, slab: &Slab) -> Vec<BlockId> {
        let mut out = Vec::new();
        list.for_each(slab, |s| out.push(slab.id(s)));
        out
    }

    #[test]
    fn push_move_pop_keep_links_consistent() {
        let mut slab = Slab::new(4);
        let mut list = List::new();
        let a = slab.alloc(10).unwrap();
        let b = slab.alloc(11).unwrap();
        let c = slab.alloc(12).unwrap();
        list.push_tail(&mut slab, a);
        list.push_tail(&mut slab, b);
        list.push_head(&mut slab, c);
        list.check(&slab);
        assert_eq!(ids(&list, &slab), [12, 10, 11]);
        list.move_to_tail(&mut slab, c);
        list.move_to_head(&mut slab, b);
        list.check(&slab);
        assert_eq!(ids(&list, &slab), [11, 10, 12]);
        assert_eq!(list.pop_head(&mut slab), Some(b));
        slab.release(b);
        list.check(&slab);
        assert_eq!(ids(&list, &slab), [10, 12]);
        // The released slot is reused before the never-used one.
        assert_eq!(slab.alloc(13), Some(b));
        assert!(slab.alloc(14).is_some());
        assert_eq!(slab.alloc(15), None);
    }
}
