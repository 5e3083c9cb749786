//! The links between the replicas of one replica group, over TCP: [`TcpReplicas`], the
//! [`thor_server::ReplicaNet`] of a replica that knows where the others listen, and
//! [`ReplicaService`], the serving side a [`crate::Server`] hands the replica requests to.
//!
//! # Raft messages
//!
//! Each other replica gets a thread and a bounded queue ([`REPLICA_QUEUE_MAX`]), as two-phase
//! commit's peers do ([`crate::peers`]). The thread opens a session to the replica on first
//! need with the group's *peer credential* (`peer:G`, G the group's server id: the replicas of
//! a group are one server to its clients and to the other servers, and share its credential),
//! and sends each message as a `Raft` request (`thor_wire::replica`, version 10), waiting for
//! its `Ack` before the next: messages of one link arrive in the order they were sent. Raft
//! resends what matters on its own ticks, so nothing here retries or blocks: a message that
//! cannot go now (queue full, replica unreachable, connection broken, refused) is dropped and
//! counted ([`ReplicaCounters`]); after a failed connect the replica is left alone for
//! [`crate::peers::PEER_RETRY_AFTER`]. With a [`TlsClient`] every link is TLS, as the peers'
//! are. A replica's server must accept frames of a `Raft` request of the largest message
//! (`thor_wire::limits::RAFT_MESSAGE_BYTES_MAX` and its header): the default frame limit
//! (`ProtocolConfig::max_frame_bytes`, 64 MiB) does; a message beyond a smaller setting is
//! refused by the sending transport and dropped like any other.
//!
//! # Database images
//!
//! [`TcpReplicas::fetch_image`] opens a session of its own to the source replica and copies:
//!
//! ```text
//!   ImageBegin{min_lsn} ─► Image{id, checkpoint, lengths}   (or ImageTooOld{have})
//!   ImageChunk{id, pages, 0..}  ─► Chunk ...   written at its offset into dest's page file
//!   ImageChunk{id, dwb, 0..}    ─► Chunk ...   then dest's double-write buffer
//!   (each file synced once complete)
//!   ImageChunk{id, superblock}  ─► Chunk       checked, then written last, atomically
//!                                              (thor_server::io::write_superblock)
//!   ImageEnd{id}                ─► Ack
//! ```
//!
//! The superblock goes last, as `DiskSide::image_into` writes it: a copy cut short (the source
//! gone, the connection broken, the image expired) leaves `dest` with its old superblock,
//! whose checkpoint is below what the member asked, so it asks again.
//!
//! # The serving side
//!
//! A server that is a replica gets a [`ReplicaService`] in [`crate::NetConfig::replicas`]. Its
//! connections hand every replica request to it instead of the engine's core, after the core
//! has checked it as every request is checked (`thor_server::Engine::screen`: an open, idle
//! session that agreed on version 10, whose credential is the group's peer credential or the
//! single token; anything else is refused, a client's credential with `Forbidden`). The
//! service runs on tokio's blocking pool and answers through the connection's outbox, one
//! request of a connection at a time (a frame that arrives while one is served breaks the
//! protocol and closes the connection). A `Raft` message goes to the [`ReplicaHandler`] (the
//! group's driver, which the lead's engine provides).
//!
//! An image is set aside by the handler ([`ReplicaHandler::image_into`], which is
//! `DiskSide::image_into`) into a directory of its own under the service's
//! [`ReplicaServiceConfig::images_dir`], and the chunks are read from there, so every chunk
//! of one copy comes from one consistent image while the live database goes on changing.
//! **Disk cost:** each open image is a full copy of the database's page file and double-write
//! buffer, and at most [`ReplicaServiceConfig::images_max`] are open at once
//! ([`IMAGES_OPEN_MAX`] by default): the images directory needs that many times the page
//! file's size free. An image is removed at `ImageEnd`, when it has been idle for
//! [`ReplicaServiceConfig::idle_expiry`] ([`IMAGE_IDLE_EXPIRY`]; checked on every replica
//! request, and Raft's heartbeats make those frequent), and when the service is dropped;
//! leftovers of a process that died are removed when the next service starts on the
//! directory. A copier whose image is gone is told `SessionExpired` and starts again.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use thor_core::{Lsn, ServerId};
use thor_server::superblock::{self, Superblock};
use thor_server::{EngineError, ImageFetchError, ReplicaNet};
use thor_storage::{Disk, FileDisk, StorageError};
use thor_wire::limits::IMAGE_CHUNK_BYTES_MAX;
use thor_wire::replica::IMAGE_SUPERBLOCK_BYTES_MAX;
use thor_wire::version::VERSION_REPLICA_LINKS;
use thor_wire::{
    ErrorCode, ImageFile, ImageInfo, RaftMsg, ReplicaReply, ReplicaRequest, Reply, ReplyBody,
    Request, RequestBody, Transport, TransportError,
};
use tracing::{debug, info, warn};

