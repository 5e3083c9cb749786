//! Changing a class: the offline upgrade of a database into a new directory.

use std::path::{Path, PathBuf};

use thor_client::Class;
use thor_client::thor_core::ClassDesc;

use crate::Error;

/// Rewrites a closed database into a new directory, giving classes the fields their
/// declarations appended: the supported way to change a class.
///
/// A class's stored layout follows from its [`class!`](crate::class) declaration, and objects
/// keep their size for life, so a program whose declaration differs from the stored class
/// gets [`ClientError::SchemaMismatch`](crate::ClientError::SchemaMismatch) from
/// [`Session::get`](crate::Session::get) and [`Session::create`](crate::Session::create)
/// (unless the stored class extends the declaration: more words after the declared fields,
/// none a reference, which a program reads and writes through its declaration; see
/// `thor_client::typed`). After an upgrade that appended fields that are not references,
/// programs with the old declaration can therefore still use the new database.
/// Appending fields is supported, offline:
///
/// 1. **Stop** every server and program that has the database open (`thor server`,
///    [`open`](crate::open)). The upgrade reads a closed database: it takes the directory's
///    lock, and fails with [`UpgradeError::SourceInUse`] while anything holds it.
/// 2. **Append** the new fields at the end of the class's field list in its declaration. Keep
///    the class name, and every existing field's type and place; keep the variable part
///    (`var bytes;`, `var refs<T>;`) as it was. Nothing else can be upgraded: a removed,
///    reordered or retyped field is refused with [`UpgradeError::Incompatible`] where the
///    stored layout can tell (see [`Incompatibility`]).
/// 3. **Run** the upgrade into a new directory: `Upgrade::new(old, new).class::<T>().run()`,
///    one `.class` per changed class, with the *new* declarations. Every object reachable
///    from the root is copied in the same order, instances of the upgraded classes with the
///    new fields zeroed: `0`, `false`, `None`, a null reference. The old directory is never
///    written; the new one appears only once complete, so an interrupted upgrade leaves
///    nothing at the destination (run it again).
/// 4. **Check** the result: `thor check NEW` (exit status 0), and read it with the new
///    program.
/// 5. **Point** the servers and programs at the new directory (or move the old one aside
///    and the new one into its place), and start them. Keep the old directory until the new
///    one has served for a while: it is the way back.
///
/// Objects nothing reachable from the root refers to are not copied, so the same tool
/// reclaims garbage: with no class given it only compacts ([`UpgradeReport::dropped`]).
///
/// ```
/// mod v1 {
///     thor::class! {
///         pub class Person("demo.Person") { age: u32, friend: thor::Ref<Person> }
///     }
/// }
/// mod v2 {
///     thor::class! {
///         // The same class with a field appended.
///         pub class Person("demo.Person") { age: u32, friend: thor::Ref<Person>, height: u32 }
///     }
/// }
///
/// # fn main() -> Result<(), thor::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let (old, new) = (dir.path().join("old"), dir.path().join("new"));
/// let s = thor::open(&old)?;
/// s.run(|s| {
///     let p = s.create_fixed::<v1::Person>()?;
///     p.set(v1::Person::age, 42)?;
///     s.set_root(0, p.as_ref())
/// })?;
/// drop(s); // closes the database
///
/// let report = thor::Upgrade::new(&old, &new).class::<v2::Person>().run()?;
/// assert_eq!(report.classes[0].instances, 1);
///
/// let s = thor::open(&new)?;
/// let (age, height) = s.run(|s| {
///     let p = s.get(s.root::<v2::Person>(0)?)?;
///     Ok::<_, thor::ClientError>((p.get(v2::Person::age), p.get(v2::Person::height)))
/// })?;
/// assert_eq!((age, height), (42, 0));
/// # Ok(()) }
/// ```
///
/// The work is [`thor_admin::upgrade()`]'s. Its module,
/// [`thor_admin::upgrade`](mod@thor_admin::upgrade), describes how it reads the committed
/// state (recovery runs in memory), its memory (about 6 MB per million objects) and its crash
/// safety.
#[derive(Debug, Clone)]
#[must_use = "an upgrade does nothing until `run`"]
pub struct Upgrade {
    /// The database to read.
    src: PathBuf,
    /// The directory to create.
    dst: PathBuf,
    /// The new descriptors of the classes to upgrade.
    classes: Vec<ClassDesc>,
    /// The first class given that has no declaration of its own to upgrade to (a built-in
    /// class, `Any`): `run` refuses it.
    not_declared: Option<&'static str>,
}

impl Upgrade {
    /// An upgrade of the closed database in `src` into the new directory `dst`, which must
    /// not exist; with no [`Upgrade::class`], a compaction.
    pub fn new(src: impl AsRef<Path>, dst: impl AsRef<Path>) -> Upgrade {
        Upgrade {
            src: src.as_ref().to_path_buf(),
            dst: dst.as_ref().to_path_buf(),
            classes: Vec::new(),
            not_declared: None,
        }
    }

    /// Upgrades the stored class named `C::NAME` to `C`'s layout: `C` is the new declaration,
    /// with fields appended.
    pub fn class<C: Class>(mut self) -> Upgrade {
        if C::BUILTIN.is_some() || C::ANY {
            self.not_declared.get_or_insert(C::NAME);
        } else {
            self.classes.push(C::desc());
        }
        self
    }

    /// Runs the upgrade (see [`Upgrade`] for the steps around it). Fails with
    /// [`Error::Upgrade`], and then nothing exists at the destination and the source is as it
    /// was.
    pub fn run(self) -> Result<UpgradeReport, Error> {
        if let Some(class) = self.not_declared {
            return Err(UpgradeError::BuiltinClass { class: class.to_string() }.into());
        }
        Ok(thor_admin::upgrade(&self.src, &self.dst, &self.classes)?)
    }
}

pub use thor_admin::upgrade::{ClassUpgrade, Incompatibility, UpgradeError, UpgradeReport};
