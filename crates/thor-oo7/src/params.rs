//! The generator's parameters: the OO7 table of `oo7-spec.md` as a setting, with the standard
//! sizes and the QuickStore recovery study's variants as presets.
//!
//! | parameter | small | medium | large | qs-small | qs-big |
//! |---|---|---|---|---|---|
//! | atomic parts per composite part | 20 | 200 | 200 | 20 | 20 |
//! | connections per atomic part | 3 | 3 | 3 | 3 | 3 |
//! | document size (bytes) | 2,000 | 20,000 | 20,000 | 2,000 | 2,000 |
//! | manual size (bytes) | 100,000 | 1,000,000 | 1,000,000 | 100,000 | 100,000 |
//! | composite parts per module | 500 | 500 | 500 | 500 | 2,000 |
//! | assemblies per complex assembly | 3 | 3 | 3 | 3 | 3 |
//! | assembly levels | 7 | 7 | 7 | 7 | 8 |
//! | composite parts per base assembly | 3 | 3 | 3 | 3 | 3 |
//! | modules | 1 | 1 | 10 | 5 | 5 |
//!
//! Every field can be changed from a preset (for example the small database's 6- and 9-
//! connection variants), within the bounds of [`crate::limits`].

use crate::error::Oo7Error;
use crate::limits;

/// Where a composite part's document goes in creation order (and so in the pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocPlacement {
    /// As `oo7-spec.md` orders it: the composite part, its document, then its atomic parts.
    /// A document larger than a page then separates a composite part from its root part.
    BeforeParts,
    /// After the composite part's connections, so that the composite part and its root atomic
    /// part share a page (as the HAC paper's T6 fetch count, 506, implies Thor's layout did).
    AfterConnections,
}

impl DocPlacement {
    /// The code stored in the database's parameters object.
    pub fn code(self) -> u32 {
        match self {
            DocPlacement::BeforeParts => 0,
            DocPlacement::AfterConnections => 1,
        }
    }

    /// The placement with code `c`.
    pub fn from_code(c: u32) -> Option<DocPlacement> {
        match c {
            0 => Some(DocPlacement::BeforeParts),
            1 => Some(DocPlacement::AfterConnections),
            _ => None,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DocPlacement::BeforeParts => "before-parts",
            DocPlacement::AfterConnections => "after-connections",
        }
    }
}

impl std::str::FromStr for DocPlacement {
    type Err = Oo7Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "before-parts" | "spec" => Ok(DocPlacement::BeforeParts),
            "after-connections" | "after" => Ok(DocPlacement::AfterConnections),
            _ => Err(Oo7Error::BadParams(format!(
                "unknown document placement {s:?} (expected before-parts or after-connections)"
            ))),
        }
    }
}

/// Every parameter of an OO7 database. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Atomic parts in each composite part's graph.
    pub atomic_per_composite: u32,
    /// Outgoing connections of each atomic part.
    pub connections_per_atomic: u32,
    /// Bytes of each composite part's document text.
    pub document_bytes: u32,
    /// Bytes of each module's manual text.
    pub manual_bytes: u32,
    /// Composite parts owned by each module.
    pub composite_per_module: u32,
    /// Children of each complex assembly.
    pub assemblies_per_assembly: u32,
    /// Levels of the assembly tree; the last holds the base assemblies.
    pub assembly_levels: u32,
    /// Private (and, separately, shared) composite parts each base assembly uses.
    pub composite_per_base: u32,
    /// Modules (each with its assembly tree, manual and composite parts).
    pub modules: u32,
    /// Where documents go in creation order.
    pub doc_placement: DocPlacement,
    /// The seed of every random choice.
    pub seed: u64,
}

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 0x007;

impl Params {
    /// The small database.
    pub fn small() -> Params {
        Params {
            atomic_per_composite: 20,
            connections_per_atomic: 3,
            document_bytes: 2_000,
            manual_bytes: 100_000,
            composite_per_module: 500,
            assemblies_per_assembly: 3,
            assembly_levels: 7,
            composite_per_base: 3,
            modules: 1,
            doc_placement: DocPlacement::BeforeParts,
            seed: DEFAULT_SEED,
        }
    }

    /// The medium database.
    pub fn medium() -> Params {
        Params {
            atomic_per_composite: 200,
            document_bytes: 20_000,
            manual_bytes: 1_000_000,
            ..Params::small()
        }
    }

    /// The large database: ten medium modules.
    pub fn large() -> Params {
        Params { modules: 10, ..Params::medium() }
    }

    /// The QuickStore recovery study's small database (its Table 1): five small modules.
    pub fn qs_small() -> Params {
        Params { modules: 5, ..Params::small() }
    }

    /// The QuickStore recovery study's big database: five modules of 2,000 composite parts
    /// under eight assembly levels.
    pub fn qs_big() -> Params {
        Params { modules: 5, composite_per_module: 2_000, assembly_levels: 8, ..Params::small() }
    }

