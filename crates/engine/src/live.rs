//! The live window index: every bucket that is not finalized.
//!
//! Aligned windows (fixed, sliding, stream-time) keep their buckets by start,
//! then by key: the end is `start + size`, so the start order is the end order
//! that readiness (`end <= W`) and finalization (`W > end + lateness`) walk.
//! Session windows are in [`super::session`]: per key by start, plus a
//! queue by end.
//! Every operation a call or a tick makes costs O(log n) (amortized, for
//! sessions) plus what it returns: nothing here scans all live buckets
//! except the reads ([`LiveIndex::buckets`], used by checkpoints, and
//! [`LiveIndex::for_each_ending_in`], used by queries and restores).

use std::collections::BTreeMap;

use super::aggregate::Agg;
use super::key_aggs::KeyAggs;
use super::pipeline::WindowDef;
use super::session::SessionWindow;
use streamforge_keys::KeyId;

pub use super::bucket::{BucketRef, WinNo};

/// Buckets of one aligned window: start -> key -> aggregate. The per-start
/// key maps live in a slab so that a small direct-mapped cache of recently
/// used starts skips the ordered-map search on the hot path (consecutive
/// events mostly hit the same few windows); emptied maps are reused.
#[derive(Debug, Clone, Default)]
struct AlignedBuckets {
    by_start: BTreeMap<i128, u32>,
    slab: Vec<KeyAggs>,
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
                        self.slab.push(KeyAggs::default());
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
        self.slab[self.slot(start)? as usize].get(key)
    }

    /// Adds a value; returns whether the bucket is new.
    #[inline]
    fn add(&mut self, start: i128, key: KeyId, value: i64) -> bool {
        let slot = self.slot_mut(start);
        self.slab[slot as usize].add(key, value)
    }

    /// Inserts a restored bucket; false if the address exists.
    fn insert(&mut self, start: i128, key: KeyId, agg: Agg) -> bool {
        let slot = self.slot_mut(start);
        self.slab[slot as usize].insert(key, agg)
    }

    /// Starts and key maps with `start` in the range.
    fn range(
        &self,
        range: impl std::ops::RangeBounds<i128>,
    ) -> impl Iterator<Item = (i128, &KeyAggs)> {
        self.by_start
            .range(range)
            .map(|(&start, &slot)| (start, &self.slab[slot as usize]))
    }

    /// Removes the window with the smallest start if it is below `limit`;
    /// calls `f` with its start and keys.
    fn pop_first_below(&mut self, limit: i128, mut f: impl FnMut(i128, &KeyAggs)) -> bool {
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
        keys.clear();
        self.free.push(slot);
        true
    }
}

/// The live buckets of one window, with the window's definition: an event
/// is assigned by the index it updates (see `keywork::touch`), so an
/// aligned add on a session window, or the reverse, cannot be written.
// One value per window of the pipeline: the size difference is irrelevant.
// Aligned to 128 bytes (two cache lines, what adjacent-line prefetching
// pulls in together) like [`LiveIndex`]: see there.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
#[repr(align(128))]
pub enum WindowIndex {
    /// A fixed, sliding or stream-time window.
    Aligned(AlignedWindow),
    /// A session window.
    Session(SessionWindow),
}

/// The definition of an aligned window (every kind but `session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignedDef {
    /// `fixed`: one window by timestamp.
    Fixed {
        /// Width.
        size: i64,
    },
    /// `sliding`: every window containing the timestamp.
    Sliding {
        /// Width.
        size: i64,
        /// Distance between starts.
        step: i64,
    },
    /// `stream_time`: one window by stream time.
    StreamTime {
        /// Width.
        size: i64,
    },
}

/// The buckets of an aligned window: `[start, start + size)` per key.
#[derive(Debug, Clone)]
pub struct AlignedWindow {
    window: WinNo,
    def: AlignedDef,
    size: i128,
    buckets: AlignedBuckets,
    len: usize,
}

impl AlignedWindow {
    /// The window's definition.
    #[inline]
    pub fn def(&self) -> AlignedDef {
        self.def
    }

    /// The address of `key`'s bucket `[start, start + size)`.
    #[inline]
    pub fn bucket(&self, key: KeyId, start: i128) -> BucketRef {
        BucketRef {
            window: self.window,
            key,
            start,
            end: start + self.size,
        }
    }

    /// The aggregate of `key`'s bucket at `start`, if live.
    #[inline]
    pub fn get(&self, key: KeyId, start: i128) -> Option<&Agg> {
        self.buckets.get(start, key)
    }

    /// Adds `value` to `key`'s bucket at `start`, creating it if needed.
    #[inline]
    pub fn add(&mut self, key: KeyId, start: i128, value: i64) {
        if self.buckets.add(start, key, value) {
            self.len += 1;
        }
    }

