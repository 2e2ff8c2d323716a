//! The live window index: every bucket that is not finalized.
//!
//! Aligned windows (fixed, sliding, stream-time) keep their buckets by start,
//! then by key: the end is `start + size`, so the start order is the end order
//! that readiness (`end <= W`) and finalization (`W > end + lateness`) walk.
//! Session windows keep, per key, their sessions by start (they never
//! intersect or touch, so start order is also end order) plus a by-end
//! queue ([`ByEnd`]): a key's sessions have distinct ends, and the start of
//! the one ending at `end` is the last start before `end`.
//! Every operation a call or a tick makes costs O(log n) (amortized, for
//! sessions) plus what it returns: nothing here scans all live buckets
//! except the reads ([`LiveIndex::buckets`], used by checkpoints, and
//! [`LiveIndex::for_each_ending_in`], used by queries and restores).
//!
//! docs/semantics.md, "Window assignment", sessions: every pair of live sessions of a window
//! and key that intersect OR touch (`a.end == b.start`) is merged,
//! transitively; the merged start is the minimum start, the merged end the
//! maximum end, and the aggregate combines each unique accepted event once.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::aggregate::Agg;
use super::pipeline::WindowDef;
use streamforge_keys::FxMap;
use streamforge_keys::KeyId;

/// Index of a window in the pipeline's name order. A `usize` (not a
/// narrower integer a large pipeline could wrap): a bucket address is 48
/// bytes either way (its `i128` bounds align it to 16).
pub type WinNo = usize;

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
    /// The stamp of the session's current by-end entry (see [`ByEnd`]).
    stamp: u64,
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
    fn for_each_ending_in(&self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let size = self.size;
        let lower = match lo {
            Some(lo) => Excluded(lo - size),
            None => Unbounded,
        };
        let upper = hi - size;
        if let Excluded(l) = lower {
            if l >= upper {
                return;
            }
        }
        for (start, keys) in self.buckets.range((lower, Included(upper))) {
            for (&key, agg) in keys {
                f(
                    BucketRef {
                        window: self.window,
                        key,
                        start,
                        end: start + size,
                    },
                    agg,
                );
            }
        }
    }
}

/// A session's entry in the by-end queue: its end, its key, and the stamp
/// it had when the entry was made. Ordered by end only.
#[derive(Debug, Clone, Copy)]
struct EndEntry {
    end: i128,
    key: KeyId,
    stamp: u64,
}

impl PartialEq for EndEntry {
    fn eq(&self, other: &Self) -> bool {
        self.end == other.end
    }
}
impl Eq for EndEntry {}
impl PartialOrd for EndEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EndEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.end.cmp(&other.end)
    }
}

/// The sessions of a window by end, for ticks: which sessions became ready
/// (`before < end <= W`) and which are final (`end < threshold`).
///
/// Two min-heaps of [`EndEntry`], split at `swept` (the highest watermark a
/// tick has swept): `pending` holds the entries ending after it, `ready`
/// the others. A tick pops from `pending` what the new watermark reaches,
/// and finalization pops from both what the threshold passes. Entries are
/// never removed in place: when a session grows or merges, it gets a new
/// stamp and a new entry, and the old entry goes stale (no live session of
/// its key ends at its end with its stamp); stale entries are dropped when
/// they are popped. A push is O(1) in the common case (a new end is mostly
/// the largest) and a pop O(log n), where the ordered set this replaces
/// paid a B-tree search for both an insert and a remove on every grown
/// session.
///
/// Stale entries are bounded: when the queue holds more than twice the
/// live sessions (plus a constant), it is rebuilt from them ([`ByEnd::
/// rebuild`]), so its size follows the live sessions, never the events
/// received, even while the watermark stands still.
#[derive(Debug, Clone, Default)]
struct ByEnd {
    pending: BinaryHeap<Reverse<EndEntry>>,
    ready: BinaryHeap<Reverse<EndEntry>>,
    swept: Option<i128>,
    next_stamp: u64,
}

/// Stale entries tolerated beyond twice the live sessions.
const BY_END_SLACK: usize = 64;

impl ByEnd {
    /// A fresh stamp.
    #[inline]
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    #[inline]
    fn len(&self) -> usize {
        self.pending.len() + self.ready.len()
    }

    /// Files a session's entry.
    #[inline]
    fn push(&mut self, end: i128, key: KeyId, stamp: u64) {
        let e = Reverse(EndEntry { end, key, stamp });
        if self.swept.is_some_and(|s| end <= s) {
            self.ready.push(e);
        } else {
            self.pending.push(e);
        }
    }

