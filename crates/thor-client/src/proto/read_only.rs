//! Read-only transactions that commit at the client, without a message (wire version 7).
//!
//! A transaction that wrote nothing used to be sent to the server and validated like any
//! other, and under contention it was refused about as often as writers were (21% of them
//! with 8 clients on 64 counters, 86% with 16 on 4, issue 32): a reader's copy of a counter
//! was older than the server's by the time its commit arrived, although what it read was a
//! consistent state. Here it commits where it ran, when the last reply vouched for that state:
//!
//! - the transaction is not doomed: no invalidation that arrived while it ran named an object
//!   it read;
//! - the last reply's seen stamp was *complete*: every invalidation of a change up to the
//!   stamp was on that reply or an earlier one, and all were applied (any that named an object
//!   the transaction read doomed it). So every object it read is the version current in the
//!   state of the stamp: the page it came in showed a state no newer than the stamp's, and a
//!   change up to the stamp would have been announced;
//! - that stamp was *settled* ([`thor_wire::Seen::settled`]): the changes up to it are a prefix
//!   of the server's serial order and everything validated later sorts after them.
//!
//! Then the transaction is serialized right after the stamp's change: it read exactly that
//! state, and every later commit is ordered after it. It is serializable, not linearizable:
//! the state it read may be older than the server's newest by as much as the time since the
//! last reply, which [`super::SessionConfig::refresh_after`] bounds (a transaction whose first
//! access comes later than that after the last reply makes a round trip first). Its
//! [`CommitInfo::lsn`] is the stamp's LSN: the change it is serialized after.
//!
//! A cluster's parts ([`crate::Cluster`]) and the page modes (whose copies beside the cache no
//! stamp covers) still send read-only transactions to be validated, as does a session whose
//! server does not say settled (an older server, or one with peers: see thor-server-core's
//! `Core::read_only_settled`).

use super::ClientCore;
use crate::error::ClientError;
use crate::session::CommitInfo;

impl ClientCore {
    /// Notes whether a reply's stamp vouches for a read-only commit at the client (called for
    /// every reply, before anything uses it).
    pub(crate) fn note_settled(&mut self, reply: &thor_wire::Reply) {
        self.settled = reply.seen.is_some_and(|s| s.complete && s.settled);
    }

    /// Commits the open transaction here if it is read-only and the last reply vouched for
    /// the state it read (see the module documentation); `None` if it must go to the server.
    /// Called with the read-ahead settled and the transaction known not to be doomed.
    pub(crate) fn commit_read_only_locally(&mut self) -> Option<CommitInfo> {
        debug_assert!(self.doomed.is_none() && self.ahead.is_none());
        let read_only = self.cache.modified().len() == 0
            && self.cache.created().is_empty()
            && self.new_class_slots.is_empty();
        if !self.settled || !read_only || self.path.keeps_pages() || !self.cfg.read_only_at_client {
            return None;
        }
        // A complete stamp was the last: the newest stamp received is that one.
        let lsn = self.seen?.high.lsn;
        // Nothing created: the cache's commit has no orefs to check and cannot fail.
        if self.cache.commit_done(&[]).is_err() {
            return None;
        }
        self.in_transaction = false;
        self.stats.commits += 1;
        self.stats.read_only_local += 1;
        Some(CommitInfo { lsn, created: 0, modified: 0 })
    }

    /// For a driver of the object-level API ([`super::objects`]): commits the open
    /// transaction here, with no message, if it wrote nothing and the last reply vouched for
    /// the state it read (see the module documentation); `None` if it must be sent
    /// ([`ClientCore::commit`]). A doomed transaction fails with its conflict, as `commit`
    /// would.
    pub fn commit_here(&mut self) -> Result<Option<CommitInfo>, ClientError> {
        self.idle()?;
        if !self.in_transaction || self.pages.is_some() || self.voted.is_some() {
            return Ok(None);
        }
        if let Err(e) = self.check_doomed() {
            self.end_aborted();
            return Err(e);
        }
        Ok(self.commit_read_only_locally())
    }
}
