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
    let mut child = thor()
        .args(["sim", "demote", "--table2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}
