//! The codes of `Error` and `CommitRefused` replies.
//!
//! Codes are part of the protocol: their numbers never change meaning, new ones are only added
//! (with a new [`crate::WIRE_VERSION`]), and a receiver that meets a number it does not know
//! treats the reply as malformed. Each code tells the receiving program what to do; the message
//! beside it is for humans.

use std::fmt;

macro_rules! codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )*
        }

        impl $name {
            /// Every code, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The number sent on the wire.
            pub const fn to_u16(self) -> u16 {
                self as u16
            }

            /// The code numbered `n`, if this version knows it.
            pub const fn from_u16(n: u16) -> Option<$name> {
                match n {
                    $( $value => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The code's name, for logs.
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => stringify!($variant), )*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} ({})", self.name(), self.to_u16())
            }
        }
    };
}

codes! {
    /// Why a request (or a whole connection) failed. The documentation of each code says whether
    /// the server closes the connection after sending it; [`ErrorCode::closes_connection`] is
    /// the same list.
    pub enum ErrorCode {
        /// The frame's length or checksum is wrong, or the stream ended inside a frame: the
        /// stream is out of step. Closes the connection; reconnect.
        BadFrame = 1,
        /// The frame is larger than the connection's maximum frame size (`HelloOk`). Closes the
        /// connection; send smaller requests (commit in smaller transactions).
        FrameTooLarge = 2,
        /// The message type is unknown to the server's protocol version. Closes the connection.
        UnknownType = 3,
        /// The payload does not decode (a count above its limit, trailing bytes, a bad oref).
        /// Closes the connection: this is a client bug.
        Malformed = 4,
        /// The client's version range and the server's do not overlap. Closes the connection;
        /// upgrade the older side.
        UnsupportedVersion = 5,
        /// The token in `Hello` is wrong. Closes the connection; fix the client's credentials.
        Unauthenticated = 6,
        /// A request came before `Hello`. Closes the connection; say `Hello` first.
        HelloRequired = 7,
        /// A message that is not expected now (a second `Hello`, a reply sent as a request).
        /// Closes the connection.
        UnexpectedMessage = 8,
        /// `Fetch` asked for a page that is not allocated. The connection stays open; the
        /// client followed a reference that no object holds, so its cache is inconsistent.
        NoSuchPage = 9,
        /// The server has as many connections as it allows. Sent instead of `HelloOk` (with
        /// request id 0, before any request is read) and the connection is closed; retry later
        /// or elsewhere.
        Busy = 10,
        /// The server is shutting down: sent with request id 0 to idle connections before they
        /// are closed. Requests already being handled were answered first. Reconnect later.
        ShuttingDown = 11,
        /// No request arrived within the idle timeout, or a frame took longer than the frame
        /// timeout to arrive. Sent with request id 0; closes the connection. Reconnect.
        Timeout = 12,
        /// The server's storage failed. For a commit the outcome is unknown (it may or may not
        /// be durable): read the objects back after the server recovers. The connection stays
        /// open, but the server needs an operator (restart to recover from its log). A failed
        /// server also sends it, with request id 0, to a new connection instead of serving it,
        /// and closes that connection.
        ServerFailed = 13,
        /// The server found damaged bytes in the requested page. The connection stays open;
        /// other pages may still be fetched. The database needs repair.
        CorruptData = 14,
        /// A bug in the server. Closes the connection.
        Internal = 15,
        /// The server dropped this session's concurrency-control state: its pending
        /// invalidations passed the server's bound because the client did not acknowledge them.
        /// Sent with request id 0; closes the connection. The client's cache can no longer be
        /// trusted: start a new session (with an empty cache).
        SessionExpired = 16,
        /// (Version 5.) The request is outside the scope of the credential the session
        /// authenticated with: a commit or prepare that writes on a read-only credential,
        /// `Stats` or `Backup` without the operator scope, a `Peer` message on a connection
        /// that is not a peer's or whose sender is not the server the credential names. The
        /// request had no effect and the connection stays open; connect with a credential
        /// that has the scope (the message names the one needed).
        Forbidden = 17,
        /// (Version 8.) The server is a replica of a replica group that does not lead it now
        /// (a follower, a candidate, or a leader not yet serving): it serves no session.
        /// Closes the connection. The message names the replica the server believes leads
        /// ([`not_leader_message`], read back with [`not_leader_hint`]), if it knows one:
        /// connect to that replica, else to another of the group's, and resume the session
        /// there as after a broken connection.
        NotLeader = 18,
    }
}

/// The message of an `Error(NotLeader)` reply: the leader hint in a fixed form that
/// [`not_leader_hint`] reads back (the code is the contract, the hint a courtesy).
pub fn not_leader_message(leader: Option<u64>) -> String {
    match leader {
        Some(id) => format!("not the leader; leader: replica {id}"),
        None => "not the leader; leader: unknown".to_string(),
    }
}

/// The replica an `Error(NotLeader)` message names as leader ([`not_leader_message`]), if
/// any. Untrusted text: anything else reads as no hint.
pub fn not_leader_hint(message: &str) -> Option<u64> {
    message.strip_prefix("not the leader; leader: replica ")?.parse().ok()
}

impl ErrorCode {
    /// Whether the server closes the connection after sending this code.
    pub const fn closes_connection(self) -> bool {
        !matches!(
            self,
            ErrorCode::NoSuchPage
                | ErrorCode::ServerFailed
                | ErrorCode::CorruptData
                | ErrorCode::Forbidden
        )
    }

