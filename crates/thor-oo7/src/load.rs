//! The thor loader: writes an OO7 database straight into pages with the engine's bulk loader.
//!
//! The loader is a [`Builder`] driven by [`crate::plan::generate`], so objects reach the bulk
//! loader in the spec's creation order and the pages are clustered by time of creation. Object
//! bytes are built here, with the typed classes' layouts ([`thor_client::Class::desc`] and the
//! field offsets of [`crate::schema`]), and never go through a client or the log.
//!
//! # References to objects not created yet
//!
//! Most references point forward in creation order (a part's `to` collection to connections
//! created after all the parts, a base assembly's bags to composite parts created much later).
//! An object is written with such references null and patched when the target is created,
//! through [`BulkLoader::object_mut`], while the page is still in the loader's in-memory window.
//! A patch that finds its page already written out (possible only for the shared links of very
//! large databases, whose window is a bounded number of pages) is kept and applied after the
//! load by an ordinary commit, so the bound on the loader's memory never limits the database.
//!
//! # What the database holds besides OO7's objects
//!
//! ```text
//!  page 1 (the engine's):  built-in classes, root object
//!  root slot 0  ─► Refs of the modules
//!  root slot 1  ─► oo7.Params (the parameters: programs opening the database read its shape)
//!  root slot 2  ─► oo7.Index, atomic parts by id          (built after all composite parts)
//!  root slot 3  ─► oo7.Index, atomic parts by build date
//!  root slot 4  ─► oo7.Index, documents by title
//!  root slot 15 ─► schema directory: Refs of the class objects (what thor-client reads)
//!  page 2...:  class objects, schema directory, parameters, module list, then the modules'
//!              objects in creation order, then the indexes.
//! ```
//!
//! The root lives in page 1, which the bulk load does not write: its slots are set by one
//! commit after the load, and the loader then flushes the MOB so that the log is empty and the
//! database files depend on nothing but the parameters.

use std::path::Path;
use std::sync::Arc;

use thor_core::le::put_u32;
use thor_core::{ClassDesc, Oref, PageView, RawRef, builtin, large};
use thor_server::{BulkLoader, CommitRequest, Engine, EngineError, EngineOptions};
use thor_storage::FileDisk;

use crate::error::Oo7Error;
use crate::limits::{BTREE_FANOUT, CHUNK_REFS};
use crate::params::{DocPlacement, Params};
use crate::plan::{AssemblyPlan, Builder, CompositePlan, ModulePlan, Parent, Plan, generate};
use crate::schema::{self, *};

pub use crate::schema::Padding;

/// Settings of a load that are not OO7 parameters.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Bytes per page of the new database.
    pub page_size: usize,
    /// Apply every forward reference after the load through a commit instead of patching it in
    /// the loader's window (for testing that path; the database is the same either way).
    pub defer_all_patches: bool,
    /// Object sizes: Thor's, or padded to GOM's for the HAC paper's HAC-BIG
    /// ([`crate::schema::Padding`]). The objects, their order and their values are the same.
    pub padding: Padding,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            page_size: thor_core::limits::PAGE_SIZE_DEFAULT,
            defer_all_patches: false,
            padding: Padding::None,
        }
    }
}

/// Objects created per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Modules.
    pub modules: u64,
    /// Manuals.
    pub manuals: u64,
    /// Complex assemblies.
    pub complex_assemblies: u64,
    /// Base assemblies.
    pub base_assemblies: u64,
    /// Composite parts.
    pub composite_parts: u64,
    /// Documents.
    pub documents: u64,
    /// Atomic parts.
    pub atomic_parts: u64,
    /// Connections.
    pub connections: u64,
    /// `type` strings.
    pub type_strings: u64,
    /// Collections (`thor.Refs`), including chunks.
    pub collections: u64,
    /// Pieces of large objects (document and manual texts: roots and leaves).
    pub text_pieces: u64,
    /// Index nodes and index headers.
    pub index_objects: u64,
    /// Class objects, the schema directory and the parameters object.
    pub metadata: u64,
}

impl Counts {
    /// `(name, count)` for every kind, in a fixed order.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("Module", self.modules),
            ("Manual", self.manuals),
            ("ComplexAssembly", self.complex_assemblies),
            ("BaseAssembly", self.base_assemblies),
            ("CompositePart", self.composite_parts),
            ("Document", self.documents),
            ("AtomicPart", self.atomic_parts),
            ("Connection", self.connections),
            ("type string", self.type_strings),
            ("collection", self.collections),
            ("text piece", self.text_pieces),
            ("index object", self.index_objects),
            ("metadata", self.metadata),
        ]
    }

    /// Every object.
    pub fn total(&self) -> u64 {
        self.rows().iter().map(|r| r.1).sum()
    }
}

