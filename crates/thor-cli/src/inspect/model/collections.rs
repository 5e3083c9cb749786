//! The built-in collections, decoded from their nodes: `thor.Seq` (a header and a tree of
//! chunks, `thor_client::values`) and `thor.Map` (a header and a B+-tree of `thor.MapNode`s,
//! `thor_client::map` and `thor_core::mapnode`). See the parent module, "Maps and
//! sequences", for what each listing reads.

use serde_json::{Value, json};
use thor_client::map::MapHeader;
use thor_client::values::{SeqHeader, SeqLayout};
use thor_client::{Any, Elem, MapKey, MapValue, Ref};
use thor_core::mapnode::{self, COUNT_AT, LEVEL_AT, NEXT_AT, SLOTS_AT};
use thor_core::{Oref, builtin};

use super::{EntryOut, Inspector, MAP_CLASS, MapOut, Obj, SEQ_CLASS, SeqOut, hex};
use crate::inspect::error::InspectError;
use crate::inspect::limits::MAP_DESCENT_MAX;
use crate::inspect::source::ObjectSource;

// ------------------------------------------------------------------------------------------
// Sequences.

/// The element types of a sequence, by their `Elem::CODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemType {
    U8,
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
    Bool,
    Ref,
}

impl ElemType {
    const ALL: [ElemType; 9] = [
        ElemType::U8,
        ElemType::U32,
        ElemType::I32,
        ElemType::F32,
        ElemType::U64,
        ElemType::I64,
        ElemType::F64,
        ElemType::Bool,
        ElemType::Ref,
    ];

    fn code(self) -> u32 {
        match self {
            ElemType::U8 => <u8 as Elem>::CODE,
            ElemType::U32 => <u32 as Elem>::CODE,
            ElemType::I32 => <i32 as Elem>::CODE,
            ElemType::F32 => <f32 as Elem>::CODE,
            ElemType::U64 => <u64 as Elem>::CODE,
            ElemType::I64 => <i64 as Elem>::CODE,
            ElemType::F64 => <f64 as Elem>::CODE,
            ElemType::Bool => <bool as Elem>::CODE,
            ElemType::Ref => <Ref<Any> as Elem>::CODE,
        }
    }

    fn size(self) -> usize {
        match self {
            ElemType::U8 => <u8 as Elem>::SIZE,
            ElemType::U32 => <u32 as Elem>::SIZE,
            ElemType::I32 => <i32 as Elem>::SIZE,
            ElemType::F32 => <f32 as Elem>::SIZE,
            ElemType::U64 => <u64 as Elem>::SIZE,
            ElemType::I64 => <i64 as Elem>::SIZE,
            ElemType::F64 => <f64 as Elem>::SIZE,
            ElemType::Bool => <bool as Elem>::SIZE,
            ElemType::Ref => <Ref<Any> as Elem>::SIZE,
        }
    }

    /// The Rust spelling.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::U8 => "u8",
            ElemType::U32 => "u32",
            ElemType::I32 => "i32",
            ElemType::F32 => "f32",
            ElemType::U64 => "u64",
            ElemType::I64 => "i64",
            ElemType::F64 => "f64",
            ElemType::Bool => "bool",
            ElemType::Ref => "Ref",
        }
    }

    /// Element `b` (exactly `size` bytes of a byte chunk) as a value.
    fn value(self, b: &[u8]) -> Value {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let v = u64::from_le_bytes(w);
        match self {
            ElemType::U8 | ElemType::U32 | ElemType::U64 => json!(v),
            ElemType::I32 => json!(v as u32 as i32),
            ElemType::I64 => json!(v as i64),
            ElemType::F32 => json!(f32::from_bits(v as u32)),
            ElemType::F64 => json!(f64::from_bits(v)),
            ElemType::Bool => json!(v != 0),
            ElemType::Ref => unreachable!("references are read from reference chunks"),
        }
    }
}

/// A sequence's header, decoded.
pub(super) struct SeqInfo {
    /// Elements.
    pub(super) len: usize,
    /// Their type.
    pub(super) elem: ElemType,
    /// How they are stored.
    layout: SeqLayout,
    /// The tree's height for `len` elements (1: one chunk).
    height: u32,
    /// The root chunk or directory (null while empty).
    root: Option<Oref>,
}

