//! The messages between the replicas of one replica group (version 10): Raft's messages, and
//! the copy of a database image to a replica too far behind for the leader's journal.
//!
//! A thor server that is a replica group (issue 33) runs Raft (raft-rs, `thor-replica`)
//! between its replicas. Raft's messages travel as [`RaftMsg`]: the group, the sending and
//! the receiving replica's ids, and the message as opaque bytes (raft-rs's protobuf encoding,
//! which only `thor-replica` makes and reads, through its recursion-bounded decoder). A
//! replica sends them on a session it opens to the other replica with its group's *peer
//! credential* (`peer:G`, G the group's server id, the credential two-phase commit's peers
//! use): the receiver refuses them, `Error(Forbidden)`, on any other session, and a message
//! for another group. They are answered `Ack` and may be lost: Raft resends what matters.
//!
//! A database image (superblock, page file, double-write buffer) is far too big for a Raft
//! message. A replica that needs one asks another replica for it on a peer session of the
//! same group: [`ReplicaRequest::ImageBegin`] makes the source set an image aside whose
//! checkpoint is at least the one asked (answered [`ReplicaReply::Image`], or
//! [`ReplicaReply::ImageTooOld`] with the checkpoint it has); [`ReplicaRequest::ImageChunk`]
//! reads up to [`IMAGE_CHUNK_BYTES_MAX`] bytes of one of its files at an offset
//! ([`ReplicaReply::Chunk`]); [`ReplicaRequest::ImageEnd`] lets it go. A source keeps a
//! bounded number of images open and forgets an idle one after a while (thor-net's
//! `limits`): a chunk of a forgotten image is refused and the copier starts again.
//!
//! ```text
//! Raft       0x000D  +------------+-----------+---------+--------+-----------------+
//!                    | group: u32 | from: u64 | to: u64 | L: u32 | raft-rs message |
//!                    +------------+-----------+---------+--------+-----------------+
//!                    from, to: replica ids (not 0); L <= RAFT_MESSAGE_BYTES_MAX; answered Ack
//!
//! ImageBegin 0x000E  +--------------+
//!                    | min_lsn: u64 |  the least checkpoint LSN the image may have
//!                    +--------------+
//! ImageChunk 0x000F  +-----------+----------+-------------+
//!                    | image: u64| file: u8 | offset: u64 |  file: 1 page file, 2 double-write
//!                    +-----------+----------+-------------+  buffer, 3 superblock
//! ImageEnd   0x0010  +-----------+
//!                    | image: u64|  answered Ack (also for an image already forgotten)
//!                    +-----------+
//!
//! Image      0x008B  +-----------+-----------------+------------+-----------+----------+
//!                    | image: u64| checkpoint: u64 | pages: u64 | dwb: u64  | sb: u32  |
//!                    +-----------+-----------------+------------+-----------+----------+
//!                    the image's id (not 0), its superblock's checkpoint LSN and each file's
//!                    length in bytes (dwb 0: the source has none)
//! ImageTooOld 0x008C +-----------+
//!                    | have: u64 |  the newest checkpoint the source has, below the one asked
//!                    +-----------+
//! Chunk      0x008D  +--------+-----------+
//!                    | L: u32 | the bytes |  L <= IMAGE_CHUNK_BYTES_MAX; fewer than asked only
//!                    +--------+-----------+  at the end of the file (0 at or past it)
//! ```
//!
//! A replica sends these only on connections that agreed on version 10.

use bytes::Bytes;
use thor_core::{Lsn, ServerId};

use crate::codec::{Put, Reader, check_limit};
use crate::error::WireError;
use crate::limits::{IMAGE_CHUNK_BYTES_MAX, RAFT_MESSAGE_BYTES_MAX};

/// A Raft message from one replica of a group to another ([`crate::RequestBody::Replica`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftMsg {
    /// The group: the server id its clients and credentials know.
    pub group: ServerId,
    /// The sending replica's id (not 0: raft-rs's "no replica").
    pub from: u64,
    /// The receiving replica's id (not 0).
    pub to: u64,
    /// The message, as raft-rs's protobuf encoding: opaque here.
    pub msg: Bytes,
}

/// Which file of a database image a chunk is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFile {
    /// The page file.
    Pages,
    /// The double-write buffer.
    DoubleWrite,
    /// The superblock, which a copier writes last.
    Superblock,
}

impl ImageFile {
    /// Every file, in the order a copier writes them (the superblock last).
    pub const ALL: [ImageFile; 3] =
        [ImageFile::Pages, ImageFile::DoubleWrite, ImageFile::Superblock];

