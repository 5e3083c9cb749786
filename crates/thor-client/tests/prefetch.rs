//! Prefetch as a client sees it (`SessionConfig::prefetch_pages`), over the in-process
//! transport: fewer round trips for the same answers, a prefetched page kept consistent by
//! invalidations exactly as a fetched one, a small cache that backs off, and a server that
//! does not prefetch. One behaviour per test.
//!
//! The database: `BLOBS` blobs of `PAYLOAD` bytes (seven to a page of 8 KB) with values
//! `0..BLOBS`, created in order and listed by a `Blobs` object in root slot 0.

use std::sync::Arc;
use std::time::Duration;

use thor_client::{ClientError, ConflictCause, PolicyConfig, Ref, Session, SessionConfig};
use thor_core::PageId;
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;
use thor_wire::PrefetchHint;

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

fn server_with(opts: EngineOptions) -> Arc<Engine> {
    let opts = EngineOptions { page_size: PAGE, background_flusher: false, ..opts };
    let h = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let s = session(&h, 0, PrefetchHint::Following);
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

fn server() -> Arc<Engine> {
    server_with(EngineOptions::default())
}

fn config(pages: u16, hint: PrefetchHint) -> SessionConfig {
    SessionConfig {
        cache_bytes: 4 << 20,
        refresh_after: None,
        run_backoff_min: Duration::from_micros(10),
        run_backoff_max: Duration::from_millis(1),
        prefetch_pages: Some(pages),
        prefetch_hint: hint,
        // These tests watch the server validate what was read from prefetched pages, so
        // read-only transactions go to it rather than committing at the client
        // (`tests/read_only.rs` has those).
        read_only_at_client: false,
        ..SessionConfig::default()
    }
}

fn session_with(h: &Arc<Engine>, cfg: SessionConfig) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), cfg).unwrap()
}

fn session(h: &Arc<Engine>, pages: u16, hint: PrefetchHint) -> Session {
    session_with(h, config(pages, hint))
}

fn blob(s: &Session, i: usize) -> Result<Ref<Blob>, ClientError> {
    Ok(s.get(s.root::<Blobs>(0)?)?.var_ref(i))
}

fn value(s: &Session, i: usize) -> Result<u64, ClientError> {
    Ok(s.get(blob(s, i)?)?.get(Blob::value))
}

fn page_of(s: &Session, i: usize) -> PageId {
    blob(s, i).unwrap().oref().unwrap().page().unwrap()
}

/// Reads every blob in order, checks its value, commits and checks the cache.
fn read_every_blob(s: &Session, what: &str) {
    for i in 0..BLOBS {
        assert_eq!(value(s, i).unwrap(), i as u64, "{what}: blob {i}");
    }
    s.commit().unwrap();
    s.check_cache().unwrap();
}

/// `err` is the refusal of a transaction that read a stale copy: by the client, which heard of
/// the change first, or by the server.
fn assert_refused_for_a_stale_read(err: &ClientError) {
    assert!(
        matches!(
            err,
            ClientError::Conflict { cause: ConflictCause::Invalidated | ConflictCause::Stale, .. }
        ),
        "{err}"
    );
}

/// Another client adds `delta` to blob `i` and commits.
fn bump(s: &Session, i: usize, delta: u64) {
    s.run(|s| {
        let b = s.get(blob(s, i)?)?;
        b.set(Blob::value, b.get(Blob::value) + delta)
    })
    .unwrap();
}

/// Reading every blob in order with prefetch takes fewer round trips than without, gives the
/// same values, and every page the server sent beyond the asked ones was installed (the
/// client caches none of them already) and counted the same on both sides.
#[test]
fn prefetch_reads_the_same_values_in_fewer_round_trips() {
    let h = server();
    let mut fetches = Vec::new();
    for (pages, hint) in
        [(0, PrefetchHint::Following), (4, PrefetchHint::Following), (4, PrefetchHint::Referenced)]
    {
        let s = session(&h, pages, hint);
        read_every_blob(&s, &format!("{pages} {hint}"));
        let st = s.stats();
        assert_eq!(st.prefetch_skipped, 0, "{hint}: the server sends no page the client holds");
        if pages == 0 {
            assert_eq!(st.pages_prefetched, 0);
        } else {
            assert!(st.pages_prefetched > 0, "{hint}");
            assert_eq!(s.cache_stats().core.pages_prefetched, st.pages_prefetched);
            let core = s.cache_stats().core;
            let (used, wasted) = (core.prefetched_used, core.prefetched_unused);
            assert_eq!(wasted, 0, "{hint}: a 4 MiB cache holds the 60 pages");
            assert!(used > 0, "{hint}");
        }
        fetches.push(st.fetches);
    }
    let off = fetches[0];
    assert!(fetches[1] * 2 < off, "following pages: {fetches:?}");
    assert!(fetches[2] < off, "referenced pages (the list refers to every page): {fetches:?}");
}

