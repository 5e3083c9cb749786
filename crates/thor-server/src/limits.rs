//! Bounds of the driver, with the reasons for their values, and the core's
//! ([`thor_server_core::limits`], re-exported here so that every bound of a server has one
//! home to look in).

pub use thor_server_core::limits::*;

/// Pages a bulk load keeps in memory (so that references in them can still be patched) before
/// writing the oldest out: 512 MiB of 8 KB pages.
pub const BULK_WINDOW_PAGES: usize = 65_536;

// The core restates the log's figures it budgets with (it cannot depend on thor-storage):
// they must be the log's.
const _: () = assert!(LOG_RECORD_HEADER_BYTES == thor_storage::limits::RECORD_HEADER_BYTES);
const _: () = assert!(LOG_BUFFER_BYTES_DEFAULT == thor_storage::limits::BUFFER_BYTES_MAX_DEFAULT);
const _: () =
    assert!(LOG_RECORD_BYTES_MAX_DEFAULT == thor_storage::limits::RECORD_BYTES_MAX_DEFAULT);
const _: () = assert!(log_record_len(7) == thor_storage::log::record::encoded_len(7));

/// The group engine's default Raft tick (`GroupOptions::tick`). With
/// [`GROUP_ELECTION_TICKS_DEFAULT`] a follower campaigns 0.5 to 1 s after its leader's last
/// heartbeat: failover well under a second at the median on a LAN, while a heartbeat every
/// [`GROUP_HEARTBEAT_TICKS_DEFAULT`] ticks (100 ms) leaves room for scheduling hiccups.
pub const GROUP_TICK_MS_DEFAULT: u64 = 50;

/// In `Durability::Memory`, how often a group engine fsyncs its journal behind the
/// acknowledgements (`GroupOptions::memory_flush`): the window of acknowledged commits a
/// simultaneous power loss of a majority can lose. 10 ms keeps that window at a few hundred
/// commits at most while costing at most a hundred fsyncs a second, off every commit's path.
pub const GROUP_MEMORY_FLUSH_MS_DEFAULT: u64 = 10;

/// Ticks without a leader before a replica campaigns (see [`GROUP_TICK_MS_DEFAULT`]).
pub const GROUP_ELECTION_TICKS_DEFAULT: usize = 10;

/// Ticks between a leader's heartbeats.
pub const GROUP_HEARTBEAT_TICKS_DEFAULT: usize = 2;

/// The largest encoded Raft message a group engine decodes: one append carries at most
/// `thor_replica::limits::APPEND_MESSAGE_BYTES_MAX` bytes of entries, or a single entry of up
/// to `PROPOSAL_BYTES_MAX`, plus its headers. Anything larger is refused unread (and counted).
pub const REPLICA_MESSAGE_BYTES_MAX: usize = thor_replica::limits::PROPOSAL_BYTES_MAX
    + thor_replica::limits::APPEND_MESSAGE_BYTES_MAX as usize
    + 64 * 1024;

/// Disk jobs (install rounds, checkpoints, image fetches) waiting for a group engine's disk
/// thread. The core runs one install round at a time and a member asks for one image at a
/// time, so a handful is all a correct member produces; past it the engine reports a failure
/// rather than queue without bound.
pub const GROUP_DISK_JOBS_MAX: usize = 16;

/// Messages `LocalReplicas` holds for delivery to one in-process replica. Raft resends what
/// matters, so past it a message is dropped and counted, as a full network queue would.
pub const LOCAL_REPLICA_QUEUE_MAX: usize = 8192;

/// The longest an embedded commit to a group engine waits for its answer. A commit is
/// normally answered within a round trip to a majority; a leader that loses its majority steps
/// down within an election timeout (check-quorum), which answers its waiting commits. This
/// bounds the wait should neither happen.
pub const GROUP_COMMIT_WAIT_MAX_MS: u64 = 30_000;
