//! Which protocol version each message, section and code needs: one table, which the server
//! enforces and the client follows.
//!
//! Two peers agree on a version in the handshake (`Hello` gives the client's range, `HelloOk`
//! the version chosen: the highest both speak). From then on either side may send only what
//! that version has: a message type, a frame flag or a reply code that came with a later
//! version is outside the connection's language. A server answers a request outside it with
//! `Error(UnknownType)` and closes the connection, exactly as it answers a type number it
//! has never heard of: to a version-1 connection, `Prefetch` *is* an unknown type. It never
//! sends a client a code newer than the connection's version either: it sends the nearest
//! older code that tells the client what to do ([`crate::ErrorCode::since`],
//! [`crate::RefusedCode::since`]).
//!
//! | version | added |
//! |---|---|
//! | 1 | `Hello`, `Fetch`, `Commit`, `Abort`, `Stats`, `Goodbye`, `Backup`; the page-based commit modes' `PageRecords` and `PageCommit` (a client learns a page mode from `HelloOk`'s flags, which every version carries, and a server in `obj` mode refuses them in any version) |
//! | 2 | demotion: the frame flag [`crate::frame::FLAG_DEMOTION`] and the piggyback's demotion sections |
//! | 3 | two-phase commit: `Prepare`, `Peer`, the reply `Prepared`, the refusal `Aborted` |
//! | 4 | prefetch: `Prefetch` and the reply `Pages` |
//! | 5 | scoped credentials: `Error(Forbidden)`, the refusal `UnknownServer`; resuming a session: `Resume`, `CommitWithId`, the reply `Resumed` and the frame flag `FLAG_SEEN` on replies (`crate::resume`) |
//! | 6 | the contention report on requests: the frame flag [`crate::frame::FLAG_CONTENTION`] and its section (`crate::contention`) |
//! | 7 | the settled bit of a reply's seen section (`crate::resume::Seen::settled`): read-only transactions commit at the client; a coordinator's request for a missing vote: the peer message `AskVote` (`crate::twopc`) |
//! | 8 | a commit's leaf deltas: the frame flag [`crate::frame::FLAG_LEAF_DELTAS`] and its section after a `Commit`'s body (`crate::leafdelta`) |
//! | 9 | replica groups: `Error(NotLeader)`: a replica that does not lead its group turns a client away, naming the leader in the message (`crate::code::not_leader_hint`) |
//! | 10 | between the replicas of a group (`crate::replica`): `Raft` (a Raft message), `ImageBegin`, `ImageChunk`, `ImageEnd` (copying a database image) and the replies `Image`, `ImageTooOld`, `Chunk`; sent only on a peer session of the group's own credential |

use crate::limits::{WIRE_VERSION, WIRE_VERSION_MIN};
use crate::message::{Request, kind};

/// The version that added demotion (the frame flag and the piggyback's demotion sections).
pub const VERSION_DEMOTION: u16 = 2;
/// The version that added two-phase commit (`Prepare`, `Peer`, `Prepared`, `Aborted`).
pub const VERSION_TWO_PHASE: u16 = 3;
/// The version that added prefetch (`Prefetch`, `Pages`).
pub const VERSION_PREFETCH: u16 = 4;
/// The version that added scoped credentials' codes (`Forbidden`, `UnknownServer`).
pub const VERSION_SCOPES: u16 = 5;
/// The version that added resuming a session (`Resume`, `CommitWithId`, `Resumed`, the seen
/// section of replies): the same as [`VERSION_SCOPES`], both came in one release.
pub const VERSION_RESUME: u16 = 5;
/// The version that added the contention report on requests (the frame flag
/// [`crate::frame::FLAG_CONTENTION`], `crate::contention`).
pub const VERSION_CONTENTION: u16 = 6;
/// The version that added the settled bit of a reply's seen section
/// ([`crate::resume::Seen::settled`]), on which a client commits a read-only transaction
/// without a message.
pub const VERSION_SETTLED: u16 = 7;
/// The version that added the peer message `AskVote` (a coordinator asks a participant for
/// its missing vote, `crate::twopc`). A server sends it only to peers whose session agreed
/// on it; an older peer's vote is waited for until the vote timeout, as before.
pub const VERSION_ASK_VOTE: u16 = 7;
/// The version that added a commit's leaf deltas (the frame flag
/// [`crate::frame::FLAG_LEAF_DELTAS`], `crate::leafdelta`). A client sends them only on
/// connections that agreed on it; a client of an older connection leaves them out, and the
/// server validates the commit as before.
pub const VERSION_LEAF_DELTAS: u16 = 8;
/// The version that added replica groups' reply `Error(NotLeader)`: a replica that does not
/// lead its group turns a client away with the leader's id (`crate::code::not_leader_message`).
/// On an older connection it sends `ShuttingDown` instead (closes too: reconnect elsewhere).
pub const VERSION_GROUPS: u16 = 9;
/// The version that added the requests between the replicas of a group (`crate::replica`):
/// `Raft`, `ImageBegin`, `ImageChunk`, `ImageEnd` and their replies. A replica sends them
/// only on connections that agreed on it.
pub const VERSION_REPLICA_LINKS: u16 = 10;

