//! The call from validation to the map leaf merge (`crate::leafmerge`; `docs/clocc.md`, "Map
//! leaves").
//!
//! When CLOCC refuses the head of the commit queue and the object its refusal names is a map
//! leaf for which the commit carries a delta, [`Core::merge_head`] tries once more with the
//! leaves that carry deltas exempt from the per-object checks that would refuse it (the
//! invalid set, rules 1 and 2b: `Cc::validate_merging`). If everything else passes, each such
//! leaf's newest version (`Store::current_version`: a prepared commit's, the MOB's or the
//! cached page's, never a disk read, never a two-phase part's) gets the delta applied
//! (`leafmerge::merge`: every key the transaction read has the presence and value it saw, the
//! result fits the leaf). If all merge, the merged bytes replace the client's in the commit,
//! which goes on to be prepared, logged and installed like any other: recovery replays bytes,
//! never deltas. Otherwise the first refusal stands.
//!
//! Why that is serializable: the transaction is serialized at a fresh timestamp, after every
//! transaction validated so far, the leaves' writers included. Every object it read but the
//! merged leaves passed the usual checks, so it saw their current versions; in particular a
//! leaf's parent (or the map's header, for a root leaf), so the leaf still covers the keys the
//! transaction looked up in it. Of a merged leaf it observed only the keys its delta lists, and
//! each has now the presence and value it saw. Run now, the transaction would read the same
//! and make the same key operations, onto the leaf's newest version: exactly the merged bytes.
//! A prepared writer of the leaf merged onto is earlier in the log too, and (not being a
//! two-phase part) is decided: it becomes durable first or the server fails before either is
//! answered.
//!
//! The committer's cached copy of a merged leaf is its own version, not the one installed: the
//! leaf goes into its invalid set, and the invalidation rides on its `CommitOk` (applied
//! before the client's cache makes the commit final, so the copy leaves the cache then).

use thor_core::Oref;

use super::{Core, cc};
use crate::leafmerge;

/// What [`Core::merge_head`] made of a refused commit with leaf deltas.
pub(super) enum Merged {
    /// Not a merge case: the refusal names no leaf with a delta (or the commit has none).
    NotApplicable,
    /// Merged: the timestamp it validated at and the leaves whose bytes were replaced.
    Done(cc::Timestamp, Vec<Oref>),
    /// A merge was tried and refused (counted); the first refusal stands.
    Refused,
}

impl Core {
    /// Tries to merge the head of the queue, refused by `r`, onto the newest versions of its
    /// leaves with deltas (see the module documentation). On success the head's versions of
    /// those leaves are the merged bytes.
    pub(super) fn merge_head(&mut self, r: &cc::Refusal) -> Merged {
        let head = self.queue.front().expect("a head to merge");
        let named = match r {
            cc::Refusal::Stale(o) | cc::Refusal::Rule1(o) | cc::Refusal::Rule2b(o) => *o,
            _ => return Merged::NotApplicable,
        };
        // Only commits validated at a fresh timestamp (every client commit): one at a chosen
        // timestamp could come before a writer of the leaf it is merged after.
        if head.twopc.is_some()
            || head.commit.ts.is_some()
            || !head.commit.leaves.iter().any(|d| d.leaf == named)
        {
            return Merged::NotApplicable;
        }
        match self.try_merge() {
            Some((ts, leaves)) => {
                self.counters.leaf_merges += leaves.len() as u64;
                Merged::Done(ts, leaves)
            }
            None => {
                self.counters.leaf_merges_refused += 1;
                Merged::Refused
            }
        }
    }

    /// The merge itself: `None` if an uncommitted writer of a leaf is a two-phase part, the
    /// commit is refused for something else too, a leaf's newest version is not in memory,
    /// or a delta does not apply to it ([`leafmerge::MergeRefused`]).
    fn try_merge(&mut self) -> Option<(cc::Timestamp, Vec<Oref>)> {
        let head = self.queue.front().expect("a head to merge");
        let conn = head.origin.conn();
        let writes: Vec<Oref> = head.commit.versions.iter().map(|v| v.0).collect();
        // Deltas of leaves the commit does not write name nothing to merge: left out.
        let merged: Vec<Oref> =
            head.commit.leaves.iter().map(|d| d.leaf).filter(|o| writes.contains(o)).collect();
        // A leaf some uncommitted writer of which is not a prepared commit of this server's
        // own queue (a two-phase part, in doubt) has no version to merge onto yet.
        let plain: Vec<cc::Timestamp> = self.prepared_cc.values().map(|(t, _)| *t).collect();
        for o in &merged {
            if self.cc.uncommitted_writers(*o).iter().any(|t| !plain.contains(t)) {
                return None;
            }
        }
        let reads = head.commit.reads.clone();
        let ts = self.cc.validate_merging(conn, &reads, &writes, &merged, self.now_us).ok()?;
        let mut bytes = Vec::with_capacity(merged.len());
        for d in head.commit.leaves.iter().filter(|d| merged.contains(&d.leaf)) {
            let current = self.store.current_version(d.leaf)?;
            bytes.push((d.leaf, leafmerge::merge(&current, d).ok()?));
        }
        let head = self.queue.front_mut().expect("checked");
        for (o, b) in bytes {
            let v = head.commit.versions.iter_mut().find(|v| v.0 == o).expect("a written leaf");
            v.1 = b.into();
        }
        Some((ts, merged))
    }
}
