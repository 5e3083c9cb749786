//! thor-oo7: the OO7 benchmark on thor, and the experiments of the HAC and Thor papers.
//!
//! - [`params`]: the generator's parameters (small, medium, large, the QuickStore variants).
//! - [`rng`]: the seeded, documented random source (SplitMix64 streams).
//! - [`plan`]: every random choice and the creation order, shared by both builders.
//! - [`schema`]: the OO7 classes on thor's typed API and the object layouts chosen.
//! - [`load`]: the bulk loader writing a database straight into pages.
//! - [`traverse`]: traversals T1, T1-, T1+, T2a-c, T3a-c, T4-T9, T6, queries Q1-Q8 and the
//!   structural insert and delete, over a thor session.
//! - [`native`]: the same database and operations over an ordinary in-memory Rust graph, the
//!   baseline for hit time.
//! - [`dynamic`]: the HAC paper's dynamic traversal.
//! - [`experiment`]: opening a database, running operations hot or cold under a cache policy,
//!   and measuring what the papers measure.
//! - [`multi`]: several clients, each with its own session, traversing their own modules or
//!   one shared module at once, with conflicts retried; per-client and total throughput.
//!
//! *Architecture invariant:* the thor and native builds of a database come from one
//! [`plan::Plan`], and the traversals of both follow the same algorithm (an explicit-stack
//! depth-first search with a dense visited set keyed by atomic-part id, [`visited::Visited`]),
//! so a comparison of their times measures the object store, not the benchmark code.

pub mod btree;
pub mod dynamic;
pub mod error;
pub mod experiment;
pub mod limits;
pub mod load;
pub mod multi;
pub mod native;
pub mod ops;
pub mod params;
pub mod plan;
pub mod rng;
pub mod schema;
pub mod split;
pub mod traverse;
pub mod visited;

pub use error::Oo7Error;
pub use ops::Op;
pub use params::{DocPlacement, Params};
