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
//! With `fmt` = 2 a *schema section* follows the name: the name and type of each fixed field
//! and the element type of the variable part, so that tools and other languages' bindings can
//! show a field without the program's declaration ([`ClassDesc::fields`]):
//!
//! ```text
//! +---------+-------------------------------------------------+-------+
//! | nfields | per field: type (1 or 3 bytes), nlen (u8), name | velem |
//! +---------+-------------------------------------------------+-------+
//!  u16                                                          u8
//! ```
//!
//! The fields lie one after the other from the start of the fixed part (their offsets follow
//! from their sizes, [`FieldKind::size`]); they may describe only a prefix of it (an
//! extension's extra words are undescribed), but every reference slot lies in a field of a
//! reference type and every such field is a reference slot. A descriptor written before the
//! section existed (`fmt` = 1, as every thor before it wrote and as the built-in classes still
//! are) decodes with its fields unknown.
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
//! - where both descriptors name their fields, the same name and type for every field the two
//!   both describe ([`ClassDesc::mismatch`] says which differs). A descriptor without field
//!   names (an older database) is matched on its layout alone, as before.
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
use crate::limits::{
    CLASS_DESC_MAX_BYTES, CLASS_FIELD_NAME_MAX_BYTES, CLASS_FIXED_MAX_BYTES, CLASS_NAME_MAX_BYTES,
    OBJECT_HEADER_BYTES,
};
use crate::page::PageMut;

/// The class-descriptor format version written for a descriptor that names its fields (it has
/// the schema section).
pub const CLASS_FORMAT: u16 = 2;
/// The class-descriptor format version of a descriptor without field names: what every thor
/// wrote before the schema section, and what is still written for such descriptors (the
/// built-in classes), byte for byte.
pub const CLASS_FORMAT_NO_FIELDS: u16 = 1;

/// A number type of a fixed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `u32`: 4 bytes.
    U32,
    /// `i32`: 4 bytes.
    I32,
    /// `f32`: 4 bytes.
    F32,
    /// `u64`: 8 bytes.
    U64,
    /// `i64`: 8 bytes.
    I64,
    /// `f64`: 8 bytes.
    F64,
    /// `bool`: 4 bytes, 0 false.
    Bool,
}

impl Scalar {
    const ALL: [Scalar; 7] = [
        Scalar::U32,
        Scalar::I32,
        Scalar::F32,
        Scalar::U64,
        Scalar::I64,
        Scalar::F64,
        Scalar::Bool,
    ];

    /// Bytes the value occupies.
    pub const fn size(self) -> usize {
        match self {
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
            _ => 4,
        }
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> Option<Scalar> {
        Scalar::ALL.get((c as usize).checked_sub(1)?).copied()
    }

    fn rust_name(self) -> &'static str {
        match self {
            Scalar::U32 => "u32",
            Scalar::I32 => "i32",
            Scalar::F32 => "f32",
            Scalar::U64 => "u64",
            Scalar::I64 => "i64",
            Scalar::F64 => "f64",
            Scalar::Bool => "bool",
        }
    }
}

/// The type of a fixed field, as the schema section records it (thor-client's field types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// A number or `bool`.
    Scalar(Scalar),
    /// An optional number or `bool`: a tag word (0: none), then the value.
    Optional(Scalar),
    /// `[u8; N]`: N bytes, zero-padded to a multiple of 4.
    Bytes(u16),
    /// A reference to an object (null allowed only where the program allows it).
    Ref,
    /// An optional reference: null is none.
    OptionalRef,
    /// A string: a reference to an immutable `thor.Str` object.
    Str,
    /// An optional string: null is none.
    OptionalStr,
}

/// Type codes of the schema section (options of a scalar are `OPTIONAL | scalar code`).
mod code {
    pub(super) const BYTES: u8 = 8;
    pub(super) const REF: u8 = 9;
    pub(super) const OPTIONAL_REF: u8 = 10;
    pub(super) const STR: u8 = 11;
    pub(super) const OPTIONAL_STR: u8 = 12;
    pub(super) const OPTIONAL: u8 = 0x80;
}

