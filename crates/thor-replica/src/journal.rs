//! The journal: Raft's durable state as records of thor's checksummed [`Log`](thor_storage::Log).
//!
//! Raft's log is not append-only: a follower's uncommitted suffix is replaced when a new leader
//! disagrees with it. thor's log is append-only with consecutive LSNs. So the Raft log is kept
//! as a *journal of changes*, each a thor log record; replaying the records in LSN order
//! rebuilds the state:
//!
//! ```text
//!   ENTRIES(first = i, ...)  : drop every entry with index >= i, then append these
//!   HARD_STATE(term, vote, commit)
//!   CONF_STATE(voters, learners, ...)
//!   BASE(snapshot meta, image, hard state, conf state, every entry kept)
//!                            : forget everything before; start from this
//! ```
//!
//! A BASE record is self-contained, which is what makes compaction safe: the journal writes a
//! BASE (and makes it durable) before asking the thor log to delete segments below it, and
//! replay ignores every record before the first BASE it meets when the log no longer starts
//! at LSN 1 (those records belong to a state the BASE replaced). See [`crate::storage`].
//!
//! # Byte layout (version [`JOURNAL_FORMAT_VERSION`], little-endian)
//!
//! ```text
//!  record     = version:u8 tag:u8 body
//!  ENTRIES    = count:u32 entry*count
//!  HARD_STATE = term:u64 vote:u64 commit:u64
//!  CONF_STATE = conf
//!  BASE       = snap_index:u64 snap_term:u64 snap_conf:conf hard_state conf
//!               image_len:u32 image count:u32 entry*count
//!  entry      = index:u64 term:u64 type:u8 data_len:u32 data context_len:u32 context
//!  conf       = voters:ids learners:ids voters_outgoing:ids learners_next:ids auto_leave:u8
//!  ids        = n:u16 id:u64*n
//! ```
//!
//! The thor log checksums each record, so decoding here only guards against records that are
//! intact but make no sense (a bug or a foreign file): every length is checked against the
//! bytes left and every count against a bound, and a failure is [`DecodeError`], never a panic.

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState};

use crate::limits::{JOURNAL_ENTRIES_PER_RECORD_MAX, REPLICAS_MAX};

/// The version byte every journal record starts with.
pub const JOURNAL_FORMAT_VERSION: u8 = 1;

const TAG_ENTRIES: u8 = 1;
const TAG_HARD_STATE: u8 = 2;
const TAG_CONF_STATE: u8 = 3;
const TAG_BASE: u8 = 4;

/// The most ids a configuration list may hold: voters and learners of a group, old and new
/// during a joint change.
const CONF_IDS_MAX: usize = 4 * REPLICAS_MAX;

/// The most entries a BASE record may hold: every entry kept above the snapshot, which is
/// bounded by the bytes of one record, not by a count; this bound only keeps a corrupt count
/// from asking for a huge allocation (the bytes-left check does the rest).
const BASE_ENTRIES_MAX: usize = 1 << 24;

/// One decoded journal record.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalRecord {
    /// Entries to put at their indexes, replacing any from the first one's index on.
    Entries(Vec<Entry>),
    /// Raft's hard state (term, vote, commit).
    HardState(HardState),
    /// The current membership.
    ConfState(ConfState),
    /// A fresh start: everything Raft needs, superseding all earlier records (boxed: it is
    /// much larger than the others and rare).
    Base(Box<Base>),
}

/// The contents of a BASE record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Base {
    /// The index of the last entry the snapshot covers (0 for a new group).
    pub snapshot_index: u64,
    /// That entry's term.
    pub snapshot_term: u64,
    /// The membership as of the snapshot index.
    pub snapshot_conf: ConfState,
    /// The application's state at the snapshot index (opaque here).
    pub image: Bytes,
    /// Raft's hard state when the BASE was written.
    pub hard_state: HardState,
    /// The membership when the BASE was written (later than the snapshot's if a change
    /// committed since).
    pub conf_state: ConfState,
    /// Every entry kept above the snapshot index, in order.
    pub entries: Vec<Entry>,
}

