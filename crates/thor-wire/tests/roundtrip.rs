//! Every message survives encode → decode unchanged, and every single-byte corruption of a
//! frame is detected.

mod common;

use bytes::Bytes;
use proptest::prelude::*;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{decode_reply, decode_request};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn request_roundtrip(req in common::request(), id in any::<u64>()) {
        let frame = req.to_frame(id).unwrap();
        prop_assert_eq!(frame.len(), req.frame_bytes().unwrap());
        let (got_id, got) = decode_request(Bytes::from(frame), FRAME_BYTES_MAX).unwrap();
        prop_assert_eq!(got_id, id);
        prop_assert_eq!(got, req);
    }

    #[test]
    fn reply_roundtrip(reply in common::reply(), id in any::<u64>()) {
        let frame = reply.to_frame(id).unwrap();
        prop_assert_eq!(frame.len(), reply.frame_bytes().unwrap());
        let (got_id, got) = decode_reply(Bytes::from(frame), FRAME_BYTES_MAX).unwrap();
        prop_assert_eq!(got_id, id);
        prop_assert_eq!(got, reply);
    }

    #[test]
    fn single_byte_corruption_is_detected(
        req in common::request(),
        reply in common::reply(),
        pos in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        // CRC-32C detects every burst shorter than 33 bits; a damaged length word makes the
        // frame's size disagree with the bytes present.
        let mut f = req.to_frame(3).unwrap();
        let i = pos.index(f.len());
        f[i] ^= xor;
        prop_assert!(decode_request(Bytes::from(f), FRAME_BYTES_MAX).is_err());
        let mut f = reply.to_frame(3).unwrap();
        let i = pos.index(f.len());
        f[i] ^= xor;
        prop_assert!(decode_reply(Bytes::from(f), FRAME_BYTES_MAX).is_err());
    }
}
