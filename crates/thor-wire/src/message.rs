//! The messages of the client-server protocol and their payload layouts.
//!
//! A frame's payload (see [`crate::frame`]) is a *piggyback section* followed by the *body* of
//! its message type. Every request and every reply has the piggyback section, even when it is
//! empty, so that the concurrency-control protocol can ride on any message without new types.
//!
//! # Piggyback sections
//!
//! ```text
//! request:  +--------+---------------------+--------+------------------------+
//!           | A: u32 | A acked orefs (u32) | D: u32 | D discarded pages (u32)|
//!           +--------+---------------------+--------+------------------------+
//!   then, if the frame has FLAG_DEMOTION (version 2):
//!           +--------+----------------------+
//!           | M: u32 | M demoted pages (u32)|
//!           +--------+----------------------+---------------------------------+
//!           | P: u32 | P x ( page: u32 | len: u32 | the page (len bytes) )    |
//!           +--------+--------------------------------------------------------+
//! reply:    +--------+---------------------------+
//!           | I: u32 | I invalidated orefs (u32) |
//!           +--------+---------------------------+
//!   then, if the frame has FLAG_DEMOTION (version 2):
//!           +--------+----------------------+
//!           | W: u32 | W wanted pages (u32) |
//!           +--------+----------------------+
//! ```
//!
//! Then, on replies of version-5 connections (frame flag `FLAG_SEEN`), the *seen* section: the
//! newest change visible when the reply was sent ([`crate::resume`] has its layout and use).
//! And on requests of version-6 connections (frame flag `FLAG_CONTENTION`), after the demotion
//! sections, the *contention* report: the aborts the client found itself and its retries since
//! its last report ([`crate::contention`] has its layout and use).
//!
//! Acks confirm invalidations the client has applied; discarded pages are pages the client
//! dropped from its cache (so that the server's directory of cached pages can forget them).
//! Invalidations name objects other clients have committed new versions of. `A <= ACKS_MAX`,
//! `D <= DISCARDED_PAGES_MAX`, `I <= INVALIDATIONS_MAX`. Orefs here and everywhere below name
//! stored objects: spare bit clear and page id in `1..=PAGE_ID_MAX`, so neither null nor any
//! other word of page 0 (`thor_core::Oref::object`, the definition the server core and the
//! log-record decoder use too; a request holding another word is refused as malformed).
//!
//! Demotion (the DEMOTE protocol, `papers/demote-exclusive-caching.txt`, with a server whose
//! page cache is exclusive, as `HelloOk` says): a *demoted page* is a page the client dropped
//! intact, whose stored bytes it still holds. It is reported apart from the discarded pages
//! (which wait while the client's transaction has read from the page, so that the server keeps
//! sending its invalidations) and does not touch the directory. The server answers on the reply:
//! the pages it *wants* are those it does not cache and would keep; the client sends their
//! bytes (in their stored form, references unswizzled) as *demoted page data* on a later
//! request, and the server keeps them only if they are the page's current version.
//! `M <= DISCARDED_PAGES_MAX`, `P <= DEMOTED_PAGES_MAX`, `W <= DEMOTED_WANTED_MAX`. A sender
//! sets the flag exactly when a demotion section is not empty, so messages without demotion
//! keep version 1's bytes.
//!
//! # Request bodies
//!
//! ```text
//! Hello    0x0001  +--------+--------+--------+--------+-----------+--------+----------+
//!                  | magic  | minver | maxver | T: u16 | token (T) | N: u16 | name (N) |
//!                  +--------+--------+--------+--------+-----------+--------+----------+
//!                    u32      u16      u16               bytes                UTF-8
//!                  magic = "THOR" (0x524f4854); T <= 1024; N <= 256
//!
//! Fetch    0x0002  +--------+
//!                  | page   |  u32 page id
//!                  +--------+
//!
//! Commit   0x0003  +--------+-------------------+
//!                  | R: u32 | R read orefs (u32)|                       the read set
//!                  +--------+-------------------+-------------------+
//!                  | V: u32 | V x ( oref: u32 | len: u32 | bytes ) |  new versions
//!                  +--------+-------------------+-------------------+
//!                  | C: u32 | C x ( len: u32 | bytes )             |  created objects
//!                  +--------+---------------------------------------+
//!                  R <= 2^21; V + C <= 2^20; len <= 32 KiB
//!
//! Abort    0x0004  (empty)     the client abandoned its transaction
//! Stats    0x0005  (empty)     asks for the server's counters
//! Goodbye  0x0006  (empty)     the client is leaving; the server acks and closes
//!
//! PageRecords 0x0040, PageCommit 0x0041: the page-based commit modes, see `crate::pagecommit`
//! (numbered apart from the sequence above, which other additions continue).
//!
//! Backup   0x0007  +--------+-----------+
//!                  | P: u16 | path (P)  |  a directory on the server's machine, which must not
//!                  +--------+-----------+  exist; P <= 4096, UTF-8
//!
//! Prepare  0x0008  two-phase commit (version 3): see crate::twopc
//! Peer     0x0009  a message between servers (version 3): see crate::twopc
//! Prefetch 0x000A  a fetch that brings further pages (version 4): see crate::prefetch
//! Resume   0x000B  resumes a session on a new connection (version 5): see crate::resume
//! CommitWithId 0x000C  a Commit with an id, to learn its outcome if the answer is lost
//!                  (version 5): the id (u64, not 0), then Commit's body; see crate::resume
//! Raft, ImageBegin, ImageChunk, ImageEnd 0x000D-0x0010  between the replicas of a group
//!                  (version 10): see crate::replica
//! ```
//!
//! Object bytes in a commit are complete objects in the format of `thor_core::class`; reference
//! words (and the class word of a created object) may be *tagged* indexes into the commit's
//! created objects, which the server replaces by the orefs it allocates.
//!
//! # Reply bodies
//!
//! ```text
//! HelloOk        0x0081  +-------+------+---------+---------+------+--------+-----------+
//!                        |version| flags|server id|page size| root |client id| max frame|
//!                        +-------+------+---------+---------+------+--------+-----------+
//!                          u16     u16     u32       u32      u32     u32       u32
//!                        flags: bit 0 = the server takes demoted pages; bits 1-3 = the
//!                        commit mode (`pagecommit::CommitMode`, 0 = obj); other bits zero
//!
//! Page           0x0082  +--------+----------+---------------------+
//!                        | page   | len: u32 | the page (len bytes)|  len is a valid page size
//!                        +--------+----------+---------------------+
//!
//! CommitOk       0x0083  +----------+--------+------------------------+
//!                        | lsn: u64 | C: u32 | C created orefs (u32)  |  in request order
//!                        +----------+--------+------------------------+
//!
//! CommitRefused  0x0084  +-----------+--------+--------------+
//!                        | code: u16 | M: u16 | message (M)  |  RefusedCode; M <= 4096, UTF-8
//!                        +-----------+--------+--------------+
//!
//! Ack            0x0085  (empty)     answers Abort, Goodbye and Peer
//!
//! Prepared       0x0088  a participant's answer to Prepare (version 3): see crate::twopc
//!
//! Pages          0x0089  answers Prefetch (version 4): see crate::prefetch
//!
//! Resumed        0x008A  answers Resume (version 5): see crate::resume
//!
//! Image, ImageTooOld, Chunk 0x008B-0x008D  answer a replica's image requests (version 10):
//!                        see crate::replica
//!
//! Stats          0x0086  +--------+------------------+
//!                        | F: u16 | F x u64 counters |  see ServerStats for the order
//!                        +--------+------------------+
//!
//! BackupDone     0x0087  +----------+-------------+------------+
//!                        | lsn: u64 | pages: u64  | log: u64   |  the backup holds every
//!                        +----------+-------------+------------+  commit up to lsn; bytes copied
//!
//! Error          0x00ff  +-----------+--------+--------------+
//!                        | code: u16 | M: u16 | message (M)  |  ErrorCode; M <= 4096, UTF-8
//!                        +-----------+--------+--------------+
//! ```
//!
//! A payload must end exactly after its last field; trailing bytes are an error.

use bytes::Bytes;
use thor_core::limits::is_valid_page_size;
use thor_core::{ClientId, Lsn, Oref, PageId, ServerId};

