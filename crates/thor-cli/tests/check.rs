//! `thor check` end to end, one behaviour per test: healthy databases pass (a loaded OO7
//! database closed cleanly, and a database with a log to replay after a crash), and each fault
//! injected into the files is found and reported where it is, without the checker changing a
//! byte.
//!
//! Faults are injected by editing the files at the places `docs/format.md` gives: a page of
//! `pages` is at `id * page_size`; its offset table grows down from its end; log records follow
//! the 24-byte segment header, each a 20-byte header (`crc, len, lsn, batch`) and its payload.
//! A fault that must get past the page checksum (a broken offset table, a removed object) is
//! written with the checksum recomputed by `thor_core::page::seal`, as a buggy writer would.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use thor_core::le::{put_u16, put_u32, u16_at, u32_at};
use thor_core::{ClassDesc, Oid, Oref, PageId, PageView, RawRef, VarKind, builtin, page};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::FileDisk;

/// Runs `thor check ARGS... DIR`.
fn check(dir: &Path, args: &[&str]) -> Output {
    common::thor().arg("check").args(args).arg(dir).output().expect("thor runs")
}

/// `thor check DIR`: its exit status and stdout lines.
fn check_text(dir: &Path) -> (i32, Vec<String>) {
    let out = check(dir, &[]);
    assert!(out.stderr.is_empty(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    (out.status.code().unwrap(), text.lines().map(str::to_string).collect())
}

/// `thor check --json DIR`.
fn check_json(dir: &Path) -> (i32, serde_json::Value) {
    let out = check(dir, &["--json"]);
    (out.status.code().unwrap(), serde_json::from_slice(&out.stdout).expect("JSON on stdout"))
}

/// The problem lines of a text report (every line but notes and the summary).
fn problems(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .map(String::as_str)
        .filter(|l| !l.starts_with("note: ") && !l.starts_with("thor check "))
        .collect()
}

/// `thor oo7 load --dir DIR --size tiny` (8 KiB pages), closed cleanly.
fn oo7_tiny(tmp: &Path) -> PathBuf {
    let dir = tmp.join("oo7");
    let out = common::thor()
        .args(["oo7", "load", "--size", "tiny", "--dir"])
        .arg(&dir)
        .output()
        .expect("thor runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir
}

const PAGE_SIZE: usize = 4096;

/// `test.Item`: `next` (a reference), `seq` (u32), then bytes.
fn item_class() -> ClassDesc {
    ClassDesc::new("test.Item", 8, &[0], VarKind::Bytes).unwrap()
}

fn item(class: u32, next: u32, seq: u32) -> Vec<u8> {
    let mut o = item_class().new_object(class, 100);
    put_u32(&mut o, 4, next);
    put_u32(&mut o, 8, seq);
    o
}

/// Reads an object through the engine.
fn read(e: &Engine, oref: Oref) -> Vec<u8> {
    let page = e.fetch(oref.page().unwrap()).unwrap();
    PageView::parse(&page).unwrap().object(oref.oid()).unwrap().to_vec()
}

/// A database made through the library: the class, a chain of 60 items (page 1 fills up, so
/// they reach pages 2 and 3) from root slot 0, then `updates` commits that each change the
/// first item's `seq` (a record, a flush batch, each). Returns the engine (still open) and the
/// items' orefs.
fn library_db(dir: &Path, updates: u32) -> (Engine, Vec<Oref>) {
    let disk = Arc::new(FileDisk::open_locked(dir, true, "thor check test").unwrap());
    let opts =
        EngineOptions { page_size: PAGE_SIZE, background_flusher: false, ..Default::default() };
    let e = Engine::create(disk, opts).unwrap();
    let n = 60;
    let mut created = vec![item_class().to_class_object()];
    for i in 0..n {
        let next = if i + 1 < n { RawRef::tagged_word(i + 2) } else { 0 };
        created.push(item(RawRef::tagged_word(0), next, i));
    }
    let mut root = read(&e, builtin::ROOT);
    put_u32(&mut root, 8, RawRef::tagged_word(1));
    let out = e.commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created }).unwrap();
    let items = out.created[1..].to_vec();
    assert!(items.last().unwrap().page_raw() >= 2, "the items span pages");
    let first = items[0];
    for k in 0..updates {
        let mut o = read(&e, first);
        put_u32(&mut o, 8, 1000 + k);
        e.commit(CommitRequest { versions: vec![(first, o)], created: vec![] }).unwrap();
    }
    (e, items)
}

/// Every file of a directory but `LOCK`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

/// Page `id` of the page file.
fn read_page(dir: &Path, page_size: usize, id: u32) -> Vec<u8> {
    let bytes = std::fs::read(dir.join("pages")).unwrap();
    let at = id as usize * page_size;
    bytes[at..at + page_size].to_vec()
}

fn write_page(dir: &Path, id: u32, page: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(dir.join("pages")).unwrap();
    f.write_all_at(page, (id as usize * page.len()) as u64).unwrap();
}

/// The only log segment's name and the offsets of its records, by parsing the layout.
fn log_records(dir: &Path) -> (PathBuf, Vec<u64>) {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("log.") && !n.contains(".torn")
        })
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    let seg = segs.pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let mut offsets = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        offsets.push(at as u64);
        at += 20 + u32_at(&bytes, at + 4) as usize;
    }
    (seg, offsets)
}

fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
}

#[test]
fn check_passes_a_healthy_database() {
    let tmp = tempfile::tempdir().unwrap();

    // A loaded OO7 database, closed cleanly: everything installed, the log empty.
    let dir = oo7_tiny(tmp.path());
    let before = snapshot(&dir);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 0, "{lines:#?}");
    assert!(problems(&lines).is_empty(), "{lines:#?}");
    let summary = lines.last().unwrap();
    assert!(summary.ends_with("checked: no problems"), "{summary}");
    let (code, report) = check_json(&dir);
    assert_eq!(code, 0);
    assert_eq!(report["healthy"], true);
    assert_eq!(report["problems_total"], 0);
    assert_eq!(report["checked"]["pages"], 22);
    assert_eq!(report["checked"]["objects"], 4514 + 6, "OO7's objects and the built-ins");
    assert!(report["checked"]["references"].as_u64().unwrap() > 4000);
    assert_eq!(snapshot(&dir), before, "the check changed nothing");

    // A database left by a crash (`halt`: no install, no checkpoint): every commit is only in
    // the log, the items in pages 2 and 3 exist only there, and the root's reference to the
    // first item resolves only through the log.
    let dir = tmp.path().join("crashed");
    let (e, items) = library_db(&dir, 3);
    e.halt();
    let before = snapshot(&dir);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 0, "{lines:#?}");
    assert!(problems(&lines).is_empty(), "{lines:#?}");
    let (code, report) = check_json(&dir);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["checked"]["log_records"], 4);
    assert_eq!(report["checked"]["log_objects"], 1 + 1 + 60 + 3, "root, class, items, updates");
    assert_eq!(report["facts"]["alloc_page"], 1);
    assert_eq!(report["facts"]["last_page"], items.last().unwrap().page_raw());
    assert_eq!(snapshot(&dir), before, "the check changed nothing: the log is still to replay");

    // Recovery agrees: the database opens and holds what the log says.
    let disk = Arc::new(FileDisk::open_locked(&dir, false, "test").unwrap());
    let opts =
        EngineOptions { page_size: PAGE_SIZE, background_flusher: false, ..Default::default() };
    let e = Engine::open(disk, opts).unwrap();
    assert_eq!(u32_at(&read(&e, items[0]), 8), 1002);
    e.close().unwrap();
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 0, "{lines:#?}");

    // A crash in a busy life: a small MOB makes install rounds and checkpoints happen between
    // commits, so the page file holds part of the log's work (pages opened after the
    // checkpoint included) and the log holds records on both sides of the checkpoint.
    let dir = tmp.path().join("busy");
    let e = busy_db(&dir, 8, 100);
    e.halt();
    let (code, report) = check_json(&dir);
    assert_eq!(code, 0, "{report:#}");
    let facts = &report["facts"];
    assert!(facts["checkpoint"].as_u64().unwrap() > facts["log_first_lsn"].as_u64().unwrap());
    assert!(facts["last_page"].as_u64().unwrap() > facts["alloc_page"].as_u64().unwrap());
    assert!(report["checked"]["log_objects"].as_u64().unwrap() > 0);
}

