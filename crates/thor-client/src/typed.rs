//! The typed object API: classes declared once in Rust, references, and field access straight
//! from the cached bytes.
//!
//! An application declares each persistent class with [`crate::class!`]:
//!
//! ```
//! thor_client::class! {
//!     /// A person.
//!     pub class Person("demo.Person") {
//!         age: u32,
//!         friend: thor_client::Ref<Person>,
//!         initials: [u8; 4],
//!     }
//!     var bytes;
//! }
//! ```
//!
//! This declares a marker type `Person` implementing [`Class`], whose layout (and so its stored
//! class descriptor) follows from the field list, and one constant per field: `Person::age` is a
//! [`Field<Person, u32>`]. A [`Ref<Person>`] names a stored object; [`crate::Session::get`]
//! turns it into a [`View<Person>`] that reads fields with `view.get(Person::age)` directly
//! from the object's bytes in the cache, and writes them with `view.set(Person::age, 31)`
//! through the transaction.
//!
//! # Field types
//!
//! | Rust type | stored as |
//! |-----------|-----------|
//! | `u32`, `i32`, `f32` | 4 bytes |
//! | `u64`, `i64`, `f64` | 8 bytes (4-aligned, as two words) |
//! | `[u8; N]` | N bytes, padded to a multiple of 4 |
//! | `Ref<T>` | a 4-byte reference (swizzled in the cache) |
//! | `bool` | 4 bytes: 0 false, anything else true |
//! | `Option<T>` for the numbers and `bool` | a tag word (0: `None`), then the value |
//! | `Option<Ref<T>>` | a reference; null is `None` |
//! | `Ref<Str>` | a string: a reference to an immutable `thor.Str` object ([`crate::Str`]) |
//!
//! After the fields an object may have a variable part: `var bytes;` (a byte string) or
//! `var refs<T>;` (an array of references to `T`).
//!
//! # Which stored class a declaration reads
//!
//! The first use of a class in a session looks its name up in the database's schema directory.
//! If no class of that name is stored, the declaration's layout is stored (in the current
//! transaction). If one is, the session accepts it when it is
//!
//! - **equal** to the declaration's layout, or
//! - an **extension** of it (`thor_core::ClassDesc::extends`): the same name, the same kind of
//!   variable part, the same reference slots, and a fixed part at least as long. The stored
//!   fields past the declared ones are then words that are not references.
//!
//! An extension's instances are read and written through the narrower declaration: the
//! declared fields are at their declared offsets, the extra bytes are never read and survive
//! every write (a view writes fields, not objects), and the variable part is found after the
//! stored fixed part. [`crate::Session::create`] makes objects at the stored size, the extra
//! bytes zero, as the cache and the server require of an instance of the stored class.
//! [`crate::Session::stored_class`] says what is stored.
//!
//! The stored descriptor also records each field's name and type (`ClassDesc::fields`), as
//! `class!` declares them: a session storing a class stores them. Where the stored class has
//! them, every field both describe must have the same name and type (a stored `weight: u64`
//! declared `weight: i64` is a mismatch, the message saying which field); a class stored by a
//! thor before field names were recorded is matched on its layout alone.
//!
//! Everything else is refused with [`crate::ClientError::SchemaMismatch`] at the first `get`
//! or `create`: a stored fixed part shorter than the declaration's, another variable part, a
//! reference slot the declaration does not have (even among the extra bytes) or one it has
//! that the stored class does not. The rule accepts exactly what a program can use without
//! knowing of it, bytes it never reads; a reference the program does not declare would be
//! one it can neither follow nor keep right in the objects it creates, which is a schema
//! change (`thor::Upgrade`). Two cases use the rule: OO7's padded database (`thor oo7 load
//! --pad-to-gom`, the HAC paper's HAC-BIG), whose classes carry filler words a program does
//! not declare, and an older program reading a database whose classes later appended
//! fields that are not references.

use std::marker::PhantomData;

use std::any::TypeId;

use thor_core::{ClassDesc, FieldKind, Scalar, VarElem, VarKind};

