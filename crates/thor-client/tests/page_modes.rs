//! The page-based commit modes (issue 14) end to end: a session over the in-process transport
//! to an engine in each mode, on a disk that dies and crashes.
//!
//! Cells (a counter and a byte payload, about 15 to a 4 KiB page) are rewritten in part by
//! seeded transactions, some aborted, with a recovery buffer of two pages (so records go early,
//! with undo, in most transactions) and a server page cache of four pages (so PD-REDO reads
//! pages to apply records to). A model holds what every acknowledged commit wrote.
//!
//! Every case also runs with the page images bounded at two pages, so that most transactions
//! steal dirty pages: their records (with undo) and, ESM and WPL, the pages whole go before the
//! commit, and a later write to such a page fetches it again.
//!
//! - Without a fault, a fresh session must read exactly the model after every commit.
//! - With the disk dying at a random operation, then crashing (any subset of unsynced writes
//!   lost, the last torn), the reopened database must hold every acknowledged commit, and the
//!   one commit in flight entirely or not at all; then it must go on working.

use std::sync::Arc;

use thor_client::{PolicyConfig, RecoveryConfig, Ref, Refs, Session, SessionConfig};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::{Disk, FaultDisk, FaultPlan};
use thor_wire::CommitMode;

thor_client::class! {
    /// A cell: a counter and a payload, rewritten in part by transactions.
    pub class Cell("test.Cell") {
        value: u64,
    }
    var bytes;
}

const CELLS: usize = 120;
const PAYLOAD: usize = 240;
const PAGE: usize = 4096;

const PAGE_MODES: [CommitMode; 5] =
    [CommitMode::PdRedo, CommitMode::PdEsm, CommitMode::SdEsm, CommitMode::SlEsm, CommitMode::Wpl];

/// SplitMix64: a seed replays a run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn opts(mode: CommitMode) -> EngineOptions {
    let mut o = EngineOptions {
        page_size: PAGE,
        mob_bytes: 64 * 1024,
        page_cache_bytes: 4 * PAGE,
        flush_batch_pages: 4,
        background_flusher: false,
        commit_mode: mode,
        ..EngineOptions::default()
    };
    o.log.segment_bytes = 32 * 1024;
    o
}

/// A recovery buffer that fills in most transactions: two pages for PD, sixteen blocks of
/// 256 bytes for SD and SL; and at most `shadow_pages` page images (0: as many as the cache
/// holds, so no page is stolen).
fn small_recovery_buffer(mode_code: u64, shadow_pages: usize) -> RecoveryConfig {
    match CommitMode::from_code(mode_code as u8).unwrap() {
        CommitMode::SdEsm | CommitMode::SlEsm => {
            RecoveryConfig { buffer_pages: 1, block_bytes: 256, shadow_pages }
        }
        _ => RecoveryConfig { buffer_pages: 2, block_bytes: 64, shadow_pages },
    }
}

/// The image bound that makes transactions steal pages: two (a transaction writes up to
/// eight pages).
const STEALING: usize = 2;

/// The image bound of a seed's run: half the seeds steal pages.
fn shadow_of(seed: u64) -> usize {
    if seed % 2 == 1 { STEALING } else { 0 }
}

fn session(h: &Arc<Engine>) -> Session {
    session_with(h, 0)
}

fn session_with(h: &Arc<Engine>, shadow_pages: usize) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let cfg = SessionConfig {
        cache_bytes: 1 << 20,
        policy: PolicyConfig::Fpc,
        refresh_after: None,
        recovery: small_recovery_buffer(h.server_stats().commit_mode, shadow_pages),
        ..SessionConfig::default()
    };
    Session::new(Box::new(t), cfg).unwrap()
}

/// What a cell holds.
#[derive(Clone, PartialEq, Eq, Debug)]
struct CellState {
    value: u64,
    payload: Vec<u8>,
}

