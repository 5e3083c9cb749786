//! The object state of a server core: what is committed, what is buffered, where new objects
//! go, and the checks a commit must pass. No I/O: every page image it needs is either in the
//! page cache, handed in by the caller, or reported missing so that the core can ask its driver
//! to read it.
//!
//! ```text
//!   prepare(commit) ── validate ──missing page──► Need(pages)   (the core reads them, retries)
//!        │                 └──refused──► Invalid
//!        └── allocate orefs at the tail ── copy each object once into the record, patching
//!            tagged references ── Prepared { lsn, record }        (the core appends it)
//!
//!   publish(durable LSN) ── prepared commits up to it move into the MOB, in LSN order
//!   compose(page) ── installed image + the MOB's versions of the page
//! ```
//!
//! # Invariants
//!
//! - *Objects keep their class and size for life.* A version must have the class and size of
//!   the object it replaces, so installing versions never overflows a page and an install
//!   cannot fail because of what a client sent. Collections grow by allocating a bigger object.
//! - *Allocation is sequential:* new objects go to the tail page in creation order, then to
//!   the next page; pages are opened in LSN order. This is the clustering OO7 relies on.
//! - *Fresh pages* (opened since the checkpoint) have no image on disk: they start from empty,
//!   and the log still holds every record that created an object in them (the MOB pins
//!   creation records, see [`crate::mob::MobEntry::pin`]).
//! - *Slot counts are exact:* objects are never deleted and only the tail page gains objects,
//!   so a page's offset-table size, once known, changes only by allocation here.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use thor_core::class::check_refs;
use thor_core::le::{put_u32, u32_at};
use thor_core::limits::{OFFSET_ENTRY_BYTES, PAGE_HEADER_BYTES};
use thor_core::{
    ClassDesc, FormatError, Lsn, Oid, Oref, PageId, PageMut, PageView, RawRef, builtin, page,
};

use crate::error::{EngineError, InvalidCommit};
use crate::limits;
use crate::mob::{Mob, commit_cost};
use crate::pagecache::PageCache;
use crate::record::{self, RecordBuilder};
use crate::superblock::Superblock;

/// A commit as the core receives it: new versions of existing objects and newly created
/// objects, as shared byte slices (of a received frame, without copying).
///
/// Reference words in any object (and the class word of a created object) may be tagged
/// ([`RawRef::Tagged`]) with an index into `created`: the core allocates the created objects
/// in order and replaces those words by their orefs.
#[derive(Debug, Clone, Default)]
pub struct CommitIn {
    /// New versions: the object's oref and its complete new bytes.
    pub versions: Vec<(Oref, Bytes)>,
    /// Created objects in creation order (which is their clustering order).
    pub created: Vec<Bytes>,
    /// The objects the transaction read (its ROS, for concurrency control; the objects it
    /// writes count as read whether listed or not).
    pub reads: Vec<Oref>,
    /// The timestamp to validate at; `None` (every client commit): a fresh one from the
    /// server's clock. Set by a coordinator's prepare, and by tests.
    pub ts: Option<super::cc::Timestamp>,
    /// The written pages as the client shipped them whole (at least one), for a commit path
    /// that logs pages (thor-study's whole-page logging, whose page rule reads their
    /// `version`). `None` for every other commit; the core's own path refuses a commit with
    /// pages at its gate.
    pub pages: Option<Vec<(PageId, Bytes)>>,
    /// The id its client gave it (`CommitWithId`), kept in its record so that the client can
    /// learn its outcome after a broken connection (`super::resume`).
    pub id: Option<u64>,
    /// Leaf deltas (wire version 8): for map leaves it writes by point operations, the keys
    /// it read there and its key operations, which let validation merge it with a concurrent
    /// change of other keys of the leaf (`crate::leafmerge`). Never logged: the record holds
    /// the leaf's bytes, merged or not.
    pub leaves: Vec<thor_wire::LeafDelta>,
}

impl CommitIn {
    /// Whether the commit writes nothing (a read-only transaction).
    pub fn is_read_only(&self) -> bool {
        self.versions.is_empty() && self.created.is_empty()
    }

    /// Objects written.
    pub fn objects(&self) -> usize {
        self.versions.len() + self.created.len()
    }

    /// Bytes of object data written.
    pub fn data_bytes(&self) -> usize {
        self.versions.iter().map(|(_, v)| v.len()).sum::<usize>()
            + self.created.iter().map(Bytes::len).sum::<usize>()
    }

    /// The bytes of the commit record the core's own path makes of it (kind 2; a commit path
    /// with records of its own sizes them itself: `CommitPath::log_bytes`).
    pub fn record_bytes(&self) -> usize {
        let id = if self.id.is_some() { record::COMMIT_ID_BYTES } else { 0 };
        id + record::encoded_len(self.reads.len(), self.objects(), self.data_bytes())
    }
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The commit's log sequence number (its place in the serial order of this server).
    pub lsn: Lsn,
    /// The orefs given to the created objects, in request order.
    pub created: Vec<Oref>,
}

/// What replaying a record tells concurrency control.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The transaction's timestamp (zero for records written before concurrency control).
    pub ts: super::cc::Timestamp,
    /// The id its client gave the commit, if any (`super::resume`).
    pub id: Option<u64>,
    /// The orefs of its created objects, in record order; filled only for a commit with an
    /// id, whose client may ask for them.
    pub created: Vec<Oref>,
    /// Its read set.
    pub reads: Vec<Oref>,
    /// The objects it modified (not created).
    pub writes: Vec<Oref>,
}

/// What one replayed record was.
#[derive(Debug)]
pub(crate) enum Replay {
    /// A commit, now in the MOB.
    Commit(Replayed),
    /// A two-phase part: its created objects are in the MOB, its versions held.
    Prepare(Replayed, record::PrepareSection, Held),
    /// A two-phase decision.
    Decide(record::Decision),
    /// A coordinator's end of a transaction.
    End((u64, u32)),
    /// A record that changes nothing forward replay rebuilds (a record a commit path keeps
    /// for a restart of its own, such as whole-page logging's page images and checkpoints).
    Nothing,
}

/// What replaying one record rebuilt, as a commit path's replay hook returns it
/// (`CommitPath::replay`): opaque, so that only the store makes one of a commit.
#[derive(Debug)]
pub struct ReplayedRecord(pub(crate) Replay);

impl ReplayedRecord {
    /// A record forward replay rebuilds nothing from.
    pub fn nothing() -> ReplayedRecord {
        ReplayedRecord(Replay::Nothing)
    }

    /// Sets the objects a replayed commit modified (a path whose commit record names its
    /// written objects apart from the objects it carries); false if the record was not an
    /// ordinary commit.
    pub fn set_writes(&mut self, writes: Vec<Oref>) -> bool {
        match &mut self.0 {
            Replay::Commit(r) => {
                r.writes = writes;
                true
            }
            _ => false,
        }
    }
}

/// A commit in the log, not yet known durable, not yet visible.
#[derive(Debug)]
pub struct Prepared {
    /// Its place in the log: its commit record's LSN, the highest of its records'.
    pub(crate) lsn: Lsn,
    /// The commit record, shared with the log append and (once durable) the MOB.
    pub(crate) record: Bytes,
    /// Each object: oref, whether created, and where its bytes are in `record`.
    pub(crate) objects: Vec<ObjectAt>,
    /// The orefs given to the created objects.
    pub(crate) created: Vec<Oref>,
    /// Bytes the log holds for it until it is durable (records plus log framing).
    pub(crate) log_bytes: usize,
    /// A part of a two-phase commit (record kind 3): once durable, only its created objects
    /// are published; its versions are held until the decision ([`Store::publish_held`]).
    pub(crate) held: bool,
    /// A commit a path built with records of its own ([`Store::push_prepared`]): the records
    /// appended before the commit record, and each object's bytes. `None` for the core's own
    /// commits, whose objects are all in `record`.
    pub(crate) preceding: Option<Preceding>,
    /// The id its client gave the commit (`super::resume`).
    pub(crate) id: Option<u64>,
}

