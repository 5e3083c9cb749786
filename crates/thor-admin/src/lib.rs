//! thor-admin: the offline tools as a library, so that every caller runs the same code: the
//! `thor` command (a shell over it), the facade (`thor::check`, `thor::Upgrade`) and the
//! simulation (which checks the databases it recovers).
//!
//! - [`check`]: the consistency checker of a closed database directory, and its repair of log
//!   records recovery cannot read. A typed [`check::Report`]; progress goes to a
//!   [`check::Progress`] the caller passes in.
//! - [`compact`]: a closed database rewritten into a new directory without its unreachable
//!   objects (the upgrade with no class changed).
//! - [`backup`]: a consistent copy of a database that no process has open. (A live backup is
//!   the server's: the `Backup` request, `Engine::backup`.)
//!
//! Errors are typed enums whose variants say what to do; nothing here prints or exits.

pub mod backup;
pub mod check;
pub mod compact;

pub use backup::{BackupError, backup_offline};
pub use check::{CheckError, CheckOptions, NoProgress, Report, check, repair_and_check};
pub use compact::{CompactError, compact};
