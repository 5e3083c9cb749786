//! A driver that fsyncs the journal itself (`Replica::ready`, then its own flush of
//! `RaftLog::shared_journal`, then `Replica::persisted`): a vote leaves only once the flush that
//! holds it returned, and a stale durable LSN hands out nothing.

use std::sync::Arc;

use raft::eraftpb::{Message, MessageType};
use thor_core::Lsn;
use thor_replica::{RaftLog, Replica, ReplicaConfig, journal_options};
use thor_storage::{Disk, MemDisk};

#[test]
fn a_vote_leaves_only_after_the_drivers_fsync_covers_it() {
    let disk = Arc::new(MemDisk::new()) as Arc<dyn Disk>;
    let log = RaftLog::bootstrap(disk, journal_options(), &[1, 2, 3]).expect("bootstraps");
    let journal = log.shared_journal();
    let mut r = Replica::open(ReplicaConfig::new(2, 7), log).expect("opens");
    let ask = Message {
        msg_type: MessageType::MsgRequestVote,
        from: 1,
        to: 2,
        term: 2,
        ..Message::default()
    };
    r.step(ask).expect("a peer's vote request");
    let fx = r.ready().expect("journals");
    let vote = |fx: &thor_replica::Effects| {
        fx.messages.iter().any(|m| m.msg_type == MessageType::MsgRequestVoteResponse && !m.reject)
    };
    assert!(!vote(&fx), "no vote before the journal holds it durably: {:?}", fx.messages);
    assert!(fx.needs_sync && r.needs_sync());
    let before = journal.durable_lsn();
    // A durable LSN from before the vote was journalled covers nothing new.
    let stale = r.persisted(before).expect("nothing to report");
    assert!(!vote(&stale) && r.needs_sync());
    journal.flush().expect("the driver's fsync");
    assert!(journal.durable_lsn() > before);
    let fx = r.persisted(journal.durable_lsn()).expect("reports");
    assert!(vote(&fx), "the vote leaves once durable: {:?}", fx.messages);
    assert!(!r.needs_sync());
    assert_eq!(r.persisted(Lsn(u64::MAX - 1)).expect("idempotent").messages.len(), 0);
}
