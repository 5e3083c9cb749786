//! Whole-page logging's restart over a server's real log (issue 14, the QuickStore paper's
//! WPL): [`thor_recovery::wpl::restart`]'s one backward pass, read from thor-storage's log
//! with its backward reader, and the committed copies the rebuilt table names, read back.
//!
//! ```text
//!   Log::backward_reader ──► WplBackward (skips the server's own records, kinds 1-5)
//!        ──► wpl::restart: newest record back to the newest WPL checkpoint ──► table
//!   table's committed copies (LSNs) ──► one forward read from the oldest ──► their images
//! ```
//!
//! *Why the images are read again:* the table names each committed copy by LSN; the pass
//! learns which copies are committed only as it goes (a commit record is met before its
//! transaction's images), and copies listed by the checkpoint lie below it, where the pass
//! does not read. So the images are read after the pass, in one forward read from the oldest
//! copy named (a reader of the log from an LSN), keeping only the copies named: memory is one
//! page per table entry, which the table's `entries_max` bounds.
//!
//! Every image read back is checked: it must decode as a WPL page image (`wpl::decode`) of the
//! page and transaction the table names, and be a page that parses as stored for that page
//! id. A log that fails any check is an error naming the LSN, never a panic.
//!
//! Recovery (thor-server's `io::recover`) calls [`restore`] when forward replay meets the
//! first WPL record ([`is_wpl_record`]): it runs the restart and hands the core the copies
//! forward replay cannot see (`StudyPath`'s restore). It is tested against generated histories
//! over a crashing [`thor_storage::MemDisk`] (`tests/wpl_restart.rs`), and with the `wpl`
//! commit mode in thor-server's scenario tests and the whole-cluster simulation.
//!
//! [`WplObjects`] reads the objects WPL commits wrote out of a log read forward, for offline
//! tools (`thor check`).

use bytes::Bytes;
use rustc_hash::{FxBuildHasher, FxHashMap};
use thor_core::{Lsn, PageId, PageView};
use thor_recovery::WplTable;
use thor_recovery::wpl::{self, BackwardLog, LogCopy, RestartError, WplConfig, WplRecord};
use thor_server_core::{Core, EngineError};
use thor_storage::{Log, LogBackReader, StorageError};

/// The log read backward, WPL's records only: the server's own records (commit records and
/// two-phase commit's, kinds 1 to 5) share the log and are passed over.
#[derive(Debug)]
pub struct WplBackward {
    reader: LogBackReader,
    /// Records passed over because they are not WPL's.
    pub skipped: u64,
}

impl WplBackward {
    /// A backward reader of `log`'s durable records as of now.
    pub fn new(log: &Log) -> WplBackward {
        WplBackward { reader: log.backward_reader(), skipped: 0 }
    }
}

impl BackwardLog for WplBackward {
    type Error = StorageError;

    fn first_lsn(&self) -> Lsn {
        self.reader.first_lsn()
    }

    fn prev(&mut self, buf: &mut Vec<u8>) -> Result<Option<Lsn>, StorageError> {
        loop {
            match self.reader.prev(buf)? {
                None => return Ok(None),
                Some(lsn) if buf.first().is_some_and(|k| wpl::is_wpl_kind(*k)) => {
                    return Ok(Some(lsn));
                }
                Some(_) => self.skipped += 1,
            }
        }
    }
}

/// Why WPL's restart failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WplRestartError {
    /// The log could not be read, or the pass met records restart cannot trust.
    #[error("WPL restart: {0}")]
    Restart(RestartError<StorageError>),
    /// Reading the committed copies back failed.
    #[error("WPL restart, reading the committed copies back: {0}")]
    Log(StorageError),
    /// A committed copy the table names is not the page image it should be.
    #[error(
        "WPL restart: the record at LSN {lsn} is not the copy of page {page} the table names: {why}"
    )]
    BadCopy {
        /// Where.
        lsn: u64,
        /// The page the table names.
        page: u32,
        /// What is wrong.
        why: String,
    },
}

