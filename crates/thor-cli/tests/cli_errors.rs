//! How `thor` fails: one line per error, no backtrace unless asked, and a closed standard
//! output ends a command quietly.

use std::process::{Command, Stdio};

fn thor() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_thor"));
    c.env_remove("RUST_BACKTRACE").env_remove("RUST_LIB_BACKTRACE").env_remove("RUST_LOG");
    c
}

#[test]
fn an_error_prints_one_line_without_a_backtrace() {
    let out = thor().args(["bench", "clients", "--clients", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: --clients must list counts of at least 1\n"
    );
}

#[test]
fn a_missing_database_directory_is_named_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("none");
    let out = thor()
        .args(["-q", "server", "--listen", "127.0.0.1:0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains("pass --create"), "{err}");
    assert!(!dir.exists(), "nothing is created without --create");
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let mut child =
        thor().args(["demo"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

/// Runs `thor args`, expecting failure with `status`; returns stderr.
fn fails(args: &[&str], status: i32) -> String {
    let out = thor().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(status), "thor {args:?}: {err}");
    err
}

#[test]
fn bad_inputs_get_clear_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a database").unwrap();
    let file = file.to_str().unwrap();
    let none = tmp.path().join("none");
    let none = none.to_str().unwrap();
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let plain = plain.to_str().unwrap();

    let err = fails(&["server", "--create", "--listen", "127.0.0.1:0", "--dir", file], 1);
    assert!(err.contains("is a file, not a database directory"), "{err}");
    let err = fails(&["server", "--listen", "127.0.0.1:0", "--dir", plain], 1);
    assert!(err.contains("holds no thor database; pass --create"), "{err}");
    let err = fails(&["server", "--create", "--page-kb", "0", "--dir", none], 2);
    assert!(err.contains("0 is not a page size: a power of two from 1 to 32 KiB"), "{err}");
    assert!(!std::path::Path::new(none).exists(), "a refused size creates nothing");
    // Clap's own usage errors exit with 2.
    let err = fails(&["bench", "clients", "--seconds", "0"], 2);
    assert!(err.contains("0 is not a positive number of seconds"), "{err}");
    let err = fails(&["bench", "net", "--seconds", "-1"], 2);
    assert!(err.contains("-1 is not a positive number of seconds"), "{err}");
    let err = fails(&["oo7", "run", "--traversal", "t1", "--dir", plain, "--server", "h:1"], 2);
    assert!(err.contains("cannot be used with"), "{err}");

    // Zero, negative and NaN sizes and counts, refused by name before anything runs.
    for (args, says) in [
        (
            &["oo7", "run", "--traversal", "t1", "--dir", none, "--cache-mb", "0"][..],
            "0 is not a positive size",
        ),
        (
            &["oo7", "run", "--traversal", "t1", "--dir", none, "--cache-mb", "-3"],
            "-3 is not a positive size",
        ),
        (
            &["oo7", "run", "--traversal", "t1", "--dir", none, "--cache-mb", "nan"],
            "nan is not a positive size",
        ),
        (
            &["oo7", "run", "--traversal", "t1", "--dir", none, "--repeat", "0"],
            "0 is not a count of at least 1",
        ),
        (
            &[
                "oo7",
                "sweep",
                "--traversal",
                "t1",
                "--out",
                none,
                "--dir",
                none,
                "--sizes-mb",
                "1,-1",
            ],
            "-1 is not a positive size",
        ),
        (&["oo7", "load", "--dir", none, "--page-kb", "3"], "3 is not a page size"),
        (&["bench", "net", "--clients", "0"], "0 is not a count of at least 1"),
        (&["bench", "engine", "--bulk-mb", "-5"], "-5 is not a count of at least 1"),
        (
            &["server", "--dir", none, "--create", "--max-frame-mb", "0"],
            "0 is not a count of at least 1",
        ),
        (&["demo", "--small-cache-kb", "0"], "0 is not a count of at least 1"),
    ] {
        let err = fails(args, 2);
        assert!(err.contains(says), "thor {args:?}: {err}");
    }
    assert!(!std::path::Path::new(none).exists(), "a refused size creates nothing");

    // A database to run on that is missing or is not one says how to make one.
    let err = fails(&["oo7", "run", "--traversal", "t1", "--dir", none], 1);
    assert!(err.contains("does not exist: load one with `thor oo7 load --dir"), "{err}");
    let err = fails(&["oo7", "run", "--traversal", "t1", "--dir", plain], 1);
    assert!(err.contains("holds no thor database: load one with"), "{err}");
    let err = fails(&["oo7", "run", "--traversal", "t1", "--dir", file], 1);
    assert!(err.contains("is a file, not a database directory"), "{err}");
}

/// `thor server --create` makes a database only where `thor::open` would: not in a directory
/// that holds someone else's files (issue 38 item 9).
#[test]
fn replica_settings_need_a_replica() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    for flag in [&["--durability", "memory"][..], &["--memory-flush-ms", "5"], &["--join"]] {
        let mut args = vec!["server", "--dir", dir];
        args.extend_from_slice(flag);
        let err = fails(&args, 2);
        assert!(err.contains("--replica-id"), "{flag:?}: {err}");
    }
    let err = fails(&["server", "--dir", dir, "--durability", "ram"], 2);
    assert!(err.contains("disk") && err.contains("memory"), "{err}");
}

#[test]
fn create_refuses_non_empty_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("notes");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("readme.txt"), b"mine").unwrap();
    let out = thor()
        .args(["-q", "server", "--create", "--listen", "127.0.0.1:0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("readme.txt") && err.contains("no thor database"), "{err}");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["readme.txt"], "nothing was written");
}

/// `thor compact` and `thor backup` agree: a destination's parent must exist.
#[test]
fn compact_and_backup_refuse_a_missing_parent_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    drop(thor::open(&db).unwrap());
    let missing = tmp.path().join("no/such/parent/x");
    for args in [
        vec!["compact".to_string(), db.display().to_string(), missing.display().to_string()],
        vec![
            "backup".to_string(),
            "--dir".to_string(),
            db.display().to_string(),
            missing.display().to_string(),
        ],
    ] {
        let out = thor().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("parent directory does not exist"), "{args:?}: {err}");
    }
    assert!(!tmp.path().join("no").exists(), "no parent was created");
}

/// The default binary links neither simulator: `thor sim` is not a command, and the one
/// experiment flag that replays through the cache simulator says how to get it.
#[cfg(not(feature = "lab"))]
#[test]
fn the_default_binary_has_no_simulators() {
    let err = fails(&["sim", "demote", "--table2"], 2);
    assert!(err.contains("unrecognized subcommand 'sim'"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let err = fails(&["oo7", "multi", "--dir", dir, "--traversal", "t1", "--sim"], 1);
    assert!(err.contains("built without the simulators"), "{err}");
}
