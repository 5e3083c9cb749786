//! The server's counters as a `Stats` reply carries them.
//!
//! The body is a count `F: u16` followed by `F` little-endian u64 words, one per counter in the
//! order of the fields of [`ServerStats`]; ratios are IEEE-754 doubles sent as their bits.
//! Counters are only ever appended to the list, so a client that knows fewer counters than a
//! server sends reads the ones it knows and skips the rest (up to [`STATS_FIELDS_MAX`]).

use crate::codec::{Put, Reader};
use crate::error::WireError;
use crate::limits::STATS_FIELDS_MAX;

/// A value of one counter: how it travels as a u64 word.
trait StatWord: Copy {
    fn to_word(self) -> u64;
    fn from_word(w: u64) -> Self;
}

impl StatWord for u64 {
    fn to_word(self) -> u64 {
        self
    }
    fn from_word(w: u64) -> Self {
        w
    }
}

impl StatWord for f64 {
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    fn from_word(w: u64) -> Self {
        f64::from_bits(w)
    }
}

/// One counter's value, for printing every counter without naming each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatValue {
    /// A count.
    Count(u64),
    /// A ratio or mean.
    Ratio(f64),
}

trait ToStatValue {
    fn value(self) -> StatValue;
}

impl ToStatValue for u64 {
    fn value(self) -> StatValue {
        StatValue::Count(self)
    }
}

impl ToStatValue for f64 {
    fn value(self) -> StatValue {
        StatValue::Ratio(self)
    }
}

macro_rules! server_stats {
    ($( $(#[doc = $doc:literal])* $field:ident : $ty:ident, )*) => {
        /// Counters of a server: its engine's (`thor_server::EngineStats`) followed by its
        /// sessions' and connections'.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct ServerStats {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl ServerStats {
            /// Counters this version knows, in wire order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Each counter's documentation, in wire order (for metrics exporters' help text).
            pub const HELP: &'static [&'static str] = &[$(concat!($($doc),*).trim_ascii()),*];

            /// Every counter with its name, in wire order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, StatValue)> {
                [$( (stringify!($field), ToStatValue::value(self.$field)) ),*].into_iter()
            }

            pub(crate) fn encode(&self, out: &mut Vec<u8>) {
                out.put_u16(Self::FIELDS.len() as u16);
                $( out.put_u64(StatWord::to_word(self.$field)); )*
            }

            pub(crate) fn decode(r: &mut Reader) -> Result<ServerStats, WireError> {
                let n = r.count16(STATS_FIELDS_MAX, 8, "stats fields")?;
                if n < Self::FIELDS.len() {
                    return Err(WireError::BadValue {
                        what: "stats fields",
                        why: "fewer counters than this protocol version has",
                    });
                }
                let s = ServerStats {
                    $( $field: <$ty as StatWord>::from_word(r.u64(stringify!($field))?), )*
                };
                r.skip((n - Self::FIELDS.len()) * 8, "stats fields")?;
                Ok(s)
            }
        }
    };
}

