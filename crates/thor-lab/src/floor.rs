//! The loopback floor: what a minimal blocking request/reply costs on this machine.
//!
//! Issue 16 asks that a fetch cost what the network costs and no more. "The network" on one
//! machine is the kernel's loopback path, and its cost is measured here, in the same run as
//! thor's fetches, so that the ratio of the two holds up under whatever else the machine is
//! doing at the time. The measurement is the least a fetch could do:
//!
//! ```text
//!   client thread                                  server thread
//!   write 16-byte request  ───────────────────▶    read 16 bytes
//!     [seq u64 LE | reply_len u32 LE | 0 u32]      write reply_len bytes
//!   read reply_len bytes   ◀───────────────────      [seq u64 LE | filler (i as u8) ...]
//!   check the seq; time the round trip
//! ```
//!
//! one connection per client, blocking reads and writes on plain threads (no runtime, no
//! framing, no checksum), buffers allocated once, each client and its server either left to the
//! scheduler or pinned to one CPU ([`FloorConfig::pin`]), over loopback TCP with `TCP_NODELAY` on both
//! ends and over a Unix-domain stream socket (`socketpair`, the same kernel path as a named
//! socket without the file). Round trips after a warm-up go into a
//! [`LatencyHistogram`], the instrument the client uses for its own fetches, so that the two
//! percentiles are read the same way.
//!
//! It lives in thor-cli, not thor-net, because it is a measuring instrument for experiment
//! commands: it shares no code with thor's protocol, and the product crates should not carry it.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde::Serialize;
use thor_client::LatencyHistogram;

/// Bytes of a request: a sequence number, the reply's length and padding, about the size of
/// a fetch request's body.
pub const REQUEST_BYTES: usize = 16;

/// Smallest reply: the sequence number it echoes.
pub const REPLY_BYTES_MIN: usize = 8;

/// Largest reply a server sends (1 MiB, far above a page): what keeps a malformed request from
/// making the server allocate or write without bound.
pub const REPLY_BYTES_MAX: usize = 1 << 20;

/// Most clients of one measurement (each is two threads; more would measure the scheduler).
pub const CLIENTS_MAX: usize = 64;

/// How long either end waits for the other before giving up with an error, instead of hanging
/// on a peer that stopped answering.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Which socket the ping-pong runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Socket {
    /// Loopback TCP (127.0.0.1) with `TCP_NODELAY`.
    Tcp,
    /// A Unix-domain stream socket pair.
    Unix,
}

impl Socket {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Socket::Tcp => "tcp",
            Socket::Unix => "unix",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct FloorConfig {
    /// The socket.
    pub socket: Socket,
    /// Bytes of each reply (a page: 8 KiB).
    pub reply_bytes: usize,
    /// Timed round trips per client.
    pub round_trips: u32,
    /// Round trips per client before timing (connection buffers, caches, CPU frequency).
    pub warmup: u32,
    /// Clients, each a connection with its own server thread, running at once.
    pub clients: usize,
    /// Pin each client and its server thread to one CPU (client `i` to the `i`-th CPU the
    /// process may use). Unpinned, the scheduler usually puts the two ends on different CPUs,
    /// and every round trip pays two cross-CPU wake-ups (on this 2-vCPU machine about 99 us
    /// against 23 us pinned, 8 KiB over TCP): the pinned figure is the floor of the
    /// transfer itself, the unpinned one what the placement adds.
    pub pin: bool,
}

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FloorError {
    /// The settings are out of range: fix the arguments.
    #[error("bad floor settings: {0}")]
    BadConfig(String),
    /// A socket could not be created or configured (out of descriptors or ports?).
    #[error("setting up the {what}: {cause}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// The system's error.
        cause: std::io::Error,
    },
    /// The other end closed the connection in the middle of a message.
    #[error("the peer closed the connection while {during}")]
    PeerClosed {
        /// What this end was doing.
        during: &'static str,
    },
    /// A read or write failed (a timeout: the other end stopped answering).
    #[error("{during}: {cause}")]
    Io {
        /// What this end was doing.
        during: &'static str,
        /// The system's error.
        cause: std::io::Error,
    },
    /// A reply did not carry the request's sequence number: the ends are out of step.
    #[error("reply to request {expected} carried sequence number {got}")]
    OutOfStep {
        /// The request's.
        expected: u64,
        /// The reply's.
        got: u64,
    },
    /// A request asked for a reply outside the server's bounds.
    #[error("a request asked for a reply of {0} bytes (at most {REPLY_BYTES_MAX})")]
    BadRequest(u64),
    /// A measuring thread panicked (a bug).
    #[error("a ping-pong thread panicked")]
    Panicked,
}

