//! A persistent ordered map: `Map<K, V>`, a B+-tree built of thor objects.
//!
//! # What it is
//!
//! A map is a header object (class `thor.Map`: the root node, the key and value types) and
//! a tree of nodes (class `thor.MapNode`), each one object of at most a page. Because every
//! part is an ordinary thor object, the client cache (HAC) caches the nodes a program uses,
//! CLOCC validates every node a transaction read or wrote, and the references between nodes
//! (and from leaves to values of type `Ref<T>`) are real reference slots that `thor check`
//! and a future collector follow.
//!
//! ```text
//!   thor.Map ──root──► internal node (level 1)  [ "" | "m" ]
//!                           │                   │
//!                           ▼                   ▼
//!                 leaf (level 0) ──next──► leaf (level 0) ──next──► null
//!                 a=1 c=7 f=2              m=3 q=9 x=4
//! ```
//!
//! Keys are stored in an order-preserving byte encoding ([`MapKey`]): `u64` big-endian,
//! `i64` big-endian with the sign bit flipped, strings as UTF-8 and byte strings as
//! themselves, so the tree compares bytes and never decodes a key to find its place. A key is
//! at most [`MapView::key_bytes_max`] bytes (1,024 in 8 KiB pages); a longer one is
//! [`ClientError::TooLong`].
//!
//! # Node layout
//!
//! The layout is `thor_core::mapnode`'s, shared with the server (which reads leaves to
//! merge commits, `docs/clocc.md`, "Map leaves"):
//!
//! ```text
//!  offset  0: class word (the object header)
//!          4: count   u32  entries in the node
//!          8: level   u32  0 for a leaf, the height above the leaves otherwise
//!         12: next    ref  the next leaf in key order (null in internal nodes and the last leaf)
//!         16: slot[0..128] refs: a child per entry in internal nodes, a value per entry in
//!                          leaves whose values are references; null otherwise
//!        528: var count u32, then the entry area (bytes, sized to fill a page):
//!             dir[0..count] u16  where entry i (its key_len word) starts in the area;
//!                                the directory is in key order
//!             entry: key_len u16, key bytes, value bytes (leaves of non-reference values)
//! ```
//!
//! The map writes the entries packed in key order right after the directory, so that an
//! insert or remove splices one entry in or out without decoding the others; a reader
//! relies only on the directory.
//!
//! In an internal node entry `i` holds the smallest key child `i` may hold (a separator)
//! and its child in `slot[i]`; entry 0's key is never compared (it is the separator the
//! parent holds for this node, or empty in the leftmost node of a level). A lookup takes the
//! last entry whose key is at most the one it looks for. Internal nodes and leaves of
//! reference values hold at most [`MAP_FANOUT`] entries; leaves of other values as many as
//! the area holds (381 `u64 → u64` entries in 8 KiB pages).
//!
//! Everything read from a node is checked (entry offsets within the area, the count within
//! the fanout, levels falling by one on the way down, keys rising along the leaf chain): a
//! malformed or foreign map gives [`ClientError::BadValue`], never a panic or a loop.
//!
//! # Concurrency (what CLOCC sees)
//!
//! - A lookup reads the header and the path from the root to one leaf.
//! - An insert or remove reads that path and writes the leaf. Two transactions that change
//!   different leaves do not conflict: they share reads of the internal nodes, and CLOCC
//!   only refuses a read of something another transaction wrote.
//! - A split writes the leaf, a new leaf and the parent (and further up when the parent is
//!   full; a root split writes the header). A merge writes the survivor of two siblings and
//!   the parent; a redistribution both siblings and the parent. So a split or merge conflicts
//!   with every concurrent operation that read the parent: about one insert in half a leaf's
//!   entries (190 of `u64 → u64` in 8 KiB pages) splits.
//! - Two inserts or removes of different keys in one leaf both write that leaf. The point
//!   operations (`get`, `contains_key`, and an `insert` or `remove` that splices one entry
//!   in place) log what they read and did per leaf (`crate::leaflog`), the commit carries
//!   that as a leaf delta, and the server merges a commit that CLOCC would refuse only for
//!   such leaves onto their newest versions (`docs/clocc.md`, "Map leaves"): both commit.
//!   A split, merge or scan rules the leaf (or the map) out, and maps of references log
//!   nothing; those conflict as before (and [`crate::Session::run`] runs the loser again).
//! - There is no global count: [`MapView::len`] walks the leaf chain and sums their counts,
//!   reading every leaf (so it costs a fetch per uncached leaf, and it conflicts with any
//!   concurrent change to the map). An exact counter in the header would have made every
//!   insert and remove conflict with every other.
//!
//! # Deletion and space
//!
//! A node is *underfull* when it holds fewer than two entries, or less than a quarter of its
//! bytes and of its slots. A remove that leaves a node other than the root underfull merges
//! it with a neighbour under the same parent when the two fit in one node (the parent loses
//! an entry and is treated the same way), and otherwise shares the two nodes' entries evenly
//! between them (the parent's separator changes). A root with a single child gives way to
//! that child. Splits leave both halves at least three-eighths full. So after every
//! operation no node but the root is underfull, with one exception: a separator that a
//! redistribution made shorter leaves its parent a little emptier without rebalancing it.
//! Leaves are therefore at least a quarter full by bytes (or hold a quarter of the fanout of
//! references): a map takes at most about four pages per page of entries, plus the internal
//! nodes. The nodes a merge leaves behind and the ones [`MapView::clear`] drops are not reused
//! (thor has no collector yet).
//!
//! # Example
//!
//! ```
//! # fn demo(s: &thor_client::Session) -> Result<(), thor_client::ClientError> {
//! let users = s.create_map::<String, u64>()?;
//! let m = s.map(users)?;
//! m.insert("ada".to_string(), 1815)?;
//! m.insert("grace".to_string(), 1906)?;
//! assert_eq!(m.get("ada")?, Some(1815));
//! let names: Vec<String> = m.iter()?.map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(names, ["ada", "grace"]);
//! # Ok(()) }
//! ```

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use thor_core::ClassDesc;
use thor_core::mapnode::{
    self, COUNT_AT, DIR_BYTES, KLEN_BYTES, LEVEL_AT, NEXT_AT, SLOTS_AT, area_bytes, entry_bytes,
    splice_in, splice_out,
};

use crate::error::ClientError;
use crate::leaflog::At;
use crate::session::{Session, View};
use crate::typed::{Any, Class, Field, NoVar, OptionalValue, Ref, VarBytes};

/// Reference slots of a node: the most children of an internal node and entries of a leaf
/// of reference values (`thor_core::mapnode::FANOUT`).
pub const MAP_FANOUT: usize = mapnode::FANOUT;

/// The longest key, in bytes of its encoding, in pages large enough
/// (`thor_core::mapnode::KEY_BYTES_MAX`; [`MapView::key_bytes_max`] is smaller in small
/// pages).
pub const MAP_KEY_BYTES_MAX: usize = mapnode::KEY_BYTES_MAX;

/// The largest value stored in a leaf's bytes (`[u8; N]` values up to this many bytes): a
/// node must still hold four entries of the longest keys with such values in the smallest
/// pages' area.
pub const MAP_VALUE_BYTES_MAX: usize = 64;

/// Most levels of a tree (`thor_core::mapnode::HEIGHT_MAX`): a longer path is a malformed
/// map, not a deep one.
pub const MAP_HEIGHT_MAX: u32 = mapnode::HEIGHT_MAX;

const _: () = assert!(area_bytes(thor_core::limits::PAGE_SIZE_MIN) / 4 > MAP_VALUE_BYTES_MAX + 8);

