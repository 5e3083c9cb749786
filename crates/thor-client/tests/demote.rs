//! Demotion end to end over the in-process transport: a client whose cache drops pages with
//! references swizzled in place gives them back to an exclusive server cache in their stored
//! form, the server takes every one it asks for (none refused: the bytes are exactly the ones
//! it sent), and another client then reads correct objects from the demoted pages.

use std::sync::Arc;

use thor_client::{PolicyConfig, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::CacheMode;
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

thor_client::class! {
    /// A link of a ring, with a payload that puts about 20 on a page of 4 KB.
    pub class Link("test.Link") {
        value: u64,
        next: Ref<Link>,
    }
    var bytes;
}

const LINKS: usize = 1000;
const PAGE: usize = 4096;

/// A ring of `LINKS` links, installed (no MOB versions: the pages sent are page images).
fn server(mode: CacheMode, cache_pages: usize) -> Arc<Engine> {
    let opts = EngineOptions {
        page_size: PAGE,
        background_flusher: false,
        page_cache_bytes: cache_pages * PAGE,
        page_cache_mode: mode,
        ..EngineOptions::default()
    };
    let h = Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap());
    let s = session(&h, PolicyConfig::Fpc, 16 << 20);
    let links: Vec<Ref<Link>> = (0..LINKS)
        .map(|i| {
            let l = s.create::<Link>(150).unwrap();
            l.set(Link::value, i as u64).unwrap();
            l.as_ref()
        })
        .collect();
    for i in 0..LINKS {
        s.get(links[i]).unwrap().set(Link::next, links[(i + 1) % LINKS]).unwrap();
    }
    s.set_root(0, links[0]).unwrap();
    s.commit().unwrap();
    h.flush_all().unwrap();
    h
}

fn session(h: &Arc<Engine>, policy: PolicyConfig, cache_bytes: usize) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let cfg = SessionConfig { cache_bytes, policy, refresh_after: None, ..Default::default() };
    Session::new(Box::new(t), cfg).unwrap()
}

/// Follows the ring once from the root (swizzling every `next` on the way), checking values.
fn walk(s: &Session) {
    let first = s.root::<Link>(0).unwrap();
    let mut cur = first;
    for i in 0..LINKS {
        let l = s.get(cur).unwrap();
        assert_eq!(l.get(Link::value), i as u64);
        cur = l.get(Link::next);
    }
    assert_eq!(cur, first);
    s.commit().unwrap();
}

fn demotes_in_stored_form(policy: PolicyConfig) {
    // The ring is 44 pages; the client caches 24 and the server 32: together they hold it
    // if they hold different pages.
    let h = server(CacheMode::Exclusive, 32);
    let a = session(&h, policy, 24 * PAGE);
    walk(&a);
    walk(&a);
    let st = h.server_stats();
    assert!(st.demote_notices > 20, "{st:?}");
    assert!(st.demotions_stored > 20, "the server takes pages back: {st:?}");
    // The second walk found what the client dropped in the server's cache.
    assert!(st.cache_hits > 15, "{st:?}");
    assert_eq!(st.demotions_refused, 0, "every page sent is the page the server sent: {st:?}");
    let d = a.cache_demote_stats();
    assert_eq!(d.sent, st.demotions_stored + st.demotions_refused, "{d:?} {st:?}");
    // Another client reads the whole ring, much of it from demoted pages: correct objects.
    let hits = h.server_stats().cache_hits;
    let b = session(&h, policy, 16 << 20);
    walk(&b);
    assert!(h.server_stats().cache_hits > hits);
}

#[test]
fn fpc_demotes_evicted_pages_in_stored_form() {
    demotes_in_stored_form(PolicyConfig::Fpc);
}

#[test]
fn hac_demotes_intact_victims_in_stored_form() {
    demotes_in_stored_form(PolicyConfig::HAC);
}

#[test]
fn an_inclusive_server_is_not_sent_demotions() {
    let h = server(CacheMode::Inclusive, 32);
    let a = session(&h, PolicyConfig::Fpc, 24 * PAGE);
    walk(&a);
    walk(&a);
    let st = h.server_stats();
    assert_eq!((st.demote_notices, st.demoted_bytes), (0, 0), "{st:?}");
    assert!(st.discarded_pages_received > 20);
}

#[test]
fn a_client_may_decline_to_demote() {
    let h = server(CacheMode::Exclusive, 32);
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let cfg = SessionConfig {
        cache_bytes: 24 * PAGE,
        policy: PolicyConfig::Fpc,
        demote_pages: 0,
        ..Default::default()
    };
    let a = Session::new(Box::new(t), cfg).unwrap();
    walk(&a);
    assert_eq!(h.server_stats().demote_notices, 0);
}
