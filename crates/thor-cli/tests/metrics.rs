//! Watching a running `thor server`: the Prometheus endpoint answers and its counters move with
//! the work done, its health check answers, `thor stats` prints the same counters (by host
//! name, over a Unix socket, with the token from `THOR_TOKEN`), a server with metrics still
//! checkpoints at shutdown, and a bad address fails before any database is created.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use common::{ServerProcess, drain, spawn_server, thor};
use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};

thor_client::class! {
    pub class Note("metrics.Note") { n: u64 }
}

/// `thor server --create --metrics-listen 127.0.0.1:0`; returns it with its two addresses.
fn start(dir: &std::path::Path) -> (ServerProcess, SocketAddr, SocketAddr) {
    let (server, addr, metrics, log, _) = start_logged(dir, &[]);
    drain(log);
    (server, addr, metrics)
}

/// [`start`] with more arguments, keeping the rest of the log.
fn start_logged(
    dir: &std::path::Path,
    extra: &[&str],
) -> (ServerProcess, SocketAddr, SocketAddr, std::io::BufReader<std::process::ChildStderr>, String)
{
    let mut cmd = thor();
    cmd.args(["server", "--create", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .env_remove("THOR_TOKEN")
        .env_remove("RUST_LOG");
    let mut metrics = None;
    let mut early = String::new();
    let (server, addr, log) = spawn_server(cmd, |line| {
        early.push_str(line);
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            metrics = Some(rest.split('/').next().unwrap().parse().unwrap());
        }
    });
    (server, addr, metrics.expect("the metrics address is logged first"), log, early)
}

/// `GET path` on `addr`; the status line and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn value(body: &str, metric: &str) -> u64 {
    let line = body
        .lines()
        .find(|l| l.starts_with(&format!("{metric} ")))
        .unwrap_or_else(|| panic!("no {metric} in:\n{body}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_metrics_endpoint_answers_and_its_counters_move() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, addr, metrics) = start(&tmp.path().join("db"));
    let (status, body) = get(metrics, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("# TYPE thor_commits_total counter"), "{body}");
    let before = value(&body, "thor_commits_total");

    let cfg = ClientConfig { client_name: "metrics test".into(), ..ClientConfig::default() };
    let s = Session::new(
        Box::new(TcpTransport::connect(addr, &cfg).unwrap()),
        SessionConfig::default(),
    )
    .unwrap();
    for i in 0..3 {
        s.create_fixed::<Note>().unwrap().set(Note::n, i).unwrap();
        s.commit().unwrap();
    }
    let (_, body) = get(metrics, "/metrics");
    assert!(value(&body, "thor_commits_total") >= before + 3, "{body}");
    assert_eq!(value(&body, "thor_sessions_open"), 1, "{body}");
    assert_eq!(get(metrics, "/nothing").0, "HTTP/1.1 404 Not Found");
    // What an operator watches besides the counters.
    assert!(body.contains("thor_build_info{version="), "{body}");
    assert_eq!(value(&body, "thor_up"), 1, "{body}");
    assert_eq!(value(&body, "thor_health"), 0, "{body}");
    assert!(body.contains("# TYPE thor_commit_seconds histogram"), "{body}");
    assert!(value(&body, "thor_commit_seconds_count") >= 3, "{body}");
    assert!(body.contains("thor_commit_aborts_total{cause=\"rule1\"}"), "{body}");
    assert!(value(&body, "thor_database_bytes") > 0, "{body}");
    // The health check a load balancer asks.
    assert_eq!(get(metrics, "/health"), ("HTTP/1.1 200 OK".to_string(), "serving\n".to_string()));

    // `thor stats` reads the same counters over the protocol.
    let out = thor().args(["stats", &addr.to_string(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["commits"].as_u64().unwrap() >= before + 3, "{v}");
    // By host name, as a table with the summary first.
    let named = format!("localhost:{}", addr.port());
    let out = thor().args(["stats", &named]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("server 0.1.0 up ") && table.contains("serving"), "{table}");
    assert!(table.contains("database ") && table.contains("commit mode obj"), "{table}");
    assert!(!table.contains("page_commits "), "obj mode hides page-mode counters: {table}");
    drop(s);
    server.kill();
}

#[test]
fn stats_reads_the_token_from_the_environment_and_unix_sockets() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("thor.sock");
    let listen = format!("unix:{}", sock.display());
    let mut cmd = thor();
    cmd.args(["server", "--create", "--listen", &listen, "--dir"])
        .arg(tmp.path().join("db"))
        .env("THOR_TOKEN", "sesame")
        .env_remove("RUST_LOG");
    let mut server =
        common::ServerProcess(cmd.stderr(std::process::Stdio::piped()).spawn().unwrap());
    let mut log = std::io::BufReader::new(server.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut log, &mut line).unwrap() > 0, "server exited");
    }
    drain(log);
    let out =
        thor().args(["stats", &listen, "--json"]).env("THOR_TOKEN", "sesame").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["health"], 0, "{v}");
    let out = thor().args(["stats", &listen]).env("THOR_TOKEN", "wrong").output().unwrap();
    assert!(!out.status.success(), "a wrong token is refused");
    server.kill();
}

/// Issue 38 item 6: the metrics thread held the engine, so the shutdown's `Arc::try_unwrap`
/// failed and the engine was dropped without its checkpoint: every start replayed the log.
#[test]
fn metrics_server_checkpoints_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (server, addr, metrics, log, _) = start_logged(&dir, &[]);
    let cfg = ClientConfig { client_name: "metrics test".into(), ..ClientConfig::default() };
    let s = Session::new(
        Box::new(TcpTransport::connect(addr, &cfg).unwrap()),
        SessionConfig::default(),
    )
    .unwrap();
    for i in 0..5 {
        s.create_fixed::<Note>().unwrap().set(Note::n, i).unwrap();
        s.commit().unwrap();
    }
    drop(s);
    assert_eq!(get(metrics, "/metrics").0, "HTTP/1.1 200 OK");
    let rest = server.stop(log);
    assert!(rest.contains("checkpointed"), "{rest}");
    // The next start replays nothing: recovery says nothing about the log.
    let (server, _, _, log, early) = start_logged(&dir, &[]);
    assert!(!early.contains("recovered from the log"), "{early}");
    server.stop(log);
}

#[test]
fn a_bad_listen_address_fails_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    for extra in [["--listen", "256.0.0.1:1"], ["--metrics-listen", "256.0.0.1:1"]] {
        let out = thor()
            .args(["server", "--create", "--dir"])
            .arg(&dir)
            .args(extra)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot listen") && err.contains("256.0.0.1:1"), "{err}");
        assert!(!dir.exists(), "nothing is created when the address is bad");
    }
}
