//! Concurrency control (CLOCC) as a client sees it, over the in-process transport: several
//! sessions of one engine, invalidations on replies, acknowledgements and discarded pages on
//! requests, refusals as `ClientError::Conflict`, `Session::run`'s retries, and the refresh of
//! an idle client. One behaviour per test.
//!
//! The database: `BLOBS` blobs of `PAYLOAD` bytes (eight to a page of 8 KB) with values
//! `0..BLOBS`, listed by a `Blobs` object in root slot 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thor_client::{ClientError, ConflictCause, PolicyConfig, Ref, Session, SessionConfig};
use thor_core::PageId;
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;
use thor_wire::stats::ServerStats;
use thor_wire::{Reply, Request, ServerInfo, Transport, TransportError};

thor_client::class! {
    /// A value and a payload that makes it take an eighth of a page.
    pub class Blob("test.Blob") {
        value: u64,
    }
    var bytes;
}

thor_client::class! {
    /// Every blob, from root slot 0.
    pub class Blobs("test.Blobs") {}
    var refs<Blob>;
}

const BLOBS: usize = 400;
const PAYLOAD: usize = 1000;
const PAGE: usize = 8192;

/// An engine holding the blobs.
fn server() -> Arc<Engine> {
    let opts =
        EngineOptions { page_size: PAGE, background_flusher: false, ..EngineOptions::default() };
    let h = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let s = session(&h);
    let blobs: Vec<Ref<Blob>> = (0..BLOBS)
        .map(|i| {
            let b = s.create::<Blob>(PAYLOAD).unwrap();
            b.set(Blob::value, i as u64).unwrap();
            b.as_ref()
        })
        .collect();
    let list = s.create::<Blobs>(BLOBS).unwrap();
    for (i, b) in blobs.iter().enumerate() {
        list.set_var_ref(i, *b).unwrap();
    }
    let list = list.as_ref();
    s.set_root(0, list).unwrap();
    s.commit().unwrap();
    h
}

/// The settings of the tests' sessions: no refresh (the tests say when requests go), short
/// backoff, one page per fetch (an access that misses makes a request; `tests/prefetch.rs`
/// has prefetch's own CLOCC cases).
fn config() -> SessionConfig {
    SessionConfig {
        cache_bytes: 4 << 20,
        prefetch_pages: Some(0),
        refresh_after: None,
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        ..SessionConfig::default()
    }
}

fn session_with(h: &Arc<Engine>, cfg: SessionConfig) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), cfg).unwrap()
}

fn session(h: &Arc<Engine>) -> Session {
    session_with(h, config())
}

/// Blob `i`, through the list in root slot 0.
fn blob(s: &Session, i: usize) -> Result<Ref<Blob>, ClientError> {
    Ok(s.get(s.root::<Blobs>(0)?)?.var_ref(i))
}

fn value(s: &Session, i: usize) -> Result<u64, ClientError> {
    Ok(s.get(blob(s, i)?)?.get(Blob::value))
}

fn page_of(s: &Session, i: usize) -> PageId {
    blob(s, i).unwrap().oref().unwrap().page().unwrap()
}

/// Another client adds `delta` to blob `i` and commits.
fn bump(s: &Session, i: usize, delta: u64) {
    s.run(|s| {
        let b = s.get(blob(s, i)?)?;
        b.set(Blob::value, b.get(Blob::value) + delta)
    })
    .unwrap();
}

fn stats(s: &Session) -> ServerStats {
    s.server_stats().unwrap()
}

fn is_conflict(e: &ClientError, want: ConflictCause) -> bool {
    matches!(e, ClientError::Conflict { cause, .. } if *cause == want)
}

