//! What both replicated worlds share to run a replica of a thor server (issue 33): the
//! replica's disk and, while it is up, its [`Member`] and disk side; how a replica opens from
//! its disk alone; how a member's core effects on the disk are performed at once; how a
//! lagging replica's database image is copied from another; and how a replica's committed
//! pages are read back for the checks.
//!
//! The one-group world ([`crate::group`]) and the two-phase world with groups
//! ([`crate::twopc`], `twopc/groups.rs`) both run their replicas through these, so one replica
//! model is judged by both; opening a replica and performing its disk effects are
//! `thor_server::member_io`'s, the same code the threaded `GroupEngine` runs. Nothing here draws from a run's random stream: each world keeps
//! its own order of draws.
//!
//! Disk effects (page reads, install rounds, checkpoints) are performed at once, within the
//! step that asked for them: no install round is half written at any point between steps, so
//! a crash (which happens between steps) always finds a consistent database, and an image
//! copied between steps is taken at a consistent point.

use std::collections::BTreeMap;
use std::sync::Arc;

use thor_core::{Lsn, PageId, PageView};
use thor_replica::ReplicaConfig;
use thor_replica::member::{Member, MemberConfig, Phase};
use thor_server::io::{self, DiskSide};
use thor_server::member_io;
use thor_server::superblock::Superblock;
use thor_server::{CoreConfig, DirectResult, Effect, Input, ReadError};
use thor_storage::{Disk, MemDisk};

/// One replica: its disk, which outlives every crash, and its member while it is up.
pub(crate) struct Node {
    pub disk: MemDisk,
    pub run: Option<(Member, DiskSide)>,
    /// Incremented by every crash and restart, so that the events a dead member scheduled
    /// (its ticks, the connections it admitted) are recognised and ignored.
    pub epoch: u32,
}

impl Node {
    /// A replica over `disk`, not started.
    pub fn new(disk: MemDisk) -> Node {
        Node { disk, run: None, epoch: 0 }
    }
}

/// Opens replica `id` of a group whose founders are `founders` from its disk alone: the
/// database without a log of its own, and the group's journal.
pub(crate) fn open(
    disk: &MemDisk,
    id: u64,
    founders: &[u64],
    raft_seed: u64,
    cfg: CoreConfig,
    mcfg: MemberConfig,
) -> Result<(Member, DiskSide), String> {
    let disk = Arc::new(disk.clone()) as Arc<dyn Disk>;
    let rcfg = ReplicaConfig::new(id, raft_seed);
    let m =
        member_io::open_member(disk, cfg, mcfg, rcfg, Some(founders)).map_err(|e| e.to_string())?;
    Ok((m.member, m.disk_side))
}

/// The replica of `nodes` that serves as leader (the highest term's, should a deposed one
/// not know it yet), if any.
pub(crate) fn serving_leader(nodes: &BTreeMap<u64, Node>) -> Option<u64> {
    nodes
        .iter()
        .filter_map(|(id, n)| n.run.as_ref().map(|(m, _)| (*id, m.status())))
        .filter(|(_, s)| matches!(s.phase, Phase::Serving { .. }))
        .max_by_key(|(_, s)| s.replica.term)
        .map(|(id, _)| id)
}

/// What performing a core effect gave.
pub(crate) enum Performed {
    /// The input that reports it.
    Input(Input),
    /// A direct operation's answer.
    Done { ticket: u64, result: DirectResult },
    /// Not a disk effect (a reply, a peer message, a backup): the world's to carry.
    Other(Effect),
}

/// Performs a core effect a member passed through: a disk effect at once.
pub(crate) fn perform(ds: &DiskSide, e: Effect) -> Performed {
    if let Some(input) = member_io::perform(ds, &e) {
        return Performed::Input(input);
    }
    match e {
        Effect::Done { ticket, result } => Performed::Done { ticket, result },
        other => Performed::Other(other),
    }
}

/// Copies a database image whose checkpoint is at least `lsn` onto `dest` from the first of
/// `sources` (running replicas the destination can talk to, in the order to try) whose
/// superblock reaches it, as a transport would; returns the image's superblock and a disk
/// side reopened over `dest`.
pub(crate) fn copy_image(
    nodes: &BTreeMap<u64, Node>,
    sources: &[u64],
    dest: &MemDisk,
    lsn: Lsn,
) -> Result<(Superblock, DiskSide), String> {
    for s in sources {
        let Some((_, ds)) = nodes.get(s).and_then(|n| n.run.as_ref()) else { continue };
        let Ok(sb) = io::read_superblock(&*ds.disk) else { continue };
        if sb.checkpoint < lsn {
            continue;
        }
        let dest = Arc::new(dest.clone()) as Arc<dyn Disk>;
        return member_io::install_image(dest, |d| ds.image_into(d));
    }
    Err(format!("no reachable replica holds an image at checkpoint {lsn} or later"))
}

/// A replica's pages: page → (version, objects by id).
pub(crate) type Pages = BTreeMap<u32, (Lsn, Vec<(u16, Vec<u8>)>)>;

/// Every page up to the tail at a replica: its version and objects, as committed (installed
/// image plus the MOB's versions).
pub(crate) fn pages(m: &mut Member, ds: &DiskSide) -> Result<Pages, String> {
    let tail = m.core().tail_page().0;
    let mut out = BTreeMap::new();
    for p in PageId::FIRST.get()..=tail.get() {
        let page = PageId::new(p).expect("a page id");
        let images = match ds.read_page(page) {
            Ok(img) => vec![(page, img)],
            // Never installed: the core knows it fresh.
            Err(ReadError::Corrupt(_)) => Vec::new(),
            Err(e) => return Err(format!("page {page}: {e:?}")),
        };
        match m.core_mut().store_mut().committed_page(page, &images) {
            Ok(Some(img)) => {
                let v = PageView::parse(&img).map_err(|e| format!("page {page}: {e}"))?;
                let objects = v.objects().map(|(o, b)| (o.get(), b.to_vec())).collect();
                out.insert(p, (v.version(), objects));
            }
            other => return Err(format!("page {page} composes to {other:?}")),
        }
    }
    Ok(out)
}

/// Whether every one of `ms` (the running replicas of one group) applied everything
/// committed, with nothing left to replay and nothing proposed and undecided.
pub(crate) fn settled(ms: &[&Member]) -> bool {
    let commit = ms.iter().map(|m| m.status().replica.commit).max().unwrap_or(0);
    ms.iter().all(|m| {
        let s = m.status();
        // Nothing in flight either: a serving core's prepared commits show in its pages.
        s.replica.applied == commit
            && s.replica.last_index == commit
            && (!m.is_serving() || s.durable.0 + 1 == s.next_lsn.0)
            && s.queued == 0
            && !m.core().round_in_flight()
    })
}
