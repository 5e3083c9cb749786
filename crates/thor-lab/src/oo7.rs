//! `thor oo7`: the OO7 benchmark and the HAC experiments on the command line.
//!
//! ```text
//!   thor oo7 load   --dir DIR --size small|medium|large|qs-small|qs-big [--seed N] [--page-kb K]
//!                   [--pad-to-gom]
//!   thor oo7 run    --dir DIR --traversal NAME --policy hac|fpc --cache-mb X [--hot]
//!                   [--server ADDR] [--trace-out FILE]
//!   thor oo7 native --size S --traversal NAME
//!   thor oo7 sweep  --dir DIR --traversal NAME --policies hac,hac-fg,fpc,gom,quickstore,arc --out DIR
//!                   [--find-min] [--no-belady] [--cold] [--repeat N]
//!                   [--big-dir DIR [--big-policies hac]] [--plot SERIES,...]
//!   thor oo7 multi  --dir DIR --traversal NAME --clients 1,2,3 --mode private|shared
//!                   [--seconds S | --repeat R] [--server ADDR]
//!   thor oo7 penalty --dir DIR [--traversals t6,t1-,t1] [--cache-mb 256] [--over tcp|embedded]
//!                   [--runs N] [--out DIR]
//!   thor oo7 penalty --dir DIR --figures --at t6=0.25,t1=20 [--over tcp|embedded]
//!                   [--direct-reads] [--server-cache-mb M] [--runs N] [--out DIR]
//! ```
//!
//! Every command prints a readable table, or JSON with `--json`. Traversal names are those of
//! `thor_oo7::Op` (`t1`, `t1-`, `t1+`, `t2a` ... `q8`, `insert`, `delete`), plus `dynamic`
//! (the HAC paper's dynamic traversal, on a database loaded with `--modules 2`) and, for `run`
//! and `native`, `all` (the whole suite in order). Cache sizes are in MiB and cover frames and
//! tables, like the papers' "cache plus indirection table". Progress bars go to stderr.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use thor_client::PolicyConfig;
use thor_oo7::experiment::{
    Endpoint, NativeReport, NoRunTrace, PageString, PrefetchSetting, RunConfig, RunReport,
    Workload, belady_fetches, open_embedded, open_embedded_with, page_string, run as run_workload,
    run_native_on,
};
use thor_oo7::load::{LoadOptions, LoadReport, Padding, load_dir};
use thor_oo7::native::NativeDb;
use thor_oo7::traverse::Db;
use thor_oo7::{Op, Params};

use crate::plot::{ChartSpec, Legend, Series, line_chart};

/// Bytes in the MiB of `--cache-mb`.
pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// `thor oo7`.
#[derive(Debug, Args)]
pub struct Oo7Args {
    #[command(subcommand)]
    command: Oo7Command,
}

#[derive(Debug, Subcommand)]
enum Oo7Command {
    /// Generate and bulk-load an OO7 database into a new directory.
    Load(LoadArgs),
    /// Run one traversal or query (or `all`) on a database, cold or hot, and measure it.
    Run(RunArgs),
    /// Run a traversal on the native in-memory baseline built from the same seed.
    Native(NativeArgs),
    /// Run a traversal over a range of cache sizes per policy; write CSV and plots.
    Sweep(SweepArgs),
    /// The short experiment `thor demo` ends with: a small database, HAC against FPC.
    Demo(DemoArgs),
    /// Several clients at once, each with its own session and connection, traversing their
    /// own modules (private) or one module (shared); per-client and total throughput.
    Multi(crate::oo7_multi::MultiArgs),
    /// The miss penalty of cold traversals (fetches, fetch p50/p99, conversion per page,
    /// replacement per fetch) beside the loopback floor measured in the same run: 8 KiB
    /// ping-pongs over TCP and a Unix socket. Median and range over --runs.
    Penalty(crate::oo7_penalty::PenaltyArgs),
    /// OO7's two modules at two servers against both at one: cold traversals and the dynamic
    /// traversal through one client (two-phase commit where a transaction spans both).
    Cluster(crate::oo7_cluster::ClusterArgs),
    /// The QuickStore recovery study: T2A/T2B/T2C on private modules with one to five
    /// clients, in every commit mode (obj and the page-based ones) and recovery buffer size;
    /// response time, throughput and client writes per transaction.
    RecoveryStudy(crate::oo7_recovery::RecoveryArgs),
}

