//! [`Member`]: a thor server as one replica of its replica group, sans-I/O. It owns the
//! server's [`Core`] and its [`Replica`] and joins them as the crate docs' "How the engine is
//! meant to sit on it" proposes; a driver (the deterministic tests here, the simulation, later
//! the threaded engine) feeds it inputs and performs what it asks.
//!
//! # Why here
//!
//! The member needs the core (thor-server-core) and the replica (this crate), and nothing of
//! thor-server's threads, files or log: so it lives beside the replica, and this crate depends
//! on thor-server-core (a sans-I/O crate too). The driver opens both halves from one disk
//! (`thor_server::io::open_disk_side` for the database without a log of its own,
//! [`crate::RaftLog`] for the journal) and hands them to [`Member::open`].
//!
//! # Phases
//!
//! ```text
//!            open ──► Following ── role Leader ──► Promoting ── term applied, queue empty,
//!               ▲  (core recovering: replays       │  ▲             no round ──► ReadingTail
//!               │   committed records, installs)   │  └─ lost leadership ◄──┘        │
//!               │                                  └──────── lost leadership ◄─ tail read
//!   driver reopens from disk                                                         ▼
//!               └──────────── Stopped ◄── deposed, proposal lost ─────────────── Serving
//!                              (Out::Restart)                          (core takes commits)
//! ```
//!
//! - *Following:* the core is in recovery and stays there (while it waits for a database
//!   image, see "Snapshots", it does not even replay): each committed entry `lsn ‖ record`
//!   is fed to [`Core::replay`] in index order (records below the core's checkpoint skipped:
//!   its pages hold them), and when the MOB is over budget an install round runs (its
//!   [`Effect::Install`] and [`Effect::Checkpoint`] go to the driver) before replay goes on,
//!   exactly as `thor_server::io::recover` does. Committed entries that arrive meanwhile wait
//!   in a queue ([`crate::limits::APPLY_QUEUE_BYTES_MAX`]; past it the member stops taking the
//!   replica's readies, so Raft holds the rest).
//! - *Promoting:* raft-rs made this replica leader. It serves only once everything committed
//!   before its term is replayed ([`crate::ReplicaStatus::term_applied`], the queue empty, no
//!   install round in flight), and after [`Core::finish_recovery`] (the tail page's image read
//!   by the driver, [`Out::ReadTail`] / [`Member::tail_read`]): CLOCC's queue is restored
//!   from the replayed records and sessions start conservatively, as after a crash.
//! - *Serving:* the core takes clients. Its [`Effect::Append`] `{ lsn, record }` becomes a
//!   proposal of `lsn ‖ record`; the core gets [`Input::Durable`] only for the longest prefix
//!   of LSNs whose proposals are acknowledged (committed in this leader's term, so on a
//!   majority's disks). Committed entries are the leader's own: nothing to replay.
//! - *Stopped:* a serving leader lost its term (a higher term, check-quorum stepping down) or
//!   a proposal of its was lost, undecided or refused. Its core holds prepared commits that
//!   will never be durable, and a core that finished recovery cannot replay again, so the
//!   member stops and asks the driver to reopen it from its disk ([`Out::Restart`]), as after
//!   a crash. *How the client learns:* its commit is never answered; the restart breaks its
//!   connection; it resumes its session on the group's leader (thor-client's reconnect) and
//!   learns there whether the commit is in the replicated log (committed by a later leader)
//!   or not, exactly as after a crash of a single server.
//!
//! A replica that is not serving turns clients away: a request on a connection it did not
//! admit is answered `Error(NotLeader)` naming the leader it knows (`ShuttingDown` to a client
//! older than protocol version 9), and the connection is closed; two-phase commit's peer
//! messages and direct operations are refused the same way ([`Out::DirectRefused`]; peers
//! resend). Every other effect (replies, page reads, install rounds, checkpoints, peer
//! messages) passes through to the driver ([`Out::Core`]).
//!
//! # Answers given alone
//!
//! A leader cut off from its group goes on believing it leads until check-quorum deposes it
//! (up to two election timeouts), and a newer leader may be elected and commit meanwhile.
//! What the old one answers through Raft is safe (a commit it proposes is never acknowledged
//! once it lost its term), but some answers log nothing: a read-only commit validated on its
//! own state, a resumed session's outcome, a read-only part's yes vote, a decision a
//! coordinator gives from its tables, a participant's acknowledgement of a decision for a part
//! it never saw, an embedded call's result. Given by a deposed leader, each may rest on a state
//! a newer leader has moved past (an audit that misses a transfer the new leader committed at
//! another server; a presumed abort of a transaction the new leader has a commit record for;
//! a coordinator that forgets a transaction because a stale participant acknowledged its
//! decision, while the participant's new leader holds the part prepared: thor-sim's seed
//! 27451 of the two-phase world with groups). So the member holds every such answer a serving core
//! gives, except those a durability report releases (their entries were acknowledged by a
//! majority in this leader's term just then), and asks the group to confirm it still leads
//! ([`Replica::confirm_leadership`]: raft-rs's read index in its safe mode, a heartbeat round
//! a majority answers, asked after the answers were produced). Confirmed, they go out; a
//! member that stops drops them, and their receivers learn the outcome on the new leader as
//! they do for a lost proposal. What follows a held answer to the same receiver is held behind
//! it, so each receiver sees its answers in order. The core runs as a replica
//! ([`Core::serve_as_replica`]): it never stamps replies *settled*, so a client never commits
//! a read-only transaction on what a replica said alone. Page fetches are not held: a stale
//! page read is caught when the transaction that read it commits. The cost is a heartbeat
//! round trip on read-only commits, shared by every answer held meanwhile.
//!
//! # Checkpoints are compaction
//!
//! A checkpoint's superblock says records below its LSN are installed. When the core reports
//! it written ([`Input::Checkpointed`]), the member compacts the journal at the last entry
//! whose record lies below it (never past what recovery from those pages needs), keeping
//! [`MemberConfig::retain_entries`] entries more so that a replica that lags by fewer catches
//! up by log. A replica further behind catches up from a snapshot (below).
//!
//! # Snapshots: the database image travels outside Raft
//!
//! The Raft snapshot a compaction keeps carries only metadata: its index, term and membership
//! (raft-rs's), and as its data 8 bytes, the least checkpoint LSN of a database image that
//! covers it ([`encode_image_id`]): the LSN after the last record compacted. The image itself
//! (superblock, page file and double-write buffer: what a crash would leave of the database,
//! what `backup` copies without the log) is far too big for Raft's messages and travels
//! through the driver:
//!
//! 1. A replica too far behind is sent the snapshot by raft-rs; its replica installs it in the
//!    journal (synced at once) and hands it out as [`crate::Restore`]. If the core has not
//!    replayed or queued every record up to the snapshot, the member drops what it queued,
//!    stops replaying, and once no install round writes its database asks the driver for an
//!    image ([`Out::FetchImage`] `{ index, lsn }`). It goes on taking the replica's readies
//!    meanwhile, queuing the committed entries after the snapshot (bounded as always: past
//!    [`APPLY_QUEUE_BYTES_MAX`] Raft holds the rest).
//! 2. The driver copies an image whose superblock's checkpoint is at least `lsn` from the
//!    leader or any replica that has one (`thor_server::io::DiskSide::image_into`, holding
//!    that replica's install rounds off, so the copy is at a consistent point), over this
//!    replica's database, reopens its disk side and reports with [`Member::image_installed`].
//! 3. The member replaces its core with one over the image, and replays the queued and later
//!    committed entries from the image's checkpoint on (records below it are skipped: the
//!    pages hold them), exactly as recovery does. A failed fetch (no replica reachable, an
//!    image too old) is asked again after [`IMAGE_RETRY_TICKS`], at most
//!    [`IMAGE_FETCHES_MAX`] times, then [`MemberError::ImageUnavailable`] (replace it).
//!
//! *Invariant (image):* an image is taken at a checkpoint the snapshot's index covers: its
//! checkpoint LSN is past every record at or below the snapshot's index, so every record the
//! image lacks is in the journal after the snapshot. Any checkpoint at or above `lsn` will do:
//! the records between `lsn` and it are committed (the source applied them), so they are in the
//! entries after the snapshot, and replay skips them. So the image need not come from the
//! leader that sent the snapshot, nor be taken at the snapshot's own checkpoint.
//!
//! *Invariant (leader change mid-transfer):* nothing of the transfer depends on who leads.
//! The snapshot is in this replica's journal whoever sent it; the image is named by an LSN,
//! not by a leader or a term, and any replica whose checkpoint reaches it can give it (its
//! pages hold only committed records, and Raft's committed prefix is the same on every
//! replica). A leader that changes, a source that crashes or is cut off mid-copy, make the
//! fetch fail and it is asked again; the superblock is copied last and atomically, so a copy
//! cut short leaves the old superblock, whose checkpoint is below `lsn`. A replica that
//! crashes while it waits reopens with the snapshot in its journal and a database below it:
//! [`Member::open`] sees that and asks for the image first. A member waiting for an image neither
//! replays nor serves, and its replica ticks without campaigning
//! ([`Replica::tick_without_campaign`]): it would lead a group it cannot serve, and the replica
//! that can give it an image may have to lead and commit before its checkpoint reaches `lsn`. It
//! still votes and takes entries. (Should raft-rs make it leader all the same, it stays Promoting
//! until the image is in and everything before its term replayed, so the invariant below holds.) A
//! serving leader handed a snapshot was deposed (a later leader sent it): it restarts.
//!
//! # Membership
//!
//! A serving leader proposes one change at a time ([`Member::propose_membership`]: add a
//! replica, or remove one other than itself); every replica reports each change it applies
//! ([`Out::Membership`], with the voters after it and the context the proposer attached: a
//! thor server puts an added replica's address there) and one it removes stops for good. A
//! replica added starts as the crate docs say (an empty database, the founders' membership).
//!
//! *Why a change compacts:* raft-rs refuses a snapshot whose membership lacks the replica
//! restoring it, and a leader sends the snapshot its journal keeps, taken at its last
//! compaction. A replica added after that compaction could never restore it; if the group
//! needs it for a majority (a replica is dead), nothing commits, no checkpoint compacts, and
//! the group is stuck. So once a change applies at index `c` on a journal that was compacted
//! before, the member compacts at `c` as soon as its database on disk covers every record
//! before `c` (running install rounds until a checkpoint does; never sooner, or its own
//! recovery would need records the journal lost), and tells raft-rs that snapshots it was
//! sending from before are failed, so it sends the new one. A journal never compacted needs
//! none of this: the new replica replays from the first entry.
//!
//! *Invariant:* the records replayed (or, on a leader, proposed) have dense, increasing LSNs
//! in index order: a new leader's core continues at the LSN after the last one replayed, and
//! it serves only once everything committed before its term is replayed. A gap or a repeat is
//! [`MemberError::Inconsistent`].

