//! T6, T1-, T1, T1+ and T2a-c over LMDB transactions.
//!
//! The algorithm is thor-oo7's, step for step (`thor_oo7::traverse` and `thor_oo7::native`):
//! each module's assembly tree in list order, the private composite parts of each base
//! assembly, and from each composite part's root part an explicit-stack depth-first search
//! with a dense visited set keyed by atomic-part id ([`Visited`], thor-oo7's own), popping
//! targets in reverse push order so that parts are visited in OO7's recursive order. Every
//! object the thor traversal reads is one `mdb_get` here:
//!
//! ```text
//! module -> complex assemblies (preorder) -> base assembly -> composite part -> root part
//! search: pop part (a get, also for parts already visited); if new: visit it (T2: update it),
//!         then get each connection in its `to` list for the connection's target
//! ```
//!
//! An object's lists and strings are inline in its value, so T1+ (which in thor reads a part's
//! `type` and `from` and each connection's `type` as objects of their own) reads nothing more
//! than T1 here. Updates (T2a-c) copy the part's value, change `x` and `y` in the copy and put
//! it back, one put per update, in the caller's write transaction; a later get in the same
//! transaction sees the new value, as in thor.
//!
//! Values are read in place from the map (no copy), except where a write follows: the
//! children of a complex assembly (at most [`ASSEMBLIES_PER_ASSEMBLY_MAX`]), the private
//! composite parts of a base assembly and the `to` list of the part being visited are copied
//! first, so that no borrow of the transaction is held across a put. The copies are a few
//! words in reused buffers, on both the read and the write paths.

use heed::{RoTxn, RwTxn, WithTls};
use thor_oo7::limits::ASSEMBLIES_PER_ASSEMBLY_MAX;
use thor_oo7::ops::OpResult;
use thor_oo7::visited::Visited;
use thor_oo7::{Op, Params};

use crate::error::BenchError;
use crate::format::{
    ATOMIC_X_AT, ATOMIC_Y_AT, AtomicRef, BaseRef, ComplexRef, CompositeRef, ConnRef, Meta,
    ModuleRef, Tag, checked_key,
};
use crate::store::Db;

/// A transaction the traversals can read through and, if it is a write transaction, write.
pub trait Access {
    /// The value of `key`, if any.
    fn get_raw<'s>(&'s self, db: &Db<'_>, key: &[u8; 4]) -> Result<Option<&'s [u8]>, BenchError>;
    /// Replaces the value of `key` (a write transaction only).
    fn put_raw(&mut self, db: &Db<'_>, key: &[u8; 4], value: &[u8]) -> Result<(), BenchError>;
}

impl Access for RoTxn<'_, WithTls> {
    #[inline(always)]
    fn get_raw<'s>(&'s self, db: &Db<'_>, key: &[u8; 4]) -> Result<Option<&'s [u8]>, BenchError> {
        Ok(db.get(self, key)?)
    }

    fn put_raw(&mut self, _db: &Db<'_>, _key: &[u8; 4], _value: &[u8]) -> Result<(), BenchError> {
        Err(BenchError::ReadOnly("an update"))
    }
}

impl Access for RwTxn<'_> {
    #[inline(always)]
    fn get_raw<'s>(&'s self, db: &Db<'_>, key: &[u8; 4]) -> Result<Option<&'s [u8]>, BenchError> {
        Ok(db.get(self, key)?)
    }

    fn put_raw(&mut self, db: &Db<'_>, key: &[u8; 4], value: &[u8]) -> Result<(), BenchError> {
        Ok(db.put(self, key, value)?)
    }
}

/// The update a traversal applies to the parts it visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Update {
    /// None (T1, T1-, T1+).
    None,
    /// The root part of each search only (T2a).
    Root,
    /// Every part visited (T2b, T2c).
    Every,
}

/// How a graph search treats the parts it visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    /// Stop after half of the composite part's parts (T1-).
    stop_half: bool,
    /// Read the parts' and connections' strings and `from` lists (T1+).
    sub_objects: bool,
    /// The update.
    update: Update,
    /// Updates per part (T2c: 4).
    times: u32,
}

