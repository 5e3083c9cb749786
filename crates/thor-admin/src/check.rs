//! The offline consistency checker of a database directory: [`check`], and [`repair_and_check`]
//! for a database that does not open because of a log record recovery cannot read. `thor check
//! DIR` prints its [`Report`]; `thor::check(path)` returns it; the simulation's acked harness
//! checks every database it recovers with it.
//!
//! ```text
//! thor check DIR [--json] [--progress] [--max-problems N] [--repair]
//! ```
//!
//! # What state is checked
//!
//! The *committed state*: what the next open would serve after recovery. That is the page
//! file as installed (with the double-write buffer's intact copies where recovery would write
//! them back), plus the log's records from the superblock's checkpoint on replayed over it,
//! exactly as recovery replays them: each record's objects replace (or, when created, add)
//! the object with that oref, and pages past the superblock's allocation page start empty
//! (they hold only what the log creates in them). Nothing is replayed into memory page by
//! page; instead the checker keeps, for every object the log writes after the checkpoint, its
//! class, size and where it was written, and checks each version on its own. Objects are never
//! deleted and keep their class and size for life, so an object that exists once exists in
//! the committed state, and a reference that was valid in any version is valid there.
//!
//! ```text
//!   superblock ─► log pass 1 ─► page pass 1 ─────────► page pass 2 ─────────► log pass 2
//!   page size,    records,      checksums, offset      every installed        every version
//!   checkpoint,   versions      tables, which objects  object: class, shape,  after the
//!   allocation    after the     exist, class objects,  references             checkpoint: class,
//!   page          checkpoint    versions vs installed                         shape, references
//! ```
//!
//! Checked, with where each problem is (page and oid, or log segment, byte offset and LSN):
//!
//! - the superblock (magic, version, checksum, fields), and that its root exists;
//! - every allocated page (1 up to the allocation page): present in the page file, its
//!   checksum, its page id, its header and offset table (`PageView::parse_stored`), no empty
//!   oid below its slot count (objects are allocated in order and never deleted), zeros in its
//!   free space, a version no newer than the log's last record; page 1's built-in classes
//!   and root;
//! - every object, installed or in the log: its class word names a class object whose
//!   descriptor decodes, its size and count match the class (`ClassDesc::check_shape`), a
//!   `thor.Large` root is well formed, and every reference word is null or names an object of
//!   the committed state (page in range, oid present);
//! - the log: segment names, headers and LSN sequence, every record's length, checksum, LSN
//!   and batch index (`thor_storage::log::inspect`, the rules of recovery), every commit
//!   record's layout (`thor_server::record::decode_any`, two-phase records included); that it still holds every record from the
//!   checkpoint on; that the log's versions keep the class and size of the object they replace,
//!   write only objects that exist, create no object twice and change no class or built-in.
//!
//! Records below the checkpoint are checked as records (checksums, layout) but their objects
//! are not judged: they are installed, and the page passes judge the installed versions.
//!
//! *Not problems, notes:* a torn log tail (the last flush batch, never acknowledged; the next
//! open cuts it), an unfinished newest segment header, a page whose in-place copy is torn or
//! older than the double-write buffer's intact copy (the next open writes it back), pages in
//! the page file past the allocation page (opened after the checkpoint and installed early,
//! or left by an unfinished bulk load; recovery rebuilds them from the log), and `.torn` files
//! kept by an earlier recovery. References into a page that cannot be read are not judged
//! (the page is the problem, reported once), nor are instances of a malformed class.
//!
//! # The report
//!
//! One line per problem, `where: what`, then notes (`note: where: what`), then a summary with
//! the counts:
//!
//! ```text
//! page 17 oid 3: reference word 2 (object byte 12) names 9999.0, but page 9999 is beyond the last page (812)
//! log segment log.0000000000000001 offset 7624: damaged record (LSN 2 expected here): ...
//! note: log segment log.0000000000000001 offset 7960: torn tail of 168 bytes from LSN 4 (...): ...
//! thor check DIR: 812 pages, 1013408 objects, ...; 1 log segment, 4 log records (65 objects) checked: 2 problems
//! ```
//!
//! `--json` ([`Report::to_json`]) prints the same as one document: `checked` (the counts), `facts` (page size,
//! checkpoint, allocation and last page, the log's LSNs), `problems` and `notes` (each with a
//! structured `place`, the `message` and the `text` line) and their totals, `exit_status`.
//!
//! # `--repair`: records recovery cannot read
//!
//! A log record whose checksum passed but whose payload the record decoder refuses (a bug of
//! the build that wrote it, or a format from another version) stops recovery: the database
//! does not open, and the error names the record and this command. `--repair` sets each such
//! record aside: its bytes go to `log.<lsn>.aside` beside the log with a report
//! (`log.<lsn>.aside.txt`) of what it held, what was set aside and what was kept, and the
//! record that keeps whatever is well formed of it takes its place under the same LSN
//! (`thor_server::record::salvage`); then the whole check runs again and its report is the
//! answer. Later records are kept; why, and what they may depend on, is in
//! `check::repair`. Only `--repair` writes (besides the lock), and only when there is a record to
//! set aside; damaged bytes that fail their checksum are not its business (see the log's
//! torn-tail and corruption rules in `thor_storage::log`).
//!
//! # Nothing is written (without `--repair`)
//!
//! The checker opens the directory read-only (`FileDisk::open_read_only`, the open
//! `thor::open_read_only` uses): a shared lock on the directory, so that no server (or other
//! writer) can change the files under it and a database in use is refused, while other
//! readers may share it. Not a byte is written, not even the `LOCK` file's holder line: it
//! checks a database on a full disk or a read-only mount. Every file is read through
//! [`thor_storage::ReadOnlyDisk`], a `Disk` that opens files with `File::open` (read-only
//! descriptors) and refuses every create, write, truncate, sync, rename and remove with an
//! error; the log is read with `thor_storage::log::inspect`, which reports a torn tail instead
//! of cutting it.
//!
//! # Memory
//!
//! Bounded by the database's shape, not its bytes: a bitmap of the 512 oids of every page up
//! to the last page plus a state byte (65 bytes per page: 0.8 % of an 8 KiB-page database,
//! at most 272 MiB for the whole 2^22-page oref space); one entry (under 100 bytes) per object
//! the log writes after the checkpoint (the objects recovery's MOB would hold); the decoded
//! class descriptors; the double-write buffer's intact pages (one install round); two page
//! buffers; the log reader's chunk (1 MiB) plus the largest record; and at most
//! `--max-problems` kept problems and notes (all are counted).
//!
//! # Exit status
//!
//! 0: the database is consistent (notes may be printed). 1: problems were found (each on its
//! own line). 2: the database could not be checked (not a database, in use, an I/O error).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use thor_core::le::u32_at;
use thor_core::{
    ClassDesc, FormatError, Lsn, NotAnObject, Oid, Oref, PageId, PageView, RawRef, builtin, large,
};
use thor_server::dwb::DoubleWrite;
use thor_server::io::PAGE_FILE;
use thor_server::record;
use thor_server::superblock::{self, Superblock, SuperblockError};
use thor_storage::log::inspect::{Finding, Inspection, RecordAt, inspect};
use thor_storage::{Disk, FileDisk, LogOptions, PageFile, StorageError};