/// Creates the cells (in whatever mode the engine runs: creation travels whole) and makes
/// them durable and installed.
fn setup(h: &Arc<Engine>) -> Vec<CellState> {
    let s = session(h);
    let list = s.create::<Refs<Cell>>(CELLS).unwrap();
    let mut model = Vec::new();
    for i in 0..CELLS {
        let c = s.create::<Cell>(PAYLOAD).unwrap();
        c.set(Cell::value, i as u64).unwrap();
        let payload: Vec<u8> = (0..PAYLOAD).map(|b| (i + b) as u8).collect();
        c.set_var_bytes(&payload).unwrap();
        list.set_var_ref(i, c.as_ref()).unwrap();
        model.push(CellState { value: i as u64, payload });
    }
    let r = list.as_ref();
    drop(list);
    s.set_root(0, r).unwrap();
    s.commit().unwrap();
    h.flush_all().unwrap();
    model
}

fn try_cells(s: &Session) -> Result<Vec<Ref<Cell>>, thor_client::ClientError> {
    let list = s.get(s.root::<Refs<Cell>>(0)?)?;
    Ok((0..list.var_len()).map(|i| list.var_ref(i)).collect())
}

fn cells(s: &Session) -> Vec<Ref<Cell>> {
    try_cells(s).unwrap()
}

/// Reads every cell through a fresh session.
fn read_all(h: &Arc<Engine>) -> Vec<CellState> {
    let s = session(h);
    let refs = cells(&s);
    let out = refs
        .iter()
        .map(|&r| {
            let c = s.get(r).unwrap();
            CellState { value: c.get(Cell::value), payload: c.var_bytes() }
        })
        .collect();
    s.commit().unwrap();
    out
}

/// One transaction's writes: (cell, new state).
type Writes = Vec<(usize, CellState)>;

/// Runs one seeded transaction on `s` against `model`; returns its writes and whether to
/// commit it (else it is aborted).
fn transaction(
    s: &Session,
    refs: &[Ref<Cell>],
    model: &[CellState],
    rng: &mut Rng,
    seq: u64,
) -> Result<(Writes, bool), thor_client::ClientError> {
    let mut writes: Writes = Vec::new();
    let n = 1 + rng.below(10) as usize;
    for _ in 0..n {
        let i = rng.below(CELLS as u64) as usize;
        let mut st = writes
            .iter()
            .rev()
            .find(|(j, _)| *j == i)
            .map(|(_, st)| st.clone())
            .unwrap_or_else(|| model[i].clone());
        let c = s.get(refs[i])?;
        // A counter, and a run of the payload (sometimes none, sometimes all of it).
        if rng.below(3) > 0 {
            st.value = seq * 1000 + i as u64;
            c.set(Cell::value, st.value)?;
        }
        let at = rng.below(PAYLOAD as u64) as usize;
        let len = rng.below((PAYLOAD - at) as u64 + 1) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        c.write_var_bytes(at, &bytes)?;
        st.payload[at..at + len].copy_from_slice(&bytes);
        writes.push((i, st));
    }
    Ok((writes, rng.below(5) != 0))
}

/// Asserts that `got` is `want`, naming the first cell that differs (not printing them all).
#[track_caller]
fn assert_same(got: &[CellState], want: &[CellState], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: cell count");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        let at = (0..PAYLOAD).find(|&b| got[i].payload[b] != want[i].payload[b]);
        panic!(
            "{what}: cell {i} differs: value {} want {}, first payload byte differing {at:?}",
            got[i].value, want[i].value
        );
    }
}

fn apply(model: &mut [CellState], writes: &Writes) {
    for (i, st) in writes {
        model[*i] = st.clone();
    }
}

#[test]
fn every_mode_reads_back_exactly_what_was_committed() {
    for mode in std::iter::once(CommitMode::Obj).chain(PAGE_MODES) {
        reads_back_exactly_what_was_committed(mode, 0);
    }
}

#[test]
fn every_mode_reads_back_exactly_what_was_committed_when_dirty_pages_are_stolen() {
    for mode in PAGE_MODES {
        reads_back_exactly_what_was_committed(mode, STEALING);
    }
}

