//! The checker: what the simulated system must never do, judged from a god's-eye view.
//!
//! The simulation shows the checker every log record the server appends (decoded from the
//! [`thor_server::Effect::Append`] effects), every durability report, every page the server
//! sends and every crash. Each commit of the simulated clients writes values no other commit
//! writes (the writing client and its transaction number are in every object it writes), so a
//! value names the commit that wrote it.
//!
//! The checker keeps the *log*: the records appended and not known lost, in LSN order. Its
//! rules:
//!
//! - *Acknowledged means durable:* a `CommitOk` may leave only for a commit whose record is
//!   durable; after a crash, every acknowledged commit is still in the recovered log.
//! - *All or nothing, in log order:* after a crash the recovered objects are exactly the fold of
//!   a prefix of the log (every record at or below the recovered point applied in LSN order,
//!   none above), so no commit is partly visible and none is lost if acknowledged.
//! - *Reads see exactly what is durable:* every page sent to a client shows, for every
//!   simulation object in it, the value of the newest durable record that wrote it (and no
//!   object that no durable record created).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use thor_core::le::u32_at;
use thor_core::{Lsn, Oref, PageId, PageView};
use thor_server::record;

/// A transaction of the simulation: (client number, its transaction number). Client 0 is the
/// setup.
pub type TxnId = (u32, u32);

/// Something the system under test did wrong. Its text says what, with the evidence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Violation(pub String);

fn violation<T>(msg: String) -> Result<T, Violation> {
    Err(Violation(msg))
}

/// One appended record.
#[derive(Debug, Clone)]
struct Rec {
    /// Its LSN.
    lsn: Lsn,
    /// The transaction that wrote it.
    txn: TxnId,
    /// The simulation objects it wrote, with their final bytes.
    writes: Vec<(Oref, Bytes)>,
}

/// The class word every simulation object starts with, and where its writer and transaction
/// numbers are (see [`crate::world`]'s cell layout).
#[derive(Debug, Clone, Copy)]
pub struct CellLayout {
    /// The class object's oref.
    pub class: Oref,
    /// Offset of the writer's client number.
    pub writer_at: usize,
    /// Offset of the transaction number.
    pub txn_at: usize,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Checker {
    /// What simulation objects look like.
    layout: Option<CellLayout>,
    /// Records appended and not known lost, in LSN order.
    log: Vec<Rec>,
    /// Transactions whose `CommitOk` left the server.
    acked: BTreeSet<TxnId>,
    /// The server's durable (published) point.
    published: Lsn,
    /// Every simulation object as of `published`.
    state: BTreeMap<Oref, Bytes>,
    /// Every simulation object as of the last record appended (durable or not).
    latest: BTreeMap<Oref, Bytes>,
    /// WPL: the writes found in page images, by the transaction number the images carry,
    /// until its commit record.
    wpl_pending: BTreeMap<u64, Vec<(Oref, Bytes)>>,
}

impl Checker {
    /// A checker of a server whose log starts at `next_lsn`.
    pub fn new(next_lsn: Lsn) -> Checker {
        Checker {
            layout: None,
            log: Vec::new(),
            acked: BTreeSet::new(),
            published: Lsn(next_lsn.0.saturating_sub(1)),
            state: BTreeMap::new(),
            latest: BTreeMap::new(),
            wpl_pending: BTreeMap::new(),
        }
    }

    /// Learns what simulation objects look like (once the setup created their class).
    pub fn set_layout(&mut self, layout: CellLayout) {
        self.layout = Some(layout);
    }

    fn txn_of(&self, data: &[u8]) -> Option<TxnId> {
        let l = self.layout?;
        if data.len() < l.txn_at + 4 || u32_at(data, 0) != l.class.raw() {
            return None;
        }
        Some((u32_at(data, l.writer_at), u32_at(data, l.txn_at)))
    }

