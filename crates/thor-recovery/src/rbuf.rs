//! The client's recovery buffer: the bytes pages had before the running transaction first
//! wrote them, in a fixed amount of memory.
//!
//! # What it keeps
//!
//! The paper's PD keeps room for `M` page copies (section 3.2.1); SD and SL keep copies of
//! blocks (64 bytes by default) in the same memory (section 3.3). Both are one structure here,
//! with the unit of copying a setting: a whole page ([`Copies::Page`]) or a block
//! ([`Copies::Blocks`]). The memory is `M` pages' worth of bytes, cut into *slots* of one unit
//! each, allocated when the buffer is built and never grown.
//!
//! ```text
//!  slots (M · page_size / unit, each `unit` bytes)     pages, oldest first (FIFO)
//!  +------+------+------+------+------+------+         head                        tail
//!  | p7:0 | p3:5 | p7:2 | free | p3:6 | free |         [p7: slots 0,2] -> [p3: slots 1,4]
//!  +------+------+------+------+------+------+
//!         (page:block)
//! ```
//!
//! # The protocol
//!
//! Before the client writes bytes of a page it calls [`RecoveryBuffer::before_write`] with the
//! page's current image. The first write to a unit copies it (copy on first update): after
//! that, the unit's copy is its value before the transaction touched it, and a unit never
//! copied has not changed; that is the [`PreImage`] contract the diff relies on.
//!
//! When the copies the write needs do not fit, nothing is copied and the answer is
//! [`BeforeWrite::MakeRoom`] naming the oldest page (FIFO, as in the paper): the caller diffs
//! that page against [`RecoveryBuffer::pre_image`], sends its records (with undo bytes: the
//! transaction has not committed), calls [`RecoveryBuffer::release`], and asks again. The
//! oldest page may be the page being written; its records then cover the writes so far, and its
//! units are copied afresh from its current image, which is what the next records are relative
//! to. At commit every saved page is diffed and released (or [`RecoveryBuffer::clear`] after an
//! abort); a page leaving the client's cache is diffed and released alone.
//!
//! *Invariant:* one write never needs more units than the buffer has (a write lies within one
//! page and the buffer holds at least one page's worth), so making room always ends.
//!
//! # Cost
//!
//! Every table is sized when the buffer is built: slots, a slab of page entries (a page holds
//! at least one slot, so never more entries than slots), and two hash maps reserved to that
//! size. No operation allocates afterwards; each is O(units touched), and the pre-image visits a
//! page's units in order by probing the block map once per block of the page.

use rustc_hash::{FxBuildHasher, FxHashMap};
use thor_core::PageId;
use thor_core::limits::is_valid_page_size;

use crate::diff::{PreImage, Span};
use crate::error::BufferError;
use crate::limits::BLOCK_BYTES_MIN;

/// The null link of the slot and entry lists.
const NIL: u32 = u32::MAX;

/// The unit of copying.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Copies {
    /// PD: a page is copied whole on its first update.
    Page,
    /// SD and SL: a block is copied on its first update.
    Blocks {
        /// The block size: a power of two from [`BLOCK_BYTES_MIN`] up to the page size.
        block_bytes: usize,
    },
}

/// How a recovery buffer is built.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecoveryBufferConfig {
    /// The database's page size.
    pub page_size: usize,
    /// `M`: the buffer's memory in pages' worth of bytes (the paper's PD-ESM-4 has 4 MB of 8 KB
    /// pages: 512). At least 1.
    pub pages: usize,
    /// The unit of copying.
    pub copies: Copies,
}

impl RecoveryBufferConfig {
    /// Bytes of one unit of copying.
    pub fn unit_bytes(&self) -> usize {
        match self.copies {
            Copies::Page => self.page_size,
            Copies::Blocks { block_bytes } => block_bytes,
        }
    }
}

/// What [`RecoveryBuffer::before_write`] decided.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BeforeWrite {
    /// The bytes are covered by copies: write them.
    Ready,
    /// Nothing was copied; the copies do not fit. Diff and send the records of `oldest`, release
    /// it, and ask again.
    MakeRoom {
        /// The page saved first among those saved (FIFO).
        oldest: PageId,
    },
}