/// A reference to a stored object of class `T`: an indirection-table entry and the oref it was
/// made for (checked on use, so a handle never reaches the wrong object). Copy, 8 bytes; the
/// null reference is [`Ref::NULL`].
///
/// # Equality is identity
///
/// `==` says whether two references of one session name the same object, and `Hash` agrees
/// with it. That holds across a commit too: a reference made by the transaction that created
/// the object (`Ref(new #5)`) equals one that reached the object after the commit
/// (`Ref(3.12)`), because each commit records, process-wide, the orefs its created objects
/// got. What cannot be matched:
///
/// - a reference to an object whose transaction aborted names nothing and equals only itself;
/// - the record keeps the process's latest 65,536 renames ([`crate::limits::RENAMES_MAX`]):
///   a reference made before a commit followed by more creations than that equals only the
///   references made before the commit (as [`crate::Session::canonical`] fails for it then);
/// - such a reference hashes as its serial before the commit and as its oref after: a hash
///   map that holds it as a key across the commit must be rebuilt;
/// - references of different sessions compare by their words: orefs of different databases
///   are not comparable (a session that outlives 128 later sessions of the process, or
///   creates more than 16 M objects, may even share serials with another:
///   [`crate::limits::SERIAL_BLOCK`]).
pub struct Ref<T: ?Sized> {
    /// The entry in the session's indirection table.
    pub(crate) idx: u32,
    /// The oref (or tagged serial of a created object) the entry held when this was made.
    pub(crate) oref: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T: ?Sized> Clone for Ref<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Ref<T> {}
/// Equality is identity: two references are equal when they name the same object, also when
/// one was made by the transaction that created the object (before its commit gave it an oref)
/// and the other reached the object after the commit (see [`Ref`]).
impl<T: ?Sized> PartialEq for Ref<T> {
    fn eq(&self, other: &Self) -> bool {
        self.oref == other.oref
            || match (self.oref & 1, other.oref & 1) {
                (1, 0) => other.oref != 0 && identity::renamed(self.oref) == Some(other.oref),
                (0, 1) => self.oref != 0 && identity::renamed(other.oref) == Some(self.oref),
                _ => false,
            }
    }
}
impl<T: ?Sized> Eq for Ref<T> {}
/// Consistent with equality: a reference made before its object's commit hashes as its oref
/// once the commit is recorded. So such a reference hashes differently before and after the
/// commit: a hash map keyed by it across the commit must be rebuilt (or keyed by references
/// taken after the commit).
impl<T: ?Sized> std::hash::Hash for Ref<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let word = match self.oref & 1 {
            1 => identity::renamed(self.oref).unwrap_or(self.oref),
            _ => self.oref,
        };
        word.hash(h)
    }
}
impl<T: ?Sized> std::fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match thor_core::RawRef::decode(self.oref) {
            thor_core::RawRef::Oref(o) => write!(f, "Ref({o:?})"),
            thor_core::RawRef::Tagged(s) => write!(f, "Ref(new #{s})"),
        }
    }
}

impl<T: ?Sized> Ref<T> {
    /// The null reference.
    pub const NULL: Ref<T> = Ref { idx: u32::MAX, oref: 0, _t: PhantomData };

    pub(crate) fn new(idx: u32, oref: u32) -> Ref<T> {
        Ref { idx, oref, _t: PhantomData }
    }

    /// Whether this is the null reference.
    pub fn is_null(&self) -> bool {
        self.oref == 0
    }

    /// The object's oref, or `None` for null and for objects created by the current transaction
    /// (they get orefs at commit).
    pub fn oref(&self) -> Option<thor_core::Oref> {
        match thor_core::RawRef::decode(self.oref) {
            thor_core::RawRef::Oref(o) if !o.is_null() => Some(o),
            _ => None,
        }
    }

    /// The same reference seen as another class (checked when the object is read).
    pub fn cast<U: ?Sized>(self) -> Ref<U> {
        Ref::new(self.idx, self.oref)
    }

    /// The word the reference was made for: an oref, or a created object's tagged serial
    /// (which stays that object's word in references made before its commit). `Ref` itself
    /// is a better key: its equality and hash treat both words of a created object as one.
    pub fn key(&self) -> u32 {
        self.oref
    }
}

