//! The byte format: one LMDB value per OO7 object, keyed by a compact id, with the object's
//! lists and strings inline.
//!
//! # Keys
//!
//! Four bytes, big-endian, so that LMDB's default byte-wise comparison orders them by class
//! and then by index:
//!
//! ```text
//!  31    28 27                                   0
//! +--------+--------------------------------------+
//! |  tag   |  index within the class (0-based)    |
//! +--------+--------------------------------------+
//! ```
//!
//! The index is the object's place in [`thor_oo7::native::NativeDb`]'s vector of its class,
//! which is its creation order in thor-oo7's plan: atomic part `i` has OO7 id `i + 1`, and a
//! composite part's atomic parts and connections have consecutive indexes. Every class is one
//! run of keys, so a composite part's graph is two runs of adjacent leaf entries (its parts,
//! then its connections) and T1 reads them in order.
//!
//! # Values
//!
//! Every integer is a little-endian `u32` (the seed a `u64`); "none" is `u32::MAX`. A *list* is
//! a count then that many `u32` indexes; a *short string* a `u8` length then the bytes; a
//! *text* a `u32` length then the bytes. Fields in order:
//!
//! ```text
//! meta       magic "OO7LMDB\0" | version | params (10 x u32, seed u64) | 7 class counts
//! module     id | build date | design root | type | manual title | all bases (list) | manual text
//! complex    id | build date | super (or none) | module | type | sub-assemblies (list)
//! base       id | build date | super | module | type | private parts (list) | shared (list)
//! composite  id | build date | document | root part | type | parts | used in private | shared
//! document   id | composite part | title (short) | text
//! atomic     id | build date | x | y | doc id | part of | type | to (list) | from (list)
//! connection length | from | to | type
//! ```
//!
//! The fixed fields come first, so T2b's update of `x` and `y` writes bytes 8 to 15 of an
//! atomic part's value (`ATOMIC_X_AT`, `ATOMIC_Y_AT`). Lists hold indexes of the class they
//! name (a `to` list holds connection indexes, a connection's `to` an atomic-part index).
//!
//! Decoding checks every length against the value's and refuses trailing bytes: a malformed
//! value is a [`FormatError`], never a panic or a read past the value.

use thor_oo7::native::{NAtomic, NBase, NComplex, NComposite, NConn, NDocument, NModule};
use thor_oo7::{DocPlacement, Params};

use crate::limits::{INDEX_BITS, INDEX_MAX, LIST_LEN_MAX, SHORT_STRING_MAX, TEXT_BYTES_MAX};

/// The version of this format, in the meta value; a database of another version is refused.
pub const FORMAT_VERSION: u32 = 1;

/// The first bytes of the meta value.
pub const MAGIC: [u8; 8] = *b"OO7LMDB\0";

/// "No object" in a reference field (a design root's parent).
pub const NONE: u32 = u32::MAX;

/// Where an atomic part's `x` is in its value.
pub const ATOMIC_X_AT: usize = 8;
/// Where an atomic part's `y` is in its value.
pub const ATOMIC_Y_AT: usize = 12;

/// The class of an object, the top four bits of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Tag {
    /// The one meta value (index 0): format version and the generator's parameters.
    Meta = 0,
    /// Modules.
    Module = 1,
    /// Complex assemblies.
    Complex = 2,
    /// Base assemblies.
    Base = 3,
    /// Composite parts.
    Composite = 4,
    /// Atomic parts.
    Atomic = 5,
    /// Connections.
    Connection = 6,
    /// Documents.
    Document = 7,
}

impl Tag {
    /// Every class, in key order.
    pub const ALL: [Tag; 8] = [
        Tag::Meta,
        Tag::Module,
        Tag::Complex,
        Tag::Base,
        Tag::Composite,
        Tag::Atomic,
        Tag::Connection,
        Tag::Document,
    ];

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Tag::Meta => "meta",
            Tag::Module => "module",
            Tag::Complex => "complex assembly",
            Tag::Base => "base assembly",
            Tag::Composite => "composite part",
            Tag::Atomic => "atomic part",
            Tag::Connection => "connection",
            Tag::Document => "document",
        }
    }
}

/// The key of object `index` of class `tag`. The caller keeps `index <= INDEX_MAX` (the loader
/// checks every class's count; indexes read from values are checked by [`checked_key`]).
#[inline]
pub fn key(tag: Tag, index: u32) -> [u8; 4] {
    debug_assert!(index <= INDEX_MAX);
    ((u32::from(tag as u8) << INDEX_BITS) | index).to_be_bytes()
}

