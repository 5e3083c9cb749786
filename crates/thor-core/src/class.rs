//! Classes: what the bytes of an object mean.
//!
//! Every object starts with a 32-bit header holding the oref of its class object. The class is
//! itself a persistent object (an instance of the built-in class [`builtin::META`]) whose
//! payload is a [`ClassDesc`]: the size of the fixed part, which of its 32-bit slots are
//! references, and whether a variable-length part of bytes or references follows. This is all
//! the server and the client cache need to find the references in an object (to swizzle,
//! validate, or trace them) without knowing the application's Rust types.
//!
//! # Object layout
//!
//! ```text
//! 0       4                      4+F      8+F
//! +-------+----------------------+--------+---------------------------+
//! | class | fixed part (F bytes) | count  | variable part             |
//! +-------+----------------------+--------+---------------------------+
//!                                 only if the class has a variable part:
//!                                 Bytes: `count` bytes, zero-padded to 4
//!                                 Refs:  `count` reference words
//! ```
//!
//! F is a multiple of 4; slot `i` of the fixed part is the word at byte `4 + 4 * i`.
//!
//! # Class descriptor encoding (the payload of a class object)
//!
//! ```text
//! 0      2       4    5     6       8                    8+2R
//! +------+-------+----+-----+-------+--------------------+------------+
//! | fmt  | F     | var| nlen| R     | R ref-slot indexes | name (utf8)|
//! +------+-------+----+-----+-------+--------------------+------------+
//!  u16    u16     u8   u8    u16     u16 each, increasing
//! ```
//!
//! # A stored class that extends a declared one
//!
//! A program declares its classes (thor-client's `class!`) and the database stores a
//! descriptor per class name. Usually the two are equal. The stored class *extends* the
//! declared one ([`ClassDesc::extends`]) when it has
//!
//! - the same name,
//! - the same kind of variable part,
//! - the same reference slots, and
//! - a fixed part at least as long, so that the bytes past the declared fixed part are words
//!   that are not references.
//!
//! ```text
//! declared:  | class | fields (F bytes) |                    | count | variable part |
//! stored:    | class | fields (F bytes) | extra (E bytes,    | count | variable part |
//!                                         never a reference) |
//! ```
//!
//! A program can then read and write instances through its declaration: every declared field
//! is at the same offset, every reference the object holds is one the program declared, and
//! the extra bytes are inert data it never reads (the variable part, if any, starts `E` bytes
//! later, which the program learns from the stored descriptor). Objects it creates get the
//! stored size ([`ClassDesc::extended_by`]), the extra bytes zero. OO7's HAC-BIG database pads
//! objects this way; an older program reading a class whose later version appended
//! non-reference fields is the same case.

use std::sync::LazyLock;

use crate::error::FormatError;
use crate::ids::{Oid, Oref, PageId, RawRef};
use crate::le::{put_u16, put_u32, u16_at, u32_at};
use crate::limits::{CLASS_FIXED_MAX_BYTES, CLASS_NAME_MAX_BYTES, OBJECT_HEADER_BYTES};
use crate::page::PageMut;

/// The class-descriptor format version.
pub const CLASS_FORMAT: u16 = 1;

/// What follows the fixed part of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarKind {
    /// Nothing: every instance has the same size.
    None,
    /// A counted run of bytes (strings, pieces of large objects).
    Bytes,
    /// A counted run of reference words (collections).
    Refs,
}

impl VarKind {
    fn code(self) -> u8 {
        match self {
            VarKind::None => 0,
            VarKind::Bytes => 1,
            VarKind::Refs => 2,
        }
    }

    fn from_code(c: u8) -> Option<VarKind> {
        match c {
            0 => Some(VarKind::None),
            1 => Some(VarKind::Bytes),
            2 => Some(VarKind::Refs),
            _ => None,
        }
    }
}

/// The layout of a class's instances.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClassDesc {
    /// The class name, for humans and for matching application types to stored classes.
    name: String,
    /// Bytes of the fixed part (a multiple of 4).
    fixed_bytes: u16,
    /// Indexes of the fixed slots that hold references, increasing.
    ref_slots: Vec<u16>,
    /// What follows the fixed part.
    var: VarKind,
}

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

