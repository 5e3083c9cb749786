//! Digests of messages and records for a run's trace hash.
//!
//! A run's trace hash (`Outcome::trace_hash`, `TwoPcOutcome::trace_hash`) folds in a digest of
//! every message delivered and every log record appended, so that two runs of a seed agree only
//! if every message carried the same contents; `tests/cluster.rs` compares the traces of one
//! seed run in two processes.
//!
//! A message is digested field by field, the bytes it already holds (page images, object
//! versions, page records) hashed where they lie, rather than by encoding its frame and hashing
//! that: a frame copies every page image once more and checksums it, and the simulation
//! digests every message at every delivery. Every field of a message the simulation sends often
//! is digested; the destructuring patterns below name every field with no `..`, so a field
//! added to a wire type fails to compile here until the digest covers it. The messages sent a
//! few times a run (`Hello`, `Resume`, `Stats`, `Backup`, two-phase commit's) are digested by
//! their frame, as the encoder writes it.
//!
//! The hasher is [`FxHasher`] with its fixed seed: no random state, so a digest is the same in
//! every process (of the same build: a variant is told by its wire type number, and `usize`
//! lengths are hashed at the machine's width).

use std::hash::{Hash, Hasher};

use rustc_hash::FxHasher;
use thor_wire::{
    Commit, PageCommit, PageRecords, Piggyback, Prefetch, Reply, ReplyBody, Request, RequestBody,
    Seen,
};

/// A digest of bytes for a trace hash: the same in every process (no random state).
pub(crate) fn digest_bytes(bytes: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(bytes);
    h.write_usize(bytes.len());
    h.finish()
}