    /// Drops every entry and files one per live session anew.
    fn rebuild(&mut self, per_key: &mut FxMap<KeyId, BTreeMap<i128, Session>>) {
        self.pending.clear();
        self.ready.clear();
        for (&key, sessions) in per_key.iter_mut() {
            for s in sessions.values_mut() {
                s.stamp = self.stamp();
                self.push(s.end, key, s.stamp);
            }
        }
    }
}

/// The sessions of a session window: per key by start, plus a by-end queue.
#[derive(Debug, Clone)]
pub struct SessionWindow {
    window: WinNo,
    gap: i64,
    per_key: FxMap<KeyId, BTreeMap<i128, Session>>,
    by_end: ByEnd,
    len: usize,
}

/// The live session an entry stands for, with its start: none if the
/// entry is stale.
#[inline]
fn live_of(
    per_key: &FxMap<KeyId, BTreeMap<i128, Session>>,
    e: &EndEntry,
) -> Option<(i128, Session)> {
    let (&start, s) = per_key.get(&e.key)?.range(..e.end).next_back()?;
    (s.end == e.end && s.stamp == e.stamp).then_some((start, *s))
}

impl SessionWindow {
    /// Files a session's new by-end entry, after which the queue is
    /// compacted if stale entries outnumber the live sessions.
    #[inline]
    fn file(&mut self, end: i128, key: KeyId, stamp: u64) {
        self.by_end.push(end, key, stamp);
        if self.by_end.len() > 2 * self.len + BY_END_SLACK {
            self.by_end.rebuild(&mut self.per_key);
        }
    }

    /// Adds an event: the session `[t, t + gap)` merged with every live
    /// session of `key` it intersects or touches. `removed(b, agg)` is
    /// called for each session that disappears (before it does); returns
    /// the resulting session's address.
    pub fn add(
        &mut self,
        key: KeyId,
        timestamp: i64,
        value: i64,
        mut removed: impl FnMut(BucketRef, &Agg),
    ) -> BucketRef {
        let window = self.window;
        let mut start = timestamp as i128;
        let mut end = start + self.gap as i128;
        let mut agg = Agg::of(value);
        let sessions = self.per_key.entry(key).or_default();
        // Sessions are disjoint and non-touching, so walking down from the
        // last one starting at or before `end` visits exactly the ones that
        // intersect or touch, while their end reaches `start`.
        //
        // The common cases first, without collecting: no session touches
        // (a new one), or exactly one does (it grows, in place when its
        // start stays).
        let mut near = sessions.range(..=end).rev();
        let first = near
            .next()
            .filter(|(_, s)| s.end >= start)
            .map(|(&k, &s)| (k, s));
        let second = near.next().is_some_and(|(_, s)| s.end >= start);
        match (first, second) {
            (None, _) => {
                let stamp = self.by_end.stamp();
                sessions.insert(start, Session { end, agg, stamp });
                self.len += 1;
                self.file(end, key, stamp);
                return BucketRef {
                    window,
                    key,
                    start,
                    end,
                };
            }
            (Some((s_start, s)), false) => {
                removed(
                    BucketRef {
                        window,
                        key,
                        start: s_start,
                        end: s.end,
                    },
                    &s.agg,
                );
                agg.merge(&s.agg);
                start = start.min(s_start);
                end = end.max(s.end);
                // Same end: the entry stands; a new end: a new entry.
                let stamp = if end == s.end {
                    s.stamp
                } else {
                    self.by_end.stamp()
                };
                if start == s_start {
                    if let Some(kept) = sessions.get_mut(&s_start) {
                        *kept = Session { end, agg, stamp };
                    }
                } else {
                    sessions.remove(&s_start);
                    sessions.insert(start, Session { end, agg, stamp });
                }
                if end != s.end {
                    self.file(end, key, stamp);
                }
                return BucketRef {
                    window,
                    key,
                    start,
                    end,
                };
            }
            (Some(_), true) => {}
        }
        let mut merged: Vec<(i128, Session)> = Vec::new();
        for (&s_start, s) in sessions.range(..=end).rev() {
            if s.end < start {
                break;
            }
            merged.push((s_start, *s));
        }
        for (s_start, s) in merged {
            sessions.remove(&s_start);
            removed(
                BucketRef {
                    window,
                    key,
                    start: s_start,
                    end: s.end,
                },
                &s.agg,
            );
            self.len -= 1;
            agg.merge(&s.agg);
            start = start.min(s_start);
            end = end.max(s.end);
        }
        let stamp = self.by_end.stamp();
        sessions.insert(start, Session { end, agg, stamp });
        self.len += 1;
        self.file(end, key, stamp);
        BucketRef {
            window,
            key,
            start,
            end,
        }
    }

