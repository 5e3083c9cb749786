//! A program over several servers written against the `thor` crate alone: the servers run in
//! this process (thor-server and thor-net, as `thor server` runs them, talking to each other
//! over TCP), and the client uses nothing but `thor::`.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::Arc;

use thor_net::{ClientConfig, NetConfig, Server, TcpPeers};
use thor_server::{Engine, EngineOptions, ProtocolConfig, TwoPcConfig};
use thor_storage::MemDisk;

const TOKEN: &str = "cluster secret";

thor::class! {
    /// A bank account.
    pub class Account("facade.Account") { balance: u64 }
}

/// Two servers (ids 1 and 2) on loopback, each told of the other, sharing one token.
fn two_servers() -> (Vec<Server>, Vec<String>) {
    let listeners: Vec<TcpListener> =
        (0..2).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let ids = [thor::ServerId(1), thor::ServerId(2)];
    let mut servers = Vec::new();
    for (k, listener) in listeners.into_iter().enumerate() {
        let other = 1 - k;
        let peer_addrs = HashMap::from([(ids[other], addrs[other])]);
        let cfg = ClientConfig { token: TOKEN.as_bytes().to_vec(), ..ClientConfig::default() };
        let peers = TcpPeers::start(&peer_addrs, &cfg).unwrap();
        let opts = EngineOptions {
            server_id: ids[k],
            peers: Some(peers),
            twopc: TwoPcConfig { peers: vec![ids[other]], ..TwoPcConfig::default() },
            protocol: ProtocolConfig {
                token: TOKEN.as_bytes().to_vec(),
                ..ProtocolConfig::default()
            },
            ..EngineOptions::default()
        };
        let engine = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
        servers.push(Server::start_on(listener, engine, NetConfig::default()).unwrap());
    }
    (servers, addrs.iter().map(|a| a.to_string()).collect())
}

#[test]
fn cluster_from_the_facade_alone() {
    let (_servers, addrs) = two_servers();
    let (s1, s2) = (thor::ServerId(1), thor::ServerId(2));
    let c = thor::connect_cluster(&[(1, &addrs[0]), (2, &addrs[1])], TOKEN).unwrap();
    assert_eq!(c.home(), s1);
    // An account at each server, each committed at its own server.
    for id in [s1, s2] {
        let a = c.create_fixed::<Account>(id).unwrap();
        c.session(id).unwrap().get(a.r).unwrap().set(Account::balance, 100).unwrap();
        c.session(id).unwrap().set_root(0, a.r).unwrap();
        c.commit().unwrap();
    }
    // A transfer across the two: two-phase commit.
    c.run(|c| {
        let from = c.get(c.root::<Account>(0)?)?;
        let to = c.session(s2)?.get(c.session(s2)?.root::<Account>(0)?)?;
        from.set(Account::balance, from.get(Account::balance) - 30)?;
        to.set(Account::balance, to.get(Account::balance) + 30)
    })
    .unwrap();
    assert_eq!(c.stats().two_phase, 1);
    // Another client sees both halves. The client's answer came from the coordinator; the
    // other server publishes its part when the decision reaches it, so a read there may first
    // meet the part still prepared and be refused (the transaction it read is committing):
    // `run` retries it, as an application would.
    let d = thor::connect_cluster(&[(1, &addrs[0]), (2, &addrs[1])], TOKEN).unwrap();
    let balance = |id: thor::ServerId| {
        let s = d.session(id).unwrap();
        s.run::<_, thor::ClientError>(|s| Ok(s.get(s.root::<Account>(0)?)?.get(Account::balance)))
            .unwrap()
    };
    assert_eq!((balance(s1), balance(s2)), (70, 130));

    // A server the cluster was not given is a typed error, and a wrong id is caught.
    assert!(matches!(d.session(thor::ServerId(3)), Err(thor::ClientError::UnknownServer(3))));
    let swapped = thor::connect_cluster(&[(1, &addrs[1]), (2, &addrs[0])], TOKEN).unwrap();
    let err = swapped.session(s1).unwrap_err();
    assert!(matches!(err, thor::ClientError::WrongServer { expected: 1, got: 2 }), "{err:?}");
}
