//! The simulated world: one server (the real core over a [`MemDisk`]), several clients, a
//! network, a clock, and faults, advanced one event at a time from a queue ordered by virtual
//! time and then by insertion.
//!
//! # The server
//!
//! The core's effects are performed as a real driver would, with latencies drawn from the seed:
//! an append goes into the log's buffer at once and a *log sync* event (one at a time, so
//! commits that arrive meanwhile share it: group commit) writes and fsyncs it and reports
//! [`Input::Durable`]; page reads, install rounds and checkpoints are *I/O* events. A tick
//! arrives every [`TICK_US`].
//!
//! # Faults
//!
//! - *Crash:* before any event, with the configured chance (while the run's crash budget
//!   lasts), the server process dies: its connections break, the [`MemDisk`] keeps only what
//!   its crash model allows (unsynced writes lost in any subset, torn at sector granularity),
//!   and after a delay the server recovers from the disk. An I/O event may also die halfway
//!   (the disk stops after a random number of operations) and take the server down with it,
//!   so crashes land inside log syncs, install rounds and checkpoints.
//! - *Lost message:* a message is lost with the configured chance; as over TCP, a lost message
//!   means a broken connection: both ends learn it, the server drops the session, the client
//!   reconnects (its commit in flight, if any, is *uncertain*: it may or may not have
//!   committed).
//!
//! Within one connection messages arrive in order (TCP); across connections they interleave
//! freely.
//!
//! # The clients
//!
//! Each client speaks the wire protocol directly (connect, `Hello`, then fetches and commits),
//! every object it writes carrying the client's number and the transaction's, so that the
//! [`Checker`] can tell which commit wrote what, and so that every write is a unique version.
//! Most transactions are *read-modify-write* under concurrency control: fetch the pages of 1 to
//! 3 cells, read their versions, commit writes of some of them (none: a read-only transaction)
//! with the cells as the read set. The others are blind: they write 0 to 3 cells and create 0
//! to 2, referencing other cells (existing ones, or created ones through tagged references), so
//! reference validation and oref allocation are exercised too. Clients acknowledge the
//! invalidations that arrive on replies; a commit refused by concurrency control is aborted.
//!
//! In two thirds of the seeds ([`SimConfig::real_clients`], drawn from a stream of its own)
//! one or two *real* clients run beside them: thor's own client protocol,
//! `thor_client::proto::ClientCore`, driven one message at a time (the `real` module). Their
//! transactions join the same history and the same liveness check, so a bug in the client's
//! protocol (a stale read that commits, an acknowledgement sent too early, a commit in doubt
//! ended wrongly after a resume) fails a run as a server's would.
//!
//! # Liveness
//!
//! When every client has done its `txns_per_client` commits the faults stop (no more crashes,
//! lost messages or dying I/O); once the server has been up for [`SETTLED_QUIET_US`] (it must
//! be back within [`SETTLE_US_MAX`]) the *calm* begins: every client runs again until it has
//! [`crate::liveness::CALM_COMMITS`] acknowledged commits, and after every event the run checks
//! that no client's request has waited longer than five ticks for its answer and that no client
//! has gone ten ticks without a commit ([`CALM_BOUNDS`], [`crate::liveness`]). A commit stuck
//! behind an install round, a WPL checkpoint or a full MOB that nothing drains, or a client
//! refused again and again, fails the run like a safety violation. Over the 10,000 seeds of
//! `tests/cluster.rs` and the 500 per mode of `tests/page_modes.rs` the longest wait was 17 ms
//! and the longest a client went without a commit 45 ms (`thor sim cluster` prints both).
//! The calm's commits join the history and are judged with the rest.
//!
//! # Serializability
//!
//! Every transaction that reached its commit goes into a [`serial::History`] with what it read
//! (each cell and the version it saw) and wrote: committed ones with their LSN (at one server
//! the log order is CLOCC's timestamp order), refused ones as aborted, and those whose outcome
//! the client never learned decided by the recovered log. At the end, [`serial::check_with`]
//! must find the history conflict-serializable in LSN order, with no lost update and no read
//! of an uncommitted or aborted write, ending in the state the server recovered.
//!
//! # Prefetch
//!
//! In a third of the seeds ([`SimConfig::prefetch`], drawn from a stream of its own) clients
//! fetch with `Prefetch` (`thor_wire::prefetch`) and keep every page a reply brings, asked for
//! or prefetched, in a small page cache: a transaction reads the cells of a cached page without
//! fetching it. A client drops a page from its cache when an invalidation names one of its
//! objects (before it uses the reply's body) or to make room, and reports it as discarded on a
//! later request, but not while its open transaction has read a cell of it (the CLOCC rule).
//! So a prefetched page's copy is read by later transactions exactly as a fetched one is, and
//! the two checkers judge it: a prefetched page the server did not register for
//! invalidations would show as a stale read that committed (a cycle in the serializability
//! check), and every page of a `Pages` reply must show exactly what was durable when it was
//! composed.
//!
//! The first `ACCOUNTS` cells are a bank: a third of the read-modify-write transactions are
//! transfers between two of them, and blind writes never touch them. Replaying the committed
//! transactions in serial order ([`serial::check_conserved_total`]), the accounts' total must
//! be the same after every one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use bytes::Bytes;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Lsn, Oref, PageId, PageView, RawRef, ServerId, VarKind};
use thor_server::io;
use thor_server::{CommitIn, ConnId, CoreConfig, DirectOp, DirectResult, Effect, Input};
use thor_storage::{FaultPlan, MemDisk, SplitMix64};
use thor_wire::{
    Commit, CommitMode, Hello, PageCommit, PageRecords, Prefetch, PrefetchHint, Reply, ReplyBody,
    Request, RequestBody,
};

use crate::check::{CellLayout, Checker, Violation};
use crate::liveness::{Bounds, Progress};
use crate::pagemode::{self, PageClientConfig};
use crate::server::{self, EventQueue, Node, Process, io_violation};
use thor_history as serial;

mod real;
use real::RealClient;

/// Virtual microseconds between ticks of the server.
pub const TICK_US: u64 = 20_000;

/// Events a run may take before it is declared stuck.
const EVENTS_MAX: u64 = 400_000;

/// Bytes of a cell: header, `next` (a reference), writer, txn, serial.
const CELL_FIXED_BYTES: usize = 16;
const CELL_WRITER_AT: usize = 8;
const CELL_TXN_AT: usize = 12;
const CELL_SERIAL_AT: usize = 16;

/// What a run does. [`SimConfig::for_seed`] derives one from a seed.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed of every random choice.
    pub seed: u64,
    /// Simulated clients.
    pub clients: usize,
    /// Commits each client completes (acknowledged or uncertain) before it stops.
    pub txns_per_client: usize,
    /// Most server crashes in the run.
    pub crashes_max: usize,
    /// Chance per event of a server crash, in parts per million.
    pub crash_ppm: u64,
    /// Chance per I/O event that the disk dies halfway through it, in parts per million.
    pub io_death_ppm: u64,
    /// Chance per message that it is lost (and its connection broken), in parts per million.
    pub loss_ppm: u64,
    /// Bytes per page.
    pub page_size: usize,
    /// The MOB's budget (small, so that install rounds and waits happen).
    pub mob_bytes: usize,
    /// The page cache's budget (small, so that disk reads happen).
    pub page_cache_bytes: usize,
    /// Print every event to stderr.
    pub trace: bool,
    /// Backups taken of the live server at random times, each recovered and checked.
    pub backups: usize,
    /// The server's page cache places client reads and demotions as DEMOTE does
    /// (`thor_server::CacheMode::Exclusive`) instead of LRU.
    pub exclusive_page_cache: bool,
    /// Payload bytes of every cell: with more than a few hundred, the database spans several
    /// pages (the runs with an exclusive cache use that, so that demotions bring data).
    pub cell_payload: usize,
    /// Concurrency control's `reads_tracked_max`: small in a quarter of the seeds, so that
    /// transactions' reads raise the threshold instead of being recorded one by one.
    pub reads_tracked_max: usize,
    /// The server's commit mode; in a page mode every client commits with `PageCommit` (and
    /// `PageRecords` before it when its recovery buffer is full), see [`crate::pagemode`].
    pub commit_mode: CommitMode,
    /// The page-mode clients' recovery buffer (unused in `obj` mode).
    pub page_client: PageClientConfig,
    /// The server's WPL table bounds (used in `wpl` mode): small tables make commits wait for
    /// install rounds and checkpoints come every few commits.
    pub wpl: thor_recovery::WplConfig,
    /// Clients fetch with `Prefetch` and cache the pages they get (`obj` mode only, as
    /// thor-client); `None`: plain fetches, nothing cached.
    pub prefetch: Option<SimPrefetch>,
    /// Clients that run thor's own client protocol (`thor_client::proto::ClientCore`) beside
    /// the simulated ones (`obj` mode only: the core's page-mode commit path is `Session`'s).
    pub real_clients: usize,
}

/// The clients' prefetch in a run (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimPrefetch {
    /// Further pages each fetch asks for.
    pub extra: u16,
    /// How the server chooses them.
    pub hint: PrefetchHint,
    /// Pages each client's cache holds; the oldest leaves first.
    pub cache_pages: usize,
}

impl SimPrefetch {
    /// The prefetch of seed `seed`: in a third of the seeds, with settings drawn from a stream
    /// of its own, so that every other draw of the seed is what it was before prefetch.
    pub fn for_seed(seed: u64) -> Option<SimPrefetch> {
        let mut r = SplitMix64::new(seed ^ 0x9F3E_7C00_0000_0000);
        if r.below(3) != 0 {
            return None;
        }
        Some(SimPrefetch {
            extra: [1, 2, 8][r.below(3) as usize],
            hint: PrefetchHint::ALL[r.below(PrefetchHint::ALL.len() as u64) as usize],
            cache_pages: [1, 3, 16][r.below(3) as usize],
        })
    }
}