use crate::client::{ClientConfig, TcpTransport, TlsTransport};
use crate::peers::PEER_RETRY_AFTER;
use crate::tls::TlsClient;

pub use crate::limits::{
    IMAGE_IDLE_EXPIRY, IMAGE_REPLY_TIMEOUT, IMAGES_OPEN_MAX, RAFT_REPLY_TIMEOUT, REPLICA_QUEUE_MAX,
};

// ---- The serving side. ----

/// What a replica's server does with the replica requests that reach it: the group's driver.
/// Called on tokio's blocking pool, never on an async worker; requests of one connection one
/// at a time, in order.
pub trait ReplicaHandler: Send + Sync + std::fmt::Debug {
    /// Takes a Raft message (raft-rs's protobuf encoding, to be decoded with
    /// `thor_replica::decode_message`) from replica `from` of this server's group to replica
    /// `to`. Should only queue it for the group's driver: the link waits for the answer
    /// before it sends the next message.
    fn deliver(&self, from: u64, to: u64, msg: Bytes) -> Result<(), DeliverError>;

    /// This replica's newest checkpoint LSN (its superblock's): an `ImageBegin` asking for
    /// more is answered `ImageTooOld` without making an image.
    fn checkpoint(&self) -> Result<Lsn, EngineError>;

    /// Writes a database image into `dest`, an empty directory: superblock, page file and
    /// double-write buffer (`thor_server::io::DiskSide::image_into`). Returns its superblock.
    fn image_into(&self, dest: &dyn Disk) -> Result<Superblock, EngineError>;
}

/// Why a [`ReplicaHandler`] did not take a Raft message. The link drops the message either
/// way (Raft resends); the variant decides the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliverError {
    /// The message is for another replica of the group: the sender's address book is wrong.
    /// Answered `Forbidden` (the session stays open).
    #[error("the message is for replica {to}, not this one")]
    WrongReplica {
        /// The replica it named.
        to: u64,
    },
    /// The bytes are no Raft message (`thor_replica::decode_message` refused them): the
    /// sender is broken. Answered `Malformed`, closing the connection.
    #[error("not a raft message: {0}")]
    Malformed(String),
    /// The group's driver does not take messages now (starting, stopped). Answered
    /// `ShuttingDown`, closing the connection: the sender reconnects later.
    #[error("the replica takes no messages now: {0}")]
    Unavailable(String),
}

/// Settings of a [`ReplicaService`].
#[derive(Debug, Clone)]
pub struct ReplicaServiceConfig {
    /// Where images are set aside, a directory of this service's own (created if missing;
    /// its `image-*` subdirectories are removed at start). Needs [`Self::images_max`] times
    /// the page file's size free.
    pub images_dir: PathBuf,
    /// Most images open at once ([`IMAGES_OPEN_MAX`]); an `ImageBegin` beyond is answered
    /// `Busy` (closing), and the copier asks again later.
    pub images_max: usize,
    /// How long an open image may go unasked before it is removed ([`IMAGE_IDLE_EXPIRY`]).
    pub idle_expiry: Duration,
}

impl ReplicaServiceConfig {
    /// The defaults, with images in `images_dir`.
    pub fn new(images_dir: impl Into<PathBuf>) -> ReplicaServiceConfig {
        ReplicaServiceConfig {
            images_dir: images_dir.into(),
            images_max: IMAGES_OPEN_MAX,
            idle_expiry: IMAGE_IDLE_EXPIRY,
        }
    }
}

