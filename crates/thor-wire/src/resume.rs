//! Resuming a session on a new connection (version 5): what a client has seen, what it holds,
//! and the commit whose answer it lost.
//!
//! A client whose connection broke (a server restart, a timeout, a network fault) opens a new
//! one and wants to keep its cache. Its cached copies were current as of some point of the
//! server's history; the server must tell it which of them changed since, or say that it
//! cannot tell. Three additions carry that:
//!
//! - **The seen stamp** ([`Seen`], on replies of version-5 connections, frame flag
//!   [`crate::frame::FLAG_SEEN`]): every reply names the newest change to the database the
//!   server had made visible when it sent the reply, as a [`HistoryPoint`] (the change's LSN
//!   and a *mark* that tells it from any other change the database could have had there), and
//!   says whether every invalidation up to it was on this reply or an earlier one. A client
//!   keeps the newest stamp it received (the newest state its copies can reflect) and the
//!   newest one that came with every invalidation (the oldest state its copies can reflect).
//! - **`Resume`** ([`Resume`], a request): sent first on a new connection, it names the
//!   session (a key the client chose, the same on every connection of the session), the two
//!   stamps, the pages the client holds anything of, and the id of a commit whose answer was
//!   lost ([`crate::Commit::id`]).
//! - **`Resumed`** ([`Resumed`], its reply): whether the cache is kept (the invalidations of
//!   what changed meanwhile on those pages ride on this reply, as on any reply), dropped (the
//!   server could not tell: the client drops every cached copy) or there was none; and what
//!   became of the lost commit.
//!
//! The server's side of it, and why it is sound, is thor-server-core's `core/resume.rs`.
//!
//! ```text
//! Resume   0x000B  +----------+-----------+--------------------------------+
//!                  | key: u64 | flags: u32| [high: point | complete: point] |  flags bit 0
//!                  +----------+-----------+--------------------------------+
//!                  | [commit id: u64]                                      |  flags bit 1
//!                  +--------+----------------------------------------------+
//!                  | P: u32 | P pages (u32)                                |
//!                  +--------+----------------------------------------------+
//!                  point (HistoryPoint) = lsn: u64 | mark: u64; P <= RESUME_PAGES_MAX;
//!                  other flag bits zero
//!
//! Resumed  0x008A  +----------+------------+---------+----------+--------+--------------+
//!                  | cache: u8| outcome: u8| 0 (u16) | lsn: u64 | C: u32 | C orefs (u32)|
//!                  +----------+------------+---------+----------+--------+--------------+
//!                  cache: 0 none, 1 kept, 2 dropped; outcome: 0 none asked, 1 committed
//!                  (lsn, created orefs), 2 not committed, 3 unknown (lsn 0, C 0 unless 1)
//!
//! seen section of a reply (flag FLAG_SEEN, after the invalidations and wanted pages):
//!                  +----------+-----------+-------------+
//!                  | lsn: u64 | mark: u64 | flags: u32  |  flags bit 0: complete,
//!                  +----------+-----------+-------------+  bit 1: settled (version 7)
//!
//! CommitWithId 0x000C  +---------+--------------------------------+
//!                      | id: u64 | a Commit body (see crate::message) |   id not 0
//!                      +---------+--------------------------------+
//! ```

use thor_core::{Lsn, Oref, PageId};

use crate::codec::{Put, Reader};
use crate::error::WireError;
use crate::limits::{COMMIT_OBJECTS_MAX, RESUME_PAGES_MAX};

/// A point in a server's history of changes: the LSN of the log record that made a change
/// visible, and a mark that tells that change from any other a database could have had at
/// that LSN (a database restored from a backup has other changes at the same LSNs). Chosen by
/// the server; clients only keep and return it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HistoryPoint {
    /// The change's LSN (0 for a point before any change the server knows).
    pub lsn: Lsn,
    /// Its mark.
    pub mark: u64,
}

/// The seen section of a reply: the newest change visible when the reply was sent, and
/// whether every invalidation up to it has been sent to this client (on this reply or
/// earlier ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The newest visible change.
    pub stamp: HistoryPoint,
    /// Every invalidation of a change up to it is on this reply or an earlier one.
    pub complete: bool,
    /// Settled (version 7): every transaction the server validates from now on is serialized
    /// after every change up to the stamp, and none that is serialized before one of them is
    /// still undecided. So the changes up to the stamp are a prefix of the serial order, and
    /// a read-only transaction whose reads all reflect exactly that state (a complete stamp
    /// on the last reply, no invalidation that hit it) can commit at the client, serialized
    /// right after the stamp. Sent only on connections that agreed on version 7.
    pub settled: bool,
}

