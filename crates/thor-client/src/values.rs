//! Strings and growable sequences.
//!
//! Objects keep their class and size for life (the server enforces it: a commit's new version
//! of an object has the old one's size), so a value whose length changes cannot live inside
//! the object that refers to it. Both kinds here are objects of their own, reached by a
//! reference:
//!
//! - **A string** ([`Str`], class `thor.Str`) is an immutable object holding UTF-8. A field of
//!   type `Ref<Str>` holds one; [`View::set_str`] stores a new string object and points the
//!   field at it, [`View::get_str`] reads it.
//! - **A sequence** ([`Seq<T>`], class `thor.Seq`) is a small header (length, element word,
//!   root) that a program references, and a tree of *chunks* (`thor.Bytes` for values,
//!   `thor.Refs` for references) under *directories* (`thor.Refs`), described below. Every
//!   reference to the sequence stays valid however it grows.
//!
//! A string is bounded by the largest object a page holds ([`max_str_bytes`]: 8,156 bytes in
//! 8 KiB pages); past it [`Session::create_str`] fails with [`ClientError::TooLong`]. A
//! sequence holds up to `u32::MAX` elements ([`SeqView::capacity_max`]). Objects a sequence no
//! longer uses, and a string that a field no longer points to, stay in the database: thor has
//! no garbage collector yet.
//!
//! # Sequences: a tree of chunks
//!
//! ```text
//!   header (thor.Seq)          len 300,000 · element word: code 9, tree, chunks of 2^10 bytes
//!     │ root
//!     ▼
//!   directory (thor.Refs, one page: 2,039 slots in 8 KiB pages)
//!     │ slot 0        │ slot 1          ...  │ slot 1,171 (the last used)
//!     ▼               ▼                      ▼
//!   chunk 0..256   chunk 256..512   ...   chunk 299,776..300,000   (thor.Refs of 256 slots)
//! ```
//!
//! A full chunk holds [`SEQ_CHUNK_BYTES_LOG2`] worth of elements (1 KiB: 256 references, 128
//! `u64`s, 1,024 `u8`s); a directory holds as many children as one object in a page (2,039 in
//! 8 KiB pages). The tree's height follows from the length alone: one chunk up to a chunk's
//! worth (that chunk starts with room for 4 and doubles, copied, until it is full, so that
//! small sequences stay small), then as many directory levels as the length needs: 522 K
//! references in two levels, 1.06 G in three (8 KiB pages). Element `i` is found by dividing
//! down the levels: one object read per level.
//!
//! - **Append** writes the last chunk and the header, and once per chunk a directory (a new
//!   chunk is hooked in), or a new root when the tree is full. The log record of an append
//!   is about a chunk (1 KiB), not the whole sequence's storage (up to 8 KiB before).
//! - **`set`** writes one chunk; **`pop`**, **`truncate`** and **`clear`** unhook the chunks
//!   and directories past the new end (their slots in their parents nulled, so their
//!   references keep nothing reachable), clear the reference slots past the end in the last
//!   kept chunk, and drop the levels the shorter length does not need.
//! - **`remove(i)`** moves every later element down one place: it rewrites every chunk from
//!   `i`'s to the last, `O(len - i)`. **`swap_remove(i)`** moves the last element to `i`:
//!   two chunks.
//! - **`iter()`** reads lazily, one descent from the root per chunk.
//!
//! The header's *element word* says how the sequence is stored: bits 0..8 the element type's
//! [`Elem::CODE`], bits 8..16 the layout (0: one storage object, 1: a tree), bits 16..24 the
//! log2 of a full chunk's bytes. Sequences written before the tree have layout 0: their
//! header points at one storage object with room for at least the length. They read as they
//! are; the first write that changes their length converts them (up to a chunk's worth of
//! elements by rewriting the element word alone, past it by moving the elements into
//! chunks). A program built before the tree reads a tree's element word as another element
//! type and refuses it with [`ClientError::BadValue`].
//!
//! Stored values are not trusted: a string that is not UTF-8, a sequence whose length exceeds
//! its storage, whose directory is missing or short, whose tree would be taller than
//! [`SEQ_HEIGHT_MAX`] or whose element type differs from the program's give
//! [`ClientError::BadValue`], never a panic.
//!
//! ```
//! # use thor_client::{Ref, Seq, Session, Str};
//! thor_client::class! {
//!     pub class Person("doc.Person") {
//!         name: Ref<Str>,
//!         nickname: Option<Ref<Str>>,
//!         age: Option<u32>,
//!         retired: bool,
//!         friends: Ref<Seq<Ref<Person>>>,
//!     }
//! }
//! # fn demo(s: &Session) -> Result<(), thor_client::ClientError> {
//! let p = s.create_fixed::<Person>()?;
//! p.set_str(Person::name, "Barbara")?;
//! p.set(Person::age, Some(79))?;
//! p.set(Person::friends, s.create_seq::<Ref<Person>>()?)?;
//! s.seq(p.get(Person::friends))?.push(p.as_ref())?; // her own friend
//! assert_eq!(p.get_str(Person::name)?, "Barbara");
//! assert_eq!(p.get(Person::nickname), None);
//! assert!(!p.get(Person::retired));
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