/// Counters of a [`ReplicaService`].
#[derive(Debug, Default)]
pub struct ReplicaServiceCounters {
    /// Raft messages the handler took.
    pub raft_delivered: AtomicU64,
    /// Raft messages the handler refused.
    pub raft_refused: AtomicU64,
    /// Images set aside.
    pub images_opened: AtomicU64,
    /// `ImageBegin`s answered `ImageTooOld`.
    pub images_too_old: AtomicU64,
    /// Images removed for being idle too long.
    pub images_expired: AtomicU64,
    /// Chunks served.
    pub chunks: AtomicU64,
    /// Bytes of the chunks served.
    pub chunk_bytes: AtomicU64,
}

/// An image set aside for a copier.
#[derive(Debug)]
struct OpenImage {
    /// Its directory.
    dir: PathBuf,
    /// Its files, once made (`None` while the handler writes it).
    disk: Option<Arc<FileDisk>>,
    /// When a request last named it.
    used: Instant,
}

/// The images open now.
#[derive(Debug, Default)]
struct Images {
    /// The id the next image gets (ids start at 1; 0 is never an image's).
    next: u64,
    /// By id.
    open: HashMap<u64, OpenImage>,
}

/// The serving side of a replica's links. See the module documentation.
#[derive(Debug)]
pub struct ReplicaService {
    handler: Arc<dyn ReplicaHandler>,
    cfg: ReplicaServiceConfig,
    images: Mutex<Images>,
    counters: ReplicaServiceCounters,
}

impl ReplicaService {
    /// A service over `handler`, with images under `cfg.images_dir` (created if missing;
    /// leftover images of an earlier process are removed).
    pub fn new(
        handler: Arc<dyn ReplicaHandler>,
        cfg: ReplicaServiceConfig,
    ) -> std::io::Result<Arc<ReplicaService>> {
        std::fs::create_dir_all(&cfg.images_dir)?;
        for entry in std::fs::read_dir(&cfg.images_dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with("image-") {
                info!("removing a leftover database image {}", entry.path().display());
                std::fs::remove_dir_all(entry.path())?;
            }
        }
        let images = Mutex::new(Images { next: 1, open: HashMap::new() });
        Ok(Arc::new(ReplicaService {
            handler,
            cfg,
            images,
            counters: ReplicaServiceCounters::default(),
        }))
    }

    /// The counters.
    pub fn counters(&self) -> &ReplicaServiceCounters {
        &self.counters
    }

    /// Images open now (being made or waiting for chunks).
    pub fn images_open(&self) -> usize {
        self.lock().open.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one replica request (the core has screened it), and whether the connection
    /// closes after the answer.
    pub fn serve(&self, req: ReplicaRequest) -> (Reply, bool) {
        self.expire();
        let reply = match req {
            ReplicaRequest::Raft(RaftMsg { from, to, msg, .. }) => {
                match self.handler.deliver(from, to, msg) {
                    Ok(()) => {
                        self.counters.raft_delivered.fetch_add(1, Relaxed);
                        Reply::new(ReplyBody::Ack)
                    }
                    Err(e) => {
                        self.counters.raft_refused.fetch_add(1, Relaxed);
                        let code = match e {
                            DeliverError::WrongReplica { .. } => ErrorCode::Forbidden,
                            DeliverError::Malformed(_) => ErrorCode::Malformed,
                            DeliverError::Unavailable(_) => ErrorCode::ShuttingDown,
                        };
                        debug!("refused a raft message from replica {from}: {e}");
                        Reply::error(code, &e.to_string())
                    }
                }
            }
            ReplicaRequest::ImageBegin { min_lsn } => self.begin(min_lsn),
            ReplicaRequest::ImageChunk { image, file, offset } => self.chunk(image, file, offset),
            ReplicaRequest::ImageEnd { image } => {
                let gone = self.lock().open.remove(&image);
                if let Some(img) = gone {
                    remove_image(&img.dir);
                }
                Reply::new(ReplyBody::Ack)
            }
        };
        let close = match &reply.body {
            ReplyBody::Error { code, .. } => code.closes_connection(),
            _ => false,
        };
        (reply, close)
    }

    /// Removes the images idle for longer than the expiry.
    fn expire(&self) {
        let now = Instant::now();
        let expired: Vec<OpenImage> = {
            let mut g = self.lock();
            let ids: Vec<u64> = g
                .open
                .iter()
                .filter(|(_, i)| {
                    i.disk.is_some()
                        && now.saturating_duration_since(i.used) >= self.cfg.idle_expiry
                })
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| g.open.remove(id)).collect()
        };
        for img in expired {
            self.counters.images_expired.fetch_add(1, Relaxed);
            info!("removing database image {} (idle)", img.dir.display());
            remove_image(&img.dir);
        }
    }

