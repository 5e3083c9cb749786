//! Deliberately broken protocols (issue 31, item 6), kept to prove that the simulation can
//! fail: each [`Mutant`] switches off one thing the core's correctness rests on, and thor-sim's
//! `tests/mutants.rs` asserts that its checkers catch each within a bounded number of seeds.
//!
//! Only the `mutants` cargo feature (test-only: thor-sim's `mutants` feature turns it on)
//! offers [`Core::set_mutant`]; without it no mutant can be chosen, and every check of one is
//! a constant `false`.

/// One deliberately broken protocol. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// Concurrency control accepts every commit: no read set, rule or threshold is checked.
    ValidationOff,
    /// A commit that read or wrote a copy its client was told is stale (its invalid set) is
    /// not refused for it.
    InvalidSetOff,
    /// Rule 1 off: a commit that read or wrote an object a transaction still committing with
    /// an earlier timestamp writes is not refused for it.
    Rule1Off,
    /// A two-phase coordinator decides commit once its own part is prepared, without waiting
    /// for the other writers' votes.
    CoordinatorSkipsVotes,
    /// A two-phase participant acknowledges the commit decision before its own decision
    /// record is durable (so the coordinator may forget the transaction while the
    /// participant can still lose its decision in a crash).
    ParticipantAcksEarly,
    /// A two-phase coordinator drops a participant's no vote that arrives before the client's
    /// prepare (issue 32's first cause of stalls): safe, but the coordinator then prepares its
    /// own part and holds it until the vote timeout. Only a liveness check can catch it.
    CoordinatorDropsEarlyNo,
}

#[cfg(feature = "mutants")]
impl crate::Core {
    /// Breaks this core's protocol as `m` says (tests only).
    pub fn set_mutant(&mut self, m: Mutant) {
        self.set_mutant_inner(m);
    }
}
