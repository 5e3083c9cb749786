//! The recovery buffer against a plain model (a FIFO of pages, each a map of saved blocks), and
//! the whole client-side protocol against a server copy: writes, room made for the oldest page,
//! pages leaving the cache, commit and abort. At every commit the server's pages equal the
//! client's; at every abort the records sent so far are taken back exactly.

use std::collections::{BTreeMap, VecDeque};

use super::*;
use crate::TxnId;
use crate::diff::{Differ, Images, MergeCost};
use crate::record::{PageRecord, RecordHeader, encode};
use proptest::prelude::*;
use thor_core::limits::PAGE_HEADER_BYTES;

const PAGE: usize = 1024;
const PAGES: usize = 5;

fn pid(i: usize) -> PageId {
    PageId::new(i as u32 + 1).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    /// The client writes `len` bytes at `start` of page `page`, derived from `seed`.
    Write {
        page: usize,
        start: usize,
        len: usize,
        seed: u8,
    },
    /// The page leaves the client's cache: its records go now.
    Evict {
        page: usize,
    },
    Commit,
    Abort,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..PAGES, PAGE_HEADER_BYTES..PAGE, 1usize..80, any::<u8>()).prop_map(
            |(page, start, len, seed)| Op::Write { page, start, len: len.min(PAGE - start), seed }
        ),
        1 => (0..PAGES).prop_map(|page| Op::Evict { page }),
        1 => Just(Op::Commit),
        1 => Just(Op::Abort),
    ]
}

fn config() -> impl Strategy<Value = RecoveryBufferConfig> {
    (
        1usize..=3,
        prop_oneof![
            Just(Copies::Page),
            Just(Copies::Blocks { block_bytes: 8 }),
            Just(Copies::Blocks { block_bytes: 64 }),
            Just(Copies::Blocks { block_bytes: 256 }),
        ],
    )
        .prop_map(|(pages, copies)| RecoveryBufferConfig { page_size: PAGE, pages, copies })
}

/// The model of the buffer: pages oldest first, each with its saved blocks.
struct Model {
    unit: usize,
    slots: usize,
    fifo: VecDeque<(usize, BTreeMap<usize, Vec<u8>>)>,
}

impl Model {
    fn used(&self) -> usize {
        self.fifo.iter().map(|(_, b)| b.len()).sum()
    }

    fn blocks(&self, page: usize) -> Option<&BTreeMap<usize, Vec<u8>>> {
        self.fifo.iter().find(|(p, _)| *p == page).map(|(_, b)| b)
    }

    fn release(&mut self, page: usize) {
        self.fifo.retain(|(p, _)| *p != page);
    }
}

/// The client and server sides of one run.
struct World {
    buf: RecoveryBuffer,
    model: Model,
    differ: Differ,
    regions: Vec<Span>,
    record: Vec<u8>,
    /// What the client's cache holds.
    client: Vec<Vec<u8>>,
    /// The server's copies, with every record received applied.
    server: Vec<Vec<u8>>,
    /// The server's copies as of the last commit.
    committed: Vec<Vec<u8>>,
    /// Records received before commit, in order, to take back on abort.
    sent: Vec<Vec<u8>>,
    txn: u64,
}