use thor_core::ClassDesc;

use crate::error::ClientError;
use crate::limits::{SEQ_CHUNK_BYTES_LOG2, SEQ_HEIGHT_MAX};
use crate::session::{Session, View};
use crate::typed::{Any, Bytes, Class, Field, NoVar, Ref, Refs};

crate::class! {
    /// An immutable string: UTF-8 bytes in a `thor.Str` object. Fields hold `Ref<Str>`.
    pub class Str("thor.Str") {}
    var bytes;
}

crate::class! {
    /// The stored layout of a sequence's header (`Seq<T>` is its typed face).
    pub class SeqHeader("thor.Seq") {
        /// Elements in the sequence.
        len: u32,
        /// The element word: [`Elem::CODE`] of the element type, the layout and the chunk
        /// size (see the module documentation).
        elem: u32,
        /// The root: the one chunk or the top directory; null while the sequence is empty.
        /// (A legacy sequence's one storage object.)
        storage: Ref<Any>,
    }
}

/// The longest string, in bytes, in a database of `page_size`-byte pages: a `thor.Str`
/// object is one object in one page.
pub fn max_str_bytes(page_size: usize) -> usize {
    var_bytes_max(page_size)
}

/// The longest byte part of one object in a page of `page_size` bytes.
fn var_bytes_max(page_size: usize) -> usize {
    // Objects are padded to 4 bytes and the largest object is a multiple of 4, so the whole
    // rest of it after the count word is byte part.
    let d = Bytes::desc();
    let n = thor_core::limits::max_object_bytes(page_size) - d.var_offset();
    debug_assert_eq!(d.object_bytes(n), thor_core::limits::max_object_bytes(page_size));
    n
}

impl Session {
    /// Creates a string object holding `text`. Fails with [`ClientError::TooLong`] past
    /// [`max_str_bytes`].
    pub fn create_str(&self, text: &str) -> Result<Ref<Str>, ClientError> {
        let max = max_str_bytes(self.server().page_size);
        if text.len() > max {
            return Err(ClientError::TooLong { what: "string", len: text.len(), max });
        }
        let v = self.create::<Str>(text.len())?;
        v.set_var_bytes(text.as_bytes())?;
        Ok(v.as_ref())
    }

    /// The text of string `r`. Fails with [`ClientError::BadValue`] if it is not UTF-8.
    pub fn read_str(&self, r: Ref<Str>) -> Result<String, ClientError> {
        let bytes = self.get(r)?.var_bytes();
        String::from_utf8(bytes).map_err(|e| {
            ClientError::BadValue(format!(
                "a string is not UTF-8 at byte {}",
                e.utf8_error().valid_up_to()
            ))
        })
    }

    /// Creates an empty sequence of `T`.
    pub fn create_seq<T: Elem>(&self) -> Result<Ref<Seq<T>>, ClientError> {
        let h = self.create_fixed::<Seq<T>>()?;
        h.set(Seq::<T>::ELEM, tree_elem_word::<T>(self.server().page_size))?;
        Ok(h.as_ref())
    }

    /// A view of sequence `r`. Fails with [`ClientError::BadValue`] if it holds elements of
    /// another type.
    pub fn seq<T: Elem>(&self, r: Ref<Seq<T>>) -> Result<SeqView<'_, T>, ClientError> {
        let header = self.get(r)?;
        let code = header.get(Seq::<T>::ELEM) & 0xff;
        if code != T::CODE {
            return Err(ClientError::BadValue(format!(
                "a sequence of element type {code} read as one of {} ({})",
                T::CODE,
                std::any::type_name::<T>()
            )));
        }
        Ok(SeqView { s: self, header })
    }
}

