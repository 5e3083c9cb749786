//! Offline upgrade: rewriting a closed database into a new directory, with fields appended to
//! classes, and without its garbage.
//!
//! Objects keep their class and size for life, and orefs are physical (page and oid), so an
//! object cannot grow where it is: a class that gains a field needs every instance moved, and
//! every reference to it rewritten. That is what [`upgrade`] does, offline, from one directory
//! into another:
//!
//! ```text
//!   source (locked, read through an OverlayDisk: recovery runs, nothing is written)
//!     │ 1. mark   every object reachable from the root (page 1 oid 5): reference slots,
//!     │           variable reference parts, class words; lowest page with work first
//!     │ 2. plan   pages in order, oids in order: each reachable object's new size (old fixed
//!     │           part + zeros for the appended fields + old variable part) and so its new
//!     │           oref, packed as a bulk load packs: old → new map complete before any write
//!     │ 3. write  pages in order again: class word and every reference word through the map,
//!     ▼           into a BulkLoader of a new database in a temporary directory
//!   DST.thor-upgrade (hidden, beside DST) ── root version committed, engine closed (all fsynced)
//!     │ 4. publish: rename to DST, fsync the parent directory
//!     ▼
//!   DST
//! ```
//!
//! # What is copied
//!
//! Every object reachable from the root, in the source's relative order (pages in order, oids
//! in order), so the clustering the application built survives. The built-in classes and the
//! root keep their fixed orefs in page 1 ([`builtin`]); everything else, including objects
//! that shared page 1 with them, moves into the pages after it. An unreachable object is not
//! copied: the rewrite is also the only garbage collection thor has ([`UpgradeReport::dropped`]).
//! With no classes given, that is all it does (compaction).
//!
//! # Upgrading a class
//!
//! Each class given ([`ClassDesc`], the new declaration's descriptor) names a stored class by
//! its name. Every reachable class object of that name (normally the one the schema
//! directory lists) must be a *prefix* of the new descriptor ([`Incompatibility`] otherwise):
//!
//! ```text
//!   old:  | class | f1 | f2 |          count | var part |
//!   new:  | class | f1 | f2 | f3 | f4 | count | var part |      f3, f4 = 0 (0, false, None,
//!                            appended                          null reference)
//! ```
//!
//! the same variable-part kind, a fixed part no shorter, and the same reference slots among
//! the old fixed part's words. The old class objects are replaced by one new class object,
//! placed where the first of them was; every reference to an old one (instances' class words,
//! the schema directory's entry) names the new one, so the schema directory sessions read
//! lists the new layout. A descriptor records only word sizes and which words are
//! references, so some changes are invisible to it: two scalar fields of one size swapped, a
//! `u32` turned into an `f32`. Those are the declaration's author's to avoid.
//!
//! # Reading the committed state
//!
//! The source directory is locked ([`FileDisk::open_locked`]: a running server makes the
//! upgrade refuse) and opened read-only ([`thor_storage::ReadOnlyDisk`]) under an
//! [`OverlayDisk`], and an [`Engine`] opens it there: the same recovery every open runs
//! (double-write buffer, log replay from the checkpoint, torn tail), its writes kept in
//! memory. Pages are then read with [`Engine::fetch`], which composes the installed image with
//! the MOB's versions: exactly what the next open would serve. The only byte written to the
//! source is the holder's line in its `LOCK` file, as every opener writes.
//!
//! # Memory
//!
//! Bounded by the shape of the source, not its bytes: two oid bitmaps per page while marking
//! (128 bytes a page) and a set of pages with work pending; the old → new map, one `u32` per
//! oid slot of every page that holds a reachable object (plus 16 bytes a page); the reachable
//! class descriptors; the source engine's page cache
//! ([`limits::UPGRADE_SOURCE_PAGE_CACHE_BYTES`]) and, after a crash, the MOB and the pages
//! recovery installs (in the overlay); and the destination's last
//! [`limits::UPGRADE_WRITE_OUT_PAGES`] pages. With 8 KiB pages of 80-byte objects that is
//! about 6 MB per million objects, plus the fixed caches.
//!
//! # Crash safety
//!
//! The destination is written into a hidden directory beside it (`.NAME.thor-upgrade`, in the
//! same parent, so the final rename is atomic), as a complete database: bulk-loaded pages
//! fsynced, the root committed through the log, the engine closed (everything installed,
//! superblock written and fsynced). Only then is it renamed to `DST` and the parent directory
//! fsynced. A crash before the rename leaves no `DST`; a crash after it leaves a complete one
//! (or, if the rename itself was not yet durable, no `DST` and a complete temporary
//! directory). Nothing ever opens as `DST` with part of the content. The next upgrade into
//! the same `DST` reuses a leftover temporary directory (after taking its lock, so never
//! one another upgrade is writing), and refuses one that holds files a database does not
//! have. The source is never written, so an interrupted upgrade costs only the time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use thor_core::le::{put_u32, u32_at};
use thor_core::limits::{OFFSET_ENTRY_BYTES, PAGE_HEADER_BYTES, max_object_bytes};
use thor_core::{ClassDesc, Oid, Oref, PageId, PageView, RawRef, VarKind, builtin};
use thor_storage::{Disk, FileDisk, OverlayDisk, StorageError};
use tracing::info;

