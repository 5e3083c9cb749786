//! `oo7-lmdb footprint`: the smallest memory limit under which a hot traversal runs without a
//! major page fault (and, for thor, without a fetch), found by bisection over probes, each a
//! fresh process in a fresh memory cgroup.
//!
//! A probe at limit L:
//!
//! 1. drops the database's files from the OS page cache (`posix_fadvise DONTNEED`), so that
//!    what the probe reads is charged to its cgroup and can be evicted by its limit;
//! 2. makes a memory cgroup with limit L under this process's own (`oo7_lmdb::cgroup`);
//! 3. starts the probe process in it (it joins between fork and exec): it opens the database,
//!    runs the traversal once to warm up, then `--hot-runs` more times, counting major faults
//!    over those alone;
//! 4. passes if the process exited cleanly and the hot runs had no major fault (and, for
//!    thor, no fetch). A process the kernel killed for memory fails.
//!
//! The bisection keeps a limit that passes above one that fails, on a grid of `--step-mib`
//! (the top of the range is probed first and must pass; the bottom, which usually thrashes
//! until the deadline, only if the search comes down to it), then probes the answer
//! `--confirm` more times, moving up a step whenever a confirmation fails (reclaim is not
//! exactly repeatable, so the boundary can be ragged). Every probe is printed and kept in the
//! JSON.
//!
//! What the limit covers: everything the cgroup is charged for while the probe runs: the
//! process's anonymous memory (heap, stacks; thor's client cache and the embedded server's
//! page cache and tables live here), the page-cache pages it reads (LMDB's map and thor's
//! database file reads), and kernel memory charged to it. Not covered: pages that were cached
//! before the probe joined the cgroup, chiefly the binary's and the C library's own pages,
//! which are the same binary for both stores.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use oo7_lmdb::cgroup::{MemoryCgroup, Parent};
use oo7_lmdb::limits::{
    CGROUP_LIMIT_MAX_MIB, CGROUP_LIMIT_MIN_MIB, CGROUP_STEP_MIN_MIB, CHILD_TIMEOUT_S, PROBES_MAX,
    RUNS_MAX,
};
use oo7_lmdb::store;
use oo7_lmdb::sys::{self, Exit};
use serde::Serialize;
use serde_json::json;
use thor_oo7::Op;

use crate::child::{self, ProbeOut};

/// thor's side of a footprint.
#[derive(Debug, Clone)]
pub struct ThorFootprint {
    /// The database directory.
    pub dir: PathBuf,
    /// Client cache budget, MiB.
    pub cache_mb: f64,
    /// The client cache manager.
    pub policy: String,
    /// The embedded server's page cache, MiB.
    pub server_cache_mb: f64,
}

/// `footprint`'s settings.
#[derive(Debug, Clone)]
pub struct FootprintSettings {
    /// The LMDB environment to probe, if any.
    pub lmdb_dir: Option<PathBuf>,
    /// Whether LMDB lets the kernel read ahead around its map's faults (its default).
    pub lmdb_readahead: bool,
    /// thor's database to probe, if any.
    pub thor: Option<ThorFootprint>,
    /// The traversal.
    pub traversal: Op,
    /// The lower end of the search, MiB.
    pub lo_mib: f64,
    /// The upper end, MiB.
    pub hi_mib: f64,
    /// The grid, MiB.
    pub step_mib: f64,
    /// Hot runs per probe.
    pub hot_runs: u32,
    /// Confirmations of the answer.
    pub confirm: u32,
    /// A probe's deadline (a thrashing probe fails when it passes).
    pub probe_timeout: Duration,
    /// Where to write the probes as JSON.
    pub json: Option<PathBuf>,
}

/// One probe.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// The limit asked for, MiB.
    pub limit_mib: f64,
    /// The limit the kernel set, bytes.
    pub limit_bytes: u64,
    /// Whether the hot runs had no major fault (and no fetch).
    pub passed: bool,
    /// Why not, or "ok".
    pub verdict: String,
    /// The database's pages still in the OS page cache when the probe started.
    pub resident_pages_before: u64,
    /// The probe's report, if it finished.
    pub report: Option<ProbeOut>,
    /// The cgroup's peak charge, bytes.
    pub peak_bytes: Option<u64>,
    /// OOM kills in the cgroup.
    pub oom_kills: Option<u64>,
    /// The whole probe's elapsed time.
    pub wall_s: f64,
}