impl<C: Class + ?Sized> View<'_, C> {
    /// The text of the string field `field`; a null reference reads as the empty string.
    pub fn get_str(&self, field: Field<C, Ref<Str>>) -> Result<String, ClientError> {
        let r = self.get(field);
        if r.is_null() { Ok(String::new()) } else { self.session().read_str(r) }
    }

    /// Stores `text` as a new string object and points `field` at it.
    pub fn set_str(&self, field: Field<C, Ref<Str>>, text: &str) -> Result<(), ClientError> {
        let r = self.session().create_str(text)?;
        self.set(field, r)
    }
}

/// A growable sequence of `T`: the class of its header object. Reach it with
/// [`Session::create_seq`] and [`Session::seq`].
pub struct Seq<T>(PhantomData<fn() -> T>);

impl<T> std::fmt::Debug for Seq<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Seq<{}>", std::any::type_name::<T>())
    }
}

impl<T: Elem> Seq<T> {
    const LEN: Field<Seq<T>, u32> = Field::at(SeqHeader::len.offset());
    const ELEM: Field<Seq<T>, u32> = Field::at(SeqHeader::elem.offset());
    const ROOT: Field<Seq<T>, Ref<Any>> = Field::at(SeqHeader::storage.offset());
}

impl<T: 'static> Class for Seq<T> {
    const NAME: &'static str = "thor.Seq";
    type Var = NoVar;
    const FIXED_BYTES: usize = SeqHeader::FIXED_BYTES;
    fn desc() -> ClassDesc {
        SeqHeader::desc()
    }
    // Every `Seq<T>` is the one stored class `thor.Seq`, so they share its slot.
    fn slot() -> usize {
        SeqHeader::slot()
    }
}

/// A type a [`Seq`] can hold: the numbers, `bool` and `u8` as values in byte chunks
/// (`thor.Bytes`), `Ref<U>` in reference chunks (`thor.Refs`).
pub trait Elem: Copy + 'static {
    /// Identifies the element type in the stored header (the low byte of its element word).
    const CODE: u32;
    /// Bytes one element takes in a chunk.
    const SIZE: usize;
    /// The chunk's class.
    type Storage: Class;
    /// Elements a chunk of `var_len` holds.
    fn capacity(var_len: usize) -> usize;
    /// The chunk `var_len` for `capacity` elements.
    fn var_len(capacity: usize) -> usize;
    /// Element `i` of `storage` (within its capacity).
    fn load(storage: &View<'_, Self::Storage>, i: usize) -> Result<Self, ClientError>;
    /// Stores element `i` of `storage` (within its capacity).
    fn store(self, storage: &View<'_, Self::Storage>, i: usize) -> Result<(), ClientError>;
    /// Clears slot `i` past the end (references are nulled, so that a popped reference does
    /// not keep its object reachable; values are left).
    fn clear(storage: &View<'_, Self::Storage>, i: usize) -> Result<(), ClientError>;
}

macro_rules! value_elem {
    ($t:ty, $code:expr, $n:expr, $from:expr, $to:expr) => {
        impl Elem for $t {
            const CODE: u32 = $code;
            const SIZE: usize = $n;
            type Storage = Bytes;
            fn capacity(var_len: usize) -> usize {
                var_len / $n
            }
            fn var_len(capacity: usize) -> usize {
                capacity * $n
            }
            fn load(storage: &View<'_, Bytes>, i: usize) -> Result<Self, ClientError> {
                let mut b = [0u8; $n];
                storage.read_var_bytes(i * $n, &mut b)?;
                Ok($from(b))
            }
            fn store(self, storage: &View<'_, Bytes>, i: usize) -> Result<(), ClientError> {
                let b: [u8; $n] = $to(self);
                storage.write_var_bytes(i * $n, &b)
            }
            fn clear(_: &View<'_, Bytes>, _: usize) -> Result<(), ClientError> {
                Ok(())
            }
        }
    };
}
value_elem!(u8, 1, 1, |b: [u8; 1]| b[0], |v: u8| [v]);
value_elem!(u32, 2, 4, u32::from_le_bytes, u32::to_le_bytes);
value_elem!(i32, 3, 4, i32::from_le_bytes, i32::to_le_bytes);
value_elem!(f32, 4, 4, f32::from_le_bytes, f32::to_le_bytes);
value_elem!(u64, 5, 8, u64::from_le_bytes, u64::to_le_bytes);
value_elem!(i64, 6, 8, i64::from_le_bytes, i64::to_le_bytes);
value_elem!(f64, 7, 8, f64::from_le_bytes, f64::to_le_bytes);
value_elem!(bool, 8, 1, |b: [u8; 1]| b[0] != 0, |v: bool| [u8::from(v)]);

impl<U: ?Sized + 'static> Elem for Ref<U> {
    const CODE: u32 = 9;
    const SIZE: usize = 4;
    type Storage = Refs<Any>;
    fn capacity(var_len: usize) -> usize {
        var_len
    }
    fn var_len(capacity: usize) -> usize {
        capacity
    }
    fn load(storage: &View<'_, Refs<Any>>, i: usize) -> Result<Self, ClientError> {
        Ok(storage.var_ref(i).cast())
    }
    fn store(self, storage: &View<'_, Refs<Any>>, i: usize) -> Result<(), ClientError> {
        storage.set_var_ref(i, self.cast())
    }
    fn clear(storage: &View<'_, Refs<Any>>, i: usize) -> Result<(), ClientError> {
        storage.set_var_ref(i, Ref::NULL)
    }
}

/// The element word's layout byte (bits 8..16): a legacy sequence, one storage object.
const LAYOUT_FLAT: u32 = 0;
/// The element word's layout byte: a tree of chunks under directories.
const LAYOUT_TREE: u32 = 1;

/// How a sequence's elements are stored, from its header's element word. Public for tools
/// that read sequences without a session (`thor inspect`), so that the format lives here once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqLayout {
    /// Written before chunked sequences (element word = the element code): the header points
    /// at one storage object whose capacity is at least the length. Read as it is; the first
    /// write that changes the length converts it ([`SeqView::to_tree`]).
    Flat,
    /// A tree: `leaf` elements per full chunk, `fanout` children per directory.
    Tree {
        /// Elements per full chunk.
        leaf: usize,
        /// Children per directory.
        fanout: usize,
    },
}

