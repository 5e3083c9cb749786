//! A stored class that extends a program's declaration (`thor_core::ClassDesc::extends`: the
//! same name, reference slots and variable part, a longer fixed part of words that are not
//! references) is read and written through the declaration; any other difference is refused
//! with `ClientError::SchemaMismatch`. The wide declarations below stand for what a database
//! stores (OO7's `--pad-to-gom` classes, or a class that later appended fields); the narrow
//! ones for the program reading it.

use std::sync::Arc;

use thor_cache::CacheError;
use thor_client::{Class, ClientError, PolicyConfig, Ref, Session, SessionConfig};
use thor_core::{Oref, PageView};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;
use thor_wire::{Reply, ReplyBody, Request, ServerInfo, Transport, TransportError};

/// What the database stores.
mod wide {
    use thor_client::Ref;

    thor_client::class! {
        /// A part padded with three words after its fields, with children.
        pub class Part("test.Part") {
            id: u32,
            next: Ref<Part>,
            weight: u64,
            pad: [u8; 12],
        }
        var refs<Part>;
    }

    thor_client::class! {
        /// A note padded with one word, with text.
        pub class Note("test.Note") {
            serial: u32,
            pad: u32,
        }
        var bytes;
    }
}

/// What the program declares.
mod narrow {
    use thor_client::Ref;

    thor_client::class! {
        /// The part without its padding.
        pub class Part("test.Part") {
            id: u32,
            next: Ref<Part>,
            weight: u64,
        }
        var refs<Part>;
    }

    thor_client::class! {
        /// The note without its padding.
        pub class Note("test.Note") {
            serial: u32,
        }
        var bytes;
    }
}

const PAD: [u8; 12] = *b"padding-word";

