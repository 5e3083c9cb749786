//! The bank the load drivers share: accounts (or counters) as objects, reached from root slot 0
//! through chunks of references.
//!
//! Every write of an account stores a `version` never stored before (the writer's client number
//! and attempt number), so a history of what clients read and wrote can be checked for
//! serializability (`thor_history`): the version a read returns names the write it saw.

use anyhow::{Context, Result, bail};
use thor_client::{ClientError, CommitInfo, Ref, Session, View};

thor_client::class! {
    /// A bank account, or a shared counter.
    pub class Account("bench.Account") {
        balance: u64,
        /// The write that stored this state: `(client << 32) | attempt`, 0 for the opening.
        version: u64,
    }
}

thor_client::class! {
    /// Up to [`CHUNK`] accounts.
    pub class Accounts("bench.Accounts") {}
    var refs<Account>;
}

thor_client::class! {
    /// The chunks of accounts, from root slot 0.
    pub class Bank("bench.Bank") {}
    var refs<Accounts>;
}

/// The arguments every history-recording bank client takes (`thor bench transfer-client`
/// and `thor bench cluster-client`).
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// This client's number (0..2^31), unique among the clients of one history.
    #[arg(long)]
    pub client: u32,
    /// File to append the history to (JSON lines).
    #[arg(long)]
    pub history: std::path::PathBuf,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Stop as soon as this file exists (checked between transactions).
    #[arg(long)]
    pub stop_file: Option<std::path::PathBuf>,
    /// Create the bank with this many accounts first (at every server; there must be none).
    #[arg(long)]
    pub setup: Option<usize>,
    /// Each account's opening balance (with `--setup`).
    #[arg(long, default_value_t = 1_000)]
    pub opening: u64,
    /// How long to keep trying to reach a server before giving up.
    #[arg(long, default_value_t = 30.0)]
    pub reconnect_s: f64,
    /// The servers' token (as `thor server` was given it).
    #[arg(long, default_value = "")]
    pub token: String,
}

/// One line of a history: a transaction that reached its commit, with what it read and
/// wrote (`O` names an account: an oref, or a server and an oref).
#[derive(Debug, serde::Serialize)]
pub struct Record<'a, O> {
    pub id: u64,
    pub client: u32,
    pub outcome: &'a str,
    pub reads: &'a [(O, u64)],
    pub writes: &'a [(O, u64, u64)],
    /// When the transaction began and when its commit was answered: wall-clock microseconds
    /// since the Unix epoch (comparable across the processes of one machine; `thor bench
    /// cross-server` times commits and restarts with them).
    pub t0_us: u64,
    pub t1_us: u64,
}

/// Wall-clock microseconds since the Unix epoch (0 if the clock is before it).
pub fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl HistoryArgs {
    /// Whether the client should stop: `deadline` passed, or `--stop-file` exists.
    pub fn stopped(&self, deadline: std::time::Instant) -> bool {
        std::time::Instant::now() >= deadline || self.stop_file.as_ref().is_some_and(|f| f.exists())
    }
}

/// Whether an error means the connection is gone (make a new session).
pub fn lost(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Transport(_) | ClientError::Unexpected(_) | ClientError::NoLeader { .. }
    ) || matches!(e, ClientError::Server { code, .. } if *code == thor_wire::ErrorCode::SessionExpired)
}

/// What became of a transaction sent for commit, as a history line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged.
    Committed,
    /// Refused (a conflict): nothing of it is in the store.
    Aborted,
    /// The answer was lost: it may or may not have committed (the history checker decides
    /// from what later transactions read). The session is no longer trusted.
    Uncertain,
}

impl Outcome {
    /// The name a history line gives it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Aborted => "aborted",
            Outcome::Uncertain => "uncertain",
        }
    }
}

/// A history-recording client's file and counts: the part the transfer client (one server)
/// and the cluster client (two-phase commit across servers) share.
#[derive(Debug)]
pub struct Recorder {
    /// The history file, one JSON line per transaction that reached its commit.
    out: std::io::BufWriter<std::fs::File>,
    /// This client's number.
    client: u32,
    /// Transactions committed, aborted (before or at commit), and of unknown outcome.
    counts: [u64; 3],
    /// When the transaction being run began ([`Recorder::begin`]), wall-clock microseconds.
    began_us: u64,
}

impl Recorder {
    /// Opens (appends to) `--history` for client `--client`.
    pub fn open(h: &HistoryArgs) -> Result<Recorder> {
        if h.client >= 1 << 31 {
            bail!("--client must be below 2^31");
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&h.history)
            .with_context(|| format!("opening {}", h.history.display()))?;
        Ok(Recorder {
            out: std::io::BufWriter::new(file),
            client: h.client,
            counts: [0; 3],
            began_us: 0,
        })
    }