    /// Calls `f` for every live session with `lo < end <= hi`, in no
    /// particular order. A tick's sweep: when `lo` is at least the last
    /// sweep's `hi`, it pops only what became ready; otherwise it also
    /// reads the ready entries.
    fn sweep_ready(&mut self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        let window = self.window;
        let after_lo = |end: i128| lo.is_none_or(|lo| end > lo);
        let mut report = |start: i128, e: &EndEntry, s: &Session| {
            f(
                BucketRef {
                    window,
                    key: e.key,
                    start,
                    end: e.end,
                },
                &s.agg,
            )
        };
        let behind = match (lo, self.by_end.swept) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(lo), Some(swept)) => lo < swept,
        };
        if behind {
            for Reverse(e) in self.by_end.ready.iter() {
                if after_lo(e.end) && e.end <= hi {
                    if let Some((start, s)) = live_of(&self.per_key, e) {
                        report(start, e, &s);
                    }
                }
            }
        }
        while let Some(&Reverse(e)) = self.by_end.pending.peek() {
            if e.end > hi {
                break;
            }
            self.by_end.pending.pop();
            if let Some((start, s)) = live_of(&self.per_key, &e) {
                if after_lo(e.end) {
                    report(start, &e, &s);
                }
                self.by_end.ready.push(Reverse(e));
            }
        }
        if self.by_end.swept.is_none_or(|s| s < hi) {
            self.by_end.swept = Some(hi);
        }
    }

    /// Calls `f` for every live session with `lo < end <= hi`, in no
    /// particular order: a read, which looks at every entry.
    fn for_each_ending_in(&self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        let entries = self.by_end.pending.iter().chain(self.by_end.ready.iter());
        for Reverse(e) in entries {
            if lo.is_none_or(|lo| e.end > lo) && e.end <= hi {
                if let Some((start, s)) = live_of(&self.per_key, e) {
                    f(
                        BucketRef {
                            window: self.window,
                            key: e.key,
                            start,
                            end: e.end,
                        },
                        &s.agg,
                    );
                }
            }
        }
    }

    /// Removes every live session with `end < threshold`, calling `out`
    /// with each.
    fn finalize_below(&mut self, threshold: i128, mut out: impl FnMut(BucketRef)) {
        for heap in [&mut self.by_end.ready, &mut self.by_end.pending] {
            while let Some(&Reverse(e)) = heap.peek() {
                if e.end >= threshold {
                    break;
                }
                heap.pop();
                let Some((start, _)) = live_of(&self.per_key, &e) else {
                    continue;
                };
                if let Some(sessions) = self.per_key.get_mut(&e.key) {
                    sessions.remove(&start);
                    if sessions.is_empty() {
                        self.per_key.remove(&e.key);
                    }
                }
                self.len -= 1;
                out(BucketRef {
                    window: self.window,
                    key: e.key,
                    start,
                    end: e.end,
                });
            }
        }
    }

    /// Puts a session in place: `check` says whether to refuse one that
    /// intersects or touches a live session of its key.
    fn insert(&mut self, b: BucketRef, agg: Agg, check: bool) -> Result<(), String> {
        let sessions = self.per_key.entry(b.key).or_default();
        if check {
            if let Some((_, prev)) = sessions.range(..=b.end).next_back() {
                if prev.end >= b.start {
                    return Err(format!(
                        "sessions [{}, {}) and another of the same window and key intersect or touch",
                        b.start, b.end
                    ));
                }
            }
        }
        let stamp = self.by_end.stamp();
        if sessions
            .insert(
                b.start,
                Session {
                    end: b.end,
                    agg,
                    stamp,
                },
            )
            .is_none()
        {
            self.len += 1;
        }
        self.file(b.end, b.key, stamp);
        Ok(())
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
                    WindowDef::Session { gap } => WindowIndex::Session(SessionWindow {
                        window,
                        gap,
                        per_key: FxMap::default(),
                        by_end: ByEnd::default(),
                        len: 0,
                    }),
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
                WindowIndex::Session(s) => s.len,
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
            WindowIndex::Session(s) => {
                let session = s.per_key.get(&b.key)?.get(&b.start)?;
                (session.end == b.end).then_some(&session.agg)
            }
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

    /// What [`LiveIndex::for_each_ending_in`] calls `f` with, for a tick
    /// from watermark `lo` to `hi`: a session window pops only the sessions
    /// the watermark reached since its last sweep (when `lo` is behind that
    /// sweep, it also reads those it swept before).
    pub fn sweep_ready(&mut self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        for index in &mut self.windows {
            match index {
                WindowIndex::Aligned(a) => a.for_each_ending_in(lo, hi, &mut f),
                WindowIndex::Session(s) => s.sweep_ready(lo, hi, &mut f),
            }
        }
    }

    /// Removes every live bucket with `end < threshold`, calling `out` with
    /// each.
    pub fn finalize_below(&mut self, threshold: i128, mut out: impl FnMut(BucketRef)) {
        for index in &mut self.windows {
            match index {
                WindowIndex::Aligned(a) => {
                    let (window, size) = (a.window, a.size);
                    let len = &mut a.len;
                    while a.buckets.pop_first_below(threshold - size, |start, keys| {
                        *len -= keys.len();
                        for &key in keys.keys() {
                            out(BucketRef {
                                window,
                                key,
                                start,
                                end: start + size,
                            });
                        }
                    }) {}
                }
                WindowIndex::Session(s) => s.finalize_below(threshold, &mut out),
            }
        }
    }

    /// Every live bucket of every window with its aggregate, in no particular
    /// order (callers sort by address).
    pub fn buckets<'s>(&'s self, mut f: impl FnMut(BucketRef, &'s Agg)) {
        for index in &self.windows {
            match index {
                WindowIndex::Aligned(a) => {
                    for (start, keys) in a.buckets.range(..) {
                        for (&key, agg) in keys {
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
                WindowIndex::Session(s) => {
                    for (&key, sessions) in &s.per_key {
                        for (&start, session) in sessions {
                            f(
                                BucketRef {
                                    window: s.window,
                                    key,
                                    start,
                                    end: session.end,
                                },
                                &session.agg,
                            );
                        }
                    }
                }
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

    /// splitmix64, for seeded operation sequences.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % n
        }
    }

    fn all(live: &LiveIndex) -> BTreeSet<(usize, u32, i128, i128)> {
        let mut out = BTreeSet::new();
        live.buckets(|b, _| {
            out.insert((b.window, b.key, b.start, b.end));
        });
        out
    }

    fn queue_len(live: &LiveIndex) -> (usize, usize) {
        match &live.windows[1] {
            WindowIndex::Session(s) => (s.by_end.len(), s.len),
            WindowIndex::Aligned(_) => unreachable!(),
        }
    }

    /// Ticks' sweeps, reads and finalization agree with a scan of every
    /// live bucket, over random events and watermarks on a fixed and a
    /// session window, including sweeps that start behind the last one;
    /// and the by-end queue stays within twice the live sessions (plus the
    /// slack), however long the watermark stands still.
    #[test]
    fn the_by_end_queue_answers_what_a_scan_would() {
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
                        live.sweep_ready(lo, hi, |b, agg| {
                            assert!(got.insert((b.window, b.key, b.start, b.end)));
                            aggs.push((b, *agg));
                        });
                        for (b, agg) in aggs {
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
                assert!(queue <= 2 * sessions + BY_END_SLACK + 1, "seed {seed}");
            }
        }
    }

    /// One key's session grown by a million events while the watermark
    /// stands still leaves a queue of at most a few dozen entries.
    #[test]
    fn a_growing_session_leaves_no_trail() {
        let defs = [WindowDef::Fixed { size: 10 }, WindowDef::Session { gap: 5 }];
        let mut live = LiveIndex::new(defs.iter());
        let WindowIndex::Session(s) = &mut live.windows[1] else {
            unreachable!()
        };
        for ts in 0..1_000_000 {
            s.add(7, ts, 1, |_, _| {});
        }
        assert_eq!(s.len, 1);
        assert!(s.by_end.len() <= 2 + BY_END_SLACK + 1, "{}", s.by_end.len());
        let mut ready = Vec::new();
        s.sweep_ready(None, 2_000_000, |b, agg| {
            ready.push((b.start, b.end, agg.count))
        });
        assert_eq!(ready, vec![(0, 1_000_004, 1_000_000)]);
    }
}