/// One object of a prepared commit: which, whether the commit created it, and where its bytes
/// are in the record. Twelve bytes, not a `(Oref, bool, Range<usize>)`'s 24: a commit of
/// 99,000 objects (OO7's T2b) keeps 99,000 of them in a fresh vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectAt {
    /// The object.
    pub oref: Oref,
    /// Where its bytes start in the record.
    start: u32,
    /// Its length (an object fits in a page).
    len: u16,
    /// Whether the commit created it.
    pub created: bool,
}

const _: () = assert!(std::mem::size_of::<ObjectAt>() == 12);

impl ObjectAt {
    /// Object `oref` at `range` of its record. A record's length fits in a `u32` (the log's
    /// length field) and an object's in a `u16` (a page), so neither is cut.
    pub fn new(oref: Oref, created: bool, range: Range<usize>) -> ObjectAt {
        let start = u32::try_from(range.start).expect("a record's length fits in a u32");
        let len = u16::try_from(range.len()).expect("an object fits in a page");
        ObjectAt { oref, start, len, created }
    }

    /// Where its bytes are in the record.
    pub fn range(&self) -> Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// What a commit a path built holds besides its commit record.
#[derive(Debug)]
pub(crate) struct Preceding {
    /// The records appended before the commit record, in LSN order.
    pub records: Vec<(Lsn, Bytes)>,
    /// Each object's bytes, in `objects` order (slices of the records).
    pub data: Vec<Bytes>,
    /// Bytes of all its records: what its MOB versions keep alive.
    pub bytes: usize,
}

impl Prepared {
    /// The bytes of object `i` (of `objects`).
    pub(crate) fn data(&self, i: usize) -> Bytes {
        match &self.preceding {
            Some(w) => w.data[i].clone(),
            None => self.record.slice(self.objects[i].range()),
        }
    }

    /// The LSN of its first record.
    pub(crate) fn first_lsn(&self) -> Lsn {
        self.preceding.as_ref().and_then(|w| w.records.first()).map_or(self.lsn, |(l, _)| *l)
    }

    /// The memory its MOB versions keep alive: the record(s) they are slices of.
    pub(crate) fn mob_bytes(&self) -> usize {
        self.preceding.as_ref().map_or(self.record.len(), |w| w.bytes)
    }

    /// Its commit record's LSN (the highest of its records').
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Its commit record.
    pub fn record(&self) -> &Bytes {
        &self.record
    }

    /// The records appended before its commit record, with their LSNs (empty for the core's
    /// own commits).
    pub fn preceding(&self) -> &[(Lsn, Bytes)] {
        self.preceding.as_ref().map_or(&[], |p| &p.records)
    }

    /// Whether a path built it with records of its own ([`Store::push_prepared`]).
    pub fn is_path_built(&self) -> bool {
        self.preceding.is_some()
    }
}

/// A commit a path built with records of its own, for [`Store::push_prepared`].
#[derive(Debug)]
pub struct PathCommit {
    /// The records appended before the commit record, in order.
    pub preceding: Vec<Bytes>,
    /// The commit record.
    pub record: Bytes,
    /// Each object, in the order the MOB gets them: its oref and whether the commit created
    /// it.
    pub objects: Vec<(Oref, bool)>,
    /// Each object's bytes (slices of the records, which they keep alive in the MOB).
    pub data: Vec<Bytes>,
    /// The orefs given to the created objects ([`Store::allocate_created`]).
    pub created: Vec<Oref>,
    /// The id its client gave the commit.
    pub id: Option<u64>,
}

/// A commit [`Store::check`] passed: the classes its tagged references are patched with.
#[derive(Debug)]
pub struct Checked {
    descs: Descs,
    /// Objects it writes and creates.
    objects: usize,
}

impl Checked {
    /// Objects the commit writes and creates.
    pub fn objects(&self) -> usize {
        self.objects
    }

    /// Replaces the tagged references of `bytes`, version `i` of the commit, with the orefs
    /// given to its created objects (nothing to do when it creates none).
    pub fn patch_version(&self, i: usize, bytes: &mut [u8], created: &[Oref]) {
        if let Some(desc) = self.descs.versions.get(i) {
            patch_created(bytes, desc, false, created, &mut Vec::new());
        }
    }
}

/// The versions of a prepared two-phase part, held from its prepare record's durability until
/// its decision.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The prepare record's LSN: the MOB keeps the versions under it, so the checkpoint stays
    /// below the record until they are installed.
    pub lsn: Lsn,
    /// The prepare record.
    pub record: Bytes,
    /// Each version: oref and where its bytes are in `record`.
    pub versions: Vec<(Oref, Range<usize>)>,
}

/// Why `prepare` could not finish.
#[derive(Debug)]
pub enum Stop {
    /// These page images are needed (read them and try again).
    Need(Vec<PageId>),
    /// The commit is refused or cannot be done.
    Fail(EngineError),
}

impl From<EngineError> for Stop {
    fn from(e: EngineError) -> Stop {
        Stop::Fail(e)
    }
}

impl From<InvalidCommit> for Stop {
    fn from(e: InvalidCommit) -> Stop {
        Stop::Fail(e.into())
    }
}

/// Where new objects go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tail {
    /// The page being filled.
    pub page: PageId,
    /// Its free bytes (objects and offset entries).
    pub free: usize,
    /// Its offset-table entries (the next oid).
    pub slots: usize,
}

const SLOTS_UNKNOWN: u16 = u16::MAX;

/// Page images a commit being validated brought along (read for it from disk), so that the
/// page cache may evict them meanwhile without losing them.
pub type Images = Vec<(PageId, Bytes)>;

/// What is known of an object during validation.
enum Lookup<T> {
    /// Here it is.
    Found(T),
    /// It does not exist.
    Absent,
    /// Its page image is needed to tell.
    Missing(PageId),
}

/// The object state. See the module documentation. A commit path sees it through its public
/// methods: what a path with records of its own needs to check, allocate, build and replay a
/// commit (`CommitPath`).
#[derive(Debug)]
pub struct Store {
    /// Bytes per page.
    pub(crate) page_size: usize,
    /// Published versions waiting to be installed.
    pub(crate) mob: Mob,
    /// Installed page images.
    pub(crate) cache: PageCache,
    /// The allocation point.
    tail: Tail,
    /// Offset-table size of each page, where known ([`SLOTS_UNKNOWN`] otherwise).
    slots: Vec<u16>,
    /// Decoded class objects.
    classes: FxHashMap<Oref, Arc<ClassDesc>>,
    /// Prepared commits in LSN order.
    pending: VecDeque<Prepared>,
    /// Pages with no image on disk yet: they start from empty.
    fresh: FxHashSet<PageId>,
    /// (LSN that opened the page, page), for pages opened since the checkpoint.
    opened: VecDeque<(Lsn, PageId)>,
    /// The superblock as last written (or being written).
    superblock: Superblock,
    /// The LSN the next record gets.
    next_lsn: Lsn,
    /// Every record up to this LSN is durable.
    durable_lsn: Lsn,
    /// Log bytes appended and not yet durable.
    unsynced_bytes: usize,
    /// What the prepared commits will add to the MOB when they are published.
    pending_mob_cost: usize,
    /// Records appended that publish nothing (two-phase decisions and ends), not yet durable:
    /// LSN and log bytes.
    plain: VecDeque<(Lsn, usize)>,
}

