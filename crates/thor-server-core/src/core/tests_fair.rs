//! Scenario tests of fair retries (`super::fair`): clients that follow thor's client protocol
//! (cache, invalidations and their acks, fetch after an invalidation, jittered exponential
//! backoff after a refusal) on a simulated clock and network, against the real core. Every
//! run is deterministic: the clients' jitter comes from fixed seeds and the network delays
//! every message by the same latency.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use thor_core::{Oref, PageView};
use thor_wire::{Contention, ReplyBody, Request, RequestBody};

use super::fair::FairConfig;
use super::tests::{Harness, config, two_items, txn};
use super::*;

/// One-way latency of every message, microseconds (loopback TCP is a few tens).
const LATENCY_US: u64 = 50;
/// The client's backoff after its first conflict, and its cap: `SessionConfig`'s defaults.
const BACKOFF_MIN_US: u64 = 100;
const BACKOFF_MAX_US: u64 = 50_000;

#[derive(Debug)]
enum Event {
    /// A request reaches the server.
    Arrive { conn: ConnId, id: u64, req: Request },
    /// A reply reaches its client.
    Deliver { conn: ConnId, reply: thor_wire::Reply },
    /// A client starts an attempt (after its backoff, or at once after a commit).
    Start { conn: ConnId },
}

/// A client incrementing one counter for ever, as `Session::run` does with a large retry
/// budget.
struct Client {
    /// The counter's value in its cache (`None`: not cached, fetch it first).
    cached: Option<u32>,
    /// Invalidations applied, to acknowledge on the next request.
    acks: Vec<Oref>,
    /// Conflicts in a row of the current transaction (its backoff grows with them).
    failures: u32,
    /// Aborts found at the client (an invalidation of the counter arrived on a fetch's reply
    /// after the attempt read it), not yet reported.
    unreported: Contention,
    /// The value the commit in flight writes.
    writing: u32,
    commits: u64,
    next_id: u64,
    rng: u64,
}

impl Client {
    fn new(seed: u64) -> Client {
        Client {
            cached: None,
            acks: Vec::new(),
            failures: 0,
            unreported: Contention::default(),
            writing: 0,
            commits: 0,
            next_id: 10,
            rng: seed,
        }
    }

    /// The client's jittered exponential backoff (`Inner::backoff`).
    fn backoff(&mut self) -> u64 {
        let doubling = 1u64 << (self.failures - 1).min(20);
        let cap = BACKOFF_MIN_US.saturating_mul(doubling).min(BACKOFF_MAX_US);
        let half = cap / 2;
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        cap - half + z % (half + 1)
    }

    fn request(&mut self, body: RequestBody) -> (u64, Request) {
        let mut req = Request::new(body);
        req.piggyback.acks = std::mem::take(&mut self.acks);
        if !self.unreported.is_empty() {
            req.piggyback.contention = Some(std::mem::take(&mut self.unreported));
        }
        self.next_id += 1;
        (self.next_id, req)
    }
}

/// What a run did.
#[derive(Debug)]
struct Outcome {
    /// Each client's commits.
    commits: Vec<u64>,
    /// What the counter gained during the run, read by a third session.
    value: u32,
    fair: fair::FairCounters,
}

