//! What a server page-cache miss costs with and without `FileDisk::with_direct_reads`: one
//! 8 KiB page read (`PageFile::read`) at a random page of a 128 MiB page file, in µs per read.
//!
//! - `buffered`: the file was just written and read once, so every read is a copy from the OS
//!   page cache, which is what a "miss" costs on a machine where the cache cannot be dropped;
//! - `direct`: the same reads with `O_DIRECT`: each is a device read (what the DEMOTE
//!   experiment needs a miss to be). On a virtual machine the host may still cache the image.
//!
//! The file lives in a temporary directory under `$TMPDIR` (it must support `O_DIRECT`). Pages
//! are picked by a seeded PRNG, so both benchmarks read the same sequence.
//!
//! Run: `cargo bench -p thor-storage --bench direct_read`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use thor_storage::{FileDisk, PageFile, SplitMix64};

const PAGE: usize = 8192;
const PAGES: u32 = 16_384;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let buffered = FileDisk::open_dir(dir.path(), false).expect("the directory");
    let direct = buffered.clone().with_direct_reads(true).expect("direct reads");
    {
        let pages = PageFile::open(&buffered, "pages", PAGE, true).expect("the page file");
        let mut rng = SplitMix64::new(1);
        let run: Vec<u8> = (0..PAGE * 256).map(|_| rng.next_u64() as u8).collect();
        for first in (0..PAGES).step_by(256) {
            pages.write_run(first, &run).expect("write");
        }
        pages.sync().expect("sync");
        // One buffered pass, so that `buffered` reads from the OS cache from the start.
        let mut buf = vec![0u8; PAGE];
        for id in 0..PAGES {
            pages.read(id, &mut buf).expect("read");
        }
    }
    let mut group = c.benchmark_group("page_read_8k");
    group.measurement_time(Duration::from_secs(5));
    for (name, disk) in [("buffered", &buffered), ("direct", &direct)] {
        let pages = PageFile::open(disk, "pages", PAGE, false).expect("the page file");
        let mut rng = SplitMix64::new(2);
        let mut buf = vec![0u8; PAGE];
        group.bench_function(name, |b| {
            b.iter(|| {
                let id = rng.below(u64::from(PAGES)) as u32;
                black_box(pages.read(id, &mut buf).expect("read"))
            })
        });
    }
    group.finish();
    let s = direct.direct_read_stats();
    eprintln!("direct reads: {} ({} bytes, {} from the device)", s.reads, s.bytes, s.device_bytes);
}

criterion_group!(benches, bench);
criterion_main!(benches);
