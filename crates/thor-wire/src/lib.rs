//! thor-wire: the client-server protocol of thor — its messages and their bytes.
//!
//! This is the only crate that knows what thor sends over a connection. It does no I/O: it turns
//! messages into frames and frames back into messages, checking everything, and it defines the
//! client's [`Transport`] trait that the network crate implements.
//!
//! # A connection
//!
//! ```text
//!   client                                            server
//!     │── Hello {versions, token, name} ──────────────►│  first, always
//!     │◄────────────── HelloOk {version, page size, …} ─│  or Error, then close
//!     │── Fetch {page} ───────────────────────────────►│
//!     │◄──────────────────────────── Page {bytes} ──────│
//!     │── Commit {reads, versions, created} ──────────►│
//!     │◄─────────── CommitOk {lsn, orefs} | CommitRefused│  durable before CommitOk
//!     │── Goodbye ────────────────────────────────────►│
//!     │◄─────────────────────────────────────── Ack ────│  and the server closes
//! ```
//!
//! Every request carries piggybacked invalidation acks and discarded pages; every reply carries
//! piggybacked invalidations ([`message`]). Requests are answered in order.
//!
//! # Bytes
//!
//! - [`frame`]: the frame: length word, CRC-32C, message type, flags, request id.
//! - [`message`]: the payload of each message type, with byte diagrams.
//! - [`prefetch`]: `Prefetch` and `Pages` (version 4), a fetch that brings further pages.
//! - [`resume`]: `Resume`, `Resumed`, `CommitWithId` and the seen section of replies (version
//!   5): a session that survives a broken connection.
//! - [`replica`]: the requests between the replicas of a replica group (version 10): Raft's
//!   messages as opaque bytes, and the copy of a database image in chunks.
//! - [`contention`]: the contention report on requests (version 6): the aborts a client found
//!   itself and its retries.
//! - [`stats`]: the counters of a `Stats` reply.
//! - [`code`]: the codes of `Error` and `CommitRefused` replies.
//! - [`version`]: which protocol version each message, flag and code needs.
//! - [`limits`]: every bound, with its reason. A frame's length is checked before it is read,
//!   and every count in a payload is checked against its limit and against the bytes left
//!   before anything is allocated for it.
//!
//! All integers are little-endian with explicit widths. [`WIRE_VERSION`] is the protocol
//! version; peers agree on one in the handshake. `docs/format.md` ("Wire protocol") has the same
//! layouts in one place.
//!
//! *Architecture invariant:* decoding never panics and never allocates more than a small
//! multiple of the bytes received: any byte string gives `Ok` or a [`WireError`]
//! (property-tested on random and mutated frames, and fuzzed by `fuzz/`).
//!
//! *API boundary:* [`Request`] / [`Reply`] with [`Request::encode`] / [`Reply::decode`] (and
//! their converses) over [`Frame`]s; [`Transport`] for clients.
//!
//! # Invariants and API boundary
//!
//! (The detail behind this crate's paragraph in ARCHITECTURE.md.)
//!
//! The client-server protocol (`frame.rs`, `message.rs`, `stats.rs`, `code.rs`, `twopc.rs`): `Request` and
//! `Reply` with their bodies, length-prefixed CRC-32C frames with a request id, the `Error` and
//! `CommitRefused` codes, the `ServerStats` counters, and the client's `Transport` trait, split into
//! `send` and `recv` so that a client can work while a request is on the wire (and `send_owned`,
//! for a request the caller gives up, which an in-process transport hands over uncopied). Every request carries
//! piggybacked invalidation acks and discarded pages, every reply piggybacked invalidations, so
//! concurrency control needs no new framing. Byte layouts are in `docs/format.md` ("Wire protocol").
//!
//! *Architecture Invariant:* no I/O. Decoding any byte string gives a message or a `WireError`,
//! never a panic, and never allocates more than a small multiple of the bytes received: every count
//! is checked against its bound (`limits.rs`) and against the bytes left before anything is
//! allocated. Property-tested (roundtrip of every message; random, mutated and checksum-valid
//! random frames) and fuzzed (`fuzz/`, `cargo fuzz run decode`).
//!
//! *Architecture Invariant:* an encoder refuses whatever the peer's decoder would refuse
//! (`Request::frame_bytes` checks every limit without encoding), so a well-behaved client learns of
//! an oversized request locally, before sending it.
//!
//! `version.rs` is the one table of which protocol version each request type, the demotion flag
//! and each code needs (`Request::version_needed`, `ErrorCode::since`, `RefusedCode::since`): the
//! server answers a request newer than its connection's version `UnknownType` and never sends a
//! code newer than it. Version 5 added `Error(Forbidden)` (a request outside the session's
//! credential's scope) and the refusal `UnknownServer`. Version 6 added the contention report
//! on requests (`contention.rs`, frame flag `FLAG_CONTENTION`): the aborts a client found
//! itself and its retries, which the server counts and its fair retries use. Version 9 added
//! replica groups' `Error(NotLeader)`, whose message names the leader (`not_leader_message`,
//! `not_leader_hint`). Version 10 added the requests between the replicas of a group
//! (`replica.rs`): `Raft` (a raft-rs message as opaque bytes, at most
//! `RAFT_MESSAGE_BYTES_MAX`) and the image copy `ImageBegin` / `ImageChunk` / `ImageEnd`
//! answered `Image` / `ImageTooOld` / `Chunk` (at most `IMAGE_CHUNK_BYTES_MAX` a chunk).
//!
//! `pagecommit.rs` has the page-based commit modes' messages (`PageRecords`, `PageCommit`) and
//! `CommitMode`, which `HelloOk`'s flags carry (bits 1-3). `prefetch.rs` has version 4's
//! `Prefetch` request and `Pages` reply (the asked page and up to `PREFETCH_PAGES_MAX` more, one
//! size, no page twice) and `PrefetchHint`. `resume.rs` has version 5's resuming of a session on
//! a new connection: the seen section of replies (frame flag `FLAG_SEEN`), `Resume`, `Resumed`
//! and `CommitWithId` (a `Commit` whose `id` is set). `Transport::set_timeout` bounds a reply's
//! wait; `TransportError::TimedOut` says it passed. `Transport::in_process` says whether a round trip is
//! cheap enough that prefetch saves nothing (the session's default follows it).
//!
//! *API Boundary:* `Request`, `RequestBody`, `Reply`, `ReplyBody`, `Frame`, `frame_size`,
//! `decode_request`, `decode_reply`, `ErrorCode`, `RefusedCode`, `ServerInfo`, `ServerStats`,
//! `BackupInfo`, `CommitMode`, `PageCommit`, `PageRecords` (the page-based commit modes,
//! request kinds 0x0040 and 0x0041),
//! `Transport`, `TransportError`, `WIRE_VERSION`, `limits`; version 3's two-phase commit:
//! `Prepare`, `Participant`, `Stamp`, `CLIENT_TIE_BIT`, `PeerMsg`, `ReplyBody::Prepared`,
//! `RefusedCode::Aborted`; version 4's prefetch: `Prefetch`, `PrefetchHint`, `ReplyBody::Pages`;
//! version 5's `ErrorCode::Forbidden`, `RefusedCode::UnknownServer`; `version::{REQUEST_VERSIONS,
//! request_version, VERSION_*}`;
//! and its resume: `Resume`, `Resumed`, `Seen`, `SeenRange`, `HistoryPoint`, `CacheVerdict`,
//! `Outcome`, `Commit::id`; version 6's `Contention` (`Piggyback::contention`); version 8's
//! `LeafDelta`, `LeafValue` (`Commit::leaves`); version 9's
//! `ErrorCode::NotLeader`, `not_leader_message`, `not_leader_hint`; version 10's
//! `ReplicaRequest`, `ReplicaReply`, `RaftMsg`, `ImageFile`, `ImageInfo`
//! (`RequestBody::Replica`, `ReplyBody::Replica`).

