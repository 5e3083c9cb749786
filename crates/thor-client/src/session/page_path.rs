//! The page modes' commit path ([`PageModes`]): the client half of the QuickStore study's
//! page-based commit modes behind the session's [`CommitPath`] seam. [`crate::pagemode`] has
//! the concepts and the state ([`PageState`]: page images, recovery buffer, written objects);
//! this module is what the session does with it: copy units on an object's first write, fetch
//! an image the write needs, send a page's records early (to make room in the recovery buffer,
//! or because the page is stolen), and build the `PageCommit`.

use bytes::Bytes;
use thor_cache::CacheError;
use thor_core::{Lsn, Oref, PageId};
use thor_recovery::Images;
use thor_wire::{PageCommit, PageRecords, ReplyBody, RequestBody};

use super::commit_path::{Built, CommitPath, Kept};
use super::{Inner, unexpected};
use crate::error::ClientError;
use crate::pagemode::{PageState, Written};
use crate::proto::ClientCore;

/// The page-based commit modes (PD-REDO, PD-ESM, SD-ESM, SL-ESM, WPL): the session's state for
/// them is `ClientCore::pages`, present exactly when this is the session's path.
#[derive(Debug)]
pub(crate) struct PageModes;

impl CommitPath for PageModes {
    /// The recovery buffer's copy on the object's first write ([`crate::pagemode`]).
    fn before_write(&self, s: &mut Inner, i: u32) -> Result<(), ClientError> {
        s.page_first_write(i)
    }

    fn request(&self, s: &mut Inner) -> Result<Built, ClientError> {
        let (c, shipped, images) = s.page_commit_request()?;
        let (n_modified, n_created) = (c.writes.len(), c.created.len());
        Ok(Built {
            body: RequestBody::PageCommit(c),
            shipped,
            n_modified,
            n_created,
            // `PageCommit` carries no id: a lost answer's outcome stays unknown.
            id: None,
            kept: Kept { images },
        })
    }

    /// The recovery buffer's copies of this transaction are released, and the images take
    /// the committed bytes.
    fn committed(&self, s: &mut ClientCore, kept: Kept, lsn: Lsn) {
        s.pm_mut().committed(kept.images, lsn);
    }

    fn aborted(&self, s: &mut ClientCore) {
        s.pm_mut().aborted();
    }

    /// The images and the recovery buffer start over; the settings were accepted when the
    /// session was made, so they are again.
    fn cache_dropped(&self, s: &mut ClientCore) {
        let fresh =
            PageState::new(s.info.commit_mode, s.info.page_size, s.cfg.cache_bytes, s.cfg.recovery);
        if let Ok(p) = fresh {
            s.pages = Some(p);
        }
    }

    fn keeps_pages(&self) -> bool {
        true
    }
}

impl ClientCore {
    /// The page modes' state: present whenever [`PageModes`] is the session's path.
    fn pm(&self) -> &PageState {
        self.pages.as_ref().expect("the page modes' path without their state")
    }

    /// [`ClientCore::pm`], to change.
    fn pm_mut(&mut self) -> &mut PageState {
        self.pages.as_mut().expect("the page modes' path without their state")
    }
}

impl Inner {
    fn page_first_write(&mut self, i: u32) -> Result<(), ClientError> {
        let word = self.cache.oref_of(i);
        // Created objects (tagged serials) travel whole, as in `obj` mode.
        let Some(oref) = Oref::from_raw(word).filter(|o| !o.is_null()) else { return Ok(()) };
        let Some(page) = oref.page() else { return Ok(()) };
        let pm = self.pm();
        if pm.is_written(word) {
            return Ok(());
        }
        // A page about to be written for the first time needs room among the images: the
        // oldest written page leaves first (the paper's eviction of a dirty page).
        if let Some(victim) = pm.steal_victim(page) {
            self.send_before_commit(victim, true)?;
        }
        let pm = self.pm();
        let span = match pm.object_span(page, oref.oid()) {
            Some(s) => s,
            None => {
                self.fetch_image(page)?;
                let pm = self.pm();
                pm.object_span(page, oref.oid()).ok_or(CacheError::NoSuchObject(oref))?
            }
        };
        // Each round either copies or sends one page's records and releases it; the buffer
        // holds at least a page's worth, so a write fits once the others are gone.
        loop {
            let pm = self.pm_mut();
            match pm.first_write(word, i, page, span)? {
                None => break,
                Some(oldest) => self.send_before_commit(oldest, false)?,
            }
        }
        self.check_doomed()
    }

    /// Fetches `page`'s image for the page mode without installing it in the cache.
    fn fetch_image(&mut self, page: PageId) -> Result<(), ClientError> {
        self.settle_ahead()?;
        self.send(RequestBody::Fetch { page }, Some(page))?;
        let reply = self.recv_checked()?;
        match reply.body {
            ReplyBody::Page { page: got, bytes } if got == page => {
                let pm = self.pm();
                if pm.is_stolen(page) {
                    let objects = self.exported(pm.stolen_on(page))?;
                    let pm = self.pm_mut();
                    pm.restore_image(page, &bytes, &objects)?;
                } else {
                    self.pm_mut().put_image(page, &bytes);
                }
                self.pm_mut().stats.image_fetches += 1;
                Ok(())
            }
            ReplyBody::Page { .. } => Err(ClientError::Unexpected("page other than asked")),
            other => Err(unexpected(other)),
        }
    }

