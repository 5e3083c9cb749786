//! The page: a fixed-size block of objects with an offset table.
//!
//! Servers store objects in pages, clients fetch whole pages, and a page is byte-for-byte the
//! same on disk, on the wire and in a client's intact cache frame, so no layer copies or converts
//! it.
//!
//! ```text
//! 0        4        8                16     18     20     22     24
//! +--------+--------+----------------+------+------+------+------+
//! | crc32c | pageid |    version     | slots| dend | fmt  | 0    |   header (24 bytes)
//! +--------+--------+----------------+------+------+------+------+
//! | object oid 0 | object oid 1 | ... | object oid n-1 |           objects, in oid order,
//! +--------------+--------------+-----+----------------+           contiguous, 4-aligned
//! |                   free (zero bytes)                 |
//! +--------+--------+-----+--------+--------+
//! | off[n-1]| ...   | off[1] | off[0] |                            offset table, growing down
//! +--------+--------+-----+--------+--------+                      page_size
//! ```
//!
//! - `crc32c` covers bytes `4..page_size`. It is written when a page is sealed for the disk and
//!   checked when one is read back; pages travelling to clients are checked structurally only.
//! - `version` is the LSN of the last commit installed into the page (0 for a bulk-loaded one).
//! - `slots` is the number of offset-table entries (highest oid + 1); entry `i` is the u16 at
//!   `page_size - 2 * (i + 1)`. An entry of 0 means no object has that oid.
//! - `dend` is one past the last object byte.
//! - `fmt` is [`PAGE_FORMAT`]; the last two bytes are reserved and zero.
//!
//! *Invariant:* present objects appear in increasing oid order with no gaps, so an object's size
//! is the distance to the next present object (or to `dend`) and is never stored. Installing a
//! version of a different size repacks the page; orefs do not change because only offsets move.
//! Unused bytes are zero, so that the same objects always give the same page bytes.

use crate::checksum::crc32c;
use crate::error::FormatError;
use crate::ids::{Lsn, OIDS_PER_PAGE, Oid, PageId};
use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::limits::{
    OBJECT_ALIGN, OBJECT_HEADER_BYTES, OFFSET_ENTRY_BYTES, PAGE_HEADER_BYTES, is_valid_page_size,
    max_object_bytes,
};

/// The page format version, stored in every page header.
pub const PAGE_FORMAT: u16 = 0x7401;

const OFF_CRC: usize = 0;
const OFF_PAGE_ID: usize = 4;
const OFF_VERSION: usize = 8;
const OFF_SLOTS: usize = 16;
const OFF_DATA_END: usize = 18;
const OFF_FORMAT: usize = 20;
const OFF_RESERVED: usize = 22;

#[inline]
fn entry_pos(page_size: usize, oid: usize) -> usize {
    page_size - OFFSET_ENTRY_BYTES * (oid + 1)
}

/// Where object `i` ends: at the next present offset after entry `i`, or at `data_end` if
/// none of the `slots` entries after it is present (objects are contiguous, in oid order).
/// Reads only offset-table entries below `slots`, which the caller has checked fit the page.
/// The slot count and data end of the page `bytes`, checked against each other and the page
/// size (the offset table itself is not read).
#[inline]
fn header_bounds(bytes: &[u8]) -> Result<(usize, usize), FormatError> {
    let page_size = bytes.len();
    if !is_valid_page_size(page_size) {
        return Err(FormatError::BadPageSize(page_size));
    }
    if u16_at(bytes, OFF_FORMAT) != PAGE_FORMAT {
        return Err(FormatError::BadPageHeader("unknown page format"));
    }
    let slots = u16_at(bytes, OFF_SLOTS) as usize;
    let data_end = u16_at(bytes, OFF_DATA_END) as usize;
    if slots > OIDS_PER_PAGE
        || data_end < PAGE_HEADER_BYTES
        || data_end + OFFSET_ENTRY_BYTES * slots > page_size
    {
        return Err(FormatError::BadPageHeader("slot count or data end out of range"));
    }
    Ok((slots, data_end))
}

#[inline]
fn object_end(bytes: &[u8], i: usize, slots: usize, data_end: usize) -> usize {
    let page_size = bytes.len();
    (i + 1..slots)
        .map(|j| u16_at(bytes, entry_pos(page_size, j)))
        .find(|&n| n != 0)
        .map_or(data_end, usize::from)
}

