//! Where `thor inspect` reads from: the object-source seam, and its page cache.
//!
//! ```text
//!   offline DIR:   FileDisk (read-only) ─► OverlayDisk ─► Engine::open_read_only ─► LocalTransport ─┐
//!   --connect ADDR:                                           TcpTransport / UnixTransport ──────────┼─► TransportSource
//!                                                                                                    │   (Fetch page)
//!   Pages (first-in first-out cache of PAGE_CACHE_PAGES) ◄─ ObjectSource::page ◄─────────────────────┘
//! ```
//!
//! Everything `inspect` shows is decoded from pages as a server serves them (the committed
//! state: installed page plus the versions its modified object buffer holds), so offline and
//! through a server run one implementation: the only difference is the transport. Offline,
//! the engine is the one `thor server` runs, opened read-only the way `thor check` and
//! `thor::open_read_only` open a database: recovery replays the log into an in-memory overlay
//! of the files, so a database left by a crash is shown as its next open would serve it, and
//! not a byte of the directory changes (see `thor::embedded`, "Read-only opens"). That is
//! the right choice for thor's recovery rather than refusing a log that needs replaying:
//! every closed database whose last writer crashed needs it, replay is deterministic and
//! needs no writes to be correct (a torn tail is cut, torn pages restored, in memory), and
//! it costs memory only for the pages recovery rewrites. A log record recovery cannot read
//! stops the open with recovery's error, which names `thor check --repair`.
//!
//! Through a server each page is read as of its fetch: commits made between two reads may
//! show in the second. The session's scope must allow reads (`read-only` is enough).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use thor_core::{Oref, PageId, PageView};
use thor_net::{ClientConfig, LocalTransport, TcpTransport, UnixTransport};
use thor_server::{Engine, EngineError, EngineOptions};
use thor_storage::{FileDisk, OverlayDisk, StorageError};
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport};

use super::error::InspectError;
use super::limits::PAGE_CACHE_PAGES;

/// A source of pages of one database: what every `inspect` command reads.
pub trait ObjectSource {
    /// Bytes per page.
    fn page_size(&self) -> usize;
    /// The persistent root object.
    fn root(&self) -> Oref;
    /// Page `id` of the committed state, or `None` if the database has no such page (past
    /// its last page).
    fn page(&mut self, id: PageId) -> Result<Option<Bytes>, InspectError>;
}

/// Pages fetched through a transport: in process from a read-only engine (offline), or from a
/// server over TCP or a Unix socket.
pub struct TransportSource {
    /// The session; its `Hello` told the page size and root.
    transport: Box<dyn Transport>,
}

impl ObjectSource for TransportSource {
    fn page_size(&self) -> usize {
        self.transport.server().page_size
    }

    fn root(&self) -> Oref {
        self.transport.server().root
    }

    fn page(&mut self, id: PageId) -> Result<Option<Bytes>, InspectError> {
        let reply = self.transport.round_trip(&Request::new(RequestBody::Fetch { page: id }))?;
        match reply.body {
            ReplyBody::Page { page, bytes } if page == id => Ok(Some(bytes)),
            ReplyBody::Error { code: ErrorCode::NoSuchPage, .. } => Ok(None),
            ReplyBody::Error { code, message } => {
                Err(InspectError::Server { page: id.get(), code, message })
            }
            other => Err(InspectError::Transport(thor_wire::TransportError::Unexpected(format!(
                "{} in answer to a fetch of page {id}",
                other.name()
            )))),
        }
    }
}

/// The client settings of an `inspect` session: its name in the server's log, and the token.
fn client_config(token: &str) -> ClientConfig {
    ClientConfig {
        client_name: "thor inspect".into(),
        token: token.as_bytes().to_vec(),
        ..ClientConfig::default()
    }
}

/// Opens the database in `dir` read-only in this process (see the module documentation):
/// nothing in the directory changes, and a database a server holds is refused with
/// [`InspectError::InUse`].
pub fn open_offline(dir: &Path) -> Result<TransportSource, InspectError> {
    let not_db = |why: &str| InspectError::NotADatabase { dir: dir.to_path_buf(), why: why.into() };
    if !dir.exists() {
        return Err(not_db("it does not exist"));
    }
    if !dir.is_dir() {
        return Err(not_db("it is not a directory"));
    }
    let disk = match FileDisk::open_read_only(dir) {
        Ok(disk) => disk,
        Err(StorageError::Locked { holder, .. }) => {
            return Err(InspectError::InUse { dir: dir.to_path_buf(), holder });
        }
        Err(e) => return Err(InspectError::Open { dir: dir.to_path_buf(), cause: e.to_string() }),
    };
    let overlay = Arc::new(OverlayDisk::new(Arc::new(disk)));
    let engine = match Engine::open_read_only(overlay, EngineOptions::default()) {
        Ok(engine) => engine,
        Err(EngineError::NotADatabase) => return Err(not_db("it holds no thor superblock")),
        Err(e) => return Err(InspectError::Open { dir: dir.to_path_buf(), cause: e.to_string() }),
    };
    let transport = LocalTransport::connect(Arc::new(engine), &client_config(""))
        .map_err(|cause| InspectError::Open { dir: dir.to_path_buf(), cause: cause.to_string() })?;
    Ok(TransportSource { transport: Box::new(transport) })
}