use crate::engine::{BulkLoader, CommitRequest, Engine, EngineOptions};
use crate::limits;
use thor_server_core::EngineError;

/// The program named in the `LOCK` files the upgrade takes.
const HOLDER: &str = "thor upgrade";

/// The suffix of the temporary directory a destination is written into.
const TEMP_SUFFIX: &str = ".thor-upgrade";

/// How a stored class differs from its new declaration in a way an upgrade cannot bridge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatibility {
    /// The fixed part shrank: a field was removed (or made smaller).
    #[error(
        "its fixed part shrinks from {old_bytes} to {new_bytes} bytes (a field was removed or \
         made smaller)"
    )]
    FixedPartShrinks {
        /// Bytes of the stored fixed part.
        old_bytes: usize,
        /// Bytes of the new one.
        new_bytes: usize,
    },
    /// A word of the old fixed part changes between scalar and reference: a field changed
    /// type, or fields were reordered or inserted before the end.
    #[error(
        "word {slot} of the fixed part (byte {byte} of an object) {change} (a field changed \
         type, or fields were reordered or inserted before the end)"
    )]
    ReferenceSlotChanges {
        /// The word's index in the fixed part.
        slot: u16,
        /// Its byte offset within an object.
        byte: usize,
        /// "was a reference, is not" or the reverse.
        change: &'static str,
    },
    /// The variable part's kind changed (bytes, references or none).
    #[error("its variable part changes from {old:?} to {new:?}")]
    VarKindChanges {
        /// The stored kind.
        old: VarKind,
        /// The new kind.
        new: VarKind,
    },
}

/// Why an upgrade did not happen. In every case nothing exists at the destination and the
/// source is unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpgradeError {
    /// The source is not a database directory (no superblock). Check the path.
    #[error("{}: not a thor database (no superblock)", path.display())]
    NotADatabase {
        /// The source path.
        path: PathBuf,
    },
    /// A server or program has the source open. Stop it, then upgrade: the upgrade reads a
    /// closed database.
    #[error(
        "database {} is in use by {holder}; stop it first (an upgrade reads a database nothing \
         else has open)",
        path.display()
    )]
    SourceInUse {
        /// The source directory.
        path: PathBuf,
        /// Who holds it, as its lock file says.
        holder: String,
    },
    /// Something exists at the destination. The upgrade only writes a new directory: give a
    /// path that does not exist.
    #[error("{} already exists; an upgrade writes a new directory and never overwrites", path.display())]
    DestinationExists {
        /// The destination path.
        path: PathBuf,
    },
    /// The destination lies inside the source directory, where the upgrade would write (it
    /// never writes into its source). Choose a path outside it.
    #[error("{} is inside the database being read; choose a path outside it", path.display())]
    DestinationInSource {
        /// The destination path.
        path: PathBuf,
    },
    /// The temporary directory beside the destination holds files a database does not have,
    /// or another upgrade into the same destination is writing it. Wait for that upgrade, or
    /// remove the directory.
    #[error("{}: {why}; remove it or choose another destination", path.display())]
    TemporaryInUse {
        /// The temporary directory.
        path: PathBuf,
        /// What is there.
        why: String,
    },
    /// The source could not be opened or read (a disk error, a damaged file, another
    /// format). Nothing was written; `thor check` on the source says more.
    #[error("reading the database in {}: {cause}", path.display())]
    Source {
        /// The source directory.
        path: PathBuf,
        /// The engine's reason.
        cause: EngineError,
    },
    /// The source's committed state is damaged (a reference to no object, an object whose
    /// class is not a class). Nothing was written; run `thor check` on the source.
    #[error("the database in {} is damaged: {why}; run `thor check` on it", path.display())]
    Corrupt {
        /// The source directory.
        path: PathBuf,
        /// What is wrong, and where.
        why: String,
    },
    /// Writing the new database failed (the disk is full, an I/O error). Nothing was created
    /// at the destination; the temporary directory was removed if possible.
    #[error("writing the new database for {}: {cause}", path.display())]
    Destination {
        /// The destination path.
        path: PathBuf,
        /// The engine's reason.
        cause: EngineError,
    },
    /// A file-system operation on a directory failed.
    #[error("{op} {}: {cause}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// A class to upgrade is not in the source (no reachable class object has its name).
    /// Check the name; a class the database never stored needs no upgrade (sessions store it
    /// on first use).
    #[error("class {class} is not in the database: there is nothing to upgrade")]
    UnknownClass {
        /// The class name.
        class: String,
    },
    /// The same class name was given twice.
    #[error("class {class} is given twice")]
    DuplicateClass {
        /// The class name.
        class: String,
    },
    /// A built-in class was given; built-in classes never change.
    #[error("class {class} is built in; built-in classes never change")]
    BuiltinClass {
        /// The class name.
        class: String,
    },
    /// The stored class is not a prefix of the new declaration. Only fields appended at the
    /// end of the fixed part can be added by an upgrade; keep the old fields as they were.
    #[error(
        "class {class} cannot be upgraded: {why}; an upgrade adds fields appended at the end \
         and changes nothing else"
    )]
    Incompatible {
        /// The class name.
        class: String,
        /// What differs.
        why: Incompatibility,
    },
    /// With its appended fields, an object would no longer fit in a page. Store its variable
    /// part as a large object, or append fewer bytes.
    #[error(
        "object {oref:?} of class {class} would be {bytes} bytes with the appended fields; a \
         page holds objects of at most {max}"
    )]
    ObjectTooLarge {
        /// The object, in the source.
        oref: Oref,
        /// Its class.
        class: String,
        /// Its size after the upgrade.
        bytes: usize,
        /// The largest object a page holds.
        max: usize,
    },
}

