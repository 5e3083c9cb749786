//! Decoding any bytes gives a message or a `WireError`, never a panic: random bytes, random
//! payloads in frames with a correct checksum (so that the payload decoders are reached), and
//! valid frames truncated, extended or overwritten. Whatever decodes re-encodes to the same
//! bytes.

mod common;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use thor_core::checksum::Crc32c;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{Frame, Reply, ReplyBody, Request, ServerStats, decode_reply, decode_request};

/// A frame around `payload` with a correct length and checksum.
fn frame(kind: u16, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&kind.to_le_bytes());
    f.extend_from_slice(&0u16.to_le_bytes());
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(payload);
    let mut crc = Crc32c::new();
    crc.update(&f[0..4]);
    crc.update(&f[8..]);
    let c = crc.finish();
    f[4..8].copy_from_slice(&c.to_le_bytes());
    f
}

/// Decodes a checksum-valid frame as a request and as a reply; whatever decodes must encode
/// back to the same bytes: the decoder accepts only the encoder's canonical form. (A `Stats`
/// reply with counters this version does not know is the exception: they are skipped.)
fn decode_canonical(bytes: &[u8]) {
    let f = Frame::parse(Bytes::copy_from_slice(bytes), FRAME_BYTES_MAX).unwrap();
    if let Ok(req) = Request::decode(&f) {
        assert_eq!(req.to_frame(f.id).unwrap(), bytes);
    }
    if let Ok(reply) = Reply::decode(&f) {
        let known = 4 + 4 * reply.invalidations.len() + 2 + 8 * ServerStats::FIELDS.len();
        if !(matches!(reply.body, ReplyBody::Stats(_)) && f.payload.len() > known) {
            assert_eq!(reply.to_frame(f.id).unwrap(), bytes);
        }
    }
}

fn decode_both(bytes: &[u8]) {
    let _ = decode_request(Bytes::copy_from_slice(bytes), FRAME_BYTES_MAX);
    let _ = decode_reply(Bytes::copy_from_slice(bytes), FRAME_BYTES_MAX);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes(bytes in vec(any::<u8>(), 0..256)) {
        decode_both(&bytes);
    }

    #[test]
    fn random_payloads_in_valid_frames(
        kind in prop_oneof![1u16..=0x10, 0x80u16..=0x8d, Just(0xffu16), any::<u16>()],
        payload in vec(any::<u8>(), 0..256),
    ) {
        decode_canonical(&frame(kind, 1, &payload));
    }

    #[test]
    fn small_integers_in_valid_frames(
        kind in prop_oneof![1u16..=0x10, 0x81u16..=0x8d, Just(0xffu16)],
        words in vec(prop_oneof![0u32..4, Just(u32::MAX), 0u32..70_000, any::<u32>()], 0..24),
    ) {
        // Payloads made of small counts reach deeper into the decoders than random bytes.
        let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        decode_canonical(&frame(kind, 1, &payload));
    }

    #[test]
    fn mutated_valid_frames(
        req in common::request(),
        reply in common::reply(),
        cut in any::<prop::sample::Index>(),
        extra in vec(any::<u8>(), 0..16),
        writes in vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    ) {
        for mut f in [req.to_frame(9).unwrap(), reply.to_frame(9).unwrap()] {
            for (at, b) in &writes {
                let i = at.index(f.len());
                f[i] = *b;
            }
            decode_both(&f[..cut.index(f.len() + 1)]);
            f.extend_from_slice(&extra);
            decode_both(&f);
        }
    }
}