impl FieldKind {
    /// Bytes the field occupies in the fixed part (a multiple of 4).
    pub const fn size(self) -> usize {
        match self {
            FieldKind::Scalar(s) => s.size(),
            FieldKind::Optional(s) => 4 + s.size(),
            FieldKind::Bytes(n) => pad4(n as usize),
            FieldKind::Ref | FieldKind::OptionalRef | FieldKind::Str | FieldKind::OptionalStr => 4,
        }
    }

    /// Whether the field is a reference word (a reference slot of the class).
    pub const fn is_ref(self) -> bool {
        matches!(
            self,
            FieldKind::Ref | FieldKind::OptionalRef | FieldKind::Str | FieldKind::OptionalStr
        )
    }

    fn encode(self, b: &mut Vec<u8>) {
        match self {
            FieldKind::Scalar(s) => b.push(s.code()),
            FieldKind::Optional(s) => b.push(code::OPTIONAL | s.code()),
            FieldKind::Bytes(n) => {
                b.push(code::BYTES);
                b.extend_from_slice(&n.to_le_bytes());
            }
            FieldKind::Ref => b.push(code::REF),
            FieldKind::OptionalRef => b.push(code::OPTIONAL_REF),
            FieldKind::Str => b.push(code::STR),
            FieldKind::OptionalStr => b.push(code::OPTIONAL_STR),
        }
    }

    /// Decodes a type at the start of `r`, advancing it.
    fn decode(r: &mut Reader<'_>) -> Result<FieldKind, FormatError> {
        let c = r.u8()?;
        Ok(match c {
            code::BYTES => FieldKind::Bytes(r.u16()?),
            code::REF => FieldKind::Ref,
            code::OPTIONAL_REF => FieldKind::OptionalRef,
            code::STR => FieldKind::Str,
            code::OPTIONAL_STR => FieldKind::OptionalStr,
            c if c & code::OPTIONAL != 0 => FieldKind::Optional(
                Scalar::from_code(c & !code::OPTIONAL)
                    .ok_or(FormatError::BadClass("unknown field type"))?,
            ),
            c => FieldKind::Scalar(
                Scalar::from_code(c).ok_or(FormatError::BadClass("unknown field type"))?,
            ),
        })
    }
}

/// Rust spelling, as in a `class!` declaration (`ref` and `str` for references and strings).
impl std::fmt::Display for FieldKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldKind::Scalar(s) => f.write_str(s.rust_name()),
            FieldKind::Optional(s) => write!(f, "Option<{}>", s.rust_name()),
            FieldKind::Bytes(n) => write!(f, "[u8; {n}]"),
            FieldKind::Ref => f.write_str("ref"),
            FieldKind::OptionalRef => f.write_str("Option<ref>"),
            FieldKind::Str => f.write_str("str"),
            FieldKind::OptionalStr => f.write_str("Option<str>"),
        }
    }
}

/// The element type of a variable part, as the schema section records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarElem {
    /// No variable part.
    None,
    /// Bytes.
    Byte,
    /// References to objects.
    Ref,
    /// Strings: references to `thor.Str` objects.
    Str,
}

impl VarElem {
    const ALL: [VarElem; 4] = [VarElem::None, VarElem::Byte, VarElem::Ref, VarElem::Str];

    /// Whether a variable part of kind `var` can hold these elements.
    pub fn fits(self, var: VarKind) -> bool {
        matches!(
            (self, var),
            (VarElem::None, VarKind::None)
                | (VarElem::Byte, VarKind::Bytes)
                | (VarElem::Ref | VarElem::Str, VarKind::Refs)
        )
    }

    /// The element type a variable part of kind `var` has when nothing more is known.
    pub fn of(var: VarKind) -> VarElem {
        match var {
            VarKind::None => VarElem::None,
            VarKind::Bytes => VarElem::Byte,
            VarKind::Refs => VarElem::Ref,
        }
    }
}

/// A fixed field as the schema section records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FieldDef {
    name: String,
    kind: FieldKind,
}

/// The schema section: what the fields are called and hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Schema {
    /// The fixed fields in order, from the start of the fixed part.
    fields: Vec<FieldDef>,
    /// The variable part's element type.
    var_elem: VarElem,
}

