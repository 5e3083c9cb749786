//! What every simulated world shares to run a server: the process (a real core over its log
//! and disk side, started by recovery from its [`MemDisk`]), the event queue, and the step
//! whose effects are performed at once (a setup, a final read, a scenario's instant disk).
//!
//! The single-server world ([`crate::world`]), the two-phase world ([`crate::twopc`]) and the
//! scenarios ([`crate::script`]) start, step and settle their servers through these, so one
//! server model is judged by every checker: issue 32's merge of the worlds starts here.
//! Nothing here draws from a run's random stream: each world keeps its own order of draws,
//! so its seeds replay as before.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use bytes::Bytes;
use thor_core::Lsn;
use thor_server::io::{self, CommitLog, DiskSide};
use thor_server::{Core, CoreConfig, DirectResult, Effect, Input, StudyOptions};
use thor_storage::{FaultPlan, Log, LogOptions, MemDisk, StorageError};

use crate::check::Violation;

/// A live server process: its core, what performs its disk effects, its log, and whether a
/// log sync is already scheduled (commits that arrive meanwhile share it: group commit).
#[derive(Debug)]
pub(crate) struct Node {
    pub core: Core,
    pub disk_side: DiskSide,
    pub log: Arc<Log>,
    pub sync_scheduled: bool,
}

/// A server as every world sees it: its disk, which outlives every crash; its process while
/// it is up; and its epoch, incremented by every crash, so that the events a dead process
/// scheduled (log syncs, disk effects, ticks, messages to it) are recognised and ignored.
#[derive(Debug)]
pub(crate) struct Process {
    pub disk: MemDisk,
    pub node: Option<Node>,
    pub epoch: u32,
}

impl Process {
    /// A server over `disk`, not started.
    pub fn new(disk: MemDisk) -> Process {
        Process { disk, node: None, epoch: 0 }
    }

    /// Whether an event of `epoch` concerns the live process.
    pub fn live(&self, epoch: u32) -> bool {
        self.epoch == epoch && self.node.is_some()
    }

    /// Starts the process from the disk by recovery ([`open`]).
    pub fn start(
        &mut self,
        cfg: CoreConfig,
        study: &StudyOptions,
    ) -> Result<Opened, thor_server::EngineError> {
        let (node, opened) = open(&self.disk, cfg, study)?;
        self.node = Some(node);
        Ok(opened)
    }

    /// The process dies (the one crash model of every world): the disk keeps what a power
    /// failure allows (any subset of unsynced writes, torn at sector granularity, chosen by
    /// `seed`; the crash also ends any fault plan), and a new epoch begins.
    pub fn kill(&mut self, seed: u64) {
        self.node = None;
        self.epoch += 1;
        self.disk.crash(seed);
    }

    /// The disk dies `extra_ops` operations from now, taking the process down inside the I/O
    /// about to run (a log sync, an install round, a checkpoint).
    pub fn plan_death(&self, extra_ops: u64) {
        let ops = self.disk.counters().ops + extra_ops;
        self.disk.set_fault_plan(FaultPlan { die_after_ops: Some(ops), ..FaultPlan::default() });
    }

    /// Appends the record the core asked for at `lsn`; returns whether a log sync must be
    /// scheduled (none is yet: later appends share it).
    pub fn append(&mut self, lsn: Lsn, record: Bytes) -> Result<bool, Violation> {
        let node = self.node.as_mut().expect("effects come from a live server");
        let got = node.log.append_shared(record).map_err(io_violation)?;
        if got != lsn {
            return Err(Violation(format!("log gave {got}, core expected {lsn}")));
        }
        Ok(!std::mem::replace(&mut node.sync_scheduled, true))
    }

    /// The scheduled log sync: writes and syncs what the log buffers.
    pub fn sync_log(&mut self) -> Result<Lsn, StorageError> {
        let node = self.node.as_mut().expect("a sync of a live server");
        node.sync_scheduled = false;
        node.log.sync()
    }

    /// Performs a disk effect (a page read, an install round, a checkpoint); returns the
    /// input that reports it.
    pub fn perform(&mut self, effect: &Effect) -> Option<Input> {
        let node = self.node.as_mut().expect("an effect of a live server");
        node.disk_side.perform(effect, &*node.log)
    }
}

/// What recovery gave besides the process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opened {
    /// Install rounds recovery ran to stay within the MOB's budget.
    pub rounds: u64,
}

/// The log's settings in every world: small segments, so that runs cross segment ends.
pub(crate) fn log_options() -> LogOptions {
    LogOptions { segment_bytes: 8 << 10, buffer_bytes_max: 64 << 10, ..LogOptions::default() }
}

pub(crate) fn io_violation(e: StorageError) -> Violation {
    Violation(format!("storage: {e}"))
}

