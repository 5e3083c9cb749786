//! Messages between servers over TCP: the [`thor_server::PeerSink`] of a `thor server` that
//! knows where its peers listen.
//!
//! Each peer gets a thread and a bounded queue. The thread opens a session to the peer on
//! first need, authenticating with this server's *peer credential* (the secret of the `peer:ID`
//! credential naming this server's id, which the peer's credentials list too; or the
//! cluster's single token), sends each message as a `Peer` request and reads its `Ack`. The
//! peer checks that the credential is a peer's and that it names the sender the message
//! claims; a refusal (`Forbidden`, or `Unauthenticated` at `Hello`) is a misconfiguration and
//! is logged as a warning. A message newer than the version the peer's session agreed on (a
//! coordinator's `AskVote` to a server older than version 7) is not sent (and counted as
//! dropped): the peer would close the session on it. [`TcpPeers::set_token`] changes the secret for the sessions opened
//! from then on (a server whose credentials were re-read). Two-phase commit resends what matters
//! on its own timeouts, so this layer never retries: a message that cannot be sent now (queue
//! full, peer unreachable, connection broken) is dropped and counted. After a failed connect
//! the peer is left alone for [`PEER_RETRY_AFTER`], so a peer that is down costs one connect
//! attempt per interval, not one per message.
//!
//! A replicated peer (a replica group, issue 33) has several addresses, one per replica
//! ([`TcpPeers::start_groups`], [`PeerAddrs`]). Its link sends to the replica that led last; a
//! replica that answers `Error(NotLeader)` (at `Hello`, or on a session it opened while it
//! led) moves the link to the replica its message names (`thor_wire::not_leader_hint`,
//! mapped to an address by replica id), and one that refuses or breaks the connection moves
//! it to the next address; the same message follows, at most [`PEER_HOPS_MAX`] connects and
//! never more than the peer has addresses, each move counted ([`PeerCounters::moved`]). Only
//! when every hop failed is the message dropped and the peer left alone for
//! [`PEER_RETRY_AFTER`]. A peer with one address behaves exactly as before.
//!
//! With a [`TlsClient`] ([`TcpPeers::start_tls`], `thor server --peer-tls-ca`), every peer
//! connection is TLS: the peer's certificate is checked against that CA and against the
//! peer's IP address as given in `--peer` (or the one name the `TlsClient` was given, for a
//! cluster whose servers share a certificate), and the `TlsClient`'s own certificate, if any,
//! is presented to peers that require client certificates.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use thor_core::ServerId;
use thor_wire::{
    ErrorCode, PeerMsg, Reply, ReplyBody, Request, RequestBody, Transport, TransportError,
    not_leader_hint,
};
use tracing::{debug, warn};

use crate::client::{ClientConfig, TcpTransport, TlsTransport};
use crate::tls::TlsClient;