/// One saved page: its slots and its place in the FIFO.
#[derive(Clone, Copy, Debug)]
struct Entry {
    page: PageId,
    /// The first of the page's slots (linked through `slot_next`), or `NIL`.
    first_slot: u32,
    /// How many units of the page are saved.
    units: u32,
    /// The FIFO neighbours (toward the oldest, toward the newest), or `NIL`. Free entries are
    /// linked through `next`.
    prev: u32,
    next: u32,
}

/// Counters for the study's reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct BufferStats {
    /// Units copied (first updates).
    pub copies: u64,
    /// Bytes copied.
    pub copied_bytes: u64,
    /// Times a write had to wait for the oldest page's records (the buffer was full).
    pub make_room: u64,
}

/// The recovery buffer. See the module documentation.
#[derive(Debug)]
pub struct RecoveryBuffer {
    config: RecoveryBufferConfig,
    /// Bytes of a unit.
    unit: usize,
    /// Units per page.
    units_per_page: u32,
    /// The copies: slot `s` is `data[s * unit..(s + 1) * unit]`.
    data: Vec<u8>,
    /// For a used slot, the block index it holds.
    slot_block: Vec<u32>,
    /// For a used slot, the next slot of the same page; for a free slot, the next free slot.
    slot_next: Vec<u32>,
    /// The first free slot, or `NIL`.
    free_slot: u32,
    /// Free slots.
    free_slots: usize,
    /// Page entries (as many as slots; a saved page has at least one slot).
    entries: Vec<Entry>,
    /// The first free entry, or `NIL`.
    free_entry: u32,
    /// Saved pages, by page id.
    by_page: FxHashMap<PageId, u32>,
    /// Saved units, by page and block index.
    by_block: FxHashMap<(PageId, u32), u32>,
    /// The oldest and newest saved page (entry indices), or `NIL`.
    head: u32,
    tail: u32,
    stats: BufferStats,
}

