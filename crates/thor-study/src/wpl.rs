//! Whole-page logging (WPL) at the server (issue 14, `papers/quickstore-recovery-sigmod95.txt`
//! section 3.4): the `wpl` mode's half of [`crate::StudyPath`], behind the core's commit-path
//! seam (`thor_server_core::CommitPath`): the WPL table, its checkpoints, the pages leaving it
//! when install rounds write them home, its records' preparation and replay. Each step below
//! is one hook of the seam:
//!
//! ```text
//!  PageCommit (mode wpl, written pages whole) ──► crate::pagecommit: versions from the pages
//!      ──► commit queue ──► needs_room: table room (else wait, like a full MOB)
//!      ──► gate: the page rule, a checkpoint if due ──► CLOCC
//!      ──► prepare: `prepare`: page rule, images (kind 6), commit record (kind 7)
//!      ──► append: Append × (pages + 1), table.log_page × pages, table.commit_appended
//!  Durable ──► MOB gets the versions (slices of the images) ──► durable: table.commit_durable
//!      ──► CommitOk
//!  install round writes a page home (version >= the copy's LSN) ──► installed: table.installed
//!      ──► installed_round: checkpoint record (kind 8) of the table
//!      ──► durable: table.checkpoint_durable
//!  superblock checkpoint job: the log truncated below truncation_floor: min(superblock
//!      checkpoint, table.truncation_point())
//!  recovery: replay: WPL records (`WplReplay::replay`), once `wpl_log::restore` gave the
//!      path the rebuilt table and the copies (`StudyPath::restored`)
//! ```
//!
//! # Why the MOB holds a WPL commit's versions
//!
//! thor serves fetches from installed pages plus the MOB's versions, and every other commit
//! path (obj, the ESM and REDO modes, two-phase commit, direct commits) goes through the MOB.
//! A WPL commit's versions are slices of its page images, so putting them in the MOB costs
//! no copy and keeps one answer to "what is committed": fetches, validation, invalidations,
//! demotion and install rounds need nothing new. The page images are what the *log* holds
//! for the commit (there is no kind-2 record of it), and the table names the committed copy
//! of each page that is not home yet. The paper's background reader re-reads a copy from the
//! log to install it; here the install round finds the copy's objects in the MOB (the paper's
//! own optimisation for pages still cached at commit time) and reads the home page only if it
//! is not cached. When the round's page is durable, the table drops the copy.
//!
//! # Crash safety
//!
//! A commit's images and its commit record are appended in one step; it is acknowledged when
//! the commit record is durable, so restart (`crate::wpl_log::restart`: one backward
//! pass to the newest checkpoint with a committed-transactions list) finds every image of it.
//! The superblock checkpoint may pass a copy's image (the MOB keeps the commit's versions
//! under the commit record's LSN), but the log is never truncated below the oldest copy the
//! newest durable WPL checkpoint lists, nor below that checkpoint (the path's truncation
//! floor). At recovery (thor-server's `io::recover`, calling `crate::wpl_log::restore`)
//! each committed copy the rebuilt table names is kept for the replay of its commit record,
//! which puts the objects the commit wrote back into the MOB under the commit's LSN, as
//! normal operation did, unless the page's home is at least as new (an install round wrote
//! it home before the crash). Only the written objects: the image's others may be older than
//! versions committed later under earlier LSNs (a two-phase part's, published at its
//! decision under its prepare record's LSN); see `WplReplay::restore`.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::le::u32_at;
use thor_core::{Lsn, Oid, Oref, PageId, PageMut, PageView};
use thor_recovery::limits::{WPL_COMMIT_BYTES, WPL_IMAGE_HEADER_BYTES};
use thor_recovery::wpl::{WplEntry, WplRecord};
use thor_recovery::{TxnId, WplConfig, WplTable};
use thor_server_core::record::{self, RecordError};
use thor_server_core::{
    CommitIn, EngineError, Images, InvalidCommit, PathCommit, PathLog, Prepared, Refusal,
    ReplayedRecord, Stop, Store, WplCounters,
};

