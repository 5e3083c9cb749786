//! The client's commit path: the seam between a transaction and the request that commits it.
//!
//! A session commits in one of two ways, chosen by the server's commit mode in `HelloOk`:
//!
//! - **object shipping** ([`ObjectShipping`], `obj` mode, Thor's own): the commit carries the
//!   read set, the new versions of the modified objects and the created objects
//!   (`thor_wire::Commit`); nothing is kept beside the cache;
//! - **the page modes** of the QuickStore study ([`PageModes`](super::page_path::PageModes),
//!   `papers/quickstore-recovery-sigmod95.txt`): the commit carries page records and pages
//!   (`thor_wire::PageCommit`), built from page images and a recovery buffer kept beside the
//!   cache ([`crate::pagemode`]).
//!
//! [`CommitPath`] has exactly the hooks the page modes need, so that `Inner::commit` reads
//! settle, build, send, apply the reply, with no branch on the mode:
//!
//! ```text
//!   write ──► cache.before_write (undo copy) ──► path.before_write   (page modes: copy units,
//!                                                                   send records early)
//!   commit ──► path.request ──► Built { body, shipped, counts, id, kept }
//!                 send body ──► CommitOk ──► cache.commit_done ──► path.committed(kept, lsn)
//!                           └─► refused / lost ──► cache.abort_done ──► path.aborted
//!   reconnect without the cache ──► path.cache_dropped
//! ```
//!
//! The server has the matching seam for the same modes (its commit path behind one trait,
//! issue 31). What a path may do with the connection: round trips of its own *before* the
//! commit (the page modes fetch page images and send records early, as QuickStore's client
//! does when it evicts a dirty page), each an ordinary request whose reply's invalidations
//! apply (and may doom the transaction); the commit request itself is sent by the session, one
//! per transaction. A path keeps no state of its own: the page modes' state is the protocol
//! core's `ClientCore::pages`, so that an invalidation arriving on one of the path's round trips
//! can abort it (`ClientCore::abort_cache` calls [`CommitPath::aborted`]) while the path is
//! running. The hooks that only change state ([`CommitPath::committed`],
//! [`CommitPath::aborted`], [`CommitPath::cache_dropped`]) take the core; the two that may
//! make round trips ([`CommitPath::before_write`], [`CommitPath::request`]) take the session's
//! driver, which is why the page modes commit through a `Session` only.
//!
//! The path is a `&'static dyn CommitPath`, chosen when the session is made: the hooks cost
//! one indirect call each, on a write (after the cache's undo copy) and at commit, never on a
//! hit or a fetch.

use bytes::Bytes;
use thor_cache::CacheError;
use thor_core::{Lsn, Oref, PageId};
use thor_wire::{Commit, RequestBody};

use super::Inner;
use crate::error::ClientError;
use crate::proto::ClientCore;

/// How a session's transactions are committed (see the module documentation).
pub(crate) trait CommitPath: Sync + std::fmt::Debug {
    /// Called after the cache's `before_write` of entry `i` (every write to an object, the
    /// first of each transaction included), unless the transaction is doomed.
    fn before_write(&self, s: &mut Inner, i: u32) -> Result<(), ClientError>;

    /// The commit request of the open transaction (the read-ahead is settled and the
    /// transaction is not doomed). On an error the session aborts the transaction.
    fn request(&self, s: &mut Inner) -> Result<Built, ClientError>;

    /// The server committed the transaction at `lsn` and the cache made it so.
    fn committed(&self, s: &mut ClientCore, kept: Kept, lsn: Lsn);

    /// The transaction ended without committing (aborted, refused, doomed or lost), after the
    /// cache's abort.
    fn aborted(&self, s: &mut ClientCore);

    /// The cache was dropped (a reconnect whose server cannot vouch for it): what the path
    /// keeps beside the cache starts over.
    fn cache_dropped(&self, s: &mut ClientCore);

    /// Whether the path keeps copies of pages beside the cache, which a resumed cache does
    /// not cover (a reconnect then drops the cache, and calls [`CommitPath::cache_dropped`]).
    fn keeps_pages(&self) -> bool;
}

/// A commit request as a path built it.
#[derive(Debug)]
pub(crate) struct Built {
    /// The request to send.
    pub body: RequestBody,
    /// Bytes of object versions, records and pages it ships.
    pub shipped: u64,
    /// Existing objects it modifies.
    pub n_modified: usize,
    /// Objects it creates.
    pub n_created: usize,
    /// The id to ask about the commit with if its answer is lost (`None`: the commit cannot
    /// be asked about, or need not be).
    pub id: Option<u64>,
    /// What the path needs back when the commit succeeds.
    pub kept: Kept,
}

