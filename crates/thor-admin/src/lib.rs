//! thor-admin: the offline tools as a library, so that every caller runs the same code: the
//! `thor` command (a shell over it), the facade (`thor::check`, `thor::Upgrade`) and the
//! simulation (which checks the databases it recovers).
//!
//! - [`check`](mod@check): the consistency checker of a closed database directory, and its repair of log
//!   records recovery cannot read. A typed [`check::Report`]; progress goes to a
//!   [`check::Progress`] the caller passes in.
//! - [`compact`](mod@compact): a closed database rewritten into a new directory without its unreachable
//!   objects (the upgrade with no class changed).
//! - [`upgrade()`](mod@upgrade): a closed database rewritten into a new directory with fields
//!   appended to classes (the facade's `thor::Upgrade` gives it the program's declarations), and
//!   without its unreachable objects: thor's only garbage collection. Objects are placed by the
//!   server's page packer (`thor_server::PagePacker`), the rule its bulk load follows.
//! - [`backup`](mod@backup): a consistent copy of a database that no process has open. (A live backup is
//!   the server's: the `Backup` request, `Engine::backup`.)
//!
//! Errors are typed enums whose variants say what to do; nothing here prints or exits.

pub mod backup;
pub mod check;
pub mod compact;
pub mod limits;
pub mod upgrade;

pub use backup::{BackupError, backup_offline};
pub use check::{
    CheckError, CheckOptions, NoProgress, Report, check, check_disk, repair_and_check,
};
pub use compact::{CompactError, compact};
pub use upgrade::{ClassUpgrade, Incompatibility, UpgradeError, UpgradeReport, upgrade};
