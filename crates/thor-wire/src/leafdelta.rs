//! Leaf deltas (version 8): what a commit tells the server about the map leaves it changed
//! by point operations, so that the server can merge it with a concurrent change of other
//! keys of the same leaf instead of refusing it (`docs/clocc.md`, "Map leaves").
//!
//! A leaf is a `thor.MapNode` of level 0 (`thor_core::mapnode`). For each such leaf a
//! transaction wrote and used only through point operations (`get`, `insert`, `remove` of one
//! key, none of which split or merged the leaf), the commit may carry a delta: the keys it
//! read there with what it saw, and its key operations in order. The section follows the
//! commit body of a `Commit` or `CommitWithId` whose frame has the flag
//! [`crate::frame::FLAG_LEAF_DELTAS`]:
//!
//! ```text
//! leaf deltas: count u32, then per delta:
//!   leaf oref u32 | kind u8 | vbytes u8 | reads u32 | read* | ops u32 | op*
//!   read: key (u16 length, bytes) | present u8 | value (vbytes bytes, or 4 for references) if present
//!   op:   key (u16 length, bytes) | put u8     | value (as above) if put; remove otherwise
//! kind: bit 0 the leaf's values are references (kept in the node's slots; vbytes is 0), bit 1
//!       the leaf is its map's root (a remove may leave it as small as it likes)
//! ```
//!
//! A sender sets the flag exactly when the commit carries at least one delta, so commits
//! without one keep version 7's bytes; an older server never sees the section, and a server
//! that ignores a delta only refuses what it refused before. A delta is advisory in that
//! sense: it can make the server accept a commit it would have refused, never the reverse,
//! and the server checks it against the leaf it holds before it believes it. Deltas are not
//! part of a `Prepare` or of a resumed commit (their encoders leave them out).

use bytes::Bytes;
use thor_core::Oref;
use thor_core::mapnode::KEY_BYTES_MAX;

use crate::codec::{Put, Reader, check_limit, check_oref};
use crate::error::WireError;
use crate::limits::{LEAF_DELTAS_MAX, LEAF_KEYS_MAX, LEAF_VALUE_BYTES_MAX};

/// Kind bit: the leaf's values are references (4 bytes each on the wire, the slot's oref).
const KIND_REFS: u8 = 1;
/// Kind bit: the leaf is its map's root.
const KIND_ROOT: u8 = 2;

/// One key's value as a delta names it: the value's bytes (for a leaf of references, the
/// reference's raw oref, 4 bytes little-endian). `None`: the key is absent (in a read), or
/// removed (in an operation).
pub type LeafValue = Option<Bytes>;

/// What a transaction did to one map leaf through point operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeafDelta {
    /// The leaf (a `thor.MapNode` of level 0) the commit writes.
    pub leaf: Oref,
    /// Whether the leaf's values are references, held in its slots (`vbytes` is then 0).
    pub refs: bool,
    /// Bytes of each value stored in the leaf's entry area (at most
    /// [`LEAF_VALUE_BYTES_MAX`]).
    pub vbytes: u8,
    /// Whether the leaf is its map's root (then no lower bound on its fill applies).
    pub root: bool,
    /// The keys the transaction read in the leaf, each with what it saw there, in the order
    /// it first read them.
    pub reads: Vec<(Bytes, LeafValue)>,
    /// Its key operations in order: put key → value, or remove key (`None`).
    pub ops: Vec<(Bytes, LeafValue)>,
}

impl LeafDelta {
    /// Bytes of a value on the wire.
    pub fn value_len(&self) -> usize {
        if self.refs { 4 } else { self.vbytes as usize }
    }