pub mod code;
mod codec;
pub mod contention;
pub mod error;
pub mod frame;
pub mod leafdelta;
pub mod limits;
pub mod message;
pub mod pagecommit;
pub mod prefetch;
pub mod replica;
pub mod resume;
pub mod stats;
pub mod transport;
pub mod twopc;
pub mod version;

pub use code::{ErrorCode, RefusedCode, not_leader_hint, not_leader_message};
pub use contention::Contention;
pub use error::WireError;
pub use frame::{Frame, frame_size};
pub use leafdelta::{LeafDelta, LeafValue};
pub use limits::{WIRE_VERSION, WIRE_VERSION_MIN};
pub use message::{
    BackupInfo, Commit, HELLO_MAGIC, Hello, Piggyback, Reply, ReplyBody, Request, RequestBody,
    ServerInfo, decode_reply, decode_request, kind, truncate_message,
};
pub use pagecommit::{CommitMode, PageCommit, PageRecords};
pub use prefetch::{Prefetch, PrefetchHint};
pub use replica::{ImageFile, ImageInfo, RaftMsg, ReplicaReply, ReplicaRequest};
pub use resume::{CacheVerdict, HistoryPoint, Outcome, Resume, Resumed, Seen, SeenRange};
pub use stats::{ServerStats, StatValue};
pub use transport::{Transport, TransportError};
pub use twopc::{CLIENT_TIE_BIT, Participant, PeerMsg, Prepare, Stamp};