fn reads_back_exactly_what_was_committed(mode: CommitMode, shadow_pages: usize) {
    {
        let h =
            Arc::new(Engine::create(Arc::new(thor_storage::MemDisk::new()), opts(mode)).unwrap());
        let mut model = setup(&h);
        let s = session_with(&h, shadow_pages);
        assert_eq!(s.commit_mode(), mode);
        let refs = cells(&s);
        let mut rng = Rng(7 + mode.code() as u64);
        for seq in 1..=30 {
            let (writes, commit) = transaction(&s, &refs, &model, &mut rng, seq).unwrap();
            if commit {
                s.commit().unwrap_or_else(|e| panic!("{mode}: commit {seq}: {e}"));
                apply(&mut model, &writes);
            } else {
                s.abort();
            }
            if seq % 5 == 0 {
                assert_same(&read_all(&h), &model, &format!("{mode}: after transaction {seq}"));
                if seq % 10 == 0 {
                    h.flush_all().unwrap();
                }
            }
        }
        assert_same(&read_all(&h), &model, &format!("{mode}: at the end"));
        let st = h.server_stats();
        assert_eq!(st.commit_mode, u64::from(mode.code()));
        if shadow_pages > 0 {
            let p = s.page_mode_stats().unwrap();
            assert!(p.pages_stolen > 0 && p.image_fetches > 0, "{mode}: {p:?}");
            // ESM and WPL ship a stolen page whole; PD-REDO only its records.
            assert_eq!(st.pages_early > 0, mode.ships_pages(), "{mode}: {st:?}");
            assert!(st.pages_early <= p.pages_stolen, "{mode}: {st:?} {p:?}");
            return;
        }
        if mode == CommitMode::Wpl {
            // Pages only: no records, nothing copied; every page logged whole, the table
            // checkpointed and emptied by the install rounds.
            let p = s.page_mode_stats().unwrap();
            assert_eq!((p.records, p.copies), (0, 0), "{p:?}");
            assert!(p.pages_shipped > 0 && st.pages_shipped >= p.pages_shipped, "{p:?} {st:?}");
            let e = h.stats();
            assert!(e.wpl.images >= p.pages_shipped, "{e:?}");
            assert!(e.wpl.checkpoints > 0 && e.wpl.installed > 0, "{e:?}");
            h.flush_all().unwrap();
            assert_eq!(h.stats().wpl_table, 0, "every copy went home");
        } else if mode.is_page_based() {
            let p = s.page_mode_stats().unwrap();
            assert!(p.records > 0 && p.records_early > 0, "{mode}: {p:?}");
            assert!(st.page_commits > 0 && st.page_records_early > 0, "{mode}: {st:?}");
            if mode == CommitMode::PdRedo {
                assert!(st.redo_reads > 0, "the small page cache makes REDO read pages");
                assert_eq!(st.pages_shipped, 0);
            } else {
                assert!(
                    p.pages_shipped > 0 && st.pages_shipped >= p.pages_shipped,
                    "{mode}: the client shipped {} pages, the server took {} (the setup's too)",
                    p.pages_shipped,
                    st.pages_shipped
                );
            }
        } else {
            assert_eq!(s.page_mode_stats(), None);
        }
    }
}