impl SeqLayout {
    /// The layout the element word `word` of a sequence of `elem_size`-byte elements names,
    /// checked against pages of `page_size` bytes (the word comes from the store: a chunk size
    /// no object holds is malformed). The error says what is wrong.
    pub fn from_word(word: u32, elem_size: usize, page_size: usize) -> Result<SeqLayout, String> {
        match (word >> 8) & 0xff {
            LAYOUT_FLAT => Ok(SeqLayout::Flat),
            LAYOUT_TREE => {
                let log2 = word >> 16;
                if log2 > chunk_bytes_log2(page_size) || (1usize << log2) < elem_size {
                    return Err(format!(
                        "a sequence's chunks of 2^{log2} bytes do not fit this database"
                    ));
                }
                Ok(SeqLayout::Tree { leaf: (1 << log2) / elem_size, fanout: fanout(page_size) })
            }
            other => Err(format!("a sequence of unknown layout {other}")),
        }
    }

    /// Elements a subtree of `height` levels holds (0: none; 1: one chunk), saturating.
    pub fn cap(self, height: u32) -> usize {
        match self {
            SeqLayout::Flat => usize::MAX,
            SeqLayout::Tree { leaf, fanout } => match height {
                0 => 0,
                h => (1..h).fold(leaf, |c, _| c.saturating_mul(fanout)),
            },
        }
    }

    /// The height of the tree of `len` elements: the lowest whose capacity holds them (past
    /// [`SEQ_HEIGHT_MAX`] for a length no tree this client builds has).
    pub fn height(self, len: usize) -> u32 {
        match self {
            SeqLayout::Flat => u32::from(len > 0),
            SeqLayout::Tree { .. } => {
                (0..=SEQ_HEIGHT_MAX + 1).find(|&h| self.cap(h) >= len).unwrap_or(u32::MAX)
            }
        }
    }
}

/// The element word of a new (tree) sequence of `T` in pages of `page_size` bytes.
fn tree_elem_word<T: Elem>(page_size: usize) -> u32 {
    T::CODE | LAYOUT_TREE << 8 | chunk_bytes_log2(page_size) << 16
}

/// log2 of a full chunk's bytes: [`SEQ_CHUNK_BYTES_LOG2`], or less where one object holds less.
fn chunk_bytes_log2(page_size: usize) -> u32 {
    SEQ_CHUNK_BYTES_LOG2.min(var_bytes_max(page_size).ilog2())
}

/// References one directory (a `thor.Refs` object in one page) holds.
fn fanout(page_size: usize) -> usize {
    (thor_core::limits::max_object_bytes(page_size) - Refs::<Any>::desc().var_offset()) / 4
}

/// A view of a sequence: its header pinned in the cache. Every read and write goes through the
/// transaction like any field's, so concurrency control covers sequences too.
pub struct SeqView<'s, T: Elem> {
    s: &'s Session,
    header: View<'s, Seq<T>>,
}

