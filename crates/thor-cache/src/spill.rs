//! Transactions larger than the cache: stealing modified and created objects to a spill store.
//!
//! # Why
//!
//! The cache is no-steal: an object the current transaction modified or created stays in the
//! cache until the transaction ends, because the commit ships it from there and an abort puts
//! its undo copy back there. Thor's paper assumes a transaction's writes fit in the cache; a
//! transaction that outgrows it (OO7's T2b on the medium database writes every atomic part)
//! used to fail with [`CacheError::Full`]. With a spill store the cache *steals* those objects
//! instead: their bytes go to the store, their frames are freed, and the transaction goes on.
//!
//! # What a steal does
//!
//! When replacement cannot free a frame (the manager says `Full`), [`ClientCache`] steals every
//! modified or created object that no view pins:
//!
//! ```text
//!   frame (intact or compacted)  modified objects -> records; the rest stays; an intact
//!                                frame that is its page's copy stops being a source of
//!                                installation (the slot held the transaction's bytes)
//!   frame of created objects     every object -> records, the frame is freed
//!
//!   entry  loc = NOT_RESIDENT, F_SPILLED; record position / 8 in the core's spill positions
//! ```
//!
//! A stolen object's references are written unswizzled (orefs, or the tagged serial of an
//! object the transaction created) and its swizzled words' counts released, as when any object
//! leaves. Its entry stays (modified and created entries are never freed during a
//! transaction), so handles and swizzled words naming it keep working. Where its record is sits
//! in a table of 4 bytes per entry (`CacheCore::spill_position`), made at the first steal,
//! counted in the budget with the other tables, and dropped when the transaction ends.
//!
//! # Reading back, committing, aborting
//!
//! - An access to a stolen object takes the slow path ([`ClientCache::resolve`]), which reads
//!   its record back into the frame of created objects (the transaction's own frames, which
//!   replacement never takes), checks it as it checks a fetched object, and swizzles its
//!   references to created objects again. The transaction sees its own writes.
//! - The commit ([`ClientCache::export`]) ships a stolen object from its record, in the same
//!   form as a resident one: the server sees an ordinary commit, so validation and recovery
//!   are unchanged. The read set is kept by oref ([`crate::readset`]), apart from residency,
//!   so it stays complete.
//! - After a commit, a stolen object that is not resident leaves its page's copy unmapped (the
//!   copy predates the commit) and its next access fetches the committed version; one read
//!   back is kept like any object the transaction wrote.
//! - An abort discards every object stolen during the transaction, read back or not: its undo
//!   copy can no longer be restored (the steal released the references it names), so the next
//!   access fetches the committed version, as for an undo copy dropped under memory pressure.
//!
//! Either way the store is emptied at the end of the transaction.
//!
//! # The store and its records
//!
//! The store ([`SpillStore`]) is append-only within a transaction and bounded by a cap given
//! to [`ClientCache::set_spill`]; appending past it is [`CacheError::SpillFull`]. A record:
//!
//! ```text
//!   0   u32  the entry's oref word (an oref, or the created object's tagged serial)
//!   4   u32  object length in bytes
//!   8   u32  CRC-32C of bytes 0..8 and of the object bytes
//!   12  u32  zero
//!   16  object bytes (references unswizzled), zero-padded to a multiple of 8
//! ```
//!
//! An object stolen again after a read back gets a new record; the old one is dead space until
//! the transaction ends. The store is the caller's (thor-client writes a temporary file that is
//! unlinked as soon as it is created, so a crashed client leaves nothing behind, and only its
//! uncommitted transaction is lost); its bytes are not trusted when read back: a record whose
//! checksum, length, oref, class shape or reference words are wrong is
//! [`CacheError::SpillCorrupt`], never a panic.
//!
//! Spilling is off until [`ClientCache::set_spill`] gives the cache a store; without one a
//! cache full of modified objects is [`CacheError::Full`], as before.

use std::sync::Arc;

use thor_core::checksum::Crc32c;
use thor_core::le::{put_u32, u32_at};
use thor_core::limits::OBJECT_HEADER_BYTES;
use thor_core::{ClassDesc, RawRef};

use crate::core::{F_MODIFIED, F_NEW, F_SPILLED, FrameKind, NIL, NOT_RESIDENT};
use crate::error::CacheError;
use crate::manager::ClientCache;

/// Records start at multiples of this many bytes; a record's position is kept in these units
/// in a `u32`.
pub const RECORD_ALIGN: u64 = 8;

