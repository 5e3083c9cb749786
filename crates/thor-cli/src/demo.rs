//! `thor demo`: the store end to end on the embedded default (a server in this process over a
//! temporary directory, clients talking to it through the in-process transport), printing what
//! happens at each step.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use clap::Args;
use thor_client::{PolicyConfig, Ref, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::FileDisk;

/// Run the demo.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the database in this directory instead of a temporary one.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Number of people in the demo's ring of objects.
    #[arg(long, value_parser = crate::at_least_one::<u32>, allow_negative_numbers = true, default_value_t = 20_000)]
    objects: u32,
    /// Client cache for the cold read-back, in KiB (small, to show replacement at work).
    #[arg(long, value_parser = crate::at_least_one::<usize>, allow_negative_numbers = true, default_value_t = 256)]
    small_cache_kb: usize,
}

thor_client::class! {
    /// A person in the demo: an age, a friend, and a name.
    pub class Person("demo.Person") {
        age: u32,
        friend: Ref<Person>,
    }
    var bytes;
}

/// The demo's server. `background_flusher: false` after the restart: installs happen only when
/// the demo asks (step 6), so what it says the MOB holds is what it holds.
fn server(path: &std::path::Path, background_flusher: bool) -> Result<Arc<Engine>> {
    let disk = Arc::new(FileDisk::open_locked(path, true, "thor demo")?);
    let opts = EngineOptions { background_flusher, ..EngineOptions::default() };
    let engine = match Engine::open(disk.clone(), opts.clone()) {
        Ok(e) => e,
        Err(thor_server::EngineError::NotADatabase) => Engine::create(disk, opts)?,
        Err(e) => return Err(e.into()),
    };
    Ok(Arc::new(engine))
}

fn session(h: &Arc<Engine>, cache_bytes: usize, policy: PolicyConfig) -> Result<Session> {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default())?;
    Ok(Session::new(
        Box::new(t),
        SessionConfig { cache_bytes, policy, ..SessionConfig::default() },
    )?)
}

fn name(i: u32) -> String {
    format!("person-{i:06}")
}

/// Walks the ring from root slot 0 and checks every person; returns the sum of ages.
fn walk(s: &Session, n: u32) -> Result<u64> {
    let start: Ref<Person> = s.root(0)?;
    let mut cur = start;
    let mut sum = 0u64;
    for i in 0..n {
        let p = s.get(cur)?;
        ensure!(p.var_bytes() == name(i).into_bytes(), "person {i} has the wrong name");
        sum += u64::from(p.get(Person::age));
        cur = p.get(Person::friend);
    }
    ensure!(s.canonical(cur)? == s.canonical(start)?, "the ring closes");
    Ok(sum)
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
    let n = args.objects.max(2);
    println!("thor demo: a server in this process over {}", path.display());
    let h = server(&path, true)?;
    println!(
        "  page size {} bytes; clients use the in-process transport (no socket)",
        h.page_size()
    );

    // 1. One transaction creates a ring of people and points the root at it.
    let s = session(&h, 64 << 20, PolicyConfig::Fpc)?;
    create_ring(&s, n)?;

    // 2. A new session with a small cache reads the ring back, fetching pages as it goes.
    walk_small(&h, n, args.small_cache_kb)?;

    // 3. Modify every tenth person; the versions go to the server's MOB, not to pages.
    modify_some(&s, n)?;

    // 4. An aborted transaction leaves nothing behind.
    let first = s.get(s.root::<Person>(0)?)?;
    let before = first.get(Person::age);
    first.set(Person::age, 999)?;
    drop(first);
    let ghost = s.create::<Person>(0)?.as_ref();
    s.abort();
    ensure!(s.get(s.root::<Person>(0)?)?.get(Person::age) == before, "abort restored the age");
    ensure!(s.get(ghost).is_err(), "the created object is gone");
    println!("4. an aborted transaction's write was undone and its created object dropped");

    // 5. Restart the server: recovery replays the log into the MOB.
    // `halt` stops the engine as a crash would (every acknowledged commit is in the log, none
    // installed), so the restart has something to replay; dropping it would install everything.
    drop(s);
    Arc::try_unwrap(h).map_err(|_| anyhow::anyhow!("a session still holds the server"))?.halt();
    let h = server(&path, false)?;
    let recovered = h.stats();
    let r = session(&h, 64 << 20, PolicyConfig::Fpc)?;
    let sum = walk(&r, n)?;
    let p0 = r.get(r.root::<Person>(0)?)?.get(Person::age);
    ensure!(p0 == before, "the committed age survived the restart");
    println!(
        "5. after a crash and a restart the ring is intact (sum of ages {sum}): recovery replayed \
         the log after the checkpoint (LSN {}) into the MOB, {} versions",
        recovered.checkpoint, recovered.mob_entries
    );
    h.flush_all().context("flushing")?;
    let e = h.stats();
    println!(
        "6. installing them wrote {} pages, {:.1} versions per page write",
        e.pages_written, e.write_absorption
    );

    // 7. The OO7 experiments in miniature: HAC against FPC on the small database.
    thor_lab::oo7::demo_experiments(&path)?;
    println!("{TERMS}");
    Ok(())
}

