//! The bank that `thor bench transfer-client` keeps, as tests drive and audit it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use thor_client::{Session, SessionConfig};
use thor_history::{self as serial, History, INITIAL, Summary, Txn};
use thor_net::{ClientConfig, TcpTransport};

use super::thor;

/// The classes `thor bench transfer-client` stores, declared once, in the laboratory.
pub use thor_lab::bank::{Account, Bank};

/// `thor bench transfer-client` against `addr` as client `id`, recording its history in
/// `history`, with `extra` arguments.
pub fn transfer_client(addr: SocketAddr, id: u32, history: &Path, extra: &[&str]) -> Child {
    let connect = ["transfer-client", "--connect", &addr.to_string()];
    bench_client(&connect, id, history, extra)
}

/// `thor bench` with `command` (the subcommand and where it connects) as client `id`,
/// recording its history in `history`, with `extra` arguments; its log on a pipe.
pub fn bench_client(command: &[&str], id: u32, history: &Path, extra: &[&str]) -> Child {
    thor()
        .arg("bench")
        .args(command)
        .args(["--client", &id.to_string(), "--history"])
        .arg(history)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a client process and fails the test, with its log, if it failed; returns its log.
pub fn finish(c: Child) -> String {
    let out = c.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "a client failed ({}):\n{log}", out.status);
    log
}

/// Every account's `(oref, balance, version)` as the server at `addr` has it, read in a new
/// session.
pub fn accounts(addr: SocketAddr) -> Vec<(u64, u64, u64)> {
    let cfg = ClientConfig { client_name: "audit".into(), ..ClientConfig::default() };
    let t = TcpTransport::connect(addr, &cfg).unwrap();
    let s = Session::new(Box::new(t), SessionConfig::default()).unwrap();
    let bank = s.get(s.root::<Bank>(0).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in 0..bank.var_len() {
        let chunk = s.get(bank.var_ref(c)).unwrap();
        for i in 0..chunk.var_len() {
            let r = chunk.var_ref(i);
            let a = s.get(r).unwrap();
            let oref = u64::from(r.oref().unwrap().raw());
            out.push((oref, a.get(Account::balance), a.get(Account::version)));
        }
    }
    out
}

/// The histories the bank clients recorded, as the checker takes them.
pub struct Recorded {
    pub history: History,
    /// The balance each `(account, version)` write stored.
    pub balances: HashMap<(u64, u64), i64>,
    pub committed: usize,
    pub uncertain: usize,
}

/// Reads the JSON-lines histories at `paths` (one line per transaction that reached commit).
pub fn load_histories(paths: &[PathBuf]) -> Recorded {
    let mut r =
        Recorded { history: History::new(), balances: HashMap::new(), committed: 0, uncertain: 0 };
    for path in paths {
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let mut t = Txn::new(v["id"].as_u64().unwrap(), v["client"].as_u64().unwrap() as u32);
            for x in v["reads"].as_array().unwrap() {
                t = t.read(x[0].as_u64().unwrap(), x[1].as_u64().unwrap());
            }
            for w in v["writes"].as_array().unwrap() {
                let (o, version) = (w[0].as_u64().unwrap(), w[1].as_u64().unwrap());
                r.balances.insert((o, version), w[2].as_i64().unwrap());
                t = t.write(o, version);
            }
            match v["outcome"].as_str().unwrap() {
                "committed" => {
                    r.committed += 1;
                    r.history.add_committed(t)
                }
                "aborted" => r.history.add_aborted(t),
                "uncertain" => {
                    r.uncertain += 1;
                    r.history.add_uncertain(t)
                }
                other => panic!("outcome {other}"),
            }
        }
    }
    r
}

impl Recorded {
    /// Checks the histories against the servers' final `state` (`(object, balance, version)`
    /// per account, each opened with `opening`): serializable and ending in that state (so no
    /// acknowledged commit is missing), and the money of the committed transfers adds up.
    /// Fails the test with the clients' `logs` otherwise.
    pub fn audit(&self, state: &[(u64, u64, u64)], opening: u64, logs: &str) -> Summary {
        let fin: Vec<(u64, u64)> = state.iter().map(|&(o, _, v)| (o, v)).collect();
        let summary = serial::check(&self.history, Some(&fin)).unwrap_or_else(|a| {
            panic!("the history is not serializable: {a}\nclient logs:\n{logs}")
        });
        let accounts: Vec<u64> = state.iter().map(|&(o, _, _)| o).collect();
        let balance = |a: u64, v: u64| {
            if v == INITIAL { opening as i64 } else { self.balances[&(a, v)] }
        };
        let kept =
            serial::check_conserved_total(&self.history, &summary, &accounts, balance).unwrap();
        assert_eq!(kept, i128::from(opening) * state.len() as i128);
        summary
    }
}

/// Waits until the histories at `paths` hold at least `want` acknowledged commits, so a crash
/// test checks a history with real work in it however slow the machine is (a fixed running
/// time gave 37 commits on a loaded CI machine and 150 on a quiet one). Returns how many there
/// are; gives up after `give_up` and returns fewer, for the caller's assertion to report.
pub fn wait_for_commits(paths: &[PathBuf], want: usize, give_up: Duration) -> usize {
    let end = Instant::now() + give_up;
    loop {
        // A line still being written lacks its outcome and is not counted.
        let n: usize = paths
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.matches("\"outcome\":\"committed\"").count())
            .sum();
        if n >= want || Instant::now() >= end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
