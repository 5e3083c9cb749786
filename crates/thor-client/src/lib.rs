//! thor-client: the library applications use to reach a thor server.
//!
//! - [`Session`]: a connection, a client cache (HAC or FPC, by [`SessionConfig`]) and the
//!   current transaction; fetches pages on misses and ships object versions at commit.
//!   Transactions are optimistic (CLOCC): [`Session::run`] runs one and retries it when
//!   concurrency control refuses it ([`ClientError::Conflict`]). Requests time out, and a
//!   session made with a [`Dialer`] ([`Session::connect`]) survives a broken connection
//!   ([`session::reconnect`]).
//! - [`typed`]: classes declared once with [`class!`], typed references [`Ref`], and
//!   [`View`]s that read fields straight from the cached bytes.
//! - [`cluster`]: [`Cluster`], sessions with several servers, references across them through
//!   surrogates ([`XRef`]), and transactions that commit at all of them or none (two-phase
//!   commit).
//! - [`spill`]: the file a session's cache steals a transaction's objects to when they
//!   outgrow it, so a transaction may write more than the cache holds.
//! - [`limits`]: every bound on what a session does for one request of the application.
//!
//! ```no_run
//! # fn demo(transport: Box<dyn thor_wire::Transport>) -> Result<(), thor_client::ClientError> {
//! use thor_client::{Ref, Session, SessionConfig};
//! thor_client::class! {
//!     pub class Counter("demo.Counter") { value: u64 }
//! }
//! let s = Session::new(transport, SessionConfig::default())?;
//! let c = s.create::<Counter>(0)?;
//! c.set(Counter::value, 1)?;
//! let r: Ref<Counter> = c.as_ref();
//! drop(c);
//! s.set_root(0, r)?;
//! s.commit()?;
//! let c = s.get(s.root::<Counter>(0)?)?;
//! assert_eq!(c.get(Counter::value), 1);
//! # Ok(()) }
//! ```
//!
//! *Architecture invariant:* the client talks to the server only through a
//! [`thor_wire::Transport`], so tests and embedded uses run it over an in-process transport.
//! Its only other I/O is the spill file ([`spill`]), an unlinked temporary file that holds
//! nothing past the transaction that wrote it.

pub mod cluster;
pub mod error;
pub mod latency;
pub mod limits;
pub mod pagemode;
pub mod prefetch;
pub mod session;
pub mod spill;
pub mod typed;
pub mod values;

pub use cluster::{Cluster, ClusterStats, Connector, Surrogate, XRef};
pub use error::{ClientError, ConflictCause};
pub use latency::LatencyHistogram;
pub use pagemode::{PageModeStats, RecoveryConfig};
pub use session::{
    ClientStats, CommitInfo, CommitOutcome, Dialer, ReconnectConfig, ReconnectStats, SCHEMA_SLOT,
    Session, SessionConfig, View,
};
pub use thor_cache::{HacParams, PolicyConfig};
pub use typed::{Any, Bytes, Class, Field, Large, Ref, Refs};
pub use values::{Elem, Seq, SeqView, Str, max_str_bytes};

#[doc(hidden)]
pub use thor_core;
