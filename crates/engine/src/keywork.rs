//! The per-key work of a call, on the one shard that holds the key.
//!
//! A unique event touches buckets of its own key only, so everything it does
//! to the windows, and the reconciliation of those touches, needs nothing but
//! its shard: [`touch`] updates the buckets and notes what was visible
//! before, [`one_key_changes`] turns the touches into the event's changes in
//! changelog order (retractions, then upserts, each in address order: with
//! one key that is window, start, end). The changes leave here as plain
//! values; the caller numbers and renders them in event order (rendering
//! here would make the shard threads share reference counts of names).
//! [`tick_share`] is a watermark tick's share of one shard.

use super::aggregate::Agg;
use super::changelog::{diff, sort_prepared, Changelog, Touches};
use super::event::ChangeOp;
use super::live::{AlignedDef, BucketRef, LiveIndex, WindowIndex};
use super::window::{aligned_start, sliding_starts};
use streamforge_keys::{KeyId, KeyTable};

/// A unique event as the windows see it.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Interned key.
    pub key: KeyId,
    /// Timestamp.
    pub timestamp: i64,
    /// Value.
    pub value: i64,
    /// Whether the event is late (it then reaches stream-time windows only).
    pub late: bool,
    /// Stream time once the event is counted.
    pub stream_time: i64,
}

/// Adds a unique event to every window it belongs to, on the shard holding
/// its key; returns the buckets it touched with their visible rows before.
/// `w` is the global watermark. Each window of the index assigns the event
/// by its own definition.
pub fn touch(live: &mut LiveIndex, changelog: &Changelog, w: Option<i64>, job: &Job) -> Touches {
    let Job {
        key,
        timestamp: ts,
        value,
        late,
        stream_time,
    } = *job;
    let ready = |end: i128| w.is_some_and(|w| end <= w as i128);
    let mut touches = Touches::default();
    for index in live.windows_mut() {
        match index {
            WindowIndex::Aligned(window) => {
                let def = window.def();
                let mut add = |start: i128| {
                    let b = window.bucket(key, start);
                    if ready(b.end) {
                        // The visible row before the call: ready buckets
                        // are visible unless a restore left them pending.
                        let old = if changelog.is_visible(&b) {
                            window.get(key, start).copied()
                        } else {
                            None
                        };
                        touches.push(b, old);
                    }
                    window.add(key, start, value);
                };
                match def {
                    AlignedDef::Fixed { size } if !late => add(aligned_start(ts, size)),
                    AlignedDef::Sliding { size, step } if !late => {
                        for start in sliding_starts(ts, size, step) {
                            add(start);
                        }
                    }
                    AlignedDef::StreamTime { size } => add(aligned_start(stream_time, size)),
                    _ => {}
                }
            }
            WindowIndex::Session(window) if !late => {
                let merged = window.add(key, ts, value, |b, agg| {
                    if ready(b.end) {
                        touches.note(b, changelog.is_visible(&b).then_some(*agg));
                    }
                });
                if ready(merged.end) {
                    touches.note(merged, None);
                }
            }
            WindowIndex::Session(_) => {}
        }
    }
    touches
}

/// A change before it is numbered and rendered: what, where, which row.
pub type RawChange = (ChangeOp, BucketRef, Agg);

/// The changes of one event's touches (all of one key), in changelog order,
/// appended to `out` unnumbered and unrendered. Only valid when no restored
/// row is pending (see [`Changelog::nothing_pending`]).
pub fn one_key_changes(
    touches: Touches,
    live: &LiveIndex,
    w: Option<i64>,
    out: &mut Vec<RawChange>,
) {
    if touches.is_empty() {
        return;
    }
    let (mut retracts, mut upserts) = diff(touches, w, |b| live.get(b).copied());
    // One key: address order is window, start, end.
    let order = |x: &(BucketRef, Agg)| (x.0.window, x.0.start, x.0.end);
    retracts.sort_unstable_by_key(order);
    upserts.sort_unstable_by_key(order);
    out.extend(
        retracts
            .into_iter()
            .map(|(b, agg)| (ChangeOp::Retract, b, agg)),
    );
    out.extend(
        upserts
            .into_iter()
            .map(|(b, agg)| (ChangeOp::Upsert, b, agg)),
    );
}

/// Runs a shard's jobs in order: their changes and how many each job
/// produced.
pub fn run_jobs(
    live: &mut LiveIndex,
    changelog: &Changelog,
    w: Option<i64>,
    jobs: &[Job],
) -> (Vec<RawChange>, Vec<u32>) {
    let mut changes = Vec::with_capacity(jobs.len() * 2);
    let mut counts = Vec::with_capacity(jobs.len());
    for job in jobs {
        let before = changes.len();
        let touches = touch(live, changelog, w, job);
        one_key_changes(touches, live, w, &mut changes);
        counts.push((changes.len() - before) as u32);
    }
    (changes, counts)
}

/// A shard's share of a watermark tick: the buckets that became ready
/// (`before < end <= w`, `None` if the watermark did not move) with their
/// rows, sorted in address order (`ranked`: see
/// [`KeyTable::prepare_ranks`]); then the buckets finalized below
/// `threshold`, how many, and (`list`) sorted the same way.
#[allow(clippy::type_complexity)]
pub fn tick_share(
    live: &mut LiveIndex,
    newly: Option<(Option<i128>, i128)>,
    threshold: i128,
    keys: &KeyTable,
    ranked: bool,
    list: bool,
) -> (Vec<(BucketRef, Agg)>, Vec<(BucketRef, ())>, usize) {
    let mut ready = Vec::new();
    let mut finalized: Vec<(BucketRef, ())> = Vec::new();
    let mut count = 0;
    live.tick(
        newly,
        Some(threshold),
        |b, agg| ready.push((b, *agg)),
        |b| {
            count += 1;
            if list {
                finalized.push((b, ()));
            }
        },
    );
    sort_prepared(keys, ranked, &mut ready, |x| &x.0);
    sort_prepared(keys, ranked, &mut finalized, |x| &x.0);
    (ready, finalized, count)
}
