//! TLS on client connections: a round trip (fetch and commit) over TLS, a client that does not
//! trust the server's certificate, client certificates required and checked, and the
//! handshake deadline on a connection that never starts its TLS handshake; two-phase commit's
//! peer links and a replica group's Raft links over TLS.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use thor_core::PageId;
use thor_net::{NetConfig, Server, TlsClient, TlsServer, TlsTransport};
use thor_server::{Engine, EngineOptions, ProtocolConfig};
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

/// A test certificate authority.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
struct Identity {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses), signed by this CA.
    fn issue(&self, names: &[&str]) -> Identity {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &self.issuer).unwrap();
        Identity { cert: cert.pem(), key: key.serialize_pem() }
    }
}

/// A server on 127.0.0.1 speaking TLS with a certificate from `ca` for 127.0.0.1 and
/// localhost, requiring client certificates from `client_ca` if given.
fn tls_server(db: &Db, ca: &Ca, client_ca: Option<&Ca>) -> Server {
    tls_server_of(db.create_with(ProtocolConfig::default()), ca, client_ca)
}

/// [`tls_server`] for an engine of the caller's.
fn tls_server_of(engine: Arc<Engine>, ca: &Ca, client_ca: Option<&Ca>) -> Server {
    let id = ca.issue(&["127.0.0.1", "localhost"]);
    let client_ca = client_ca.map(|c| c.pem());
    let tls = TlsServer::from_pem(
        id.cert.as_bytes(),
        id.key.as_bytes(),
        client_ca.as_deref().map(str::as_bytes),
    )
    .unwrap();
    let net = NetConfig { tls: Some(tls), ..NetConfig::default() };
    Server::start("127.0.0.1:0", engine, net).unwrap()
}

fn tls_connect(addr: SocketAddr, tls: &TlsClient) -> Result<TlsTransport, TransportError> {
    TlsTransport::connect(&addr.to_string(), &client_config(b""), tls)
}

