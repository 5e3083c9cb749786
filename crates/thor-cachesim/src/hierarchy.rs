//! The cache hierarchy: clients over one shared array cache, with or without DEMOTE.
//!
//! # The system
//!
//! ```text
//!    client 0        client 1   ...        each: a cache of `client_blocks` blocks with
//!   [ policy ]      [ policy ]             its own replacement policy (LRU, MRU, ...)
//!        \   read /   demote  \
//!         v      v             v
//!        [        array        ]           the disk array's cache (in thor: the server's
//!        [       policy        ]           page cache), `array_blocks` blocks
//!                  |  read on a miss
//!                  v
//!                [disk]
//! ```
//!
//! A *design* names the client policy, the array policy and whether clients demote, as the paper
//! does: "LRU-MRU-demote" is an LRU client over an MRU array with demotions; the paper's baseline
//! is LRU-LRU-none and its proposal LRU-MRU-demote. The eight designs of section 4.1 are the
//! cross-product of {LRU, MRU} x {LRU, MRU} x {none, demote}; any [`PolicyKind`] works at either
//! level.
//!
//! # One request, step by step
//!
//! A read of block `b` by client `c`:
//!
//! 1. **Client lookup.** If `c` caches `b`, that is a client hit: the client's policy records
//!    the reference ([`Policy::touch`]) and the request is done.
//! 2. **Make room.** On a miss, if the client is full it chooses a victim with its policy. With
//!    demotion it first DEMOTEs the victim to the array (below); in every case it then drops it.
//! 3. **Read.** The client asks the array for `b`. If the array caches `b` it is an array hit
//!    and the array's policy records the reference. Otherwise the array reads `b` from disk,
//!    evicting its own victim if it is full, and inserts `b` as referenced.
//! 4. **Install.** The client inserts `b` as referenced.
//!
//! A DEMOTE of block `v` at the array (section 1.1):
//!
//! - if the array already caches `v`, it only moves `v` to its evict-last end: **reordered**,
//!   no data crosses the link;
//! - else if it can make room (evicting its own next victim if full), it inserts `v` at its
//!   evict-last end: **transferred**, one block crosses the link;
//! - else it **rejects** the demotion and does nothing.
//!
//! # Where blocks go in the array
//!
//! The paper fixes this by policy (section 4.1, figure 6): an LRU array puts disk reads and
//! demoted blocks at the "eject me last" end; an MRU array puts disk reads at the "eject me next"
//! end and demoted blocks at the "eject me last" end; and "when an array with an LRU policy
//! receives a request for a block ... it will move the block to the most-recently-used end",
//! while "an array with an MRU policy ejects [it] on the next addition". All of this is one rule
//! here: **reads (disk reads and read hits) follow the array policy's own reference rule
//! ([`Placement::Referenced`]); demoted blocks go to [`Placement::EvictLast`]**. With LRU the
//! reference rule is "evict last", with MRU "evict next", which reproduces the paper's four cases,
//! and CLOCK or ARC arrays get the analogous behaviour for free.
//!
//! # Choices the paper leaves open, and the ones made here
//!
//! - *Order of demotion and read.* "When a client decides to eject a clean block from its cache
//!   (usually to accommodate a READ), it first uses a DEMOTE": the demotion precedes the read.
//!   The three-block example of section 4.5 ("the client demotes the LRU block C ... The array then
//!   ejects block B to make way for A") only works in this order; the tests replay it.
//! - *When a demotion is rejected.* The paper's example is an array that "cannot make any free
//!   space" (all blocks pinned by write-behind data). This simulator has reads only and the
//!   policies can always evict, so a demotion is rejected only by an array of zero blocks. The
//!   client drops its victim anyway.
//! - *A read hit in an MRU array* goes to the evict-next end, per the sentence quoted above.
//! - *A client hit* in an MRU client moves the block to the evict-next end (it is now the most
//!   recently used), which is what gives the paper's SEQ behaviour (section 4.5: the MRU client
//!   keeps the first half of the loop and "ejects one S0 block to make way for blocks read from
//!   S1").
//! - *Disk reads* are charged whether the array can keep the block or not; the sequential-versus-
//!   random distinction is made by the runner ([`crate::run`]), from the order of disk reads.
//!
//! [`Policy::touch`]: thor_policy::Policy::touch

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thor_policy::{
    AnyPolicy, BlockId, DenseSlots, HashSlots, Placement, Policy, PolicyKind, SlotIndex,
};

use crate::SimError;
use crate::limits::{MAX_CACHE_BLOCKS, MAX_CLIENTS};

