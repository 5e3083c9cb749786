//! The page-based commit modes' messages (issue 14, `papers/quickstore-recovery-sigmod95.txt`).
//!
//! A server runs one [`CommitMode`] (`HelloOk` flags bits 1-3 say which). In `obj` mode, thor's
//! own, a client commits with `Commit` (the new versions of the objects it wrote). In the page
//! modes a client describes its updates as *page records* (`thor_recovery::record`: the changed
//! regions of one page, redo bytes, and undo bytes when sent before commit) and commits with
//! `PageCommit`; ESM modes also ship each dirty page whole.
//!
//! ```text
//! PageRecords 0x0040  +----------+--------+---------------------------------+
//!                     | txn: u64 | N: u32 | N x ( len: u32 | page record )  |   sent before
//!                     +----------+--------+---------------------------------+   commit (undo)
//!                     | [ P: u32 | P x ( page: u32 | len: u32 | the page ) ] |   stolen pages,
//!                     +---------------------------------------------------+    only if P > 0
//!
//! PageCommit  0x0041  +----------+---------+--------+--------------------+
//!                     | txn: u64 | mode u8 | R: u32 | R read orefs (u32) |      the read set
//!                     +----------+---------+--------+--------------------+
//!                     | W: u32 | W written orefs (u32) |                       the write set
//!                     +--------+-----------------------+------------+
//!                     | C: u32 | C x ( len: u32 | bytes )            |        created objects
//!                     +--------+-----------------------+------------+
//!                     | N: u32 | N x ( len: u32 | page record )      |        commit records
//!                     +--------+-----------------------+------------+-------+
//!                     | P: u32 | P x ( page: u32 | len: u32 | the page )    |  ESM: dirty pages
//!                     +--------+--------------------------------------------+
//!   R <= 2^21; W + C <= 2^20; N <= PAGE_RECORDS_MAX; P <= PAGES_SHIPPED_MAX;
//!   record len <= PAGE_RECORD_BYTES_MAX; page len a valid page size
//! ```
//!
//! `PageRecords` goes before commit for one of two reasons: the client's recovery buffer must
//! make room (records only), or a dirty page leaves the client's memory (the paper's eviction
//! of a dirty page: its records and, in the ESM modes and WPL, the page whole). The stolen
//! pages' section is present only when it is not empty, so a message without pages is
//! byte for byte what it was before the section existed.
//!
//! `PageRecords` is answered with `Ack`, `PageCommit` as `Commit` is (`CommitOk` once durable,
//! or `CommitRefused`). `txn` is the client's transaction number; the records of one
//! transaction carry it in their headers, and the server drops records staged under another
//! number. The record bytes are checked here only for their length: their layout is
//! `thor_recovery`'s, and the server parses them with its checked decoder.
//!
//! The write set is sent because thor validates per object (CLOCC): a region of a page record
//! may only cover objects named in it, and each is validated as a write.

use bytes::Bytes;
use thor_core::Oref;
use thor_core::limits::is_valid_page_size;

use crate::codec::{Put, Reader, check_limit, check_oref};
use crate::error::WireError;
use crate::limits::{
    COMMIT_OBJECTS_MAX, OBJECT_BYTES_MAX, PAGE_RECORD_BYTES_MAX, PAGE_RECORDS_MAX,
    PAGES_SHIPPED_MAX, READ_SET_MAX,
};

/// How a server makes commits recoverable, chosen per server (or database) and told to every
/// client in `HelloOk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CommitMode {
    /// thor's own: modified objects shipped, logged, kept in the MOB, installed later.
    #[default]
    Obj,
    /// Page diffing, redo at the server: only page records travel; the server applies them to
    /// its copy of each page (reading it when it is not cached).
    PdRedo,
    /// Page diffing, ESM: page records and the dirty pages travel; the server takes the
    /// written objects from the pages and needs no read.
    PdEsm,
    /// Sub-page diffing (blocks copied on first update, diffed), ESM.
    SdEsm,
    /// Sub-page logging (blocks copied on first update, logged whole), ESM.
    SlEsm,
    /// Whole-page logging: the dirty pages travel whole and no records; the server logs each
    /// written page whole, keeps a table of the pages the log holds, and moves them home later.
    Wpl,
}

impl CommitMode {
    /// Every mode, in code order.
    pub const ALL: [CommitMode; 6] = [
        CommitMode::Obj,
        CommitMode::PdRedo,
        CommitMode::PdEsm,
        CommitMode::SdEsm,
        CommitMode::SlEsm,
        CommitMode::Wpl,
    ];

    /// The mode's code in `HelloOk` flags and `PageCommit`.
    pub const fn code(self) -> u8 {
        match self {
            CommitMode::Obj => 0,
            CommitMode::PdRedo => 1,
            CommitMode::PdEsm => 2,
            CommitMode::SdEsm => 3,
            CommitMode::SlEsm => 4,
            CommitMode::Wpl => 5,
        }
    }

