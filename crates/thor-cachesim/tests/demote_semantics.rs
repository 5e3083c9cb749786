//! The semantics of each design, pinned on small hand-worked cases. Blocks are letters
//! (`A` = 0, `B` = 1, ...); cache contents are listed from the evict-next end, as in the paper.

use thor_cachesim::hierarchy::{
    Demotion, Design, Hierarchy, HierarchyConfig, Level, Outcome, Step,
};
use thor_policy::HashSlots;
use thor_policy::PolicyKind::{self, Lru, Mru};

fn design(client: PolicyKind, array: PolicyKind, demote: bool) -> Design {
    Design { client, array, demote }
}

fn hierarchy(d: Design, client_blocks: usize, array_blocks: usize) -> Hierarchy {
    Hierarchy::new(&HierarchyConfig { design: d, clients: 1, client_blocks, array_blocks }).unwrap()
}

fn id(letter: char) -> u64 {
    u64::from(letter as u8 - b'A')
}

fn letters(blocks: Vec<u64>) -> String {
    blocks.into_iter().map(|b| (b'A' + b as u8) as char).collect()
}

/// The client's and the array's contents, as strings of letters.
fn state(h: &Hierarchy) -> (String, String) {
    (letters(h.client_blocks(0)), letters(h.array_blocks()))
}

/// Requests `block` and returns the outcome, the state after the eviction step (if it was
/// reached) and the final state.
fn step(h: &mut Hierarchy, block: char) -> (Outcome, Option<(String, String)>, (String, String)) {
    let mut next = None;
    let outcome = h.access_observed(0, id(block), |s, h| {
        assert_eq!(s, Step::AfterEviction);
        next = Some(state(h));
    });
    (outcome, next, state(h))
}

fn st(client: &str, array: &str) -> (String, String) {
    (client.to_string(), array.to_string())
}

const DISK: Level = Level::Disk;

/// Section 4.5: client and array hold three blocks each, the workload loops over A..E, LRU at
/// both levels with demotion. The paper shows the state after warm-up ("Start"), after the client
/// demotes C to read A ("Next") and after the read ("Final"). Every step of the warm-up is
/// checked too.
#[test]
fn lru_lru_demote_three_block_example_state_by_state() {
    let mut h = hierarchy(design(Lru, Lru, true), 3, 3);
    let none = Demotion::None;
    // Cold caches fill: every block comes from disk and lands at the evict-last end of both.
    for (b, want) in [('A', st("A", "A")), ('B', st("AB", "AB")), ('C', st("ABC", "ABC"))] {
        let (outcome, next, after) = step(&mut h, b);
        assert_eq!(outcome, Outcome { level: DISK, demotion: none });
        assert_eq!(next, None, "a client with room evicts nothing");
        assert_eq!(after, want, "after {b}");
    }
    // D: the client demotes its LRU block A, which the array already has: a reorder only (A
    // moves to the evict-last end). Then the array evicts B to read D.
    let (outcome, next, after) = step(&mut h, 'D');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Reordered });
    assert_eq!(next, Some(st("BC", "BCA")));
    assert_eq!(after, st("BCD", "CAD"));
    // E: B is demoted (a transfer, evicting C from the array), then the array evicts A for E.
    let (outcome, next, after) = step(&mut h, 'E');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Transferred });
    assert_eq!(next, Some(st("CD", "ADB")));
    // The paper's "Start" state: client CDE, array DBE.
    assert_eq!(after, st("CDE", "DBE"));
    // A: "the client demotes the LRU block C, and the array puts it at the longest-lived end of
    // its queue (state Next). The array then ejects block B to make way for A (state Final)".
    let (outcome, next, after) = step(&mut h, 'A');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Transferred });
    assert_eq!(next, Some(st("DE", "BEC")), "Next");
    assert_eq!(after, st("DEA", "ECA"), "Final");
    // "... but must then retrieve B from disk on the next request."
    let (outcome, _, _) = step(&mut h, 'B');
    assert_eq!(outcome.level, DISK);
}

/// An MRU array puts disk reads and read hits at its evict-next end and demoted blocks at its
/// evict-last end, so with an LRU client the pair acts as one LRU cache of N_c + N_a - 1 blocks:
/// the block just read is the only one cached twice, and it is the array's next victim.
#[test]
fn lru_mru_demote_reads_go_next_and_demotes_go_last() {
    let mut h = hierarchy(design(Lru, Mru, true), 2, 2);
    assert_eq!(step(&mut h, 'A').2, st("A", "A"));
    assert_eq!(step(&mut h, 'B').2, st("AB", "BA"), "disk reads enter at the evict-next end");
    // C: the client demotes A, which the array holds: reorder to the evict-last end (it is there
    // already). The array then evicts B (just read, and still at the client) to read C.
    let (outcome, next, after) = step(&mut h, 'C');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Reordered });
    assert_eq!(next, Some(st("B", "BA")));
    assert_eq!(after, st("BC", "CA"));
    // D: B is demoted; the array makes room by evicting C (the double-cached block), keeps B
    // last, then evicts A for D.
    let (outcome, next, after) = step(&mut h, 'D');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Transferred });
    assert_eq!(next, Some(st("C", "AB")));
    assert_eq!(after, st("CD", "DB"));
    // B again: C is demoted (evicting the double-cached D), B is an array hit and moves to the
    // evict-next end, from where the next demotion will push it out.
    let (outcome, next, after) = step(&mut h, 'B');
    assert_eq!(outcome, Outcome { level: Level::Array, demotion: Demotion::Transferred });
    assert_eq!(next, Some(st("D", "BC")));
    assert_eq!(after, st("DB", "BC"));
}