/// The checksum a sealed page should carry.
pub fn compute_checksum(bytes: &[u8]) -> u32 {
    crc32c(&bytes[OFF_PAGE_ID..])
}

/// Writes the checksum of `bytes` into its header. The buffer must be a whole page.
pub fn seal(bytes: &mut [u8]) {
    let crc = compute_checksum(bytes);
    put_u32(bytes, OFF_CRC, crc);
}

/// Checks that `obj` can be stored as an object: long enough for a header, aligned, and small
/// enough for a page of `page_size` bytes.
pub fn check_object_bytes(obj: &[u8], page_size: usize) -> Result<(), FormatError> {
    if obj.len() < OBJECT_HEADER_BYTES {
        return Err(FormatError::BadObject("shorter than an object header"));
    }
    if !obj.len().is_multiple_of(OBJECT_ALIGN) {
        return Err(FormatError::BadObject("size is not a multiple of 4"));
    }
    let max = max_object_bytes(page_size);
    if obj.len() > max {
        return Err(FormatError::ObjectTooLarge { size: obj.len(), max });
    }
    Ok(())
}

/// A read-only view of a page whose structure has been checked.
///
/// Every accessor relies on [`PageView::parse`] having verified the invariants in the module
/// documentation, so none of them can index out of bounds.
#[derive(Clone, Copy)]
pub struct PageView<'a> {
    bytes: &'a [u8],
}

impl std::fmt::Debug for PageView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageView")
            .field("page_id", &self.page_id())
            .field("version", &self.version())
            .field("slots", &self.slot_count())
            .field("data_end", &self.data_end())
            .finish()
    }
}

