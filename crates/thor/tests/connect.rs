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
        .run(|s| {
            let c = s.create::<Counter>(0)?;
            c.set(Counter::value, 41)?;
            s.set_root(0, c.as_ref())?;
            Ok(c.as_ref())
        })
        .unwrap();
    assert!(r.oref().is_none(), "made before the commit, the reference names a created object");
    let b = thor::connect(server.local_addr().to_string(), TOKEN.as_bytes()).unwrap();
    let seen = b
        .run(|s| {
            let c = s.get(s.root::<Counter>(0)?)?;
            c.set(Counter::value, c.get(Counter::value) + 1)?;
            Ok(c.get(Counter::value))
        })
        .unwrap();
    assert_eq!(seen, 42);
    let seen = a.run(|s| Ok(s.get(s.root::<Counter>(0)?)?.get(Counter::value))).unwrap();
    assert_eq!(seen, 42, "A sees B's commit");
}

#[test]
fn a_wrong_token_is_refused_with_a_typed_error() {
    let server = server();
    let err = thor::connect(server.local_addr(), "wrong").unwrap_err();
    let Error::Connect { addr, source } = &err else { panic!("{err:?}") };
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
            let c = s.create::<Counter>(0)?;
            c.set(Counter::value, 7)?;
            s.set_root(0, c.as_ref())
        })
        .unwrap();
    let remote = thor::connect(tcp.local_addr(), TOKEN).unwrap();
    let seen = remote.run(|s| Ok(s.get(s.root::<Counter>(0)?)?.get(Counter::value))).unwrap();
    assert_eq!(seen, 7, "a commit over the Unix socket is seen over TCP");

    let err = thor::connect_unix(&path, "wrong").unwrap_err();
    assert!(matches!(&err, Error::Connect { source: TransportError::Refused { .. }, .. }));
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
        .run(|s| {
            let c = s.create::<Counter>(0)?;
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
    assert!(matches!(&err, Error::Connect { source: TransportError::Io(_), .. }), "{err:?}");
}