/// What to do with each composite part reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartOp {
    /// Read the root part only (T6).
    Root,
    /// Search the graph.
    Graph(Mode),
}

impl PartOp {
    fn of(op: Op) -> Result<PartOp, BenchError> {
        let graph = |update, times| Mode { stop_half: false, sub_objects: false, update, times };
        Ok(match op {
            Op::T6 => PartOp::Root,
            Op::T1 => PartOp::Graph(graph(Update::None, 0)),
            Op::T1Minus => PartOp::Graph(Mode { stop_half: true, ..graph(Update::None, 0) }),
            Op::T1Plus => PartOp::Graph(Mode { sub_objects: true, ..graph(Update::None, 0) }),
            Op::T2a => PartOp::Graph(graph(Update::Root, 1)),
            Op::T2b => PartOp::Graph(graph(Update::Every, 1)),
            Op::T2c => PartOp::Graph(graph(Update::Every, 4)),
            other => return Err(BenchError::Unsupported(other.name())),
        })
    }
}

/// Whether [`Traverser::run`] supports `op`.
pub fn supports(op: Op) -> bool {
    PartOp::of(op).is_ok()
}

/// The traversals' state: the database's shape and reused buffers. See the module
/// documentation.
#[derive(Debug)]
pub struct Traverser {
    /// The generator's parameters (assembly levels, parts per composite part).
    params: Params,
    /// Atomic parts in the database: ids above it are corruption, not a reason to grow the
    /// visited set without bound.
    atomic_parts: u32,
    /// Modules in the database.
    modules: u32,
    /// The search's visited set.
    visited: Visited,
    /// The search's stack of atomic-part indexes.
    stack: Vec<u32>,
    /// The targets of one part's connections (reused).
    targets: Vec<u32>,
    /// The `to` list of the part being visited (reused).
    tos: Vec<u32>,
    /// The private composite parts of the base assembly being walked (reused).
    cps: Vec<u32>,
    /// A part's value being updated (reused).
    buf: Vec<u8>,
}

#[inline(always)]
fn get<'s, A: Access>(
    txn: &'s A,
    db: &Db<'_>,
    tag: Tag,
    index: u32,
) -> Result<&'s [u8], BenchError> {
    txn.get_raw(db, &checked_key(tag, index)?)?.ok_or(BenchError::Missing { tag, index })
}

