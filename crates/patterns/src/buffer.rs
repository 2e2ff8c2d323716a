//! Pushed events waiting for an advance, taken in `(time, ordinal)` order.
//!
//! A min-heap: a push costs O(log n), an advance pops exactly the events it
//! takes (O(k log n)), whatever is buffered beyond its watermark. (Sorting
//! each advance's arrivals and merging them with the leftovers was measured
//! no cheaper on nearly-ordered input and needs more care to stay bounded.)
//! A failed advance puts its events back.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::event::Event;
use streamforge_keys::KeyId;

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

/// The buffer: a min-heap of small `(time, ordinal, slot)` entries over a
/// slab of the events (sifting moves 24 bytes, not the whole event).
#[derive(Debug, Clone, Default)]
pub(crate) struct Buffer {
    heap: BinaryHeap<Reverse<(i64, u64, u32)>>,
    /// `(key, event)` by slot; `None` for a free slot.
    slab: Vec<Option<(KeyId, Event)>>,
    /// Free slots.
    free: Vec<u32>,
}

impl Buffer {
    /// Buffers one event.
    #[inline]
    pub fn push(&mut self, p: Pending) {
        let entry = Some((p.key, p.event));
        let slot = match self.free.pop() {
            Some(s) => {
                if let Some(x) = self.slab.get_mut(s as usize) {
                    *x = entry;
                }
                s
            }
            None => {
                self.slab.push(entry);
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Reverse((p.time, p.ordinal, slot)));
    }

    /// Removes, in `(time, ordinal)` order, every event with
    /// `time <= watermark`, appending them to `out`.
    pub fn take_through(&mut self, watermark: i64, out: &mut Vec<Pending>) {
        while self.heap.peek().is_some_and(|r| r.0 .0 <= watermark) {
            let Some(Reverse((time, ordinal, slot))) = self.heap.pop() else {
                break;
            };
            if let Some((key, event)) = self.slab.get_mut(slot as usize).and_then(Option::take) {
                self.free.push(slot);
                out.push(Pending {
                    time,
                    ordinal,
                    key,
                    event,
                });
            }
        }
        if self.heap.is_empty() {
            // nothing buffered: the slab starts afresh (its room is kept)
            self.slab.clear();
            self.free.clear();
        }
    }

    /// Puts back what a failed advance took.
    pub fn put_back(&mut self, taken: impl IntoIterator<Item = Pending>) {
        for p in taken {
            self.push(p);
        }
    }

    /// Buffered events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Every buffered event, in ordinal order (for checkpoints).
    pub fn by_ordinal(&self) -> Vec<Pending> {
        let mut v: Vec<Pending> = self
            .heap
            .iter()
            .filter_map(|Reverse((time, ordinal, slot))| {
                let (key, event) = self.slab.get(*slot as usize)?.as_ref()?;
                Some(Pending {
                    time: *time,
                    ordinal: *ordinal,
                    key: *key,
                    event: event.clone(),
                })
            })
            .collect();
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
