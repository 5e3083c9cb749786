//! Sessions over several servers: objects that live at different servers, references between
//! them through surrogates, and transactions that commit atomically at all of them
//! (thor-ecoop99 sections 3.1 and 4.2).
//!
//! A [`Cluster`] has one [`Session`] per server it uses, opened on first need through the
//! application's connector; each has its own cache, directory and invalid set at its server,
//! and its own piggybacked invalidations. Each session reconnects through the connector by
//! itself when its connection breaks (`crate::session::reconnect`); a cluster of replicated
//! servers ([`Cluster::with_groups`]) gives each server's session its group, which it follows
//! to the leader ([`crate::group`]). A transaction open then
//! is aborted ([`crate::ConflictCause::Disconnected`], which [`Cluster::run`] retries), and
//! a commit at one server learns its outcome as a session's does. A two-phase commit whose
//! answers were lost is reported [`ClientError::CommitUnknown`]: its outcome is not asked
//! for (read what it wrote to find out). A transaction spans them: what it reads and writes at
//! each server is that session's part. [`Cluster::commit`] commits a transaction that used one
//! server as that session's commit (no two-phase commit), and one that used several with
//! two-phase commit: it chooses the timestamp, sends a `Prepare` to every participant at once
//! (the first writing one, the home server if it writes, coordinates), waits for every answer,
//! and applies the coordinator's decision to every part. A transaction that wrote nothing needs
//! every participant's `Prepared`.
//!
//! # Surrogates
//!
//! An object refers to an object at another server through a *surrogate* at its own server: a
//! small object of class `thor.Surrogate` holding the target's server id and oref.
//! [`Cluster::resolve`] (and [`Cluster::get`], which uses it) follows a surrogate to its target
//! transparently, so an application reads a reference field into an [`XRef`] and gets the
//! object wherever it lives. [`Cluster::refer`] makes the reference to store in a field: the
//! target's own reference at the same server, else a surrogate, reused if this cluster made
//! one for that target before and created in the current transaction otherwise. The target
//! must exist already (a committed object), since its oref is what the surrogate holds.
//!
//! # Limits, stated
//!
//! Each server's session has its own cache of `SessionConfig::cache_bytes`: memory grows with
//! the number of servers used, where the paper's client shares one cache. A surrogate made
//! by another client is not reused (each cluster remembers its own), so two clients pointing at
//! one remote object make two surrogates; equal targets are still equal objects.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use thor_core::{Lsn, Oref, ServerId};
use thor_wire::{CLIENT_TIE_BIT, Participant, Stamp, Transport};

use crate::error::{ClientError, ConflictCause};
use crate::proto::PartOutcome;
use crate::session::{CommitInfo, Failed, PartReply, PrepareHeader, Session, SessionConfig, View};
use crate::typed::{Class, Ref};

crate::class! {
    /// A reference to an object at another server (thor-ecoop99 section 3.1).
    pub class Surrogate("thor.Surrogate") {
        /// The target's server.
        server: u32,
        /// The target's oref at that server.
        oref: u32,
    }
}

/// A reference to an object at some server of a cluster.
#[derive(Debug)]
pub struct XRef<T: ?Sized> {
    /// The server the reference belongs to.
    pub server: ServerId,
    /// The reference, in that server's session.
    pub r: Ref<T>,
}

impl<T: ?Sized> Clone for XRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for XRef<T> {}

impl<T: ?Sized> XRef<T> {
    /// `r` of the session of `server`.
    pub fn at(server: ServerId, r: Ref<T>) -> XRef<T> {
        XRef { server, r }
    }
}

/// Opens a transport to a server of the cluster: the first connection of its session, and a
/// new one whenever that connection breaks (from the session's thread, hence `Send`).
pub type Connector = Box<dyn FnMut(ServerId) -> Result<Box<dyn Transport>, ClientError> + Send>;

