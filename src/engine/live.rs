//! The live window index: every bucket that is not finalized.
//!
//! Aligned windows (fixed, sliding, stream-time) keep their buckets by start,
//! then by key: the end is `start + size`, so the start order is the end order
//! that readiness (`end <= W`) and finalization (`W > end + lateness`) walk.
//! Session windows keep, per key, their sessions by start (they never
//! intersect or touch, so start order is also end order) plus a by-end set.
//! Every operation costs O(log n) plus what it returns: nothing here scans all
//! live buckets except [`LiveIndex::buckets`], used by checkpoints and reads.
//!
//! docs/semantics.md, "Window assignment", sessions: every pair of live sessions of a window
//! and key that intersect OR touch (`a.end == b.start`) is merged,
//! transitively; the merged start is the minimum start, the merged end the
//! maximum end, and the aggregate combines each unique accepted event once.

use std::collections::{BTreeMap, BTreeSet};

use super::aggregate::Agg;
use super::hash::FxMap;
use super::keys::KeyId;
use super::pipeline::WindowDef;

/// Index of a window in the pipeline's name order.
pub type WinNo = u16;

/// A bucket address in interned form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketRef {
    /// Window.
    pub window: WinNo,
    /// Key.
    pub key: KeyId,
    /// Inclusive start.
    pub start: i128,
    /// Exclusive end.
    pub end: i128,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    end: i128,
    agg: Agg,
}

/// Buckets of one aligned window: start -> key -> aggregate. The per-start
/// key maps live in a slab so that a small direct-mapped cache of recently
/// used starts skips the ordered-map search on the hot path (consecutive
/// events mostly hit the same few windows); emptied maps are reused.
#[derive(Debug, Clone, Default)]
struct AlignedBuckets {
    by_start: BTreeMap<i128, u32>,
    slab: Vec<FxMap<KeyId, Agg>>,
    free: Vec<u32>,
    cache: [(i128, u32); 8],
}

const NO_SLOT: u32 = u32::MAX;

impl AlignedBuckets {
    fn new() -> Self {
        AlignedBuckets {
            cache: [(0, NO_SLOT); 8],
            ..Default::default()
        }
    }