impl<S: ObjectSource> Inspector<S> {
    /// The header `obj` (a `thor.Seq`) decoded, checked against this database's page size.
    pub(super) fn seq_info(&mut self, obj: &Obj) -> Result<SeqInfo, InspectError> {
        if obj.class_name() != SEQ_CLASS || obj.desc.fixed_bytes() < 12 {
            return Err(InspectError::NotASeq {
                oref: obj.oref,
                class: obj.class_name().to_string(),
            });
        }
        let len = obj.word(SeqHeader::len.offset()) as usize;
        let word = obj.word(SeqHeader::elem.offset());
        let root = obj.ref_at(SeqHeader::storage.offset())?;
        let elem = ElemType::ALL
            .into_iter()
            .find(|e| e.code() == word & 0xff)
            .ok_or_else(|| obj.malformed(format!("unknown element code {}", word & 0xff)))?;
        let layout = SeqLayout::from_word(word, elem.size(), self.pages.page_size())
            .map_err(|why| obj.malformed(why))?;
        let height = layout.height(len);
        if height > thor_client::limits::SEQ_HEIGHT_MAX {
            return Err(obj.malformed(format!("a sequence of length {len} is too tall")));
        }
        Ok(SeqInfo { len, elem, layout, height, root })
    }

    /// The chunk holding element `i` (`< len`) of the sequence `seq` (whose header is
    /// `head`), `i`'s place in it, and how many elements from there on the chunk holds.
    pub(super) fn seq_chunk(
        &mut self,
        head: Oref,
        seq: &SeqInfo,
        i: usize,
    ) -> Result<(Obj, usize, usize), InspectError> {
        debug_assert!(i < seq.len);
        let malformed = |why: String| InspectError::Malformed { oref: head, why };
        let mut r = seq.root.ok_or_else(|| malformed("no storage for its elements".into()))?;
        let mut idx = i;
        for level in (2..=seq.height).rev() {
            let below = seq.layout.cap(level - 1);
            let dir = self.object(r)?;
            if dir.class != builtin::REFS {
                return Err(malformed(format!("its directory {r} is a {}", dir.class_name())));
            }
            let k = idx / below;
            idx %= below;
            if k >= dir.var_count() {
                return Err(malformed(format!("its directory {r} is short")));
            }
            r = dir.var_ref(k)?.ok_or_else(|| malformed(format!("directory {r} has a hole")))?;
        }
        let chunk = self.object(r)?;
        let want = if seq.elem == ElemType::Ref { builtin::REFS } else { builtin::BYTES };
        if chunk.class != want {
            return Err(malformed(format!("its chunk {r} is a {}", chunk.class_name())));
        }
        let in_chunk = (seq.len - i).min(seq.layout.cap(1) - idx);
        let capacity =
            chunk.var_count() / if seq.elem == ElemType::Ref { 1 } else { seq.elem.size() };
        if capacity < idx + in_chunk {
            return Err(malformed(format!(
                "its chunk {r} holds {capacity} elements, not {}",
                idx + in_chunk
            )));
        }
        Ok((chunk, idx, in_chunk))
    }

    /// Elements `from..from + limit` of the sequence `oref`.
    pub fn seq(&mut self, oref: Oref, from: usize, limit: usize) -> Result<SeqOut, InspectError> {
        let head = self.object(oref)?;
        let seq = self.seq_info(&head)?;
        let end = seq.len.min(from.saturating_add(limit));
        let mut entries = Vec::with_capacity(end.saturating_sub(from));
        let mut i = from;
        while i < end {
            let (chunk, at, avail) = self.seq_chunk(oref, &seq, i)?;
            let n = avail.min(end - i);
            for k in 0..n {
                let v = match seq.elem {
                    ElemType::Ref => {
                        chunk.var_ref(at + k)?.map_or(Value::Null, |r| Value::String(r.to_string()))
                    }
                    e => {
                        let start = chunk.desc.var_offset() + (at + k) * e.size();
                        e.value(&chunk.bytes[start..start + e.size()])
                    }
                };
                entries.push((i + k, v));
            }
            i += n;
        }
        Ok(SeqOut {
            seq: oref.to_string(),
            elem_type: seq.elem.name(),
            len: seq.len,
            from,
            entries,
            more: end < seq.len,
        })
    }
}

// ------------------------------------------------------------------------------------------
// Maps.

/// The key types of a map, by their `MapKey::CODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    U64,
    I64,
    Str,
    Bytes,
}

impl KeyType {
    fn from_code(c: u32) -> Option<KeyType> {
        [KeyType::U64, KeyType::I64, KeyType::Str, KeyType::Bytes]
            .into_iter()
            .find(|k| k.code() == c)
    }

    fn code(self) -> u32 {
        match self {
            KeyType::U64 => <u64 as MapKey>::CODE,
            KeyType::I64 => <i64 as MapKey>::CODE,
            KeyType::Str => <String as MapKey>::CODE,
            KeyType::Bytes => <Vec<u8> as MapKey>::CODE,
        }
    }

