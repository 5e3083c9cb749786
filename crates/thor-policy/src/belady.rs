//! Belady's MIN: the fewest misses any replacement policy can have on a reference string.
//!
//! Offline, knowing the whole string, the optimal choice on a miss with a full cache is to evict
//! the cached block whose next reference is farthest in the future (or that is never referenced
//! again) (Belady, "A study of replacement algorithms for a virtual-storage computer", IBM
//! Systems Journal 1966; optimality proved by Mattson et al. 1970). No online policy can miss
//! less on the same string with the same number of blocks, so the count is the floor every page
//! cache's curve is drawn against.
//!
//! [`min_misses`] computes it in O(n log n): one backward pass finds each reference's next use,
//! then a max-heap of cached blocks keyed by next use gives the victim. A hit changes a block's
//! key; the old heap entry is left in place and skipped when it surfaces (its key no longer
//! matches the block's current next use), so the heap holds at most one entry per reference.
//!
//! Misses include the first reference to every block (cold misses), as a cache's fetch count
//! does.

use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::BlockId;

/// "Never referenced again".
const NEVER: usize = usize::MAX;

/// The misses of Belady's optimal replacement on `refs` with a cache of `capacity` blocks.
pub fn min_misses(refs: &[BlockId], capacity: usize) -> u64 {
    if capacity == 0 {
        return refs.len() as u64;
    }
    // next[i]: the index of the next reference to refs[i], or NEVER.
    let mut next = vec![NEVER; refs.len()];
    let mut seen: FxHashMap<BlockId, usize> = FxHashMap::default();
    for (i, &b) in refs.iter().enumerate().rev() {
        if let Some(j) = seen.insert(b, i) {
            next[i] = j;
        }
    }
    drop(seen);
    // Cached blocks and the index of their next reference.
    let mut cached: FxHashMap<BlockId, usize> = FxHashMap::default();
    cached.reserve(capacity.min(refs.len()));
    let mut heap: BinaryHeap<(usize, BlockId)> = BinaryHeap::new();
    let mut misses = 0u64;
    for (i, &b) in refs.iter().enumerate() {
        let n = next[i];
        if let Some(slot) = cached.get_mut(&b) {
            *slot = n;
            heap.push((n, b));
            continue;
        }
        misses += 1;
        if cached.len() >= capacity {
            // The cached block referenced farthest ahead; stale entries surface and are skipped.
            while let Some((key, victim)) = heap.pop() {
                if cached.get(&victim) == Some(&key) {
                    cached.remove(&victim);
                    break;
                }
            }
        }
        cached.insert(b, n);
        heap.push((n, b));
    }
    misses
}

/// The fewest misses on `refs` of a cache of `capacity` blocks that starts *warm*, holding
/// whichever blocks are best: a hot run's floor. [`min_misses_from`] with every block a
/// possible starting block, and then exact (see there).
pub fn min_misses_warm(refs: &[BlockId], capacity: usize) -> u64 {
    min_misses_from(refs, capacity, |_| true)
}

/// A floor under the misses on `refs` of a cache of `capacity` blocks that starts holding any
/// blocks for which `may_start` is true (those referenced before, say).
///
/// It is [`min_misses`] less `min(capacity, k)`, where `k` counts the distinct blocks of `refs`
/// that may start in the cache. A floor: a run from a starting set `S` with `m` misses becomes a
/// cold run with at most `m + |S ∩ blocks(refs)|` misses by loading each block of `S` on its
/// first use, and a cold run misses at least [`min_misses`]. Exact when every block may start
/// ([`min_misses_warm`]): a start holding the first `capacity` distinct blocks replays the cold
/// optimum's choices without its filling misses (MIN evicts nothing before the cache is full).
pub fn min_misses_from(
    refs: &[BlockId],
    capacity: usize,
    may_start: impl Fn(BlockId) -> bool,
) -> u64 {
    let mut startable: rustc_hash::FxHashSet<BlockId> = Default::default();
    for &b in refs {
        if startable.len() >= capacity {
            break;
        }
        if may_start(b) {
            startable.insert(b);
        }
    }
    min_misses(refs, capacity) - startable.len().min(capacity) as u64
}

/// MIN as the definition reads, in O(n² c): on a miss with a full cache, look ahead from here
/// for each cached block and evict the one seen last (or never). Obviously correct and slow: the
/// reference [`min_misses`] is tested against, here and on recorded cache traces.
pub fn min_misses_reference(refs: &[BlockId], capacity: usize) -> u64 {
    reference_from(Vec::new(), refs, capacity)
}

/// [`min_misses_reference`] starting with `cache` (at most `capacity` blocks) cached.
fn reference_from(mut cache: Vec<BlockId>, refs: &[BlockId], capacity: usize) -> u64 {
    let mut misses = 0;
    for (i, &b) in refs.iter().enumerate() {
        if cache.contains(&b) {
            continue;
        }
        misses += 1;
        if capacity == 0 {
            continue;
        }
        if cache.len() == capacity {
            let distance =
                |c: BlockId| refs[i + 1..].iter().position(|&x| x == c).unwrap_or(usize::MAX);
            if let Some((k, _)) = cache.iter().enumerate().max_by_key(|&(_, &c)| distance(c)) {
                cache.swap_remove(k);
            }
        }
        cache.push(b);
    }
    misses
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_textbook_example() {
        // Silberschatz's reference string: 9 faults with 3 frames under OPT.
        let refs = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1];
        assert_eq!(min_misses(&refs, 3), 9);
        assert_eq!(min_misses_reference(&refs, 3), 9);
        assert_eq!(min_misses(&refs, 0), 20);
        assert_eq!(min_misses(&refs, 8), 6, "cold misses only");
    }

    /// The warm optimum by brute force: the best of every starting set of `capacity` blocks,
    /// each run with MIN's rule (optimal from any start).
    fn warm_brute_force(refs: &[BlockId], capacity: usize) -> u64 {
        let mut ids: Vec<BlockId> = refs.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut best = u64::MAX;
        for mask in 0u32..(1 << ids.len()) {
            if mask.count_ones() as usize != capacity.min(ids.len()) {
                continue;
            }
            let cache: Vec<BlockId> = ids
                .iter()
                .enumerate()
                .filter(|(i, _)| mask >> i & 1 == 1)
                .map(|(_, &b)| b)
                .collect();
            let misses = reference_from(cache, refs, capacity);
            best = best.min(misses);
        }
        best
    }

    proptest! {
        #[test]
        fn a_warm_start_saves_exactly_the_filling_misses(
            refs in proptest::collection::vec(0u64..7, 0..40),
            capacity in 0usize..5,
        ) {
            prop_assert_eq!(min_misses_warm(&refs, capacity), warm_brute_force(&refs, capacity));
        }

        #[test]
        fn matches_the_naive_definition(
            refs in proptest::collection::vec(0u64..12, 0..300),
            capacity in 0usize..8,
        ) {
            prop_assert_eq!(min_misses(&refs, capacity), min_misses_reference(&refs, capacity));
        }
    }
}
