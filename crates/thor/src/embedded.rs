//! The embedded store: a database directory run by a server engine in this process.
//!
//! ```text
//!   Database ──Arc<Engine>──┬── Session ─ LocalTransport ─┐
//!   (handle, Clone)         ├── Session ─ LocalTransport ─┼─► Engine (core, log, pages,
//!                           └── ...                       ┘    installer thread)
//!                                                               │ FileDisk, LOCK held
//!                                                               ▼
//!                                                             the directory
//! ```
//!
//! The engine is the one `thor server` runs, with the same defaults; sessions reach it through
//! the in-process transport, which steps it directly (no socket, no encoding). A
//! session keeps the engine alive, so [`crate::open`] can hand out a session and drop its
//! [`Database`]: the engine closes when the last session or handle goes. [`Database`]'s
//! documentation says what closing does.
//!
//! # Read-only opens
//!
//! [`Database::open_read_only`] (and [`crate::open_read_only`]) opens a database to read it
//! without writing a byte to its directory: not the lock file's holder line, not recovery's
//! repairs, not a `.torn` file. It works where a read-write open cannot: on a full disk, on a
//! read-only mount, beside other readers (`thor check`), on a backup copy.
//!
//! ```text
//!   Engine (read-only) ─► OverlayDisk ─► ReadOnlyDisk ─► the directory
//!                         recovery's      read-only        shared flock on the
//!                         writes, kept    descriptors;     directory: readers
//!                         in memory       refuses writes   share, writers wait
//! ```
//!
//! Recovery runs as for a read-write open (a torn tail is cut, torn pages are restored, the
//! log is replayed), into memory: the overlay keeps every change in 4 KiB blocks, so such an
//! open costs memory for what recovery rewrites (the pages installed while replaying a long
//! log), never disk. Sessions read the committed state; a commit that writes is refused
//! ([`thor_server::EngineError::ReadOnly`], `Refused(Other)` with the reason), while
//! read-only transactions commit (they write nothing). While readers hold it, a read-write
//! open fails with [`Error::Locked`], and the other way round.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineError, EngineOptions};
use thor_storage::{FileDisk, OverlayDisk, StorageError};

use crate::Error;

/// An embedded database: a directory opened by this process, and the engine that runs it.
///
/// A handle: clones share the database, and [`Database::session`] opens a session on it
/// (one per thread: a session is `Send` but not `Sync`).
///
/// # Closing
///
/// The database closes when the last handle and the last session are dropped, or at
/// [`Database::close`]. Closing installs every committed version into the page file and
/// truncates the log, so that the next open replays nothing; then it releases the directory
/// lock. `close` reports a failure; a drop only logs it (through `tracing`). Either way a
/// failure loses nothing: a commit is acknowledged only once its log record is on disk, and
/// the next open replays the log.
#[derive(Debug, Clone)]
pub struct Database {
    /// The engine; every session's transport holds a clone.
    engine: Arc<Engine>,
    /// The directory, for errors.
    path: PathBuf,
}

impl Database {
    /// Opens the database in directory `path`, creating the directory and the database if
    /// absent, with the settings `thor server` uses. The directory stays locked until the
    /// database closes: a second open, here or in another process, fails with
    /// [`Error::Locked`].
    ///
    /// Fails with [`Error::NotADirectory`] if `path` is a file, and with
    /// [`Error::NotADatabase`] if it is a directory that holds other files but no database.
    pub fn open(path: impl AsRef<Path>) -> Result<Database, Error> {
        let path = path.as_ref().to_path_buf();
        if path.exists() && !path.is_dir() {
            return Err(Error::NotADirectory { path });
        }
        let disk = match FileDisk::open_locked(&path, true, &holder_name()) {
            Ok(disk) => Arc::new(disk),
            Err(StorageError::Locked { holder, .. }) => return Err(Error::Locked { path, holder }),
            Err(e) => return Err(Error::Open { path, cause: e.into() }),
        };
        let opts = EngineOptions::default();
        let engine = match Engine::open(disk.clone(), opts.clone()) {
            Ok(engine) => engine,
            Err(EngineError::NotADatabase) => {
                match holds_foreign_files(&disk) {
                    Ok(false) => {}
                    Ok(true) => return Err(Error::NotADatabase { path }),
                    Err(source) => return Err(Error::Open { path, cause: source }),
                }
                Engine::create(disk, opts)
                    .map_err(|source| Error::Open { path: path.clone(), cause: source })?
            }
            Err(source) => return Err(Error::Open { path, cause: source }),
        };
        Ok(Database { engine: Arc::new(engine), path })
    }

