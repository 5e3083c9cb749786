//! Whole-page logging (WPL) at the server: the table of logged pages, its log records,
//! checkpoints, and restart by one backward pass (`papers/quickstore-recovery-sigmod95.txt`,
//! section 3.4).
//!
//! # The scheme
//!
//! Clients ship dirty pages whole, at commit or earlier when their cache evicts one. The server
//! appends each page to the log and never overwrites a page's home with a copy until the
//! transaction that wrote it has committed, so an abort takes nothing back: the uncommitted
//! copies are forgotten. A commit forces the transaction's pages and its commit record. Later a
//! background reader moves each committed copy home (or writes it from the server's cache), and
//! then the log no longer needs it.
//!
//! The **WPL table** says, for each page, where the log holds copies still needed:
//!
//! ```text
//!   page ──► committed copy (LSN, txn), not yet home      readers see this one
//!        └─► uncommitted copy (LSN, txn), at most one      its transaction sees this one
//! ```
//!
//! A page's committed copy `C1` stays needed while another transaction's copy `C2` is
//! uncommitted (the paper: "both C1 and C2 must be maintained in the log until the transaction
//! that wrote C2 commits"); at that commit `C2` replaces `C1`. A transaction that ships the same
//! page twice replaces its own uncommitted copy. *At most one uncommitted copy per page*: a
//! whole page carries every object on it, so two transactions' copies cannot both be installed;
//! the second gets [`WplError::PageBusy`] (in thor, whose concurrency control is per object,
//! that is a page-level write-write conflict that WPL adds; see `docs/format.md`).
//!
//! # Driving it
//!
//! The table hears of every record *before* it is appended, with the LSN it will get
//! ([`WplTable::log_page`], [`WplTable::commit_appended`], [`WplTable::checkpoint_record`]), so
//! that a refusal appends nothing, and of durability afterwards ([`WplTable::commit_durable`],
//! [`WplTable::checkpoint_durable`]). Under group commit a commit record may precede a
//! checkpoint record in the log yet become durable after it; the checkpoint then lists that
//! transaction's copies as committed, which is true whenever the checkpoint is durable, since
//! everything before it is too. (Listing them as uncommitted would lose them: restart never
//! reads the commit record before its checkpoint.)
//!
//! # Records
//!
//! ```text
//! page image  | kind=6 u8 | 0 u8 | 0 u16 | page id u32 | txn u64 | the page (page size bytes) |
//! commit      | kind=7 u8 | flags u8 | 0 u16 | 0 u32   | txn u64 | body (flags bit 0 only) |
//! checkpoint  | kind=8 u8 | 0 u8 | 0 u16 | count u32   | count × entry |
//!   entry     | page id u32 | status u32 (bit 0: committed) | lsn u64 | txn u64 |
//! ```
//!
//! A commit record with `flags` bit 0 set carries a *body* after its header: bytes this crate
//! does not interpret (thor-server puts there what a page image cannot say: the objects the
//! transaction created, which the server allocated, and its concurrency-control section).
//! Other flag bits are zero. Without bit 0 the record is exactly its 16-byte header.
//!
//! Kinds 6 to 8 follow thor-server's record kinds (1 to 5) so that both can share one log.
//! A record's LSN is its position in the log (the log's own header carries it). A checkpoint
//! lists the whole table, committed and uncommitted copies alike, sorted by page and LSN, every
//! entry's LSN below the checkpoint's own.
//!
//! # Restart
//!
//! One pass from the log's end backward to the newest checkpoint. A commit record adds its
//! transaction to the committed-transactions list (CTL); a page image whose transaction is in
//! the CTL gives the page's committed copy if the pass has not already found a newer one; any
//! other image is ignored (its transaction did not commit before the crash). At the checkpoint,
//! each entry that was committed or whose transaction is in the CTL is taken, newest copy per
//! page winning. A log with no checkpoint is read to its start, which must then be the log's
//! first record ever (LSN 1): otherwise a prefix restart needs was truncated.
//!
//! *Invariant (tested at every step of generated histories, with the unsynced tail cut at every
//! point):* after restart, for every page, the copy the table names, or else the page's home,
//! is the newest copy written by a transaction whose commit record is durable.
//!
//! # Log space
//!
//! Restart reads back to the newest durable checkpoint and then the copies that checkpoint
//! lists, so the log may be truncated below [`WplTable::truncation_point`]: the older of the
//! checkpoint and the oldest copy it lists. Installing a page does not free its copy until a
//! later checkpoint no longer lists it.