    /// A transaction begins (its history line's `t0_us`).
    pub fn begin(&mut self) {
        self.began_us = wall_us();
    }

    /// A transaction that aborted before it was sent for commit: counted, not recorded (nobody
    /// saw it).
    pub fn aborted_early(&mut self) {
        self.counts[1] += 1;
    }

    /// Classifies a commit's answer (counted); an error that is none of the three is returned.
    pub fn outcome<T>(&mut self, answer: Result<T, ClientError>) -> Result<Outcome> {
        let o = match answer {
            Ok(_) => Outcome::Committed,
            Err(e) if is_conflict(&e) => Outcome::Aborted,
            Err(e) if lost(&e) || matches!(e, ClientError::CommitUnknown(_)) => Outcome::Uncertain,
            Err(e) => return Err(e).context("commit"),
        };
        self.counts[o as usize] += 1;
        Ok(o)
    }

    /// Appends transaction `id`'s line to the history, flushed (a killed client loses nothing
    /// it answered).
    pub fn record<O: serde::Serialize>(
        &mut self,
        id: u64,
        outcome: Outcome,
        reads: &[(O, u64)],
        writes: &[(O, u64, u64)],
    ) -> Result<()> {
        use std::io::Write;
        let (t0_us, t1_us) = (self.began_us, wall_us());
        let r = Record {
            id,
            client: self.client,
            outcome: outcome.name(),
            reads,
            writes,
            t0_us,
            t1_us,
        };
        serde_json::to_writer(&mut self.out, &r)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok(())
    }

    /// Flushes the history and prints the counts on stderr, with `sessions` (what the client
    /// calls them: "session(s)", "cluster session(s)").
    pub fn finish(mut self, sessions: &str) -> Result<()> {
        use std::io::Write;
        self.out.flush()?;
        let [committed, aborted, uncertain] = self.counts;
        eprintln!(
            "client {}: {committed} committed, {aborted} aborted, {uncertain} uncertain, {sessions}",
            self.client
        );
        Ok(())
    }
}

/// What the transaction loop of a history-recording client ([`run_transfers`]) needs of its
/// connection: one server's session with its bank (`thor bench transfer-client`) or a cluster
/// with every server's (`thor bench cluster-client`).
pub trait Teller {
    /// An account as this client reaches it.
    type Acct: Copy;
    /// How the history names an account (an oref; a server and an oref).
    type Object: serde::Serialize;
    /// Draws the next transaction's two accounts, `from` then `to` (never the same one).
    fn pick(&self, rng: &mut thor_storage::SplitMix64) -> [Self::Acct; 2];
    /// Reads account `a` in the open transaction.
    fn get(&self, a: Self::Acct) -> Result<View<'_, Account>, ClientError>;
    /// The history's name of `a`.
    fn object(&self, a: Self::Acct) -> Self::Object;
    /// Commits the open transaction.
    fn commit(&self) -> Result<CommitInfo, ClientError>;
    /// Abandons the open transaction.
    fn abort(&self);
}

/// The transaction loop both history-recording clients run until `deadline` or the stop
/// file (see [`HistoryArgs::stopped`]): over a connection `connect` makes (`Ok(None)`: the
/// connection was lost while loading the bank, make another), transactions that read two
/// accounts and move an amount from the first to the second (seven in eight) or only read
/// them (an audit), each write storing a version unique to it ([`version_of`]). A transaction
/// that conflicts before its commit is aborted and counted, not recorded (nobody saw it);
/// every one sent for commit is recorded with its outcome. A lost connection, or a commit
/// whose outcome is uncertain, ends the connection and `connect` makes a new one. Returns how
/// many connections were made.
pub fn run_transfers<T: Teller>(
    h: &HistoryArgs,
    deadline: std::time::Instant,
    rec: &mut Recorder,
    rng: &mut thor_storage::SplitMix64,
    mut connect: impl FnMut() -> Result<Option<T>>,
) -> Result<u64> {
    let mut attempt = 0u32;
    let mut connections = 0u64;
    'connection: while !h.stopped(deadline) {
        let conn = connect()?;
        connections += 1;
        let Some(t) = conn else { continue };
        loop {
            if h.stopped(deadline) {
                break 'connection;
            }
            attempt = attempt.checked_add(1).context("attempt numbers ran out")?;
            rec.begin();
            let id = u64::from(h.client) << 32 | u64::from(attempt);
            let pair = t.pick(rng);
            let audit = rng.below(8) == 0;
            let want = 1 + rng.below(100);
            let version = version_of(h.client, attempt);
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            let before_commit =
                transfer(&t, pair, (!audit).then_some(want), version, &mut reads, &mut writes);
            if let Err(e) = before_commit {
                // Not sent for commit: nobody saw it, nothing to record. A conflict here is an
                // invalidation of something it read; the next attempt reads afresh.
                t.abort();
                if lost(&e) {
                    continue 'connection;
                }
                if is_conflict(&e) {
                    rec.aborted_early();
                    continue;
                }
                return Err(e).context("transfer");
            }
            // An abort at commit leaves nothing to undo.
            let outcome = rec.outcome(t.commit())?;
            rec.record(id, outcome, &reads, &writes)?;
            if outcome == Outcome::Uncertain {
                continue 'connection;
            }
        }
    }
    Ok(connections)
}

