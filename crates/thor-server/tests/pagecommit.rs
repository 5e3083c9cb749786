//! (Moved out of the core crate with the split of issue 31: these drive a real log on a
//! `MemDisk`, which only the driver crate may use.)
//!
//! Scenario tests of the page modes in the core, one behaviour each: records applied to the
//! committed image (read from disk when it is not cached), shipped pages, and every way a
//! page-based commit can be malformed, refused before anything is logged.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, RawRef, ServerId, VarKind};
use thor_recovery::diff::Span;
use thor_recovery::record::{self, RecordHeader};
use thor_recovery::{Images, Pieces, TxnId};
use thor_storage::{LogOptions, MemDisk};
use thor_wire::{
    Commit, CommitMode, Hello, PageCommit, PageRecords, RefusedCode, Reply, ReplyBody, Request,
    RequestBody,
};

use thor_server::io::{self, CommitLog, DiskSide};
use thor_server::{ConnId, Core, CoreConfig, Effect, Input, StudyOptions};

/// A core on an in-memory disk whose effects are all performed at once.
struct Harness {
    core: Core,
    disk_side: DiskSide,
    log: Arc<thor_storage::Log>,
    pending: VecDeque<Effect>,
    now: u64,
    /// Page reads performed (to see REDO read a page).
    reads: usize,
}

/// `wpl` mode with the default table.
fn wpl_mode() -> StudyOptions {
    StudyOptions { mode: CommitMode::Wpl, ..StudyOptions::default() }
}

impl Harness {
    fn new(mode: CommitMode, cache_pages: usize) -> Harness {
        let cfg = CoreConfig { page_cache_bytes: cache_pages * 4096, ..CoreConfig::default() };
        let disk = MemDisk::new();
        io::create(&disk, 4096, ServerId(7)).unwrap();
        Harness::open(disk, StudyOptions { mode, ..StudyOptions::default() }, cfg)
    }

    /// Opens (recovers) the database on `disk`.
    fn open(disk: MemDisk, study: StudyOptions, cfg: CoreConfig) -> Harness {
        let r = io::recover(Arc::new(disk.clone()), cfg, LogOptions::default(), &study).unwrap();
        let core = r.core;
        Harness {
            core,
            disk_side: r.disk_side,
            log: r.log,
            pending: VecDeque::new(),
            now: 1,
            reads: 0,
        }
    }

    fn step(&mut self, input: Input) {
        self.now += 1;
        let mut fx = Vec::new();
        self.core.step(self.now, input, &mut fx);
        self.pending.extend(fx);
    }

    fn settle(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let mut appended = false;
            while let Some(e) = self.pending.pop_front() {
                match e {
                    Effect::Append { lsn, record } => {
                        assert_eq!(self.log.append(&record).unwrap(), lsn);
                        appended = true;
                    }
                    Effect::Reply { .. } | Effect::Done { .. } => out.push(e),
                    other => {
                        self.reads += usize::from(matches!(other, Effect::Read { .. }));
                        let input = self.disk_side.perform(&other, &*self.log).unwrap();
                        self.step(input);
                    }
                }
            }
            if !appended {
                return out;
            }
            let lsn = self.log.sync().unwrap();
            self.step(Input::Durable { lsn });
        }
    }

    fn connect(&mut self, conn: ConnId) -> CommitMode {
        self.step(Input::Connect { conn });
        match self.request(conn, 1, RequestBody::Hello(Hello::new(Vec::new(), "test"))).body {
            ReplyBody::HelloOk(info) => info.commit_mode,
            other => panic!("{other:?}"),
        }
    }

    fn request(&mut self, conn: ConnId, id: u64, body: RequestBody) -> Reply {
        self.step(Input::Request { conn, id, req: Request::new(body) });
        let out = self.settle();
        let mut replies: Vec<Reply> = out
            .into_iter()
            .filter_map(|e| match e {
                Effect::Reply { conn: c, id: i, reply, .. } if c == conn && i == id => Some(reply),
                _ => None,
            })
            .collect();
        assert_eq!(replies.len(), 1);
        replies.remove(0)
    }

    fn fetch(&mut self, conn: ConnId, id: u64, page: PageId) -> Bytes {
        match self.request(conn, id, RequestBody::Fetch { page }).body {
            ReplyBody::Page { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        }
    }
}