/// Which object a reference made before its object's commit names: the process-wide record
/// behind [`Ref`]'s equality.
///
/// A reference is an indirection-table entry and the word it was made for: an oref, or for an
/// object created by the open transaction a *tagged serial* (the oref comes with the commit).
/// The session renames the entry at the commit, but references already handed out keep the
/// serial, and a reference that reaches the object afterwards carries its oref. To tell that
/// they name one object without a session at hand, every session's cache counts its serials in
/// a block of its own ([`SERIAL_BLOCK`] serials, handed out in turn across the 31-bit serial
/// space), so that a serial names one object in the process; and every commit records here
/// the oref each created object got. `Ref::eq` compares a serial with an oref through this
/// record.
///
/// ```text
///   create ─► Ref(entry 7, new #5)  ──commit──► record: #5 → oref 3.12
///   root.get(field) ─► Ref(entry 7, 3.12)        Ref(7, #5) == Ref(7, 3.12): #5 → 3.12
/// ```
///
/// What cannot be matched, documented on [`Ref`]: a reference to an object whose transaction
/// aborted names no object and equals only itself; the record keeps the latest
/// [`RENAMES_MAX`] renames of the process (as the cache keeps its own), so a reference made
/// before a commit followed by that many other creations equals only copies of itself (as
/// [`crate::Session::canonical`] of it fails then); and a session that outlives
/// `2^31 / SERIAL_BLOCK` (128) later sessions, or creates more than [`SERIAL_BLOCK`] objects,
/// may share serials with another. References of different sessions compare by their words,
/// as before: orefs of different databases are not comparable.
pub(crate) mod identity {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Mutex, OnceLock};

    use rustc_hash::FxHashMap;
    use thor_core::RawRef;

    pub(crate) use crate::limits::{RENAMES_MAX, SERIAL_BLOCK};

    /// The record: serial word → oref word, and the order of insertion, for the bound.
    #[derive(Default)]
    struct Renames {
        map: FxHashMap<u32, u32>,
        order: VecDeque<(u32, u32)>,
    }

    /// Whether anything was ever recorded: until then a comparison takes no lock.
    static ANY: AtomicBool = AtomicBool::new(false);
    /// The next block to hand out.
    static NEXT_BLOCK: AtomicU32 = AtomicU32::new(0);

    fn renames() -> &'static Mutex<Renames> {
        static R: OnceLock<Mutex<Renames>> = OnceLock::new();
        R.get_or_init(|| Mutex::new(Renames::default()))
    }

    /// The first serial of a new session's block; what the record held about the block's
    /// serials (from a session long past) is forgotten.
    pub(crate) fn first_serial() -> u32 {
        let block = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed);
        let first = block.wrapping_mul(SERIAL_BLOCK) & RawRef::TAG_MAX;
        if ANY.load(Ordering::Acquire) {
            let mut r = renames().lock().unwrap_or_else(|e| e.into_inner());
            r.map.retain(|&word, _| {
                (word >> 1).wrapping_sub(first) & RawRef::TAG_MAX >= SERIAL_BLOCK
            });
        }
        first
    }

    /// Records the orefs created objects got at a commit: `(tagged word, oref word)` pairs.
    pub(crate) fn record(pairs: impl ExactSizeIterator<Item = (u32, u32)>) {
        if pairs.len() == 0 {
            return;
        }
        // Only the latest RENAMES_MAX survive the bound anyway.
        let skip = pairs.len().saturating_sub(RENAMES_MAX);
        let mut r = renames().lock().unwrap_or_else(|e| e.into_inner());
        for (word, oref) in pairs.skip(skip) {
            if r.order.len() == RENAMES_MAX
                && let Some((old, old_oref)) = r.order.pop_front()
                && r.map.get(&old) == Some(&old_oref)
            {
                r.map.remove(&old);
            }
            r.map.insert(word, oref);
            r.order.push_back((word, oref));
        }
        ANY.store(true, Ordering::Release);
    }

    /// The oref word the object of tagged word `word` got at its commit, if recorded.
    pub(crate) fn renamed(word: u32) -> Option<u32> {
        if !ANY.load(Ordering::Acquire) {
            return None;
        }
        renames().lock().unwrap_or_else(|e| e.into_inner()).map.get(&word).copied()
    }
}