    /// The mode of a code, if it names one.
    pub const fn from_code(code: u8) -> Option<CommitMode> {
        Some(match code {
            0 => CommitMode::Obj,
            1 => CommitMode::PdRedo,
            2 => CommitMode::PdEsm,
            3 => CommitMode::SdEsm,
            4 => CommitMode::SlEsm,
            5 => CommitMode::Wpl,
            _ => return None,
        })
    }

    /// The mode's name, as `thor server --commit-mode` takes it and stats print it.
    pub const fn name(self) -> &'static str {
        match self {
            CommitMode::Obj => "obj",
            CommitMode::PdRedo => "pd-redo",
            CommitMode::PdEsm => "pd-esm",
            CommitMode::SdEsm => "sd-esm",
            CommitMode::SlEsm => "sl-esm",
            CommitMode::Wpl => "wpl",
        }
    }

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Option<CommitMode> {
        CommitMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether clients commit with `PageCommit`.
    pub const fn is_page_based(self) -> bool {
        !matches!(self, CommitMode::Obj)
    }

    /// Whether dirty pages travel whole with the commit (ESM and WPL).
    pub const fn ships_pages(self) -> bool {
        matches!(self, CommitMode::PdEsm | CommitMode::SdEsm | CommitMode::SlEsm | CommitMode::Wpl)
    }

    /// Whether the client sends page records (every page mode but WPL, which ships pages
    /// only).
    pub const fn sends_records(self) -> bool {
        matches!(
            self,
            CommitMode::PdRedo | CommitMode::PdEsm | CommitMode::SdEsm | CommitMode::SlEsm
        )
    }
}

impl std::fmt::Display for CommitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a page-mode client sends before its commit: page records with undo bytes (the
/// recovery buffer had to make room, or a dirty page left the client's memory) and, when a
/// dirty page left it in an ESM mode or WPL, the page whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRecords {
    /// The client's transaction number; every record's header names it.
    pub txn: u64,
    /// The records, each in `thor_recovery::record`'s layout.
    pub records: Vec<Bytes>,
    /// Dirty pages stolen from the client before commit, whole (ESM and WPL), as in
    /// [`PageCommit::pages`]. The server keeps them until the commit, which may ship a newer
    /// copy of the same page.
    pub pages: Vec<(thor_core::PageId, Bytes)>,
}

/// A page-based commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageCommit {
    /// The client's transaction number (as in its records' headers).
    pub txn: u64,
    /// The commit mode the client used; the server refuses one that is not its own.
    pub mode: u8,
    /// Objects the transaction read.
    pub reads: Vec<Oref>,
    /// Objects the transaction wrote: every region of every record lies inside one of them.
    pub writes: Vec<Oref>,
    /// Created objects in creation order, as in `Commit`.
    pub created: Vec<Bytes>,
    /// The page records not sent before (no undo bytes).
    pub records: Vec<Bytes>,
    /// ESM: the dirty pages whole.
    pub pages: Vec<(thor_core::PageId, Bytes)>,
}

/// Bytes of a `PageRecords` body, checking its limits.
pub(crate) fn records_bytes(r: &PageRecords) -> Result<usize, WireError> {
    let pages = if r.pages.is_empty() { 0 } else { pages_bytes(&r.pages)? };
    Ok(8 + list_bytes(&r.records)? + pages)
}

/// Bytes of a list of whole pages, checking its limits.
fn pages_bytes(pages: &[(thor_core::PageId, Bytes)]) -> Result<usize, WireError> {
    check_limit("shipped pages", pages.len(), PAGES_SHIPPED_MAX)?;
    let mut n = 4;
    for (_, p) in pages {
        if !is_valid_page_size(p.len()) {
            return Err(WireError::BadValue { what: "shipped page", why: "not a page size" });
        }
        n += 8 + p.len();
    }
    Ok(n)
}

fn list_bytes(records: &[Bytes]) -> Result<usize, WireError> {
    check_limit("page records", records.len(), PAGE_RECORDS_MAX)?;
    let mut n = 4;
    for r in records {
        check_limit("page record bytes", r.len(), PAGE_RECORD_BYTES_MAX)?;
        n += 4 + r.len();
    }
    Ok(n)
}