impl Store {
    /// The state of a database whose superblock is `sb`, before replaying the log.
    ///
    /// Until recovery ends, `next_lsn` is the next record to replay (the checkpoint, then one
    /// past each record replayed), not the log's end: an install round during replay must not
    /// move the checkpoint past records that are not replayed yet.
    pub(crate) fn new(
        sb: Superblock,
        page_cache_bytes: usize,
        page_cache_mode: crate::pagecache::CacheMode,
    ) -> Store {
        let next_lsn = sb.checkpoint;
        let page_size = sb.page_size;
        let tail_page = sb.alloc_page.unwrap_or(PageId::FIRST);
        Store {
            page_size,
            mob: Mob::new(),
            cache: PageCache::with_mode(page_cache_bytes, page_size, page_cache_mode),
            tail: Tail { page: tail_page, free: 0, slots: 0 },
            slots: Vec::new(),
            classes: FxHashMap::default(),
            pending: VecDeque::new(),
            fresh: FxHashSet::default(),
            opened: VecDeque::new(),
            superblock: sb,
            next_lsn,
            durable_lsn: Lsn(next_lsn.0.saturating_sub(1)),
            unsynced_bytes: 0,
            pending_mob_cost: 0,
            plain: VecDeque::new(),
        }
    }

    /// Replays one durable log record into the MOB (recovery).
    /// Returns the transaction's timestamp, read set and modified objects (not the created
    /// ones), for the validation queue.
    pub(crate) fn replay(&mut self, lsn: Lsn, rec: Bytes) -> Result<Replay, EngineError> {
        let len = rec.len();
        let base = rec.as_ptr() as usize;
        let mut objects = Vec::new();
        let decoded = record::decode_any(&rec, |o| {
            let start = o.data.as_ptr() as usize - base;
            objects.push((o.oref, o.created, start..start + o.data.len()));
        })
        .map_err(|e| EngineError::CorruptRecord { lsn: lsn.0, why: e.to_string() })?;
        self.next_lsn = self.next_lsn.max(lsn.next());
        self.durable_lsn = self.durable_lsn.max(lsn);
        let (cc, section) = match decoded {
            record::Record::Commit(cc) => (cc, None),
            record::Record::Prepare(cc, s) => (cc, Some(s)),
            record::Record::Decide(d) => return Ok(Replay::Decide(d)),
            record::Record::End(ts) => return Ok(Replay::End(ts)),
        };
        let created = match cc.id {
            Some(_) => objects.iter().filter(|(_, c, _)| *c).map(|(o, _, _)| *o).collect(),
            None => Vec::new(),
        };
        let replayed = Replayed {
            ts: super::cc::Timestamp { time_us: cc.ts_us, server: cc.ts_server },
            id: cc.id,
            created,
            reads: cc.reads().collect(),
            writes: objects.iter().filter(|(_, c, _)| !c).map(|(o, _, _)| *o).collect(),
        };
        let mut held = Held { lsn, record: rec.clone(), versions: Vec::new() };
        for (oref, created, range) in &objects {
            if section.is_some() && !created {
                held.versions.push((*oref, range.clone()));
                continue;
            }
            let page = oref.page().expect("the record decoder checks orefs");
            if *created && page > self.tail.page {
                let mut p = self.tail.page;
                while p < page {
                    p = p.next().expect("page is below the maximum");
                    self.fresh.insert(p);
                    self.opened.push_back((lsn, p));
                }
                self.tail.page = page;
            }
        }
        let published = objects.into_iter().filter(|(_, created, _)| section.is_none() || *created);
        self.mob.insert_all(lsn, len, published.map(|(o, c, r)| (o, c, rec.slice(r))));
        Ok(match section {
            None => Replay::Commit(replayed),
            Some(s) => Replay::Prepare(replayed, s, held),
        })
    }

    /// Recovery replayed every record: the log continues at `log_next`.
    pub(crate) fn replayed_all(&mut self, log_next: Lsn) {
        self.next_lsn = self.next_lsn.max(log_next);
        self.durable_lsn = Lsn(self.next_lsn.0.saturating_sub(1));
    }

    /// Finishes recovery: learns the tail page's free space from its image (`image` is the
    /// installed image of the tail page, `None` if it is fresh).
    pub(crate) fn set_tail_from(&mut self, image: Option<Bytes>) -> Result<(), EngineError> {
        let page = self.tail.page;
        let buf = self.compose_with(page, image.as_deref())?;
        // The tail page is where the next commits allocate and what clients read first.
        if let Some(img) = image {
            self.cache.insert(page, img);
        }
        let v = PageView::parse(&buf)
            .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
        self.tail = Tail { page, free: v.free_bytes(), slots: v.slot_count() };
        self.set_slots(page, v.slot_count());
        Ok(())
    }

    /// The installed image of `page` with the MOB's versions applied, from `image` (the
    /// installed image, or `None` for a fresh page).
    fn compose_with(&self, page: PageId, image: Option<&[u8]>) -> Result<Vec<u8>, EngineError> {
        let mut buf = match image {
            Some(img) => img.to_vec(),
            None => empty_page(page, self.page_size),
        };
        apply_mob(&self.mob, page, &mut buf)
            .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
        Ok(buf)
    }

    /// The page as a fetch sees it, if its installed image is at hand: cached or fresh (pages
    /// past the tail do not exist). `Ok(None)` means the image must be read from disk first.
    /// Counts a page cache lookup.
    pub(crate) fn compose(&mut self, page: PageId) -> Result<Option<(Bytes, usize)>, EngineError> {
        if page > self.tail.page {
            return Err(EngineError::NoSuchPage(page.get()));
        }
        let base = if self.fresh.contains(&page) {
            Bytes::from(empty_page(page, self.page_size))
        } else if let Some(img) = self.cache.get_for_client(page) {
            img
        } else {
            return Ok(None);
        };
        Ok(Some(self.with_mob(page, base)?))
    }

    /// The page as a fetch sees it if that needs no disk read (cached or fresh), without
    /// counting a page-cache miss when it does: `None` then. Prefetch's guesses use it, so
    /// that they neither wait for the disk nor skew the cache's hit ratio.
    pub(crate) fn compose_if_cached(
        &mut self,
        page: PageId,
    ) -> Option<Result<(Bytes, usize), EngineError>> {
        if page > self.tail.page || !(self.fresh.contains(&page) || self.cache.peek(page).is_some())
        {
            return None;
        }
        self.compose(page).transpose()
    }

    /// The descriptor of the stored class `class` if it is known without reading a page (a
    /// built-in class, one decoded before, or one whose class object is cached).
    pub(crate) fn class_desc_cached(&mut self, class: Oref) -> Option<Arc<ClassDesc>> {
        match self.class_desc(class, &Images::new()) {
            Ok(Lookup::Found(d)) => Some(d),
            _ => None,
        }
    }

    /// `base` with the MOB's versions of `page` applied and sealed; also returns how many
    /// versions were applied. A page without buffered versions is returned as it is (shared).
    pub(crate) fn with_mob(
        &self,
        page: PageId,
        base: Bytes,
    ) -> Result<(Bytes, usize), EngineError> {
        if !self.mob.has_page(page) {
            return Ok((base, 0));
        }
        let mut buf = base.to_vec();
        let n = apply_mob(&self.mob, page, &mut buf)
            .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
        page::seal(&mut buf);
        Ok((Bytes::from(buf), n))
    }

