//! Sessions that carry on by themselves against a real `thor server` process that is
//! SIGKILLed and restarted twenty times and SIGSTOPped five times (issue 38).
//!
//! Client threads in this process run bank transfers through `thor::connect_with` sessions.
//! None of them reconnects by hand: a transfer is `Session::run`, which runs a transaction
//! again after the session reported it aborted by a broken connection. Each transfer also
//! counts itself in its client's ledger object, in the same transaction, so the audit can tell
//! that no acknowledged commit is lost: after the last restart, the money is conserved and
//! each ledger holds at least the transfers its client saw acknowledged (and at most those
//! plus the ones whose outcome nobody could tell).
//!
//! It prints the figures of the issue's closing note: how long a client waited for its next
//! commit after each kill or stop, the time from a restarted server listening to the first
//! commit of a reconnected session, and the share of cached objects the sessions kept across
//! reconnects. Run it alone to see them:
//!
//! ```text
//! cargo test -p thor-cli --test reconnect_kill -- --nocapture
//! ```

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, start_at};
use thor::{ClientError, Ref, Refs, Session, SessionConfig};

thor::class! {
    /// An account.
    pub class Account("kill.Account") { balance: u64 }
}

thor::class! {
    /// One client's count of its acknowledged transfers.
    pub class Ledger("kill.Ledger") { transfers: u64 }
}

const CLIENTS: usize = 6;
const ACCOUNTS: usize = 16;
const OPENING: u64 = 1_000;
const KILLS: usize = 20;
const STOPS: usize = 5;
/// How long a SIGSTOP lasts: longer than the clients' request and commit timeouts, so every
/// stop breaks their connections.
const STOP_FOR: Duration = Duration::from_millis(1_500);
/// A safety net: the test fails instead of hanging (never a timing assertion).
const SAFETY: Duration = Duration::from_secs(120);

fn config() -> SessionConfig {
    SessionConfig {
        cache_bytes: 4 << 20,
        refresh_after: None,
        connect_timeout: Duration::from_millis(500),
        request_timeout: Some(Duration::from_secs(1)),
        commit_timeout: Some(Duration::from_secs(1)),
        reconnect: thor::ReconnectConfig {
            give_up_after: Duration::from_secs(30),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(200),
        },
        run_attempts_max: 50,
        ..SessionConfig::default()
    }
}

/// A deterministic pause between events: 150 to 450 ms, so some land mid-commit.
fn pause(i: usize) -> Duration {
    Duration::from_millis(150 + (i as u64 * 7919 % 301))
}

/// What one client thread saw.
#[derive(Debug, Default)]
struct Seen {
    /// When each acknowledged transfer was acknowledged.
    acked: Vec<Instant>,
    /// Transfers whose commit outcome nobody could tell.
    unknown: u64,
    /// Transfers given up after `run`'s attempts, or a failed reconnect.
    failed: u64,
    /// Why, for the first few.
    reasons: Vec<String>,
    /// The session's reconnect counters at the end.
    stats: thor::ReconnectStats,
}

fn setup(addr: SocketAddr) {
    let s = thor::connect_with(addr, "", config()).unwrap();
    s.run(|s| {
        let accounts = s.create::<Refs<Account>>(ACCOUNTS)?;
        for i in 0..ACCOUNTS {
            let a = s.create_fixed::<Account>()?;
            a.set(Account::balance, OPENING)?;
            accounts.set_var_ref(i, a.as_ref())?;
        }
        s.set_root(0, accounts.as_ref())?;
        let ledgers = s.create::<Refs<Ledger>>(CLIENTS)?;
        for i in 0..CLIENTS {
            ledgers.set_var_ref(i, s.create_fixed::<Ledger>()?.as_ref())?;
        }
        s.set_root(1, ledgers.as_ref())
    })
    .unwrap();
}

