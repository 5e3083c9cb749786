//! Read-only inspection of a log: what recovery and a reader would find, without changing a
//! byte. For offline checkers (`thor check`).
//!
//! [`inspect`] walks every segment, oldest first, with the checks [`Log::open_streaming`] and
//! a [`LogReader`] apply (segment names and headers, the LSN sequence across segments, each
//! record's length, checksum, LSN and batch index), and hands every intact record to the
//! caller with its place (segment and byte offset). Where those would *act*, it only reports:
//!
//! | what it finds | open / a reader | `inspect` |
//! |---|---|---|
//! | bad record in the newest segment, nothing of a later batch after it | cuts the torn tail into a `.torn` file | [`Finding::TornTail`] |
//! | the newest segment's header unfinished, nothing after it | rewrites the header | [`Finding::UnfinishedHeader`] |
//! | bad record anywhere else, or followed by a later batch | refuses to open / fails | [`Finding::Corrupt`], and goes on with the next segment |
//! | bad segment header | refuses | [`Finding::BadHeader`], and goes on with the next segment |
//! | a segment that does not continue the previous one's LSNs | fails | [`Finding::Sequence`] |
//!
//! The torn-tail rule is recovery's own (the same forward scan for intact records of a later
//! flush batch), so a finding here is exactly what the next open would decide.
//!
//! *Nothing is written:* `inspect` calls only [`Disk::list`], [`Disk::open`] with
//! `create = false`, and [`DiskFile::read_at`] / [`DiskFile::len`] on what it opened. It never
//! creates, writes, truncates, syncs, renames or removes anything, so it may run on a disk that
//! refuses every change.
//!
//! Memory: one read buffer of `read_chunk_bytes`, grown to hold the largest record (at most
//! `record_bytes_max` and at most the bytes left in its segment), plus one more chunk for the
//! forward scan after a bad record in the newest segment; findings are at most two per segment.
//!
//! [`Log::open_streaming`]: crate::Log::open_streaming
//! [`LogReader`]: crate::LogReader
//! [`DiskFile::read_at`]: crate::DiskFile::read_at
//! [`DiskFile::len`]: crate::DiskFile::len

use std::fmt;

use thor_core::ids::Lsn;

use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;
use crate::log::LogOptions;
use crate::log::record::Defect;
use crate::log::recovery::{After, bad_header, read_header, scan_after};
use crate::log::segment::{Cursor, HeaderVerdict, Step, parse_segment_name};

/// An intact record, where it is, and its payload (borrowed until the callback returns).
#[derive(Debug, Clone, Copy)]
pub struct RecordAt<'a> {
    /// The segment file holding it.
    pub segment: &'a str,
    /// The byte offset of its header in the segment.
    pub offset: u64,
    /// Its LSN.
    pub lsn: Lsn,
    /// Its payload.
    pub payload: &'a [u8],
}

/// Something [`inspect`] found wrong, or that recovery would repair.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// A segment header this build cannot read (damaged, another format version, or an
    /// unfinished header in a segment that is not the newest). Its records were not read.
    BadHeader {
        /// The segment file.
        segment: String,
        /// Why, as the error open would give.
        why: String,
    },
    /// The newest segment's header never became durable and nothing follows it: a creation
    /// a crash interrupted. Open rewrites the header; not damage.
    UnfinishedHeader {
        /// The segment file.
        segment: String,
    },
    /// A segment whose first LSN does not continue the previous segment's records (a missing
    /// or overlapping segment).
    Sequence {
        /// The segment file.
        segment: String,
        /// The LSN the previous segment's records end before.
        expected: Lsn,
        /// The first LSN this segment's name gives.
        found: Lsn,
    },
    /// A record that fails its checks where no tear is possible: damage to durable records.
    /// The rest of its segment was not read.
    Corrupt {
        /// The segment file.
        segment: String,
        /// The byte offset of the bad record in the segment.
        offset: u64,
        /// The LSN the record should carry.
        lsn: Lsn,
        /// What is wrong.
        why: String,
    },
    /// The newest segment ends in a torn tail: its last flush batch, never fsynced, from its
    /// first bad record on. Open cuts it (keeping the bytes in a `.torn` file); no commit in
    /// it was acknowledged. Not damage.
    TornTail {
        /// The segment file.
        segment: String,
        /// The byte offset of the first bad record: where open would cut.
        offset: u64,
        /// Bytes from there to the end of the segment.
        bytes: u64,
        /// The LSN the first bad record should carry; the log continues there.
        first_lost_lsn: Lsn,
        /// Why the first bad record fails its check.
        defect: String,
        /// Intact records of the same unsynced batch after the bad one, cut with it.
        intact_records_cut: u64,
    },
}

