//! The repair (`thor check --repair DIR`, [`super::repair_and_check`]): sets aside the log records recovery cannot read, so that the
//! database opens again.
//!
//! A record recovery cannot read is one whose checksum passed (the log layer wrote and read
//! it intact) but whose payload the record decoder refuses: a bug of the build that wrote it
//! (issue 30: a read set holding an oref on page 0 was acknowledged, logged, and then refused)
//! or a format from another version. Opening fails on it
//! (`EngineError::UnreadableRecord`, naming its LSN, segment and offset, and this command).
//! The repair:
//!
//! ```text
//!   every record, decoded as recovery and `thor check` decode it
//!      │ one that does not decode:
//!      ▼
//!   thor_server::record::salvage: the record that keeps what is well formed of it
//!      │   (a read set's words that name objects; every object whose frame and oref are
//!      │    whole; an empty commit when nothing can be kept, or a decision cannot be read)
//!      ▼
//!   log.<lsn>.aside       the record's bytes as they were, synced          ┐ before the log
//!   log.<lsn>.aside.txt   what it was, what was set aside, what was kept  ┘ is touched
//!      ▼
//!   the segment rewritten with the salvaged record in place, under the same LSN and batch
//!   index, into `<segment>.repair`, synced, renamed over the segment, the directory synced
//!      ▼
//!   the whole check again: its report is the command's answer
//! ```
//!
//! # What later records may depend on, and the choice made
//!
//! A later record depends on an earlier one only through objects. A version is a whole object,
//! so a later version never depends on the bytes of an earlier one; a read set feeds nothing
//! but concurrency control's validation queue after a restart. What a later record can depend
//! on is an object the earlier one *created*: it may write it, refer to it, or (orefs being
//! allocated in order) create objects after it in the same page. So:
//!
//! - a record whose fault is in its read set (issue 30's bug class) loses nothing committed:
//!   the words that name no object are set aside, everything else is kept, and no later record
//!   can depend on them;
//! - a record from which objects are set aside keeps its place and every later record is
//!   kept. The alternative, cutting the log at the record, would lose every later
//!   acknowledged commit for certain, and could not take back what install rounds already wrote
//!   of them into the page file. A later record that refers to a created object set aside then
//!   holds a dangling reference, which the check after the repair names, record by record; the
//!   objects' bytes are in the aside file for a person to judge.
//!
//! # Crash safety
//!
//! Nothing in the log changes until the aside files are synced. A segment is replaced by a
//! rename of a synced copy, so a crash leaves either the old segment (and running the repair
//! again repairs it again, into new aside files) or the new one. Segments are read whole into
//! memory, one at a time: at most `LogOptions::segment_bytes` plus one flush batch.

use std::fmt::Write as _;

use thor_core::Lsn;
use thor_server::record;
use thor_storage::limits::RECORD_HEADER_BYTES;
use thor_storage::log::inspect::inspect;
use thor_storage::log::record::{Header, encode_into};
use thor_storage::{Disk, FileDisk, LogOptions};
use thor_study::wpl_log;

use super::CheckError;

/// One record the repair set aside.
#[derive(Debug)]
pub struct Repaired {
    /// Its segment file.
    pub segment: String,
    /// The byte offset of its header there.
    pub offset: u64,
    /// Its LSN.
    pub lsn: Lsn,
    /// Why recovery could not read it.
    pub why: String,
    /// What was set aside, one line each.
    pub dropped: Vec<String>,
    /// Whether only read-set words were set aside.
    pub lossless: bool,
    /// The file holding its bytes as they were, and the report beside it.
    pub aside: (String, String),
}

impl Repaired {
    /// The lines that tell a person what was done.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "repaired: log segment {} offset {} (LSN {}): {}",
            self.segment, self.offset, self.lsn, self.why
        )];
        for d in &self.dropped {
            out.push(format!("  set aside: {d}"));
        }
        out.push(if self.lossless {
            "  nothing committed is lost: only read-set words were set aside (they rebuild \
             concurrency control's validation queue after a restart, and no later record can \
             depend on them)"
                .to_string()
        } else {
            "  what was set aside is lost from the database; later records were kept (a later \
             reference to an object set aside is named by the check below)"
                .to_string()
        });
        out.push(format!("  the record's bytes: {}; this report: {}", self.aside.0, self.aside.1));
        out
    }
}