impl SimConfig {
    /// The configuration of seed `seed`: the number of clients, the amount of work and the
    /// fault rates vary with the seed, so that many seeds cover many shapes of run.
    pub fn for_seed(seed: u64) -> SimConfig {
        let mut r = SplitMix64::new(seed ^ 0x5EED_C0FF_EE00_0000);
        let mut cfg = SimConfig {
            seed,
            clients: 2 + r.below(4) as usize,
            txns_per_client: 10 + r.below(30) as usize,
            crashes_max: r.below(5) as usize,
            crash_ppm: [0, 1_000, 4_000, 10_000][r.below(4) as usize],
            io_death_ppm: [0, 50_000, 150_000][r.below(3) as usize],
            loss_ppm: [0, 5_000, 20_000][r.below(3) as usize],
            page_size: 4096,
            mob_bytes: [6 << 10, 16 << 10, 64 << 10][r.below(3) as usize],
            page_cache_bytes: [2, 4, 32][r.below(3) as usize] * 4096,
            trace: false,
            // Drawn last, so the draws above (and the runs of seeds recorded before backups
            // existed) stay as they were.
            backups: r.below(3) as usize,
            exclusive_page_cache: r.below(2) == 1,
            cell_payload: 0,
            reads_tracked_max: thor_server::limits::READS_TRACKED_MAX,
            commit_mode: CommitMode::Obj,
            page_client: PageClientConfig { buffer_pages: 1, block_bytes: 64, steal_pages: 0 },
            wpl: thor_server::WPL_CONFIG_DEFAULT,
            prefetch: None,
            real_clients: 0,
        };
        if cfg.exclusive_page_cache {
            // The database of a run is a few pages: a cache smaller than that makes clients'
            // demotions bring data, not only reorder pages the cache still holds. (Drawn after
            // everything else, so other seeds run as before.)
            cfg.page_cache_bytes = [1, 1, 2, 32][r.below(4) as usize] * 4096;
            cfg.cell_payload = EXCLUSIVE_CELL_PAYLOAD;
        }
        // Drawn last too.
        if r.below(4) == 0 {
            cfg.reads_tracked_max = 1 + r.below(4) as usize;
        }
        cfg.prefetch = SimPrefetch::for_seed(seed);
        // A stream of its own, so the draws above stay as they were.
        cfg.real_clients = SplitMix64::new(seed ^ 0x4EA1_0000_0000_0000).below(3) as usize;
        cfg
    }

    /// The configuration of seed `seed` with the server in `mode`: [`SimConfig::for_seed`]'s,
    /// plus, in a page mode, the clients' recovery buffer and the cells' size drawn from a
    /// stream of their own (so the draws above are the same in every mode). Small buffers and
    /// large cells spread transactions over several pages and make records go before the
    /// commit.
    pub fn for_seed_in(seed: u64, mode: CommitMode) -> SimConfig {
        let mut cfg = SimConfig::for_seed(seed);
        cfg.commit_mode = mode;
        if mode.is_page_based() {
            // thor-client prefetches only in `obj` mode, and its core commits only there.
            cfg.prefetch = None;
            cfg.real_clients = 0;
            let mut r = SplitMix64::new(seed ^ 0x9A6E_D0DE_0000_0000);
            cfg.page_client = PageClientConfig {
                buffer_pages: [1, 1, 2, 64][r.below(4) as usize],
                block_bytes: [8, 64, 512][r.below(3) as usize],
                steal_pages: 0,
            };
            if !cfg.exclusive_page_cache {
                cfg.cell_payload = [0, 900, 1800][r.below(3) as usize];
            }
            // A stream of its own, so the draws above stay as they were: in half the seeds
            // clients steal dirty pages before the commit.
            let mut r = SplitMix64::new(seed ^ 0x57EA_1000_0000_0000);
            cfg.page_client.steal_pages = [0, 0, 1, 2][r.below(4) as usize];
        }
        if mode == CommitMode::Wpl {
            // A stream of its own, so the draws above stay the same in every mode.
            let mut r = SplitMix64::new(seed ^ 0x3A1E_0000_0000_0000);
            cfg.wpl = thor_recovery::WplConfig {
                entries_max: [16, 64, 16_384][r.below(3) as usize],
                txns_max: [4, 64][r.below(2) as usize],
                commits_per_checkpoint: [2, 8, 1024][r.below(3) as usize],
            };
        }
        cfg
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// A hash of every event in order, of every message's contents and of every log record's
    /// bytes: equal for equal runs, in one process or two (nothing in it comes from random state).
    pub trace_hash: u64,
    /// Events processed.
    pub events: u64,
    /// Commits acknowledged to clients.
    pub acked: u64,
    /// Commits whose outcome their client never learned.
    pub uncertain: u64,
    /// Commits refused by concurrency control.
    pub refused: u64,
    /// Invalidations clients received.
    pub invalidations: u64,
    /// Committed transactions in the checked history.
    pub history_txns: u64,
    /// Server crashes (and recoveries).
    pub crashes: u64,
    /// Pages sent to clients (each checked).
    pub pages_checked: u64,
    /// Connections broken by lost messages.
    pub lost_connections: u64,
    /// Install rounds completed.
    pub install_rounds: u64,
    /// Backups taken of the live server, recovered and checked.
    pub backups: u64,
    /// Databases the offline checker judged: every one a crash left, and every backup.
    pub offline_checks: u64,
    /// Demoted pages' bytes the clients sent.
    pub demotions_sent: u64,
    /// Of those, sent with a byte changed (the server must refuse them all).
    pub demotions_forged: u64,
    /// Page-based commits sent (page modes).
    pub page_commits: u64,
    /// Page records sent before their commit (in `PageRecords`, page modes).
    pub records_early: u64,
    /// Dirty pages stolen before their commit, sent whole in `PageRecords` (ESM, WPL).
    pub pages_stolen: u64,
    /// WPL: committed copies recovery put back into the MOB (not yet home at the crash).
    pub wpl_restored: u64,
    /// WPL: copies that left the table because their page went home, before each crash or
    /// the end.
    pub wpl_installed: u64,
    /// WPL: commits refused by the page rule.
    pub wpl_page_rule_refusals: u64,
    /// Pages that came by prefetch (beyond the asked ones), each checked.
    pub pages_prefetched: u64,
    /// Pages a transaction read its cells from without fetching them (a client's cached copy,
    /// fetched or prefetched by an earlier request).
    pub cached_reads: u64,
    /// Pages clients reported discarded.
    pub discards: u64,
    /// How long the server took to settle once the faults stopped (virtual microseconds
    /// from the faults' end to the calm's start, see [`crate::liveness`]).
    pub settle_us: u64,
    /// In the calm: the longest a client's request waited for its answer.
    pub calm_wait_us_max: u64,
    /// In the calm: the longest a client went without an acknowledged commit.
    pub calm_commit_us_max: u64,
    /// Commits of real clients acknowledged (by the server or, read-only, at the client).
    pub real_commits: u64,
    /// Of those, read-only transactions committed at the client without a message.
    pub real_read_only_here: u64,
    /// Real clients' transactions doomed by an invalidation before their commit.
    pub real_doomed: u64,
    /// Frames the real clients' caches evicted (replacement under the faults).
    pub real_frames_evicted: u64,
}

impl Outcome {
    /// Adds run `o` to a sum of runs: its counts are added, its maxima (`settle_us`, the calm's
    /// `_max` fields) taken; the trace hash, which belongs to one run, is left as it is.
    pub fn absorb(&mut self, o: &Outcome) {
        self.events += o.events;
        self.acked += o.acked;
        self.uncertain += o.uncertain;
        self.refused += o.refused;
        self.invalidations += o.invalidations;
        self.history_txns += o.history_txns;
        self.crashes += o.crashes;
        self.pages_checked += o.pages_checked;
        self.lost_connections += o.lost_connections;
        self.install_rounds += o.install_rounds;
        self.backups += o.backups;
        self.offline_checks += o.offline_checks;
        self.demotions_sent += o.demotions_sent;
        self.demotions_forged += o.demotions_forged;
        self.page_commits += o.page_commits;
        self.records_early += o.records_early;
        self.pages_stolen += o.pages_stolen;
        self.wpl_restored += o.wpl_restored;
        self.wpl_installed += o.wpl_installed;
        self.wpl_page_rule_refusals += o.wpl_page_rule_refusals;
        self.pages_prefetched += o.pages_prefetched;
        self.cached_reads += o.cached_reads;
        self.discards += o.discards;
        self.settle_us = self.settle_us.max(o.settle_us);
        self.calm_wait_us_max = self.calm_wait_us_max.max(o.calm_wait_us_max);
        self.calm_commit_us_max = self.calm_commit_us_max.max(o.calm_commit_us_max);
        self.real_commits += o.real_commits;
        self.real_read_only_here += o.real_read_only_here;
        self.real_doomed += o.real_doomed;
        self.real_frames_evicted += o.real_frames_evicted;
    }
}

/// A run that found a violation.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "seed {seed} (commit mode {mode}): {violation} (at event {event}, virtual time {time_us} us)\n  replay: {replay}\n     or: thor sim cluster --seed {seed} --commit-mode {mode} --trace"
)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// The server's commit mode.
    pub mode: CommitMode,
    /// The test command that replays it.
    pub replay: String,
    /// What went wrong.
    pub violation: Violation,
    /// The event it was found at.
    pub event: u64,
    /// The virtual time then.
    pub time_us: u64,
}

/// A message between a client and the server.
#[derive(Debug)]
enum Msg {
    /// A new connection (client to server).
    Connect,
    /// A request (client to server).
    Request(u64, Request),
    /// A reply (server to client).
    Reply(u64, Reply, bool),
    /// The connection broke (to either side).
    Broken,
}

/// A digest of a message's contents for the trace hash (`Outcome::trace_hash`), so that two
/// runs of a seed agree only if every message carried the same bytes.
fn digest_msg(msg: &Msg) -> u64 {
    match msg {
        Msg::Connect => 1,
        Msg::Request(id, req) => crate::digest_request(*id, req),
        Msg::Reply(id, reply, close) => crate::digest_reply(*id, reply) ^ u64::from(*close),
        Msg::Broken => 2,
    }
}

/// Something that happens at a virtual time.
#[derive(Debug)]
enum Ev {
    /// A client decides what to do next.
    ClientWake(usize),
    /// A message arrives at the server.
    ToServer(ConnId, Msg),
    /// A message arrives at a client.
    ToClient(usize, ConnId, Msg),
    /// The server writes and fsyncs what the log buffers.
    LogSync(u32),
    /// The server performs a disk effect.
    Io(u32, Effect),
    /// A backup of the live server is taken, recovered and checked.
    Backup,
    /// Time passes at the server.
    Tick(u32),
    /// The crashed server restarts.
    Restart,
}

