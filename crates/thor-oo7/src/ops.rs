//! The operations of the suite, by name, and what each one reports.

use crate::error::Oo7Error;

/// An OO7 operation. Traversals walk each module's assembly tree (in list order, private
/// composite parts only) and run an operation on every composite part they reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Depth-first search of every composite part's atomic-part graph.
    T1,
    /// T1, stopping after half of each composite part's atomic parts (HAC paper).
    T1Minus,
    /// T1 that also reads every sub-object of atomic parts and connections (HAC paper).
    T1Plus,
    /// T1, incrementing x and y of each composite part's root part.
    T2a,
    /// T1, incrementing x and y of every atomic part visited.
    T2b,
    /// T1, incrementing x and y of every atomic part visited four times.
    T2c,
    /// T2a on the indexed build date (the date index is kept up to date).
    T3a,
    /// T2b on the indexed build date.
    T3b,
    /// T2c on the indexed build date.
    T3c,
    /// Counts the letter `I` in each composite part's document.
    T4,
    /// Swaps each document's opening "I am" and "This is" in place.
    T5,
    /// Reads only each composite part's root atomic part.
    T6,
    /// From a random atomic part up to the root of its module's assembly tree.
    T7,
    /// Counts the letter `I` in each module's manual.
    T8,
    /// Compares the first and last letters of each manual.
    T9,
    /// Looks up 10 random atomic parts by id.
    Q1,
    /// Atomic parts in the last 1% of the build-date range, by the date index.
    Q2,
    /// Atomic parts in the last 10% of the build-date range, by the date index.
    Q3,
    /// 100 random documents by title, and the base assemblies using their composite parts.
    Q4,
    /// Base assemblies using a composite part built later than themselves.
    Q5,
    /// Assemblies using, at any depth, a composite part built later than themselves.
    Q6,
    /// Scans every atomic part.
    Q7,
    /// Joins documents and atomic parts on the document id.
    Q8,
    /// Creates 10 composite parts (with graphs and documents) and links each to a random base
    /// assembly.
    Insert,
    /// Deletes the composite parts created by `Insert`.
    Delete,
}

impl Op {
    /// Every operation, in the order of the suite.
    pub const ALL: [Op; 25] = [
        Op::T1,
        Op::T1Minus,
        Op::T1Plus,
        Op::T2a,
        Op::T2b,
        Op::T2c,
        Op::T3a,
        Op::T3b,
        Op::T3c,
        Op::T4,
        Op::T5,
        Op::T6,
        Op::T7,
        Op::T8,
        Op::T9,
        Op::Q1,
        Op::Q2,
        Op::Q3,
        Op::Q4,
        Op::Q5,
        Op::Q6,
        Op::Q7,
        Op::Q8,
        Op::Insert,
        Op::Delete,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Op::T1 => "t1",
            Op::T1Minus => "t1-",
            Op::T1Plus => "t1+",
            Op::T2a => "t2a",
            Op::T2b => "t2b",
            Op::T2c => "t2c",
            Op::T3a => "t3a",
            Op::T3b => "t3b",
            Op::T3c => "t3c",
            Op::T4 => "t4",
            Op::T5 => "t5",
            Op::T6 => "t6",
            Op::T7 => "t7",
            Op::T8 => "t8",
            Op::T9 => "t9",
            Op::Q1 => "q1",
            Op::Q2 => "q2",
            Op::Q3 => "q3",
            Op::Q4 => "q4",
            Op::Q5 => "q5",
            Op::Q6 => "q6",
            Op::Q7 => "q7",
            Op::Q8 => "q8",
            Op::Insert => "insert",
            Op::Delete => "delete",
        }
    }

    /// Whether the operation modifies the database.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Op::T2a
                | Op::T2b
                | Op::T2c
                | Op::T3a
                | Op::T3b
                | Op::T3c
                | Op::T5
                | Op::Insert
                | Op::Delete
        )
    }

    /// Whether the operation walks each module's assembly tree and works on the composite
    /// parts it reaches (T1 and its variants, T2a-c, T3a-c, T4, T5, T6), so that it can run on
    /// one module alone ([`crate::traverse::Db::run_on_module`]).
    pub fn walks_modules(self) -> bool {
        crate::traverse::PartOp::of(self).is_some()
    }

    /// How a traversal treats each atomic part it visits.
    pub(crate) fn graph_mode(self) -> Option<GraphMode> {
        let update =
            |u, times| GraphMode { stop_half: false, sub_objects: false, update: u, times };
        Some(match self {
            Op::T1 => update(Update::None, 0),
            Op::T1Minus => GraphMode { stop_half: true, ..update(Update::None, 0) },
            Op::T1Plus => GraphMode { sub_objects: true, ..update(Update::None, 0) },
            Op::T2a => update(Update::XyRoot, 1),
            Op::T2b => update(Update::Xy, 1),
            Op::T2c => update(Update::Xy, 4),
            Op::T3a => update(Update::DateRoot, 1),
            Op::T3b => update(Update::Date, 1),
            Op::T3c => update(Update::Date, 4),
            _ => return None,
        })
    }
}

