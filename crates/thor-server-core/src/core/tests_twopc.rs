//! Scenario tests of two-phase commit between cores: two or three servers whose messages to
//! each other the test routes (or drops), each crashed and recovered when the test says.

use std::collections::VecDeque;

use bytes::Bytes;
use thor_core::le::u32_at;
use thor_core::{Oref, PageView};
use thor_wire::{
    CLIENT_TIE_BIT, Commit, Participant, PeerMsg, Prepare, RefusedCode, Reply, ReplyBody,
    RequestBody, Stamp,
};

use super::tests::{Harness, class_and_item, config, item_class, refusal};
use super::*;

/// The client's connection at every server.
const CONN: ConnId = 1;

/// Servers 1..=n, a client connected to each, and the messages between servers in flight.
struct Cluster {
    nodes: Vec<Harness>,
    /// Messages to deliver: (to, message).
    net: VecDeque<(ServerId, PeerMsg)>,
    /// Replies to clients, per server, in order: (connection, request id, reply).
    replies: Vec<Vec<(ConnId, u64, Reply)>>,
    /// Every message sent, for the tests that count them.
    sent: Vec<(ServerId, PeerMsg)>,
}

/// Every server of a test cluster knows the others (at most three): a prepare naming a server
/// it does not know is refused (`tests_creds`).
fn cfg() -> CoreConfig {
    let mut c = config();
    c.twopc.peers = vec![ServerId(1), ServerId(2), ServerId(3)];
    c
}

impl Cluster {
    fn new(n: usize) -> Cluster {
        let mut nodes = Vec::new();
        for i in 1..=n {
            let mut h = Harness::with_id(cfg(), ServerId(i as u32));
            h.connect(CONN, b"");
            // After an open, client timestamps up to this far ahead of the clock are refused
            // (see `Cc::raise_threshold`); the tests start after that.
            h.now += cfg().twopc.future_max_us;
            nodes.push(h);
        }
        Cluster { nodes, net: VecDeque::new(), replies: vec![Vec::new(); n], sent: Vec::new() }
    }

    fn node(&mut self, s: ServerId) -> &mut Harness {
        &mut self.nodes[s.0 as usize - 1]
    }

    /// Settles every node and collects what they send, without delivering it.
    fn settle_all(&mut self) {
        for i in 0..self.nodes.len() {
            let out = self.nodes[i].settle();
            for e in &out {
                if let Effect::Reply { conn, id, reply, .. } = e {
                    self.replies[i].push((*conn, *id, reply.clone()));
                }
            }
            for e in out {
                if let Effect::Peer { to, msg } = e {
                    self.net.push_back((to, msg));
                    self.sent.push((to, msg));
                }
            }
        }
    }

    /// Delivers messages until none is in flight; `keep(to, msg)` says which arrive (the others
    /// are lost).
    fn run(&mut self, mut keep: impl FnMut(ServerId, &PeerMsg) -> bool) {
        self.settle_all();
        while let Some((to, msg)) = self.net.pop_front() {
            if keep(to, &msg) {
                self.node(to).step(Input::Peer { msg });
            }
            self.settle_all();
        }
    }

    fn deliver_all(&mut self) {
        self.run(|_, _| true);
    }

    /// Time passes at every node by `us`, with a tick.
    fn tick(&mut self, us: u64) {
        for n in &mut self.nodes {
            n.now += us;
            n.step(Input::Tick);
        }
    }

    /// Server `s` crashes and recovers from its disk (everything it synced survives).
    fn restart(&mut self, s: ServerId) {
        let disk = self.node(s).disk.clone();
        let now = self.node(s).now;
        let mut h = Harness::open(disk, cfg());
        h.now = now;
        h.connect(CONN, b"");
        self.nodes[s.0 as usize - 1] = h;
        self.replies[s.0 as usize - 1].clear();
    }

    /// Sends a prepare to server `s` without delivering anything.
    fn prepare(&mut self, s: ServerId, id: u64, p: Prepare) {
        let req = thor_wire::Request::new(RequestBody::Prepare(Box::new(p)));
        self.node(s).step(Input::Request { conn: CONN, id, req });
    }

    /// The reply to request `id` of the client at server `s`.
    fn reply(&self, s: ServerId, id: u64) -> Option<&Reply> {
        self.reply_on(s, CONN, id)
    }

    /// The reply to request `id` of connection `conn` at server `s`.
    fn reply_on(&self, s: ServerId, conn: ConnId, id: u64) -> Option<&Reply> {
        let replies = &self.replies[s.0 as usize - 1];
        replies.iter().find(|(c, i, _)| *c == conn && *i == id).map(|(_, _, r)| r)
    }