use crate::code::{ErrorCode, RefusedCode};
use crate::codec::{Put, Reader, check_limit, check_oref};
use crate::error::WireError;
use crate::frame::{self, FLAG_CONTENTION, FLAG_DEMOTION, FLAG_SEEN, FLAGS_NONE, Frame};
use crate::limits::{
    ACKS_MAX, CLIENT_NAME_BYTES_MAX, COMMIT_OBJECTS_MAX, DEMOTED_PAGES_MAX, DEMOTED_WANTED_MAX,
    DISCARDED_PAGES_MAX, FRAME_BYTES_MAX, FRAME_BYTES_SETTING_MIN, FRAME_HEADER_BYTES,
    INVALIDATIONS_MAX, MESSAGE_BYTES_MAX, OBJECT_BYTES_MAX, PATH_BYTES_MAX, READ_SET_MAX,
    TOKEN_BYTES_MAX, WIRE_VERSION, WIRE_VERSION_MIN,
};
use crate::resume::{Resume, Resumed, SEEN_BYTES, Seen};
use crate::stats::ServerStats;
use crate::twopc::{PeerMsg, Prepare};

/// `HelloOk` flag: the server takes demoted pages.
const HELLO_FLAG_DEMOTIONS: u16 = 1;
/// `HelloOk` flags bits 1-3: the server's commit mode (`CommitMode::code`; 0 is `obj`, so a
/// server of an older build sends `obj`).
const HELLO_COMMIT_MODE_SHIFT: u16 = 1;
const HELLO_COMMIT_MODE_MASK: u16 = 0b111 << HELLO_COMMIT_MODE_SHIFT;

/// The first word of every `Hello` body: "THOR" in ASCII, read little-endian. It lets a server
/// tell a thor client from something else that happened to send a well-formed frame.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"THOR");

/// Message type numbers. Requests are `0x0001..=0x007f`, replies `0x0080..=0x00ff`. Numbers not
/// listed are reserved for later versions.
pub mod kind {
    /// [`crate::RequestBody::Hello`].
    pub const HELLO: u16 = 0x0001;
    /// [`crate::RequestBody::Fetch`].
    pub const FETCH: u16 = 0x0002;
    /// [`crate::RequestBody::Commit`].
    pub const COMMIT: u16 = 0x0003;
    /// [`crate::RequestBody::Abort`].
    pub const ABORT: u16 = 0x0004;
    /// [`crate::RequestBody::Stats`].
    pub const STATS: u16 = 0x0005;
    /// [`crate::RequestBody::Goodbye`].
    pub const GOODBYE: u16 = 0x0006;
    /// [`crate::RequestBody::Backup`].
    pub const BACKUP: u16 = 0x0007;
    /// [`crate::RequestBody::Prepare`] (version 3).
    pub const PREPARE: u16 = 0x0008;
    /// [`crate::RequestBody::Peer`] (version 3).
    pub const PEER: u16 = 0x0009;
    /// [`crate::RequestBody::Prefetch`] (version 4).
    pub const PREFETCH: u16 = 0x000a;
    /// [`crate::RequestBody::Resume`] (version 5).
    pub const RESUME: u16 = 0x000b;
    /// [`crate::RequestBody::Commit`] with an id ([`crate::Commit::id`], version 5).
    pub const COMMIT_WITH_ID: u16 = 0x000c;
    /// [`crate::replica::ReplicaRequest::Raft`] (version 10).
    pub const RAFT: u16 = 0x000d;
    /// [`crate::replica::ReplicaRequest::ImageBegin`] (version 10).
    pub const IMAGE_BEGIN: u16 = 0x000e;
    /// [`crate::replica::ReplicaRequest::ImageChunk`] (version 10).
    pub const IMAGE_CHUNK: u16 = 0x000f;
    /// [`crate::replica::ReplicaRequest::ImageEnd`] (version 10).
    pub const IMAGE_END: u16 = 0x0010;
    /// [`crate::RequestBody::PageRecords`] (`crate::pagecommit`).
    pub const PAGE_RECORDS: u16 = 0x0040;
    /// [`crate::RequestBody::PageCommit`] (`crate::pagecommit`).
    pub const PAGE_COMMIT: u16 = 0x0041;
    /// [`crate::ReplyBody::HelloOk`].
    pub const HELLO_OK: u16 = 0x0081;
    /// [`crate::ReplyBody::Page`].
    pub const PAGE: u16 = 0x0082;
    /// [`crate::ReplyBody::CommitOk`].
    pub const COMMIT_OK: u16 = 0x0083;
    /// [`crate::ReplyBody::CommitRefused`].
    pub const COMMIT_REFUSED: u16 = 0x0084;
    /// [`crate::ReplyBody::Ack`].
    pub const ACK: u16 = 0x0085;
    /// [`crate::ReplyBody::Stats`].
    pub const STATS_REPLY: u16 = 0x0086;
    /// [`crate::ReplyBody::BackupDone`].
    pub const BACKUP_DONE: u16 = 0x0087;
    /// [`crate::ReplyBody::Prepared`] (version 3).
    pub const PREPARED: u16 = 0x0088;
    /// [`crate::ReplyBody::Pages`] (version 4).
    pub const PAGES: u16 = 0x0089;
    /// [`crate::ReplyBody::Resumed`] (version 5).
    pub const RESUMED: u16 = 0x008a;
    /// [`crate::replica::ReplicaReply::Image`] (version 10).
    pub const IMAGE: u16 = 0x008b;
    /// [`crate::replica::ReplicaReply::ImageTooOld`] (version 10).
    pub const IMAGE_TOO_OLD: u16 = 0x008c;
    /// [`crate::replica::ReplicaReply::Chunk`] (version 10).
    pub const CHUNK: u16 = 0x008d;
    /// [`crate::ReplyBody::Error`].
    pub const ERROR: u16 = 0x00ff;

    /// Whether `k` is in the range of request types.
    pub const fn is_request(k: u16) -> bool {
        k >= 0x0001 && k <= 0x007f
    }

    /// Whether `k` is in the range of reply types.
    pub const fn is_reply(k: u16) -> bool {
        k >= 0x0080 && k <= 0x00ff
    }
}

/// Cuts `text` to at most [`MESSAGE_BYTES_MAX`] bytes at a character boundary, so that any
/// message can be sent.
pub fn truncate_message(text: &str) -> String {
    if text.len() <= MESSAGE_BYTES_MAX {
        return text.to_owned();
    }
    let mut end = MESSAGE_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// What a client piggybacks on any request for the concurrency-control protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Piggyback {
    /// Invalidated objects the client has applied (dropped or marked invalid): the server can
    /// remove them from the client's invalid set.
    pub acks: Vec<Oref>,
    /// Pages the client dropped from its cache: the server's directory can stop sending
    /// invalidations for them.
    pub discarded: Vec<PageId>,
    /// Pages the client dropped from its cache intact, whose stored bytes it still holds,
    /// offered to the server's cache (it answers with the pages it wants). Not a discard:
    /// the client reports that separately.
    pub demoted: Vec<PageId>,
    /// The bytes of demoted pages the server asked for, in their stored form.
    pub demoted_pages: Vec<(PageId, Bytes)>,
    /// The contention the client met since its last report (version 6, frame flag
    /// [`FLAG_CONTENTION`]): the aborts it found itself and its retries.
    pub contention: Option<crate::contention::Contention>,
}

impl Piggyback {
    /// Whether the demotion sections are not empty (the frame then has [`FLAG_DEMOTION`]).
    pub fn has_demotions(&self) -> bool {
        !self.demoted.is_empty() || !self.demoted_pages.is_empty()
    }

    /// Whether there is nothing to piggyback.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty()
            && self.discarded.is_empty()
            && self.demoted.is_empty()
            && self.demoted_pages.is_empty()
            && self.contention.is_none()
    }
}

/// A client's request: a body and the piggybacked acks and discarded pages. The request id is
/// not part of the message but of its frame (see [`Request::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What the client asks.
    pub body: RequestBody,
    /// What rides along.
    pub piggyback: Piggyback,
}

/// The `Hello` that opens every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The oldest protocol version the client speaks.
    pub min_version: u16,
    /// The newest protocol version the client speaks; the server picks the newest both speak.
    pub max_version: u16,
    /// The shared secret that authenticates the client (empty when the server has none).
    pub token: Bytes,
    /// Free text naming the client, for the server's logs.
    pub client_name: String,
}

impl Hello {
    /// A `Hello` offering every version this build speaks.
    pub fn new(token: impl Into<Bytes>, client_name: impl Into<String>) -> Hello {
        Hello {
            min_version: WIRE_VERSION_MIN,
            max_version: WIRE_VERSION,
            token: token.into(),
            client_name: client_name.into(),
        }
    }
}

