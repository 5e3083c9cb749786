//! thor-sim: the deterministic whole-cluster simulation.
//!
//! The real server core ([`thor_server::Core`]) runs with simulated clients, a simulated
//! network and a simulated disk ([`thor_storage::MemDisk`], with its crash model), all in one
//! thread, driven by one seeded scheduler. Nothing reads a real clock or a real device: time is
//! a virtual microsecond counter, and every random choice (latencies, which client acts, what it
//! commits, when messages are lost, when and how the server crashes) comes from one
//! [`thor_storage::SplitMix64`] stream. So a seed replays a run exactly, and a failing seed is a
//! bug report.
//!
//! ```text
//!                         event queue (virtual time, then insertion order)
//!    clients ── Connect, Request ──► network ──► Core::step ──► effects
//!       ▲                          (latency,          │  Reply ─────────► network ──► client
//!       └──── Reply, broken conn ── loss = broken     │  Append ────────► log (MemDisk), sync later
//!                                   connection)       │  Read, Install,
//!                                                     │  Checkpoint ────► disk I/O later
//!    faults: a crash at any step (MemDisk loses what POSIX allows; an I/O may die halfway),
//!            then recovery from the disk; lost connections; clients reconnect
//! ```
//!
//! [`world`] is the simulation; [`check`] is the checker that judges it: after every crash and
//! at the end, the recovered state must be exactly the state of a prefix of the log that holds
//! every acknowledged commit (so every acknowledged commit is present, and no unacknowledged one
//! is partly visible), and every page a client is sent must show exactly the commits that were
//! durable when it was composed.
//!
//! The history checker ([`thor_history`], its own crate, which the laboratory's bank clients use
//! too) is a second, independent judge, of isolation rather than durability: given the
//! transactions the clients committed (what each read and wrote) it proves the history
//! serializable, or names the anomaly (a lost update, a dirty read, a dependency cycle).
//!
//! Every server is stepped through one function (`step_checked`): after each step the core's
//! own invariants are asserted ([`thor_server::Core::check_invariants`]), and a tick that
//! arrives before the core's deadline ([`thor_server::Core::next_deadline_us`]) must do
//! nothing. A run's trace hash covers every event, every message's contents and every log
//! record's bytes; `tests/cluster.rs` runs seeds in two processes and compares them. With the
//! `mutants` feature, `with_mutant` runs deliberately broken protocols, and
//! `tests/mutants.rs` shows that the checkers catch each.
//!
//! # Mechanisms and invariants (the detail behind ARCHITECTURE.md)
//!
//! The deterministic whole-cluster simulation (`world.rs`): the real `thor_server::Core`, several
//! simulated clients (each commits new items and rewrites its own counters, and fetches pages),
//! a simulated network (latency, reordering, a lost message breaks the connection and the client
//! reconnects as over TCP) and `MemDisk` with its crash model, all in one thread under one seeded
//! scheduler with virtual time. The server crashes at random steps (an I/O may die halfway; the
//! disk keeps any subset of unsynced writes, torn at sector granularity) and recovers with
//! `io::recover` on the same disk. `check.rs` judges every run: after each crash and at the end,
//! the recovered state is exactly the state after some prefix of the log that contains every
//! acknowledged commit, and every fetched page shows exactly the commits that were durable when it
//! was composed. Backups of the live server are taken at random times (0 to 2 per seed); each is
//! crashed (losing whatever it did not sync), recovered and checked the same way: exactly the log
//! up to the LSN it claims, with every commit acknowledged before it. A run's trace hashes to a number, so a test shows that a seed replays exactly; a
//! failure prints `THOR_SIM_SEED=<n> cargo test -p thor-sim --test cluster replay -- --nocapture`
//! (with `THOR_SIM_MODE=<mode>` and `--test page_modes` in a page mode) and the equivalent `thor
//! sim cluster --seed <n> [--commit-mode <mode>] --trace`.
//!
//! *Architecture Invariant:* nothing in a run reads a real clock, thread or device; every random
//! choice comes from the seed.
//!
//! Every world runs its servers through `server.rs` (`server::Process`: the disk, the process
//! started by recovery, the epoch; the one crash model; `settle_now`, the step whose effects are
//! performed at once; the event queue), the first step of issue 32's merge of the worlds into one
//! harness of N servers. The second: the cluster world (`twopc.rs`) runs N = 1 to 3 servers with
//! simulated and real clients together. The single-server world (`world.rs`) is still its own
//! event loop, with what the cluster world does not have: page modes, prefetch and demotion in
//! the simulated clients, the durability checker (`check.rs`), backups, and real clients that
//! create objects and resume commits in doubt.
//!
//! `group.rs` is the replicated-server world (issue 33, a first slice): one server as a group
//! of three `thor_replica::Member`s (real cores over their own `MemDisk`s and the group's
//! journals), replica crashes and restarts, partitions (leader isolated, a minority, everyone
//! apart), message loss, delay and reordering between replicas, and a client that commits to
//! whichever replica serves; judged for liveness after healing, no acknowledged commit lost,
//! and the same pages at every replica that applied the same index. Its draws are a stream
//! of their own, so the other worlds' seeds replay as before. `tests/groups.rs` runs 10,000
//! seeds (`THOR_SIM_GROUP_SEEDS` for more) and shows a member that acknowledges when deposed
//! fails within a few.
//!
//! The cluster world runs groups too (`twopc/groups.rs`, `TwoPcSimConfig::for_seed_groups`):
//! every server id a group of one, three or five `Member`s, with the cluster world's simulated
//! and real clients (`ClientCore`) running transfers and audits across groups with two-phase
//! commit. A replica that does not serve answers `Error(NotLeader)` and closes; the client
//! connects to the hinted (or next) replica and the `ClientCore` resumes its session. Peer
//! messages go to the destination group's serving leader (dropped while none serves).
//! Faults: replica crashes and restarts (unsynced writes lost), partitions (leader isolated, a
//! minority, everyone apart), Raft message loss, delay and reordering, and coordinator groups'
//! leaders killed between a prepare and its decision. Judged by the cluster world's checks
//! (serializability in timestamp order, money, liveness after the faults stop) and, at the
//! end, the same pages at every replica that applied the same index. Both replicated worlds
//! run their replicas through `replicas.rs` (opening from the disk alone, disk effects
//! performed at once, image copies, committed pages). `tests/twopc_groups.rs` runs its seeds
//! (`THOR_SIM_GROUP_2PC_SEEDS`), the scenario
//! `participant_learns_outcome_from_new_coordinator_leader` and the `AcknowledgeWhenDeposed`
//! mutant, caught by the history check. Seed 27451 (found in a 40,000-seed sweep) is a
//! scenario of its own: a leader cut off but not yet deposed would acknowledge a coordinator's
//! `Decide` alone for a part it never saw; the member now holds such answers until the group
//! confirms it leads (`thor_replica::member`, "Answers given alone").
//!
//! Every run checks liveness too (`liveness.rs`, issue 32): once the faults of a run stop and
//! the cluster has settled, every client runs again, and no request may wait, and no client go
//! without a commit, longer than a bound; a run that breaks it fails like a safety violation,
//! with its replay command. The single-server world checks it with `liveness::Progress`; the
//! two-phase world also checks that no server holds a prepared part longer than half the vote
//! timeout.
//!
//! `twopc.rs` is the cluster of one to three servers: real cores over their own `MemDisk`s,
//! clients whose transfers take an account at one server and one at another (sometimes reading a
//! third server's too) and whose audits read two servers, all committed with two-phase commit
//! (with one server, a quarter of the seeds, single-server commits ordered by LSN); beside the
//! hand-written clients, in two thirds of the seeds, *real* clients (`twopc/real.rs`: one
//! `thor_client::proto::ClientCore` per server, two-phase commit through the cores'
//! `prepare`/`finish_part`, sessions resumed after broken connections);
//! crashes of any server at any event and inside syncs, installs and checkpoints; lost client
//! messages (a broken connection, after which a client discards what it read on that session);
//! server-to-server messages lost, delayed and reordered. At the end faults stop, everything in
//! doubt is decided, and the run is judged: the history (with the clients' timestamps as order
//! keys) must be conflict-serializable *in timestamp order* and end in the final state of every
//! server, so a transfer committed at one server only is an anomaly; and the money is conserved.
//! Every server knows the others as peers (`TwoPcConfig::peers`). `tests/twopc.rs` runs 10,000
//! seeds and 5,000 more with real clients only (`THOR_SIM_TWOPC_SEEDS` for more: 100,000 and
//! 50,000 passed in 279 s in release on a shared 2-core machine); deliberately
//! broken protocols (a coordinator that skips the writers' votes, a participant that
//! acknowledges before its decision is durable) fail within a few seeds. A real client must
//! drop its session at a server whose part of a transaction that may have committed it ended
//! without the decision (the core restores the copies from before the transaction, which the
//! server never invalidates for the writer); `tests/twopc.rs` shows the checker catching a
//! client that keeps it.
//!
//! The server may run a page-based commit mode (`SimConfig::for_seed_in(seed, mode)`; the page
//! settings are drawn from a stream of their own so `obj` seeds replay as before): the clients
//! then fetch every page they write and commit as thor-client's page modes do, built in
//! `pagemode.rs` with thor-recovery's recovery buffer, differ and encoder (a small buffer makes
//! `PageRecords` with undo go before the `PageCommit`; in half the seeds clients hold at most one
//! or two written pages and steal the oldest, sending its records and, ESM and WPL, the page
//! whole early; ESM ships the pages sealed whole; WPL ships
//! the written pages whole and nothing else, with a small WPL table drawn per seed), and
//! hold the acknowledgement of an invalidation on a page they diff against until their commit
//! is answered. The durability checker learns a WPL commit from its page images (every object
//! equal to the log so far except the transaction's new versions, credited at its commit record).
//! `tests/page_modes.rs` runs 500 seeds per mode (`THOR_SIM_SEEDS` per mode for
//! more), each judged by both the durability checker and the serializability checker.
//!
//! A third of the seeds run with prefetch (`SimConfig::prefetch`, `SimPrefetch`, drawn from a
//! stream of its own; `obj` mode only, as thor-client): clients fetch with `Prefetch`, keep every
//! page they get in a small cache and read cells from it without fetching, drop a page when an
//! invalidation names one of its objects or for room, and report it discarded only when neither
//! the plan nor the commit request of the open transaction read it. Every page of a `Pages`
//! reply is checked by the durability checker, and reads from cached copies are judged by the
//! serializability checker: a server that skipped the registration of prefetched pages fails
//! within 20 seeds, and so did a client that reported a page discarded on the commit that read it.
//!
//! `script.rs` is the scenario language for hand-written cases (golden scripts, `goldenscript`):
//! the two-phase world's servers stepped one message at a time, with crashes, restarts and time
//! said by the script; `tests/scenarios.rs` runs the scripts of `tests/scenarios/`
//! (`early_no_vote_aborts_at_once`, `restarted_coordinator_presumes_abort`,
//! `restart_serves_without_a_refusal_window`,
//! `a_restarted_participant_learns_the_outcome_by_asking`), and `tests/mutants.rs` shows the
//! first one's output change under the mutant that drops an early no vote.
//!
//! `acked.rs` is issue 30's differential harness between the wire decoder, the core and
//! recovery: any bytes are a *program* of requests (commits, two-phase prepares, whole-page
//! commits, raw payloads, honest peers' messages, install rounds, time passing) built from a small
//! prebuilt database and edge-case words (null, page 0, tagged, past the tail, huge counts),
//! encoded by hand, damaged byte by byte, decoded by the wire decoder and run by the real
//! `Engine` on a `MemDisk`; then every log record must decode with recovery's decoders, the
//! engine must recover from a crash and serve exactly the pages it served, and a backup must
//! open and serve them too. The fuzz target `fuzz/fuzz_targets/recover.rs`, the bounded run
//! `tests/acked.rs` (20,000 programs) and thor-cli's property test call it; `acked::trace`
//! prints what one input does.
//!
//! *API Boundary:* `acked::{run, run_with, trace, fixture, check_log, AckedRun, AckedFailure}`;
//! `SimConfig::{for_seed, for_seed_in}`, `SimPrefetch`, `PageClientConfig`, `run`, `Outcome`,
//! `SimFailure`, `Violation`; `twopc::{TwoPcSimConfig, run_twopc, TwoPcOutcome, TwoPcFailure,
//! InDoubtKill, KillPoint}`; `group::{run_group, run_group_with, GroupOutcome}`;
//! `script::Scenario` (a `goldenscript::Runner`);
//! the tests in `tests/cluster.rs` (10,000 seeds by default, `THOR_SIM_SEEDS` for more),
//! `tests/page_modes.rs`, `tests/twopc.rs`, `tests/groups.rs` and `tests/twopc_groups.rs`.

