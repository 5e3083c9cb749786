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
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The OO7 benchmark and the HAC and Thor papers' experiments; `docs/oo7.md` has the choices made
//! and the results. `schema.rs` declares the OO7 classes with `thor_client::class!` (strings and
//! collections as objects of their own, as in Thor, so that T1+ has sub-objects and T1 reads half
//! of each page's objects), and `Padding::Gom`, the HAC-BIG layout: each class stored extended
//! by GOM's 8 extra header bytes and 8 per reference slot, which the same declarations read
//! (thor-client's class-extension rule). `params.rs`, `rng.rs` and `plan.rs` are the generator: every parameter
//! of the spec's table as a setting (small, medium, large and the QuickStore study's variants as
//! presets), a documented SplitMix64 with one stream per entity, and the creation order, driven
//! through a `Builder` trait. `load.rs` is the thor builder: object bytes from the typed layouts
//! straight into `Engine::bulk_load`, forward references patched in the loader's window (or, past
//! it, by one commit after the load), the class objects and schema directory where `thor-client`
//! looks, and the parameters, modules and indexes in the root. `native.rs` is the other builder: the
//! same database as a plain Rust graph, the baseline for hit time. `traverse.rs` runs the suite
//! (T1-T9 with the HAC paper's T1- and T1+, Q1-Q8, structural insert and delete) over a `Session`,
//! `btree.rs` the persistent B+-tree indexes, `dynamic.rs` the HAC paper's dynamic traversal, and
//! `experiment.rs` the measured runs (cold or hot, repeated, traced) on the embedded server or over
//! TCP, and Belady's floor for them (`page_string` records a run's page visits and the pages cached
//! before it starts, `belady_fetches` the optimum for a page cache's frames; `tests/belady.rs`
//! checks it against the quadratic definition on a recorded string and under every manager), `multi.rs` several clients at once (a thread, session and connection each) on their own
//! modules or one shared module, conflicts aborted and retried with bounded jittered backoff, and
//! optionally the clients' page visits in one global order (`PageTrace`, the `client,block` CSV
//! `thor sim` replays).
//! `thor oo7` (thor-cli `oo7.rs`) is its command line: `load`, `run`, `native`, `sweep`, `demo`,
//! and `multi` (thor-cli `oo7_multi.rs`: each run on a freshly opened `--dir` database served on
//! loopback TCP in-process, or on `--server`). `multi --page-cache inclusive,exclusive
//! --server-cache-mb A,B,C` is the exclusive-cache study: the server's counters over the timed
//! phase (fetches, page-cache hits, page-file reads, demotions) per placement and size, `--runs`
//! repeats with median and spread, CSV/JSON/plots (`--out`), and `--sim` replays each point's
//! recorded visits through thor-cachesim at the live sizes (each client's frames, less the one
//! background replacement keeps free; `run::simulate_sized`) beside the live counts.
//! `penalty` (thor-cli `oo7_penalty.rs`) is issue 16's instrument: per cold traversal over
//! loopback TCP in-process (or `--over embedded`), fetches, fetch time and its p50/p99 (the
//! session's `LatencyHistogram`, carried in `RunReport`), conversion per page and per object,
//! replacement per fetch, and their ratios to the fetch time and to the loopback floor, which the
//! same run measures with thor-cli `floor.rs`: a blocking ping-pong of a page-sized reply over
//! TCP (`TCP_NODELAY`) and over a Unix socket pair, on plain threads, with one client or
//! `--clients N` at once, each end placed by the scheduler (as thor's are) and pinned to one CPU
//! (no cross-CPU wake-up; on a 2-vCPU machine the difference is about 4x). The floor lives in thor-cli, not thor-net, because it is a measuring
//! instrument that shares no code with the protocol. Median and range over `--runs`; JSON, CSV and
//! a bar chart (`plot.rs`'s `bar_chart`) with `--out`. `--prefetch 0,32 --prefetch-hint
//! next,refs` compares prefetch settings in one sitting: each run runs every traversal once per
//! setting, one after the other, with the pages prefetched, used and evicted unused
//! (`RunConfig::prefetch`, `RunReport`).
//! `recovery-study` (thor-cli `oo7_recovery.rs`) is issue 14's driver: for each traversal
//! (T2A, T2B, T2C by default), commit mode and recovery buffer size (`--buffer-mb`, page modes
//! only) and client count (1 to 5, private modules), a fresh loopback server in that mode runs
//! `multi` for `--repeat` transactions per client after a warm-up (caches warm across
//! transactions; `MultiConfig::recovery` sets each session's `RecoveryConfig`, and
//! `ClientReport` carries the bytes shipped and the page modes' counters); it prints and writes
//! (CSV, JSON, plots against clients, and a bar chart of client writes per transaction) the
//! response time, throughput and, per transaction, the bytes shipped, page records (early ones
//! apart), record bytes, pages shipped and stolen, log-record pages, log bytes, REDO reads and
//! WPL images. `--memory-mb` gives each client the paper's memory (a diffing mode's cache is that
//! less its recovery buffer), `--images-mb` bounds the page images, `--server-cache-mb` and
//! `--direct-io` shape the server. `--runs` runs per point (median and range of the times);
//! `docs/results/recovery/figures.sh` runs the paper's three configurations.
//! `sweep` takes any managers (`--policies hac,fpc,quickstore,clock,arc,s3fifo,wtinylfu`) and
//! adds Belady's optimum on the same axes (a `BELADY` series, `NAME-belady.csv`, `belady` in the
//! JSON) for the most frames any of its page caches had at each size (`--no-belady` to skip).
//! A policy name ending in `-fg` runs it with foreground replacement (HAC-FG); with `fpc` the
//! elapsed chart adds FPC-NO (elapsed less replacement and conversion, the HAC paper's bound), with
//! several `gom:obj=F` splits the fetches chart adds GOM-BEST (the best split per size); with
//! `--big-dir` (the same database loaded with `thor oo7 load --pad-to-gom`, checked to be so)
//! the `--big-policies` (default `hac`) run on it as series named `-big` (HAC-BIG, and
//! GOM-BEST-BIG over its GOM splits); the charts draw every series or those `--plot` names (a
//! sweep whose charts would pass `plot::MAX_SERIES` is refused before it runs); every
//! chart's data is also a `NAME-fetches.csv`/`NAME-elapsed.csv` with every series, and the JSON is
//! written beside them. `penalty --figures --at t1=12,...` (thor-cli `oo7_penalty_figures.rs`) gives the HAC
//! paper's Figures 9-11 at each traversal's worst-case replacement point, hot and HAC-FG: a
//! `TimedTransport` around the session's transport times each fetch's `send` (over the in-process
//! transport: the server's core, disk included) and `recv`; with `--direct-reads` the database
//! file's direct-read counters give the disk time; over TCP the server's share is its driver's
//! fetch service time (`ServerStats::fetch_service_ns`, read with `Session::server_stats` around
//! the measured run) and the network the rest of the round trip. Figure 10 splits replacement
//! into usage computation, compaction and the rest from the cache's own timers
//! (`CacheStats::{usage_time, compaction_time}`); a manager that does not split (GOM, the paged
//! policies) is reported whole. Nothing is estimated.
//!
//! *Architecture Invariant:* thor and native databases come from one `Plan` (same ids, values and
//! links) and their operations follow the same algorithms (an explicit-stack depth-first search in
//! OO7's recursive order, a dense visited set keyed by atomic-part id), so a time ratio measures
//! the store; a test checks that all 25 operations give the same answers on both.
//!
//! *Architecture Invariant:* a seed reproduces a database byte for byte (tested on the files), and
//! a run's random choices come from their own seeded streams, so a run is reproducible too.
//!
//! *Architecture Invariant:* object accesses go through `Db::get`, which reports them to a tracer
//! that is a type parameter: no tracing costs nothing; `--trace-out` writes the page reference
//! string.
//!
//! *API Boundary:* `Params`, `Op`, `load::{load, load_dir, LoadOptions, LoadReport, Padding}`,
//! `schema::{Padding, stored_classes}`,
//! `traverse::{Db, Trace}` (`Db::run_on_module`), `native::NativeDb`, `dynamic::DynamicConfig`,
//! `experiment::{run, run_in, run_native, RunConfig, RunReport, Workload, Endpoint, page_string,
//! PageString, belady_fetches}`,
//! `multi::{run_multi, MultiConfig, MultiReport, Sharing, Length}`, `Oo7Error`.

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
