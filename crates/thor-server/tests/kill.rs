//! Crash test with a real process: `thor-commit-loop` commits in a loop on a real directory and
//! is killed with SIGKILL at random moments. After each kill the database must hold exactly the
//! acknowledged commits, or those plus the one in flight, entirely.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use thor_core::le::u32_at;
use thor_core::{Oref, builtin};
use thor_server::{Engine, EngineOptions};
use thor_storage::FileDisk;

fn check(dir: &std::path::Path, acked: u32, round: usize) -> u32 {
    let disk = Arc::new(FileDisk::open_dir(dir, false).unwrap());
    let opts = EngineOptions { background_flusher: false, ..EngineOptions::default() };
    let e = Engine::open(disk, opts).unwrap_or_else(|err| panic!("round {round}: reopen: {err}"));
    let root = read(&e, builtin::ROOT).unwrap();
    let counter = Oref::from_raw(u32_at(&root, 8)).unwrap();
    if counter.is_null() {
        assert_eq!(acked, 0, "round {round}: acknowledged commits but no counter");
        return 0;
    }
    let k = fields(&read(&e, counter).unwrap()).2;
    assert!(
        k == acked || k == acked + 1,
        "round {round}: {k} commits present, {acked} acknowledged"
    );
    let mut seqs: Vec<u32> = scan(&e)
        .into_iter()
        .filter(|(_, o)| u32_at(o, 0) != builtin::META.raw() && o.len() >= 16)
        .filter(|(o, _)| !builtin::is_builtin(*o))
        .filter(|(_, o)| fields(o).1 == 1)
        .map(|(_, o)| fields(&o).2)
        .collect();
    seqs.sort();
    assert_eq!(seqs, (1..=k).collect::<Vec<_>>(), "round {round}: items");
    k
}

#[test]
fn sigkill_at_random_moments_keeps_exactly_the_acknowledged_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_thor-commit-loop");
    let mut seed = 0x5EED_u64;
    let mut acked = 0;
    for round in 0..8 {
        let mut child = Command::new(exe)
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut start = None;
            let mut last = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut it = line.split(' ');
                match (it.next(), it.next().and_then(|n| n.parse::<u32>().ok())) {
                    (Some("start"), Some(n)) => start = Some(n),
                    (Some("ack"), Some(n)) => last = Some(n),
                    _ => {}
                }
            }
            (start, last)
        });
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(80 + (seed >> 33) % 400));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let (start, last) = reader.join().unwrap();
        if let Some(s) = start {
            assert!(
                s == acked || s == acked + 1,
                "round {round}: child started at {s}, {acked} acknowledged"
            );
        }
        let acked_now = last.or(start).unwrap_or(acked);
        acked = check(dir.path(), acked_now, round);
    }
    assert!(acked > 0, "the child never committed");
}
