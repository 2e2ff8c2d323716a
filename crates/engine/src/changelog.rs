//! The changelog: visible rows, reconciliation and the global sequence.
//!
//! docs/semantics.md, "The changelog": after every successful ingest, advance and
//! mark_idle, the ready view (live buckets with `end <= W`) is reconciled
//! against the visible rows: every visible address whose row is missing from
//! the ready view or differs is retracted with its exact previous row; every
//! ready row that is not visible or differs is upserted. All retractions come
//! first, in address order, then all upserts, in address order; `seq` grows by
//! one per change for the life of the processor.
//!
//! Incrementality: after every reconciliation the visible rows are exactly
//! the ready live buckets, so they are not stored twice. A call records the
//! buckets it touches (with their visible row *before* the change) in a
//! [`Touches`] set, plus the buckets that became ready; only those are
//! reconciled. The one exception is a restored checkpoint whose ready buckets
//! are not all visible: those wait in `pending` and join the next
//! reconciliation.

use std::cmp::Ordering;
use std::sync::Arc;

use super::aggregate::Agg;
use super::event::{Change, ChangeOp, WindowResult};
use super::live::{BucketRef, LiveIndex};
use super::shards::ShardedLive;
use streamforge_keys::FxBuild;
use streamforge_keys::KeyTable;

/// The buckets a call touched, each with its visible row before the call.
#[derive(Debug, Default)]
pub struct Touches {
    list: Vec<(BucketRef, Option<Agg>)>,
}

impl Touches {
    /// Notes a bucket with its visible aggregate before the call; the first
    /// note of an address wins (it saw the state before the call).
    #[inline]
    pub fn note(&mut self, b: BucketRef, old: Option<Agg>) {
        if !self.list.iter().any(|(x, _)| *x == b) {
            self.list.push((b, old));
        }
    }

    /// Adds a bucket known not to be noted yet.
    #[inline]
    pub fn push(&mut self, b: BucketRef, old: Option<Agg>) {
        self.list.push((b, old));
    }

    /// Whether nothing was touched.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Orders interned addresses in address order: window name (window numbers follow
/// name order), key bytes, start, end.
pub fn address_cmp(keys: &KeyTable, a: &BucketRef, b: &BucketRef) -> Ordering {
    a.window
        .cmp(&b.window)
        .then_with(|| {
            if a.key == b.key {
                Ordering::Equal
            } else {
                keys.name(a.key).as_bytes().cmp(keys.name(b.key).as_bytes())
            }
        })
        .then(a.start.cmp(&b.start))
        .then(a.end.cmp(&b.end))
}

/// Sorts items by their address in address order, through key ranks when
/// those are valid (no string comparisons), else by comparing key bytes.
pub fn sort_by_address<T>(keys: &mut KeyTable, items: &mut [T], addr: impl Fn(&T) -> &BucketRef) {
    if items.len() < 2 {
        return;
    }
    let ranked = keys.prepare_ranks(items.len());
    sort_prepared(keys, ranked, items, addr);
}

/// [`sort_by_address`] with the ranks already prepared (`ranked`: whether
/// they are valid), so that several threads can sort with one key table.
pub fn sort_prepared<T>(
    keys: &KeyTable,
    ranked: bool,
    items: &mut [T],
    addr: impl Fn(&T) -> &BucketRef,
) {
    if ranked {
        items.sort_unstable_by_key(|x| {
            let b = addr(x);
            (b.window, keys.rank(b.key), b.start, b.end)
        });
    } else {
        items.sort_unstable_by(|x, y| address_cmp(keys, addr(x), addr(y)));
    }
}

/// Address order through ranks when `ranked`, else through key bytes.
#[inline]
pub fn cmp_prepared(keys: &KeyTable, ranked: bool, a: &BucketRef, b: &BucketRef) -> Ordering {
    if ranked {
        (a.window, keys.rank(a.key), a.start, a.end).cmp(&(
            b.window,
            keys.rank(b.key),
            b.start,
            b.end,
        ))
    } else {
        address_cmp(keys, a, b)
    }
}

/// Builds a result row.
pub fn row(names: &[Arc<str>], keys: &KeyTable, b: &BucketRef, agg: &Agg) -> WindowResult {
    WindowResult {
        window: names[b.window].clone(),
        key: keys.name(b.key).clone(),
        start: b.start,
        end: b.end,
        count: agg.count,
        sum: agg.sum(),
        min: agg.min,
        max: agg.max,
    }
}

/// The retractions and upserts of touched buckets against the ready view
/// (`get` yields a bucket's current aggregate), unsorted.
#[allow(clippy::type_complexity)]
pub fn diff(
    touches: Touches,
    watermark: Option<i64>,
    get: impl Fn(&BucketRef) -> Option<Agg>,
) -> (Vec<(BucketRef, Agg)>, Vec<(BucketRef, Agg)>) {
    let w = watermark.map(|w| w as i128);
    let mut retracts = Vec::new();
    let mut upserts = Vec::new();
    for (b, old) in touches.list {
        let new = match w {
            Some(w) if b.end <= w => get(&b),
            _ => None,
        };
        if old == new {
            continue;
        }
        if let Some(old) = old {
            retracts.push((b, old));
        }
        if let Some(new) = new {
            upserts.push((b, new));
        }
    }
    (retracts, upserts)
}

/// The largest `changelog.sequence` a checkpoint may hold.
pub const MAX_RESTORED_SEQUENCE: u64 = i64::MAX as u64 - (1 << 32);

/// The output sequence and the restored-but-not-yet-visible ready buckets.
#[derive(Debug, Clone, Default)]
pub struct Changelog {
    sequence: u64,
    pending: std::collections::HashSet<BucketRef, FxBuild>,
}

impl Changelog {
    /// The last `seq` emitted (0 before any).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether a ready bucket is visible (it is unless restored as pending).
    #[inline]
    pub fn is_visible(&self, b: &BucketRef) -> bool {
        self.pending.is_empty() || !self.pending.contains(b)
    }

