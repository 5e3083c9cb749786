//! The messages of a commit across servers (thor-ecoop99 section 4.2), version 3.
//!
//! A transaction that used objects of several servers commits with two-phase commit in the
//! paper's optimized form: the *client* chooses the transaction's timestamp and sends a
//! [`Prepare`] to every participant directly; one read-write participant is the
//! *coordinator*. Each participant validates its part with CLOCC. A read-write participant
//! logs its part as prepared and then votes ([`PeerMsg::Vote`]) to the coordinator; a
//! read-only one votes at once and takes no part in phase two. The coordinator logs the
//! decision, answers the client (three message delays for a read-write transaction) and
//! tells the read-write participants ([`PeerMsg::Decide`]), which acknowledge
//! ([`PeerMsg::DecideAck`]). A transaction that wrote nothing has no coordinator: every
//! participant answers the client directly (two message delays).
//!
//! Peer messages travel as requests on a session one server opens to another with its *peer
//! credential* (the receiver refuses them, `Error(Forbidden)`, on any other session and from
//! a sender other than the credential's server, version 5); they are answered with `Ack` and
//! may be lost, repeated or reordered: every one is idempotent, and
//! timeouts resend what matters (a participant in doubt sends [`PeerMsg::Query`], which is
//! also a repeated yes vote; a coordinator resends an unacknowledged decision; a coordinator
//! still waiting for a vote asks for it with [`PeerMsg::AskVote`], version 7, which a
//! participant with no record of the transaction answers no, refusing the prepare from then
//! on).
//!
//! ```text
//! Prepare   0x0008  +-------------+----------+---------+----------+--------+---------------------------+
//!                   | time_us: u64| tie: u32 | has: u8 | coord u32| N: u16 | N x ( server: u32 | w: u8 )|
//!                   +-------------+----------+---------+----------+--------+---------------------------+
//!                   then the body of a Commit (read set, versions, created objects) for this server.
//!                   tie has bit 31 set (a client's, never a server id); has = 1 if there is a
//!                   coordinator (0: read-only transaction, coord = 0); w = 1 for a participant
//!                   that writes; 2 <= N <= PARTICIPANTS_MAX, servers distinct, this server among
//!                   them, the coordinator a writing participant.
//!
//! Peer      0x0009  +--------+-------------+----------+-----------+---------+
//!                   | op: u8 | time_us: u64| tie: u32 | from: u32 | flag: u8|
//!                   +--------+-------------+----------+-----------+---------+
//!                   op: 1 Vote (flag: 1 yes, 0 no), 2 Decide (flag: 1 commit, 0 abort),
//!                   3 DecideAck (flag 0), 4 Query (flag 0), 5 AskVote (flag 0; version 7)
//!
//! Prepared  0x0088  +--------+------------------------+
//!                   | C: u32 | C created orefs (u32)  |  a participant's answer to Prepare: its part
//!                   +--------+------------------------+  is validated (and, if it writes, durable
//!                                                        as prepared); the coordinator decides
//! ```

use thor_core::ServerId;

use crate::codec::{Put, Reader, check_limit};
use crate::error::WireError;
use crate::limits::PARTICIPANTS_MAX;
use crate::message::Commit;

/// The bit every client-chosen timestamp's tie has set, so that it never equals the tie of a
/// server-chosen timestamp (a server id).
pub const CLIENT_TIE_BIT: u32 = 1 << 31;

/// A transaction's timestamp, its place in the serial order: microseconds of a loosely
/// synchronised clock, then a tie-breaker (a server's id for a timestamp a server chose; a
/// client's random number with [`CLIENT_TIE_BIT`] set for one a client chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Stamp {
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// The tie-breaker.
    pub tie: u32,
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:x}", self.time_us, self.tie)
    }
}

/// One server a transaction used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Participant {
    /// The server.
    pub server: ServerId,
    /// Whether the transaction modified or created objects there.
    pub writes: bool,
}

