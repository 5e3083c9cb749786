//! The client library end to end over the in-process transport: typed objects, commit, abort,
//! reading back in new sessions, eviction under a small cache, large objects.

use std::sync::Arc;

use thor_cache::CacheError;
use thor_client::{Any, ClientError, Large, PolicyConfig, Ref, Refs, Session, SessionConfig};
use thor_core::{FormatError, Oref, PageView, builtin};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;
use thor_wire::{Reply, ReplyBody, Request, ServerInfo, Transport, TransportError};

thor_client::class! {
    /// A person with a friend and a name.
    pub class Person("test.Person") {
        age: u32,
        friend: Ref<Person>,
        initials: [u8; 3],
        height: f64,
    }
    var bytes;
}

thor_client::class! {
    /// A group of people.
    pub class Group("test.Group") {
        size: u32,
    }
    var refs<Person>;
}

fn server(page_size: usize) -> Arc<Engine> {
    let opts = EngineOptions { page_size, background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

fn session(h: &Arc<Engine>, policy: PolicyConfig, cache_bytes: usize) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), SessionConfig { cache_bytes, policy, ..SessionConfig::default() })
        .unwrap()
}

/// Builds a ring of `n` people in one transaction, rooted at slot 0 through a group.
fn build_ring(s: &Session, n: usize) -> Vec<Ref<Person>> {
    let mut people = Vec::new();
    for i in 0..n {
        let name = format!("person {i:<100}");
        let p = s.create::<Person>(name.len()).unwrap();
        p.set(Person::age, i as u32).unwrap();
        p.set(Person::initials, [b'P', b'0' + (i % 10) as u8, b'x']).unwrap();
        p.set(Person::height, 1.5 + i as f64 / 1000.0).unwrap();
        p.set_var_bytes(name.as_bytes()).unwrap();
        people.push(p.as_ref());
    }
    for i in 0..n {
        let p = s.get(people[i]).unwrap();
        p.set(Person::friend, people[(i + 1) % n]).unwrap();
    }
    let g = s.create::<Group>(n).unwrap();
    g.set(Group::size, n as u32).unwrap();
    for (i, p) in people.iter().enumerate() {
        g.set_var_ref(i, *p).unwrap();
    }
    let gr = g.as_ref();
    drop(g);
    s.set_root(0, gr).unwrap();
    people
}

fn check_ring(s: &Session, n: usize) {
    let g = s.get(s.root::<Group>(0).unwrap()).unwrap();
    assert_eq!(g.get(Group::size) as usize, n);
    assert_eq!(g.var_len(), n);
    let first = g.var_ref(0);
    drop(g);
    let mut cur = first;
    for i in 0..n {
        let p = s.get(cur).unwrap();
        assert_eq!(p.get(Person::age) as usize, i);
        assert_eq!(p.var_bytes(), format!("person {i:<100}").into_bytes());
        assert_eq!(p.get(Person::initials), [b'P', b'0' + (i % 10) as u8, b'x']);
        assert_eq!(p.get(Person::height), 1.5 + i as f64 / 1000.0);
        cur = p.get(Person::friend);
    }
    assert_eq!(cur, first, "the ring closes");
}

/// Every cache manager; tests that should hold for all of them loop over this.
const POLICIES: [PolicyConfig; 2] = [PolicyConfig::Fpc, PolicyConfig::HAC];

#[test]
fn a_graph_commits_and_reads_back_in_a_new_session() {
    for policy in POLICIES {
        let h = server(8192);
        let s = session(&h, policy, 1 << 20);
        let people = build_ring(&s, 500);
        let info = s.commit().unwrap();
        // People, the group, two class objects and a schema directory per class registered.
        assert_eq!(info.created, 500 + 1 + 2 + 2);
        // Handles made before the commit still work after it.
        assert_eq!(s.get(people[7]).unwrap().get(Person::age), 7);
        check_ring(&s, 500);
        drop(s);
        let s2 = session(&h, policy, 1 << 20);
        check_ring(&s2, 500);
        assert!(s2.stats().fetches > 0);
    }
}

#[test]
fn a_small_cache_evicts_and_refetches() {
    let h = server(4096);
    let s = session(&h, PolicyConfig::Fpc, 1 << 20);
    build_ring(&s, 1000);
    s.commit().unwrap();
    for policy in POLICIES {
        // 24 frames of 4 KB (minus the tables) for a ring spanning many more pages.
        let small = session(&h, policy, 24 * 4096);
        check_ring(&small, 1000);
        check_ring(&small, 1000);
        let st = small.cache_stats();
        let r = st.replacement;
        assert!(r.frames_evicted + r.frames_compacted > 0, "{policy}: {st:?}");
        assert!(st.memory_bytes <= 24 * 4096, "{policy}: {st:?}");
        assert!(small.stats().fetches > st.usable_frames as u64, "{policy}");
    }
}

