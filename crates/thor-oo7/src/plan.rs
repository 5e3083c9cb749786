//! The plan: every random choice of a database, made before any object is written, and the
//! order in which objects are created.
//!
//! Both the thor loader ([`crate::load`]) and the native baseline ([`crate::native`]) are
//! [`Builder`]s driven by [`generate`], so they build the same database from the same seed:
//! same ids, dates, coordinates, types and links.
//!
//! # Creation order (the clustering)
//!
//! ```text
//! for each module m:           Module, Manual, then its assembly tree in preorder:
//!                              complex assemblies at levels 1..L-1, base assemblies at level L
//! for each composite part c    (in id order, across modules):
//!                              CompositePart, Document (or after the connections, by setting),
//!                              atomic parts in id order, then their connections
//! ```
//!
//! Base assemblies choose their composite parts when they are planned, before any composite
//! part exists, so that each composite part knows at creation which base assemblies use it
//! (its `usedInPriv`/`usedInShar` bags are sized once: thor objects keep their size for life).
//!
//! # Ids
//!
//! Modules, complex assemblies, base assemblies, composite parts and atomic parts are numbered
//! from 1, densely, across modules: module `m` (0-based) owns composite parts
//! `m*C+1 ..= (m+1)*C`, and composite part `c` owns atomic parts `(c-1)*A+1 ..= c*A`. A
//! document's id is its composite part's id, and so is every one of the part's atomic parts'
//! `docId`. Complex and base assemblies are numbered in creation (preorder) order.
//!
//! # Random choices (see [`crate::rng`] for the streams)
//!
//! - module, complex assembly: build date in 1000..=1999, then type in 0..10;
//! - base assembly: build date, type, then `k` private composite ids (uniform over its module's)
//!   and `k` shared ones (uniform over all), with replacement;
//! - composite part: build date (young: id % 10 == 0, 2000..=2999; old: 0..=999), type; then for
//!   each atomic part in id order its type, build date (1000..=1999), x and y (0..100000); then
//!   for each atomic part in id order and each connection `i` of it: the target (the next part,
//!   cyclically, for `i = 0`; a uniform part of the same composite otherwise), type and length
//!   (0..100000).

use crate::error::Oo7Error;
use crate::params::Params;
use crate::rng::{Rng, tag};

/// A module's own values.
#[derive(Debug, Clone, Copy)]
pub struct ModulePlan {
    /// The id (1-based).
    pub id: u32,
    /// Build date.
    pub date: u32,
    /// Type number.
    pub kind: u32,
}

/// An assembly's own values.
#[derive(Debug, Clone, Copy)]
pub struct AssemblyPlan {
    /// The id (1-based, complex and base assemblies numbered separately).
    pub id: u32,
    /// The module (0-based).
    pub module: u32,
    /// Its level (1 for the design root).
    pub level: u32,
    /// Build date.
    pub date: u32,
    /// Type number.
    pub kind: u32,
}

/// An atomic part's values.
#[derive(Debug, Clone, Copy)]
pub struct PartPlan {
    /// The id (1-based, dense).
    pub id: u32,
    /// Type number.
    pub kind: u32,
    /// Build date.
    pub date: u32,
    /// x coordinate.
    pub x: u32,
    /// y coordinate.
    pub y: u32,
}

/// A connection's values: `from` and `to` are indexes of parts within the composite part.
#[derive(Debug, Clone, Copy)]
pub struct ConnPlan {
    /// The source part's index.
    pub from: u32,
    /// The target part's index.
    pub to: u32,
    /// Type number.
    pub kind: u32,
    /// Length.
    pub length: u32,
}

/// One composite part and its graph.
#[derive(Debug, Clone)]
pub struct CompositePlan {
    /// The id (1-based).
    pub id: u32,
    /// The owning module (0-based).
    pub module: u32,
    /// Build date.
    pub date: u32,
    /// Type number.
    pub kind: u32,
    /// Atomic parts in id order; the first is the root part.
    pub parts: Vec<PartPlan>,
    /// Connections in creation order: connection `j*k + i` is part `j`'s `i`-th outgoing one.
    pub conns: Vec<ConnPlan>,
    /// Incoming connections of part `j`: `from_conns[from_start[j]..from_start[j+1]]`, in
    /// creation order.
    pub from_start: Vec<u32>,
    /// See `from_start`.
    pub from_conns: Vec<u32>,
    /// Base assemblies using this part privately, in base id order (a bag).
    pub used_in_priv: Vec<u32>,
    /// Base assemblies using this part shared, in base id order (a bag).
    pub used_in_shar: Vec<u32>,
}

