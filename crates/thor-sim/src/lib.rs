//! thor-sim: the deterministic whole-cluster simulation.
//!
//! The real server core ([`thor_server::Core`]) runs with simulated clients, a simulated
//! network and a simulated disk ([`thor_storage::MemDisk`], with its crash model), all in one
//! thread, driven by one seeded scheduler. Nothing reads a real clock or a real device: time is
//! a virtual microsecond counter, and every random choice (latencies, which client acts, what it
//! commits, when messages are lost, when and how the server crashes) comes from one
//! [`thor_storage::SplitMix64`] stream. So a seed replays a run exactly, and a failing seed is a
//! bug report.
//!
//! ```text
//!                         event queue (virtual time, then insertion order)
//!    clients ── Connect, Request ──► network ──► Core::step ──► effects
//!       ▲                          (latency,          │  Reply ─────────► network ──► client
//!       └──── Reply, broken conn ── loss = broken     │  Append ────────► log (MemDisk), sync later
//!                                   connection)       │  Read, Install,
//!                                                     │  Checkpoint ────► disk I/O later
//!    faults: a crash at any step (MemDisk loses what POSIX allows; an I/O may die halfway),
//!            then recovery from the disk; lost connections; clients reconnect
//! ```
//!
//! [`world`] is the simulation; [`check`] is the checker that judges it: after every crash and
//! at the end, the recovered state must be exactly the state of a prefix of the log that holds
//! every acknowledged commit (so every acknowledged commit is present, and no unacknowledged one
//! is partly visible), and every page a client is sent must show exactly the commits that were
//! durable when it was composed.
//!
//! The history checker ([`thor_history`], its own crate, which the laboratory's bank clients use
//! too) is a second, independent judge, of isolation rather than durability: given the
//! transactions the clients committed (what each read and wrote) it proves the history
//! serializable, or names the anomaly (a lost update, a dirty read, a dependency cycle).

pub mod acked;
pub mod check;
pub mod pagemode;
pub mod twopc;
pub mod world;

pub use check::Violation;
pub use pagemode::PageClientConfig;
pub use world::{Outcome, SimConfig, SimFailure, SimPrefetch, run};
