//! Bounds of the wire protocol. Every count and length a peer sends is checked against one of
//! these before anything is allocated for it; each constant says why it has its value, and the
//! compile-time assertions below keep the relations between them true.

use thor_core::limits::PAGE_SIZE_MAX;

/// Bytes of the length word that starts every frame.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// Bytes of a frame header: length, checksum, message type, flags and request id (see
/// [`crate::frame`]).
pub const FRAME_HEADER_BYTES: usize = 20;

/// The largest frame any peer may send or a connection may be configured to accept, header
/// included. The biggest message of the benchmarks is OO7's T2b commit on the medium database:
/// 100,000 objects, about 6 MB. 64 MiB leaves a factor of ten above it while keeping what one
/// connection can make a server buffer small enough to multiply by the connection limit.
pub const FRAME_BYTES_MAX: usize = 64 << 20;

/// The smallest maximum frame size a connection may be configured with: a reply carrying the
/// largest page, with room to spare for its header and a batch of piggybacked invalidations.
pub const FRAME_BYTES_SETTING_MIN: usize = 64 << 10;

/// The protocol version this build speaks when it can choose.
/// Version 2 added demotion: the `HelloOk` flag and the demotion sections of the piggyback,
/// present only in frames with the demotion flag, which a server sends (and lets a client send)
/// only on connections that agreed on version 2. Version 1's messages are unchanged.
/// Version 3 added commits across servers: `Prepare`, `Peer` and `Prepared` (`crate::twopc`)
/// and the refusal code `Aborted`; a client sends them only on connections that agreed on 3.
/// Version 4 added prefetch: `Prefetch` and `Pages` (`crate::prefetch`); a client sends
/// `Prefetch` only on connections that agreed on 4.
/// Version 5 added scoped credentials' codes: `Error(Forbidden)` (a request outside the
/// session's credential) and the refusal `UnknownServer` (a prepare naming a server this one
/// does not know); on older connections a server sends `Unauthenticated` (closing) and
/// `Other` instead. `crate::version` has the table of what each version added.
/// It also added resuming a session on a new connection (`crate::resume`): `Resume`,
/// `Resumed`, `CommitWithId` and the seen section of replies (frame flag `FLAG_SEEN`), which
/// a server sends and a client sends only on connections that agreed on 5.
/// Version 6 added the contention report on requests (`crate::contention`, frame flag
/// `FLAG_CONTENTION`): the aborts a client found itself and its retries, which a client sends
/// only on connections that agreed on 6.
/// Version 7 added two things that came in one release: the *settled* bit of a reply's seen
/// section (`crate::resume::Seen`): the server vouches that no transaction can still be
/// serialized before the stamp's state, so a client may commit a read-only transaction on
/// what it read without asking (a server sets it only on connections that agreed on 7); and
/// the peer message `AskVote` (`crate::twopc`): a coordinator asks a participant for a vote
/// it still waits for (a server sends it only to peers whose session agreed on 7).
/// Version 8 added the leaf deltas of a commit (`crate::leafdelta`, frame flag
/// `FLAG_LEAF_DELTAS`), which a client sends only on connections that agreed on 8.
/// Version 9 added replica groups' `Error(NotLeader)` (`crate::code::not_leader_message`),
/// which a replica sends only on connections that agreed on 9 (`ShuttingDown` otherwise).
/// Version 10 added the requests between the replicas of a group (`crate::replica`): `Raft`,
/// `ImageBegin`, `ImageChunk`, `ImageEnd` and their replies, which a replica sends only on
/// connections that agreed on 10.
pub const WIRE_VERSION: u16 = 10;
/// The oldest protocol version this build still speaks.
pub const WIRE_VERSION_MIN: u16 = 1;

/// The largest count in a contention report (`crate::contention`). A client sends a request
/// between any two of its aborts or retries, so an honest report holds one or two; 1024
/// leaves room for a client that reports late and bounds what one request can add to a
/// server's counters.
pub const CONTENTION_COUNT_MAX: usize = 1024;

/// The most leaf deltas in one commit (`crate::leafdelta`): a delta is only worth sending for
/// a leaf the transaction changed by a few point operations, and a transaction that changes
/// more than a thousand leaves is a bulk load that conflicts with little; a commit without
/// deltas for the rest is validated as before. Also bounds the decoder's check that no leaf
/// comes twice (quadratic in this count).
pub const LEAF_DELTAS_MAX: usize = 1024;

