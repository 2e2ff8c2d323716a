//! Session windows: each key's sessions by start, and a queue of them by
//! end for the ticks.
//!
//! docs/semantics.md, "Window assignment", sessions: every pair of live
//! sessions of a window and key that intersect OR touch (`a.end ==
//! b.start`) is merged, transitively; the merged start is the minimum
//! start, the merged end the maximum end, and the aggregate combines each
//! unique accepted event once.
//!
//! A key's sessions never intersect or touch, so start order is also end
//! order, their ends are distinct, and the one ending at `end` is the last
//! one starting before `end`.

use std::cmp::Reverse;
use std::collections::{btree_map, BTreeMap, BinaryHeap};

use super::aggregate::Agg;
use super::bucket::{BucketRef, WinNo};
use streamforge_keys::{FxMap, KeyId};

#[derive(Debug, Clone, Copy)]
struct Session {
    end: i128,
    agg: Agg,
    /// The stamp of the session's current by-end entry (see [`ByEnd`]).
    stamp: u64,
}

/// The most sessions a key keeps in a sorted vector; beyond, a B-tree.
const FEW: usize = 8;

/// One key's live sessions by start.
///
/// Almost every key has one or two live sessions (a session is final once
/// the watermark passes its end plus the lateness), so they sit in a short
/// sorted vector: one small allocation, searched in a cache line or two,
/// where a B-tree allocates a node of eleven and walks it. A key that
/// gathers more than [`FEW`] (a watermark standing still while its events
/// spread out) moves to a B-tree, and back when it is down to a quarter
/// of that, so no key pays a vector's linear inserts on a long list.
#[derive(Debug, Clone)]
enum KeySessions {
    Few(Vec<(i128, Session)>),
    Many(BTreeMap<i128, Session>),
}

impl Default for KeySessions {
    fn default() -> Self {
        KeySessions::Few(Vec::new())
    }
}

/// A key's sessions from the last one starting at or before a bound,
/// downwards.
enum Down<'a> {
    Few(std::iter::Rev<std::slice::Iter<'a, (i128, Session)>>),
    Many(std::iter::Rev<btree_map::Range<'a, i128, Session>>),
}

impl<'a> Iterator for Down<'a> {
    type Item = (i128, &'a Session);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Down::Few(it) => it.next().map(|(start, s)| (*start, s)),
            Down::Many(it) => it.next().map(|(&start, s)| (start, s)),
        }
    }
}

