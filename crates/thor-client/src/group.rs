//! A server that is a replica group: the client finds the group's leader by itself.
//!
//! A replicated thor server is a group of replicas (`thor server --replica-id N --group
//! ID=ADDR,...`); only the group's leader serves sessions. A replica that does not lead turns a
//! session away with `Error(NotLeader)` (wire version 9) and closes the connection; its
//! message names the replica it believes leads, if it knows one
//! ([`thor_wire::not_leader_hint`]). A [`GroupDialer`] knows every replica's id and how to
//! reach it, and a session made with one ([`crate::Session::connect_group`],
//! `thor::connect_group`) goes where the group's answers send it:
//!
//! ```text
//!   dial the last replica that served (at first: the first one given)
//!     ├─ HelloOk, Resume answered ──► serves: remembered as the leader
//!     ├─ Error(NotLeader), names replica B of the group ──► B next, without waiting
//!     │                                                     (once in a row; then backoff)
//!     ├─ Error(NotLeader), names nobody (or itself, or a stranger) ──► the next replica
//!     └─ refused, reset, timed out ──► the next replica
//! ```
//!
//! The same happens when a serving connection breaks or a request is answered with
//! `Error(NotLeader)` (a leader that lost its group): the session reconnects
//! ([`crate::session::reconnect`]) starting with the replica that served (it may only have
//! restarted), resumes there and learns the outcome of a commit whose answer was lost, exactly
//! as after a broken connection to a single server. Every attempt after a failed one waits
//! the reconnect's jittered exponential backoff, and all of them together at most
//! [`crate::ReconnectConfig::give_up_after`]; a session whose group served nobody within that
//! fails the call with [`ClientError::NoLeader`] (the next call tries again). An application
//! never sees `NotLeader` itself.
//!
//! [`Route`] is the choice of the next replica alone (no I/O, no clock), so that it is tested
//! beside its code; [`GroupDialer`] adds the dialing.
//!
//! # Writing a group
//!
//! A server's address, wherever thor takes one (`thor::connect_group`, `thor::connect_cluster`,
//! `thor bench transfer-client --connect`, `thor bench cluster-client --server`), is either one
//! address (`HOST:PORT`, `unix:PATH`) or a group: its replicas as `ID=ADDR` separated by commas,
//! the ids those `thor server --replica-id` was given, e.g. `1=db1:7400,2=db2:7400,3=db3:7400`
//! ([`ServerAddr::parse`]). The order is the order of the first attempts.

use thor_wire::{ErrorCode, Transport, TransportError};

use crate::error::ClientError;
use crate::limits::GROUP_REPLICAS_MAX;

/// Opens a connection to one replica of a group (the handshake included).
pub type ReplicaDialer = Box<dyn FnMut() -> Result<Box<dyn Transport>, ClientError> + Send>;

/// One replica of a group: its id (`thor server --replica-id`, the id `Error(NotLeader)`
/// names) and how to connect to it.
pub struct Replica {
    /// The replica's id in its group.
    pub id: u64,
    /// Opens a connection to it.
    pub dial: ReplicaDialer,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.id).finish_non_exhaustive()
    }
}

/// A server's address as written by a user: one address, or a replica group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    /// One address (`HOST:PORT`, `unix:PATH`), passed on as written.
    One(String),
    /// A replica group: each replica's id and address, in the order given.
    Group(Vec<(u64, String)>),
}

impl ServerAddr {
    /// Reads `spec`: a group if it starts with a number followed by `=`
    /// (`1=db1:7400,2=db2:7400`), one address otherwise. A group's every piece must be
    /// `ID=ADDR` with a distinct id, at most [`GROUP_REPLICAS_MAX`] of them; the error says
    /// what is wrong.
    pub fn parse(spec: &str) -> Result<ServerAddr, String> {
        let spec = spec.trim();
        let first = spec.split(',').next().unwrap_or("");
        let is_group = first.split_once('=').is_some_and(|(id, _)| {
            !id.trim().is_empty() && id.trim().bytes().all(|b| b.is_ascii_digit())
        });
        if !is_group {
            if spec.is_empty() {
                return Err("an empty address".into());
            }
            return Ok(ServerAddr::One(spec.to_string()));
        }
        let mut replicas: Vec<(u64, String)> = Vec::new();
        for piece in spec.split(',') {
            let Some((id, addr)) = piece.split_once('=') else {
                return Err(format!(
                    "{piece:?} is not ID=ADDR: a group is written 1=HOST:PORT,2=HOST:PORT,..."
                ));
            };
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| format!("replica id {:?} is not a number", id.trim()))?;
            let addr = addr.trim();
            if addr.is_empty() {
                return Err(format!("replica {id} has no address"));
            }
            if replicas.iter().any(|(r, _)| *r == id) {
                return Err(format!("replica {id} is named twice"));
            }
            if replicas.len() == GROUP_REPLICAS_MAX {
                return Err(format!("a group has at most {GROUP_REPLICAS_MAX} replicas"));
            }
            replicas.push((id, addr.to_string()));
        }
        Ok(ServerAddr::Group(replicas))
    }
}

