//! Bad input over real TCP against a live server: each kind gets an error reply (where one is
//! possible) and a closed connection, while another client keeps being served, nothing panics,
//! and no data changes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use thor_core::PageId;
use thor_core::checksum::Crc32c;
use thor_net::NetConfig;
use thor_server::ProtocolConfig;
use thor_wire::{ErrorCode, Hello, Request, RequestBody, Transport};

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// A frame of type `kind` around `payload`, with a correct length and checksum.
fn frame(kind: u16, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&kind.to_le_bytes());
    f.extend_from_slice(&0u16.to_le_bytes());
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(payload);
    let mut crc = Crc32c::new();
    crc.update(&f[0..4]);
    crc.update(&f[8..]);
    let c = crc.finish();
    f[4..8].copy_from_slice(&c.to_le_bytes());
    f
}

fn hello_frame(token: &[u8], id: u64) -> Vec<u8> {
    let h = Hello::new(Bytes::copy_from_slice(token), "raw");
    Request::new(RequestBody::Hello(h)).to_frame(id).unwrap()
}

const TOKEN: &[u8] = b"s3cret";

#[test]
fn bad_input_is_answered_and_disconnected_while_others_are_served() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let db = Db::new();
    // A per-connection frame limit of 1 MiB, far below the protocol's 64 MiB.
    let config = ProtocolConfig {
        token: TOKEN.to_vec(),
        max_frame_bytes: 1 << 20,
        ..ProtocolConfig::default()
    };
    let (handler, server) = serve(db.create_with(config), NetConfig::default());
    let addr = server.local_addr();

    // A good client with some data, connected for the whole test.
    let mut good = connect(addr, TOKEN);
    let class = commit_ok(&mut good, vec![], vec![item_class().to_class_object()])[0];
    let objs = commit_ok(
        &mut good,
        vec![],
        (0..200).map(|i| item(class.raw(), 0, i, b"payload")).collect(),
    );
    let before = all_pages(&mut good);
    let stats_before = handler.server_stats();

    let fetch = Request::new(RequestBody::Fetch { page: PageId::FIRST });
    let mut bad_crc = fetch.to_frame(4).unwrap();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0x40;

    let mut junk = 32u32.to_le_bytes().to_vec();
    junk.extend((0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(11)));

    let mut bad_magic = vec![0u8; 8];
    bad_magic.extend_from_slice(b"HTTP/1.1");

    // (name, bytes to send, whether to half-close after them, expected code, expected id)
    type Case = (&'static str, Vec<u8>, bool, ErrorCode, u64);
    let cases: Vec<Case> = vec![
        ("garbage after a plausible length", junk, false, ErrorCode::BadFrame, 0),
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: thor\r\n\r\n".to_vec(),
            false,
            ErrorCode::FrameTooLarge,
            0,
        ),
        (
            "a frame above the protocol limit",
            (65u32 << 20).to_le_bytes().to_vec(),
            false,
            ErrorCode::FrameTooLarge,
            0,
        ),
        (
            "a frame above the connection limit",
            {
                let mut f = (2u32 << 20).to_le_bytes().to_vec();
                f.extend_from_slice(&[0; 64]);
                f
            },
            false,
            ErrorCode::FrameTooLarge,
            0,
        ),
        (
            "a length shorter than a header",
            3u32.to_le_bytes().to_vec(),
            false,
            ErrorCode::BadFrame,
            0,
        ),
        ("a frame with a bad checksum", bad_crc, false, ErrorCode::BadFrame, 0),
        (
            "a truncated frame then EOF",
            hello_frame(TOKEN, 1)[..13].to_vec(),
            true,
            ErrorCode::BadFrame,
            0,
        ),
        ("a truncated length word then EOF", vec![40, 0], true, ErrorCode::BadFrame, 0),
        ("an unknown message type", frame(0x0077, 6, &[0; 8]), false, ErrorCode::UnknownType, 6),
        (
            "a reply sent as a request",
            frame(0x0082, 7, &[0; 4]),
            false,
            ErrorCode::UnexpectedMessage,
            7,
        ),
        ("a Hello without the magic", frame(0x0001, 8, &bad_magic), false, ErrorCode::Malformed, 8),
        ("a wrong token", hello_frame(b"guess", 9), false, ErrorCode::Unauthenticated, 9),
        ("an empty token", hello_frame(b"", 10), false, ErrorCode::Unauthenticated, 10),
        (
            "a request before Hello",
            fetch.to_frame(11).unwrap(),
            false,
            ErrorCode::HelloRequired,
            11,
        ),
        (
            "a malformed request after Hello",
            {
                let mut f = hello_frame(TOKEN, 1);
                f.extend(frame(0x0002, 12, &[0; 12])); // Fetch of page 0
                f
            },
            false,
            ErrorCode::Malformed,
            12,
        ),
    ];

    for (name, bytes, half_close, code, id) in cases {
        let mut s = raw(addr);
        send_raw(&mut s, &bytes);
        if half_close {
            end_raw(&s);
        }
        if name == "a malformed request after Hello" {
            let (hid, hello_ok) = read_frame(&mut s).unwrap();
            assert_eq!(hid, 1);
            assert!(matches!(hello_ok.body, thor_wire::ReplyBody::HelloOk(_)), "{name}");
        }
        expect_error_and_close(&mut s, code, id);
        // The good client is still served, and sees the same data.
        assert_eq!(read(&mut good, objs[7])[..], item(class.raw(), 0, 7, b"payload")[..], "{name}");
    }

    // A client that connects and says nothing before closing gets no reply and costs nothing.
    let s = raw(addr);
    drop(s);

    assert_eq!(all_pages(&mut good), before, "no data changed");
    let after = handler.server_stats();
    assert_eq!(after.commits, stats_before.commits);
    assert_eq!(after.objects_created, stats_before.objects_created);
    assert_eq!(after.auth_failures - stats_before.auth_failures, 2);
    assert!(after.protocol_errors - stats_before.protocol_errors >= 12);
    assert_eq!(good.server().page_size, 4096);
    drop(good);
    server.shutdown().unwrap();
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "nothing panicked");
}
