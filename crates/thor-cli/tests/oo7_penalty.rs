//! `thor oo7 penalty` end to end on the tiny database: it runs, its JSON has every figure for
//! every traversal and run, and the figures relate sanely. Timing never decides: only
//! relations that hold however slow or busy the machine is.

use std::process::{Command, Output};

use serde_json::Value;

fn thor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thor")).args(args).output().expect("thor runs")
}

#[test]
fn penalty_reports_every_figure_beside_the_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    let out = thor(&["oo7", "load", "--dir", dir, "--size", "tiny"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let charts = tmp.path().join("out");
    let out = thor(&[
        "oo7",
        "penalty",
        "--dir",
        dir,
        "--traversals",
        "t6,t1",
        "--runs",
        "2",
        "--round-trips",
        "300",
        "--warmup",
        "20",
        "--clients",
        "2",
        "--json",
        "--out",
        charts.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let fields: Vec<&str> =
        v["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(fields.len() >= 24, "{fields:?}");

    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 4, "two traversals, two runs");
    for s in samples {
        let f = |name: &str| -> f64 {
            let x = s[name].as_f64().unwrap_or_else(|| panic!("{name} missing in {s}"));
            assert!(x.is_finite() && x >= 0.0, "{name} = {x}");
            x
        };
        for name in &fields {
            f(name);
        }
        assert!(f("fetches") > 0.0, "a cold run fetches");
        assert!(f("fetch_us_p50") > 0.0 && f("fetch_us_p50") <= f("fetch_us_p99"), "{s}");
        assert!(f("floor_tcp_us_p50") > 0.0 && f("floor_tcp_us_p50") <= f("floor_tcp_us_p99"));
        assert!(f("floor_unix_us_p50") > 0.0 && f("floor_unix_us_p50") <= f("floor_unix_us_p99"));
        for pinned in ["floor_tcp_pinned_us", "floor_unix_pinned_us"] {
            let (p50, p99) = (f(&format!("{pinned}_p50")), f(&format!("{pinned}_p99")));
            assert!(p50 > 0.0 && p50 <= p99, "{pinned}");
        }
        assert!(f("fetch_s") <= f("elapsed_s"), "fetching is part of the traversal: {s}");
        let per_fetch = f("fetch_s") * 1e6 / f("fetches");
        assert!((per_fetch - f("fetch_us_mean")).abs() <= 1e-6 * per_fetch.max(1.0));
        let ratio = f("conversion_s") / f("fetch_s");
        assert!((ratio - f("conversion_to_fetch")).abs() <= 1e-9 * ratio.max(1.0));
        assert!(f("fetch_p50_to_tcp_floor") > 0.0);
        let floor = f("fetch_us_p50") / f("floor_tcp_us_p50");
        assert!((floor - f("fetch_p50_to_tcp_floor")).abs() <= 1e-9 * floor.max(1.0));
    }
    // The same database and seed fetch the same pages every run.
    assert_eq!(samples[0]["fetches"], samples[2]["fetches"]);

    let summary = v["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 2);
    for s in summary {
        assert_eq!(s["runs"], 2);
        for name in &fields {
            let (lo, mid, hi) = (
                s[name]["min"].as_f64().unwrap(),
                s[name]["median"].as_f64().unwrap(),
                s[name]["max"].as_f64().unwrap(),
            );
            assert!(lo <= mid && mid <= hi, "{name}: {lo} {mid} {hi}");
        }
    }
    let concurrent = v["concurrent"].as_array().unwrap();
    assert_eq!(concurrent.len(), 4, "two traversals, two runs, two clients at once");
    for c in concurrent {
        let f = |name: &str| c[name].as_f64().unwrap_or_else(|| panic!("{name} missing in {c}"));
        assert_eq!(c["clients"], 2);
        assert!(f("fetches") > 0.0 && f("fetch_us_p50") > 0.0, "{c}");
        assert!(
            f("fetch_us_p50") <= f("fetch_us_p99")
                && f("floor_tcp_us_p50") <= f("floor_tcp_us_p99")
        );
        assert!(f("fetch_p50_to_tcp_floor").is_finite() && f("fetch_p50_to_tcp_floor") > 0.0);
    }
    for f in v["floors"].as_array().unwrap() {
        for socket in ["tcp", "tcp_pinned", "unix", "unix_pinned"] {
            assert_eq!(f["floors"][socket]["round_trips"], 300, "{socket}");
            assert_eq!(f["floors"][socket]["reply_bytes"], 8192);
            assert_eq!(f["floors"][socket]["pinned"], socket.ends_with("pinned"));
        }
    }
    for file in ["samples.csv", "summary.csv", "penalty.png", "penalty.svg"] {
        assert!(charts.join(file).exists(), "{file}");
    }
    let csv = std::fs::read_to_string(charts.join("samples.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "a header and one line per sample");

    // The table names the floor; a bad traversal is refused with a message, not a panic.
    let out = thor(&["oo7", "penalty", "--dir", dir, "--runs", "1", "--round-trips", "100"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("loopback floor") && table.contains("t1-"), "{table}");
    let out = thor(&["oo7", "penalty", "--dir", dir, "--traversals", "t99"]);
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// `--figures` (the HAC paper's Figures 9-11): every traversal of `--at` is measured in every
/// run, the same fetches each time, and the parts of the fetch time add up to it: client,
/// network (the in-process hop, or over TCP the round trip less the server's timed service),
/// server and disk (direct reads, so disk is measured); over TCP the server timed every fetch.
/// Replacement's usage-computation and compaction parts (Figure 10) are there and never sum
/// to more than the whole. Relations only; no timing decides.
#[test]
fn penalty_figures_split_the_miss_and_the_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    let out = thor(&["oo7", "load", "--dir", dir, "--size", "tiny"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for over in ["embedded", "tcp"] {
        let charts = tmp.path().join(over);
        let out = thor(&[
            "oo7",
            "penalty",
            "--dir",
            dir,
            "--figures",
            "--at",
            "t6=0.05,t1=0.06",
            "--over",
            over,
            "--direct-reads",
            "--server-cache-mb",
            "0.1",
            "--runs",
            "2",
            "--json",
            "--out",
            charts.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(v["settings"]["foreground"], true, "Figure 9 is of HAC-FG");
        assert_eq!(v["settings"]["server_time_measured"], true);
        assert_eq!(v["settings"]["replacement_split_measured"], true, "HAC splits");
        let samples = v["samples"].as_array().unwrap();
        assert_eq!(samples.len(), 4, "two traversals, two runs");
        let t1: Vec<&Value> = samples.iter().filter(|s| s["traversal"] == "t1").collect();
        assert_eq!(t1[0]["fetches"], t1[1]["fetches"], "the same fetches each run");
        assert!(t1[0]["fetches"].as_u64().unwrap() > 0, "hot T1 misses in 0.06 MiB");
        for s in t1 {
            let f = |n: &str| s[n].as_f64().unwrap_or_else(|| panic!("{n} missing in {s}"));
            let parts = f("client_us") + f("network_us") + f("server_us") + f("disk_us");
            assert!((parts - f("fetch_us")).abs() <= 1e-6 * f("fetch_us").max(1.0), "{s}");
            let wire = f("network_us") + f("server_us");
            assert!((wire - f("network_and_server_us")).abs() <= 1e-6 * wire.max(1.0), "{s}");
            if over == "tcp" {
                assert_eq!(f("server_timed_per_fetch"), 1.0, "every fetch timed: {s}");
            } else {
                assert!(s["server_timed_per_fetch"].is_null(), "{s}");
            }
            let split = f("usage_us") + f("compaction_us");
            assert!(f("usage_us") > 0.0 && f("compaction_us") > 0.0, "{s}");
            assert!(split <= f("replacement_us") * (1.0 + 1e-9), "parts within the whole: {s}");
            let whole = split + f("replacement_other_us");
            assert!((whole - f("replacement_us")).abs() <= 1e-6 * whole.max(1.0), "{s}");
            assert!(f("disk_reads_per_fetch") > 0.0, "a 0.1 MiB server cache misses: {s}");
            assert!(f("replacement_us") > 0.0 && f("frames_compacted") + f("frames_evicted") > 0.0);
        }
        for file in ["figure9", "figure10", "figure11"] {
            for ext in ["csv", "png", "svg"] {
                assert!(charts.join(format!("{file}.{ext}")).exists(), "{file}.{ext}");
            }
        }
        let csv = std::fs::read_to_string(charts.join("figure11.csv")).unwrap();
        assert_eq!(csv.lines().count(), 3, "a header and one line per traversal");
        assert!(csv.contains(",server_us,"), "{csv}");
        let csv = std::fs::read_to_string(charts.join("figure10.csv")).unwrap();
        for col in [",usage_us,", ",compaction_us,", ",replacement_other_us,"] {
            assert!(csv.contains(col), "{col} in {csv}");
        }
    }
    let out = thor(&["oo7", "penalty", "--dir", dir, "--figures", "--at", "t1"]);
    assert!(!out.status.success(), "a point without a size is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("TRAVERSAL=MIB"));
}

/// `--prefetch 0,4 --prefetch-hint refs,next` runs every traversal once per setting in each
/// run, one row each: off prefetches nothing, and a setting that prefetches takes no more
/// round trips than off and counts what it used and wasted within what it prefetched. `oo7
/// run --prefetch` reports its setting and counts too.
#[test]
fn penalty_compares_prefetch_settings_in_one_sitting() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    let out = thor(&["oo7", "load", "--dir", dir, "--size", "tiny"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = thor(&[
        "oo7",
        "penalty",
        "--dir",
        dir,
        "--traversals",
        "t6,t1",
        "--runs",
        "1",
        "--round-trips",
        "100",
        "--warmup",
        "10",
        "--prefetch",
        "0,4",
        "--prefetch-hint",
        "refs,next",
        "--read-ahead",
        "true,false",
        "--over",
        "embedded",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let samples = v["samples"].as_array().unwrap();
    // Read-ahead applies to the creation-order hint only: refs:4 once, next:4 with and
    // without it.
    assert_eq!(samples.len(), 8, "two traversals, four settings, one run");
    for t in ["t6", "t1"] {
        let of = |p: &str| {
            samples
                .iter()
                .find(|s| s["traversal"] == t && s["prefetch"] == p)
                .unwrap_or_else(|| panic!("{t} {p}"))
        };
        let f = |s: &Value, name: &str| s[name].as_f64().unwrap();
        let off = of("off");
        assert_eq!(f(off, "pages_prefetched"), 0.0);
        for p in ["refs:4", "next:4", "next:4+ra"] {
            let s = of(p);
            assert!(f(s, "fetches") <= f(off, "fetches"), "{t} {p}: {s}");
            // Opening the database (before the measured run) fetches its root with up to 4
            // pages more, which the run may use.
            assert!(
                f(s, "prefetch_used") + f(s, "prefetch_evicted_unused")
                    <= f(s, "pages_prefetched") + f(s, "fetches") + 4.0,
                "{t} {p}: {s}"
            );
        }
    }
    assert_eq!(v["summary"].as_array().unwrap().len(), 8);

    let out = thor(&[
        "oo7",
        "run",
        "--dir",
        dir,
        "--traversal",
        "t1",
        "--prefetch",
        "4",
        "--prefetch-hint",
        "next",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(r["prefetch"]["pages"], 4);
    assert_eq!(r["prefetch"]["hint"], "next");
    assert_eq!(r["prefetch"]["read_ahead"], false, "off by default");
    assert!(r["pages_prefetched"].as_u64().unwrap() > 0, "{r}");
}
