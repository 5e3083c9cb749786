//! The liveness check of every simulated run (issue 32): safety is not enough, the system
//! must also make progress once the faults stop.
//!
//! A run has two phases. While its faults last (crashes, lost messages, dying I/O) nothing
//! is promised about progress: a crashed server serves nobody. When the clients have done
//! their faulty work the faults stop, crashed servers recover, and once the cluster has
//! *settled* what the faults left (every server up, nothing in doubt, for a quiet while) the
//! *calm* begins: every client runs again, and after every event of the calm the run checks
//!
//! - that no request of a client has waited longer than [`Bounds::wait_us_max`] for its
//!   answer (a single server's commit held behind an install round, a WPL checkpoint or a
//!   decided part of a two-phase transaction would show here), and
//! - that every client that has not yet committed [`CALM_COMMITS`] times committed within
//!   [`Bounds::commit_us_max`] of the calm's start or of its last commit (a client whose
//!   every attempt is refused, or that waits forever, shows here).
//!
//! A run that breaks either fails like a safety violation, with its replay command. The
//! bounds are generous multiples of what a fault-free run needs (a few round trips, log syncs
//! and disk reads, each under 2.5 ms of virtual time), and each world measures the longest
//! waits it saw so that the margin is known ([`Progress::wait_us_seen`],
//! [`Progress::commit_us_seen`]).

use crate::check::Violation;

/// Commits each client must have acknowledged in the calm before its run may end.
pub(crate) const CALM_COMMITS: usize = 2;

/// How long things may take once the calm has begun.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Longest a request may wait for its answer.
    pub wait_us_max: u64,
    /// Longest a client may go without an acknowledged commit.
    pub commit_us_max: u64,
}

/// One client's progress in the calm.
#[derive(Debug, Clone, Copy, Default)]
struct ClientClock {
    /// When its request now in flight was sent (`None`: nothing in flight).
    asked_at: Option<u64>,
    /// When it last committed, or the calm began.
    committed_at: u64,
    /// Commits acknowledged in the calm.
    commits: usize,
}

/// Every client's progress in the calm, and the check of it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    /// When the calm began (`None`: the faults still last, or the cluster has not settled).
    from: Option<u64>,
    clients: Vec<ClientClock>,
    /// The longest wait for an answer seen in the calm.
    pub wait_us_seen: u64,
    /// The longest a client went without a commit in the calm.
    pub commit_us_seen: u64,
}

impl Progress {
    /// The calm begins at `now` for `clients` clients.
    pub fn begin(&mut self, now: u64, clients: usize) {
        self.from = Some(now);
        self.clients = vec![ClientClock { committed_at: now, ..ClientClock::default() }; clients];
    }

    /// When the calm began, if it has.
    pub fn from(&self) -> Option<u64> {
        self.from
    }

    /// Whether the calm has begun.
    pub fn calm(&self) -> bool {
        self.from.is_some()
    }

    /// Client `c` sent a request at `now` (its earlier one, if any, is answered).
    pub fn asked(&mut self, c: usize, now: u64) {
        if let Some(k) = self.clients.get_mut(c) {
            k.asked_at = Some(now);
        }
    }

    /// Client `c` got its answer (it waits for nothing now).
    pub fn answered(&mut self, c: usize) {
        if let Some(k) = self.clients.get_mut(c) {
            k.asked_at = None;
        }
    }

    /// Client `c`'s commit was acknowledged at `now`.
    pub fn committed(&mut self, c: usize, now: u64) {
        if let Some(k) = self.clients.get_mut(c) {
            k.committed_at = now;
            k.commits += 1;
        }
    }

    /// Whether client `c` still has calm commits to make (always before the calm).
    pub fn wants_more(&self, c: usize) -> bool {
        self.clients.get(c).is_none_or(|k| k.commits < CALM_COMMITS)
    }

    /// Whether every client has made its calm commits.
    pub fn all_done(&self) -> bool {
        self.calm() && self.clients.iter().all(|k| k.commits >= CALM_COMMITS)
    }

    /// Checks the bounds at `now`; `who` names a client in a violation.
    pub fn check(
        &mut self,
        now: u64,
        b: Bounds,
        who: impl Fn(usize) -> String,
    ) -> Result<(), Violation> {
        let Some(from) = self.from else { return Ok(()) };
        for (c, k) in self.clients.iter().enumerate() {
            if let Some(asked) = k.asked_at {
                let waited = now - asked;
                self.wait_us_seen = self.wait_us_seen.max(waited);
                if waited > b.wait_us_max {
                    return Err(Violation(format!(
                        "liveness: {} has waited {waited} us for an answer (asked at {asked} us) in a fault-free run since {from} us (bound {} us)",
                        who(c),
                        b.wait_us_max
                    )));
                }
            }
            if k.commits < CALM_COMMITS {
                let without = now - k.committed_at;
                self.commit_us_seen = self.commit_us_seen.max(without);
                if without > b.commit_us_max {
                    return Err(Violation(format!(
                        "liveness: {} has not committed for {without} us of a fault-free run since {from} us ({} of {CALM_COMMITS} calm commits; bound {} us)",
                        who(c),
                        k.commits,
                        b.commit_us_max
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds { wait_us_max: 100, commit_us_max: 1_000 };

    #[test]
    fn nothing_is_checked_before_the_calm() {
        let mut p = Progress::default();
        p.asked(0, 0);
        assert!(p.check(1_000_000, B, |c| format!("client {c}")).is_ok());
        assert!(p.wants_more(0) && !p.all_done());
    }

    #[test]
    fn a_request_unanswered_past_its_bound_is_a_violation() {
        let mut p = Progress::default();
        p.begin(10, 2);
        p.asked(1, 20);
        assert!(p.check(120, B, |c| format!("client {c}")).is_ok());
        let v = p.check(121, B, |c| format!("client {c}")).unwrap_err();
        assert!(v.0.contains("liveness: client 1 has waited 101 us"), "{v}");
        p.answered(1);
        assert!(p.check(200, B, |c| format!("client {c}")).is_ok());
        assert_eq!(p.wait_us_seen, 101);
    }

    #[test]
    fn a_client_without_a_commit_past_its_bound_is_a_violation_until_it_is_done() {
        let mut p = Progress::default();
        p.begin(0, 1);
        p.committed(0, 900);
        assert!(p.check(1_900, B, |c| format!("client {c}")).is_ok());
        assert!(p.check(1_901, B, |c| format!("client {c}")).unwrap_err().0.contains("1 of 2"));
        p.committed(0, 1_901);
        assert!(p.all_done() && !p.wants_more(0));
        // Done: its later silence is no violation.
        assert!(p.check(1_000_000, B, |c| format!("client {c}")).is_ok());
    }
}