/// `thor oo7 demo`.
#[derive(Debug, Args)]
struct DemoArgs {
    /// Directory for the database (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The OO7 parameters: a preset and overrides of any of its fields.
#[derive(Debug, Args)]
struct ParamArgs {
    /// small, medium, large, qs-small, qs-big (the QuickStore study's) or tiny.
    #[arg(long, default_value = "small")]
    size: String,
    /// Seed of every random choice (the same seed gives the same database byte for byte).
    #[arg(long)]
    seed: Option<u64>,
    /// Modules (each a complete assembly tree with its composite parts).
    #[arg(long)]
    modules: Option<u32>,
    /// Atomic parts per composite part.
    #[arg(long)]
    atomic_per_composite: Option<u32>,
    /// Connections per atomic part (OO7's variants: 3, 6, 9).
    #[arg(long)]
    connections_per_atomic: Option<u32>,
    /// Bytes of each document.
    #[arg(long)]
    document_bytes: Option<u32>,
    /// Bytes of each manual.
    #[arg(long)]
    manual_bytes: Option<u32>,
    /// Composite parts per module.
    #[arg(long)]
    composite_per_module: Option<u32>,
    /// Children per complex assembly.
    #[arg(long)]
    assemblies_per_assembly: Option<u32>,
    /// Levels of the assembly tree.
    #[arg(long)]
    assembly_levels: Option<u32>,
    /// Composite parts per base assembly.
    #[arg(long)]
    composite_per_base: Option<u32>,
    /// Where documents go: before-parts (the spec's order) or after-connections.
    #[arg(long)]
    doc_placement: Option<String>,
}

impl ParamArgs {
    fn params(&self) -> anyhow::Result<Params> {
        let mut p = Params::preset(&self.size)?;
        let set = |f: &mut u32, v: Option<u32>| {
            if let Some(v) = v {
                *f = v;
            }
        };
        if let Some(s) = self.seed {
            p.seed = s;
        }
        set(&mut p.modules, self.modules);
        set(&mut p.atomic_per_composite, self.atomic_per_composite);
        set(&mut p.connections_per_atomic, self.connections_per_atomic);
        set(&mut p.document_bytes, self.document_bytes);
        set(&mut p.manual_bytes, self.manual_bytes);
        set(&mut p.composite_per_module, self.composite_per_module);
        set(&mut p.assemblies_per_assembly, self.assemblies_per_assembly);
        set(&mut p.assembly_levels, self.assembly_levels);
        set(&mut p.composite_per_base, self.composite_per_base);
        if let Some(d) = &self.doc_placement {
            p.doc_placement = d.parse()?;
        }
        p.validate()?;
        Ok(p)
    }
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// The new database's directory (must not hold a database).
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    params: ParamArgs,
    /// Page size in KiB (the papers use 8; 4 for the GOM comparison).
    #[arg(long, value_parser = crate::page_kb, allow_negative_numbers = true, default_value_t = 8)]
    page_kb: usize,
    /// Pad every OO7 object to GOM's size (the HAC paper's HAC-BIG): 8 bytes of header more
    /// and 8 more per reference slot, as words no program reads (`thor_oo7::schema::Padding`).
    #[arg(long)]
    pad_to_gom: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Where and how a session runs.
#[derive(Debug, Args)]
struct SessionArgs {
    /// The database directory (for the embedded server).
    #[arg(long, required_unless_present = "server")]
    dir: Option<PathBuf>,
    /// A `thor server` address instead of the embedded server.
    #[arg(long, conflicts_with = "dir")]
    server: Option<String>,
    /// The server's token.
    #[arg(long, default_value = "")]
    token: String,
    /// Replace in the foreground (HAC-FG) instead of while fetches are on the wire.
    #[arg(long)]
    foreground: bool,
    /// Seed of the operations' random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Commit after every N composite parts (0: each operation is one transaction).
    #[arg(long, default_value_t = 0)]
    commit_every: u32,
    /// Further pages to ask for with each fetch (prefetch; 0: off). Default: the session's
    /// for `run` (32 over TCP, off in process); 0 for `sweep`, whose fetch counts are set
    /// beside Belady's optimum of one page per fetch.
    #[arg(long)]
    prefetch: Option<u16>,
    /// How the server chooses prefetched pages: next (the pages after the fetched one in
    /// creation order) or refs (the pages it refers to).
    #[arg(long, default_value = "next")]
    prefetch_hint: thor_wire::PrefetchHint,
    /// Read ahead while prefetching with the hint next (true or false): ask for the pages
    /// after a reply's before the traversal needs them, overlapping their transfer with its
    /// work.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    read_ahead: bool,
}

/// Opens the OO7 database in `dir`, saying how to make one if there is none.
fn open_database(dir: &Path) -> anyhow::Result<std::sync::Arc<thor_server::Engine>> {
    Ok(open_database_with(dir, thor_server::EngineOptions::default(), false)?.0)
}

/// [`open_database`] with `opts` (the page cache's size and placement, say), and reading
/// around the OS page cache with `direct_reads`; returns the disk too, for its counters.
pub(crate) fn open_database_with(
    dir: &Path,
    opts: thor_server::EngineOptions,
    direct_reads: bool,
) -> anyhow::Result<(std::sync::Arc<thor_server::Engine>, thor_storage::FileDisk)> {
    let load = || format!("load one with `thor oo7 load --dir {}`", dir.display());
    if !dir.exists() {
        bail!("{} does not exist: {}", dir.display(), load());
    }
    match open_embedded_with(dir, opts, direct_reads) {
        Ok(e) => Ok(e),
        Err(thor_oo7::Oo7Error::Engine(thor_server::EngineError::NotADatabase)) => {
            bail!("{} holds no thor database: {}", dir.display(), load())
        }
        Err(e) => Err(e).with_context(|| format!("opening the database in {}", dir.display())),
    }
}

impl SessionArgs {
    /// The session's prefetch: `--prefetch` and `--prefetch-hint`, or `default`'s pages.
    fn prefetch_or(&self, default: PrefetchSetting) -> PrefetchSetting {
        PrefetchSetting {
            pages: self.prefetch.or(default.pages),
            hint: self.prefetch_hint,
            read_ahead: self.read_ahead,
        }
    }

    fn endpoint(&self) -> anyhow::Result<Endpoint> {
        match (&self.server, &self.dir) {
            (Some(addr), _) => {
                Ok(Endpoint::Tcp { addr: addr.clone(), token: self.token.as_bytes().to_vec() })
            }
            (None, Some(dir)) => Ok(Endpoint::Embedded(open_database(dir)?)),
            (None, None) => bail!("give --dir or --server"),
        }
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// The operation (t1, t1-, t1+, t2a, ..., q8, insert, delete, dynamic, or all).
    #[arg(long)]
    traversal: String,
    /// The client cache manager: hac or fpc.
    #[arg(long, default_value = "hac")]
    policy: String,
    /// Client cache size in MiB (frames and tables; may be fractional).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true, default_value_t = 64.0)]
    cache_mb: f64,
    /// Warm the cache with one run and measure the second.
    #[arg(long)]
    hot: bool,
    /// Write the page reference string (page,oref,measured per object access) as CSV.
    #[arg(long)]
    trace_out: Option<PathBuf>,
    /// Measured runs (after the warm-up if --hot); the report is the median run.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 1)]
    repeat: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct NativeArgs {
    #[command(flatten)]
    params: ParamArgs,
    /// The operation (as for `run`).
    #[arg(long)]
    traversal: String,
    /// Seed of the operations' random choices.
    #[arg(long, default_value_t = 1)]
    run_seed: u64,
    /// Measured runs after the warm-up; the report is the median run.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 1)]
    repeat: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SweepArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// The operation.
    #[arg(long)]
    traversal: String,
    /// Cache managers, comma-separated. A name ending in `-fg` (`hac-fg`) runs that manager
    /// with replacement in the foreground (the HAC paper's HAC-FG); the others replace while
    /// fetches are on the wire unless `--foreground` is given. With `fpc` in the list, the
    /// elapsed chart adds FPC-NO (FPC's elapsed time less its replacement and conversion, as
    /// the paper defines it); with two or more `gom:obj=F` splits, the fetches chart adds
    /// GOM-BEST (the fewest fetches of any split at each size: GOM tuned per size, as the
    /// paper's GOM figures were).
    #[arg(long, default_value = "hac,fpc")]
    policies: String,
    /// Output directory for the CSV and the plots.
    #[arg(long)]
    out: PathBuf,
    /// Cache sizes in MiB, comma-separated (default: --points sizes from --min-mb to --max-mb).
    #[arg(long, value_delimiter = ',', value_parser = crate::positive_size, allow_negative_numbers = true)]
    sizes_mb: Vec<f64>,
    /// Smallest cache of the default range.
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true, default_value_t = 0.25)]
    min_mb: f64,
    /// Largest cache of the default range (default: 1.2 times the database).
    #[arg(long, value_parser = crate::positive_size, allow_negative_numbers = true)]
    max_mb: Option<f64>,
    /// Points of the default range.
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 16)]
    points: usize,
    /// Space the default range logarithmically instead of linearly.
    #[arg(long)]
    log: bool,
    /// Measure cold runs instead of hot ones.
    #[arg(long)]
    cold: bool,
    /// Also find, per policy, the smallest cache with no misses (by bisection).
    #[arg(long)]
    find_min: bool,
    /// Leave out Belady's optimum (recording the page string costs one more run).
    #[arg(long)]
    no_belady: bool,
    /// Measured runs per point (each its own transaction, after the warm-up if hot); a point
    /// reports the run with the median elapsed time.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 1)]
    repeat: u32,
    /// A second database, the same one loaded with `--pad-to-gom` (same parameters and page
    /// size): the `--big-policies` run on it at the same sizes, each a series of its own named
    /// with `-big` (`hac-big`: the HAC paper's HAC-BIG). Belady's optimum is the first
    /// database's.
    #[arg(long, requires = "dir")]
    big_dir: Option<PathBuf>,
    /// The managers run on `--big-dir`, comma-separated. With two or more GOM splits among
    /// them, the fetches chart adds GOM-BEST-BIG (the best of them at each size).
    #[arg(long, default_value = "hac", requires = "big_dir")]
    big_policies: String,
    /// The series the charts draw, by legend name, comma-separated (`hac,hac-big,gom-best`);
    /// each chart draws those it has. Default: every series, which must then be at most 12 per
    /// chart. The CSVs and the JSON have every series either way.
    #[arg(long, value_delimiter = ',')]
    plot: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Oo7Args) -> anyhow::Result<()> {
    match args.command {
        Oo7Command::Load(a) => load(a),
        Oo7Command::Run(a) => run_cmd(a),
        Oo7Command::Native(a) => native(a),
        Oo7Command::Sweep(a) => sweep(a),
        Oo7Command::Multi(a) => crate::oo7_multi::multi(a),
        Oo7Command::Penalty(a) => crate::oo7_penalty::penalty(a),
        Oo7Command::Cluster(a) => crate::oo7_cluster::run(a),
        Oo7Command::RecoveryStudy(a) => crate::oo7_recovery::recovery_study(a),
        Oo7Command::Demo(a) => match a.dir {
            Some(d) => demo_experiments(&d),
            None => demo_experiments(tempfile::tempdir()?.path()),
        },
    }
}

