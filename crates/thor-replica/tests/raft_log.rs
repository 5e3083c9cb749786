//! Crash tests of the journal ([`RaftLog`]) over `MemDisk`'s crash model: what was synced
//! survives, a torn tail is cut at a record boundary (a prefix of the entries, never half of
//! one), and compaction survives a crash.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use raft::eraftpb::{ConfState, Entry, HardState};
use raft::{GetEntriesContext, Storage};
use thor_replica::{RaftLog, journal_options};
use thor_storage::{Disk, FaultDisk, FaultPlan, LogOptions, MemDisk};

/// What the test compares: the hard state and every entry kept, with the snapshot index.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    hard_state: HardState,
    snapshot_index: u64,
    entries: Vec<(u64, u64, Vec<u8>)>,
}

fn seen(log: &RaftLog) -> Seen {
    let first = log.first_index().unwrap();
    let last = log.last_index().unwrap();
    let entries = log
        .entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
        .into_iter()
        .map(|e| (e.index, e.term, e.data.to_vec()))
        .collect();
    Seen { hard_state: log.hard_state().clone(), snapshot_index: log.snapshot_index(), entries }
}

fn entries(first: u64, n: u64, term: u64, tag: u8) -> Vec<Entry> {
    (first..first + n)
        .map(|i| Entry {
            index: i,
            term,
            data: Bytes::from(vec![tag; (i % 7 + 1) as usize * 13]),
            ..Entry::default()
        })
        .collect()
}

fn open(disk: &MemDisk, opts: LogOptions) -> RaftLog {
    RaftLog::bootstrap(Arc::new(disk.clone()) as Arc<dyn Disk>, opts, &[1, 2, 3]).unwrap()
}

/// A journal on a fault-injecting wrapper of `disk`, so that a test can fail the next fsync:
/// the records are then written but not durable, which is when a crash tears them.
fn open_faulty(disk: &MemDisk) -> (RaftLog, FaultDisk) {
    let faulty = FaultDisk::wrap(disk.clone());
    let log = RaftLog::bootstrap(
        Arc::new(faulty.clone()) as Arc<dyn Disk>,
        journal_options(),
        &[1, 2, 3],
    )
    .unwrap();
    (log, faulty)
}

/// Writes everything appended but fails its fsync (the journal is poisoned after); nothing
/// happens if everything appended is durable already.
fn write_without_sync(log: &mut RaftLog, faulty: &FaultDisk) {
    if log.journal().durable_lsn().0 + 1 == log.journal().next_lsn().0 {
        return;
    }
    let syncs = faulty.mem().counters().syncs;
    faulty.set_plan(FaultPlan { fail_sync_at: Some(syncs + 1), ..FaultPlan::default() });
    assert!(log.sync().is_err(), "the injected fsync failure is reported");
}

#[derive(Debug, Clone)]
enum Op {
    /// Put `n` entries from `back` entries before the end (an overwrite when `back > 0`).
    Append { back: u64, n: u64, term_bump: u64 },
    /// Raise the commit index towards the last entry.
    Commit,
    /// Make everything so far durable.
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3, 1u64..6, 0u64..2).prop_map(|(back, n, term_bump)| Op::Append { back, n, term_bump }),
        1 => Just(Op::Commit),
        2 => Just(Op::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// After a crash, the journal holds exactly the state after some journal record at or after
    /// the last sync: every synced change survives, and a torn tail (small sectors make tears
    /// likely) loses whole records only.
    #[test]
    fn synced_state_survives_a_crash_and_a_torn_tail_is_cut_whole(
        ops in proptest::collection::vec(op(), 1..40),
        sector in prop_oneof![Just(16usize), Just(512)],
        crash_seed in any::<u64>(),
        written_unsynced in any::<bool>(),
    ) {
        let disk = MemDisk::with_sector_bytes(sector);
        let (mut log, faulty) = open_faulty(&disk);
        // States after each journalled change; `synced` is the index of the last durable one.
        let mut states = vec![seen(&log)];
        let mut synced = 0;
        let mut tag = 0u8;
        for op in ops {
            match op {
                Op::Append { back, n, term_bump } => {
                    let last = log.last_index_now();
                    let commit = log.hard_state().commit;
                    // Never overwrite committed entries (Raft never does).
                    let first = (last + 1).saturating_sub(back).max(commit + 1);
                    let prev_term = if first == 1 { 0 } else { log.term(first - 1).unwrap() };
                    let term = log.hard_state().term.max(prev_term) + term_bump;
                    tag = tag.wrapping_add(1);
                    log.append(&entries(first, n, term.max(1), tag)).unwrap();
                    states.push(seen(&log));
                    let mut hs = log.hard_state().clone();
                    hs.term = term.max(1);
                    log.set_hard_state(hs).unwrap();
                    states.push(seen(&log));
                }
                Op::Commit => {
                    let mut hs = log.hard_state().clone();
                    hs.commit = (hs.commit + 2).min(log.last_index_now());
                    log.set_hard_state(hs).unwrap();
                    states.push(seen(&log));
                }
                Op::Sync => {
                    log.sync().unwrap();
                    synced = states.len() - 1;
                }
            }
        }
        if written_unsynced {
            write_without_sync(&mut log, &faulty);
        }
        drop(log);
        disk.crash(crash_seed);
        let back = open(&disk, journal_options());
        let got = seen(&back);
        let at = states[synced..].iter().position(|s| *s == got);
        prop_assert!(at.is_some(), "recovered {got:?}, not a state at or after the last sync {:?}", states[synced]);
    }
}