/// A connection as the network sees it.
#[derive(Debug)]
struct Link {
    /// Its client.
    client: usize,
    /// Whether it still carries messages.
    alive: bool,
    /// The latest scheduled arrival in each direction (TCP keeps order).
    last_to_server: u64,
    last_to_client: u64,
}

/// What a client waits for.
#[derive(Debug, Clone, PartialEq)]
enum Waiting {
    Nothing,
    Hello,
    Fetch(PageId),
    /// A page a transaction reads cells from.
    TxnFetch(PageId),
    /// The `Ack` of page records sent before the commit of this transaction (page modes).
    Early(u32),
    Commit(u32),
}

/// A transaction in progress at a client: it fetches the pages of the cells it reads, reads
/// their versions, then commits writes of some of them (read-modify-write), with its read set.
#[derive(Debug, Default)]
struct Plan {
    /// The cells to read.
    cells: Vec<Oref>,
    /// Pages still to fetch.
    to_fetch: Vec<PageId>,
    /// What it read: each cell and the version it saw.
    read: Vec<(Oref, serial::Version)>,
    /// A bank transfer: this amount moves from the first cell (an account) to the second.
    transfer: Option<i64>,
    /// A blind commit waiting for the pages it writes (page modes: the client diffs against
    /// them).
    blind: Option<Commit>,
}

/// The first cells of the setup are bank accounts: only read-modify-write transactions write
/// them, and those keep the sum of their balances (a transfer moves an amount between two, any
/// other write keeps the balance it read), so every committed state has the same total.
const ACCOUNTS: usize = 3;
/// Each account's balance before any transfer.
const OPENING_BALANCE: i64 = 100;

/// The version a cell written by `writer`'s transaction `txn` holds: unique per write, as the
/// history checker requires, and never `serial::INITIAL`.
fn version_of(writer: u32, txn: u32) -> serial::Version {
    (u64::from(writer) + 1) << 32 | u64::from(txn)
}

/// A simulated client.
#[derive(Debug)]
struct Client {
    /// Its number (1-based; 0 is the setup).
    id: u32,
    /// Its current connection.
    conn: Option<ConnId>,
    /// What it waits for.
    waiting: Waiting,
    /// Its next transaction number.
    next_txn: u32,
    /// Commits completed (acknowledged or uncertain).
    done: usize,
    /// The next request id on the connection.
    next_id: u64,
    /// Invalidations received and not yet acknowledged (they ride on the next request).
    acks: Vec<Oref>,
    /// Invalidations of cells the open transaction read: acknowledged only once its commit is
    /// answered, so that the server refuses the commit for the stale read (a client that
    /// acknowledged them first would tell the server its copies were current).
    held_acks: Vec<Oref>,
    /// The transaction being prepared.
    plan: Option<Plan>,
    /// The transaction whose commit is in flight, for the history.
    in_flight: Option<serial::Txn>,
    /// Whether the session's server takes demoted pages.
    demotes: bool,
    /// The last pages fetched, which it may demote (at most [`HELD_PAGES`]).
    held: Vec<(PageId, Bytes)>,
    /// Pages reported as demoted on the request in flight.
    noticed: Vec<(PageId, Bytes)>,
    /// Demoted pages the server asked for, to send on the next request.
    to_send: Vec<(PageId, Bytes)>,
    /// Page modes: the pages the open transaction fetched, as fetched (its records are diffs
    /// against them). An invalidation of an object on one of them is held until the commit
    /// is answered, so that the server refuses a commit built on a stale image.
    images: Vec<(PageId, Bytes)>,
    /// Page modes: records still to send before the commit, and the commit.
    early: std::collections::VecDeque<PageRecords>,
    page_commit: Option<PageCommit>,
    /// With prefetch: the pages the client caches (fetched or prefetched), oldest first.
    cache: Vec<(PageId, Bytes)>,
    /// Pages dropped from `cache`, to report as discarded (when the open transaction has not
    /// read a cell of them).
    discards: Vec<PageId>,
}

/// Payload bytes of a cell when the page cache is exclusive: a few cells to a page of 4 KB.
const EXCLUSIVE_CELL_PAYLOAD: usize = 900;

/// Pages a simulated client keeps to demote.
const HELD_PAGES: usize = 4;

impl Client {
    /// A new session starts: nothing held for it.
    fn new_session(&mut self) {
        self.acks.clear();
        self.held_acks.clear();
        self.demotes = false;
        self.held.clear();
        self.noticed.clear();
        self.to_send.clear();
        self.cache.clear();
        self.discards.clear();
        self.end_page_txn();
    }

    /// The cached copy of `page`, if any.
    fn cached(&self, page: PageId) -> Option<Bytes> {
        self.cache.iter().find(|(p, _)| *p == page).map(|(_, b)| b.clone())
    }

    /// Drops `page` from the cache (to be reported as discarded).
    fn drop_page(&mut self, page: PageId) {
        if let Some(i) = self.cache.iter().position(|(p, _)| *p == page) {
            self.cache.remove(i);
            self.discards.push(page);
        }
    }

    /// Caches `bytes` as `page`'s copy, dropping the oldest page past `max`.
    fn cache_page(&mut self, page: PageId, bytes: Bytes, max: usize) {
        self.cache.retain(|(p, _)| *p != page);
        self.discards.retain(|p| *p != page);
        self.cache.push((page, bytes));
        if self.cache.len() > max {
            let (old, _) = self.cache.remove(0);
            self.discards.push(old);
        }
    }

    /// The page-mode transaction ended (answered, or abandoned with its session).
    fn end_page_txn(&mut self) {
        self.images.clear();
        self.early.clear();
        self.page_commit = None;
    }

    /// Whether an invalidation of `o` must wait for the open transaction's commit answer: it
    /// read `o`, or (page modes) it holds an image of `o`'s page.
    fn holds(&self, o: Oref) -> bool {
        self.plan.as_ref().is_some_and(|p| p.read.iter().any(|r| r.0 == o))
            || self.images.iter().any(|(p, _)| Some(*p) == o.page())
    }
}

/// The durability checker learns every record and durable point of a step settled at once.
impl server::Settled for Checker {
    fn appended(&mut self, lsn: Lsn, record: &Bytes) -> Result<(), Violation> {
        Checker::appended(self, lsn, record)
    }
    fn durable(&mut self, lsn: Lsn) {
        Checker::durable(self, lsn);
    }
}

/// The simulation. See the module documentation.
struct World {
    cfg: SimConfig,
    rng: SplitMix64,
    now: u64,
    seq: u64,
    queue: EventQueue<Ev>,
    /// The server: its disk, its process while it is up, its epoch (events of an older
    /// process are ignored).
    server: Process,
    links: BTreeMap<ConnId, Link>,
    next_conn: ConnId,
    clients: Vec<Client>,
    /// The real clients; their world index (events, links, progress) follows the simulated
    /// clients'.
    real: Vec<RealClient>,
    checker: Checker,
    /// Cells known to exist durably (every client may write them). The first [`ACCOUNTS`] are
    /// bank accounts.
    cells: Vec<Oref>,
    /// The balance each write of an account stored, by `(account, version)`: the version is
    /// unique per write, so it names the balance as well as the value would.
    balances: FxHashMap<(u64, serial::Version), i64>,
    /// What clients observed: every transaction that reached a commit, with its reads and
    /// writes, for the serializability check.
    history: serial::History,
    /// Commit requests of read-only transactions (their `CommitOk` names no record).
    read_only: BTreeSet<(ConnId, u64)>,
    /// Transactions whose outcome their client never learned: the log decides at the end.
    uncertain: Vec<(crate::check::TxnId, serial::Txn)>,
    layout: CellLayout,
    desc: ClassDesc,
    out: Outcome,
    hash: u64,
    /// Forged demoted pages sent to the server, checked after it handled them.
    forged: Vec<(PageId, Bytes)>,
    /// Payload bytes of every cell (their class's variable part).
    payload: usize,
    /// When the faults stopped (the clients had done their faulty work).
    faults_stopped_at: Option<u64>,
    /// Since when the server has been up after the faults stopped.
    settled_since: Option<u64>,
    /// The clients' progress in the calm, and its check ([`crate::liveness`]).
    progress: Progress,
}

/// The commit mode of a run's server and its WPL table's bounds.
fn study_options(cfg: &SimConfig) -> thor_server::StudyOptions {
    thor_server::StudyOptions { mode: cfg.commit_mode, wpl: cfg.wpl }
}

fn core_config(cfg: &SimConfig) -> CoreConfig {
    CoreConfig {
        // With an exclusive cache, install at once: a page is taken back only if it was sent
        // without MOB versions in it (thor-server-core's `core/demote.rs`), so the MOB must often be
        // empty of a page for demotions to bring data.
        flush_start_percent: if cfg.exclusive_page_cache { 0 } else { 50 },
        mob_bytes: cfg.mob_bytes,
        page_cache_bytes: cfg.page_cache_bytes,
        flush_batch_pages: 3,
        log_buffer_bytes: 64 << 10,
        page_cache_mode: if cfg.exclusive_page_cache {
            thor_server::CacheMode::Exclusive
        } else {
            thor_server::CacheMode::Inclusive
        },
        cc: thor_server::CcConfig {
            reads_tracked_max: cfg.reads_tracked_max,
            ..Default::default()
        },
        hash_key: crate::hash_key(cfg.seed),
        ..CoreConfig::default()
    }
}

/// Runs one simulation; returns what it did, or the first violation found.
pub fn run(cfg: &SimConfig) -> Result<Outcome, SimFailure> {
    let replay = if cfg.commit_mode == CommitMode::Obj {
        format!(
            "THOR_SIM_SEED={} cargo test -p thor-sim --test cluster replay -- --nocapture",
            cfg.seed
        )
    } else {
        format!(
            "THOR_SIM_SEED={} THOR_SIM_MODE={} cargo test -p thor-sim --test page_modes replay -- --nocapture",
            cfg.seed, cfg.commit_mode
        )
    };
    let fail = |violation, event, time_us| SimFailure {
        seed: cfg.seed,
        mode: cfg.commit_mode,
        replay: replay.clone(),
        violation,
        event,
        time_us,
    };
    let mut w = World::new(cfg.clone()).map_err(|v| fail(v, 0, 0))?;
    match w.run() {
        Ok(()) => Ok(w.out),
        Err(violation) => Err(fail(violation, w.out.events, w.now)),
    }
}

