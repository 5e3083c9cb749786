//! Installation: moving the MOB's versions into their pages on disk, so that the log can be
//! truncated. The core plans a round ([`InstallJob`]); the driver performs it without the core
//! (installation reads for pages not cached, building the new images with [`InstallJob::build`],
//! the double-write buffer, the page writes and their fsync) and reports [`Installed`]; the core
//! then drops the installed versions, moves the checkpoint and asks the driver to write the
//! superblock and truncate the log ([`CheckpointJob`]).
//!
//! ```text
//!  core: oldest MOB pages ─► InstallJob ─► driver: reads, build, dwb, pages, fsync ─► Installed
//!  core: cache ← images, MOB − installed versions, checkpoint ─► CheckpointJob
//!        driver: superblock (tmp, sync, rename, sync dir), log truncation ─► Checkpointed
//! ```
//!
//! *Invariant:* at most one round is in flight, from its `InstallJob` to its `Checkpointed`, so
//! superblocks are written in generation order and two rounds never write one page at once.
//!
//! *Invariant:* a round installs exactly the versions it snapshotted: versions committed while
//! it runs stay in the MOB ([`crate::mob::Mob::remove_installed`] removes only the versions
//! installed), and fetches meanwhile compose the old cached image with every buffered version,
//! so they never see less than what is committed.

use bytes::Bytes;
use thor_core::{Lsn, Oid, PageId, PageMut};

use crate::error::EngineError;
use crate::superblock::Superblock;

/// One page of an install round.
#[derive(Debug, Clone)]
pub struct PageJob {
    /// Which page.
    pub page: PageId,
    /// Whether it has no image on disk yet (it starts from empty).
    pub fresh: bool,
    /// Its installed image if the page cache has it (otherwise the driver reads it: an
    /// installation read).
    pub base: Option<Bytes>,
    /// The versions to install: object, the LSN that wrote it, its bytes.
    pub versions: Vec<(Oid, Lsn, Bytes)>,
}

/// An install round planned by the core. See the module documentation.
#[derive(Debug, Clone)]
pub struct InstallJob {
    /// Identifies the round in [`crate::core::Input::Installed`].
    pub id: u64,
    /// Bytes per page.
    pub page_size: usize,
    /// The pages, in increasing page order (so that runs of consecutive pages are one write).
    pub pages: Vec<PageJob>,
}

/// What the driver reports after a round's pages are durable in place.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The new images, one per page of the job and in its order, concatenated.
    pub images: Bytes,
    /// Pages that had to be read from disk first.
    pub installation_reads: usize,
}

/// The superblock write and log truncation that finish a round (or a bulk load).
#[derive(Debug, Clone)]
pub struct CheckpointJob {
    /// Identifies it in [`crate::core::Input::Checkpointed`].
    pub id: u64,
    /// The superblock to write.
    pub superblock: Superblock,
    /// Log records below this LSN are no longer needed, once the superblock is durable.
    pub truncate_before: Option<Lsn>,
}

/// What one install round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Pages written.
    pub pages: usize,
    /// Versions installed into them.
    pub versions: usize,
    /// Pages that had to be read from disk first.
    pub installation_reads: usize,
    /// The checkpoint after the round.
    pub checkpoint: Lsn,
}

impl InstallJob {
    /// Builds the new images of every page of the round, concatenated in job order:
    /// `read(page)` performs an installation read for a page whose image was not cached.
    /// Returns the images and the number of installation reads.
    pub fn build(
        &self,
        mut read: impl FnMut(PageId) -> Result<Bytes, EngineError>,
    ) -> Result<(Vec<u8>, usize), EngineError> {
        let mut out = vec![0u8; self.pages.len() * self.page_size];
        let mut reads = 0;
        let mut scratch = Vec::new();
        let mut vs: Vec<(Oid, &[u8])> = Vec::new();
        for (j, buf) in self.pages.iter().zip(out.chunks_mut(self.page_size)) {
            if j.fresh {
                PageMut::init(buf, j.page).expect("valid page size");
            } else {
                let base = match &j.base {
                    Some(b) => b.clone(),
                    None => {
                        reads += 1;
                        read(j.page)?
                    }
                };
                buf.copy_from_slice(&base);
            }
            vs.clear();
            vs.extend(j.versions.iter().map(|(o, _, d)| (*o, &d[..])));
            let mut p = PageMut::open(buf)
                .map_err(|source| EngineError::CorruptPage { page: j.page, cause: source })?;
            p.apply(&mut vs, &mut scratch)
                .map_err(|source| EngineError::CorruptPage { page: j.page, cause: source })?;
            let newest = j.versions.iter().map(|(_, l, _)| *l).max().unwrap_or(Lsn::ZERO);
            let version = p.view().version().max(newest);
            p.set_version(version);
            p.seal();
        }
        Ok((out, reads))
    }

    /// Versions the round installs.
    pub fn versions(&self) -> usize {
        self.pages.iter().map(|p| p.versions.len()).sum()
    }
}
