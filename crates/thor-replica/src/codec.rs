//! Raft's messages as bytes between replicas: [`encode_message`] and [`decode_message`], the
//! only way a transport should turn a peer's bytes into a `raft::eraftpb::Message`.
//!
//! raft-rs encodes its messages with rust-protobuf 2.28, whose parser has RUSTSEC-2024-0437:
//! a crafted message with deeply nested *groups* (protobuf's old, proto2-only way of nesting,
//! wire types 3 and 4) in an unknown field makes it recurse without bound while skipping
//! them, and the thread's stack overflows: the process aborts. Only 3.7.2 fixed it, and
//! raft-proto 0.7 is pinned to 2.x. So [`decode_message`] first walks the bytes itself,
//! iteratively (an explicit stack, never recursion), knowing raft's schema (`eraftpb.proto`,
//! proto3), and refuses:
//!
//! - any group (wire types 3 and 4): proto3 has none, so no honest message carries one;
//! - wire types 6 and 7 (none exists), field number 0, a tag above 2^32;
//! - a varint longer than 10 bytes or above 2^64, a length past its enclosing message's end;
//! - a field of the schema with a wire type other than its own;
//! - nesting deeper than [`MESSAGE_NESTING_MAX`] (raft's schema nests at most three levels:
//!   `Message` → `Snapshot` → `SnapshotMetadata` → `ConfState`, so a walk that follows the
//!   schema cannot exceed it; the bound is asserted as a second line);
//! - more than [`RAFT_MESSAGE_BYTES_MAX`] bytes.
//!
//! Only then does protobuf parse it, and protobuf then meets no group to skip. Unknown
//! fields of the other wire types are allowed (a newer raft-rs may add fields; protobuf skips
//! them without recursion).
//!
//! *Trust:* the guard makes untrusted bytes safe to decode, but a Raft message still steers
//! the group: a transport takes them only on sessions authenticated with the group's own peer
//! credential (thor-net's replica links, `thor_wire::replica`), never from anyone who can
//! connect.
//!
//! ```text
//!   tag     = varint (field number << 3 | wire type)
//!   0 varint  1 fixed64  2 length-delimited (varint length, then bytes)  5 fixed32
//!   3, 4 groups: refused     6, 7: refused
//! ```

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::Message;
use thor_wire::limits::RAFT_MESSAGE_BYTES_MAX;

use crate::limits::MESSAGE_NESTING_MAX;

/// Why bytes were not taken as a Raft message. Every variant means the same to a transport:
/// the sender is broken or hostile; drop the message (Raft resends what matters), count it,
/// and log the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageDecodeError {
    /// Longer than [`RAFT_MESSAGE_BYTES_MAX`].
    #[error("a raft message of {len} bytes, above the {RAFT_MESSAGE_BYTES_MAX} allowed")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The protobuf wire format is broken or uses what raft's schema never does.
    #[error("malformed raft message at byte {at}: {why}")]
    Malformed {
        /// Where the walk stopped.
        at: usize,
        /// What was wrong.
        why: &'static str,
    },
    /// Nested deeper than [`MESSAGE_NESTING_MAX`].
    #[error("a raft message nested deeper than {MESSAGE_NESTING_MAX} levels")]
    TooDeep,
    /// The walk passed it but protobuf did not (a bad enum value, bad UTF-8, ...).
    #[error("raft message: {0}")]
    Protobuf(String),
}

/// Why a Raft message was not encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageEncodeError {
    /// Its encoding is longer than [`RAFT_MESSAGE_BYTES_MAX`]: no replica would take it.
    /// (Raft's own bounds keep an append below it: `limits::PROPOSAL_BYTES_MAX`.)
    #[error("a raft message of {len} bytes, above the {RAFT_MESSAGE_BYTES_MAX} allowed")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// protobuf failed to encode it (a required field missing: none in proto3; kept for
    /// protobuf's signature).
    #[error("raft message: {0}")]
    Protobuf(String),
}

/// Encodes a Raft message for another replica.
pub fn encode_message(msg: &Message) -> Result<Bytes, MessageEncodeError> {
    let bytes = msg.write_to_bytes().map_err(|e| MessageEncodeError::Protobuf(e.to_string()))?;
    if bytes.len() > RAFT_MESSAGE_BYTES_MAX {
        return Err(MessageEncodeError::TooLarge { len: bytes.len() });
    }
    Ok(Bytes::from(bytes))
}

/// Decodes a Raft message a replica sent, after checking its wire format (see the module
/// documentation). Never panics and never recurses on the input.
pub fn decode_message(bytes: &[u8]) -> Result<Message, MessageDecodeError> {
    if bytes.len() > RAFT_MESSAGE_BYTES_MAX {
        return Err(MessageDecodeError::TooLarge { len: bytes.len() });
    }
    check_wire_format(bytes)?;
    Message::parse_from_bytes(bytes).map_err(|e| MessageDecodeError::Protobuf(e.to_string()))
}