impl World {
    fn new(cfg: SimConfig) -> Result<World, Violation> {
        let disk = MemDisk::new();
        io::create(&disk, cfg.page_size, ServerId(1))
            .map_err(|e| Violation(format!("create: {e}")))?;
        // With an exclusive page cache, cells carry a payload that spreads the database over
        // several pages, so that the cache cannot hold all of it and demotions bring data.
        let payload = cfg.cell_payload;
        let var = if payload > 0 { VarKind::Bytes } else { VarKind::None };
        let desc = ClassDesc::new("sim.Cell", CELL_FIXED_BYTES, &[0], var).expect("a valid class");
        let clients = (0..cfg.clients)
            .map(|i| Client {
                id: i as u32 + 1,
                conn: None,
                waiting: Waiting::Nothing,
                next_txn: 1,
                done: 0,
                next_id: 1,
                acks: Vec::new(),
                held_acks: Vec::new(),
                plan: None,
                in_flight: None,
                demotes: false,
                held: Vec::new(),
                noticed: Vec::new(),
                to_send: Vec::new(),
                images: Vec::new(),
                early: std::collections::VecDeque::new(),
                page_commit: None,
                cache: Vec::new(),
                discards: Vec::new(),
            })
            .collect();
        let mut w = World {
            rng: SplitMix64::new(cfg.seed),
            cfg,
            now: 0,
            seq: 0,
            queue: EventQueue::default(),
            server: Process::new(disk),
            links: BTreeMap::new(),
            next_conn: 1,
            clients,
            real: Vec::new(),
            checker: Checker::new(Lsn(1)),
            history: serial::History::new(),
            read_only: BTreeSet::new(),
            uncertain: Vec::new(),
            cells: Vec::new(),
            balances: FxHashMap::default(),
            layout: CellLayout {
                class: Oref::NULL,
                writer_at: CELL_WRITER_AT,
                txn_at: CELL_TXN_AT,
            },
            desc,
            out: Outcome::default(),
            hash: 0xcbf2_9ce4_8422_2325,
            forged: Vec::new(),
            payload,
            faults_stopped_at: None,
            settled_since: None,
            progress: Progress::default(),
        };
        let prefetch = w.cfg.prefetch.map(|p| p.extra);
        w.real = (0..w.cfg.real_clients)
            .map(|k| RealClient::new(w.cfg.seed, (w.cfg.clients + 1 + k) as u32, prefetch))
            .collect();
        w.start_server()?;
        w.setup()?;
        Ok(w)
    }

