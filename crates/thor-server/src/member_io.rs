//! A replica group member's disk: opening a `thor_replica::Member` from a database's disk and
//! performing the disk effects it asks for. The one copy of this, used by the threaded
//! [`crate::group::GroupEngine`], by `thor-replica`'s deterministic test harness
//! (`tests/group/mod.rs`) and by `thor-sim`'s replicated worlds (`src/replicas.rs`).
//!
//! # One disk, two halves
//!
//! A replica keeps everything on its database's disk: the page file, the double-write buffer
//! and the superblock (the database, as a single server keeps them), and the group's Raft
//! journal as thor log segments named `raft.*` ([`thor_replica::JOURNAL_PREFIX`]) beside them.
//! A replicated server writes no `log.*` of its own: its log is the journal (the core's
//! appends become Raft proposals). So:
//!
//! - an install round is performed exactly as a single server's ([`DiskSide::install`]);
//! - a checkpoint writes the superblock only: the truncation it allows is a compaction of the
//!   journal, which the member does itself when told the checkpoint is written;
//! - a backup asked for over the protocol is refused (a replica's backup would need the
//!   journal's records after the checkpoint: not built);
//! - a new leader's tail page is read as any page ([`read_tail`]);
//! - a database image copied from another replica replaces the page file, double-write buffer
//!   and superblock, and the disk side is reopened over it ([`install_image`]).
//!
//! Every function here does I/O: a threaded driver calls them without its lock.

use std::sync::Arc;

use bytes::Bytes;
use thor_core::PageId;
use thor_replica::{
    LogError, Member, MemberConfig, RaftLog, Replica, ReplicaConfig, ReplicaError, journal_options,
};
use thor_server_core::superblock::Superblock;
use thor_server_core::{Core, CoreConfig, Effect, EngineError, Input, ReadError};
use thor_storage::{Disk, Log};

use crate::io::{self, DiskSide};

/// Why a member could not be opened from its disk. Each variant says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenMemberError {
    /// The database (superblock, page file, double-write buffer) could not be opened or the
    /// core refused it: repair the disk or replace the replica.
    #[error("database: {0}")]
    Database(#[from] EngineError),
    /// The Raft journal could not be opened (an I/O error, or records that make no sense as
    /// Raft state): repair the disk, or replace the replica.
    #[error("journal: {0}")]
    Journal(#[from] LogError),
    /// raft-rs refused the recovered state: replace the replica.
    #[error("replica: {0}")]
    Replica(#[from] ReplicaError),
}

/// A member opened from its disk, with the two handles its driver performs I/O through.
#[derive(Debug)]
pub struct OpenedMember {
    /// The member, in its Following phase.
    pub member: Member,
    /// The database's page file, double-write buffer and superblock.
    pub disk_side: DiskSide,
    /// The thor log under the member's journal, for a driver that fsyncs it outside its lock
    /// (`Log::flush`, then `Member::persisted` with its durable LSN).
    pub journal: Arc<Log>,
}

/// Opens replica `replica.id` from `disk` alone, as after a crash: the database's disk side,
/// a core over its superblock (still recovering: the member replays the journal's committed
/// records from its checkpoint on) and the journal. `founders`: the voters of a new group,
/// written as the journal's first state if it is empty (every founding replica starts from the
/// same empty database and this membership; an existing journal is opened as it is, so
/// passing them on every start is safe); `None` opens the journal as it is (a replica added
/// later starts empty and is caught up by the leader).
pub fn open_member(
    disk: Arc<dyn Disk>,
    core: CoreConfig,
    member: MemberConfig,
    replica: ReplicaConfig,
    founders: Option<&[u64]>,
) -> Result<OpenedMember, OpenMemberError> {
    let (sb, disk_side) = io::open_disk_side(disk.clone())?;
    let core = Core::new(core, sb)?;
    let log = match founders {
        Some(voters) => RaftLog::bootstrap(disk, journal_options(), voters)?,
        None => RaftLog::open(disk, journal_options())?,
    };
    let journal = log.shared_journal();
    let replica = Replica::open(replica, log)?;
    Ok(OpenedMember { member: Member::open(member, core, replica), disk_side, journal })
}

/// Performs a member's core disk effect (`Out::Core`) on `side` and returns the input that
/// reports it (`None` for effects that are not disk I/O: replies, answers, peer messages).
/// A threaded driver holds [`DiskSide::hold_installs`] around an install round or checkpoint
/// and the core's report of it, so that an image copied from this replica meanwhile is at a
/// consistent point.
pub fn perform(side: &DiskSide, effect: &Effect) -> Option<Input> {
    match effect {
        Effect::Read { page } => {
            Some(Input::PageRead { page: *page, result: side.read_page(*page) })
        }
        Effect::Install(job) => Some(Input::Installed {
            job: job.id,
            result: side.install(job).map_err(|e| e.to_string()),
        }),
        // The superblock only: the journal's compaction is the member's.
        Effect::Checkpoint(job) => Some(Input::Checkpointed {
            job: job.id,
            result: io::write_superblock(&*side.disk, &job.superblock).map_err(|e| e.to_string()),
        }),
        Effect::Backup { conn, id, .. } => Some(Input::BackedUp {
            conn: *conn,
            id: *id,
            result: Err("a replica of a group takes no backups over the protocol".to_string()),
        }),
        Effect::Append { .. }
        | Effect::Reply { .. }
        | Effect::Done { .. }
        | Effect::Peer { .. } => None,
    }
}

/// Reads the installed image of a new leader's tail page (`Out::ReadTail`), for
/// `Member::tail_read`.
pub fn read_tail(side: &DiskSide, page: PageId) -> Result<Bytes, ReadError> {
    side.read_page(page)
}

/// Installs a database image on `disk` (`Out::FetchImage`): `copy` puts one there (from
/// another replica: `DiskSide::image_into` in one process, `ReplicaNet::fetch_image` over a
/// network), then the disk side is reopened over it. Returns the image's superblock (for
/// `Member::image_installed`) and the new disk side, which replaces the old one. The member
/// asks only while nothing of its database is in use (no install round in flight), so the
/// copy overwrites nothing a round is writing.
pub fn install_image<E: std::fmt::Display>(
    disk: Arc<dyn Disk>,
    copy: impl FnOnce(&dyn Disk) -> Result<Superblock, E>,
) -> Result<(Superblock, DiskSide), String> {
    copy(&*disk).map_err(|e| e.to_string())?;
    io::open_disk_side(disk).map_err(|e| format!("reopening the database over the image: {e}"))
}