/// The default bounds of a server's WPL table.
pub const WPL_CONFIG_DEFAULT: WplConfig = WplConfig {
    // 16,384 pages waiting in the log to go home: 128 MiB of 8 KiB pages, above the MOB's
    // default budget, so that the MOB, not the table, is what makes commits wait.
    entries_max: 16_384,
    // Commits prepared and not yet durable: the log buffer bounds them well below this.
    txns_max: 4_096,
    // Restart reads at most this many commits back past the checkpoint.
    commits_per_checkpoint: 1_024,
};

// WPL's records share the server's log: their kinds are among those the core leaves to a
// commit path.
const _: () = {
    let mut k = 0u8;
    while k < record::FIRST_PATH_KIND {
        assert!(!thor_recovery::wpl::is_wpl_kind(k));
        k += 1;
    }
};

/// Whether `rec` is one of WPL's records (by its kind byte).
pub(crate) fn is_wpl(rec: &[u8]) -> bool {
    rec.first().is_some_and(|k| thor_recovery::wpl::is_wpl_kind(*k))
}

/// The body of a WPL commit record as the server writes it (`thor_recovery::wpl`'s commit
/// record with flags bit 0; see [`prepare`]):
///
/// ```text
/// | W u32 | W written orefs u32 | a commit record (kind 2): timestamp, read set, the created objects |
/// ```
///
/// Returns the written orefs (each checked: a stored, non-null oref) and the commit record.
pub fn split_body(body: &[u8]) -> Result<(Vec<Oref>, &[u8]), RecordError> {
    if body.len() < 4 {
        return Err(RecordError("a WPL commit body without its count of written objects"));
    }
    let n = u32_at(body, 0) as usize;
    if n > thor_server_core::limits::COMMIT_OBJECTS_MAX || body.len() < 4 + 4 * n {
        return Err(RecordError("a WPL commit body with more written objects than it holds"));
    }
    let mut writes = Vec::with_capacity(n);
    for i in 0..n {
        match Oref::object(u32_at(body, 4 + 4 * i)) {
            Ok(o) => writes.push(o),
            Err(_) => return Err(RecordError("a WPL commit body names an object that is not one")),
        }
    }
    Ok((writes, &body[4 + 4 * n..]))
}

/// The log bytes of a WPL commit shipping `pages`: its page images and its commit record
/// (total and largest single record).
pub(crate) fn log_bytes(c: &CommitIn, pages: &[(PageId, Bytes)]) -> (usize, usize) {
    let images = pages.iter().map(|(_, b)| WPL_IMAGE_HEADER_BYTES + b.len());
    let largest = images.clone().max().unwrap_or(0).max(commit_bytes(c));
    (images.sum::<usize>() + commit_bytes(c), largest)
}

/// A WPL commit record's bytes: header, the written orefs, and a commit record of the
/// created objects (see [`prepare`]).
fn commit_bytes(c: &CommitIn) -> usize {
    let created: usize = c.created.iter().map(Bytes::len).sum();
    let id = if c.id.is_some() { record::COMMIT_ID_BYTES } else { 0 };
    WPL_COMMIT_BYTES
        + 4
        + 4 * c.versions.len()
        + record::encoded_len(c.reads.len(), c.created.len(), created)
        + id
}

/// A committed copy recovery keeps for replay: its page, its commit's LSN and its image.
pub(crate) type Copy = (PageId, Lsn, Bytes);

/// Whole-page logging's log state: the WPL table, its pending checkpoint and counters.
#[derive(Debug)]
pub(crate) struct WplLog {
    /// The table of logged pages.
    table: WplTable,
    /// The newest checkpoint record appended and not yet durable.
    pending_checkpoint: Option<Lsn>,
    /// Sorts checkpoint entries (kept to reuse its memory).
    scratch: Vec<WplEntry>,
    /// Counters.
    pub counters: WplCounters,
}

impl WplLog {
    /// The log state around `table`.
    pub fn new(table: WplTable) -> WplLog {
        WplLog {
            table,
            pending_checkpoint: None,
            scratch: Vec::new(),
            counters: WplCounters::default(),
        }
    }