mod repair;

pub use repair::Repaired;

/// Why the database could not be checked at all (`thor check`'s exit status 2). Each variant
/// says what to do; the message is the one line `thor check` prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The path is not a database directory (missing, a file, no superblock file, no thor
    /// magic): point the check at a database's directory.
    #[error("{0}")]
    NotADatabase(String),
    /// Another process (a server, a program with `thor::open`) holds the database: stop it,
    /// or check a backup of it.
    #[error(
        "the database is in use by {holder}; stop it first (a database is checked only while \
         nothing writes it)"
    )]
    InUse {
        /// The lock holder, as its `LOCK` file names it.
        holder: String,
    },
    /// The superblock names a format version this build does not read: check it with the
    /// build that wrote it.
    #[error("{0}")]
    Version(String),
    /// Reading the files (or, repairing, writing them) failed: the storage's fault, not the
    /// database's; fix the storage and check again.
    #[error("{0}")]
    Storage(String),
}

impl From<StorageError> for CheckError {
    fn from(e: StorageError) -> CheckError {
        CheckError::Storage(e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

/// Where a problem is.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Place {
    /// The directory as a whole (a missing file, leftovers).
    Directory,
    /// The superblock file.
    Superblock,
    /// The page file as a file (its length).
    PageFile,
    /// A page, or an object or offset-table entry in it.
    Page {
        /// The page id.
        page: u32,
        /// The object id, when the problem is about one object or offset-table entry.
        #[serde(skip_serializing_if = "Option::is_none")]
        oid: Option<u16>,
    },
    /// A log segment, a record in it, or an object in that record.
    Log {
        /// The segment file.
        segment: String,
        /// The byte offset of the record (or 0 for the segment as a whole).
        offset: u64,
        /// The record's LSN, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        lsn: Option<u64>,
        /// The object of the record the problem is about (`page.oid`).
        #[serde(skip_serializing_if = "Option::is_none")]
        oref: Option<String>,
    },
}

impl Place {
    fn page(page: u32) -> Place {
        Place::Page { page, oid: None }
    }

    fn object(page: u32, oid: u16) -> Place {
        Place::Page { page, oid: Some(oid) }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Directory => write!(f, "database"),
            Place::Superblock => write!(f, "superblock"),
            Place::PageFile => write!(f, "page file"),
            Place::Page { page, oid: None } => write!(f, "page {page}"),
            Place::Page { page, oid: Some(oid) } => write!(f, "page {page} oid {oid}"),
            Place::Log { segment, offset, lsn, oref } => {
                write!(f, "log segment {segment} offset {offset}")?;
                if let Some(lsn) = lsn {
                    write!(f, " (LSN {lsn})")?;
                }
                if let Some(oref) = oref {
                    write!(f, " object {oref}")?;
                }
                Ok(())
            }
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Where.
    pub place: Place,
    /// What is wrong (or, for a note, what recovery will do).
    pub message: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

/// What was looked at.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    /// Allocated pages read and checked.
    pub pages: u64,
    /// Installed objects checked.
    pub objects: u64,
    /// Reference words judged (installed objects and log versions).
    pub references: u64,
    /// Class objects decoded (built-in ones included).
    pub classes: u64,
    /// Log segment files.
    pub log_segments: u64,
    /// Intact log records checked.
    pub log_records: u64,
    /// Object versions of records from the checkpoint on, checked.
    pub log_objects: u64,
}

/// The facts the checker worked from, for the JSON report and the curious.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    /// Bytes per page.
    pub page_size: usize,
    /// The superblock's checkpoint: the first record recovery replays.
    pub checkpoint: u64,
    /// The superblock's allocation page: the last page installed as of the checkpoint.
    pub alloc_page: u32,
    /// The last page of the committed state (the allocation page, or the last page the log
    /// creates objects in).
    pub last_page: u32,
    /// Whole pages in the page file (page 0, never used, included).
    pub page_file_pages: u32,
    /// The first LSN of the oldest log segment.
    pub log_first_lsn: Option<u64>,
    /// The LSN after the log's last intact record.
    pub log_next_lsn: Option<u64>,
}

/// The outcome of a check: what was looked at, and the problems and notes found.
#[derive(Debug, Default)]
pub struct Report {
    /// The directory checked.
    dir: String,
    /// What was looked at.
    counts: Counts,
    /// What the check worked from.
    facts: Facts,
    /// Problems, at most `max` of them kept.
    problems: Vec<Entry>,
    /// All problems found.
    problems_total: u64,
    /// Notes, at most `max` of them kept.
    notes: Vec<Entry>,
    /// All notes.
    notes_total: u64,
    /// How many problems and notes to keep.
    max: usize,
}

impl Report {
    fn problem(&mut self, place: Place, message: impl Into<String>) {
        self.problems_total += 1;
        if self.problems.len() < self.max {
            self.problems.push(Entry { place, message: message.into() });
        }
    }

    fn note(&mut self, place: Place, message: impl Into<String>) {
        self.notes_total += 1;
        if self.notes.len() < self.max {
            self.notes.push(Entry { place, message: message.into() });
        }
    }

    /// Whether no problem was found (notes do not count).
    pub fn is_healthy(&self) -> bool {
        self.problems_total == 0
    }

    /// The problems kept (at most `max_problems`), in the order found.
    pub fn problems(&self) -> &[Entry] {
        &self.problems
    }

    /// Every problem found, kept or not.
    pub fn problems_total(&self) -> u64 {
        self.problems_total
    }

    /// The notes kept (what recovery will do on the next open: a torn tail cut, a page
    /// written back), in the order found.
    pub fn notes(&self) -> &[Entry] {
        &self.notes
    }

    /// Every note, kept or not.
    pub fn notes_total(&self) -> u64 {
        self.notes_total
    }

    /// What was looked at.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// What the check worked from.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// `thor check`'s exit status for this report: 0 healthy, 1 problems.
    pub fn exit_status(&self) -> i32 {
        if self.problems_total == 0 { 0 } else { 1 }
    }

    /// The report as text: one line per problem, then notes, then the summary line.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        for p in &self.problems {
            writeln!(out, "{p}")?;
        }
        if self.problems_total > self.problems.len() as u64 {
            writeln!(
                out,
                "... and {} more problems (raise --max-problems to see them)",
                self.problems_total - self.problems.len() as u64
            )?;
        }
        for n in &self.notes {
            writeln!(out, "note: {n}")?;
        }
        if self.notes_total > self.notes.len() as u64 {
            writeln!(
                out,
                "note: ... and {} more notes",
                self.notes_total - self.notes.len() as u64
            )?;
        }
        let c = &self.counts;
        let verdict = match self.problems_total {
            0 => "no problems".to_string(),
            n => count(n, "problem"),
        };
        writeln!(
            out,
            "thor check {}: {}, {}, {}; {}, {} ({}) checked: {verdict}",
            self.dir,
            count(c.pages, "page"),
            count(c.objects, "object"),
            count(c.references, "reference"),
            count(c.log_segments, "log segment"),
            count(c.log_records, "log record"),
            count(c.log_objects, "object"),
        )
    }