use std::ops::ControlFlow;

use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use thor_core::le::{put_u32, put_u64, u32_at, u64_at};
use thor_core::{Lsn, PageId};

use crate::TxnId;
use crate::error::WplError;
use crate::limits::{
    WPL_CHECKPOINT_ENTRY_BYTES, WPL_CHECKPOINT_HEADER_BYTES, WPL_COMMIT_BYTES, WPL_ENTRIES_MAX,
    WPL_IMAGE_HEADER_BYTES,
};

/// The kind byte of a page-image record. WPL's records share a server's log with its own
/// records, and a record's first byte says whose it is: thor-server's are kinds 1 to 5 (commit
/// records, two-phase commit), so WPL's are 6 to 8 (thor-server checks at compile time that
/// they stay apart).
pub const KIND_IMAGE: u8 = 6;
/// The kind byte of a commit record.
pub const KIND_COMMIT: u8 = 7;
/// The kind byte of a checkpoint record.
pub const KIND_CHECKPOINT: u8 = 8;

/// Whether a log record's first byte makes it one of WPL's.
pub const fn is_wpl_kind(kind: u8) -> bool {
    matches!(kind, KIND_IMAGE | KIND_COMMIT | KIND_CHECKPOINT)
}
const STATUS_COMMITTED: u32 = 1;
/// A commit record's flag: a body follows the header.
const COMMIT_HAS_BODY: u8 = 1;

/// The bounds of a WPL table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WplConfig {
    /// The most copies (committed and uncommitted) the table holds: the log space a server
    /// lets pages wait in before installing them. At most [`WPL_ENTRIES_MAX`].
    pub entries_max: usize,
    /// The most transactions holding uncommitted copies at once.
    pub txns_max: usize,
    /// The most commits between two checkpoints: restart's committed-transactions list holds
    /// at most this many. A commit beyond it is refused with [`WplError::CheckpointDue`];
    /// the driver checkpoints when [`WplTable::checkpoint_due`] says so, before that happens.
    pub commits_per_checkpoint: usize,
}

/// A copy of a page in the log.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LogCopy {
    /// Where the copy is.
    pub lsn: Lsn,
    /// The transaction that wrote it.
    pub txn: TxnId,
}

/// One line of a checkpoint: a copy and whether its transaction had committed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct WplEntry {
    /// The page.
    pub page: PageId,
    /// The copy.
    pub copy: LogCopy,
    /// Whether the transaction had committed when the checkpoint was taken.
    pub committed: bool,
}

/// What the table knows of one page.
#[derive(Clone, Copy, Default, Debug)]
struct Slot {
    /// The newest committed copy not yet home.
    committed: Option<LogCopy>,
    /// The uncommitted copy, and the next page of the same transaction's list.
    uncommitted: Option<LogCopy>,
    next_of_txn: Option<PageId>,
}

/// A transaction's uncommitted copies: a list threaded through the slots.
#[derive(Clone, Copy, Debug)]
struct TxnPages {
    /// The page logged last.
    head: PageId,
    /// Pages in the list.
    pages: usize,
    /// Where its commit record was appended, once it was: from then on its copies are listed
    /// as committed by checkpoints (a durable checkpoint implies the durable commit record
    /// before it) and it takes no more pages and cannot abort.
    commit: Option<Lsn>,
}

/// The WPL table. See the module documentation.
#[derive(Debug)]
pub struct WplTable {
    config: WplConfig,
    slots: FxHashMap<PageId, Slot>,
    /// Transactions with uncommitted copies.
    txns: FxHashMap<TxnId, TxnPages>,
    /// Copies in the table.
    entries: usize,
    /// The newest LSN reported: records are reported in log order.
    last_lsn: Lsn,
    /// The newest durable checkpoint and the oldest copy it lists.
    checkpoint: Option<(Lsn, Lsn)>,
    /// The newest checkpoint appended but not yet durable, likewise.
    pending_checkpoint: Option<(Lsn, Lsn)>,
    /// Commits since the newest checkpoint record was appended.
    commits_since_checkpoint: usize,
}

