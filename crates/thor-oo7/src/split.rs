//! OO7 split over two servers: module 1 at one server, module 2 at another, run through one
//! client's [`thor_client::Cluster`] (issue "Several servers": OO7 T1 cold and the dynamic
//! traversal with the database split over two servers, against one server).
//!
//! OO7's modules share nothing a traversal follows (each base assembly draws its private
//! composite parts from its own module), so a module is the natural unit to place on a server:
//! references between servers are then as rare as Thor assumes. Each server holds an OO7
//! database of one module; the two are generated with different seeds, so they are two
//! modules of the same shape (not byte-for-byte the modules of a two-module database).
//!
//! - A traversal that walks modules (T1, T1-, T6, ...) runs on both modules in one
//!   transaction: module 1 through the first server's session, module 2 through the second's.
//!   Its commit is a read-only transaction over two servers (two-phase commit with no
//!   coordinator: each server answers the client).
//! - The dynamic traversal (HAC paper section 4.1.1) sends each operation to one of the two
//!   "databases", which here are the two servers, and commits it (at that server alone).
//!
//! Each server's session has a cache of half the budget, so the two-server client holds as
//! much memory as the one-server client it is compared with.

use std::time::{Duration, Instant};

use thor_client::{Cluster, Session};
use thor_core::ServerId;

use crate::dynamic::{DynamicConfig, mode};
use crate::error::Oo7Error;
use crate::experiment::Workload;
use crate::ops::OpResult;
use crate::traverse::{Db, PartOp};

/// What a split run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SplitReport {
    /// The workload's name.
    pub traversal: String,
    /// Pages fetched, per server, during the measured part.
    pub fetches: Vec<u64>,
    /// Atomic parts visited.
    pub parts_visited: u64,
    /// Operations measured (1 for a traversal).
    pub ops: u64,
    /// Seconds in the operations, commits excluded.
    pub elapsed_s: f64,
    /// Seconds in commits.
    pub commit_s: f64,
    /// Transactions that committed over both servers (two-phase commit).
    pub two_phase_commits: u64,
}

fn fetches(s: &Session) -> u64 {
    s.stats().fetches
}

/// Runs `workload` cold over the two servers of `cluster` (`servers[i]` holds module `i + 1`).
pub fn run_split(
    cluster: &Cluster,
    servers: [ServerId; 2],
    workload: Workload,
) -> Result<SplitReport, Oo7Error> {
    let sessions = [cluster.session(servers[0])?, cluster.session(servers[1])?];
    let mut dbs = [Db::open(sessions[0])?, Db::open(sessions[1])?];
    for db in &dbs {
        if db.module_count() != 1 {
            return Err(Oo7Error::BadParams(format!(
                "a split database has one module per server, not {}",
                db.module_count()
            )));
        }
    }
    // Opening the databases read their roots: that transaction is not measured.
    cluster.commit()?;
    let mut before = [fetches(sessions[0]), fetches(sessions[1])];
    let two_phase_before = cluster.stats().two_phase;
    let mut result = OpResult::default();
    let (elapsed, commit, ops) = match workload {
        Workload::Op(op) => {
            let t = Instant::now();
            for db in &mut dbs {
                result += db.run_on_module(op, 0)?;
            }
            let e = t.elapsed();
            let tc = Instant::now();
            cluster.commit()?;
            (e, tc.elapsed(), 1)
        }
        Workload::Dynamic(d) => dynamic(cluster, &mut dbs, &d, &mut result, sessions, &mut before)?,
    };
    let after = [fetches(sessions[0]), fetches(sessions[1])];
    Ok(SplitReport {
        traversal: workload.name().to_string(),
        fetches: vec![after[0] - before[0], after[1] - before[1]],
        parts_visited: result.parts_visited,
        ops,
        elapsed_s: elapsed.as_secs_f64(),
        commit_s: commit.as_secs_f64(),
        two_phase_commits: cluster.stats().two_phase - two_phase_before,
    })
}

/// The dynamic traversal with database `i` at server `i`: every operation a transaction at one
/// server. The warm-up operations are run but not counted: `before` becomes the fetch counts
/// where the measured part starts.
fn dynamic(
    cluster: &Cluster,
    dbs: &mut [Db<'_>; 2],
    d: &DynamicConfig,
    result: &mut OpResult,
    sessions: [&Session; 2],
    before: &mut [u64; 2],
) -> Result<(Duration, Duration, u64), Oo7Error> {
    d.validate()?;
    let mut start = None;
    let mut commit = Duration::ZERO;
    for i in 0..d.ops {
        if i == d.warmup_ops {
            *before = [fetches(sessions[0]), fetches(sessions[1])];
            start = Some(Instant::now());
            commit = Duration::ZERO;
        }
        let (m, op, mut r) = d.op(i);
        let cp = dbs[m].random_composite(0, &mut r)?;
        let out = dbs[m].part_op(cp, PartOp::Graph(mode(op)))?;
        if i >= d.warmup_ops {
            *result += out;
        }
        let tc = Instant::now();
        cluster.commit()?;
        commit += tc.elapsed();
    }
    let total = start.map(|t| t.elapsed()).unwrap_or_default();
    Ok((total.saturating_sub(commit), commit, u64::from(d.ops - d.warmup_ops)))
}
