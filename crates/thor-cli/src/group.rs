//! `thor group`: operates a replicated server (`thor server --replica-id`, issue 33).
//!
//! ```text
//! thor group status --connect HOST:PORT[,HOST:PORT...] [--json]
//! ```
//!
//! `status` asks each replica it is given for its `Stats` (an operator's request: every
//! replica answers it, leading or not) and prints one line per replica: its id, role, term,
//! the leader it knows, its commit and applied indexes and, on the leader, the most entries a
//! voter lacks. A replica that cannot be reached gets a line saying why; the command fails
//! only if none answered.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use thor_wire::stats::{ServerStats, group_role_name};

use crate::stats::{connect, token_or_env};

/// Operate a replica group.
#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// Each replica's role, term, leader, indexes and lag, one line per replica.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// The replicas' addresses, HOST:PORT separated by commas.
    #[arg(long, value_delimiter = ',', required = true)]
    connect: Vec<String>,
    /// An operator's token (default: $THOR_TOKEN, else none).
    #[arg(long)]
    token: Option<String>,
    /// One JSON object per replica, in an array.
    #[arg(long)]
    json: bool,
}

pub fn run(a: GroupArgs) -> Result<()> {
    match a.command {
        GroupCommand::Status(s) => status(s),
    }
}

/// What one replica said, or why it did not.
fn ask(addr: &str, token: &str) -> Result<ServerStats> {
    let s = connect(addr, token, "thor group")?;
    let stats = s.server_stats()?;
    let _ = s.close();
    Ok(stats)
}

fn status(a: StatusArgs) -> Result<()> {
    let token = token_or_env(a.token);
    let answers: Vec<(String, Result<ServerStats>)> =
        a.connect.iter().map(|addr| (addr.clone(), ask(addr, &token))).collect();
    if answers.iter().all(|(_, r)| r.is_err()) {
        let why: Vec<String> =
            answers.iter().map(|(a, r)| format!("{a}: {:#}", r.as_ref().err().unwrap())).collect();
        bail!("no replica answered: {}", why.join("; "));
    }
    if a.json {
        let lines: Vec<serde_json::Value> = answers
            .iter()
            .map(|(addr, r)| match r {
                Ok(s) => serde_json::json!({
                    "addr": addr,
                    "replica": s.group_replica_id,
                    "role": group_role_name(s.group_role),
                    "term": s.group_term,
                    "leader": s.group_leader,
                    "voters": s.group_voters,
                    "commit_index": s.group_commit_index,
                    "applied_index": s.group_applied_index,
                    "lag_max": s.group_lag_max,
                    "restarts": s.group_restarts,
                    "images_installed": s.group_images_installed,
                }),
                Err(e) => serde_json::json!({ "addr": addr, "error": format!("{e:#}") }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&lines)?);
        return Ok(());
    }
    println!(
        "{:<22} {:>7} {:<10} {:>6} {:>6} {:>7} {:>10} {:>10} {:>6}",
        "address", "replica", "role", "term", "leader", "voters", "commit", "applied", "lag"
    );
    for (addr, r) in &answers {
        match r {
            Ok(s) => println!(
                "{:<22} {:>7} {:<10} {:>6} {:>6} {:>7} {:>10} {:>10} {:>6}",
                addr,
                s.group_replica_id,
                group_role_name(s.group_role),
                s.group_term,
                s.group_leader,
                s.group_voters,
                s.group_commit_index,
                s.group_applied_index,
                s.group_lag_max
            ),
            Err(e) => println!("{addr:<22} unreachable: {e:#}"),
        }
    }
    Ok(())
}
