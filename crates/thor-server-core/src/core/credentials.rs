//! Credentials: who may say what to a server.
//!
//! A *credential* is a name (for logs and revocation), a [`Scope`] and a secret. A client
//! presents the secret in `Hello` (the wire calls it the token); the server compares it with
//! every credential's secret, in time that depends only on the lengths involved, and the one
//! that matches gives the session its scope for life. Secrets are therefore distinct within a
//! table ([`Credentials::add`] refuses a second credential with the same secret).
//!
//! # Scopes
//!
//! ```text
//!   read-only   Fetch, Prefetch, a commit or prepare that writes nothing here (validated,
//!               never logged), Abort, Goodbye
//!   read-write  + a commit, page commit, page records or prepare that writes
//!   operator    + Stats and Backup
//!   peer:ID     Peer messages whose sender is server ID, Abort, Goodbye; nothing else
//!   all         everything, peer messages from any server this one knows: the single
//!               token of `--token-file` / THOR_TOKEN (and every session when the server
//!               has no credentials at all)
//! ```
//!
//! A request outside its session's scope is answered `Error(Forbidden)` (version 5; an older
//! connection gets `Error(Unauthenticated)` and is closed, the nearest code it knows) and has
//! no effect; the session stays open. Scopes are checked by the core
//! ([`super::sessions`]), not by the drivers, so every transport enforces the same rules.
//!
//! # The credentials file
//!
//! `thor server --credentials FILE` reads one credential a line, as [`Credentials::parse`]
//! takes them:
//!
//! ```text
//! # name      scope        secret (at least 16 bytes, no spaces)
//! alice       read-write   9c1f0e6b2a7d48e5b3f1c0a9d8e7f6a5
//! reports     read-only    4b3a29180f7e6d5c4b3a29180f7e6d5c
//! ops         operator     0d1c2b3a49586776a5b4c3d2e1f00f1e
//! server-2    peer:2       7f6e5d4c3b2a19080f1e2d3c4b5a6978
//! ```
//!
//! Blank lines and lines starting with `#` are skipped. A server presents the secret of the
//! first `peer:ID` line naming its own id when it opens a session to a peer; the others'
//! `peer:` lines are how it knows them. So one file can serve a whole cluster.
//!
//! # Revocation
//!
//! A new table replaces the old one at once ([`super::Input::Credentials`], what `thor server`
//! does on SIGHUP): every open session whose credential is gone, or whose secret changed, is
//! told `Error(Unauthenticated)` (request id 0) and closed; the others keep their session
//! with the scope their credential has now.

use std::fmt;

use thor_core::ServerId;
use thor_wire::limits::TOKEN_BYTES_MAX;

use crate::limits::{CREDENTIAL_NAME_BYTES_MAX, CREDENTIAL_SECRET_BYTES_MIN, CREDENTIALS_MAX};

/// What a credential allows. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Reads, and transactions that write nothing here.
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
    /// Reads, writes, `Stats` and `Backup`.
    Operator,
    /// Messages of two-phase commit from this server only.
    Peer(ServerId),
    /// Everything: the single token (`--token-file`, `THOR_TOKEN`), or no authentication.
    All,
}

/// What a request needs of its session's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: `Abort`, `Goodbye`.
    Any,
    /// Reading: fetches, and transactions that write nothing here.
    Read,
    /// Writing: commits, page commits, page records and prepares that write.
    Write,
    /// Operating the server: `Stats`, `Backup`.
    Operate,
    /// Speaking as this server (two-phase commit's messages).
    Peer(ServerId),
}

impl Scope {
    /// Whether a session of this scope may make a request that needs `need`.
    pub fn allows(self, need: Need) -> bool {
        match (self, need) {
            (_, Need::Any) | (Scope::All, _) => true,
            (Scope::ReadOnly, Need::Read) => true,
            (Scope::ReadWrite, Need::Read | Need::Write) => true,
            (Scope::Operator, Need::Read | Need::Write | Need::Operate) => true,
            (Scope::Peer(me), Need::Peer(from)) => me == from,
            _ => false,
        }
    }

    /// Reads a scope as the credentials file writes it: `read-only`, `read-write`,
    /// `operator` or `peer:ID` (ID from 1).
    pub fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "read-only" => Scope::ReadOnly,
            "read-write" => Scope::ReadWrite,
            "operator" => Scope::Operator,
            _ => {
                let id: u32 = s.strip_prefix("peer:")?.parse().ok()?;
                if id == 0 {
                    return None;
                }
                Scope::Peer(ServerId(id))
            }
        })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::ReadOnly => f.write_str("read-only"),
            Scope::ReadWrite => f.write_str("read-write"),
            Scope::Operator => f.write_str("operator"),
            Scope::Peer(id) => write!(f, "peer:{}", id.0),
            Scope::All => f.write_str("all"),
        }
    }
}