impl RecoveryBuffer {
    /// Builds a buffer, allocating all its memory now.
    pub fn new(config: RecoveryBufferConfig) -> Result<RecoveryBuffer, BufferError> {
        if !is_valid_page_size(config.page_size) {
            return Err(BufferError::BadConfig("page size is not a valid page size"));
        }
        if config.pages == 0 {
            return Err(BufferError::BadConfig("a recovery buffer holds at least one page"));
        }
        if let Copies::Blocks { block_bytes } = config.copies
            && (!block_bytes.is_power_of_two()
                || block_bytes < BLOCK_BYTES_MIN
                || block_bytes > config.page_size)
        {
            return Err(BufferError::BadConfig(
                "block size must be a power of two from 8 bytes to the page size",
            ));
        }
        let unit = config.unit_bytes();
        let slots = config
            .pages
            .checked_mul(config.page_size / unit)
            .filter(|&s| s < NIL as usize)
            .ok_or(BufferError::BadConfig("too many slots for u32 links"))?;
        let data_bytes = slots
            .checked_mul(unit)
            .ok_or(BufferError::BadConfig("recovery buffer larger than memory"))?;
        let mut entries = Vec::with_capacity(slots);
        for i in 0..slots {
            let next = if i + 1 < slots { (i + 1) as u32 } else { NIL };
            entries.push(Entry { page: PageId::FIRST, first_slot: NIL, units: 0, prev: NIL, next });
        }
        Ok(RecoveryBuffer {
            config,
            unit,
            units_per_page: (config.page_size / unit) as u32,
            data: vec![0; data_bytes],
            slot_block: vec![0; slots],
            slot_next: (1..=slots).map(|i| if i < slots { i as u32 } else { NIL }).collect(),
            free_slot: 0,
            free_slots: slots,
            entries,
            free_entry: 0,
            by_page: FxHashMap::with_capacity_and_hasher(slots, FxBuildHasher),
            by_block: FxHashMap::with_capacity_and_hasher(slots, FxBuildHasher),
            head: NIL,
            tail: NIL,
            stats: BufferStats::default(),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> RecoveryBufferConfig {
        self.config
    }

    /// Units the buffer holds in all.
    pub fn slots(&self) -> usize {
        self.slot_block.len()
    }

    /// Units free.
    pub fn free_slots(&self) -> usize {
        self.free_slots
    }

    /// Pages with at least one saved unit.
    pub fn saved_pages(&self) -> usize {
        self.by_page.len()
    }

    /// Counters since the buffer was built.
    pub fn stats(&self) -> BufferStats {
        self.stats
    }

    /// Whether `page` has saved units.
    pub fn is_saved(&self, page: PageId) -> bool {
        self.by_page.contains_key(&page)
    }

    /// The page saved first, which [`BeforeWrite::MakeRoom`] would name.
    pub fn oldest(&self) -> Option<PageId> {
        (self.head != NIL).then(|| self.entries[self.head as usize].page)
    }

    /// The saved pages, oldest first: at commit, each is diffed and released.
    pub fn pages(&self) -> impl Iterator<Item = PageId> + '_ {
        let mut e = self.head;
        std::iter::from_fn(move || {
            (e != NIL).then(|| {
                let entry = &self.entries[e as usize];
                e = entry.next;
                entry.page
            })
        })
    }

    /// Called before the client writes `span` of `page`, whose image is `current` now. Copies
    /// every unit of the span not yet copied, or copies nothing and asks for room.
    pub fn before_write(
        &mut self,
        page: PageId,
        span: Span,
        current: &[u8],
    ) -> Result<BeforeWrite, BufferError> {
        let page_size = self.config.page_size;
        if current.len() != page_size {
            return Err(BufferError::PageSize { got: current.len(), page_size });
        }
        if span.is_empty() || span.end > page_size {
            return Err(BufferError::BadWrite { start: span.start, end: span.end, page_size });
        }
        let first = (span.start / self.unit) as u32;
        let last = ((span.end - 1) / self.unit) as u32;
        let needed = (first..=last).filter(|&b| !self.by_block.contains_key(&(page, b))).count();
        if needed == 0 {
            return Ok(BeforeWrite::Ready);
        }
        if needed > self.free_slots {
            self.stats.make_room += 1;
            let oldest = self.oldest().expect("a full buffer holds a page");
            return Ok(BeforeWrite::MakeRoom { oldest });
        }
        let e = match self.by_page.get(&page) {
            Some(&e) => e,
            None => self.new_entry(page),
        };
        for b in first..=last {
            if self.by_block.contains_key(&(page, b)) {
                continue;
            }
            let s = self.free_slot;
            debug_assert_ne!(s, NIL, "free slots were counted");
            self.free_slot = self.slot_next[s as usize];
            self.free_slots -= 1;
            let from = b as usize * self.unit;
            let at = s as usize * self.unit;
            self.data[at..at + self.unit].copy_from_slice(&current[from..from + self.unit]);
            self.slot_block[s as usize] = b;
            let entry = &mut self.entries[e as usize];
            self.slot_next[s as usize] = entry.first_slot;
            entry.first_slot = s;
            entry.units += 1;
            self.by_block.insert((page, b), s);
            self.stats.copies += 1;
            self.stats.copied_bytes += self.unit as u64;
        }
        Ok(BeforeWrite::Ready)
    }

    /// The saved units of `page`, as the diff reads them; `None` if the page has none.
    pub fn pre_image(&self, page: PageId) -> Option<SavedPage<'_>> {
        let &e = self.by_page.get(&page)?;
        Some(SavedPage { buffer: self, page, units: self.entries[e as usize].units })
    }

    /// Drops the saved units of `page` (its records were produced). Returns whether it had any.
    pub fn release(&mut self, page: PageId) -> bool {
        let Some(e) = self.by_page.remove(&page) else {
            return false;
        };
        let entry = self.entries[e as usize];
        let mut s = entry.first_slot;
        while s != NIL {
            let next = self.slot_next[s as usize];
            self.by_block.remove(&(page, self.slot_block[s as usize]));
            self.slot_next[s as usize] = self.free_slot;
            self.free_slot = s;
            self.free_slots += 1;
            s = next;
        }
        // Unlink from the FIFO, then put the entry on the free list.
        match entry.prev {
            NIL => self.head = entry.next,
            p => self.entries[p as usize].next = entry.next,
        }
        match entry.next {
            NIL => self.tail = entry.prev,
            n => self.entries[n as usize].prev = entry.prev,
        }
        self.entries[e as usize] =
            Entry { page, first_slot: NIL, units: 0, prev: NIL, next: self.free_entry };
        self.free_entry = e;
        true
    }

    /// Drops every saved unit (after an abort, or after commit once every page was diffed).
    pub fn clear(&mut self) {
        while let Some(page) = self.oldest() {
            self.release(page);
        }
    }

    /// Takes a free entry for `page` and appends it to the FIFO.
    fn new_entry(&mut self, page: PageId) -> u32 {
        let e = self.free_entry;
        // A saved page holds a slot, and there are as many entries as slots: a free slot
        // (checked by the caller) means a free entry.
        debug_assert_ne!(e, NIL);
        self.free_entry = self.entries[e as usize].next;
        self.entries[e as usize] =
            Entry { page, first_slot: NIL, units: 0, prev: self.tail, next: NIL };
        match self.tail {
            NIL => self.head = e,
            t => self.entries[t as usize].next = e,
        }
        self.tail = e;
        self.by_page.insert(page, e);
        e
    }

    /// Checks the tables against each other; for tests.
    pub fn check_invariants(&self) {
        let mut used = 0;
        let mut pages = 0;
        let mut e = self.head;
        let mut prev = NIL;
        while e != NIL {
            let entry = &self.entries[e as usize];
            assert_eq!(entry.prev, prev, "FIFO back link");
            assert_eq!(self.by_page.get(&entry.page), Some(&e), "page index");
            let mut s = entry.first_slot;
            let mut units = 0;
            while s != NIL {
                let b = self.slot_block[s as usize];
                assert!(b < self.units_per_page);
                assert_eq!(self.by_block.get(&(entry.page, b)), Some(&s), "block index");
                units += 1;
                s = self.slot_next[s as usize];
            }
            assert!(units > 0, "a saved page holds a unit");
            assert_eq!(units, entry.units);
            used += units as usize;
            pages += 1;
            prev = e;
            e = entry.next;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(pages, self.by_page.len());
        assert_eq!(used, self.by_block.len());
        assert_eq!(used + self.free_slots, self.slots());
        let mut free = 0;
        let mut s = self.free_slot;
        while s != NIL {
            free += 1;
            s = self.slot_next[s as usize];
        }
        assert_eq!(free, self.free_slots);
    }
}

/// A saved page's units, in page order: the pre-image of its diff.
#[derive(Clone, Copy, Debug)]
pub struct SavedPage<'a> {
    buffer: &'a RecoveryBuffer,
    page: PageId,
    /// How many units the page has saved; the walk stops after the last.
    units: u32,
}

impl SavedPage<'_> {
    /// Bytes saved for the page (what SL logs, at most).
    pub fn saved_bytes(&self) -> usize {
        self.units as usize * self.buffer.unit
    }
}

impl PreImage for SavedPage<'_> {
    fn page_bytes(&self) -> usize {
        self.buffer.config.page_size
    }

    fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        let b = self.buffer;
        let page = self.page;
        // Blocks in page order, stopping after the last saved one.
        let mut left = self.units;
        let mut block = 0u32;
        std::iter::from_fn(move || {
            while left > 0 && block < b.units_per_page {
                let this = block;
                block += 1;
                if let Some(&s) = b.by_block.get(&(page, this)) {
                    left -= 1;
                    let at = s as usize * b.unit;
                    return Some((this as usize * b.unit, &b.data[at..at + b.unit]));
                }
            }
            None
        })
    }
}

#[cfg(test)]
mod tests;