    /// Folds `words` into the trace hash, a word at a time: an FNV step (a bijection of the
    /// hash for a given word, so two traces that differ stay different through any common
    /// suffix) and a xor-shift that carries the high bits down into the next word's step.
    fn mix(&mut self, words: &[u64]) {
        for w in words {
            self.hash = (self.hash ^ w).wrapping_mul(0x0100_0000_01b3);
            self.hash ^= self.hash >> 29;
        }
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    fn chance(&mut self, ppm: u64) -> bool {
        ppm > 0 && self.rng.below(1_000_000) < ppm
    }

    fn latency(&mut self) -> u64 {
        20 + self.rng.below(400)
    }

    fn disk_latency(&mut self) -> u64 {
        50 + self.rng.below(2_000)
    }

    /// Recovers the server from the disk and checks the recovered state; checks the disk
    /// with the offline checker first when a crash left it. (The new database, before the
    /// first start, is the same in every seed: a unit test checks it once.)
    fn start_server(&mut self) -> Result<(), Violation> {
        if self.out.crashes > 0 {
            self.out.offline_checks += 1;
            crate::check::offline(&self.server.disk, "the database after a crash")?;
        }
        let study = study_options(&self.cfg);
        let opened = self
            .server
            .start(core_config(&self.cfg), &study)
            .map_err(|e| Violation(format!("the database does not open after a crash: {e}")))?;
        let node = self.server.node.as_ref().expect("started");
        self.out.install_rounds += opened.rounds;
        self.out.wpl_restored += node.core.stats().wpl.restored;
        let next = node.core.next_lsn();
        self.checker.recovered(next)?;
        self.check_everything()?;
        self.at(TICK_US, Ev::Tick(self.server.epoch));
        Ok(())
    }

    /// Creates the cell class and one cell per client plus a few shared ones.
    fn setup(&mut self) -> Result<(), Violation> {
        let mut created = vec![Bytes::from(self.desc.to_class_object())];
        for i in 0..self.cfg.clients + 3 {
            let mut c = self.desc.new_object(RawRef::tagged_word(0), self.payload);
            put_u32(&mut c, CELL_SERIAL_AT, i as u32);
            created.push(Bytes::from(c));
        }
        // The class's oref is not known until the commit: the checker learns the layout from
        // the outcome and the setup record is replayed to it then.
        let op = DirectOp::Commit(CommitIn { created, ..CommitIn::default() });
        let answers = self.settle_now(Input::Direct { ticket: 1, op })?;
        let Some(DirectResult::Committed(Ok(out))) = answers.into_iter().next() else {
            return Err(Violation("the setup commit failed".into()));
        };
        self.layout.class = out.created[0];
        self.checker.set_layout(self.layout);
        // Rewrite the cells in a second commit now that their class word is known to the
        // checker (the first record is not a simulation write).
        let mut versions = Vec::new();
        for (i, oref) in out.created[1..].iter().enumerate() {
            let mut c = self.desc.new_object(self.layout.class.raw(), self.payload);
            put_u32(&mut c, CELL_WRITER_AT, 0);
            put_u32(&mut c, CELL_TXN_AT, 0);
            put_u32(&mut c, CELL_SERIAL_AT, i as u32);
            versions.push((*oref, Bytes::from(c)));
            if i < ACCOUNTS {
                self.balances.insert((u64::from(oref.raw()), version_of(0, 0)), OPENING_BALANCE);
            }
            self.cells.push(*oref);
        }
        let mut txn = serial::Txn::new(0, 0);
        for (o, _) in &versions {
            txn = txn.write(u64::from(o.raw()), version_of(0, 0));
        }
        let op = DirectOp::Commit(CommitIn { versions, ..CommitIn::default() });
        match self.settle_now(Input::Direct { ticket: 2, op })?.into_iter().next() {
            Some(DirectResult::Committed(Ok(out))) => {
                self.history.add_committed(txn.ordered(out.lsn.0));
                Ok(())
            }
            other => Err(Violation(format!("the setup commit failed: {other:?}"))),
        }
    }

    /// Steps the server with `input` and performs every effect at once (setup and checks,
    /// with no client connected); returns the direct answers.
    fn settle_now(&mut self, input: Input) -> Result<Vec<DirectResult>, Violation> {
        let node = self.server.node.as_mut().expect("the server is up");
        server::settle_now(node, self.now, input, &mut self.checker)
    }

    /// Fetches every page that holds simulation objects, directly, and checks it.
    fn check_everything(&mut self) -> Result<(), Violation> {
        for page in self.checker.pages() {
            let op = DirectOp::Fetch(page);
            match self.settle_now(Input::Direct { ticket: 0, op })?.pop() {
                Some(DirectResult::Page(Ok(bytes))) => self.checker.page(page, &bytes)?,
                other => return Err(Violation(format!("fetch of page {page}: {other:?}"))),
            }
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Violation> {
        for c in 0..self.clients.len() {
            let d = self.rng.below(1_000);
            self.at(d, Ev::ClientWake(c));
        }
        self.real_wake_all();
        for _ in 0..self.cfg.backups {
            let d = self.rng.below(BACKUP_WINDOW_US);
            self.at(d, Ev::Backup);
        }
        // The faulty part, then the calm under the liveness check ([`crate::liveness`]).
        while !self.progress.all_done() {
            if self.faults_stopped_at.is_none()
                && self.clients.iter().all(|c| c.done >= self.cfg.txns_per_client)
                && self.real.iter().all(|c| c.done >= self.cfg.txns_per_client)
            {
                // Faults stop; a crashed server comes back; then the clients run again.
                self.cfg.loss_ppm = 0;
                self.cfg.io_death_ppm = 0;
                self.cfg.crash_ppm = 0;
                self.faults_stopped_at = Some(self.now);
                self.trace(|| "clients done: faults stop".into());
            }
            if let (Some(stopped), false) = (self.faults_stopped_at, self.progress.calm()) {
                self.maybe_calm(stopped)?;
            }
            let Some(((t, _), ev)) = self.queue.pop_first() else {
                return Err(Violation("nothing left to happen but clients are not done".into()));
            };
            self.now = t;
            self.out.events += 1;
            if self.out.events > EVENTS_MAX {
                return Err(Violation(format!("no progress after {EVENTS_MAX} events")));
            }
            if self.server.node.is_some()
                && (self.out.crashes as usize) < self.cfg.crashes_max
                && self.chance(self.cfg.crash_ppm)
            {
                self.crash("at random");
            }
            self.event(ev)?;
            self.progress.check(self.now, CALM_BOUNDS, |c| format!("client {}", c + 1))?;
        }
        self.out.calm_wait_us_max = self.progress.wait_us_seen;
        self.out.calm_commit_us_max = self.progress.commit_us_seen;
        // Quiesce: let everything in flight finish, then check everything, then crash once
        // more and check what recovery gives.
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            self.now = t;
            self.out.events += 1;
            if matches!(ev, Ev::Tick(_)) && self.queue.is_empty() {
                continue;
            }
            if self.out.events > EVENTS_MAX {
                return Err(Violation(format!("no quiescence after {EVENTS_MAX} events")));
            }
            self.event(ev)?;
        }
        if self.server.node.is_none() {
            return Err(Violation("the server is down after quiescence".into()));
        }
        self.check_everything()?;
        self.crash("at the end");
        self.start_server()?;
        self.check_history()?;
        self.out.real_frames_evicted = self.real_frames_evicted();
        self.out.acked = self.checker.acked() as u64;
        self.out.trace_hash = self.hash;
        Ok(())
    }

    /// After the faults stopped at `stopped`: once the server has been up for
    /// [`SETTLED_QUIET_US`] the calm begins and the clients run again. A server that does not
    /// come back within [`SETTLE_US_MAX`] breaks liveness.
    fn maybe_calm(&mut self, stopped: u64) -> Result<(), Violation> {
        if self.server.node.is_none() {
            self.settled_since = None;
            if self.now - stopped > SETTLE_US_MAX {
                return Err(Violation(format!(
                    "liveness: the server is still down {} us after the faults stopped (bound {SETTLE_US_MAX} us)",
                    self.now - stopped
                )));
            }
            return Ok(());
        }
        let since = *self.settled_since.get_or_insert(self.now);
        if self.now - since < SETTLED_QUIET_US {
            return Ok(());
        }
        self.out.settle_us = since - stopped;
        self.progress.begin(self.now, self.clients.len() + self.real.len());
        self.trace(|| "settled: the calm and its liveness check begin".into());
        for c in 0..self.clients.len() {
            let d = self.rng.below(1_000);
            self.at(d, Ev::ClientWake(c));
        }
        self.real_wake_all();
        Ok(())
    }

    /// Whether client `c` has work left: its faulty transactions before the faults stop,
    /// its calm commits once the calm has begun, nothing in between.
    fn has_work(&self, c: usize) -> bool {
        if self.progress.calm() {
            self.progress.wants_more(c)
        } else {
            let done = match c.checked_sub(self.clients.len()) {
                Some(r) => self.real[r].done,
                None => self.clients[c].done,
            };
            self.faults_stopped_at.is_none() && done < self.cfg.txns_per_client
        }
    }

    /// The serializability check of what clients observed: uncertain commits are decided by
    /// the recovered log, then the history (every read with the version it saw, every write
    /// with its unique version, committed ones in log order) must have an acyclic dependency
    /// graph and end in the state the server holds.
    fn check_history(&mut self) -> Result<(), Violation> {
        for ((id, t), txn) in std::mem::take(&mut self.uncertain) {
            match self.checker.lsn_of((id, t)) {
                Some(lsn) => self.history.add_committed(txn.ordered(lsn.0)),
                None => self.history.add_aborted(txn),
            }
        }
        let mut fin = Vec::new();
        for (o, writer) in self.checker.writers(&self.cells) {
            let Some((w, t)) = writer else {
                return Err(Violation(format!("cell {o:?} is not in the recovered state")));
            };
            fin.push((u64::from(o.raw()), version_of(w, t)));
        }
        // The log order is CLOCC's timestamp order at one server, so it must itself be a
        // serial order: every dependency goes forward in it.
        let opts = serial::Options { order_must_serialize: true };
        let summary = serial::check_with(&self.history, Some(&fin), &opts)
            .map_err(|a| Violation(format!("the history is not serializable: {a}")))?;
        self.out.history_txns += summary.committed as u64;
        // The bank: the accounts' total is the same in every committed state, in serial order.
        let accounts: Vec<u64> =
            self.cells[..ACCOUNTS].iter().map(|o| u64::from(o.raw())).collect();
        let unknown = std::cell::Cell::new(None);
        let balance = |a: u64, v: serial::Version| {
            if v == serial::INITIAL {
                return OPENING_BALANCE;
            }
            self.balances.get(&(a, v)).copied().unwrap_or_else(|| {
                unknown.set(Some((a, v)));
                0
            })
        };
        let total = serial::check_conserved_total(&self.history, &summary, &accounts, balance)
            .map_err(|e| Violation(format!("a transfer broke the bank: {e}")))?;
        if let Some((a, v)) = unknown.get() {
            return Err(Violation(format!("account {a:#x} holds version {v:#x} of no transfer")));
        }
        debug_assert_eq!(total, i128::from(OPENING_BALANCE) * ACCOUNTS as i128);
        Ok(())
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.cfg.trace {
            eprintln!("{:>9} us  {}", self.now, what());
        }
    }

    fn event(&mut self, ev: Ev) -> Result<(), Violation> {
        if self.cfg.trace && !matches!(ev, Ev::Tick(_)) {
            self.trace(|| format!("{ev:?}").chars().take(160).collect());
        }
        match ev {
            Ev::ClientWake(c) => {
                self.mix(&[self.now, 1, c as u64]);
                self.client_wake(c)
            }
            Ev::ToServer(conn, msg) => {
                self.mix(&[self.now, 2, conn, digest_msg(&msg)]);
                self.at_server(conn, msg)
            }
            Ev::ToClient(c, conn, msg) => {
                self.mix(&[self.now, 3, c as u64, conn, digest_msg(&msg)]);
                self.at_client(c, conn, msg)
            }
            Ev::LogSync(epoch) => {
                self.mix(&[self.now, 4, epoch as u64]);
                self.log_sync(epoch)
            }
            Ev::Io(epoch, effect) => {
                self.mix(&[self.now, 5, epoch as u64]);
                self.io(epoch, effect)
            }
            Ev::Tick(epoch) => {
                if epoch == self.server.epoch && self.server.node.is_some() {
                    self.mix(&[self.now, 6]);
                    self.step(Input::Tick)?;
                    self.at(TICK_US, Ev::Tick(epoch));
                }
                Ok(())
            }
            Ev::Backup => {
                self.mix(&[self.now, 9]);
                self.backup()
            }
            Ev::Restart => {
                self.mix(&[self.now, 7]);
                self.trace(|| "server restarts".into());
                self.start_server()
            }
        }
    }

    /// Steps the live server and routes its effects.
    fn step(&mut self, input: Input) -> Result<(), Violation> {
        let Some(node) = self.server.node.as_mut() else { return Ok(()) };
        let mut fx = Vec::new();
        crate::step_checked(&mut node.core, self.now, input, &mut fx)?;
        self.route(fx)
    }

    fn route(&mut self, fx: Vec<Effect>) -> Result<(), Violation> {
        for e in fx {
            match e {
                Effect::Reply { conn, id, reply, close } => {
                    match &reply.body {
                        ReplyBody::Page { page, bytes } => {
                            self.out.pages_checked += 1;
                            self.checker.page(*page, bytes)?;
                        }
                        ReplyBody::Pages(pages) => {
                            for (page, bytes) in pages {
                                self.out.pages_checked += 1;
                                self.checker.page(*page, bytes)?;
                            }
                            self.out.pages_prefetched += pages.len() as u64 - 1;
                        }
                        ReplyBody::CommitOk { lsn, .. } if !self.read_only.remove(&(conn, id)) => {
                            self.checker.commit_ok(*lsn)?;
                        }
                        _ => {}
                    }
                    self.mix(&[self.now, 10, conn, id]);
                    self.send_to_client(conn, Msg::Reply(id, reply, close));
                }
                Effect::Append { lsn, record } => {
                    let schedule = self.server.append(lsn, record.clone())?;
                    self.checker.appended(lsn, &record)?;
                    self.mix(&[self.now, 11, lsn.0, crate::digest_bytes(&record)]);
                    if schedule {
                        let d = self.disk_latency();
                        self.at(d, Ev::LogSync(self.server.epoch));
                    }
                }
                Effect::Done { .. } => {}
                // The simulated clients never ask for one (backups are tested against the
                // threaded engine, `thor-server/tests/backup.rs`).
                Effect::Backup { .. } => {
                    return Err(Violation("a backup nobody asked for".to_string()));
                }
                // One server and clients that commit at it alone: two-phase commit has no one
                // to talk to.
                Effect::Peer { to, msg } => {
                    return Err(Violation(format!("a message to server {} ({msg:?})", to.0)));
                }
                e @ (Effect::Read { .. } | Effect::Install(_) | Effect::Checkpoint(_)) => {
                    let d = self.disk_latency();
                    self.at(d, Ev::Io(self.server.epoch, e));
                }
            }
        }
        Ok(())
    }

    /// Arms the disk to die after a few operations, with the configured chance; returns
    /// whether it did.
    fn maybe_die_midway(&mut self) -> bool {
        if !self.chance(self.cfg.io_death_ppm) || self.out.crashes as usize >= self.cfg.crashes_max
        {
            return false;
        }
        let extra = self.rng.below(12);
        self.server.plan_death(extra);
        true
    }

    fn log_sync(&mut self, epoch: u32) -> Result<(), Violation> {
        if !self.server.live(epoch) {
            return Ok(());
        }
        let dies = self.maybe_die_midway();
        let r = self.server.sync_log();
        if dies {
            self.crash("during a log sync");
            return Ok(());
        }
        let lsn = r.map_err(io_violation)?;
        self.checker.durable(lsn);
        self.trace(|| format!("log durable to {lsn}"));
        self.step(Input::Durable { lsn })
    }

    fn io(&mut self, epoch: u32, effect: Effect) -> Result<(), Violation> {
        if !self.server.live(epoch) {
            return Ok(());
        }
        let dies = !matches!(effect, Effect::Read { .. }) && self.maybe_die_midway();
        let input = self.server.perform(&effect);
        if dies {
            self.crash("during an install or checkpoint");
            return Ok(());
        }
        if let Some(Input::Installed { result: Ok(_), .. }) = &input {
            self.out.install_rounds += 1;
        }
        match input {
            Some(i) => self.step(i),
            None => Ok(()),
        }
    }

    /// Takes a backup of the live server into a fresh disk, loses that disk's unsynced writes
    /// (a backup reports only what it synced), recovers it, and checks that it holds exactly
    /// the log up to the LSN it claims, with every commit acknowledged so far.
    fn backup(&mut self) -> Result<(), Violation> {
        let Some(node) = self.server.node.as_ref() else { return Ok(()) };
        // The backup only reads the live disk: a death armed for a later install or
        // checkpoint waits until it is done.
        let plan = self.server.disk.fault_plan();
        self.server.disk.set_fault_plan(FaultPlan::default());
        let dest = MemDisk::new();
        let taken = node.disk_side.backup_into(&*node.log, &dest, || Ok(()));
        self.server.disk.set_fault_plan(plan);
        let info = taken.map_err(|e| Violation(format!("a backup failed: {e}")))?;
        self.trace(|| format!("backup up to LSN {}", info.lsn));
        self.out.backups += 1;
        dest.crash(self.rng.next_u64());
        self.out.offline_checks += 1;
        crate::check::offline(&dest, "a backup")?;
        let study = study_options(&self.cfg);
        let r = io::recover(Arc::new(dest), core_config(&self.cfg), server::log_options(), &study)
            .map_err(|e| Violation(format!("a backup does not open: {e}")))?;
        if r.core.next_lsn().0 != info.lsn.0 + 1 {
            return Err(Violation(format!(
                "a backup claims LSN {} but recovers to {}",
                info.lsn,
                r.core.next_lsn()
            )));
        }
        let state = self.checker.backup_state(info.lsn)?;
        let mut copy =
            Node { core: r.core, disk_side: r.disk_side, log: r.log, sync_scheduled: false };
        let pages: BTreeSet<PageId> = state.keys().filter_map(|o| o.page()).collect();
        for page in pages {
            let bytes = fetch_from(&mut copy, self.now, page)?;
            self.checker.page_of(&state, page, &bytes)?;
        }
        Ok(())
    }

    /// The server process dies: its connections break and the disk loses what it may.
    fn crash(&mut self, why: &str) {
        if self.server.node.is_none() {
            return;
        }
        self.trace(|| format!("server crashes {why}"));
        self.mix(&[self.now, 8, self.out.crashes]);
        if let Some(n) = &self.server.node {
            let w = n.core.stats().wpl;
            self.out.wpl_installed += w.installed;
            self.out.wpl_page_rule_refusals += w.page_rule_refusals;
        }
        self.out.crashes += 1;
        let seed = self.rng.next_u64();
        self.server.kill(seed);
        let conns: Vec<ConnId> =
            self.links.iter().filter(|(_, l)| l.alive).map(|(c, _)| *c).collect();
        for conn in conns {
            self.break_link(conn, false);
        }
        let d = 1_000 + self.rng.below(20_000);
        self.at(d, Ev::Restart);
    }

    /// Breaks a connection: both ends learn it (the server only if it is up and `tell_server`).
    fn break_link(&mut self, conn: ConnId, tell_server: bool) {
        let Some(link) = self.links.get_mut(&conn) else { return };
        if !link.alive {
            return;
        }
        link.alive = false;
        let c = link.client;
        let d = self.latency();
        self.at(d, Ev::ToClient(c, conn, Msg::Broken));
        if tell_server {
            let d = self.latency();
            self.at(d, Ev::ToServer(conn, Msg::Broken));
        }
    }

    fn send_to_server(&mut self, conn: ConnId, msg: Msg) {
        let lost = self.chance(self.cfg.loss_ppm);
        let d = self.latency();
        let Some(link) = self.links.get_mut(&conn) else { return };
        if !link.alive {
            return;
        }
        if lost {
            self.out.lost_connections += 1;
            self.break_link(conn, true);
            return;
        }
        let t = (self.now + d).max(link.last_to_server + 1);
        link.last_to_server = t;
        if let Msg::Request(..) = msg {
            self.progress.asked(link.client, self.now);
        }
        self.seq += 1;
        self.queue.insert((t, self.seq), Ev::ToServer(conn, msg));
    }

    fn send_to_client(&mut self, conn: ConnId, msg: Msg) {
        let lost = self.chance(self.cfg.loss_ppm);
        let d = self.latency();
        let Some(link) = self.links.get_mut(&conn) else { return };
        if !link.alive {
            return;
        }
        if lost {
            self.out.lost_connections += 1;
            self.break_link(conn, true);
            return;
        }
        let t = (self.now + d).max(link.last_to_client + 1);
        link.last_to_client = t;
        let c = link.client;
        self.seq += 1;
        self.queue.insert((t, self.seq), Ev::ToClient(c, conn, msg));
    }

    /// `req` of client `c` with what rides on it: the pending acknowledgements (this client
    /// caches nothing, so it applies an invalidation by acknowledging it) and, when its server
    /// takes demotions, demotion: it reports a page it holds as demoted now and then, and sends
    /// the pages the server asked for, one in eight with a byte changed (a buggy or hostile
    /// client, whose page the server must refuse), and now and then a page it was not asked
    /// for. Draws from the seed only for a session that demotes, so other runs are unchanged.
    fn outgoing(&mut self, c: usize, mut req: Request) -> Request {
        let client = &mut self.clients[c];
        let n = client.acks.len().min(thor_wire::limits::ACKS_MAX);
        req.piggyback.acks = client.acks.drain(..n).collect();
        if !client.discards.is_empty() {
            // Not a page the open transaction read a cell of (the server would stop sending
            // its invalidations, and a stale read would validate), nor the page this request
            // fetches (thor-client's rule too).
            let fetching = match &req.body {
                RequestBody::Fetch { page } => Some(*page),
                RequestBody::Prefetch(p) => Some(p.page),
                _ => None,
            };
            // The transaction's reads: the plan's while it reads, the commit's read set and
            // writes once it commits (the commit request is still part of it).
            let mut read: Vec<PageId> = client
                .plan
                .as_ref()
                .map(|p| p.read.iter().filter_map(|(o, _)| o.page()).collect())
                .unwrap_or_default();
            if let RequestBody::Commit(c) = &req.body {
                read.extend(
                    c.reads
                        .iter()
                        .chain(c.versions.iter().map(|(o, _)| o))
                        .filter_map(|o| o.page()),
                );
            }
            let mut keep = Vec::new();
            for p in std::mem::take(&mut client.discards) {
                if read.contains(&p) || Some(p) == fetching {
                    keep.push(p);
                } else if !req.piggyback.discarded.contains(&p) {
                    req.piggyback.discarded.push(p);
                }
            }
            client.discards = keep;
            self.out.discards += req.piggyback.discarded.len() as u64;
        }
        let client = &mut self.clients[c];
        if !client.demotes {
            return req;
        }
        if !client.held.is_empty() && self.rng.below(2) == 0 {
            let client = &mut self.clients[c];
            let (page, bytes) = client.held.remove(0);
            req.piggyback.demoted.push(page);
            client.noticed.push((page, bytes));
        }
        let n = self.clients[c].to_send.len().min(thor_wire::limits::DEMOTED_PAGES_MAX);
        let sending: Vec<(PageId, Bytes)> = self.clients[c].to_send.drain(..n).collect();
        for (page, bytes) in sending {
            let bytes = if self.rng.below(8) == 0 {
                let mut forged = bytes.to_vec();
                let at = self.rng.below(forged.len() as u64) as usize;
                forged[at] ^= 1 << self.rng.below(8);
                let forged = Bytes::from(forged);
                self.forged.push((page, forged.clone()));
                self.out.demotions_forged += 1;
                forged
            } else {
                bytes
            };
            self.out.demotions_sent += 1;
            req.piggyback.demoted_pages.push((page, bytes));
        }
        if self.rng.below(50) == 0
            && let Some((page, bytes)) = self.clients[c].held.first().cloned()
        {
            // Not asked for: refused (the bytes are right, so they are not checked as forged).
            req.piggyback.demoted_pages.push((page, bytes));
        }
        req
    }

    /// No page the server was sent forged (or unasked) bytes of holds them in its cache.
    fn check_forged(&mut self) -> Result<(), Violation> {
        let Some(node) = self.server.node.as_ref() else {
            self.forged.clear();
            return Ok(());
        };
        for (page, bytes) in self.forged.drain(..) {
            if node.core.page_cache_image(page).as_ref() == Some(&bytes) {
                return Err(Violation(format!(
                    "the server cached forged or unasked demoted bytes of page {}",
                    page.get()
                )));
            }
        }
        Ok(())
    }

    fn at_server(&mut self, conn: ConnId, msg: Msg) -> Result<(), Violation> {
        if self.server.node.is_none() {
            return Ok(());
        }
        match msg {
            Msg::Connect => {
                if self.links.get(&conn).is_some_and(|l| l.alive) {
                    self.step(Input::Connect { conn })?;
                }
                Ok(())
            }
            Msg::Request(id, req) => {
                if self.links.get(&conn).is_some_and(|l| l.alive) {
                    self.step(Input::Request { conn, id, req })?;
                }
                self.check_forged()
            }
            Msg::Broken => self.step(Input::Disconnect { conn }),
            Msg::Reply(..) => Err(Violation("a reply sent to the server".into())),
        }
    }

    /// A new connection of client `c` (simulated or real): its link, not yet used.
    fn open_link(&mut self, c: usize) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.links
            .insert(conn, Link { client: c, alive: true, last_to_server: 0, last_to_client: 0 });
        conn
    }

    /// Connects `conn` (set up by [`World::open_link`], its client waiting for `HelloOk` as
    /// request 1): the connection and the `Hello` travel together, in order. With the server
    /// down the connection is refused at once, and the client tries again later.
    fn greet(&mut self, conn: ConnId, name: &str) {
        if self.server.node.is_none() {
            self.break_link(conn, false);
            return;
        }
        self.send_to_server(conn, Msg::Connect);
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], name)));
        self.send_to_server(conn, Msg::Request(1, hello));
    }

    fn client_wake(&mut self, c: usize) -> Result<(), Violation> {
        if let Some(r) = c.checked_sub(self.clients.len()) {
            return self.real_wake(r);
        }
        if !self.has_work(c) || self.clients[c].waiting != Waiting::Nothing {
            return Ok(());
        }
        let client = &self.clients[c];
        if client.conn.is_none() {
            let conn = self.open_link(c);
            let client = &mut self.clients[c];
            client.conn = Some(conn);
            client.waiting = Waiting::Hello;
            client.next_id = 2;
            self.greet(conn, "sim");
            return Ok(());
        }
        let conn = client.conn.expect("checked");
        let id = client.next_id;
        if self.clients[c].plan.is_some() {
            return self.advance_plan(c, conn, id);
        }
        if self.cells.len() > ACCOUNTS && self.rng.below(10) < 6 {
            // A read-modify-write transaction over 1 to 3 cells, or a transfer between two
            // accounts.
            let mut cells: Vec<Oref> = Vec::new();
            let mut transfer = None;
            if self.rng.below(3) == 0 {
                let from = self.rng.below(ACCOUNTS as u64) as usize;
                let to = (from + 1 + self.rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
                cells.extend([self.cells[from], self.cells[to]]);
                transfer = Some(1 + self.rng.below(50) as i64);
            } else {
                let k = 1 + self.rng.below(3) as usize;
                for _ in 0..k {
                    let o = self.cells[self.rng.below(self.cells.len() as u64) as usize];
                    if !cells.contains(&o) {
                        cells.push(o);
                    }
                }
            }
            let mut to_fetch: Vec<PageId> = cells.iter().filter_map(|o| o.page()).collect();
            to_fetch.sort();
            to_fetch.dedup();
            self.clients[c].plan =
                Some(Plan { cells, to_fetch, read: Vec::new(), transfer, blind: None });
            return self.advance_plan(c, conn, id);
        }
        if self.rng.below(10) < 3 {
            let max_page =
                self.cells.iter().filter_map(|o| o.page()).max().unwrap_or(PageId::FIRST);
            let page = PageId::new(1 + self.rng.below(u64::from(max_page.get())) as u32)
                .expect("in range");
            let client = &mut self.clients[c];
            client.waiting = Waiting::Fetch(page);
            client.next_id += 1;
            let req = self.outgoing(c, Request::new(self.fetch_body(page)));
            self.send_to_server(conn, Msg::Request(id, req));
            return Ok(());
        }
        let commit = self.make_commit(c);
        if self.cfg.commit_mode.is_page_based() {
            // A page-mode client diffs against the pages it writes: it fetches them first.
            let mut to_fetch: Vec<PageId> =
                commit.versions.iter().filter_map(|(o, _)| o.page()).collect();
            to_fetch.sort();
            to_fetch.dedup();
            self.clients[c].plan = Some(Plan { to_fetch, blind: Some(commit), ..Plan::default() });
            return self.advance_plan(c, conn, id);
        }
        let txn = self.blind_txn(c, &commit);
        self.send_commit(c, conn, id, txn, commit)
    }

    /// The history's entry of client `c`'s blind commit (its next transaction).
    fn blind_txn(&self, c: usize, commit: &Commit) -> serial::Txn {
        let (writer, t) = (self.clients[c].id, self.clients[c].next_txn);
        let mut txn = serial::Txn::new(u64::from(writer) << 32 | u64::from(t), writer);
        for (o, _) in &commit.versions {
            txn = txn.write(u64::from(o.raw()), version_of(writer, t));
        }
        txn
    }

    /// Sends client `c`'s commit (request `id`), whose history entry is `txn`: as `Commit` in
    /// `obj` mode; in a page mode as the records its recovery buffer sends first, one
    /// `PageRecords` at a time, then `PageCommit` ([`pagemode::build`]).
    fn send_commit(
        &mut self,
        c: usize,
        conn: ConnId,
        id: u64,
        txn: serial::Txn,
        commit: Commit,
    ) -> Result<(), Violation> {
        let mode = self.cfg.commit_mode;
        let t = self.clients[c].next_txn;
        // The client's cached copies of the pages it writes are old once this commits: they
        // go (thor-client's cache holds the new versions instead).
        for (o, _) in &commit.versions {
            if let Some(p) = o.page() {
                self.clients[c].drop_page(p);
            }
        }
        if !mode.is_page_based() {
            if commit.versions.is_empty() && commit.created.is_empty() {
                self.read_only.insert((conn, id));
            }
            let client = &mut self.clients[c];
            client.waiting = Waiting::Commit(t);
            client.in_flight = Some(txn);
            client.next_txn += 1;
            client.next_id += 1;
            let req = self.outgoing(c, Request::new(RequestBody::Commit(commit)));
            self.send_to_server(conn, Msg::Request(id, req));
            return Ok(());
        }
        let Commit { reads, versions, created, .. } = commit;
        let built = pagemode::build(
            mode,
            self.cfg.page_client,
            self.cfg.page_size,
            u64::from(t),
            reads,
            &versions,
            created,
            &self.clients[c].images,
        )?;
        self.out.page_commits += 1;
        self.out.records_early += built.early.iter().map(|r| r.records.len() as u64).sum::<u64>();
        self.out.pages_stolen += built.early.iter().map(|r| r.pages.len() as u64).sum::<u64>();
        let client = &mut self.clients[c];
        client.in_flight = Some(txn);
        client.next_txn += 1;
        client.early = built.early.into();
        client.page_commit = Some(built.commit);
        self.send_page_request(c, conn, t);
        Ok(())
    }

    /// Sends the next request of client `c`'s page-mode transaction `t`: its next early
    /// records, or its commit.
    fn send_page_request(&mut self, c: usize, conn: ConnId, t: u32) {
        let client = &mut self.clients[c];
        let id = client.next_id;
        client.next_id += 1;
        let body = match client.early.pop_front() {
            Some(r) => {
                client.waiting = Waiting::Early(t);
                RequestBody::PageRecords(r)
            }
            None => {
                let pc = client.page_commit.take().expect("a page commit to send");
                if pc.writes.is_empty() && pc.created.is_empty() {
                    self.read_only.insert((conn, id));
                }
                client.waiting = Waiting::Commit(t);
                RequestBody::PageCommit(pc)
            }
        };
        let req = self.outgoing(c, Request::new(body));
        self.send_to_server(conn, Msg::Request(id, req));
    }

    /// The request that fetches `page`: `Prefetch` when the run's clients prefetch.
    fn fetch_body(&self, page: PageId) -> RequestBody {
        match self.cfg.prefetch {
            None => RequestBody::Fetch { page },
            Some(p) => RequestBody::Prefetch(Prefetch { page, extra: p.extra, hint: p.hint }),
        }
    }

    /// The next request of client `c`'s transaction: a fetch of a page it reads from, or, once
    /// everything is read, its commit: each cell read is written with probability 1/2 (none: a
    /// read-only transaction), and with probability 1/4 a cell is created too.
    fn advance_plan(&mut self, c: usize, conn: ConnId, id: u64) -> Result<(), Violation> {
        while let Some(page) = self.clients[c].plan.as_mut().expect("a plan").to_fetch.pop() {
            // A cached copy (fetched or prefetched earlier) is read without a request, if it
            // holds every cell the transaction reads there: a cell created after the copy was
            // sent is not in it (no invalidation announces a creation), and the page is
            // fetched again, as thor-client fetches a stale page again.
            if let Some(bytes) = self.clients[c].cached(page) {
                let plan = self.clients[c].plan.as_ref().expect("a plan");
                let view = PageView::parse(&bytes).map_err(|e| Violation(format!("{e}")))?;
                let complete = plan
                    .cells
                    .iter()
                    .filter(|o| o.page() == Some(page))
                    .all(|o| view.object(o.oid()).is_some());
                if complete {
                    self.out.cached_reads += 1;
                    self.mix(&[self.now, 12, c as u64, u64::from(page.get())]);
                    self.read_cells(c, page, &bytes)?;
                    continue;
                }
                self.clients[c].drop_page(page);
            }
            let client = &mut self.clients[c];
            client.waiting = Waiting::TxnFetch(page);
            client.next_id += 1;
            let req = self.outgoing(c, Request::new(self.fetch_body(page)));
            self.send_to_server(conn, Msg::Request(id, req));
            return Ok(());
        }
        let mut plan = self.clients[c].plan.take().expect("a plan");
        if let Some(commit) = plan.blind.take() {
            let txn = self.blind_txn(c, &commit);
            return self.send_commit(c, conn, id, txn, commit);
        }
        let (writer, t) = (self.clients[c].id, self.clients[c].next_txn);
        let mut txn = serial::Txn::new(u64::from(writer) << 32 | u64::from(t), writer);
        for (o, v) in &plan.read {
            txn = txn.read(u64::from(o.raw()), *v);
        }
        let mut versions = Vec::new();
        // A transfer writes both accounts (the plan lists the source first); any other
        // transaction writes each cell it read with probability 1/2, keeping its balance.
        let moved = |i: usize| match (plan.transfer, i) {
            (Some(x), 0) => -x,
            (Some(x), _) => x,
            (None, _) => 0,
        };
        for (i, (o, v)) in plan.read.iter().enumerate() {
            if plan.transfer.is_some() || self.rng.below(2) == 0 {
                if let Some(&b) = self.balances.get(&(u64::from(o.raw()), *v)) {
                    let key = (u64::from(o.raw()), version_of(writer, t));
                    self.balances.insert(key, b + moved(i));
                }
                let mut b = self.desc.new_object(self.layout.class.raw(), self.payload);
                put_u32(&mut b, CELL_WRITER_AT, writer);
                put_u32(&mut b, CELL_TXN_AT, t);
                put_u32(&mut b, CELL_SERIAL_AT, i as u32);
                versions.push((*o, Bytes::from(b)));
                txn = txn.write(u64::from(o.raw()), version_of(writer, t));
            }
        }
        let mut created = Vec::new();
        if self.rng.below(4) == 0 {
            let mut b = self.desc.new_object(self.layout.class.raw(), self.payload);
            put_u32(&mut b, CELL_WRITER_AT, writer);
            put_u32(&mut b, CELL_TXN_AT, t);
            put_u32(&mut b, CELL_SERIAL_AT, 1000);
            created.push(Bytes::from(b));
        }
        let reads = plan.read.iter().map(|(o, _)| *o).collect();
        let commit = Commit { reads, versions, created, id: None, leaves: Vec::new() };
        self.send_commit(c, conn, id, txn, commit)
    }

    /// A transaction's page arrived: read the versions of its cells on that page.
    fn read_cells(&mut self, c: usize, page: PageId, bytes: &[u8]) -> Result<(), Violation> {
        let v = PageView::parse(bytes).map_err(|e| Violation(format!("page {page}: {e}")))?;
        let plan = self.clients[c].plan.as_mut().expect("a plan");
        for o in plan.cells.iter().filter(|o| o.page() == Some(page)) {
            let Some(obj) = v.object(o.oid()) else {
                return Err(Violation(format!("cell {o:?} is missing from page {page}")));
            };
            let version = version_of(u32_at(obj, CELL_WRITER_AT), u32_at(obj, CELL_TXN_AT));
            plan.read.push((*o, version));
        }
        Ok(())
    }

    /// A commit of client `c`: 0 to 3 existing cells rewritten, 0 to 2 created (at least one
    /// object), every one carrying (client, txn).
    fn make_commit(&mut self, c: usize) -> Commit {
        let (writer, txn) = (self.clients[c].id, self.clients[c].next_txn);
        let n_versions = self.rng.below(4) as usize;
        let mut n_created = self.rng.below(3) as usize;
        if n_versions == 0 && n_created == 0 {
            n_created = 1;
        }
        let mut serial = 0u32;
        let mut cell = |w: &mut World, next: u32| {
            let mut b = w.desc.new_object(w.layout.class.raw(), w.payload);
            put_u32(&mut b, 4, next);
            put_u32(&mut b, CELL_WRITER_AT, writer);
            put_u32(&mut b, CELL_TXN_AT, txn);
            put_u32(&mut b, CELL_SERIAL_AT, serial);
            serial += 1;
            Bytes::from(b)
        };
        let mut created = Vec::new();
        for i in 0..n_created {
            // Point at an existing cell, at another created one (tagged), or nowhere.
            let next = match self.rng.below(3) {
                0 => 0,
                1 if n_created > 1 => RawRef::tagged_word(((i + 1) % n_created) as u32),
                _ => self.cells[self.rng.below(self.cells.len() as u64) as usize].raw(),
            };
            created.push(cell(self, next));
        }
        let mut versions: Vec<(Oref, Bytes)> = Vec::new();
        for _ in 0..n_versions {
            // Accounts are written only by read-modify-write transactions (see [`ACCOUNTS`]).
            let n = (self.cells.len() - ACCOUNTS) as u64;
            let o = self.cells[ACCOUNTS + self.rng.below(n) as usize];
            if versions.iter().any(|(v, _)| *v == o) {
                continue;
            }
            let next = match self.rng.below(2) {
                0 => 0,
                _ => self.cells[self.rng.below(self.cells.len() as u64) as usize].raw(),
            };
            versions.push((o, cell(self, next)));
        }
        Commit { reads: Vec::new(), versions, created, id: None, leaves: Vec::new() }
    }

    fn at_client(&mut self, c: usize, conn: ConnId, msg: Msg) -> Result<(), Violation> {
        if let Some(r) = c.checked_sub(self.clients.len()) {
            return self.at_real_client(r, conn, msg);
        }
        if self.clients[c].conn != Some(conn) {
            return Ok(());
        }
        let think = 10 + self.rng.below(1_500);
        match msg {
            Msg::Broken => {
                self.client_broken(c);
                Ok(())
            }
            Msg::Reply(rid, reply, close) => self.client_reply(c, conn, (rid, reply, close), think),
            Msg::Connect | Msg::Request(..) => Err(Violation("a request sent to a client".into())),
        }
    }

    /// Client `c`'s connection broke: what it waited for is uncertain, and it reconnects
    /// later as a new session.
    fn client_broken(&mut self, c: usize) {
        if let Waiting::Early(_) = self.clients[c].waiting {
            // Records sent before a commit that was never sent: the server drops
            // them with the session, and nothing of the transaction was logged.
            self.clients[c].in_flight = None;
        }
        if let Waiting::Commit(t) = self.clients[c].waiting {
            // Uncertain: it may or may not have committed.
            let id = self.clients[c].id;
            self.trace(|| format!("client {id} txn {t} uncertain"));
            self.clients[c].done += 1;
            self.out.uncertain += 1;
            if let Some(txn) = self.clients[c].in_flight.take() {
                self.uncertain.push(((id, t), txn));
            }
        }
        // A transaction being prepared is abandoned with its session.
        self.clients[c].plan = None;
        self.progress.answered(c);
        let client = &mut self.clients[c];
        client.conn = None;
        client.waiting = Waiting::Nothing;
        // A new connection is a new session: nothing to acknowledge or demote there.
        client.new_session();
        let d = 500 + self.rng.below(5_000);
        self.at(d, Ev::ClientWake(c));
    }

    /// Client `c` got the reply `rid` (`close`: the server closes the connection after it);
    /// it thinks for `think` before its next step.
    fn client_reply(
        &mut self,
        c: usize,
        conn: ConnId,
        (rid, reply, close): (u64, Reply, bool),
        think: u64,
    ) -> Result<(), Violation> {
        let waiting = std::mem::replace(&mut self.clients[c].waiting, Waiting::Nothing);
        self.progress.answered(c);
        let id = self.clients[c].id;
        let sent = self.clients[c].next_id - 1;
        if rid != sent {
            return Err(Violation(format!(
                "client {id} got the reply to request {rid}, waiting for {sent}"
            )));
        }
        self.take_reply_sections(c, &reply, &waiting);
        match (waiting, reply.body) {
            (Waiting::Hello, ReplyBody::HelloOk(info)) => {
                self.clients[c].demotes = info.demotions;
            }
            (Waiting::Commit(t), ReplyBody::CommitRefused { code, .. }) if code.is_conflict() => {
                // Refused by concurrency control: it never reached the log, so the
                // checker must never see it.
                self.trace(|| format!("client {id} txn {t} refused ({code})"));
                self.clients[c].done += 1;
                self.out.refused += 1;
                if let Some(txn) = self.clients[c].in_flight.take() {
                    self.history.add_aborted(txn);
                }
            }
            (Waiting::Fetch(_), ReplyBody::Page { .. }) => {}
            (Waiting::Fetch(p), ReplyBody::Pages(pages)) if pages[0].0 == p => {}
            (Waiting::TxnFetch(p), ReplyBody::Pages(pages)) if pages[0].0 == p => {
                self.read_cells(c, p, &pages[0].1)?;
            }
            (Waiting::TxnFetch(p), ReplyBody::Page { page, bytes }) if p == page => {
                self.read_cells(c, page, &bytes)?;
                if self.cfg.commit_mode.is_page_based() {
                    self.clients[c].images.push((page, bytes));
                }
            }
            (Waiting::Early(t), ReplyBody::Ack) => {
                self.send_page_request(c, conn, t);
            }
            (Waiting::Commit(t), ReplyBody::CommitOk { lsn, created }) => {
                let mut txn = self.clients[c].in_flight.take().expect("a commit in flight");
                let read_only = txn.writes.is_empty() && created.is_empty();
                if !read_only && !self.checker.is_acked((id, t)) {
                    return Err(Violation(format!(
                        "client {id} got CommitOk (LSN {lsn}) for txn {t}, which the log does not hold acknowledged"
                    )));
                }
                self.trace(|| format!("client {id} txn {t} committed at {lsn}"));
                for o in &created {
                    txn = txn.write(u64::from(o.raw()), version_of(id, t));
                }
                if read_only {
                    self.history.add_committed(txn);
                } else {
                    self.history.add_committed(txn.ordered(lsn.0));
                }
                self.cells.extend(created);
                self.clients[c].done += 1;
                self.progress.committed(c, self.now);
            }
            (w, body) => {
                return Err(Violation(format!("client {id} waiting for {w:?} got {body:?}")));
            }
        }
        if close {
            return Err(Violation(format!("client {id}'s connection closed by the server")));
        }
        self.at(think, Ev::ClientWake(c));
        Ok(())
    }

    /// The sections every reply carries, applied before its body: invalidations (the cached
    /// copies go; acknowledgements are held while a transaction that read them is open),
    /// the demoted pages the server wants, and the pages it sent.
    fn take_reply_sections(&mut self, c: usize, reply: &Reply, waiting: &Waiting) {
        let client = &mut self.clients[c];
        for &o in &reply.invalidations {
            if client.holds(o) {
                client.held_acks.push(o);
            } else {
                client.acks.push(o);
            }
            // Applied before the body is used: the cached copy of the page goes.
            if let Some(p) = o.page() {
                client.drop_page(p);
            }
        }
        if matches!(waiting, Waiting::Commit(_)) {
            // The commit is answered: what its transaction read may be acknowledged.
            let held = std::mem::take(&mut client.held_acks);
            client.acks.extend(held);
            client.end_page_txn();
        }
        self.out.invalidations += reply.invalidations.len() as u64;
        // The reply answers the demotions reported on the request.
        let client = &mut self.clients[c];
        for (page, bytes) in std::mem::take(&mut client.noticed) {
            if reply.wanted.contains(&page) {
                client.to_send.push((page, bytes));
            }
        }
        let got: Vec<(PageId, Bytes)> = match &reply.body {
            ReplyBody::Page { page, bytes } => vec![(*page, bytes.clone())],
            ReplyBody::Pages(pages) => pages.clone(),
            _ => Vec::new(),
        };
        for (page, bytes) in got {
            if client.held.len() >= HELD_PAGES {
                client.held.remove(0);
            }
            client.held.push((page, bytes.clone()));
            if let Some(pf) = self.cfg.prefetch {
                client.cache_page(page, bytes, pf.cache_pages);
            }
        }
    }
}