    /// The protocol version that added this code: a server never sends it on a connection
    /// that agreed on an older one ([`crate::version`]).
    pub const fn since(self) -> u16 {
        match self {
            ErrorCode::Forbidden => crate::version::VERSION_SCOPES,
            ErrorCode::NotLeader => crate::version::VERSION_GROUPS,
            _ => 1,
        }
    }
}

codes! {
    /// Why a commit was refused. A refused commit had no effect and the connection stays open.
    /// Except where a code says otherwise, the request itself is wrong (a client bug or an
    /// attack): fix it, do not retry it unchanged.
    pub enum RefusedCode {
        /// The commit has more objects or bytes than the server accepts in one commit.
        TooLarge = 1,
        /// A new version names an object that does not exist.
        NoSuchObject = 2,
        /// An object names as its class an object that is not a class.
        NotAClass = 3,
        /// An object does not have the size or shape its class prescribes.
        BadShape = 4,
        /// A reference field points to no existing object and no object created by the commit.
        BadReference = 5,
        /// A version changes its object's class or size; objects keep both for life.
        Reshape = 6,
        /// A version would modify a class object; classes are immutable.
        ClassIsImmutable = 7,
        /// The same object appears twice among the versions.
        Duplicate = 8,
        /// A created object is larger than a page: store it as a large object.
        ObjectTooLarge = 9,
        /// The database has no page ids left. Retrying will not help.
        DatabaseFull = 10,
        /// The server cannot take this commit now (a bulk load holds its allocator). Retry
        /// later, unchanged.
        RetryLater = 11,
        /// A reason newer than this protocol version's list; the message says what.
        Other = 12,
        /// Concurrency control: the transaction used an object that a committed transaction
        /// changed after the client's copy was sent (the object is in the client's invalid
        /// set). The reply carries the invalidations: apply them, then run the transaction
        /// again.
        Stale = 13,
        /// Concurrency control: the transaction conflicts with another committing or
        /// committed transaction near it in the serial order (validation-queue rules 1, 2a,
        /// 2b; the message names the rule and an object). Run the transaction again.
        Conflict = 14,
        /// Concurrency control: the transaction's timestamp is below the server's threshold
        /// (its clock is far behind, or the commit took very long to arrive). Run it again.
        TooOld = 15,
        /// Two-phase commit (version 3): another participant refused its part, or did not
        /// answer the coordinator in time, so the transaction was aborted everywhere. Run it
        /// again.
        Aborted = 16,
        /// Two-phase commit (version 5): the prepare names a coordinator or participant that
        /// this server does not know (it was not told where that server listens: `thor
        /// server --peer`), so it could neither vote to the coordinator nor learn the outcome.
        /// Refused at once: nothing was logged or held. Fix the participant list, or configure
        /// the servers as peers of each other.
        UnknownServer = 17,
    }
}

impl RefusedCode {
    /// Whether the refusal is a concurrency-control conflict: the transaction was valid but
    /// cannot take its place in the serial order; running it again (on fresh copies) may
    /// succeed.
    pub const fn is_conflict(self) -> bool {
        matches!(
            self,
            RefusedCode::Stale | RefusedCode::Conflict | RefusedCode::TooOld | RefusedCode::Aborted
        )
    }

    /// The protocol version that added this code. On a connection that agreed on an older
    /// one a server sends [`RefusedCode::Other`] instead, with the same message.
    pub const fn since(self) -> u16 {
        match self {
            RefusedCode::Aborted => crate::version::VERSION_TWO_PHASE,
            RefusedCode::UnknownServer => crate::version::VERSION_SCOPES,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_roundtrip_and_are_dense() {
        for (i, c) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(c.to_u16() as usize, i + 1);
            assert_eq!(ErrorCode::from_u16(c.to_u16()), Some(*c));
        }
        for (i, c) in RefusedCode::ALL.iter().enumerate() {
            assert_eq!(c.to_u16() as usize, i + 1);
            assert_eq!(RefusedCode::from_u16(c.to_u16()), Some(*c));
        }
        assert_eq!(ErrorCode::from_u16(0), None);
        assert_eq!(RefusedCode::from_u16(999), None);
        assert_eq!(ErrorCode::Busy.to_string(), "Busy (10)");
    }

    #[test]
    fn every_code_is_within_the_versions_spoken() {
        for c in ErrorCode::ALL {
            assert!((crate::WIRE_VERSION_MIN..=crate::WIRE_VERSION).contains(&c.since()), "{c}");
        }
        for c in RefusedCode::ALL {
            assert!((crate::WIRE_VERSION_MIN..=crate::WIRE_VERSION).contains(&c.since()), "{c}");
        }
        assert_eq!(RefusedCode::Other.since(), 1, "the fallback exists in every version");
        assert!(!ErrorCode::Forbidden.closes_connection());
        assert!(ErrorCode::NotLeader.closes_connection());
    }

    #[test]
    fn the_not_leader_hint_reads_back_and_junk_reads_as_none() {
        assert_eq!(not_leader_hint(&not_leader_message(Some(3))), Some(3));
        assert_eq!(not_leader_hint(&not_leader_message(None)), None);
        for junk in ["", "not the leader; leader: replica ", "not the leader; leader: replica x"] {
            assert_eq!(not_leader_hint(junk), None);
        }
    }
}
