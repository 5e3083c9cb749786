//! `thor`: the command-line face of the store.
//!
//! Each subcommand lives in its own module and owns its argument struct; `main` only parses and
//! dispatches, so that subcommands can be added without touching each other.
//!
//! # The server, stats and logging (the detail behind ARCHITECTURE.md)
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
//! `inspect/` is `thor inspect`: roots, classes, objects by field name, maps and sequences of a
//! database, read-only, offline or through a server over one object-source seam (its module
//! documentation says how, and why offline opens replay the log in memory).
//!

use clap::{Parser, Subcommand};

mod backup;
mod check;
mod compact;
mod demo;
mod group;
mod inspect;
mod replica;
mod server;
mod stats;

use thor_lab::{bench, oo7};
// The value parsers the shell's own commands share with the laboratory's.
pub use thor_lab::args::{at_least_one, page_kb, positive_size};

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
    /// Operate a replicated server (thor server --replica-id): its replicas' status.
    Group(group::GroupArgs),
    /// Look inside a database, offline or through a server: roots, classes, objects, maps
    /// and sequences (read-only).
    Inspect(inspect::InspectArgs),
    /// Simulate client caches over a shared array cache (the DEMOTE study and more), and the
    /// whole cluster (built with the `lab` feature only).
    #[cfg(feature = "lab")]
    Sim(thor_lab::sim::SimArgs),
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
        #[cfg(feature = "lab")]
        Command::Sim(a) => thor_lab::sim::run(a),
        Command::Stats(a) => stats::run(a),
        Command::Check(a) => check::run(a),
        Command::Backup(a) => backup::run(a),
        Command::Compact(a) => compact::run(a),
        Command::Group(a) => group::run(a),
        Command::Inspect(a) => inspect::run(a),
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
