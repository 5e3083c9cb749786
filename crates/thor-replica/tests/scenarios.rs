//! Scenario tests of a replica group, each named after the behaviour it shows, run by the
//! deterministic harness (`thor_replica::sim`): one thread, `MemDisk`s, a seeded network.

use bytes::Bytes;
use thor_replica::Role;
use thor_replica::sim::{Cluster, ClusterConfig, NetConfig};

/// Ticks within which a group whose majority can talk must have a leader: a few election
/// timeouts (at most 2 × 10 ticks each), room for split votes and pre-votes.
const LEADER_TICKS_MAX: u64 = 200;
/// Ticks within which a record proposed to such a group must be acknowledged.
const COMMIT_TICKS_MAX: u64 = 300;

fn rec(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

fn elect(c: &mut Cluster) -> u64 {
    assert!(c.run_until(LEADER_TICKS_MAX, |c| c.leader().is_some()), "a leader within bound");
    c.leader().unwrap()
}

/// Commits `n` records named `{tag}-{i}` and returns their indexes.
fn commit_n(c: &mut Cluster, tag: &str, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            c.commit(rec(&format!("{tag}-{i}")), COMMIT_TICKS_MAX)
                .unwrap_or_else(|| panic!("{tag}-{i} acknowledged within bound"))
        })
        .collect()
}

/// Lets everything in flight settle: every running replica applies up to `index`.
fn settle(c: &mut Cluster, index: u64) {
    assert!(c.run_until(COMMIT_TICKS_MAX, |c| c.all_applied(index)), "all replicas caught up");
    c.check_acknowledged_everywhere();
}

#[test]
fn leader_crash_loses_no_acknowledged_commit() {
    for seed in 0..20 {
        let mut cfg = ClusterConfig::new(3, seed);
        cfg.net = NetConfig { loss_per_mille: 20, delay_ticks_max: 3 };
        // Replicas often sync late: the leader's crash loses what it had not synced.
        cfg.defer_sync_per_mille = 500;
        let mut c = Cluster::new(cfg);
        let first = elect(&mut c);
        let before = commit_n(&mut c, "before", 10);
        c.crash(first);
        let second = elect(&mut c);
        assert_ne!(second, first, "a surviving replica leads");
        let after = commit_n(&mut c, "after", 10);
        c.restart(first);
        settle(&mut c, *after.last().unwrap());
        for id in c.ids() {
            let held: Vec<u64> = c.applied_records(id).iter().map(|(i, _)| *i).collect();
            for i in before.iter().chain(&after) {
                assert!(held.contains(i), "seed {seed}: replica {id} holds acknowledged {i}");
            }
        }
    }
}

#[test]
fn deposed_leader_cannot_acknowledge() {
    for seed in 0..20 {
        let mut c = Cluster::new(ClusterConfig::new(5, seed));
        let old = elect(&mut c);
        commit_n(&mut c, "base", 3);
        let others: Vec<u64> = c.ids().into_iter().filter(|i| *i != old).collect();
        // The leader is cut off but does not know it yet: it still takes proposals.
        c.partition(&[&[old], &others]);
        let mut stranded = Vec::new();
        for i in 0..5 {
            stranded.push(c.propose(old, rec(&format!("stranded-{i}"))).expect("still leader"));
        }
        // The majority elects a new leader and commits over the stranded entries; once it has
        // applied its own term's first entry, it holds every committed record.
        assert!(c.run_until(LEADER_TICKS_MAX, |c| c.leader().is_some_and(|l| l != old)));
        let leader = c.leader().unwrap();
        assert!(
            c.run_until(COMMIT_TICKS_MAX, |c| c.replica(leader).unwrap().status().term_applied)
        );
        let new = commit_n(&mut c, "majority", 5);
        // With check-quorum the isolated leader steps down on its own.
        assert!(c.run_until(LEADER_TICKS_MAX, |c| c.replica(old).unwrap().status().role
            != Role::Leader));
        c.heal();
        settle(&mut c, *new.last().unwrap());
        for p in &stranded {
            assert!(
                c.acknowledged().get(&p.index).is_none_or(|(t, _)| *t != p.term),
                "seed {seed}: stranded {p:?} was acknowledged"
            );
            assert!(
                c.lost().iter().any(|(id, l)| *id == old && l == p),
                "seed {seed}: stranded {p:?} reported lost to its proposer"
            );
        }
    }
}

