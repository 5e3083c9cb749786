//! Bounds of the server core, with the reasons for their values.
//!
//! The core cannot see the log it writes to (it depends on no storage crate), so the three log
//! figures it budgets with are restated here; the driver (`thor-server`'s `limits`) checks at
//! compile time that they equal thor-storage's.

/// Most objects one commit may write (versions plus created objects). T2b on the OO7 medium
/// database writes 100,000 objects in one transaction; a bound well above keeps a runaway client
/// from exhausting the server.
pub const COMMIT_OBJECTS_MAX: usize = 1 << 20;

/// Most bytes of object data in one commit. A commit must fit in the log record limit and in the
/// MOB; 256 MiB is far above any benchmark transaction.
pub const COMMIT_BYTES_MAX: usize = 256 << 20;

/// Default MOB budget. Thor's experiments used 6 MB; memory is cheaper now and a bigger MOB
/// absorbs more writes per page.
pub const MOB_BYTES_DEFAULT: usize = 64 << 20;

/// The flusher starts when the MOB holds more than this fraction (percent) of its budget.
pub const FLUSH_START_PERCENT: usize = 50;

/// Default page cache budget (the papers' server had 30 MB of page cache).
pub const PAGE_CACHE_BYTES_DEFAULT: usize = 64 << 20;

/// Pages the flusher installs per round: enough to batch writes into long runs, few enough that
/// one round's memory (two copies of each page) stays small.
pub const FLUSH_BATCH_PAGES_DEFAULT: usize = 256;

const _: () = assert!(FLUSH_START_PERCENT > 0 && FLUSH_START_PERCENT < 100);
const _: () = assert!(COMMIT_BYTES_MAX <= u32::MAX as usize);

/// How long the MOB may sit unchanged before it is installed anyway: when no commit arrived for
/// this long and none is in flight, installing costs nobody anything and keeps the log short,
/// so that recovery after a crash is fast.
pub const IDLE_FLUSH_AFTER_US: u64 = 500_000;

/// The largest frame a connection may send before its session is open (`Hello` succeeded):
/// the largest `Hello` (header, token, name, empty piggyback section) with room to spare. A
/// peer that has not authenticated cannot make the server buffer more than this.
pub const PRE_HELLO_FRAME_BYTES_MAX: usize = 4 << 10;

// The largest Hello must fit.
const _: () = assert!(
    PRE_HELLO_FRAME_BYTES_MAX
        > thor_wire::limits::FRAME_HEADER_BYTES
            + 32
            + thor_wire::limits::TOKEN_BYTES_MAX
            + thor_wire::limits::CLIENT_NAME_BYTES_MAX
);

/// Sessions (client connections) a server handler allows at once, by default. Each session
/// can make the server buffer one frame (up to the frame limit) and hold one blocking thread
/// while its commit waits for the log; 256 keeps that bounded on a small machine while being
/// far more clients than the papers' experiments ran.
pub const SESSIONS_MAX_DEFAULT: usize = 256;

/// Most transactions in the validation queue (concurrency control). A transaction is at most a
/// few hundred bytes of queue plus 4 bytes per object it read or wrote; beyond this many, the
/// oldest committed ones leave and the threshold timestamp rises above them.
pub const VQ_ENTRIES_MAX: usize = 16_384;

/// Most objects a transaction's reads are recorded for one by one in concurrency control's
/// per-object index (`CcConfig::reads_tracked_max`); a transaction that read more raises the
/// validation threshold to its timestamp instead. 65,536 objects: a few MB of index at most per
/// transaction, far above what interactive transactions read, while a traversal of a whole
/// database (OO7's T1 reads 437,000) costs no index of its size.
pub const READS_TRACKED_MAX: usize = 65_536;

/// Committed transactions older than this leave the validation queue, raising its threshold: a
/// transaction must reach validation within this long of its timestamp (10 s; the paper
/// suggests minutes for a wide-area system, where prepares travel between servers).
pub const VQ_THRESHOLD_DELTA_US: u64 = 10_000_000;

/// Most page entries of one client's directory before it is coarsened into page groups: 1 GiB
/// of 8 KB pages, a large client cache.
pub const DIRECTORY_PAGES_MAX: usize = 131_072;

/// Fair retries (`core::fair`): how long an armed claim holds back other sessions' commits
/// that write its object, and the longest a held commit waits in all. A claim is armed by its
/// holder's first request after its loss (after the client's backoff), which fetches the new
/// version or commits again; the hold must cover that fetch, the commit and its group commit's
/// fsync: under a millisecond on loopback, a few on a local network with a disk that syncs in
/// 10 ms. 20 ms leaves room for those, and a claim whose holder does not commit in time delays
/// its rivals that long once.
pub const FAIR_HOLD_US: u64 = 20_000;

