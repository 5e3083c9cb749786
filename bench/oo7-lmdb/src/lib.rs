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

pub mod cgroup;
pub mod error;
pub mod format;
pub mod limits;
pub mod stats;
pub mod store;
pub mod sys;
pub mod traverse;

pub use error::BenchError;
