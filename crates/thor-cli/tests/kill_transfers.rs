//! Eight client processes run bank transfers over TCP while the `thor server` process is
//! SIGKILLed and restarted at least twenty times. Afterwards every acknowledged commit must be
//! in the recovered state, the total must be unchanged, and the history every client recorded
//! (`thor bench transfer-client`) must be serializable: the same checker as the simulation's
//! (`thor_history`), fed with real clients over a real network and real crashes.

mod common;

use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;

use common::bank::{
    accounts as final_state, finish, load_histories, transfer_client as client, wait_for_commits,
};
use common::{ServerProcess, free_port, start_at_with};

const CLIENTS: u32 = 8;
const ACCOUNTS: usize = 16;
const OPENING: u64 = 1_000;
const KILLS: usize = 20;

/// A deterministic pause between kills: 150 to 450 ms, so some kills land mid-commit and some
/// between, and recovery runs with clients waiting to reconnect.
fn pause(i: usize) -> Duration {
    Duration::from_millis(150 + (i as u64 * 7919 % 301))
}

#[test]
fn transfers_stay_serializable_across_server_sigkills() {
    kills(&[]);
}

/// The same with the server in `wpl` mode (whole-page logging): every restart runs WPL's
/// backward pass over a log a SIGKILL cut anywhere, with install rounds on their own thread.
#[test]
fn wpl_transfers_stay_serializable_across_server_sigkills() {
    kills(&["--commit-mode", "wpl"]);
}

fn kills(server_args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let start_at = |dir: &std::path::Path, addr| start_at_with(dir, addr, server_args);
    let mut server: ServerProcess = start_at(&dir, addr);

    let setup_history = tmp.path().join("setup.jsonl");
    let setup = client(
        addr,
        0,
        &setup_history,
        &["--setup", &ACCOUNTS.to_string(), "--opening", &OPENING.to_string(), "--seconds", "0"],
    );
    finish(setup);

    let stop = tmp.path().join("stop");
    let histories: Vec<_> =
        (1..=CLIENTS).map(|i| tmp.path().join(format!("client-{i}.jsonl"))).collect();
    let stop_arg = stop.to_str().unwrap();
    let clients: Vec<Child> = (1..=CLIENTS)
        .map(|i| {
            let h = &histories[i as usize - 1];
            client(addr, i, h, &["--seconds", "300", "--stop-file", stop_arg])
        })
        .collect();

    for i in 0..KILLS {
        std::thread::sleep(pause(i));
        server.kill();
        server = start_at(&dir, addr);
    }
    // Enough acknowledged commits for the check to mean something, however slow the machine.
    wait_for_commits(&histories, 100, Duration::from_secs(120));
    std::fs::write(&stop, b"").unwrap();
    let logs: Vec<String> = clients.into_iter().map(finish).collect();

    // The final state, after one more crash: what recovery makes of the last log.
    server.kill();
    let server = start_at(&dir, addr);
    let state = final_state(addr);
    drop(server);
    assert_eq!(state.len(), ACCOUNTS);
    let total: u64 = state.iter().map(|&(_, balance, _)| balance).sum();
    assert_eq!(total, OPENING * ACCOUNTS as u64, "money was created or lost");

    // The history of every client, and the balance each write stored.
    let rec = load_histories(&histories);
    let (committed, uncertain) = (rec.committed, rec.uncertain);
    // Every acknowledged commit is present: a committed write missing from the recovered
    // state shows as a lost update (a later transfer read the version before it) or as a final
    // state that is not the last committed version.
    let summary = rec.audit(&state, OPENING, &logs.join(""));
    // The run must have done real work across the crashes, not aborted everything.
    assert!(committed >= 100, "only {committed} commits acknowledged:\n{}", logs.join(""));
    eprintln!(
        "{KILLS} kills: {committed} commits acknowledged, {uncertain} uncertain ({} of them \
         committed), {} aborted, {} reads checked",
        summary.uncertain_committed.len(),
        summary.aborted,
        summary.reads
    );
}