/// A bisection's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Bisection {
    /// Which store.
    pub store: String,
    /// The smallest limit that passed every confirmation, MiB (`None`: not even the top).
    pub min_mib: Option<f64>,
    /// Every probe, in order.
    pub probes: Vec<Probe>,
}

/// Drops every regular file of `path` (or `path`, a file) from the page cache; returns the
/// pages still resident.
fn drop_cache(path: &Path) -> Result<u64> {
    let files = crate::run::files_of(path)?;
    let mut resident = 0;
    for f in files {
        sys::drop_from_page_cache(&f)?;
        resident += sys::resident_pages(&f)?.0;
    }
    Ok(resident)
}

/// One probe at `limit_mib`: `files` dropped from the page cache, `cmd` run in a new cgroup.
fn probe(
    parent: &Parent,
    files: &Path,
    cmd: Command,
    limit_mib: f64,
    timeout: Duration,
    needs_no_fetch: bool,
) -> Result<Probe> {
    let resident_pages_before = drop_cache(files)?;
    let limit_bytes = (limit_mib * (1u64 << 20) as f64) as u64;
    let cg = MemoryCgroup::create(parent, "oo7-lmdb-probe", limit_bytes)?;
    let limit_bytes = cg.limit_bytes()?;
    let e = child::spawn::<ProbeOut>(cmd, Some(&cg), timeout)?;
    let (peak_bytes, oom_kills) = (cg.peak_bytes(), cg.oom_kills());
    drop(cg);
    let verdict = match (&e.exit, &e.out) {
        (Exit::Code(0), Some(r)) if r.hot_majflt > 0 => {
            format!("{} major faults in the hot runs", r.hot_majflt)
        }
        (Exit::Code(0), Some(r)) if needs_no_fetch && r.hot_fetches.unwrap_or(1) > 0 => {
            format!("{} fetches in the hot runs", r.hot_fetches.unwrap_or(0))
        }
        (Exit::Code(0), Some(_)) => "ok".to_string(),
        (Exit::TimedOut, _) => format!("thrashing: killed after {:.0} s", timeout.as_secs_f64()),
        (Exit::Signal(9), _) => format!(
            "killed by the kernel (out of memory; {} OOM kills in the cgroup)",
            oom_kills.map_or("?".into(), |k| k.to_string())
        ),
        (exit, _) => format!("failed ({exit:?}): {}", e.stderr_tail),
    };
    Ok(Probe {
        limit_mib,
        limit_bytes,
        passed: verdict == "ok",
        verdict,
        resident_pages_before,
        report: e.out,
        peak_bytes,
        oom_kills,
        wall_s: e.wall_s,
    })
}

fn show(store: &str, p: &Probe) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let r = p.report.as_ref();
    eprintln!(
        "  {store} at {:7.3} MiB: {:<4} {} (warm-up {} major faults, {:.0} ms; hot {}; peak charge {}; RSS anon {} file {}; {} pages cached at start; {:.1} s)",
        p.limit_mib,
        if p.passed { "pass" } else { "FAIL" },
        p.verdict,
        r.map_or("-".into(), |r| r.warmup_majflt.to_string()),
        r.map_or(0.0, |r| r.warmup_s * 1e3),
        r.map_or("-".into(), |r| r
            .hot_s
            .iter()
            .map(|s| format!("{:.0} ms", s * 1e3))
            .collect::<Vec<_>>()
            .join(", ")),
        p.peak_bytes.map_or("-".into(), |b| format!("{:.2} MiB", mib(b))),
        r.map_or("-".into(), |r| format!("{:.2} MiB", r.resident.anon_kib as f64 / 1024.0)),
        r.map_or("-".into(), |r| format!("{:.2} MiB", r.resident.file_kib as f64 / 1024.0)),
        p.resident_pages_before,
        p.wall_s,
    );
}

/// The grid and the confirmations of a bisection.
#[derive(Debug, Clone, Copy)]
struct Grid {
    /// The lower end, MiB.
    lo_mib: f64,
    /// The upper end, MiB.
    hi_mib: f64,
    /// The step, MiB.
    step_mib: f64,
    /// Passing probes needed at the answer.
    confirm: u32,
}

