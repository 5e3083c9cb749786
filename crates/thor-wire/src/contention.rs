//! The contention report (version 6): what a client tells the server about the conflicts it met
//! that the server could not see.
//!
//! A server counts the commits it refuses, by cause. It does not see the transactions a client
//! aborts by itself: an invalidation that arrives on any reply and names an object the open
//! transaction used dooms it at the client (it ran on a copy another transaction changed), and
//! the client never sends its commit. Under contention these are most of the aborts, so a
//! server's refusal counters barely moved while its clients were failing dozens of times a
//! second. Nor does the server see that a refused transaction is run again. So a client reports
//! both, on its next request, in a small section after the piggyback's others:
//!
//! ```text
//! contention (frame flag FLAG_CONTENTION, requests of version-6 connections):
//!   +--------------------------+-------------+-------------+
//!   | invalidation aborts: u32 | retries: u32| object: u32 |
//!   +--------------------------+-------------+-------------+
//! ```
//!
//! - `invalidation aborts`: transactions the client aborted because an invalidation hit them,
//!   since its last report.
//! - `retries`: attempts the client ran again after a conflict (any cause), since its last
//!   report.
//! - `object`: the object whose invalidation aborted the latest of those transactions, or 0
//!   when `invalidation aborts` is 0. The server's fair retries (`thor_server_core`'s
//!   `core::fair`) treat a transaction aborted this way as a loss on that object, like a
//!   refusal that names it.
//!
//! A sender sets the flag exactly when one of the counts is not zero, so requests without a
//! report keep version 5's bytes. Both counts are at most [`CONTENTION_COUNT_MAX`]; the object
//! is a stored object's name ([`thor_core::Oref::object`]). A report is advisory: a client that
//! lies only moves counters and, within the fair-retry bounds, its own place in line.

use thor_core::Oref;

use crate::codec::{Put, Reader, check_limit, check_oref};
use crate::error::WireError;
use crate::limits::CONTENTION_COUNT_MAX;

/// Bytes of the contention section.
pub const CONTENTION_BYTES: usize = 12;

/// What a client reports of the contention it met since its last report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Contention {
    /// Transactions the client aborted because an invalidation named an object they used.
    pub invalidation_aborts: u32,
    /// Attempts the client ran again after a conflict.
    pub retries: u32,
    /// The object whose invalidation aborted the latest of those transactions (`None` exactly
    /// when `invalidation_aborts` is 0).
    pub object: Option<Oref>,
}

impl Contention {
    /// Whether there is nothing to report (the section is then left out).
    pub fn is_empty(&self) -> bool {
        self.invalidation_aborts == 0 && self.retries == 0
    }

    /// Checks the section as its decoder would.
    pub fn check(&self) -> Result<(), WireError> {
        if self.is_empty() {
            return Err(WireError::BadValue { what: "contention", why: "an empty report" });
        }
        check_limit(
            "invalidation aborts",
            self.invalidation_aborts as usize,
            CONTENTION_COUNT_MAX,
        )?;
        check_limit("retries", self.retries as usize, CONTENTION_COUNT_MAX)?;
        match self.object {
            Some(o) if self.invalidation_aborts > 0 => check_oref(o, "contention object"),
            None if self.invalidation_aborts == 0 => Ok(()),
            _ => Err(WireError::BadValue {
                what: "contention object",
                why: "present exactly when an invalidation abort is reported",
            }),
        }
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.invalidation_aborts);
        out.put_u32(self.retries);
        out.put_u32(self.object.map_or(0, Oref::raw));
    }

    pub(crate) fn get(r: &mut Reader) -> Result<Contention, WireError> {
        let invalidation_aborts = r.u32("invalidation aborts")?;
        let retries = r.u32("retries")?;
        let object = match r.u32("contention object")? {
            0 => None,
            raw => Some(
                Oref::object(raw)
                    .map_err(|e| WireError::BadValue { what: "contention object", why: e.why() })?,
            ),
        };
        let c = Contention { invalidation_aborts, retries, object };
        c.check()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use thor_core::{Oid, PageId};

    use super::*;
    use crate::frame::FLAG_CONTENTION;
    use crate::limits::FRAME_BYTES_MAX;
    use crate::{Request, RequestBody};

    fn decode_request(frame: &[u8]) -> Result<(u64, Request), WireError> {
        crate::decode_request(bytes::Bytes::copy_from_slice(frame), FRAME_BYTES_MAX)
    }

    fn o() -> Oref {
        Oref::new(PageId::new(3).unwrap(), Oid::new(4).unwrap())
    }

    fn with(c: Contention) -> Request {
        let mut r = Request::new(RequestBody::Abort);
        r.piggyback.contention = Some(c);
        r
    }

    #[test]
    fn a_report_roundtrips_and_sets_its_flag() {
        let c = Contention { invalidation_aborts: 2, retries: 3, object: Some(o()) };
        let req = with(c);
        let bytes = req.to_frame(9).unwrap();
        assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]) & FLAG_CONTENTION, FLAG_CONTENTION);
        assert_eq!(decode_request(&bytes).unwrap().1, req);
        assert_eq!(req.version_needed(), crate::version::VERSION_CONTENTION);
        let plain = Request::new(RequestBody::Abort).to_frame(9).unwrap();
        assert_eq!(bytes.len(), plain.len() + CONTENTION_BYTES, "no report, no bytes");
        let retries = Contention { retries: 1, ..Contention::default() };
        assert_eq!(decode_request(&with(retries).to_frame(1).unwrap()).unwrap().1, with(retries));
    }

    #[test]
    fn malformed_reports_are_refused_by_encoder_and_decoder() {
        let bad = [
            Contention::default(),
            Contention { invalidation_aborts: 1, retries: 0, object: None },
            Contention { invalidation_aborts: 0, retries: 1, object: Some(o()) },
            Contention { retries: CONTENTION_COUNT_MAX as u32 + 1, ..Contention::default() },
        ];
        let good = Contention { invalidation_aborts: 1, retries: 1, object: Some(o()) };
        let frame = with(good).to_frame(1).unwrap();
        let section = frame.len() - CONTENTION_BYTES;
        for c in bad {
            assert!(with(c).to_frame(1).is_err(), "{c:?} encoded");
            // The same bytes written by hand, checksum fixed: the decoder refuses them too.
            let mut raw = frame.clone();
            let mut words = Vec::new();
            c.put(&mut words);
            raw[section..].copy_from_slice(&words);
            let crc = crate::frame::checksum(&raw);
            raw[4..8].copy_from_slice(&crc.to_le_bytes());
            assert!(decode_request(&raw).is_err(), "{c:?} decoded");
        }
        // An object word that names no stored object.
        let mut raw = frame.clone();
        raw[frame.len() - 4..].copy_from_slice(&1u32.to_le_bytes());
        let crc = crate::frame::checksum(&raw);
        raw[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_request(&raw).is_err());
    }
}