/// When backups may be taken: the first 200 ms of virtual time, where every run has load.
const BACKUP_WINDOW_US: u64 = 200_000;

/// How long the server must have been up after the faults stopped before the calm begins:
/// longer than anything of the faulty part takes to land (a message, 0.4 ms; a disk
/// operation, 2 ms), so that the calm starts from a settled server.
const SETTLED_QUIET_US: u64 = 20_000;

/// Longest a crashed server may take to come back once the faults stopped: its restart
/// comes at most 21 ms after the crash, and recovery takes no virtual time.
const SETTLE_US_MAX: u64 = 100_000;

/// The calm's bounds ([`crate::liveness`]). A request of a fault-free run takes a round trip
/// and at most a few disk operations (each under 2.05 ms) and install rounds; one that waits
/// several ticks is stuck behind something. A client's commit needs a few requests and think
/// times of at most 1.5 ms; the commit bound leaves room for a run of conflicts with the
/// other clients (their refusals do not count as commits).
const CALM_BOUNDS: Bounds = Bounds { wait_us_max: 5 * TICK_US, commit_us_max: 10 * TICK_US };

/// Fetches `page` from a server that no client uses (a recovered backup), performing its
/// page reads at once.
fn fetch_from(node: &mut Node, now: u64, page: PageId) -> Result<Bytes, Violation> {
    let mut inputs = vec![Input::Direct { ticket: 1, op: DirectOp::Fetch(page) }];
    while let Some(input) = inputs.pop() {
        let mut fx = Vec::new();
        crate::step_checked(&mut node.core, now, input, &mut fx)?;
        for e in fx {
            match e {
                Effect::Done { result: DirectResult::Page(Ok(bytes)), .. } => return Ok(bytes),
                Effect::Done { result, .. } => {
                    return Err(Violation(format!("a backup's page {page}: {result:?}")));
                }
                Effect::Read { .. } => {
                    if let Some(i) = node.disk_side.perform(&e, &*node.log) {
                        inputs.push(i);
                    }
                }
                _ => {}
            }
        }
    }
    Err(Violation(format!("a backup's page {page} was never served")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The database every run starts from (`World::new`: nothing in it depends on the seed),
    /// judged by the offline checker once here rather than in every seed.
    #[test]
    fn a_new_database_passes_the_offline_check() {
        let cfg = SimConfig::for_seed(1);
        let disk = MemDisk::new();
        io::create(&disk, cfg.page_size, ServerId(1)).unwrap();
        crate::check::offline(&disk, "a new database").unwrap();
    }
}