/// The class of a map's nodes (see the module documentation for its layout).
#[derive(Debug)]
pub enum MapNode {}

impl MapNode {
    const COUNT: Field<MapNode, u32> = Field::at(COUNT_AT);
    const LEVEL: Field<MapNode, u32> = Field::at(LEVEL_AT);
    const NEXT: Field<MapNode, Ref<MapNode>> = Field::at(NEXT_AT);

    /// Reference slot `i` (`i < MAP_FANOUT`, so within the fixed part).
    fn slot_field(i: usize) -> Field<MapNode, Ref<Any>> {
        assert!(i < MAP_FANOUT, "map node slot {i} out of range");
        Field::at(SLOTS_AT + 4 * i)
    }
}

impl Class for MapNode {
    const NAME: &'static str = mapnode::NAME;
    type Var = VarBytes;
    const FIXED_BYTES: usize = mapnode::FIXED_BYTES;
    fn desc() -> ClassDesc {
        mapnode::desc()
    }
    #[inline]
    fn slot() -> usize {
        static SLOT: std::sync::atomic::AtomicUsize =
            std::sync::atomic::AtomicUsize::new(usize::MAX);
        match SLOT.load(std::sync::atomic::Ordering::Relaxed) {
            usize::MAX => crate::typed::first_class_slot(&SLOT),
            s => s,
        }
    }
}

crate::class! {
    /// The stored layout of a map's header (`Map<K, V>` is its typed face).
    pub class MapHeader("thor.Map") {
        /// The root node: a leaf while the map fits in one.
        root: Ref<MapNode>,
        /// [`MapKey::CODE`] of the key type.
        key: u32,
        /// [`MapValue::CODE`] of the value type.
        value: u32,
    }
}

/// A persistent ordered map from `K` to `V`: the class of its header object. Reach it with
/// [`Session::create_map`] and [`Session::map`].
pub struct Map<K, V>(PhantomData<fn() -> (K, V)>);

impl<K, V> std::fmt::Debug for Map<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Map<{}, {}>", std::any::type_name::<K>(), std::any::type_name::<V>())
    }
}

impl<K: 'static, V: 'static> Class for Map<K, V> {
    const NAME: &'static str = "thor.Map";
    type Var = NoVar;
    const FIXED_BYTES: usize = MapHeader::FIXED_BYTES;
    fn desc() -> ClassDesc {
        MapHeader::desc()
    }
    // Every `Map<K, V>` is the one stored class `thor.Map`, so they share its slot.
    fn slot() -> usize {
        MapHeader::slot()
    }
}

impl<K: 'static, V: 'static> Map<K, V> {
    const ROOT: Field<Map<K, V>, Ref<MapNode>> = Field::at(MapHeader::root.offset());
    const KEY: Field<Map<K, V>, u32> = Field::at(MapHeader::key.offset());
    const VALUE: Field<Map<K, V>, u32> = Field::at(MapHeader::value.offset());
}

// ------------------------------------------------------------------------------------------
// Keys and values.

/// A type whose order-preserving encoding can look a key up: the key types and their
/// borrowed forms (`str` for `String`, `[u8]` for `Vec<u8>`).
pub trait KeyEncode {
    /// Appends the encoding: byte order is the key order.
    fn encode_key(&self, out: &mut Vec<u8>);
}

/// A key type of a [`Map`].
pub trait MapKey: KeyEncode + Sized + 'static {
    /// Identifies the key type in the stored header.
    const CODE: u32;
    /// The key an encoding stands for. Fails with [`ClientError::BadValue`] on bytes that no
    /// key of this type encodes to.
    fn decode_key(bytes: &[u8]) -> Result<Self, ClientError>;
}

/// Keys whose encoding is their bytes, so that [`MapView::prefix`] means a prefix of the key.
pub trait PrefixKey: MapKey {}

impl KeyEncode for u64 {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_be_bytes());
    }
}
impl MapKey for u64 {
    const CODE: u32 = 1;
    fn decode_key(bytes: &[u8]) -> Result<Self, ClientError> {
        let b: [u8; 8] = bytes.try_into().map_err(|_| bad("a u64 key is not 8 bytes"))?;
        Ok(u64::from_be_bytes(b))
    }
}

/// The sign bit flipped makes negative numbers sort before positive ones bytewise.
const I64_FLIP: u64 = 1 << 63;

impl KeyEncode for i64 {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&((*self as u64) ^ I64_FLIP).to_be_bytes());
    }
}
impl MapKey for i64 {
    const CODE: u32 = 2;
    fn decode_key(bytes: &[u8]) -> Result<Self, ClientError> {
        let b: [u8; 8] = bytes.try_into().map_err(|_| bad("an i64 key is not 8 bytes"))?;
        Ok((u64::from_be_bytes(b) ^ I64_FLIP) as i64)
    }
}

impl KeyEncode for str {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}
impl KeyEncode for String {
    fn encode_key(&self, out: &mut Vec<u8>) {
        self.as_str().encode_key(out)
    }
}
impl MapKey for String {
    const CODE: u32 = 3;
    fn decode_key(bytes: &[u8]) -> Result<Self, ClientError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| bad("a string key is not UTF-8"))
    }
}
impl PrefixKey for String {}

impl KeyEncode for [u8] {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}
impl KeyEncode for Vec<u8> {
    fn encode_key(&self, out: &mut Vec<u8>) {
        self.as_slice().encode_key(out)
    }
}
impl MapKey for Vec<u8> {
    const CODE: u32 = 4;
    fn decode_key(bytes: &[u8]) -> Result<Self, ClientError> {
        Ok(bytes.to_vec())
    }
}
impl PrefixKey for Vec<u8> {}

/// A value type of a [`Map`]: the field types of the typed API. Numbers, `bool`, byte
/// arrays and optional numbers are stored in the leaf's bytes; `Ref<T>` and `Option<Ref<T>>`
/// in the leaf's reference slots, so that they are references the store knows of.
pub trait MapValue: Copy + 'static {
    /// Identifies the value type in the stored header.
    const CODE: u32;
    /// Whether the value is a reference (stored in a slot, not in bytes).
    const IS_REF: bool;
    /// Bytes of the value in the leaf (0 for references).
    const BYTES: usize;
    /// Writes a non-reference value into `out` (`BYTES` long).
    fn to_bytes(self, out: &mut [u8]);
    /// Reads a non-reference value from `b` (`BYTES` long).
    fn from_bytes(b: &[u8]) -> Self;
    /// A reference value as an untyped reference.
    fn to_ref(self) -> Ref<Any>;
    /// A reference value from an untyped reference.
    fn from_ref(r: Ref<Any>) -> Self;
}

macro_rules! bytes_value {
    ($t:ty, $code:expr, $n:expr, $from:expr, $to:expr) => {
        impl MapValue for $t {
            const CODE: u32 = $code;
            const IS_REF: bool = false;
            const BYTES: usize = $n;
            fn to_bytes(self, out: &mut [u8]) {
                let b: [u8; $n] = $to(self);
                out.copy_from_slice(&b);
            }
            fn from_bytes(b: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(b);
                $from(a)
            }
            fn to_ref(self) -> Ref<Any> {
                unreachable!("not a reference value")
            }
            fn from_ref(_: Ref<Any>) -> Self {
                unreachable!("not a reference value")
            }
        }
    };
}
bytes_value!(u32, 1, 4, u32::from_le_bytes, u32::to_le_bytes);
bytes_value!(i32, 2, 4, i32::from_le_bytes, i32::to_le_bytes);
bytes_value!(f32, 3, 4, f32::from_le_bytes, f32::to_le_bytes);
bytes_value!(u64, 4, 8, u64::from_le_bytes, u64::to_le_bytes);
bytes_value!(i64, 5, 8, i64::from_le_bytes, i64::to_le_bytes);
bytes_value!(f64, 6, 8, f64::from_le_bytes, f64::to_le_bytes);
bytes_value!(bool, 7, 1, |b: [u8; 1]| b[0] != 0, |v: bool| [u8::from(v)]);