/// A reads x; B writes x and commits. A's next reply (the fetch of another page) carries the
/// invalidation: A's transaction is aborted and the access that made the request says so.
/// Run again, it sees B's value.
#[test]
fn stale_read_aborts_on_invalidation() {
    let h = server();
    let (a, b) = (session(&h), session(&h));
    assert_eq!(value(&a, 0).unwrap(), 0);
    let y = blob(&a, 100).unwrap();
    assert_ne!(page_of(&a, 0), page_of(&a, 100), "y's page is not cached yet");
    bump(&b, 0, 10);
    let err = a.get(y).unwrap_err();
    assert!(is_conflict(&err, ConflictCause::Invalidated), "{err}");
    assert!(err.is_conflict());
    assert_eq!((a.stats().invalidations, a.stats().conflicts), (1, 1));
    // Doomed until the application ends it: the commit says so too, and commits nothing.
    assert!(is_conflict(&a.commit().unwrap_err(), ConflictCause::Invalidated));
    assert_eq!(value(&a, 0).unwrap(), 10, "the retry fetches B's version");
    a.commit().unwrap();
    assert_eq!(a.stats().aborts, 1, "one transaction aborted, counted once");
}

/// A transaction writes more than the cache's undo budget in a small cache, so replacement
/// drops its undo copies; it then aborts. The modified objects cannot be restored: they leave
/// the cache, and the next read of each fetches the committed value.
#[test]
fn undo_discarded_abort_invalidates() {
    let h = server();
    for policy in [PolicyConfig::Fpc, PolicyConfig::HAC] {
        // 32 frames: a quarter of that (64 KB) is the undo budget; 80 blobs of 1 KB pass it.
        let a = session_with(&h, SessionConfig { cache_bytes: 32 * PAGE, policy, ..config() });
        let written = 80;
        for i in 0..written {
            let b = a.get(blob(&a, i).unwrap()).unwrap();
            b.set(Blob::value, 1_000_000 + i as u64).unwrap();
        }
        assert_eq!(a.cache_stats().core.undo_bytes_dropped, 0, "{policy}: no pressure yet");
        // Reading the other 40 pages needs room: the undo copies go.
        for i in written..BLOBS {
            value(&a, i).unwrap();
        }
        assert!(a.cache_stats().core.undo_bytes_dropped > 0, "{policy}: copies dropped");
        a.check_cache().unwrap();
        a.abort();
        a.check_cache().unwrap();
        let refs: Vec<Ref<Blob>> = (0..written).map(|i| blob(&a, i).unwrap()).collect();
        for (i, r) in refs.iter().enumerate() {
            assert_eq!(a.resident_location(*r), None, "{policy}: blob {i} left at the abort");
        }
        let fetches = a.stats().fetches;
        for (i, r) in refs.iter().enumerate() {
            assert_eq!(a.get(*r).unwrap().get(Blob::value), i as u64, "{policy}: blob {i}");
        }
        assert!(a.stats().fetches > fetches, "{policy}: fetched again");
        a.commit().unwrap();
        a.check_cache().unwrap();
    }
}

/// An invalidation stays in the server's invalid set for the client until the client's
/// acknowledgement arrives, on the request after the reply that carried it.
#[test]
fn acks_clear_the_servers_invalid_set_after_the_next_request() {
    let h = server();
    let (a, b) = (session(&h), session(&h));
    value(&a, 0).unwrap();
    a.commit().unwrap();
    bump(&b, 0, 1);
    assert_eq!(stats(&b).invalid_entries, 1, "A's copy of blob 0 is stale");
    // This request's reply brings the invalidation; A applies it.
    stats(&a);
    assert_eq!(a.stats().invalidations, 1);
    assert_eq!(stats(&b).invalid_entries, 1, "sent, not yet acknowledged");
    // The next request carries the acknowledgement, handled before the request itself.
    let st = stats(&a);
    assert_eq!((st.invalidations_sent, st.invalidations_acked), (1, 1));
    assert_eq!(st.invalid_entries, 0);
}

