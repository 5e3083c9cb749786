//! The current transaction as the cache holds it: what it read, wrote and created, how it is
//! shipped, and how it ends.
//!
//! # Why the cache owns it
//!
//! A transaction's state is made of the cache's own things. Its read set is kept beside the
//! indirection table (an entry flag and per-page bitmaps, [`crate::readset`]); a modified object
//! must not leave the cache before the transaction ends (no-steal) and its undo copy names
//! other entries by index, so the decrements of their reference counts wait for the end of the
//! transaction; created objects live in frames of their own and are named by serial numbers
//! until the commit gives them orefs. If the client library kept the list of modified objects
//! and their undo copies, every one of those invariants would rest on it calling the right core
//! functions in the right order. Here the library calls a handful of methods on
//! [`ClientCache`], and the cache keeps the invariants; `ClientCache::check_invariants` checks
//! them (tests run it after every step).
//!
//! # The state
//!
//! ```text
//!   read set    ReadSet (orefs, bitmaps per page) + F_READ on the entry     set on access
//!   modified    F_MODIFIED on the entry + an undo record, in first-write order
//!   created     F_NEW on the entry, in creation order = their order in the commit
//!   new frames  the frames the created objects are in
//!
//!   undo log    records [ (entry 17, bytes 0..40) (entry 3, bytes 40..88) ... ]
//!               bytes   [ 17 before the transaction | 3 before the transaction | ... ]
//! ```
//!
//! Undo copies are kept in one buffer rather than one allocation per object (a transaction of
//! OO7's T2b writes 100,000 objects). They are the objects' bytes as cached, swizzled words
//! included, so restoring one restores its reference counts exactly (`CacheCore::restore_object`).
//! They are outside the cache's memory budget; modified objects themselves are inside it.
//!
//! # The life of a transaction
//!
//! - An access ([`ClientCache::access`], [`ClientCache::resolve`]) adds the object to the read
//!   set.
//! - [`ClientCache::before_write`] comes before any write of an object: the first one in the
//!   transaction takes the undo copy, marks the object modified (so it stays) and sets its
//!   usage as an access does. Scalar fields are then written through
//!   [`ClientCache::object_ptr`]; references through [`ClientCache::store_ref`], which counts
//!   the new target now and defers the old one's decrement to the end of the transaction.
//! - [`ClientCache::create`] makes an object in a frame of created objects.
//! - The commit request is built from [`ClientCache::for_each_read`],
//!   [`ClientCache::modified`], [`ClientCache::created`] and [`ClientCache::export`]; when the
//!   server answers, [`ClientCache::commit_done`] gives the created objects their orefs, or
//!   [`ClientCache::abort_done`] puts the undo copies back and drops the created objects.
//!
//! # Exported objects
//!
//! [`ClientCache::export`] writes an object as a commit carries it: its references unswizzled
//! to orefs, and a reference to an object created by the same transaction (or the class word of
//! an object whose class it created) *tagged* with that object's index among the commit's
//! created objects, which the server replaces by the oref it allocates. A transaction's serial
//! numbers are consecutive (only a created object takes one), so the index is the serial's
//! distance from the transaction's first: no map is built per commit.
//!
//! # Concurrency control (CLOCC)
//!
//! CLOCC (`papers/thor-ecoop99.txt` section 4.1) adds three things here:
//!
//! - *Invalidations* arrive piggybacked on replies. [`ClientCache::invalidate`] discards the
//!   object (or, if the transaction holds it in place, discards it when the transaction ends),
//!   sets its usage to 0, stops using its page's cached copy for installation, and answers
//!   whether the current transaction read or wrote it: if so, the transaction cannot commit and
//!   the library aborts it. An invalidated object the transaction modified is not restored at
//!   abort: its undo copy is the stale version, so the object is discarded instead. An
//!   invalidation is queued for acknowledgement ([`ClientCache::take_acks`]) only once applied:
//!   until the object has left, the server must keep refusing commits that read it.
//! - *Discarded pages.* The server sends invalidations only for pages in the client's
//!   directory, and drops a page from it when the client reports the page discarded. The cache
//!   counts resident objects per page, queues a page when neither its copy nor any object of it
//!   is cached any more, and [`ClientCache::take_discarded`] reports it, but never while the
//!   current transaction has read an object of it: the server would not tell the client that
//!   another transaction changed that object, and the stale read would commit.
//! - *Undo copies under memory pressure.* The undo log is an optimization: when replacement
//!   needs room and the undo copies hold more than [`UNDO_BUDGET_DIVISOR`]'s share of the
//!   budget, the cache drops them ([`ClientCache::drop_undo_copies`]). A record then stays
//!   without bytes (the object is still modified and still shipped at commit), and an abort
//!   discards such an object instead of restoring it: its entry stops pointing at the aborted
//!   bytes, its page's cached copy stops being a source of installation, and the next access
//!   fetches the committed version.
//!
//! [`UNDO_BUDGET_DIVISOR`]: crate::limits::UNDO_BUDGET_DIVISOR