/// The key of object `index` of class `tag`, or an error if the index cannot be a key.
#[inline]
pub fn checked_key(tag: Tag, index: u32) -> Result<[u8; 4], FormatError> {
    if index > INDEX_MAX {
        return Err(FormatError::BadIndex { tag, index });
    }
    Ok(key(tag, index))
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The value ends before a field it must hold.
    #[error("{tag:?} value truncated: {need} bytes needed at offset {at}, {len} in the value")]
    Truncated {
        /// The class.
        tag: Tag,
        /// Where the field starts.
        at: usize,
        /// Bytes the field needs.
        need: usize,
        /// The value's length.
        len: usize,
    },
    /// The value has bytes after its last field.
    #[error("{tag:?} value has {extra} bytes after its last field")]
    Trailing {
        /// The class.
        tag: Tag,
        /// How many.
        extra: usize,
    },
    /// A list or string is longer than any this format writes.
    #[error("{tag:?} value holds a list or string of {len} entries, above the bound {max}")]
    TooLong {
        /// The class.
        tag: Tag,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A reference names an index no key can hold.
    #[error("reference to {tag:?} index {index}, above the largest index a key holds")]
    BadIndex {
        /// The class referred to.
        tag: Tag,
        /// The index.
        index: u32,
    },
    /// The meta value is not this format's.
    #[error("not an OO7-over-LMDB database: {0}")]
    NotOurs(String),
}

// ----- writing -----

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_short(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() <= SHORT_STRING_MAX, "short strings are thor-oo7's 10- and 40-byte fields");
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

fn put_list(out: &mut Vec<u8>, xs: &[u32]) {
    assert!(xs.len() <= LIST_LEN_MAX, "thor-oo7's bounds keep lists below LIST_LEN_MAX");
    put_u32(out, xs.len() as u32);
    for &x in xs {
        put_u32(out, x);
    }
}

fn put_text(out: &mut Vec<u8>, t: &[u8]) {
    assert!(t.len() <= TEXT_BYTES_MAX, "thor-oo7 bounds texts by TEXT_BYTES_MAX");
    put_u32(out, t.len() as u32);
    out.extend_from_slice(t);
}

/// How many objects of each class a database holds (in the meta value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Counts {
    /// Modules.
    pub modules: u32,
    /// Complex assemblies.
    pub complex: u32,
    /// Base assemblies.
    pub base: u32,
    /// Composite parts.
    pub composites: u32,
    /// Documents.
    pub documents: u32,
    /// Atomic parts.
    pub atomic: u32,
    /// Connections.
    pub conns: u32,
}

impl Counts {
    /// Objects in all (the meta value not counted).
    pub fn total(&self) -> u64 {
        [
            self.modules,
            self.complex,
            self.base,
            self.composites,
            self.documents,
            self.atomic,
            self.conns,
        ]
        .iter()
        .map(|&c| u64::from(c))
        .sum()
    }
}

/// The meta value: the format's version, the generator's parameters and the class counts.
pub fn encode_meta(params: &Params, counts: &Counts, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    put_u32(out, FORMAT_VERSION);
    for v in [
        params.atomic_per_composite,
        params.connections_per_atomic,
        params.document_bytes,
        params.manual_bytes,
        params.composite_per_module,
        params.assemblies_per_assembly,
        params.assembly_levels,
        params.composite_per_base,
        params.modules,
        params.doc_placement.code(),
    ] {
        put_u32(out, v);
    }
    out.extend_from_slice(&params.seed.to_le_bytes());
    for v in [
        counts.modules,
        counts.complex,
        counts.base,
        counts.composites,
        counts.documents,
        counts.atomic,
        counts.conns,
    ] {
        put_u32(out, v);
    }
}

/// A module's value.
pub fn encode_module(m: &NModule, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, m.id);
    put_u32(out, m.build_date);
    put_u32(out, m.design_root);
    put_short(out, &m.kind);
    put_short(out, &m.man_title);
    put_list(out, &m.all_bases);
    put_text(out, &m.man_text);
}

/// A complex assembly's value.
pub fn encode_complex(c: &NComplex, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, c.id);
    put_u32(out, c.build_date);
    put_u32(out, c.super_assembly.unwrap_or(NONE));
    put_u32(out, c.module);
    put_short(out, &c.kind);
    put_list(out, &c.sub_assemblies);
}

/// A base assembly's value.
pub fn encode_base(b: &NBase, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, b.id);
    put_u32(out, b.build_date);
    put_u32(out, b.super_assembly);
    put_u32(out, b.module);
    put_short(out, &b.kind);
    put_list(out, &b.components_priv);
    put_list(out, &b.components_shar);
}

