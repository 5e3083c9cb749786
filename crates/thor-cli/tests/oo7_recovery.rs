//! `thor oo7 recovery-study` end to end on the tiny database: every mode runs, and the counts
//! relate as the modes are built (timing never decides): `obj` sends no page records, the
//! page modes send records, ESM ships the written pages whole and REDO none, a recovery
//! buffer of one page sends PD's records early and SD's 64-byte blocks need room no more
//! often, every diffing mode writes the same log bytes (thor's commit record), and WPL sends
//! no records, ships its written pages and logs them whole (more log bytes than any other).
//! With the paper's memory split and page images bounded at two pages, every page mode steals
//! dirty pages before the commit.

use std::process::{Command, Output};

use serde_json::Value;

fn thor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_thor")).args(args).output().expect("thor runs")
}

/// Loads a tiny OO7 database with `modules` modules into `tmp` and runs
/// `thor oo7 recovery-study` on it, T2B only, two timed transactions and one run per point,
/// with `args` besides; returns the results directory and its points.
fn study(tmp: &std::path::Path, modules: &str, args: &[&str]) -> (std::path::PathBuf, Vec<Value>) {
    let db = tmp.join("db");
    let dir = db.to_str().unwrap();
    let out = thor(&["oo7", "load", "--dir", dir, "--size", "tiny", "--modules", modules]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = tmp.join("out");
    let mut all = vec!["oo7", "recovery-study", "--dir", dir, "--traversals", "t2b"];
    all.extend_from_slice(&["--repeat", "2", "--runs", "1", "--out", results.to_str().unwrap()]);
    all.extend_from_slice(args);
    let out = thor(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = std::fs::read(results.join("recovery-study.json")).unwrap();
    (results, serde_json::from_slice(&json).unwrap())
}

#[test]
fn every_mode_runs_and_its_counts_relate() {
    let tmp = tempfile::tempdir().unwrap();
    // 8 KiB of recovery buffer: one page of PD copies, 128 blocks of SD.
    let (results, points) =
        study(tmp.path(), "2", &["--clients", "1,2", "--buffer-mb", "0.0078125"]);
    for f in ["recovery-study.csv", "recovery-t2b-response.svg", "recovery-t2b-shipped.png"] {
        assert!(results.join(f).exists(), "{f}");
    }
    assert_eq!(points.len(), 6 * 2, "six modes, two client counts");
    let get = |mode: &str, clients: u64, field: &str| -> f64 {
        let p = points
            .iter()
            .find(|p| p["mode"] == mode && p["clients"] == clients)
            .unwrap_or_else(|| panic!("{mode} with {clients} missing"));
        p[field].as_f64().unwrap_or_else(|| panic!("{field} of {mode}"))
    };
    for clients in [1, 2] {
        assert!(get("obj", clients, "commits") > 0.0);
        assert_eq!(get("obj", clients, "records_per_txn"), 0.0);
        let log = get("obj", clients, "log_bytes_per_txn");
        for mode in ["pd-redo", "pd-esm", "sd-esm", "sl-esm"] {
            assert!(get(mode, clients, "records_per_txn") > 0.0, "{mode}");
            assert_eq!(get(mode, clients, "log_bytes_per_txn"), log, "{mode}: thor's record");
        }
        assert_eq!(get("pd-redo", clients, "pages_per_txn"), 0.0);
        for mode in ["pd-esm", "sd-esm", "sl-esm"] {
            assert!(get(mode, clients, "pages_per_txn") > 0.0, "{mode}");
        }
        // One page of PD copies holds one written page; the same bytes of SD's blocks hold at
        // least that page's written blocks, usually several pages'.
        let (pd, sd) = (
            get("pd-redo", clients, "early_records_per_txn"),
            get("sd-esm", clients, "early_records_per_txn"),
        );
        assert!(pd > 0.0 && sd <= pd, "early records: pd {pd}, sd {sd}");
        // WPL: pages only, each logged whole (a page image per written page: at least the
        // smallest page size, 4 KiB, of log per image). Pages shipped per committed
        // transaction may exceed the images: a commit the page rule refuses (two clients'
        // modules can share a page) shipped its pages and logged none.
        assert_eq!(get("wpl", clients, "records_per_txn"), 0.0);
        let pages = get("wpl", clients, "pages_per_txn");
        assert!(pages >= 1.0, "wpl pages per txn {pages}");
        let images = get("wpl", clients, "wpl_images_per_txn");
        assert!(images >= 1.0 && images <= pages, "wpl images per txn {images}, pages {pages}");
        let wlog = get("wpl", clients, "log_bytes_per_txn");
        assert!(wlog >= images * 4096.0, "wpl log bytes {wlog}, images {images}");
        assert!(wlog > log, "wpl logs more than obj");
        assert_eq!(get("pd-esm", clients, "wpl_images_per_txn"), 0.0);
    }
}

#[test]
fn memory_is_split_as_the_paper_does_and_bounded_images_steal_dirty_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let (results, points) = study(
        tmp.path(),
        "1",
        // Two 8 KiB page images.
        &["--clients", "1", "--memory-mb", "4", "--buffer-mb", "1", "--images-mb", "0.015625"],
    );
    assert!(results.join("recovery-t2b-writes.svg").exists());
    let get = |mode: &str, field: &str| -> f64 {
        let p = points.iter().find(|p| p["mode"] == mode).unwrap_or_else(|| panic!("{mode}"));
        p[field].as_f64().unwrap_or_else(|| panic!("{field} of {mode}"))
    };
    // obj and wpl take the whole memory as cache; a diffing mode leaves its buffer out.
    assert_eq!((get("obj", "cache_mb"), get("wpl", "cache_mb")), (4.0, 4.0));
    assert_eq!(get("obj", "stolen_per_txn"), 0.0);
    for mode in ["pd-redo", "pd-esm", "sd-esm", "sl-esm", "wpl"] {
        if mode != "wpl" {
            assert_eq!(get(mode, "cache_mb"), 3.0, "{mode}");
        }
        assert!(get(mode, "stolen_per_txn") > 0.0, "{mode} steals with two images");
        // What goes early is counted in the log-record pages (records, write sets).
        assert!(get(mode, "log_pages_per_txn") > 0.0, "{mode}");
    }
    // A stolen page goes whole in ESM and WPL, and is shipped again if written again, so
    // those ship at least as many pages as they steal; REDO ships none.
    for mode in ["pd-esm", "sd-esm", "sl-esm", "wpl"] {
        assert!(get(mode, "pages_per_txn") >= get(mode, "stolen_per_txn"), "{mode}");
    }
    assert_eq!(get("pd-redo", "pages_per_txn"), 0.0);
}