/// A client's request to prepare its transaction's part at one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare {
    /// The timestamp the client chose; the same at every participant.
    pub stamp: Stamp,
    /// The coordinator (a writing participant), or `None` for a read-only transaction.
    pub coordinator: Option<ServerId>,
    /// Every participant, this one included.
    pub participants: Vec<Participant>,
    /// This server's part: what the transaction read and wrote here.
    pub commit: Commit,
}

impl Prepare {
    /// Checks the participant list: between 2 and [`PARTICIPANTS_MAX`] distinct servers, the
    /// coordinator (if any) a writing participant, none if nobody writes.
    pub fn check(&self) -> Result<(), WireError> {
        let n = self.participants.len();
        check_limit("participants", n, PARTICIPANTS_MAX)?;
        if n < 2 {
            return Err(WireError::BadValue {
                what: "participants",
                why: "fewer than two (one server commits with Commit)",
            });
        }
        if self.stamp.tie & CLIENT_TIE_BIT == 0 {
            return Err(WireError::BadValue { what: "stamp tie", why: "bit 31 clear" });
        }
        for (i, p) in self.participants.iter().enumerate() {
            if self.participants[..i].iter().any(|q| q.server == p.server) {
                return Err(WireError::BadValue { what: "participants", why: "a server twice" });
            }
        }
        let writer = |s: ServerId| self.participants.iter().any(|p| p.server == s && p.writes);
        match self.coordinator {
            Some(c) if !writer(c) => {
                Err(WireError::BadValue { what: "coordinator", why: "not a writing participant" })
            }
            None if self.participants.iter().any(|p| p.writes) => Err(WireError::BadValue {
                what: "coordinator",
                why: "missing for a transaction that writes",
            }),
            _ => Ok(()),
        }
    }

    /// Bytes of the header before the commit body.
    pub(crate) fn header_bytes(&self) -> usize {
        12 + 5 + 2 + 5 * self.participants.len()
    }

    pub(crate) fn put_header(&self, out: &mut Vec<u8>) {
        put_stamp(out, self.stamp);
        out.push(u8::from(self.coordinator.is_some()));
        out.put_u32(self.coordinator.map_or(0, |c| c.0));
        out.put_u16(self.participants.len() as u16);
        for p in &self.participants {
            out.put_u32(p.server.0);
            out.push(u8::from(p.writes));
        }
    }

    /// Reads the header; the caller reads the commit body and calls [`Prepare::check`].
    pub(crate) fn get_header(
        r: &mut Reader,
    ) -> Result<(Stamp, Option<ServerId>, Vec<Participant>), WireError> {
        let stamp = get_stamp(r)?;
        let has = get_flag(r, "coordinator flag")?;
        let coord = r.u32("coordinator")?;
        if !has && coord != 0 {
            return Err(WireError::BadValue { what: "coordinator", why: "set without its flag" });
        }
        let n = r.count16(PARTICIPANTS_MAX, 5, "participants")?;
        let mut participants = Vec::with_capacity(n);
        for _ in 0..n {
            let server = ServerId(r.u32("participant")?);
            let writes = get_flag(r, "participant writes")?;
            participants.push(Participant { server, writes });
        }
        Ok((stamp, has.then_some(ServerId(coord)), participants))
    }
}