/// What a resuming client has seen: the two stamps of [`Seen`] sections it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenRange {
    /// The newest stamp received: its copies reflect no change after it.
    pub high: HistoryPoint,
    /// The newest stamp received with every invalidation up to it: a change after it may be
    /// missing from its copies.
    pub complete: HistoryPoint,
}

/// The request that resumes a session on a new connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The session's key: chosen at random by the client, the same on every connection of
    /// the session. The server closes an older connection that resumed or committed with the
    /// same key, so that nothing it still holds can commit after this request is answered.
    pub key: u64,
    /// What the client has seen; `None` if it caches nothing.
    pub seen: Option<SeenRange>,
    /// The id of a commit whose answer never came ([`crate::Commit::id`]), to learn its
    /// outcome.
    pub commit: Option<u64>,
    /// The pages the client caches anything of (ignored without `seen`), in any order.
    pub pages: Vec<PageId>,
}

/// What the server made of the client's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheVerdict {
    /// The client said it caches nothing.
    None,
    /// Kept: the invalidations of everything that changed on its pages since its complete
    /// stamp ride on this reply (and later ones); from now on the server sends invalidations
    /// for those pages as for pages it sent.
    Kept,
    /// The server cannot tell what changed (its history does not reach back to the client's
    /// stamps, or holds other changes there): the client must drop every cached copy.
    Dropped,
}

/// What became of the commit a [`Resume`] asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It committed, at this LSN, and gave its created objects these orefs (in request order).
    Committed {
        /// The commit's LSN.
        lsn: Lsn,
        /// The orefs of its created objects.
        created: Vec<Oref>,
    },
    /// It did not commit and never will: the server has no record of it and has made sure
    /// that it cannot arrive later (the connection that sent it is closed).
    NotCommitted,
    /// The server cannot tell (its history does not reach back to when it was sent).
    Unknown,
}

/// The reply to [`Resume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// What became of the cache.
    pub cache: CacheVerdict,
    /// What became of the commit asked about (`None` if none was).
    pub outcome: Option<Outcome>,
}

const RESUME_FLAG_SEEN: u32 = 1;
const RESUME_FLAG_COMMIT: u32 = 2;
const SEEN_FLAG_COMPLETE: u32 = 1;
const SEEN_FLAG_SETTLED: u32 = 2;

/// Bytes of a [`Seen`] section.
pub(crate) const SEEN_BYTES: usize = 20;

impl HistoryPoint {
    fn put(&self, out: &mut Vec<u8>) {
        out.put_u64(self.lsn.0);
        out.put_u64(self.mark);
    }

    fn get(r: &mut Reader, what: &'static str) -> Result<HistoryPoint, WireError> {
        Ok(HistoryPoint { lsn: Lsn(r.u64(what)?), mark: r.u64(what)? })
    }
}

impl Seen {
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        self.stamp.put(out);
        let flags = if self.complete { SEEN_FLAG_COMPLETE } else { 0 }
            | if self.settled { SEEN_FLAG_SETTLED } else { 0 };
        out.put_u32(flags);
    }

    pub(crate) fn get(r: &mut Reader) -> Result<Seen, WireError> {
        let stamp = HistoryPoint::get(r, "seen stamp")?;
        let flags = r.u32("seen flags")?;
        if flags & !(SEEN_FLAG_COMPLETE | SEEN_FLAG_SETTLED) != 0 {
            return Err(WireError::BadValue { what: "seen flags", why: "unknown bit set" });
        }
        Ok(Seen {
            stamp,
            complete: flags & SEEN_FLAG_COMPLETE != 0,
            settled: flags & SEEN_FLAG_SETTLED != 0,
        })
    }
}

impl Resume {
    /// Checks the request against the protocol's limits; returns its body's size.
    pub(crate) fn body_bytes(&self) -> Result<usize, WireError> {
        crate::codec::check_limit("resume pages", self.pages.len(), RESUME_PAGES_MAX)?;
        if self.commit == Some(0) {
            return Err(WireError::BadValue { what: "commit id", why: "zero" });
        }
        Ok(12
            + if self.seen.is_some() { 32 } else { 0 }
            + if self.commit.is_some() { 8 } else { 0 }
            + 4
            + 4 * self.pages.len())
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        out.put_u64(self.key);
        let flags = if self.seen.is_some() { RESUME_FLAG_SEEN } else { 0 }
            | if self.commit.is_some() { RESUME_FLAG_COMMIT } else { 0 };
        out.put_u32(flags);
        if let Some(s) = &self.seen {
            s.high.put(out);
            s.complete.put(out);
        }
        if let Some(id) = self.commit {
            out.put_u64(id);
        }
        out.put_u32(self.pages.len() as u32);
        for p in &self.pages {
            out.put_u32(p.get());
        }
    }