    /// The Rust spelling.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::U64 => "u64",
            KeyType::I64 => "i64",
            KeyType::Str => "String",
            KeyType::Bytes => "Vec<u8>",
        }
    }

    /// The order-preserving encoding of the key `text` (bytes keys: `0x` and hex, or the
    /// text's UTF-8), thor-client's `KeyEncode`.
    pub fn encode(self, text: &str) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        match self {
            KeyType::U64 => thor_client::KeyEncode::encode_key(
                &text.parse::<u64>().map_err(|e| e.to_string())?,
                &mut out,
            ),
            KeyType::I64 => thor_client::KeyEncode::encode_key(
                &text.parse::<i64>().map_err(|e| e.to_string())?,
                &mut out,
            ),
            KeyType::Str => out.extend_from_slice(text.as_bytes()),
            KeyType::Bytes => match text.strip_prefix("0x") {
                Some(h) => out = unhex(h).ok_or("not hex after 0x")?,
                None => out.extend_from_slice(text.as_bytes()),
            },
        }
        Ok(out)
    }

    /// A stored key as a value: numbers, a string, or hex.
    fn decode(self, b: &[u8]) -> Result<Value, String> {
        Ok(match self {
            KeyType::U64 => json!(u64::decode_key(b).map_err(|e| e.to_string())?),
            KeyType::I64 => json!(i64::decode_key(b).map_err(|e| e.to_string())?),
            KeyType::Str => json!(String::decode_key(b).map_err(|e| e.to_string())?),
            KeyType::Bytes => json!(format!("0x{}", hex(b))),
        })
    }
}

/// The value types of a map, by their `MapValue::CODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValType {
    /// A number or `bool` in the leaf's bytes.
    Scalar(ElemType),
    /// `[u8; N]`.
    Bytes(usize),
    /// `Option` of a number or `bool`: a tag byte then the value.
    Optional(ElemType),
    /// `Ref<T>` in a reference slot.
    Ref,
    /// `Option<Ref<T>>` in a reference slot.
    OptionalRef,
}

/// The map's number value types and their spellings as sequence elements (the same bytes).
const MAP_SCALARS: [(u32, ElemType); 7] = [
    (<u32 as MapValue>::CODE, ElemType::U32),
    (<i32 as MapValue>::CODE, ElemType::I32),
    (<f32 as MapValue>::CODE, ElemType::F32),
    (<u64 as MapValue>::CODE, ElemType::U64),
    (<i64 as MapValue>::CODE, ElemType::I64),
    (<f64 as MapValue>::CODE, ElemType::F64),
    (<bool as MapValue>::CODE, ElemType::Bool),
];

impl ValType {
    fn from_code(c: u32) -> Option<ValType> {
        let array = <[u8; 0] as MapValue>::CODE;
        let option = <Option<u32> as MapValue>::CODE - <u32 as MapValue>::CODE;
        let scalar = |c: u32| MAP_SCALARS.iter().find(|(k, _)| *k == c).map(|(_, e)| *e);
        if c == <Ref<Any> as MapValue>::CODE {
            Some(ValType::Ref)
        } else if c == <Option<Ref<Any>> as MapValue>::CODE {
            Some(ValType::OptionalRef)
        } else if let Some(e) = scalar(c) {
            Some(ValType::Scalar(e))
        } else if (array..=array + thor_client::map::MAP_VALUE_BYTES_MAX as u32).contains(&c) {
            Some(ValType::Bytes((c - array) as usize))
        } else {
            c.checked_sub(option).and_then(scalar).map(ValType::Optional)
        }
    }

    /// Bytes of a value in a leaf (0 for references: they are in the slots).
    fn bytes(self) -> usize {
        match self {
            ValType::Scalar(ElemType::Bool) => 1,
            ValType::Scalar(e) => e.size(),
            ValType::Bytes(n) => n,
            ValType::Optional(e) => 1 + ValType::Scalar(e).bytes(),
            ValType::Ref | ValType::OptionalRef => 0,
        }
    }

    /// The Rust spelling.
    pub fn name(self) -> String {
        match self {
            ValType::Scalar(e) => e.name().into(),
            ValType::Bytes(n) => format!("[u8; {n}]"),
            ValType::Optional(e) => format!("Option<{}>", e.name()),
            ValType::Ref => "Ref".into(),
            ValType::OptionalRef => "Option<Ref>".into(),
        }
    }