impl ClassDesc {
    /// A class named `name` with `fixed_bytes` of fixed fields, of which the slots listed in
    /// `ref_slots` are references, and a variable part of kind `var`.
    pub fn new(
        name: &str,
        fixed_bytes: usize,
        ref_slots: &[u16],
        var: VarKind,
    ) -> Result<ClassDesc, FormatError> {
        if name.is_empty() || name.len() > CLASS_NAME_MAX_BYTES {
            return Err(FormatError::BadClass("name empty or too long"));
        }
        if !fixed_bytes.is_multiple_of(4) || fixed_bytes > CLASS_FIXED_MAX_BYTES {
            return Err(FormatError::BadClass("fixed part not a multiple of 4 or too large"));
        }
        let slots = fixed_bytes / 4;
        if ref_slots.windows(2).any(|w| w[0] >= w[1]) {
            return Err(FormatError::BadClass("reference slots not increasing"));
        }
        if ref_slots.last().is_some_and(|&s| s as usize >= slots) {
            return Err(FormatError::BadClass("reference slot outside the fixed part"));
        }
        Ok(ClassDesc {
            name: name.to_owned(),
            fixed_bytes: fixed_bytes as u16,
            ref_slots: ref_slots.to_vec(),
            var,
        })
    }

    /// The class name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of the fixed part.
    pub fn fixed_bytes(&self) -> usize {
        self.fixed_bytes as usize
    }

    /// The fixed slots that hold references.
    pub fn ref_slots(&self) -> &[u16] {
        &self.ref_slots
    }

    /// The kind of variable part.
    pub fn var(&self) -> VarKind {
        self.var
    }

    /// Whether instances of this (stored) class can be read and written through `declared`'s
    /// layout: the same name, variable part and reference slots, and a fixed part at least as
    /// long, whose bytes past `declared`'s are not references (see the module documentation).
    /// Equal descriptors extend each other.
    pub fn extends(&self, declared: &ClassDesc) -> bool {
        // The reference slots being equal and lying below `declared`'s fixed part (which
        // `ClassDesc::new` guarantees for `declared`) is what keeps the extra words inert.
        self.name == declared.name
            && self.var == declared.var
            && self.ref_slots == declared.ref_slots
            && self.fixed_bytes >= declared.fixed_bytes
    }

    /// This class with `extra_bytes` (a multiple of 4) of non-reference bytes appended to its
    /// fixed part: a class that [`ClassDesc::extends`] this one. Fails if the fixed part would
    /// pass [`CLASS_FIXED_MAX_BYTES`] or `extra_bytes` is not a multiple of 4.
    pub fn extended_by(&self, extra_bytes: usize) -> Result<ClassDesc, FormatError> {
        ClassDesc::new(&self.name, self.fixed_bytes() + extra_bytes, &self.ref_slots, self.var)
    }

    /// Byte offset, within an object, of the variable part's count word.
    pub fn count_offset(&self) -> usize {
        OBJECT_HEADER_BYTES + self.fixed_bytes()
    }

    /// Byte offset, within an object, of the first byte of the variable part.
    pub fn var_offset(&self) -> usize {
        self.count_offset() + 4
    }

    /// The size of an instance whose variable part has `count` elements (ignored without one).
    pub fn object_bytes(&self, count: usize) -> usize {
        let base = OBJECT_HEADER_BYTES + self.fixed_bytes();
        match self.var {
            VarKind::None => base,
            VarKind::Bytes => base + 4 + pad4(count),
            VarKind::Refs => base + 4 + 4 * count,
        }
    }

    /// A zeroed instance with `count` variable elements, its header set to `class_word` (the
    /// class's oref, or a tagged reference to a class created in the same transaction).
    pub fn new_object(&self, class_word: u32, count: usize) -> Vec<u8> {
        let mut obj = vec![0u8; self.object_bytes(count)];
        put_u32(&mut obj, 0, class_word);
        if self.var != VarKind::None {
            put_u32(&mut obj, self.count_offset(), count as u32);
        }
        obj
    }

