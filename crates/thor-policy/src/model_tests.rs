//! Model-based tests: each policy against a deliberately naive model built from `VecDeque`s,
//! on random operation sequences over a small id space (so that hits, misses, ghosts and
//! evictions all happen often).

use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;

/// One call on the `Policy` contract.
#[derive(Debug, Clone)]
enum Op {
    Touch(BlockId),
    Insert(BlockId, Placement),
    Place(BlockId, Placement),
    Remove(BlockId),
    Evict(Option<BlockId>),
    /// The contract's miss path: touch, else evict if full, then insert as referenced.
    Request(BlockId),
}

fn placement() -> impl Strategy<Value = Placement> {
    prop_oneof![Just(Placement::Referenced), Just(Placement::EvictNext), Just(Placement::EvictLast)]
}

fn op(ids: BlockId) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..ids).prop_map(Op::Touch),
        (0..ids, placement()).prop_map(|(b, p)| Op::Insert(b, p)),
        (0..ids, placement()).prop_map(|(b, p)| Op::Place(b, p)),
        (0..ids).prop_map(Op::Remove),
        proptest::option::of(0..ids).prop_map(Op::Evict),
        (0..ids).prop_map(Op::Request),
        (0..ids).prop_map(Op::Request),
    ]
}

/// What an operation returned, in a comparable form.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Bool(bool),
    Insert(Result<(), PolicyError>),
    Evicted(Option<BlockId>),
}

/// The model side of a comparison.
trait Model {
    fn apply(&mut self, op: &Op) -> Answer;
    fn order(&self) -> Vec<BlockId>;
}

/// Runs `ops` on `policy` and `model`, comparing every answer and the order after each step.
fn check_against(policy: &mut impl Policy, model: &mut impl Model, ops: &[Op]) {
    let mut order = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let got = match *op {
            Op::Touch(b) => Answer::Bool(policy.touch(b)),
            Op::Insert(b, at) => Answer::Insert(policy.insert(b, at)),
            Op::Place(b, at) => Answer::Bool(policy.place(b, at)),
            Op::Remove(b) => Answer::Bool(policy.remove(b)),
            Op::Evict(x) => Answer::Evicted(policy.evict(x)),
            Op::Request(b) => {
                if policy.touch(b) {
                    Answer::Evicted(None)
                } else {
                    let victim = if policy.is_full() { policy.evict(Some(b)) } else { None };
                    let inserted = policy.insert(b, Placement::Referenced);
                    // A zero-capacity cache cannot take the block; anything else must.
                    assert!(inserted.is_ok() || policy.capacity() == 0, "{inserted:?}");
                    Answer::Evicted(victim)
                }
            }
        };
        let want = model.apply(op);
        assert_eq!(got, want, "answer to step {step} {op:?}");
        order.clear();
        policy.snapshot(&mut order);
        assert_eq!(order, model.order(), "order after step {step} {op:?}");
        assert_eq!(policy.len(), order.len());
        for &b in &order {
            assert!(policy.contains(b));
        }
    }
}

/// LRU and MRU as a `VecDeque` whose front is the evict-next end.
struct RecencyModel {
    queue: VecDeque<BlockId>,
    capacity: usize,
    /// Whether a reference goes to the front (MRU) or the back (LRU).
    reference_to_front: bool,
}

impl RecencyModel {
    fn put(&mut self, b: BlockId, at: Placement) {
        let front = match at {
            Placement::Referenced => self.reference_to_front,
            Placement::EvictNext => true,
            Placement::EvictLast => false,
        };
        if front { self.queue.push_front(b) } else { self.queue.push_back(b) }
    }