    /// A tiny database for unit tests (seconds matter in CI): the small database's shape with
    /// fewer and smaller everything.
    pub fn tiny() -> Params {
        Params {
            atomic_per_composite: 10,
            document_bytes: 300,
            manual_bytes: 20_000,
            composite_per_module: 40,
            assembly_levels: 4,
            ..Params::small()
        }
    }

    /// The preset named `name`: small, medium, large, qs-small, qs-big or tiny.
    pub fn preset(name: &str) -> Result<Params, Oo7Error> {
        match name {
            "small" => Ok(Params::small()),
            "medium" => Ok(Params::medium()),
            "large" => Ok(Params::large()),
            "qs-small" => Ok(Params::qs_small()),
            "qs-big" => Ok(Params::qs_big()),
            "tiny" => Ok(Params::tiny()),
            _ => Err(Oo7Error::BadParams(format!(
                "unknown size {name:?} (expected small, medium, large, qs-small, qs-big or tiny)"
            ))),
        }
    }

    /// Checks every parameter against [`crate::limits`].
    pub fn validate(&self) -> Result<(), Oo7Error> {
        let bad = |what: &str, v: u64, lo: u64, hi: u64| {
            if v < lo || v > hi {
                Err(Oo7Error::BadParams(format!("{what} = {v} is outside {lo}..={hi}")))
            } else {
                Ok(())
            }
        };
        bad(
            "atomic parts per composite",
            self.atomic_per_composite.into(),
            1,
            limits::ATOMIC_PER_COMPOSITE_MAX as u64,
        )?;
        bad(
            "connections per atomic part",
            self.connections_per_atomic.into(),
            1,
            limits::CONNECTIONS_PER_ATOMIC_MAX as u64,
        )?;
        bad("document bytes", self.document_bytes.into(), 1, limits::TEXT_BYTES_MAX as u64)?;
        bad("manual bytes", self.manual_bytes.into(), 1, limits::TEXT_BYTES_MAX as u64)?;
        bad(
            "composite parts per module",
            self.composite_per_module.into(),
            1,
            limits::COMPOSITE_PER_MODULE_MAX as u64,
        )?;
        bad(
            "assemblies per assembly",
            self.assemblies_per_assembly.into(),
            1,
            limits::ASSEMBLIES_PER_ASSEMBLY_MAX as u64,
        )?;
        bad("assembly levels", self.assembly_levels.into(), 2, limits::ASSEMBLY_LEVELS_MAX as u64)?;
        bad(
            "composite parts per base assembly",
            self.composite_per_base.into(),
            1,
            limits::COMPOSITE_PER_BASE_MAX as u64,
        )?;
        bad("modules", self.modules.into(), 1, limits::MODULES_MAX as u64)?;
        let bases = self.base_per_module() as u64 * u64::from(self.modules);
        bad("base assemblies", bases, 1, limits::BASES_MAX as u64)?;
        let atomic = self.atomic_parts();
        bad("atomic parts", atomic, 1, limits::ATOMIC_PARTS_MAX as u64)?;
        Ok(())
    }

    /// Complex assemblies per module: 1 + k + ... + k^(levels-2).
    pub fn complex_per_module(&self) -> u32 {
        let k = self.assemblies_per_assembly;
        (0..self.assembly_levels - 1).map(|l| k.pow(l)).sum()
    }

    /// Base assemblies per module: k^(levels-1).
    pub fn base_per_module(&self) -> u32 {
        self.assemblies_per_assembly.pow(self.assembly_levels - 1)
    }

    /// Composite parts in the database.
    pub fn composite_parts(&self) -> u32 {
        self.composite_per_module * self.modules
    }

    /// Atomic parts in the database.
    pub fn atomic_parts(&self) -> u64 {
        u64::from(self.composite_parts()) * u64::from(self.atomic_per_composite)
    }

    /// Connections in the database.
    pub fn connections(&self) -> u64 {
        self.atomic_parts() * u64::from(self.connections_per_atomic)
    }

    /// The module (0-based) that owns composite part `cp` (1-based).
    pub fn module_of_composite(&self, cp: u32) -> u32 {
        (cp - 1) / self.composite_per_module
    }

    /// The first atomic part id (1-based) of composite part `cp`.
    pub fn first_atomic(&self, cp: u32) -> u32 {
        (cp - 1) * self.atomic_per_composite + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_counts_match_the_spec() {
        let m = Params::medium();
        assert_eq!(m.complex_per_module(), 364);
        assert_eq!(m.base_per_module(), 729);
        assert_eq!(m.atomic_parts(), 100_000);
        assert_eq!(m.connections(), 300_000);
        let s = Params::small();
        assert_eq!(s.atomic_parts(), 10_000);
        assert_eq!(s.connections(), 30_000);
        assert_eq!(Params::qs_big().base_per_module(), 2187);
        for p in [
            Params::small(),
            Params::medium(),
            Params::large(),
            Params::qs_small(),
            Params::qs_big(),
            Params::tiny(),
        ] {
            p.validate().unwrap();
        }
        assert!(Params { assembly_levels: 1, ..Params::small() }.validate().is_err());
    }
}