    /// The reference word of item `o` as server `s` serves it now.
    fn item_ref(&mut self, s: ServerId, o: Oref, id: u64) -> u32 {
        let r = self.node(s).request(CONN, id, RequestBody::Fetch { page: o.page().unwrap() });
        let ReplyBody::Page { bytes, .. } = r.body else { panic!("{r:?}") };
        let view = PageView::parse(&bytes).unwrap();
        u32_at(view.object(o.oid()).unwrap(), 4)
    }

    /// Peer messages sent to `s` so far.
    fn sent_to(&self, s: ServerId) -> Vec<PeerMsg> {
        self.sent.iter().filter(|(t, _)| *t == s).map(|(_, m)| *m).collect()
    }
}

const S1: ServerId = ServerId(1);
const S2: ServerId = ServerId(2);
const S3: ServerId = ServerId(3);

fn stamp(n: u64) -> Stamp {
    Stamp { time_us: n, tie: CLIENT_TIE_BIT | 77 }
}

/// Each server gets the item class and an item pointing at itself; returns (class, item) per
/// server.
fn items(c: &mut Cluster) -> Vec<(Oref, Oref)> {
    (0..c.nodes.len()).map(|i| class_and_item(&mut c.nodes[i], CONN)).collect()
}

/// A version of an item of class `class` whose reference is `target` (0: null).
fn version(class: Oref, target: u32) -> Bytes {
    let mut v = item_class().new_object(class.raw(), 0);
    thor_core::le::put_u32(&mut v, 4, target);
    Bytes::from(v)
}

fn part(reads: Vec<Oref>, versions: Vec<(Oref, Bytes)>) -> Commit {
    Commit { reads, versions, created: Vec::new(), id: None, leaves: Vec::new() }
}

fn prep(
    stamp: Stamp,
    coordinator: Option<ServerId>,
    participants: &[(ServerId, bool)],
    commit: Commit,
) -> Prepare {
    Prepare {
        stamp,
        coordinator,
        participants: participants
            .iter()
            .map(|&(server, writes)| Participant { server, writes })
            .collect(),
        commit,
    }
}

/// A transaction that writes the item at S1 and at S2, S1 coordinating, prepared at both.
fn write_both(c: &mut Cluster, it: &[(Oref, Oref)], ts: Stamp, id: u64) {
    let ps = [(S1, true), (S2, true)];
    for (s, (class, item)) in [(S1, it[0]), (S2, it[1])] {
        let p = prep(ts, Some(S1), &ps, part(vec![item], vec![(item, version(class, 0))]));
        c.prepare(s, id, p);
    }
}

#[test]
fn two_server_commit_is_atomic() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.deliver_all();
    let r1 = c.reply(S1, 100).expect("the coordinator answers");
    assert!(matches!(r1.body, ReplyBody::CommitOk { .. }), "{r1:?}");
    let r2 = c.reply(S2, 100).expect("the participant answers");
    assert!(matches!(r2.body, ReplyBody::Prepared { .. }), "{r2:?}");
    assert_eq!(c.item_ref(S1, it[0].1, 200), 0, "new version at S1");
    assert_eq!(c.item_ref(S2, it[1].1, 200), 0, "new version at S2");
    // The coordinator heard every acknowledgement and forgot the transaction; nothing is in
    // doubt anywhere, so the log may be truncated past it.
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0);
    assert_eq!(c.node(S1).core.twopc.log_floor(), None);
    // Phase two went to S2 only once, and S2 acknowledged it.
    let to_s2 = c.sent_to(S2);
    assert_eq!(
        to_s2.iter().filter(|m| matches!(m, PeerMsg::Decide { commit: true, .. })).count(),
        1
    );
    assert!(c.sent_to(S1).iter().any(|m| matches!(m, PeerMsg::DecideAck { .. })));
}

#[test]
fn participant_refusal_aborts_everywhere() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class1, item1) = it[0];
    let item2 = it[1].1;
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    // S2's part reshapes its object: S2 refuses it.
    let bad = Bytes::from(vec![0u8; 12]);
    c.prepare(S2, 100, prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, bad)])));
    c.deliver_all();
    assert_eq!(c.reply(S2, 100).and_then(refusal), Some(RefusedCode::Reshape));
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.item_ref(S1, item1, 200), item1.raw(), "S1 kept the old version");
    assert_eq!(c.item_ref(S2, item2, 200), item2.raw(), "S2 kept the old version");
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 0, "the coordinator dropped its part");
    assert_eq!(c.node(S1).core.twopc.log_floor(), None);
    // The item can be written again at S1: the aborted part no longer holds it.
    let ts2 = stamp(now + 50);
    write_both(&mut c, &it, ts2, 101);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 101).unwrap().body, ReplyBody::CommitOk { .. }));
}

