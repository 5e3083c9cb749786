//! Deliberately broken replicas that the harness's checks must catch: proof that the checks
//! can fail. Its own test binary, because it silences the panic hook while it looks for a
//! failing seed.

mod common;

use common::run_with;
use thor_replica::Mutant;

/// The checks can fail: replicas that report entries persisted before syncing them (so a
/// follower acknowledges what a crash then loses) are caught by the harness's checks (not
/// only by raft-rs's own assertions, which such a follower also trips) within a bounded
/// number of seeds.
#[test]
fn report_before_sync_mutant_is_caught() {
    const SEEDS_MAX: u64 = 2_000;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = (0..SEEDS_MAX).find_map(|seed| {
        let err =
            std::panic::catch_unwind(|| run_with(seed, Some(Mutant::ReportBeforeSync))).err()?;
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        // The harness's checks name the seed first; raft-rs's own panics do not.
        msg.starts_with(&format!("seed {seed} ")).then_some((seed, msg))
    });
    std::panic::set_hook(hook);
    let (seed, msg) =
        caught.unwrap_or_else(|| panic!("no seed below {SEEDS_MAX} caught the mutant"));
    println!("mutant caught by seed {seed}: {msg}");
}
