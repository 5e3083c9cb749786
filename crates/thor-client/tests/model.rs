//! Model-based property test of the client over each cache manager.
//!
//! A random object graph is loaded into a server with 4 KB pages; a session with a small cache
//! (a few dozen frames, so replacement runs all the time) then performs random reads, pointer
//! walks, field and payload writes, relinks, creations, commits and aborts, while holding a few
//! views. A model (a map from node number to its fields and payload, one copy as committed and
//! one as the transaction sees it) says what every read must return. After every step:
//!
//! - every read returned the model's bytes (checked as it happens);
//! - the cache is within its byte budget (`memory_bytes <= budget`), and was at every moment
//!   it balanced frames against tables in between (`memory_bytes_max`);
//! - every object modified or created by the transaction is resident (no-steal);
//! - every held view's object is where the view points (pinned objects never move) and reads
//!   the model's bytes;
//! - the cache's own invariants hold (lists, counts, reference counts).
//!
//! At the end a fresh session reads the whole graph back from the server.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;
use thor_client::{HacParams, PolicyConfig, Ref, Refs, Session, SessionConfig, View};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{Engine, EngineOptions};
use thor_storage::MemDisk;

thor_client::class! {
    /// A node of the random graph: its number, a value, two edges and a payload.
    pub class Node("model.Node") {
        key: u32,
        val: u64,
        next: Ref<Node>,
        other: Ref<Node>,
    }
    var bytes;
}

const PAGE: usize = 4096;
/// Views held at once (each pins a frame).
const HELD_MAX: usize = 2;
/// Objects a transaction modifies or creates before the test commits it: no-steal keeps them
/// (and, under FPC, their whole pages) in the cache, which must keep room to work.
const DIRTY_MAX: usize = 4;

/// What the model knows about one node.
#[derive(Debug, Clone, PartialEq)]
struct NodeModel {
    val: u64,
    payload: Vec<u8>,
    next: Option<usize>,
    other: Option<usize>,
}

/// The initial graph: per node a payload length and two optional edges (indices taken modulo
/// the node count).
#[derive(Debug, Clone)]
struct Graph {
    nodes: Vec<(usize, Option<usize>, Option<usize>)>,
}

fn graph() -> impl Strategy<Value = Graph> {
    prop::collection::vec(
        (0usize..700, prop::option::of(0usize..1000), prop::option::of(0usize..1000)),
        100..400,
    )
    .prop_map(|nodes| {
        let n = nodes.len();
        Graph {
            nodes: nodes
                .into_iter()
                .map(|(len, a, b)| (len, a.map(|a| a % n), b.map(|b| b % n)))
                .collect(),
        }
    })
}

/// A step. Node numbers are taken modulo the number of nodes when the step runs.
#[derive(Debug, Clone)]
enum Op {
    /// Read a node through its handle and check it.
    Read(usize),
    /// Follow `next` from a node up to this many times, checking each node reached.
    Walk(usize, u8),
    /// Write a node's value.
    SetVal(usize, u64),
    /// Rewrite a node's payload (same length) from a seed.
    SetPayload(usize, u8),
    /// Point a node's `next` (false) or `other` (true) at another node, or at nothing.
    Link(usize, Option<usize>, bool),
    /// Create a node with a payload of this length, linked from a node's `other`.
    Create(usize, u16),
    /// Hold a view of a node (the oldest held view goes if too many are held).
    Hold(usize),
    /// Drop the oldest held view.
    Release,
    Commit,
    Abort,
}

fn op() -> impl Strategy<Value = Op> {
    let k = any::<usize>();
    prop_oneof![
        10 => k.prop_map(Op::Read),
        4 => (k, 1u8..8).prop_map(|(k, n)| Op::Walk(k, n)),
        3 => (k, any::<u64>()).prop_map(|(k, v)| Op::SetVal(k, v)),
        2 => (k, any::<u8>()).prop_map(|(k, s)| Op::SetPayload(k, s)),
        2 => (k, prop::option::of(any::<usize>()), any::<bool>()).prop_map(|(k, j, o)| Op::Link(k, j, o)),
        2 => (k, 0u16..600).prop_map(|(k, n)| Op::Create(k, n)),
        2 => k.prop_map(Op::Hold),
        1 => Just(Op::Release),
        1 => Just(Op::Commit),
        1 => Just(Op::Abort),
    ]
}

fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8)).collect()
}

