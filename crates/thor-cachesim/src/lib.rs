//! `thor-cachesim`: a trace-driven simulator of client caches over a shared array cache, built to
//! reproduce and extend the DEMOTE exclusive-caching study (Wong and Wilkes,
//! `papers/demote-exclusive-caching.txt`).
//!
//! # The pieces
//!
//! ```text
//!   workload ──> Trace ──> run::simulate ──> RunCounts ──> stats / cost ──> latencies, CDFs
//!   (synthetic   (CSV in     (Hierarchy of    (requests      (priced under any CostModel:
//!    or CSV)      and out)    thor-cache       per class)     round, calibrated, any
//!                             policies)                        bandwidth)
//!   stack: LRU stack depths of a trace, and the paper's inclusive/exclusive prediction
//!   experiment: Table 2, the bandwidth sweep and the calibration, on the paper's set-ups (paper)
//! ```
//!
//! - [`hierarchy`]: the semantics of each design (where reads and demotions go), the heart of the
//!   study; the replacement policies themselves are `thor_policy`, the code that ships.
//! - [`workload`] and [`trace`]: RANDOM, SEQUENTIAL, ZIPF for one or many clients, and the CSV
//!   block-trace format.
//! - [`run`]: warm-up, the disk head, counting by class.
//! - [`cost`] and [`stats`]: the latency model and the measures of the paper's figures.
//! - [`stack`]: stack-depth analysis and the section-3 prediction.
//! - [`paper`] and [`experiment`]: the paper's set-ups and figures, and the experiments on them.
//!
//! # Invariants
//!
//! - Simulation is deterministic: a workload is a pure function of its spec and seed, and the
//!   simulator has no other source of randomness or time.
//! - The simulator counts; it never prices. Every latency is computed afterwards from counts
//!   and a cost model, so comparisons under different cost models see identical runs.
//! - Every buffer is bounded ([`limits`]); a malformed trace file is an error naming its line.

pub mod cost;
mod error;
pub mod experiment;
pub mod hierarchy;
pub mod limits;
pub mod paper;
pub mod run;
pub mod stack;
pub mod stats;
pub mod trace;
pub mod workload;

pub use error::SimError;