impl WplTable {
    /// An empty table (a new database, or before restart fills it).
    pub fn new(config: WplConfig) -> Result<WplTable, WplError> {
        if config.entries_max == 0
            || config.entries_max > WPL_ENTRIES_MAX
            || config.txns_max == 0
            || config.commits_per_checkpoint == 0
        {
            return Err(WplError::BadConfig);
        }
        Ok(WplTable {
            config,
            slots: FxHashMap::with_capacity_and_hasher(config.entries_max, FxBuildHasher),
            txns: FxHashMap::with_capacity_and_hasher(config.txns_max, FxBuildHasher),
            entries: 0,
            last_lsn: Lsn::ZERO,
            checkpoint: None,
            pending_checkpoint: None,
            commits_since_checkpoint: 0,
        })
    }

    /// Copies in the table.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether the table holds no copy.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Transactions holding uncommitted copies (at most [`WplConfig::txns_max`]).
    pub fn txns(&self) -> usize {
        self.txns.len()
    }

    /// The table's bounds.
    pub fn config(&self) -> WplConfig {
        self.config
    }

    /// Whether a checkpoint record was appended and is not yet durable.
    pub fn checkpoint_pending(&self) -> bool {
        self.pending_checkpoint.is_some()
    }

    /// The committed copy of `page` not yet home: where a reader finds the page's current
    /// value (or `None`: at home).
    pub fn committed(&self, page: PageId) -> Option<LogCopy> {
        self.slots.get(&page).and_then(|s| s.committed)
    }

    /// The uncommitted copy of `page`, if any: where its transaction finds its own version.
    pub fn uncommitted(&self, page: PageId) -> Option<LogCopy> {
        self.slots.get(&page).and_then(|s| s.uncommitted)
    }