    /// Copies in the table now.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Appends a checkpoint record of the table (not while the log is closed to the path:
    /// recovery's driver appends nothing, nor does a failed server).
    fn checkpoint(&mut self, log: &mut PathLog<'_>) {
        if !log.may_append() {
            return;
        }
        let lsn = log.next_lsn();
        let mut out = Vec::new();
        if let Err(e) = self.table.checkpoint_record(lsn, &mut self.scratch, &mut out) {
            return log.fail(format!("the WPL checkpoint: {e}"));
        }
        self.pending_checkpoint = Some(lsn);
        self.counters.checkpoints += 1;
        let at = log.append(out);
        assert_eq!(at, lsn, "the checkpoint record went where it says it is");
    }

    /// A WPL commit of `pages` waits while the table has no room for its pages (an install
    /// round frees it) or too many commits are in flight (durability frees them).
    pub fn needs_room(&self, pages: &[(PageId, Bytes)]) -> bool {
        let cfg = self.table.config();
        pages.len() <= cfg.entries_max
            && (self.table.len() + pages.len() > cfg.entries_max
                || self.table.txns() >= cfg.txns_max)
    }

    /// Refuses what the table can never take, and appends a checkpoint first when one is due
    /// (or none was ever written: restart needs one once the log's start is truncated).
    pub fn gate(
        &mut self,
        pages: &[(PageId, Bytes)],
        log: &mut PathLog<'_>,
    ) -> Result<(), EngineError> {
        let cfg = self.table.config();
        if pages.len() > cfg.entries_max {
            let max = cfg.entries_max;
            return Err(InvalidCommit::TooLarge { what: "pages", got: pages.len(), max }.into());
        }
        // One uncommitted copy per page: the page rule makes a second one impossible for a
        // client that reports its copy's version truly; one that does not is refused here.
        if let Some((p, _)) = pages.iter().find(|(p, _)| self.table.uncommitted(*p).is_some()) {
            self.counters.page_rule_refusals += 1;
            return Err(EngineError::Conflict(Refusal::PageWritten(*p)));
        }
        let first = self.table.truncation_point().is_none() && !self.table.checkpoint_pending();
        if self.table.checkpoint_due() || first {
            self.checkpoint(log);
        }
        Ok(())
    }

    /// The page images were appended, then the commit record: the table hears of every
    /// record (`pages` in image order).
    pub fn appended(&mut self, p: &Prepared, pages: &[PageId]) -> Result<(), String> {
        let txn = TxnId(p.lsn().0);
        let mut r = Ok(());
        for ((at, _), page) in p.preceding().iter().zip(pages) {
            r = r.and_then(|()| self.table.log_page(txn, *page, *at));
        }
        r = r.and_then(|()| self.table.commit_appended(txn, p.lsn()));
        self.counters.images += p.preceding().len() as u64;
        // The gate checked room, busy pages and the checkpoint interval: a refusal here is a
        // bug, and the table no longer matches the log.
        r.map_err(|e| format!("the WPL table refused a prepared commit: {e}"))
    }

    /// The log is durable up to `durable`: its WPL commits and checkpoint are.
    pub fn durable(&mut self, durable: Lsn, published: &[Prepared]) -> Result<(), String> {
        let mut r = Ok(());
        for p in published.iter().filter(|p| p.is_path_built()) {
            r = r.and_then(|()| self.table.commit_durable(TxnId(p.lsn().0)).map(drop));
        }
        if let Some(at) = self.pending_checkpoint
            && at <= durable
        {
            self.pending_checkpoint = None;
            self.table.checkpoint_durable(at);
        }
        r.map_err(|e| format!("the WPL table lost a commit: {e}"))
    }

    /// A committed copy the written page covers leaves the table.
    pub fn installed(&mut self, page: PageId, version: Lsn) {
        if let Some(c) = self.table.committed(page)
            && c.lsn <= version
            && self.table.installed(page, c.lsn)
        {
            self.counters.installed += 1;
        }
    }

    /// Below the superblock's checkpoint and below what WPL's restart reads (nothing before a
    /// WPL checkpoint is durable).
    pub fn truncation_floor(&self, checkpoint: Lsn) -> Option<Lsn> {
        self.table.truncation_point().map(|t| t.min(checkpoint))
    }

