//! thor-history: the history checker. It proves a history of committed transactions
//! serializable, or names the anomaly that makes it not.
//!
//! It is a pure function of a [`History`] (and optionally the final state of the store); it
//! knows nothing of the server, and depends on nothing of thor. Its callers record what their
//! clients saw: the whole-cluster simulations (`thor-sim`'s `world` and `twopc`), the bank
//! clients of the laboratory (`thor-lab`'s `bank`, whose histories the process tests that kill
//! servers read back), and any real-network test.
//!
//! # The model
//!
//! The store is a map from objects ([`ObjId`]) to values. A transaction reads some objects and
//! writes some objects. The checker never sees values: it sees [`Version`]s, and it **assumes
//! every write is unique**: each write of an object stores a value never stored in that object
//! before (the simulation writes `(transaction, object)` encoded into every object it writes),
//! so the version a read returns names exactly the transaction whose write it saw. Version
//! [`INITIAL`] (0) is the value every object has before any transaction writes it; no
//! transaction writes it.
//!
//! A [`Txn`] lists its *external* reads (the version of each object it observed from the store;
//! a read of its own write is allowed and ignored) and its writes (the version of each object it
//! installed, at most one per object). Each transaction has one of three outcomes:
//!
//! - *committed*: its client was told so;
//! - *aborted*: its writes must never be seen by anyone;
//! - *uncertain*: the client sent the commit and never learned the outcome (a crash, a lost
//!   connection). The checker decides: if any of its writes was observed, by a read of a
//!   transaction that counts as committed or in the final state, it counts as committed (and
//!   then all its writes are installed); otherwise it counts as aborted. This is sound because
//!   an unobserved committed transaction is indistinguishable from an aborted one, except
//!   through its reads, and a transaction whose outcome nobody learned promised nothing.
//!
//! # What is proved
//!
//! [`check`] builds Adya's direct serialization graph (DSG) over the committed transactions and
//! proves it acyclic, which means the history is *conflict serializable*: there is a serial
//! order of the committed transactions (returned as [`Summary::serial_order`]) in which every
//! read returns the version of the latest preceding write. Before that it checks the cheap
//! things whose failure would make a graph meaningless or whose name is more useful than a
//! cycle: no read of a version nobody wrote ([`Anomaly::ReadOfUnknownWrite`]), no read of an
//! aborted write ([`Anomaly::ReadOfAbortedWrite`], Adya's G1a), no version written twice
//! ([`Anomaly::DuplicateWrite`]), no two committed transactions that both read the same version
//! of an object and both wrote it ([`Anomaly::LostUpdate`]). Given a final state, every object's
//! final version must be the last version in its version order
//! ([`Anomaly::FinalStateMismatch`]).
//!
//! # The version order
//!
//! The DSG needs, for each object, the order in which its committed versions were installed.
//! The history does not carry it; it is derived:
//!
//! - If every committed writer of an object has an *order key* ([`Txn::order`]: the server's
//!   serial position of the commit, e.g. its log LSN or its CLOCC timestamp), the versions are
//!   in order-key order. Two committed writers of one object with the same key are reported
//!   ([`Anomaly::DuplicateOrderKey`]).
//! - Otherwise the order comes from *read-modify-write chains*: a writer that read the object
//!   before writing it installed the version directly after the one it read (if it did not,
//!   the history is not serializable anyway: that is a lost update or a cycle). The chain that
//!   starts at [`INITIAL`] comes first. Each *blind* writer (one that wrote without reading)
//!   starts a further chain; one such chain follows the initial one; several are put in the
//!   order of their first writers' order keys, and if those are missing the order cannot be
//!   derived ([`Anomaly::UnorderedWrites`]).
//!
//! The order key only places *writes*; the checker does not assume it is a serial order of the
//! whole history. [`Summary::edges_against_order`] counts the dependencies that go backwards in
//! it, and [`Options::order_must_serialize`] makes any such edge an anomaly (with CLOCC's
//! timestamps, which are the serial order, it must be none).
//!
//! # The graph
//!
//! For an object with versions `v0 = INITIAL, v1, .., vn` installed by `W1 .. Wn`:
//! `Wk -ww-> Wk+1`; a committed `R` that read `vk` gets `Wk -wr-> R` (k ≥ 1) and, unless it
//! read the last version, `R -rw-> Wk+1` (the anti-dependency: `R` must come before the write
//! that replaced what it read). A cycle is found with Tarjan's algorithm (iterative, so a
//! 100,000-transaction history cannot overflow the stack), and the cycle reported is the
//! shortest found by a breadth-first search from a few of its members
//! ([`Anomaly::Cycle`]).
//!
//! Everything is linear in the number of reads and writes (hash maps, one pass each), apart
//! from sorting the objects and writers, and every result is deterministic: the same history
//! gives the same answer, whatever the hash maps do.
//!
//! [`replay_in_order`] replays the committed transactions in the serial order found, checking
//! every read again and an invariant of the caller's after each transaction;
//! [`check_conserved_total`] is the invariant of a bank: transfers keep the total balance.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::hash_map::Entry;
use std::fmt;

use rustc_hash::{FxHashMap, FxHashSet};

/// A transaction attempt. Unique in a history: a retried commit is a new attempt.
pub type TxnId = u64;
/// An object (e.g. an oref's raw value).
pub type ObjId = u64;
/// A version of an object: the unique value a write stored. [`INITIAL`] is the value before any
/// write.
pub type Version = u64;
/// The version every object has before any transaction writes it. No transaction writes it.
pub const INITIAL: Version = 0;