/// A commit: the transaction's read set, the new versions of the objects it modified, and the
/// objects it created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Commit {
    /// Objects the transaction read, for validation by the concurrency-control protocol.
    pub reads: Vec<Oref>,
    /// New versions: each object's oref and complete new bytes.
    pub versions: Vec<(Oref, Bytes)>,
    /// Created objects in creation order (which is their clustering order).
    pub created: Vec<Bytes>,
    /// An id the client chose (not 0), unique among its commits, sent as `CommitWithId`
    /// (version 5): the server keeps it with the commit, in its log too, so that a client
    /// whose connection broke before the answer came can ask what became of the commit
    /// ([`crate::resume`]). `None` sends a plain `Commit`. Not part of a `Prepare`.
    pub id: Option<u64>,
    /// Leaf deltas (version 8, [`crate::leafdelta`]): for map leaves the commit writes, what
    /// it read and did there key by key, so that the server may merge it with a concurrent
    /// change of other keys. Sent with a `Commit` or `CommitWithId` only (a `Prepare` and a
    /// resumed commit leave them out: the server then validates as without them).
    pub leaves: Vec<crate::leafdelta::LeafDelta>,
}

/// What a client can ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestBody {
    /// Opens the session: version negotiation and authentication. Must come first.
    Hello(Hello),
    /// Asks for a page's current bytes.
    Fetch {
        /// The page.
        page: PageId,
    },
    /// Asks for a page's current bytes and up to a number of further pages the server
    /// chooses ([`crate::prefetch`], version 4).
    Prefetch(crate::prefetch::Prefetch),
    /// Resumes a session on a new connection ([`crate::resume`], version 5).
    Resume(Resume),
    /// Asks to commit a transaction.
    Commit(Commit),
    /// Tells the server that the client abandoned its transaction.
    Abort,
    /// Asks for the server's counters.
    Stats,
    /// Ends the session.
    Goodbye,
    /// Asks the server to write a consistent copy of its database into `path`, a directory on
    /// the *server's* machine that must not exist yet.
    Backup {
        /// Where, as the server's file system names it.
        path: String,
    },
    /// Asks to prepare this server's part of a transaction that used several servers
    /// (two-phase commit, [`crate::twopc`]).
    Prepare(Box<Prepare>),
    /// A message from another server about a transaction ([`crate::twopc`]); answered `Ack`.
    Peer(PeerMsg),
    /// Page records sent before commit, with undo bytes (page-based commit modes).
    PageRecords(crate::pagecommit::PageRecords),
    /// Asks to commit a transaction in a page-based commit mode.
    PageCommit(crate::pagecommit::PageCommit),
    /// A request between the replicas of one replica group ([`crate::replica`], version 10):
    /// a Raft message or a step of copying a database image.
    Replica(crate::replica::ReplicaRequest),
}

impl RequestBody {
    /// The message type number.
    pub fn kind(&self) -> u16 {
        match self {
            RequestBody::Hello(_) => kind::HELLO,
            RequestBody::Fetch { .. } => kind::FETCH,
            RequestBody::Prefetch(_) => kind::PREFETCH,
            RequestBody::Resume(_) => kind::RESUME,
            RequestBody::Commit(c) if c.id.is_some() => kind::COMMIT_WITH_ID,
            RequestBody::Commit(_) => kind::COMMIT,
            RequestBody::PageRecords(_) => kind::PAGE_RECORDS,
            RequestBody::PageCommit(_) => kind::PAGE_COMMIT,
            RequestBody::Abort => kind::ABORT,
            RequestBody::Stats => kind::STATS,
            RequestBody::Goodbye => kind::GOODBYE,
            RequestBody::Backup { .. } => kind::BACKUP,
            RequestBody::Prepare(_) => kind::PREPARE,
            RequestBody::Peer(_) => kind::PEER,
            RequestBody::Replica(r) => r.kind(),
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            RequestBody::Hello(_) => "Hello",
            RequestBody::Fetch { .. } => "Fetch",
            RequestBody::Prefetch(_) => "Prefetch",
            RequestBody::Resume(_) => "Resume",
            RequestBody::Commit(c) if c.id.is_some() => "CommitWithId",
            RequestBody::Commit(_) => "Commit",
            RequestBody::PageRecords(_) => "PageRecords",
            RequestBody::PageCommit(_) => "PageCommit",
            RequestBody::Abort => "Abort",
            RequestBody::Stats => "Stats",
            RequestBody::Goodbye => "Goodbye",
            RequestBody::Backup { .. } => "Backup",
            RequestBody::Prepare(_) => "Prepare",
            RequestBody::Peer(_) => "Peer",
            RequestBody::Replica(r) => r.name(),
        }
    }
}

/// What the server tells a client in `HelloOk`: what the session needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerInfo {
    /// The protocol version chosen for this connection.
    pub version: u16,
    /// The server's id (orefs are relative to it).
    pub server_id: ServerId,
    /// Bytes per page: the size of every `Page` reply and of the client's cache frames.
    pub page_size: usize,
    /// The persistent root object.
    pub root: Oref,
    /// The id the server gave this session.
    pub client_id: ClientId,
    /// The largest frame the server accepts on this connection.
    pub max_frame_bytes: usize,
    /// Whether the server takes demoted pages (its page cache is exclusive): a client should
    /// demote the pages it drops intact.
    pub demotions: bool,
    /// How the server makes commits recoverable (`HelloOk` flags bits 1-3): in a page-based
    /// mode the client commits with `PageCommit`.
    pub commit_mode: crate::pagecommit::CommitMode,
}

/// The server's answer to one request, and the invalidations riding on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The answer.
    pub body: ReplyBody,
    /// Objects that other clients have committed new versions of since the last reply: the
    /// client must drop its copies (and abort a transaction that read one).
    pub invalidations: Vec<Oref>,
    /// Demoted pages whose bytes the server asks for (see the module documentation).
    pub wanted: Vec<PageId>,
    /// The newest change visible when the reply was sent (version 5, [`crate::resume`]).
    pub seen: Option<Seen>,
}

/// What the server can answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// Answers `Hello`: the session is open.
    HelloOk(ServerInfo),
    /// Answers `Fetch`.
    Page {
        /// The page asked for.
        page: PageId,
        /// Its bytes, exactly as the server's engine has them (a zero-copy slice of the frame
        /// at the client).
        bytes: Bytes,
    },
    /// Answers `Prefetch`: the page asked for first, then the pages the server added
    /// ([`crate::prefetch`], version 4). Each is the page's bytes exactly as the server's
    /// engine has them.
    Pages(Vec<(PageId, Bytes)>),
    /// Answers `Resume` ([`crate::resume`], version 5).
    Resumed(Resumed),
    /// Answers `Commit`: the commit is durable.
    CommitOk {
        /// The commit's place in the server's serial order.
        lsn: Lsn,
        /// The orefs given to the created objects, in request order.
        created: Vec<Oref>,
    },
    /// Answers `Commit`: the commit was refused and had no effect.
    CommitRefused {
        /// Why, for programs.
        code: RefusedCode,
        /// Why, for humans.
        message: String,
    },
    /// Answers `Abort`, `Goodbye` and `Peer`.
    Ack,
    /// Answers `Prepare` at a participant that is not the coordinator: its part passed
    /// validation (and, if it writes, is durable as prepared). The coordinator's `CommitOk` or
    /// `CommitRefused` is the transaction's outcome.
    Prepared {
        /// The orefs given to the objects created here, in request order.
        created: Vec<Oref>,
    },
    /// Answers `Stats`.
    Stats(Box<ServerStats>),
    /// Answers `Backup`: the copy is complete and durable.
    BackupDone(BackupInfo),
    /// Answers a replica's image requests ([`crate::replica`], version 10).
    Replica(crate::replica::ReplicaReply),
    /// A request or the connection failed (see [`ErrorCode`] for which codes close it).
    Error {
        /// What went wrong, for programs.
        code: ErrorCode,
        /// What went wrong, for humans.
        message: String,
    },
}

impl ReplyBody {
    /// The message type number.
    pub fn kind(&self) -> u16 {
        match self {
            ReplyBody::HelloOk(_) => kind::HELLO_OK,
            ReplyBody::Page { .. } => kind::PAGE,
            ReplyBody::Pages(_) => kind::PAGES,
            ReplyBody::Resumed(_) => kind::RESUMED,
            ReplyBody::CommitOk { .. } => kind::COMMIT_OK,
            ReplyBody::CommitRefused { .. } => kind::COMMIT_REFUSED,
            ReplyBody::Ack => kind::ACK,
            ReplyBody::Stats(_) => kind::STATS_REPLY,
            ReplyBody::BackupDone(_) => kind::BACKUP_DONE,
            ReplyBody::Prepared { .. } => kind::PREPARED,
            ReplyBody::Replica(r) => r.kind(),
            ReplyBody::Error { .. } => kind::ERROR,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ReplyBody::HelloOk(_) => "HelloOk",
            ReplyBody::Page { .. } => "Page",
            ReplyBody::Pages(_) => "Pages",
            ReplyBody::Resumed(_) => "Resumed",
            ReplyBody::CommitOk { .. } => "CommitOk",
            ReplyBody::CommitRefused { .. } => "CommitRefused",
            ReplyBody::Ack => "Ack",
            ReplyBody::Stats(_) => "Stats",
            ReplyBody::BackupDone(_) => "BackupDone",
            ReplyBody::Prepared { .. } => "Prepared",
            ReplyBody::Replica(r) => r.name(),
            ReplyBody::Error { .. } => "Error",
        }
    }
}

