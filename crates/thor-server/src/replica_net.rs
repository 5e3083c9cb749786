//! Where a replica's messages to the other replicas of its group go: the seam between the
//! group's driver (this crate's engine running a `thor_replica::Member`) and the network
//! (`thor-net`'s TCP replica links, or an in-process implementation for tests and for groups
//! run in one process).
//!
//! A Raft message travels as opaque bytes (raft-rs's protobuf encoding, made and checked by
//! `thor-replica`): the network neither reads nor depends on Raft. A database image (what a
//! replica too far behind for the leader's journal catches up from) is far too big for a Raft
//! message and is copied through [`ReplicaNet::fetch_image`].

use bytes::Bytes;
use thor_core::Lsn;
use thor_server_core::EngineError;
use thor_server_core::superblock::Superblock;
use thor_storage::Disk;

/// Where a replica's messages to the other replicas of its group go. See the module
/// documentation.
pub trait ReplicaNet: Send + Sync + std::fmt::Debug {
    /// Queues `msg` (a raft-rs message, protobuf-encoded) for replica `to`. Never blocks and
    /// never retries: a message that cannot be queued or delivered is dropped and counted,
    /// since Raft resends what matters on its own ticks. Called outside the engine's lock, so
    /// an in-process implementation may deliver straight into another engine.
    fn send(&self, to: u64, msg: Bytes);

    /// Copies, from replica `from`, a database image (superblock, page file, double-write
    /// buffer: `crate::io::DiskSide::image_into`) whose checkpoint LSN is at least `min_lsn`
    /// into `dest`, the superblock last. Blocks for as long as the copy takes; the engine
    /// calls it on a thread of its own, never under its lock. An error (replica unreachable,
    /// its image older than `min_lsn`, the copy cut short) leaves `dest` with its old
    /// superblock, and the member asks again later.
    fn fetch_image(
        &self,
        from: u64,
        min_lsn: Lsn,
        dest: &dyn Disk,
    ) -> Result<Superblock, ImageFetchError>;

    /// The group's voters changed (a change applied here, `thor_replica::Out::Membership`):
    /// `voters` are the voters now and `context` the change's bytes (an added replica's
    /// address, as `thor server` writes it; empty for a removal). A network that knows where
    /// replicas listen adds a link to a new voter and drops the link of one removed. Called
    /// under the engine's lock: it must not block. The default does nothing (an in-process
    /// hub routes by registration).
    fn membership(&self, voters: &[u64], context: &[u8]) {
        let _ = (voters, context);
    }
}

/// Why [`ReplicaNet::fetch_image`] brought no image. Every variant means the same to the
/// member: ask again later (or from another replica); only the log line differs.
#[derive(Debug, thiserror::Error)]
pub enum ImageFetchError {
    /// The replica is not known, not reachable, or the connection broke mid-copy.
    #[error("replica {replica} unreachable: {reason}")]
    Unreachable {
        /// The replica asked.
        replica: u64,
        /// What failed.
        reason: String,
    },
    /// The replica's newest checkpoint is below what was asked: it has not installed far
    /// enough yet (or it lags too).
    #[error("replica {replica}'s image is at checkpoint {have:?}, below the {want:?} asked")]
    TooOld {
        /// The replica asked.
        replica: u64,
        /// Its checkpoint LSN.
        have: Lsn,
        /// The least one asked.
        want: Lsn,
    },
    /// Reading the source or writing `dest` failed.
    #[error("copying the image: {0}")]
    Storage(#[from] EngineError),
}
