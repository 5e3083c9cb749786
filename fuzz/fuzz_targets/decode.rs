//! Fuzzes the wire decoders: any bytes must decode to a message or a `WireError`, never panic,
//! and whatever decodes must re-encode to exactly the same frame (the decoder accepts only the
//! encoder's canonical bytes).
//!
//! The input is used twice: as a raw frame, and (so that the fuzzer reaches the payload
//! decoders without having to forge a CRC-32C) as `type: u16` followed by a payload, wrapped in
//! a frame with a correct length and checksum.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use thor_core::checksum::Crc32c;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{Frame, Reply, ReplyBody, Request, ServerStats};

fn framed(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + payload.len());
    f.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&kind.to_le_bytes());
    f.extend_from_slice(&[0; 2]);
    f.extend_from_slice(&7u64.to_le_bytes());
    f.extend_from_slice(payload);
    let mut crc = Crc32c::new();
    crc.update(&f[0..4]);
    crc.update(&f[8..]);
    let c = crc.finish();
    f[4..8].copy_from_slice(&c.to_le_bytes());
    f
}

fn check(frame: &[u8]) {
    let Ok(f) = Frame::parse(Bytes::copy_from_slice(frame), FRAME_BYTES_MAX) else { return };
    if let Ok(req) = Request::decode(&f) {
        assert_eq!(req.to_frame(f.id).expect("a decoded request encodes"), frame);
    }
    if let Ok(reply) = Reply::decode(&f) {
        let re = reply.to_frame(f.id).expect("a decoded reply encodes");
        // A Stats reply may carry counters this version does not know; they are skipped.
        let extra_stats = matches!(reply.body, ReplyBody::Stats(_))
            && f.payload.len() > 4 + 4 * reply.invalidations.len() + 2 + 8 * ServerStats::FIELDS.len();
        if !extra_stats {
            assert_eq!(re, frame);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= 2 {
        check(&framed(u16::from_le_bytes([data[0], data[1]]), &data[2..]));
    }
});