impl CompositePlan {
    /// The incoming connections of part `j`.
    pub fn from_of(&self, j: usize) -> &[u32] {
        &self.from_conns[self.from_start[j] as usize..self.from_start[j + 1] as usize]
    }
}

/// The choices made before any object is written: the base assemblies' composite parts.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The parameters.
    pub params: Params,
    /// Base assembly `b`'s private composite ids are `base_priv[(b-1)*k .. b*k]`.
    pub base_priv: Vec<u32>,
    /// Base assembly `b`'s shared composite ids, likewise.
    pub base_shar: Vec<u32>,
    /// Base assembly ids using composite part `c` privately: `used_priv[c-1]`.
    used_priv: Vec<Vec<u32>>,
    /// Base assembly ids using composite part `c` shared.
    used_shar: Vec<Vec<u32>>,
}

impl Plan {
    /// Plans a database.
    pub fn new(params: &Params) -> Result<Plan, Oo7Error> {
        params.validate()?;
        let k = params.composite_per_base as usize;
        let bases = (params.base_per_module() * params.modules) as usize;
        let mut base_priv = Vec::with_capacity(bases * k);
        let mut base_shar = Vec::with_capacity(bases * k);
        let cps = params.composite_parts() as usize;
        let mut used_priv = vec![Vec::new(); cps];
        let mut used_shar = vec![Vec::new(); cps];
        for b in 1..=bases as u32 {
            let module = (b - 1) / params.base_per_module();
            let mut r = Rng::stream(params.seed, tag::BASE, b.into());
            let _date = r.range(1000, 1999);
            let _kind = r.below(10);
            let first = module * params.composite_per_module + 1;
            for _ in 0..k {
                let c = first + r.below(params.composite_per_module.into()) as u32;
                base_priv.push(c);
                used_priv[(c - 1) as usize].push(b);
            }
            for _ in 0..k {
                let c = 1 + r.below(cps as u64) as u32;
                base_shar.push(c);
                used_shar[(c - 1) as usize].push(b);
            }
        }
        Ok(Plan { params: *params, base_priv, base_shar, used_priv, used_shar })
    }

    /// The private composite parts of base assembly `b`.
    pub fn priv_of(&self, b: u32) -> &[u32] {
        let k = self.params.composite_per_base as usize;
        &self.base_priv[(b as usize - 1) * k..b as usize * k]
    }

    /// The shared composite parts of base assembly `b`.
    pub fn shar_of(&self, b: u32) -> &[u32] {
        let k = self.params.composite_per_base as usize;
        &self.base_shar[(b as usize - 1) * k..b as usize * k]
    }

    /// Module `id`'s values.
    pub fn module(&self, id: u32) -> ModulePlan {
        let mut r = Rng::stream(self.params.seed, tag::MODULE, id.into());
        let date = r.range(1000, 1999);
        let kind = r.below(10) as u32;
        ModulePlan { id, date, kind }
    }

    /// A complex assembly's values.
    pub fn complex(&self, id: u32, module: u32, level: u32) -> AssemblyPlan {
        let mut r = Rng::stream(self.params.seed, tag::COMPLEX, id.into());
        let date = r.range(1000, 1999);
        let kind = r.below(10) as u32;
        AssemblyPlan { id, module, level, date, kind }
    }

    /// A base assembly's values (its composite parts are [`Plan::priv_of`] and
    /// [`Plan::shar_of`]).
    pub fn base(&self, id: u32, module: u32) -> AssemblyPlan {
        let mut r = Rng::stream(self.params.seed, tag::BASE, id.into());
        let date = r.range(1000, 1999);
        let kind = r.below(10) as u32;
        AssemblyPlan { id, module, level: self.params.assembly_levels, date, kind }
    }

    /// Composite part `id` with its graph and the base assemblies using it.
    pub fn composite(&self, id: u32) -> CompositePlan {
        let mut c = graph(&self.params, id, self.params.first_atomic(id));
        c.used_in_priv = self.used_priv[(id - 1) as usize].clone();
        c.used_in_shar = self.used_shar[(id - 1) as usize].clone();
        c
    }
}

