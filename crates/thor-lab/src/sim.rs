//! `thor sim`: the cache-hierarchy simulator (`thor-cachesim`) on the command line.
//!
//! ```text
//!   thor sim demote --table2          the paper's Table 2, both cost models, beside the paper
//!   thor sim demote [workload]        the eight designs (or --designs) on one workload
//!   thor sim bandwidth                the section-5 sweep and the crossover, RANDOM and ZIPF
//!   thor sim calibrate                fit the calibrated cost model to Table 2, show the fit
//!   thor sim stack [workload]         LRU stack depths and the section-3 prediction
//!   thor sim gen [workload] --out F   write a generated workload as a CSV block trace
//!   thor sim speed [workload]         simulated requests per second per design
//! ```
//!
//! Every command prints a table, or JSON with `--json`; most also write CSV (`--csv FILE`) and
//! PNG/SVG plots (`--plot DIR`). Progress goes to stderr (only when it is a terminal), so JSON on
//! stdout stays clean. A workload is `--workload random|seq|zipf` at the paper's sizes unless
//! told otherwise, or `--trace FILE`; `--seed` reproduces it exactly.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use thor_cachesim::cost::{CostModel, CostTotals, LinkScaling};
use thor_cachesim::experiment::{
    self, Calibration, Crossover, PaperRuns, SweepPoint, Table2Entry, crossover, log_spaced,
    run_paper, sweep,
};
use thor_cachesim::hierarchy::Design;
use thor_cachesim::paper::{self, PaperWorkload};
use thor_cachesim::run::{IndexKind, RunConfig, RunCounts, simulate};
use thor_cachesim::stack::{Prediction, StackDepths};
use thor_cachesim::stats::Summary;
use thor_cachesim::trace::Trace;
use thor_cachesim::workload::{Pattern, Sharing, WorkloadSpec};

use crate::plot::{ChartSpec, Legend, Series, line_chart};

/// `thor sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Which experiment to run.
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// The DEMOTE study: the eight designs on one workload, or (--table2) the paper's Table 2.
    Demote(DemoteArgs),
    /// Link-bandwidth sensitivity (paper section 5): where demotion stops paying.
    Bandwidth(BandwidthArgs),
    /// Fit the calibrated cost model to the paper's Table 2 and show fit and predictions.
    Calibrate(CalibrateArgs),
    /// LRU stack-depth analysis and the paper's inclusive/exclusive prediction (section 3).
    Stack(StackArgs),
    /// Write a generated workload as a CSV block trace (the format --trace reads).
    Gen(GenArgs),
    /// Simulated requests per second, per design.
    Speed(SpeedArgs),
    /// The deterministic whole-cluster simulation of thor itself (server core, clients,
    /// network, crashes), checked run by run; any number of seeds, or one with its trace.
    Cluster(crate::cluster_sim::ClusterArgs),
    /// The deterministic simulation of two or three servers with two-phase commit (transfers
    /// and audits, peer-message faults), checked run by run for serializability in timestamp
    /// order, conserved money and liveness; any number of seeds, or one with its trace.
    Twopc(crate::cluster_sim::TwopcArgs),
}

/// Runs `thor sim`.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    match args.command {
        SimCommand::Demote(a) if a.table2 => table2(a),
        SimCommand::Demote(a) => demote(a),
        SimCommand::Bandwidth(a) => bandwidth(a),
        SimCommand::Calibrate(a) => calibrate(a),
        SimCommand::Stack(a) => stack(a),
        SimCommand::Gen(a) => gen_trace(a),
        SimCommand::Speed(a) => speed(a),
        SimCommand::Cluster(a) => crate::cluster_sim::cluster(a),
        SimCommand::Twopc(a) => crate::cluster_sim::twopc(a),
    }
}

// ---------------------------------------------------------------------------------------------
// Shared arguments.

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkloadKind {
    /// Uniform over the working set (paper: 32,768 blocks).
    Random,
    /// A loop over the working set (paper: 32,767 blocks).
    Seq,
    /// p(i) proportional to 1/i^s (paper: 49,152 blocks, s = 1).
    Zipf,
}