    /// The copies this round took home leave the log's needs once a checkpoint record without
    /// them is durable.
    pub fn installed_round(&mut self, log: &mut PathLog<'_>) {
        self.checkpoint(log);
    }

    /// Recovery rebuilt `table`; `copies` are its committed copies (page, the copy's LSN, its
    /// page image, and the version of the page's home, 0 if it has none on disk). Returns
    /// the log state and the copies replay must see (`WplReplay::restore`).
    ///
    /// - A copy whose home is at least as new went home before the crash: it leaves the
    ///   table (a home at version `h` holds every commit to the page up to `h`).
    /// - Any other copy is kept for replay, under its commit's LSN: forward replay brings back
    ///   each commit from the checkpoint on, but a commit whose commit record is at or above
    ///   the checkpoint and its images below it (its versions, kept in the MOB under the
    ///   commit record's LSN, held the checkpoint there) is seen only through the newest copy
    ///   of each of its pages, which holds its objects.
    pub fn restored(
        mut table: WplTable,
        copies: Vec<(PageId, Lsn, Bytes, Lsn)>,
    ) -> Result<(WplLog, Vec<Copy>), EngineError> {
        let mut kept = Vec::with_capacity(copies.len());
        for (page, lsn, image, home) in copies {
            // The copy's objects were committed at its commit record's LSN, which its image
            // carries as its page version (`prepare`), above the image record's own `lsn`:
            // the MOB takes them under that LSN, as the commit published them, so that the
            // page is served after recovery with the version it had before (under `lsn` it
            // went back to it: found by `thor_sim::acked`).
            let committed = PageView::parse_stored(&image, page)
                .map_err(|source| EngineError::CorruptPage { page, cause: source })?
                .version()
                .max(lsn);
            if home >= committed {
                table.installed(page, lsn);
                continue;
            }
            kept.push((page, committed, image));
        }
        let mut log = WplLog::new(table);
        log.counters.restored = kept.len() as u64;
        Ok((log, kept))
    }
}

/// The committed images of the pages a WPL commit ships (each no newer than its shipped
/// copy: a page written since the client read it refuses the commit), after checking that
/// every written object's page is shipped; or the pages to read first.
fn bases(
    store: &mut Store,
    c: &CommitIn,
    shipped: &[(PageId, Bytes)],
    images: &Images,
) -> Result<Vec<Vec<u8>>, Stop> {
    let mut bases = Vec::with_capacity(shipped.len());
    let mut need = Vec::new();
    for (page, bytes) in shipped {
        match store.committed_page(*page, images)? {
            Some(base) => {
                let committed = PageView::assume_parsed(&base).version();
                let copy = PageView::assume_parsed(bytes).version();
                if copy < committed {
                    return Err(EngineError::Conflict(Refusal::PageWritten(*page)).into());
                }
                bases.push(base);
            }
            None => need.push(*page),
        }
    }
    if !need.is_empty() {
        return Err(Stop::Need(need));
    }
    // Every written object's page is shipped: checked before anything is allocated, so
    // that a refusal leaves no allocated oref without a record (a hole in its page).
    if let Some((o, _)) =
        c.versions.iter().find(|(o, _)| !shipped.iter().any(|(p, _)| o.page() == Some(*p)))
    {
        let why = format!("the page of written object {o} was not shipped");
        return Err(InvalidCommit::BadPageRecord(why).into());
    }
    Ok(bases)
}