/// `n` clients increment one counter for `run_us` of simulated time against a core with fair
/// retries set to `fair`.
fn hot_counter(fair: FairConfig, run_us: u64, n: usize) -> Outcome {
    let cfg = CoreConfig { cc: cc::CcConfig { fair, ..cc::CcConfig::default() }, ..config() };
    let mut h = Harness::new(cfg);
    let reader = n as ConnId + 1;
    for conn in 1..=reader {
        h.connect(conn, b"");
    }
    let (class, x, _) = two_items(&mut h, reader);
    let page = x.page().unwrap();
    let initial = counter_value(&mut h, x, reader);
    let start = h.now + 1;
    let mut clients: Vec<Client> = (1..=n as u64).map(|i| Client::new(0x5EED_0000 + i)).collect();
    let mut queue = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<_>, at: u64, e: Event| {
        seq += 1;
        q.push(Reverse((at, seq, EventBox(e))));
    };
    // Each client starts a little after the one before, so that client 1 is the first to
    // commit back to back.
    for conn in 1..=n as ConnId {
        push(&mut queue, start + (conn - 1) * LATENCY_US, Event::Start { conn });
    }
    let end = start + run_us;
    let mut now = start;
    let mut events = 0u64;
    loop {
        // The core's own deadline (a held commit's wait) comes as a tick.
        let next = queue.peek().map(|Reverse((t, _, _))| *t);
        if let Some(d) = h.core.next_deadline_us()
            && d > now
            && next.is_none_or(|t| d < t)
        {
            now = d;
            for (conn, reply) in serve(&mut h, now, Input::Tick) {
                push(&mut queue, now + LATENCY_US, Event::Deliver { conn, reply });
            }
            continue;
        }
        let Some(Reverse((t, _, EventBox(e)))) = queue.pop() else { break };
        now = t;
        if t >= end && matches!(e, Event::Start { .. }) {
            // Time is up: no new attempt; what is in flight completes.
            continue;
        }
        events += 1;
        assert!(events < 10_000_000, "the run is bounded");
        match e {
            Event::Arrive { conn, id, req } => {
                for (conn, reply) in serve(&mut h, now, Input::Request { conn, id, req }) {
                    push(&mut queue, now + LATENCY_US, Event::Deliver { conn, reply });
                }
            }
            Event::Start { conn } => {
                let c = &mut clients[conn as usize - 1];
                let body = match c.cached {
                    None => RequestBody::Fetch { page },
                    Some(v) => {
                        c.writing = v + 1;
                        txn(class, &[x], &[x], v + 1)
                    }
                };
                let (id, req) = c.request(body);
                push(&mut queue, now + LATENCY_US, Event::Arrive { conn, id, req });
            }
            Event::Deliver { conn, reply } => {
                let c = &mut clients[conn as usize - 1];
                // Invalidations first, as the client applies them before the reply's body. (A
                // transaction here makes no request between its read and its commit, so no
                // invalidation dooms it at the client: its losses are refusals.)
                for o in &reply.invalidations {
                    if *o == x {
                        c.cached = None;
                    }
                    c.acks.push(*o);
                }
                match reply.body {
                    ReplyBody::Page { bytes, .. } => {
                        let view = PageView::parse(&bytes).unwrap();
                        let obj = view.object(x.oid()).unwrap();
                        let v = u32::from_le_bytes(obj[8..12].try_into().unwrap());
                        c.cached = Some(v);
                        c.writing = v + 1;
                        let (id, req) = c.request(txn(class, &[x], &[x], v + 1));
                        push(&mut queue, now + LATENCY_US, Event::Arrive { conn, id, req });
                    }
                    ReplyBody::CommitOk { .. } => {
                        c.commits += 1;
                        c.failures = 0;
                        c.cached = Some(c.writing);
                        push(&mut queue, now, Event::Start { conn });
                    }
                    ReplyBody::CommitRefused { code, .. } => {
                        assert!(code.is_conflict(), "{code:?}");
                        c.failures += 1;
                        c.unreported.retries += 1;
                        let wait = c.backoff();
                        push(&mut queue, now + wait, Event::Start { conn });
                    }
                    other => panic!("unexpected reply {other:?}"),
                }
            }
        }
    }
    // Every commit acknowledged; a third session reads the counter's committed value.
    let value = counter_value(&mut h, x, reader) - initial;
    Outcome {
        commits: clients.iter().map(|c| c.commits).collect(),
        value,
        fair: h.core.cc.claims().counters(),
    }
}

/// The counter's committed value, as a third session fetches it.
fn counter_value(h: &mut Harness, x: Oref, reader: ConnId) -> u32 {
    h.now += 1;
    let r = h.request(reader, h.now, RequestBody::Fetch { page: x.page().unwrap() });
    let ReplyBody::Page { bytes, .. } = r.body else { panic!("{r:?}") };
    let view = PageView::parse(&bytes).unwrap();
    u32::from_le_bytes(view.object(x.oid()).unwrap()[8..12].try_into().unwrap())
}

/// The event queue's ordering looks at time and sequence only.
#[derive(Debug)]
struct EventBox(Event);

