//! Checked little-endian reading and writing of message fields.
//!
//! [`Reader`] is the only way this crate reads untrusted bytes: every read checks the remaining
//! length first, every count is checked against its limit *and* against the bytes left (so a
//! count can never make the decoder allocate more than the frame already holds), and byte fields
//! are zero-copy slices of the frame.

use bytes::Bytes;
use thor_core::{Oref, PageId};

use crate::error::WireError;

/// A cursor over a payload. Reads fail with [`WireError::Truncated`] past its end.
#[derive(Debug)]
pub(crate) struct Reader {
    /// The payload (a slice of the received frame).
    buf: Bytes,
    /// Bytes consumed so far.
    pos: usize,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Reader {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let end = self.pos.checked_add(N).filter(|&e| e <= self.buf.len());
        let Some(end) = end else { return Err(WireError::Truncated { what }) };
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..end]);
        self.pos = end;
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        self.take::<1>(what).map(|[b]| b)
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        self.take::<2>(what).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        self.take::<4>(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        self.take::<8>(what).map(u64::from_le_bytes)
    }

    /// `len` bytes as a zero-copy slice of the frame.
    pub(crate) fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, WireError> {
        if len > self.remaining() {
            return Err(WireError::Truncated { what });
        }
        let b = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(b)
    }

    /// Skips `len` bytes.
    pub(crate) fn skip(&mut self, len: usize, what: &'static str) -> Result<(), WireError> {
        self.bytes(len, what).map(drop)
    }

    /// Checks a count against its limit and against the bytes left, given that each element
    /// takes at least `elem_min_bytes` on the wire.
    fn check_count(
        &self,
        n: usize,
        max: usize,
        elem_min_bytes: usize,
        what: &'static str,
    ) -> Result<usize, WireError> {
        if n > max {
            return Err(WireError::LimitExceeded { what, got: n as u64, max: max as u64 });
        }
        if n.saturating_mul(elem_min_bytes) > self.remaining() {
            return Err(WireError::Truncated { what });
        }
        Ok(n)
    }

    /// A u32 element count, checked (see [`Reader::check_count`]).
    pub(crate) fn count32(
        &mut self,
        max: usize,
        elem_min_bytes: usize,
        what: &'static str,
    ) -> Result<usize, WireError> {
        let n = self.u32(what)? as usize;
        self.check_count(n, max, elem_min_bytes, what)
    }

    /// A u16 element count, checked (see [`Reader::check_count`]).
    pub(crate) fn count16(
        &mut self,
        max: usize,
        elem_min_bytes: usize,
        what: &'static str,
    ) -> Result<usize, WireError> {
        let n = self.u16(what)? as usize;
        self.check_count(n, max, elem_min_bytes, what)
    }

    /// A u16-length-prefixed byte string of at most `max` bytes.
    pub(crate) fn short_bytes(
        &mut self,
        max: usize,
        what: &'static str,
    ) -> Result<Bytes, WireError> {
        let n = self.count16(max, 1, what)?;
        self.bytes(n, what)
    }

    /// A u16-length-prefixed UTF-8 string of at most `max` bytes.
    pub(crate) fn string(&mut self, max: usize, what: &'static str) -> Result<String, WireError> {
        let b = self.short_bytes(max, what)?;
        match std::str::from_utf8(&b) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(WireError::BadValue { what, why: "not UTF-8" }),
        }
    }

    /// An oref naming a stored object: not null, spare bit clear, page id in
    /// `1..=PAGE_ID_MAX` ([`Oref::object`], the one definition the core and the log-record
    /// decoder use too).
    pub(crate) fn oref(&mut self, what: &'static str) -> Result<Oref, WireError> {
        let raw = self.u32(what)?;
        Oref::object(raw).map_err(|e| WireError::BadValue { what, why: e.why() })
    }

    /// A page id in `1..=PAGE_ID_MAX`.
    pub(crate) fn page_id(&mut self, what: &'static str) -> Result<PageId, WireError> {
        let raw = self.u32(what)?;
        PageId::new(raw).ok_or(WireError::BadValue { what, why: "page id out of range" })
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(WireError::TrailingBytes { count }),
        }
    }
}

/// Little-endian appends to an output buffer.
pub(crate) trait Put {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
}

impl Put for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
}

/// Checks an oref the encoder is about to write where an object is named: an encoder refuses
/// anything its peer's decoder ([`Reader::oref`]) would refuse.
pub(crate) fn check_oref(o: Oref, what: &'static str) -> Result<(), WireError> {
    o.check_object().map(drop).map_err(|e| WireError::BadValue { what, why: e.why() })
}

/// Checks a length or count the encoder is about to write against its bound: an encoder refuses
/// anything its peer's decoder would refuse.
pub(crate) fn check_limit(what: &'static str, got: usize, max: usize) -> Result<(), WireError> {
    if got > max {
        return Err(WireError::LimitExceeded { what, got: got as u64, max: max as u64 });
    }
    Ok(())
}
