//! Scenario tests of thor servers as replica groups (`thor_replica::member`), each named after
//! the behaviour it shows, run by the deterministic harness in `group/`: real cores over
//! `MemDisk`s, raft-rs replicas over their journals, a seeded network.

mod group;

use bytes::Bytes;
use group::{COMMIT_TICKS_MAX, Group, GroupConfig, SERVE_TICKS_MAX};
use thor_core::Oref;
use thor_replica::member::Phase;
use thor_replica::{MembershipChange, ProposeError};
use thor_wire::{ErrorCode, ReplyBody};

/// Seeds each scenario runs.
const SEEDS: u64 = 32;

#[test]
fn leader_crash_loses_no_acknowledged_commit() {
    for seed in 0..SEEDS {
        let mut cfg = GroupConfig::new(3, seed);
        cfg.loss_per_mille = 20;
        cfg.delay_ticks_max = 3;
        let mut g = Group::new(cfg);
        let first = g.elect();
        g.commit_n(0, 30);
        assert!(g.refusals.is_empty(), "{:?}", g.refusals);
        g.crash(first);
        let second = g.elect();
        assert_ne!(second, first, "seed {seed}: a surviving replica serves");
        g.commit_n(100, 30);
        g.restart(first);
        g.settle();
        for id in g.ids() {
            g.check_acked_at(id);
        }
        assert_eq!(g.acked.len(), 60, "seed {seed}");
    }
}

#[test]
fn deposed_leader_cannot_acknowledge() {
    for seed in 0..SEEDS {
        let mut g = Group::new(GroupConfig::new(5, seed));
        let old = g.elect();
        g.commit_n(0, 5);
        let others: Vec<u64> = g.ids().into_iter().filter(|i| *i != old).collect();
        // The leader is cut off but does not know it yet: it still takes commits.
        g.partition(&[&[old], &others]);
        let stranded: Vec<u64> = (0..5).map(|i| g.submit(old, 1000 + i)).collect();
        assert!(
            g.run_until(SERVE_TICKS_MAX, |g| g.serving().is_some_and(|l| l != old)),
            "seed {seed}: the majority elects a new leader"
        );
        g.commit_n(100, 5);
        // The old leader steps down (check-quorum) and restarts; its commits stay unanswered.
        assert!(
            g.run_until(SERVE_TICKS_MAX, |g| !g.member(old).is_some_and(|m| m.is_serving())),
            "seed {seed}: the isolated leader stops serving"
        );
        g.heal();
        g.settle();
        for t in stranded {
            assert!(
                !matches!(g.answer(t), Some(Some(_))),
                "seed {seed}: the deposed leader acknowledged ticket {t}"
            );
        }
        for id in g.ids() {
            g.check_acked_at(id);
        }
        assert!(g.restarts >= 1, "seed {seed}: the deposed leader restarted");
    }
}

#[test]
fn followers_apply_the_same_pages() {
    for seed in 0..SEEDS {
        let mut cfg = GroupConfig::new(3, seed);
        cfg.loss_per_mille = 30;
        cfg.delay_ticks_max = 4;
        // Journals compacted often, under every replica.
        cfg.retain_entries = 10;
        let mut g = Group::new(cfg);
        g.elect();
        // Enough commits that replay runs install rounds (the MOB's budget is small).
        g.commit_n(0, 120);
        g.settle();
        let ids = g.ids();
        let applied: Vec<u64> =
            ids.iter().map(|i| g.member(*i).unwrap().status().replica.applied).collect();
        assert!(applied.windows(2).all(|w| w[0] == w[1]), "seed {seed}: {applied:?}");
        let first = g.pages(ids[0]);
        assert!(first.len() > 1, "seed {seed}: the commits filled more than one page");
        for id in &ids[1..] {
            assert_eq!(g.pages(*id), first, "seed {seed}: replica {id}'s pages");
        }
        let rounds: u64 =
            ids.iter().map(|i| g.member(*i).unwrap().core().stats().flush_rounds).sum();
        assert!(rounds > 0, "seed {seed}: install rounds ran");
    }
}

