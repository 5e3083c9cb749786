//! Every bound of the client library, with the reason for it.
//!
//! The client talks to a server it does not trust to be correct: whatever the server sends, a
//! session does a bounded amount of work and holds a bounded amount of memory before it answers
//! with an error. The cache's own bounds are in `thor_cache::limits`, the wire's in
//! `thor_wire::limits`.

use std::time::Duration;

/// Most fetch or class-load rounds one access may take (the object's page, its class's page, a
/// stale page refetched, with slack): beyond, the cache cannot hold what it needs, or the
/// server keeps answering with pages that do not hold the object.
pub const SLOW_PATH_ROUNDS_MAX: u32 = 16;

/// Most pieces [`Session::read_large`](crate::Session::read_large) visits for one large
/// object, whatever length its root claims: 2^18 pieces, 2 GiB of value in 8 KiB pages (the
/// whole value is read into memory). A well-formed tree visits exactly as many pieces as its
/// length needs, which this bounds too; the limit is what keeps a root that claims an absurd
/// length, or a tree whose references loop, from making a session read forever.
pub const LARGE_PIECES_MAX: usize = 1 << 18;

// A large value of a few megabytes (an OO7 manual is 1 MB) fits with room to spare even in the
// smallest pages.
const _: () = assert!(LARGE_PIECES_MAX * thor_core::limits::PAGE_SIZE_MIN / 2 >= 64 * 1024 * 1024);

/// The spill file's write buffer ([`crate::spill`]): records are appended here and written in
/// one positional write when it fills, so a steal of a cache's worth of objects costs a few
/// system calls, not one per object. Outside the cache's budget, reported in its stats.
pub const SPILL_BUFFER_BYTES: usize = 256 << 10;

/// The default cap on the spill file, per transaction
/// ([`SessionConfig::spill_bytes_max`](crate::SessionConfig::spill_bytes_max)): 4 GiB of
/// records, far beyond OO7's largest transaction (T2b on the medium database writes about
/// 10 MB of atomic parts) and small enough not to fill an ordinary temporary directory
/// unnoticed.
pub const SPILL_BYTES_DEFAULT: u64 = 4 << 30;

// A record (a page at most, and its header) always fits in the buffer.
const _: () = assert!(SPILL_BUFFER_BYTES >= 2 * thor_core::limits::PAGE_SIZE_MAX);
const _: () = assert!(SPILL_BYTES_DEFAULT <= thor_cache::spill::SPILL_BYTES_MAX);

/// A session asks for at most `usable frames / PREFETCH_FRAMES_DIVISOR` prefetched pages per
/// fetch ([`SessionConfig::prefetch_pages`](crate::SessionConfig::prefetch_pages)): pages that
/// come unasked take frames from what the traversal uses, so a small cache asks for few. An
/// eighth keeps a prefetch's pages a small part of any cache and lets a cache of a few
/// megabytes (a few hundred frames) still take several pages per round trip.
pub const PREFETCH_FRAMES_DIVISOR: usize = 8;

/// Further pages a session asks for with each fetch by default over a network transport
/// ([`SessionConfig::prefetch_pages`](crate::SessionConfig::prefetch_pages)). On cold OO7 over
/// loopback TCP, 32 following pages took T1 from 3,483 round trips to 143 and its time to
/// about 40% of no prefetch; 64 saved a little more time (85 round trips) for a reply, and so a
/// miss's wait, half again as long (`docs/oo7.md`, "Prefetch (issue 16)").
pub const PREFETCH_PAGES_DEFAULT: u16 = 32;

const _: () = assert!(PREFETCH_PAGES_DEFAULT as usize <= thor_wire::limits::PREFETCH_PAGES_MAX);