    /// Checks that `obj` has the shape of an instance of this class and returns the count of its
    /// variable part (0 without one). The header word is not checked: its meaning depends on
    /// where the object is (stored, swizzled or in a commit).
    pub fn check_shape(&self, obj: &[u8]) -> Result<usize, &'static str> {
        if obj.len() < OBJECT_HEADER_BYTES + self.fixed_bytes() || !obj.len().is_multiple_of(4) {
            return Err("shorter than the fixed part or misaligned");
        }
        let count = match self.var {
            VarKind::None => 0,
            _ => {
                if obj.len() < self.var_offset() {
                    return Err("no room for the variable part's count");
                }
                u32_at(obj, self.count_offset()) as usize
            }
        };
        if obj.len() != self.object_bytes(count) {
            return Err("size does not match the class and count");
        }
        if self.var == VarKind::Bytes {
            // Padding bytes must be zero so that equal values have equal bytes.
            let end = self.var_offset() + count;
            if obj[end..].iter().any(|&b| b != 0) {
                return Err("padding of the byte part is not zero");
            }
        }
        Ok(count)
    }

    /// Calls `f` with the byte offset of every reference word of `obj`, fixed slots first, then
    /// the variable part. `obj` must have passed [`ClassDesc::check_shape`].
    pub fn for_each_ref_offset(&self, obj: &[u8], mut f: impl FnMut(usize)) {
        for &s in &self.ref_slots {
            f(OBJECT_HEADER_BYTES + 4 * s as usize);
        }
        if self.var == VarKind::Refs {
            let count = u32_at(obj, self.count_offset()) as usize;
            let start = self.var_offset();
            for i in 0..count {
                f(start + 4 * i);
            }
        }
    }

    /// The variable byte part of `obj` (empty for other kinds). `obj` must have passed
    /// [`ClassDesc::check_shape`].
    pub fn var_bytes<'o>(&self, obj: &'o [u8]) -> &'o [u8] {
        if self.var != VarKind::Bytes {
            return &[];
        }
        let count = u32_at(obj, self.count_offset()) as usize;
        &obj[self.var_offset()..self.var_offset() + count]
    }

    /// Encodes the descriptor as the payload of a class object.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 8 + 2 * self.ref_slots.len()];
        put_u16(&mut b, 0, CLASS_FORMAT);
        put_u16(&mut b, 2, self.fixed_bytes);
        b[4] = self.var.code();
        b[5] = self.name.len() as u8;
        put_u16(&mut b, 6, self.ref_slots.len() as u16);
        for (i, s) in self.ref_slots.iter().enumerate() {
            put_u16(&mut b, 8 + 2 * i, *s);
        }
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    /// Decodes a class-object payload, checking everything.
    pub fn decode(b: &[u8]) -> Result<ClassDesc, FormatError> {
        if b.len() < 8 {
            return Err(FormatError::BadClass("payload shorter than its header"));
        }
        if u16_at(b, 0) != CLASS_FORMAT {
            return Err(FormatError::BadClass("unknown class format"));
        }
        let fixed = u16_at(b, 2) as usize;
        let var = VarKind::from_code(b[4]).ok_or(FormatError::BadClass("unknown variable kind"))?;
        let name_len = b[5] as usize;
        let nrefs = u16_at(b, 6) as usize;
        if b.len() != 8 + 2 * nrefs + name_len {
            return Err(FormatError::BadClass("payload length does not match its header"));
        }
        let slots: Vec<u16> = (0..nrefs).map(|i| u16_at(b, 8 + 2 * i)).collect();
        let name = std::str::from_utf8(&b[8 + 2 * nrefs..])
            .map_err(|_| FormatError::BadClass("name is not UTF-8"))?;
        ClassDesc::new(name, fixed, &slots, var)
    }

    /// The bytes of the class object describing this class (an instance of [`builtin::META`]).
    pub fn to_class_object(&self) -> Vec<u8> {
        let payload = self.encode();
        let meta = builtin::meta_desc();
        let mut obj = meta.new_object(builtin::META.raw(), payload.len());
        let start = meta.var_offset();
        obj[start..start + payload.len()].copy_from_slice(&payload);
        obj
    }

    /// Reads a class object's bytes back into a descriptor. The header must name
    /// [`builtin::META`].
    pub fn from_class_object(obj: &[u8]) -> Result<ClassDesc, FormatError> {
        if obj.len() < OBJECT_HEADER_BYTES || u32_at(obj, 0) != builtin::META.raw() {
            return Err(FormatError::BadClass("not an instance of the metaclass"));
        }
        let meta = builtin::meta_desc();
        meta.check_shape(obj).map_err(FormatError::BadClass)?;
        ClassDesc::decode(meta.var_bytes(obj))
    }
}