    /// The wire code.
    pub const fn code(self) -> u8 {
        match self {
            ImageFile::Pages => 1,
            ImageFile::DoubleWrite => 2,
            ImageFile::Superblock => 3,
        }
    }

    /// The file of a wire code, if known.
    pub const fn from_code(code: u8) -> Option<ImageFile> {
        Some(match code {
            1 => ImageFile::Pages,
            2 => ImageFile::DoubleWrite,
            3 => ImageFile::Superblock,
            _ => return None,
        })
    }
}

/// A request between the replicas of a group (version 10). See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaRequest {
    /// A Raft message; answered `Ack`.
    Raft(RaftMsg),
    /// Asks for a database image whose checkpoint LSN is at least `min_lsn`.
    ImageBegin {
        /// The least checkpoint LSN wanted.
        min_lsn: Lsn,
    },
    /// Asks for up to [`IMAGE_CHUNK_BYTES_MAX`] bytes of a file of an open image.
    ImageChunk {
        /// The image, as [`ReplicaReply::Image`] named it.
        image: u64,
        /// Which file.
        file: ImageFile,
        /// Where in it.
        offset: u64,
    },
    /// The copier is done with the image (or gives up): the source may drop it.
    ImageEnd {
        /// The image.
        image: u64,
    },
}

/// What a replica answers to a [`ReplicaRequest`] (besides `Ack` and `Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaReply {
    /// Answers `ImageBegin`: an image is set aside.
    Image(ImageInfo),
    /// Answers `ImageBegin`: this replica's newest checkpoint is below the one asked.
    ImageTooOld {
        /// Its checkpoint LSN.
        have: Lsn,
    },
    /// Answers `ImageChunk`: the bytes at the offset asked, fewer than
    /// [`IMAGE_CHUNK_BYTES_MAX`] only at the end of the file.
    Chunk(Bytes),
}

/// An image set aside for a copier ([`ReplicaReply::Image`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its id, for the chunk requests (not 0).
    pub image: u64,
    /// Its superblock's checkpoint LSN.
    pub checkpoint: Lsn,
    /// Bytes of its page file.
    pub pages_bytes: u64,
    /// Bytes of its double-write buffer (0: it has none).
    pub dwb_bytes: u64,
    /// Bytes of its superblock file.
    pub superblock_bytes: u32,
}

impl ImageInfo {
    /// The length of `file`.
    pub fn len(&self, file: ImageFile) -> u64 {
        match file {
            ImageFile::Pages => self.pages_bytes,
            ImageFile::DoubleWrite => self.dwb_bytes,
            ImageFile::Superblock => u64::from(self.superblock_bytes),
        }
    }
}

/// The largest superblock file an image may announce: a superblock is a few dozen bytes
/// (`thor_server::superblock::BYTES`); a page's worth bounds what a copier holds for it.
pub const IMAGE_SUPERBLOCK_BYTES_MAX: u32 = 4096;

/// Bytes of the fixed part of a `Raft` body before the message.
const RAFT_HEADER_BYTES: usize = 4 + 8 + 8 + 4;

impl ReplicaRequest {
    /// The message type number.
    pub fn kind(&self) -> u16 {
        use crate::message::kind;
        match self {
            ReplicaRequest::Raft(_) => kind::RAFT,
            ReplicaRequest::ImageBegin { .. } => kind::IMAGE_BEGIN,
            ReplicaRequest::ImageChunk { .. } => kind::IMAGE_CHUNK,
            ReplicaRequest::ImageEnd { .. } => kind::IMAGE_END,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ReplicaRequest::Raft(_) => "Raft",
            ReplicaRequest::ImageBegin { .. } => "ImageBegin",
            ReplicaRequest::ImageChunk { .. } => "ImageChunk",
            ReplicaRequest::ImageEnd { .. } => "ImageEnd",
        }
    }

    /// Checks the body and returns its size in bytes.
    pub(crate) fn body_bytes(&self) -> Result<usize, WireError> {
        Ok(match self {
            ReplicaRequest::Raft(m) => {
                check_limit("raft message", m.msg.len(), RAFT_MESSAGE_BYTES_MAX)?;
                if m.from == 0 || m.to == 0 {
                    return Err(WireError::BadValue { what: "replica id", why: "zero" });
                }
                RAFT_HEADER_BYTES + m.msg.len()
            }
            ReplicaRequest::ImageBegin { .. } | ReplicaRequest::ImageEnd { .. } => 8,
            ReplicaRequest::ImageChunk { .. } => 17,
        })
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        match self {
            ReplicaRequest::Raft(m) => {
                out.put_u32(m.group.0);
                out.put_u64(m.from);
                out.put_u64(m.to);
                out.put_u32(m.msg.len() as u32);
                out.extend_from_slice(&m.msg);
            }
            ReplicaRequest::ImageBegin { min_lsn } => out.put_u64(min_lsn.0),
            ReplicaRequest::ImageChunk { image, file, offset } => {
                out.put_u64(*image);
                out.push(file.code());
                out.put_u64(*offset);
            }
            ReplicaRequest::ImageEnd { image } => out.put_u64(*image),
        }
    }