    /// The server appended `rec` with `lsn`.
    pub fn appended(&mut self, lsn: Lsn, rec: &[u8]) -> Result<(), Violation> {
        if let Some(last) = self.log.last()
            && lsn <= last.lsn
        {
            return violation(format!("LSN {lsn} appended after LSN {}", last.lsn));
        }
        let mut writes = Vec::new();
        let mut txns = BTreeSet::new();
        let body = match rec.first() {
            // Page images and checkpoints commit nothing themselves (a WPL transaction's
            // writes count at its commit record), but hold their place in the log.
            Some(&KIND_IMAGE) | Some(&KIND_CHECKPOINT) => {
                if rec[0] == KIND_IMAGE {
                    self.wpl_image(lsn, rec)?;
                }
                self.log.push(Rec { lsn, txn: (0, 0), writes: Vec::new() });
                return Ok(());
            }
            Some(&KIND_COMMIT) => {
                let (wpl_txn, written, body) = wpl_commit(lsn, rec)?;
                // The page images carried the versions: each must be one the commit names.
                for (o, b) in self.wpl_pending.remove(&wpl_txn).unwrap_or_default() {
                    if !written.contains(&o) {
                        return violation(format!(
                            "WPL commit {lsn}: its page image changed {o:?}, which it does not write"
                        ));
                    }
                    if let Some(t) = self.txn_of(&b) {
                        txns.insert(t);
                    }
                    writes.push((o, b));
                }
                body
            }
            _ => rec,
        };
        record::decode(body, |o| {
            if let Some(t) = self.txn_of(o.data) {
                txns.insert(t);
                writes.push((o.oref, Bytes::copy_from_slice(o.data)));
            }
        })
        .map_err(|e| Violation(format!("record {lsn} does not decode: {e}")))?;
        let txn = match txns.len() {
            0 => (0, 0),
            1 => *txns.first().expect("one"),
            _ => return violation(format!("record {lsn} mixes the writes of {txns:?}")),
        };
        for (o, b) in &writes {
            self.latest.insert(*o, b.clone());
        }
        self.log.push(Rec { lsn, txn, writes });
        Ok(())
    }

    /// A WPL page image (`thor_recovery::wpl`): the page as committed so far (every record
    /// appended before it) with its transaction's versions laid in. Every simulation object
    /// must equal the state of the log so far, or be a new version (then it is one of the
    /// transaction's writes, credited at its commit record); every object of the page the log
    /// has must be in it.
    fn wpl_image(&mut self, lsn: Lsn, rec: &[u8]) -> Result<(), Violation> {
        let header = thor_recovery::limits::WPL_IMAGE_HEADER_BYTES;
        if rec.len() <= header {
            return violation(format!("WPL image {lsn} is truncated"));
        }
        let page = PageId::new(u32_at(rec, 4))
            .ok_or_else(|| Violation(format!("WPL image {lsn} names no page")))?;
        let wpl_txn = thor_core::le::u64_at(rec, 8);
        let image = &rec[header..];
        let v = PageView::parse_stored(image, page)
            .map_err(|e| Violation(format!("WPL image {lsn} of page {page}: {e}")))?;
        let mut changed = Vec::new();
        let mut seen = 0;
        for (oid, obj) in v.objects() {
            if self.txn_of(obj).is_none() {
                continue;
            }
            let oref = Oref::new(page, oid);
            match self.latest.get(&oref) {
                Some(b) if &b[..] == obj => seen += 1,
                Some(_) => {
                    seen += 1;
                    changed.push((oref, Bytes::copy_from_slice(obj)));
                }
                None => {
                    return violation(format!(
                        "WPL image {lsn} of page {page} holds {oref:?}, which no record created"
                    ));
                }
            }
        }
        let expected = self.latest.range(page_range(page)).count();
        if seen != expected {
            return violation(format!(
                "WPL image {lsn} of page {page} shows {seen} simulation objects, the log has {expected}"
            ));
        }
        self.wpl_pending.entry(wpl_txn).or_default().extend(changed);
        Ok(())
    }

    /// The server learned that the log is durable up to `lsn`.
    pub fn durable(&mut self, lsn: Lsn) {
        if lsn <= self.published {
            return;
        }
        for r in &self.log {
            if r.lsn > self.published && r.lsn <= lsn {
                for (o, b) in &r.writes {
                    self.state.insert(*o, b.clone());
                }
            }
        }
        self.published = lsn;
    }