/// A record of the log that recovery cannot read, as found.
struct Bad {
    segment: String,
    offset: u64,
    lsn: Lsn,
    why: String,
    payload: Vec<u8>,
}

/// Finds every record of the log in `disk` that recovery cannot read, sets each aside and
/// writes the salvaged record in its place. Returns what it did (nothing for a log without
/// such records).
pub(super) fn repair(disk: &FileDisk, page_size: usize) -> Result<Vec<Repaired>, CheckError> {
    let opts = LogOptions::default();
    let mut bad = Vec::new();
    let mut wpl = wpl_log::WplObjects::default();
    inspect(disk, &opts, |r| {
        let why = match wpl.feed(r.lsn, r.payload, page_size) {
            Ok(Some(_)) => return,
            Ok(None) => match record::decode_any(r.payload, |_| {}) {
                Ok(_) => return,
                Err(e) => e.to_string(),
            },
            Err(e) => e,
        };
        bad.push(Bad {
            segment: r.segment.to_string(),
            offset: r.offset,
            lsn: r.lsn,
            why,
            payload: r.payload.to_vec(),
        });
    })?;
    let mut done = Vec::new();
    // Segment by segment, the last record of a segment first, so that the offsets of the
    // others stay as found.
    bad.sort_by(|a, b| a.segment.cmp(&b.segment).then(b.offset.cmp(&a.offset)));
    let mut i = 0;
    while i < bad.len() {
        let segment = bad[i].segment.clone();
        let mut bytes = read_file(disk, &segment)?;
        while i < bad.len() && bad[i].segment == segment {
            let b = &bad[i];
            let s = record::salvage(&b.payload);
            let aside = set_aside(disk, b, &s)?;
            replace_record(&mut bytes, b, &s.record)?;
            done.push(Repaired {
                segment: b.segment.clone(),
                offset: b.offset,
                lsn: b.lsn,
                why: b.why.clone(),
                dropped: s.dropped,
                lossless: s.lossless,
                aside,
            });
            i += 1;
        }
        write_segment(disk, &segment, &bytes)?;
    }
    done.sort_by_key(|r| r.lsn);
    Ok(done)
}