impl KeySessions {
    /// The sessions starting at or before `bound`, from the last one down.
    #[inline]
    fn down_from(&self, bound: i128) -> Down<'_> {
        match self {
            KeySessions::Few(v) => {
                let n = v.partition_point(|(start, _)| *start <= bound);
                Down::Few(v[..n].iter().rev())
            }
            KeySessions::Many(m) => Down::Many(m.range(..=bound).rev()),
        }
    }

    /// The last session starting before `bound`.
    #[inline]
    fn last_before(&self, bound: i128) -> Option<(i128, &Session)> {
        match self {
            KeySessions::Few(v) => {
                let n = v.partition_point(|(start, _)| *start < bound);
                v[..n].last().map(|(start, s)| (*start, s))
            }
            KeySessions::Many(m) => m.range(..bound).next_back().map(|(&k, s)| (k, s)),
        }
    }

    /// The session starting at `start`.
    #[inline]
    fn get(&self, start: i128) -> Option<&Session> {
        match self {
            KeySessions::Few(v) => v
                .binary_search_by_key(&start, |(k, _)| *k)
                .ok()
                .map(|i| &v[i].1),
            KeySessions::Many(m) => m.get(&start),
        }
    }

    #[inline]
    fn get_mut(&mut self, start: i128) -> Option<&mut Session> {
        match self {
            KeySessions::Few(v) => match v.binary_search_by_key(&start, |(k, _)| *k) {
                Ok(i) => Some(&mut v[i].1),
                Err(_) => None,
            },
            KeySessions::Many(m) => m.get_mut(&start),
        }
    }

    /// Puts a session at `start`; returns the one it replaced.
    #[inline]
    fn insert(&mut self, start: i128, session: Session) -> Option<Session> {
        match self {
            KeySessions::Few(v) => match v.binary_search_by_key(&start, |(k, _)| *k) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, session)),
                Err(i) if v.len() < FEW => {
                    v.insert(i, (start, session));
                    None
                }
                Err(_) => {
                    let mut m: BTreeMap<i128, Session> = v.drain(..).collect();
                    m.insert(start, session);
                    *self = KeySessions::Many(m);
                    None
                }
            },
            KeySessions::Many(m) => m.insert(start, session),
        }
    }

    /// Removes the session at `start`.
    #[inline]
    fn remove(&mut self, start: i128) -> Option<Session> {
        match self {
            KeySessions::Few(v) => match v.binary_search_by_key(&start, |(k, _)| *k) {
                Ok(i) => Some(v.remove(i).1),
                Err(_) => None,
            },
            KeySessions::Many(m) => {
                let removed = m.remove(&start);
                if m.len() <= FEW / 4 {
                    *self = KeySessions::Few(std::mem::take(m).into_iter().collect());
                }
                removed
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            KeySessions::Few(v) => v.is_empty(),
            KeySessions::Many(m) => m.is_empty(),
        }
    }

    /// Every session in start order.
    fn iter(&self) -> Box<dyn Iterator<Item = (i128, &Session)> + '_> {
        match self {
            KeySessions::Few(v) => Box::new(v.iter().map(|(k, s)| (*k, s))),
            KeySessions::Many(m) => Box::new(m.iter().map(|(&k, s)| (k, s))),
        }
    }

    fn sessions_mut(&mut self) -> Box<dyn Iterator<Item = &mut Session> + '_> {
        match self {
            KeySessions::Few(v) => Box::new(v.iter_mut().map(|(_, s)| s)),
            KeySessions::Many(m) => Box::new(m.values_mut()),
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
    fn rebuild(&mut self, per_key: &mut FxMap<KeyId, KeySessions>) {
        self.pending.clear();
        self.ready.clear();
        for (&key, sessions) in per_key.iter_mut() {
            for s in sessions.sessions_mut() {
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
    per_key: FxMap<KeyId, KeySessions>,
    by_end: ByEnd,
    len: usize,
}

/// The live session an entry stands for, with its start: none if the
/// entry is stale.
#[inline]
fn live_of(per_key: &FxMap<KeyId, KeySessions>, e: &EndEntry) -> Option<(i128, Session)> {
    let (start, s) = per_key.get(&e.key)?.last_before(e.end)?;
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
        let at = |start: i128, end: i128| BucketRef {
            window,
            key,
            start,
            end,
        };
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
        let mut near = sessions.down_from(end);
        let first = near
            .next()
            .filter(|(_, s)| s.end >= start)
            .map(|(k, &s)| (k, s));
        let second = near.next().is_some_and(|(_, s)| s.end >= start);
        match (first, second) {
            (None, _) => {
                let stamp = self.by_end.stamp();
                sessions.insert(start, Session { end, agg, stamp });
                self.len += 1;
                self.file(end, key, stamp);
                return at(start, end);
            }
            (Some((s_start, s)), false) => {
                removed(at(s_start, s.end), &s.agg);
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
                    if let Some(kept) = sessions.get_mut(s_start) {
                        *kept = Session { end, agg, stamp };
                    }
                } else {
                    sessions.remove(s_start);
                    sessions.insert(start, Session { end, agg, stamp });
                }
                if end != s.end {
                    self.file(end, key, stamp);
                }
                return at(start, end);
            }
            (Some(_), true) => {}
        }
        let mut merged: Vec<(i128, Session)> = Vec::new();
        for (s_start, s) in sessions.down_from(end) {
            if s.end < start {
                break;
            }
            merged.push((s_start, *s));
        }
        for (s_start, s) in merged {
            sessions.remove(s_start);
            removed(at(s_start, s.end), &s.agg);
            self.len -= 1;
            agg.merge(&s.agg);
            start = start.min(s_start);
            end = end.max(s.end);
        }
        let stamp = self.by_end.stamp();
        sessions.insert(start, Session { end, agg, stamp });
        self.len += 1;
        self.file(end, key, stamp);
        at(start, end)
    }

    /// A tick's work on the sessions, in one pass over the queue:
    /// `ready(b, agg)` for every live session with `lo < end <= hi` when
    /// `newly` is `Some((lo, hi))`, then `fin(b)` for every one with
    /// `end < threshold` when there is a threshold, which is removed. When
    /// `lo` is at least the last sweep's `hi`, only what the watermark
    /// reached since is popped; otherwise the ready entries are read too.
    /// A session that becomes ready and final in the same tick is popped
    /// once.
    pub(crate) fn tick(
        &mut self,
        newly: Option<(Option<i128>, i128)>,
        threshold: Option<i128>,
        mut ready: impl FnMut(BucketRef, &Agg),
        mut fin: impl FnMut(BucketRef),
    ) {
        let window = self.window;
        let bucket = |start: i128, e: &EndEntry| BucketRef {
            window,
            key: e.key,
            start,
            end: e.end,
        };
        let passes = |end: i128| threshold.is_some_and(|t| end < t);
        let after_lo = |end: i128| match newly {
            Some((lo, _)) => lo.is_none_or(|lo| end > lo),
            None => false,
        };
        let reached = |end: i128| newly.is_some_and(|(_, hi)| end <= hi);
        if let Some((lo, hi)) = newly {
            let behind = match (lo, self.by_end.swept) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(lo), Some(swept)) => lo < swept,
            };
            if behind {
                for Reverse(e) in self.by_end.ready.iter() {
                    if after_lo(e.end) && e.end <= hi {
                        if let Some((start, s)) = live_of(&self.per_key, e) {
                            ready(bucket(start, e), &s.agg);
                        }
                    }
                }
            }
        }
        while let Some(&Reverse(e)) = self.by_end.ready.peek() {
            if !passes(e.end) {
                break;
            }
            self.by_end.ready.pop();
            if let Some((start, _)) = live_of(&self.per_key, &e) {
                self.remove(e.key, start);
                fin(bucket(start, &e));
            }
        }
        // Reached or passed: a prefix of the pending entries by end.
        while let Some(&Reverse(e)) = self.by_end.pending.peek() {
            if !reached(e.end) && !passes(e.end) {
                break;
            }
            self.by_end.pending.pop();
            let Some((start, s)) = live_of(&self.per_key, &e) else {
                continue;
            };
            if reached(e.end) && after_lo(e.end) {
                ready(bucket(start, &e), &s.agg);
            }
            if passes(e.end) {
                self.remove(e.key, start);
                fin(bucket(start, &e));
            } else {
                self.by_end.ready.push(Reverse(e));
            }
        }
        if let Some((_, hi)) = newly {
            if self.by_end.swept.is_none_or(|s| s < hi) {
                self.by_end.swept = Some(hi);
            }
        }
        // A burst of sessions, once final, leaves no large heap behind.
        for heap in [&mut self.by_end.pending, &mut self.by_end.ready] {
            if heap.capacity() > 4 * heap.len() + 1024 {
                heap.shrink_to(2 * heap.len() + 64);
            }
        }
    }

    /// Whether [`SessionWindow::tick`] with these arguments would pop a
    /// queue entry or read the swept ones (false: it finds no session;
    /// true: it may, or may find only stale entries).
    pub(crate) fn tick_has_work(
        &self,
        newly: Option<(Option<i128>, i128)>,
        threshold: Option<i128>,
    ) -> bool {
        let passes = |e: &Reverse<EndEntry>| threshold.is_some_and(|t| e.0.end < t);
        if let Some((lo, hi)) = newly {
            let behind = match (lo, self.by_end.swept) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(lo), Some(swept)) => lo < swept,
            };
            if behind && !self.by_end.ready.is_empty() {
                return true;
            }
            if self.by_end.pending.peek().is_some_and(|e| e.0.end <= hi) {
                return true;
            }
        }
        self.by_end.ready.peek().is_some_and(passes)
            || self.by_end.pending.peek().is_some_and(passes)
    }

    /// Removes `key`'s session at `start` (its entry goes stale).
    fn remove(&mut self, key: KeyId, start: i128) {
        if let Some(sessions) = self.per_key.get_mut(&key) {
            if sessions.remove(start).is_some() {
                self.len -= 1;
            }
            if sessions.is_empty() {
                self.per_key.remove(&key);
            }
        }
    }

    /// Calls `f` for every live session with `lo < end <= hi`, in no
    /// particular order: a read, which looks at every entry.
    pub(crate) fn for_each_ending_in(
        &self,
        lo: Option<i128>,
        hi: i128,
        mut f: impl FnMut(BucketRef, &Agg),
    ) {
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

    /// Puts a session in place: `check` says whether to refuse one that
    /// intersects or touches a live session of its key.
    pub(crate) fn insert(&mut self, b: BucketRef, agg: Agg, check: bool) -> Result<(), String> {
        let sessions = self.per_key.entry(b.key).or_default();
        if check {
            if let Some((_, prev)) = sessions.down_from(b.end).next() {
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

impl SessionWindow {
    /// An empty session window.
    pub fn new(window: WinNo, gap: i64) -> SessionWindow {
        SessionWindow {
            window,
            gap,
            per_key: FxMap::default(),
            by_end: ByEnd::default(),
            len: 0,
        }
    }

    /// Number of live sessions.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The aggregate of `key`'s session `[start, end)`, if live.
    #[inline]
    pub fn get(&self, key: KeyId, start: i128, end: i128) -> Option<&Agg> {
        let session = self.per_key.get(&key)?.get(start)?;
        (session.end == end).then_some(&session.agg)
    }

    /// Every live session with its aggregate, in no particular order.
    pub fn buckets<'s>(&'s self, mut f: impl FnMut(BucketRef, &'s Agg)) {
        for (&key, sessions) in &self.per_key {
            for (start, session) in sessions.iter() {
                f(
                    BucketRef {
                        window: self.window,
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

#[cfg(test)]
impl SessionWindow {
    pub(crate) fn queue_len(&self) -> usize {
        self.by_end.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One key's session grown by a million events while the watermark
    /// stands still leaves a queue of at most a few dozen entries.
    #[test]
    fn a_growing_session_leaves_no_trail() {
        let mut s = SessionWindow::new(0, 5);
        for ts in 0..1_000_000 {
            s.add(7, ts, 1, |_, _| {});
        }
        assert_eq!(s.len, 1);
        assert!(s.by_end.len() <= 2 + BY_END_SLACK + 1, "{}", s.by_end.len());
        let mut ready = Vec::new();
        s.tick(
            Some((None, 2_000_000)),
            None,
            |b, agg| ready.push((b.start, b.end, agg.count)),
            |_| {},
        );
        assert_eq!(ready, vec![(0, 1_000_004, 1_000_000)]);
    }

    /// A burst of live sessions, once final, leaves no large heap behind.
    #[test]
    fn the_queue_shrinks_after_a_burst() {
        let mut s = SessionWindow::new(0, 5);
        for key in 0..100_000 {
            s.add(key, 0, 1, |_, _| {});
        }
        assert!(s.by_end.pending.capacity() >= 100_000);
        let mut fin = 0;
        s.tick(Some((None, 10)), Some(10), |_, _| {}, |_| fin += 1);
        assert_eq!((fin, s.len()), (100_000, 0));
        assert!(s.by_end.pending.capacity() <= 1024 && s.by_end.ready.capacity() <= 1024);
    }

    /// A key's sessions answer like a B-tree through every move between
    /// the vector and the tree.
    #[test]
    fn key_sessions_answer_like_a_btree() {
        let mut rng = crate::test_rng::Rng(0x1234_5678);
        let mut next = |n: u64| rng.below(n);
        let session = |end: i128| Session {
            end,
            agg: Agg::of(1),
            stamp: end as u64,
        };
        let mut ks = KeySessions::default();
        let mut model: BTreeMap<i128, Session> = BTreeMap::new();
        let (mut few, mut many) = (0, 0);
        for step in 0..200_000 {
            // Phases of growth and shrinkage move the key across FEW.
            let grow = (step / 500) % 2 == 0;
            let start = next(64) as i128;
            if next(3) > 0 && grow || next(5) == 0 {
                assert_eq!(
                    ks.insert(start, session(start + 1)).map(|s| s.end),
                    model.insert(start, session(start + 1)).map(|s| s.end)
                );
            } else {
                // Mostly a start that is there.
                let start = match model.range(start..).next() {
                    Some((&k, _)) if next(4) > 0 => k,
                    _ => start,
                };
                assert_eq!(
                    ks.remove(start).map(|s| s.end),
                    model.remove(&start).map(|s| s.end)
                );
            }
            let bound = next(70) as i128 - 3;
            let down: Vec<i128> = ks.down_from(bound).map(|(k, _)| k).collect();
            let want: Vec<i128> = model.range(..=bound).rev().map(|(&k, _)| k).collect();
            assert_eq!(down, want);
            assert_eq!(
                ks.last_before(bound).map(|(k, _)| k),
                model.range(..bound).next_back().map(|(&k, _)| k)
            );
            assert_eq!(
                ks.get(bound).map(|s| s.end),
                model.get(&bound).map(|s| s.end)
            );
            assert_eq!(ks.is_empty(), model.is_empty());
            let all: Vec<i128> = ks.iter().map(|(k, _)| k).collect();
            assert_eq!(all, model.keys().copied().collect::<Vec<_>>());
            match ks {
                KeySessions::Few(ref v) => {
                    assert!(v.len() <= FEW);
                    few += 1;
                }
                KeySessions::Many(ref m) => {
                    assert!(m.len() > FEW / 4);
                    many += 1;
                }
            }
        }
        assert!(few > 1000 && many > 1000, "{few} {many}");
    }
}