impl Finding {
    /// Whether this is damage (the log cannot be opened, or records are lost), as opposed to
    /// the aftermath of a crash that open repairs ([`Finding::TornTail`],
    /// [`Finding::UnfinishedHeader`]).
    pub fn is_damage(&self) -> bool {
        !matches!(self, Finding::TornTail { .. } | Finding::UnfinishedHeader { .. })
    }

    /// The segment file the finding is about.
    pub fn segment(&self) -> &str {
        match self {
            Finding::BadHeader { segment, .. }
            | Finding::UnfinishedHeader { segment }
            | Finding::Sequence { segment, .. }
            | Finding::Corrupt { segment, .. }
            | Finding::TornTail { segment, .. } => segment,
        }
    }

    /// The byte offset in the segment the finding is about (0 for whole-segment findings).
    pub fn offset(&self) -> u64 {
        match self {
            Finding::Corrupt { offset, .. } | Finding::TornTail { offset, .. } => *offset,
            _ => 0,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::BadHeader { why, .. } => write!(f, "bad segment header: {why}"),
            Finding::UnfinishedHeader { .. } => write!(
                f,
                "the newest segment's header never became durable (a crash interrupted its \
                 creation); it holds no records, and the next open rewrites the header"
            ),
            Finding::Sequence { expected, found, .. } => write!(
                f,
                "the segment starts at LSN {found} but the previous segment's records end \
                 before LSN {expected} (a missing or overlapping segment)"
            ),
            Finding::Corrupt { lsn, why, .. } => {
                write!(f, "damaged record (LSN {lsn} expected here): {why}")
            }
            Finding::TornTail { bytes, first_lost_lsn, defect, intact_records_cut, .. } => {
                write!(f, "torn tail of {bytes} bytes from LSN {first_lost_lsn} ({defect}")?;
                if *intact_records_cut > 0 {
                    write!(f, "; {intact_records_cut} intact records of the same batch after it")?;
                }
                write!(
                    f,
                    "): an unfinished flush, never acknowledged; the next open cuts it and keeps \
                     the bytes in a .torn file"
                )
            }
        }
    }
}

/// What [`inspect`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// Segment files, in LSN order.
    pub segments: Vec<String>,
    /// Intact records handed to the callback.
    pub records: u64,
    /// The first LSN of the oldest segment: the lowest LSN the log may hold (`None` without
    /// segments).
    pub first_lsn: Option<Lsn>,
    /// The LSN after the newest segment's last intact record (before any torn tail): where
    /// the log continues after open (`None` without segments).
    pub next_lsn: Option<Lsn>,
    /// What is wrong or would be repaired, in segment order.
    pub findings: Vec<Finding>,
}