/// What a finished backup holds ([`ReplyBody::BackupDone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupInfo {
    /// Every commit up to this LSN is in the copy, and none after it.
    pub lsn: Lsn,
    /// Bytes of the page file copied.
    pub page_bytes: u64,
    /// Bytes of the log copied.
    pub log_bytes: u64,
}

/// Appends one frame of `size` payload bytes (already checked against every limit), written by
/// `write`, to `out`.
fn encode_frame(
    size: usize,
    kind: u16,
    flags: u16,
    id: u64,
    max_frame_bytes: usize,
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>),
) -> Result<(), WireError> {
    check_frame_size(size, max_frame_bytes)?;
    out.reserve(size);
    let start = frame::begin(out);
    write(out);
    debug_assert_eq!(out.len() - start, size);
    frame::finish(out, start, kind, flags, id, max_frame_bytes)
}

fn put_orefs(out: &mut Vec<u8>, orefs: &[Oref]) {
    out.put_u32(orefs.len() as u32);
    for o in orefs {
        out.put_u32(o.raw());
    }
}

fn get_orefs(r: &mut Reader, max: usize, what: &'static str) -> Result<Vec<Oref>, WireError> {
    let n = r.count32(max, 4, what)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.oref(what)?);
    }
    Ok(v)
}

fn put_pages(out: &mut Vec<u8>, pages: &[PageId]) {
    out.put_u32(pages.len() as u32);
    for p in pages {
        out.put_u32(p.get());
    }
}

fn get_pages(r: &mut Reader, max: usize, what: &'static str) -> Result<Vec<PageId>, WireError> {
    let n = r.count32(max, 4, what)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.page_id(what)?);
    }
    Ok(v)
}

fn put_short(out: &mut Vec<u8>, b: &[u8]) {
    out.put_u16(b.len() as u16);
    out.extend_from_slice(b);
}

fn check_orefs(orefs: &[Oref], what: &'static str) -> Result<(), WireError> {
    orefs.iter().try_for_each(|&o| check_oref(o, what))
}

fn check_frame_size(size: usize, max_frame_bytes: usize) -> Result<(), WireError> {
    let max = max_frame_bytes.min(FRAME_BYTES_MAX);
    if size > max {
        return Err(WireError::FrameTooLarge { len: size as u64, max });
    }
    Ok(())
}

impl Request {
    /// A request with nothing piggybacked.
    pub fn new(body: RequestBody) -> Request {
        Request { body, piggyback: Piggyback::default() }
    }

    /// Checks every count, length and oref of this request against the protocol's limits and
    /// returns the size of its frame, without encoding it. A transport that does not encode
    /// (the in-process one) uses this to refuse exactly what a network transport refuses.
    pub fn frame_bytes(&self) -> Result<usize, WireError> {
        let pb = &self.piggyback;
        check_limit("acks", pb.acks.len(), ACKS_MAX)?;
        check_limit("discarded pages", pb.discarded.len(), DISCARDED_PAGES_MAX)?;
        check_limit("demoted pages", pb.demoted.len(), DISCARDED_PAGES_MAX)?;
        check_limit("demoted page data", pb.demoted_pages.len(), DEMOTED_PAGES_MAX)?;
        check_orefs(&pb.acks, "acks")?;
        let mut n = FRAME_HEADER_BYTES + 8 + 4 * pb.acks.len() + 4 * pb.discarded.len();
        if pb.has_demotions() {
            n += 8 + 4 * pb.demoted.len();
        }
        if let Some(c) = &pb.contention {
            c.check()?;
            n += crate::contention::CONTENTION_BYTES;
        }
        for (_, bytes) in &pb.demoted_pages {
            if !is_valid_page_size(bytes.len()) {
                return Err(WireError::BadValue { what: "demoted page", why: "not a page size" });
            }
            n += 8 + bytes.len();
        }
        n += match &self.body {
            RequestBody::Hello(h) => {
                check_limit("token", h.token.len(), TOKEN_BYTES_MAX)?;
                check_limit("client name", h.client_name.len(), CLIENT_NAME_BYTES_MAX)?;
                12 + h.token.len() + h.client_name.len()
            }
            RequestBody::Fetch { .. } => 4,
            RequestBody::Prefetch(p) => {
                p.check()?;
                crate::prefetch::PREFETCH_BYTES
            }
            RequestBody::Commit(c) => {
                if c.id == Some(0) {
                    return Err(WireError::BadValue { what: "commit id", why: "zero" });
                }
                let deltas = if c.leaves.is_empty() {
                    0
                } else {
                    crate::leafdelta::deltas_bytes(&c.leaves)?
                };
                commit_bytes(c)? + if c.id.is_some() { 8 } else { 0 } + deltas
            }
            RequestBody::Resume(r) => r.body_bytes()?,
            RequestBody::Prepare(p) => {
                p.check()?;
                if p.commit.id.is_some() {
                    return Err(WireError::BadValue { what: "prepare", why: "a commit id" });
                }
                p.header_bytes() + commit_bytes(&p.commit)?
            }
            RequestBody::Peer(_) => PeerMsg::BYTES,
            RequestBody::Replica(r) => r.body_bytes()?,
            RequestBody::Abort | RequestBody::Stats | RequestBody::Goodbye => 0,
            RequestBody::PageRecords(r) => crate::pagecommit::records_bytes(r)?,
            RequestBody::PageCommit(c) => crate::pagecommit::commit_bytes(c)?,
            RequestBody::Backup { path } => {
                check_limit("backup path", path.len(), PATH_BYTES_MAX)?;
                2 + path.len()
            }
        };
        Ok(n)
    }

    /// Appends this request's frame, with request id `id`, to `out`. Fails (leaving `out` as it
    /// was) if a count or length is above its limit or the frame would be larger than
    /// `max_frame_bytes`: an encoder refuses whatever the peer's decoder would.
    pub fn encode(
        &self,
        id: u64,
        max_frame_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let size = self.frame_bytes()?;
        let mut flags = if self.piggyback.has_demotions() { FLAG_DEMOTION } else { FLAGS_NONE };
        if self.piggyback.contention.is_some() {
            flags |= FLAG_CONTENTION;
        }
        if let RequestBody::Commit(c) = &self.body
            && !c.leaves.is_empty()
        {
            flags |= frame::FLAG_LEAF_DELTAS;
        }
        encode_frame(size, self.body.kind(), flags, id, max_frame_bytes, out, |out| {
            self.write_payload(out)
        })
    }

