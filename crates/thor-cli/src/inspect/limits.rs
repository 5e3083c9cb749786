//! Every bound of `thor inspect`, with its reason. The command reads a database of any size
//! and prints a screenful: nothing it keeps grows with the database except the census of
//! `classes`, which holds one counter per class.

/// Pages the page cache keeps (8 MiB of 8 KiB pages). Following a path, listing a map or a
/// sequence reads a few pages per step, and re-reads are cheap from here; the cache is
/// first-in first-out, so memory stays bounded however much is read.
pub const PAGE_CACHE_PAGES: usize = 1024;

/// Entries `map` and `seq` list when `--limit` is not given: a screenful.
pub const LIST_DEFAULT: usize = 50;

/// The largest `--limit`: a listing is read entry by entry, so this bounds one command's work
/// and its output, not its memory alone (1 M entries of a map of `u64` take a few seconds
/// offline). Page through larger collections with `--from`.
pub const LIST_MAX: usize = 1_000_000;

/// Elements of an object's variable part (a `thor.Refs` collection's references) that
/// `object` shows; the count is always shown.
pub const VAR_ELEMS_SHOWN: usize = 50;

/// Bytes of a string, byte field or byte part that are shown (the length is always shown).
pub const BYTES_SHOWN: usize = 256;

/// Bytes of a `thor.Bytes` object whose text a reference's one-line summary shows (an OO7
/// type name, a short label); longer ones are summarised by their length.
pub const SHORT_TEXT_BYTES: usize = 32;

/// Steps of a path (`root0.to.3.from`) or `--follow` fields: a bound on the work of one
/// command, well past any path a person types.
pub const PATH_STEPS_MAX: usize = 64;

/// Nodes one map descent may read: the tree's height bound (`thor_core::mapnode::HEIGHT_MAX`)
/// plus one for the leaf. A longer path is a malformed map (a cycle), reported as such.
pub const MAP_DESCENT_MAX: u32 = thor_core::mapnode::HEIGHT_MAX + 1;

const _: () = assert!(LIST_DEFAULT <= LIST_MAX);
const _: () = assert!(VAR_ELEMS_SHOWN <= LIST_DEFAULT);
const _: () = assert!(SHORT_TEXT_BYTES <= BYTES_SHOWN);