/// A journal record that is intact but malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The bytes an entry takes in a record.
pub fn entry_encoded_len(e: &Entry) -> usize {
    8 + 8 + 1 + 4 + e.data.len() + 4 + e.context.len()
}

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    put_u64(out, e.index);
    put_u64(out, e.term);
    out.push(e.entry_type as u8);
    // Entry payloads are bounded by PROPOSAL_BYTES_MAX (far below 4 GiB) before they exist.
    put_u32(out, u32::try_from(e.data.len()).expect("entry data below 4 GiB"));
    out.extend_from_slice(&e.data);
    put_u32(out, u32::try_from(e.context.len()).expect("entry context below 4 GiB"));
    out.extend_from_slice(&e.context);
}

fn put_ids(out: &mut Vec<u8>, ids: &[u64]) {
    put_u16(out, u16::try_from(ids.len()).expect("membership lists are small"));
    for id in ids {
        put_u64(out, *id);
    }
}

fn put_conf(out: &mut Vec<u8>, c: &ConfState) {
    put_ids(out, &c.voters);
    put_ids(out, &c.learners);
    put_ids(out, &c.voters_outgoing);
    put_ids(out, &c.learners_next);
    out.push(u8::from(c.auto_leave));
}

fn put_hard_state(out: &mut Vec<u8>, hs: &HardState) {
    put_u64(out, hs.term);
    put_u64(out, hs.vote);
    put_u64(out, hs.commit);
}

/// Encodes an ENTRIES record (at most [`JOURNAL_ENTRIES_PER_RECORD_MAX`] entries).
pub fn encode_entries(entries: &[Entry]) -> Vec<u8> {
    assert!(!entries.is_empty() && entries.len() <= JOURNAL_ENTRIES_PER_RECORD_MAX);
    let len: usize = entries.iter().map(entry_encoded_len).sum();
    let mut out = Vec::with_capacity(6 + len);
    out.push(JOURNAL_FORMAT_VERSION);
    out.push(TAG_ENTRIES);
    put_u32(&mut out, entries.len() as u32);
    for e in entries {
        put_entry(&mut out, e);
    }
    out
}

/// Encodes a HARD_STATE record.
pub fn encode_hard_state(hs: &HardState) -> Vec<u8> {
    let mut out = vec![JOURNAL_FORMAT_VERSION, TAG_HARD_STATE];
    put_hard_state(&mut out, hs);
    out
}

/// Encodes a CONF_STATE record.
pub fn encode_conf_state(c: &ConfState) -> Vec<u8> {
    let mut out = vec![JOURNAL_FORMAT_VERSION, TAG_CONF_STATE];
    put_conf(&mut out, c);
    out
}

/// The bytes a BASE record will take, to check it against the record bound before encoding.
pub fn base_encoded_len(b: &Base) -> usize {
    let conf = |c: &ConfState| {
        8 + 8
            * (c.voters.len() + c.learners.len() + c.voters_outgoing.len() + c.learners_next.len())
            + 1
    };
    2 + 16
        + conf(&b.snapshot_conf)
        + 24
        + conf(&b.conf_state)
        + 4
        + b.image.len()
        + 4
        + b.entries.iter().map(entry_encoded_len).sum::<usize>()
}

/// Encodes a BASE record.
pub fn encode_base(b: &Base) -> Vec<u8> {
    let mut out = Vec::with_capacity(base_encoded_len(b));
    out.push(JOURNAL_FORMAT_VERSION);
    out.push(TAG_BASE);
    put_u64(&mut out, b.snapshot_index);
    put_u64(&mut out, b.snapshot_term);
    put_conf(&mut out, &b.snapshot_conf);
    put_hard_state(&mut out, &b.hard_state);
    put_conf(&mut out, &b.conf_state);
    put_u32(&mut out, u32::try_from(b.image.len()).expect("image below SNAPSHOT_BYTES_MAX"));
    out.extend_from_slice(&b.image);
    put_u32(&mut out, u32::try_from(b.entries.len()).expect("entries fit one record"));
    for e in &b.entries {
        put_entry(&mut out, e);
    }
    out
}