/// Walks the log `opts.prefix` in `disk` without changing it; see the module documentation.
/// Calls `on_record` for every intact record, in segment and LSN order. Errors are I/O
/// failures only: every malformation is a [`Finding`].
pub fn inspect(
    disk: &dyn Disk,
    opts: &LogOptions,
    mut on_record: impl FnMut(RecordAt<'_>),
) -> Result<Inspection, StorageError> {
    opts.validate()?;
    let mut segments: Vec<(Lsn, String)> = disk
        .list()?
        .into_iter()
        .filter_map(|name| parse_segment_name(&opts.prefix, &name).map(|lsn| (lsn, name)))
        .collect();
    segments.sort();
    let mut out = Inspection {
        segments: segments.iter().map(|(_, n)| n.clone()).collect(),
        first_lsn: segments.first().map(|(l, _)| *l),
        ..Inspection::default()
    };
    // The LSN the next segment must start at, when the previous one was read to its end.
    let mut expected: Option<Lsn> = None;
    let last = segments.len().saturating_sub(1);
    for (i, (first, name)) in segments.iter().enumerate() {
        let newest = i == last;
        if let Some(e) = expected
            && e != *first
        {
            out.findings.push(Finding::Sequence {
                segment: name.clone(),
                expected: e,
                found: *first,
            });
        }
        expected = None;
        if *first == Lsn::ZERO {
            out.findings.push(Finding::BadHeader {
                segment: name.clone(),
                why: "segment named for LSN 0".to_string(),
            });
            continue;
        }
        let file = disk.open(name, false)?;
        let file_len = file.len()?;
        match read_header(&*file, file_len, *first)? {
            HeaderVerdict::Good => {}
            HeaderVerdict::Unfinished if newest => {
                out.findings.push(Finding::UnfinishedHeader { segment: name.clone() });
                out.next_lsn = Some(*first);
                continue;
            }
            other => {
                let why = bad_header(other, name).to_string();
                out.findings.push(Finding::BadHeader { segment: name.clone(), why });
                continue;
            }
        }
        let mut cursor = Cursor::new(
            file.clone(),
            *first,
            file_len,
            opts.record_bytes_max,
            opts.read_chunk_bytes,
        );
        let bad = loop {
            match cursor.step(Some(Lsn::ZERO))? {
                Step::Record { lsn, offset, .. } => {
                    out.records += 1;
                    on_record(RecordAt { segment: name, offset, lsn, payload: cursor.payload() });
                }
                Step::End => break None,
                Step::Defect { offset, defect } => break Some((offset, defect)),
            }
        };
        let next = cursor.next_lsn();
        if newest {
            out.next_lsn = Some(next);
        }
        let Some((offset, defect)) = bad else {
            expected = Some(next);
            continue;
        };
        if !newest {
            out.findings.push(Finding::Corrupt {
                segment: name.clone(),
                offset,
                lsn: next,
                why: defect.to_string(),
            });
            continue;
        }
        let tail = Tail { name, first: *first, len: file_len, offset, next, defect };
        out.findings.push(newest_defect(&*file, &tail, opts)?);
    }
    Ok(out)
}

/// A bad record in the newest segment `name` (which starts at LSN `first` and is `len` bytes
/// long): at `offset`, where LSN `next` would be.
struct Tail<'a> {
    name: &'a str,
    first: Lsn,
    len: u64,
    offset: u64,
    next: Lsn,
    defect: Defect,
}

