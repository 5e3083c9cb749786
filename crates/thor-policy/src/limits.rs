//! Every bound of the replacement policies, with the reason for it.
//!
//! The bounds come from the slab the policies keep their order in (`list.rs`): a slot is
//! named by a `u32` and `u32::MAX` is the null link, so a policy can own at most `u32::MAX - 1`
//! slots. ARC remembers as many evicted blocks (its B1 and B2 history lists) as it caches, so it
//! needs twice its capacity in slots; every other policy needs its capacity.

/// The largest capacity a policy accepts: ARC needs twice its capacity in slots, and slots are
/// `u32` with one value reserved as the null link.
pub const MAX_CAPACITY: usize = (u32::MAX / 2 - 1) as usize;

/// The largest id space a [`DenseSlots`](crate::DenseSlots) index accepts: it costs four bytes
/// per possible id, so this is 16 GiB of index. Beyond that a hash map
/// ([`HashSlots`](crate::HashSlots)) is the better choice anyway.
pub const DENSE_ID_BOUND_MAX: u64 = 1 << 32;

// ARC's slab (twice the capacity) must leave the null link free.
const _: () = assert!(2 * MAX_CAPACITY < u32::MAX as usize);
// A dense index's slots are addressable on the 64-bit targets thor runs on.
const _: () = assert!(DENSE_ID_BOUND_MAX <= usize::MAX as u64);
