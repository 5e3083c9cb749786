//! `thor server` as a real process: it refuses a missing database without `--create`, creates
//! one with it, serves clients with a token, and exits cleanly on SIGTERM with its data durable
//! for the next process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use thor_core::PageId;
use thor_net::{ClientConfig, TcpTransport};
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

fn thor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_thor"))
}

/// A `thor server` process, killed and reaped if the test fails before stopping it.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Starts `thor server` and returns it with the address it logged.
fn start(
    dir: &std::path::Path,
    extra: &[&str],
) -> (Proc, SocketAddr, BufReader<std::process::ChildStderr>) {
    let mut proc = Proc(
        thor()
            .args(["server", "--dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env("THOR_TOKEN", "from-env")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(proc.0.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the server exited before listening");
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
            return (proc, addr, err);
        }
    }
}

/// Sends SIGTERM and expects a clean exit; returns the rest of the log.
fn stop(mut proc: Proc, mut err: BufReader<std::process::ChildStderr>) -> String {
    let status = Command::new("kill").arg("-TERM").arg(proc.0.id().to_string()).status().unwrap();
    assert!(status.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let code = proc.0.wait().unwrap();
    assert!(code.success(), "exit status {code}; log:\n{rest}");
    rest
}

fn config(token: &str) -> ClientConfig {
    ClientConfig {
        token: token.as_bytes().to_vec(),
        io_timeout: Some(Duration::from_secs(20)),
        ..ClientConfig::default()
    }
}

#[test]
fn thor_server_creates_serves_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");

    let out = thor()
        .args(["server", "--dir"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--create"), "the error says what to do");

    let (proc, addr, err) = start(&dir, &["--create", "--page-kb", "4"]);
    match TcpTransport::connect(addr, &config("wrong")) {
        Err(TransportError::Refused { code: ErrorCode::Unauthenticated, .. }) => {}
        other => panic!("{other:?}"),
    }
    let mut t = TcpTransport::connect(addr, &config("from-env")).unwrap();
    assert_eq!(t.server().page_size, 4096);
    let page =
        match t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap().body
        {
            ReplyBody::Page { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        };
    drop(t);
    let log = stop(proc, err);
    assert!(log.contains("shutting down"), "{log}");

    // A second process on the same directory serves the same page.
    let (proc, addr, err) = start(&dir, &[]);
    let mut t = TcpTransport::connect(addr, &config("from-env")).unwrap();
    match t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap().body {
        ReplyBody::Page { bytes, .. } => assert_eq!(bytes, page),
        other => panic!("{other:?}"),
    }
    drop(t);
    stop(proc, err);
}
