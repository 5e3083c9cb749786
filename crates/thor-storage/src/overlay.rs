//! [`OverlayDisk`]: a [`Disk`] whose changes stay in memory, over a disk that is only read.
//!
//! Opening a database runs recovery, and recovery writes: it restores torn pages from the
//! double-write buffer, cuts a torn log tail (keeping it in a `.torn` file), rewrites an
//! unfinished segment header, and installs MOB versions into the page file when replay fills
//! the MOB. An offline tool that must see exactly what the next open would serve, without
//! changing the database (`thor_admin::upgrade` rewrites a closed database into a new
//! directory), runs that same recovery over an overlay of the database directory:
//!
//! ```text
//!   engine (recovery, fetches) ──► OverlayDisk ── writes ──► blocks in memory (4 KiB each)
//!                                       │
//!                                       └── reads of unwritten bytes ──► base (read-only)
//! ```
//!
//! Every write, length change, create, rename and remove lands in memory; nothing ever
//! reaches the base disk, so the base can be a [`ReadOnlyDisk`](crate::ReadOnlyDisk) that
//! refuses all of them. Syncs succeed at once: an overlay is never durable, and nothing
//! should be. Reads see the base with the overlay's changes applied, with the semantics of
//! a file system (handles stay valid across renames and removes; a truncation followed by an
//! extension reads zeros).
//!
//! # Memory
//!
//! One [`OVERLAY_BLOCK_BYTES`] block per block written (a written block keeps the base's bytes
//! around the write), plus the names of changed files. Reads cost nothing: a file that is
//! only read keeps no copy of itself. For recovery that is the pages installed during replay
//! and the log's repairs, both bounded by the log since the checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::disk::{Disk, DiskFile, validate_name};
use crate::error::StorageError;
use crate::limits::OVERLAY_BLOCK_BYTES;

/// A [`Disk`] that reads `base` and keeps every change in memory. See the module
/// documentation.
#[derive(Debug)]
pub struct OverlayDisk {
    /// The disk read from; never written.
    base: Arc<dyn Disk>,
    /// The live namespace's differences from the base.
    names: Mutex<Names>,
}

/// How the overlay's namespace differs from the base's.
#[derive(Debug, Default)]
struct Names {
    /// Files opened, created or renamed through the overlay, by their current name: their
    /// contents are the overlay's (a base file's handle is kept inside).
    files: BTreeMap<String, Arc<OverlayFile>>,
    /// Base names removed or renamed away: absent unless in `files`.
    hidden: BTreeSet<String>,
}

impl OverlayDisk {
    /// An overlay over `base`, which is only ever read.
    pub fn new(base: Arc<dyn Disk>) -> OverlayDisk {
        OverlayDisk { base, names: Mutex::new(Names::default()) }
    }

    /// Bytes of memory the overlay's written blocks hold.
    pub fn bytes_held(&self) -> u64 {
        let names = self.names.lock();
        names.files.values().map(|f| f.state.lock().blocks.len() as u64).sum::<u64>()
            * OVERLAY_BLOCK_BYTES as u64
    }

    /// The file bound to `name`, binding a base file into the overlay on first use so that
    /// every handle to it shares one set of changes. `None` if there is no such file.
    fn bind(
        &self,
        names: &mut Names,
        name: &str,
    ) -> Result<Option<Arc<OverlayFile>>, StorageError> {
        if let Some(f) = names.files.get(name) {
            return Ok(Some(f.clone()));
        }
        if names.hidden.contains(name) || !self.base.exists(name)? {
            return Ok(None);
        }
        let base = self.base.open(name, false)?;
        let len = base.len()?;
        let f = Arc::new(OverlayFile {
            name: name.to_string(),
            state: Mutex::new(FileState {
                base: Some(base),
                base_visible: len,
                len,
                blocks: BTreeMap::new(),
            }),
        });
        names.files.insert(name.to_string(), f.clone());
        Ok(Some(f))
    }
}

impl Disk for OverlayDisk {
    fn open(&self, name: &str, create: bool) -> Result<Arc<dyn DiskFile>, StorageError> {
        validate_name(name)?;
        let mut names = self.names.lock();
        if let Some(f) = self.bind(&mut names, name)? {
            return Ok(f);
        }
        if !create {
            return Err(StorageError::NotFound { name: name.to_string() });
        }
        let f = Arc::new(OverlayFile {
            name: name.to_string(),
            state: Mutex::new(FileState {
                base: None,
                base_visible: 0,
                len: 0,
                blocks: BTreeMap::new(),
            }),
        });
        names.files.insert(name.to_string(), f.clone());
        Ok(f)
    }

    fn exists(&self, name: &str) -> Result<bool, StorageError> {
        validate_name(name)?;
        let names = self.names.lock();
        if names.files.contains_key(name) {
            return Ok(true);
        }
        Ok(!names.hidden.contains(name) && self.base.exists(name)?)
    }

