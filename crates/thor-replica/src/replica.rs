//! [`Replica`]: one member of a replica group, a synchronous state machine around raft-rs's
//! [`RawNode`], over a [`RaftLog`].
//!
//! # Driving it
//!
//! ```text
//!   driver                          Replica                          RawNode / RaftLog
//!   ──────                          ───────                          ─────────────────
//!   every tick ───► tick() ──────────────────────────────────────►  election / heartbeat clock
//!   peer message ─► step(msg) ───────────────────────────────────►  raft-rs
//!   client record ► propose(bytes) ─► Proposal { index, term } ──►  leader's log
//!   then ─────────► ready() ───────► journal entries + hard state (buffered)
//!                                    ◄── Effects { messages, restore, committed, acknowledged,
//!                                                  lost, undecided, role, needs_sync }
//!   when it may ──► persist() ─────► fsync (the injected Disk), then the held messages
//!                                    ◄── Effects (as above)
//!   (advance() = ready() + persist(): both at once)
//! ```
//!
//! No clock, no thread, no socket: time is [`Replica::tick`], the network is the messages the
//! driver carries, the disk is the [`Disk`](thor_storage::Disk) under the [`RaftLog`]. The
//! randomized election timeout comes from the replica's seed, not from raft-rs's thread-local
//! generator: after every call the replica sets it to a value drawn from `(seed, id, term)`
//! (see [`election_timeout_for`]), so a run replays exactly from its seed.
//!
//! # Durability and acknowledgement
//!
//! A proposal is *acknowledged* (in [`Effects::acknowledged`]) only when the entry at its index
//! is committed by Raft with the term it was proposed in, which means a majority of the group
//! had it durable. Entries are journalled by [`Replica::ready`] and fsynced by
//! [`Replica::persist`] before any message that reports them persisted (append responses,
//! votes) is handed out. A leader that
//! is deposed keeps its proposals pending; each is resolved when its index commits: with the
//! same term it is acknowledged, with another term (the new leader's entry replaced it) it is
//! [`Effects::lost`]. So a deposed leader never reports a proposal committed that the new term
//! did not commit; [`Replica::advance`] asserts it (the entry it acknowledges is the one
//! committed at that index, by index and term).
//!
//! # Durability settings
//!
//! [`ReplicaConfig::durability`] says when an entry counts as persisted:
//!
//! - [`Durability::Disk`] (the default): as above, after the fsync. An acknowledged commit
//!   is on a majority's disks; no crash, not even a power loss of every replica at once,
//!   loses it.
//! - [`Durability::Memory`] (Thor's setting): [`Replica::ready`] reports a ready's entries
//!   persisted as soon as they are journalled (written to the journal's buffer, not synced):
//!   the follower's append response leaves at once, the leader counts its own copy at once.
//!   The journal is fsynced *behind*: the driver calls [`Replica::flush`] (or flushes
//!   [`RaftLog::shared_journal`] itself, outside its lock) every flush interval, never on an
//!   acknowledgement's path. A ready that changes the term or the vote (hard state whose loss
//!   could let a replica vote twice in a term, and so elect two leaders: safety, not only
//!   loss) or installs a snapshot is still synced before its messages leave, as on disk.
//!
//!   What a crash loses in memory mode:
//!   * *One replica's crash loses nothing acknowledged.* An acknowledged entry is in a
//!     majority's memory; the others still hold it, elect only a replica that holds it (Raft's
//!     up-to-date check) and send it again to the restarted one. Its journal may have lost
//!     entries it had reported persisted: its leader then learns it from the append
//!     rejection (a hint below what it thought the follower matched) and sends them again
//!     ([`Replica::step`] lowers the leader's record of that follower, and clamps a
//!     heartbeat's commit index to the restarted follower's last entry, which raft-rs would
//!     otherwise treat as a corrupted log). This holds while the replicas that still hold
//!     the entries stay up and reachable until the restarted one caught up: it votes again
//!     at once, so if they crashed too before flushing, or were cut off, the rest could elect
//!     a leader without the entries, which is a majority's loss (below).
//!   * *A simultaneous power loss of a majority loses the acknowledged commits of the last
//!     flush interval* (what none of the surviving disks had synced). The group then goes on
//!     without them: a new leader may commit other entries at their indexes. A replica that
//!     had applied such an entry and kept it (it had flushed, or was down meanwhile) holds a
//!     committed entry that conflicts with the group's. raft-rs does not notice (it answers
//!     an append below its commit index with that index, which the leader takes as a match,
//!     and the replica would sit wedged); [`Replica::step`] checks every current leader's
//!     append against the committed entries and, on a conflict, stops the replica for good:
//!     one ERROR line, and every later call fails with [`ReplicaError::Diverged`]. It must be
//!     replaced by a new replica restored from another's image. (Only while its journal
//!     still holds the entry: compacted, its term is gone and no conflict shows.) Disk mode
//!     exists for data that must survive a majority's power loss.
//!
//! # Applying
//!
//! [`Effects::committed`] lists the committed entries in index order, each exactly once per
//! run of the replica: the driver applies them in that order. A restarted replica starts at its
//! snapshot index ([`Replica::snapshot_image`] is the state to start from) and is handed every
//! committed entry after it again, as thor's recovery replays its log from a checkpoint. When a
//! leader sends a snapshot, [`Effects::restore`] comes first: the driver replaces its state
//! with the image before applying what follows.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, ConfState, Entry, EntryType, Message};
use raft::{Config, RawNode, StateRole};