/// Opens a transport to a replica of a server of the cluster ([`Cluster::with_groups`]): the
/// server's id and the replica's (`None` for a server that is not a replica group).
pub type GroupConnector =
    Box<dyn FnMut(ServerId, Option<u64>) -> Result<Box<dyn Transport>, ClientError> + Send>;

/// How a cluster opens its sessions' connections.
enum Connect {
    /// One connector for every server.
    Servers(Arc<Mutex<Connector>>),
    /// Servers that may be replica groups: each server's replica ids (none: not a group).
    Groups { connect: Arc<Mutex<GroupConnector>>, replicas: Vec<(ServerId, Vec<u64>)> },
}

/// Counters of a cluster's transactions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Transactions committed at one server (no two-phase commit).
    pub single_server: u64,
    /// Transactions committed with two-phase commit.
    pub two_phase: u64,
    /// Of those, read-only (no coordinator).
    pub two_phase_read_only: u64,
    /// Two-phase commits refused or aborted.
    pub two_phase_refused: u64,
    /// Surrogates created.
    pub surrogates_created: u64,
    /// Surrogates followed.
    pub surrogates_followed: u64,
}

/// Sessions with several servers, and transactions over them. See the module documentation.
pub struct Cluster {
    home: ServerId,
    /// One slot per server the cluster may use, filled on first need.
    slots: Vec<(ServerId, OnceCell<Session>)>,
    /// Shared with each session's dialer, which calls it again to reconnect.
    connect: Connect,
    cfg: SessionConfig,
    /// Surrogates this cluster made, committed: (holder's server, target) -> surrogate oref.
    surrogates: RefCell<Vec<(SurrogateKey, Oref)>>,
    /// Surrogates made by the open transaction: (holder's server, target) -> the new object.
    new_surrogates: RefCell<Vec<(SurrogateKey, Ref<Surrogate>)>>,
    stats: Cell<ClusterStats>,
    /// SplitMix64 state for the timestamps' tie-breakers.
    rng: Cell<u64>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("home", &self.home).finish_non_exhaustive()
    }
}

/// Which surrogate: the server holding it, the target's server and the target's oref.
type SurrogateKey = (ServerId, ServerId, Oref);

/// One part's answer, taken apart.
struct Got {
    orefs: Option<Vec<Oref>>,
    lsn: Option<Lsn>,
    err: Option<ClientError>,
    lost: bool,
}

/// A part's error, as the transaction's: one whose connection failed leaves the outcome
/// unknown.
fn take_err(g: &mut Got) -> Option<ClientError> {
    g.err.take().map(|e| if g.lost { ClientError::CommitUnknown(Box::new(e)) } else { e })
}

/// The decision of a transaction over several servers, from what each part's server said
/// (`got`, in the order of `ids`): the coordinator's answer; with none (read-only), every
/// part's. `first_err` is the first part that could not be sent.
fn decide(
    coordinator: Option<ServerId>,
    ids: &[ServerId],
    got: &mut [Got],
    mut first_err: Option<ClientError>,
) -> Result<Lsn, ClientError> {
    match coordinator {
        Some(co) => match ids.iter().position(|id| *id == co) {
            Some(i) => match (got[i].lsn, take_err(&mut got[i])) {
                (Some(lsn), _) => Ok(lsn),
                // Aborted because another part was refused: that refusal says why.
                (None, Some(e @ ClientError::Conflict { cause: ConflictCause::Aborted, .. })) => {
                    match got.iter().position(|g| g.err.is_some() && !g.lost) {
                        Some(j) => Err(take_err(&mut got[j]).expect("it has an error")),
                        None => Err(e),
                    }
                }
                (None, Some(e)) => Err(e),
                (None, None) => Err(ClientError::Unexpected("the coordinator answered Prepared")),
            },
            None => Err(first_err.take().unwrap_or(ClientError::Unexpected("no coordinator"))),
        },
        None => match first_err.take() {
            Some(e) => Err(e),
            None => {
                let refused = got.iter().position(|g| g.err.is_some() && !g.lost);
                let lost = got.iter().position(|g| g.lost);
                match refused.or(lost) {
                    Some(i) => Err(take_err(&mut got[i]).expect("it has an error")),
                    None => Ok(Lsn(0)),
                }
            }
        },
    }
}

