//! The layout of a map node: class `thor.MapNode`, the nodes of the client's persistent
//! ordered map (`thor_client::map`, whose module documentation explains the tree).
//!
//! It lives here, beside the object and page formats, so that every reader of a node reads it
//! the way the client writes it: the client itself, and the server's merge of commits that
//! change different keys of one leaf (`thor_server_core::leafmerge`; `docs/clocc.md`, "Map
//! leaves").
//!
//! ```text
//!  offset  0: class word (the object header)
//!          4: count   u32  entries in the node
//!          8: level   u32  0 for a leaf, the height above the leaves otherwise
//!         12: next    ref  the next leaf in key order (null in internal nodes and the last leaf)
//!         16: slot[0..FANOUT] refs: a child per entry in internal nodes, a value per entry
//!                          in leaves whose values are references; null otherwise
//!        528: var count u32, then the entry area (bytes, sized to fill a page):
//!             dir[0..count] u16  where entry i (its key_len word) starts in the area;
//!                                the directory is in key order
//!             entry: key_len u16, key bytes, value bytes (leaves of non-reference values)
//! ```
//!
//! Writers pack the entries in key order right after the directory ([`encode_area`]), so
//! that one entry can be spliced in or out ([`splice_in`], [`splice_out`]) without decoding
//! the others; readers rely only on the directory ([`entry`]), and check every offset.

use crate::class::{ClassDesc, VarKind};
use crate::error::FormatError;
use crate::limits::{CLASS_FIXED_MAX_BYTES, OBJECT_HEADER_BYTES, PAGE_SIZE_MAX, PAGE_SIZE_MIN};

/// The class name of map nodes.
pub const NAME: &str = "thor.MapNode";

/// Reference slots of a node: the most children of an internal node and entries of a leaf
/// of reference values. 128 slots are 512 bytes of the node's fixed part (which must fit the
/// smallest page), a sixteenth of an 8 KiB page, and give a tree of a million entries three
/// or four levels.
pub const FANOUT: usize = 128;

/// The longest key, in bytes of its encoding, in pages large enough: a node must hold at
/// least four of the largest entries so that a split of a full node gives two halves that
/// each fit (smaller pages allow less: a quarter of [`area_bytes`] per entry).
pub const KEY_BYTES_MAX: usize = 1024;

/// Most levels of a tree: a million entries take four, and every level at least halves the
/// entries below it once split, so 32 levels are far beyond any map that fits a database. A
/// path longer than this is a malformed map (a cycle of nodes), not a deep one.
pub const HEIGHT_MAX: u32 = 32;

/// Offset of the entry count in the object (after the 4-byte class word).
pub const COUNT_AT: usize = 4;
/// Offset of the level.
pub const LEVEL_AT: usize = 8;
/// Offset of the next-leaf reference.
pub const NEXT_AT: usize = 12;
/// Offset of reference slot 0.
pub const SLOTS_AT: usize = 16;
/// Bytes of the node's fixed part: count, level, next and the slots.
pub const FIXED_BYTES: usize = 12 + 4 * FANOUT;
/// Bytes of a directory entry.
pub const DIR_BYTES: usize = 2;
/// Bytes of a key's length word.
pub const KLEN_BYTES: usize = 2;

const _: () = assert!(FIXED_BYTES <= CLASS_FIXED_MAX_BYTES);
// The smallest page holds a useful node; the largest page's offsets fit the u16 directory.
const _: () = assert!(area_bytes(PAGE_SIZE_MIN) >= 400);
const _: () = assert!(area_bytes(PAGE_SIZE_MAX) <= u16::MAX as usize);

/// The entry area of a node in a page of `page_size` bytes: the largest object the page
/// holds, less the class word, the fixed part and the variable part's count word.
pub const fn area_bytes(page_size: usize) -> usize {
    crate::limits::max_object_bytes(page_size) - OBJECT_HEADER_BYTES - FIXED_BYTES - 4
}

