//! The pages a client reports as discarded (`ClientCache::take_discarded`), against a model
//! of the server's directory.
//!
//! Once a client reports a page, the server stops sending invalidations for its objects. So a
//! report is *safe* only if nothing of the page is cached (no mapped copy, no resident object
//! anywhere, checked here object by object through the public API, independently of the
//! cache's own counts), the page is not the one being fetched, and the current transaction read
//! nothing of it (a commit by another client of what it read would go unnoticed). And reports
//! are *complete*: once the transaction has ended, every page the server still lists and the
//! client no longer caches is reported. The model is the server's directory: pages enter it when
//! fetched or prefetched (a fetch may bring pages the directory does not list, as a server's
//! `Prefetch` reply does; they are installed first and the asked page last, as thor-client
//! does) and leave it when reported.
//!
//! The test class `test.Node`: `[class | ref | tag: u32 | count | refs...]`.

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use thor_cache::core::Need;
use thor_cache::{CacheConfig, CacheError, ClientCache, PolicyConfig};
use thor_core::le::put_u32;
use thor_core::{ClassDesc, Oid, Oref, PageId, PageMut, VarKind};

const PAGE: usize = 4096;
/// Pages `2..2 + PAGES` hold the objects.
const PAGES: u32 = 24;
/// Objects per page.
const OBJECTS: u16 = 6;

fn oref(p: u32, o: u16) -> Oref {
    Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
}

fn page_id(p: u32) -> PageId {
    PageId::new(p).unwrap()
}

fn page_of(page: u32) -> Vec<u8> {
    let (c, desc) = (oref(1, 9), class());
    let mut b = vec![0u8; PAGE];
    let mut p = PageMut::init(&mut b, page_id(page)).unwrap();
    for k in 0..OBJECTS {
        let mut o = desc.new_object(c.raw(), 40);
        put_u32(&mut o, 8, u32::from(k));
        p.append(&o).unwrap();
    }
    b
}