fn splitmix(state: &Cell<u64>) -> u64 {
    let s = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
    state.set(s);
    let mut z = s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Cluster {
    /// A cluster of `servers` (the home server among them), whose sessions `connect` opens
    /// with `cfg`. Nothing is opened until it is used.
    pub fn new(
        servers: &[ServerId],
        home: ServerId,
        connect: Connector,
        cfg: SessionConfig,
    ) -> Result<Cluster, ClientError> {
        Cluster::make(servers, home, Connect::Servers(Arc::new(Mutex::new(connect))), cfg)
    }

    /// A cluster whose servers may be replica groups ([`crate::group`]): `groups` lists each
    /// server with its replicas' ids (none for a server that is not a group), the home server
    /// among them, and `connect` opens a connection to one replica of one server. Each
    /// server's session follows its group to the leader, and to the new leader when it
    /// changes, as [`Session::connect_group`] does; two-phase commit runs between the groups'
    /// leaders. Nothing is opened until it is used.
    pub fn with_groups(
        groups: &[(ServerId, Vec<u64>)],
        home: ServerId,
        connect: GroupConnector,
        cfg: SessionConfig,
    ) -> Result<Cluster, ClientError> {
        let servers: Vec<ServerId> = groups.iter().map(|(s, _)| *s).collect();
        let connect =
            Connect::Groups { connect: Arc::new(Mutex::new(connect)), replicas: groups.to_vec() };
        Cluster::make(&servers, home, connect, cfg)
    }

    fn make(
        servers: &[ServerId],
        home: ServerId,
        connect: Connect,
        cfg: SessionConfig,
    ) -> Result<Cluster, ClientError> {
        if !servers.contains(&home) {
            return Err(ClientError::Usage("the home server is not among the servers"));
        }
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        Ok(Cluster {
            home,
            slots: servers.iter().map(|&s| (s, OnceCell::new())).collect(),
            connect,
            cfg,
            surrogates: RefCell::new(Vec::new()),
            new_surrogates: RefCell::new(Vec::new()),
            stats: Cell::new(ClusterStats::default()),
            rng: Cell::new(seed),
        })
    }

    /// The home server (where [`Cluster::root`] is read).
    pub fn home(&self) -> ServerId {
        self.home
    }

    /// The counters.
    pub fn stats(&self) -> ClusterStats {
        self.stats.get()
    }

    fn bump(&self, f: impl FnOnce(&mut ClusterStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// The session with `server`, opened now if it is not yet.
    pub fn session(&self, server: ServerId) -> Result<&Session, ClientError> {
        let Some((_, cell)) = self.slots.iter().find(|(s, _)| *s == server) else {
            return Err(ClientError::UnknownServer(server.0));
        };
        if let Some(s) = cell.get() {
            return Ok(s);
        }
        let s = match &self.connect {
            Connect::Servers(connect) => {
                let connect = connect.clone();
                let dialer: crate::Dialer = Box::new(move |_attempt| {
                    let mut c = connect.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    (c)(server)
                });
                Session::connect(dialer, self.cfg)?
            }
            Connect::Groups { connect, replicas } => {
                let ids = replicas.iter().find(|(s, _)| *s == server).map_or(&[][..], |(_, r)| r);
                if ids.is_empty() {
                    let connect = connect.clone();
                    let dialer: crate::Dialer = Box::new(move |_attempt| {
                        let mut c =
                            connect.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        (c)(server, None)
                    });
                    Session::connect(dialer, self.cfg)?
                } else {
                    let group = ids
                        .iter()
                        .map(|&id| {
                            let connect = connect.clone();
                            let dial: crate::group::ReplicaDialer = Box::new(move || {
                                let mut c = connect
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                                (c)(server, Some(id))
                            });
                            crate::group::Replica { id, dial }
                        })
                        .collect();
                    Session::connect_group(crate::group::GroupDialer::new(group)?, self.cfg)?
                }
            }
        };
        let got = s.server().server_id;
        if got != server {
            return Err(ClientError::WrongServer { expected: server.0, got: got.0 });
        }
        Ok(cell.get_or_init(|| s))
    }

    /// The reference in root slot `slot` of the home server.
    pub fn root<C: Class + ?Sized>(&self, slot: usize) -> Result<XRef<C>, ClientError> {
        Ok(XRef::at(self.home, self.session(self.home)?.root(slot)?))
    }

    /// Where `x` really is: if it names a surrogate, its target (one hop: a surrogate never
    /// names a surrogate).
    pub fn resolve<C: Class + ?Sized>(&self, x: XRef<C>) -> Result<XRef<C>, ClientError> {
        let s = self.session(x.server)?;
        let v = s.get(x.r.cast::<crate::typed::Any>())?;
        if v.class_name() != <Surrogate as Class>::NAME {
            return Ok(x);
        }
        drop(v);
        let v = s.get(x.r.cast::<Surrogate>())?;
        let server = ServerId(v.get(Surrogate::server));
        let oref = Oref::from_raw(v.get(Surrogate::oref))
            .filter(|o| !o.is_null())
            .ok_or_else(|| ClientError::BadValue("a surrogate without a target".into()))?;
        drop(v);
        self.bump(|s| s.surrogates_followed += 1);
        let target = self.session(server)?.ref_to::<C>(oref)?;
        Ok(XRef::at(server, target))
    }

    /// A view of the object `x` names, wherever it lives (following a surrogate).
    pub fn get<C: Class + ?Sized>(&self, x: XRef<C>) -> Result<View<'_, C>, ClientError> {
        let x = self.resolve(x)?;
        self.session(x.server)?.get(x.r)
    }

    /// Creates an object of class `C`, which has a variable part of `var_len` elements, at
    /// `server` in the open transaction ([`Session::create`]).
    pub fn create<C: Class + ?Sized>(
        &self,
        server: ServerId,
        var_len: usize,
    ) -> Result<XRef<C>, ClientError>
    where
        C::Var: crate::typed::VarPart,
    {
        let v = self.session(server)?.create::<C>(var_len)?;
        Ok(XRef::at(server, v.as_ref()))
    }

    /// Creates an object of class `C`, which has no variable part, at `server` in the open
    /// transaction ([`Session::create_fixed`]).
    pub fn create_fixed<C: Class<Var = crate::typed::NoVar> + ?Sized>(
        &self,
        server: ServerId,
    ) -> Result<XRef<C>, ClientError> {
        let v = self.session(server)?.create_fixed::<C>()?;
        Ok(XRef::at(server, v.as_ref()))
    }

    /// The reference to store in a field of an object at `holder` so that it names `target`:
    /// `target`'s own reference if it is at `holder` too, else a surrogate at `holder` (one this
    /// cluster made before for the same target, or a new one in the open transaction).
    pub fn refer<T: ?Sized + 'static>(
        &self,
        holder: ServerId,
        target: XRef<T>,
    ) -> Result<Ref<T>, ClientError> {
        let target = XRef::at(target.server, self.session(target.server)?.canonical(target.r)?);
        if target.server == holder {
            return Ok(target.r);
        }
        let oref = target.r.oref().filter(|o| !o.is_null()).ok_or(ClientError::Usage(
            "a reference to an object at another server needs the object committed first",
        ))?;
        let key = (holder, target.server, oref);
        if let Some((_, s)) = self.surrogates.borrow().iter().find(|(k, _)| *k == key) {
            return self.session(holder)?.ref_to::<T>(*s);
        }
        if let Some((_, r)) = self.new_surrogates.borrow().iter().find(|(k, _)| *k == key) {
            return Ok(r.cast());
        }
        let v = self.session(holder)?.create_fixed::<Surrogate>()?;
        v.set(Surrogate::server, target.server.0)?;
        v.set(Surrogate::oref, oref.raw())?;
        let r = v.as_ref();
        drop(v);
        self.new_surrogates.borrow_mut().push((key, r));
        self.bump(|s| s.surrogates_created += 1);
        Ok(r.cast())
    }

    /// Commits the open transaction at every server it used. See the module documentation.
    pub fn commit(&self) -> Result<CommitInfo, ClientError> {
        let open: Vec<(ServerId, &Session)> = self
            .slots
            .iter()
            .filter_map(|(id, c)| c.get().map(|s| (*id, s)))
            .filter(|(_, s)| s.part_open())
            .collect();
        let r = match open.as_slice() {
            [] => Ok(CommitInfo { lsn: Lsn(0), created: 0, modified: 0 }),
            [(_, s)] => {
                self.bump(|s| s.single_server += 1);
                s.commit()
            }
            _ => self.two_phase(&open),
        };
        self.surrogates_settled(r.is_ok());
        r
    }

    /// Aborts the open transaction at every server.
    pub fn abort(&self) {
        for (_, c) in &self.slots {
            if let Some(s) = c.get().filter(|s| s.part_open()) {
                s.abort();
            }
        }
        self.surrogates_settled(false);
    }

    /// The open transaction ended: its surrogates are kept for reuse if it committed.
    fn surrogates_settled(&self, committed: bool) {
        let made = std::mem::take(&mut *self.new_surrogates.borrow_mut());
        if !committed {
            return;
        }
        for (key, r) in made {
            if let Ok(s) = self.session(key.0)
                && let Ok(c) = s.canonical(r)
                && let Some(o) = c.oref()
            {
                self.surrogates.borrow_mut().push((key, o));
            }
        }
    }

    fn two_phase(&self, open: &[(ServerId, &Session)]) -> Result<CommitInfo, ClientError> {
        let writes: Vec<bool> = open.iter().map(|(_, s)| s.part_writes()).collect();
        let coordinator = open
            .iter()
            .zip(&writes)
            .filter(|(_, w)| **w)
            .map(|((id, _), _)| *id)
            .min_by_key(|id| *id != self.home);
        let participants: Vec<Participant> = open
            .iter()
            .zip(&writes)
            .map(|((server, _), &writes)| Participant { server: *server, writes })
            .collect();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let tie = CLIENT_TIE_BIT | (splitmix(&self.rng) as u32 & !CLIENT_TIE_BIT);
        let header =
            PrepareHeader { stamp: Stamp { time_us: now, tie }, coordinator, participants };
        // Send every part first (the participants validate in parallel), then collect.
        let mut sent = Vec::with_capacity(open.len());
        let mut first_err = None;
        for (id, s) in open {
            match s.part_send(header.clone()) {
                Ok(p) => sent.push((*id, *s, p)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        // What each part's server said: the orefs of its created objects (if it prepared or
        // committed), the coordinator's LSN, or its error and whether the connection failed.
        let mut got: Vec<Got> = sent
            .iter()
            .map(|(_, s, _)| match s.part_recv() {
                PartReply::Prepared(c) => Got { orefs: Some(c), lsn: None, err: None, lost: false },
                PartReply::Committed(l, c) => {
                    Got { orefs: Some(c), lsn: Some(l), err: None, lost: false }
                }
                PartReply::Refused(e) => Got { orefs: None, lsn: None, err: Some(e), lost: false },
                PartReply::Lost(e) => Got { orefs: None, lsn: None, err: Some(e), lost: true },
            })
            .collect();
        let ids: Vec<ServerId> = sent.iter().map(|(id, _, _)| *id).collect();
        let decision = decide(coordinator, &ids, &mut got, first_err);
        let mut info = CommitInfo { lsn: Lsn(0), created: 0, modified: 0 };
        // Whether the transaction may have committed without this client knowing which parts
        // did: committed (a part whose answer was lost), or its outcome unknown.
        let maybe_committed = matches!(&decision, Ok(_) | Err(ClientError::CommitUnknown(_)));
        for ((_, s, part), g) in sent.into_iter().zip(&got) {
            match (&decision, g.orefs.as_deref()) {
                (Ok(lsn), Some(orefs)) => {
                    let i = s.part_end(part, PartOutcome::Committed(*lsn, orefs))?;
                    info.created += i.created;
                    info.modified += i.modified;
                }
                // Committed with this part's answer lost, or unknown: what the part wrote
                // leaves the cache (its copies from before may be stale, and its server takes
                // this client to hold the new versions, so it would not invalidate them).
                _ if maybe_committed => {
                    s.part_end(part, PartOutcome::Unknown)?;
                }
                // Aborted: the cache goes back to before the transaction.
                _ => {
                    s.part_end(part, PartOutcome::Aborted)?;
                }
            }
        }
        match decision {
            Ok(lsn) => {
                info.lsn = lsn;
                self.bump(|st| {
                    st.two_phase += 1;
                    if coordinator.is_none() {
                        st.two_phase_read_only += 1;
                    }
                });
                Ok(info)
            }
            Err(e) => {
                self.bump(|st| st.two_phase_refused += 1);
                Err(e)
            }
        }
    }

    /// Runs `f` as a transaction over the cluster, retrying on conflicts as
    /// [`Session::run`] does (its attempts and backoff settings), and like it generic over
    /// the closure's error: an application error aborts the transaction and comes back as
    /// itself, unless a conflict hit one of the servers' parts during the attempt (then the
    /// attempt runs again).
    pub fn run<T, E: From<ClientError>>(
        &self,
        mut f: impl FnMut(&Cluster) -> Result<T, E>,
    ) -> Result<T, E> {
        let attempts = self.cfg.run_attempts_max.max(1);
        let mut attempt = 1;
        loop {
            let conflicts = self.conflicts_seen();
            let result = match f(self) {
                Ok(v) => self.commit().map(|_| v).map_err(Failed::Thor),
                Err(e) if self.conflicts_seen() != conflicts => Err(Failed::Conflicted(e)),
                Err(e) => Err(Failed::App(e)),
            };
            let retry = match &result {
                Ok(_) => false,
                Err(Failed::App(_)) => false,
                Err(Failed::Conflicted(_)) => true,
                Err(Failed::Thor(e)) => e.is_conflict(),
            };
            let Err(failed) = result else { return result.map_err(Failed::into_app) };
            self.abort();
            if !retry || attempt >= attempts {
                return Err(failed.into_app());
            }
            let min = self.cfg.run_backoff_min.as_micros() as u64;
            let max = self.cfg.run_backoff_max.as_micros() as u64;
            let base = min.saturating_mul(1 << (attempt - 1).min(20)).min(max).max(1);
            let wait = base / 2 + splitmix(&self.rng) % (base / 2 + 1);
            std::thread::sleep(std::time::Duration::from_micros(wait));
            attempt += 1;
        }
    }

    /// Conflicts the servers' sessions have seen, summed (doomed parts count one more each):
    /// how [`Cluster::run`] tells a conflict converted into the application's error.
    fn conflicts_seen(&self) -> u64 {
        self.slots
            .iter()
            .filter_map(|(_, c)| c.get())
            .map(|s| s.conflicts_seen() + u64::from(s.is_doomed()))
            .sum()
    }
}
