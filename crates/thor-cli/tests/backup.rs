//! `thor backup` end to end: four client processes run bank transfers against a `thor server`
//! process while `thor backup --server` copies its database. The copy must pass `thor check`,
//! open as a database, and hold exactly a committed prefix of what the clients did: every
//! transaction acknowledged before the backup was asked for, each included transaction whole
//! (all its writes or none), with everything it read, and the money conserved.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::bank::{accounts, finish, transfer_client as client, wait_for_commits};
use common::{ServerProcess, drain, free_port, spawn_server, start_at, thor};

const CLIENTS: u32 = 4;
const ACCOUNTS: usize = 16;
const OPENING: u64 = 1_000;

/// `thor server --create --dir DIR --listen ADDR --backup-dir BACKUPS`.
fn start_with_backups(dir: &Path, addr: SocketAddr, backups: &Path) -> ServerProcess {
    let mut cmd = thor();
    cmd.args(["server", "--create", "--dir"]).arg(dir).arg("--listen").arg(addr.to_string());
    cmd.arg("--backup-dir").arg(backups).env_remove("THOR_TOKEN");
    let (server, _, log) = spawn_server(cmd, |_| {});
    drain(log);
    server
}

/// A transaction as `thor bench transfer-client` recorded it.
struct Recorded {
    outcome: String,
    /// `(account, version)` read.
    reads: Vec<(u64, u64)>,
    /// `(account, version, balance)` written.
    writes: Vec<(u64, u64, i64)>,
}

/// The complete lines of the history files.
fn histories(paths: &[std::path::PathBuf]) -> Vec<Recorded> {
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        // A line still being written has no newline yet.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        for line in complete.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let pair = |x: &serde_json::Value| (x[0].as_u64().unwrap(), x[1].as_u64().unwrap());
            out.push(Recorded {
                outcome: v["outcome"].as_str().unwrap().to_string(),
                reads: v["reads"].as_array().unwrap().iter().map(pair).collect(),
                writes: v["writes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| {
                        (w[0].as_u64().unwrap(), w[1].as_u64().unwrap(), w[2].as_i64().unwrap())
                    })
                    .collect(),
            });
        }
    }
    out
}

