//! Errors of encoding and decoding frames and messages.
//!
//! Bytes from the network are not trusted: every way a frame can be malformed is a variant here,
//! never a panic. A receiver that gets one of these cannot trust the rest of the stream either
//! (the frame boundary may be lost), so it answers with an `Error` reply if it can
//! ([`WireError::code`] says which) and closes the connection.

use crate::code::ErrorCode;

/// What is wrong with a frame or a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame is longer than the receiver accepts. The sender should split its work (for
    /// example commit in smaller transactions); the receiver closes the connection without
    /// reading the frame.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// The length the frame announced (header included).
        len: u64,
        /// The receiver's limit.
        max: usize,
    },
    /// The frame's length word is smaller than a frame header: the stream is not thor's or has
    /// lost its framing.
    #[error("frame of {len} bytes is shorter than a frame header")]
    FrameTooShort {
        /// The length the frame announced.
        len: u64,
    },
    /// The stream ended in the middle of a frame.
    #[error("the stream ended inside a frame ({got} of {len} bytes)")]
    TruncatedFrame {
        /// Bytes received.
        got: usize,
        /// Bytes announced.
        len: usize,
    },
    /// The frame's checksum does not match its bytes: they were damaged or are not a thor frame.
    #[error("frame checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// Reserved header flags are set: the peer speaks a newer framing.
    #[error("reserved frame flags {0:#06x} are set")]
    ReservedFlags(u16),
    /// The message type is not one this version knows.
    #[error("unknown message type {0:#06x}")]
    UnknownType(u16),
    /// The message type is known but not expected here (a reply sent to a server, a request
    /// sent to a client).
    #[error("message type {kind:#06x} is not a {expected}")]
    UnexpectedType {
        /// The type found.
        kind: u16,
        /// "request" or "reply".
        expected: &'static str,
    },
    /// The payload ended before a field.
    #[error("payload ends inside {what}")]
    Truncated {
        /// The field being read.
        what: &'static str,
    },
    /// The payload has bytes after the last field of its message.
    #[error("{count} bytes after the end of the message")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// A count or length is above its bound (see [`crate::limits`]).
    #[error("{what} is {got}, the limit is {max}")]
    LimitExceeded {
        /// Which count or length.
        what: &'static str,
        /// The value found (or, when encoding, asked for).
        got: u64,
        /// The bound.
        max: u64,
    },
    /// A field holds a value that is not allowed (a swizzled or null oref where an object is
    /// needed, a page id out of range, an unknown code, text that is not UTF-8).
    #[error("bad {what}: {why}")]
    BadValue {
        /// The field.
        what: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl WireError {
    /// The code of the `Error` reply a receiver sends back for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            WireError::FrameTooShort { .. }
            | WireError::TruncatedFrame { .. }
            | WireError::Checksum { .. }
            | WireError::ReservedFlags(_) => ErrorCode::BadFrame,
            WireError::UnknownType(_) => ErrorCode::UnknownType,
            WireError::UnexpectedType { .. } => ErrorCode::UnexpectedMessage,
            WireError::Truncated { .. }
            | WireError::TrailingBytes { .. }
            | WireError::LimitExceeded { .. }
            | WireError::BadValue { .. } => ErrorCode::Malformed,
        }
    }
}