fn server() -> Arc<Engine> {
    let opts =
        EngineOptions { page_size: 8192, background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

fn config(policy: PolicyConfig) -> SessionConfig {
    SessionConfig { cache_bytes: 1 << 20, policy, ..SessionConfig::default() }
}

fn session(h: &Arc<Engine>, policy: PolicyConfig) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(Box::new(t), config(policy)).unwrap()
}

const POLICIES: [PolicyConfig; 2] = [PolicyConfig::HAC, PolicyConfig::Fpc];

/// Stores, with the wide declarations, `n` parts in a ring (root slot 0: part 0), each with
/// two children (the next two parts) and its padding set, and a note (root slot 1).
fn store_wide(h: &Arc<Engine>, n: usize) {
    let s = session(h, PolicyConfig::HAC);
    let mut parts: Vec<Ref<wide::Part>> = Vec::new();
    for i in 0..n {
        let p = s.create::<wide::Part>(2).unwrap();
        p.set(wide::Part::id, i as u32).unwrap();
        p.set(wide::Part::weight, 1000 + i as u64).unwrap();
        p.set(wide::Part::pad, PAD).unwrap();
        parts.push(p.as_ref());
    }
    for i in 0..n {
        let p = s.get(parts[i]).unwrap();
        p.set(wide::Part::next, parts[(i + 1) % n]).unwrap();
        p.set_var_ref(0, parts[(i + 1) % n]).unwrap();
        p.set_var_ref(1, parts[(i + 2) % n]).unwrap();
    }
    s.set_root(0, parts[0]).unwrap();
    let note = s.create::<wide::Note>(5).unwrap();
    note.set(wide::Note::serial, 7).unwrap();
    note.set(wide::Note::pad, 0xdead_beef).unwrap();
    note.set_var_bytes(b"hello").unwrap();
    let note = note.as_ref();
    s.set_root(1, note).unwrap();
    s.commit().unwrap();
}

/// The stored object `r` names, as the server has it.
fn stored_bytes<C: ?Sized>(h: &Arc<Engine>, s: &Session, r: Ref<C>) -> Vec<u8> {
    let o: Oref = s.canonical(r).unwrap().oref().expect("committed");
    let page = h.fetch(o.page().unwrap()).unwrap();
    PageView::parse(&page).unwrap().object(o.oid()).unwrap().to_vec()
}

#[test]
fn a_padded_stored_class_is_read_and_written_through_the_narrower_view() {
    const N: usize = 40;
    for policy in POLICIES {
        let h = server();
        store_wide(&h, N);
        let s = session(&h, policy);
        // What the session sees stored: the wide layout, which extends the narrow one.
        let stored = s.stored_class::<narrow::Part>().unwrap().unwrap();
        assert_eq!(stored, wide::Part::desc());
        assert!(stored.extends(&narrow::Part::desc()));

        // Read every field and both children through the narrow view (the children are after
        // the stored fixed part, 12 bytes later than the narrow declaration would put them),
        // and write some of each.
        let mut cur = s.root::<narrow::Part>(0).unwrap();
        for i in 0..N {
            let p = s.get(cur).unwrap();
            assert_eq!(p.get(narrow::Part::id) as usize, i, "{policy}");
            assert_eq!(p.get(narrow::Part::weight), 1000 + i as u64);
            assert_eq!(p.var_len(), 2);
            let (c0, c1) = (p.var_ref(0), p.var_ref(1));
            assert_eq!(s.get(c0).unwrap().get(narrow::Part::id) as usize, (i + 1) % N);
            assert_eq!(s.get(c1).unwrap().get(narrow::Part::id) as usize, (i + 2) % N);
            p.set(narrow::Part::weight, 2000 + i as u64).unwrap();
            p.set_var_ref(1, c0).unwrap();
            cur = p.get(narrow::Part::next);
        }
        let note = s.get(s.root::<narrow::Note>(1).unwrap()).unwrap();
        assert_eq!((note.get(narrow::Note::serial), note.var_bytes()), (7, b"hello".to_vec()));
        note.set_var_bytes(b"world").unwrap();
        drop(note);
        s.commit().unwrap();
        drop(s);

        // The wide declaration sees the writes, and the padding it wrote untouched.
        let w = session(&h, policy);
        let mut cur = w.root::<wide::Part>(0).unwrap();
        for i in 0..N {
            let p = w.get(cur).unwrap();
            assert_eq!(p.get(wide::Part::weight), 2000 + i as u64, "{policy}");
            assert_eq!(p.get(wide::Part::pad), PAD);
            assert_eq!(w.get(p.var_ref(1)).unwrap().get(wide::Part::id) as usize, (i + 1) % N);
            cur = p.get(wide::Part::next);
        }
        let note = w.get(w.root::<wide::Note>(1).unwrap()).unwrap();
        assert_eq!(note.get(wide::Note::pad), 0xdead_beef);
        assert_eq!(note.var_bytes(), b"world");
    }
}

#[test]
fn a_created_object_gets_the_stored_size() {
    for policy in POLICIES {
        let h = server();
        store_wide(&h, 3);
        let s = session(&h, policy);
        let first = s.root::<narrow::Part>(0).unwrap();
        let p = s.create::<narrow::Part>(3).unwrap();
        p.set(narrow::Part::id, 99).unwrap();
        p.set(narrow::Part::next, first).unwrap();
        for i in 0..3 {
            p.set_var_ref(i, first).unwrap();
        }
        assert_eq!(p.var_len(), 3);
        let made = p.as_ref();
        drop(p);
        let n = s.create::<narrow::Note>(3).unwrap();
        n.set_var_bytes(b"new").unwrap();
        let note = n.as_ref();
        drop(n);
        s.set_root(2, made).unwrap();
        s.set_root(3, note).unwrap();
        // The server checks every created object against its stored class: a narrow-sized
        // object would be refused here.
        s.commit().unwrap();
        assert_eq!(
            stored_bytes(&h, &s, made).len(),
            wide::Part::desc().object_bytes(3),
            "{policy}"
        );
        assert_eq!(stored_bytes(&h, &s, note).len(), wide::Note::desc().object_bytes(3));
        drop(s);

        let w = session(&h, policy);
        let p = w.get(w.root::<wide::Part>(2).unwrap()).unwrap();
        assert_eq!(p.get(wide::Part::id), 99);
        assert_eq!(p.get(wide::Part::pad), [0; 12], "the extra bytes of a created object are zero");
        assert_eq!(p.var_len(), 3);
        assert_eq!(w.get(p.var_ref(2)).unwrap().get(wide::Part::id), 0);
        let n = w.get(w.root::<wide::Note>(3).unwrap()).unwrap();
        assert_eq!((n.get(wide::Note::pad), n.var_bytes()), (0, b"new".to_vec()));
    }
}

/// Pairs of a stored class and a declaration of the same name that does not extend it.
mod refused {
    use thor_client::Ref;

    thor_client::class! {
        /// Stored: a reference among the extra words.
        pub class RefInPadStored("test.RefInPad") { id: u32, extra: Ref<RefInPadStored> }
    }
    thor_client::class! {
        /// Declared without it.
        pub class RefInPad("test.RefInPad") { id: u32 }
    }

    thor_client::class! {
        /// Stored: a reference at slot 0, then two words.
        pub class MovedStored("test.Moved") { next: Ref<MovedStored>, id: u32, pad: u32 }
    }
    thor_client::class! {
        /// Declared with the reference at slot 1.
        pub class Moved("test.Moved") { id: u32, next: Ref<Moved> }
    }

    thor_client::class! {
        /// Stored: a variable part of bytes.
        pub class OtherVarStored("test.OtherVar") { id: u32, pad: u32 }
        var bytes;
    }
    thor_client::class! {
        /// Declared with a variable part of references.
        pub class OtherVar("test.OtherVar") { id: u32 }
        var refs<OtherVar>;
    }

    thor_client::class! {
        /// Stored: no variable part.
        pub class NoVarStored("test.NoVar") { id: u32, pad: u32 }
    }
    thor_client::class! {
        /// Declared with one.
        pub class NoVar("test.NoVar") { id: u32 }
        var bytes;
    }

    thor_client::class! {
        /// Stored: shorter than the declaration.
        pub class ShorterStored("test.Shorter") { id: u32 }
    }
    thor_client::class! {
        /// Declared with a field the stored class does not have.
        pub class Shorter("test.Shorter") { id: u32, more: u32 }
    }
}

/// Stores one instance of `S` in root slot `slot`, then checks that a new session refuses to
/// read it or create one through `D`.
fn refuses<S: thor_client::Class, D: thor_client::Class>(h: &Arc<Engine>, slot: usize) {
    let s = session(h, PolicyConfig::HAC);
    let v = s.create_dyn::<S>(0).unwrap();
    let r = v.as_ref();
    drop(v);
    s.set_root(slot, r).unwrap();
    s.commit().unwrap();
    drop(s);
    let s = session(h, PolicyConfig::HAC);
    assert!(!s.stored_class::<D>().unwrap().unwrap().extends(&D::desc()), "{}", D::NAME);
    let reading = s.get(s.root::<D>(slot).unwrap()).map(drop).unwrap_err();
    let creating = s.create_dyn::<D>(0).map(drop).unwrap_err();
    for err in [reading, creating] {
        assert!(
            matches!(err, ClientError::SchemaMismatch { class, .. } if class == D::NAME),
            "{}: {err:?}",
            D::NAME
        );
    }
}

#[test]
fn a_stored_class_differing_in_references_or_variable_part_is_refused() {
    use refused::*;
    let h = server();
    refuses::<RefInPadStored, RefInPad>(&h, 0);
    refuses::<MovedStored, Moved>(&h, 1);
    refuses::<OtherVarStored, OtherVar>(&h, 2);
    refuses::<NoVarStored, NoVar>(&h, 3);
    refuses::<ShorterStored, Shorter>(&h, 4);
}

/// A transport that replaces the word at byte `at` of page `page` by `word` in every copy
/// fetched or prefetched: bytes a server never stored.
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
            ReplyBody::Page { page, bytes } => vec![(&*page, bytes)],
            ReplyBody::Pages(pages) => pages.iter_mut().map(|(p, b)| (&*p, b)).collect(),
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

/// Through the narrow declaration, whatever the extra words hold is never read (a word where
/// the narrow layout would put the count of children changes nothing), and the stored count
/// word is checked like any other: a count the object has no room for is refused with an
/// error naming the page, not read past the object.
#[test]
fn extra_words_are_never_read_and_a_bad_stored_count_is_refused() {
    let h = server();
    store_wide(&h, 3);
    let s = session(&h, PolicyConfig::HAC);
    let first = s.root::<narrow::Part>(0).unwrap();
    let o = s.canonical(first).unwrap().oref().unwrap();
    drop(s);
    let page = o.page().unwrap();
    let image = h.fetch(page).unwrap();
    let start = PageView::parse(&image).unwrap().offset(o.oid()).unwrap();
    let narrow_count = start + narrow::Part::desc().count_offset();
    let stored_count = start + wide::Part::desc().count_offset();
    assert!(narrow_count < stored_count);
    for policy in POLICIES {
        let connect = |at: usize, word: u32| {
            let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
            let bad = CorruptingTransport { inner: t, page: page.get(), at, word };
            Session::new(Box::new(bad), config(policy)).unwrap()
        };
        let s = connect(narrow_count, u32::MAX);
        let p = s.get(s.root::<narrow::Part>(0).unwrap()).unwrap();
        assert_eq!((p.get(narrow::Part::id), p.var_len()), (0, 2), "{policy}");
        drop(p);
        drop(s);
        let s = connect(stored_count, 1000);
        match s.get(s.root::<narrow::Part>(0).unwrap()) {
            Err(ClientError::Cache(CacheError::MalformedPage { page: p, .. })) => {
                assert_eq!(p, page.get(), "{policy}")
            }
            other => panic!("{policy}: expected a malformed page, got {other:?}"),
        }
        s.check_cache().unwrap();
    }
}