/// The code of `Ref<T>` values; `Option<Ref<T>>` has its own, and `Option<T>` of a number is
/// `OPTION_CODE + T::CODE`, `[u8; N]` `ARRAY_CODE + N`.
const REF_CODE: u32 = 8;
const OPTION_REF_CODE: u32 = 9;
const ARRAY_CODE: u32 = 0x100;
const OPTION_CODE: u32 = 0x1000;

impl<const N: usize> MapValue for [u8; N] {
    const CODE: u32 = ARRAY_CODE + N as u32;
    const IS_REF: bool = false;
    const BYTES: usize = {
        assert!(N <= MAP_VALUE_BYTES_MAX, "map values of bytes are at most 64 bytes");
        N
    };
    fn to_bytes(self, out: &mut [u8]) {
        out.copy_from_slice(&self);
    }
    fn from_bytes(b: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        a
    }
    fn to_ref(self) -> Ref<Any> {
        unreachable!("not a reference value")
    }
    fn from_ref(_: Ref<Any>) -> Self {
        unreachable!("not a reference value")
    }
}

/// An optional number is a tag byte (0: `None`) and the value.
impl<T: OptionalValue + MapValue> MapValue for Option<T> {
    const CODE: u32 = OPTION_CODE + T::CODE;
    const IS_REF: bool = false;
    const BYTES: usize = 1 + T::BYTES;
    fn to_bytes(self, out: &mut [u8]) {
        match self {
            None => out.fill(0),
            Some(v) => {
                out[0] = 1;
                v.to_bytes(&mut out[1..]);
            }
        }
    }
    fn from_bytes(b: &[u8]) -> Self {
        if b[0] == 0 { None } else { Some(T::from_bytes(&b[1..])) }
    }
    fn to_ref(self) -> Ref<Any> {
        unreachable!("not a reference value")
    }
    fn from_ref(_: Ref<Any>) -> Self {
        unreachable!("not a reference value")
    }
}

impl<T: ?Sized + 'static> MapValue for Ref<T> {
    const CODE: u32 = REF_CODE;
    const IS_REF: bool = true;
    const BYTES: usize = 0;
    fn to_bytes(self, _: &mut [u8]) {
        unreachable!("a reference value")
    }
    fn from_bytes(_: &[u8]) -> Self {
        unreachable!("a reference value")
    }
    fn to_ref(self) -> Ref<Any> {
        self.cast()
    }
    fn from_ref(r: Ref<Any>) -> Self {
        r.cast()
    }
}

/// An optional reference is a reference slot: null is `None`.
impl<T: ?Sized + 'static> MapValue for Option<Ref<T>> {
    const CODE: u32 = OPTION_REF_CODE;
    const IS_REF: bool = true;
    const BYTES: usize = 0;
    fn to_bytes(self, _: &mut [u8]) {
        unreachable!("a reference value")
    }
    fn from_bytes(_: &[u8]) -> Self {
        unreachable!("a reference value")
    }
    fn to_ref(self) -> Ref<Any> {
        self.map_or(Ref::NULL, |r| r.cast())
    }
    fn from_ref(r: Ref<Any>) -> Self {
        if r.is_null() { None } else { Some(r.cast()) }
    }
}

fn bad(what: &str) -> ClientError {
    ClientError::BadValue(format!("map: {what}"))
}

// ------------------------------------------------------------------------------------------
// Node contents.

/// One entry of a node as the write path holds it.
#[derive(Clone)]
struct Entry {
    /// The key's encoding (a separator in internal nodes).
    key: Vec<u8>,
    /// The value's bytes (leaves of non-reference values; empty otherwise).
    val: Vec<u8>,
    /// The child (internal nodes) or the value (leaves of references); null otherwise.
    r: Ref<Any>,
}

/// What kind of node, for the sizes of its entries.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Bytes of a value in this node (0 in internal nodes and leaves of references).
    vbytes: usize,
    /// Whether entries have a reference slot each (internal nodes, leaves of references),
    /// which bounds them by [`MAP_FANOUT`].
    slots: bool,
}

/// Bytes of the area `entries` take.
fn used_bytes(entries: &[Entry], shape: Shape) -> usize {
    entries.iter().map(|e| entry_bytes(e.key.len(), shape.vbytes)).sum()
}

/// Whether `entries` fit a node of `area` bytes.
fn fits(entries: &[Entry], shape: Shape, area: usize) -> bool {
    (!shape.slots || entries.len() <= MAP_FANOUT) && used_bytes(entries, shape) <= area
}

/// Whether a node holding `entries` is under a quarter full, by bytes and by slots, or holds
/// fewer than two entries (so that every internal node but the root has two children and
/// every leaf a neighbour to merge with).
fn underfull(entries: &[Entry], shape: Shape, area: usize) -> bool {
    underfull_at(used_bytes(entries, shape), entries.len(), shape, area)
}

/// [`underfull`] of a node of `count` entries that use `used` bytes of the area.
fn underfull_at(used: usize, count: usize, shape: Shape, area: usize) -> bool {
    if count < 2 {
        return true;
    }
    let by_bytes = used * 4 < area;
    let by_slots = !shape.slots || count * 4 < MAP_FANOUT;
    by_bytes && by_slots
}

/// The area of `entries`: directory, then the entries in order.
fn encode_area(entries: &[Entry], out: &mut Vec<u8>) {
    mapnode::encode_area(entries.iter().map(|e| (&e.key[..], &e.val[..])), out);
}

/// The index where `entries` (which do not fit one node of `area` bytes) split in two
/// halves that each fit and are not under a quarter full: by count when the bytes fit and
/// only the slots overflow, else as even in bytes as the fanout allows, each half with at
/// least two entries.
fn split_point(entries: &[Entry], shape: Shape, area: usize) -> usize {
    let n = entries.len();
    debug_assert!(n >= 2);
    let total = used_bytes(entries, shape);
    if total <= area {
        return n / 2;
    }
    let (lo, hi) = if n >= 4 { (2, n - 2) } else { (1, n - 1) };
    let mut left = 0;
    let mut best = (usize::MAX, lo);
    for (i, e) in entries.iter().enumerate().take(hi) {
        left += entry_bytes(e.key.len(), shape.vbytes);
        let m = i + 1;
        if m < lo || (shape.slots && (m > MAP_FANOUT || n - m > MAP_FANOUT)) {
            continue;
        }
        let diff = left.abs_diff(total - left);
        if diff < best.0 {
            best = (diff, m);
        }
    }
    best.1
}

// ------------------------------------------------------------------------------------------
// Reading a node in place.

/// Byte order of two key encodings. The integer keys' encodings are 8 bytes whose byte order
/// is their order as big-endian numbers, so two of them compare as one `u64` each rather than
/// through `memcmp`, which the searches call about ten times a node.
#[inline]
fn cmp_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) {
        (Ok(x), Ok(y)) => u64::from_be_bytes(x).cmp(&u64::from_be_bytes(y)),
        _ => a.cmp(b),
    }
}

/// Checked reads of a node's entries straight from its view (no copy of the area).
///
/// The reads borrow the area in place (`View::var_bytes_raw`) for as long as one method runs
/// and hand out slices of it ([`NodeRead::key_bytes`], [`NodeRead::value_bytes`]): a caller
/// uses such a slice before it writes the node (or calls into the session), never after. The
/// write path copies what it keeps ([`NodeRead::key`], [`NodeRead::entries`]).
struct NodeRead<'v, 's> {
    v: &'v View<'s, MapNode>,
    count: usize,
    level: u32,
    /// The first byte of the entry area, in the object `v` pins: valid for `area` bytes while
    /// `v` lives, which outlives `self`.
    base: *const u8,
    area: usize,
    vbytes: usize,
}

