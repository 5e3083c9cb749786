//! `thor oo7 multi` end to end on the tiny database loaded with two modules: clients on their
//! own modules and on one shared module, counted and timed runs, the JSON report's shape and
//! sums, and the error for a database with too few modules.
//!
//! Writers (T2b) run with two clients too, on their own modules and on one shared module: their
//! commits invalidate each other's copies (neighbouring modules share a page at their
//! boundary), and conflicts are aborted and retried until every traversal commits.

use std::process::{Command, Output};

use serde_json::Value;

fn thor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thor")).args(args).output().expect("thor runs")
}

fn json(args: &[&str]) -> Value {
    let out = thor(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Checks one run of the report: its shape, every client's work, and that the totals are the
/// sums of the clients' figures. Returns the total traversals.
fn check_run(run: &Value, clients: u64, mode: &str, traversal: &str) -> u64 {
    assert_eq!(run["clients"], clients);
    assert_eq!(run["mode"], mode);
    assert_eq!(run["traversal"], traversal);
    assert_eq!(run["modules"], 2);
    assert_eq!(run["warmup_excluded"], true);
    let per = run["per_client"].as_array().unwrap();
    assert_eq!(per.len() as u64, clients);
    let mut sums = [0u64; 4];
    let mut longest = 0f64;
    for (i, c) in per.iter().enumerate() {
        assert_eq!(c["client"], i);
        let module = if mode == "private" { i } else { 0 };
        assert_eq!(c["module"], module, "{c}");
        assert!(u(&c["traversals"]) >= 1, "{c}");
        // One transaction per traversal.
        assert_eq!(c["commits"], c["traversals"], "{c}");
        assert!(c["traversals_per_s"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["warmup_s"].as_f64().unwrap() > 0.0, "{c}");
        for (k, f) in ["traversals", "commits", "aborts", "fetches"].iter().enumerate() {
            sums[k] += u(&c[f]);
        }
        longest = longest.max(c["elapsed_s"].as_f64().unwrap());
    }
    let t = &run["total"];
    for (k, f) in ["traversals", "commits", "aborts", "fetches"].iter().enumerate() {
        assert_eq!(u(&t[f]), sums[k], "total {f}");
    }
    assert_eq!(t["elapsed_s"].as_f64().unwrap(), longest);
    let rate = t["traversals_per_s"].as_f64().unwrap();
    assert!((rate - sums[0] as f64 / longest).abs() < 1e-6 * rate.max(1.0), "{t}");
    sums[0]
}

#[test]
fn oo7_multi_private_and_shared_on_the_tiny_database() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    let load = json(&["oo7", "load", "--dir", dir, "--size", "tiny", "--modules", "2", "--json"]);
    assert_eq!(load["counts"]["Module"], 2);

    let multi = |extra: &[&str]| {
        let mut args = vec!["oo7", "multi", "--dir", dir, "--cache-mb", "8", "--json"];
        args.extend_from_slice(extra);
        json(&args)
    };
    for mode in ["private", "shared"] {
        let v = multi(&["--traversal", "t1", "--clients", "1,2", "--mode", mode, "--repeat", "3"]);
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for (run, clients) in runs.iter().zip([1, 2]) {
            assert_eq!(run["repeat"], 3);
            assert_eq!(check_run(run, clients, mode, "t1"), 3 * clients);
            // Read-only: nothing to conflict with.
            assert_eq!(run["total"]["aborts"], 0);
        }
    }

    // A timed run: every client completes at least one traversal in its window.
    let v = multi(&["--traversal", "t1", "--clients", "2", "--seconds", "0.3"]);
    let run = &v["runs"][0];
    assert_eq!(run["seconds"], 0.3);
    check_run(run, 2, "private", "t1");

    // Update traversals commit their updates, alone, side by side and on one module.
    for (clients, mode) in [("1", "private"), ("2", "private"), ("2", "shared")] {
        let v =
            multi(&["--traversal", "t2b", "--clients", clients, "--mode", mode, "--repeat", "2"]);
        let run = &v["runs"][0];
        check_run(run, clients.parse().unwrap(), mode, "t2b");
        for c in run["per_client"].as_array().unwrap() {
            assert!(u(&c["updates"]) > 0 && c["updates"] == c["parts_visited"], "{c}");
        }
    }

    // Too few modules for private mode: a clear error, before any client runs.
    let out = thor(&["oo7", "multi", "--dir", dir, "--traversal", "t1", "--clients", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "the database has 2 modules; private mode with 3 clients needs 3: load it with \
             --modules 3"
        ),
        "{err}"
    );
    let out = thor(&["oo7", "multi", "--dir", dir, "--traversal", "q1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not walk"));
}

// `--sim` and `thor sim demote` need the simulators: the `lab` feature.
#[cfg(feature = "lab")]
#[test]
fn oo7_multi_compares_server_cache_placements_and_the_simulator_agrees_on_client_misses() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    json(&["oo7", "load", "--dir", dir, "--size", "tiny", "--modules", "2", "--json"]);
    let traces = tmp.path().join("traces");
    let out = tmp.path().join("out");
    // FPC client caches of a few frames and a server cache of 6 and 12 pages, below the
    // clients' working sets: every traversal fetches, and some fetches hit the server cache.
    let v = json(&[
        "oo7",
        "multi",
        "--dir",
        dir,
        "--traversal",
        "t1",
        "--clients",
        "2",
        "--repeat",
        "2",
        "--policy",
        "fpc",
        "--cache-mb",
        "0.1",
        "--page-cache",
        "inclusive,exclusive",
        "--server-cache-mb",
        "0.05,0.1",
        "--runs",
        "2",
        "--direct-io",
        "--sim",
        "--trace-out",
        traces.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    for p in points {
        let exclusive = p["placement"] == "exclusive";
        assert_eq!(p["runs"].as_array().unwrap().len(), 2, "{p}");
        assert_eq!(p["ms_per_traversal"].as_array().unwrap().len(), 2);
        for (run, sv) in p["runs"].as_array().unwrap().iter().zip(p["server"].as_array().unwrap()) {
            check_run(run, 2, "private", "t1");
            // Over the timed phase only the clients fetch: the server saw what they asked.
            let fetches = u(&run["total"]["fetches"]);
            assert!(fetches > 0, "{run}");
            assert_eq!(u(&sv["fetches"]), fetches, "{sv}");
            assert_eq!(u(&sv["hits"]) + u(&sv["reads"]), fetches, "{sv}");
            // Every miss waited for a device read, its own or one in flight it joined.
            let device = u(&sv["device_reads"]);
            assert!(device > 0 && device <= u(&sv["reads"]), "{sv}");
            assert!(sv["device_read_us"].as_f64().unwrap() > 0.0, "{sv}");
            assert_eq!(sv["demotions_refused"], 0, "{sv}");
            if exclusive {
                assert!(u(&sv["demoted_bytes"]) > 0 && u(&sv["demotions_stored"]) > 0, "{sv}");
            } else {
                assert_eq!((u(&sv["demote_notices"]), u(&sv["demoted_bytes"])), (0, 0), "{sv}");
            }
        }
        // The simulator, replaying the first run's page visits at the live sizes, misses the
        // client caches exactly as often as the live clients fetched (FPC is exact LRU).
        let sim = &p["sim"];
        assert_eq!(sim["design"], if exclusive { "LRU-MRU-demote" } else { "LRU-LRU-none" });
        assert_eq!(sim["client_misses"], p["runs"][0]["total"]["fetches"], "{p}");
        assert_eq!(
            u(&sim["array_hits"]) + u(&sim["disk_reads"]),
            u(&sim["client_misses"]),
            "{sim}"
        );
        // The trace file replays through `thor sim demote`.
        let file = p["trace_file"].as_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let warmup = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("# warm-up visits (before every client's cold traversal ended): ")
            })
            .unwrap();
        let replay = json(&[
            "sim",
            "demote",
            "--trace",
            file,
            "--warmup",
            warmup,
            "--client-blocks",
            &sim["client_blocks"].to_string(),
            "--array-blocks",
            &sim["array_blocks"].to_string(),
            "--designs",
            sim["design"].as_str().unwrap(),
            "--json",
        ]);
        assert_eq!(replay["designs"].as_array().unwrap().len(), 1, "{replay}");
    }
    for f in ["multi.csv", "multi.json", "multi-hits.png", "multi-reads.svg", "multi-time.png"] {
        assert!(out.join(f).is_file(), "{f} written");
    }
    let csv = std::fs::read_to_string(out.join("multi.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 2, "{csv}");
}