/// Every request type and the version that added it.
pub const REQUEST_VERSIONS: [(u16, u16); 18] = [
    (kind::HELLO, 1),
    (kind::FETCH, 1),
    (kind::COMMIT, 1),
    (kind::ABORT, 1),
    (kind::STATS, 1),
    (kind::GOODBYE, 1),
    (kind::BACKUP, 1),
    (kind::PAGE_RECORDS, 1),
    (kind::PAGE_COMMIT, 1),
    (kind::PREPARE, VERSION_TWO_PHASE),
    (kind::PEER, VERSION_TWO_PHASE),
    (kind::PREFETCH, VERSION_PREFETCH),
    (kind::RESUME, VERSION_RESUME),
    (kind::COMMIT_WITH_ID, VERSION_RESUME),
    (kind::RAFT, VERSION_REPLICA_LINKS),
    (kind::IMAGE_BEGIN, VERSION_REPLICA_LINKS),
    (kind::IMAGE_CHUNK, VERSION_REPLICA_LINKS),
    (kind::IMAGE_END, VERSION_REPLICA_LINKS),
];

/// The version that added request type `kind`, or `None` for a number that is no request.
pub const fn request_version(kind: u16) -> Option<u16> {
    let mut i = 0;
    while i < REQUEST_VERSIONS.len() {
        if REQUEST_VERSIONS[i].0 == kind {
            return Some(REQUEST_VERSIONS[i].1);
        }
        i += 1;
    }
    None
}

impl Request {
    /// The oldest version in which this request can be sent: its type's, or demotion's if its
    /// piggyback carries demotion sections, or the contention report's if it carries one.
    pub fn version_needed(&self) -> u16 {
        let body = request_version(self.body.kind()).expect("every request type is in the table");
        let body = match &self.body {
            crate::message::RequestBody::Peer(m) => body.max(m.version_needed()),
            _ => body,
        };
        let body = match &self.body {
            crate::message::RequestBody::Commit(c) if !c.leaves.is_empty() => {
                body.max(VERSION_LEAF_DELTAS)
            }
            _ => body,
        };
        let body = if self.piggyback.has_demotions() { body.max(VERSION_DEMOTION) } else { body };
        if self.piggyback.contention.is_some() { body.max(VERSION_CONTENTION) } else { body }
    }
}

const _: () = {
    let mut i = 0;
    while i < REQUEST_VERSIONS.len() {
        let v = REQUEST_VERSIONS[i].1;
        assert!(v >= WIRE_VERSION_MIN && v <= WIRE_VERSION);
        i += 1;
    }
};
const _: () = assert!(VERSION_DEMOTION < VERSION_TWO_PHASE);
const _: () = assert!(VERSION_TWO_PHASE < VERSION_PREFETCH);
const _: () = assert!(VERSION_PREFETCH < VERSION_SCOPES);
const _: () = assert!(VERSION_SCOPES <= WIRE_VERSION);
const _: () = assert!(VERSION_PREFETCH < VERSION_RESUME && VERSION_RESUME <= WIRE_VERSION);
const _: () = assert!(VERSION_RESUME < VERSION_CONTENTION && VERSION_CONTENTION <= WIRE_VERSION);
const _: () = assert!(VERSION_CONTENTION < VERSION_SETTLED && VERSION_SETTLED <= WIRE_VERSION);
const _: () = assert!(VERSION_CONTENTION < VERSION_ASK_VOTE && VERSION_ASK_VOTE <= WIRE_VERSION);
const _: () =
    assert!(VERSION_ASK_VOTE < VERSION_LEAF_DELTAS && VERSION_LEAF_DELTAS <= WIRE_VERSION);
