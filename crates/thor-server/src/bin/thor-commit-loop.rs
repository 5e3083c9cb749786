//! A fixture for the process-kill crash test (`tests/kill.rs`), not a tool: opens (or creates)
//! the database in the directory given as the first argument and commits forever. Commit `k`
//! sets the counter object (root slot 0) to seq `k` and creates one item with seq `k`. After
//! each acknowledged commit it prints `ack k` and flushes stdout, so the parent knows exactly
//! which commits were acknowledged when it kills this process.

use std::io::Write;
use std::sync::Arc;

use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageView, VarKind, builtin};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::FileDisk;

fn item(class: u32, owner: u32, seq: u32, len: usize) -> Vec<u8> {
    let c = ClassDesc::new("test.Item", 12, &[0], VarKind::Bytes).expect("valid class");
    let mut o = c.new_object(class, len);
    put_u32(&mut o, 8, owner);
    put_u32(&mut o, 12, seq);
    let at = c.var_offset();
    o[at..at + len].fill(seq as u8);
    o
}

fn read(e: &Engine, oref: Oref) -> Vec<u8> {
    let page = e.fetch(oref.page().expect("not null")).expect("fetch");
    PageView::parse(&page).expect("valid").object(oref.oid()).expect("present").to_vec()
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: thor-commit-loop DIR");
    let disk = Arc::new(FileDisk::open_locked(&dir, true, "thor-commit-loop").expect("open dir"));
    let opts = EngineOptions {
        page_size: 4096,
        mob_bytes: 256 * 1024,
        page_cache_bytes: 64 * 4096,
        ..EngineOptions::default()
    };
    let e = match Engine::open(disk.clone(), opts.clone()) {
        Ok(e) => e,
        Err(thor_server::EngineError::NotADatabase) => Engine::create(disk, opts).expect("create"),
        Err(err) => panic!("open: {err}"),
    };
    let mut root = read(&e, builtin::ROOT);
    let counter_at = 8; // slot 0 of the root's reference array
    let mut counter = Oref::from_raw(u32_at(&root, counter_at)).expect("stored oref");
    if counter.is_null() {
        let class = ClassDesc::new("test.Item", 12, &[0], VarKind::Bytes).expect("valid");
        let created =
            vec![class.to_class_object(), item(thor_core::RawRef::tagged_word(0), 1000, 0, 16)];
        put_u32(&mut root, counter_at, thor_core::RawRef::tagged_word(1));
        let out = e
            .commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created })
            .expect("setup commit");
        counter = out.created[1];
    }
    let class = u32_at(&read(&e, counter), 0);
    let mut k = u32_at(&read(&e, counter), 12);
    let mut out = std::io::stdout().lock();
    writeln!(out, "start {k}").expect("stdout");
    out.flush().expect("stdout");
    loop {
        k += 1;
        let versions = vec![(counter, item(class, 1000, k, 16))];
        let created = vec![item(class, 1, k, (k as usize * 37) % 500)];
        e.commit(CommitRequest { versions, created }).expect("commit");
        writeln!(out, "ack {k}").expect("stdout");
        out.flush().expect("stdout");
    }
}