/// The endpoint one sweep point runs on: `endpoint` itself, or with `fresh` (an update
/// traversal on an embedded database) a copy of its database taken now, in a scratch directory
/// that lives as long as the first element of the pair (declare it first, so that it is
/// dropped after the endpoint).
fn point_endpoint(
    endpoint: &Endpoint,
    fresh: bool,
) -> anyhow::Result<(Option<tempfile::TempDir>, Endpoint)> {
    match endpoint {
        Endpoint::Embedded(engine) if fresh => {
            let scratch = tempfile::tempdir().context("a scratch directory for the copy")?;
            let copy = scratch.path().join("db");
            engine.backup(&copy).context("copying the database for an update run")?;
            let e = Endpoint::Embedded(open_database(&copy)?);
            Ok((Some(scratch), e))
        }
        _ => Ok((None, endpoint.clone())),
    }
}

/// A progress bar on stderr.
fn progress(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {percent:>3}% {pos}/{len} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

fn params_json(p: &Params) -> serde_json::Value {
    json!({
        "atomic_per_composite": p.atomic_per_composite,
        "connections_per_atomic": p.connections_per_atomic,
        "document_bytes": p.document_bytes,
        "manual_bytes": p.manual_bytes,
        "composite_per_module": p.composite_per_module,
        "assemblies_per_assembly": p.assemblies_per_assembly,
        "assembly_levels": p.assembly_levels,
        "composite_per_base": p.composite_per_base,
        "modules": p.modules,
        "doc_placement": p.doc_placement.name(),
        "seed": p.seed,
    })
}

/// Loads a database with a progress bar; returns the report and the seconds it took.
pub fn load_with_progress(
    dir: &Path,
    p: &Params,
    page_size: usize,
    show: bool,
) -> anyhow::Result<(LoadReport, f64)> {
    load_with_options(dir, p, LoadOptions { page_size, ..LoadOptions::default() }, show)
}

/// [`load_with_progress`] with every load setting.
fn load_with_options(
    dir: &Path,
    p: &Params,
    opts: LoadOptions,
    show: bool,
) -> anyhow::Result<(LoadReport, f64)> {
    let bar = if show { progress(p.atomic_parts(), "loading") } else { ProgressBar::hidden() };
    let t = Instant::now();
    let r = load_dir(dir, p, opts, |done, _| bar.set_position(done))
        .with_context(|| format!("loading into {}", dir.display()))?;
    bar.finish_and_clear();
    Ok((r, t.elapsed().as_secs_f64()))
}

fn load(a: LoadArgs) -> anyhow::Result<()> {
    let p = a.params.params()?;
    std::fs::create_dir_all(&a.dir)?;
    let padding = if a.pad_to_gom { Padding::Gom } else { Padding::None };
    let opts = LoadOptions { page_size: a.page_kb * 1024, padding, ..LoadOptions::default() };
    let (r, secs) = load_with_options(&a.dir, &p, opts, true)?;
    if a.json {
        let counts: serde_json::Map<String, serde_json::Value> =
            r.counts.rows().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let v = json!({
            "dir": a.dir.display().to_string(),
            "size": a.params.size,
            "params": params_json(&p),
            "page_size": r.page_size,
            "padding": r.padding.name(),
            "counts": counts,
            "objects": r.counts.total(),
            "object_bytes": r.object_bytes,
            "gom_object_bytes": r.gom_object_bytes,
            "pages": r.pages + 1,
            "database_bytes": r.database_bytes(),
            "load_s": secs,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "OO7 {} database in {} (seed {}, {} KiB pages, documents {}, objects padded: {})",
        a.params.size,
        a.dir.display(),
        p.seed,
        a.page_kb,
        p.doc_placement.name(),
        r.padding.name()
    );
    println!("  {:<16} {:>12}", "class", "objects");
    for (k, v) in r.counts.rows() {
        println!("  {k:<16} {v:>12}");
    }
    println!("  {:<16} {:>12}", "total", r.counts.total());
    println!("  {:<16} {:>12}", "object bytes", r.object_bytes);
    println!(
        "  {:<16} {:>12}  (every object and reference at GOM's sizes)",
        "at GOM's sizes", r.gom_object_bytes
    );
    println!("  {:<16} {:>12}", "pages", r.pages + 1);
    println!(
        "  {:<16} {:>12}  ({:.1} MB, {:.1} MiB)",
        "database bytes",
        r.database_bytes(),
        r.database_bytes() as f64 / 1e6,
        r.database_bytes() as f64 / MIB
    );
    println!("  {:<16} {:>12.2} s", "load time", secs);
    Ok(())
}

/// The operations a traversal argument names.
fn workloads(name: &str) -> anyhow::Result<Vec<Workload>> {
    if name.eq_ignore_ascii_case("all") {
        return Ok(Op::ALL.iter().map(|&o| Workload::Op(o)).collect());
    }
    Ok(vec![name.parse::<Workload>()?])
}

/// The policy a name names, with a clear message for one not built yet.
pub fn policy(name: &str) -> anyhow::Result<PolicyConfig> {
    name.parse::<PolicyConfig>().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The CSV writer of `--trace-out`: the first write error is kept and reported at the end.
struct TraceOut {
    /// The file, through a 1 MiB buffer.
    out: std::io::BufWriter<std::fs::File>,
    /// The first write error.
    err: Option<std::io::Error>,
    /// Lines written.
    lines: u64,
}

impl TraceOut {
    fn create(path: &Path) -> anyhow::Result<TraceOut> {
        let f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
        writeln!(out, "page,oref,measured")?;
        Ok(TraceOut { out, err: None, lines: 0 })
    }

    fn record(&mut self, oref: Option<thor_core::Oref>, measured: bool) {
        let Some(o) = oref else { return };
        if self.err.is_none() {
            if let Err(e) =
                writeln!(self.out, "{},{},{}", o.page_raw(), o.raw(), u8::from(measured))
            {
                self.err = Some(e);
            }
            self.lines += 1;
        }
    }

    fn finish(mut self) -> anyhow::Result<u64> {
        if let Some(e) = self.err {
            return Err(e.into());
        }
        self.out.flush()?;
        Ok(self.lines)
    }
}

fn run_cmd(a: RunArgs) -> anyhow::Result<()> {
    let endpoint = a.session.endpoint()?;
    let policy = policy(&a.policy)?;
    let cache_bytes = (a.cache_mb * MIB) as usize;
    let mut trace = a.trace_out.as_deref().map(TraceOut::create).transpose()?;
    let mut reports = Vec::new();
    for w in workloads(&a.traversal)? {
        let cfg = RunConfig {
            workload: w,
            policy,
            cache_bytes,
            hot: a.hot,
            seed: a.session.seed,
            background_replacement: !a.session.foreground,
            repeat: a.repeat,
            commit_every: a.session.commit_every,
            prefetch: a.session.prefetch_or(PrefetchSetting::default()),
        };
        // Without --trace-out the run is compiled with no tracing code at all.
        let r = match trace.as_mut() {
            Some(t) => run_workload(&endpoint, &cfg, |o, m| t.record(o, m)),
            None => run_workload(&endpoint, &cfg, NoRunTrace),
        }
        .with_context(|| format!("running {}", w.name()))?;
        reports.push(r);
    }
    let traced = trace.map(TraceOut::finish).transpose()?;
    if a.json {
        let v = if reports.len() == 1 { json!(reports[0]) } else { json!(reports) };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", run_table(&reports));
    }
    if let (Some(n), Some(p)) = (traced, &a.trace_out) {
        eprintln!("wrote {n} object accesses to {}", p.display());
    }
    Ok(())
}

/// A table of run reports.
pub fn run_table(rs: &[RunReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<9} {:<6} {:>9} {:>4} {:>9} {:>9} {:>17} {:>9} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "traversal",
        "policy",
        "cache MiB",
        "hot",
        "fetches",
        "prefetch",
        "prefetched/used",
        "parts",
        "updates",
        "result",
        "elapsed s",
        "commit s",
        "repl s",
        "conv s",
        "cpu s"
    );
    for r in rs {
        let _ = writeln!(
            s,
            "{:<9} {:<6} {:>9.2} {:>4} {:>9} {:>9} {:>17} {:>9} {:>8} {:>10} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>9}",
            r.traversal,
            r.policy,
            r.cache_bytes as f64 / MIB,
            if r.hot { "yes" } else { "no" },
            r.fetches,
            r.prefetch.label(),
            format!("{}/{}", r.pages_prefetched, r.prefetch_used),
            r.parts_visited,
            r.updates,
            r.result,
            r.elapsed_s,
            r.commit_s,
            r.replacement_s,
            r.conversion_s,
            r.cpu_s.map_or_else(|| "-".to_string(), |c| format!("{c:.4}"))
        );
    }
    s
}

fn native(a: NativeArgs) -> anyhow::Result<()> {
    let p = a.params.params()?;
    let bar = progress(p.atomic_parts(), "generating");
    let t = Instant::now();
    let mut db = NativeDb::generate(&p, |d| bar.set_position(d))?;
    bar.finish_and_clear();
    let gen_s = t.elapsed().as_secs_f64();
    let mut reports: Vec<NativeReport> = Vec::new();
    for w in workloads(&a.traversal)? {
        reports.push(run_native_on(&mut db, w, a.run_seed, a.repeat, gen_s)?);
    }
    if a.json {
        let v = if reports.len() == 1 { json!(reports[0]) } else { json!(reports) };
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "native baseline, {} database (seed {}), built in {gen_s:.2} s; hot runs:",
        a.params.size, p.seed
    );
    println!(
        "{:<9} {:>9} {:>8} {:>10} {:>12}",
        "traversal", "parts", "updates", "result", "elapsed s"
    );
    for r in &reports {
        println!(
            "{:<9} {:>9} {:>8} {:>10} {:>12.6} {:>12}",
            r.traversal,
            r.parts_visited,
            r.updates,
            r.result,
            r.elapsed_s,
            r.cpu_s.map_or_else(|| "-".to_string(), |c| format!("{c:.6}"))
        );
    }
    Ok(())
}

/// One point of a sweep.
#[derive(Debug, Clone, Serialize)]
struct Point {
    /// The cache size asked for, in MiB.
    cache_mb: f64,
    /// The run.
    #[serde(flatten)]
    report: RunReport,
}

/// Belady's optimum at one size of a sweep: the fewest fetches any page cache with the frames
/// the sweep's page caches had there.
#[derive(Debug, Clone, Serialize)]
struct BeladyPoint {
    /// The cache size asked for, in MiB.
    cache_mb: f64,
    /// Frames of the optimal cache: the most any page-caching manager of the sweep had at this
    /// size after its tables (so the count is a floor under each of them), or, with none in the
    /// sweep, the budget in whole pages (a floor under any page cache of this budget).
    frames: usize,
    /// Its fetches.
    fetches: u64,
}

/// Whether a manager caches whole pages (Belady's optimum is a floor under its fetches).
fn pages_only(p: &PolicyConfig) -> bool {
    matches!(p, PolicyConfig::Fpc | PolicyConfig::Paged(_))
}

/// The smallest cache without misses found for a policy.
#[derive(Debug, Clone, Serialize)]
struct MinCache {
    /// The cache manager.
    policy: String,
    /// None: even the largest size tried misses.
    min_cache_bytes: Option<usize>,
    /// The same in MiB.
    min_cache_mb: Option<f64>,
    /// Runs the bisection took.
    probes: usize,
}

/// The database's size in bytes (for the default sweep range).
fn database_bytes(e: &Endpoint) -> Option<u64> {
    match e {
        Endpoint::Embedded(h) => {
            let st = h.stats();
            Some(u64::from(st.pages_allocated) * h.page_size() as u64)
        }
        Endpoint::Tcp { .. } => None,
    }
}

/// The server's page size (8 KiB, thor's default, for a remote server).
fn endpoint_page_size(e: &Endpoint) -> usize {
    match e {
        Endpoint::Embedded(h) => h.page_size(),
        Endpoint::Tcp { .. } => thor_core::limits::PAGE_SIZE_DEFAULT,
    }
}

/// A file-name-safe version of an operation name.
pub fn file_stem(name: &str) -> String {
    name.replace('-', "minus").replace('+', "plus")
}

/// What a sweep's JSON says of a database: its pages and bytes (allocated pages times the page
/// size; none for a remote server) and its objects' padding.
fn database_json(e: &Endpoint, padding: Padding) -> serde_json::Value {
    let bytes = database_bytes(e);
    json!({
        "pages": bytes.map(|b| b / endpoint_page_size(e) as u64),
        "bytes": bytes,
        "padding": padding.name(),
    })
}

/// The parameters and padding of the OO7 database at `e`, read by a short session.
fn database_layout(e: &Endpoint) -> anyhow::Result<(Params, Padding)> {
    let cfg = thor_client::SessionConfig { cache_bytes: 4 << 20, ..Default::default() };
    let s = thor_oo7::experiment::connect(e, cfg)?;
    let db = Db::open(&s)?;
    Ok((*db.params(), db.padding()))
}

/// Opens `--big-dir` and checks that it is the sweep's database padded to GOM's sizes: the
/// same parameters and page size, the objects padded (and the first database's not). Returns
/// it with its layout's padding.
fn big_endpoint(main: &Endpoint, dir: &Path) -> anyhow::Result<Endpoint> {
    let big = Endpoint::Embedded(open_database(dir)?);
    let (p, padding) = database_layout(main)?;
    let (bp, bpadding) = database_layout(&big)?;
    let shown = dir.display();
    if bpadding != Padding::Gom {
        bail!("{shown} is not padded to GOM's sizes: load it with `thor oo7 load --pad-to-gom`");
    }
    if padding != Padding::None {
        bail!("the --dir database is padded too: give the unpadded one");
    }
    if bp != p || endpoint_page_size(&big) != endpoint_page_size(main) {
        bail!(
            "{shown} was loaded with other parameters or another page size than the --dir \
             database: load both with the same `--size`, settings and `--page-kb`"
        );
    }
    Ok(big)
}

fn sweep(a: SweepArgs) -> anyhow::Result<()> {
    let endpoint = a.session.endpoint()?;
    let workload: Workload = a.traversal.parse()?;
    let big = a.big_dir.as_deref().map(|d| big_endpoint(&endpoint, d)).transpose()?;
    let policies = sweep_series(&a, big.is_some())?;
    // The database a series runs on.
    let on = |sp: &SeriesSpec| match (&big, sp.big) {
        (Some(b), true) => b,
        _ => &endpoint,
    };
    let names: Vec<&str> = policies.iter().map(|sp| sp.name.as_str()).collect();
    // Which series each chart draws, checked before anything runs.
    let plot: Vec<String> = a.plot.iter().map(|n| n.trim().to_uppercase()).collect();
    let drawn = chart_series(&names, !a.no_belady, &plot)?;
    let sizes = sweep_sizes(&a, &endpoint)?;
    std::fs::create_dir_all(&a.out)?;
    let page_size = endpoint_page_size(&endpoint);
    let hot = !a.cold;
    let cfg = |policy, cache_bytes, foreground: bool| RunConfig {
        workload,
        policy,
        cache_bytes,
        hot,
        seed: a.session.seed,
        background_replacement: !(a.session.foreground || foreground),
        repeat: a.repeat,
        commit_every: a.session.commit_every,
        prefetch: a.session.prefetch_or(PrefetchSetting::OFF),
    };
    // An update traversal changes its database: every point (and Belady's recording) runs on a
    // fresh copy of an embedded one; a server's cannot be copied, and the output says so.
    let writes = matches!(workload, Workload::Op(op) if op.writes());
    let fresh = writes && matches!(endpoint, Endpoint::Embedded(_));
    let (points, series_of) = sweep_points(&policies, &sizes, on, cfg, fresh, workload)?;
    let belady = if a.no_belady {
        Vec::new()
    } else {
        // The traversal's page visits do not depend on the cache: one recording serves all.
        let max_mb = sizes.iter().cloned().fold(0.0, f64::max);
        let (_scratch, e) = point_endpoint(&endpoint, fresh)?;
        let string = page_string(&e, &cfg(PolicyConfig::Fpc, (max_mb * MIB) as usize, false))
            .context("recording the page string")?;
        let paged = |mb: f64| {
            points
                .iter()
                .zip(&series_of)
                .filter(|(p, k)| {
                    p.cache_mb == mb && pages_only(&policies[**k].policy) && !policies[**k].big
                })
                .map(|(p, _)| p.report.usable_frames)
                .max()
        };
        belady_sweep(&string, &sizes, page_size, paged, workload, &a.out)?
    };
    let stem = file_stem(workload.name());
    let csv = a.out.join(format!("{stem}.csv"));
    write_csv(&csv, &points)?;
    let series_names: Vec<String> = series_of.iter().map(|&k| policies[k].name.clone()).collect();
    let plotted = plotted_series(&names, &series_names, &points, &belady);
    let kind = if hot { "hot" } else { "cold" };
    let title = format!(
        "{kind} {} traversal, {} KiB pages",
        workload.name().to_uppercase(),
        page_size / 1024
    );
    let (charts, derived) = sweep_charts(&plotted, &drawn, &a.out, &stem, &title)?;
    let mins = if a.find_min {
        let max_mb = sizes.iter().cloned().fold(0.0, f64::max);
        let mins = sweep_mins(&policies, on, cfg, fresh, max_mb, page_size)?;
        let path = a.out.join(format!("{stem}-min.json"));
        std::fs::write(path, serde_json::to_string_pretty(&mins)?)?;
        mins
    } else {
        Vec::new()
    };
    let changed = (writes && !fresh).then(|| changed_note(workload));
    let outcome = SweepOutcome {
        workload,
        endpoint: &endpoint,
        big: big.as_ref(),
        points: &points,
        belady: &belady,
        mins: &mins,
        sizes: &sizes,
        fresh,
        changed: changed.as_deref(),
        csv: &csv,
        charts: &charts,
    };
    let v = sweep_json(&outcome, &a, page_size, derived);
    let json_path = a.out.join(format!("{stem}.json"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&v)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_sweep(&outcome);
    }
    Ok(())
}

/// Runs every series of a sweep at every size (`on`: the database a series runs on; `cfg`: a
/// run's configuration from its policy, cache bytes and foreground replacement). Returns the
/// points and, for each, its series (its index in `policies`).
fn sweep_points<'e>(
    policies: &[SeriesSpec],
    sizes: &[f64],
    on: impl Fn(&SeriesSpec) -> &'e Endpoint,
    cfg: impl Fn(PolicyConfig, usize, bool) -> RunConfig,
    fresh: bool,
    workload: Workload,
) -> anyhow::Result<(Vec<Point>, Vec<usize>)> {
    let bar = progress((sizes.len() * policies.len()) as u64, "sweeping");
    let mut points: Vec<Point> = Vec::new();
    // The series each point belongs to (its index in `policies`).
    let mut series_of: Vec<usize> = Vec::new();
    for (k, sp) in policies.iter().enumerate() {
        for &mb in sizes {
            let (_scratch, e) = point_endpoint(on(sp), fresh)?;
            let mut r = run_workload(&e, &cfg(sp.policy, (mb * MIB) as usize, sp.fg), NoRunTrace)
                .with_context(|| format!("{} at {mb} MiB", workload.name()))?;
            if sp.fg {
                // The report names the configuration; the replacement mode is part of it here.
                r.policy = format!("{}-fg", r.policy);
            }
            if sp.big {
                // And so is the database.
                r.policy = format!("{}{BIG_SUFFIX}", r.policy);
            }
            points.push(Point { cache_mb: mb, report: r });
            series_of.push(k);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok((points, series_of))
}

/// `--find-min`: for each series, the smallest cache (up to `max_mb`) at which a traversal
/// misses nothing, by bisection.
fn sweep_mins<'e>(
    policies: &[SeriesSpec],
    on: impl Fn(&SeriesSpec) -> &'e Endpoint,
    cfg: impl Fn(PolicyConfig, usize, bool) -> RunConfig,
    fresh: bool,
    max_mb: f64,
    page_size: usize,
) -> anyhow::Result<Vec<MinCache>> {
    let max_bytes = (max_mb * MIB) as usize;
    let bar = progress(policies.len() as u64, "bisecting");
    let mut mins = Vec::new();
    for sp in policies {
        // An update traversal's bisection runs on one fresh copy per policy: its probes see
        // the updates of the probes before them.
        let (_scratch, e) = point_endpoint(on(sp), fresh)?;
        mins.push(find_min(&e, |b| cfg(sp.policy, b, sp.fg), &sp.name, max_bytes, page_size)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(mins)
}

/// What a sweep says of an update traversal run on a server, whose database it cannot copy.
fn changed_note(workload: Workload) -> String {
    format!(
        "{} changes the database and the server's could not be copied: each point ran on the \
         database the points before it left",
        workload.name()
    )
}

/// The series of a sweep: its `--policies`, then (with a `--big-dir` database) its
/// `--big-policies`.
fn sweep_series(a: &SweepArgs, big: bool) -> anyhow::Result<Vec<SeriesSpec>> {
    let mut policies: Vec<SeriesSpec> = a
        .policies
        .split(',')
        .map(|p| SeriesSpec::parse(p.trim(), false))
        .collect::<anyhow::Result<_>>()?;
    if big {
        for p in a.big_policies.split(',') {
            policies.push(SeriesSpec::parse(p.trim(), true)?);
        }
    }
    Ok(policies)
}

/// The cache sizes of a sweep, in MiB: `--sizes-mb`, or `--points` spaced from `--min-mb` to
/// `--max-mb` (default: 1.2 times the database's size, known for an embedded one).
fn sweep_sizes(a: &SweepArgs, endpoint: &Endpoint) -> anyhow::Result<Vec<f64>> {
    if !a.sizes_mb.is_empty() {
        return Ok(a.sizes_mb.clone());
    }
    let max = match a.max_mb {
        Some(m) => m,
        None => database_bytes(endpoint)
            .map(|b| 1.2 * b as f64 / MIB)
            .context("give --max-mb for a remote server")?,
    };
    spaced(a.min_mb, max, a.points, a.log)
}

/// A sweep's charts: for fetches and elapsed time, every series as `OUT/<stem>-<what>.csv`,
/// and the series `--plot` draws (`drawn`: fetches', elapsed time's) as a chart titled
/// `title: <what> against client cache size`. Returns the chart files and the derived series' points (for the JSON).
fn sweep_charts(
    plotted: &Plotted,
    drawn: &(Vec<String>, Vec<String>),
    out: &Path,
    stem: &str,
    title: &str,
) -> anyhow::Result<(Vec<PathBuf>, serde_json::Map<String, serde_json::Value>)> {
    let mut charts = Vec::new();
    let mut derived = serde_json::Map::new();
    for (what, y_label, all, draw) in [
        ("fetches", "fetches", &plotted.fetches, &drawn.0),
        ("elapsed", "elapsed time (s, without commit)", &plotted.elapsed, &drawn.1),
    ] {
        let path = out.join(format!("{stem}-{what}.csv"));
        let mut s = format!("series,cache_mb,{what}\n");
        for (name, pts) in all {
            for (x, y) in pts {
                let _ = writeln!(s, "{name},{x},{y}");
            }
        }
        std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))?;
        for (name, pts) in all.iter().filter(|(n, _)| plotted.derived.contains(n)) {
            derived.insert(format!("{name} {what}"), json!(pts));
        }
        let series: Vec<Series> = all
            .iter()
            .filter(|(name, _)| draw.contains(name))
            .map(|(name, pts)| Series::line(name.clone(), pts.clone()))
            .collect();
        if series.is_empty() {
            // `--plot` named none of this chart's series.
            continue;
        }
        let spec = ChartSpec {
            title: format!("{title}: {what} against client cache size"),
            x_label: "client cache size, frames and tables (MiB)".into(),
            y_label: y_label.into(),
            legend: Legend::UpperRight,
            ..ChartSpec::default()
        };
        charts.extend(line_chart(&out.join(format!("{stem}-{what}")), &spec, &series)?);
    }
    Ok((charts, derived))
}

/// Belady's fetches at each size of a sweep, from one recorded page string, written to
/// `OUT/<traversal>-belady.csv`. `paged(mb)`: the frames the page-based series had at `mb`, if
/// any ran (else the size in whole pages).
fn belady_sweep(
    string: &PageString,
    sizes: &[f64],
    page_size: usize,
    paged: impl Fn(f64) -> Option<usize>,
    workload: Workload,
    out: &Path,
) -> anyhow::Result<Vec<BeladyPoint>> {
    let mut belady = Vec::new();
    for &mb in sizes {
        let frames = paged(mb).unwrap_or((mb * MIB) as usize / page_size);
        belady.push(BeladyPoint { cache_mb: mb, frames, fetches: belady_fetches(string, frames) });
    }
    let path = out.join(format!("{}-belady.csv", file_stem(workload.name())));
    let mut s = String::from("traversal,cache_mb,frames,fetches\n");
    for b in &belady {
        let _ = writeln!(s, "{},{},{},{}", workload.name(), b.cache_mb, b.frames, b.fetches);
    }
    std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))?;
    Ok(belady)
}

/// What a sweep found, for [`print_sweep`].
struct SweepOutcome<'a> {
    workload: Workload,
    endpoint: &'a Endpoint,
    big: Option<&'a Endpoint>,
    points: &'a [Point],
    belady: &'a [BeladyPoint],
    mins: &'a [MinCache],
    sizes: &'a [f64],
    fresh: bool,
    changed: Option<&'a str>,
    csv: &'a Path,
    charts: &'a [PathBuf],
}