    fn remove(&self, name: &str) -> Result<(), StorageError> {
        validate_name(name)?;
        let mut names = self.names.lock();
        let in_overlay = names.files.remove(name).is_some();
        let in_base = !names.hidden.contains(name) && self.base.exists(name)?;
        if !in_overlay && !in_base {
            return Err(StorageError::NotFound { name: name.to_string() });
        }
        names.hidden.insert(name.to_string());
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), StorageError> {
        validate_name(from)?;
        validate_name(to)?;
        let mut names = self.names.lock();
        let f = self
            .bind(&mut names, from)?
            .ok_or_else(|| StorageError::NotFound { name: from.to_string() })?;
        if from == to {
            return Ok(());
        }
        names.files.remove(from);
        names.hidden.insert(from.to_string());
        // `to` is bound in `files` from now on, which takes precedence over the base: any
        // base file of that name is replaced, as a rename replaces its target.
        names.files.insert(to.to_string(), f);
        Ok(())
    }

    fn list(&self) -> Result<Vec<String>, StorageError> {
        let names = self.names.lock();
        let mut all: BTreeSet<String> =
            self.base.list()?.into_iter().filter(|n| !names.hidden.contains(n)).collect();
        all.extend(names.files.keys().cloned());
        Ok(all.into_iter().collect())
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        // Nothing of an overlay is durable, by design (see the module documentation).
        Ok(())
    }
}

/// A file of an [`OverlayDisk`]: the base file's bytes (if any) under the blocks written.
#[derive(Debug)]
struct OverlayFile {
    /// Its name when first opened, for errors.
    name: String,
    /// Contents.
    state: Mutex<FileState>,
}

/// What an overlay file holds.
#[derive(Debug)]
struct FileState {
    /// The base file, for bytes no block covers.
    base: Option<Arc<dyn DiskFile>>,
    /// Bytes of the base file still visible: its length, lowered by truncations, so that a
    /// truncated and re-extended range reads zeros.
    base_visible: u64,
    /// The live length.
    len: u64,
    /// Written blocks by index: each holds the file's bytes at `index * OVERLAY_BLOCK_BYTES`
    /// (bytes at or past `len` are zero).
    blocks: BTreeMap<u64, Box<[u8]>>,
}

const BLOCK: u64 = OVERLAY_BLOCK_BYTES as u64;

impl FileState {
    /// Reads `buf.len()` bytes at `offset` from what lies under the blocks: the base where
    /// visible, zeros elsewhere. The caller keeps the range within `len`.
    fn read_under(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let end = offset + buf.len() as u64;
        let from_base = self.base_visible.min(end).saturating_sub(offset) as usize;
        if from_base > 0 {
            let base = self.base.as_ref().expect("base bytes are visible only with a base");
            base.read_exact_at(offset, &mut buf[..from_base])?;
        }
        buf[from_base..].fill(0);
        Ok(())
    }

    /// The block `index`, created from the bytes under it if not written yet.
    fn block_mut(&mut self, index: u64) -> Result<&mut [u8], StorageError> {
        if !self.blocks.contains_key(&index) {
            let mut b = vec![0u8; OVERLAY_BLOCK_BYTES].into_boxed_slice();
            let start = index * BLOCK;
            let live = self.len.min(start + BLOCK).saturating_sub(start) as usize;
            self.read_under(start, &mut b[..live])?;
            self.blocks.insert(index, b);
        }
        Ok(self.blocks.get_mut(&index).expect("inserted above"))
    }
}

