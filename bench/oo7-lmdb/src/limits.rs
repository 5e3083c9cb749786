//! Every bound of the benchmark, with the reason for it. A bound that is reached is an error
//! that says which, never a silent truncation.

/// Bits of a key that hold the object's index within its class (the other four name the class,
/// [`crate::format::Tag`]). 2^28 objects of one class: the large preset has 3,000,000
/// connections, the most of any class of any preset; a database past it is refused at load.
pub const INDEX_BITS: u32 = 28;

/// The largest index a key can hold.
pub const INDEX_MAX: u32 = (1 << INDEX_BITS) - 1;

/// The size of the memory map, and so the largest database file: 64 GiB of address space
/// (only what is touched costs memory). The large preset's file is about 0.5 GB.
pub const MAP_BYTES: usize = 64 << 30;

/// References in one inline list (a composite part's atomic parts, a `usedIn` bag, a module's
/// base assemblies): thor-oo7's bounds keep every list far below this (`BASES_MAX`, 2^20, is
/// the largest), so a longer one in a value is corruption.
pub const LIST_LEN_MAX: usize = 1 << 20;

/// Bytes of one inline string (a `type` string is 10, a title 40; texts are
/// [`TEXT_BYTES_MAX`]).
pub const SHORT_STRING_MAX: usize = u8::MAX as usize;

/// Bytes of a document's or manual's text: thor-oo7's own bound.
pub const TEXT_BYTES_MAX: usize = thor_oo7::limits::TEXT_BYTES_MAX;

/// Runs of a measurement (cold processes, hot repeats, T2b copies): enough for any median,
/// few enough that a typo cannot keep the machine busy for a day.
pub const RUNS_MAX: u32 = 1_000;

/// The smallest memory limit a footprint probe may set, in MiB: below it the process cannot
/// even start (the binary's own pages and the loader's), so probing there only finds that.
pub const CGROUP_LIMIT_MIN_MIB: f64 = 4.0;

/// The largest memory limit a footprint probe may set, in MiB (the machine has 24 GiB).
pub const CGROUP_LIMIT_MAX_MIB: f64 = 16_384.0;

/// The finest step of the footprint bisection, in MiB (one 4 KiB page is 1/256 MiB; a finer
/// answer would be below the noise of the kernel's reclaim).
pub const CGROUP_STEP_MIN_MIB: f64 = 1.0 / 64.0;

/// Probes of one footprint bisection, confirmations included: from the widest range to the
/// finest step takes about 20.
pub const PROBES_MAX: u32 = 64;

/// Seconds a child process (one measured run, or one probe) may take before it is killed and
/// the measurement fails: cold T1 on the large preset takes seconds, a probe at a limit far
/// too small thrashes, and neither should hang the benchmark.
pub const CHILD_TIMEOUT_S: u64 = 600;

/// Bytes of a child's standard output that are read (its JSON report is under a kilobyte).
pub const CHILD_OUTPUT_MAX: usize = 1 << 20;

const _: () = assert!(INDEX_BITS + 4 == 32);
const _: () = assert!(CGROUP_LIMIT_MIN_MIB < CGROUP_LIMIT_MAX_MIB);
const _: () = assert!(CGROUP_STEP_MIN_MIB > 0.0);
const _: () = assert!(LIST_LEN_MAX >= thor_oo7::limits::BASES_MAX);
const _: () = assert!(LIST_LEN_MAX >= thor_oo7::limits::ATOMIC_PER_COMPOSITE_MAX);
const _: () = assert!(TEXT_BYTES_MAX <= u32::MAX as usize);
