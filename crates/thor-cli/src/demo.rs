//! `thor demo`: the store end to end on the embedded default (a server engine in a temporary
//! directory), printing what happens at each step.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use clap::Args;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageView, RawRef, VarKind, builtin};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::FileDisk;

/// Run the demo.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the database in this directory instead of a temporary one.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Number of objects to create.
    #[arg(long, default_value_t = 10_000)]
    objects: u32,
}

fn person_class() -> ClassDesc {
    // friend: reference; age: u32; then the name as bytes.
    ClassDesc::new("demo.Person", 8, &[0], VarKind::Bytes).expect("valid class")
}

fn person(class_word: u32, friend: u32, age: u32, name: &str) -> Vec<u8> {
    let c = person_class();
    let mut o = c.new_object(class_word, name.len());
    put_u32(&mut o, 4, friend);
    put_u32(&mut o, 8, age);
    let at = c.var_offset();
    o[at..at + name.len()].copy_from_slice(name.as_bytes());
    o
}

fn read(engine: &Engine, oref: Oref) -> Result<Vec<u8>> {
    let page = engine.fetch(oref.page().context("null reference")?)?;
    let v = PageView::parse(&page)?;
    Ok(v.object(oref.oid()).context("dangling reference")?.to_vec())
}

pub fn run(args: DemoArgs) -> Result<()> {
    let tmp;
    let path = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let opts = EngineOptions::default();
    println!("thor demo: database in {}", path.display());
    let disk = Arc::new(FileDisk::open_dir(&path, true)?);
    let engine = match Engine::open(disk.clone(), opts.clone()) {
        Ok(e) => e,
        Err(thor_server::EngineError::NotADatabase) => Engine::create(disk.clone(), opts.clone())?,
        Err(e) => return Err(e.into()),
    };
    println!("  page size {} bytes, server id {}", engine.page_size(), engine.server_id().0);

    // 1. One transaction creates the class and a ring of people, and points the root at it.
    let n = args.objects.max(2);
    let t = Instant::now();
    let mut created = vec![person_class().to_class_object()];
    for i in 0..n {
        let friend = RawRef::tagged_word(1 + (i + 1) % n);
        created.push(person(RawRef::tagged_word(0), friend, 20 + i % 60, &format!("person-{i}")));
    }
    let mut root = read(&engine, builtin::ROOT)?;
    let root_slot = builtin::desc(builtin::REFS).expect("builtin").var_offset();
    put_u32(&mut root, root_slot, RawRef::tagged_word(1));
    let out = engine.commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created })?;
    let first = out.created[1];
    let last = *out.created.last().expect("objects created");
    println!(
        "1. committed {} new objects in one transaction (LSN {}) in {:.1} ms: orefs {} .. {}",
        n + 1,
        out.lsn,
        t.elapsed().as_secs_f64() * 1e3,
        first,
        last
    );

    // 2. Walk the ring from the root by fetching pages.
    let t = Instant::now();
    let start = Oref::from_raw(u32_at(&read(&engine, builtin::ROOT)?, root_slot))
        .context("root slot holds a stored oref")?;
    let mut cur = start;
    let mut age_sum = 0u64;
    for _ in 0..n {
        let o = read(&engine, cur)?;
        age_sum += u64::from(u32_at(&o, 8));
        cur = Oref::from_raw(u32_at(&o, 4)).context("friend is a stored oref")?;
    }
    ensure!(cur == start, "the ring closes");
    println!(
        "2. walked the ring of {n} people through page fetches in {:.1} ms (sum of ages {age_sum})",
        t.elapsed().as_secs_f64() * 1e3
    );

    // 3. Modify every tenth person: the versions wait in the MOB; fetches see them at once.
    let versions: Vec<(Oref, Vec<u8>)> = out.created[1..]
        .iter()
        .step_by(10)
        .map(|o| {
            let mut b = read(&engine, *o)?;
            let age = u32_at(&b, 8);
            put_u32(&mut b, 8, age + 1);
            Ok((*o, b))
        })
        .collect::<Result<_>>()?;
    let changed = versions.len();
    engine.commit(CommitRequest { versions, created: vec![] })?;
    let s = engine.stats();
    println!(
        "3. committed {changed} new versions; the MOB holds {} versions ({} KB), fetches apply them",
        s.mob_entries,
        s.mob_bytes / 1024
    );
    ensure!(u32_at(&read(&engine, first)?, 8) == 21, "the new version is visible");

    // 4. Install everything, then reopen: recovery finds the same state.
    engine.flush_all()?;
    let s = engine.stats();
    println!(
        "4. flushed: {} pages written, {} versions installed ({:.1} per page), checkpoint LSN {}",
        s.pages_written, s.versions_installed, s.write_absorption, s.checkpoint
    );
    drop(engine);
    let engine = Engine::open(disk, opts)?;
    ensure!(u32_at(&read(&engine, first)?, 8) == 21, "recovered state");
    ensure!(u32_at(&read(&engine, last)?, 4) == first.raw(), "recovered ring");
    println!("5. reopened the database: the ring and the new ages are there");

    let s = engine.stats();
    println!(
        "\ncounters after reopening: {} pages allocated, {} fetches, cache hits {} / misses {}",
        s.pages_allocated, s.fetches, s.cache_hits, s.cache_misses
    );
    Ok(())
}
