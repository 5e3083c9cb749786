//! [`RaftLog`]: raft-rs's [`Storage`] over thor's checksummed log, durable and recovered.
//!
//! # What is kept where
//!
//! ```text
//!   memory (the index)                      disk (thor Log, prefix "raft")
//!   ───────────────────                      ──────────────────────────────
//!   hard state, conf state                  BASE  (snapshot meta + image + state + entries)
//!   snapshot meta + image                   ENTRIES / HARD_STATE / CONF_STATE ...
//!   entries (snapshot_index, last_index]    ENTRIES / HARD_STATE ...   (replayed in LSN order)
//! ```
//!
//! Every change is first applied to the in-memory state and appended (buffered) to the
//! journal; [`RaftLog::sync`] makes everything appended durable with one fsync. raft-rs reads
//! only the in-memory state, which holds the entries above the snapshot; the thor log's records
//! are read only by recovery. Memory is bounded by compaction: the driver compacts at its
//! applied index ([`RaftLog::compact`]) and the entries below it leave memory and, once their
//! segments are whole, the disk.
//!
//! # Recovery
//!
//! [`RaftLog::open`] opens the thor log (which cuts a torn tail as it always does: a flush
//! batch that was not fsynced loses a suffix of whole records, never part of one) and replays
//! the journal. The rules that make a replay after any crash equal to a state that was reached
//! before it, with nothing acknowledged missing:
//!
//! 1. A ready's entries are journalled before its hard state, and both in one flush batch, so a
//!    surviving hard state implies its entries survived: the recovered commit index never
//!    points past the recovered last index.
//! 2. Nothing is reported persisted to raft-rs (and so to a peer, in an append response or a
//!    vote) before `sync` returned.
//! 3. Compaction journals a BASE record, syncs it, and only then asks the log to delete the
//!    segments below it. If the journal no longer starts at LSN 1, replay ignores the records
//!    before its first BASE; a journal that does not start at 1 and holds no BASE is refused.
//!
//! *Invariant:* `snapshot_index < first entry's index`, entries are consecutive, terms never
//! decrease along them, and `hard_state.commit <= last_index()` (checked on open).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};
use thor_core::ids::Lsn;
use thor_storage::{Disk, Log, LogOptions, OpenReport};

use crate::error::LogError;
use crate::journal::{self, Base, JournalRecord};
use crate::limits::{JOURNAL_ENTRIES_PER_RECORD_MAX, JOURNAL_RECORD_BYTES_MAX, SNAPSHOT_BYTES_MAX};

/// The file-name prefix of a replica's journal segments, so that it can share a directory with
/// a server's own log (`log.*`) and page file.
pub const JOURNAL_PREFIX: &str = "raft";

/// The journal's thor log options: its own prefix, thor's defaults otherwise.
pub fn journal_options() -> LogOptions {
    LogOptions { prefix: JOURNAL_PREFIX.to_string(), ..LogOptions::default() }
}

/// What [`RaftLog::open`] found.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// What the thor log reported (a torn tail cut, a header rewritten, ...).
    pub log: OpenReport,
    /// Journal records replayed.
    pub records_replayed: u64,
    /// Records skipped because a later BASE superseded them (left by compaction).
    pub records_superseded: u64,
}

/// A replica's durable Raft state: implements raft-rs's [`Storage`]. See the module docs.
#[derive(Debug)]
pub struct RaftLog {
    /// The journal, shared with a threaded driver that fsyncs it outside its lock
    /// ([`RaftLog::shared_journal`]): the thor log's own group commit shares one fsync among
    /// everyone who appended meanwhile.
    log: Arc<Log>,
    /// Raft's term, vote and commit index as last journalled.
    hard_state: HardState,
    /// The current membership as last journalled.
    conf_state: ConfState,
    /// The snapshot: the metadata of the last compaction or installed snapshot, and the
    /// application's image at its index.
    snapshot: Snapshot,
    /// The entries above the snapshot index, consecutive.
    entries: VecDeque<Entry>,
    /// What recovery found.
    recovery: Recovery,
}

