//! A server through the facade: `thor::connect` to a server in this process on loopback TCP,
//! one behaviour per test.

use std::sync::Arc;

use thor::{Error, Ref, TransportError};
use thor_net::{NetConfig, Server};
use thor_server::{Engine, EngineOptions, ProtocolConfig};
use thor_storage::MemDisk;

thor::class! {
    /// A counter.
    pub class Counter("test.Counter") { value: u64 }
}

const TOKEN: &str = "facade-test-secret";

/// A server with `TOKEN` over an in-memory disk, listening on a free loopback port.
fn server() -> Server {
    let opts = EngineOptions {
        protocol: ProtocolConfig { token: TOKEN.as_bytes().to_vec(), ..ProtocolConfig::default() },
        ..EngineOptions::default()
    };
    let engine = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    Server::start("127.0.0.1:0", engine, NetConfig::default()).unwrap()
}

#[test]
fn clients_connect_with_the_token_and_see_each_others_commits() {
    let server = server();
    let a = thor::connect(server.local_addr(), TOKEN).unwrap();
    assert_eq!(a.policy_name(), "hac", "the CLI's default cache");
    let r: Ref<Counter> = a
        .run::<_, thor::ClientError>(|s| {
            let c = s.create_fixed::<Counter>()?;
            c.set(Counter::value, 41)?;
            s.set_root(0, c.as_ref())?;
            Ok(c.as_ref())
        })
        .unwrap();
    assert!(r.oref().is_none(), "made before the commit, the reference names a created object");
    let b = thor::connect(server.local_addr().to_string(), TOKEN.as_bytes()).unwrap();
    let seen = b
        .run::<_, thor::ClientError>(|s| {
            let c = s.get(s.root::<Counter>(0)?)?;
            c.set(Counter::value, c.get(Counter::value) + 1)?;
            Ok(c.get(Counter::value))
        })
        .unwrap();
    assert_eq!(seen, 42);
    // A's cached copy is of the state of its last reply: a read-only transaction on it
    // commits at the client, serialized before B's commit. `sync` collects what changed
    // (docs/clocc.md, "Read-only transactions").
    let seen = a
        .run::<_, thor::ClientError>(|s| Ok(s.get(s.root::<Counter>(0)?)?.get(Counter::value)))
        .unwrap();
    assert_eq!(seen, 41, "A read the state of its last reply");
    a.sync().unwrap();
    let seen = a
        .run::<_, thor::ClientError>(|s| Ok(s.get(s.root::<Counter>(0)?)?.get(Counter::value)))
        .unwrap();
    assert_eq!(seen, 42, "A sees B's commit");
}

#[test]
fn a_wrong_token_is_refused_with_a_typed_error() {
    let server = server();
    let err = thor::connect(server.local_addr(), "wrong").unwrap_err();
    let Error::Connect { addr, cause: source } = &err else { panic!("{err:?}") };
    assert_eq!(*addr, server.local_addr().to_string());
    assert!(matches!(source, TransportError::Refused { .. }), "{source:?}");
}

#[test]
fn nothing_listening_is_a_connect_error_naming_the_address() {
    // A port that was free a moment ago: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let err = thor::connect(addr.as_str(), "").unwrap_err();
    assert!(matches!(&err, Error::Connect { addr: a, .. } if *a == addr), "{err:?}");
    assert!(err.to_string().starts_with(&format!("connecting to {addr}: ")), "{err}");
}

#[test]
fn connect_with_takes_the_callers_session_settings() {
    let server = server();
    let cfg = thor::SessionConfig { policy: thor::PolicyConfig::Fpc, ..Default::default() };
    let s = thor::connect_with(server.local_addr(), TOKEN, cfg).unwrap();
    assert_eq!(s.policy_name(), "fpc");
}

