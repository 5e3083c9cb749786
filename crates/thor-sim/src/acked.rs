//! Every acknowledged commit recovers (issue 30): a differential harness between what the wire
//! decoder admits, what the server core acknowledges and what recovery reads back.
//!
//! A commit the core acknowledged once could not be read back: the wire decoder let a read-set
//! oref on page 0 in, the core logged it, and the log-record decoder of recovery refused it, so
//! the database did not open after a crash. The three now share one definition
//! (`thor_core::Oref::object`); this harness is what keeps them honest. It takes any bytes as a
//! *program* and runs it against the real engine:
//!
//! ```text
//!  input bytes ─► program: requests built from a small prebuilt database's objects and from
//!                 edge-case words (null, page 0, tagged, past the tail, huge counts), then
//!                 encoded by hand (the encoder's checks bypassed, as a hostile client would)
//!                 and mutated byte by byte
//!       │
//!       ▼  thor_wire::decode_request ── refused: fine (the wire said no)
//!       ▼  Engine (thor_server, on a MemDisk, no threads, a manual clock)
//!          commits, two-phase prepares, peer decisions, install rounds, time passing
//!       │
//!       ▼  then, whatever was acknowledged:
//!          1. every record in the log decodes with recovery's decoders (`record::decode_any`,
//!             `wpl_log::WplObjects`, what `thor check` uses too);
//!          2. a backup is taken;
//!          3. the server crashes (MemDisk loses what was not synced) and recovers: it must
//!             open, and serve exactly the pages it served before the crash;
//!          4. the backup opens and serves the same pages;
//!          5. the caller's hook sees both databases (thor-cli runs `thor check` on them).
//! ```
//!
//! [`run`] is what the fuzz target (`fuzz/fuzz_targets/recover.rs`), the bounded test
//! (`tests/acked.rs`) and the property test of `thor check` (thor-cli) call. It is made to be
//! fast: the prebuilt database is made once per process ([`fixture`]) and copied into a fresh
//! `MemDisk` per input (a few files of a few KiB), pages are 1 KiB, and nothing sleeps.
//!
//! A program is read from the input a byte at a time; past the input's end every byte is 0,
//! which ends it. Every choice is a byte, so a fuzzer's mutations and a property test's
//! shrinking both act on the program's structure. The first byte picks the commit mode (`obj`,
//! or one time in four `wpl`, whose commits log whole pages), then each step one of: a commit;
//! a commit handed to the engine without the wire (an in-process transport: the core's own
//! checks); a two-phase prepare of this server's part (server 1, with servers 2 and 3); a
//! message from another server about a prepared transaction; a whole-page commit (`wpl`); raw
//! payload bytes; a fetch; an install round; time passing.
//!
//! *What it leaves out, on purpose.* Other servers behave honestly: a decision comes from the
//! transaction's coordinator, votes from its participants, and a client never reuses a stamp
//! for another transaction. A forged peer message is the business of the peers' credentials
//! (issue 30's "peers are not clients"); this harness judges what a *client* can send. The
//! page modes that send page records (`pd-redo`, the ESM modes) are not driven: their commits
//! become ordinary commit records (`core::pagecommit`), which `obj` mode covers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use thor_core::checksum::Crc32c;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageId, PageView, RawRef, ServerId, VarKind, builtin, page};
use thor_server::engine::{ReplySink, Work};
use thor_server::{Clock, Engine, EngineOptions, record};
use thor_storage::log::inspect::inspect;
use thor_storage::{Disk, LogOptions, MemDisk};
use thor_study::wpl_log;
use thor_wire::limits::FRAME_BYTES_MAX;
use thor_wire::{
    CLIENT_TIE_BIT, CommitMode, ErrorCode, Hello, PeerMsg, Reply, ReplyBody, Request, RequestBody,
    Stamp, decode_request, kind,
};

/// Writes a line of the trace, when the run keeps one (the arguments are not evaluated
/// otherwise: a fuzzer's runs keep none, and a failing input is run again to get it).
macro_rules! note {
    ($w:expr, $($arg:tt)*) => {
        if let Some(t) = &mut $w.trace {
            let _ = writeln!(t, $($arg)*);
            if std::env::var_os("THOR_ACKED_LIVE").is_some() {
                eprintln!($($arg)*);
            }
        }
    };
}

/// Bytes per page of the harness's databases: the smallest size, so copies are cheap and
/// allocation opens new pages often.
pub const PAGE_SIZE: usize = 1024;
/// Most steps of one program.
pub const STEPS_MAX: usize = 24;
/// The server's id.
const ME: ServerId = ServerId(1);
/// The time the fixture's clock starts at (a plausible wall-clock time, in microseconds).
const START_US: u64 = 1_700_000_000_000_000;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckedRun {
    /// Steps of the program.
    pub steps: u64,
    /// Requests handed to the engine (decoded, or built in memory).
    pub requests: u64,
    /// Frames the wire decoder refused.
    pub wire_refused: u64,
    /// Commits and prepares the engine refused.
    pub refused: u64,
    /// Commits and prepares acknowledged (`CommitOk`, `Prepared`).
    pub acked: u64,
    /// Acknowledged commits that created or wrote something (a log record).
    pub acked_writing: u64,
    /// Log records decoded after the run.
    pub records: u64,
}