/// A transaction: what it read and what it wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Its identity, unique in the history.
    pub id: TxnId,
    /// The client that ran it (only reported, never used by the check).
    pub client: u32,
    /// Its position in the server's serial order of commits (the commit's log LSN, or its CLOCC
    /// timestamp), if known. Used to order the versions of objects; see the module
    /// documentation.
    pub order: Option<u64>,
    /// The versions it read from the store, `(object, version)`. Reading an object twice must
    /// give the same version (else there is a cycle); a read of its own write is ignored.
    pub reads: Vec<(ObjId, Version)>,
    /// The versions it installed, `(object, version)`, at most one per object.
    pub writes: Vec<(ObjId, Version)>,
}

impl Txn {
    /// A transaction of `client` with no reads, no writes and no order key.
    pub fn new(id: TxnId, client: u32) -> Self {
        Txn { id, client, ..Txn::default() }
    }

    /// Adds a read of version `version` of `obj`.
    #[must_use]
    pub fn read(mut self, obj: ObjId, version: Version) -> Self {
        self.reads.push((obj, version));
        self
    }

    /// Adds a write of version `version` of `obj`.
    #[must_use]
    pub fn write(mut self, obj: ObjId, version: Version) -> Self {
        self.writes.push((obj, version));
        self
    }

    /// Sets the order key.
    #[must_use]
    pub fn ordered(mut self, order: u64) -> Self {
        self.order = Some(order);
        self
    }
}

/// What the client learned of a transaction's commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The commit succeeded.
    Committed,
    /// The commit failed, or the transaction never tried: its writes must never be seen.
    Aborted,
    /// The client never learned; the checker decides (see the module documentation).
    Uncertain,
}

/// A history: transactions with their outcomes, in the order they were added (which is used
/// only to break ties deterministically).
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The transactions, in the order added.
    txns: Vec<Txn>,
    /// Each one's outcome.
    status: Vec<Status>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// Adds a transaction with outcome `status`.
    pub fn add(&mut self, txn: Txn, status: Status) {
        self.txns.push(txn);
        self.status.push(status);
    }

    /// Adds a committed transaction.
    pub fn add_committed(&mut self, txn: Txn) {
        self.add(txn, Status::Committed);
    }

    /// Adds an aborted transaction. Its reads are ignored; its writes must never be read (pass
    /// them, or a read of one is reported as a read of an unknown write instead).
    pub fn add_aborted(&mut self, txn: Txn) {
        self.add(txn, Status::Aborted);
    }

    /// Adds a transaction whose outcome its client never learned.
    pub fn add_uncertain(&mut self, txn: Txn) {
        self.add(txn, Status::Uncertain);
    }

    /// How many transactions it holds.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// Whether it holds no transactions.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// The transactions with their outcomes, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = (&Txn, Status)> + '_ {
        self.txns.iter().zip(self.status.iter().copied())
    }
}

/// The kind of a dependency between two committed transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// Write-write: `to` installed the version of the object directly after `from`'s.
    WriteWrite,
    /// Write-read: `to` read the version `from` installed.
    WriteRead,
    /// Read-write (anti-dependency): `from` read the version that `to`'s write replaced.
    ReadWrite,
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EdgeKind::WriteWrite => "ww",
            EdgeKind::WriteRead => "wr",
            EdgeKind::ReadWrite => "rw",
        })
    }
}

/// A dependency: `from` must come before `to` in any serial order, because of `obj`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Edge {
    /// The transaction that must come first.
    pub from: TxnId,
    /// The transaction that must come after.
    pub to: TxnId,
    /// Why.
    pub kind: EdgeKind,
    /// The object both used.
    pub obj: ObjId,
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -{}({})-> {}", self.from, self.kind, self.obj, self.to)
    }
}