/// A composite part's value.
pub fn encode_composite(c: &NComposite, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, c.id);
    put_u32(out, c.build_date);
    put_u32(out, c.documentation);
    put_u32(out, c.root_part);
    put_short(out, &c.kind);
    put_list(out, &c.parts);
    put_list(out, &c.used_in_priv);
    put_list(out, &c.used_in_shar);
}

/// A document's value.
pub fn encode_document(d: &NDocument, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, d.id);
    put_u32(out, d.part);
    put_short(out, &d.title);
    put_text(out, &d.text);
}

/// An atomic part's value.
pub fn encode_atomic(a: &NAtomic, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, a.id);
    put_u32(out, a.build_date);
    put_u32(out, a.x);
    put_u32(out, a.y);
    put_u32(out, a.doc_id);
    put_u32(out, a.part_of);
    put_short(out, &a.kind);
    put_list(out, &a.to);
    put_list(out, &a.from);
}

/// A connection's value.
pub fn encode_conn(c: &NConn, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, c.length);
    put_u32(out, c.from);
    put_u32(out, c.to);
    put_short(out, &c.kind);
}

// ----- reading -----

/// A checked reader over one value.
struct Cursor<'a> {
    tag: Tag,
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn new(tag: Tag, b: &'a [u8]) -> Self {
        Cursor { tag, b, at: 0 }
    }

    #[inline]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(
            FormatError::Truncated { tag: self.tag, at: self.at, need: n, len: self.b.len() },
        )?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    #[inline]
    fn u32(&mut self) -> Result<u32, FormatError> {
        let s = self.bytes(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    #[inline]
    fn short(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.bytes(1)?[0] as usize;
        self.bytes(n)
    }

    #[inline]
    fn list(&mut self) -> Result<List<'a>, FormatError> {
        let n = self.u32()? as usize;
        if n > LIST_LEN_MAX {
            return Err(FormatError::TooLong { tag: self.tag, len: n, max: LIST_LEN_MAX });
        }
        Ok(List(self.bytes(n * 4)?))
    }

    fn text(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u32()? as usize;
        if n > TEXT_BYTES_MAX {
            return Err(FormatError::TooLong { tag: self.tag, len: n, max: TEXT_BYTES_MAX });
        }
        self.bytes(n)
    }

    #[inline]
    fn end(self) -> Result<(), FormatError> {
        match self.b.len() - self.at {
            0 => Ok(()),
            extra => Err(FormatError::Trailing { tag: self.tag, extra }),
        }
    }
}

/// An inline list of `u32` indexes, read in place.
#[derive(Debug, Clone, Copy)]
pub struct List<'a>(&'a [u8]);

impl<'a> List<'a> {
    /// Entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len() / 4
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries in order.
    #[inline]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u32> + ExactSizeIterator + 'a {
        self.0.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The entries as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }
}

/// The meta value, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The generator's parameters.
    pub params: Params,
    /// Objects of each class.
    pub counts: Counts,
}

/// Decodes the meta value.
pub fn decode_meta(b: &[u8]) -> Result<Meta, FormatError> {
    let mut c = Cursor::new(Tag::Meta, b);
    if c.bytes(MAGIC.len())? != MAGIC {
        return Err(FormatError::NotOurs("bad magic".into()));
    }
    let version = c.u32()?;
    if version != FORMAT_VERSION {
        return Err(FormatError::NotOurs(format!(
            "format version {version} (this program reads {FORMAT_VERSION}): load it again"
        )));
    }
    let mut v = [0u32; 10];
    for x in &mut v {
        *x = c.u32()?;
    }
    let seed = u64::from(c.u32()?) | (u64::from(c.u32()?) << 32);
    let params = Params {
        atomic_per_composite: v[0],
        connections_per_atomic: v[1],
        document_bytes: v[2],
        manual_bytes: v[3],
        composite_per_module: v[4],
        assemblies_per_assembly: v[5],
        assembly_levels: v[6],
        composite_per_base: v[7],
        modules: v[8],
        doc_placement: DocPlacement::from_code(v[9])
            .ok_or_else(|| FormatError::NotOurs(format!("document placement code {}", v[9])))?,
        seed,
    };
    params.validate().map_err(|e| FormatError::NotOurs(e.to_string()))?;
    let counts = Counts {
        modules: c.u32()?,
        complex: c.u32()?,
        base: c.u32()?,
        composites: c.u32()?,
        documents: c.u32()?,
        atomic: c.u32()?,
        conns: c.u32()?,
    };
    c.end()?;
    Ok(Meta { params, counts })
}