/// A database whose MOB is small (installs and checkpoints between commits): `rounds`
/// commits that each create a chain of `per` items linked to the previous chain and rewrite an
/// earlier item. Returns the engine, still open.
fn busy_db(dir: &Path, rounds: u32, per: u32) -> Engine {
    let disk = Arc::new(FileDisk::open_locked(dir, true, "thor check test").unwrap());
    let mut opts = EngineOptions {
        page_size: PAGE_SIZE,
        background_flusher: false,
        mob_bytes: 32 * 1024,
        flush_batch_pages: 4,
        ..Default::default()
    };
    opts.log.segment_bytes = 32 * 1024;
    let e = Engine::create(disk, opts).unwrap();
    let created = vec![item_class().to_class_object()];
    let class = e.commit(CommitRequest { versions: vec![], created }).unwrap().created[0].raw();
    let mut all: Vec<Oref> = vec![];
    for r in 0..rounds {
        let created = (0..per)
            .map(|i| {
                let next = match all.last() {
                    _ if i + 1 < per => RawRef::tagged_word(i + 1),
                    Some(o) => o.raw(),
                    None => 0,
                };
                item(class, next, r * 1000 + i)
            })
            .collect();
        let mut versions = vec![];
        if let Some(&o) = all.get((r as usize * 7) % all.len().max(1)) {
            let mut b = read(&e, o);
            put_u32(&mut b, 8, 99);
            versions.push((o, b));
        }
        all.extend(e.commit(CommitRequest { versions, created }).unwrap().created);
    }
    e
}

#[test]
fn check_passes_a_database_whose_server_was_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    let server = common::start_at(&dir, addr);
    let history = tmp.path().join("history.jsonl");
    let client = |extra: &[&str]| {
        let out = common::thor()
            .args(["bench", "transfer-client", "--connect", &addr.to_string(), "--client", "1"])
            .arg("--history")
            .arg(&history)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    client(&["--setup", "8", "--seconds", "0"]);
    client(&["--seconds", "1"]);
    // SIGKILL: no install, no checkpoint, no log rotation.
    server.kill();
    let (code, report) = check_json(&dir);
    assert_eq!(code, 0, "{report:#}");
    assert!(report["checked"]["log_records"].as_u64().unwrap() > 0, "{report:#}");
}

#[test]
fn check_passes_a_wpl_database_whose_server_was_killed() {
    // Whole-page logging: the log holds page images, WPL commit records (with the created
    // objects in their body) and WPL checkpoints; `thor check` decodes them all.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (server, addr, log) = common::start(&dir, &["--create", "--commit-mode", "wpl"], None);
    common::drain(log);
    let history = tmp.path().join("history.jsonl");
    let client = |extra: &[&str]| {
        let out = common::thor()
            .args(["bench", "transfer-client", "--connect", &addr.to_string(), "--client", "1"])
            .arg("--history")
            .arg(&history)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    client(&["--setup", "8", "--seconds", "0"]);
    client(&["--seconds", "1"]);
    server.kill();
    let (code, report) = check_json(&dir);
    assert_eq!(code, 0, "{report:#}");
    assert!(report["checked"]["log_records"].as_u64().unwrap() > 0, "{report:#}");
    // And the database opens again in wpl mode (WPL's restart) and serves the accounts.
    let (server, addr, log) = common::start(&dir, &["--commit-mode", "wpl"], None);
    common::drain(log);
    let out = common::thor()
        .args(["bench", "transfer-client", "--connect", &addr.to_string(), "--client", "2"])
        .arg("--history")
        .arg(tmp.path().join("history2.jsonl"))
        .args(["--seconds", "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    server.kill();
}

#[test]
fn check_finds_a_flipped_page_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = oo7_tiny(tmp.path());
    flip(&dir.join("pages"), 5 * 8192 + 100);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "one problem; references into the page are not judged: {lines:#?}");
    assert!(found[0].starts_with("page 5: checksum mismatch (stored 0x"), "{}", found[0]);
    assert!(lines.last().unwrap().ends_with("checked: 1 problem"), "{lines:#?}");
    let (code, report) = check_json(&dir);
    assert_eq!(code, 1);
    assert_eq!(report["problems"][0]["place"], serde_json::json!({"kind": "page", "page": 5}));
}

#[test]
fn check_finds_a_broken_offset_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = oo7_tiny(tmp.path());
    let clean = read_page(&dir, 8192, 7);
    // Point oid 0's entry (the last two bytes of the page) 4 bytes into its own object, and
    // seal the page again so that only the structure is wrong.
    let mut p = clean.clone();
    let oid0 = u16_at(&p, 8192 - 2);
    assert_eq!(oid0, 24, "oid 0 starts after the page header");
    put_u16(&mut p, 8192 - 2, oid0 + 4);
    page::seal(&mut p);
    write_page(&dir, 7, &p);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    assert_eq!(
        problems(&lines),
        [
            "page 7 oid 0: offset-table entry (page byte 8190) holds offset 28: objects not contiguous"
        ],
        "one problem: references into the page are not judged"
    );

    // An entry moved so that the table is still well formed (oid 1 now starts 4 bytes into
    // oid 0) passes the structural check; the objects' shapes give it away.
    let mut p = clean;
    let oid1 = u16_at(&p, 8192 - 4);
    put_u16(&mut p, 8192 - 4, oid0 + 4);
    assert!(oid1 > oid0 + 4);
    page::seal(&mut p);
    PageView::parse_stored(&p, PageId::new(7).unwrap()).expect("structurally valid");
    write_page(&dir, 7, &p);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    let found = problems(&lines);
    assert!(found[0].starts_with("page 7 oid 0: 4 bytes do not have the shape of its class"));
    assert!(found[1].starts_with("page 7 oid 1: "), "{found:#?}");
}