/// What a load did.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The parameters.
    pub params: Params,
    /// Objects per kind.
    pub counts: Counts,
    /// Object bytes written.
    pub object_bytes: u64,
    /// Pages written by the bulk load.
    pub pages: u64,
    /// Bytes per page.
    pub page_size: usize,
    /// References patched after the load by a commit (see the module documentation).
    pub deferred_patches: u64,
    /// The object sizes the classes were stored with.
    pub padding: Padding,
    /// What [`LoadReport::object_bytes`] would be with *every* object at GOM's sizes: each 8
    /// bytes larger for the header and 8 per reference word, built-in objects (collections,
    /// strings, texts) and variable parts included, which [`Padding::Gom`] cannot pad. The same
    /// whatever the padding; for comparing a padded database with GOM's.
    pub gom_object_bytes: u64,
}

impl LoadReport {
    /// The database size: pages allocated (including the engine's first page) times the page
    /// size.
    pub fn database_bytes(&self) -> u64 {
        (self.pages + 1) * self.page_size as u64
    }
}

/// Creates a database in directory `dir` (which must not hold one) and loads an OO7 database
/// with `params` into it. `progress(done, total)` counts atomic parts.
pub fn load_dir(
    dir: &Path,
    params: &Params,
    opts: LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<LoadReport, Oo7Error> {
    let disk = Arc::new(FileDisk::open_locked(dir, true, "thor oo7 load")?);
    let eopts = EngineOptions {
        page_size: opts.page_size,
        background_flusher: false,
        ..EngineOptions::default()
    };
    let engine = Engine::create(disk, eopts)?;
    let report = load(&engine, params, opts, progress)?;
    drop(engine);
    Ok(report)
}

/// Loads an OO7 database into `engine`, which must be empty (freshly created).
pub fn load(
    engine: &Engine,
    params: &Params,
    opts: LoadOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<LoadReport, Oo7Error> {
    let plan = Plan::new(params)?;
    if engine.stats().objects_created != 0 || engine.stats().pages_allocated != 1 {
        return Err(Oo7Error::BadParams("the database is not empty".into()));
    }
    check_fits(params, engine.page_size())?;
    let total = params.atomic_parts();
    let mut b = ThorBuilder::new(engine.bulk_load()?, params, opts)?;
    generate(&plan, &mut b, |done| progress(done, total))?;
    let (idx_id, idx_date, idx_title) = b.build_indexes()?;
    let ThorBuilder {
        loader,
        deferred,
        counts,
        modules_list,
        params_obj,
        schema_dir,
        gom_object_bytes,
        ..
    } = b;
    let bulk = loader.finish()?;

    // The root's slots, and any patches that missed the window, by one commit.
    let mut versions: Vec<(Oref, Vec<u8>)> = Vec::new();
    let mut root = object_bytes(engine, builtin::ROOT)?;
    let slot = |s: usize| builtin::desc(builtin::REFS).expect("builtin").var_offset() + 4 * s;
    put_u32(&mut root, slot(SLOT_MODULES), modules_list.raw());
    put_u32(&mut root, slot(SLOT_PARAMS), params_obj.raw());
    put_u32(&mut root, slot(SLOT_ATOMIC_ID_INDEX), idx_id.raw());
    put_u32(&mut root, slot(SLOT_ATOMIC_DATE_INDEX), idx_date.raw());
    put_u32(&mut root, slot(SLOT_DOCUMENT_TITLE_INDEX), idx_title.raw());
    put_u32(&mut root, slot(thor_client::SCHEMA_SLOT), schema_dir.raw());
    versions.push((builtin::ROOT, root));
    let n_deferred = deferred.len() as u64;
    let mut by_object: std::collections::BTreeMap<Oref, Vec<(usize, u32)>> = Default::default();
    for (o, off, w) in deferred {
        by_object.entry(o).or_default().push((off, w));
    }
    for (o, patches) in by_object {
        let mut bytes = object_bytes(engine, o)?;
        for (off, w) in patches {
            put_u32(&mut bytes, off, w);
        }
        versions.push((o, bytes));
        if versions.len() >= 50_000 {
            engine.commit(CommitRequest {
                versions: std::mem::take(&mut versions),
                created: vec![],
            })?;
        }
    }
    if !versions.is_empty() {
        engine.commit(CommitRequest { versions, created: vec![] })?;
    }
    engine.flush_all()?;
    Ok(LoadReport {
        params: *params,
        counts,
        object_bytes: bulk.bytes,
        pages: bulk.pages,
        page_size: engine.page_size(),
        deferred_patches: n_deferred,
        padding: opts.padding,
        gom_object_bytes,
    })
}

/// Checks that every collection the parameters ask for fits in one object of this page size.
fn check_fits(p: &Params, page_size: usize) -> Result<(), Oo7Error> {
    let max_refs = (thor_core::limits::max_object_bytes(page_size) - 8) / 4;
    let need = [
        ("atomic parts per composite", p.atomic_per_composite as usize),
        ("assemblies per assembly", p.assemblies_per_assembly as usize),
        ("chunk", CHUNK_REFS.min(p.base_per_module() as usize)),
        ("index node", BTREE_FANOUT + 1),
        ("modules", p.modules as usize),
    ];
    for (what, n) in need {
        if n > max_refs {
            return Err(Oo7Error::BadParams(format!(
                "{what}: {n} references do not fit one object in pages of {page_size} bytes"
            )));
        }
    }
    Ok(())
}

/// The stored bytes of object `o`, as a fetch sees them.
fn object_bytes(engine: &Engine, o: Oref) -> Result<Vec<u8>, Oo7Error> {
    let page = engine.fetch(o.page().ok_or_else(|| Oo7Error::Inconsistent("null oref".into()))?)?;
    let v = PageView::parse(&page).map_err(|e| Oo7Error::Inconsistent(e.to_string()))?;
    v.object(o.oid())
        .map(<[u8]>::to_vec)
        .ok_or_else(|| Oo7Error::Inconsistent(format!("no object {o:?}")))
}

/// A class's descriptor and its class object's oref in this database.
#[derive(Debug)]
struct Cls {
    /// The layout.
    desc: ClassDesc,
    /// The class object's oref as a header word.
    word: u32,
}

impl Cls {
    fn new_object(&self, count: usize) -> Vec<u8> {
        self.desc.new_object(self.word, count)
    }
}

/// The size objects would have at GOM's sizes (see [`LoadReport::gom_object_bytes`]): the
/// stored classes of this load by class word, with the padding each has.
#[derive(Debug, Default)]
struct GomSizes {
    /// (class word, stored class, bytes of padding in its instances).
    classes: Vec<(u32, ClassDesc, usize)>,
}

impl GomSizes {
    /// The size of `obj`, an object this load writes, with GOM's header and references and
    /// without its padding.
    fn of(&self, obj: &[u8]) -> u64 {
        let word = thor_core::le::u32_at(obj, 0);
        let (desc, padding) = match self.classes.iter().find(|c| c.0 == word) {
            Some((_, d, pad)) => (d, *pad),
            None => {
                let class = Oref::from_raw(word).expect("a class word");
                (builtin::desc(class).expect("a built-in class if not an OO7 one"), 0)
            }
        };
        let mut refs = 0;
        desc.for_each_ref_offset(obj, |_| refs += 1);
        (obj.len() - padding + GOM_HEADER_EXTRA_BYTES + GOM_REF_EXTRA_BYTES * refs) as u64
    }
}

/// The handle of a module or assembly: the object and its children collection.
#[derive(Debug, Clone, Copy)]
pub struct Handle {
    /// The object.
    obj: Oref,
    /// Its `subAssemblies` collection (complex assemblies) or null.
    coll: Oref,
}

/// Offset of element `i` of a `thor.Refs` object.
fn refs_slot(i: usize) -> usize {
    8 + 4 * i
}

/// The loader. See the module documentation.
struct ThorBuilder<'e> {
    /// The engine's bulk loader.
    loader: BulkLoader<'e>,
    /// Bytes per page (for large objects).
    page_size: usize,
    /// Defer every patch to the commit after the load (testing).
    defer_all: bool,
    /// Patches that missed the window: (object, byte offset, word).
    deferred: Vec<(Oref, usize, u32)>,
    /// Objects created per kind.
    counts: Counts,
    /// `oo7.Module`.
    module: Cls,
    /// `oo7.Manual`.
    manual: Cls,
    /// `oo7.ComplexAssembly`.
    complex: Cls,
    /// `oo7.BaseAssembly`.
    base: Cls,
    /// `oo7.CompositePart`.
    composite: Cls,
    /// `oo7.Document`.
    document: Cls,
    /// `oo7.AtomicPart`.
    atomic: Cls,
    /// `oo7.Connection`.
    connection: Cls,
    /// `oo7.Index`.
    index: Cls,
    /// `oo7.IndexNode`.
    index_node: Cls,
    /// Sizes at GOM's, for the report.
    gom: GomSizes,
    /// The objects' bytes at GOM's sizes so far ([`LoadReport::gom_object_bytes`]).
    gom_object_bytes: u64,
    /// The built-in `thor.Refs` (collections).
    refs: ClassDesc,
    /// The built-in `thor.Bytes` (type strings).
    bytes: ClassDesc,
    /// The list of modules (root slot 0).
    modules_list: Oref,
    /// The parameters object (root slot 1).
    params_obj: Oref,
    /// The schema directory (root slot 15).
    schema_dir: Oref,
    /// Chunks of each module's `allBases`.
    base_chunks: Vec<Vec<Oref>>,
    /// Base assemblies by id - 1.
    base_orefs: Vec<Oref>,
    /// Bag slots waiting for composite part `c`: `cp_links[c-1]`.
    cp_links: Vec<Vec<(Oref, usize)>>,
    /// (id, atomic part) for the id index.
    by_id: Vec<(u64, Oref)>,
    /// (date key, atomic part) for the date index.
    by_date: Vec<(u64, Oref)>,
    /// (title key, document) for the title index.
    by_title: Vec<(u64, Oref)>,
    /// The current composite part's atomic parts (reused).
    parts: Vec<Oref>,
    /// Their `to` collections (reused).
    tos: Vec<Oref>,
    /// Their `from` collections (reused).
    froms: Vec<Oref>,
}

impl<'e> ThorBuilder<'e> {
    fn new(mut loader: BulkLoader<'e>, p: &Params, opts: LoadOptions) -> Result<Self, Oo7Error> {
        let page_size = loader.page_size();
        let mut counts = Counts::default();
        // Class objects first, then the schema directory listing them. Objects are built from
        // the stored (possibly padded) layouts; the declared field offsets are theirs too.
        let descs = schema::stored_classes(opts.padding);
        let mut gom = GomSizes::default();
        let mut gom_object_bytes = 0;
        let mut words = Vec::new();
        for (d, declared) in descs.iter().zip(schema::classes()) {
            let obj = d.to_class_object();
            gom_object_bytes += gom.of(&obj);
            words.push(loader.add(&obj)?.raw());
            gom.classes.push((
                *words.last().expect("pushed"),
                d.clone(),
                opts.padding.extra_bytes(&declared),
            ));
            counts.metadata += 1;
        }
        let refs = builtin::desc(builtin::REFS).expect("builtin").clone();
        let mut dir = refs.new_object(builtin::REFS.raw(), descs.len());
        for (i, w) in words.iter().enumerate() {
            put_u32(&mut dir, refs_slot(i), *w);
        }
        gom_object_bytes += gom.of(&dir);
        let schema_dir = loader.add(&dir)?;
        counts.metadata += 1;
        let cls = |i: usize| Cls { desc: descs[i].clone(), word: words[i] };
        let params_cls = cls(8);
        let mut po = params_cls.new_object(0);
        let put = |o: &mut Vec<u8>, off: usize, v: u32| put_u32(o, off, v);
        put(&mut po, ParamsObj::version.offset(), LAYOUT_VERSION);
        thor_core::le::put_u64(&mut po, ParamsObj::seed.offset(), p.seed);
        put(&mut po, ParamsObj::atomic_per_composite.offset(), p.atomic_per_composite);
        put(&mut po, ParamsObj::connections_per_atomic.offset(), p.connections_per_atomic);
        put(&mut po, ParamsObj::document_bytes.offset(), p.document_bytes);
        put(&mut po, ParamsObj::manual_bytes.offset(), p.manual_bytes);
        put(&mut po, ParamsObj::composite_per_module.offset(), p.composite_per_module);
        put(&mut po, ParamsObj::assemblies_per_assembly.offset(), p.assemblies_per_assembly);
        put(&mut po, ParamsObj::assembly_levels.offset(), p.assembly_levels);
        put(&mut po, ParamsObj::composite_per_base.offset(), p.composite_per_base);
        put(&mut po, ParamsObj::modules.offset(), p.modules);
        put(&mut po, ParamsObj::doc_placement.offset(), p.doc_placement.code());
        put(&mut po, ParamsObj::next_composite.offset(), p.composite_parts() + 1);
        put(&mut po, ParamsObj::next_atomic.offset(), p.atomic_parts() as u32 + 1);
        gom_object_bytes += gom.of(&po);
        let params_obj = loader.add(&po)?;
        counts.metadata += 1;
        let list = refs.new_object(builtin::REFS.raw(), p.modules as usize);
        gom_object_bytes += gom.of(&list);
        let modules_list = loader.add(&list)?;
        counts.collections += 1;
        let n_cp = p.composite_parts() as usize;
        let n_atomic = p.atomic_parts() as usize;
        Ok(ThorBuilder {
            loader,
            page_size,
            defer_all: opts.defer_all_patches,
            deferred: Vec::new(),
            counts,
            gom,
            gom_object_bytes,
            module: cls(0),
            manual: cls(1),
            complex: cls(2),
            base: cls(3),
            composite: cls(4),
            document: cls(5),
            atomic: cls(6),
            connection: cls(7),
            index: cls(9),
            index_node: cls(10),
            bytes: builtin::desc(builtin::BYTES).expect("builtin").clone(),
            refs,
            modules_list,
            params_obj,
            schema_dir,
            base_chunks: Vec::new(),
            base_orefs: vec![Oref::NULL; (p.base_per_module() * p.modules) as usize],
            cp_links: vec![Vec::new(); n_cp],
            by_id: Vec::with_capacity(n_atomic),
            by_date: Vec::with_capacity(n_atomic),
            by_title: Vec::with_capacity(n_cp),
            parts: Vec::new(),
            tos: Vec::new(),
            froms: Vec::new(),
        })
    }

    /// Writes reference `target` at byte `off` of object `obj` (see the module documentation).
    fn patch(&mut self, obj: Oref, off: usize, target: Oref) -> Result<(), Oo7Error> {
        if !self.defer_all {
            match self.loader.object_mut(obj) {
                Ok(b) => {
                    put_u32(b, off, target.raw());
                    return Ok(());
                }
                Err(EngineError::NoSuchPage(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.deferred.push((obj, off, target.raw()));
        Ok(())
    }

    fn add(&mut self, bytes: &[u8]) -> Result<Oref, Oo7Error> {
        self.gom_object_bytes += self.gom.of(bytes);
        Ok(self.loader.add(bytes)?)
    }

    /// A `thor.Refs` collection of `n` references, all null (patched later) or given.
    fn add_refs(&mut self, targets: &[Oref], n: usize) -> Result<Oref, Oo7Error> {
        let mut o = self.refs.new_object(builtin::REFS.raw(), n);
        for (i, t) in targets.iter().enumerate() {
            put_u32(&mut o, refs_slot(i), t.raw());
        }
        self.counts.collections += 1;
        self.add(&o)
    }

    /// Creates the `type` string of `owner` and points the owner's `kind` field at it.
    fn add_type(&mut self, owner: Oref, field_off: usize, kind: u32) -> Result<(), Oo7Error> {
        let mut o = self.bytes.new_object(builtin::BYTES.raw(), TYPE_BYTES);
        let at = self.bytes.var_offset();
        o[at..at + TYPE_BYTES].copy_from_slice(&type_string(kind));
        let t = self.add(&o)?;
        self.counts.type_strings += 1;
        self.patch(owner, field_off, t)
    }

    /// Stores `data` as a large object and points `owner`'s field at its root.
    fn add_text(&mut self, owner: Oref, field_off: usize, data: &[u8]) -> Result<(), Oo7Error> {
        let objs = large::encode(data, large::LeafKind::Bytes, self.page_size);
        let mut orefs = Vec::with_capacity(objs.len());
        let mut links = Vec::new();
        for (k, obj) in objs.iter().enumerate() {
            let class = Oref::from_raw(thor_core::le::u32_at(obj, 0)).expect("builtin class");
            let desc = builtin::desc(class).expect("builtin");
            let mut bytes = obj.clone();
            desc.for_each_ref_offset(obj, |off| {
                if let RawRef::Tagged(j) = RawRef::decode(thor_core::le::u32_at(obj, off)) {
                    links.push((k, off, j as usize));
                }
                bytes[off..off + 4].fill(0);
            });
            orefs.push(self.add(&bytes)?);
            self.counts.text_pieces += 1;
        }
        for (k, off, j) in links {
            self.patch(orefs[k], off, orefs[j])?;
        }
        self.patch(owner, field_off, orefs[0])
    }

    fn add_document(
        &mut self,
        c: &CompositePlan,
        cp: Oref,
        doc_bytes: usize,
    ) -> Result<Oref, Oo7Error> {
        let mut d = self.document.new_object(0);
        put_u32(&mut d, Document::id.offset(), c.id);
        let title = document_title(c.id);
        d[Document::title.offset()..Document::title.offset() + TITLE_BYTES].copy_from_slice(&title);
        put_u32(&mut d, Document::part.offset(), cp.raw());
        let doc = self.add(&d)?;
        self.counts.documents += 1;
        self.by_title.push((title_key(&title), doc));
        self.add_text(doc, Document::text.offset(), &document_text(c.id, doc_bytes))?;
        self.patch(cp, CompositePart::documentation.offset(), doc)?;
        Ok(doc)
    }

    /// Builds the three indexes bottom-up from their sorted entries; returns their headers.
    fn build_indexes(&mut self) -> Result<(Oref, Oref, Oref), Oo7Error> {
        let mut by_id = std::mem::take(&mut self.by_id);
        let mut by_date = std::mem::take(&mut self.by_date);
        let mut by_title = std::mem::take(&mut self.by_title);
        let a = self.build_index(&mut by_id)?;
        let b = self.build_index(&mut by_date)?;
        let c = self.build_index(&mut by_title)?;
        Ok((a, b, c))
    }

    fn build_index(&mut self, entries: &mut [(u64, Oref)]) -> Result<Oref, Oo7Error> {
        entries.sort_unstable_by_key(|e| e.0);
        // Leaves three-quarters full: T3 moves entries between neighbouring leaves and the
        // structural insert adds some, and a full leaf would split on each.
        let per_leaf = (BTREE_FANOUT * 3 / 4).max(1);
        let mut level: Vec<(u64, Oref)> = Vec::new();
        for chunk in entries.chunks(per_leaf) {
            let n = self.add_node(true, chunk)?;
            level.push((chunk[0].0, n));
        }
        if level.is_empty() {
            let n = self.add_node(true, &[])?;
            level.push((0, n));
        }
        let mut height = 0u32;
        while level.len() > 1 {
            let mut up = Vec::new();
            for chunk in level.chunks(BTREE_FANOUT) {
                // An inner node with children c0..cm has keys min(c1)..min(cm).
                let n = self.add_inner(chunk)?;
                up.push((chunk[0].0, n));
            }
            level = up;
            height += 1;
        }
        let mut h = self.index.new_object(0);
        put_u32(&mut h, Index::root.offset(), level[0].1.raw());
        put_u32(&mut h, Index::height.offset(), height);
        put_u32(&mut h, Index::entries.offset(), entries.len() as u32);
        self.counts.index_objects += 1;
        self.add(&h)
    }

    fn node_bytes(&self, leaf: bool, keys: &[u64], refs: &[Oref]) -> Vec<u8> {
        let mut o = self.index_node.new_object(BTREE_FANOUT + 1);
        put_u32(&mut o, IndexNode::leaf.offset(), u32::from(leaf));
        put_u32(&mut o, IndexNode::count.offset(), keys.len() as u32);
        for (i, k) in keys.iter().enumerate() {
            thor_core::le::put_u64(&mut o, IndexNode::keys.offset() + 8 * i, *k);
        }
        let var = self.index_node.desc.var_offset();
        for (i, r) in refs.iter().enumerate() {
            put_u32(&mut o, var + 4 * i, r.raw());
        }
        o
    }

    fn add_node(&mut self, leaf: bool, entries: &[(u64, Oref)]) -> Result<Oref, Oo7Error> {
        let keys: Vec<u64> = entries.iter().map(|e| e.0).collect();
        let refs: Vec<Oref> = entries.iter().map(|e| e.1).collect();
        let o = self.node_bytes(leaf, &keys, &refs);
        self.counts.index_objects += 1;
        self.add(&o)
    }

    fn add_inner(&mut self, children: &[(u64, Oref)]) -> Result<Oref, Oo7Error> {
        let keys: Vec<u64> = children[1..].iter().map(|e| e.0).collect();
        let refs: Vec<Oref> = children.iter().map(|e| e.1).collect();
        let o = self.node_bytes(false, &keys, &refs);
        self.counts.index_objects += 1;
        self.add(&o)
    }
}

impl Builder for ThorBuilder<'_> {
    type Handle = Handle;

    fn module(&mut self, plan: &Plan, m: &ModulePlan) -> Result<Handle, Oo7Error> {
        let p = &plan.params;
        let mut o = self.module.new_object(0);
        put_u32(&mut o, Module::id.offset(), m.id);
        put_u32(&mut o, Module::build_date.offset(), m.date);
        let module = self.add(&o)?;
        self.counts.modules += 1;
        self.patch(self.modules_list, refs_slot(m.id as usize - 1), module)?;
        self.add_type(module, Module::kind.offset(), m.kind)?;
        // allBases: a collection of chunks, filled in as base assemblies are created.
        let bases = p.base_per_module() as usize;
        let n_chunks = bases.div_ceil(CHUNK_REFS);
        let top = self.add_refs(&[], n_chunks)?;
        let mut chunks = Vec::with_capacity(n_chunks);
        for c in 0..n_chunks {
            let n = (bases - c * CHUNK_REFS).min(CHUNK_REFS);
            let chunk = self.add_refs(&[], n)?;
            self.patch(top, refs_slot(c), chunk)?;
            chunks.push(chunk);
        }
        self.base_chunks.push(chunks);
        self.patch(module, Module::all_bases.offset(), top)?;
        // The manual and its text.
        let mut man = self.manual.new_object(0);
        put_u32(&mut man, Manual::id.offset(), m.id);
        man[Manual::title.offset()..Manual::title.offset() + TITLE_BYTES]
            .copy_from_slice(&manual_title(m.id));
        put_u32(&mut man, Manual::module.offset(), module.raw());
        let manual = self.add(&man)?;
        self.counts.manuals += 1;
        self.patch(module, Module::man.offset(), manual)?;
        self.add_text(manual, Manual::text.offset(), &manual_text(m.id, p.manual_bytes as usize))?;
        Ok(Handle { obj: module, coll: Oref::NULL })
    }

    fn complex(
        &mut self,
        plan: &Plan,
        a: &AssemblyPlan,
        module: Handle,
        parent: Option<Parent<Handle>>,
    ) -> Result<Handle, Oo7Error> {
        let mut o = self.complex.new_object(0);
        put_u32(&mut o, ComplexAssembly::id.offset(), a.id);
        put_u32(&mut o, ComplexAssembly::build_date.offset(), a.date);
        if let Some(par) = parent {
            put_u32(&mut o, ComplexAssembly::super_assembly.offset(), par.handle.obj.raw());
        }
        put_u32(&mut o, ComplexAssembly::module.offset(), module.obj.raw());
        let obj = self.add(&o)?;
        self.counts.complex_assemblies += 1;
        self.add_type(obj, ComplexAssembly::kind.offset(), a.kind)?;
        let coll = self.add_refs(&[], plan.params.assemblies_per_assembly as usize)?;
        self.patch(obj, ComplexAssembly::sub_assemblies.offset(), coll)?;
        match parent {
            Some(par) => self.patch(par.handle.coll, refs_slot(par.index as usize), obj)?,
            None => self.patch(module.obj, Module::design_root.offset(), obj)?,
        }
        Ok(Handle { obj, coll })
    }

    fn base(
        &mut self,
        plan: &Plan,
        a: &AssemblyPlan,
        module: Handle,
        parent: Parent<Handle>,
        index_in_module: u32,
    ) -> Result<Handle, Oo7Error> {
        let k = plan.params.composite_per_base as usize;
        let mut o = self.base.new_object(0);
        put_u32(&mut o, BaseAssembly::id.offset(), a.id);
        put_u32(&mut o, BaseAssembly::build_date.offset(), a.date);
        put_u32(&mut o, BaseAssembly::super_assembly.offset(), parent.handle.obj.raw());
        put_u32(&mut o, BaseAssembly::module.offset(), module.obj.raw());
        let obj = self.add(&o)?;
        self.counts.base_assemblies += 1;
        self.base_orefs[a.id as usize - 1] = obj;
        self.add_type(obj, BaseAssembly::kind.offset(), a.kind)?;
        let privs = self.add_refs(&[], k)?;
        self.patch(obj, BaseAssembly::components_priv.offset(), privs)?;
        let shars = self.add_refs(&[], k)?;
        self.patch(obj, BaseAssembly::components_shar.offset(), shars)?;
        for (i, &c) in plan.priv_of(a.id).iter().enumerate() {
            self.cp_links[c as usize - 1].push((privs, refs_slot(i)));
        }
        for (i, &c) in plan.shar_of(a.id).iter().enumerate() {
            self.cp_links[c as usize - 1].push((shars, refs_slot(i)));
        }
        self.patch(parent.handle.coll, refs_slot(parent.index as usize), obj)?;
        let chunk = self.base_chunks[a.module as usize][index_in_module as usize / CHUNK_REFS];
        self.patch(chunk, refs_slot(index_in_module as usize % CHUNK_REFS), obj)?;
        Ok(Handle { obj, coll: Oref::NULL })
    }

    fn composite(&mut self, plan: &Plan, c: &CompositePlan) -> Result<(), Oo7Error> {
        let p = &plan.params;
        let n = c.parts.len();
        let k = p.connections_per_atomic as usize;
        let mut o = self.composite.new_object(0);
        put_u32(&mut o, CompositePart::id.offset(), c.id);
        put_u32(&mut o, CompositePart::build_date.offset(), c.date);
        let cp = self.add(&o)?;
        self.counts.composite_parts += 1;
        self.add_type(cp, CompositePart::kind.offset(), c.kind)?;
        let parts = self.add_refs(&[], n)?;
        self.patch(cp, CompositePart::parts.offset(), parts)?;
        let upriv: Vec<Oref> =
            c.used_in_priv.iter().map(|&b| self.base_orefs[b as usize - 1]).collect();
        let ushar: Vec<Oref> =
            c.used_in_shar.iter().map(|&b| self.base_orefs[b as usize - 1]).collect();
        let up = self.add_refs(&upriv, upriv.len())?;
        self.patch(cp, CompositePart::used_in_priv.offset(), up)?;
        let us = self.add_refs(&ushar, ushar.len())?;
        self.patch(cp, CompositePart::used_in_shar.offset(), us)?;
        if p.doc_placement == DocPlacement::BeforeParts {
            self.add_document(c, cp, p.document_bytes as usize)?;
        }
        let mut ap_orefs = std::mem::take(&mut self.parts);
        let mut tos = std::mem::take(&mut self.tos);
        let mut froms = std::mem::take(&mut self.froms);
        ap_orefs.clear();
        tos.clear();
        froms.clear();
        for (j, part) in c.parts.iter().enumerate() {
            let mut a = self.atomic.new_object(0);
            put_u32(&mut a, AtomicPart::id.offset(), part.id);
            put_u32(&mut a, AtomicPart::build_date.offset(), part.date);
            put_u32(&mut a, AtomicPart::x.offset(), part.x);
            put_u32(&mut a, AtomicPart::y.offset(), part.y);
            put_u32(&mut a, AtomicPart::doc_id.offset(), c.id);
            put_u32(&mut a, AtomicPart::part_of.offset(), cp.raw());
            let ap = self.add(&a)?;
            self.counts.atomic_parts += 1;
            if j == 0 {
                self.patch(cp, CompositePart::root_part.offset(), ap)?;
            }
            self.patch(parts, refs_slot(j), ap)?;
            self.add_type(ap, AtomicPart::kind.offset(), part.kind)?;
            let to = self.add_refs(&[], k)?;
            self.patch(ap, AtomicPart::to.offset(), to)?;
            let from = self.add_refs(&[], c.from_of(j).len())?;
            self.patch(ap, AtomicPart::from.offset(), from)?;
            ap_orefs.push(ap);
            tos.push(to);
            froms.push(from);
            self.by_id.push((u64::from(part.id), ap));
            self.by_date.push((date_key(part.date, part.id), ap));
        }
        // Where each connection goes in its target's `from` collection.
        let mut from_slot = vec![0usize; c.conns.len()];
        for j in 0..n {
            for (s, &ci) in c.from_of(j).iter().enumerate() {
                from_slot[ci as usize] = s;
            }
        }
        for (ci, conn) in c.conns.iter().enumerate() {
            let mut co = self.connection.new_object(0);
            put_u32(&mut co, Connection::length.offset(), conn.length);
            put_u32(&mut co, Connection::from.offset(), ap_orefs[conn.from as usize].raw());
            put_u32(&mut co, Connection::to.offset(), ap_orefs[conn.to as usize].raw());
            let co = self.add(&co)?;
            self.counts.connections += 1;
            self.add_type(co, Connection::kind.offset(), conn.kind)?;
            self.patch(tos[conn.from as usize], refs_slot(ci % k), co)?;
            self.patch(froms[conn.to as usize], refs_slot(from_slot[ci]), co)?;
        }
        if p.doc_placement == DocPlacement::AfterConnections {
            self.add_document(c, cp, p.document_bytes as usize)?;
        }
        for (bag, off) in std::mem::take(&mut self.cp_links[c.id as usize - 1]) {
            self.patch(bag, off, cp)?;
        }
        self.parts = ap_orefs;
        self.tos = tos;
        self.froms = froms;
        Ok(())
    }
}