    /// Committed copies not yet home, in no particular order: the background reader's work.
    pub fn install_candidates(&self) -> impl Iterator<Item = (PageId, LogCopy)> + '_ {
        self.slots.iter().filter_map(|(&p, s)| s.committed.map(|c| (p, c)))
    }

    fn check_lsn(&mut self, lsn: Lsn) -> Result<(), WplError> {
        if lsn <= self.last_lsn {
            return Err(WplError::LsnOrder { got: lsn.0, last: self.last_lsn.0 });
        }
        self.last_lsn = lsn;
        Ok(())
    }

    /// `txn` ships `page` whole and the image is about to be appended at `lsn`. Call before
    /// appending; on an error append nothing (the page is busy, the table full).
    pub fn log_page(&mut self, txn: TxnId, page: PageId, lsn: Lsn) -> Result<(), WplError> {
        let slot = self.slots.get(&page).copied().unwrap_or_default();
        let list = self.txns.get(&txn).copied();
        if list.is_some_and(|l| l.commit.is_some()) {
            return Err(WplError::NoSuchTxn(txn)); // committing: no more pages
        }
        match slot.uncommitted {
            Some(c) if c.txn != txn => return Err(WplError::PageBusy { page, holder: c.txn }),
            Some(_) => {
                // The transaction's newer copy replaces its older one, which nothing needs now.
                self.check_lsn(lsn)?;
                if let Some(s) = self.slots.get_mut(&page) {
                    s.uncommitted = Some(LogCopy { lsn, txn });
                }
                return Ok(());
            }
            None => {}
        }
        if self.entries >= self.config.entries_max {
            return Err(WplError::TableFull(self.config.entries_max));
        }
        if list.is_none() && self.txns.len() >= self.config.txns_max {
            return Err(WplError::TooManyTxns(self.config.txns_max));
        }
        self.check_lsn(lsn)?;
        self.slots.insert(
            page,
            Slot {
                committed: slot.committed,
                uncommitted: Some(LogCopy { lsn, txn }),
                next_of_txn: list.map(|l| l.head),
            },
        );
        let pages = list.map_or(0, |l| l.pages) + 1;
        self.txns.insert(txn, TxnPages { head: page, pages, commit: None });
        self.entries += 1;
        Ok(())
    }

    /// `txn`'s commit record is about to be appended at `lsn`. Call before appending; on an
    /// error append nothing. The commit takes effect for readers at
    /// [`commit_durable`](Self::commit_durable), once the record is durable.
    pub fn commit_appended(&mut self, txn: TxnId, lsn: Lsn) -> Result<(), WplError> {
        if self.commits_since_checkpoint >= self.config.commits_per_checkpoint {
            return Err(WplError::CheckpointDue);
        }
        match self.txns.get(&txn) {
            Some(l) if l.commit.is_none() => {}
            _ => return Err(WplError::NoSuchTxn(txn)),
        }
        self.check_lsn(lsn)?;
        if let Some(l) = self.txns.get_mut(&txn) {
            l.commit = Some(lsn);
        }
        self.commits_since_checkpoint += 1;
        Ok(())
    }

    /// `txn`'s commit record is durable: its copies become the pages' committed copies,
    /// replacing older ones. Returns how many pages it committed.
    pub fn commit_durable(&mut self, txn: TxnId) -> Result<usize, WplError> {
        match self.txns.get(&txn) {
            Some(l) if l.commit.is_some() => {}
            _ => return Err(WplError::NoSuchTxn(txn)),
        }
        let list = self.txns.remove(&txn).expect("just found");
        let mut page = Some(list.head);
        while let Some(p) = page {
            let slot = self.slots.get_mut(&p).expect("a transaction's list names its slots");
            if slot.committed.is_some() {
                self.entries -= 1; // superseded
            }
            slot.committed = slot.uncommitted.take();
            page = slot.next_of_txn.take();
        }
        Ok(list.pages)
    }

    /// `txn` aborted before its commit record was appended: its copies are forgotten (none of
    /// them reached a home). Returns how many pages it had logged.
    pub fn abort(&mut self, txn: TxnId) -> Result<usize, WplError> {
        match self.txns.get(&txn) {
            Some(l) if l.commit.is_none() => {}
            _ => return Err(WplError::NoSuchTxn(txn)),
        }
        let list = self.txns.remove(&txn).expect("just found");
        let mut page = Some(list.head);
        while let Some(p) = page {
            let slot = self.slots.get_mut(&p).expect("a transaction's list names its slots");
            slot.uncommitted = None;
            page = slot.next_of_txn.take();
            self.entries -= 1;
            if slot.committed.is_none() {
                self.slots.remove(&p);
            }
        }
        Ok(list.pages)
    }

    /// The committed copy of `page` at `lsn` is durably home. Returns false if the table holds
    /// another copy (a newer commit replaced it: the newer one must go home too).
    pub fn installed(&mut self, page: PageId, lsn: Lsn) -> bool {
        let Some(slot) = self.slots.get_mut(&page) else {
            return false;
        };
        if slot.committed.map(|c| c.lsn) != Some(lsn) {
            return false;
        }
        slot.committed = None;
        self.entries -= 1;
        if slot.uncommitted.is_none() {
            self.slots.remove(&page);
        }
        true
    }

    /// Whether the next commit would pass [`WplConfig::commits_per_checkpoint`]: write a
    /// checkpoint first.
    pub fn checkpoint_due(&self) -> bool {
        self.commits_since_checkpoint >= self.config.commits_per_checkpoint
    }

    /// Appends to `out` the payload of a checkpoint record of the whole table, which the driver
    /// appends to the log at `lsn` (`scratch` sorts the entries, so the bytes do not depend on
    /// hash order). Once it is durable the driver calls
    /// [`checkpoint_durable`](Self::checkpoint_durable).
    pub fn checkpoint_record(
        &mut self,
        lsn: Lsn,
        scratch: &mut Vec<WplEntry>,
        out: &mut Vec<u8>,
    ) -> Result<(), WplError> {
        self.check_lsn(lsn)?;
        scratch.clear();
        for (&page, s) in &self.slots {
            if let Some(copy) = s.committed {
                scratch.push(WplEntry { page, copy, committed: true });
            }
            if let Some(copy) = s.uncommitted {
                // A commit record appended before this checkpoint is durable whenever the
                // checkpoint is, so its copies count as committed in it.
                let committed = self.txns.get(&copy.txn).is_some_and(|l| l.commit.is_some());
                scratch.push(WplEntry { page, copy, committed });
            }
        }
        scratch.sort_unstable_by_key(|e| (e.page, e.copy.lsn));
        encode_checkpoint(scratch, out);
        let oldest = scratch.iter().map(|e| e.copy.lsn).min().unwrap_or(lsn);
        self.pending_checkpoint = Some((lsn, oldest));
        // Commits after this record follow it in the log: a restart from it sees only them.
        self.commits_since_checkpoint = 0;
        Ok(())
    }

    /// The checkpoint record at `lsn` is durable: restart will start from it, and the log below
    /// [`truncation_point`](Self::truncation_point) is no longer needed. Returns false if `lsn`
    /// is not the checkpoint appended last (a newer one was appended since: wait for it).
    pub fn checkpoint_durable(&mut self, lsn: Lsn) -> bool {
        match self.pending_checkpoint {
            Some((at, _)) if at == lsn => {
                self.checkpoint = self.pending_checkpoint.take();
                true
            }
            _ => false,
        }
    }

    /// The oldest LSN restart may read: records below it may be truncated. `None` until a
    /// checkpoint is durable (restart would read the whole log).
    pub fn truncation_point(&self) -> Option<Lsn> {
        self.checkpoint.map(|(_, oldest)| oldest)
    }

    /// Checks the table's counts and lists; for tests.
    pub fn check_invariants(&self) {
        let copies: usize = self
            .slots
            .values()
            .map(|s| usize::from(s.committed.is_some()) + usize::from(s.uncommitted.is_some()))
            .sum();
        assert_eq!(copies, self.entries);
        assert!(self.slots.values().all(|s| s.committed.is_some() || s.uncommitted.is_some()));
        let mut listed = 0;
        for (&txn, l) in &self.txns {
            let (head, n) = (l.head, l.pages);
            let mut page = Some(head);
            let mut len = 0;
            while let Some(p) = page {
                let s = &self.slots[&p];
                assert_eq!(s.uncommitted.map(|c| c.txn), Some(txn));
                len += 1;
                page = s.next_of_txn;
            }
            assert_eq!(len, n);
            listed += n;
        }
        assert_eq!(listed, self.slots.values().filter(|s| s.uncommitted.is_some()).count());
    }
}