#[test]
fn hac_keeps_created_objects_after_commit() {
    let h = server(8192);
    let s = session(&h, PolicyConfig::HAC, 1 << 20);
    let people = build_ring(&s, 100);
    s.commit().unwrap();
    let fetches = s.stats().fetches;
    // The created objects stayed in the cache: reading them fetches nothing.
    for p in &people {
        s.get(*p).unwrap();
    }
    assert_eq!(s.stats().fetches, fetches);
    assert!(s.cache_stats().replacement.candidates_added > 0);
}

#[test]
fn abort_restores_modified_objects_and_drops_created_ones() {
    let h = server(8192);
    let s = session(&h, PolicyConfig::Fpc, 1 << 20);
    let people = build_ring(&s, 10);
    s.commit().unwrap();
    let p = s.get(people[3]).unwrap();
    p.set(Person::age, 99).unwrap();
    p.set(Person::friend, people[8]).unwrap();
    drop(p);
    let extra = s.create::<Person>(0).unwrap().as_ref();
    assert_eq!(s.get(people[3]).unwrap().get(Person::age), 99);
    s.abort();
    let p = s.get(people[3]).unwrap();
    assert_eq!(p.get(Person::age), 3);
    assert_eq!(s.canonical(p.get(Person::friend)).unwrap(), s.canonical(people[4]).unwrap());
    drop(p);
    assert!(s.get(extra).is_err(), "created object is gone");
    // Nothing reached the server.
    let s2 = session(&h, PolicyConfig::Fpc, 1 << 20);
    check_ring(&s2, 10);
    // And the session goes on.
    s.get(people[3]).unwrap().set(Person::age, 42).unwrap();
    s.commit().unwrap();
    let s3 = session(&h, PolicyConfig::Fpc, 1 << 20);
    let g = s3.get(s3.root::<Group>(0).unwrap()).unwrap();
    let p3 = g.var_ref(3);
    drop(g);
    assert_eq!(s3.get(p3).unwrap().get(Person::age), 42);
}