#[test]
fn read_only_participant_skips_phase_two() {
    let mut c = Cluster::new(3);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, false), (S3, true)];
    let (class1, item1) = it[0];
    let (class3, item3) = it[2];
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    let s2_lsn = c.node(S2).core.next_lsn();
    c.prepare(S2, 100, prep(ts, Some(S1), &ps, part(vec![it[1].1], vec![])));
    c.prepare(
        S3,
        100,
        prep(ts, Some(S1), &ps, part(vec![item3], vec![(item3, version(class3, 0))])),
    );
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    assert!(matches!(c.reply(S2, 100).unwrap().body, ReplyBody::Prepared { .. }));
    assert!(matches!(c.reply(S3, 100).unwrap().body, ReplyBody::Prepared { .. }));
    assert!(
        c.sent_to(S2).is_empty(),
        "the read-only participant hears nothing: {:?}",
        c.sent_to(S2)
    );
    assert_eq!(
        c.sent_to(S1).iter().filter(|m| matches!(m, PeerMsg::Vote { yes: true, .. })).count(),
        2
    );
    assert_eq!(c.item_ref(S3, item3, 200), 0);
    assert_eq!(c.node(S2).core.next_lsn(), s2_lsn, "a read-only part writes no record");
}

#[test]
fn read_only_transaction_answers_the_client_from_every_server() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, false), (S2, false)];
    c.prepare(S1, 100, prep(ts, None, &ps, part(vec![it[0].1], vec![])));
    c.prepare(S2, 100, prep(ts, None, &ps, part(vec![it[1].1], vec![])));
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::Prepared { .. }));
    assert!(matches!(c.reply(S2, 100).unwrap().body, ReplyBody::Prepared { .. }));
    assert!(c.sent.is_empty(), "two message delays, no server-to-server message");
}

#[test]
fn participant_restart_resolves_in_doubt() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    // S2's vote arrives; the coordinator's decision to S2 is lost.
    c.run(|to, m| !(to == S2 && matches!(m, PeerMsg::Decide { .. })));
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);
    assert_eq!(c.item_ref(S2, it[1].1, 200), it[1].1.raw(), "in doubt: not visible yet");
    c.restart(S2);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1, "recovery restores the part in doubt");
    // S2 asks (and the coordinator resends); the answer arrives.
    c.tick(cfg().twopc.query_after_us);
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0);
    assert_eq!(c.item_ref(S2, it[1].1, 201), 0, "committed after the restart");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0, "acknowledged, ended");
}

#[test]
fn coordinator_restart_finishes_decision() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.run(|to, m| !(to == S2 && matches!(m, PeerMsg::Decide { .. })));
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    assert!(c.node(S1).core.twopc.log_floor().is_some(), "the log keeps the undelivered decision");
    c.restart(S1);
    assert_eq!(c.item_ref(S1, it[0].1, 200), 0, "the commit survived the restart");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 1);
    c.tick(cfg().twopc.resend_after_us);
    c.deliver_all();
    assert_eq!(c.item_ref(S2, it[1].1, 201), 0, "the restarted coordinator told S2");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
    c.restart(S1);
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0, "the end record is durable");
}

#[test]
fn coordinator_restart_before_deciding_aborts() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    // Every vote is lost: the coordinator cannot decide; then it crashes.
    c.run(|_, _| false);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);
    c.restart(S1);
    c.tick(cfg().twopc.query_after_us);
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "S2 learned the abort");
    assert_eq!(c.item_ref(S1, it[0].1, 200), it[0].1.raw());
    assert_eq!(c.item_ref(S2, it[1].1, 200), it[1].1.raw());
}

#[test]
fn missing_vote_times_out_and_a_late_prepare_is_refused() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class1, item1) = it[0];
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.deliver_all();
    assert!(c.reply(S1, 100).is_none(), "waiting for S2's vote");
    c.tick(cfg().twopc.vote_timeout_us);
    c.deliver_all();
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    // S2's part arrives late: it prepares and votes, and the coordinator's tombstone answers
    // abort, so S2 does not stay in doubt.
    let (class2, item2) = it[1];
    c.prepare(
        S2,
        100,
        prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, version(class2, 0))])),
    );
    c.deliver_all();
    assert_eq!(c.reply(S2, 100).map(|r| matches!(r.body, ReplyBody::Prepared { .. })), Some(true));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0);
    assert_eq!(c.item_ref(S2, item2, 200), item2.raw());
}