/// A reads blob 0; the fetch of its page brings the next page too, which A has not used. B
/// changes blob 8 on that page. A's next reply carries the invalidation (the server
/// registered the prefetched page as sent), so A reads B's value, not its prefetched copy's.
#[test]
fn a_change_to_a_prefetched_page_reaches_the_client() {
    let h = server();
    let (a, b) = (session(&h, 2, PrefetchHint::Following), session(&h, 0, PrefetchHint::Following));
    assert_eq!(value(&a, 0).unwrap(), 0);
    let far = (0..BLOBS).find(|&i| page_of(&a, i) != page_of(&a, 0)).unwrap();
    let next = page_of(&a, far);
    assert!(a.has_page(next), "the page after blob 0's came with it");
    let fetches = a.stats().fetches;
    bump(&b, far, 1000);
    a.commit().unwrap();
    assert_eq!(a.stats().invalidations, 1, "the commit's reply brought it");
    assert_eq!(value(&a, far).unwrap(), far as u64 + 1000, "B's value");
    assert!(a.stats().fetches > fetches, "the invalidated object was fetched again");
    a.commit().unwrap();
}

/// A reads blob `far` from a page that came by prefetch (no fetch for it); B changes it before
/// A commits. A's transaction read a stale copy: it is aborted, as with a fetched page.
#[test]
fn a_stale_read_of_a_prefetched_page_is_refused() {
    let h = server();
    let (a, b) = (session(&h, 2, PrefetchHint::Following), session(&h, 0, PrefetchHint::Following));
    value(&a, 0).unwrap();
    let far = (0..BLOBS).find(|&i| page_of(&a, i) != page_of(&a, 0)).unwrap();
    let fetches = a.stats().fetches;
    assert_eq!(value(&a, far).unwrap(), far as u64);
    assert_eq!(a.stats().fetches, fetches, "read from the prefetched page");
    bump(&b, far, 7);
    let err = a.commit().unwrap_err();
    assert_refused_for_a_stale_read(&err);
    assert_eq!(value(&a, far).unwrap(), far as u64 + 7);
    a.commit().unwrap();
}

/// In a cache of a few frames, prefetched pages are evicted before they are used; the session
/// asks for fewer (at most an eighth of its frames, and its window shrinks with the waste), and
/// the traversal still reads every value.
#[test]
fn a_small_cache_backs_off_and_reads_every_value() {
    let h = server();
    for policy in [PolicyConfig::HAC, PolicyConfig::Fpc] {
        let s = session_with(
            &h,
            SessionConfig { cache_bytes: 24 * PAGE, policy, ..config(8, PrefetchHint::Referenced) },
        );
        for round in 0..2 {
            for i in (0..BLOBS).rev() {
                assert_eq!(value(&s, i).unwrap(), i as u64, "{policy} round {round} blob {i}");
            }
            s.commit().unwrap();
            s.check_cache().unwrap();
        }
        let st = s.stats();
        let frames = s.cache_stats().usable_frames as u64;
        assert!(st.pages_prefetched <= st.fetches * (frames / 8).max(1), "{policy}: {st:?}");
        let core = s.cache_stats().core;
        assert!(core.prefetched_used + core.prefetched_unused <= st.pages_prefetched, "{policy}");
    }
}

/// A server that does not prefetch (`--prefetch-max 0`) answers every `Prefetch` with its
/// page alone; the session works as without prefetch.
#[test]
fn a_server_that_does_not_prefetch_answers_with_the_page_alone() {
    let h = server_with(EngineOptions { prefetch_pages_max: 0, ..EngineOptions::default() });
    let s = session(&h, 8, PrefetchHint::Following);
    for i in 0..BLOBS {
        assert_eq!(value(&s, i).unwrap(), i as u64);
    }
    s.commit().unwrap();
    assert_eq!(s.stats().pages_prefetched, 0);
    assert!(s.server_stats().unwrap().prefetch_requests > 0, "it asked");
}

/// A transport as a network one looks to the session: the in-process one's requests, without
/// its `in_process`.
struct Remote(LocalTransport);

impl thor_wire::Transport for Remote {
    fn server(&self) -> &thor_wire::ServerInfo {
        self.0.server()
    }
    fn send(&mut self, req: &thor_wire::Request) -> Result<(), thor_wire::TransportError> {
        self.0.send(req)
    }
    fn recv(&mut self) -> Result<thor_wire::Reply, thor_wire::TransportError> {
        self.0.recv()
    }
}

