//! The server's merge of a map leaf (`docs/clocc.md`, "Map leaves"): a commit's leaf delta
//! (`thor_wire::LeafDelta`: the keys it read in the leaf with what it saw, and its key
//! operations) applied to the leaf's *current* committed bytes instead of the bytes the
//! client wrote, when the only thing wrong with the commit is that another transaction
//! changed other keys of that leaf meanwhile.
//!
//! [`merge`] is the pure part: it checks each logged read against the current leaf (same
//! presence, same value), applies the operations with `thor_core::mapnode`'s splices, and
//! gives the leaf's new bytes, or says why it cannot ([`MergeRefused`]): then the commit is
//! refused as without a delta. It never splits or merges nodes: a result that does not fit
//! the leaf (bytes, or slots of a leaf of references) or leaves a non-root leaf underfull is
//! refused, and the client's retry rebalances the tree.
//!
//! Validation calls it (`core::leaves`, from `Core::validate_head`) when CLOCC refuses a
//! commit for a leaf that carries a delta: it reads the leaf's newest version, and installs
//! the merged bytes instead of the client's when every delta merges and nothing else is
//! refused.

use thor_core::limits::OBJECT_HEADER_BYTES;
use thor_core::mapnode::{
    self, COUNT_AT, DIR_BYTES, FANOUT, FIXED_BYTES, KLEN_BYTES, LEVEL_AT, SLOTS_AT,
};
use thor_wire::LeafDelta;

/// Offset of the variable part's count word in a node object.
const VAR_COUNT_AT: usize = OBJECT_HEADER_BYTES + FIXED_BYTES;
/// Offset of the entry area in a node object.
const AREA_AT: usize = VAR_COUNT_AT + 4;

