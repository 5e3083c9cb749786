//! The native baseline: the same database as an ordinary in-memory Rust object graph, and the
//! same operations over it. No persistence, no cache, no transactions: what the HAC paper's
//! C++ program and the Thor paper's C++/OS stand for when they measure hit time.
//!
//! The graph is built by the same [`Plan`] as the thor database, so it has the same ids, values
//! and links, and every operation returns the same [`OpResult`] (a test checks this). Objects
//! live in one `Vec` per class and refer to each other by index, the usual way to hold a graph
//! in Rust; the sub-objects thor stores separately are separate heap allocations here too (each
//! `type` string a `Box<[u8]>`, each collection a `Vec`), so T1+ has the same work to do. The
//! indexes are `BTreeMap`s.

use std::collections::BTreeMap;

use crate::error::Oo7Error;
use crate::ops::{GraphMode, Op, OpResult, Update, counts, step_date};
use crate::params::Params;
use crate::plan::{
    AssemblyPlan, Builder, CompositePlan, ModulePlan, Parent, Plan, generate, graph,
};
use crate::rng::Rng;
use crate::schema::{
    TITLE_BYTES, date_key, document_text, document_title, manual_text, title_key, type_string,
};
use crate::traverse::{PartOp, date_range, swap_opening};
use crate::visited::Visited;

/// A `type` string: a heap object of its own, as in thor.
type TypeStr = Box<[u8]>;

fn type_str(kind: u32) -> TypeStr {
    Box::new(type_string(kind))
}

/// A module.
#[derive(Debug)]
pub struct NModule {
    /// Id.
    pub id: u32,
    /// Type.
    pub kind: TypeStr,
    /// Build date.
    pub build_date: u32,
    /// The manual's title.
    pub man_title: [u8; TITLE_BYTES],
    /// The manual's text.
    pub man_text: Vec<u8>,
    /// The design root (index into `complex`).
    pub design_root: u32,
    /// Base assemblies (indexes into `base`).
    pub all_bases: Vec<u32>,
}

/// A complex assembly.
#[derive(Debug)]
pub struct NComplex {
    /// Id.
    pub id: u32,
    /// Type.
    pub kind: TypeStr,
    /// Build date.
    pub build_date: u32,
    /// Parent (index into `complex`).
    pub super_assembly: Option<u32>,
    /// Module index.
    pub module: u32,
    /// Children: indexes into `complex`, or into `base` one level above the leaves.
    pub sub_assemblies: Vec<u32>,
}

/// A base assembly.
#[derive(Debug)]
pub struct NBase {
    /// Id.
    pub id: u32,
    /// Type.
    pub kind: TypeStr,
    /// Build date.
    pub build_date: u32,
    /// Parent (index into `complex`).
    pub super_assembly: u32,
    /// Module index.
    pub module: u32,
    /// Private composite parts (indexes into `composites`).
    pub components_priv: Vec<u32>,
    /// Shared composite parts.
    pub components_shar: Vec<u32>,
}

/// A composite part.
#[derive(Debug)]
pub struct NComposite {
    /// Id.
    pub id: u32,
    /// Type.
    pub kind: TypeStr,
    /// Build date.
    pub build_date: u32,
    /// Its document (index into `documents`).
    pub documentation: u32,
    /// Its atomic parts (indexes into `atomic`).
    pub parts: Vec<u32>,
    /// The root part (index into `atomic`).
    pub root_part: u32,
    /// Base assemblies using it privately (indexes into `base`).
    pub used_in_priv: Vec<u32>,
    /// Base assemblies using it shared.
    pub used_in_shar: Vec<u32>,
    /// Unlinked by a structural delete.
    pub deleted: bool,
}

/// A document.
#[derive(Debug)]
pub struct NDocument {
    /// Id.
    pub id: u32,
    /// Title.
    pub title: [u8; TITLE_BYTES],
    /// Its composite part (index into `composites`).
    pub part: u32,
    /// Text.
    pub text: Vec<u8>,
}

/// An atomic part.
#[derive(Debug)]
pub struct NAtomic {
    /// Id.
    pub id: u32,
    /// Type.
    pub kind: TypeStr,
    /// Build date.
    pub build_date: u32,
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// Document id.
    pub doc_id: u32,
    /// Outgoing connections (indexes into `conns`).
    pub to: Vec<u32>,
    /// Incoming connections.
    pub from: Vec<u32>,
    /// Its composite part (index into `composites`).
    pub part_of: u32,
}