/// Composite part `id` and its graph, its atomic parts numbered from `first_atomic`, used by no
/// base assembly yet (structural inserts create parts beyond the generated ones this way).
pub fn graph(p: &Params, id: u32, first_atomic: u32) -> CompositePlan {
    let mut r = Rng::stream(p.seed, tag::COMPOSITE, id.into());
    let date = if id.is_multiple_of(10) { r.range(2000, 2999) } else { r.range(0, 999) };
    let kind = r.below(10) as u32;
    let n = p.atomic_per_composite as usize;
    let k = p.connections_per_atomic as usize;
    let parts: Vec<PartPlan> = (0..n as u32)
        .map(|j| {
            let kind = r.below(10) as u32;
            let date = r.range(1000, 1999);
            let x = r.below(100_000) as u32;
            let y = r.below(100_000) as u32;
            PartPlan { id: first_atomic + j, kind, date, x, y }
        })
        .collect();
    let mut conns = Vec::with_capacity(n * k);
    let mut indeg = vec![0u32; n + 1];
    for j in 0..n as u32 {
        for i in 0..k {
            let to = if i == 0 { (j + 1) % n as u32 } else { r.below(n as u64) as u32 };
            let kind = r.below(10) as u32;
            let length = r.below(100_000) as u32;
            conns.push(ConnPlan { from: j, to, kind, length });
            indeg[to as usize + 1] += 1;
        }
    }
    for j in 0..n {
        indeg[j + 1] += indeg[j];
    }
    let from_start = indeg;
    let mut fill = from_start.clone();
    let mut from_conns = vec![0u32; n * k];
    for (ci, c) in conns.iter().enumerate() {
        let slot = &mut fill[c.to as usize];
        from_conns[*slot as usize] = ci as u32;
        *slot += 1;
    }
    CompositePlan {
        id,
        module: if id <= p.composite_parts() { p.module_of_composite(id) } else { 0 },
        date,
        kind,
        parts,
        conns,
        from_start,
        from_conns,
        used_in_priv: Vec::new(),
        used_in_shar: Vec::new(),
    }
}

/// Where an assembly is created: its parent and its place among the parent's children.
#[derive(Debug, Clone, Copy)]
pub struct Parent<H> {
    /// The parent's handle.
    pub handle: H,
    /// The index among the parent's children.
    pub index: u32,
}

/// Something that builds an OO7 database from a plan, in creation order.
pub trait Builder {
    /// What the builder hands back for a created module or assembly.
    type Handle: Copy;

    /// Creates module `m` (and its manual); called before its assembly tree.
    fn module(&mut self, plan: &Plan, m: &ModulePlan) -> Result<Self::Handle, Oo7Error>;

    /// Creates a complex assembly.
    fn complex(
        &mut self,
        plan: &Plan,
        a: &AssemblyPlan,
        module: Self::Handle,
        parent: Option<Parent<Self::Handle>>,
    ) -> Result<Self::Handle, Oo7Error>;

    /// Creates a base assembly; `index_in_module` is its place in the module's `allBases`.
    fn base(
        &mut self,
        plan: &Plan,
        a: &AssemblyPlan,
        module: Self::Handle,
        parent: Parent<Self::Handle>,
        index_in_module: u32,
    ) -> Result<Self::Handle, Oo7Error>;

    /// Creates a composite part with its document, atomic parts and connections, and links it
    /// into the base assemblies that use it.
    fn composite(&mut self, plan: &Plan, c: &CompositePlan) -> Result<(), Oo7Error>;
}

/// Drives `builder` through the creation order of the module documentation. `progress` is
/// called with the number of atomic parts created so far.
pub fn generate<B: Builder>(
    plan: &Plan,
    builder: &mut B,
    mut progress: impl FnMut(u64),
) -> Result<(), Oo7Error> {
    let p = &plan.params;
    for m in 0..p.modules {
        let mp = plan.module(m + 1);
        let mh = builder.module(plan, &mp)?;
        let mut next_complex = m * p.complex_per_module() + 1;
        let mut next_base = m * p.base_per_module() + 1;
        let mut base_index = 0u32;
        let mut ctx = TreeCtx {
            plan,
            module: m,
            module_handle: mh,
            next_complex: &mut next_complex,
            next_base: &mut next_base,
            base_index: &mut base_index,
        };
        ctx.complex_subtree(builder, 1, None)?;
    }
    let mut done = 0u64;
    for c in 1..=p.composite_parts() {
        let cp = plan.composite(c);
        builder.composite(plan, &cp)?;
        done += u64::from(p.atomic_per_composite);
        progress(done);
    }
    Ok(())
}