impl fmt::Display for Need {
    /// The scopes that have it, for the `Forbidden` message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Any | Need::Read => f.write_str("a read-only, read-write or operator credential"),
            Need::Write => f.write_str("a read-write or operator credential"),
            Need::Operate => f.write_str("an operator credential"),
            Need::Peer(id) => write!(f, "the peer credential of server {} (peer:{})", id.0, id.0),
        }
    }
}

/// One credential. Its secret is never printed ([`fmt::Debug`] shows name and scope).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    name: String,
    scope: Scope,
    secret: Vec<u8>,
}

impl Credential {
    /// Its name, for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it allows.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The secret, for a program that presents it (a server to its peers).
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({} {}, {} secret bytes)", self.name, self.scope, self.secret.len())
    }
}

/// Why a credential or a credentials file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// A line of a credentials file (counted from 1) is wrong.
    #[error("line {line}: {why}")]
    Line {
        /// The line.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A credential is wrong (its name, scope or secret), or the table is full.
    #[error("{0}")]
    Bad(String),
}

/// A server's credentials. See the module documentation. At most [`CREDENTIALS_MAX`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    list: Vec<Credential>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.list).finish()
    }
}

/// Whether `presented` equals `secret`, in time that depends only on the two lengths (every
/// byte of `secret` is looked at, whatever matched before), so that timing refusals tells a
/// client nothing about a secret's bytes.
fn same_secret(secret: &[u8], presented: &[u8]) -> bool {
    let mut diff = (secret.len() ^ presented.len()) as u64;
    for (i, s) in secret.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(0);
        diff |= u64::from(s ^ p);
    }
    std::hint::black_box(diff) == 0
}

impl Credentials {
    /// No credentials: a server with none admits every client (scope [`Scope::All`]).
    pub fn new() -> Credentials {
        Credentials::default()
    }

    /// The single token of `--token-file` / `THOR_TOKEN` as a table: one credential named
    /// `token` of scope [`Scope::All`] (empty if the token is).
    pub fn single_token(token: &[u8]) -> Credentials {
        let mut c = Credentials::new();
        if !token.is_empty() {
            c.list.push(Credential {
                name: "token".into(),
                scope: Scope::All,
                secret: token.to_vec(),
            });
        }
        c
    }

