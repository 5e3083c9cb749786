//! The Unix-domain socket listener and client transport: the same sessions, limits and
//! shutdown as over TCP, on a socket file.
#![cfg(unix)]

mod common;

use common::*;
use thor_core::PageId;
use thor_net::{NetConfig, Server, UnixTransport};
use thor_server::ProtocolConfig;
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

fn fetch_req(page: PageId) -> Request {
    Request::new(RequestBody::Fetch { page })
}

#[test]
fn a_unix_socket_serves_sessions_like_tcp() {
    let db = Db::new();
    let engine = db.create();
    let sock_dir = tempfile::tempdir().unwrap();
    let path = sock_dir.path().join("thor.sock");
    let server = Server::start_unix(&path, engine.clone(), NetConfig::default()).unwrap();
    assert_eq!(server.unix_path(), Some(path.as_path()));

    let mut a = UnixTransport::connect(&path, &client_config(b"")).unwrap();
    let mut b = UnixTransport::connect(&path, &client_config(b"")).unwrap();
    // A commit on one connection is seen by a fetch on the other.
    let class = commit_ok(&mut a, vec![], vec![item_class().to_class_object()])[0];
    let made = commit_ok(&mut a, vec![], vec![item(class.raw(), 0, 7, b"over a unix socket")]);
    let page = made[0].page().unwrap();
    match b.round_trip(&fetch_req(page)).unwrap().body {
        ReplyBody::Page { page: got, bytes } => {
            assert_eq!(got, page);
            assert!(bytes.windows(18).any(|w| w == b"over a unix socket"));
        }
        other => panic!("{other:?}"),
    }
    // Pipelined requests are answered in order.
    for _ in 0..4 {
        a.send(&fetch_req(PageId::FIRST)).unwrap();
    }
    for _ in 0..4 {
        assert!(matches!(a.recv().unwrap().body, ReplyBody::Page { .. }));
    }
    // A missing page is an error reply; the session goes on.
    let r = a.round_trip(&fetch_req(PageId::new(999).unwrap())).unwrap();
    assert!(matches!(r.body, ReplyBody::Error { code: ErrorCode::NoSuchPage, .. }));
    assert_eq!(a.round_trip(&Request::new(RequestBody::Goodbye)).unwrap().body, ReplyBody::Ack);

    // Shutdown closes the connection still open with ShuttingDown, then refuses new ones.
    server.shutdown().unwrap();
    if b.send(&fetch_req(PageId::FIRST)).is_ok() {
        match b.recv() {
            Ok(r) => {
                assert!(matches!(r.body, ReplyBody::Error { code: ErrorCode::ShuttingDown, .. }))
            }
            Err(TransportError::Io(_) | TransportError::Closed) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(UnixTransport::connect(&path, &client_config(b"")).is_err());
}

#[test]
fn a_unix_socket_enforces_the_token_and_the_pre_hello_frame_limit() {
    let db = Db::new();
    let config = ProtocolConfig { token: b"secret".to_vec(), ..ProtocolConfig::default() };
    let engine = db.create_with(config);
    let sock_dir = tempfile::tempdir().unwrap();
    let path = sock_dir.path().join("thor.sock");
    let server = Server::start_unix(&path, engine, NetConfig::default()).unwrap();
    match UnixTransport::connect(&path, &client_config(b"wrong")) {
        Err(TransportError::Refused { .. }) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    // An oversized first frame is refused on its length word: an error and a closed stream.
    {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(SAFETY_TIMEOUT)).unwrap();
        s.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let reply = thor_wire::decode_reply(bytes::Bytes::from(got), 1 << 20).unwrap();
        assert!(matches!(reply.1.body, ReplyBody::Error { code: ErrorCode::FrameTooLarge, .. }));
    }
    let mut ok = UnixTransport::connect(&path, &client_config(b"secret")).unwrap();
    assert!(matches!(
        ok.round_trip(&fetch_req(PageId::FIRST)).unwrap().body,
        ReplyBody::Page { .. }
    ));
    drop(ok);
    server.shutdown().unwrap();
}