#[test]
fn check_finds_a_dangling_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, items) = library_db(&dir, 0);
    e.close().unwrap();
    // Remove the last object of page 2, an item that the item before it names, the way a
    // writer that lost an object would: shorter offset table and data, zeros, a new checksum.
    let mut p = read_page(&dir, PAGE_SIZE, 2);
    let v = PageView::parse(&p).unwrap();
    let slots = v.slot_count();
    let last = Oid::new(slots as u16 - 1).unwrap();
    let victim = Oref::new(PageId::new(2).unwrap(), last);
    let range = v.object_range(last).unwrap();
    let at = items.iter().position(|&o| o == victim).expect("an item is last on page 2");
    let referrer = items[at - 1];
    p[range.clone()].fill(0);
    put_u16(&mut p, PAGE_SIZE - 2 * slots, 0);
    put_u16(&mut p, 16, (slots - 1) as u16);
    put_u16(&mut p, 18, range.start as u16);
    page::seal(&mut p);
    PageView::parse_stored(&p, PageId::new(2).unwrap()).expect("a valid page without it");
    write_page(&dir, 2, &p);

    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    let expected = format!(
        "page {} oid {}: reference word 0 (object byte 4) names {victim}, which does not exist \
         (page 2 has no object {})",
        referrer.page_raw(),
        referrer.oid().get(),
        last.get()
    );
    assert_eq!(problems(&lines), [expected.as_str()]);
    let (_, report) = check_json(&dir);
    assert_eq!(
        report["problems"][0]["place"],
        serde_json::json!({"kind": "page", "page": referrer.page_raw(), "oid": referrer.oid().get()})
    );
}

#[test]
fn check_finds_a_bad_log_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, _) = library_db(&dir, 3);
    e.halt();
    // Damage LSN 2, a durable record: LSN 3 and 4, flushed after it, are intact.
    let (seg, offsets) = log_records(&dir);
    assert_eq!(offsets.len(), 4);
    flip(&seg, offsets[1] + 20 + 10);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{lines:#?}");
    let name = seg.file_name().unwrap().to_str().unwrap();
    let head = format!(
        "log segment {name} offset {}: damaged record (LSN 2 expected here): record checksum \
         mismatch",
        offsets[1]
    );
    assert!(found[0].starts_with(&head), "{}", found[0]);
    assert!(
        found[0].contains(&format!("the intact record at offset {} (LSN 3)", offsets[2])),
        "{}",
        found[0]
    );
    let (_, report) = check_json(&dir);
    assert_eq!(
        report["problems"][0]["place"],
        serde_json::json!({"kind": "log", "segment": name, "offset": offsets[1]})
    );
}