    /// Checks the delta as the decoder would and returns its encoded size.
    pub(crate) fn check(&self) -> Result<usize, WireError> {
        check_oref(self.leaf, "leaf delta oref")?;
        check_limit("leaf value bytes", self.vbytes as usize, LEAF_VALUE_BYTES_MAX)?;
        if self.refs && self.vbytes != 0 {
            return Err(WireError::BadValue {
                what: "leaf delta",
                why: "a leaf of references with value bytes",
            });
        }
        check_limit("leaf delta reads", self.reads.len(), LEAF_KEYS_MAX)?;
        check_limit("leaf delta ops", self.ops.len(), LEAF_KEYS_MAX)?;
        let mut n = 4 + 1 + 1 + 4 + 4;
        for (key, value) in self.reads.iter().chain(&self.ops) {
            check_limit("leaf key bytes", key.len(), KEY_BYTES_MAX)?;
            n += 2 + key.len() + 1;
            if let Some(v) = value {
                if v.len() != self.value_len() {
                    return Err(WireError::BadValue {
                        what: "leaf delta value",
                        why: "not the leaf's value length",
                    });
                }
                n += v.len();
            }
        }
        Ok(n)
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.leaf.raw());
        let kind = if self.refs { KIND_REFS } else { 0 } | if self.root { KIND_ROOT } else { 0 };
        out.push(kind);
        out.push(self.vbytes);
        for list in [&self.reads, &self.ops] {
            out.put_u32(list.len() as u32);
            for (key, value) in list {
                out.put_u16(key.len() as u16);
                out.extend_from_slice(key);
                match value {
                    Some(v) => {
                        out.push(1);
                        out.extend_from_slice(v);
                    }
                    None => out.push(0),
                }
            }
        }
    }

    fn get(r: &mut Reader) -> Result<LeafDelta, WireError> {
        let leaf = r.oref("leaf delta oref")?;
        let kind = r.u8("leaf delta kind")?;
        if kind & !(KIND_REFS | KIND_ROOT) != 0 {
            return Err(WireError::BadValue { what: "leaf delta kind", why: "unknown bits" });
        }
        let vbytes = r.u8("leaf value bytes")?;
        let mut d = LeafDelta {
            leaf,
            refs: kind & KIND_REFS != 0,
            vbytes,
            root: kind & KIND_ROOT != 0,
            reads: Vec::new(),
            ops: Vec::new(),
        };
        if vbytes as usize > LEAF_VALUE_BYTES_MAX || (d.refs && vbytes != 0) {
            return Err(WireError::BadValue { what: "leaf value bytes", why: "out of range" });
        }
        let vlen = d.value_len();
        for what in ["leaf delta reads", "leaf delta ops"] {
            // Each key takes at least its length word and its flag.
            let n = r.count32(LEAF_KEYS_MAX, 3, what)?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                let n = r.count16(KEY_BYTES_MAX, 1, "leaf key")?;
                let key = r.bytes(n, "leaf key")?;
                let value = match r.u8("leaf value flag")? {
                    0 => None,
                    1 => Some(r.bytes(vlen, "leaf value")?),
                    _ => {
                        return Err(WireError::BadValue {
                            what: "leaf value flag",
                            why: "not 0 or 1",
                        });
                    }
                };
                list.push((key, value));
            }
            if what == "leaf delta reads" {
                d.reads = list;
            } else {
                d.ops = list;
            }
        }
        Ok(d)
    }
}

/// Checks a commit's deltas (at most [`LEAF_DELTAS_MAX`], each leaf once) and returns the
/// section's size.
pub(crate) fn deltas_bytes(ds: &[LeafDelta]) -> Result<usize, WireError> {
    check_limit("leaf deltas", ds.len(), LEAF_DELTAS_MAX)?;
    let mut n = 4;
    for (i, d) in ds.iter().enumerate() {
        n += d.check()?;
        if ds[..i].iter().any(|o| o.leaf == d.leaf) {
            return Err(WireError::BadValue { what: "leaf deltas", why: "a leaf twice" });
        }
    }
    Ok(n)
}

/// Appends the section; [`deltas_bytes`] has checked it.
pub(crate) fn put_deltas(out: &mut Vec<u8>, ds: &[LeafDelta]) {
    out.put_u32(ds.len() as u32);
    for d in ds {
        d.put(out);
    }
}