    /// A value of a leaf's bytes (`bytes()` long).
    fn value(self, b: &[u8]) -> Value {
        match self {
            ValType::Scalar(e) => e.value(b),
            ValType::Bytes(_) => json!(hex(b)),
            ValType::Optional(e) if b[0] != 0 => e.value(&b[1..]),
            ValType::Optional(_) => Value::Null,
            ValType::Ref | ValType::OptionalRef => unreachable!("references are in the slots"),
        }
    }
}

/// A map header, decoded.
pub(super) struct MapInfo {
    /// The root node.
    root: Oref,
    /// The key type.
    pub(super) key: KeyType,
    /// The value type.
    pub(super) value: ValType,
}

/// A map node's fixed words.
pub(super) struct Node {
    /// Entries.
    pub(super) count: usize,
    /// 0 for a leaf.
    pub(super) level: u32,
}

/// The fixed words of `obj`, a `thor.MapNode`.
pub(super) fn node(obj: &Obj) -> Result<Node, InspectError> {
    if obj.class_name() != mapnode::NAME || obj.desc.fixed_bytes() != mapnode::FIXED_BYTES {
        return Err(obj.malformed(format!("a {} where a map node should be", obj.class_name())));
    }
    let count = obj.word(COUNT_AT) as usize;
    let level = obj.word(LEVEL_AT);
    if level > mapnode::HEIGHT_MAX {
        return Err(obj.malformed(format!("a map node of level {level}")));
    }
    Ok(Node { count, level })
}

impl<S: ObjectSource> Inspector<S> {
    /// The header `obj` (a `thor.Map`) decoded.
    pub(super) fn map_info(&mut self, obj: &Obj) -> Result<MapInfo, InspectError> {
        if obj.class_name() != MAP_CLASS || obj.desc.fixed_bytes() < 12 {
            return Err(InspectError::NotAMap {
                oref: obj.oref,
                class: obj.class_name().to_string(),
            });
        }
        let root = obj
            .ref_at(MapHeader::root.offset())?
            .ok_or_else(|| obj.malformed("a map without a root node"))?;
        let kc = obj.word(MapHeader::key.offset());
        let vc = obj.word(MapHeader::value.offset());
        let key = KeyType::from_code(kc).ok_or_else(|| obj.malformed(format!("key code {kc}")))?;
        let value =
            ValType::from_code(vc).ok_or_else(|| obj.malformed(format!("value code {vc}")))?;
        Ok(MapInfo { root, key, value })
    }

    /// Entry `i` of node `obj` (`count` entries of `vbytes`-byte values): key bytes and value
    /// bytes.
    fn entry(
        obj: &Obj,
        count: usize,
        i: usize,
        vbytes: usize,
    ) -> Result<(&[u8], &[u8]), InspectError> {
        let area = obj.desc.var_bytes(&obj.bytes);
        let (at, len) = mapnode::entry(area, count, i, vbytes)
            .map_err(|e| obj.malformed(format!("entry {i}: {e}")))?;
        Ok((&area[at..at + len], &area[at + len..at + len + vbytes]))
    }

    /// The leaf of map `oref` (root node `root`) that holds `key`'s place, and its node header.
    fn leaf_for(
        &mut self,
        oref: Oref,
        root: Oref,
        key: &[u8],
    ) -> Result<(Obj, Node), InspectError> {
        let malformed = |why: String| InspectError::Malformed { oref, why };
        let mut at = root;
        let mut leaf = self.object(at)?;
        let mut n = node(&leaf)?;
        let mut steps = 0;
        while n.level > 0 {
            steps += 1;
            if steps > MAP_DESCENT_MAX || n.count == 0 || n.count > mapnode::FANOUT {
                return Err(malformed(format!("a malformed path at node {at}")));
            }
            let mut child = 0;
            for i in 1..n.count {
                if Self::entry(&leaf, n.count, i, 0)?.0 <= key {
                    child = i;
                } else {
                    break;
                }
            }
            at = leaf
                .ref_at(SLOTS_AT + 4 * child)?
                .ok_or_else(|| malformed(format!("node {at} has a null child")))?;
            let below = self.object(at)?;
            let nb = node(&below)?;
            if nb.level + 1 != n.level {
                return Err(malformed(format!(
                    "node {at} is at level {}, not {}",
                    nb.level,
                    n.level - 1
                )));
            }
            (leaf, n) = (below, nb);
        }
        Ok((leaf, n))
    }