/// The class descriptor of map nodes.
pub fn desc() -> ClassDesc {
    // Words of the fixed part: count 0, level 1, next 2, slots from 3.
    let refs: Vec<u16> = std::iter::once(2).chain(3..3 + FANOUT as u16).collect();
    ClassDesc::new(NAME, FIXED_BYTES, &refs, VarKind::Bytes).expect("thor.MapNode is valid")
}

/// Bytes an entry takes in the area: its directory word, its key's length word, its key
/// and its value.
pub fn entry_bytes(key_len: usize, vbytes: usize) -> usize {
    DIR_BYTES + KLEN_BYTES + key_len + vbytes
}

/// Entry `i` of an area of `count` entries with values of `vbytes` bytes: the offset of its
/// key and the key's length (the value follows the key), checked to lie within the area.
pub fn entry(
    a: &[u8],
    count: usize,
    i: usize,
    vbytes: usize,
) -> Result<(usize, usize), FormatError> {
    let word = |at: usize| -> Result<usize, FormatError> {
        a.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or(FormatError::BadObject("a map entry lies outside its node"))
    };
    if i >= count || count * DIR_BYTES > a.len() {
        return Err(FormatError::BadObject("a map node's count exceeds its area"));
    }
    let at = word(i * DIR_BYTES)?;
    if at < count * DIR_BYTES {
        return Err(FormatError::BadObject("a map entry lies outside its node"));
    }
    let len = word(at)?;
    if len > KEY_BYTES_MAX || at + KLEN_BYTES + len + vbytes > a.len() {
        return Err(FormatError::BadObject("a map entry's key runs past its node"));
    }
    Ok((at + KLEN_BYTES, len))
}

/// The bytes the entries of area `a` use if they lie packed in key order right after the
/// directory (as [`encode_area`] writes them); `None` for any other layout.
pub fn packed_len(a: &[u8], count: usize, vbytes: usize) -> Result<Option<usize>, FormatError> {
    let mut end = count * DIR_BYTES;
    for i in 0..count {
        let (at, len) = entry(a, count, i, vbytes)?;
        if at != end + KLEN_BYTES {
            return Ok(None);
        }
        end = at + len + vbytes;
    }
    Ok(Some(end))
}

