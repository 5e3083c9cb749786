//! WPL against generated histories: the table during normal operation against a model of what
//! committed, and restart after a crash at every step, with the unsynced tail of the log cut
//! at every point, against the durable log's committed history.

use super::*;
use proptest::prelude::*;

const PAGE: usize = 1024;
const PAGES: usize = 4;
const SLOTS: usize = 3;

fn pid(i: usize) -> PageId {
    PageId::new(i as u32 + 1).unwrap()
}

fn config() -> WplConfig {
    WplConfig { entries_max: 64, txns_max: SLOTS, commits_per_checkpoint: 6 }
}

/// A log held in memory, read backward by restart.
struct SliceLog<'a> {
    records: &'a [(Lsn, Vec<u8>)],
    next: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("unreachable")]
struct NoError;

impl BackwardLog for SliceLog<'_> {
    type Error = NoError;

    fn first_lsn(&self) -> Lsn {
        self.records.first().map_or(Lsn(1), |r| r.0)
    }

    fn prev(&mut self, buf: &mut Vec<u8>) -> Result<Option<Lsn>, NoError> {
        if self.next == 0 {
            return Ok(None);
        }
        self.next -= 1;
        let (lsn, bytes) = &self.records[self.next];
        buf.clear();
        buf.extend_from_slice(bytes);
        Ok(Some(*lsn))
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// The transaction in `slot` ships `page`.
    Ship { slot: usize, page: usize },
    /// It appends its commit record.
    Commit { slot: usize },
    /// It aborts.
    Abort { slot: usize },
    /// The log's fsync: everything appended is durable; commits and checkpoints take effect.
    Sync,
    /// The background reader moves a committed copy home.
    Install { pick: prop::sample::Index },
    /// A checkpoint record is appended.
    Checkpoint,
    /// The log is truncated at the table's truncation point.
    Truncate,
    /// The server crashes, losing an unsynced tail of the log at a point `cut` picks, restarts
    /// and goes on with the restarted table.
    Crash { cut: prop::sample::Index },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SLOTS, 0..PAGES).prop_map(|(slot, page)| Op::Ship { slot, page }),
        3 => (0..SLOTS).prop_map(|slot| Op::Commit { slot }),
        1 => (0..SLOTS).prop_map(|slot| Op::Abort { slot }),
        3 => Just(Op::Sync),
        2 => any::<prop::sample::Index>().prop_map(|pick| Op::Install { pick }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Truncate),
        1 => any::<prop::sample::Index>().prop_map(|cut| Op::Crash { cut }),
    ]
}

/// The server: table, log, homes; and what the test knows of the history.
struct Server {
    table: WplTable,
    /// Every record ever appended; `records[first..]` is what the log holds.
    records: Vec<(Lsn, Vec<u8>)>,
    first: usize,
    /// Records `..durable` are durable.
    durable: usize,
    /// The LSN of the image each page's home holds (0: the initial page).
    home: [u64; PAGES],
    /// The transaction in each slot and whether its commit record was appended.
    slots: [(TxnId, bool); SLOTS],
    next_txn: u64,
    scratch: Vec<WplEntry>,
    /// Transactions whose commit is durable and acknowledged.
    acknowledged: Vec<TxnId>,
}

impl Server {
    fn next_lsn(&self) -> Lsn {
        Lsn(self.records.len() as u64 + 1)
    }