use rustc_hash::FxHashSet;
use thor_core::le::{put_u32, u32_at};
use thor_core::limits::OBJECT_HEADER_BYTES;
use thor_core::{ClassDesc, FormatError, Oref, PageId, RawRef, VarKind};

use crate::core::{F_LIVE, F_MODIFIED, F_NEW, F_SPILLED, NOT_RESIDENT};
use crate::error::CacheError;
use crate::limits::UNDO_RETAINED_BYTES;
use crate::manager::ClientCache;

/// The current transaction's part of a [`ClientCache`] (the read set is in the core). See the
/// module documentation.
#[derive(Debug, Default)]
pub(crate) struct Transaction {
    /// Undo copies of the modified objects, in first-write order.
    undo: UndoLog,
    /// Entries of created objects, in creation order: their order in the commit.
    created: Vec<u32>,
    /// The serial number of the first object created (meaningful when `created` is not empty).
    first_serial: u32,
    /// Frames of created objects (and of objects read back from the spill store).
    pub(crate) new_frames: Vec<u32>,
    /// Modified objects that were invalidated: an abort discards them rather than putting
    /// their (stale) undo copies back.
    invalid_modified: FxHashSet<u32>,
}

impl Transaction {
    /// Whether the undo copies hold more than `bytes`.
    pub(crate) fn undo_bytes_over(&self, bytes: usize) -> bool {
        self.undo.bytes.len() > bytes
    }
}

/// The undo copies of one transaction: one record per modified object, the bytes in one buffer.
#[derive(Debug, Default)]
struct UndoLog {
    /// One per modified object, in first-write order.
    records: Vec<UndoRecord>,
    /// The copies, back to back.
    bytes: Vec<u8>,
}

/// The undo copy of one modified object.
#[derive(Debug, Clone, Copy)]
struct UndoRecord {
    /// The object's entry.
    entry: u32,
    /// Its size (objects keep their size, so the copy has the current object's).
    len: u32,
    /// Where the copy starts in [`UndoLog::bytes`], or [`NO_COPY`] once the copy was dropped
    /// ([`ClientCache::drop_undo_copies`]).
    start: usize,
}

/// [`UndoRecord::start`] of a record whose copy was dropped.
const NO_COPY: usize = usize::MAX;

impl UndoLog {
    fn push(&mut self, entry: u32, old: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(old);
        self.records.push(UndoRecord { entry, len: old.len() as u32, start });
    }

    /// The record's copy, unless it was dropped.
    fn copy(&self, r: &UndoRecord) -> Option<&[u8]> {
        (r.start != NO_COPY).then(|| &self.bytes[r.start..r.start + r.len as usize])
    }

    /// Drops every copy (the records stay). Returns the bytes freed.
    fn drop_copies(&mut self) -> usize {
        let freed = self.bytes.len();
        for r in &mut self.records {
            r.start = NO_COPY;
        }
        self.bytes = Vec::new();
        freed
    }

    /// Empties the log for the next transaction, keeping a bounded allocation.
    fn clear(&mut self) {
        self.records.clear();
        self.bytes.clear();
        let records_kept = UNDO_RETAINED_BYTES / std::mem::size_of::<UndoRecord>();
        self.records.shrink_to(records_kept);
        self.bytes.shrink_to(UNDO_RETAINED_BYTES);
    }
}

/// What an invalidation did ([`ClientCache::invalidate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalidation {
    /// The object left the cache now. Otherwise it was not cached, or it leaves when the
    /// current transaction ends (the transaction modified it, or a view pins its frame).
    pub evicted: bool,
    /// The current transaction read or modified the object: it saw a version that is no longer
    /// the latest, so it cannot commit. Abort it.
    pub conflict: bool,
}

/// An object made by [`ClientCache::create`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewObject {
    /// Its entry.
    pub entry: u32,
    /// The tagged serial that names it until the commit gives it an oref.
    pub serial: u32,
    /// Where it is in the arena (it does not move before the transaction ends).
    pub loc: u32,
}

