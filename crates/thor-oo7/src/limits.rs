//! Every bound of the benchmark, with the reason for it. The generator refuses parameters
//! outside them ([`crate::Params::validate`]) instead of building a database that cannot be
//! stored or traversed.

/// Atomic parts per composite part. A composite part's `parts` collection is one object and
/// objects never span pages: 1,000 references fit a 4 KB page, the smallest the papers use.
pub const ATOMIC_PER_COMPOSITE_MAX: usize = 1_000;
/// Connections per atomic part: the OO7 variants use 3, 6 and 9. The bound keeps every `to`
/// collection tiny and the traversals' explicit stacks small.
pub const CONNECTIONS_PER_ATOMIC_MAX: usize = 64;
/// Bytes of a document or manual text: 64 MB, far above OO7's 1 MB manual, bounded so that
/// reading one into memory is always affordable.
pub const TEXT_BYTES_MAX: usize = 64 << 20;
/// Composite parts per module (QuickStore's big database has 2,000).
pub const COMPOSITE_PER_MODULE_MAX: usize = 100_000;
/// Children of a complex assembly: its `subAssemblies` collection is one small object.
pub const ASSEMBLIES_PER_ASSEMBLY_MAX: usize = 64;
/// Levels of the assembly tree (OO7 uses 7, QuickStore's big database 8).
pub const ASSEMBLY_LEVELS_MAX: usize = 12;
/// Private (or shared) composite parts per base assembly.
pub const COMPOSITE_PER_BASE_MAX: usize = 64;
/// Modules in a database (OO7's large has 10).
pub const MODULES_MAX: usize = 64;
/// Base assemblies in a database.
pub const BASES_MAX: usize = 1 << 20;
/// Atomic parts in a database. The visited set is a dense array of one word per atomic part,
/// so this bounds it to 64 MB.
pub const ATOMIC_PARTS_MAX: usize = 1 << 24;
/// References per chunk of a chunked collection (a module's `allBases`): 4 KB objects, so that
/// a chunk fits the smallest page size the papers use.
pub const CHUNK_REFS: usize = 1_000;
/// Keys per node of the persistent B+-tree indexes. A node's keys are a fixed field, so they
/// must fit the largest fixed part a class may have (thor-core's `CLASS_FIXED_MAX_BYTES`).
pub const BTREE_FANOUT: usize = 64;
/// Structural inserts and deletes per operation (OO7 inserts and deletes ten composite parts).
pub const STRUCTURAL_MAX: usize = 1_000;
/// Operations of a dynamic traversal.
pub const DYNAMIC_OPS_MAX: usize = 10_000_000;
/// Clients of a multi-client run: a thread, a session and a connection each. OO7's large
/// database has 10 modules and the bound on modules is 64; more clients than that could only
/// share modules.
pub const CLIENTS_MAX: usize = MODULES_MAX;
/// The first backoff ceiling after a conflict in a multi-client run (1 ms: a hot small-module
/// traversal takes milliseconds, so a shorter sleep would only retry into the same conflict).
pub const BACKOFF_MIN_US: u64 = 1_000;
/// The largest backoff ceiling (50 ms): long enough for a conflicting writer to commit a
/// traversal of a small module, short enough that a timed run loses little to sleeping.
pub const BACKOFF_MAX_US: u64 = 50_000;
/// Conflicts in a row after which a multi-client traversal gives up and fails the run, so
/// that a client that can never commit (for example one that cannot refresh its stale copies)
/// reports it instead of retrying for ever: at the largest backoff, at least 5 s of sleeping.
pub const CONFLICTS_IN_A_ROW_MAX: u32 = 200;

/// Page references a recorded page string may hold (8 bytes each, 256 MiB): a measured run's
/// page visits, for Belady's optimum (`experiment::page_string`). Hot T1 on medium visits a few
/// million pages; a run past this fails with a clear error rather than growing without bound.
pub const PAGE_STRING_MAX: usize = 1 << 25;

const _: () = assert!(BACKOFF_MIN_US >= 2 && BACKOFF_MIN_US <= BACKOFF_MAX_US);
const _: () = assert!(CONFLICTS_IN_A_ROW_MAX >= 1);
const _: () = assert!(8 * BTREE_FANOUT + 8 <= thor_core::limits::CLASS_FIXED_MAX_BYTES);
const _: () = assert!(ATOMIC_PARTS_MAX <= u32::MAX as usize);
const _: () =
    assert!(ATOMIC_PER_COMPOSITE_MAX * 4 + 8 <= thor_core::limits::max_object_bytes(4096));
const _: () = assert!(CHUNK_REFS * 4 + 8 <= thor_core::limits::max_object_bytes(4096));
