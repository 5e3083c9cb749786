//! The operations over a thor session: traversals, queries and structural changes.
//!
//! [`Db`] wraps a [`Session`] on an OO7 database: it reads the parameters object and the
//! module list once, then runs [`Op`]s. Every object access goes through [`Db::get`], which
//! reports it to a [`Trace`] (nothing, by default, at no cost: the tracer is a type parameter)
//! and then asks the session.
//!
//! # The graph search
//!
//! T1 and its variants search each composite part's graph depth-first from its root part with
//! an explicit stack, marking parts in a [`Visited`] set keyed by id:
//!
//! ```text
//! push(root)
//! while let Some(p) = pop():
//!     read p (its id)            ── an access, also for parts already visited
//!     if !visited.insert(id): continue
//!     visit p                    ── T2/T3 update it, T1+ reads its type and `from`
//!     read p.to; for each connection c in order: read c (its `to`; T1+ its type)
//!     push the targets in reverse order
//! ```
//!
//! Popping in reverse push order visits parts in exactly the order of OO7's recursive search
//! (each part's connections in creation order), while no object stays pinned across the
//! search: a view lives only while its object is read, so even tiny caches can run it. The
//! native baseline ([`crate::native`]) runs the same loop over its own graph.

use thor_client::{Any, Bytes, Large, Ref, Refs, Session, View};
use thor_core::Oref;

use crate::error::Oo7Error;
use crate::limits::ASSEMBLIES_PER_ASSEMBLY_MAX;
use crate::ops::{GraphMode, Op, OpResult, Update, counts, step_date};
use crate::params::{DocPlacement, Params};
use crate::rng::Rng;
use crate::schema::*;
use crate::visited::Visited;

/// Receives every object access of a [`Db`] (for page reference strings).
pub trait Trace {
    /// Object `oref` is about to be accessed (`None`: an object created by the current
    /// transaction, which has no oref yet).
    fn access(&mut self, oref: Option<Oref>);
}

/// The tracer that records nothing (and compiles to nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTrace;

impl Trace for NoTrace {
    #[inline(always)]
    fn access(&mut self, _oref: Option<Oref>) {}
}

impl<F: FnMut(Option<Oref>)> Trace for F {
    #[inline]
    fn access(&mut self, oref: Option<Oref>) {
        self(oref)
    }
}

/// What to do with each composite part reached by a traversal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PartOp {
    /// Search the graph.
    Graph(GraphMode),
    /// Read the root part only (T6).
    Root,
    /// Count `I`s in the document (T4).
    DocCount,
    /// Swap the document's first words (T5).
    DocSwap,
}

impl PartOp {
    pub(crate) fn of(op: Op) -> Option<PartOp> {
        match op {
            Op::T6 => Some(PartOp::Root),
            Op::T4 => Some(PartOp::DocCount),
            Op::T5 => Some(PartOp::DocSwap),
            other => other.graph_mode().map(PartOp::Graph),
        }
    }
}

/// An OO7 database open in a session. See the module documentation.
pub struct Db<'s, T: Trace = NoTrace> {
    /// The session.
    s: &'s Session,
    /// The database's parameters (from its parameters object).
    params: Params,
    /// The object sizes its classes are stored with (from the stored classes).
    padding: Padding,
    /// The modules, in order.
    modules: Vec<Ref<Module>>,
    /// The graph search's visited set.
    visited: Visited,
    /// The graph search's stack.
    stack: Vec<Ref<AtomicPart>>,
    /// Targets of one part's connections, in order (reused).
    targets: Vec<Ref<AtomicPart>>,
    /// The composite parts of the base assembly being walked (reused).
    cps: Vec<Ref<CompositePart>>,
    /// The access tracer.
    trace: T,
    /// Commit after every this many composite parts of a traversal (0: never; the whole
    /// operation is one transaction).
    commit_every: u32,
    /// Composite parts operated on since the last intermediate commit.
    since_commit: u32,
    /// Time spent in intermediate commits.
    commit_time: std::time::Duration,
}

impl<T: Trace> std::fmt::Debug for Db<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("params", &self.params).finish_non_exhaustive()
    }
}

