//! The core's object-level API, for a driver that does not block.
//!
//! One request is outstanding at a time, as on a connection: each call that needs the server
//! returns the [`Request`] to send, and the driver feeds the reply to it into
//! [`ClientCore::receive`], which says what it did as an [`Event`]. Nothing here waits, sleeps
//! or reads a clock: `now_ns` comes with the calls that need it.
//!
//! ```text
//!   begin(now) ──► None: go on             │ Some(Abort): send, receive ──► Ready / Doomed
//!   read(oref) ──► Hit(bytes)              │ Send(Fetch or Prefetch): send, receive ──► Fetched / Doomed,
//!                                          │                                  then read again
//!   write(oref, at, bytes)  (a resident object of the transaction; not its references)
//!   create(bytes) ──► handle;  set_ref(obj, off, target);  canonical(handle) after the commit
//!   commit(now) ──► Commit request: send, receive ──► Committed(info) / Refused(error)
//!   prepare(stamp, coordinator, participants, now) ──► Prepare request: send, receive
//!               ──► Voted { lsn, created } / Refused(error);  then finish_part(outcome)
//!   abort()                 (local: the next request collects the invalidations)
//!   disconnected(); resume(info) ──► Resume request: send, receive ──► Resumed { cache_kept },
//!               or the lost commit's end: Committed / Refused(Disconnected) / Unknown
//! ```
//!
//! With several servers the driver holds one core per server and is the two-phase commit's
//! client side, as `crate::Cluster` is for sessions: it prepares each server's part under one
//! header (a stamp, the coordinator, the participants), collects the votes, and ends every
//! part with the decision.
//!
//! A transaction an invalidation dooms is aborted in the cache at once (as in a `Session`);
//! the reply that brought the invalidation answers with [`Event::Doomed`], and the next
//! `read` or `commit` fails with the conflict. The driver then starts the transaction again
//! ([`ClientCore::backoff`] says how long to wait first).
//!
//! Objects are read and written as their stored bytes (references as orefs, as a commit
//! ships them): a read copies the object unswizzled; a write changes bytes outside the
//! object's header and its reference slots, which keep the references the object had.
//! Commits go by object shipping (`obj` mode); a core for a server in a page-based mode
//! refuses [`ClientCore::commit`] ([`ClientError::Usage`]): its commit path makes round trips of
//! its own and is driven by `Session` only.

use thor_cache::core::Need;
use thor_core::{Lsn, Oref, PageId, ServerId};
use thor_wire::{
    CacheVerdict, Commit, Outcome, Participant, Reply, ReplyBody, Request, RequestBody, ServerInfo,
    Stamp,
};

use super::ClientCore;
use crate::error::{ClientError, ConflictCause};
use crate::session::{CommitInfo, Part, check_pages, unexpected};
use crate::typed::{Any, Ref};

/// Most rounds a read makes on the objects the cache holds before it asks for a page: the
/// object itself, then its class object (whose own class, the metaclass, is built in).
const READ_ROUNDS_MAX: u32 = 3;

/// What the reply the driver will feed answers.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A refresh (an `Abort` with nothing open, answered with `Ack`).
    Refresh,
    /// A fetch of this page.
    Fetch(PageId),
    /// A fetch of this page with up to this many further pages (`Prefetch`).
    Prefetch(PageId, u16),
    /// A commit, with what its end needs and the id to ask about it with.
    Commit(Part, Option<u64>),
    /// A part of a transaction over several servers (`Prepare`), with what its end needs.
    Prepare(Part),
    /// A `Resume` asking about this commit, sent with this many objects installed.
    Resume { commit: Option<u64>, before: u64 },
}

/// What [`ClientCore::read`] found.
#[derive(Debug)]
pub enum Read {
    /// The object is cached: its bytes as stored (references as orefs).
    Hit(Vec<u8>),
    /// A miss: send this request, feed its reply to [`ClientCore::receive`], and read again.
    /// (Boxed: a request is large next to a hit, and a miss costs a round trip anyway.)
    Send(Box<Request>),
}

