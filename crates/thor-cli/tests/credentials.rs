//! `thor server --credentials` as a real process: scopes enforced over TCP, a credential
//! revoked by re-reading the file on SIGHUP, and two servers that authenticate to each other
//! with their peer credentials for a transaction across both.

mod common;

use std::io::BufRead;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use common::{ServerProcess, free_port, spawn_server, thor};
use thor_client::{ClientError, Cluster, Session, SessionConfig};
use thor_core::ServerId;
use thor_net::{ClientConfig, TcpTransport};
use thor_wire::{ErrorCode, TransportError};

thor_client::class! {
    /// Something to write.
    pub class Note("test.Note") {
        n: u64,
    }
}

const WRITER: &str = "writer-secret-0123456789";
const READER: &str = "reader-secret-0123456789";
const OPS: &str = "operator-secret-01234567";
const ALICE: &str = "alice-secret-0123456789a";

/// How long a test waits for a server to log what it did: far more than it takes.
const PATIENCE: Duration = Duration::from_secs(60);

/// Writes a credentials file readable by its owner only, replacing it whole (a server that
/// re-reads it sees the old or the new one).
fn write_credentials(path: &Path, lines: &[&str]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, lines.join("\n") + "\n").unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A server's log lines, read on a thread (so it never blocks writing them).
struct Log(Receiver<String>);

impl Log {
    fn follow(log: std::io::BufReader<std::process::ChildStderr>) -> Log {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in log.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Log(rx)
    }

    /// Waits for a line containing `needle`; fails the test after [`PATIENCE`].
    fn wait_for(&self, needle: &str) -> String {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("the server did not log {needle:?}: {e}"),
            }
        }
    }
}

fn config(token: &str) -> ClientConfig {
    ClientConfig {
        token: token.as_bytes().to_vec(),
        client_name: "credentials test".into(),
        ..ClientConfig::default()
    }
}

fn session(addr: SocketAddr, token: &str) -> Session {
    let t = TcpTransport::connect(addr, &config(token)).unwrap();
    Session::new(Box::new(t), SessionConfig::default()).unwrap()
}

fn server(dir: &Path, credentials: &Path, extra: &[&str]) -> (ServerProcess, SocketAddr, Log) {
    let mut cmd = thor();
    cmd.args(["server", "--create", "--dir"]).arg(dir);
    cmd.arg("--credentials").arg(credentials).args(extra);
    if !extra.contains(&"--listen") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    cmd.env_remove("THOR_TOKEN");
    let (p, addr, log) = spawn_server(cmd, |_| {});
    (p, addr, Log::follow(log))
}

fn forbidden(e: ClientError) {
    assert!(matches!(e, ClientError::Server { code: ErrorCode::Forbidden, .. }), "{e:?}");
}