fn item_class() -> ClassDesc {
    ClassDesc::new("t.Item", 8, &[0], VarKind::None).unwrap()
}

/// Commits (as `obj` does: creation travels whole in every mode) the item class and `n`
/// items with payload words 0..n; returns the items.
fn items(h: &mut Harness, conn: ConnId, n: u32) -> Vec<Oref> {
    let mut created = vec![Bytes::from(item_class().to_class_object())];
    for v in 0..n {
        let mut o = item_class().new_object(RawRef::tagged_word(0), 0);
        put_u32(&mut o, 8, v);
        created.push(Bytes::from(o));
    }
    let body = RequestBody::PageCommit(PageCommit {
        txn: 1,
        mode: h.core.commit_mode().code(),
        created,
        ..PageCommit::default()
    });
    let r = h.request(conn, 2, body);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    created[1..].to_vec()
}

/// The record of `oref`'s payload word becoming `v`, on `page` (its current image).
fn record_of(page: &[u8], oref: Oref, v: u32, txn: u64, images: Images) -> (Vec<u8>, Vec<u8>) {
    let view = PageView::parse(page).unwrap();
    let r = view.object_range(oref.oid()).unwrap();
    let mut cur = page.to_vec();
    put_u32(&mut cur[r.start..r.end], 8, v);
    let span = Span::new(r.start + 8, r.start + 12);
    let pre_piece = [(0usize, page)];
    let pre = Pieces { page_bytes: page.len(), pieces: &pre_piece };
    let header = RecordHeader { page: oref.page().unwrap(), txn: TxnId(txn), images };
    let mut out = Vec::new();
    record::encode(&header, &[span], &cur, &pre, &mut out).unwrap();
    (out, cur)
}

fn payload(page: &[u8], oref: Oref) -> u32 {
    let view = PageView::parse(page).unwrap();
    u32_at(view.object(oref.oid()).unwrap(), 8)
}

fn page_commit(h: &Harness, txn: u64, writes: &[Oref], records: Vec<Vec<u8>>) -> RequestBody {
    RequestBody::PageCommit(PageCommit {
        txn,
        mode: h.core.commit_mode().code(),
        reads: writes.to_vec(),
        writes: writes.to_vec(),
        records: records.into_iter().map(Bytes::from).collect(),
        ..PageCommit::default()
    })
}

fn refused(r: &Reply) -> bool {
    matches!(r.body, ReplyBody::CommitRefused { .. })
}

#[test]
fn hello_tells_the_mode() {
    for mode in CommitMode::ALL {
        let mut h = Harness::new(mode, 16);
        assert_eq!(h.connect(1), mode);
    }
}

#[test]
fn redo_applies_records_to_the_committed_image_read_from_disk() {
    let mut h = Harness::new(CommitMode::PdRedo, 1);
    h.connect(1);
    // Items on several pages, so that fetching a far one pushes the first out of the cache.
    let it = items(&mut h, 1, 600);
    let page = it[0].page().unwrap();
    assert_ne!(it[599].page(), Some(page));
    let img = h.fetch(1, 3, page);
    // Install everything: the committed image is then the page file's alone.
    for _ in 0..100 {
        if h.core.stats().mob_entries == 0 {
            break;
        }
        let mut fx = Vec::new();
        h.core.start_round(&mut fx);
        h.pending.extend(fx);
        h.settle();
    }
    assert_eq!(h.core.stats().mob_entries, 0);
    h.fetch(1, 4, it[599].page().unwrap());
    let reads = h.reads;
    let (rec, _) = record_of(&img, it[1], 77, 5, Images::Redo);
    let r = h.request(1, 5, page_commit(&h, 5, &[it[1]], vec![rec]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert!(h.reads > reads, "the page was read to apply the record");
    assert_eq!(h.core.server_stats().redo_reads, 1);
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1]), payload(&now, it[2])), (0, 77, 2));
}

