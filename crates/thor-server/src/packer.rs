//! The page packer: the one rule by which objects written straight into fresh pages are given
//! their orefs. [`BulkLoader`](crate::BulkLoader) places every object it adds by it, and the
//! offline rewrite (`thor-admin`'s upgrade and compaction) plans every new oref by it before
//! the first object is written, so that references forward need no patching.
//!
//! The rule: objects are placed in the order given, each into the page being filled if it fits
//! there (its bytes plus a 2-byte offset entry in the page's free space, and fewer than
//! [`OIDS_PER_PAGE`] objects in the page), else at oid 0 of the next page. The first object
//! opens the first page whatever its size. The packer needs sizes only, no bytes.

use thor_core::ids::OIDS_PER_PAGE;
use thor_core::limits::{OFFSET_ENTRY_BYTES, PAGE_HEADER_BYTES};
use thor_core::{Oid, Oref, PageId};

use thor_server_core::EngineError;

/// Places objects into fresh pages from a first page on; see the module documentation.
#[derive(Debug, Clone)]
pub struct PagePacker {
    /// Bytes per page.
    page_size: usize,
    /// The page being filled.
    page: PageId,
    /// One past its last object byte.
    data_end: usize,
    /// Its objects (oid slots).
    slots: usize,
    /// Whether anything was placed yet (the first object opens `page` itself).
    started: bool,
}

impl PagePacker {
    /// A packer whose first object goes to `first`, in pages of `page_size` bytes.
    pub fn new(first: PageId, page_size: usize) -> PagePacker {
        PagePacker { page_size, page: first, data_end: PAGE_HEADER_BYTES, slots: 0, started: false }
    }

    /// The oref of the next object, of `size` bytes (at most a page's largest object, which
    /// the caller checks: `thor_core::page::check_object_bytes`). [`EngineError::Full`] when
    /// the next page would be past the last page id.
    pub fn place(&mut self, size: usize) -> Result<Oref, EngineError> {
        let free = self.page_size - self.data_end - OFFSET_ENTRY_BYTES * self.slots;
        let fits = self.slots < OIDS_PER_PAGE && size + OFFSET_ENTRY_BYTES <= free;
        if self.started && !fits {
            self.page = self.page.next().ok_or(EngineError::Full)?;
            self.data_end = PAGE_HEADER_BYTES;
            self.slots = 0;
        }
        self.started = true;
        let oid = Oid::new(self.slots as u16).expect("checked against OIDS_PER_PAGE");
        self.slots += 1;
        self.data_end += size;
        Ok(Oref::new(self.page, oid))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use thor_core::builtin;
    use thor_core::le::put_u32;
    use thor_core::limits::max_object_bytes;
    use thor_storage::MemDisk;

    use super::*;
    use crate::{Engine, EngineOptions};

    #[test]
    fn objects_fill_a_page_then_open_the_next() {
        let first = PageId::new(5).unwrap();
        let mut p = PagePacker::new(first, 1024);
        // The first object opens page 5 at oid 0, however large.
        let max = max_object_bytes(1024);
        assert_eq!(p.place(max).unwrap(), Oref::new(first, Oid::new(0).unwrap()));
        // Nothing more fits beside a page's largest object.
        let next = first.next().unwrap();
        assert_eq!(p.place(4).unwrap(), Oref::new(next, Oid::new(0).unwrap()));
        assert_eq!(p.place(4).unwrap(), Oref::new(next, Oid::new(1).unwrap()));
    }

    #[test]
    fn a_page_holds_at_most_its_oids() {
        let first = PageId::new(1).unwrap();
        let mut p = PagePacker::new(first, 32 * 1024);
        for i in 0..OIDS_PER_PAGE {
            assert_eq!(p.place(4).unwrap(), Oref::new(first, Oid::new(i as u16).unwrap()));
        }
        let next = first.next().unwrap();
        assert_eq!(p.place(4).unwrap(), Oref::new(next, Oid::new(0).unwrap()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// The packer, planning alone, gives every object the oref the bulk loader (which
        /// places by a packer of its own, and appends to real pages) then gives it: the
        /// offline rewrite relies on it, and asserts it for every object it writes.
        #[test]
        fn the_packer_packs_as_the_bulk_loader_does(
            page_size in prop::sample::select(vec![1024usize, 4096, 8192]),
            sizes in prop::collection::vec((1usize..=2041, any::<bool>()), 1..600),
        ) {
            let opts = EngineOptions {
                page_size,
                background_flusher: false,
                ..EngineOptions::default()
            };
            let engine = Engine::create(Arc::new(MemDisk::new()), opts).unwrap();
            let mut loader = engine.bulk_load().unwrap();
            let mut pack = PagePacker::new(loader.first_page(), page_size);
            let max = max_object_bytes(page_size);
            for (i, (words, small)) in sizes.into_iter().enumerate() {
                // Many tiny objects (to reach the oid limit) and some up to a page.
                let size = if small { 4 } else { (4 * words).min(max) };
                let mut obj = vec![0u8; size];
                put_u32(&mut obj, 0, builtin::BYTES.raw());
                let planned = pack.place(size).unwrap();
                prop_assert_eq!(loader.add(&obj).unwrap(), planned, "object {} of {} bytes", i, size);
                if i % 97 == 0 {
                    loader.write_out().unwrap();
                }
            }
            loader.finish().unwrap();
        }
    }
}
