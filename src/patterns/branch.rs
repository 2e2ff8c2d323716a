//! Branches: partial matches waiting for one stage, and the successors of a
//! capture.
//!
//! Captures are a persistent list: each capture is a [`Node`] pointing to
//! the previous one, so the successors of a capture (repeat, proceed to each
//! reachable later stage, complete) share one new node, and keeping a branch
//! (`skip_any`, or a copy for undo) costs one reference count. Captures are
//! made in processing order and in stage order, so the list, read from its
//! root, is in both orders at once; a list holds at most 128 nodes (the sum
//! of `max` over the stages), which bounds every walk and the recursive drop.

use std::sync::Arc;

use crate::patterns::buffer::Pending;
use crate::patterns::document::Pattern;
use crate::patterns::event::Event;

/// One capture.
#[derive(Debug)]
pub(crate) struct Node {
    /// The captured event's ordinal.
    pub ordinal: u64,
    /// Its time.
    pub time: i64,
    /// The event.
    pub event: Arc<Event>,
    /// The stage it was captured into.
    pub stage: u8,
    /// The previous capture.
    pub prev: Option<Arc<Node>>,
}

/// The captures of a branch, a wait or a candidate: never empty.
#[derive(Debug, Clone)]
pub(crate) struct Caps {
    /// Time of the first capture.
    pub start: i64,
    /// Ordinal of the first capture.
    pub first: u64,
    /// The last capture.
    pub last: Arc<Node>,
    /// Captures in the last capture's stage.
    pub last_count: u8,
    /// Captures in all.
    pub len: u8,
}

/// The sort key of selection: `(start time, first ordinal, capture counts
/// in stage order, all capture ordinals in stage order)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SortKey {
    pub start: i64,
    pub first: u64,
    pub counts: Vec<u8>,
    pub ordinals: Vec<u64>,
}

impl Caps {
    /// The captures of a branch started by `e` (stage 0).
    #[inline]
    pub fn start(e: &Pending) -> Caps {
        Caps {
            start: e.time,
            first: e.ordinal,
            last: Arc::new(Node {
                ordinal: e.ordinal,
                time: e.time,
                event: e.event.clone(),
                stage: 0,
                prev: None,
            }),
            last_count: 1,
            len: 1,
        }
    }

    /// These captures plus `e` in `stage` (>= the last capture's stage).
    #[inline]
    pub fn with(&self, e: &Pending, stage: u8) -> Caps {
        Caps {
            start: self.start,
            first: self.first,
            last_count: if self.last.stage == stage {
                self.last_count.saturating_add(1)
            } else {
                1
            },
            len: self.len.saturating_add(1),
            last: Arc::new(Node {
                ordinal: e.ordinal,
                time: e.time,
                event: e.event.clone(),
                stage,
                prev: Some(self.last.clone()),
            }),
        }
    }

    /// The nodes, last first.
    pub fn nodes(&self) -> Nodes<'_> {
        Nodes {
            at: Some(&self.last),
        }
    }

    /// The last event captured by `stage`, if any.
    #[inline]
    pub fn last_of(&self, stage: usize) -> Option<&Event> {
        for n in self.nodes() {
            let s = usize::from(n.stage);
            if s == stage {
                return Some(&n.event);
            }
            if s < stage {
                return None;
            }
        }
        None
    }

    /// `(time, ordinal)` of the last capture (the latest in processing order).
    pub fn last_position(&self) -> (i64, u64) {
        (self.last.time, self.last.ordinal)
    }

    /// The nodes in capture order.
    pub fn in_order(&self) -> Vec<&Node> {
        let mut v: Vec<&Node> = self.nodes().collect();
        v.reverse();
        v
    }

    /// The selection sort key.
    pub fn sort_key(&self, stages: usize) -> SortKey {
        let nodes = self.in_order();
        let mut counts = vec![0u8; stages];
        for n in &nodes {
            if let Some(c) = counts.get_mut(usize::from(n.stage)) {
                *c = c.saturating_add(1);
            }
        }
        SortKey {
            start: self.start,
            first: self.first,
            counts,
            ordinals: nodes.iter().map(|n| n.ordinal).collect(),
        }
    }

    /// The output id: `pattern:` then each stage's ordinals joined by `.`,
    /// stages separated by `/`.
    pub fn id(&self, pattern: &str, stages: usize) -> String {
        let nodes = self.in_order();
        let mut id = String::with_capacity(pattern.len() + 1 + nodes.len() * 8 + stages);
        id.push_str(pattern);
        id.push(':');
        let mut at = 0usize;
        for stage in 0..stages {
            if stage > 0 {
                id.push('/');
            }
            let mut first = true;
            while let Some(n) = nodes.get(at) {
                if usize::from(n.stage) != stage {
                    break;
                }
                if !first {
                    id.push('.');
                }
                first = false;
                id.push_str(&n.ordinal.to_string());
                at += 1;
            }
        }
        id
    }
}

