//! `thor backup`: a consistent copy of a database that opens as a database.
//!
//! - `thor backup --server ADDR NAME` asks a running server to copy its database, while it
//!   keeps serving commits, into `NAME` inside the directory its operator gave it (`thor server
//!   --backup-dir DIR`), on the server's machine: the `Backup` request, authenticated by the
//!   session token like every other request. NAME is a relative path of plain names, so a
//!   client can write nowhere else; a server without `--backup-dir` takes no backups.
//! - `thor backup --dir DB DEST` copies a database that no process has open
//!   (`thor_admin::backup_offline`).
//!
//! Either way the copy is what a crash would leave with everything synced (superblock, page
//! file, the log's durable records), made while install rounds and checkpoints wait, so
//! opening it runs ordinary recovery and gives exactly the commits up to the LSN printed.
//! `DEST` appears only once the copy is complete and synced (it is made under a hidden
//! sibling name, `.NAME.partial`, and renamed), and `thor check DEST` passes it.
//!
//! The rules a destination on this machine follows, the same as `thor compact`'s: `DEST` must
//! not exist and its parent must (nothing is created for a mistyped path); a leftover of an
//! interrupted run (`.NAME.partial` here, `.NAME.thor-upgrade` for compact) is removed by the
//! next run into the same place, with a log line, unless another run is writing it or it holds
//! files neither writes. With `--server`, NAME is a relative path inside the server's backup
//! directory, whose missing subdirectories the server makes.
//!
//! `--server` takes `HOST:PORT` (a name or an address) or `unix:PATH`, or a replica group's
//! replicas `R=HOST:PORT,...` (the leader takes the backup); the token comes from
//! `--token` or `THOR_TOKEN`, as for `thor server`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

/// Options of `thor backup`.
#[derive(Debug, Args)]
#[command(after_help = "DEST must not exist and its parent must (as for thor compact); a \
                        .DEST.partial left by an interrupted backup is removed first. With \
                        --server, DEST is a name inside the server's --backup-dir, on the \
                        server's machine (missing subdirectories are made there); the server \
                        writes it while it goes on committing. The copy opens as a database \
                        holding every commit up to the LSN printed.")]
pub struct BackupArgs {
    /// A running server's address (HOST:PORT or unix:PATH, or a replica group
    /// R=HOST:PORT,... whose leader takes it): it writes the copy itself, on its
    /// own machine.
    #[arg(long, conflicts_with = "dir", required_unless_present = "dir")]
    server: Option<String>,
    /// The server's token (as `thor server` was given it; default: $THOR_TOKEN, else none).
    #[arg(long, requires = "server")]
    token: Option<String>,
    /// A database directory that no process has open.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The new directory to write the copy into (with --server: a relative name inside the
    /// server's --backup-dir).
    dest: PathBuf,
}

pub fn run(a: BackupArgs) -> Result<()> {
    let start = Instant::now();
    let info = match (&a.server, &a.dir) {
        (Some(addr), _) => {
            over_the_wire(addr, &crate::stats::token_or_env(a.token.clone()), &a.dest)?
        }
        (None, Some(dir)) => thor_admin::backup_offline(dir, &a.dest)?,
        (None, None) => bail!("give --server or --dir"),
    };
    let place = if a.server.is_some() { " (in the server's backup directory)" } else { "" };
    println!(
        "backed up to {}{place}: commits up to LSN {}, {:.1} MB of pages and {:.1} MB of log in {:.2} s",
        a.dest.display(),
        info.lsn,
        info.page_bytes as f64 / 1e6,
        info.log_bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn over_the_wire(addr: &str, token: &str, dest: &std::path::Path) -> Result<thor_wire::BackupInfo> {
    let Some(path) = dest.to_str() else {
        bail!("{} is not UTF-8: the server takes the path as text", dest.display());
    };
    let s = crate::stats::connect(addr, token, "thor backup")?;
    let info = s.server_backup(path).context("the server could not back up")?;
    let _ = s.close();
    Ok(info)
}
