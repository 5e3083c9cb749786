//! WPL's restart over a real log (`thor_study::wpl_log::restart`): generated histories of
//! whole-page logging (pages logged, commits, aborts, checkpoints, copies moved home, the log
//! truncated below what the newest durable checkpoint needs), with the server's own records
//! interleaved, written to a thor-storage log on a [`MemDisk`] that then crashes (unsynced
//! writes landing in any subset, torn at sector granularity). After reopening, one backward
//! pass must give, for every page, the newest copy written by a transaction whose commit
//! record survived: the copy the table names (its image read back from the log) or, if it
//! names none, the page's home.
//!
//! `THOR_WPL_SEEDS` sets the number of histories (default 300).

use std::collections::BTreeMap;
use std::sync::Arc;

use thor_core::{Lsn, PageId, PageMut};
use thor_recovery::wpl::{self, WplConfig, WplEntry};
use thor_recovery::{TxnId, WplError, WplTable};
use thor_storage::{Log, LogOptions, MemDisk, SplitMix64};
use thor_study::wpl_log;

const PAGE: usize = 1024;
const PAGES: u64 = 12;

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        buffer_bytes_max: 16 << 10,
        record_bytes_max: 4096,
        read_chunk_bytes: 256,
        ..LogOptions::default()
    }
}

fn config() -> WplConfig {
    WplConfig { entries_max: 24, txns_max: 3, commits_per_checkpoint: 5 }
}

fn pid(i: u64) -> PageId {
    PageId::new(1 + i as u32).unwrap()
}

/// A valid stored page `page` whose version field is `mark`: each copy a history writes is
/// told apart by it.
fn image(page: PageId, mark: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    let mut p = PageMut::init(&mut b, page).unwrap();
    p.set_version(Lsn(mark));
    p.seal();
    b
}

/// One generated history: the model of what it wrote.
struct History {
    rng: SplitMix64,
    disk: MemDisk,
    log: Log,
    table: WplTable,
    /// Open transactions, with the images they logged last per page.
    open: BTreeMap<u64, BTreeMap<PageId, Vec<u8>>>,
    next_txn: u64,
    /// Commits appended: commit LSN, transaction, its pages' images.
    commits: Vec<(Lsn, u64, BTreeMap<PageId, Vec<u8>>)>,
    /// Commits not yet reported durable to the table.
    undurable: Vec<(Lsn, u64)>,
    /// The checkpoint appended last and not yet durable.
    pending_checkpoint: Option<Lsn>,
    /// The image of every page copy appended, by LSN.
    images: BTreeMap<Lsn, Vec<u8>>,
    /// Pages' homes: written (durably) by the reader.
    home: BTreeMap<PageId, Vec<u8>>,
    marks: u64,
}

impl History {
    fn new(seed: u64) -> History {
        let disk = MemDisk::new();
        let (log, _) = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap();
        History {
            rng: SplitMix64::new(seed),
            disk,
            log,
            table: WplTable::new(config()).unwrap(),
            open: BTreeMap::new(),
            next_txn: 1,
            commits: Vec::new(),
            undurable: Vec::new(),
            pending_checkpoint: None,
            images: BTreeMap::new(),
            home: BTreeMap::new(),
            marks: 0,
        }
    }