/// What a path keeps while its commit is on the way: the final images of the pages the
/// transaction wrote (page modes; empty, without an allocation, when shipping objects).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub images: Vec<(PageId, Vec<u8>)>,
}

/// Thor's own commit path: objects shipped, nothing kept beside the cache.
#[derive(Debug)]
pub(crate) struct ObjectShipping;

impl CommitPath for ObjectShipping {
    #[inline]
    fn before_write(&self, _: &mut Inner, _: u32) -> Result<(), ClientError> {
        Ok(())
    }

    fn request(&self, s: &mut Inner) -> Result<Built, ClientError> {
        let (mut c, shipped) = s.commit_request()?;
        let (n_modified, n_created) = (c.versions.len(), c.created.len());
        // An id to ask about the commit with if its answer is lost (version 5, a session that
        // can reconnect to ask). A read-only transaction needs none: whether or not it
        // committed, it changed nothing, and running it again is always right.
        let writes = n_modified + n_created > 0;
        let id = (s.info.version >= 5 && writes && s.asks_outcomes).then(|| s.next_commit_id());
        c.id = id;
        // Leaf deltas (version 8) for the map leaves it changed by point operations, within
        // what the frame has left after the rest of the commit (and at most a quarter of it:
        // a delta is an optimization, never the reason a commit does not fit).
        if s.cfg.leaf_deltas
            && s.info.version >= thor_wire::version::VERSION_LEAF_DELTAS
            && n_modified > 0
        {
            let written: Vec<Oref> = c.versions.iter().map(|v| v.0).collect();
            let rest = shipped as usize + 8 * (c.reads.len() + n_modified + n_created) + 256;
            let budget = (s.info.max_frame_bytes / 4)
                .min(s.info.max_frame_bytes - rest.min(s.info.max_frame_bytes));
            c.leaves = s.leaf_logs.deltas(&written, budget);
        }
        Ok(Built {
            body: RequestBody::Commit(c),
            shipped,
            n_modified,
            n_created,
            id,
            kept: Kept::default(),
        })
    }

    fn committed(&self, _: &mut ClientCore, _: Kept, _: Lsn) {}

    fn aborted(&self, _: &mut ClientCore) {}

    fn cache_dropped(&self, _: &mut ClientCore) {}

    fn keeps_pages(&self) -> bool {
        false
    }
}

impl ClientCore {
    /// The commit request for the current transaction: its read set, the new versions of the
    /// objects it modified and the objects it created, as the cache exports them. Also the
    /// body of a part of a transaction over several servers (`Inner::part_send`).
    pub(crate) fn commit_request(&self) -> Result<(Commit, u64), ClientError> {
        let cache = &self.cache;
        let mut reads: Vec<Oref> = Vec::with_capacity(cache.read_count());
        cache.for_each_read(|o| reads.push(o));
        // Every object is exported straight into one buffer, which the request's slices
        // share: a commit of 99,000 objects made 99,000 allocations, and every slice's first
        // clone another; and each object's copy through a buffer of its own cost a second
        // pass over the commit's bytes.
        let mut all: Vec<u8> = Vec::new();
        let mut ends: Vec<usize> =
            Vec::with_capacity(cache.modified().len() + cache.created().len());
        let mut orefs = Vec::with_capacity(cache.modified().len());
        for i in cache.modified() {
            let oref = Oref::from_raw(cache.oref_of(i))
                .ok_or(CacheError::Internal("a modified object without an oref"))?;
            cache.export_append(i, &mut all)?;
            if ends.is_empty() {
                // Objects of one transaction are often of one size: a guess that saves the
                // doublings, never more than a request may carry.
                let guess = (all.len() * ends.capacity()).min(self.info.max_frame_bytes);
                all.reserve(guess.saturating_sub(all.len()));
            }
            ends.push(all.len());
            orefs.push(oref);
        }
        for &i in cache.created() {
            cache.export_append(i, &mut all)?;
            ends.push(all.len());
        }
        let shipped = all.len() as u64;
        let all = Bytes::from(all);
        let mut start = 0;
        let mut slices = ends.into_iter().map(|end| {
            let b = all.slice(start..end);
            start = end;
            b
        });
        let versions = orefs.into_iter().zip(slices.by_ref()).collect();
        let created = slices.collect();
        Ok((Commit { reads, versions, created, id: None, leaves: Vec::new() }, shipped))
    }
}
