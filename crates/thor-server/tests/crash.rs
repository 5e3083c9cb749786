//! Crash tests over the fault-injecting disk.
//!
//! A seeded workload commits random transactions; the disk dies after a random number of
//! operations (anywhere: in a log write, a page write, the double-write buffer, a superblock
//! rename) or fails one chosen write or fsync; then it crashes (unsynced writes lost, the last
//! one possibly torn) and the engine reopens. Every acknowledged commit must be there, and the
//! one commit that was in flight must be entirely there or entirely absent.
//!
//! Concurrent writers with background installation under crashes are the whole-cluster
//! simulation's (`thor-sim`), where a seed replays a run exactly; these tests drive the engine
//! from one thread.
//!
//! The check does not need to know orefs: every object records (owner, seq). Each commit `i`
//! of a writer sets all of the writer's counter objects to seq `i` and creates a few items with
//! seq `i`; after recovery the counters of a writer must agree on one `k` that is its number of
//! acknowledged commits (or one more), and its created items must have exactly the seqs 1..=k.

mod common;

use std::collections::BTreeMap;

use common::*;
use thor_core::le::u32_at;
use thor_core::{Oref, builtin};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::{FaultDisk, FaultPlan};

/// A tiny deterministic PRNG (SplitMix64) so a seed replays a run exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

const COUNTERS: u32 = 1000; // seq value marking a counter object (owner = writer)
const ITEM: u32 = 1; // marking created items: owner = writer * 10 + ITEM

/// One writer's objects.
struct Writer {
    id: u32,
    counters: Vec<Oref>,
    acked: u32,
    last_item: u32,
}

fn setup(engine: &Engine, class: Oref, writers: u32, counters_each: u32) -> Vec<Writer> {
    (0..writers)
        .map(|w| {
            let created = (0..counters_each)
                .map(|_| item(class.raw(), 0, COUNTERS + w, 0, &[0; 16]))
                .collect();
            let out = engine.commit(CommitRequest { versions: vec![], created }).unwrap();
            Writer { id: w, counters: out.created, acked: 0, last_item: 0 }
        })
        .collect()
}

/// Commit number `acked + 1` of writer `w`.
fn next_commit(w: &Writer, class: Oref, rng: &mut Rng) -> CommitRequest {
    let seq = w.acked + 1;
    let versions = w
        .counters
        .iter()
        .map(|o| (*o, item(class.raw(), w.last_item, COUNTERS + w.id, seq, &[seq as u8; 16])))
        .collect();
    let n_items = 1 + rng.below(4) as usize;
    let created = (0..n_items)
        .map(|i| {
            let len = rng.below(300) as usize;
            // Items chain to the previous one in the commit, or to the writer's last item.
            let next = if i == 0 { w.last_item } else { tag(i as u32 - 1) };
            item(class.raw(), next, w.id * 10 + ITEM, seq, &vec![seq as u8; len])
        })
        .collect();
    CommitRequest { versions, created }
}

/// Checks the recovered state; `acked[w]` is writer w's acknowledged commit count.
fn check(engine: &Engine, acked: &[u32], seed: u64) {
    let objects = scan(engine);
    let mut counters: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut items: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (oref, o) in &objects {
        if builtin::is_builtin(*oref) || u32_at(o, 0) == builtin::META.raw() {
            continue;
        }
        let (_, owner, seq) = fields(o);
        if owner >= COUNTERS {
            counters.entry(owner - COUNTERS).or_default().push(seq);
            // A counter's payload is written with its seq: a torn or mixed version would show.
            assert!(o[20..].iter().all(|&b| b == seq as u8), "seed {seed}: mixed counter bytes");
        } else {
            items.entry(owner / 10).or_default().push(seq);
            let payload = &o[20..20 + u32_at(o, 16) as usize];
            assert!(payload.iter().all(|&b| b == seq as u8), "seed {seed}: mixed item bytes");
        }
    }
    for (w, &a) in acked.iter().enumerate() {
        let w = w as u32;
        let cs =
            counters.get(&w).unwrap_or_else(|| panic!("seed {seed}: writer {w} lost its counters"));
        let k = cs[0];
        assert!(cs.iter().all(|&s| s == k), "seed {seed}: writer {w} counters disagree: {cs:?}");
        assert!(k == a || k == a + 1, "seed {seed}: writer {w} has {k} commits, {a} acknowledged");
        let mut seqs = items.remove(&w).unwrap_or_default();
        seqs.sort();
        seqs.dedup();
        let want: Vec<u32> = (1..=k).collect();
        assert_eq!(seqs, want, "seed {seed}: writer {w} items");
    }
    assert!(items.is_empty(), "seed {seed}: items of unknown writers");
}