    fn take(&mut self, b: BlockId) -> bool {
        match self.queue.iter().position(|&x| x == b) {
            Some(i) => {
                self.queue.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Model for RecencyModel {
    fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Touch(b) => {
                Answer::Bool(self.apply(&Op::Place(b, Placement::Referenced)) == Answer::Bool(true))
            }
            Op::Insert(b, at) => Answer::Insert(if self.queue.contains(&b) {
                Err(PolicyError::AlreadyCached { id: b })
            } else if self.queue.len() >= self.capacity {
                Err(PolicyError::Full { capacity: self.capacity })
            } else {
                self.put(b, at);
                Ok(())
            }),
            Op::Place(b, at) => {
                let present = self.take(b);
                if present {
                    self.put(b, at);
                }
                Answer::Bool(present)
            }
            Op::Remove(b) => Answer::Bool(self.take(b)),
            Op::Evict(_) => Answer::Evicted(self.queue.pop_front()),
            Op::Request(b) => {
                if self.take(b) {
                    self.put(b, Placement::Referenced);
                    return Answer::Evicted(None);
                }
                let victim =
                    if self.queue.len() >= self.capacity { self.queue.pop_front() } else { None };
                if self.capacity > 0 {
                    self.put(b, Placement::Referenced);
                }
                Answer::Evicted(victim)
            }
        }
    }

    fn order(&self) -> Vec<BlockId> {
        self.queue.iter().copied().collect()
    }
}

/// CLOCK as a `VecDeque` of (block, reference bit) whose front is under the hand.
struct ClockModel {
    ring: VecDeque<(BlockId, bool)>,
    capacity: usize,
}

impl ClockModel {
    fn put(&mut self, b: BlockId, at: Placement) {
        match at {
            Placement::Referenced => self.ring.push_back((b, false)),
            Placement::EvictLast => self.ring.push_back((b, true)),
            Placement::EvictNext => self.ring.push_front((b, false)),
        }
    }

    fn position(&self, b: BlockId) -> Option<usize> {
        self.ring.iter().position(|&(x, _)| x == b)
    }

    fn sweep(&mut self) -> Option<BlockId> {
        loop {
            let (b, referenced) = self.ring.pop_front()?;
            if !referenced {
                return Some(b);
            }
            self.ring.push_back((b, false));
        }
    }
}

impl Model for ClockModel {
    fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Touch(b) | Op::Place(b, Placement::Referenced) => match self.position(b) {
                Some(i) => {
                    self.ring[i].1 = true;
                    Answer::Bool(true)
                }
                None => Answer::Bool(false),
            },
            Op::Insert(b, at) => Answer::Insert(if self.position(b).is_some() {
                Err(PolicyError::AlreadyCached { id: b })
            } else if self.ring.len() >= self.capacity {
                Err(PolicyError::Full { capacity: self.capacity })
            } else {
                self.put(b, at);
                Ok(())
            }),
            Op::Place(b, at) => match self.position(b) {
                Some(i) => {
                    self.ring.remove(i);
                    self.put(b, at);
                    Answer::Bool(true)
                }
                None => Answer::Bool(false),
            },
            Op::Remove(b) => match self.position(b) {
                Some(i) => {
                    self.ring.remove(i);
                    Answer::Bool(true)
                }
                None => Answer::Bool(false),
            },
            Op::Evict(_) => Answer::Evicted(self.sweep()),
            Op::Request(b) => {
                if let Some(i) = self.position(b) {
                    self.ring[i].1 = true;
                    return Answer::Evicted(None);
                }
                let victim = if self.ring.len() >= self.capacity { self.sweep() } else { None };
                if self.capacity > 0 {
                    self.put(b, Placement::Referenced);
                }
                Answer::Evicted(victim)
            }
        }
    }

    fn order(&self) -> Vec<BlockId> {
        self.ring.iter().map(|&(b, _)| b).collect()
    }
}

/// ARC transcribed from Megiddo and Modha's pseudo-code (FAST '03, figure 4), one request at a
/// time. Fronts are LRU ends.
struct ArcModel {
    t1: VecDeque<BlockId>,
    t2: VecDeque<BlockId>,
    b1: VecDeque<BlockId>,
    b2: VecDeque<BlockId>,
    c: usize,
    p: usize,
}

fn take(list: &mut VecDeque<BlockId>, b: BlockId) -> bool {
    match list.iter().position(|&x| x == b) {
        Some(i) => {
            list.remove(i);
            true
        }
        None => false,
    }
}

impl ArcModel {
    fn replace(&mut self, x_in_b2: bool) -> Option<BlockId> {
        let t1 = self.t1.len();
        if (t1 >= 1 && ((x_in_b2 && t1 == self.p) || t1 > self.p)) || self.t2.is_empty() {
            let v = self.t1.pop_front()?;
            self.b1.push_back(v);
            Some(v)
        } else {
            let v = self.t2.pop_front()?;
            self.b2.push_back(v);
            Some(v)
        }
    }

