//! The live window index: every bucket that is not finalized.
//!
//! Aligned windows (fixed, sliding, stream-time) keep their buckets by start,
//! then by key: the end is `start + size`, so the start order is the end order
//! that readiness (`end <= W`) and finalization (`W > end + lateness`) walk.
//! Session windows keep, per key, their sessions by start (they never
//! intersect or touch, so start order is also end order) plus a by-end set
//! of `(end, key)`: a key's sessions have distinct ends, and the start of
//! the one ending at `end` is the last start before `end`.
//! Every operation costs O(log n) plus what it returns: nothing here scans all
//! live buckets except [`LiveIndex::buckets`], used by checkpoints and reads.
//!
//! docs/semantics.md, "Window assignment", sessions: every pair of live sessions of a window
//! and key that intersect OR touch (`a.end == b.start`) is merged,
//! transitively; the merged start is the minimum start, the merged end the
//! maximum end, and the aggregate combines each unique accepted event once.

use std::collections::{BTreeMap, BTreeSet};

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
}

/// The sessions of a session window: per key by start, plus a by-end set.
/// (The set's entries leave the start out: at 32 bytes instead of 48, the
/// two B-tree updates an event makes move a third less memory; the start
/// is looked up when a session becomes ready or final, once.)
#[derive(Debug, Clone)]
pub struct SessionWindow {
    window: WinNo,
    gap: i64,
    per_key: FxMap<KeyId, BTreeMap<i128, Session>>,
    by_end: BTreeSet<(i128, KeyId)>,
    len: usize,
}

/// The start of the session of `sessions` (one key's) that ends at `end`:
/// sessions neither intersect nor touch and end after they start, so it is
/// the last one starting before `end`.
#[inline]
fn start_of(sessions: &BTreeMap<i128, Session>, end: i128) -> Option<i128> {
    sessions
        .range(..end)
        .next_back()
        .filter(|(_, s)| s.end == end)
        .map(|(&start, _)| start)
}

impl SessionWindow {
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
                sessions.insert(start, Session { end, agg });
                self.by_end.insert((end, key));
                self.len += 1;
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
                if start == s_start {
                    if let Some(kept) = sessions.get_mut(&s_start) {
                        *kept = Session { end, agg };
                    }
                } else {
                    sessions.remove(&s_start);
                    sessions.insert(start, Session { end, agg });
                }
                if end != s.end {
                    self.by_end.remove(&(s.end, key));
                    self.by_end.insert((end, key));
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
            self.by_end.remove(&(s.end, key));
            self.len -= 1;
            agg.merge(&s.agg);
            start = start.min(s_start);
            end = end.max(s.end);
        }
        sessions.insert(start, Session { end, agg });
        self.by_end.insert((end, key));
        self.len += 1;
        BucketRef {
            window,
            key,
            start,
            end,
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
                    WindowDef::Session { gap } => WindowIndex::Session(SessionWindow {
                        window,
                        gap,
                        per_key: FxMap::default(),
                        by_end: BTreeSet::new(),
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
    /// no lower bound), with its aggregate.
    pub fn for_each_ending_in(
        &self,
        lo: Option<i128>,
        hi: i128,
        mut f: impl FnMut(BucketRef, &Agg),
    ) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        for index in &self.windows {
            match index {
                WindowIndex::Aligned(a) => {
                    let size = a.size;
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
                    for (start, keys) in a.buckets.range((lower, Included(upper))) {
                        for (&key, agg) in keys {
                            f(
                                BucketRef {
                                    window: a.window,
                                    key,
                                    start,
                                    end: start + size,
                                },
                                agg,
                            );
                        }
                    }
                }
                WindowIndex::Session(s) => {
                    let lower = match lo {
                        Some(lo) => Excluded((lo, KeyId::MAX)),
                        None => Unbounded,
                    };
                    if lo.is_some_and(|lo| lo >= hi) {
                        continue;
                    }
                    for &(end, key) in s.by_end.range((lower, Included((hi, KeyId::MAX)))) {
                        let found = s.per_key.get(&key).and_then(|ss| {
                            let start = start_of(ss, end)?;
                            Some((start, &ss.get(&start)?.agg))
                        });
                        let Some((start, agg)) = found else {
                            debug_assert!(false, "a by-end entry without its session");
                            continue;
                        };
                        f(
                            BucketRef {
                                window: s.window,
                                key,
                                start,
                                end,
                            },
                            agg,
                        );
                    }
                }
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
                WindowIndex::Session(s) => {
                    while let Some(&(end, key)) = s.by_end.first() {
                        if end >= threshold {
                            break;
                        }
                        s.by_end.pop_first();
                        let Some(sessions) = s.per_key.get_mut(&key) else {
                            debug_assert!(false, "a by-end entry without its sessions");
                            continue;
                        };
                        let Some(start) = start_of(sessions, end) else {
                            debug_assert!(false, "a by-end entry without its session");
                            continue;
                        };
                        sessions.remove(&start);
                        if sessions.is_empty() {
                            s.per_key.remove(&key);
                        }
                        s.len -= 1;
                        out(BucketRef {
                            window: s.window,
                            key,
                            start,
                            end,
                        });
                    }
                }
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
            Some(WindowIndex::Session(s)) => {
                let sessions = s.per_key.entry(b.key).or_default();
                if let Some((_, prev)) = sessions.range(..=b.end).next_back() {
                    if prev.end >= b.start {
                        return Err(format!(
                            "sessions [{}, {}) and another of the same window and key intersect or touch",
                            b.start, b.end
                        ));
                    }
                }
                sessions.insert(b.start, Session { end: b.end, agg });
                s.by_end.insert((b.end, b.key));
                s.len += 1;
            }
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
                let sessions = s.per_key.entry(b.key).or_default();
                if sessions
                    .insert(b.start, Session { end: b.end, agg })
                    .is_none()
                {
                    s.len += 1;
                }
                s.by_end.insert((b.end, b.key));
            }
        }
    }
}
