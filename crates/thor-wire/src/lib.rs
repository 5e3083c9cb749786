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

pub mod code;
mod codec;
pub mod error;
pub mod frame;
pub mod limits;
pub mod message;
pub mod pagecommit;
pub mod prefetch;
pub mod resume;
pub mod stats;
pub mod transport;
pub mod twopc;
pub mod version;

pub use code::{ErrorCode, RefusedCode};
pub use error::WireError;
pub use frame::{Frame, frame_size};
pub use limits::{WIRE_VERSION, WIRE_VERSION_MIN};
pub use message::{
    BackupInfo, Commit, HELLO_MAGIC, Hello, Piggyback, Reply, ReplyBody, Request, RequestBody,
    ServerInfo, decode_reply, decode_request, kind, truncate_message,
};
pub use pagecommit::{CommitMode, PageCommit, PageRecords};
pub use prefetch::{Prefetch, PrefetchHint};
pub use resume::{CacheVerdict, HistoryPoint, Outcome, Resume, Resumed, Seen, SeenRange};
pub use stats::{ServerStats, StatValue};
pub use transport::{Transport, TransportError};
pub use twopc::{CLIENT_TIE_BIT, Participant, PeerMsg, Prepare, Stamp};
