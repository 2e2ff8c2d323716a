//! The `Processor` façade: one pipeline's complete state and its verbs.
//!
//! Each verb validates everything that can fail first and only then mutates,
//! so a rejection changes nothing (a batch resolves offsets and identities
//! tentatively and rolls back on the first failure). The mutation that follows
//! cannot fail: window arithmetic is exact in i128.

use std::sync::Arc;

use super::changelog::{address_cmp, cmp_prepared, row, sort_by_address, Changelog, Touches};
use super::history::{id_hash, HistoryStore, MemHistory, NewSegment, SegId, SegKind, SegRef};
use super::keywork::{self, Job};
use super::late::LateOutput;
use super::live::BucketRef;
use super::shards::{Executor, ShardedLive};
use super::sources::{Flushed, Resolved, Sources};
use super::str_index::StrIndex;
use super::watermark::WatermarkState;
use super::*;
use streamforge_keys::KeyTable;

/// The complete state of one pipeline. See the module docs of [`crate`].
#[derive(Debug, Clone)]
pub struct Processor {
    pub(super) pipeline: Pipeline,
    pub(super) names: Vec<Arc<str>>,
    pub(super) defs: Vec<WindowDef>,
    pub(super) keys: KeyTable,
    pub(super) sources: Sources,
    pub(super) clock: WatermarkState,
    pub(super) live: ShardedLive,
    pub(super) changelog: Changelog,
    pub(super) late: LateOutput,
}

impl Processor {
    /// A fresh processor: every partition at consumed offset -1, no watermark.
    /// Its history stays in memory ([`MemHistory`]).
    pub fn new(pipeline: Pipeline) -> Processor {
        Processor::with_store(pipeline, MemHistory::new())
    }

    /// A fresh processor whose flushed history goes to `store`.
    pub fn with_store(pipeline: Pipeline, store: Arc<dyn HistoryStore>) -> Processor {
        let names = pipeline
            .windows()
            .keys()
            .map(|n| Arc::from(n.as_str()))
            .collect();
        let defs: Vec<WindowDef> = pipeline.windows().values().copied().collect();
        let parts = pipeline.partitions().len();
        Processor {
            live: ShardedLive::new(&defs),
            names,
            defs,
            keys: KeyTable::default(),
            sources: Sources::new(parts, store),
            clock: WatermarkState::new(parts),
            changelog: Changelog::default(),
            late: LateOutput::default(),
            pipeline,
        }
    }

    /// Splits the per-key work over `k` key-hash shards (`1..=64`; a new
    /// processor has one), run side by side by `executor` (one after another
    /// without). Nothing observable depends on `k`: every answer, change and
    /// checkpoint is the same.
    pub fn set_shards(
        &mut self,
        k: usize,
        executor: Option<Arc<dyn Executor>>,
    ) -> Result<(), String> {
        self.live.reshard(k, executor, &self.defs, &self.keys)
    }

    /// Batches with fewer than `n` unique events run on the caller's thread
    /// even with several shards (default 64, where handing work over starts
    /// to pay); 1 sends every batch to the shard threads. Changes nothing
    /// observable either way.
    pub fn set_shard_min_events(&mut self, n: usize) {
        self.live.min_events = n.max(1);
    }