/// A sweep's outcome as one JSON document (written to `OUT/<stem>.json`, and printed with
/// `--json`).
fn sweep_json(
    o: &SweepOutcome<'_>,
    a: &SweepArgs,
    page_size: usize,
    derived: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    let databases = json!({
        "database": database_json(o.endpoint, Padding::None),
        "big_database": o.big.map(|b| {
            let mut v = database_json(b, Padding::Gom);
            v["dir"] = json!(a.big_dir.as_ref().map(|d| d.display().to_string()));
            v
        }),
    });
    let charts: Vec<String> = o.charts.iter().map(|c| c.display().to_string()).collect();
    json!({ "traversal": o.workload.name(), "hot": !a.cold, "repeat": a.repeat,
        "page_bytes": page_size, "fresh_copies": o.fresh, "database_changed": o.changed,
        "databases": databases,
        "points": o.points, "belady": o.belady, "derived": derived, "min_cache": o.mins,
        "csv": o.csv.display().to_string(), "charts": charts })
}

/// A sweep's outcome as text on stdout: the runs' table, then the notes, Belady's fetches, the
/// smallest caches and the files written.
fn print_sweep(o: &SweepOutcome<'_>) {
    let SweepOutcome {
        workload,
        endpoint,
        big,
        points,
        belady,
        mins,
        sizes,
        fresh,
        changed,
        csv,
        charts,
    } = *o;
    let reports: Vec<RunReport> = points.iter().map(|p| p.report.clone()).collect();
    print!("{}", run_table(&reports));
    if fresh {
        println!(
            "every point ran on a fresh copy of the database ({} updates it)",
            workload.name()
        );
    }
    if let Some(c) = changed {
        println!("note: {c}");
    }
    for b in belady {
        println!("belady at {} MiB: {} fetches with {} frames", b.cache_mb, b.fetches, b.frames);
    }
    if let Some(b) = big {
        let size = |e: &Endpoint| database_bytes(e).map_or("?".into(), |n| n.to_string());
        println!(
            "the -big series ran on the database padded to GOM's sizes: {} bytes, against {}",
            size(b),
            size(endpoint)
        );
    }
    for m in mins {
        match m.min_cache_mb {
            Some(mb) => println!(
                "smallest cache without misses, {}: {mb:.3} MiB ({} probes)",
                m.policy, m.probes
            ),
            None => println!(
                "smallest cache without misses, {}: above {max:.1} MiB",
                m.policy,
                max = sizes.iter().cloned().fold(0.0, f64::max)
            ),
        }
    }
    if mins.len() == 2
        && let (Some(x), Some(y)) = (mins[0].min_cache_bytes, mins[1].min_cache_bytes)
    {
        println!("ratio {} / {}: {:.2}", mins[1].policy, mins[0].policy, y as f64 / x as f64);
    }
    println!(
        "wrote {} and {}",
        csv.display(),
        charts.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    );
}