#[test]
fn new_leader_serves_after_failover() {
    for seed in 0..SEEDS {
        let mut g = Group::new(GroupConfig::new(3, seed));
        let first = g.elect();
        g.commit_n(0, 10);
        g.settle();
        // A follower turns a client away, naming the leader.
        let follower = g.ids().into_iter().find(|i| *i != first).unwrap();
        let replies = g.hello(follower, 7, thor_wire::WIRE_VERSION);
        match &replies[..] {
            [r] => match &r.body {
                ReplyBody::Error { code: ErrorCode::NotLeader, message } => {
                    assert_eq!(thor_wire::not_leader_hint(message), Some(first), "seed {seed}")
                }
                other => panic!("seed {seed}: {other:?}"),
            },
            other => panic!("seed {seed}: {other:?}"),
        }
        // An older client is told the nearest older code.
        let replies = g.hello(follower, 8, 7);
        assert!(
            matches!(&replies[0].body, ReplyBody::Error { code: ErrorCode::ShuttingDown, .. }),
            "seed {seed}: {replies:?}"
        );
        g.crash(first);
        let second = g.elect();
        assert!(matches!(g.member(second).unwrap().status().phase, Phase::Serving { .. }));
        g.commit_n(100, 10);
        // The new leader admits a client.
        let replies = g.hello(second, 9, thor_wire::WIRE_VERSION);
        assert!(matches!(&replies[0].body, ReplyBody::HelloOk(_)), "seed {seed}: {replies:?}");
        // A replica never says settled: a client sends its read-only commits to the leader,
        // which answers once the group confirms it leads (deposed_leader_answers_nothing_alone).
        assert!(
            replies.iter().all(|r| r.seen.as_ref().is_none_or(|s| !s.settled)),
            "seed {seed}: {replies:?}"
        );
        g.restart(first);
        g.settle();
        for id in g.ids() {
            g.check_acked_at(id);
        }
    }
}

#[test]
fn lagging_replica_catches_up() {
    for seed in 0..SEEDS {
        let mut cfg = GroupConfig::new(3, seed);
        // The journal keeps 60 entries below the checkpoints: the lagging replica misses 40.
        cfg.retain_entries = 60;
        let mut g = Group::new(cfg);
        let leader = g.elect();
        g.commit_n(0, 5);
        let lagging = g.ids().into_iter().find(|i| *i != leader).unwrap();
        g.crash(lagging);
        g.commit_n(100, 40);
        g.restart(lagging);
        g.settle();
        // And it keeps up while the journals are compacted under it.
        g.commit_n(200, 80);
        g.settle();
        let s = g.member(lagging).unwrap().status();
        let l = g.member(leader).unwrap().status();
        assert_eq!(s.replica.applied, l.replica.applied, "seed {seed}");
        assert_eq!(s.next_lsn, l.next_lsn, "seed {seed}");
        g.check_acked_at(lagging);
        assert_eq!(g.pages(lagging), g.pages(leader), "seed {seed}");
        assert!(
            g.member(leader).unwrap().replica().status().snapshot_index > 0,
            "seed {seed}: the leader compacted its journal"
        );
    }
}

#[test]
fn lagging_replica_catches_up_from_snapshot() {
    for seed in 0..SEEDS {
        let mut cfg = GroupConfig::new(3, seed);
        cfg.loss_per_mille = 10;
        cfg.delay_ticks_max = 2;
        // The journals keep 10 entries below the checkpoints: the lagging replica misses 100,
        // so the leader has none of what it lacks and sends a snapshot.
        cfg.retain_entries = 10;
        let mut g = Group::new(cfg);
        let leader = g.elect();
        g.commit_n(0, 5);
        let lagging = g.ids().into_iter().find(|i| *i != leader).unwrap();
        g.crash(lagging);
        g.commit_n(100, 100);
        let compacted = g.member(leader).unwrap().replica().status().snapshot_index;
        assert!(compacted > 20, "seed {seed}: the leader compacted past the lagging replica");
        g.restart(lagging);
        g.settle();
        assert!(g.images >= 1, "seed {seed}: the lagging replica was sent a database image");
        let s = g.member(lagging).unwrap().status();
        assert_eq!(s.awaiting_image, None, "seed {seed}");
        assert!(s.replica.snapshot_index >= compacted.min(s.replica.applied), "seed {seed}");
        // It keeps up afterwards, by log.
        g.commit_n(300, 20);
        g.settle();
        let ids = g.ids();
        let applied: Vec<u64> =
            ids.iter().map(|i| g.member(*i).unwrap().status().replica.applied).collect();
        assert!(applied.windows(2).all(|w| w[0] == w[1]), "seed {seed}: {applied:?}");
        let l = g.member(leader).map(|m| m.status().next_lsn);
        if let Some(l) = l {
            assert_eq!(g.member(lagging).unwrap().status().next_lsn, l, "seed {seed}");
        }
        g.check_acked_at(lagging);
        let first = g.pages(ids[0]);
        for id in &ids[1..] {
            assert_eq!(g.pages(*id), first, "seed {seed}: replica {id}'s pages");
        }
        assert_eq!(g.acked.len(), 125, "seed {seed}");
    }
}