/// A checked reader over a record's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let left = self.bytes.len() - self.at;
        if n > left {
            return Err(DecodeError(format!("{what}: needs {n} bytes, {left} left")));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("took 4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("took 8 bytes")))
    }
    fn bytes(&mut self, what: &str) -> Result<Bytes, DecodeError> {
        let n = self.u32(what)? as usize;
        Ok(Bytes::copy_from_slice(self.take(n, what)?))
    }
    fn ids(&mut self, what: &str) -> Result<Vec<u64>, DecodeError> {
        let n = self.u16(what)? as usize;
        if n > CONF_IDS_MAX {
            return Err(DecodeError(format!("{what}: {n} ids, at most {CONF_IDS_MAX}")));
        }
        (0..n).map(|_| self.u64(what)).collect()
    }
    fn conf(&mut self) -> Result<ConfState, DecodeError> {
        Ok(ConfState {
            voters: self.ids("voters")?,
            learners: self.ids("learners")?,
            voters_outgoing: self.ids("outgoing voters")?,
            learners_next: self.ids("next learners")?,
            auto_leave: match self.u8("auto_leave")? {
                0 => false,
                1 => true,
                b => return Err(DecodeError(format!("auto_leave byte {b}"))),
            },
            ..ConfState::default()
        })
    }
    fn hard_state(&mut self) -> Result<HardState, DecodeError> {
        Ok(HardState {
            term: self.u64("term")?,
            vote: self.u64("vote")?,
            commit: self.u64("commit")?,
            ..HardState::default()
        })
    }
    fn entry(&mut self) -> Result<Entry, DecodeError> {
        Ok(Entry {
            index: self.u64("entry index")?,
            term: self.u64("entry term")?,
            entry_type: match self.u8("entry type")? {
                0 => EntryType::EntryNormal,
                1 => EntryType::EntryConfChange,
                2 => EntryType::EntryConfChangeV2,
                t => return Err(DecodeError(format!("entry type {t}"))),
            },
            data: self.bytes("entry data")?,
            context: self.bytes("entry context")?,
            ..Entry::default()
        })
    }
    /// `count` entries with consecutive indexes.
    fn entries(&mut self, count: usize) -> Result<Vec<Entry>, DecodeError> {
        // Each entry takes at least 25 bytes: a count beyond what is left is a lie.
        if count > (self.bytes.len() - self.at) / 25 {
            return Err(DecodeError(format!("{count} entries do not fit the record")));
        }
        let mut out: Vec<Entry> = Vec::with_capacity(count);
        for _ in 0..count {
            let e = self.entry()?;
            if let Some(prev) = out.last()
                && (e.index != prev.index + 1 || e.term < prev.term)
            {
                return Err(DecodeError(format!(
                    "entry {} (term {}) after entry {} (term {})",
                    e.index, e.term, prev.index, prev.term
                )));
            }
            out.push(e);
        }
        Ok(out)
    }
    fn end(&self) -> Result<(), DecodeError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(DecodeError(format!("{} bytes after the record", self.bytes.len() - self.at)))
        }
    }
}