/// Reads the parameters object of a database.
fn read_params(s: &Session) -> Result<Params, Oo7Error> {
    let not = |e: thor_client::ClientError| Oo7Error::NotOo7(e.to_string());
    let r = s.root::<ParamsObj>(SLOT_PARAMS).map_err(not)?;
    if r.is_null() {
        return Err(Oo7Error::NotOo7("root slot 1 is empty".into()));
    }
    let v = s.get(r).map_err(not)?;
    if v.get(ParamsObj::version) != LAYOUT_VERSION {
        return Err(Oo7Error::NotOo7(format!(
            "layout version {} (this program reads {LAYOUT_VERSION})",
            v.get(ParamsObj::version)
        )));
    }
    let p = Params {
        atomic_per_composite: v.get(ParamsObj::atomic_per_composite),
        connections_per_atomic: v.get(ParamsObj::connections_per_atomic),
        document_bytes: v.get(ParamsObj::document_bytes),
        manual_bytes: v.get(ParamsObj::manual_bytes),
        composite_per_module: v.get(ParamsObj::composite_per_module),
        assemblies_per_assembly: v.get(ParamsObj::assemblies_per_assembly),
        assembly_levels: v.get(ParamsObj::assembly_levels),
        composite_per_base: v.get(ParamsObj::composite_per_base),
        modules: v.get(ParamsObj::modules),
        doc_placement: DocPlacement::from_code(v.get(ParamsObj::doc_placement))
            .ok_or_else(|| Oo7Error::NotOo7("unknown document placement".into()))?,
        seed: v.get(ParamsObj::seed),
    };
    p.validate().map_err(|e| Oo7Error::NotOo7(e.to_string()))?;
    Ok(p)
}

impl<'s> Db<'s, NoTrace> {
    /// Opens the OO7 database the session is connected to.
    pub fn open(s: &'s Session) -> Result<Db<'s, NoTrace>, Oo7Error> {
        Db::with_trace(s, NoTrace)
    }
}

impl<'s, T: Trace> Db<'s, T> {
    /// Opens the database, reporting every access to `trace`.
    pub fn with_trace(s: &'s Session, trace: T) -> Result<Db<'s, T>, Oo7Error> {
        let params = read_params(s)?;
        // Reading the parameters loaded the schema directory: this costs no fetch.
        let padding = Padding::of_database(s)?.ok_or_else(|| {
            Oo7Error::NotOo7("the stored OO7 classes have neither Thor's nor GOM's sizes".into())
        })?;
        let list = s.get(s.root::<Refs<Module>>(SLOT_MODULES)?)?;
        let modules = (0..list.var_len()).map(|i| list.var_ref(i)).collect();
        drop(list);
        // The accesses above are the session's reading of the schema and roots.
        s.commit()?;
        Ok(Db {
            s,
            visited: Visited::new(params.atomic_parts() as usize + 1),
            params,
            padding,
            modules,
            stack: Vec::new(),
            targets: Vec::new(),
            cps: Vec::new(),
            trace,
            commit_every: 0,
            since_commit: 0,
            commit_time: std::time::Duration::ZERO,
        })
    }

    /// The database's parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The object sizes the database's classes are stored with (`thor oo7 load --pad-to-gom`).
    pub fn padding(&self) -> Padding {
        self.padding
    }

    /// The session.
    pub fn session(&self) -> &'s Session {
        self.s
    }

    /// The tracer.
    pub fn trace_mut(&mut self) -> &mut T {
        &mut self.trace
    }

    /// Accesses an object (the one place where objects are read).
    #[inline(always)]
    pub fn get<C: thor_client::Class>(&mut self, r: Ref<C>) -> Result<View<'s, C>, Oo7Error> {
        self.trace.access(r.oref());
        Ok(self.s.get(r)?)
    }

    /// Runs `op`; `rng` makes the random choices of T7, the queries and insert.
    pub fn run(&mut self, op: Op, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        if let Some(p) = PartOp::of(op) {
            return self.traverse(p);
        }
        match op {
            Op::T7 => self.t7(rng),
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
            _ => Err(Oo7Error::UnknownOperation(op.name().into())),
        }
    }

    // ----- traversals -----

    /// Walks every module's assembly tree and runs `op` on each private composite part.
    pub(crate) fn traverse(&mut self, op: PartOp) -> Result<OpResult, Oo7Error> {
        let mut out = OpResult::default();
        for m in self.modules.clone() {
            let root = self.get(m)?.get(Module::design_root);
            self.walk_complex(root, 1, op, &mut out)?;
        }
        Ok(out)
    }

