//! Compaction: a closed database rewritten into a new directory without its garbage.
//!
//! This is [`upgrade()`](crate::upgrade()) with no class changed (an upgrade that appends fields to
//! classes needs the program's new declarations, so it is the facade's `thor::Upgrade`).
//! Every object reachable from the root is copied, in the same order, into `dst`, which must
//! not exist and whose parent must (the rule `thor backup` follows: a mistyped path creates
//! nothing), and which appears only once complete; unreachable objects are dropped. An
//! interrupted run leaves `.DST.thor-upgrade` beside it, which the next run into the same
//! place reclaims, with a log line (as a backup reclaims its `.DST.partial`). `src` must be
//! closed (compaction takes its lock) and is never written. Check the result
//! ([`crate::check()`]), then point the servers at it.

use std::path::{Path, PathBuf};

use crate::upgrade::{UpgradeError, UpgradeReport};

/// Why a compaction did not happen. The source is unchanged either way.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// The destination's parent directory does not exist: create it first (nothing is created
    /// for a mistyped path).
    #[error(
        "compacting into {}: its parent directory does not exist (create it first)",
        dst.display()
    )]
    NoParent {
        /// The destination asked for.
        dst: PathBuf,
    },
    /// The rewrite failed; [`UpgradeError`]'s variant says why and what to do.
    #[error("compacting {} into {}", src.display(), dst.display())]
    Rewrite {
        /// The source database.
        src: PathBuf,
        /// The destination.
        dst: PathBuf,
        /// Why (boxed: an upgrade's error is large beside a path).
        #[source]
        source: Box<UpgradeError>,
    },
}

/// Compacts the closed database `src` into the new directory `dst`; see the module
/// documentation.
pub fn compact(src: &Path, dst: &Path) -> Result<UpgradeReport, CompactError> {
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(CompactError::NoParent { dst: dst.to_path_buf() });
    }
    crate::upgrade(src, dst, &[]).map_err(|source| CompactError::Rewrite {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        source: Box::new(source),
    })
}