    /// The report as one JSON document (`thor check --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let entries = |v: &[Entry]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|e| {
                    serde_json::json!({
                        "place": e.place,
                        "message": e.message,
                        "text": e.to_string(),
                    })
                })
                .collect()
        };
        serde_json::json!({
            "dir": self.dir,
            "exit_status": self.exit_status(),
            "healthy": self.problems_total == 0,
            "checked": self.counts,
            "facts": self.facts,
            "problems_total": self.problems_total,
            "problems": entries(&self.problems),
            "notes_total": self.notes_total,
            "notes": entries(&self.notes),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The check.

/// Checks the database in `dir`; see the module documentation. The directory is opened
/// read-only (`FileDisk::open_read_only`: a shared lock, nothing written, not even `LOCK`).
/// `Ok` whatever the database holds (the report says whether it is healthy); `Err` when it
/// cannot be checked at all.
pub fn check(
    dir: &Path,
    options: &CheckOptions,
    progress: &dyn Progress,
) -> Result<Report, CheckError> {
    must_be_database(dir)?;
    let disk = FileDisk::open_read_only(dir).map_err(in_use)?;
    check_locked(&disk, dir.display().to_string(), options.max_problems, progress)
}

/// Checks the database on `disk`, named `shown` in the report: the same check as [`check`],
/// for a database that is not in a directory of its own (the simulation's `MemDisk` after a
/// crash and recovery). The caller guarantees that nothing writes to `disk` meanwhile; no lock
/// is taken.
pub fn check_disk(
    disk: &dyn Disk,
    shown: &str,
    options: &CheckOptions,
    progress: &dyn Progress,
) -> Result<Report, CheckError> {
    check_locked(disk, shown.to_string(), options.max_problems, progress)
}

/// Sets aside the log records of `dir` recovery cannot read, then checks the database; see
/// `check::repair` (its module documentation). The directory is locked for writing meanwhile.
/// Returns what was set aside (empty: every record decodes) and the check's report.
pub fn repair_and_check(
    dir: &Path,
    options: &CheckOptions,
    progress: &dyn Progress,
) -> Result<(Vec<Repaired>, Report), CheckError> {
    let max = options.max_problems;
    must_be_database(dir)?;
    let locked = FileDisk::open_locked(dir, false, "thor check --repair").map_err(in_use)?;
    let sb = thor_server::io::read_superblock(&locked).map_err(|e| {
        CheckError::Storage(format!(
            "the superblock cannot be read ({e}): --repair sets aside log records, and needs \
             the page size it names"
        ))
    })?;
    let repaired = repair::repair(&locked, sb.page_size)?;
    let report = check_locked(&locked.read_only(), dir.display().to_string(), max, progress)?;
    Ok((repaired, report))
}

/// Fails unless `dir` is a directory holding a database's superblock: a directory that is not
/// a database gets a clear message before anything is opened.
fn must_be_database(dir: &Path) -> Result<(), CheckError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(CheckError::NotADatabase("not a directory".to_string())),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(CheckError::NotADatabase("no such directory".to_string()));
        }
        Err(e) => return Err(CheckError::Storage(e.to_string())),
    }
    if !dir.join(superblock::FILE).is_file() {
        return Err(CheckError::NotADatabase(format!(
            "not a thor database (no {} file in the directory)",
            superblock::FILE
        )));
    }
    Ok(())
}

/// A storage error opening the directory, as a reason the database cannot be checked.
fn in_use(e: StorageError) -> CheckError {
    match e {
        StorageError::Locked { holder, .. } => CheckError::InUse { holder },
        other => CheckError::Storage(other.to_string()),
    }
}

/// Checks the database in `disk` (its directory locked), shown as `shown`.
fn check_locked(
    disk: &dyn Disk,
    shown: String,
    max: usize,
    progress: &dyn Progress,
) -> Result<Report, CheckError> {
    let mut report = Report { dir: shown, max, ..Report::default() };
    let Some(sb) = read_superblock(disk, &mut report)? else { return Ok(report) };
    let mut checker = Checker::new(disk, sb, report, progress)?;
    checker.run()?;
    Ok(checker.report)
}

/// Reads and judges the superblock. `Ok(None)`: it is damaged (a problem is reported) and
/// nothing else can be checked without its page size.
fn read_superblock(disk: &dyn Disk, report: &mut Report) -> Result<Option<Superblock>, CheckError> {
    let f = disk.open(superblock::FILE, false)?;
    let len = f.len()?;
    // A little more than a superblock, to tell "too long" from "right length".
    let mut buf = vec![0u8; len.min(superblock::BYTES as u64 * 2) as usize];
    let n = f.read_at(0, &mut buf)?;
    buf.truncate(n);
    let sb = match Superblock::decode(&buf) {
        Ok(sb) => sb,
        Err(SuperblockError::BadMagic) => {
            return Err(CheckError::NotADatabase(
                "not a thor database (the superblock file has no thor magic)".to_string(),
            ));
        }
        Err(e @ SuperblockError::Version { .. }) => {
            return Err(CheckError::Version(e.to_string()));
        }
        Err(e) => {
            let why = match e {
                SuperblockError::Corrupt(why) => why.to_string(),
                other => other.to_string(),
            };
            report.problem(
                Place::Superblock,
                format!("damaged ({why}); nothing else can be checked without the page size"),
            );
            return Ok(None);
        }
    };
    if sb.checkpoint == Lsn::ZERO {
        report.problem(Place::Superblock, "checkpoint LSN 0: LSNs start at 1");
    }
    if sb.root.is_null() {
        report.problem(Place::Superblock, "the root oref is null");
    }
    Ok(Some(sb))
}

/// What the check reports of its progress: the caller decides how it is shown (`thor check`
/// draws bars on stderr; the facade and the simulation pass [`NoProgress`]).
pub trait Progress {
    /// A phase of `len` steps (`None`: a count not known in advance), labelled `what`.
    fn phase(&self, what: &str, len: Option<u64>) -> Box<dyn Phase>;
}

/// One phase of a check in progress.
pub trait Phase {
    /// `n` more steps done.
    fn inc(&self, n: u64);
    /// The phase is over.
    fn finish(&self);
}

