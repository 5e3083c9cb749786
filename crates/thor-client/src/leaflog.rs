//! Leaf logs: what the open transaction did to each map leaf through point operations, so
//! that its commit can carry a *leaf delta* per leaf it wrote (wire version 8,
//! `thor_wire::LeafDelta`) and the server can merge it with a concurrent change of other keys
//! of the same leaf instead of refusing it (`docs/clocc.md`, "Map leaves";
//! `thor_server_core::leafmerge`).
//!
//! A leaf's log holds the keys the transaction read there, each with what it saw the first
//! time (absent, or the value's bytes), and its key operations in order (put key → value,
//! remove key). A key read after the transaction itself changed it saw its own write, not the
//! committed leaf, and is not logged as a read. The map ([`crate::map`]) logs `get`,
//! `contains_key`, and the `insert` and `remove` that splice one entry in or out of a leaf in
//! place. Anything that observes or reshapes a leaf as a whole *rules the leaf out* (it then
//! carries no delta, and is validated as any object): an `insert` or `remove` that splits,
//! merges or redistributes it (or rewrites it whole), and a scan of the map (`iter`, `range`,
//! `prefix`, `first`, `last`, `len`, `is_empty`, `clear` rule out every leaf of that map).
//! Maps of reference values log nothing: a reference to an object the transaction created has
//! no oref until the commit, so a delta could not name it.
//!
//! An invalidation of a leaf the transaction changed and whose uses are all logged does not
//! doom the transaction ([`LeafLogs::covers`]): it goes on with its own copy (the cache keeps a
//! changed object to the end of the transaction), and its commit's delta is checked
//! against the leaf's newest version at the server, which refuses it if a key it read there
//! changed (or if the leaf was ruled out meanwhile and carries no delta).
//!
//! The logs are the open transaction's: a transaction's first access clears them. They are
//! bounded: at most `LEAF_DELTAS_MAX` leaves (a leaf met after that gets no log), at most
//! `LEAF_KEYS_MAX` reads and operations per leaf (past that the leaf is ruled out), at most
//! `LEAF_DELTAS_MAX` scanned maps (past that no leaf carries a delta).
//!
//! *Reads are cheap until a leaf is changed.* Most reads never need a delta (a read-only
//! transaction's lookups, a leaf only read), and a lookup is a few hundred nanoseconds, so a
//! read of a leaf that has no log yet is appended to one flat list (its key and what it saw in
//! a byte arena: no hashing, and no allocation once the arena has grown). A leaf's log is made
//! by its first operation (or ruling out), which adopts the leaf's earlier reads from the
//! list in order. The list holds at most [`PENDING_READS_MAX`](crate::limits::PENDING_READS_MAX)
//! reads; past that reads are dropped, and a leaf whose log is made afterwards is ruled out
//! (its dropped reads would be missing from its delta). With `SessionConfig::leaf_deltas` off
//! nothing is logged at all.

use std::collections::HashSet;
use std::ops::Range;

use rustc_hash::FxHashMap;

use bytes::Bytes;
use thor_core::Oref;
use thor_wire::LeafDelta;
use thor_wire::limits::{LEAF_DELTAS_MAX, LEAF_KEYS_MAX};

use crate::limits::PENDING_READS_MAX;

/// One leaf's log.
#[derive(Debug)]
struct LeafLog {
    /// The map's header (its reference word): a scan of that map rules the leaf out.
    map: u32,
    /// The leaf.
    leaf: Oref,
    /// Bytes of each value.
    vbytes: u8,
    /// Whether the leaf was its map's root when logged.
    root: bool,
    /// Ruled out: the leaf was observed or changed as a whole; it carries no delta.
    out: bool,
    /// Keys read, each with what the transaction saw, in first-read order.
    reads: Vec<(Bytes, Option<Bytes>)>,
    /// Key operations in order.
    ops: Vec<(Bytes, Option<Bytes>)>,
    /// Keys read or changed so far (a key changed before it is read is not a read of the
    /// committed leaf).
    touched: HashSet<Bytes>,
}

/// A read of a leaf that had no log yet (see the module documentation).
#[derive(Debug, Clone)]
struct PendingRead {
    /// The leaf (raw oref).
    leaf: u32,
    /// Where the read found it (its map's root or not; bytes of each value).
    root: bool,
    vbytes: usize,
    /// The key's bytes in the arena.
    key: Range<usize>,
    /// What it saw, in the arena (`None`: absent).
    saw: Option<Range<usize>>,
}