impl DiskFile for OverlayFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let st = self.state.lock();
        let n = st.len.saturating_sub(offset).min(buf.len() as u64) as usize;
        let mut pos = offset;
        let end = offset + n as u64;
        while pos < end {
            let index = pos / BLOCK;
            let at = (pos - offset) as usize;
            if let Some(b) = st.blocks.get(&index) {
                let within = (pos - index * BLOCK) as usize;
                let take = (OVERLAY_BLOCK_BYTES - within).min((end - pos) as usize);
                buf[at..at + take].copy_from_slice(&b[within..within + take]);
                pos += take as u64;
            } else {
                // Everything up to the next written block comes from below, in one read.
                let next = st.blocks.range(index..).next().map_or(end, |(&i, _)| i * BLOCK);
                let stop = next.min(end);
                st.read_under(pos, &mut buf[at..at + (stop - pos) as usize])?;
                pos = stop;
            }
        }
        Ok(n)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let mut st = self.state.lock();
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| {
            StorageError::InvalidArgument(format!("{}: write past the largest offset", self.name))
        })?;
        // Bytes between the old end and `offset` read as zeros: blocks never hold bytes past
        // `len`, and `base_visible <= len`.
        st.len = st.len.max(end);
        let mut pos = offset;
        while pos < end {
            let index = pos / BLOCK;
            let within = (pos - index * BLOCK) as usize;
            let take = (OVERLAY_BLOCK_BYTES - within).min((end - pos) as usize);
            let from = (pos - offset) as usize;
            st.block_mut(index)?[within..within + take].copy_from_slice(&data[from..from + take]);
            pos += take as u64;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn len(&self) -> Result<u64, StorageError> {
        Ok(self.state.lock().len)
    }

    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        let mut st = self.state.lock();
        if len < st.len {
            st.base_visible = st.base_visible.min(len);
            // Whole blocks past the new end go; the one it cuts keeps zeros past it, so that
            // a later extension reads zeros.
            let first_gone = len.div_ceil(BLOCK);
            st.blocks.split_off(&first_gone);
            if !len.is_multiple_of(BLOCK)
                && let Some(b) = st.blocks.get_mut(&(len / BLOCK))
            {
                b[(len % BLOCK) as usize..].fill(0);
            }
        }
        st.len = len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDisk;
    use proptest::prelude::*;

    /// A base disk with two files, and its bytes for comparison after the overlay's changes.
    fn base() -> MemDisk {
        let d = MemDisk::new();
        let a = d.open("a", true).unwrap();
        a.write_at(0, &(0..10_000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let b = d.open("b", true).unwrap();
        b.write_at(0, b"bee").unwrap();
        d
    }

    #[test]
    fn changes_stay_in_the_overlay() {
        let b = base();
        let o = OverlayDisk::new(Arc::new(b.clone()));
        let a = o.open("a", false).unwrap();
        a.write_at(4095, &[0xee; 3]).unwrap();
        a.set_len(5000).unwrap();
        o.open("c", true).unwrap().write_at(10, b"sea").unwrap();
        o.rename("b", "d").unwrap();
        o.remove("c").unwrap();
        assert_eq!(o.list().unwrap(), vec!["a".to_string(), "d".to_string()]);
        let mut buf = vec![0u8; 6000];
        assert_eq!(a.read_at(4090, &mut buf).unwrap(), 910);
        assert_eq!(&buf[..5], &[250, 251, 252, 253, 254]);
        assert_eq!(&buf[5..8], &[0xee; 3]);
        assert_eq!(buf[8], (4098u32 % 256) as u8);
        // The base is untouched.
        assert_eq!(b.list().unwrap(), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(b.open("a", false).unwrap().len().unwrap(), 10_000);
        let mut three = [0u8; 3];
        b.open("a", false).unwrap().read_at(4095, &mut three).unwrap();
        assert_eq!(three, [255, 0, 1]);
        assert_eq!(o.bytes_held(), 4096 * 2);
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Write { file: u8, offset: u16, len: u16, byte: u8 },
        SetLen { file: u8, len: u16 },
        Rename { from: u8, to: u8 },
        Remove { file: u8 },
        Create { file: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, any::<u16>(), 0u16..9000, any::<u8>())
                .prop_map(|(file, offset, len, byte)| Op::Write { file, offset, len, byte }),
            2 => (0u8..3, any::<u16>()).prop_map(|(file, len)| Op::SetLen { file, len }),
            1 => (0u8..3, 0u8..3).prop_map(|(from, to)| Op::Rename { from, to }),
            1 => (0u8..3).prop_map(|file| Op::Remove { file }),
            1 => (0u8..3).prop_map(|file| Op::Create { file }),
        ]
    }

    const NAMES: [&str; 3] = ["a", "b", "c"];

    /// Applies `op` to `d`, reporting only whether it succeeded (both disks must agree).
    fn apply(d: &dyn Disk, op: &Op) -> bool {
        let r = match op {
            Op::Write { file, offset, len, byte } => d
                .open(NAMES[*file as usize], false)
                .and_then(|f| f.write_at(u64::from(*offset), &vec![*byte; *len as usize])),
            Op::SetLen { file, len } => {
                d.open(NAMES[*file as usize], false).and_then(|f| f.set_len(u64::from(*len)))
            }
            Op::Rename { from, to } => d.rename(NAMES[*from as usize], NAMES[*to as usize]),
            Op::Remove { file } => d.remove(NAMES[*file as usize]),
            Op::Create { file } => d.open(NAMES[*file as usize], true).map(drop),
        };
        r.is_ok()
    }

    fn contents(d: &dyn Disk) -> Vec<(String, Vec<u8>)> {
        d.list()
            .unwrap()
            .into_iter()
            .map(|n| {
                let f = d.open(&n, false).unwrap();
                let mut buf = vec![0u8; f.len().unwrap() as usize];
                assert_eq!(f.read_at(0, &mut buf).unwrap(), buf.len());
                (n, buf)
            })
            .collect()
    }

    proptest! {
        /// The overlay behaves as a copy of the base would (a `MemDisk` with the same files),
        /// and the base never changes.
        #[test]
        fn overlay_matches_a_copy_and_leaves_the_base(ops in proptest::collection::vec(op(), 0..40)) {
            let b = base();
            let before = contents(&b);
            let copy = base();
            let o = OverlayDisk::new(Arc::new(b.clone()));
            for op in &ops {
                prop_assert_eq!(apply(&o, op), apply(&copy, op), "{:?}", op);
            }
            prop_assert_eq!(contents(&o), contents(&copy));
            prop_assert_eq!(contents(&b), before);
        }
    }
}
