//! `thor server` as a real process: it refuses a missing database without `--create`, creates
//! one with it, serves clients with a token, and exits cleanly on SIGTERM with its data durable
//! for the next process.

mod common;

use std::time::Duration;

use common::{start, thor};
use thor_core::PageId;
use thor_net::{ClientConfig, TcpTransport};
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

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

    let (proc, addr, err) = start(&dir, &["--create", "--page-kb", "4"], Some("from-env"));
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
    let log = proc.stop(err);
    assert!(log.contains("shutting down"), "{log}");

    // A second process on the same directory serves the same page.
    let (proc, addr, err) = start(&dir, &[], Some("from-env"));
    let mut t = TcpTransport::connect(addr, &config("from-env")).unwrap();
    match t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap().body {
        ReplyBody::Page { bytes, .. } => assert_eq!(bytes, page),
        other => panic!("{other:?}"),
    }
    drop(t);
    proc.stop(err);
}

#[test]
fn second_opener_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (proc, _addr, err) = start(&dir, &["--create", "--page-kb", "4"], None);
    // A second server on the same directory is refused, and told who holds it.
    let out = thor()
        .args(["server", "--dir"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    let pid = proc.0.id().to_string();
    assert!(msg.contains("in use") && msg.contains(&pid), "names the holder: {msg}");
    assert!(msg.contains("thor server"), "names the program: {msg}");
    // So is an embedded opener.
    let out = thor()
        .args(["oo7", "run", "--dir"])
        .arg(&dir)
        .args(["--traversal", "t1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("in use") && msg.contains(&pid), "names the holder: {msg}");
    proc.stop(err);
    // Once the holder is gone the directory opens again.
    let (proc, _addr, err) = start(&dir, &[], None);
    proc.stop(err);
}

#[test]
fn direct_io_server_serves_the_same_pages_and_counts_device_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (proc, addr, err) = start(&dir, &["--create", "--page-kb", "4"], None);
    let fetch_first = |addr| {
        let mut t = TcpTransport::connect(addr, &config("")).unwrap();
        match t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap().body
        {
            ReplyBody::Page { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        }
    };
    let buffered = fetch_first(addr);
    let log = proc.stop(err);
    assert!(!log.contains("direct reads:"), "buffered servers count no direct reads: {log}");

    // A fresh process has nothing cached: its page comes from the device, and it says how
    // many direct reads it made (recovery's reads of the superblock and page file among them).
    let (proc, addr, err) = start(&dir, &["--direct-io"], None);
    assert_eq!(fetch_first(addr), buffered);
    let log = proc.stop(err);
    let reads: u64 = log
        .split("direct reads: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the shutdown log counts direct reads: {log}"));
    assert!(reads > 0, "{log}");
}

#[test]
fn thor_server_listens_on_a_unix_socket_and_removes_it_at_exit() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let sock = tmp.path().join("thor.sock");
    let mut cmd = thor();
    cmd.args(["server", "--create", "--page-kb", "4", "--dir"])
        .arg(&dir)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .env_remove("THOR_TOKEN")
        .stderr(std::process::Stdio::piped());
    let mut proc = common::ServerProcess(cmd.spawn().unwrap());
    let mut log = std::io::BufReader::new(proc.0.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the server exited before listening");
        if line.contains("listening on unix:") {
            break;
        }
    }
    let mut t = thor_net::UnixTransport::connect(&sock, &config("")).unwrap();
    assert_eq!(t.server().page_size, 4096);
    match t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap().body {
        ReplyBody::Page { page, .. } => assert_eq!(page, PageId::FIRST),
        other => panic!("{other:?}"),
    }
    drop(t);
    let rest = proc.stop(log);
    assert!(rest.contains("shutting down"), "{rest}");
    assert!(!sock.exists(), "the socket file is removed at exit");
}