impl World {
    /// Diffs `page` against its saved units, sends the record (with undo bytes if the
    /// transaction has not committed), and releases the page, in the buffer and the model.
    fn flush(&mut self, page: usize, images: Images) {
        let pre = self.buf.pre_image(pid(page)).expect("saved");
        let model = self.model.blocks(page).expect("saved in the model");
        let pieces: Vec<(usize, Vec<u8>)> = pre.pieces().map(|(o, b)| (o, b.to_vec())).collect();
        let expected: Vec<(usize, Vec<u8>)> =
            model.iter().map(|(&b, bytes)| (b * self.model.unit, bytes.clone())).collect();
        assert_eq!(pieces, expected, "the saved units of page {page}");
        let writable = [Span::new(PAGE_HEADER_BYTES, PAGE)];
        let cost = MergeCost::format(images);
        self.differ.diff(&pre, &self.client[page], &writable, cost, &mut self.regions).unwrap();
        if !self.regions.is_empty() {
            self.record.clear();
            let header = RecordHeader { page: pid(page), txn: TxnId(self.txn), images };
            encode(&header, &self.regions, &self.client[page], &pre, &mut self.record).unwrap();
            let rec = PageRecord::parse(&self.record, PAGE).unwrap();
            rec.apply_redo(&mut self.server[page]).unwrap();
            if images == Images::RedoUndo {
                self.sent.push(self.record.clone());
            }
        }
        // Every change of the page is now at the server.
        assert!(self.server[page] == self.client[page], "page {page} after its records");
        assert!(self.buf.release(pid(page)));
        self.model.release(page);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Write { page, start, len, seed } => {
                let span = Span::new(start, start + len);
                loop {
                    let first = start / self.model.unit;
                    let last = (start + len - 1) / self.model.unit;
                    let saved = self.model.blocks(page).cloned().unwrap_or_default();
                    let needed = (first..=last).filter(|b| !saved.contains_key(b)).count();
                    let got = self.buf.before_write(pid(page), span, &self.client[page]).unwrap();
                    if needed > self.model.slots - self.model.used() {
                        let oldest = self.model.fifo.front().expect("full means a page").0;
                        assert_eq!(got, BeforeWrite::MakeRoom { oldest: pid(oldest) });
                        self.flush(oldest, Images::RedoUndo);
                        continue;
                    }
                    assert_eq!(got, BeforeWrite::Ready);
                    if needed > 0 {
                        if self.model.blocks(page).is_none() {
                            self.model.fifo.push_back((page, BTreeMap::new()));
                        }
                        let unit = self.model.unit;
                        let client = &self.client[page];
                        let entry = self.model.fifo.iter_mut().find(|(p, _)| *p == page).unwrap();
                        for b in first..=last {
                            entry
                                .1
                                .entry(b)
                                .or_insert_with(|| client[b * unit..(b + 1) * unit].to_vec());
                        }
                    }
                    break;
                }
                for (i, byte) in self.client[page][start..start + len].iter_mut().enumerate() {
                    // Some writes store what was there: a saved unit need not have changed.
                    if seed % 3 != 0 {
                        *byte = seed.wrapping_add(i as u8);
                    }
                }
            }
            Op::Evict { page } => {
                if self.buf.is_saved(pid(page)) {
                    self.flush(page, Images::RedoUndo);
                }
            }
            Op::Commit => {
                let pages: Vec<PageId> = self.buf.pages().collect();
                let model: Vec<PageId> = self.model.fifo.iter().map(|(p, _)| pid(*p)).collect();
                assert_eq!(pages, model);
                for p in pages {
                    self.flush(p.index() - 1, Images::Redo);
                }
                assert!(self.server == self.client, "commit: the server has every change");
                self.committed = self.server.clone();
                self.sent.clear();
                self.txn += 1;
            }
            Op::Abort => {
                for bytes in self.sent.drain(..).rev() {
                    let rec = PageRecord::parse(&bytes, PAGE).unwrap();
                    let page = rec.header().page.index() - 1;
                    rec.apply_undo(&mut self.server[page]).unwrap();
                }
                assert!(self.server == self.committed, "abort: every record sent was taken back");
                self.client = self.committed.clone();
                self.buf.clear();
                self.model.fifo.clear();
                self.txn += 1;
            }
        }
        self.buf.check_invariants();
        assert_eq!(self.buf.saved_pages(), self.model.fifo.len());
        assert_eq!(self.buf.free_slots(), self.model.slots - self.model.used());
        assert_eq!(self.buf.oldest(), self.model.fifo.front().map(|(p, _)| pid(*p)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_buffer_follows_its_model_and_the_records_keep_the_server_exact(
        config in config(),
        pages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), PAGE), PAGES),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let buf = RecoveryBuffer::new(config).unwrap();
        let model = Model { unit: config.unit_bytes(), slots: buf.slots(), fifo: VecDeque::new() };
        let mut world = World {
            buf,
            model,
            differ: Differ::new(PAGE),
            regions: Vec::new(),
            record: Vec::new(),
            client: pages.clone(),
            server: pages.clone(),
            committed: pages,
            sent: Vec::new(),
            txn: 1,
        };
        for op in &ops {
            world.step(op);
        }
    }
}

