//! `thor oo7` end to end on the tiny database (a debug build runs it in seconds): load, run
//! cold and hot with a trace, the whole suite, the native baseline, and a sweep with its CSV,
//! plots and the bisection for the smallest cache without misses.

use std::process::{Command, Output};

fn thor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thor")).args(args).output().expect("thor runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = thor(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

#[test]
fn load_run_native_and_sweep_the_tiny_database() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    let load = json(&["oo7", "load", "--dir", dir, "--size", "tiny", "--json"]);
    assert_eq!(load["counts"]["AtomicPart"], 400);
    assert_eq!(load["counts"]["Connection"], 1200);
    assert!(load["database_bytes"].as_u64().unwrap() > 0);

    // Cold T1 with a trace: every access is a line, and every line is in the measured run.
    let trace = tmp.path().join("t1.csv");
    let cold = json(&[
        "oo7",
        "run",
        "--dir",
        dir,
        "--traversal",
        "t1",
        "--policy",
        "hac",
        "--cache-mb",
        "4",
        "--trace-out",
        trace.to_str().unwrap(),
        "--json",
    ]);
    assert!(cold["fetches"].as_u64().unwrap() > 0);
    let native = json(&["oo7", "native", "--size", "tiny", "--traversal", "t1", "--json"]);
    assert_eq!(cold["parts_visited"], native["parts_visited"]);
    let lines = std::fs::read_to_string(&trace).unwrap();
    assert!(lines.starts_with("page,oref,measured\n"));
    assert!(
        lines.lines().filter(|l| l.ends_with(",1")).count() as u64
            > cold["parts_visited"].as_u64().unwrap()
    );

    // Hot with a big cache: no misses.
    let hot = json(&[
        "oo7",
        "run",
        "--dir",
        dir,
        "--traversal",
        "t1",
        "--policy",
        "fpc",
        "--cache-mb",
        "4",
        "--hot",
        "--json",
    ]);
    assert_eq!(hot["fetches"], 0);

    // The whole suite runs.
    let all =
        json(&["oo7", "run", "--dir", dir, "--traversal", "all", "--cache-mb", "2", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 25);

    let out = tmp.path().join("sweep");
    let sweep = json(&[
        "oo7",
        "sweep",
        "--dir",
        dir,
        "--traversal",
        "t6",
        "--policies",
        "hac,fpc",
        "--out",
        out.to_str().unwrap(),
        "--sizes-mb",
        "0.05,0.1,1",
        "--find-min",
        "--json",
    ]);
    assert_eq!(sweep["points"].as_array().unwrap().len(), 6);
    for f in ["t6.csv", "t6-fetches.png", "t6-fetches.svg", "t6-elapsed.png", "t6-min.json"] {
        assert!(out.join(f).exists(), "{f}");
    }
    let mins = sweep["min_cache"].as_array().unwrap();
    assert!(mins.iter().all(|m| m["min_cache_bytes"].as_u64().is_some()), "{mins:?}");
}