/// How a field type is stored and read.
pub trait FieldType: Sized + 'static {
    /// Bytes the field occupies (a multiple of 4).
    const SIZE: usize;
    /// Whether the field is a reference.
    const IS_REF: bool;
    /// The type the stored class descriptor records for the field (its schema section).
    /// A function, not a constant: telling a string reference from another needs the
    /// referent's `TypeId`.
    fn kind() -> FieldKind;
}

macro_rules! scalar_field {
    ($t:ty, $s:ident) => {
        impl FieldType for $t {
            const SIZE: usize = Scalar::$s.size();
            const IS_REF: bool = false;
            fn kind() -> FieldKind {
                FieldKind::Scalar(Scalar::$s)
            }
        }
        impl OptionalValue for $t {
            const SCALAR: Scalar = Scalar::$s;
        }
    };
}
scalar_field!(u32, U32);
scalar_field!(i32, I32);
scalar_field!(f32, F32);
scalar_field!(u64, U64);
scalar_field!(i64, I64);
scalar_field!(f64, F64);
scalar_field!(bool, Bool);

impl<const N: usize> FieldType for [u8; N] {
    const SIZE: usize = (N + 3) & !3;
    const IS_REF: bool = false;
    fn kind() -> FieldKind {
        // A fixed part is at most `CLASS_FIXED_MAX_BYTES` (988) bytes: a longer array makes
        // an invalid class, refused when its descriptor is built, whatever this says.
        FieldKind::Bytes(u16::try_from(N).unwrap_or(u16::MAX))
    }
}

/// Whether `T` is the string class: a `Ref<Str>` field is recorded as a string.
fn is_str<T: ?Sized + 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<crate::Str>()
}

impl<T: ?Sized + 'static> FieldType for Ref<T> {
    const SIZE: usize = 4;
    const IS_REF: bool = true;
    fn kind() -> FieldKind {
        if is_str::<T>() { FieldKind::Str } else { FieldKind::Ref }
    }
}

/// The value types an `Option` field can hold besides references: stored as a tag word and
/// the value.
pub trait OptionalValue: FieldType {
    /// The value's type in the schema section.
    const SCALAR: Scalar;
}

impl<T: OptionalValue> FieldType for Option<T> {
    const SIZE: usize = 4 + T::SIZE;
    const IS_REF: bool = false;
    fn kind() -> FieldKind {
        FieldKind::Optional(T::SCALAR)
    }
}

impl<T: ?Sized + 'static> FieldType for Option<Ref<T>> {
    const SIZE: usize = 4;
    const IS_REF: bool = true;
    fn kind() -> FieldKind {
        if is_str::<T>() { FieldKind::OptionalStr } else { FieldKind::OptionalRef }
    }
}

/// Marks which class and type a [`Field`] belongs to, without owning either.
type FieldMarker<C, F> = PhantomData<fn() -> (Box<C>, F)>;

/// A field of class `C` of type `F`: its byte offset within the object.
pub struct Field<C: ?Sized, F> {
    offset: usize,
    _t: FieldMarker<C, F>,
}

impl<C: ?Sized, F> Clone for Field<C, F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C: ?Sized, F> Copy for Field<C, F> {}
impl<C: ?Sized, F> std::fmt::Debug for Field<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Field(@{})", self.offset)
    }
}

impl<C: ?Sized, F> Field<C, F> {
    /// The field at byte `offset` of the object (header included). Used by [`crate::class!`].
    pub const fn at(offset: usize) -> Self {
        Field { offset, _t: PhantomData }
    }

    /// The byte offset of the field within the object.
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

/// What follows a class's fields.
pub trait VarSpec: 'static {
    /// The stored kind.
    const KIND: VarKind;
    /// The element type the schema section records.
    fn elem() -> VarElem {
        VarElem::of(Self::KIND)
    }
}

/// No variable part.
#[derive(Debug)]
pub enum NoVar {}
impl VarSpec for NoVar {
    const KIND: VarKind = VarKind::None;
}