/// A page is reported discarded only when nothing of it is cached: while a hot object of it
/// stays (HAC keeps it after the page's frame is compacted away) the server keeps sending its
/// invalidations; once that object is gone the page is reported and invalidations stop.
#[test]
fn discarded_pages_are_reported_only_once_nothing_of_them_is_cached() {
    let h = server();
    let a = session_with(
        &h,
        SessionConfig { cache_bytes: 24 * PAGE, policy: PolicyConfig::HAC, ..config() },
    );
    let b = session(&h);
    // A page of blobs only: the hot blob's page holds no class object or schema.
    let hot = 200;
    let p = page_of(&a, hot);
    let h_ref = blob(&a, hot).unwrap();
    let other = (0..BLOBS).find(|&i| i != hot && page_of(&a, i) == p).unwrap();
    // Every blob of the other pages, each read twice, so that their frames are full of hot
    // objects; the hot blob after each page.
    let others: Vec<usize> = (0..BLOBS).filter(|&i| page_of(&a, i) != p).collect();
    for chunk in others.chunks(8) {
        for _ in 0..2 {
            for &i in chunk {
                value(&a, i).unwrap();
            }
        }
        a.get(h_ref).unwrap();
    }
    a.commit().unwrap();
    assert!(!a.has_page(p), "the page's frame was compacted away");
    assert!(a.resident_location(h_ref).is_some(), "the hot blob was kept");
    // A request after the transaction, which would report the page if anything did.
    stats(&a);
    // The page is not reported: its object is still cached, and a change to it is announced.
    bump(&b, hot, 1);
    stats(&a);
    assert_eq!(a.stats().invalidations, 1);
    assert_eq!(a.resident_location(h_ref), None, "the invalidation dropped it");
    // Nothing of the page is cached now: the next request reports it, and changes to its
    // objects are no longer sent to A.
    stats(&a);
    let added = stats(&b).invalidations_added;
    bump(&b, other, 1);
    assert_eq!(stats(&b).invalidations_added, added, "A's directory no longer has the page");
    a.check_cache().unwrap();
}

/// `run` retries a transaction refused for a conflict (here: it read a value another client
/// changed before the commit) and commits the second attempt, which sees the new value.
#[test]
fn run_retries_a_conflict_and_then_commits() {
    let h = server();
    let (a, b) = (session(&h), session(&h));
    let mut attempts = 0;
    let seen = a
        .run(|s| {
            attempts += 1;
            let v = value(s, 0)?;
            if attempts == 1 {
                bump(&b, 0, 100);
            }
            s.get(blob(s, 0)?)?.set(Blob::value, v + 1)?;
            Ok::<_, thor_client::ClientError>(v)
        })
        .unwrap();
    assert_eq!((attempts, seen), (2, 100));
    assert_eq!((a.stats().retries, a.stats().conflicts, a.stats().commits), (1, 1, 1));
    assert_eq!(value(&session(&h), 0).unwrap(), 101);
}

/// `run` gives up after `run_attempts_max` attempts that all conflict, with the conflict.
#[test]
fn run_gives_up_after_max_attempts_with_the_conflict_error() {
    let h = server();
    let a = session_with(&h, SessionConfig { run_attempts_max: 3, ..config() });
    let b = session(&h);
    let mut attempts = 0;
    let err = a
        .run(|s| {
            attempts += 1;
            let v = value(s, 0)?;
            bump(&b, 0, 1);
            s.get(blob(s, 0)?)?.set(Blob::value, v + 1000)
        })
        .unwrap_err();
    assert!(is_conflict(&err, ConflictCause::Stale), "{err}");
    assert_eq!((attempts, a.stats().retries, a.stats().conflicts), (3, 2, 3));
    assert_eq!(value(&session(&h), 0).unwrap(), 3, "only B's commits");
}

/// `run` returns any other error at once, the attempt aborted.
#[test]
fn run_returns_other_errors_at_once() {
    let h = server();
    let a = session(&h);
    let mut attempts = 0;
    let err = a
        .run(|s| -> Result<(), ClientError> {
            attempts += 1;
            s.get(blob(s, 0)?)?.set(Blob::value, 77)?;
            Err(ClientError::Usage("the application gives up"))
        })
        .unwrap_err();
    assert!(matches!(err, ClientError::Usage(_)) && attempts == 1, "{err}");
    assert_eq!(value(&a, 0).unwrap(), 0, "the attempt was aborted");
    assert!(matches!(a.run(|_| Ok(())), Err(ClientError::Usage(_))), "a transaction is open");
}