    /// Up to `limit` entries of the map `oref` in key order, from the first key at or after
    /// `from` (the first key without one), and the key after the last one listed.
    pub fn map(
        &mut self,
        oref: Oref,
        from: Option<&str>,
        limit: usize,
    ) -> Result<MapOut, InspectError> {
        let head = self.object(oref)?;
        let info = self.map_info(&head)?;
        let from_key = match from {
            Some(text) => info.key.encode(text).map_err(|why| InspectError::BadKey {
                given: text.to_string(),
                key_type: info.key.name().to_string(),
                why,
            })?,
            None => Vec::new(),
        };
        let vbytes = info.value.bytes();
        let malformed = |why: String| InspectError::Malformed { oref, why };
        let (mut leaf, mut n) = self.leaf_for(oref, info.root, &from_key)?;

        // Along the leaves.
        let mut pos = 0;
        while pos < n.count && Self::entry(&leaf, n.count, pos, vbytes)?.0 < &from_key[..] {
            pos += 1;
        }
        let mut entries = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        let mut empty_leaves = 0;
        let next = loop {
            if pos >= n.count {
                let Some(nx) = leaf.ref_at(NEXT_AT)? else { break None };
                let l = self.object(nx)?;
                let ln = node(&l)?;
                if ln.level != 0 {
                    return Err(malformed(format!(
                        "the leaf chain reaches node {nx} of level {}",
                        ln.level
                    )));
                }
                empty_leaves = if ln.count == 0 { empty_leaves + 1 } else { 0 };
                if empty_leaves > MAP_DESCENT_MAX {
                    return Err(malformed("the leaf chain loops through empty leaves".into()));
                }
                (leaf, n, pos) = (l, ln, 0);
                continue;
            }
            if info.value.bytes() == 0 && n.count > mapnode::FANOUT {
                return Err(malformed(format!("a leaf of {} references", n.count)));
            }
            let (k, v) = Self::entry(&leaf, n.count, pos, vbytes)?;
            if last.as_deref().is_some_and(|l| l >= k) {
                return Err(malformed("keys do not rise along the leaf chain".into()));
            }
            let key = info.key.decode(k).map_err(|why| malformed(format!("a key: {why}")))?;
            if entries.len() == limit {
                break Some(key);
            }
            let (value, target) = match info.value {
                ValType::Ref | ValType::OptionalRef => match leaf.ref_at(SLOTS_AT + 4 * pos)? {
                    Some(r) => (json!(r.to_string()), Some(self.about(r))),
                    None => (Value::Null, None),
                },
                t => (t.value(v), None),
            };
            last = Some(k.to_vec());
            entries.push(EntryOut { key, value, target });
            pos += 1;
        };
        Ok(MapOut {
            map: oref.to_string(),
            key_type: info.key.name().to_string(),
            value_type: info.value.name(),
            entries,
            next,
        })
    }
}

/// Bytes from hex text; `None` if it is not.
pub(super) fn unhex(h: &str) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are read from thor-client's traits: every value type a `Map` can have decodes.
    #[test]
    fn map_value_codes_decode() {
        let cases: [(u32, &str, usize); 8] = [
            (<u64 as MapValue>::CODE, "u64", 8),
            (<bool as MapValue>::CODE, "bool", 1),
            (<[u8; 16] as MapValue>::CODE, "[u8; 16]", 16),
            (<Option<u32> as MapValue>::CODE, "Option<u32>", 5),
            (<Option<f64> as MapValue>::CODE, "Option<f64>", 9),
            (<Ref<Any> as MapValue>::CODE, "Ref", 0),
            (<Option<Ref<Any>> as MapValue>::CODE, "Option<Ref>", 0),
            (<i32 as MapValue>::CODE, "i32", 4),
        ];
        for (code, name, bytes) in cases {
            let v = ValType::from_code(code).unwrap_or_else(|| panic!("{name}"));
            assert_eq!((v.name().as_str(), v.bytes()), (name, bytes));
        }
        assert_eq!(ValType::from_code(0xdead), None);
        let v = ValType::from_code(<Option<u32> as MapValue>::CODE).unwrap();
        assert_eq!(v.value(&[1, 7, 0, 0, 0]), json!(7));
        assert_eq!(v.value(&[0, 0, 0, 0, 0]), Value::Null);
    }

    #[test]
    fn keys_encode_in_order_and_decode_back() {
        let k = KeyType::I64;
        let (a, b) = (k.encode("-5").unwrap(), k.encode("3").unwrap());
        assert!(a < b);
        assert_eq!(k.decode(&a).unwrap(), json!(-5));
        assert_eq!(KeyType::Bytes.encode("0x00ff").unwrap(), [0, 255]);
        assert_eq!(KeyType::Bytes.decode(&[0, 255]).unwrap(), json!("0x00ff"));
        assert!(KeyType::U64.encode("-1").is_err());
        assert!(KeyType::Bytes.encode("0xabc").is_err());
    }
}