#[test]
fn a_live_backup_passes_check_and_holds_exactly_a_committed_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let backups = tmp.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let server = start_with_backups(&dir, addr, &backups);
    let setup = tmp.path().join("setup.jsonl");
    finish(client(
        addr,
        0,
        &setup,
        &["--setup", &ACCOUNTS.to_string(), "--opening", &OPENING.to_string(), "--seconds", "0"],
    ));
    let stop = tmp.path().join("stop");
    let paths: Vec<_> = (1..=CLIENTS).map(|i| tmp.path().join(format!("c{i}.jsonl"))).collect();
    let clients: Vec<Child> = (1..=CLIENTS)
        .map(|i| {
            let h = &paths[i as usize - 1];
            client(addr, i, h, &["--seconds", "120", "--stop-file", stop.to_str().unwrap()])
        })
        .collect();
    // The backup is taken under load: after some commits, however slow the machine.
    wait_for_commits(&paths, 20, Duration::from_secs(60));

    // Everything acknowledged before the backup is asked for must be in it.
    let acknowledged_before = histories(&paths);
    let out = thor()
        .env_remove("RUST_BACKTRACE")
        .args(["backup", "--server", &addr.to_string(), "nightly/1"])
        .output()
        .unwrap();
    let backup = backups.join("nightly/1");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.starts_with("backed up to ") && said.contains("commits up to LSN"), "{said}");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&stop, b"").unwrap();
    clients.into_iter().for_each(|c| drop(finish(c)));
    drop(server);

    // The copy passes the offline checker...
    let check = thor().arg("check").arg(&backup).output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stdout));
    // ... and opens as a database.
    let addr2: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let copy = start_at(&backup, addr2);
    let state = accounts(addr2);
    drop(copy);
    assert_eq!(state.len(), ACCOUNTS);
    let total: u64 = state.iter().map(|&(_, b, _)| b).sum();
    assert_eq!(total, OPENING * ACCOUNTS as u64, "the backup created or lost money");

    // Exactly a committed prefix. Versions are unique names, not counters; a transfer reads
    // each account it writes, so each written version names the one it replaced, and the
    // versions of an account the backup holds are the chain from its current version back to
    // the initial one.
    let all = histories(&paths);
    let mut prev: HashMap<(u64, u64), u64> = HashMap::new();
    let mut written: HashMap<(u64, u64), i64> = HashMap::new();
    for t in all.iter().filter(|t| t.outcome != "aborted") {
        for &(o, v, b) in &t.writes {
            let read = t.reads.iter().find(|r| r.0 == o).expect("a transfer reads what it writes");
            prev.insert((o, v), read.1);
            written.insert((o, v), b);
        }
    }
    let mut in_backup: std::collections::HashSet<(u64, u64)> = Default::default();
    for &(o, b, v) in &state {
        if v != 0 {
            // Every balance in the backup is one a transaction wrote at that version.
            assert_eq!(written.get(&(o, v)), Some(&(b as i64)), "account {o} version {v}");
        }
        let mut v = v;
        while v != 0 {
            assert!(in_backup.insert((o, v)), "a cycle of versions");
            v = *prev.get(&(o, v)).unwrap_or_else(|| panic!("account {o}: version {v} unknown"));
        }
        in_backup.insert((o, 0));
    }
    let includes = |t: &Recorded| t.writes.iter().any(|&(o, v, _)| in_backup.contains(&(o, v)));
    let mut included = 0;
    for t in all.iter().filter(|t| t.outcome != "aborted" && includes(t)) {
        included += 1;
        // Whole: all of its writes.
        for &(o, v, _) in &t.writes {
            assert!(
                in_backup.contains(&(o, v)),
                "a transaction is in the backup without its write of {o}"
            );
        }
        // Closed: what it read is in the backup too.
        for &(o, v) in &t.reads {
            assert!(
                in_backup.contains(&(o, v)),
                "a transaction is in the backup without what it read of {o}"
            );
        }
    }
    for t in acknowledged_before.iter().filter(|t| t.outcome == "committed") {
        assert!(t.writes.is_empty() || includes(t), "an acknowledged commit is missing");
    }
    let before = acknowledged_before
        .iter()
        .filter(|t| t.outcome == "committed" && !t.writes.is_empty())
        .count();
    assert!(before >= 10, "only {before} commits before the backup: the load did not run");
    assert!(
        included >= before,
        "{included} transactions in the backup, {before} acknowledged before"
    );
}

#[test]
fn backup_refuses_a_database_in_use_and_an_existing_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let backups = tmp.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let server = start_with_backups(&dir, addr, &backups);
    let fails = |args: &[&std::ffi::OsStr]| {
        let out = thor().env_remove("RUST_BACKTRACE").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let dest = tmp.path().join("copy");
    let err = fails(&["backup".as_ref(), "--dir".as_ref(), dir.as_os_str(), dest.as_os_str()]);
    assert!(err.contains("is in use by") && err.contains("thor backup --server"), "{err}");
    std::fs::create_dir(backups.join("taken")).unwrap();
    let a = addr.to_string();
    let err = fails(&["backup".as_ref(), "--server".as_ref(), a.as_ref(), "taken".as_ref()]);
    assert!(err.contains("it exists; give a new path"), "{err}");
    // A client writes only inside the server's backup directory.
    for outside in ["/tmp/elsewhere", "../escape", "a/../../b", "./x"] {
        let err = fails(&["backup".as_ref(), "--server".as_ref(), a.as_ref(), outside.as_ref()]);
        assert!(err.contains("not a relative path of plain names"), "{outside}: {err}");
    }
    assert!(!tmp.path().join("escape").exists() && !Path::new("/tmp/elsewhere").exists());
    // The server is unharmed and stops; one without --backup-dir takes no backups.
    drop(server);
    let addr2: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let plain = start_at(&dir, addr2);
    let a2 = addr2.to_string();
    let err = fails(&["backup".as_ref(), "--server".as_ref(), a2.as_ref(), "x".as_ref()]);
    assert!(err.contains("takes no backups over the network"), "{err}");
    drop(plain);
    // The offline backup works once no process holds the database.
    let out = thor().args(["backup", "--dir"]).arg(&dir).arg(&dest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let check = thor().arg("check").arg(&dest).output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stdout));
}
