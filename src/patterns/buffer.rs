//! Pushed events waiting for an advance, taken in `(time, ordinal)` order.
//!
//! A min-heap: a push costs O(log n), an advance pops exactly the events it
//! takes (O(k log n)), whatever is buffered beyond its watermark. A failed
//! advance puts its events back.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::patterns::event::Event;
use crate::patterns::keys::KeyId;

/// A pushed event with its ordinal and interned key.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The event's time.
    pub time: i64,
    /// Its ordinal.
    pub ordinal: u64,
    /// Its interned key.
    pub key: KeyId,
    /// The event, shared with captures and output.
    pub event: Arc<Event>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Pending) -> bool {
        (self.time, self.ordinal) == (other.time, other.ordinal)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Pending) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Reversed `(time, ordinal)`: the heap's top is the earliest.
impl Ord for Pending {
    fn cmp(&self, other: &Pending) -> Ordering {
        (other.time, other.ordinal).cmp(&(self.time, self.ordinal))
    }
}

/// The buffer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Buffer {
    heap: BinaryHeap<Pending>,
}

impl Buffer {
    /// Buffers one event.
    pub fn push(&mut self, p: Pending) {
        self.heap.push(p);
    }

    /// Removes and returns, in `(time, ordinal)` order, every event with
    /// `time <= watermark`.
    pub fn take_through(&mut self, watermark: i64) -> Vec<Pending> {
        let mut out = Vec::new();
        while self.heap.peek().is_some_and(|p| p.time <= watermark) {
            if let Some(p) = self.heap.pop() {
                out.push(p);
            }
        }
        out
    }

    /// Puts back what a failed advance took.
    pub fn put_back(&mut self, taken: Vec<Pending>) {
        self.heap.extend(taken);
    }

    /// Buffered events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Every buffered event, in ordinal order (for checkpoints).
    pub fn by_ordinal(&self) -> Vec<&Pending> {
        let mut v: Vec<&Pending> = self.heap.iter().collect();
        v.sort_unstable_by_key(|p| p.ordinal);
        v
    }
}