/// Fair retries: how long a claim waits to be armed by its holder's next request, holding no
/// one back meanwhile: the holder's backoff, at most 50 ms with the client's defaults
/// (`thor_client::SessionConfig::run_backoff_max`), with room. A holder that does not come
/// back in time (its application gave up) loses the claim.
pub const FAIR_ARM_WITHIN_US: u64 = 80_000;

/// Fair retries: consecutive losses (refusals by validation, or aborts by an invalidation the
/// client reports) after which a session gets a claim on the object it lost on. Two: one loss
/// is ordinary contention that a retry usually wins; a second in a row means a rival is
/// committing back to back, which is when one client starved the other (10,803 commits
/// against 1 in 5 s, issue 32). Claiming at the first loss made every conflict hold commits
/// back.
pub const FAIR_LOSSES_MIN: u32 = 2;

/// Fair retries: most objects one session holds claims on at once; a further claim replaces its
/// oldest. A transaction that keeps losing usually loses on one or two hot objects; four lets
/// a transfer between two hot accounts claim both, and bounds the claims to four per session.
pub const FAIR_CLAIMS_PER_SESSION_MAX: usize = 4;

/// Fair retries: most commits held back at once. Each session has at most one commit in
/// flight, so the session limit bounds them already; this bound is a second guard that keeps
/// the held list (scanned once per step) small whatever the session limit. Past it a commit
/// is validated at once, as without fair retries.
pub const FAIR_HELD_MAX: usize = 1024;

/// Most sessions waiting in one object's line for a claim (fair retries, `core::fair`, *Many
/// losers*). A session waits in one line at most, so all lines together hold at most one
/// entry per session; the cap bounds one line's walk. A loser that finds the line full
/// competes as it would without fair retries.
pub const FAIR_LINE_MAX: usize = 256;

const _: () = assert!(FAIR_LOSSES_MIN >= 1);
const _: () = assert!(FAIR_HOLD_US < VQ_THRESHOLD_DELTA_US);
const _: () = assert!(FAIR_ARM_WITHIN_US < VQ_THRESHOLD_DELTA_US);

/// Most unacknowledged invalidations of one client before its session expires: far more than
/// a client that reads its replies ever leaves, and 4 MiB of orefs at most.
pub const INVALID_SET_MAX: usize = 1 << 20;

/// Most changes the resume history keeps (`core::resume`): how far back a client whose
/// connection broke can be told what changed. 65,536 commits are minutes of a busy server;
/// a change's entry is a few dozen bytes besides its orefs.
pub const HISTORY_CHANGES_MAX: usize = 1 << 16;

/// Most orefs (objects written, and created objects of commits with an id) the resume
/// history keeps: 4 MiB, as the invalid sets' bound; a resume looks at each at most once.
pub const HISTORY_OREFS_MAX: usize = 1 << 20;

/// Most sent-page records kept for demotion, over all sessions (`core::demote`): a keyed hash
/// and a generation, about 40 bytes each with the map, so at most 20 MiB. 2^19 pages of 8 KB
/// is 4 GiB of client caches, far above what the sessions a server admits hold in practice.
pub const DEMOTE_RECORDS_MAX: usize = 1 << 19;

/// Most pages the demotion bookkeeping remembers as written since they were sent. Past it the
/// marks are dropped and every earlier sending counts as stale: a commit stream that writes
/// this many distinct pages between a fetch and its demotion makes the demotion useless anyway.
pub const DEMOTE_CHANGED_MAX: usize = 1 << 16;

/// Most credentials a server holds (`thor server --credentials`). A credential is a few
/// hundred bytes, and `Hello` compares the token with every one of them, so the bound keeps
/// that comparison (about a microsecond per thousand credentials of 32-byte secrets) from
/// becoming work an unauthenticated client can multiply; 1024 is far more than the clients,
/// operators and peers one database has.
pub const CREDENTIALS_MAX: usize = 1024;

/// The longest credential name (it appears in logs and in `Forbidden` messages).
pub const CREDENTIAL_NAME_BYTES_MAX: usize = 64;

/// The shortest secret a credentials file may give: 16 bytes (128 bits if random), so that
/// guessing one over the network is hopeless. The single token (`--token-file`, `THOR_TOKEN`)
/// keeps today's rule, any non-empty string.
pub const CREDENTIAL_SECRET_BYTES_MIN: usize = 16;

/// The largest credentials file read: a thousand credentials of the longest name and secret
/// fit (about 1.1 MB); a larger file is refused before it is read whole.
pub const CREDENTIALS_FILE_BYTES_MAX: u64 = 2 << 20;

