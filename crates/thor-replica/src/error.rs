//! The crate's errors, one enum per operation, each variant telling the caller what to do.

use thor_storage::StorageError;

/// Opening, writing or recovering a replica's durable Raft state ([`crate::RaftLog`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The thor log under the journal failed (an I/O error, a refused corruption, a poisoned
    /// log after a failed fsync). Stop the replica and reopen it: recovery decides what
    /// survived, and the rest of the group carries on meanwhile.
    #[error("replica journal: {0}")]
    Storage(#[from] StorageError),
    /// A journal record passed the thor log's checksum but does not make sense as Raft state
    /// (an unknown tag, a short field, entries that do not continue the log). No crash
    /// explains it: do not start this replica; replace it from a snapshot.
    #[error("replica journal record at LSN {lsn}: {why}")]
    Malformed {
        /// The thor log sequence number of the record.
        lsn: u64,
        /// Which check failed.
        why: String,
    },
    /// A request the journal refuses (compacting past the applied index, a record over the
    /// bound, a snapshot image too large). A caller's mistake: fix the call.
    #[error("replica journal: {0}")]
    Invalid(String),
}

/// Why a proposal was not accepted. None of these means the record was written anywhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// This replica is not the leader: send the proposal to `leader` if known, or retry after
    /// an election.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The replica this one believes leads its term, if any.
        leader: Option<u64>,
    },
    /// Too much is in flight (proposals or uncommitted bytes), or a leadership transfer is
    /// under way: retry after the next commit.
    #[error("busy: too many proposals in flight")]
    Busy,
    /// The record is larger than [`crate::limits::PROPOSAL_BYTES_MAX`]: split it.
    #[error("record of {len} bytes is larger than {max}")]
    TooLarge {
        /// The record's size.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A membership change while another is still pending, or one raft-rs refuses (it would
    /// leave no voter): wait for the pending change to apply, then retry, or fix the change.
    #[error("membership change refused: {0}")]
    Membership(String),
}

/// Why a message from a peer was not taken. The message is dropped; Raft recovers from lost
/// messages, so the caller only logs and counts these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The message is addressed to another replica or claims to come from replica 0, or it is a
    /// kind only a replica sends itself: a routing bug or a confused peer.
    #[error("message refused: {0}")]
    Refused(String),
    /// raft-rs refused it (for example a message from a replica not in the configuration).
    #[error("raft refused the message: {0}")]
    Raft(String),
}

/// A failure of [`crate::Replica::advance`] or of opening a replica: the durable state could
/// not be written or read. Stop this replica and reopen it from its disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The journal failed (see [`LogError`]).
    #[error(transparent)]
    Log(#[from] LogError),
    /// raft-rs refused the configuration or the recovered state (for example a hard state
    /// whose commit index is past the last entry, which a journal written by this crate never
    /// holds). Do not start this replica; replace it.
    #[error("raft: {0}")]
    Raft(String),
    /// This replica holds a committed entry that its group's leader does not: the group lost
    /// an entry this replica had applied (in `Durability::Memory`, a simultaneous power loss
    /// of a majority loses the last flush interval). Its state is not the group's and never
    /// will be again: it stops for good. Do not reopen it; replace it with a new replica that
    /// restores from another's image.
    #[error("diverged from the group: {0}")]
    Diverged(String),
}
