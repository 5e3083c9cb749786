//! SipHash-1-3 (the variant std's `RandomState` hashes with) with a caller's key: the core's one keyed hash (demotion's hashes of the pages
//! it sent). The key comes from [`crate::CoreConfig::hash_key`], so that the core takes no OS
//! randomness (a simulation seeds it; a production driver draws it from the OS at open).
//!
//! Why keyed: a client may send back a page it was sent (demotion), and the core accepts it
//! only if it hashes to what was sent. With a secret key, a client cannot make other bytes
//! collide with a page's hash.

/// SipHash-1-3 of `bytes` under `key` (Aumasson and Bernstein's construction with one
/// compression and three finalization rounds, 64-bit output: std's `SipHasher13`).
pub fn hash(key: [u64; 2], bytes: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes(c.try_into().expect("chunks of 8"));
        v[3] ^= m;
        round(&mut v);
        v[0] ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    // The length's low byte goes in the top byte of the last word, as the reference does.
    last[7] = bytes.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..3 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// std's `DefaultHasher` is SipHash-1-3 with a zero key, and `write` hashes exactly the
    /// bytes given: the same function at every length around the 8-byte blocks.
    #[test]
    fn matches_std_siphash_1_3() {
        use std::hash::Hasher;
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
