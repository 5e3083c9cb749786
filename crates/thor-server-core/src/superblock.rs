//! The superblock: the small file that says what a database directory is.
//!
//! ```text
//! 0          8        12        16        20     24              32         36    40          48     52
//! +----------+--------+---------+---------+------+---------------+----------+-----+-----------+------+
//! | magic    | format | page sz | server  | root | checkpoint LSN| alloc pg | 0   | generation| crc  |
//! +----------+--------+---------+---------+------+---------------+----------+-----+-----------+------+
//! ```
//!
//! - `checkpoint LSN`: every log record below it is installed in the page file; recovery replays
//!   from here.
//! - `alloc pg`: the page new objects are allocated into (0 before the first allocation), as of
//!   the checkpoint; the log records after the checkpoint may have advanced it.
//! - `generation`: incremented on every write, for diagnostics.
//! - `crc`: CRC-32C of bytes 0..48.
//!
//! The superblock is replaced atomically: written to `superblock.tmp`, synced, renamed over
//! `superblock`, and the directory synced. A crash leaves either the old or the new one.

use thor_core::checksum::crc32c;
use thor_core::le::{put_u32, put_u64, u32_at, u64_at};
use thor_core::limits::is_valid_page_size;
use thor_core::{Lsn, Oref, PageId, ServerId};

/// The superblock's file name.
pub const FILE: &str = "superblock";
/// The name it is written under before the atomic rename.
pub const TMP_FILE: &str = "superblock.tmp";
/// Identifies a thor superblock.
pub const MAGIC: [u8; 8] = *b"THOR-SB\0";
/// The on-disk format version of a database (superblock, page file, log records).
pub const FORMAT_VERSION: u32 = 1;
/// Encoded size.
pub const BYTES: usize = 52;

/// The decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Bytes per page, fixed at creation.
    pub page_size: usize,
    /// This server's id, part of surrogates that point here.
    pub server_id: ServerId,
    /// The persistent root object.
    pub root: Oref,
    /// Records below this LSN are installed in the page file.
    pub checkpoint: Lsn,
    /// The page new objects go to, as of the checkpoint.
    pub alloc_page: Option<PageId>,
    /// Incremented on each write.
    pub generation: u64,
}

/// Why a superblock could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SuperblockError {
    /// Not a thor superblock at all.
    #[error("not a thor database (bad magic)")]
    BadMagic,
    /// Written by another format version of thor.
    #[error("database format {found} is not supported (this build reads format {FORMAT_VERSION})")]
    Version {
        /// The version found.
        found: u32,
    },
    /// Damaged.
    #[error("superblock is damaged: {0}")]
    Corrupt(&'static str),
}

impl Superblock {
    /// Encodes the superblock.
    pub fn encode(&self) -> [u8; BYTES] {
        let mut b = [0u8; BYTES];
        b[..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, self.page_size as u32);
        put_u32(&mut b, 16, self.server_id.0);
        put_u32(&mut b, 20, self.root.raw());
        put_u64(&mut b, 24, self.checkpoint.0);
        put_u32(&mut b, 32, self.alloc_page.map_or(0, PageId::get));
        put_u64(&mut b, 40, self.generation);
        let crc = crc32c(&b[..48]);
        put_u32(&mut b, 48, crc);
        b
    }

    /// Decodes and checks a superblock.
    pub fn decode(b: &[u8]) -> Result<Superblock, SuperblockError> {
        if b.len() < 8 || b[..8] != MAGIC {
            return Err(SuperblockError::BadMagic);
        }
        if b.len() != BYTES {
            return Err(SuperblockError::Corrupt("wrong length"));
        }
        if crc32c(&b[..48]) != u32_at(b, 48) {
            return Err(SuperblockError::Corrupt("checksum mismatch"));
        }
        let found = u32_at(b, 8);
        if found != FORMAT_VERSION {
            return Err(SuperblockError::Version { found });
        }
        let page_size = u32_at(b, 12) as usize;
        if !is_valid_page_size(page_size) {
            return Err(SuperblockError::Corrupt("page size"));
        }
        let root = Oref::from_raw(u32_at(b, 20)).ok_or(SuperblockError::Corrupt("root"))?;
        if u32_at(b, 36) != 0 {
            return Err(SuperblockError::Corrupt("reserved field"));
        }
        let alloc = u32_at(b, 32);
        let alloc_page = match alloc {
            0 => None,
            n => Some(PageId::new(n).ok_or(SuperblockError::Corrupt("allocation page"))?),
        };
        Ok(Superblock {
            page_size,
            server_id: ServerId(u32_at(b, 16)),
            root,
            checkpoint: Lsn(u64_at(b, 24)),
            alloc_page,
            generation: u64_at(b, 40),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            page_size: 8192,
            server_id: ServerId(3),
            root: thor_core::builtin::ROOT,
            checkpoint: Lsn(17),
            alloc_page: PageId::new(9),
            generation: 4,
        }
    }

    #[test]
    fn roundtrip_and_every_bit_flip_is_caught() {
        let b = sb().encode();
        assert_eq!(Superblock::decode(&b).unwrap(), sb());
        for i in 0..BYTES * 8 {
            let mut c = b;
            c[i / 8] ^= 1 << (i % 8);
            assert!(Superblock::decode(&c).is_err(), "bit {i}");
        }
        assert!(Superblock::decode(&b[..30]).is_err());
    }
}