impl<T: Elem> std::fmt::Debug for SeqView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeqView<{}>(len {})", std::any::type_name::<T>(), self.len())
    }
}

/// The first chunk's capacity: small sequences stay small (a one-chunk sequence's chunk
/// doubles up to a full chunk).
const FIRST_CAPACITY: usize = 4;

impl<'s, T: Elem> SeqView<'s, T> {
    /// Elements in the sequence.
    pub fn len(&self) -> usize {
        self.header.get(Seq::<T>::LEN) as usize
    }

    /// Whether the sequence is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most elements a sequence of `T` can hold: `u32::MAX` (the header's length is a
    /// `u32`), which a tree of at most [`SEQ_HEIGHT_MAX`] levels holds in every page size.
    pub fn capacity_max(&self) -> usize {
        let layout = SeqLayout::Tree {
            leaf: (1 << chunk_bytes_log2(self.s.server().page_size)) / T::SIZE,
            fanout: fanout(self.s.server().page_size),
        };
        layout.cap(SEQ_HEIGHT_MAX).min(u32::MAX as usize)
    }

    /// The layout the header's element word names, checked against this database's pages
    /// (the word comes from the store: a chunk size no object holds is malformed).
    fn layout(&self) -> Result<SeqLayout, ClientError> {
        let word = self.header.get(Seq::<T>::ELEM);
        SeqLayout::from_word(word, T::SIZE, self.s.server().page_size)
            .map_err(ClientError::BadValue)
    }

    /// The layout and the tree's height for `len` elements, refusing a length no tree this
    /// client builds would have.
    fn shape(&self, len: usize) -> Result<(SeqLayout, u32), ClientError> {
        let layout = self.layout()?;
        let height = layout.height(len);
        if height > SEQ_HEIGHT_MAX {
            return Err(ClientError::BadValue(format!("a sequence of length {len} is too tall")));
        }
        Ok((layout, height))
    }