    fn set_slots(&mut self, page: PageId, slots: usize) {
        let i = page.index();
        if self.slots.len() <= i {
            self.slots.resize(i + 1, SLOTS_UNKNOWN);
        }
        self.slots[i] = slots as u16;
    }

    /// The installed image of `page` for validation: fresh, cached, or brought by the commit.
    fn image(&mut self, page: PageId, images: &Images) -> Option<Bytes> {
        if self.fresh.contains(&page) {
            return Some(Bytes::from(empty_page(page, self.page_size)));
        }
        if let Some((_, img)) = images.iter().find(|(p, _)| *p == page) {
            return Some(img.clone());
        }
        self.cache.peek(page).cloned()
    }

    /// The offset-table size of `page`, counting every prepared allocation.
    fn slots_of(&mut self, page: PageId, images: &Images) -> Result<Lookup<usize>, EngineError> {
        if page > self.tail.page {
            return Ok(Lookup::Found(0));
        }
        if let Some(&n) = self.slots.get(page.index())
            && n != SLOTS_UNKNOWN
        {
            return Ok(Lookup::Found(n as usize));
        }
        let Some(img) = self.image(page, images) else { return Ok(Lookup::Missing(page)) };
        // A page without MOB versions is counted in place: copying and composing each page a
        // commit refers to cost a page copy each (4,000 for OO7's T2b).
        let n = if self.mob.has_page(page) {
            let buf = self.compose_with(page, Some(&img))?;
            PageView::parse(&buf).map(|v| v.slot_count())
        } else {
            // The image was checked whole when it was read (or built here): its header says.
            PageView::slot_count_in(&img)
        }
        .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
        self.set_slots(page, n);
        Ok(Lookup::Found(n))
    }

    /// Whether `oref` names an object that exists (counting prepared commits).
    fn exists(&mut self, oref: Oref, images: &Images) -> Result<Lookup<()>, EngineError> {
        let Some(page) = oref.page() else { return Ok(Lookup::Absent) };
        Ok(match self.slots_of(page, images)? {
            Lookup::Found(n) if oref.oid().index() < n => Lookup::Found(()),
            Lookup::Found(_) | Lookup::Absent => Lookup::Absent,
            Lookup::Missing(p) => Lookup::Missing(p),
        })
    }

