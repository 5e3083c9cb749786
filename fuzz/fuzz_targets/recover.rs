//! Drives the server core with decoded requests, then recovers its log (issue 30): every
//! commit the engine acknowledges must decode from the log with recovery's decoders, survive a
//! crash (the recovered server serves exactly the pages it served before), and be in a backup
//! that opens. The input is a program of requests (`thor_sim::acked`): built from a small
//! prebuilt database's objects and edge-case words, encoded by hand, damaged byte by byte,
//! decoded by the wire decoder, run by the real engine on a `MemDisk`.
//!
//!   cargo fuzz run recover -s none                       # stable: coverage-guided, no sanitizer
//!   cargo fuzz run recover -s none -- -max_total_time=60 # what CI runs
//!
//! A failure prints the broken promise and the program's steps; the same input replays with
//! `cargo fuzz run recover -s none <the crash file>`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(f) = thor_sim::acked::run(data) {
        panic!("{f}");
    }
});