    /// Runs traversal `op` on module `module` (0-based, in the root's module list) only: its
    /// assembly tree and the private composite parts of its base assemblies, which belong to
    /// that module alone (`oo7-spec.md`: each base assembly draws its private parts from its own
    /// module). Clients running this on different modules therefore read and write disjoint
    /// objects. Only the traversals that walk the assembly tree qualify
    /// ([`Op::walks_modules`]); the others are an [`Oo7Error::UnknownOperation`].
    pub fn run_on_module(&mut self, op: Op, module: usize) -> Result<OpResult, Oo7Error> {
        let Some(p) = PartOp::of(op) else {
            return Err(Oo7Error::UnknownOperation(format!(
                "{} (it does not walk a module's assembly tree)",
                op.name()
            )));
        };
        let Some(&m) = self.modules.get(module) else {
            return Err(Oo7Error::BadParams(format!(
                "module {module} does not exist: the database has {}",
                self.modules.len()
            )));
        };
        let mut out = OpResult::default();
        let root = self.get(m)?.get(Module::design_root);
        self.walk_complex(root, 1, p, &mut out)?;
        Ok(out)
    }

    fn walk_complex(
        &mut self,
        r: Ref<ComplexAssembly>,
        level: u32,
        op: PartOp,
        out: &mut OpResult,
    ) -> Result<(), Oo7Error> {
        let subs = self.get(r)?.get(ComplexAssembly::sub_assemblies);
        let mut kids = [Ref::<Any>::NULL; ASSEMBLIES_PER_ASSEMBLY_MAX];
        let n = {
            let c = self.get(subs)?;
            let n = c.var_len().min(ASSEMBLIES_PER_ASSEMBLY_MAX);
            for (i, k) in kids.iter_mut().enumerate().take(n) {
                *k = c.var_ref(i);
            }
            n
        };
        for &k in &kids[..n] {
            if level + 1 == self.params.assembly_levels {
                self.walk_base(k.cast(), op, out)?;
            } else {
                self.walk_complex(k.cast(), level + 1, op, out)?;
            }
        }
        Ok(())
    }

    fn walk_base(
        &mut self,
        r: Ref<BaseAssembly>,
        op: PartOp,
        out: &mut OpResult,
    ) -> Result<(), Oo7Error> {
        let privs = self.get(r)?.get(BaseAssembly::components_priv);
        // The bag grows with structural inserts, so its length has no static bound; the list
        // is reused (walks never nest within one base assembly).
        let mut cps = std::mem::take(&mut self.cps);
        cps.clear();
        {
            let c = self.get(privs)?;
            cps.extend((0..c.var_len()).map(|i| c.var_ref(i)));
        }
        let result = self.walk_parts(&cps, op, out);
        self.cps = cps;
        result
    }

    fn walk_parts(
        &mut self,
        cps: &[Ref<CompositePart>],
        op: PartOp,
        out: &mut OpResult,
    ) -> Result<(), Oo7Error> {
        for &cp in cps {
            *out += self.part_op(cp, op)?;
            if self.commit_every > 0 {
                self.since_commit += 1;
                if self.since_commit == self.commit_every {
                    self.since_commit = 0;
                    let t = std::time::Instant::now();
                    self.s.commit()?;
                    self.commit_time += t.elapsed();
                }
            }
        }
        Ok(())
    }

    /// Makes traversals commit after every `n` composite parts (0: never, the default: an
    /// operation is one transaction). A read-only traversal sees the same objects either way;
    /// what changes is how much the transaction's read set holds.
    pub fn set_commit_every(&mut self, n: u32) {
        self.commit_every = n;
        self.since_commit = 0;
    }

    /// Time spent in the intermediate commits of [`Db::set_commit_every`] so far.
    pub fn intermediate_commit_time(&self) -> std::time::Duration {
        self.commit_time
    }

    /// Runs `op` on one composite part.
    pub(crate) fn part_op(
        &mut self,
        cp: Ref<CompositePart>,
        op: PartOp,
    ) -> Result<OpResult, Oo7Error> {
        match op {
            PartOp::Graph(mode) => {
                let root = self.get(cp)?.get(CompositePart::root_part);
                self.search(root, mode)
            }
            PartOp::Root => {
                let root = self.get(cp)?.get(CompositePart::root_part);
                let v = self.get(root)?;
                std::hint::black_box(v.get(AtomicPart::id));
                Ok(OpResult { parts_visited: 1, ..OpResult::default() })
            }
            PartOp::DocCount => {
                let doc = self.get(cp)?.get(CompositePart::documentation);
                let text = self.get(doc)?.get(Document::text);
                let bytes = self.s.read_large(text)?;
                let n = bytes.iter().filter(|&&b| b == b'I').count() as u64;
                Ok(OpResult { result: n, ..OpResult::default() })
            }
            PartOp::DocSwap => {
                let doc = self.get(cp)?.get(CompositePart::documentation);
                let text = self.get(doc)?.get(Document::text);
                let leaf = self.first_leaf(text.cast())?;
                let v = self.get(leaf)?;
                let mut bytes = v.var_bytes();
                let changed = swap_opening(&mut bytes);
                if changed {
                    v.set_var_bytes(&bytes)?;
                }
                Ok(OpResult {
                    updates: u64::from(changed),
                    result: u64::from(changed),
                    ..OpResult::default()
                })
            }
        }
    }