#[test]
fn esm_takes_the_written_objects_from_the_shipped_page_and_nothing_else() {
    let mut h = Harness::new(CommitMode::PdEsm, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (rec, mut cur) = record_of(&img, it[1], 55, 5, Images::Redo);
    // The shipped page also changes item 2, which the transaction did not write: ignored.
    let r2 = PageView::parse(&img).unwrap().object_range(it[2].oid()).unwrap();
    put_u32(&mut cur[r2.start..r2.end], 8, 999);
    thor_core::page::seal(&mut cur);
    let RequestBody::PageCommit(mut c) = page_commit(&h, 5, &[it[1]], vec![rec]) else {
        unreachable!()
    };
    c.pages = vec![(page, Bytes::from(cur))];
    let r = h.request(1, 5, RequestBody::PageCommit(c));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[1]), payload(&now, it[2])), (55, 2));
    assert_eq!(h.core.server_stats().pages_shipped, 1);
}

#[test]
fn a_region_outside_the_written_objects_is_refused_and_nothing_is_logged() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let img = h.fetch(1, 3, it[0].page().unwrap());
    let (rec, _) = record_of(&img, it[2], 9, 5, Images::Redo);
    let before = h.core.next_lsn();
    // The record changes item 2; the write set names item 1 only.
    let r = h.request(1, 5, page_commit(&h, 5, &[it[1]], vec![rec]));
    assert!(matches!(r.body, ReplyBody::CommitRefused { code: RefusedCode::Other, .. }), "{r:?}");
    assert_eq!(h.core.next_lsn(), before);
    assert_eq!(payload(&h.fetch(1, 6, it[0].page().unwrap()), it[2]), 2);
}

#[test]
fn a_commit_in_another_mode_is_refused() {
    let mut h = Harness::new(CommitMode::Obj, 16);
    h.connect(1);
    let body = RequestBody::PageCommit(PageCommit { txn: 1, mode: 1, ..PageCommit::default() });
    assert!(refused(&h.request(1, 2, body)));
    let mut h = Harness::new(CommitMode::PdEsm, 16);
    h.connect(1);
    let body = RequestBody::PageCommit(PageCommit { txn: 1, mode: 1, ..PageCommit::default() });
    assert!(refused(&h.request(1, 2, body)));
    // An obj-mode commit is still taken by a page-mode server (creation, tools).
    let body = RequestBody::Commit(Commit::default());
    assert!(matches!(h.request(1, 3, body).body, ReplyBody::CommitOk { .. }));
}

#[test]
fn early_records_are_staged_and_applied_only_with_their_commit() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    h.connect(2);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (early, cur) = record_of(&img, it[0], 10, 7, Images::RedoUndo);
    let body = RequestBody::PageRecords(PageRecords {
        txn: 7,
        records: vec![Bytes::from(early)],
        pages: Vec::new(),
    });
    assert!(matches!(h.request(1, 4, body).body, ReplyBody::Ack));
    // Staged, not applied: another client sees the committed value.
    assert_eq!(payload(&h.fetch(2, 2, page), it[0]), 0);
    let (late, _) = record_of(&cur, it[1], 11, 7, Images::Redo);
    let r = h.request(1, 5, page_commit(&h, 7, &[it[0], it[1]], vec![late]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(2, 3, page);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1])), (10, 11));
    assert_eq!(h.core.server_stats().page_records_early, 1);
}