/// Progress shown nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _what: &str, _len: Option<u64>) -> Box<dyn Phase> {
        Box::new(NoProgress)
    }
}

impl Phase for NoProgress {
    fn inc(&self, _n: u64) {}
    fn finish(&self) {}
}

/// How a check runs.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// How many problems and as many notes the report keeps (all are counted).
    pub max_problems: usize,
}

impl Default for CheckOptions {
    fn default() -> CheckOptions {
        CheckOptions { max_problems: 1000 }
    }
}

/// How a page of the committed state is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageState {
    /// Past the allocation page: it holds only what the log creates in it.
    Fresh,
    /// Its in-place image is intact.
    InPlace,
    /// Its image comes from the double-write buffer (recovery writes it back).
    FromDwb,
    /// It cannot be read (reported); references into it are not judged.
    Unreadable,
}

/// The installed image of a page, as [`Checker::installed_image`] finds it.
#[derive(Debug)]
enum Image {
    /// The in-place copy, intact.
    InPlace(Vec<u8>),
    /// The double-write buffer's intact copy, which recovery writes back; why the in-place
    /// copy is not used.
    FromDwb(Vec<u8>, String),
    /// Past the end of the page file (or no page file).
    Missing,
    /// Damaged: the oid concerned, if one, and what is wrong.
    Bad(Option<u16>, String),
}

/// What the log writes to one object from the checkpoint on.
#[derive(Debug, Clone)]
struct LogObject {
    /// The class word of its first version in the log.
    class: u32,
    /// The size of its first version in the log.
    len: usize,
    /// The LSN that created it, if a record from the checkpoint on did.
    created: Option<Lsn>,
    /// Where its first version is: segment index (into `Checker::segments`), record offset
    /// and LSN.
    first: (usize, u64, Lsn),
    /// Whether the page file holds an installed version (found by the first page pass).
    installed: bool,
}

/// What the first log pass gathers while the log is read (the reader's callback cannot
/// borrow the checker).
struct LogPass1 {
    /// What the log writes from the checkpoint on, by oref.
    log: BTreeMap<Oref, LogObject>,
    /// Problems found, reported once the pass is over.
    problems: Vec<(Place, String)>,
    /// Class objects the log creates.
    new_classes: Vec<(Oref, Option<Arc<ClassDesc>>)>,
    /// The last page the log creates objects in.
    last_created_page: u32,
}

impl LogPass1 {
    /// Judges one object of the record `r` (in segment number `seg`) from the checkpoint on,
    /// and notes it.
    fn object(
        &mut self,
        r: &RecordAt<'_>,
        seg: usize,
        o: &record::RecordObject<'_>,
        page_size: usize,
    ) {
        let place = || Place::Log {
            segment: r.segment.to_string(),
            offset: r.offset,
            lsn: Some(r.lsn.0),
            oref: Some(format!("{}", o.oref)),
        };
        let class = u32_at(o.data, 0);
        let max = thor_core::limits::max_object_bytes(page_size);
        if o.data.len() > max {
            self.problems.push((
                place(),
                format!(
                    "{} bytes, more than a page of {page_size} bytes holds ({max})",
                    o.data.len()
                ),
            ));
        }
        if builtin::is_builtin(o.oref) && o.oref != builtin::ROOT {
            self.problems
                .push((place(), "writes a built-in class, which is immutable".to_string()));
        }
        if o.created {
            let page = o.oref.page_raw();
            self.last_created_page = self.last_created_page.max(page);
            if class == builtin::META.raw() {
                match ClassDesc::from_class_object(o.data) {
                    Ok(d) => self.new_classes.push((o.oref, Some(Arc::new(d)))),
                    Err(e) => {
                        self.problems.push((place(), format!("malformed class object: {e}")));
                        self.new_classes.push((o.oref, None));
                    }
                }
            }
        } else if class == builtin::META.raw() {
            self.problems.push((
                place(),
                "a new version of a class object: classes are immutable".to_string(),
            ));
        }
        match self.log.get_mut(&o.oref) {
            None => {
                self.log.insert(
                    o.oref,
                    LogObject {
                        class,
                        len: o.data.len(),
                        created: o.created.then_some(r.lsn),
                        first: (seg, r.offset, r.lsn),
                        installed: false,
                    },
                );
            }
            Some(e) => {
                if o.created {
                    let why = match e.created {
                        Some(l) => format!("created again (first created at LSN {l})"),
                        None => format!(
                            "created after a version of it was written at LSN {}",
                            e.first.2
                        ),
                    };
                    self.problems.push((place(), why));
                }
                if class != e.class || o.data.len() != e.len {
                    self.problems.push((
                        place(),
                        format!(
                            "class word {} and size {} differ from its version at LSN {} \
                             (class word {}, {} bytes): objects keep their class and \
                             size for life",
                            word(class),
                            o.data.len(),
                            e.first.2,
                            word(e.class),
                            e.len
                        ),
                    ));
                }
            }
        }
    }
}

/// The state of a check in progress.
struct Checker<'d> {
    /// The directory, read-only.
    disk: &'d dyn Disk,
    /// The superblock.
    sb: Superblock,
    /// Bytes per page.
    page_size: usize,
    /// The allocation page: pages 1 to this are read from the page file.
    alloc: u32,
    /// The page file, if present.
    pages: Option<PageFile>,
    /// Intact pages of the double-write buffer.
    dwb: HashMap<u32, Vec<u8>>,
    /// The log's segment names, as met (indexes in `LogObject::first`).
    segments: Vec<String>,
    /// What the log writes from the checkpoint on, by oref (ordered: reports are
    /// deterministic).
    log: BTreeMap<Oref, LogObject>,
    /// The log's first and next LSN.
    log_lsns: (Option<Lsn>, Option<Lsn>),
    /// The last page of the committed state.
    last_page: u32,
    /// For every page up to `last_page`, a bitmap of its oids that exist in the committed
    /// state.
    exists: Vec<[u64; 8]>,
    /// For every page up to `last_page`, how it is known.
    state: Vec<PageState>,
    /// Class objects of the committed state by oref; `None` for a class object whose
    /// descriptor does not decode (reported once; its instances are not judged).
    classes: HashMap<Oref, Option<Arc<ClassDesc>>>,
    /// The report being written.
    report: Report,
    /// Where progress goes.
    progress: &'d dyn Progress,
}