impl<'a> PageView<'a> {
    /// Checks the structure of `bytes` (not its checksum): a valid page size, a known format,
    /// a header in range, and an offset table whose entries are ordered, aligned and in bounds.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let page_size = bytes.len();
        if !is_valid_page_size(page_size) {
            return Err(FormatError::BadPageSize(page_size));
        }
        if u16_at(bytes, OFF_FORMAT) != PAGE_FORMAT {
            return Err(FormatError::BadPageHeader("unknown page format"));
        }
        if u16_at(bytes, OFF_RESERVED) != 0 {
            return Err(FormatError::BadPageHeader("reserved bytes are not zero"));
        }
        if PageId::new(u32_at(bytes, OFF_PAGE_ID)).is_none() {
            return Err(FormatError::BadPageHeader("page id out of range"));
        }
        let slots = u16_at(bytes, OFF_SLOTS) as usize;
        if slots > OIDS_PER_PAGE {
            return Err(FormatError::BadPageHeader("more offset-table entries than object ids"));
        }
        let data_end = u16_at(bytes, OFF_DATA_END) as usize;
        if data_end < PAGE_HEADER_BYTES || !data_end.is_multiple_of(OBJECT_ALIGN) {
            return Err(FormatError::BadPageHeader("data end misplaced"));
        }
        if data_end + OFFSET_ENTRY_BYTES * slots > page_size {
            return Err(FormatError::BadPageHeader("objects overlap the offset table"));
        }
        // Present offsets must increase with the oid, start where the previous object ends
        // (objects are contiguous), and leave at least a header's worth for each object.
        let mut expect = PAGE_HEADER_BYTES;
        for i in 0..slots {
            let off = u16_at(bytes, entry_pos(page_size, i));
            if off == 0 {
                continue;
            }
            let oid = Oid::new(i as u16).expect("slots <= OIDS_PER_PAGE");
            let o = off as usize;
            if o != expect {
                return Err(FormatError::BadOffset {
                    oid,
                    offset: off,
                    why: "objects not contiguous",
                });
            }
            // The object runs to the next present offset; check below that it is big enough by
            // requiring the next start to be at least a header further on.
            expect = o + OBJECT_HEADER_BYTES;
            // Advance `expect` to the actual end: the next present entry or data_end.
            let next = object_end(bytes, i, slots, data_end);
            if next < expect || !next.is_multiple_of(OBJECT_ALIGN) {
                return Err(FormatError::BadOffset { oid, offset: off, why: "object too small" });
            }
            expect = next;
        }
        if expect != data_end {
            return Err(FormatError::BadPageHeader("data end does not follow the last object"));
        }
        Ok(PageView { bytes })
    }

    /// A view of bytes that were checked by [`PageView::parse`] before and have not been
    /// changed since except inside objects (object bytes may change; offsets, slot count and
    /// data end may not). Costs nothing. If that promise is broken the accessors may panic, but
    /// they never read outside `bytes`.
    pub fn assume_parsed(bytes: &'a [u8]) -> Self {
        debug_assert!(PageView::parse(bytes).is_ok());
        PageView { bytes }
    }

    /// The bytes of object `oid` of the page `bytes`, checking only what reading that one object
    /// needs: the header's size fields, the object's offset-table entry and the next present
    /// one. It costs a few reads where [`PageView::parse`] walks the whole offset table, for a
    /// server that reads one object of a page it holds (checked when it was read or built) per
    /// written object of a commit. Never panics, whatever `bytes` holds; a page that
    /// [`PageView::parse`] accepts gives the same answer as [`PageView::object`].
    pub fn object_in(bytes: &'a [u8], oid: Oid) -> Result<Option<&'a [u8]>, FormatError> {
        let page_size = bytes.len();
        let (slots, data_end) = header_bounds(bytes)?;
        let i = oid.index();
        if i >= slots {
            return Ok(None);
        }
        let start = match u16_at(bytes, entry_pos(page_size, i)) {
            0 => return Ok(None),
            o => o as usize,
        };
        let end = object_end(bytes, i, slots, data_end);
        if start < PAGE_HEADER_BYTES
            || !start.is_multiple_of(OBJECT_ALIGN)
            || end < start + OBJECT_HEADER_BYTES
            || end > data_end
        {
            return Err(FormatError::BadOffset {
                oid,
                offset: start as u16,
                why: "object misplaced",
            });
        }
        Ok(Some(&bytes[start..end]))
    }

    /// The offset-table size of the page `bytes`, with the header checks
    /// [`PageView::object_in`] makes and without reading the table: for a page whose table was
    /// checked when it was read ([`PageView::parse_stored`]) or that was built here, where
    /// parsing each of a commit's 4,000 pages to learn its slot count cost a pass over its
    /// table (OO7's T2b).
    pub fn slot_count_in(bytes: &[u8]) -> Result<usize, FormatError> {
        header_bounds(bytes).map(|(slots, _)| slots)
    }

    /// Checks a page read back from disk: its checksum, that it is the page asked for, and its
    /// structure.
    pub fn parse_stored(bytes: &'a [u8], expected: PageId) -> Result<Self, FormatError> {
        if !is_valid_page_size(bytes.len()) {
            return Err(FormatError::BadPageSize(bytes.len()));
        }
        let stored = u32_at(bytes, OFF_CRC);
        let computed = compute_checksum(bytes);
        if stored != computed {
            return Err(FormatError::PageChecksum { stored, computed });
        }
        let found = u32_at(bytes, OFF_PAGE_ID);
        if found != expected.get() {
            return Err(FormatError::WrongPageId { expected: expected.get(), found });
        }
        Self::parse(bytes)
    }

    /// The page's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The page size.
    pub fn page_size(&self) -> usize {
        self.bytes.len()
    }

    /// The page id in the header.
    pub fn page_id(&self) -> PageId {
        PageId::new(u32_at(self.bytes, OFF_PAGE_ID)).expect("checked by parse")
    }

    /// The LSN of the last commit installed into this page.
    pub fn version(&self) -> Lsn {
        Lsn(u64_at(self.bytes, OFF_VERSION))
    }

    /// Number of offset-table entries (highest oid + 1).
    pub fn slot_count(&self) -> usize {
        u16_at(self.bytes, OFF_SLOTS) as usize
    }

    /// One past the last object byte.
    pub fn data_end(&self) -> usize {
        u16_at(self.bytes, OFF_DATA_END) as usize
    }

    /// Bytes still free for new objects and their offset-table entries.
    pub fn free_bytes(&self) -> usize {
        self.page_size() - self.data_end() - OFFSET_ENTRY_BYTES * self.slot_count()
    }

    /// The offset of object `oid`, if present.
    #[inline]
    pub fn offset(&self, oid: Oid) -> Option<usize> {
        let i = oid.index();
        if i >= self.slot_count() {
            return None;
        }
        match u16_at(self.bytes, entry_pos(self.bytes.len(), i)) {
            0 => None,
            o => Some(o as usize),
        }
    }

    /// The byte range `start..end` of object `oid` within the page, if present.
    pub fn object_range(&self, oid: Oid) -> Option<std::ops::Range<usize>> {
        let start = self.offset(oid)?;
        Some(start..object_end(self.bytes, oid.index(), self.slot_count(), self.data_end()))
    }

    /// The bytes of object `oid` (header included), if present.
    pub fn object(&self, oid: Oid) -> Option<&'a [u8]> {
        self.object_range(oid).map(|r| &self.bytes[r])
    }

    /// The present objects in oid order.
    pub fn objects(&self) -> impl Iterator<Item = (Oid, &'a [u8])> + 'a {
        let view = *self;
        let bytes = self.bytes;
        let slots = self.slot_count();
        let data_end = self.data_end();
        // Walk the table backwards-free: remember each present entry and emit the previous one
        // when the next present entry (its end) is found.
        let mut i = 0usize;
        std::iter::from_fn(move || {
            while i < slots {
                let oid = Oid::new(i as u16).expect("slots <= OIDS_PER_PAGE");
                i += 1;
                if let Some(start) = view.offset(oid) {
                    let end = object_end(bytes, oid.index(), slots, data_end);
                    return Some((oid, &bytes[start..end]));
                }
            }
            None
        })
    }

    /// Number of present objects.
    pub fn object_count(&self) -> usize {
        (0..self.slot_count())
            .filter(|&i| u16_at(self.bytes, entry_pos(self.bytes.len(), i)) != 0)
            .count()
    }
}