impl<'v, 's> NodeRead<'v, 's> {
    /// Reads `v`'s header, checking it for a node of values of `value_bytes` bytes.
    #[inline(always)]
    fn new(v: &'v View<'s, MapNode>, value_bytes: usize) -> Result<Self, ClientError> {
        let count = v.get(MapNode::COUNT) as usize;
        let level = v.get(MapNode::LEVEL);
        let Some((base, area)) = v.var_bytes_raw() else {
            return Err(bad("a node has no byte part"));
        };
        if level > MAP_HEIGHT_MAX {
            return Err(bad("a node's level is past the height bound"));
        }
        if count.saturating_mul(DIR_BYTES) > area || (level > 0 && count > MAP_FANOUT) {
            return Err(bad("a node's count exceeds its room"));
        }
        let vbytes = if level == 0 { value_bytes } else { 0 };
        Ok(NodeRead { v, count, level, base, area, vbytes })
    }

    /// The entry area, in place.
    #[inline]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `base` points at `area` readable bytes of the object `v` pins, and `v`
        // outlives `self` (see the field). The bytes change only when the node is written or
        // the transaction aborts, which no caller lets happen while it uses the slice (see
        // the type's documentation).
        unsafe { std::slice::from_raw_parts(self.base, self.area) }
    }

    /// Entry `i`'s place: the offset of its key and the key's length.
    #[inline(always)]
    fn locate(&self, i: usize) -> Result<(usize, usize), ClientError> {
        let a = self.bytes();
        let word = |at: usize| a.get(at..at + 2).map(|w| u16::from_le_bytes([w[0], w[1]]) as usize);
        let at = word(i * DIR_BYTES).ok_or_else(|| bad("an entry lies outside its node"))?;
        if at < self.count * DIR_BYTES {
            return Err(bad("an entry lies outside its node"));
        }
        let len = word(at).ok_or_else(|| bad("an entry lies outside its node"))?;
        if len > MAP_KEY_BYTES_MAX || at + KLEN_BYTES + len + self.vbytes > self.area {
            return Err(bad("an entry's key runs past its node"));
        }
        Ok((at + KLEN_BYTES, len))
    }

    /// Entry `i`'s key in place, and where its value starts.
    #[inline(always)]
    fn key_bytes(&self, i: usize) -> Result<(&[u8], usize), ClientError> {
        let (at, len) = self.locate(i)?;
        // In bounds: `locate` checked the key and the value to lie within the area.
        Ok((&self.bytes()[at..at + len], at + len))
    }

    /// Entry `i`'s key, into `buf`; returns where its value starts.
    fn key(&self, i: usize, buf: &mut Vec<u8>) -> Result<usize, ClientError> {
        let (k, vat) = self.key_bytes(i)?;
        buf.clear();
        buf.extend_from_slice(k);
        Ok(vat)
    }

    /// The value bytes of the leaf entry whose value starts at `vat` (from
    /// [`NodeRead::key_bytes`]), in place.
    #[inline]
    fn value_bytes(&self, vat: usize) -> &[u8] {
        // In bounds: `locate` checked the value to lie within the area.
        &self.bytes()[vat..vat + self.vbytes]
    }

    /// The position of `key` among the entries: `Ok(i)` if entry `i` holds it, `Err(i)` where
    /// it would go.
    #[inline]
    fn search(&self, key: &[u8]) -> Result<Result<usize, usize>, ClientError> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match cmp_keys(self.key_bytes(mid)?.0, key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// The child of an internal node that `key` belongs under: the last entry whose key is at
    /// most `key`, entry 0 for anything smaller.
    #[inline]
    fn child_index(&self, key: &[u8]) -> Result<usize, ClientError> {
        if self.count == 0 {
            return Err(bad("an internal node has no children"));
        }
        // Entry 0 is never compared: search among 1..count.
        let (mut lo, mut hi) = (1, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if cmp_keys(self.key_bytes(mid)?.0, key).is_le() { lo = mid + 1 } else { hi = mid }
        }
        Ok(lo - 1)
    }

    /// Reference slot `i`.
    fn slot(&self, i: usize) -> Ref<Any> {
        self.v.get(MapNode::slot_field(i))
    }

    /// Child `i` of an internal node, checked not null.
    fn child(&self, i: usize) -> Result<Ref<MapNode>, ClientError> {
        let r = self.slot(i);
        if r.is_null() {
            return Err(bad("an internal node has a null child"));
        }
        Ok(r.cast())
    }

    /// Every entry, for the write path (parsed from one copy of the area).
    fn entries(&self, slots: bool) -> Result<Vec<Entry>, ClientError> {
        let a = self.v.var_bytes();
        let mut out = Vec::with_capacity(self.count);
        for i in 0..self.count {
            let (at, len) = mapnode::entry(&a, self.count, i, self.vbytes).map_err(format_bad)?;
            let key = a[at..at + len].to_vec();
            let val = a[at + len..at + len + self.vbytes].to_vec();
            let r = if slots { self.slot(i) } else { Ref::NULL };
            out.push(Entry { key, val, r });
        }
        Ok(out)
    }

    /// A copy of the area and the bytes its entries use, if the entries lie packed in key
    /// order right after the directory (as [`encode_area`] writes them), so that one entry
    /// can be spliced in or out without decoding the rest; `None` for any other layout.
    fn packed(&self) -> Result<Option<(Vec<u8>, usize)>, ClientError> {
        let a = self.v.var_bytes();
        let used = mapnode::packed_len(&a, self.count, self.vbytes).map_err(format_bad)?;
        Ok(used.map(|u| (a, u)))
    }
}

/// A node's bytes that `thor_core::mapnode` found malformed.
fn format_bad(e: thor_core::FormatError) -> ClientError {
    ClientError::BadValue(format!("map: {e}"))
}

// ------------------------------------------------------------------------------------------
// The map.

/// A view of a map: its header pinned in the cache. Every operation reads and writes nodes
/// through the current transaction, so concurrency control covers them like any object.
pub struct MapView<'s, K: MapKey, V: MapValue> {
    s: &'s Session,
    header: View<'s, Map<K, V>>,
    /// Entry area of a node in this database's pages.
    area: usize,
    /// The buffer a lookup encodes its key into, kept so that a lookup allocates nothing.
    key_buf: std::cell::Cell<Vec<u8>>,
}

impl<K: MapKey, V: MapValue> std::fmt::Debug for MapView<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MapView<{}, {}>", std::any::type_name::<K>(), std::any::type_name::<V>())
    }
}

impl Session {
    /// Creates an empty map from `K` to `V` (a header and an empty leaf).
    pub fn create_map<K: MapKey, V: MapValue>(&self) -> Result<Ref<Map<K, V>>, ClientError> {
        let h = self.create_fixed::<Map<K, V>>()?;
        h.set(Map::<K, V>::KEY, K::CODE)?;
        h.set(Map::<K, V>::VALUE, V::CODE)?;
        let leaf = new_node(self, 0)?;
        h.set(Map::<K, V>::ROOT, leaf.as_ref())?;
        Ok(h.as_ref())
    }