server_stats! {
    /// Commits acknowledged.
    commits: u64,
    /// Object versions committed (excluding created objects).
    versions_committed: u64,
    /// Objects created.
    objects_created: u64,
    /// Commits refused as invalid.
    commits_refused: u64,
    /// Record bytes appended to the log.
    log_bytes: u64,
    /// Log fsyncs.
    log_fsyncs: u64,
    /// Mean commits sharing one log fsync (group commit).
    commits_per_fsync: f64,
    /// Bytes charged to the MOB now.
    mob_bytes: u64,
    /// Versions in the MOB now.
    mob_entries: u64,
    /// Fetches served by the engine.
    fetches: u64,
    /// MOB versions applied to fetched pages.
    fetch_versions_applied: u64,
    /// Page cache hits.
    cache_hits: u64,
    /// Page cache misses.
    cache_misses: u64,
    /// Pages read from disk for fetches.
    fetch_reads: u64,
    /// Pages read from disk by the flusher before installing into them.
    installation_reads: u64,
    /// Pages read from disk to validate commits.
    validation_reads: u64,
    /// Flusher rounds.
    flush_rounds: u64,
    /// Pages written by the flusher.
    pages_written: u64,
    /// Versions installed by the flusher.
    versions_installed: u64,
    /// Versions installed per page written: write absorption.
    write_absorption: f64,
    /// Commits that waited for MOB space.
    mob_waits: u64,
    /// The current checkpoint (log records below it are installed).
    checkpoint: u64,
    /// Pages allocated (the tail page id).
    pages_allocated: u64,
    /// Sessions (connections) open now.
    sessions_open: u64,
    /// Sessions opened since the server started.
    sessions_opened: u64,
    /// Connections refused because the server had as many as it allows.
    sessions_refused: u64,
    /// Requests handled.
    requests: u64,
    /// Connections closed because of a protocol error (bad frame, malformed message, ...).
    protocol_errors: u64,
    /// `Hello`s refused for a wrong token.
    auth_failures: u64,
    /// Invalidation acks received.
    acks_received: u64,
    /// Discarded-page notices received.
    discarded_pages_received: u64,
    /// Frame bytes received from clients over the network.
    bytes_received: u64,
    /// Frame bytes sent to clients over the network.
    bytes_sent: u64,
    /// Commits refused by concurrency control: an object used was in the client's invalid set.
    refused_stale: u64,
    /// Refused: timestamp below the validation queue's threshold.
    refused_threshold: u64,
    /// Refused by validation-queue rule 1 (an earlier committing transaction wrote a read object).
    refused_rule1: u64,
    /// Refused by rule 2a (a later transaction read a written object).
    refused_rule2a: u64,
    /// Refused by rule 2b (a later transaction wrote a read object).
    refused_rule2b: u64,
    /// Transactions that failed rule 2 at their first timestamp and passed at a later one.
    retried_passed: u64,
    /// Read-only transactions validated (and committed without a log record).
    read_only_validated: u64,
    /// Objects added to clients' invalid sets.
    invalidations_added: u64,
    /// Invalidations sent on replies.
    invalidations_sent: u64,
    /// Invalidations acknowledged.
    invalidations_acked: u64,
    /// Unacknowledged invalidations now, all clients.
    invalid_entries: u64,
    /// Page entries in all clients' directories now.
    directory_entries: u64,
    /// Times a directory was coarsened.
    directories_coarsened: u64,
    /// Transactions in the validation queue now.
    vq_len: u64,
    /// Sessions expired for too many unacknowledged invalidations.
    sessions_expired: u64,
    /// 1 when the page cache is exclusive (DEMOTE), 0 when inclusive, as set now.
    page_cache_exclusive: u64,
    /// Demotions of pages the page cache held: reordered, no data.
    demotions_reordered: u64,
    /// Demotions that brought a page's image into the page cache.
    demotions_stored: u64,
    /// Demoted-page notices received (each also a discarded page).
    demote_notices: u64,
    /// Demoted pages whose bytes the server asked for.
    demotions_wanted: u64,
    /// Demoted page data refused: the page changed since the client fetched it, the bytes are
    /// not the ones sent, or they were not asked for.
    demotions_refused: u64,
    /// Bytes of demoted pages received.
    demoted_bytes: u64,
    /// Two-phase commit: parts of transactions over several servers prepared here.
    twopc_prepared: u64,
    /// Two-phase commit: read-only parts validated here (no phase two).
    twopc_read_only: u64,
    /// Two-phase commit: transactions this server decided to commit, as coordinator.
    twopc_decided_commit: u64,
    /// Two-phase commit: transactions this server decided to abort, as coordinator.
    twopc_decided_abort: u64,
    /// Two-phase commit: parts committed here as a participant.
    twopc_parts_committed: u64,
    /// Two-phase commit: parts aborted here as a participant (or the coordinator's own).
    twopc_parts_aborted: u64,
    /// Two-phase commit: parts prepared here and not yet decided, now.
    twopc_in_doubt: u64,
    /// Two-phase commit: transactions this server coordinates now.
    twopc_coordinating: u64,
    /// Two-phase commit: presumed-abort answers about transactions unknown here.
    twopc_presumed_aborts: u64,
    /// The server's commit mode (`CommitMode::code`: 0 obj, 1 pd-redo, 2 pd-esm, 3 sd-esm,
    /// 4 sl-esm, 5 wpl).
    commit_mode: u64,
    /// Page-based commits acknowledged.
    page_commits: u64,
    /// Page records received (at commit and before).
    page_records: u64,
    /// Page records received before commit (the client's recovery buffer made room).
    page_records_early: u64,
    /// Bytes of page records received.
    page_record_bytes: u64,
    /// Dirty pages received whole (ESM, WPL).
    pages_shipped: u64,
    /// Pages read from disk to apply page records to (REDO).
    redo_reads: u64,
    /// Whole-page logging: page images appended to the log.
    wpl_images: u64,
    /// Whole-page logging: checkpoint records (the WPL table) appended.
    wpl_checkpoints: u64,
    /// Whole-page logging: copies that left the WPL table because their page went home.
    wpl_installed: u64,
    /// Whole-page logging: copies recovery put back (their page was not home at the crash).
    wpl_restored: u64,
    /// Whole-page logging: commits refused because the page was written since the client's
    /// copy (the page rule; also counted in refused_stale).
    wpl_page_rule_refusals: u64,
    /// Whole-page logging: copies in the WPL table now.
    wpl_table: u64,
    /// Dirty pages received before commit, stolen from a client's memory (ESM, WPL; also
    /// counted in pages_shipped).
    pages_early: u64,
    /// `Prefetch` requests served (version 4; each also counted in fetches).
    prefetch_requests: u64,
    /// Pages sent beyond the asked ones by prefetch (each registered in the client's
    /// directory as a fetched page is).
    pages_prefetched: u64,
    /// Prefetch candidates passed over because only a disk read would have brought them.
    prefetch_uncached: u64,
    /// Nanoseconds a network driver spent serving fetch (and prefetch) requests: from the
    /// decoded request handed to the engine to its reply handed to the connection's writer
    /// (the core's step, the page-cache lookup, the page copy, any disk read and the wake-up
    /// after it). The in-process transport does not count here.
    fetch_service_ns: u64,
    /// Fetch (and prefetch) requests timed in fetch_service_ns.
    fetches_served: u64,
    /// Nanoseconds the engine spent reading pages from disk for fetches and validation
    /// (fetch_reads and validation_reads), timed around each read.
    page_read_ns: u64,
    /// The server's health now: 0 serving, 1 failed (a write or fsync of its log or page file
    /// failed: it refuses commits and new sessions until restarted), 2 serving read-only.
    health: u64,
    /// Storage failures since the server started (0 or 1: the first one stops all writing).
    storage_failures: u64,
    /// Connections refused because the server's storage had failed.
    sessions_refused_failed: u64,
    /// Seconds since the server started, now.
    uptime_s: u64,
    /// The server's version now, as major * 1000000 + minor * 1000 + patch.
    server_version: u64,
    /// Bytes of the database's files on disk now (page file, log, superblock, double-write
    /// buffer).
    database_bytes: u64,
    /// Bytes of log segments on disk now.
    log_disk_bytes: u64,
    /// The MOB's budget in bytes (mob_bytes over this is how full it is).
    mob_bytes_max: u64,
    /// Transactions clients aborted themselves because an invalidation named an object they
    /// used (reported on their next request, version 6): conflicts the refusal counters do
    /// not see.
    client_invalidation_aborts: u64,
    /// Attempts clients ran again after a conflict (reported, version 6).
    client_retries: u64,
    /// Fair retries: claims given to sessions that kept losing on an object (each holds back
    /// other sessions' commits that write the object until the holder commits).
    fair_claims: u64,
    /// Fair retries: commits held back because another session's claim covered an object
    /// they write.
    fair_held: u64,
    /// Fair retries: held commits released because their wait ran out before the claim
    /// ended.
    fair_held_timed_out: u64,
    /// Fair retries: claims that ended unused (their holder did not commit in time).
    fair_claims_expired: u64,
    /// Map leaves merged: a commit refused only for map leaves it carried deltas for, whose
    /// deltas were applied to each leaf's newest version (`docs/clocc.md`, "Map leaves").
    leaf_merges: u64,
    /// Commits that carried leaf deltas whose merge was refused (a key read there changed, the
    /// leaf would overflow, or something else was stale): refused as without deltas.
    leaf_merges_refused: u64,
    /// Two-phase transactions this server coordinated that it aborted because the client's
    /// prepare did not come within the prepare wait while participants' votes had.
    twopc_prepares_missed: u64,
    /// Replica groups (version 10): this server's replica id in its group; 0 for a server
    /// that is no replica (every `group_` counter is then 0).
    group_replica_id: u64,
    /// The voters of the group, as this replica applied its membership.
    group_voters: u64,
    /// This replica's role: [`GROUP_ROLE_FOLLOWER`], [`GROUP_ROLE_CANDIDATE`],
    /// [`GROUP_ROLE_PROMOTING`] (leads, not serving yet) or [`GROUP_ROLE_SERVING`].
    group_role: u64,
    /// Its Raft term.
    group_term: u64,
    /// The replica it knows leads the term (0: none known).
    group_leader: u64,
    /// Raft's commit index here: the last entry it knows a majority holds.
    group_commit_index: u64,
    /// The last entry applied here (replayed into its database, or a leader's own).
    group_applied_index: u64,
    /// On a leader: the most entries a voter lacks of the commit index (0 elsewhere).
    group_lag_max: u64,
    /// Times this replica was reopened from its disk since the process started (deposed as
    /// leader, a proposal lost).
    group_restarts: u64,
    /// Database images copied onto this replica (it lagged behind what the journals keep).
    group_images_installed: u64,
}