/// Starts a server process from `disk` by recovery, as a real start does, running the mutant
/// of [`crate::with_mutant`] if any.
pub(crate) fn open(
    disk: &MemDisk,
    cfg: CoreConfig,
    study: &StudyOptions,
) -> Result<(Node, Opened), thor_server::EngineError> {
    let r = io::recover(Arc::new(disk.clone()), cfg, log_options(), study)?;
    let mut core = r.core;
    crate::mutate(&mut core);
    let node = Node { core, disk_side: r.disk_side, log: r.log, sync_scheduled: false };
    Ok((node, Opened { rounds: r.rounds }))
}

/// What a world learns from [`settle_now`]: every record appended, each durable point, and
/// the effects meant for others (replies and server-to-server messages).
pub(crate) trait Settled {
    /// `record` was appended at `lsn`.
    fn appended(&mut self, _lsn: Lsn, _record: &Bytes) -> Result<(), Violation> {
        Ok(())
    }
    /// The log is durable up to `lsn`.
    fn durable(&mut self, _lsn: Lsn) {}
    /// A reply or a peer message the step produced.
    fn said(&mut self, _effect: Effect) {}
}

/// A world that wants nothing of a settled step but its direct answers.
impl Settled for () {}

/// Steps `node` with `input` and performs every effect at once: appends are written and
/// synced before the next input, disk effects are done, replies and peer messages go to
/// `seen`. Returns the answers to direct operations.
pub(crate) fn settle_now(
    node: &mut Node,
    now: u64,
    input: Input,
    seen: &mut impl Settled,
) -> Result<Vec<DirectResult>, Violation> {
    let mut answers = Vec::new();
    let mut inputs = vec![input];
    while let Some(input) = inputs.pop() {
        let mut fx = Vec::new();
        crate::step_checked(&mut node.core, now, input, &mut fx)?;
        let mut appended = false;
        for e in fx {
            match e {
                Effect::Append { lsn, record } => {
                    let got = node.log.append_shared(record.clone()).map_err(io_violation)?;
                    if got != lsn {
                        return Err(Violation(format!("log gave {got}, core expected {lsn}")));
                    }
                    seen.appended(lsn, &record)?;
                    appended = true;
                }
                Effect::Done { result, .. } => answers.push(result),
                e @ (Effect::Reply { .. } | Effect::Peer { .. }) => seen.said(e),
                other => {
                    if let Some(i) = node.disk_side.perform(&other, &*node.log) {
                        inputs.push(i);
                    }
                }
            }
        }
        if appended {
            let lsn = node.log.sync().map_err(io_violation)?;
            seen.durable(lsn);
            inputs.push(Input::Durable { lsn });
        }
    }
    Ok(answers)
}

/// The events to come, earliest first: by virtual time, then by insertion number (unique, so
/// the order is total and a seed replays it exactly). A binary heap of small keys over a slab
/// of the events, so that an event is moved in once and out once: a `BTreeMap` of the events
/// themselves shifted them (a few hundred bytes each) within its nodes on every insert and
/// pop, a twentieth of a run.
#[derive(Debug)]
pub(crate) struct EventQueue<E> {
    /// `(time, insertion number, slot)`, earliest on top.
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// The events by slot: `Some` exactly for the slots in `heap`.
    slots: Vec<Option<E>>,
    /// Slots of `slots` that hold no event, for reuse.
    free: Vec<usize>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new() }
    }
}

impl<E> EventQueue<E> {
    /// Queues `ev` at `(time, insertion number)`.
    pub fn insert(&mut self, at: (u64, u64), ev: E) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(ev);
                slot
            }
            None => {
                self.slots.push(Some(ev));
                self.slots.len() - 1
            }
        };
        self.heap.push(Reverse((at.0, at.1, slot)));
    }

    /// The earliest event and its `(time, insertion number)`.
    pub fn pop_first(&mut self) -> Option<((u64, u64), E)> {
        let Reverse((time, seq, slot)) = self.heap.pop()?;
        let ev = self.slots[slot].take().expect("a queued slot holds its event");
        self.free.push(slot);
        Some(((time, seq), ev))
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_queue_pops_by_time_then_insertion_and_reuses_its_slots() {
        let mut q = EventQueue::default();
        q.insert((5, 1), 1);
        q.insert((3, 2), 2);
        q.insert((5, 0), 0);
        let order: Vec<(u64, u64)> =
            std::iter::from_fn(|| q.pop_first().map(|(at, _)| at)).collect();
        assert_eq!(order, [(3, 2), (5, 0), (5, 1)]);
        assert!(q.is_empty());
        q.insert((9, 3), 3);
        assert_eq!(q.slots.len(), 3, "a freed slot is reused");
        assert_eq!(q.pop_first(), Some(((9, 3), 3)));
    }
}
