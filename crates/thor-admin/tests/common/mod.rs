//! Shared test fixtures: a small schema and helpers to build and read its objects.
#![allow(dead_code)]

use std::sync::Arc;

use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, RawRef, VarKind};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::Disk;

/// `test.Item`: next (ref), owner (u32), seq (u32), then a byte payload.
pub fn item_class() -> ClassDesc {
    ClassDesc::new("test.Item", 12, &[0], VarKind::Bytes).unwrap()
}

/// Builds an Item whose class word is `class` (an oref or a tagged word).
pub fn item(class: u32, next: u32, owner: u32, seq: u32, payload: &[u8]) -> Vec<u8> {
    let c = item_class();
    let mut o = c.new_object(class, payload.len());
    put_u32(&mut o, 4, next);
    put_u32(&mut o, 8, owner);
    put_u32(&mut o, 12, seq);
    let at = c.var_offset();
    o[at..at + payload.len()].copy_from_slice(payload);
    o
}

/// The fields of an Item.
pub fn fields(o: &[u8]) -> (u32, u32, u32) {
    (u32_at(o, 4), u32_at(o, 8), u32_at(o, 12))
}

/// Creates the Item class in `engine`; returns its oref.
pub fn install_class(engine: &Engine) -> Oref {
    let out = engine
        .commit(CommitRequest { versions: vec![], created: vec![item_class().to_class_object()] })
        .unwrap();
    out.created[0]
}

/// A tagged reference to created object `i`.
pub fn tag(i: u32) -> u32 {
    RawRef::tagged_word(i)
}

/// Every object of every allocated page, by oref.
pub fn scan(engine: &Engine) -> Vec<(Oref, Vec<u8>)> {
    let tail = engine.stats().pages_allocated;
    let mut out = Vec::new();
    for p in 1..=tail {
        let id = PageId::new(p).unwrap();
        let page = engine.fetch(id).unwrap();
        let v = PageView::parse(&page).unwrap();
        for (oid, o) in v.objects() {
            out.push((Oref::new(id, oid), o.to_vec()));
        }
    }
    out
}

/// Reads one object through a fetch of its page.
pub fn read(engine: &Engine, oref: Oref) -> Option<Vec<u8>> {
    let page = engine.fetch(oref.page()?).ok()?;
    PageView::parse(&page).unwrap().object(oref.oid()).map(<[u8]>::to_vec)
}

/// Options for deterministic tests: no background thread, small budgets so that flushing,
/// truncation and eviction all happen.
pub fn small_opts() -> EngineOptions {
    let mut o = EngineOptions {
        page_size: 4096,
        mob_bytes: 64 * 1024,
        page_cache_bytes: 16 * 4096,
        flush_batch_pages: 4,
        background_flusher: false,
        ..EngineOptions::default()
    };
    o.log.segment_bytes = 32 * 1024;
    o
}

pub fn arc(disk: impl Disk + 'static) -> Arc<dyn Disk> {
    Arc::new(disk)
}