impl<'d> Checker<'d> {
    fn new(
        disk: &'d dyn Disk,
        sb: Superblock,
        mut report: Report,
        progress: &'d dyn Progress,
    ) -> Result<Checker<'d>, CheckError> {
        let page_size = sb.page_size;
        let alloc = sb.alloc_page.map_or(1, PageId::get).max(1);
        report.facts.page_size = page_size;
        report.facts.checkpoint = sb.checkpoint.0;
        report.facts.alloc_page = alloc;
        let pages = match PageFile::open(disk, PAGE_FILE, page_size, false) {
            Ok(p) => Some(p),
            Err(e) if e.is_not_found() => {
                report.problem(Place::Directory, format!("the page file `{PAGE_FILE}` is missing"));
                None
            }
            Err(e) => return Err(e.into()),
        };
        let mut classes = HashMap::new();
        for (oref, desc) in builtin::classes() {
            classes.insert(*oref, Some(Arc::new(desc.clone())));
        }
        Ok(Checker {
            disk,
            sb,
            page_size,
            alloc,
            pages,
            dwb: HashMap::new(),
            segments: Vec::new(),
            log: BTreeMap::new(),
            log_lsns: (None, None),
            last_page: alloc,
            exists: Vec::new(),
            state: Vec::new(),
            classes,
            report,
            progress,
        })
    }

    fn run(&mut self) -> Result<(), CheckError> {
        self.read_page_file_shape()?;
        self.read_dwb()?;
        self.log_pass_1()?;
        self.build_existence();
        self.page_pass_1()?;
        self.after_page_pass_1();
        self.page_pass_2()?;
        self.log_pass_2()?;
        self.final_checks()?;
        self.report.counts.classes = self.classes.values().filter(|c| c.is_some()).count() as u64;
        Ok(())
    }

    /// The page file's length: whole pages, and what lies past the allocation page.
    fn read_page_file_shape(&mut self) -> Result<(), CheckError> {
        let Some(pages) = &self.pages else { return Ok(()) };
        let n = pages.len_pages()?;
        self.report.facts.page_file_pages = n;
        let file_len = self.disk.open(PAGE_FILE, false)?.len()?;
        let partial = file_len % self.page_size as u64;
        // Page ids 0..n are whole; page n is partial if `partial > 0`.
        if partial > 0 && n > self.alloc {
            self.report.note(
                Place::PageFile,
                format!(
                    "ends with {partial} bytes of a partial page {n}, past the allocation page \
                     ({}): not part of the database",
                    self.alloc
                ),
            );
        }
        if n > self.alloc + 1 {
            self.report.note(
                Place::PageFile,
                format!(
                    "holds {} past the superblock's allocation page {} (opened by records from \
                     the checkpoint on and installed early, or left by an unfinished bulk load); \
                     they are not read: recovery rebuilds those pages from the log",
                    count(u64::from(n - self.alloc - 1), "page"),
                    self.alloc
                ),
            );
        }
        Ok(())
    }

    /// The double-write buffer's intact pages (what recovery may write back).
    fn read_dwb(&mut self) -> Result<(), CheckError> {
        if !self.disk.exists(thor_server::dwb::FILE)? {
            return Ok(());
        }
        let dwb = DoubleWrite::open(self.disk, self.page_size)?;
        for (id, img) in dwb.intact_pages()? {
            self.dwb.insert(id.get(), img);
        }
        Ok(())
    }

    /// Log pass 1: every record checked and decoded; the objects of records from the
    /// checkpoint on indexed; class objects the log creates decoded.
    fn log_pass_1(&mut self) -> Result<(), CheckError> {
        let bar = self.progress.phase("log", None);
        let checkpoint = self.sb.checkpoint;
        let mut segments = std::mem::take(&mut self.segments);
        let mut pass = LogPass1 {
            log: std::mem::take(&mut self.log),
            problems: Vec::new(),
            new_classes: Vec::new(),
            last_created_page: 0,
        };
        let page_size = self.page_size;
        let mut wpl = thor_study::wpl_log::WplObjects::default();
        let inspection = inspect(self.disk, &LogOptions::default(), |r: RecordAt<'_>| {
            bar.inc(1);
            if segments.last().is_none_or(|s| s != r.segment) {
                segments.push(r.segment.to_string());
            }
            let seg = segments.len() - 1;
            let record_place = || Place::Log {
                segment: r.segment.to_string(),
                offset: r.offset,
                lsn: Some(r.lsn.0),
                oref: None,
            };
            let mut objects = Vec::new();
            // WPL's records (page images, commits, checkpoints) are decoded and checked too;
            // a WPL commit's objects are its images' written ones and its created ones.
            let owned = match wpl.feed(r.lsn, r.payload, page_size) {
                Ok(Some(owned)) => owned,
                Ok(None) => {
                    if let Err(e) = record::decode_any(r.payload, |o| objects.push(o)) {
                        pass.problems.push((record_place(), format!("{e}")));
                        return;
                    }
                    Vec::new()
                }
                Err(e) => {
                    pass.problems.push((record_place(), e));
                    return;
                }
            };
            objects.extend(owned.iter().map(|w| record::RecordObject {
                oref: w.oref,
                created: w.created,
                data: &w.data,
            }));
            if r.lsn < checkpoint {
                return;
            }
            for o in &objects {
                pass.object(&r, seg, o, page_size);
            }
        })?;
        bar.finish();
        self.segments = segments;
        self.log = pass.log;
        for (place, why) in pass.problems {
            self.report.problem(place, why);
        }
        for (oref, desc) in pass.new_classes {
            self.classes.entry(oref).or_insert(desc);
        }
        self.last_page = self.alloc.max(pass.last_created_page);
        self.log_findings(&inspection);
        Ok(())
    }

    /// Reports what inspecting the log found, and what it means for the checkpoint.
    fn log_findings(&mut self, ins: &Inspection) {
        self.report.counts.log_segments = ins.segments.len() as u64;
        self.report.counts.log_records = ins.records;
        self.report.facts.log_first_lsn = ins.first_lsn.map(|l| l.0);
        self.report.facts.log_next_lsn = ins.next_lsn.map(|l| l.0);
        self.report.facts.last_page = self.last_page;
        self.log_lsns = (ins.first_lsn, ins.next_lsn);
        for f in &ins.findings {
            let place = Place::Log {
                segment: f.segment().to_string(),
                offset: f.offset(),
                lsn: None,
                oref: None,
            };
            if f.is_damage() {
                self.report.problem(place, f.to_string());
            } else if let Finding::TornTail { first_lost_lsn, .. } = f
                && Some(*first_lost_lsn) == ins.first_lsn
            {
                self.report.note(
                    place,
                    format!(
                        "{f}; the cut leaves the log without any record: if commits were \
                         acknowledged, keep a copy of the directory before opening it"
                    ),
                );
            } else {
                self.report.note(place, f.to_string());
            }
        }
        let checkpoint = self.sb.checkpoint;
        match (ins.first_lsn, ins.next_lsn) {
            (Some(first), Some(next)) => {
                if checkpoint < first {
                    self.report.problem(
                        Place::Directory,
                        format!(
                            "the log no longer holds the records from the checkpoint (LSN \
                             {checkpoint}) on: its oldest segment starts at LSN {first}"
                        ),
                    );
                }
                if checkpoint > next {
                    self.report.problem(
                        Place::Directory,
                        format!(
                            "the superblock's checkpoint (LSN {checkpoint}) is past the log's \
                             end (LSN {next})"
                        ),
                    );
                }
            }
            // Segments whose newest is unreadable: that is the problem, reported above.
            _ if !ins.segments.is_empty() => {}
            _ if checkpoint > Lsn(1) => self.report.problem(
                Place::Directory,
                format!(
                    "the log is missing (no log segments), but the checkpoint is LSN \
                     {checkpoint}: recovery would start a new log at LSN 1 and refuse to open"
                ),
            ),
            _ => self
                .report
                .note(Place::Directory, "no log segments: the next open starts an empty log"),
        }
        if let Ok(names) = self.disk.list() {
            for name in names
                .iter()
                .filter(|n| n.starts_with("log.") && n.contains(".aside") && !n.ends_with(".txt"))
            {
                self.report.note(
                    Place::Directory,
                    format!(
                        "{name} keeps the bytes of a log record `thor check --repair` set aside \
                         (what it held and what was kept: {name}.txt; evidence, not part of the \
                         log)"
                    ),
                );
            }
            for name in names.iter().filter(|n| n.starts_with("log.") && n.contains(".torn")) {
                self.report.note(
                    Place::Directory,
                    format!(
                        "{name} keeps the bytes of a torn log tail an earlier open cut off \
                         (evidence, not part of the log)"
                    ),
                );
            }
        }
    }

    /// Sizes the existence tables to the last page and marks what the log creates.
    fn build_existence(&mut self) {
        let n = self.last_page as usize + 1;
        self.exists = vec![[0u64; 8]; n];
        self.state = vec![PageState::Fresh; n];
        for (oref, o) in &self.log {
            if o.created.is_some() {
                set_bit(&mut self.exists, *oref);
            }
        }
    }

    /// The installed image of allocated page `p`, as recovery would see it: the in-place
    /// copy, or the double-write buffer's intact copy where recovery writes that back.
    fn installed_image(&self, p: u32) -> Result<Image, CheckError> {
        let id = PageId::new(p).expect("allocated pages are page ids");
        let mut buf = vec![0u8; self.page_size];
        let in_place = match &self.pages {
            None => Image::Missing,
            Some(pages) => match pages.read(p, &mut buf) {
                Ok(true) => match PageView::parse_stored(&buf, id) {
                    Ok(_) => Image::InPlace(buf),
                    Err(e) => {
                        let (oid, why) = describe_page_error(&e, self.page_size);
                        Image::Bad(oid, why)
                    }
                },
                Ok(false) => Image::Missing,
                Err(StorageError::UnexpectedEof { .. }) => {
                    Image::Bad(None, "cut short by the end of the page file".to_string())
                }
                Err(e) => return Err(e.into()),
            },
        };
        let Some(img) = self.dwb.get(&p) else { return Ok(in_place) };
        let good = PageView::parse(img).map_or(Lsn::ZERO, |v| v.version());
        let why = match &in_place {
            Image::InPlace(b) if PageView::parse(b).is_ok_and(|v| v.version() >= good) => {
                return Ok(in_place);
            }
            Image::InPlace(b) => format!(
                "the in-place copy (version {}) is older",
                PageView::parse(b).map_or(Lsn::ZERO, |v| v.version())
            ),
            Image::Missing => "the in-place copy is missing".to_string(),
            Image::Bad(_, why) => format!("the in-place copy is damaged ({why})"),
            Image::FromDwb(..) => unreachable!("made only here"),
        };
        Ok(Image::FromDwb(img.clone(), why))
    }

    /// Page pass 1: every allocated page's checksum and structure; which objects exist;
    /// class objects; the log's versions against the installed ones.
    fn page_pass_1(&mut self) -> Result<(), CheckError> {
        let bar = self.progress.phase("pages (1 of 2)", Some(u64::from(self.alloc)));
        let next_lsn = self.log_lsns.1;
        // Runs of allocated pages past the end of the page file, reported once each.
        let mut missing: Vec<(u32, u32)> = Vec::new();
        for p in 1..=self.alloc {
            bar.inc(1);
            let image = self.installed_image(p)?;
            let (img, how) = match image {
                Image::InPlace(b) => (b, PageState::InPlace),
                Image::FromDwb(b, why) => {
                    let v = PageView::parse(&b).map_or(Lsn::ZERO, |v| v.version());
                    self.report.note(
                        Place::page(p),
                        format!(
                            "{why}; the double-write buffer holds an intact copy (version {v}) \
                             that the next open writes back, and that copy is checked"
                        ),
                    );
                    (b, PageState::FromDwb)
                }
                Image::Missing => {
                    self.state[p as usize] = PageState::Unreadable;
                    match missing.last_mut() {
                        Some((_, last)) if *last + 1 == p => *last = p,
                        _ => missing.push((p, p)),
                    }
                    continue;
                }
                Image::Bad(oid, why) => {
                    self.state[p as usize] = PageState::Unreadable;
                    self.report.problem(Place::Page { page: p, oid }, why);
                    continue;
                }
            };
            self.state[p as usize] = how;
            let v = PageView::parse(&img).expect("checked by installed_image");
            self.page_fields(p, &v, next_lsn);
            let id = PageId::new(p).expect("page id");
            for i in 0..v.slot_count() {
                let oid = Oid::new(i as u16).expect("slot count is at most 512");
                let oref = Oref::new(id, oid);
                let Some(obj) = v.object(oid) else {
                    if self.log.get(&oref).is_none_or(|o| o.created.is_none()) {
                        self.report.problem(
                            Place::object(p, i as u16),
                            format!(
                                "no object, below the page's slot count {}: objects are \
                                 allocated in oid order and never deleted",
                                v.slot_count()
                            ),
                        );
                    }
                    continue;
                };
                set_bit(&mut self.exists, oref);
                self.installed_object(oref, obj);
            }
            if p == 1 {
                for oid in 0..=builtin::ROOT.oid().get() {
                    if v.object(Oid::new(oid).expect("small")).is_none() {
                        self.report.problem(
                            Place::object(1, oid),
                            "missing: page 1 holds the built-in classes (oids 0 to 4) and the \
                             root (oid 5)",
                        );
                    }
                }
            }
        }
        if self.pages.is_some() {
            for (first, last) in missing {
                let what = if first == last {
                    format!("page {first} is")
                } else {
                    format!("pages {first} to {last} are")
                };
                self.report.problem(
                    Place::PageFile,
                    format!(
                        "ends before page {first}: {what} allocated (the allocation page is {}) \
                         but missing",
                        self.alloc
                    ),
                );
            }
        }
        bar.finish();
        Ok(())
    }

    /// The fields of installed page `p` (`v`): zeros in its free space, a version no newer than
    /// the log's next LSN.
    fn page_fields(&mut self, p: u32, v: &PageView<'_>, next_lsn: Option<Lsn>) {
        if let Some(at) = nonzero_free_byte(v) {
            self.report.problem(
                Place::page(p),
                format!(
                    "free space (page bytes {} to {}) is not zero at page byte {at}: unused \
                     page bytes are always zero",
                    v.data_end(),
                    self.page_size - 2 * v.slot_count()
                ),
            );
        }
        if let Some(next) = next_lsn
            && v.version() >= next
        {
            self.report.problem(
                Place::page(p),
                format!(
                    "version LSN {} is past the log's last record (the log continues at LSN \
                     {next}): the page holds a commit the log does not",
                    v.version()
                ),
            );
        }
    }

    /// One installed object: against the log's versions of it (class and size for life), a
    /// built-in one against what every database starts with, a class object decoded.
    fn installed_object(&mut self, oref: Oref, obj: &[u8]) {
        let p = oref.page_raw();
        let i = oref.oid().index();
        let class = u32_at(obj, 0);
        if let Some(o) = self.log.get_mut(&oref) {
            o.installed = true;
            if o.class != class || o.len != obj.len() {
                let (seg, offset, lsn) = o.first;
                let why = format!(
                    "the log's version of it at LSN {lsn} (class word {}, {} bytes) \
                     differs in class or size from the installed one (class word {}, \
                     {} bytes): objects keep their class and size for life",
                    word(o.class),
                    o.len,
                    word(class),
                    obj.len()
                );
                let place = Place::Log {
                    segment: self.segments[seg].clone(),
                    offset,
                    lsn: Some(lsn.0),
                    oref: Some(oref.to_string()),
                };
                self.report.problem(place, why);
            }
        }
        if p == 1 && builtin::is_builtin(oref) {
            self.check_builtin(oref, obj);
        } else if class == builtin::META.raw() {
            let desc = match ClassDesc::from_class_object(obj) {
                Ok(d) => Some(Arc::new(d)),
                Err(e) => {
                    self.report.problem(
                        Place::object(p, i as u16),
                        format!("malformed class object: {e}"),
                    );
                    None
                }
            };
            self.classes.insert(oref, desc);
        }
    }

    /// A built-in object of page 1 must be what every database starts with.
    fn check_builtin(&mut self, oref: Oref, obj: &[u8]) {
        let place = Place::object(1, oref.oid().get());
        if oref == builtin::ROOT {
            let refs = builtin::desc(builtin::REFS).expect("builtin");
            let ok = u32_at(obj, 0) == builtin::REFS.raw()
                && refs.check_shape(obj) == Ok(builtin::ROOT_SLOTS);
            if !ok {
                self.report.problem(
                    place,
                    format!(
                        "the root must be a thor.Refs ({}) with {} slots",
                        builtin::REFS,
                        builtin::ROOT_SLOTS
                    ),
                );
            }
            return;
        }
        let expected = builtin::desc(oref).expect("oids 0 to 4 are the built-in classes");
        match ClassDesc::from_class_object(obj) {
            Ok(d) if &d == expected => {}
            Ok(d) => self.report.problem(
                place,
                format!(
                    "built-in class {} is stored as {:?}, which is not this build's",
                    expected.name(),
                    d
                ),
            ),
            Err(e) => self
                .report
                .problem(place, format!("built-in class {} is malformed: {e}", expected.name())),
        }
    }

    /// The log's versions of objects that exist neither installed nor created by the log.
    fn after_page_pass_1(&mut self) {
        let mut problems = Vec::new();
        for (oref, o) in &self.log {
            if o.created.is_some() || o.installed {
                continue;
            }
            let page = oref.page_raw();
            if self.state.get(page as usize) == Some(&PageState::Unreadable) {
                continue;
            }
            let (seg, offset, lsn) = o.first;
            let place = Place::Log {
                segment: self.segments[seg].clone(),
                offset,
                lsn: Some(lsn.0),
                oref: Some(oref.to_string()),
            };
            problems.push((place, "a new version of an object that does not exist".to_string()));
        }
        for (place, why) in problems {
            self.report.problem(place, why);
        }
    }

    /// Page pass 2: every installed object's class, shape and references.
    fn page_pass_2(&mut self) -> Result<(), CheckError> {
        let bar = self.progress.phase("pages (2 of 2)", Some(u64::from(self.alloc)));
        for p in 1..=self.alloc {
            bar.inc(1);
            if self.state[p as usize] == PageState::Unreadable {
                continue;
            }
            let img = match self.installed_image(p)? {
                Image::InPlace(b) | Image::FromDwb(b, _) => b,
                Image::Missing | Image::Bad(..) => {
                    self.report.problem(Place::page(p), "changed while it was being checked");
                    continue;
                }
            };
            self.report.counts.pages += 1;
            let v = PageView::parse(&img).expect("checked by installed_image");
            for (oid, obj) in v.objects() {
                self.report.counts.objects += 1;
                self.check_object(Place::object(p, oid.get()), obj);
            }
        }
        bar.finish();
        Ok(())
    }

    /// Log pass 2: every version of the records from the checkpoint on: class, shape and
    /// references. (Records that do not decode were reported by pass 1.)
    fn log_pass_2(&mut self) -> Result<(), CheckError> {
        let bar = self.progress.phase("log objects", None);
        let checkpoint = self.sb.checkpoint;
        let disk = self.disk;
        let page_size = self.page_size;
        let mut wpl = thor_study::wpl_log::WplObjects::default();
        inspect(disk, &LogOptions::default(), |r| {
            bar.inc(1);
            // Fed every record: a WPL commit's images may lie below the checkpoint.
            let owned = match wpl.feed(r.lsn, r.payload, page_size) {
                Ok(Some(owned)) => Some(owned),
                Ok(None) => None,
                Err(_) => return,
            };
            if r.lsn < checkpoint {
                return;
            }
            let mut objects = Vec::new();
            match &owned {
                Some(owned) => objects.extend(owned.iter().map(|w| record::RecordObject {
                    oref: w.oref,
                    created: w.created,
                    data: &w.data,
                })),
                None => {
                    if record::decode_any(r.payload, |o| objects.push(o)).is_err() {
                        return;
                    }
                }
            }
            for o in &objects {
                let place = Place::Log {
                    segment: r.segment.to_string(),
                    offset: r.offset,
                    lsn: Some(r.lsn.0),
                    oref: Some(o.oref.to_string()),
                };
                self.report.counts.log_objects += 1;
                self.check_object(place, o.data);
            }
        })?;
        bar.finish();
        Ok(())
    }

    /// The root named by the superblock must exist.
    fn final_checks(&mut self) -> Result<(), CheckError> {
        let root = self.sb.root;
        if !root.is_null()
            && let Some(why) = self.judge_ref(root.raw())
        {
            self.report.problem(Place::Superblock, format!("the root {why}"));
        }
        Ok(())
    }

    /// Checks one object of the committed state: class, shape, references.
    fn check_object(&mut self, place: Place, obj: &[u8]) {
        let class_word = u32_at(obj, 0);
        let desc = match self.class_of(class_word) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(why) => {
                self.report.problem(place, why);
                return;
            }
        };
        if let Err(why) = desc.check_shape(obj) {
            self.report.problem(
                place,
                format!(
                    "{} bytes do not have the shape of its class {} ({}): {why}",
                    obj.len(),
                    desc.name(),
                    word(class_word)
                ),
            );
            return;
        }
        if class_word == builtin::LARGE.raw()
            && let Err(e) = large::check_root(obj, self.page_size)
        {
            self.report.problem(place.clone(), format!("malformed large object root: {e}"));
        }
        let mut index = 0usize;
        let mut found: Vec<String> = Vec::new();
        desc.for_each_ref_offset(obj, |off| {
            let w = u32_at(obj, off);
            if let Some(why) = self.judge_ref(w) {
                found.push(format!("reference word {index} (object byte {off}) {why}"));
            }
            index += 1;
        });
        self.report.counts.references += index as u64;
        for why in found {
            self.report.problem(place.clone(), why);
        }
    }

    /// The class named by a class word: `Ok(None)` when it cannot be judged (its page is
    /// unreadable, or the class object is malformed, which is reported at the class).
    fn class_of(&self, w: u32) -> Result<Option<Arc<ClassDesc>>, String> {
        let class = match RawRef::decode(w) {
            RawRef::Tagged(_) => {
                return Err(format!(
                    "class word {} has the spare bit set: a stored class word is an oref",
                    word(w)
                ));
            }
            RawRef::Oref(o) if o.is_null() => return Err("class word is null".to_string()),
            RawRef::Oref(o) => o,
        };
        if let Some(c) = self.classes.get(&class) {
            return Ok(c.clone());
        }
        if class == builtin::ROOT {
            return Err(format!("class word names the root {class}, which is not a class"));
        }
        match self.judge_ref(w) {
            Some(why) => Err(format!("class word {why}")),
            None if self.state.get(class.page_raw() as usize) == Some(&PageState::Unreadable) => {
                Ok(None)
            }
            None => Err(format!("class word names {class}, which is not a class object")),
        }
    }

    /// Why reference word `w` names no object of the committed state (`None`: it is null,
    /// names one, or names a page that cannot be read).
    fn judge_ref(&self, w: u32) -> Option<String> {
        // What names an object is `Oref::object`'s one definition (the wire's, the core's
        // and the record decoder's); a reference field may also be null.
        let o = match Oref::object(w) {
            Ok(o) => o,
            Err(NotAnObject::Null) => return None,
            Err(NotAnObject::Tagged) => {
                return Some(format!(
                    "is {}, with the spare bit set: a stored reference is never tagged",
                    word(w)
                ));
            }
            Err(NotAnObject::PageZero) => {
                return Some(format!(
                    "names {}, in page 0, which is never allocated",
                    Oref::from_raw(w).expect("spare bit clear")
                ));
            }
        };
        let page = o.page_raw();
        if page > self.last_page {
            return Some(format!(
                "names {o}, but page {page} is beyond the last page ({})",
                self.last_page
            ));
        }
        if self.state[page as usize] == PageState::Unreadable || has_bit(&self.exists, o) {
            return None;
        }
        Some(format!(
            "names {o}, which does not exist (page {page} has no object {})",
            o.oid().get()
        ))
    }
}