/// The most reads, and the most operations, one leaf delta lists: a leaf holds at most a few
/// hundred entries (`thor_core::mapnode`), and a transaction that touched more keys of one
/// leaf than 4,096 sends no delta for it.
pub const LEAF_KEYS_MAX: usize = 4096;

/// The largest value bytes of a leaf entry: the client map's `MAP_VALUE_BYTES_MAX`.
pub const LEAF_VALUE_BYTES_MAX: usize = 64;

/// The longest authentication token. A 256-bit secret in hex is 64 bytes; 1 KiB allows any
/// sensible secret format (a signed token, a passphrase) and bounds the Hello frame.
pub const TOKEN_BYTES_MAX: usize = 1024;

/// The longest client name (free text for logs and statistics).
pub const CLIENT_NAME_BYTES_MAX: usize = 256;
/// The longest path in a `Backup` request, in bytes of UTF-8 (Linux's `PATH_MAX`).
pub const PATH_BYTES_MAX: usize = 4096;

/// The longest human-readable message in an error or refusal reply. Senders truncate longer
/// text at a character boundary (see [`crate::truncate_message`]).
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// Most objects one commit may carry (versions plus created objects). Equal to the engine's
/// bound (`thor_server::limits::COMMIT_OBJECTS_MAX`): OO7's T2b writes 100,000 objects in one
/// transaction, and a bound ten times above keeps a runaway client from exhausting a server.
pub const COMMIT_OBJECTS_MAX: usize = 1 << 20;

/// Most orefs in a commit's read set. OO7's T1 traversal on the medium database reads a few
/// hundred thousand objects; 2^21 orefs (8 MiB on the wire) is well above and far below the
/// frame limit's worth of orefs.
pub const READ_SET_MAX: usize = 1 << 21;

/// The largest object in a commit: no object is bigger than the largest page (larger values are
/// stored as trees of page-sized pieces, `thor_core::large`). The server checks the exact bound
/// for its own page size.
pub const OBJECT_BYTES_MAX: usize = PAGE_SIZE_MAX;

/// Most invalidated orefs piggybacked on one reply. A commit writes at most
/// [`COMMIT_OBJECTS_MAX`] objects, so one reply can carry every invalidation one commit causes;
/// a server with more pending for a client sends them over several replies.
pub const INVALIDATIONS_MAX: usize = COMMIT_OBJECTS_MAX;

/// Most invalidation acknowledgements piggybacked on one request: every oref of the largest
/// invalidation batch.
pub const ACKS_MAX: usize = INVALIDATIONS_MAX;

/// Most discarded page ids piggybacked on one request: a client cache of 512 MiB of 8 KB pages
/// dropping all of them between two requests. A client with more sends them over several
/// requests.
pub const DISCARDED_PAGES_MAX: usize = 1 << 16;

/// Most demoted pages' bytes piggybacked on one request: what a client may make the server
/// check and cache per request. A client drops a page per fetch at most, in the steady state,
/// so 8 keeps up with any fetch stream while bounding a request's demotion bytes (256 KiB at
/// the largest page size).
pub const DEMOTED_PAGES_MAX: usize = 8;

/// Most wanted pages on one reply: the server asks for at most this many demoted pages it has
/// not received yet, per client (the client holds their bytes until it sends them).
pub const DEMOTED_WANTED_MAX: usize = 64;

/// Most counters in a statistics reply. Newer servers may send more counters than an older
/// client knows; the client skips the extra ones, up to this bound.
pub const STATS_FIELDS_MAX: usize = 256;

/// Most servers one transaction may use (participants of a two-phase commit). Each one costs
/// the coordinator a vote to wait for and a decision to deliver; 64 is far above any
/// partitioning where cross-server references are rare, as Thor assumes.
pub const PARTICIPANTS_MAX: usize = 64;

/// Most pages one `Resume` may name (`crate::resume`): a client that caches anything of more
/// pages (or whose list does not fit the server's frame limit) cannot resume and drops its
/// cache. 2^16 pages are 512 MiB of 8 KB pages, more than the default client cache (64 MiB)
/// holds objects of in the workloads measured; the list is 256 KiB on the wire.
pub const RESUME_PAGES_MAX: usize = 1 << 16;

/// Most requests a transport lets a caller send before reading their replies. The protocol
/// answers in order, so pipelining a few requests hides latency; more would only let a client
/// fill both sockets' buffers and stall.
pub const IN_FLIGHT_MAX: usize = 16;

