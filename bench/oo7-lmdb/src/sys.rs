//! What the measurements need from Linux: page faults, I/O counters, a file's pages in the OS
//! page cache (dropping them, counting them), and a child process waited for with its resource
//! usage and a deadline.
//!
//! Page faults are `getrusage`'s: a *minor* fault maps a page that is already in memory (the
//! first touch of a mapped page that the page cache holds), a *major* fault waits for the disk.
//! A hot run over LMDB without major faults is one whose pages all stayed in memory.
//!
//! Dropping a file's cached pages uses `posix_fadvise(POSIX_FADV_DONTNEED)` after an
//! `fdatasync` (dirty pages cannot be dropped): it needs no privilege and touches no other
//! file, unlike writing `/proc/sys/vm/drop_caches`, which empties the whole machine's cache
//! (other engineers' builds included) and which this machine's sandbox refuses anyway.
//! [`resident_pages`] (`mincore` over a private read-only mapping) checks that it worked.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::error::BenchError;

/// Resource usage of this process or of a waited-for child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Minor page faults.
    pub minflt: u64,
    /// Major page faults.
    pub majflt: u64,
    /// Peak resident set, KiB.
    pub maxrss_kib: u64,
    /// User plus system CPU time, microseconds.
    pub cpu_us: u64,
    /// Blocks written (512 bytes each; the kernel's `write_bytes` / 512).
    pub oublock: u64,
}

fn usage_of(r: &libc::rusage) -> Usage {
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Usage {
        minflt: r.ru_minflt as u64,
        majflt: r.ru_majflt as u64,
        maxrss_kib: r.ru_maxrss as u64,
        cpu_us: us(r.ru_utime) + us(r.ru_stime),
        oublock: r.ru_oublock as u64,
    }
}

/// This process's resource usage so far.
pub fn usage_self() -> Usage {
    let mut r = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `r` is a valid, writable rusage; RUSAGE_SELF cannot fail with a valid pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, r.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) with a valid buffer");
    // SAFETY: zero-initialised and then filled by the kernel; every field is plain data.
    usage_of(&unsafe { r.assume_init() })
}

/// CPU time of the calling thread so far (`/proc/thread-self/schedstat`): unlike elapsed time
/// it does not count waiting for a CPU, which on a shared machine is most of the noise.
pub fn thread_cpu() -> Option<Duration> {
    thor_oo7::experiment::thread_cpu()
}

/// This process's I/O counters (`/proc/self/io`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoCounters {
    /// Bytes passed to write-like system calls.
    pub wchar: u64,
    /// Write-like system calls.
    pub syscw: u64,
    /// Bytes this process caused to be sent to storage (counted when pages are dirtied).
    pub write_bytes: u64,
    /// Bytes this process caused to be read from storage.
    pub read_bytes: u64,
}

impl IoCounters {
    /// The counters of this process now (zeros where the kernel does not provide them).
    pub fn now() -> IoCounters {
        let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let mut c = IoCounters::default();
        for line in s.lines() {
            let Some((k, v)) = line.split_once(':') else { continue };
            let v = v.trim().parse().unwrap_or(0);
            match k {
                "wchar" => c.wchar = v,
                "syscw" => c.syscw = v,
                "write_bytes" => c.write_bytes = v,
                "read_bytes" => c.read_bytes = v,
                _ => {}
            }
        }
        c
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &IoCounters) -> IoCounters {
        IoCounters {
            wchar: self.wchar.saturating_sub(before.wchar),
            syscw: self.syscw.saturating_sub(before.syscw),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
        }
    }
}

/// This process's resident memory by kind (`/proc/self/status`), KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resident {
    /// All resident pages.
    pub rss_kib: u64,
    /// Anonymous pages (heap, stacks).
    pub anon_kib: u64,
    /// File-backed pages mapped by the process (the binary, libraries, LMDB's map).
    pub file_kib: u64,
}

impl Resident {
    /// This process's resident memory now.
    pub fn now() -> Resident {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let mut r = Resident::default();
        for line in s.lines() {
            let Some((k, v)) = line.split_once(':') else { continue };
            let v = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            match k {
                "VmRSS" => r.rss_kib = v,
                "RssAnon" => r.anon_kib = v,
                "RssFile" => r.file_kib = v,
                _ => {}
            }
        }
        r
    }
}

