//! Every bound of the client library, with the reason for it.
//!
//! The client talks to a server it does not trust to be correct: whatever the server sends, a
//! session does a bounded amount of work and holds a bounded amount of memory before it answers
//! with an error. The cache's own bounds are in `thor_cache::limits`, the wire's in
//! `thor_wire::limits`.

/// Most fetch or class-load rounds one access may take (the object's page, its class's page, a
/// stale page refetched, with slack): beyond, the cache cannot hold what it needs, or the
/// server keeps answering with pages that do not hold the object.
pub const SLOW_PATH_ROUNDS_MAX: u32 = 16;
