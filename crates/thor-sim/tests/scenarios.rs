//! The hand-written scenarios of `tests/scenarios/` (`thor_sim::script`): each script sets up
//! real server cores, steps their messages, crashes and restarts explicitly, and its golden
//! output shows what the client was told and each server's state. Each test is named after the
//! behaviour its script shows (the simulation-level versions of thor-server-core's scenario
//! tests of the same names). `UPDATE_GOLDENFILES=1 cargo test -p thor-sim --test scenarios`
//! rewrites the output after a change in behaviour; review the diff.

use thor_sim::script::Scenario;

fn script(name: &str) {
    let path = format!("{}/tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    goldenscript::run(&mut Scenario::default(), &path).expect("the script runs");
}

#[test]
fn early_no_vote_aborts_at_once() {
    script("early_no_vote_aborts_at_once");
}

#[test]
fn restarted_coordinator_presumes_abort() {
    script("restarted_coordinator_presumes_abort");
}

#[test]
fn restart_serves_without_a_refusal_window() {
    script("restart_serves_without_a_refusal_window");
}

#[test]
fn a_restarted_participant_learns_the_outcome_by_asking() {
    script("a_restarted_participant_learns_the_outcome_by_asking");
}