/// The variable parts a class can have: [`crate::Session::create`] asks for a length only of
/// classes with one ([`crate::Session::create_fixed`] makes the others).
#[diagnostic::on_unimplemented(
    message = "class has no variable part: create it with `create_fixed::<C>()`",
    label = "`create` takes a variable part's length"
)]
pub trait VarPart: VarSpec {}
impl VarPart for VarBytes {}
impl<T: ?Sized + 'static> VarPart for VarRefs<T> {}

/// A variable part of bytes.
#[derive(Debug)]
pub enum VarBytes {}
impl VarSpec for VarBytes {
    const KIND: VarKind = VarKind::Bytes;
}

/// A variable part of references to `T`.
#[derive(Debug)]
pub struct VarRefs<T: ?Sized>(PhantomData<fn() -> T>);
impl<T: ?Sized + 'static> VarSpec for VarRefs<T> {
    const KIND: VarKind = VarKind::Refs;
    fn elem() -> VarElem {
        if is_str::<T>() { VarElem::Str } else { VarElem::Ref }
    }
}

/// A persistent class declared in Rust (normally with [`crate::class!`]).
pub trait Class: 'static {
    /// The stored class name (unique in a database).
    const NAME: &'static str;
    /// The variable part.
    type Var: VarSpec;
    /// The layout: the descriptor stored in the class object.
    fn desc() -> ClassDesc;
    /// Bytes of the fixed part (`desc().fixed_bytes()`, known at compile time): lets a typed
    /// view find its variable part without looking its class up. Unused when `ANY`.
    const FIXED_BYTES: usize;
    /// The class's oref when it is built in (every database has it at a fixed oref).
    const BUILTIN: Option<thor_core::Oref> = None;
    /// Whether reading a `Ref` of this class skips the class check (for untyped access).
    const ANY: bool = false;
    /// A process-wide small integer identifying this class, for the session's class table.
    fn slot() -> usize;
}

/// Hands out class slots.
#[doc(hidden)]
pub fn next_class_slot() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The slot of a class whose `slot` is still unset (`usize::MAX`): takes one and publishes it
/// unless another thread published first, whose slot it returns (a class has one slot for
/// the life of the process).
#[doc(hidden)]
#[cold]
pub fn first_class_slot(slot: &std::sync::atomic::AtomicUsize) -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    let mine = next_class_slot();
    match slot.compare_exchange(usize::MAX, mine, Relaxed, Relaxed) {
        Ok(_) => mine,
        Err(theirs) => theirs,
    }
}

/// Builds a class descriptor, its fields named and typed, from the field list (used by
/// [`crate::class!`]): `names`, `sizes`, `refs` and `kinds` are the fields in order, `var` and
/// `elem` the variable part.
#[doc(hidden)]
pub fn desc_from_fields(
    name: &str,
    names: &[&str],
    sizes: &[usize],
    refs: &[bool],
    kinds: &[FieldKind],
    var: VarKind,
    elem: VarElem,
) -> ClassDesc {
    let mut slot = 0u16;
    let mut ref_slots = Vec::new();
    for (size, is_ref) in sizes.iter().zip(refs) {
        if *is_ref {
            ref_slots.push(slot);
        }
        slot += (*size / 4) as u16;
    }
    let fields: Vec<(&str, FieldKind)> = names.iter().copied().zip(kinds.iter().copied()).collect();
    ClassDesc::new(name, slot as usize * 4, &ref_slots, var)
        .and_then(|d| d.with_fields(&fields, elem))
        .unwrap_or_else(|e| panic!("class {name} is not a valid thor class: {e}"))
}

/// The offset of the field named `name` in a field list (used by [`crate::class!`] at compile
/// time). Objects start with a 4-byte class header.
#[doc(hidden)]
pub const fn field_offset(names: &[&str], sizes: &[usize], name: &str) -> usize {
    let mut off = 4;
    let mut i = 0;
    while i < names.len() {
        if str_eq(names[i], name) {
            return off;
        }
        off += sizes[i];
        i += 1;
    }
    panic!("no such field")
}

