//! What the operator sees of a client with a wrong token: one WARN line naming the peer's
//! address. (Its own test binary: it installs the process's global log subscriber.)

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use thor_net::NetConfig;
use thor_server::ProtocolConfig;
use thor_wire::ErrorCode;

/// A log writer into a shared buffer.
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn wrong_token_is_logged_at_warn_with_the_peer_address() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || Capture(sink.clone()))
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let text = || String::from_utf8_lossy(&log.lock().unwrap()).into_owned();

    let db = Db::new();
    let protocol = ProtocolConfig { token: b"secret".to_vec(), ..ProtocolConfig::default() };
    let (_engine, server) = serve(db.create_with(protocol), NetConfig::default());
    let mut s = raw(server.local_addr());
    let peer = s.local_addr().unwrap().to_string();
    let hello = thor_wire::Request::new(thor_wire::RequestBody::Hello(thor_wire::Hello::new(
        &b"wrong"[..],
        "intruder",
    )));
    send_raw(&mut s, &hello.to_frame(1).unwrap());
    expect_error_and_close(&mut s, ErrorCode::Unauthenticated, 1);
    // The WARN is written before the refusal is sent.
    let line = text().lines().find(|l| l.contains("refused a Hello")).map(str::to_owned);
    let line = line.unwrap_or_else(|| panic!("no WARN line: {}", text()));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(&peer), "the peer's address {peer} in {line}");
    assert!(line.contains("wrong token"), "{line}");
    // A right token is not logged at WARN.
    let _ok = connect(server.local_addr(), b"secret");
    assert_eq!(text().matches("refused a Hello").count(), 1, "{}", text());
    server.shutdown().unwrap();
}