    /// The number of key-hash shards.
    pub fn shards(&self) -> usize {
        self.live.shard_count()
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Whether `name` is a partition of the pipeline: the rejection of a
    /// call naming another (the one every call gives for it).
    pub fn check_partition(&self, name: &str) -> Result<(), Rejection> {
        self.partition(name).map(|_| ())
    }

    fn partition(&self, name: &str) -> Result<usize, Rejection> {
        self.pipeline
            .partition_index(name)
            .ok_or_else(|| {
                let known: Vec<String> = self
                    .pipeline
                    .partitions()
                    .iter()
                    .map(|p| format!("{p:?}"))
                    .collect();
                Rejection::UnknownPartition(format!(
                    "unknown partition {name:?} (the pipeline's partitions: {}; names are case-sensitive)",
                    known.join(", ")
                ))
            })
    }

    /// Ingests a batch atomically, with exactly the effect of separate calls.
    /// On error nothing is applied and the index names the first bad delivery.
    /// An empty batch succeeds with no effect (the API rejects it earlier).
    /// Takes owned [`Delivery`] values or borrowed [`DeliveryRef`] ones.
    pub fn ingest<D: DeliveryInput>(
        &mut self,
        mut deliveries: Vec<D>,
    ) -> Result<IngestOutcome, BatchRejection> {
        let mark = self.sources.mark();
        let hashes: Vec<u32> = deliveries.iter().map(|d| StrIndex::hash(d.id())).collect();
        self.sources.prefetch(&hashes);
        let mut maybe = Vec::new();
        let wide: Vec<u64> = deliveries.iter().map(|d| id_hash(d.id())).collect();
        self.sources.maybe_flushed(&wide, &mut maybe);
        let mut resolved = Vec::with_capacity(deliveries.len());
        for (index, d) in deliveries.iter_mut().enumerate() {
            let r = self.partition(d.partition()).and_then(|p| {
                Ok((
                    p,
                    self.sources.resolve(
                        p,
                        d,
                        hashes[index],
                        maybe.get(index).copied().unwrap_or(true),
                        &mut self.keys,
                    )?,
                ))
            });
            match r {
                Ok(x) => resolved.push(x),
                Err(rejection) => {
                    self.sources.rollback(mark);
                    return Err(BatchRejection { index, rejection });
                }
            }
        }
        let mut out = IngestOutcome::default();
        let mut touched = vec![false; self.pipeline.partitions().len()];
        self.live.track_keys(&self.keys);
        let sharded = self.live.parallel()
            && self.changelog.nothing_pending()
            && resolved
                .iter()
                .filter(|(_, r)| matches!(r, Resolved::Unique(_)))
                .count()
                >= self.live.min_events;
        // With shards, unique events are admitted here in order and their
        // window work queued per shard (see `apply_sharded`).
        let k = if sharded { self.live.shard_count() } else { 0 };
        let mut jobs: Vec<Vec<Job>> = (0..k)
            .map(|_| Vec::with_capacity(resolved.len() / k + 16))
            .collect();
        let mut order: Vec<u8> = Vec::with_capacity(if sharded { resolved.len() } else { 0 });
        for (p, r) in resolved {
            touched[p] = true;
            match r {
                Resolved::Redelivery => out.redeliveries += 1,
                Resolved::Duplicate => {
                    out.duplicates += 1;
                    // Sharded means nothing pending: the reconciliation of a
                    // duplicate is then empty.
                    if !sharded {
                        self.reconcile(Touches::default(), &mut out.changes)
                    }
                }
                Resolved::Unique(no) => {
                    let job = self.admit(no, &mut out.late);
                    if sharded {
                        let s = self.live.shard_of(job.key);
                        jobs[s].push(job);
                        order.push(s as u8);
                    } else {
                        self.apply_unique(&job, &mut out.changes);
                    }
                }
            }
        }
        if sharded {
            self.apply_sharded(jobs, order, &mut out.changes);
        }
        out.watermark = self.clock.global;
        out.offsets = touched
            .iter()
            .enumerate()
            .filter(|(_, t)| **t)
            .map(|(p, _)| {
                (
                    self.pipeline.partitions()[p].clone(),
                    self.sources.consumed(p),
                )
            })
            .collect();
        Ok(out)
    }

    fn reconcile(&mut self, touches: Touches, out: &mut Vec<Change>) {
        self.changelog.reconcile(
            touches,
            &self.live,
            self.clock.global,
            &mut self.keys,
            &self.names,
            out,
        );
    }

    /// The clock and late output of a unique event, in event order; returns
    /// what its windows need.
    fn admit(&mut self, no: super::sources::RecNo, late_out: &mut Vec<LateRecord>) -> Job {
        // `no` was just recorded by the batch's resolution.
        let (key, timestamp, value) = self
            .sources
            .event(no)
            .map_or((0, 0, 0), |rec| (rec.key, rec.timestamp, rec.value));
        self.clock.observe(timestamp);
        // The watermark the event is late against, if it is late.
        let late_at = self.clock.late_at(timestamp, self.pipeline.lateness());
        if let Some(watermark) = late_at {
            if let Some(event) = self.sources.to_event(no, &self.keys) {
                let seq = self.late.push(event.clone(), watermark);
                late_out.push(LateRecord {
                    seq,
                    event,
                    watermark,
                });
            }
        }
        Job {
            key,
            timestamp,
            value,
            late: late_at.is_some(),
            stream_time: self.clock.stream_time(),
        }
    }

    /// Applies an admitted unique event's window updates and reconciles.
    fn apply_unique(&mut self, job: &Job, out: &mut Vec<Change>) {
        let w = self.clock.global;
        let live = self.live.shard_mut(job.key);
        let touches = keywork::touch(live, &self.changelog, w, job);
        self.reconcile(touches, out);
    }

    /// Runs the admitted events' per-key work on the shard threads (`jobs[s]`:
    /// shard `s`'s events in event order; `order`: the shard of each event),
    /// then numbers and renders their changes here in event order. Requires
    /// no pending restored rows (each event's reconciliation then involves
    /// its own key only).
    fn apply_sharded(&mut self, jobs: Vec<Vec<Job>>, order: Vec<u8>, out: &mut Vec<Change>) {
        let w = self.clock.global;
        let changelog = &self.changelog;
        let results = self.live.run(jobs, |_, live, jobs| {
            keywork::run_jobs(live, changelog, w, &jobs)
        });
        let total: usize = results.iter().map(|(c, _)| c.len()).sum();
        out.reserve(total);
        let mut shards: Vec<_> = results
            .into_iter()
            .map(|(changes, counts)| (changes.into_iter(), counts.into_iter()))
            .collect();
        for s in order {
            let (changes, counts) = &mut shards[s as usize];
            let n = counts.next().unwrap_or(0);
            for (op, b, agg) in changes.by_ref().take(n as usize) {
                out.push(Change {
                    seq: self.changelog.next_seq(),
                    op,
                    result: row(&self.names, &self.keys, &b, &agg),
                });
            }
        }
    }

    /// `advance(partition, w)`.
    pub fn advance(&mut self, partition: &str, watermark: i64) -> Result<TickOutcome, Rejection> {
        self.advance_with(partition, watermark, Finalized::Addresses)
    }

    /// [`Processor::advance`], reporting the finalized buckets as `detail`
    /// says.
    pub fn advance_with(
        &mut self,
        partition: &str,
        watermark: i64,
        detail: Finalized,
    ) -> Result<TickOutcome, Rejection> {
        let p = self.partition(partition)?;
        let before = self.clock.global;
        self.clock.advance(p, watermark);
        Ok(self.tick(before, detail))
    }

    /// Several advances in one atomic call, with exactly the effect of
    /// [`Processor::advance`] called for each in order: the changes of all
    /// of them in sequence order, the watermark after the last, and the
    /// addresses each finalized, in the order of the advances. On error
    /// nothing is applied and the index names the first advance of an
    /// unknown partition (an advance can fail for no other reason).
    pub fn advance_all<P: AsRef<str>>(
        &mut self,
        advances: &[(P, i64)],
    ) -> Result<TickOutcome, BatchRejection> {
        self.advance_all_with(advances, Finalized::Addresses)
    }

    /// [`Processor::advance_all`], reporting the finalized buckets as
    /// `detail` says.
    pub fn advance_all_with<P: AsRef<str>>(
        &mut self,
        advances: &[(P, i64)],
        detail: Finalized,
    ) -> Result<TickOutcome, BatchRejection> {
        let mut at = Vec::with_capacity(advances.len());
        for (index, (partition, watermark)) in advances.iter().enumerate() {
            let p = self
                .partition(partition.as_ref())
                .map_err(|rejection| BatchRejection { index, rejection })?;
            at.push((p, *watermark));
        }
        let mut out = TickOutcome {
            watermark: self.clock.global,
            ..TickOutcome::default()
        };
        for (p, watermark) in at {
            let before = self.clock.global;
            self.clock.advance(p, watermark);
            let t = self.tick(before, detail);
            // (the first advance's lists are taken as they are: a tick
            // moves thousands of changes, and most calls advance once)
            if out.changes.is_empty() {
                out.changes = t.changes;
            } else {
                out.changes.extend(t.changes);
            }
            if out.finalized.is_empty() {
                out.finalized = t.finalized;
            } else {
                out.finalized.extend(t.finalized);
            }
            out.finalized_count += t.finalized_count;
            out.watermark = t.watermark;
        }
        Ok(out)
    }

    /// `mark_idle(partition)`.
    pub fn mark_idle(&mut self, partition: &str) -> Result<TickOutcome, Rejection> {
        self.mark_idle_with(partition, Finalized::Addresses)
    }

    /// [`Processor::mark_idle`], reporting the finalized buckets as
    /// `detail` says.
    pub fn mark_idle_with(
        &mut self,
        partition: &str,
        detail: Finalized,
    ) -> Result<TickOutcome, Rejection> {
        let p = self.partition(partition)?;
        let before = self.clock.global;
        self.clock.mark_idle(p);
        Ok(self.tick(before, detail))
    }

    /// After a watermark call: upsert the newly ready buckets, then finalize.
    fn tick(&mut self, before: Option<i64>, detail: Finalized) -> TickOutcome {
        let after = self.clock.global;
        if let Some(w) = after {
            // Only a tick that finds buckets is worth handing to the
            // shards. When the watermark did not move (most advances of a
            // partition that is not the slowest), or moved without reaching
            // a bucket's end (most single-event calls: the watermark follows
            // each event, a window ends every few hundred), nothing becomes
            // ready and nothing is final, which this thread checks faster
            // than it wakes a shard thread (16 partitions, one advance each
            // per batch: 16 hand-overs per batch; one event per request:
            // one per commit, 9% of the server's CPU in wake-ups).
            let newly = Some((before.map(i128::from), i128::from(w)));
            let threshold = Some(i128::from(w) - i128::from(self.pipeline.lateness()));
            if before != after
                && self.live.parallel()
                && self.changelog.nothing_pending()
                && self.live.tick_has_work(newly, threshold)
            {
                return self.tick_sharded(before, w, detail);
            }
        }
        let mut out = TickOutcome {
            watermark: after,
            ..TickOutcome::default()
        };
        let mut touches = Touches::default();
        if let Some(w) = after {
            if before != after {
                self.live
                    .sweep_ready(before.map(|b| b as i128), w as i128, |b, _| {
                        touches.push(b, None)
                    });
            }
        }
        self.reconcile(touches, &mut out.changes);
        if let Some(w) = after {
            let mut finalized = self
                .live
                .finalize_below(w as i128 - self.pipeline.lateness() as i128);
            out.finalized_count = finalized.len();
            if detail == Finalized::Addresses {
                sort_by_address(&mut self.keys, &mut finalized, |b| b);
                out.finalized = finalized.iter().map(|b| self.address(b)).collect();
            }
        }
        out
    }

    /// A tick with the shards side by side: each collects its newly ready
    /// and finalized buckets, then sorts and renders them; here the sorted
    /// lists are merged into address order and the upserts numbered. With
    /// nothing pending, a tick's changes are exactly those upserts.
    fn tick_sharded(&mut self, before: Option<i64>, w: i64, detail: Finalized) -> TickOutcome {
        let k = self.live.shard_count();
        let newly = (before != Some(w)).then(|| (before.map(|b| b as i128), w as i128));
        let threshold = w as i128 - self.pipeline.lateness() as i128;
        // Ranks (if worth it) before the shards sort with them.
        let ranked = self.keys.prepare_ranks(self.live.len() / 8);
        let keys = &self.keys;
        let parts = self.live.run(vec![(); k], |_, live, ()| {
            keywork::tick_share(
                live,
                newly,
                threshold,
                keys,
                ranked,
                detail == Finalized::Addresses,
            )
        });
        let mut ready = Vec::with_capacity(k);
        let mut finalized = Vec::with_capacity(k);
        let mut finalized_count = 0;
        for (r, f, n) in parts {
            ready.push(r);
            finalized.push(f);
            finalized_count += n;
        }
        let mut out = TickOutcome {
            watermark: Some(w),
            ..TickOutcome::default()
        };
        let (names, changelog) = (&self.names, &mut self.changelog);
        out.changes.reserve(ready.iter().map(Vec::len).sum());
        merge_sorted(keys, ranked, ready, |(b, agg)| {
            out.changes.push(Change {
                seq: changelog.next_seq(),
                op: ChangeOp::Upsert,
                result: row(names, keys, &b, &agg),
            })
        });
        out.finalized_count = finalized_count;
        if detail == Finalized::Addresses {
            out.finalized.reserve(out.finalized_count);
            merge_sorted(keys, ranked, finalized, |(b, ())| {
                out.finalized.push(self.address(&b))
            });
        }
        out
    }

    fn address(&self, b: &BucketRef) -> Address {
        Address {
            window: self.names[b.window].clone(),
            key: self.keys.name(b.key).clone(),
            start: b.start,
            end: b.end,
        }
    }

    /// The global watermark.
    pub fn watermark(&self) -> Option<i64> {
        self.clock.global
    }

    /// The last change sequence emitted (0 before any).
    pub fn sequence(&self) -> u64 {
        self.changelog.sequence()
    }

    /// Number of late records so far.
    pub fn late_len(&self) -> u64 {
        self.late.len()
    }

    /// Number of live buckets.
    pub fn live_buckets(&self) -> usize {
        self.live.len()
    }

    /// One partition's reported progress and idle flag (None: not a
    /// partition of the pipeline).
    pub fn partition_clock(&self, name: &str) -> Option<(Option<i64>, bool)> {
        let p = self.pipeline.partition_index(name)?;
        Some((self.clock.progress[p], self.clock.idle[p]))
    }

    /// Every partition's state, sorted by name.
    pub fn partitions(&self) -> Vec<PartitionStatus> {
        self.pipeline
            .partitions()
            .iter()
            .enumerate()
            .map(|(p, name)| PartitionStatus {
                name: name.clone(),
                offset: self.sources.consumed(p),
                progress: self.clock.progress[p],
                idle: self.clock.idle[p],
            })
            .collect()
    }

    /// The visible rows in address order, optionally filtered.
    pub fn results(&self, window: Option<&str>, key: Option<&str>) -> Vec<WindowResult> {
        let Some(w) = self.clock.global else {
            return Vec::new();
        };
        let window = match window {
            Some(name) => match self.names.iter().position(|n| **n == *name) {
                Some(i) => Some(i),
                None => return Vec::new(),
            },
            None => None,
        };
        let key = match key {
            Some(k) => match self.keys.get(k) {
                Some(id) => Some(id),
                None => return Vec::new(),
            },
            None => None,
        };
        let mut rows = Vec::new();
        self.live.for_each_ending_in(None, w as i128, |b, _| {
            if window.is_none_or(|x| x == b.window)
                && key.is_none_or(|k| k == b.key)
                && self.changelog.is_visible(&b)
            {
                rows.push(b);
            }
        });
        rows.sort_unstable_by(|a, b| address_cmp(&self.keys, a, b));
        rows.iter()
            .filter_map(|b| Some(row(&self.names, &self.keys, b, self.live.get(b)?)))
            .collect()
    }

    /// Late records with `seq > after`, at most `limit`.
    pub fn late(&self, after: u64, limit: usize) -> Result<Vec<LateRecord>, Rejection> {
        Ok(self
            .late
            .records(self.sources.store(), after, limit)
            .map_err(super::sources::unavailable)?
            .into_iter()
            .map(|(seq, event, watermark)| LateRecord {
                seq,
                event,
                watermark,
            })
            .collect())
    }

    /// A cheap frozen copy of the current state that can only be
    /// checkpointed and flushed: take it under a lock, then serialize it
    /// elsewhere.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            p: Processor {
                pipeline: self.pipeline.clone(),
                names: self.names.clone(),
                defs: self.defs.clone(),
                keys: self.keys.frozen(),
                sources: self.sources.history_copy(),
                clock: self.clock.clone(),
                live: self.live.clone(),
                changelog: self.changelog.clone(),
                late: self.late.clone(),
            },
            mark: self.sources.tail_mark(),
            late_tail: self.late.tail_len(),
        }
    }

    /// The tail of `snap` was stored as `stored` (the segments
    /// [`Snapshot::tail_segments`] gave, with their store ids): it leaves
    /// memory, and reads of it go to the store from now on. What this
    /// processor received after the snapshot stays in its tail. The
    /// caller makes sure nothing replaced this processor's history in
    /// between (a restore).
    pub fn flushed(&mut self, snap: &Snapshot, stored: &[(NewSegment, SegId)]) {
        self.sources.flushed(&snap.mark, stored);
        if let Some((s, id)) = stored.iter().find(|(s, _)| s.kind == SegKind::Late) {
            self.late
                .flushed(snap.late_tail, *id, s.bytes, s.chain.clone());
        }
    }

    /// What the history holds in memory: deliveries and late records not
    /// yet flushed.
    pub fn tail_len(&self) -> u64 {
        self.sources.tail_deliveries() + self.late.tail_len() as u64
    }

    /// The flushed history: each partition's segments and the late
    /// output's.
    pub fn flushed_history(&self) -> Flushed {
        Flushed {
            sources: (0..self.pipeline.partitions().len())
                .map(|p| self.sources.segments(p).to_vec())
                .collect(),
            late: self.late.segments().to_vec(),
        }
    }
}

