//! Restores: an engine's state replaced by a checkpoint's, durably, with
//! its output streams cut back and its epoch counted (the store's
//! `Writer::restore`).

use std::sync::atomic::Ordering;

use std::sync::Arc;

use crate::engine::checkpoint::LiveParts;
use crate::engine::history::HistoryStore;
use crate::engine::{Processor, Rejection, WriteJson as _};
use crate::store::{EngineId, Origin, Restored, RestoredLate};

use super::cmd::Engines;
use super::order::{self, Before, Held};
use super::{Metrics, Service, ServiceError};

/// Where a restore takes its envelope from.
#[derive(Debug, Clone)]
pub enum RestoreSource {
    /// A stored checkpoint.
    Id(i64),
    /// Envelope bytes sent by the client.
    Bytes(Vec<u8>),
}

/// The answer to `POST /restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreAnswer {
    /// The restored change sequence.
    pub sequence: u64,
    /// The restored number of late records.
    pub late: u64,
    /// The restored global watermark.
    pub watermark: Option<i64>,
}

impl Service {
    /// `POST /restore` and `POST /checkpoints/{id}/restore`.
    pub fn restore(&self, source: RestoreSource) -> Result<RestoreAnswer, ServiceError> {
        let by_body = matches!(source, RestoreSource::Bytes(_));
        let at = &mut Held::entry();
        let out = {
            let mut slot = self.checkpointing(at);
            self.restore_window(slot.held(), source)?
        };
        if by_body {
            // The restored history is in memory (and the recovery base is
            // the whole envelope): flush it now into a hidden checkpoint
            // that becomes the base, so that neither memory nor restarts
            // carry it. On failure the envelope base still recovers it.
            if let Err(e) = self.window_checkpoint(at, Origin::Hidden, |_, _| true) {
                tracing::warn!(error = %e, "storing the restored history failed (kept in memory)");
            }
        }
        Ok(out)
    }

    fn restore_window(
        &self,
        at: &mut Held<order::Checkpointing>,
        source: RestoreSource,
    ) -> Result<RestoreAnswer, ServiceError> {
        let history: Arc<dyn HistoryStore> = self.setup.history.clone();
        let pipeline = &self.setup.pipeline;
        let answer = |p: &Processor| RestoreAnswer {
            sequence: p.sequence(),
            late: p.late_len(),
            watermark: p.watermark(),
        };
        if let RestoreSource::Id(id) = source {
            let listed = self
                .with_reader(|r| r.checkpoints(EngineId::Window))?
                .iter()
                .any(|m| m.id == id);
            let parts = pipeline.partitions().len();
            let row = match listed {
                true => self.with_reader(|r| r.window_checkpoint(id, parts))?,
                false => None,
            };
            if let Some(row) = row {
                // A checkpoint of this service: its live state is checked
                // as a restore checks it, its history is the store's own.
                let live = LiveParts::decode(&row.state.live)
                    .map_err(|e| ServiceError::Unavailable(format!("checkpoint {id}: {e}")))?;
                let processor = self.setup.sharded(
                    Processor::resume(pipeline, &live, row.state.flushed.clone(), history)
                        .map_err(invalid)?,
                );
                let out = answer(&processor);
                self.restore_engine(
                    at,
                    &Restored {
                        engine: EngineId::Window,
                        checkpoint_id: Some(id),
                        envelope: None,
                        sequence: out.sequence,
                        late: RestoredLate::Segments(&row.state.flushed.late),
                        keys_through: None,
                    },
                    |_| Ok(()),
                    |engines| engines.window = processor,
                )?;
                return Ok(out);
            }
        }
        let (id, envelope) = match source {
            RestoreSource::Id(id) => (Some(id), self.checkpoint_bytes(EngineId::Window, id)?),
            RestoreSource::Bytes(b) => (None, b),
        };
        // Validate with the engine before touching anything.
        let processor = self
            .setup
            .sharded(Processor::restore_into(&envelope, pipeline, history).map_err(invalid)?);
        let late = processor
            .late(0, usize::MAX)
            .map_err(ServiceError::Rejected)?
            .iter()
            .map(|l| {
                let mut body = Vec::with_capacity(96);
                l.write_json(&mut body);
                (l.seq, String::from_utf8_lossy(&body).into_owned())
            })
            .collect::<Vec<_>>();
        let out = answer(&processor);
        let epoch = self.restore_engine(
            at,
            &Restored {
                engine: EngineId::Window,
                checkpoint_id: id,
                envelope: Some(&envelope),
                sequence: out.sequence,
                late: RestoredLate::Records(&late),
                keys_through: None,
            },
            |_| Ok(()),
            |engines| engines.window = processor,
        )?;
        debug_assert!(epoch > 0);
        Ok(out)
    }
}

