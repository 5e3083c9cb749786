//! The command-line clients given a replica group's address (`R=HOST:PORT,...`,
//! `thor_client::group`): a real `thor server` process serves as the group's leader, and a
//! follower in this process answers every handshake `Error(NotLeader)` naming it. The clients
//! must land on the leader by themselves.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

/// A replica that does not lead: answers every handshake `Error(NotLeader)` naming `leader`,
/// and closes the connection.
fn follower(leader: u64) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut prefix = [0u8; 4];
            if s.read_exact(&mut prefix).is_err() {
                continue;
            }
            let max = thor_wire::limits::FRAME_BYTES_MAX;
            let Ok(size) = thor_wire::frame_size(prefix, max) else { continue };
            let mut frame = prefix.to_vec();
            frame.resize(size, 0);
            if s.read_exact(&mut frame[4..]).is_err() {
                continue;
            }
            let Ok((id, _)) = thor_wire::decode_request(frame.into(), max) else { continue };
            let reply = thor_wire::Reply::error(
                thor_wire::ErrorCode::NotLeader,
                &thor_wire::not_leader_message(Some(leader)),
            );
            let _ = s.write_all(&reply.to_frame(id).unwrap());
        }
    });
    addr
}

#[test]
fn transfer_client_and_stats_follow_a_group_to_its_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    let server = common::start_at(&dir, addr);
    // Replica 1 follows and names replica 2, the server: listed first, it is dialed first.
    let group = format!("1={},2={addr}", follower(2));
    let history = tmp.path().join("history.jsonl");
    let client = |extra: &[&str]| {
        let out = common::thor()
            .args(["bench", "transfer-client", "--connect", &group, "--client", "1"])
            .arg("--history")
            .arg(&history)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    client(&["--setup", "8", "--seconds", "0"]);
    client(&["--seconds", "1"]);
    let lines = std::fs::read_to_string(&history).unwrap();
    assert!(lines.contains("\"committed\""), "transfers committed through the group: {lines}");
    // `thor stats` of the group: the leader's counters.
    let out = common::thor().args(["stats", "--json", &group]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(stats["commits"].as_u64().unwrap() > 0, "{stats:#}");
    // A group address that cannot be read is refused with what is wrong.
    let out = common::thor()
        .args(["bench", "transfer-client", "--connect", "1=127.0.0.1:1,1=127.0.0.1:2"])
        .args(["--client", "1", "--seconds", "0", "--history"])
        .arg(tmp.path().join("never.jsonl"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("replica 1 is named twice"));
    server.kill();
}