/// A point in the design space: client policy, array policy, demotion on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Design {
    /// Every client's replacement policy.
    pub client: PolicyKind,
    /// The array's replacement policy.
    pub array: PolicyKind,
    /// Whether clients DEMOTE the blocks they evict.
    pub demote: bool,
}

impl Design {
    /// The paper's baseline: LRU-LRU-none.
    pub const BASELINE: Design =
        Design { client: PolicyKind::Lru, array: PolicyKind::Lru, demote: false };
    /// The paper's proposal: LRU-MRU-demote.
    pub const PROPOSED: Design =
        Design { client: PolicyKind::Lru, array: PolicyKind::Mru, demote: true };

    /// The eight designs of the paper's section 4.1, in the order of its figures.
    pub const PAPER: [Design; 8] = {
        use PolicyKind::{Lru, Mru};
        [
            Design { client: Lru, array: Lru, demote: false },
            Design { client: Lru, array: Lru, demote: true },
            Design { client: Lru, array: Mru, demote: false },
            Design { client: Lru, array: Mru, demote: true },
            Design { client: Mru, array: Lru, demote: false },
            Design { client: Mru, array: Lru, demote: true },
            Design { client: Mru, array: Mru, demote: false },
            Design { client: Mru, array: Mru, demote: true },
        ]
    };
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.demote { "demote" } else { "none" };
        write!(f, "{}-{}-{}", self.client, self.array, mode)
    }
}

impl FromStr for Design {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || SimError::UnknownDesign { name: s.chars().take(64).collect() };
        let mut parts = s.split('-');
        let (Some(c), Some(a), Some(m), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(err());
        };
        let demote = match m.to_ascii_lowercase().as_str() {
            "demote" => true,
            "none" => false,
            _ => return Err(err()),
        };
        Ok(Design {
            client: c.parse().map_err(|_| err())?,
            array: a.parse().map_err(|_| err())?,
            demote,
        })
    }
}

impl Serialize for Design {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Design {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The shape of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HierarchyConfig {
    /// Policies and demotion.
    pub design: Design,
    /// Number of clients, `1..=MAX_CLIENTS`.
    pub clients: u16,
    /// Blocks per client cache (the paper's N_c).
    pub client_blocks: usize,
    /// Blocks in the array cache (the paper's N_a).
    pub array_blocks: usize,
}

impl HierarchyConfig {
    /// Checks the configuration against the simulator's limits.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.clients == 0 || self.clients as usize > MAX_CLIENTS {
            return Err(SimError::config(format!("clients must be 1..={MAX_CLIENTS}")));
        }
        for (what, blocks) in [("client", self.client_blocks), ("array", self.array_blocks)] {
            if blocks > MAX_CACHE_BLOCKS {
                return Err(SimError::config(format!(
                    "{what} cache of {blocks} blocks exceeds {MAX_CACHE_BLOCKS}"
                )));
            }
        }
        Ok(())
    }
}

/// Where a request was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A hit in the client's own cache.
    Client,
    /// A miss in the client, a hit in the array.
    Array,
    /// A miss in both: the array read the block from disk.
    Disk,
}

/// What the demotion of a client's victim did, if there was one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Demotion {
    /// No demotion: a client hit, a client with room, or a design without demotion.
    None,
    /// The array took the block: one block of data crossed the link.
    Transferred,
    /// The array already had the block and only moved it to its evict-last end.
    Reordered,
    /// The array could not make room and refused.
    Rejected,
}

/// What one request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Where the block came from.
    pub level: Level,
    /// What happened to the client's victim.
    pub demotion: Demotion,
}

/// The points at which [`Hierarchy::access_observed`] shows the hierarchy to its observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// After the client's victim was demoted (or dropped) and before the read: the paper's
    /// "Next" state in section 4.5. Not reached on a client hit or when the client had room.
    AfterEviction,
}

/// Clients over one array (see the module documentation). `I` is how caches find blocks: a
/// dense array when block ids are small (the simulator's case), a hash map otherwise.
#[derive(Debug, Clone)]
pub struct Hierarchy<I: SlotIndex = HashSlots> {
    /// One cache per client.
    clients: Vec<AnyPolicy<I>>,
    /// The shared array cache.
    array: AnyPolicy<I>,
    /// Whether clients demote their victims.
    demote: bool,
}

impl Hierarchy<HashSlots> {
    /// A hierarchy over any `u64` block ids.
    pub fn new(config: &HierarchyConfig) -> Result<Self, SimError> {
        Self::with_index(config, HashSlots::new)
    }
}