/// The message types of raft's schema that the walk descends into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    Message,
    Entry,
    Snapshot,
    SnapshotMetadata,
    ConfState,
}

/// What a field of the schema is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// A varint (integers, bools, enums).
    Varint,
    /// Bytes, or a packed repeated varint: length-delimited, not descended into.
    Bytes,
    /// A nested message of this type.
    Nested(Schema),
    /// A packed or unpacked repeated varint (proto3 packs, but parsers take both).
    Repeated,
}

impl Schema {
    /// The field numbered `n`, or `None` for one the schema does not have.
    fn field(self, n: u32) -> Option<Field> {
        use Field::{Bytes as B, Nested, Repeated, Varint as V};
        Some(match (self, n) {
            (Schema::Message, 7) => Nested(Schema::Entry),
            (Schema::Message, 9) => Nested(Schema::Snapshot),
            (Schema::Message, 12) => B,
            (Schema::Message, 1..=6 | 8 | 10 | 11 | 13..=16) => V,
            (Schema::Entry, 1..=3 | 5) => V,
            (Schema::Entry, 4 | 6) => B,
            (Schema::Snapshot, 1) => B,
            (Schema::Snapshot, 2) => Nested(Schema::SnapshotMetadata),
            (Schema::SnapshotMetadata, 1) => Nested(Schema::ConfState),
            (Schema::SnapshotMetadata, 2 | 3) => V,
            (Schema::ConfState, 1..=4) => Repeated,
            (Schema::ConfState, 5) => V,
            _ => return None,
        })
    }
}