/// Bytes of a record's header.
pub const RECORD_HEADER_BYTES: usize = 16;

/// The largest cap a spill store may have: a record's position in [`RECORD_ALIGN`] units must
/// fit in a `u32`, below [`NIL`]. About 32 GiB.
pub const SPILL_BYTES_MAX: u64 = (NIL as u64) * RECORD_ALIGN;

/// Where stolen objects go: an append-only byte store, emptied at the end of each transaction.
/// Its bytes are checked when read back; the store only has to give back what it was given,
/// or an error.
pub trait SpillStore: std::fmt::Debug + Send {
    /// Appends `record` and returns the offset it starts at, a multiple of [`RECORD_ALIGN`]
    /// (records come padded to it, so appending back to back keeps the alignment).
    fn append(&mut self, record: &[u8]) -> Result<u64, String>;

    /// Reads `out.len()` bytes at `offset`, within what was appended since the last clear.
    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), String>;

    /// Forgets everything appended (the transaction ended). The next append starts at 0.
    fn clear(&mut self);

    /// Bytes of memory the store holds (a write buffer, say): outside the cache's budget, and
    /// reported in [`SpillStats::store_memory_bytes`].
    fn memory_bytes(&self) -> usize;
}

/// A spill store in memory: for tests, and for callers that want the mechanism without a
/// file. Its memory is outside the cache's budget.
#[derive(Debug, Default)]
pub struct MemSpill {
    /// Everything appended since the last clear.
    bytes: Vec<u8>,
}

impl MemSpill {
    /// An empty store.
    pub fn new() -> MemSpill {
        MemSpill::default()
    }

    /// Flips the bits of `mask` in the byte at `offset`, if it was appended: tests use it to
    /// show that a damaged record is refused.
    pub fn corrupt(&mut self, offset: u64, mask: u8) {
        if let Some(b) = usize::try_from(offset).ok().and_then(|o| self.bytes.get_mut(o)) {
            *b ^= mask;
        }
    }

    /// Bytes appended since the last clear.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was appended since the last clear.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl SpillStore for MemSpill {
    fn append(&mut self, record: &[u8]) -> Result<u64, String> {
        let at = self.bytes.len() as u64;
        self.bytes.extend_from_slice(record);
        Ok(at)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), String> {
        let start = usize::try_from(offset).map_err(|_| "offset out of range".to_string())?;
        let src = start
            .checked_add(out.len())
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| format!("read of {} bytes at {offset} past the end", out.len()))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn clear(&mut self) {
        self.bytes.clear();
    }

    fn memory_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

/// Counters of the spill.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Times replacement found nothing to free and stole objects.
    pub steals: u64,
    /// Objects written to the store (an object stolen, read back and stolen again counts twice).
    pub objects_spilled: u64,
    /// Bytes of records written.
    pub bytes_spilled: u64,
    /// Objects read back from the store.
    pub objects_read_back: u64,
    /// Bytes of records read back for accesses.
    pub bytes_read_back: u64,
    /// Bytes of records read to ship stolen objects at commit.
    pub bytes_exported: u64,
    /// The most bytes the store held in one transaction.
    pub store_bytes_peak: u64,
    /// Memory the store holds now, outside the cache's budget ([`SpillStore::memory_bytes`]).
    pub store_memory_bytes: usize,
}

/// The cache's side of the spill: the store, its cap and what this transaction put in it.
#[derive(Debug, Default)]
pub(crate) struct Spill {
    /// The store; `None` while spilling is off.
    store: Option<Box<dyn SpillStore>>,
    /// Most bytes appended in one transaction.
    bytes_max: u64,
    /// Bytes appended since the transaction began.
    used: u64,
    /// A record being built or read (one object and a header: at most a page and 16 bytes).
    record: Vec<u8>,
    /// Entries of one frame being stolen (at most the objects of a page).
    frame_entries: Vec<u32>,
    /// Counters.
    stats: SpillStats,
    /// Bytes of records read to build commits.
    exported_bytes: std::cell::Cell<u64>,
}

/// The padded length of the record of an object of `len` bytes.
fn record_bytes(len: usize) -> usize {
    (RECORD_HEADER_BYTES + len).next_multiple_of(RECORD_ALIGN as usize)
}

/// The checksum a record's header holds: over its oref and length words and the object.
fn record_crc(oref: u32, object: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(&oref.to_le_bytes());
    crc.update(&(object.len() as u32).to_le_bytes());
    crc.update(object);
    crc.finish()
}