    fn begin(&self, min_lsn: Lsn) -> Reply {
        match self.handler.checkpoint() {
            Ok(have) if have < min_lsn => {
                self.counters.images_too_old.fetch_add(1, Relaxed);
                return Reply::new(ReplyBody::Replica(ReplicaReply::ImageTooOld { have }));
            }
            Ok(_) => {}
            Err(e) => return Reply::error(ErrorCode::ServerFailed, &format!("checkpoint: {e}")),
        }
        // Take a slot before the (long) copy, so concurrent begins cannot pass the bound.
        let (id, dir) = {
            let mut g = self.lock();
            if g.open.len() >= self.cfg.images_max {
                let msg = format!("{} images open already; ask again later", g.open.len());
                return Reply::error(ErrorCode::Busy, &msg);
            }
            let id = g.next;
            g.next += 1;
            let dir = self.cfg.images_dir.join(format!("image-{id}"));
            g.open.insert(id, OpenImage { dir: dir.clone(), disk: None, used: Instant::now() });
            (id, dir)
        };
        match self.make(id, &dir, min_lsn) {
            Ok(reply) => reply,
            Err(e) => {
                self.lock().open.remove(&id);
                remove_image(&dir);
                warn!("could not make a database image: {e}");
                Reply::error(ErrorCode::ServerFailed, &format!("making an image: {e}"))
            }
        }
    }

    /// Makes image `id` in `dir` and answers for it.
    fn make(&self, id: u64, dir: &Path, min_lsn: Lsn) -> Result<Reply, EngineError> {
        let disk = Arc::new(FileDisk::open_dir(dir, true)?);
        let sb = self.handler.image_into(&*disk)?;
        if sb.checkpoint < min_lsn {
            self.lock().open.remove(&id);
            remove_image(dir);
            self.counters.images_too_old.fetch_add(1, Relaxed);
            return Ok(Reply::new(ReplyBody::Replica(ReplicaReply::ImageTooOld {
                have: sb.checkpoint,
            })));
        }
        let len = |name: &str| -> Result<u64, StorageError> {
            if disk.exists(name)? { disk.open(name, false)?.len() } else { Ok(0) }
        };
        let sb_len = len(superblock::FILE)?;
        let info = ImageInfo {
            image: id,
            checkpoint: sb.checkpoint,
            pages_bytes: len(thor_server::io::PAGE_FILE)?,
            dwb_bytes: len(thor_server::dwb::FILE)?,
            superblock_bytes: u32::try_from(sb_len)
                .ok()
                .filter(|&n| n <= IMAGE_SUPERBLOCK_BYTES_MAX)
                .ok_or_else(|| EngineError::Failed(format!("a superblock of {sb_len} bytes")))?,
        };
        let mut g = self.lock();
        match g.open.get_mut(&id) {
            Some(img) => {
                img.disk = Some(disk);
                img.used = Instant::now();
            }
            // Cannot happen (only `expire` removes others' images, and it skips those being
            // made); answered as an expiry would be.
            None => {
                drop(g);
                remove_image(dir);
                return Ok(gone(id));
            }
        }
        self.counters.images_opened.fetch_add(1, Relaxed);
        Ok(Reply::new(ReplyBody::Replica(ReplicaReply::Image(info))))
    }

    fn chunk(&self, id: u64, file: ImageFile, offset: u64) -> Reply {
        let disk = {
            let mut g = self.lock();
            match g.open.get_mut(&id) {
                Some(img) if img.disk.is_some() => {
                    img.used = Instant::now();
                    img.disk.clone()
                }
                _ => None,
            }
        };
        let Some(disk) = disk else { return gone(id) };
        let name = match file {
            ImageFile::Pages => thor_server::io::PAGE_FILE,
            ImageFile::DoubleWrite => thor_server::dwb::FILE,
            ImageFile::Superblock => superblock::FILE,
        };
        let read = || -> Result<Bytes, StorageError> {
            if !disk.exists(name)? {
                return Ok(Bytes::new());
            }
            let f = disk.open(name, false)?;
            let len = f.len()?;
            let n = len.saturating_sub(offset).min(IMAGE_CHUNK_BYTES_MAX as u64) as usize;
            let mut buf = vec![0u8; n];
            if n > 0 {
                f.read_exact_at(offset, &mut buf)?;
            }
            Ok(Bytes::from(buf))
        };
        match read() {
            Ok(bytes) => {
                self.counters.chunks.fetch_add(1, Relaxed);
                self.counters.chunk_bytes.fetch_add(bytes.len() as u64, Relaxed);
                Reply::new(ReplyBody::Replica(ReplicaReply::Chunk(bytes)))
            }
            Err(e) => Reply::error(ErrorCode::ServerFailed, &format!("reading image {id}: {e}")),
        }
    }
}