use std::collections::{BTreeSet, VecDeque};

use bytes::{BufMut, Bytes, BytesMut};
use raft::eraftpb::Message;
use thor_core::{Lsn, PageId};
use thor_server_core::superblock::Superblock;
use thor_server_core::{ConnId, Core, Effect, EngineError, Input, ReadError, Ticket};
use thor_wire::{ErrorCode, Reply, ReplyBody, RequestBody, version::VERSION_GROUPS};

use crate::error::{ProposeError, ReplicaError};
use crate::limits::{
    APPLY_QUEUE_BYTES_MAX, CHECKPOINTS_IN_FLIGHT_MAX, HELD_ANSWERS_MAX, IMAGE_FETCHES_MAX,
    IMAGE_RETRY_TICKS, MEMBER_PUMP_ROUNDS_MAX, MEMBERSHIP_CONTEXT_BYTES_MAX, RECORD_INDEXES_MAX,
    RETAINED_ENTRIES_DEFAULT,
};
use crate::replica::{Apply, Effects, Proposal, Replica, ReplicaStatus, Role};

/// How a member runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberConfig {
    /// Entries kept in the journal below what checkpoints allow compacting, so that a replica
    /// that lags by fewer catches up by log rather than needing a snapshot.
    pub retain_entries: u64,
    /// A deliberately broken variant, for tests that prove the checks can fail. `None` in
    /// anything real.
    pub mutant: Option<MemberMutant>,
}

impl Default for MemberConfig {
    fn default() -> Self {
        MemberConfig { retain_entries: RETAINED_ENTRIES_DEFAULT, mutant: None }
    }
}

/// Deliberately broken members: the harnesses' checks must catch each (`tests/member.rs`,
/// thor-sim's `tests/groups.rs`), which shows they can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberMutant {
    /// A leader that loses its term reports its pending proposals durable before it stops, so
    /// its core acknowledges commits no majority may hold.
    AcknowledgeWhenDeposed,
}

/// Where the member is (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Replays what the group commits; turns clients away.
    Following,
    /// Leads `term`, waits for everything before its term to be replayed.
    Promoting {
        /// The term it leads.
        term: u64,
    },
    /// Leads `term`, waits for the driver's read of the tail page.
    ReadingTail {
        /// The term it leads.
        term: u64,
        /// The page asked for.
        page: PageId,
    },
    /// Leads `term` and serves clients.
    Serving {
        /// The term it leads.
        term: u64,
    },
    /// Waits for the driver to reopen it from its disk.
    Stopped,
}

/// Why a member stopped and must be reopened from its disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// It served as leader of `term` and no longer leads it.
    Deposed {
        /// The term it served.
        term: u64,
    },
    /// It held more answers waiting for a leadership confirmation than
    /// [`HELD_ANSWERS_MAX`] (the group does not answer it).
    Unconfirmed,
    /// A proposal of its was lost or undecided: its commit (and every later one) will never be
    /// acknowledged here.
    ProposalLost(Proposal),
    /// The replica refused a proposal (busy, or no longer leader).
    ProposeRefused(ProposeError),
}