/// Whether `off` is the offset of a reference word in `obj`, an object of class `desc`: one of
/// its fixed reference slots or an element of a variable part of references.
fn is_ref_offset(desc: &ClassDesc, obj: &[u8], off: usize) -> bool {
    if !off.is_multiple_of(4) || off < OBJECT_HEADER_BYTES {
        return false;
    }
    if off < desc.count_offset() {
        let slot = (off - OBJECT_HEADER_BYTES) / 4;
        return u16::try_from(slot).is_ok_and(|s| desc.ref_slots().binary_search(&s).is_ok());
    }
    desc.var() == VarKind::Refs
        && off >= desc.var_offset()
        && (off - desc.var_offset()) / 4 < u32_at(obj, desc.count_offset()) as usize
}

impl ClientCache {
    /// Creates an object from `bytes`, a fresh instance of a registered class whose references
    /// are all null (store them afterwards with [`ClientCache::store_ref`]). It belongs to the
    /// current transaction: it is shipped at commit and dropped at abort.
    pub fn create(&mut self, bytes: &[u8]) -> Result<NewObject, CacheError> {
        thor_core::page::check_object_bytes(bytes, self.core.page_size).map_err(|e| match e {
            FormatError::ObjectTooLarge { size, .. } => CacheError::TooLarge { size },
            _ => CacheError::BadCreate("shorter than an object header or misaligned"),
        })?;
        let desc = self
            .core
            .class(u32_at(bytes, 0))
            .ok_or(CacheError::BadCreate("its class is not registered"))?;
        desc.check_shape(bytes).map_err(CacheError::BadCreate)?;
        let mut refs_null = true;
        desc.for_each_ref_offset(bytes, |off| refs_null &= u32_at(bytes, off) == 0);
        if !refs_null {
            return Err(CacheError::BadCreate("a reference is not null"));
        }
        if self.core.rebalance() > 0 {
            // Each creation allocates an entry: a transaction that creates more objects than
            // the cache holds (their frames stolen, `crate::spill`) must pay for its entries
            // with frames here, as the slow path does for the entries swizzling allocates.
            self.free_frames_until(0)?;
        }
        let loc = self.new_room(bytes.len())?;
        let (entry, serial) = self.core.create_at(loc, bytes)?;
        if self.tx.created.is_empty() {
            self.tx.first_serial = serial >> 1;
        }
        self.tx.created.push(entry);
        Ok(NewObject { entry, serial, loc })
    }

    /// Room for an object of `size` bytes in the transaction's frame of created objects,
    /// starting a fresh frame when it is full (which may make replacement steal, see
    /// [`crate::spill`]).
    pub(crate) fn new_room(&mut self, size: usize) -> Result<u32, CacheError> {
        if let Some(loc) = self.core.new_object_room(size) {
            return Ok(loc);
        }
        self.free_frames_until(2)?;
        let f = self.core.take_free_frame().ok_or(CacheError::Internal("no free frame"))?;
        self.core.start_new_frame(f);
        self.tx.new_frames.push(f);
        self.core.new_object_room(size).ok_or(CacheError::Internal("new frame full"))
    }

    /// Call before writing the resident object of entry `i` (a field, a reference, its byte
    /// part). The first write in a transaction takes the object's undo copy and marks it
    /// modified, which keeps it in the cache until the transaction ends; later writes, and
    /// writes to objects the transaction created, cost one flag test.
    #[inline]
    pub fn before_write(&mut self, i: u32) -> Result<(), CacheError> {
        match self.core.entries.get(i as usize) {
            Some(e) if e.flags & (F_NEW | F_MODIFIED) != 0 => Ok(()),
            _ => self.first_write(i),
        }
    }

    #[cold]
    #[inline(never)]
    fn first_write(&mut self, i: u32) -> Result<(), CacheError> {
        let e = *self
            .core
            .entries
            .get(i as usize)
            .ok_or(CacheError::Internal("write through an unknown entry"))?;
        if e.flags & F_LIVE == 0 || e.loc == NOT_RESIDENT {
            return Err(CacheError::Internal("write to an object that is not resident"));
        }
        let size = self.core.object_size(e.loc);
        self.tx.undo.push(i, self.core.arena.bytes(e.loc as usize, size));
        self.core.mark_modified(i);
        // Writing an object uses it.
        self.core.mark_used(i);
        Ok(())
    }