pub mod acked;
pub mod check;
mod digest;
pub mod group;
mod liveness;
pub mod pagemode;
mod replicas;
pub mod script;
mod server;
pub mod twopc;
pub mod world;

pub use check::Violation;
pub(crate) use digest::{digest_bytes, digest_reply, digest_request};

use thor_server::{Core, Effect, Input};

/// Steps `core` as every simulated server is stepped: the step, then the core's invariants
/// ([`Core::check_invariants`]: a debug build's `Core::step` asserts them itself, a release
/// build's does not, so the simulation does), then the check that its deadline is complete: a
/// [`Input::Tick`] before [`Core::next_deadline_us`] must do nothing, since a driver that
/// sleeps to the deadline would never send it.
pub(crate) fn step_checked(
    core: &mut Core,
    now: u64,
    input: Input,
    fx: &mut Vec<Effect>,
) -> Result<(), Violation> {
    let early_tick =
        matches!(input, Input::Tick) && core.next_deadline_us().is_none_or(|d| d > now);
    let first = fx.len();
    core.step(now, input, fx);
    if !cfg!(debug_assertions) {
        core.check_invariants();
    }
    if early_tick && fx.len() > first {
        return Err(Violation(format!(
            "a tick at {now} before the core's deadline ({:?}) acted: {:?}",
            core.next_deadline_us(),
            &fx[first..]
        )));
    }
    Ok(())
}