    /// Handles one request; returns the resident block evicted, if any.
    fn request(&mut self, x: BlockId) -> Option<BlockId> {
        if self.c == 0 {
            return None;
        }
        // Case I.
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.push_back(x);
            return None;
        }
        // Case II.
        if take(&mut self.b1, x) {
            // |B1| counts x, which has just been taken off it.
            let delta = (self.b2.len().max(1) / (self.b1.len() + 1)).max(1);
            self.p = (self.p + delta).min(self.c);
            let v = self.replace(false);
            self.t2.push_back(x);
            return v;
        }
        // Case III.
        if take(&mut self.b2, x) {
            let b2 = self.b2.len() + 1;
            let delta = (self.b1.len().max(1) / b2).max(1);
            self.p = self.p.saturating_sub(delta);
            let v = self.replace(true);
            self.t2.push_back(x);
            return v;
        }
        // Case IV.
        let mut victim = None;
        let total = self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len();
        if self.t1.len() + self.b1.len() == self.c {
            if self.t1.len() < self.c {
                self.b1.pop_front();
                victim = self.replace(false);
            } else {
                victim = self.t1.pop_front();
            }
        } else if total >= self.c {
            if total == 2 * self.c {
                self.b2.pop_front();
            }
            victim = self.replace(false);
        }
        self.t1.push_back(x);
        victim
    }
}

/// S3-FIFO as three `VecDeque`s whose fronts leave first: S and M of (block, frequency), G of
/// ids. A transcription of the paper's Algorithm 1 with the contract's choices (see `s3fifo.rs`).
struct S3FifoModel {
    s: VecDeque<(BlockId, u8)>,
    m: VecDeque<(BlockId, u8)>,
    g: VecDeque<BlockId>,
    capacity: usize,
}

impl S3FifoModel {
    fn new(capacity: usize) -> Self {
        S3FifoModel { s: VecDeque::new(), m: VecDeque::new(), g: VecDeque::new(), capacity }
    }

    fn small_target(&self) -> usize {
        if self.capacity == 0 { 0 } else { (self.capacity / 10).max(1) }
    }

    fn resident(&self, b: BlockId) -> Option<(bool, usize)> {
        if let Some(i) = self.s.iter().position(|e| e.0 == b) {
            return Some((true, i));
        }
        self.m.iter().position(|e| e.0 == b).map(|i| (false, i))
    }

    fn take_resident(&mut self, b: BlockId) -> bool {
        match self.resident(b) {
            Some((true, i)) => self.s.remove(i).is_some(),
            Some((false, i)) => self.m.remove(i).is_some(),
            None => false,
        }
    }

    fn hit(&mut self, b: BlockId) -> bool {
        let e = match self.resident(b) {
            Some((true, i)) => &mut self.s[i],
            Some((false, i)) => &mut self.m[i],
            None => return false,
        };
        e.1 = (e.1 + 1).min(3);
        true
    }

    fn evict_small(&mut self) -> Option<BlockId> {
        while let Some((b, f)) = self.s.pop_front() {
            if f > 1 {
                self.m.push_back((b, 0));
                continue;
            }
            let ghosts = self.capacity - self.small_target();
            if ghosts > 0 {
                if self.g.len() >= ghosts {
                    self.g.pop_front();
                }
                self.g.push_back(b);
            }
            return Some(b);
        }
        self.evict_main()
    }

    fn evict_main(&mut self) -> Option<BlockId> {
        if self.m.is_empty() {
            return if self.s.is_empty() { None } else { self.evict_small() };
        }
        loop {
            let (b, f) = self.m.pop_front()?;
            if f == 0 {
                return Some(b);
            }
            self.m.push_back((b, f - 1));
        }
    }

    fn evict(&mut self) -> Option<BlockId> {
        if self.s.len() >= self.small_target().max(1) {
            self.evict_small()
        } else {
            self.evict_main()
        }
    }