    /// This request's frame with request id `id`, within the largest frame size.
    pub fn to_frame(&self, id: u64) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        self.encode(id, FRAME_BYTES_MAX, &mut out)?;
        Ok(out)
    }

    /// Writes the payload; [`Request::frame_bytes`] has checked it.
    fn write_payload(&self, out: &mut Vec<u8>) {
        let pb = &self.piggyback;
        put_orefs(out, &pb.acks);
        put_pages(out, &pb.discarded);
        if pb.has_demotions() {
            put_pages(out, &pb.demoted);
            out.put_u32(pb.demoted_pages.len() as u32);
            for (page, bytes) in &pb.demoted_pages {
                out.put_u32(page.get());
                out.put_u32(bytes.len() as u32);
                out.extend_from_slice(bytes);
            }
        }
        if let Some(c) = &pb.contention {
            c.put(out);
        }
        match &self.body {
            RequestBody::Hello(h) => {
                out.put_u32(HELLO_MAGIC);
                out.put_u16(h.min_version);
                out.put_u16(h.max_version);
                put_short(out, &h.token);
                put_short(out, h.client_name.as_bytes());
            }
            RequestBody::Fetch { page } => out.put_u32(page.get()),
            RequestBody::Prefetch(p) => p.put(out),
            RequestBody::Resume(r) => r.put(out),
            RequestBody::Commit(c) => {
                if let Some(id) = c.id {
                    out.put_u64(id);
                }
                put_commit(out, c);
                if !c.leaves.is_empty() {
                    crate::leafdelta::put_deltas(out, &c.leaves);
                }
            }
            RequestBody::Prepare(p) => {
                p.put_header(out);
                put_commit(out, &p.commit);
            }
            RequestBody::Peer(m) => m.put(out),
            RequestBody::Replica(r) => r.put(out),
            RequestBody::Abort | RequestBody::Stats | RequestBody::Goodbye => {}
            RequestBody::PageRecords(r) => crate::pagecommit::put_records(out, r),
            RequestBody::PageCommit(c) => crate::pagecommit::put_commit(out, c),
            RequestBody::Backup { path } => put_short(out, path.as_bytes()),
        }
    }

    /// Decodes the request in a parsed frame. Every count is checked against its limit and the
    /// bytes present before anything is allocated for it.
    pub fn decode(frame: &Frame) -> Result<Request, WireError> {
        if !kind::is_request(frame.kind) {
            return Err(if kind::is_reply(frame.kind) {
                WireError::UnexpectedType { kind: frame.kind, expected: "request" }
            } else {
                WireError::UnknownType(frame.kind)
            });
        }
        if frame.flags & FLAG_SEEN != 0 {
            return Err(WireError::BadValue { what: "flags", why: "a seen section on a request" });
        }
        let mut r = Reader::new(frame.payload.clone());
        let acks = get_orefs(&mut r, ACKS_MAX, "acks")?;
        let discarded = get_pages(&mut r, DISCARDED_PAGES_MAX, "discarded pages")?;
        let (mut demoted, mut demoted_pages) = (Vec::new(), Vec::new());
        if frame.flags & FLAG_DEMOTION != 0 {
            demoted = get_pages(&mut r, DISCARDED_PAGES_MAX, "demoted pages")?;
            let n = r.count32(DEMOTED_PAGES_MAX, 8, "demoted page data")?;
            demoted_pages.reserve_exact(n);
            for _ in 0..n {
                let page = r.page_id("demoted page")?;
                let len = r.u32("demoted page length")? as usize;
                if !is_valid_page_size(len) {
                    return Err(WireError::BadValue {
                        what: "demoted page length",
                        why: "not a page size",
                    });
                }
                demoted_pages.push((page, r.bytes(len, "demoted page bytes")?));
            }
        }
        let contention = if frame.flags & FLAG_CONTENTION != 0 {
            Some(crate::contention::Contention::get(&mut r)?)
        } else {
            None
        };
        let piggyback = Piggyback { acks, discarded, demoted, demoted_pages, contention };
        let deltas = frame.flags & frame::FLAG_LEAF_DELTAS != 0;
        if deltas && frame.kind != kind::COMMIT && frame.kind != kind::COMMIT_WITH_ID {
            return Err(WireError::BadValue { what: "flags", why: "leaf deltas on no commit" });
        }
        let mut body = match frame.kind {
            kind::HELLO => {
                if r.u32("hello magic")? != HELLO_MAGIC {
                    return Err(WireError::BadValue { what: "hello magic", why: "not \"THOR\"" });
                }
                let min_version = r.u16("min version")?;
                let max_version = r.u16("max version")?;
                let token = r.short_bytes(TOKEN_BYTES_MAX, "token")?;
                let client_name = r.string(CLIENT_NAME_BYTES_MAX, "client name")?;
                RequestBody::Hello(Hello { min_version, max_version, token, client_name })
            }
            kind::FETCH => RequestBody::Fetch { page: r.page_id("page")? },
            kind::PREFETCH => RequestBody::Prefetch(crate::prefetch::Prefetch::get(&mut r)?),
            kind::COMMIT => RequestBody::Commit(get_commit(&mut r)?),
            kind::COMMIT_WITH_ID => {
                let id = match r.u64("commit id")? {
                    0 => return Err(WireError::BadValue { what: "commit id", why: "zero" }),
                    id => id,
                };
                RequestBody::Commit(Commit { id: Some(id), ..get_commit(&mut r)? })
            }
            kind::RESUME => RequestBody::Resume(Resume::get(&mut r)?),
            kind::PREPARE => {
                let (stamp, coordinator, participants) = Prepare::get_header(&mut r)?;
                let commit = get_commit(&mut r)?;
                let p = Prepare { stamp, coordinator, participants, commit };
                p.check()?;
                RequestBody::Prepare(Box::new(p))
            }
            kind::PEER => RequestBody::Peer(PeerMsg::get(&mut r)?),
            kind::RAFT | kind::IMAGE_BEGIN | kind::IMAGE_CHUNK | kind::IMAGE_END => {
                RequestBody::Replica(crate::replica::ReplicaRequest::get(frame.kind, &mut r)?)
            }
            kind::ABORT => RequestBody::Abort,
            kind::STATS => RequestBody::Stats,
            kind::GOODBYE => RequestBody::Goodbye,
            kind::BACKUP => RequestBody::Backup { path: r.string(PATH_BYTES_MAX, "backup path")? },
            kind::PAGE_RECORDS => RequestBody::PageRecords(crate::pagecommit::get_records(&mut r)?),
            kind::PAGE_COMMIT => RequestBody::PageCommit(crate::pagecommit::get_commit(&mut r)?),
            other => return Err(WireError::UnknownType(other)),
        };
        if deltas && let RequestBody::Commit(c) = &mut body {
            c.leaves = crate::leafdelta::get_deltas(&mut r)?;
            if c.leaves.is_empty() {
                return Err(WireError::BadValue { what: "leaf deltas", why: "flagged but none" });
            }
        }
        r.finish()?;
        Ok(Request { body, piggyback })
    }
}

impl Reply {
    /// A reply with no invalidations.
    pub fn new(body: ReplyBody) -> Reply {
        Reply { body, invalidations: Vec::new(), wanted: Vec::new(), seen: None }
    }

    /// An `Error` reply; `message` is truncated to [`MESSAGE_BYTES_MAX`].
    pub fn error(code: ErrorCode, message: &str) -> Reply {
        Reply::new(ReplyBody::Error { code, message: truncate_message(message) })
    }

    /// A `CommitRefused` reply; `message` is truncated to [`MESSAGE_BYTES_MAX`].
    pub fn refused(code: RefusedCode, message: &str) -> Reply {
        Reply::new(ReplyBody::CommitRefused { code, message: truncate_message(message) })
    }

    /// Checks every count, length and value of this reply against the protocol's limits and
    /// returns the size of its frame, without encoding it.
    pub fn frame_bytes(&self) -> Result<usize, WireError> {
        check_limit("invalidations", self.invalidations.len(), INVALIDATIONS_MAX)?;
        check_orefs(&self.invalidations, "invalidations")?;
        check_limit("wanted pages", self.wanted.len(), DEMOTED_WANTED_MAX)?;
        let mut n = FRAME_HEADER_BYTES + 4 + 4 * self.invalidations.len();
        if !self.wanted.is_empty() {
            n += 4 + 4 * self.wanted.len();
        }
        if self.seen.is_some() {
            n += SEEN_BYTES;
        }
        Ok(n + match &self.body {
            ReplyBody::HelloOk(i) => {
                check_info(i)?;
                24
            }
            ReplyBody::Page { bytes, .. } => {
                if !is_valid_page_size(bytes.len()) {
                    return Err(WireError::BadValue { what: "page bytes", why: "not a page size" });
                }
                8 + bytes.len()
            }
            ReplyBody::Pages(pages) => crate::prefetch::pages_bytes(pages)?,
            ReplyBody::Resumed(r) => r.body_bytes()?,
            ReplyBody::CommitOk { created, .. } => {
                check_limit("created orefs", created.len(), COMMIT_OBJECTS_MAX)?;
                check_orefs(created, "created orefs")?;
                12 + 4 * created.len()
            }
            ReplyBody::Prepared { created } => {
                check_limit("created orefs", created.len(), COMMIT_OBJECTS_MAX)?;
                check_orefs(created, "created orefs")?;
                4 + 4 * created.len()
            }
            ReplyBody::CommitRefused { message, .. } | ReplyBody::Error { message, .. } => {
                check_limit("message", message.len(), MESSAGE_BYTES_MAX)?;
                4 + message.len()
            }
            ReplyBody::Ack => 0,
            ReplyBody::Stats(_) => 2 + 8 * ServerStats::FIELDS.len(),
            ReplyBody::BackupDone(_) => 24,
            ReplyBody::Replica(r) => r.body_bytes()?,
        })
    }

    /// Appends this reply's frame, with request id `id`, to `out`. Fails (leaving `out` as it
    /// was) if a count or length is above its limit or the frame would be larger than
    /// `max_frame_bytes`.
    pub fn encode(
        &self,
        id: u64,
        max_frame_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let size = self.frame_bytes()?;
        let mut flags = if self.wanted.is_empty() { FLAGS_NONE } else { FLAG_DEMOTION };
        if self.seen.is_some() {
            flags |= FLAG_SEEN;
        }
        encode_frame(size, self.body.kind(), flags, id, max_frame_bytes, out, |out| {
            self.write_payload(out)
        })
    }