/// A module, read in place.
#[derive(Debug, Clone, Copy)]
pub struct ModuleRef<'a> {
    /// Id.
    pub id: u32,
    /// Build date.
    pub build_date: u32,
    /// The design root's complex-assembly index.
    pub design_root: u32,
    /// Type.
    pub kind: &'a [u8],
    /// The manual's title.
    pub man_title: &'a [u8],
    /// Base-assembly indexes.
    pub all_bases: List<'a>,
    /// The manual's text.
    pub man_text: &'a [u8],
}

impl<'a> ModuleRef<'a> {
    /// Decodes a module's value.
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Module, b);
        let r = ModuleRef {
            id: c.u32()?,
            build_date: c.u32()?,
            design_root: c.u32()?,
            kind: c.short()?,
            man_title: c.short()?,
            all_bases: c.list()?,
            man_text: c.text()?,
        };
        c.end()?;
        Ok(r)
    }
}

/// A complex assembly, read in place.
#[derive(Debug, Clone, Copy)]
pub struct ComplexRef<'a> {
    /// Id.
    pub id: u32,
    /// Build date.
    pub build_date: u32,
    /// Parent (complex-assembly index), `NONE` for a design root.
    pub super_assembly: u32,
    /// Module index.
    pub module: u32,
    /// Type.
    pub kind: &'a [u8],
    /// Children: complex-assembly indexes, or base-assembly indexes one level above the leaves.
    pub subs: List<'a>,
}

impl<'a> ComplexRef<'a> {
    /// Decodes a complex assembly's value.
    #[inline]
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Complex, b);
        let r = ComplexRef {
            id: c.u32()?,
            build_date: c.u32()?,
            super_assembly: c.u32()?,
            module: c.u32()?,
            kind: c.short()?,
            subs: c.list()?,
        };
        c.end()?;
        Ok(r)
    }
}

/// A base assembly, read in place.
#[derive(Debug, Clone, Copy)]
pub struct BaseRef<'a> {
    /// Id.
    pub id: u32,
    /// Build date.
    pub build_date: u32,
    /// Parent (complex-assembly index).
    pub super_assembly: u32,
    /// Module index.
    pub module: u32,
    /// Type.
    pub kind: &'a [u8],
    /// Private composite-part indexes.
    pub privs: List<'a>,
    /// Shared composite-part indexes.
    pub shars: List<'a>,
}

impl<'a> BaseRef<'a> {
    /// Decodes a base assembly's value.
    #[inline]
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Base, b);
        let r = BaseRef {
            id: c.u32()?,
            build_date: c.u32()?,
            super_assembly: c.u32()?,
            module: c.u32()?,
            kind: c.short()?,
            privs: c.list()?,
            shars: c.list()?,
        };
        c.end()?;
        Ok(r)
    }
}

/// A composite part, read in place.
#[derive(Debug, Clone, Copy)]
pub struct CompositeRef<'a> {
    /// Id.
    pub id: u32,
    /// Build date.
    pub build_date: u32,
    /// Document index.
    pub documentation: u32,
    /// Root atomic-part index.
    pub root_part: u32,
    /// Type.
    pub kind: &'a [u8],
    /// Atomic-part indexes.
    pub parts: List<'a>,
    /// Base assemblies using it privately.
    pub used_in_priv: List<'a>,
    /// Base assemblies using it shared.
    pub used_in_shar: List<'a>,
}

impl<'a> CompositeRef<'a> {
    /// Decodes a composite part's value.
    #[inline]
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Composite, b);
        let r = CompositeRef {
            id: c.u32()?,
            build_date: c.u32()?,
            documentation: c.u32()?,
            root_part: c.u32()?,
            kind: c.short()?,
            parts: c.list()?,
            used_in_priv: c.list()?,
            used_in_shar: c.list()?,
        };
        c.end()?;
        Ok(r)
    }
}

/// A document, read in place.
#[derive(Debug, Clone, Copy)]
pub struct DocumentRef<'a> {
    /// Id.
    pub id: u32,
    /// Composite-part index.
    pub part: u32,
    /// Title.
    pub title: &'a [u8],
    /// Text.
    pub text: &'a [u8],
}

impl<'a> DocumentRef<'a> {
    /// Decodes a document's value.
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Document, b);
        let r = DocumentRef { id: c.u32()?, part: c.u32()?, title: c.short()?, text: c.text()? };
        c.end()?;
        Ok(r)
    }
}