/// Why a run failed: a broken promise, with the program that broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedFailure {
    /// What went wrong.
    pub what: String,
    /// The program's steps as run, for the report.
    pub trace: String,
}

impl std::fmt::Display for AckedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\nthe program:\n{}", self.what, self.trace)
    }
}

impl std::error::Error for AckedFailure {}

/// Runs the program `input`; see the module documentation.
pub fn run(input: &[u8]) -> Result<AckedRun, AckedFailure> {
    run_with(input, &mut |_, _| Ok(()))
}

/// [`run`], handing each database it ends with to `hook` (its name, "recovered" or "backup",
/// and its disk, with no engine open on it). An error from the hook fails the run.
pub fn run_with(
    input: &[u8],
    hook: &mut dyn FnMut(&str, &MemDisk) -> Result<(), String>,
) -> Result<AckedRun, AckedFailure> {
    let mut w = match World::open(input, false) {
        Ok(w) => w,
        Err(what) => return Err(AckedFailure { what, trace: String::new() }),
    };
    let result = w.run_program().and_then(|()| w.finish(hook));
    // A run is deterministic: the trace of a failing one is made by running it again.
    result.map(|()| w.stats).map_err(|what| AckedFailure { what, trace: trace(input) })
}

/// Runs the program `input` and returns what it did, step by step, and how it ended (for a
/// human looking at one input, e.g. one a fuzzer found). With `THOR_ACKED_LIVE` set, each line
/// also goes to stderr as it is written (for an input that panics before the trace returns).
pub fn trace(input: &[u8]) -> String {
    let mut w = match World::open(input, true) {
        Ok(w) => w,
        Err(what) => return what,
    };
    let result = w.run_program().and_then(|()| w.finish(&mut |_, _| Ok(())));
    note!(w, "{result:?} {:?}", w.stats);
    w.trace.unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The prebuilt database.

/// The database every run starts from: a few classes and objects, some installed, some only in
/// the log (so that every run's open replays records).
#[derive(Debug)]
pub struct Fixture {
    /// Its files.
    files: Vec<(String, Vec<u8>)>,
    /// Objects programs name: the root, classes, instances.
    objects: Vec<Oref>,
    /// Objects programs write: the root and the instances (classes are immutable).
    writable: Vec<Oref>,
    /// Classes programs instantiate, with their descriptors (the fixture's and built-in ones).
    classes: Vec<(Oref, ClassDesc)>,
}

/// The fixture, built once per process.
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| build_fixture().expect("the fixture database builds"))
}

fn options(mode: CommitMode) -> EngineOptions {
    let mut o = EngineOptions {
        page_size: PAGE_SIZE,
        server_id: ME,
        // Small budgets: installs, checkpoints and log truncation happen within a program.
        mob_bytes: 12 << 10,
        page_cache_bytes: 32 * PAGE_SIZE,
        flush_batch_pages: 3,
        background_flusher: false,
        commit_mode: mode,
        ..EngineOptions::default()
    };
    o.log.segment_bytes = 8 << 10;
    o
}

/// A clock the harness moves.
#[derive(Debug)]
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

fn user_classes() -> Vec<ClassDesc> {
    vec![
        // An item: a reference and a number.
        ClassDesc::new("f.Item", 8, &[0], VarKind::None).expect("valid"),
        // A node: a reference and a collection of references.
        ClassDesc::new("f.Node", 4, &[0], VarKind::Refs).expect("valid"),
        // A blob: a number and bytes.
        ClassDesc::new("f.Blob", 4, &[], VarKind::Bytes).expect("valid"),
    ]
}

fn build_fixture() -> Result<Fixture, String> {
    let disk = MemDisk::new();
    thor_server::io::create(&disk, PAGE_SIZE, ME).map_err(|e| e.to_string())?;
    let clock = Arc::new(ManualClock(AtomicU64::new(START_US)));
    let e = Engine::open_with_clock(Arc::new(disk.clone()), options(CommitMode::Obj), clock)
        .map_err(|e| e.to_string())?;
    let classes = user_classes();
    let mut created: Vec<Vec<u8>> = classes.iter().map(ClassDesc::to_class_object).collect();
    // Items 3..15 (a chain), nodes 15..19 (each naming four items), blobs 19..29: over three
    // pages of 1 KiB.
    const ITEMS: u32 = 12;
    for i in 0..ITEMS {
        let mut o = classes[0].new_object(RawRef::tagged_word(0), 0);
        put_u32(&mut o, 4, if i + 1 < ITEMS { RawRef::tagged_word(4 + i) } else { 0 });
        put_u32(&mut o, 8, i);
        created.push(o);
    }
    for n in 0..4u32 {
        let mut o = classes[1].new_object(RawRef::tagged_word(1), 4);
        put_u32(&mut o, 4, RawRef::tagged_word(3 + n));
        for k in 0..4 {
            let at = classes[1].var_offset() + 4 * k as usize;
            put_u32(&mut o, at, RawRef::tagged_word(3 + (n + k) % ITEMS));
        }
        created.push(o);
    }
    for n in [5usize, 40, 0, 120, 64, 9, 400, 300, 500, 700] {
        let mut o = classes[2].new_object(RawRef::tagged_word(2), n);
        let at = classes[2].var_offset();
        o[at..at + n].fill(0x5a);
        created.push(o);
    }
    let req = thor_server::CommitRequest { versions: vec![], created };
    let out = e.commit(req).map_err(|e| e.to_string())?;
    e.flush_all().map_err(|e| e.to_string())?;
    // One more commit, left in the log: every run's open replays it.
    let item = out.created[3];
    let mut v = classes[0].new_object(out.created[0].raw(), 0);
    put_u32(&mut v, 4, out.created[4].raw());
    put_u32(&mut v, 8, 99);
    e.commit(thor_server::CommitRequest { versions: vec![(item, v)], created: vec![] })
        .map_err(|e| e.to_string())?;
    e.halt();
    let mut files = Vec::new();
    for name in disk.list().map_err(|e| e.to_string())? {
        files.push((name.clone(), disk.file_bytes(&name).map_err(|e| e.to_string())?));
    }
    let mut objects = vec![builtin::ROOT];
    objects.extend(&out.created);
    let writable = std::iter::once(builtin::ROOT).chain(out.created[3..].iter().copied()).collect();
    let mut fixture_classes: Vec<(Oref, ClassDesc)> =
        out.created[..3].iter().copied().zip(classes).collect();
    for c in [builtin::BYTES, builtin::REFS] {
        fixture_classes.push((c, builtin::desc(c).expect("built in").clone()));
    }
    Ok(Fixture { files, objects, writable, classes: fixture_classes })
}

