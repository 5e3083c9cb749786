//! `thor`: the command-line face of the store.
//!
//! Each subcommand lives in its own module and owns its argument struct; `main` only parses and
//! dispatches, so that subcommands can be added without touching each other.

use clap::{Parser, Subcommand};

mod backup;
mod bank;
mod bench;
mod bench_clients;
mod bench_twopc;
mod check;
mod cluster_client;
mod cluster_sim;
mod compact;
mod demo;
mod floor;
mod oo7;
mod oo7_cluster;
mod oo7_multi;
mod oo7_penalty;
mod oo7_penalty_figures;
mod oo7_recovery;
mod plot;
mod server;
mod sim;
mod stats;
mod transfer_client;

#[derive(Debug, Parser)]
#[command(
    name = "thor",
    version,
    about = "thor: a distributed, transactional, persistent object store",
    after_help = "Logging goes to stderr: -v for debug, -vv for trace, -q for warnings only, -qq \
                  for errors only; RUST_LOG (e.g. RUST_LOG=thor_server=debug) overrides them. \
                  Errors print one line; RUST_BACKTRACE=1 adds a backtrace."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less log output (repeat for less).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    quiet: u8,
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// One human-readable line per event, with a UTC timestamp.
    Text,
    /// One JSON object per event.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the store end to end on the embedded default and print what happens.
    Demo(demo::DemoArgs),
    /// Measure thor's components.
    Bench(bench::BenchArgs),
    /// The OO7 benchmark and the HAC experiments: load, run, native, sweep.
    Oo7(oo7::Oo7Args),
    /// Serve a database over TCP until Ctrl-C or SIGTERM.
    Server(server::ServerArgs),
    /// Print a running server's counters.
    Stats(stats::StatsArgs),
    /// Copy a database, live through its server or offline, into a new directory.
    Backup(backup::BackupArgs),
    /// Check a database directory offline (exit status 0 healthy, 1 problems, 2 cannot check).
    Check(check::CheckArgs),
    /// Rewrite a closed database into a new directory without its unreachable objects.
    Compact(compact::CompactArgs),
    /// Simulate client caches over a shared array cache (the DEMOTE study and more).
    Sim(sim::SimArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Server(_)) {
        restore_default_sigpipe();
    }
    init_logging(&cli);
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Oo7(a) => oo7::run(a),
        Command::Server(a) => server::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Stats(a) => stats::run(a),
        Command::Check(a) => check::run(a),
        Command::Backup(a) => backup::run(a),
        Command::Compact(a) => compact::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", report(&e));
            if e.downcast_ref::<server::StorageFailed>().is_some() {
                return std::process::ExitCode::from(server::EXIT_STORAGE_FAILED);
            }
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0")
                && e.backtrace().status() == std::backtrace::BacktraceStatus::Captured
            {
                eprintln!("{}", e.backtrace());
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// A `--seconds` value: a positive, finite number of seconds (clap's value parser).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a positive number of seconds")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A size (`--cache-mb`, `--sizes-mb`, ...): a positive, finite number, fractions allowed
/// (clap's value parser). Zero, negative and NaN sizes are refused here, with the flag's name,
/// rather than deep inside a cache or an engine.
pub fn positive_size(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a positive size")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A `--page-kb` value: a page size in KiB that the page format allows (clap's value parser),
/// checked before anything is created.
pub fn page_kb(s: &str) -> Result<usize, String> {
    use thor_core::limits::{PAGE_SIZE_MAX, PAGE_SIZE_MIN, is_valid_page_size};
    match s.parse::<i64>() {
        Ok(v) if v > 0 && is_valid_page_size((v as usize).saturating_mul(1024)) => Ok(v as usize),
        Ok(_) => Err(format!(
            "{s} is not a page size: a power of two from {} to {} KiB",
            PAGE_SIZE_MIN / 1024,
            PAGE_SIZE_MAX / 1024
        )),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A count or whole size that must be at least 1 (`--clients`, `--repeat`, `--bulk-mb`, ...;
/// clap's value parser).
pub fn at_least_one<T: TryFrom<i64, Error: std::fmt::Display>>(s: &str) -> Result<T, String> {
    match s.parse::<i64>() {
        Ok(v) if v >= 1 => T::try_from(v).map_err(|e| format!("{s}: {e}")),
        Ok(_) => Err(format!("{s} is not a count of at least 1")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// The error and its causes on one line, each said once: a layer whose message already
/// includes its cause's (`transport: connection refused` over `connection refused`) hides the
/// repetition.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut prev = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if prev.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
        prev = msg;
    }
    out
}

/// Logging to stderr at the level `-v`/`-q` ask for (info by default), or as `RUST_LOG` says.
fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let level = match i16::from(cli.verbose) - i16::from(cli.quiet) {
        i16::MIN..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("warning: RUST_LOG={spec:?} is not a valid filter ({e}); using {level}");
            EnvFilter::new(level)
        }),
        _ => EnvFilter::new(level),
    };
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter);
    let _ = match cli.log_format {
        LogFormat::Text => {
            use std::io::IsTerminal;
            builder.with_ansi(std::io::stderr().is_terminal()).try_init()
        }
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A command whose standard output is closed (`thor demo | head`) ends quietly, as Unix tools
/// do, instead of panicking on the failed write. Not for `thor server`, which must survive a
/// closed pipe.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called at the start of main, before any thread is spawned; setting a signal's
    // disposition to SIG_DFL has no memory effects.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