use thor_core::Lsn;

use crate::error::{ProposeError, ReplicaError, StepError};
use crate::limits::{
    ADVANCE_ROUNDS_MAX, APPEND_MESSAGE_BYTES_MAX, APPENDS_IN_FLIGHT_PER_PEER_MAX,
    COMMITTED_BYTES_PER_READY_MAX, ELECTION_TICKS, HEARTBEAT_TICKS, MESSAGES_PER_ADVANCE_MAX,
    PROPOSAL_BYTES_MAX, PROPOSALS_IN_FLIGHT_MAX, UNCOMMITTED_BYTES_MAX, UNSYNCED_READIES_MAX,
};
use crate::logger;
use crate::storage::RaftLog;

/// How a replica runs. `id` is its Raft id (non-zero, unique in the group); `seed` feeds its
/// election timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// This replica's id in the group.
    pub id: u64,
    /// The seed of its randomized election timeouts.
    pub seed: u64,
    /// Ticks without a leader before campaigning (the randomized timeout lies in
    /// `[election_ticks, 2 * election_ticks)`).
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// When an entry counts as persisted: fsynced ([`Durability::Disk`], the default) or
    /// journalled in memory with the fsync behind ([`Durability::Memory`]).
    pub durability: Durability,
    /// A deliberately broken variant, for tests that prove the checks can fail. `None` in
    /// anything real.
    pub mutant: Option<Mutant>,
}

/// When a replica reports its entries persisted (to raft-rs, and so to its peers: append
/// responses, and a leader counting its own copy towards the commit index). See "Durability
/// settings" in the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Once the journal's fsync covering them returned: an acknowledged commit is on a
    /// majority's disks and survives any crash, even of every replica at once.
    #[default]
    Disk,
    /// Once journalled in memory (the thor log's buffer), the fsync following behind (the
    /// driver calls [`Replica::flush`], or flushes the shared journal, every flush interval):
    /// an acknowledged commit is in a majority's memory. Votes and term changes are still
    /// synced before their messages. Thor's own setting (the paper's servers forced a commit
    /// to the backup's memory, not to a disk).
    Memory,
}

/// Deliberately broken variants of the replica: the harness's checks must catch each (see
/// `tests/mutants.rs`), which shows they can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// Hands out the messages that report entries and votes persisted (append responses,
    /// votes) before the journal is synced: a follower acknowledges what a crash can lose.
    ReportBeforeSync,
}

impl ReplicaConfig {
    /// Replica `id` with the default tick counts.
    pub fn new(id: u64, seed: u64) -> Self {
        ReplicaConfig {
            id,
            seed,
            election_ticks: ELECTION_TICKS,
            heartbeat_ticks: HEARTBEAT_TICKS,
            durability: Durability::Disk,
            mutant: None,
        }
    }
}

/// A replica's role in its term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Asks whether it could win an election before starting one (pre-vote).
    PreCandidate,
    /// Campaigns for the term.
    Candidate,
    /// Leads the term: the only role that accepts proposals.
    Leader,
}

impl From<StateRole> for Role {
    fn from(r: StateRole) -> Role {
        match r {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }
}

/// A proposal's place in the log: its index and the term it was proposed in. It is
/// acknowledged only if the entry committed at `index` has term `term`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Proposal {
    /// The log index the proposal was given.
    pub index: u64,
    /// The leader's term when it was proposed.
    pub term: u64,
}

/// What a committed entry asks the application to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Apply {
    /// Apply this record (a proposal's bytes).
    Record(Bytes),
    /// The group's membership changed to `conf` (already applied to Raft and journalled);
    /// `context` is what the proposer attached to the change (a thor server puts the added
    /// replica's address there).
    Membership {
        /// The membership now.
        conf: ConfState,
        /// The change's context bytes.
        context: Bytes,
    },
    /// Nothing: the empty entry a new leader commits to learn its commit index.
    Noop,
}

/// One committed entry, to apply in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// Its log index.
    pub index: u64,
    /// The term it was proposed in.
    pub term: u64,
    /// What to do.
    pub apply: Apply,
}

/// A snapshot to replace the application's state with, before applying what follows.
#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    /// The index the image reflects.
    pub index: u64,
    /// That entry's term.
    pub term: u64,
    /// The application's state at `index`.
    pub image: Bytes,
    /// The membership at `index`.
    pub conf: ConfState,
}

/// A change of role, term or known leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChange {
    /// The new role.
    pub role: Role,
    /// The term.
    pub term: u64,
    /// The leader this replica knows for the term, if any.
    pub leader: Option<u64>,
}