    /// Calls `f` for every bucket with `lo < end <= hi`: the starts of
    /// `(lo - size, hi - size]`.
    /// Whether [`LiveIndex::tick`] with `newly` and `threshold` would find
    /// a bucket of this window (ready or final).
    fn tick_has_work(&self, newly: Option<(Option<i128>, i128)>, threshold: Option<i128>) -> bool {
        if let Some(t) = threshold {
            let first = self.buckets.by_start.first_key_value();
            if first.is_some_and(|(&start, _)| start < t - self.size) {
                return true;
            }
        }
        newly.is_some_and(|(lo, hi)| self.starts_ending_in(lo, hi).next().is_some())
    }

    /// The starts (with their keys) of the buckets with `lo < end <= hi`.
    fn starts_ending_in(
        &self,
        lo: Option<i128>,
        hi: i128,
    ) -> impl Iterator<Item = (i128, &KeyAggs)> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let size = self.size;
        let lower = match lo {
            Some(lo) => Excluded(lo - size),
            None => Unbounded,
        };
        let upper = hi - size;
        // An empty range (a B-tree range panics on a start past its end).
        let empty = matches!(lower, Excluded(l) if l >= upper);
        (!empty)
            .then(|| self.buckets.range((lower, Included(upper))))
            .into_iter()
            .flatten()
    }

    fn for_each_ending_in(&self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        for (start, keys) in self.starts_ending_in(lo, hi) {
            for (key, agg) in keys.iter() {
                f(
                    BucketRef {
                        window: self.window,
                        key,
                        start,
                        end: start + self.size,
                    },
                    agg,
                );
            }
        }
    }
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
}