/// Bytes of a `PageCommit` body, checking its limits.
pub(crate) fn commit_bytes(c: &PageCommit) -> Result<usize, WireError> {
    check_limit("read set", c.reads.len(), READ_SET_MAX)?;
    check_limit(
        "commit objects",
        c.writes.len().saturating_add(c.created.len()),
        COMMIT_OBJECTS_MAX,
    )?;
    for o in &c.reads {
        check_oref(*o, "read set")?;
    }
    for o in &c.writes {
        check_oref(*o, "write set")?;
    }
    let mut n = 8 + 1 + 4 + 4 * c.reads.len() + 4 + 4 * c.writes.len() + 4;
    for b in &c.created {
        check_limit("object bytes", b.len(), OBJECT_BYTES_MAX)?;
        n += 4 + b.len();
    }
    n += list_bytes(&c.records)?;
    Ok(n + pages_bytes(&c.pages)?)
}

fn put_list(out: &mut Vec<u8>, items: &[Bytes]) {
    out.put_u32(items.len() as u32);
    for b in items {
        out.put_u32(b.len() as u32);
        out.extend_from_slice(b);
    }
}

fn put_orefs(out: &mut Vec<u8>, orefs: &[Oref]) {
    out.put_u32(orefs.len() as u32);
    for o in orefs {
        out.put_u32(o.raw());
    }
}

fn put_pages(out: &mut Vec<u8>, pages: &[(thor_core::PageId, Bytes)]) {
    out.put_u32(pages.len() as u32);
    for (page, bytes) in pages {
        out.put_u32(page.get());
        out.put_u32(bytes.len() as u32);
        out.extend_from_slice(bytes);
    }
}

/// Writes a `PageRecords` body ([`records_bytes`] has checked it).
pub(crate) fn put_records(out: &mut Vec<u8>, r: &PageRecords) {
    out.put_u64(r.txn);
    put_list(out, &r.records);
    if !r.pages.is_empty() {
        put_pages(out, &r.pages);
    }
}

/// Writes a `PageCommit` body ([`commit_bytes`] has checked it).
pub(crate) fn put_commit(out: &mut Vec<u8>, c: &PageCommit) {
    out.put_u64(c.txn);
    out.push(c.mode);
    put_orefs(out, &c.reads);
    put_orefs(out, &c.writes);
    put_list(out, &c.created);
    put_list(out, &c.records);
    put_pages(out, &c.pages);
}

fn get_list(
    r: &mut Reader,
    max: usize,
    item_max: usize,
    what: &'static str,
) -> Result<Vec<Bytes>, WireError> {
    let n = r.count32(max, 4, what)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.count32(item_max, 1, what)?;
        v.push(r.bytes(len, what)?);
    }
    Ok(v)
}

fn get_orefs(r: &mut Reader, max: usize, what: &'static str) -> Result<Vec<Oref>, WireError> {
    let n = r.count32(max, 4, what)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.oref(what)?);
    }
    Ok(v)
}

/// Reads a `PageRecords` body.
pub(crate) fn get_records(r: &mut Reader) -> Result<PageRecords, WireError> {
    let txn = r.u64("txn")?;
    let records = get_list(r, PAGE_RECORDS_MAX, PAGE_RECORD_BYTES_MAX, "page records")?;
    // The pages' section is there only when it holds pages: an empty one is malformed, so
    // that each message has exactly one encoding.
    let pages = if r.remaining() == 0 {
        Vec::new()
    } else {
        let pages = get_pages(r)?;
        if pages.is_empty() {
            return Err(WireError::BadValue { what: "stolen pages", why: "an empty section" });
        }
        pages
    };
    Ok(PageRecords { txn, records, pages })
}

fn get_pages(r: &mut Reader) -> Result<Vec<(thor_core::PageId, Bytes)>, WireError> {
    let n = r.count32(PAGES_SHIPPED_MAX, 8, "shipped pages")?;
    let mut pages = Vec::with_capacity(n);
    for _ in 0..n {
        let page = r.page_id("shipped page")?;
        let len = r.u32("shipped page length")? as usize;
        if !is_valid_page_size(len) {
            return Err(WireError::BadValue {
                what: "shipped page length",
                why: "not a page size",
            });
        }
        pages.push((page, r.bytes(len, "shipped page bytes")?));
    }
    Ok(pages)
}

/// Reads a `PageCommit` body.
pub(crate) fn get_commit(r: &mut Reader) -> Result<PageCommit, WireError> {
    let txn = r.u64("txn")?;
    let mode = r.u8("commit mode")?;
    let reads = get_orefs(r, READ_SET_MAX, "read set")?;
    let writes = get_orefs(r, COMMIT_OBJECTS_MAX, "write set")?;
    let created =
        get_list(r, COMMIT_OBJECTS_MAX - writes.len(), OBJECT_BYTES_MAX, "created objects")?;
    let records = get_list(r, PAGE_RECORDS_MAX, PAGE_RECORD_BYTES_MAX, "page records")?;
    let pages = get_pages(r)?;
    Ok(PageCommit { txn, mode, reads, writes, created, records, pages })
}