#[test]
fn a_commit_that_read_an_object_in_doubt_waits_for_the_decision() {
    // A part in doubt is committing. A transaction that read its object waits for the
    // decision instead of being refused (rule 1) at once: another client's, which read the old
    // version, is then refused as stale; the committer's own next one commits.
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let (class2, item2) = it[1];
    const OTHER: ConnId = 2;
    c.node(S2).connect(OTHER, b"");
    let page = RequestBody::Fetch { page: item2.page().unwrap() };
    assert!(matches!(c.node(S2).request(OTHER, 10, page).body, ReplyBody::Page { .. }));
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.run(|to, m| !(to == S2 && matches!(m, PeerMsg::Decide { .. })));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);

    let write = |target: u32| {
        let versions = vec![(item2, version(class2, target))];
        thor_wire::Request::new(RequestBody::Commit(part(vec![item2], versions)))
    };
    // The other client read the old version (a reference to itself) and writes null; the
    // committer, which holds the new version (null), points it back at itself.
    c.node(S2).step(Input::Request { conn: OTHER, id: 11, req: write(0) });
    c.node(S2).step(Input::Request { conn: CONN, id: 300, req: write(item2.raw()) });
    c.settle_all();
    assert!(c.reply_on(S2, OTHER, 11).is_none() && c.reply(S2, 300).is_none(), "both wait");
    assert_eq!(c.node(S2).core.twopc_stats().counters.parked, 2);

    // S2 asks the coordinator, learns the commit, and the waiting transactions run.
    c.tick(cfg().twopc.query_after_us);
    c.deliver_all();
    assert_eq!(c.reply_on(S2, OTHER, 11).and_then(refusal), Some(RefusedCode::Stale));
    let r = c.reply(S2, 300).unwrap();
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(c.item_ref(S2, item2, 301), item2.raw(), "after the part in doubt");
}

/// Only a part's coordinator decides it: a commit decision from another server it knows (a
/// confused or forged peer) changes nothing, and a message that claims to come from the
/// server itself is dropped without an answer.
#[test]
fn decide_from_a_server_that_is_not_the_coordinator_is_ignored() {
    let mut c = Cluster::new(3);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class2, item2) = it[1];
    // S2 prepares its part of a transaction S1 coordinates; S1 never hears of it.
    c.prepare(
        S2,
        100,
        prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, version(class2, 0))])),
    );
    c.run(|_, _| false);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1, "S2's part is prepared, in doubt");
    // S3 says commit: not S2's coordinator, so nothing happens.
    c.node(S2).step(Input::Peer { msg: PeerMsg::Decide { stamp: ts, from: S3, commit: true } });
    c.run(|_, _| false);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1, "still in doubt");
    assert_eq!(c.item_ref(S2, item2, 200), item2.raw(), "the old version stands");
    // A message "from S2" to S2 is no message of its own: dropped, nothing sent back.
    let sent = c.sent.len();
    let forged = PeerMsg::Decide { stamp: stamp(now + 20), from: S2, commit: true };
    c.node(S2).step(Input::Peer { msg: forged });
    c.settle_all();
    assert_eq!(c.sent.len(), sent, "no message to itself");
    // The real coordinator's abort still decides it.
    c.node(S2).step(Input::Peer { msg: PeerMsg::Decide { stamp: ts, from: S1, commit: false } });
    c.run(|_, _| false);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "aborted by its coordinator");
}

/// Issue 32's first stall: a participant's no vote that reaches the coordinator before the
/// client's prepare is remembered, and the prepare is then refused at once: the coordinator
/// never prepares (nor holds) its own part, and nothing waits for the vote timeout.
#[test]
fn early_no_vote_aborts_at_once() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class1, item1) = it[0];
    let item2 = it[1].1;
    // S2's part reshapes its object: refused, and S2's no vote reaches S1 first.
    let bad = Bytes::from(vec![0u8; 12]);
    c.prepare(S2, 100, prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, bad)])));
    c.deliver_all();
    assert_eq!(c.reply(S2, 100).and_then(refusal), Some(RefusedCode::Reshape));
    assert_eq!(c.node(S1).core.twopc_stats().counters.early_no_votes, 1);
    // The client's prepare reaches the coordinator now: refused at once, nothing logged.
    let lsn = c.node(S1).core.next_lsn();
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.deliver_all();
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S1).core.next_lsn(), lsn, "no prepare record: its part was never prepared");
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 0);
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
    assert_eq!(c.node(S1).core.twopc_stats().counters.prepared, 0);
    // Without any time passing, the item is free for the next transaction.
    write_both(&mut c, &it, stamp(now + 50), 101);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 101).unwrap().body, ReplyBody::CommitOk { .. }));
}