/// Most further pages one `Prefetch` may ask for (and one `Pages` reply may carry beyond the
/// page asked for). A client asks for what its cache can take; 64 pages is half a megabyte of
/// 8 KB pages, several traversal steps ahead, while a reply of the largest pages (2 MiB) with
/// the most invalidations one reply may carry still fits a frame several times over.
pub const PREFETCH_PAGES_MAX: usize = 64;

/// The largest Raft message between replicas (`crate::replica`): raft-rs puts at most about a
/// megabyte of entries in one append, but always at least one entry, and one entry is a
/// proposal of up to 16 MiB (`thor_replica::limits::PROPOSAL_BYTES_MAX`, which asserts it
/// fits here with its entry's header); 24 MiB leaves room for that and the message's fields
/// while a Raft frame stays well inside the largest frame.
pub const RAFT_MESSAGE_BYTES_MAX: usize = 24 << 20;

/// The most bytes one `Chunk` of a database image carries (`crate::replica`): a megabyte is
/// a hundred pages of 8 KiB per round trip, so a copy on a local network runs near the link's
/// speed rather than the round trip's, and what a copier and a source hold per chunk stays
/// small. (Replies are bounded by the protocol's frame limit, not by the connection's
/// setting, so a chunk is never too big for a session.)
pub const IMAGE_CHUNK_BYTES_MAX: usize = 1 << 20;

const _: () = assert!(FRAME_HEADER_BYTES > FRAME_PREFIX_BYTES);
const _: () = assert!(FRAME_HEADER_BYTES + 8 + 24 + RAFT_MESSAGE_BYTES_MAX <= FRAME_BYTES_MAX);
const _: () = assert!(FRAME_HEADER_BYTES + 8 + 4 + IMAGE_CHUNK_BYTES_MAX <= FRAME_BYTES_MAX);
// A `Pages` reply of the most pages of the largest size, with the most invalidations and
// wanted pages a reply may carry, fits the largest frame.
const _: () = assert!(
    FRAME_HEADER_BYTES
        + 8
        + 4 * (INVALIDATIONS_MAX + DEMOTED_WANTED_MAX)
        + 2
        + (1 + PREFETCH_PAGES_MAX) * (8 + PAGE_SIZE_MAX)
        <= FRAME_BYTES_MAX
);
const _: () = assert!(PREFETCH_PAGES_MAX < u16::MAX as usize);
// A `Resume` of the most pages fits the largest frame.
const _: () = assert!(FRAME_HEADER_BYTES + 8 + 56 + 4 * RESUME_PAGES_MAX <= FRAME_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_SETTING_MIN <= FRAME_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX <= u32::MAX as usize);
// A reply with the largest page must fit in the smallest allowed frame, with room for a header,
// the page's own header fields and the empty piggyback section.
const _: () = assert!(FRAME_HEADER_BYTES + 16 + PAGE_SIZE_MAX < FRAME_BYTES_SETTING_MIN);
// The Hello frame must fit in the smallest frame setting so that a handshake always goes through.
const _: () = assert!(
    FRAME_HEADER_BYTES + 16 + TOKEN_BYTES_MAX + CLIENT_NAME_BYTES_MAX < FRAME_BYTES_SETTING_MIN
);
// Error messages must fit in the smallest frame so that an error can always be reported.
const _: () = assert!(FRAME_HEADER_BYTES + 16 + MESSAGE_BYTES_MAX < FRAME_BYTES_SETTING_MIN);
const _: () = assert!(WIRE_VERSION_MIN <= WIRE_VERSION);
const _: () = assert!(TOKEN_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(CLIENT_NAME_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(PATH_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(MESSAGE_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(STATS_FIELDS_MAX <= u16::MAX as usize);

/// Most page records in one `PageCommit` or `PageRecords` (issue 14's page-based commit modes):
/// one per page a transaction wrote, as many as a commit may write objects.
pub const PAGE_RECORDS_MAX: usize = COMMIT_OBJECTS_MAX;

/// The largest page record: `thor_recovery::limits::PAGE_RECORD_BYTES_MAX` (a header, the most
/// regions of the largest page, both images of every byte) rounded up to five pages; the
/// server asserts at compile time that it covers that bound.
pub const PAGE_RECORD_BYTES_MAX: usize = 5 * PAGE_SIZE_MAX;

/// Most dirty pages one ESM `PageCommit` ships whole. Shipped pages are bounded by the frame
/// limit anyway (64 MiB is 8,192 pages of 8 KiB); this bounds the count before any is read.
pub const PAGES_SHIPPED_MAX: usize = 1 << 16;