impl Service {
    /// Stores a validated restore of one engine and puts its engine in
    /// place (`replace`), once the calls in flight are committed; returns
    /// the engine's new epoch. A restore is one transaction, as durable as
    /// any acknowledged call.
    pub(super) fn restore_engine<L: Before<order::Engines>>(
        &self,
        at: &mut Held<L>,
        r: &Restored<'_>,
        check: impl FnOnce(&Engines) -> Result<(), ServiceError>,
        replace: impl FnOnce(&mut Engines),
    ) -> Result<u64, ServiceError> {
        let mut g = self.lock(at);
        let (inner, at) = g.parts();
        // Wait for the commits in flight (a failed one is rebuilt below).
        self.drain(at);
        check(&inner.engines)?;
        let epoch = {
            let mut w = self.writer(at);
            self.commits
                .base_version(r.engine)
                .fetch_add(1, Ordering::SeqCst);
            w.restore(r)
        }
        .inspect_err(|_| Metrics::inc(&self.env.metrics.storage_failures, 1))?;
        restore_fault(epoch);
        replace(&mut inner.engines);
        if r.engine == EngineId::Window {
            inner.window_gen += 1;
        }
        match r.engine {
            EngineId::Window => inner.epochs.window = epoch,
            EngineId::Patterns => inner.epochs.patterns = epoch,
        }
        // Published under the lock: no later call's heads can be overtaken.
        let now = inner.heads();
        self.output.heads.send_modify(|h| {
            h.take_output(&now);
            h.epoch = now.epoch;
            h.patterns_epoch = now.patterns_epoch;
        });
        // A failed commit poisoned the queue: the next call rebuilds every
        // engine from the store, which now holds this restore.
        let mut q = self.queue(at);
        if !q.poisoned {
            *q.logged.get_mut(r.engine) = 0;
        }
        Ok(epoch)
    }
}

/// Engine validation of a restore: every failure is `invalid_checkpoint`
/// with a non-empty detail.
fn invalid(r: Rejection) -> ServiceError {
    let detail = match r.detail() {
        "" => "the checkpoint cannot be restored".to_string(),
        d => d.to_string(),
    };
    ServiceError::Rejected(Rejection::InvalidCheckpoint(detail))
}

/// The testing hook `STREAMFORGE_SINK_FAULT=restore:EPOCH` (docs/sinks.md,
/// "Testing"): the restore that starts that epoch stops for good once it is
/// committed, before the engine is replaced and the sinks see it, saying so
/// on stderr, so that a test can SIGKILL the process in the middle of it.
fn restore_fault(epoch: u64) {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        // The testing hook: unset or not `restore:EPOCH` means none.
        let v = std::env::var("STREAMFORGE_SINK_FAULT").ok()?;
        v.strip_prefix("restore:")?.parse().ok()
    });
    if *at == Some(epoch) {
        eprintln!("streamforge: fault point restore reached at epoch {epoch}");
        loop {
            std::thread::park();
        }
    }
}