    fn insert(&mut self, b: BlockId, at: Placement) -> Result<(), PolicyError> {
        if self.resident(b).is_some() {
            return Err(PolicyError::AlreadyCached { id: b });
        }
        if self.s.len() + self.m.len() >= self.capacity {
            return Err(PolicyError::Full { capacity: self.capacity });
        }
        let ghost = take(&mut self.g, b);
        match at {
            Placement::Referenced if ghost => self.m.push_back((b, 0)),
            Placement::Referenced => self.s.push_back((b, 0)),
            Placement::EvictNext => self.s.push_front((b, 0)),
            Placement::EvictLast => self.m.push_back((b, 0)),
        }
        Ok(())
    }
}

impl Model for S3FifoModel {
    fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Touch(b) | Op::Place(b, Placement::Referenced) => Answer::Bool(self.hit(b)),
            Op::Insert(b, at) => Answer::Insert(self.insert(b, at)),
            Op::Place(b, at) => {
                let present = self.take_resident(b);
                if present {
                    match at {
                        Placement::EvictNext => self.s.push_front((b, 0)),
                        _ => self.m.push_back((b, 0)),
                    }
                }
                Answer::Bool(present)
            }
            Op::Remove(b) => {
                let present = self.take_resident(b);
                take(&mut self.g, b);
                Answer::Bool(present)
            }
            Op::Evict(_) => Answer::Evicted(self.evict()),
            Op::Request(b) => {
                if self.hit(b) {
                    return Answer::Evicted(None);
                }
                let victim =
                    if self.s.len() + self.m.len() >= self.capacity { self.evict() } else { None };
                if self.capacity > 0 {
                    self.insert(b, Placement::Referenced).unwrap();
                }
                Answer::Evicted(victim)
            }
        }
    }

    fn order(&self) -> Vec<BlockId> {
        self.s.iter().chain(&self.m).map(|e| e.0).collect()
    }
}

/// W-TinyLFU as three `VecDeque`s (window, probation, protected; fronts are LRU ends) over the
/// same sketch as the policy (the sketch has its own tests in `tinylfu.rs`).
struct TinyLfuModel {
    lists: [VecDeque<BlockId>; 3],
    sketch: FrequencySketch,
    capacity: usize,
}

impl TinyLfuModel {
    fn new(capacity: usize) -> Self {
        TinyLfuModel {
            lists: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            sketch: FrequencySketch::new(capacity),
            capacity,
        }
    }

    fn window_target(&self) -> usize {
        if self.capacity == 0 { 0 } else { (self.capacity / 100).max(1) }
    }

    fn protected_target(&self) -> usize {
        (self.capacity - self.window_target()) * 8 / 10
    }

    fn find(&self, b: BlockId) -> Option<usize> {
        (0..3).find(|&l| self.lists[l].contains(&b))
    }

    fn len(&self) -> usize {
        self.lists.iter().map(VecDeque::len).sum()
    }

    fn trim_protected(&mut self) {
        while self.lists[2].len() > self.protected_target() {
            let b = self.lists[2].pop_front().unwrap();
            self.lists[1].push_back(b);
        }
    }

    fn hit(&mut self, b: BlockId) -> bool {
        let Some(l) = self.find(b) else { return false };
        self.sketch.increment(b);
        take(&mut self.lists[l], b);
        if l == 1 {
            self.lists[2].push_back(b);
            self.trim_protected();
        } else {
            self.lists[l].push_back(b);
        }
        true
    }

    fn put(&mut self, b: BlockId, at: Placement) {
        match at {
            Placement::Referenced => {
                self.sketch.increment(b);
                self.lists[0].push_back(b);
                if self.lists[0].len() > self.window_target() {
                    let lru = self.lists[0].pop_front().unwrap();
                    self.lists[1].push_back(lru);
                }
            }
            Placement::EvictNext => self.lists[1].push_front(b),
            Placement::EvictLast => {
                self.lists[2].push_back(b);
                self.trim_protected();
            }
        }
    }

    fn evict(&mut self) -> Option<BlockId> {
        if self.lists[0].len() >= self.window_target().max(1) {
            let c = *self.lists[0].front()?;
            let victim = self.lists[1].front().or(self.lists[2].front()).copied();
            self.lists[0].pop_front();
            let Some(v) = victim else { return Some(c) };
            if self.sketch.estimate(c) > self.sketch.estimate(v) {
                self.lists[1].push_back(c);
                let l = self.find(v).unwrap();
                take(&mut self.lists[l], v);
                return Some(v);
            }
            return Some(c);
        }
        for l in [1, 2, 0] {
            if let Some(b) = self.lists[l].pop_front() {
                return Some(b);
            }
        }
        None
    }
}