/// A fresh disk holding the fixture's files.
fn fork(files: &[(String, Vec<u8>)]) -> Result<MemDisk, String> {
    let d = MemDisk::new();
    for (name, bytes) in files {
        let f = d.open(name, true).map_err(|e| e.to_string())?;
        f.write_at(0, bytes).map_err(|e| e.to_string())?;
        f.sync().map_err(|e| e.to_string())?;
    }
    d.sync_dir().map_err(|e| e.to_string())?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------------
// Reading the program.

/// The program's bytes, read one choice at a time; zeros past the end.
#[derive(Debug)]
struct Source<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Source<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// A number below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }

    /// One chance in `n`.
    fn one_in(&mut self, n: u8) -> bool {
        self.u8().is_multiple_of(n)
    }

    fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

/// A connection's replies, shared with the world.
#[derive(Debug, Default)]
struct Inbox(Mutex<Vec<(u64, u64, Reply, bool)>>);

/// A run in progress.
struct World {
    /// The program.
    input: Vec<u8>,
    pos: usize,
    mode: CommitMode,
    disk: MemDisk,
    clock: Arc<ManualClock>,
    engine: Option<Engine>,
    inbox: Arc<Inbox>,
    /// The connection requests go to, if it is idle and open.
    conn: Option<u64>,
    next_id: u64,
    /// Objects known to exist (the fixture's and those acknowledged commits created).
    known: Vec<Oref>,
    /// Known objects that are not classes: what versions mostly write.
    writable: Vec<Oref>,
    /// The prepares the engine was handed (as decoded), for peer messages about them: the
    /// stamp, the coordinator and the other participants.
    prepares: Vec<(Stamp, Option<ServerId>, Vec<ServerId>)>,
    /// Requests in flight that write (a record if acknowledged).
    writing: Vec<u64>,
    stats: AckedRun,
    /// What the program did, when kept.
    trace: Option<String>,
}

impl World {
    fn open(input: &[u8], traced: bool) -> Result<World, String> {
        let f = fixture();
        let mut src = Source { bytes: input, pos: 0 };
        let mode = if src.one_in(4) { CommitMode::Wpl } else { CommitMode::Obj };
        let disk = fork(&f.files)?;
        let clock = Arc::new(ManualClock(AtomicU64::new(START_US + 1_000_000)));
        let engine = Engine::open_with_clock(Arc::new(disk.clone()), options(mode), clock.clone())
            .map_err(|e| format!("the fixture does not open: {e}"))?;
        // Past the threshold an open sets for client timestamps, so that prepares validate.
        clock.0.fetch_add(1_000_000, Relaxed);
        Ok(World {
            input: input.to_vec(),
            pos: src.pos,
            mode,
            disk,
            clock,
            engine: Some(engine),
            inbox: Arc::new(Inbox::default()),
            conn: None,
            next_id: 1,
            known: f.objects.clone(),
            writable: f.writable.clone(),
            prepares: Vec::new(),
            writing: Vec::new(),
            stats: AckedRun::default(),
            trace: traced.then(|| format!("mode {mode}\n")),
        })
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("open")
    }

    fn run_program(&mut self) -> Result<(), String> {
        let input = std::mem::take(&mut self.input);
        let mut src = Source { bytes: &input, pos: self.pos };
        while !src.done() && (self.stats.steps as usize) < STEPS_MAX {
            self.stats.steps += 1;
            self.clock.0.fetch_add(1_000, Relaxed);
            self.step(&mut src)?;
            self.take_replies()?;
        }
        Ok(())
    }

    fn step(&mut self, src: &mut Source<'_>) -> Result<(), String> {
        match src.below(16) {
            0..=6 | 14 => {
                let payload = self.commit_payload(src);
                self.send_frame(src, kind::COMMIT, payload, "commit")
            }
            7 => self.send_unframed(src),
            8 | 9 => {
                let payload = self.prepare_payload(src);
                self.send_frame(src, kind::PREPARE, payload, "prepare")
            }
            10 => self.peer(src),
            11 => {
                let r = self.engine().flush_round();
                note!(self, "install round: {r:?}");
                Ok(())
            }
            12 => {
                let us = 100_000 * (1 + src.below(40) as u64);
                self.clock.0.fetch_add(us, Relaxed);
                self.engine().tick();
                note!(self, "time passes: {us} us");
                Ok(())
            }
            13 if self.mode == CommitMode::Wpl => {
                let payload = self.wpl_payload(src);
                self.send_frame(src, kind::PAGE_COMMIT, payload, "page commit")
            }
            13 => {
                // Raw payload bytes for a commit-like request: the decoders on their own.
                let k = [kind::COMMIT, kind::PREPARE, kind::PAGE_COMMIT][src.below(3)];
                let n = src.below(64);
                let payload: Vec<u8> = (0..n).map(|_| src.u8()).collect();
                self.send_frame(src, k, payload, "raw")
            }
            _ => {
                let page = 1 + src.below(self.tail() as usize + 1) as u32;
                let r = PageId::new(page).map(|p| self.engine().fetch(p).map(|b| b.len()));
                note!(self, "fetch page {page}: {r:?}");
                Ok(())
            }
        }
    }

    fn tail(&self) -> u32 {
        self.engine().stats().pages_allocated
    }

    // ---- Words and objects.

    /// A word where an object is named: mostly a known object, else an edge case.
    fn word(&mut self, src: &mut Source<'_>) -> u32 {
        if !src.one_in(6) {
            return self.known[src.below(self.known.len())].raw();
        }
        match src.below(8) {
            0 => 0,
            // Page 0's words: the bug of issue 30.
            1 => (src.below(512) as u32) << 1,
            2 => RawRef::tagged_word(src.below(4) as u32),
            3 => {
                // An oid past the last of a page that exists.
                let o = self.known[src.below(self.known.len())];
                (o.raw() & !0x3fe) | (511 << 1)
            }
            4 => (self.tail() + 1 + src.below(3) as u32) << 10,
            5 => [u32::MAX, u32::MAX - 1, 1 << 21, (1 << 20) + 1, 0x8000_0000][src.below(5)],
            _ => src.u32(),
        }
    }

    /// The committed bytes of `o`, if it exists.
    fn current(&self, o: Oref) -> Option<Vec<u8>> {
        let page = self.engine().fetch(o.page()?).ok()?;
        PageView::parse(&page).ok()?.object(o.oid()).map(<[u8]>::to_vec)
    }

    /// Changes a few words of `obj` (and, rarely, its length).
    fn mutate(&mut self, src: &mut Source<'_>, obj: &mut Vec<u8>) {
        for _ in 0..src.below(3) {
            let words = obj.len() / 4;
            if words == 0 {
                break;
            }
            // The class word is changed rarely: most mutations are of fields.
            let i = if words == 1 || src.one_in(16) { 0 } else { 1 + src.below(words - 1) };
            let w = self.word(src);
            put_u32(obj, 4 * i, w);
        }
        if src.one_in(24) {
            match src.below(3) {
                0 => obj.truncate(obj.len().saturating_sub(1 + src.below(4))),
                1 => obj.extend(std::iter::repeat_n(0, 1 + src.below(4))),
                _ => obj.resize(src.below(48), 0),
            }
        }
    }

    /// A version: a known object's committed bytes, mutated; or an edge-case word.
    fn version(&mut self, src: &mut Source<'_>) -> (u32, Vec<u8>) {
        let target = if src.one_in(5) {
            self.word(src)
        } else {
            self.writable[src.below(self.writable.len())].raw()
        };
        let mut bytes =
            Oref::from_raw(target).and_then(|o| self.current(o)).unwrap_or_else(|| vec![0; 12]);
        self.mutate(src, &mut bytes);
        (target, bytes)
    }

    /// A created object (`n` created in all; tagged words up to `n` name them).
    fn created(&mut self, src: &mut Source<'_>, classes_here: &[(usize, ClassDesc)]) -> Vec<u8> {
        let f = fixture();
        let mut obj = match src.below(12) {
            0..=6 => {
                let (c, desc) = &f.classes[src.below(f.classes.len())];
                let mut o = desc.new_object(c.raw(), src.below(5));
                let mut offs = Vec::new();
                if desc.check_shape(&o).is_ok() {
                    desc.for_each_ref_offset(&o, |off| offs.push(off));
                }
                for off in offs {
                    let w = self.word(src);
                    put_u32(&mut o, off, w);
                }
                o
            }
            7 => {
                // A new class.
                let fixed = 4 * src.below(4);
                let refs: Vec<u16> = (0..fixed as u16 / 4).filter(|_| src.one_in(2)).collect();
                let var = [VarKind::None, VarKind::Bytes, VarKind::Refs][src.below(3)];
                let name = format!("g.C{}", src.u8());
                let desc = ClassDesc::new(&name, fixed, &refs, var).expect("a valid class");
                desc.to_class_object()
            }
            8 if !classes_here.is_empty() => {
                // An instance of a class this commit creates.
                let (i, desc) = &classes_here[src.below(classes_here.len())];
                desc.new_object(RawRef::tagged_word(*i as u32), src.below(3))
            }
            9 => {
                // A large object's root, its fields from the program.
                let desc = builtin::desc(builtin::LARGE).expect("built in");
                let n = src.below(3);
                let mut o = desc.new_object(builtin::LARGE.raw(), n);
                for i in 1..o.len() / 4 {
                    let w = if src.one_in(2) { src.below(4) as u32 } else { self.word(src) };
                    put_u32(&mut o, 4 * i, w);
                }
                o
            }
            10 => {
                let n = 1 + src.below(6);
                let mut o = vec![0; 4 * n];
                for i in 0..n {
                    let w = self.word(src);
                    put_u32(&mut o, 4 * i, w);
                }
                o
            }
            _ => {
                let o = self.known[src.below(self.known.len())];
                self.current(o).unwrap_or_else(|| vec![0; 8])
            }
        };
        if src.one_in(5) {
            self.mutate(src, &mut obj);
        }
        obj
    }

    /// The body of a commit, laid out by hand: read set, versions, created objects.
    fn commit_body(&mut self, src: &mut Source<'_>, out: &mut Vec<u8>) {
        let reads: Vec<u32> = (0..src.below(4)).map(|_| self.word(src)).collect();
        put_words(out, &reads);
        let versions: Vec<(u32, Vec<u8>)> = (0..src.below(4)).map(|_| self.version(src)).collect();
        out.extend_from_slice(&(versions.len() as u32).to_le_bytes());
        for (o, b) in &versions {
            out.extend_from_slice(&o.to_le_bytes());
            put_bytes(out, b);
        }
        let n = src.below(4);
        let mut classes_here = Vec::new();
        let mut created = Vec::with_capacity(n);
        for i in 0..n {
            let o = self.created(src, &classes_here);
            if let Ok(d) = ClassDesc::from_class_object(&o) {
                classes_here.push((i, d));
            }
            created.push(o);
        }
        out.extend_from_slice(&(created.len() as u32).to_le_bytes());
        for b in &created {
            put_bytes(out, b);
        }
        note!(
            self,
            "  reads {} versions {} created {}",
            words(&reads),
            versions
                .iter()
                .map(|(o, b)| format!("{}:{}B", word_str(*o), b.len()))
                .collect::<Vec<_>>()
                .join(","),
            created.iter().map(|b| format!("{}B", b.len())).collect::<Vec<_>>().join(","),
        );
    }

    /// A piggyback section: mostly empty, sometimes an ack.
    fn piggyback(&mut self, src: &mut Source<'_>, out: &mut Vec<u8>) {
        let acks: Vec<u32> = if src.one_in(8) { vec![self.word(src)] } else { Vec::new() };
        put_words(out, &acks);
        out.extend_from_slice(&0u32.to_le_bytes());
    }

    fn commit_payload(&mut self, src: &mut Source<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        self.piggyback(src, &mut out);
        self.commit_body(src, &mut out);
        out
    }

    /// A prepare of this server's part of a transaction with one or two other servers.
    fn prepare_payload(&mut self, src: &mut Source<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        self.piggyback(src, &mut out);
        let now = self.clock.0.load(Relaxed);
        let stamp = Stamp {
            time_us: now.saturating_sub(src.below(4) as u64 * 1_000),
            tie: CLIENT_TIE_BIT | u32::from(src.u8()),
        };
        out.extend_from_slice(&stamp.time_us.to_le_bytes());
        out.extend_from_slice(&stamp.tie.to_le_bytes());
        let others = 1 + src.below(2) as u32;
        let mine_writes = !src.one_in(4);
        let coordinator = match src.below(3) {
            0 if mine_writes => Some(ME.0),
            2 => None,
            _ => Some(2),
        };
        out.push(u8::from(coordinator.is_some()));
        out.extend_from_slice(&coordinator.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(1 + others as u16).to_le_bytes());
        out.extend_from_slice(&ME.0.to_le_bytes());
        out.push(u8::from(mine_writes));
        for s in 2..2 + others {
            out.extend_from_slice(&s.to_le_bytes());
            out.push(u8::from(coordinator == Some(s) || src.one_in(2)));
        }
        note!(
            self,
            "  prepare {stamp} coordinator {coordinator:?} others {others} writes {mine_writes}"
        );
        self.commit_body(src, &mut out);
        out
    }

    /// A whole-page-logging commit: the written objects' pages, each as the server serves it
    /// with the objects changed, shipped whole.
    fn wpl_payload(&mut self, src: &mut Source<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        self.piggyback(src, &mut out);
        out.extend_from_slice(&u64::from(src.u8()).to_le_bytes());
        out.push(if src.one_in(16) { src.u8() } else { CommitMode::Wpl.code() });
        let reads: Vec<u32> = (0..src.below(3)).map(|_| self.word(src)).collect();
        put_words(&mut out, &reads);
        let writes: Vec<u32> = (0..1 + src.below(3))
            .map(|_| {
                if src.one_in(6) {
                    self.word(src)
                } else {
                    self.writable[src.below(self.writable.len())].raw()
                }
            })
            .collect();
        put_words(&mut out, &writes);
        let created: Vec<Vec<u8>> = (0..src.below(2)).map(|_| self.created(src, &[])).collect();
        out.extend_from_slice(&(created.len() as u32).to_le_bytes());
        for b in &created {
            put_bytes(&mut out, b);
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        let mut pages: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for w in &writes {
            let Some(p) = Oref::from_raw(*w).and_then(Oref::page) else { continue };
            let Ok(bytes) = self.engine().fetch(p) else { continue };
            pages.entry(p.get()).or_insert_with(|| bytes.to_vec());
        }
        for w in &writes {
            let Some(o) = Oref::from_raw(*w) else { continue };
            let Some(img) = pages.get_mut(&o.page_raw()) else { continue };
            let Some(r) = PageView::parse(img).ok().and_then(|v| v.object_range(o.oid())) else {
                continue;
            };
            let mut obj = img[r.clone()].to_vec();
            let len = obj.len();
            self.mutate(src, &mut obj);
            obj.resize(len, 0);
            img[r].copy_from_slice(&obj);
        }
        if src.one_in(8) {
            // A page nobody wrote, or a page twice.
            let p = 1 + src.below(self.tail() as usize) as u32;
            if let Some(id) = PageId::new(p)
                && let Ok(b) = self.engine().fetch(id)
            {
                pages.insert(p, b.to_vec());
            }
        }
        out.extend_from_slice(&(pages.len() as u32).to_le_bytes());
        for (p, mut img) in pages {
            page::seal(&mut img);
            out.extend_from_slice(&p.to_le_bytes());
            put_bytes(&mut out, &img);
        }
        note!(self, "  wpl reads {} writes {}", words(&reads), words(&writes));
        out
    }

    // ---- Sending.

    /// Frames `payload` as a request of type `k`, maybe damages it, decodes it and hands what
    /// decodes to the engine.
    fn send_frame(
        &mut self,
        src: &mut Source<'_>,
        k: u16,
        mut payload: Vec<u8>,
        what: &str,
    ) -> Result<(), String> {
        if src.one_in(8) && !payload.is_empty() {
            // A damaged request: a byte or a word overwritten, a count among them.
            let at = src.below(payload.len());
            if src.one_in(2) && at + 4 <= payload.len() {
                let w = self.word(src);
                payload[at..at + 4].copy_from_slice(&w.to_le_bytes());
            } else {
                payload[at] = src.u8();
            }
            note!(self, "  damaged at byte {at}");
        }
        let id = self.next_id;
        self.next_id += 1;
        let frame = frame(k, id, &payload);
        match decode_request(Bytes::from(frame), FRAME_BYTES_MAX) {
            Ok((_, req)) => {
                note!(self, "{what} #{id}: decoded");
                if let RequestBody::Prepare(p) = &req.body {
                    let others: Vec<ServerId> =
                        p.participants.iter().map(|q| q.server).filter(|s| *s != ME).collect();
                    // A stamp names one transaction: an honest client sends it again only
                    // for the same transaction (a retry), never for another coordinator or
                    // other participants. (What a server does with a forged one is the
                    // business of the peers' credentials, not of this harness.)
                    let other = self
                        .prepares
                        .iter()
                        .any(|(st, c, o)| *st == p.stamp && (*c != p.coordinator || *o != others));
                    if other {
                        note!(self, "  not sent: its stamp names another transaction");
                        return Ok(());
                    }
                    self.prepares.push((p.stamp, p.coordinator, others));
                }
                self.request(id, req)
            }
            Err(e) => {
                self.stats.wire_refused += 1;
                note!(self, "{what} #{id}: the wire refuses it: {e}");
                Ok(())
            }
        }
    }

    /// A commit built in memory and handed to the engine without the wire (as an in-process
    /// transport would): the core's own checks.
    fn send_unframed(&mut self, src: &mut Source<'_>) -> Result<(), String> {
        let mut body = Vec::new();
        self.commit_body(src, &mut body);
        let mut r = 0;
        let mut take = |n: usize| {
            let b = &body[r..r + n];
            r += n;
            b.to_vec()
        };
        let le = |b: Vec<u8>| u32_at(&b, 0);
        let mut c = thor_wire::Commit::default();
        for _ in 0..le(take(4)) {
            c.reads.extend(Oref::from_raw(le(take(4))));
        }
        for _ in 0..le(take(4)) {
            let o = le(take(4));
            let n = le(take(4)) as usize;
            let b = Bytes::from(take(n));
            c.versions.extend(Oref::from_raw(o).map(|o| (o, b)));
        }
        for _ in 0..le(take(4)) {
            let n = le(take(4)) as usize;
            c.created.push(Bytes::from(take(n)));
        }
        let id = self.next_id;
        self.next_id += 1;
        note!(self, "commit #{id} (in memory, not through the wire)");
        self.request(id, Request::new(RequestBody::Commit(c)))
    }

    /// Hands `req` to the engine on the idle connection (opening one if needed).
    fn request(&mut self, id: u64, req: Request) -> Result<(), String> {
        let conn = match self.conn {
            Some(c) => c,
            None => self.connect()?,
        };
        self.stats.requests += 1;
        let writes = match &req.body {
            RequestBody::Commit(c) => !c.versions.is_empty() || !c.created.is_empty(),
            RequestBody::Prepare(p) => {
                !p.commit.versions.is_empty() || !p.commit.created.is_empty()
            }
            RequestBody::PageCommit(c) => !c.writes.is_empty() || !c.created.is_empty(),
            _ => false,
        };
        if writes {
            self.writing.push(id);
        }
        let w = self.engine().request(conn, id, req);
        self.settle(w);
        // A request not answered yet (a coordinator waiting for votes) holds the session's
        // later requests back: the next request goes on a new connection.
        let answered = self.inbox.0.lock().expect("not poisoned").iter().any(|r| r.1 == id);
        if !answered {
            self.conn = None;
        }
        Ok(())
    }

    fn settle(&self, w: Work) {
        self.engine().settle(w);
    }

    fn connect(&mut self) -> Result<u64, String> {
        let e = self.engine.as_ref().expect("open");
        // The sink learns its connection's id after `connect` hands it out: it is the next
        // one, and the engine numbers them in order.
        let slot = Arc::new(AtomicU64::new(0));
        let sink = Arc::new(LateSink { conn: slot.clone(), inbox: self.inbox.clone() });
        let conn = e.connect(sink);
        slot.store(conn, Relaxed);
        let id = self.next_id;
        self.next_id += 1;
        let hello = Request::new(RequestBody::Hello(Hello::new(Vec::<u8>::new(), "acked")));
        let w = e.request(conn, id, hello);
        e.settle(w);
        let mut inbox = self.inbox.0.lock().expect("not poisoned");
        match inbox.iter().position(|r| r.0 == conn && r.1 == id) {
            Some(i) => match inbox.remove(i).2.body {
                ReplyBody::HelloOk(_) => {}
                other => return Err(format!("Hello answered {other:?}")),
            },
            None => return Err("Hello not answered".into()),
        }
        drop(inbox);
        self.conn = Some(conn);
        Ok(conn)
    }

    /// Delivers a message from another server about a transaction prepared here, as an honest
    /// peer would send it: from the coordinator to a participant, from a participant to the
    /// coordinator; or, rarely, about a transaction this server never heard of. (Messages
    /// with a forged sender are the business of the peers' credentials, issue 30's "peers are
    /// not clients", not of this harness.)
    fn peer(&mut self, src: &mut Source<'_>) -> Result<(), String> {
        let now = self.clock.0.load(Relaxed);
        let yes = !src.one_in(3);
        let msg = if self.prepares.is_empty() || src.one_in(8) {
            let stamp = Stamp { time_us: now, tie: CLIENT_TIE_BIT | u32::from(src.u8()) };
            let from = ServerId(2 + src.below(2) as u32);
            match src.below(4) {
                0 => PeerMsg::Vote { stamp, from, yes },
                1 => PeerMsg::Decide { stamp, from, commit: yes },
                2 => PeerMsg::DecideAck { stamp, from },
                _ => PeerMsg::Query { stamp, from },
            }
        } else {
            let (stamp, coordinator, others) =
                self.prepares[src.below(self.prepares.len())].clone();
            match coordinator {
                Some(c) if c != ME => PeerMsg::Decide { stamp, from: c, commit: yes },
                _ if others.is_empty() => return Ok(()),
                _ => {
                    let from = others[src.below(others.len())];
                    match src.below(3) {
                        0 => PeerMsg::Vote { stamp, from, yes },
                        1 => PeerMsg::Query { stamp, from },
                        _ => PeerMsg::DecideAck { stamp, from },
                    }
                }
            }
        };
        note!(self, "peer message {msg:?}");
        self.engine().peer_message(msg);
        Ok(())
    }

    /// Takes the replies delivered so far: what was acknowledged, what was refused, and
    /// whether the server failed.
    fn take_replies(&mut self) -> Result<(), String> {
        let replies = std::mem::take(&mut *self.inbox.0.lock().expect("not poisoned"));
        for (conn, id, reply, close) in replies {
            note!(self, "  reply to #{id}: {}", describe(&reply.body));
            let writing = self.writing.contains(&id);
            match reply.body {
                ReplyBody::CommitOk { created, .. } | ReplyBody::Prepared { created } => {
                    self.stats.acked += 1;
                    self.stats.acked_writing += u64::from(writing);
                    for o in created {
                        self.known.push(o);
                        let class = self.current(o).map(|b| u32_at(&b, 0));
                        if class.is_some_and(|c| c != builtin::META.raw()) {
                            self.writable.push(o);
                        }
                    }
                }
                ReplyBody::CommitRefused { .. } => self.stats.refused += 1,
                ReplyBody::Error { code, message }
                    if matches!(
                        code,
                        ErrorCode::ServerFailed | ErrorCode::Internal | ErrorCode::CorruptData
                    ) =>
                {
                    return Err(format!("a request made the server fail: {code:?}: {message}"));
                }
                _ => {}
            }
            if close && self.conn == Some(conn) {
                self.conn = None;
            }
        }
        Ok(())
    }

    // ---- The promises.

    fn finish(
        &mut self,
        hook: &mut dyn FnMut(&str, &MemDisk) -> Result<(), String>,
    ) -> Result<(), String> {
        let e = self.engine.take().expect("open");
        self.stats.records = check_log(&self.disk)?;
        let before = snapshot(&e)?;
        let backup = MemDisk::new();
        let info = e.backup_into(&backup).map_err(|e| format!("the backup failed: {e}"))?;
        note!(self, "backup up to LSN {}", info.lsn);
        e.halt();
        let seed = self.next_id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.disk.crash(seed);
        for (name, disk) in [("recovered", self.disk.clone()), ("backup", backup)] {
            let clock = Arc::new(ManualClock(AtomicU64::new(self.clock.0.load(Relaxed) + 1)));
            let opened = Engine::open_with_clock(Arc::new(disk.clone()), options(self.mode), clock)
                .map_err(|e| format!("the {name} database does not open: {e}"))?;
            let after = snapshot(&opened)?;
            if after != before {
                return Err(format!(
                    "the {name} database serves other pages than the server did: {}",
                    first_difference(&before, &after)
                ));
            }
            opened.halt();
            hook(name, &disk).map_err(|e| format!("the {name} database: {e}"))?;
        }
        Ok(())
    }
}

/// The sink of one connection, whose id is set once `connect` returned it.
struct LateSink {
    conn: Arc<AtomicU64>,
    inbox: Arc<Inbox>,
}

impl ReplySink for LateSink {
    fn deliver(&self, id: u64, reply: Reply, close: bool) {
        let conn = self.conn.load(Relaxed);
        self.inbox.0.lock().expect("not poisoned").push((conn, id, reply, close));
    }
}

/// Decodes every record of the log in `disk` with recovery's decoders (the ones `thor check`
/// uses): returns how many, or the first that does not decode.
pub fn check_log(disk: &MemDisk) -> Result<u64, String> {
    let mut wpl = wpl_log::WplObjects::default();
    let mut bad: Option<String> = None;
    let mut n = 0;
    let ins = inspect(disk, &LogOptions::default(), |r| {
        n += 1;
        if bad.is_some() {
            return;
        }
        let result = match wpl.feed(r.lsn, r.payload, PAGE_SIZE) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => record::decode_any(r.payload, |_| {}).map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            bad = Some(format!(
                "the log holds a record recovery cannot read: LSN {} ({} offset {}): {e}",
                r.lsn, r.segment, r.offset
            ));
        }
    })
    .map_err(|e| format!("the log cannot be read: {e}"))?;
    if let Some(b) = bad {
        return Err(b);
    }
    if let Some(f) = ins.findings.iter().find(|f| f.is_damage()) {
        return Err(format!("the log is damaged: {f}"));
    }
    Ok(n)
}

/// Every page the engine serves, by page id.
fn snapshot(e: &Engine) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    for p in 1..=e.stats().pages_allocated {
        let id = PageId::new(p).expect("in range");
        let bytes = e.fetch(id).map_err(|e| format!("page {p} cannot be fetched: {e}"))?;
        PageView::parse(&bytes).map_err(|e| format!("page {p} is served malformed: {e}"))?;
        out.insert(p, bytes.to_vec());
    }
    Ok(out)
}

