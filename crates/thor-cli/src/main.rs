//! `thor`: the command-line face of the store.
//!
//! Each subcommand lives in its own module and owns its argument struct; `main` only parses and
//! dispatches, so that subcommands can be added without touching each other.

use clap::{Parser, Subcommand};

mod bank;
mod bench;
mod bench_clients;
mod check;
mod cluster_sim;
mod demo;
mod oo7;
mod plot;
mod server;
mod sim;
mod transfer_client;

#[derive(Debug, Parser)]
#[command(
    name = "thor",
    version,
    about = "thor: a distributed, transactional, persistent object store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Check a database directory offline (exit status 0 healthy, 1 problems, 2 cannot check).
    Check(check::CheckArgs),
    /// Simulate client caches over a shared array cache (the DEMOTE study and more).
    Sim(sim::SimArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Oo7(a) => oo7::run(a),
        Command::Server(a) => server::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Check(a) => check::run(a),
    }
}
