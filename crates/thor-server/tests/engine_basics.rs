//! The engine's behaviour on one thread: commits, fetches, flushing, reopening, validation.

mod common;

use common::*;
use thor_core::le::put_u32;
use thor_core::{Oref, PageId, builtin};
use thor_server::{CommitRequest, Engine, EngineError, InvalidCommit};
use thor_storage::MemDisk;

#[test]
fn created_objects_are_clustered_in_creation_order_and_linked() {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    // A chain of 200 items, each pointing at the next one created in the same commit.
    let n = 200u32;
    let created: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let next = if i + 1 < n { tag(i + 1) } else { 0 };
            item(class.raw(), next, 7, i, &[i as u8; 40])
        })
        .collect();
    let out = e.commit(CommitRequest { versions: vec![], created }).unwrap();
    assert_eq!(out.created.len(), n as usize);
    for w in out.created.windows(2) {
        assert!(w[0] < w[1], "orefs follow creation order");
    }
    assert!(out.created.last().unwrap().page().unwrap().get() > 2, "spans several pages");
    for (i, oref) in out.created.iter().enumerate() {
        let o = read(&e, *oref).unwrap();
        let (next, owner, seq) = fields(&o);
        assert_eq!((owner, seq), (7, i as u32));
        let want = out.created.get(i + 1).map_or(0, |r| r.raw());
        assert_eq!(next, want, "tagged reference patched to the allocated oref");
    }
}

#[test]
fn versions_are_visible_before_and_after_flushing_and_after_reopen() {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let out = e
        .commit(CommitRequest {
            versions: vec![],
            created: vec![item(class.raw(), 0, 1, 0, b"aaaa")],
        })
        .unwrap();
    let a = out.created[0];
    for seq in 1..=50 {
        e.commit(CommitRequest {
            versions: vec![(a, item(class.raw(), 0, 1, seq, b"bbbb"))],
            created: vec![],
        })
        .unwrap();
        assert_eq!(fields(&read(&e, a).unwrap()).2, seq);
    }
    // Point the root at it.
    let mut root = read(&e, builtin::ROOT).unwrap();
    put_u32(&mut root, 8, a.raw());
    e.commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created: vec![] }).unwrap();
    let before_flush = e.stats();
    assert!(before_flush.mob_entries >= 2);
    e.flush_all().unwrap();
    let s = e.stats();
    assert_eq!(s.mob_entries, 0);
    assert!(s.pages_written >= 1);
    assert_eq!(fields(&read(&e, a).unwrap()).2, 50);
    drop(e);
    let e = Engine::open(arc(disk.clone()), small_opts()).unwrap();
    assert_eq!(fields(&read(&e, a).unwrap()).2, 50);
    let root = read(&e, builtin::ROOT).unwrap();
    assert_eq!(thor_core::le::u32_at(&root, 8), a.raw());
    // Without flushing, recovery replays the log.
    e.commit(CommitRequest {
        versions: vec![(a, item(class.raw(), 0, 1, 99, b"cccc"))],
        created: vec![],
    })
    .unwrap();
    drop(e);
    let e = Engine::open(arc(disk), small_opts()).unwrap();
    assert_eq!(read(&e, a).unwrap(), item(class.raw(), 0, 1, 99, b"cccc"));
}

#[test]
fn the_mob_budget_forces_flushing_and_truncates_the_log() {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let mut orefs = Vec::new();
    for i in 0..40u32 {
        let created = (0..20).map(|j| item(class.raw(), 0, i, j, &[1; 64])).collect();
        orefs.extend(e.commit(CommitRequest { versions: vec![], created }).unwrap().created);
    }
    for round in 0..5u32 {
        for chunk in orefs.chunks(50) {
            let versions =
                chunk.iter().map(|o| (*o, item(class.raw(), 0, 0, round, &[2; 64]))).collect();
            e.commit(CommitRequest { versions, created: vec![] }).unwrap();
        }
    }
    let s = e.stats();
    assert!(s.mob_bytes <= small_opts().mob_bytes, "MOB stays within its budget");
    // Without background threads every round runs before the call that started it returns,
    // so commits never find the MOB full here; the simulation covers commits waiting for room.
    assert!(s.flush_rounds > 0);
    assert!(s.write_absorption > 1.0, "several versions per page write: {s:?}");
    let segments = thor_storage::Disk::list(&disk)
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("log."))
        .count();
    assert!(segments <= 3, "old log segments were truncated ({segments} left)");
    for o in &orefs {
        assert_eq!(fields(&read(&e, *o).unwrap()).2, 4);
    }
}

