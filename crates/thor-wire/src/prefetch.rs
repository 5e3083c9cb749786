//! Prefetch (version 4): a fetch that brings further pages in the same round trip.
//!
//! A cold traversal over TCP spends most of its time waiting for round trips, one per page it
//! touches (`docs/oo7.md`, "Prefetch (issue 16)"). `Prefetch` asks for a page as `Fetch` does
//! and lets the server add up to `extra` further pages that the client is likely to need next
//! and does not cache, in one `Pages` reply: one round trip, one frame each way, for several
//! pages. The client bounds how many (its cache decides what it can hold), the server chooses
//! which (it has the page's bytes in hand before the client does):
//!
//! - [`PrefetchHint::Referenced`]: the pages the asked page's objects refer to, most referred
//!   to first (then in the order of first reference): where a traversal of the page goes next.
//! - [`PrefetchHint::Following`]: the pages after it in creation order (page ids are allocated
//!   in creation order, which is the clustering order).
//!
//! The server sends only pages it can send without reading its disk, and none that the
//! session's directory says the client caches; every page it sends is registered in that
//! directory exactly as a fetched page is, so invalidations (CLOCC) cover it. A client installs
//! each page with the same checks as a fetched one.
//!
//! ```text
//! Prefetch 0x000A  +--------+------------+----------+-----------+
//!                  | page   | extra: u16 | hint: u8 | flags: u8 |
//!                  +--------+------------+----------+-----------+
//!                    u32 page id; extra <= PREFETCH_PAGES_MAX; hint 1 = referenced,
//!                    2 = following; flags zero (reserved)
//!
//! Pages    0x0089  +--------+---------------------------------------------+
//!                  | N: u16 | N x ( page: u32 | len: u32 | the page )     |
//!                  +--------+---------------------------------------------+
//!                    answers Prefetch: the page asked for first, then the prefetched ones;
//!                    1 <= N <= 1 + PREFETCH_PAGES_MAX; page ids distinct; every len the same
//!                    valid page size
//! ```
//!
//! A client sends `Prefetch` only on connections that agreed on version 4.

use bytes::Bytes;
use thor_core::PageId;
use thor_core::limits::is_valid_page_size;

use crate::codec::{Put, Reader, check_limit};
use crate::error::WireError;
use crate::limits::PREFETCH_PAGES_MAX;

/// Which further pages a `Prefetch` asks the server to choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PrefetchHint {
    /// The pages the asked page's objects refer to, most referred to first.
    #[default]
    Referenced,
    /// The pages after the asked one in creation (page id) order.
    Following,
}

impl PrefetchHint {
    /// Every hint, for tests and command lines.
    pub const ALL: [PrefetchHint; 2] = [PrefetchHint::Referenced, PrefetchHint::Following];

    /// The wire code.
    pub const fn code(self) -> u8 {
        match self {
            PrefetchHint::Referenced => 1,
            PrefetchHint::Following => 2,
        }
    }

    /// The hint of a wire code, if known.
    pub const fn from_code(code: u8) -> Option<PrefetchHint> {
        Some(match code {
            1 => PrefetchHint::Referenced,
            2 => PrefetchHint::Following,
            _ => return None,
        })
    }

    /// The name on command lines: `refs` or `next`.
    pub const fn name(self) -> &'static str {
        match self {
            PrefetchHint::Referenced => "refs",
            PrefetchHint::Following => "next",
        }
    }
}

impl std::fmt::Display for PrefetchHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PrefetchHint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "refs" | "referenced" => Ok(PrefetchHint::Referenced),
            "next" | "following" => Ok(PrefetchHint::Following),
            other => Err(format!("unknown prefetch hint {other:?} (expected refs or next)")),
        }
    }
}

/// A `Prefetch` request: the page, and how many further pages of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefetch {
    /// The page asked for, as in `Fetch`.
    pub page: PageId,
    /// Most further pages the reply may carry (at most [`PREFETCH_PAGES_MAX`]).
    pub extra: u16,
    /// How the server chooses them.
    pub hint: PrefetchHint,
}