/// An atomic part, read in place.
#[derive(Debug, Clone, Copy)]
pub struct AtomicRef<'a> {
    /// Id (OO7's, 1-based: index + 1).
    pub id: u32,
    /// Build date.
    pub build_date: u32,
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// Document id.
    pub doc_id: u32,
    /// Composite-part index.
    pub part_of: u32,
    /// Type.
    pub kind: &'a [u8],
    /// Outgoing connection indexes.
    pub to: List<'a>,
    /// Incoming connection indexes.
    pub from: List<'a>,
}

impl<'a> AtomicRef<'a> {
    /// Decodes an atomic part's value.
    #[inline]
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Atomic, b);
        let r = AtomicRef {
            id: c.u32()?,
            build_date: c.u32()?,
            x: c.u32()?,
            y: c.u32()?,
            doc_id: c.u32()?,
            part_of: c.u32()?,
            kind: c.short()?,
            to: c.list()?,
            from: c.list()?,
        };
        c.end()?;
        Ok(r)
    }
}

/// A connection, read in place.
#[derive(Debug, Clone, Copy)]
pub struct ConnRef<'a> {
    /// Length.
    pub length: u32,
    /// Source atomic-part index.
    pub from: u32,
    /// Target atomic-part index.
    pub to: u32,
    /// Type.
    pub kind: &'a [u8],
}

impl<'a> ConnRef<'a> {
    /// Decodes a connection's value.
    #[inline]
    pub fn parse(b: &'a [u8]) -> Result<Self, FormatError> {
        let mut c = Cursor::new(Tag::Connection, b);
        let r = ConnRef { length: c.u32()?, from: c.u32()?, to: c.u32()?, kind: c.short()? };
        c.end()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic() -> NAtomic {
        NAtomic {
            id: 7,
            kind: Box::new(*b"type003\0\0\0"),
            build_date: 1500,
            x: 10,
            y: 20,
            doc_id: 1,
            to: vec![18, 19, 20],
            from: vec![3],
            part_of: 0,
        }
    }

    #[test]
    fn keys_order_by_class_then_index() {
        assert!(key(Tag::Atomic, INDEX_MAX) < key(Tag::Connection, 0));
        assert!(key(Tag::Atomic, 255) < key(Tag::Atomic, 256));
        assert_eq!(key(Tag::Meta, 0), [0, 0, 0, 0]);
        assert!(checked_key(Tag::Atomic, INDEX_MAX + 1).is_err());
    }

    #[test]
    fn an_atomic_part_round_trips_with_x_and_y_where_t2b_writes_them() {
        let mut b = Vec::new();
        encode_atomic(&atomic(), &mut b);
        let a = AtomicRef::parse(&b).unwrap();
        assert_eq!((a.id, a.x, a.y, a.kind), (7, 10, 20, &b"type003\0\0\0"[..]));
        assert_eq!(a.to.to_vec(), vec![18, 19, 20]);
        assert_eq!(a.from.to_vec(), vec![3]);
        assert_eq!(b[ATOMIC_X_AT..ATOMIC_X_AT + 4], 10u32.to_le_bytes());
        assert_eq!(b[ATOMIC_Y_AT..ATOMIC_Y_AT + 4], 20u32.to_le_bytes());
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        let mut b = Vec::new();
        encode_atomic(&atomic(), &mut b);
        for n in 0..b.len() {
            assert!(AtomicRef::parse(&b[..n]).is_err(), "truncated to {n}");
        }
        b.push(0);
        assert!(matches!(AtomicRef::parse(&b), Err(FormatError::Trailing { extra: 1, .. })));
        // A list count far beyond the value.
        let mut c = Vec::new();
        encode_conn(&NConn { kind: Box::new([1; 10]), length: 1, from: 2, to: 3 }, &mut c);
        assert_eq!(ConnRef::parse(&c).unwrap().to, 3);
        let mut bad = b.clone();
        bad[35..39].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(AtomicRef::parse(&bad).is_err());
    }

    #[test]
    fn meta_round_trips_and_refuses_another_version() {
        let p = Params::medium();
        let counts = Counts { modules: 1, atomic: 100_000, conns: 300_000, ..Counts::default() };
        let mut b = Vec::new();
        encode_meta(&p, &counts, &mut b);
        assert_eq!(decode_meta(&b).unwrap(), Meta { params: p, counts });
        b[8] ^= 0xff;
        assert!(matches!(decode_meta(&b), Err(FormatError::NotOurs(_))));
    }
}