/// Bisects `run_probe` over `g`'s grid.
fn bisect(
    store: &str,
    g: Grid,
    mut run_probe: impl FnMut(f64) -> Result<Probe>,
) -> Result<Bisection> {
    let step = g.step_mib;
    let mut probes = Vec::new();
    let mut at = |units: u64, probes: &mut Vec<Probe>| -> Result<bool> {
        if probes.len() as u32 >= PROBES_MAX {
            bail!("{store}: {PROBES_MAX} probes without an answer (a ragged boundary?)");
        }
        let p = run_probe(units as f64 * step)?;
        show(store, &p);
        let ok = p.passed;
        probes.push(p);
        Ok(ok)
    };
    let mut lo = (g.lo_mib / step).ceil() as u64;
    let mut hi = (g.hi_mib / step).floor() as u64;
    eprintln!("{store}: bisecting {:.3}..{:.3} MiB in steps of {step} MiB", g.lo_mib, g.hi_mib);
    if !at(hi, &mut probes)? {
        eprintln!(
            "{store}: the hot runs fault even at {:.3} MiB; give a larger --hi-mib",
            g.hi_mib
        );
        return Ok(Bisection { store: store.into(), min_mib: None, probes });
    }
    // Invariant: `hi` passed; `lo` failed or was not probed (the bottom of the range usually
    // thrashes until the deadline, so it is probed only if the search comes down to it).
    let mut lo_failed = false;
    while hi > lo + 1 || (hi == lo + 1 && !lo_failed) {
        let mid = if hi == lo + 1 { lo } else { lo + (hi - lo) / 2 };
        if at(mid, &mut probes)? {
            hi = mid;
            if hi == lo {
                eprintln!("{store}: passes at the bottom of the range; give a smaller --lo-mib");
                break;
            }
        } else {
            lo = mid;
            lo_failed = true;
        }
    }
    let mut confirmed = 0;
    while confirmed < g.confirm {
        if at(hi, &mut probes)? {
            confirmed += 1;
        } else {
            hi += 1;
            confirmed = 0;
        }
    }
    let min_mib = hi as f64 * step;
    eprintln!("{store}: smallest limit without a fault in the hot runs: {min_mib:.3} MiB");
    Ok(Bisection { store: store.into(), min_mib: Some(min_mib), probes })
}

