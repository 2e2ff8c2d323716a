//! The single write path.
//!
//! Every mutating call runs [`Service::apply`]: take the processor lock,
//! apply the call to the engine, write the command (the request as ONE
//! compact row), its changes and its late records in ONE SQLite transaction,
//! commit, publish the new heads, release the lock. The caller answers after
//! that, so a 2xx means durable.
//!
//! - A rejection by the engine writes nothing (the engine changed nothing).
//! - If the transaction fails, the engine has already moved on: the
//!   processor is rebuilt from the store (`recover`), never undone in memory,
//!   and the call answers `Unavailable`. If that rebuild fails too, the
//!   service stays "broken" (readyz 503) and every later call retries it
//!   first.
//! - Checkpoints and restores follow the same order: engine first (validate,
//!   or serialize), then one transaction, then swap or notify.

use std::sync::atomic::Ordering;

use crate::engine::{
    Delivery, IngestOutcome, LateRecord, Pipeline, Processor, Rejection, TickOutcome,
};
use crate::store::CheckpointMeta;

use super::{Inner, Metrics, Service, ServiceError};

/// A parsed ingest request. Parsing and the compact encoding of the command
/// happen in the api, outside the processor lock.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The deliveries, in request order.
    pub deliveries: Vec<Delivery>,
    /// The compact JSON array of the deliveries as sent (the command row).
    pub body: Vec<u8>,
}

impl Batch {
    /// Builds the command row for `deliveries`.
    pub fn new(deliveries: Vec<Delivery>) -> Batch {
        let body = serde_json::to_vec(&deliveries).unwrap_or_default();
        Batch { deliveries, body }
    }
}

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

/// A logged command: what the command log stores and recovery replays.
pub(super) enum Command<'a> {
    Ingest(Vec<Delivery>),
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

impl Command<'_> {
    /// The command row of a watermark call (ingest rows come with the batch).
    fn tick_row(&self) -> (&'static str, Vec<u8>) {
        match self {
            Command::Ingest(_) => ("events", Vec::new()),
            Command::Advance(p, w) => (
                "advance",
                serde_json::to_vec(&AdvanceRow {
                    partition: (*p).to_string(),
                    watermark: *w,
                })
                .unwrap_or_default(),
            ),
            Command::Idle(p) => ("idle", serde_json::to_vec(p).unwrap_or_default()),
        }
    }
}

impl Applied {
    fn output(&self) -> (&[crate::engine::Change], &[LateRecord]) {
        match self {
            Applied::Ingest(o) => (&o.changes, &o.late),
            Applied::Tick(o) => (&o.changes, &[]),
        }
    }
}

impl Service {
    /// `POST /events`.
    pub fn ingest(&self, batch: Batch) -> Result<IngestOutcome, ServiceError> {
        let n = batch.deliveries.len() as u64;
        let Batch { deliveries, body } = batch;
        match self.apply(Command::Ingest(deliveries), ("events", body))? {
            Applied::Ingest(o) => {
                Metrics::inc(&self.metrics.deliveries, n);
                Metrics::inc(&self.metrics.ingest_requests, 1);
                Ok(o)
            }
            Applied::Tick(_) => Err(ServiceError::Unavailable("internal mix-up".into())),
        }
    }

    /// `POST /watermarks`.
    pub fn advance(&self, partition: &str, watermark: i64) -> Result<TickOutcome, ServiceError> {
        self.tick(Command::Advance(partition, watermark))
    }

    /// `POST /partitions/{partition}/idle`.
    pub fn mark_idle(&self, partition: &str) -> Result<TickOutcome, ServiceError> {
        self.tick(Command::Idle(partition))
    }

    fn tick(&self, cmd: Command<'_>) -> Result<TickOutcome, ServiceError> {
        let row = cmd.tick_row();
        match self.apply(cmd, row)? {
            Applied::Tick(o) => Ok(o),
            Applied::Ingest(_) => Err(ServiceError::Unavailable("internal mix-up".into())),
        }
    }