/// Step 1: one transaction creates a ring of `n` people and points root slot 0 at it.
fn create_ring(s: &Session, n: u32) -> Result<()> {
    let t = Instant::now();
    let mut people = Vec::with_capacity(n as usize);
    for i in 0..n {
        let p = s.create::<Person>(name(i).len())?;
        p.set(Person::age, 20 + i % 60)?;
        p.set_var_bytes(name(i).as_bytes())?;
        people.push(p.as_ref());
    }
    for i in 0..n as usize {
        s.get(people[i])?.set(Person::friend, people[(i + 1) % n as usize])?;
    }
    s.set_root(0, people[0])?;
    let info = s.commit()?;
    println!(
        "1. one transaction created {} objects ({} people, their class, the schema) and committed \
         at LSN {} in {:.1} ms: the reply came once the log record was on disk",
        info.created,
        n,
        info.lsn,
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// Step 2: a new session with a cache of `small_cache_kb` KiB walks the ring, under FPC and HAC.
fn walk_small(h: &Arc<Engine>, n: u32, small_cache_kb: usize) -> Result<()> {
    let small = small_cache_kb << 10;
    for policy in [PolicyConfig::Fpc, PolicyConfig::HAC] {
        let r = session(h, small, policy)?;
        let t = Instant::now();
        let sum = walk(&r, n)?;
        let st = r.stats();
        let cs = r.cache_stats();
        println!(
            "2. a new session ({}, {} KiB cache) walked the ring in {:.1} ms: {} fetches, {} frames \
             evicted whole, {} compacted ({} objects kept), sum of ages {sum}",
            r.policy_name(),
            small_cache_kb,
            t.elapsed().as_secs_f64() * 1e3,
            st.fetches,
            cs.replacement.frames_evicted,
            cs.replacement.frames_compacted,
            cs.replacement.objects_kept,
        );
    }
    Ok(())
}

/// Step 3: a transaction modifies every tenth person.
fn modify_some(s: &Session, n: u32) -> Result<()> {
    let t = Instant::now();
    let shipped_before = s.stats().bytes_shipped;
    let mut cur = s.root::<Person>(0)?;
    for i in 0..n {
        let p = s.get(cur)?;
        if i % 10 == 0 {
            p.set(Person::age, p.get(Person::age) + 1)?;
        }
        cur = p.get(Person::friend);
    }
    let info = s.commit()?;
    let stats = s.server_stats()?;
    println!(
        "3. a transaction modified {} people and shipped {} KiB of object versions in {:.1} ms; the \
         server's MOB holds {} objects (created and modified) awaiting installation",
        info.modified,
        (s.stats().bytes_shipped - shipped_before) / 1024,
        t.elapsed().as_secs_f64() * 1e3,
        stats.mob_entries,
    );
    Ok(())
}

/// What the demo's words mean.
const TERMS: &str = "
terms:
  LSN        log sequence number: a commit's place in the server's log, durable before the reply
  MOB        modified object buffer: committed versions kept at the server until the flusher
             installs them into their pages, so a commit writes only its log record
  FPC        a client cache of whole pages, least recently used page out first
  HAC        hybrid adaptive caching: a page's frame is compacted to keep only its hot objects,
             so the cache holds more of what is used (the ring walk uses every object of each
             page, so there HAC and FPC do the same; the OO7 table is where they differ)
  frame      a page-sized slot of the client cache; a fetch fills one
  fetch      a round trip to the server for a page the cache lacks";