/// What a series run on the `--big-dir` database has appended to its name.
const BIG_SUFFIX: &str = "-big";

/// One series of a sweep: a `--policies` entry, or a `--big-policies` one.
#[derive(Debug, Clone)]
struct SeriesSpec {
    /// The series name: the entry as given (settings included), with [`BIG_SUFFIX`] for the
    /// big database.
    name: String,
    /// The manager.
    policy: PolicyConfig,
    /// Whether it replaces in the foreground (an entry ending in `-fg`).
    fg: bool,
    /// Whether it runs on the `--big-dir` database.
    big: bool,
}

impl SeriesSpec {
    /// A `--policies` entry (`big` false) or a `--big-policies` one.
    fn parse(entry: &str, big: bool) -> anyhow::Result<SeriesSpec> {
        let (policy, fg) = match entry.strip_suffix("-fg") {
            Some(base) => (policy(base)?, true),
            None => (policy(entry)?, false),
        };
        let name = if big { format!("{entry}{BIG_SUFFIX}") } else { entry.to_string() };
        Ok(SeriesSpec { name, policy, fg, big })
    }
}

/// The series derived from others that a sweep of the series `names` has: for the fetches
/// chart GOM-BEST (two or more GOM splits on the first database), GOM-BEST-BIG (on the big one)
/// and BELADY (unless left out), for the elapsed chart FPC-NO (with FPC).
fn derived_series(names: &[&str], belady: bool) -> (Vec<String>, Vec<String>) {
    let mut fetches = Vec::new();
    for big in [false, true] {
        let goms = names.iter().filter(|n| n.starts_with("gom") && n.ends_with(BIG_SUFFIX) == big);
        if goms.count() >= 2 {
            let suffix = if big { BIG_SUFFIX } else { "" };
            fetches.push(format!("GOM-BEST{}", suffix.to_uppercase()));
        }
    }
    if belady {
        fetches.push("BELADY".to_string());
    }
    let elapsed = if names.contains(&"fpc") { vec!["FPC-NO".to_string()] } else { vec![] };
    (fetches, elapsed)
}

