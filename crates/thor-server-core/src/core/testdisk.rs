//! An in-memory database for the core's unit tests: the page file, the superblock and the log
//! as plain values, and the effects performed on them synchronously. It stands where a driver
//! stands (thor-server's `io`), so the core's tests need no storage crate, and it models a
//! crash as the loss of every record appended and not synced.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use thor_core::{Lsn, PageId, PageView, ServerId, builtin};

use super::{Core, CoreConfig, Effect, Input, ReadError};
use crate::superblock::Superblock;

/// A database shared by the harnesses that open it (one after another, as after a crash).
pub(crate) type Disk = Rc<RefCell<MemDb>>;

/// See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct MemDb {
    sb: Superblock,
    pages: BTreeMap<PageId, Bytes>,
    /// Durable records from the first not truncated, in LSN order.
    log: Vec<(Lsn, Bytes)>,
    /// Records appended and not synced: a crash loses them.
    unsynced: Vec<(Lsn, Bytes)>,
    next: Lsn,
    durable_next: Lsn,
}

impl MemDb {
    /// A new database of server `id` (as thor-server's `io::create` makes one).
    pub(crate) fn create(page_size: usize, id: ServerId) -> Disk {
        let mut first = builtin::first_page(page_size).expect("builtins fit a page");
        thor_core::page::seal(&mut first);
        let mut pages = BTreeMap::new();
        pages.insert(PageId::FIRST, Bytes::from(first));
        let sb = Superblock {
            page_size,
            server_id: id,
            root: builtin::ROOT,
            checkpoint: Lsn(1),
            alloc_page: Some(PageId::FIRST),
            generation: 1,
        };
        Rc::new(RefCell::new(MemDb {
            sb,
            pages,
            log: Vec::new(),
            unsynced: Vec::new(),
            next: Lsn(1),
            durable_next: Lsn(1),
        }))
    }

    /// What survives a crash: everything but the unsynced records.
    pub(crate) fn durable_copy(&self) -> MemDb {
        let mut c = self.clone();
        c.unsynced.clear();
        c.next = c.durable_next;
        c
    }

    /// Appends a record the core assigned `lsn` (the driver's check that they agree).
    pub(crate) fn append(&mut self, lsn: Lsn, record: Bytes) {
        assert_eq!(lsn, self.next, "the core and the log agree on LSNs");
        self.next = lsn.next();
        self.unsynced.push((lsn, record));
    }

    /// Appends a record at the next LSN (a test that does not check the core's LSN).
    pub(crate) fn append_next(&mut self, record: Bytes) {
        let lsn = self.next;
        self.append(lsn, record);
    }

    /// Makes every appended record durable; returns the durable LSN (the last record's).
    pub(crate) fn sync(&mut self) -> Lsn {
        self.log.append(&mut self.unsynced);
        self.durable_next = self.next;
        Lsn(self.next.0 - 1)
    }

    /// The installed image of `page`, checked as the page file's reader checks it.
    pub(crate) fn read_page(&self, page: PageId) -> Result<Bytes, ReadError> {
        let Some(img) = self.pages.get(&page) else {
            return Err(ReadError::Corrupt(thor_core::FormatError::BadPageHeader(
                "allocated page missing from the page file",
            )));
        };
        PageView::parse_stored(img, page).map_err(ReadError::Corrupt)?;
        Ok(img.clone())
    }

    /// Performs one I/O effect and returns the input that reports it (`None` for effects that
    /// are not I/O), as thor-server's `DiskSide::perform` does.
    pub(crate) fn perform(&mut self, effect: &Effect) -> Option<Input> {
        match effect {
            Effect::Read { page } => {
                Some(Input::PageRead { page: *page, result: self.read_page(*page) })
            }
            Effect::Install(job) => {
                let built = job.build(|p| {
                    self.read_page(p).map_err(|e| match e {
                        ReadError::Corrupt(cause) => {
                            crate::EngineError::CorruptPage { page: p, cause }
                        }
                        ReadError::Storage(why) => crate::EngineError::Read { page: p, why },
                    })
                });
                let result = built.map(|(images, reads)| {
                    let size = self.sb.page_size;
                    for (j, img) in job.pages.iter().zip(images.chunks(size)) {
                        self.pages.insert(j.page, Bytes::copy_from_slice(img));
                    }
                    super::install::Installed {
                        images: Bytes::from(images),
                        installation_reads: reads,
                    }
                });
                Some(Input::Installed { job: job.id, result: result.map_err(|e| e.to_string()) })
            }
            Effect::Checkpoint(job) => {
                self.sb = job.superblock.clone();
                if let Some(lsn) = job.truncate_before {
                    self.log.retain(|(l, _)| *l >= lsn);
                }
                Some(Input::Checkpointed { job: job.id, result: Ok(()) })
            }
            Effect::Backup { conn, id, .. } => Some(Input::BackedUp {
                conn: *conn,
                id: *id,
                result: Err("this server takes no backups".to_string()),
            }),
            Effect::Append { .. }
            | Effect::Reply { .. }
            | Effect::Done { .. }
            | Effect::Peer { .. } => None,
        }
    }
}

/// Opens the database in `disk` as after a crash (unsynced records are lost): a new core,
/// the log replayed from the checkpoint, install rounds whenever the MOB exceeds its budget
/// (as thor-server's `io::recover` does).
pub(crate) fn recover(disk: &Disk, cfg: CoreConfig) -> Core {
    let db = disk.borrow().durable_copy();
    *disk.borrow_mut() = db;
    let sb = disk.borrow().sb.clone();
    let checkpoint = sb.checkpoint;
    let mut core = Core::new(cfg, sb).expect("core opens");
    let records: Vec<(Lsn, Bytes)> =
        disk.borrow().log.iter().filter(|(l, _)| *l >= checkpoint).cloned().collect();
    for (lsn, record) in records {
        assert!(
            record.first().is_none_or(|k| *k < crate::record::FIRST_PATH_KIND),
            "the in-memory test database does not restore whole-page logging"
        );
        core.replay(lsn, record).expect("replay");
        if core.mob_over_budget() {
            let mut fx = Vec::new();
            core.start_round(&mut fx);
            while let Some(effect) = fx.pop() {
                if let Some(input) = disk.borrow_mut().perform(&effect) {
                    core.step(0, input, &mut fx);
                }
            }
        }
    }
    let (tail, fresh) = core.tail_page();
    let image = if fresh { None } else { Some(disk.borrow().read_page(tail).expect("tail page")) };
    let next = disk.borrow().next;
    core.finish_recovery(next, image).expect("recovery finishes");
    core
}
