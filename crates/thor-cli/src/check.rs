//! `thor check DIR`: the offline consistency checker (`thor_admin::check`, whose module
//! documentation says what is checked and how) on the command line: the report as text or JSON,
//! progress bars on stderr, and the exit status.
//!
//! ```text
//! thor check DIR [--json] [--progress] [--max-problems N] [--repair]
//! ```
//!
//! Exit status 0: the database is consistent (notes may be printed). 1: problems were found
//! (each on its own line). 2: the database could not be checked (not a database, in use, an
//! I/O error).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use thor_admin::check::{CheckOptions, Phase, Progress};

const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  the database is consistent (notes, such as a torn log tail that the next open cuts, may be printed)
  1  problems were found: one line each, naming the page and oid or the log segment, offset and LSN
  2  the database could not be checked: not a database, in use by another process, or an I/O error

With --repair, log records recovery cannot read are first set aside (each record's bytes kept in
log.<lsn>.aside, a report of what it held in log.<lsn>.aside.txt), then the database is checked;
the exit status is the check's.

The checker reads the committed state (the page file plus the log from the checkpoint on, as
recovery would replay it) and writes nothing: it opens the directory read-only, sharing it
with other readers.";

/// Check a database directory offline: pages, objects, references and the log.
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_STATUS_HELP, after_help = EXIT_STATUS_HELP)]
pub struct CheckArgs {
    /// The database directory.
    dir: PathBuf,
    /// Print the report as one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Show progress on stderr even when it is not a terminal (it is shown on a terminal).
    #[arg(long)]
    progress: bool,
    /// Print at most this many problems and as many notes (all are counted).
    #[arg(long, default_value_t = 1000)]
    max_problems: usize,
    /// First set aside every log record recovery cannot read (a database that does not open
    /// because of one names it and this option): each record's bytes are kept beside the log
    /// in `log.<lsn>.aside` with a report in `log.<lsn>.aside.txt`, and the well-formed part of
    /// it takes its place. Then the database is checked.
    #[arg(long)]
    repair: bool,
}

/// Runs the command; exits with status 1 or 2 itself (see the module documentation).
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let bars = Bars { show: args.progress || std::io::stderr().is_terminal() };
    let options = CheckOptions { max_problems: args.max_problems };
    let outcome = if args.repair {
        thor_admin::repair_and_check(&args.dir, &options, &bars)
    } else {
        thor_admin::check(&args.dir, &options, &bars).map(|r| (Vec::new(), r))
    };
    let code = match outcome {
        Ok((repaired, report)) => {
            if args.json {
                let mut v = report.to_json();
                if args.repair {
                    v["repaired"] = repaired
                        .iter()
                        .map(|r| {
                            serde_json::json!({
                                "segment": r.segment,
                                "offset": r.offset,
                                "lsn": r.lsn.0,
                                "why": r.why,
                                "set_aside": r.dropped,
                                "lossless": r.lossless,
                                "aside_file": r.aside.0,
                                "report_file": r.aside.1,
                            })
                        })
                        .collect();
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut out = std::io::stdout().lock();
                if args.repair && repaired.is_empty() {
                    writeln!(out, "nothing to repair: every log record decodes")?;
                }
                for r in &repaired {
                    for line in r.lines() {
                        writeln!(out, "{line}")?;
                    }
                }
                report.write_text(&mut out)?;
            }
            report.exit_status()
        }
        Err(why) => {
            if args.json {
                let v = serde_json::json!({
                    "dir": args.dir.display().to_string(),
                    "exit_status": 2,
                    "error": why.to_string(),
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            }
            eprintln!("thor check: cannot check {}: {why}", args.dir.display());
            2
        }
    };
    std::io::stdout().flush()?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Progress bars on stderr, or nothing.
struct Bars {
    /// Whether to draw bars.
    show: bool,
}

impl Progress for Bars {
    fn phase(&self, what: &str, len: Option<u64>) -> Box<dyn Phase> {
        if !self.show {
            return Box::new(Bar(ProgressBar::hidden()));
        }
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
        let template = if len.is_some() {
            "{msg:>18} [{bar:40}] {percent:>3}% {pos}/{len} eta {eta}"
        } else {
            "{msg:>18} {spinner} {pos} records"
        };
        bar.set_style(
            ProgressStyle::with_template(template).expect("static template").progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        Box::new(Bar(bar))
    }
}

/// One phase's bar.
struct Bar(ProgressBar);

impl Phase for Bar {
    fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