/// The in-memory state replay builds.
#[derive(Default)]
struct Replay {
    hard_state: HardState,
    conf_state: ConfState,
    snapshot: Snapshot,
    entries: VecDeque<Entry>,
}

/// A raft-rs snapshot with this metadata and image.
fn snapshot_of(index: u64, term: u64, conf: ConfState, image: Bytes) -> Snapshot {
    let mut meta = raft::eraftpb::SnapshotMetadata { index, term, ..Default::default() };
    meta.set_conf_state(conf);
    let mut snapshot = Snapshot { data: image, ..Snapshot::default() };
    snapshot.set_metadata(meta);
    snapshot
}

impl Replay {
    fn from_base(b: Base) -> Replay {
        let snapshot = snapshot_of(b.snapshot_index, b.snapshot_term, b.snapshot_conf, b.image);
        Replay {
            hard_state: b.hard_state,
            conf_state: b.conf_state,
            snapshot,
            entries: b.entries.into(),
        }
    }

    fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn last_index(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    /// Puts `es` at their indexes, dropping every entry from the first one's index on.
    fn put(&mut self, es: Vec<Entry>) -> Result<(), String> {
        let Some(first) = es.first() else { return Ok(()) };
        let (first, snap, last) = (first.index, self.snapshot_index(), self.last_index());
        if first <= snap || first > last + 1 {
            return Err(format!("entries from {first} do not continue a log of ({snap}, {last}]"));
        }
        // The term of the entry before `first` (checked before anything changes, so that a
        // refused call leaves the state as it was).
        let keep = (first - snap - 1) as usize;
        let prev_term = match keep {
            0 => self.snapshot.get_metadata().term,
            k => self.entries[k - 1].term,
        };
        if es[0].term < prev_term {
            return Err(format!("entry {first} has term {} below {prev_term}", es[0].term));
        }
        self.entries.truncate(keep);
        self.entries.extend(es);
        Ok(())
    }
}

impl RaftLog {
    /// Opens (or creates, empty) the journal on `disk` and recovers the state from it.
    /// An empty journal is a replica that has never been part of a group: it waits for a
    /// leader to send it entries or a snapshot (see [`RaftLog::bootstrap`] for a founding
    /// member).
    pub fn open(disk: Arc<dyn Disk>, opts: LogOptions) -> Result<RaftLog, LogError> {
        let (log, report) = Log::open_streaming(disk, opts)?;
        let first = log.first_lsn();
        let mut state = Replay::default();
        let mut seen_base = first == Lsn(1);
        let (mut replayed, mut superseded) = (0u64, 0u64);
        let mut reader = log.reader(first)?;
        while let Some((lsn, payload)) = reader.next()? {
            let malformed = |why: String| LogError::Malformed { lsn: lsn.0, why };
            let rec = journal::decode(payload).map_err(|e| malformed(e.0))?;
            match rec {
                JournalRecord::Base(b) => {
                    state = Replay::from_base(*b);
                    seen_base = true;
                }
                _ if !seen_base => {
                    superseded += 1;
                    continue;
                }
                JournalRecord::Entries(es) => state.put(es).map_err(malformed)?,
                JournalRecord::HardState(hs) => state.hard_state = hs,
                JournalRecord::ConfState(cs) => state.conf_state = cs,
            }
            replayed += 1;
        }
        if !seen_base {
            return Err(LogError::Malformed {
                lsn: first.0,
                why: "the journal was compacted but holds no base record".to_string(),
            });
        }
        if state.hard_state.commit > state.last_index() {
            return Err(LogError::Malformed {
                lsn: log.next_lsn().0,
                why: format!(
                    "commit index {} past the last entry {}",
                    state.hard_state.commit,
                    state.last_index()
                ),
            });
        }
        let recovery =
            Recovery { log: report, records_replayed: replayed, records_superseded: superseded };
        Ok(RaftLog {
            log: Arc::new(log),
            hard_state: state.hard_state,
            conf_state: state.conf_state,
            snapshot: state.snapshot,
            entries: state.entries,
            recovery,
        })
    }

