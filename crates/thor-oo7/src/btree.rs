//! Persistent B+-tree indexes on thor objects: OO7's indexes on atomic-part ids, atomic-part
//! build dates and document titles.
//!
//! ```text
//!  oo7.Index { root, height, entries }
//!        │
//!        ▼
//!  inner IndexNode: keys k1..km, refs c0..cm      key < k1 → c0, k1 <= key < k2 → c1, ...
//!        │
//!        ▼
//!  leaf IndexNode:  keys k0..kn-1, refs v0..vn-1  (sorted, unique)
//! ```
//!
//! Keys are `u64`s (ids; `date << 32 | id`; title hashes), values references. Every node has
//! room for [`BTREE_FANOUT`] keys and `BTREE_FANOUT + 1` references (objects keep their size),
//! and `count` says how many are in use. The loader builds the trees bottom-up with leaves
//! three-quarters full ([`crate::load`]); [`Db::index_insert`] splits full nodes on the way back
//! up and grows a new root when the old one splits. [`Db::index_remove`] only removes the entry:
//! leaves may become sparse or empty but routing stays correct, which is all OO7's few deletes
//! need (a textbook simplification, as in many production B-trees that never merge).
//! Range scans walk the tree in order, visiting only subtrees whose key range meets the
//! query's, so leaves need no sibling links.

use thor_client::{Any, Ref};

use crate::error::Oo7Error;
use crate::limits::BTREE_FANOUT;
use crate::schema::{Index, IndexNode};
use crate::traverse::{Db, Trace};

/// A decoded node.
#[derive(Debug, Clone)]
struct Node {
    leaf: bool,
    keys: Vec<u64>,
    refs: Vec<Ref<Any>>,
}

fn decode_keys(raw: &[u8; 8 * BTREE_FANOUT], n: usize) -> Vec<u64> {
    (0..n).map(|i| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("8 bytes"))).collect()
}

fn encode_keys(keys: &[u64]) -> [u8; 8 * BTREE_FANOUT] {
    let mut raw = [0u8; 8 * BTREE_FANOUT];
    for (i, k) in keys.iter().enumerate() {
        raw[8 * i..8 * i + 8].copy_from_slice(&k.to_le_bytes());
    }
    raw
}

/// Which child of an inner node covers `key`.
fn route(keys: &[u64], key: u64) -> usize {
    keys.partition_point(|&k| k <= key)
}