/// How a two-phase part that voted ends ([`ClientCore::finish_part`]).
#[derive(Debug, Clone, Copy)]
pub enum PartOutcome<'a> {
    /// The transaction committed at `lsn`; this server gave its created objects these orefs.
    Committed(Lsn, &'a [Oref]),
    /// The transaction aborted: the part's objects go back to their copies from before it.
    Aborted,
    /// The outcome is not known here (the coordinator's answer, or this part's, was lost): the
    /// objects the part wrote leave the cache, since their old copies are stale if it
    /// committed.
    Unknown,
}

/// What a reply did ([`ClientCore::receive`]).
#[derive(Debug)]
pub enum Event {
    /// The reply to a refresh was applied; the transaction goes on.
    Ready,
    /// The page asked for is installed: read again.
    Fetched(PageId),
    /// An invalidation on the reply hit the open transaction, which is aborted: start it again.
    /// The error is the conflict its next read or commit would return.
    Doomed(ClientError),
    /// The transaction committed.
    Committed(CommitInfo),
    /// This server's part of a transaction over several servers is prepared (`lsn` is
    /// `None`), or committed if this server coordinates it (`lsn` is the decision): the orefs
    /// it gave the part's created objects. The part waits for [`ClientCore::finish_part`].
    Voted {
        /// The coordinator's decision, when this server is the coordinator.
        lsn: Option<Lsn>,
        /// The orefs of the part's created objects, in creation order.
        created: Vec<Oref>,
    },
    /// The server refused the commit, and the transaction is aborted; the error says why
    /// ([`ClientError::is_conflict`]: run it again). Also a commit whose answer a broken
    /// connection lost and that did not happen (`ConflictCause::Disconnected`).
    Refused(ClientError),
    /// The session resumed on a new connection ([`ClientCore::resume`]): the server kept the
    /// cache (and sent the invalidations of what changed meanwhile) or it was dropped.
    Resumed {
        /// Whether the cached copies were kept.
        cache_kept: bool,
    },
    /// The commit whose answer a broken connection lost may or may not have happened, and
    /// the server cannot tell ([`ClientError::CommitUnknown`]); it is aborted in the cache.
    Unknown(ClientError),
}

impl ClientCore {
    /// Starts a transaction at `now_ns`. Returns the refresh request to send first if the last
    /// reply is older than [`crate::SessionConfig::refresh_after`] (feed its reply to
    /// [`ClientCore::receive`] before reading).
    pub fn begin(&mut self, now_ns: u64) -> Result<Option<Request>, ClientError> {
        if self.in_transaction {
            return Err(ClientError::Usage("begin with a transaction open"));
        }
        self.idle()?;
        self.in_transaction = true;
        self.leaf_logs.clear();
        // A fetch again of a stale page belongs to the read that made it: one a doomed
        // transaction left unfinished says nothing about this transaction's reads (its entry
        // may even name another object now).
        self.stale_refetch = None;
        if !self.needs_refresh(now_ns) {
            return Ok(None);
        }
        self.stats.refreshes += 1;
        self.pending = Some(Pending::Refresh);
        Ok(Some(self.request(RequestBody::Abort, None)))
    }