    #[inline]
    fn cache_index(start: i128) -> usize {
        ((start as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize
    }

    /// The slab slot of `start`, if the window has buckets.
    #[inline]
    fn slot(&self, start: i128) -> Option<u32> {
        let (s, slot) = self.cache[Self::cache_index(start)];
        if slot != NO_SLOT && s == start {
            return Some(slot);
        }
        self.by_start.get(&start).copied()
    }

    /// The slab slot of `start`, created if needed.
    #[inline]
    fn slot_mut(&mut self, start: i128) -> u32 {
        let ci = Self::cache_index(start);
        let (s, slot) = self.cache[ci];
        if slot != NO_SLOT && s == start {
            return slot;
        }
        let slot = match self.by_start.get(&start) {
            Some(&slot) => slot,
            None => {
                let slot = match self.free.pop() {
                    Some(slot) => slot,
                    None => {
                        self.slab.push(FxMap::default());
                        (self.slab.len() - 1) as u32
                    }
                };
                self.by_start.insert(start, slot);
                slot
            }
        };
        self.cache[ci] = (start, slot);
        slot
    }

    #[inline]
    fn get(&self, start: i128, key: KeyId) -> Option<&Agg> {
        self.slab[self.slot(start)? as usize].get(&key)
    }

    /// Adds a value; returns whether the bucket is new.
    #[inline]
    fn add(&mut self, start: i128, key: KeyId, value: i64) -> bool {
        let slot = self.slot_mut(start);
        let keys = &mut self.slab[slot as usize];
        match keys.get_mut(&key) {
            Some(agg) => {
                agg.add(value);
                false
            }
            None => {
                keys.insert(key, Agg::of(value));
                true
            }
        }
    }

    /// Inserts a restored bucket; false if the address exists.
    fn insert(&mut self, start: i128, key: KeyId, agg: Agg) -> bool {
        let slot = self.slot_mut(start);
        self.slab[slot as usize].insert(key, agg).is_none()
    }

    /// Starts and key maps with `start` in the range.
    fn range(
        &self,
        range: impl std::ops::RangeBounds<i128>,
    ) -> impl Iterator<Item = (i128, &FxMap<KeyId, Agg>)> {
        self.by_start
            .range(range)
            .map(|(&start, &slot)| (start, &self.slab[slot as usize]))
    }

    /// Removes the window with the smallest start if it is below `limit`;
    /// calls `f` with its start and keys.
    fn pop_first_below(
        &mut self,
        limit: i128,
        mut f: impl FnMut(i128, &FxMap<KeyId, Agg>),
    ) -> bool {
        let Some((&start, &slot)) = self.by_start.first_key_value() else {
            return false;
        };
        if start >= limit {
            return false;
        }
        self.by_start.pop_first();
        for c in self.cache.iter_mut().filter(|c| c.1 == slot) {
            *c = (0, NO_SLOT);
        }
        let keys = &mut self.slab[slot as usize];
        f(start, keys);
        if keys.capacity() > 1 << 16 {
            *keys = FxMap::default();
        } else {
            keys.clear();
        }
        self.free.push(slot);
        true
    }
}

// One value per window of the pipeline: the size difference is irrelevant.
// Aligned to 128 bytes (two cache lines, what adjacent-line prefetching
// pulls in together) like [`LiveIndex`]: see there.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
#[repr(align(128))]
enum WindowIndex {
    Aligned {
        size: i128,
        buckets: AlignedBuckets,
    },
    Session {
        per_key: FxMap<KeyId, BTreeMap<i128, Session>>,
        by_end: BTreeSet<(i128, KeyId, i128)>,
    },
}

/// All live buckets of all windows.
///
/// Aligned to 128 bytes, as is each window's part: with key-hash shards, the
/// indexes of two shards sit side by side (in one `Vec`, and their window
/// lists in neighbouring allocations), and every new bucket writes their
/// counts and map headers. Unpadded, two shard threads wrote the same cache
/// lines all the time (false sharing): the K=2 engine bench measured 1.30x /
/// 1.31x over K=1 without the alignment and 1.44x / 1.48x with it, the
/// same binaries interleaved.
#[derive(Debug, Clone)]
#[repr(align(128))]
pub struct LiveIndex {
    windows: Vec<WindowIndex>,
    len: usize,
}

impl LiveIndex {
    /// An empty index for the windows of a pipeline, in name order.
    pub fn new<'a>(defs: impl IntoIterator<Item = &'a WindowDef>) -> LiveIndex {
        let windows = defs
            .into_iter()
            .map(|def| match *def {
                WindowDef::Fixed { size }
                | WindowDef::StreamTime { size }
                | WindowDef::Sliding { size, .. } => WindowIndex::Aligned {
                    size: size as i128,
                    buckets: AlignedBuckets::new(),
                },
                WindowDef::Session { .. } => WindowIndex::Session {
                    per_key: FxMap::default(),
                    by_end: BTreeSet::new(),
                },
            })
            .collect();
        LiveIndex { windows, len: 0 }
    }

    /// Number of live buckets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The aggregate of a live bucket.
    #[inline]
    pub fn get(&self, b: &BucketRef) -> Option<&Agg> {
        match &self.windows[b.window as usize] {
            WindowIndex::Aligned { size, buckets } => {
                if b.end - b.start != *size {
                    return None;
                }
                buckets.get(b.start, b.key)
            }
            WindowIndex::Session { per_key, .. } => {
                let s = per_key.get(&b.key)?.get(&b.start)?;
                (s.end == b.end).then_some(&s.agg)
            }
        }
    }

    /// Adds `value` to the aligned bucket `[start, start + size)`, creating
    /// it if needed. Returns its address.
    #[inline]
    pub fn add_aligned(&mut self, window: WinNo, key: KeyId, start: i128, value: i64) -> BucketRef {
        let WindowIndex::Aligned { size, buckets } = &mut self.windows[window as usize] else {
            unreachable!("aligned add on a session window")
        };
        if buckets.add(start, key, value) {
            self.len += 1;
        }
        BucketRef {
            window,
            key,
            start,
            end: start + *size,
        }
    }

    /// The aligned bucket `[start, start+size)` of `window` for `key`.
    pub fn aligned_ref(&self, window: WinNo, key: KeyId, start: i128) -> BucketRef {
        let end = match &self.windows[window as usize] {
            WindowIndex::Aligned { size, .. } => start + *size,
            WindowIndex::Session { .. } => start,
        };
        BucketRef {
            window,
            key,
            start,
            end,
        }
    }

    /// Adds an event to session `window`: the session `[t, t + gap)` merged
    /// with every live session of `key` it intersects or touches.
    /// `removed(b, agg)` is called for each session that disappears (before
    /// it does); returns the resulting session's address.
    pub fn add_session(
        &mut self,
        window: WinNo,
        key: KeyId,
        timestamp: i64,
        gap: i64,
        value: i64,
        mut removed: impl FnMut(BucketRef, &Agg),
    ) -> BucketRef {
        let WindowIndex::Session { per_key, by_end } = &mut self.windows[window as usize] else {
            unreachable!("session add on an aligned window")
        };
        let mut start = timestamp as i128;
        let mut end = start + gap as i128;
        let mut agg = Agg::of(value);
        let sessions = per_key.entry(key).or_default();
        // Sessions are disjoint and non-touching, so walking down from the
        // last one starting at or before `end` visits exactly the ones that
        // intersect or touch, while their end reaches `start`.
        let mut merged = Vec::new();
        for (&s_start, s) in sessions.range(..=end).rev() {
            if s.end < start {
                break;
            }
            merged.push(s_start);
        }
        for s_start in merged {
            let s = sessions.remove(&s_start).expect("listed session");
            removed(
                BucketRef {
                    window,
                    key,
                    start: s_start,
                    end: s.end,
                },
                &s.agg,
            );
            by_end.remove(&(s.end, key, s_start));
            self.len -= 1;
            agg.merge(&s.agg);
            start = start.min(s_start);
            end = end.max(s.end);
        }
        sessions.insert(start, Session { end, agg });
        by_end.insert((end, key, start));
        self.len += 1;
        BucketRef {
            window,
            key,
            start,
            end,
        }
    }

    /// Calls `f` for every live bucket with `lo < end <= hi` (`lo = None`:
    /// no lower bound).
    pub fn for_each_ending_in(&self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef)) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        for (w, index) in self.windows.iter().enumerate() {
            let window = w as WinNo;
            match index {
                WindowIndex::Aligned { size, buckets } => {
                    let lower = match lo {
                        Some(lo) => Excluded(lo - size),
                        None => Unbounded,
                    };
                    let upper = hi - size;
                    if let Excluded(l) = lower {
                        if l >= upper {
                            continue;
                        }
                    }
                    for (start, keys) in buckets.range((lower, Included(upper))) {
                        for &key in keys.keys() {
                            f(BucketRef {
                                window,
                                key,
                                start,
                                end: start + size,
                            });
                        }
                    }
                }
                WindowIndex::Session { by_end, .. } => {
                    let lower = match lo {
                        Some(lo) => Excluded((lo, KeyId::MAX, i128::MAX)),
                        None => Unbounded,
                    };
                    if lo.is_some_and(|lo| lo >= hi) {
                        continue;
                    }
                    for &(end, key, start) in
                        by_end.range((lower, Included((hi, KeyId::MAX, i128::MAX))))
                    {
                        f(BucketRef {
                            window,
                            key,
                            start,
                            end,
                        });
                    }
                }
            }
        }
    }

    /// Removes and returns every live bucket with `end < threshold`.
    pub fn finalize_below(&mut self, threshold: i128) -> Vec<BucketRef> {
        let mut out = Vec::new();
        for (w, index) in self.windows.iter_mut().enumerate() {
            let window = w as WinNo;
            match index {
                WindowIndex::Aligned { size, buckets } => {
                    let size = *size;
                    let len = &mut self.len;
                    while buckets.pop_first_below(threshold - size, |start, keys| {
                        *len -= keys.len();
                        out.extend(keys.keys().map(|&key| BucketRef {
                            window,
                            key,
                            start,
                            end: start + size,
                        }));
                    }) {}
                }
                WindowIndex::Session { per_key, by_end } => {
                    while let Some(&(end, key, start)) = by_end.first() {
                        if end >= threshold {
                            break;
                        }
                        by_end.pop_first();
                        if let Some(sessions) = per_key.get_mut(&key) {
                            sessions.remove(&start);
                            if sessions.is_empty() {
                                per_key.remove(&key);
                            }
                        }
                        self.len -= 1;
                        out.push(BucketRef {
                            window,
                            key,
                            start,
                            end,
                        });
                    }
                }
            }
        }
        out
    }

    /// Every live bucket of every window with its aggregate, in no particular
    /// order (callers sort by address).
    pub fn buckets(&self, mut f: impl FnMut(BucketRef, &Agg)) {
        for (w, index) in self.windows.iter().enumerate() {
            let window = w as WinNo;
            match index {
                WindowIndex::Aligned { size, buckets } => {
                    for (start, keys) in buckets.range(..) {
                        for (&key, agg) in keys {
                            f(
                                BucketRef {
                                    window,
                                    key,
                                    start,
                                    end: start + size,
                                },
                                agg,
                            );
                        }
                    }
                }
                WindowIndex::Session { per_key, .. } => {
                    for (&key, sessions) in per_key {
                        for (&start, s) in sessions {
                            f(
                                BucketRef {
                                    window,
                                    key,
                                    start,
                                    end: s.end,
                                },
                                &s.agg,
                            );
                        }
                    }
                }
            }
        }
    }

    /// Restore: inserts a bucket whose address is known to be valid and new.
    /// For sessions, fails if it intersects or touches a live session.
    pub fn insert_restored(&mut self, b: BucketRef, agg: Agg) -> Result<(), String> {
        match &mut self.windows[b.window as usize] {
            WindowIndex::Aligned { buckets, .. } => {
                if !buckets.insert(b.start, b.key, agg) {
                    return Err("duplicate bucket address".into());
                }
            }
            WindowIndex::Session { per_key, by_end } => {
                let sessions = per_key.entry(b.key).or_default();
                if let Some((_, s)) = sessions.range(..=b.end).next_back() {
                    if s.end >= b.start {
                        return Err(format!(
                            "sessions [{}, {}) and another of the same window and key intersect or touch",
                            b.start, b.end
                        ));
                    }
                }
                sessions.insert(b.start, Session { end: b.end, agg });
                by_end.insert((b.end, b.key, b.start));
            }
        }
        self.len += 1;
        Ok(())
    }
}