/// A connection.
#[derive(Debug)]
pub struct NConn {
    /// Type.
    pub kind: TypeStr,
    /// Length.
    pub length: u32,
    /// Source part (index into `atomic`).
    pub from: u32,
    /// Target part (index into `atomic`).
    pub to: u32,
}

/// The in-memory database. See the module documentation.
#[derive(Debug)]
pub struct NativeDb {
    /// The parameters.
    pub params: Params,
    /// Modules.
    pub modules: Vec<NModule>,
    /// Complex assemblies.
    pub complex: Vec<NComplex>,
    /// Base assemblies.
    pub base: Vec<NBase>,
    /// Composite parts.
    pub composites: Vec<NComposite>,
    /// Documents.
    pub documents: Vec<NDocument>,
    /// Atomic parts.
    pub atomic: Vec<NAtomic>,
    /// Connections.
    pub conns: Vec<NConn>,
    /// Atomic parts by id.
    id_index: BTreeMap<u64, u32>,
    /// Atomic parts by `date << 32 | id`.
    date_index: BTreeMap<u64, u32>,
    /// Documents by title hash.
    title_index: BTreeMap<u64, u32>,
    /// Next ids for structural inserts.
    next_composite: u32,
    next_atomic: u32,
    visited: Visited,
    stack: Vec<u32>,
    targets: Vec<u32>,
}

