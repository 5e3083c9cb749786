//! `map-bench` at a tiny size, so CI runs the whole workload of both engines: the binary
//! checks every lookup and the scan's count itself and exits non-zero on a mismatch; this
//! test checks that it succeeds and reports every concurrent insert as committed.

use std::process::Command;

fn run(engine: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_map-bench"))
        .args([engine, "--n", "3000", "--batch", "100", "--lookups", "3000"])
        .args(["--clients", "3", "--conc-inserts", "300", "--conc-batch", "20", "--json"])
        .output()
        .expect("map-bench runs");
    assert!(out.status.success(), "{engine}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn thor_runs_the_map_workload_and_commits_every_concurrent_insert() {
    let r = run("thor");
    assert_eq!(r["engine"], "thor");
    assert_eq!(r["conc_inserts"], 900);
    // 3 clients x 300 keys in transactions of 20.
    assert_eq!(r["conc_commits"], 45);
    assert!(r["scan_keys"].as_u64().unwrap() > 0);
}

#[test]
fn lmdb_runs_the_map_workload_without_aborts() {
    let r = run("lmdb");
    assert_eq!(r["engine"], "lmdb");
    assert_eq!(r["conc_inserts"], 900);
    assert_eq!(r["conc_commits"], 45);
    assert_eq!(r["conc_conflicts"], 0);
}