fn server() -> Arc<Engine> {
    let opts =
        EngineOptions { page_size: PAGE, background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

fn session(h: &Arc<Engine>, policy: PolicyConfig, cache_bytes: usize, background: bool) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    Session::new(
        Box::new(t),
        SessionConfig {
            cache_bytes,
            policy,
            background_replacement: background,
            ..SessionConfig::default()
        },
    )
    .unwrap()
}

/// Loads the graph with a roomy cache and a directory of all nodes in root slot 0; returns the
/// model.
fn load(h: &Arc<Engine>, g: &Graph) -> Vec<NodeModel> {
    let s = session(h, PolicyConfig::Fpc, 8 << 20, true);
    let mut refs = Vec::new();
    let mut model = Vec::new();
    for (k, &(len, next, other)) in g.nodes.iter().enumerate() {
        let v = s.create::<Node>(len).unwrap();
        v.set(Node::key, k as u32).unwrap();
        v.set(Node::val, k as u64 * 1000).unwrap();
        v.set_var_bytes(&payload(k as u8, len)).unwrap();
        refs.push(v.as_ref());
        model.push(NodeModel { val: k as u64 * 1000, payload: payload(k as u8, len), next, other });
    }
    for (k, m) in model.iter().enumerate() {
        let v = s.get(refs[k]).unwrap();
        if let Some(j) = m.next {
            v.set(Node::next, refs[j]).unwrap();
        }
        if let Some(j) = m.other {
            v.set(Node::other, refs[j]).unwrap();
        }
    }
    let dir = s.create::<Refs<Node>>(refs.len()).unwrap();
    for (k, r) in refs.iter().enumerate() {
        dir.set_var_ref(k, *r).unwrap();
    }
    let dr = dir.as_ref();
    drop(dir);
    s.set_root(0, dr).unwrap();
    s.commit().unwrap();
    model
}

/// The handles of the directory's nodes, read in session `s`.
fn handles(s: &Session) -> Vec<Ref<Node>> {
    let dir = s.get(s.root::<Refs<Node>>(0).unwrap()).unwrap();
    (0..dir.var_len()).map(|k| dir.var_ref(k)).collect()
}

/// Checks a view of node `k` against the model.
fn check_view(
    s: &Session,
    v: &View<'_, Node>,
    k: usize,
    model: &[NodeModel],
    hs: &[Ref<Node>],
) -> Result<(), TestCaseError> {
    let m = &model[k];
    prop_assert_eq!(v.get(Node::key) as usize, k);
    prop_assert_eq!(v.get(Node::val), m.val, "node {}", k);
    prop_assert_eq!(v.var_bytes(), m.payload.clone(), "node {} payload", k);
    for (r, want) in [(v.get(Node::next), m.next), (v.get(Node::other), m.other)] {
        match want {
            None => prop_assert!(r.is_null(), "node {}: edge should be null", k),
            Some(j) => prop_assert_eq!(
                s.canonical(r).unwrap(),
                s.canonical(hs[j]).unwrap(),
                "node {} edge",
                k
            ),
        }
    }
    Ok(())
}

fn run(
    policy: PolicyConfig,
    g: Graph,
    ops: Vec<Op>,
    frames: usize,
    background: bool,
) -> Result<(), TestCaseError> {
    let h = server();
    let mut committed = load(&h, &g);
    let budget = frames * PAGE;
    let s = session(&h, policy, budget, background);
    let mut hs = handles(&s);
    let mut model = committed.clone();
    // Nodes modified or created by the current transaction.
    let mut dirty: Vec<usize> = Vec::new();
    let mut held: VecDeque<(usize, View<'_, Node>)> = VecDeque::new();
    let commit = |s: &Session,
                  model: &mut Vec<NodeModel>,
                  committed: &mut Vec<NodeModel>,
                  dirty: &mut Vec<usize>| {
        s.commit().unwrap();
        *committed = model.clone();
        dirty.clear();
    };
    for op in ops {
        let n = hs.len();
        let dirty_op =
            matches!(op, Op::SetVal(..) | Op::SetPayload(..) | Op::Link(..) | Op::Create(..));
        if dirty_op && dirty.len() >= DIRTY_MAX {
            commit(&s, &mut model, &mut committed, &mut dirty);
        }
        match op {
            Op::Read(k) => {
                let k = k % n;
                let v = s.get(hs[k]).unwrap();
                check_view(&s, &v, k, &model, &hs)?;
            }
            Op::Walk(k, steps) => {
                let mut k = k % n;
                for _ in 0..steps {
                    let v = s.get(hs[k]).unwrap();
                    check_view(&s, &v, k, &model, &hs)?;
                    let next = v.get(Node::next);
                    drop(v);
                    let Some(j) = model[k].next else { break };
                    // Through the swizzled field, not the handle.
                    let w = s.get(next).unwrap();
                    prop_assert_eq!(w.get(Node::key) as usize, j);
                    k = j;
                }
            }
            Op::SetVal(k, val) => {
                let k = k % n;
                s.get(hs[k]).unwrap().set(Node::val, val).unwrap();
                model[k].val = val;
                dirty.push(k);
            }
            Op::SetPayload(k, seed) => {
                let k = k % n;
                let p = payload(seed, model[k].payload.len());
                s.get(hs[k]).unwrap().set_var_bytes(&p).unwrap();
                model[k].payload = p;
                dirty.push(k);
            }
            Op::Link(k, j, other) => {
                let k = k % n;
                let j = j.map(|j| j % n);
                let target = j.map_or(Ref::NULL, |j| hs[j]);
                let v = s.get(hs[k]).unwrap();
                if other {
                    v.set(Node::other, target).unwrap();
                    model[k].other = j;
                } else {
                    v.set(Node::next, target).unwrap();
                    model[k].next = j;
                }
                dirty.push(k);
            }
            Op::Create(k, len) => {
                let k = k % n;
                let len = usize::from(len);
                let v = s.create::<Node>(len).unwrap();
                v.set(Node::key, n as u32).unwrap();
                v.set(Node::val, 7).unwrap();
                v.set_var_bytes(&payload(n as u8, len)).unwrap();
                let r = v.as_ref();
                drop(v);
                hs.push(r);
                model.push(NodeModel {
                    val: 7,
                    payload: payload(n as u8, len),
                    next: None,
                    other: None,
                });
                s.get(hs[k]).unwrap().set(Node::other, r).unwrap();
                model[k].other = Some(n);
                dirty.push(n);
                dirty.push(k);
            }
            Op::Hold(k) => {
                let k = k % n;
                if held.len() == HELD_MAX {
                    held.pop_front();
                }
                held.push_back((k, s.get(hs[k]).unwrap()));
            }
            Op::Release => {
                held.pop_front();
            }
            Op::Commit => commit(&s, &mut model, &mut committed, &mut dirty),
            Op::Abort => {
                // Views of created objects end with them.
                let kept = committed.len();
                held.retain(|(k, _)| *k < kept);
                s.abort();
                model = committed.clone();
                hs.truncate(kept);
                dirty.clear();
            }
        }
        // The invariants, after every step.
        let st = s.cache_stats();
        prop_assert!(st.memory_bytes <= budget, "{} bytes of a {} budget", st.memory_bytes, budget);
        // And at every moment in between that the cache balanced frames against tables.
        prop_assert!(
            st.core.memory_bytes_max <= budget as u64,
            "held {} bytes of a {} budget",
            st.core.memory_bytes_max,
            budget
        );
        for &k in &dirty {
            prop_assert!(s.resident_location(hs[k]).is_some(), "dirty node {} left the cache", k);
        }
        for (k, v) in &held {
            prop_assert_eq!(
                s.resident_location(v.as_ref()),
                Some(v.location()),
                "held node {} moved",
                k
            );
            check_view(&s, v, *k, &model, &hs)?;
        }
        s.check_cache().map_err(TestCaseError::fail)?;
    }
    drop(held);
    s.commit().unwrap();
    committed = model;
    // The server has exactly the committed graph: read it in a fresh session.
    let fresh = session(&h, PolicyConfig::Fpc, 8 << 20, true);
    let fh = handles(&fresh);
    prop_assert_eq!(fh.len(), g.nodes.len());
    let mut reach: Vec<Option<Ref<Node>>> = vec![None; committed.len()];
    for (k, r) in fh.iter().enumerate() {
        reach[k] = Some(*r);
    }
    // Created nodes are reachable only through edges: follow them from the directory's nodes.
    let mut queue: VecDeque<usize> = (0..fh.len()).collect();
    while let Some(k) = queue.pop_front() {
        let v = fresh.get(reach[k].unwrap()).unwrap();
        prop_assert_eq!(v.get(Node::key) as usize, k);
        prop_assert_eq!(v.get(Node::val), committed[k].val);
        prop_assert_eq!(v.var_bytes(), committed[k].payload.clone());
        for (r, want) in
            [(v.get(Node::next), committed[k].next), (v.get(Node::other), committed[k].other)]
        {
            prop_assert_eq!(r.is_null(), want.is_none());
            if let Some(j) = want
                && reach[j].is_none()
            {
                reach[j] = Some(r);
                queue.push_back(j);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hac_matches_the_model(
        g in graph(),
        ops in prop::collection::vec(op(), 1..250),
        frames in 16usize..32,
        background in any::<bool>(),
        n in 0u32..3,
    ) {
        let params = HacParams { secondary_pointers: n, ..HacParams::default() };
        run(PolicyConfig::Hac(params), g, ops, frames, background)?;
    }

    #[test]
    fn fpc_matches_the_model(
        g in graph(),
        ops in prop::collection::vec(op(), 1..250),
        frames in 16usize..32,
        background in any::<bool>(),
    ) {
        run(PolicyConfig::Fpc, g, ops, frames, background)?;
    }

    #[test]
    fn gom_matches_the_model(
        g in graph(),
        ops in prop::collection::vec(op(), 1..250),
        frames in 16usize..32,
        background in any::<bool>(),
        split in prop_oneof![Just("gom:obj=0"), Just("gom"), Just("gom:obj=0.5"), Just("gom:obj=0.9")],
    ) {
        run(split.parse::<PolicyConfig>().unwrap(), g, ops, frames, background)?;
    }
}