#[cfg(unix)]
#[test]
fn a_local_client_connects_through_the_unix_socket_and_shares_the_database_with_tcp() {
    let opts = EngineOptions {
        protocol: ProtocolConfig { token: TOKEN.as_bytes().to_vec(), ..ProtocolConfig::default() },
        ..EngineOptions::default()
    };
    let engine = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let tcp = Server::start("127.0.0.1:0", engine.clone(), NetConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thor.sock");
    let unix = Server::start_unix(&path, engine, NetConfig::default()).unwrap();

    let local = thor::connect_unix(&path, TOKEN).unwrap();
    local
        .run(|s| {
            let c = s.create_fixed::<Counter>()?;
            c.set(Counter::value, 7)?;
            s.set_root(0, c.as_ref())
        })
        .unwrap();
    let remote = thor::connect(tcp.local_addr(), TOKEN).unwrap();
    let seen = remote
        .run::<_, thor::ClientError>(|s| Ok(s.get(s.root::<Counter>(0)?)?.get(Counter::value)))
        .unwrap();
    assert_eq!(seen, 7, "a commit over the Unix socket is seen over TCP");

    let err = thor::connect_unix(&path, "wrong").unwrap_err();
    assert!(matches!(&err, Error::Connect { cause: TransportError::Refused { .. }, .. }));
    assert!(err.to_string().starts_with(&format!("connecting to unix:{}", path.display())));
    drop(unix);
}

/// A CA and a server certificate for 127.0.0.1 it signed, in PEM: (CA, certificate, key).
fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[test]
fn connect_tls_runs_transactions_over_tls() {
    let (ca, cert, key) = certificates();
    let opts = EngineOptions {
        protocol: ProtocolConfig { token: TOKEN.as_bytes().to_vec(), ..ProtocolConfig::default() },
        ..EngineOptions::default()
    };
    let engine = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let tls = thor_net::TlsServer::from_pem(cert.as_bytes(), key.as_bytes(), None).unwrap();
    let net = NetConfig { tls: Some(tls), ..NetConfig::default() };
    let server = Server::start("127.0.0.1:0", engine, net).unwrap();
    let addr = server.local_addr().to_string();
    let trusted = thor::TlsClient::from_ca_pem(ca.as_bytes()).unwrap();
    let s = thor::connect_tls(&addr, TOKEN, &trusted).unwrap();
    let n = s
        .run::<_, thor::ClientError>(|s| {
            let c = s.create_fixed::<Counter>()?;
            c.set(Counter::value, 7)?;
            s.set_root(0, c.as_ref())?;
            Ok(c.get(Counter::value))
        })
        .unwrap();
    assert_eq!(n, 7);
    // A client that trusts another CA is refused before it sends its token.
    let (other_ca, _, _) = certificates();
    let untrusted = thor::TlsClient::from_ca_pem(other_ca.as_bytes()).unwrap();
    let err = thor::connect_tls(&addr, TOKEN, &untrusted).unwrap_err();
    assert!(matches!(&err, Error::Connect { cause: TransportError::Io(_), .. }), "{err:?}");
}

/// A stand-in for a stopped server between a client and a real one: it accepts connections
/// (as a stopped process's kernel still does) and forwards bytes both ways until `stop` is
/// set; from then on it holds whatever arrives, on old connections and new ones alike.
struct Stoppable {
    addr: std::net::SocketAddr,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

impl Stoppable {
    fn start(target: std::net::SocketAddr) -> Stoppable {
        use std::sync::atomic::AtomicBool;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let st = stopped.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let server = std::net::TcpStream::connect(target).unwrap();
                pump(client.try_clone().unwrap(), server.try_clone().unwrap(), st.clone());
                pump(server, client, st.clone());
            }
        });
        Stoppable { addr, stopped }
    }

    fn set_stopped(&self, on: bool) {
        self.stopped.store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Copies `from` to `to` until either closes, holding what it read while `stopped`.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    stopped: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            while stopped.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

#[test]
fn silent_server_times_out() {
    use std::time::Duration;
    // A server that accepts and never answers: connecting fails within the connect timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || listener.incoming().take(1).collect::<Vec<_>>());
    let cfg = thor::SessionConfig {
        connect_timeout: Duration::from_millis(200),
        request_timeout: Some(Duration::from_millis(200)),
        commit_timeout: Some(Duration::from_millis(200)),
        reconnect: thor::ReconnectConfig {
            give_up_after: Duration::from_millis(500),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
        },
        ..thor::SessionConfig::default()
    };
    let err = thor::connect_with(silent, "", cfg).unwrap_err();
    let Error::Connect { cause: source, .. } = &err else { panic!("{err:?}") };
    assert!(matches!(source, TransportError::TimedOut { .. }), "{source:?}");
    assert!(err.to_string().contains("did not answer"), "{err}");
    drop(held);

    // A server that stops answering mid-session: a request fails in bounded time, with the
    // timeout as its reason; once the server answers again, the session goes on by itself.
    let server = server();
    let writer = thor::connect(server.local_addr(), TOKEN).unwrap();
    writer
        .run(|s| {
            let list = s.create::<thor::Refs<Counter>>(2)?;
            for i in 0..2 {
                let c = s.create_fixed::<Counter>()?;
                c.set(Counter::value, 10 + i)?;
                list.set_var_ref(i as usize, c.as_ref())?;
            }
            s.set_root(0, list.as_ref())
        })
        .unwrap();
    let proxy = Stoppable::start(server.local_addr());
    let s = thor::connect_with(proxy.addr, TOKEN, cfg).unwrap();
    let get = |i: usize| {
        s.run::<_, thor::ClientError>(|s| {
            let list = s.get(s.root::<thor::Refs<Counter>>(0)?)?;
            Ok(s.get(list.var_ref(i))?.get(Counter::value))
        })
    };
    assert_eq!(get(0).unwrap(), 10);
    proxy.set_stopped(true);
    // A request (a read-only transaction on cached copies would commit at the client, with
    // no message: docs/clocc.md, "Read-only transactions").
    let err = s.server_stats().unwrap_err();
    assert!(
        matches!(err, thor::ClientError::Transport(TransportError::TimedOut { .. })),
        "{err:?}"
    );
    proxy.set_stopped(false);
    assert_eq!(get(1).unwrap(), 11);
    assert!(s.reconnect_stats().reconnects >= 1);
}

/// A replica that does not lead: answers every handshake `Error(NotLeader)` naming `leader`,
/// as a follower of a replica group does, and closes the connection.
fn follower(leader: Option<u64>) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut prefix = [0u8; 4];
            if s.read_exact(&mut prefix).is_err() {
                continue;
            }
            let size = thor_wire::frame_size(prefix, thor_wire::limits::FRAME_BYTES_MAX).unwrap();
            let mut frame = prefix.to_vec();
            frame.resize(size, 0);
            if s.read_exact(&mut frame[4..]).is_err() {
                continue;
            }
            let (id, _) =
                thor_wire::decode_request(frame.into(), thor_wire::limits::FRAME_BYTES_MAX)
                    .unwrap();
            let reply = thor_wire::Reply::error(
                thor_wire::ErrorCode::NotLeader,
                &thor_wire::not_leader_message(leader),
            );
            let _ = s.write_all(&reply.to_frame(id).unwrap());
        }
    });
    addr
}

#[test]
fn connect_group_reaches_the_leader_a_follower_names() {
    let server = server();
    let group = format!("1={},2={}", follower(Some(2)), server.local_addr());
    let s = thor::connect_group(&group, TOKEN).unwrap();
    assert_eq!(s.replica(), Some(2));
    assert_eq!(s.reconnect_stats().redirects, 1);
    s.run(|s| {
        let c = s.create_fixed::<Counter>()?;
        s.set_root(0, c.as_ref())
    })
    .unwrap();
    // A cluster takes a group address for a server too.
    let c = thor::connect_cluster(&[(1, group.as_str())], TOKEN).unwrap();
    let home = c.session(thor::ServerId(1)).unwrap();
    assert_eq!(home.replica(), Some(2));
    assert!(c.root::<Counter>(0).is_ok());
}

#[test]
fn a_group_address_that_cannot_be_read_says_why() {
    for bad in ["1=127.0.0.1:1,127.0.0.1:2", "1=127.0.0.1:1,1=127.0.0.1:2"] {
        let err = thor::connect_group(bad, "").unwrap_err();
        assert!(matches!(&err, Error::BadAddress { addr, .. } if addr == bad), "{err:?}");
    }
}