/// Runs `f` with every server the simulation starts on this thread running mutant `m` (a
/// deliberately broken protocol, see `thor_server_core`'s `mutants`): the mutant tests use it
/// to show that the checkers catch each.
#[cfg(feature = "mutants")]
pub fn with_mutant<T>(m: thor_server::Mutant, f: impl FnOnce() -> T) -> T {
    MUTANT.with(|c| c.set(Some(m)));
    let out = f();
    MUTANT.with(|c| c.set(None));
    out
}

#[cfg(feature = "mutants")]
thread_local! {
    /// The mutant of [`with_mutant`], per thread: each test's runs are its own.
    static MUTANT: std::cell::Cell<Option<thor_server::Mutant>> = const { std::cell::Cell::new(None) };
}

/// Applies [`with_mutant`]'s mutant, if any, to a core the simulation just started.
#[cfg(feature = "mutants")]
pub(crate) fn mutate(core: &mut Core) {
    if let Some(m) = MUTANT.with(|c| c.get()) {
        core.set_mutant(m);
    }
}

/// Without the `mutants` feature no core is ever mutated.
#[cfg(not(feature = "mutants"))]
pub(crate) fn mutate(_: &mut Core) {}

/// A key for the core's keyed hash ([`thor_server::CoreConfig::hash_key`]) from a run's seed,
/// so that nothing in a run comes from the OS.
pub(crate) fn hash_key(seed: u64) -> [u64; 2] {
    [seed ^ 0x7468_6f72_2d73_696d, seed.rotate_left(32) ^ 0x6861_7368_2d6b_6579]
}
pub use pagemode::PageClientConfig;
pub use world::{Outcome, SimConfig, SimFailure, SimPrefetch, run};