    /// Opens the journal of a founding member of a group of `voters` (all founding members
    /// start from the same state: no entries, this membership): writes and syncs a BASE with
    /// that membership if the journal is empty. A journal that already holds state is opened
    /// as it is (a restart), so calling this on every start is safe.
    pub fn bootstrap(
        disk: Arc<dyn Disk>,
        opts: LogOptions,
        voters: &[u64],
    ) -> Result<RaftLog, LogError> {
        if voters.is_empty() || voters.contains(&0) {
            return Err(LogError::Invalid(format!("founding voters {voters:?}")));
        }
        let mut log = RaftLog::open(disk, opts)?;
        if log.recovery.records_replayed == 0 && log.log.next_lsn() == Lsn(1) {
            let conf = ConfState { voters: voters.to_vec(), ..ConfState::default() };
            let base =
                Base { snapshot_conf: conf.clone(), conf_state: conf.clone(), ..Base::default() };
            log.log.append(&journal::encode_base(&base))?;
            log.sync()?;
            log.conf_state = conf.clone();
            log.snapshot.mut_metadata().set_conf_state(conf);
        }
        Ok(log)
    }

    /// What recovery found.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The last journalled hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The last journalled membership.
    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The current snapshot (metadata and image).
    pub fn snapshot_ref(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The snapshot's index: every entry at or below it is compacted.
    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    /// The index of the last entry (the snapshot index if none is kept).
    pub fn last_index_now(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    /// The thor log under the journal, for a driver that makes it durable outside its own
    /// lock: `Log::flush` on this handle, then [`crate::Replica::persisted`] with its
    /// `durable_lsn`. Appends stay the journal's (through raft-rs's readies).
    pub fn shared_journal(&self) -> Arc<Log> {
        self.log.clone()
    }

    /// The last journal LSN appended (durable or not): a ready's records are all at or below
    /// it once journalled.
    pub fn appended_lsn(&self) -> Lsn {
        Lsn(self.log.next_lsn().0.saturating_sub(1))
    }

    /// Entries kept in memory (and in the journal) above the snapshot.
    pub fn entries_kept(&self) -> usize {
        self.entries.len()
    }

    /// The thor log under the journal (for its counters and extent).
    pub fn journal(&self) -> &Log {
        &self.log
    }

    /// Puts `es` at their indexes (replacing a conflicting suffix) and journals them
    /// (buffered: durable after [`RaftLog::sync`]).
    pub fn append(&mut self, es: &[Entry]) -> Result<(), LogError> {
        if es.is_empty() {
            return Ok(());
        }
        let mut r = Replay {
            hard_state: HardState::default(),
            conf_state: ConfState::default(),
            snapshot: std::mem::take(&mut self.snapshot),
            entries: std::mem::take(&mut self.entries),
        };
        let put = r.put(es.to_vec());
        self.snapshot = r.snapshot;
        self.entries = r.entries;
        put.map_err(LogError::Invalid)?;
        // Records of at most JOURNAL_ENTRIES_PER_RECORD_MAX entries and the record bound, so a
        // torn tail cuts whole records (a prefix of the entries survives).
        let mut start = 0;
        while start < es.len() {
            let mut end = start;
            let mut bytes = 6;
            while end < es.len() && end - start < JOURNAL_ENTRIES_PER_RECORD_MAX {
                let n = journal::entry_encoded_len(&es[end]);
                if end > start && bytes + n > JOURNAL_RECORD_BYTES_MAX {
                    break;
                }
                bytes += n;
                end += 1;
            }
            self.log.append(&journal::encode_entries(&es[start..end]))?;
            start = end;
        }
        Ok(())
    }

    /// Journals Raft's hard state (buffered).
    pub fn set_hard_state(&mut self, hs: HardState) -> Result<(), LogError> {
        if hs.commit > self.last_index_now() {
            return Err(LogError::Invalid(format!(
                "commit {} past the last entry {}",
                hs.commit,
                self.last_index_now()
            )));
        }
        self.log.append(&journal::encode_hard_state(&hs))?;
        self.hard_state = hs;
        Ok(())
    }

    /// Journals the membership (buffered).
    pub fn set_conf_state(&mut self, cs: ConfState) -> Result<(), LogError> {
        self.log.append(&journal::encode_conf_state(&cs))?;
        self.conf_state = cs;
        Ok(())
    }

    /// Makes everything journalled so far durable (one write and fsync of the pending batch).
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.log.flush()?;
        Ok(())
    }

    /// Installs a snapshot received from the leader: everything before is replaced by it.
    /// Journals a BASE (buffered; the caller syncs before reporting it persisted).
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> Result<(), LogError> {
        let meta = snap.get_metadata();
        if meta.index < self.snapshot_index() {
            return Err(LogError::Invalid(format!(
                "snapshot at {} is older than ours at {}",
                meta.index,
                self.snapshot_index()
            )));
        }
        if snap.data.len() > SNAPSHOT_BYTES_MAX {
            return Err(LogError::Invalid(format!(
                "snapshot image of {} bytes over {SNAPSHOT_BYTES_MAX}",
                snap.data.len()
            )));
        }
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(meta.term);
        hs.commit = meta.index;
        let base = Base {
            snapshot_index: meta.index,
            snapshot_term: meta.term,
            snapshot_conf: meta.get_conf_state().clone(),
            image: snap.data.clone(),
            hard_state: hs.clone(),
            conf_state: meta.get_conf_state().clone(),
            entries: Vec::new(),
        };
        self.log.append(&journal::encode_base(&base))?;
        self.conf_state = base.conf_state;
        self.hard_state = hs;
        self.entries.clear();
        self.snapshot = snap;
        Ok(())
    }

    /// Compacts the log at `index` (which the application has applied, with membership `conf`
    /// as of that index), keeping `image` (the application's state at `index`) as the
    /// snapshot a lagging follower will be sent. Journals a self-contained BASE, syncs it, then
    /// lets the thor log delete every whole segment below it.
    pub fn compact(&mut self, index: u64, conf: ConfState, image: Bytes) -> Result<(), LogError> {
        let snap = self.snapshot_index();
        if index <= snap {
            return Ok(());
        }
        if index > self.hard_state.commit {
            return Err(LogError::Invalid(format!(
                "compaction at {index} past the commit index {}",
                self.hard_state.commit
            )));
        }
        if image.len() > SNAPSHOT_BYTES_MAX {
            return Err(LogError::Invalid(format!(
                "snapshot image of {} bytes over {SNAPSHOT_BYTES_MAX}",
                image.len()
            )));
        }
        let drop_n = (index - snap) as usize;
        let term = self.entries[drop_n - 1].term;
        let kept: Vec<Entry> = self.entries.iter().skip(drop_n).cloned().collect();
        let base = Base {
            snapshot_index: index,
            snapshot_term: term,
            snapshot_conf: conf.clone(),
            image: image.clone(),
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
            entries: kept,
        };
        if journal::base_encoded_len(&base) > JOURNAL_RECORD_BYTES_MAX {
            return Err(LogError::Invalid(format!(
                "a base record at {index} would exceed {JOURNAL_RECORD_BYTES_MAX} bytes: \
                 compact after more entries are applied"
            )));
        }
        let lsn = self.log.append(&journal::encode_base(&base))?;
        self.log.flush()?;
        self.entries.drain(..drop_n);
        self.snapshot = snapshot_of(index, term, conf, image);
        // The BASE is durable: the records below it are no longer needed.
        self.log.truncate_before(lsn)?;
        Ok(())
    }
}

fn unavailable() -> raft::Error {
    raft::Error::Store(raft::StorageError::Unavailable)
}

impl Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let snap = self.snapshot_index();
        if low <= snap {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last_index_now() + 1 || low > high {
            return Err(unavailable());
        }
        let from = (low - snap - 1) as usize;
        let to = (high - snap - 1) as usize;
        let mut out: Vec<Entry> = self.entries.range(from..to).cloned().collect();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < meta.index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        match self.entries.get((idx - meta.index - 1) as usize) {
            Some(e) => Ok(e.term),
            None => Err(unavailable()),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snapshot_index() + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index_now())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() < request_index {
            // The application has not compacted that far yet; raft-rs asks again later.
            return Err(raft::Error::Store(raft::StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}