    /// The first leaf of a large byte object.
    fn first_leaf(&mut self, root: Ref<Large>) -> Result<Ref<Bytes>, Oo7Error> {
        let v = self.get(root)?;
        let height = v.get(Large::height);
        if v.var_len() == 0 {
            return Err(Oo7Error::Inconsistent("empty large object".into()));
        }
        let mut r = v.var_ref(0);
        drop(v);
        for _ in 1..height {
            let node = self.get(r.cast::<Refs<Any>>())?;
            r = node.var_ref(0);
        }
        Ok(r.cast())
    }

    /// The graph search of the module documentation, from `root`.
    pub(crate) fn search(
        &mut self,
        root: Ref<AtomicPart>,
        mode: GraphMode,
    ) -> Result<OpResult, Oo7Error> {
        let mut out = OpResult::default();
        let half = u64::from(self.params.atomic_per_composite).div_ceil(2);
        self.visited.clear();
        self.stack.clear();
        self.stack.push(root);
        while let Some(r) = self.stack.pop() {
            let p = self.get(r)?;
            if !self.visited.insert(p.get(AtomicPart::id)) {
                continue;
            }
            out.parts_visited += 1;
            if mode.update.applies(out.parts_visited) {
                for _ in 0..mode.times {
                    match mode.update {
                        Update::Xy | Update::XyRoot => {
                            p.set(AtomicPart::x, p.get(AtomicPart::x).wrapping_add(1))?;
                            p.set(AtomicPart::y, p.get(AtomicPart::y).wrapping_add(1))?;
                        }
                        Update::Date | Update::DateRoot => {
                            let (id, d) = (p.get(AtomicPart::id), p.get(AtomicPart::build_date));
                            let nd = step_date(d);
                            p.set(AtomicPart::build_date, nd)?;
                            let idx = self.index(SLOT_ATOMIC_DATE_INDEX)?;
                            self.index_remove(idx, date_key(d, id))?;
                            self.index_insert(idx, date_key(nd, id), r.cast())?;
                        }
                        Update::None => {}
                    }
                    out.updates += 1;
                }
            }
            if mode.stop_half && out.parts_visited >= half {
                break;
            }
            let to = p.get(AtomicPart::to);
            if mode.sub_objects {
                let (kind, from) = (p.get(AtomicPart::kind), p.get(AtomicPart::from));
                drop(p);
                std::hint::black_box(self.get(kind)?.var_len());
                std::hint::black_box(self.get(from)?.var_len());
            } else {
                drop(p);
            }
            let c = self.get(to)?;
            self.targets.clear();
            for i in 0..c.var_len() {
                let conn = self.get(c.var_ref(i))?;
                self.targets.push(conn.get(Connection::to));
                if mode.sub_objects {
                    let kind = conn.get(Connection::kind);
                    drop(conn);
                    std::hint::black_box(self.get(kind)?.var_len());
                }
            }
            drop(c);
            self.stack.extend(self.targets.iter().rev());
        }
        Ok(out)
    }

    /// A random path from module `m`'s design root down to one of its composite parts (the
    /// dynamic traversal's choice).
    pub(crate) fn random_composite(
        &mut self,
        m: usize,
        rng: &mut Rng,
    ) -> Result<Ref<CompositePart>, Oo7Error> {
        let mut r = self.get(self.modules[m])?.get(Module::design_root).cast::<Any>();
        for _ in 1..self.params.assembly_levels {
            let subs = self.get(r.cast::<ComplexAssembly>())?.get(ComplexAssembly::sub_assemblies);
            let c = self.get(subs)?;
            r = c.var_ref(rng.below(c.var_len() as u64) as usize);
        }
        let privs = self.get(r.cast::<BaseAssembly>())?.get(BaseAssembly::components_priv);
        let c = self.get(privs)?;
        Ok(c.var_ref(rng.below(c.var_len() as u64) as usize))
    }

    /// Modules in the database.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    // ----- T7, T8, T9 -----