/// The sum of `sizes` (the fixed part's size, used by [`crate::class!`] at compile time).
#[doc(hidden)]
pub const fn sum(sizes: &[usize]) -> usize {
    let mut total = 0;
    let mut i = 0;
    while i < sizes.len() {
        total += sizes[i];
        i += 1;
    }
    total
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Declares a persistent class. See the [module documentation](crate::typed).
#[macro_export]
macro_rules! class {
    (
        $(#[$meta:meta])*
        $vis:vis class $name:ident ($cname:literal) {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)?
        }
        $( var $var:ident $(< $vty:ty >)? ; )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis enum $name {}

        #[allow(non_upper_case_globals, dead_code)]
        impl $name {
            const __NAMES: &'static [&'static str] = &[$(stringify!($field)),*];
            const __SIZES: &'static [usize] = &[$(<$fty as $crate::typed::FieldType>::SIZE),*];
            const __REFS: &'static [bool] = &[$(<$fty as $crate::typed::FieldType>::IS_REF),*];
            $(
                $(#[$fmeta])*
                $vis const $field: $crate::typed::Field<$name, $fty> = $crate::typed::Field::at(
                    $crate::typed::field_offset(Self::__NAMES, Self::__SIZES, stringify!($field)),
                );
            )*
        }

        impl $crate::typed::Class for $name {
            const NAME: &'static str = $cname;
            type Var = $crate::class!(@var $( $var $(< $vty >)? )?);
            const FIXED_BYTES: usize = $crate::typed::sum(Self::__SIZES);
            fn desc() -> $crate::thor_core::ClassDesc {
                $crate::typed::desc_from_fields(
                    $cname,
                    Self::__NAMES,
                    Self::__SIZES,
                    Self::__REFS,
                    &[$(<$fty as $crate::typed::FieldType>::kind()),*],
                    <Self::Var as $crate::typed::VarSpec>::KIND,
                    <Self::Var as $crate::typed::VarSpec>::elem(),
                )
            }
            // Inline: every typed access asks for its class's slot, and a call into the
            // crate that declared the class was 4% of hot OO7 T1.
            #[inline]
            fn slot() -> usize {
                // Not a `OnceLock`: its state check and indirection were a tenth of a typed
                // access's instructions. Two threads racing on the first use may both take a
                // slot; the loser's stays unused and every later call sees the winner's.
                static SLOT: ::std::sync::atomic::AtomicUsize =
                    ::std::sync::atomic::AtomicUsize::new(usize::MAX);
                match SLOT.load(::std::sync::atomic::Ordering::Relaxed) {
                    usize::MAX => $crate::typed::first_class_slot(&SLOT),
                    s => s,
                }
            }
        }
    };
    (@var) => { $crate::typed::NoVar };
    (@var bytes) => { $crate::typed::VarBytes };
    (@var refs < $t:ty >) => { $crate::typed::VarRefs<$t> };
}

/// A collection of references to `T`: the built-in `thor.Refs` class.
#[derive(Debug)]
pub struct Refs<T: ?Sized>(PhantomData<fn() -> T>);

impl<T: ?Sized + 'static> Class for Refs<T> {
    const NAME: &'static str = "thor.Refs";
    const FIXED_BYTES: usize = 0;
    type Var = VarRefs<T>;
    const BUILTIN: Option<thor_core::Oref> = Some(thor_core::builtin::REFS);
    fn desc() -> ClassDesc {
        thor_core::builtin::desc(thor_core::builtin::REFS).expect("builtin").clone()
    }
    fn slot() -> usize {
        usize::MAX
    }
}

/// A string of bytes: the built-in `thor.Bytes` class.
#[derive(Debug)]
pub enum Bytes {}

impl Class for Bytes {
    const NAME: &'static str = "thor.Bytes";
    const FIXED_BYTES: usize = 0;
    type Var = VarBytes;
    const BUILTIN: Option<thor_core::Oref> = Some(thor_core::builtin::BYTES);
    fn desc() -> ClassDesc {
        thor_core::builtin::desc(thor_core::builtin::BYTES).expect("builtin").clone()
    }
    fn slot() -> usize {
        usize::MAX
    }
}

/// The root of a large object (a value bigger than a page stored as a tree of page-sized
/// pieces, `thor_core::large`): the built-in `thor.Large` class. [`crate::Session::read_large`]
/// reads a whole value; this class lets a program reach the pieces themselves, for example to
/// update a few bytes of a large text in place: the children (`var_ref`) are the leaves
/// ([`Bytes`]) when `height` is 1, and `thor.Refs` interior nodes above that.
#[derive(Debug)]
pub enum Large {}

