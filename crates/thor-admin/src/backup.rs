//! Offline backup: a consistent copy of a database that no process has open.
//!
//! The copy is what a crash would leave with everything synced (superblock, page file, the
//! log's durable records), so opening it runs ordinary recovery and gives exactly the commits
//! up to the LSN returned. `dest` must not exist and its parent must; it appears only once the
//! copy is complete and synced (it is made under a hidden sibling name, `.NAME.partial`, and
//! renamed; a leftover of an interrupted run is reclaimed by the next), and
//! [`crate::check()`] passes it. A database in use is backed up by its server instead (the
//! `Backup` request: `thor backup --server`), which keeps committing meanwhile.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use thor_server::{Engine, EngineError, EngineOptions};
use thor_storage::{FileDisk, StorageError};
use thor_wire::BackupInfo;

/// Why an offline backup did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A process holds the database: back it up through its server
    /// (`thor backup --server ADDR`).
    #[error(
        "{} is in use by {holder}; back it up through its server: thor backup --server ADDR",
        dir.display()
    )]
    InUse {
        /// The database directory.
        dir: PathBuf,
        /// The lock holder, as its `LOCK` file names it.
        holder: String,
    },
    /// The directory holds no database: check the path.
    #[error("{} holds no thor database", dir.display())]
    NotADatabase {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory could not be opened (an I/O error).
    #[error("opening {}", dir.display())]
    Storage {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: StorageError,
    },
    /// The database did not open (recovery failed; [`EngineError`] says why).
    #[error("opening {}", dir.display())]
    Open {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// The copy failed (the destination exists, its parent does not, an I/O error).
    #[error(transparent)]
    Copy(EngineError),
}

/// Copies the closed database in `dir` into the new directory `dest`; see the module
/// documentation. The source is left as the backup found it: no install, no checkpoint.
pub fn backup_offline(dir: &Path, dest: &Path) -> Result<BackupInfo, BackupError> {
    let disk = FileDisk::open_locked(dir, false, "thor backup").map_err(|e| match e {
        StorageError::Locked { holder, .. } => {
            BackupError::InUse { dir: dir.to_path_buf(), holder }
        }
        source => BackupError::Storage { dir: dir.to_path_buf(), source },
    })?;
    let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
    let engine = match Engine::open(Arc::new(disk), opts) {
        Ok(e) => e,
        Err(EngineError::NotADatabase) => {
            return Err(BackupError::NotADatabase { dir: dir.to_path_buf() });
        }
        Err(source) => return Err(BackupError::Open { dir: dir.to_path_buf(), source }),
    };
    let info = engine.backup(dest).map_err(BackupError::Copy);
    // Leave the source as the backup found it: no install, no checkpoint on the way out.
    engine.halt();
    info
}