impl LiveIndex {
    /// An empty index for the windows of a pipeline, in name order.
    pub fn new<'a>(defs: impl IntoIterator<Item = &'a WindowDef>) -> LiveIndex {
        let windows = defs
            .into_iter()
            .enumerate()
            .map(|(window, def)| {
                let aligned = |def: AlignedDef, size: i64| {
                    WindowIndex::Aligned(AlignedWindow {
                        window,
                        def,
                        size: size as i128,
                        buckets: AlignedBuckets::new(),
                        len: 0,
                    })
                };
                match *def {
                    WindowDef::Fixed { size } => aligned(AlignedDef::Fixed { size }, size),
                    WindowDef::Sliding { size, step } => {
                        aligned(AlignedDef::Sliding { size, step }, size)
                    }
                    WindowDef::StreamTime { size } => {
                        aligned(AlignedDef::StreamTime { size }, size)
                    }
                    WindowDef::Session { gap } => {
                        WindowIndex::Session(SessionWindow::new(window, gap))
                    }
                }
            })
            .collect();
        LiveIndex { windows }
    }

    /// Number of live buckets.
    pub fn len(&self) -> usize {
        self.windows
            .iter()
            .map(|w| match w {
                WindowIndex::Aligned(a) => a.len,
                WindowIndex::Session(s) => s.len(),
            })
            .sum()
    }

    /// Every window, in name order, to update.
    #[inline]
    pub fn windows_mut(&mut self) -> std::slice::IterMut<'_, WindowIndex> {
        self.windows.iter_mut()
    }

    /// The aggregate of a live bucket.
    #[inline]
    pub fn get(&self, b: &BucketRef) -> Option<&Agg> {
        match self.windows.get(b.window)? {
            WindowIndex::Aligned(a) => {
                if b.end - b.start != a.size {
                    return None;
                }
                a.buckets.get(b.start, b.key)
            }
            WindowIndex::Session(s) => s.get(b.key, b.start, b.end),
        }
    }

    /// Calls `f` for every live bucket with `lo < end <= hi` (`lo = None`:
    /// no lower bound), with its aggregate, in no particular order: a read
    /// (queries, restores), which looks at every by-end entry of the
    /// session windows. Ticks use [`LiveIndex::sweep_ready`].
    pub fn for_each_ending_in(
        &self,
        lo: Option<i128>,
        hi: i128,
        mut f: impl FnMut(BucketRef, &Agg),
    ) {
        for index in &self.windows {
            match index {
                WindowIndex::Aligned(a) => a.for_each_ending_in(lo, hi, &mut f),
                WindowIndex::Session(s) => s.for_each_ending_in(lo, hi, &mut f),
            }
        }
    }

    /// A tick's work: `ready(b, agg)` for every live bucket with
    /// `lo < end <= hi` when `newly` is `Some((lo, hi))` (what
    /// [`LiveIndex::for_each_ending_in`] would call `f` with), then `fin(b)`
    /// for every one with `end < threshold` when there is a threshold,
    /// which is removed. A session window pops only the sessions the
    /// watermark reached since its last sweep (when `lo` is behind that
    /// sweep, it also reads those it swept before).
    pub fn tick(
        &mut self,
        newly: Option<(Option<i128>, i128)>,
        threshold: Option<i128>,
        mut ready: impl FnMut(BucketRef, &Agg),
        mut fin: impl FnMut(BucketRef),
    ) {
        for index in &mut self.windows {
            match index {
                WindowIndex::Aligned(a) => {
                    if let Some((lo, hi)) = newly {
                        a.for_each_ending_in(lo, hi, &mut ready);
                    }
                    if let Some(threshold) = threshold {
                        let (window, size) = (a.window, a.size);
                        let len = &mut a.len;
                        while a.buckets.pop_first_below(threshold - size, |start, keys| {
                            *len -= keys.len();
                            for (key, _) in keys.iter() {
                                fin(BucketRef {
                                    window,
                                    key,
                                    start,
                                    end: start + size,
                                });
                            }
                        }) {}
                    }
                }
                WindowIndex::Session(s) => s.tick(newly, threshold, &mut ready, &mut fin),
            }
        }
    }

    /// Whether [`LiveIndex::tick`] with these arguments would find any
    /// bucket (ready or final). False means the tick would call neither
    /// `ready` nor `fin`; true may still find none (a session window counts
    /// its stale queue entries).
    pub fn tick_has_work(
        &self,
        newly: Option<(Option<i128>, i128)>,
        threshold: Option<i128>,
    ) -> bool {
        self.windows.iter().any(|index| match index {
            WindowIndex::Aligned(a) => a.tick_has_work(newly, threshold),
            WindowIndex::Session(s) => s.tick_has_work(newly, threshold),
        })
    }

    /// The sweep of [`LiveIndex::tick`] alone.
    pub fn sweep_ready(&mut self, lo: Option<i128>, hi: i128, f: impl FnMut(BucketRef, &Agg)) {
        self.tick(Some((lo, hi)), None, f, |_| {});
    }

    /// Removes every live bucket with `end < threshold`, calling `out` with
    /// each: the finalization of [`LiveIndex::tick`] alone.
    pub fn finalize_below(&mut self, threshold: i128, out: impl FnMut(BucketRef)) {
        self.tick(None, Some(threshold), |_, _| {}, out);
    }

    /// Every live bucket of every window with its aggregate, in no particular
    /// order (callers sort by address).
    pub fn buckets<'s>(&'s self, mut f: impl FnMut(BucketRef, &'s Agg)) {
        for index in &self.windows {
            match index {
                WindowIndex::Aligned(a) => {
                    for (start, keys) in a.buckets.range(..) {
                        for (key, agg) in keys.iter() {
                            f(
                                BucketRef {
                                    window: a.window,
                                    key,
                                    start,
                                    end: start + a.size,
                                },
                                agg,
                            );
                        }
                    }
                }
                WindowIndex::Session(s) => s.buckets(&mut f),
            }
        }
    }

    /// Restore: inserts a bucket whose address the caller checked against
    /// the window's definition. Fails if the address exists, or for
    /// sessions if it intersects or touches a live session.
    pub fn insert_restored(&mut self, b: BucketRef, agg: Agg) -> Result<(), String> {
        match self.windows.get_mut(b.window) {
            None => return Err(format!("window number {} is not in the index", b.window)),
            Some(WindowIndex::Aligned(a)) => {
                if !a.buckets.insert(b.start, b.key, agg) {
                    return Err("duplicate bucket address".into());
                }
                a.len += 1;
            }
            Some(WindowIndex::Session(s)) => s.insert(b, agg, true)?,
        }
        Ok(())
    }

    /// Resharding: puts in place a bucket of another live index with the
    /// same windows (both built from the processor's definitions) whose key
    /// has its buckets here only. Such a bucket is valid and new here (the
    /// index it came from held it once, and its key's sessions do not
    /// intersect or touch), so nothing is checked and nothing can fail.
    pub fn place(&mut self, b: BucketRef, agg: Agg) {
        match &mut self.windows[b.window] {
            WindowIndex::Aligned(a) => {
                if a.buckets.insert(b.start, b.key, agg) {
                    a.len += 1;
                }
            }
            WindowIndex::Session(s) => {
                // Unchecked: nothing can fail.
                let _ = s.insert(b, agg, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::test_rng::Rng;

    fn all(live: &LiveIndex) -> BTreeSet<(usize, u32, i128, i128)> {
        let mut out = BTreeSet::new();
        live.buckets(|b, _| {
            out.insert((b.window, b.key, b.start, b.end));
        });
        out
    }

    fn queue_len(live: &LiveIndex) -> (usize, usize) {
        match &live.windows[1] {
            WindowIndex::Session(s) => (s.queue_len(), s.len()),
            WindowIndex::Aligned(_) => unreachable!(),
        }
    }

    /// Ticks' sweeps, reads and finalization agree with a scan of every
    /// live bucket, over random events and watermarks on a fixed and a
    /// session window, including sweeps that start behind the last one; a
    /// tick `tick_has_work` calls idle finds nothing;
    /// and the by-end queue stays within twice the live sessions (plus the
    /// slack), however long the watermark stands still.
    #[test]
    fn the_by_end_queue_answers_what_a_scan_would() {
        let mut idle_ticks = 0;
        for seed in 0..200u64 {
            let mut rng = Rng(seed);
            let defs = [WindowDef::Fixed { size: 10 }, WindowDef::Session { gap: 5 }];
            let mut live = LiveIndex::new(defs.iter());
            let lateness = rng.below(20) as i128;
            let keys = 1 + rng.below(6) as u32;
            let mut w: Option<i128> = None;
            for _ in 0..400 {
                match rng.below(10) {
                    0 | 1 => {
                        // A tick (sometimes from behind the last one).
                        let lo = if rng.below(8) == 0 {
                            w.map(|w| w - rng.below(30) as i128)
                        } else {
                            w
                        };
                        let hi = w.unwrap_or(0) + rng.below(15) as i128;
                        let want: BTreeSet<_> = all(&live)
                            .into_iter()
                            .filter(|b| lo.is_none_or(|lo| b.3 > lo) && b.3 <= hi)
                            .collect();
                        let mut got = BTreeSet::new();
                        let mut aggs = Vec::new();
                        let mut combined = live.clone();
                        live.sweep_ready(lo, hi, |b, agg| {
                            assert!(got.insert((b.window, b.key, b.start, b.end)));
                            aggs.push((b, *agg));
                        });
                        for &(b, agg) in &aggs {
                            assert_eq!(live.get(&b), Some(&agg));
                        }
                        assert_eq!(got, want, "seed {seed}: sweep ({lo:?}, {hi}]");
                        w = Some(w.map_or(hi, |w| w.max(hi)));
                        let threshold = w.unwrap_or(0) - lateness;
                        let (gone, kept): (BTreeSet<_>, BTreeSet<_>) =
                            all(&live).into_iter().partition(|b| b.3 < threshold);
                        let mut got = BTreeSet::new();
                        live.finalize_below(threshold, |b| {
                            assert!(got.insert((b.window, b.key, b.start, b.end)));
                        });
                        assert_eq!(got, gone, "seed {seed}: finalize below {threshold}");
                        assert_eq!(all(&live), kept);
                        // The same in one pass; a tick said to have no
                        // work finds nothing.
                        let has_work = combined.tick_has_work(Some((lo, hi)), Some(threshold));
                        idle_ticks += usize::from(!has_work);
                        let (mut ready, mut fin) = (Vec::new(), BTreeSet::new());
                        combined.tick(
                            Some((lo, hi)),
                            Some(threshold),
                            |b, agg| ready.push((b, *agg)),
                            |b| assert!(fin.insert((b.window, b.key, b.start, b.end))),
                        );
                        let key = |x: &(BucketRef, Agg)| (x.0.window, x.0.key, x.0.start);
                        ready.sort_unstable_by_key(key);
                        aggs.sort_unstable_by_key(key);
                        assert_eq!(ready, aggs, "seed {seed}: one pass");
                        assert_eq!(fin, gone, "seed {seed}: one pass");
                        assert_eq!(all(&combined), kept);
                        if !has_work {
                            assert!(ready.is_empty() && fin.is_empty(), "seed {seed}: idle tick");
                        }
                        if rng.below(2) == 0 {
                            live = combined;
                        }
                    }
                    2 => {
                        // A read.
                        let hi = w.unwrap_or(0);
                        let want: BTreeSet<_> =
                            all(&live).into_iter().filter(|b| b.3 <= hi).collect();
                        let mut got = BTreeSet::new();
                        live.for_each_ending_in(None, hi, |b, agg| {
                            assert_eq!(live.get(&b), Some(agg));
                            assert!(got.insert((b.window, b.key, b.start, b.end)));
                        });
                        assert_eq!(got, want, "seed {seed}: read up to {hi}");
                    }
                    _ => {
                        let key = rng.below(keys as u64) as KeyId;
                        let ts = (w.unwrap_or(0) - lateness) as i64 + rng.below(40) as i64;
                        for index in live.windows_mut() {
                            match index {
                                WindowIndex::Aligned(a) => {
                                    a.add(key, (ts as i128).div_euclid(10) * 10, 1)
                                }
                                WindowIndex::Session(s) => {
                                    s.add(key, ts, 1, |_, _| {});
                                }
                            }
                        }
                    }
                }
                let (queue, sessions) = queue_len(&live);
                assert!(queue <= 2 * sessions + 64 + 1, "seed {seed}");
            }
        }
        // ticks with nothing to find were met (and found nothing)
        assert!(idle_ticks > 100, "{idle_ticks} idle ticks");
    }
}