#[test]
fn the_papers_buffers_have_the_expected_slots() {
    // PD-ESM-4: 4 MB of 8 KB pages. SD-ESM-4: the same memory in 64-byte blocks.
    let pd = RecoveryBuffer::new(RecoveryBufferConfig {
        page_size: 8192,
        pages: 512,
        copies: Copies::Page,
    })
    .unwrap();
    assert_eq!(pd.slots(), 512);
    let sd = RecoveryBuffer::new(RecoveryBufferConfig {
        page_size: 8192,
        pages: 512,
        copies: Copies::Blocks { block_bytes: 64 },
    })
    .unwrap();
    assert_eq!(sd.slots(), 65536);
}

#[test]
fn bad_configurations_and_writes_are_refused() {
    let bad = |page_size, pages, copies| {
        RecoveryBuffer::new(RecoveryBufferConfig { page_size, pages, copies }).unwrap_err()
    };
    assert!(matches!(bad(1000, 1, Copies::Page), BufferError::BadConfig(_)));
    assert!(matches!(bad(1024, 0, Copies::Page), BufferError::BadConfig(_)));
    assert!(matches!(bad(1024, 1, Copies::Blocks { block_bytes: 4 }), BufferError::BadConfig(_)));
    assert!(matches!(bad(1024, 1, Copies::Blocks { block_bytes: 48 }), BufferError::BadConfig(_)));
    assert!(matches!(
        bad(1024, 1, Copies::Blocks { block_bytes: 2048 }),
        BufferError::BadConfig(_)
    ));
    let mut buf = RecoveryBuffer::new(RecoveryBufferConfig {
        page_size: PAGE,
        pages: 1,
        copies: Copies::Page,
    })
    .unwrap();
    let page = vec![0u8; PAGE];
    assert!(matches!(
        buf.before_write(pid(0), Span::new(10, 10), &page),
        Err(BufferError::BadWrite { .. })
    ));
    assert!(matches!(
        buf.before_write(pid(0), Span::new(1000, 1100), &page),
        Err(BufferError::BadWrite { .. })
    ));
    assert!(matches!(
        buf.before_write(pid(0), Span::new(100, 110), &page[..512]),
        Err(BufferError::PageSize { .. })
    ));
    assert_eq!(buf.saved_pages(), 0);
}

#[test]
fn a_full_page_buffer_names_the_oldest_page_even_when_it_is_the_one_written() {
    let mut buf = RecoveryBuffer::new(RecoveryBufferConfig {
        page_size: PAGE,
        pages: 2,
        copies: Copies::Page,
    })
    .unwrap();
    let page = vec![0u8; PAGE];
    let w = Span::new(100, 104);
    assert_eq!(buf.before_write(pid(0), w, &page).unwrap(), BeforeWrite::Ready);
    assert_eq!(buf.before_write(pid(1), w, &page).unwrap(), BeforeWrite::Ready);
    assert_eq!(buf.before_write(pid(0), w, &page).unwrap(), BeforeWrite::Ready); // already saved
    assert_eq!(
        buf.before_write(pid(2), w, &page).unwrap(),
        BeforeWrite::MakeRoom { oldest: pid(0) }
    );
    assert_eq!(buf.stats().make_room, 1);
    assert_eq!(buf.stats().copies, 2);
    buf.release(pid(0));
    assert_eq!(buf.before_write(pid(2), w, &page).unwrap(), BeforeWrite::Ready);
    assert_eq!(buf.pages().collect::<Vec<_>>(), vec![pid(1), pid(2)]);
    // With blocks: one page's worth of 256-byte blocks, page 0 holds three, and a write to a
    // fourth and fifth block of page 0 needs two: page 0 itself is the oldest.
    let mut buf = RecoveryBuffer::new(RecoveryBufferConfig {
        page_size: PAGE,
        pages: 1,
        copies: Copies::Blocks { block_bytes: 256 },
    })
    .unwrap();
    assert_eq!(buf.before_write(pid(0), Span::new(24, 700), &page).unwrap(), BeforeWrite::Ready);
    assert_eq!(buf.free_slots(), 1);
    assert_eq!(
        buf.before_write(pid(1), Span::new(24, 28), &page).unwrap(),
        BeforeWrite::Ready,
        "one block fits"
    );
    assert_eq!(
        buf.before_write(pid(0), Span::new(800, 900), &page).unwrap(),
        BeforeWrite::MakeRoom { oldest: pid(0) }
    );
    buf.check_invariants();
}