/// The first byte of a page's free space (between its objects and its offset table) that is
/// not zero.
fn nonzero_free_byte(v: &PageView<'_>) -> Option<usize> {
    let end = v.page_size() - 2 * v.slot_count();
    v.bytes()[v.data_end()..end].iter().position(|&b| b != 0).map(|i| v.data_end() + i)
}

/// `n` things, in English.
fn count(n: u64, thing: &str) -> String {
    if n == 1 { format!("1 {thing}") } else { format!("{n} {thing}s") }
}

/// Marks `o` as existing.
fn set_bit(bits: &mut [[u64; 8]], o: Oref) {
    let i = o.oid().index();
    if let Some(b) = bits.get_mut(o.page_raw() as usize) {
        b[i / 64] |= 1 << (i % 64);
    }
}

/// Whether `o` exists.
fn has_bit(bits: &[[u64; 8]], o: Oref) -> bool {
    let i = o.oid().index();
    bits.get(o.page_raw() as usize).is_some_and(|b| b[i / 64] & (1 << (i % 64)) != 0)
}

/// A class or reference word for humans: an oref as `page.oid`, anything else in hex.
fn word(w: u32) -> String {
    match Oref::from_raw(w) {
        Some(o) => o.to_string(),
        None => format!("{w:#010x}"),
    }
}

