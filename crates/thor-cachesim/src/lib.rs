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
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! Trace-driven simulator of client caches over a shared array cache, built to reproduce and extend
//! the DEMOTE exclusive-caching study; `docs/sim.md` has the model, every choice the paper leaves
//! open, and the results. `hierarchy.rs` is the semantics of a design (client policy, array policy,
//! demotion on or off; where reads, hits and demoted blocks go). `workload.rs` and `trace.rs`
//! produce request streams (RANDOM, SEQUENTIAL, ZIPF; one or many clients, disjoint or conjoint; CSV
//! block traces in and out). `run.rs` drives a trace through a hierarchy and counts requests by class
//! (where served, what the demotion did). `cost.rs` and `stats.rs` price counts under a latency model
//! (round-number or calibrated costs, any link bandwidth, sequential and random disk reads) into hit
//! fractions, mean latencies and exact latency CDFs. `stack.rs` computes LRU stack depths and the
//! paper's inclusive/exclusive prediction. `paper.rs` holds the paper's set-ups and figures;
//! `experiment.rs` runs Table 2, the bandwidth sweep and the calibration on them. Its command line is
//! `thor sim` (thor-cli `sim.rs`); thor-cli's `plot.rs` draws the PNG/SVG line and bar charts.
//!
//! *Architecture Invariant:* the replacement policies are `thor_policy`'s, never a copy: the
//! simulator evaluates the code that ships.
//!
//! *Architecture Invariant:* the simulator counts and never prices; latencies are computed from the
//! counts afterwards, so every cost model and bandwidth sees identical runs. It reads no clock and
//! has no randomness besides the seeded workload generator: a seed reproduces a run.
//!
//! *Architecture Invariant:* every buffer is bounded (`limits.rs`); a malformed trace file is a
//! `SimError::TraceFormat` naming the file and line, never a panic.
//!
//! *Architecture Invariant:* the paper's figures live only in `paper.rs` and appear only as the
//! "paper" column beside our results.
//!
//! *API Boundary:* `hierarchy::{Design, Hierarchy, HierarchyConfig, Outcome, Level, Demotion,
//! Step}`, `workload::{WorkloadSpec, Pattern, Sharing}`, `trace::{Trace, Request}`,
//! `run::{simulate, RunConfig, RunCounts, IndexKind}`, `cost::{CostModel, CostTotals, LinkScaling,
//! Usage, Served}`, `stats::{ClassCounts, Summary}`, `stack::StackDepths`, `experiment::{run_paper,
//! table2, sweep, crossover, calibrate}`, `SimError`.

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