fn open(path: &Path) -> Result<File, BenchError> {
    File::open(path).map_err(|e| BenchError::io(path, e))
}

/// Writes `path`'s dirty pages and asks the kernel to drop all its pages from the page cache.
/// Pages mapped by a live process stay; check with [`resident_pages`].
pub fn drop_from_page_cache(path: &Path) -> Result<(), BenchError> {
    let f = open(path)?;
    f.sync_data().map_err(|e| BenchError::io(path, e))?;
    // SAFETY: a valid open descriptor; the advice only changes the page cache.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(BenchError::io(path, std::io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

/// Pages of `path` in the page cache, and pages in all (4 KiB each on this machine).
pub fn resident_pages(path: &Path) -> Result<(u64, u64), BenchError> {
    let f = open(path)?;
    let len = f.metadata().map_err(|e| BenchError::io(path, e))?.len() as usize;
    if len == 0 {
        return Ok((0, 0));
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a private read-only mapping of an open file of `len` bytes; it is only passed to
    // mincore and unmapped below, never read, so it faults nothing in.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, f.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(BenchError::io(path, std::io::Error::last_os_error()));
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `p` maps `len` bytes and `vec` has one byte per page of them.
    let rc = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    unsafe { libc::munmap(p, len) };
    if rc != 0 {
        return Err(BenchError::io(path, err));
    }
    Ok((vec.iter().filter(|&&b| b & 1 == 1).count() as u64, pages as u64))
}

/// Reads every byte of `path` (to warm the OS page cache), returning how many.
pub fn read_through(path: &Path) -> Result<u64, BenchError> {
    let mut f = open(path)?;
    std::io::copy(&mut f, &mut std::io::sink()).map_err(|e| BenchError::io(path, e))
}

/// How a waited-for child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it (9: killed, by the deadline or the kernel's OOM killer).
    Signal(i32),
    /// It passed the deadline and was killed.
    TimedOut,
}

/// Waits for `child` until `timeout`, killing it then; returns how it ended and its resource
/// usage (the child's own, from `wait4`).
pub fn wait_with_usage(child: &mut Child, timeout: Duration) -> Result<(Exit, Usage), BenchError> {
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let mut timed_out = false;
    loop {
        let mut status = 0;
        let mut r = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `pid` is our child, not yet reaped (std's `Child` is never waited for here
        // except through this call); `status` and `r` are valid buffers.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, r.as_mut_ptr()) };
        if rc == pid {
            // SAFETY: filled by the kernel on success; plain data.
            let u = usage_of(&unsafe { r.assume_init() });
            let exit = if timed_out {
                Exit::TimedOut
            } else if libc::WIFEXITED(status) {
                Exit::Code(libc::WEXITSTATUS(status))
            } else {
                Exit::Signal(libc::WTERMSIG(status))
            };
            return Ok((exit, u));
        }
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(BenchError::io(format!("wait4({pid})"), e));
        }
        if !timed_out && start.elapsed() > timeout {
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            timed_out = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_is_counted_in_pages_and_can_be_dropped() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![7u8; 3 * 4096 + 1]).unwrap();
        f.flush().unwrap();
        assert_eq!(read_through(f.path()).unwrap(), 3 * 4096 + 1);
        let (resident, pages) = resident_pages(f.path()).unwrap();
        assert_eq!(pages, 4);
        assert!(resident <= pages);
        // Whether the pages really leave depends on the file system (tmpfs keeps them).
        drop_from_page_cache(f.path()).unwrap();
        let empty = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(resident_pages(empty.path()).unwrap(), (0, 0));
        assert!(resident_pages(Path::new("/nonexistent/oo7-lmdb")).is_err());
    }

    #[test]
    fn children_are_waited_for_with_their_exit_and_a_deadline() {
        let mut c = std::process::Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let (exit, _) = wait_with_usage(&mut c, Duration::from_secs(60)).unwrap();
        assert_eq!(exit, Exit::Code(3));
        let mut c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let t = Instant::now();
        let (exit, _) = wait_with_usage(&mut c, Duration::from_millis(50)).unwrap();
        assert_eq!(exit, Exit::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn counters_of_this_process_are_read() {
        let u = usage_self();
        assert!(u.minflt > 0 && u.maxrss_kib > 0);
        assert!(Resident::now().rss_kib > 0);
        let a = IoCounters::now();
        assert_eq!(a.since(&a), IoCounters::default());
    }
}
