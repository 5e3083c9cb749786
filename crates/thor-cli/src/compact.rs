//! `thor compact SRC DST`: rewrites a closed database into a new directory without its
//! garbage.
//!
//! ```text
//! thor compact SRC DST [--json]
//! ```
//!
//! This is `thor_server::upgrade` with no class changed (an upgrade that appends fields to
//! classes needs the program's new declarations, so it is a library call: `thor::Upgrade`).
//! Every object reachable from the root is copied, in the same order, into `DST`, which must
//! not exist and whose parent must (the rule `thor backup` follows: a mistyped path creates
//! nothing), and which appears only once complete; unreachable objects are dropped. An
//! interrupted run leaves `.DST.thor-upgrade` beside it, which the next run into the same
//! place reclaims, with a log line (as `thor backup` reclaims its `.DST.partial`). `SRC` must be
//! closed (the command takes its lock) and is never written. Check the result with
//! `thor check DST`, then point the servers at it.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

/// Rewrite a closed database into a new directory, dropping unreachable objects.
#[derive(Debug, Args)]
#[command(after_help = "DST must not exist and its parent must (as for thor backup); a \
                        .DST.thor-upgrade left by an interrupted compact is removed first.")]
pub struct CompactArgs {
    /// The database to read (closed: stop its server first). It is never written.
    src: PathBuf,
    /// The new database's directory (must not exist; its parent must).
    dst: PathBuf,
    /// Print the report as one JSON document.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: CompactArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let parent = match args.dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        anyhow::bail!(
            "compacting into {}: its parent directory does not exist (create it first)",
            args.dst.display()
        );
    }
    let r = thor_server::upgrade(&args.src, &args.dst, &[]).with_context(|| {
        format!("compacting {} into {}", args.src.display(), args.dst.display())
    })?;
    let elapsed_s = start.elapsed().as_secs_f64();
    if args.json {
        let v = serde_json::json!({
            "src": args.src.display().to_string(),
            "dst": args.dst.display().to_string(),
            "source_pages": r.source_pages,
            "source_objects": r.source_objects,
            "objects": r.objects,
            "dropped": r.dropped,
            "pages": r.pages,
            "bytes": r.bytes,
            "elapsed_s": elapsed_s,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "compacted {} into {}: {} objects in {} pages (from {} objects in {} pages), {} \
             unreachable objects dropped, in {elapsed_s:.2} s",
            args.src.display(),
            args.dst.display(),
            r.objects,
            r.pages,
            r.source_objects,
            r.source_pages,
            r.dropped,
        );
    }
    Ok(())
}