    /// Adds a credential. Refused: a name that is empty, longer than
    /// [`CREDENTIAL_NAME_BYTES_MAX`] or not made of letters, digits, `-`, `_` and `.`; a name
    /// or secret another credential has; a secret shorter than [`CREDENTIAL_SECRET_BYTES_MIN`]
    /// or longer than a `Hello` carries; [`Scope::All`] (only the single token has it); more
    /// than [`CREDENTIALS_MAX`] credentials.
    pub fn add(&mut self, name: &str, scope: Scope, secret: &[u8]) -> Result<(), CredentialError> {
        let bad = |why: String| Err(CredentialError::Bad(why));
        if name.is_empty()
            || name.len() > CREDENTIAL_NAME_BYTES_MAX
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return bad(format!(
                "credential name {name:?}: 1 to {CREDENTIAL_NAME_BYTES_MAX} letters, digits, '-', '_' or '.'"
            ));
        }
        if scope == Scope::All {
            return bad(format!("credential {name}: scope all belongs to the single token"));
        }
        if !(CREDENTIAL_SECRET_BYTES_MIN..=TOKEN_BYTES_MAX).contains(&secret.len()) {
            return bad(format!(
                "credential {name}: its secret is {} bytes; give {CREDENTIAL_SECRET_BYTES_MIN} to {TOKEN_BYTES_MAX} (e.g. `openssl rand -hex 32`)",
                secret.len()
            ));
        }
        if self.list.iter().any(|c| c.name == name) {
            return bad(format!("credential {name} is named twice"));
        }
        if let Some(c) = self.list.iter().find(|c| same_secret(&c.secret, secret)) {
            return bad(format!(
                "credentials {} and {name} have the same secret (a secret names its credential)",
                c.name
            ));
        }
        if self.list.len() >= CREDENTIALS_MAX {
            return bad(format!("more than {CREDENTIALS_MAX} credentials"));
        }
        self.list.push(Credential { name: name.into(), scope, secret: secret.to_vec() });
        Ok(())
    }

    /// Reads a credentials file's text: one `NAME SCOPE SECRET` a line, separated by blanks;
    /// blank lines and lines starting with `#` are skipped. See the module documentation.
    pub fn parse(text: &str) -> Result<Credentials, CredentialError> {
        let mut c = Credentials::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let at = |why: String| CredentialError::Line { line: line_no, why };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, scope, secret] = fields[..] else {
                return Err(at(format!(
                    "expected NAME SCOPE SECRET, found {} fields",
                    fields.len()
                )));
            };
            let scope = Scope::parse(scope).ok_or_else(|| {
                at(format!("unknown scope {scope:?}: read-only, read-write, operator or peer:ID"))
            })?;
            c.add(name, scope, secret.as_bytes()).map_err(|e| at(e.to_string()))?;
        }
        Ok(c)
    }

    /// The credential whose secret is `presented`, if any. Every credential's secret is
    /// compared, in time that depends only on the lengths, and the index of the match is
    /// selected without a branch on it.
    pub fn find(&self, presented: &[u8]) -> Option<&Credential> {
        let mut found = usize::MAX;
        for (i, c) in self.list.iter().enumerate() {
            let mask = usize::from(same_secret(&c.secret, presented)).wrapping_neg();
            found = (found & !mask) | (i & mask);
        }
        self.list.get(found)
    }

    /// The credential named `name`.
    pub fn get(&self, name: &str) -> Option<&Credential> {
        self.list.iter().find(|c| c.name == name)
    }

    /// Whether `name` is here with the secret `secret` (what keeps a session open across a
    /// reload).
    pub(crate) fn still_has(&self, name: &str, secret: &[u8]) -> Option<Scope> {
        self.get(name).filter(|c| same_secret(&c.secret, secret)).map(|c| c.scope)
    }

    /// The secret server `me` presents to its peers: its first `peer:ME` credential's.
    pub fn peer_secret(&self, me: ServerId) -> Option<&[u8]> {
        self.list.iter().find(|c| c.scope == Scope::Peer(me)).map(|c| c.secret.as_slice())
    }

    /// Every credential, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &Credential> {
        self.list.iter()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none (the server then admits everyone).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"aaaaaaaaaaaaaaaa";
    const B: &[u8] = b"bbbbbbbbbbbbbbbb";

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"abc", b"ab"));
        assert!(!same_secret(b"", b"a"));
        assert!(same_secret(b"", b""));
    }

    #[test]
    fn the_matching_credential_is_found_whatever_its_place() {
        let mut c = Credentials::new();
        c.add("a", Scope::ReadOnly, A).unwrap();
        c.add("b", Scope::Peer(ServerId(2)), B).unwrap();
        assert_eq!(c.find(A).map(Credential::name), Some("a"));
        assert_eq!(c.find(B).map(Credential::scope), Some(Scope::Peer(ServerId(2))));
        assert!(c.find(b"aaaaaaaaaaaaaaa").is_none());
        assert!(c.find(b"").is_none());
        assert_eq!(c.peer_secret(ServerId(2)), Some(B));
        assert_eq!(c.peer_secret(ServerId(3)), None);
        assert!(!format!("{c:?}").contains("aaaa"), "Debug hides secrets: {c:?}");
    }

    #[test]
    fn scopes_nest_and_peers_are_apart() {
        use Need::*;
        let peer2 = Scope::Peer(ServerId(2));
        let table = [
            (Scope::ReadOnly, [true, true, false, false, false]),
            (Scope::ReadWrite, [true, true, true, false, false]),
            (Scope::Operator, [true, true, true, true, false]),
            (peer2, [true, false, false, false, true]),
            (Scope::All, [true, true, true, true, true]),
        ];
        for (scope, want) in table {
            let got = [Any, Read, Write, Operate, Peer(ServerId(2))].map(|n| scope.allows(n));
            assert_eq!(got, want, "{scope}");
        }
        assert!(!peer2.allows(Peer(ServerId(3))), "a peer speaks only as itself");
        assert!(Scope::All.allows(Peer(ServerId(3))));
    }

    #[test]
    fn files_parse_and_bad_lines_are_named() {
        let text =
            "# comment\n\nalice read-write 0123456789abcdef\n  s2\tpeer:2  fedcba9876543210 \n";
        let c = Credentials::parse(text).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("s2").map(Credential::scope), Some(Scope::Peer(ServerId(2))));
        for (text, line, needle) in [
            ("a read-write", 1, "fields"),
            ("a read-write x y", 1, "fields"),
            ("\na writer 0123456789abcdef", 2, "unknown scope"),
            ("a peer:0 0123456789abcdef", 1, "unknown scope"),
            ("a peer:x 0123456789abcdef", 1, "unknown scope"),
            ("a all 0123456789abcdef", 1, "unknown scope"),
            ("a read-only short", 1, "secret is 5 bytes"),
            ("a/b read-only 0123456789abcdef", 1, "credential name"),
            ("a read-only 0123456789abcdef\na operator 0123456789abcdeg", 2, "named twice"),
            ("a read-only 0123456789abcdef\nb operator 0123456789abcdef", 2, "same secret"),
        ] {
            match Credentials::parse(text) {
                Err(CredentialError::Line { line: l, why }) => {
                    assert_eq!(l, line, "{text:?}: {why}");
                    assert!(why.contains(needle), "{text:?}: {why}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn tables_are_bounded() {
        let mut c = Credentials::new();
        for i in 0..CREDENTIALS_MAX {
            c.add(&format!("c{i}"), Scope::ReadOnly, format!("{i:016}").as_bytes()).unwrap();
        }
        let e = c.add("one-more", Scope::ReadOnly, b"zzzzzzzzzzzzzzzz").unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(Credentials::single_token(b"").len(), 0);
        assert_eq!(Credentials::single_token(b"k").find(b"k").unwrap().scope(), Scope::All);
    }
}