const _: () =
    assert!(VERSION_GROUPS < VERSION_REPLICA_LINKS && VERSION_REPLICA_LINKS <= WIRE_VERSION);

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use thor_core::{PageId, ServerId};

    use super::*;
    use crate::message::RequestBody;
    use crate::replica::ReplicaRequest;
    use crate::{Commit, Hello, PageCommit, PageRecords, PeerMsg, Prefetch, PrefetchHint, Stamp};

    fn every_body() -> Vec<RequestBody> {
        let stamp = Stamp { time_us: 1, tie: crate::CLIENT_TIE_BIT };
        let prepare = crate::Prepare {
            stamp,
            coordinator: None,
            participants: vec![],
            commit: Commit::default(),
        };
        vec![
            RequestBody::Hello(Hello::new(&b""[..], "t")),
            RequestBody::Fetch { page: PageId::FIRST },
            RequestBody::Prefetch(Prefetch {
                page: PageId::FIRST,
                extra: 1,
                hint: PrefetchHint::Following,
            }),
            RequestBody::Commit(Commit::default()),
            RequestBody::PageRecords(PageRecords { txn: 1, records: vec![], pages: vec![] }),
            RequestBody::PageCommit(PageCommit {
                txn: 1,
                mode: 1,
                reads: vec![],
                writes: vec![],
                created: vec![],
                records: vec![],
                pages: vec![],
            }),
            RequestBody::Abort,
            RequestBody::Stats,
            RequestBody::Goodbye,
            RequestBody::Backup { path: "b".into() },
            RequestBody::Prepare(Box::new(prepare)),
            RequestBody::Peer(PeerMsg::Query { stamp, from: ServerId(2) }),
            RequestBody::Resume(crate::Resume { key: 1, seen: None, commit: None, pages: vec![] }),
            RequestBody::Commit(Commit { id: Some(7), ..Commit::default() }),
            RequestBody::Replica(ReplicaRequest::Raft(crate::RaftMsg {
                group: ServerId(1),
                from: 1,
                to: 2,
                msg: Bytes::new(),
            })),
            RequestBody::Replica(ReplicaRequest::ImageBegin { min_lsn: thor_core::Lsn(1) }),
            RequestBody::Replica(ReplicaRequest::ImageChunk {
                image: 1,
                file: crate::ImageFile::Pages,
                offset: 0,
            }),
            RequestBody::Replica(ReplicaRequest::ImageEnd { image: 1 }),
        ]
    }

    #[test]
    fn every_request_type_has_one_version() {
        let bodies = every_body();
        assert_eq!(bodies.len(), REQUEST_VERSIONS.len());
        for (i, b) in bodies.iter().enumerate() {
            assert!(request_version(b.kind()).is_some(), "{} is in the table", b.name());
            assert!(bodies[..i].iter().all(|o| o.kind() != b.kind()), "{} listed once", b.name());
        }
        assert_eq!(request_version(0x0077), None);
        assert_eq!(request_version(kind::PAGE), None, "a reply is no request");
    }

    #[test]
    fn newer_messages_need_their_version() {
        let need = |b: RequestBody| Request::new(b).version_needed();
        let v: Vec<(&str, u16)> = every_body().into_iter().map(|b| (b.name(), need(b))).collect();
        for (name, version) in v {
            let want = match name {
                "Prepare" | "Peer" => 3,
                "Prefetch" => 4,
                "Resume" | "CommitWithId" => 5,
                "Raft" | "ImageBegin" | "ImageChunk" | "ImageEnd" => 10,
                _ => 1,
            };
            assert_eq!(version, want, "{name}");
        }
        let mut demoting = Request::new(RequestBody::Fetch { page: PageId::FIRST });
        demoting.piggyback.demoted = vec![PageId::FIRST];
        assert_eq!(demoting.version_needed(), VERSION_DEMOTION);
        demoting.piggyback.demoted.clear();
        demoting.piggyback.demoted_pages = vec![(PageId::FIRST, Bytes::from(vec![0; 4096]))];
        assert_eq!(demoting.version_needed(), VERSION_DEMOTION);
        let mut reporting = Request::new(RequestBody::Fetch { page: PageId::FIRST });
        reporting.piggyback.contention =
            Some(crate::Contention { retries: 1, ..crate::Contention::default() });
        assert_eq!(reporting.version_needed(), VERSION_CONTENTION);
        let stamp = Stamp { time_us: 1, tie: crate::CLIENT_TIE_BIT };
        let ask = Request::new(RequestBody::Peer(PeerMsg::AskVote { stamp, from: ServerId(2) }));
        assert_eq!(ask.version_needed(), VERSION_ASK_VOTE);
        let delta = crate::LeafDelta { leaf: thor_core::builtin::ROOT, ..Default::default() };
        let merging = Commit { leaves: vec![delta], ..Commit::default() };
        let merging = Request::new(RequestBody::Commit(merging));
        assert_eq!(merging.version_needed(), VERSION_LEAF_DELTAS);
    }
}
