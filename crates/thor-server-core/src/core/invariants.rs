//! The relations that hold between any two steps of a [`Core`], asserted.
//!
//! [`Core::check_invariants`] runs after every step in debug builds (from [`Core::step`]) and
//! in the simulation (thor-sim calls it after each step of every server, in release builds
//! too). Each concern asserts its own state (`Store`, `Cc`, `Demotions`, two-phase commit, the
//! MOB, the page cache); this file asserts what ties them to `Core`'s own fields:
//!
//! - LSNs: the durable LSN lies below the next; prepared commits and plain records lie in LSN
//!   order between them; the checkpoint is not past the next LSN (`Store`).
//! - Budgets equal their sums: unsynced log bytes, the MOB cost of prepared commits, the MOB's
//!   bytes, two-phase commit's held bytes, demotion's record count.
//! - Every prepared one-phase commit has exactly one origin and one timestamp, and every
//!   origin belongs to a prepared commit (so every client gets exactly one answer).
//! - Held refusals: at most one per connection, each waiting for an LSN already appended.
//! - A failed core holds nothing prepared and nothing queued (all were answered).
//! - Queue bounds: the commit queue holds at most what the sessions may have in flight, and a
//!   commit waiting for pages waits for reads that are outstanding.
//! - Directories cover the pages sent: every page a client holds by demotion's records is in
//!   its concurrency-control directory (so an invalidation reaches it).
//!
//! Every relation is asserted after every step. Two of them walk structures that grow with the
//! load (the MOB's entries; demotion's record of every page sent, each looked up in a
//! directory) and that most steps leave as they were, so those walks are skipped when what
//! they would walk has not changed since a walk that passed: the MOB and demotion count their
//! changes (every method that takes `&mut self`), and concurrency control counts changes to its
//! directories. A walk's verdict depends on nothing else, so skipping it never lets a broken
//! state pass. (The other choice, a full walk every k-th step, would let a relation broken for
//! fewer than k steps go unseen.)

use rustc_hash::FxHashSet;
use thor_core::Lsn;

use super::{Core, Origin};

impl Core {
    /// Asserts the invariants of the module documentation; panics, naming the one broken.
    pub fn check_invariants(&self) {
        self.store.check_invariants();
        self.cc.check_invariants();
        self.demotions.check_invariants(self.cc.directory_changes(), |conn, page| {
            self.cc.directory_has(conn, page)
        });
        self.twopc_check_invariants();
        self.fair_check_invariants();
        self.check_prepared();
        self.check_queue();
        if self.failed.is_some() {
            assert!(
                self.store.pending().is_empty(),
                "a failed core abandoned its prepared commits"
            );
            assert!(self.queue.is_empty(), "a failed core answered its queue");
        }
        if let Some(r) = &self.round {
            assert!(r.job < self.next_job, "the round's job id was handed out");
        }
    }

    /// Origins and timestamps of prepared one-phase commits, and held refusals.
    fn check_prepared(&self) {
        // Prepared commits are in LSN order (`Store::check_invariants`): found by binary search.
        let pending = self.store.pending();
        let plain = |lsn: &Lsn| {
            pending.binary_search_by_key(lsn, |p| p.lsn).is_ok_and(|i| !pending[i].held)
        };
        let mut n_plain = 0;
        for p in pending.iter().filter(|p| !p.held) {
            assert!(
                self.prepared_origin.contains_key(&p.lsn),
                "the commit at {:?} has an origin",
                p.lsn
            );
            n_plain += 1;
        }
        assert_eq!(self.prepared_origin.len(), n_plain, "every origin waits for a prepared commit");
        for lsn in self.prepared_cc.keys() {
            assert!(plain(lsn), "the timestamp at {lsn:?} is a prepared commit's");
        }
        for (lsn, leaves) in &self.prepared_merged {
            assert!(self.prepared_cc.contains_key(lsn), "merged leaves at {lsn:?} are prepared");
            assert!(!leaves.is_empty(), "a commit recorded as merged merged a leaf");
        }
        let mut conns = FxHashSet::default();
        for (lsn, origin, _) in &self.held_refusals {
            assert!(*lsn < self.store.next_lsn(), "a held refusal waits for an appended LSN");
            if let Origin::Conn { conn, .. } = origin {
                assert!(conns.insert(*conn), "at most one held refusal per connection");
            }
        }
    }

    /// The commit queue: bounded by the sessions' requests in flight, and every page a queued
    /// commit waits for is being read.
    fn check_queue(&self) {
        let bound = (self.cfg.protocol.sessions_max + crate::limits::CLOSING_SESSIONS_MAX)
            * thor_wire::limits::IN_FLIGHT_MAX
            + 1;
        assert!(self.queue.len() <= bound, "the commit queue within its bound");
        for q in &self.queue {
            for page in &q.waiting_for {
                assert!(
                    self.reads.contains_key(page),
                    "a queued commit waits for a read of {page}"
                );
            }
        }
    }
}