/// Reads a varint at `*pos` within `end`.
fn varint(b: &[u8], pos: &mut usize, end: usize) -> Result<u64, MessageDecodeError> {
    let start = *pos;
    let mut v = 0u64;
    for i in 0..10 {
        let Some(&byte) = b.get(*pos).filter(|_| *pos < end) else {
            return Err(MessageDecodeError::Malformed { at: start, why: "a varint cut short" });
        };
        *pos += 1;
        if i == 9 && byte > 1 {
            return Err(MessageDecodeError::Malformed { at: start, why: "a varint above 2^64" });
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(MessageDecodeError::Malformed { at: start, why: "a varint longer than 10 bytes" })
}

/// Walks `b` as a raft `Message` (see the module documentation), iteratively.
fn check_wire_format(b: &[u8]) -> Result<(), MessageDecodeError> {
    // Each entry: the schema of a message being walked and where it ends.
    let mut stack: Vec<(Schema, usize)> = Vec::with_capacity(MESSAGE_NESTING_MAX);
    stack.push((Schema::Message, b.len()));
    let mut pos = 0usize;
    while let Some(&(schema, end)) = stack.last() {
        if pos == end {
            stack.pop();
            continue;
        }
        let at = pos;
        let bad = |why| MessageDecodeError::Malformed { at, why };
        let tag = varint(b, &mut pos, end)?;
        let (number, wire) = (tag >> 3, tag & 7);
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(bad("a field number of 0 or above 2^29"));
        }
        let field = schema.field(number as u32);
        match wire {
            0 => {
                if !matches!(field, None | Some(Field::Varint | Field::Repeated)) {
                    return Err(bad("a varint where the schema has another type"));
                }
                varint(b, &mut pos, end)?;
            }
            1 | 5 => {
                if field.is_some() {
                    return Err(bad("a fixed-width value where the schema has another type"));
                }
                let n = if wire == 1 { 8 } else { 4 };
                if end - pos < n {
                    return Err(bad("a fixed-width value cut short"));
                }
                pos += n;
            }
            2 => {
                let len = varint(b, &mut pos, end)?;
                if len > (end - pos) as u64 {
                    return Err(bad("a length past the end of its message"));
                }
                let len = len as usize;
                match field {
                    Some(Field::Nested(inner)) => {
                        if stack.len() >= MESSAGE_NESTING_MAX {
                            return Err(MessageDecodeError::TooDeep);
                        }
                        stack.push((inner, pos + len));
                    }
                    None | Some(Field::Bytes | Field::Repeated) => pos += len,
                    Some(Field::Varint) => {
                        return Err(bad("bytes where the schema has a varint"));
                    }
                }
            }
            3 | 4 => return Err(bad("a group (proto3 has none: RUSTSEC-2024-0437)")),
            _ => return Err(bad("an unknown wire type")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;
    use protobuf::ProtobufEnum;
    use raft::eraftpb::{ConfState, Entry, EntryType, MessageType, Snapshot, SnapshotMetadata};

    use super::*;

    fn entry() -> impl Strategy<Value = Entry> {
        (0u8..3, any::<u64>(), any::<u64>(), vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..8))
            .prop_map(|(t, term, index, data, context)| {
                let mut e = Entry::default();
                e.set_entry_type(
                    [
                        EntryType::EntryNormal,
                        EntryType::EntryConfChange,
                        EntryType::EntryConfChangeV2,
                    ][t as usize],
                );
                e.term = term;
                e.index = index;
                e.data = data.into();
                e.context = context.into();
                e
            })
    }

    fn message() -> impl Strategy<Value = Message> {
        (
            (0u8..=18, any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
            vec(entry(), 0..4),
            (any::<u64>(), any::<bool>(), any::<u64>(), vec(any::<u8>(), 0..8), any::<i64>()),
            proptest::option::of((
                vec(any::<u8>(), 0..64),
                any::<u64>(),
                any::<u64>(),
                vec(1u64..9, 0..4),
                vec(1u64..9, 0..3),
                any::<bool>(),
            )),
        )
            .prop_map(|((t, to, from, term, log_term, index), entries, rest, snap)| {
                let (commit, reject, hint, context, priority) = rest;
                let mut m = Message::default();
                m.set_msg_type(MessageType::from_i32(i32::from(t)).expect("0..=18 exist"));
                m.to = to;
                m.from = from;
                m.term = term;
                m.log_term = log_term;
                m.index = index;
                m.set_entries(entries.into());
                m.commit = commit;
                m.reject = reject;
                m.reject_hint = hint;
                m.context = context.into();
                m.priority = priority;
                if let Some((data, si, st, voters, learners, auto_leave)) = snap {
                    let cs = ConfState { voters, learners, auto_leave, ..Default::default() };
                    let mut md = SnapshotMetadata::default();
                    md.set_conf_state(cs);
                    md.index = si;
                    md.term = st;
                    let mut s = Snapshot { data: data.into(), ..Default::default() };
                    s.set_metadata(md);
                    m.set_snapshot(s);
                }
                m
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn every_real_message_round_trips(m in message()) {
            let bytes = encode_message(&m).unwrap();
            prop_assert_eq!(decode_message(&bytes).unwrap(), m);
        }

        #[test]
        fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
            let _ = decode_message(&bytes);
        }

        #[test]
        fn mutated_messages_never_panic(
            m in message(),
            writes in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = encode_message(&m).unwrap().to_vec();
            if !bytes.is_empty() {
                for (at, v) in &writes {
                    let i = at.index(bytes.len());
                    bytes[i] = *v;
                }
            }
            let _ = decode_message(&bytes[..cut.index(bytes.len() + 1)]);
            let _ = decode_message(&bytes);
        }
    }

    #[test]
    fn nested_groups_are_refused_without_recursing() {
        // RUSTSEC-2024-0437's shape: an unknown field opening a group inside a group, a
        // million deep. protobuf 2.28 would overflow its stack skipping it.
        let start_group = (99u8 << 3) | 3;
        let crafted = vec![start_group; 1 << 20];
        assert!(matches!(
            decode_message(&crafted),
            Err(MessageDecodeError::Malformed { at: 0, .. })
        ));
        // Behind an honest prefix too.
        let m = Message { term: 5, ..Default::default() };
        let mut bytes = encode_message(&m).unwrap().to_vec();
        bytes.extend_from_slice(&crafted);
        assert!(matches!(decode_message(&bytes), Err(MessageDecodeError::Malformed { .. })));
    }

    #[test]
    fn malformed_wire_formats_are_refused() {
        let bad = |b: &[u8]| {
            let r = decode_message(b);
            assert!(matches!(r, Err(MessageDecodeError::Malformed { .. })), "{b:?}: {r:?}");
        };
        bad(&[0x10]); // `to`, its varint missing
        bad(&[0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]); // above 2^64
        bad(&[0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        bad(&[0x3a, 0x05, 0x08]); // `entries`, 5 bytes announced, 1 present
        bad(&[0x00, 0x01]); // field 0
        bad(&[0x16]); // field 2, wire type 6
        bad(&[0x12, 0x00]); // `to` as bytes
        bad(&[0x11, 0, 0, 0, 0, 0, 0, 0, 0]); // `to` as fixed64
        // An entry whose length runs past the snapshot that holds it.
        bad(&[0x4a, 0x02, 0x12, 0x05, 0x08, 0x01]);
        assert!(matches!(
            decode_message(&vec![0u8; RAFT_MESSAGE_BYTES_MAX + 1]),
            Err(MessageDecodeError::TooLarge { .. })
        ));
        // Unknown fields of the other wire types pass, as protobuf skips them.
        let skippable = [0xa2, 0x06, 0x02, 0xaa, 0xbb]; // field 100, 2 bytes
        let mut with_term = skippable.to_vec();
        with_term.extend_from_slice(&[0x20, 0x07]); // term 7 after it
        assert_eq!(decode_message(&with_term).unwrap().term, 7);
    }
}