    /// Stores a reference to entry `target` (or null) in the reference word at byte `off` of
    /// the object of entry `i`, which the transaction wrote ([`ClientCache::before_write`]) or
    /// created. Reference counts stay exact: the target's goes up now, the old target's when
    /// the transaction ends (the undo copy may still name it).
    pub fn store_ref(&mut self, i: u32, off: usize, target: Option<u32>) -> Result<(), CacheError> {
        let e = *self
            .core
            .entries
            .get(i as usize)
            .ok_or(CacheError::Internal("store through an unknown entry"))?;
        if e.flags & (F_NEW | F_MODIFIED) == 0 || e.loc == NOT_RESIDENT {
            return Err(CacheError::Internal("reference stored into an object not written"));
        }
        if let Some(t) = target
            && self.core.entries.get(t as usize).is_none_or(|t| t.flags & F_LIVE == 0)
        {
            return Err(CacheError::Internal("reference to a free entry"));
        }
        let desc = self
            .core
            .class(self.core.class_word(e.loc))
            .ok_or(CacheError::Internal("resident object of an unknown class"))?;
        if !is_ref_offset(desc, self.object(e.loc), off) {
            return Err(CacheError::Internal("store_ref at an offset that is not a reference"));
        }
        self.core.store_ref(e.loc, off, target);
        Ok(())
    }

    /// The entries of the objects the current transaction modified (not those it created), in
    /// first-write order.
    pub fn modified(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        self.tx.undo.records.iter().map(|r| r.entry)
    }

    /// Makes `serial` the serial of the next object created (later ones count up from it,
    /// wrapping at [`RawRef::TAG_MAX`]). Serials only need to be unique in one cache; a process
    /// that runs several caches gives each a block of its own so that a tagged serial names
    /// one object process-wide (`thor_client::Ref`'s equality relies on it). Between
    /// transactions only: a transaction's serials are consecutive.
    pub fn set_next_serial(&mut self, serial: u32) {
        assert!(self.tx.created.is_empty(), "set_next_serial inside a transaction that created");
        self.core.set_next_serial(serial);
    }

    /// The entries of the objects the current transaction created, in creation order: the
    /// order the commit ships them in.
    pub fn created(&self) -> &[u32] {
        &self.tx.created
    }

    /// Objects in the current transaction's read set.
    pub fn read_count(&self) -> usize {
        self.core.reads.len()
    }

    /// Calls `f` with every object the current transaction read (page by page, oids ascending
    /// within a page). Created objects are not in the read set.
    pub fn for_each_read(&self, f: impl FnMut(Oref)) {
        self.core.reads.for_each(f);
    }

    /// The index among the commit's created objects of the object named by `word`, if it is
    /// the tagged serial of an object the current transaction created.
    pub fn created_index(&self, word: u32) -> Option<u32> {
        let RawRef::Tagged(serial) = RawRef::decode(word) else { return None };
        let k = serial.wrapping_sub(self.tx.first_serial) & RawRef::TAG_MAX;
        let &i = self.tx.created.get(k as usize)?;
        (self.core.entries[i as usize].oref == word).then_some(k)
    }

    /// An unswizzled reference (or class) word as the commit ships it: an oref as it is, the
    /// tagged serial of an object this transaction created as its index among the commit's
    /// created objects.
    fn export_word(&self, w: u32) -> Result<u32, CacheError> {
        match RawRef::decode(w) {
            RawRef::Oref(_) => Ok(w),
            RawRef::Tagged(_) => self.created_index(w).map(RawRef::tagged_word).ok_or(
                CacheError::Internal("reference to an object created by another transaction"),
            ),
        }
    }

    /// Writes the object of entry `i`, which the current transaction modified or created, into
    /// `out` (replacing its contents) as the commit ships it: references unswizzled, references
    /// to objects the transaction created (and a class word naming a class it created) tagged
    /// with their index among the commit's created objects.
    pub fn export(&self, i: u32, out: &mut Vec<u8>) -> Result<(), CacheError> {
        out.clear();
        self.export_append(i, out)
    }

    /// [`ClientCache::export`], appending the object to `out` instead of replacing its
    /// contents: a commit exports every object into one buffer, without a copy through a
    /// buffer of its own each (99,000 objects for OO7's T2b). On an error `out` holds what it
    /// held before.
    pub fn export_append(&self, i: u32, out: &mut Vec<u8>) -> Result<(), CacheError> {
        let base = out.len();
        let result = self.export_at(i, out, base);
        if result.is_err() {
            out.truncate(base);
        }
        result
    }