    /// A view of map `r`. Fails with [`ClientError::BadValue`] if it was made with other key
    /// or value types.
    pub fn map<K: MapKey, V: MapValue>(
        &self,
        r: Ref<Map<K, V>>,
    ) -> Result<MapView<'_, K, V>, ClientError> {
        let header = self.get(r)?;
        let (k, v) = (header.get(Map::<K, V>::KEY), header.get(Map::<K, V>::VALUE));
        if k != K::CODE || v != V::CODE {
            return Err(ClientError::BadValue(format!(
                "a map of key type {k} and value type {v} read as one of {} ({}) to {} ({})",
                K::CODE,
                std::any::type_name::<K>(),
                V::CODE,
                std::any::type_name::<V>(),
            )));
        }
        Ok(MapView {
            s: self,
            header,
            area: area_bytes(self.server().page_size),
            key_buf: std::cell::Cell::new(Vec::new()),
        })
    }
}

/// A new empty node at `level`, its area filling a page.
fn new_node(s: &Session, level: u32) -> Result<View<'_, MapNode>, ClientError> {
    let v = s.create::<MapNode>(area_bytes(s.server().page_size))?;
    if level != 0 {
        v.set(MapNode::LEVEL, level)?;
    }
    Ok(v)
}

/// One step of a path from the root: an internal node and the entry followed.
struct Step {
    node: Ref<MapNode>,
    index: usize,
}

impl<'s, K: MapKey, V: MapValue> MapView<'s, K, V> {
    /// The longest key, in bytes of its encoding, in this database: [`MAP_KEY_BYTES_MAX`],
    /// or less in pages too small for four entries of that size.
    pub fn key_bytes_max(&self) -> usize {
        let entry_max = self.area / 4;
        MAP_KEY_BYTES_MAX.min(entry_max - DIR_BYTES - KLEN_BYTES - V::BYTES)
    }

    fn leaf_shape(&self) -> Shape {
        Shape { vbytes: V::BYTES, slots: V::IS_REF }
    }

    fn shape(&self, level: u32) -> Shape {
        if level == 0 { self.leaf_shape() } else { Shape { vbytes: 0, slots: true } }
    }

    fn root(&self) -> Result<Ref<MapNode>, ClientError> {
        let r = self.header.get(Map::<K, V>::ROOT);
        if r.is_null() {
            return Err(bad("a map has no root"));
        }
        Ok(r)
    }

    fn encode<Q: KeyEncode + ?Sized>(&self, key: &Q) -> Result<Vec<u8>, ClientError> {
        let mut k = Vec::new();
        key.encode_key(&mut k);
        let max = self.key_bytes_max();
        if k.len() > max {
            return Err(ClientError::TooLong { what: "map key", len: k.len(), max });
        }
        Ok(k)
    }

    /// `f` of the encoding of `key` (checked as [`Self::encode`] checks it), made in the view's
    /// reused buffer.
    fn with_key<Q: KeyEncode + ?Sized, T>(
        &self,
        key: &Q,
        f: impl FnOnce(&[u8]) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut k = self.key_buf.take();
        k.clear();
        key.encode_key(&mut k);
        let max = self.key_bytes_max();
        let r = if k.len() > max {
            Err(ClientError::TooLong { what: "map key", len: k.len(), max })
        } else {
            f(&k)
        };
        self.key_buf.set(k);
        r
    }