#[test]
fn check_notes_a_torn_log_tail_and_cuts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, _) = library_db(&dir, 3);
    e.halt();
    // Damage the last record: its flush was the last, so this is what a crash during it
    // leaves. Recovery cuts it; the checker says so and leaves it.
    let (seg, offsets) = log_records(&dir);
    flip(&seg, offsets[3] + 20 + 4);
    let before = snapshot(&dir);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 0, "{lines:#?}");
    assert!(problems(&lines).is_empty(), "{lines:#?}");
    let name = seg.file_name().unwrap().to_str().unwrap();
    let note = format!("note: log segment {name} offset {}: torn tail of ", offsets[3]);
    assert!(lines.iter().any(|l| l.starts_with(&note)), "{lines:#?}");
    assert_eq!(snapshot(&dir), before, "nothing cut, no .torn file");
}

#[test]
fn check_refuses_a_directory_that_is_not_a_database() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), b"not a database").unwrap();
    let out = check(&empty, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a thor database"), "{err}");
    assert_eq!(snapshot(&empty).len(), 1);
    assert!(!empty.join("LOCK").exists(), "no lock file left in a directory that is not ours");

    let missing = tmp.path().join("missing");
    let out = check(&missing, &["--json"]);
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit_status"], 2);
    assert_eq!(report["error"], "no such directory");

    // A superblock that is not thor's.
    std::fs::write(empty.join("superblock"), b"something else entirely").unwrap();
    let out = check(&empty, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a thor database"));
}

#[test]
fn check_refuses_a_database_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, _) = library_db(&dir, 0);
    let out = check(&dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by pid"), "{err}");
    assert!(err.contains("thor check test"), "names the holder: {err}");
    e.close().unwrap();
    assert_eq!(check(&dir, &[]).status.code(), Some(0));
}

/// Copies a database directory (without its LOCK file).
fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (name, bytes) in snapshot(from) {
        std::fs::write(to.join(name), bytes).unwrap();
    }
}

/// Random damage to every file of a loaded and a crashed database (bit flips, overwritten
/// words, plausible orefs, truncations; page damage sometimes sealed with a valid checksum so
/// that it reaches the structure, class and reference checks): the checker always answers
/// with 0, 1 or 2, never a panic. `THOR_CHECK_CASES=n` runs more cases, `THOR_CHECK_SHOW=1`
/// prints each damage and report.
#[test]
fn check_never_panics_on_damaged_files() {
    let cases: u64 =
        std::env::var("THOR_CHECK_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let show = std::env::var("THOR_CHECK_SHOW").is_ok();
    let tmp = tempfile::tempdir().unwrap();
    let oo7 = oo7_tiny(tmp.path());
    let crashed = tmp.path().join("crashed");
    let (e, _) = library_db(&crashed, 3);
    e.halt();
    let mut rng = thor_storage::SplitMix64::new(0xC0FFEE);
    let mut outcomes = [0u32; 3];
    for case in 0..cases {
        let (base, page_size) = if case % 2 == 0 { (&oo7, 8192) } else { (&crashed, PAGE_SIZE) };
        let dir = tmp.path().join(format!("case{case}"));
        copy_db(base, &dir);
        let files = snapshot(&dir);
        let mut damage = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let (name, _) = &files[rng.below(files.len() as u64) as usize];
            let path = dir.join(name);
            let mut bytes = std::fs::read(&path).unwrap();
            if bytes.len() < 4 {
                continue;
            }
            let seal = name == "pages" && rng.coin();
            let at = rng.below(bytes.len() as u64) as usize;
            let word = (at & !3).min(bytes.len() - 4);
            let how = rng.below(4);
            damage.push(format!("{name}@{at}/{how}{}", if seal { "+seal" } else { "" }));
            match how {
                0 => bytes[at] ^= 1 << rng.below(8),
                1 => {
                    let v = rng.next_u64() as u32;
                    bytes[word..word + 4].copy_from_slice(&v.to_le_bytes());
                }
                2 => {
                    let page = PageId::new(1 + rng.below(40) as u32).unwrap();
                    let oref = Oref::new(page, Oid::new(rng.below(20) as u16).unwrap());
                    bytes[word..word + 4].copy_from_slice(&oref.raw().to_le_bytes());
                }
                _ => bytes.truncate(at),
            }
            let p = at / page_size * page_size;
            if seal && p + page_size <= bytes.len() {
                page::seal(&mut bytes[p..p + page_size]);
            }
            std::fs::write(&path, bytes).unwrap();
        }
        let out = check(&dir, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "case {case} {damage:?}: {err}");
        let code = out.status.code().unwrap_or(-1);
        assert!((0..=2).contains(&code), "case {case} {damage:?}: exit {code}: {err}");
        outcomes[code as usize] += 1;
        if show {
            let text = String::from_utf8_lossy(&out.stdout);
            eprintln!("case {case} {damage:?}: {code} {text}{err}");
        }
    }
    eprintln!("{cases} damaged databases: healthy, problems, cannot check: {outcomes:?}");
}