/// Runs the footprint bisections and prints the answer.
pub fn footprint(s: &FootprintSettings) -> Result<()> {
    if !(CGROUP_LIMIT_MIN_MIB..=CGROUP_LIMIT_MAX_MIB).contains(&s.lo_mib)
        || !(CGROUP_LIMIT_MIN_MIB..=CGROUP_LIMIT_MAX_MIB).contains(&s.hi_mib)
        || s.lo_mib >= s.hi_mib
    {
        bail!(
            "--lo-mib and --hi-mib must satisfy {CGROUP_LIMIT_MIN_MIB} <= lo < hi <= {CGROUP_LIMIT_MAX_MIB}"
        );
    }
    if !(s.step_mib >= CGROUP_STEP_MIN_MIB && s.step_mib <= s.hi_mib - s.lo_mib) {
        bail!("--step-mib must be at least {CGROUP_STEP_MIN_MIB} and at most hi - lo");
    }
    if s.hot_runs == 0 || s.hot_runs > RUNS_MAX || s.confirm > RUNS_MAX {
        bail!("--hot-runs must be in 1..={RUNS_MAX}, --confirm at most {RUNS_MAX}");
    }
    if s.probe_timeout.is_zero() || s.probe_timeout > Duration::from_secs(CHILD_TIMEOUT_S) {
        bail!("--probe-timeout-s must be in 1..={CHILD_TIMEOUT_S}");
    }
    if s.traversal.writes() || !oo7_lmdb::traverse::supports(s.traversal) {
        bail!(
            "{} cannot be probed: give a read-only traversal (t6, t1-, t1, t1+)",
            s.traversal.name()
        );
    }
    if s.lmdb_dir.is_none() && s.thor.is_none() {
        bail!("nothing to probe: give --dir (LMDB) and/or --thor-dir");
    }
    let parent = Parent::find().context(
        "a memory cgroup is needed (root, and a writable v1 memory hierarchy or v2 with the memory controller)",
    )?;
    eprintln!("memory cgroups: {:?} under {}", parent.version, parent.dir.display());
    let grid =
        Grid { lo_mib: s.lo_mib, hi_mib: s.hi_mib, step_mib: s.step_mib, confirm: s.confirm };
    let exe = std::env::current_exe()?;
    let mut results = Vec::new();
    if let Some(dir) = &s.lmdb_dir {
        let data = dir.join(store::DATA_FILE);
        let name = if s.lmdb_readahead { "LMDB" } else { "LMDB (MDB_NORDAHEAD)" };
        let r = bisect(name, grid, |mib| {
            let mut c = Command::new(&exe);
            c.args(["child-probe", "--dir"]).arg(dir).args(["--traversal", s.traversal.name()]);
            c.args(["--hot", &s.hot_runs.to_string()]);
            if !s.lmdb_readahead {
                c.arg("--no-readahead");
            }
            probe(&parent, &data, c, mib, s.probe_timeout, false)
        })?;
        results.push(r);
    }
    if let Some(t) = &s.thor {
        let name = format!(
            "thor ({} {} MiB, server cache {} MiB)",
            t.policy, t.cache_mb, t.server_cache_mb
        );
        let r = bisect(&name, grid, |mib| {
            let mut c = Command::new(&exe);
            c.args(["child-probe-thor", "--dir"]).arg(&t.dir);
            c.args(["--traversal", s.traversal.name(), "--hot", &s.hot_runs.to_string()]);
            c.args(["--policy", &t.policy, "--cache-mb", &t.cache_mb.to_string()]);
            c.args(["--server-cache-mb", &t.server_cache_mb.to_string()]);
            probe(&parent, &t.dir, c, mib, s.probe_timeout, true)
        })?;
        results.push(r);
    }
    println!();
    println!(
        "| hot {} | smallest memory limit without a major fault (MiB) | probes |",
        s.traversal.name()
    );
    println!("|---|---|---|");
    for r in &results {
        println!(
            "| {} | {} | {} |",
            r.store,
            r.min_mib.map_or(format!("above {}", s.hi_mib), |m| format!("{m:.3}")),
            r.probes.len()
        );
    }
    if let Some(path) = &s.json {
        let v = json!({
            "traversal": s.traversal.name(), "step_mib": s.step_mib, "hot_runs": s.hot_runs,
            "confirm": s.confirm, "cgroup": format!("{:?}", parent.version), "results": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(limit_mib: f64, passed: bool) -> Result<Probe> {
        Ok(Probe {
            limit_mib,
            limit_bytes: (limit_mib * 1048576.0) as u64,
            passed,
            verdict: if passed { "ok".into() } else { "1 major faults in the hot runs".into() },
            resident_pages_before: 0,
            report: None,
            peak_bytes: None,
            oom_kills: None,
            wall_s: 0.0,
        })
    }

    const GRID: Grid = Grid { lo_mib: 8.0, hi_mib: 64.0, step_mib: 0.25, confirm: 2 };

    #[test]
    fn the_bisection_finds_the_threshold_on_the_grid_without_probing_the_bottom() {
        let b = bisect("fake", GRID, |m| fake(m, m >= 20.6)).unwrap();
        assert_eq!(b.min_mib, Some(20.75));
        assert!(b.probes.iter().all(|p| p.limit_mib > 8.0), "the bottom thrashes: not probed");
        assert!(b.probes.len() <= 12, "{} probes", b.probes.len());
    }

    #[test]
    fn a_failed_confirmation_moves_the_answer_up() {
        let mut seen_at_min = 0;
        let b = bisect("fake", GRID, |m| {
            if m == 20.75 {
                seen_at_min += 1;
                // Passes during the search, then fails its first confirmation.
                return fake(m, seen_at_min != 2);
            }
            fake(m, m >= 20.6)
        })
        .unwrap();
        assert_eq!(b.min_mib, Some(21.0));
    }

    #[test]
    fn the_ends_of_the_range_are_reported() {
        let b = bisect("fake", GRID, |m| fake(m, false)).unwrap();
        assert_eq!((b.min_mib, b.probes.len()), (None, 1));
        let b = bisect("fake", GRID, |m| fake(m, true)).unwrap();
        assert_eq!(b.min_mib, Some(8.0));
    }
}