fn first_difference(a: &BTreeMap<u32, Vec<u8>>, b: &BTreeMap<u32, Vec<u8>>) -> String {
    if a.len() != b.len() {
        return format!("{} pages before, {} after", a.len(), b.len());
    }
    for (p, x) in a {
        let y = &b[p];
        let (vx, vy) = (PageView::parse(x).expect("checked"), PageView::parse(y).expect("checked"));
        if vx.version() != vy.version() {
            return format!(
                "page {p}: version {:?} before, {:?} after",
                vx.version(),
                vy.version()
            );
        }
        for (oid, o) in vx.objects() {
            if vy.object(oid) != Some(o) {
                return format!(
                    "page {p} object {}: {o:?} before, {:?} after",
                    oid.get(),
                    vy.object(oid)
                );
            }
        }
        if x != y {
            return format!("page {p}: the same objects, other bytes");
        }
    }
    "none".into()
}

/// A frame of type `k` with request id `id` around `payload`, its checksum right.
fn frame(k: u16, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + payload.len());
    f.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&k.to_le_bytes());
    f.extend_from_slice(&[0; 2]);
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(payload);
    let mut crc = Crc32c::new();
    crc.update(&f[0..4]);
    crc.update(&f[8..]);
    let c = crc.finish();
    f[4..8].copy_from_slice(&c.to_le_bytes());
    f
}

fn put_words(out: &mut Vec<u8>, ws: &[u32]) {
    out.extend_from_slice(&(ws.len() as u32).to_le_bytes());
    for w in ws {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn word_str(w: u32) -> String {
    match Oref::object(w) {
        Ok(o) => o.to_string(),
        Err(_) => format!("{w:#x}"),
    }
}

fn words(ws: &[u32]) -> String {
    format!("[{}]", ws.iter().map(|w| word_str(*w)).collect::<Vec<_>>().join(","))
}

fn describe(r: &ReplyBody) -> String {
    match r {
        ReplyBody::CommitOk { lsn, created } => {
            format!("CommitOk lsn {} created {created:?}", lsn.0)
        }
        ReplyBody::Prepared { created } => format!("Prepared created {created:?}"),
        ReplyBody::CommitRefused { code, message } => format!("refused {code:?}: {message}"),
        ReplyBody::Error { code, message } => format!("error {code:?}: {message}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_opens_and_a_program_of_nothing_recovers() {
        let f = fixture();
        assert!(f.objects.len() >= 12 && f.classes.len() == 5);
        let r = run(&[]).unwrap();
        assert_eq!(r.steps, 0);
        assert!(r.records >= 1, "the fixture leaves a record in the log");
    }
}