/// `library_db` with 2 updates, halted as a crash would leave it, then `records` appended to
/// its log with the storage layer directly (as a buggy build would have written them): they
/// pass the log's checksums, and the record decoder judges them.
fn db_with_records(dir: &Path, records: &[Vec<u8>]) -> Vec<Oref> {
    let (e, items) = library_db(dir, 2);
    e.halt();
    let disk = Arc::new(FileDisk::open_locked(dir, false, "thor check test").unwrap());
    let (log, _) =
        thor_storage::Log::open_streaming(disk, thor_storage::LogOptions::default()).unwrap();
    for r in records {
        log.append(r).unwrap();
    }
    log.flush().unwrap();
    items
}

/// A commit record of the given versions that read `reads`, as the core builds one.
fn commit_record(reads: &[Oref], versions: &[(Oref, Vec<u8>)]) -> Vec<u8> {
    let mut b = thor_server::record::RecordBuilder::with_capacity(0, (1 << 50, 1), reads);
    for (o, bytes) in versions {
        b.push(*o, false, bytes);
    }
    b.finish()
}

/// Opens the database in `dir` with an engine.
fn open(dir: &Path) -> Result<Engine, thor_server::EngineError> {
    let disk = Arc::new(FileDisk::open_locked(dir, false, "thor check test").unwrap());
    let opts =
        EngineOptions { page_size: PAGE_SIZE, background_flusher: false, ..Default::default() };
    Engine::open(disk, opts)
}

