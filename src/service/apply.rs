//! The single write path, with group commit.
//!
//! Every mutating call runs in three steps:
//!
//! 1. **Engine** (under the processor lock, nothing else): apply the call to
//!    the engine; a rejection returns here and writes nothing. Otherwise the
//!    call gets the next ticket and is queued (its raw request body) on the
//!    commit queue, still under the lock, so the queue is in engine order and
//!    every applied call is queued or committed whenever the lock is free.
//! 2. **Encode** (no lock): the call's changes are encoded once for the
//!    store (a binary chunk, [`store::chunk`]) and once for the answer (the
//!    JSON array of its `changes`).
//! 3. **Commit**: the first caller that finds no commit running and an
//!    encoded call at the head of the queue becomes the leader: it takes
//!    every encoded call from the head and stores them all in ONE SQLite
//!    transaction (one fsync), then wakes the others. Each call is answered
//!    only after the commit that includes it, so a 2xx means durable.
//!
//! If a commit fails, every call of that group and every call queued behind
//! it (their engine state builds on the failed ones) is answered 503, the
//! queue is "poisoned" (calls applied meanwhile are refused with 503 too), and
//! the processor is rebuilt from the store (`recover`) before anything else
//! uses it: nothing of those calls was applied, and the processor equals the
//! store. If the rebuild fails, the service stays broken (readyz 503) and
//! every later call retries it first.
//!
//! Readers of the processor (`/results`, `/status`), checkpoints and
//! restores first wait until everything applied is committed ("settled"),
//! holding the processor lock, so they never see a state that a failed
//! commit takes back.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::engine::{
    Address, Change, DeliveryRef, IngestOutcome, LateRecord, Pipeline, Processor, Rejection,
    TickOutcome,
};
use crate::store::{self, CheckpointMeta, CommandRow, Origin};

use super::parse::Framing;
use super::{Inner, Log, Metrics, Service, ServiceError};

/// Where a restore takes its envelope from.
#[derive(Debug, Clone)]
pub enum RestoreSource {
    /// A stored checkpoint.
    Id(i64),
    /// Envelope bytes sent by the client.
    Bytes(Vec<u8>),
}

/// `POST /restore` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreOutcome {
    /// The restored change sequence.
    pub sequence: u64,
    /// The restored number of late records.
    pub late: u64,
    /// The restored global watermark.
    pub watermark: Option<i64>,
}

/// An acknowledged `POST /events`: the outcome with its output already
/// encoded (the bytes that were stored).
#[derive(Debug, Clone)]
pub struct IngestAnswer {
    /// JSON array of the changes.
    pub changes: Vec<u8>,
    /// JSON array of the late records.
    pub late: Vec<u8>,
    /// The global watermark.
    pub watermark: Option<i64>,
    /// Consumed offset of each touched partition, sorted by name.
    pub offsets: Vec<(String, i64)>,
}

/// An acknowledged `POST /watermarks` or idle call.
#[derive(Debug, Clone)]
pub struct TickAnswer {
    /// JSON array of the changes.
    pub changes: Vec<u8>,
    /// The global watermark after the call.
    pub watermark: Option<i64>,
    /// Addresses finalized by the call, in address order.
    pub finalized: Vec<Address>,
}

/// Bytes committed between two pokes of the WAL checkpointer.
const WAL_POKE_BYTES: u64 = 4 << 20;

/// A call applied to the engine, waiting for its commit.
pub(super) struct Pending {
    ticket: u64,
    kind: &'static str,
    body: Vec<u8>,
    /// Processor sequence and late count after this call.
    heads: (u64, u64),
    /// Filled by the caller outside the processor lock.
    encoded: Option<Encoded>,
}

/// A call's output as stored and answered.
struct Encoded {
    /// The changes, when the call produced any.
    changes: Option<EncodedChanges>,
    /// Late records as `(seq, compact JSON)`.
    late: Vec<(u64, String)>,
}

/// A call's changes as stored (the answer's JSON is written while the
/// commit runs, see [`Service::commit`]).
struct EncodedChanges {
    first: u64,
    last: u64,
    /// The binary chunk ([`store::chunk`]).
    stored: Vec<u8>,
}