impl Hierarchy<DenseSlots> {
    /// A hierarchy over block ids `0..block_bound`, found through dense arrays (4 bytes per id
    /// per cache).
    pub fn dense(config: &HierarchyConfig, block_bound: u64) -> Result<Self, SimError> {
        DenseSlots::new(block_bound)?;
        Self::with_index(config, || DenseSlots::new(block_bound).expect("bound checked above"))
    }
}

impl<I: SlotIndex> Hierarchy<I> {
    /// A hierarchy whose caches use indexes made by `make_index`.
    pub fn with_index(
        config: &HierarchyConfig,
        make_index: impl FnMut() -> I,
    ) -> Result<Self, SimError> {
        let sizes = vec![config.client_blocks; usize::from(config.clients)];
        Self::with_client_sizes(config, &sizes, make_index)
    }

    /// [`Hierarchy::with_index`] with client `i`'s cache holding `client_sizes[i]` blocks
    /// instead of `config.client_blocks` (one size per client; replaying a live run whose
    /// clients' caches had different numbers of frames).
    pub fn with_client_sizes(
        config: &HierarchyConfig,
        client_sizes: &[usize],
        mut make_index: impl FnMut() -> I,
    ) -> Result<Self, SimError> {
        config.validate()?;
        if client_sizes.len() != usize::from(config.clients) {
            return Err(SimError::config(format!(
                "{} client cache sizes for {} clients",
                client_sizes.len(),
                config.clients
            )));
        }
        if let Some(&big) = client_sizes.iter().find(|&&b| b > MAX_CACHE_BLOCKS) {
            return Err(SimError::config(format!(
                "client cache of {big} blocks exceeds {MAX_CACHE_BLOCKS}"
            )));
        }
        let design = config.design;
        let clients = client_sizes
            .iter()
            .map(|&blocks| AnyPolicy::with_index(design.client, blocks, &mut make_index))
            .collect::<Result<_, _>>()?;
        let array = AnyPolicy::with_index(design.array, config.array_blocks, make_index)?;
        Ok(Hierarchy { clients, array, demote: design.demote })
    }

    /// Serves one read of `block` by `client` (which must be below the configured number of
    /// clients).
    #[inline]
    pub fn access(&mut self, client: usize, block: BlockId) -> Outcome {
        self.access_observed(client, block, |_, _| {})
    }

    /// [`Hierarchy::access`], showing the hierarchy to `observe` at each [`Step`].
    #[inline]
    pub fn access_observed(
        &mut self,
        client: usize,
        block: BlockId,
        mut observe: impl FnMut(Step, &Self),
    ) -> Outcome {
        let cache = &mut self.clients[client];
        if cache.touch(block) {
            return Outcome { level: Level::Client, demotion: Demotion::None };
        }
        let caches = cache.capacity() > 0;
        let mut demotion = Demotion::None;
        if caches && cache.is_full() {
            let victim = cache.evict(Some(block));
            if let (true, Some(victim)) = (self.demote, victim) {
                demotion = Self::demote(&mut self.array, victim);
            }
            observe(Step::AfterEviction, self);
        }
        let level = if self.array.touch(block) {
            Level::Array
        } else {
            let array = &mut self.array;
            if array.capacity() > 0 {
                if array.is_full() {
                    array.evict(Some(block));
                }
                let inserted = array.insert(block, Placement::Referenced);
                debug_assert!(inserted.is_ok(), "{inserted:?}");
            }
            Level::Disk
        };
        if caches {
            let inserted = self.clients[client].insert(block, Placement::Referenced);
            debug_assert!(inserted.is_ok(), "{inserted:?}");
        }
        Outcome { level, demotion }
    }

    /// DEMOTE of `victim` at `array` (see the module documentation).
    #[inline]
    fn demote(array: &mut AnyPolicy<I>, victim: BlockId) -> Demotion {
        if array.place(victim, Placement::EvictLast) {
            return Demotion::Reordered;
        }
        if array.is_full() && array.evict(Some(victim)).is_none() {
            return Demotion::Rejected;
        }
        match array.insert(victim, Placement::EvictLast) {
            Ok(()) => Demotion::Transferred,
            Err(_) => Demotion::Rejected,
        }
    }

    /// The blocks cached by `client`, from its evict-next end.
    pub fn client_blocks(&self, client: usize) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.clients[client].len());
        self.clients[client].snapshot(&mut out);
        out
    }

    /// The blocks cached by the array, from its evict-next end.
    pub fn array_blocks(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.array.len());
        self.array.snapshot(&mut out);
        out
    }

    /// The number of clients.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}