#[test]
fn minority_partition_makes_no_progress_majority_does() {
    for seed in 0..20 {
        let mut c = Cluster::new(ClusterConfig::new(5, seed));
        let leader = elect(&mut c);
        let base = commit_n(&mut c, "base", 3);
        settle(&mut c, *base.last().unwrap());
        // The old leader and one other on the minority side.
        let mut ids = c.ids();
        ids.retain(|i| *i != leader);
        let minority = [leader, ids[0]];
        let majority = [ids[1], ids[2], ids[3]];
        c.partition(&[&minority, &majority]);
        let frozen: Vec<u64> = minority.iter().map(|i| c.applied_index(*i)).collect();
        for i in 0..3 {
            // The old leader may still accept a proposal before it steps down; none commits.
            let _ = c.propose(leader, rec(&format!("minority-{i}")));
        }
        assert!(
            c.run_until(LEADER_TICKS_MAX, |c| c.leader().is_some_and(|l| majority.contains(&l)))
        );
        let progress = commit_n(&mut c, "majority", 5);
        for _ in 0..LEADER_TICKS_MAX {
            c.tick();
        }
        for (n, id) in minority.iter().enumerate() {
            assert_eq!(
                c.applied_index(*id),
                frozen[n],
                "seed {seed}: minority replica {id} applied nothing"
            );
            assert_ne!(
                c.replica(*id).unwrap().status().role,
                Role::Leader,
                "seed {seed}: no minority leader"
            );
        }
        assert!(
            c.acknowledged().values().all(|(_, r)| !r.starts_with(b"minority")),
            "seed {seed}: nothing proposed on the minority side was acknowledged"
        );
        c.heal();
        let last = commit_n(&mut c, "healed", 1)[0];
        assert!(last > *progress.last().unwrap());
        settle(&mut c, last);
    }
}

#[test]
fn restarted_replica_recovers_its_log() {
    for seed in 0..20 {
        let mut c = Cluster::new(ClusterConfig::new(3, seed));
        let leader = elect(&mut c);
        let done = commit_n(&mut c, "r", 10);
        settle(&mut c, *done.last().unwrap());
        let follower = c.ids().into_iter().find(|i| *i != leader).unwrap();
        let last_before = c.replica(follower).unwrap().status().last_index;
        let applied_before: Vec<(u64, Bytes)> = c.applied_records(follower).to_vec();
        // Cut the follower off so that it can learn nothing from the others after the restart:
        // what it holds comes from its own disk.
        c.crash(follower);
        let others: Vec<u64> = c.ids().into_iter().filter(|i| *i != follower).collect();
        c.partition(&[&others, &[follower]]);
        c.restart(follower);
        let r = c.replica(follower).unwrap();
        assert!(r.log().recovery().records_replayed > 0, "seed {seed}: replayed its journal");
        assert_eq!(r.status().last_index, last_before, "seed {seed}: every synced entry recovered");
        // It re-applies its committed entries from its own log, the same sequence as before.
        assert!(c.run_until(COMMIT_TICKS_MAX, |c| c.applied_records(follower).len()
            >= applied_before.len()));
        assert_eq!(c.applied_records(follower)[..applied_before.len()], applied_before[..]);
        c.heal();
        let more = commit_n(&mut c, "after", 3);
        settle(&mut c, *more.last().unwrap());
    }
}

#[test]
fn replace_dead_replica_online() {
    for seed in 0..10 {
        let mut cfg = ClusterConfig::new(3, seed);
        // Compact often, so that the new replica catches up from a snapshot.
        cfg.compact_every = Some(8);
        let mut c = Cluster::new(cfg);
        let leader = elect(&mut c);
        commit_n(&mut c, "old", 20);
        let dead = c.ids().into_iter().find(|i| *i != leader).unwrap();
        c.crash(dead);
        // Remove the dead replica, then add a new one (one change at a time).
        for (add, remove) in [(vec![], vec![dead]), (vec![4], vec![])] {
            if add.contains(&4) {
                c.add_node(4);
            }
            let mut done = false;
            for _ in 0..COMMIT_TICKS_MAX {
                if let Some(l) = c.leader()
                    && c.propose_membership(l, &add, &remove).is_ok()
                {
                    done = c.run_until(COMMIT_TICKS_MAX, |c| {
                        let voters =
                            c.replica(c.leader().unwrap_or(l)).unwrap().conf_state().voters;
                        add.iter().all(|a| voters.contains(a))
                            && remove.iter().all(|r| !voters.contains(r))
                    });
                    if done {
                        break;
                    }
                }
                c.tick();
            }
            assert!(done, "seed {seed}: membership change +{add:?} -{remove:?} applied");
        }
        let mid = commit_n(&mut c, "new", 10);
        settle(&mut c, *mid.last().unwrap());
        assert!(c.applied_records(4).len() >= 30, "seed {seed}: the new replica holds everything");
        assert!(c.stats().restores > 0, "seed {seed}: it caught up from a snapshot");
        // The new replica is a voter: with one of the two old ones down, the group still
        // commits (two of {old, old, 4}).
        let victim = c.ids().into_iter().find(|i| *i != 4 && *i != dead).unwrap();
        c.crash(victim);
        let last = commit_n(&mut c, "quorum-with-new", 3);
        settle(&mut c, *last.last().unwrap());
        // The victim restarts from its disk, re-applies the membership changes in its log,
        // and catches up as a member of the new group.
        c.restart(victim);
        let end = commit_n(&mut c, "after-restart", 2);
        settle(&mut c, *end.last().unwrap());
        let voters = c.replica(victim).unwrap().conf_state().voters;
        assert!(voters.contains(&4) && !voters.contains(&dead), "seed {seed}: {voters:?}");
    }
}
