//! Two `thor server` processes form a cluster and four client processes run transfers between
//! accounts at different servers (`thor bench cluster-client`: every transfer is a two-phase
//! commit) while either server is SIGKILLed and restarted, at random moments, a dozen times.
//! Afterwards, once neither server has a transaction in doubt, the money in both banks adds up
//! to what it was, and the history every client recorded is serializable and ends in the state
//! both servers hold: an acknowledged transfer missing at either server, or present at one only,
//! fails the check (`thor_history`, the simulation's checker).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::bank::{Account, Bank, bench_client, finish, load_histories, wait_for_commits};
use common::{ServerProcess, drain, free_port, spawn_server, thor};
use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};

const CLIENTS: u32 = 4;
const ACCOUNTS: usize = 8;
const OPENING: u64 = 1_000;
const KILLS: usize = 12;

/// Server `id` of the cluster at `addrs` (ids 1 and 2), created in `dir` if it is not there.
fn start(dir: &Path, id: u32, addrs: &[SocketAddr; 2]) -> ServerProcess {
    let other = 3 - id;
    let mut cmd = thor();
    cmd.args(["server", "--create", "--dir"]).arg(dir);
    cmd.args(["--listen", &addrs[id as usize - 1].to_string()]);
    cmd.args(["--server-id", &id.to_string()]);
    cmd.args(["--peer", &format!("{other}={}", addrs[other as usize - 1])]);
    cmd.env_remove("THOR_TOKEN");
    let (server, _, log) = spawn_server(cmd, |_| {});
    drain(log);
    server
}

fn client(addrs: &[SocketAddr; 2], id: u32, history: &Path, extra: &[&str]) -> Child {
    let (one, two) = (format!("1={}", addrs[0]), format!("2={}", addrs[1]));
    bench_client(&["cluster-client", "--server", &one, "--server", &two], id, history, extra)
}

fn session(addr: SocketAddr) -> Session {
    let cfg = ClientConfig { client_name: "audit".into(), ..ClientConfig::default() };
    let t = TcpTransport::connect(addr, &cfg).unwrap();
    Session::new(Box::new(t), SessionConfig::default()).unwrap()
}

/// Waits until the server at `addr` has no transaction in doubt and coordinates none.
fn wait_settled(addr: SocketAddr) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let st = session(addr).server_stats().unwrap();
        if st.twopc_in_doubt == 0 && st.twopc_coordinating == 0 {
            return;
        }
        assert!(Instant::now() < give_up, "server at {addr} stays in doubt: {st:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every account's `(object, balance, version)` at server `id`, objects named as the clients
/// name them (`server << 32 | oref`).
fn accounts(addr: SocketAddr, id: u32) -> Vec<(u64, u64, u64)> {
    let s = session(addr);
    let bank = s.get(s.root::<Bank>(0).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in 0..bank.var_len() {
        let chunk = s.get(bank.var_ref(c)).unwrap();
        for i in 0..chunk.var_len() {
            let r = chunk.var_ref(i);
            let a = s.get(r).unwrap();
            let object = u64::from(id) << 32 | u64::from(r.oref().unwrap().raw());
            out.push((object, a.get(Account::balance), a.get(Account::version)));
        }
    }
    out
}

#[test]
fn cross_server_transfers_survive_sigkills_of_either_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = [tmp.path().join("s1"), tmp.path().join("s2")];
    let addrs: [SocketAddr; 2] =
        [0, 1].map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap());
    let mut servers = [start(&dirs[0], 1, &addrs), start(&dirs[1], 2, &addrs)];

    let setup = tmp.path().join("setup.jsonl");
    let n = ACCOUNTS.to_string();
    let o = OPENING.to_string();
    finish(client(&addrs, 0, &setup, &["--setup", &n, "--opening", &o, "--seconds", "0"]));

    let stop = tmp.path().join("stop");
    let histories: Vec<_> =
        (1..=CLIENTS).map(|i| tmp.path().join(format!("client-{i}.jsonl"))).collect();
    let stop_arg = stop.to_str().unwrap();
    let clients: Vec<Child> = (1..=CLIENTS)
        .map(|i| {
            client(
                &addrs,
                i,
                &histories[i as usize - 1],
                &["--seconds", "300", "--stop-file", stop_arg],
            )
        })
        .collect();

    // Deterministic "random" moments and victims: 150 to 450 ms apart, either server.
    let mut rng = thor_storage::SplitMix64::new(0x4B11);
    let mut kills = [0usize; 2];
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(150 + rng.below(301)));
        let v = rng.below(2) as usize;
        kills[v] += 1;
        let [a, b] = servers;
        let (a, b) = if v == 0 {
            a.kill();
            (start(&dirs[0], 1, &addrs), b)
        } else {
            b.kill();
            (a, start(&dirs[1], 2, &addrs))
        };
        servers = [a, b];
    }
    assert!(kills[0] > 0 && kills[1] > 0, "both servers were killed: {kills:?}");
    // Enough acknowledged commits for the check to mean something, however slow the machine.
    wait_for_commits(&histories, 50, Duration::from_secs(120));
    std::fs::write(&stop, b"").unwrap();
    let logs: Vec<String> = clients.into_iter().map(finish).collect();

    // One more crash of both, then the state once every transaction in doubt is decided.
    let [a, b] = servers;
    a.kill();
    b.kill();
    let _servers = [start(&dirs[0], 1, &addrs), start(&dirs[1], 2, &addrs)];
    wait_settled(addrs[0]);
    wait_settled(addrs[1]);
    let mut state = accounts(addrs[0], 1);
    state.extend(accounts(addrs[1], 2));
    assert_eq!(state.len(), 2 * ACCOUNTS);
    let total: u64 = state.iter().map(|&(_, balance, _)| balance).sum();
    assert_eq!(
        total,
        OPENING * 2 * ACCOUNTS as u64,
        "money was created or lost:\n{}",
        logs.join("")
    );

    let rec = load_histories(&histories);
    let (committed, uncertain) = (rec.committed, rec.uncertain);
    let summary = rec.audit(&state, OPENING, &logs.join(""));
    assert!(committed >= 50, "only {committed} transfers acknowledged:\n{}", logs.join(""));
    eprintln!(
        "{KILLS} kills ({} of server 1, {} of server 2): {committed} cross-server commits \
         acknowledged, {uncertain} uncertain ({} of them committed), {} aborted, {} reads checked",
        kills[0],
        kills[1],
        summary.uncertain_committed.len(),
        summary.aborted,
        summary.reads
    );
}

/// `thor bench cross-server` runs its servers and clients as processes, kills a server on
/// schedule and reports what the clients' histories show: commits, and for every kill either
/// the time to the next acknowledged transfer or that none came.
#[test]
fn cross_server_bench_reports_commits_and_the_time_from_each_kill_to_an_ack() {
    let dir = tempfile::tempdir().unwrap();
    let out = thor()
        .args(["bench", "cross-server", "--clients", "2", "--seconds", "3", "--kill-every-s", "1"])
        .args(["--accounts", "4", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &rows[0];
    assert_eq!(r["clients"], 2);
    assert!(r["committed"].as_u64().unwrap() > 0, "{r}");
    let kills = r["kills"].as_u64().unwrap();
    assert_eq!(kills, 2, "a kill each second before the end of a 3-second run: {r}");
    let acked = kills - r["kills_without_ack"].as_u64().unwrap();
    assert_eq!(acked > 0, r["kill_to_ack_ms_max"].is_number(), "{r}");
    assert!(dir.path().join("clients-2/server-1.log").exists());
}