/// A read-only transaction commits at the client on the state it read, although another
/// client changed a value it read meanwhile: it is serialized before that change (the last
/// reply vouched for the state: `proto/read_only.rs`). A transaction that writes after
/// reading the same stale value goes to the server and is refused, and the refusal brings
/// the invalidation.
#[test]
fn a_read_only_transaction_commits_at_the_client_on_the_state_it_read() {
    let h = server();
    let (a, b) = (session(&h), session(&h));
    let x = blob(&a, 0).unwrap();
    assert_eq!(a.get(x).unwrap().get(Blob::value), 0);
    bump(&b, 0, 5);
    let commits = stats(&b).commits;
    a.commit().unwrap();
    assert_eq!(a.stats().read_only_local, 1);
    assert_eq!(stats(&b).commits, commits, "no message reached the server");
    // Still the state before b's change: x, then y written.
    assert_eq!(a.get(x).unwrap().get(Blob::value), 0);
    let y = a.get(blob(&a, 1).unwrap()).unwrap();
    y.set(Blob::value, 7).unwrap();
    drop(y);
    let err = a.commit().unwrap_err();
    assert!(is_conflict(&err, ConflictCause::Stale), "{err}");
    assert_eq!(a.resident_location(x), None, "the refusal's invalidation dropped the copy");
    assert_eq!(stats(&b).refused_stale, 1);
    assert_eq!(value(&a, 0).unwrap(), 5);
    a.commit().unwrap();
    assert_eq!(a.stats().read_only_local, 2);
}

/// With `refresh_after`, a transaction that starts after the client was idle that long first
/// collects the invalidations pending for it, so it reads current values rather than being
/// refused at commit. (A zero interval refreshes before every transaction: no timing here.)
#[test]
fn an_idle_client_collects_invalidations_before_its_next_transaction() {
    let h = server();
    let b = session(&h);
    for refresh in [Some(Duration::ZERO), None] {
        let a = session_with(&h, SessionConfig { refresh_after: refresh, ..config() });
        value(&a, 0).unwrap();
        a.commit().unwrap();
        let before = value(&b, 0).unwrap();
        b.commit().unwrap();
        bump(&b, 0, 1);
        let seen = value(&a, 0).unwrap();
        if refresh.is_some() {
            assert_eq!(seen, before + 1, "refreshed: the current value");
            a.commit().unwrap();
        } else {
            assert_eq!(seen, before, "not refreshed: the cached value, from before b's change");
            // Read-only, it commits at the client, serialized before b's change; the next
            // reply brings the invalidation.
            a.commit().unwrap();
            assert_eq!(a.stats().invalidations, 0, "no reply came since");
            stats(&a);
        }
        assert_eq!(a.stats().invalidations, 1, "{refresh:?}: applied either way");
        assert_eq!(a.stats().refreshes > 0, refresh.is_some());
    }
}

/// A transport whose `send` can be made to fail once, as when a request is over a limit.
struct FlakyTransport {
    inner: LocalTransport,
    fail: Arc<AtomicBool>,
}

impl Transport for FlakyTransport {
    fn server(&self) -> &ServerInfo {
        self.inner.server()
    }
    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        if self.fail.swap(false, Ordering::Relaxed) {
            return Err(TransportError::TooManyInFlight { max: 0 });
        }
        self.inner.send(req)
    }
    fn recv(&mut self) -> Result<Reply, TransportError> {
        self.inner.recv()
    }
}

/// Acknowledgements taken for a request that could not be sent ride on the next one: none is
/// lost, so the server's invalid set empties.
#[test]
fn acks_survive_a_request_that_could_not_be_sent() {
    let h = server();
    let fail = Arc::new(AtomicBool::new(false));
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let a =
        Session::new(Box::new(FlakyTransport { inner: t, fail: fail.clone() }), config()).unwrap();
    let b = session(&h);
    value(&a, 0).unwrap();
    a.commit().unwrap();
    bump(&b, 0, 1);
    stats(&a);
    assert_eq!(a.stats().invalidations, 1, "applied; its ack waits for the next request");
    fail.store(true, Ordering::Relaxed);
    assert!(matches!(a.server_stats(), Err(ClientError::Transport(_))));
    let st = stats(&a);
    assert_eq!((st.invalidations_acked, st.invalid_entries), (1, 0));
}