impl NativeDb {
    /// Builds the database `params` describes.
    pub fn generate(params: &Params, progress: impl FnMut(u64)) -> Result<NativeDb, Oo7Error> {
        let plan = Plan::new(params)?;
        let n_atomic = params.atomic_parts() as usize;
        let mut db = NativeDb {
            params: *params,
            modules: Vec::new(),
            complex: Vec::new(),
            base: Vec::new(),
            composites: Vec::with_capacity(params.composite_parts() as usize),
            documents: Vec::with_capacity(params.composite_parts() as usize),
            atomic: Vec::with_capacity(n_atomic),
            conns: Vec::with_capacity(params.connections() as usize),
            id_index: BTreeMap::new(),
            date_index: BTreeMap::new(),
            title_index: BTreeMap::new(),
            next_composite: params.composite_parts() + 1,
            next_atomic: n_atomic as u32 + 1,
            visited: Visited::new(n_atomic + 1),
            stack: Vec::new(),
            targets: Vec::new(),
        };
        generate(&plan, &mut db, progress)?;
        Ok(db)
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Runs `op` (the same random choices as [`crate::traverse::Db::run`] with the same `rng`).
    pub fn run(&mut self, op: Op, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        if let Some(p) = PartOp::of(op) {
            return Ok(self.traverse(p));
        }
        Ok(match op {
            Op::T7 => self.t7(rng)?,
            Op::T8 => self.manuals(false),
            Op::T9 => self.manuals(true),
            Op::Q1 => self.q1(rng),
            Op::Q2 => self.q_range(0.01),
            Op::Q3 => self.q_range(0.10),
            Op::Q4 => self.q4(rng),
            Op::Q5 => self.q5(),
            Op::Q6 => self.q6(),
            Op::Q7 => self.q7(),
            Op::Q8 => self.q8(),
            Op::Insert => self.insert(rng),
            Op::Delete => self.delete(),
            _ => return Err(Oo7Error::UnknownOperation(op.name().into())),
        })
    }

    pub(crate) fn traverse(&mut self, op: PartOp) -> OpResult {
        let mut out = OpResult::default();
        for m in 0..self.modules.len() {
            let root = self.modules[m].design_root;
            self.walk_complex(root, 1, op, &mut out);
        }
        out
    }

    fn walk_complex(&mut self, c: u32, level: u32, op: PartOp, out: &mut OpResult) {
        for i in 0..self.complex[c as usize].sub_assemblies.len() {
            let k = self.complex[c as usize].sub_assemblies[i];
            if level + 1 == self.params.assembly_levels {
                for j in 0..self.base[k as usize].components_priv.len() {
                    let cp = self.base[k as usize].components_priv[j];
                    *out += self.part_op(cp, op);
                }
            } else {
                self.walk_complex(k, level + 1, op, out);
            }
        }
    }

    pub(crate) fn part_op(&mut self, cp: u32, op: PartOp) -> OpResult {
        match op {
            PartOp::Graph(mode) => {
                let root = self.composites[cp as usize].root_part;
                self.search(root, mode)
            }
            PartOp::Root => {
                let root = self.composites[cp as usize].root_part;
                std::hint::black_box(self.atomic[root as usize].id);
                OpResult { parts_visited: 1, ..OpResult::default() }
            }
            PartOp::DocCount => {
                let d = self.composites[cp as usize].documentation;
                let n = self.documents[d as usize].text.iter().filter(|&&b| b == b'I').count();
                OpResult { result: n as u64, ..OpResult::default() }
            }
            PartOp::DocSwap => {
                let d = self.composites[cp as usize].documentation;
                let changed = swap_opening(&mut self.documents[d as usize].text);
                OpResult {
                    updates: u64::from(changed),
                    result: u64::from(changed),
                    ..OpResult::default()
                }
            }
        }
    }

    /// The graph search of [`crate::traverse`], over the native graph.
    pub(crate) fn search(&mut self, root: u32, mode: GraphMode) -> OpResult {
        let mut out = OpResult::default();
        let half = u64::from(self.params.atomic_per_composite).div_ceil(2);
        self.visited.clear();
        self.stack.clear();
        self.stack.push(root);
        while let Some(a) = self.stack.pop() {
            let p = &self.atomic[a as usize];
            if !self.visited.insert(p.id) {
                continue;
            }
            out.parts_visited += 1;
            if mode.update.applies(out.parts_visited) {
                for _ in 0..mode.times {
                    match mode.update {
                        Update::Xy | Update::XyRoot => {
                            let p = &mut self.atomic[a as usize];
                            p.x = p.x.wrapping_add(1);
                            p.y = p.y.wrapping_add(1);
                        }
                        Update::Date | Update::DateRoot => {
                            let p = &mut self.atomic[a as usize];
                            let (id, d) = (p.id, p.build_date);
                            p.build_date = step_date(d);
                            self.date_index.remove(&date_key(d, id));
                            self.date_index.insert(date_key(p.build_date, id), a);
                        }
                        Update::None => {}
                    }
                    out.updates += 1;
                }
            }
            if mode.stop_half && out.parts_visited >= half {
                break;
            }
            let p = &self.atomic[a as usize];
            if mode.sub_objects {
                std::hint::black_box(p.kind.len());
                std::hint::black_box(p.from.len());
            }
            self.targets.clear();
            for &c in &p.to {
                let conn = &self.conns[c as usize];
                self.targets.push(conn.to);
                if mode.sub_objects {
                    std::hint::black_box(conn.kind.len());
                }
            }
            self.stack.extend(self.targets.iter().rev());
        }
        out
    }

    /// The dynamic traversal's random path in module `m` (same choices as thor's).
    pub(crate) fn random_composite(&mut self, m: usize, rng: &mut Rng) -> u32 {
        let b = self.random_base(m, rng);
        let privs = &self.base[b as usize].components_priv;
        privs[rng.below(privs.len() as u64) as usize]
    }

    fn random_base(&self, m: usize, rng: &mut Rng) -> u32 {
        let mut r = self.modules[m].design_root;
        for _ in 1..self.params.assembly_levels {
            let subs = &self.complex[r as usize].sub_assemblies;
            r = subs[rng.below(subs.len() as u64) as usize];
        }
        r
    }

    fn t7(&mut self, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        let id = 1 + rng.below(self.params.atomic_parts()) as u32;
        let &a = self
            .id_index
            .get(&u64::from(id))
            .ok_or_else(|| Oo7Error::Inconsistent(format!("atomic part {id} not indexed")))?;
        let cp = self.atomic[a as usize].part_of;
        let mut out = OpResult { parts_visited: 1, ..OpResult::default() };
        for &b in &self.composites[cp as usize].used_in_priv {
            out.result += 1;
            let mut up = Some(self.base[b as usize].super_assembly);
            while let Some(u) = up {
                out.result += 1;
                up = self.complex[u as usize].super_assembly;
            }
        }
        Ok(out)
    }

    fn manuals(&self, first_last: bool) -> OpResult {
        let mut out = OpResult::default();
        for m in &self.modules {
            let t = &m.man_text;
            out.result += if first_last {
                u64::from(!t.is_empty() && t.first() == t.last())
            } else {
                t.iter().filter(|&&b| b == b'I').count() as u64
            };
        }
        out
    }

    fn q1(&self, rng: &mut Rng) -> OpResult {
        let mut out = OpResult::default();
        for _ in 0..counts::Q1_LOOKUPS {
            let id = 1 + rng.below(self.params.atomic_parts()) as u32;
            if let Some(&a) = self.id_index.get(&u64::from(id)) {
                std::hint::black_box(self.atomic[a as usize].x);
                out.parts_visited += 1;
            }
        }
        out
    }

    fn q_range(&self, fraction: f64) -> OpResult {
        let (lo, hi) = date_range(fraction);
        let mut out = OpResult::default();
        for (_, &a) in self.date_index.range(date_key(lo, 0)..date_key(hi + 1, 0)) {
            std::hint::black_box(self.atomic[a as usize].x);
            out.parts_visited += 1;
        }
        out
    }

    fn q4(&self, rng: &mut Rng) -> OpResult {
        let mut out = OpResult::default();
        for _ in 0..counts::Q4_LOOKUPS {
            let cp = 1 + rng.below(self.params.composite_parts().into()) as u32;
            let Some(&d) = self.title_index.get(&title_key(&document_title(cp))) else { continue };
            let part = self.documents[d as usize].part;
            for &b in &self.composites[part as usize].used_in_priv {
                std::hint::black_box(self.base[b as usize].id);
                out.result += 1;
            }
        }
        out
    }

    fn q5(&self) -> OpResult {
        let mut out = OpResult::default();
        for m in &self.modules {
            for &b in &m.all_bases {
                let ba = &self.base[b as usize];
                if ba
                    .components_priv
                    .iter()
                    .any(|&c| self.composites[c as usize].build_date > ba.build_date)
                {
                    out.result += 1;
                }
            }
        }
        out
    }

    fn q6(&self) -> OpResult {
        let mut out = OpResult::default();
        for m in &self.modules {
            self.q6_complex(m.design_root, 1, &mut out);
        }
        out
    }

    fn q6_complex(&self, c: u32, level: u32, out: &mut OpResult) -> u32 {
        let ca = &self.complex[c as usize];
        let mut latest = 0;
        for &k in &ca.sub_assemblies {
            let d = if level + 1 == self.params.assembly_levels {
                let b = &self.base[k as usize];
                let l = b
                    .components_priv
                    .iter()
                    .map(|&c| self.composites[c as usize].build_date)
                    .max()
                    .unwrap_or(0);
                out.result += u64::from(l > b.build_date);
                l
            } else {
                self.q6_complex(k, level + 1, out)
            };
            latest = latest.max(d);
        }
        out.result += u64::from(latest > ca.build_date);
        latest
    }

    fn q7(&self) -> OpResult {
        let mut out = OpResult::default();
        for &a in self.id_index.values() {
            std::hint::black_box(self.atomic[a as usize].x);
            out.parts_visited += 1;
        }
        out
    }

    fn q8(&self) -> OpResult {
        let mut ids = rustc_hash::FxHashMap::default();
        for &d in self.title_index.values() {
            *ids.entry(self.documents[d as usize].id).or_insert(0u64) += 1;
        }
        let mut out = OpResult::default();
        for &a in self.id_index.values() {
            out.parts_visited += 1;
            out.result += ids.get(&self.atomic[a as usize].doc_id).copied().unwrap_or(0);
        }
        out
    }

    fn insert(&mut self, rng: &mut Rng) -> OpResult {
        let mut out = OpResult::default();
        for _ in 0..counts::STRUCTURAL {
            let module = rng.below(self.modules.len() as u64) as usize;
            let b = self.random_base(module, rng);
            let g = graph(&self.params, self.next_composite, self.next_atomic);
            let cp = self.add_composite(&g);
            self.composites[cp as usize].used_in_priv.push(b);
            self.base[b as usize].components_priv.push(cp);
            self.next_composite += 1;
            self.next_atomic += self.params.atomic_per_composite;
            out.result += 1;
            out.parts_visited += u64::from(self.params.atomic_per_composite);
        }
        out
    }

    fn delete(&mut self) -> OpResult {
        let mut out = OpResult::default();
        let first_new = self.params.composite_parts() + 1;
        for id in first_new..self.next_composite {
            let Some(d) = self.title_index.remove(&title_key(&document_title(id))) else {
                continue;
            };
            let cp = self.documents[d as usize].part;
            for i in 0..self.composites[cp as usize].parts.len() {
                let a = self.composites[cp as usize].parts[i] as usize;
                let (pid, date) = (self.atomic[a].id, self.atomic[a].build_date);
                self.id_index.remove(&u64::from(pid));
                self.date_index.remove(&date_key(date, pid));
                out.parts_visited += 1;
            }
            for i in 0..self.composites[cp as usize].used_in_priv.len() {
                let b = self.composites[cp as usize].used_in_priv[i];
                self.base[b as usize].components_priv.retain(|&c| c != cp);
            }
            self.composites[cp as usize].deleted = true;
            out.result += 1;
        }
        out
    }

    /// Adds a composite part with its graph and document (indexed); returns its index.
    fn add_composite(&mut self, c: &CompositePlan) -> u32 {
        let cp = self.composites.len() as u32;
        let d = self.documents.len() as u32;
        let title = document_title(c.id);
        self.title_index.insert(title_key(&title), d);
        self.documents.push(NDocument {
            id: c.id,
            title,
            part: cp,
            text: document_text(c.id, self.params.document_bytes as usize),
        });
        let first = self.atomic.len() as u32;
        let first_conn = self.conns.len() as u32;
        let k = self.params.connections_per_atomic as usize;
        for (j, p) in c.parts.iter().enumerate() {
            let a = first + j as u32;
            self.id_index.insert(u64::from(p.id), a);
            self.date_index.insert(date_key(p.date, p.id), a);
            self.atomic.push(NAtomic {
                id: p.id,
                kind: type_str(p.kind),
                build_date: p.date,
                x: p.x,
                y: p.y,
                doc_id: c.id,
                to: (0..k as u32).map(|i| first_conn + (j * k) as u32 + i).collect(),
                from: c.from_of(j).iter().map(|&ci| first_conn + ci).collect(),
                part_of: cp,
            });
        }
        for conn in &c.conns {
            self.conns.push(NConn {
                kind: type_str(conn.kind),
                length: conn.length,
                from: first + conn.from,
                to: first + conn.to,
            });
        }
        self.composites.push(NComposite {
            id: c.id,
            kind: type_str(c.kind),
            build_date: c.date,
            documentation: d,
            parts: (first..first + c.parts.len() as u32).collect(),
            root_part: first,
            used_in_priv: Vec::new(),
            used_in_shar: Vec::new(),
            deleted: false,
        });
        cp
    }
}

impl Builder for NativeDb {
    type Handle = u32;

