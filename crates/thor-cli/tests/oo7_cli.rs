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

/// The bytes of every file of the database in `dir` but its lock file (which names its last
/// holder).
fn database_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "LOCK")
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_sweep_of_an_update_traversal_runs_every_point_on_a_fresh_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    json(&["oo7", "load", "--dir", dir, "--size", "tiny", "--json"]);
    let before = database_files(&db);
    let out = tmp.path().join("sweep");
    let sweep = json(&[
        "oo7",
        "sweep",
        "--dir",
        dir,
        "--traversal",
        "t2b",
        "--policies",
        "hac,fpc",
        "--sizes-mb",
        "1,2",
        "--repeat",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!((sweep["repeat"].as_u64(), sweep["fresh_copies"].as_bool()), (Some(3), Some(true)));
    assert!(sweep["database_changed"].is_null(), "{sweep}");
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    // Every point updated the same parts, from the same database.
    assert!(points.iter().all(|p| p["updates"] == points[0]["updates"]), "{points:?}");
    assert!(points[0]["updates"].as_u64().unwrap() > 0);
    // ... and none of them touched the one the sweep was given.
    assert!(database_files(&db) == before, "the sweep changed the database it was given");
}

/// The series a sweep derives: HAC-FG runs with foreground replacement and is named so in the
/// CSV, FPC-NO is FPC's elapsed time less its replacement and conversion, GOM-BEST the fewest
/// fetches of the GOM splits at each size, and the JSON is written beside the plots.
#[test]
fn a_sweep_plots_hac_fg_fpc_no_gom_best_and_belady() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dir = db.to_str().unwrap();
    json(&["oo7", "load", "--dir", dir, "--size", "tiny", "--json"]);
    let out = tmp.path().join("sweep");
    let sweep = json(&[
        "oo7",
        "sweep",
        "--dir",
        dir,
        "--traversal",
        "t1",
        "--cold",
        "--policies",
        "hac,hac-fg,fpc,gom:obj=0.5,gom",
        "--out",
        out.to_str().unwrap(),
        "--sizes-mb",
        "0.06,0.1",
        "--json",
    ]);
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 10);
    let policies: Vec<&str> = points.iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert!(policies.contains(&"hac-fg") && policies.contains(&"gom:obj=0.5"), "{policies:?}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("t1.json")).unwrap()).unwrap();
    assert_eq!(written["points"], sweep["points"]);
    let rows = |file: &str| -> Vec<(String, f64, f64)> {
        let csv = std::fs::read_to_string(out.join(file)).unwrap();
        csv.lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect()
    };
    let point = |policy: &str, mb: f64| {
        points.iter().find(|p| p["policy"] == policy && p["cache_mb"].as_f64() == Some(mb)).unwrap()
    };
    for mb in [0.06, 0.1] {
        let fetches = rows("t1-fetches.csv");
        let of = |s: &str| fetches.iter().find(|r| r.0 == s && r.1 == mb).unwrap().2;
        assert_eq!(of("GOM-BEST"), of("GOM:OBJ=0.5").min(of("GOM")));
        assert!(of("BELADY") <= of("FPC"), "Belady is a floor under a page cache");
        let elapsed = rows("t1-elapsed.csv");
        let no = elapsed.iter().find(|r| r.0 == "FPC-NO" && r.1 == mb).unwrap().2;
        let fpc = point("fpc", mb);
        let f = |n: &str| fpc[n].as_f64().unwrap();
        let want = (f("elapsed_s") - f("replacement_s") - f("conversion_s")).max(0.0);
        assert!((no - want).abs() <= 1e-9, "FPC-NO {no} against {want}");
    }
    for f in ["t1-fetches.png", "t1-elapsed.svg", "t1-belady.csv", "t1.csv"] {
        assert!(out.join(f).exists(), "{f}");
    }
}

