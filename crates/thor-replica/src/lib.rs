//! thor-replica: a thor server's replica group, sans-I/O, on raft-rs.
//!
//! (Draft docs; completed below once the harness lands.)

pub mod error;
pub mod journal;
pub mod limits;
pub mod logger;
pub mod replica;
pub mod sim;
pub mod storage;

pub use error::{LogError, ProposeError, ReplicaError, StepError};
pub use replica::{
    Apply, Committed, Effects, Proposal, Replica, ReplicaConfig, ReplicaStatus, Restore, Role,
    RoleChange, election_timeout_for,
};
pub use storage::{JOURNAL_PREFIX, RaftLog, Recovery, journal_options};