    fn module(&mut self, plan: &Plan, m: &ModulePlan) -> Result<u32, Oo7Error> {
        let i = self.modules.len() as u32;
        self.modules.push(NModule {
            id: m.id,
            kind: type_str(m.kind),
            build_date: m.date,
            man_title: crate::schema::manual_title(m.id),
            man_text: manual_text(m.id, plan.params.manual_bytes as usize),
            design_root: u32::MAX,
            all_bases: Vec::with_capacity(plan.params.base_per_module() as usize),
        });
        Ok(i)
    }

    fn complex(
        &mut self,
        _plan: &Plan,
        a: &AssemblyPlan,
        module: u32,
        parent: Option<Parent<u32>>,
    ) -> Result<u32, Oo7Error> {
        let i = self.complex.len() as u32;
        self.complex.push(NComplex {
            id: a.id,
            kind: type_str(a.kind),
            build_date: a.date,
            super_assembly: parent.map(|p| p.handle),
            module,
            sub_assemblies: Vec::new(),
        });
        match parent {
            Some(p) => self.complex[p.handle as usize].sub_assemblies.push(i),
            None => self.modules[module as usize].design_root = i,
        }
        Ok(i)
    }

    fn base(
        &mut self,
        plan: &Plan,
        a: &AssemblyPlan,
        module: u32,
        parent: Parent<u32>,
        _index: u32,
    ) -> Result<u32, Oo7Error> {
        let i = self.base.len() as u32;
        self.base.push(NBase {
            id: a.id,
            kind: type_str(a.kind),
            build_date: a.date,
            super_assembly: parent.handle,
            module,
            components_priv: plan.priv_of(a.id).iter().map(|&c| c - 1).collect(),
            components_shar: plan.shar_of(a.id).iter().map(|&c| c - 1).collect(),
        });
        self.complex[parent.handle as usize].sub_assemblies.push(i);
        self.modules[module as usize].all_bases.push(i);
        Ok(i)
    }

    fn composite(&mut self, _plan: &Plan, c: &CompositePlan) -> Result<(), Oo7Error> {
        let cp = self.add_composite(c);
        debug_assert_eq!(cp + 1, c.id);
        let comp = &mut self.composites[cp as usize];
        comp.used_in_priv = c.used_in_priv.iter().map(|&b| b - 1).collect();
        comp.used_in_shar = c.used_in_shar.iter().map(|&b| b - 1).collect();
        Ok(())
    }
}