impl PartialEq for EventBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for EventBox {}
impl PartialOrd for EventBox {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EventBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// Steps the core with `input` at `now` and performs its I/O at once (a log sync takes no
/// time); returns the replies it sent, by connection.
fn serve(h: &mut Harness, now: u64, input: Input) -> Vec<(ConnId, thor_wire::Reply)> {
    let mut out = Vec::new();
    let mut fx = Vec::new();
    h.core.step(now, input, &mut fx);
    h.now = h.now.max(now);
    let mut pending: std::collections::VecDeque<Effect> = fx.into();
    loop {
        let mut appended = false;
        while let Some(e) = pending.pop_front() {
            match e {
                Effect::Append { lsn, record } => {
                    h.disk.borrow_mut().append(lsn, record);
                    appended = true;
                }
                Effect::Reply { conn, reply, .. } => out.push((conn, reply)),
                Effect::Done { .. } | Effect::Peer { .. } => {}
                other => {
                    let input = h.disk.borrow_mut().perform(&other).unwrap();
                    let mut fx = Vec::new();
                    h.core.step(now, input, &mut fx);
                    pending.extend(fx);
                }
            }
        }
        if !appended {
            return out;
        }
        let lsn = h.disk.borrow_mut().sync();
        let mut fx = Vec::new();
        h.core.step(now, Input::Durable { lsn }, &mut fx);
        pending.extend(fx);
    }
}

/// Simulated time of each run: a fifth of a second, some thousands of commits.
const RUN_US: u64 = 200_000;

/// The smallest share of commits over the largest.
fn smaller_over_larger(c: &[u64]) -> f64 {
    let (min, max) = (c.iter().min().copied().unwrap_or(0), c.iter().max().copied().unwrap_or(0));
    min as f64 / max.max(1) as f64
}

#[test]
fn hot_counter_is_shared_fairly() {
    let out = hot_counter(FairConfig::ON, RUN_US, 2);
    let ratio = smaller_over_larger(&out.commits);
    assert!(ratio >= 1.0 / 3.0, "the smaller share is at least a third of the larger: {out:?}");
    // Serializable: every commit incremented the value the one before it wrote.
    assert_eq!(u64::from(out.value), out.commits.iter().sum::<u64>(), "{out:?}");
    assert!(out.fair.claims > 0 && out.fair.held > 0, "{out:?}");
}

/// Many losers on one object: eight clients on one counter. Fair means here that every
/// client's share of the commits is at least a third of the largest share (as for two).
#[test]
fn hot_counter_is_shared_fairly_among_eight() {
    let out = hot_counter(FairConfig::ON, RUN_US, 8);
    let ratio = smaller_over_larger(&out.commits);
    assert!(ratio >= 1.0 / 3.0, "the smallest share is at least a third of the largest: {out:?}");
    assert_eq!(u64::from(out.value), out.commits.iter().sum::<u64>(), "{out:?}");
}

#[test]
fn without_fair_retries_one_client_starves_the_other() {
    // The same run with fair retries off: what issue 32 measured over TCP (10,803 commits
    // against 1). It shows that the scenario above reproduces the starvation it cures.
    let out = hot_counter(FairConfig::OFF, RUN_US, 2);
    let ratio = smaller_over_larger(&out.commits);
    assert!(ratio < 1.0 / 3.0, "{out:?}");
    assert_eq!(u64::from(out.value), out.commits.iter().sum::<u64>(), "{out:?}");
    assert_eq!(out.fair.claims, 0);
}

#[test]
fn a_held_commit_waits_at_most_the_hold_and_then_validates() {
    // Client 2 claims x and then never commits: client 1's commit is held until the claim
    // expires, and then validated and committed as without fair retries.
    let hold_us = 1_000;
    let cfg = CoreConfig {
        cc: cc::CcConfig {
            fair: FairConfig { hold_us, arm_within_us: hold_us, losses_min: 1 },
            ..cc::CcConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let page = x.page().unwrap();
    h.request(2, 3, RequestBody::Fetch { page });
    h.request(1, 3, RequestBody::Fetch { page });
    // Client 1 commits x; client 2's commit on its old copy is refused: its first loss, which
    // earns the claim (losses_min 1).
    let r = h.request(1, 4, txn(class, &[x], &[x], 1));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let r = h.request(2, 4, txn(class, &[x], &[x], 1));
    assert!(matches!(r.body, ReplyBody::CommitRefused { .. }), "{r:?}");
    assert_eq!(h.core.cc.claims().counters().claims, 1);
    // Client 2's next request (after its backoff) arms the claim.
    let mut req = Request::new(RequestBody::Fetch { page });
    req.piggyback.acks = r.invalidations.clone();
    h.step(Input::Request { conn: 2, id: 5, req });
    h.settle();
    // Client 1's next commit of x is held: no answer, and a deadline at the claim's end.
    let at = h.now + 1;
    h.core.step(
        at,
        Input::Request { conn: 1, id: 5, req: Request::new(txn(class, &[x], &[x], 2)) },
        &mut Vec::new(),
    );
    h.now = at;
    assert_eq!(h.core.cc.claims().counters().held, 1);
    let deadline = h.core.next_deadline_us().expect("a held commit's wait ends");
    assert!(deadline <= at + hold_us, "{deadline} {at}");
    // Other sessions' requests go on meanwhile.
    let stats = Input::Request { conn: 2, id: 6, req: Request::new(RequestBody::Stats) };
    let r = serve(&mut h, deadline - 1, stats);
    assert_eq!(r.len(), 1);
    // At the deadline the commit is validated and commits.
    let replies = serve(&mut h, deadline, Input::Tick);
    let (conn, r) = replies.into_iter().find(|(c, _)| *c == 1).expect("answered at the deadline");
    assert_eq!(conn, 1);
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.cc.claims().counters().claims_expired, 0, "counted when it is replaced");
}

#[test]
fn the_holders_commit_releases_the_held_rival_which_then_sees_its_change() {
    let cfg = CoreConfig {
        cc: cc::CcConfig {
            fair: FairConfig { hold_us: 1_000_000, arm_within_us: 1_000_000, losses_min: 1 },
            ..cc::CcConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let page = x.page().unwrap();
    h.request(2, 3, RequestBody::Fetch { page });
    h.request(1, 3, RequestBody::Fetch { page });
    h.request(1, 4, txn(class, &[x], &[x], 1));
    let r = h.request(2, 4, txn(class, &[x], &[x], 1));
    assert!(matches!(r.body, ReplyBody::CommitRefused { .. }), "{r:?}");
    // Client 2 (the holder) acks and fetches: that arms its claim. Client 1's commit is held;
    // client 2 commits.
    let mut req = Request::new(RequestBody::Fetch { page });
    req.piggyback.acks = r.invalidations.clone();
    h.step(Input::Request { conn: 2, id: 5, req });
    h.settle();
    h.step(Input::Request { conn: 1, id: 5, req: Request::new(txn(class, &[x], &[x], 2)) });
    assert!(h.settle().is_empty(), "held: no answer");
    h.step(Input::Request { conn: 2, id: 6, req: Request::new(txn(class, &[x], &[x], 2)) });
    let out = h.settle();
    let r2 = &super::tests::replies_to(&out, 2)[0].1;
    assert!(matches!(r2.body, ReplyBody::CommitOk { .. }), "{r2:?}");
    // Released, client 1's commit read the version client 2 replaced: refused, with the
    // invalidation, and it is client 1's first loss.
    let r1 = &super::tests::replies_to(&out, 1)[0].1;
    assert_eq!(super::tests::refusal(r1), Some(thor_wire::RefusedCode::Stale), "{r1:?}");
    assert_eq!(r1.invalidations, vec![x]);
    let f = h.core.cc.claims().counters();
    assert_eq!((f.claims, f.held, f.held_timed_out), (2, 1, 0), "{f:?}");
}

#[test]
fn a_disconnect_drops_a_held_commit_and_the_sessions_claims() {
    let cfg = CoreConfig {
        cc: cc::CcConfig {
            fair: FairConfig { hold_us: 1_000_000, arm_within_us: 1_000_000, losses_min: 1 },
            ..cc::CcConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    h.connect(3, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let page = x.page().unwrap();
    h.request(2, 3, RequestBody::Fetch { page });
    h.request(1, 3, RequestBody::Fetch { page });
    h.request(1, 4, txn(class, &[x], &[x], 1));
    h.request(2, 4, txn(class, &[x], &[x], 1));
    h.request(2, 5, RequestBody::Stats);
    h.step(Input::Request { conn: 1, id: 5, req: Request::new(txn(class, &[x], &[x], 2)) });
    assert!(h.settle().is_empty());
    h.step(Input::Disconnect { conn: 1 });
    assert_eq!(h.core.held_len(), 0, "its held commit went with it");
    // The holder leaves: its claim goes, and a third session's commit is not held.
    h.step(Input::Disconnect { conn: 2 });
    h.request(3, 5, RequestBody::Fetch { page });
    let r = h.request(3, 6, txn(class, &[x], &[x], 3));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
}

#[test]
fn a_reported_invalidation_abort_counts_and_is_a_loss() {
    let cfg = CoreConfig {
        cc: cc::CcConfig {
            fair: FairConfig { hold_us: 1_000_000, arm_within_us: 1_000_000, losses_min: 2 },
            ..cc::CcConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let page = x.page().unwrap();
    for id in [3, 4] {
        let mut req = Request::new(RequestBody::Fetch { page });
        req.piggyback.contention =
            Some(Contention { invalidation_aborts: 1, retries: 1, object: Some(x) });
        h.step(Input::Request { conn: 2, id, req });
        h.settle();
    }
    let st = h.core.server_stats();
    assert_eq!((st.client_invalidation_aborts, st.client_retries, st.fair_claims), (2, 2, 1));
    // Two reported losses on x: client 1's commit of x is held.
    h.step(Input::Request { conn: 1, id: 5, req: Request::new(txn(class, &[x], &[x], 2)) });
    assert!(h.settle().is_empty(), "held behind client 2's claim");
    assert_eq!(h.core.server_stats().fair_held, 1);
    assert_eq!(h.core.held_len(), 1);
}
