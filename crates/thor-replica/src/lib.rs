//! thor-replica: a thor server's replica group, sans-I/O, on raft-rs.
//!
//! Issue 33 makes every thor server a replica group, so that no single machine's loss stops
//! service. This crate is the foundation: consensus from a proven library (raft-rs, TiKV's
//! Raft), Raft's durable state in thor's own checksummed log, and a synchronous state machine
//! around it that a server's engine (and the simulation) can drive, and [`member::Member`]:
//! a thor server's core on that replica, the group member a driver runs. thor-server's
//! `GroupEngine` runs it with threads over real files; `thor server --group` and the TCP
//! transport come next (see "What is not here yet").
//!
//! # The pieces
//!
//! ```text
//!   driver (engine / sim)         thor-replica                          raft-rs
//!   ─────────────────────         ────────────                          ───────
//!   tick, step(msg), ─────────►   Replica  ──── RawNode<RaftLog> ─────► Raft state machine
//!   propose(record)               │  seeded election timeouts
//!                                 │  proposals: index → term
//!   Effects ◄───────── advance()  │  ready → journal + fsync → messages, committed, acks
//!                                 ▼
//!                                 RaftLog (raft::Storage)
//!                                 │  in memory: hard state, membership, snapshot, entries
//!                                 ▼
//!                                 journal records ──► thor_storage::Log ──► Disk (any)
//! ```
//!
//! - [`journal`]: the byte layout of Raft's state as records of a thor log (ENTRIES,
//!   HARD_STATE, CONF_STATE, and self-contained BASE records that make compaction safe).
//! - [`storage`]: [`RaftLog`], raft-rs's `Storage` over that journal, recovered by replay on
//!   open (a torn tail is cut by the thor log as always: whole records, never half an entry).
//! - [`replica`]: [`Replica`], the state machine the driver calls, and its [`Effects`].
//! - [`member`]: [`Member`], a thor server as one replica of its group: the core's appends
//!   proposed, acknowledged prefixes reported durable, committed records replayed on
//!   followers as recovery does, failover through `finish_recovery`, clients of a replica
//!   that does not serve turned away with `Error(NotLeader)` (`tests/member.rs`).
//! - [`codec`]: [`encode_message`] and [`decode_message`], raft-rs's messages as bytes
//!   between replicas; the decoder walks the protobuf wire format iteratively first and
//!   refuses groups and deep nesting (protobuf 2.28's RUSTSEC-2024-0437).
//! - [`logger`]: raft-rs logs through slog; a small drain turns that into tracing events.
//! - [`sim`]: a deterministic harness (replicas over `MemDisk`s and a seeded network) with
//!   the checks that the tests and, later, the merged simulation use.
//! - [`limits`]: every bound, with its reason.
//!
//! # Invariants
//!
//! *Architecture Invariant:* no I/O of its own. Time is [`Replica::tick`], the network is the
//! messages the driver carries, the disk is the [`thor_storage::Disk`] the journal was opened
//! on, randomness is the replica's seed (raft-rs's thread-local random election timeout is
//! overridden after every call by [`election_timeout_for`]`(seed, id, term)`). A seed
//! replays a run exactly (`tests/seeds.rs` checks it).
//!
//! *Invariant (durability):* with [`Durability::Disk`] (the default) an entry or a vote is
//! reported persisted to raft-rs, and so to a peer, only after the journal's fsync covering it
//! returned. (With [`Durability::Memory`] entries are reported once journalled and fsynced
//! behind by [`Replica::flush`]; votes and term changes still wait for the fsync. What that
//! setting can lose is in [`replica`]'s "Durability settings".) Handling is in two halves:
//! [`Replica::ready`] journals readies' entries and hard state (buffered) and hands out what
//! needs no durability; [`Replica::persist`] syncs the journal, tells raft-rs, and only then
//! hands out the messages raft-rs held back until persistence. The driver may do other work
//! (or crash) between them; [`Replica::advance`] does both at once. A failed fsync poisons the
//! journal and the replica must be reopened from its disk. (`tests/mutants.rs` runs a replica
//! that reports before it syncs and shows the harness catches it.)
//!
//! *Invariant (acknowledgement):* a proposal is acknowledged ([`Effects::acknowledged`]) only
//! when the entry committed at its index has the term it was proposed in, i.e. Raft committed
//! that very entry on a majority's disks (in a majority's memory with [`Durability::Memory`]). A deposed leader's proposals are resolved when their
//! indexes commit: another term there means [`Effects::lost`]; a snapshot over them means
//! [`Effects::undecided`]; never acknowledged. (An entry overwritten on the proposer is not
//! yet lost: a later leader that holds it may still commit it, as in Figure 8 of the Raft
//! paper; only the committed term decides.)
//!
//! *Invariant (recovery):* after any crash, [`RaftLog::open`] recovers a state that existed
//! before it at a journal record boundary at or after the last sync: synced entries, hard
//! state and membership survive; unsynced ones survive as a prefix of whole records or not
//! at all. Its commit index never points past its last entry.
//!
//! *Invariant (application):* [`Effects::committed`] hands each committed entry once per run,
//! in index order, after [`Effects::restore`] if a snapshot was installed. A restarted
//! replica starts from its snapshot image and is handed every committed entry after it again,
//! as thor's recovery replays its log from a checkpoint.
//!
//! *API Boundary:* [`RaftLog`] (`open`, `bootstrap`, `compact`, `shared_journal`, and
//! raft-rs's `Storage`), [`Replica`] (`open`, `tick`, `tick_without_campaign`, `step`,
//! `propose`, `propose_membership`, `ready`, `persist`, `persisted`, `advance`, `compact`,
//! `report_snapshot`, `status`, `progress`), [`Effects`] and its
//! parts, the error enums, [`sim::Cluster`] for tests. raft-rs's message type
//! (`raft::eraftpb::Message`) crosses the boundary as is; its bytes between replicas are
//! [`encode_message`] / [`decode_message`] (raft-rs's protobuf codec). That codec is protobuf
//! 2.28, which a crafted message can crash (RUSTSEC-2024-0437): [`decode_message`] refuses
//! such input before protobuf sees it, and a transport still decodes only what authenticated
//! group members send (thor-net's replica links take Raft messages only on sessions of the
//! group's own peer credential).
//!
//! # Membership
//!
//! A replica is added or removed through raft-rs's membership changes
//! ([`Replica::propose_membership`] with a `ConfChangeV2`; a thor server's
//! [`Member::propose_membership`]), one change at a time (a second one before the first is
//! applied is refused: raft-rs would turn it into an empty entry silently). A new replica
//! starts with an empty database and a journal bootstrapped with the *founders'* membership
//! ([`RaftLog::bootstrap`] with the group's founding voters, itself not among them: it never
//! campaigns until a change adding it applies), and catches up from the leader: by log if the
//! leader still holds every entry (replaying the changes from the founders' membership on
//! rebuilds the current one), else from the snapshot the leader's last compaction kept. raft-rs
//! refuses a snapshot whose membership lacks the replica, so a member compacts at each
//! membership change once its database covers it ([`member`]'s "Membership"). A thor
//! server's snapshot names a database image (its least checkpoint LSN, 8 bytes in the BASE
//! record); the image itself travels outside Raft, fetched by the driver ([`member`]'s
//! "Snapshots").
//!
//! # How the engine sits on it ([`member`] builds this; the threaded engine does not yet)
//!
//! - *The log is the journal.* A replicated server writes no `log.*` of its own: the core's
//!   `Effect::Append { lsn, record }` becomes [`Replica::propose`] of `lsn ‖ record` (the core
//!   numbers records densely; Raft indexes are not dense, since no-ops and membership entries
//!   take indexes, so the LSN travels in the entry). `CommitLog::sync` returns the highest LSN
//!   whose proposal is in [`Effects::acknowledged`] with every one before it; a proposal
//!   [`Effects::lost`] or [`Effects::undecided`] is a commit whose outcome the client learns
//!   by retrying. `truncate_before` becomes [`Replica::compact_to`] at the last entry the
//!   checkpoint covers.
//! - *Followers apply as recovery does.* A follower's driver feeds each
//!   [`Apply::Record`] to the core's `replay(lsn, record)` in index order, running install
//!   rounds when the MOB is over budget, exactly as `thor_server::io::recover` does; its
//!   checkpoint is its compaction. A follower too far behind gets a database image copied by
//!   the driver ([`Out::FetchImage`], [`Member::image_installed`]) and replays from its
//!   checkpoint. A restart is recovery from the snapshot plus the committed
//!   entries [`Replica::advance`] hands out again.
//! - *Becoming leader.* When [`Effects::role`] says Leader, the engine waits for
//!   [`ReplicaStatus::term_applied`] (everything committed before its term is applied, so its
//!   core's next LSN is the last applied LSN + 1), finishes recovery (CLOCC's queue from the
//!   replayed records, sessions restarted conservatively) and only then takes commits. On
//!   losing leadership it stops acknowledging at once, and restarts from its disk (its core
//!   finished recovery and holds prepared commits that will never be durable).
//!
//! # What is not here yet
//!
//! - The TCP transport and `thor server --group` do not run a [`Member`] yet; thor-server's
//!   `GroupEngine` (threads, real files, an in-process `LocalReplicas` network), the
//!   deterministic tests (`tests/member.rs`) and the simulation drive it.
//! - Only object shipping: the QuickStore study's page modes keep their own logs.
//! - A threaded driver takes the fsync out of its lock with [`Member::defer_sync`]: it flushes
//!   the journal's thor log ([`RaftLog::shared_journal`], whose group commit shares one fsync
//!   among concurrent appenders) and reports the durable LSN ([`Replica::persisted`],
//!   [`Member::persisted`]). Installing a leader's snapshot and compacting at a checkpoint
//!   still sync on the caller's thread (both rare).
//! - A database image is copied whole (the page file), not as a delta. The tests' harness
//!   and the simulation copy it between disks they reach (`DiskSide::image_into`); between
//!   machines thor-net's `TcpReplicas::fetch_image` streams it in chunks (wire version 10).
//! - The wire format of Raft's messages is here ([`codec`]) and thor-net carries them
//!   (`TcpReplicas`, `ReplicaService`); no CLI and no metrics yet: the engine's job.

pub mod codec;
pub mod error;
pub mod journal;
pub mod limits;
pub mod logger;
pub mod member;
pub mod replica;
pub mod sim;
pub mod storage;

pub use codec::{MessageDecodeError, MessageEncodeError, decode_message, encode_message};
pub use error::{LogError, ProposeError, ReplicaError, StepError};
pub use member::{
    Member, MemberConfig, MemberError, MemberMutant, MemberStatus, MembershipChange, NotAnImageId,
    Out, Phase, Restart,
};
pub use replica::{
    Apply, Committed, Durability, Effects, Mutant, Proposal, Replica, ReplicaConfig, ReplicaStatus,
    Restore, Role, RoleChange, election_timeout_for,
};
pub use storage::{JOURNAL_PREFIX, RaftLog, Recovery, journal_options};