impl<T: Trace> Db<'_, T> {
    /// The index in root slot `slot`.
    pub fn index(&mut self, slot: usize) -> Result<Ref<Index>, Oo7Error> {
        let r = self.session().root::<Index>(slot)?;
        if r.is_null() {
            return Err(Oo7Error::NotOo7(format!("root slot {slot} holds no index")));
        }
        Ok(r)
    }

    fn read_node(&mut self, r: Ref<IndexNode>) -> Result<Node, Oo7Error> {
        let v = self.get(r)?;
        let leaf = v.get(IndexNode::leaf) == 1;
        let n = v.get(IndexNode::count) as usize;
        if n > BTREE_FANOUT {
            return Err(Oo7Error::Inconsistent("index node overfull".into()));
        }
        let keys = decode_keys(&v.get(IndexNode::keys), n);
        let nrefs = if leaf { n } else { n + 1 };
        let refs = (0..nrefs).map(|i| v.var_ref(i)).collect();
        Ok(Node { leaf, keys, refs })
    }

    /// Writes `node` into `r`, whose references before index `from` are unchanged and which
    /// used `old_refs` references before.
    fn write_node(
        &mut self,
        r: Ref<IndexNode>,
        node: &Node,
        from: usize,
        old_refs: usize,
    ) -> Result<(), Oo7Error> {
        let v = self.get(r)?;
        v.set(IndexNode::leaf, u32::from(node.leaf))?;
        v.set(IndexNode::count, node.keys.len() as u32)?;
        v.set(IndexNode::keys, encode_keys(&node.keys))?;
        for i in from..node.refs.len().max(old_refs) {
            v.set_var_ref(i, node.refs.get(i).copied().unwrap_or(Ref::NULL))?;
        }
        Ok(())
    }

    fn new_node(&mut self, node: &Node) -> Result<Ref<IndexNode>, Oo7Error> {
        let r = self.session().create::<IndexNode>(BTREE_FANOUT + 1)?.as_ref();
        self.write_node(r, node, 0, 0)?;
        Ok(r)
    }

    /// The value of `key` in index `idx`.
    pub fn index_get(&mut self, idx: Ref<Index>, key: u64) -> Result<Option<Ref<Any>>, Oo7Error> {
        let mut r = self.get(idx)?.get(Index::root);
        loop {
            let n = self.read_node(r)?;
            if n.leaf {
                return Ok(n.keys.binary_search(&key).ok().map(|i| n.refs[i]));
            }
            r = n.refs[route(&n.keys, key)].cast();
        }
    }

    /// Calls `f` with every entry whose key is in `[lo, hi)`, in key order.
    pub fn index_range(
        &mut self,
        idx: Ref<Index>,
        lo: u64,
        hi: u64,
        f: &mut dyn FnMut(u64, Ref<Any>),
    ) -> Result<(), Oo7Error> {
        let root = self.get(idx)?.get(Index::root);
        self.range_node(root, lo, hi, f)
    }

    fn range_node(
        &mut self,
        r: Ref<IndexNode>,
        lo: u64,
        hi: u64,
        f: &mut dyn FnMut(u64, Ref<Any>),
    ) -> Result<(), Oo7Error> {
        let n = self.read_node(r)?;
        if n.leaf {
            for (k, v) in n.keys.iter().zip(&n.refs) {
                if (lo..hi).contains(k) {
                    f(*k, *v);
                }
            }
            return Ok(());
        }
        for (i, c) in n.refs.iter().enumerate() {
            // Child i covers [keys[i-1], keys[i]).
            let start = if i == 0 { 0 } else { n.keys[i - 1] };
            let end = n.keys.get(i).copied();
            if end.is_some_and(|e| e <= lo) || start >= hi {
                continue;
            }
            self.range_node(c.cast(), lo, hi, f)?;
        }
        Ok(())
    }

    /// Inserts or replaces `key`'s value.
    pub fn index_insert(
        &mut self,
        idx: Ref<Index>,
        key: u64,
        value: Ref<Any>,
    ) -> Result<(), Oo7Error> {
        let (root, height, entries) = {
            let v = self.get(idx)?;
            (v.get(Index::root), v.get(Index::height), v.get(Index::entries))
        };
        let (added, split) = self.insert_node(root, key, value)?;
        let v = self.get(idx)?;
        if added {
            v.set(Index::entries, entries + 1)?;
        }
        if let Some((sep, right)) = split {
            drop(v);
            let new_root = self.new_node(&Node {
                leaf: false,
                keys: vec![sep],
                refs: vec![root.cast(), right.cast()],
            })?;
            let v = self.get(idx)?;
            v.set(Index::root, new_root)?;
            v.set(Index::height, height + 1)?;
        }
        Ok(())
    }

    /// Inserts below `r`; returns whether an entry was added and, if `r` split, the first key
    /// of the new right sibling and the sibling.
    #[allow(clippy::type_complexity)]
    fn insert_node(
        &mut self,
        r: Ref<IndexNode>,
        key: u64,
        value: Ref<Any>,
    ) -> Result<(bool, Option<(u64, Ref<IndexNode>)>), Oo7Error> {
        let mut n = self.read_node(r)?;
        let old_refs = n.refs.len();
        let added;
        let from;
        if n.leaf {
            match n.keys.binary_search(&key) {
                Ok(i) => {
                    n.refs[i] = value;
                    added = false;
                    from = i;
                }
                Err(i) => {
                    n.keys.insert(i, key);
                    n.refs.insert(i, value);
                    added = true;
                    from = i;
                }
            }
        } else {
            let i = route(&n.keys, key);
            let (a, split) = self.insert_node(n.refs[i].cast(), key, value)?;
            added = a;
            match split {
                None => return Ok((added, None)),
                Some((sep, right)) => {
                    n.keys.insert(i, sep);
                    n.refs.insert(i + 1, right.cast());
                    from = i + 1;
                }
            }
        }
        if n.keys.len() <= BTREE_FANOUT {
            self.write_node(r, &n, from, old_refs)?;
            return Ok((added, None));
        }
        // Split: the right half moves to a new node.
        let mid = n.keys.len() / 2;
        let (left, right, sep) = if n.leaf {
            let rk = n.keys.split_off(mid);
            let rr = n.refs.split_off(mid);
            let sep = rk[0];
            (n, Node { leaf: true, keys: rk, refs: rr }, sep)
        } else {
            // The middle key moves up; children split around it.
            let mut rk = n.keys.split_off(mid);
            let sep = rk.remove(0);
            let rr = n.refs.split_off(mid + 1);
            (n, Node { leaf: false, keys: rk, refs: rr }, sep)
        };
        self.write_node(r, &left, from.min(left.refs.len()), old_refs)?;
        let rnode = self.new_node(&right)?;
        Ok((added, Some((sep, rnode))))
    }

    /// Removes `key`; returns whether it was there.
    pub fn index_remove(&mut self, idx: Ref<Index>, key: u64) -> Result<bool, Oo7Error> {
        let (root, entries) = {
            let v = self.get(idx)?;
            (v.get(Index::root), v.get(Index::entries))
        };
        let mut r = root;
        loop {
            let mut n = self.read_node(r)?;
            if !n.leaf {
                r = n.refs[route(&n.keys, key)].cast();
                continue;
            }
            let Ok(i) = n.keys.binary_search(&key) else { return Ok(false) };
            let old_refs = n.refs.len();
            n.keys.remove(i);
            n.refs.remove(i);
            self.write_node(r, &n, i, old_refs)?;
            self.get(idx)?.set(Index::entries, entries.saturating_sub(1))?;
            return Ok(true);
        }
    }
}
