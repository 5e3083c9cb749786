//! Large objects: values bigger than a page, stored as trees of page-sized pieces.
//!
//! Objects never span pages, so a value larger than [`max_object_bytes`] (an OO7 document of
//! 20 KB, a manual of 1 MB) is split. The root is an instance of [`builtin::LARGE`]:
//!
//! ```text
//! +-------+---------------+------------+------------+-------+-----------------+
//! | class | length (u64)  | kind (u32) | height(u32)| count | child references|
//! +-------+---------------+------------+------------+-------+-----------------+
//! ```
//!
//! `length` counts elements (bytes or references, by `kind`), `height` is the number of levels
//! below the root. At height 1 the children are leaves: instances of [`builtin::BYTES`] or
//! [`builtin::REFS`] holding consecutive runs of the value, each full except the last. Above
//! that, children are interior [`builtin::REFS`] nodes with `height - 1` levels below them.
//!
//! [`encode`] lays a value out in pre-order (root, first subtree, second subtree, ...), so that
//! allocating the objects in that order stores the value's pieces in consecutive pages and a
//! sequential read touches pages in order.
//!
//! # Reading an untrusted tree
//!
//! A tree read back comes from a server, which may be faulty. Its depth is bounded by the
//! height in the root (at most 8), but not its breadth: an interior node may name the same
//! child a thousand times, or itself, and a tree of height 8 would then take a thousand to the
//! seventh fetches to read. So [`read`] visits at most as many pieces as a well-formed tree of
//! the length the root claims has ([`pieces_below_root`], exactly what [`encode`] makes), and at
//! most the caller's limit, checked before the first fetch: a tree with cycles or shared
//! pieces fails with [`FormatError::BadLarge`] after that many fetches.

use crate::class::{ClassDesc, VarKind, builtin};
use crate::error::FormatError;
use crate::ids::RawRef;
use crate::le::{put_u32, put_u64, u32_at, u64_at};
use crate::limits::{is_valid_page_size, max_object_bytes};

/// What the leaves of a large object hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafKind {
    /// Bytes, in [`builtin::BYTES`] leaves.
    Bytes,
    /// Reference words, in [`builtin::REFS`] leaves.
    Refs,
}

/// The decoded fixed part of a large object's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeHeader {
    /// Elements in the whole value.
    pub len: u64,
    /// What the leaves hold.
    pub kind: LeafKind,
    /// Levels below the root (at least 1).
    pub height: u32,
}

/// Elements per leaf and references per node for a page size.
#[derive(Debug, Clone, Copy)]
struct Shape {
    leaf_elems: usize,
    node_fanout: usize,
    root_fanout: usize,
}

fn shape(page_size: usize, kind: LeafKind) -> Shape {
    let max = max_object_bytes(page_size);
    let refs = builtin::desc(builtin::REFS).expect("builtin");
    let large = builtin::desc(builtin::LARGE).expect("builtin");
    let node_fanout = (max - refs.var_offset()) / 4;
    let leaf_elems = match kind {
        LeafKind::Bytes => max - builtin::desc(builtin::BYTES).expect("builtin").var_offset(),
        LeafKind::Refs => node_fanout,
    };
    Shape { leaf_elems, node_fanout, root_fanout: (max - large.var_offset()) / 4 }
}

/// The element count above which a value must be stored as a large object in pages of
/// `page_size` bytes.
pub fn leaf_capacity(page_size: usize, kind: LeafKind) -> usize {
    shape(page_size, kind).leaf_elems
}