    /// Reconciles the touched buckets against the current ready view and
    /// returns the changes in changelog order (retractions, then upserts).
    pub fn reconcile(
        &mut self,
        mut touches: Touches,
        live: &ShardedLive,
        watermark: Option<i64>,
        keys: &mut KeyTable,
        names: &[Arc<str>],
        out: &mut Vec<Change>,
    ) {
        if !self.pending.is_empty() {
            // Restored ready rows that were never visible join this call.
            let seen: std::collections::HashSet<BucketRef, FxBuild> =
                touches.list.iter().map(|(b, _)| *b).collect();
            let mut pending: Vec<BucketRef> =
                std::mem::take(&mut self.pending).into_iter().collect();
            pending.retain(|b| !seen.contains(b));
            touches.list.extend(pending.into_iter().map(|b| (b, None)));
        }
        if touches.is_empty() {
            return;
        }
        let (mut retracts, mut upserts) = diff(touches, watermark, |b| live.get(b).copied());
        sort_by_address(keys, &mut retracts, |x| &x.0);
        sort_by_address(keys, &mut upserts, |x| &x.0);
        out.reserve(retracts.len() + upserts.len());
        for (op, list) in [(ChangeOp::Retract, retracts), (ChangeOp::Upsert, upserts)] {
            for (b, agg) in list {
                out.push(Change {
                    seq: self.next_seq(),
                    op,
                    result: row(names, keys, &b, &agg),
                });
            }
        }
    }

    /// The next `seq` (changes made elsewhere take theirs here, in order).
    #[inline]
    pub fn next_seq(&mut self) -> u64 {
        self.sequence = self.sequence.saturating_add(1);
        self.sequence
    }

    /// Whether no restored ready row is waiting to become visible (then the
    /// reconciliation of one call's touches needs nothing but those).
    #[inline]
    pub fn nothing_pending(&self) -> bool {
        self.pending.is_empty()
    }

    /// Restore: the changelog from its checkpoint part. `visible` must be in
    /// strictly increasing address order (checked by the caller), each an
    /// exact live bucket with `end <= W`; every other ready live bucket
    /// becomes pending. `sequence >= visible.len()`.
    pub fn restore(
        sequence: u64,
        visible: &[(BucketRef, Agg)],
        live: &LiveIndex,
        watermark: Option<i64>,
    ) -> Result<Changelog, String> {
        // Every seq must stay a JSON integer in the i64 range (the service
        // stores and pages by it); leave room for 2^32 more changes.
        if sequence > MAX_RESTORED_SEQUENCE {
            return Err(format!(
                "changelog.sequence {sequence} is beyond {MAX_RESTORED_SEQUENCE}, too close to the end of the i64 range every seq must stay in"
            ));
        }
        if (visible.len() as u64) > sequence {
            return Err(format!(
                "changelog.sequence {sequence} is below the number of visible rows {}",
                visible.len()
            ));
        }
        let mut visible_set =
            std::collections::HashSet::with_capacity_and_hasher(visible.len(), FxBuild::default());
        for (b, agg) in visible {
            let Some(w) = watermark else {
                return Err("changelog.visible has rows but there is no global watermark".into());
            };
            if b.end > w as i128 {
                return Err(format!(
                    "visible row [{}, {}) is not ready: end > watermark {w}",
                    b.start, b.end
                ));
            }
            match live.get(b) {
                Some(live_agg) if live_agg == agg => {}
                Some(_) => {
                    return Err(format!(
                        "visible row [{}, {}) differs from its live bucket",
                        b.start, b.end
                    ))
                }
                None => {
                    return Err(format!(
                        "visible row [{}, {}) is not a live bucket",
                        b.start, b.end
                    ))
                }
            }
            visible_set.insert(*b);
        }
        let mut pending = std::collections::HashSet::default();
        if let Some(w) = watermark {
            live.for_each_ending_in(None, w as i128, |b, _| {
                if !visible_set.contains(&b) {
                    pending.insert(b);
                }
            });
        }
        Ok(Changelog { sequence, pending })
    }
}
