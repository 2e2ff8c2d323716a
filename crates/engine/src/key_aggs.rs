//! The buckets of one start of an aligned window: key -> aggregate.
//!
//! An open-addressing table with linear probing whose slots hold the key
//! beside its aggregate, so that finding a bucket reads one slot (one or
//! two cache lines) where a general hash map reads a control byte group
//! and then the slot, two lines apart. On the event path the window
//! engine is bound by those reads (a bucket is rarely in cache: an event
//! touches seven across the windows of a pipeline), not by arithmetic.
//!
//! The table needs no deletion: a start's buckets leave together, when the
//! window is finalized ([`KeyAggs::clear`]). So there are no tombstones, and
//! a probe stops at the first empty slot. The load stays at most one half,
//! and ids are dense integers (interned keys), which a multiplicative hash
//! spreads evenly.

use super::aggregate::Agg;
use streamforge_keys::KeyId;

/// A free slot's key. An id this large would need 2^32 - 1 interned keys
/// first (the key table alone would then hold more than 100 GB).
const EMPTY: KeyId = KeyId::MAX;

/// Tables start at this many slots.
const MIN_SLOTS: usize = 16;

/// A table larger than this is released, not kept, when cleared.
const KEEP_SLOTS: usize = 1 << 17;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: KeyId,
    agg: Agg,
}

const FREE: Slot = Slot {
    key: EMPTY,
    agg: Agg::ZERO,
};

/// Key -> aggregate, for one start of one aligned window.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyAggs {
    /// Empty, or a power of two of slots.
    slots: Vec<Slot>,
    len: usize,
}

impl KeyAggs {
    /// Number of buckets.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first slot to probe for `key`.
    #[inline]
    fn home(&self, key: KeyId) -> usize {
        // Fibonacci hashing: the top bits of the product.
        let bits = self.slots.len().trailing_zeros();
        ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The slot holding `key`, or the free slot where it would go.
    #[inline]
    fn find(&self, key: KeyId) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].key;
            if k == key || k == EMPTY {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The aggregate of `key`'s bucket.
    #[inline]
    pub fn get(&self, key: KeyId) -> Option<&Agg> {
        if self.slots.is_empty() {
            return None;
        }
        let slot = &self.slots[self.find(key)];
        (slot.key == key).then_some(&slot.agg)
    }

    /// Adds `value` to `key`'s bucket, creating it; returns whether it is
    /// new.
    #[inline]
    pub fn add(&mut self, key: KeyId, value: i64) -> bool {
        self.upsert(key, |agg| agg.add(value), || Agg::of(value))
    }

    /// Inserts a bucket; false (and nothing changes) if `key` has one.
    pub fn insert(&mut self, key: KeyId, agg: Agg) -> bool {
        let mut fresh = true;
        self.upsert(key, |_| fresh = false, || agg);
        fresh
    }

    /// Updates `key`'s bucket with `update`, or creates it with `new`;
    /// returns whether it was created.
    #[inline]
    fn upsert(
        &mut self,
        key: KeyId,
        update: impl FnOnce(&mut Agg),
        new: impl FnOnce() -> Agg,
    ) -> bool {
        debug_assert!(key != EMPTY, "key id {key} is the free slot's");
        if (self.len + 1) * 2 > self.slots.len() {
            // Grow before looking: a probe must always meet a free slot.
            if self.get(key).is_none() {
                self.grow();
            }
        }
        let i = self.find(key);
        let slot = &mut self.slots[i];
        if slot.key == key {
            update(&mut slot.agg);
            false
        } else {
            *slot = Slot { key, agg: new() };
            self.len += 1;
            true
        }
    }

    #[cold]
    fn grow(&mut self) {
        let slots = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![FREE; slots]);
        for slot in old.into_iter().filter(|s| s.key != EMPTY) {
            let i = self.find(slot.key);
            self.slots[i] = slot;
        }
    }

    /// Every bucket, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (KeyId, &Agg)> {
        self.slots
            .iter()
            .filter(|s| s.key != EMPTY)
            .map(|s| (s.key, &s.agg))
    }

    /// Removes every bucket. Keeps the slots for the next start unless
    /// there are many, or many more than this start used: clearing and
    /// reading a table cost its slots, so a table a burst once grew must
    /// not make every later start that reuses it pay for the burst.
    pub fn clear(&mut self) {
        if self.slots.len() > KEEP_SLOTS || self.slots.len() > 4 * self.len.max(MIN_SLOTS) {
            self.slots = Vec::new();
        } else {
            self.slots.fill(FREE);
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The table answers like a map through growth and clears, for
    /// dense ids and for ids spread over the whole range.
    #[test]
    fn key_aggs_answer_like_a_map() {
        let mut rng = crate::test_rng::Rng(0x9e37_79b9);
        let mut next = |n: u64| rng.below(n);
        for spread in [1_000u64, 100_000, EMPTY as u64] {
            let mut t = KeyAggs::default();
            let mut m: BTreeMap<KeyId, Agg> = BTreeMap::new();
            for step in 0..100_000 {
                let key = next(spread) as KeyId;
                let value = next(2001) as i64 - 1000;
                match next(10) {
                    0 => {
                        let agg = Agg::of(value);
                        let fresh = !m.contains_key(&key);
                        if fresh {
                            m.insert(key, agg);
                        }
                        assert_eq!(t.insert(key, agg), fresh);
                    }
                    1 if step % 5_000 == 1 => {
                        t.clear();
                        m.clear();
                    }
                    _ => {
                        let fresh = match m.get_mut(&key) {
                            Some(agg) => {
                                agg.add(value);
                                false
                            }
                            None => {
                                m.insert(key, Agg::of(value));
                                true
                            }
                        };
                        assert_eq!(t.add(key, value), fresh);
                    }
                }
                assert_eq!(t.get(key), m.get(&key));
                assert_eq!(t.len(), m.len());
                assert!(t.slots.is_empty() || t.len() * 2 <= t.slots.len());
            }
            let mut all: Vec<(KeyId, Agg)> = t.iter().map(|(k, a)| (k, *a)).collect();
            all.sort_unstable_by_key(|x| x.0);
            let mut want: Vec<(KeyId, Agg)> = m.into_iter().collect();
            want.sort_unstable_by_key(|x| x.0);
            assert_eq!(all, want);
        }
    }

    /// A table grown by one large start is released when a start that
    /// used a small part of it is cleared, so later starts do not clear
    /// and read its slots.
    #[test]
    fn a_burst_does_not_stay_in_the_table() {
        let mut t = KeyAggs::default();
        for key in 0..10_000 {
            t.add(key, 1);
        }
        t.clear();
        assert!(t.slots.len() >= 20_000, "kept for a start of the same size");
        t.add(1, 1);
        t.clear();
        assert!(t.slots.is_empty(), "released: {} slots", t.slots.len());
        for key in 0..10 {
            t.add(key, 1);
        }
        t.clear();
        assert!(!t.slots.is_empty() && t.slots.len() <= 4 * MIN_SLOTS);
    }
}