const _: () = assert!(CREDENTIAL_SECRET_BYTES_MIN <= thor_wire::limits::TOKEN_BYTES_MAX);
const _: () = assert!(
    (CREDENTIALS_MAX * (CREDENTIAL_NAME_BYTES_MAX + 16 + thor_wire::limits::TOKEN_BYTES_MAX + 3))
        as u64
        <= CREDENTIALS_FILE_BYTES_MAX
);
/// Sessions waiting for `Hello` may hold at most one slot in this many (a quarter of
/// `sessions_max`, at least one): connections that have not authenticated cannot take the
/// server's slots from clients. Beyond the share, the oldest of them is closed for the newer
/// (`core::sessions`, *Slots*). A quarter leaves room for a burst of clients connecting at
/// once, each waiting a round trip for its `Hello` to arrive.
pub const PRE_HELLO_SESSIONS_SHARE: usize = 4;

/// Most sessions kept while their connection closes (their last reply on its way, no slot
/// held). The driver reports each gone within its write timeout; past this many, new
/// connections are refused until it does, so that closing connections cannot grow the
/// session table without bound.
pub const CLOSING_SESSIONS_MAX: usize = 1024;

/// Most ids remembered of the requests a connection sent past the in-flight bound, each to be
/// answered with an error naming it; later ones are only counted, and named by number in the
/// last error. Twice the bound: a client that pipelines past it by mistake (a counting bug)
/// is told which requests were lost, one by one, while a flood costs 8 bytes a request at most
/// this many times.
pub const DROPPED_IDS_MAX: usize = 2 * thor_wire::limits::IN_FLIGHT_MAX;

const _: () = assert!(PRE_HELLO_SESSIONS_SHARE >= 2);
const _: () = assert!(DROPPED_IDS_MAX >= 1);

/// Bytes the log adds to each record it stores (its header): the core counts them when it
/// budgets the unsynced bytes of the log (`CoreConfig::log_buffer_bytes`). Equal to
/// `thor_storage::limits::RECORD_HEADER_BYTES` (checked by the driver).
pub const LOG_RECORD_HEADER_BYTES: usize = 20;

/// Default `CoreConfig::log_buffer_bytes`: the driver's default log buffer
/// (`thor_storage::limits::BUFFER_BYTES_MAX_DEFAULT`, checked by the driver).
pub const LOG_BUFFER_BYTES_DEFAULT: usize = 16 * 1024 * 1024;

/// Default `CoreConfig::record_bytes_max`: the largest record the driver's log accepts by
/// default (`thor_storage::limits::RECORD_BYTES_MAX_DEFAULT`, checked by the driver).
pub const LOG_RECORD_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// Bytes a record of `payload_len` bytes takes in the log (payload and header).
pub const fn log_record_len(payload_len: usize) -> usize {
    LOG_RECORD_HEADER_BYTES + payload_len
}

/// Most two-phase transactions a coordinator remembers as aborted (`TwoPcConfig::tombstones_max`
/// by default): presumed-abort answers, its own aborts, and *early no votes* (a participant's
/// no that arrived before the client's `Prepare`, so that the prepare is refused at once
/// instead of prepared and held until the vote timeout). A tombstone is 12 bytes in a B-tree,
/// so 65,536 cost about 1.5 MiB at most. Tombstones also *expire*: one whose timestamp falls
/// below the validation threshold is dropped, since a prepare at that timestamp is refused by
/// validation anyway and a vote or query about it is answered abort (`core::twopc`,
/// *Presumed abort*); the threshold trails the clock by at most
/// [`VQ_THRESHOLD_DELTA_US`], so a tombstone lives about that long. Forgetting one early (the
/// cap) is safe: it only brings back the wait for the vote timeout.
pub const TWOPC_TOMBSTONES_MAX: usize = 1 << 16;

/// Most read-only two-phase parts remembered as having voted yes, so that a coordinator that
/// lost the vote and asks for it again hears yes (`core::twopc`, *A vote that will never
/// come*). They are kept for the vote timeout (2 s), so 8,192 covers 4,096 read-only parts a
/// second, at 24 bytes each (192 KiB). Forgetting one early is safe: the answer is then no and
/// the transaction aborts, as every such transaction did before.
pub const TWOPC_READ_ONLY_YES_MAX: usize = 8192;

/// How far ahead of this server's clock a transaction is validated, in microseconds: a
/// two-phase `Prepare` whose client timestamp is further ahead waits until the clock is this
/// close (at most `TwoPcConfig::future_max_us`, beyond which it is refused). A timestamp the
/// server chooses is the clock, or one microsecond after the last one given out when several
/// validate within a microsecond: it runs ahead of the clock only while the server validates
/// more than one transaction per microsecond of clock, and by one microsecond per such
/// transaction; a thousand of them in a row is far beyond what a server does (a validation
/// costs tens of microseconds). So every timestamp validated before a crash is at most the
/// clock then plus this lead, and a restarted server refuses client timestamps only up to its
/// clock at recovery plus this lead (`Core::recovered_at`), instead of the 200 ms
/// (`future_max_us`) it refused before: recovery itself takes longer than 1 ms (11 ms
/// measured, issue 32), so in practice nothing is refused.
pub const VALIDATION_LEAD_MAX_US: u64 = 1_000;
