//! Names: orefs, page ids, object ids, server and client ids, log sequence numbers.
//!
//! # Orefs
//!
//! An oref names an object within one server in 32 bits:
//!
//! ```text
//!  31                     10 9         1   0
//! +-------------------------+-----------+---+
//! |   page id (22 bits)     | oid (9)   | s |
//! +-------------------------+-----------+---+
//! ```
//!
//! The page id locates the page on disk and in caches; the oid indexes the page's offset table,
//! so a server can move an object inside its page without changing its name. Bit `s` is always 0
//! in a stored oref. Clients set it in a reference field that they have swizzled to an
//! indirection-table index, and commit requests set it on references to objects created by the
//! same transaction (see [`RawRef`]). Page 0 is never allocated, so the all-zero word is free to
//! mean "no object" ([`Oref::NULL`]).
//!
//! # Which words name an object
//!
//! A 32-bit word *names a stored object* when its spare bit is clear and its page id is in
//! `1..=PAGE_ID_MAX`: the null word and every other word of page 0 (`0x00000002` to
//! `0x000003fe`, oids 1 to 511 of a page that is never allocated) name nothing. That is the one
//! definition every layer uses, through [`Oref::object`] (a word read from untrusted bytes) and
//! [`Oref::check_object`] (an [`Oref`] value already in hand):
//!
//! - the wire decoder refuses any other word where an object is named (read sets, versions,
//!   write sets, acks, invalidations, created orefs, the root), and its encoder refuses to send
//!   one;
//! - the server core refuses a commit whose read set or versions hold one (a commit that comes
//!   through the embedded API, not the wire);
//! - the log-record decoder of recovery and `thor check` refuses a record that holds one.
//!
//! So what the wire lets in, what the core acknowledges and what recovery reads back are the
//! same set, and an acknowledged commit always decodes from the log. A *reference field* may
//! also hold the null word (no object), which is why [`Oref::from_raw`] still takes it.

use std::fmt;

/// Bits of an oref given to the page id.
pub const PAGE_ID_BITS: u32 = 22;
/// Bits of an oref given to the object id within a page.
pub const OID_BITS: u32 = 9;
/// Number of distinct object ids in a page (the offset table never has more entries).
pub const OIDS_PER_PAGE: usize = 1 << OID_BITS;
/// The largest page id a server can hold.
pub const PAGE_ID_MAX: u32 = (1 << PAGE_ID_BITS) - 1;

const OID_SHIFT: u32 = 1;
const PAGE_SHIFT: u32 = OID_BITS + OID_SHIFT;
const OID_MASK: u32 = (1 << OID_BITS) - 1;

const _: () = assert!(PAGE_ID_BITS + OID_BITS + 1 == 32);

/// A page number within one server. Valid ids are `1..=PAGE_ID_MAX`; 0 is reserved so that the
/// null oref names no page.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PageId(u32);

impl PageId {
    /// The first page a database allocates (it holds the built-in classes and the root).
    pub const FIRST: PageId = PageId(1);
    /// The largest page id.
    pub const MAX: PageId = PageId(PAGE_ID_MAX);

    /// The page id `n`, or `None` when `n` is 0 or does not fit in 22 bits.
    pub const fn new(n: u32) -> Option<PageId> {
        if n == 0 || n > PAGE_ID_MAX { None } else { Some(PageId(n)) }
    }

    /// The number of this page.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The next page id, or `None` past [`PageId::MAX`].
    pub const fn next(self) -> Option<PageId> {
        PageId::new(self.0 + 1)
    }

    /// The page id as an index for dense tables.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An object's index in its page's offset table, `0..512`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Oid(u16);

impl Oid {
    /// The object id `n`, or `None` when it is out of range.
    pub const fn new(n: u16) -> Option<Oid> {
        if (n as usize) < OIDS_PER_PAGE { Some(Oid(n)) } else { None }
    }

    /// The number of this object id.
    pub const fn get(self) -> u16 {
        self.0
    }

    /// The object id as an index into the offset table.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "o{}", self.0)
    }
}

/// The name of an object within its server. See the module documentation for the layout.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct Oref(u32);

impl Oref {
    /// The null reference: names no object.
    pub const NULL: Oref = Oref(0);