/// Splits a value into the objects of a large-object tree, in pre-order: index 0 is the root.
/// References between them are tagged words ([`RawRef::Tagged`]) holding indexes into the
/// returned vector; the caller maps them to orefs (or to its own temporary numbering) when it
/// allocates the objects. For [`LeafKind::Bytes`] `data` is the value; for [`LeafKind::Refs`]
/// it is the reference words, 4 bytes each, little-endian.
pub fn encode(data: &[u8], kind: LeafKind, page_size: usize) -> Vec<Vec<u8>> {
    let s = shape(page_size, kind);
    let elem = if kind == LeafKind::Bytes { 1 } else { 4 };
    let len = data.len() / elem;
    let leaves = len.div_ceil(s.leaf_elems).max(1);
    // Height: the smallest h such that the root's children, each covering node_fanout^(h-1)
    // leaves, number at most root_fanout.
    let mut height = 1u32;
    let mut per_child = 1usize;
    while leaves.div_ceil(per_child) > s.root_fanout {
        height += 1;
        per_child = per_child.saturating_mul(s.node_fanout);
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    let large = builtin::desc(builtin::LARGE).expect("builtin");
    let n_root = leaves.div_ceil(per_child);
    let mut root = large.new_object(builtin::LARGE.raw(), n_root);
    put_u64(&mut root, 4, len as u64);
    put_u32(&mut root, 12, if kind == LeafKind::Bytes { 1 } else { 2 });
    put_u32(&mut root, 16, height);
    out.push(root);
    for c in 0..n_root {
        let first = c * per_child;
        let last = (first + per_child).min(leaves);
        let idx = emit(&mut out, data, elem, kind, &s, first, last, per_child);
        let off = large.var_offset() + 4 * c;
        put_u32(&mut out[0], off, RawRef::tagged_word(idx as u32));
    }
    out
}

/// Emits the subtree covering leaves `first..last`, each child of which covers `span` leaves
/// (a leaf when `span` is 1); returns the subtree root's index.
#[allow(clippy::too_many_arguments)]
fn emit(
    out: &mut Vec<Vec<u8>>,
    data: &[u8],
    elem: usize,
    kind: LeafKind,
    s: &Shape,
    first: usize,
    last: usize,
    span: usize,
) -> usize {
    let idx = out.len();
    if span == 1 {
        let lo = (first * s.leaf_elems * elem).min(data.len());
        let hi = ((first + 1) * s.leaf_elems * elem).min(data.len());
        let piece = &data[lo..hi];
        let (class, desc) = match kind {
            LeafKind::Bytes => (builtin::BYTES, builtin::desc(builtin::BYTES).expect("builtin")),
            LeafKind::Refs => (builtin::REFS, builtin::desc(builtin::REFS).expect("builtin")),
        };
        let mut leaf = desc.new_object(class.raw(), piece.len() / elem);
        leaf[desc.var_offset()..desc.var_offset() + piece.len()].copy_from_slice(piece);
        out.push(leaf);
        return idx;
    }
    let child_span = span / s.node_fanout;
    let n = (last - first).div_ceil(child_span);
    let refs = builtin::desc(builtin::REFS).expect("builtin");
    out.push(refs.new_object(builtin::REFS.raw(), n));
    for c in 0..n {
        let f = first + c * child_span;
        let l = (f + child_span).min(last);
        let child = emit(out, data, elem, kind, s, f, l, child_span);
        put_u32(&mut out[idx], refs.var_offset() + 4 * c, RawRef::tagged_word(child as u32));
    }
    idx
}

/// Decodes the header of a large object's root. `obj` may come from anywhere: it is checked.
pub fn header(obj: &[u8]) -> Result<LargeHeader, FormatError> {
    let large = builtin::desc(builtin::LARGE).expect("builtin");
    large.check_shape(obj).map_err(FormatError::BadLarge)?;
    let kind = match u32_at(obj, 12) {
        1 => LeafKind::Bytes,
        2 => LeafKind::Refs,
        _ => return Err(FormatError::BadLarge("unknown leaf kind")),
    };
    let height = u32_at(obj, 16);
    if height == 0 || height > 8 {
        return Err(FormatError::BadLarge("height out of range"));
    }
    Ok(LargeHeader { len: u64_at(obj, 4), kind, height })
}

/// The child reference words of a root or interior node (already shape-checked by [`header`]
/// or by the caller).
pub fn children<'o>(desc: &ClassDesc, obj: &'o [u8]) -> impl Iterator<Item = u32> + 'o {
    debug_assert_eq!(desc.var(), VarKind::Refs);
    let count = u32_at(obj, desc.count_offset()) as usize;
    let start = desc.var_offset();
    (0..count).map(move |i| u32_at(obj, start + 4 * i))
}

/// The pieces below the root of a well-formed tree of `height` holding `len` elements of
/// `kind` in pages of `page_size` bytes: what [`encode`] makes (at its height; a taller tree
/// adds a chain of single-child nodes per extra level). `None` if the count overflows.
pub fn pieces_below_root(len: u64, kind: LeafKind, height: u32, page_size: usize) -> Option<u64> {
    let s = shape(page_size, kind);
    let leaves = len.div_ceil(s.leaf_elems as u64).max(1);
    // Subtrees are aligned to their span, so the level whose nodes each cover `span` leaves
    // has ceil(leaves / span) of them.
    let mut total = 0u64;
    let mut span = 1u64;
    for _ in 0..height {
        total = total.checked_add(leaves.div_ceil(span))?;
        span = span.saturating_mul(s.node_fanout as u64);
    }
    Some(total)
}