    /// Decodes the body of a request of type `kind` (one of this module's).
    pub(crate) fn get(kind: u16, r: &mut Reader) -> Result<ReplicaRequest, WireError> {
        use crate::message::kind as k;
        let req = match kind {
            k::RAFT => {
                let group = ServerId(r.u32("raft group")?);
                let from = r.u64("raft from")?;
                let to = r.u64("raft to")?;
                let n = r.count32(RAFT_MESSAGE_BYTES_MAX, 1, "raft message")?;
                let msg = r.bytes(n, "raft message")?;
                ReplicaRequest::Raft(RaftMsg { group, from, to, msg })
            }
            k::IMAGE_BEGIN => ReplicaRequest::ImageBegin { min_lsn: Lsn(r.u64("image lsn")?) },
            k::IMAGE_CHUNK => {
                let image = r.u64("image id")?;
                let file = ImageFile::from_code(r.u8("image file")?)
                    .ok_or(WireError::BadValue { what: "image file", why: "unknown file" })?;
                let offset = r.u64("image offset")?;
                ReplicaRequest::ImageChunk { image, file, offset }
            }
            k::IMAGE_END => ReplicaRequest::ImageEnd { image: r.u64("image id")? },
            other => return Err(WireError::UnknownType(other)),
        };
        // The encoder's checks: what one side refuses to send, the other refuses to take.
        req.body_bytes()?;
        Ok(req)
    }
}

impl ReplicaReply {
    /// The message type number.
    pub fn kind(&self) -> u16 {
        use crate::message::kind;
        match self {
            ReplicaReply::Image(_) => kind::IMAGE,
            ReplicaReply::ImageTooOld { .. } => kind::IMAGE_TOO_OLD,
            ReplicaReply::Chunk(_) => kind::CHUNK,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ReplicaReply::Image(_) => "Image",
            ReplicaReply::ImageTooOld { .. } => "ImageTooOld",
            ReplicaReply::Chunk(_) => "Chunk",
        }
    }

    /// Checks the body and returns its size in bytes.
    pub(crate) fn body_bytes(&self) -> Result<usize, WireError> {
        Ok(match self {
            ReplicaReply::Image(i) => {
                if i.image == 0 {
                    return Err(WireError::BadValue { what: "image id", why: "zero" });
                }
                check_limit(
                    "image superblock",
                    i.superblock_bytes as usize,
                    IMAGE_SUPERBLOCK_BYTES_MAX as usize,
                )?;
                36
            }
            ReplicaReply::ImageTooOld { .. } => 8,
            ReplicaReply::Chunk(b) => {
                check_limit("image chunk", b.len(), IMAGE_CHUNK_BYTES_MAX)?;
                4 + b.len()
            }
        })
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        match self {
            ReplicaReply::Image(i) => {
                out.put_u64(i.image);
                out.put_u64(i.checkpoint.0);
                out.put_u64(i.pages_bytes);
                out.put_u64(i.dwb_bytes);
                out.put_u32(i.superblock_bytes);
            }
            ReplicaReply::ImageTooOld { have } => out.put_u64(have.0),
            ReplicaReply::Chunk(b) => {
                out.put_u32(b.len() as u32);
                out.extend_from_slice(b);
            }
        }
    }

    /// Decodes the body of a reply of type `kind` (one of this module's).
    pub(crate) fn get(kind: u16, r: &mut Reader) -> Result<ReplicaReply, WireError> {
        use crate::message::kind as k;
        let reply = match kind {
            k::IMAGE => ReplicaReply::Image(ImageInfo {
                image: r.u64("image id")?,
                checkpoint: Lsn(r.u64("image checkpoint")?),
                pages_bytes: r.u64("image pages")?,
                dwb_bytes: r.u64("image dwb")?,
                superblock_bytes: r.u32("image superblock")?,
            }),
            k::IMAGE_TOO_OLD => ReplicaReply::ImageTooOld { have: Lsn(r.u64("image lsn")?) },
            k::CHUNK => {
                let n = r.count32(IMAGE_CHUNK_BYTES_MAX, 1, "image chunk")?;
                ReplicaReply::Chunk(r.bytes(n, "image chunk")?)
            }
            other => return Err(WireError::UnknownType(other)),
        };
        reply.body_bytes()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Reply, ReplyBody, Request, RequestBody, decode_reply, decode_request};

