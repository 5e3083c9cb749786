//! thor-study: the QuickStore study's half of a thor server that needs a real log (issue 14,
//! `papers/quickstore-recovery-sigmod95.txt`; issue 31 moved it out of the driver).
//!
//! Whole-page logging (`wpl` mode) keeps, beside the log, a table of the page copies not yet
//! home, and restarts by one backward pass over the log to its newest checkpoint record. That
//! pass reads thor-storage's log, so it cannot live in the sealed core; it lives here:
//!
//! - [`wpl_log::restart`]: the backward pass over a server's [`thor_storage::Log`] and the
//!   committed copies read back;
//! - [`wpl_log::restore`]: the recovery hook thor-server's `io::recover` calls at the first
//!   WPL record forward replay meets ([`wpl_log::is_wpl_record`]), which hands the rebuilt
//!   table and the copies to the core (`Core::wpl_restored`);
//! - [`wpl_log::WplObjects`]: a WPL commit's objects read out of a log read forward, for the
//!   offline checker (thor-admin) and the simulation's acknowledged-commit check.
//!
//! The commit path itself sits behind the core's seam (`thor-server-core`'s
//! `core::commit_path`: `CommitPath`, with `ObjectShipping` the default and
//! `WholePageLogging` the study's); the pure halves (the table, the record codecs, the
//! page-record formats the client shares) are `thor-recovery`'s.

pub mod wpl_log;