impl LeafLog {
    /// The transaction read `key` here and saw `saw` (see [`LeafLogs::read`]).
    fn read(&mut self, key: &[u8], saw: Option<&[u8]>) {
        if self.out || self.touched.contains(key) {
            return;
        }
        if self.reads.len() >= LEAF_KEYS_MAX {
            self.out = true;
            return;
        }
        let key = Bytes::copy_from_slice(key);
        self.touched.insert(key.clone());
        self.reads.push((key, saw.map(Bytes::copy_from_slice)));
    }
}

/// The open transaction's leaf logs (see the module documentation).
#[derive(Debug)]
pub(crate) struct LeafLogs {
    /// Whether anything is logged (`SessionConfig::leaf_deltas`).
    enabled: bool,
    /// The logs, in the order the leaves were first met.
    logs: Vec<LeafLog>,
    /// Leaf (raw oref) → its index in `logs`.
    index: FxHashMap<u32, usize>,
    /// Reads of leaves without a log, in order; at most [`PENDING_READS_MAX`].
    pending: Vec<PendingRead>,
    /// The bytes of `pending`'s keys and values.
    arena: Vec<u8>,
    /// A read was dropped from `pending` (it was full): a log made from now on is ruled out.
    pending_dropped: bool,
    /// Maps (header reference words) the transaction scanned.
    scanned: HashSet<u32>,
    /// More maps were scanned than `scanned` holds: no leaf carries a delta.
    scanned_too_many: bool,
}

/// Where a point operation found its key: the map, the leaf, and whether the leaf is the root.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    /// The map's header reference word.
    pub map: u32,
    /// The leaf (`None` for one the transaction created: it cannot conflict).
    pub leaf: Option<Oref>,
    /// Whether the leaf is the map's root.
    pub root: bool,
    /// Bytes of each value.
    pub vbytes: usize,
}

impl LeafLogs {
    /// Empty logs; `enabled` false logs nothing (no commit then carries a delta).
    pub fn new(enabled: bool) -> LeafLogs {
        LeafLogs {
            enabled,
            logs: Vec::new(),
            index: FxHashMap::default(),
            pending: Vec::new(),
            arena: Vec::new(),
            pending_dropped: false,
            scanned: HashSet::new(),
            scanned_too_many: false,
        }
    }

    /// Forgets everything: a new transaction.
    pub fn clear(&mut self) {
        self.logs.clear();
        self.index.clear();
        self.pending.clear();
        self.arena.clear();
        self.pending_dropped = false;
        self.scanned.clear();
        self.scanned_too_many = false;
    }

    /// The log of the leaf at `at`, made if there is room; `None` for a leaf without one.
    fn log(&mut self, at: At) -> Option<&mut LeafLog> {
        let leaf = at.leaf?;
        let i = match self.index.get(&leaf.raw()) {
            Some(&i) => i,
            None => {
                if self.logs.len() >= LEAF_DELTAS_MAX {
                    return None;
                }
                self.logs.push(LeafLog {
                    map: at.map,
                    leaf,
                    vbytes: u8::try_from(at.vbytes).ok()?,
                    root: at.root,
                    out: false,
                    reads: Vec::new(),
                    ops: Vec::new(),
                    touched: HashSet::new(),
                });
                let i = self.logs.len() - 1;
                self.index.insert(leaf.raw(), i);
                self.adopt(i);
                i
            }
        };
        Some(self.logged(i, at))
    }

    /// Log `i`, met again at `at`.
    fn logged(&mut self, i: usize, at: At) -> &mut LeafLog {
        let log = &mut self.logs[i];
        if log.root != at.root || usize::from(log.vbytes) != at.vbytes {
            // The leaf changed its place in the tree within the transaction: ruled out.
            log.out = true;
        }
        log
    }

    /// Moves the reads of log `i`'s leaf made before it had a log into it, in order.
    fn adopt(&mut self, i: usize) {
        let log = &mut self.logs[i];
        if self.pending_dropped {
            // Some of its reads may be among the dropped ones.
            log.out = true;
            return;
        }
        let raw = log.leaf.raw();
        for r in self.pending.iter().filter(|r| r.leaf == raw) {
            if r.root != log.root || r.vbytes != usize::from(log.vbytes) {
                log.out = true;
            }
            let saw = r.saw.clone().map(|v| &self.arena[v]);
            log.read(&self.arena[r.key.clone()], saw);
        }
    }