/// By default a session prefetches over a network transport, where a round trip costs
/// several pages' transfer, and not over the in-process one, where it costs little more than
/// one page (`docs/oo7.md`, "Prefetch (issue 16)").
#[test]
fn by_default_a_session_prefetches_over_a_network_and_not_in_process() {
    let h = server();
    let cfg = SessionConfig { prefetch_pages: None, ..config(0, PrefetchHint::Following) };
    let local = session_with(&h, cfg);
    assert_eq!(local.prefetch().0, 0);
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let remote = Session::new(Box::new(Remote(t)), cfg).unwrap();
    assert_eq!(
        remote.prefetch(),
        (thor_client::limits::PREFETCH_PAGES_DEFAULT, PrefetchHint::Following)
    );
    for s in [&local, &remote] {
        for i in 0..BLOBS {
            assert_eq!(value(s, i).unwrap(), i as u64);
        }
        s.commit().unwrap();
    }
    assert_eq!(local.stats().pages_prefetched, 0);
    assert!(remote.stats().pages_prefetched > 0);
    assert!(remote.stats().fetches < local.stats().fetches);
}

/// With read-ahead (`SessionConfig::read_ahead`), a reply that brought its pages is followed
/// at once by a request for the pages after them. Reading every blob in order gives the same
/// values with read-ahead as without, most misses find their page in a read-ahead's reply
/// (no request of their own), and every page that came was installed once.
#[test]
fn reading_ahead_reads_the_same_values_and_most_misses_find_their_page_on_the_way() {
    let h = server();
    let mut seen = Vec::new();
    for read_ahead in [false, true] {
        let s =
            session_with(&h, SessionConfig { read_ahead, ..config(4, PrefetchHint::Following) });
        read_every_blob(&s, &format!("read-ahead {read_ahead}"));
        let st = s.stats();
        assert_eq!(st.prefetch_skipped, 0, "{st:?}");
        assert_eq!(s.cache_stats().core.pages_prefetched, st.pages_prefetched);
        if read_ahead {
            assert!(st.reads_ahead > 0, "{st:?}");
            assert!(st.reads_ahead_hit * 2 > st.reads_ahead, "most read-aheads are used: {st:?}");
        } else {
            assert_eq!((st.reads_ahead, st.reads_ahead_hit), (0, 0));
        }
        seen.push(s.cache_stats().core.pages_installed);
    }
    assert_eq!(seen[0], seen[1], "the same pages, each installed once");
}

/// A network whose server takes a request only when the client waits for its reply: a
/// read-ahead sent and not yet waited for has not reached the server, so another client's
/// commit can come before it, and its invalidation rides on the read-ahead's reply.
struct Deferred {
    inner: LocalTransport,
    pending: Vec<thor_wire::Request>,
}

impl thor_wire::Transport for Deferred {
    fn server(&self) -> &thor_wire::ServerInfo {
        self.inner.server()
    }
    fn send(&mut self, req: &thor_wire::Request) -> Result<(), thor_wire::TransportError> {
        self.pending.push(req.clone());
        Ok(())
    }
    fn recv(&mut self) -> Result<thor_wire::Reply, thor_wire::TransportError> {
        for req in self.pending.drain(..) {
            self.inner.send(&req)?;
        }
        self.inner.recv()
    }
}

/// A reads blob 0, and its session reads ahead. B changes blob 0 and commits before A's
/// read-ahead reaches the server, so the invalidation comes on the read-ahead's reply, which
/// A's commit takes first: the transaction read a stale copy and is refused; the next one
/// reads B's value.
#[test]
fn an_invalidation_on_a_read_ahead_reply_dooms_the_transaction_before_its_commit() {
    let h = server();
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let a = Session::new(
        Box::new(Deferred { inner: t, pending: Vec::new() }),
        SessionConfig { read_ahead: true, ..config(2, PrefetchHint::Following) },
    )
    .unwrap();
    let b = session(&h, 0, PrefetchHint::Following);
    assert_eq!(value(&a, 0).unwrap(), 0);
    assert_eq!(a.stats().reads_ahead, 1, "{:?}", a.stats());
    bump(&b, 0, 5);
    let err = a.commit().unwrap_err();
    assert_refused_for_a_stale_read(&err);
    assert_eq!(a.stats().invalidations, 1, "on the read-ahead's reply");
    assert_eq!(a.stats().reads_ahead, 1, "nothing sent beside it");
    assert_eq!(value(&a, 0).unwrap(), 5, "B's value");
    a.commit().unwrap();
    a.check_cache().unwrap();
}