    /// The written objects of `page` with their new bytes, as the cache exports them.
    fn written_objects(
        &self,
        page: PageId,
    ) -> Result<Vec<(thor_recovery::Span, Vec<u8>)>, ClientError> {
        self.exported(self.pm().written_on(page))
    }

    /// `written`'s spans with the objects' new bytes, as the cache exports them.
    fn exported(
        &self,
        written: &[Written],
    ) -> Result<Vec<(thor_recovery::Span, Vec<u8>)>, ClientError> {
        let mut out = Vec::with_capacity(written.len());
        for w in written {
            let mut bytes = Vec::with_capacity(w.span.len());
            self.cache.export(w.entry, &mut bytes)?;
            out.push((w.span, bytes));
        }
        Ok(out)
    }

    /// Sends `page`'s records so far to the server before the commit, with undo bytes, and
    /// releases its saved units: to make room in the recovery buffer, or (`steal`) because
    /// the page leaves the client's memory, when the page goes whole as well in the ESM modes
    /// and WPL and its image is dropped ([`crate::pagemode`]).
    fn send_before_commit(&mut self, page: PageId, steal: bool) -> Result<(), ClientError> {
        let objects = self.written_objects(page)?;
        let pm = self.pm_mut();
        let cur = pm.current(page, &objects)?;
        let rec =
            if pm.mode().sends_records() { pm.record(page, &cur, Images::RedoUndo)? } else { None };
        let had_record = rec.is_some();
        let mut pages = Vec::new();
        if steal && pm.mode().ships_pages() {
            let mut p = cur.clone();
            thor_core::page::seal(&mut p);
            pm.shipped(p.len());
            pages.push((page, Bytes::from(p)));
        }
        if had_record || !pages.is_empty() {
            let txn = pm.txn;
            let records: Vec<Bytes> = rec.into_iter().map(Bytes::from).collect();
            self.stats.bytes_shipped += records
                .iter()
                .chain(pages.iter().map(|(_, p)| p))
                .map(|b| b.len() as u64)
                .sum::<u64>();
            let body = RequestBody::PageRecords(PageRecords { txn, records, pages });
            match self.round_trip(body)?.body {
                ReplyBody::Ack => {}
                ReplyBody::Error { code, message } => {
                    return Err(ClientError::Server { code, message });
                }
                other => return Err(unexpected(other)),
            }
        }
        let pm = self.pm_mut();
        if steal {
            pm.stolen(page, had_record);
        } else {
            pm.sent_early(page, cur, had_record);
        }
        Ok(())
    }

    /// The `PageCommit` of the open transaction: read set, write set, created objects, each
    /// written page's record (and, ESM, the page), and the pages' final images.
    #[allow(clippy::type_complexity)]
    fn page_commit_request(
        &mut self,
    ) -> Result<(PageCommit, u64, Vec<(PageId, Vec<u8>)>), ClientError> {
        let mut reads: Vec<Oref> = Vec::with_capacity(self.cache.read_count());
        self.cache.for_each_read(|o| reads.push(o));
        let mut writes = Vec::with_capacity(self.cache.modified().len());
        for i in self.cache.modified() {
            let oref = Oref::from_raw(self.cache.oref_of(i))
                .ok_or(CacheError::Internal("a modified object without an oref"))?;
            writes.push(oref);
        }
        let mut shipped = 4 * writes.len() as u64;
        let mut created = Vec::with_capacity(self.cache.created().len());
        for &i in self.cache.created() {
            let mut bytes = Vec::new();
            self.cache.export(i, &mut bytes)?;
            shipped += bytes.len() as u64;
            created.push(Bytes::from(bytes));
        }
        let pages_written = self.pm().written_pages();
        let (mut records, mut pages, mut images) = (Vec::new(), Vec::new(), Vec::new());
        for page in pages_written {
            let objects = self.written_objects(page)?;
            let pm = self.pm_mut();
            let cur = pm.current(page, &objects)?;
            if pm.mode().sends_records()
                && let Some(rec) = pm.record(page, &cur, Images::Redo)?
            {
                shipped += rec.len() as u64;
                records.push(Bytes::from(rec));
            }
            if pm.mode().ships_pages() {
                let mut p = cur.clone();
                thor_core::page::seal(&mut p);
                shipped += p.len() as u64;
                pm.shipped(p.len());
                pages.push((page, Bytes::from(p)));
            }
            images.push((page, cur));
        }
        let pm = self.pm();
        let commit = PageCommit {
            txn: pm.txn,
            mode: pm.mode().code(),
            reads,
            writes,
            created,
            records,
            pages,
        };
        Ok((commit, shipped, images))
    }
}