/// Calls `check` with every reference word of `obj`, an object of class `desc` that has passed
/// [`ClassDesc::check_shape`], and stops at the first error. Used by servers to refuse objects
/// whose references name no object.
pub fn check_refs<E>(
    desc: &ClassDesc,
    obj: &[u8],
    mut check: impl FnMut(RawRef) -> Result<(), E>,
) -> Result<(), E> {
    let mut result = Ok(());
    desc.for_each_ref_offset(obj, |off| {
        if result.is_ok() {
            result = check(RawRef::decode(u32_at(obj, off)));
        }
    });
    result
}

/// The classes and objects every database starts with, at fixed orefs in page 1.
pub mod builtin {
    use super::*;

    const fn at(oid: u16) -> Oref {
        Oref::new(
            PageId::FIRST,
            match Oid::new(oid) {
                Some(o) => o,
                None => panic!("builtin oid out of range"),
            },
        )
    }

    /// The class of class objects (its own class too). Variable bytes: a class descriptor.
    pub const META: Oref = at(0);
    /// Plain bytes: strings and the leaves of large byte objects.
    pub const BYTES: Oref = at(1);
    /// A counted array of references: collections, the interior nodes of large objects.
    pub const REFS: Oref = at(2);
    /// A reference to an object at another server: fixed `(server id: u32, oref: u32)`.
    pub const SURROGATE: Oref = at(3);
    /// The root of a large object: fixed `(length: u64, leaf kind: u32, height: u32)`, then the
    /// references to its children. See [`crate::large`].
    pub const LARGE: Oref = at(4);
    /// The persistent root: an instance of [`REFS`] with [`ROOT_SLOTS`] reference slots, all
    /// null in a new database, that applications point at their own objects. (Objects keep
    /// their size for life, so the root is created with room.)
    pub const ROOT: Oref = at(5);
    /// Reference slots of the root object.
    pub const ROOT_SLOTS: usize = 16;

    static DESCS: LazyLock<[(Oref, ClassDesc); 5]> = LazyLock::new(|| {
        let c = |n, f, r: &[u16], v| ClassDesc::new(n, f, r, v).expect("valid builtin");
        [
            (META, c("thor.Class", 0, &[], VarKind::Bytes)),
            (BYTES, c("thor.Bytes", 0, &[], VarKind::Bytes)),
            (REFS, c("thor.Refs", 0, &[], VarKind::Refs)),
            (SURROGATE, c("thor.Surrogate", 8, &[], VarKind::None)),
            (LARGE, c("thor.Large", 16, &[], VarKind::Refs)),
        ]
    });

