//! Replicated servers as real processes (issue 33): three `thor server --replica-id`
//! processes on loopback form a group, elect a leader and serve; bank clients given the
//! group's addresses commit through it, carry on by themselves when the leader is SIGKILLed,
//! and no acknowledged commit is lost. Every wait is for an event, bounded.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::bank::{self, finish};
use common::{ServerProcess, drain, free_port, spawn_server, thor};

/// The group's server id (every founder's --server-id).
const SERVER_ID: &str = "1";
const OPENING: u64 = 1_000;
const ACCOUNTS: usize = 8;
/// The longest any wait here may take before the test fails.
const SAFETY: Duration = Duration::from_secs(60);

/// The replicas of one group: their directories and addresses, and the processes running.
struct Group {
    dirs: Vec<PathBuf>,
    addrs: Vec<SocketAddr>,
    procs: Vec<Option<ServerProcess>>,
}

impl Group {
    /// `n` founding replicas (ids 1..=n) under `root`, started with `--create`.
    fn found(root: &Path, n: usize) -> Group {
        let addrs: Vec<SocketAddr> =
            (0..n).map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap()).collect();
        let dirs = (1..=n).map(|i| root.join(format!("replica-{i}"))).collect();
        let mut g = Group { dirs, addrs, procs: (0..n).map(|_| None).collect() };
        for i in 0..n {
            g.start(i);
        }
        g
    }

    /// The `--group` argument: `1=ADDR,2=ADDR,...` (founders only).
    fn spec(&self) -> String {
        self.addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts replica `i` (id `i + 1`), creating it the first time.
    fn start(&mut self, i: usize) {
        let mut cmd = thor();
        cmd.args(["server", "--create", "--dir"]).arg(&self.dirs[i]);
        cmd.args(["--replica-id", &(i + 1).to_string(), "--group", &self.spec()]);
        cmd.args(["--server-id", SERVER_ID]);
        cmd.env_remove("THOR_TOKEN");
        let (p, _, log) = spawn_server(cmd, |_| {});
        drain(log);
        self.procs[i] = Some(p);
    }

    fn kill(&mut self, i: usize) {
        self.procs[i].take().expect("running").kill();
    }

    /// The addresses of the replicas running, comma-separated (for `thor group status`).
    fn running(&self) -> String {
        (0..self.addrs.len())
            .filter(|i| self.procs[*i].is_some())
            .map(|i| self.addrs[i].to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits (bounded) until `thor group status` over the running replicas shows exactly one
    /// serving leader that every running replica names; returns its index.
    fn wait_for_leader(&self) -> usize {
        let end = Instant::now() + SAFETY;
        loop {
            let st = status(&self.running());
            let leaders: Vec<u64> = st
                .iter()
                .filter(|r| r["role"] == "leader")
                .map(|r| r["replica"].as_u64().unwrap())
                .collect();
            if let [leader] = leaders[..]
                && st.iter().all(|r| r["leader"].as_u64() == Some(leader))
            {
                return leader as usize - 1;
            }
            assert!(Instant::now() < end, "no single leader within {SAFETY:?}: {st:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `thor group status --json` of `addrs`: one object per replica.
fn status(addrs: &str) -> Vec<serde_json::Value> {
    let out = thor().args(["group", "status", "--json", "--connect", addrs]).output().unwrap();
    if !out.status.success() {
        return Vec::new();
    }
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn leader_crash_loses_no_acknowledged_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Group::found(tmp.path(), 3);
    let leader = g.wait_for_leader();
    let spec = g.spec();
    let client = |id: u32, history: &Path, extra: &[&str]| {
        bank::bench_client(&["transfer-client", "--connect", &spec], id, history, extra)
    };

    let setup = tmp.path().join("setup.jsonl");
    let (n, o) = (ACCOUNTS.to_string(), OPENING.to_string());
    finish(client(0, &setup, &["--setup", &n, "--opening", &o, "--seconds", "0"]));

    let stop = tmp.path().join("stop");
    let stop_arg = stop.to_str().unwrap();
    let histories: Vec<PathBuf> =
        (1..=2).map(|c| tmp.path().join(format!("client-{c}.jsonl"))).collect();
    let clients: Vec<_> = histories
        .iter()
        .enumerate()
        .map(|(c, h)| client(c as u32 + 1, h, &["--seconds", "600", "--stop-file", stop_arg]))
        .collect();
    let before = bank::wait_for_commits(&histories, 30, SAFETY);
    assert!(before >= 30, "only {before} commits before the kill");

    g.kill(leader);
    let new_leader = g.wait_for_leader();
    assert_ne!(new_leader, leader);
    // The clients carry on by themselves through the new leader.
    let after = bank::wait_for_commits(&histories, before + 30, SAFETY);
    assert!(after >= before + 30, "{after} commits, {before} before the kill: the clients stalled");
    std::fs::write(&stop, b"").unwrap();
    let logs: Vec<String> = clients.into_iter().map(finish).collect();

    // Every acknowledged commit is in the new leader's database, the history serializable,
    // the money conserved.
    let state = bank::accounts(g.addrs[new_leader]);
    assert_eq!(state.len(), ACCOUNTS);
    let mut all = histories.clone();
    all.push(setup);
    let rec = bank::load_histories(&all);
    let summary = rec.audit(&state, OPENING, &logs.join(""));
    eprintln!(
        "{} committed, {} uncertain across the failover: {summary:?}",
        rec.committed, rec.uncertain
    );
    let st = status(&g.running());
    assert_eq!(st.iter().filter(|r| r["role"] == "leader").count(), 1, "{st:#?}");
}