/// What WPL's restart rebuilt from a server's log.
#[derive(Debug)]
pub struct WplRestarted {
    /// The table: every page's newest committed copy not known to be home.
    pub table: WplTable,
    /// The bytes of each copy the table names, by page, with the copy.
    pub copies: FxHashMap<PageId, (LogCopy, Bytes)>,
    /// The checkpoint the pass stopped at, if the log has one.
    pub checkpoint: Option<Lsn>,
    /// WPL records the pass read.
    pub records_read: usize,
    /// The server's records it passed over.
    pub records_skipped: u64,
}

/// Rebuilds the WPL table of a server's log (see the module documentation) and reads back the
/// image of every committed copy it names.
pub fn restart(
    log: &Log,
    page_size: usize,
    config: WplConfig,
) -> Result<WplRestarted, WplRestartError> {
    let mut back = WplBackward::new(log);
    let r = wpl::restart(&mut back, page_size, config)?;
    let mut wanted: Vec<(Lsn, PageId, LogCopy)> =
        r.table.install_candidates().map(|(p, c)| (c.lsn, p, c)).collect();
    wanted.sort_unstable_by_key(|w| w.0);
    let mut copies = FxHashMap::with_capacity_and_hasher(wanted.len(), FxBuildHasher);
    if let Some(&(oldest, _, _)) = wanted.first() {
        let mut reader = log.reader(oldest)?;
        let mut next = wanted.iter().peekable();
        while let Some(&&(want, page, copy)) = next.peek() {
            let Some((lsn, payload)) = reader.next()? else { break };
            if lsn < want {
                continue;
            }
            next.next();
            let bad = |why: String| WplRestartError::BadCopy { lsn: lsn.0, page: page.get(), why };
            if lsn != want {
                return Err(bad(format!("the log skipped from LSN {want} to {lsn}")));
            }
            match wpl::decode(payload, lsn, page_size) {
                Ok(WplRecord::PageImage { page: p, txn, image })
                    if p == page && txn == copy.txn =>
                {
                    PageView::parse_stored(image, page).map_err(|e| bad(e.to_string()))?;
                    copies.insert(page, (copy, Bytes::copy_from_slice(image)));
                }
                Ok(other) => return Err(bad(format!("found {other:?}"))),
                Err(e) => return Err(bad(e.to_string())),
            }
        }
        if let Some(&&(lsn, page, _)) = next.peek() {
            return Err(WplRestartError::BadCopy {
                lsn: lsn.0,
                page: page.get(),
                why: "the log ends before it".to_string(),
            });
        }
    }
    Ok(WplRestarted {
        table: r.table,
        copies,
        checkpoint: r.checkpoint,
        records_read: r.records_read,
        records_skipped: back.skipped,
    })
}

/// Whether a record of a server's log is one of whole-page logging's (kinds 6 to 8): the
/// first one forward replay meets is when recovery calls [`restore`].
pub fn is_wpl_record(payload: &[u8]) -> bool {
    payload.first().is_some_and(|k| wpl::is_wpl_kind(*k))
}

/// What [`restore`] did: copies handed to the core, and the checkpoint the pass stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Committed copies the rebuilt table named (each handed to the core with its home's
    /// version).
    pub copies: usize,
    /// The WPL checkpoint the backward pass stopped at, if the log has one.
    pub checkpoint: Option<Lsn>,
}

/// WPL's restart at recovery: the table rebuilt by one backward pass over `log`, and each
/// committed copy it names handed to `core` with its home page's version, read with
/// `read_home` (0 for a page opened since the superblock's checkpoint, which may have no home
/// yet): the core's commit path (a [`crate::StudyPath`], installed if another is) keeps the
/// copies forward replay cannot see for replay to put back into the MOB
/// (`WplLog::restored`), and commits from then on through whole-page logging's table.
/// `cfg` bounds the table.
///
/// *Why at the first WPL record, not after replay:* replay may run install rounds (the MOB's
/// budget); one that wrote a page home without the copy's objects in the MOB would make the
/// home look newer than the copy while lacking it. A copy not yet home keeps its commit's
/// versions in the MOB, so the superblock's checkpoint lies at or below that commit's record
/// and replay meets a WPL record (that one, or an earlier one) before any round could install
/// a version of the page newer than the copy. A log without WPL records from the checkpoint
/// on has no copy that is not home, and no backward pass is made.
pub fn restore(
    core: &mut Core,
    log: &Log,
    page_size: usize,
    cfg: WplConfig,
    mut read_home: impl FnMut(PageId) -> Result<Bytes, EngineError>,
) -> Result<Restored, EngineError> {
    let r = restart(log, page_size, cfg)
        .map_err(|e| EngineError::CorruptRecord { lsn: 0, why: e.to_string() })?;
    let on_disk = core.alloc_page_at_checkpoint().unwrap_or(PageId::FIRST);
    let mut copies = Vec::with_capacity(r.copies.len());
    let mut named: Vec<_> = r.copies.into_iter().collect();
    named.sort_unstable_by_key(|(p, _)| *p);
    for (page, (copy, image)) in named {
        let home = if page <= on_disk {
            let img = read_home(page)?;
            PageView::parse(&img).map(|v| v.version()).unwrap_or(Lsn::ZERO)
        } else {
            Lsn::ZERO
        };
        copies.push((page, copy.lsn, image, home));
    }
    let restored = Restored { copies: copies.len(), checkpoint: r.checkpoint };
    let pages = crate::path::study_path(core, cfg).restored(r.table, copies)?;
    for page in pages {
        core.store_mut().forget_slots(page);
    }
    Ok(restored)
}