impl Drop for ReplicaService {
    fn drop(&mut self) {
        let open = std::mem::take(&mut self.lock().open);
        for img in open.into_values() {
            remove_image(&img.dir);
        }
    }
}

/// The answer to a chunk of an image that is not open.
fn gone(id: u64) -> Reply {
    let msg = format!("image {id} is not open (expired, ended or never made): begin again");
    Reply::error(ErrorCode::SessionExpired, &msg)
}

fn remove_image(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!("could not remove database image {}: {e}", dir.display());
    }
}

// ---- The sending side. ----

/// Counters of a replica's links.
#[derive(Debug, Default)]
pub struct ReplicaCounters {
    /// Raft messages delivered (acknowledged by the replica).
    pub sent: AtomicU64,
    /// Raft messages dropped (queue full, replica unknown or unreachable, connection broken,
    /// refused).
    pub dropped: AtomicU64,
    /// Images copied whole.
    pub images_fetched: AtomicU64,
    /// Image copies that failed.
    pub image_failures: AtomicU64,
}

/// Where a replica's messages to the other replicas of its group go, over TCP. See the
/// module documentation.
#[derive(Debug)]
pub struct TcpReplicas {
    /// This replica's id.
    me: u64,
    /// The group (its server id).
    group: ServerId,
    /// Each other replica's address and queue (its link's thread ends when the queue's
    /// sender is dropped). Changed at runtime by the group's membership changes
    /// ([`ReplicaNet::membership`]).
    links: Mutex<HashMap<u64, (SocketAddr, SyncSender<Bytes>)>>,
    counters: Arc<ReplicaCounters>,
    /// The secret presented (the group's peer credential), read at each connect.
    token: Arc<Mutex<Vec<u8>>>,
    /// Settings of the sessions (its token is replaced by `token`'s at each connect).
    config: ClientConfig,
    tls: Option<TlsClient>,
}

impl TcpReplicas {
    /// Links from replica `me` of `group` to the replicas at `addrs` (an entry for `me` is
    /// ignored), reached with `config` (its token: the group's peer credential) and, if given,
    /// over TLS with `tls`. Starts one thread per other replica.
    pub fn start(
        me: u64,
        group: ServerId,
        addrs: &HashMap<u64, SocketAddr>,
        config: &ClientConfig,
        tls: Option<TlsClient>,
    ) -> std::io::Result<Arc<TcpReplicas>> {
        let r = TcpReplicas {
            me,
            group,
            links: Mutex::new(HashMap::new()),
            counters: Arc::new(ReplicaCounters::default()),
            token: Arc::new(Mutex::new(config.token.clone())),
            config: config.clone(),
            tls,
        };
        for (&to, &addr) in addrs {
            r.link(to, addr)?;
        }
        Ok(Arc::new(r))
    }

    /// Starts a link to replica `to` at `addr` (replacing any link it had; none to itself).
    pub fn link(&self, to: u64, addr: SocketAddr) -> std::io::Result<()> {
        if to == self.me {
            return Ok(());
        }
        let (tx, rx) = sync_channel(REPLICA_QUEUE_MAX);
        let link = Link {
            me: self.me,
            to,
            group: self.group,
            addr,
            cfg: ClientConfig { io_timeout: Some(RAFT_REPLY_TIMEOUT), ..self.config.clone() },
            token: self.token.clone(),
            tls: self.tls.clone(),
            counters: self.counters.clone(),
        };
        std::thread::Builder::new()
            .name(format!("thor-replica-{to}"))
            .spawn(move || link.run(rx))?;
        self.lock_links().insert(to, (addr, tx));
        Ok(())
    }

    /// Drops the link to replica `to` (its thread ends once its queue drains).
    pub fn unlink(&self, to: u64) {
        self.lock_links().remove(&to);
    }