    /// The built-in classes with their orefs, in oid order.
    pub fn classes() -> &'static [(Oref, ClassDesc)] {
        &DESCS[..]
    }

    /// The descriptor of built-in class `class`, if it is one.
    pub fn desc(class: Oref) -> Option<&'static ClassDesc> {
        DESCS.iter().find(|(o, _)| *o == class).map(|(_, d)| d)
    }

    /// The metaclass descriptor.
    pub fn meta_desc() -> &'static ClassDesc {
        &DESCS[0].1
    }

    /// Whether `oref` names a built-in class or the root.
    pub fn is_builtin(oref: Oref) -> bool {
        oref.page() == Some(PageId::FIRST) && oref.oid().get() <= ROOT.oid().get()
    }

    /// Page 1 of a new database: the built-in class objects followed by the root.
    pub fn first_page(page_size: usize) -> Result<Vec<u8>, FormatError> {
        let mut bytes = vec![0u8; page_size];
        let mut page = PageMut::init(&mut bytes, PageId::FIRST)?;
        for (oref, desc) in classes() {
            let oid = page.append(&desc.to_class_object())?;
            debug_assert_eq!(oid, oref.oid());
        }
        let root = desc(REFS).expect("builtin").new_object(REFS.raw(), ROOT_SLOTS);
        let oid = page.append(&root)?;
        debug_assert_eq!(oid, ROOT.oid());
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::PageView;
    use proptest::prelude::*;

    #[test]
    fn sizes_follow_the_layout() {
        let c = ClassDesc::new("A", 12, &[0, 2], VarKind::Bytes).unwrap();
        assert_eq!(c.object_bytes(0), 4 + 12 + 4);
        assert_eq!(c.object_bytes(5), 4 + 12 + 4 + 8);
        let obj = c.new_object(99, 5);
        assert_eq!(c.check_shape(&obj), Ok(5));
        let mut offs = vec![];
        c.for_each_ref_offset(&obj, |o| offs.push(o));
        assert_eq!(offs, vec![4, 12]);
        let r = ClassDesc::new("R", 4, &[0], VarKind::Refs).unwrap();
        let obj = r.new_object(1, 3);
        let mut offs = vec![];
        r.for_each_ref_offset(&obj, |o| offs.push(o));
        assert_eq!(offs, vec![4, 12, 16, 20]);
    }

    #[test]
    fn bad_descriptors_are_refused() {
        assert!(ClassDesc::new("", 4, &[], VarKind::None).is_err());
        assert!(ClassDesc::new("A", 6, &[], VarKind::None).is_err());
        assert!(ClassDesc::new("A", 8, &[2], VarKind::None).is_err());
        assert!(ClassDesc::new("A", 8, &[1, 0], VarKind::None).is_err());
    }

    #[test]
    fn shape_checks_catch_wrong_sizes() {
        let c = ClassDesc::new("A", 8, &[], VarKind::Bytes).unwrap();
        let mut obj = c.new_object(1, 3);
        assert_eq!(c.check_shape(&obj), Ok(3));
        put_u32(&mut obj, c.count_offset(), 9);
        assert!(c.check_shape(&obj).is_err());
        put_u32(&mut obj, c.count_offset(), 3);
        obj[c.var_offset() + 3] = 1; // padding byte
        assert!(c.check_shape(&obj).is_err());
        assert!(c.check_shape(&obj[..8]).is_err());
    }

    #[test]
    fn first_page_holds_the_builtins() {
        let page = builtin::first_page(8192).unwrap();
        let v = PageView::parse(&page).unwrap();
        for (oref, desc) in builtin::classes() {
            let obj = v.object(oref.oid()).unwrap();
            assert_eq!(&ClassDesc::from_class_object(obj).unwrap(), desc);
        }
        let root = v.object(builtin::ROOT.oid()).unwrap();
        assert_eq!(u32_at(root, 0), builtin::REFS.raw());
        assert!(builtin::is_builtin(builtin::ROOT));
    }

    #[test]
    fn an_extension_keeps_names_references_and_variable_part() {
        let declared = ClassDesc::new("A", 12, &[0, 2], VarKind::Refs).unwrap();
        let stored = declared.extended_by(8).unwrap();
        assert_eq!(stored.fixed_bytes(), 20);
        assert!(stored.extends(&declared));
        assert!(declared.extends(&declared));
        // The narrower one does not extend the wider one.
        assert!(!declared.extends(&stored));
        // Another name, variable part, or set of reference slots is not an extension.
        let other = |n: &str, f, r: &[u16], v| ClassDesc::new(n, f, r, v).unwrap();
        assert!(!other("B", 20, &[0, 2], VarKind::Refs).extends(&declared));
        assert!(!other("A", 20, &[0, 2], VarKind::Bytes).extends(&declared));
        assert!(!other("A", 20, &[0, 2], VarKind::None).extends(&declared));
        assert!(!other("A", 20, &[0, 2, 3], VarKind::Refs).extends(&declared));
        assert!(!other("A", 20, &[0], VarKind::Refs).extends(&declared));
        assert!(!other("A", 20, &[0, 1], VarKind::Refs).extends(&declared));
        // The bounds of a descriptor hold for extensions too.
        assert!(declared.extended_by(2).is_err());
        assert!(declared.extended_by(CLASS_FIXED_MAX_BYTES).is_err());
    }

    #[test]
    fn an_extended_instance_has_the_declared_references_and_a_later_variable_part() {
        let declared = ClassDesc::new("A", 8, &[1], VarKind::Refs).unwrap();
        let stored = declared.extended_by(16).unwrap();
        let obj = stored.new_object(7, 2);
        assert_eq!(obj.len(), declared.object_bytes(2) + 16);
        assert_eq!(stored.check_shape(&obj), Ok(2));
        assert!(declared.check_shape(&obj).is_err(), "the declared layout alone misreads it");
        let mut offs = vec![];
        stored.for_each_ref_offset(&obj, |o| offs.push(o));
        assert_eq!(offs, vec![8, stored.var_offset(), stored.var_offset() + 4]);
        assert_eq!(stored.var_offset(), declared.var_offset() + 16);
    }

    proptest! {
        #[test]
        fn extensions_are_exactly_the_longer_fixed_parts(
            slots in 0usize..32,
            refs in proptest::collection::btree_set(0u16..32, 0..8),
            var in 0u8..3,
            extra_words in 0usize..32,
            other_slots in 0usize..64,
            other_refs in proptest::collection::btree_set(0u16..64, 0..8),
            other_var in 0u8..3,
        ) {
            let refs: Vec<u16> = refs.into_iter().filter(|&r| (r as usize) < slots).collect();
            let var = VarKind::from_code(var).unwrap();
            let declared = ClassDesc::new("P", slots * 4, &refs, var).unwrap();
            let stored = declared.extended_by(4 * extra_words).unwrap();
            prop_assert!(stored.extends(&declared));
            // Every instance of the extension passes its shape check, and its fixed
            // references are the declared ones.
            let obj = stored.new_object(1, 3);
            prop_assert!(stored.check_shape(&obj).is_ok());
            let mut fixed = vec![];
            stored.for_each_ref_offset(&obj, |o| if o < stored.count_offset() { fixed.push(o) });
            let want: Vec<usize> = refs.iter().map(|&s| 4 + 4 * s as usize).collect();
            prop_assert_eq!(fixed, want);
            // Any other descriptor extends `declared` exactly when the rule says so.
            let other_refs: Vec<u16> =
                other_refs.into_iter().filter(|&r| (r as usize) < other_slots).collect();
            let other_var = VarKind::from_code(other_var).unwrap();
            let other = ClassDesc::new("P", other_slots * 4, &other_refs, other_var).unwrap();
            let rule = other_var == var && other_refs == refs && other_slots >= slots;
            prop_assert_eq!(other.extends(&declared), rule);
        }

        #[test]
        fn encode_decode_roundtrip(
            name in "[a-zA-Z][a-zA-Z0-9_.]{0,40}",
            slots in 0usize..64,
            refs in proptest::collection::btree_set(0u16..64, 0..10),
            var in 0u8..3,
        ) {
            let refs: Vec<u16> = refs.into_iter().filter(|&r| (r as usize) < slots).collect();
            let c = ClassDesc::new(&name, slots * 4, &refs, VarKind::from_code(var).unwrap()).unwrap();
            prop_assert_eq!(ClassDesc::decode(&c.encode()).unwrap(), c.clone());
            prop_assert_eq!(ClassDesc::from_class_object(&c.to_class_object()).unwrap(), c);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = ClassDesc::decode(&bytes);
            let _ = ClassDesc::from_class_object(&bytes);
        }
    }
}