    /// Reads the object `oref` in the open transaction (it joins the read set): its bytes if
    /// it is cached, else the fetch to send. Fails with the conflict if the transaction is
    /// doomed.
    pub fn read(&mut self, oref: Oref) -> Result<Read, ClientError> {
        self.ready()?;
        if oref.is_null() {
            return Err(ClientError::NullReference);
        }
        let i = self.cache.entry_for(oref)?;
        if let Some(loc) = self.cache.access(i, oref.raw()) {
            let mut out = Vec::new();
            self.cache.copy_unswizzled(loc, &mut out);
            return Ok(Read::Hit(out));
        }
        for _ in 0..READ_ROUNDS_MAX {
            let t = self.conversion.start();
            let need = self.cache.resolve(i);
            self.conversion.stop(t);
            let page = match need? {
                Need::Resident(loc) => {
                    self.stale_refetch = None;
                    let mut out = Vec::new();
                    self.cache.copy_unswizzled(loc, &mut out);
                    return Ok(Read::Hit(out));
                }
                Need::Page(p) => p,
                // The cached page does not hold the object: fetch it once more, and if the
                // fresh page does not either, the object does not exist (a server's bytes do
                // not make a driver fetch for ever).
                Need::Stale(_) if self.stale_refetch == Some(i) => {
                    self.stale_refetch = None;
                    return Err(ClientError::Cache(thor_cache::CacheError::NoSuchObject(oref)));
                }
                Need::Stale(p) => {
                    self.stale_refetch = Some(i);
                    p
                }
                Need::Class(c) => {
                    let ci = self.cache.entry_for(c)?;
                    match self.cache.resolve(ci)? {
                        Need::Resident(loc) => {
                            self.register_class_at(c, loc)?;
                            continue;
                        }
                        Need::Page(p) | Need::Stale(p) => p,
                        Need::Class(_) => {
                            return Err(ClientError::BadClass(format!(
                                "{c:?}, the class of {oref:?}, is not a class object"
                            )));
                        }
                    }
                }
            };
            self.stats.slow_accesses += 1;
            return self.fetch_request(page).map(|req| Read::Send(Box::new(req)));
        }
        Err(ClientError::Cache(thor_cache::CacheError::Full { frames: self.cache.usable_frames() }))
    }

    /// The request for `page`: a `Prefetch` of further pages too when the client prefetches
    /// (its window, [`crate::prefetch`]), else a `Fetch`. The frames for the pages are freed
    /// now, before the reply.
    fn fetch_request(&mut self, page: PageId) -> Result<Request, ClientError> {
        let extra = self.prefetch_extra();
        let (body, pending) = if extra > 0 {
            let hint = self.cfg.prefetch_hint;
            let body = RequestBody::Prefetch(thor_wire::Prefetch { page, extra, hint });
            (body, Pending::Prefetch(page, extra))
        } else {
            (RequestBody::Fetch { page }, Pending::Fetch(page))
        };
        let req = self.request(body, Some(page));
        if let Err(e) = self.cache.while_fetching_pages(1 + usize::from(extra)) {
            self.unsent(req);
            return Err(e.into());
        }
        self.pending = Some(pending);
        Ok(req)
    }

    /// Installs the pages of a reply to a `Prefetch` of `page`: the further ones first (except
    /// those the cache holds), the page asked for last, so that no prefetched page's
    /// installation evicts it before the read that asked for it.
    fn install_pages(
        &mut self,
        page: PageId,
        extra: u16,
        mut pages: Vec<(PageId, bytes::Bytes)>,
    ) -> Result<(), ClientError> {
        check_pages(&pages, page, extra)?;
        let (_, asked) = pages.swap_remove(0);
        self.install_prefetched(pages)?;
        self.cache.install_page(page, &asked)?;
        self.stats.fetches += 1;
        Ok(())
    }