/// Where the next attempt goes: the choice of replica, without I/O.
///
/// Invariants: `next` and `last` index `ids`; `leader`, when set, is the replica whose
/// connection served last.
#[derive(Debug, Clone)]
pub struct Route {
    ids: Vec<u64>,
    /// The replica to dial next.
    next: usize,
    /// The replica dialed last: the connection's, once it serves.
    last: usize,
    /// The replica that served last.
    leader: Option<usize>,
    /// `Error(NotLeader)` answers met.
    redirects: u64,
    /// Connections that served at another replica than the one that served before.
    failovers: u64,
}

/// What an attempt that failed means for the next one ([`Route::failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The replica turned the session away naming another replica of the group as leader:
    /// the next attempt goes there, and need not wait.
    Redirected,
    /// Any other failure: the next attempt goes to the next replica, after the backoff.
    Another,
}

impl Route {
    /// A route over the replicas `ids` (distinct, at least one), the first tried first.
    pub fn new(ids: Vec<u64>) -> Route {
        assert!(!ids.is_empty(), "a group has a replica");
        Route { ids, next: 0, last: 0, leader: None, redirects: 0, failovers: 0 }
    }

    /// The replica to dial now (its index in the ids given); it becomes the one dialed last.
    pub fn target(&mut self) -> usize {
        self.last = self.next;
        self.next
    }

    /// The id of the replica dialed last.
    pub fn last_id(&self) -> u64 {
        self.ids[self.last]
    }

    /// The id of the replica that served last, if any did.
    pub fn leader_id(&self) -> Option<u64> {
        self.leader.map(|i| self.ids[i])
    }

    /// The connection to the replica dialed last serves: it is the leader, and the first to
    /// try after a break.
    pub fn served(&mut self) {
        if self.leader.is_some_and(|l| l != self.last) {
            self.failovers += 1;
        }
        self.leader = Some(self.last);
        self.next = self.last;
    }

    /// The attempt at the replica dialed last (or its serving connection) failed with `e`.
    pub fn failed(&mut self, e: &ClientError) -> Next {
        let Some(hint) = not_leader(e) else {
            self.next = (self.last + 1) % self.ids.len();
            return Next::Another;
        };
        self.redirects += 1;
        match hint.and_then(|h| self.ids.iter().position(|&id| id == h)).filter(|&j| j != self.last)
        {
            Some(j) => {
                self.next = j;
                Next::Redirected
            }
            None => {
                self.next = (self.last + 1) % self.ids.len();
                Next::Another
            }
        }
    }

    /// `Error(NotLeader)` answers met.
    pub fn redirects(&self) -> u64 {
        self.redirects
    }

    /// Connections that served at another replica than the one before.
    pub fn failovers(&self) -> u64 {
        self.failovers
    }
}

/// Whether `e` is a replica's `Error(NotLeader)` (at the handshake, or answering a request),
/// and the leader it names (`None` inside: it names none).
pub fn not_leader(e: &ClientError) -> Option<Option<u64>> {
    match e {
        ClientError::Transport(TransportError::Refused { code: ErrorCode::NotLeader, message })
        | ClientError::Server { code: ErrorCode::NotLeader, message } => {
            Some(thor_wire::not_leader_hint(message))
        }
        ClientError::CommitUnknown(inner) => not_leader(inner),
        _ => None,
    }
}

/// Dials a server's replica group, going where its answers send it ([`Route`]).
pub struct GroupDialer {
    replicas: Vec<Replica>,
    route: Route,
}

impl std::fmt::Debug for GroupDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupDialer").field("route", &self.route).finish_non_exhaustive()
    }
}

impl GroupDialer {
    /// A dialer over `replicas` (at least one, at most [`GROUP_REPLICAS_MAX`], distinct ids),
    /// the first tried first.
    pub fn new(replicas: Vec<Replica>) -> Result<GroupDialer, ClientError> {
        if replicas.is_empty() {
            return Err(ClientError::Usage("a replica group needs at least one replica"));
        }
        if replicas.len() > GROUP_REPLICAS_MAX {
            return Err(ClientError::Usage("a replica group has too many replicas"));
        }
        let ids: Vec<u64> = replicas.iter().map(|r| r.id).collect();
        if ids.iter().enumerate().any(|(i, id)| ids[..i].contains(id)) {
            return Err(ClientError::Usage("a replica group names a replica twice"));
        }
        Ok(GroupDialer { replicas, route: Route::new(ids) })
    }