/// What the driver must do.
#[derive(Debug)]
pub enum Out {
    /// A core effect: a reply, a page read, an install round, a checkpoint (written to the
    /// superblock; the journal's truncation is the member's), a peer message, a backup.
    Core(Effect),
    /// A Raft message to replica `msg.to` of the group; losing it is safe.
    Send(Message),
    /// Read the installed image of the tail page and report it with [`Member::tail_read`].
    ReadTail {
        /// The page.
        page: PageId,
    },
    /// A direct operation refused: this replica does not serve.
    DirectRefused {
        /// The operation's ticket.
        ticket: Ticket,
        /// The leader this replica knows, if any.
        leader: Option<u64>,
    },
    /// The member stopped: drop it, close every connection it admitted, and reopen it from
    /// its disk (core and journal) as after a crash.
    Restart(Restart),
    /// This replica lags behind what the group's journals keep: copy a database image whose
    /// superblock's checkpoint is at least `lsn` from the leader or any replica that has one
    /// (its page file, double-write buffer and superblock, at a point no install round is
    /// writing: `thor_server::io::DiskSide::image_into`) over this replica's database (its
    /// journal stays), reopen the disk side, and report with [`Member::image_installed`].
    /// Nothing of this replica's database is in use meanwhile (no install round runs).
    FetchImage {
        /// The Raft snapshot's index (what the image must cover).
        index: u64,
        /// The least checkpoint LSN an image may have.
        lsn: Lsn,
    },
    /// A membership change committed and applied at `index` (see "Membership"): the group's
    /// voters are now `voters`. The driver updates its links (`context` is what the proposer
    /// attached: a thor server puts an added replica's address there), and a member no longer
    /// among the voters is stopped by its driver for good ([`Member::is_voter`]).
    Membership {
        /// The Raft index of the change.
        index: u64,
        /// The voters now.
        voters: Vec<u64>,
        /// The change's context bytes.
        context: Bytes,
        /// This replica was a voter before the change and is not after: it was removed from
        /// the group, and its driver stops it for good. (A replica that joins replays the
        /// changes before its own addition as a non-voter: those do not remove it.)
        removed: bool,
    },
}

/// A change of the group's membership, one replica at a time ([`Member::propose_membership`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    /// Adds replica `id` as a voter; `context` travels with the change to every replica
    /// (a thor server puts the new replica's address there).
    Add {
        /// The new replica's id (not 0, not a voter already).
        id: u64,
        /// Bytes for the drivers (at most [`MEMBERSHIP_CONTEXT_BYTES_MAX`]).
        context: Bytes,
    },
    /// Removes replica `id` (a voter other than the leader proposing it).
    Remove {
        /// The replica's id.
        id: u64,
    },
}

/// A failure that stops the member: the driver stops it, and reopens it from its disk
/// unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemberError {
    /// The replica's journal failed: reopen from the disk.
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The core refused a replayed record or could not finish recovery (a damaged page, a
    /// record it cannot read): the database needs repair; do not restart this replica, replace
    /// it.
    #[error("core: {0}")]
    Core(#[from] EngineError),
    /// Committed records do not continue the core's log (a gap, a repeat, a record too short
    /// to carry its LSN): no correct group produces this. Replace the replica.
    #[error("replicated log at index {index}: {why}")]
    Inconsistent {
        /// The Raft index.
        index: u64,
        /// What was wrong.
        why: String,
    },
    /// This replica needed a database image (it lags behind what the group's journals keep)
    /// and [`IMAGE_FETCHES_MAX`] fetches failed: no replica it could reach had one. Replace the
    /// replica (or reopen it once the group is reachable: it asks again).
    #[error("no database image at checkpoint {lsn} or later for snapshot {index}: {why}")]
    ImageUnavailable {
        /// The Raft snapshot's index.
        index: u64,
        /// The least checkpoint LSN the image needed.
        lsn: Lsn,
        /// The last failure.
        why: String,
    },
    /// The driver could not read the tail page a new leader needs: reopen from the disk.
    #[error("tail page {page}: {why}")]
    TailRead {
        /// The page.
        page: PageId,
        /// Why.
        why: String,
    },
}

/// A member's externally visible state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// The phase.
    pub phase: Phase,
    /// The replica's status.
    pub replica: ReplicaStatus,
    /// The LSN the next replayed or proposed record gets.
    pub next_lsn: Lsn,
    /// The last LSN reported durable to a serving core.
    pub durable: Lsn,
    /// Committed records waiting to be replayed.
    pub queued: usize,
    /// The database image the member waits for (the snapshot's index), if any.
    pub awaiting_image: Option<u64>,
}

/// The bytes of a Raft snapshot of a thor server: the least checkpoint LSN of a database
/// image that covers the snapshot's index (the page file travels outside Raft).
pub fn encode_image_id(lsn: Lsn) -> Bytes {
    Bytes::copy_from_slice(&lsn.0.to_le_bytes())
}

/// Snapshot bytes that name no database image: no correct group writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a snapshot of {len} bytes names no database image")]
pub struct NotAnImageId {
    /// The snapshot's length.
    pub len: usize,
}

/// The least checkpoint LSN a snapshot's bytes name: `Ok(None)` for an empty snapshot (the
/// founders' journal, compacted at nothing).
pub fn decode_image_id(bytes: &[u8]) -> Result<Option<Lsn>, NotAnImageId> {
    match <[u8; 8]>::try_from(bytes) {
        Ok(b) => Ok(Some(Lsn(u64::from_le_bytes(b)))),
        Err(_) if bytes.is_empty() => Ok(None),
        Err(_) => Err(NotAnImageId { len: bytes.len() }),
    }
}

/// A database image the member waits for (see "Snapshots" in the module documentation).
#[derive(Debug, Clone, Copy)]
struct ImageWait {
    /// The Raft snapshot's index.
    index: u64,
    /// The least checkpoint LSN the image may have.
    lsn: Lsn,
    /// Whether an [`Out::FetchImage`] is out with the driver.
    asked: bool,
    /// Fetches failed so far (at most [`IMAGE_FETCHES_MAX`]).
    failures: u32,
    /// Ticks before the next fetch after a failure.
    retry_in: u64,
}

/// `lsn ‖ record`, a proposal's bytes.
pub fn encode_entry(lsn: Lsn, record: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + record.len());
    b.put_u64_le(lsn.0);
    b.put_slice(record);
    b.freeze()
}

/// The LSN and record of a proposal's bytes, if it has at least an LSN.
pub fn decode_entry(bytes: &Bytes) -> Option<(Lsn, Bytes)> {
    let lsn = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    Some((Lsn(lsn), bytes.slice(8..)))
}