/// Client `id`: transfers until `stop`, each through `Session::run`; notes in `progress` when
/// it last committed (microseconds after `start`).
fn client(
    addr: SocketAddr,
    id: usize,
    stop: Arc<AtomicBool>,
    progress: Arc<Vec<AtomicU64>>,
    start: Instant,
) -> Seen {
    let s = thor::connect_with(addr, "", config()).unwrap();
    let (accounts, ledger) = s
        .run::<_, thor_client::ClientError>(|s| {
            let list = s.get(s.root::<Refs<Account>>(0)?)?;
            let accounts: Vec<Ref<Account>> = (0..ACCOUNTS).map(|i| list.var_ref(i)).collect();
            Ok((accounts, s.get(s.root::<Refs<Ledger>>(1)?)?.var_ref(id)))
        })
        .unwrap();
    let mut seen = Seen::default();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (id as u64) << 17;
    while !stop.load(Ordering::Relaxed) {
        let from = next(&mut rng) as usize % ACCOUNTS;
        let to = (from + 1 + next(&mut rng) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
        let amount = 1 + next(&mut rng) % 10;
        match transfer(&s, accounts[from], accounts[to], ledger, amount) {
            Ok(()) => {
                let now = Instant::now();
                seen.acked.push(now);
                progress[id].store((now - start).as_micros() as u64, Ordering::Relaxed);
            }
            Err(ClientError::CommitUnknown(_)) => seen.unknown += 1,
            Err(e) => {
                seen.failed += 1;
                if seen.reasons.len() < 3 {
                    seen.reasons.push(e.to_string());
                }
            }
        }
    }
    seen.stats = s.reconnect_stats();
    seen
}

fn transfer(
    s: &Session,
    from: Ref<Account>,
    to: Ref<Account>,
    ledger: Ref<Ledger>,
    amount: u64,
) -> Result<(), ClientError> {
    s.run(|s| {
        let a = s.get(from)?;
        let moved = amount.min(a.get(Account::balance));
        a.set(Account::balance, a.get(Account::balance) - moved)?;
        drop(a);
        let b = s.get(to)?;
        b.set(Account::balance, b.get(Account::balance) + moved)?;
        drop(b);
        let l = s.get(ledger)?;
        l.set(Ledger::transfers, l.get(Ledger::transfers) + 1)
    })
}

fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").arg(sig).arg(pid.to_string()).status().unwrap();
    assert!(ok.success(), "kill {sig} {pid}");
}

/// The median and the largest of `v` (sorted in place).
fn median_max(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    if v.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    (v[v.len() / 2], v[v.len() - 1])
}