/// What one [`Replica::advance`] asks the driver to do, and what it reports.
#[derive(Debug, Default)]
pub struct Effects {
    /// Messages to send to their `to` replica, in any order; losing some is safe.
    pub messages: Vec<Message>,
    /// A snapshot installed from the leader: replace the state with it first.
    pub restore: Option<Restore>,
    /// Committed entries to apply, in index order, after `restore`.
    pub committed: Vec<Committed>,
    /// Proposals of this replica that are committed: safe to acknowledge to their clients.
    pub acknowledged: Vec<Proposal>,
    /// Proposals whose index committed with another term: they will never commit. Tell the
    /// client it failed (it may retry).
    pub lost: Vec<Proposal>,
    /// Proposals whose index a snapshot covered, so their fate cannot be told here: never
    /// acknowledge them (the client learns the outcome some other way, e.g. by reading).
    pub undecided: Vec<Proposal>,
    /// The last change of role, term or leader during this advance, if any.
    pub role: Option<RoleChange>,
    /// Messages dropped because more than [`MESSAGES_PER_ADVANCE_MAX`] were produced (Raft
    /// resends what matters).
    pub messages_dropped: usize,
    /// Journalled records wait for [`Replica::persist`] (only after [`Replica::ready`];
    /// [`Replica::advance`] persists them itself).
    pub needs_sync: bool,
    /// Leadership confirmations asked with [`Replica::confirm_leadership`] that a majority
    /// answered: this replica led its term at some moment after each was asked.
    pub confirmed: Vec<u64>,
}

impl Effects {
    /// Appends `later`'s effects to these, in order (a restore in `later` supersedes the
    /// committed entries before it, as within one call).
    pub fn absorb(&mut self, later: Effects) {
        for m in later.messages {
            if self.messages.len() < MESSAGES_PER_ADVANCE_MAX {
                self.messages.push(m);
            } else {
                self.messages_dropped += 1;
            }
        }
        if later.restore.is_some() {
            self.committed.clear();
            self.restore = later.restore;
        }
        self.committed.extend(later.committed);
        self.acknowledged.extend(later.acknowledged);
        self.lost.extend(later.lost);
        self.undecided.extend(later.undecided);
        self.confirmed.extend(later.confirmed);
        self.role = later.role.or(self.role);
        self.messages_dropped += later.messages_dropped;
        self.needs_sync = later.needs_sync;
    }
}

/// A replica's externally visible state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// This replica's id.
    pub id: u64,
    /// Its role.
    pub role: Role,
    /// Its term.
    pub term: u64,
    /// The leader it knows for the term.
    pub leader: Option<u64>,
    /// Raft's commit index.
    pub commit: u64,
    /// The last index handed to the application.
    pub applied: u64,
    /// The last index in its log.
    pub last_index: u64,
    /// Its snapshot (compaction) index.
    pub snapshot_index: u64,
    /// Whether an entry of the current term has been handed to the application (and so every
    /// entry before it). A new leader's log may end with entries of earlier terms that its first
    /// commit decides; only once it has applied them does its state include every committed
    /// record, so the engine starts serving as leader when this holds (see the crate docs).
    pub term_applied: bool,
}

/// The randomized election timeout of replica `id` in `term` for a run seeded with `seed`, in
/// `[election, 2 * election)`: a pure function, so a run replays; different per replica and
/// per term, so split votes resolve.
pub fn election_timeout_for(seed: u64, id: u64, term: u64, election: usize) -> usize {
    let mut z =
        seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ term.wrapping_mul(0xD1B5_4A32_D192_ED03);
    // SplitMix64's finalizer: every input bit affects every output bit.
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    election + (z % election as u64) as usize
}

/// One member of a replica group. See the module documentation.
pub struct Replica {
    /// raft-rs's node, owning the storage.
    node: RawNode<RaftLog>,
    /// How this replica runs.
    config: ReplicaConfig,
    /// This replica's proposals not yet resolved: index → term. At most
    /// [`PROPOSALS_IN_FLIGHT_MAX`].
    proposals: BTreeMap<u64, u64>,
    /// The last index handed to the application.
    applied: u64,
    /// The membership as of `applied` (what a compaction at `applied` records).
    applied_conf: ConfState,
    /// The index of the last membership change applied (0: none since the snapshot): a
    /// compaction below it would need an older membership, which is not kept.
    applied_conf_index: u64,
    /// The role, term and leader last reported.
    reported: RoleChange,
    /// Readies journalled but not yet synced, oldest first: their numbers, the last journal
    /// LSN their records took, and the messages raft-rs holds until they are persisted. At
    /// most [`UNSYNCED_READIES_MAX`].
    unsynced: VecDeque<(u64, Lsn, Vec<Message>)>,
    /// Set when a leader's append contradicts an entry this replica committed (see
    /// [`ReplicaError::Diverged`]): every later call fails with it.
    diverged: Option<String>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("status", &self.status()).finish()
    }
}