/// One replica of a thor server's group. See the module documentation.
#[derive(Debug)]
pub struct Member {
    cfg: MemberConfig,
    core: Core,
    replica: Replica,
    phase: Phase,
    /// The LSN the next replayed (or proposed) record must have.
    next_lsn: Lsn,
    /// Committed records not yet replayed: (index, lsn, record). At most
    /// [`APPLY_QUEUE_BYTES_MAX`] bytes, beyond which the replica's readies wait.
    queue: VecDeque<(u64, Lsn, Bytes)>,
    queue_bytes: usize,
    /// Applied records since the last compaction, (lsn, index), for compacting at a
    /// checkpoint. At most [`RECORD_INDEXES_MAX`]; the oldest are dropped beyond (compaction
    /// then stops short, never goes too far).
    indexes: VecDeque<(Lsn, u64)>,
    /// A serving leader's proposals, in LSN order: (lsn, proposal, acknowledged). Bounded by
    /// the replica's [`crate::limits::PROPOSALS_IN_FLIGHT_MAX`].
    pending: VecDeque<(Lsn, Proposal, bool)>,
    /// The last LSN reported durable to the core.
    durable: Lsn,
    /// Checkpoint jobs written by the driver and not yet reported: (job, truncate_before,
    /// the superblock's checkpoint). At most [`CHECKPOINTS_IN_FLIGHT_MAX`] (the core has one
    /// round in flight at a time).
    checkpoints: VecDeque<(u64, Option<Lsn>, Lsn)>,
    /// The checkpoint of the database's superblock on disk (the last one reported written).
    written_checkpoint: Lsn,
    /// The LSN of the last record handed committed (replayed, queued or, serving, proposed).
    last_record: Lsn,
    /// A membership change applied at this index, which the journal's snapshot must reach
    /// before a replica it added can restore from it, and the least checkpoint that covers
    /// every record before it (see "Membership").
    conf_compact: Option<(u64, Lsn)>,
    /// Answers a serving leader gave alone, held until the group confirms it still leads: (the
    /// confirmation they wait for, the effect). See "Answers given alone".
    held: VecDeque<(u64, Effect)>,
    /// The confirmation the next held answers wait for (asked once the step that produced them
    /// ends).
    confirm_next: u64,
    /// Connections admitted to the core while serving, until the driver reports them
    /// disconnected (the core bounds its sessions; a refused connection is closed by the
    /// driver, which reports it disconnected).
    admitted: BTreeSet<ConnId>,
    /// Whether an error stopped the member: later calls do nothing (the driver reopens it).
    failed: bool,
    /// The database image the member waits for: no replay, no promotion until it is in.
    image: Option<ImageWait>,
    /// Whether this replica was a voter in the membership last applied (for
    /// [`Out::Membership`]'s `removed`).
    was_voter: bool,
    /// Whether the driver fsyncs the journal itself ([`Member::defer_sync`]).
    deferred_sync: bool,
}

impl Member {
    /// A member over `core` (a new core over the database's superblock, still recovering:
    /// nothing replayed yet) and `replica` (opened over the journal on the same disk).
    /// Committed entries the replica hands again after its snapshot are replayed from the
    /// core's checkpoint on.
    ///
    /// A replica whose journal holds a snapshot that the database does not reach (it crashed
    /// while waiting for an image, or before the image was in) asks for the image first.
    pub fn open(cfg: MemberConfig, mut core: Core, replica: Replica) -> Member {
        core.serve_as_replica();
        let next_lsn = core.checkpoint();
        let image = match decode_image_id(&replica.snapshot_image()) {
            Ok(Some(lsn)) if lsn > next_lsn => Some(ImageWait {
                index: replica.status().snapshot_index,
                lsn,
                asked: false,
                failures: 0,
                retry_in: 0,
            }),
            // A snapshot the database reaches, or none. (Bytes that name no image are caught
            // by replay: the journal's next records do not continue the core's log.)
            _ => None,
        };
        let was_voter = replica.conf_state().voters.contains(&replica.status().id);
        Member {
            was_voter,
            written_checkpoint: next_lsn,
            last_record: Lsn(next_lsn.0.saturating_sub(1)),
            conf_compact: None,
            held: VecDeque::new(),
            confirm_next: 1,
            cfg,
            core,
            replica,
            phase: Phase::Following,
            next_lsn,
            queue: VecDeque::new(),
            queue_bytes: 0,
            indexes: VecDeque::new(),
            pending: VecDeque::new(),
            durable: Lsn(next_lsn.0.saturating_sub(1)),
            checkpoints: VecDeque::new(),
            admitted: BTreeSet::new(),
            failed: false,
            image,
            deferred_sync: false,
        }
    }

    /// Leaves the journal's fsync to the driver from now on: the member journals Raft's
    /// readies (buffered) and hands out only what needs no durability; the driver, outside its
    /// lock, flushes the journal ([`crate::RaftLog::shared_journal`], whose thor log shares
    /// one fsync among concurrent appenders) whenever [`Member::needs_sync`] says so, and
    /// reports it with [`Member::persisted`], which hands out the messages that were waiting
    /// for it (append responses, votes) and what the persistence allows (a leader's own
    /// durability counts towards its commit index only then). Without this every call syncs
    /// before it returns ([`Replica::advance`]), as the deterministic harnesses want.
    ///
    /// Two rare events still sync on the caller's thread: installing a leader's snapshot
    /// (raft-rs counts it applied only once persisted) and compacting the journal at a
    /// checkpoint (its BASE record is synced before the segments below it go).
    pub fn defer_sync(&mut self) {
        self.deferred_sync = true;
    }

    /// Whether journalled Raft state waits for the driver's fsync ([`Member::defer_sync`]).
    pub fn needs_sync(&self) -> bool {
        !self.halted() && self.replica.needs_sync()
    }

    /// The driver's report that the journal is durable up to `durable` (its `durable_lsn`
    /// after a flush that returned): see [`Member::defer_sync`].
    pub fn persisted(
        &mut self,
        now_us: u64,
        durable: Lsn,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        let fx = self.replica.persisted(durable).inspect_err(|_| self.failed = true)?;
        self.handle(fx, out)?;
        self.pump(now_us, out)
    }

    /// The core (for statistics and checks).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The core, mutably (tests compose pages through its store).
    pub fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    /// The replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The member's status.
    pub fn status(&self) -> MemberStatus {
        MemberStatus {
            phase: self.phase,
            replica: self.replica.status(),
            next_lsn: self.next_lsn,
            durable: self.durable,
            queued: self.queue.len(),
            awaiting_image: self.image.map(|w| w.index),
        }
    }

    /// Whether the member serves clients.
    pub fn is_serving(&self) -> bool {
        matches!(self.phase, Phase::Serving { .. })
    }

    /// The connections the core admitted (the driver closes them on a restart).
    pub fn admitted(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.admitted.iter().copied()
    }