/// A leader cut off from its group believes it leads until check-quorum deposes it, and a
/// newer leader may commit meanwhile. What it would answer alone (a read-only commit, validated
/// on its own state and logging nothing) is held until the group confirms it still leads, so
/// the cut-off leader never answers it; a leader that reaches its group answers after a round
/// of heartbeats.
#[test]
fn deposed_leader_answers_nothing_alone() {
    for seed in 0..SEEDS {
        let mut g = Group::new(GroupConfig::new(3, seed));
        let leader = g.elect();
        let reads: Vec<Oref> = g.commit_n(0, 3).iter().map(|a| a.oref).collect();
        let t = g.submit_read_only(leader, reads.clone());
        assert_eq!(g.answer(t), None, "seed {seed}: answered before the group confirmed");
        assert!(g.run_until(COMMIT_TICKS_MAX, |g| g.answer(t).is_some()), "seed {seed}");
        assert!(matches!(g.answer(t), Some(Some(_))), "seed {seed}: {:?}", g.answer(t));

        let others: Vec<u64> = g.ids().into_iter().filter(|i| *i != leader).collect();
        g.partition(&[&[leader], &others]);
        let t = g.submit_read_only(leader, reads.clone());
        assert!(
            g.run_until(SERVE_TICKS_MAX, |g| g.serving().is_some_and(|l| l != leader)),
            "seed {seed}: the majority elects a new leader"
        );
        // The new leader commits while the old one may still think it leads.
        assert!(g.commit(100, COMMIT_TICKS_MAX).is_some(), "seed {seed}");
        assert!(
            g.run_until(SERVE_TICKS_MAX, |g| !g.member(leader).is_some_and(|m| m.is_serving())),
            "seed {seed}: check-quorum deposes the cut-off leader"
        );
        assert_eq!(g.answer(t), Some(None), "seed {seed}: the cut-off leader answered alone");
    }
}

/// A replica dies for good and the operator replaces it online: a new replica (an empty
/// database, a journal with the founders' membership) is added, then the dead one removed,
/// while the group commits. The new replica catches up by log, or, once the journals were
/// compacted, from a snapshot and a database image; it ends with the same pages, and the group
/// of three it now forms survives the loss of its leader.
#[test]
fn replace_dead_replica_online() {
    for seed in 0..SEEDS / 2 {
        for retain in [1_000, 10] {
            let mut cfg = GroupConfig::new(3, seed);
            cfg.retain_entries = retain;
            let mut g = Group::new(cfg);
            let leader = g.elect();
            g.commit_n(0, 5);
            let dead = g.ids().into_iter().find(|i| *i != leader).unwrap();
            g.crash(dead);
            g.commit_n(100, 60);
            g.add_node(4);
            let add = Bytes::from_static(b"127.0.0.1:7004");
            g.propose_membership(MembershipChange::Add { id: 4, context: add.clone() })
                .unwrap_or_else(|e| panic!("seed {seed}: adding 4: {e}"));
            // A second change before the first applies is refused, not dropped silently.
            let again = g.propose_membership(MembershipChange::Remove { id: dead });
            assert!(matches!(again, Err(ProposeError::Membership(_))), "seed {seed}: {again:?}");
            let has = |g: &Group, r: u64, v: u64, yes: bool| {
                g.memberships
                    .iter()
                    .rev()
                    .find(|(at, _)| *at == r)
                    .is_some_and(|(_, vs)| vs.contains(&v) == yes)
            };
            assert!(
                g.run_until(COMMIT_TICKS_MAX, |g| g.serving().is_some_and(|l| has(g, l, 4, true))),
                "seed {seed} retain {retain}: the leader applied the addition"
            );
            // Four voters, one dead: every commit now needs the new replica.
            g.commit_n(200, 10);
            g.propose_membership(MembershipChange::Remove { id: dead })
                .unwrap_or_else(|e| panic!("seed {seed}: removing {dead}: {e}"));
            assert!(
                g.run_until(COMMIT_TICKS_MAX, |g| has(g, 4, dead, false)),
                "seed {seed} retain {retain}: the new replica applied the removal"
            );
            g.commit_n(300, 10);
            g.settle();
            if retain == 10 {
                assert!(g.images >= 1, "seed {seed}: the new replica needed an image");
            }
            let leader = g.serving().expect("a leader serves");
            g.check_acked_at(4);
            assert_eq!(g.pages(4), g.pages(leader), "seed {seed} retain {retain}");
            let voters = g.member(4).unwrap().voters();
            assert_eq!(voters.len(), 3, "seed {seed}: {voters:?}");
            assert!(!voters.contains(&dead) && g.member(4).unwrap().is_voter(), "seed {seed}");
            // The new group of three loses its leader and goes on.
            g.crash(leader);
            g.commit_n(400, 5);
            let now = g.serving().expect("a new leader serves");
            assert_ne!(now, leader);
            g.settle();
            for id in voters.iter().filter(|i| **i != leader) {
                g.check_acked_at(*id);
            }
            assert_eq!(g.acked.len(), 90, "seed {seed} retain {retain}");
        }
    }
}

