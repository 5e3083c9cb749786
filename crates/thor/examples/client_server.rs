//! A complete client-server program: a thor server on loopback TCP, and two clients that
//! update shared counters at the same time.
//!
//! ```sh
//! cargo run -p thor --example client_server
//! ```
//!
//! The server runs in this process so that the example stands alone; it is what
//! `thor server --dir DIR --listen 127.0.0.1:0 --create` runs, with a token. The clients are
//! what a separate program would do: `thor::connect(addr, token)`, then transactions. Each
//! client increments random counters; when both change the same counter at once, concurrency
//! control refuses one of the transactions and `Session::run` runs it again. At the end every
//! increment is in the counters exactly once.

use std::sync::Arc;
use std::time::Instant;

use thor::{ClientError, Ref, Refs, Session, SessionConfig};

thor::class! {
    /// A named counter.
    pub class Counter("example.Counter") { value: u64 }
    var bytes;
}

/// The counters' collection lives in this root slot.
const COUNTERS_SLOT: usize = 0;
/// Counters shared by the clients: few, so that the clients collide.
const COUNTERS: usize = 8;
/// Clients, each a thread with its own connection.
const CLIENTS: u64 = 2;
/// Transactions each client runs.
const TRANSACTIONS: u64 = 500;
/// The secret the server expects, and the clients present.
const TOKEN: &str = "example-secret";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run()
}

/// The program: a server in a temporary directory, then its clients.
pub fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The server side (a program that only connects needs none of this).
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let addr = server.addr();
    println!("server listening on {addr} (database {})", dir.path().display());

    // A first client creates the counters.
    let setup = thor::connect(addr, TOKEN)?;
    setup.run(|s| {
        let counters = s.create::<Refs<Counter>>(COUNTERS)?;
        for i in 0..COUNTERS {
            let name = format!("counter-{i}");
            let c = s.create::<Counter>(name.len())?;
            c.set_var_bytes(name.as_bytes())?;
            counters.set_var_ref(i, c.as_ref())?;
        }
        s.set_root(COUNTERS_SLOT, counters.as_ref())
    })?;
    setup.close()?;

    // Two clients increment counters concurrently, each from its own thread and connection.
    let started = Instant::now();
    let clients: Vec<_> =
        (0..CLIENTS).map(|id| std::thread::spawn(move || client(addr, id))).collect();
    for (id, c) in clients.into_iter().enumerate() {
        let (commits, retries) = c.join().expect("a client panicked")?;
        println!(
            "client {id}: {commits} transactions committed, {retries} retried after a conflict"
        );
    }
    println!("both clients done in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);

    // A new client reads the result: every increment counted once.
    let audit = thor::connect(addr, TOKEN)?;
    let values = audit.run(|s| {
        let counters = s.get(s.root::<Refs<Counter>>(COUNTERS_SLOT)?)?;
        (0..counters.var_len())
            .map(|i| {
                let c = s.get(counters.var_ref(i))?;
                Ok((String::from_utf8_lossy(&c.var_bytes()).into_owned(), c.get(Counter::value)))
            })
            .collect::<Result<Vec<_>, ClientError>>()
    })?;
    for (name, value) in &values {
        println!("  {name}: {value}");
    }
    let total: u64 = values.iter().map(|(_, v)| v).sum();
    println!("  total: {total} (expected {})", CLIENTS * TRANSACTIONS * 2);
    assert_eq!(total, CLIENTS * TRANSACTIONS * 2, "every increment counted once");
    let stats = audit.server_stats()?;
    println!(
        "server: {} commits, {} refused by concurrency control",
        stats.commits,
        stats.refused_stale
            + stats.refused_rule1
            + stats.refused_rule2a
            + stats.refused_rule2b
            + stats.refused_threshold
    );
    drop(audit);
    server.stop()?;
    println!("server stopped and checkpointed");
    Ok(())
}

/// One client: `TRANSACTIONS` transactions, each adding one to two random counters. Returns
/// (transactions committed, attempts retried).
fn client(addr: std::net::SocketAddr, id: u64) -> Result<(u64, u64), thor::Error> {
    // Two clients on eight counters collide now and then; give `run` room to retry.
    let cfg = SessionConfig { run_attempts_max: 100, ..SessionConfig::default() };
    let s = thor::connect_with(addr, TOKEN, cfg)?;
    let mut rng = (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for _ in 0..TRANSACTIONS {
        let (a, b) = (next(&mut rng) as usize % COUNTERS, next(&mut rng) as usize % COUNTERS);
        s.run::<_, thor::ClientError>(|s| {
            let counters = s.get(s.root::<Refs<Counter>>(COUNTERS_SLOT)?)?;
            for i in [a, b] {
                increment(s, counters.var_ref(i))?;
            }
            Ok(())
        })?;
    }
    let stats = s.stats();
    Ok((stats.commits, stats.retries))
}

/// Adds one to `counter`, in the caller's transaction.
fn increment(s: &Session, counter: Ref<Counter>) -> Result<(), ClientError> {
    let c = s.get(counter)?;
    c.set(Counter::value, c.get(Counter::value) + 1)
}

/// A xorshift step: the example's random numbers.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The server: an engine over the database directory, served over TCP by thor-net. This is
/// what `thor server` does; a program depends on these crates only to run a server itself.
struct Server {
    /// The engine, kept to close it once the network side has stopped.
    engine: Arc<thor_server::Engine>,
    /// The TCP server (a tokio runtime of its own).
    net: thor_net::Server,
}

impl Server {
    fn start(dir: &std::path::Path) -> Result<Server, Box<dyn std::error::Error>> {
        let disk = thor_storage::FileDisk::open_locked(dir, true, "client_server example")?;
        let opts = thor_server::EngineOptions {
            protocol: thor_server::ProtocolConfig {
                token: TOKEN.as_bytes().to_vec(),
                ..thor_server::ProtocolConfig::default()
            },
            ..thor_server::EngineOptions::default()
        };
        let engine = Arc::new(thor_server::Engine::create(Arc::new(disk), opts)?);
        let net = thor_net::Server::start("127.0.0.1:0", engine.clone(), Default::default())?;
        Ok(Server { engine, net })
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.net.local_addr()
    }

    /// Stops accepting, closes every connection, then closes the engine: installs everything
    /// and truncates the log, so that the next start replays nothing.
    fn stop(self) -> Result<(), Box<dyn std::error::Error>> {
        self.net.shutdown()?;
        match Arc::try_unwrap(self.engine) {
            Ok(engine) => Ok(engine.close()?),
            Err(_) => Err("the engine is still in use".into()),
        }
    }
}