/// Merges lists sorted in address order (by their buckets), handing each
/// item to `emit` in the merged order.
fn merge_sorted<T>(
    keys: &KeyTable,
    ranked: bool,
    lists: Vec<Vec<(BucketRef, T)>>,
    mut emit: impl FnMut((BucketRef, T)),
) {
    let mut rests: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    loop {
        let mut best: Option<(usize, &BucketRef)> = None;
        for (i, rest) in rests.iter().enumerate() {
            if let Some((b, _)) = rest.as_slice().first() {
                if best.is_none_or(|(_, c)| cmp_prepared(keys, ranked, b, c).is_lt()) {
                    best = Some((i, b));
                }
            }
        }
        let Some((i, _)) = best else {
            return;
        };
        if let Some(item) = rests[i].next() {
            emit(item);
        }
    }
}

/// A frozen copy of a processor's state (see [`Processor::snapshot`]).
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) p: Processor,
    mark: super::sources::Mark,
    late_tail: usize,
}

impl Snapshot {
    /// The checkpoint envelope of the state when the snapshot was taken,
    /// byte-identical to `Processor::checkpoint` at that moment.
    pub fn checkpoint(&self) -> Result<Vec<u8>, Rejection> {
        self.p.checkpoint()
    }

    /// The change sequence of that state.
    pub fn sequence(&self) -> u64 {
        self.p.sequence()
    }

