//! `thor compact SRC DST`: rewrites a closed database into a new directory without its
//! garbage.
//!
//! ```text
//! thor compact SRC DST [--json]
//! ```
//!
//! The work is `thor_admin::compact`'s (whose module documentation has the rules: `DST` must
//! not exist and its parent must, `SRC` must be closed and is never written); this prints its
//! report. Check the result with `thor check DST`, then point the servers at it.

use std::path::PathBuf;
use std::time::Instant;

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
    let r = thor_admin::compact(&args.src, &args.dst)?;
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