    /// The oref of object `oid` in page `page`.
    pub const fn new(page: PageId, oid: Oid) -> Oref {
        Oref((page.0 << PAGE_SHIFT) | ((oid.0 as u32) << OID_SHIFT))
    }

    /// Interprets a stored 32-bit word: `None` if the spare bit is set (a stored oref never has
    /// it). The null word gives [`Oref::NULL`].
    pub const fn from_raw(raw: u32) -> Option<Oref> {
        if raw & 1 != 0 { None } else { Some(Oref(raw)) }
    }

    /// The oref in `raw` if it names a stored object (spare bit clear, page id in
    /// `1..=PAGE_ID_MAX`), or why it does not. The one definition of an object's name: see the
    /// module documentation.
    pub const fn object(raw: u32) -> Result<Oref, NotAnObject> {
        if raw & 1 != 0 {
            Err(NotAnObject::Tagged)
        } else if raw == 0 {
            Err(NotAnObject::Null)
        } else if raw >> PAGE_SHIFT == 0 {
            // The page id of a word takes its top 22 bits, so it is at most `PAGE_ID_MAX`:
            // page 0 is the only page id out of range.
            Err(NotAnObject::PageZero)
        } else {
            Ok(Oref(raw))
        }
    }

    /// This oref if it names a stored object ([`Oref::object`] of its word): not null and not
    /// on page 0 (its spare bit is clear, as in every `Oref`).
    pub const fn check_object(self) -> Result<Oref, NotAnObject> {
        Oref::object(self.0)
    }

    /// Whether this oref names a stored object (see [`Oref::object`]).
    pub const fn names_object(self) -> bool {
        Oref::object(self.0).is_ok()
    }

    /// The 32-bit word stored on disk and on the wire.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Whether this is [`Oref::NULL`].
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The page holding the object. Meaningless (page 0) for the null oref.
    pub const fn page_raw(self) -> u32 {
        self.0 >> PAGE_SHIFT
    }

    /// The page holding the object, or `None` for an oref on page 0 (the null oref, or a word
    /// that names no object: see [`Oref::object`]).
    pub const fn page(self) -> Option<PageId> {
        PageId::new(self.page_raw())
    }

    /// The object's index in its page's offset table.
    pub const fn oid(self) -> Oid {
        Oid(((self.0 >> OID_SHIFT) & OID_MASK) as u16)
    }
}

impl fmt::Debug for Oref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "null")
        } else {
            write!(f, "{}.{}", self.page_raw(), self.oid().0)
        }
    }
}

impl fmt::Display for Oref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a 32-bit word does not name a stored object ([`Oref::object`]).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum NotAnObject {
    /// The null word: no object.
    Null,
    /// The spare bit is set: a tagged index (a swizzled reference, or a commit's reference to
    /// an object it creates), not a stored oref.
    Tagged,
    /// Page 0, which is never allocated: a word below `0x400` other than null.
    PageZero,
}

impl NotAnObject {
    /// A short description, for error messages.
    pub const fn why(self) -> &'static str {
        match self {
            NotAnObject::Null => "null oref",
            NotAnObject::Tagged => "spare bit set (not a stored oref)",
            NotAnObject::PageZero => "oref on page 0, which is never allocated",
        }
    }
}

impl fmt::Display for NotAnObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.why())
    }
}

impl std::error::Error for NotAnObject {}

/// A reference word as it appears in an object's reference field, which may hold more than a
/// stored oref:
///
/// - spare bit 0: an [`Oref`] (or null);
/// - spare bit 1: a *tagged* 31-bit index. At a client it is an indirection-table index (a
///   swizzled reference); in a commit request it is the index of an object created by the same
///   transaction, which the server replaces by the oref it allocates.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum RawRef {
    /// A stored oref (possibly null).
    Oref(Oref),
    /// A tagged index.
    Tagged(u32),
}

impl RawRef {
    /// The largest index a tagged reference can carry.
    pub const TAG_MAX: u32 = u32::MAX >> 1;

    /// Decodes a reference word.
    pub const fn decode(word: u32) -> RawRef {
        if word & 1 == 0 { RawRef::Oref(Oref(word)) } else { RawRef::Tagged(word >> 1) }
    }