fn opts(flush_every: bool) -> EngineOptions {
    let mut o = small_opts();
    if !flush_every {
        // A MOB large enough that only the explicit rounds below flush.
        o.mob_bytes = 1 << 30;
    }
    o
}

/// Runs a seeded single-writer workload until it finishes or the disk fails; returns the
/// acknowledged count.
fn workload(engine: &Engine, class: Oref, w: &mut Writer, seed: u64, commits: u32, flush: bool) {
    let mut rng = Rng(seed);
    for _ in 0..commits {
        let req = next_commit(w, class, &mut rng);
        match engine.commit(req) {
            Ok(out) => {
                w.acked += 1;
                w.last_item = out.created.last().unwrap().raw();
            }
            Err(_) => return,
        }
        if flush && rng.below(4) == 0 && engine.flush_round().is_err() {
            return;
        }
    }
}

fn crash_case(seed: u64, flush: bool, fault: impl FnOnce(&FaultDisk, &mut Rng)) {
    let disk = FaultDisk::new();
    let engine = Engine::create(arc(disk.clone()), opts(flush)).unwrap();
    let class = install_class(&engine);
    let mut writers = setup(&engine, class, 1, 3);
    let mut rng = Rng(seed ^ 0xDEAD_BEEF);
    fault(&disk, &mut rng);
    workload(&engine, class, &mut writers[0], seed, 40, flush);
    let acked = [writers[0].acked];
    drop(engine);
    disk.crash(seed);
    let engine = Engine::open(arc(disk.clone()), opts(flush))
        .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
    check(&engine, &acked, seed);
    // The recovered engine keeps working and survives a clean reopen.
    let mut w = Writer { id: 0, counters: writers[0].counters.clone(), acked: 0, last_item: 0 };
    w.acked = fields(&read(&engine, w.counters[0]).unwrap()).2;
    let mut rng = Rng(seed);
    let req = next_commit(&w, class, &mut rng);
    engine.commit(req).unwrap();
    engine.flush_all().unwrap();
    drop(engine);
    Engine::open(arc(disk), opts(flush)).unwrap();
}

/// How many disk operations a full run of the workload takes, to place faults inside it.
fn ops_of_full_run(seed: u64, flush: bool) -> (u64, u64, u64) {
    let disk = FaultDisk::new();
    let engine = Engine::create(arc(disk.clone()), opts(flush)).unwrap();
    let class = install_class(&engine);
    let mut writers = setup(&engine, class, 1, 3);
    let before = disk.counters();
    workload(&engine, class, &mut writers[0], seed, 40, flush);
    let after = disk.counters();
    (after.ops - before.ops, after.writes - before.writes, after.syncs - before.syncs)
}

fn seeds() -> std::ops::Range<u64> {
    0..std::env::var("THOR_CRASH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
}

#[test]
fn disk_dies_at_a_random_point_without_flushing() {
    for seed in seeds() {
        let (ops, _, _) = ops_of_full_run(seed, false);
        crash_case(seed, false, |d, rng| {
            let at = d.counters().ops + rng.below(ops + 1);
            d.set_plan(FaultPlan { die_after_ops: Some(at), ..FaultPlan::default() });
        });
    }
}

#[test]
fn disk_dies_at_a_random_point_while_flushing_and_truncating() {
    for seed in seeds() {
        let (ops, _, _) = ops_of_full_run(seed, true);
        crash_case(seed, true, |d, rng| {
            let at = d.counters().ops + rng.below(ops + 1);
            d.set_plan(FaultPlan { die_after_ops: Some(at), ..FaultPlan::default() });
        });
    }
}

#[test]
fn a_failed_write_or_fsync_stops_the_engine_and_recovery_is_exact() {
    for seed in seeds() {
        let flush = seed % 2 == 0;
        let (_, writes, syncs) = ops_of_full_run(seed, flush);
        crash_case(seed, flush, |d, rng| {
            let c = d.counters();
            let plan = if rng.below(2) == 0 {
                FaultPlan {
                    fail_write_at: Some(c.writes + 1 + rng.below(writes)),
                    ..FaultPlan::default()
                }
            } else {
                FaultPlan {
                    fail_sync_at: Some(c.syncs + 1 + rng.below(syncs)),
                    ..FaultPlan::default()
                }
            };
            d.set_plan(plan);
        });
    }
}
