//! `thor inspect`: look inside a database, offline on its directory or through a running
//! server, without changing it.
//!
//! ```text
//! thor inspect DIR roots                       the root slots: name, oref, class
//! thor inspect DIR classes [--progress]        every class: name, fields, objects counted
//! thor inspect DIR object TARGET [--follow F]  an object's class and fields, by name
//! thor inspect DIR map TARGET [--from K] [--limit N]   a map's entries in key order
//! thor inspect DIR seq TARGET [--from I] [--limit N]   a sequence's elements
//! thor inspect --connect ADDR [--token T] ...  the same through a server
//! ```
//!
//! TARGET is an oref as printed (`PAGE.OID`, e.g. `2.9`) or a root name (`root0`..`root14`,
//! `schema` for slot 15, the schema directory), optionally followed by a path of fields:
//! `root2.part_of.documentation`, `12.3.to.0` (a number is an element of a variable part of
//! references or of a sequence of references; `slotN` is slot N of a class whose descriptor
//! does not name its fields). `--follow F` (repeatable) appends steps.
//!
//! `--json` prints one JSON document per command; `docs/guide.md` ("Looking inside") lists
//! its fields. `map` and `seq` list at most `--limit` entries (50 by default) and read only
//! what they list (`model`'s module documentation says how).
//!
//! The pieces: [`source`] (the object-source seam: pages from a read-only engine in this
//! process or from a server, one implementation over a transport, and the bounded page
//! cache), [`model`] (decoding objects, classes, maps and sequences from those pages),
//! [`error`] (what can go wrong), [`limits`] (every bound).
//!
//! # `classes` through a server
//!
//! Offline and through a server alike, `classes` reads every page once, 1 to the last (found
//! by fetching, so a read-only credential suffices), and counts the objects of each class:
//! the same implementation, with progress on stderr. Through a live server the counts are
//! of each page as it was when read (commits during the scan may be half counted), and the
//! scan passes every page through the server's page cache: run it at a quiet time, or
//! offline on a backup (`thor backup`). A walk of the objects reachable from the roots was
//! the alternative; it would miss unreachable objects that `thor check` and a page scan see,
//! and need memory for a visited set as large as the database.

pub mod error;
pub mod limits;
pub mod model;
pub mod source;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use error::InspectError;
use limits::{LIST_DEFAULT, LIST_MAX};
use model::{About, Inspector, ObjectOut, parse_target};
use source::ObjectSource;

const AFTER_HELP: &str = "\
TARGET is an oref as printed (PAGE.OID, e.g. 2.9) or a root name (root0..root14, schema),
optionally followed by fields to follow: root2.part_of.documentation, 12.3.to.0 (a number is an
element of a collection or sequence of references; slotN names slot N of a class whose fields
have no names).

Offline, the database is opened read-only: nothing in DIR changes, a log left by a crash is
replayed in memory (as the next open would), and a database a server holds is refused (use
--connect). Through a server, the token comes from --token or THOR_TOKEN; reading needs a
read-only scope at least.";

/// Look inside a database: roots, classes, objects, maps and sequences.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct InspectArgs {
    /// The database directory (offline; the database must not be open read-write elsewhere).
    #[arg(required_unless_present = "connect", conflicts_with = "connect")]
    dir: Option<PathBuf>,
    /// Inspect through the server at this address (HOST:PORT or unix:PATH) instead.
    #[arg(long, value_name = "ADDR")]
    connect: Option<String>,
    /// The server's token (default: $THOR_TOKEN, else none).
    #[arg(long, requires = "connect")]
    token: Option<String>,
    /// Print one JSON document on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// What to show.
    #[command(subcommand)]
    what: What,
}