/// A coordinator that has only early yes votes when a no vote comes (the client's prepare has
/// not arrived) tells the participants that voted: they are in doubt, and learn the abort at
/// once instead of after the vote timeout and their next query.
#[test]
fn an_early_no_vote_releases_the_parts_that_voted_yes() {
    let mut c = Cluster::new(3);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true), (S3, true)];
    let (class3, item3) = it[2];
    let item2 = it[1].1;
    c.prepare(
        S3,
        100,
        prep(ts, Some(S1), &ps, part(vec![item3], vec![(item3, version(class3, 0))])),
    );
    c.deliver_all();
    assert_eq!(c.node(S3).core.twopc.in_doubt(), 1, "S3 prepared and voted yes");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 1, "S1 remembers the early vote");
    let bad = Bytes::from(vec![0u8; 12]);
    c.prepare(S2, 100, prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, bad)])));
    c.deliver_all();
    assert_eq!(c.node(S3).core.twopc.in_doubt(), 0, "S3 was told the abort at once");
    assert_eq!(c.item_ref(S3, item3, 200), item3.raw(), "S3 kept the old version");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
    assert_eq!(c.reply(S3, 100).and_then(refusal), None, "S3 answered its client Prepared");
}

/// A coordinator refusing the client's own prepare (here: the timestamp is too far ahead of
/// its clock) aborts the transaction at once: a participant that voted early is told, and one
/// that votes later is answered abort, instead of both waiting out the vote timeout.
#[test]
fn a_coordinator_that_refuses_its_prepare_aborts_at_once() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ahead = cfg().twopc.future_max_us + 500;
    let ts = stamp(now + ahead);
    let ps = [(S1, true), (S2, true)];
    let (class1, item1) = it[0];
    let (class2, item2) = it[1];
    // The client's clock and S2's are ahead of S1's by more than `future_max_us`: S2
    // prepares, S1 refuses the prepare.
    c.node(S2).now += ahead;
    c.prepare(
        S2,
        100,
        prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, version(class2, 0))])),
    );
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.deliver_all();
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::TooOld));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "S2 learned the abort at once");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
}

/// Issue 32's second stall: a restarted coordinator asked by a participant in doubt about a
/// transaction it has no record of answers abort at once (presumed abort) rather than taking
/// the query for an early yes vote and waiting out the vote timeout. This is sound because the
/// transaction's timestamp is below the threshold the restart raised: the client's prepare
/// could never validate here any more.
#[test]
fn restarted_coordinator_presumes_abort() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class2, item2) = it[1];
    // S2 prepares and votes; the vote is lost and the client's prepare never reaches S1,
    // which crashes and restarts.
    c.prepare(
        S2,
        100,
        prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, version(class2, 0))])),
    );
    c.run(|_, _| false);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);
    c.restart(S1);
    // S2 asks once: the answer is abort, at once.
    c.tick(cfg().twopc.query_after_us);
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "S2 learned the abort from one query");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0, "the query is not an early vote");
    assert_eq!(c.node(S1).core.twopc_stats().counters.presumed_aborts, 1);
    assert_eq!(c.item_ref(S2, item2, 200), item2.raw());
    // The client's prepare, should it arrive now, is refused: the abort stands.
    let (class1, item1) = it[0];
    c.prepare(
        S1,
        101,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.deliver_all();
    assert!(c.reply(S1, 101).and_then(refusal).is_some(), "refused");
    assert_eq!(c.item_ref(S1, item1, 201), item1.raw());
}

/// The limit of presumed abort: a coordinator that has not restarted and has not yet had the
/// client's prepare may still commit the transaction, so a participant's query is an early
/// yes vote, not an abort; when the prepare comes, the transaction commits.
#[test]
fn a_query_before_the_prepare_does_not_presume_abort() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, true)];
    let (class1, item1) = it[0];
    let (class2, item2) = it[1];
    c.prepare(
        S2,
        100,
        prep(ts, Some(S1), &ps, part(vec![item2], vec![(item2, version(class2, 0))])),
    );
    c.run(|_, _| false);
    c.tick(cfg().twopc.query_after_us);
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1, "still in doubt: no abort was presumed");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 1, "the query counts as a yes vote");
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    assert_eq!(c.item_ref(S2, item2, 200), 0, "committed at S2");
}