/// A bounds-checked reader of untrusted descriptor bytes.
struct Reader<'b> {
    b: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(FormatError::BadClass("schema section shorter than it says"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
}

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
    /// The fields' names and types, if the descriptor records them (`None`: written before
    /// the schema section, or made without names).
    schema: Option<Schema>,
}

const fn pad4(n: usize) -> usize {
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
            schema: None,
        })
    }

    /// This class with its fields named and typed: `fields` in order from the start of the
    /// fixed part, and the variable part's element type. The fields may cover a prefix of the
    /// fixed part only, but must hold exactly the class's reference slots (every reference
    /// field is a reference slot and every slot a reference field); names are 1 to
    /// [`CLASS_FIELD_NAME_MAX_BYTES`] bytes and distinct; the encoded descriptor must stay
    /// within [`CLASS_DESC_MAX_BYTES`].
    pub fn with_fields(
        mut self,
        fields: &[(&str, FieldKind)],
        var_elem: VarElem,
    ) -> Result<ClassDesc, FormatError> {
        if !var_elem.fits(self.var) {
            return Err(FormatError::BadClass("variable element type does not fit its kind"));
        }
        let mut off = 0usize;
        let mut refs = Vec::new();
        for (i, (name, kind)) in fields.iter().enumerate() {
            if name.is_empty() || name.len() > CLASS_FIELD_NAME_MAX_BYTES {
                return Err(FormatError::BadClass("field name empty or too long"));
            }
            if fields[..i].iter().any(|(n, _)| n == name) {
                return Err(FormatError::BadClass("two fields of one name"));
            }
            if kind.is_ref() {
                refs.push((off / 4) as u16);
            }
            off += kind.size();
            if off > self.fixed_bytes() {
                return Err(FormatError::BadClass("fields longer than the fixed part"));
            }
        }
        if refs != self.ref_slots {
            return Err(FormatError::BadClass("reference fields are not the reference slots"));
        }
        let fields = fields
            .iter()
            .map(|(name, kind)| FieldDef { name: (*name).to_owned(), kind: *kind })
            .collect();
        self.schema = Some(Schema { fields, var_elem });
        if self.encoded_len() > CLASS_DESC_MAX_BYTES {
            return Err(FormatError::BadClass("descriptor with its field names too long"));
        }
        Ok(self)
    }

    /// This class without field names: what a thor before the schema section stored.
    pub fn without_fields(&self) -> ClassDesc {
        ClassDesc { schema: None, ..self.clone() }
    }

    /// Whether the descriptor names and types its fields.
    pub fn has_fields(&self) -> bool {
        self.schema.is_some()
    }

    /// The fixed fields: `(name, type, byte offset within the object)`, in order. Empty for a
    /// descriptor without field names ([`ClassDesc::has_fields`]). The fields may describe
    /// only a prefix of the fixed part (an extension's extra words).
    pub fn fields(&self) -> impl Iterator<Item = (&str, FieldKind, usize)> + '_ {
        let fields = self.schema.as_ref().map_or(&[][..], |s| &s.fields[..]);
        fields.iter().scan(OBJECT_HEADER_BYTES, |off, f| {
            let at = *off;
            *off += f.kind.size();
            Some((f.name.as_str(), f.kind, at))
        })
    }

    /// The variable part's element type, if the descriptor records it.
    pub fn var_elem(&self) -> Option<VarElem> {
        self.schema.as_ref().map(|s| s.var_elem)
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
        self.mismatch(declared).is_none()
    }

    /// Why instances of this (stored) class cannot be read through `declared`'s layout, in
    /// words for an error message; `None` when this class [`ClassDesc::extends`] `declared`.
    pub fn mismatch(&self, declared: &ClassDesc) -> Option<String> {
        // The reference slots being equal and lying below `declared`'s fixed part (which
        // `ClassDesc::new` guarantees for `declared`) is what keeps the extra words inert.
        if self.name != declared.name {
            return Some(format!("stored as {:?}, declared as {:?}", self.name, declared.name));
        }
        if self.var != declared.var {
            return Some(format!(
                "stored variable part {:?}, declared {:?}",
                self.var, declared.var
            ));
        }
        if self.ref_slots != declared.ref_slots {
            return Some(format!(
                "stored reference slots {:?}, declared {:?}",
                self.ref_slots, declared.ref_slots
            ));
        }
        if self.fixed_bytes < declared.fixed_bytes {
            return Some(format!(
                "stored fixed part of {} bytes, declared {} bytes",
                self.fixed_bytes, declared.fixed_bytes
            ));
        }
        // Names and types where both descriptors have them. Both lists start at the fixed
        // part, so fields of one index are at one offset as long as the earlier ones agree.
        if let (Some(s), Some(d)) = (&self.schema, &declared.schema) {
            for ((sn, sk, at), (dn, dk, _)) in self.fields().zip(declared.fields()) {
                if sk != dk {
                    return Some(format!(
                        "the field at byte {at} is stored as {sn}: {sk}, declared {dn}: {dk}"
                    ));
                }
                if sn != dn {
                    return Some(format!(
                        "the field at byte {at} is stored as {sn}, declared {dn} (both {sk})"
                    ));
                }
            }
            if s.var_elem != d.var_elem {
                return Some(format!(
                    "stored variable elements {:?}, declared {:?}",
                    s.var_elem, d.var_elem
                ));
            }
        }
        None
    }

    /// This class with `extra_bytes` (a multiple of 4) of non-reference bytes appended to its
    /// fixed part: a class that [`ClassDesc::extends`] this one. Fails if the fixed part would
    /// pass [`CLASS_FIXED_MAX_BYTES`] or `extra_bytes` is not a multiple of 4.
    /// The field names, if any, are kept: they describe a prefix of the longer fixed part.
    pub fn extended_by(&self, extra_bytes: usize) -> Result<ClassDesc, FormatError> {
        let wider = ClassDesc::new(
            &self.name,
            self.fixed_bytes() + extra_bytes,
            &self.ref_slots,
            self.var,
        )?;
        Ok(ClassDesc { schema: self.schema.clone(), ..wider })
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

    /// Bytes of the encoded descriptor.
    fn encoded_len(&self) -> usize {
        let base = 8 + 2 * self.ref_slots.len() + self.name.len();
        base + self.schema.as_ref().map_or(0, |s| {
            let fields: usize = s
                .fields
                .iter()
                .map(|f| if matches!(f.kind, FieldKind::Bytes(_)) { 3 } else { 1 } + 1 + f.name.len())
                .sum();
            2 + fields + 1
        })
    }

    /// Encodes the descriptor as the payload of a class object: format 2 with the schema
    /// section if the fields are named, else format 1, byte for byte what older thors wrote.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 8 + 2 * self.ref_slots.len()];
        let fmt = if self.schema.is_some() { CLASS_FORMAT } else { CLASS_FORMAT_NO_FIELDS };
        put_u16(&mut b, 0, fmt);
        put_u16(&mut b, 2, self.fixed_bytes);
        b[4] = self.var.code();
        b[5] = self.name.len() as u8;
        put_u16(&mut b, 6, self.ref_slots.len() as u16);
        for (i, s) in self.ref_slots.iter().enumerate() {
            put_u16(&mut b, 8 + 2 * i, *s);
        }
        b.extend_from_slice(self.name.as_bytes());
        if let Some(s) = &self.schema {
            b.extend_from_slice(&(s.fields.len() as u16).to_le_bytes());
            for f in &s.fields {
                f.kind.encode(&mut b);
                b.push(f.name.len() as u8);
                b.extend_from_slice(f.name.as_bytes());
            }
            b.push(s.var_elem as u8);
        }
        debug_assert_eq!(b.len(), self.encoded_len());
        b
    }

    /// Decodes a class-object payload, checking everything: lengths within the payload, UTF-8
    /// names, and (through [`ClassDesc::new`] and [`ClassDesc::with_fields`]) every rule of a
    /// valid descriptor. Untrusted bytes: errors, never panics.
    pub fn decode(b: &[u8]) -> Result<ClassDesc, FormatError> {
        if b.len() < 8 {
            return Err(FormatError::BadClass("payload shorter than its header"));
        }
        if b.len() > CLASS_DESC_MAX_BYTES {
            return Err(FormatError::BadClass("payload longer than a descriptor can be"));
        }
        let fmt = u16_at(b, 0);
        if fmt != CLASS_FORMAT && fmt != CLASS_FORMAT_NO_FIELDS {
            return Err(FormatError::BadClass("unknown class format"));
        }
        let fixed = u16_at(b, 2) as usize;
        let var = VarKind::from_code(b[4]).ok_or(FormatError::BadClass("unknown variable kind"))?;
        let name_len = b[5] as usize;
        let nrefs = u16_at(b, 6) as usize;
        let head = 8 + 2 * nrefs + name_len;
        let fits = if fmt == CLASS_FORMAT { b.len() > head } else { b.len() == head };
        if !fits {
            return Err(FormatError::BadClass("payload length does not match its header"));
        }
        let slots: Vec<u16> = (0..nrefs).map(|i| u16_at(b, 8 + 2 * i)).collect();
        let name = std::str::from_utf8(&b[8 + 2 * nrefs..head])
            .map_err(|_| FormatError::BadClass("name is not UTF-8"))?;
        let desc = ClassDesc::new(name, fixed, &slots, var)?;
        if fmt == CLASS_FORMAT_NO_FIELDS {
            return Ok(desc);
        }
        let mut r = Reader { b, at: head };
        let n = r.u16()? as usize;
        // Every field takes at least 3 bytes: a bound before allocating.
        if n > (b.len() - head) / 3 {
            return Err(FormatError::BadClass("more fields than the payload holds"));
        }
        let mut fields = Vec::with_capacity(n);
        for _ in 0..n {
            let kind = FieldKind::decode(&mut r)?;
            let len = r.u8()? as usize;
            let fname = std::str::from_utf8(r.take(len)?)
                .map_err(|_| FormatError::BadClass("field name is not UTF-8"))?;
            fields.push((fname, kind));
        }
        let var_elem = *VarElem::ALL
            .get(r.u8()? as usize)
            .ok_or(FormatError::BadClass("unknown variable element type"))?;
        if r.at != b.len() {
            return Err(FormatError::BadClass("bytes after the schema section"));
        }
        desc.with_fields(&fields, var_elem)
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

    /// `id: u32, next: ref, weight: u64, tag: [u8; 6], score: Option<f32>` and references.
    fn named() -> ClassDesc {
        ClassDesc::new("N", 32, &[1], VarKind::Refs)
            .unwrap()
            .with_fields(
                &[
                    ("id", FieldKind::Scalar(Scalar::U32)),
                    ("next", FieldKind::Ref),
                    ("weight", FieldKind::Scalar(Scalar::U64)),
                    ("tag", FieldKind::Bytes(6)),
                    ("score", FieldKind::Optional(Scalar::F32)),
                ],
                VarElem::Ref,
            )
            .unwrap()
    }

    #[test]
    fn fields_are_named_typed_and_placed() {
        let c = named();
        let f: Vec<_> = c.fields().map(|(n, k, o)| (n.to_owned(), k.to_string(), o)).collect();
        let want = [
            ("id", "u32", 4),
            ("next", "ref", 8),
            ("weight", "u64", 12),
            ("tag", "[u8; 6]", 20),
            ("score", "Option<f32>", 28),
        ];
        assert_eq!(f.len(), want.len());
        for ((n, k, o), (wn, wk, wo)) in f.iter().zip(want) {
            assert_eq!((n.as_str(), k.as_str(), *o), (wn, wk, wo));
        }
        assert_eq!(c.var_elem(), Some(VarElem::Ref));
        let d = ClassDesc::decode(&c.encode()).unwrap();
        assert_eq!(d, c);
        assert_eq!(u16_at(&c.encode(), 0), CLASS_FORMAT);
    }

    #[test]
    fn a_descriptor_without_fields_is_written_as_before() {
        // Format 1, byte for byte: the header, the reference slots, the name.
        let c = ClassDesc::new("A", 12, &[0, 2], VarKind::Bytes).unwrap();
        let b = c.encode();
        assert_eq!(b, [&[1u8, 0, 12, 0, 1, 1, 2, 0, 0, 0, 2, 0][..], b"A"].concat());
        let d = ClassDesc::decode(&b).unwrap();
        assert!(!d.has_fields());
        assert_eq!(d.fields().count(), 0);
        assert_eq!(d.var_elem(), None);
        assert_eq!(named().without_fields().encode()[0], 1);
    }

    #[test]
    fn fields_that_contradict_the_layout_are_refused() {
        let base = || ClassDesc::new("A", 8, &[1], VarKind::Bytes).unwrap();
        let u32f = FieldKind::Scalar(Scalar::U32);
        let ok = [("a", u32f), ("b", FieldKind::Ref)];
        assert!(base().with_fields(&ok, VarElem::Byte).is_ok());
        // A prefix that leaves out a reference slot, a reference at a non-reference slot, a
        // field past the fixed part, a repeated or empty name, an element type of another kind.
        assert!(base().with_fields(&ok[..1], VarElem::Byte).is_err());
        assert!(base().with_fields(&[("a", FieldKind::Ref), ("b", u32f)], VarElem::Byte).is_err());
        assert!(
            base()
                .with_fields(&[("a", u32f), ("b", FieldKind::Str), ("c", u32f)], VarElem::Byte)
                .is_err()
        );
        assert!(base().with_fields(&[("a", u32f), ("a", FieldKind::Ref)], VarElem::Byte).is_err());
        assert!(base().with_fields(&[("", u32f), ("b", FieldKind::Ref)], VarElem::Byte).is_err());
        assert!(base().with_fields(&ok, VarElem::Ref).is_err());
        let long = "x".repeat(CLASS_FIELD_NAME_MAX_BYTES + 1);
        assert!(
            base().with_fields(&[(&long, u32f), ("b", FieldKind::Ref)], VarElem::Byte).is_err()
        );
        // A prefix without the reference slots is fine when there are none past it.
        let wide = ClassDesc::new("A", 16, &[1], VarKind::Bytes).unwrap();
        assert_eq!(wide.with_fields(&ok, VarElem::Byte).unwrap().fields().count(), 2);
    }

    #[test]
    fn a_field_of_another_type_or_name_is_not_an_extension() {
        let stored = named();
        assert!(stored.extends(&stored));
        // A declaration of the first three fields, by name, is extended by the stored class.
        let prefix = ClassDesc::new("N", 20, &[1], VarKind::Refs)
            .unwrap()
            .with_fields(
                &[
                    ("id", FieldKind::Scalar(Scalar::U32)),
                    ("next", FieldKind::Ref),
                    ("weight", FieldKind::Scalar(Scalar::U64)),
                ],
                VarElem::Ref,
            )
            .unwrap();
        assert!(stored.extends(&prefix));
        let with = |f: &[(&str, FieldKind)], e| {
            ClassDesc::new("N", 20, &[1], VarKind::Refs).unwrap().with_fields(f, e).unwrap()
        };
        let i64f = FieldKind::Scalar(Scalar::I64);
        let other_type = with(
            &[("id", FieldKind::Scalar(Scalar::U32)), ("next", FieldKind::Ref), ("weight", i64f)],
            VarElem::Ref,
        );
        let why = stored.mismatch(&other_type).unwrap();
        assert!(
            why.contains("byte 12") && why.contains("weight: u64") && why.contains("i64"),
            "{why}"
        );
        let other_name = with(
            &[
                ("id", FieldKind::Scalar(Scalar::U32)),
                ("next", FieldKind::Ref),
                ("mass", FieldKind::Scalar(Scalar::U64)),
            ],
            VarElem::Ref,
        );
        assert!(stored.mismatch(&other_name).unwrap().contains("mass"));
        let other_elem = with(
            &[
                ("id", FieldKind::Scalar(Scalar::U32)),
                ("next", FieldKind::Ref),
                ("weight", FieldKind::Scalar(Scalar::U64)),
            ],
            VarElem::Str,
        );
        assert!(!stored.extends(&other_elem));
        // Without names on either side the layout alone decides, as before.
        assert!(stored.without_fields().extends(&other_type));
        assert!(stored.extends(&other_type.without_fields()));
        // An extension keeps the names of the fields it extends.
        assert!(stored.extended_by(8).unwrap().extends(&stored));
        assert!(!stored.extended_by(8).unwrap().extends(&other_name.extended_by(8).unwrap()));
    }

    #[test]
    fn garbage_in_the_schema_section_is_refused() {
        let good = named().encode();
        let head = 8 + 2 + 1;
        // Every truncation, and a byte appended, is an error.
        for len in 0..good.len() {
            assert!(ClassDesc::decode(&good[..len]).is_err(), "{len}");
        }
        assert!(ClassDesc::decode(&[&good[..], &[0]].concat()).is_err());
        // A field count larger than the payload, a bad type, a name that is not UTF-8.
        let mut b = good.clone();
        put_u16(&mut b, head, u16::MAX);
        assert!(ClassDesc::decode(&b).is_err());
        let mut b = good.clone();
        b[head + 2] = 0x7f;
        assert!(ClassDesc::decode(&b).is_err());
        let mut b = good.clone();
        b[head + 2] = 0x88;
        assert!(ClassDesc::decode(&b).is_err());
        let mut b = good.clone();
        b[head + 4] = 0xff; // first byte of the name "id"
        assert!(ClassDesc::decode(&b).is_err());
        let mut b = good.clone();
        *b.last_mut().unwrap() = 9;
        assert!(ClassDesc::decode(&b).is_err());
        // Format 2 with no section at all.
        let mut b = ClassDesc::new("A", 4, &[], VarKind::None).unwrap().encode();
        put_u16(&mut b, 0, CLASS_FORMAT);
        assert!(ClassDesc::decode(&b).is_err());
    }

    fn any_kind() -> impl Strategy<Value = FieldKind> {
        let scalar = (0usize..7).prop_map(|i| Scalar::ALL[i]);
        prop_oneof![
            scalar.clone().prop_map(FieldKind::Scalar),
            scalar.prop_map(FieldKind::Optional),
            (0u16..40).prop_map(FieldKind::Bytes),
            Just(FieldKind::Ref),
            Just(FieldKind::OptionalRef),
            Just(FieldKind::Str),
            Just(FieldKind::OptionalStr),
        ]
    }

    proptest! {
        #[test]
        fn named_fields_roundtrip(
            kinds in proptest::collection::vec(any_kind(), 0..24),
            extra_words in 0usize..4,
            var in 0u8..3,
            str_elems in any::<bool>(),
            names in proptest::collection::vec("[a-z_][a-z0-9_é]{0,20}", 24),
        ) {
            let mut off = 0;
            let mut refs = vec![];
            for k in &kinds {
                if k.is_ref() {
                    refs.push((off / 4) as u16);
                }
                off += k.size();
            }
            let var = VarKind::from_code(var).unwrap();
            let elem = match VarElem::of(var) {
                VarElem::Ref if str_elems => VarElem::Str,
                e => e,
            };
            // `f{i}_` keeps the names distinct whatever `n` is (`{n}{i}` did not: "_1" + "1"
            // and "_" + "11").
            let names: Vec<String> =
                names.into_iter().enumerate().map(|(i, n)| format!("f{i}_{n}")).collect();
            let fields: Vec<(&str, FieldKind)> =
                kinds.iter().zip(&names).map(|(k, n)| (n.as_str(), *k)).collect();
            let c = ClassDesc::new("P.q", off + 4 * extra_words, &refs, var)
                .unwrap()
                .with_fields(&fields, elem)
                .unwrap();
            let d = ClassDesc::decode(&c.encode()).unwrap();
            prop_assert_eq!(&d, &c);
            prop_assert_eq!(ClassDesc::from_class_object(&c.to_class_object()).unwrap(), c.clone());
            let got: Vec<(&str, FieldKind)> = d.fields().map(|(n, k, _)| (n, k)).collect();
            prop_assert_eq!(got, fields);
            prop_assert!(d.extends(&c) && c.extended_by(4).unwrap().extends(&c));
        }

        #[test]
        fn decoding_a_damaged_schema_never_panics(
            at in 0usize..200,
            byte in any::<u8>(),
            cut in 0usize..200,
        ) {
            let mut b = named().encode();
            let at = at % b.len();
            b[at] = byte;
            b.truncate(b.len() - cut % b.len());
            if let Ok(d) = ClassDesc::decode(&b) {
                // Whatever decodes is a valid descriptor that encodes back to the same bytes.
                prop_assert_eq!(d.encode(), b);
            }
        }

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