#[test]
fn reading_an_object_as_the_wrong_class_fails() {
    let h = server(8192);
    let s = session(&h, PolicyConfig::Fpc, 1 << 20);
    build_ring(&s, 3);
    s.commit().unwrap();
    let s2 = session(&h, PolicyConfig::Fpc, 1 << 20);
    let wrong: Ref<Person> = s2.root::<Person>(0).unwrap();
    match s2.get(wrong) {
        Err(ClientError::TypeMismatch { expected: "test.Person", found }) => {
            assert_eq!(found, "test.Group")
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }
    assert!(matches!(s2.get(Ref::<Person>::NULL), Err(ClientError::NullReference)));
}

#[test]
fn large_objects_roundtrip() {
    let h = server(8192);
    // The created pieces stay in the cache until commit (no-steal): room for 1 MB of them.
    let s = session(&h, PolicyConfig::Fpc, 4 << 20);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let r = s.create_large(&data).unwrap();
    s.set_root(1, r).unwrap();
    s.commit().unwrap();
    assert_eq!(s.read_large(r).unwrap(), data);
    let s2 = session(&h, PolicyConfig::Fpc, 512 * 1024);
    let r2 = s2.root(1).unwrap();
    assert_eq!(s2.read_large(r2).unwrap(), data);
}

#[test]
fn collections_of_the_builtin_refs_class() {
    let h = server(8192);
    let s = session(&h, PolicyConfig::Fpc, 1 << 20);
    let list = s.create::<Refs<Person>>(3).unwrap();
    let lr = list.as_ref();
    let p = s.create::<Person>(0).unwrap().as_ref();
    list.set_var_ref(1, p).unwrap();
    drop(list);
    s.set_root(2, lr).unwrap();
    s.commit().unwrap();
    let s2 = session(&h, PolicyConfig::Fpc, 1 << 20);
    let l = s2.get(s2.root::<Refs<Person>>(2).unwrap()).unwrap();
    assert!(l.var_ref(0).is_null());
    assert!(!l.var_ref(1).is_null());
    assert_eq!(s2.get(l.var_ref(1)).unwrap().get(Person::age), 0);
}

#[test]
fn a_view_of_a_created_object_may_outlive_an_abort() {
    for policy in [PolicyConfig::Fpc, PolicyConfig::HAC] {
        let h = server(8192);
        let s = session(&h, policy, 1 << 20);
        let v = s.create::<Person>(4).unwrap();
        v.set(Person::age, 5).unwrap();
        let free_before = s.cache_stats().core.frames_freed;
        s.abort();
        // The view still reads memory the cache has not reused; once it is dropped, the next
        // operation that may replace frames frees the frame.
        assert_eq!(v.get(Person::age), 5);
        drop(v);
        build_ring(&s, 20);
        assert!(s.cache_stats().core.frames_freed > free_before, "{policy}");
        s.commit().unwrap();
        check_ring(&s, 20);
    }
}

/// A transport that hands the session a page the server never sent: the word at byte `at` of
/// page `page` replaced by `word` in every copy fetched or prefetched.
struct CorruptingTransport {
    inner: LocalTransport,
    page: u32,
    at: usize,
    word: u32,
}

impl Transport for CorruptingTransport {
    fn server(&self) -> &ServerInfo {
        self.inner.server()
    }
    fn send(&mut self, req: &Request) -> Result<(), TransportError> {
        self.inner.send(req)
    }
    fn recv(&mut self) -> Result<Reply, TransportError> {
        let mut reply = self.inner.recv()?;
        let pages = match &mut reply.body {
            ReplyBody::Page { page, bytes } => vec![(page, bytes)],
            ReplyBody::Pages(pages) => pages.iter_mut().map(|(p, b)| (&mut *p, b)).collect(),
            _ => Vec::new(),
        };
        for (page, bytes) in pages {
            if page.get() == self.page {
                let mut b = bytes.to_vec();
                b[self.at..self.at + 4].copy_from_slice(&self.word.to_le_bytes());
                *bytes = bytes::Bytes::from(b);
            }
        }
        Ok(reply)
    }
}

/// A server sends a page in which one person's `friend` reference has the spare (swizzle) bit
/// set: taken as it is, the word would name an entry of the client's indirection table. The
/// session refuses the object with an error naming the page and the byte; the other people
/// of the page read as they were committed.
#[test]
fn malformed_reference_in_fetched_page() {
    let h = server(8192);
    let s = session(&h, PolicyConfig::HAC, 1 << 20);
    let people = build_ring(&s, 10);
    s.commit().unwrap();
    let victim: Oref = s.canonical(people[3]).unwrap().oref().unwrap();
    drop(s);
    // Where the friend word of person 3 is in its page, as the server stores it.
    let page = victim.page().unwrap();
    let image = h.fetch(page).unwrap();
    let at =
        PageView::parse(&image).unwrap().offset(victim.oid()).unwrap() + Person::friend.offset();
    for policy in POLICIES {
        let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
        let bad = CorruptingTransport { inner: t, page: page.get(), at, word: (5 << 1) | 1 };
        let s = Session::new(
            Box::new(bad),
            SessionConfig { cache_bytes: 1 << 20, policy, ..SessionConfig::default() },
        )
        .unwrap();
        let g = s.get(s.root::<Group>(0).unwrap()).unwrap();
        let (p3, p4) = (g.var_ref(3), g.var_ref(4));
        drop(g);
        match s.get(p3) {
            Err(ClientError::Cache(CacheError::MalformedPage { page: p, offset, why })) => {
                assert_eq!((p, offset as usize), (page.get(), at), "{policy}: {why}");
            }
            other => panic!("{policy}: expected a malformed page, got {other:?}"),
        }
        assert_eq!(s.get(p4).unwrap().get(Person::age), 4, "{policy}");
        s.check_cache().unwrap();
    }
}

/// A large object whose one interior piece names itself at all its references: a reference
/// value that never ends. Reading it fails after the pieces its claimed length needs, in the
/// session that created it (pieces named by serial) and in a new one (pieces fetched).
#[test]
fn a_cyclic_large_object_is_refused_within_its_budget() {
    let page = 8192;
    let h = server(page);
    let s = session(&h, PolicyConfig::HAC, 1 << 20);
    let fanout = (thor_core::limits::max_object_bytes(page)
        - builtin::desc(builtin::REFS).unwrap().var_offset())
        / 4;
    let node = s.create::<Refs<Any>>(fanout).unwrap();
    let nr = node.as_ref();
    for k in 0..fanout {
        node.set_var_ref(k, nr.cast()).unwrap();
    }
    drop(node);
    let root = s.create::<Large>(1).unwrap();
    root.set(Large::length, 3 * fanout as u64).unwrap();
    root.set(Large::leaf_kind, 2).unwrap();
    root.set(Large::height, 8).unwrap();
    root.set_var_ref(0, nr.cast()).unwrap();
    let rr = root.as_ref().cast::<Any>();
    drop(root);
    assert!(over_budget(s.read_large(rr)), "before the commit");
    s.set_root(0, rr).unwrap();
    s.commit().unwrap();
    let s2 = session(&h, PolicyConfig::Fpc, 1 << 20);
    let r2 = s2.root::<Any>(0).unwrap();
    assert!(over_budget(s2.read_large(r2)), "read back");
}

/// Whether a read of a large object stopped at its piece budget.
fn over_budget(r: Result<Vec<u8>, ClientError>) -> bool {
    matches!(r, Err(ClientError::Format(FormatError::BadLarge(why))) if why.contains("cycle"))
}

/// Seven interior pieces, each naming the next at all its references, over one empty leaf: a
/// byte value of fanout^7 empty leaves, which no check on the bytes read would stop (this is
/// what a read without a piece budget would fetch for ever). The read stops after the pieces
/// the claimed length needs.
#[test]
fn shared_pieces_that_blow_up_a_large_object_are_refused_within_its_budget() {
    let page = 1024;
    let h = server(page);
    let s = session(&h, PolicyConfig::HAC, 1 << 20);
    let fanout = (thor_core::limits::max_object_bytes(page)
        - builtin::desc(builtin::REFS).unwrap().var_offset())
        / 4;
    let mut below: Ref<Any> = s.create::<thor_client::Bytes>(0).unwrap().as_ref().cast();
    for _ in 0..7 {
        let node = s.create::<Refs<Any>>(fanout).unwrap();
        for k in 0..fanout {
            node.set_var_ref(k, below).unwrap();
        }
        below = node.as_ref().cast();
    }
    let root = s.create::<Large>(1).unwrap();
    root.set(Large::length, 100).unwrap();
    root.set(Large::leaf_kind, 1).unwrap();
    root.set(Large::height, 8).unwrap();
    root.set_var_ref(0, below).unwrap();
    let rr = root.as_ref().cast::<Any>();
    drop(root);
    s.set_root(0, rr).unwrap();
    s.commit().unwrap();
    let s2 = session(&h, PolicyConfig::HAC, 1 << 20);
    let r2 = s2.root::<Any>(0).unwrap();
    assert!(over_budget(s2.read_large(r2)));
}

/// A transaction whose commit would not fit the server's largest frame is refused by the
/// client before anything is sent, with the limit: not an unknown outcome. The session goes
/// on, and a smaller transaction commits.
#[test]
fn oversized_transaction_refused_before_sending() {
    let protocol = thor_server::ProtocolConfig {
        max_frame_bytes: thor_wire::limits::FRAME_BYTES_SETTING_MIN,
        ..thor_server::ProtocolConfig::default()
    };
    let opts = EngineOptions {
        page_size: 8192,
        background_flusher: false,
        protocol,
        ..EngineOptions::default()
    };
    let h = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let s = session(&h, PolicyConfig::HAC, 4 << 20);
    let commits_before = h.server_stats().commits;
    // About 200 KiB of people: over the 64 KiB frame.
    for _ in 0..200 {
        let p = s.create::<Person>(1000).unwrap();
        p.set(Person::age, 1).unwrap();
    }
    let err = s.commit().unwrap_err();
    match &err {
        ClientError::TooLarge { size, max, .. } => {
            assert!(size > max, "{err}");
            assert_eq!(*max, thor_wire::limits::FRAME_BYTES_SETTING_MIN as u64);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(err.to_string().contains("nothing was sent"), "{err}");
    assert_eq!(h.server_stats().commits, commits_before, "the server saw no commit");
    // The session goes on: a transaction that fits commits.
    let p = s.create::<Person>(3).unwrap().as_ref();
    s.set_root(3, p).unwrap();
    s.commit().unwrap();
    assert_eq!(s.get(s.root::<Person>(3).unwrap()).unwrap().get(Person::age), 0);
}

/// A conflict's message names the class of the object it is about, whether the server
/// refused the commit or an invalidation doomed the transaction at the client.
#[test]
fn conflict_messages_name_the_class() {
    let h = server(8192);
    let a = session(&h, PolicyConfig::HAC, 1 << 20);
    let p = a.create::<Person>(0).unwrap().as_ref();
    a.set_root(4, p).unwrap();
    a.commit().unwrap();
    let b = session(&h, PolicyConfig::HAC, 1 << 20);
    let bump = |s: &Session| {
        let p = s.get(s.root::<Person>(4).unwrap()).unwrap();
        p.set(Person::age, p.get(Person::age) + 1).unwrap();
    };

    // The server refuses: `a` read its copy, `b` committed a new version before `a` heard.
    bump(&a);
    bump(&b);
    b.commit().unwrap();
    let err = a.commit().unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert!(err.to_string().contains("class test.Person"), "{err}");

    // An invalidation dooms `a`'s open transaction at the client: it read the object, `b`
    // committed a new version, and a round trip of `a` (a statistics request) brings the
    // invalidation; the commit reports the conflict without asking the server.
    let _ = a.get(a.root::<Person>(4).unwrap()).unwrap().get(Person::age);
    bump(&b);
    b.commit().unwrap();
    a.server_stats().unwrap();
    let err = a.commit().unwrap_err();
    assert!(
        matches!(err, ClientError::Conflict { cause: thor_client::ConflictCause::Invalidated, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("class test.Person"), "{err}");
}