/// Bytes of a `Prefetch` body.
pub(crate) const PREFETCH_BYTES: usize = 8;

impl Prefetch {
    pub(crate) fn check(&self) -> Result<(), WireError> {
        check_limit("prefetch pages", usize::from(self.extra), PREFETCH_PAGES_MAX)
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.page.get());
        out.put_u16(self.extra);
        out.push(self.hint.code());
        out.push(0);
    }

    pub(crate) fn get(r: &mut Reader) -> Result<Prefetch, WireError> {
        let page = r.page_id("page")?;
        let extra = r.u16("prefetch pages")?;
        let hint = PrefetchHint::from_code(r.u8("prefetch hint")?)
            .ok_or(WireError::BadValue { what: "prefetch hint", why: "unknown hint" })?;
        if r.u8("prefetch flags")? != 0 {
            return Err(WireError::BadValue { what: "prefetch flags", why: "reserved bit set" });
        }
        let p = Prefetch { page, extra, hint };
        p.check()?;
        Ok(p)
    }
}

/// Checks the pages of a `Pages` reply and returns the size of its body.
pub(crate) fn pages_bytes(pages: &[(PageId, Bytes)]) -> Result<usize, WireError> {
    if pages.is_empty() {
        return Err(WireError::BadValue {
            what: "pages",
            why: "none (the asked page comes first)",
        });
    }
    check_limit("pages", pages.len(), 1 + PREFETCH_PAGES_MAX)?;
    let len = pages[0].1.len();
    if !is_valid_page_size(len) {
        return Err(WireError::BadValue { what: "page length", why: "not a page size" });
    }
    for (i, (page, bytes)) in pages.iter().enumerate() {
        if bytes.len() != len {
            return Err(WireError::BadValue { what: "page length", why: "pages of two sizes" });
        }
        if pages[..i].iter().any(|(p, _)| p == page) {
            return Err(WireError::BadValue { what: "pages", why: "a page twice" });
        }
    }
    Ok(2 + pages.len() * (8 + len))
}

pub(crate) fn put_pages(out: &mut Vec<u8>, pages: &[(PageId, Bytes)]) {
    out.put_u16(pages.len() as u16);
    for (page, bytes) in pages {
        out.put_u32(page.get());
        out.put_u32(bytes.len() as u32);
        out.extend_from_slice(bytes);
    }
}

