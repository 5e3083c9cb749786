//! The LMDB environment: opening it, loading thor-oo7's database into it, and checking what it
//! holds against thor-oo7's model.
//!
//! # Loading
//!
//! thor-oo7's generator builds the database as a [`NativeDb`] (the native baseline's graph: the
//! same plan, so the same ids, values and links as the thor database of the same parameters).
//! The loader writes its objects class by class in index order, which is key order
//! ([`crate::format`]), with `MDB_APPEND`: LMDB then fills each leaf page before starting the
//! next instead of splitting pages in half, so the B-tree is as dense as LMDB can make it (the
//! best case for a memory footprint). It commits every [`COMMIT_EVERY`] objects so that no
//! transaction's dirty pages outgrow LMDB's limit on the large preset, and syncs at the end.
//!
//! One environment is one directory holding LMDB's `data.mdb` and `lock.mdb`, with the single
//! unnamed database.

use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Env, EnvFlags, EnvOpenOptions, PutFlags, RoTxn, RwTxn};
use thor_oo7::Params;
use thor_oo7::native::NativeDb;

use crate::error::BenchError;
use crate::format::{self, Counts, Meta, Tag, key};
use crate::limits::{INDEX_MAX, MAP_BYTES};

/// The database: raw keys and values.
pub type Db<'e> = heed::Database<'e, Bytes, Bytes>;

/// Objects written per write transaction while loading.
pub const COMMIT_EVERY: usize = 65_536;

/// The name of LMDB's data file in an environment's directory.
pub const DATA_FILE: &str = "data.mdb";

/// How to open an environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvConfig {
    /// Open for writing, creating the environment if absent (otherwise read-only: write
    /// transactions are refused).
    pub writable: bool,
    /// Let the kernel read ahead around each page fault in the map (LMDB's default); without
    /// it LMDB opens with `MDB_NORDAHEAD` (`MADV_RANDOM` on the map), so a fault reads only
    /// what it needs.
    pub readahead: bool,
}

impl EnvConfig {
    /// Read-only, with LMDB's defaults.
    pub const READ_ONLY: EnvConfig = EnvConfig { writable: false, readahead: true };
    /// Writable, with LMDB's defaults.
    pub const WRITABLE: EnvConfig = EnvConfig { writable: true, readahead: true };
}

/// Opens (creating if writable and absent) the environment in `dir`.
pub fn open_env(dir: &Path, cfg: EnvConfig) -> Result<Env, BenchError> {
    let EnvConfig { writable, readahead } = cfg;
    if writable {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    } else if !dir.join(DATA_FILE).is_file() {
        return Err(BenchError::io(
            dir.join(DATA_FILE),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no LMDB database here (make one with `oo7-lmdb load`)",
            ),
        ));
    }
    let mut o = EnvOpenOptions::new();
    o.map_size(MAP_BYTES).max_dbs(0);
    let mut flags = EnvFlags::empty();
    if !writable {
        flags |= EnvFlags::READ_ONLY;
    }
    if !readahead {
        flags |= EnvFlags::NO_READ_AHEAD;
    }
    // SAFETY: neither READ_ONLY nor NO_READ_AHEAD is one of LMDB's unsafe flags (those disable
    // syncing or locking): one refuses write transactions, the other only advises the kernel.
    unsafe {
        o.flags(flags);
    }
    // SAFETY: the map's safety rests on nobody truncating or rewriting the file outside LMDB
    // while it is mapped; this benchmark's files are its own, written only through LMDB, and
    // LMDB's lock file serialises writers between processes.
    Ok(unsafe { o.open(dir)? })
}

/// The environment's unnamed database, which must exist (a loaded environment).
pub fn open_db(env: &Env) -> Result<Db<'_>, BenchError> {
    let rtxn = env.read_txn()?;
    let db = env
        .open_databases_and_commit(rtxn, |dbo, rtxn| {
            dbo.open_database::<Bytes, Bytes>(rtxn, None).map(CommitOrAbort::<_, ()>::Commit)
        })?
        .commit()
        .flatten();
    db.ok_or(BenchError::Missing { tag: Tag::Meta, index: 0 })
}

/// The unnamed database, created if absent.
fn create_db(env: &Env) -> Result<Db<'_>, BenchError> {
    let wtxn = env.write_txn()?;
    let db = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| {
            dbo.create_database::<Bytes, Bytes>(wtxn, None).map(CommitOrAbort::<_, ()>::Commit)
        })?
        .commit();
    db.ok_or(BenchError::Missing { tag: Tag::Meta, index: 0 })
}

/// Reads the meta value.
pub fn read_meta(db: &Db<'_>, txn: &RoTxn<'_>) -> Result<Meta, BenchError> {
    let v =
        db.get(txn, &key(Tag::Meta, 0))?.ok_or(BenchError::Missing { tag: Tag::Meta, index: 0 })?;
    Ok(format::decode_meta(v)?)
}

/// Reads the meta value in a read transaction of its own.
pub fn meta(env: &Env, db: &Db<'_>) -> Result<Meta, BenchError> {
    let txn = env.read_txn()?;
    read_meta(db, &txn)
}