impl Replica {
    /// Starts replica `config.id` over its recovered journal. The application starts from
    /// [`Replica::snapshot_image`] (the state at the snapshot index) and applies what
    /// [`Replica::advance`] hands it from there.
    pub fn open(config: ReplicaConfig, log: RaftLog) -> Result<Replica, ReplicaError> {
        let applied = log.snapshot_index();
        let applied_conf = log.snapshot_ref().get_metadata().get_conf_state().clone();
        let raft_config = Config {
            id: config.id,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            min_election_tick: config.election_ticks,
            max_election_tick: 2 * config.election_ticks,
            applied,
            max_size_per_msg: APPEND_MESSAGE_BYTES_MAX,
            max_inflight_msgs: APPENDS_IN_FLIGHT_PER_PEER_MAX,
            // A leader that cannot hear a majority steps down after an election timeout, so
            // an isolated leader stops taking proposals it could never commit.
            check_quorum: true,
            // A replica back from a partition does not disrupt the group with a higher term.
            pre_vote: true,
            max_uncommitted_size: UNCOMMITTED_BYTES_MAX,
            max_committed_size_per_ready: COMMITTED_BYTES_PER_READY_MAX,
            ..Config::default()
        };
        let node = RawNode::new(&raft_config, log, &logger::logger(config.id))
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let reported = RoleChange { role: Role::Follower, term: node.raft.term, leader: None };
        let mut r = Replica {
            node,
            config,
            proposals: BTreeMap::new(),
            applied,
            applied_conf,
            applied_conf_index: 0,
            reported,
            unsynced: VecDeque::new(),
            diverged: None,
        };
        r.seed_timeout();
        Ok(r)
    }

    /// The application state at the snapshot index, to start from after [`Replica::open`].
    pub fn snapshot_image(&self) -> Bytes {
        self.node.store().snapshot_ref().data.clone()
    }

    /// This replica's status.
    pub fn status(&self) -> ReplicaStatus {
        let r = &self.node.raft;
        ReplicaStatus {
            id: self.config.id,
            role: r.state.into(),
            term: r.term,
            leader: (r.leader_id != 0).then_some(r.leader_id),
            commit: r.raft_log.committed,
            applied: self.applied,
            last_index: self.node.store().last_index_now(),
            snapshot_index: self.node.store().snapshot_index(),
            term_applied: r.apply_to_current_term(),
        }
    }

    /// The durable state underneath (for its recovery report and journal counters).
    pub fn log(&self) -> &RaftLog {
        self.node.store()
    }

    /// On a leader, each other voter's matched index (the last entry it is known to hold
    /// durably), in id order: how far each follower lags. Empty on any other role (only the
    /// leader tracks progress).
    pub fn progress(&self) -> Vec<(u64, u64)> {
        let r = &self.node.raft;
        if r.state != StateRole::Leader {
            return Vec::new();
        }
        let mut v: Vec<(u64, u64)> = r
            .prs()
            .iter()
            .filter(|(id, _)| **id != self.config.id)
            .map(|(id, p)| (*id, p.matched))
            .collect();
        v.sort_unstable();
        v
    }

    /// The current membership as raft-rs sees it.
    pub fn conf_state(&self) -> ConfState {
        self.node.raft.prs().conf().to_conf_state()
    }

    /// Asks the group to confirm that this replica still leads (raft-rs's read index, in its
    /// safe mode: a round of heartbeats a majority answers): [`Effects::confirmed`] reports
    /// `ctx` once a majority answered a heartbeat sent after this call, so this replica led
    /// its term at some moment after it. Contexts are confirmed in the order asked; one that
    /// never is (the replica lost its term, or a message was lost) is simply never reported:
    /// ask again with a later one.
    pub fn confirm_leadership(&mut self, ctx: u64) {
        self.node.read_index(ctx.to_be_bytes().to_vec());
    }

    /// Tells raft-rs that every snapshot it is sending (a peer in snapshot state) older than
    /// the journal's snapshot failed, so that it sends the newer one. A replica added to the
    /// group refuses a snapshot whose membership lacks it, and raft-rs would otherwise wait
    /// for that one for ever.
    pub fn resend_stale_snapshots(&mut self) {
        let index = self.node.raft.raft_log.store.snapshot_index();
        let stale: Vec<u64> = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(_, pr)| {
                pr.state == raft::ProgressState::Snapshot && pr.pending_snapshot < index
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            self.node.report_snapshot(id, raft::SnapshotStatus::Failure);
        }
    }

    /// Tells raft-rs how sending a snapshot to `to` went: a transport that lost the message
    /// reports [`raft::SnapshotStatus::Failure`], so the leader sends another instead of
    /// waiting for ever.
    pub fn report_snapshot(&mut self, to: u64, status: raft::SnapshotStatus) {
        self.node.report_snapshot(to, status);
    }

    /// Tells raft-rs that `to` could not be reached (the leader then probes it again).
    pub fn report_unreachable(&mut self, to: u64) {
        self.node.report_unreachable(to);
    }

    /// Proposals waiting for their index to commit.
    pub fn proposals_in_flight(&self) -> usize {
        self.proposals.len()
    }

    /// Advances the logical clock by one tick.
    pub fn tick(&mut self) {
        self.node.tick();
        self.seed_timeout();
    }

    /// A tick of a follower that must not lead (a thor member waiting for a database image):
    /// time passes for the leader's lease, so after an election timeout without a leader this
    /// replica grants (pre-)votes to others as usual, but it never campaigns itself. In any
    /// other role it is an ordinary [`Replica::tick`].
    pub fn tick_without_campaign(&mut self) {
        let r = &mut self.node.raft;
        if r.state == StateRole::Follower {
            // Only `tick_election` campaigns; the lease check reads this counter alone, and it
            // stops at the timeout (no counter grows without bound).
            r.election_elapsed = (r.election_elapsed + 1).min(r.election_timeout());
        } else {
            self.tick();
        }
    }