impl Traverser {
    /// A traverser for the database `meta` describes.
    pub fn new(meta: &Meta) -> Traverser {
        Traverser {
            params: meta.params,
            atomic_parts: meta.counts.atomic,
            modules: meta.counts.modules,
            visited: Visited::new(meta.counts.atomic as usize + 1),
            stack: Vec::new(),
            targets: Vec::new(),
            tos: Vec::new(),
            cps: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// Runs `op` in `txn` (a write transaction for T2a-c).
    pub fn run<A: Access>(
        &mut self,
        db: &Db<'_>,
        txn: &mut A,
        op: Op,
    ) -> Result<OpResult, BenchError> {
        let p = PartOp::of(op)?;
        let mut out = OpResult::default();
        for m in 0..self.modules {
            let root = ModuleRef::parse(get(txn, db, Tag::Module, m)?)?.design_root;
            self.walk_complex(db, txn, root, 1, p, &mut out)?;
        }
        Ok(out)
    }

    fn walk_complex<A: Access>(
        &mut self,
        db: &Db<'_>,
        txn: &mut A,
        c: u32,
        level: u32,
        p: PartOp,
        out: &mut OpResult,
    ) -> Result<(), BenchError> {
        let mut kids = [0u32; ASSEMBLIES_PER_ASSEMBLY_MAX];
        let n = {
            let v = ComplexRef::parse(get(txn, db, Tag::Complex, c)?)?;
            if v.subs.len() > ASSEMBLIES_PER_ASSEMBLY_MAX {
                return Err(BenchError::Mismatch(format!(
                    "complex assembly {c} has {} children, above thor-oo7's bound",
                    v.subs.len()
                )));
            }
            for (k, s) in kids.iter_mut().zip(v.subs.iter()) {
                *k = s;
            }
            v.subs.len()
        };
        for &k in &kids[..n] {
            if level + 1 == self.params.assembly_levels {
                self.walk_base(db, txn, k, p, out)?;
            } else {
                self.walk_complex(db, txn, k, level + 1, p, out)?;
            }
        }
        Ok(())
    }

    fn walk_base<A: Access>(
        &mut self,
        db: &Db<'_>,
        txn: &mut A,
        b: u32,
        p: PartOp,
        out: &mut OpResult,
    ) -> Result<(), BenchError> {
        let mut cps = std::mem::take(&mut self.cps);
        cps.clear();
        cps.extend(BaseRef::parse(get(txn, db, Tag::Base, b)?)?.privs.iter());
        let mut result = Ok(());
        for &cp in &cps {
            match self.part_op(db, txn, cp, p) {
                Ok(r) => *out += r,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.cps = cps;
        result
    }

    fn part_op<A: Access>(
        &mut self,
        db: &Db<'_>,
        txn: &mut A,
        cp: u32,
        p: PartOp,
    ) -> Result<OpResult, BenchError> {
        let root = CompositeRef::parse(get(txn, db, Tag::Composite, cp)?)?.root_part;
        match p {
            PartOp::Root => {
                let a = AtomicRef::parse(get(txn, db, Tag::Atomic, root)?)?;
                std::hint::black_box(a.id);
                Ok(OpResult { parts_visited: 1, ..OpResult::default() })
            }
            PartOp::Graph(mode) => self.search(db, txn, root, mode),
        }
    }

    /// The graph search of the module documentation, from atomic part `root`.
    fn search<A: Access>(
        &mut self,
        db: &Db<'_>,
        txn: &mut A,
        root: u32,
        mode: Mode,
    ) -> Result<OpResult, BenchError> {
        let Mode { stop_half, sub_objects, update, times } = mode;
        let mut out = OpResult::default();
        let half = u64::from(self.params.atomic_per_composite).div_ceil(2);
        self.visited.clear();
        self.stack.clear();
        self.stack.push(root);
        while let Some(a) = self.stack.pop() {
            let v = get(txn, db, Tag::Atomic, a)?;
            let p = AtomicRef::parse(v)?;
            if p.id == 0 || p.id > self.atomic_parts {
                return Err(BenchError::Mismatch(format!(
                    "atomic part {a} has id {}, outside 1..={}",
                    p.id, self.atomic_parts
                )));
            }
            if !self.visited.insert(p.id) {
                continue;
            }
            out.parts_visited += 1;
            self.tos.clear();
            self.tos.extend(p.to.iter());
            if sub_objects {
                std::hint::black_box(p.kind.len());
                std::hint::black_box(p.from.len());
            }
            let applies = match update {
                Update::None => false,
                Update::Root => out.parts_visited == 1,
                Update::Every => true,
            };
            if applies {
                self.buf.clear();
                self.buf.extend_from_slice(v);
                let k = checked_key(Tag::Atomic, a)?;
                for _ in 0..times {
                    bump(&mut self.buf, ATOMIC_X_AT);
                    bump(&mut self.buf, ATOMIC_Y_AT);
                    txn.put_raw(db, &k, &self.buf)?;
                    out.updates += 1;
                }
            }
            if stop_half && out.parts_visited >= half {
                break;
            }
            self.targets.clear();
            for &c in &self.tos {
                let conn = ConnRef::parse(get(txn, db, Tag::Connection, c)?)?;
                self.targets.push(conn.to);
                if sub_objects {
                    std::hint::black_box(conn.kind.len());
                }
            }
            self.stack.extend(self.targets.iter().rev());
        }
        Ok(out)
    }
}

/// Adds one (wrapping, as thor-oo7 does) to the little-endian `u32` at `at`.
#[inline]
fn bump(b: &mut [u8], at: usize) {
    let w: [u8; 4] = b[at..at + 4].try_into().expect("a decoded part holds x and y");
    b[at..at + 4].copy_from_slice(&u32::from_le_bytes(w).wrapping_add(1).to_le_bytes());
}