/// The legend names the fetches and the elapsed chart draw: those `plot` names (upper case),
/// or every series with `plot` empty. Fails on a name no chart has, and on a chart of more
/// series than one can take.
fn chart_series(
    names: &[&str],
    belady: bool,
    plot: &[String],
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (dfetches, delapsed) = derived_series(names, belady);
    let upper: Vec<String> = names.iter().map(|n| n.to_uppercase()).collect();
    let fetches: Vec<String> = upper.iter().cloned().chain(dfetches).collect();
    let elapsed: Vec<String> = upper.into_iter().chain(delapsed).collect();
    if let Some(p) = plot.iter().find(|p| !fetches.contains(p) && !elapsed.contains(p)) {
        bail!("--plot {p}: no such series (the charts have {})", fetches.join(", "));
    }
    let mut out = Vec::new();
    for (chart, all) in [("fetches", fetches), ("elapsed", elapsed)] {
        let drawn: Vec<String> =
            all.into_iter().filter(|n| plot.is_empty() || plot.contains(n)).collect();
        if drawn.len() > crate::plot::MAX_SERIES {
            bail!(
                "the {chart} chart would draw {} series, more than {}: choose some with --plot \
                 (the CSVs and the JSON keep every series)",
                drawn.len(),
                crate::plot::MAX_SERIES
            );
        }
        out.push(drawn);
    }
    let elapsed = out.pop().expect("two charts");
    Ok((out.pop().expect("two charts"), elapsed))
}

