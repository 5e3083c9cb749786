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
//!
//! # The tools in detail (moved from ARCHITECTURE.md)
//!
//! `thor check DIR` (`check.rs`) is the offline consistency checker. It judges the
//! *committed state*, what the next open would serve: the page file as installed (with the
//! double-write buffer's intact copies where recovery writes them back) and the log from the
//! checkpoint on, as recovery replays it. Log pass 1 (`thor_storage::log::inspect`,
//! `thor_server::record::decode`) checks every record and indexes each object the log writes
//! after the checkpoint (class, size, where); page pass 1 checks each allocated page
//! (`PageView::parse_stored`, free space, version) and builds a bitmap of existing oids per page
//! and the class table; page pass 2 and log pass 2 check every installed object and every log
//! version against its class (`ClassDesc::check_shape`, `large::check_root`) and every reference
//! against the bitmap. One line per problem names the page and oid or the log segment, offset
//! and LSN; what recovery repairs (a torn tail, a page restored from the double-write buffer) is
//! a note. `--json` for machines; exit status 0 healthy, 1 problems, 2 could not check.
//! thor-cli's `tests/check.rs` injects each fault (flipped page byte, broken offset table, dangling
//! reference, bad log record, torn tail) into real files and checks what is reported.
//! `thor check --repair DIR` (`check/repair.rs`) first sets aside every log record recovery
//! cannot read (a record whose checksum passed but whose payload the record decoder refuses):
//! its bytes and a report go beside the log (`log.<lsn>.aside`, `.aside.txt`), the segment is
//! rewritten (a synced copy renamed over it) with the record's well-formed part in its place
//! (`record::salvage`), later records kept; then the check runs. `tests/acked.rs` is
//! issue 30's property test (`acknowledged_record_always_recovers`): `thor_sim::acked`'s
//! recovered and backup databases pass this check.
//!
//! `thor backup` (thor-cli `backup.rs`, over `backup_offline` and the server's `Backup` request) copies a database into a new directory: `--server ADDR
//! NAME` sends the `Backup` request, and the server writes the copy into `NAME` inside its
//! `--backup-dir` (`EngineOptions::backup_dir`; `io::resolve_backup_request` admits only relative
//! plain names) while it goes on serving; `--dir DB` opens a database no process holds (its lock) and copies it the same way
//! (`Engine::backup`). thor-cli's `tests/backup.rs` runs four transfer clients against a server process,
//! backs it up under that load, and checks that the copy passes `thor check`, opens, conserves
//! the money and holds exactly a committed prefix of the clients' histories: everything
//! acknowledged before the request, each included transaction whole and with what it read.
//!
//! *Architecture Invariant:* `thor check` (without `--repair`) never writes to a database: it holds the directory
//! lock (a running server makes it refuse, exit 2), writes nothing but the `LOCK` file's holder
//! text, and reads every other file through a `Disk` that opens read-only descriptors and refuses
//! every change. It never panics on bad bytes: everything is decoded by the checked decoders,
//! and a seeded randomized test runs it on damaged files. Its memory is 65 bytes per page plus
//! an entry per object written after the checkpoint, whatever the database's size.
//!
//! `thor compact SRC DST` (`compact.rs`) is `upgrade` with no class
//! changed: a closed database copied into a new directory without its unreachable objects.
//! thor-cli's `tests/compact.rs` checks that a compacted OO7 database answers the whole suite as the original
//! and passes `thor check`, that an upgraded one passes `thor check`, and SIGKILLs a compaction
//! while it writes: no destination, and the next run finishes.
//!

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
