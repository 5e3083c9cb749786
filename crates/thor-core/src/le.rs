//! Little-endian reads and writes at byte offsets.
//!
//! Every integer thor stores or sends is little-endian with an explicit width. These helpers
//! panic on an out-of-range offset, so they are for buffers whose bounds the caller has already
//! checked (a parsed page, an object whose size matched its class); decoders of untrusted bytes
//! check lengths first and then use them.

/// Reads a `u16` at `off`.
#[inline]
pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Reads a `u32` at `off`.
#[inline]
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4-byte slice"))
}

/// Reads a `u64` at `off`.
#[inline]
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8-byte slice"))
}

/// Writes a `u16` at `off`.
#[inline]
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u32` at `off`.
#[inline]
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u64` at `off`.
#[inline]
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