    fn t7(&mut self, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        let id = 1 + rng.below(self.params.atomic_parts()) as u32;
        let idx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let Some(ap) = self.index_get(idx, u64::from(id))? else {
            return Err(Oo7Error::Inconsistent(format!("atomic part {id} is not in the id index")));
        };
        let cp = self.get(ap.cast::<AtomicPart>())?.get(AtomicPart::part_of);
        let bag = self.get(cp)?.get(CompositePart::used_in_priv);
        let bases: Vec<Ref<BaseAssembly>> = {
            let c = self.get(bag)?;
            (0..c.var_len()).map(|i| c.var_ref(i)).collect()
        };
        let mut out = OpResult { parts_visited: 1, ..OpResult::default() };
        for b in bases {
            out.result += 1;
            let mut up = self.get(b)?.get(BaseAssembly::super_assembly);
            while !up.is_null() {
                out.result += 1;
                up = self.get(up)?.get(ComplexAssembly::super_assembly);
            }
        }
        Ok(out)
    }

    fn manuals(&mut self, first_last: bool) -> Result<OpResult, Oo7Error> {
        let mut out = OpResult::default();
        for m in self.modules.clone() {
            let man = self.get(m)?.get(Module::man);
            let text = self.get(man)?.get(Manual::text);
            let bytes = self.s.read_large(text)?;
            out.result += if first_last {
                u64::from(!bytes.is_empty() && bytes.first() == bytes.last())
            } else {
                bytes.iter().filter(|&&b| b == b'I').count() as u64
            };
        }
        Ok(out)
    }

    // ----- queries -----

    fn q1(&mut self, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        let idx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let mut out = OpResult::default();
        for _ in 0..counts::Q1_LOOKUPS {
            let id = 1 + rng.below(self.params.atomic_parts()) as u32;
            if let Some(ap) = self.index_get(idx, u64::from(id))? {
                std::hint::black_box(self.get(ap.cast::<AtomicPart>())?.get(AtomicPart::x));
                out.parts_visited += 1;
            }
        }
        Ok(out)
    }

    /// Atomic parts whose build date is in the last `fraction` of the generated range.
    fn q_range(&mut self, fraction: f64) -> Result<OpResult, Oo7Error> {
        let (lo, hi) = date_range(fraction);
        let idx = self.index(SLOT_ATOMIC_DATE_INDEX)?;
        let mut found = Vec::new();
        self.index_range(idx, date_key(lo, 0), date_key(hi + 1, 0), &mut |_, r| found.push(r))?;
        let mut out = OpResult::default();
        for r in found {
            std::hint::black_box(self.get(r.cast::<AtomicPart>())?.get(AtomicPart::x));
            out.parts_visited += 1;
        }
        Ok(out)
    }

    fn q4(&mut self, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        let idx = self.index(SLOT_DOCUMENT_TITLE_INDEX)?;
        let mut out = OpResult::default();
        for _ in 0..counts::Q4_LOOKUPS {
            let cp = 1 + rng.below(self.params.composite_parts().into()) as u32;
            let Some(doc) = self.index_get(idx, title_key(&document_title(cp)))? else {
                continue;
            };
            let part = self.get(doc.cast::<Document>())?.get(Document::part);
            let bag = self.get(part)?.get(CompositePart::used_in_priv);
            let c = self.get(bag)?;
            for i in 0..c.var_len() {
                std::hint::black_box(self.get(c.var_ref(i))?.get(BaseAssembly::id));
                out.result += 1;
            }
        }
        Ok(out)
    }