    /// The object of entry `i` as the commit ships it, appended to `out` at `base` (its
    /// length).
    fn export_at(&self, i: u32, out: &mut Vec<u8>, base: usize) -> Result<(), CacheError> {
        let core = &self.core;
        let e = *core.entries.get(i as usize).ok_or(CacheError::Internal("export of no entry"))?;
        if e.flags & (F_NEW | F_MODIFIED) == 0 {
            return Err(CacheError::Internal("export of an object the transaction did not write"));
        }
        if e.loc == NOT_RESIDENT {
            // A spilled object is read into a buffer of its own (rare: the spill store holds
            // what did not fit in memory).
            let mut one = Vec::new();
            self.export_spilled(i, &mut one)?;
            out.extend_from_slice(&one);
            return Ok(());
        }
        let loc = e.loc;
        // One class lookup for the size and the references (a commit exports every object).
        let desc = core
            .class(core.class_word(loc))
            .ok_or(CacheError::Internal("resident object of an unknown class"))?;
        let size = core.object_size_of(loc, desc);
        core.arena.append_to(loc as usize, size, out);
        let header = self.export_word(u32_at(out, base))?;
        put_u32(out, base, header);
        let mut result = Ok(());
        desc.for_each_ref_offset(core.arena.bytes(loc as usize, size), |off| {
            if result.is_ok() {
                result =
                    self.export_word(core.ref_word(loc, off)).map(|w| put_u32(out, base + off, w));
            }
        });
        result
    }

    /// [`ClientCache::export`] of an object in the spill store: its record, checked, with
    /// references to created objects (and a created class word) tagged as from the cache.
    fn export_spilled(&self, i: u32, out: &mut Vec<u8>) -> Result<(), CacheError> {
        let desc = self.read_record(i, out)?;
        self.count_export_read(out.len());
        let header = self.export_word(u32_at(out, 0))?;
        put_u32(out, 0, header);
        let mut offs = Vec::new();
        desc.for_each_ref_offset(out, |off| offs.push(off));
        for off in offs {
            let w = self.export_word(u32_at(out, off))?;
            put_u32(out, off, w);
        }
        Ok(())
    }

    /// The server committed the transaction and gave its created objects `orefs`, in creation
    /// order. Created objects take their orefs (handles made before keep working: the cache
    /// remembers the renames), modified marks and the read set are cleared, deferred
    /// reference-count decrements apply, and the manager decides what becomes of the created
    /// objects' frames (HAC keeps them; FPC drops them).
    ///
    /// `orefs` are the server's, untrusted: if they cannot be the created objects' (not one per
    /// object, null, repeated, or naming an object the cache already has), nothing changes and
    /// the error says so; abort the transaction locally.
    pub fn commit_done(&mut self, orefs: &[Oref]) -> Result<(), CacheError> {
        self.check_commit_orefs(orefs)?;
        // Class words are never swizzled: a created object whose class was created by the same
        // transaction names it by its serial, which must become the class's oref now (while
        // the serials still name the created objects).
        for k in 0..self.tx.created.len() {
            let loc = self.core.entries[self.tx.created[k] as usize].loc;
            if loc == NOT_RESIDENT {
                // Stolen: it is fetched in its page, as the server stored it, when next used.
                continue;
            }
            if let Some(c) = self.created_index(self.core.class_word(loc)) {
                self.core.arena.write_u32(loc as usize, orefs[c as usize].raw());
            }
        }
        let created = std::mem::take(&mut self.tx.created);
        for (&i, &oref) in created.iter().zip(orefs) {
            let serial = self.core.entries[i as usize].oref;
            if let Some(desc) = self.core.class(serial).cloned() {
                let registered = self.core.register_class(oref.raw(), desc);
                debug_assert!(registered.is_ok(), "checked: no class is registered at a new oref");
            }
        }
        for (&i, &oref) in created.iter().zip(orefs) {
            self.core.rename(i, oref);
            self.core.entries[i as usize].flags &= !F_SPILLED;
            self.core.maybe_free_entry(i);
        }
        let mut undo = std::mem::take(&mut self.tx.undo);
        for r in &undo.records {
            let i = r.entry;
            let e = self.core.entries[i as usize];
            if e.loc == NOT_RESIDENT {
                // Stolen and not read back: any copy of its page the cache holds predates the
                // commit, so it stops being a source of installation; the next access fetches
                // the committed version.
                if let Some(oref) = Oref::from_raw(e.oref) {
                    self.core.unmap_page_of(oref);
                }
            } else {
                self.core.refresh_page_copy(i);
            }
            self.core.clear_modified(i);
            self.core.entries[i as usize].flags &= !F_SPILLED;
            self.core.maybe_free_entry(i);
        }
        undo.clear();
        self.tx.undo = undo;
        self.spill_end();
        self.end(created, true);
        // The renames and the created objects' index keys may have outgrown the headroom (a
        // transaction may create more objects than the cache holds): frames pay for them now,
        // which nothing pins or holds modified any more. If every frame is pinned the next
        // slow path tries again; the commit itself is done either way.
        if self.core.rebalance() > 0 {
            let _ = self.free_frames_until(0);
        }
        Ok(())
    }