/// The restart window is gone: right after a restart (here 2 ms after the crash, more than
/// the 1 ms lead of `limits::VALIDATION_LEAD_MAX_US`; recovery took 11 ms in issue 32's
/// measurements), a two-phase commit at the client's clock is served, where it used to be
/// refused `TooOld` for 200 ms (`future_max_us`).
#[test]
fn restart_serves_without_a_refusal_window() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    for s in [S1, S2] {
        c.restart(s);
        c.node(s).now += 2_000;
    }
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 1), 101);
    c.deliver_all();
    let r = c.reply(S1, 101).unwrap();
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "served at once: {r:?}");
    assert_eq!(c.node(S1).core.cc.counters().refused_threshold, 0);
}

/// What the window protected stays protected: a read-only part validated ahead of the clock
/// (within the lead) before a crash leaves no record, and after an immediate restart a writer
/// at a timestamp below it is refused, since the threshold is above the clock plus the lead.
#[test]
fn a_restart_refuses_timestamps_below_what_it_may_have_validated() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S2).now;
    let (class2, item2) = it[1];
    let lead = crate::limits::VALIDATION_LEAD_MAX_US;
    let read = stamp(now + lead / 2);
    let ps = [(S1, false), (S2, false)];
    c.prepare(S2, 100, prep(read, None, &ps, part(vec![item2], vec![])));
    c.deliver_all();
    assert!(matches!(c.reply(S2, 100).unwrap().body, ReplyBody::Prepared { .. }));
    c.restart(S2);
    let write = stamp(now + lead / 4);
    let ps = [(S2, true)];
    let p = prep(write, Some(S2), &ps, part(vec![item2], vec![(item2, version(class2, 0))]));
    c.prepare(S2, 101, p);
    c.deliver_all();
    assert_eq!(c.reply(S2, 101).and_then(refusal), Some(RefusedCode::TooOld));
}

/// A prepare whose timestamp is ahead of the server's clock by more than the lead (a client
/// clock running ahead) is not validated yet: it waits for the clock, then commits.
#[test]
fn a_prepare_ahead_of_the_clock_waits_for_it() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ahead = 10 * crate::limits::VALIDATION_LEAD_MAX_US;
    write_both(&mut c, &it, stamp(now + ahead), 100);
    c.deliver_all();
    assert!(c.reply(S1, 100).is_none() && c.reply(S2, 100).is_none(), "both wait");
    assert_eq!(c.node(S1).core.twopc_stats().counters.waited_for_clock, 1);
    assert_eq!(c.node(S1).core.next_deadline_us(), Some(now + ahead - 1_000));
    c.tick(ahead);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
}

/// A writing part that waits for the clock and whose session ends will never be prepared:
/// its server votes no at once, and the coordinator aborts and drops its own part then,
/// instead of holding it until the vote timeout.
#[test]
fn a_part_waiting_for_the_clock_whose_session_ends_votes_no() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ahead = 10 * crate::limits::VALIDATION_LEAD_MAX_US;
    // The client's clock is ahead of S2's, not of S1's.
    c.node(S1).now += ahead;
    write_both(&mut c, &it, stamp(now + ahead), 100);
    c.deliver_all();
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 1, "S1 prepared its part");
    assert_eq!(c.node(S2).core.twopc_stats().counters.waited_for_clock, 1);
    c.node(S2).step(Input::Disconnect { conn: CONN });
    c.deliver_all();
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 0, "S1 dropped its part at once");
    assert_eq!(c.item_ref(S1, it[0].1, 200), it[0].1.raw());
}

/// A read-only part that waits for a part in doubt (it read what that part writes) and whose
/// session ends will never vote: its server votes no at once, and the coordinator aborts then
/// instead of at the vote timeout.
#[test]
fn a_waiting_read_only_part_whose_session_ends_votes_no() {
    let mut c = Cluster::new(3);
    let it = items(&mut c);
    let now = c.node(S1).now;
    // T1 writes at S1 and S2; S2's decision is lost: S2's part is in doubt.
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.run(|to, m| !(to == S2 && matches!(m, PeerMsg::Decide { .. })));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1);
    // T2 writes at S3 (coordinating) and reads at S2 what T1's part writes: S2 holds it back.
    let ts = stamp(now + 20);
    let ps = [(S2, false), (S3, true)];
    let (class3, item3) = it[2];
    c.prepare(
        S3,
        101,
        prep(ts, Some(S3), &ps, part(vec![item3], vec![(item3, version(class3, 0))])),
    );
    c.prepare(S2, 101, prep(ts, Some(S3), &ps, part(vec![it[1].1], vec![])));
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc_stats().counters.parked, 1);
    assert!(c.reply(S3, 101).is_none(), "S3 waits for S2's vote");
    c.node(S2).step(Input::Disconnect { conn: CONN });
    c.deliver_all();
    assert_eq!(c.reply(S3, 101).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S3).core.twopc.in_doubt(), 0, "S3 dropped its part at once");
}