/// The class counts of a generated database.
pub fn counts(n: &NativeDb) -> Counts {
    Counts {
        modules: n.modules.len() as u32,
        complex: n.complex.len() as u32,
        base: n.base.len() as u32,
        composites: n.composites.len() as u32,
        documents: n.documents.len() as u32,
        atomic: n.atomic.len() as u32,
        conns: n.conns.len() as u32,
    }
}

/// What a load did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// Objects of each class.
    pub counts: Counts,
    /// Bytes of values written (keys and LMDB's own structures not counted).
    pub value_bytes: u64,
    /// LMDB's page size.
    pub page_size: u32,
    /// B-tree depth.
    pub depth: u32,
    /// Branch pages.
    pub branch_pages: usize,
    /// Leaf pages.
    pub leaf_pages: usize,
    /// Overflow pages (values larger than about half a page: documents and manuals).
    pub overflow_pages: usize,
    /// Bytes of the data file.
    pub file_bytes: u64,
}

/// Writes `n` into the empty environment `env`; `progress` is called with objects written.
pub fn load(
    env: &Env,
    n: &NativeDb,
    mut progress: impl FnMut(u64, u64),
) -> Result<LoadReport, BenchError> {
    let counts = counts(n);
    for (tag, count) in [
        (Tag::Module, n.modules.len()),
        (Tag::Complex, n.complex.len()),
        (Tag::Base, n.base.len()),
        (Tag::Composite, n.composites.len()),
        (Tag::Document, n.documents.len()),
        (Tag::Atomic, n.atomic.len()),
        (Tag::Connection, n.conns.len()),
    ] {
        if count > INDEX_MAX as usize + 1 {
            return Err(BenchError::TooLarge { tag, count, max: INDEX_MAX });
        }
    }
    let db = create_db(env)?;
    {
        let rtxn = env.read_txn()?;
        if !db.is_empty(&rtxn)? {
            return Err(BenchError::Mismatch(format!(
                "{} already holds a database: load into a new directory",
                env.path().display()
            )));
        }
    }
    let total = counts.total() + 1;
    let mut w = Writer { env, db, txn: Some(env.write_txn()?), in_txn: 0, done: 0, bytes: 0 };
    let mut buf = Vec::new();
    format::encode_meta(&n.params, &counts, &mut buf);
    w.put(Tag::Meta, 0, &buf)?;
    // Key order: the classes in tag order, each in index order (`Tag::ALL`).
    for (i, m) in n.modules.iter().enumerate() {
        format::encode_module(m, &mut buf);
        w.put(Tag::Module, i as u32, &buf)?;
    }
    for (i, c) in n.complex.iter().enumerate() {
        format::encode_complex(c, &mut buf);
        w.put(Tag::Complex, i as u32, &buf)?;
    }
    for (i, b) in n.base.iter().enumerate() {
        format::encode_base(b, &mut buf);
        w.put(Tag::Base, i as u32, &buf)?;
    }
    for (i, c) in n.composites.iter().enumerate() {
        format::encode_composite(c, &mut buf);
        w.put(Tag::Composite, i as u32, &buf)?;
    }
    for (i, a) in n.atomic.iter().enumerate() {
        format::encode_atomic(a, &mut buf);
        w.put(Tag::Atomic, i as u32, &buf)?;
        if i % COMMIT_EVERY == 0 {
            progress(w.done, total);
        }
    }
    for (i, c) in n.conns.iter().enumerate() {
        format::encode_conn(c, &mut buf);
        w.put(Tag::Connection, i as u32, &buf)?;
        if i % COMMIT_EVERY == 0 {
            progress(w.done, total);
        }
    }
    for (i, d) in n.documents.iter().enumerate() {
        format::encode_document(d, &mut buf);
        w.put(Tag::Document, i as u32, &buf)?;
    }
    let value_bytes = w.bytes;
    if let Some(t) = w.txn.take() {
        t.commit()?;
    }
    env.force_sync()?;
    progress(total, total);
    let rtxn = env.read_txn()?;
    let st = db.stat(&rtxn)?;
    let file = env.path().join(DATA_FILE);
    let file_bytes = std::fs::metadata(&file).map_err(|e| BenchError::io(&file, e))?.len();
    Ok(LoadReport {
        counts,
        value_bytes,
        page_size: st.page_size,
        depth: st.depth,
        branch_pages: st.branch_pages,
        leaf_pages: st.leaf_pages,
        overflow_pages: st.overflow_pages,
        file_bytes,
    })
}

/// Appends in key order, committing every [`COMMIT_EVERY`] objects.
struct Writer<'e> {
    env: &'e Env,
    db: Db<'e>,
    txn: Option<RwTxn<'e>>,
    in_txn: usize,
    done: u64,
    bytes: u64,
}