/// A page being built or changed, over a caller's buffer that holds a valid page.
#[derive(Debug)]
pub struct PageMut<'a> {
    bytes: &'a mut [u8],
}

impl<'a> PageMut<'a> {
    /// Formats `bytes` as an empty page `id`.
    pub fn init(bytes: &'a mut [u8], id: PageId) -> Result<Self, FormatError> {
        if !is_valid_page_size(bytes.len()) {
            return Err(FormatError::BadPageSize(bytes.len()));
        }
        bytes.fill(0);
        put_u32(bytes, OFF_PAGE_ID, id.get());
        put_u16(bytes, OFF_DATA_END, PAGE_HEADER_BYTES as u16);
        put_u16(bytes, OFF_FORMAT, PAGE_FORMAT);
        Ok(PageMut { bytes })
    }

    /// Opens a buffer holding a page for change, after checking its structure.
    pub fn open(bytes: &'a mut [u8]) -> Result<Self, FormatError> {
        PageView::parse(bytes)?;
        Ok(PageMut { bytes })
    }

    /// A read-only view of the page as it is now.
    pub fn view(&self) -> PageView<'_> {
        PageView { bytes: self.bytes }
    }

    /// Sets the LSN recorded in the header.
    pub fn set_version(&mut self, lsn: Lsn) {
        put_u64(self.bytes, OFF_VERSION, lsn.0);
    }

    /// Writes the checksum; call after the last change, before the page goes to disk.
    pub fn seal(&mut self) {
        seal(self.bytes);
    }

    /// Appends `obj` as the object with the next oid (the current slot count), the way new
    /// objects are allocated in creation order.
    pub fn append(&mut self, obj: &[u8]) -> Result<Oid, FormatError> {
        let size = self.bytes.len();
        check_object_bytes(obj, size)?;
        let view = self.view();
        let slots = view.slot_count();
        let oid = Oid::new(slots as u16).ok_or(FormatError::NoFreeOid)?;
        let free = view.free_bytes();
        let needed = obj.len() + OFFSET_ENTRY_BYTES;
        if needed > free {
            return Err(FormatError::PageFull { needed, free });
        }
        let start = view.data_end();
        self.bytes[start..start + obj.len()].copy_from_slice(obj);
        put_u16(self.bytes, entry_pos(size, slots), start as u16);
        put_u16(self.bytes, OFF_SLOTS, (slots + 1) as u16);
        put_u16(self.bytes, OFF_DATA_END, (start + obj.len()) as u16);
        Ok(oid)
    }

    /// Installs object versions: each `(oid, bytes)` replaces the object with that oid or, if
    /// there is none, adds it. When an oid appears more than once the last entry wins. Either
    /// every version is installed or, if they do not fit, the page is unchanged.
    ///
    /// When every version has its object's current size this is a few copies in place; any
    /// size change or new object repacks the page through `scratch`, keeping oids.
    pub fn apply(
        &mut self,
        versions: &mut [(Oid, &[u8])],
        scratch: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        let size = self.bytes.len();
        for (_, obj) in versions.iter() {
            check_object_bytes(obj, size)?;
        }
        // Stable sort then keep the last of each run, so later entries win.
        versions.sort_by_key(|(oid, _)| *oid);
        let mut n = 0;
        for i in 0..versions.len() {
            if i + 1 < versions.len() && versions[i + 1].0 == versions[i].0 {
                continue;
            }
            versions[n] = versions[i];
            n += 1;
        }
        let versions = &versions[..n];

        let view = self.view();
        let in_place = versions.iter().all(|(oid, obj)| {
            view.object_range(*oid).is_some_and(|r| r.end - r.start == obj.len())
        });
        if in_place {
            for (oid, obj) in versions {
                let r = self.view().object_range(*oid).expect("checked above");
                self.bytes[r].copy_from_slice(obj);
            }
            return Ok(());
        }

        // Repack: first check that the final layout fits, then lay the objects out in oid order
        // in `scratch` and copy them back, so a failure leaves the page untouched.
        let slots_old = view.slot_count();
        let slots_new =
            versions.last().map_or(slots_old, |(oid, _)| slots_old.max(oid.index() + 1));
        let final_object = |i: usize, vi: &mut usize| -> Option<&[u8]> {
            let oid = Oid::new(i as u16).expect("slots <= OIDS_PER_PAGE");
            if *vi < versions.len() && versions[*vi].0 == oid {
                *vi += 1;
                Some(versions[*vi - 1].1)
            } else {
                view.object(oid)
            }
        };
        let mut vi = 0;
        let objects_bytes: usize =
            (0..slots_new).filter_map(|i| final_object(i, &mut vi)).map(<[u8]>::len).sum();
        let used_new = PAGE_HEADER_BYTES + objects_bytes + OFFSET_ENTRY_BYTES * slots_new;
        if used_new > size {
            let free = view.free_bytes();
            let used_old = size - free;
            return Err(FormatError::PageFull { needed: used_new - used_old, free });
        }
        let mut offsets = [0u16; OIDS_PER_PAGE];
        scratch.clear();
        let mut vi = 0;
        for (i, slot) in offsets.iter_mut().enumerate().take(slots_new) {
            if let Some(obj) = final_object(i, &mut vi) {
                *slot = (PAGE_HEADER_BYTES + scratch.len()) as u16;
                scratch.extend_from_slice(obj);
            }
        }
        let data_end = PAGE_HEADER_BYTES + scratch.len();
        self.bytes[PAGE_HEADER_BYTES..data_end].copy_from_slice(scratch);
        let table_start = size - OFFSET_ENTRY_BYTES * slots_new;
        self.bytes[data_end..table_start].fill(0);
        for (i, off) in offsets.iter().enumerate().take(slots_new) {
            put_u16(self.bytes, entry_pos(size, i), *off);
        }
        put_u16(self.bytes, OFF_SLOTS, slots_new as u16);
        put_u16(self.bytes, OFF_DATA_END, data_end as u16);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn obj(tag: u8, words: usize) -> Vec<u8> {
        let mut v = vec![tag; words * 4];
        v[..4].copy_from_slice(&[tag, 0, 0, 0]);
        v
    }

    fn new_page(size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        PageMut::init(&mut b, PageId::new(7).unwrap()).unwrap();
        b
    }

    #[test]
    fn append_and_read_back() {
        let mut b = new_page(8192);
        let mut p = PageMut::open(&mut b).unwrap();
        assert_eq!(p.append(&obj(1, 3)).unwrap().get(), 0);
        assert_eq!(p.append(&obj(2, 5)).unwrap().get(), 1);
        p.set_version(Lsn(9));
        p.seal();
        let v = PageView::parse_stored(&b, PageId::new(7).unwrap()).unwrap();
        assert_eq!(v.version(), Lsn(9));
        assert_eq!(v.object(Oid::new(0).unwrap()).unwrap(), &obj(1, 3)[..]);
        assert_eq!(v.object(Oid::new(1).unwrap()).unwrap(), &obj(2, 5)[..]);
        assert_eq!(v.object(Oid::new(2).unwrap()), None);
        assert_eq!(v.objects().count(), 2);
        assert_eq!(v.free_bytes(), 8192 - 24 - 32 - 4);
    }

    #[test]
    fn page_fills_up_exactly() {
        let mut b = new_page(1024);
        let mut p = PageMut::open(&mut b).unwrap();
        // 1024 - 24 header = 1000 bytes: 50 objects of 18 bytes (16 + 2) fit, then 100 left.
        for _ in 0..55 {
            p.append(&obj(3, 4)).unwrap();
        }
        assert_eq!(p.view().free_bytes(), 1000 - 55 * 18);
        assert!(matches!(p.append(&obj(3, 30)), Err(FormatError::PageFull { .. })));
    }

    #[test]
    fn wrong_page_and_bad_checksum_are_reported() {
        let mut b = new_page(4096);
        seal(&mut b);
        assert!(matches!(
            PageView::parse_stored(&b, PageId::new(8).unwrap()),
            Err(FormatError::WrongPageId { expected: 8, found: 7 })
        ));
        b[100] ^= 1;
        assert!(matches!(
            PageView::parse_stored(&b, PageId::new(7).unwrap()),
            Err(FormatError::PageChecksum { .. })
        ));
    }

    #[test]
    fn apply_resizes_and_keeps_oids() {
        let mut b = new_page(4096);
        let mut scratch = Vec::new();
        let mut p = PageMut::open(&mut b).unwrap();
        for t in 0..4 {
            p.append(&obj(t, 2)).unwrap();
        }
        let big = obj(9, 10);
        let same = obj(8, 2);
        let new = obj(7, 1);
        let mut vs = [
            (Oid::new(1).unwrap(), &big[..]),
            (Oid::new(3).unwrap(), &same[..]),
            (Oid::new(6).unwrap(), &new[..]),
        ];
        p.apply(&mut vs, &mut scratch).unwrap();
        let v = PageView::parse(&b).unwrap();
        assert_eq!(v.slot_count(), 7);
        assert_eq!(v.object(Oid::new(0).unwrap()).unwrap(), &obj(0, 2)[..]);
        assert_eq!(v.object(Oid::new(1).unwrap()).unwrap(), &big[..]);
        assert_eq!(v.object(Oid::new(3).unwrap()).unwrap(), &same[..]);
        assert_eq!(v.object(Oid::new(4).unwrap()), None);
        assert_eq!(v.object(Oid::new(6).unwrap()).unwrap(), &new[..]);
    }

    #[test]
    fn apply_that_does_not_fit_changes_nothing() {
        let mut b = new_page(1024);
        let mut scratch = Vec::new();
        let mut p = PageMut::open(&mut b).unwrap();
        p.append(&obj(1, 100)).unwrap();
        p.append(&obj(2, 100)).unwrap();
        let before = b.clone();
        let huge = obj(3, 200);
        let mut p = PageMut::open(&mut b).unwrap();
        assert!(matches!(
            p.apply(&mut [(Oid::new(0).unwrap(), &huge[..])], &mut scratch),
            Err(FormatError::PageFull { .. })
        ));
        assert_eq!(b, before);
    }

    #[test]
    fn bad_offsets_are_rejected() {
        let mut b = new_page(1024);
        let mut p = PageMut::open(&mut b).unwrap();
        p.append(&obj(1, 2)).unwrap();
        p.append(&obj(2, 2)).unwrap();
        // Point oid 1 into the middle of oid 0.
        put_u16(&mut b, entry_pos(1024, 1), 26);
        assert!(matches!(PageView::parse(&b), Err(FormatError::BadOffset { .. })));
    }

    proptest! {
        /// Any bytes: parsing never panics, and whatever parses can be walked in full.
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 1024..=1024)) {
            if let Ok(v) = PageView::parse(&data) {
                for (_, o) in v.objects() {
                    prop_assert!(o.len() >= 4);
                }
            }
        }

        /// Damage to a valid page: parse errors or yields a structurally valid page, never panics.
        #[test]
        fn mutated_pages_never_panic(
            words in proptest::collection::vec(1usize..20, 1..30),
            flips in proptest::collection::vec((0usize..2048, 0u8..8), 1..8),
        ) {
            let mut b = new_page(2048);
            {
                let mut p = PageMut::open(&mut b).unwrap();
                for (i, w) in words.iter().enumerate() {
                    if p.append(&obj(i as u8, *w)).is_err() { break; }
                }
            }
            for (pos, bit) in flips { b[pos] ^= 1 << bit; }
            if let Ok(v) = PageView::parse(&b) {
                let total: usize = v.objects().map(|(_, o)| o.len()).sum();
                prop_assert!(total <= 2048);
            }
        }

        /// `object_in` on damaged pages: never panics, never returns bytes outside the page's
        /// object area, and agrees with `parse` and `object` wherever the page parses.
        #[test]
        fn object_in_is_checked_and_agrees_with_parse(
            words in proptest::collection::vec(1usize..20, 1..30),
            deleted in proptest::collection::vec(0u16..30, 0..4),
            flips in proptest::collection::vec((0usize..2048, 0u8..8), 0..6),
        ) {
            let mut b = new_page(2048);
            {
                let mut p = PageMut::open(&mut b).unwrap();
                for (i, w) in words.iter().enumerate() {
                    if p.append(&obj(i as u8, *w)).is_err() { break; }
                }
            }
            for d in deleted {
                put_u16(&mut b, entry_pos(2048, d as usize), 0);
            }
            for (pos, bit) in flips { b[pos] ^= 1 << bit; }
            let parsed = PageView::parse(&b);
            // The header's slot count: what `parse` says wherever the page parses, and never
            // more entries than fit beside the objects.
            match PageView::slot_count_in(&b) {
                Ok(n) => {
                    prop_assert!(u16_at(&b, OFF_DATA_END) as usize + OFFSET_ENTRY_BYTES * n <= 2048);
                    if let Ok(v) = &parsed {
                        prop_assert_eq!(n, v.slot_count());
                    }
                }
                Err(_) => prop_assert!(parsed.is_err(), "a page that parses has a slot count"),
            }
            for oid in 0..40u16 {
                let oid = Oid::new(oid).unwrap();
                match PageView::object_in(&b, oid) {
                    Ok(Some(o)) => {
                        prop_assert!(o.len() >= OBJECT_HEADER_BYTES);
                        let start = o.as_ptr() as usize - b.as_ptr() as usize;
                        prop_assert!(start >= PAGE_HEADER_BYTES);
                        prop_assert!(start + o.len() <= u16_at(&b, OFF_DATA_END) as usize);
                        if let Ok(v) = &parsed {
                            prop_assert_eq!(Some(o), v.object(oid));
                        }
                    }
                    Ok(None) => {
                        if let Ok(v) = &parsed {
                            prop_assert_eq!(None, v.object(oid));
                        }
                    }
                    Err(_) => prop_assert!(parsed.is_err(), "a page that parses reads every object"),
                }
            }
        }

        /// `apply` against a model: a map from oid to bytes.
        #[test]
        fn apply_matches_model(
            ops in proptest::collection::vec(
                proptest::collection::vec((0u16..40, 1usize..30, any::<u8>()), 1..6), 1..20),
        ) {
            let mut b = new_page(4096);
            let mut scratch = Vec::new();
            let mut model: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
            for batch in ops {
                let objs: Vec<(Oid, Vec<u8>)> =
                    batch.iter().map(|(o, w, t)| (Oid::new(*o).unwrap(), obj(*t, *w))).collect();
                let mut vs: Vec<(Oid, &[u8])> = objs.iter().map(|(o, v)| (*o, &v[..])).collect();
                let before = b.clone();
                let mut p = PageMut::open(&mut b).unwrap();
                match p.apply(&mut vs, &mut scratch) {
                    Ok(()) => for (o, v) in &objs { model.insert(o.get(), v.clone()); },
                    Err(FormatError::PageFull { .. }) => prop_assert_eq!(&b, &before),
                    Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                }
                let v = PageView::parse(&b).unwrap();
                let got: BTreeMap<u16, Vec<u8>> =
                    v.objects().map(|(o, bytes)| (o.get(), bytes.to_vec())).collect();
                prop_assert_eq!(&got, &model);
            }
        }
    }
}