    fn append(&mut self, payload: &[u8]) -> Lsn {
        self.log.append(payload).unwrap()
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0..=2 if self.open.len() < config().txns_max => {
                self.open.insert(self.next_txn, BTreeMap::new());
                self.next_txn += 1;
            }
            3..=8 if !self.open.is_empty() => {
                let txn = self.pick_open();
                let page = pid(self.rng.below(PAGES));
                self.marks += 1;
                let img = image(page, self.marks);
                let lsn = self.log.next_lsn();
                match self.table.log_page(TxnId(txn), page, lsn) {
                    Ok(()) => {
                        let mut rec = Vec::new();
                        wpl::encode_image(page, TxnId(txn), &img, &mut rec);
                        assert_eq!(self.append(&rec), lsn);
                        self.images.insert(lsn, img.clone());
                        self.open.get_mut(&txn).unwrap().insert(page, img);
                    }
                    // Refusals the server would turn into a wait or a conflict: nothing appended.
                    Err(
                        WplError::PageBusy { .. }
                        | WplError::TableFull(_)
                        | WplError::TooManyTxns(_),
                    ) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            9..=10 if !self.open.is_empty() => {
                let txn = self.pick_open();
                if self.open[&txn].is_empty() {
                    return;
                }
                if self.table.checkpoint_due() {
                    self.checkpoint();
                }
                let lsn = self.log.next_lsn();
                self.table.commit_appended(TxnId(txn), lsn).unwrap();
                let mut rec = Vec::new();
                wpl::encode_commit(TxnId(txn), &mut rec);
                assert_eq!(self.append(&rec), lsn);
                let pages = self.open.remove(&txn).unwrap();
                self.commits.push((lsn, txn, pages));
                self.undurable.push((lsn, txn));
            }
            11 if !self.open.is_empty() => {
                let txn = self.pick_open();
                // The table knows a transaction once it logged a page.
                if !self.open.remove(&txn).unwrap().is_empty() {
                    self.table.abort(TxnId(txn)).unwrap();
                }
            }
            12 => self.checkpoint(),
            13..=14 => {
                // A record of the server's own (a commit record of kind 2, say): passed over.
                let len = 8 + self.rng.below(64) as usize;
                let mut rec = vec![2u8; len];
                rec[1] = self.rng.below(256) as u8;
                self.append(&rec);
            }
            15..=17 => self.flush(),
            _ => self.install(),
        }
    }

    fn pick_open(&mut self) -> u64 {
        let k = self.rng.below(self.open.len() as u64) as usize;
        *self.open.keys().nth(k).unwrap()
    }

    fn checkpoint(&mut self) {
        let lsn = self.log.next_lsn();
        let (mut scratch, mut rec) = (Vec::<WplEntry>::new(), Vec::new());
        self.table.checkpoint_record(lsn, &mut scratch, &mut rec).unwrap();
        assert_eq!(self.append(&rec), lsn);
        self.pending_checkpoint = Some(lsn);
    }

    /// Group commit: everything appended becomes durable; the table hears of it in order.
    fn flush(&mut self) {
        self.log.flush().unwrap();
        let durable = self.log.durable_lsn();
        for (lsn, txn) in std::mem::take(&mut self.undurable) {
            assert!(lsn <= durable);
            self.table.commit_durable(TxnId(txn)).unwrap();
        }
        if let Some(cp) = self.pending_checkpoint.take() {
            assert!(self.table.checkpoint_durable(cp));
            // What the newest durable checkpoint no longer needs may go.
            if let Some(point) = self.table.truncation_point() {
                self.log.truncate_before(point).unwrap();
            }
        }
    }

    /// The reader moves one committed copy home (durably) and tells the table.
    fn install(&mut self) {
        let Some((page, copy)) = self.table.install_candidates().min_by_key(|(p, _)| *p) else {
            return;
        };
        self.home.insert(page, self.images[&copy.lsn].clone());
        assert!(self.table.installed(page, copy.lsn));
    }

    /// Crashes, reopens, restarts, and checks every page.
    fn crash_and_check(self, seed: u64) -> (usize, bool) {
        let History { disk, log, commits, home, .. } = self;
        let durable = log.durable_lsn();
        drop(log);
        disk.crash(seed);
        let (log, _) = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap();
        let survived = log.next_lsn();
        assert!(survived > durable, "a durable record was lost");
        let r = wpl_log::restart(&log, PAGE, config()).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..PAGES {
            let page = pid(i);
            let newest = commits
                .iter()
                .filter(|(lsn, _, pages)| *lsn < survived && pages.contains_key(&page))
                .map(|(_, _, pages)| &pages[&page])
                .next_back();
            let got = match r.copies.get(&page) {
                Some((copy, bytes)) => {
                    assert_eq!(r.table.committed(page), Some(*copy));
                    Some(bytes.to_vec())
                }
                None => home.get(&page).cloned(),
            };
            assert_eq!(got.as_ref(), newest, "page {page}");
        }
        assert_eq!(r.copies.len(), r.table.len());
        (r.records_read, r.checkpoint.is_some())
    }
}

fn seeds() -> u64 {
    std::env::var("THOR_WPL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300)
}

#[test]
fn restart_finds_every_page_s_newest_committed_copy_after_a_crash_at_any_point() {
    let mut from_checkpoint = 0;
    let mut truncated = 0;
    for seed in 0..seeds() {
        let mut h = History::new(seed);
        let mut r = SplitMix64::new(seed ^ 0xC0FFEE);
        let steps = 1 + r.below(400);
        for _ in 0..steps {
            h.step();
        }
        truncated += u64::from(h.log.first_lsn() > Lsn(1));
        let (_, cp) = h.crash_and_check(r.next_u64());
        from_checkpoint += u64::from(cp);
    }
    eprintln!(
        "{} histories: {from_checkpoint} restarts from a checkpoint, {truncated} over a truncated log",
        seeds()
    );
    // The histories exercise what they claim to: restarts that stop at a checkpoint, over
    // logs truncated below it.
    if seeds() >= 100 {
        assert!(from_checkpoint > seeds() / 4, "{from_checkpoint}");
        assert!(truncated > 0, "{truncated}");
    }
}

#[test]
fn restart_of_a_log_with_only_server_records_finds_nothing() {
    let disk = MemDisk::new();
    let (log, _) = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap();
    for i in 0..10u8 {
        log.append(&[2, i, 0, 0]).unwrap();
    }
    log.flush().unwrap();
    let r = wpl_log::restart(&log, PAGE, config()).unwrap();
    assert!(r.table.is_empty() && r.copies.is_empty() && r.checkpoint.is_none());
    assert_eq!((r.records_read, r.records_skipped), (0, 10));
}

#[test]
fn a_copy_the_table_names_that_is_not_a_page_is_refused() {
    // A committed page image whose page bytes are not a stored page (bad checksum): restart
    // names it, and reading it back refuses it instead of serving it.
    let disk = MemDisk::new();
    let (log, _) = Log::open_streaming(Arc::new(disk.clone()), opts()).unwrap();
    let mut img = image(pid(0), 1);
    img[PAGE - 1] ^= 1;
    let mut rec = Vec::new();
    wpl::encode_image(pid(0), TxnId(1), &img, &mut rec);
    log.append(&rec).unwrap();
    let mut rec = Vec::new();
    wpl::encode_commit(TxnId(1), &mut rec);
    log.append(&rec).unwrap();
    log.flush().unwrap();
    match wpl_log::restart(&log, PAGE, config()) {
        Err(wpl_log::WplRestartError::BadCopy { lsn: 1, page: 1, .. }) => {}
        other => panic!("expected the copy refused, got {other:?}"),
    }
}