/// Why a history is not serializable (or not a well-formed history). Each names the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// Two transactions of the history have the same id.
    DuplicateTxnId {
        /// The id.
        txn: TxnId,
    },
    /// A transaction wrote [`INITIAL`], which no transaction may write.
    WriteOfInitialVersion {
        /// The writer.
        txn: TxnId,
        /// The object.
        obj: ObjId,
    },
    /// A transaction lists two writes of one object.
    ObjectWrittenTwice {
        /// The writer.
        txn: TxnId,
        /// The object.
        obj: ObjId,
    },
    /// Two transactions wrote the same version of an object (the unique-write assumption is
    /// broken, or one commit was applied twice under two ids).
    DuplicateWrite {
        /// The object.
        obj: ObjId,
        /// The version.
        version: Version,
        /// The two writers, the first added first.
        writers: [TxnId; 2],
    },
    /// A committed transaction read a version no transaction of the history wrote.
    ReadOfUnknownWrite {
        /// The reader.
        reader: TxnId,
        /// The object.
        obj: ObjId,
        /// The version read.
        version: Version,
    },
    /// A committed transaction read the write of an aborted transaction (or of an uncertain
    /// one that counts as aborted, which cannot happen: a read makes it count as committed).
    ReadOfAbortedWrite {
        /// The reader.
        reader: TxnId,
        /// The aborted writer.
        writer: TxnId,
        /// The object.
        obj: ObjId,
        /// The version read.
        version: Version,
    },
    /// Two committed transactions both read the same version of an object and both wrote it:
    /// one overwrote the other's update without seeing it.
    LostUpdate {
        /// The object.
        obj: ObjId,
        /// The version both read.
        read: Version,
        /// The two writers, the first added first.
        writers: [TxnId; 2],
    },
    /// Two committed writers of one object have the same order key, so their versions cannot
    /// be ordered.
    DuplicateOrderKey {
        /// The object.
        obj: ObjId,
        /// The key.
        order: u64,
        /// The two writers, the first added first.
        writers: [TxnId; 2],
    },
    /// The version order of an object cannot be derived: some of its writers are blind and
    /// lack order keys (see the module documentation).
    UnorderedWrites {
        /// The object.
        obj: ObjId,
        /// The blind writers that start the chains that cannot be ordered.
        writers: Vec<TxnId>,
    },
    /// The dependency graph has a cycle: no serial order explains the reads.
    Cycle {
        /// The transactions of the cycle, each depending on the one before it and the first on
        /// the last.
        txns: Vec<TxnId>,
        /// The edges: `txns[i] -> txns[i + 1]`, and last `txns[last] -> txns[0]`.
        edges: Vec<Edge>,
    },
    /// The final state does not hold the last committed version of an object.
    FinalStateMismatch {
        /// The object.
        obj: ObjId,
        /// Its last committed version ([`INITIAL`] if no committed transaction wrote it).
        expected: Version,
        /// What the final state holds (`None`: it does not list the object).
        found: Option<Version>,
    },
    /// With [`Options::order_must_serialize`]: a dependency goes backwards in the order keys.
    EdgeAgainstOrder {
        /// The dependency.
        edge: Edge,
        /// The order key of `edge.from`.
        from_order: u64,
        /// The order key of `edge.to`, which is smaller.
        to_order: u64,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::DuplicateTxnId { txn } => write!(f, "transaction id {txn} appears twice"),
            Anomaly::WriteOfInitialVersion { txn, obj } => {
                write!(f, "txn {txn} wrote the initial version of object {obj}")
            }
            Anomaly::ObjectWrittenTwice { txn, obj } => {
                write!(f, "txn {txn} lists two writes of object {obj}")
            }
            Anomaly::DuplicateWrite { obj, version, writers } => write!(
                f,
                "version {version} of object {obj} written twice, by txns {} and {}",
                writers[0], writers[1]
            ),
            Anomaly::ReadOfUnknownWrite { reader, obj, version } => write!(
                f,
                "txn {reader} read version {version} of object {obj}, which no transaction wrote"
            ),
            Anomaly::ReadOfAbortedWrite { reader, writer, obj, version } => write!(
                f,
                "txn {reader} read version {version} of object {obj}, written by aborted txn {writer}"
            ),
            Anomaly::LostUpdate { obj, read, writers } => write!(
                f,
                "lost update: txns {} and {} both read version {read} of object {obj} and both wrote it",
                writers[0], writers[1]
            ),
            Anomaly::DuplicateOrderKey { obj, order, writers } => write!(
                f,
                "txns {} and {} both wrote object {obj} with order key {order}",
                writers[0], writers[1]
            ),
            Anomaly::UnorderedWrites { obj, writers } => write!(
                f,
                "the versions of object {obj} cannot be ordered: blind writers {writers:?} have no order keys"
            ),
            Anomaly::Cycle { txns, edges } => {
                write!(f, "dependency cycle of {} txns {txns:?}:", txns.len())?;
                for e in edges {
                    write!(f, " {e};")?;
                }
                Ok(())
            }
            Anomaly::FinalStateMismatch { obj, expected, found } => match found {
                Some(v) => write!(
                    f,
                    "final state holds version {v} of object {obj}, expected the last committed version {expected}"
                ),
                None => write!(
                    f,
                    "final state lacks object {obj}, expected its last committed version {expected}"
                ),
            },
            Anomaly::EdgeAgainstOrder { edge, from_order, to_order } => write!(
                f,
                "dependency {edge} goes against the order keys ({from_order} > {to_order})"
            ),
        }
    }
}

impl std::error::Error for Anomaly {}

/// Stricter checks than serializability, asked for with [`check_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Every dependency between two transactions that both have order keys must go forward in
    /// them ([`Anomaly::EdgeAgainstOrder`] otherwise): the order keys are themselves a serial
    /// order (true of CLOCC's timestamps).
    pub order_must_serialize: bool,
}

/// What a successful check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Transactions that count as committed (including uncertain ones that do).
    pub committed: usize,
    /// Transactions added as aborted.
    pub aborted: usize,
    /// The uncertain transactions that count as committed, in the order added.
    pub uncertain_committed: Vec<TxnId>,
    /// How many uncertain transactions count as aborted.
    pub uncertain_aborted: usize,
    /// Reads of committed transactions checked (reads of their own writes excluded).
    pub reads: usize,
    /// Versions installed by committed transactions.
    pub writes: usize,
    /// Objects written by committed transactions.
    pub objects: usize,
    /// Dependency edges in the graph (a pair may be counted more than once).
    pub edges: usize,
    /// How many edges go from a transaction with a larger order key to one with a smaller one
    /// (0 when the order keys are a serial order).
    pub edges_against_order: usize,
    /// A serial order of the committed transactions equivalent to the history: the order keys'
    /// order where the dependencies allow it, then the order added.
    pub serial_order: Vec<TxnId>,
}

/// Checks that `h` is serializable and, if given, that `final_state` holds every object's last
/// committed version. See the module documentation.
pub fn check(h: &History, final_state: Option<&[(ObjId, Version)]>) -> Result<Summary, Anomaly> {
    check_with(h, final_state, &Options::default())
}

/// [`check`], with stricter [`Options`].
pub fn check_with(
    h: &History,
    final_state: Option<&[(ObjId, Version)]>,
    options: &Options,
) -> Result<Summary, Anomaly> {
    Checker::new(h).run(final_state, options)
}

/// Where a version was written.
#[derive(Debug, Clone, Copy)]
struct WriteInfo {
    /// The writer's index in the history.
    txn: u32,
    /// Its slot in its object's committed writers (`u32::MAX` until placed).
    slot: u32,
    /// Its position in the object's version order, from 1 (0 until placed).
    pos: u32,
}