    /// The server sent `CommitOk` with `lsn`; returns the transaction that LSN belongs to.
    pub fn commit_ok(&mut self, lsn: Lsn) -> Result<TxnId, Violation> {
        let Some(r) = self.log.iter().find(|r| r.lsn == lsn) else {
            return violation(format!("CommitOk for LSN {lsn}, which was never appended"));
        };
        if lsn > self.published {
            return violation(format!(
                "CommitOk for LSN {lsn} (txn {:?}) before it was durable (durable: {})",
                r.txn, self.published
            ));
        }
        self.acked.insert(r.txn);
        Ok(r.txn)
    }

    /// The server crashed and recovered with its log continuing at `next_lsn`: records at or
    /// above it were lost. Checks that no acknowledged commit was, and rebuilds the expected
    /// state from what survived.
    pub fn recovered(&mut self, next_lsn: Lsn) -> Result<(), Violation> {
        let lost: Vec<&Rec> = self.log.iter().filter(|r| r.lsn >= next_lsn).collect();
        for r in &lost {
            if self.acked.contains(&r.txn) {
                return violation(format!(
                    "acknowledged txn {:?} (LSN {}) is lost: the log recovered only up to LSN {}",
                    r.txn,
                    r.lsn,
                    next_lsn.0.saturating_sub(1)
                ));
            }
        }
        self.log.retain(|r| r.lsn < next_lsn);
        self.state.clear();
        for r in &self.log {
            for (o, b) in &r.writes {
                self.state.insert(*o, b.clone());
            }
        }
        self.latest = self.state.clone();
        // Page images whose commit record did not survive commit nothing.
        self.wpl_pending.clear();
        self.published = Lsn(next_lsn.0.saturating_sub(1));
        Ok(())
    }

    /// The state a backup that holds the log up to `last` must have: every acknowledged commit
    /// is at or below `last` (a backup holds everything acknowledged before it was taken), and
    /// the objects are the fold of the records up to `last`. Returns that state, to check the
    /// backup's pages against with [`Checker::page_of`].
    pub fn backup_state(&self, last: Lsn) -> Result<BTreeMap<Oref, Bytes>, Violation> {
        if last > self.log.last().map_or(last, |r| r.lsn) {
            return violation(format!("a backup claims LSN {last}, beyond the log"));
        }
        let mut state = BTreeMap::new();
        for r in &self.log {
            if r.lsn <= last {
                for (o, b) in &r.writes {
                    state.insert(*o, b.clone());
                }
            } else if self.acked.contains(&r.txn) {
                return violation(format!(
                    "a backup up to LSN {last} misses acknowledged txn {:?} (LSN {})",
                    r.txn, r.lsn
                ));
            }
        }
        Ok(state)
    }

    /// Checks a page the server composed: every simulation object in it has exactly its
    /// durable value, and every durable simulation object of the page is in it.
    pub fn page(&self, page: PageId, bytes: &[u8]) -> Result<(), Violation> {
        self.page_of(&self.state, page, bytes)
    }

    /// [`Checker::page`] against `state` (the durable state, or a backup's).
    ///
    /// The page's objects come in oid order and so do the state's objects of the page (its
    /// range of orefs): the two are walked side by side, each durable object met once, rather
    /// than looked up one by one and then counted (a page is checked every time a client is
    /// sent one).
    pub fn page_of(
        &self,
        state: &BTreeMap<Oref, Bytes>,
        page: PageId,
        bytes: &[u8],
    ) -> Result<(), Violation> {
        let v = PageView::parse(bytes)
            .map_err(|e| Violation(format!("page {page} sent malformed: {e}")))?;
        if v.page_id() != page {
            return violation(format!("page {page} sent with the header of page {}", v.page_id()));
        }
        let mut durable = state.range(page_range(page)).peekable();
        for (oid, obj) in v.objects() {
            if self.txn_of(obj).is_none() {
                continue;
            }
            let oref = Oref::new(page, oid);
            // A durable object before this one that the page does not show.
            if durable.next_if(|(o, _)| **o < oref).is_some() {
                return self.page_count_violation(state, &v, page);
            }
            match durable.next_if(|(o, _)| **o == oref) {
                Some((_, want)) if &want[..] == obj => {}
                Some((_, want)) => {
                    return violation(format!(
                        "page {page}: {oref:?} is {:?} (txn {:?}), the durable state has {:?} (txn {:?})",
                        obj,
                        self.txn_of(obj),
                        &want[..],
                        self.txn_of(want)
                    ));
                }
                None => {
                    return violation(format!(
                        "page {page}: {oref:?} written by txn {:?} is visible but no durable record wrote it",
                        self.txn_of(obj)
                    ));
                }
            }
        }
        if durable.next().is_some() {
            return self.page_count_violation(state, &v, page);
        }
        Ok(())
    }