    /// Opens the database in directory `path` to read it, writing nothing to the directory
    /// (see [Read-only opens](self#read-only-opens) in the module documentation). Several
    /// read-only opens may share a directory; none may while it is open read-write.
    ///
    /// Fails with [`Error::Locked`] if the database is open read-write (here or elsewhere),
    /// [`Error::NotADirectory`] if `path` is a file, [`Error::NotADatabase`] if the directory
    /// holds no database (nothing is created), [`Error::Open`] if it does not exist or
    /// recovery fails.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database, Error> {
        let path = path.as_ref().to_path_buf();
        if path.exists() && !path.is_dir() {
            return Err(Error::NotADirectory { path });
        }
        let disk = match FileDisk::open_read_only(&path) {
            Ok(disk) => disk,
            Err(StorageError::Locked { holder, .. }) => return Err(Error::Locked { path, holder }),
            Err(e) => return Err(Error::Open { path, cause: e.into() }),
        };
        let overlay = Arc::new(OverlayDisk::new(Arc::new(disk)));
        let engine = match Engine::open_read_only(overlay, EngineOptions::default()) {
            Ok(engine) => engine,
            Err(EngineError::NotADatabase) => return Err(Error::NotADatabase { path }),
            Err(source) => return Err(Error::Open { path, cause: source }),
        };
        Ok(Database { engine: Arc::new(engine), path })
    }

    /// Whether the database serves, serves read-only, or has failed (its storage failed: it
    /// refuses commits and needs reopening once the disk is repaired; see
    /// [`thor_server::Health`]).
    pub fn health(&self) -> crate::Health {
        self.engine.health()
    }

    /// A new session with the defaults `thor` uses ([`SessionConfig::default`]: a 64 MiB HAC
    /// cache).
    pub fn session(&self) -> Result<Session, Error> {
        self.session_with(SessionConfig::default())
    }

    /// A new session with settings of the caller's (cache size and manager, retries).
    pub fn session_with(&self, config: SessionConfig) -> Result<Session, Error> {
        let transport = LocalTransport::connect(self.engine.clone(), &ClientConfig::default())
            .map_err(thor_client::ClientError::from)?;
        Ok(Session::new(Box::new(transport), config)?)
    }

    /// Writes a consistent copy of the database into `dest`, a new directory, while sessions
    /// go on committing: the superblock, the page file and the log's durable records, copied
    /// while install rounds and checkpoints wait (commits wait only if the modified object
    /// buffer fills first). `dest` appears only once the copy is complete and synced. The copy
    /// opens as a database (`thor::open(dest)`) holding every commit up to the returned LSN (`BackupInfo::lsn`),
    /// which includes every commit acknowledged before this call.
    ///
    /// Fails with [`Error::Backup`] if `dest` exists, its parent does not, or the disk fails;
    /// nothing is left at `dest` then.
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<crate::BackupInfo, Error> {
        let dest = dest.as_ref();
        self.engine
            .backup(dest)
            .map_err(|source| Error::Backup { path: dest.to_path_buf(), cause: source })
    }

    /// The database's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the database now and says whether closing succeeded (see
    /// [Closing](Database#closing)). Every session and every other handle must have been
    /// dropped: otherwise this fails with [`Error::InUse`], and the database closes when the
    /// last of them is dropped.
    pub fn close(self) -> Result<(), Error> {
        let Database { engine, path } = self;
        match Arc::try_unwrap(engine) {
            Ok(engine) => engine.close().map_err(|source| Error::Close { path, cause: source }),
            Err(engine) => {
                let users = Arc::strong_count(&engine) - 1;
                Err(Error::InUse { path, users })
            }
        }
    }
}

/// Who holds the directory lock, for the error a second opener gets: this program's name.
fn holder_name() -> String {
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match program {
        Some(p) => format!("{p} (thor embedded)"),
        None => "thor embedded".to_string(),
    }
}

/// Whether the directory holds files other than those a database creation that stopped
/// before its superblock leaves (the page file, the superblock's temporary file): such a
/// directory is someone else's, not an unfinished database.
fn holds_foreign_files(disk: &FileDisk) -> Result<bool, EngineError> {
    use thor_storage::Disk;
    let ours = [thor_server::io::PAGE_FILE, thor_server::superblock::TMP_FILE];
    Ok(disk.list()?.iter().any(|name| !ours.contains(&name.as_str())))
}