thread_local! {
    /// One frame buffer per thread for the framed digests (no allocation each time).
    static FRAME: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A digest of a request with id `id`: every field of the request, see the module
/// documentation.
pub(crate) fn digest_request(id: u64, req: &Request) -> u64 {
    let Request { body, piggyback } = req;
    let mut h = FxHasher::default();
    h.write_u64(id);
    h.write_u16(body.kind());
    match body {
        RequestBody::Fetch { page } => page.hash(&mut h),
        RequestBody::Prefetch(Prefetch { page, extra, hint }) => {
            page.hash(&mut h);
            extra.hash(&mut h);
            hint.hash(&mut h);
        }
        RequestBody::Commit(c) => commit(&mut h, c),
        RequestBody::Abort | RequestBody::Goodbye | RequestBody::Stats => {}
        RequestBody::PageRecords(PageRecords { txn, records, pages }) => {
            txn.hash(&mut h);
            records.hash(&mut h);
            pages.hash(&mut h);
        }
        RequestBody::PageCommit(PageCommit {
            txn,
            mode,
            reads,
            writes,
            created,
            records,
            pages,
        }) => {
            txn.hash(&mut h);
            mode.hash(&mut h);
            reads.hash(&mut h);
            writes.hash(&mut h);
            created.hash(&mut h);
            records.hash(&mut h);
            pages.hash(&mut h);
        }
        RequestBody::Hello(_)
        | RequestBody::Resume(_)
        | RequestBody::Backup { .. }
        | RequestBody::Prepare(_)
        | RequestBody::Peer(_)
        | RequestBody::Replica(_) => {
            return framed(|f| req.encode(id, usize::MAX, f), || format!("{id} {req:?}"));
        }
    }
    let Piggyback { acks, discarded, demoted, demoted_pages, contention } = piggyback;
    acks.hash(&mut h);
    discarded.hash(&mut h);
    demoted.hash(&mut h);
    demoted_pages.hash(&mut h);
    if let Some(c) = contention {
        let thor_wire::contention::Contention { invalidation_aborts, retries, object } = c;
        invalidation_aborts.hash(&mut h);
        retries.hash(&mut h);
        object.hash(&mut h);
    }
    h.finish()
}

/// A digest of a reply to request `id`: every field of the reply, see the module
/// documentation.
pub(crate) fn digest_reply(id: u64, reply: &Reply) -> u64 {
    let Reply { body, invalidations, wanted, seen } = reply;
    let mut h = FxHasher::default();
    h.write_u64(id);
    h.write_u16(body.kind());
    match body {
        ReplyBody::Page { page, bytes } => {
            page.hash(&mut h);
            bytes.hash(&mut h);
        }
        ReplyBody::Pages(pages) => pages.hash(&mut h),
        ReplyBody::CommitOk { lsn, created } => {
            lsn.hash(&mut h);
            created.hash(&mut h);
        }
        ReplyBody::CommitRefused { code, message } => {
            code.hash(&mut h);
            message.hash(&mut h);
        }
        ReplyBody::Error { code, message } => {
            code.hash(&mut h);
            message.hash(&mut h);
        }
        ReplyBody::Prepared { created } => created.hash(&mut h),
        ReplyBody::Ack => {}
        ReplyBody::HelloOk(_)
        | ReplyBody::Resumed(_)
        | ReplyBody::Stats(_)
        | ReplyBody::BackupDone(_)
        | ReplyBody::Replica(_) => {
            return framed(|f| reply.encode(id, usize::MAX, f), || format!("{id} {reply:?}"));
        }
    }
    invalidations.hash(&mut h);
    wanted.hash(&mut h);
    match seen {
        Some(Seen { stamp, complete, settled }) => {
            h.write_u8(1);
            stamp.hash(&mut h);
            complete.hash(&mut h);
            settled.hash(&mut h);
        }
        None => h.write_u8(0),
    }
    h.finish()
}

/// Every field of a commit request.
fn commit(h: &mut FxHasher, c: &Commit) {
    // Leaf deltas are left out: the simulation's clients send none.
    let Commit { reads, versions, created, id, leaves: _ } = c;
    reads.hash(h);
    versions.hash(h);
    created.hash(h);
    id.hash(h);
}

/// The digest of a message's frame as `encode` writes it, or, for a message no encoder would
/// send (the simulation forges some), of its description.
fn framed(
    encode: impl FnOnce(&mut Vec<u8>) -> Result<(), thor_wire::WireError>,
    describe: impl FnOnce() -> String,
) -> u64 {
    FRAME.with_borrow_mut(|frame| {
        frame.clear();
        match encode(frame) {
            Ok(()) => digest_bytes(frame),
            Err(_) => digest_bytes(describe().as_bytes()),
        }
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use thor_core::{Lsn, Oref, PageId};

    use super::*;

    fn page(n: u32) -> PageId {
        PageId::new(n).expect("a page id")
    }

    fn reply(body: ReplyBody) -> Reply {
        Reply { body, invalidations: Vec::new(), wanted: Vec::new(), seen: None }
    }

    #[test]
    fn a_reply_digest_changes_with_any_byte_of_a_page() {
        let a = Bytes::from(vec![7u8; 4096]);
        let mut b = vec![7u8; 4096];
        b[4000] = 8;
        let pa = reply(ReplyBody::Page { page: page(3), bytes: a.clone() });
        let pb = reply(ReplyBody::Page { page: page(3), bytes: Bytes::from(b) });
        assert_ne!(digest_reply(1, &pa), digest_reply(1, &pb));
        assert_eq!(digest_reply(1, &pa), digest_reply(1, &pa.clone()));
        assert_ne!(digest_reply(1, &pa), digest_reply(2, &pa), "the id counts");
        let other_page = reply(ReplyBody::Page { page: page(4), bytes: a.clone() });
        assert_ne!(digest_reply(1, &pa), digest_reply(1, &other_page));
        let as_pages = reply(ReplyBody::Pages(vec![(page(3), a)]));
        assert_ne!(digest_reply(1, &pa), digest_reply(1, &as_pages), "the variant counts");
    }

    #[test]
    fn a_reply_digest_covers_what_rides_on_it() {
        let o = Oref::new(page(2), thor_core::Oid::new(5).expect("oid"));
        let plain = reply(ReplyBody::CommitOk { lsn: Lsn(9), created: vec![] });
        let mut inval = plain.clone();
        inval.invalidations.push(o);
        let mut wanted = plain.clone();
        wanted.wanted.push(page(2));
        let mut seen = plain.clone();
        seen.seen = Some(Seen {
            stamp: thor_wire::HistoryPoint::default(),
            complete: true,
            settled: false,
        });
        let digests = [&plain, &inval, &wanted, &seen]
            .map(|r| digest_reply(1, r))
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(digests.len(), 4);
    }

    #[test]
    fn a_request_digest_covers_the_commit_and_the_piggyback() {
        let o = Oref::new(page(2), thor_core::Oid::new(5).expect("oid"));
        let commit = |v: &[u8]| Request {
            body: RequestBody::Commit(Commit {
                reads: vec![o],
                versions: vec![(o, Bytes::copy_from_slice(v))],
                created: Vec::new(),
                id: Some(3),
                leaves: Vec::new(),
            }),
            piggyback: Piggyback::default(),
        };
        let a = commit(b"abcd");
        assert_ne!(digest_request(1, &a), digest_request(1, &commit(b"abce")));
        let mut acked = a.clone();
        acked.piggyback.acks.push(o);
        assert_ne!(digest_request(1, &a), digest_request(1, &acked));
        let mut demoted = a.clone();
        demoted.piggyback.demoted_pages.push((page(2), Bytes::from_static(b"page")));
        assert_ne!(digest_request(1, &a), digest_request(1, &demoted));
        let fetch =
            Request { body: RequestBody::Fetch { page: page(2) }, piggyback: Piggyback::default() };
        assert_eq!(digest_request(4, &fetch), digest_request(4, &fetch.clone()));
    }
}