/// HAC-BIG: `--big-dir` names the same database loaded with `--pad-to-gom`, and the
/// `--big-policies` run on it as series of their own beside the others (in the JSON, the CSVs
/// and the plots), with both databases' sizes; a database that is not padded is refused.
#[test]
fn a_sweep_runs_hac_big_on_the_padded_database() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, big) = (tmp.path().join("plain"), tmp.path().join("big"));
    let (plain, big) = (plain.to_str().unwrap(), big.to_str().unwrap());
    let load = |dir: &str, extra: &[&str]| {
        let mut args = vec!["oo7", "load", "--dir", dir, "--size", "tiny", "--page-kb", "4"];
        args.extend_from_slice(extra);
        args.push("--json");
        json(&args)
    };
    let a = load(plain, &[]);
    let b = load(big, &["--pad-to-gom"]);
    assert_eq!((a["padding"].as_str(), b["padding"].as_str()), (Some("none"), Some("gom")));
    assert_eq!(a["objects"], b["objects"]);
    assert!(b["object_bytes"].as_u64() > a["object_bytes"].as_u64(), "{a} {b}");
    assert!(b["pages"].as_u64() > a["pages"].as_u64());

    let out = tmp.path().join("sweep");
    let sweep = |big_dir: &str| {
        thor(&[
            "oo7",
            "sweep",
            "--dir",
            plain,
            "--big-dir",
            big_dir,
            "--big-policies",
            "hac,fpc,gom:obj=0.5,gom",
            "--traversal",
            "t1",
            "--cold",
            "--policies",
            "hac,fpc,gom:obj=0.5,gom",
            "--out",
            out.to_str().unwrap(),
            "--sizes-mb",
            "0.06,0.5",
            "--json",
        ])
    };
    let run = sweep(big);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 16);
    let fetches = |policy: &str, mb: f64| {
        let p = points.iter().find(|p| p["policy"] == policy && p["cache_mb"] == mb);
        p.unwrap_or_else(|| panic!("{policy} at {mb}"))["fetches"].as_u64().unwrap()
    };
    // With a cache that holds both databases, a cold T1 fetches each page it touches once:
    // more pages of the padded one.
    assert!(fetches("hac-big", 0.5) > fetches("hac", 0.5));
    assert_eq!(fetches("fpc-big", 0.5), fetches("hac-big", 0.5));
    let dbs = &v["databases"];
    assert_eq!(dbs["big_database"]["padding"], "gom");
    assert!(dbs["big_database"]["bytes"].as_u64() > dbs["database"]["bytes"].as_u64(), "{dbs}");
    let csv = std::fs::read_to_string(out.join("t1-fetches.csv")).unwrap();
    for series in ["HAC-BIG", "FPC-BIG", "GOM-BEST", "GOM-BEST-BIG", "BELADY"] {
        assert!(csv.lines().any(|l| l.starts_with(&format!("{series},"))), "{series}: {csv}");
    }
    // GOM-BEST is the best of the first database's splits, GOM-BEST-BIG of the big one's.
    let of = |series: &str, mb: f64| -> f64 {
        let row = csv.lines().find(|l| l.starts_with(&format!("{series},{mb},")));
        row.unwrap_or_else(|| panic!("{series} at {mb}"))
            .rsplit(',')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    for mb in [0.06, 0.5] {
        assert_eq!(of("GOM-BEST", mb), of("GOM:OBJ=0.5", mb).min(of("GOM", mb)));
        assert_eq!(of("GOM-BEST-BIG", mb), of("GOM:OBJ=0.5-BIG", mb).min(of("GOM-BIG", mb)));
    }

    // The charts draw what `--plot` names; without it, a sweep whose charts would take more
    // series than a chart can is refused before it runs, as is a name no chart has.
    let plotted = tmp.path().join("plotted");
    let args = |extra: &[&str]| {
        let mut v = vec![
            "oo7",
            "sweep",
            "--dir",
            plain,
            "--big-dir",
            big,
            "--traversal",
            "t1",
            "--cold",
            "--sizes-mb",
            "0.5",
            "--out",
            plotted.to_str().unwrap(),
            "--json",
            "--policies",
            "hac,fpc,gom:obj=0.2,gom:obj=0.5,gom,clock,arc",
            "--big-policies",
            "hac,fpc,gom:obj=0.2,gom:obj=0.5,gom",
        ];
        v.extend_from_slice(extra);
        thor(&v)
    };
    let too_many = args(&[]);
    assert!(!too_many.status.success());
    assert!(String::from_utf8_lossy(&too_many.stderr).contains("--plot"));
    assert!(!plotted.join("t1.csv").exists(), "refused before running");
    let unknown = args(&["--plot", "hac,hac-bigg"]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("HAC-BIGG"));
    let some = args(&["--plot", "hac,hac-big,gom-best-big,belady,fpc-no"]);
    assert!(some.status.success(), "{}", String::from_utf8_lossy(&some.stderr));
    let csv = std::fs::read_to_string(plotted.join("t1-fetches.csv")).unwrap();
    assert!(csv.contains("\nARC,") && csv.contains("\nGOM:OBJ=0.2-BIG,"), "the CSV has all: {csv}");
    assert!(plotted.join("t1-fetches.svg").exists() && plotted.join("t1-elapsed.svg").exists());

    // An unpadded database is no HAC-BIG.
    let other = tmp.path().join("other");
    load(other.to_str().unwrap(), &[]);
    let refused = sweep(other.to_str().unwrap());
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--pad-to-gom"), "{err}");
}
