//! A client cannot corrupt the store: the server checks every committed object against its
//! class over the wire and refuses the commit with the matching code, leaving the store as it
//! was.

mod common;

use common::*;
use thor_core::le::put_u32;
use thor_core::{ClassDesc, Oid, Oref, PageId, VarKind, builtin};
use thor_net::NetConfig;
use thor_wire::{RefusedCode, ReplyBody, Request, Transport};

fn refusal(t: &mut dyn Transport, req: &Request) -> RefusedCode {
    match t.round_trip(req).unwrap().body {
        ReplyBody::CommitRefused { code, .. } => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn invalid_commits_are_refused_with_their_code_and_change_nothing() {
    let db = Db::new();
    let (handler, server) = serve(db.create(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let other_class = ClassDesc::new("test.Pair", 8, &[0, 1], VarKind::None).unwrap();
    let pair_class = commit_ok(&mut t, vec![], vec![other_class.to_class_object()])[0];
    let objs = commit_ok(&mut t, vec![], (0..3).map(|i| item(class.raw(), 0, i, b"abc")).collect());
    let obj = objs[0];
    let good = item(class.raw(), 0, 9, b"abc");
    let nowhere = Oref::new(PageId::new(3000).unwrap(), Oid::new(1).unwrap());
    let pages_before = all_pages(&mut t);
    let commits_before = handler.server_stats().commits;

    let cases: Vec<(&str, Request, RefusedCode)> = vec![
        (
            "a version of another size",
            commit_req(vec![(obj, item(class.raw(), 0, 9, b"abcdefgh"))], vec![]),
            RefusedCode::Reshape,
        ),
        (
            "a version of another class",
            commit_req(
                vec![(obj, {
                    let mut o = other_class.new_object(pair_class.raw(), 0);
                    o.resize(good.len(), 0);
                    o
                })],
                vec![],
            ),
            RefusedCode::Reshape,
        ),
        (
            "a created object of the wrong size for its class",
            commit_req(
                vec![],
                vec![{
                    let mut o = good.clone();
                    put_u32(&mut o, item_class().count_offset(), 40);
                    o
                }],
            ),
            RefusedCode::BadShape,
        ),
        (
            "a dangling reference",
            commit_req(vec![], vec![item(class.raw(), nowhere.raw(), 1, b"")]),
            RefusedCode::BadReference,
        ),
        (
            "a tagged reference past the created objects",
            commit_req(vec![], vec![item(class.raw(), tag(5), 1, b"")]),
            RefusedCode::BadReference,
        ),
        (
            "a dangling reference in a version",
            commit_req(vec![(obj, item(class.raw(), nowhere.raw(), 9, b"abc"))], vec![]),
            RefusedCode::BadReference,
        ),
        (
            "an instance of a non-class",
            commit_req(vec![], vec![item(obj.raw(), 0, 1, b"")]),
            RefusedCode::NotAClass,
        ),
        (
            "an instance of the root",
            commit_req(vec![], vec![item(builtin::ROOT.raw(), 0, 1, b"")]),
            RefusedCode::NotAClass,
        ),
        (
            "a version of a missing object",
            commit_req(vec![(nowhere, good.clone())], vec![]),
            RefusedCode::NoSuchObject,
        ),
        (
            "a version of a class",
            commit_req(vec![(class, item_class().to_class_object())], vec![]),
            RefusedCode::ClassIsImmutable,
        ),
        (
            "a version of a built-in class",
            commit_req(vec![(builtin::BYTES, good.clone())], vec![]),
            RefusedCode::ClassIsImmutable,
        ),
        (
            "the same object twice",
            commit_req(vec![(obj, good.clone()), (obj, good.clone())], vec![]),
            RefusedCode::Duplicate,
        ),
        (
            "an object larger than a page",
            commit_req(vec![], vec![item(class.raw(), 0, 1, &[7; 5000])]),
            RefusedCode::ObjectTooLarge,
        ),
        // One bad object spoils the whole commit, even after good ones.
        (
            "a good object then a bad one",
            commit_req(
                vec![(objs[1], good.clone())],
                vec![good.clone(), item(class.raw(), nowhere.raw(), 1, b"")],
            ),
            RefusedCode::BadReference,
        ),
    ];
    for (name, req, code) in &cases {
        assert_eq!(refusal(&mut t, req), *code, "{name}");
    }
    // The session is still usable and the store unchanged.
    assert_eq!(all_pages(&mut t), pages_before);
    let st = handler.server_stats();
    assert_eq!(st.commits, commits_before);
    assert_eq!(st.commits_refused, cases.len() as u64);
    // A correct commit still goes through.
    commit_ok(&mut t, vec![(obj, good)], vec![]);
    drop(t);
    server.shutdown().unwrap();
}