#[test]
fn compaction_drops_old_segments_and_survives_a_crash() {
    let disk = MemDisk::new();
    let opts = LogOptions { segment_bytes: 2048, ..journal_options() };
    let mut log = open(&disk, opts.clone());
    for round in 0..40u64 {
        log.append(&entries(round * 5 + 1, 5, 1, round as u8)).unwrap();
        let mut hs = log.hard_state().clone();
        hs.term = 1;
        hs.commit = round * 5 + 5;
        log.set_hard_state(hs).unwrap();
        log.sync().unwrap();
    }
    let conf = ConfState { voters: vec![1, 2, 3], ..ConfState::default() };
    log.compact(150, conf.clone(), Bytes::from_static(b"image at 150")).unwrap();
    assert_eq!(log.snapshot_index(), 150);
    assert!(log.journal().first_lsn().0 > 1, "whole segments below the base were deleted");
    let before = seen(&log);
    assert_eq!(before.entries.first().map(|e| e.0), Some(151));
    assert_eq!(before.entries.last().map(|e| e.0), Some(200));
    // A few more changes after the compaction, synced, then a crash.
    log.append(&entries(201, 3, 2, 99)).unwrap();
    log.sync().unwrap();
    let after = seen(&log);
    drop(log);
    disk.crash(7);
    let back = open(&disk, opts);
    assert_eq!(seen(&back), after);
    assert!(back.recovery().records_superseded > 0 || back.journal().first_lsn().0 > 1);
    let snap = back.snapshot(0, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 150);
    assert_eq!(snap.get_metadata().term, 1);
    assert_eq!(snap.get_metadata().get_conf_state().voters, vec![1, 2, 3]);
    assert_eq!(&snap.data[..], b"image at 150");
    assert!(matches!(
        back.entries(150, 152, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(raft::StorageError::Compacted))
    ));
}

#[test]
fn an_installed_snapshot_replaces_the_log_and_survives_a_restart() {
    let disk = MemDisk::new();
    let mut log = open(&disk, journal_options());
    log.append(&entries(1, 4, 1, 1)).unwrap();
    let mut snap = raft::eraftpb::Snapshot {
        data: Bytes::from_static(b"leader's image"),
        ..Default::default()
    };
    snap.mut_metadata().index = 30;
    snap.mut_metadata().term = 3;
    snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 3, 4];
    log.apply_snapshot(snap).unwrap();
    log.sync().unwrap();
    drop(log);
    disk.crash(1);
    let back = open(&disk, journal_options());
    assert_eq!(back.snapshot_index(), 30);
    assert_eq!(back.last_index_now(), 30);
    assert_eq!(back.hard_state().commit, 30);
    assert_eq!(back.hard_state().term, 3);
    assert_eq!(back.conf_state().voters, vec![1, 2, 3, 4]);
}

#[test]
fn entries_that_skip_an_index_or_rewrite_the_snapshot_are_refused() {
    let disk = MemDisk::new();
    let mut log = open(&disk, journal_options());
    log.append(&entries(1, 3, 1, 1)).unwrap();
    assert!(log.append(&entries(5, 1, 1, 2)).is_err(), "a gap");
    assert!(log.append(&entries(2, 1, 0, 2)).is_err(), "a term going back");
    let hs = HardState { commit: 9, ..HardState::default() };
    assert!(log.set_hard_state(hs).is_err(), "commit past the last entry");
    // The refused calls changed nothing.
    assert_eq!(log.last_index_now(), 3);
}

/// The crash test above is not vacuous: with unsynced records at the end, crashes do tear the
/// journal, and recovery then keeps a prefix of the records written, whole.
#[test]
fn unsynced_records_are_torn_by_crashes_and_cut_whole() {
    let mut torn = 0;
    for seed in 0..64u64 {
        let disk = MemDisk::with_sector_bytes(16);
        let (mut log, faulty) = open_faulty(&disk);
        log.append(&entries(1, 3, 1, 1)).unwrap();
        log.sync().unwrap();
        let synced = seen(&log);
        log.append(&entries(4, 5, 1, 2)).unwrap();
        log.append(&entries(9, 5, 1, 3)).unwrap();
        write_without_sync(&mut log, &faulty);
        drop(log);
        disk.crash(seed);
        let back = open(&disk, journal_options());
        torn += usize::from(back.recovery().log.torn_tail.is_some());
        let got = seen(&back);
        assert!(
            [3, 8, 13].contains(&got.entries.len()),
            "seed {seed}: {} entries: not a whole number of records",
            got.entries.len()
        );
        assert_eq!(got.entries[..3], synced.entries[..], "seed {seed}: synced entries kept");
    }
    assert!(torn > 0, "some crash tore the unsynced tail");
}