    /// Overwrites bytes `at..at + bytes.len()` of the object `oref`, which the open
    /// transaction has read and the cache holds (read it first). The range must lie within
    /// the object and outside its class word and its reference slots ([`ClientError::Usage`]
    /// otherwise). The first write of an object takes its undo copy.
    pub fn write(&mut self, oref: Oref, at: usize, bytes: &[u8]) -> Result<(), ClientError> {
        self.ready()?;
        let i = self.cache.entry_for(oref)?;
        let loc = self
            .cache
            .access(i, oref.raw())
            .ok_or(ClientError::Usage("write an object the cache holds: read it first"))?;
        let obj = self.cache.object(loc);
        let end = at.checked_add(bytes.len()).filter(|&e| e <= obj.len());
        let Some(end) = end.filter(|_| at >= thor_core::limits::OBJECT_HEADER_BYTES) else {
            return Err(ClientError::Usage("write past the object or over its header"));
        };
        let desc = self.cache.class(self.cache.class_word(loc)).cloned();
        let desc = desc.ok_or(ClientError::Usage("write to an object of an unknown class"))?;
        let mut over_ref = false;
        desc.for_each_ref_offset(obj, |o| over_ref |= o < end && at < o + 4);
        if over_ref {
            return Err(ClientError::Usage("write over a reference slot"));
        }
        self.cache.before_write(i)?;
        // SAFETY: `at..end` lies within the object at `loc` (checked above), which stays where
        // it is: nothing between the check and the copy moves objects.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.cache.object_ptr(loc).add(at),
                bytes.len(),
            )
        };
        Ok(())
    }

    /// Creates an object in the open transaction from its stored bytes (`bytes`: its class
    /// word first, a class the cache knows, such as a built-in one or the class of an object
    /// read before; every reference slot null). Returns its handle: it gets its oref when the
    /// transaction commits ([`ClientCore::canonical`]); until then [`ClientCore::set_ref`]
    /// points references at it, which the commit ships tagged.
    pub fn create(&mut self, bytes: &[u8]) -> Result<Ref<Any>, ClientError> {
        self.ready()?;
        let made = self.pinned(|c| c.cache.create(bytes))?;
        Ok(Ref::new(made.entry, made.serial))
    }

    /// A handle on the object `oref`, for [`ClientCore::set_ref`].
    pub fn handle(&mut self, oref: Oref) -> Result<Ref<Any>, ClientError> {
        Ok(Ref::new(self.cache.entry_for(oref)?, oref.raw()))
    }

    /// The current form of handle `r`: after the commit that created an object, its handle
    /// names it by its oref ([`Ref::oref`]).
    pub fn canonical(&mut self, r: Ref<Any>) -> Result<Ref<Any>, ClientError> {
        if r.is_null() {
            return Ok(r);
        }
        let i = self.cache.rebind(r.idx, r.oref)?;
        Ok(Ref::new(i, self.cache.oref_of(i)))
    }

    /// Points the reference slot at byte `off` of object `obj` (one the cache holds: read or
    /// created in the open transaction) at `target` ([`Ref::NULL`]: null). `off` must be one
    /// of the object's reference slots ([`ClientError::Usage`] otherwise).
    pub fn set_ref(
        &mut self,
        obj: Ref<Any>,
        off: usize,
        target: Ref<Any>,
    ) -> Result<(), ClientError> {
        self.ready()?;
        let i = self.cache.rebind(obj.idx, obj.oref)?;
        let loc = self
            .cache
            .access(i, self.cache.oref_of(i))
            .ok_or(ClientError::Usage("set a reference in an object the cache holds"))?;
        let desc = self.cache.class(self.cache.class_word(loc)).cloned();
        let desc = desc.ok_or(ClientError::Usage("an object of an unknown class"))?;
        let mut slot = false;
        desc.for_each_ref_offset(self.cache.object(loc), |o| slot |= o == off);
        if !slot {
            return Err(ClientError::Usage("set_ref at an offset that is no reference slot"));
        }
        self.cache.before_write(i)?;
        self.store_ref(i, off, target.idx, target.oref)
    }

    /// Commits the open transaction at `now_ns`: the request to send (its reply goes to
    /// [`ClientCore::receive`], which ends the transaction). Read-only transactions go to the
    /// server too, which validates their reads. A doomed transaction ends here with its
    /// conflict.
    pub fn commit(&mut self, now_ns: u64) -> Result<Request, ClientError> {
        let (mut c, part) = self.close_transaction(now_ns)?;
        if self.asks_outcomes && self.info.version >= 5 && part.n_modified + part.n_created > 0 {
            c.id = Some(self.next_commit_id());
        }
        self.pending = Some(Pending::Commit(part, c.id));
        Ok(self.request(RequestBody::Commit(c), None))
    }

    /// Prepares this server's part of a transaction over several servers at `now_ns`: the
    /// `Prepare` request to send, under the two-phase header every part shares (`stamp`, the
    /// `coordinator`: `None` if no part writes; the `participants`). Its reply goes to
    /// [`ClientCore::receive`]: [`Event::Voted`] or [`Event::Refused`]. A part that voted
    /// waits for [`ClientCore::finish_part`] with the transaction's outcome.
    pub fn prepare(
        &mut self,
        stamp: Stamp,
        coordinator: Option<ServerId>,
        participants: Vec<Participant>,
        now_ns: u64,
    ) -> Result<Request, ClientError> {
        let (commit, part) = self.close_transaction(now_ns)?;
        let p = thor_wire::Prepare { stamp, coordinator, participants, commit };
        self.pending = Some(Pending::Prepare(part));
        Ok(self.request(RequestBody::Prepare(Box::new(p)), None))
    }

    /// Ends the part that voted ([`Event::Voted`]) at `now_ns` with the transaction's
    /// `outcome`. Returns what the part did if it committed.
    pub fn finish_part(
        &mut self,
        outcome: PartOutcome<'_>,
        now_ns: u64,
    ) -> Result<Option<CommitInfo>, ClientError> {
        self.idle()?;
        let part = self.voted.take().ok_or(ClientError::Usage("no part waits for its end"))?;
        self.end_part(part, outcome, now_ns)
    }

    /// Ends `part` with the transaction's `outcome` (see [`PartOutcome`]): what
    /// [`ClientCore::finish_part`] and a blocking driver's end of a part share.
    pub(crate) fn end_part(
        &mut self,
        part: Part,
        outcome: PartOutcome<'_>,
        now_ns: u64,
    ) -> Result<Option<CommitInfo>, ClientError> {
        match outcome {
            PartOutcome::Committed(lsn, orefs) => {
                self.committed(part, lsn, orefs, now_ns).map(Some)
            }
            PartOutcome::Aborted => {
                self.pinned(ClientCore::abort_local);
                Ok(None)
            }
            PartOutcome::Unknown => {
                self.pinned(ClientCore::abort_unknown);
                Ok(None)
            }
        }
    }

    /// Ends the open transaction's work for a commit or a part at `now_ns`: its commit body
    /// and what its end needs. A doomed transaction ends here with its conflict; one whose
    /// request cannot be built is aborted.
    fn close_transaction(&mut self, now_ns: u64) -> Result<(Commit, Part), ClientError> {
        self.idle()?;
        if !self.in_transaction {
            return Err(ClientError::Usage("commit without a transaction"));
        }
        if self.pages.is_some() {
            return Err(ClientError::Usage("the page modes commit through a Session"));
        }
        if self.voted.is_some() {
            return Err(ClientError::Usage("a part waits for its end: finish it first"));
        }
        if let Err(e) = self.check_doomed() {
            self.end_aborted();
            return Err(e);
        }
        self.in_transaction = false;
        let (c, shipped) = match self.commit_request() {
            Ok(c) => c,
            Err(e) => {
                self.abort_local();
                return Err(e);
            }
        };
        let part = Part {
            class_slots: self.class_slots(),
            n_created: c.created.len(),
            n_modified: c.versions.len(),
            shipped,
            started_ns: now_ns,
        };
        Ok((c, part))
    }

    /// Aborts the open transaction locally (no message: the next request brings the
    /// invalidations pending for this client).
    pub fn abort(&mut self) -> Result<(), ClientError> {
        self.idle()?;
        self.end_aborted();
        Ok(())
    }

    /// Takes the reply to the request sent last, at `now_ns`: applies its invalidations and
    /// what else rides on it, then its body, and says what it did.
    pub fn receive(&mut self, reply: Reply, now_ns: u64) -> Result<Event, ClientError> {
        let pending = self.pending.take().ok_or(ClientError::Unexpected("a reply to nothing"))?;
        let hit = self.apply(&reply, now_ns);
        let (page, hit) = match pending {
            // A commit's answer dooms nothing: a refused transaction is aborted anyway, and a
            // committed one was validated, so the changes announced with it come after it.
            Pending::Commit(part, _) => return self.commit_answered(part, reply.body, now_ns),
            Pending::Resume { commit, before } => {
                return self.resume_answered(reply.body, commit, before, now_ns);
            }
            Pending::Prepare(part) => return Ok(self.part_answered(part, reply.body)),
            Pending::Refresh => (None, hit),
            Pending::Fetch(page) => (Some(page), hit),
            Pending::Prefetch(page, extra) => {
                if let Some(o) = hit {
                    self.doom(o);
                }
                match reply.body {
                    ReplyBody::Pages(pages) => self.install_pages(page, extra, pages)?,
                    other => return Err(unexpected(other)),
                }
                return Ok(match self.check_doomed() {
                    Err(e) => Event::Doomed(e),
                    Ok(()) => Event::Fetched(page),
                });
            }
        };
        if let Some(o) = hit {
            self.doom(o);
        }
        let event = match (page, reply.body) {
            (None, ReplyBody::Ack) => Event::Ready,
            (Some(page), ReplyBody::Page { page: got, bytes }) if got == page => {
                let t = self.conversion.start();
                let installed = self.cache.install_page(page, &bytes);
                self.conversion.stop(t);
                installed?;
                self.stats.fetches += 1;
                Event::Fetched(page)
            }
            (Some(_), ReplyBody::Page { .. }) => {
                return Err(ClientError::Unexpected("page other than asked"));
            }
            (_, other) => return Err(unexpected(other)),
        };
        match self.check_doomed() {
            Err(e) => Ok(Event::Doomed(e)),
            Ok(()) => Ok(event),
        }
    }

    /// Ends the transaction whose commit `body` answers.
    fn commit_answered(
        &mut self,
        part: Part,
        body: ReplyBody,
        now_ns: u64,
    ) -> Result<Event, ClientError> {
        match body {
            ReplyBody::CommitOk { lsn, created } => {
                self.committed(part, lsn, &created, now_ns).map(Event::Committed)
            }
            ReplyBody::CommitRefused { code, message } => {
                self.abort_local();
                let e = ClientError::refused(code, message);
                if e.is_conflict() {
                    self.stats.conflicts += 1;
                }
                Ok(Event::Refused(e))
            }
            other => {
                self.abort_local();
                Err(unexpected(other))
            }
        }
    }

    /// The connection broke: the reply awaited, if any, will not come. An open transaction is
    /// aborted (its next read or commit fails with the conflict); a commit whose answer was
    /// awaited is in doubt until [`ClientCore::resume`] learns its outcome; a part whose vote
    /// was awaited is aborted here (a two-phase commit's outcome is not asked about).
    pub fn disconnected(&mut self) {
        self.ahead = None;
        // A fetch again of a stale page whose reply the break lost was never answered: the
        // next miss of that object fetches again instead of calling it missing (found by
        // thor-sim's real clients: an object created on a cached page read as `NoSuchObject`
        // after a resume).
        self.stale_refetch = None;
        self.reconnect.breaks += 1;
        match self.pending.take() {
            Some(Pending::Commit(part, id)) => {
                if id.is_some() {
                    self.unresolved = id;
                    self.last_outcome = None;
                }
                self.in_doubt = Some(part);
            }
            // The part may have been prepared, and the transaction may commit: what it wrote
            // leaves the cache.
            Some(Pending::Prepare(_)) => self.pinned(ClientCore::abort_unknown),
            Some(
                Pending::Fetch(_)
                | Pending::Prefetch(..)
                | Pending::Refresh
                | Pending::Resume { .. },
            )
            | None => {}
        }
        if self.in_transaction && self.doomed.is_none() {
            self.pinned(ClientCore::abort_local);
            self.stats.conflicts += 1;
            self.reconnect.aborted += 1;
            self.doomed = Some(
                "the connection to the server broke; the transaction was aborted: run it again"
                    .to_string(),
            );
        }
    }

    /// Resumes the session on a connection whose server said `info` (`HelloOk`): the first
    /// one (which registers the session's key, as a `Session` that reconnects does) or a new
    /// one after [`ClientCore::disconnected`]. Returns the `Resume` to send, which asks about
    /// the commit in doubt; its reply goes to [`ClientCore::receive`]: [`Event::Resumed`], or
    /// the commit in doubt's end ([`Event::Committed`], [`Event::Refused`] if it did not
    /// happen, [`Event::Unknown`]). `None` for a server that cannot resume (before version 5):
    /// the cache is dropped and a commit in doubt is aborted in the cache, its outcome unknown.
    pub fn resume(&mut self, info: ServerInfo) -> Result<Option<Request>, ClientError> {
        self.idle()?;
        self.adopt(info)?;
        let commit = self.unresolved;
        let before = self.installed_objects();
        match self.resume_body(commit, before) {
            Some(body) => {
                self.pending = Some(Pending::Resume { commit, before });
                Ok(Some(self.request(body, None)))
            }
            None => {
                if self.in_doubt.take().is_some() {
                    self.pinned(ClientCore::abort_local);
                }
                Ok(None)
            }
        }
    }

    /// Takes the answer to `Resume`, which asked about `commit`.
    fn resume_answered(
        &mut self,
        body: ReplyBody,
        commit: Option<u64>,
        before: u64,
        now_ns: u64,
    ) -> Result<Event, ClientError> {
        let r = match body {
            ReplyBody::Resumed(r) => r,
            other => return Err(unexpected(other)),
        };
        self.resumed(&r, commit, before);
        let Some(part) = self.in_doubt.take() else {
            return Ok(Event::Resumed { cache_kept: r.cache != CacheVerdict::Dropped });
        };
        let writes = part.n_modified + part.n_created > 0;
        Ok(match r.outcome {
            Some(Outcome::Committed { lsn, created }) => {
                match self.pinned(|c| c.committed(part, lsn, &created, now_ns)) {
                    Ok(info) => Event::Committed(info),
                    Err(e) => Event::Unknown(e),
                }
            }
            Some(Outcome::NotCommitted) => self.lost_commit_aborted("did not happen"),
            // A transaction that wrote nothing changed nothing either way.
            _ if !writes => self.lost_commit_aborted("wrote nothing"),
            _ => {
                self.pinned(ClientCore::abort_unknown);
                Event::Unknown(ClientError::CommitUnknown(Box::new(ClientError::Transport(
                    thor_wire::TransportError::Broken,
                ))))
            }
        })
    }

    /// Ends a commit whose answer was lost and that did not happen (or did not matter): aborted,
    /// a `Disconnected` conflict (run it again).
    fn lost_commit_aborted(&mut self, why: &str) -> Event {
        self.pinned(ClientCore::abort_local);
        self.stats.conflicts += 1;
        self.reconnect.aborted += 1;
        Event::Refused(ClientError::Conflict {
            cause: ConflictCause::Disconnected,
            message: format!(
                "the connection broke during the commit, which {why}; the session resumed: \
                 run it again"
            ),
        })
    }

    /// Takes the answer to a part: a vote keeps the part for [`ClientCore::finish_part`]; a
    /// refusal (or an answer that is neither) aborts it.
    fn part_answered(&mut self, part: Part, body: ReplyBody) -> Event {
        let (lsn, created) = match body {
            ReplyBody::Prepared { created } => (None, created),
            ReplyBody::CommitOk { lsn, created } => (Some(lsn), created),
            ReplyBody::CommitRefused { code, message } => {
                self.abort_local();
                let e = ClientError::refused(code, message);
                if e.is_conflict() {
                    self.stats.conflicts += 1;
                }
                return Event::Refused(e);
            }
            other => {
                self.abort_local();
                return Event::Refused(unexpected(other));
            }
        };
        self.voted = Some(part);
        Event::Voted { lsn, created }
    }

    /// Fails unless no reply is awaited.
    pub(super) fn idle(&self) -> Result<(), ClientError> {
        match self.pending {
            None => Ok(()),
            Some(_) => Err(ClientError::Usage("a reply is awaited: receive it first")),
        }
    }

    /// Fails unless a transaction is open, not doomed, and no reply is awaited.
    fn ready(&self) -> Result<(), ClientError> {
        self.idle()?;
        if !self.in_transaction {
            return Err(ClientError::Usage("begin a transaction first"));
        }
        self.check_doomed()
    }
}