    /// The leaf `key` belongs in, and the path of internal nodes to it.
    fn descend(
        &self,
        key: &[u8],
        path: Option<&mut Vec<Step>>,
    ) -> Result<View<'s, MapNode>, ClientError> {
        let mut path = path;
        let mut node = self.s.get(self.root()?)?;
        let mut expect: Option<u32> = None;
        loop {
            let n = NodeRead::new(&node, V::BYTES)?;
            if expect.is_some_and(|l| l != n.level) {
                return Err(bad("a child's level is not one below its parent's"));
            }
            if n.level == 0 {
                return Ok(node);
            }
            let i = n.child_index(key)?;
            let child = n.child(i)?;
            if let Some(p) = path.as_deref_mut() {
                p.push(Step { node: node.as_ref(), index: i });
            }
            expect = Some(n.level - 1);
            node = self.s.get(child)?;
        }
    }

    /// Where a point operation found its key in `leaf`, for the leaf logs
    /// ([`crate::leaflog`]); `None` in maps of references, which log nothing.
    fn at(&self, leaf: &View<'_, MapNode>) -> Option<At> {
        if V::IS_REF {
            return None;
        }
        let root = self.header.get(Map::<K, V>::ROOT).key() == leaf.as_ref().key();
        Some(At {
            map: self.header.as_ref().key(),
            leaf: leaf.as_ref().oref(),
            root,
            vbytes: V::BYTES,
        })
    }

    /// Logs that the transaction read `key` in `leaf` and saw the value whose bytes start at
    /// `vat` (`None`: absent).
    fn log_read(
        &self,
        leaf: &View<'_, MapNode>,
        key: &[u8],
        vat: Option<usize>,
    ) -> Result<(), ClientError> {
        let Some(at) = self.at(leaf) else { return Ok(()) };
        let mut b = [0u8; 1 + MAP_VALUE_BYTES_MAX];
        let saw = match vat {
            Some(vat) => {
                leaf.read_var_bytes(vat, &mut b[..V::BYTES])?;
                Some(&b[..V::BYTES])
            }
            None => None,
        };
        self.s.leaf_logs().read(at, key, saw);
        Ok(())
    }

    /// Logs that the transaction put `value` under `key` in `leaf` (`None`: removed it).
    fn log_op(&self, leaf: &View<'_, MapNode>, key: &[u8], value: Option<V>) {
        let Some(at) = self.at(leaf) else { return };
        let mut b = [0u8; 1 + MAP_VALUE_BYTES_MAX];
        let value = value.map(|v| {
            v.to_bytes(&mut b[..V::BYTES]);
            &b[..V::BYTES]
        });
        self.s.leaf_logs().op(at, key, value);
    }

    /// Node `v`, if a leaf, was changed or read as a whole: it carries no delta.
    fn rule_out(&self, v: &View<'_, MapNode>, level: u32) {
        if level == 0 && !V::IS_REF {
            self.s.leaf_logs().rule_out(self.header.as_ref().key(), v.as_ref().oref(), V::BYTES);
        }
    }

    /// The transaction reads this map as a whole: none of its leaves carries a delta.
    fn scanned(&self) {
        self.s.leaf_logs().scanned(self.header.as_ref().key());
    }

    /// The value of entry `i` of a leaf.
    fn value(&self, n: &NodeRead<'_, '_>, i: usize, vat: usize) -> Result<V, ClientError> {
        if V::IS_REF { Ok(V::from_ref(n.slot(i))) } else { Ok(V::from_bytes(n.value_bytes(vat))) }
    }

    /// The value of `key`, if the map holds it.
    pub fn get<Q>(&self, key: &Q) -> Result<Option<V>, ClientError>
    where
        K: Borrow<Q>,
        Q: KeyEncode + ?Sized,
    {
        self.with_key(key, |k| {
            let leaf = self.descend(k, None)?;
            let n = NodeRead::new(&leaf, V::BYTES)?;
            match n.search(k)? {
                Ok(i) => {
                    let (_, vat) = n.key_bytes(i)?;
                    self.log_read(&leaf, k, Some(vat))?;
                    self.value(&n, i, vat).map(Some)
                }
                Err(_) => {
                    self.log_read(&leaf, k, None)?;
                    Ok(None)
                }
            }
        })
    }

    /// Whether the map holds `key`.
    pub fn contains_key<Q>(&self, key: &Q) -> Result<bool, ClientError>
    where
        K: Borrow<Q>,
        Q: KeyEncode + ?Sized,
    {
        self.with_key(key, |k| {
            let leaf = self.descend(k, None)?;
            let n = NodeRead::new(&leaf, V::BYTES)?;
            // What it saw is the value too: a delta's read is checked by presence and value.
            let vat = match n.search(k)? {
                Ok(i) => Some(n.key_bytes(i)?.1),
                Err(_) => None,
            };
            self.log_read(&leaf, k, vat)?;
            Ok(vat.is_some())
        })
    }

    /// Writes `entries` into node `v` (its count, area and slots; `next` if given), which
    /// held `old_count` entries.
    fn store(
        &self,
        v: &View<'_, MapNode>,
        shape: Shape,
        entries: &[Entry],
        old_count: usize,
        next: Option<Ref<MapNode>>,
    ) -> Result<(), ClientError> {
        debug_assert!(fits(entries, shape, self.area.min(v.var_len())));
        let mut area = Vec::new();
        encode_area(entries, &mut area);
        v.write_var_bytes(0, &area)?;
        v.set(MapNode::COUNT, entries.len() as u32)?;
        if shape.slots {
            for i in 0..entries.len().max(old_count).min(MAP_FANOUT) {
                let want = entries.get(i).map_or(Ref::NULL, |e| e.r);
                let f = MapNode::slot_field(i);
                if v.get(f) != want {
                    v.set(f, want)?;
                }
            }
        }
        if let Some(next) = next {
            v.set(MapNode::NEXT, next)?;
        }
        Ok(())
    }

    /// Inserts `value` under `key`; returns the value it replaced. Fails with
    /// [`ClientError::TooLong`] for a key past [`Self::key_bytes_max`].
    pub fn insert(&self, key: K, value: V) -> Result<Option<V>, ClientError> {
        let k = self.encode(&key)?;
        let mut path = Vec::new();
        let leaf = self.descend(&k, Some(&mut path))?;
        let n = NodeRead::new(&leaf, V::BYTES)?;
        let mut buf = Vec::new();
        let pos = match n.search(&k)? {
            Ok(i) => {
                // Replace in place: the value's bytes or its slot.
                let vat = n.key(i, &mut buf)?;
                self.log_read(&leaf, &k, Some(vat))?;
                self.log_op(&leaf, &k, Some(value));
                let old = self.value(&n, i, vat)?;
                if V::IS_REF {
                    leaf.set(MapNode::slot_field(i), value.to_ref())?;
                } else {
                    let mut b = [0u8; 1 + MAP_VALUE_BYTES_MAX];
                    value.to_bytes(&mut b[..V::BYTES]);
                    leaf.write_var_bytes(vat, &b[..V::BYTES])?;
                }
                return Ok(Some(old));
            }
            Err(i) => i,
        };
        let shape = self.leaf_shape();
        // The common case: the entry fits, and is spliced into the area as it is.
        let room = self.area.min(n.area);
        if (!shape.slots || n.count < MAP_FANOUT)
            && let Some((a, used)) = n.packed()?
            && used + entry_bytes(k.len(), V::BYTES) <= room
        {
            let mut e = Vec::with_capacity(KLEN_BYTES + k.len() + V::BYTES);
            e.extend_from_slice(&(k.len() as u16).to_le_bytes());
            e.extend_from_slice(&k);
            if !V::IS_REF {
                let mut b = [0u8; 1 + MAP_VALUE_BYTES_MAX];
                value.to_bytes(&mut b[..V::BYTES]);
                e.extend_from_slice(&b[..V::BYTES]);
            }
            self.log_read(&leaf, &k, None)?;
            self.log_op(&leaf, &k, Some(value));
            leaf.write_var_bytes(0, &splice_in(&a, n.count, used, pos, &e))?;
            leaf.set(MapNode::COUNT, n.count as u32 + 1)?;
            if V::IS_REF {
                for i in (pos..n.count).rev() {
                    leaf.set(MapNode::slot_field(i + 1), n.slot(i))?;
                }
                leaf.set(MapNode::slot_field(pos), value.to_ref())?;
            }
            return Ok(None);
        }
        let mut entries = n.entries(shape.slots)?;
        let old_count = n.count;
        let mut val = vec![0u8; V::BYTES];
        let r = if V::IS_REF { value.to_ref() } else { Ref::NULL };
        if !V::IS_REF {
            value.to_bytes(&mut val);
        }
        entries.insert(pos, Entry { key: k, val, r });
        // Split or rewritten whole: the leaf's delta could not say so.
        self.rule_out(&leaf, 0);
        self.put(leaf, 0, entries, old_count, path)?;
        Ok(None)
    }

    /// Stores `entries` into `node` at `level`, splitting it (and its ancestors on `path`)
    /// when they do not fit.
    fn put(
        &self,
        node: View<'s, MapNode>,
        level: u32,
        mut entries: Vec<Entry>,
        old_count: usize,
        mut path: Vec<Step>,
    ) -> Result<(), ClientError> {
        let shape = self.shape(level);
        if fits(&entries, shape, self.area) {
            return self.store(&node, shape, &entries, old_count, None);
        }
        let right_entries = entries.split_off(split_point(&entries, shape, self.area));
        let right = new_node(self.s, level)?;
        let next = if level == 0 { Some(node.get(MapNode::NEXT)) } else { None };
        self.store(&right, shape, &right_entries, 0, next)?;
        let to_right = (level == 0).then(|| right.as_ref());
        self.store(&node, shape, &entries, old_count, to_right)?;
        let sep =
            Entry { key: right_entries[0].key.clone(), val: Vec::new(), r: right.as_ref().cast() };
        match path.pop() {
            Some(step) => {
                let parent = self.s.get(step.node)?;
                let n = NodeRead::new(&parent, V::BYTES)?;
                let mut pe = n.entries(true)?;
                let pc = n.count;
                pe.insert(step.index + 1, sep);
                self.put(parent, level + 1, pe, pc, path)
            }
            None => {
                if level + 1 > MAP_HEIGHT_MAX {
                    return Err(ClientError::TooLong {
                        what: "map height",
                        len: level as usize + 2,
                        max: MAP_HEIGHT_MAX as usize,
                    });
                }
                let root = new_node(self.s, level + 1)?;
                let first = Entry { key: Vec::new(), val: Vec::new(), r: node.as_ref().cast() };
                self.store(&root, Shape { vbytes: 0, slots: true }, &[first, sep], 0, None)?;
                self.header.set(Map::<K, V>::ROOT, root.as_ref())
            }
        }
    }

    /// Removes `key`; returns the value it had.
    pub fn remove<Q>(&self, key: &Q) -> Result<Option<V>, ClientError>
    where
        K: Borrow<Q>,
        Q: KeyEncode + ?Sized,
    {
        let k = self.encode(key)?;
        let mut path = Vec::new();
        let leaf = self.descend(&k, Some(&mut path))?;
        let n = NodeRead::new(&leaf, V::BYTES)?;
        let mut buf = Vec::new();
        let Ok(i) = n.search(&k)? else {
            self.log_read(&leaf, &k, None)?;
            return Ok(None);
        };
        let vat = n.key(i, &mut buf)?;
        let old = self.value(&n, i, vat)?;
        // The common case: the leaf is the root or stays over a quarter full, and the entry
        // is spliced out of the area.
        let len = KLEN_BYTES + buf.len() + V::BYTES;
        if let Some((a, used)) = n.packed()? {
            let (left, count) = (used - DIR_BYTES - len, n.count - 1);
            if path.is_empty() || !underfull_at(left, count, self.leaf_shape(), self.area) {
                self.log_read(&leaf, &k, Some(vat))?;
                self.log_op(&leaf, &k, None);
                leaf.write_var_bytes(0, &splice_out(&a, n.count, used, i, len))?;
                leaf.set(MapNode::COUNT, count as u32)?;
                if V::IS_REF {
                    for j in i..count {
                        leaf.set(MapNode::slot_field(j), n.slot(j + 1))?;
                    }
                    leaf.set(MapNode::slot_field(count), Ref::NULL)?;
                }
                return Ok(Some(old));
            }
        }
        let mut entries = n.entries(V::IS_REF)?;
        let old_count = n.count;
        entries.remove(i);
        self.rule_out(&leaf, 0);
        self.shrunk(leaf, 0, entries, old_count, path)?;
        Ok(Some(old))
    }

    /// Stores `entries`, which a removal made smaller, into `node` at `level`. A node (not
    /// the root) left under a quarter full is merged with a neighbour under the same parent
    /// when the two fit in one node, and otherwise shares the two nodes' entries evenly with
    /// it; a merge takes an entry from the parent, which is then treated the same way.
    fn shrunk(
        &self,
        node: View<'s, MapNode>,
        level: u32,
        entries: Vec<Entry>,
        old_count: usize,
        mut path: Vec<Step>,
    ) -> Result<(), ClientError> {
        let shape = self.shape(level);
        let Some(step) = path.pop() else {
            // The root: an internal root with one child gives way to it.
            self.store(&node, shape, &entries, old_count, None)?;
            if level > 0 && entries.len() == 1 {
                return self.collapse_root(entries[0].r.cast());
            }
            return Ok(());
        };
        if !underfull(&entries, shape, self.area) {
            return self.store(&node, shape, &entries, old_count, None);
        }
        let parent = self.s.get(step.node)?;
        let pn = NodeRead::new(&parent, V::BYTES)?;
        let mut pe = pn.entries(true)?;
        let pc = pn.count;
        let index = step.index;
        if index >= pe.len() || pe[index].r != node.as_ref().cast() {
            return Err(bad("a path's parent does not hold its child"));
        }
        // The pair: the node and its right neighbour, or its left one at the parent's end.
        let ri = if index + 1 < pe.len() {
            index + 1
        } else if index > 0 {
            index
        } else {
            return Err(bad("a node other than the root has no neighbour"));
        };
        let other = self.s.get::<MapNode>(pe[if ri == index { index - 1 } else { ri }].r.cast())?;
        let on = NodeRead::new(&other, V::BYTES)?;
        // Merged with or shares its entries with the node: changed as a whole.
        self.rule_out(&other, level);
        let other_entries = on.entries(shape.slots)?;
        let other_old = on.count;
        let ((lv, mut le, lc), (rv, mut re, rc)) = if ri == index {
            ((other, other_entries, other_old), (node, entries, old_count))
        } else {
            ((node, entries, old_count), (other, other_entries, other_old))
        };
        if level > 0 && !re.is_empty() {
            // The right node's entry 0 becomes an ordinary separator: the parent's.
            re[0].key = pe[ri].key.clone();
        }
        le.append(&mut re);
        let mut all = le;
        if fits(&all, shape, self.area) {
            let next = if level == 0 { Some(rv.get(MapNode::NEXT)) } else { None };
            self.store(&lv, shape, &all, lc, next)?;
            pe.remove(ri);
            return self.shrunk(parent, level + 1, pe, pc, path);
        }
        let m = split_point(&all, shape, self.area);
        let right = all.split_off(m);
        self.store(&lv, shape, &all, lc, None)?;
        self.store(&rv, shape, &right, rc, None)?;
        pe[ri].key = right[0].key.clone();
        // A longer separator may overflow the parent: `put` splits it then.
        self.put(parent, level + 1, pe, pc, path)
    }

    /// Makes `child` the root, and so on down while the root is internal with one child.
    fn collapse_root(&self, mut child: Ref<MapNode>) -> Result<(), ClientError> {
        for _ in 0..MAP_HEIGHT_MAX {
            let v = self.s.get(child)?;
            let n = NodeRead::new(&v, V::BYTES)?;
            if n.level == 0 || n.count != 1 {
                return self.header.set(Map::<K, V>::ROOT, v.as_ref());
            }
            child = n.child(0)?;
        }
        Err(bad("a chain of single-child nodes is past the height bound"))
    }

    /// Removes every entry: the map gets a new empty root (the old nodes stay in the database
    /// unreferenced; thor has no collector yet).
    pub fn clear(&self) -> Result<(), ClientError> {
        self.scanned();
        let leaf = new_node(self.s, 0)?;
        self.header.set(Map::<K, V>::ROOT, leaf.as_ref())
    }

    /// The number of entries. Reads every leaf (see the module documentation: there is no
    /// global count, so that inserts do not all conflict on one).
    pub fn len(&self) -> Result<usize, ClientError> {
        self.scanned();
        let mut total = 0;
        let mut walk = LeafWalk::new(self.s, self.leftmost()?, V::BYTES);
        while let Some(count) = walk.next_leaf()? {
            total += count;
        }
        Ok(total)
    }

    /// Whether the map is empty (reads the first leaf only).
    pub fn is_empty(&self) -> Result<bool, ClientError> {
        Ok(self.first()?.is_none())
    }

    /// The leftmost leaf.
    fn leftmost(&self) -> Result<Ref<MapNode>, ClientError> {
        Ok(self.descend(&[], None)?.as_ref())
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<(K, V)>, ClientError> {
        self.iter()?.next().transpose()
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Result<Option<(K, V)>, ClientError> {
        self.scanned();
        let mut node = self.s.get(self.root()?)?;
        for _ in 0..=MAP_HEIGHT_MAX {
            let n = NodeRead::new(&node, V::BYTES)?;
            if n.count == 0 {
                return if n.level == 0 { Ok(None) } else { Err(bad("an empty internal node")) };
            }
            if n.level == 0 {
                let (key, vat) = n.key_bytes(n.count - 1)?;
                let k = K::decode_key(key)?;
                return Ok(Some((k, self.value(&n, n.count - 1, vat)?)));
            }
            let child = n.child(n.count - 1)?;
            node = self.s.get(child)?;
        }
        Err(bad("a path is past the height bound"))
    }

    /// Every entry in key order (fetching leaves as it goes).
    pub fn iter(&self) -> Result<MapIter<'s, K, V>, ClientError> {
        self.range::<K, _>(..)
    }

    /// The entries whose keys lie in `range`, in key order. Reads the path to the range's
    /// first leaf, then only the leaves the range covers (and the one after, to see that it
    /// ended).
    pub fn range<Q, R>(&self, range: R) -> Result<MapIter<'s, K, V>, ClientError>
    where
        K: Borrow<Q>,
        Q: KeyEncode + ?Sized,
        R: RangeBounds<Q>,
    {
        let owned = |b: Bound<&Q>| -> Result<Bound<Vec<u8>>, ClientError> {
            Ok(match b {
                Bound::Included(q) => Bound::Included(self.encode(q)?),
                Bound::Excluded(q) => Bound::Excluded(self.encode(q)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        let (start, end) = (owned(range.start_bound())?, owned(range.end_bound())?);
        self.scan(start, end)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix<Q>(&self, prefix: &Q) -> Result<MapIter<'s, K, V>, ClientError>
    where
        K: Borrow<Q> + PrefixKey,
        Q: KeyEncode + ?Sized,
    {
        let p = self.encode(prefix)?;
        let end = match prefix_end(&p) {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        self.scan(Bound::Included(p), end)
    }

    fn scan(
        &self,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<MapIter<'s, K, V>, ClientError> {
        self.scanned();
        let from: &[u8] = match &start {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let leaf = self.descend(from, None)?;
        let n = NodeRead::new(&leaf, V::BYTES)?;
        let idx = match (&start, n.search(from)?) {
            (Bound::Excluded(_), Ok(i)) => i + 1,
            (_, Ok(i) | Err(i)) => i,
        };
        Ok(MapIter {
            walk: LeafWalk::new(self.s, leaf.as_ref(), V::BYTES),
            leaf: Some(leaf),
            idx,
            end,
            done: false,
            _kv: PhantomData,
        })
    }
}

/// The smallest byte string greater than every one that starts with `p`, if any.
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < u8::MAX {
            e.push(last + 1);
            return Some(e);
        }
    }
    None
}

/// A walk along the leaf chain that checks it: every leaf but a lone root holds entries, and
/// each leaf's first key is above the previous leaf's last, so a chain that loops is caught
/// at its first repetition.
struct LeafWalk<'s> {
    s: &'s Session,
    next: Option<Ref<MapNode>>,
    vbytes: usize,
    /// The last key of the previous leaf.
    last: Option<Vec<u8>>,
    first: bool,
}

impl<'s> LeafWalk<'s> {
    fn new(s: &'s Session, leaf: Ref<MapNode>, vbytes: usize) -> Self {
        LeafWalk { s, next: Some(leaf), vbytes, last: None, first: true }
    }

    /// Checks the leaf `v` against the chain so far, records its last key and moves to its
    /// successor. Returns its count.
    fn check(&mut self, v: &View<'_, MapNode>) -> Result<usize, ClientError> {
        let n = NodeRead::new(v, self.vbytes)?;
        if n.level != 0 {
            return Err(bad("the leaf chain reaches an internal node"));
        }
        let next = v.get(MapNode::NEXT);
        if n.count == 0 {
            if !(self.first && next.is_null()) {
                return Err(bad("an empty leaf in a chain"));
            }
        } else {
            let (first, _) = n.key_bytes(0)?;
            if self.last.as_ref().is_some_and(|l| first <= &l[..]) {
                return Err(bad("the leaf chain's keys do not rise"));
            }
            let last = self.last.get_or_insert_with(Vec::new);
            n.key(n.count - 1, last)?;
        }
        self.first = false;
        self.next = (!next.is_null()).then_some(next);
        Ok(n.count)
    }

    /// The next leaf's count, or `None` at the end of the chain.
    fn next_leaf(&mut self) -> Result<Option<usize>, ClientError> {
        let Some(r) = self.next.take() else { return Ok(None) };
        let v = self.s.get(r)?;
        self.check(&v).map(Some)
    }
}

/// An iterator over a map's entries in key order, reading one leaf at a time as it reaches
/// it. Items are results: a leaf that cannot be fetched, or is malformed, ends the iteration
/// with its error. Changing the map while iterating it gives entries from either state, in
/// no guaranteed order (never undefined behaviour).
pub struct MapIter<'s, K, V> {
    walk: LeafWalk<'s>,
    /// The current leaf (checked by `walk` when first entered).
    leaf: Option<View<'s, MapNode>>,
    /// The next entry of `leaf`.
    idx: usize,
    end: Bound<Vec<u8>>,
    done: bool,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V> std::fmt::Debug for MapIter<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MapIter(at {})", self.idx)
    }
}

impl<K: MapKey, V: MapValue> MapIter<'_, K, V> {
    fn step(&mut self) -> Result<Option<(K, V)>, ClientError> {
        loop {
            let Some(leaf) = self.leaf.as_ref() else {
                match self.walk.next.take() {
                    None => return Ok(None),
                    Some(r) => {
                        let v = self.walk.s.get(r)?;
                        self.walk.check(&v)?;
                        self.leaf = Some(v);
                        self.idx = 0;
                        continue;
                    }
                }
            };
            if self.walk.first {
                // The starting leaf: checked here, its successor recorded.
                self.walk.check(leaf)?;
            }
            let n = NodeRead::new(leaf, V::BYTES)?;
            if self.idx >= n.count {
                self.leaf = None;
                continue;
            }
            let (key, vat) = n.key_bytes(self.idx)?;
            let past = match &self.end {
                Bound::Included(e) => cmp_keys(key, e).is_gt(),
                Bound::Excluded(e) => cmp_keys(key, e).is_ge(),
                Bound::Unbounded => false,
            };
            if past {
                return Ok(None);
            }
            let k = K::decode_key(key)?;
            let v = if V::IS_REF {
                V::from_ref(n.slot(self.idx))
            } else {
                V::from_bytes(n.value_bytes(vat))
            };
            self.idx += 1;
            return Ok(Some((k, v)));
        }
    }
}

impl<K: MapKey, V: MapValue> Iterator for MapIter<'_, K, V> {
    type Item = Result<(K, V), ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                self.leaf = None;
                None
            }
            Err(e) => {
                self.done = true;
                self.leaf = None;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(k: &[u8], vb: usize) -> Entry {
        Entry { key: k.to_vec(), val: vec![7; vb], r: Ref::NULL }
    }

    #[test]
    fn integer_keys_encode_in_order() {
        let enc = |k: &dyn KeyEncode| {
            let mut v = Vec::new();
            k.encode_key(&mut v);
            v
        };
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(enc(&w[0]) < enc(&w[1]), "{w:?}");
            assert_eq!(i64::decode_key(&enc(&w[0])).unwrap(), w[0]);
        }
        let uints = [0u64, 1, 255, 256, u64::MAX];
        for w in uints.windows(2) {
            assert!(enc(&w[0]) < enc(&w[1]), "{w:?}");
            assert_eq!(u64::decode_key(&enc(&w[1])).unwrap(), w[1]);
        }
        assert!(matches!(u64::decode_key(&[1, 2]), Err(ClientError::BadValue(_))));
        assert!(matches!(String::decode_key(&[0xff]), Err(ClientError::BadValue(_))));
    }

    /// The searches' comparison (integers as one word when both keys are 8 bytes) is the
    /// bytes' order for every pair of lengths.
    #[test]
    fn keys_compare_in_byte_order() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0xff],
            vec![1, 2, 3, 4, 5, 6, 7],
            vec![1, 2, 3, 4, 5, 6, 7, 8],
            vec![1, 2, 3, 4, 5, 6, 7, 9],
            vec![1, 2, 3, 4, 5, 6, 8, 0],
            vec![1, 2, 3, 4, 5, 6, 7, 8, 0],
            vec![0x80, 0, 0, 0, 0, 0, 0, 0],
            vec![0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            vec![0xff; 8],
            vec![0; 8],
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(cmp_keys(a, b), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn a_prefix_ends_at_its_successor() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn a_split_gives_two_halves_that_fit() {
        let area = area_bytes(thor_core::limits::PAGE_SIZE_MIN);
        let shape = Shape { vbytes: 8, slots: false };
        // A full node of mixed sizes plus one more of the largest entry.
        let big = area / 4 - DIR_BYTES - KLEN_BYTES - 8;
        let mut entries: Vec<Entry> = Vec::new();
        let mut i = 0u8;
        while fits(&entries, shape, area) {
            let len = if i.is_multiple_of(3) { big } else { 3 };
            let mut k = vec![i; len];
            k[0] = i;
            entries.push(e(&k, 8));
            i += 1;
        }
        let m = split_point(&entries, shape, area);
        assert!(fits(&entries[..m], shape, area) && fits(&entries[m..], shape, area));
        assert!(!underfull(&entries[..m], shape, area) && !underfull(&entries[m..], shape, area));
        // By slots: 129 small entries split in two under the fanout.
        let shape = Shape { vbytes: 0, slots: true };
        let many: Vec<Entry> = (0..=MAP_FANOUT as u16).map(|i| e(&i.to_be_bytes(), 0)).collect();
        let m = split_point(&many, shape, area);
        assert!(m <= MAP_FANOUT && many.len() - m <= MAP_FANOUT);
    }
}