fn class() -> ClassDesc {
    ClassDesc::new("test.Node", 8, &[0], VarKind::Refs).unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    /// Access an object (fetching its page if needed).
    Read(u32, u16),
    /// Access an object; a fetch brings these pages too (those the directory does not list).
    ReadAhead(u32, u16, Vec<u32>),
    /// Access an object and write it.
    Write(u32, u16),
    /// The server invalidates an object (only sent for pages in the directory).
    Invalidate(u32, u16),
    /// The transaction ends.
    End { commit: bool },
    /// A request carries discarded pages: at most `max`, never `except`; `sent: false` means
    /// sending it failed and the pages are put back.
    Report { max: usize, except: Option<u32>, sent: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let page = 2..2 + PAGES;
    let obj = 0..OBJECTS;
    prop_oneof![
        8 => (page.clone(), obj.clone()).prop_map(|(p, o)| Op::Read(p, o)),
        4 => (page.clone(), obj.clone(), proptest::collection::vec(page.clone(), 0..4))
            .prop_map(|(p, o, more)| Op::ReadAhead(p, o, more)),
        1 => (page.clone(), obj.clone()).prop_map(|(p, o)| Op::Write(p, o)),
        2 => (page.clone(), obj).prop_map(|(p, o)| Op::Invalidate(p, o)),
        1 => any::<bool>().prop_map(|commit| Op::End { commit }),
        3 => (0..4usize, proptest::option::of(page), any::<bool>())
            .prop_map(|(max, except, sent)| Op::Report { max, except, sent }),
    ]
}

/// The client side of the test: the cache, the server's directory as the model, and the pages
/// the current transaction read.
struct World {
    c: ClientCache,
    directory: BTreeSet<u32>,
    read: BTreeSet<u32>,
}

impl World {
    fn new(policy: PolicyConfig) -> World {
        let mut c = ClientCache::new(CacheConfig {
            budget_bytes: 12 * PAGE,
            page_size: PAGE,
            policy,
            background_replacement: true,
        })
        .unwrap();
        c.register_class(oref(1, 9).raw(), Arc::new(class())).unwrap();
        World { c, directory: BTreeSet::new(), read: BTreeSet::new() }
    }

    /// Whether anything of page `p` is cached, object by object.
    fn cached(&self, p: u32) -> bool {
        self.c.has_page(page_id(p))
            || (0..OBJECTS).any(|o| {
                let w = oref(p, o).raw();
                self.c.lookup(w).is_some_and(|i| self.c.location(i, w).is_some())
            })
    }

    /// Accesses `o` as the session does: resolve, fetching pages as asked, each fetch
    /// bringing the pages of `ahead` the directory does not list (the server's rule).
    fn access(&mut self, o: Oref, ahead: &[u32]) -> Result<u32, CacheError> {
        self.read.insert(o.page_raw());
        let i = self.c.entry_for(o)?;
        for _ in 0..4 {
            match self.c.resolve(i)? {
                Need::Resident(_) => return Ok(i),
                Need::Page(p) | Need::Stale(p) => {
                    let mut more: Vec<u32> = ahead
                        .iter()
                        .copied()
                        .filter(|&q| q != p.get() && !self.directory.contains(&q))
                        .collect();
                    more.sort_unstable();
                    more.dedup();
                    self.c.while_fetching_pages(1 + more.len())?;
                    for q in more {
                        self.directory.insert(q);
                        if !self.c.has_page(page_id(q)) {
                            self.c.install_prefetched(page_id(q), &page_of(q))?;
                        }
                    }
                    self.c.install_page(p, &page_of(p.get()))?;
                    self.directory.insert(p.get());
                }
                Need::Class(c) => panic!("class {c:?} is registered"),
            }
        }
        panic!("{o:?} not resident after fetching its page");
    }

    fn end(&mut self, commit: bool) {
        if commit {
            self.c.commit_done(&[]).unwrap();
        } else {
            self.c.abort_done();
        }
        self.read.clear();
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::ReadAhead(p, o, ref more) => match self.access(oref(p, o), more) {
                Ok(_) => {}
                Err(CacheError::Full { .. }) => self.end(false),
                Err(e) => panic!("{op:?}: {e}"),
            },
            Op::Read(p, o) | Op::Write(p, o) => match self.access(oref(p, o), &[]) {
                Ok(i) if matches!(op, Op::Write(..)) => self.c.before_write(i).unwrap(),
                Ok(_) => {}
                // Modified objects stay (no-steal): a small cache may fill up with them.
                Err(CacheError::Full { .. }) => self.end(false),
                Err(e) => panic!("{op:?}: {e}"),
            },
            Op::Invalidate(p, o) => {
                if self.directory.contains(&p) && self.c.invalidate(oref(p, o)).conflict {
                    // The library aborts a transaction that used an invalidated object.
                    self.end(false);
                }
            }
            Op::End { commit } => self.end(commit),
            Op::Report { max, except, sent } => {
                let got = self.c.take_discarded(max, except.map(page_id));
                prop_assert!(got.len() <= max);
                let mut seen = BTreeSet::new();
                for p in &got {
                    let p = p.get();
                    prop_assert!(seen.insert(p), "page {} reported twice in {:?}", p, got);
                    prop_assert!(Some(p) != except, "page {} is being fetched", p);
                    prop_assert!(!self.cached(p), "page {} is still cached", p);
                    prop_assert!(!self.read.contains(&p), "the transaction read page {}", p);
                    prop_assert!(self.directory.contains(&p), "page {} reported again", p);
                }
                if sent {
                    for p in &got {
                        self.directory.remove(&p.get());
                    }
                } else {
                    self.c.requeue_discarded(&got);
                }
            }
        }
        self.c.check_invariants().map_err(TestCaseError::fail)?;
        let st = self.c.stats().core;
        prop_assert!(st.prefetched_used + st.prefetched_unused <= st.pages_prefetched, "{:?}", st);
        for p in 2..2 + PAGES {
            prop_assert!(
                !self.cached(p) || self.directory.contains(&p),
                "page {} is cached but the server thinks it is not",
                p
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn discarded_pages_match_the_directory(
        hac in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let policy = if hac { PolicyConfig::HAC } else { PolicyConfig::Fpc };
        let mut w = World::new(policy);
        for op in &ops {
            w.step(op)?;
        }
        // Complete: after the transaction, every page the directory lists that is not cached
        // any more is reported.
        w.end(false);
        for p in w.c.take_discarded(usize::MAX, None) {
            prop_assert!(w.directory.remove(&p.get()), "page {:?} reported twice", p);
        }
        let cached: BTreeSet<u32> = (2..2 + PAGES).filter(|&p| w.cached(p)).collect();
        prop_assert_eq!(&w.directory, &cached);
    }
}