/// Messages queued per peer before new ones are dropped.
pub const PEER_QUEUE_MAX: usize = 4096;
/// How long a peer that refused a connection is left alone.
pub const PEER_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Most connects one message to a replicated peer tries (each a move to the replica a
/// `NotLeader` named, or to the next address), and never more than the peer has addresses:
/// a group has at most seven replicas (`thor_replica::limits::REPLICAS_MAX`), so a message
/// finds the leader in one pass over them, and a message costs a bounded time however the
/// group behaves.
pub const PEER_HOPS_MAX: usize = 8;

/// Counters of the messages to peers.
#[derive(Debug, Default)]
pub struct PeerCounters {
    /// Messages delivered (acknowledged by the peer).
    pub sent: AtomicU64,
    /// Messages dropped (queue full, peer unreachable, connection broken, unknown peer).
    pub dropped: AtomicU64,
    /// Moves of a replicated peer's link to another of its replicas (the one a `NotLeader`
    /// named, or the next address after a refused or broken connection).
    pub moved: AtomicU64,
}

/// Where a server's messages to its peers go, over TCP. See the module documentation.
#[derive(Debug)]
pub struct TcpPeers {
    queues: HashMap<ServerId, SyncSender<PeerMsg>>,
    counters: Arc<PeerCounters>,
    /// The secret presented to peers, read by each peer thread when it connects.
    token: Arc<Mutex<Vec<u8>>>,
}

impl TcpPeers {
    /// Peers at `addrs`, reached with `config`: its token is this server's peer credential
    /// (or the cluster's single token), its name is for the peers' logs. Starts one thread per
    /// peer.
    pub fn start(
        addrs: &HashMap<ServerId, SocketAddr>,
        config: &ClientConfig,
    ) -> std::io::Result<Arc<TcpPeers>> {
        TcpPeers::start_tls(addrs, config, None)
    }

    /// [`TcpPeers::start`], over TLS with `tls` if given (see the module documentation).
    pub fn start_tls(
        addrs: &HashMap<ServerId, SocketAddr>,
        config: &ClientConfig,
        tls: Option<TlsClient>,
    ) -> std::io::Result<Arc<TcpPeers>> {
        let groups = addrs.iter().map(|(&id, &addr)| (id, PeerAddrs::one(addr))).collect();
        TcpPeers::start_groups(&groups, config, tls)
    }

    /// [`TcpPeers::start_tls`] with several addresses per peer: a replicated peer's replicas
    /// (issue 33). A message goes to the replica that led last; one that answers `NotLeader`
    /// or cannot be reached sends the link on to the replica it names, else to the next
    /// address (see the module documentation). A peer with one address behaves exactly as with
    /// [`TcpPeers::start_tls`]. A peer with no address is left out.
    pub fn start_groups(
        addrs: &HashMap<ServerId, PeerAddrs>,
        config: &ClientConfig,
        tls: Option<TlsClient>,
    ) -> std::io::Result<Arc<TcpPeers>> {
        let counters = Arc::new(PeerCounters::default());
        let token = Arc::new(Mutex::new(config.token.clone()));
        let mut queues = HashMap::new();
        for (&id, group) in addrs {
            if group.replicas.is_empty() {
                continue;
            }
            let (tx, rx) = sync_channel(PEER_QUEUE_MAX);
            let link = PeerLink {
                id,
                addrs: group.replicas.clone(),
                current: 0,
                cfg: ClientConfig { io_timeout: Some(Duration::from_secs(10)), ..config.clone() },
                token: token.clone(),
                tls: tls.clone(),
                counters: counters.clone(),
            };
            std::thread::Builder::new()
                .name(format!("thor-peer-{}", id.0))
                .spawn(move || peer_thread(link, rx))?;
            queues.insert(id, tx);
        }
        Ok(Arc::new(TcpPeers { queues, counters, token }))
    }

    /// Presents `token` to the peers from now on: sessions opened before keep theirs until
    /// they break (a peer that revoked the old secret closes them; the next message opens a
    /// session with the new one).
    pub fn set_token(&self, token: Vec<u8>) {
        *self.token.lock().unwrap_or_else(PoisonError::into_inner) = token;
    }

    /// The counters.
    pub fn counters(&self) -> &PeerCounters {
        &self.counters
    }
}

impl thor_server::PeerSink for TcpPeers {
    fn send(&self, to: ServerId, msg: PeerMsg) {
        let Some(q) = self.queues.get(&to) else {
            warn!(
                "no address for server {}: dropped {msg:?} (pass --peer {}=HOST:PORT)",
                to.0, to.0
            );
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
}

/// Where a peer may be reached: one address, or each replica of its group (a replicated
/// server, issue 33) with its replica id, which `Error(NotLeader)` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddrs {
    /// `(replica id, address)`, in the order tried; one entry for a server that is not
    /// replicated (its id is then unused).
    pub replicas: Vec<(u64, SocketAddr)>,
}

impl PeerAddrs {
    /// A server at one address.
    pub fn one(addr: SocketAddr) -> PeerAddrs {
        PeerAddrs { replicas: vec![(0, addr)] }
    }
}

/// One peer's connection state: which address it uses and how it moves between them.
struct PeerLink {
    id: ServerId,
    addrs: Vec<(u64, SocketAddr)>,
    /// The address tried (or connected) now.
    current: usize,
    cfg: ClientConfig,
    token: Arc<Mutex<Vec<u8>>>,
    tls: Option<TlsClient>,
    counters: Arc<PeerCounters>,
}

/// What became of one attempt to send a message.
enum Attempt {
    /// Acknowledged.
    Sent,
    /// Not sent; moving on would not help (refused, not understood, version too old).
    /// `back_off`: leave the peer alone for [`PEER_RETRY_AFTER`] (a refused connect).
    Dropped { back_off: bool },
    /// The replica tried does not lead, could not be reached or broke the connection: try
    /// `next`. `back_off` as for `Dropped`, if this was the last hop (no connection made).
    Move { next: usize, back_off: bool },
}

impl PeerLink {
    fn addr(&self) -> SocketAddr {
        self.addrs[self.current].1
    }

    /// The address after the current one, or the replica `hint` names if known.
    fn next(&self, hint: Option<u64>) -> usize {
        hint.and_then(|h| self.addrs.iter().position(|(r, _)| *r == h))
            .filter(|&i| i != self.current)
            .unwrap_or((self.current + 1) % self.addrs.len())
    }

    fn connect(&mut self) -> Result<Box<dyn Transport>, TransportError> {
        self.cfg.token = self.token.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let addr = self.addr();
        match &self.tls {
            None => Ok(Box::new(TcpTransport::connect(addr, &self.cfg)?)),
            Some(tls) => Ok(Box::new(TlsTransport::connect(&addr.to_string(), &self.cfg, tls)?)),
        }
    }

    /// One attempt to send `msg` on `conn` (opened on the current address if needed).
    fn attempt(&mut self, conn: &mut Option<Box<dyn Transport>>, msg: PeerMsg) -> Attempt {
        let (id, addr) = (self.id, self.addr());
        if conn.is_none() {
            match self.connect() {
                Ok(t) => {
                    debug!("connected to server {} at {addr}", id.0);
                    *conn = Some(t);
                }
                Err(TransportError::Refused { code: ErrorCode::NotLeader, message }) => {
                    debug!("server {}'s replica at {addr} does not lead: {message}", id.0);
                    let next = self.next(not_leader_hint(&message));
                    return Attempt::Move { next, back_off: true };
                }
                Err(TransportError::Refused { code, message }) => {
                    // Not a network failure: the two servers' credentials disagree.
                    warn!(
                        "server {} at {addr} refused this server's peer credential: {code}: {message}",
                        id.0
                    );
                    return Attempt::Dropped { back_off: true };
                }
                Err(e) => {
                    debug!("server {} at {addr} unreachable: {e}", id.0);
                    return Attempt::Move { next: self.next(None), back_off: true };
                }
            }
        }
        let t = conn.as_mut().expect("connected above");
        let req = Request::new(RequestBody::Peer(msg));
        if req.version_needed() > t.server().version {
            // An older peer does not know this message (a coordinator's `AskVote`, version
            // 7): sent, it would close the session. Not sending it costs what that version
            // cost (the vote is waited for until the vote timeout).
            debug!("server {} speaks version {}: not sent {msg:?}", id.0, t.server().version);
            return Attempt::Dropped { back_off: false };
        }
        match t.round_trip(&req) {
            Ok(r) if matches!(r.body, ReplyBody::Ack) => Attempt::Sent,
            Ok(Reply {
                body: ReplyBody::Error { code: ErrorCode::NotLeader, message }, ..
            }) => {
                // The replica lost its leadership: it closes the session.
                debug!("server {}'s replica at {addr} no longer leads: {message}", id.0);
                *conn = None;
                Attempt::Move { next: self.next(not_leader_hint(&message)), back_off: false }
            }
            Ok(r) => {
                match &r.body {
                    ReplyBody::Error { code, message } => warn!(
                        "server {} refused a peer message from this server: {code}: {message}",
                        id.0
                    ),
                    other => {
                        warn!("server {} answered a peer message with {}", id.0, other.name())
                    }
                }
                *conn = None;
                Attempt::Dropped { back_off: false }
            }
            Err(e) => {
                debug!("lost the connection to server {}: {e}", id.0);
                *conn = None;
                Attempt::Move { next: self.next(None), back_off: false }
            }
        }
    }
}

/// Sends the messages for one peer until the queue's sender is gone (the server stopped).
///
/// A peer with one address: a message that cannot be sent is dropped (and a failed connect
/// leaves the peer alone for [`PEER_RETRY_AFTER`]). A replicated peer (several addresses):
/// a replica that answers `NotLeader`, refuses the connection or breaks it sends the message
/// on to the replica the answer names, else the next address, at most
/// [`PEER_HOPS_MAX`] connects (bounded by the number of addresses) per message, each move
/// counted ([`PeerCounters::moved`]); only when every hop failed is the message dropped and
/// the peer left alone for [`PEER_RETRY_AFTER`].
fn peer_thread(mut link: PeerLink, rx: Receiver<PeerMsg>) {
    let mut conn: Option<Box<dyn Transport>> = None;
    let mut down_until: Option<Instant> = None;
    let hops = link.addrs.len().min(PEER_HOPS_MAX);
    while let Ok(msg) = rx.recv() {
        if conn.is_none() && down_until.is_some_and(|t| Instant::now() < t) {
            link.counters.dropped.fetch_add(1, Relaxed);
            continue;
        }
        let mut outcome = Attempt::Dropped { back_off: false };
        for hop in 0..hops {
            outcome = link.attempt(&mut conn, msg);
            let Attempt::Move { next, .. } = outcome else { break };
            // The next message starts where this one went (or would have gone next).
            if link.addrs.len() > 1 {
                link.counters.moved.fetch_add(1, Relaxed);
                link.current = next;
            }
            if hop + 1 == hops {
                break;
            }
        }
        match outcome {
            Attempt::Sent => {
                link.counters.sent.fetch_add(1, Relaxed);
                down_until = None;
            }
            Attempt::Dropped { back_off } | Attempt::Move { back_off, .. } => {
                if back_off {
                    down_until = Some(Instant::now() + PEER_RETRY_AFTER);
                }
                link.counters.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}