    /// Handles one core input (a client's, or the report of a disk effect).
    pub fn step(
        &mut self,
        now_us: u64,
        input: Input,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        let serving = self.is_serving();
        match input {
            Input::Connect { conn } if serving => {
                self.admitted.insert(conn);
                self.core_step(now_us, Input::Connect { conn }, out)?;
            }
            Input::Connect { .. } => {}
            // A connection opened before this replica served: admitted now.
            Input::Request { conn, id, req } if serving && !self.admitted.contains(&conn) => {
                self.admitted.insert(conn);
                self.core_step(now_us, Input::Connect { conn }, out)?;
                self.core_step(now_us, Input::Request { conn, id, req }, out)?;
            }
            Input::Request { conn, id, req } if !self.admitted.contains(&conn) => {
                let version = match &req.body {
                    RequestBody::Hello(h) => h.max_version,
                    _ => 1,
                };
                out.push(Out::Core(self.not_leader_reply(conn, id, version)));
            }
            Input::ProtocolError { conn, .. } | Input::Disconnect { conn }
                if !self.admitted.contains(&conn) => {}
            Input::Disconnect { conn } => {
                self.admitted.remove(&conn);
                self.core_step(now_us, Input::Disconnect { conn }, out)?;
            }
            Input::Direct { ticket, .. } if !serving => {
                out.push(Out::DirectRefused { ticket, leader: self.replica.status().leader });
            }
            // Peers resend: a replica that does not serve drops their messages, and time
            // passes for a core only while it serves (a recovering core has no timers).
            Input::Peer { .. } | Input::Tick if !serving => {}
            Input::Checkpointed { job, result } => {
                let ok = result.is_ok();
                self.core_step(now_us, Input::Checkpointed { job, result }, out)?;
                self.checkpointed(job, ok, out)?;
            }
            other => self.core_step(now_us, other, out)?,
        }
        self.pump(now_us, out)
    }