    /// Checks the orefs a commit reply gave the created objects (see
    /// [`ClientCache::commit_done`]).
    fn check_commit_orefs(&self, orefs: &[Oref]) -> Result<(), CacheError> {
        if orefs.len() != self.tx.created.len() {
            return Err(CacheError::BadCommitReply("not one oref per created object"));
        }
        let mut seen = FxHashSet::with_capacity_and_hasher(orefs.len(), Default::default());
        for &o in orefs {
            if o.page().is_none() {
                return Err(CacheError::BadCommitReply("an oref names no page"));
            }
            if !seen.insert(o.raw()) {
                return Err(CacheError::BadCommitReply("an oref is given twice"));
            }
            // An entry for it would be a reference to the object from before it existed.
            if self.core.lookup(o.raw()).is_some() || self.core.class(o.raw()).is_some() {
                return Err(CacheError::BadCommitReply("an oref names an object already cached"));
            }
        }
        Ok(())
    }

    /// The transaction aborted (by the application, or refused by the server): modified
    /// objects get their undo copies back, created objects are dropped (their frames freed, or
    /// kept dead while a view still points into them), and the read set is cleared.
    ///
    /// A modified object whose undo copy was dropped, or that was invalidated (its undo copy
    /// is a stale version), is discarded instead (`papers/thor-ecoop99.txt` section 4.1): the
    /// next access fetches the committed version.
    pub fn abort_done(&mut self) {
        self.abort_with(false);
    }

    /// Aborts the current transaction when its outcome is *unknown*: it may have committed at
    /// the server (a two-phase part whose decision was not learned, a commit whose answer was
    /// lost). Like [`ClientCache::abort_done`], except that every object it modified is
    /// discarded instead of getting its undo copy back: if the transaction committed, that
    /// copy is stale, and the server, which takes this client to hold what it wrote, would
    /// never invalidate it. The next access fetches the committed version.
    pub fn abort_unknown(&mut self) {
        self.abort_with(true);
    }

    fn abort_with(&mut self, discard_modified: bool) {
        let mut undo = std::mem::take(&mut self.tx.undo);
        let mut discard = Vec::new();
        for r in &undo.records {
            let stolen = self.core.entries[r.entry as usize].flags & F_SPILLED != 0;
            match undo.copy(r) {
                Some(copy)
                    if !stolen
                        && !discard_modified
                        && !self.tx.invalid_modified.contains(&r.entry) =>
                {
                    self.core.restore_object(r.entry, copy);
                    self.core.clear_modified(r.entry);
                }
                _ => {
                    self.core.clear_modified(r.entry);
                    discard.push(r.entry);
                }
            }
        }
        undo.clear();
        self.tx.undo = undo;
        for i in discard {
            // The aborted bytes must never be served: the object leaves (past a view's pin,
            // which keeps reading the bytes it read), and so does its page's copy as a source
            // of installation, since the object may sit in that very copy.
            if let Some(oref) = Oref::from_raw(self.core.entries[i as usize].oref) {
                self.core.unmap_page_of(oref);
            }
            // A stolen object read back sits in a frame of created objects, which is freed
            // below: it leaves now. One still in the spill store just loses its mark.
            self.core.entries[i as usize].flags &= !F_SPILLED;
            self.core.evict_invalid(i, true);
            self.core.maybe_free_entry(i);
        }
        // The undo copies are back: the decrements deferred during the transaction apply now,
        // before created objects (which some of them may concern) are dropped.
        self.core.apply_deferred_releases();
        let created = std::mem::take(&mut self.tx.created);
        for &i in &created {
            self.core.drop_created(i);
        }
        self.spill_end();
        self.end(created, false);
    }

    /// What commit and abort share once the objects are settled: the read set cleared, the
    /// created objects' frames handed on, invalidations that had to wait applied.
    fn end(&mut self, mut created: Vec<u32>, committed: bool) {
        if committed {
            self.core.apply_deferred_releases();
        }
        self.core.clear_reads();
        self.core.close_new_frame();
        for f in std::mem::take(&mut self.tx.new_frames) {
            if committed {
                self.manager.new_frame_committed(&mut self.core, f);
            } else {
                self.manager.frame_released(f);
                if self.core.frames[f as usize].pins > 0 {
                    // A view of a dropped object still points here: keep the memory until it
                    // goes.
                    self.core.mark_dead(f);
                } else {
                    self.core.release_frame(f);
                }
            }
        }
        self.core.retry_invalidations();
        self.tx.invalid_modified.clear();
        // Keep the list's allocation for the next transaction.
        created.clear();
        self.tx.created = created;
    }