/// A logged command: what the command log stores and recovery replays.
pub(super) enum Command<'a> {
    Ingest(Vec<DeliveryRef<'a>>),
    Advance(&'a str, i64),
    Idle(&'a str),
}

pub(super) enum Applied {
    Ingest(IngestOutcome),
    Tick(TickOutcome),
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdvanceRow {
    pub partition: String,
    pub watermark: i64,
}

/// Applies one command to the engine (no storage). Shared with recovery.
pub(super) fn run_engine(p: &mut Processor, cmd: Command<'_>) -> Result<Applied, ServiceError> {
    match cmd {
        Command::Ingest(d) => p
            .ingest(d)
            .map(Applied::Ingest)
            .map_err(ServiceError::BatchRejected),
        Command::Advance(part, w) => p
            .advance(part, w)
            .map(Applied::Tick)
            .map_err(ServiceError::Rejected),
        Command::Idle(part) => p
            .mark_idle(part)
            .map(Applied::Tick)
            .map_err(ServiceError::Rejected),
    }
}

/// The compact JSON array of `items` (each element exactly as serde writes
/// it alone).
pub(super) fn json_array<T: serde::Serialize>(items: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + items.len() * 160);
    out.push(b'[');
    for (i, c) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Serializing these engine types cannot fail (no maps with non-string
        // keys, no failing Serialize impls).
        let _ = serde_json::to_writer(&mut out, c);
    }
    out.push(b']');
    out
}

/// `[r1,r2,...]` from records already serialized one by one.
fn late_array(records: &[(u64, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + records.iter().map(|(_, r)| r.len() + 1).sum::<usize>());
    out.push(b'[');
    for (i, (_, r)) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r.as_bytes());
    }
    out.push(b']');
    out
}

fn encode(changes: &[Change], late: &[LateRecord]) -> Encoded {
    Encoded {
        changes: match (changes.first(), changes.last()) {
            (Some(f), Some(l)) => Some(EncodedChanges {
                first: f.seq,
                last: l.seq,
                stored: store::chunk::encode(changes),
            }),
            _ => None,
        },
        late: late
            .iter()
            .map(|l| (l.seq, serde_json::to_string(l).unwrap_or_default()))
            .collect(),
    }
}

/// Marks the queue poisoned if a caller leaves before encoding its call
/// (a panic): nothing behind it could ever commit otherwise.
struct Unfilled<'a> {
    svc: &'a Service,
    armed: bool,
}

impl Drop for Unfilled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut log = self.svc.log();
            self.svc
                .fail_all(&mut log, "internal failure; nothing was applied", &[]);
            self.svc.committed.notify_all();
        }
    }
}

impl Service {
    /// `POST /events`: `raw` is the body as received (stored as the command
    /// row), `deliveries` its parse.
    pub fn ingest(
        &self,
        raw: &[u8],
        framing: Framing,
        deliveries: Vec<DeliveryRef<'_>>,
    ) -> Result<IngestAnswer, ServiceError> {
        let n = deliveries.len() as u64;
        let body = raw.to_vec();
        let (ticket, applied) = self.apply(framing.kind(), body, Command::Ingest(deliveries))?;
        let Applied::Ingest(o) = applied else {
            return Err(ServiceError::Unavailable("internal mix-up".into()));
        };
        let enc = encode(&o.changes, &o.late);
        // the answer's late array from the records already encoded for storage
        let late = late_array(&enc.late);
        let changes = self.commit(ticket, enc, || json_array(&o.changes))?;
        Metrics::inc(&self.metrics.deliveries, n);
        Metrics::inc(&self.metrics.ingest_requests, 1);
        Metrics::inc(&self.metrics.duplicates, o.duplicates);
        Metrics::inc(&self.metrics.redeliveries, o.redeliveries);
        Metrics::inc(&self.metrics.changes, o.changes.len() as u64);
        Metrics::inc(&self.metrics.late, o.late.len() as u64);
        Ok(IngestAnswer {
            changes,
            late,
            watermark: o.watermark,
            offsets: o.offsets,
        })
    }

    /// `POST /watermarks`.
    pub fn advance(&self, partition: &str, watermark: i64) -> Result<TickAnswer, ServiceError> {
        let body = serde_json::to_vec(&AdvanceRow {
            partition: partition.to_string(),
            watermark,
        })
        .unwrap_or_default();
        self.tick("advance", body, Command::Advance(partition, watermark))
    }