    /// Proposes a change of the group's membership. Only a serving leader proposes, one
    /// change at a time (the previous one applied), and never its own removal (raft-rs's
    /// removal of a leader is untested there: move the leadership first, then remove the old
    /// leader from the new one). The change is committed like a record; every replica reports
    /// it applied with [`Out::Membership`]. A replica added catches up by log, or from a
    /// snapshot and a database image if the leader's journal was compacted past what it holds.
    /// The replica's messages go out with the member's next step or tick.
    pub fn propose_membership(
        &mut self,
        change: MembershipChange,
    ) -> Result<Proposal, ProposeError> {
        use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2};
        let s = self.replica.status();
        if self.halted() || !self.is_serving() {
            return Err(ProposeError::NotLeader { leader: s.leader.filter(|l| *l != s.id) });
        }
        let voters = self.voters();
        let (kind, id, context) = match change {
            MembershipChange::Add { id, context } => {
                if id == 0 || voters.contains(&id) {
                    return Err(ProposeError::Membership(format!(
                        "replica {id} cannot be added: ids start at 1 and the voters are {voters:?}"
                    )));
                }
                (ConfChangeType::AddNode, id, context)
            }
            MembershipChange::Remove { id } => {
                if id == s.id {
                    return Err(ProposeError::Membership(format!(
                        "replica {id} leads: move the leadership to another replica, then \
                         remove it from there"
                    )));
                }
                if !voters.contains(&id) {
                    return Err(ProposeError::Membership(format!(
                        "replica {id} is not a voter (the voters are {voters:?})"
                    )));
                }
                (ConfChangeType::RemoveNode, id, Bytes::new())
            }
        };
        if context.len() > MEMBERSHIP_CONTEXT_BYTES_MAX {
            return Err(ProposeError::TooLarge {
                len: context.len(),
                max: MEMBERSHIP_CONTEXT_BYTES_MAX,
            });
        }
        let mut single = ConfChangeSingle::default();
        single.set_change_type(kind);
        single.node_id = id;
        let mut cc = ConfChangeV2::default();
        cc.set_changes(vec![single].into());
        cc.context = context.to_vec().into();
        self.replica.propose_membership(cc)
    }

    /// The group's voters, as this replica has applied them.
    pub fn voters(&self) -> Vec<u64> {
        self.replica.conf_state().voters
    }

    /// Whether this replica is among the voters it has applied. A replica removed from its
    /// group is not (its driver stops it); so is one that joins until the change adding it
    /// is applied here.
    pub fn is_voter(&self) -> bool {
        self.voters().contains(&self.replica.status().id)
    }

    /// Takes a Raft message from another replica of the group. A refused one is dropped
    /// (Raft recovers from loss).
    pub fn step_peer(
        &mut self,
        now_us: u64,
        msg: Message,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        let _ = self.replica.step(msg);
        self.pump(now_us, out)
    }

    /// One tick of the group's clock (elections, heartbeats); a serving core's time passes
    /// too ([`Input::Tick`]).
    pub fn tick(&mut self, now_us: u64, out: &mut Vec<Out>) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        match &mut self.image {
            // No campaign while waiting for an image: it would lead a group it cannot serve
            // (and the replica that can give it the image may need to lead and commit to
            // reach the image's checkpoint). It still votes and takes entries.
            Some(w) => {
                if !w.asked {
                    w.retry_in = w.retry_in.saturating_sub(1);
                }
                self.replica.tick_without_campaign();
            }
            None => self.replica.tick(),
        }
        if self.is_serving() {
            self.core_step(now_us, Input::Tick, out)?;
        }
        self.pump(now_us, out)
    }

    /// The tail page's image asked for by [`Out::ReadTail`].
    pub fn tail_read(
        &mut self,
        now_us: u64,
        page: PageId,
        result: Result<Bytes, ReadError>,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        let Phase::ReadingTail { term, page: asked } = self.phase else {
            // Leadership was lost meanwhile: the read is no longer needed.
            return Ok(());
        };
        if asked != page {
            return Ok(());
        }
        let image = result.map_err(|e| {
            self.failed = true;
            MemberError::TailRead { page, why: format!("{e:?}") }
        })?;
        self.serve(term, Some(image))?;
        self.pump(now_us, out)
    }

    /// The driver's report of an [`Out::FetchImage`]: the superblock of the image now on this
    /// replica's disk (the driver reopened its disk side over it), or why none was copied. The
    /// member replaces its core with one over the image and replays the committed entries
    /// after the snapshot's index from the image's checkpoint on. A failure, or an image whose
    /// checkpoint is below what the snapshot needs, is retried after [`IMAGE_RETRY_TICKS`]
    /// ticks, at most [`IMAGE_FETCHES_MAX`] times ([`MemberError::ImageUnavailable`]).
    pub fn image_installed(
        &mut self,
        now_us: u64,
        result: Result<Superblock, String>,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        if self.halted() {
            return Ok(());
        }
        let Some(w) = self.image.as_mut().filter(|w| w.asked) else {
            // Nothing asked: a stale report.
            return Ok(());
        };
        w.asked = false;
        let why = match result {
            Ok(sb) if sb.checkpoint >= w.lsn => {
                let mut core = Core::new(self.core.config().clone(), sb)
                    .inspect_err(|_| self.failed = true)?;
                core.serve_as_replica();
                self.core = core;
                self.next_lsn = self.core.checkpoint();
                self.written_checkpoint = self.next_lsn;
                self.durable = Lsn(self.next_lsn.0.saturating_sub(1));
                // The old core's checkpoints are no longer this database's.
                self.checkpoints.clear();
                self.image = None;
                return self.pump(now_us, out);
            }
            Ok(sb) => format!("an image at checkpoint {}", sb.checkpoint),
            Err(why) => why,
        };
        w.failures += 1;
        if w.failures >= IMAGE_FETCHES_MAX {
            let (index, lsn) = (w.index, w.lsn);
            self.failed = true;
            return Err(MemberError::ImageUnavailable { index, lsn, why });
        }
        w.retry_in = IMAGE_RETRY_TICKS;
        Ok(())
    }

    /// Tells the replica how sending a snapshot to replica `to` went: a transport that lost
    /// the message reports [`raft::SnapshotStatus::Failure`], so the leader does not wait for
    /// it for ever.
    pub fn report_snapshot(&mut self, to: u64, status: raft::SnapshotStatus) {
        if !self.halted() {
            self.replica.report_snapshot(to, status);
        }
    }

    fn halted(&self) -> bool {
        self.failed || self.phase == Phase::Stopped
    }

    fn not_leader_reply(&self, conn: ConnId, id: u64, version: u16) -> Effect {
        let leader = self.replica.status().leader.filter(|l| *l != self.replica.status().id);
        let (code, message) = if version >= VERSION_GROUPS {
            (ErrorCode::NotLeader, thor_wire::not_leader_message(leader))
        } else {
            (ErrorCode::ShuttingDown, "this replica does not lead its group".to_string())
        };
        let reply = Reply {
            body: ReplyBody::Error { code, message },
            invalidations: Vec::new(),
            wanted: Vec::new(),
            seen: None,
        };
        Effect::Reply { conn, id, reply, close: true }
    }

    /// Steps the core and routes its effects.
    fn core_step(
        &mut self,
        now_us: u64,
        input: Input,
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        // Answers produced by a durability report are confirmed by the commit itself: the
        // entries were acknowledged by a majority in this leader's term just now.
        let confirmed = matches!(input, Input::Durable { .. });
        let mut fx = Vec::new();
        self.core.step(now_us, input, &mut fx);
        if confirmed || !self.is_serving() {
            return self.route(fx, out);
        }
        let ctx = self.confirm_next;
        let mut rest = Vec::with_capacity(fx.len());
        let mut any = false;
        for e in fx {
            // What follows a held answer on the same connection (or to the same peer, or any
            // embedded call's result) is held behind it, so that each receiver sees its
            // answers in the order the core gave them.
            if answers_alone(&e) || self.held.iter().any(|(_, h)| same_receiver(h, &e)) {
                if self.held.len() >= HELD_ANSWERS_MAX {
                    self.stop(Restart::Unconfirmed, out);
                    return Ok(());
                }
                self.held.push_back((ctx, e));
                any = true;
            } else {
                rest.push(e);
            }
        }
        self.route(rest, out)?;
        if any {
            // One confirmation for everything held in this step, asked after it was produced.
            self.replica.confirm_leadership(ctx);
            self.confirm_next += 1;
        }
        Ok(())
    }

    /// Releases the answers held for confirmations up to `ctx`.
    fn release_confirmed(&mut self, ctx: u64, out: &mut Vec<Out>) {
        while self.held.front().is_some_and(|(c, _)| *c <= ctx) {
            let (_, e) = self.held.pop_front().expect("front");
            out.push(Out::Core(e));
        }
    }

    /// Routes core effects: appends become proposals, checkpoints are noted, the rest goes to
    /// the driver.
    fn route(&mut self, fx: Vec<Effect>, out: &mut Vec<Out>) -> Result<(), MemberError> {
        for e in fx {
            match e {
                Effect::Append { lsn, record } => self.propose(lsn, &record, out)?,
                Effect::Checkpoint(job) => {
                    if self.checkpoints.len() >= CHECKPOINTS_IN_FLIGHT_MAX {
                        self.checkpoints.pop_front();
                    }
                    let at = job.superblock.checkpoint;
                    self.checkpoints.push_back((job.id, job.truncate_before, at));
                    out.push(Out::Core(Effect::Checkpoint(job)));
                }
                other => out.push(Out::Core(other)),
            }
        }
        Ok(())
    }

    fn propose(&mut self, lsn: Lsn, record: &[u8], out: &mut Vec<Out>) -> Result<(), MemberError> {
        if self.phase == Phase::Stopped {
            // A core stopped mid-step appends nothing that anyone will be told is durable.
            return Ok(());
        }
        if !self.is_serving() {
            self.failed = true;
            return Err(MemberError::Inconsistent {
                index: self.replica.status().last_index,
                why: format!("the core appended LSN {lsn} while not serving"),
            });
        }
        if lsn != self.next_lsn {
            self.failed = true;
            return Err(MemberError::Inconsistent {
                index: self.replica.status().last_index,
                why: format!("the core appended LSN {lsn}, the log continues at {}", self.next_lsn),
            });
        }
        match self.replica.propose(encode_entry(lsn, record)) {
            Ok(p) => {
                self.pending.push_back((lsn, p, false));
                self.next_lsn = lsn.next();
            }
            Err(e) => self.stop(Restart::ProposeRefused(e), out),
        }
        Ok(())
    }

    fn stop(&mut self, why: Restart, out: &mut Vec<Out>) {
        // Answers never confirmed are never given: their clients learn the outcome on the
        // group's leader, as for a commit whose proposal was lost.
        self.held.clear();
        if self.phase != Phase::Stopped {
            self.phase = Phase::Stopped;
            out.push(Out::Restart(why));
        }
    }

    /// Runs the replica's readies and everything they allow, until nothing changes (bounded).
    fn pump(&mut self, now_us: u64, out: &mut Vec<Out>) -> Result<(), MemberError> {
        for _ in 0..MEMBER_PUMP_ROUNDS_MAX {
            if self.halted() {
                return Ok(());
            }
            let fx = if self.queue_bytes <= APPLY_QUEUE_BYTES_MAX {
                let r =
                    if self.deferred_sync { self.replica.ready() } else { self.replica.advance() };
                r.inspect_err(|_| self.failed = true)?
            } else {
                Effects::default()
            };
            let mut changed = !fx.committed.is_empty() || fx.role.is_some();
            self.handle(fx, out)?;
            changed |= self.replay_queued(out)?;
            changed |= self.report_durable(now_us, out)?;
            changed |= self.promote(out)?;
            self.ask_image(out);
            if !changed && (self.deferred_sync || !self.replica.needs_sync()) {
                return Ok(());
            }
        }
        Ok(())
    }

    fn handle(&mut self, fx: Effects, out: &mut Vec<Out>) -> Result<(), MemberError> {
        out.extend(fx.messages.into_iter().map(Out::Send));
        if let Some(&ctx) = fx.confirmed.iter().max()
            && self.is_serving()
        {
            self.release_confirmed(ctx, out);
        }
        if let Some(r) = fx.restore {
            self.restored(r.index, &r.image, out)?;
        }
        for c in fx.committed {
            let bytes = match c.apply {
                Apply::Record(bytes) => bytes,
                Apply::Membership { conf, context } => {
                    let voter = conf.voters.contains(&self.replica.status().id);
                    let removed = self.was_voter && !voter;
                    self.was_voter = voter;
                    self.conf_compact = Some((c.index, self.last_record.next()));
                    self.compact_for_membership(out)?;
                    out.push(Out::Membership {
                        index: c.index,
                        voters: conf.voters,
                        context,
                        removed,
                    });
                    continue;
                }
                Apply::Noop => continue,
            };
            let Some((lsn, record)) = decode_entry(&bytes) else {
                self.failed = true;
                return Err(MemberError::Inconsistent {
                    index: c.index,
                    why: "an entry too short to carry its LSN".into(),
                });
            };
            self.last_record = lsn;
            if self.indexes.len() >= RECORD_INDEXES_MAX {
                self.indexes.pop_front();
            }
            self.indexes.push_back((lsn, c.index));
            if self.is_serving() {
                // A serving leader's committed entries are its own proposals (everything
                // before its term was replayed before it served).
                if !self.pending.iter().any(|(l, p, _)| *l == lsn && p.index == c.index) {
                    self.failed = true;
                    return Err(MemberError::Inconsistent {
                        index: c.index,
                        why: format!("committed LSN {lsn} is no proposal of the serving leader"),
                    });
                }
            } else {
                self.queue_bytes += record.len();
                self.queue.push_back((c.index, lsn, record));
            }
        }
        for a in &fx.acknowledged {
            if let Some(p) = self.pending.iter_mut().find(|(_, p, _)| p == a) {
                p.2 = true;
            }
        }
        for p in fx.lost.iter().chain(&fx.undecided) {
            if self.pending.iter().any(|(_, q, _)| q == p) {
                self.stop(Restart::ProposalLost(*p), out);
            }
        }
        let s = self.replica.status();
        match self.phase {
            Phase::Serving { term } if s.role != Role::Leader || s.term != term => {
                if self.cfg.mutant == Some(MemberMutant::AcknowledgeWhenDeposed)
                    && let Some(&(lsn, _, _)) = self.pending.back()
                {
                    self.pending.clear();
                    let mut fx = Vec::new();
                    self.core.step(0, Input::Durable { lsn }, &mut fx);
                    self.route(fx, out)?;
                }
                self.stop(Restart::Deposed { term }, out)
            }
            Phase::Promoting { term } | Phase::ReadingTail { term, .. }
                if s.role != Role::Leader || s.term != term =>
            {
                self.phase = Phase::Following;
            }
            Phase::Following if s.role == Role::Leader => {
                self.phase = Phase::Promoting { term: s.term };
            }
            _ => {}
        }
        Ok(())
    }

    /// The replica installed the leader's snapshot at `index`: the entries up to it are gone
    /// from its journal. If the core has not replayed (and has queued) every record up to it,
    /// the member waits for a database image that covers it (see "Snapshots").
    fn restored(
        &mut self,
        index: u64,
        bytes: &[u8],
        out: &mut Vec<Out>,
    ) -> Result<(), MemberError> {
        let need = decode_image_id(bytes).map_err(|e| {
            self.failed = true;
            MemberError::Inconsistent { index, why: e.to_string() }
        })?;
        if let Phase::Serving { term } = self.phase {
            // A snapshot comes from a later leader: this one is deposed. Its restart reopens
            // the database and asks for the image if it needs one.
            self.stop(Restart::Deposed { term }, out);
            return Ok(());
        }
        let Some(lsn) = need else { return Ok(()) };
        let reach = self.queue.back().map_or(self.next_lsn, |(_, l, _)| l.next());
        if reach >= lsn && self.image.is_none() {
            // Everything the snapshot covers is replayed or queued: go on by log.
            return Ok(());
        }
        // What the old core replayed or queued is superseded by the image.
        self.queue.clear();
        self.queue_bytes = 0;
        self.indexes.clear();
        let failures = self.image.map_or(0, |w| w.failures);
        let asked = self.image.is_some_and(|w| w.asked);
        self.image = Some(ImageWait { index, lsn, asked, failures, retry_in: 0 });
        Ok(())
    }

    /// Asks the driver for the awaited image, once no install round writes the database.
    fn ask_image(&mut self, out: &mut Vec<Out>) {
        let Some(w) = &mut self.image else { return };
        if w.asked || w.retry_in > 0 || self.core.round_in_flight() {
            return;
        }
        w.asked = true;
        out.push(Out::FetchImage { index: w.index, lsn: w.lsn });
    }

    /// Replays queued records while no install round runs, starting one when the MOB is over
    /// budget (as recovery does). Returns whether anything was replayed.
    fn replay_queued(&mut self, out: &mut Vec<Out>) -> Result<bool, MemberError> {
        if self.image.is_some() {
            // The core is to be replaced by the image's: nothing to replay into it.
            return Ok(false);
        }
        let mut any = false;
        while !self.core.round_in_flight() {
            let Some((index, lsn, record)) = self.queue.pop_front() else { break };
            self.queue_bytes -= record.len();
            any = true;
            if lsn < self.next_lsn {
                // Below the checkpoint: the pages hold it. (A repeat above it is caught by
                // the core's own LSN order.)
                continue;
            }
            if lsn != self.next_lsn {
                self.failed = true;
                return Err(MemberError::Inconsistent {
                    index,
                    why: format!("LSN {lsn} where the log continues at {}", self.next_lsn),
                });
            }
            self.core.replay(lsn, record).inspect_err(|_| self.failed = true)?;
            self.next_lsn = lsn.next();
            if self.core.mob_over_budget() {
                let mut fx = Vec::new();
                self.core.start_round(&mut fx);
                self.route(fx, out)?;
            }
        }
        Ok(any)
    }

    /// Reports the acknowledged prefix of a serving leader's proposals durable.
    fn report_durable(&mut self, now_us: u64, out: &mut Vec<Out>) -> Result<bool, MemberError> {
        let mut to = None;
        while let Some(&(lsn, _, true)) = self.pending.front() {
            self.pending.pop_front();
            to = Some(lsn);
        }
        let Some(lsn) = to else { return Ok(false) };
        self.durable = lsn;
        self.core_step(now_us, Input::Durable { lsn }, out)?;
        Ok(true)
    }

    /// A promoting leader that has replayed everything before its term finishes recovery.
    fn promote(&mut self, out: &mut Vec<Out>) -> Result<bool, MemberError> {
        let Phase::Promoting { term } = self.phase else { return Ok(false) };
        let s = self.replica.status();
        if !s.term_applied
            || !self.queue.is_empty()
            || self.core.round_in_flight()
            || self.image.is_some()
        {
            return Ok(false);
        }
        debug_assert_eq!(s.term, term);
        let (page, fresh) = self.core.tail_page();
        if fresh {
            self.serve(term, None)?;
        } else {
            self.phase = Phase::ReadingTail { term, page };
            out.push(Out::ReadTail { page });
        }
        Ok(true)
    }

    fn serve(&mut self, term: u64, image: Option<Bytes>) -> Result<(), MemberError> {
        self.core.finish_recovery(self.next_lsn, image).inspect_err(|_| self.failed = true)?;
        self.durable = Lsn(self.next_lsn.0.saturating_sub(1));
        self.phase = Phase::Serving { term };
        Ok(())
    }

    /// A checkpoint is written: compacts the journal below it, keeping the retained entries.
    fn checkpointed(&mut self, job: u64, ok: bool, out: &mut Vec<Out>) -> Result<(), MemberError> {
        let Some(at) = self.checkpoints.iter().position(|(j, _, _)| *j == job) else {
            return Ok(());
        };
        let (_, truncate, checkpoint) = self.checkpoints.remove(at).expect("found");
        if ok {
            self.written_checkpoint = self.written_checkpoint.max(checkpoint);
        }
        let (true, Some(before)) = (ok, truncate) else { return Ok(()) };
        let applied = self.replica.status().applied;
        let cap = applied.saturating_sub(self.cfg.retain_entries);
        let mut at = None;
        while let Some(&(lsn, i)) = self.indexes.front() {
            if lsn >= before || i > cap {
                break;
            }
            self.indexes.pop_front();
            at = Some((i, lsn));
        }
        if let Some((index, lsn)) = at {
            // The snapshot names the least image that covers it: one whose checkpoint is past
            // the last record compacted (this checkpoint's superblock is one).
            match self.replica.compact_to(index, encode_image_id(lsn.next())) {
                // A membership change after `index`: compacted at the change below, or by a
                // later checkpoint.
                Ok(()) | Err(ReplicaError::Log(crate::LogError::Invalid(_))) => {}
                Err(e) => {
                    self.failed = true;
                    return Err(e.into());
                }
            }
        }
        self.compact_for_membership(out)
    }

    /// Compacts the journal at the last membership change applied, once this replica's
    /// database on disk covers every record before it, if the journal was compacted before
    /// (see "Membership"). A leader then sends replicas the change added a snapshot they can
    /// restore (raft-rs refuses one whose membership lacks the replica), instead of the one it
    /// kept from before the change; peers it was sending the old one are told it failed, so
    /// it sends the new one.
    fn compact_for_membership(&mut self, out: &mut Vec<Out>) -> Result<(), MemberError> {
        let Some((index, need)) = self.conf_compact else { return Ok(()) };
        let snapshot = self.replica.status().snapshot_index;
        if snapshot >= index {
            self.conf_compact = None;
            self.replica.resend_stale_snapshots();
            return Ok(());
        }
        if snapshot == 0 {
            // Never compacted: a new replica gets every entry from the first, membership
            // changes included, and rebuilds the membership from its founders' as it applies.
            self.conf_compact = None;
            return Ok(());
        }
        if self.replica.status().applied < index {
            return Ok(());
        }
        if self.written_checkpoint < need {
            // Compacting now would make this replica's own recovery need a record the journal
            // no longer holds: install until a checkpoint covers them. (The group may commit
            // nothing meanwhile: a replica just added may be needed for a majority, and it
            // cannot catch up before this compaction.)
            if !self.core.round_in_flight() && self.image.is_none() {
                let mut fx = Vec::new();
                self.core.start_round(&mut fx);
                self.route(fx, out)?;
            }
            return Ok(());
        }
        match self.replica.compact_to(index, encode_image_id(need)) {
            Ok(()) => {
                self.conf_compact = None;
                self.replica.resend_stale_snapshots();
                Ok(())
            }
            // A later membership change was applied meanwhile: it set its own target.
            Err(ReplicaError::Log(crate::LogError::Invalid(_))) => Ok(()),
            Err(e) => {
                self.failed = true;
                Err(e.into())
            }
        }
    }
}