    /// The violation of a page that misses durable simulation objects.
    fn page_count_violation(
        &self,
        state: &BTreeMap<Oref, Bytes>,
        v: &PageView<'_>,
        page: PageId,
    ) -> Result<(), Violation> {
        let seen = v.objects().filter(|(_, obj)| self.txn_of(obj).is_some()).count();
        let expected = state.range(page_range(page)).count();
        violation(format!(
            "page {page} shows {seen} simulation objects, the durable state has {expected}"
        ))
    }

    /// The pages that hold durable simulation objects.
    pub fn pages(&self) -> BTreeSet<PageId> {
        self.state.keys().filter_map(|o| o.page()).collect()
    }

    /// Commits acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.len()
    }

    /// Whether `txn` was acknowledged.
    pub fn is_acked(&self, txn: TxnId) -> bool {
        self.acked.contains(&txn)
    }

    /// The newest durable LSN.
    pub fn published(&self) -> Lsn {
        self.published
    }

    /// The LSN of `txn`'s record, if the log holds it (after the last recovery).
    pub fn lsn_of(&self, txn: TxnId) -> Option<Lsn> {
        self.log.iter().find(|r| r.txn == txn).map(|r| r.lsn)
    }

    /// The transaction whose write each of `objects` holds in the durable state.
    pub fn writers(&self, objects: &[Oref]) -> Vec<(Oref, Option<TxnId>)> {
        objects.iter().map(|o| (*o, self.state.get(o).and_then(|b| self.txn_of(b)))).collect()
    }
}

const KIND_IMAGE: u8 = thor_recovery::wpl::KIND_IMAGE;
const KIND_COMMIT: u8 = thor_recovery::wpl::KIND_COMMIT;
const KIND_CHECKPOINT: u8 = thor_recovery::wpl::KIND_CHECKPOINT;

/// A WPL commit record as thor-server writes it: (the transaction number its images carry,
/// the objects it writes, the commit record of its created objects).
fn wpl_commit(lsn: Lsn, rec: &[u8]) -> Result<(u64, BTreeSet<Oref>, &[u8]), Violation> {
    let bad = |why: &str| Violation(format!("WPL commit {lsn}: {why}"));
    let header = thor_recovery::limits::WPL_COMMIT_BYTES;
    if rec.len() < header + 4 || rec[1] != 1 {
        return Err(bad("not a commit record with a body"));
    }
    let txn = thor_core::le::u64_at(rec, 8);
    let body = &rec[header..];
    let n = u32_at(body, 0) as usize;
    if body.len() < 4 + 4 * n {
        return Err(bad("its written objects run past its end"));
    }
    let mut written = BTreeSet::new();
    for i in 0..n {
        let o = Oref::from_raw(u32_at(body, 4 + 4 * i)).ok_or_else(|| bad("a bad oref"))?;
        written.insert(o);
    }
    Ok((txn, written, &body[4 + 4 * n..]))
}

/// Every oref of `page`.
fn page_range(page: PageId) -> std::ops::RangeInclusive<Oref> {
    let first = Oref::new(page, thor_core::Oid::new(0).expect("oid 0"));
    let last = Oref::new(
        page,
        thor_core::Oid::new((thor_core::ids::OIDS_PER_PAGE - 1) as u16).expect("last oid"),
    );
    first..=last
}