    /// Calls `f` with bytes of `oref`: its class word and size (which an object keeps for life)
    /// and, for a class object (immutable), all of it. The MOB's version, else the installed
    /// image's, else (an object created by a commit still being made durable) a prepared one.
    ///
    /// Prepared versions are not indexed per object: a commit of 99,000 objects paid a hash
    /// entry each, inserted at prepare and removed at publish, for lookups that an object's
    /// fixed class and size make unnecessary. Only objects no MOB or image holds are looked
    /// for among the prepared commits, newest first.
    ///
    /// `last` keeps the last page image used between calls: a commit lists a page's objects
    /// one after the other, and each lookup of the image (and, for a fresh page, its making)
    /// then happens once per page, not per object.
    fn with_object<R>(
        &mut self,
        oref: Oref,
        images: &Images,
        last: &mut Option<(PageId, Bytes)>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Lookup<R>, EngineError> {
        if let Some(e) = self.mob.get(oref) {
            return Ok(Lookup::Found(f(&e.data)));
        }
        let Some(page) = oref.page() else { return Ok(Lookup::Absent) };
        if page > self.tail.page {
            return Ok(Lookup::Absent);
        }
        if last.as_ref().is_none_or(|(p, _)| *p != page) {
            *last = self.image(page, images).map(|img| (page, img));
        }
        let img = last.as_ref().filter(|(p, _)| *p == page).map(|(_, img)| img);
        if let Some(img) = img {
            // One object of the page, checked on its own: parsing the whole page per written
            // object made validating a commit of 99,000 objects (OO7's T2b) cost 300
            // offset-table entries each.
            let o = PageView::object_in(img, oref.oid())
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
            if let Some(o) = o {
                return Ok(Lookup::Found(f(o)));
            }
        }
        if let Some(d) = self.prepared_version(oref) {
            return Ok(Lookup::Found(f(&d)));
        }
        Ok(if last.is_some() { Lookup::Absent } else { Lookup::Missing(page) })
    }

    /// The newest prepared version of `oref`, if a prepared commit wrote or created it.
    fn prepared_version(&self, oref: Oref) -> Option<Bytes> {
        self.pending.iter().rev().find_map(|p| {
            let i = p.objects.iter().position(|o| o.oref == oref)?;
            Some(p.data(i))
        })
    }

    /// The descriptor of the stored class `class`.
    fn class_desc(
        &mut self,
        class: Oref,
        images: &Images,
    ) -> Result<Lookup<Arc<ClassDesc>>, EngineError> {
        if let Some(d) = self.classes.get(&class) {
            return Ok(Lookup::Found(d.clone()));
        }
        if let Some(d) = builtin::desc(class) {
            let d = Arc::new(d.clone());
            self.classes.insert(class, d.clone());
            return Ok(Lookup::Found(d));
        }
        if class == builtin::ROOT {
            return Ok(Lookup::Absent);
        }
        match self.exists(class, images)? {
            Lookup::Found(()) => {}
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Missing(p) => return Ok(Lookup::Missing(p)),
        }
        let desc = match self.with_object(class, images, &mut None, ClassDesc::from_class_object)? {
            Lookup::Found(Ok(d)) => Arc::new(d),
            Lookup::Found(Err(_)) | Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Missing(p) => return Ok(Lookup::Missing(p)),
        };
        self.classes.insert(class, desc.clone());
        Ok(Lookup::Found(desc))
    }

    /// Checks a commit against the store and, if it passes, allocates its created objects,
    /// builds its record (each object copied once, tagged references patched) and records it
    /// as prepared with the next LSN. The caller appends the record to the log.
    /// `ts` (clock microseconds, server id) is the timestamp concurrency control gave it.
    pub(crate) fn prepare(
        &mut self,
        c: &CommitIn,
        images: &Images,
        allow_create: bool,
        ts: (u64, u32),
        section: Option<&record::PrepareSection>,
    ) -> Result<&Prepared, Stop> {
        let n_objects = checked_object_count(c)?;
        let n_bytes = c.data_bytes();
        if n_bytes > limits::COMMIT_BYTES_MAX {
            return Err(InvalidCommit::TooLarge {
                what: "bytes",
                got: n_bytes,
                max: limits::COMMIT_BYTES_MAX,
            }
            .into());
        }
        if !allow_create && !c.created.is_empty() {
            return Err(EngineError::BulkLoadActive.into());
        }
        let descs = self.validate(c, images)?;
        let lsn = self.next_lsn;
        let created = self.allocate(c.created.len(), c.created.iter().map(Bytes::len), lsn)?;

        let extra = section.map_or(0, record::PrepareSection::encoded_len);
        // `c.record_bytes()` from the sum just made: each is a pass over every object.
        let record_bytes = record::encoded_len(c.reads.len(), n_objects, n_bytes);
        let mut rec = RecordBuilder::with_capacity(record_bytes + extra + 8, ts, &c.reads);
        if let Some(id) = c.id.filter(|_| section.is_none()) {
            rec = rec.with_id(id);
        }
        let mut objects = Vec::with_capacity(n_objects);
        // Reference offsets of the object being patched; one buffer for the whole commit.
        let mut offs: Vec<usize> = Vec::new();
        let mut patch = |bytes: &mut [u8], desc: &ClassDesc, header: bool| {
            patch_created(bytes, desc, header, &created, &mut offs);
        };
        for (i, (oref, data)) in c.versions.iter().enumerate() {
            let range = rec.push(*oref, false, data);
            // Without created objects there is nothing to patch: validation refused every
            // tagged reference.
            if !created.is_empty() {
                patch(rec.bytes_mut(range.clone()), &descs.versions[i], false);
            }
            objects.push(ObjectAt::new(*oref, false, range));
        }
        for (i, data) in c.created.iter().enumerate() {
            let range = rec.push(created[i], true, data);
            patch(rec.bytes_mut(range.clone()), &descs.created[i], true);
            objects.push(ObjectAt::new(created[i], true, range));
        }
        let record = Bytes::from(match section {
            Some(s) => rec.finish_prepared(s),
            None => rec.finish(),
        });
        let log_bytes = crate::limits::log_record_len(record.len());
        self.next_lsn = lsn.next();
        self.unsynced_bytes += log_bytes;
        self.pending_mob_cost += commit_cost(n_objects, record.len());
        let held = section.is_some();
        self.pending.push_back(Prepared {
            lsn,
            record,
            objects,
            created,
            log_bytes,
            held,
            preceding: None,
            id: c.id.filter(|_| section.is_none()),
        });
        Ok(self.pending.back().expect("just pushed"))
    }

    /// The committed state of `page` as the next prepared commit sees it: its installed image
    /// (fresh, brought by the commit or cached), the MOB's versions and every prepared
    /// commit's, with `version` the newest LSN that wrote it. `None`: the image must be read.
    pub fn committed_page(
        &mut self,
        page: PageId,
        images: &Images,
    ) -> Result<Option<Vec<u8>>, EngineError> {
        let Some(img) = self.image(page, images) else { return Ok(None) };
        let mut buf = self.compose_with(page, Some(&img))?;
        // The prepared commits' versions of the page, the newest of each object (commits in
        // LSN order, a later one replacing an earlier one's).
        let mut pending: Vec<(Oid, Bytes)> = Vec::new();
        let mut newest = Lsn::ZERO;
        for p in &self.pending {
            for (i, ObjectAt { oref: o, .. }) in p.objects.iter().enumerate() {
                if o.page() != Some(page) {
                    continue;
                }
                newest = newest.max(p.lsn);
                match pending.iter_mut().find(|(oid, _)| *oid == o.oid()) {
                    Some(v) => v.1 = p.data(i),
                    None => pending.push((o.oid(), p.data(i))),
                }
            }
        }
        let mut vs: Vec<(Oid, &[u8])> = pending.iter().map(|(o, d)| (*o, &d[..])).collect();
        if !vs.is_empty() {
            let mut p = PageMut::open(&mut buf)
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
            p.apply(&mut vs, &mut Vec::new())
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?;
            let version = p.view().version().max(newest);
            p.set_version(version);
        }
        Ok(Some(buf))
    }

    /// Appends a record that publishes nothing (a two-phase decision or end): returns its LSN.
    /// The caller emits the append.
    pub(crate) fn append_plain(&mut self, record: &[u8]) -> Lsn {
        let lsn = self.next_lsn;
        self.next_lsn = lsn.next();
        let log_bytes = crate::limits::log_record_len(record.len());
        self.unsynced_bytes += log_bytes;
        self.plain.push_back((lsn, log_bytes));
        lsn
    }

    /// Publishes the held versions of a two-phase part that committed: into the MOB under
    /// the prepare record's LSN.
    pub(crate) fn publish_held(&mut self, h: &Held) {
        let versions = h.versions.iter().map(|(o, r)| (*o, false, h.record.slice(r.clone())));
        self.mob.insert_all(h.lsn, h.record.len(), versions);
    }

    /// Every record up to this LSN is durable.
    pub(crate) fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Log bytes appended and not yet durable.
    pub(crate) fn unsynced_bytes(&self) -> usize {
        self.unsynced_bytes
    }

    /// What the prepared commits will add to the MOB when they are published.
    pub(crate) fn pending_mob_cost(&self) -> usize {
        self.pending_mob_cost
    }

    /// The prepared commits, in LSN order.
    /// The newest version of existing object `oref` that a commit validated now comes after:
    /// the newest prepared commit's that wrote it (its log record is on the way; being
    /// validated earlier, it precedes any commit validated now in the serial order and in the
    /// log), else the MOB's, else the one in the cached image of its page. `None` when that
    /// needs a disk read, or the newest writer is a two-phase part (whose outcome is not
    /// decided; its versions are held apart from the MOB until then, so the caller must also
    /// rule out a part in doubt, durable or not). The map leaf merge reads its leaves with it.
    pub(crate) fn current_version(&self, oref: Oref) -> Option<Bytes> {
        for p in self.pending.iter().rev() {
            if let Some(i) = p.objects.iter().position(|o| o.oref == oref) {
                return (!p.held && !p.objects[i].created).then(|| p.data(i));
            }
        }
        if let Some(e) = self.mob.get(oref) {
            return Some(e.data.clone());
        }
        let page = oref.page()?;
        if self.fresh.contains(&page) {
            return None;
        }
        let img = self.cache.peek(page)?;
        let obj = thor_core::page::PageView::object_in(img, oref.oid()).ok().flatten()?;
        Some(img.slice_ref(obj))
    }

    pub(crate) fn pending(&self) -> &VecDeque<Prepared> {
        &self.pending
    }

    /// The superblock as last written (or being written).
    pub(crate) fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The page new objects go to.
    pub(crate) fn tail_page(&self) -> PageId {
        self.tail.page
    }

    /// Whether `page` has no image on disk yet (opened since the checkpoint).
    pub(crate) fn is_fresh(&self, page: PageId) -> bool {
        self.fresh.contains(&page)
    }

    /// An install round wrote `page` home as `img`: cached, and no longer fresh.
    pub(crate) fn installed_home(&mut self, page: PageId, img: Bytes) {
        self.cache.insert(page, img);
        self.fresh.remove(&page);
    }

    /// The superblock an install round writes with its checkpoint at `checkpoint`: the
    /// allocation page as of the checkpoint (the last page opened below it) and the next
    /// generation. It is the superblock from now on.
    pub(crate) fn checkpoint_at(&mut self, checkpoint: Lsn) -> Superblock {
        assert!(checkpoint <= self.next_lsn, "a checkpoint is not past the log");
        while self.opened.front().is_some_and(|(l, _)| *l < checkpoint) {
            let (_, p) = self.opened.pop_front().expect("checked");
            self.superblock.alloc_page = Some(p);
        }
        self.superblock.checkpoint = checkpoint;
        self.superblock.generation += 1;
        self.superblock.clone()
    }

    // ---- What a commit path with records of its own uses (`CommitPath`) ----

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The LSN the next record appended gets.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Checks commit `c` as [`Store::prepare`] does before it builds a record (its size, its
    /// orefs, every version against its object, every created object against its class),
    /// allocating nothing: a refusal leaves the store as it was.
    pub fn check(
        &mut self,
        c: &CommitIn,
        images: &Images,
        allow_create: bool,
    ) -> Result<Checked, Stop> {
        let objects = checked_object_count(c)?;
        if !allow_create && !c.created.is_empty() {
            return Err(EngineError::BulkLoadActive.into());
        }
        let descs = self.validate(c, images)?;
        Ok(Checked { descs, objects })
    }

    /// Gives orefs to the created objects of `c` (checked) at the tail, in order, for the
    /// commit whose commit record will be at `lsn`.
    pub fn allocate_created(&mut self, c: &CommitIn, lsn: Lsn) -> Result<Vec<Oref>, Stop> {
        Ok(self.allocate(c.created.len(), c.created.iter().map(Bytes::len), lsn)?)
    }

    /// A commit record (kind 2) of `c`'s created objects only, with its timestamp `ts`, read
    /// set and id, their tagged references patched to `created`: for a path whose commit
    /// record carries the created objects while its versions travel elsewhere. Returns the
    /// record and where each created object's bytes are in it.
    pub fn created_record(
        c: &CommitIn,
        checked: &Checked,
        created: &[Oref],
        ts: (u64, u32),
    ) -> (Vec<u8>, Vec<Range<usize>>) {
        let bytes: usize = c.created.iter().map(Bytes::len).sum();
        let mut rec = RecordBuilder::with_capacity(
            record::encoded_len(c.reads.len(), c.created.len(), bytes) + 8,
            ts,
            &c.reads,
        );
        if let Some(id) = c.id {
            rec = rec.with_id(id);
        }
        let mut offs = Vec::new();
        let mut ranges = Vec::with_capacity(c.created.len());
        for (i, data) in c.created.iter().enumerate() {
            let range = rec.push(created[i], true, data);
            let desc = &checked.descs.created[i];
            patch_created(rec.bytes_mut(range.clone()), desc, true, created, &mut offs);
            ranges.push(range);
        }
        (rec.finish(), ranges)
    }

    /// Records a commit a path built as prepared, its commit record at `lsn`: `c.preceding`
    /// are appended first, at the LSNs from [`Store::next_lsn`] on, so `lsn` must be
    /// `next_lsn + c.preceding.len()`. The path then appends the records
    /// (`CommitPath::append`).
    pub fn push_prepared(&mut self, lsn: Lsn, c: PathCommit) -> &Prepared {
        let first = self.next_lsn;
        assert_eq!(
            lsn.0,
            first.0 + c.preceding.len() as u64,
            "a path's commit record follows its preceding records"
        );
        assert_eq!(c.objects.len(), c.data.len(), "one slice of bytes per object");
        let mut log_bytes = crate::limits::log_record_len(c.record.len());
        let mut bytes = c.record.len();
        let mut records = Vec::with_capacity(c.preceding.len());
        for (k, r) in c.preceding.into_iter().enumerate() {
            log_bytes += crate::limits::log_record_len(r.len());
            bytes += r.len();
            records.push((Lsn(first.0 + k as u64), r));
        }
        let objects: Vec<ObjectAt> =
            c.objects.iter().map(|(o, created)| ObjectAt::new(*o, *created, 0..0)).collect();
        self.next_lsn = lsn.next();
        self.unsynced_bytes += log_bytes;
        self.pending_mob_cost += commit_cost(objects.len(), bytes);
        self.pending.push_back(Prepared {
            lsn,
            record: c.record,
            objects,
            created: c.created,
            log_bytes,
            held: false,
            preceding: Some(Preceding { records, data: c.data, bytes }),
            id: c.id,
        });
        self.pending.back().expect("just pushed")
    }

    /// Replays one durable log record of the store's own kinds (recovery), for a path that
    /// unwraps such a record from one of its own.
    pub fn replay_record(&mut self, lsn: Lsn, rec: Bytes) -> Result<ReplayedRecord, EngineError> {
        self.replay(lsn, rec).map(ReplayedRecord)
    }

    /// Recovery met a record at `lsn` that it replays nothing from (a path's own).
    pub fn replayed_nothing(&mut self, lsn: Lsn) {
        self.next_lsn = self.next_lsn.max(lsn.next());
        self.durable_lsn = self.durable_lsn.max(lsn);
    }

    /// Recovery: a version of `oref` committed at `lsn`, into the MOB (a path's replay of a
    /// commit whose versions its own records hold); `held` is the memory `bytes` keeps alive.
    pub fn replay_version(&mut self, oref: Oref, lsn: Lsn, bytes: Bytes, held: usize) {
        self.mob.insert(oref, lsn, false, bytes, held);
    }

    /// Forgets the offset-table size of `page` (a path restored a copy of it that may have
    /// more objects than was known): it is recomputed from its image and the MOB when needed.
    pub fn forget_slots(&mut self, page: PageId) {
        if let Some(n) = self.slots.get_mut(page.index()) {
            *n = SLOTS_UNKNOWN;
        }
    }

    /// Asserts the store's relations: LSNs (durable before next, the checkpoint not past the
    /// next, prepared commits and plain records in LSN order between them), the budgets equal
    /// to their sums (unsynced log bytes, the MOB cost of prepared commits), the MOB's and the
    /// page cache's own invariants, and the tail page's room within a page.
    pub(crate) fn check_invariants(&self) {
        assert!(
            self.durable_lsn < self.next_lsn,
            "durable {:?} before next {:?}",
            self.durable_lsn,
            self.next_lsn
        );
        assert!(self.superblock.checkpoint <= self.next_lsn, "checkpoint not past the log");
        let mut last = self.durable_lsn;
        for p in &self.pending {
            assert!(p.lsn > last, "prepared commits in LSN order, above the durable LSN");
            assert!(p.first_lsn() <= p.lsn);
            last = p.lsn;
        }
        assert!(last < self.next_lsn, "every prepared commit was appended");
        let mut last = self.durable_lsn;
        for (lsn, _) in &self.plain {
            assert!(*lsn > last, "plain records in LSN order, above the durable LSN");
            last = *lsn;
        }
        assert!(last < self.next_lsn);
        let unsynced: usize = self.pending.iter().map(|p| p.log_bytes).sum::<usize>()
            + self.plain.iter().map(|(_, b)| b).sum::<usize>();
        assert_eq!(unsynced, self.unsynced_bytes, "unsynced log bytes are their sum");
        let cost: usize =
            self.pending.iter().map(|p| commit_cost(p.objects.len(), p.mob_bytes())).sum();
        assert_eq!(cost, self.pending_mob_cost, "the MOB cost of prepared commits is their sum");
        assert!(self.tail.free <= self.page_size, "the tail page's room is within a page");
        assert!(self.opened.iter().zip(self.opened.iter().skip(1)).all(|(a, b)| a.0 <= b.0));
        self.mob.check_sums();
        self.cache.check_invariants();
    }

    /// Moves every durable prepared commit into the MOB, in LSN order, and hands each to `done`.
    pub(crate) fn publish(&mut self, durable: Lsn, mut done: impl FnMut(Prepared)) {
        self.durable_lsn = self.durable_lsn.max(durable);
        while self.plain.front().is_some_and(|(l, _)| *l <= self.durable_lsn) {
            let (_, log_bytes) = self.plain.pop_front().expect("checked");
            self.unsynced_bytes -= log_bytes;
        }
        while self.pending.front().is_some_and(|p| p.lsn <= self.durable_lsn) {
            let p = self.pending.pop_front().expect("checked");
            let len = p.mob_bytes();
            // A two-phase part publishes its created objects at once (their slots are
            // allocated for good; unreachable until the commit, garbage if it aborts) and
            // holds its versions until the decision.
            let objects = p.objects.iter().enumerate().filter(|(_, o)| o.created || !p.held);
            self.mob.insert_all(p.lsn, len, objects.map(|(i, o)| (o.oref, o.created, p.data(i))));
            self.unsynced_bytes -= p.log_bytes;
            self.pending_mob_cost -= commit_cost(p.objects.len(), len);
            done(p);
        }
    }

    /// Forgets every prepared commit (the log failed: nobody knows whether they are durable;
    /// recovery decides). Hands each to `failed`.
    pub(crate) fn abandon_pending(&mut self, mut failed: impl FnMut(Prepared)) {
        for (_, log_bytes) in self.plain.drain(..) {
            self.unsynced_bytes -= log_bytes;
        }
        while let Some(p) = self.pending.pop_front() {
            self.unsynced_bytes -= p.log_bytes;
            self.pending_mob_cost -= commit_cost(p.objects.len(), p.mob_bytes());
            failed(p);
        }
    }

    /// Checks a commit against the store; returns the class of every object, or the pages
    /// whose images are needed to tell.
    fn validate(&mut self, c: &CommitIn, images: &Images) -> Result<Descs, Stop> {
        check_names(c)?;
        let mut need: Vec<PageId> = Vec::new();
        let created = self.validate_created(c, images, &mut need)?;
        let versions = self.validate_versions(c, images, &mut need)?;
        if need.is_empty() { Ok(Descs { created, versions }) } else { Err(Stop::Need(need)) }
    }

    /// [`Store::validate`] of the created objects: the class of each (created classes first,
    /// since other created objects may be their instances). Pages needed go in `need`.
    fn validate_created(
        &mut self,
        c: &CommitIn,
        images: &Images,
        need: &mut Vec<PageId>,
    ) -> Result<Vec<Arc<ClassDesc>>, Stop> {
        let n_created = c.created.len();
        // Classes created by this commit first: other created objects may be their instances.
        let mut created_class: Vec<Option<Arc<ClassDesc>>> = vec![None; n_created];
        for (i, obj) in c.created.iter().enumerate() {
            if obj.len() >= 4 && u32_at(obj, 0) == builtin::META.raw() {
                let d = ClassDesc::from_class_object(obj).map_err(|_| InvalidCommit::BadShape {
                    what: what_created(i),
                    why: "malformed class object",
                })?;
                created_class[i] = Some(Arc::new(d));
            }
        }
        let mut created = Vec::with_capacity(n_created);
        for (i, obj) in c.created.iter().enumerate() {
            page::check_object_bytes(obj, self.page_size)
                .map_err(|source| InvalidCommit::ObjectTooLarge { index: i, cause: source })?;
            let desc = match RawRef::decode(u32_at(obj, 0)) {
                RawRef::Tagged(t) => created_class
                    .get(t as usize)
                    .and_then(Clone::clone)
                    .ok_or_else(|| InvalidCommit::BadReference {
                        what: what_created(i),
                        why: format!("class is created object #{t}, which is not a class"),
                    })?,
                RawRef::Oref(class) => match self.class_desc(class, images)? {
                    Lookup::Found(d) => d,
                    Lookup::Absent => {
                        return Err(InvalidCommit::NotAClass { oref: Oref::NULL, class }.into());
                    }
                    Lookup::Missing(p) => {
                        note(p, need);
                        continue;
                    }
                },
            };
            self.check_object(&desc, obj, n_created, images, need, Refs::Check, || {
                what_created(i)
            })?;
            created.push(desc);
        }
        Ok(created)
    }

    /// [`Store::validate`] of the new versions: each names an existing object once, keeps its
    /// class and size, and matches its class. Their classes are returned only when the commit
    /// creates objects (references to those are checked against them). Pages needed go in
    /// `need`.
    fn validate_versions(
        &mut self,
        c: &CommitIn,
        images: &Images,
        need: &mut Vec<PageId>,
    ) -> Result<Vec<Arc<ClassDesc>>, Stop> {
        let n_created = c.created.len();
        let mut versions = Vec::new();
        // Duplicates are found with a map per page, not a hash entry per object.
        let mut seen = super::orefset::OrefSet::new();
        // The last page image and class looked up: a commit's objects come page by page, and
        // mostly of a few classes.
        let mut last_image: Option<(PageId, Bytes)> = None;
        let mut last_class: Option<(Oref, Arc<ClassDesc>)> = None;
        for (oref, obj) in &c.versions {
            let oref = *oref;
            // `check_names` refused every oref that names no object, which the set could not
            // hold (it answered `false` for one, as for a member: a version on page 0 was
            // refused as written twice).
            if !seen.insert(oref) {
                return Err(InvalidCommit::Duplicate(oref).into());
            }
            if builtin::is_builtin(oref) && oref != builtin::ROOT {
                return Err(InvalidCommit::ClassIsImmutable(oref).into());
            }
            match self.exists(oref, images)? {
                Lookup::Found(()) => {}
                Lookup::Absent => return Err(InvalidCommit::NoSuchObject(oref).into()),
                Lookup::Missing(p) => {
                    note(p, need);
                    continue;
                }
            }
            let shape = |old: &[u8]| (u32_at(old, 0), old.len());
            let (class_word, size) = match self.with_object(oref, images, &mut last_image, shape)? {
                Lookup::Found(x) => x,
                Lookup::Absent => return Err(InvalidCommit::NoSuchObject(oref).into()),
                Lookup::Missing(p) => {
                    note(p, need);
                    continue;
                }
            };
            if class_word == builtin::META.raw() {
                return Err(InvalidCommit::ClassIsImmutable(oref).into());
            }
            if obj.len() < 4 || u32_at(obj, 0) != class_word {
                return Err(InvalidCommit::Reshape { oref, what: "class" }.into());
            }
            if obj.len() != size {
                return Err(InvalidCommit::Reshape { oref, what: "size" }.into());
            }
            let class = Oref::from_raw(class_word).expect("stored class words are orefs");
            let cached = last_class.as_ref().filter(|(c, _)| *c == class).map(|(_, d)| d.clone());
            let desc = match cached
                .map_or_else(|| self.class_desc(class, images), |d| Ok(Lookup::Found(d)))?
            {
                Lookup::Found(d) => {
                    last_class = Some((class, d.clone()));
                    d
                }
                Lookup::Absent => {
                    return Err(InvalidCommit::NotAClass { oref, class }.into());
                }
                Lookup::Missing(p) => {
                    note(p, need);
                    continue;
                }
            };
            // A reference the version keeps from the object's committed bytes names an object
            // that existed when those were committed (validated then, or loaded), and objects
            // are never deleted: only a version that changes a reference needs its references
            // checked (OO7's T2b changes none of its 99,000 objects' 500,000).
            desc.check_shape(obj)
                .map_err(|why| InvalidCommit::BadShape { what: what_version(oref), why })?;
            let kept = |old: &[u8]| refs_kept(&desc, old, obj);
            let refs = match self.with_object(oref, images, &mut last_image, kept)? {
                Lookup::Found(true) => Refs::Kept,
                _ => Refs::Check,
            };
            self.check_object(&desc, obj, n_created, images, need, refs, || what_version(oref))?;
            if n_created > 0 {
                versions.push(desc);
            }
        }
        Ok(versions)
    }

    /// Checks an object's shape against its class and (unless `refs` says they are the
    /// committed ones) that every reference names an existing object or one of the
    /// `n_created` objects of the commit. References into pages whose images are not at hand
    /// are noted in `need` (and pass for now).
    #[allow(clippy::too_many_arguments)]
    fn check_object(
        &mut self,
        desc: &ClassDesc,
        obj: &[u8],
        n_created: usize,
        images: &Images,
        need: &mut Vec<PageId>,
        refs: Refs,
        what: impl Fn() -> String,
    ) -> Result<(), Stop> {
        desc.check_shape(obj).map_err(|why| InvalidCommit::BadShape { what: what(), why })?;
        if u32_at(obj, 0) == builtin::LARGE.raw() {
            // A large object's root claims a length and a shape; its fields must agree.
            thor_core::large::check_root(obj, self.page_size).map_err(|e| {
                InvalidCommit::BadShape {
                    what: what(),
                    why: match e {
                        FormatError::BadLarge(why) => why,
                        _ => "malformed large object root",
                    },
                }
            })?;
        }
        if refs == Refs::Kept {
            return Ok(());
        }
        check_refs(desc, obj, |r| -> Result<(), Stop> {
            match r {
                RawRef::Tagged(t) if (t as usize) < n_created => Ok(()),
                RawRef::Tagged(t) => Err(InvalidCommit::BadReference {
                    what: what(),
                    why: format!("created object #{t} does not exist"),
                }
                .into()),
                RawRef::Oref(o) if o.is_null() => Ok(()),
                RawRef::Oref(o) => match self.exists(o, images)? {
                    Lookup::Found(()) => Ok(()),
                    Lookup::Missing(p) => {
                        if !need.contains(&p) {
                            need.push(p);
                        }
                        Ok(())
                    }
                    Lookup::Absent => Err(InvalidCommit::BadReference {
                        what: what(),
                        why: format!("{o:?} does not exist"),
                    }
                    .into()),
                },
            }
        })
    }

    /// Gives orefs to `n` created objects of the given sizes, in order, at the tail. `lsn` is
    /// the commit's LSN (for the record of opened pages).
    fn allocate(
        &mut self,
        n: usize,
        sizes: impl Iterator<Item = usize>,
        lsn: Lsn,
    ) -> Result<Vec<Oref>, EngineError> {
        let mut out = Vec::with_capacity(n);
        let max_free = self.page_size - PAGE_HEADER_BYTES;
        for size in sizes {
            let need = size + OFFSET_ENTRY_BYTES;
            if need > self.tail.free || self.tail.slots == thor_core::ids::OIDS_PER_PAGE {
                let next = self.tail.page.next().ok_or(EngineError::Full)?;
                self.fresh.insert(next);
                self.opened.push_back((lsn, next));
                self.tail = Tail { page: next, free: max_free, slots: 0 };
            }
            let oid = Oid::new(self.tail.slots as u16).expect("checked against OIDS_PER_PAGE");
            out.push(Oref::new(self.tail.page, oid));
            self.tail.slots += 1;
            self.tail.free -= need;
            let (page, slots) = (self.tail.page, self.tail.slots);
            self.set_slots(page, slots);
        }
        Ok(out)
    }

    /// Notes the pages a bulk load wrote: their slot counts and the new tail.
    pub(crate) fn bulk_loaded(&mut self, first: PageId, slots: &[u16], tail: Tail) {
        for (i, n) in slots.iter().enumerate() {
            let p = PageId::new(first.get() + i as u32).expect("loaded pages are in range");
            self.set_slots(p, *n as usize);
        }
        self.tail = tail;
        self.superblock.alloc_page = Some(tail.page);
        self.superblock.generation += 1;
    }

    /// The checkpoint the current state allows: every record below it is installed.
    pub(crate) fn checkpoint_lsn(&self) -> Lsn {
        // A record not yet durable (a two-phase decision or end too) stays above the
        // checkpoint: the superblock never names a point the log may not reach after a crash.
        [
            self.mob.oldest_lsn(),
            self.pending.front().map(Prepared::first_lsn),
            self.plain.front().map(|p| p.0),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_lsn, Lsn::min)
    }
}

/// Whether an object's references need checking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refs {
    /// Each names an object or a created one: check them.
    Check,
    /// They are the object's committed references, word for word (see [`refs_kept`]).
    Kept,
}

/// Whether every reference word of `new` (a version of class `desc` that passed
/// `check_shape`) equals the word at the same offset of `old`, the object's committed bytes of
/// the same class and size.
fn refs_kept(desc: &ClassDesc, old: &[u8], new: &[u8]) -> bool {
    if old.len() != new.len() {
        return false;
    }
    let mut kept = true;
    desc.for_each_ref_offset(new, |off| kept &= old[off..off + 4] == new[off..off + 4]);
    kept
}

/// The class of every object of a validated commit, in request order: what patching its
/// tagged references needs. A commit that creates nothing has none to patch (validation
/// refused every tagged reference), so its versions' classes are not kept: 99,000 of them
/// for OO7's T2b, each a reference count taken and dropped and 8 bytes of a fresh vector.
#[derive(Debug)]
struct Descs {
    created: Vec<Arc<ClassDesc>>,
    /// Empty when `created` is.
    versions: Vec<Arc<ClassDesc>>,
}

/// Adds `p` to the pages a validation needs, once.
fn note(p: PageId, need: &mut Vec<PageId>) {
    if !need.contains(&p) {
        need.push(p);
    }
}

/// Refuses a commit whose read set or versions hold an oref that names no object: null, or on
/// page 0, which is never allocated ([`Oref::check_object`]). It is the definition the wire
/// decoder admits requests with and the log-record decoder of recovery and `thor check` reads
/// records with, so that the core never acknowledges a commit whose record recovery could not
/// read (a read-set oref on page 0 once was: the wire let it in, the record decoder refused
/// it, and the database did not open after a crash). Created objects' orefs are the server's
/// own; their reference words are checked against the store (`Store::check_object`).
pub(crate) fn check_names(c: &CommitIn) -> Result<(), InvalidCommit> {
    let named = |what, o: Oref| {
        o.check_object().map(drop).map_err(|why| InvalidCommit::NamesNoObject {
            what,
            word: o.raw(),
            why,
        })
    };
    c.reads.iter().try_for_each(|&o| named("read set", o))?;
    c.versions.iter().try_for_each(|(o, _)| named("versions", *o))
}

/// The number of objects commit `c` writes and creates, refused above the limit.
fn checked_object_count(c: &CommitIn) -> Result<usize, Stop> {
    let n = c.objects();
    if n > limits::COMMIT_OBJECTS_MAX {
        return Err(InvalidCommit::TooLarge {
            what: "objects",
            got: n,
            max: limits::COMMIT_OBJECTS_MAX,
        }
        .into());
    }
    Ok(n)
}

/// Replaces the tagged references of `bytes` (an object of class `desc`, and its class word
/// too if `header`: a class the commit created) with the orefs the server allocated to the
/// commit's `created` objects. `offs` is scratch, reused across a commit's objects.
fn patch_created(
    bytes: &mut [u8],
    desc: &ClassDesc,
    header: bool,
    created: &[Oref],
    offs: &mut Vec<usize>,
) {
    offs.clear();
    if header {
        offs.push(0);
    }
    desc.for_each_ref_offset(bytes, |o| offs.push(o));
    for &off in offs.iter() {
        if let RawRef::Tagged(i) = RawRef::decode(u32_at(bytes, off)) {
            put_u32(bytes, off, created[i as usize].raw());
        }
    }
}

fn what_version(oref: Oref) -> String {
    format!("version of {oref:?}")
}

fn what_created(i: usize) -> String {
    format!("created #{i}")
}

/// An empty page `page` of `page_size` bytes.
pub fn empty_page(page: PageId, page_size: usize) -> Vec<u8> {
    let mut b = vec![0u8; page_size];
    PageMut::init(&mut b, page).expect("valid page size");
    b
}

/// Applies the MOB's versions of `page` to `buf` (a valid page); returns how many.
pub(crate) fn apply_mob(mob: &Mob, page: PageId, buf: &mut [u8]) -> Result<usize, FormatError> {
    if !mob.has_page(page) {
        return Ok(0);
    }
    let mut vs: Vec<(Oid, &[u8])> = Vec::new();
    let mut newest = Lsn::ZERO;
    mob.for_page(page, |oid, e| {
        vs.push((oid, &e.data));
        newest = newest.max(e.lsn);
    });
    let n = vs.len();
    let mut p = PageMut::open(buf)?;
    let mut scratch = Vec::new();
    p.apply(&mut vs, &mut scratch)?;
    let version = p.view().version().max(newest);
    p.set_version(version);
    Ok(n)
}