    /// The transaction read `key` in the leaf at `at` and saw `saw`.
    pub fn read(&mut self, at: At, key: &[u8], saw: Option<&[u8]>) {
        if !self.enabled {
            return;
        }
        let Some(leaf) = at.leaf else { return };
        if let Some(&i) = self.index.get(&leaf.raw()) {
            self.logged(i, at).read(key, saw);
            return;
        }
        if self.pending.len() >= PENDING_READS_MAX {
            self.pending_dropped = true;
            return;
        }
        let k = self.arena.len()..self.arena.len() + key.len();
        self.arena.extend_from_slice(key);
        let saw = saw.map(|v| {
            let r = self.arena.len()..self.arena.len() + v.len();
            self.arena.extend_from_slice(v);
            r
        });
        self.pending.push(PendingRead {
            leaf: leaf.raw(),
            root: at.root,
            vbytes: at.vbytes,
            key: k,
            saw,
        });
    }

    /// The transaction put `value` under `key` (`None`: removed it) in the leaf at `at`.
    pub fn op(&mut self, at: At, key: &[u8], value: Option<&[u8]>) {
        if !self.enabled {
            return;
        }
        let Some(log) = self.log(at) else { return };
        if log.out {
            return;
        }
        if log.ops.len() >= LEAF_KEYS_MAX {
            log.out = true;
            return;
        }
        let key = Bytes::copy_from_slice(key);
        log.touched.insert(key.clone());
        log.ops.push((key, value.map(Bytes::copy_from_slice)));
    }

    /// The leaf `leaf` was changed or read as a whole: no delta for it.
    pub fn rule_out(&mut self, map: u32, leaf: Option<Oref>, vbytes: usize) {
        if !self.enabled {
            return;
        }
        if let Some(log) = self.log(At { map, leaf, root: false, vbytes }) {
            log.out = true;
        }
    }

    /// The transaction scanned map `map`: none of its leaves carries a delta.
    pub fn scanned(&mut self, map: u32) {
        if self.scanned.len() >= LEAF_DELTAS_MAX {
            self.scanned_too_many = true;
        } else {
            self.scanned.insert(map);
        }
    }

    /// Whether the transaction changed leaf `o` and its uses of it so far are all in a log its
    /// commit will carry: then an invalidation of `o` need not doom the transaction, since the
    /// server checks every key it read there against the leaf's newest version (and refuses
    /// the commit if the leaf is ruled out by then and carries no delta, as it would have
    /// without the log). Only a leaf the transaction changed: the cache keeps its copy to the
    /// end of the transaction, so the transaction goes on reading one version of the leaf, and
    /// it is not read-only (a read-only transaction may commit at the client, trusting that
    /// no invalidation hit it).
    pub fn covers(&self, o: Oref) -> bool {
        !self.scanned_too_many
            && self.index.get(&o.raw()).is_some_and(|&i| {
                let log = &self.logs[i];
                !log.out && !log.ops.is_empty() && !self.scanned.contains(&log.map)
            })
    }