/// What a bad record in the newest segment is: a torn tail, which recovery would cut, when
/// nothing intact of a later flush batch follows it; damage to durable records otherwise.
fn newest_defect(
    file: &dyn DiskFile,
    t: &Tail<'_>,
    opts: &LogOptions,
) -> Result<Finding, StorageError> {
    let Tail { name, first, len, offset, next, defect } = t;
    Ok(match scan_after(file, *len, *offset, *next, *first, opts)? {
        After::SameBatch { intact } => Finding::TornTail {
            segment: name.to_string(),
            offset: *offset,
            bytes: len - offset,
            first_lost_lsn: *next,
            defect: defect.to_string(),
            intact_records_cut: intact,
        },
        After::LaterBatch { offset: later, lsn, batch_first } => Finding::Corrupt {
            segment: name.to_string(),
            offset: *offset,
            lsn: *next,
            why: format!(
                "{defect}, but the intact record at offset {later} (LSN {lsn}) belongs to a \
                 later flush batch (from LSN {batch_first}): this record's batch had been \
                 fsynced before that one was written, so it was damaged after it was durable"
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::log::segment::{encode_header, segment_name};
    use crate::mem_disk::{FaultDisk, FaultPlan, MemDisk};
    use crate::{DiskFile, Log, SplitMix64};

    fn log_with(disk: &Arc<MemDisk>, batches: &[&[&[u8]]]) {
        let (log, _) = Log::open_streaming(disk.clone(), LogOptions::default()).unwrap();
        for batch in batches {
            for payload in *batch {
                log.append(payload).unwrap();
            }
            log.flush().unwrap();
        }
    }

    fn segment(disk: &MemDisk, lsn: u64) -> Arc<dyn DiskFile> {
        disk.open(&segment_name("log", Lsn(lsn)), false).unwrap()
    }

    fn run(disk: &MemDisk) -> (Inspection, Vec<(Lsn, u64, Vec<u8>)>) {
        let mut seen = Vec::new();
        let found = inspect(disk, &LogOptions::default(), |r| {
            seen.push((r.lsn, r.offset, r.payload.to_vec()))
        })
        .unwrap();
        (found, seen)
    }

    #[test]
    fn an_intact_log_gives_every_record_and_no_finding() {
        let disk = Arc::new(MemDisk::new());
        log_with(&disk, &[&[b"one", b"two"], &[b"three"]]);
        let (found, seen) = run(&disk);
        assert_eq!(found.findings, vec![]);
        assert_eq!(
            (found.first_lsn, found.next_lsn, found.records),
            (Some(Lsn(1)), Some(Lsn(4)), 3)
        );
        let payloads: Vec<_> = seen.iter().map(|(l, _, p)| (l.0, p.clone())).collect();
        assert_eq!(
            payloads,
            vec![(1, b"one".to_vec()), (2, b"two".to_vec()), (3, b"three".to_vec())]
        );
        assert_eq!(seen[0].1, 24, "the first record follows the segment header");
    }

    #[test]
    fn a_damaged_last_batch_is_a_torn_tail_and_nothing_is_written() {
        let disk = Arc::new(MemDisk::new());
        log_with(&disk, &[&[b"one"], &[b"two", b"three"]]);
        let file = segment(&disk, 1);
        let len = file.len().unwrap();
        // Damage the payload of LSN 2, the first record of the last batch.
        let at = 24 + 23 + 20;
        let mut b = [0u8; 1];
        file.read_exact_at(at, &mut b).unwrap();
        file.write_at(at, &[b[0] ^ 0x40]).unwrap();
        let names = disk.list().unwrap();
        let (found, seen) = run(&disk);
        assert_eq!(seen.len(), 1);
        assert!(
            matches!(
                &found.findings[..],
                [Finding::TornTail {
                    offset: 47,
                    first_lost_lsn: Lsn(2),
                    intact_records_cut: 1,
                    ..
                }]
            ),
            "{:?}",
            found.findings
        );
        assert!(!found.findings[0].is_damage());
        assert_eq!(found.next_lsn, Some(Lsn(2)));
        assert_eq!(file.len().unwrap(), len, "not cut");
        assert_eq!(disk.list().unwrap(), names, "no .torn file");
    }

    #[test]
    fn a_damaged_durable_batch_is_corruption() {
        let disk = Arc::new(MemDisk::new());
        log_with(&disk, &[&[b"one"], &[b"two"], &[b"three"]]);
        let file = segment(&disk, 1);
        file.write_at(24 + 23 + 20, b"X").unwrap();
        let (found, seen) = run(&disk);
        assert_eq!(seen.len(), 1);
        match &found.findings[..] {
            [f @ Finding::Corrupt { offset: 47, lsn: Lsn(2), .. }] => {
                assert!(f.is_damage());
                assert!(f.to_string().contains("later flush batch"), "{f}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_headers_and_gaps_are_found_and_the_walk_goes_on() {
        let disk = Arc::new(MemDisk::new());
        log_with(&disk, &[&[b"one"]]);
        // A second segment that does not continue the first (LSN 5 instead of 2), and a
        // third whose header is garbage.
        let f = disk.open(&segment_name("log", Lsn(5)), true).unwrap();
        f.write_at(0, &encode_header(Lsn(5))).unwrap();
        let g = disk.open(&segment_name("log", Lsn(9)), true).unwrap();
        g.write_at(0, &[0xAA; 40]).unwrap();
        let (found, _) = run(&disk);
        assert!(
            matches!(
                &found.findings[..],
                [
                    Finding::Sequence { expected: Lsn(2), found: Lsn(5), .. },
                    Finding::Sequence { expected: Lsn(5), found: Lsn(9), .. },
                    Finding::BadHeader { .. },
                ]
            ),
            "{:?}",
            found.findings
        );
        assert_eq!(found.segments.len(), 3);
    }

    /// Crashes during a flush (the last batch written, its fsync failed, any subset of its
    /// sectors landed), sometimes with a durable record damaged too: `inspect` finds exactly
    /// what the next open then does (cuts the same tail, refuses, or finds the log intact),
    /// and changes nothing, so the open after it sees the same bytes.
    #[test]
    fn inspect_agrees_with_recovery_after_crashes() {
        let mut seen = [0u32; 3];
        for seed in 0..400u64 {
            let mut rng = SplitMix64::new(seed);
            let disk = FaultDisk::wrap(MemDisk::with_sector_bytes(16));
            let opts = LogOptions {
                segment_bytes: 200 + rng.below(600),
                read_chunk_bytes: 64,
                ..LogOptions::default()
            };
            let (log, _) = Log::open_streaming(Arc::new(disk.clone()), opts.clone()).unwrap();
            let payload = |rng: &mut SplitMix64| vec![rng.below(256) as u8; rng.up_to(60)];
            for _ in 0..rng.below(6) {
                for _ in 0..1 + rng.below(3) {
                    log.append(&payload(&mut rng)).unwrap();
                }
                log.flush().unwrap();
            }
            disk.set_plan(FaultPlan {
                fail_sync_at: Some(disk.counters().syncs + 1),
                ..FaultPlan::default()
            });
            for _ in 0..1 + rng.below(4) {
                log.append(&payload(&mut rng)).unwrap();
            }
            assert!(log.flush().is_err(), "seed {seed}: the fsync was to fail");
            drop(log);
            disk.crash(seed);
            disk.set_plan(FaultPlan::default());
            let newest = disk.list().unwrap().into_iter().filter(|n| n.starts_with("log.")).max();
            let newest = newest.expect("a segment");
            if rng.below(3) == 0 {
                disk.edit_file(&newest, |b| {
                    if b.len() > 24 {
                        let at = 24 + rng.below((b.len() - 24) as u64) as usize;
                        b[at] ^= 0x20;
                    }
                })
                .unwrap();
            }
            let found = inspect(&disk, &opts, |_| {}).unwrap();
            let in_newest: Vec<&Finding> =
                found.findings.iter().filter(|f| f.segment() == newest).collect();
            let ctx = format!("seed {seed}: {:?}", found.findings);
            match Log::open_streaming(Arc::new(disk.clone()), opts.clone()) {
                Ok((_, report)) => {
                    seen[0] += u32::from(report.torn_tail.is_none());
                    seen[1] += u32::from(report.torn_tail.is_some());
                    assert!(in_newest.iter().all(|f| !f.is_damage()), "{ctx}");
                    assert_eq!(found.next_lsn, Some(report.next_lsn), "{ctx}");
                    match (&report.torn_tail, in_newest.first()) {
                        (None, None | Some(Finding::UnfinishedHeader { .. })) => {}
                        (
                            Some(t),
                            Some(Finding::TornTail { offset, first_lost_lsn, bytes, .. }),
                        ) => {
                            assert_eq!(
                                (t.offset, t.first_lost_lsn, t.bytes),
                                (*offset, *first_lost_lsn, *bytes),
                                "{ctx}"
                            );
                        }
                        other => panic!("{ctx}: open found {other:?}"),
                    }
                }
                Err(e) => {
                    assert!(e.is_corruption(), "{ctx}: {e}");
                    seen[2] += 1;
                    assert!(in_newest.iter().any(|f| f.is_damage()), "{ctx}: open: {e}");
                }
            }
        }
        // The seeds reach each outcome: intact, torn, corrupt.
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }
}