/// The leader refuses membership changes that would break the group or that raft-rs would
/// drop: its own removal, a replica that is no voter, an id already a voter or 0.
#[test]
fn membership_changes_that_cannot_be_made_are_refused() {
    let mut g = Group::new(GroupConfig::new(3, 7));
    let leader = g.elect();
    let refused = |r: Result<_, ProposeError>| matches!(r, Err(ProposeError::Membership(_)));
    assert!(refused(g.propose_membership(MembershipChange::Remove { id: leader })));
    assert!(refused(g.propose_membership(MembershipChange::Remove { id: 9 })));
    let other = g.ids().into_iter().find(|i| *i != leader).unwrap();
    let add = |id| MembershipChange::Add { id, context: Bytes::new() };
    assert!(refused(g.propose_membership(add(other))));
    assert!(refused(g.propose_membership(add(0))));
    let big = MembershipChange::Add { id: 5, context: Bytes::from(vec![0u8; 4096]) };
    assert!(matches!(g.propose_membership(big), Err(ProposeError::TooLarge { .. })));
    // A follower proposes nothing: it names the leader.
    let r = g.propose_membership_at(other, add(5));
    assert!(matches!(r, Err(ProposeError::NotLeader { leader: Some(l) }) if l == leader), "{r:?}");
    // None of it changed anything: the group commits as before.
    g.commit_n(0, 3);
    assert_eq!(g.member(leader).unwrap().voters(), vec![1, 2, 3]);
    assert_eq!(g.acked.len(), 3);
}

/// A group of three whose follower missed 100 commits while the journals keep 10 entries, so
/// that it needs a database image, restarted while no image can be had, after it asked for
/// one `failures` times: (the group, its leader, the lagging replica).
fn lagging_without_images(seed: u64, failures: u64) -> (Group, u64, u64) {
    let mut cfg = GroupConfig::new(3, seed);
    cfg.retain_entries = 10;
    let mut g = Group::new(cfg);
    let leader = g.elect();
    g.commit_n(0, 5);
    let lagging = g.ids().into_iter().find(|i| *i != leader).unwrap();
    g.crash(lagging);
    g.commit_n(100, 100);
    g.refuse_images = true;
    g.restart(lagging);
    assert!(
        g.run_until(SERVE_TICKS_MAX, |g| g.image_failures >= failures),
        "seed {seed}: the lagging replica asked for an image {failures} times"
    );
    (g, leader, lagging)
}

/// The image cannot be fetched at first, and the lagging replica crashes while it waits
/// (its journal holds the snapshot, its database does not reach it): reopened, it asks again
/// and catches up once an image can be had.
#[test]
fn lagging_replica_waiting_for_an_image_retries_and_survives_a_crash() {
    for seed in 0..SEEDS / 4 {
        let (mut g, leader, lagging) = lagging_without_images(seed, 2);
        let s = g.member(lagging).unwrap().status();
        assert!(s.awaiting_image.is_some(), "seed {seed}: {s:?}");
        // The group goes on meanwhile.
        g.commit_n(300, 5);
        g.crash(lagging);
        g.restart(lagging);
        assert!(
            g.member(lagging).unwrap().status().awaiting_image.is_some(),
            "seed {seed}: reopened, it still needs the image"
        );
        g.refuse_images = false;
        g.settle();
        assert_eq!(g.member(lagging).unwrap().status().awaiting_image, None, "seed {seed}");
        g.check_acked_at(lagging);
        assert_eq!(g.pages(lagging), g.pages(leader), "seed {seed}");
    }
}