/// A decoded WPL log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WplRecord<'a> {
    /// A page shipped whole by `txn`.
    PageImage {
        /// The page.
        page: PageId,
        /// The transaction.
        txn: TxnId,
        /// The page's bytes.
        image: &'a [u8],
    },
    /// `txn` committed.
    Commit {
        /// The transaction.
        txn: TxnId,
    },
    /// `txn` committed, with a body for the log's other reader (see the module
    /// documentation).
    CommitWith {
        /// The transaction.
        txn: TxnId,
        /// The body, uninterpreted here (possibly empty).
        body: &'a [u8],
    },
    /// The table, as of the record.
    Checkpoint(Checkpoint<'a>),
}

/// A checked checkpoint record's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint<'a> {
    /// The entries' bytes (count checked).
    bytes: &'a [u8],
}

impl<'a> Checkpoint<'a> {
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.bytes.len() / WPL_CHECKPOINT_ENTRY_BYTES
    }

    /// Whether it lists nothing.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The entries, in page and LSN order. Every field was checked when the record was
    /// decoded.
    pub fn entries(&self) -> impl Iterator<Item = WplEntry> + 'a {
        self.bytes.chunks_exact(WPL_CHECKPOINT_ENTRY_BYTES).map(|e| WplEntry {
            page: PageId::new(u32_at(e, 0)).expect("checked at decode"),
            committed: u32_at(e, 4) & STATUS_COMMITTED != 0,
            copy: LogCopy { lsn: Lsn(u64_at(e, 8)), txn: TxnId(u64_at(e, 16)) },
        })
    }
}

/// Appends a page-image record's payload.
pub fn encode_image(page: PageId, txn: TxnId, image: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + WPL_IMAGE_HEADER_BYTES, 0);
    out[at] = KIND_IMAGE;
    put_u32(&mut out[at..], 4, page.get());
    put_u64(&mut out[at..], 8, txn.0);
    out.extend_from_slice(image);
}

/// Appends a commit record's payload.
pub fn encode_commit(txn: TxnId, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + WPL_COMMIT_BYTES, 0);
    out[at] = KIND_COMMIT;
    put_u64(&mut out[at..], 8, txn.0);
}

/// Appends the payload of a commit record carrying `body` (flags bit 0).
pub fn encode_commit_with(txn: TxnId, body: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    encode_commit(txn, out);
    out[at + 1] = COMMIT_HAS_BODY;
    out.extend_from_slice(body);
}

/// Appends a checkpoint record's payload listing `entries` (in page and LSN order).
pub fn encode_checkpoint(entries: &[WplEntry], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + WPL_CHECKPOINT_HEADER_BYTES, 0);
    out[at] = KIND_CHECKPOINT;
    put_u32(&mut out[at..], 4, entries.len() as u32);
    for e in entries {
        let at = out.len();
        out.resize(at + WPL_CHECKPOINT_ENTRY_BYTES, 0);
        let b = &mut out[at..];
        put_u32(b, 0, e.page.get());
        put_u32(b, 4, if e.committed { STATUS_COMMITTED } else { 0 });
        put_u64(b, 8, e.copy.lsn.0);
        put_u64(b, 16, e.copy.txn.0);
    }
}

