//! A memory cgroup to run a probe under: created as a child of this process's own memory
//! cgroup, given a limit, joined by the probe's process before it execs, removed after.
//!
//! # Which hierarchy
//!
//! `/proc/self/cgroup` names this process's cgroups and `/proc/self/mounts` where the
//! hierarchies are mounted. With the memory controller on cgroup v2 (a `0::/path` line, and
//! `memory` in the v2 mount's `cgroup.controllers`) the limit is `memory.max` and swap is
//! turned off with `memory.swap.max = 0`. With it on cgroup v1 (an `N:memory:/path` line, as
//! on this project's machines, where v2 is mounted beside v1 without the memory controller) the
//! limit is `memory.limit_in_bytes`; the machines have no swap, so v1's swap limit is left
//! alone. Either way the cgroup's charge is the process's anonymous memory plus the page-cache
//! pages it brought in (its mapped file pages included): a page already cached when the probe
//! starts is charged to whoever read it first, which is why a probe drops its database from the
//! page cache first (`crate::sys::drop_from_page_cache`).
//!
//! The cgroup's peak charge and its OOM kills are read back where the kernel reports them
//! (v1: `memory.max_usage_in_bytes`, `memory.oom_control`'s `oom_kill`; v2: `memory.peak`,
//! `memory.events`' `oom_kill`).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::BenchError;

/// The cgroup interface the memory controller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    /// cgroup v1's memory hierarchy.
    V1,
    /// The unified (v2) hierarchy.
    V2,
}

/// Where this process's memory cgroup is, to create probes' cgroups under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    /// The interface.
    pub version: Version,
    /// The directory of this process's memory cgroup.
    pub dir: PathBuf,
}

fn read(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))
}

fn write(path: &Path, s: &str) -> Result<(), BenchError> {
    std::fs::write(path, s).map_err(|e| BenchError::io(path, e))
}

impl Parent {
    /// Finds this process's memory cgroup, and checks that a child can be made in it.
    pub fn find() -> Result<Parent, BenchError> {
        let cgroups = read(Path::new("/proc/self/cgroup"))?;
        let mounts = read(Path::new("/proc/self/mounts"))?;
        let mount_of = |fstype: &str, option: Option<&str>| -> Option<PathBuf> {
            mounts.lines().find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4
                    && f[2] == fstype
                    && option.is_none_or(|o| f[3].split(',').any(|x| x == o)))
                .then(|| PathBuf::from(f[1]))
            })
        };
        let mut v2_path = None;
        for line in cgroups.lines() {
            let mut it = line.splitn(3, ':');
            let (_, ctrls, path) = match (it.next(), it.next(), it.next()) {
                (Some(a), Some(b), Some(c)) => (a, b, c),
                _ => continue,
            };
            if ctrls.split(',').any(|c| c == "memory")
                && let Some(m) = mount_of("cgroup", Some("memory"))
            {
                return Parent::check(Version::V1, m.join(path.trim_start_matches('/')));
            }
            if ctrls.is_empty() {
                v2_path = Some(path.to_string());
            }
        }
        if let (Some(p), Some(m)) = (v2_path, mount_of("cgroup2", None)) {
            let dir = m.join(p.trim_start_matches('/'));
            let ctrls = read(&dir.join("cgroup.controllers")).unwrap_or_default();
            if ctrls.split_whitespace().any(|c| c == "memory") {
                return Parent::check(Version::V2, dir);
            }
        }
        Err(BenchError::io(
            "/proc/self/cgroup",
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no memory cgroup controller (v1 or v2) is available to this process",
            ),
        ))
    }

    fn check(version: Version, dir: PathBuf) -> Result<Parent, BenchError> {
        let p = Parent { version, dir };
        // Making and removing a child shows both that the hierarchy is writable and that the
        // limit file exists.
        let probe = MemoryCgroup::create(&p, "oo7-lmdb-check", 64 << 20)?;
        drop(probe);
        Ok(p)
    }
}

/// A cgroup with a memory limit, removed when dropped. See the module documentation.
#[derive(Debug)]
pub struct MemoryCgroup {
    /// The interface.
    version: Version,
    /// Its directory.
    dir: PathBuf,
    /// Its `cgroup.procs`, ready for a forked child to write to without allocating.
    procs: CString,
}

impl MemoryCgroup {
    /// Creates cgroup `name` under `parent` with a limit of `limit_bytes` (an old one of the
    /// name, left by a killed run, is removed first).
    pub fn create(parent: &Parent, name: &str, limit_bytes: u64) -> Result<Self, BenchError> {
        let dir = parent.dir.join(format!("{name}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir(&dir).map_err(|e| BenchError::io(&dir, e))?;
        }
        if parent.version == Version::V2 {
            // Children get the memory controller only if the parent hands it down.
            let sub = parent.dir.join("cgroup.subtree_control");
            if !read(&sub)?.split_whitespace().any(|c| c == "memory") {
                write(&sub, "+memory")?;
            }
        }
        std::fs::create_dir(&dir).map_err(|e| BenchError::io(&dir, e))?;
        let procs = CString::new(dir.join("cgroup.procs").into_os_string().into_encoded_bytes())
            .map_err(|_| BenchError::io(&dir, std::io::Error::other("a NUL in the path")))?;
        let cg = MemoryCgroup { version: parent.version, dir, procs };
        match cg.version {
            Version::V1 => write(&cg.dir.join("memory.limit_in_bytes"), &limit_bytes.to_string())?,
            Version::V2 => {
                write(&cg.dir.join("memory.max"), &limit_bytes.to_string())?;
                let swap = cg.dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            }
        }
        Ok(cg)
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limit the kernel holds (it rounds to pages).
    pub fn limit_bytes(&self) -> Result<u64, BenchError> {
        let f = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let path = self.dir.join(f);
        read(&path)?
            .trim()
            .parse()
            .map_err(|_| BenchError::io(&path, std::io::Error::other("not a number")))
    }

    /// The most the cgroup was charged, if the kernel reports it.
    pub fn peak_bytes(&self) -> Option<u64> {
        let f = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        read(&self.dir.join(f)).ok()?.trim().parse().ok()
    }

    /// OOM kills in the cgroup, if the kernel reports them.
    pub fn oom_kills(&self) -> Option<u64> {
        let f = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        read(&self.dir.join(f)).ok()?.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == "oom_kill").then(|| v.trim().parse().ok()).flatten()
        })
    }

    /// Makes `cmd`'s process join this cgroup between fork and exec, so that everything it
    /// allocates or reads after exec is charged here.
    pub fn enter_on_spawn(&self, cmd: &mut Command) {
        let procs = self.procs.clone();
        // SAFETY: the hook runs in the forked child before exec and calls only open, write
        // and close (async-signal-safe) on a path and buffer allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" names the writing process itself, in v1 as in v2.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The probe has been reaped before the cgroup is dropped, but the kernel may take a
        // moment to let go of the cgroup; retry briefly, then leave it with a warning.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("warning: could not remove cgroup {}", self.dir.display());
    }
}