#[test]
fn early_records_of_an_abandoned_transaction_are_dropped() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (early, _) = record_of(&img, it[0], 10, 7, Images::RedoUndo);
    let body = RequestBody::PageRecords(PageRecords {
        txn: 7,
        records: vec![Bytes::from(early)],
        pages: Vec::new(),
    });
    assert!(matches!(h.request(1, 4, body).body, ReplyBody::Ack));
    // The client aborted transaction 7 locally; transaction 8 writes item 1 only.
    let (rec, _) = record_of(&img, it[1], 12, 8, Images::Redo);
    let r = h.request(1, 5, page_commit(&h, 8, &[it[1]], vec![rec]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1])), (0, 12));
}

#[test]
fn a_malformed_early_record_poisons_its_transaction_only() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    // Redo-only records may not come early; nor may bytes that are no record.
    let (redo_only, _) = record_of(&img, it[0], 10, 7, Images::Redo);
    for bad in [redo_only, vec![1, 2, 3]] {
        let body = RequestBody::PageRecords(PageRecords {
            txn: 7,
            records: vec![Bytes::from(bad)],
            pages: Vec::new(),
        });
        let r = h.request(1, 4, body);
        assert!(matches!(r.body, ReplyBody::Error { .. }), "{r:?}");
    }
    let (rec, _) = record_of(&img, it[1], 12, 7, Images::Redo);
    assert!(refused(&h.request(1, 5, page_commit(&h, 7, &[it[1]], vec![rec]))));
    let (rec, _) = record_of(&img, it[1], 13, 8, Images::Redo);
    let r = h.request(1, 6, page_commit(&h, 8, &[it[1]], vec![rec]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
}

#[test]
fn a_record_naming_another_transaction_is_refused() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let img = h.fetch(1, 3, it[0].page().unwrap());
    let (rec, _) = record_of(&img, it[1], 12, 99, Images::Redo);
    assert!(refused(&h.request(1, 5, page_commit(&h, 8, &[it[1]], vec![rec]))));
}

#[test]
fn a_page_shipped_twice_or_of_another_id_is_refused() {
    let mut h = Harness::new(CommitMode::PdEsm, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (rec, mut cur) = record_of(&img, it[1], 5, 5, Images::Redo);
    thor_core::page::seal(&mut cur);
    let other = PageId::new(page.get() + 1).unwrap();
    let shipped = [vec![(page, cur.clone()), (page, cur.clone())], vec![(other, cur)]];
    for (i, pages) in shipped.into_iter().enumerate() {
        let RequestBody::PageCommit(mut c) = page_commit(&h, 5, &[it[1]], vec![rec.clone()]) else {
            unreachable!()
        };
        c.pages = pages.into_iter().map(|(p, b)| (p, Bytes::from(b))).collect();
        assert!(refused(&h.request(1, 10 + i as u64, RequestBody::PageCommit(c))));
    }
    assert_eq!(payload(&h.fetch(1, 20, page), it[1]), 1);
}

/// `PageRecords` of transaction `txn` stealing `pages` (each sealed here), with `records`.
fn steal(txn: u64, records: Vec<Vec<u8>>, pages: Vec<(PageId, Vec<u8>)>) -> RequestBody {
    let pages = pages
        .into_iter()
        .map(|(p, mut b)| {
            thor_core::page::seal(&mut b);
            (p, Bytes::from(b))
        })
        .collect();
    let records = records.into_iter().map(Bytes::from).collect();
    RequestBody::PageRecords(PageRecords { txn, records, pages })
}

#[test]
fn esm_takes_a_page_stolen_before_commit_as_if_shipped_with_it() {
    let mut h = Harness::new(CommitMode::SdEsm, 16);
    h.connect(1);
    h.connect(2);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (early, cur) = record_of(&img, it[0], 40, 7, Images::RedoUndo);
    assert!(matches!(
        h.request(1, 4, steal(7, vec![early], vec![(page, cur)])).body,
        ReplyBody::Ack
    ));
    // Staged, not applied.
    assert_eq!(payload(&h.fetch(2, 2, page), it[0]), 0);
    // The commit ships nothing for the page: its bytes come from the stolen copy.
    let r = h.request(1, 5, page_commit(&h, 7, &[it[0]], Vec::new()));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(payload(&h.fetch(2, 3, page), it[0]), 40);
    let st = h.core.server_stats();
    assert_eq!((st.pages_shipped, st.pages_early, st.page_records_early), (1, 1, 1));
}

#[test]
fn esm_a_page_shipped_at_commit_replaces_its_stolen_copy() {
    let mut h = Harness::new(CommitMode::PdEsm, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (early, cur) = record_of(&img, it[0], 40, 7, Images::RedoUndo);
    assert!(matches!(
        h.request(1, 4, steal(7, vec![early], vec![(page, cur.clone())])).body,
        ReplyBody::Ack
    ));
    // Written again after the steal: item 0 once more, and item 1.
    let (_, cur2) = record_of(&cur, it[0], 41, 7, Images::Redo);
    let (rec, mut cur3) = record_of(&cur2, it[1], 51, 7, Images::Redo);
    thor_core::page::seal(&mut cur3);
    let RequestBody::PageCommit(mut c) = page_commit(&h, 7, &[it[0], it[1]], vec![rec]) else {
        unreachable!()
    };
    c.pages = vec![(page, Bytes::from(cur3))];
    let r = h.request(1, 5, RequestBody::PageCommit(c));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1]), payload(&now, it[2])), (41, 51, 2));
}