/// Reads both accounts and, for a transfer, moves up to `want` from the first to the second,
/// writing `version` into both; notes what it read and wrote.
fn transfer<T: Teller>(
    t: &T,
    pair: [T::Acct; 2],
    want: Option<u64>,
    version: u64,
    reads: &mut Vec<(T::Object, u64)>,
    writes: &mut Vec<(T::Object, u64, u64)>,
) -> Result<(), ClientError> {
    let a = t.get(pair[0])?;
    let b = t.get(pair[1])?;
    for (acct, v) in pair.iter().zip([&a, &b]) {
        reads.push((t.object(*acct), v.get(Account::version)));
    }
    let Some(want) = want else { return Ok(()) };
    let amount = want.min(a.get(Account::balance));
    let (to_a, to_b) = (a.get(Account::balance) - amount, b.get(Account::balance) + amount);
    a.set(Account::balance, to_a)?;
    b.set(Account::balance, to_b)?;
    a.set(Account::version, version)?;
    b.set(Account::version, version)?;
    writes.push((t.object(pair[0]), version, to_a));
    writes.push((t.object(pair[1]), version, to_b));
    Ok(())
}

/// Accounts per chunk object (4 KiB of references: fits any page size).
const CHUNK: usize = 1000;

/// The version a write by `client`'s attempt `attempt` stores: unique per write, never 0.
pub fn version_of(client: u32, attempt: u32) -> u64 {
    (u64::from(client) + 1) << 32 | u64::from(attempt)
}

/// Creates `n` accounts holding `opening` each, and the directory to them, in one
/// transaction; returns the accounts.
pub fn open_bank(s: &Session, n: usize, opening: u64) -> Result<Vec<Ref<Account>>> {
    let chunks = n.div_ceil(CHUNK);
    let bank = s.create::<Bank>(chunks)?;
    let mut accounts = Vec::with_capacity(n);
    for c in 0..chunks {
        let len = CHUNK.min(n - c * CHUNK);
        let chunk = s.create::<Accounts>(len)?;
        for i in 0..len {
            let a = s.create_fixed::<Account>()?;
            a.set(Account::balance, opening)?;
            chunk.set_var_ref(i, a.as_ref())?;
            accounts.push(a.as_ref());
        }
        bank.set_var_ref(c, chunk.as_ref())?;
    }
    let bank = bank.as_ref();
    s.set_root(0, bank)?;
    s.commit().context("committing the accounts")?;
    // References made in the creating transaction name it; after the commit, their objects'
    // stored names.
    accounts.iter().map(|a| Ok(s.canonical(*a)?)).collect()
}

/// Reads the directory of accounts in a session (one read-only transaction).
pub fn load_bank(s: &Session) -> Result<Vec<Ref<Account>>, ClientError> {
    let bank = s.get(s.root::<Bank>(0)?)?;
    let mut out = Vec::new();
    for c in 0..bank.var_len() {
        let chunk = s.get(bank.var_ref(c))?;
        for i in 0..chunk.var_len() {
            out.push(chunk.var_ref(i));
        }
    }
    drop(bank);
    s.commit()?;
    Ok(out)
}

/// Every account's `(balance, version)`, read in one transaction.
pub fn read_all(s: &Session, accounts: &[Ref<Account>]) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::with_capacity(accounts.len());
    for a in accounts {
        let v = s.get(*a)?;
        out.push((v.get(Account::balance), v.get(Account::version)));
    }
    s.commit()?;
    Ok(out)
}

/// Loads the bank and checks it has `n` accounts.
pub fn load_bank_of(s: &Session, n: usize) -> Result<Vec<Ref<Account>>> {
    let out = load_bank(s)?;
    if out.len() != n {
        bail!("the bank has {} accounts, expected {n}", out.len());
    }
    Ok(out)
}

/// Whether a failed attempt is a concurrency-control conflict (abort and retry it) rather than
/// an error.
pub fn is_conflict(e: &ClientError) -> bool {
    e.is_conflict()
}