pub(crate) fn get_pages(r: &mut Reader) -> Result<Vec<(PageId, Bytes)>, WireError> {
    // Each page takes at least its id, its length and the smallest page.
    let min = 8 + thor_core::limits::PAGE_SIZE_MIN;
    let n = r.count16(1 + PREFETCH_PAGES_MAX, min, "pages")?;
    let mut pages = Vec::with_capacity(n);
    for _ in 0..n {
        let page = r.page_id("page")?;
        let len = r.u32("page length")? as usize;
        if !is_valid_page_size(len) {
            return Err(WireError::BadValue { what: "page length", why: "not a page size" });
        }
        pages.push((page, r.bytes(len, "page bytes")?));
    }
    // The same checks as the encoder's: at least one, one size, no page twice.
    pages_bytes(&pages)?;
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::FRAME_BYTES_MAX;
    use crate::message::{Reply, ReplyBody, Request, RequestBody, decode_reply, decode_request};

    fn page(p: u32) -> PageId {
        PageId::new(p).unwrap()
    }

    #[test]
    fn prefetch_frame_has_the_documented_bytes() {
        let req = Request::new(RequestBody::Prefetch(Prefetch {
            page: page(7),
            extra: 3,
            hint: PrefetchHint::Following,
        }));
        let f = req.to_frame(1).unwrap();
        // Header (20), empty piggyback (8), then the body.
        assert_eq!(f.len(), 20 + 8 + PREFETCH_BYTES);
        assert_eq!(&f[8..10], &[0x0a, 0x00], "type Prefetch");
        assert_eq!(&f[28..], &[7, 0, 0, 0, 3, 0, 2, 0]);
        let (_, got) = decode_request(Bytes::from(f), FRAME_BYTES_MAX).unwrap();
        assert_eq!(got, req);
    }

    #[test]
    fn prefetch_requests_are_checked() {
        let over = Request::new(RequestBody::Prefetch(Prefetch {
            page: page(7),
            extra: PREFETCH_PAGES_MAX as u16 + 1,
            hint: PrefetchHint::Referenced,
        }));
        assert!(matches!(
            over.frame_bytes(),
            Err(WireError::LimitExceeded { what: "prefetch pages", .. })
        ));
        let ok = Request::new(RequestBody::Prefetch(Prefetch {
            page: page(7),
            extra: 1,
            hint: PrefetchHint::Referenced,
        }));
        let good = ok.to_frame(1).unwrap();
        // An unknown hint, a reserved flag, and too many pages, each with a valid checksum.
        for (at, value, what) in
            [(34, 9u8, "prefetch hint"), (35, 1, "prefetch flags"), (33, 0xff, "prefetch pages")]
        {
            let mut f = good.clone();
            f[at] = value;
            let f = reseal(f);
            match decode_request(Bytes::from(f), FRAME_BYTES_MAX) {
                Err(WireError::BadValue { what: w, .. })
                | Err(WireError::LimitExceeded { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    /// Recomputes a frame's checksum after a test changed its payload.
    fn reseal(mut f: Vec<u8>) -> Vec<u8> {
        let mut c = thor_core::checksum::Crc32c::new();
        c.update(&f[0..4]);
        c.update(&f[8..]);
        let crc = c.finish();
        f[4..8].copy_from_slice(&crc.to_le_bytes());
        f
    }

    #[test]
    fn pages_replies_roundtrip_and_refuse_what_decoders_would() {
        let p = |n: u32, len: usize| (page(n), Bytes::from(vec![n as u8; len]));
        let reply = Reply::new(ReplyBody::Pages(vec![p(9, 1024), p(10, 1024), p(3, 1024)]));
        let f = reply.to_frame(4).unwrap();
        assert_eq!(f.len(), reply.frame_bytes().unwrap());
        assert_eq!(decode_reply(Bytes::from(f), FRAME_BYTES_MAX).unwrap(), (4, reply));
        for (bad, why) in [
            (vec![], "none"),
            (vec![p(9, 1024), p(9, 1024)], "a page twice"),
            (vec![p(9, 1024), p(10, 2048)], "two sizes"),
            (vec![p(9, 1000)], "not a page size"),
        ] {
            let r = Reply::new(ReplyBody::Pages(bad));
            assert!(r.frame_bytes().is_err(), "{why}");
            assert!(r.to_frame(1).is_err(), "{why}");
        }
        let many: Vec<_> = (1..=PREFETCH_PAGES_MAX as u32 + 2).map(|n| p(n, 1024)).collect();
        assert!(matches!(
            Reply::new(ReplyBody::Pages(many)).frame_bytes(),
            Err(WireError::LimitExceeded { what: "pages", .. })
        ));
    }

    #[test]
    fn a_pages_reply_claiming_more_pages_than_its_bytes_is_refused_before_allocating() {
        let reply = Reply::new(ReplyBody::Pages(vec![(page(9), Bytes::from(vec![0u8; 1024]))]));
        let mut f = reply.to_frame(1).unwrap();
        // The count is the first body word after the empty invalidations (4 bytes).
        f[24] = 40;
        let f = reseal(f);
        assert_eq!(
            decode_reply(Bytes::from(f), FRAME_BYTES_MAX).unwrap_err(),
            WireError::Truncated { what: "pages" }
        );
    }

    #[test]
    fn hints_have_names_and_codes() {
        for h in PrefetchHint::ALL {
            assert_eq!(PrefetchHint::from_code(h.code()), Some(h));
            assert_eq!(h.name().parse::<PrefetchHint>(), Ok(h));
        }
        assert_eq!(PrefetchHint::from_code(0), None);
        assert!("sideways".parse::<PrefetchHint>().is_err());
    }
}