/// A message between servers about one transaction. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMsg {
    /// A participant's vote, to the coordinator. A yes from a writing participant means its
    /// part is durable as prepared.
    Vote {
        /// The transaction.
        stamp: Stamp,
        /// The voter.
        from: ServerId,
        /// Whether it can commit.
        yes: bool,
    },
    /// The coordinator's decision, to a writing participant.
    Decide {
        /// The transaction.
        stamp: Stamp,
        /// The coordinator.
        from: ServerId,
        /// Commit or abort.
        commit: bool,
    },
    /// A participant applied the decision (or never heard of the transaction).
    DecideAck {
        /// The transaction.
        stamp: Stamp,
        /// The participant.
        from: ServerId,
    },
    /// A prepared participant asks the coordinator for the decision; it is also a repeated
    /// yes vote. A coordinator with no record of the transaction answers abort (presumed
    /// abort) and remembers that answer.
    Query {
        /// The transaction.
        stamp: Stamp,
        /// The participant.
        from: ServerId,
    },
    /// A coordinator still waiting for a participant's vote asks for it (version 7,
    /// [`crate::version::VERSION_ASK_VOTE`]). The participant answers with a [`PeerMsg::Vote`]:
    /// yes again if its part is prepared, no if it has no record of the transaction and none
    /// is coming (it restarted since its prepare, which was never durable; or the client's
    /// prepare has not reached it). Having answered no it refuses that prepare should it
    /// arrive later. It does not answer while its part is on its way (queued, waiting, or
    /// its prepare record not yet durable): the vote comes then.
    AskVote {
        /// The transaction.
        stamp: Stamp,
        /// The coordinator.
        from: ServerId,
    },
}

impl PeerMsg {
    /// Bytes of the body.
    pub(crate) const BYTES: usize = 18;

    /// The transaction it is about.
    pub fn stamp(&self) -> Stamp {
        match *self {
            PeerMsg::Vote { stamp, .. }
            | PeerMsg::Decide { stamp, .. }
            | PeerMsg::DecideAck { stamp, .. }
            | PeerMsg::Query { stamp, .. }
            | PeerMsg::AskVote { stamp, .. } => stamp,
        }
    }

    /// The sender.
    pub fn from(&self) -> ServerId {
        match *self {
            PeerMsg::Vote { from, .. }
            | PeerMsg::Decide { from, .. }
            | PeerMsg::DecideAck { from, .. }
            | PeerMsg::Query { from, .. }
            | PeerMsg::AskVote { from, .. } => from,
        }
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        let (op, flag) = match *self {
            PeerMsg::Vote { yes, .. } => (1, yes),
            PeerMsg::Decide { commit, .. } => (2, commit),
            PeerMsg::DecideAck { .. } => (3, false),
            PeerMsg::Query { .. } => (4, false),
            PeerMsg::AskVote { .. } => (5, false),
        };
        out.push(op);
        put_stamp(out, self.stamp());
        out.put_u32(self.from().0);
        out.push(u8::from(flag));
    }

    /// The oldest protocol version in which it can be sent.
    pub fn version_needed(&self) -> u16 {
        match self {
            PeerMsg::AskVote { .. } => crate::version::VERSION_ASK_VOTE,
            _ => crate::version::VERSION_TWO_PHASE,
        }
    }

    pub(crate) fn get(r: &mut Reader) -> Result<PeerMsg, WireError> {
        let op = r.u8("peer op")?;
        let stamp = get_stamp(r)?;
        let from = ServerId(r.u32("peer from")?);
        let flag = get_flag(r, "peer flag")?;
        Ok(match (op, flag) {
            (1, yes) => PeerMsg::Vote { stamp, from, yes },
            (2, commit) => PeerMsg::Decide { stamp, from, commit },
            (3, false) => PeerMsg::DecideAck { stamp, from },
            (4, false) => PeerMsg::Query { stamp, from },
            (5, false) => PeerMsg::AskVote { stamp, from },
            (3..=5, true) => {
                return Err(WireError::BadValue {
                    what: "peer flag",
                    why: "set on an ack, a query or a request for a vote",
                });
            }
            _ => return Err(WireError::BadValue { what: "peer op", why: "unknown" }),
        })
    }
}

fn put_stamp(out: &mut Vec<u8>, s: Stamp) {
    out.put_u64(s.time_us);
    out.put_u32(s.tie);
}

fn get_stamp(r: &mut Reader) -> Result<Stamp, WireError> {
    Ok(Stamp { time_us: r.u64("stamp time")?, tie: r.u32("stamp tie")? })
}

fn get_flag(r: &mut Reader, what: &'static str) -> Result<bool, WireError> {
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(WireError::BadValue { what, why: "neither 0 nor 1" }),
    }
}