/// Prepares a whole-page-logging commit (`c.pages` holds the shipped pages, each carrying
/// a written object of `c.versions`): checks it like any commit, then WPL's page rule,
/// then allocates its created objects and builds its records, the LSNs in order:
///
/// ```text
///  one page image per shipped page (kind 6): the page's committed state (installed image,
///      MOB, prepared commits) with this commit's versions laid in, tagged references
///      patched, `version` = the commit record's LSN, sealed; txn = that LSN
///  the commit record (kind 7 with a body): W u32 | W written orefs | a commit record
///      (kind 2: timestamp, read set, the created objects)
/// ```
///
/// Returns the shipped pages in image order (the table hears of them at append).
///
/// *The page rule.* A page goes to the log whole, so the client's copy must be the page's
/// committed state: a shipped page whose `version` is older than the committed state's
/// (some commit, published or only prepared, wrote or created an object on it since the
/// client fetched it) is refused (`Refusal::PageWritten`). It is checked here, at prepare,
/// against everything prepared before, so no commit queued ahead can slip between the check
/// and the log. The image logged is the server's own committed state with the written
/// objects laid in, not the client's bytes, so that even a client's stale neighbour bytes
/// never reach the log.
///
/// *Why the created objects ride in the commit record.* The server allocates them at
/// prepare; recovery replays the commit record forward (before WPL's backward restart) to
/// learn the allocation, as it does for kind 2. The page images hold only the versions.
pub(crate) fn prepare(
    store: &mut Store,
    c: &CommitIn,
    images: &Images,
    allow_create: bool,
    ts: (u64, u32),
) -> Result<Vec<PageId>, Stop> {
    let shipped = c.pages.as_ref().expect("a WPL commit");
    let checked = store.check(c, images, allow_create)?;
    let bases = bases(store, c, shipped, images)?;
    let first = store.next_lsn();
    let lsn = Lsn(first.0 + shipped.len() as u64);
    let txn = TxnId(lsn.0);
    let created = store.allocate_created(c, lsn)?;
    // The commit record: its body is the written orefs, then a kind-2 record of the
    // created objects (and the timestamp and read set, for concurrency control).
    let mut body = Vec::with_capacity(commit_bytes(c));
    body.extend_from_slice(&(c.versions.len() as u32).to_le_bytes());
    for (o, _) in &c.versions {
        body.extend_from_slice(&o.raw().to_le_bytes());
    }
    let (inner, ranges) = Store::created_record(c, &checked, &created, ts);
    let at = WPL_COMMIT_BYTES + body.len();
    body.extend_from_slice(&inner);
    let mut commit = Vec::with_capacity(WPL_COMMIT_BYTES + body.len());
    thor_recovery::wpl::encode_commit_with(txn, &body, &mut commit);
    let record = Bytes::from(commit);
    // The page images, each the committed state with this commit's versions laid in.
    let mut image_records = Vec::with_capacity(shipped.len());
    for ((page, _), mut buf) in shipped.iter().zip(bases) {
        let mut vs: Vec<(Oid, Vec<u8>)> = Vec::new();
        for (i, (o, d)) in c.versions.iter().enumerate() {
            if o.page() == Some(*page) {
                let mut d = d.to_vec();
                checked.patch_version(i, &mut d, &created);
                vs.push((o.oid(), d));
            }
        }
        let mut refs: Vec<(Oid, &[u8])> = vs.iter().map(|(o, d)| (*o, &d[..])).collect();
        let corrupt = |source| EngineError::CorruptPage { page: *page, cause: source };
        let mut p = PageMut::open(&mut buf).map_err(corrupt)?;
        p.apply(&mut refs, &mut Vec::new()).map_err(corrupt)?;
        p.set_version(lsn);
        p.seal();
        let mut out = Vec::with_capacity(WPL_IMAGE_HEADER_BYTES + buf.len());
        thor_recovery::wpl::encode_image(*page, txn, &buf, &mut out);
        image_records.push((*page, Bytes::from(out)));
    }
    let n = checked.objects();
    let mut objects = Vec::with_capacity(n);
    let mut data = Vec::with_capacity(n);
    version_slices(c, &image_records, &mut objects, &mut data)?;
    for (i, r) in ranges.into_iter().enumerate() {
        let r = at + r.start..at + r.end;
        objects.push((created[i], true));
        data.push(record.slice(r));
    }
    let pages = image_records.iter().map(|(p, _)| *p).collect();
    let preceding = image_records.into_iter().map(|(_, b)| b).collect();
    store.push_prepared(lsn, PathCommit { preceding, record, objects, data, created, id: c.id });
    Ok(pages)
}

