//! Watching a running `thor server`: the Prometheus endpoint answers and its counters move with
//! the work done, `thor stats` prints the same counters, and a bad address fails before any
//! database is created.

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
    let mut cmd = thor();
    cmd.args(["server", "--create", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .arg("--dir")
        .arg(dir)
        .env_remove("THOR_TOKEN")
        .env_remove("RUST_LOG");
    let mut metrics = None;
    let (server, addr, log) = spawn_server(cmd, |line| {
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            metrics = Some(rest.split('/').next().unwrap().parse().unwrap());
        }
    });
    drain(log);
    (server, addr, metrics.expect("the metrics address is logged first"))
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
        s.create::<Note>(0).unwrap().set(Note::n, i).unwrap();
        s.commit().unwrap();
    }
    let (_, body) = get(metrics, "/metrics");
    assert!(value(&body, "thor_commits_total") >= before + 3, "{body}");
    assert_eq!(value(&body, "thor_sessions_open"), 1, "{body}");
    assert_eq!(get(metrics, "/nothing").0, "HTTP/1.1 404 Not Found");

    // `thor stats` reads the same counters over the protocol.
    let out = thor().args(["stats", &addr.to_string(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["commits"].as_u64().unwrap() >= before + 3, "{v}");
    drop(s);
    server.kill();
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
