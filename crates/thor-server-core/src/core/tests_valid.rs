//! What the core acknowledges is what the log can hold and recovery can read (issue 30): the
//! edges of a commit's record.

use bytes::Bytes;
use thor_wire::{CLIENT_TIE_BIT, Commit, Participant, Prepare, RefusedCode, RequestBody, Stamp};

use super::tests::{Harness, class_and_item, config, item_class, refusal};
use super::*;

/// A two-phase part's record carries its section (coordinator and participants) after its
/// objects. A part whose objects alone fit the log's record limit but whose record with the
/// section does not was once appended, and the log refused it: the server stopped ("storage
/// failure; reopen"), at any client's request. It is refused as too large instead, and the
/// server goes on.
#[test]
fn a_prepared_part_never_makes_a_record_the_log_refuses() {
    let max = 4096;
    let mut cfg = CoreConfig { record_bytes_max: max, ..config() };
    cfg.twopc.peers = vec![ServerId(2)];
    let mut h = Harness::with_id(cfg.clone(), ServerId(1));
    h.connect(1, b"");
    h.now += cfg.twopc.future_max_us;
    let (class, _) = class_and_item(&mut h, 1);
    // 203 created items of 12 bytes: a record of 24 + 203 x 20 = 4084 bytes, and 4100 with
    // the 16-byte section of two participants.
    let n = 203;
    let created: Vec<Bytes> =
        (0..n).map(|_| Bytes::from(item_class().new_object(class.raw(), 0))).collect();
    let objects = crate::record::encoded_len(0, n, 12 * n);
    assert_eq!(objects, 4084);
    let participants = vec![
        Participant { server: ServerId(1), writes: true },
        Participant { server: ServerId(2), writes: false },
    ];
    let section = 6 + 5 * participants.len();
    assert!(objects <= max && objects + section > max);
    let p = Prepare {
        stamp: Stamp { time_us: h.now, tie: CLIENT_TIE_BIT | 5 },
        coordinator: Some(ServerId(1)),
        participants,
        commit: Commit { reads: vec![], versions: vec![], created, id: None, leaves: Vec::new() },
    };
    h.step(Input::Request {
        conn: 1,
        id: 2,
        req: thor_wire::Request::new(RequestBody::Prepare(Box::new(p))),
    });
    for e in &h.pending {
        if let Effect::Append { record, .. } = e {
            assert!(
                record.len() <= max,
                "an append of {} bytes past the limit {max}",
                record.len()
            );
        }
    }
    let out = h.settle();
    let replies = super::tests::replies_to(&out, 1);
    assert_eq!(replies.len(), 1, "{out:?}");
    assert_eq!(refusal(&replies[0].1), Some(RefusedCode::TooLarge), "{:?}", replies[0].1);
    assert!(h.core.failed().is_none());
    // The server goes on: an ordinary commit is acknowledged.
    let (_, item) = class_and_item(&mut h, 1);
    assert!(item.names_object());
}