/// What a graph traversal does at each atomic part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GraphMode {
    /// Stop after half of the composite part's atomic parts (T1-).
    pub stop_half: bool,
    /// Read the sub-objects of parts and connections (T1+).
    pub sub_objects: bool,
    /// The update, if any.
    pub update: Update,
    /// How many times each update is applied.
    pub times: u32,
}

/// The update a graph traversal applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Update {
    /// Read only.
    None,
    /// Increment x and y of the root part only.
    XyRoot,
    /// Increment x and y of every part.
    Xy,
    /// Step the build date of the root part only.
    DateRoot,
    /// Step the build date of every part.
    Date,
}

impl Update {
    /// Whether the `count`-th part visited (1-based) is updated.
    pub fn applies(self, count: u64) -> bool {
        match self {
            Update::None => false,
            Update::XyRoot | Update::DateRoot => count == 1,
            Update::Xy | Update::Date => true,
        }
    }
}

/// OO7's build-date update: increment an odd date, decrement an even one.
#[inline]
pub fn step_date(d: u32) -> u32 {
    if d % 2 == 1 { d.wrapping_add(1) } else { d.wrapping_sub(1) }
}

impl std::str::FromStr for Op {
    type Err = Oo7Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let l = s.to_ascii_lowercase();
        let l = match l.as_str() {
            "t1minus" => "t1-",
            "t1plus" => "t1+",
            other => other,
        };
        Op::ALL
            .iter()
            .copied()
            .find(|op| op.name() == l)
            .ok_or_else(|| Oo7Error::UnknownOperation(s.to_string()))
    }
}

/// What an operation reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpResult {
    /// Atomic parts visited (T1: 437,400 on medium) or found (queries).
    pub parts_visited: u64,
    /// Object updates applied (T2c counts four per part).
    pub updates: u64,
    /// The operation's answer: letters counted (T4, T8), assemblies found (T7, Q4-Q6), matches
    /// (Q8), composite parts inserted or deleted; the same in thor and native code.
    pub result: u64,
}

impl std::ops::AddAssign for OpResult {
    fn add_assign(&mut self, o: OpResult) {
        self.parts_visited += o.parts_visited;
        self.updates += o.updates;
        self.result += o.result;
    }
}

/// The number of operations structural insert and delete handle at once, and the random
/// choices of the queries (OO7's values).
pub mod counts {
    /// Composite parts created by one structural insert (and deleted by one delete).
    pub const STRUCTURAL: u32 = 10;
    /// Atomic parts looked up by Q1 (and T7 picks one).
    pub const Q1_LOOKUPS: u32 = 10;
    /// Documents looked up by Q4.
    pub const Q4_LOOKUPS: u32 = 100;
}
