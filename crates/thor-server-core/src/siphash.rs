//! The core's one keyed hash: demotion's hashes of the pages it sent, SipHash-1-3 (the
//! `siphasher` crate) under a caller's key. The key comes from [`crate::CoreConfig::hash_key`],
//! so that the core takes no OS randomness (a simulation seeds it; a production driver draws it
//! from the OS at open).
//!
//! Why keyed: a client may send back a page it was sent (demotion), and the core accepts it
//! only if it hashes to what was sent. With a secret key, a client cannot make other bytes
//! collide with a page's hash.

use std::hash::Hasher;

/// SipHash-1-3 of `bytes` under `key`.
pub fn hash(key: [u64; 2], bytes: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher13::new_with_keys(key[0], key[1]);
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// std's `DefaultHasher` is SipHash-1-3 with a zero key, and `write` hashes exactly the
    /// bytes given: the same function.
    #[test]
    fn matches_std_siphash_1_3() {
        let msg: Vec<u8> = (0..=255).collect();
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 255] {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            h.write(&msg[..n]);
            assert_eq!(hash([0, 0], &msg[..n]), h.finish(), "{n} bytes");
        }
    }

    #[test]
    fn the_key_changes_the_hash() {
        assert_ne!(hash([1, 2], b"page"), hash([1, 3], b"page"));
    }
}