fn io(during: &'static str) -> impl Fn(std::io::Error) -> FloorError {
    move |source| match source.kind() {
        ErrorKind::UnexpectedEof => FloorError::PeerClosed { during },
        _ => FloorError::Io { during, cause: source },
    }
}

/// What one measurement found.
#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    /// The socket.
    pub socket: Socket,
    /// Bytes of each reply.
    pub reply_bytes: usize,
    /// Clients at once.
    pub clients: usize,
    /// Whether each client and its server shared a CPU ([`FloorConfig::pin`]).
    pub pinned: bool,
    /// Round trips timed (all clients).
    pub round_trips: u64,
    /// Median round trip, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Mean, microseconds (exact: total over count).
    pub mean_us: f64,
    /// Slowest, microseconds.
    pub max_us: f64,
}

/// The request of round trip `seq`.
fn request(seq: u64, reply_bytes: usize) -> [u8; REQUEST_BYTES] {
    let mut r = [0u8; REQUEST_BYTES];
    r[..8].copy_from_slice(&seq.to_le_bytes());
    r[8..12].copy_from_slice(&(reply_bytes as u32).to_le_bytes());
    r
}

/// The exact reply the server sends to request `seq` for `len` bytes: the sequence number, then
/// bytes `i as u8` (so that a reply shifted or truncated shows in its contents).
#[cfg(test)]
fn expected_reply(seq: u64, len: usize) -> Vec<u8> {
    let mut out = filler(len);
    out[..8].copy_from_slice(&seq.to_le_bytes());
    out
}

fn filler(len: usize) -> Vec<u8> {
    (0..len).map(|i| i as u8).collect()
}

/// Serves requests on `s` until the client closes between requests (a clean end); a close in
/// the middle of a request, or a request out of bounds, is an error.
pub fn serve<S: Read + Write>(mut s: S) -> Result<(), FloorError> {
    let mut reply = Vec::new();
    let mut req = [0u8; REQUEST_BYTES];
    loop {
        // The first byte alone, to tell a clean end (nothing more to read) from a torn request.
        match s.read(&mut req[..1]) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io("reading a request")(e)),
        }
        s.read_exact(&mut req[1..]).map_err(io("reading a request"))?;
        let len = u32::from_le_bytes(req[8..12].try_into().expect("4 bytes"));
        let len_bytes = len as usize;
        if !(REPLY_BYTES_MIN..=REPLY_BYTES_MAX).contains(&len_bytes) {
            return Err(FloorError::BadRequest(u64::from(len)));
        }
        if reply.len() != len_bytes {
            reply = filler(len_bytes);
        }
        reply[..8].copy_from_slice(&req[..8]);
        s.write_all(&reply).map_err(io("writing a reply"))?;
    }
}

/// One client's round trips on `s`: `warmup` untimed, then `round_trips` into the histogram.
fn client<S: Read + Write>(
    mut s: S,
    cfg: &FloorConfig,
    start: &std::sync::Barrier,
) -> Result<LatencyHistogram, FloorError> {
    let mut hist = LatencyHistogram::new();
    let mut reply = vec![0u8; cfg.reply_bytes];
    let mut one = |seq: u64| -> Result<(), FloorError> {
        s.write_all(&request(seq, cfg.reply_bytes)).map_err(io("writing a request"))?;
        s.read_exact(&mut reply).map_err(io("reading a reply"))?;
        let got = u64::from_le_bytes(reply[..8].try_into().expect("8 bytes"));
        if got != seq {
            return Err(FloorError::OutOfStep { expected: seq, got });
        }
        Ok(())
    };
    let mut seq = 0u64;
    for _ in 0..cfg.warmup {
        one(seq)?;
        seq += 1;
    }
    // All clients time together, so that with several the figure is of them all at once.
    start.wait();
    for _ in 0..cfg.round_trips {
        let t = Instant::now();
        one(seq)?;
        hist.record(t.elapsed());
        seq += 1;
    }
    Ok(hist)
}

/// A connected pair of sockets: (client end, server end).
trait Pair: Read + Write + Send + Sized {
    fn connected(listener: Option<&TcpListener>) -> Result<(Self, Self), FloorError>;
}

impl Pair for TcpStream {
    fn connected(listener: Option<&TcpListener>) -> Result<(Self, Self), FloorError> {
        let setup = |what| move |source| FloorError::Setup { what, cause: source };
        let l = listener.ok_or(FloorError::BadConfig("TCP needs a listener".into()))?;
        let addr = l.local_addr().map_err(setup("loopback listener"))?;
        let c = TcpStream::connect(addr).map_err(setup("loopback connection"))?;
        let (s, _) = l.accept().map_err(setup("loopback connection"))?;
        for end in [&c, &s] {
            // Without it, Nagle's algorithm holds back small writes: thor's transport sets it
            // too, and a floor without it would be no floor.
            end.set_nodelay(true).map_err(setup("TCP_NODELAY"))?;
            end.set_read_timeout(Some(IO_TIMEOUT)).map_err(setup("read timeout"))?;
            end.set_write_timeout(Some(IO_TIMEOUT)).map_err(setup("write timeout"))?;
        }
        Ok((c, s))
    }
}