#[test]
fn concurrent_writers_of_one_object_are_validated_per_object() {
    for mode in PAGE_MODES {
        let h =
            Arc::new(Engine::create(Arc::new(thor_storage::MemDisk::new()), opts(mode)).unwrap());
        let mut model = setup(&h);
        let (a, b) = (session(&h), session(&h));
        let (ra, rb) = (cells(&a), cells(&b));
        a.commit().unwrap();
        b.commit().unwrap();
        // Both write cell 0 (same page as cell 1, which only b writes).
        a.get(ra[0]).unwrap().set(Cell::value, 111).unwrap();
        let cb = b.get(rb[0]).unwrap();
        cb.set(Cell::value, 222).unwrap();
        drop(cb);
        b.get(rb[1]).unwrap().set(Cell::value, 333).unwrap();
        a.commit().unwrap();
        model[0].value = 111;
        let e = b.commit().unwrap_err();
        assert!(e.is_conflict(), "{mode}: {e}");
        assert_same(&read_all(&h), &model, &format!("{mode}: b's whole transaction is gone"));
        // Different objects of one page commit side by side.
        let ca = a.get(ra[2]).unwrap();
        ca.set(Cell::value, 444).unwrap();
        drop(ca);
        let cb = b.get(rb[3]).unwrap();
        cb.set(Cell::value, 555).unwrap();
        drop(cb);
        a.commit().unwrap();
        if mode == CommitMode::Wpl {
            // WPL's page rule: b's copy of the page predates a's commit to it, so b's whole
            // page cannot be logged; run again on a fresh copy, it commits.
            let e = b.commit().unwrap_err();
            assert!(e.is_conflict(), "{mode}: {e}");
            assert_eq!(h.stats().wpl.page_rule_refusals, 1);
            let cb = b.get(rb[3]).unwrap();
            cb.set(Cell::value, 555).unwrap();
            drop(cb);
        }
        b.commit().unwrap();
        model[2].value = 444;
        model[3].value = 555;
        assert_same(&read_all(&h), &model, &format!("{mode}: neighbours on a page both kept"));
    }
}