/// Decodes the WPL record at `lsn` for pages of `page_size` bytes, checking every field: its
/// kind, reserved bytes, page ids, a page image's exact size, a checkpoint's count, entry
/// status bits, order, and that every entry is older than the checkpoint.
pub fn decode(bytes: &[u8], lsn: Lsn, page_size: usize) -> Result<WplRecord<'_>, WplError> {
    let bad = |why| WplError::BadRecord { lsn: lsn.0, why };
    let kind = *bytes.first().ok_or(bad("empty"))?;
    let header = match kind {
        KIND_IMAGE => WPL_IMAGE_HEADER_BYTES,
        KIND_COMMIT => WPL_COMMIT_BYTES,
        KIND_CHECKPOINT => WPL_CHECKPOINT_HEADER_BYTES,
        _ => return Err(bad("unknown kind")),
    };
    if bytes.len() < header {
        return Err(bad("truncated header"));
    }
    let flags = bytes[1];
    if (kind != KIND_COMMIT && flags != 0) || flags & !COMMIT_HAS_BODY != 0 {
        return Err(bad("unknown flags"));
    }
    if bytes[2..4] != [0, 0] {
        return Err(bad("reserved bytes are not zero"));
    }
    match kind {
        KIND_IMAGE => {
            let raw = u32_at(bytes, 4);
            let page = PageId::new(raw).ok_or(bad("page id out of range"))?;
            let image = &bytes[WPL_IMAGE_HEADER_BYTES..];
            if image.len() != page_size {
                return Err(bad("page image is not one page"));
            }
            Ok(WplRecord::PageImage { page, txn: TxnId(u64_at(bytes, 8)), image })
        }
        KIND_COMMIT => {
            if u32_at(bytes, 4) != 0 {
                return Err(bad("malformed commit record"));
            }
            let txn = TxnId(u64_at(bytes, 8));
            if flags & COMMIT_HAS_BODY != 0 {
                return Ok(WplRecord::CommitWith { txn, body: &bytes[WPL_COMMIT_BYTES..] });
            }
            if bytes.len() != WPL_COMMIT_BYTES {
                return Err(bad("malformed commit record"));
            }
            Ok(WplRecord::Commit { txn })
        }
        _ => {
            let count = u32_at(bytes, 4) as usize;
            if count > WPL_ENTRIES_MAX {
                return Err(bad("more checkpoint entries than a table holds"));
            }
            let body = &bytes[WPL_CHECKPOINT_HEADER_BYTES..];
            if body.len() != count * WPL_CHECKPOINT_ENTRY_BYTES {
                return Err(bad("checkpoint length does not match its count"));
            }
            let mut prev: Option<(u32, u64)> = None;
            for e in body.chunks_exact(WPL_CHECKPOINT_ENTRY_BYTES) {
                let (page, status, at) = (u32_at(e, 0), u32_at(e, 4), u64_at(e, 8));
                if PageId::new(page).is_none() {
                    return Err(bad("checkpoint entry page id out of range"));
                }
                if status & !STATUS_COMMITTED != 0 {
                    return Err(bad("checkpoint entry status has unknown bits"));
                }
                if at == 0 || at >= lsn.0 {
                    return Err(bad("checkpoint entry not older than the checkpoint"));
                }
                if prev.is_some_and(|p| p >= (page, at)) {
                    return Err(bad("checkpoint entries out of order"));
                }
                prev = Some((page, at));
            }
            Ok(WplRecord::Checkpoint(Checkpoint { bytes: body }))
        }
    }
}

/// A log read from its end backward, as restart needs it.
pub trait BackwardLog {
    /// Why reading failed (the log's own error: I/O, a damaged record).
    type Error: std::error::Error + 'static;
    /// The LSN of the oldest record the log still holds (1 if nothing was ever truncated).
    fn first_lsn(&self) -> Lsn;
    /// Reads the record before the one returned last (the newest, the first time) into `buf`,
    /// returning its LSN, or `None` past the oldest.
    fn prev(&mut self, buf: &mut Vec<u8>) -> Result<Option<Lsn>, Self::Error>;
}