/// The prepare of a transaction that writes the item at `s`, S1 coordinating, S1 and S2
/// writing.
fn write_part(it: &[(Oref, Oref)], s: ServerId, ts: Stamp) -> Prepare {
    let (class, item) = it[s.0 as usize - 1];
    prep(ts, Some(S1), &[(S1, true), (S2, true)], part(vec![item], vec![(item, version(class, 0))]))
}

/// The stall found last: a participant crashed before its prepare record was durable, so after
/// its restart it has no record of the transaction and will never vote. The coordinator asks
/// for the missing vote ([`TwoPcConfig::ask_vote_after_us`] after the client's prepare); the
/// participant, with no record and none coming, answers no, and the coordinator aborts then
/// (presumed abort) instead of at its vote timeout.
#[test]
fn participant_restarted_without_its_part_votes_no_at_once() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    // S2 takes the client's prepare and crashes before its record is durable.
    c.prepare(S2, 100, write_part(&it, S2, ts));
    c.restart(S2);
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "nothing of the part survived");
    c.prepare(S1, 100, write_part(&it, S1, ts));
    c.deliver_all();
    assert!(c.reply(S1, 100).is_none(), "waiting for S2's vote");
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 1, "the coordinator's own part is held");
    let ask_after = cfg().twopc.ask_vote_after_us;
    assert!(ask_after * 10 <= cfg().twopc.vote_timeout_us, "asked well before the timeout");
    let deadline = c.node(S1).core.next_deadline_us().expect("the coordinator waits on time");
    assert!(deadline <= c.node(S1).now + ask_after, "it wakes to ask, not at the timeout");
    c.tick(ask_after);
    c.deliver_all();
    assert!(c.sent_to(S2).iter().any(|m| matches!(m, PeerMsg::AskVote { .. })), "asked");
    assert!(
        c.sent_to(S1).iter().any(|m| matches!(m, PeerMsg::Vote { yes: false, .. })),
        "S2 answered no"
    );
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 0, "the coordinator's part is released");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0);
    assert_eq!(c.item_ref(S1, it[0].1, 200), it[0].1.raw(), "nothing committed");
    let (st1, st2) = (c.node(S1).core.twopc_stats(), c.node(S2).core.twopc_stats());
    assert_eq!((st1.counters.votes_asked, st2.counters.asked_votes_no), (1, 1));
}

/// A prepare merely delayed in the network: the participant has not seen it when the
/// coordinator asks, answers no, and remembers that it did, so the late prepare is refused
/// (and nothing is prepared or held), never voted yes on after the no.
#[test]
fn a_participant_that_voted_no_when_asked_refuses_the_late_prepare() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    c.prepare(S1, 100, write_part(&it, S1, ts));
    c.deliver_all();
    c.tick(cfg().twopc.ask_vote_after_us);
    c.deliver_all();
    assert_eq!(c.reply(S1, 100).and_then(refusal), Some(RefusedCode::Aborted));
    // The client's prepare reaches S2 now.
    c.prepare(S2, 100, write_part(&it, S2, ts));
    c.deliver_all();
    assert_eq!(c.reply(S2, 100).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "nothing prepared after the no");
    assert!(
        !c.sent_to(S1).iter().any(|m| matches!(m, PeerMsg::Vote { yes: true, .. })),
        "no yes vote after the no"
    );
    assert_eq!(c.item_ref(S2, it[1].1, 200), it[1].1.raw());
}

/// A participant whose part is prepared answers a request for its vote with yes again: a
/// lost vote costs the interval of the request, not the vote timeout.
#[test]
fn a_lost_yes_vote_is_given_again_when_asked() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.run(|to, m| !(to == S1 && matches!(m, PeerMsg::Vote { .. })));
    assert!(c.reply(S1, 100).is_none(), "the vote was lost");
    c.tick(cfg().twopc.ask_vote_after_us);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    c.deliver_all();
    assert_eq!(c.item_ref(S2, it[1].1, 200), 0, "committed at S2");
    assert_eq!(c.node(S2).core.twopc_stats().counters.asked_votes_no, 0);
}

