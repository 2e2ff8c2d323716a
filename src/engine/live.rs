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
//! SPEC "Window assignment", sessions: every pair of live sessions of a window
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

#[derive(Debug, Clone)]
enum WindowIndex {
    Aligned {
        size: i128,
        by_start: BTreeMap<i128, FxMap<KeyId, Agg>>,
    },
    Session {
        per_key: FxMap<KeyId, BTreeMap<i128, Session>>,
        by_end: BTreeSet<(i128, KeyId, i128)>,
    },
}

/// All live buckets of all windows.
#[derive(Debug, Clone)]
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
                    by_start: BTreeMap::new(),
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
            WindowIndex::Aligned { size, by_start } => {
                if b.end - b.start != *size {
                    return None;
                }
                by_start.get(&b.start)?.get(&b.key)
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
        let WindowIndex::Aligned { size, by_start } = &mut self.windows[window as usize] else {
            unreachable!("aligned add on a session window")
        };
        let keys = by_start.entry(start).or_default();
        match keys.get_mut(&key) {
            Some(agg) => agg.add(value),
            None => {
                keys.insert(key, Agg::of(value));
                self.len += 1;
            }
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
                WindowIndex::Aligned { size, by_start } => {
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
                    for (&start, keys) in by_start.range((lower, Included(upper))) {
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
                WindowIndex::Aligned { size, by_start } => {
                    while let Some(entry) = by_start.first_entry() {
                        let start = *entry.key();
                        if start + *size >= threshold {
                            break;
                        }
                        let keys = entry.remove();
                        self.len -= keys.len();
                        out.extend(keys.into_keys().map(|key| BucketRef {
                            window,
                            key,
                            start,
                            end: start + *size,
                        }));
                    }
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
                WindowIndex::Aligned { size, by_start } => {
                    for (&start, keys) in by_start {
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
            WindowIndex::Aligned { by_start, .. } => {
                if by_start
                    .entry(b.start)
                    .or_default()
                    .insert(b.key, agg)
                    .is_some()
                {
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