/// One upgraded class, in an [`UpgradeReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassUpgrade {
    /// The class name.
    pub name: String,
    /// Bytes of the stored fixed part (of the first stored version met, if several).
    pub old_fixed_bytes: usize,
    /// Bytes of the new fixed part.
    pub new_fixed_bytes: usize,
    /// Instances rewritten with the new layout.
    pub instances: u64,
    /// Stored class objects of this name replaced by the new one (normally 1).
    pub class_objects: u64,
}

/// What an upgrade did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeReport {
    /// Pages of the source.
    pub source_pages: u64,
    /// Objects of the source (the built-in classes and the root included).
    pub source_objects: u64,
    /// Objects of the new database (the built-in classes and the root included).
    pub objects: u64,
    /// Objects of the source not copied because nothing reachable from the root refers to
    /// them: garbage.
    pub dropped: u64,
    /// Stored class objects replaced by a new version (they are neither copied nor garbage).
    pub replaced_classes: u64,
    /// Pages of the new database.
    pub pages: u64,
    /// Object bytes written into the new pages (page 1 not included).
    pub bytes: u64,
    /// The classes upgraded.
    pub classes: Vec<ClassUpgrade>,
}

/// Rewrites the closed database in `src` into a new database in `dst` (which must not exist):
/// every object reachable from the root, in the same relative order, with the classes in
/// `classes` (new descriptors, matched to stored classes by name) given their appended
/// fields, zeroed. See the module documentation for the steps, memory and crash safety.
/// With `classes` empty it compacts: unreachable objects are dropped.
pub fn upgrade(
    src: &Path,
    dst: &Path,
    classes: &[ClassDesc],
) -> Result<UpgradeReport, UpgradeError> {
    let targets = targets(classes)?;
    if exists(dst)? {
        return Err(UpgradeError::DestinationExists { path: dst.to_path_buf() });
    }
    if inside(src, dst) {
        return Err(UpgradeError::DestinationInSource { path: dst.to_path_buf() });
    }
    let source = Source::open(src)?;
    let mut walk = Walk::new(&source, targets);
    walk.mark()?;
    if let Some(t) = walk.targets.iter().find(|t| !t.found) {
        return Err(UpgradeError::UnknownClass { class: t.desc.name().to_string() });
    }
    let temp = Temp::claim(dst)?;
    let dst_err =
        |source: EngineError| UpgradeError::Destination { path: dst.to_path_buf(), cause: source };
    let opts = EngineOptions {
        page_size: source.page_size,
        server_id: source.server_id,
        background_flusher: false,
        ..EngineOptions::default()
    };
    let engine = Engine::create(Arc::new(temp.disk.clone()), opts).map_err(dst_err)?;
    let mut loader = engine.bulk_load().map_err(dst_err)?;
    let step_err = |e: Step| match e {
        Step::Source(e) => e,
        Step::Dest(e) => dst_err(e),
    };
    walk.plan(loader.first_page()).map_err(step_err)?;
    let root = walk.write(&mut loader).map_err(step_err)?;
    let bulk = loader.finish().map_err(dst_err)?;
    engine
        .commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created: Vec::new() })
        .map_err(dst_err)?;
    // Closing installs the root's version and truncates the log: the new database opens
    // without replaying anything, and everything in it is durable.
    engine.close().map_err(dst_err)?;
    temp.publish(dst)?;
    let report = walk.report(bulk.pages + 1, bulk.bytes);
    info!(
        src = %src.display(),
        dst = %dst.display(),
        objects = report.objects,
        dropped = report.dropped,
        pages = report.pages,
        classes = report.classes.len(),
        "upgraded"
    );
    Ok(report)
}

/// A class to upgrade, and what the walk found of it.
#[derive(Debug)]
struct Target {
    /// Its new descriptor.
    desc: ClassDesc,
    /// The new class object's bytes.
    class_object: Vec<u8>,
    /// Whether marking reached a stored class object of its name.
    found: bool,
    /// The stored class object whose place the new class object takes: the first of its
    /// name in source order (set by the plan).
    placed_at: Option<Oref>,
    /// The new class object's oref (set by the plan).
    new_oref: Option<Oref>,
    /// Bytes of the first stored version's fixed part met.
    old_fixed_bytes: usize,
    /// Instances planned.
    instances: u64,
    /// Stored class objects of its name reached.
    class_objects: u64,
}

/// Checks the classes given and makes their targets.
fn targets(classes: &[ClassDesc]) -> Result<Vec<Target>, UpgradeError> {
    let mut out: Vec<Target> = Vec::with_capacity(classes.len());
    for desc in classes {
        let name = desc.name();
        if builtin::classes().iter().any(|(_, b)| b.name() == name) {
            return Err(UpgradeError::BuiltinClass { class: name.to_string() });
        }
        if out.iter().any(|t| t.desc.name() == name) {
            return Err(UpgradeError::DuplicateClass { class: name.to_string() });
        }
        out.push(Target {
            desc: desc.clone(),
            class_object: desc.to_class_object(),
            found: false,
            placed_at: None,
            new_oref: None,
            old_fixed_bytes: 0,
            instances: 0,
            class_objects: 0,
        });
    }
    Ok(out)
}