/// `ServerStats::group_role` of a follower (or a replica added and not yet a voter).
pub const GROUP_ROLE_FOLLOWER: u64 = 1;
/// `ServerStats::group_role` of a candidate (or pre-candidate) in an election.
pub const GROUP_ROLE_CANDIDATE: u64 = 2;
/// `ServerStats::group_role` of a leader that does not serve yet (it replays what was
/// committed before its term, or reads its tail page).
pub const GROUP_ROLE_PROMOTING: u64 = 3;
/// `ServerStats::group_role` of the leader that serves clients.
pub const GROUP_ROLE_SERVING: u64 = 4;

/// [`ServerStats::group_role`] as a word (`-` for a server that is no replica).
pub fn group_role_name(role: u64) -> &'static str {
    match role {
        GROUP_ROLE_FOLLOWER => "follower",
        GROUP_ROLE_CANDIDATE => "candidate",
        GROUP_ROLE_PROMOTING => "promoting",
        GROUP_ROLE_SERVING => "leader",
        _ => "-",
    }
}

/// `ServerStats::health` of a server that serves.
pub const HEALTH_SERVING: u64 = 0;
/// `ServerStats::health` of a server whose storage failed.
pub const HEALTH_FAILED: u64 = 1;
/// `ServerStats::health` of a server serving a database opened read-only.
pub const HEALTH_READ_ONLY: u64 = 2;

/// A version `major.minor.patch` as [`ServerStats::server_version`] carries it.
pub const fn version_number(major: u64, minor: u64, patch: u64) -> u64 {
    major * 1_000_000 + minor * 1_000 + patch
}

/// [`ServerStats::server_version`] as `major.minor.patch`.
pub fn version_text(n: u64) -> String {
    format!("{}.{}.{}", n / 1_000_000, n / 1_000 % 1_000, n % 1_000)
}

const _: () = assert!(ServerStats::FIELDS.len() <= STATS_FIELDS_MAX);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_as_numbers() {
        assert_eq!(version_text(version_number(0, 1, 0)), "0.1.0");
        assert_eq!(version_text(version_number(12, 345, 678)), "12.345.678");
    }
}