/// Opens a session with the server at `addr` (`HOST:PORT` or `unix:PATH`) with `token`, as
/// `thor stats` and `thor backup` do.
pub fn connect(addr: &str, token: &str) -> Result<TransportSource, InspectError> {
    let cfg = client_config(token);
    let connect_err = |cause| InspectError::Connect { addr: addr.to_string(), cause };
    let transport: Box<dyn Transport> = match addr.strip_prefix("unix:") {
        Some(path) => Box::new(UnixTransport::connect(path, &cfg).map_err(connect_err)?),
        None => Box::new(TcpTransport::connect(addr, &cfg).map_err(connect_err)?),
    };
    Ok(TransportSource { transport })
}

/// A source's pages behind a bounded cache, and objects read out of them.
pub struct Pages<S> {
    /// Where pages come from.
    src: S,
    /// Pages read recently (at most [`PAGE_CACHE_PAGES`]).
    cache: HashMap<PageId, Bytes>,
    /// The cached pages in the order they came, for first-in first-out eviction.
    order: VecDeque<PageId>,
}

impl<S: ObjectSource> Pages<S> {
    /// A cache over `src`.
    pub fn new(src: S) -> Pages<S> {
        Pages { src, cache: HashMap::new(), order: VecDeque::new() }
    }

    /// The source itself (for page-by-page scans that should not fill the cache).
    pub fn source(&mut self) -> &mut S {
        &mut self.src
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.src.page_size()
    }

    /// The persistent root object.
    pub fn root(&self) -> Oref {
        self.src.root()
    }

    /// Page `id`, from the cache or the source; `None` past the last page.
    fn page(&mut self, id: PageId) -> Result<Option<Bytes>, InspectError> {
        if let Some(p) = self.cache.get(&id) {
            return Ok(Some(p.clone()));
        }
        let Some(p) = self.src.page(id)? else { return Ok(None) };
        if self.order.len() >= PAGE_CACHE_PAGES
            && let Some(old) = self.order.pop_front()
        {
            self.cache.remove(&old);
        }
        self.order.push_back(id);
        self.cache.insert(id, p.clone());
        debug_assert!(self.cache.len() <= PAGE_CACHE_PAGES);
        Ok(Some(p))
    }

    /// The stored bytes of object `oref` (class word first, references as orefs), a slice of
    /// its page. Fails with [`InspectError::UnknownObject`] if no object has that oref.
    pub fn object(&mut self, oref: Oref) -> Result<Bytes, InspectError> {
        let unknown = |why: &str| InspectError::UnknownObject { oref, why: why.into() };
        let Some(page_id) = oref.page() else {
            return Err(unknown("not a stored object's oref (null, or page 0)"));
        };
        let Some(page) = self.page(page_id)? else {
            return Err(unknown(&format!("page {page_id} is past the database's last page")));
        };
        let view = PageView::parse(&page)
            .map_err(|cause| InspectError::BadPage { page: page_id.get(), cause })?;
        let Some(range) = view.object_range(oref.oid()) else {
            return Err(unknown(&format!(
                "page {page_id} has no object {} (it holds {})",
                oref.oid().get(),
                view.object_count()
            )));
        };
        Ok(page.slice(range))
    }
}

/// In-memory pages, for the decoder's unit tests: the seam's second implementation.
#[cfg(test)]
pub struct MemSource {
    /// Page `i + 1` is `pages[i]`.
    pub pages: Vec<Bytes>,
    /// The page size.
    pub page_size: usize,
}

#[cfg(test)]
impl ObjectSource for MemSource {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn root(&self) -> Oref {
        thor_core::builtin::ROOT
    }

    fn page(&mut self, id: PageId) -> Result<Option<Bytes>, InspectError> {
        Ok(self.pages.get(id.index().wrapping_sub(1)).cloned())
    }
}