/// A committed writer of an object.
#[derive(Debug, Clone, Copy)]
struct Writer {
    /// Its index in the history.
    txn: u32,
    /// The version it installed.
    version: Version,
    /// The version of the object it read first, if it read the object.
    read: Option<Version>,
}

/// One object's committed writers.
#[derive(Debug, Default)]
struct Object {
    /// In the order added.
    writers: Vec<Writer>,
    /// Slots of `writers` in version order.
    order: Vec<u32>,
}

/// An edge in the graph, stored at its source.
#[derive(Debug, Clone, Copy)]
struct Arc {
    /// The target's index in the history.
    to: u32,
    /// Why.
    kind: EdgeKind,
    /// Because of which object.
    obj: ObjId,
}

/// The working state of one check.
#[derive(Debug)]
struct Checker<'h> {
    /// The history.
    h: &'h History,
    /// Whether each transaction counts as committed.
    committed: Vec<bool>,
    /// Every version written, by any transaction.
    writes: FxHashMap<(ObjId, Version), WriteInfo>,
    /// The objects committed transactions wrote.
    objects: FxHashMap<ObjId, Object>,
    /// `(object, version read)` to the slot of the committed writer of the object that read
    /// that version first.
    rmw: FxHashMap<(ObjId, Version), u32>,
    /// The objects, sorted, so that results do not depend on hash order.
    sorted_objects: Vec<ObjId>,
}

impl<'h> Checker<'h> {
    /// A checker of `h`, with nothing computed yet.
    fn new(h: &'h History) -> Self {
        Checker {
            h,
            committed: Vec::new(),
            writes: FxHashMap::default(),
            objects: FxHashMap::default(),
            rmw: FxHashMap::default(),
            sorted_objects: Vec::new(),
        }
    }

    /// The id of the transaction at index `i`.
    fn id(&self, i: u32) -> TxnId {
        self.h.txns[i as usize].id
    }

    /// Runs every check in turn; the first anomaly found is the answer.
    fn run(
        mut self,
        final_state: Option<&[(ObjId, Version)]>,
        options: &Options,
    ) -> Result<Summary, Anomaly> {
        assert!(self.h.txns.len() < u32::MAX as usize, "history too large");
        self.index_writes()?;
        let mut summary = self.resolve_uncertain(final_state);
        summary.reads = self.check_reads()?;
        self.collect_writers()?;
        for i in 0..self.sorted_objects.len() {
            self.order_versions(self.sorted_objects[i])?;
        }
        summary.objects = self.objects.len();
        summary.writes = self.objects.values().map(|o| o.writers.len()).sum();
        if let Some(fs) = final_state {
            self.check_final_state(fs)?;
        }
        self.check_graph(&mut summary, options)?;
        Ok(summary)
    }

    /// Indexes every write of every transaction; checks ids and writes are unique.
    fn index_writes(&mut self) -> Result<(), Anomaly> {
        let h = self.h;
        let mut ids = FxHashSet::default();
        ids.reserve(h.txns.len());
        let mut objs = FxHashSet::default();
        for (i, t) in h.txns.iter().enumerate() {
            if !ids.insert(t.id) {
                return Err(Anomaly::DuplicateTxnId { txn: t.id });
            }
            objs.clear();
            for &(obj, version) in &t.writes {
                if !objs.insert(obj) {
                    return Err(Anomaly::ObjectWrittenTwice { txn: t.id, obj });
                }
                if version == INITIAL {
                    return Err(Anomaly::WriteOfInitialVersion { txn: t.id, obj });
                }
                match self.writes.entry((obj, version)) {
                    Entry::Occupied(e) => {
                        let first = h.txns[e.get().txn as usize].id;
                        return Err(Anomaly::DuplicateWrite {
                            obj,
                            version,
                            writers: [first, t.id],
                        });
                    }
                    Entry::Vacant(e) => {
                        e.insert(WriteInfo { txn: i as u32, slot: u32::MAX, pos: 0 });
                    }
                }
            }
        }
        Ok(())
    }

    /// Decides which uncertain transactions count as committed: those whose writes were
    /// observed by a committed transaction (transitively) or the final state.
    fn resolve_uncertain(&mut self, final_state: Option<&[(ObjId, Version)]>) -> Summary {
        let h = self.h;
        self.committed = h.status.iter().map(|&s| s == Status::Committed).collect();
        let mut work: Vec<u32> =
            (0..h.txns.len() as u32).filter(|&i| self.committed[i as usize]).collect();
        let observe = |committed: &mut Vec<bool>, work: &mut Vec<u32>, obj, version| {
            if let Some(w) = self.writes.get(&(obj, version)) {
                let t = w.txn as usize;
                if h.status[t] == Status::Uncertain && !committed[t] {
                    committed[t] = true;
                    work.push(w.txn);
                }
            }
        };
        for &(obj, version) in final_state.unwrap_or(&[]) {
            observe(&mut self.committed, &mut work, obj, version);
        }
        while let Some(i) = work.pop() {
            for &(obj, version) in &h.txns[i as usize].reads {
                observe(&mut self.committed, &mut work, obj, version);
            }
        }
        let mut summary = Summary::default();
        for (i, &s) in h.status.iter().enumerate() {
            match (s, self.committed[i]) {
                (Status::Committed, _) => summary.committed += 1,
                (Status::Aborted, _) => summary.aborted += 1,
                (Status::Uncertain, true) => {
                    summary.committed += 1;
                    summary.uncertain_committed.push(h.txns[i].id);
                }
                (Status::Uncertain, false) => summary.uncertain_aborted += 1,
            }
        }
        summary
    }

    /// Whether the read `(obj, version)` of transaction `i` is of its own write.
    fn is_own(&self, i: u32, obj: ObjId, version: Version) -> bool {
        version != INITIAL && self.writes.get(&(obj, version)).is_some_and(|w| w.txn == i)
    }