/// Issue 30's record: a commit whose read set holds the word 0x00000008 (an oref on page 0),
/// once acknowledged and logged. The database does not open with it, the error says where it
/// is and what to run; `thor check` names it; `thor check --repair` sets the word aside,
/// keeps the record's version and every later record, and the database opens and checks
/// clean.
#[test]
fn corrupt_record_is_reported_and_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, items) = library_db(&dir, 0);
    let mut v0 = read(&e, items[0]);
    put_u32(&mut v0, 8, 4242);
    let mut v1 = read(&e, items[1]);
    put_u32(&mut v1, 8, 777);
    e.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let page_zero = Oref::from_raw(0x0000_0008).unwrap();
    let bad = commit_record(&[items[0], page_zero], &[(items[0], v0.clone())]);
    let later = commit_record(&[items[1]], &[(items[1], v1.clone())]);
    let items2 = db_with_records(&dir, &[bad.clone(), later]);
    assert_eq!(items2, items, "the same database each time");

    // Opening reports the record precisely and says what to run.
    let err = open(&dir).unwrap_err();
    let (segment, offset) = match &err {
        thor_server::EngineError::UnreadableRecord { lsn, segment, offset, why } => {
            assert_eq!(*lsn, 4);
            assert!(why.contains("oref on page 0 in reads"), "{why}");
            (segment.clone(), *offset)
        }
        other => panic!("{other}"),
    };
    let (_, offsets) = log_records(&dir);
    assert_eq!(offset, offsets[3], "the fourth record's header");
    let text = err.to_string();
    assert!(text.contains(&format!("LSN 4 ({segment}, byte offset {offset})")), "{text}");
    assert!(text.contains("thor check --repair"), "{text}");

    // `thor check` names it.
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 1, "{lines:#?}");
    let found = problems(&lines);
    assert_eq!(found.len(), 1, "{lines:#?}");
    assert!(
        found[0].starts_with(&format!("log segment {segment} offset {offset} (LSN 4): ")),
        "{}",
        found[0]
    );

    // `thor check --repair` sets the word aside, keeps the rest, and the check passes.
    let out = check(&dir, &["--repair"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!(
            "repaired: log segment {segment} offset {offset} (LSN 4): malformed commit record: \
             oref on page 0 in reads"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("set aside: read-set word 1 (0x00000008)"), "{stdout}");
    assert!(stdout.contains("nothing committed is lost"), "{stdout}");
    assert_eq!(std::fs::read(dir.join("log.0000000000000004.aside")).unwrap(), bad);
    let report = std::fs::read_to_string(dir.join("log.0000000000000004.aside.txt")).unwrap();
    assert!(report.contains("LSN 4") && report.contains("0x00000008"), "{report}");

    // The database opens: the record's version and the later record's are there.
    let e = open(&dir).unwrap();
    assert_eq!(read(&e, items[0]), v0);
    assert_eq!(read(&e, items[1]), v1);
    drop(e);
    let (code, lines) = check_text(&dir);
    assert_eq!(code, 0, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("log.0000000000000004.aside keeps")), "{lines:#?}");
    // Nothing is left to repair.
    let out = check(&dir, &["--repair"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("nothing to repair"));
}

/// A record of which nothing can be read (an unknown kind) becomes a record that changes
/// nothing; the records after it are kept. One whose created object is set aside leaves a
/// later reference to it dangling: the database opens, and the check after the repair names
/// the reference.
#[test]
fn unreadable_records_are_set_aside_and_later_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (e, items) = library_db(&dir, 0);
    let last = *items.last().unwrap();
    let mut v1 = read(&e, items[1]);
    put_u32(&mut v1, 8, 555);
    e.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // LSN 4: garbage of an unknown kind. LSN 5: a later commit. LSN 6: a commit that creates
    // an object but with flags no build writes. LSN 7: a version that refers to that object.
    let garbage = vec![0x2a, 1, 2, 3, 4, 5, 6, 7, 8];
    let later = commit_record(&[], &[(items[1], v1.clone())]);
    let fresh = Oref::new(last.page().unwrap(), thor_core::Oid::new(last.oid().get() + 1).unwrap());
    let mut created = commit_record(&[], &[(fresh, item(u32_at(&v1, 0), 0, 9))]);
    let flags_at = created.len() - item(0, 0, 0).len() - 2;
    created[flags_at..flags_at + 2].copy_from_slice(&0x8001u16.to_le_bytes());
    let v2 = item(u32_at(&v1, 0), fresh.raw(), 3);
    let refers = commit_record(&[], &[(items[2], v2)]);
    db_with_records(&dir, &[garbage.clone(), later, created, refers]);
    assert!(matches!(open(&dir), Err(thor_server::EngineError::UnreadableRecord { lsn: 4, .. })));
    let out = check(&dir, &["--repair"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("(LSN 4): malformed commit record: unknown kind"), "{stdout}");
    assert!(stdout.contains("set aside: the whole record (9 bytes, kind 42)"), "{stdout}");
    assert!(stdout.contains("(LSN 6): malformed commit record: unknown flags"), "{stdout}");
    assert!(stdout.contains("what was set aside is lost from the database"), "{stdout}");
    assert_eq!(std::fs::read(dir.join("log.0000000000000004.aside")).unwrap(), garbage);
    let report = std::fs::read_to_string(dir.join("log.0000000000000006.aside.txt")).unwrap();
    assert!(report.contains(&format!("created object {fresh}")), "{report}");
    // The check after the repair names the dangling reference of LSN 7, and only that.
    let found: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            !l.starts_with("note: ")
                && !l.starts_with("thor check ")
                && !l.starts_with("repaired")
                && !l.starts_with("  ")
        })
        .collect();
    assert_eq!(found.len(), 1, "{stdout}");
    assert!(
        found[0].contains("(LSN 7) object")
            && found[0].contains(&format!("names {fresh}, which does not exist")),
        "{stdout}"
    );
    // The database opens; the later commit is there.
    let e = open(&dir).unwrap();
    assert_eq!(read(&e, items[1]), v1);
}