/// The slice of each written object's new version in its page's image record (a WPL commit's
/// versions live in the images, not in the commit record).
fn version_slices(
    c: &CommitIn,
    image_records: &[(PageId, Bytes)],
    objects: &mut Vec<(Oref, bool)>,
    data: &mut Vec<Bytes>,
) -> Result<(), InvalidCommit> {
    for (o, _) in &c.versions {
        let (_, img) = image_records
            .iter()
            .find(|(p, _)| o.page() == Some(*p))
            .ok_or(InvalidCommit::NoSuchObject(*o))?;
        let view = PageView::assume_parsed(&img[WPL_IMAGE_HEADER_BYTES..]);
        let r = view.object_range(o.oid()).ok_or(InvalidCommit::NoSuchObject(*o))?;
        let r = WPL_IMAGE_HEADER_BYTES + r.start..WPL_IMAGE_HEADER_BYTES + r.end;
        objects.push((*o, false));
        data.push(img.slice(r));
    }
    Ok(())
}

/// Forward replay of WPL's records (recovery): the page images of the commit being read, and
/// the committed copies restart restored.
#[derive(Debug, Default)]
pub(crate) struct WplReplay {
    /// The page images of the WPL commit being read (its transaction number and records),
    /// until its commit record. A commit's images and commit record are appended in one
    /// step, consecutively, so this holds one commit's pages at most.
    images: (u64, Vec<(PageId, Bytes)>),
    /// The committed WPL copies restart restored whose images lie below the checkpoint, by
    /// page: their commit record's LSN and image, until replay meets that record (see
    /// [`WplReplay::restore`]).
    copies: FxHashMap<PageId, (Lsn, Bytes)>,
}

impl WplReplay {
    /// Replay met a record of the store's own: no commit's images run across it.
    pub fn other_record(&mut self) {
        self.images.1.clear();
    }

    /// Replays a WPL record. A page image waits for its commit record (the next records);
    /// the commit record then puts the written objects' bytes from its images into the MOB
    /// under its LSN, as normal operation did, and replays its body (the created objects,
    /// like kind 2; the written orefs go to concurrency control). Checkpoints are for WPL's
    /// backward restart (`crate::wpl_log`). So forward replay rebuilds every commit from the
    /// superblock's checkpoint on, as in `obj` mode; what it cannot see are the images of a
    /// commit whose commit record is at or above the checkpoint and its images below it,
    /// which WPL's restart brings back ([`WplReplay::restore`]).
    pub fn replay(
        &mut self,
        store: &mut Store,
        lsn: Lsn,
        rec: &Bytes,
    ) -> Result<ReplayedRecord, EngineError> {
        let bad = |why: String| EngineError::CorruptRecord { lsn: lsn.0, why };
        store.replayed_nothing(lsn);
        let (txn, body) = match thor_recovery::wpl::decode(rec, lsn, store.page_size()) {
            Ok(WplRecord::CommitWith { txn, body }) => (txn.0, body),
            Ok(WplRecord::PageImage { page, txn, .. }) => {
                if self.images.0 != txn.0 {
                    self.images = (txn.0, Vec::new());
                }
                self.images.1.push((page, rec.slice(WPL_IMAGE_HEADER_BYTES..)));
                return Ok(ReplayedRecord::nothing());
            }
            Ok(_) => return Ok(ReplayedRecord::nothing()),
            Err(e) => return Err(bad(e.to_string())),
        };
        let (writes, inner) = split_body(body).map_err(|e| bad(e.to_string()))?;
        let at = WPL_COMMIT_BYTES + (body.len() - inner.len());
        let inner = rec.slice(at..);
        let images = std::mem::take(&mut self.images);
        let images = if images.0 == txn { images.1 } else { Vec::new() };
        let held: usize = images.iter().map(|(_, b)| b.len()).sum::<usize>() + rec.len();
        for o in &writes {
            // Images below the checkpoint are not replayed: WPL's restart has them, as the
            // committed copies it restored (`restore`).
            let (page, img, held) = match images.iter().find(|(p, _)| o.page() == Some(*p)) {
                Some((page, img)) => (*page, img.clone(), held),
                // The page's restored copy is this commit's or a newer commit's (the table
                // keeps a page's newest copy), whose image holds the page as committed when
                // that commit was prepared: this commit's version of the object, or a newer
                // one, which replay meets again under its own LSN.
                None => match o.page().and_then(|p| self.copies.get(&p)) {
                    Some((l, img)) if *l >= lsn => {
                        (o.page().expect("found"), img.clone(), img.len())
                    }
                    _ => continue,
                },
            };
            let view = PageView::parse_stored(&img, page).map_err(|e| bad(e.to_string()))?;
            let r = view
                .object_range(o.oid())
                .ok_or_else(|| bad(format!("its image of page {page} lacks {o}")))?;
            store.replay_version(*o, lsn, img.slice(r), held);
        }
        for p in writes.iter().filter_map(|o| o.page()) {
            if self.copies.get(&p).is_some_and(|(l, _)| *l == lsn) {
                self.copies.remove(&p);
            }
        }
        let mut replay = store.replay_record(lsn, inner)?;
        if !replay.set_writes(writes) {
            return Err(bad("a WPL commit's body is not a commit record".into()));
        }
        Ok(replay)
    }

