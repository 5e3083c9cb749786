//! Transactions larger than the cache (issue 15): modified and created objects that outgrow
//! the cache are stolen to the spill file and read back, and the transaction commits or
//! aborts as if they had stayed. One behaviour per test, for every cache manager that steals
//! (HAC, FPC, GOM). Each test checks the cache's invariants (lists, counts, exact reference
//! counts, the budget, every stolen object naming a record) as it goes.

use std::sync::Arc;

use thor_cache::CacheError;
use thor_client::{ClientError, PolicyConfig, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

thor_client::class! {
    /// A link in a chain: a number, the next link, a name.
    pub class Link("spill.Link") {
        value: u64,
        next: Ref<Link>,
    }
    var bytes;
}

const PAGE: usize = 4096;
/// 48 frames (less the tables): far less than the chains below. Every object a transaction
/// writes keeps its entry while stolen (12 bytes, and 4 of spill position), and the budget
/// pays for it, so a cache holds the entries of at most about a tenth of its size in such
/// objects. (At 40 frames the tables of 3,000 stolen links took the cache to its minimum
/// frames and past its budget, the limitation the README states.)
const CACHE: usize = 48 * PAGE;
/// Links in a chain: about 150 bytes each, some 450 KB, more than twice the cache.
const LINKS: usize = 3000;

fn policies() -> [PolicyConfig; 3] {
    [PolicyConfig::HAC, PolicyConfig::Fpc, "gom".parse().unwrap()]
}

fn server() -> Arc<Engine> {
    let opts =
        EngineOptions { page_size: PAGE, background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

fn session_with(h: &Arc<Engine>, cfg: SessionConfig) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), cfg).unwrap()
}

fn session(h: &Arc<Engine>, policy: PolicyConfig) -> Session {
    session_with(h, SessionConfig { cache_bytes: CACHE, policy, ..SessionConfig::default() })
}

/// Commits a chain of [`LINKS`] links through a session with a cache that holds it.
fn committed_chain(h: &Arc<Engine>, policy: PolicyConfig) {
    let cfg = SessionConfig { cache_bytes: 4 << 20, policy, ..SessionConfig::default() };
    let s = session_with(h, cfg);
    create_chain(&s, LINKS);
    s.commit().unwrap();
    assert_eq!(s.cache_stats().spill.objects_spilled, 0, "it fit");
}

fn name(i: usize) -> Vec<u8> {
    format!("link {i:<120}").into_bytes()
}

/// Creates a chain of `n` links with values `0..n` in the current transaction, rooted at slot
/// 0, checking the cache every 100 links. The links are stitched together after they are all
/// made, so that the stitching reads back links stolen while created.
fn create_chain(s: &Session, n: usize) -> Vec<Ref<Link>> {
    let mut links = Vec::with_capacity(n);
    for i in 0..n {
        let l = s.create::<Link>(name(i).len()).unwrap();
        l.set(Link::value, i as u64).unwrap();
        l.set_var_bytes(&name(i)).unwrap();
        links.push(l.as_ref());
        if i % 100 == 0 {
            drop(l);
            s.check_cache().unwrap();
        }
    }
    for i in 0..n - 1 {
        s.get(links[i]).unwrap().set(Link::next, links[i + 1]).unwrap();
    }
    s.set_root(0, links[0]).unwrap();
    links
}

/// The values along the chain rooted at slot 0, checking names.
fn read_chain(s: &Session) -> Vec<u64> {
    let mut values = Vec::new();
    let mut cur = s.root::<Link>(0).unwrap();
    while !cur.is_null() {
        let l = s.get(cur).unwrap();
        let i = values.len();
        assert_eq!(l.var_bytes(), name(i), "link {i}'s name");
        values.push(l.get(Link::value));
        cur = l.get(Link::next);
    }
    values
}

/// Adds `delta` to every link's value, in one pass along the chain.
fn add_to_chain(s: &Session, delta: u64) {
    let mut cur = s.root::<Link>(0).unwrap();
    let mut k = 0;
    while !cur.is_null() {
        let l = s.get(cur).unwrap();
        l.set(Link::value, l.get(Link::value) + delta).unwrap();
        cur = l.get(Link::next);
        k += 1;
        if k % 200 == 0 {
            drop(l);
            s.check_cache().unwrap();
        }
    }
}