/// A part on its way (here waiting for the clock: its timestamp is ahead of S2's clock by
/// more than the lead) does not answer a request for its vote: it votes when it gets there,
/// and the transaction commits.
#[test]
fn a_part_on_its_way_is_not_voted_no_when_asked() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    // S1's clock (and the client's) runs ahead of S2's.
    let ahead = cfg().twopc.ask_vote_after_us + 2_000;
    c.node(S1).now += ahead;
    let now = c.node(S1).now;
    write_both(&mut c, &it, stamp(now + 10), 100);
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc_stats().counters.waited_for_clock, 1);
    c.node(S1).now += cfg().twopc.ask_vote_after_us;
    c.node(S1).step(Input::Tick);
    c.deliver_all();
    assert_eq!(c.node(S1).core.twopc_stats().counters.votes_asked, 1);
    assert_eq!(c.node(S2).core.twopc_stats().counters.asked_votes_no, 0, "no answer yet");
    assert!(c.reply(S1, 100).is_none());
    // S2's clock reaches the timestamp: the part is prepared and votes yes.
    c.node(S2).now = now + 10 + cfg().twopc.ask_vote_after_us;
    c.node(S2).step(Input::Tick);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
}

/// The client's prepare to the coordinator was lost (its connection broke) after the other
/// participant prepared and voted yes. The coordinator, with a vote but no prepare, aborts
/// [`TwoPcConfig::prepare_wait_us`] after the vote and tells the participant, which stops
/// holding its part; it used to wait for the vote timeout. A prepare that comes after all is
/// refused.
#[test]
fn a_lost_prepare_to_the_coordinator_aborts_after_the_prepare_wait() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    c.prepare(S2, 100, write_part(&it, S2, ts));
    c.deliver_all();
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 1, "S2 prepared and voted");
    assert_eq!(c.node(S1).core.twopc.coordinating(), 1, "S1 keeps the early vote");
    let wait = cfg().twopc.prepare_wait_us;
    assert!(wait * 10 <= cfg().twopc.vote_timeout_us, "well before the vote timeout");
    let deadline = c.node(S1).core.next_deadline_us().expect("the coordinator waits on time");
    assert!(deadline <= c.node(S1).now + wait, "it wakes at the prepare's wait");
    c.tick(wait);
    c.deliver_all();
    assert_eq!(c.node(S1).core.twopc.coordinating(), 0, "aborted");
    assert_eq!(c.node(S2).core.twopc.in_doubt(), 0, "S2 learned the abort and let its part go");
    assert_eq!(c.node(S1).core.twopc_stats().counters.prepares_missed, 1);
    assert_eq!(c.node(S1).core.server_stats().twopc_prepares_missed, 1, "thor stats shows it");
    assert_eq!(c.item_ref(S2, it[1].1, 200), it[1].1.raw(), "nothing committed at S2");
    c.prepare(S1, 101, write_part(&it, S1, ts));
    c.deliver_all();
    assert_eq!(c.reply(S1, 101).and_then(refusal), Some(RefusedCode::Aborted));
    assert_eq!(c.node(S1).core.twopc.in_doubt(), 0, "the late prepare held nothing");
}

/// A read-only participant keeps no log record of its part, but it remembers its yes vote: a
/// coordinator that lost that vote asks, hears yes again, and commits, where the transaction
/// used to abort.
#[test]
fn a_read_only_participant_whose_vote_was_lost_says_yes_again() {
    let mut c = Cluster::new(2);
    let it = items(&mut c);
    let now = c.node(S1).now;
    let ts = stamp(now + 10);
    let ps = [(S1, true), (S2, false)];
    let (class1, item1) = it[0];
    c.prepare(
        S1,
        100,
        prep(ts, Some(S1), &ps, part(vec![item1], vec![(item1, version(class1, 0))])),
    );
    c.prepare(S2, 100, prep(ts, Some(S1), &ps, part(vec![it[1].1], vec![])));
    c.run(|to, m| !(to == S1 && matches!(m, PeerMsg::Vote { from: S2, .. })));
    assert!(matches!(c.reply(S2, 100).unwrap().body, ReplyBody::Prepared { .. }));
    assert!(c.reply(S1, 100).is_none(), "the vote was lost");
    c.tick(cfg().twopc.ask_vote_after_us);
    c.deliver_all();
    assert!(matches!(c.reply(S1, 100).unwrap().body, ReplyBody::CommitOk { .. }));
    let st2 = c.node(S2).core.twopc_stats().counters;
    assert_eq!((st2.asked_read_only_yes, st2.asked_votes_no), (1, 0));
    assert_eq!(c.item_ref(S1, item1, 200), 0, "committed at S1");
}