    /// Every read of a committed transaction is of the initial version, its own write, or a
    /// committed write. Returns how many reads were checked.
    fn check_reads(&self) -> Result<usize, Anomaly> {
        let mut n = 0;
        for (i, t) in self.h.txns.iter().enumerate() {
            if !self.committed[i] {
                continue;
            }
            for &(obj, version) in &t.reads {
                if version == INITIAL {
                    n += 1;
                    continue;
                }
                match self.writes.get(&(obj, version)) {
                    None => return Err(Anomaly::ReadOfUnknownWrite { reader: t.id, obj, version }),
                    Some(w) if w.txn as usize == i => {}
                    Some(w) if !self.committed[w.txn as usize] => {
                        return Err(Anomaly::ReadOfAbortedWrite {
                            reader: t.id,
                            writer: self.id(w.txn),
                            obj,
                            version,
                        });
                    }
                    Some(_) => n += 1,
                }
            }
        }
        Ok(n)
    }

    /// Collects each object's committed writers, with the version each read first, and finds
    /// lost updates (two committed writers that read the same version).
    fn collect_writers(&mut self) -> Result<(), Anomaly> {
        let h = self.h;
        let mut first_read: FxHashMap<ObjId, Version> = FxHashMap::default();
        for (i, t) in h.txns.iter().enumerate() {
            if !self.committed[i] || t.writes.is_empty() {
                continue;
            }
            first_read.clear();
            for &(obj, version) in &t.reads {
                if !self.is_own(i as u32, obj, version) {
                    first_read.entry(obj).or_insert(version);
                }
            }
            for &(obj, version) in &t.writes {
                let read = first_read.get(&obj).copied();
                let o = self.objects.entry(obj).or_default();
                let slot = o.writers.len() as u32;
                o.writers.push(Writer { txn: i as u32, version, read });
                if let Some(w) = self.writes.get_mut(&(obj, version)) {
                    w.slot = slot;
                }
                if let Some(r) = read {
                    match self.rmw.entry((obj, r)) {
                        Entry::Occupied(e) => {
                            let first = h.txns[o.writers[*e.get() as usize].txn as usize].id;
                            return Err(Anomaly::LostUpdate {
                                obj,
                                read: r,
                                writers: [first, t.id],
                            });
                        }
                        Entry::Vacant(e) => {
                            e.insert(slot);
                        }
                    }
                }
            }
        }
        self.sorted_objects = self.objects.keys().copied().collect();
        self.sorted_objects.sort_unstable();
        Ok(())
    }

    /// Puts the committed versions of `obj` in order (see the module documentation) and
    /// records each one's position.
    fn order_versions(&mut self, obj: ObjId) -> Result<(), Anomaly> {
        let h = self.h;
        let o = self.objects.get(&obj).expect("object collected");
        let ws = &o.writers;
        let key = |slot: u32| h.txns[ws[slot as usize].txn as usize].order;
        let mut order: Vec<u32> = Vec::with_capacity(ws.len());
        if ws.iter().all(|w| h.txns[w.txn as usize].order.is_some()) {
            order.extend(0..ws.len() as u32);
            // Stable, so equal keys keep the order added and the report is deterministic.
            order.sort_by_key(|&s| key(s));
            for pair in order.windows(2) {
                if key(pair[0]) == key(pair[1]) {
                    let (a, b) = (ws[pair[0] as usize].txn, ws[pair[1] as usize].txn);
                    return Err(Anomaly::DuplicateOrderKey {
                        obj,
                        order: key(pair[0]).unwrap_or_default(),
                        writers: [self.id(a), self.id(b)],
                    });
                }
            }
        } else {
            // Read-modify-write chains: from INITIAL, then from each blind writer.
            let chain = |order: &mut Vec<u32>, mut version: Version| {
                while let Some(&slot) = self.rmw.get(&(obj, version)) {
                    if order.len() > ws.len() {
                        break; // Cannot happen (each version has one successor); be safe.
                    }
                    order.push(slot);
                    version = ws[slot as usize].version;
                }
            };
            chain(&mut order, INITIAL);
            let mut heads: Vec<u32> =
                (0..ws.len() as u32).filter(|&s| ws[s as usize].read.is_none()).collect();
            if heads.len() > 1 {
                if heads.iter().all(|&s| key(s).is_some()) {
                    heads.sort_by_key(|&s| key(s));
                } else {
                    return Err(Anomaly::UnorderedWrites {
                        obj,
                        writers: heads.iter().map(|&s| self.id(ws[s as usize].txn)).collect(),
                    });
                }
            }
            for &head in &heads {
                order.push(head);
                chain(&mut order, ws[head as usize].version);
            }
            if order.len() < ws.len() {
                return Err(self.read_cycle(obj, &order));
            }
        }
        for (k, &slot) in order.iter().enumerate() {
            let version = ws[slot as usize].version;
            if let Some(w) = self.writes.get_mut(&(obj, version)) {
                w.pos = k as u32 + 1;
            }
        }
        self.objects.get_mut(&obj).expect("object collected").order = order;
        Ok(())
    }

