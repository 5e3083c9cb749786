//! Several servers as a client sees them, in one process: two engines that are each other's
//! peers (`thor_server::LocalPeers`), clients with a session at each (`thor_client::Cluster`
//! over the in-process transport), references across servers through surrogates, and
//! transactions that commit at both servers or at neither. One behaviour per test; the
//! protocol's crash cases are tested on the cores (`thor-server`'s `core::tests_twopc`) and
//! over many seeds in the simulation (`thor-sim`'s `tests/twopc.rs`).

use std::sync::Arc;
use std::time::Duration;

use thor_client::{ClientError, Cluster, ConflictCause, SessionConfig, XRef};
use thor_core::ServerId;
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions, LocalPeers, TwoPcConfig};
use thor_storage::MemDisk;

thor_client::class! {
    /// An account: a balance.
    pub class Account("test.Account") {
        balance: u64,
    }
}

thor_client::class! {
    /// An object that points at an account (perhaps at another server).
    pub class Holder("test.Holder") {
        account: thor_client::Ref<Account>,
    }
}

const S1: ServerId = ServerId(1);
const S2: ServerId = ServerId(2);

struct Setup {
    engines: Vec<Arc<Engine>>,
    peers: Arc<LocalPeers>,
}

/// Two servers, each with one account of balance 100 in root slot 0.
fn setup() -> Setup {
    let peers = LocalPeers::new();
    let mut engines = Vec::new();
    for id in [S1, S2] {
        let opts = EngineOptions {
            server_id: id,
            background_flusher: false,
            peers: Some(peers.clone()),
            // Short timeouts, so the test of lost votes waits little.
            twopc: TwoPcConfig {
                peers: vec![S1, S2],
                vote_timeout_us: 100_000,
                query_after_us: 20_000,
                ..TwoPcConfig::default()
            },
            ..EngineOptions::default()
        };
        let e = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
        peers.register(&e);
        engines.push(e);
    }
    let st = Setup { engines, peers };
    let c = st.cluster();
    for id in [S1, S2] {
        let a = c.create_fixed::<Account>(id).unwrap();
        c.session(id).unwrap().get(a.r).unwrap().set(Account::balance, 100).unwrap();
        c.session(id).unwrap().set_root(0, a.r).unwrap();
        // One server per transaction here: each commits alone.
        c.commit().unwrap();
    }
    assert_eq!(c.stats().two_phase, 0);
    assert_eq!(c.stats().single_server, 2);
    st
}

fn config() -> SessionConfig {
    SessionConfig {
        refresh_after: None,
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        ..SessionConfig::default()
    }
}

impl Setup {
    /// A new client of both servers, home at server 1.
    fn cluster(&self) -> Cluster {
        let engines = self.engines.clone();
        let connect = Box::new(move |id: ServerId| {
            let e = engines.iter().find(|e| e.server_id() == id).expect("a known server");
            let t = LocalTransport::connect(e.clone(), &ClientConfig::default())?;
            Ok(Box::new(t) as Box<dyn thor_wire::Transport>)
        });
        Cluster::new(&[S1, S2], S1, connect, config()).unwrap()
    }

    fn engine(&self, id: ServerId) -> &Arc<Engine> {
        &self.engines[id.0 as usize - 1]
    }
}

fn account(c: &Cluster, id: ServerId) -> XRef<Account> {
    XRef::at(id, c.session(id).unwrap().root::<Account>(0).unwrap())
}

fn balance(c: &Cluster, id: ServerId) -> u64 {
    c.get(account(c, id)).unwrap().get(Account::balance)
}

/// Moves `amount` from the account at `from` to the one at `to`, in one transaction.
fn transfer(c: &Cluster, from: ServerId, to: ServerId, amount: u64) -> Result<(), ClientError> {
    let a = c.get(account(c, from))?;
    a.set(Account::balance, a.get(Account::balance) - amount)?;
    drop(a);
    let b = c.get(account(c, to))?;
    b.set(Account::balance, b.get(Account::balance) + amount)?;
    Ok(())
}

#[test]
fn cross_server_reference_is_followed() {
    let st = setup();
    let c = st.cluster();
    // A holder at server 1 that names the account at server 2: a surrogate at server 1.
    let target = account(&c, S2);
    let h = c.create_fixed::<Holder>(S1).unwrap();
    let r = c.refer(S1, target).unwrap();
    c.get(h).unwrap().set(Holder::account, r).unwrap();
    c.session(S1).unwrap().set_root(1, h.r).unwrap();
    c.commit().unwrap();
    assert_eq!(c.stats().surrogates_created, 1);
    // A second reference to the same target reuses the surrogate.
    let again = c.refer(S1, target).unwrap();
    c.abort();
    assert_eq!(c.stats().surrogates_created, 1);
    assert!(again.oref().is_some(), "the committed surrogate has an oref");

    // Another client reads the holder at server 1 and follows its field to server 2.
    let other = st.cluster();
    let h = other.root::<Holder>(1).unwrap();
    let field = XRef::at(S1, other.get(h).unwrap().get(Holder::account));
    let resolved = other.resolve(field).unwrap();
    assert_eq!(resolved.server, S2);
    assert_eq!(other.get(field).unwrap().get(Account::balance), 100);
    assert_eq!(other.stats().surrogates_followed, 2);
    // An object at the same server needs no surrogate.
    let home = account(&other, S1);
    assert_eq!(other.refer(S1, home).unwrap(), home.r);
}