    /// This reply's frame with request id `id`, within the largest frame size.
    pub fn to_frame(&self, id: u64) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        self.encode(id, FRAME_BYTES_MAX, &mut out)?;
        Ok(out)
    }

    /// Writes the payload; [`Reply::frame_bytes`] has checked it.
    fn write_payload(&self, out: &mut Vec<u8>) {
        put_orefs(out, &self.invalidations);
        if !self.wanted.is_empty() {
            put_pages(out, &self.wanted);
        }
        if let Some(seen) = &self.seen {
            seen.put(out);
        }
        match &self.body {
            ReplyBody::HelloOk(i) => {
                out.put_u16(i.version);
                out.put_u16(
                    (u16::from(i.demotions) * HELLO_FLAG_DEMOTIONS)
                        | (u16::from(i.commit_mode.code()) << HELLO_COMMIT_MODE_SHIFT),
                );
                out.put_u32(i.server_id.0);
                out.put_u32(i.page_size as u32);
                out.put_u32(i.root.raw());
                out.put_u32(i.client_id.0);
                out.put_u32(i.max_frame_bytes as u32);
            }
            ReplyBody::Page { page, bytes } => {
                out.put_u32(page.get());
                out.put_u32(bytes.len() as u32);
                out.extend_from_slice(bytes);
            }
            ReplyBody::Pages(pages) => crate::prefetch::put_pages(out, pages),
            ReplyBody::Resumed(r) => r.put(out),
            ReplyBody::CommitOk { lsn, created } => {
                out.put_u64(lsn.0);
                put_orefs(out, created);
            }
            ReplyBody::CommitRefused { code, message } => {
                out.put_u16(code.to_u16());
                put_short(out, message.as_bytes());
            }
            ReplyBody::Ack => {}
            ReplyBody::Prepared { created } => put_orefs(out, created),
            ReplyBody::Replica(r) => r.put(out),
            ReplyBody::Stats(s) => s.encode(out),
            ReplyBody::BackupDone(b) => {
                out.put_u64(b.lsn.0);
                out.put_u64(b.page_bytes);
                out.put_u64(b.log_bytes);
            }
            ReplyBody::Error { code, message } => {
                out.put_u16(code.to_u16());
                put_short(out, message.as_bytes());
            }
        }
    }

    /// Decodes the reply in a parsed frame, checking everything.
    pub fn decode(frame: &Frame) -> Result<Reply, WireError> {
        if !kind::is_reply(frame.kind) {
            return Err(if kind::is_request(frame.kind) {
                WireError::UnexpectedType { kind: frame.kind, expected: "reply" }
            } else {
                WireError::UnknownType(frame.kind)
            });
        }
        if frame.flags & FLAG_CONTENTION != 0 {
            return Err(WireError::BadValue {
                what: "flags",
                why: "a contention report on a reply",
            });
        }
        let mut r = Reader::new(frame.payload.clone());
        let invalidations = get_orefs(&mut r, INVALIDATIONS_MAX, "invalidations")?;
        let wanted = if frame.flags & FLAG_DEMOTION != 0 {
            get_pages(&mut r, DEMOTED_WANTED_MAX, "wanted pages")?
        } else {
            Vec::new()
        };
        let seen = if frame.flags & FLAG_SEEN != 0 { Some(Seen::get(&mut r)?) } else { None };
        let body = match frame.kind {
            kind::HELLO_OK => {
                let version = r.u16("version")?;
                let flags = r.u16("flags")?;
                if flags & !(HELLO_FLAG_DEMOTIONS | HELLO_COMMIT_MODE_MASK) != 0 {
                    return Err(WireError::BadValue { what: "flags", why: "unknown bit set" });
                }
                let demotions = flags & HELLO_FLAG_DEMOTIONS != 0;
                let mode = ((flags & HELLO_COMMIT_MODE_MASK) >> HELLO_COMMIT_MODE_SHIFT) as u8;
                let commit_mode = crate::pagecommit::CommitMode::from_code(mode)
                    .ok_or(WireError::BadValue { what: "commit mode", why: "unknown mode" })?;
                let server_id = ServerId(r.u32("server id")?);
                let page_size = r.u32("page size")? as usize;
                let root = r.oref("root")?;
                let client_id = ClientId(r.u32("client id")?);
                let max_frame_bytes = r.u32("max frame bytes")? as usize;
                let info = ServerInfo {
                    version,
                    server_id,
                    page_size,
                    root,
                    client_id,
                    max_frame_bytes,
                    demotions,
                    commit_mode,
                };
                check_info(&info)?;
                ReplyBody::HelloOk(info)
            }
            kind::PAGE => {
                let page = r.page_id("page")?;
                let len = r.u32("page length")? as usize;
                if !is_valid_page_size(len) {
                    return Err(WireError::BadValue {
                        what: "page length",
                        why: "not a page size",
                    });
                }
                ReplyBody::Page { page, bytes: r.bytes(len, "page bytes")? }
            }
            kind::PAGES => ReplyBody::Pages(crate::prefetch::get_pages(&mut r)?),
            kind::RESUMED => ReplyBody::Resumed(Resumed::get(&mut r)?),
            kind::COMMIT_OK => {
                let lsn = Lsn(r.u64("lsn")?);
                let created = get_orefs(&mut r, COMMIT_OBJECTS_MAX, "created orefs")?;
                ReplyBody::CommitOk { lsn, created }
            }
            kind::COMMIT_REFUSED => {
                let code = RefusedCode::from_u16(r.u16("refusal code")?)
                    .ok_or(WireError::BadValue { what: "refusal code", why: "unknown code" })?;
                let message = r.string(MESSAGE_BYTES_MAX, "message")?;
                ReplyBody::CommitRefused { code, message }
            }
            kind::ACK => ReplyBody::Ack,
            kind::PREPARED => ReplyBody::Prepared {
                created: get_orefs(&mut r, COMMIT_OBJECTS_MAX, "created orefs")?,
            },
            kind::STATS_REPLY => ReplyBody::Stats(Box::new(ServerStats::decode(&mut r)?)),
            kind::BACKUP_DONE => ReplyBody::BackupDone(BackupInfo {
                lsn: Lsn(r.u64("backup lsn")?),
                page_bytes: r.u64("backup page bytes")?,
                log_bytes: r.u64("backup log bytes")?,
            }),
            kind::IMAGE | kind::IMAGE_TOO_OLD | kind::CHUNK => {
                ReplyBody::Replica(crate::replica::ReplicaReply::get(frame.kind, &mut r)?)
            }
            kind::ERROR => {
                let code = ErrorCode::from_u16(r.u16("error code")?)
                    .ok_or(WireError::BadValue { what: "error code", why: "unknown code" })?;
                let message = r.string(MESSAGE_BYTES_MAX, "message")?;
                ReplyBody::Error { code, message }
            }
            other => return Err(WireError::UnknownType(other)),
        };
        r.finish()?;
        Ok(Reply { body, invalidations, wanted, seen })
    }
}

/// Checks a commit body and returns its size.
fn commit_bytes(c: &Commit) -> Result<usize, WireError> {
    check_limit("read set", c.reads.len(), READ_SET_MAX)?;
    check_limit(
        "commit objects",
        c.versions.len().saturating_add(c.created.len()),
        COMMIT_OBJECTS_MAX,
    )?;
    check_orefs(&c.reads, "read set")?;
    let mut n = 12 + 4 * c.reads.len();
    for (oref, bytes) in &c.versions {
        check_oref(*oref, "version oref")?;
        check_limit("object bytes", bytes.len(), OBJECT_BYTES_MAX)?;
        n += 8 + bytes.len();
    }
    for bytes in &c.created {
        check_limit("object bytes", bytes.len(), OBJECT_BYTES_MAX)?;
        n += 4 + bytes.len();
    }
    Ok(n)
}

fn put_commit(out: &mut Vec<u8>, c: &Commit) {
    put_orefs(out, &c.reads);
    out.put_u32(c.versions.len() as u32);
    for (oref, bytes) in &c.versions {
        out.put_u32(oref.raw());
        out.put_u32(bytes.len() as u32);
        out.extend_from_slice(bytes);
    }
    out.put_u32(c.created.len() as u32);
    for bytes in &c.created {
        out.put_u32(bytes.len() as u32);
        out.extend_from_slice(bytes);
    }
}

fn get_commit(r: &mut Reader) -> Result<Commit, WireError> {
    let reads = get_orefs(r, READ_SET_MAX, "read set")?;
    let nv = r.count32(COMMIT_OBJECTS_MAX, 8, "versions")?;
    let mut versions = Vec::with_capacity(nv);
    for _ in 0..nv {
        let oref = r.oref("version oref")?;
        let len = r.count32(OBJECT_BYTES_MAX, 1, "object bytes")?;
        versions.push((oref, r.bytes(len, "object bytes")?));
    }
    let nc = r.count32(COMMIT_OBJECTS_MAX - nv, 4, "created objects")?;
    let mut created = Vec::with_capacity(nc);
    for _ in 0..nc {
        let len = r.count32(OBJECT_BYTES_MAX, 1, "object bytes")?;
        created.push(r.bytes(len, "object bytes")?);
    }
    Ok(Commit { reads, versions, created, id: None, leaves: Vec::new() })
}