    /// Its number of late records.
    pub fn late_len(&self) -> u64 {
        self.p.late_len()
    }

    /// The tail as segments to store (sources pieces of at most
    /// `max_items` deliveries per partition, then one late segment).
    pub fn tail_segments(&self, max_items: u64) -> Vec<NewSegment> {
        let mut out = Vec::new();
        let done = self.each_tail_segment(max_items, &mut |s| {
            out.push(s);
            Ok::<(), std::convert::Infallible>(())
        });
        match done {
            Ok(()) => out,
            Err(never) => match never {},
        }
    }

    /// [`Snapshot::tail_segments`] one at a time (only one segment's text
    /// is held at once).
    pub fn each_tail_segment<E>(
        &self,
        max_items: u64,
        each: &mut dyn FnMut(NewSegment) -> Result<(), E>,
    ) -> Result<(), E> {
        self.p
            .sources
            .tail_segments(&self.p.keys, max_items, each)?;
        match self.p.late.tail_segment() {
            Some(s) => each(s),
            None => Ok(()),
        }
    }

    /// The flushed history once `stored` (the tail) is stored too: what
    /// a checkpoint of this snapshot names.
    pub fn flushed_with(&self, stored: &[(NewSegment, SegId)]) -> Flushed {
        let mut f = self.p.flushed_history();
        for (seg, id) in stored {
            let r = SegRef {
                id: *id,
                first: seg.first,
                count: seg.count,
                bytes: seg.bytes,
            };
            match seg.kind {
                SegKind::Sources => {
                    if let Some(list) = f.sources.get_mut(seg.partition) {
                        list.push(r);
                    }
                }
                SegKind::Late => f.late.push(r),
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipeline with more windows than a `u16` counts: window numbers
    /// must not wrap (they did, and the 65,537th window, a fixed one,
    /// then updated the first, a session window: a panic).
    #[test]
    fn more_than_65536_windows_keep_their_own_numbers() {
        let mut windows = vec![("a".to_string(), WindowDef::Session { gap: 5 })];
        windows.extend((0..65_536).map(|i| (format!("b{i:05}"), WindowDef::Fixed { size: 10 })));
        let pipeline = Pipeline::new(vec!["p".into()], windows, 0).unwrap();
        let mut p = Processor::new(pipeline.clone());
        let out = p
            .ingest(vec![Delivery {
                partition: "p".into(),
                offset: None,
                event: Event {
                    id: "e".into(),
                    key: "k".into(),
                    timestamp: 3,
                    value: 7,
                },
            }])
            .unwrap();
        assert!(out.changes.is_empty());
        assert_eq!(p.live_buckets(), 65_537);
        let t = p.advance("p", 10).unwrap();
        assert_eq!(t.changes.len(), 65_537);
        assert_eq!(&*t.changes[0].result.window, "a");
        assert_eq!((t.changes[0].result.start, t.changes[0].result.end), (3, 8));
        assert_eq!(&*t.changes[65_536].result.window, "b65535");
        let back = Processor::restore(&p.checkpoint().unwrap(), &pipeline).unwrap();
        assert_eq!(back.checkpoint().unwrap(), p.checkpoint().unwrap());
    }

    /// A watermark call asked for the count of its finalized buckets does
    /// exactly what one asked for their addresses does (the same changes,
    /// watermark and state) and reports as many; on one shard and on
    /// several (the two ways a tick runs), with fixed, sliding and session
    /// windows over two partitions.
    #[test]
    fn counting_the_finalized_buckets_changes_nothing_else() {
        let windows = vec![
            ("f".to_string(), WindowDef::Fixed { size: 10 }),
            ("s".to_string(), WindowDef::Sliding { size: 10, step: 5 }),
            ("x".to_string(), WindowDef::Session { gap: 4 }),
        ];
        /// Runs the shards' parts one after another (the sharded tick
        /// needs an executor).
        #[derive(Debug)]
        struct InTurn;
        impl Executor for InTurn {
            fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
                (0..n).for_each(f);
            }
        }
        let pipeline = Pipeline::new(vec!["a".into(), "b".into()], windows, 3).unwrap();
        for k in [1, 3] {
            let mut full = Processor::new(pipeline.clone());
            full.set_shards(k, Some(Arc::new(InTurn))).unwrap();
            assert_eq!(full.live.parallel(), k > 1);
            full.set_shard_min_events(1);
            let mut counted = full.clone();
            let mut finalized = 0;
            for round in 0..12i64 {
                let batch: Vec<Delivery> = (0..20i64)
                    .map(|i| Delivery {
                        partition: if i % 2 == 0 { "a" } else { "b" }.into(),
                        offset: None,
                        event: Event {
                            id: format!("e{round}-{i}"),
                            key: format!("k{}", (i * 7 + round) % 5),
                            timestamp: round * 10 + (i * 3) % 13,
                            value: i - 9,
                        },
                    })
                    .collect();
                assert_eq!(
                    full.ingest(batch.clone()).unwrap(),
                    counted.ingest(batch).unwrap()
                );
                let advances = [("a", round * 10 - 2), ("b", round * 10)];
                let mut want = full.advance_all(&advances).unwrap();
                let got = counted
                    .advance_all_with(&advances, Finalized::Count)
                    .unwrap();
                assert_eq!(got.finalized_count, want.finalized.len(), "round {round}");
                assert!(got.finalized.is_empty());
                want.finalized.clear();
                assert_eq!(got, want, "round {round}");
                finalized += got.finalized_count;
            }
            let idle = counted.mark_idle_with("b", Finalized::Count).unwrap();
            let want = full.mark_idle("b").unwrap();
            assert_eq!(idle.finalized_count, want.finalized.len());
            let one = counted.advance_with("a", 500, Finalized::Count).unwrap();
            let want = full.advance("a", 500).unwrap();
            assert_eq!(one.finalized_count, want.finalized.len());
            assert_eq!(one.changes, want.changes);
            assert!(finalized + one.finalized_count > 20, "{finalized}");
            assert_eq!(counted.checkpoint().unwrap(), full.checkpoint().unwrap());
        }
    }
}