/// Checks that `old` (a stored descriptor) is a prefix of `new`: see the module documentation.
pub fn check_prefix(old: &ClassDesc, new: &ClassDesc) -> Result<(), Incompatibility> {
    if old.var() != new.var() {
        return Err(Incompatibility::VarKindChanges { old: old.var(), new: new.var() });
    }
    if new.fixed_bytes() < old.fixed_bytes() {
        return Err(Incompatibility::FixedPartShrinks {
            old_bytes: old.fixed_bytes(),
            new_bytes: new.fixed_bytes(),
        });
    }
    let old_slots = (old.fixed_bytes() / 4) as u16;
    for slot in 0..old_slots {
        let was = old.ref_slots().contains(&slot);
        let is = new.ref_slots().contains(&slot);
        if was != is {
            return Err(Incompatibility::ReferenceSlotChanges {
                slot,
                byte: 4 + 4 * slot as usize,
                change: if was { "was a reference and is not" } else { "becomes a reference" },
            });
        }
    }
    Ok(())
}

/// Whether the path `dst` (which does not exist) would lie inside the directory `src`: its
/// nearest existing ancestor, resolved, is `src` resolved or below it. A path that cannot be
/// resolved is not inside (opening it fails later, with its own error).
fn inside(src: &Path, dst: &Path) -> bool {
    let Ok(src) = src.canonicalize() else { return false };
    let mut at = dst.parent();
    while let Some(p) = at {
        let p = if p.as_os_str().is_empty() { Path::new(".") } else { p };
        if let Ok(resolved) = p.canonicalize() {
            return resolved.starts_with(&src);
        }
        at = p.parent();
    }
    false
}

