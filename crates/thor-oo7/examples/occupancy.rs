//! Where a hot OO7 run's client cache spends its budget (issue 15: why HAC needs more than
//! the objects in use and their entries).
//!
//! Runs a traversal hot (a warm-up run, then the measured one) on an embedded server at each
//! cache size given, and prints the measured run's fetches and the cache's occupancy after it:
//! frames by kind, installed objects' bytes, unused bytes in intact and compacted frames,
//! tables and headroom, against the bare minimum (installed objects' bytes plus one entry
//! each). With no fetch in the measured run nothing was replaced in it, so this is the state
//! the warm-up left.
//!
//! For a page cache (only intact frames) with no fetch in the measured run it also prints the
//! *page-cache bound*: at FPC's zero-fetch minimum its frames hold every page the traversal
//! touches, while any object cache must hold at least the objects used and their tables. Both
//! install the same objects, so with tables of `b` bytes per installed object FPC / (any object
//! cache) is at most `(budget - tables + n b) / (objects + n b)`; the line gives it for no
//! tables, Thor's 16 bytes and this cache's own bytes per installed object (issue 15's 2.5x
//! and 2.6x).
//!
//! ```text
//! cargo run --release -p thor-oo7 --example occupancy -- DIR TRAVERSAL POLICY MIB...
//! cargo run --release -p thor-oo7 --example occupancy -- /tmp/oo7/medium t1- hac 17.8 20 24
//! ```

use std::path::Path;

use thor_cache::PolicyConfig;
use thor_client::SessionConfig;
use thor_oo7::experiment::{Endpoint, RunConfig, Workload, connect, open_embedded, run_in};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        return Err("usage: occupancy DIR TRAVERSAL POLICY MIB...".into());
    }
    let engine = open_embedded(Path::new(&args[0]))?;
    let endpoint = Endpoint::Embedded(engine);
    let workload: Workload = args[1].parse()?;
    let policy: PolicyConfig = args[2].parse()?;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    for m in &args[3..] {
        let cache_bytes = (m.parse::<f64>()? * (1 << 20) as f64) as usize;
        let cfg = RunConfig {
            workload,
            policy,
            cache_bytes,
            hot: true,
            seed: 1,
            background_replacement: true,
            repeat: 1,
            commit_every: 0,
            prefetch: thor_oo7::experiment::PrefetchSetting::default(),
        };
        let s =
            connect(&endpoint, SessionConfig { cache_bytes, policy, ..SessionConfig::default() })?;
        let r = run_in(&s, &cfg, |_: Option<thor_core::Oref>, _: bool| {})?;
        let o = s.cache_occupancy();
        let page = o.page_bytes;
        let intact_unused = o.intact_frames * page - o.intact_installed_bytes;
        let compacted_tail = o.compacted_frames * page - o.compacted_used_bytes;
        let compacted_dead = o.compacted_used_bytes - o.compacted_installed_bytes;
        let installed = o.intact_installed + o.compacted_installed;
        println!("{} {} {m} MiB: {} fetches in the measured run", args[1], args[2], r.fetches);
        println!(
            "  bare minimum {:.2} MiB: {installed} installed objects, {:.2} MiB of objects + {:.2} MiB of {}-byte entries ({:.1}% of the budget)",
            mib(o.bare_minimum_bytes()),
            mib(o.intact_installed_bytes + o.compacted_installed_bytes),
            mib(installed * std::mem::size_of::<thor_cache::core::Entry>()),
            std::mem::size_of::<thor_cache::core::Entry>(),
            100.0 * o.bare_minimum_bytes() as f64 / o.budget_bytes as f64,
        );
        println!(
            "  frames: {} intact ({} superseded; {} of {} objects installed, {:.2} MiB of them), {} compacted ({:.2} MiB installed), {} free, {} retired, {} other",
            o.intact_frames,
            o.superseded_frames,
            o.intact_installed,
            o.intact_objects,
            mib(o.intact_installed_bytes),
            o.compacted_frames,
            mib(o.compacted_installed_bytes),
            o.free_frames,
            o.retired_frames,
            o.other_frames,
        );
        println!(
            "  beyond the minimum: intact frames' uninstalled bytes and headers {:.2} MiB, compacted frames' free tails {:.2} MiB and dead space {:.2} MiB, free frames {:.2} MiB",
            mib(intact_unused),
            mib(compacted_tail),
            mib(compacted_dead),
            mib(o.free_frames * page),
        );
        println!(
            "  tables {:.2} MiB ({:.1} bytes per entry; entries {:.2} for {} live, index {:.2}, read set {:.2}, manager {:.2}, other {:.2}), headroom {:.2} MiB, unaccounted {:.2} MiB; installed but unused (usage 0): {}",
            mib(o.table_bytes),
            o.table_bytes as f64 / o.entries.max(1) as f64,
            mib(o.entry_bytes),
            o.entries,
            mib(o.index_bytes),
            mib(o.read_set_bytes),
            mib(o.manager_bytes),
            mib(o.table_bytes - o.entry_bytes - o.index_bytes - o.read_set_bytes - o.manager_bytes),
            mib(o.headroom_bytes),
            mib(o.budget_bytes.saturating_sub(
                (o.intact_frames + o.compacted_frames + o.free_frames + o.other_frames) * page
                    + o.table_bytes
                    + o.headroom_bytes
            )),
            o.installed_unused,
        );
        if r.fetches == 0 && o.intact_frames > 0 && o.compacted_frames == 0 && installed > 0 {
            let objects = (o.intact_installed_bytes + o.compacted_installed_bytes) as f64;
            let rest = o.budget_bytes.saturating_sub(o.table_bytes) as f64;
            let own = o.table_bytes as f64 / installed as f64;
            let bound = |b: f64| {
                let t = installed as f64 * b;
                (rest + t) / (objects + t)
            };
            println!(
                "  page-cache bound: {:.2} MiB of pages for {:.2} MiB of used objects; FPC / any object cache at most {:.2}x with no tables, {:.2}x with 16 bytes per installed object, {:.2}x with this cache's {own:.1}",
                mib(o.intact_frames * page),
                mib(objects as usize),
                bound(0.0),
                bound(16.0),
                bound(own),
            );
        }
        let _ = s.close();
    }
    Ok(())
}