    /// The deltas for a commit that writes the objects `written` (a leaf the transaction
    /// wrote and used only through logged point operations), of at most `bytes_max` bytes
    /// together (a commit must fit its frame; leaves past the budget go without a delta).
    pub fn deltas(&self, written: &[Oref], bytes_max: usize) -> Vec<LeafDelta> {
        if self.scanned_too_many {
            return Vec::new();
        }
        let written: HashSet<u32> = written.iter().map(|o| o.raw()).collect();
        let mut out = Vec::new();
        let mut bytes = 0;
        for log in &self.logs {
            if log.out
                || log.ops.is_empty()
                || self.scanned.contains(&log.map)
                || !written.contains(&log.leaf.raw())
            {
                continue;
            }
            let size: usize = 14
                + log
                    .reads
                    .iter()
                    .chain(&log.ops)
                    .map(|(k, v)| 3 + k.len() + v.as_ref().map_or(0, Bytes::len))
                    .sum::<usize>();
            if bytes + size > bytes_max {
                continue;
            }
            bytes += size;
            out.push(LeafDelta {
                leaf: log.leaf,
                refs: false,
                vbytes: log.vbytes,
                root: log.root,
                reads: log.reads.clone(),
                ops: log.ops.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oref(page: u32) -> Oref {
        Oref::new(thor_core::PageId::new(page).unwrap(), thor_core::Oid::new(1).unwrap())
    }

    fn at(page: u32) -> At {
        At { map: 9, leaf: Some(oref(page)), root: true, vbytes: 8 }
    }

    #[test]
    fn a_key_read_after_the_transaction_changed_it_is_not_a_read() {
        let mut l = LeafLogs::new(true);
        l.read(at(3), b"a", None);
        l.op(at(3), b"a", Some(&[1; 8]));
        l.read(at(3), b"a", Some(&[1; 8]));
        l.op(at(3), b"b", None);
        l.read(at(3), b"b", None);
        let d = l.deltas(&[oref(3)], usize::MAX);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].reads, vec![(Bytes::from_static(b"a"), None)]);
        assert_eq!(d[0].ops.len(), 2);
    }

    #[test]
    fn ruled_out_scanned_unwritten_and_unchanged_leaves_carry_no_delta() {
        let mut l = LeafLogs::new(true);
        for page in 3..7 {
            l.read(at(page), b"k", None);
            l.op(at(page), b"k", Some(&[0; 8]));
        }
        l.rule_out(9, Some(oref(3)), 8);
        l.read(at(4), b"z", None);
        l.read(at(7), b"k", None);
        let written = [oref(3), oref(4), oref(5), oref(7)];
        let leaves: Vec<Oref> = l.deltas(&written, usize::MAX).iter().map(|d| d.leaf).collect();
        // 3 ruled out, 6 not written, 7 only read.
        assert_eq!(leaves, [oref(4), oref(5)]);
        // A later point operation does not bring a ruled-out leaf back.
        l.op(at(3), b"q", None);
        assert_eq!(l.deltas(&written, usize::MAX).len(), 2);
        // A budget too small for a delta leaves it out.
        assert_eq!(l.deltas(&written, 20).len(), 0);
        // 4 is changed and logged; 3 is ruled out, 7 only read, 8 never met.
        assert!(l.covers(oref(4)));
        assert!(!l.covers(oref(3)) && !l.covers(oref(7)) && !l.covers(oref(8)));
        l.scanned(9);
        assert!(l.deltas(&written, usize::MAX).is_empty());
        assert!(!l.covers(oref(4)));
        l.clear();
        assert!(l.deltas(&written, usize::MAX).is_empty());
    }

    #[test]
    fn a_leafs_first_change_adopts_its_earlier_reads_and_only_its_own() {
        let mut l = LeafLogs::new(true);
        l.read(at(3), b"a", Some(&[7; 8]));
        l.read(at(4), b"x", None);
        l.read(at(3), b"b", None);
        l.read(at(3), b"a", Some(&[7; 8]));
        l.op(at(3), b"c", Some(&[1; 8]));
        let d = l.deltas(&[oref(3), oref(4)], usize::MAX);
        assert_eq!(d.len(), 1, "4 was only read");
        assert_eq!(
            d[0].reads,
            vec![
                (Bytes::from_static(b"a"), Some(Bytes::copy_from_slice(&[7; 8]))),
                (Bytes::from_static(b"b"), None)
            ]
        );
        // A read found at another place in the tree than the change rules the leaf out.
        l.read(At { root: false, ..at(5) }, b"k", None);
        l.op(at(5), b"k", None);
        assert_eq!(l.deltas(&[oref(5)], usize::MAX).len(), 0);
    }

    #[test]
    fn a_leaf_changed_after_reads_were_dropped_carries_no_delta() {
        let mut l = LeafLogs::new(true);
        for i in 0..PENDING_READS_MAX + 1 {
            l.read(at(3 + (i % 7) as u32), &(i as u64).to_be_bytes(), None);
        }
        l.op(at(3), b"k", None);
        assert!(l.deltas(&[oref(3)], usize::MAX).is_empty());
        assert!(!l.covers(oref(3)));
        // A new transaction starts afresh.
        l.clear();
        l.read(at(3), b"k", None);
        l.op(at(3), b"k", None);
        assert_eq!(l.deltas(&[oref(3)], usize::MAX).len(), 1);
    }

    #[test]
    fn disabled_logs_log_nothing() {
        let mut l = LeafLogs::new(false);
        l.read(at(3), b"a", None);
        l.op(at(3), b"a", Some(&[1; 8]));
        assert!(l.deltas(&[oref(3)], usize::MAX).is_empty());
        assert!(!l.covers(oref(3)));
    }
}