fn seeds() -> std::ops::Range<u64> {
    0..std::env::var("THOR_CRASH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40)
}

/// Runs transactions until the disk dies (or `max` have run); returns the model of the
/// acknowledged state and the writes of the commit in flight, if one failed.
fn run_until_death(
    h: &Arc<Engine>,
    mut model: Vec<CellState>,
    seed: u64,
    max: u64,
    flush: bool,
) -> (Vec<CellState>, Option<Writes>) {
    let s = session_with(h, shadow_of(seed));
    let Ok(refs) = try_cells(&s) else { return (model, None) };
    let mut rng = Rng(seed);
    for seq in 1..=max {
        let Ok((writes, commit)) = transaction(&s, &refs, &model, &mut rng, seq) else {
            // The disk died under a fetch: nothing was sent for commit.
            return (model, None);
        };
        if !commit {
            s.abort();
            continue;
        }
        match s.commit() {
            Ok(_) => apply(&mut model, &writes),
            Err(_) => return (model, Some(writes)),
        }
        if flush && rng.below(4) == 0 && h.flush_round().is_err() {
            return (model, None);
        }
    }
    (model, None)
}

/// Returns how many WPL copies the reopened engine put back into its MOB (0 in other modes).
fn crash_case(mode: CommitMode, seed: u64, flush: bool) -> u64 {
    // How many operations a whole run takes, to place the death inside it.
    let ops = {
        let disk = FaultDisk::new();
        let h = Arc::new(Engine::create(arc(disk.clone()), opts(mode)).unwrap());
        let model = setup(&h);
        let before = disk.counters().ops;
        run_until_death(&h, model, seed, 25, flush);
        disk.counters().ops - before
    };
    let disk = FaultDisk::new();
    let h = Arc::new(Engine::create(arc(disk.clone()), opts(mode)).unwrap());
    let model = setup(&h);
    let mut rng = Rng(seed ^ 0xDEAD_BEEF);
    let at = disk.counters().ops + rng.below(ops + 1);
    disk.set_plan(FaultPlan { die_after_ops: Some(at), ..FaultPlan::default() });
    let (model, in_flight) = run_until_death(&h, model, seed, 25, flush);
    drop(h);
    disk.crash(seed);
    let h = Arc::new(
        Engine::open(arc(disk.clone()), opts(mode))
            .unwrap_or_else(|e| panic!("{mode} seed {seed}: reopen failed: {e}")),
    );
    let got = read_all(&h);
    if got != model {
        let mut with = model.clone();
        apply(
            &mut with,
            in_flight.as_ref().unwrap_or_else(|| {
                panic!("{mode} seed {seed}: recovered state differs from the acknowledged one")
            }),
        );
        assert_same(
            &got,
            &with,
            &format!("{mode} seed {seed}: neither without nor with the commit in flight"),
        );
    }
    // The recovered database goes on working in the same mode.
    let model = got;
    let (model, failed) = run_until_death(&h, model, seed + 1, 3, false);
    assert!(failed.is_none(), "{mode} seed {seed}: a commit failed after recovery");
    assert_same(&read_all(&h), &model, &format!("{mode} seed {seed}: after recovery"));
    h.stats().wpl.restored
}

fn run_two_until_death(
    h: &Arc<Engine>,
    mut model: Vec<CellState>,
    seed: u64,
    max: u64,
) -> (Vec<CellState>, Option<Writes>) {
    let sessions = [session_with(h, shadow_of(seed)), session(h)];
    let mut refs = Vec::new();
    for s in &sessions {
        let Ok(r) = try_cells(s) else { return (model, None) };
        refs.push(r);
    }
    let mut rng = Rng(seed);
    for seq in 1..=max {
        let k = rng.below(2) as usize;
        let s = &sessions[k];
        let (writes, commit) = match transaction(s, &refs[k], &model, &mut rng, seq) {
            Ok(t) => t,
            Err(e) if e.is_conflict() => {
                s.abort();
                continue;
            }
            // The disk died under a fetch: nothing was sent for commit.
            Err(_) => return (model, None),
        };
        if !commit {
            s.abort();
            continue;
        }
        match s.commit() {
            Ok(_) => apply(&mut model, &writes),
            Err(e) if e.is_conflict() => {}
            Err(_) => return (model, Some(writes)),
        }
    }
    (model, None)
}

fn crash_case_two(mode: CommitMode, seed: u64) {
    let ops = {
        let disk = FaultDisk::new();
        let h = Arc::new(Engine::create(arc(disk.clone()), opts(mode)).unwrap());
        let model = setup(&h);
        let before = disk.counters().ops;
        run_two_until_death(&h, model, seed, 30);
        disk.counters().ops - before
    };
    let disk = FaultDisk::new();
    let h = Arc::new(Engine::create(arc(disk.clone()), opts(mode)).unwrap());
    let model = setup(&h);
    let mut rng = Rng(seed ^ 0xFEED);
    let at = disk.counters().ops + rng.below(ops + 1);
    disk.set_plan(FaultPlan { die_after_ops: Some(at), ..FaultPlan::default() });
    let (model, in_flight) = run_two_until_death(&h, model, seed, 30);
    drop(h);
    disk.crash(seed);
    let h = Arc::new(
        Engine::open(arc(disk.clone()), opts(mode))
            .unwrap_or_else(|e| panic!("{mode} seed {seed}: reopen failed: {e}")),
    );
    let got = read_all(&h);
    if got != model {
        let mut with = model.clone();
        apply(
            &mut with,
            in_flight.as_ref().unwrap_or_else(|| {
                panic!("{mode} seed {seed}: two clients: recovered state differs from the acknowledged one")
            }),
        );
        assert_same(&got, &with, &format!("{mode} seed {seed}: two clients, commit in flight"));
    }
}

#[test]
fn page_modes_survive_the_disk_dying_under_two_conflicting_clients() {
    for mode in PAGE_MODES {
        for seed in seeds() {
            crash_case_two(mode, seed);
        }
    }
}

fn arc(disk: impl Disk + 'static) -> Arc<dyn Disk> {
    Arc::new(disk)
}

#[test]
fn page_modes_survive_the_disk_dying_at_a_random_point_without_flushing() {
    for mode in PAGE_MODES {
        let restored: u64 = seeds().map(|seed| crash_case(mode, seed, false)).sum();
        // WPL's restart is what these crashes exercise: copies not yet home come back.
        assert_eq!(restored > 0, mode == CommitMode::Wpl, "{mode}: {restored} copies restored");
    }
}

#[test]
fn page_modes_survive_the_disk_dying_at_a_random_point_while_flushing() {
    for mode in PAGE_MODES {
        for seed in seeds() {
            crash_case(mode, seed, true);
        }
    }
}