#[test]
fn sessions_carry_on_across_server_kills_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut server = start_at(&dir, addr);
    setup(addr);

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..CLIENTS).map(|_| AtomicU64::new(0)).collect());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::spawn(move || client(addr, id, stop, progress, start))
        })
        .collect();

    // Every event: when the server stopped answering, and when it answered again.
    let events = Arc::new(Mutex::new(Vec::<(Instant, Instant, &'static str)>::new()));
    for i in 0..KILLS + STOPS {
        std::thread::sleep(pause(i));
        // The stops are spread among the kills: every fifth event.
        if i % 5 == 4 {
            let pid = server.0.id();
            let down = Instant::now();
            signal(pid, "-STOP");
            std::thread::sleep(STOP_FOR);
            signal(pid, "-CONT");
            events.lock().unwrap().push((down, Instant::now(), "stop"));
        } else {
            let down = Instant::now();
            server.kill();
            server = start_at(&dir, addr);
            events.lock().unwrap().push((down, Instant::now(), "kill"));
        }
    }
    // Every client commits again after the last event (waited for, bounded), then they stop.
    let last = events.lock().unwrap().last().unwrap().1;
    let last_us = (last - start).as_micros() as u64;
    let deadline = Instant::now() + SAFETY;
    while progress.iter().any(|p| p.load(Ordering::Relaxed) <= last_us) {
        assert!(Instant::now() < deadline, "a client never committed after the last event");
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let seen: Vec<Seen> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    for (i, s) in seen.iter().enumerate() {
        assert!(
            s.acked.last().is_some_and(|t| *t > last),
            "client {i} never committed after the last event: {s:?}"
        );
    }

    // The audit, after one more crash: what recovery makes of the last log.
    server.kill();
    let _server = start_at(&dir, addr);
    let s = thor::connect_with(addr, "", config()).unwrap();
    let (total, ledgers) = s
        .run::<_, thor_client::ClientError>(|s| {
            let list = s.get(s.root::<Refs<Account>>(0)?)?;
            let mut total = 0;
            for i in 0..ACCOUNTS {
                total += s.get(list.var_ref(i))?.get(Account::balance);
            }
            let l = s.get(s.root::<Refs<Ledger>>(1)?)?;
            let mut ledgers = Vec::new();
            for i in 0..CLIENTS {
                ledgers.push(s.get(l.var_ref(i))?.get(Ledger::transfers));
            }
            Ok((total, ledgers))
        })
        .unwrap();
    assert_eq!(total, OPENING * ACCOUNTS as u64, "money was created or lost");
    for (i, (s, &stored)) in seen.iter().zip(&ledgers).enumerate() {
        let acked = s.acked.len() as u64;
        assert!(
            acked <= stored && stored <= acked + s.unknown,
            "client {i}: {acked} transfers acknowledged, {} unknown, {stored} in the database",
            s.unknown
        );
    }

    // The figures.
    let events = events.lock().unwrap();
    let mut waited = Vec::new();
    let mut first_commit = Vec::new();
    for (down, up, _) in events.iter() {
        let mut first: Option<Instant> = None;
        for s in &seen {
            if let Some(t) = s.acked.iter().find(|t| **t > *down) {
                waited.push(*t - *down);
                if *t > *up {
                    first = Some(first.map_or(*t, |f| f.min(*t)));
                }
            }
        }
        if let Some(f) = first {
            first_commit.push(f - *up);
        }
    }
    let (w_med, w_max) = median_max(&mut waited);
    let (f_med, f_max) = median_max(&mut first_commit);
    let committed: usize = seen.iter().map(|s| s.acked.len()).sum();
    let unknown: u64 = seen.iter().map(|s| s.unknown).sum();
    let failed: u64 = seen.iter().map(|s| s.failed).sum();
    let st = |f: fn(&thor::ReconnectStats) -> u64| seen.iter().map(|s| f(&s.stats)).sum::<u64>();
    let (before, kept) = (st(|r| r.objects_before), st(|r| r.objects_kept));
    let reconnects = st(|r| r.reconnects);
    let outcomes = seen.iter().fold([0u64; 3], |mut a, s| {
        for (x, n) in a.iter_mut().zip(s.stats.outcomes) {
            *x += n;
        }
        a
    });
    eprintln!(
        "{KILLS} SIGKILLs and {STOPS} SIGSTOPs of {:?}, {CLIENTS} clients: {committed} transfers \
         acknowledged, {unknown} of unknown outcome, {failed} given up by `run` after its \
         attempts (contention); {reconnects} reconnects \
         ({} caches kept, {} dropped); lost commits learned: {} committed, {} not committed, {} \
         unknown",
        STOP_FOR,
        st(|r| r.caches_kept),
        st(|r| r.caches_dropped),
        outcomes[0],
        outcomes[1],
        outcomes[2],
    );
    eprintln!(
        "a client's wait from a kill or stop to its next commit: median {w_med:?}, max {w_max:?} \
         ({} waits)",
        waited.len()
    );
    eprintln!(
        "from the server answering again to the first commit of a reconnected session: median \
         {f_med:?}, max {f_max:?} ({} events)",
        first_commit.len()
    );
    eprintln!(
        "cached objects kept across reconnects: {kept} of {before} ({:.1}%)",
        if before == 0 { 0.0 } else { 100.0 * kept as f64 / before as f64 }
    );
    for s in seen.iter().filter(|s| !s.reasons.is_empty()) {
        eprintln!("given up, for example: {:?}", s.reasons);
    }
    assert!(committed >= 100, "too little work to mean anything: {committed}");
    assert!(reconnects >= KILLS as u64, "the sessions reconnected {reconnects} times");
}
