//! Frames: how messages are cut out of a byte stream.
//!
//! ```text
//!  0        4        8        10       12                        20
//! +--------+--------+--------+--------+-------------------------+---------------------+
//! | length | crc32c |  type  | flags  |       request id        | payload             |
//! +--------+--------+--------+--------+-------------------------+---------------------+
//!    u32      u32      u16      u16               u64             length - 16 bytes
//! ```
//!
//! - `length` counts the bytes *after* the length word (16 + payload), so a whole frame is
//!   `4 + length` bytes. It must be at least 16, and `4 + length` at most the receiver's maximum
//!   frame size (at most [`FRAME_BYTES_MAX`], announced per connection in `HelloOk`). A receiver
//!   checks it before reading (or allocating) anything more, and refuses a frame that is too
//!   large without reading it.
//! - `crc32c` is the CRC-32C of the length word followed by bytes `8..4 + length` (everything but
//!   the checksum itself), so a damaged length is caught as well as a damaged payload.
//! - `type` is the message type ([`crate::kind`]): requests are `0x0001..=0x007f`, replies
//!   `0x0080..=0x00ff`.
//! - `flags`: bit 0 ([`FLAG_DEMOTION`], version 2) says the message's piggyback section carries
//!   the demotion sections (see [`crate::message`]); it is set only when they are not empty,
//!   so a version-1 peer, which never negotiates demotion, never sees it. Bit 1
//!   ([`FLAG_SEEN`], version 5) says a reply carries the seen section (`crate::resume`); a
//!   server sets it only on connections that agreed on version 5, and a request never has it.
//!   Bit 2 ([`FLAG_CONTENTION`], version 6) says a request carries the contention report
//!   (`crate::contention`); a client sets it only on connections that agreed on version 6, and
//!   a reply never has it.
//!   Bit 3 ([`FLAG_LEAF_DELTAS`], version 8) says a `Commit` or `CommitWithId` carries leaf
//!   deltas after its body (`crate::leafdelta`); a client sets it only on connections that
//!   agreed on version 8, and no other message has it.
//!   The other bits are reserved and zero; a receiver refuses a frame with any of them set.
//! - `request id` is chosen by the client; the reply to a request carries the same id. The
//!   server answers requests in the order they arrive. Errors that answer no request (a frame
//!   that could not be parsed, a timeout, a refusal at connect, shutdown) carry id 0, so clients
//!   number their requests from 1.
//!
//! All integers are little-endian. The frame header, `Hello`, `HelloOk` and `Error` keep their
//! layout in every protocol version, so that two peers can always agree on a version or say why
//! they cannot.

use bytes::Bytes;
use thor_core::checksum::Crc32c;

use crate::error::WireError;
use crate::limits::{FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES};

/// No flags.
pub const FLAGS_NONE: u16 = 0;
/// The piggyback section carries the demotion sections.
pub const FLAG_DEMOTION: u16 = 1;
/// A reply carries the seen section (version 5, `crate::resume`).
pub const FLAG_SEEN: u16 = 2;
/// A request carries the contention report (version 6, `crate::contention`).
pub const FLAG_CONTENTION: u16 = 4;
/// A commit carries leaf deltas (version 8, `crate::leafdelta`).
pub const FLAG_LEAF_DELTAS: u16 = 8;
/// Every flag this version knows.
const FLAGS_KNOWN: u16 = FLAG_DEMOTION | FLAG_SEEN | FLAG_CONTENTION | FLAG_LEAF_DELTAS;

/// A frame whose header has been checked: its length, checksum and flags. The payload is not
/// decoded yet (see [`crate::Request::decode`] and [`crate::Reply::decode`]); a receiver that
/// fails to decode it still knows the request id to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The message type ([`crate::kind`]).
    pub kind: u16,
    /// The request id: chosen by the client, echoed by the server.
    pub id: u64,
    /// The header's flags (only known ones: [`FLAG_DEMOTION`], [`FLAG_SEEN`],
    /// [`FLAG_CONTENTION`], [`FLAG_LEAF_DELTAS`]).
    pub flags: u16,
    /// The message's bytes after the header (a zero-copy slice of the frame).
    pub payload: Bytes,
}

/// Reads a frame's length word and returns the size of the whole frame (length word included),
/// after checking it against `max_frame_bytes`. A receiver calls this on the first four bytes
/// and then reads `size - 4` more.
pub fn frame_size(
    prefix: [u8; FRAME_PREFIX_BYTES],
    max_frame_bytes: usize,
) -> Result<usize, WireError> {
    let len = u32::from_le_bytes(prefix) as u64;
    let total = len + FRAME_PREFIX_BYTES as u64;
    if total < FRAME_HEADER_BYTES as u64 {
        return Err(WireError::FrameTooShort { len });
    }
    let max = max_frame_bytes.min(FRAME_BYTES_MAX);
    if total > max as u64 {
        return Err(WireError::FrameTooLarge { len: total, max });
    }
    Ok(total as usize)
}

pub(crate) fn checksum(frame: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(&frame[0..4]);
    crc.update(&frame[8..]);
    crc.finish()
}

impl Frame {
    /// Checks a whole frame (length word included): its length against `max_frame_bytes` and
    /// the bytes actually present, its checksum and its flags.
    pub fn parse(frame: Bytes, max_frame_bytes: usize) -> Result<Frame, WireError> {
        if frame.len() < FRAME_PREFIX_BYTES {
            return Err(WireError::TruncatedFrame { got: frame.len(), len: FRAME_HEADER_BYTES });
        }
        let prefix = [frame[0], frame[1], frame[2], frame[3]];
        let size = frame_size(prefix, max_frame_bytes)?;
        if frame.len() < size {
            return Err(WireError::TruncatedFrame { got: frame.len(), len: size });
        }
        if frame.len() > size {
            return Err(WireError::TrailingBytes { count: frame.len() - size });
        }
        let stored = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let computed = checksum(&frame);
        if stored != computed {
            return Err(WireError::Checksum { stored, computed });
        }
        let kind = u16::from_le_bytes([frame[8], frame[9]]);
        let flags = u16::from_le_bytes([frame[10], frame[11]]);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(WireError::ReservedFlags(flags));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&frame[12..20]);
        let id = u64::from_le_bytes(id);
        Ok(Frame { kind, id, flags, payload: frame.slice(FRAME_HEADER_BYTES..) })
    }
}

/// Starts a frame at the end of `out`: reserves the header. Returns where the frame starts.
pub(crate) fn begin(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.resize(start + FRAME_HEADER_BYTES, 0);
    start
}

/// Completes the frame that [`begin`] started at `start`: fills in its header and checksum. If
/// the frame is larger than `max_frame_bytes`, removes it from `out` and fails.
pub(crate) fn finish(
    out: &mut Vec<u8>,
    start: usize,
    kind: u16,
    flags: u16,
    id: u64,
    max_frame_bytes: usize,
) -> Result<(), WireError> {
    let total = out.len() - start;
    let max = max_frame_bytes.min(FRAME_BYTES_MAX);
    if total > max {
        out.truncate(start);
        return Err(WireError::FrameTooLarge { len: total as u64, max });
    }
    let f = &mut out[start..];
    f[0..4].copy_from_slice(&((total - FRAME_PREFIX_BYTES) as u32).to_le_bytes());
    f[8..10].copy_from_slice(&kind.to_le_bytes());
    f[10..12].copy_from_slice(&flags.to_le_bytes());
    f[12..20].copy_from_slice(&id.to_le_bytes());
    let crc = checksum(f);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}