#[test]
fn scopes_are_enforced_and_sighup_revokes() {
    let tmp = tempfile::tempdir().unwrap();
    let file: PathBuf = tmp.path().join("credentials");
    let everyone = [
        "# name  scope       secret".to_string(),
        format!("writer  read-write  {WRITER}"),
        format!("reader  read-only   {READER}"),
        format!("ops     operator    {OPS}"),
        format!("alice   read-write  {ALICE}"),
    ];
    let lines: Vec<&str> = everyone.iter().map(String::as_str).collect();
    write_credentials(&file, &lines);
    let (server, addr, log) = server(&tmp.path().join("db"), &file, &[]);

    // The writer writes; the reader reads it and cannot write, and goes on reading.
    let w = session(addr, WRITER);
    let note = w.create_fixed::<Note>().unwrap();
    note.set(Note::n, 7).unwrap();
    let r = note.as_ref();
    w.set_root(0, r).unwrap();
    w.commit().unwrap();
    let reader = session(addr, READER);
    let n = reader.get(reader.root::<Note>(0).unwrap()).unwrap();
    assert_eq!(n.get(Note::n), 7);
    n.set(Note::n, 8).unwrap();
    drop(n);
    forbidden(reader.commit().unwrap_err());
    forbidden(reader.server_stats().unwrap_err());
    assert_eq!(reader.get(reader.root::<Note>(0).unwrap()).unwrap().get(Note::n), 7);
    // Only the operator sees the counters.
    forbidden(w.server_stats().unwrap_err());
    assert!(session(addr, OPS).server_stats().unwrap().commits >= 1);

    // Alice is removed from the file and the server told: her session ends, she cannot come
    // back, the others go on.
    let alice = session(addr, ALICE);
    assert_eq!(alice.get(alice.root::<Note>(0).unwrap()).unwrap().get(Note::n), 7);
    write_credentials(&file, &lines[..4]);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let line = log.wait_for("SIGHUP: authentication is now 3 credentials");
    assert!(line.contains("1 sessions of revoked credentials closed"), "{line}");
    let gone = alice.get(alice.root::<Note>(0).unwrap()).and_then(|n| {
        n.set(Note::n, 9)?;
        drop(n);
        alice.commit()
    });
    assert!(gone.is_err(), "the revoked session is closed: {gone:?}");
    match TcpTransport::connect(addr, &config(ALICE)) {
        Err(TransportError::Refused { code: ErrorCode::Unauthenticated, .. }) => {}
        other => panic!("{:?}", other.map(|_| "connected")),
    }
    let n = w.get(w.root::<Note>(0).unwrap()).unwrap();
    n.set(Note::n, 10).unwrap();
    drop(n);
    w.commit().unwrap();

    // A file that does not parse is reported and changes nothing.
    std::fs::write(&file, "writer read-write short\n").unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    log.wait_for("the credentials in use are kept");
    assert_eq!(session(addr, WRITER).get(w.root::<Note>(0).unwrap()).unwrap().get(Note::n), 10);
}

#[test]
fn peers_authenticate_with_their_peer_credentials() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("credentials");
    write_credentials(
        &file,
        &[
            &format!("writer read-write {WRITER}"),
            "server-1 peer:1 server-1-secret-0123456",
            "server-2 peer:2 server-2-secret-0123456",
        ],
    );
    let addrs: [SocketAddr; 2] =
        [0, 1].map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap());
    let mut servers = Vec::new();
    for id in [1u32, 2] {
        let other = 3 - id;
        let listen = addrs[id as usize - 1].to_string();
        let peer = format!("{other}={}", addrs[other as usize - 1]);
        let args = ["--listen", &listen, "--server-id", &id.to_string(), "--peer", &peer];
        servers.push(server(&tmp.path().join(format!("db{id}")), &file, &args));
    }
    let connect = Box::new(move |id: ServerId| {
        let t = TcpTransport::connect(addrs[id.0 as usize - 1], &config(WRITER))?;
        Ok(Box::new(t) as Box<dyn thor_wire::Transport>)
    });
    let ids = [ServerId(1), ServerId(2)];
    let c = Cluster::new(&ids, ids[0], connect, SessionConfig::default()).unwrap();
    // A server just started refuses client timestamps a little ahead of its clock (its
    // threshold after an open): the transaction is retried until it commits, or fails.
    let give_up = Instant::now() + PATIENCE;
    loop {
        for id in ids {
            let x = c.create_fixed::<Note>(id).unwrap();
            c.get(x).unwrap().set(Note::n, u64::from(id.0)).unwrap();
        }
        match c.commit() {
            Ok(_) => break,
            Err(e) if e.is_conflict() && Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(c.stats().two_phase, 1, "one transaction across both servers");
}

#[test]
fn a_server_without_its_peer_credential_does_not_start() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("credentials");
    write_credentials(
        &file,
        &[&format!("writer read-write {WRITER}"), "s2 peer:2 server-2-secret-0123456"],
    );
    let out = thor()
        .args(["server", "--create", "--server-id", "1", "--listen", "127.0.0.1:0", "--dir"])
        .arg(tmp.path().join("db"))
        .arg("--credentials")
        .arg(&file)
        .args(["--peer", "2=127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no peer:1 line"), "{err}");
}
