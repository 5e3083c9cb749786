//! thor-lab: thor's laboratory. Everything the `thor` command runs to measure or study the store
//! rather than to operate it: the benchmarks (`thor bench`), the OO7 experiments (load, run,
//! sweeps, the miss penalty and its figures, multi-client runs, the recovery study, OO7 across
//! two servers), the loopback floor, the plots, the bank clients that the process tests kill
//! servers under, and (with the `sim` feature) the two simulators on the command line
//! (`thor sim`).
//!
//! Each experiment is a module owning its clap argument struct and a `run` function, so the
//! `thor` binary (crates/thor-cli) only parses and dispatches. The crate is not published: its
//! API is the command line's, and it changes with the experiments.
//!
//! The bank: [`bank`] is the one model of accounts and recorded histories. The transfer client
//! (one server) and the cluster client (several, two-phase commit) differ only in how they reach
//! the accounts; both record through [`bank::Recorder`] (one history line per transaction that
//! reached its commit, its answer classified by [`bank::Recorder::outcome`]), and
//! `thor bench clients` uses the same accounts in process. The history checker (`thor-history`)
//! reads what they record.
//!
//! Feature `sim`: links `thor-sim` and `thor-cachesim` for `thor sim` and
//! `thor oo7 multi --sim`. Without it the shipped binary carries neither simulator.
//!
//! # The load drivers (the detail behind ARCHITECTURE.md)
//!
//! The load drivers share `bank.rs` (accounts reached from root slot 0, each write storing
//! a version unique to it so histories can be checked): `thor bench clients` (`bench_clients.rs`:
//! N client threads over loopback TCP running transfers or the shared-counters workload through
//! `Session::run`; throughput, aborts, latency, the server's refusals by cause, the total checked)
//! and `thor bench transfer-client` (`transfer_client.rs`: one client process that survives
//! server restarts and appends every transaction it sent for commit to a JSON-lines history;
//! thor-cli's `tests/kill_transfers.rs` runs eight of them while SIGKILLing the server twenty times and checks
//! the history with `thor_history`), and `thor bench cluster-client` (`cluster_client.rs`: the
//! same over a `Cluster`, each transfer between accounts at two servers; thor-cli's `tests/kill_cluster.rs`
//! runs two `thor server` processes and four of them while SIGKILLing either server a dozen
//! times, then checks the money and the history against both servers' final state); the two
//! run one transaction loop, `bank::run_transfers`, over a `bank::Teller` (a session with its
//! bank, or a cluster with every server's). `thor bench twopc` (`bench_twopc.rs`) times commits
//! at one server against two over TCP or in process; `thor bench cross-server`
//! (`bench_cross.rs`) runs two server processes and 1-8 cluster clients, with or without a
//! SIGKILL every few seconds, and reports throughput, aborts, latency and the time from a kill
//! to the next acknowledged transfer (issue 32's figures);
//! `thor oo7 cluster` (`oo7_cluster.rs`, over `thor_oo7::split`) runs OO7 with its two modules at
//! two servers against one; `docs/cluster.md` has both.
//!

pub mod args;
pub mod bank;
pub mod bench;
mod bench_clients;
mod bench_cross;
mod bench_twopc;
mod cluster_client;
#[cfg(feature = "sim")]
mod cluster_sim;
mod floor;
pub mod oo7;
mod oo7_cluster;
mod oo7_multi;
mod oo7_penalty;
mod oo7_penalty_figures;
mod oo7_recovery;
mod plot;
#[cfg(feature = "sim")]
pub mod sim;
mod transfer_client;

pub use args::{at_least_one, page_kb, positive_seconds, positive_size};

/// What a command that needs a simulator says in a binary built without them.
pub const NO_SIM: &str = "this thor was built without the simulators; build it with \
                          `--features lab` (cargo build -p thor-cli --features lab)";