#[test]
fn stolen_pages_of_an_abandoned_transaction_are_dropped() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let (_, cur) = record_of(&img, it[0], 40, 7, Images::Redo);
    assert!(matches!(
        h.request(1, 4, steal(7, Vec::new(), vec![(page, cur)])).body,
        ReplyBody::Ack
    ));
    // Transaction 7 ended unanswered (aborted at the client); 8 writes item 1 from the image.
    let r = h.request(1, 5, wpl_commit(&h, 8, &img, &[(it[1], 12)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1])), (0, 12));
}

#[test]
fn wpl_logs_a_page_stolen_before_commit_with_the_commit() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    h.connect(2);
    let it = items(&mut h, 1, 600);
    let (p0, p1) = (it[0].page().unwrap(), it[599].page().unwrap());
    assert_ne!(p0, p1);
    let img0 = h.fetch(1, 3, p0);
    let img1 = h.fetch(1, 4, p1);
    let (_, cur0) = record_of(&img0, it[0], 40, 7, Images::Redo);
    assert!(matches!(h.request(1, 5, steal(7, Vec::new(), vec![(p0, cur0)])).body, ReplyBody::Ack));
    assert_eq!(payload(&h.fetch(2, 2, p0), it[0]), 0, "staged, not logged");
    let images = h.core.server_stats().wpl_images;
    let RequestBody::PageCommit(mut c) = wpl_commit(&h, 7, &img1, &[(it[599], 9)]) else {
        unreachable!()
    };
    c.writes.push(it[0]);
    let r = h.request(1, 6, RequestBody::PageCommit(c));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.server_stats().wpl_images, images + 2, "both pages logged whole");
    assert_eq!(payload(&h.fetch(2, 3, p0), it[0]), 40);
    assert_eq!(payload(&h.fetch(2, 4, p1), it[599]), 9);
}

