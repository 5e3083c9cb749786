//! `thor compact` and upgrades end to end, one behaviour per test: an OO7 database compacted
//! traverses the same and passes `thor check`; a database upgraded with `thor::Upgrade`
//! passes `thor check`; a compaction killed at any moment leaves no destination, or a
//! complete one, and the next run finishes it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

fn thor(args: &[&str]) -> Output {
    common::thor().args(args).env_remove("RUST_BACKTRACE").output().expect("thor runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = thor(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `thor oo7 load --size SIZE` into `dir`.
fn oo7(dir: &Path, size: &str) {
    json(&["oo7", "load", "--dir", path(dir), "--size", size, "--json"]);
}

/// `thor check DIR` passes (exit status 0, no problem lines).
fn assert_checks(dir: &Path) {
    let report = json(&["check", "--json", path(dir)]);
    assert_eq!(report["exit_status"], 0, "{report:#}");
    assert_eq!(report["problems_total"], 0, "{report:#}");
}

/// What the whole OO7 suite answers on `dir` (the measured counts that depend only on the
/// database's contents: not times, not fetches).
fn suite(dir: &Path) -> Vec<serde_json::Value> {
    // The update traversals keep every object they modify until they commit.
    let all = json(&[
        "oo7",
        "run",
        "--dir",
        path(dir),
        "--traversal",
        "all",
        "--cache-mb",
        "256",
        "--json",
    ]);
    all.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            serde_json::json!({
                "traversal": r["traversal"],
                "parts_visited": r["parts_visited"],
                "updates": r["updates"],
                "result": r["result"],
                "ops": r["ops"],
            })
        })
        .collect()
}

#[test]
fn compacted_oo7_database_traverses_the_same_and_passes_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    oo7(&src, "small");
    let report = json(&["compact", path(&src), path(&dst), "--json"]);
    assert_eq!(
        report["objects"],
        report["source_objects"].as_u64().unwrap() - report["dropped"].as_u64().unwrap()
    );
    assert!(report["pages"].as_u64().unwrap() <= report["source_pages"].as_u64().unwrap());
    assert_checks(&dst);
    // The suite writes (insert, delete, the update traversals): each database runs it from
    // the same contents.
    let (before, after) = (suite(&src), suite(&dst));
    assert_eq!(before.len(), 25);
    assert_eq!(before, after);
}

mod v1 {
    thor::class! {
        pub class Person("test.Person") { age: u32, best: thor::Ref<Person> }
        var refs<Person>;
    }
}

mod v2 {
    thor::class! {
        pub class Person("test.Person") { age: u32, best: thor::Ref<Person>, height: u64 }
        var refs<Person>;
    }
}

#[test]
fn upgraded_database_passes_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    let s = thor::open(&src).unwrap();
    // One `thor.Refs` of them: 2000 references fill most of a page.
    let n = 2000;
    s.run::<_, thor_client::ClientError>(|s| {
        let all = s.create::<thor::Refs<v1::Person>>(n)?;
        for i in 0..n {
            let p = s.create::<v1::Person>(i % 3)?;
            p.set(v1::Person::age, i as u32)?;
            all.set_var_ref(i, p.as_ref())?;
        }
        for i in 0..n {
            let p = s.get(all.var_ref(i))?;
            p.set(v1::Person::best, all.var_ref((i * 7) % n))?;
            for k in 0..i % 3 {
                p.set_var_ref(k, all.var_ref((i + k + 1) % n))?;
            }
        }
        s.set_root(0, all.as_ref())?;
        // Garbage: persons nothing reaches.
        for _ in 0..100 {
            s.create::<v1::Person>(0)?;
        }
        Ok(())
    })
    .unwrap();
    s.close().unwrap();
    assert_checks(&src);
    let report = thor::Upgrade::new(&src, &dst).class::<v2::Person>().run().unwrap();
    assert_eq!(report.classes[0].instances, n as u64);
    assert_eq!(report.dropped, 100);
    assert_checks(&dst);
    assert_checks(&src);
}

/// The temporary directory an upgrade into `dst` writes.
fn temp_of(dst: &Path) -> PathBuf {
    dst.with_file_name(format!(".{}.thor-upgrade", dst.file_name().unwrap().to_str().unwrap()))
}

#[test]
fn killed_compaction_leaves_no_destination_and_the_next_run_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    oo7(&src, "small");
    let temp = temp_of(&dst);
    let mut child = common::thor()
        .args(["compact", path(&src), path(&dst)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once it is writing the new pages (or whenever it is done, if it is faster
    // than this loop: both outcomes are checked).
    while child.try_wait().unwrap().is_none() && !temp.join("pages").exists() {
        std::thread::yield_now();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    if dst.exists() {
        // It finished first: the destination is complete.
        println!("the compaction finished before the kill");
        assert_checks(&dst);
        return;
    }
    // Nothing at the destination; the next run reclaims the leftover and finishes.
    println!("killed while writing {}", temp.display());
    json(&["compact", path(&src), path(&dst), "--json"]);
    assert!(!temp.exists(), "the temporary directory became the destination");
    assert_checks(&dst);

    // A leftover holding someone else's file is not reclaimed.
    let other = tmp.path().join("other");
    std::fs::create_dir(temp_of(&other)).unwrap();
    std::fs::write(temp_of(&other).join("notes.txt"), b"mine").unwrap();
    let out = thor(&["compact", path(&src), path(&other)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("notes.txt") && err.contains("remove it"), "{err}");
    assert_eq!(std::fs::read(temp_of(&other).join("notes.txt")).unwrap(), b"mine");
    assert!(!other.exists());
}
