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
//! - **A sequence** ([`Seq<T>`], class `thor.Seq`) is a small header (length, element type,
//!   storage) that a program references, and a storage object with room for more elements
//!   than the length. [`SeqView::push`] past the room moves the elements to a storage object
//!   twice as large and repoints the header, so every reference to the sequence stays valid.
//!
//! Both are bounded by the largest object a page holds ([`max_str_bytes`],
//! [`SeqView::capacity_max`]: 8,156 bytes or 2,039 references in 8 KiB pages); past it they
//! fail with [`ClientError::TooLong`]. A storage object that a sequence outgrew, and a string
//! that a field no longer points to, stay in the database: thor has no garbage collector yet.
//!
//! Stored values are not trusted: a string that is not UTF-8, a sequence whose length exceeds
//! its storage or whose element type differs from the program's give
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
//! let p = s.create::<Person>(0)?;
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
        /// [`Elem::CODE`] of the element type.
        elem: u32,
        /// The storage object: `thor.Bytes` for values, `thor.Refs` for references; null
        /// while the sequence never held anything.
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
        let h = self.create::<Seq<T>>(0)?;
        h.set(Seq::<T>::ELEM, T::CODE)?;
        Ok(h.as_ref())
    }

    /// A view of sequence `r`. Fails with [`ClientError::BadValue`] if it holds elements of
    /// another type.
    pub fn seq<T: Elem>(&self, r: Ref<Seq<T>>) -> Result<SeqView<'_, T>, ClientError> {
        let header = self.get(r)?;
        let code = header.get(Seq::<T>::ELEM);
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
    const STORAGE: Field<Seq<T>, Ref<T::Storage>> = Field::at(SeqHeader::storage.offset());
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

/// A type a [`Seq`] can hold: the numbers, `bool` and `u8` as values in a byte storage
/// object, `Ref<U>` in a reference storage object.
pub trait Elem: Copy + 'static {
    /// Identifies the element type in the stored header.
    const CODE: u32;
    /// The storage object's class.
    type Storage: Class;
    /// Elements a storage object of `var_len` holds.
    fn capacity(var_len: usize) -> usize;
    /// The storage `var_len` for `capacity` elements.
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

/// The first storage object's capacity: small sequences stay small.
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

    /// The most elements a sequence of `T` can hold in this database (one storage object
    /// in one page).
    pub fn capacity_max(&self) -> usize {
        let page_size = self.s.server().page_size;
        T::capacity(match T::Storage::BUILTIN {
            Some(b) if b == thor_core::builtin::REFS => {
                (thor_core::limits::max_object_bytes(page_size) - Refs::<Any>::desc().var_offset())
                    / 4
            }
            _ => var_bytes_max(page_size),
        })
    }

    /// The storage object, checked to hold at least `len` elements; `None` before the first
    /// push.
    fn storage(&self) -> Result<Option<View<'s, T::Storage>>, ClientError> {
        let r = self.header.get(Seq::<T>::STORAGE);
        if r.is_null() {
            if !self.is_empty() {
                return Err(ClientError::BadValue(format!(
                    "a sequence of length {} has no storage",
                    self.len()
                )));
            }
            return Ok(None);
        }
        let v = self.s.get(r)?;
        if T::capacity(v.var_len()) < self.len() {
            return Err(ClientError::BadValue(format!(
                "a sequence of length {} has room for {}",
                self.len(),
                T::capacity(v.var_len())
            )));
        }
        Ok(Some(v))
    }

    /// Element `i`. Fails with [`ClientError::Usage`] past the end.
    pub fn get(&self, i: usize) -> Result<T, ClientError> {
        if i >= self.len() {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        let storage = self.storage()?.expect("a non-empty sequence has storage");
        T::load(&storage, i)
    }

    /// Replaces element `i`. Fails with [`ClientError::Usage`] past the end.
    pub fn set(&self, i: usize, value: T) -> Result<(), ClientError> {
        if i >= self.len() {
            return Err(ClientError::Usage("sequence index out of range"));
        }
        let storage = self.storage()?.expect("a non-empty sequence has storage");
        value.store(&storage, i)
    }

    /// Appends `value`, moving the elements to a storage object twice as large when the
    /// current one is full. Fails with [`ClientError::TooLong`] past [`Self::capacity_max`].
    pub fn push(&self, value: T) -> Result<(), ClientError> {
        let len = self.len();
        let storage = match self.storage()? {
            Some(v) if T::capacity(v.var_len()) > len => v,
            old => self.grow(old, len)?,
        };
        value.store(&storage, len)?;
        self.header.set(Seq::<T>::LEN, len as u32 + 1)
    }

    /// A new storage object with room for more than `len` elements, holding the first `len`
    /// elements of `old`; the header points at it.
    fn grow(
        &self,
        old: Option<View<'s, T::Storage>>,
        len: usize,
    ) -> Result<View<'s, T::Storage>, ClientError> {
        let max = self.capacity_max();
        if len >= max {
            return Err(ClientError::TooLong { what: "sequence", len: len + 1, max });
        }
        let capacity = (len * 2).clamp(FIRST_CAPACITY, max);
        let new = self.s.create::<T::Storage>(T::var_len(capacity))?;
        if let Some(old) = old {
            for i in 0..len {
                T::load(&old, i)?.store(&new, i)?;
            }
        }
        self.header.set(Seq::<T>::STORAGE, new.as_ref())?;
        Ok(new)
    }

    /// Removes and returns the last element.
    pub fn pop(&self) -> Result<Option<T>, ClientError> {
        let len = self.len();
        if len == 0 {
            return Ok(None);
        }
        let storage = self.storage()?.expect("a non-empty sequence has storage");
        let v = T::load(&storage, len - 1)?;
        T::clear(&storage, len - 1)?;
        self.header.set(Seq::<T>::LEN, len as u32 - 1)?;
        Ok(Some(v))
    }

    /// Shortens the sequence to `len` elements (nothing if it is not longer).
    pub fn truncate(&self, len: usize) -> Result<(), ClientError> {
        let old = self.len();
        if len >= old {
            return Ok(());
        }
        let storage = self.storage()?.expect("a non-empty sequence has storage");
        for i in len..old {
            T::clear(&storage, i)?;
        }
        self.header.set(Seq::<T>::LEN, len as u32)
    }

    /// Removes every element (the storage stays, for the next pushes).
    pub fn clear(&self) -> Result<(), ClientError> {
        self.truncate(0)
    }

    /// Appends every element of `values`.
    pub fn extend_from_slice(&self, values: &[T]) -> Result<(), ClientError> {
        values.iter().try_for_each(|v| self.push(*v))
    }

    /// The elements, in order.
    pub fn to_vec(&self) -> Result<Vec<T>, ClientError> {
        let len = self.len();
        let Some(storage) = self.storage()? else { return Ok(Vec::new()) };
        (0..len).map(|i| T::load(&storage, i)).collect()
    }
}