    /// Takes a message from a peer. A refused message is dropped (Raft recovers from loss).
    pub fn step(&mut self, msg: Message) -> Result<(), StepError> {
        if msg.to != self.config.id {
            return Err(StepError::Refused(format!(
                "addressed to {}, this is {}",
                msg.to, self.config.id
            )));
        }
        if msg.from == 0 || raft::raw_node::is_local_msg(msg.msg_type) {
            return Err(StepError::Refused(format!(
                "{:?} from {} is not a peer's message",
                msg.msg_type, msg.from
            )));
        }
        if let Some(why) = &self.diverged {
            return Err(StepError::Refused(format!("diverged from the group: {why}")));
        }
        self.check_committed(&msg);
        if let Some(why) = &self.diverged {
            return Err(StepError::Refused(format!("diverged from the group: {why}")));
        }
        let mut msg = msg;
        if self.config.durability == Durability::Memory {
            self.forgive_lost_tail(&mut msg);
        }
        let r = self.node.step(msg).map_err(|e| StepError::Raft(e.to_string()));
        self.seed_timeout();
        r
    }

    /// Marks this replica diverged when an append of a current leader (its term at least
    /// this replica's: by Raft's leader completeness it holds every committed entry) names a
    /// different term at an index this replica committed. raft-rs would not notice: it
    /// answers an append below its commit index with that index, which the leader takes as
    /// a match, and the replica would sit wedged, silently holding an entry the group lost.
    fn check_committed(&mut self, msg: &Message) {
        use raft::eraftpb::MessageType;
        let r = &self.node.raft;
        if msg.msg_type != MessageType::MsgAppend || msg.term < r.term {
            return;
        }
        let log = &r.raft_log;
        let committed = log.committed;
        // A compacted index's term is not known here (raft-rs answers 0 for one below its
        // snapshot): nothing to compare.
        let clash = |index: u64, term: u64| {
            index <= committed && log.term(index).is_ok_and(|have| have != 0 && have != term)
        };
        let clash = if clash(msg.index, msg.log_term) {
            Some((msg.index, msg.log_term))
        } else {
            msg.entries.iter().find(|e| clash(e.index, e.term)).map(|e| (e.index, e.term))
        };
        if let Some((index, term)) = clash {
            let have = log.term(index).unwrap_or(0);
            let why = format!(
                "leader {} (term {}) holds term {term} at index {index}, which this replica \
                 committed with term {have}: the group lost an entry this replica applied",
                msg.from, msg.term
            );
            tracing::error!(replica = self.config.id, "{why}");
            self.diverged = Some(why);
        }
    }

    /// In [`Durability::Memory`] a replica that crashed may have lost entries it reported
    /// persisted (its journal's unsynced tail); raft-rs assumes that never happens. Two
    /// corrections, each only ever making a replica believe less:
    ///
    /// - a heartbeat's commit index past this replica's last entry (its leader still counts
    ///   the lost tail) is lowered to that entry: raft-rs would stop on it as on a corrupted
    ///   log. The entries come again with the leader's appends, and their commit with them.
    /// - on a leader, an append rejection whose hint lies below what it recorded the
    ///   follower matched means the follower lost that tail: its record is lowered to the
    ///   hint and it is probed from the rejected index, so that raft-rs sends the lost entries
    ///   again instead of dropping the rejection as stale. A leader's commit index never
    ///   goes back; it only counts the follower again once it holds the entries.
    fn forgive_lost_tail(&mut self, msg: &mut Message) {
        use raft::eraftpb::MessageType;
        let r = &mut self.node.raft;
        match msg.msg_type {
            MessageType::MsgHeartbeat => {
                let last = r.raft_log.last_index();
                if msg.commit > last {
                    msg.commit = last;
                }
            }
            MessageType::MsgAppendResponse if msg.reject && r.state == StateRole::Leader => {
                if let Some(pr) = r.mut_prs().get_mut(msg.from)
                    && msg.reject_hint < pr.matched
                {
                    pr.matched = msg.reject_hint;
                    pr.become_probe();
                    // Probing from the rejected index makes raft-rs take the rejection.
                    pr.next_idx = msg.index + 1;
                }
            }
            _ => {}
        }
    }

    /// Proposes a record. On the leader, returns the index it will have if committed (see
    /// [`Effects::acknowledged`]); elsewhere [`ProposeError::NotLeader`] with a hint.
    pub fn propose(&mut self, record: Bytes) -> Result<Proposal, ProposeError> {
        if record.len() > PROPOSAL_BYTES_MAX {
            return Err(ProposeError::TooLarge { len: record.len(), max: PROPOSAL_BYTES_MAX });
        }
        self.check_can_propose()?;
        let before = self.node.raft.raft_log.last_index();
        self.node.propose(Vec::new(), record.to_vec()).map_err(|_| ProposeError::Busy)?;
        self.proposed(before)
    }