impl Pair for UnixStream {
    fn connected(_: Option<&TcpListener>) -> Result<(Self, Self), FloorError> {
        let setup = |what| move |source| FloorError::Setup { what, cause: source };
        let (c, s) = UnixStream::pair().map_err(setup("Unix socket pair"))?;
        for end in [&c, &s] {
            end.set_read_timeout(Some(IO_TIMEOUT)).map_err(setup("read timeout"))?;
            end.set_write_timeout(Some(IO_TIMEOUT)).map_err(setup("write timeout"))?;
        }
        Ok((c, s))
    }
}

/// Measures the floor as `cfg` says.
pub fn measure(cfg: &FloorConfig) -> Result<FloorReport, FloorError> {
    if !(REPLY_BYTES_MIN..=REPLY_BYTES_MAX).contains(&cfg.reply_bytes) {
        return Err(FloorError::BadConfig(format!(
            "reply of {} bytes: {REPLY_BYTES_MIN} to {REPLY_BYTES_MAX}",
            cfg.reply_bytes
        )));
    }
    if cfg.round_trips == 0 || !(1..=CLIENTS_MAX).contains(&cfg.clients) {
        return Err(FloorError::BadConfig(format!(
            "{} round trips and {} clients: at least one, at most {CLIENTS_MAX} clients",
            cfg.round_trips, cfg.clients
        )));
    }
    let hist = match cfg.socket {
        Socket::Tcp => {
            let l = TcpListener::bind("127.0.0.1:0")
                .map_err(|source| FloorError::Setup { what: "loopback listener", cause: source })?;
            run::<TcpStream>(cfg, Some(&l))?
        }
        Socket::Unix => run::<UnixStream>(cfg, None)?,
    };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok(FloorReport {
        socket: cfg.socket,
        reply_bytes: cfg.reply_bytes,
        clients: cfg.clients,
        pinned: cfg.pin,
        round_trips: hist.count(),
        p50_us: us(hist.percentile(0.5)),
        p99_us: us(hist.percentile(0.99)),
        mean_us: us(hist.sum()) / hist.count().max(1) as f64,
        max_us: us(hist.max()),
    })
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, FloorError> {
    // SAFETY: `cpu_set_t` is plain data for which all zeroes is a valid (empty) set;
    // `sched_getaffinity` writes at most `size_of::<cpu_set_t>()` bytes into it, and `CPU_ISSET`
    // reads within it for indices below `CPU_SETSIZE`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            let source = std::io::Error::last_os_error();
            return Err(FloorError::Setup { what: "reading the allowed CPUs", cause: source });
        }
        let cpus: Vec<usize> =
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect();
        if cpus.is_empty() {
            return Err(FloorError::BadConfig("no CPU to pin to".into()));
        }
        Ok(cpus)
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> Result<(), FloorError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(FloorError::BadConfig(format!("CPU {cpu} is beyond the CPU set")));
    }
    // SAFETY: as in `allowed_cpus`; `CPU_SET` writes within the set since `cpu` is below
    // `CPU_SETSIZE`, and `sched_setaffinity` reads `size_of::<cpu_set_t>()` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let source = std::io::Error::last_os_error();
            return Err(FloorError::Setup { what: "pinning a thread to a CPU", cause: source });
        }
    }
    Ok(())
}