impl ClientCache {
    /// Turns spilling on: from now on a transaction whose modified and created objects outgrow
    /// the cache steals them to `store`, at most `bytes_max` bytes of records per transaction
    /// (see the module documentation). Call between transactions.
    pub fn set_spill(
        &mut self,
        store: Box<dyn SpillStore>,
        bytes_max: u64,
    ) -> Result<(), CacheError> {
        if bytes_max > SPILL_BYTES_MAX {
            return Err(CacheError::BadConfig(format!(
                "a spill cap of {bytes_max} bytes is above the largest, {SPILL_BYTES_MAX}"
            )));
        }
        if self.spill.used > 0 {
            return Err(CacheError::Internal("spill store changed during a transaction"));
        }
        self.spill.store = Some(store);
        self.spill.bytes_max = bytes_max;
        self.core.spill_possible = true;
        Ok(())
    }

    /// The spill's counters.
    pub fn spill_stats(&self) -> SpillStats {
        let mut s = self.spill.stats;
        s.bytes_exported = self.spill.exported_bytes.get();
        s.store_memory_bytes = self.spill.store.as_ref().map_or(0, |st| st.memory_bytes());
        s
    }

    /// Bytes of records in the spill store for the current transaction.
    pub fn spill_bytes(&self) -> u64 {
        self.spill.used
    }

    /// Whether replacement may steal.
    pub(crate) fn spill_enabled(&self) -> bool {
        self.spill.store.is_some()
    }