    /// Proposes a membership change (a replica added, removed or made a learner). Acknowledged
    /// like a record; [`Apply::Membership`] reports it applied.
    pub fn propose_membership(&mut self, change: ConfChangeV2) -> Result<Proposal, ProposeError> {
        self.check_can_propose()?;
        if self.node.raft.has_pending_conf() {
            // raft-rs would turn it into an empty entry silently (its proposal then looks
            // acknowledged though nothing changed): refuse it here instead.
            return Err(ProposeError::Membership(
                "a membership change is still being applied; retry once it is".into(),
            ));
        }
        let before = self.node.raft.raft_log.last_index();
        self.node
            .propose_conf_change(Vec::new(), change)
            .map_err(|e| ProposeError::Membership(e.to_string()))?;
        self.proposed(before)
    }

    fn check_can_propose(&self) -> Result<(), ProposeError> {
        let r = &self.node.raft;
        if r.state != StateRole::Leader {
            return Err(ProposeError::NotLeader {
                leader: (r.leader_id != 0).then_some(r.leader_id),
            });
        }
        if self.proposals.len() >= PROPOSALS_IN_FLIGHT_MAX {
            return Err(ProposeError::Busy);
        }
        Ok(())
    }

    /// Records the proposal raft-rs just appended after index `before`.
    fn proposed(&mut self, before: u64) -> Result<Proposal, ProposeError> {
        let index = self.node.raft.raft_log.last_index();
        // A leader appends a proposal to its own log at once, right after its last entry.
        assert_eq!(index, before + 1, "raft-rs appended exactly one entry");
        let term = self.node.raft.term;
        self.proposals.insert(index, term);
        self.seed_timeout();
        Ok(Proposal { index, term })
    }

    /// Compacts the log at the applied index, keeping `image` (the application's state at
    /// [`ReplicaStatus::applied`]) as the snapshot for followers too far behind.
    pub fn compact(&mut self, image: Bytes) -> Result<(), ReplicaError> {
        let (index, conf) = (self.applied, self.applied_conf.clone());
        // raft-rs must have taken the applied index (ready and persist report it before they
        // return), or it could later ask for entries compacted below it.
        assert_eq!(self.node.raft.raft_log.applied, index, "raft-rs knows the applied index");
        self.node.mut_store().compact(index, conf, image)?;
        Ok(())
    }

    /// Compacts the log at `index`, at or below the applied index, keeping `image` (the
    /// application's state at `index`) as the snapshot. A thor server compacts at the last
    /// entry its checkpoint covers, which may lie below what it applied: the entries after it
    /// are what its recovery replays. Refused ([`crate::LogError::Invalid`]) when a membership
    /// change was applied after `index` (the membership at `index` is not kept): compact
    /// later, at a higher index.
    pub fn compact_to(&mut self, index: u64, image: Bytes) -> Result<(), ReplicaError> {
        if index > self.applied {
            return Err(crate::LogError::Invalid(format!(
                "compaction at {index} past the applied index {}",
                self.applied
            ))
            .into());
        }
        if index < self.applied_conf_index {
            return Err(crate::LogError::Invalid(format!(
                "compaction at {index} below the membership change applied at {}",
                self.applied_conf_index
            ))
            .into());
        }
        assert!(self.node.raft.raft_log.applied >= index, "raft-rs knows the applied index");
        let conf = self.applied_conf.clone();
        self.node.mut_store().compact(index, conf, image)?;
        Ok(())
    }

    /// Handles everything raft-rs has ready and makes it durable: [`Replica::ready`], then
    /// [`Replica::persist`] until nothing is left to sync. Call after every `tick`, `step` or
    /// `propose` (or a batch of them) when the caller has no reason to defer the fsync.
    pub fn advance(&mut self) -> Result<Effects, ReplicaError> {
        let mut fx = self.ready()?;
        // Each persist reports readies persisted, which may make one more ready (the commit
        // they allow); bounded like the readies themselves.
        let mut rounds = 0;
        while fx.needs_sync && rounds < ADVANCE_ROUNDS_MAX {
            rounds += 1;
            let more = self.persist()?;
            fx.absorb(more);
        }
        Ok(fx)
    }