    /// The writers of `obj` not reached by its chains each read a version of `obj` written by
    /// another such writer, so following what they read goes round a cycle of wr edges.
    fn read_cycle(&self, obj: ObjId, reached: &[u32]) -> Anomaly {
        let ws = &self.objects[&obj].writers;
        let mut seen = vec![false; ws.len()];
        for &s in reached {
            seen[s as usize] = true;
        }
        let start = (0..ws.len()).find(|&s| !seen[s]).expect("an unreached writer");
        // Walk backwards along reads until a writer repeats.
        let mut path: Vec<usize> = Vec::new();
        let mut at_step = vec![usize::MAX; ws.len()];
        let mut s = start;
        while at_step[s] == usize::MAX {
            at_step[s] = path.len();
            path.push(s);
            let read = ws[s].read.expect("an unreached writer read the object");
            s = self.writes[&(obj, read)].slot as usize;
        }
        // path[at_step[s]..] is the cycle, each member reading its successor's write; reverse
        // it so each depends on the one before.
        let mut cycle: Vec<usize> = path[at_step[s]..].to_vec();
        cycle.reverse();
        // Start at the member added first, as the graph's cycles do.
        let first = (0..cycle.len()).min_by_key(|&k| ws[cycle[k]].txn).unwrap_or(0);
        cycle.rotate_left(first);
        let txns: Vec<TxnId> = cycle.iter().map(|&s| self.id(ws[s].txn)).collect();
        let edges = (0..txns.len())
            .map(|k| Edge {
                from: txns[k],
                to: txns[(k + 1) % txns.len()],
                kind: EdgeKind::WriteRead,
                obj,
            })
            .collect();
        Anomaly::Cycle { txns, edges }
    }

    /// Each object's final version is its last committed one.
    fn check_final_state(&self, fs: &[(ObjId, Version)]) -> Result<(), Anomaly> {
        let last = |obj: ObjId| match self.objects.get(&obj) {
            Some(o) => o.writers[*o.order.last().expect("a writer") as usize].version,
            None => INITIAL,
        };
        let mut listed: FxHashSet<ObjId> = FxHashSet::default();
        for &(obj, version) in fs {
            listed.insert(obj);
            let expected = last(obj);
            if version != expected {
                return Err(Anomaly::FinalStateMismatch { obj, expected, found: Some(version) });
            }
        }
        for &obj in &self.sorted_objects {
            if !listed.contains(&obj) {
                return Err(Anomaly::FinalStateMismatch { obj, expected: last(obj), found: None });
            }
        }
        Ok(())
    }

    /// Builds the dependency graph, orders it, and finds a cycle if there is one.
    fn check_graph(&self, summary: &mut Summary, options: &Options) -> Result<(), Anomaly> {
        let h = self.h;
        let n = h.txns.len();
        let mut edges: Vec<(u32, Arc)> = Vec::new();
        for &obj in &self.sorted_objects {
            let o = &self.objects[&obj];
            for pair in o.order.windows(2) {
                let (a, b) = (o.writers[pair[0] as usize].txn, o.writers[pair[1] as usize].txn);
                edges.push((a, Arc { to: b, kind: EdgeKind::WriteWrite, obj }));
            }
        }
        for (i, t) in h.txns.iter().enumerate() {
            if !self.committed[i] {
                continue;
            }
            let i = i as u32;
            for &(obj, version) in &t.reads {
                let Some(o) = self.objects.get(&obj) else { continue };
                let k = if version == INITIAL {
                    0
                } else {
                    let w = self.writes[&(obj, version)];
                    if w.txn == i {
                        continue; // Its own write.
                    }
                    w.pos as usize
                };
                if k > 0 {
                    let writer = o.writers[o.order[k - 1] as usize].txn;
                    edges.push((writer, Arc { to: i, kind: EdgeKind::WriteRead, obj }));
                }
                if let Some(&next) = o.order.get(k) {
                    let next = o.writers[next as usize].txn;
                    if next != i {
                        edges.push((i, Arc { to: next, kind: EdgeKind::ReadWrite, obj }));
                    }
                }
            }
        }
        summary.edges = edges.len();
        let key = |i: u32| h.txns[i as usize].order;
        for &(from, arc) in &edges {
            if let (Some(a), Some(b)) = (key(from), key(arc.to))
                && a > b
            {
                summary.edges_against_order += 1;
                if options.order_must_serialize {
                    let edge = Edge {
                        from: self.id(from),
                        to: self.id(arc.to),
                        kind: arc.kind,
                        obj: arc.obj,
                    };
                    return Err(Anomaly::EdgeAgainstOrder { edge, from_order: a, to_order: b });
                }
            }
        }
        let g = Graph::new(n, &edges);
        // Kahn's algorithm, taking the smallest (order key, index added) among the ready.
        let mut indegree = vec![0u32; n];
        for (_, arc) in &edges {
            indegree[arc.to as usize] += 1;
        }
        let prio = |i: u32| (key(i).unwrap_or(u64::MAX), i);
        let mut ready: BinaryHeap<Reverse<(u64, u32)>> = (0..n as u32)
            .filter(|&i| self.committed[i as usize] && indegree[i as usize] == 0)
            .map(|i| Reverse(prio(i)))
            .collect();
        let mut order = Vec::with_capacity(summary.committed);
        while let Some(Reverse((_, i))) = ready.pop() {
            order.push(h.txns[i as usize].id);
            for arc in g.out(i) {
                let d = &mut indegree[arc.to as usize];
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse(prio(arc.to)));
                }
            }
        }
        if order.len() < summary.committed {
            let alive: Vec<bool> = (0..n).map(|i| self.committed[i] && indegree[i] > 0).collect();
            let (txns, arcs) = g.shortest_cycle(&alive);
            let txns_ids: Vec<TxnId> = txns.iter().map(|&i| self.id(i)).collect();
            let edges = txns
                .iter()
                .zip(&arcs)
                .map(|(&from, arc)| Edge {
                    from: self.id(from),
                    to: self.id(arc.to),
                    kind: arc.kind,
                    obj: arc.obj,
                })
                .collect();
            return Err(Anomaly::Cycle { txns: txns_ids, edges });
        }
        summary.serial_order = order;
        Ok(())
    }
}