    pub(crate) fn get(r: &mut Reader) -> Result<Resume, WireError> {
        let key = r.u64("session key")?;
        let flags = r.u32("resume flags")?;
        if flags & !(RESUME_FLAG_SEEN | RESUME_FLAG_COMMIT) != 0 {
            return Err(WireError::BadValue { what: "resume flags", why: "unknown bit set" });
        }
        let seen = if flags & RESUME_FLAG_SEEN != 0 {
            let high = HistoryPoint::get(r, "high stamp")?;
            let complete = HistoryPoint::get(r, "complete stamp")?;
            Some(SeenRange { high, complete })
        } else {
            None
        };
        let commit = if flags & RESUME_FLAG_COMMIT != 0 {
            match r.u64("commit id")? {
                0 => return Err(WireError::BadValue { what: "commit id", why: "zero" }),
                id => Some(id),
            }
        } else {
            None
        };
        let n = r.count32(RESUME_PAGES_MAX, 4, "resume pages")?;
        let mut pages = Vec::with_capacity(n);
        for _ in 0..n {
            pages.push(r.page_id("resume page")?);
        }
        Ok(Resume { key, seen, commit, pages })
    }
}

impl Resumed {
    /// Checks the reply against the protocol's limits; returns its body's size.
    pub(crate) fn body_bytes(&self) -> Result<usize, WireError> {
        let created = match &self.outcome {
            Some(Outcome::Committed { created, .. }) => {
                crate::codec::check_limit("created orefs", created.len(), COMMIT_OBJECTS_MAX)?;
                if created.iter().any(|o| o.is_null()) {
                    return Err(WireError::BadValue { what: "created orefs", why: "null oref" });
                }
                created.len()
            }
            _ => 0,
        };
        Ok(16 + 4 * created)
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        out.push(match self.cache {
            CacheVerdict::None => 0,
            CacheVerdict::Kept => 1,
            CacheVerdict::Dropped => 2,
        });
        let (code, lsn, created): (u8, Lsn, &[Oref]) = match &self.outcome {
            None => (0, Lsn(0), &[]),
            Some(Outcome::Committed { lsn, created }) => (1, *lsn, created),
            Some(Outcome::NotCommitted) => (2, Lsn(0), &[]),
            Some(Outcome::Unknown) => (3, Lsn(0), &[]),
        };
        out.push(code);
        out.put_u16(0);
        out.put_u64(lsn.0);
        out.put_u32(created.len() as u32);
        for o in created {
            out.put_u32(o.raw());
        }
    }

    pub(crate) fn get(r: &mut Reader) -> Result<Resumed, WireError> {
        let cache = match r.u8("cache verdict")? {
            0 => CacheVerdict::None,
            1 => CacheVerdict::Kept,
            2 => CacheVerdict::Dropped,
            _ => return Err(WireError::BadValue { what: "cache verdict", why: "unknown" }),
        };
        let code = r.u8("outcome")?;
        if r.u16("resumed reserved")? != 0 {
            return Err(WireError::BadValue { what: "resumed reserved", why: "not zero" });
        }
        let lsn = Lsn(r.u64("outcome lsn")?);
        let n = r.count32(COMMIT_OBJECTS_MAX, 4, "created orefs")?;
        let mut created = Vec::with_capacity(n);
        for _ in 0..n {
            created.push(r.oref("created orefs")?);
        }
        let plain = lsn == Lsn(0) && created.is_empty();
        let outcome = match code {
            0 if plain => None,
            1 => Some(Outcome::Committed { lsn, created }),
            2 if plain => Some(Outcome::NotCommitted),
            3 if plain => Some(Outcome::Unknown),
            0 | 2 | 3 => {
                return Err(WireError::BadValue { what: "outcome", why: "fields of a commit" });
            }
            _ => return Err(WireError::BadValue { what: "outcome", why: "unknown" }),
        };
        Ok(Resumed { cache, outcome })
    }
}