/// Reads the section, checking every count and length before it allocates for it.
pub(crate) fn get_deltas(r: &mut Reader) -> Result<Vec<LeafDelta>, WireError> {
    // A delta takes at least 14 bytes (oref, kind, vbytes, two counts).
    let n = r.count32(LEAF_DELTAS_MAX, 14, "leaf deltas")?;
    let mut ds: Vec<LeafDelta> = Vec::with_capacity(n);
    for _ in 0..n {
        let d = LeafDelta::get(r)?;
        if ds.iter().any(|o| o.leaf == d.leaf) {
            return Err(WireError::BadValue { what: "leaf deltas", why: "a leaf twice" });
        }
        ds.push(d);
    }
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FLAG_LEAF_DELTAS;
    use crate::limits::FRAME_BYTES_MAX;
    use crate::{Commit, Request, RequestBody, decode_request};

    fn oref(page: u32) -> Oref {
        Oref::new(thor_core::PageId::new(page).unwrap(), thor_core::Oid::new(1).unwrap())
    }

    fn delta() -> LeafDelta {
        LeafDelta {
            leaf: oref(0x10),
            refs: false,
            vbytes: 8,
            root: true,
            reads: vec![
                (Bytes::from_static(b"a"), None),
                (Bytes::from_static(b"b"), Some(Bytes::from(vec![2; 8]))),
            ],
            ops: vec![
                (Bytes::from_static(b"a"), Some(Bytes::from(vec![1; 8]))),
                (Bytes::from_static(b"b"), None),
            ],
        }
    }

    fn commit(leaves: Vec<LeafDelta>, id: Option<u64>) -> Request {
        Request::new(RequestBody::Commit(Commit {
            versions: vec![(oref(0x10), Bytes::from(vec![0u8; 16]))],
            id,
            leaves,
            ..Commit::default()
        }))
    }

    #[test]
    fn a_commit_with_deltas_round_trips_and_is_flagged() {
        let refs = LeafDelta {
            leaf: oref(0x20),
            refs: true,
            vbytes: 0,
            root: false,
            reads: vec![(Bytes::new(), Some(Bytes::from(oref(0x30).raw().to_le_bytes().to_vec())))],
            ops: vec![],
        };
        for id in [None, Some(9)] {
            let req = commit(vec![delta(), refs.clone()], id);
            let bytes = req.to_frame(5).unwrap();
            assert_eq!(
                u16::from_le_bytes([bytes[10], bytes[11]]) & FLAG_LEAF_DELTAS,
                FLAG_LEAF_DELTAS
            );
            let (rid, back) = decode_request(Bytes::from(bytes), FRAME_BYTES_MAX).unwrap();
            assert_eq!((rid, back), (5, req));
        }
        // Without deltas the frame is version 7's: no flag, no section.
        let plain = commit(vec![], None).to_frame(1).unwrap();
        assert_eq!(u16::from_le_bytes([plain[10], plain[11]]) & FLAG_LEAF_DELTAS, 0);
        let with = commit(vec![delta()], None).to_frame(1).unwrap();
        assert_eq!(with.len(), plain.len() + deltas_bytes(&[delta()]).unwrap());
    }

    #[test]
    fn the_encoder_refuses_what_the_decoder_would() {
        let mut long = delta();
        long.reads[0].0 = Bytes::from(vec![0; KEY_BYTES_MAX + 1]);
        let mut short_value = delta();
        short_value.ops[0].1 = Some(Bytes::from(vec![0; 7]));
        let mut refs_with_bytes = delta();
        refs_with_bytes.refs = true;
        let mut big = delta();
        big.vbytes = (LEAF_VALUE_BYTES_MAX + 1) as u8;
        let twice = vec![delta(), delta()];
        for leaves in [vec![long], vec![short_value], vec![refs_with_bytes], vec![big], twice] {
            assert!(commit(leaves.clone(), None).to_frame(1).is_err(), "{leaves:?}");
        }
    }

    /// Every truncation and a flag on the wrong message are errors, never panics.
    #[test]
    fn damaged_deltas_are_errors() {
        let good = commit(vec![delta()], None).to_frame(1).unwrap();
        let plain_len = commit(vec![], None).to_frame(1).unwrap().len();
        for cut in plain_len..good.len() {
            let mut b = good[..cut].to_vec();
            let len = (cut - 4) as u32;
            b[..4].copy_from_slice(&len.to_le_bytes());
            let sum = crate::frame::checksum(&b);
            b[4..8].copy_from_slice(&sum.to_le_bytes());
            assert!(decode_request(Bytes::from(b), FRAME_BYTES_MAX).is_err(), "cut at {cut}");
        }
        let mut fetch = Request::new(RequestBody::Stats).to_frame(1).unwrap();
        fetch[10] |= FLAG_LEAF_DELTAS as u8;
        let sum = crate::frame::checksum(&fetch);
        fetch[4..8].copy_from_slice(&sum.to_le_bytes());
        assert!(decode_request(Bytes::from(fetch), FRAME_BYTES_MAX).is_err());
    }
}