/// Why a leaf delta could not be merged; the commit is then refused as it would have been
/// without the delta (its client runs it again on the current leaf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeRefused {
    /// The current object is not a well-formed, packed leaf as the delta describes it.
    NotALeaf(&'static str),
    /// A key the transaction read has another presence or value in the current leaf.
    ReadChanged,
    /// The operations do not fit the leaf without a split.
    Full,
    /// The operations leave a leaf that is not its map's root underfull (a merge is needed).
    Underfull,
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A leaf being changed: its entry area, count, bytes used and (for references) slots.
struct Leaf {
    area: Vec<u8>,
    room: usize,
    count: usize,
    used: usize,
    slots: Vec<[u8; 4]>,
    vbytes: usize,
    refs: bool,
}

impl Leaf {
    fn parse(obj: &[u8], d: &LeafDelta) -> Result<Leaf, MergeRefused> {
        if obj.len() < AREA_AT {
            return Err(MergeRefused::NotALeaf("shorter than a map node"));
        }
        let room = word(obj, VAR_COUNT_AT) as usize;
        if AREA_AT + room != obj.len() {
            return Err(MergeRefused::NotALeaf("its area's length is not its size"));
        }
        if word(obj, LEVEL_AT) != 0 {
            return Err(MergeRefused::NotALeaf("not a leaf"));
        }
        let count = word(obj, COUNT_AT) as usize;
        let vbytes = d.vbytes as usize;
        if count.saturating_mul(DIR_BYTES) > room || (d.refs && count > FANOUT) {
            return Err(MergeRefused::NotALeaf("its count exceeds its room"));
        }
        let area = obj[AREA_AT..].to_vec();
        let used = match mapnode::packed_len(&area, count, vbytes) {
            Ok(Some(u)) => u,
            _ => return Err(MergeRefused::NotALeaf("its entries are not packed")),
        };
        let slots = if d.refs {
            (0..count).map(|i| word(obj, SLOTS_AT + 4 * i).to_le_bytes()).collect()
        } else {
            Vec::new()
        };
        Ok(Leaf { area, room, count, used, slots, vbytes, refs: d.refs })
    }

    /// Entry `i`'s key offset and length (checked when the leaf was parsed and after every
    /// splice, which keeps the area packed).
    fn entry(&self, i: usize) -> Result<(usize, usize), MergeRefused> {
        mapnode::entry(&self.area, self.count, i, self.vbytes)
            .map_err(|_| MergeRefused::NotALeaf("an entry lies outside its node"))
    }

    /// `Ok(i)` if entry `i` holds `key`, `Err(i)` where it would go.
    fn search(&self, key: &[u8]) -> Result<Result<usize, usize>, MergeRefused> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (at, len) = self.entry(mid)?;
            match self.area[at..at + len].cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Entry `i`'s value as a delta names it.
    fn value(&self, i: usize) -> Result<Vec<u8>, MergeRefused> {
        if self.refs {
            return Ok(self.slots[i].to_vec());
        }
        let (at, len) = self.entry(i)?;
        Ok(self.area[at + len..at + len + self.vbytes].to_vec())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), MergeRefused> {
        match self.search(key)? {
            Ok(i) => {
                if self.refs {
                    self.slots[i].copy_from_slice(value);
                } else {
                    let (at, len) = self.entry(i)?;
                    self.area[at + len..at + len + self.vbytes].copy_from_slice(value);
                }
            }
            Err(pos) => {
                let bytes = mapnode::entry_bytes(key.len(), self.vbytes);
                if (self.refs && self.count >= FANOUT) || self.used + bytes > self.room {
                    return Err(MergeRefused::Full);
                }
                let mut e = Vec::with_capacity(KLEN_BYTES + key.len() + self.vbytes);
                e.extend_from_slice(&(key.len() as u16).to_le_bytes());
                e.extend_from_slice(key);
                if self.refs {
                    let mut w = [0u8; 4];
                    w.copy_from_slice(value);
                    self.slots.insert(pos, w);
                } else {
                    e.extend_from_slice(value);
                }
                self.area = mapnode::splice_in(&self.area, self.count, self.used, pos, &e);
                self.count += 1;
                self.used += bytes;
            }
        }
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), MergeRefused> {
        if let Ok(i) = self.search(key)? {
            let len = KLEN_BYTES + key.len() + self.vbytes;
            self.area = mapnode::splice_out(&self.area, self.count, self.used, i, len);
            if self.refs {
                self.slots.remove(i);
            }
            self.count -= 1;
            self.used -= DIR_BYTES + len;
        }
        Ok(())
    }

    /// The map's rule (`thor_client::map`, "Deletion and space"): fewer than two entries,
    /// or under a quarter of the bytes and of the slots.
    fn underfull(&self) -> bool {
        self.count < 2 || (self.used * 4 < self.room && (!self.refs || self.count * 4 < FANOUT))
    }
}

/// The new bytes of leaf object `obj` (its current committed version) with delta `d`
/// applied, if every read of `d` holds in `obj` and the result fits the leaf.
pub fn merge(obj: &[u8], d: &LeafDelta) -> Result<Vec<u8>, MergeRefused> {
    let vlen = d.value_len();
    if d.reads.iter().chain(&d.ops).any(|(_, v)| v.as_ref().is_some_and(|v| v.len() != vlen)) {
        return Err(MergeRefused::NotALeaf("a value of another length than the leaf's"));
    }
    let mut leaf = Leaf::parse(obj, d)?;
    for (key, saw) in &d.reads {
        let now = match leaf.search(key)? {
            Ok(i) => Some(leaf.value(i)?),
            Err(_) => None,
        };
        if now.as_deref() != saw.as_deref() {
            return Err(MergeRefused::ReadChanged);
        }
    }
    for (key, op) in &d.ops {
        match op {
            Some(v) => leaf.put(key, v)?,
            None => leaf.remove(key)?,
        }
    }
    if !d.root && leaf.underfull() {
        return Err(MergeRefused::Underfull);
    }
    let mut out = obj.to_vec();
    out[COUNT_AT..COUNT_AT + 4].copy_from_slice(&(leaf.count as u32).to_le_bytes());
    out[AREA_AT..AREA_AT + leaf.used].copy_from_slice(&leaf.area[..leaf.used]);
    // The rest of the area is unused; zeros keep the bytes independent of history.
    out[AREA_AT + leaf.used..].fill(0);
    if leaf.refs {
        for i in 0..FANOUT {
            let at = SLOTS_AT + 4 * i;
            let w = leaf.slots.get(i).copied().unwrap_or([0; 4]);
            out[at..at + 4].copy_from_slice(&w);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use thor_core::{Oid, Oref, PageId};

    use super::*;

    const ROOM: usize = 400;

    /// A leaf object of `u64`-sized values holding `entries`.
    fn leaf(entries: &[(&[u8], u64)]) -> Vec<u8> {
        let vals: Vec<(Vec<u8>, [u8; 8])> =
            entries.iter().map(|(k, v)| (k.to_vec(), v.to_be_bytes())).collect();
        let mut area = Vec::new();
        mapnode::encode_area(vals.iter().map(|(k, v)| (&k[..], &v[..])), &mut area);
        let mut obj = vec![0u8; AREA_AT + ROOM];
        obj[COUNT_AT..COUNT_AT + 4].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        obj[VAR_COUNT_AT..VAR_COUNT_AT + 4].copy_from_slice(&(ROOM as u32).to_le_bytes());
        obj[AREA_AT..AREA_AT + area.len()].copy_from_slice(&area);
        obj
    }

    fn val(v: u64) -> Option<Bytes> {
        Some(Bytes::from(v.to_be_bytes().to_vec()))
    }

    fn delta(reads: Vec<(&[u8], Option<Bytes>)>, ops: Vec<(&[u8], Option<Bytes>)>) -> LeafDelta {
        let own = |l: Vec<(&[u8], Option<Bytes>)>| {
            l.into_iter().map(|(k, v)| (Bytes::from(k.to_vec()), v)).collect()
        };
        LeafDelta {
            leaf: Oref::new(PageId::new(3).unwrap(), Oid::new(1).unwrap()),
            refs: false,
            vbytes: 8,
            root: true,
            reads: own(reads),
            ops: own(ops),
        }
    }

    /// Another transaction inserted "b" since the client read the leaf; the client's insert
    /// of "c" (having seen "c" absent) merges onto the current leaf: both are there.
    #[test]
    fn a_merge_of_another_key_keeps_both_changes() {
        let current = leaf(&[(b"a", 1), (b"b", 2)]);
        let d = delta(vec![(b"c", None)], vec![(b"c", val(3))]);
        let merged = merge(&current, &d).unwrap();
        assert_eq!(merged, leaf(&[(b"a", 1), (b"b", 2), (b"c", 3)]));
        // A remove and a replace merge the same way.
        let d = delta(vec![(b"a", val(1)), (b"b", val(2))], vec![(b"a", None), (b"b", val(9))]);
        assert_eq!(merge(&merged, &d).unwrap(), leaf(&[(b"b", 9), (b"c", 3)]));
    }

    #[test]
    fn a_read_key_changed_meanwhile_refuses() {
        let current = leaf(&[(b"a", 1), (b"c", 7)]);
        // The transaction saw "c" absent; another inserted it since.
        let d = delta(vec![(b"c", None)], vec![(b"c", val(3))]);
        assert_eq!(merge(&current, &d), Err(MergeRefused::ReadChanged));
        // It saw "a" = 5; it is 1 now.
        let d = delta(vec![(b"a", val(5))], vec![(b"a", val(6))]);
        assert_eq!(merge(&current, &d), Err(MergeRefused::ReadChanged));
    }

    #[test]
    fn a_full_leaf_refuses() {
        // 14 bytes per entry of a 2-byte key: 28 entries fill 392 of the 400 bytes.
        let keys: Vec<[u8; 2]> = (0..28u16).map(|i| i.to_be_bytes()).collect();
        let entries: Vec<(&[u8], u64)> = keys.iter().map(|k| (&k[..], 0)).collect();
        let current = leaf(&entries);
        let d = delta(vec![(b"zz", None)], vec![(b"zz", val(1))]);
        assert_eq!(merge(&current, &d), Err(MergeRefused::Full));
    }

    #[test]
    fn a_non_root_leaf_left_underfull_refuses() {
        let current = leaf(&[(b"a", 1), (b"b", 2)]);
        let mut d = delta(vec![(b"a", val(1))], vec![(b"a", None)]);
        d.root = false;
        assert_eq!(merge(&current, &d), Err(MergeRefused::Underfull));
        d.root = true;
        assert_eq!(merge(&current, &d).unwrap(), leaf(&[(b"b", 2)]));
    }

    /// Damaged leaves are refusals, never panics.
    #[test]
    fn a_damaged_leaf_refuses() {
        let good = leaf(&[(b"a", 1), (b"b", 2)]);
        let d = delta(vec![], vec![(b"c", val(3))]);
        for cut in 0..good.len() {
            assert!(merge(&good[..cut], &d).is_err(), "cut at {cut}");
        }
        let mut internal = good.clone();
        internal[LEVEL_AT] = 1;
        assert_eq!(merge(&internal, &d), Err(MergeRefused::NotALeaf("not a leaf")));
        let mut count = good.clone();
        count[COUNT_AT] = 0xff;
        assert!(merge(&count, &d).is_err());
        let mut dir = good;
        dir[AREA_AT] = 0xff;
        assert!(merge(&dir, &d).is_err());
    }
}
