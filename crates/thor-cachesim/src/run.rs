//! Running a trace through a hierarchy and counting what happened.
//!
//! The runner owns the parts of the model that are about the *sequence* of requests rather than
//! the caches: the warm-up (the first requests of a trace fill the caches and are not counted,
//! as in the paper, which issued one working set's worth of warm-up reads before measuring), and
//! the disk head (whether a disk read follows the previous one).

use serde::{Deserialize, Serialize};
use thor_policy::{DenseSlots, HashSlots, SlotIndex};

use crate::SimError;
use crate::cost::Served;
use crate::hierarchy::{Design, Hierarchy, HierarchyConfig, Level};
use crate::limits::MAX_DENSE_INDEX_BYTES;
use crate::stats::ClassCounts;
use crate::trace::Trace;

/// How often (in requests) the runner reports progress.
pub const PROGRESS_INTERVAL: u64 = 1 << 16;

/// Everything about a run except the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Policies and demotion.
    pub design: Design,
    /// Blocks per client cache.
    pub client_blocks: usize,
    /// Blocks in the array cache.
    pub array_blocks: usize,
    /// Requests at the start of the trace (all clients together) that warm the caches and are
    /// not counted.
    pub warmup_requests: u64,
    /// How caches find blocks. Results do not depend on it, only speed and memory.
    pub index: IndexKind,
}

/// How the simulated caches map block ids to their slots (see `thor_policy::DenseSlots` and
/// `thor_policy::HashSlots`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Dense arrays when they fit in [`MAX_DENSE_INDEX_BYTES`], hash maps otherwise.
    #[default]
    Auto,
    /// Dense arrays indexed by block number (fails if they would exceed the bound).
    Dense,
    /// Hash maps (`FxHashMap`), as a cache keyed by sparse ids (page ids) would use.
    Hash,
}

/// The counts of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCounts {
    /// What was run.
    pub config: RunConfig,
    /// Counts per client (index = client number).
    pub per_client: Vec<ClassCounts>,
    /// All clients together.
    pub total: ClassCounts,
}

/// Runs `trace` through a fresh hierarchy. `progress` is called with the number of requests done
/// every [`PROGRESS_INTERVAL`] requests.
pub fn simulate(
    trace: &Trace,
    config: &RunConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<RunCounts, SimError> {
    simulate_sized(
        trace,
        config,
        &vec![config.client_blocks; usize::from(trace.clients())],
        progress,
    )
}

/// [`simulate`] with client `i`'s cache holding `client_sizes[i]` blocks (one size per client
/// of the trace) instead of `config.client_blocks`: for replaying a live run whose clients had
/// caches of different sizes.
pub fn simulate_sized(
    trace: &Trace,
    config: &RunConfig,
    client_sizes: &[usize],
    progress: &mut dyn FnMut(u64),
) -> Result<RunCounts, SimError> {
    let hierarchy = HierarchyConfig {
        design: config.design,
        clients: trace.clients(),
        client_blocks: config.client_blocks,
        array_blocks: config.array_blocks,
    };
    hierarchy.validate()?;
    let bound = u64::from(trace.block_count());
    let dense_bytes = 4 * bound * (u64::from(trace.clients()) + 1);
    let dense = match config.index {
        IndexKind::Auto => dense_bytes <= MAX_DENSE_INDEX_BYTES,
        IndexKind::Dense if dense_bytes <= MAX_DENSE_INDEX_BYTES => true,
        IndexKind::Dense => {
            return Err(SimError::config(format!(
                "dense indexes would take {dense_bytes} bytes, more than {MAX_DENSE_INDEX_BYTES}"
            )));
        }
        IndexKind::Hash => false,
    };
    if dense {
        let h = Hierarchy::with_client_sizes(&hierarchy, client_sizes, || {
            DenseSlots::new(bound).expect("bounded")
        })?;
        Ok(drive(h, trace, config, progress))
    } else {
        let h = Hierarchy::with_client_sizes(&hierarchy, client_sizes, HashSlots::new)?;
        Ok(drive(h, trace, config, progress))
    }
}

/// The measuring loop, monomorphised per index type.
fn drive<I: SlotIndex>(
    mut h: Hierarchy<I>,
    trace: &Trace,
    config: &RunConfig,
    progress: &mut dyn FnMut(u64),
) -> RunCounts {
    let mut per_client = vec![ClassCounts::default(); usize::from(trace.clients())];
    let mut last_disk_read: Option<u64> = None;
    let warmup = config.warmup_requests.min(trace.requests().len() as u64) as usize;
    for (i, r) in trace.requests().iter().enumerate() {
        let outcome = h.access(usize::from(r.client), u64::from(r.block));
        let served = match outcome.level {
            Level::Client => Served::Client,
            Level::Array => Served::Array,
            Level::Disk => {
                let original = trace.original(r.block);
                let sequential = last_disk_read.is_some_and(|l| l.wrapping_add(1) == original);
                last_disk_read = Some(original);
                if sequential { Served::DiskSequential } else { Served::DiskRandom }
            }
        };
        if i >= warmup {
            per_client[usize::from(r.client)].record(served, outcome.demotion);
        }
        if (i as u64 + 1).is_multiple_of(PROGRESS_INTERVAL) {
            progress(i as u64 + 1);
        }
    }
    progress(trace.requests().len() as u64);
    let mut total = ClassCounts::default();
    for c in &per_client {
        total.merge(c);
    }
    RunCounts { config: *config, per_client, total }
}