    /// Dials the replica the route says.
    pub fn dial(&mut self) -> Result<Box<dyn Transport>, ClientError> {
        let i = self.route.target();
        (self.replicas[i].dial)()
    }

    /// The route: where the next attempt goes, and its counters.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The route, to tell it how an attempt went.
    pub fn route_mut(&mut self) -> &mut Route {
        &mut self.route
    }

    /// Replicas in the group.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Whether the group has no replica (never: [`GroupDialer::new`] refuses one).
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nl(hint: Option<u64>) -> ClientError {
        ClientError::Transport(TransportError::Refused {
            code: ErrorCode::NotLeader,
            message: thor_wire::not_leader_message(hint),
        })
    }

    fn refused() -> ClientError {
        ClientError::Transport(TransportError::Closed)
    }

    #[test]
    fn parse_tells_a_group_from_one_address() {
        assert_eq!(
            ServerAddr::parse("127.0.0.1:7400"),
            Ok(ServerAddr::One("127.0.0.1:7400".into()))
        );
        assert_eq!(ServerAddr::parse("unix:/tmp/a=b"), Ok(ServerAddr::One("unix:/tmp/a=b".into())));
        assert_eq!(
            ServerAddr::parse(" 1=a:1, 2 = b:2 ,3=[::1]:3"),
            Ok(ServerAddr::Group(vec![
                (1, "a:1".into()),
                (2, "b:2".into()),
                (3, "[::1]:3".into())
            ]))
        );
        for bad in ["1=a:1,b:2", "1=a:1,1=b:2", "1=", "1=a:1,x=b:2", ""] {
            assert!(ServerAddr::parse(bad).is_err(), "{bad}");
        }
        let many: Vec<String> =
            (1..=GROUP_REPLICAS_MAX as u64 + 1).map(|i| format!("{i}=h:{i}")).collect();
        assert!(ServerAddr::parse(&many.join(",")).is_err());
    }

    #[test]
    fn a_hint_naming_a_replica_of_the_group_is_followed() {
        let mut r = Route::new(vec![1, 2, 3]);
        assert_eq!(r.target(), 0);
        assert_eq!(r.failed(&nl(Some(3))), Next::Redirected);
        assert_eq!(r.target(), 2);
        r.served();
        assert_eq!((r.leader_id(), r.redirects(), r.failovers()), (Some(3), 1, 0));
    }

    #[test]
    fn no_hint_a_stranger_or_itself_moves_to_the_next_replica() {
        let mut r = Route::new(vec![1, 2, 3]);
        r.target();
        assert_eq!(r.failed(&nl(None)), Next::Another);
        assert_eq!(r.target(), 1);
        assert_eq!(r.failed(&nl(Some(9))), Next::Another);
        assert_eq!(r.target(), 2);
        assert_eq!(r.failed(&nl(Some(3))), Next::Another, "names itself");
        assert_eq!(r.target(), 0, "wraps around");
        assert_eq!(r.failed(&refused()), Next::Another);
        assert_eq!(r.target(), 1);
        assert_eq!(r.redirects(), 3);
    }

    #[test]
    fn after_a_break_the_last_leader_is_tried_first_and_a_new_one_counts_a_failover() {
        let mut r = Route::new(vec![1, 2, 3]);
        r.target();
        r.failed(&refused());
        assert_eq!(r.target(), 1);
        r.served();
        // The serving connection breaks: the same replica first.
        assert_eq!(r.target(), 1);
        r.failed(&refused());
        assert_eq!(r.target(), 2);
        r.served();
        assert_eq!((r.leader_id(), r.failovers()), (Some(3), 1));
        // A request answered NotLeader by the leader, naming replica 1.
        let e = ClientError::Server {
            code: ErrorCode::NotLeader,
            message: thor_wire::not_leader_message(Some(1)),
        };
        assert_eq!(r.failed(&e), Next::Redirected);
        assert_eq!(r.target(), 0);
    }

    #[test]
    fn not_leader_is_read_from_every_form_it_comes_in() {
        assert_eq!(not_leader(&nl(Some(2))), Some(Some(2)));
        assert_eq!(not_leader(&ClientError::CommitUnknown(Box::new(nl(None)))), Some(None));
        assert_eq!(not_leader(&refused()), None);
        let junk = ClientError::Server { code: ErrorCode::NotLeader, message: "\u{0}x".into() };
        assert_eq!(not_leader(&junk), Some(None));
    }

    #[test]
    fn a_group_dialer_refuses_an_empty_or_repeating_group() {
        let r = |id| Replica { id, dial: Box::new(|| Err(refused())) as ReplicaDialer };
        assert!(GroupDialer::new(vec![]).is_err());
        assert!(GroupDialer::new(vec![r(1), r(1)]).is_err());
        assert_eq!(GroupDialer::new(vec![r(1), r(2)]).unwrap().len(), 2);
    }
}
