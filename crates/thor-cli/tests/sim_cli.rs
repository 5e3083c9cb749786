//! `thor sim` end to end, on workloads small enough for a debug build.

use std::path::Path;
use std::process::{Command, Output};

fn thor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thor")).args(args).output().expect("thor runs")
}

/// A command line split at spaces (the tests' arguments have none inside).
fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = thor(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

/// Finds one design's summary in `thor sim demote --json` output.
fn summary<'a>(v: &'a serde_json::Value, design: &str) -> &'a serde_json::Value {
    let designs = v["designs"].as_array().unwrap();
    &designs.iter().find(|d| d["design"] == design).expect("design present")["summary"]
}

/// A loop of 15 blocks over two 8-block caches: the paper's section 4.5 at a small scale.
#[test]
fn demote_on_a_small_loop_reproduces_the_sequential_behaviour() {
    let v = json(&words(
        "sim demote --workload seq --blocks 15 --client-blocks 8 --array-blocks 8 --json",
    ));
    assert_eq!(v["requests"], 165);
    assert_eq!(v["warmup_requests"], 15);
    assert_eq!(summary(&v, "LRU-LRU-none")["disk_fraction"], 1.0);
    assert_eq!(summary(&v, "LRU-MRU-demote")["array_hit_fraction"], 1.0);
    // The MRU client keeps half the loop and the array the other half: one disk read per loop.
    let mru = summary(&v, "MRU-LRU-none");
    assert!((mru["disk_fraction"].as_f64().unwrap() - 1.0 / 15.0).abs() < 1e-9);
}

#[test]
fn a_malformed_trace_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    std::fs::write(&path, "client,block\n0,1\n0,one\n").unwrap();
    let out = thor(&["sim", "demote", "--trace", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.csv:3:") && stderr.contains("\"one\""), "{stderr}");
}

/// A generated workload written with `gen` and replayed with `--trace` gives the same results
/// as generating it again.
#[test]
fn gen_then_replay_matches_the_generated_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("zipf.csv");
    let workload = [
        "--workload",
        "zipf",
        "--blocks",
        "200",
        "--requests",
        "3000",
        "--clients",
        "2",
        "--seed",
        "9",
    ];
    let generate: Vec<&str> = ["sim", "gen"]
        .into_iter()
        .chain(workload)
        .chain(["--out", trace.to_str().unwrap()])
        .collect();
    assert!(thor(&generate).status.success());
    let caches = ["--client-blocks", "20", "--array-blocks", "30", "--warmup", "400", "--json"];
    let generated: Vec<&str> =
        ["sim", "demote"].into_iter().chain(workload).chain(caches).collect();
    let replayed: Vec<&str> =
        ["sim", "demote", "--trace", trace.to_str().unwrap()].into_iter().chain(caches).collect();
    let (a, b) = (json(&generated), json(&replayed));
    assert_eq!(a["designs"], b["designs"]);
}

#[test]
fn plots_and_csv_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("out.csv");
    let mut args =
        words("sim stack --workload random --blocks 300 --client-blocks 50 --array-blocks 50");
    args.extend(["--plot", dir.path().to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    let out = thor(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for ext in ["png", "svg"] {
        assert!(Path::new(&dir.path().join(format!("stack-random.{ext}"))).exists());
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("cache_blocks,lru_hit_fraction\n"));
    // The prediction for a random workload: an exclusive pair of 50-block caches holds 100 of
    // the 300 blocks, an inclusive one only 50.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("exclusive (predicted)"), "{stdout}");
}

#[test]
fn bad_designs_and_settings_are_refused() {
    let out = thor(&["sim", "demote", "--designs", "LRU-FIFO-demote"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown design"));
    let out = thor(&["sim", "demote", "--blocks", "0"]);
    assert!(!out.status.success());
    let out = thor(&["sim", "demote", "--bandwidth", "0", "--blocks", "10"]);
    assert!(!out.status.success());
}