    /// Encodes a tagged index; panics if `index > TAG_MAX` (an internal invariant: callers
    /// bound their tables well below that).
    pub const fn tagged_word(index: u32) -> u32 {
        assert!(index <= Self::TAG_MAX);
        (index << 1) | 1
    }

    /// The reference word for this value.
    pub const fn encode(self) -> u32 {
        match self {
            RawRef::Oref(o) => o.0,
            RawRef::Tagged(i) => Self::tagged_word(i),
        }
    }
}

/// Identifies a server (a logical server: one database directory).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ServerId(pub u32);

/// Identifies a client session at a server.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ClientId(pub u32);

/// A log sequence number: the position of a commit in a server's transaction log. LSNs start at
/// 1 and increase by one per record; 0 means "before every record" (for example the version of a
/// bulk-loaded page).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Before every record.
    pub const ZERO: Lsn = Lsn(0);

    /// The following LSN.
    pub const fn next(self) -> Lsn {
        Lsn(self.0 + 1)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn null_is_page_zero() {
        assert!(Oref::NULL.is_null());
        assert_eq!(Oref::NULL.page(), None);
        assert_eq!(PageId::new(0), None);
        assert_eq!(PageId::new(PAGE_ID_MAX + 1), None);
        assert_eq!(Oid::new(512), None);
    }

    #[test]
    fn tagged_words_are_never_orefs() {
        let w = RawRef::tagged_word(7);
        assert_eq!(Oref::from_raw(w), None);
        assert_eq!(RawRef::decode(w), RawRef::Tagged(7));
    }

    #[test]
    fn page_zero_names_no_object() {
        assert_eq!(Oref::object(0), Err(NotAnObject::Null));
        assert_eq!(Oref::object(0x0000_0008), Err(NotAnObject::PageZero));
        assert_eq!(Oref::object(0x0000_03fe), Err(NotAnObject::PageZero));
        assert_eq!(Oref::object(0x0000_0009), Err(NotAnObject::Tagged));
        assert_eq!(Oref::object(u32::MAX), Err(NotAnObject::Tagged));
        let first = Oref::new(PageId::FIRST, Oid::new(0).unwrap());
        assert_eq!(first.raw(), 0x400);
        assert_eq!(Oref::object(0x400), Ok(first));
        let last = Oref::new(PageId::MAX, Oid::new(511).unwrap());
        assert_eq!(Oref::object(last.raw()), Ok(last));
        // A page-0 word is a stored oref in the old sense (spare bit clear) but names nothing.
        let zero = Oref::from_raw(8).unwrap();
        assert!(!zero.is_null());
        assert_eq!(zero.check_object(), Err(NotAnObject::PageZero));
        assert!(!zero.names_object());
        assert!(!Oref::NULL.names_object());
    }

    proptest! {
        /// The one definition, against its meaning: a word names an object exactly when it
        /// decodes as an untagged reference whose page is a valid page id.
        #[test]
        fn object_is_exactly_untagged_with_a_page(raw in any::<u32>()) {
            let expected = matches!(RawRef::decode(raw), RawRef::Oref(o) if o.page().is_some());
            prop_assert_eq!(Oref::object(raw).is_ok(), expected);
            if let Ok(o) = Oref::object(raw) {
                prop_assert_eq!(o.raw(), raw);
                prop_assert!(PageId::new(o.page_raw()).is_some());
            }
        }

        #[test]
        fn oref_roundtrip(page in 1u32..=PAGE_ID_MAX, oid in 0u16..512) {
            let p = PageId::new(page).unwrap();
            let o = Oid::new(oid).unwrap();
            let r = Oref::new(p, o);
            prop_assert_eq!(r.page(), Some(p));
            prop_assert_eq!(r.oid(), o);
            prop_assert!(!r.is_null());
            prop_assert_eq!(Oref::from_raw(r.raw()), Some(r));
            prop_assert_eq!(Oref::object(r.raw()), Ok(r));
            prop_assert_eq!(RawRef::decode(r.raw()), RawRef::Oref(r));
        }

        #[test]
        fn tagged_roundtrip(i in 0u32..=RawRef::TAG_MAX) {
            prop_assert_eq!(RawRef::decode(RawRef::tagged_word(i)), RawRef::Tagged(i));
        }
    }
}