/// Reads a whole large value, fetching each child through `get` (given a child's reference
/// word, it returns that object's bytes). Checks the tree's shape as it goes: a malformed or
/// truncated tree is an error, never a wrong value. Returns the bytes of the value (for
/// [`LeafKind::Refs`], the reference words little-endian).
///
/// At most [`pieces_below_root`] pieces are fetched for the length the root claims, and a root
/// whose length needs more than `pieces_max` is refused before any fetch (see the module
/// documentation); `page_size` is the database's.
pub fn read<E: From<FormatError>>(
    root: &[u8],
    page_size: usize,
    pieces_max: usize,
    mut get: impl FnMut(u32) -> Result<Vec<u8>, E>,
) -> Result<Vec<u8>, E> {
    if !is_valid_page_size(page_size) {
        return Err(FormatError::BadPageSize(page_size).into());
    }
    let h = header(root)?;
    let mut budget = pieces_below_root(h.len, h.kind, h.height, page_size)
        .filter(|&n| n <= pieces_max as u64)
        .ok_or(FormatError::BadLarge("the length needs more pieces than a read may fetch"))?;
    // Within the piece limit, the length fits in memory: each piece holds at most a page.
    let elem = if h.kind == LeafKind::Bytes { 1 } else { 4 };
    let total = usize::try_from(h.len)
        .ok()
        .and_then(|n| n.checked_mul(elem))
        .ok_or(FormatError::BadLarge("length overflows memory"))?;
    let mut out = Vec::with_capacity(total.min(1 << 24));
    let large = builtin::desc(builtin::LARGE).expect("builtin");
    let kids: Vec<u32> = children(large, root).collect();
    for k in kids {
        read_node(k, h.height - 1, h.kind, &mut get, &mut out, total, &mut budget)?;
    }
    if out.len() != total {
        return Err(FormatError::BadLarge("leaves do not add up to the length").into());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn read_node<E: From<FormatError>>(
    word: u32,
    below: u32,
    kind: LeafKind,
    get: &mut impl FnMut(u32) -> Result<Vec<u8>, E>,
    out: &mut Vec<u8>,
    total: usize,
    budget: &mut u64,
) -> Result<(), E> {
    if *budget == 0 {
        return Err(FormatError::BadLarge(
            "more pieces than its length needs: the tree has a cycle or shared pieces",
        )
        .into());
    }
    *budget -= 1;
    let obj = get(word)?;
    let refs = builtin::desc(builtin::REFS).expect("builtin");
    if below == 0 {
        let class = if kind == LeafKind::Bytes { builtin::BYTES } else { builtin::REFS };
        let desc = builtin::desc(class).expect("builtin");
        if obj.len() < 4 || u32_at(&obj, 0) != class.raw() {
            return Err(FormatError::BadLarge("leaf of the wrong class").into());
        }
        let n = desc.check_shape(&obj).map_err(FormatError::BadLarge)?;
        let bytes = if kind == LeafKind::Bytes { n } else { 4 * n };
        if out.len() + bytes > total {
            return Err(FormatError::BadLarge("leaves exceed the length").into());
        }
        out.extend_from_slice(&obj[desc.var_offset()..desc.var_offset() + bytes]);
        return Ok(());
    }
    if obj.len() < 4 || u32_at(&obj, 0) != builtin::REFS.raw() {
        return Err(FormatError::BadLarge("interior node of the wrong class").into());
    }
    refs.check_shape(&obj).map_err(FormatError::BadLarge)?;
    let kids: Vec<u32> = children(refs, &obj).collect();
    for k in kids {
        read_node(k, below - 1, kind, get, out, total, budget)?;
    }
    Ok(())
}

/// Checks a large object's root as a server must before storing it: its header (leaf kind,
/// height), at least one child, and a length the children can hold at that height (each child
/// covers at most `node_fanout^(height-1)` full leaves). The children themselves are checked
/// where they are stored (as `thor.Bytes` or `thor.Refs` objects); this keeps a root from
/// claiming a length or a shape no tree of its pieces could have.
pub fn check_root(obj: &[u8], page_size: usize) -> Result<LargeHeader, FormatError> {
    let h = header(obj)?;
    let large = builtin::desc(builtin::LARGE).expect("builtin");
    let count = u32_at(obj, large.count_offset()) as u64;
    if count == 0 {
        return Err(FormatError::BadLarge("a root without children"));
    }
    let s = shape(page_size, h.kind);
    let mut per_child = s.leaf_elems as u64;
    for _ in 1..h.height {
        per_child = per_child.saturating_mul(s.node_fanout as u64);
    }
    if h.len > count.saturating_mul(per_child) {
        return Err(FormatError::BadLarge("length beyond what the children can hold"));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(len: usize, page: usize, kind: LeafKind) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let objs = encode(&data, kind, page);
        for o in &objs {
            assert!(o.len() <= max_object_bytes(page));
        }
        let h = header(&objs[0]).unwrap();
        assert_eq!(
            pieces_below_root(h.len, kind, h.height, page),
            Some(objs.len() as u64 - 1),
            "encode makes exactly the pieces a read allows"
        );
        let got = read::<FormatError>(&objs[0], page, usize::MAX, |w| match RawRef::decode(w) {
            RawRef::Tagged(i) => Ok(objs[i as usize].clone()),
            RawRef::Oref(_) => Err(FormatError::BadLarge("untagged")),
        })
        .unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn small_medium_and_deep_values_roundtrip() {
        roundtrip(0, 8192, LeafKind::Bytes);
        roundtrip(20_000, 8192, LeafKind::Bytes);
        roundtrip(1_000_000, 8192, LeafKind::Bytes);
        // 1 KB pages force a tree of height 2 for 1 MB.
        roundtrip(1_000_000, 1024, LeafKind::Bytes);
        roundtrip(4 * 5000, 1024, LeafKind::Refs);
        let objs = encode(&vec![0; 1_000_000], LeafKind::Bytes, 1024);
        assert_eq!(header(&objs[0]).unwrap().height, 2);
    }

    #[test]
    fn medium_document_uses_three_leaves() {
        let objs = encode(&vec![7; 20_000], LeafKind::Bytes, 8192);
        assert_eq!(objs.len(), 4);
        assert_eq!(
            header(&objs[0]).unwrap(),
            LargeHeader { len: 20_000, kind: LeafKind::Bytes, height: 1 }
        );
    }

    #[test]
    fn roots_are_checked_against_what_their_children_can_hold() {
        for (len, page) in [(0, 4096), (20_000, 8192), (3_000_000, 4096)] {
            let objs = encode(&vec![1u8; len], LeafKind::Bytes, page);
            assert_eq!(check_root(&objs[0], page).unwrap().len, len as u64);
        }
        let objs = encode(&vec![1u8; 20_000], LeafKind::Bytes, 8192);
        let mut r = objs[0].clone();
        put_u64(&mut r, 4, 3 * 8192);
        assert!(check_root(&r, 8192).is_err(), "three leaves cannot hold 24 KiB");
        let mut r = objs[0].clone();
        put_u32(&mut r, 12, 3);
        assert!(check_root(&r, 8192).is_err(), "unknown kind");
        let mut r = objs[0].clone();
        put_u32(&mut r, 16, 0);
        assert!(check_root(&r, 8192).is_err(), "height 0");
        let large = builtin::desc(builtin::LARGE).unwrap();
        let empty = large.new_object(builtin::LARGE.raw(), 0);
        assert!(check_root(&empty, 8192).is_err(), "no children");
    }

    #[test]
    fn truncated_trees_are_errors() {
        let data = vec![1u8; 30_000];
        let objs = encode(&data, LeafKind::Bytes, 8192);
        let r = read::<FormatError>(&objs[0], 8192, usize::MAX, |w| match RawRef::decode(w) {
            RawRef::Tagged(1) => Ok(objs[1][..objs[1].len() - 4].to_vec()),
            RawRef::Tagged(i) => Ok(objs[i as usize].clone()),
            RawRef::Oref(_) => Err(FormatError::BadLarge("untagged")),
        });
        assert!(r.is_err());
        let mut bad_root = objs[0].clone();
        put_u64(&mut bad_root, 4, 40_000);
        let r = read::<FormatError>(&bad_root, 8192, usize::MAX, |w| match RawRef::decode(w) {
            RawRef::Tagged(i) => Ok(objs[i as usize].clone()),
            RawRef::Oref(_) => Err(FormatError::BadLarge("untagged")),
        });
        assert!(r.is_err());
    }

    /// A root of height 8, its pieces `tagged(k)` for `k` in `1..`, for the tests below.
    fn root_of(len: u64, kind: LeafKind, child: u32) -> Vec<u8> {
        let large = builtin::desc(builtin::LARGE).expect("builtin");
        let mut root = large.new_object(builtin::LARGE.raw(), 1);
        put_u64(&mut root, 4, len);
        put_u32(&mut root, 12, if kind == LeafKind::Bytes { 1 } else { 2 });
        put_u32(&mut root, 16, 8);
        put_u32(&mut root, large.var_offset(), RawRef::tagged_word(child));
        root
    }

    /// An interior node (or, for reference values, a leaf) with `n` children, all `child`.
    fn node_of(n: usize, child: u32) -> Vec<u8> {
        let refs = builtin::desc(builtin::REFS).expect("builtin");
        let mut node = refs.new_object(builtin::REFS.raw(), n);
        for k in 0..n {
            put_u32(&mut node, refs.var_offset() + 4 * k, RawRef::tagged_word(child));
        }
        node
    }

    fn fanout(page: usize) -> usize {
        (max_object_bytes(page) - builtin::desc(builtin::REFS).expect("builtin").var_offset()) / 4
    }

    /// A reference value whose one piece names itself at every reference: it is at once an
    /// interior node and a full leaf, at every level. Read naively it is a value as long as
    /// the reads go on; the read stops after the pieces the claimed length needs.
    #[test]
    fn a_cyclic_tree_is_refused_within_its_budget() {
        let page = 8192;
        let f = fanout(page);
        let len = 3 * f as u64;
        let root = root_of(len, LeafKind::Refs, 1);
        let node = node_of(f, 1);
        let budget = pieces_below_root(len, LeafKind::Refs, 8, page).unwrap();
        assert_eq!(budget, 3 + 7, "three leaves under a chain of seven interior nodes");
        let mut fetches = 0u64;
        let r = read::<FormatError>(&root, page, usize::MAX, |_| {
            fetches += 1;
            Ok(node.clone())
        });
        assert!(matches!(r, Err(FormatError::BadLarge(why)) if why.contains("cycle")), "{r:?}");
        assert_eq!(fetches, budget, "every piece the length allows, and not one more");
    }

    /// Interior nodes that each name the next one at all their references, over an empty leaf:
    /// fanout^7 leaves of nothing, which no check on the value's bytes would ever stop.
    #[test]
    fn shared_pieces_that_blow_up_are_refused_within_the_budget() {
        let page = 1024;
        let f = fanout(page);
        // Pieces tagged 1..=7 are interior nodes (1 the highest), 8 the empty leaf.
        let empty_leaf =
            builtin::desc(builtin::BYTES).expect("builtin").new_object(builtin::BYTES.raw(), 0);
        let len = 100u64;
        let root = root_of(len, LeafKind::Bytes, 1);
        let mut fetches = 0u64;
        let r = read::<FormatError>(&root, page, usize::MAX, |w| {
            fetches += 1;
            match RawRef::decode(w) {
                RawRef::Tagged(k @ 1..=7) => Ok(node_of(f, k + 1)),
                _ => Ok(empty_leaf.clone()),
            }
        });
        assert!(matches!(r, Err(FormatError::BadLarge(_))), "{r:?}");
        assert_eq!(fetches, pieces_below_root(len, LeafKind::Bytes, 8, page).unwrap());
    }

    #[test]
    fn a_length_beyond_the_piece_limit_is_refused_before_any_fetch() {
        let mut root = encode(&[1, 2, 3], LeafKind::Bytes, 8192).swap_remove(0);
        put_u64(&mut root, 4, u64::MAX / 2);
        let mut fetches = 0;
        let r = read::<FormatError>(&root, 8192, 1 << 18, |_| {
            fetches += 1;
            Err(FormatError::BadLarge("no fetch expected"))
        });
        assert!(matches!(r, Err(FormatError::BadLarge(_))), "{r:?}");
        assert_eq!(fetches, 0);
        // A real value of 20,000 bytes needs 3 leaves: a limit of 2 refuses it, 3 reads it.
        let data = vec![9u8; 20_000];
        let objs = encode(&data, LeafKind::Bytes, 8192);
        let get = |w: u32| match RawRef::decode(w) {
            RawRef::Tagged(i) => Ok(objs[i as usize].clone()),
            RawRef::Oref(_) => Err(FormatError::BadLarge("untagged")),
        };
        assert!(read::<FormatError>(&objs[0], 8192, 2, get).is_err());
        assert_eq!(read::<FormatError>(&objs[0], 8192, 3, get).unwrap(), data);
    }
}