    /// The directory `r` names (a `thor.Refs`); a null one is malformed.
    fn directory(&self, r: Ref<Any>) -> Result<View<'s, Refs<Any>>, ClientError> {
        if r.is_null() {
            return Err(ClientError::BadValue("a sequence's directory is missing".into()));
        }
        self.s.get(r.cast())
    }

    /// The chunk `r` names, checked to hold at least `needed` elements.
    fn chunk(&self, r: Ref<Any>, needed: usize) -> Result<View<'s, T::Storage>, ClientError> {
        if r.is_null() {
            return Err(ClientError::BadValue(format!(
                "a sequence has no storage for {needed} elements"
            )));
        }
        let v = self.s.get(r.cast::<T::Storage>())?;
        if T::capacity(v.var_len()) < needed {
            return Err(ClientError::BadValue(format!(
                "a sequence chunk has room for {} elements, not {needed}",
                T::capacity(v.var_len())
            )));
        }
        Ok(v)
    }

    /// The chunk holding element `i` of a sequence of `len` elements, and `i`'s place in it.
    fn chunk_of(&self, i: usize, len: usize) -> Result<(View<'s, T::Storage>, usize), ClientError> {
        debug_assert!(i < len);
        let (layout, height) = self.shape(len)?;
        let mut r = self.header.get(Seq::<T>::ROOT);
        let at = i;
        let mut i = i;
        for level in (2..=height).rev() {
            let below = layout.cap(level - 1);
            let dir = self.directory(r)?;
            let k = i / below;
            i %= below;
            if k >= dir.var_len() {
                return Err(ClientError::BadValue("a sequence's directory is short".into()));
            }
            r = dir.var_ref(k);
        }
        // The chunk must hold every element of the sequence that falls in it.
        let in_chunk = (len - (at - i)).min(layout.cap(1));
        Ok((self.chunk(r, in_chunk)?, i))
    }

    /// Element `i`. Fails with [`ClientError::Usage`] past the end.
    pub fn get(&self, i: usize) -> Result<T, ClientError> {
        let len = self.len();
        if i >= len {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        let (chunk, at) = self.chunk_of(i, len)?;
        T::load(&chunk, at)
    }

    /// Replaces element `i`: rewrites one chunk. Fails with [`ClientError::Usage`] past the
    /// end.
    pub fn set(&self, i: usize, value: T) -> Result<(), ClientError> {
        let len = self.len();
        if i >= len {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        let (chunk, at) = self.chunk_of(i, len)?;
        value.store(&chunk, at)
    }

    /// Converts a legacy one-object sequence to a tree before a write that changes its length.
    /// Up to a chunk's worth of elements the storage object serves as the tree's one chunk
    /// (only the element word changes); past it the elements move to new chunks.
    fn to_tree(&self) -> Result<SeqLayout, ClientError> {
        let layout = self.layout()?;
        if layout != SeqLayout::Flat {
            return Ok(layout);
        }
        let elems = self.to_vec()?;
        let word = tree_elem_word::<T>(self.s.server().page_size);
        self.header.set(Seq::<T>::ELEM, word)?;
        let tree = self.layout()?;
        if elems.len() > tree.cap(1) {
            self.header.set(Seq::<T>::ROOT, Ref::NULL)?;
            self.header.set(Seq::<T>::LEN, 0)?;
            self.extend_from_slice(&elems)?;
        }
        Ok(tree)
    }

    /// Appends `value`. It writes the last chunk and the header, and once per chunk a
    /// directory: a small record in the log, whatever the length. Fails with
    /// [`ClientError::TooLong`] past [`Self::capacity_max`].
    pub fn push(&self, value: T) -> Result<(), ClientError> {
        let layout = self.to_tree()?;
        let len = self.len();
        let max = self.capacity_max();
        if len >= max {
            return Err(ClientError::TooLong { what: "sequence", len: len + 1, max });
        }
        let (_, old_height) = self.shape(len)?;
        let height = layout.height(len + 1);
        let root = self.header.get(Seq::<T>::ROOT);
        if height == 1 {
            // One chunk, doubled (copied) until it is a full one.
            let chunk = if root.is_null() && len == 0 {
                self.grow(None, 0, layout.cap(1))?
            } else {
                match self.chunk(root, len)? {
                    c if T::capacity(c.var_len()) > len => c,
                    c => self.grow(Some(c), len, layout.cap(1))?,
                }
            };
            value.store(&chunk, len)?;
            return self.header.set(Seq::<T>::LEN, len as u32 + 1);
        }
        if height > old_height {
            // The tree is full: a new root above it, the old root its first child.
            let SeqLayout::Tree { fanout, .. } = layout else { unreachable!("converted") };
            let dir = self.s.create::<Refs<Any>>(fanout)?;
            dir.set_var_ref(0, root)?;
            self.header.set(Seq::<T>::ROOT, dir.as_ref().cast())?;
        }
        let (chunk, at) = self.path_for_append(layout, height, len)?;
        value.store(&chunk, at)?;
        self.header.set(Seq::<T>::LEN, len as u32 + 1)
    }

    /// The chunk element `len` goes to in a tree of `height` (at least 2) levels, creating
    /// the directories and the chunk it needs, and the element's place in the chunk.
    fn path_for_append(
        &self,
        layout: SeqLayout,
        height: u32,
        len: usize,
    ) -> Result<(View<'s, T::Storage>, usize), ClientError> {
        let SeqLayout::Tree { fanout, leaf } = layout else { unreachable!("converted") };
        let mut dir = self.directory(self.header.get(Seq::<T>::ROOT))?;
        let mut i = len;
        for level in (2..=height).rev() {
            let below = layout.cap(level - 1);
            let k = i / below;
            i %= below;
            if k >= dir.var_len() {
                return Err(ClientError::BadValue("a sequence's directory is short".into()));
            }
            let child = dir.var_ref(k);
            if level == 2 {
                let chunk = if child.is_null() {
                    let c = self.s.create_dyn::<T::Storage>(T::var_len(leaf))?;
                    dir.set_var_ref(k, c.as_ref().cast())?;
                    c
                } else {
                    self.chunk(child, i + 1)?
                };
                return Ok((chunk, i));
            }
            dir = if child.is_null() {
                let d = self.s.create::<Refs<Any>>(fanout)?;
                dir.set_var_ref(k, d.as_ref().cast())?;
                d
            } else {
                self.directory(child)?
            };
        }
        unreachable!("a tree of height {height} >= 2 ends in a chunk")
    }

    /// A new one-chunk storage with room for more than `len` elements (at most `full`),
    /// holding the first `len` elements of `old`; the header points at it.
    fn grow(
        &self,
        old: Option<View<'s, T::Storage>>,
        len: usize,
        full: usize,
    ) -> Result<View<'s, T::Storage>, ClientError> {
        let capacity = (len * 2).clamp(FIRST_CAPACITY.min(full), full);
        debug_assert!(capacity > len);
        let new = self.s.create_dyn::<T::Storage>(T::var_len(capacity))?;
        if let Some(old) = old {
            for i in 0..len {
                T::load(&old, i)?.store(&new, i)?;
            }
        }
        self.header.set(Seq::<T>::ROOT, new.as_ref().cast())?;
        Ok(new)
    }

    /// Removes and returns the last element.
    pub fn pop(&self) -> Result<Option<T>, ClientError> {
        let len = self.len();
        if len == 0 {
            return Ok(None);
        }
        let v = self.get(len - 1)?;
        self.truncate(len - 1)?;
        Ok(Some(v))
    }

    /// Shortens the sequence to `len` elements (nothing if it is not longer). Chunks and
    /// directories wholly past the end are unhooked (their parents' slots nulled, so their
    /// references keep nothing reachable), the last kept chunk's slots past the end cleared,
    /// and the tree loses the levels the shorter length does not need.
    pub fn truncate(&self, len: usize) -> Result<(), ClientError> {
        let old = self.len();
        if len >= old {
            return Ok(());
        }
        let layout = self.to_tree()?;
        let (_, old_height) = self.shape(old)?;
        let height = layout.height(len);
        let mut root = self.header.get(Seq::<T>::ROOT);
        if len == 0 {
            self.header.set(Seq::<T>::ROOT, Ref::NULL)?;
            return self.header.set(Seq::<T>::LEN, 0);
        }
        self.cut(layout, root, old_height, len, old)?;
        for _ in height..old_height {
            root = self.directory(root)?.var_ref(0);
        }
        self.header.set(Seq::<T>::ROOT, root)?;
        self.header.set(Seq::<T>::LEN, len as u32)
    }

    /// Keeps the first `keep` of the `have` elements under node `r` of `level` levels.
    fn cut(
        &self,
        layout: SeqLayout,
        r: Ref<Any>,
        level: u32,
        keep: usize,
        have: usize,
    ) -> Result<(), ClientError> {
        debug_assert!(0 < keep && keep < have);
        if level == 1 {
            let chunk = self.chunk(r, have)?;
            return (keep..have).try_for_each(|i| T::clear(&chunk, i));
        }
        let dir = self.directory(r)?;
        let below = layout.cap(level - 1);
        let used = have.div_ceil(below).min(dir.var_len());
        for k in keep.div_ceil(below)..used {
            dir.set_var_ref(k, Ref::NULL)?;
        }
        let (k, rest) = (keep / below, keep % below);
        if rest > 0 {
            let child_have = (have - k * below).min(below);
            self.cut(layout, dir.var_ref(k), level - 1, rest, child_have)?;
        }
        Ok(())
    }

    /// Removes every element (its chunks become unreachable).
    pub fn clear(&self) -> Result<(), ClientError> {
        self.truncate(0)
    }

    /// Appends every element of `values`.
    pub fn extend_from_slice(&self, values: &[T]) -> Result<(), ClientError> {
        values.iter().try_for_each(|v| self.push(*v))
    }

    /// The elements, in order.
    pub fn to_vec(&self) -> Result<Vec<T>, ClientError> {
        let mut out = Vec::with_capacity(self.len());
        for v in self.iter() {
            out.push(v?);
        }
        Ok(out)
    }

    /// The elements in order, read lazily a chunk at a time (one path from the root per chunk,
    /// then the chunk's elements). A malformed tree ends the iteration with its error.
    pub fn iter(&self) -> SeqIter<'_, 's, T> {
        SeqIter { chunks: Chunks::new(self, self.len()), next: 0 }
    }

    /// Removes and returns element `i`, moving every later element one place down: it reads
    /// and rewrites every chunk from `i`'s to the last, `O(len - i)` (use
    /// [`Self::swap_remove`] where order does not matter). Fails with [`ClientError::Usage`]
    /// past the end.
    pub fn remove(&self, i: usize) -> Result<T, ClientError> {
        let len = self.len();
        if i >= len {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        self.to_tree()?;
        let removed = self.get(i)?;
        let mut chunks = Chunks::new(self, len);
        for j in i + 1..len {
            let v = chunks.load(j)?;
            chunks.store(j - 1, v)?;
        }
        drop(chunks);
        self.truncate(len - 1)?;
        Ok(removed)
    }

    /// Elements a chunk of a `len`-element sequence holds before the next begins.
    fn chunk_elems(&self, len: usize) -> Result<usize, ClientError> {
        let (layout, height) = self.shape(len)?;
        Ok(if height <= 1 { usize::MAX } else { layout.cap(1) })
    }

    /// Removes and returns element `i`, moving the last element into its place: two chunks
    /// written, `O(height)`. Fails with [`ClientError::Usage`] past the end.
    pub fn swap_remove(&self, i: usize) -> Result<T, ClientError> {
        let len = self.len();
        if i >= len {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        let removed = self.get(i)?;
        let last = self.get(len - 1)?;
        self.truncate(len - 1)?;
        if i < len - 1 {
            self.set(i, last)?;
        }
        Ok(removed)
    }
}

/// A chunk a pass holds: its view, its first element's index, and its element count.
type HeldChunk<'s, T> = (View<'s, <T as Elem>::Storage>, usize, usize);

/// The chunks of a sequence that one pass over it is reading: the last two stay pinned, so
/// that a pass that moves elements from one chunk to the one before it descends from the root
/// once per chunk, not once per element.
struct Chunks<'v, 's, T: Elem> {
    /// The sequence.
    seq: &'v SeqView<'s, T>,
    /// The length the pass works on.
    len: usize,
    /// Chunks read.
    held: [Option<HeldChunk<'s, T>>; 2],
    /// Which of `held` the next chunk read replaces.
    victim: usize,
}

impl<'v, 's, T: Elem> Chunks<'v, 's, T> {
    fn new(seq: &'v SeqView<'s, T>, len: usize) -> Self {
        Chunks { seq, len, held: [None, None], victim: 0 }
    }

    /// The chunk holding element `i` (below the pass's length) and `i`'s place in it.
    fn at(&mut self, i: usize) -> Result<(&View<'s, T::Storage>, usize), ClientError> {
        let hit = self.held.iter().position(|h| {
            h.as_ref().is_some_and(|(_, start, count)| *start <= i && i < start + count)
        });
        let k = match hit {
            Some(k) => k,
            None => {
                let (chunk, at) = self.seq.chunk_of(i, self.len)?;
                let count = self.seq.chunk_elems(self.len)?.min(T::capacity(chunk.var_len()));
                let k = self.victim;
                self.victim ^= 1;
                self.held[k] = Some((chunk, i - at, count));
                k
            }
        };
        let (chunk, start, _) = self.held[k].as_ref().expect("just filled");
        Ok((chunk, i - start))
    }

    fn load(&mut self, i: usize) -> Result<T, ClientError> {
        let (chunk, at) = self.at(i)?;
        T::load(chunk, at)
    }

    fn store(&mut self, i: usize, v: T) -> Result<(), ClientError> {
        let (chunk, at) = self.at(i)?;
        v.store(chunk, at)
    }
}

/// The elements of a sequence in order ([`SeqView::iter`]): the chunk being read stays pinned
/// until the iteration moves past it.
pub struct SeqIter<'v, 's, T: Elem> {
    /// The chunks being read.
    chunks: Chunks<'v, 's, T>,
    /// The next element's index.
    next: usize,
}

impl<T: Elem> std::fmt::Debug for SeqIter<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeqIter(at {} of {})", self.next, self.chunks.len)
    }
}