/// The objects WPL commits wrote, from a log read forward (as recovery's forward replay reads
/// it, `core::store`): a page image waits for its commit record, which then yields the
/// written objects (from its images) and the created ones (from its body). Memory: the pages
/// of one commit (its images and commit record are consecutive in the log).
#[derive(Debug, Default)]
pub struct WplObjects {
    /// The transaction whose images are held, and its images.
    images: (u64, Vec<(PageId, Vec<u8>)>),
}

/// One object a WPL commit wrote or created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WplObject {
    /// Which object.
    pub oref: thor_core::Oref,
    /// Whether the commit created it.
    pub created: bool,
    /// Its bytes.
    pub data: Vec<u8>,
}

impl WplObjects {
    /// Reads the record at `lsn`: `Ok(None)` if it is not one of WPL's, else the objects it
    /// commits (none for an image, which waits for its commit record, or a checkpoint). A
    /// malformed record is an error naming what is wrong.
    pub fn feed(
        &mut self,
        lsn: Lsn,
        payload: &[u8],
        page_size: usize,
    ) -> Result<Option<Vec<WplObject>>, String> {
        if !payload.first().is_some_and(|k| wpl::is_wpl_kind(*k)) {
            self.images.1.clear();
            return Ok(None);
        }
        let (txn, body) = match wpl::decode(payload, lsn, page_size).map_err(|e| e.to_string())? {
            WplRecord::PageImage { page, txn, image } => {
                PageView::parse_stored(image, page)
                    .map_err(|e| format!("page image of page {page}: {e}"))?;
                if self.images.0 != txn.0 {
                    self.images = (txn.0, Vec::new());
                }
                self.images.1.push((page, image.to_vec()));
                return Ok(Some(Vec::new()));
            }
            WplRecord::Checkpoint(_) | WplRecord::Commit { .. } => return Ok(Some(Vec::new())),
            WplRecord::CommitWith { txn, body } => (txn.0, body),
        };
        let (writes, inner) = crate::wpl::split_body(body).map_err(|e| e.to_string())?;
        let images = std::mem::take(&mut self.images);
        let images = if images.0 == txn { images.1 } else { Vec::new() };
        let mut out = Vec::new();
        for o in writes {
            // A commit whose images lie below where the reading started has none here.
            let Some((page, img)) = images.iter().find(|(p, _)| o.page() == Some(*p)) else {
                continue;
            };
            let view = PageView::assume_parsed(img);
            let data = view
                .object(o.oid())
                .ok_or_else(|| format!("its image of page {page} lacks {o}"))?;
            out.push(WplObject { oref: o, created: false, data: data.to_vec() });
        }
        thor_server_core::record::decode(inner, |o| {
            out.push(WplObject { oref: o.oref, created: o.created, data: o.data.to_vec() });
        })
        .map_err(|e| format!("the commit record in its body: {e}"))?;
        Ok(Some(out))
    }
}

impl From<RestartError<StorageError>> for WplRestartError {
    fn from(e: RestartError<StorageError>) -> WplRestartError {
        WplRestartError::Restart(e)
    }
}

impl From<StorageError> for WplRestartError {
    fn from(e: StorageError) -> WplRestartError {
        WplRestartError::Log(e)
    }
}