fn assert_within_budget(s: &Session) {
    s.check_cache().unwrap();
    let st = s.cache_stats();
    assert!(st.memory_bytes <= CACHE, "{st:?}");
    // At every moment in between too: the first steal's table of spill positions was
    // reserved once the transaction's objects took half the frames, not allocated past it.
    assert!(st.core.memory_bytes_max <= CACHE as u64, "{st:?}");
}

#[test]
fn creating_more_than_the_cache_holds_commits_and_reads_back() {
    for policy in policies() {
        let h = server();
        let s = session(&h, policy);
        create_chain(&s, LINKS);
        assert_within_budget(&s);
        let spill = s.cache_stats().spill;
        assert!(spill.objects_spilled > 0 && spill.objects_read_back > 0, "{policy}: {spill:?}");
        s.commit().unwrap();
        assert_within_budget(&s);
        let want: Vec<u64> = (0..LINKS as u64).collect();
        assert_eq!(read_chain(&s), want, "{policy}: the same session");
        assert_eq!(read_chain(&session(&h, policy)), want, "{policy}: a fresh session");
    }
}

#[test]
fn modifying_more_than_the_cache_holds_commits_and_reads_back() {
    for policy in policies() {
        let h = server();
        committed_chain(&h, policy);
        let s = session(&h, policy);
        add_to_chain(&s, 1_000_000);
        assert_within_budget(&s);
        let spill = s.cache_stats().spill;
        assert!(spill.objects_spilled > 0, "{policy}: {spill:?}");
        s.commit().unwrap();
        assert_within_budget(&s);
        let want: Vec<u64> = (0..LINKS as u64).map(|v| v + 1_000_000).collect();
        assert_eq!(read_chain(&s), want, "{policy}: the same session");
        assert_eq!(read_chain(&session(&h, policy)), want, "{policy}: a fresh session");
    }
}

#[test]
fn rereads_of_spilled_objects_see_the_transactions_writes() {
    for policy in policies() {
        let h = server();
        committed_chain(&h, policy);
        let s = session(&h, policy);
        add_to_chain(&s, 7);
        let before = s.cache_stats().spill.objects_read_back;
        // Twice along the chain in the same transaction: the first links were stolen long ago.
        for _ in 0..2 {
            let want: Vec<u64> = (0..LINKS as u64).map(|v| v + 7).collect();
            assert_eq!(read_chain(&s), want, "{policy}");
            assert_within_budget(&s);
        }
        assert!(s.cache_stats().spill.objects_read_back > before, "{policy}");
        // A second round of writes on top of read-back objects, then the commit.
        add_to_chain(&s, 7);
        s.commit().unwrap();
        let want: Vec<u64> = (0..LINKS as u64).map(|v| v + 14).collect();
        assert_eq!(read_chain(&session(&h, policy)), want, "{policy}");
    }
}

#[test]
fn abort_after_spilling_leaves_nothing() {
    for policy in policies() {
        let h = server();
        committed_chain(&h, policy);
        let s = session(&h, policy);
        let want: Vec<u64> = (0..LINKS as u64).collect();
        // Writes and creations far beyond the cache, then an abort.
        add_to_chain(&s, 5);
        for i in 0..LINKS / 2 {
            let l = s.create::<Link>(name(i).len()).unwrap();
            l.set(Link::value, 99).unwrap();
        }
        assert!(s.cache_stats().spill.objects_spilled > 0, "{policy}");
        s.abort();
        assert_within_budget(&s);
        assert_eq!(read_chain(&s), want, "{policy}: the same session");
        // The next transaction starts with an empty spill and commits normally.
        add_to_chain(&s, 1);
        s.commit().unwrap();
        let want: Vec<u64> = (1..=LINKS as u64).collect();
        assert_eq!(read_chain(&session(&h, policy)), want, "{policy}: a fresh session");
    }
}

