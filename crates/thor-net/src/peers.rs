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
use thor_wire::{PeerMsg, ReplyBody, Request, RequestBody, Transport, TransportError};
use tracing::{debug, warn};

use crate::client::{ClientConfig, TcpTransport, TlsTransport};
use crate::tls::TlsClient;

/// Messages queued per peer before new ones are dropped.
pub const PEER_QUEUE_MAX: usize = 4096;
/// How long a peer that refused a connection is left alone.
pub const PEER_RETRY_AFTER: Duration = Duration::from_millis(200);

/// Counters of the messages to peers.
#[derive(Debug, Default)]
pub struct PeerCounters {
    /// Messages delivered (acknowledged by the peer).
    pub sent: AtomicU64,
    /// Messages dropped (queue full, peer unreachable, connection broken, unknown peer).
    pub dropped: AtomicU64,
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
        let counters = Arc::new(PeerCounters::default());
        let token = Arc::new(Mutex::new(config.token.clone()));
        let mut queues = HashMap::new();
        for (&id, &addr) in addrs {
            let (tx, rx) = sync_channel(PEER_QUEUE_MAX);
            let cfg = ClientConfig { io_timeout: Some(Duration::from_secs(10)), ..config.clone() };
            let (c, t) = (counters.clone(), token.clone());
            let tls = tls.clone();
            std::thread::Builder::new()
                .name(format!("thor-peer-{}", id.0))
                .spawn(move || peer_thread(id, addr, cfg, t, tls, rx, c))?;
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

/// Sends the messages for one peer until the queue's sender is gone (the server stopped).
fn peer_thread(
    id: ServerId,
    addr: SocketAddr,
    mut cfg: ClientConfig,
    token: Arc<Mutex<Vec<u8>>>,
    tls: Option<TlsClient>,
    rx: Receiver<PeerMsg>,
    counters: Arc<PeerCounters>,
) {
    let connect = |cfg: &ClientConfig| -> Result<Box<dyn Transport>, TransportError> {
        match &tls {
            None => Ok(Box::new(TcpTransport::connect(addr, cfg)?)),
            Some(tls) => Ok(Box::new(TlsTransport::connect(&addr.to_string(), cfg, tls)?)),
        }
    };
    let mut conn: Option<Box<dyn Transport>> = None;
    let mut down_until: Option<Instant> = None;
    while let Ok(msg) = rx.recv() {
        if conn.is_none() {
            if down_until.is_some_and(|t| Instant::now() < t) {
                counters.dropped.fetch_add(1, Relaxed);
                continue;
            }
            cfg.token = token.lock().unwrap_or_else(PoisonError::into_inner).clone();
            match connect(&cfg) {
                Ok(t) => {
                    debug!("connected to server {} at {addr}", id.0);
                    conn = Some(t);
                    down_until = None;
                }
                Err(TransportError::Refused { code, message }) => {
                    // Not a network failure: the two servers' credentials disagree.
                    warn!(
                        "server {} at {addr} refused this server's peer credential: {code}: {message}",
                        id.0
                    );
                    down_until = Some(Instant::now() + PEER_RETRY_AFTER);
                    counters.dropped.fetch_add(1, Relaxed);
                    continue;
                }
                Err(e) => {
                    debug!("server {} at {addr} unreachable: {e}", id.0);
                    down_until = Some(Instant::now() + PEER_RETRY_AFTER);
                    counters.dropped.fetch_add(1, Relaxed);
                    continue;
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
            counters.dropped.fetch_add(1, Relaxed);
            continue;
        }
        match t.round_trip(&req) {
            Ok(r) if matches!(r.body, ReplyBody::Ack) => {
                counters.sent.fetch_add(1, Relaxed);
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
                counters.dropped.fetch_add(1, Relaxed);
                conn = None;
            }
            Err(e) => {
                debug!("lost the connection to server {}: {e}", id.0);
                counters.dropped.fetch_add(1, Relaxed);
                conn = None;
            }
        }
    }
}