#[test]
fn two_server_commit_is_atomic() {
    let st = setup();
    let c = st.cluster();
    c.run(|c| transfer(c, S1, S2, 30)).unwrap();
    assert_eq!(c.stats().two_phase, 1);
    let fresh = st.cluster();
    assert_eq!((balance(&fresh, S1), balance(&fresh, S2)), (70, 130));
    let (t1, t2) = (st.engine(S1).twopc_stats(), st.engine(S2).twopc_stats());
    assert_eq!((t1.counters.decided_commit, t2.counters.parts_committed), (1, 1));
    assert_eq!((t1.coordinating, t2.in_doubt), (0, 0), "acknowledged and ended");
    let (delivered, dropped) = st.peers.counts();
    assert_eq!((delivered, dropped), (3, 0), "vote, decision, acknowledgement");
}

#[test]
fn participant_refusal_aborts_everywhere() {
    let st = setup();
    let c = st.cluster();
    // `c` reads both accounts, then another client changes the one at server 2.
    assert_eq!((balance(&c, S1), balance(&c, S2)), (100, 100));
    c.commit().unwrap();
    let other = st.cluster();
    other
        .run(|o| {
            let b = o.get(account(o, S2))?;
            b.set(Account::balance, 500)
        })
        .unwrap();
    // `c`'s transfer used its stale copy at server 2: server 2 refuses its part, so server 1
    // (the coordinator) aborts its part too.
    let e = transfer(&c, S1, S2, 10).and_then(|()| c.commit().map(|_| ())).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Conflict {
                cause: ConflictCause::Aborted | ConflictCause::Stale | ConflictCause::Invalidated,
                ..
            }
        ),
        "{e:?}"
    );
    let fresh = st.cluster();
    assert_eq!((balance(&fresh, S1), balance(&fresh, S2)), (100, 500), "nothing of it committed");
    assert_eq!(st.engine(S1).twopc_stats().in_doubt, 0);
    // Run again, it commits.
    c.run(|c| transfer(c, S1, S2, 10)).unwrap();
    let fresh = st.cluster();
    assert_eq!((balance(&fresh, S1), balance(&fresh, S2)), (90, 510));
}

#[test]
fn read_only_participant_skips_phase_two() {
    let st = setup();
    let c = st.cluster();
    c.run(|c| {
        let seen = c.get(account(c, S2))?.get(Account::balance);
        let a = c.get(account(c, S1))?;
        a.set(Account::balance, seen + 1)
    })
    .unwrap();
    assert_eq!(balance(&st.cluster(), S1), 101);
    let t2 = st.engine(S2).twopc_stats();
    assert_eq!((t2.counters.read_only, t2.counters.prepared), (1, 0), "{t2:?}");
    // Server 2 voted to the coordinator and heard nothing back: one message in all.
    assert_eq!(st.peers.counts(), (1, 0));
}

#[test]
fn read_only_transaction_over_two_servers_needs_no_coordinator() {
    let st = setup();
    let c = st.cluster();
    assert_eq!(balance(&c, S1) + balance(&c, S2), 200);
    c.commit().unwrap();
    assert_eq!(c.stats().two_phase_read_only, 1);
    assert_eq!(st.peers.counts(), (0, 0), "the participants answer the client directly");
}

#[test]
fn lost_votes_abort_after_the_timeout() {
    let st = setup();
    let c = st.cluster();
    st.peers.set_dropping(true);
    // The coordinator never hears server 2's vote: the client waits for the coordinator's
    // decision, which its vote timeout makes (the engines have no ticking thread, so a second
    // thread lets time pass).
    let engine = st.engine(S1).clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let ticker = std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
            engine.tick();
        }
    });
    let e = transfer(&c, S1, S2, 5).and_then(|()| c.commit().map(|_| ())).unwrap_err();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(e, ClientError::Conflict { cause: ConflictCause::Aborted, .. }), "{e:?}");
    ticker.join().unwrap();
    st.peers.set_dropping(false);
    // Server 2 is in doubt until it asks and hears the presumed abort.
    assert_eq!(st.engine(S2).twopc_stats().in_doubt, 1);
    std::thread::sleep(Duration::from_millis(30));
    st.engine(S2).tick();
    assert_eq!(st.engine(S2).twopc_stats().in_doubt, 0);
    let fresh = st.cluster();
    assert_eq!((balance(&fresh, S1), balance(&fresh, S2)), (100, 100));
}

/// The application's refusal of a transfer over two servers.
#[derive(Debug)]
enum TransferError {
    TooPoor { have: u64 },
    Db(ClientError),
}

impl From<ClientError> for TransferError {
    fn from(e: ClientError) -> Self {
        TransferError::Db(e)
    }
}

/// `Cluster::run` with the application's own error: the transfer writes at both servers,
/// then refuses; the error comes back as itself after one attempt, and neither server keeps
/// a write.
#[test]
fn cluster_run_with_an_application_error_aborts_and_returns_it() {
    let st = setup();
    let c = st.cluster();
    let mut attempts = 0;
    let got = c.run(|c| {
        attempts += 1;
        transfer(c, S1, S2, 60)?;
        let have = balance(c, S1);
        if have < 50 {
            return Err(TransferError::TooPoor { have });
        }
        Ok(())
    });
    assert!(matches!(got, Err(TransferError::TooPoor { have: 40 })), "{got:?}");
    assert_eq!(attempts, 1);
    // thor's errors convert into the application's: a null reference, as `Db`.
    let got = c.run(|c| -> Result<(), TransferError> {
        c.get(XRef::<Account>::at(S1, thor_client::Ref::NULL))?;
        Ok(())
    });
    assert!(matches!(got, Err(TransferError::Db(ClientError::NullReference))), "{got:?}");
    // Nothing of it stayed: a fresh client reads the balances before it.
    let other = st.cluster();
    other
        .run(|c| {
            assert_eq!((balance(c, S1), balance(c, S2)), (100, 100));
            Ok::<_, ClientError>(())
        })
        .unwrap();
}