/// The offline checker (`thor check`, [`thor_admin::check_disk`]) on a database as a crash
/// or a backup left it, before recovery: every page, every log record and every reference
/// must pass, as an operator running `thor check` on it would require. `what` names the
/// database in the violation. The disk's fault plan is off meanwhile (the check only reads).
pub fn offline(disk: &thor_storage::MemDisk, what: &str) -> Result<(), Violation> {
    let plan = disk.fault_plan();
    disk.set_fault_plan(thor_storage::FaultPlan::default());
    let options = thor_admin::CheckOptions { max_problems: 20 };
    let report = thor_admin::check_disk(disk, what, &options, &thor_admin::NoProgress);
    disk.set_fault_plan(plan);
    let report = report.map_err(|e| Violation(format!("thor check cannot check {what}: {e}")))?;
    if !report.is_healthy() {
        let lines: Vec<String> = report.problems().iter().map(ToString::to_string).collect();
        return Err(Violation(format!(
            "thor check finds {} problems in {what}:\n{}",
            report.problems_total(),
            lines.join("\n")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use thor_core::{Oid, PageMut};

    use super::*;

    /// The simulation class's oref, raw: page 1, oid 2.
    const CLASS: u32 = Oref::new(PageId::new(1).unwrap(), Oid::new(2).unwrap()).raw();
    const PAGE: u32 = 9;

    /// A simulation object written by client `writer` in its transaction `txn`.
    fn cell(writer: u32, txn: u32) -> Bytes {
        let mut b = vec![0u8; 20];
        b[..4].copy_from_slice(&CLASS.to_le_bytes());
        b[8..12].copy_from_slice(&writer.to_le_bytes());
        b[12..16].copy_from_slice(&txn.to_le_bytes());
        Bytes::from(b)
    }

    /// A page of `objects` in oid order (`None`: a slot filled with a non-simulation object).
    fn page(objects: &[Option<Bytes>]) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        let mut p = PageMut::init(&mut b, PageId::new(PAGE).unwrap()).unwrap();
        for o in objects {
            let other = Bytes::from(vec![0u8; 8]);
            p.append(o.as_ref().unwrap_or(&other)).unwrap();
        }
        p.seal();
        b
    }

    fn oref(oid: u16) -> Oref {
        Oref::new(PageId::new(PAGE).unwrap(), Oid::new(oid).unwrap())
    }

    fn checker() -> Checker {
        let mut c = Checker::new(Lsn(1));
        let class = Oref::from_raw(CLASS).unwrap();
        c.set_layout(CellLayout { class, writer_at: 8, txn_at: 12 });
        c
    }

    #[test]
    fn a_page_passes_only_with_exactly_the_durable_objects() {
        let c = checker();
        let state: BTreeMap<Oref, Bytes> =
            [(oref(0), cell(1, 1)), (oref(2), cell(2, 7))].into_iter().collect();
        let pid = PageId::new(PAGE).unwrap();
        let exact = page(&[Some(cell(1, 1)), None, Some(cell(2, 7))]);
        c.page_of(&state, pid, &exact).expect("the durable state, exactly");
        let stale = page(&[Some(cell(1, 1)), None, Some(cell(2, 6))]);
        let e = c.page_of(&state, pid, &stale).unwrap_err();
        assert!(e.0.contains("the durable state has"), "{e:?}");
        let missing_first = page(&[None, None, Some(cell(2, 7))]);
        let e = c.page_of(&state, pid, &missing_first).unwrap_err();
        assert!(e.0.contains("shows 1 simulation objects, the durable state has 2"), "{e:?}");
        let missing_last = page(&[Some(cell(1, 1))]);
        let e = c.page_of(&state, pid, &missing_last).unwrap_err();
        assert!(e.0.contains("shows 1 simulation objects, the durable state has 2"), "{e:?}");
        let extra = page(&[Some(cell(1, 1)), Some(cell(3, 3)), Some(cell(2, 7))]);
        let e = c.page_of(&state, pid, &extra).unwrap_err();
        assert!(e.0.contains("no durable record wrote it"), "{e:?}");
    }
}