fn check_info(i: &ServerInfo) -> Result<(), WireError> {
    if i.version == 0 {
        return Err(WireError::BadValue { what: "version", why: "zero" });
    }
    if !is_valid_page_size(i.page_size) {
        return Err(WireError::BadValue { what: "page size", why: "not a valid page size" });
    }
    check_oref(i.root, "root")?;
    if !(FRAME_BYTES_SETTING_MIN..=FRAME_BYTES_MAX).contains(&i.max_frame_bytes) {
        return Err(WireError::BadValue {
            what: "max frame bytes",
            why: "outside the allowed range",
        });
    }
    Ok(())
}

/// Parses and decodes a whole request frame (length word included): what a server does with
/// the bytes of one frame. Returns the request id and the request.
pub fn decode_request(frame: Bytes, max_frame_bytes: usize) -> Result<(u64, Request), WireError> {
    let f = Frame::parse(frame, max_frame_bytes)?;
    Ok((f.id, Request::decode(&f)?))
}

/// Parses and decodes a whole reply frame (length word included). Returns the request id and
/// the reply.
pub fn decode_reply(frame: Bytes, max_frame_bytes: usize) -> Result<(u64, Reply), WireError> {
    let f = Frame::parse(frame, max_frame_bytes)?;
    Ok((f.id, Reply::decode(&f)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::frame_size;
    use crate::limits::FRAME_HEADER_BYTES;
    use thor_core::checksum::Crc32c;

    /// A frame around `payload` with a correct length and checksum.
    fn raw_frame(kind: u16, payload: &[u8]) -> Bytes {
        raw_frame_flagged(kind, FLAGS_NONE, payload)
    }

    fn raw_frame_flagged(kind: u16, flags: u16, payload: &[u8]) -> Bytes {
        let mut f = Vec::new();
        let start = frame::begin(&mut f);
        f.extend_from_slice(payload);
        frame::finish(&mut f, start, kind, flags, 5, FRAME_BYTES_MAX).unwrap();
        Bytes::from(f)
    }

    fn req_err(kind: u16, payload: &[u8]) -> WireError {
        req_err_flagged(kind, FLAGS_NONE, payload)
    }

    fn req_err_flagged(kind: u16, flags: u16, payload: &[u8]) -> WireError {
        decode_request(raw_frame_flagged(kind, flags, payload), FRAME_BYTES_MAX).unwrap_err()
    }

    #[test]
    fn fetch_frame_has_the_documented_bytes() {
        let req = Request::new(RequestBody::Fetch { page: PageId::new(7).unwrap() });
        let f = req.to_frame(1).unwrap();
        let mut expected = vec![
            28, 0, 0, 0, // length: 16 + 12 bytes of payload
            0, 0, 0, 0, // crc32c, filled below
            0x02, 0x00, // type: Fetch
            0x00, 0x00, // flags
            1, 0, 0, 0, 0, 0, 0, 0, // request id
            0, 0, 0, 0, // no acks
            0, 0, 0, 0, // no discarded pages
            7, 0, 0, 0, // page 7
        ];
        let mut crc = Crc32c::new();
        crc.update(&expected[0..4]);
        crc.update(&expected[8..]);
        let c = crc.finish();
        expected[4..8].copy_from_slice(&c.to_le_bytes());
        assert_eq!(f, expected);
        assert_eq!(c, 0x2c65_a77e, "the checksum of this frame never changes");
    }

    #[test]
    fn frame_sizes_are_checked_before_reading() {
        assert_eq!(frame_size(16u32.to_le_bytes(), 1 << 20), Ok(20));
        assert!(matches!(
            frame_size(15u32.to_le_bytes(), 1 << 20),
            Err(WireError::FrameTooShort { len: 15 })
        ));
        assert!(matches!(
            frame_size(u32::MAX.to_le_bytes(), FRAME_BYTES_MAX),
            Err(WireError::FrameTooLarge { .. })
        ));
        // The connection's own limit applies, never above the protocol's.
        assert!(frame_size(100u32.to_le_bytes(), 64).is_err());
        assert!(frame_size(((FRAME_BYTES_MAX) as u32).to_le_bytes(), usize::MAX).is_err());
    }

    #[test]
    fn counts_are_bounded_by_the_bytes_present() {
        // A commit claiming a million versions in a 20-byte payload: refused before any
        // allocation for them.
        let mut p = vec![0u8; 8]; // empty piggyback
        p.extend_from_slice(&0u32.to_le_bytes()); // no reads
        p.extend_from_slice(&(1u32 << 20).to_le_bytes()); // versions
        p.extend_from_slice(&[0; 8]);
        assert_eq!(req_err(kind::COMMIT, &p), WireError::Truncated { what: "versions" });
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&u32::MAX.to_le_bytes()); // reads above the limit
        assert!(matches!(
            req_err(kind::COMMIT, &p),
            WireError::LimitExceeded { what: "read set", .. }
        ));
    }

    #[test]
    fn malformed_payloads_are_named() {
        let empty_pb = [0u8; 8];
        let mut p = empty_pb.to_vec();
        p.extend_from_slice(b"HTTP");
        assert!(matches!(
            req_err(kind::HELLO, &p),
            WireError::BadValue { what: "hello magic", .. }
        ));
        let mut p = empty_pb.to_vec();
        p.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(req_err(kind::FETCH, &p), WireError::BadValue { what: "page", .. }));
        let mut p = empty_pb.to_vec();
        p.extend_from_slice(&[7, 0, 0, 0, 9]);
        assert_eq!(req_err(kind::FETCH, &p), WireError::TrailingBytes { count: 1 });
        assert_eq!(req_err(kind::FETCH, &empty_pb), WireError::Truncated { what: "page" });
        assert_eq!(req_err(0x0077, &empty_pb), WireError::UnknownType(0x77));
        assert_eq!(req_err(0x1234, &empty_pb), WireError::UnknownType(0x1234));
        assert_eq!(
            req_err(kind::ACK, &[0; 4]),
            WireError::UnexpectedType { kind: kind::ACK, expected: "request" }
        );
        // A swizzled (tagged) oref in an ack.
        let mut p = 1u32.to_le_bytes().to_vec();
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(req_err(kind::ABORT, &p), WireError::BadValue { what: "acks", .. }));
        // Demoted page data of a length that is no page size.
        let mut p = [0u8; 12].to_vec();
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(&100u32.to_le_bytes());
        p.extend_from_slice(&[0; 100]);
        assert!(matches!(
            req_err_flagged(kind::ABORT, FLAG_DEMOTION, &p),
            WireError::BadValue { what: "demoted page length", .. }
        ));
        // More demoted page data than one request may carry.
        let mut p = [0u8; 12].to_vec();
        p.extend_from_slice(&(DEMOTED_PAGES_MAX as u32 + 1).to_le_bytes());
        assert!(matches!(
            req_err_flagged(kind::ABORT, FLAG_DEMOTION, &p),
            WireError::LimitExceeded { what: "demoted page data", .. }
        ));
        // Without the flag the same bytes are trailing bytes of an Abort.
        assert!(matches!(req_err(kind::ABORT, &p), WireError::TrailingBytes { .. }));
        let f = raw_frame(kind::STATS, &empty_pb);
        let mut bad = f.to_vec();
        bad[10] = 16;
        let crc = {
            let mut c = Crc32c::new();
            c.update(&bad[0..4]);
            c.update(&bad[8..]);
            c.finish()
        };
        bad[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_request(Bytes::from(bad), FRAME_BYTES_MAX).unwrap_err(),
            WireError::ReservedFlags(16)
        );
        // Bit 2 is the contention report's (version 6): without its section the frame is short.
        assert!(matches!(
            req_err_flagged(kind::STATS, FLAG_CONTENTION, &empty_pb),
            WireError::Truncated { what: "invalidation aborts" }
        ));
        // And it belongs to requests.
        let mut reply_pb = 0u32.to_le_bytes().to_vec();
        reply_pb.extend_from_slice(&[0; 12]);
        assert!(matches!(
            decode_reply(raw_frame_flagged(kind::ACK, FLAG_CONTENTION, &reply_pb), FRAME_BYTES_MAX)
                .unwrap_err(),
            WireError::BadValue { what: "flags", .. }
        ));
        // The seen section belongs to replies.
        assert!(matches!(
            req_err_flagged(kind::STATS, FLAG_SEEN, &empty_pb),
            WireError::BadValue { what: "flags", .. }
        ));
        // A commit id of 0, and a Resumed whose outcome has fields it cannot have.
        let mut p = empty_pb.to_vec();
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&[0; 12]);
        assert!(matches!(
            req_err(kind::COMMIT_WITH_ID, &p),
            WireError::BadValue { what: "commit id", .. }
        ));
        let mut p = 0u32.to_le_bytes().to_vec();
        p.extend_from_slice(&[1, 2, 0, 0]);
        p.extend_from_slice(&9u64.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            decode_reply(raw_frame(kind::RESUMED, &p), FRAME_BYTES_MAX).unwrap_err(),
            WireError::BadValue { what: "outcome", .. }
        ));
    }

    #[test]
    fn a_commit_with_an_id_is_its_own_message_and_keeps_the_id() {
        let c = Commit {
            reads: vec![],
            versions: vec![],
            created: vec![],
            id: Some(77),
            leaves: vec![],
        };
        let f = Request::new(RequestBody::Commit(c.clone())).to_frame(3).unwrap();
        assert_eq!(u16::from_le_bytes([f[8], f[9]]), kind::COMMIT_WITH_ID);
        let (_, back) = decode_request(Bytes::from(f), FRAME_BYTES_MAX).unwrap();
        assert_eq!(back.body, RequestBody::Commit(c));
        let plain = Commit::default();
        let f = Request::new(RequestBody::Commit(plain)).to_frame(3).unwrap();
        assert_eq!(u16::from_le_bytes([f[8], f[9]]), kind::COMMIT);
    }

    #[test]
    fn page_records_carry_stolen_pages_only_in_a_section_that_is_not_empty() {
        let empty_pb = [0u8; 8];
        // Records only: txn, no records, and nothing after (the layout without pages).
        let mut p = empty_pb.to_vec();
        p.extend_from_slice(&7u64.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        let req = decode_request(raw_frame(kind::PAGE_RECORDS, &p), FRAME_BYTES_MAX).unwrap().1;
        let RequestBody::PageRecords(r) = &req.body else { panic!("{req:?}") };
        assert_eq!((r.txn, r.records.len(), r.pages.len()), (7, 0, 0));
        assert_eq!(req.to_frame(5).unwrap(), raw_frame(kind::PAGE_RECORDS, &p).to_vec());
        // With one stolen page of 1 KiB.
        let mut q = p.clone();
        q.extend_from_slice(&1u32.to_le_bytes());
        q.extend_from_slice(&3u32.to_le_bytes());
        q.extend_from_slice(&1024u32.to_le_bytes());
        q.extend_from_slice(&[5; 1024]);
        let req = decode_request(raw_frame(kind::PAGE_RECORDS, &q), FRAME_BYTES_MAX).unwrap().1;
        let RequestBody::PageRecords(r) = &req.body else { panic!("{req:?}") };
        assert_eq!(r.pages.len(), 1);
        assert_eq!((r.pages[0].0.get(), r.pages[0].1.len()), (3, 1024));
        assert_eq!(req.to_frame(5).unwrap(), raw_frame(kind::PAGE_RECORDS, &q).to_vec());
        // A section that says zero pages has a second encoding of the first message: refused.
        let mut e = p.clone();
        e.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            req_err(kind::PAGE_RECORDS, &e),
            WireError::BadValue { what: "stolen pages", .. }
        ));
    }

    #[test]
    fn encoders_refuse_what_decoders_would() {
        let mut out = vec![1, 2, 3];
        let hello = Hello::new(vec![0u8; TOKEN_BYTES_MAX + 1], "x");
        let err = Request::new(RequestBody::Hello(hello)).encode(1, FRAME_BYTES_MAX, &mut out);
        assert!(matches!(err, Err(WireError::LimitExceeded { what: "token", .. })));
        assert_eq!(out, [1, 2, 3], "a failed encode leaves the buffer as it was");
        let big = Commit { created: vec![Bytes::from(vec![0u8; 4096]); 40], ..Commit::default() };
        let err = Request::new(RequestBody::Commit(big)).encode(1, 64 << 10, &mut out);
        assert!(matches!(err, Err(WireError::FrameTooLarge { .. })));
        assert_eq!(out, [1, 2, 3]);
        let null = Request::new(RequestBody::Commit(Commit {
            reads: vec![Oref::NULL],
            ..Commit::default()
        }));
        assert!(null.to_frame(1).is_err());
    }

    /// Every place a request names an object takes exactly the words `Oref::object` takes
    /// (the core's and the log-record decoder's definition): page 0's words are refused like
    /// null and tagged ones, by the decoder and by the encoder.
    #[test]
    fn every_named_object_refuses_what_names_no_object() {
        let page_zero = Oref::from_raw(8).unwrap();
        let good = Oref::object(0x400).unwrap();
        for (word, why) in [
            (0u32, "null oref"),
            (8, "oref on page 0, which is never allocated"),
            (0x3fe, "oref on page 0, which is never allocated"),
            (9, "spare bit set (not a stored oref)"),
        ] {
            // A commit's read set: R = 1, the word; no versions, no created objects.
            let mut p = [0u8; 8].to_vec();
            p.extend_from_slice(&1u32.to_le_bytes());
            p.extend_from_slice(&word.to_le_bytes());
            p.extend_from_slice(&[0; 8]);
            assert_eq!(req_err(kind::COMMIT, &p), WireError::BadValue { what: "read set", why });
            // A version's oref.
            let mut p = [0u8; 12].to_vec();
            p.extend_from_slice(&1u32.to_le_bytes());
            p.extend_from_slice(&word.to_le_bytes());
            p.extend_from_slice(&4u32.to_le_bytes());
            p.extend_from_slice(&[0; 8]);
            assert_eq!(
                req_err(kind::COMMIT, &p),
                WireError::BadValue { what: "version oref", why }
            );
            // An ack.
            let mut p = 1u32.to_le_bytes().to_vec();
            p.extend_from_slice(&word.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            assert_eq!(req_err(kind::ABORT, &p), WireError::BadValue { what: "acks", why });
            // A page commit's read and write sets.
            for (reads, writes, what) in [(1u32, 0u32, "read set"), (0, 1, "write set")] {
                let mut p = [0u8; 8].to_vec();
                p.extend_from_slice(&7u64.to_le_bytes());
                p.push(1);
                for n in [reads, writes] {
                    p.extend_from_slice(&n.to_le_bytes());
                    if n == 1 {
                        p.extend_from_slice(&word.to_le_bytes());
                    }
                }
                p.extend_from_slice(&[0; 12]);
                assert_eq!(req_err(kind::PAGE_COMMIT, &p), WireError::BadValue { what, why });
            }
        }
        // The same commit with a page-1 read decodes.
        let mut p = [0u8; 8].to_vec();
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&good.raw().to_le_bytes());
        p.extend_from_slice(&[0; 8]);
        let req = decode_request(raw_frame(kind::COMMIT, &p), FRAME_BYTES_MAX).unwrap().1;
        assert_eq!(
            req.body,
            RequestBody::Commit(Commit { reads: vec![good], ..Commit::default() })
        );
        // The encoders refuse what the decoders would.
        let reads = Commit { reads: vec![good, page_zero], ..Commit::default() };
        assert!(Request::new(RequestBody::Commit(reads)).to_frame(1).is_err());
        let versions = Commit {
            versions: vec![(page_zero, Bytes::from_static(&[0; 4]))],
            ..Commit::default()
        };
        assert!(Request::new(RequestBody::Commit(versions)).to_frame(1).is_err());
        let mut ack = Request::new(RequestBody::Abort);
        ack.piggyback.acks.push(page_zero);
        assert!(ack.to_frame(1).is_err());
        let pc = crate::PageCommit { mode: 1, writes: vec![page_zero], ..Default::default() };
        assert!(Request::new(RequestBody::PageCommit(pc)).to_frame(1).is_err());
        let reply = Reply::new(ReplyBody::CommitOk { lsn: Lsn(1), created: vec![page_zero] });
        assert!(reply.to_frame(1).is_err());
    }

    #[test]
    fn messages_are_truncated_at_character_boundaries() {
        let long = "é".repeat(MESSAGE_BYTES_MAX);
        let t = truncate_message(&long);
        assert!(t.len() <= MESSAGE_BYTES_MAX && t.len() >= MESSAGE_BYTES_MAX - 1);
        let r = Reply::error(ErrorCode::Internal, &long);
        assert!(r.to_frame(0).is_ok());
        assert_eq!(truncate_message("short"), "short");
    }

    #[test]
    fn empty_frames_are_exactly_a_header() {
        let f = Reply::new(ReplyBody::Ack).to_frame(0).unwrap();
        assert_eq!(f.len(), FRAME_HEADER_BYTES + 4);
    }
}
