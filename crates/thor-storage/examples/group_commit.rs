//! Measures group commit: N threads each append and `wait_durable` M records on real files
//! (a temporary directory, or the directory given) and on memory, and prints commits per second
//! and records per fsync.
//!
//! ```text
//! cargo run --release -p thor-storage --example group_commit -- [threads...] [--records M] [--payload B] [--dir PATH]
//! ```

use std::sync::Arc;
use std::time::Instant;

use thor_storage::{Disk, FileDisk, Log, LogOptions, MemDisk};

struct Args {
    /// Thread counts to try.
    threads: Vec<u64>,
    /// Records each thread commits.
    records: u64,
    /// Payload bytes per record.
    payload: usize,
    /// Where the real-file runs put their log (a fresh temporary directory per run if unset).
    dir: Option<std::path::PathBuf>,
}

fn parse() -> Args {
    let mut a = Args { threads: Vec::new(), records: 500, payload: 200, dir: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--records" => a.records = it.next().and_then(|v| v.parse().ok()).expect("--records N"),
            "--payload" => a.payload = it.next().and_then(|v| v.parse().ok()).expect("--payload B"),
            "--dir" => a.dir = it.next().map(Into::into),
            n => a.threads.push(n.parse().expect("a thread count")),
        }
    }
    if a.threads.is_empty() {
        a.threads = vec![1, 2, 4, 8, 16, 32];
    }
    a
}

fn run(disk: Arc<dyn Disk>, threads: u64, records: u64, payload: usize) {
    let (log, _) = Log::open(disk, LogOptions::default()).expect("open log");
    let log = Arc::new(log);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || {
                let p = vec![0x5Au8; payload];
                for _ in 0..records {
                    let lsn = log.append(&p).expect("append");
                    log.wait_durable(lsn).expect("wait_durable");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("committer thread");
    }
    let secs = start.elapsed().as_secs_f64();
    let s = log.stats();
    println!(
        "{threads:>4} threads  {:>9.0} commits/s  {:>6} flushes  {:>6.2} records/fsync (max {:>3})  {:>7.1} us/commit/thread",
        (threads * records) as f64 / secs,
        s.flushes,
        s.records_per_fsync_mean,
        s.records_per_fsync_max,
        secs * 1e6 / records as f64,
    );
}

fn main() {
    let a = parse();
    println!("real files ({} records/thread, {} B payload):", a.records, a.payload);
    for &t in &a.threads {
        let tmp;
        let path = match &a.dir {
            Some(d) => {
                let p = d.join(format!("group_commit_{t}"));
                let _ = std::fs::remove_dir_all(&p);
                p
            }
            None => {
                tmp = tempfile::tempdir().expect("temporary directory");
                tmp.path().to_path_buf()
            }
        };
        run(Arc::new(FileDisk::open_dir(&path, true).expect("directory")), t, a.records, a.payload);
    }
    println!("memory:");
    for &t in &a.threads {
        run(Arc::new(MemDisk::new()), t, a.records * 10, a.payload);
    }
}