/// The series a sweep plots, as (legend name, points), in legend order.
struct Plotted {
    /// Fetches against cache size: every series, then GOM-BEST, GOM-BEST-BIG and BELADY if
    /// present.
    fetches: Vec<(String, Vec<(f64, f64)>)>,
    /// Elapsed time against cache size: every series, then FPC-NO if FPC ran.
    elapsed: Vec<(String, Vec<(f64, f64)>)>,
    /// Names of the series computed from others (not run themselves).
    derived: Vec<String>,
}

/// The plotted series of a sweep's points: one per `--policies` entry, and the derived ones.
/// FPC-NO is FPC's elapsed time less its replacement and conversion times (the HAC paper's
/// "unrealistic system that incurs no overheads", section 4.3); GOM-BEST is, at each size, the
/// fewest fetches of any GOM split run (a split tuned per size, as the paper's GOM figures
/// were tuned by hand).
fn plotted_series(
    names: &[&str],
    series_of: &[String],
    points: &[Point],
    belady: &[BeladyPoint],
) -> Plotted {
    let of = |name: &str, get: &dyn Fn(&RunReport) -> f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .zip(series_of)
            .filter(|(_, s)| *s == name)
            .map(|(p, _)| (p.cache_mb, get(&p.report)))
            .collect()
    };
    let mut fetches: Vec<(String, Vec<(f64, f64)>)> =
        names.iter().map(|n| (n.to_uppercase(), of(n, &|r| r.fetches as f64))).collect();
    let mut elapsed: Vec<(String, Vec<(f64, f64)>)> =
        names.iter().map(|n| (n.to_uppercase(), of(n, &|r| r.elapsed_s))).collect();
    let mut derived = Vec::new();
    // GOM-BEST tunes the split per size over the first database's GOM series, GOM-BEST-BIG
    // over the big database's (the paper's GOM, whose objects were GOM's size).
    let (dfetches, _) = derived_series(names, false);
    for (suffix, big) in [("", false), (BIG_SUFFIX, true)] {
        let name = format!("GOM-BEST{}", suffix.to_uppercase());
        if !dfetches.contains(&name) {
            continue;
        }
        let mut best: Vec<(f64, f64)> = Vec::new();
        let goms = names.iter().filter(|n| n.starts_with("gom") && n.ends_with(BIG_SUFFIX) == big);
        for g in goms {
            for (x, y) in of(g, &|r| r.fetches as f64) {
                match best.iter_mut().find(|(bx, _)| *bx == x) {
                    Some(b) => b.1 = b.1.min(y),
                    None => best.push((x, y)),
                }
            }
        }
        best.sort_by(|a, b| a.0.total_cmp(&b.0));
        fetches.push((name.clone(), best));
        derived.push(name);
    }
    if !belady.is_empty() {
        fetches.push((
            "BELADY".into(),
            belady.iter().map(|b| (b.cache_mb, b.fetches as f64)).collect(),
        ));
        derived.push("BELADY".to_string());
    }
    if names.contains(&"fpc") {
        let no = of("fpc", &|r| (r.elapsed_s - r.replacement_s - r.conversion_s).max(0.0));
        elapsed.push(("FPC-NO".into(), no));
        derived.push("FPC-NO".to_string());
    }
    Plotted { fetches, elapsed, derived }
}

