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