/// The state of a preorder walk of one module's assembly tree.
struct TreeCtx<'a, H> {
    /// The plan.
    plan: &'a Plan,
    /// The module (0-based).
    module: u32,
    /// The builder's handle of the module.
    module_handle: H,
    /// The id the next complex assembly gets.
    next_complex: &'a mut u32,
    /// The id the next base assembly gets.
    next_base: &'a mut u32,
    /// The next base assembly's place in the module's `allBases`.
    base_index: &'a mut u32,
}

impl<H: Copy> TreeCtx<'_, H> {
    fn complex_subtree<B: Builder<Handle = H>>(
        &mut self,
        b: &mut B,
        level: u32,
        parent: Option<Parent<H>>,
    ) -> Result<(), Oo7Error> {
        let p = &self.plan.params;
        let id = *self.next_complex;
        *self.next_complex += 1;
        let a = self.plan.complex(id, self.module, level);
        let h = b.complex(self.plan, &a, self.module_handle, parent)?;
        for i in 0..p.assemblies_per_assembly {
            let child = Parent { handle: h, index: i };
            if level + 1 == p.assembly_levels {
                let id = *self.next_base;
                *self.next_base += 1;
                let a = self.plan.base(id, self.module);
                b.base(self.plan, &a, self.module_handle, child, *self.base_index)?;
                *self.base_index += 1;
            } else {
                self.complex_subtree(b, level + 1, Some(child))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_graphs_follow_the_spec() {
        let plan = Plan::new(&Params::small()).unwrap();
        let c = plan.composite(7);
        assert_eq!(c.parts.len(), 20);
        assert_eq!(c.parts[0].id, 6 * 20 + 1);
        assert_eq!(c.conns.len(), 60);
        for (j, _) in c.parts.iter().enumerate() {
            let first = c.conns[j * 3];
            assert_eq!(first.to as usize, (j + 1) % 20, "the ring");
            assert!(c.from_of(j).iter().all(|&ci| c.conns[ci as usize].to as usize == j));
        }
        assert_eq!(c.from_conns.len(), 60);
        assert!((0..999).contains(&c.date));
        assert!((2000..=2999).contains(&plan.composite(10).date), "young");
        let total: usize = (1..=500).map(|c| plan.composite(c).used_in_priv.len()).sum();
        assert_eq!(total, 729 * 3);
    }

    #[test]
    fn the_walk_visits_every_assembly_in_preorder() {
        struct Count(Vec<(char, u32, u32)>);
        impl Builder for Count {
            type Handle = u32;
            fn module(&mut self, _: &Plan, m: &ModulePlan) -> Result<u32, Oo7Error> {
                self.0.push(('m', m.id, 0));
                Ok(0)
            }
            fn complex(
                &mut self,
                _: &Plan,
                a: &AssemblyPlan,
                _: u32,
                _: Option<Parent<u32>>,
            ) -> Result<u32, Oo7Error> {
                self.0.push(('c', a.id, a.level));
                Ok(a.id)
            }
            fn base(
                &mut self,
                _: &Plan,
                a: &AssemblyPlan,
                _: u32,
                p: Parent<u32>,
                _: u32,
            ) -> Result<u32, Oo7Error> {
                self.0.push(('b', a.id, p.handle));
                Ok(0)
            }
            fn composite(&mut self, _: &Plan, _: &CompositePlan) -> Result<(), Oo7Error> {
                Ok(())
            }
        }
        let plan = Plan::new(&Params::small()).unwrap();
        let mut c = Count(Vec::new());
        generate(&plan, &mut c, |_| {}).unwrap();
        let complex = c.0.iter().filter(|e| e.0 == 'c').count();
        let base = c.0.iter().filter(|e| e.0 == 'b').count();
        assert_eq!((complex, base), (364, 729));
        assert_eq!(
            &c.0[..8],
            &[
                ('m', 1, 0),
                ('c', 1, 1),
                ('c', 2, 2),
                ('c', 3, 3),
                ('c', 4, 4),
                ('c', 5, 5),
                ('c', 6, 6),
                ('b', 1, 6)
            ]
        );
    }
}
