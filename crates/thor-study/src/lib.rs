//! thor-study: the QuickStore study's half of a thor server (issue 14,
//! `papers/quickstore-recovery-sigmod95.txt`; issue 31 moved it out of the core and the
//! driver): the page-based commit modes behind the server core's commit-path seam
//! (`thor_server_core::CommitPath`), and whole-page logging's restart over a real log.
//!
//! - [`StudyPath`] (`path.rs`): the study's commit path, which [`set_commit_mode`] installs in
//!   a core for a page mode (`obj` keeps the core's own `ObjectShipping`);
//! - `pagecommit.rs`: the page-diffing translators (PD-REDO, PD-ESM, SD-ESM, SL-ESM: page
//!   records staged and applied into an ordinary commit) and WPL's entry;
//! - `wpl.rs`: whole-page logging (the table, its checkpoints and truncation floor, the
//!   page images and commit record it prepares, its records' forward replay);
//! - [`wpl_log::restart`]: the backward pass over a server's [`thor_storage::Log`] and the
//!   committed copies read back; [`wpl_log::restore`]: the recovery hook thor-server's
//!   `io::recover` calls at the first WPL record forward replay meets
//!   ([`wpl_log::is_wpl_record`]), which hands the rebuilt table and the copies to the path;
//!   [`wpl_log::WplObjects`]: a WPL commit's objects read out of a log read forward, for the
//!   offline checker (thor-admin) and the simulation's acknowledged-commit check.
//!
//! The pure halves (the table, the record codecs, the page-record formats the client shares)
//! are `thor-recovery`'s.

mod pagecommit;
mod path;
mod wpl;
pub mod wpl_log;

pub use pagecommit::STAGED_BYTES_MAX;
pub use path::{StudyOptions, StudyPath, set_commit_mode};
pub use thor_recovery::WplConfig;
pub use wpl::{WPL_CONFIG_DEFAULT, split_body as split_wpl_body};
