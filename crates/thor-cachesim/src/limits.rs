//! Bounds on everything the simulator holds. Each says why it has its value; the assertions at
//! the bottom keep the relations between them true.

/// The most clients one simulation runs. Each client is a cache with its own index; a thousand
/// is far beyond the paper's eight and still small next to the memory of one cache.
pub const MAX_CLIENTS: usize = 1024;

/// The most blocks one cache (a client's or the array's) may hold: 2^28 blocks is 1 TiB of 4 KiB
/// blocks, and the policy's bookkeeping for it is about 6 GiB, the most this tool should take.
pub const MAX_CACHE_BLOCKS: usize = 1 << 28;

/// The most distinct blocks a workload or trace may name. Block ids are stored as `u32` inside
/// the simulator (8-byte requests), and a dense index costs 4 bytes per block per cache.
pub const MAX_DISTINCT_BLOCKS: u64 = 1 << 31;

/// The most requests one trace may hold in memory: 2^28 requests of 8 bytes is 2 GiB.
pub const MAX_TRACE_REQUESTS: u64 = 1 << 28;

/// The longest line accepted in a trace CSV file. A valid line is at most two decimal `u64`s, a
/// comma and a line ending (42 bytes); anything much longer is not a trace.
pub const MAX_TRACE_LINE_BYTES: usize = 256;

/// The total size of the dense block-to-slot indexes a simulation may allocate (one per cache,
/// 4 bytes per distinct block each). Above this the caches use hash indexes instead, which cost
/// memory per cached block rather than per possible block.
pub const MAX_DENSE_INDEX_BYTES: u64 = 1 << 30;

/// The deepest LRU stack distance the stack-depth analysis resolves; deeper reuses are counted
/// together. 2^26 blocks is 256 GiB of 4 KiB blocks, past any cache this tool simulates, and the
/// histogram is then 512 MiB at most.
pub const MAX_STACK_DEPTH: usize = 1 << 26;

/// The most points a bandwidth sweep evaluates (each is a cheap re-costing of fixed counts, but a
/// plot or table with more than this is unreadable).
pub const MAX_SWEEP_POINTS: usize = 10_000;

const _: () = assert!(MAX_CLIENTS <= u16::MAX as usize + 1, "clients are stored as u16");
const _: () = assert!(MAX_DISTINCT_BLOCKS <= u32::MAX as u64, "blocks are stored as u32");
const _: () = assert!(MAX_CACHE_BLOCKS <= thor_policy::MAX_CAPACITY);
const _: () = assert!(MAX_STACK_DEPTH as u64 <= MAX_DISTINCT_BLOCKS);