impl WorkloadKind {
    fn paper(self) -> PaperWorkload {
        match self {
            WorkloadKind::Random => PaperWorkload::Random,
            WorkloadKind::Seq => PaperWorkload::Sequential,
            WorkloadKind::Zipf => PaperWorkload::Zipf,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SharingArg {
    /// Each client its own stream over its own blocks.
    Disjoint,
    /// All clients issue one stream in lock-step.
    Conjoint,
}

/// Which workload to run.
#[derive(Debug, Args)]
struct WorkloadArgs {
    /// Synthetic access pattern (ignored with --trace).
    #[arg(long, value_enum, default_value = "random")]
    workload: WorkloadKind,
    /// Replay this CSV block trace (header `client,block`) instead of generating a workload.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Working-set size of each client's stream, in blocks [default: the paper's size].
    #[arg(long)]
    blocks: Option<u64>,
    /// Zipf exponent s (the paper's "Zipf-like" workload is 1).
    #[arg(long, default_value_t = 1.0)]
    zipf_exponent: f64,
    /// Number of clients.
    #[arg(long, default_value_t = 1)]
    clients: u16,
    /// How several clients' streams relate.
    #[arg(long, value_enum, default_value = "disjoint")]
    sharing: SharingArg,
    /// Requests per client, warm-up included [default: 11 x blocks: the paper's N + 10 N].
    #[arg(long)]
    requests: Option<u64>,
    /// Requests at the start (all clients together) that warm the caches uncounted [default:
    /// one working set per client for generated workloads, 0 for traces].
    #[arg(long)]
    warmup: Option<u64>,
    /// PRNG seed: the same seed gives the same workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// A loaded workload.
struct Loaded {
    /// The requests.
    trace: Trace,
    /// Uncounted requests at the start.
    warmup: u64,
    /// A short name for tables and file names.
    label: String,
    /// The generating spec, if generated.
    spec: Option<WorkloadSpec>,
}

impl WorkloadArgs {
    fn spec(&self) -> anyhow::Result<WorkloadSpec> {
        let blocks = self.blocks.unwrap_or(self.workload.paper().pattern().blocks());
        let pattern = match self.workload {
            WorkloadKind::Random => Pattern::Random { blocks },
            WorkloadKind::Seq => Pattern::Sequential { blocks },
            WorkloadKind::Zipf => Pattern::Zipf { blocks, exponent: self.zipf_exponent },
        };
        let requests = match self.requests {
            Some(r) => r,
            None => blocks
                .checked_mul(1 + paper::MEASURED_PER_WARMUP)
                .context("--blocks too large for the default --requests")?,
        };
        let sharing = match self.sharing {
            SharingArg::Disjoint => Sharing::Disjoint,
            SharingArg::Conjoint => Sharing::Conjoint,
        };
        Ok(WorkloadSpec {
            pattern,
            clients: self.clients,
            sharing,
            requests_per_client: requests,
            seed: self.seed,
        })
    }

    fn load(&self) -> anyhow::Result<Loaded> {
        if let Some(path) = &self.trace {
            let trace = Trace::read_csv(path)?;
            let label = path.file_stem().map_or("trace".into(), |s| s.to_string_lossy().into());
            return Ok(Loaded { trace, warmup: self.warmup.unwrap_or(0), label, spec: None });
        }
        let spec = self.spec()?;
        let trace = spec.generate()?;
        let warmup = self.warmup.unwrap_or(spec.pattern.blocks() * u64::from(spec.clients));
        let mut label =
            self.workload.to_possible_value().expect("no skipped values").get_name().to_string();
        if spec.clients > 1 {
            let _ = write!(label, "-{}x{:?}", spec.clients, spec.sharing);
            label = label.to_lowercase();
        }
        Ok(Loaded { trace, warmup, label, spec: Some(spec) })
    }
}

/// Cache sizes.
#[derive(Debug, Args)]
struct CacheArgs {
    /// Blocks per client cache (the paper's N_c).
    #[arg(long, default_value_t = paper::CLIENT_BLOCKS)]
    client_blocks: usize,
    /// Blocks in the array cache (the paper's N_a).
    #[arg(long, default_value_t = paper::ARRAY_BLOCKS)]
    array_blocks: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CostsArg {
    /// The paper's round numbers: T_c 0, T_a 0.2 ms, T_d 10 ms, demotion 0.2 ms (0.02 if no data).
    Round,
    /// Fitted to the paper's Table 2 (see `thor sim calibrate`).
    Calibrated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LinkScalingArg {
    /// Only a block's wire time depends on the bandwidth.
    Wire,
    /// All link costs scale inversely with the bandwidth from their 1 Gbit/s values.
    Proportional,
}

impl From<LinkScalingArg> for LinkScaling {
    fn from(a: LinkScalingArg) -> Self {
        match a {
            LinkScalingArg::Wire => LinkScaling::Wire,
            LinkScalingArg::Proportional => LinkScaling::Proportional,
        }
    }
}

/// The latency model.
#[derive(Debug, Args)]
struct CostArgs {
    /// Cost model.
    #[arg(long, value_enum, default_value = "round")]
    costs: CostsArg,
    /// Client-array link bandwidth, bit/s.
    #[arg(long, default_value_t = 1e9)]
    bandwidth: f64,
    /// How link costs follow the bandwidth.
    #[arg(long, value_enum, default_value = "wire")]
    link_scaling: LinkScalingArg,
}

impl CostArgs {
    fn model(&self) -> anyhow::Result<CostModel> {
        let base = match self.costs {
            CostsArg::Round => CostModel::round(),
            CostsArg::Calibrated => CostModel::calibrated(),
        };
        let m = base.with_link_scaling(self.link_scaling.into()).with_bandwidth(self.bandwidth);
        m.validate()?;
        Ok(m)
    }
}

/// Output formats.
#[derive(Debug, Args)]
struct OutputArgs {
    /// Print JSON on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the results as CSV to this file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also draw plots (PNG and SVG) into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

impl OutputArgs {
    fn plot_dir(&self) -> anyhow::Result<Option<&Path>> {
        if let Some(dir) = &self.plot {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Ok(self.plot.as_deref())
    }

    fn write_csv(&self, text: &str) -> anyhow::Result<()> {
        if let Some(path) = &self.csv {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    }
}

/// Prints `value` as pretty JSON on stdout.
fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Parses a comma-separated list of designs.
fn parse_designs(list: &str) -> anyhow::Result<Vec<Design>> {
    let designs: Vec<Design> =
        list.split(',').map(|s| s.trim().parse::<Design>()).collect::<Result<_, _>>()?;
    if designs.is_empty() || designs.len() > crate::plot::MAX_SERIES {
        bail!("give 1 to {} designs", crate::plot::MAX_SERIES);
    }
    Ok(designs)
}

/// The default design list: the paper's eight.
fn paper_designs() -> String {
    Design::PAPER.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

/// A progress bar over `total` units on stderr (drawn only if stderr is a terminal).
pub(crate) fn progress(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {percent:>3}% {per_sec} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Runs the paper's workloads with a progress bar.
fn paper_runs(
    seed: u64,
    workloads: &[PaperWorkload],
    designs: &[Design],
) -> anyhow::Result<PaperRuns> {
    let total: u64 = workloads.iter().map(|w| w.spec(seed).requests_per_client).sum::<u64>()
        * designs.len() as u64;
    let bar = progress(total, "simulating");
    let runs = run_paper(seed, workloads, designs, &mut |done, _| bar.set_position(done))?;
    bar.finish_and_clear();
    Ok(runs)
}

/// `x` as a signed percentage.
fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// Marks a relative error inside (or outside) a tolerance.
fn within(x: f64, tolerance: f64) -> &'static str {
    if x.abs() <= tolerance { "ok" } else { "OUT" }
}

/// Formats a bandwidth.
fn mbit(bps: f64) -> String {
    if bps >= 1e9 { format!("{:.2} Gbit/s", bps / 1e9) } else { format!("{:.1} Mbit/s", bps / 1e6) }
}

// ---------------------------------------------------------------------------------------------
// thor sim demote

#[derive(Debug, Args)]
struct DemoteArgs {
    /// Reproduce the paper's Table 2 (RANDOM, SEQ with LRU and MRU clients, ZIPF at the paper's
    /// sizes) under both cost models; workload (but for --seed), cache and cost options are then
    /// ignored.
    #[arg(long)]
    table2: bool,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    caches: CacheArgs,
    #[command(flatten)]
    cost: CostArgs,
    /// Designs to run, comma-separated, as CLIENT-ARRAY-none|demote with policies LRU, MRU,
    /// CLOCK or ARC [default: the paper's eight].
    #[arg(long)]
    designs: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// One design's result on one workload.
#[derive(Debug, Serialize)]
struct DesignResult {
    /// The design run.
    design: Design,
    /// Its measures under the chosen cost model.
    summary: Summary,
}

fn demote(args: DemoteArgs) -> anyhow::Result<()> {
    let designs = parse_designs(&args.designs.clone().unwrap_or_else(paper_designs))?;
    let loaded = args.workload.load()?;
    let cost = args.cost.model()?;
    let n = loaded.trace.requests().len() as u64;
    let bar = progress(n * designs.len() as u64, "simulating");
    let mut results = Vec::new();
    for (i, &design) in designs.iter().enumerate() {
        let config = RunConfig {
            design,
            client_blocks: args.caches.client_blocks,
            array_blocks: args.caches.array_blocks,
            warmup_requests: loaded.warmup,
            index: IndexKind::Auto,
        };
        let counts = simulate(&loaded.trace, &config, &mut |k| bar.set_position(i as u64 * n + k))?;
        results.push(DesignResult { design, summary: counts.total.summary(&cost) });
    }
    bar.finish_and_clear();

    let csv = demote_csv(&results);
    args.output.write_csv(&csv)?;
    if let Some(dir) = args.output.plot_dir()? {
        let series: Vec<Series> = results
            .iter()
            .map(|r| Series::steps(r.design.to_string(), cdf_points(&r.summary.latency_cdf)))
            .collect();
        let spec = ChartSpec {
            title: format!("Latency CDF, {} ({} costs)", loaded.label, costs_name(args.cost.costs)),
            x_label: CDF_X_LABEL.into(),
            y_label: "fraction of requests at or below".into(),
            log_x: true,
            y_range: Some((0.0, 1.02)),
            legend: Legend::LowerRight,
            ..ChartSpec::default()
        };
        let [png, _] =
            line_chart(&dir.join(format!("demote-{}-cdf", loaded.label)), &spec, &series)?;
        eprintln!("wrote {} (and .svg)", png.display());
    }
    if args.output.json {
        return print_json(&json!({
            "workload": loaded.spec,
            "trace": args.workload.trace,
            "label": loaded.label,
            "requests": n,
            "warmup_requests": loaded.warmup,
            "client_blocks": args.caches.client_blocks,
            "array_blocks": args.caches.array_blocks,
            "cost_model": cost,
            "designs": results,
        }));
    }
    println!(
        "{}: {} requests ({} warm-up), {} client(s), N_c = {}, N_a = {}, {} costs at {}",
        loaded.label,
        n,
        loaded.warmup,
        loaded.trace.clients(),
        args.caches.client_blocks,
        args.caches.array_blocks,
        costs_name(args.cost.costs),
        mbit(cost.link_bits_per_second),
    );
    println!(
        "{:<18} {:>8} {:>8} {:>8} {:>8}   {:>9} {:>9} {:>9}   {:>9}",
        "design", "client", "array", "disk", "seq.disk", "moved/rq", "reorder", "reject", "mean ms"
    );
    for r in &results {
        let s = &r.summary;
        let per = |x: u64| x as f64 / s.requests.max(1) as f64;
        println!(
            "{:<18} {:>8.4} {:>8.4} {:>8.4} {:>8.4}   {:>9.4} {:>9.4} {:>9.4}   {:>9.3}",
            r.design.to_string(),
            s.client_hit_fraction,
            s.array_hit_fraction,
            s.disk_fraction,
            s.disk_sequential_fraction,
            per(s.demotes_transferred),
            per(s.demotes_reordered),
            per(s.demotes_rejected),
            s.mean_latency_ms
        );
    }
    Ok(())
}

/// `thor sim demote`'s results as CSV, one line per design.
fn demote_csv(results: &[DesignResult]) -> String {
    let mut csv = String::from(
        "design,requests,client_hit,array_hit,disk,disk_sequential,demotes_transferred,demotes_reordered,demotes_rejected,mean_latency_ms\n",
    );
    for r in results {
        let s = &r.summary;
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{}",
            r.design,
            s.requests,
            s.client_hit_fraction,
            s.array_hit_fraction,
            s.disk_fraction,
            s.disk_sequential_fraction,
            s.demotes_transferred,
            s.demotes_reordered,
            s.demotes_rejected,
            s.mean_latency_ms
        );
    }
    csv
}

/// Latencies below this are drawn at it on a CDF's log axis (client hits cost 0 ms).
const FLOOR_MS: f64 = 0.01;

/// The x label of latency CDFs.
const CDF_X_LABEL: &str = "request latency (ms, log scale; 0 ms client hits drawn at 0.01)";

/// The lower-case name of a cost model.
fn costs_name(c: CostsArg) -> &'static str {
    match c {
        CostsArg::Round => "round",
        CostsArg::Calibrated => "calibrated",
    }
}

/// A CDF's steps, starting from fraction 0 at the first latency, with 0 ms mapped to a small
/// positive latency so that it shows on a log axis.
fn cdf_points(cdf: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(cdf.len() + 2);
    if let Some(&(first, _)) = cdf.first() {
        points.push((first.max(FLOOR_MS), 0.0));
    }
    points.extend(cdf.iter().map(|&(ms, f)| (ms.max(FLOOR_MS), f)));
    if let Some(&(last, _)) = cdf.last() {
        points.push((last.max(FLOOR_MS) * 1.5, 1.0));
    }
    points
}

// ---------------------------------------------------------------------------------------------
// thor sim demote --table2

/// Table 2 under one cost model, with the extra ZIPF LRU-LRU-demote figure.
#[derive(Debug, Serialize)]
struct Table2Json {
    /// The cost model the latencies are priced with.
    cost_model: CostModel,
    /// The paper's rows beside ours.
    rows: Vec<Table2Entry>,
    /// Our ZIPF LRU-LRU-demote latency (the paper's section 4.6 quotes 1.19 ms).
    zipf_lru_lru_demote_ms: f64,
    /// Every design on every workload.
    designs: Vec<WorkloadDesigns>,
}

/// All designs' measures on one workload (the paper's figures 8-9, 11-12, 14-15).
#[derive(Debug, Serialize)]
struct WorkloadDesigns {
    /// The workload.
    workload: PaperWorkload,
    /// One result per design, in the paper's order.
    designs: Vec<DesignResult>,
}

fn table2(args: DemoteArgs) -> anyhow::Result<()> {
    let seed = args.workload.seed;
    let runs = paper_runs(seed, &PaperWorkload::ALL, &experiment::table2_designs())?;
    let models = [("round", CostModel::round()), ("calibrated", CostModel::calibrated())];
    let lru_lru_demote = Design { demote: true, ..Design::BASELINE };
    let mut tables = Vec::new();
    for (name, model) in &models {
        let rows = experiment::table2(&runs, model)?;
        let zipf = runs.counts(PaperWorkload::Zipf, lru_lru_demote)?.mean_latency_ms(model);
        let designs = runs
            .workloads
            .iter()
            .map(|w| WorkloadDesigns {
                workload: w.workload,
                designs: w
                    .runs
                    .iter()
                    .map(|r| DesignResult {
                        design: r.config.design,
                        summary: r.total.summary(model),
                    })
                    .collect(),
            })
            .collect();
        tables.push((
            *name,
            Table2Json { cost_model: *model, rows, zipf_lru_lru_demote_ms: zipf, designs },
        ));
    }

    let csv = table2_csv(&tables);
    args.output.write_csv(&csv)?;
    if let Some(dir) = args.output.plot_dir()? {
        for row in &paper::TABLE2 {
            for (name, t) in &tables {
                let w = t.designs.iter().find(|w| w.workload == row.workload).expect("all run");
                let pick = |d: Design| {
                    let r = w.designs.iter().find(|r| r.design == d).expect("all eight run");
                    Series::steps(d.to_string(), cdf_points(&r.summary.latency_cdf))
                };
                let spec = ChartSpec {
                    title: format!("Latency CDF, {} ({name} costs)", row.label),
                    x_label: CDF_X_LABEL.into(),
                    y_label: "fraction of requests at or below".into(),
                    log_x: true,
                    y_range: Some((0.0, 1.02)),
                    legend: Legend::LowerRight,
                    ..ChartSpec::default()
                };
                let stem = format!(
                    "table2-{}-{name}-cdf",
                    row.label.to_lowercase().replace(['.', '(', ')'], "").replace(' ', "-")
                );
                let [png, _] =
                    line_chart(&dir.join(stem), &spec, &[pick(row.base), pick(row.proposed)])?;
                eprintln!("wrote {} (and .svg)", png.display());
            }
        }
    }
    if args.output.json {
        let value: serde_json::Map<String, serde_json::Value> = tables
            .iter()
            .map(|(name, t)| Ok((name.to_string(), serde_json::to_value(t)?)))
            .collect::<anyhow::Result<_>>()?;
        return print_json(&json!({ "seed": seed, "paper_sizes": {
            "client_blocks": paper::CLIENT_BLOCKS, "array_blocks": paper::ARRAY_BLOCKS,
            "random_blocks": paper::RANDOM_BLOCKS, "sequential_blocks": paper::SEQUENTIAL_BLOCKS,
            "zipf_blocks": paper::ZIPF_BLOCKS }, "tables": value }));
    }

    println!(
        "Table 2 at the paper's sizes: N_c = N_a = {} blocks; RANDOM {}, SEQ {}, ZIPF {} blocks; \
         N warm-up + 10 N measured requests; seed {seed}.",
        paper::CLIENT_BLOCKS,
        paper::RANDOM_BLOCKS,
        paper::SEQUENTIAL_BLOCKS,
        paper::ZIPF_BLOCKS
    );
    let (_, round) = &tables[0];
    let (_, cal) = &tables[1];
    print_table2_round(round);
    print_table2_calibrated(cal);
    print_table2_designs(round, cal);
    Ok(())
}

/// `thor sim demote --table2`'s CSV: one line per cost model and paper row.
fn table2_csv(tables: &[(&str, Table2Json)]) -> String {
    let mut csv = String::from(
        "cost_model,workload,base_design,proposed_design,paper_base_ms,paper_proposed_ms,paper_speedup,base_ms,proposed_ms,speedup\n",
    );
    for (name, t) in tables {
        for e in &t.rows {
            let _ = writeln!(
                csv,
                "{name},{},{},{},{},{},{},{},{},{}",
                e.paper.label,
                e.paper.base,
                e.paper.proposed,
                e.paper.base_ms,
                e.paper.proposed_ms,
                e.paper.speedup,
                e.base_ms,
                e.proposed_ms,
                e.speedup
            );
        }
    }
    csv
}

/// Table 2 under the round-number costs, beside the paper's speedups.
fn print_table2_round(round: &Table2Json) {
    let t = round.cost_model.totals();
    println!(
        "\n1. Round-number costs (T_c 0, T_a {:.2} ms, T_d {:.0} ms, demotion {:.2} ms, or {:.2} ms \
         without data). Compare speedups (base / proposed):",
        t.array_ms, t.disk_random_ms, t.demote_transfer_ms, t.demote_control_ms
    );
    println!(
        "{:<19} {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>8}",
        "workload", "paper", "paper", "paper", "ours", "ours", "ours", "speedup"
    );
    println!(
        "{:<19} {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>8}",
        "", "base ms", "prop ms", "speedup", "base ms", "prop ms", "speedup", "vs paper"
    );
    for e in &round.rows {
        let (_, _, ds) = e.relative_errors();
        println!(
            "{:<19} {:>9.2} {:>9.2} {:>8.1} | {:>9.3} {:>9.3} {:>8.2} | {:>8} {}",
            e.paper.label,
            e.paper.base_ms,
            e.paper.proposed_ms,
            e.paper.speedup,
            e.base_ms,
            e.proposed_ms,
            e.speedup,
            pct(ds),
            within(ds, 0.10)
        );
    }
}

/// Table 2 under the calibrated costs, beside the paper's latencies.
fn print_table2_calibrated(cal: &Table2Json) {
    let t = cal.cost_model.totals();
    println!(
        "\n2. Calibrated costs (T_a {:.2} ms, demotion {:.2} ms or {:.2} ms without data, T_d {:.2} ms \
         sequential, {:.2} ms random). Compare latencies:",
        t.array_ms,
        t.demote_transfer_ms,
        t.demote_control_ms,
        t.disk_sequential_ms,
        t.disk_random_ms
    );
    println!(
        "{:<19} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7}",
        "workload", "paper", "ours", "diff", "paper", "ours", "diff", "paper", "ours", "diff"
    );
    println!(
        "{:<19} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7}",
        "", "base", "base", "", "prop", "prop", "", "speedup", "speedup", ""
    );
    for e in &cal.rows {
        let (db, dp, ds) = e.relative_errors();
        println!(
            "{:<19} {:>7.2} {:>7.3} {:>7} | {:>7.2} {:>7.3} {:>7} | {:>7.1} {:>7.2} {:>7} {}",
            e.paper.label,
            e.paper.base_ms,
            e.base_ms,
            pct(db),
            e.paper.proposed_ms,
            e.proposed_ms,
            pct(dp),
            e.paper.speedup,
            e.speedup,
            pct(ds),
            within(db.abs().max(dp.abs()), 0.10)
        );
    }
    let zipf = cal.zipf_lru_lru_demote_ms;
    let rel = zipf / paper::ZIPF_LRU_LRU_DEMOTE_MS - 1.0;
    println!(
        "{:<19} {:>7.2} {:>7.3} {:>7}   (section 4.6: ZIPF, LRU-LRU-demote)",
        "ZIPF LRU-LRU-demote",
        paper::ZIPF_LRU_LRU_DEMOTE_MS,
        zipf,
        pct(rel)
    );
    println!(
        "\nTRACE (paper: 5.92 / 5.59 ms, 1.06) is not reproduced: it needs HP's 1992 `snake` trace."
    );
}

/// All eight designs per workload, under both cost models.
fn print_table2_designs(round: &Table2Json, cal: &Table2Json) {
    println!("\nAll eight designs (hit fractions; mean latency under round / calibrated costs):");
    for (w_round, w_cal) in round.designs.iter().zip(&cal.designs) {
        println!("\n{}", w_round.workload.name());
        println!(
            "  {:<16} {:>7} {:>7} {:>7} {:>9} {:>9}",
            "design", "client", "array", "disk", "round ms", "calib ms"
        );
        for (r, c) in w_round.designs.iter().zip(&w_cal.designs) {
            let s = &r.summary;
            println!(
                "  {:<16} {:>7.4} {:>7.4} {:>7.4} {:>9.3} {:>9.3}",
                r.design.to_string(),
                s.client_hit_fraction,
                s.array_hit_fraction,
                s.disk_fraction,
                s.mean_latency_ms,
                c.summary.mean_latency_ms
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// thor sim bandwidth

#[derive(Debug, Args)]
struct BandwidthArgs {
    /// Cost model.
    #[arg(long, value_enum, default_value = "round")]
    costs: CostsArg,
    /// Slowest link, bit/s.
    #[arg(long, default_value_t = paper::SWEEP_BITS_PER_SECOND.0)]
    from: f64,
    /// Fastest link, bit/s.
    #[arg(long, default_value_t = paper::SWEEP_BITS_PER_SECOND.1)]
    to: f64,
    /// Log-spaced bandwidths for the plots, CSV and JSON.
    #[arg(long, default_value_t = 61)]
    points: usize,
    /// PRNG seed of the workloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    output: OutputArgs,
}

/// One workload's sweep under one link scaling.
#[derive(Debug, Serialize)]
struct SweepJson {
    /// The workload.
    workload: PaperWorkload,
    /// How link costs followed the bandwidth.
    link_scaling: LinkScaling,
    /// Where the baseline starts to win, solved exactly.
    crossover: Crossover,
    /// Both designs' mean latencies at each swept bandwidth.
    points: Vec<SweepPoint>,
}

fn bandwidth(args: BandwidthArgs) -> anyhow::Result<()> {
    let workloads = [PaperWorkload::Random, PaperWorkload::Zipf];
    let runs = paper_runs(args.seed, &workloads, &[Design::BASELINE, Design::PROPOSED])?;
    let base_model = match args.costs {
        CostsArg::Round => CostModel::round(),
        CostsArg::Calibrated => CostModel::calibrated(),
    };
    let bandwidths = log_spaced(args.from, args.to, args.points)?;
    let mut sweeps = Vec::new();
    for w in workloads {
        let base = runs.counts(w, Design::BASELINE)?;
        let prop = runs.counts(w, Design::PROPOSED)?;
        for scaling in [LinkScaling::Wire, LinkScaling::Proportional] {
            let model = base_model.with_link_scaling(scaling);
            sweeps.push(SweepJson {
                workload: w,
                link_scaling: scaling,
                crossover: crossover(base, prop, &model),
                points: sweep(base, prop, &model, &bandwidths),
            });
        }
    }
    let mut csv = String::from("workload,link_scaling,bits_per_second,base_ms,proposed_ms\n");
    for s in &sweeps {
        for p in &s.points {
            let _ = writeln!(
                csv,
                "{},{:?},{},{},{}",
                s.workload.name(),
                s.link_scaling,
                p.bits_per_second,
                p.base_ms,
                p.proposed_ms
            );
        }
    }
    args.output.write_csv(&csv)?;
    if let Some(dir) = args.output.plot_dir()? {
        bandwidth_charts(dir, &sweeps, args.costs)?;
    }
    if args.output.json {
        return print_json(&json!({
            "seed": args.seed,
            "cost_model": base_model,
            "paper_crossover_bits_per_second": paper::CROSSOVER_BITS_PER_SECOND,
            "sweeps": sweeps,
        }));
    }
    println!(
        "Bandwidth sensitivity ({} costs, seed {}), LRU-LRU-none (base) vs LRU-MRU-demote \
         (proposed), paper sizes.",
        costs_name(args.costs),
        args.seed
    );
    println!("Paper (sections 5, 7): demotion stops paying below about 50 Mbit/s.\n");
    println!("{:<8} {:<13} crossover (base faster below)", "workload", "link scaling");
    for s in &sweeps {
        let text = match s.crossover {
            Crossover::At { bits_per_second, wire_ms } => {
                format!("{} (4 KB wire time {:.2} ms)", mbit(bits_per_second), wire_ms)
            }
            Crossover::ProposedAlwaysFaster => "none: proposed always faster".into(),
            Crossover::BaseAlwaysFaster => "none: base always faster".into(),
        };
        println!("{:<8} {:<13} {text}", s.workload.name(), format!("{:?}", s.link_scaling));
    }
    let nice: Vec<f64> = [10e6, 20e6, 50e6, 100e6, 200e6, 500e6, 1e9]
        .into_iter()
        .filter(|b| (args.from..=args.to).contains(b))
        .collect();
    for scaling in [LinkScaling::Wire, LinkScaling::Proportional] {
        println!("\nmean latency, ms ({scaling:?} link scaling)");
        println!(
            "{:>14} {:>12} {:>12} {:>12} {:>12}",
            "bandwidth", "RANDOM base", "RANDOM prop", "ZIPF base", "ZIPF prop"
        );
        for &bw in &nice {
            let mut line = format!("{:>14}", mbit(bw));
            for w in workloads {
                let model = base_model.with_link_scaling(scaling).with_bandwidth(bw);
                let b = runs.counts(w, Design::BASELINE)?.mean_latency_ms(&model);
                let p = runs.counts(w, Design::PROPOSED)?.mean_latency_ms(&model);
                let _ = write!(line, " {b:>12.3} {p:>12.3}");
            }
            println!("{line}");
        }
    }
    Ok(())
}

/// `thor sim bandwidth --plot`: one chart per sweep (workload and link scaling), into `dir`.
fn bandwidth_charts(dir: &Path, sweeps: &[SweepJson], costs: CostsArg) -> anyhow::Result<()> {
    for s in sweeps {
        let scaling = format!("{:?}", s.link_scaling).to_lowercase();
        let spec = ChartSpec {
            title: format!(
                "{}: mean latency vs link bandwidth ({} costs, {scaling} link scaling)",
                s.workload.name(),
                costs_name(costs)
            ),
            x_label: "client-array link bandwidth (bit/s)".into(),
            y_label: "mean latency (ms)".into(),
            log_x: true,
            ..ChartSpec::default()
        };
        let pts = |f: fn(&SweepPoint) -> f64| {
            s.points.iter().map(|p| (p.bits_per_second, f(p))).collect::<Vec<_>>()
        };
        let series = [
            Series::line(format!("{} (base)", Design::BASELINE), pts(|p| p.base_ms)),
            Series::line(format!("{} (proposed)", Design::PROPOSED), pts(|p| p.proposed_ms)),
        ];
        let costs = costs_name(costs);
        let stem = format!("bandwidth-{}-{costs}-{scaling}", s.workload.name().to_lowercase());
        let [png, _] = line_chart(&dir.join(stem), &spec, &series)?;
        eprintln!("wrote {} (and .svg)", png.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// thor sim calibrate

#[derive(Debug, Args)]
struct CalibrateArgs {
    /// PRNG seed of the workloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

fn calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    let runs = paper_runs(args.seed, &PaperWorkload::ALL, &experiment::table2_designs())?;
    let fit: Calibration = experiment::calibrate(&runs)?;
    let exact = CostModel::from_totals(&fit.totals);
    let preset = CostModel::calibrated();
    if args.json {
        return print_json(&json!({
            "seed": args.seed,
            "fitted_totals": fit.totals,
            "preset_totals": preset.totals(),
            "points": fit.points.iter().map(|p| json!({
                "label": p.label, "design": p.design, "fitted": p.fitted, "paper_ms": p.paper_ms,
                "usage": p.usage, "exact_fit_ms": exact.latency_ms(&p.usage),
                "preset_ms": preset.latency_ms(&p.usage),
            })).collect::<Vec<_>>(),
        }));
    }
    let show = |name: &str, t: &CostTotals| {
        println!(
            "{name:<8} T_a {:.4} ms, demotion {:.4} ms (data) / {:.4} ms (no data), T_d {:.4} ms \
             sequential / {:.4} ms random",
            t.array_ms,
            t.demote_transfer_ms,
            t.demote_control_ms,
            t.disk_sequential_ms,
            t.disk_random_ms
        );
    };
    println!(
        "Calibration (seed {}): five component costs solved from five Table 2 latencies and this \
         simulator's hit counts; the rest are predictions.\n",
        args.seed
    );
    show("fit", &fit.totals);
    show("preset", &preset.totals());
    println!(
        "\n{:<28} {:>6} {:>8} {:>8} {:>8}  role",
        "paper figure", "paper", "fit", "preset", "preset"
    );
    println!("{:<28} {:>6} {:>8} {:>8} {:>8}", "", "ms", "ms", "ms", "vs paper");
    for (p, fit_ms) in fit.predictions(&exact) {
        let preset_ms = preset.latency_ms(&p.usage);
        let rel = preset_ms / p.paper_ms - 1.0;
        println!(
            "{:<28} {:>6.2} {:>8.3} {:>8.3} {:>8}  {}",
            p.label,
            p.paper_ms,
            fit_ms,
            preset_ms,
            pct(rel),
            if p.fitted { "fitted" } else { "predicted" }
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// thor sim stack

#[derive(Debug, Args)]
struct StackArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    caches: CacheArgs,
    #[command(flatten)]
    cost: CostArgs,
    /// Deepest stack distance resolved [default: the number of distinct blocks].
    #[arg(long)]
    max_depth: Option<usize>,
    #[command(flatten)]
    output: OutputArgs,
}

fn stack(args: StackArgs) -> anyhow::Result<()> {
    let loaded = args.workload.load()?;
    let cost = args.cost.model()?;
    let max_depth = args
        .max_depth
        .unwrap_or((loaded.trace.block_count() as usize).max(1))
        .min(thor_cachesim::limits::MAX_STACK_DEPTH);
    let requests = loaded.trace.requests();
    let depths = StackDepths::analyze(
        requests.iter().map(|r| r.block),
        loaded.trace.block_count(),
        loaded.warmup,
        max_depth,
    )?;
    let (nc, na) = (args.caches.client_blocks, args.caches.array_blocks);
    let prediction = depths.predict(nc, na, &cost);
    // What the simulator says for the inclusive baseline and the exclusive proposal.
    let simulated = stack_simulated(&loaded, nc, na, &cost)?;
    // The stack-depth graph: H(C) on a log grid of sizes.
    let curve = stack_curve(&depths, max_depth);
    let mut csv = String::from("cache_blocks,lru_hit_fraction\n");
    for &(x, y) in &curve {
        let _ = writeln!(csv, "{x},{y}");
    }
    args.output.write_csv(&csv)?;
    if let Some(dir) = args.output.plot_dir()? {
        let spec = ChartSpec {
            title: format!("LRU stack depth graph, {}", loaded.label),
            x_label: "cache size (blocks)".into(),
            y_label: "cumulative hit fraction".into(),
            log_x: true,
            y_range: Some((0.0, 1.02)),
            ..ChartSpec::default()
        };
        let [png, _] = line_chart(
            &dir.join(format!("stack-{}", loaded.label)),
            &spec,
            &[Series::line("all requests", curve.clone())],
        )?;
        eprintln!("wrote {} (and .svg)", png.display());
    }
    if args.output.json {
        return print_json(&json!({
            "label": loaded.label,
            "workload": loaded.spec,
            "requests_counted": depths.total(),
            "cold": depths.cold(),
            "deeper_than_max": depths.deeper(),
            "max_depth": max_depth,
            "client_blocks": nc,
            "array_blocks": na,
            "cost_model": cost,
            "prediction": prediction,
            "simulated": simulated,
            "curve": curve,
        }));
    }
    println!(
        "{}: {} requests counted ({} cold, {} deeper than {}), all clients as one stream",
        loaded.label,
        depths.total(),
        depths.cold(),
        depths.deeper(),
        max_depth
    );
    let mut sizes = vec![nc, na, nc + na - 1, nc + na];
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes.into_iter().filter(|&s| s > 0) {
        println!("  H({size}) = {:.4}", depths.hit_fraction(size));
    }
    println!(
        "\nSection-3 prediction for N_c = {nc}, N_a = {na} ({} costs):",
        costs_name(args.cost.costs)
    );
    print_stack_table(&prediction, &simulated);
    Ok(())
}

/// The section-3 prediction beside the simulated designs, as a table on stdout.
fn print_stack_table(prediction: &Prediction, simulated: &[DesignResult]) {
    println!(
        "  {:<28} {:>7} {:>7} {:>7} {:>10} {:>14}",
        "", "client", "array", "disk", "mean ms", "w/ demotes ms"
    );
    for (name, p) in [
        ("inclusive (predicted)", prediction.inclusive),
        ("exclusive (predicted)", prediction.exclusive),
    ] {
        println!(
            "  {:<28} {:>7.4} {:>7.4} {:>7.4} {:>10.3} {:>14.3}",
            name,
            p.client_hit_fraction,
            p.array_hit_fraction,
            p.disk_fraction,
            p.mean_latency_ms,
            p.mean_latency_with_demotions_ms
        );
    }
    for r in simulated {
        let s = &r.summary;
        println!(
            "  {:<28} {:>7.4} {:>7.4} {:>7.4} {:>10} {:>14.3}",
            format!("{} (simulated)", r.design),
            s.client_hit_fraction,
            s.array_hit_fraction,
            s.disk_fraction,
            "",
            s.mean_latency_ms
        );
    }
}

/// `thor sim stack`'s check of the prediction: the simulated baseline and proposal at the
/// same sizes (one client only; empty otherwise).
fn stack_simulated(
    loaded: &Loaded,
    nc: usize,
    na: usize,
    cost: &CostModel,
) -> anyhow::Result<Vec<DesignResult>> {
    let mut simulated = Vec::new();
    if loaded.trace.clients() == 1 {
        for design in [Design::BASELINE, Design::PROPOSED] {
            let config = RunConfig {
                design,
                client_blocks: nc,
                array_blocks: na,
                warmup_requests: loaded.warmup,
                index: IndexKind::Auto,
            };
            let counts: RunCounts = simulate(&loaded.trace, &config, &mut |_| {})?;
            let mut s = counts.total.summary(cost);
            s.latency_cdf.clear();
            simulated.push(DesignResult { design, summary: s });
        }
    }
    Ok(simulated)
}

/// The LRU stack-depth graph: H(C) on a log grid of sizes up to `max_depth`.
fn stack_curve(depths: &StackDepths, max_depth: usize) -> Vec<(f64, f64)> {
    let mut curve = Vec::new();
    let mut c = 1usize;
    while c <= max_depth {
        curve.push((c as f64, depths.hit_fraction(c)));
        c = (c + 1).max((c as f64 * 1.05) as usize);
    }
    if curve.last().is_none_or(|&(x, _)| x as usize != max_depth) {
        curve.push((max_depth as f64, depths.hit_fraction(max_depth)));
    }
    curve
}

// ---------------------------------------------------------------------------------------------
// thor sim gen

#[derive(Debug, Args)]
struct GenArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Where to write the CSV trace.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

fn gen_trace(args: GenArgs) -> anyhow::Result<()> {
    if args.workload.trace.is_some() {
        bail!("gen writes generated workloads; --trace is an input");
    }
    let loaded = args.workload.load()?;
    loaded.trace.write_csv(&args.out)?;
    eprintln!(
        "wrote {} requests ({} clients, {} blocks) to {}",
        loaded.trace.requests().len(),
        loaded.trace.clients(),
        loaded.trace.block_count(),
        args.out.display()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// thor sim speed

#[derive(Debug, Args)]
struct SpeedArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    caches: CacheArgs,
    /// Designs to time, comma-separated [default: the paper's eight].
    #[arg(long)]
    designs: Option<String>,
    /// Timed runs per design; the fastest counts (the others absorb noise from the machine).
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn speed(args: SpeedArgs) -> anyhow::Result<()> {
    let designs = parse_designs(&args.designs.clone().unwrap_or_else(paper_designs))?;
    if !(1..=1000).contains(&args.repeat) {
        bail!("--repeat must be 1..=1000");
    }
    let loaded = args.workload.load()?;
    let n = loaded.trace.requests().len() as u64;
    let mut rows = Vec::new();
    for &design in &designs {
        let mut rates = [0.0; 2];
        for (rate, index) in rates.iter_mut().zip([IndexKind::Dense, IndexKind::Hash]) {
            let config = RunConfig {
                design,
                client_blocks: args.caches.client_blocks,
                array_blocks: args.caches.array_blocks,
                warmup_requests: loaded.warmup,
                index,
            };
            let mut best = f64::INFINITY;
            for _ in 0..args.repeat {
                let start = Instant::now();
                let counts = simulate(&loaded.trace, &config, &mut |_| {})?;
                best = best.min(start.elapsed().as_secs_f64());
                std::hint::black_box(counts);
            }
            *rate = n as f64 / best;
        }
        rows.push((design, rates));
    }
    if args.json {
        return print_json(&json!({
            "label": loaded.label,
            "requests_per_run": n,
            "repeat": args.repeat,
            "designs": rows.iter().map(|(d, [dense, hash])| json!({
                "design": d,
                "requests_per_second_dense_index": dense,
                "requests_per_second_hash_index": hash,
            })).collect::<Vec<_>>(),
        }));
    }
    println!(
        "{}: {} requests per run, best of {}, one thread, counting by class included",
        loaded.label, n, args.repeat
    );
    println!("  {:<18} {:>14} {:>14}", "design", "dense index", "hash index");
    for (design, [dense, hash]) in rows {
        println!("  {:<18} {:>10.1} M/s {:>10.1} M/s", design.to_string(), dense / 1e6, hash / 1e6);
    }
    Ok(())
}