    /// Recovery: keeps a committed WPL copy of `page` (a page image whose commit record is at
    /// `lsn`, the image's version) for replay: the WPL commit records from the checkpoint up
    /// to `lsn` whose own images of `page` lie below the checkpoint take from it the objects
    /// they wrote, into the MOB under their own LSNs, as each commit published them before the
    /// crash (the copy holds the page as committed when its commit was prepared, so its bytes
    /// of an object an older commit wrote are that commit's or newer ones, which replay meets
    /// again under their own LSNs). The page's offset-table size must be forgotten (the copy
    /// may have more objects than was known): it is recomputed from its image and the MOB
    /// when needed.
    ///
    /// *Only the written objects.* The image holds the whole page as it was when the commit
    /// was prepared, its other objects included; putting those into the MOB under `lsn` (as
    /// recovery once did) made them newer than a version committed later under an earlier LSN
    /// (a two-phase part prepared before the WPL commit and decided after it publishes its
    /// versions under its prepare record's LSN), and recovery lost that version (found by
    /// `thor_sim::acked`). Every other object of the page is as it was without the copy: home
    /// (what records below the checkpoint wrote is installed) or replayed from its own record.
    ///
    /// The commit record is at or above the superblock's checkpoint whenever the copy is not
    /// home (its versions were in the MOB, which holds the checkpoint down), so replay meets
    /// it; a copy it did not meet is put into the MOB whole by [`WplReplay::replayed_all`].
    ///
    /// The caller forgets the page's layout in the store (`Store::forget_slots`).
    pub fn restore(&mut self, page: PageId, lsn: Lsn, image: Bytes) {
        self.copies.insert(page, (lsn, image));
    }

    /// Recovery replayed every record: a restored copy whose commit record replay did not
    /// meet (see `restore`: not expected) goes into the MOB whole, rather than be lost.
    pub fn replayed_all(&mut self, store: &mut Store) {
        for (page, (lsn, image)) in std::mem::take(&mut self.copies) {
            let view = PageView::assume_parsed(&image);
            for (oid, _) in view.objects() {
                let r = view.object_range(oid).expect("an object the view listed");
                store.replay_version(Oref::new(page, oid), lsn, image.slice(r), image.len());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A WPL commit body takes exactly the orefs the wire and the core's record decoder
        /// take (`Oref::object`): what recovery replays is what the core acknowledged.
        #[test]
        fn a_wpl_body_takes_exactly_the_orefs_the_wire_takes(
            word in prop_oneof![any::<u32>(), 0u32..0x800],
        ) {
            let mut body = 1u32.to_le_bytes().to_vec();
            body.extend_from_slice(&word.to_le_bytes());
            prop_assert_eq!(split_body(&body).is_ok(), Oref::object(word).is_ok());
        }

        /// Whatever the bytes, a body is split or refused, never a panic.
        #[test]
        fn any_bytes_split_or_refused(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok((writes, rest)) = split_body(&body) {
                prop_assert_eq!(4 + 4 * writes.len() + rest.len(), body.len());
            }
        }
    }
}