/// Without demotion an LRU array puts read hits and disk reads at its evict-last end and the
/// client drops its victims silently.
#[test]
fn lru_lru_none_is_inclusive() {
    let mut h = hierarchy(design(Lru, Lru, false), 2, 2);
    for b in ['A', 'B', 'C'] {
        step(&mut h, b);
    }
    assert_eq!(state(&h), st("BC", "BC"), "both levels hold the same blocks");
    let (outcome, next, after) = step(&mut h, 'B');
    assert_eq!(outcome, Outcome { level: Level::Client, demotion: Demotion::None });
    assert_eq!((next, after), (None, st("CB", "BC")), "a client hit does not reach the array");
    let (outcome, next, after) = step(&mut h, 'A');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::None });
    assert_eq!(next, Some(st("B", "BC")), "no demotion: the array is untouched");
    assert_eq!(after, st("BA", "CA"));
}

/// An MRU client moves hit blocks to its evict-next end and evicts from there.
#[test]
fn mru_client_evicts_the_block_it_used_last() {
    let mut h = hierarchy(design(Mru, Lru, false), 2, 4);
    step(&mut h, 'A');
    step(&mut h, 'B');
    assert_eq!(state(&h).0, "BA");
    step(&mut h, 'A');
    assert_eq!(state(&h).0, "AB", "a hit moves A to the evict-next end");
    let (_, next, after) = step(&mut h, 'C');
    assert_eq!(next.unwrap().0, "B", "A, the most recently used, is evicted");
    assert_eq!(after.0, "CB");
}

/// A demotion the array cannot accommodate is rejected, and the client drops the block anyway.
#[test]
fn a_zero_block_array_rejects_demotions_and_the_client_still_drops() {
    let mut h = hierarchy(design(Lru, Lru, true), 1, 0);
    assert_eq!(step(&mut h, 'A').0, Outcome { level: DISK, demotion: Demotion::None });
    let (outcome, next, after) = step(&mut h, 'B');
    assert_eq!(outcome, Outcome { level: DISK, demotion: Demotion::Rejected });
    assert_eq!(next, Some(st("", "")));
    assert_eq!(after, st("B", ""));
}

/// A demotion to an MRU array that already holds the block moves it to the evict-last end and
/// transfers no data.
#[test]
fn demoting_a_block_the_array_holds_only_reorders() {
    let mut h = hierarchy(design(Mru, Mru, true), 1, 3);
    step(&mut h, 'A');
    step(&mut h, 'B'); // A is demoted: the array holds it (reorder); the array reads B.
    assert_eq!(state(&h), st("B", "BA"));
    let (outcome, next, after) = step(&mut h, 'C');
    assert_eq!(outcome.demotion, Demotion::Reordered);
    assert_eq!(next, Some(st("", "AB")), "B moved from the evict-next to the evict-last end");
    assert_eq!(after, st("C", "CAB"));
}

/// Several clients share the array: a block one client read is an array hit for another.
#[test]
fn clients_share_the_array() {
    let config =
        HierarchyConfig { design: Design::BASELINE, clients: 2, client_blocks: 2, array_blocks: 4 };
    let mut h = Hierarchy::new(&config).unwrap();
    assert_eq!(h.access(0, 7).level, DISK);
    assert_eq!(h.access(1, 7).level, Level::Array);
    assert_eq!(h.access(1, 7).level, Level::Client);
    assert_eq!(h.client_blocks(0), [7]);
    assert_eq!(h.client_blocks(1), [7]);
}

#[test]
fn design_names_round_trip() {
    for d in Design::PAPER {
        assert_eq!(d.to_string().parse::<Design>().unwrap(), d);
    }
    assert_eq!("lru-mru-demote".parse::<Design>().unwrap(), Design::PROPOSED);
    assert_eq!("CLOCK-ARC-none".parse::<Design>().unwrap().array, PolicyKind::Arc);
    assert!("LRU-MRU".parse::<Design>().is_err());
    assert!("LRU-FOO-demote".parse::<Design>().is_err());
    assert!("LRU-MRU-maybe".parse::<Design>().is_err());
}

#[test]
fn each_client_cache_can_have_its_own_size() {
    let d = design(PolicyKind::Lru, PolicyKind::Lru, false);
    let config = HierarchyConfig { design: d, clients: 2, client_blocks: 9, array_blocks: 0 };
    let mut h = Hierarchy::with_client_sizes(&config, &[1, 3], HashSlots::new).unwrap();
    for b in ['a', 'b', 'c', 'd'] {
        h.access(0, id(b));
        h.access(1, id(b));
    }
    assert_eq!(letters(h.client_blocks(0)), "d");
    assert_eq!(letters(h.client_blocks(1)), "bcd");
    let e = Hierarchy::with_client_sizes(&config, &[1], HashSlots::new).unwrap_err();
    assert!(e.to_string().contains("1 client cache sizes for 2 clients"), "{e}");
}