/// The whole of file `name`.
fn read_file(disk: &FileDisk, name: &str) -> Result<Vec<u8>, CheckError> {
    let f = disk.open(name, false)?;
    let mut bytes = vec![0u8; f.len()? as usize];
    f.read_exact_at(0, &mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` into a new file `name` (or `name.1`, `name.2`, ... if taken), synced;
/// returns the name used.
fn write_new(disk: &FileDisk, name: &str, bytes: &[u8]) -> Result<String, CheckError> {
    let mut n = 0u32;
    let name = loop {
        let candidate = if n == 0 { name.to_string() } else { format!("{name}.{n}") };
        if !disk.exists(&candidate)? {
            break candidate;
        }
        n += 1;
    };
    let f = disk.open(&name, true)?;
    f.set_len(0)?;
    f.write_at(0, bytes)?;
    f.sync()?;
    Ok(name)
}

/// Keeps the record's bytes and a report of what was set aside beside the log, synced with
/// the directory: `log.<lsn>.aside` and `log.<lsn>.aside.txt`.
fn set_aside(
    disk: &FileDisk,
    b: &Bad,
    s: &record::Salvaged,
) -> Result<(String, String), CheckError> {
    let bytes_file = write_new(disk, &format!("log.{:016x}.aside", b.lsn.0), &b.payload)?;
    let mut text = String::new();
    let _ = writeln!(text, "thor check --repair set aside a log record recovery could not read.");
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "record:   LSN {}, log segment {}, byte offset {}",
        b.lsn, b.segment, b.offset
    );
    let _ = writeln!(text, "          {} bytes, kind {:?}", b.payload.len(), b.payload.first());
    let _ = writeln!(text, "why:      {}", b.why);
    let _ = writeln!(text, "bytes:    {bytes_file} (the record's payload as it was)");
    let _ = writeln!(text);
    let _ = writeln!(text, "set aside:");
    for d in &s.dropped {
        let _ = writeln!(text, "  - {d}");
    }
    for o in &s.dropped_created {
        let _ = writeln!(text, "  - (created object {o}: later records may refer to it)");
    }
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "kept:     a record of {} bytes in its place, under the same LSN",
        s.record.len()
    );
    let _ = writeln!(text);
    if s.lossless {
        let _ = writeln!(
            text,
            "Nothing committed is lost: only read-set words were set aside. A read set rebuilds \
             concurrency control's validation queue after a restart and nothing else, so no \
             later record depends on it."
        );
    } else {
        let _ = writeln!(
            text,
            "What was set aside is lost from the database. Later records were kept: a version \
             is a whole object and never depends on an earlier version, but a later record may \
             refer to an object this record created; `thor check` names every such reference."
        );
    }
    let report_file = write_new(disk, &format!("{bytes_file}.txt"), text.as_bytes())?;
    disk.sync_dir()?;
    Ok((bytes_file, report_file))
}

/// Replaces the record `b` in `segment` (the segment's bytes) by one with payload `payload`,
/// the same LSN and batch index. The records after it move; their bytes do not change (a
/// record's checksum covers its header and payload, not where it lies).
fn replace_record(segment: &mut Vec<u8>, b: &Bad, payload: &[u8]) -> Result<(), CheckError> {
    let at =
        usize::try_from(b.offset).map_err(|_| CheckError::Storage("offset past memory".into()))?;
    let mut head = [0u8; RECORD_HEADER_BYTES];
    let h = segment
        .get(at..at + RECORD_HEADER_BYTES)
        .map(|s| {
            head.copy_from_slice(s);
            Header::parse(&head)
        })
        .filter(|h| h.lsn == b.lsn)
        .ok_or_else(|| {
            CheckError::Storage(format!("the record at LSN {} moved while repairing", b.lsn))
        })?;
    let end = at + RECORD_HEADER_BYTES + h.len as usize;
    let mut new = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
    encode_into(b.lsn, h.batch_index, payload, &mut new);
    segment.splice(at..end, new);
    Ok(())
}

/// Replaces segment `name` by `bytes`: a synced copy renamed over it, the directory synced.
fn write_segment(disk: &FileDisk, name: &str, bytes: &[u8]) -> Result<(), CheckError> {
    let tmp = format!("{name}.repair");
    let f = disk.open(&tmp, true)?;
    f.set_len(0)?;
    f.write_at(0, bytes)?;
    f.sync()?;
    drop(f);
    disk.rename(&tmp, name)?;
    disk.sync_dir()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_record_keeps_its_lsn_and_batch_and_the_rest_moves_intact() {
        let mut seg = vec![7u8; 24];
        let mut recs = Vec::new();
        for (lsn, batch, p) in
            [(5u64, 0u32, vec![1u8; 10]), (6, 1, vec![2; 30]), (7, 0, vec![3; 4])]
        {
            recs.push(seg.len() as u64);
            encode_into(Lsn(lsn), batch, &p, &mut seg);
        }
        let b = Bad {
            segment: "log.0000000000000005".into(),
            offset: recs[1],
            lsn: Lsn(6),
            why: String::new(),
            payload: vec![2; 30],
        };
        replace_record(&mut seg, &b, &[9; 8]).unwrap();
        let scan = thor_storage::log::record::scan(&seg[24..], Lsn(5), 1 << 20);
        assert_eq!(scan.defect, None);
        let payloads: Vec<(u64, Vec<u8>)> =
            scan.records.iter().map(|(l, r)| (l.0, seg[24..][r.clone()].to_vec())).collect();
        assert_eq!(payloads, [(5, vec![1; 10]), (6, vec![9; 8]), (7, vec![3; 4])]);
        assert_eq!(&seg[..24], &[7u8; 24], "the segment header is untouched");
    }
}
