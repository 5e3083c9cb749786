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
//! `server.rs` is `thor server`: its credentials come from `--credentials FILE` (scoped; a
//! server presents its own `peer:ID` secret to its peers, which `TcpPeers` starts only once the
//! database is open and its id known) or the single token (`--token-file`, `THOR_TOKEN`), and are
//! re-read on SIGHUP by a thread of their own (`Engine::set_credentials`: sessions of revoked
//! credentials are closed); `--peer` gives both the peers' addresses and the servers two-phase
//! commit may name. `tests/credentials.rs` runs it as a process: scopes over TCP, revocation on
//! SIGHUP, two servers authenticating to each other with their peer credentials.
//!
//! `stats.rs` is `thor stats ADDR` (`HOST:PORT` or `unix:PATH`, token from `THOR_TOKEN`; a
//! server's version, uptime, health and size, then its counters, those of modes that are off
//! hidden, as a table, JSON or Prometheus text) and the `--metrics-listen` endpoint of `thor
//! server` (`MetricsServer`: hyper's HTTP/1.1 on a thread and runtime of its own, `GET /metrics`
//! rendered by `metrics-exporter-prometheus` from the `metrics` facade the engine's latency
//! histograms record into, `GET /health` 200 or 503; stopped before the engine closes, so that
//! shutdown checkpoints); both render `ServerStats` with the help text its field docs give
//! (`ServerStats::HELP`). `server.rs` watches the engine's health and, after a storage failure
//! and a grace, shuts the server down and exits with status 75 (the guide says why). `main.rs` sets up
//! logging once for every command (`-v`/`-q`, `--log-format`, `RUST_LOG`) and prints an error as
//! one line, each cause once.
//!
//! thor-cli's load drivers share `bank.rs` (accounts reached from root slot 0, each write storing
//! a version unique to it so histories can be checked): `thor bench clients` (`bench_clients.rs`:
//! N client threads over loopback TCP running transfers or the shared-counters workload through
//! `Session::run`; throughput, aborts, latency, the server's refusals by cause, the total checked)
//! and `thor bench transfer-client` (`transfer_client.rs`: one client process that survives
//! server restarts and appends every transaction it sent for commit to a JSON-lines history;
//! `tests/kill_transfers.rs` runs eight of them while SIGKILLing the server twenty times and checks
//! the history with `thor_sim::serial`), and `thor bench cluster-client` (`cluster_client.rs`: the
//! same over a `Cluster`, each transfer between accounts at two servers; `tests/kill_cluster.rs`
//! runs two `thor server` processes and four of them while SIGKILLing either server a dozen
//! times, then checks the money and the history against both servers' final state). `thor bench
//! twopc` (`bench_twopc.rs`) times commits at one server against two over TCP or in process, and
//! `thor oo7 cluster` (`oo7_cluster.rs`, over `thor_oo7::split`) runs OO7 with its two modules at
//! two servers against one; `docs/cluster.md` has both.
//!
//! `thor check DIR` (thor-cli `check.rs`) is the offline consistency checker. It judges the
//! *committed state*, what the next open would serve: the page file as installed (with the
//! double-write buffer's intact copies where recovery writes them back) and the log from the
//! checkpoint on, as recovery replays it. Log pass 1 (`thor_storage::log::inspect`,
//! `thor_server::record::decode`) checks every record and indexes each object the log writes
//! after the checkpoint (class, size, where); page pass 1 checks each allocated page
//! (`PageView::parse_stored`, free space, version) and builds a bitmap of existing oids per page
//! and the class table; page pass 2 and log pass 2 check every installed object and every log
//! version against its class (`ClassDesc::check_shape`, `large::check_root`) and every reference
//! against the bitmap. One line per problem names the page and oid or the log segment, offset
//! and LSN; what recovery repairs (a torn tail, a page restored from the double-write buffer) is
//! a note. `--json` for machines; exit status 0 healthy, 1 problems, 2 could not check.
//! `tests/check.rs` injects each fault (flipped page byte, broken offset table, dangling
//! reference, bad log record, torn tail) into real files and checks what is reported.
//! `thor check --repair DIR` (`check/repair.rs`) first sets aside every log record recovery
//! cannot read (a record whose checksum passed but whose payload the record decoder refuses):
//! its bytes and a report go beside the log (`log.<lsn>.aside`, `.aside.txt`), the segment is
//! rewritten (a synced copy renamed over it) with the record's well-formed part in its place
//! (`record::salvage`), later records kept; then the check runs. `check/acked_tests.rs` is
//! issue 30's property test (`acknowledged_record_always_recovers`): `thor_sim::acked`'s
//! recovered and backup databases pass this check.
//!
//! `thor backup` (thor-cli `backup.rs`) copies a database into a new directory: `--server ADDR
//! NAME` sends the `Backup` request, and the server writes the copy into `NAME` inside its
//! `--backup-dir` (`EngineOptions::backup_dir`; `io::resolve_backup_request` admits only relative
//! plain names) while it goes on serving; `--dir DB` opens a database no process holds (its lock) and copies it the same way
//! (`Engine::backup`). `tests/backup.rs` runs four transfer clients against a server process,
//! backs it up under that load, and checks that the copy passes `thor check`, opens, conserves
//! the money and holds exactly a committed prefix of the clients' histories: everything
//! acknowledged before the request, each included transaction whole and with what it read.
//!
//! *Architecture Invariant:* `thor check` (without `--repair`) never writes to a database: it holds the directory
//! lock (a running server makes it refuse, exit 2), writes nothing but the `LOCK` file's holder
//! text, and reads every other file through a `Disk` that opens read-only descriptors and refuses
//! every change. It never panics on bad bytes: everything is decoded by the checked decoders,
//! and a seeded randomized test runs it on damaged files. Its memory is 65 bytes per page plus
//! an entry per object written after the checkpoint, whatever the database's size.
//!
//! `thor compact SRC DST` (thor-cli `compact.rs`) is `thor_server::upgrade` with no class
//! changed: a closed database copied into a new directory without its unreachable objects.
//! `tests/compact.rs` checks that a compacted OO7 database answers the whole suite as the original
//! and passes `thor check`, that an upgraded one passes `thor check`, and SIGKILLs a compaction
//! while it writes: no destination, and the next run finishes.
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
