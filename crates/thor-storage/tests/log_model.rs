//! Model-based property test of the log: random appends, waits, truncations, reopens, crashes
//! and injected failures, checked after every step against a `Vec` of every payload appended.

use std::sync::Arc;

use proptest::prelude::*;
use thor_core::ids::Lsn;
use thor_storage::{FaultDisk, FaultPlan, Log, LogOptions, MemDisk, Recovered, StorageError};

#[derive(Debug, Clone)]
enum Op {
    /// Append a record of this many bytes without waiting.
    Append(usize),
    /// Append a record and wait until it is durable.
    AppendWait(usize),
    /// Make everything appended durable.
    Flush,
    /// `truncate_before` a point chosen among the LSNs assigned so far.
    Truncate(prop::sample::Index),
    /// Drop the log and reopen it (a clean restart: nothing on disk is lost).
    Reopen,
    /// Drop the log, crash the disk with this seed, reopen.
    Crash(u64),
    /// Make the next write (or sync) fail, append and wait (which must fail), crash, reopen.
    Fail { sync: bool, seed: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..60).prop_map(Op::Append),
        6 => (0usize..60).prop_map(Op::AppendWait),
        2 => Just(Op::Flush),
        2 => any::<prop::sample::Index>().prop_map(Op::Truncate),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(Op::Crash),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(sync, seed)| Op::Fail { sync, seed }),
    ]
}

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 150,
        buffer_bytes_max: 300,
        record_bytes_max: 100,
        ..LogOptions::default()
    }
}

/// What the log must look like.
struct Model {
    /// Payload of every LSN assigned in the current history (index = LSN - 1).
    all: Vec<Vec<u8>>,
    /// The durable LSN the log reported.
    durable: u64,
    /// The highest `truncate_before` point requested: records below may be gone.
    floor: u64,
    /// Distinguishes payloads of reused LSNs (after records are lost).
    counter: u64,
}

impl Model {
    fn payload(&mut self, len: usize) -> Vec<u8> {
        self.counter += 1;
        let mut p = self.counter.to_le_bytes().to_vec();
        p.resize(len.max(8), (self.counter % 251) as u8);
        p
    }

    /// Checks a reopened log's records, whose tail may end anywhere in `min_end..=max_end`,
    /// and forgets what was lost.
    fn recovered(
        &mut self,
        rec: &Recovered,
        min_end: u64,
        max_end: u64,
    ) -> Result<(), TestCaseError> {
        let end = rec.next_lsn.0 - 1;
        prop_assert!(
            min_end <= end && end <= max_end,
            "end {} not in {}..={}",
            end,
            min_end,
            max_end
        );
        if let Some((first, _)) = rec.records.first() {
            prop_assert!(
                first.0 <= self.floor.max(1),
                "first {} above floor {}",
                first.0,
                self.floor
            );
            prop_assert_eq!(rec.records.last().map(|r| r.0.0), Some(end));
        }
        for (k, (lsn, bytes)) in rec.records.iter().enumerate() {
            prop_assert_eq!(lsn.0, rec.records[0].0.0 + k as u64, "LSNs contiguous");
            prop_assert_eq!(bytes, &self.all[(lsn.0 - 1) as usize], "payload of {}", lsn.0);
        }
        // Every durable record at or above the floor survived.
        let kept_from = rec.records.first().map_or(rec.next_lsn.0, |r| r.0.0);
        prop_assert!(kept_from <= self.floor.max(1) || kept_from > min_end);
        self.all.truncate(end as usize);
        self.durable = end;
        Ok(())
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    // Small sectors, so that a crash after a failed flush tears its batch in many ways.
    let disk = FaultDisk::wrap(MemDisk::with_sector_bytes(32));
    let reopen = |d: &FaultDisk| Log::open(Arc::new(d.clone()), opts()).unwrap();
    let (mut log, rec) = reopen(&disk);
    prop_assert_eq!(rec.next_lsn, Lsn(1));
    let mut m = Model { all: Vec::new(), durable: 0, floor: 0, counter: 0 };
    for op in ops {
        match op {
            Op::Append(len) | Op::AppendWait(len) => {
                let p = m.payload(len);
                let lsn = log.append(&p).unwrap();
                m.all.push(p);
                prop_assert_eq!(lsn.0, m.all.len() as u64);
                if matches!(op, Op::AppendWait(_)) {
                    log.wait_durable(lsn).unwrap();
                    m.durable = lsn.0;
                }
                // A forced flush in append may have made more durable: never less.
                prop_assert!(log.durable_lsn().0 >= m.durable);
                m.durable = log.durable_lsn().0;
            }
            Op::Flush => {
                log.flush().unwrap();
                m.durable = m.all.len() as u64;
            }
            Op::Truncate(i) => {
                let t = i.index(m.all.len() + 1) as u64 + 1;
                log.truncate_before(Lsn(t)).unwrap();
                m.floor = m.floor.max(t);
            }
            Op::Reopen => {
                drop(log);
                let (l, rec) = reopen(&disk);
                log = l;
                prop_assert_eq!(rec.torn_bytes_cut, 0);
                // Everything written was synced; nothing unsynced was written.
                m.recovered(&rec, m.durable, m.durable)?;
            }
            Op::Crash(seed) => {
                drop(log);
                disk.crash(seed);
                let (l, rec) = reopen(&disk);
                log = l;
                m.recovered(&rec, m.durable, m.durable)?;
            }
            Op::Fail { sync, seed } => {
                let c = disk.counters();
                let plan = if sync {
                    FaultPlan { fail_sync_at: Some(c.syncs + 1), ..FaultPlan::default() }
                } else {
                    FaultPlan { fail_write_at: Some(c.writes + 1), ..FaultPlan::default() }
                };
                disk.set_plan(plan);
                let p = m.payload(10);
                // The failure surfaces in `wait_durable`, or already in `append` when the
                // append had to flush the buffer first (it then did not take the record).
                let r = match log.append(&p) {
                    Ok(lsn) => {
                        m.all.push(p);
                        log.wait_durable(lsn)
                    }
                    Err(e) => Err(e),
                };
                prop_assert!(matches!(r, Err(StorageError::Poisoned { .. })), "{:?}", r);
                prop_assert_eq!(log.durable_lsn().0, m.durable);
                drop(log);
                disk.crash(seed);
                let (l, rec) = reopen(&disk);
                log = l;
                // The failed flush may or may not have landed, wholly or not at all.
                m.recovered(&rec, m.durable, m.all.len() as u64)?;
            }
        }
        prop_assert_eq!(log.next_lsn().0, m.all.len() as u64 + 1);
        prop_assert_eq!(log.durable_lsn().0, m.durable);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_log_matches_a_vec_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