/// Writes the area of `entries` (key and value bytes, in key order) into `out`: the
/// directory, then the entries packed.
pub fn encode_area<'a>(
    entries: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    out: &mut Vec<u8>,
) {
    out.clear();
    let count = entries.clone().count();
    let mut at = count * DIR_BYTES;
    for (k, v) in entries.clone() {
        out.extend_from_slice(&(at as u16).to_le_bytes());
        at += KLEN_BYTES + k.len() + v.len();
    }
    for (k, v) in entries {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
}

/// The packed area `a` (of `count` entries using `used` bytes, [`packed_len`]) with an
/// entry of `entry` bytes (its key's length word, key and value) inserted at position `pos`.
pub fn splice_in(a: &[u8], count: usize, used: usize, pos: usize, entry: &[u8]) -> Vec<u8> {
    let dir = |i: usize| u16::from_le_bytes([a[2 * i], a[2 * i + 1]]) as usize;
    let at = if pos < count { dir(pos) } else { used };
    let mut out = Vec::with_capacity(used + DIR_BYTES + entry.len());
    for i in 0..=count {
        let start = match i.cmp(&pos) {
            std::cmp::Ordering::Less => dir(i) + DIR_BYTES,
            std::cmp::Ordering::Equal => at + DIR_BYTES,
            std::cmp::Ordering::Greater => dir(i - 1) + DIR_BYTES + entry.len(),
        };
        out.extend_from_slice(&(start as u16).to_le_bytes());
    }
    out.extend_from_slice(&a[count * DIR_BYTES..at]);
    out.extend_from_slice(entry);
    out.extend_from_slice(&a[at..used]);
    out
}

/// The packed area `a` (of `count` entries using `used` bytes) without entry `pos`, which
/// takes `len` bytes (its key's length word, key and value).
pub fn splice_out(a: &[u8], count: usize, used: usize, pos: usize, len: usize) -> Vec<u8> {
    let dir = |i: usize| u16::from_le_bytes([a[2 * i], a[2 * i + 1]]) as usize;
    let at = dir(pos);
    let mut out = Vec::with_capacity(used);
    for i in (0..count).filter(|&i| i != pos) {
        let start = if i < pos { dir(i) - DIR_BYTES } else { dir(i) - DIR_BYTES - len };
        out.extend_from_slice(&(start as u16).to_le_bytes());
    }
    out.extend_from_slice(&a[count * DIR_BYTES..at]);
    out.extend_from_slice(&a[at + len..used]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(es: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_area(es.iter().map(|(k, v)| (&k[..], &v[..])), &mut out);
        out
    }

    #[test]
    fn the_area_encoding_has_a_directory_then_entries() {
        let es = [(b"ab".to_vec(), vec![7]), (b"c".to_vec(), vec![7])];
        let a = enc(&es);
        assert_eq!(a, [4, 0, 9, 0, 2, 0, b'a', b'b', 7, 1, 0, b'c', 7]);
        assert_eq!(entry(&a, 2, 1, 1).unwrap(), (11, 1));
        assert_eq!(packed_len(&a, 2, 1).unwrap(), Some(13));
        assert_eq!(entry_bytes(2, 1) + entry_bytes(1, 1), 13);
    }

    /// Splicing an entry in or out of a packed area gives what encoding the entries does.
    #[test]
    fn splices_equal_a_fresh_encoding() {
        let all: Vec<(Vec<u8>, Vec<u8>)> = [&b"a"[..], b"bcd", b"", b"ef", b"ghij"]
            .iter()
            .map(|k| (k.to_vec(), vec![k.len() as u8, 9]))
            .collect();
        for pos in 0..all.len() {
            let mut without = all.clone();
            let (k, v) = without.remove(pos);
            let mut e = (k.len() as u16).to_le_bytes().to_vec();
            e.extend_from_slice(&k);
            e.extend_from_slice(&v);
            let a = enc(&without);
            let used = packed_len(&a, without.len(), 2).unwrap().unwrap();
            assert_eq!(splice_in(&a, without.len(), used, pos, &e), enc(&all), "in at {pos}");
            let a = enc(&all);
            let used = packed_len(&a, all.len(), 2).unwrap().unwrap();
            assert_eq!(splice_out(&a, all.len(), used, pos, e.len()), enc(&without), "out {pos}");
        }
    }

    /// Damaged areas are errors, never panics.
    #[test]
    fn a_damaged_area_is_an_error() {
        let a = enc(&[(b"ab".to_vec(), vec![]), (b"c".to_vec(), vec![])]);
        assert!(entry(&a, 2, 0, 100).is_err(), "a value past the area");
        assert!(entry(&a, 9, 0, 0).is_err(), "a directory past the area");
        assert!(entry(&a, 2, 2, 0).is_err(), "an entry past the count");
        let mut b = a.clone();
        b[0] = 0xff;
        assert!(entry(&b, 2, 0, 0).is_err(), "an offset past the area");
        b[0] = 0;
        assert!(entry(&b, 2, 0, 0).is_err(), "an offset into the directory");
        let mut c = a.clone();
        c[4] = 0xff;
        assert!(entry(&c, 2, 0, 0).is_err(), "a key length past the area");
        // Entries out of order are readable but not packed.
        let swapped = [a[2], a[3], a[0], a[1]].iter().chain(&a[4..]).copied().collect::<Vec<_>>();
        assert_eq!(packed_len(&swapped, 2, 0).unwrap(), None);
    }

    #[test]
    fn the_descriptor_matches_the_offsets() {
        let d = desc();
        assert_eq!(d.fixed_bytes(), FIXED_BYTES);
        assert_eq!(d.ref_slots().len(), FANOUT + 1);
        assert_eq!(d.count_offset(), SLOTS_AT + 4 * FANOUT);
        assert_eq!(d.object_bytes(area_bytes(8192)), crate::limits::max_object_bytes(8192));
    }
}