#[allow(non_upper_case_globals)]
impl Large {
    /// Elements in the whole value (bytes, for a byte value).
    pub const length: Field<Large, u64> = Field::at(4);
    /// What the leaves hold: 1 for bytes, 2 for references.
    pub const leaf_kind: Field<Large, u32> = Field::at(12);
    /// Levels below the root (1: the children are leaves).
    pub const height: Field<Large, u32> = Field::at(16);
}

impl Class for Large {
    const NAME: &'static str = "thor.Large";
    const FIXED_BYTES: usize = 16;
    type Var = VarRefs<Any>;
    const BUILTIN: Option<thor_core::Oref> = Some(thor_core::builtin::LARGE);
    fn desc() -> ClassDesc {
        thor_core::builtin::desc(thor_core::builtin::LARGE).expect("builtin").clone()
    }
    fn slot() -> usize {
        usize::MAX
    }
}

/// Any class: references whose target's class is not checked (downcast with
/// [`crate::View::class_name`] and [`Ref::cast`]).
#[derive(Debug)]
pub enum Any {}

impl Class for Any {
    const NAME: &'static str = "*";
    const FIXED_BYTES: usize = 0;
    type Var = NoVar;
    const ANY: bool = true;
    fn desc() -> ClassDesc {
        unreachable!("Any has no stored class")
    }
    fn slot() -> usize {
        usize::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::class! {
        /// A test class.
        pub class Part("test.Part") {
            id: u32,
            big: u64,
            name: [u8; 10],
            next: Ref<Part>,
        }
        var refs<Part>;
    }

    #[test]
    fn large_fields_match_the_large_object_header() {
        let objs =
            thor_core::large::encode(&vec![7u8; 20_000], thor_core::large::LeafKind::Bytes, 8192);
        let h = thor_core::large::header(&objs[0]).unwrap();
        let root = &objs[0];
        let u32_at = |o: usize| thor_core::le::u32_at(root, o);
        assert_eq!(thor_core::le::u64_at(root, Large::length.offset()), h.len);
        assert_eq!(u32_at(Large::leaf_kind.offset()), 1);
        assert_eq!(u32_at(Large::height.offset()), h.height);
        assert_eq!(Large::desc().fixed_bytes(), 16);
    }

    #[test]
    fn layout_follows_the_field_list() {
        assert_eq!(Part::id.offset(), 4);
        assert_eq!(Part::big.offset(), 8);
        assert_eq!(Part::name.offset(), 16);
        assert_eq!(Part::next.offset(), 28);
        let d = Part::desc();
        assert_eq!(d.fixed_bytes(), 28);
        assert_eq!(d.ref_slots(), &[6]);
        assert_eq!(d.var(), VarKind::Refs);
        assert_eq!(d.name(), "test.Part");
        assert_eq!(Part::slot(), Part::slot());
        assert_eq!(Part::FIXED_BYTES, d.fixed_bytes());
        for (fixed, desc) in [
            (Refs::<Part>::FIXED_BYTES, Refs::<Part>::desc()),
            (Bytes::FIXED_BYTES, Bytes::desc()),
            (Large::FIXED_BYTES, Large::desc()),
        ] {
            assert_eq!(fixed, desc.fixed_bytes(), "{}", desc.name());
        }
    }

    /// A class's slot is taken once: every thread racing on its first use, and every later
    /// call, sees the same slot, and slots of different classes differ.
    #[test]
    fn a_class_slot_is_taken_once_under_races() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static A: AtomicUsize = AtomicUsize::new(usize::MAX);
        static B: AtomicUsize = AtomicUsize::new(usize::MAX);
        let seen: Vec<(usize, usize)> = std::thread::scope(|s| {
            let hs: Vec<_> =
                (0..8).map(|_| s.spawn(|| (first_class_slot(&A), first_class_slot(&B)))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (a, b) = (A.load(Ordering::Relaxed), B.load(Ordering::Relaxed));
        assert_ne!(a, b);
        assert!(seen.iter().all(|&(x, y)| x == a && y == b), "{seen:?}");
    }
}
