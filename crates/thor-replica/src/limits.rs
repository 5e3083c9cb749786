//! Every bound of the replica group, with its reason.
//!
//! Raft itself keeps little state, but each of its queues grows with what peers send and what
//! clients propose; these constants put a ceiling on each, and the assertions at the bottom
//! check the relations between them at compile time.

/// The most replicas a group may have. Raft's quorum grows with the group and every proposal
/// is sent to every member; seven tolerates three failures, more than thor's deployments need,
/// and keeps a leader's per-ready fan-out small.
pub const REPLICAS_MAX: usize = 7;

/// Proposals a leader keeps in flight (proposed, not yet committed or lost). Each holds an
/// index and a term here and its bytes in raft-rs's unstable log; past the bound `propose`
/// answers [`crate::ProposeError::Busy`] and the caller retries after the next commit.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 4096;

/// The largest record a proposal may carry. A thor commit record can be large (a commit of
/// 99,000 objects is about 6.7 MB), so this is generous, but it must fit a journal record
/// (see [`JOURNAL_RECORD_BYTES_MAX`]) together with its entry header.
pub const PROPOSAL_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Most context bytes a membership change carries (a thor server puts the added replica's
/// address there: a few dozen bytes). Every replica keeps none of it beyond handing it to its
/// driver, but it rides in a journal entry and in Raft messages, so it is kept small.
pub const MEMBERSHIP_CONTEXT_BYTES_MAX: usize = 1024;

/// Bytes of entries raft-rs puts into one append message (`max_size_per_msg`). An append
/// always carries at least one entry, so a single large proposal still goes through.
pub const APPEND_MESSAGE_BYTES_MAX: u64 = 1024 * 1024;

/// Append messages a leader keeps in flight to one follower (`max_inflight_msgs`): with
/// [`APPEND_MESSAGE_BYTES_MAX`], what bounds the bytes on the way to a slow follower.
pub const APPENDS_IN_FLIGHT_PER_PEER_MAX: usize = 64;

/// Bytes of proposed-but-uncommitted entries a leader accepts (`max_uncommitted_size`); beyond
/// it raft-rs drops proposals and `propose` answers [`crate::ProposeError::Busy`].
pub const UNCOMMITTED_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Bytes of committed entries handed to the application in one ready
/// (`max_committed_size_per_ready`); the rest come with the next one.
pub const COMMITTED_BYTES_PER_READY_MAX: u64 = 16 * 1024 * 1024;

/// Messages one [`crate::Replica::advance`] hands out. Raft tolerates the loss of any message
/// (it retries appends, heartbeats and votes), so the excess is dropped and counted, never
/// queued without bound. A leader's ready sends a few messages per follower (appends up to the
/// in-flight window, a heartbeat, a snapshot); the bound leaves room for that to every member.
pub const MESSAGES_PER_ADVANCE_MAX: usize = REPLICAS_MAX * (APPENDS_IN_FLIGHT_PER_PEER_MAX + 8);

/// Readies one [`crate::Replica::advance`] handles. raft-rs makes a new ready only after new
/// input or a persisted one (typically two rounds: the entries, then the commit they allow);
/// the bound keeps one call finite whatever happens, and the rest waits for the next call
/// (`has_ready` stays true).
pub const ADVANCE_ROUNDS_MAX: usize = 8;

/// Readies journalled by [`crate::Replica::ready`] and not yet synced by
/// [`crate::Replica::persist`]: past it `ready` takes no more until a persist, so a driver
/// that defers its fsync cannot pile up unbounded held messages.
pub const UNSYNCED_READIES_MAX: usize = 64;

/// Raft entries one journal record holds. A ready's entries go to the journal in records of at
/// most this many (and at most [`JOURNAL_RECORD_BYTES_MAX`] bytes), all in one flush batch: a
/// torn tail then cuts whole records, so recovery keeps a prefix of the entries, never half of
/// one.
pub const JOURNAL_ENTRIES_PER_RECORD_MAX: usize = 256;

/// The largest journal record: the thor log's own record bound. A compaction's base record
/// holds the snapshot image and every entry kept, so compaction refuses (rather than writes a
/// record recovery would reject) when they would not fit.
pub const JOURNAL_RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The largest snapshot image (the application's state at the snapshot index) the journal
/// keeps. A thor server's snapshot is 8 bytes (the least checkpoint LSN of a database
/// image, `member::encode_image_id`): its page file travels outside Raft's messages. The bound
/// is for other applications of the replica (`sim::Cluster`'s).
pub const SNAPSHOT_BYTES_MAX: usize = 32 * 1024 * 1024;

/// Ticks without a leader's heartbeat before a follower campaigns (raft-rs's `election_tick`);
/// the randomized timeout is drawn, from the replica's seed, in `[ELECTION_TICKS,
/// 2 * ELECTION_TICKS)`.
pub const ELECTION_TICKS: usize = 10;

/// Ticks between a leader's heartbeats (raft-rs's `heartbeat_tick`).
pub const HEARTBEAT_TICKS: usize = 2;

/// Bytes of one rendered raft-rs log line's key-value pairs, bridged to tracing: a bound on
/// what a single log call can allocate.
pub const LOG_LINE_BYTES_MAX: usize = 4096;

/// Bytes of committed records a member holds for replay while an install round runs (a
/// follower replays as recovery does: no replay during a round). Past it the member stops
/// taking its replica's readies until the round ends, so Raft keeps the rest (and the leader
/// commits with the other followers meanwhile). At least one ready's committed entries.
pub const APPLY_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Applied records a member remembers the Raft index of, to compact the journal at a
/// checkpoint: about the records between two checkpoints. Past it the oldest are forgotten,
/// and a compaction stops at the oldest one remembered (short of what it could, never past).
pub const RECORD_INDEXES_MAX: usize = 1 << 20;

/// Checkpoint jobs a member remembers between the core's `Effect::Checkpoint` and its
/// `Input::Checkpointed`. The core runs one install round at a time; a bulk load's
/// checkpoint may overlap, so a few.
pub const CHECKPOINTS_IN_FLIGHT_MAX: usize = 4;

/// Rounds one member call runs (replica readies, replay, durability reports, promotion):
/// each may allow the next (an acknowledgement lets the core append more); the rest waits for
/// the next call.
pub const MEMBER_PUMP_ROUNDS_MAX: usize = 16;

/// Answers a serving leader holds until the group confirms it still leads (see `member`'s
/// "Answers given alone"). The core bounds them already (one answer per commit, resume or
/// vote, and those are bounded by its sessions, validation queue and two-phase tables); past
/// this the member stops (`Restart`), loudly, rather than grow.
pub const HELD_ANSWERS_MAX: usize = 1 << 16;

/// Journal entries a member keeps below what its checkpoints allow compacting by default,
/// so that a replica that lags by fewer catches up by log, without copying a database image
/// (a whole page file). Ten thousand commit records are tens of megabytes at most for
/// typical commits.
pub const RETAINED_ENTRIES_DEFAULT: u64 = 10_000;

/// Fetches of a database image a lagging member asks for before it gives up
/// (`MemberError::ImageUnavailable`: replace the replica). With [`IMAGE_RETRY_TICKS`] between
/// them, about a hundred election timeouts: long enough for a partition to heal or a new
/// leader to checkpoint, short enough that an operator learns of a replica that cannot.
pub const IMAGE_FETCHES_MAX: u32 = 64;

/// Ticks a member waits after a failed image fetch before it asks again: two election
/// timeouts, time for the group to elect a leader whose image the driver can copy.
pub const IMAGE_RETRY_TICKS: u64 = 2 * ELECTION_TICKS as u64;

const _: () = assert!(APPLY_QUEUE_BYTES_MAX as u64 >= COMMITTED_BYTES_PER_READY_MAX);
const _: () = assert!(REPLICAS_MAX % 2 == 1, "an odd group tolerates the most failures");
const _: () = assert!(HEARTBEAT_TICKS < ELECTION_TICKS, "raft-rs requires it");
const _: () = assert!(PROPOSAL_BYTES_MAX + 1024 < JOURNAL_RECORD_BYTES_MAX);
const _: () = assert!(SNAPSHOT_BYTES_MAX < JOURNAL_RECORD_BYTES_MAX);
const _: () = assert!(APPEND_MESSAGE_BYTES_MAX <= UNCOMMITTED_BYTES_MAX, "raft-rs requires it");
const _: () = assert!(PROPOSAL_BYTES_MAX as u64 <= UNCOMMITTED_BYTES_MAX);
const _: () = assert!(
    JOURNAL_RECORD_BYTES_MAX <= thor_storage::limits::RECORD_BYTES_MAX_DEFAULT,
    "a journal record must fit the thor log's default record bound"
);

/// Levels of nested messages [`crate::decode_message`] walks, the outer `Message` included:
/// raft's schema nests `Message` → `Snapshot` → `SnapshotMetadata` → `ConfState` and no
/// deeper, so an honest message never exceeds it. The walk follows the schema and so could
/// not go deeper anyway; the bound is the second line of defence against
/// RUSTSEC-2024-0437 (see [`crate::codec`]).
pub const MESSAGE_NESTING_MAX: usize = 4;

// Every message raft-rs makes fits a `Raft` request: an append holds entries up to
// `APPEND_MESSAGE_BYTES_MAX` or a single entry of a proposal's size, with per-entry and
// per-message fields well below a kilobyte each. A thor server's snapshot message holds 8
// bytes of snapshot (the image travels apart); only the simulation's bigger snapshots, which
// never cross TCP, could exceed it, and `encode_message` refuses them (`TooLarge`).
const _: () = assert!(
    PROPOSAL_BYTES_MAX + APPEND_MESSAGE_BYTES_MAX as usize + 64 * 1024
        <= thor_wire::limits::RAFT_MESSAGE_BYTES_MAX
);