/// A directed graph in compressed sparse row form: the arcs of node `v` are
/// `arcs[start[v]..start[v + 1]]`.
#[derive(Debug)]
struct Graph {
    /// Where each node's arcs start, plus the end.
    start: Vec<u32>,
    /// The arcs, grouped by source, each group in the order given.
    arcs: Vec<Arc>,
}

/// "Not yet" in the per-node arrays of [`Graph::shortest_cycle`].
const NONE: u32 = u32::MAX;

/// How many breadth-first searches [`Graph::shortest_cycle`] runs at most.
const CYCLE_SEARCHES: usize = 32;

impl Graph {
    /// The graph of `n` nodes with `edges`, each `(source, arc)`.
    fn new(n: usize, edges: &[(u32, Arc)]) -> Self {
        let mut start = vec![0u32; n + 1];
        for &(from, _) in edges {
            start[from as usize + 1] += 1;
        }
        for v in 0..n {
            start[v + 1] += start[v];
        }
        let mut fill = start.clone();
        let placeholder = Arc { to: 0, kind: EdgeKind::WriteWrite, obj: 0 };
        let mut arcs = vec![placeholder; edges.len()];
        for &(from, arc) in edges {
            arcs[fill[from as usize] as usize] = arc;
            fill[from as usize] += 1;
        }
        Graph { start, arcs }
    }

    /// The arcs leaving `v`.
    fn out(&self, v: u32) -> &[Arc] {
        &self.arcs[self.start[v as usize] as usize..self.start[v as usize + 1] as usize]
    }

    /// A short cycle among the `alive` nodes, which must contain one: its nodes, and the arc
    /// leaving each (the last arc returns to the first node).
    fn shortest_cycle(&self, alive: &[bool]) -> (Vec<u32>, Vec<Arc>) {
        let comp = self.components(alive);
        // The members of each non-trivial component, smallest components first.
        let mut members: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for (v, &c) in comp.iter().enumerate() {
            if c != NONE {
                members.entry(c).or_default().push(v as u32);
            }
        }
        let mut comps: Vec<Vec<u32>> = members.into_values().filter(|m| m.len() > 1).collect();
        comps.sort_by_key(|m| (m.len(), m[0]));
        let mut best: Option<(Vec<u32>, Vec<Arc>)> = None;
        let mut parent = vec![(NONE, 0u32); alive.len()];
        let mut searches = 0;
        'search: for m in &comps {
            for &s in m {
                if searches == CYCLE_SEARCHES || best.as_ref().is_some_and(|b| b.0.len() <= 2) {
                    break 'search;
                }
                searches += 1;
                if let Some(c) = self.cycle_through(s, &comp, &mut parent)
                    && best.as_ref().is_none_or(|b| c.0.len() < b.0.len())
                {
                    best = Some(c);
                }
            }
        }
        best.expect("a non-trivial component has a cycle through each member")
    }

    /// The shortest cycle through `s` inside its component (breadth-first). `parent` is
    /// scratch space, all `(NONE, _)` on entry and on return.
    fn cycle_through(
        &self,
        s: u32,
        comp: &[u32],
        parent: &mut [(u32, u32)],
    ) -> Option<(Vec<u32>, Vec<Arc>)> {
        let c = comp[s as usize];
        let mut queue = std::collections::VecDeque::from([s]);
        let mut touched = vec![s];
        parent[s as usize] = (s, 0);
        let mut found = None;
        'bfs: while let Some(v) = queue.pop_front() {
            let base = self.start[v as usize];
            for (k, arc) in self.out(v).iter().enumerate() {
                if comp[arc.to as usize] != c {
                    continue;
                }
                if arc.to == s {
                    found = Some((v, base + k as u32));
                    break 'bfs;
                }
                if parent[arc.to as usize].0 == NONE {
                    parent[arc.to as usize] = (v, base + k as u32);
                    touched.push(arc.to);
                    queue.push_back(arc.to);
                }
            }
        }
        let result = found.map(|(last, closing)| {
            let mut nodes = vec![last];
            let mut arcs = vec![self.arcs[closing as usize]];
            let mut v = last;
            while v != s {
                let (p, a) = parent[v as usize];
                nodes.push(p);
                arcs.push(self.arcs[a as usize]);
                v = p;
            }
            nodes.reverse();
            arcs.reverse();
            // arcs[i] now leaves nodes[i]: the arc into nodes[i + 1], the last closing at s.
            (nodes, arcs)
        });
        for v in touched {
            parent[v as usize] = (NONE, 0);
        }
        result
    }

    /// Tarjan's strongly connected components of the `alive` nodes, iteratively: each alive
    /// node's component number (`NONE` for the others).
    fn components(&self, alive: &[bool]) -> Vec<u32> {
        let n = alive.len();
        let mut index = vec![NONE; n];
        let mut low = vec![0u32; n];
        let mut on_stack = vec![false; n];
        let mut comp = vec![NONE; n];
        let mut stack: Vec<u32> = Vec::new();
        let mut calls: Vec<(u32, u32)> = Vec::new();
        let (mut next_index, mut next_comp) = (0u32, 0u32);
        for root in 0..n as u32 {
            if !alive[root as usize] || index[root as usize] != NONE {
                continue;
            }
            index[root as usize] = next_index;
            low[root as usize] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root as usize] = true;
            calls.push((root, self.start[root as usize]));
            while let Some(&mut (v, ref mut e)) = calls.last_mut() {
                if *e < self.start[v as usize + 1] {
                    let w = self.arcs[*e as usize].to;
                    *e += 1;
                    if !alive[w as usize] {
                        continue;
                    }
                    if index[w as usize] == NONE {
                        index[w as usize] = next_index;
                        low[w as usize] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w as usize] = true;
                        calls.push((w, self.start[w as usize]));
                    } else if on_stack[w as usize] {
                        low[v as usize] = low[v as usize].min(index[w as usize]);
                    }
                } else {
                    calls.pop();
                    if let Some(&(p, _)) = calls.last() {
                        low[p as usize] = low[p as usize].min(low[v as usize]);
                    }
                    if low[v as usize] == index[v as usize] {
                        loop {
                            let w = stack.pop().expect("v is on the stack");
                            on_stack[w as usize] = false;
                            comp[w as usize] = next_comp;
                            if w == v {
                                break;
                            }
                        }
                        next_comp += 1;
                    }
                }
            }
        }
        comp
    }
}