/// The `inspect` subcommands.
#[derive(Debug, Subcommand)]
enum What {
    /// The root slots that hold an object: name, oref, class.
    Roots,
    /// Every class: name, fields, and how many objects it has (reads every page).
    Classes {
        /// Show progress on stderr even when it is not a terminal (it is shown on a terminal).
        #[arg(long)]
        progress: bool,
    },
    /// An object: its class and each field's name, type and value.
    Object {
        /// An oref, a root name, or a path (see below).
        target: String,
        /// Follow this reference field (or element index) first; repeat to go further.
        #[arg(long, value_name = "FIELD")]
        follow: Vec<String>,
    },
    /// A map's entries in key order.
    Map {
        /// The map (its thor.Map header): an oref, a root name, or a path.
        target: String,
        /// Start at the first key at or after this one (bytes keys: 0x and hex, or text;
        /// a negative number may follow a space: --from -3).
        #[arg(long, allow_hyphen_values = true)]
        from: Option<String>,
        /// List at most this many entries.
        #[arg(long, default_value_t = LIST_DEFAULT, value_parser = limit_parser)]
        limit: usize,
    },
    /// A sequence's elements in index order.
    Seq {
        /// The sequence (its thor.Seq header): an oref, a root name, or a path.
        target: String,
        /// The first index to list.
        #[arg(long, default_value_t = 0)]
        from: usize,
        /// List at most this many elements.
        #[arg(long, default_value_t = LIST_DEFAULT, value_parser = limit_parser)]
        limit: usize,
    },
}

/// `--limit`: 1 to [`LIST_MAX`].
fn limit_parser(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n == 0 || n > LIST_MAX {
        return Err(format!("give 1 to {LIST_MAX} (page through more with --from)"));
    }
    Ok(n)
}