    /// The first half of handling raft-rs's readies: journals their entries, hard state and
    /// snapshot (buffered, **not** synced), and hands out what needs no durability: messages
    /// raft-rs may send at once (a leader's appends), committed entries (raft-rs hands only
    /// entries this replica has persisted) and the fate of proposals. Messages that report the
    /// new entries or vote persisted (a follower's append responses, votes) are held back
    /// until [`Replica::persist`]. `Effects::needs_sync` says whether a persist is due.
    ///
    /// Between the two halves the driver may do anything else (deliver more messages, tick);
    /// a crash in between loses the journalled records, which nobody was told were durable.
    pub fn ready(&mut self) -> Result<Effects, ReplicaError> {
        if let Some(why) = &self.diverged {
            return Err(ReplicaError::Diverged(why.clone()));
        }
        let mut fx = Effects::default();
        // Each round consumes a ready; raft-rs produces a new one only after new input or
        // after a previous one's persistence, so this ends after a few rounds; the bounds
        // make sure of it (what is left waits for the next call).
        let mut rounds = 0;
        while self.node.has_ready()
            && rounds < ADVANCE_ROUNDS_MAX
            && self.unsynced.len() < UNSYNCED_READIES_MAX
        {
            rounds += 1;
            let mut rd = self.node.ready();
            self.send(&mut fx, rd.take_messages());
            let snapshot = !rd.snapshot().is_empty();
            if snapshot {
                self.install(&mut fx, rd.snapshot().clone())?;
            }
            for rs in rd.take_read_states() {
                // Only this replica's own contexts: eight bytes each.
                if let Ok(b) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) {
                    fx.confirmed.push(u64::from_be_bytes(b));
                }
            }
            let committed = rd.take_committed_entries();
            self.apply(&mut fx, committed)?;
            let store = self.node.mut_store();
            // A new term or vote must be durable before any message that follows from it
            // (a vote granted twice in a term could elect two leaders), in either setting.
            let votes = rd.hs().is_some_and(|hs| {
                let was = store.hard_state();
                hs.term != was.term || hs.vote != was.vote
            });
            store.append(rd.entries())?;
            if let Some(hs) = rd.hs() {
                store.set_hard_state(hs.clone())?;
            }
            let mut held = rd.take_persisted_messages();
            if self.config.durability == Durability::Memory
                && !snapshot
                && !votes
                && self.unsynced.is_empty()
            {
                // Memory: journalled is persisted (the fsync follows within a flush
                // interval, `flush`). Reported in ready order: nothing older waits.
                self.send(&mut fx, held);
                let number = rd.number();
                self.node.advance_append_async(rd);
                self.node.on_persist_ready(number);
                continue;
            }
            if self.config.mutant == Some(Mutant::ReportBeforeSync) {
                self.send(&mut fx, std::mem::take(&mut held));
            }
            let journalled = self.node.store().appended_lsn();
            self.unsynced.push_back((rd.number(), journalled, held));
            self.node.advance_append_async(rd);
            if snapshot {
                // raft-rs drops its own copy of the snapshot as the ready is advanced, but
                // counts it applied only once persisted: in between, its applied index lies
                // below the journal's compacted entries, and a campaign would ask for them.
                // So an installed snapshot is persisted at once (installs are rare).
                self.sync_unsynced(&mut fx)?;
            }
        }
        self.report_applied();
        fx.needs_sync = !self.unsynced.is_empty();
        self.seed_timeout();
        self.note_role(&mut fx);
        Ok(fx)
    }

    /// The second half: makes everything journalled durable (one fsync of the journal),
    /// tells raft-rs the readies are persisted, hands out the messages held for that, and
    /// handles what became ready because of it (as [`Replica::ready`] does).
    pub fn persist(&mut self) -> Result<Effects, ReplicaError> {
        let mut fx = Effects::default();
        if self.unsynced.is_empty() {
            return Ok(fx);
        }
        self.sync_unsynced(&mut fx)?;
        let more = self.ready()?;
        fx.absorb(more);
        Ok(fx)
    }

    /// The second half done by the driver's own fsync: the journal
    /// ([`RaftLog::shared_journal`]) is durable up to `durable` (its `durable_lsn` after a
    /// flush the driver ran outside its lock, perhaps shared with other appenders by the thor
    /// log's group commit). Reports persisted every unsynced ready whose records all lie at
    /// or below it, hands out the messages held for them, and handles what became ready
    /// because of it (as [`Replica::ready`] does, without syncing). A `durable` that covers
    /// nothing new does nothing; a stale one (an earlier flush's) is harmless.
    pub fn persisted(&mut self, durable: Lsn) -> Result<Effects, ReplicaError> {
        let mut fx = Effects::default();
        let mut last = None;
        while let Some(&(number, lsn, _)) = self.unsynced.front() {
            if lsn > durable {
                break;
            }
            let (_, _, msgs) = self.unsynced.pop_front().expect("looked at");
            // Before any message that reports these entries or votes persisted: the fsync
            // covering them returned (the caller read `durable` after it).
            self.send(&mut fx, msgs);
            last = Some(number);
        }
        let Some(last) = last else { return Ok(fx) };
        self.node.on_persist_ready(last);
        self.report_applied();
        let more = self.ready()?;
        fx.absorb(more);
        Ok(fx)
    }

    /// Syncs the journal, reports every unsynced ready persisted, and hands out the messages
    /// held for them.
    fn sync_unsynced(&mut self, fx: &mut Effects) -> Result<(), ReplicaError> {
        let Some(&(last, _, _)) = self.unsynced.back() else {
            return Ok(());
        };
        // Before any message that reports these entries or votes persisted.
        self.node.mut_store().sync()?;
        let held: Vec<Vec<Message>> = self.unsynced.drain(..).map(|(_, _, m)| m).collect();
        for msgs in held {
            self.send(fx, msgs);
        }
        self.node.on_persist_ready(last);
        self.report_applied();
        Ok(())
    }

    /// Tells raft-rs how far the application applied. An installed snapshot counts as applied
    /// only once persisted (raft-rs's rule), so the report waits for that.
    fn report_applied(&mut self) {
        let log = &self.node.raft.raft_log;
        let to = self.applied.min(log.persisted);
        if to > log.applied {
            self.node.advance_apply_to(to);
        }
    }

    /// Whether journalled readies wait for [`Replica::persist`].
    pub fn needs_sync(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Whether the journal holds records not yet fsynced: in [`Durability::Memory`], what
    /// the next [`Replica::flush`] makes durable (entries already reported persisted).
    pub fn unflushed(&self) -> bool {
        let s = self.node.store();
        s.journal().durable_lsn() < s.appended_lsn()
    }

    /// The fsync behind, in [`Durability::Memory`]: makes everything journalled durable,
    /// without reporting anything (what it covers was reported persisted already, or is
    /// still reported by [`Replica::persist`] / [`Replica::persisted`] as usual). The driver
    /// calls it every flush interval; a driver that fsyncs the shared journal itself
    /// ([`RaftLog::shared_journal`]) need not. A failure poisons the journal, as any fsync's.
    pub fn flush(&mut self) -> Result<(), ReplicaError> {
        if self.unflushed() {
            self.node.mut_store().sync()?;
        }
        Ok(())
    }

    fn send(&mut self, fx: &mut Effects, msgs: Vec<Message>) {
        for m in msgs {
            if fx.messages.len() < MESSAGES_PER_ADVANCE_MAX {
                fx.messages.push(m);
            } else {
                fx.messages_dropped += 1;
            }
        }
    }

    fn install(
        &mut self,
        fx: &mut Effects,
        snap: raft::eraftpb::Snapshot,
    ) -> Result<(), ReplicaError> {
        let meta = snap.get_metadata();
        let (index, term, conf) = (meta.index, meta.term, meta.get_conf_state().clone());
        let image = snap.data.clone();
        self.node.mut_store().apply_snapshot(snap)?;
        // Proposals the snapshot covers: their entries are gone, their fate unknown here.
        let rest = self.proposals.split_off(&(index + 1));
        for (i, t) in std::mem::replace(&mut self.proposals, rest) {
            fx.undecided.push(Proposal { index: i, term: t });
        }
        self.applied = index;
        self.applied_conf = conf.clone();
        self.applied_conf_index = index;
        // A later restore in the same advance replaces an earlier one; entries committed
        // before it are superseded by its image, so drop them.
        fx.committed.clear();
        fx.restore = Some(Restore { index, term, image, conf });
        Ok(())
    }

    fn apply(&mut self, fx: &mut Effects, entries: Vec<Entry>) -> Result<(), ReplicaError> {
        for e in entries {
            // raft-rs hands each committed entry once, in order, after the applied index.
            assert_eq!(e.index, self.applied + 1, "committed entries arrive in order");
            let apply = match e.entry_type {
                EntryType::EntryNormal if e.data.is_empty() => Apply::Noop,
                EntryType::EntryNormal => Apply::Record(e.data.clone()),
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(|err| {
                        ReplicaError::Raft(format!("conf change {}: {err}", e.index))
                    })?;
                    self.apply_membership(&cc, Bytes::copy_from_slice(&cc.context))?
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data).map_err(|err| {
                        ReplicaError::Raft(format!("conf change {}: {err}", e.index))
                    })?;
                    self.apply_membership(&cc, Bytes::copy_from_slice(&cc.context))?
                }
            };
            if let Some(term) = self.proposals.remove(&e.index) {
                let p = Proposal { index: e.index, term };
                if term == e.term {
                    // Raft's log matching: the entry committed at this index with this term
                    // is the one this replica proposed, so the proposal is committed.
                    fx.acknowledged.push(p);
                } else {
                    // Another leader's entry took the index (of a later term, or of an
                    // earlier one that a later leader held and committed): ours never will.
                    fx.lost.push(p);
                }
            }
            self.applied = e.index;
            fx.committed.push(Committed { index: e.index, term: e.term, apply });
        }
        Ok(())
    }

    fn apply_membership(
        &mut self,
        cc: &impl raft_proto::ConfChangeI,
        context: Bytes,
    ) -> Result<Apply, ReplicaError> {
        let cs = self
            .node
            .apply_conf_change(cc)
            .map_err(|e| ReplicaError::Raft(format!("applying a membership change: {e}")))?;
        self.node.mut_store().set_conf_state(cs.clone())?;
        self.applied_conf = cs.clone();
        self.applied_conf_index = self.applied + 1;
        Ok(Apply::Membership { conf: cs, context })
    }

    /// Overrides raft-rs's thread-random election timeout with the seeded one for the current
    /// term (a no-op when it already holds it).
    fn seed_timeout(&mut self) {
        let r = &mut self.node.raft;
        let t = election_timeout_for(
            self.config.seed,
            self.config.id,
            r.term,
            self.config.election_ticks,
        );
        if r.randomized_election_timeout() != t {
            r.set_randomized_election_timeout(t);
        }
    }

    fn note_role(&mut self, fx: &mut Effects) {
        let r = &self.node.raft;
        let now = RoleChange {
            role: r.state.into(),
            term: r.term,
            leader: (r.leader_id != 0).then_some(r.leader_id),
        };
        if now != self.reported {
            self.reported = now;
            fx.role = Some(now);
        }
    }
}