fn refused(e: &Engine, req: CommitRequest) -> InvalidCommit {
    match e.commit(req) {
        Err(EngineError::Invalid(i)) => i,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn invalid_commits_are_refused_without_effect() {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk), small_opts()).unwrap();
    let class = install_class(&e);
    let a = e
        .commit(CommitRequest {
            versions: vec![],
            created: vec![item(class.raw(), 0, 1, 0, b"abcd")],
        })
        .unwrap()
        .created[0];
    let tail_before = e.stats().pages_allocated;
    let nowhere = Oref::new(PageId::new(tail_before + 5).unwrap(), thor_core::Oid::new(0).unwrap());
    let ghost = Oref::new(a.page().unwrap(), thor_core::Oid::new(300).unwrap());

    // Wrong size for the class (count says 4 bytes, object carries 8).
    let mut bad = item(class.raw(), 0, 1, 0, b"abcd");
    put_u32(&mut bad, 16, 9);
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![], created: vec![bad] }),
        InvalidCommit::BadShape { .. }
    ));
    // Dangling references: beyond the allocated pages, a missing oid, a missing created index.
    for r in [nowhere.raw(), ghost.raw(), tag(5)] {
        let obj = item(class.raw(), r, 1, 0, b"");
        assert!(matches!(
            refused(&e, CommitRequest { versions: vec![], created: vec![obj] }),
            InvalidCommit::BadReference { .. }
        ));
    }
    // A class that is not a class.
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![], created: vec![item(a.raw(), 0, 1, 0, b"")] }),
        InvalidCommit::NotAClass { .. }
    ));
    // Versions: missing object, changed size, changed class, class objects, duplicates.
    assert!(matches!(
        refused(
            &e,
            CommitRequest {
                versions: vec![(ghost, item(class.raw(), 0, 1, 0, b"abcd"))],
                created: vec![]
            }
        ),
        InvalidCommit::NoSuchObject(_)
    ));
    assert!(matches!(
        refused(
            &e,
            CommitRequest {
                versions: vec![(a, item(class.raw(), 0, 1, 0, b"abcdefgh"))],
                created: vec![]
            }
        ),
        InvalidCommit::Reshape { what: "size", .. }
    ));
    // A version that changes a reference has it checked like a created object's (a version
    // that keeps its committed references, as the ones below, is not checked again).
    for r in [nowhere.raw(), ghost.raw(), tag(5)] {
        assert!(matches!(
            refused(
                &e,
                CommitRequest {
                    versions: vec![(a, item(class.raw(), r, 1, 0, b"abcd"))],
                    created: vec![]
                }
            ),
            InvalidCommit::BadReference { .. }
        ));
    }
    let mut reclassed = item(class.raw(), 0, 1, 0, b"abcd");
    put_u32(&mut reclassed, 0, builtin::BYTES.raw());
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![(a, reclassed)], created: vec![] }),
        InvalidCommit::Reshape { what: "class", .. }
    ));
    assert!(matches!(
        refused(
            &e,
            CommitRequest {
                versions: vec![(class, item_class().to_class_object())],
                created: vec![]
            }
        ),
        InvalidCommit::ClassIsImmutable(_)
    ));
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![(builtin::REFS, vec![0; 8])], created: vec![] }),
        InvalidCommit::ClassIsImmutable(_)
    ));
    let v = item(class.raw(), 0, 1, 5, b"abcd");
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![(a, v.clone()), (a, v)], created: vec![] }),
        InvalidCommit::Duplicate(_)
    ));
    // Too large for a page.
    let huge = item(class.raw(), 0, 1, 0, &vec![0; 5000]);
    assert!(matches!(
        refused(&e, CommitRequest { versions: vec![], created: vec![huge] }),
        InvalidCommit::ObjectTooLarge { .. }
    ));

    // Nothing changed.
    assert_eq!(read(&e, a).unwrap(), item(class.raw(), 0, 1, 0, b"abcd"));
    assert_eq!(e.stats().pages_allocated, tail_before);
    assert_eq!(e.stats().commits_refused, 15);
}