impl<T: Elem> Iterator for SeqIter<'_, '_, T> {
    type Item = Result<T, ClientError>;

    /// The next element; the length is the one when the iteration began, and an error ends
    /// the iteration.
    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        if i >= self.chunks.len {
            return None;
        }
        let v = self.chunks.load(i);
        self.next = if v.is_ok() { i + 1 } else { self.chunks.len };
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.chunks.len - self.next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_as_tall_as_its_length_needs() {
        let l = SeqLayout::Tree { leaf: 256, fanout: 2039 };
        let lens = [0, 1, 256, 257, 256 * 2039, 256 * 2039 + 1];
        assert_eq!(lens.map(|n| l.height(n)), [0, 1, 1, 2, 2, 3]);
        assert_eq!(l.cap(3), 256 * 2039 * 2039);
        assert_eq!((chunk_bytes_log2(8192), fanout(8192)), (10, 2039));
        assert_eq!((chunk_bytes_log2(1024), fanout(1024)), (9, 247));
        // Every page size holds u32::MAX elements of every element size within the bound.
        for page in [1024, 2048, 4096, 8192, 16384, 32768] {
            for size in [1, 4, 8] {
                let l = SeqLayout::Tree {
                    leaf: (1 << chunk_bytes_log2(page)) / size,
                    fanout: fanout(page),
                };
                assert!(l.height(u32::MAX as usize) <= SEQ_HEIGHT_MAX, "page {page} size {size}");
            }
        }
    }
}