    /// The replicas linked now, with their addresses.
    pub fn linked(&self) -> Vec<(u64, SocketAddr)> {
        let mut v: Vec<_> = self.lock_links().iter().map(|(id, (a, _))| (*id, *a)).collect();
        v.sort();
        v
    }

    fn lock_links(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, (SocketAddr, SyncSender<Bytes>)>> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Presents `token` from now on (sessions opened before keep theirs until they break).
    pub fn set_token(&self, token: Vec<u8>) {
        *self.token.lock().unwrap_or_else(PoisonError::into_inner) = token;
    }

    /// The counters.
    pub fn counters(&self) -> &ReplicaCounters {
        &self.counters
    }

    /// A session to replica `to` at `addr`.
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<Box<dyn Transport>, String> {
        let mut cfg = ClientConfig { io_timeout: Some(timeout), ..self.config.clone() };
        cfg.token = self.token.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let t = connect(addr, &cfg, self.tls.as_ref()).map_err(|e| e.to_string())?;
        if t.server().version < VERSION_REPLICA_LINKS {
            return Err(format!(
                "it speaks protocol version {}, replica links need {VERSION_REPLICA_LINKS}",
                t.server().version
            ));
        }
        Ok(t)
    }
}

/// A session to `addr`, over TLS if `tls`.
fn connect(
    addr: SocketAddr,
    cfg: &ClientConfig,
    tls: Option<&TlsClient>,
) -> Result<Box<dyn Transport>, TransportError> {
    match tls {
        None => Ok(Box::new(TcpTransport::connect(addr, cfg)?)),
        Some(tls) => Ok(Box::new(TlsTransport::connect(&addr.to_string(), cfg, tls)?)),
    }
}

impl ReplicaNet for TcpReplicas {
    fn send(&self, to: u64, msg: Bytes) {
        let links = self.lock_links();
        let Some((_, q)) = links.get(&to) else {
            debug!("replica {} of group {} knows no replica {to}: dropped", self.me, self.group.0);
            self.counters.dropped.fetch_add(1, Relaxed);
            return;
        };
        match q.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    fn fetch_image(
        &self,
        from: u64,
        min_lsn: Lsn,
        dest: &dyn Disk,
    ) -> Result<Superblock, ImageFetchError> {
        let result = self.fetch(from, min_lsn, dest);
        let c = if result.is_ok() {
            &self.counters.images_fetched
        } else {
            &self.counters.image_failures
        };
        c.fetch_add(1, Relaxed);
        result
    }

    /// Links a voter added with its address as the change's context (`HOST:PORT`, as
    /// `thor group add` proposes it), and drops the links of replicas no longer voters.
    fn membership(&self, voters: &[u64], context: &[u8]) {
        let known: Vec<u64> = self.lock_links().keys().copied().collect();
        for id in known {
            if !voters.contains(&id) {
                info!("replica {} of group {}: replica {id} left the group", self.me, self.group.0);
                self.unlink(id);
            }
        }
        let new: Vec<u64> = {
            let links = self.lock_links();
            voters.iter().copied().filter(|v| *v != self.me && !links.contains_key(v)).collect()
        };
        if new.is_empty() {
            return;
        }
        let addr = std::str::from_utf8(context).ok().and_then(|c| c.parse::<SocketAddr>().ok());
        match (new.as_slice(), addr) {
            ([id], Some(addr)) => {
                info!(
                    "replica {} of group {}: replica {id} joined at {addr}",
                    self.me, self.group.0
                );
                if let Err(e) = self.link(*id, addr) {
                    warn!("cannot start the link to replica {id}: {e}");
                }
            }
            _ => warn!(
                "replica {} of group {}: voters {new:?} have no address here (the change's \
                 context is not one HOST:PORT): give them in --group",
                self.me, self.group.0
            ),
        }
    }
}

impl TcpReplicas {
    fn fetch(
        &self,
        from: u64,
        min_lsn: Lsn,
        dest: &dyn Disk,
    ) -> Result<Superblock, ImageFetchError> {
        let unreachable = |reason: String| ImageFetchError::Unreachable { replica: from, reason };
        let addr = self.lock_links().get(&from).map(|(a, _)| *a);
        let addr = addr.ok_or_else(|| unreachable("no address".into()))?;
        let mut t = self.connect(addr, IMAGE_REPLY_TIMEOUT).map_err(unreachable)?;
        let info =
            match ask(&mut *t, ReplicaRequest::ImageBegin { min_lsn }).map_err(unreachable)? {
                ReplicaReply::Image(info) => info,
                ReplicaReply::ImageTooOld { have } => {
                    return Err(ImageFetchError::TooOld { replica: from, have, want: min_lsn });
                }
                ReplicaReply::Chunk(_) => {
                    return Err(unreachable("a Chunk answered ImageBegin".into()));
                }
            };
        let copied = copy_image(&mut *t, &info, min_lsn, dest);
        // Lets the source drop the image at once (it would expire anyway).
        let _ = t.round_trip(&Request::new(RequestBody::Replica(ReplicaRequest::ImageEnd {
            image: info.image,
        })));
        copied.map_err(|e| match e {
            CopyError::Net(reason) => unreachable(reason),
            CopyError::Storage(e) => ImageFetchError::Storage(e),
        })
    }
}

/// Why copying an image's files failed.
enum CopyError {
    /// The source or the connection.
    Net(String),
    /// Writing `dest`.
    Storage(EngineError),
}

impl From<StorageError> for CopyError {
    fn from(e: StorageError) -> CopyError {
        CopyError::Storage(e.into())
    }
}

/// Sends a replica request and takes its answer, which must be a replica reply.
fn ask(t: &mut dyn Transport, req: ReplicaRequest) -> Result<ReplicaReply, String> {
    let name = req.name();
    match t.round_trip(&Request::new(RequestBody::Replica(req))) {
        Ok(Reply { body: ReplyBody::Replica(r), .. }) => Ok(r),
        Ok(Reply { body: ReplyBody::Error { code, message }, .. }) => {
            Err(format!("{name} refused: {code}: {message}"))
        }
        Ok(other) => Err(format!("{name} answered with {}", other.body.name())),
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// Copies the files of image `info` into `dest`, the superblock last (see the module
/// documentation).
fn copy_image(
    t: &mut dyn Transport,
    info: &ImageInfo,
    min_lsn: Lsn,
    dest: &dyn Disk,
) -> Result<Superblock, CopyError> {
    for (file, name) in [
        (ImageFile::Pages, thor_server::io::PAGE_FILE),
        (ImageFile::DoubleWrite, thor_server::dwb::FILE),
    ] {
        let len = info.len(file);
        if file == ImageFile::DoubleWrite && len == 0 {
            // No buffer at the source: `dest`'s own must not "repair" the copied pages on
            // open (as `DiskSide::image_into` does).
            if dest.exists(name)? {
                let f = dest.open(name, false)?;
                f.set_len(0)?;
                f.sync()?;
            }
            continue;
        }
        let f = dest.open(name, true)?;
        f.set_len(0)?;
        let mut offset = 0u64;
        while offset < len {
            let bytes = read_chunk(t, info.image, file, offset)?;
            if bytes.is_empty() || offset + bytes.len() as u64 > len {
                return Err(CopyError::Net(format!(
                    "the source's {name} does not match the {len} bytes it announced"
                )));
            }
            f.write_at(offset, &bytes)?;
            offset += bytes.len() as u64;
        }
        f.sync()?;
    }
    let bytes = read_chunk(t, info.image, ImageFile::Superblock, 0)?;
    if bytes.len() as u64 != info.len(ImageFile::Superblock) {
        return Err(CopyError::Net(
            "the source's superblock is not the length it announced".into(),
        ));
    }
    let sb = Superblock::decode(&bytes)
        .map_err(|e| CopyError::Net(format!("the source's superblock: {e}")))?;
    if sb.checkpoint != info.checkpoint || sb.checkpoint < min_lsn {
        return Err(CopyError::Net(format!(
            "the source's superblock is at checkpoint {:?}, not the {:?} it announced",
            sb.checkpoint, info.checkpoint
        )));
    }
    thor_server::io::write_superblock(dest, &sb)?;
    Ok(sb)
}

fn read_chunk(
    t: &mut dyn Transport,
    image: u64,
    file: ImageFile,
    offset: u64,
) -> Result<Bytes, CopyError> {
    match ask(t, ReplicaRequest::ImageChunk { image, file, offset }).map_err(CopyError::Net)? {
        ReplicaReply::Chunk(b) => Ok(b),
        other => Err(CopyError::Net(format!("{} answered ImageChunk", other.name()))),
    }
}

/// One link: sends the Raft messages for one replica until the queue's sender is gone.
struct Link {
    me: u64,
    to: u64,
    group: ServerId,
    addr: SocketAddr,
    cfg: ClientConfig,
    token: Arc<Mutex<Vec<u8>>>,
    tls: Option<TlsClient>,
    counters: Arc<ReplicaCounters>,
}

impl Link {
    fn run(mut self, rx: Receiver<Bytes>) {
        let mut conn: Option<Box<dyn Transport>> = None;
        let mut down_until: Option<Instant> = None;
        while let Ok(msg) = rx.recv() {
            if conn.is_none() {
                if down_until.is_some_and(|t| Instant::now() < t) {
                    self.counters.dropped.fetch_add(1, Relaxed);
                    continue;
                }
                match self.open() {
                    Ok(t) => {
                        conn = Some(t);
                        down_until = None;
                    }
                    Err(()) => {
                        down_until = Some(Instant::now() + PEER_RETRY_AFTER);
                        self.counters.dropped.fetch_add(1, Relaxed);
                        continue;
                    }
                }
            }
            let t = conn.as_mut().expect("connected above");
            let raft = RaftMsg { group: self.group, from: self.me, to: self.to, msg };
            match t.round_trip(&Request::new(RequestBody::Replica(ReplicaRequest::Raft(raft)))) {
                Ok(r) if matches!(r.body, ReplyBody::Ack) => {
                    self.counters.sent.fetch_add(1, Relaxed);
                }
                Ok(r) => {
                    match &r.body {
                        ReplyBody::Error { code, message } => warn!(
                            "replica {} refused a raft message from replica {}: {code}: {message}",
                            self.to, self.me
                        ),
                        other => warn!(
                            "replica {} answered a raft message with {}",
                            self.to,
                            other.name()
                        ),
                    }
                    self.counters.dropped.fetch_add(1, Relaxed);
                    conn = None;
                }
                Err(e) => {
                    debug!("lost the connection to replica {}: {e}", self.to);
                    self.counters.dropped.fetch_add(1, Relaxed);
                    conn = None;
                }
            }
        }
    }

    /// Opens the session, logging why not.
    fn open(&mut self) -> Result<Box<dyn Transport>, ()> {
        self.cfg.token = self.token.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match connect(self.addr, &self.cfg, self.tls.as_ref()) {
            Ok(t) if t.server().version < VERSION_REPLICA_LINKS => {
                warn!(
                    "replica {} at {} speaks protocol version {}; replica links need {}",
                    self.to,
                    self.addr,
                    t.server().version,
                    VERSION_REPLICA_LINKS
                );
                Err(())
            }
            Ok(t) => {
                debug!("connected to replica {} at {}", self.to, self.addr);
                Ok(t)
            }
            Err(TransportError::Refused { code, message }) => {
                // Not a network failure: the replicas' credentials disagree.
                warn!(
                    "replica {} at {} refused this replica's credential: {code}: {message}",
                    self.to, self.addr
                );
                Err(())
            }
            Err(e) => {
                debug!("replica {} at {} unreachable: {e}", self.to, self.addr);
                Err(())
            }
        }
    }
}

/// A replica group member's driver takes its group's requests: Raft messages to its member,
/// images of its database.
impl ReplicaHandler for thor_server::GroupEngine {
    fn deliver(&self, from: u64, to: u64, msg: Bytes) -> Result<(), DeliverError> {
        if to != self.replica_id() {
            return Err(DeliverError::WrongReplica { to });
        }
        if !self.is_running() {
            return Err(DeliverError::Unavailable("the replica is reopening or failed".into()));
        }
        // Undecodable or misaddressed bytes are dropped and counted by the engine
        // (`GroupStats::messages_refused`); Raft recovers from the loss.
        self.replica_message(from, msg);
        Ok(())
    }

    fn checkpoint(&self) -> Result<Lsn, EngineError> {
        thor_server::GroupEngine::checkpoint(self)
    }

    fn image_into(&self, dest: &dyn Disk) -> Result<Superblock, EngineError> {
        thor_server::GroupEngine::image_into(self, Lsn(0), dest).map_err(|e| match e {
            ImageFetchError::Storage(e) => e,
            other => EngineError::Failed(other.to_string()),
        })
    }
}
