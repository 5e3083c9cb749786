//! One definition of a valid request (issue 30): what the wire decoder admits, what the core
//! acknowledges and what recovery reads back are the same set of orefs (`Oref::object`). A
//! commit that names page 0 (a word below `0x400` other than null) used to be acknowledged over
//! the wire when the word was in its read set, logged, and then refused by the record decoder
//! after a crash: the database did not open. Each layer now refuses it.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use parking_lot::Mutex;
use thor_core::le::u32_at;
use thor_core::{NotAnObject, Oref};
use thor_server::engine::ReplySink;
use thor_server::{CommitRequest, Engine, EngineError, InvalidCommit};
use thor_storage::MemDisk;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{
    Commit, Hello, RefusedCode, Reply, ReplyBody, Request, RequestBody, WireError, decode_request,
};

/// The word of issue 30's report: page 0, oid 4.
const PAGE_ZERO: u32 = 0x0000_0008;

/// A connection's replies, in order.
#[derive(Default)]
struct Replies(Mutex<Vec<(u64, Reply)>>);

impl ReplySink for Replies {
    fn deliver(&self, id: u64, reply: Reply, _close: bool) {
        self.0.lock().push((id, reply));
    }
}

/// A database with one item, and a session on it over the engine's connection API.
fn setup(disk: &MemDisk) -> (Engine, Arc<Replies>, u64, Oref, Oref) {
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let out = e
        .commit(CommitRequest { versions: vec![], created: vec![item(class.raw(), 0, 1, 0, b"a")] })
        .unwrap();
    let replies = Arc::new(Replies::default());
    let conn = e.connect(replies.clone());
    let w = e.request(conn, 1, Request::new(RequestBody::Hello(Hello::new(vec![], "test"))));
    e.settle(w);
    assert!(matches!(replies.0.lock().pop(), Some((1, Reply { body: ReplyBody::HelloOk(_), .. }))));
    (e, replies, conn, class, out.created[0])
}

/// Sends `commit` on the session as request `id` and returns the reply.
fn send(e: &Engine, replies: &Replies, conn: u64, id: u64, commit: Commit) -> ReplyBody {
    let w = e.request(conn, id, Request::new(RequestBody::Commit(commit)));
    e.settle(w);
    let (got, reply) = replies.0.lock().pop().expect("a reply");
    assert_eq!(got, id);
    reply.body
}

/// A commit frame's bytes with `word` in its read set and one version of `obj`.
fn commit_frame(word: u32, obj: Oref, bytes: &[u8]) -> Bytes {
    let good = Commit {
        reads: vec![obj],
        versions: vec![(obj, Bytes::copy_from_slice(bytes))],
        created: vec![],
        id: None,
        leaves: Vec::new(),
    };
    let mut frame = Request::new(RequestBody::Commit(good)).to_frame(9).unwrap();
    // The read set's only word is the payload's 13th to 16th bytes (after the empty
    // piggyback section's two counts and the read count); the frame header is 20 bytes.
    assert_eq!(u32_at(&frame, 32), obj.raw());
    frame[32..36].copy_from_slice(&word.to_le_bytes());
    reframe(&mut frame);
    Bytes::from(frame)
}