/// Why restart failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestartError<E: std::error::Error + 'static> {
    /// The log could not be read.
    #[error("reading the log backward")]
    Log(#[source] E),
    /// The log's records do not make a WPL history restart can trust.
    #[error(transparent)]
    Wpl(#[from] WplError),
}

/// What restart rebuilt.
#[derive(Debug)]
pub struct Restarted {
    /// The table: every page's newest committed copy not known to be home.
    pub table: WplTable,
    /// The checkpoint the pass stopped at, if the log has one.
    pub checkpoint: Option<Lsn>,
    /// Records read.
    pub records_read: usize,
}

/// Rebuilds the WPL table after a crash by one backward pass to the newest checkpoint (see the
/// module documentation). The rebuilt table holds committed copies only (every uncommitted
/// transaction died with the crash); it counts the log's newest LSN as reported, the
/// checkpoint it stopped at as durable (so that truncation stays safe until the next one), and
/// the commits after that checkpoint toward the next one.
pub fn restart<L: BackwardLog>(
    log: &mut L,
    page_size: usize,
    config: WplConfig,
) -> Result<Restarted, RestartError<L::Error>> {
    let mut table = WplTable::new(config)?;
    let mut ctl: FxHashSet<TxnId> = FxHashSet::with_capacity_and_hasher(
        config.commits_per_checkpoint + config.txns_max,
        FxBuildHasher,
    );
    let mut buf = Vec::new();
    let mut newest = None;
    let mut records_read = 0;
    let mut checkpoint = None;
    while let Some(lsn) = log.prev(&mut buf).map_err(RestartError::Log)? {
        records_read += 1;
        if newest.is_some_and(|n: Lsn| lsn >= n) || lsn < log.first_lsn() {
            return Err(WplError::BadRecord { lsn: lsn.0, why: "log read out of order" }.into());
        }
        newest.get_or_insert(lsn);
        let step = match decode(&buf, lsn, page_size)? {
            WplRecord::Commit { txn } | WplRecord::CommitWith { txn, .. } => {
                // The CTL holds the transactions that committed after the checkpoint: those the
                // table counted while the server ran (`commits_per_checkpoint`), and at most
                // one in-flight commit per active transaction.
                if ctl.len() >= config.commits_per_checkpoint + config.txns_max {
                    return Err(WplError::RestartBound("commits after the checkpoint").into());
                }
                ctl.insert(txn);
                ControlFlow::Continue(())
            }
            WplRecord::PageImage { page, txn, .. } => {
                if ctl.contains(&txn) {
                    take_newest(&mut table, page, LogCopy { lsn, txn })?;
                }
                ControlFlow::Continue(())
            }
            WplRecord::Checkpoint(cp) => {
                let mut oldest = lsn;
                for e in cp.entries() {
                    oldest = oldest.min(e.copy.lsn);
                    if e.committed || ctl.contains(&e.copy.txn) {
                        take_newest(&mut table, e.page, e.copy)?;
                    }
                }
                checkpoint = Some((lsn, oldest));
                ControlFlow::Break(())
            }
        };
        if step.is_break() {
            break;
        }
    }
    if checkpoint.is_none() && log.first_lsn() > Lsn(1) {
        return Err(WplError::NoCheckpoint { first: log.first_lsn().0 }.into());
    }
    if let Some((_, oldest)) = checkpoint
        && oldest < log.first_lsn()
    {
        return Err(WplError::BadRecord {
            lsn: oldest.0,
            why: "the checkpoint lists a copy the log no longer holds",
        }
        .into());
    }
    table.last_lsn = newest.unwrap_or(Lsn::ZERO);
    table.checkpoint = checkpoint;
    // The commits read follow the checkpoint in the log: they count toward the next one, or a
    // later restart could meet more than its bound.
    table.commits_since_checkpoint = ctl.len();
    Ok(Restarted { table, checkpoint: checkpoint.map(|(lsn, _)| lsn), records_read })
}

/// Makes `copy` the page's committed copy unless the table has a newer one.
fn take_newest(table: &mut WplTable, page: PageId, copy: LogCopy) -> Result<(), WplError> {
    match table.slots.get_mut(&page) {
        Some(slot) => {
            if slot.committed.is_none_or(|c| c.lsn < copy.lsn) {
                slot.committed = Some(copy);
            }
        }
        None => {
            if table.entries >= table.config.entries_max {
                return Err(WplError::RestartBound("table entries"));
            }
            table.slots.insert(page, Slot { committed: Some(copy), ..Slot::default() });
            table.entries += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