impl Model for TinyLfuModel {
    fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Touch(b) | Op::Place(b, Placement::Referenced) => Answer::Bool(self.hit(b)),
            Op::Insert(b, at) => Answer::Insert(if self.find(b).is_some() {
                Err(PolicyError::AlreadyCached { id: b })
            } else if self.len() >= self.capacity {
                Err(PolicyError::Full { capacity: self.capacity })
            } else {
                self.put(b, at);
                Ok(())
            }),
            Op::Place(b, at) => match self.find(b) {
                Some(l) => {
                    take(&mut self.lists[l], b);
                    self.put(b, at);
                    Answer::Bool(true)
                }
                None => Answer::Bool(false),
            },
            Op::Remove(b) => match self.find(b) {
                Some(l) => Answer::Bool(take(&mut self.lists[l], b)),
                None => Answer::Bool(false),
            },
            Op::Evict(_) => Answer::Evicted(self.evict()),
            Op::Request(b) => {
                if self.hit(b) {
                    return Answer::Evicted(None);
                }
                let victim = if self.len() >= self.capacity { self.evict() } else { None };
                if self.capacity > 0 {
                    self.put(b, Placement::Referenced);
                }
                Answer::Evicted(victim)
            }
        }
    }

    fn order(&self) -> Vec<BlockId> {
        self.lists.iter().flatten().copied().collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn lru_matches_model(capacity in 0usize..6, ops in proptest::collection::vec(op(10), 0..200)) {
        let mut model =
            RecencyModel { queue: VecDeque::new(), capacity, reference_to_front: false };
        check_against(&mut Lru::new(capacity).unwrap(), &mut model, &ops);
    }

    #[test]
    fn mru_matches_model(capacity in 0usize..6, ops in proptest::collection::vec(op(10), 0..200)) {
        let mut model = RecencyModel { queue: VecDeque::new(), capacity, reference_to_front: true };
        check_against(&mut Mru::new(capacity).unwrap(), &mut model, &ops);
    }

    #[test]
    fn dense_index_behaves_like_hash_index(
        capacity in 0usize..6,
        ops in proptest::collection::vec(op(10), 0..200),
    ) {
        let mut model =
            RecencyModel { queue: VecDeque::new(), capacity, reference_to_front: false };
        let mut lru = Lru::with_index(capacity, DenseSlots::new(10).unwrap()).unwrap();
        check_against(&mut lru, &mut model, &ops);
    }

    #[test]
    fn clock_matches_model(capacity in 0usize..6, ops in proptest::collection::vec(op(10), 0..200)) {
        let mut model = ClockModel { ring: VecDeque::new(), capacity };
        let mut clock = Clock::new(capacity).unwrap();
        check_against(&mut clock, &mut model, &ops);
        for &(b, referenced) in &model.ring {
            prop_assert_eq!(clock.is_referenced(b), Some(referenced));
        }
    }

    /// ARC driven through the contract's request path matches the paper's pseudo-code exactly:
    /// same victims, same resident order, same ghosts, same target.
    #[test]
    fn arc_request_path_matches_paper(
        c in 0usize..7,
        requests in proptest::collection::vec(0u64..16, 0..400),
    ) {
        let mut arc = Arc::new(c).unwrap();
        let mut model = ArcModel {
            t1: VecDeque::new(), t2: VecDeque::new(), b1: VecDeque::new(), b2: VecDeque::new(),
            c, p: 0,
        };
        let (mut order, mut ghosts) = (Vec::new(), Vec::new());
        for (step, &x) in requests.iter().enumerate() {
            let victim = if arc.touch(x) {
                None
            } else {
                let v = if arc.is_full() { arc.evict(Some(x)) } else { None };
                if c > 0 {
                    arc.insert(x, Placement::Referenced).unwrap();
                }
                v
            };
            prop_assert_eq!(victim, model.request(x), "victim at step {}", step);
            order.clear();
            arc.snapshot(&mut order);
            let want: Vec<_> = model.t1.iter().chain(&model.t2).copied().collect();
            prop_assert_eq!(&order, &want, "residents at step {}", step);
            ghosts.clear();
            arc.ghosts(&mut ghosts);
            let want: Vec<_> = model.b1.iter().chain(&model.b2).copied().collect();
            prop_assert_eq!(&ghosts, &want, "ghosts at step {}", step);
            prop_assert_eq!(arc.target_t1(), model.p);
        }
    }

    /// Any mix of operations keeps ARC within its bounds and self-consistent.
    #[test]
    fn arc_any_operations_keep_bounds(
        c in 0usize..6,
        ops in proptest::collection::vec(op(12), 0..300),
    ) {
        let mut arc = Arc::new(c).unwrap();
        let (mut order, mut ghosts) = (Vec::new(), Vec::new());
        for op in &ops {
            match *op {
                Op::Touch(b) => { arc.touch(b); }
                Op::Insert(b, at) => {
                    let full = arc.is_full();
                    let cached = arc.contains(b);
                    let r = arc.insert(b, at);
                    prop_assert_eq!(r.is_ok(), !full && !cached);
                }
                Op::Place(b, at) => { arc.place(b, at); }
                Op::Remove(b) => { arc.remove(b); }
                Op::Evict(x) => {
                    let was = arc.len();
                    let v = arc.evict(x);
                    prop_assert_eq!(v.is_some(), was > 0);
                    prop_assert!(v.is_none_or(|v| !arc.contains(v)));
                }
                Op::Request(b) => {
                    if !arc.touch(b) {
                        if arc.is_full() { arc.evict(Some(b)); }
                        if c > 0 { arc.insert(b, Placement::Referenced).unwrap(); }
                    }
                }
            }
            order.clear();
            arc.snapshot(&mut order);
            ghosts.clear();
            arc.ghosts(&mut ghosts);
            prop_assert!(order.len() <= c);
            prop_assert_eq!(order.len(), arc.len());
            prop_assert!(order.len() + ghosts.len() <= 2 * c);
            prop_assert!(arc.target_t1() <= c);
            for b in &ghosts {
                prop_assert!(!order.contains(b));
                prop_assert!(!arc.contains(*b));
            }
        }
    }

    #[test]
    fn s3fifo_matches_model(
        capacity in 0usize..25,
        ids in 4u64..40,
        ops in proptest::collection::vec(op(40), 0..300),
    ) {
        // Keep ids within `ids` so that small id spaces (many hits) and large ones both occur.
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp(o, ids)).collect();
        let mut model = S3FifoModel::new(capacity);
        let mut policy = S3Fifo::new(capacity).unwrap();
        check_against(&mut policy, &mut model, &ops);
        let mut ghosts = Vec::new();
        policy.ghosts(&mut ghosts);
        prop_assert_eq!(ghosts, model.g.iter().copied().collect::<Vec<_>>());
        for &(b, f) in model.s.iter().chain(&model.m) {
            prop_assert_eq!(policy.frequency(b), Some(f));
        }
    }

    #[test]
    fn wtinylfu_matches_model(
        capacity in 0usize..130,
        ids in 4u64..200,
        ops in proptest::collection::vec(op(200), 0..400),
    ) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp(o, ids)).collect();
        let mut model = TinyLfuModel::new(capacity);
        let mut policy = WTinyLfu::new(capacity).unwrap();
        check_against(&mut policy, &mut model, &ops);
        for (l, list) in model.lists.iter().enumerate() {
            for &b in list {
                prop_assert_eq!(policy.segment(b), Some(l as u8));
            }
        }
    }
}

/// `op` with its block ids taken modulo `ids`.
fn clamp(op: Op, ids: BlockId) -> Op {
    match op {
        Op::Touch(b) => Op::Touch(b % ids),
        Op::Insert(b, p) => Op::Insert(b % ids, p),
        Op::Place(b, p) => Op::Place(b % ids, p),
        Op::Remove(b) => Op::Remove(b % ids),
        Op::Evict(x) => Op::Evict(x.map(|b| b % ids)),
        Op::Request(b) => Op::Request(b % ids),
    }
}
