//! Pushed events waiting for an advance, taken in `(time, ordinal)` order.
//!
//! A min-heap: a push costs O(log n), an advance pops exactly the events it
//! takes (O(k log n)), whatever is buffered beyond its watermark. (Sorting
//! each advance's arrivals and merging them with the leftovers was measured
//! no cheaper on nearly-ordered input and needs more care to stay bounded.)
//! A failed advance puts its events back.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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
    pub event: Event,
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
    #[inline]
    pub fn push(&mut self, p: Pending) {
        self.heap.push(p);
    }

    /// Removes, in `(time, ordinal)` order, every event with
    /// `time <= watermark`, appending them to `out`.
    pub fn take_through(&mut self, watermark: i64, out: &mut Vec<Pending>) {
        while self.heap.peek().is_some_and(|p| p.time <= watermark) {
            if let Some(p) = self.heap.pop() {
                out.push(p);
            }
        }
    }

    /// Puts back what a failed advance took.
    pub fn put_back(&mut self, taken: impl IntoIterator<Item = Pending>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(time: i64, ordinal: u64) -> Pending {
        Pending {
            time,
            ordinal,
            key: 0,
            event: Event::default(),
        }
    }

    fn taken(b: &mut Buffer, w: i64) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        b.take_through(w, &mut out);
        out.iter().map(|p| (p.time, p.ordinal)).collect()
    }

    #[test]
    fn takes_in_time_then_ordinal_order() {
        let mut b = Buffer::default();
        for (t, o) in [(5, 1), (3, 2), (9, 3), (3, 4), (7, 5)] {
            b.push(p(t, o));
        }
        assert_eq!(taken(&mut b, 4), [(3, 2), (3, 4)]);
        assert_eq!(b.len(), 3);
        b.push(p(6, 6));
        b.push(p(5, 7));
        assert_eq!(taken(&mut b, 6), [(5, 1), (5, 7), (6, 6)]);
        for o in 0..10_000u64 {
            b.push(p(1_000_000 + (o as i64 % 97), 100 + o));
        }
        assert_eq!(taken(&mut b, 6), Vec::<(i64, u64)>::new());
        b.push(p(8, 20_000));
        assert_eq!(taken(&mut b, 8), [(7, 5), (8, 20_000)]);
        let all = taken(&mut b, i64::MAX);
        assert_eq!(all.len(), 10_001);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(b.len(), 0);
    }
}