    /// Replacement found nothing to free: steals every modified or created object outside
    /// pinned frames. Returns whether anything was stolen. An error (the cap, the store
    /// failing) is returned only if nothing could be stolen; objects whose record could not be
    /// written stay resident, so nothing is lost either way.
    pub(crate) fn steal_all(&mut self) -> Result<bool, CacheError> {
        let mut stolen = false;
        let mut first_err = None;
        for f in 0..self.core.frames.len() as u32 {
            let fm = self.core.frames[f as usize];
            if fm.pins > 0 {
                continue;
            }
            let r = match fm.kind {
                FrameKind::New => self.steal_new_frame(f),
                FrameKind::Intact | FrameKind::Compacted if fm.modified > 0 => {
                    self.steal_modified_in(f)
                }
                _ => Ok(false),
            };
            match r {
                Ok(s) => stolen |= s,
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        if stolen {
            self.spill.stats.steals += 1;
            return Ok(true);
        }
        first_err.map_or(Ok(false), Err)
    }

    /// Steals the modified objects of frame `f` (intact or compacted, not pinned).
    fn steal_modified_in(&mut self, f: u32) -> Result<bool, CacheError> {
        let mut list = std::mem::take(&mut self.spill.frame_entries);
        list.clear();
        list.extend(self.core.installed.iter(f));
        let mut result = Ok(());
        let mut stolen = 0u32;
        for &i in &list {
            let e = self.core.entries[i as usize];
            let steal = e.flags & F_MODIFIED != 0 && e.flags & F_NEW == 0 && result.is_ok();
            if steal {
                match self.write_record(i) {
                    Ok(pos) => {
                        self.core.steal(i, pos);
                        // A scan of the frame's list per stolen object: a rare path.
                        self.core.installed.remove(f, i);
                        stolen += 1;
                    }
                    Err(err) => result = Err(err),
                }
            }
        }
        self.spill.frame_entries = list;
        // The stolen objects were modified, so they were not in the counts by usage.
        let fm = &mut self.core.frames[f as usize];
        fm.installed -= stolen;
        fm.modified -= stolen;
        let page = fm.page;
        if stolen > 0 && fm.kind == FrameKind::Intact && self.core.page_frame_raw(page) == Some(f) {
            // The stolen objects' slots hold the transaction's bytes (and swizzled words whose
            // counts were just released): the copy must not install them again.
            self.core.unmap_page(f);
        }
        match result {
            Err(e) if stolen == 0 => Err(e),
            _ => Ok(stolen > 0),
        }
    }

    /// Steals every object of frame `f`, a frame of created objects (and of objects read back)
    /// that is not pinned, and frees it. All or nothing: a frame of created objects holds all
    /// the objects it ever had until the transaction ends (HAC keeps it whole at commit).
    fn steal_new_frame(&mut self, f: u32) -> Result<bool, CacheError> {
        let mut list = std::mem::take(&mut self.spill.frame_entries);
        list.clear();
        let mut need = 0u64;
        list.extend(self.core.installed.iter(f));
        for &i in &list {
            need += record_bytes(self.core.object_size(self.core.entries[i as usize].loc)) as u64;
        }
        let result = if self.spill.used + need > self.spill.bytes_max {
            Err(CacheError::SpillFull { bytes_max: self.spill.bytes_max })
        } else {
            let mut positions = Vec::with_capacity(list.len());
            let mut r = Ok(());
            for &i in &list {
                match self.write_record(i) {
                    Ok(pos) => positions.push(pos),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            r.map(|()| {
                for (&i, &pos) in list.iter().zip(&positions) {
                    self.core.steal(i, pos);
                }
            })
        };
        let stolen = !list.is_empty() && result.is_ok();
        self.spill.frame_entries = list;
        result?;
        if self.core.new_frame == f {
            self.core.new_frame = NIL;
        }
        self.tx.new_frames.retain(|&g| g != f);
        self.manager.frame_released(f);
        self.core.release_frame(f);
        Ok(stolen)
    }

    /// Writes the record of resident entry `i` to the store; returns its position in
    /// [`RECORD_ALIGN`] units.
    fn write_record(&mut self, i: u32) -> Result<u32, CacheError> {
        let e = self.core.entries[i as usize];
        let size = self.core.object_size(e.loc);
        let total = record_bytes(size);
        if self.spill.used + total as u64 > self.spill.bytes_max {
            return Err(CacheError::SpillFull { bytes_max: self.spill.bytes_max });
        }
        let mut rec = std::mem::take(&mut self.spill.record);
        let mut object = Vec::new();
        self.core.copy_unswizzled(e.loc, &mut object);
        rec.clear();
        rec.resize(total, 0);
        put_u32(&mut rec, 0, e.oref);
        put_u32(&mut rec, 4, size as u32);
        put_u32(&mut rec, 8, record_crc(e.oref, &object));
        rec[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + size].copy_from_slice(&object);
        let store = self.spill.store.as_mut().ok_or(CacheError::Internal("no spill store"))?;
        let appended = store.append(&rec);
        self.spill.record = rec;
        let at = appended.map_err(CacheError::SpillFailed)?;
        if !at.is_multiple_of(RECORD_ALIGN) || at / RECORD_ALIGN >= u64::from(NIL) {
            return Err(CacheError::SpillFailed(format!("the store put a record at {at}")));
        }
        self.spill.used += total as u64;
        let s = &mut self.spill.stats;
        s.objects_spilled += 1;
        s.bytes_spilled += total as u64;
        s.store_bytes_peak = s.store_bytes_peak.max(self.spill.used);
        Ok((at / RECORD_ALIGN) as u32)
    }

    /// Reads the record of stolen entry `i` into `out` (the object, references unswizzled)
    /// and checks it: the store is outside the process's memory, so its bytes are checked as
    /// a fetched page's are before anything reads them as an object. Returns the class.
    pub(crate) fn read_record(
        &self,
        i: u32,
        out: &mut Vec<u8>,
    ) -> Result<Arc<ClassDesc>, CacheError> {
        let core = &self.core;
        let e = core.entries[i as usize];
        let pos = core.spill_position(i).filter(|_| e.flags & F_SPILLED != 0);
        let Some(pos) = pos.filter(|_| e.loc == NOT_RESIDENT) else {
            return Err(CacheError::Internal("read back of an object not in the spill store"));
        };
        let store = self.spill.store.as_ref().ok_or(CacheError::Internal("no spill store"))?;
        let at = u64::from(pos) * RECORD_ALIGN;
        let corrupt = |why: &'static str| CacheError::SpillCorrupt { offset: at, why };
        let mut head = [0u8; RECORD_HEADER_BYTES];
        store.read_at(at, &mut head).map_err(CacheError::SpillFailed)?;
        let len = u32_at(&head, 4) as usize;
        if u32_at(&head, 0) != e.oref {
            return Err(corrupt("the record is another object's"));
        }
        if len < OBJECT_HEADER_BYTES || len > core.page_size || u32_at(&head, 12) != 0 {
            return Err(corrupt("the record's length or header is impossible"));
        }
        out.clear();
        out.resize(len, 0);
        store.read_at(at + RECORD_HEADER_BYTES as u64, out).map_err(CacheError::SpillFailed)?;
        if record_crc(e.oref, out) != u32_at(&head, 8) {
            return Err(corrupt("the record's checksum does not match"));
        }
        let desc = core.class(u32_at(out, 0)).cloned().ok_or(corrupt("unknown class"))?;
        desc.check_shape(out).map_err(corrupt)?;
        let mut bad = None;
        desc.for_each_ref_offset(out, |off| {
            let w = u32_at(out, off);
            let ok = match RawRef::decode(w) {
                _ if w == 0 => true,
                RawRef::Oref(o) => o.page().is_some(),
                // A reference to an object this transaction created: its entry is live (never
                // freed before the transaction ends).
                RawRef::Tagged(_) => {
                    core.lookup(w).is_some_and(|j| core.entries[j as usize].flags & F_NEW != 0)
                }
            };
            if !ok && bad.is_none() {
                bad = Some("a reference word names no object");
            }
        });
        if let Some(why) = bad {
            return Err(corrupt(why));
        }
        Ok(desc)
    }

    /// The slow path met stolen entry `i`: reads it back into a frame of the transaction's
    /// created objects and returns its location.
    pub(crate) fn read_back(&mut self, i: u32) -> Result<u32, CacheError> {
        let mut object = std::mem::take(&mut self.spill.record);
        let desc = match self.read_record(i, &mut object) {
            Ok(d) => d,
            Err(e) => {
                self.spill.record = object;
                return Err(e);
            }
        };
        let size = object.len();
        let loc = match self.new_room(size) {
            Ok(loc) => loc,
            Err(e) => {
                self.spill.record = object;
                return Err(e);
            }
        };
        // References to created objects go back to being swizzled: a tagged word in a
        // resident object is an entry index. Their entries are live (created objects stay
        // until the transaction ends; making room above never frees them).
        let mut offs = Vec::new();
        desc.for_each_ref_offset(&object, |off| offs.push(off));
        for off in offs {
            let w = u32_at(&object, off);
            if w & 1 == 1 {
                let j = self
                    .core
                    .lookup(w)
                    .ok_or(CacheError::Internal("a created object's entry left"))?;
                put_u32(&mut object, off, RawRef::tagged_word(j));
                let t = &mut self.core.entries[j as usize];
                t.refs = t.refs.saturating_add(1);
            }
        }
        self.core.arena.copy_in(loc as usize, &object);
        self.core.place_read_back(i, loc, size);
        let s = &mut self.spill.stats;
        s.objects_read_back += 1;
        s.bytes_read_back += record_bytes(size) as u64;
        self.spill.record = object;
        Ok(loc)
    }

    /// Counts a record read for a commit ([`ClientCache::export`] takes `&self`).
    pub(crate) fn count_export_read(&self, len: usize) {
        let c = &self.spill.exported_bytes;
        c.set(c.get() + record_bytes(len) as u64);
    }

    /// The transaction ended: the store is emptied.
    pub(crate) fn spill_end(&mut self) {
        if self.spill.used > 0
            && let Some(store) = self.spill.store.as_mut()
        {
            store.clear();
        }
        self.spill.used = 0;
        self.core.clear_spill_positions();
    }

    /// Checks that a stolen entry names a record (for `check_invariants`).
    pub(crate) fn check_spilled(&self, i: u32) -> Result<(), String> {
        let e = self.core.entries[i as usize];
        if e.loc != NOT_RESIDENT {
            return Ok(());
        }
        if e.flags & F_SPILLED == 0 {
            return Err(format!("entry {i} of the transaction left the cache without a steal"));
        }
        let pos = self.core.spill_position(i);
        if self.spill.store.is_none()
            || pos.is_none_or(|p| u64::from(p) * RECORD_ALIGN >= self.spill.used)
        {
            return Err(format!("stolen entry {i} names no record"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::core::Need;
    use crate::hac::tests::{TAG_AT, cache, fetch, get, obj, oref};
    use crate::manager::PolicyConfig;

    /// A [`MemSpill`] the test keeps a handle on, to look at and damage what the cache wrote.
    #[derive(Debug, Clone, Default)]
    struct Shared(Arc<Mutex<MemSpill>>);

    impl SpillStore for Shared {
        fn append(&mut self, record: &[u8]) -> Result<u64, String> {
            self.0.lock().unwrap().append(record)
        }
        fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), String> {
            self.0.lock().unwrap().read_at(offset, out)
        }
        fn clear(&mut self) {
            self.0.lock().unwrap().clear();
        }
        fn memory_bytes(&self) -> usize {
            self.0.lock().unwrap().memory_bytes()
        }
    }

    /// An 8-frame HAC cache with a spill store, in which objects of pages 2.. are written one
    /// after another (tag = 1000 + page) until `pages` pages' objects are modified: far more
    /// than the cache holds. (With 6 frames the tables, with the spill positions made at the
    /// first steal, took the cache to its minimum frames and past its budget: the limitation
    /// docs/oo7.md states.)
    fn written(pages: u32) -> (ClientCache, Shared) {
        let mut c = cache(8, PolicyConfig::HAC, true);
        let store = Shared::default();
        c.set_spill(Box::new(store.clone()), 1 << 20).unwrap();
        for p in 2..2 + pages {
            fetch(&mut c, p, &[obj(p, 1500, None), obj(p, 1500, None)]);
            for o in 0..2 {
                let loc = get(&mut c, oref(p, o));
                let i = c.lookup(oref(p, o).raw()).unwrap();
                c.before_write(i).unwrap();
                c.core.arena.write_u32(loc as usize + TAG_AT, 1000 + p);
                c.check_invariants().unwrap();
            }
        }
        (c, store)
    }

    #[test]
    fn stolen_objects_read_back_with_the_transactions_writes() {
        let (mut c, _store) = written(20);
        assert!(c.spill_stats().objects_spilled > 0);
        for p in 2..22 {
            for o in 0..2 {
                let i = c.lookup(oref(p, o).raw()).unwrap();
                let Need::Resident(loc) = c.resolve(i).unwrap() else { panic!("not resident") };
                assert_eq!(c.core.arena.read_u32(loc as usize + TAG_AT), 1000 + p);
                let mut out = Vec::new();
                c.export(i, &mut out).unwrap();
                assert_eq!(thor_core::le::u32_at(&out, TAG_AT), 1000 + p, "shipped");
                c.check_invariants().unwrap();
            }
        }
        c.commit_done(&[]).unwrap();
        c.check_invariants().unwrap();
        assert_eq!(c.spill_bytes(), 0, "the store is emptied at the end");
    }

    #[test]
    fn a_damaged_spill_record_is_refused_not_trusted() {
        let (mut c, store) = written(20);
        let i = c.lookup(oref(2, 0).raw()).unwrap();
        let e = c.core.entries[i as usize];
        assert_eq!(e.loc, NOT_RESIDENT, "stolen");
        let at = u64::from(c.core.spill_position(i).unwrap()) * RECORD_ALIGN;
        // One object byte flipped: the checksum says so.
        store.0.lock().unwrap().corrupt(at + RECORD_HEADER_BYTES as u64 + 9, 0x40);
        let mut out = Vec::new();
        let damaged = |r| matches!(r, Err(CacheError::SpillCorrupt { offset, .. }) if offset == at);
        assert!(damaged(c.export(i, &mut out).map(|_| ())));
        assert!(damaged(c.resolve(i).map(|_| ())));
        // A record that names another object is refused too.
        store.0.lock().unwrap().corrupt(at + RECORD_HEADER_BYTES as u64 + 9, 0x40);
        store.0.lock().unwrap().corrupt(at, 0x02);
        assert!(damaged(c.resolve(i).map(|_| ())));
        c.abort_done();
        c.check_invariants().unwrap();
        assert_eq!(c.lookup(oref(2, 0).raw()).map(|i| c.core.entries[i as usize].loc), None);
    }

    #[test]
    fn the_cap_is_spill_full_and_nothing_is_lost() {
        let mut c = cache(6, PolicyConfig::HAC, true);
        c.set_spill(Box::new(MemSpill::new()), 4096).unwrap();
        let mut err = None;
        'pages: for p in 2..40 {
            let page = crate::hac::tests::page_of(p, &[obj(p, 1500, None), obj(p, 1500, None)]);
            let fetched = c
                .while_fetching()
                .and_then(|()| c.install_page(thor_core::PageId::new(p).unwrap(), &page));
            if let Err(e) = fetched {
                err = Some(e);
                break;
            }
            for o in 0..2 {
                let r = c.core.entry_for(oref(p, o)).and_then(|i| c.resolve(i).map(|n| (i, n)));
                match r {
                    Ok((i, Need::Resident(_))) => c.before_write(i).unwrap(),
                    Ok((_, other)) => panic!("{other:?}"),
                    Err(e) => {
                        err = Some(e);
                        break 'pages;
                    }
                }
                c.check_invariants().unwrap();
            }
        }
        assert_eq!(err, Some(CacheError::SpillFull { bytes_max: 4096 }));
        assert!(c.spill_bytes() <= 4096);
        c.check_invariants().unwrap();
        c.abort_done();
        c.check_invariants().unwrap();
    }
}