#[test]
fn tls_connection_round_trip() {
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let server = tls_server(&db, &ca, None);
    let addr = server.local_addr();
    let tls = TlsClient::from_ca_pem(ca.pem().as_bytes()).unwrap();
    let mut t = tls_connect(addr, &tls).unwrap();
    // A commit and a fetch of what it wrote.
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let created = commit_ok(&mut t, vec![], vec![item(class.raw(), 0, 42, &[9; 3000])]);
    let obj = read(&mut t, created[0]);
    assert_eq!(seq_of(&obj), 42);
    // Pipelined requests and a large reply (a page) over the TLS stream.
    for _ in 0..4 {
        t.send(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap();
    }
    for _ in 0..4 {
        assert!(matches!(t.recv().unwrap().body, ReplyBody::Page { .. }));
    }
    // The server's name may be given instead of the address's host.
    let by_name = tls.clone().with_server_name("localhost").unwrap();
    let mut u = tls_connect(addr, &by_name).unwrap();
    assert_eq!(seq_of(&read(&mut u, created[0])), 42);
    // A plain TCP client gets no thor session from a TLS server.
    assert!(thor_net::TcpTransport::connect(addr, &client_config(b"")).is_err());
    drop((t, u));
    server.shutdown().unwrap();
}

#[test]
fn a_client_that_does_not_trust_the_server_is_refused() {
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let server = tls_server(&db, &ca, None);
    let addr = server.local_addr();
    // Another CA: the server's certificate does not verify.
    let other = Ca::new("another CA");
    let wrong = TlsClient::from_ca_pem(other.pem().as_bytes()).unwrap();
    match tls_connect(addr, &wrong) {
        Err(TransportError::Io(e)) => assert!(e.to_string().contains("certificate"), "{e}"),
        other => panic!("expected a certificate error, got {other:?}"),
    }
    // The right CA but a name the certificate does not hold.
    let right = TlsClient::from_ca_pem(ca.pem().as_bytes()).unwrap();
    let misnamed = right.clone().with_server_name("db.example").unwrap();
    assert!(matches!(tls_connect(addr, &misnamed), Err(TransportError::Io(_))));
    // The server is unaffected.
    let mut t = tls_connect(addr, &right).unwrap();
    fetch(&mut t, PageId::FIRST);
    wait_until(|| server.stats().tls_handshakes_failed.load(Relaxed) == 2);
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn client_certificates_are_required_and_checked_when_a_client_ca_is_set() {
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let clients = Ca::new("thor clients CA");
    let server = tls_server(&db, &ca, Some(&clients));
    let addr = server.local_addr();
    let ca_pem = ca.pem();
    // No client certificate: refused during the handshake, before any request.
    let anonymous = TlsClient::from_ca_pem(ca_pem.as_bytes()).unwrap();
    assert!(tls_connect(addr, &anonymous).is_err());
    // A certificate from a CA the server does not accept for clients: refused.
    let stranger = ca.issue(&["client.example"]);
    let forged = TlsClient::with_identity_pem(
        ca_pem.as_bytes(),
        stranger.cert.as_bytes(),
        stranger.key.as_bytes(),
    )
    .unwrap();
    assert!(tls_connect(addr, &forged).is_err());
    // A certificate from the client CA: admitted, and the session works.
    let me = clients.issue(&["client.example"]);
    let trusted =
        TlsClient::with_identity_pem(ca_pem.as_bytes(), me.cert.as_bytes(), me.key.as_bytes())
            .unwrap();
    let mut t = tls_connect(addr, &trusted).unwrap();
    fetch(&mut t, PageId::FIRST);
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()]);
    assert_eq!(class.len(), 1);
    wait_until(|| server.stats().tls_handshakes_failed.load(Relaxed) == 2);
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn a_connection_that_never_starts_its_tls_handshake_is_closed_at_the_deadline() {
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let id = ca.issue(&["127.0.0.1"]);
    let tls = TlsServer::from_pem(id.cert.as_bytes(), id.key.as_bytes(), None).unwrap();
    let net = NetConfig {
        tls: Some(tls),
        handshake_timeout: std::time::Duration::from_millis(200),
        ..NetConfig::default()
    };
    let server = Server::start("127.0.0.1:0", db.create(), net).unwrap();
    let mut silent = raw(server.local_addr());
    // No TLS handshake, so no thor reply can be read: the server just closes.
    assert!(read_frame(&mut silent).is_none());
    assert_eq!(server.stats().handshakes_timed_out.load(Relaxed), 1);
    // A client that completes its handshake in time is served.
    let client = TlsClient::from_ca_pem(ca.pem().as_bytes()).unwrap();
    let mut t = tls_connect(server.local_addr(), &client).unwrap();
    fetch(&mut t, PageId::FIRST);
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn a_wrong_token_over_tls_is_refused() {
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let id = ca.issue(&["127.0.0.1"]);
    let tls = TlsServer::from_pem(id.cert.as_bytes(), id.key.as_bytes(), None).unwrap();
    let protocol = ProtocolConfig { token: b"secret".to_vec(), ..ProtocolConfig::default() };
    let net = NetConfig { tls: Some(tls), ..NetConfig::default() };
    let server = Server::start("127.0.0.1:0", db.create_with(protocol), net).unwrap();
    let client = TlsClient::from_ca_pem(ca.pem().as_bytes()).unwrap();
    let addr = server.local_addr().to_string();
    match TlsTransport::connect(&addr, &client_config(b"wrong"), &client) {
        Err(TransportError::Refused { code: ErrorCode::Unauthenticated, .. }) => {}
        other => panic!("expected Unauthenticated, got {other:?}"),
    }
    let mut t = TlsTransport::connect(&addr, &client_config(b"secret"), &client).unwrap();
    fetch(&mut t, PageId::FIRST);
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn peer_messages_travel_over_tls_with_the_servers_certificate() {
    use std::collections::HashMap;
    use thor_server::PeerSink;
    let db = Db::new();
    let ca = Ca::new("thor cluster CA");
    // The peer (server 2, which knows server 1) requires client certificates from the
    // cluster's CA.
    let opts = EngineOptions {
        server_id: thor_core::ServerId(2),
        twopc: thor_server::TwoPcConfig {
            peers: vec![thor_core::ServerId(1)],
            ..thor_server::TwoPcConfig::default()
        },
        ..opts()
    };
    let engine = Arc::new(Engine::create(db.disk(), opts).unwrap());
    let peer = tls_server_of(engine, &ca, Some(&ca));
    let addrs = HashMap::from([(thor_core::ServerId(2), peer.local_addr())]);
    let cfg = client_config(b"");
    let msg = || thor_wire::PeerMsg::DecideAck {
        stamp: thor_wire::Stamp { time_us: 1, tie: 1 },
        from: thor_core::ServerId(1),
    };
    // This server's own certificate, from the same CA, is its client certificate.
    let me = ca.issue(&["127.0.0.1"]);
    let ca_pem = ca.pem();
    let tls =
        TlsClient::with_identity_pem(ca_pem.as_bytes(), me.cert.as_bytes(), me.key.as_bytes())
            .unwrap();
    let peers = thor_net::TcpPeers::start_tls(&addrs, &cfg, Some(tls)).unwrap();
    peers.send(thor_core::ServerId(2), msg());
    wait_until(|| peers.counters().sent.load(Relaxed) == 1);
    // Without a client certificate the peer refuses the connection: the message is dropped.
    let anonymous = TlsClient::from_ca_pem(ca_pem.as_bytes()).unwrap();
    let strangers = thor_net::TcpPeers::start_tls(&addrs, &cfg, Some(anonymous)).unwrap();
    strangers.send(thor_core::ServerId(2), msg());
    wait_until(|| strangers.counters().dropped.load(Relaxed) == 1);
    assert_eq!(strangers.counters().sent.load(Relaxed), 0);
    peer.shutdown().unwrap();
}

/// A replica handler that counts the Raft messages it takes and has no database.
#[derive(Debug, Default)]
struct CountingReplica {
    got: std::sync::atomic::AtomicU64,
}

impl thor_net::ReplicaHandler for CountingReplica {
    fn deliver(
        &self,
        _from: u64,
        _to: u64,
        _msg: bytes::Bytes,
    ) -> Result<(), thor_net::DeliverError> {
        self.got.fetch_add(1, Relaxed);
        Ok(())
    }
    fn checkpoint(&self) -> Result<thor_core::Lsn, thor_server::EngineError> {
        Err(thor_server::EngineError::NotADatabase)
    }
    fn image_into(
        &self,
        _dest: &dyn thor_storage::Disk,
    ) -> Result<thor_server::superblock::Superblock, thor_server::EngineError> {
        Err(thor_server::EngineError::NotADatabase)
    }
}

#[test]
fn replica_links_over_tls() {
    use std::collections::HashMap;
    use thor_server::ReplicaNet;
    let db = Db::new();
    let ca = Ca::new("thor test CA");
    let id = ca.issue(&["127.0.0.1"]);
    let ca_pem = ca.pem();
    let tls = TlsServer::from_pem(id.cert.as_bytes(), id.key.as_bytes(), Some(ca_pem.as_bytes()))
        .unwrap();
    let handler = Arc::new(CountingReplica::default());
    let images = tempfile::tempdir().unwrap();
    let cfg = thor_net::ReplicaServiceConfig::new(images.path());
    let service = thor_net::ReplicaService::new(handler.clone(), cfg).unwrap();
    let net = NetConfig { tls: Some(tls), replicas: Some(service), ..NetConfig::default() };
    let server = Server::start("127.0.0.1:0", db.create(), net).unwrap();
    let addrs = HashMap::from([(1u64, server.local_addr())]);
    let me = ca.issue(&["127.0.0.1"]);
    let client =
        TlsClient::with_identity_pem(ca_pem.as_bytes(), me.cert.as_bytes(), me.key.as_bytes())
            .unwrap();
    let group = thor_core::ServerId(1);
    let links =
        thor_net::TcpReplicas::start(2, group, &addrs, &client_config(b""), Some(client)).unwrap();
    for i in 0..10u8 {
        links.send(1, bytes::Bytes::from(vec![i]));
    }
    wait_until(|| links.counters().sent.load(Relaxed) == 10);
    assert_eq!(handler.got.load(Relaxed), 10);
    // Without a client certificate the replica refuses the link: dropped and counted.
    let anonymous = TlsClient::from_ca_pem(ca_pem.as_bytes()).unwrap();
    let strangers =
        thor_net::TcpReplicas::start(3, group, &addrs, &client_config(b""), Some(anonymous))
            .unwrap();
    strangers.send(1, bytes::Bytes::from_static(b"x"));
    wait_until(|| strangers.counters().dropped.load(Relaxed) == 1);
    assert_eq!(handler.got.load(Relaxed), 10);
    server.shutdown().unwrap();
}