impl Writer<'_> {
    fn put(&mut self, tag: Tag, index: u32, value: &[u8]) -> Result<(), BenchError> {
        let txn = self.txn.as_mut().expect("a transaction is open between puts");
        self.db.put_with_flags(txn, PutFlags::APPEND, &key(tag, index), value)?;
        self.in_txn += 1;
        self.done += 1;
        self.bytes += value.len() as u64;
        if self.in_txn == COMMIT_EVERY {
            self.txn.take().expect("open").commit()?;
            self.txn = Some(self.env.write_txn()?);
            self.in_txn = 0;
        }
        Ok(())
    }
}

/// Generates the database `params` describes with thor-oo7's generator and loads it into a new
/// environment in `dir`.
pub fn generate_and_load(
    dir: &Path,
    params: &Params,
    progress: impl FnMut(u64, u64),
) -> Result<LoadReport, BenchError> {
    let n = NativeDb::generate(params, |_| {})?;
    let env = open_env(dir, EnvConfig::WRITABLE)?;
    let report = load(&env, &n, progress)?;
    drop(env);
    Ok(report)
}

/// Checks that every value in the database decodes to the object of `n` with its index: the
/// same ids, values, strings and links. Reads every value once.
pub fn verify(db: &Db<'_>, txn: &RoTxn<'_>, n: &NativeDb) -> Result<(), BenchError> {
    use format::*;
    let meta = read_meta(db, txn)?;
    if meta.params != n.params || meta.counts != counts(n) {
        return Err(BenchError::Mismatch(format!(
            "meta {meta:?} against the model's {:?} {:?}",
            n.params,
            counts(n)
        )));
    }
    let get = |tag: Tag, i: usize| -> Result<&[u8], BenchError> {
        db.get(txn, &key(tag, i as u32))?.ok_or(BenchError::Missing { tag, index: i as u32 })
    };
    let differ = |tag: Tag, i: usize| BenchError::Mismatch(format!("{} {i}", tag.name()));
    for (i, m) in n.modules.iter().enumerate() {
        let v = ModuleRef::parse(get(Tag::Module, i)?)?;
        if (v.id, v.build_date, v.design_root) != (m.id, m.build_date, m.design_root)
            || v.kind != &*m.kind
            || v.man_title != m.man_title
            || v.all_bases.to_vec() != m.all_bases
            || v.man_text != m.man_text
        {
            return Err(differ(Tag::Module, i));
        }
    }
    for (i, c) in n.complex.iter().enumerate() {
        let v = ComplexRef::parse(get(Tag::Complex, i)?)?;
        if (v.id, v.build_date, v.super_assembly, v.module)
            != (c.id, c.build_date, c.super_assembly.unwrap_or(NONE), c.module)
            || v.kind != &*c.kind
            || v.subs.to_vec() != c.sub_assemblies
        {
            return Err(differ(Tag::Complex, i));
        }
    }
    for (i, b) in n.base.iter().enumerate() {
        let v = BaseRef::parse(get(Tag::Base, i)?)?;
        if (v.id, v.build_date, v.super_assembly, v.module)
            != (b.id, b.build_date, b.super_assembly, b.module)
            || v.kind != &*b.kind
            || v.privs.to_vec() != b.components_priv
            || v.shars.to_vec() != b.components_shar
        {
            return Err(differ(Tag::Base, i));
        }
    }
    for (i, c) in n.composites.iter().enumerate() {
        let v = CompositeRef::parse(get(Tag::Composite, i)?)?;
        if (v.id, v.build_date, v.documentation, v.root_part)
            != (c.id, c.build_date, c.documentation, c.root_part)
            || v.kind != &*c.kind
            || v.parts.to_vec() != c.parts
            || v.used_in_priv.to_vec() != c.used_in_priv
            || v.used_in_shar.to_vec() != c.used_in_shar
        {
            return Err(differ(Tag::Composite, i));
        }
    }
    for (i, d) in n.documents.iter().enumerate() {
        let v = DocumentRef::parse(get(Tag::Document, i)?)?;
        if (v.id, v.part) != (d.id, d.part) || v.title != d.title || v.text != d.text {
            return Err(differ(Tag::Document, i));
        }
    }
    for (i, a) in n.atomic.iter().enumerate() {
        let v = AtomicRef::parse(get(Tag::Atomic, i)?)?;
        if (v.id, v.build_date, v.x, v.y, v.doc_id, v.part_of)
            != (a.id, a.build_date, a.x, a.y, a.doc_id, a.part_of)
            || v.kind != &*a.kind
            || v.to.to_vec() != a.to
            || v.from.to_vec() != a.from
        {
            return Err(differ(Tag::Atomic, i));
        }
    }
    for (i, c) in n.conns.iter().enumerate() {
        let v = ConnRef::parse(get(Tag::Connection, i)?)?;
        if (v.length, v.from, v.to) != (c.length, c.from, c.to) || v.kind != &*c.kind {
            return Err(differ(Tag::Connection, i));
        }
    }
    let entries = db.len(txn)?;
    if entries != counts(n).total() + 1 {
        return Err(BenchError::Mismatch(format!(
            "{entries} values, the model has {} objects and the meta value",
            counts(n).total()
        )));
    }
    Ok(())
}
