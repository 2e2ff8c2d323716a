//! The pattern engine's verbs on the one write path: pushes (buffering
//! only), advances and finish (processing, atomically, with their output
//! stored in the same group commit as everything else), its status, and
//! its restores.

use crate::patterns::{self, Engine};
use crate::store::RestoredLate;
use crate::store::{EngineId, Restored, StoredBody};

use super::cmd::{Cmd, Output, PatternAdvance, PatternFinish, PatternPush};
use super::commit::{json_records, Encoded};
use super::order::Held;
use super::parse::{Framing, PatternBatch};
use super::restore::RestoreSource;
use super::{Metrics, Service, ServiceError};

/// An acknowledged `POST /patterns/events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushAnswer {
    /// Ordinal of the first event pushed.
    pub first: u64,
    /// Ordinal of the last event pushed.
    pub last: u64,
    /// Events buffered after the push, in all.
    pub buffered: u64,
}

/// An acknowledged `POST /patterns/advance` or `/patterns/finish`.
#[derive(Debug, Clone)]
pub struct AdvanceAnswer {
    /// JSON array of the output records (the bytes that were stored).
    pub output: Vec<u8>,
    /// The watermark after the call.
    pub watermark: i64,
    /// Buffered events the call processed.
    pub processed: u64,
}

/// `GET /patterns/status`.
#[derive(Debug, Clone)]
pub struct PatternsStatus {
    /// The engine's counters.
    pub engine: patterns::Status,
    /// Its epoch (restores so far).
    pub epoch: u64,
}

/// A pattern restore's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternsRestored {
    /// The restored output sequence.
    pub sequence: u64,
    /// The restored watermark.
    pub watermark: i64,
}

impl Service {
    /// `POST /patterns/events`: `raw` is the body as received (the command
    /// row), `batch` its parse.
    pub fn pattern_push(
        &self,
        raw: &[u8],
        framing: Framing,
        batch: PatternBatch,
    ) -> Result<PushAnswer, ServiceError> {
        let n = batch.events.len() as u64;
        let cmd = PatternPush {
            framing,
            events: batch.events,
            malformed: batch.malformed,
        };
        let at = &mut Held::entry();
        let (ticket, o) = self.apply(at, cmd, StoredBody::pack(raw))?;
        // a push only buffers: no output records
        let enc = Encoded::new(&Output::default());
        self.commit(at, ticket, enc, || ())?;
        Metrics::inc(&self.env.metrics.pattern_events, n);
        Ok(PushAnswer {
            first: o.first,
            last: o.last,
            buffered: o.buffered,
        })
    }

    /// `POST /patterns/advance`.
    pub fn pattern_advance(&self, watermark: i64) -> Result<AdvanceAnswer, ServiceError> {
        let cmd = PatternAdvance { watermark };
        let body = StoredBody::raw(cmd.body()?);
        self.pattern_tick(cmd, body)
    }

    /// `POST /patterns/finish`.
    pub fn pattern_finish(&self) -> Result<AdvanceAnswer, ServiceError> {
        let body = StoredBody::raw(PatternFinish.body()?);
        self.pattern_tick(PatternFinish, body)
    }

    fn pattern_tick<C: Cmd<Out = patterns::AdvanceOutcome>>(
        &self,
        cmd: C,
        body: StoredBody,
    ) -> Result<AdvanceAnswer, ServiceError> {
        let at = &mut Held::entry();
        let (ticket, o) = self.apply(at, cmd, body)?;
        let enc = Encoded::new(&Output {
            patterns: &o.output,
            ..Output::default()
        });
        // An encoding error fails the commit below with that error.
        let output = enc
            .as_ref()
            .map(|e| json_records(e.records()))
            .unwrap_or_default();
        self.commit(at, ticket, enc, || ())?;
        Metrics::inc(&self.env.metrics.pattern_output, o.output.len() as u64);
        Ok(AdvanceAnswer {
            output,
            watermark: o.watermark,
            processed: o.processed,
        })
    }

    /// `GET /patterns/status`.
    pub fn pattern_status(&self) -> Result<PatternsStatus, ServiceError> {
        let at = &mut Held::entry();
        let g = self.lock_settled(at)?;
        Ok(PatternsStatus {
            engine: g.engines.patterns.status(),
            epoch: g.epochs.patterns,
        })
    }

    /// `GET /patterns`: the document in force.
    pub fn pattern_document(&self) -> Vec<u8> {
        self.setup.patterns.to_json()
    }

    /// `POST /patterns/restore` and `POST /patterns/checkpoints/{id}/restore`:
    /// the pattern engine's state becomes the checkpoint's, its output is
    /// cut back to the checkpoint's sequence, and its epoch grows by one.
    pub fn restore_patterns(
        &self,
        source: RestoreSource,
    ) -> Result<PatternsRestored, ServiceError> {
        let (id, envelope) = match source {
            RestoreSource::Id(id) => (Some(id), self.checkpoint_bytes(EngineId::Patterns, id)?),
            RestoreSource::Bytes(b) => (None, b),
        };
        // Validated completely before anything is touched.
        let engine = Engine::restore(&envelope, &self.setup.patterns).map_err(|e| {
            ServiceError::Rejected(crate::engine::Rejection::InvalidCheckpoint(
                if e.is_empty() {
                    "the checkpoint cannot be restored".into()
                } else {
                    e
                },
            ))
        })?;
        let out = PatternsRestored {
            sequence: engine.sequence(),
            watermark: engine.watermark(),
        };
        self.restore_engine(
            &mut Held::entry(),
            &Restored {
                engine: EngineId::Patterns,
                checkpoint_id: id,
                envelope: Some(&envelope),
                sequence: out.sequence,
                late: RestoredLate::Records(&[]),
            },
            |engines| {
                // the type mismatch counters are the process's (diagnostics)
                let mut engine = engine;
                engine.keep_type_mismatches(&engines.patterns);
                engines.patterns = engine;
            },
        )?;
        Ok(out)
    }
}