/// Decodes one journal record.
pub fn decode(bytes: &[u8]) -> Result<JournalRecord, DecodeError> {
    let mut c = Cursor { bytes, at: 0 };
    let version = c.u8("version")?;
    if version != JOURNAL_FORMAT_VERSION {
        return Err(DecodeError(format!(
            "journal format version {version}; this build reads {JOURNAL_FORMAT_VERSION}"
        )));
    }
    let rec = match c.u8("tag")? {
        TAG_ENTRIES => {
            let n = c.u32("entry count")? as usize;
            if n == 0 || n > JOURNAL_ENTRIES_PER_RECORD_MAX {
                return Err(DecodeError(format!("{n} entries in one record")));
            }
            JournalRecord::Entries(c.entries(n)?)
        }
        TAG_HARD_STATE => JournalRecord::HardState(c.hard_state()?),
        TAG_CONF_STATE => JournalRecord::ConfState(c.conf()?),
        TAG_BASE => {
            let snapshot_index = c.u64("snapshot index")?;
            let snapshot_term = c.u64("snapshot term")?;
            let snapshot_conf = c.conf()?;
            let hard_state = c.hard_state()?;
            let conf_state = c.conf()?;
            let image = c.bytes("snapshot image")?;
            let n = c.u32("entry count")? as usize;
            if n > BASE_ENTRIES_MAX {
                return Err(DecodeError(format!("{n} entries in a base record")));
            }
            let entries = c.entries(n)?;
            if let Some(first) = entries.first()
                && first.index != snapshot_index + 1
            {
                return Err(DecodeError(format!(
                    "base at snapshot index {snapshot_index} keeps entries from {}",
                    first.index
                )));
            }
            JournalRecord::Base(Box::new(Base {
                snapshot_index,
                snapshot_term,
                snapshot_conf,
                image,
                hard_state,
                conf_state,
                entries,
            }))
        }
        t => return Err(DecodeError(format!("unknown journal record tag {t}"))),
    };
    c.end()?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry { index, term, data: Bytes::copy_from_slice(data), ..Entry::default() }
    }

    fn conf(voters: &[u64]) -> ConfState {
        ConfState { voters: voters.to_vec(), ..ConfState::default() }
    }

    #[test]
    fn every_record_kind_round_trips() {
        let hs = HardState { term: 4, vote: 2, commit: 9, ..HardState::default() };
        let mut cc = conf(&[1, 2, 3]);
        cc.learners = vec![4];
        cc.auto_leave = true;
        let mut es = vec![entry(7, 3, b"a"), entry(8, 4, b""), entry(9, 4, b"ccc")];
        es[1].entry_type = EntryType::EntryConfChangeV2;
        es[2].context = Bytes::from_static(b"ctx");
        let base = Base {
            snapshot_index: 6,
            snapshot_term: 3,
            snapshot_conf: conf(&[1, 2, 3]),
            image: Bytes::from_static(b"image"),
            hard_state: hs.clone(),
            conf_state: cc.clone(),
            entries: es.clone(),
        };
        assert_eq!(encode_base(&base).len(), base_encoded_len(&base));
        for (bytes, want) in [
            (encode_entries(&es), JournalRecord::Entries(es.clone())),
            (encode_hard_state(&hs), JournalRecord::HardState(hs.clone())),
            (encode_conf_state(&cc), JournalRecord::ConfState(cc.clone())),
            (encode_base(&base), JournalRecord::Base(Box::new(base.clone()))),
        ] {
            assert_eq!(decode(&bytes).unwrap(), want);
        }
    }

    #[test]
    fn entries_that_do_not_continue_each_other_are_refused() {
        let mut bytes = encode_entries(&[entry(7, 3, b"a"), entry(8, 3, b"b")]);
        // The second entry's index sits after: version, tag, count, first entry (8+8+1+4+1+4).
        let at = 2 + 4 + 26;
        bytes[at..at + 8].copy_from_slice(&10u64.to_le_bytes());
        assert!(decode(&bytes).unwrap_err().0.contains("after entry 7"));
    }

    proptest! {
        /// Untrusted bytes never panic the decoder, and a record cut anywhere is refused.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn a_cut_record_is_refused(cut in 0usize..60, data in proptest::collection::vec(any::<u8>(), 0..20)) {
            let bytes = encode_entries(&[entry(1, 1, &data), entry(2, 1, b"x")]);
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(decode(&bytes[..cut]).is_err());
        }
    }
}