/// `points` sizes from `lo` to `hi` MiB, linearly or logarithmically spaced.
fn spaced(lo: f64, hi: f64, points: usize, log: bool) -> anyhow::Result<Vec<f64>> {
    if !(lo > 0.0 && hi > lo && points >= 2) {
        bail!("the range needs 0 < --min-mb < --max-mb and at least 2 points");
    }
    Ok((0..points)
        .map(|i| {
            let f = i as f64 / (points - 1) as f64;
            let v = if log { lo * (hi / lo).powf(f) } else { lo + (hi - lo) * f };
            (v * 1000.0).round() / 1000.0
        })
        .collect())
}

/// The smallest cache (to 1%, in whole pages) whose hot run has no fetches, by bisection
/// between a cache of a few pages and `max_bytes`. Assumes misses do not grow with the cache.
fn find_min(
    e: &Endpoint,
    cfg: impl Fn(usize) -> RunConfig,
    policy: &str,
    max_bytes: usize,
    page: usize,
) -> anyhow::Result<MinCache> {
    let mut probes = 0;
    let mut misses = |bytes: usize| -> anyhow::Result<bool> {
        probes += 1;
        Ok(run_workload(e, &cfg(bytes), NoRunTrace)?.fetches > 0)
    };
    let mut hi = max_bytes.max(8 * page);
    if misses(hi)? {
        return Ok(MinCache {
            policy: policy.into(),
            min_cache_bytes: None,
            min_cache_mb: None,
            probes,
        });
    }
    let mut lo = 4 * page;
    // Invariant: `hi` runs without misses; `lo` misses (or is the smallest cache possible).
    while hi - lo > (hi / 100).max(page) {
        let mid = (lo + (hi - lo) / 2) / page * page;
        let mid = mid.max(lo + page);
        match run_or_too_small(&mut misses, mid)? {
            true => lo = mid,
            false => hi = mid,
        }
    }
    Ok(MinCache {
        policy: policy.into(),
        min_cache_bytes: Some(hi),
        min_cache_mb: Some(hi as f64 / MIB),
        probes,
    })
}

/// A probe that counts a cache too small to run at all as one with misses.
fn run_or_too_small(
    misses: &mut impl FnMut(usize) -> anyhow::Result<bool>,
    bytes: usize,
) -> anyhow::Result<bool> {
    match misses(bytes) {
        Ok(m) => Ok(m),
        Err(e) if format!("{e:#}").contains("cache") => Ok(true),
        Err(e) => Err(e),
    }
}

fn write_csv(path: &Path, points: &[Point]) -> anyhow::Result<()> {
    let mut s = String::from(
        "traversal,policy,cache_mb,cache_bytes,hot,fetches,parts_visited,elapsed_s,commit_s,fetch_s,replacement_s,conversion_s,objects_installed,frames_evicted,frames_compacted,objects_kept,entries,memory_bytes,table_bytes\n",
    );
    for p in points {
        let r = &p.report;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{},{},{},{},{}",
            r.traversal,
            r.policy,
            p.cache_mb,
            r.cache_bytes,
            r.hot,
            r.fetches,
            r.parts_visited,
            r.elapsed_s,
            r.commit_s,
            r.fetch_s,
            r.replacement_s,
            r.conversion_s,
            r.objects_installed,
            r.frames_evicted,
            r.frames_compacted,
            r.objects_kept,
            r.entries,
            r.memory_bytes,
            r.table_bytes
        );
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// Composite parts per transaction in the demo's traversals. A read-only commit costs the
/// server a log write today, and one transaction per traversal would make the read set (which
/// holds cache entries until the commit) fill the demo's small caches.
const DEMO_COMMIT_EVERY: u32 = 25;

/// The short OO7 experiment at the end of `thor demo`: a small database in `dir`, hot T6, T1-
/// and T1 at three cache sizes under each cache manager built, and the fetch table.
pub fn demo_experiments(dir: &Path) -> anyhow::Result<()> {
    let p = Params::small();
    let db_dir = dir.join("oo7-small");
    std::fs::create_dir_all(&db_dir)?;
    let (r, secs) = load_with_progress(&db_dir, &p, thor_core::limits::PAGE_SIZE_DEFAULT, false)?;
    println!(
        "\nOO7: loaded the small database ({} objects, {:.1} MB in {} pages) in {secs:.2} s",
        r.counts.total(),
        r.database_bytes() as f64 / 1e6,
        r.pages + 1
    );
    let e = Endpoint::Embedded(open_embedded(&db_dir)?);
    let mut policies = vec![("fpc", PolicyConfig::Fpc)];
    let hac = "hac".parse::<PolicyConfig>().ok();
    if let Some(h) = hac {
        policies.insert(0, ("hac", h));
    }
    let sizes_mb = [0.5, 1.0, 2.0, 4.0];
    println!("hot traversals, fetches per cache size (frames and tables):");
    let mut header = format!("  {:<10}", "traversal");
    for mb in sizes_mb {
        for (name, _) in &policies {
            let _ = write!(header, " {:>11}", format!("{name} {mb}M"));
        }
    }
    println!("{header}");
    let t = Instant::now();
    for op in [Op::T6, Op::T1Minus, Op::T1] {
        let mut line = format!("  {:<10}", op.name());
        for mb in sizes_mb {
            for (_, pc) in &policies {
                let cfg = RunConfig {
                    workload: Workload::Op(op),
                    policy: *pc,
                    cache_bytes: (mb * MIB) as usize,
                    hot: true,
                    seed: 1,
                    background_replacement: true,
                    repeat: 1,
                    commit_every: DEMO_COMMIT_EVERY,
                    prefetch: PrefetchSetting::default(),
                };
                let r = run_workload(&e, &cfg, NoRunTrace)?;
                let _ = write!(line, " {:>11}", r.fetches);
            }
        }
        println!("{line}");
    }
    if hac.is_none() {
        println!("  (HAC is not built yet: FPC only)");
    }
    println!(
        "  ({} runs in {:.2} s)",
        3 * sizes_mb.len() * policies.len(),
        t.elapsed().as_secs_f64()
    );
    println!(
        "  Fewer fetches is better. T6 uses few objects of the pages it reads: HAC keeps just\n  \
         those (compacting the frames) where FPC must keep whole pages, so HAC fetches far less.\n  \
         T1 uses most of every page it reads, leaving HAC little to drop: its lead shrinks, and\n  \
         in the smallest cache it can fetch a little more than FPC."
    );
    Ok(())
}