#[test]
fn the_spill_cap_is_a_typed_error_and_the_transaction_aborts_clean() {
    for policy in policies() {
        let h = server();
        committed_chain(&h, policy);
        let cfg = SessionConfig {
            cache_bytes: CACHE,
            policy,
            spill_bytes_max: 32 << 10,
            ..SessionConfig::default()
        };
        let s = session_with(&h, cfg);
        let mut cur = s.root::<Link>(0).unwrap();
        let err = loop {
            let r = s.get(cur).and_then(|l| {
                l.set(Link::value, 0)?;
                Ok(l.get(Link::next))
            });
            match r {
                Ok(next) if !next.is_null() => cur = next,
                Ok(_) => panic!("{policy}: the whole chain fit under a 32 KiB cap"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err, ClientError::Cache(CacheError::SpillFull { bytes_max: 32768 })),
            "{policy}: {err:?}"
        );
        s.check_cache().unwrap();
        s.abort();
        assert_within_budget(&s);
        let want: Vec<u64> = (0..LINKS as u64).collect();
        assert_eq!(read_chain(&s), want, "{policy}");
    }
}

#[test]
fn without_a_spill_a_cache_full_of_writes_is_still_full() {
    let h = server();
    committed_chain(&h, PolicyConfig::HAC);
    let cfg = SessionConfig { cache_bytes: CACHE, spill_bytes_max: 0, ..SessionConfig::default() };
    let s = session_with(&h, cfg);
    let mut cur = s.root::<Link>(0).unwrap();
    let err = loop {
        match s.get(cur).and_then(|l| {
            l.set(Link::value, 0)?;
            Ok(l.get(Link::next))
        }) {
            Ok(next) if !next.is_null() => cur = next,
            Ok(_) => panic!("the whole chain fit in the cache"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, ClientError::Cache(CacheError::Full { .. })), "{err:?}");
    s.abort();
}

/// A transaction over many small objects: when its writes first outgrow the cache, the table
/// of spill positions (4 bytes for every entry, tens of frames here) must already have room in
/// the budget, since at that moment nothing else can be freed to make it.
///
/// HAC and FPC only: GOM's object buffer sizes its LRU links (8 bytes an entry) to the entry
/// table when it first keeps an object, here just after the steal, and is past the budget by
/// them until the frames it frees next pay for them (`docs/oo7.md`, "What is left").
#[test]
fn the_first_steal_keeps_the_budget() {
    const SMALL: usize = 256 * PAGE;
    const N: usize = 22_000;
    for policy in [PolicyConfig::HAC, PolicyConfig::Fpc] {
        let h = server();
        {
            let cfg = SessionConfig { cache_bytes: 16 << 20, policy, ..SessionConfig::default() };
            let s = session_with(&h, cfg);
            let links: Vec<Ref<Link>> = (0..N)
                .map(|i| {
                    let l = s.create::<Link>(0).unwrap();
                    l.set(Link::value, i as u64).unwrap();
                    l.as_ref()
                })
                .collect();
            for w in links.windows(2) {
                s.get(w[0]).unwrap().set(Link::next, w[1]).unwrap();
            }
            s.set_root(0, links[0]).unwrap();
            s.commit().unwrap();
        }
        let cfg = SessionConfig { cache_bytes: SMALL, policy, ..SessionConfig::default() };
        let s = session_with(&h, cfg);
        let mut cur = s.root::<Link>(0).unwrap();
        while !cur.is_null() {
            let l = s.get(cur).unwrap();
            l.set(Link::value, l.get(Link::value) + 7).unwrap();
            cur = l.get(Link::next);
        }
        s.check_cache().unwrap();
        let st = s.cache_stats();
        assert!(st.spill.objects_spilled > 0, "{policy}: {:?}", st.spill);
        assert!(st.core.memory_bytes_max <= SMALL as u64, "{policy}: {st:?}");
        s.commit().unwrap();
        let mut cur = s.root::<Link>(0).unwrap();
        let mut i = 0u64;
        while !cur.is_null() {
            let l = s.get(cur).unwrap();
            assert_eq!(l.get(Link::value), i + 7, "{policy}: link {i}");
            cur = l.get(Link::next);
            i += 1;
        }
        assert_eq!(i, N as u64);
    }
}

/// A large value (a tree of page-sized pieces) several times bigger than the cache: its pieces
/// are stolen as they are created, and linking them reads the stolen parents back.
#[test]
fn large_value_bigger_than_cache() {
    for policy in policies() {
        let h = server();
        let s = session(&h, policy);
        let data: Vec<u8> = (0..4 * CACHE as u32).map(|i| (i * 31 % 251) as u8).collect();
        let r = s.create_large(&data).unwrap();
        s.set_root(1, r).unwrap();
        s.commit().unwrap();
        let spill = s.cache_stats().spill;
        assert!(spill.objects_spilled > 0, "{policy}: the value did not outgrow the cache");
        assert_eq!(s.read_large(r).unwrap(), data, "{policy}");
        let s2 = session(&h, policy);
        let r2 = s2.root(1).unwrap();
        assert_eq!(s2.read_large(r2).unwrap(), data, "{policy}: read by another session");
    }
}