/// Runs `thor inspect`.
pub fn run(a: InspectArgs) -> Result<()> {
    let out = match (&a.connect, &a.dir) {
        (Some(addr), _) => {
            let token = crate::stats::token_or_env(a.token.clone());
            let src = source::connect(addr, &token)?;
            answer(src, &a.what, a.json)?
        }
        (None, Some(dir)) => answer(source::open_offline(dir)?, &a.what, a.json)?,
        (None, None) => anyhow::bail!("give a database directory or --connect ADDR"),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The answer to `what` from `src`, as text or one JSON document.
fn answer<S: ObjectSource>(src: S, what: &What, json: bool) -> Result<String, InspectError> {
    let mut ins = Inspector::new(src);
    let doc = |v: Value| serde_json::to_string_pretty(&v).expect("JSON values print") + "\n";
    Ok(match what {
        What::Roots => {
            let (root, roots) = ins.roots()?;
            if json {
                doc(serde_json::json!({ "root": root.to_string(), "roots": roots }))
            } else {
                let mut s = format!("root object {root}: {} of 16 slots used\n", roots.len());
                for r in &roots {
                    s += &format!("{:<8} {:<10} {}\n", r.name, r.target, about_text(&r.about));
                }
                s
            }
        }
        What::Classes { progress } => {
            let show = *progress || std::io::stderr().is_terminal();
            let bar = progress_bar(show);
            let census = ins.census(&mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
            bar.finish_and_clear();
            if json {
                doc(serde_json::to_value(&census).expect("serializable"))
            } else {
                classes_text(&census)
            }
        }
        What::Object { target, follow } => {
            let mut t = parse_target(target)?;
            t.steps.extend(follow.iter().cloned());
            if t.steps.len() > limits::PATH_STEPS_MAX {
                return Err(InspectError::BadTarget(format!(
                    "{target} with {} steps",
                    t.steps.len()
                )));
            }
            let oref = ins.resolve(&t)?;
            let o = ins.show(oref)?;
            if json {
                doc(serde_json::to_value(&o).expect("serializable"))
            } else {
                object_text(&o)
            }
        }
        What::Map { target, from, limit } => {
            let oref = ins.resolve(&parse_target(target)?)?;
            let m = ins.map(oref, from.as_deref(), *limit)?;
            if json {
                doc(serde_json::to_value(&m).expect("serializable"))
            } else {
                let mut s = format!(
                    "map {}: {} -> {}, {} entries from {}\n",
                    m.map,
                    m.key_type,
                    m.value_type,
                    m.entries.len(),
                    from.as_deref().map_or("the first key".to_string(), |f| format!("{f:?}"))
                );
                for e in &m.entries {
                    s += &format!("  {} => {}", value_text(&e.key), value_text(&e.value));
                    if let Some(t) = &e.target {
                        s += &format!("  -> {}", about_text(t));
                    }
                    s.push('\n');
                }
                match &m.next {
                    Some(k) => s += &format!("more: --from {}\n", value_text(k)),
                    None => s += "(end of map)\n",
                }
                s
            }
        }
        What::Seq { target, from, limit } => {
            let oref = ins.resolve(&parse_target(target)?)?;
            let q = ins.seq(oref, *from, *limit)?;
            if json {
                doc(serde_json::to_value(&q).expect("serializable"))
            } else {
                let end = q.from + q.entries.len();
                let mut s = format!(
                    "sequence {}: {} {}, elements {}..{end}\n",
                    q.seq, q.len, q.elem_type, q.from
                );
                for (i, v) in &q.entries {
                    s += &format!("  [{i}] {}\n", value_text(v));
                }
                if q.more {
                    s += &format!("more: --from {end}\n");
                }
                s
            }
        }
    })
}

/// A progress bar on stderr for the page scan, or a hidden one.
fn progress_bar(show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {percent:>3}% {pos}/{len} pages")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message("classes");
    bar
}

/// A value on one line: `null`, an oref or hex string as is, a number.
fn value_text(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `class (summary)`.
fn about_text(a: &About) -> String {
    match &a.summary {
        Some(s) => format!("{} ({s})", a.class),
        None => a.class.clone(),
    }
}

/// `object`'s text.
fn object_text(o: &ObjectOut) -> String {
    let mut s =
        format!("{}: {} (class {}), {} bytes\n", o.oref, o.class, o.class_oref, o.size_bytes);
    if let Some(sum) = &o.summary {
        s += &format!("  {sum}\n");
    }
    if !o.named_fields && !o.fields.is_empty() {
        s += "  (the class's descriptor names no fields: its slots by layout)\n";
    }
    for f in &o.fields {
        let value = match (&f.value, f.ty.starts_with("Option<")) {
            (Value::Null, true) => "None".to_string(),
            (v, _) => value_text(v),
        };
        s += &format!("  {}: {} = {value}", f.name, f.ty);
        if let Some(t) = &f.text {
            s += &format!(" {t:?}");
        }
        if let Some(t) = &f.target {
            s += &format!("  -> {}", about_text(t));
        }
        s.push('\n');
    }
    if let Some(v) = &o.var {
        let more = if v.truncated { ", ..." } else { "" };
        match &v.elements {
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(value_text).collect();
                s += &format!("  {} {}: [{}{more}]\n", v.count, v.kind, items.join(", "));
            }
            other => {
                s += &format!("  {} bytes: {}{more}", v.count, value_text(other));
                if let Some(t) = &v.text {
                    s += &format!(" {t:?}");
                }
                s.push('\n');
            }
        }
    }
    s
}

/// `classes`' text: a line per class with its count, then its fields.
fn classes_text(c: &model::Census) -> String {
    let mut s = format!("{} pages, {} objects, {} classes\n", c.pages, c.objects, c.classes.len());
    for k in &c.classes {
        s += &format!("{} ({}): {} objects\n", k.name, k.oref, k.objects);
        let var = match k.var {
            "none" => String::new(),
            v => format!(", then variable {v}"),
        };
        match &k.fields {
            Some(fields) => {
                let fs: Vec<String> =
                    fields.iter().map(|f| format!("{}: {}", f.name, f.ty)).collect();
                s += &format!(
                    "    {}{var}\n",
                    if fs.is_empty() { "no fields".into() } else { fs.join(", ") }
                );
            }
            None if k.fixed_bytes == 0 => s += &format!("    no fixed fields{var}\n"),
            None => {
                s += &format!(
                    "    {} bytes of fixed slots, names not recorded (format 1){var}\n",
                    k.fixed_bytes
                )
            }
        }
    }
    for (w, n) in &c.unknown_classes {
        s += &format!("{n} objects of class word {w}, which names no class object\n");
    }
    s
}
