//! Objects created through raw `Commit` requests over TCP are there after the server restarts,
//! and a `CommitOk` means durable: after a simulated power failure right after it, the commit
//! is in the recovered store.

mod common;

use std::sync::Arc;

use common::*;
use thor_core::le::{put_u32, u32_at};
use thor_core::{Oref, PageId, PageView, builtin};
use thor_net::NetConfig;
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;
use thor_wire::Transport;

/// The root object with slot 0 pointing at `target`.
fn root_pointing_at(target: u32) -> Vec<u8> {
    let refs = builtin::desc(builtin::REFS).unwrap();
    let mut root = refs.new_object(builtin::REFS.raw(), builtin::ROOT_SLOTS);
    put_u32(&mut root, refs.var_offset(), target);
    root
}

/// Walks the list from the root and returns each item's sequence number and payload length.
fn walk(t: &mut dyn Transport) -> Vec<u32> {
    let root = read(t, builtin::ROOT);
    let refs = builtin::desc(builtin::REFS).unwrap();
    let mut at = u32_at(&root, refs.var_offset());
    let mut seqs = Vec::new();
    while at != 0 {
        let oref = Oref::from_raw(at).expect("stored references are orefs");
        let obj = read(t, oref);
        seqs.push(seq_of(&obj));
        at = next_of(&obj);
    }
    seqs
}

#[test]
fn objects_survive_a_server_restart() {
    const N: u32 = 300;
    let db = Db::new();
    let (handler, server) = serve(db.create(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    // One commit creates the class, a linked list of N items whose class and next words are
    // tagged references to objects of the same commit, and points the root at the head.
    let mut created = vec![item_class().to_class_object()];
    for i in 0..N {
        let next = if i + 1 < N { tag(i + 2) } else { 0 };
        created.push(item(tag(0), next, i, &vec![i as u8; (i % 50) as usize]));
    }
    let orefs = commit_ok(&mut t, vec![(builtin::ROOT, root_pointing_at(tag(1)))], created);
    assert_eq!(orefs.len(), N as usize + 1);
    let pages: std::collections::BTreeSet<PageId> =
        orefs.iter().map(|o| o.page().unwrap()).collect();
    assert!(pages.len() > 3, "the list spans several 4 KB pages");

    // The pages came back with the tagged references replaced by orefs, in creation order.
    let class = orefs[0];
    for (i, oref) in orefs[1..].iter().enumerate() {
        let obj = read(&mut t, *oref);
        assert_eq!(u32_at(&obj, 0), class.raw());
        let next = if i + 1 < N as usize { orefs[i + 2].raw() } else { 0 };
        assert_eq!(next_of(&obj), next);
    }
    assert_eq!(walk(&mut t), (0..N).collect::<Vec<_>>());
    let before = all_pages(&mut t);
    drop(t);
    server.shutdown().unwrap();
    drop(handler); // the last reference to the engine: its flusher stops, files close

    // A new engine on the same directory, a new listener, a new connection.
    let (_handler, server) = serve(db.open(), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    assert_eq!(walk(&mut t), (0..N).collect::<Vec<_>>());
    let after = all_pages(&mut t);
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        // Versions may differ (the flusher may have installed the pages), objects may not.
        let (va, vb) = (PageView::parse(a).unwrap(), PageView::parse(b).unwrap());
        assert!(va.objects().eq(vb.objects()));
    }
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn an_acknowledged_commit_survives_a_power_failure() {
    let opts = EngineOptions { page_size: 4096, ..EngineOptions::default() };
    for seed in 0..4u64 {
        let disk = MemDisk::new();
        let engine = Arc::new(Engine::create(Arc::new(disk.clone()), opts.clone()).unwrap());
        let (handler, server) = serve(engine, NetConfig::default());
        let mut t = connect(server.local_addr(), b"");
        let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
        let mut acked = Vec::new();
        for i in 0..(5 + seed as u32) {
            let orefs = commit_ok(&mut t, vec![], vec![item(class.raw(), 0, i, b"durable")]);
            acked.push((orefs[0], i));
        }
        // The power fails right after the last CommitOk: whatever was not fsynced is lost.
        disk.crash(seed);
        drop(t);
        server.shutdown().unwrap();
        drop(handler);

        let engine = Arc::new(Engine::open(Arc::new(disk.clone()), opts.clone()).unwrap());
        let (_handler, server) = serve(engine, NetConfig::default());
        let mut t = connect(server.local_addr(), b"");
        for (oref, i) in acked {
            assert_eq!(seq_of(&read(&mut t, oref)), i, "seed {seed}: acknowledged commit lost");
        }
        drop(t);
        server.shutdown().unwrap();
    }
}
