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

use std::cmp::Ordering;
use std::sync::Arc;

use crate::buffer::Pending;
use crate::event::Event;
use crate::pattern::Pattern;

/// One capture.
#[derive(Debug)]
pub(crate) struct Node {
    /// The captured event's ordinal.
    pub ordinal: u64,
    /// Its time.
    pub time: i64,
    /// The event.
    pub event: Event,
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
/// in stage order, all capture ordinals in stage order)`. Captures hold at
/// most 32 stages and 128 events, so a key fits on the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SortKey {
    start: i64,
    first: u64,
    stages: u8,
    counts: [u8; MAX_STAGES],
    len: u8,
    ordinals: [u64; MAX_CAPTURES],
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &SortKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &SortKey) -> Ordering {
        (self.start, self.first)
            .cmp(&(other.start, other.first))
            .then_with(|| {
                self.counts[..usize::from(self.stages)]
                    .cmp(&other.counts[..usize::from(other.stages)])
            })
            .then_with(|| {
                self.ordinals[..usize::from(self.len)]
                    .cmp(&other.ordinals[..usize::from(other.len)])
            })
    }
}

const MAX_STAGES: usize = crate::pattern::MAX_STAGES;
const MAX_CAPTURES: usize = crate::pattern::MAX_CAPTURES as usize;

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
        let mut key = SortKey {
            start: self.start,
            first: self.first,
            stages: stages.min(MAX_STAGES) as u8,
            counts: [0; MAX_STAGES],
            len: 0,
            ordinals: [0; MAX_CAPTURES],
        };
        let n = usize::from(self.len).min(MAX_CAPTURES);
        key.len = n as u8;
        // the list is walked from its end: fill the ordinals backwards
        for (i, node) in self.nodes().take(n).enumerate() {
            key.ordinals[n - 1 - i] = node.ordinal;
            if let Some(c) = key.counts.get_mut(usize::from(node.stage)) {
                *c = c.saturating_add(1);
            }
        }
        key
    }

    /// Compares by the selection sort key, cheaply when starts differ.
    pub fn cmp_key(&self, other: &Caps, stages: usize) -> Ordering {
        (self.start, self.first)
            .cmp(&(other.start, other.first))
            .then_with(|| self.sort_key(stages).cmp(&other.sort_key(stages)))
    }
}

/// Appends `n` in decimal (no formatting machinery on the output path).
pub(crate) fn push_decimal(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        s.push(char::from(d));
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

#[cfg(test)]
mod tests {
    #[test]
    fn decimals_are_written_plainly() {
        for n in [0u64, 7, 10, 123_456, u64::MAX] {
            let mut s = String::new();
            super::push_decimal(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }
}