/// Walks a capture list backwards.
pub(crate) struct Nodes<'a> {
    at: Option<&'a Arc<Node>>,
}

impl<'a> Iterator for Nodes<'a> {
    type Item = &'a Node;
    fn next(&mut self) -> Option<&'a Node> {
        let n = self.at?;
        self.at = n.prev.as_ref();
        Some(n)
    }
}

/// A live branch: captures and the stage it waits for (to enter or repeat).
#[derive(Debug, Clone)]
pub(crate) struct Branch {
    /// The stage waited for.
    pub wait: u8,
    /// Its captures.
    pub caps: Caps,
}

impl Branch {
    /// Whether every stage holds at least its `min` captures.
    pub fn complete(&self, shape: &Shape) -> bool {
        let s = usize::from(self.wait);
        let count = if usize::from(self.caps.last.stage) == s {
            u32::from(self.caps.last_count)
        } else {
            0
        };
        count >= shape.min[s] && shape.optional_after[s]
    }
}

/// A pattern's stage bounds, precomputed.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// `min` of each stage.
    pub min: Vec<u32>,
    /// `max` of each stage.
    pub max: Vec<u32>,
    /// Whether every stage after this one has `min = 0`.
    pub optional_after: Vec<bool>,
}

impl Shape {
    /// The shape of a pattern.
    pub fn of(p: &Pattern) -> Shape {
        let n = p.stages.len();
        let mut optional_after = vec![true; n];
        for i in (0..n.saturating_sub(1)).rev() {
            optional_after[i] = optional_after[i + 1] && p.stages[i + 1].min == 0;
        }
        Shape {
            min: p.stages.iter().map(|s| s.min).collect(),
            max: p.stages.iter().map(|s| s.max).collect(),
            optional_after,
        }
    }

    /// Stages.
    pub fn len(&self) -> usize {
        self.min.len()
    }
}

/// Successors of capturing into `stage` (the captures `caps` already hold
/// the new capture, `caps.last_count` being the stage's count `c`):
/// - repeat: a branch waiting for `stage` if `c < max`;
/// - proceed: if `c >= min`, a branch waiting for each later stage `j` such
///   that every stage strictly between has `min = 0`;
/// - complete: if `c >= min` and every later stage has `min = 0`, `caps` is a
///   candidate.
pub(crate) fn successors(
    shape: &Shape,
    stage: u8,
    caps: Caps,
    branches: &mut Vec<Branch>,
    candidates: &mut Vec<Caps>,
) {
    let s = usize::from(stage);
    let c = u32::from(caps.last_count);
    if c < shape.max[s] {
        branches.push(Branch {
            wait: stage,
            caps: caps.clone(),
        });
    }
    if c >= shape.min[s] {
        for j in s + 1..shape.len() {
            branches.push(Branch {
                wait: j as u8,
                caps: caps.clone(),
            });
            if shape.min[j] > 0 {
                break;
            }
        }
        if shape.optional_after[s] {
            candidates.push(caps);
        }
    }
}