#[test]
fn pages_are_refused_before_commit_where_the_mode_ships_none_and_poison_the_transaction() {
    let mut h = Harness::new(CommitMode::PdRedo, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let r = h.request(1, 4, steal(7, Vec::new(), vec![(page, img.to_vec())]));
    assert!(matches!(r.body, ReplyBody::Error { .. }), "{r:?}");
    let (rec, _) = record_of(&img, it[1], 12, 7, Images::Redo);
    assert!(refused(&h.request(1, 5, page_commit(&h, 7, &[it[1]], vec![rec]))));
    // A stolen page that is not the page it names poisons an ESM transaction the same way.
    let mut h = Harness::new(CommitMode::PdEsm, 16);
    h.connect(1);
    let it = items(&mut h, 1, 2);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let other = PageId::new(page.get() + 1).unwrap();
    let r = h.request(1, 4, steal(7, Vec::new(), vec![(other, img.to_vec())]));
    assert!(matches!(r.body, ReplyBody::Error { .. }), "{r:?}");
    let (rec, mut cur) = record_of(&img, it[1], 12, 7, Images::Redo);
    thor_core::page::seal(&mut cur);
    let RequestBody::PageCommit(mut c) = page_commit(&h, 7, &[it[1]], vec![rec]) else {
        unreachable!()
    };
    c.pages = vec![(page, Bytes::from(cur))];
    assert!(refused(&h.request(1, 5, RequestBody::PageCommit(c))));
}

// ---- Whole-page logging (`wpl`) ----

/// A WPL `PageCommit` writing `writes` (each `(oref, payload)`) into `image`, the page as the
/// client fetched it (its version included), shipped whole.
fn wpl_commit(h: &Harness, txn: u64, image: &[u8], writes: &[(Oref, u32)]) -> RequestBody {
    let view = PageView::parse(image).unwrap();
    let page = view.page_id();
    let mut cur = image.to_vec();
    for (o, v) in writes {
        let r = view.object_range(o.oid()).unwrap();
        put_u32(&mut cur[r.start..r.end], 8, *v);
    }
    thor_core::page::seal(&mut cur);
    let orefs: Vec<Oref> = writes.iter().map(|(o, _)| *o).collect();
    RequestBody::PageCommit(PageCommit {
        txn,
        mode: h.core.commit_mode().code(),
        reads: orefs.clone(),
        writes: orefs,
        pages: vec![(page, Bytes::from(cur))],
        ..PageCommit::default()
    })
}

/// The log's records from `from` on.
fn log_from(h: &Harness, from: thor_core::Lsn) -> Vec<(thor_core::Lsn, Vec<u8>)> {
    let mut r = h.log.reader(from).unwrap();
    let mut out = Vec::new();
    while let Some((lsn, payload)) = r.next().unwrap() {
        out.push((lsn, payload.to_vec()));
    }
    out
}

/// Runs install rounds until the MOB is empty.
fn install_all(h: &mut Harness) {
    for _ in 0..100 {
        if h.core.stats().mob_entries == 0 {
            return;
        }
        let mut fx = Vec::new();
        h.core.start_round(&mut fx);
        h.pending.extend(fx);
        h.settle();
    }
    panic!("the MOB does not empty");
}

#[test]
fn wpl_logs_each_written_page_whole_as_committed_and_then_its_commit_record() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    // The client's page also has item 2 changed, which it does not write: the logged image is
    // the server's committed page with the written object laid in, so item 2 stays 2.
    let RequestBody::PageCommit(mut c) = wpl_commit(&h, 5, &img, &[(it[1], 55)]) else {
        unreachable!()
    };
    let mut cur = c.pages[0].1.to_vec();
    let r2 = PageView::parse(&img).unwrap().object_range(it[2].oid()).unwrap();
    put_u32(&mut cur[r2.start..r2.end], 8, 999);
    thor_core::page::seal(&mut cur);
    c.pages[0].1 = Bytes::from(cur);
    let before = h.core.next_lsn();
    let r = h.request(1, 5, RequestBody::PageCommit(c));
    let ReplyBody::CommitOk { lsn, .. } = r.body else { panic!("{r:?}") };
    // A checkpoint first (the first WPL commit writes one), the image, the commit record.
    let recs = log_from(&h, before);
    let kinds: Vec<u8> = recs.iter().map(|(_, b)| b[0]).collect();
    assert_eq!(kinds, [8, 6, 7], "{kinds:?}");
    assert_eq!(recs[2].0, lsn, "acknowledged with the commit record's LSN");
    let image = &recs[1].1[16..];
    let v = PageView::parse_stored(image, page).unwrap();
    assert_eq!(v.version(), lsn, "the image carries its commit's LSN");
    assert_eq!((payload(image, it[1]), payload(image, it[2])), (55, 2));
    assert_eq!(recs[2].1[1], 1, "the commit record carries a body");
    let now = h.fetch(1, 6, page);
    assert_eq!((payload(&now, it[1]), payload(&now, it[2])), (55, 2));
    let st = h.core.stats();
    assert_eq!((st.wpl.images, st.wpl_table), (1, 1), "{st:?}");
}