/// The leader that sent the snapshot dies while the lagging replica waits for its image: the
/// other replica leads (the waiting one votes for it but never campaigns), and the image comes
/// from it once its checkpoint reaches what the snapshot needs.
#[test]
fn lagging_replica_gets_its_image_from_a_new_leader() {
    for seed in 0..SEEDS / 4 {
        let (mut g, old, lagging) = lagging_without_images(seed, 1);
        g.crash(old);
        g.refuse_images = false;
        let new = g.elect();
        assert_ne!(new, lagging, "seed {seed}: a replica waiting for an image never serves");
        // Commits go on with the waiting replica's votes and acknowledgements.
        g.commit_n(300, 60);
        g.settle();
        assert_eq!(g.member(lagging).unwrap().status().awaiting_image, None, "seed {seed}");
        g.restart(old);
        g.settle();
        for id in g.ids() {
            g.check_acked_at(id);
        }
        assert_eq!(g.pages(lagging), g.pages(new), "seed {seed}");
        assert_eq!(g.pages(old), g.pages(new), "seed {seed}");
    }
}

#[test]
fn a_minority_partition_makes_no_progress_and_loses_nothing() {
    for seed in 0..SEEDS {
        let mut g = Group::new(GroupConfig::new(5, seed));
        let old = g.elect();
        g.commit_n(0, 10);
        let ids = g.ids();
        let buddy = ids.iter().copied().find(|i| *i != old).unwrap();
        let majority: Vec<u64> = ids.iter().copied().filter(|i| *i != old && *i != buddy).collect();
        g.partition(&[&[old, buddy], &majority]);
        let minority_tickets: Vec<u64> = (0..5).map(|i| g.submit(old, 500 + i)).collect();
        let before = g.acked.len();
        // The minority side never serves again while cut off; the majority does.
        assert!(
            g.run_until(SERVE_TICKS_MAX, |g| g.serving().is_some_and(|l| majority.contains(&l)))
        );
        g.commit_n(100, 10);
        for _ in 0..COMMIT_TICKS_MAX {
            g.tick();
            for id in [old, buddy] {
                assert!(
                    !g.member(id).is_some_and(|m| m.is_serving()) || id == old,
                    "seed {seed}: minority replica {id} serves"
                );
            }
        }
        assert!(
            !g.member(old).unwrap().is_serving() && !g.member(buddy).unwrap().is_serving(),
            "seed {seed}: the minority stopped serving"
        );
        for t in &minority_tickets {
            assert!(!matches!(g.answer(*t), Some(Some(_))), "seed {seed}: minority acknowledged");
        }
        assert_eq!(g.acked.len(), before + 10, "seed {seed}: only the majority's commits");
        g.heal();
        g.settle();
        for id in g.ids() {
            g.check_acked_at(id);
        }
    }
}

/// The checks above can fail: a member that acknowledges its pending commits when deposed is
/// caught by the deposed leader's scenario.
#[test]
fn a_member_that_acknowledges_when_deposed_is_caught() {
    let mut cfg = GroupConfig::new(5, 0);
    cfg.mutant = Some(thor_replica::MemberMutant::AcknowledgeWhenDeposed);
    let mut g = Group::new(cfg);
    let old = g.elect();
    g.commit_n(0, 5);
    let others: Vec<u64> = g.ids().into_iter().filter(|i| *i != old).collect();
    g.partition(&[&[old], &others]);
    let stranded: Vec<u64> = (0..5).map(|i| g.submit(old, 1000 + i)).collect();
    g.run_until(SERVE_TICKS_MAX, |g| !g.member(old).is_some_and(|m| m.is_serving()));
    assert!(
        stranded.iter().any(|t| matches!(g.answer(*t), Some(Some(_)))),
        "the mutant acknowledged a stranded commit, which deposed_leader_cannot_acknowledge \
         refuses"
    );
}