    /// `POST /partitions/{partition}/idle`.
    pub fn mark_idle(&self, partition: &str) -> Result<TickAnswer, ServiceError> {
        let body = serde_json::to_vec(partition).unwrap_or_default();
        self.tick("idle", body, Command::Idle(partition))
    }

    fn tick(
        &self,
        kind: &'static str,
        body: Vec<u8>,
        cmd: Command<'_>,
    ) -> Result<TickAnswer, ServiceError> {
        let (ticket, applied) = self.apply(kind, body, cmd)?;
        let Applied::Tick(o) = applied else {
            return Err(ServiceError::Unavailable("internal mix-up".into()));
        };
        let enc = encode(&o.changes, &[]);
        let changes = self.commit(ticket, enc, || json_array(&o.changes))?;
        Metrics::inc(&self.metrics.changes, o.changes.len() as u64);
        Ok(TickAnswer {
            changes,
            watermark: o.watermark,
            finalized: o.finalized,
        })
    }

    /// Step 1: the engine, under the processor lock; queues the call.
    fn apply<'a>(
        &self,
        kind: &'static str,
        body: Vec<u8>,
        cmd: Command<'a>,
    ) -> Result<(u64, Applied), ServiceError> {
        let _turn = self.turns.wait();
        let mut guard = self.lock_consistent()?;
        let inner = &mut *guard;
        let applied = match run_engine(&mut inner.processor, cmd) {
            Ok(a) => a,
            Err(e) => {
                Metrics::inc(&self.metrics.rejected, 1);
                return Err(e);
            }
        };
        inner.ticket += 1;
        let ticket = inner.ticket;
        let heads = (inner.processor.sequence(), inner.processor.late_len());
        let mut log = self.log();
        if log.poisoned {
            // A commit failed after this call's lock was taken: this call
            // builds on state that is being taken back. The processor is
            // rebuilt (poisoned) before anyone uses it again.
            Metrics::inc(&self.metrics.storage_failures, 1);
            return Err(ServiceError::Unavailable(
                "storage failure; the state is being rebuilt".into(),
            ));
        }
        log.queue.push_back(Pending {
            ticket,
            kind,
            body,
            heads,
            encoded: None,
        });
        Ok((ticket, applied))
    }

    /// Steps 2 and 3: hands the encoded output to the queue (and leads the
    /// commit at once if none is running), runs `meanwhile` (the answer's
    /// JSON, overlapping the commit in flight), then leads a commit or waits
    /// for the one that includes this call.
    fn commit<R>(
        &self,
        ticket: u64,
        enc: Encoded,
        meanwhile: impl FnOnce() -> R,
    ) -> Result<R, ServiceError> {
        let mut guard = Unfilled {
            svc: self,
            armed: true,
        };
        let mut log = self.log();
        if let Some(p) = log.queue.iter_mut().rev().find(|p| p.ticket == ticket) {
            p.encoded = Some(enc);
        }
        guard.armed = false;
        drop(guard);
        if !log.leader && log.queue.front().is_some_and(|p| p.encoded.is_some()) {
            log = self.lead(log);
        }
        drop(log);
        let answer = meanwhile();
        let mut log = self.log();
        loop {
            if let Some(r) = log.outcomes.remove(&ticket) {
                return r.map(|()| answer).map_err(ServiceError::Unavailable);
            }
            if !log.leader && log.queue.front().is_some_and(|p| p.encoded.is_some()) {
                log = self.lead(log);
                continue;
            }
            log = self.committed.wait(log).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Commits every encoded call at the head of the queue in one
    /// transaction and records their outcomes.
    fn lead<'a>(&'a self, mut log: MutexGuard<'a, Log>) -> MutexGuard<'a, Log> {
        log.leader = true;
        let n = log.queue.iter().take_while(|p| p.encoded.is_some()).count();
        let group: Vec<Pending> = log.queue.drain(..n).collect();
        drop(log);
        let res = {
            let rows: Vec<CommandRow<'_>> = group
                .iter()
                .map(|p| {
                    let e = p.encoded.as_ref();
                    CommandRow {
                        kind: p.kind,
                        body: &p.body,
                        changes: e
                            .and_then(|e| e.changes.as_ref())
                            .map(|c| (c.first, c.last, c.stored.as_slice())),
                        late: e.map_or(&[], |e| &e.late),
                    }
                })
                .collect();
            self.writer().append(&rows)
        };
        let mut log = self.log();
        log.leader = false;
        let tickets: Vec<u64> = group.iter().map(|p| p.ticket).collect();
        let failed = match res {
            Ok(()) => {
                for t in &tickets {
                    log.outcomes.insert(*t, Ok(()));
                }
                log.logged += group.len() as u64;
                let bytes: usize = group
                    .iter()
                    .map(|p| {
                        p.body.len()
                            + p.encoded
                                .as_ref()
                                .and_then(|e| e.changes.as_ref())
                                .map_or(0, |c| c.stored.len())
                    })
                    .sum();
                self.wal_written(bytes);
                Metrics::inc(&self.metrics.commits, 1);
                if let Some(last) = group.last() {
                    let (seq, late_len) = last.heads;
                    self.heads.send_if_modified(|h| {
                        let changed = h.changes != seq || h.late != late_len;
                        h.changes = seq;
                        h.late = late_len;
                        changed
                    });
                }
                if self.checkpoint_every > 0 && log.logged >= self.checkpoint_every {
                    // The checkpointer thread takes it after these calls.
                    let _ = self.checkpoint_due.try_send(());
                }
                false
            }
            Err(e) => {
                tracing::error!(error = %e, "storage failure; rebuilding the processor from the store");
                self.fail_all(&mut log, &format!("storage failure: {e}"), &tickets);
                true
            }
        };
        self.committed.notify_all();
        if failed {
            drop(log);
            // Rebuild now (the next caller would otherwise do it).
            drop(self.lock_consistent());
            return self.log();
        }
        if self.wal.restart_due() {
            // The group is answered; the next leader waits for this short
            // copy (the background checkpointer did nearly all of it).
            drop(log);
            // Whatever the outcome, the next try waits for the next passive
            // round (a reader on an old snapshot may hold it up a while).
            if let Err(e) = self.writer().restart_wal() {
                tracing::warn!(error = %e, "WAL restart failed (the WAL keeps the data)");
            }
            self.wal.restart_tried();
            return self.log();
        }
        log
    }

    /// Counts bytes committed to the WAL; pokes the WAL checkpointer every
    /// [`WAL_POKE_BYTES`].
    fn wal_written(&self, bytes: usize) {
        let total = self.wal_bytes.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        if total >= WAL_POKE_BYTES {
            self.wal_bytes.store(0, Ordering::Relaxed);
            self.wal.poke();
        }
    }

    /// Fails `tickets` and everything queued, and poisons the queue.
    fn fail_all(&self, log: &mut Log, msg: &str, tickets: &[u64]) {
        log.poisoned = true;
        let queued: Vec<u64> = log.queue.drain(..).map(|p| p.ticket).collect();
        for t in tickets.iter().chain(&queued) {
            Metrics::inc(&self.metrics.storage_failures, 1);
            log.outcomes.insert(*t, Err(msg.to_string()));
        }
    }

    /// Waits (holding the processor lock) until every applied call is
    /// committed, then rebuilds if a commit failed or the state is broken.
    pub(super) fn settle(&self, inner: &mut Inner) -> Result<(), ServiceError> {
        let mut log = self.log();
        while !log.poisoned && (log.leader || !log.queue.is_empty()) {
            log = self.committed.wait(log).unwrap_or_else(|e| e.into_inner());
        }
        let poisoned = log.poisoned;
        drop(log);
        if poisoned || inner.broken {
            self.rebuild(inner)?;
        }
        Ok(())
    }

    /// Replaces the processor with the store's state. Marks the service
    /// ready again on success; leaves it broken (and not ready) otherwise.
    /// The caller holds the processor lock and nothing is being committed.
    pub(super) fn rebuild(&self, inner: &mut Inner) -> Result<(), ServiceError> {
        let replayed = super::recover::replay(&self.writer(), &self.db, &self.pipeline);
        match replayed {
            Ok((p, logged)) => {
                inner.processor = p;
                inner.broken = false;
                let mut log = self.log();
                log.poisoned = false;
                log.logged = logged;
                self.healthy.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "rebuilding the processor from the store failed");
                inner.broken = true;
                self.healthy.store(false, Ordering::Relaxed);
                Err(ServiceError::Unavailable(format!(
                    "storage failure; the state is being rebuilt: {e}"
                )))
            }
        }
    }

    fn checkpoint_locked(
        &self,
        inner: &mut Inner,
        origin: Origin,
    ) -> Result<CheckpointMeta, ServiceError> {
        let envelope = inner.processor.checkpoint();
        let late = inner.processor.late_len();
        let meta = {
            let mut w = self.writer();
            self.base_version.fetch_add(1, Ordering::SeqCst);
            w.checkpoint(&envelope, inner.processor.sequence(), origin)
        }
        .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        self.log().logged = 0;
        self.metrics.checkpoint_stored(meta.bytes);
        self.retain(meta.sequence, late);
        Ok(meta)
    }

    /// Applies the retention policy after a checkpoint that covers change
    /// `sequence` and `late` late records became the recovery base: old
    /// automatic checkpoints go, and (when configured) the output pages
    /// more than the retained count behind the head, never past the base
    /// (a replay checks its output against them). Failures are logged
    /// only: nothing acknowledged depends on pruning.
    fn retain(&self, sequence: u64, late: u64) {
        let r = self.retention;
        let heads = *self.heads.borrow();
        let mut w = self.writer();
        if let Err(e) = w.prune_checkpoints(r.checkpoints.max(1)) {
            tracing::warn!(error = %e, "pruning old automatic checkpoints failed");
        }
        let through = |head: u64, keep: u64, base: u64| {
            if keep == 0 {
                0
            } else {
                head.saturating_sub(keep).min(base)
            }
        };
        let changes = through(heads.changes, r.changes, sequence);
        let late = through(heads.late, r.late, late);
        if changes > 0 || late > 0 {
            if let Err(e) = w.prune(changes, late) {
                tracing::warn!(error = %e, "pruning the output pages failed");
            }
        }
    }

    /// `POST /checkpoints`: stores a checkpoint of the current state.
    pub fn create_checkpoint(&self) -> Result<CheckpointMeta, ServiceError> {
        let mut g = self.lock_settled()?;
        self.checkpoint_locked(&mut g, Origin::User)
    }

    /// `DELETE /checkpoints/{id}`.
    pub fn delete_checkpoint(&self, id: i64) -> Result<(), ServiceError> {
        let found = self
            .writer()
            .delete_checkpoint(id)
            .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        if found {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "no checkpoint with id {id}"
            )))
        }
    }

    /// Called by the checkpointer thread when `checkpoint_every` commands
    /// have been logged.
    ///
    /// Only the snapshot is taken under the processor lock (settled, so the
    /// snapshot is exactly the logged commands up to the last id); the
    /// serialization and checksum run outside it, so ingestion does not stall
    /// for the whole checkpoint. The checkpoint is then stored (in pieces,
    /// see [`Service::store_in_pieces`]) with the commands it covers
    /// removed, unless a restore or another checkpoint
    /// changed the recovery base meanwhile (then it is dropped: the base is
    /// newer, and the log still covers everything after it).
    pub(super) fn automatic_checkpoint(&self) {
        let (snapshot, up_to, logged, epoch, late) = {
            let Ok(g) = self.lock_settled() else {
                return;
            };
            let logged = self.log().logged;
            if self.checkpoint_every == 0 || logged < self.checkpoint_every {
                return;
            }
            let up_to = match self.writer().last_command_id() {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(error = %e, "automatic checkpoint skipped");
                    return;
                }
            };
            let epoch = self.base_version.load(Ordering::SeqCst);
            let late = g.processor.late_len();
            (g.processor.snapshot(), up_to, logged, epoch, late)
        };
        let envelope = snapshot.checkpoint();
        let sequence = snapshot.sequence();
        drop(snapshot);
        match self.store_in_pieces(&envelope, sequence, up_to, epoch) {
            Ok(Some(meta)) => {
                let mut log = self.log();
                log.logged = log.logged.saturating_sub(logged);
                drop(log);
                self.metrics.checkpoint_stored(meta.bytes);
                self.retain(meta.sequence, late);
            }
            // a restore or another checkpoint moved the base meanwhile
            Ok(None) => {}
            Err(e) => {
                Metrics::inc(&self.metrics.storage_failures, 1);
                tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
            }
        }
    }

    /// Stores an automatic checkpoint: its envelope in pieces, each in a
    /// short transaction of its own (the writer is released between pieces,
    /// so group commits interleave instead of waiting behind a write of tens
    /// of MB), then the transaction that links them, makes the checkpoint the
    /// recovery base and removes the commands up to `up_to`. `None` when the
    /// base moved since `epoch` (the pieces are dropped).
    fn store_in_pieces(
        &self,
        envelope: &[u8],
        sequence: u64,
        up_to: i64,
        epoch: u64,
    ) -> crate::store::Result<Option<CheckpointMeta>> {
        let mut staging = None;
        for piece in envelope.chunks(crate::store::PIECE_BYTES) {
            staging = Some(self.writer().stage_piece(staging, piece)?);
            self.wal_written(piece.len());
        }
        let Some(staging) = staging else {
            return Ok(None);
        };
        let sha256 = crate::store::sha256_hex(envelope);
        let mut w = self.writer();
        if self.base_version.load(Ordering::SeqCst) != epoch {
            w.drop_pieces(staging)?;
            return Ok(None);
        }
        self.base_version.fetch_add(1, Ordering::SeqCst);
        w.link_checkpoint(staging, sha256, envelope.len(), sequence, up_to)
            .map(Some)
    }

    /// The final checkpoint of a graceful shutdown: taken when commands were
    /// logged since the recovery base (so a restart replays nothing).
    pub fn final_checkpoint(&self) -> Result<Option<CheckpointMeta>, ServiceError> {
        let mut g = self.lock_settled()?;
        if self.log().logged == 0 {
            return Ok(None);
        }
        self.checkpoint_locked(&mut g, Origin::Auto).map(Some)
    }

    /// `POST /restore` and `POST /checkpoints/{id}/restore`.
    pub fn restore(&self, source: RestoreSource) -> Result<RestoreOutcome, ServiceError> {
        let (id, envelope) = match source {
            RestoreSource::Id(id) => (Some(id), self.checkpoint_bytes(id)?),
            RestoreSource::Bytes(b) => (None, b),
        };
        // Validate with the engine before touching anything.
        let processor = restore_processor(&envelope, &self.pipeline)?;
        let late = processor.late(0, usize::MAX);
        let mut g = self.lock();
        // Wait for the commits in flight; a failed one needs no rebuild
        // here: the processor is replaced.
        {
            let mut log = self.log();
            while !log.poisoned && (log.leader || !log.queue.is_empty()) {
                log = self.committed.wait(log).unwrap_or_else(|e| e.into_inner());
            }
        }
        let inner = &mut *g;
        let epoch = {
            let mut w = self.writer();
            self.base_version.fetch_add(1, Ordering::SeqCst);
            w.restore(id, &envelope, processor.sequence(), &late)
        }
        .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        let out = RestoreOutcome {
            sequence: processor.sequence(),
            late: processor.late_len(),
            watermark: processor.watermark(),
        };
        inner.processor = processor;
        inner.epoch = epoch;
        inner.broken = false;
        {
            let mut log = self.log();
            log.poisoned = false;
            log.logged = 0;
        }
        self.healthy.store(true, Ordering::Relaxed);
        self.heads.send_modify(|h| {
            h.changes = out.sequence;
            h.late = out.late;
            h.epoch = epoch;
        });
        Ok(out)
    }
}

/// Engine validation of a restore; every failure is `invalid_checkpoint`
/// with a non-empty detail.
fn restore_processor(envelope: &[u8], pipeline: &Pipeline) -> Result<Processor, ServiceError> {
    Processor::restore(envelope, pipeline).map_err(|r| {
        let detail = match r.detail() {
            "" => "the checkpoint cannot be restored".to_string(),
            d => d.to_string(),
        };
        ServiceError::Rejected(Rejection::InvalidCheckpoint(detail))
    })
}