/// How long connecting to a server and its handshake may take, by default
/// ([`SessionConfig::connect_timeout`](crate::SessionConfig::connect_timeout)): a server on the
/// same network answers in milliseconds, a restarting one within seconds; ten seconds tells a
/// stopped or unreachable server from a slow one without leaving a program hanging.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How long a request other than a commit waits for its reply, by default
/// ([`SessionConfig::request_timeout`](crate::SessionConfig::request_timeout)). A fetch reads
/// at most a few pages from disk and a refresh nothing: a server that answers at all answers
/// in milliseconds, so thirty seconds means it is stopped or unreachable.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// How long a commit waits for its answer, by default
/// ([`SessionConfig::commit_timeout`](crate::SessionConfig::commit_timeout)): its record's
/// fsync, and maybe a queue behind a full MOB while an install round writes pages. A minute
/// covers a slow disk under load; a commit that takes longer is reported outcome-unknown and
/// its outcome asked for after reconnecting.
pub const COMMIT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// How long a session keeps trying to reconnect before the call that noticed the break fails,
/// by default ([`ReconnectConfig::give_up_after`](crate::ReconnectConfig::give_up_after)): a
/// server's restart (recovery replays the log since its last checkpoint) takes seconds.
pub const RECONNECT_GIVE_UP_DEFAULT: Duration = Duration::from_secs(60);

/// The wait after the first failed reconnect attempt, by default: a restarting server takes
/// at least this long to listen again.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(20);

/// The longest wait between two reconnect attempts, by default: the clients of a restarted
/// server come back within a second or two of it.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Most replicas a server's group may list ([`crate::group`]): Raft groups have three, five
/// or seven; sixteen leaves room for a group growing while a replica is replaced, and bounds
/// what a mistyped address list makes the session try in turn.
pub const GROUP_REPLICAS_MAX: usize = 16;

const _: () = assert!(RECONNECT_BACKOFF_MIN.as_nanos() <= RECONNECT_BACKOFF_MAX.as_nanos());
const _: () = assert!(RECONNECT_BACKOFF_MAX.as_nanos() < RECONNECT_GIVE_UP_DEFAULT.as_nanos());

/// Bytes of a full chunk (a leaf) of a sequence ([`crate::values`]), as a power of two: 1 KiB,
/// or the largest power of two one object holds in smaller pages. An append rewrites its
/// chunk, so the chunk is what an append logs (before chunks: the whole sequence's storage,
/// up to a page); a smaller chunk logs less per append but needs more directory entries and a
/// taller tree sooner. 1 KiB is 256 references or 128 `u64`s.
pub const SEQ_CHUNK_BYTES_LOG2: u32 = 10;

/// The tallest sequence tree a session reads or builds (levels, the chunks included). The
/// length is a `u32`; in the smallest pages (1 KiB: chunks of 512 bytes, directories of 247
/// references) 2^32 `u64`s need 5 levels, in 8 KiB pages 4. A header whose length would need
/// more is refused as malformed before any object of it is read.
pub const SEQ_HEIGHT_MAX: u32 = 5;

/// Serials a session's cache counts its created objects in before it runs into the next
/// session's (`crate::typed::identity`): 2^24, so that 128 sessions of a process have blocks
/// of their own before the 31-bit serial space wraps, and a session creates 16 M objects
/// before its serials could repeat another live session's.
pub const SERIAL_BLOCK: u32 = 1 << 24;

/// Renames (a created object's serial → its oref) the process keeps for `Ref` equality
/// (`crate::typed::identity`): the latest 65,536, like each cache's own record
/// (`thor_cache::limits::RENAMES_MAX`), at 16 bytes each.
pub const RENAMES_MAX: usize = 1 << 16;

const _: () = assert!(SERIAL_BLOCK.is_power_of_two() && SERIAL_BLOCK <= thor_core::RawRef::TAG_MAX);

/// Most reads of map leaves without a leaf log that a transaction keeps
/// ([`crate::leaflog`]): a leaf's first change adopts its earlier reads from them. 16 Ki
/// reads (about 400 KiB with 8-byte keys and values) cover a transaction of thousands of
/// lookups before its writes; past it reads are dropped and a leaf changed afterwards carries
/// no delta (it is validated as any object, as before the leaf merge), so the bound costs
/// concurrency, never correctness.
pub const PENDING_READS_MAX: usize = 16 * 1024;