    /// The name of the class of object `oref`, if a copy of it is resident and its class is
    /// known here: for messages about it (a conflict names the class of the object it hit).
    pub fn class_name(&self, oref: Oref) -> Option<&str> {
        let i = self.core.lookup(oref.raw())?;
        let loc = self.core.entries.get(i as usize)?.loc;
        if loc == NOT_RESIDENT {
            return None;
        }
        self.core.class(self.core.class_word(loc)).map(|d| d.name())
    }

    /// The server says object `oref` has a newer committed version than the cached one. The
    /// object leaves the cache (now, or when the transaction ends if the transaction modified
    /// it or a view pins its frame), its usage drops to 0 and its page stops being a source of
    /// installation. Returns what happened, and whether the current transaction used the
    /// object, in which case it must abort.
    pub fn invalidate(&mut self, oref: Oref) -> Invalidation {
        let modified = self
            .core
            .lookup(oref.raw())
            .filter(|&i| self.core.entries[i as usize].flags & F_MODIFIED != 0);
        if let Some(i) = modified {
            self.tx.invalid_modified.insert(i);
        }
        let conflict = modified.is_some() || self.core.reads.contains(oref);
        let evicted = self.core.invalidate(oref);
        Invalidation { evicted, conflict }
    }

    /// Up to `max` invalidations that have been applied (the object left the cache, or was not
    /// in it), oldest first, for the next request to acknowledge. An invalidation of an object
    /// the cache had to keep (modified by the current transaction, or pinned) is applied when
    /// the object leaves, at the end of a transaction.
    pub fn take_acks(&mut self, max: usize) -> Vec<Oref> {
        self.core.take_acks(max)
    }

    /// Puts back acknowledgements from [`ClientCache::take_acks`] that could not be sent, ahead
    /// of the others: an acknowledgement must reach the server, or the object stays in the
    /// client's invalid set and every commit that reads it is refused.
    pub fn requeue_acks(&mut self, acks: Vec<Oref>) {
        self.core.requeue_acks(acks);
    }

    /// Up to `max` pages of which nothing is cached any more (no mapped copy of the page, no
    /// resident object of it anywhere), for the next request to report as discarded; the
    /// server then stops sending invalidations for them. Never `except` (the page that request
    /// fetches) and never a page the current transaction read an object of: those wait for a
    /// later request, while they stay uncached.
    pub fn take_discarded(&mut self, max: usize, except: Option<PageId>) -> Vec<PageId> {
        self.core.take_discarded(max, except)
    }

    /// Up to `max` pages dropped intact whose stored bytes are held for demotion, to report as
    /// demoted (see [`crate::demote`]), never `except` (the page the request fetches). This is
    /// apart from the discarded-page report: a demoted page may still be in the server's
    /// directory (the transaction read it), which does not stop the server caching it.
    pub fn take_demoted(&mut self, max: usize, except: Option<PageId>) -> Vec<PageId> {
        self.core.demote.notices(max, except)
    }

    /// Puts back pages from [`ClientCache::take_demoted`] whose report could not be sent.
    pub fn requeue_demoted(&mut self, pages: &[PageId]) {
        self.core.demote.unnotice(pages);
    }

    /// Demotes the pages it drops intact from now on, holding at most `max` of them until the
    /// server answers (0: never). A session turns this on when its server takes demotions.
    pub fn set_demotion(&mut self, max: usize) {
        self.core.demote.set_max(max);
    }

    /// The server's answer to the last request: the demoted pages it wants.
    pub fn demotions_answered(&mut self, wanted: &[PageId]) {
        self.core.demote.answered(wanted);
    }

    /// Up to `max` wanted demoted pages and their stored bytes, to send on a request.
    pub fn take_demoted_pages(&mut self, max: usize) -> Vec<(PageId, bytes::Bytes)> {
        self.core.demote.take_wanted(max)
    }

    /// Demotion counters.
    pub fn demote_stats(&self) -> crate::demote::DemoteStats {
        self.core.demote.stats
    }

    /// Puts back pages from [`ClientCache::take_discarded`] whose report could not be sent.
    /// They are checked again when next taken (a page fetched meanwhile is not reported).
    pub fn requeue_discarded(&mut self, pages: &[PageId]) {
        self.core.requeue_discarded(pages);
    }

    /// Whether anything of page `page` is cached: its copy, or any object of it.
    pub fn page_cached(&self, page: PageId) -> bool {
        self.core.page_cached(page.get())
    }