/// What one transaction did to one object, in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The object.
    pub obj: ObjId,
    /// Its version before the transaction.
    pub before: Version,
    /// Its version after.
    pub after: Version,
}

/// The store during a replay: each object's current version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// Objects not listed are at [`INITIAL`].
    versions: FxHashMap<ObjId, Version>,
}

impl State {
    /// The current version of `obj`.
    pub fn get(&self, obj: ObjId) -> Version {
        self.versions.get(&obj).copied().unwrap_or(INITIAL)
    }

    /// The objects written so far, with their current versions, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (ObjId, Version)> + '_ {
        self.versions.iter().map(|(&o, &v)| (o, v))
    }

    /// The objects written so far, sorted: comparable with a final state.
    pub fn to_sorted_vec(&self) -> Vec<(ObjId, Version)> {
        let mut v: Vec<_> = self.iter().collect();
        v.sort_unstable();
        v
    }
}

/// One step of a replay: a transaction just applied.
#[derive(Debug)]
pub struct Step<'a> {
    /// Its position in the serial order, from 0.
    pub position: usize,
    /// The transaction.
    pub txn: &'a Txn,
    /// What it changed.
    pub changes: &'a [Change],
    /// The store after it.
    pub state: &'a State,
}

/// Why a replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError<E> {
    /// The serial order names a transaction the history does not hold.
    UnknownTxn {
        /// Its id.
        txn: TxnId,
    },
    /// A transaction read a version that was not current at its place in the serial order
    /// (cannot happen with a serial order from [`check`] of the same history).
    ReadMismatch {
        /// The reader.
        txn: TxnId,
        /// The object.
        obj: ObjId,
        /// The version it read.
        read: Version,
        /// The version current in the replay.
        current: Version,
    },
    /// The caller's invariant failed after a transaction.
    Invariant {
        /// The transaction.
        txn: TxnId,
        /// Its position in the serial order.
        position: usize,
        /// What the invariant said.
        error: E,
    },
}

impl<E: fmt::Display> fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::UnknownTxn { txn } => write!(f, "txn {txn} is not in the history"),
            ReplayError::ReadMismatch { txn, obj, read, current } => write!(
                f,
                "txn {txn} read version {read} of object {obj}, but the replay has version {current}"
            ),
            ReplayError::Invariant { txn, position, error } => {
                write!(f, "after txn {txn} (serial position {position}): {error}")
            }
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for ReplayError<E> {}

/// Replays the committed transactions of `h` in `summary`'s serial order (from [`check`] of the
/// same history), from the state where every object is at [`INITIAL`]. Checks every read
/// returns the current version, and calls `invariant` after each transaction. Returns the
/// final state.
pub fn replay_in_order<E>(
    h: &History,
    summary: &Summary,
    mut invariant: impl FnMut(&Step<'_>) -> Result<(), E>,
) -> Result<State, ReplayError<E>> {
    let by_id: FxHashMap<TxnId, usize> =
        h.txns.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let mut state = State::default();
    let mut changes = Vec::new();
    let mut own: FxHashSet<(ObjId, Version)> = FxHashSet::default();
    for (position, &id) in summary.serial_order.iter().enumerate() {
        let txn = &h.txns[*by_id.get(&id).ok_or(ReplayError::UnknownTxn { txn: id })?];
        own.clear();
        own.extend(txn.writes.iter().copied());
        for &(obj, read) in &txn.reads {
            let current = state.get(obj);
            if read != current && !own.contains(&(obj, read)) {
                return Err(ReplayError::ReadMismatch { txn: id, obj, read, current });
            }
        }
        changes.clear();
        for &(obj, after) in &txn.writes {
            let before = state.versions.insert(obj, after).unwrap_or(INITIAL);
            changes.push(Change { obj, before, after });
        }
        let step = Step { position, txn, changes: &changes, state: &state };
        invariant(&step).map_err(|error| ReplayError::Invariant { txn: id, position, error })?;
    }
    Ok(state)
}

/// The bank invariant: replays the committed transactions of `h` in `summary`'s serial order
/// and checks that after each one the total of `balance(account, version)` over `accounts` is
/// what it was initially (every account at [`INITIAL`]). Objects not in `accounts` are
/// ignored. Returns the total.
pub fn check_conserved_total(
    h: &History,
    summary: &Summary,
    accounts: &[ObjId],
    balance: impl Fn(ObjId, Version) -> i64,
) -> Result<i128, ReplayError<String>> {
    let accounts: FxHashSet<ObjId> = accounts.iter().copied().collect();
    let initial: i128 = accounts.iter().map(|&a| i128::from(balance(a, INITIAL))).sum();
    let mut total = initial;
    replay_in_order(h, summary, |step| {
        for c in step.changes.iter().filter(|c| accounts.contains(&c.obj)) {
            total += i128::from(balance(c.obj, c.after)) - i128::from(balance(c.obj, c.before));
        }
        if total == initial { Ok(()) } else { Err(format!("total is {total}, was {initial}")) }
    })?;
    Ok(total)
}