    fn q5(&mut self) -> Result<OpResult, Oo7Error> {
        let mut out = OpResult::default();
        for m in self.modules.clone() {
            let top = self.get(m)?.get(Module::all_bases);
            let chunks: Vec<Ref<Refs<BaseAssembly>>> = {
                let t = self.get(top)?;
                (0..t.var_len()).map(|i| t.var_ref(i)).collect()
            };
            for ch in chunks {
                let n = self.get(ch)?.var_len();
                for i in 0..n {
                    let b = self.get(ch)?.var_ref(i);
                    let (date, privs) = {
                        let v = self.get(b)?;
                        (v.get(BaseAssembly::build_date), v.get(BaseAssembly::components_priv))
                    };
                    let c = self.get(privs)?;
                    for j in 0..c.var_len() {
                        if self.get(c.var_ref(j))?.get(CompositePart::build_date) > date {
                            out.result += 1;
                            break;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn q6(&mut self) -> Result<OpResult, Oo7Error> {
        let mut out = OpResult::default();
        for m in self.modules.clone() {
            let root = self.get(m)?.get(Module::design_root);
            self.q6_complex(root, 1, &mut out)?;
        }
        Ok(out)
    }

    /// Returns the latest build date of the composite parts below `r`, counting in `out` the
    /// assemblies below (and including) `r` that are older than it.
    fn q6_complex(
        &mut self,
        r: Ref<ComplexAssembly>,
        level: u32,
        out: &mut OpResult,
    ) -> Result<u32, Oo7Error> {
        let (date, subs) = {
            let v = self.get(r)?;
            (v.get(ComplexAssembly::build_date), v.get(ComplexAssembly::sub_assemblies))
        };
        let kids: Vec<Ref<Any>> = {
            let c = self.get(subs)?;
            (0..c.var_len()).map(|i| c.var_ref(i)).collect()
        };
        let mut latest = 0;
        for k in kids {
            let d = if level + 1 == self.params.assembly_levels {
                let (bdate, privs) = {
                    let v = self.get(k.cast::<BaseAssembly>())?;
                    (v.get(BaseAssembly::build_date), v.get(BaseAssembly::components_priv))
                };
                let c = self.get(privs)?;
                let mut l = 0;
                for j in 0..c.var_len() {
                    l = l.max(self.get(c.var_ref(j))?.get(CompositePart::build_date));
                }
                out.result += u64::from(l > bdate);
                l
            } else {
                self.q6_complex(k.cast(), level + 1, out)?
            };
            latest = latest.max(d);
        }
        out.result += u64::from(latest > date);
        Ok(latest)
    }

    fn q7(&mut self) -> Result<OpResult, Oo7Error> {
        let idx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let mut all = Vec::new();
        self.index_range(idx, 0, u64::MAX, &mut |_, r| all.push(r))?;
        let mut out = OpResult::default();
        for r in all {
            std::hint::black_box(self.get(r.cast::<AtomicPart>())?.get(AtomicPart::x));
            out.parts_visited += 1;
        }
        Ok(out)
    }

    fn q8(&mut self) -> Result<OpResult, Oo7Error> {
        let mut docs = Vec::new();
        let tidx = self.index(SLOT_DOCUMENT_TITLE_INDEX)?;
        self.index_range(tidx, 0, u64::MAX, &mut |_, r| docs.push(r))?;
        let mut ids = rustc_hash::FxHashMap::default();
        for d in docs {
            *ids.entry(self.get(d.cast::<Document>())?.get(Document::id)).or_insert(0u64) += 1;
        }
        let aidx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let mut parts = Vec::new();
        self.index_range(aidx, 0, u64::MAX, &mut |_, r| parts.push(r))?;
        let mut out = OpResult::default();
        for r in parts {
            let doc_id = self.get(r.cast::<AtomicPart>())?.get(AtomicPart::doc_id);
            out.parts_visited += 1;
            out.result += ids.get(&doc_id).copied().unwrap_or(0);
        }
        Ok(out)
    }

    // ----- structural changes -----

    fn params_ref(&mut self) -> Result<Ref<ParamsObj>, Oo7Error> {
        Ok(self.s.root::<ParamsObj>(SLOT_PARAMS)?)
    }

    /// Creates `counts::STRUCTURAL` composite parts with their graphs and documents, each used
    /// privately by one random base assembly, and indexes them.
    fn insert(&mut self, rng: &mut Rng) -> Result<OpResult, Oo7Error> {
        let pr = self.params_ref()?;
        let (mut next_cp, mut next_ap) = {
            let v = self.get(pr)?;
            (v.get(ParamsObj::next_composite), v.get(ParamsObj::next_atomic))
        };
        let mut out = OpResult::default();
        for _ in 0..counts::STRUCTURAL {
            let module = rng.below(self.modules.len() as u64) as usize;
            let base = self.random_base(module, rng)?;
            let g = crate::plan::graph(&self.params, next_cp, next_ap);
            let cp = self.create_composite(&g, base)?;
            // The base assembly's bag grows by copying (objects keep their size).
            let old = self.get(base)?.get(BaseAssembly::components_priv);
            let items: Vec<Ref<CompositePart>> = {
                let c = self.get(old)?;
                (0..c.var_len()).map(|i| c.var_ref(i)).collect()
            };
            let bag = self.s.create::<Refs<CompositePart>>(items.len() + 1)?;
            for (i, it) in items.iter().enumerate() {
                bag.set_var_ref(i, *it)?;
            }
            bag.set_var_ref(items.len(), cp)?;
            let bag = bag.as_ref();
            self.get(base)?.set(BaseAssembly::components_priv, bag)?;
            next_cp += 1;
            next_ap += self.params.atomic_per_composite;
            out.result += 1;
            out.parts_visited += u64::from(self.params.atomic_per_composite);
        }
        let v = self.get(pr)?;
        v.set(ParamsObj::next_composite, next_cp)?;
        v.set(ParamsObj::next_atomic, next_ap)?;
        Ok(out)
    }

    /// A random base assembly of module `m`.
    fn random_base(&mut self, m: usize, rng: &mut Rng) -> Result<Ref<BaseAssembly>, Oo7Error> {
        let mut r = self.get(self.modules[m])?.get(Module::design_root).cast::<Any>();
        for _ in 1..self.params.assembly_levels {
            let subs = self.get(r.cast::<ComplexAssembly>())?.get(ComplexAssembly::sub_assemblies);
            let c = self.get(subs)?;
            r = c.var_ref(rng.below(c.var_len() as u64) as usize);
        }
        Ok(r.cast())
    }

    fn new_type(&self, kind: u32) -> Result<Ref<Bytes>, Oo7Error> {
        let t = self.s.create::<Bytes>(TYPE_BYTES)?;
        t.set_var_bytes(&type_string(kind))?;
        Ok(t.as_ref())
    }

    fn create_composite(
        &mut self,
        g: &crate::plan::CompositePlan,
        base: Ref<BaseAssembly>,
    ) -> Result<Ref<CompositePart>, Oo7Error> {
        let s = self.s;
        let n = g.parts.len();
        let k = self.params.connections_per_atomic as usize;
        let cpv = s.create_fixed::<CompositePart>()?;
        let cp = cpv.as_ref();
        cpv.set(CompositePart::id, g.id)?;
        cpv.set(CompositePart::build_date, g.date)?;
        cpv.set(CompositePart::kind, self.new_type(g.kind)?)?;
        let used = s.create::<Refs<BaseAssembly>>(1)?;
        used.set_var_ref(0, base)?;
        cpv.set(CompositePart::used_in_priv, used.as_ref())?;
        cpv.set(CompositePart::used_in_shar, s.create::<Refs<BaseAssembly>>(0)?.as_ref())?;
        // The document.
        let title = document_title(g.id);
        let doc = s.create_fixed::<Document>()?;
        doc.set(Document::id, g.id)?;
        doc.set(Document::title, title)?;
        doc.set(Document::part, cp)?;
        doc.set(
            Document::text,
            s.create_large(&document_text(g.id, self.params.document_bytes as usize))?,
        )?;
        cpv.set(CompositePart::documentation, doc.as_ref())?;
        // Atomic parts and their collections.
        let parts = s.create::<Refs<AtomicPart>>(n)?;
        let mut aps = Vec::with_capacity(n);
        let mut tos = Vec::with_capacity(n);
        let mut froms = Vec::with_capacity(n);
        for (j, pp) in g.parts.iter().enumerate() {
            let a = s.create_fixed::<AtomicPart>()?;
            a.set(AtomicPart::id, pp.id)?;
            a.set(AtomicPart::kind, self.new_type(pp.kind)?)?;
            a.set(AtomicPart::build_date, pp.date)?;
            a.set(AtomicPart::x, pp.x)?;
            a.set(AtomicPart::y, pp.y)?;
            a.set(AtomicPart::doc_id, g.id)?;
            a.set(AtomicPart::part_of, cp)?;
            let to = s.create::<Refs<Connection>>(k)?;
            let from = s.create::<Refs<Connection>>(g.from_of(j).len())?;
            a.set(AtomicPart::to, to.as_ref())?;
            a.set(AtomicPart::from, from.as_ref())?;
            parts.set_var_ref(j, a.as_ref())?;
            aps.push(a.as_ref());
            tos.push(to.as_ref());
            froms.push(from.as_ref());
        }
        cpv.set(CompositePart::parts, parts.as_ref())?;
        cpv.set(CompositePart::root_part, aps[0])?;
        drop(cpv);
        let mut fill = vec![0usize; n];
        for (ci, c) in g.conns.iter().enumerate() {
            let co = s.create_fixed::<Connection>()?;
            co.set(Connection::kind, self.new_type(c.kind)?)?;
            co.set(Connection::length, c.length)?;
            co.set(Connection::from, aps[c.from as usize])?;
            co.set(Connection::to, aps[c.to as usize])?;
            let co = co.as_ref();
            self.get(tos[c.from as usize])?.set_var_ref(ci % k, co)?;
            let t = c.to as usize;
            self.get(froms[t])?.set_var_ref(fill[t], co)?;
            fill[t] += 1;
        }
        // Indexes.
        let id_idx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let date_idx = self.index(SLOT_ATOMIC_DATE_INDEX)?;
        for (pp, ap) in g.parts.iter().zip(&aps) {
            self.index_insert(id_idx, u64::from(pp.id), ap.cast())?;
            self.index_insert(date_idx, date_key(pp.date, pp.id), ap.cast())?;
        }
        let title_idx = self.index(SLOT_DOCUMENT_TITLE_INDEX)?;
        self.index_insert(title_idx, title_key(&title), doc.as_ref().cast())?;
        Ok(cp)
    }

    /// Deletes every composite part created by [`Op::Insert`]: unlinks it from the base
    /// assemblies using it and removes it from the indexes. (thor has no explicit deletion;
    /// the objects become unreachable.)
    fn delete(&mut self) -> Result<OpResult, Oo7Error> {
        let pr = self.params_ref()?;
        let next_cp = self.get(pr)?.get(ParamsObj::next_composite);
        let first_new = self.params.composite_parts() + 1;
        let title_idx = self.index(SLOT_DOCUMENT_TITLE_INDEX)?;
        let id_idx = self.index(SLOT_ATOMIC_ID_INDEX)?;
        let date_idx = self.index(SLOT_ATOMIC_DATE_INDEX)?;
        let mut out = OpResult::default();
        for id in first_new..next_cp {
            let key = title_key(&document_title(id));
            let Some(doc) = self.index_get(title_idx, key)? else { continue };
            self.index_remove(title_idx, key)?;
            let cp = self.get(doc.cast::<Document>())?.get(Document::part);
            let (parts, used) = {
                let v = self.get(cp)?;
                (v.get(CompositePart::parts), v.get(CompositePart::used_in_priv))
            };
            let aps: Vec<Ref<AtomicPart>> = {
                let c = self.get(parts)?;
                (0..c.var_len()).map(|i| c.var_ref(i)).collect()
            };
            for ap in aps {
                let (pid, date) = {
                    let v = self.get(ap)?;
                    (v.get(AtomicPart::id), v.get(AtomicPart::build_date))
                };
                self.index_remove(id_idx, u64::from(pid))?;
                self.index_remove(date_idx, date_key(date, pid))?;
                out.parts_visited += 1;
            }
            let bases: Vec<Ref<BaseAssembly>> = {
                let c = self.get(used)?;
                (0..c.var_len()).map(|i| c.var_ref(i)).collect()
            };
            let cp_key = self.s.canonical(cp)?;
            for b in bases {
                let old = self.get(b)?.get(BaseAssembly::components_priv);
                let mut items: Vec<Ref<CompositePart>> = {
                    let c = self.get(old)?;
                    (0..c.var_len()).map(|i| c.var_ref(i)).collect()
                };
                let before = items.len();
                let mut keep = Vec::with_capacity(before);
                for it in items.drain(..) {
                    if self.s.canonical(it)? != cp_key {
                        keep.push(it);
                    }
                }
                if keep.len() == before {
                    continue;
                }
                let bag = self.s.create::<Refs<CompositePart>>(keep.len())?;
                for (i, it) in keep.iter().enumerate() {
                    bag.set_var_ref(i, *it)?;
                }
                let bag = bag.as_ref();
                self.get(b)?.set(BaseAssembly::components_priv, bag)?;
            }
            out.result += 1;
        }
        Ok(out)
    }
}

/// The date range `[lo, hi]` holding the last `fraction` of generated atomic-part dates
/// (1000..=1999): Q2 takes 1%, Q3 10%.
pub fn date_range(fraction: f64) -> (u32, u32) {
    let width = (1000.0 * fraction).round() as u32;
    (2000 - width.max(1), 1999)
}

/// T5's update: swaps a text's opening `"I am   "` and `"This is"`; false if it has neither.
pub fn swap_opening(text: &mut [u8]) -> bool {
    const A: &[u8; 7] = b"I am   ";
    const B: &[u8; 7] = b"This is";
    if text.len() < 7 {
        return false;
    }
    if &text[..7] == A {
        text[..7].copy_from_slice(B);
        true
    } else if &text[..7] == B {
        text[..7].copy_from_slice(A);
        true
    } else {
        false
    }
}