    /// Every page of which something is cached: its copy, or any object of it, in page order.
    /// A client that reconnects to its server tells it these pages, so that the server sends
    /// it the invalidations of what changed on them meanwhile and of what changes from then on.
    pub fn cached_pages(&self) -> Vec<PageId> {
        self.core.cached_pages().into_iter().filter_map(PageId::new).collect()
    }

    /// Invalidates every cached object and unmaps every page copy, as if the server had said
    /// that all of them changed: what a client does when it cannot learn what changed while it
    /// was disconnected. Objects the transaction modified or a view pins leave at the end of
    /// the transaction, as with [`ClientCache::invalidate`]. Returns whether the transaction
    /// used one (it must abort then). The acknowledgements this queues are for a server that
    /// never sent the invalidations: drop them with [`ClientCache::forget_acks`].
    pub fn invalidate_all(&mut self) -> bool {
        let mut conflict = false;
        for o in self.core.entry_orefs() {
            conflict |= self.invalidate(o).conflict;
        }
        self.core.unmap_all_pages();
        conflict
    }

    /// Forgets the acknowledgements not yet sent: their server's invalid set is gone (a new
    /// connection after a broken one). Invalidations applied later (at the end of the
    /// transaction) queue acknowledgements again; a server ignores those it has no
    /// invalidation for.
    pub fn forget_acks(&mut self) {
        self.core.forget_acks();
    }

    /// Drops the current transaction's undo copies to give their memory back (the undo log is
    /// an optimization, `papers/thor-ecoop99.txt` section 4.1): an abort then discards the
    /// modified objects instead of restoring them, and their next access fetches the
    /// committed versions. Replacement calls it when the copies hold more than
    /// [`UNDO_BUDGET_DIVISOR`](crate::limits::UNDO_BUDGET_DIVISOR)'s share of the budget.
    pub fn drop_undo_copies(&mut self) {
        let freed = self.tx.undo.drop_copies();
        if freed > 0 {
            self.core.stats.undo_bytes_dropped += freed as u64;
        }
    }

    /// Bytes the current transaction's undo copies hold (outside the budget).
    pub fn undo_bytes(&self) -> usize {
        self.tx.undo.bytes.len()
    }

    /// The transaction's invariants (see [`ClientCache::check_invariants`]).
    pub(crate) fn check_transaction(&self) -> Result<(), String> {
        let core = &self.core;
        let mut undo_bytes = 0usize;
        let mut seen = FxHashSet::default();
        for r in &self.tx.undo.records {
            let e = core.entries.get(r.entry as usize).ok_or("undo copy of no entry")?;
            if e.flags & F_LIVE == 0 || e.flags & F_MODIFIED == 0 || e.flags & F_NEW != 0 {
                return Err(format!("undo copy of entry {} with flags {:#x}", r.entry, e.flags));
            }
            if e.loc == NOT_RESIDENT {
                self.check_spilled(r.entry)?;
            } else if core.object_size(e.loc) != r.len as usize
                || (r.start != NO_COPY && r.start != undo_bytes)
            {
                return Err(format!("undo copy of entry {} has the wrong extent", r.entry));
            }
            if !seen.insert(r.entry) {
                return Err(format!("entry {} has two undo copies", r.entry));
            }
            if r.start != NO_COPY {
                undo_bytes += r.len as usize;
            }
        }
        if undo_bytes != self.tx.undo.bytes.len() {
            return Err("undo bytes do not add up".into());
        }
        for (k, &i) in self.tx.created.iter().enumerate() {
            let e = core.entries.get(i as usize).ok_or("created object of no entry")?;
            if e.flags & (F_LIVE | F_NEW) != F_LIVE | F_NEW {
                return Err(format!("created entry {i} is not a created object"));
            }
            self.check_spilled(i)?;
            if self.created_index(e.oref) != Some(k as u32) {
                return Err(format!("created entry {i} is not number {k} of the commit"));
            }
        }
        let (mut modified, mut new) = (0, 0);
        for e in core.entries.iter().filter(|e| e.flags & F_LIVE != 0) {
            modified += usize::from(e.flags & F_MODIFIED != 0);
            new += usize::from(e.flags & F_NEW != 0);
        }
        if modified != self.tx.undo.records.len() || new != self.tx.created.len() {
            return Err(format!(
                "{modified} entries marked modified and {new} created; the transaction has {} \
                 undo copies and {} created objects",
                self.tx.undo.records.len(),
                self.tx.created.len()
            ));
        }
        Ok(())
    }
}