#[test]
fn a_class_created_in_the_same_commit_can_be_used_at_once() {
    let e = Engine::create(arc(MemDisk::new()), small_opts()).unwrap();
    let created = vec![
        item(tag(1), 0, 0, 0, b"x"),
        item_class().to_class_object(),
        item(tag(1), tag(0), 0, 1, b"y"),
    ];
    let out = e.commit(CommitRequest { versions: vec![], created }).unwrap();
    let o = read(&e, out.created[2]).unwrap();
    assert_eq!(thor_core::le::u32_at(&o, 0), out.created[1].raw());
    assert_eq!(fields(&o).0, out.created[0].raw());
}

#[test]
fn fetching_unallocated_pages_is_an_error() {
    let e = Engine::create(arc(MemDisk::new()), small_opts()).unwrap();
    assert!(matches!(e.fetch(PageId::new(2).unwrap()), Err(EngineError::NoSuchPage(2))));
    assert!(e.fetch(PageId::FIRST).is_ok());
}

#[test]
fn create_refuses_an_existing_database_and_open_an_empty_directory() {
    let disk = MemDisk::new();
    assert!(matches!(
        Engine::open(arc(disk.clone()), small_opts()),
        Err(EngineError::NotADatabase)
    ));
    drop(Engine::create(arc(disk.clone()), small_opts()).unwrap());
    assert!(matches!(Engine::create(arc(disk), small_opts()), Err(EngineError::AlreadyExists)));
}

#[test]
fn bulk_load_writes_pages_and_allocation_continues_after_it() {
    let disk = MemDisk::new();
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let (first, last) = {
        let mut b = e.bulk_load().unwrap();
        let first = b.add(&item(class.raw(), 0, 0, 0, &[3; 100])).unwrap();
        let mut prev = first;
        let mut last = first;
        for i in 1..1000u32 {
            last = b.add(&item(class.raw(), 0, 0, i, &[3; 100])).unwrap();
            // Patch the previous object's reference to point forward.
            put_u32(b.object_mut(prev).unwrap(), 4, last.raw());
            prev = last;
        }
        let r = b.finish().unwrap();
        assert_eq!(r.objects, 1000);
        assert!(r.pages > 20);
        (first, last)
    };
    assert_eq!(fields(&read(&e, first).unwrap()).1, 0);
    let after = e
        .commit(CommitRequest {
            versions: vec![],
            created: vec![item(class.raw(), first.raw(), 0, 0, b"")],
        })
        .unwrap()
        .created[0];
    assert!(after > last);
    drop(e);
    let e = Engine::open(arc(disk), small_opts()).unwrap();
    let mut cur = first;
    let mut n = 1;
    while let (next, _, _) = fields(&read(&e, cur).unwrap())
        && next != 0
    {
        cur = Oref::from_raw(next).unwrap();
        n += 1;
    }
    assert_eq!(n, 1000);
    assert_eq!(cur, last);
}

#[test]
fn a_read_only_commit_writes_no_log_record() {
    let e = Engine::create(arc(MemDisk::new()), small_opts()).unwrap();
    install_class(&e);
    let before = e.stats();
    let out = e.commit(CommitRequest::default()).unwrap();
    let after = e.stats();
    assert_eq!(out.lsn.0, 1, "after the last durable commit (the class's)");
    assert_eq!(after.log_fsyncs, before.log_fsyncs, "no fsync");
    assert_eq!(after.log_bytes, before.log_bytes, "no record");
    assert_eq!(after.commits, before.commits + 1);
    assert_eq!(after.read_only_commits, 1);
}