/// Connects the clients, runs each with its server thread, and merges their histograms.
fn run<S: Pair>(
    cfg: &FloorConfig,
    l: Option<&TcpListener>,
) -> Result<LatencyHistogram, FloorError> {
    let pairs = (0..cfg.clients).map(|_| S::connected(l)).collect::<Result<Vec<_>, _>>()?;
    let start = std::sync::Barrier::new(cfg.clients);
    let cpus = if cfg.pin { allowed_cpus()? } else { Vec::new() };
    let cpu = |i: usize| (!cpus.is_empty()).then(|| cpus[i % cpus.len()]);
    std::thread::scope(|scope| {
        let handles: Vec<_> = pairs
            .into_iter()
            .enumerate()
            .map(|(i, (c, s))| {
                let cpu = cpu(i);
                let server = scope.spawn(move || {
                    cpu.map_or(Ok(()), pin_to)?;
                    serve(s)
                });
                // The client's end is dropped when its thread ends, which ends its server.
                let start = &start;
                let client = scope.spawn(move || {
                    cpu.map_or(Ok(()), pin_to)?;
                    client(c, cfg, start)
                });
                (client, server)
            })
            .collect();
        let mut all = LatencyHistogram::new();
        let mut first_err = None;
        for (c, s) in handles {
            let c = c.join().map_err(|_| FloorError::Panicked).and_then(|r| r);
            let s = s.join().map_err(|_| FloorError::Panicked).and_then(|r| r);
            match (c, s) {
                (Ok(h), Ok(())) => all.merge(&h),
                (Err(e), _) | (_, Err(e)) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(all),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(socket: Socket, clients: usize) -> FloorConfig {
        FloorConfig { socket, reply_bytes: 8192, round_trips: 200, warmup: 10, clients, pin: false }
    }

    #[test]
    fn measures_both_sockets_with_one_and_several_clients() {
        for socket in [Socket::Tcp, Socket::Unix] {
            for (clients, pin) in [(1, false), (3, false), (1, true), (3, true)] {
                let r = measure(&FloorConfig { pin, ..cfg(socket, clients) }).unwrap();
                assert_eq!(r.round_trips, 200 * clients as u64);
                assert_eq!(r.pinned, pin);
                assert!(r.p50_us > 0.0 && r.p50_us <= r.p99_us && r.p99_us <= r.max_us, "{r:?}");
                assert!(r.mean_us.is_finite() && r.mean_us > 0.0);
            }
        }
    }

    #[test]
    fn the_echo_returns_exactly_the_bytes() {
        for socket in [Socket::Tcp, Socket::Unix] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let (mut c, s) = match socket {
                Socket::Tcp => {
                    let (c, s) = TcpStream::connected(Some(&l)).unwrap();
                    (Box::new(c) as Box<dyn ReadWrite>, Box::new(s) as Box<dyn ReadWrite>)
                }
                Socket::Unix => {
                    let (c, s) = UnixStream::connected(None).unwrap();
                    (Box::new(c) as Box<dyn ReadWrite>, Box::new(s) as Box<dyn ReadWrite>)
                }
            };
            let server = std::thread::spawn(move || serve(s));
            for (seq, len) in [(7u64, 8192usize), (8, 8), (u64::MAX, 100), (9, 8192)] {
                c.write_all(&request(seq, len)).unwrap();
                let mut got = vec![0u8; len];
                c.read_exact(&mut got).unwrap();
                assert_eq!(got, expected_reply(seq, len), "{socket:?} seq {seq}");
            }
            drop(c);
            server.join().unwrap().expect("a close between requests is a clean end");
        }
    }

    trait ReadWrite: Read + Write + Send {}
    impl<T: Read + Write + Send> ReadWrite for T {}

    #[test]
    fn a_peer_that_closes_is_a_typed_error() {
        // A server that closes at once: the client learns it from its read, no panic.
        let (c, s) = UnixStream::pair().unwrap();
        drop(s);
        let start = std::sync::Barrier::new(1);
        match client(c, &cfg(Socket::Unix, 1), &start) {
            Err(FloorError::PeerClosed { .. } | FloorError::Io { .. }) => {}
            other => panic!("{other:?}"),
        }
        // A client that closes in the middle of a request.
        let (mut c, s) = UnixStream::pair().unwrap();
        c.write_all(&request(1, 8192)[..5]).unwrap();
        drop(c);
        assert!(matches!(serve(s), Err(FloorError::PeerClosed { .. })));
        // A client that closes before any request: a clean end.
        let (c, s) = UnixStream::pair().unwrap();
        drop(c);
        assert!(serve(s).is_ok());
    }

    #[test]
    fn out_of_bounds_requests_and_settings_are_refused() {
        let (mut c, s) = UnixStream::pair().unwrap();
        c.write_all(&request(1, REPLY_BYTES_MAX + 1)).unwrap();
        assert!(matches!(serve(s), Err(FloorError::BadRequest(_))));
        let (mut c, s) = UnixStream::pair().unwrap();
        c.write_all(&request(1, 3)).unwrap();
        assert!(matches!(serve(s), Err(FloorError::BadRequest(3))));
        for bad in [
            FloorConfig { reply_bytes: 4, ..cfg(Socket::Tcp, 1) },
            FloorConfig { reply_bytes: REPLY_BYTES_MAX + 1, ..cfg(Socket::Tcp, 1) },
            FloorConfig { round_trips: 0, ..cfg(Socket::Unix, 1) },
            FloorConfig { clients: 0, ..cfg(Socket::Unix, 1) },
            FloorConfig { clients: CLIENTS_MAX + 1, ..cfg(Socket::Unix, 1) },
        ] {
            assert!(matches!(measure(&bad), Err(FloorError::BadConfig(_))), "{bad:?}");
        }
    }
}
