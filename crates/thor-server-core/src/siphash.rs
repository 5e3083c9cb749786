//! SipHash-2-4 with a caller's key: the core's one keyed hash (demotion's hashes of the pages
//! it sent). The key comes from [`crate::CoreConfig::hash_key`], so that the core takes no OS
//! randomness (a simulation seeds it; a production driver draws it from the OS at open).
//!
//! Why keyed: a client may send back a page it was sent (demotion), and the core accepts it
//! only if it hashes to what was sent. With a secret key, a client cannot make other bytes
//! collide with a page's hash.

/// SipHash-2-4 of `bytes` under `key` (Aumasson and Bernstein's reference, 64-bit output).
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
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
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

    /// The reference implementation's test vectors (vectors.h, 64-bit output): key
    /// 00 01 .. 0f, messages 00 01 .. (n-1).
    #[test]
    fn matches_the_reference_vectors() {
        let key = [
            u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]),
            u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]),
        ];
        let msg: Vec<u8> = (0..64).collect();
        assert_eq!(hash(key, &msg[..0]), 0x726f_db47_dd0e_0e31);
        assert_eq!(hash(key, &msg[..1]), 0x74f8_39c5_93dc_67fd);
        assert_eq!(hash(key, &msg[..8]), 0x93f5_f579_9a93_2462);
        assert_eq!(hash(key, &msg[..15]), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn the_key_changes_the_hash() {
        assert_ne!(hash([1, 2], b"page"), hash([1, 3], b"page"));
    }
}