    /// The write path (see the module docs).
    fn apply(
        &self,
        cmd: Command<'_>,
        (kind, body): (&'static str, Vec<u8>),
    ) -> Result<Applied, ServiceError> {
        let mut guard = self.lock_consistent()?;
        let inner = &mut *guard;
        let applied = match run_engine(&mut inner.processor, cmd) {
            Ok(a) => a,
            Err(e) => {
                Metrics::inc(&self.metrics.rejected, 1);
                return Err(e);
            }
        };
        let (changes, late) = applied.output();
        if let Err(e) = inner.writer.append(kind, &body, changes, late) {
            tracing::error!(error = %e, "storage failure; rebuilding the processor from the store");
            Metrics::inc(&self.metrics.storage_failures, 1);
            inner.broken = true;
            let _ = self.rebuild(inner);
            return Err(e.into());
        }
        inner.logged += 1;
        Metrics::inc(&self.metrics.changes, changes.len() as u64);
        Metrics::inc(&self.metrics.late, late.len() as u64);
        let (seq, late_len) = (inner.processor.sequence(), inner.processor.late_len());
        self.heads.send_if_modified(|h| {
            let changed = h.changes != seq || h.late != late_len;
            h.changes = seq;
            h.late = late_len;
            changed
        });
        if self.checkpoint_every > 0 && inner.logged >= self.checkpoint_every {
            // The checkpointer thread takes it after this call has answered.
            let _ = self.checkpoint_due.try_send(());
        }
        Ok(applied)
    }

    /// Replaces the processor with the store's state. Marks the service
    /// ready again on success; leaves it broken (and not ready) otherwise.
    pub(super) fn rebuild(&self, inner: &mut Inner) -> Result<(), ServiceError> {
        match super::recover::replay(&inner.writer, &self.pipeline) {
            Ok((p, logged)) => {
                inner.processor = p;
                inner.logged = logged;
                inner.broken = false;
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

    fn checkpoint_locked(&self, inner: &mut Inner) -> Result<CheckpointMeta, ServiceError> {
        let envelope = inner.processor.checkpoint();
        let meta = inner
            .writer
            .checkpoint(&envelope, inner.processor.sequence())
            .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        inner.logged = 0;
        self.metrics.checkpoint_stored(meta.bytes);
        Ok(meta)
    }

    /// `POST /checkpoints`: stores a checkpoint of the current state.
    pub fn create_checkpoint(&self) -> Result<CheckpointMeta, ServiceError> {
        let mut g = self.lock_consistent()?;
        self.checkpoint_locked(&mut g)
    }

    /// Called by the checkpointer thread when `checkpoint_every` commands
    /// have been logged.
    pub(super) fn automatic_checkpoint(&self) {
        let Ok(mut g) = self.lock_consistent() else {
            return;
        };
        if self.checkpoint_every == 0 || g.logged < self.checkpoint_every {
            return;
        }
        if let Err(e) = self.checkpoint_locked(&mut g) {
            tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
        }
    }

    /// The final checkpoint of a graceful shutdown: taken when commands were
    /// logged since the recovery base (so a restart replays nothing).
    pub fn final_checkpoint(&self) -> Result<Option<CheckpointMeta>, ServiceError> {
        let mut g = self.lock_consistent()?;
        if g.logged == 0 {
            return Ok(None);
        }
        self.checkpoint_locked(&mut g).map(Some)
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
        let inner = &mut *g;
        inner
            .writer
            .restore(id, &envelope, processor.sequence(), &late)
            .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        let out = RestoreOutcome {
            sequence: processor.sequence(),
            late: processor.late_len(),
            watermark: processor.watermark(),
        };
        inner.processor = processor;
        inner.logged = 0;
        inner.broken = false;
        self.healthy.store(true, Ordering::Relaxed);
        self.heads.send_modify(|h| {
            h.changes = out.sequence;
            h.late = out.late;
            h.epoch += 1;
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