/// Whether anything (a file, a directory, a dangling link) is at `path`.
fn exists(path: &Path) -> Result<bool, UpgradeError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => {
            Err(UpgradeError::Io { op: "look at", path: path.to_path_buf(), cause: source })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The source.

/// The source database, opened read-only with its recovery in memory.
#[derive(Debug)]
struct Source {
    /// The directory, for errors.
    path: PathBuf,
    /// The engine that recovered it; halted (never closed: closing would install) on drop.
    engine: Option<Engine>,
    /// Its last page.
    last_page: u32,
    /// Bytes per page.
    page_size: usize,
    /// Its server id, which the new database keeps (surrogates elsewhere name it).
    server_id: thor_core::ServerId,
}

impl Source {
    /// Locks `path` and opens its database over an overlay (see the module documentation).
    fn open(path: &Path) -> Result<Source, UpgradeError> {
        let shown = path.to_path_buf();
        // Looked at before the lock is taken, so that a directory that is not a database gets
        // no LOCK file.
        if !path.join(crate::superblock::FILE).is_file() {
            return Err(UpgradeError::NotADatabase { path: shown });
        }
        let disk = FileDisk::open_locked(path, false, HOLDER).map_err(|e| match e {
            StorageError::Locked { holder, .. } => {
                UpgradeError::SourceInUse { path: shown.clone(), holder }
            }
            other => UpgradeError::Source { path: shown.clone(), cause: other.into() },
        })?;
        let overlay = OverlayDisk::new(Arc::new(disk.read_only()));
        let opts = EngineOptions {
            background_flusher: false,
            page_cache_bytes: limits::UPGRADE_SOURCE_PAGE_CACHE_BYTES,
            ..EngineOptions::default()
        };
        let engine = Engine::open(Arc::new(overlay), opts)
            .map_err(|source| UpgradeError::Source { path: shown.clone(), cause: source })?;
        let mut source = Source {
            path: shown,
            last_page: engine.stats().pages_allocated,
            page_size: engine.page_size(),
            server_id: engine.server_id(),
            engine: None,
        };
        let root = engine.root();
        source.engine = Some(engine);
        if root != builtin::ROOT {
            return Err(source.corrupt(format!(
                "the superblock names {root:?} as the root; every database's root is {:?}",
                builtin::ROOT
            )));
        }
        Ok(source)
    }

    /// The committed image of page `page` (1 ..= `last_page`), checked.
    fn page(&self, page: u32) -> Result<Bytes, UpgradeError> {
        let id = PageId::new(page).expect("callers stay within 1..=last_page");
        let engine = self.engine.as_ref().expect("open until dropped");
        let bytes = engine
            .fetch(id)
            .map_err(|source| UpgradeError::Source { path: self.path.clone(), cause: source })?;
        PageView::parse_stored(&bytes, id)
            .map_err(|e| self.corrupt(format!("page {page}: {e}")))?;
        Ok(bytes)
    }

    fn corrupt(&self, why: String) -> UpgradeError {
        UpgradeError::Corrupt { path: self.path.clone(), why }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if let Some(engine) = self.engine.take() {
            // Closing would install the MOB into the overlay, work for nothing.
            engine.halt();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The walk: mark, plan, write.

/// A bitmap of the oids of one page.
type OidBits = [u64; 8];

/// A reachable class object, decoded.
#[derive(Debug)]
struct ClassInfo {
    /// Its descriptor.
    desc: Arc<ClassDesc>,
    /// The upgrade target of its name, if any (index into `Walk::targets`).
    target: Option<usize>,
}

/// The state of an upgrade's passes over the source.
struct Walk<'s> {
    /// The source.
    src: &'s Source,
    /// The classes to upgrade.
    targets: Vec<Target>,
    /// Reachable objects whose references are followed (black), per page (index: page id).
    black: Vec<OidBits>,
    /// Reachable objects whose references are not followed yet (grey), per page.
    grey: Vec<OidBits>,
    /// Pages with grey objects.
    pending: BTreeSet<u32>,
    /// Reachable class objects (and the built-in classes) by oref word.
    classes: FxHashMap<u32, ClassInfo>,
    /// The old → new map: for each page with reachable objects, the new oref word of each of
    /// its oid slots (0: unreachable). Complete before anything is written.
    map: Vec<Option<Box<[u32]>>>,
    /// Objects of the source.
    source_objects: u64,
    /// Objects of the source in page 1's built-in oids (the built-in classes and the root).
    source_builtins: u64,
    /// Reachable objects of the source, built-in ones not counted.
    reached: u64,
    /// Objects written into the new database's loaded pages.
    written: u64,
    /// Stored class objects replaced by a target's new class object.
    replaced: u64,
}

/// Where a write step failed.
enum Step {
    /// Reading or judging the source.
    Source(UpgradeError),
    /// Writing the destination.
    Dest(EngineError),
}

impl From<UpgradeError> for Step {
    fn from(e: UpgradeError) -> Step {
        Step::Source(e)
    }
}

impl From<EngineError> for Step {
    fn from(e: EngineError) -> Step {
        Step::Dest(e)
    }
}

/// The oids set in `bits`, in order.
fn oids(bits: &OidBits) -> impl Iterator<Item = Oid> + '_ {
    (0..bits.len() * 64)
        .filter(|&i| bits[i / 64] & (1 << (i % 64)) != 0)
        .map(|i| Oid::new(i as u16).expect("512 oids a page"))
}

fn is_set(bits: &OidBits, oid: Oid) -> bool {
    bits[oid.index() / 64] & (1 << (oid.index() % 64)) != 0
}

fn set(bits: &mut OidBits, oid: Oid) {
    bits[oid.index() / 64] |= 1 << (oid.index() % 64);
}

impl<'s> Walk<'s> {
    fn new(src: &'s Source, targets: Vec<Target>) -> Walk<'s> {
        let pages = src.last_page as usize + 1;
        let mut classes = FxHashMap::default();
        for (oref, desc) in builtin::classes() {
            classes.insert(oref.raw(), ClassInfo { desc: Arc::new(desc.clone()), target: None });
        }
        Walk {
            src,
            targets,
            black: vec![[0; 8]; pages],
            grey: vec![[0; 8]; pages],
            pending: BTreeSet::new(),
            classes,
            map: Vec::new(),
            source_objects: 0,
            source_builtins: 0,
            reached: 0,
            written: 0,
            replaced: 0,
        }
    }

    /// Marks every object reachable from the root. Pages are visited lowest first, each
    /// visit following every grey object of the page (and those they make grey in it), so
    /// that a page is read again only when a later page refers back to it.
    fn mark(&mut self) -> Result<(), UpgradeError> {
        self.make_grey(builtin::ROOT.raw(), builtin::ROOT)?;
        while let Some(page) = self.pending.pop_first() {
            let bytes = self.src.page(page)?;
            let view = PageView::assume_parsed(&bytes);
            loop {
                let grey = std::mem::take(&mut self.grey[page as usize]);
                if grey == [0; 8] {
                    break;
                }
                for oid in oids(&grey) {
                    set(&mut self.black[page as usize], oid);
                    let oref = Oref::new(PageId::new(page).expect("a page"), oid);
                    let obj = view.object(oid).ok_or_else(|| {
                        self.src.corrupt(format!(
                            "a reachable object refers to {oref:?}, which does not exist"
                        ))
                    })?;
                    let desc = self.class_of(oref, obj)?;
                    desc.check_shape(obj).map_err(|why| {
                        self.src.corrupt(format!(
                            "object {oref:?} does not match its class {}: {why}",
                            desc.name()
                        ))
                    })?;
                    let mut words = Vec::new();
                    desc.for_each_ref_offset(obj, |off| words.push(u32_at(obj, off)));
                    for w in words {
                        self.make_grey(w, oref)?;
                    }
                    if u32_at(obj, 0) == builtin::META.raw() {
                        // A class object reached other than as a class (the schema directory
                        // lists it): decode it now, so that every reachable class is judged.
                        self.class_at(oref)?;
                    }
                }
            }
            // The loop above emptied this page's grey set, including greys it added.
            self.pending.remove(&page);
        }
        Ok(())
    }

    /// Makes the object `word` names grey unless it is black already; `from` holds the word.
    fn make_grey(&mut self, word: u32, from: Oref) -> Result<(), UpgradeError> {
        let oref = match RawRef::decode(word) {
            RawRef::Oref(o) if o.is_null() => return Ok(()),
            RawRef::Oref(o) => o,
            RawRef::Tagged(_) => {
                return Err(self.src.corrupt(format!(
                    "object {from:?} holds the word {word:#x}, which is not a stored reference"
                )));
            }
        };
        let page = oref.page_raw();
        if page == 0 || page > self.src.last_page {
            return Err(self.src.corrupt(format!(
                "object {from:?} refers to {oref:?}, outside pages 1 to the last page ({})",
                self.src.last_page
            )));
        }
        let (p, oid) = (page as usize, oref.oid());
        if !is_set(&self.black[p], oid) && !is_set(&self.grey[p], oid) {
            set(&mut self.grey[p], oid);
            self.pending.insert(page);
        }
        Ok(())
    }

    /// The class of `obj` (the object `oref`), decoded on first use; the class object is made
    /// grey (class words are references too).
    fn class_of(&mut self, oref: Oref, obj: &[u8]) -> Result<Arc<ClassDesc>, UpgradeError> {
        if obj.len() < 4 {
            return Err(self.src.corrupt(format!("object {oref:?} is shorter than its header")));
        }
        let word = u32_at(obj, 0);
        let class = match RawRef::decode(word) {
            RawRef::Oref(c) if !c.is_null() => c,
            _ => {
                return Err(self.src.corrupt(format!(
                    "object {oref:?} has the class word {word:#x}, which names no object"
                )));
            }
        };
        if class.page_raw() == 0 || class.page_raw() > self.src.last_page {
            return Err(self.src.corrupt(format!(
                "object {oref:?} names {class:?} as its class, outside pages 1 to the last page"
            )));
        }
        self.make_grey(word, oref)?;
        self.class_at(class)
    }

    /// The descriptor of the class object `class`, read and judged on first use.
    fn class_at(&mut self, class: Oref) -> Result<Arc<ClassDesc>, UpgradeError> {
        if let Some(info) = self.classes.get(&class.raw()) {
            return Ok(info.desc.clone());
        }
        let page = self.src.page(class.page_raw())?;
        let view = PageView::assume_parsed(&page);
        let obj = view.object(class.oid()).ok_or_else(|| {
            self.src.corrupt(format!("an object's class {class:?} does not exist"))
        })?;
        let desc = ClassDesc::from_class_object(obj).map_err(|e| {
            self.src.corrupt(format!("{class:?}, used as a class, is not a class object: {e}"))
        })?;
        let target = self.targets.iter().position(|t| t.desc.name() == desc.name());
        if let Some(t) = target {
            let target = &mut self.targets[t];
            check_prefix(&desc, &target.desc).map_err(|why| UpgradeError::Incompatible {
                class: desc.name().to_string(),
                why,
            })?;
            if !target.found {
                target.found = true;
                target.old_fixed_bytes = desc.fixed_bytes();
            }
        }
        let desc = Arc::new(desc);
        self.classes.insert(class.raw(), ClassInfo { desc: desc.clone(), target });
        Ok(desc)
    }

    /// The target whose new class object replaces the object `oref`, if `oref` is a stored
    /// class object of a target's name.
    fn replaced_by(&self, oref: Oref) -> Option<usize> {
        self.classes.get(&oref.raw()).and_then(|info| info.target)
    }

    /// Gives every reachable object its new oref: pages in order, oids in order, packed from
    /// `first` as [`BulkLoader`] packs. Reads every page, to count the source's objects.
    fn plan(&mut self, first: PageId) -> Result<(), Step> {
        let page_size = self.src.page_size;
        let max = max_object_bytes(page_size);
        let mut pack = Packer::new(first, page_size);
        let mut map: Vec<Option<Box<[u32]>>> = vec![None; self.src.last_page as usize + 1];
        for page in 1..=self.src.last_page {
            let bytes = self.src.page(page)?;
            let view = PageView::assume_parsed(&bytes);
            self.source_objects += view.object_count() as u64;
            if page == PageId::FIRST.get() {
                self.source_builtins += view
                    .objects()
                    .filter(|(oid, _)| oid.get() <= builtin::ROOT.oid().get())
                    .count() as u64;
            }
            let black = self.black[page as usize];
            if black == [0; 8] {
                continue;
            }
            let mut slots = vec![0u32; view.slot_count()].into_boxed_slice();
            for oid in oids(&black) {
                let oref = Oref::new(PageId::new(page).expect("a page"), oid);
                let obj = view.object(oid).expect("marking found it");
                if builtin::is_builtin(oref) {
                    slots[oid.index()] = oref.raw();
                    continue;
                }
                self.reached += 1;
                let new = if let Some(t) = self.replaced_by(oref) {
                    let target = &mut self.targets[t];
                    target.class_objects += 1;
                    self.replaced += 1;
                    match target.new_oref {
                        // A second stored version of the class: its references go to the new
                        // class object too, and it is not copied.
                        Some(new) => new,
                        None => {
                            let new = pack.place(target.class_object.len())?;
                            target.placed_at = Some(oref);
                            target.new_oref = Some(new);
                            self.written += 1;
                            new
                        }
                    }
                } else {
                    let info = &self.classes[&u32_at(obj, 0)];
                    let grow = match info.target {
                        Some(t) => {
                            self.targets[t].instances += 1;
                            self.targets[t].desc.fixed_bytes() - info.desc.fixed_bytes()
                        }
                        None => 0,
                    };
                    let size = obj.len() + grow;
                    if size > max {
                        return Err(Step::Source(UpgradeError::ObjectTooLarge {
                            oref,
                            class: info.desc.name().to_string(),
                            bytes: size,
                            max,
                        }));
                    }
                    self.written += 1;
                    pack.place(size)?
                };
                slots[oid.index()] = new.raw();
            }
            map[page as usize] = Some(slots);
        }
        // Reachability is in the map from here on.
        self.black = Vec::new();
        self.grey = Vec::new();
        self.map = map;
        Ok(())
    }

    /// The new word for the reference word `word` of a reachable object.
    fn new_word(&self, word: u32) -> u32 {
        if word == 0 {
            return 0;
        }
        let oref = Oref::from_raw(word).expect("marking checked every reference word");
        let new = self.map[oref.page_raw() as usize]
            .as_ref()
            .map_or(0, |slots| slots[oref.oid().index()]);
        assert_ne!(new, 0, "{oref:?} was reached, so the plan gave it an oref");
        new
    }

    /// The bytes of `obj` (a reachable object, not a class object being replaced) in the new
    /// database, into `out`: the appended fields zeroed, every reference through the map.
    fn convert(&self, obj: &[u8], out: &mut Vec<u8>) {
        let info = &self.classes[&u32_at(obj, 0)];
        let (desc, grow) = match info.target {
            Some(t) => {
                let new = &self.targets[t].desc;
                (new, new.fixed_bytes() - info.desc.fixed_bytes())
            }
            None => (&*info.desc, 0),
        };
        let split = 4 + info.desc.fixed_bytes();
        out.clear();
        out.extend_from_slice(&obj[..split]);
        out.resize(split + grow, 0);
        out.extend_from_slice(&obj[split..]);
        put_u32(out, 0, self.new_word(u32_at(obj, 0)));
        let mut offsets = Vec::new();
        desc.for_each_ref_offset(out, |off| offsets.push(off));
        for off in offsets {
            let w = self.new_word(u32_at(out, off));
            put_u32(out, off, w);
        }
    }

    /// Writes every planned object into `loader`, in the plan's order, and returns the root's
    /// new version (the root stays at its fixed oref in page 1, which a bulk load does not
    /// write).
    fn write(&mut self, loader: &mut BulkLoader<'_>) -> Result<Vec<u8>, Step> {
        let mut out = Vec::new();
        let mut root = None;
        let mut pages_since_write_out = 0u64;
        let mut last_page = loader.first_page();
        for page in 1..=self.src.last_page {
            let Some(slots) = &self.map[page as usize] else { continue };
            let bytes = self.src.page(page)?;
            let view = PageView::assume_parsed(&bytes);
            for (i, &planned) in slots.iter().enumerate() {
                if planned == 0 {
                    continue;
                }
                let oid = Oid::new(i as u16).expect("slot counts are oids");
                let oref = Oref::new(PageId::new(page).expect("a page"), oid);
                if oref == builtin::ROOT {
                    let mut r = Vec::new();
                    self.convert(view.object(oid).expect("planned"), &mut r);
                    root = Some(r);
                    continue;
                }
                if builtin::is_builtin(oref) {
                    continue;
                }
                let obj = match self.replaced_by(oref) {
                    Some(t) if self.targets[t].placed_at == Some(oref) => {
                        &self.targets[t].class_object[..]
                    }
                    Some(_) => continue,
                    None => {
                        self.convert(view.object(oid).expect("planned"), &mut out);
                        &out[..]
                    }
                };
                let got = loader.add(obj)?;
                assert_eq!(got.raw(), planned, "the plan packs objects as the bulk loader does");
                let at = got.page().expect("loaded objects are in pages");
                if at != last_page {
                    last_page = at;
                    pages_since_write_out += 1;
                    if pages_since_write_out >= limits::UPGRADE_WRITE_OUT_PAGES {
                        loader.write_out()?;
                        pages_since_write_out = 0;
                    }
                }
            }
        }
        Ok(root.expect("the root is reachable from itself"))
    }

    /// The report, once the new database has `pages` pages and `bytes` object bytes in the
    /// loaded ones.
    fn report(&self, pages: u64, bytes: u64) -> UpgradeReport {
        UpgradeReport {
            source_pages: u64::from(self.src.last_page),
            source_objects: self.source_objects,
            // Page 1's built-in objects are in every database.
            objects: builtin::classes().len() as u64 + 1 + self.written,
            dropped: self.source_objects - self.source_builtins - self.reached,
            replaced_classes: self.replaced,
            pages,
            bytes,
            classes: self
                .targets
                .iter()
                .map(|t| ClassUpgrade {
                    name: t.desc.name().to_string(),
                    old_fixed_bytes: t.old_fixed_bytes,
                    new_fixed_bytes: t.desc.fixed_bytes(),
                    instances: t.instances,
                    class_objects: t.class_objects,
                })
                .collect(),
        }
    }
}

/// Packs objects into pages exactly as [`BulkLoader::add`] does (see
/// [`BulkLoader::first_page`]), without bytes: the plan knows every new oref before the first
/// object is written, so references forward need no patching.
#[derive(Debug)]
struct Packer {
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

impl Packer {
    fn new(first: PageId, page_size: usize) -> Packer {
        Packer { page_size, page: first, data_end: PAGE_HEADER_BYTES, slots: 0, started: false }
    }

    /// The oref of the next object, of `size` bytes (at most a page's largest object).
    fn place(&mut self, size: usize) -> Result<Oref, EngineError> {
        let free = self.page_size - self.data_end - OFFSET_ENTRY_BYTES * self.slots;
        let fits = self.slots < thor_core::ids::OIDS_PER_PAGE && size + OFFSET_ENTRY_BYTES <= free;
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

// ---------------------------------------------------------------------------------------------
// The destination's temporary directory.

/// The directory a destination is written into before it is renamed into place, locked.
#[derive(Debug)]
struct Temp {
    /// Its path (beside the destination).
    path: PathBuf,
    /// The locked directory.
    disk: FileDisk,
    /// Whether to remove it on drop: once it is ours (created, or a leftover of an upgrade
    /// cleared) and until it became the destination. A directory holding someone else's
    /// files is never removed.
    remove_on_drop: bool,
}

impl Temp {
    /// Creates (or reclaims, see the module documentation) the temporary directory for `dst`.
    fn claim(dst: &Path) -> Result<Temp, UpgradeError> {
        let name = dst.file_name().ok_or_else(|| UpgradeError::Io {
            op: "name a database after",
            path: dst.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"),
        })?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(TEMP_SUFFIX);
        let path = dst.with_file_name(temp_name);
        let disk = FileDisk::open_locked(&path, true, HOLDER).map_err(|e| match e {
            StorageError::Locked { holder, .. } => UpgradeError::TemporaryInUse {
                path: path.clone(),
                why: format!("another upgrade is writing it ({holder})"),
            },
            other => UpgradeError::Destination { path: dst.to_path_buf(), cause: other.into() },
        })?;
        let mut temp = Temp { path, disk, remove_on_drop: false };
        // A leftover of an interrupted upgrade (we hold its lock, so nobody writes it): clear
        // it, but only if it holds nothing but a database's files.
        let files = temp.disk.list().map_err(|e| temp.dest_err(dst, e))?;
        if let Some(foreign) = files.iter().find(|f| !is_database_file(f)) {
            let why = format!("holds `{foreign}`, which is not a database file");
            return Err(UpgradeError::TemporaryInUse { path: temp.path.clone(), why });
        }
        for f in &files {
            temp.disk.remove(f).map_err(|e| temp.dest_err(dst, e))?;
        }
        temp.remove_on_drop = true;
        if !files.is_empty() {
            temp.disk.sync_dir().map_err(|e| temp.dest_err(dst, e))?;
            info!(
                temporary = %temp.path.display(),
                files = files.len(),
                "removed what an interrupted upgrade left in its temporary directory"
            );
        }
        Ok(temp)
    }

    fn dest_err(&self, dst: &Path, e: StorageError) -> UpgradeError {
        UpgradeError::Destination { path: dst.to_path_buf(), cause: e.into() }
    }

    /// Renames the finished directory to `dst` and makes the rename durable.
    fn publish(mut self, dst: &Path) -> Result<(), UpgradeError> {
        // Checked again: the upgrade took a while. (A directory created in the moment between
        // this check and the rename, if empty, would be replaced: rename(2) replaces an empty
        // directory.)
        if exists(dst)? {
            return Err(UpgradeError::DestinationExists { path: dst.to_path_buf() });
        }
        std::fs::rename(&self.path, dst).map_err(|source| UpgradeError::Io {
            op: "rename the new database to",
            path: dst.to_path_buf(),
            cause: source,
        })?;
        self.remove_on_drop = false;
        let parent = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(|source| UpgradeError::Io {
            op: "fsync the directory",
            path: parent.to_path_buf(),
            cause: source,
        })
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Best effort: a leftover is reclaimed by the next upgrade into the same place.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Whether `name` is a file a database directory holds (so that a leftover temporary
/// directory holding only such files may be cleared).
fn is_database_file(name: &str) -> bool {
    [crate::superblock::FILE, crate::superblock::TMP_FILE, crate::io::PAGE_FILE, crate::dwb::FILE]
        .contains(&name)
        || name.starts_with("log.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use thor_storage::MemDisk;

    fn desc(fixed: usize, refs: &[u16], var: VarKind) -> ClassDesc {
        ClassDesc::new("t.C", fixed, refs, var).unwrap()
    }

    #[test]
    fn appending_fields_is_a_prefix_and_nothing_else_is() {
        let old = desc(12, &[1], VarKind::Refs);
        assert_eq!(check_prefix(&old, &old), Ok(()));
        assert_eq!(check_prefix(&old, &desc(20, &[1, 3], VarKind::Refs)), Ok(()));
        assert_eq!(
            check_prefix(&old, &desc(8, &[1], VarKind::Refs)),
            Err(Incompatibility::FixedPartShrinks { old_bytes: 12, new_bytes: 8 })
        );
        assert!(matches!(
            check_prefix(&old, &desc(12, &[], VarKind::Refs)),
            Err(Incompatibility::ReferenceSlotChanges { slot: 1, byte: 8, .. })
        ));
        assert!(matches!(
            check_prefix(&old, &desc(16, &[0, 1], VarKind::Refs)),
            Err(Incompatibility::ReferenceSlotChanges { slot: 0, byte: 4, .. })
        ));
        assert_eq!(
            check_prefix(&old, &desc(12, &[1], VarKind::Bytes)),
            Err(Incompatibility::VarKindChanges { old: VarKind::Refs, new: VarKind::Bytes })
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// The plan's packer gives every object the oref the bulk loader then gives it (the
        /// upgrade asserts it for every object it writes).
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
            let mut pack = Packer::new(loader.first_page(), page_size);
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