/// Recomputes a frame's checksum after its payload was changed.
fn reframe(frame: &mut [u8]) {
    let mut crc = thor_core::checksum::Crc32c::new();
    crc.update(&frame[0..4]);
    crc.update(&frame[8..]);
    let c = crc.finish();
    frame[4..8].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn read_set_on_page_zero_is_refused() {
    let disk = MemDisk::new();
    let (e, replies, conn, class, obj) = setup(&disk);
    let version = item(class.raw(), 0, 1, 1, b"b");

    // Over the wire: the decoder refuses the frame, as it refuses null and tagged words.
    let err = decode_request(commit_frame(PAGE_ZERO, obj, &version), FRAME_BYTES_MAX).unwrap_err();
    assert_eq!(
        err,
        WireError::BadValue { what: "read set", why: "oref on page 0, which is never allocated" }
    );
    // The same frame with the object's own oref decodes (the test edits the right word).
    assert!(decode_request(commit_frame(obj.raw(), obj, &version), FRAME_BYTES_MAX).is_ok());

    // Past the decoder (a request built in memory, as an in-process transport hands it over):
    // the core refuses it too, writing or read-only, and logs nothing.
    let page_zero = Oref::from_raw(PAGE_ZERO).unwrap();
    let writing = Commit {
        reads: vec![obj, page_zero],
        versions: vec![(obj, Bytes::from(version.clone()))],
        created: vec![],
        id: None,
        leaves: Vec::new(),
    };
    let read_only = Commit { reads: vec![page_zero], ..Commit::default() };
    let log_before = e.stats().log_bytes;
    for (id, c) in [(2, writing), (3, read_only)] {
        match send(&e, &replies, conn, id, c) {
            ReplyBody::CommitRefused { code, message } => {
                assert_eq!(code, RefusedCode::NoSuchObject);
                assert!(message.contains("0x00000008") && message.contains("page 0"), "{message}");
            }
            other => panic!("a read set on page 0 was answered {other:?}"),
        }
    }
    // Through the embedded API: the typed reason.
    let err = e
        .commit_in(thor_server::CommitIn {
            reads: vec![page_zero],
            versions: vec![(obj, Bytes::from(version.clone()))],
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Invalid(InvalidCommit::NamesNoObject {
                what: "read set",
                word: PAGE_ZERO,
                why: NotAnObject::PageZero
            })
        ),
        "{err}"
    );
    assert_eq!(e.stats().log_bytes, log_before, "nothing was logged");

    // The session goes on: the same commit with a valid read set is acknowledged.
    let good = Commit {
        reads: vec![obj],
        versions: vec![(obj, Bytes::from(version.clone()))],
        created: vec![],
        id: None,
        leaves: Vec::new(),
    };
    assert!(matches!(send(&e, &replies, conn, 4, good), ReplyBody::CommitOk { .. }));
    // And after a crash the database opens with it.
    e.halt();
    disk.crash(7);
    let e = Engine::open(arc(disk.clone()), small_opts()).unwrap();
    assert_eq!(read(&e, obj).unwrap(), version);
}

#[test]
fn version_on_page_zero_is_refused_not_duplicate() {
    let disk = MemDisk::new();
    let (e, replies, conn, class, obj) = setup(&disk);
    let bytes = item(class.raw(), 0, 1, 1, b"b");
    for word in [PAGE_ZERO, 0x0000_03fe, 0x0000_0002] {
        let o = Oref::from_raw(word).unwrap();
        // Written once, it is refused as naming no object, not as written twice.
        let err = e
            .commit(CommitRequest { versions: vec![(o, bytes.clone())], created: vec![] })
            .unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::Invalid(InvalidCommit::NamesNoObject {
                    what: "versions",
                    why: NotAnObject::PageZero,
                    ..
                })
            ),
            "{word:#x}: {err}"
        );
        assert!(!err.to_string().contains("twice"), "{err}");
        // Over the connection API, beside a valid version: the same refusal code as an
        // object that does not exist.
        let c = Commit {
            reads: vec![],
            versions: vec![(obj, Bytes::from(bytes.clone())), (o, Bytes::from(bytes.clone()))],
            created: vec![],
            id: None,
            leaves: Vec::new(),
        };
        match send(&e, &replies, conn, 2, c) {
            ReplyBody::CommitRefused { code, message } => {
                assert_eq!(code, RefusedCode::NoSuchObject, "{message}");
                assert!(!message.contains("twice"), "{message}");
            }
            other => panic!("a version on page 0 was answered {other:?}"),
        }
    }
    // A real duplicate is still a duplicate.
    let err = e
        .commit(CommitRequest {
            versions: vec![(obj, bytes.clone()), (obj, bytes.clone())],
            created: vec![],
        })
        .unwrap_err();
    assert!(matches!(err, EngineError::Invalid(InvalidCommit::Duplicate(o)) if o == obj), "{err}");
    // The null oref, which is not on a page either, is refused the same way.
    let err = e
        .commit(CommitRequest { versions: vec![(Oref::NULL, bytes)], created: vec![] })
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Invalid(InvalidCommit::NamesNoObject { why: NotAnObject::Null, .. })
        ),
        "{err}"
    );
}