#[test]
fn wpl_refuses_a_page_written_since_the_client_fetched_it_and_logs_nothing() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    h.connect(2);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let old = h.fetch(2, 3, page);
    let img = h.fetch(1, 3, page);
    let r = h.request(1, 4, wpl_commit(&h, 5, &img, &[(it[1], 55)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    // Client 2 writes another object of the page, on its copy from before client 1's commit.
    let before = h.core.next_lsn();
    let r = h.request(2, 4, wpl_commit(&h, 9, &old, &[(it[2], 77)]));
    assert!(matches!(r.body, ReplyBody::CommitRefused { code: RefusedCode::Stale, .. }), "{r:?}");
    assert_eq!(h.core.next_lsn(), before, "nothing was logged");
    assert_eq!(h.core.stats().wpl.page_rule_refusals, 1);
    // On a fresh copy it commits, keeping client 1's write.
    let fresh = h.fetch(2, 5, page);
    let r = h.request(2, 6, wpl_commit(&h, 10, &fresh, &[(it[2], 77)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let now = h.fetch(2, 7, page);
    assert_eq!((payload(&now, it[1]), payload(&now, it[2])), (55, 77));
}

#[test]
fn wpl_checks_the_page_rule_against_a_commit_prepared_but_not_yet_durable() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    h.connect(2);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let a = h.fetch(1, 3, page);
    let b = h.fetch(2, 3, page);
    assert_eq!(a, b);
    // Both arrive before either is durable: the second is checked at prepare against the
    // first, which is prepared (appended) but not published.
    let (ca, cb) = (wpl_commit(&h, 5, &a, &[(it[1], 55)]), wpl_commit(&h, 5, &b, &[(it[2], 77)]));
    h.step(Input::Request { conn: 1, id: 4, req: Request::new(ca) });
    h.step(Input::Request { conn: 2, id: 4, req: Request::new(cb) });
    let out = h.settle();
    let answer = |conn: ConnId| {
        out.iter()
            .find_map(|e| match e {
                Effect::Reply { conn: c, id: 4, reply, .. } if *c == conn => Some(reply.clone()),
                _ => None,
            })
            .unwrap()
    };
    assert!(matches!(answer(1).body, ReplyBody::CommitOk { .. }), "{:?}", answer(1));
    assert!(refused(&answer(2)), "{:?}", answer(2));
    let now = h.fetch(1, 5, page);
    assert_eq!((payload(&now, it[1]), payload(&now, it[2])), (55, 2));
}

#[test]
fn wpl_copies_leave_the_table_when_install_rounds_take_their_pages_home() {
    let mut h = Harness::new(CommitMode::Wpl, 16);
    h.connect(1);
    let it = items(&mut h, 1, 3);
    let page = it[0].page().unwrap();
    let img = h.fetch(1, 3, page);
    let r = h.request(1, 4, wpl_commit(&h, 5, &img, &[(it[1], 55)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.stats().wpl_table, 1);
    install_all(&mut h);
    let st = h.core.stats();
    assert_eq!((st.wpl_table, st.wpl.installed), (0, 1), "{st:?}");
    // The round appended a checkpoint without the copy; once it is durable the log below it
    // may go.
    assert!(st.wpl.checkpoints >= 2, "{st:?}");
    let now = h.fetch(1, 6, page);
    assert_eq!(payload(&now, it[1]), 55);
}

#[test]
fn wpl_a_commit_waits_for_room_in_a_full_table_and_a_round_makes_it() {
    let disk = MemDisk::new();
    io::create(&disk, 4096, ServerId(7)).unwrap();
    let wpl = thor_recovery::WplConfig { entries_max: 1, txns_max: 4, commits_per_checkpoint: 2 };
    let study = StudyOptions { mode: CommitMode::Wpl, wpl };
    let mut h = Harness::open(disk, study, CoreConfig::default());
    h.connect(1);
    let it = items(&mut h, 1, 600);
    let (p, q) = (it[0].page().unwrap(), it[599].page().unwrap());
    assert_ne!(p, q);
    let img = h.fetch(1, 3, p);
    let r = h.request(1, 4, wpl_commit(&h, 5, &img, &[(it[0], 10)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.stats().wpl_table, 1);
    // The table is full: the next commit waits until a round takes page p home.
    let img = h.fetch(1, 5, q);
    let r = h.request(1, 6, wpl_commit(&h, 6, &img, &[(it[599], 20)]));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let st = h.core.stats();
    assert!(st.mob_waits >= 1 && st.wpl.installed >= 1, "{st:?}");
    // Checkpoints every two commits.
    for k in 0..4 {
        let img = h.fetch(1, 7 + 2 * k, q);
        let r = h.request(1, 8 + 2 * k, wpl_commit(&h, 7 + k, &img, &[(it[599], 30 + k as u32)]));
        assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    }
    assert!(h.core.stats().wpl.checkpoints >= 3, "{:?}", h.core.stats());
    let now = h.fetch(1, 20, q);
    assert_eq!(payload(&now, it[599]), 33);
}

#[test]
fn wpl_restart_brings_back_a_copy_whose_image_lies_below_the_superblock_checkpoint() {
    let disk = MemDisk::new();
    io::create(&disk, 4096, ServerId(7)).unwrap();
    let cfg = CoreConfig { flush_batch_pages: 1, ..CoreConfig::default() };
    let mut h = Harness::open(disk.clone(), wpl_mode(), cfg.clone());
    h.connect(1);
    let it = items(&mut h, 1, 600);
    install_all(&mut h);
    let (p, q) = (it[0].page().unwrap(), it[599].page().unwrap());
    // A version of an item on page q (through thor's commit record: a direct commit)...
    let mut o = item_class().new_object(0, 0);
    let class = {
        let img = h.fetch(1, 3, q);
        u32_at(PageView::parse(&img).unwrap().object(it[599].oid()).unwrap(), 0)
    };
    put_u32(&mut o, 0, class);
    put_u32(&mut o, 8, 4242);
    let c =
        thor_server::CommitIn { versions: vec![(it[599], Bytes::from(o))], ..Default::default() };
    h.step(Input::Direct { ticket: 1, op: thor_server::DirectOp::Commit(c) });
    h.settle();
    // ...then a WPL commit to page p: its image, then its commit record.
    let img = h.fetch(1, 4, p);
    let r = h.request(1, 5, wpl_commit(&h, 5, &img, &[(it[0], 55)]));
    let ReplyBody::CommitOk { lsn, .. } = r.body else { panic!("{r:?}") };
    // One round takes the oldest page (q) home: the checkpoint moves to the WPL commit's
    // record, past its image, which only WPL's restart can still find.
    let mut fx = Vec::new();
    h.core.start_round(&mut fx);
    h.pending.extend(fx);
    h.settle();
    assert_eq!(h.core.checkpoint(), lsn, "the checkpoint lies between the image and the commit");
    drop(h);
    let mut h = Harness::open(disk, wpl_mode(), cfg);
    assert_eq!(h.core.stats().wpl.restored, 1, "the copy came back from the log");
    h.connect(1);
    let now = h.fetch(1, 2, p);
    assert_eq!((payload(&now, it[0]), payload(&now, it[1])), (55, 1));
    let now = h.fetch(1, 3, q);
    assert_eq!(payload(&now, it[599]), 4242);
}