    /// Puts a correct checksum on a frame edited by hand.
    fn reseal(f: &mut [u8]) {
        let c = crate::frame::checksum(f);
        f[4..8].copy_from_slice(&c.to_le_bytes());
    }

    fn decode_req(f: &[u8]) -> Result<(u64, Request), WireError> {
        decode_request(Bytes::copy_from_slice(f), crate::limits::FRAME_BYTES_MAX)
    }

    fn requests() -> Vec<ReplicaRequest> {
        vec![
            ReplicaRequest::Raft(RaftMsg {
                group: ServerId(3),
                from: 1,
                to: 2,
                msg: Bytes::from_static(b"\x08\x03\x10\x01"),
            }),
            ReplicaRequest::Raft(RaftMsg { group: ServerId(3), from: 7, to: 1, msg: Bytes::new() }),
            ReplicaRequest::ImageBegin { min_lsn: Lsn(42) },
            ReplicaRequest::ImageChunk { image: 9, file: ImageFile::DoubleWrite, offset: 1 << 40 },
            ReplicaRequest::ImageEnd { image: 9 },
        ]
    }

    fn replies() -> Vec<ReplicaReply> {
        vec![
            ReplicaReply::Image(ImageInfo {
                image: 5,
                checkpoint: Lsn(77),
                pages_bytes: 8192 * 3,
                dwb_bytes: 0,
                superblock_bytes: 52,
            }),
            ReplicaReply::ImageTooOld { have: Lsn(3) },
            ReplicaReply::Chunk(Bytes::from(vec![7u8; 1000])),
            ReplicaReply::Chunk(Bytes::new()),
        ]
    }

    #[test]
    fn every_replica_message_round_trips() {
        for (i, req) in requests().into_iter().enumerate() {
            let r = Request::new(RequestBody::Replica(req));
            let frame = r.to_frame(i as u64 + 1).unwrap();
            let (id, back) = decode_req(&frame).unwrap();
            assert_eq!((id, back), (i as u64 + 1, r));
        }
        for (i, rep) in replies().into_iter().enumerate() {
            let r = Reply::new(ReplyBody::Replica(rep));
            let frame = r.to_frame(i as u64 + 1).unwrap();
            let (id, back) =
                decode_reply(Bytes::from(frame), crate::limits::FRAME_BYTES_MAX).unwrap();
            assert_eq!((id, back), (i as u64 + 1, r));
        }
    }

    #[test]
    fn bounds_are_refused_on_both_sides() {
        let big = Bytes::from(vec![0u8; RAFT_MESSAGE_BYTES_MAX + 1]);
        let raft = RaftMsg { group: ServerId(1), from: 1, to: 2, msg: big };
        let r = Request::new(RequestBody::Replica(ReplicaRequest::Raft(raft)));
        assert!(matches!(r.to_frame(1), Err(WireError::LimitExceeded { .. })));
        let zero = RaftMsg { group: ServerId(1), from: 0, to: 2, msg: Bytes::new() };
        let r = Request::new(RequestBody::Replica(ReplicaRequest::Raft(zero)));
        assert!(matches!(r.to_frame(1), Err(WireError::BadValue { .. })));
        let chunk = ReplicaReply::Chunk(Bytes::from(vec![0u8; IMAGE_CHUNK_BYTES_MAX + 1]));
        assert!(Reply::new(ReplyBody::Replica(chunk)).to_frame(1).is_err());

        // The decoder refuses the same: a hand-made chunk request with an unknown file, and
        // a Raft body whose length word claims more than the limit.
        let ok = ReplicaRequest::ImageChunk { image: 1, file: ImageFile::Pages, offset: 0 };
        let mut frame = Request::new(RequestBody::Replica(ok)).to_frame(1).unwrap();
        let at = frame.len() - 9;
        frame[at] = 9;
        reseal(&mut frame);
        assert!(decode_req(&frame).is_err());
        let raft = RaftMsg { group: ServerId(1), from: 1, to: 2, msg: Bytes::from_static(b"x") };
        let mut frame =
            Request::new(RequestBody::Replica(ReplicaRequest::Raft(raft))).to_frame(1).unwrap();
        let at = frame.len() - 5;
        frame[at..at + 4].copy_from_slice(&(RAFT_MESSAGE_BYTES_MAX as u32 + 1).to_le_bytes());
        reseal(&mut frame);
        assert!(matches!(decode_req(&frame), Err(WireError::LimitExceeded { .. })));
    }
}