/// What a page that fails `PageView::parse_stored` has wrong, and the oid it concerns.
fn describe_page_error(e: &FormatError, page_size: usize) -> (Option<u16>, String) {
    match e {
        FormatError::PageChecksum { stored, computed } => (
            None,
            format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): its bytes \
                 changed after it was written"
            ),
        ),
        FormatError::WrongPageId { found, .. } => {
            (None, format!("its header names page {found}: a misdirected or stale write"))
        }
        FormatError::BadOffset { oid, offset, why } => {
            let entry = page_size - 2 * (oid.index() + 1);
            (
                Some(oid.get()),
                format!("offset-table entry (page byte {entry}) holds offset {offset}: {why}"),
            )
        }
        other => (None, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_places_read_well() {
        assert_eq!(word(builtin::REFS.raw()), "1.2");
        assert_eq!(word(3), "0x00000003");
        assert_eq!(Place::object(17, 3).to_string(), "page 17 oid 3");
        let log = Place::Log {
            segment: "log.0000000000000001".to_string(),
            offset: 44,
            lsn: Some(2),
            oref: Some("2.1".to_string()),
        };
        assert_eq!(
            log.to_string(),
            "log segment log.0000000000000001 offset 44 (LSN 2) object 2.1"
        );
    }

    #[test]
    fn bits_mark_exactly_one_object() {
        let mut bits = vec![[0u64; 8]; 4];
        let o = Oref::new(PageId::new(3).unwrap(), Oid::new(511).unwrap());
        set_bit(&mut bits, o);
        assert!(has_bit(&bits, o));
        assert!(!has_bit(&bits, Oref::new(PageId::new(3).unwrap(), Oid::new(510).unwrap())));
        // Pages past the table exist nowhere, and marking one is ignored.
        let far = Oref::new(PageId::new(9).unwrap(), Oid::new(0).unwrap());
        set_bit(&mut bits, far);
        assert!(!has_bit(&bits, far));
    }
}