/// Whether a core effect answers a client or a peer with something a deposed leader could get
/// wrong when it answers alone (see "Answers given alone"): a commit or a two-phase part
/// accepted, a resumed session's outcome, a vote, a decision or its acknowledgement, an
/// embedded call's result.
fn answers_alone(e: &Effect) -> bool {
    use thor_wire::PeerMsg;
    match e {
        Effect::Reply { reply, .. } => matches!(
            reply.body,
            ReplyBody::CommitOk { .. } | ReplyBody::Prepared { .. } | ReplyBody::Resumed(_)
        ),
        // Every answer to a peer: a vote, a decision, and an acknowledgement of one (a replica
        // that never saw the part acknowledges a decision as "never heard of it", and the
        // coordinator forgets the transaction: a newer leader holding the part prepared would
        // then be told to presume abort). Not the requests (`Query`, `AskVote`): a stale one
        // only makes its receiver answer again.
        Effect::Peer { msg, .. } => {
            matches!(msg, PeerMsg::Vote { .. } | PeerMsg::Decide { .. } | PeerMsg::DecideAck { .. })
        }
        Effect::Done { .. } => true,
        _ => false,
    }
}

/// Whether two effects go to the same receiver: a connection, a peer server, or the embedded
/// caller (whose results the driver hands out in order).
fn same_receiver(a: &Effect, b: &Effect) -> bool {
    match (a, b) {
        (Effect::Reply { conn: x, .. }, Effect::Reply { conn: y, .. }) => x == y,
        (Effect::Peer { to: x, .. }, Effect::Peer { to: y, .. }) => x == y,
        (Effect::Done { .. }, Effect::Done { .. }) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_carries_its_lsn_and_record_and_a_short_one_reads_as_none() {
        let e = encode_entry(Lsn(42), b"record");
        assert_eq!(decode_entry(&e), Some((Lsn(42), Bytes::from_static(b"record"))));
        assert_eq!(decode_entry(&encode_entry(Lsn(7), b"")), Some((Lsn(7), Bytes::new())));
        for short in [&b""[..], &b"1234567"[..]] {
            assert_eq!(decode_entry(&Bytes::copy_from_slice(short)), None);
        }
    }

    #[test]
    fn a_snapshot_names_an_image_by_its_least_checkpoint_and_other_bytes_name_none() {
        assert_eq!(decode_image_id(&encode_image_id(Lsn(9))), Ok(Some(Lsn(9))));
        assert_eq!(decode_image_id(b""), Ok(None), "the founders' snapshot needs no image");
        for bad in [&b"1"[..], &b"1234567"[..], &b"123456789"[..]] {
            assert_eq!(decode_image_id(bad), Err(NotAnImageId { len: bad.len() }), "{bad:?}");
        }
    }
}
