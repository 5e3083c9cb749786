//! OO7 over LMDB: the comparison that issues 15 and 16 ask for, as a benchmark-only crate.
//!
//! Issues 15 and 16 compare thor with "OO7 written over LMDB (a memory-mapped B-tree store,
//! today's stand-in for the paper's C++/OS)", with figures an outside tester measured but whose
//! code was not in the repository. This crate is that program, so that the comparison can be
//! run again from the repository, on the same database, in the same sitting as thor:
//!
//! - [`format`]: one LMDB value per OO7 object, keyed by a compact four-byte id (class and
//!   index), with the object's lists and strings inline, as the tester described.
//! - [`store`]: the environment, and the loader. The database is thor-oo7's own: its generator
//!   builds the native baseline's graph ([`thor_oo7::native::NativeDb`], the same plan, so the
//!   same ids, values and links as the thor database of the same preset and seed), and the
//!   loader writes that graph's objects; [`store::verify`] checks every value against it.
//! - [`traverse`]: T6, T1-, T1, T1+ and T2a-c over LMDB read and write transactions, with
//!   thor-oo7's algorithm and visited set; their answers equal thor's (`tests/`).
//! - [`sys`] and [`cgroup`]: what the measurements need from Linux: page-fault and I/O
//!   counters, dropping a file from the OS page cache, and a memory cgroup whose limit a probe
//!   runs under.
//!
//! The `oo7-lmdb` binary (`src/main.rs`) loads a database, measures cold and hot traversals,
//! T2b's commit and the memory footprint, and runs thor's side with the `thor` command in the
//! same sitting; `docs/oo7.md` ("OO7 over LMDB, side by side") has the commands and results.
//!
//! *Architecture invariant:* no product crate depends on this one (it is `publish = false`
//! and only the workspace lists it); it depends on thor-oo7 for the generator and on
//! thor-oo7's experiment driver for thor's side of the footprint probe.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! OO7 written over LMDB (the `heed` binding), the memory-mapped B-tree store that issues 15 and
//! 16 compare thor with, so that their comparisons run from the repository on the same database
//! and in the same sitting as thor. `docs/oo7.md` ("OO7 over LMDB, side by side") has the commands
//! and results.
//!
//! `format.rs` is the byte format: one LMDB value per OO7 object under a four-byte big-endian key
//! (four bits of class, 28 of index, so keys sort by class and then creation order), with the
//! object's lists (parts, connections, children, bags) and strings inline, as the issues' tester
//! described; decoding is checked (a malformed value is a `FormatError`). `store.rs` opens the
//! environment and loads it: thor-oo7's generator builds the native baseline's graph
//! (`thor_oo7::native::NativeDb`, from the same `Plan` as a thor database of the same preset and
//! seed) and the loader appends its objects in key order (`MDB_APPEND`, so leaves are full);
//! `verify` compares every value with that graph. `traverse.rs` runs T6, T1-, T1, T1+ and T2a-c
//! over LMDB read or write transactions with thor-oo7's algorithm and `Visited` set, one `mdb_get`
//! per object thor reads. `sys.rs` and `cgroup.rs` are what the measurements need from Linux: page
//! faults and I/O counters, dropping a file from the OS page cache (`posix_fadvise`), `mincore`,
//! and a memory cgroup (v1 or v2, found from `/proc/self/cgroup`) that a probe joins between fork
//! and exec. The `oo7-lmdb` binary (`src/bin/oo7-lmdb/`): `load`, `verify`, `run` (cold and hot
//! traversals and T2b's commit, each measured run a fresh process, alternating with the `thor oo7
//! run` command) and `footprint` (the smallest cgroup memory limit under which a hot traversal
//! has no major fault, and for thor no fetch, by bisection over fresh processes).
//!
//! *Architecture Invariant:* no product crate depends on it (`publish = false`; only the workspace
//! lists it, so CI builds, lints and tests it).
//!
//! *Architecture Invariant:* the LMDB database is thor-oo7's database: `tests/matches_thor.rs`
//! loads tiny and small both ways, checks every LMDB value against the generator's graph, and
//! checks that each traversal, run in sequence with the updates, answers as thor does (parts
//! visited, updates, result). `oo7-lmdb run` checks the same for every measured run and refuses
//! databases of different parameters.
//!
//! *API Boundary:* a benchmark; its library (`format`, `store`, `traverse`, `sys`, `cgroup`) serves
//! its binary and tests.

pub mod cgroup;
pub mod error;
pub mod format;
pub mod limits;
pub mod stats;
pub mod store;
pub mod sys;
pub mod traverse;

pub use error::BenchError;
