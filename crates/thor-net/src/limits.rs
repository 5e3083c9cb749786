//! Bounds and default timeouts of the network layer, with the reasons for their values. The
//! number of connections is bounded by the handler's session limit
//! (`thor_server::HandlerConfig::sessions_max`); frame sizes by the wire protocol's limits.

use std::time::Duration;

/// How long a connection may sit between requests before the server closes it, by default.
/// Clients are interactive programs that may think for a while between transactions; five
/// minutes frees the session of one that went away without closing its socket.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);

/// How long a frame may take to arrive once its first byte has, by default. The largest frame
/// (64 MiB) takes under a second on any network thor runs on; a slower sender is broken or
/// holding a session hostage (slowloris).
pub const FRAME_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// How long a connection may take, by default, from being accepted to its `Hello` answered
/// (its TLS handshake included). A client connects and says `Hello` in a few round trips; a
/// connection silent for longer holds a session slot for nothing, so it is closed: five
/// seconds is a thousand loopback round trips and dozens across continents, short enough that
/// silent connections cannot hold slots for long.
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// How long writing one reply may take, by default: a client that stops reading its replies
/// would otherwise hold its session forever.
pub const WRITE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// How long the server spends on a connection it is closing after an error: writing the error
/// and then reading (and discarding) what the client still sends, so that the close does not
/// turn into a reset that destroys the error reply before the client reads it.
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Default bound on frame bytes held at once across all connections (charged as they arrive;
/// see `server`, *Limits*): four of the largest frames the protocol allows (64 MiB each), so
/// that a few huge commits proceed side by side while hundreds of connections cannot make the
/// server hold hundreds of frames. One more largest frame may be held beyond it, from the
/// reserve that keeps half-received frames from waiting on each other for ever.
pub const IN_FLIGHT_BYTES_MAX_DEFAULT: usize = 4 * thor_wire::limits::FRAME_BYTES_MAX;

/// The read buffer of a connection: several small requests (or a pipelined batch) per system
/// call, and small enough to multiply by the session limit.
pub const READ_BUFFER_BYTES: usize = 16 << 10;

/// The initial capacity of a frame being received, and the first step charged to the
/// server-wide bound. A frame's buffer then doubles as the bytes that fill it arrive, each
/// step charged before it is filled, so a peer that announces a 64 MiB frame and sends
/// nothing costs only this much.
pub const FRAME_BUFFER_INITIAL_BYTES: usize = 16 << 10;

/// A connection keeps its reply buffer between replies up to this capacity (a page reply fits);
/// a larger one (a big `CommitOk`) is freed after use.
pub const REPLY_BUFFER_KEEP_BYTES: usize = 64 << 10;

/// A client's default timeout for connecting and the `Hello` handshake together: a server on
/// the same network answers a connect and a `Hello` in milliseconds, a restarting one within a
/// few seconds; ten seconds tells a stopped or unreachable server from a slow one without
/// leaving a program hanging.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// A client transport's default wait for one reply ([`crate::ClientConfig::io_timeout`]).
/// Sessions set their own per request (`thor_client::SessionConfig`'s request and commit
/// timeouts); this bounds what other users of a transport wait (server-to-server sessions,
/// `thor stats`): a commit's fsync and a full commit queue take seconds at worst, so a
/// minute is generous, and a stopped server no longer hangs a client for ever.
pub const IO_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// Pause after a failed `accept` (for example out of file descriptors) so that the accept loop
/// does not spin while the condition lasts.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

const _: () = assert!(FRAME_BUFFER_INITIAL_BYTES <= thor_wire::limits::FRAME_BYTES_SETTING_MIN);
const _: () = assert!(HANDSHAKE_TIMEOUT_DEFAULT.as_secs() < IDLE_TIMEOUT_DEFAULT.as_secs());

// ---- The replica links (`crate::replicas`, feature `server`). ----

/// Raft messages queued per replica before new ones are dropped. A leader sends a follower a
/// few messages per tick (appends within raft-rs's in-flight window of 64, a heartbeat), so a
/// thousand is many ticks of backlog; beyond that the link is too slow and Raft's own flow
/// control and resends do better than a longer queue.
pub const REPLICA_QUEUE_MAX: usize = 1024;

/// Images a replica keeps open for copiers at once, by default. One lagging replica copies
/// one image at a time; two lets a second copier (a replica replaced meanwhile) start
/// without waiting, while bounding the disk the images take (each a full copy of the page
/// file: `crate::replicas`, "The serving side").
pub const IMAGES_OPEN_MAX: usize = 2;

/// How long an open image may go unasked before it is removed, by default. A copier asks for
/// its next chunk as soon as it has written the last, so a minute without a request means it
/// is gone; its disk is reclaimed.
pub const IMAGE_IDLE_EXPIRY: Duration = Duration::from_secs(60);

/// How long a copier waits for one reply of the source. `ImageBegin` makes the image (a copy
/// of the source's page file) before it answers: ten minutes is tens of gigabytes on any
/// disk thor runs on; a source slower than that is broken, and the member asks another.
pub const IMAGE_REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a replica link waits for a Raft message's `Ack`: the receiver only queues it, so
/// ten seconds (the peers' wait) means it is stuck, and the link reconnects.
pub const RAFT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

const _: () = assert!(IMAGES_OPEN_MAX >= 1);
const _: () = assert!(IMAGE_IDLE_EXPIRY.as_secs() >= 1);