    fn fresh_txn(&mut self, slot: usize) {
        self.next_txn += 1;
        self.slots[slot] = (TxnId(self.next_txn), false);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Ship { slot, page } => {
                let (txn, committing) = self.slots[slot];
                let lsn = self.next_lsn();
                match self.table.log_page(txn, pid(page), lsn) {
                    Ok(()) => {
                        assert!(!committing);
                        let mut bytes = Vec::new();
                        let image = vec![(lsn.0 % 251) as u8; PAGE];
                        encode_image(pid(page), txn, &image, &mut bytes);
                        self.records.push((lsn, bytes));
                    }
                    Err(WplError::PageBusy { holder, .. }) => assert_ne!(holder, txn),
                    Err(WplError::NoSuchTxn(_)) => assert!(committing),
                    Err(e) => panic!("ship refused: {e}"),
                }
            }
            Op::Commit { slot } => {
                let (txn, committing) = self.slots[slot];
                let lsn = self.next_lsn();
                match self.table.commit_appended(txn, lsn) {
                    Ok(()) => {
                        let mut bytes = Vec::new();
                        encode_commit(txn, &mut bytes);
                        self.records.push((lsn, bytes));
                        self.slots[slot].1 = true;
                    }
                    // Nothing shipped, or already committing: nothing to log.
                    Err(WplError::NoSuchTxn(_)) => {
                        if !committing {
                            self.fresh_txn(slot);
                        }
                    }
                    Err(WplError::CheckpointDue) => assert!(self.table.checkpoint_due()),
                    Err(e) => panic!("commit refused: {e}"),
                }
            }
            Op::Abort { slot } => {
                let (txn, committing) = self.slots[slot];
                if !committing {
                    let _ = self.table.abort(txn);
                    self.fresh_txn(slot);
                }
            }
            Op::Sync => {
                self.durable = self.records.len();
                for slot in 0..SLOTS {
                    let (txn, committing) = self.slots[slot];
                    if committing {
                        self.table.commit_durable(txn).unwrap();
                        self.acknowledged.push(txn);
                        self.fresh_txn(slot);
                    }
                }
                // The newest checkpoint appended is durable now.
                let newest_checkpoint = self.records[self.first..]
                    .iter()
                    .rev()
                    .find(|(lsn, b)| matches!(decode(b, *lsn, PAGE), Ok(WplRecord::Checkpoint(_))))
                    .map(|r| r.0);
                if let Some(lsn) = newest_checkpoint {
                    self.table.checkpoint_durable(lsn);
                }
            }
            Op::Install { pick } => {
                let mut candidates: Vec<(PageId, LogCopy)> =
                    self.table.install_candidates().collect();
                candidates.sort_by_key(|c| c.0);
                if !candidates.is_empty() {
                    let (page, copy) = candidates[pick.index(candidates.len())];
                    // Only committed copies go home, and those are durable.
                    assert!((copy.lsn.0 as usize) <= self.durable);
                    self.home[page.index() - 1] = copy.lsn.0;
                    assert!(self.table.installed(page, copy.lsn));
                }
            }
            Op::Checkpoint => {
                let lsn = self.next_lsn();
                let mut bytes = Vec::new();
                self.table.checkpoint_record(lsn, &mut self.scratch, &mut bytes).unwrap();
                self.records.push((lsn, bytes));
            }
            Op::Truncate => {
                if let Some(point) = self.table.truncation_point() {
                    assert!(point.0 as usize <= self.durable + 1);
                    self.first = self.first.max(point.0 as usize - 1);
                }
            }
            Op::Crash { cut } => {
                let from = self.durable.max(self.first);
                let cut = from + cut.index(self.records.len() - from + 1);
                self.crash_and_restart(cut);
                self.records.truncate(cut);
                let retained = &self.records[self.first..];
                let mut log = SliceLog { records: retained, next: retained.len() };
                self.table = restart(&mut log, PAGE, config()).unwrap().table;
                // Every commit record that survived is a commit, acknowledged or not.
                for (lsn, b) in &self.records {
                    if let WplRecord::Commit { txn } = decode(b, *lsn, PAGE).unwrap()
                        && !self.acknowledged.contains(&txn)
                    {
                        self.acknowledged.push(txn);
                    }
                }
                self.durable = cut;
                for slot in 0..SLOTS {
                    self.fresh_txn(slot);
                }
            }
        }
        self.table.check_invariants();
        // Normal operation: readers see, for each page, the newest acknowledged copy.
        for p in 0..PAGES {
            let visible = self.table.committed(pid(p)).map_or(self.home[p], |c| c.lsn.0);
            assert_eq!(
                visible,
                self.expected(p, self.records.len(), &self.acknowledged),
                "page {p}"
            );
        }
    }

    /// The newest image of page `p` in `records[..cut]` whose transaction is in `committed`, or
    /// 0 (the initial page).
    fn expected(&self, p: usize, cut: usize, committed: &[TxnId]) -> u64 {
        self.records[..cut]
            .iter()
            .rev()
            .find_map(|(lsn, b)| match decode(b, *lsn, PAGE).unwrap() {
                WplRecord::PageImage { page, txn, .. }
                    if page == pid(p) && committed.contains(&txn) =>
                {
                    Some(lsn.0)
                }
                _ => None,
            })
            .unwrap_or(0)
    }

    /// A crash now, losing the log past `cut`: restart must find every page's newest copy
    /// committed in `records[..cut]`.
    fn crash_and_restart(&self, cut: usize) {
        let retained = &self.records[self.first..cut];
        let mut log = SliceLog { records: retained, next: retained.len() };
        let restarted = restart(&mut log, PAGE, config()).unwrap();
        let committed: Vec<TxnId> = self.records[..cut]
            .iter()
            .filter_map(|(lsn, b)| match decode(b, *lsn, PAGE).unwrap() {
                WplRecord::Commit { txn } => Some(txn),
                _ => None,
            })
            .collect();
        restarted.table.check_invariants();
        for p in 0..PAGES {
            let found = restarted.table.committed(pid(p));
            let visible = found.map_or(self.home[p], |c| c.lsn.0);
            assert_eq!(
                visible,
                self.expected(p, cut, &committed),
                "page {p} after a crash at {cut}"
            );
            assert!(restarted.table.uncommitted(pid(p)).is_none());
            if let Some(c) = found {
                // The copy is still in the log, and is the page's image.
                let (_, bytes) = retained.iter().find(|r| r.0 == c.lsn).expect("copy in the log");
                assert!(matches!(
                    decode(bytes, c.lsn, PAGE).unwrap(),
                    WplRecord::PageImage { page, txn, .. } if page == pid(p) && txn == c.txn
                ));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn restart_after_a_crash_at_every_step_finds_exactly_the_committed_pages(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut server = Server {
            table: WplTable::new(config()).unwrap(),
            records: Vec::new(),
            first: 0,
            durable: 0,
            home: [0; PAGES],
            slots: [(TxnId(1), false), (TxnId(2), false), (TxnId(3), false)],
            next_txn: 3,
            scratch: Vec::new(),
            acknowledged: Vec::new(),
        };
        for op in &ops {
            server.step(op);
            for cut in server.durable.max(server.first)..=server.records.len() {
                server.crash_and_restart(cut);
            }
        }
    }
}

#[test]
fn a_committed_copy_waits_for_the_next_one_to_commit() {
    let mut t = WplTable::new(config()).unwrap();
    let (a, b) = (TxnId(10), TxnId(11));
    t.log_page(a, pid(0), Lsn(1)).unwrap();
    t.commit_appended(a, Lsn(2)).unwrap();
    t.commit_durable(a).unwrap();
    t.log_page(b, pid(0), Lsn(3)).unwrap();
    assert_eq!(t.len(), 2, "C1 and C2 are both needed until b commits");
    assert_eq!(t.committed(pid(0)).unwrap().lsn, Lsn(1));
    assert_eq!(
        t.log_page(TxnId(12), pid(0), Lsn(4)),
        Err(WplError::PageBusy { page: pid(0), holder: b })
    );
    t.log_page(b, pid(0), Lsn(4)).unwrap(); // b ships the page again: its copy is replaced
    assert_eq!(t.len(), 2);
    t.commit_appended(b, Lsn(5)).unwrap();
    assert_eq!(t.abort(b), Err(WplError::NoSuchTxn(b)), "a committing transaction cannot abort");
    t.commit_durable(b).unwrap();
    assert_eq!(t.len(), 1, "C1 is superseded");
    assert_eq!(t.committed(pid(0)).unwrap(), LogCopy { lsn: Lsn(4), txn: b });
    assert!(!t.installed(pid(0), Lsn(1)), "a superseded copy is not the one to install");
    assert!(t.installed(pid(0), Lsn(4)));
    assert!(t.is_empty());
    t.check_invariants();
}

#[test]
fn a_commit_in_flight_at_a_checkpoint_is_listed_as_committed() {
    // The commit record precedes the checkpoint record, but its fsync completes after it: the
    // checkpoint must not list the copy as uncommitted, or restart (which never reads before the
    // checkpoint) would drop a committed page.
    let mut t = WplTable::new(config()).unwrap();
    let a = TxnId(1);
    t.log_page(a, pid(2), Lsn(1)).unwrap();
    t.commit_appended(a, Lsn(2)).unwrap();
    let mut out = Vec::new();
    t.checkpoint_record(Lsn(3), &mut Vec::new(), &mut out).unwrap();
    let WplRecord::Checkpoint(cp) = decode(&out, Lsn(3), PAGE).unwrap() else { panic!() };
    assert_eq!(
        cp.entries().collect::<Vec<_>>(),
        vec![WplEntry { page: pid(2), copy: LogCopy { lsn: Lsn(1), txn: a }, committed: true }]
    );
    assert_eq!(t.truncation_point(), None, "not durable yet");
    assert!(t.checkpoint_durable(Lsn(3)));
    assert_eq!(t.truncation_point(), Some(Lsn(1)));
}

#[test]
fn commits_beyond_the_checkpoint_interval_wait_for_a_checkpoint() {
    let mut t = WplTable::new(WplConfig { commits_per_checkpoint: 1, ..config() }).unwrap();
    t.log_page(TxnId(1), pid(0), Lsn(1)).unwrap();
    t.log_page(TxnId(2), pid(1), Lsn(2)).unwrap();
    t.commit_appended(TxnId(1), Lsn(3)).unwrap();
    assert!(t.checkpoint_due());
    assert_eq!(t.commit_appended(TxnId(2), Lsn(4)), Err(WplError::CheckpointDue));
    t.checkpoint_record(Lsn(4), &mut Vec::new(), &mut Vec::new()).unwrap();
    t.commit_appended(TxnId(2), Lsn(5)).unwrap();
}

#[test]
fn commits_read_at_restart_count_toward_the_next_checkpoint() {
    let mut records = Vec::new();
    for (i, txn) in [TxnId(1), TxnId(2)].into_iter().enumerate() {
        let mut image = Vec::new();
        encode_image(pid(i), txn, &[0; PAGE], &mut image);
        records.push((Lsn(2 * i as u64 + 1), image));
        let mut commit = Vec::new();
        encode_commit(txn, &mut commit);
        records.push((Lsn(2 * i as u64 + 2), commit));
    }
    let config = WplConfig { commits_per_checkpoint: 2, ..config() };
    let mut log = SliceLog { records: &records, next: records.len() };
    let restarted = restart(&mut log, PAGE, config).unwrap();
    assert_eq!(restarted.records_read, 4);
    assert_eq!(restarted.checkpoint, None);
    assert_eq!(restarted.table.len(), 2);
    assert!(restarted.table.checkpoint_due(), "two commits since the (absent) checkpoint");
}

#[test]
fn restart_refuses_a_log_truncated_past_its_checkpoint() {
    let mut image = Vec::new();
    encode_image(pid(0), TxnId(1), &[0; PAGE], &mut image);
    let records = vec![(Lsn(5), image)];
    let mut log = SliceLog { records: &records, next: 1 };
    assert!(matches!(
        restart(&mut log, PAGE, config()),
        Err(RestartError::Wpl(WplError::NoCheckpoint { first: 5 }))
    ));
    // A checkpoint listing a copy below the log's start.
    let mut cp = Vec::new();
    encode_checkpoint(
        &[WplEntry { page: pid(0), copy: LogCopy { lsn: Lsn(2), txn: TxnId(1) }, committed: true }],
        &mut cp,
    );
    let records = vec![(Lsn(5), cp)];
    let mut log = SliceLog { records: &records, next: 1 };
    assert!(matches!(
        restart(&mut log, PAGE, config()),
        Err(RestartError::Wpl(WplError::BadRecord { lsn: 2, .. }))
    ));
}

#[test]
fn malformed_records_are_refused() {
    let bad = |bytes: &[u8]| decode(bytes, Lsn(9), PAGE).unwrap_err();
    assert!(matches!(bad(&[]), WplError::BadRecord { why: "empty", .. }));
    assert!(matches!(bad(&[9; 16]), WplError::BadRecord { why: "unknown kind", .. }));
    // thor-server's kinds are not WPL's.
    for kind in 1..=5 {
        assert!(matches!(bad(&[kind; 16]), WplError::BadRecord { why: "unknown kind", .. }));
    }
    let mut commit = Vec::new();
    encode_commit(TxnId(3), &mut commit);
    assert_eq!(decode(&commit, Lsn(9), PAGE).unwrap(), WplRecord::Commit { txn: TxnId(3) });
    let mut c = commit.clone();
    c[2] = 1;
    assert!(matches!(bad(&c), WplError::BadRecord { why: "reserved bytes are not zero", .. }));
    assert!(matches!(bad(&commit[..10]), WplError::BadRecord { why: "truncated header", .. }));
    // A commit with a body: flag bit 0; the body comes back as written; other flags refused.
    let mut with = Vec::new();
    encode_commit_with(TxnId(4), b"body", &mut with);
    assert_eq!(
        decode(&with, Lsn(9), PAGE).unwrap(),
        WplRecord::CommitWith { txn: TxnId(4), body: b"body" }
    );
    let mut longer = commit.clone();
    longer.push(0);
    assert!(matches!(bad(&longer), WplError::BadRecord { why: "malformed commit record", .. }));
    let mut c = with.clone();
    c[1] = 2;
    assert!(matches!(bad(&c), WplError::BadRecord { why: "unknown flags", .. }));
    let mut img = Vec::new();
    encode_image(pid(0), TxnId(1), &[0; PAGE], &mut img);
    img[1] = 1;
    assert!(matches!(bad(&img), WplError::BadRecord { why: "unknown flags", .. }));
    let mut image = Vec::new();
    encode_image(pid(0), TxnId(1), &[0; PAGE], &mut image);
    assert!(matches!(bad(&image[..image.len() - 1]), WplError::BadRecord { .. }));
    let mut img = image.clone();
    img[4..8].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(bad(&img), WplError::BadRecord { why: "page id out of range", .. }));
    let entry = |page: usize, lsn: u64| WplEntry {
        page: pid(page),
        copy: LogCopy { lsn: Lsn(lsn), txn: TxnId(1) },
        committed: false,
    };
    let mut cp = Vec::new();
    encode_checkpoint(&[entry(1, 3), entry(0, 2)], &mut cp);
    assert!(matches!(bad(&cp), WplError::BadRecord { why: "checkpoint entries out of order", .. }));
    let mut cp = Vec::new();
    encode_checkpoint(&[entry(0, 9)], &mut cp);
    assert!(matches!(bad(&cp), WplError::BadRecord { .. }), "an entry at the checkpoint's LSN");
    let mut cp = Vec::new();
    encode_checkpoint(&[entry(0, 2)], &mut cp);
    cp[4] = 2; // count says two
    assert!(matches!(bad(&cp), WplError::BadRecord { .. }));
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        kind in 6u8..=8,
        lsn in 0u64..1000,
    ) {
        let mut b = bytes;
        if let Some(first) = b.first_mut() {
            *first = kind;
        }
        if let Ok(WplRecord::Checkpoint(cp)) = decode(&b, Lsn(lsn), 1024) {
            prop_assert_eq!(cp.entries().count(), cp.len());
        }
    }
}
