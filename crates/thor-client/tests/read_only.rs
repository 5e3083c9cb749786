//! Read-only transactions that commit at the client (`proto/read_only.rs`, wire version 7):
//! when, and that the histories they make stay serializable, judged by the history checker.
//!
//! The database: `COUNTERS` counters, listed by a `Counters` object in root slot 0. Every write
//! of a counter adds one, so a counter's value names the write that stored it (the checker's
//! unique versions), and the initial 0 is its `INITIAL`.

use std::sync::Arc;
use std::time::Duration;

use thor_client::{ClientError, ConflictCause, Ref, Session, SessionConfig};
use thor_history::{History, Txn};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::{MemDisk, SplitMix64};

thor_client::class! {
    /// A counter, and a payload that makes it take most of a page: each is on its own page,
    /// so that a transaction that reads several fetches in the middle of it and its
    /// replies' invalidations can doom it.
    pub class Counter("test.Counter") {
        value: u64,
    }
    var bytes;
}

const PAYLOAD: usize = 5000;
/// Transactions each of the four clients commits.
const TXNS: usize = 1000;

thor_client::class! {
    /// Every counter, from root slot 0.
    pub class Counters("test.Counters") {}
    var refs<Counter>;
}

const COUNTERS: usize = 12;

fn server() -> Arc<Engine> {
    let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
    let h = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let s = session_with(&h, 1 << 20);
    let list = s.create::<Counters>(COUNTERS).unwrap();
    for i in 0..COUNTERS {
        let c = s.create::<Counter>(PAYLOAD).unwrap();
        list.set_var_ref(i, c.as_ref()).unwrap();
    }
    let list = list.as_ref();
    s.set_root(0, list).unwrap();
    s.commit().unwrap();
    h
}

/// A cache of a few pages (of the counters' twelve), and one page per fetch: transactions miss.
fn session(h: &Arc<Engine>) -> Session {
    session_with(h, 4 * 8192)
}

fn session_with(h: &Arc<Engine>, cache_bytes: usize) -> Session {
    let cfg = SessionConfig {
        cache_bytes,
        prefetch_pages: Some(0),
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        run_attempts_max: 1000,
        ..SessionConfig::default()
    };
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), cfg).unwrap()
}

fn counter(s: &Session, i: usize) -> Result<Ref<Counter>, ClientError> {
    Ok(s.get(s.root::<Counters>(0)?)?.var_ref(i))
}

/// A transaction that only reads commits with no message once a reply said settled, and its
/// commit names the change it is serialized after.
#[test]
fn a_read_only_transaction_commits_without_a_message() {
    let h = server();
    let a = session(&h);
    let x = counter(&a, 0).unwrap();
    a.commit().unwrap();
    a.run(|s| {
        let c = s.get(x)?;
        c.set(Counter::value, c.get(Counter::value) + 1)
    })
    .unwrap();
    let before = a.server_stats().unwrap().commits;
    assert_eq!(a.get(x).unwrap().get(Counter::value), 1);
    let info = a.commit().unwrap();
    assert_eq!((info.created, info.modified), (0, 0));
    assert_eq!(a.stats().read_only_local, 2, "this one and the one that found x");
    assert_eq!(a.server_stats().unwrap().commits, before, "the server saw no commit");
}

/// An invalidation that reaches a read-only transaction while it runs (on the reply to a
/// fetch it makes) still dooms it: what it read before is not the state the reply vouches for.
#[test]
fn a_read_only_transaction_an_invalidation_hit_is_refused() {
    let h = server();
    let (a, b) = (session(&h), session(&h));
    let x = counter(&a, 0).unwrap();
    a.get(x).unwrap();
    a.commit().unwrap();
    // A reads x; B changes it; A's next request (a refresh here) brings the invalidation.
    assert_eq!(a.get(x).unwrap().get(Counter::value), 0);
    b.run(|s| {
        let c = s.get(counter(s, 0)?)?;
        c.set(Counter::value, c.get(Counter::value) + 1)
    })
    .unwrap();
    a.server_stats().unwrap();
    let err = a.commit().unwrap_err();
    assert!(
        matches!(err, ClientError::Conflict { cause: ConflictCause::Invalidated, .. }),
        "{err}"
    );
    assert_eq!(a.get(x).unwrap().get(Counter::value), 1);
    a.commit().unwrap();
}

/// What one client committed: each transaction's reads and writes, as counter values.
fn client(h: Arc<Engine>, id: u32, txns: usize) -> (Vec<Txn>, u64) {
    let s = session(&h);
    let refs: Vec<Ref<Counter>> = (0..COUNTERS).map(|i| counter(&s, i).unwrap()).collect();
    s.commit().unwrap();
    let mut rng = SplitMix64::new(0xC0FFEE ^ u64::from(id));
    let mut out = Vec::new();
    for n in 0..txns {
        let k = 2 + rng.below(3) as usize;
        let picked: Vec<usize> = (0..k).map(|_| rng.below(COUNTERS as u64) as usize).collect();
        let read_only = rng.below(3) == 0;
        // What the attempt that committed read and wrote (each attempt starts afresh).
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        s.run(|s| {
            reads.clear();
            writes.clear();
            for &i in &picked {
                let c = s.get(refs[i])?;
                let v = c.get(Counter::value);
                if !reads.iter().any(|&(j, _)| j == i) {
                    reads.push((i, v));
                }
                if !read_only && !writes.iter().any(|&(j, _)| j == i) {
                    c.set(Counter::value, v + 1)?;
                    writes.push((i, v + 1));
                }
            }
            Ok::<_, thor_client::ClientError>(())
        })
        .unwrap();
        let mut t = Txn::new(u64::from(id) << 32 | n as u64, id);
        t.reads = reads.iter().map(|&(i, v)| (i as u64, v)).collect();
        t.writes = writes.iter().map(|&(i, v)| (i as u64, v)).collect();
        out.push(t);
    }
    (out, s.stats().read_only_local)
}

/// Writers and readers on a few counters, each reader committing at its client whenever its
/// last reply allowed: the history of everything committed is serializable and ends in the
/// counters' final values.
#[test]
fn read_only_transactions_committed_at_the_client_keep_histories_serializable() {
    let h = server();
    let threads: Vec<_> = (1..=4)
        .map(|id| {
            let h = h.clone();
            std::thread::spawn(move || client(h, id, TXNS))
        })
        .collect();
    let mut history = History::new();
    let mut local = 0;
    for t in threads {
        let (txns, n) = t.join().unwrap();
        local += n;
        for txn in txns {
            history.add_committed(txn);
        }
    }
    let s = session_with(&h, 1 << 20);
    let finals: Vec<(u64, u64)> = (0..COUNTERS)
        .map(|i| (i as u64, s.get(counter(&s, i).unwrap()).unwrap().get(Counter::value)))
        .collect();
    let summary = thor_history::check(&history, Some(&finals)).unwrap_or_else(|a| panic!("{a}"));
    assert_eq!(summary.committed, 4 * TXNS);
    assert!(local > 0, "some read-only transactions committed at their client");
}
