//! The pattern engine's verbs on the one write path: pushes (buffering
//! only), advances and finish (processing, atomically, with their output
//! stored in the same group commit as everything else), its status, and
//! its restores.

use crate::patterns::{self, Engine};
use crate::store::RestoredLate;
use crate::store::{EngineId, Restored, StoredBody};

use super::cmd::{Cmd, PatternAdvance, PatternDocument, PatternFinish, PatternPush};
use super::idempotency::{Keyed, KeyedRequest};
use super::order::Held;
use super::parse::{Framing, PatternBatch};
use super::queue::{json_records, Encoded, KeyAnswer};
use super::restore::RestoreSource;
use super::{Metrics, Service, ServiceError};
use crate::store::KeyAt;

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

impl PushAnswer {
    /// The answer's body: `{"first":F,"last":L,"buffered":B}`.
    pub fn json(&self) -> Vec<u8> {
        format!(
            "{{\"first\":{},\"last\":{},\"buffered\":{}}}",
            self.first, self.last, self.buffered
        )
        .into_bytes()
    }
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

impl AdvanceAnswer {
    /// The answer's body: `{"output":[..],"watermark":W,"processed":n}`
    /// around the stored records.
    pub fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.output.len() + 64);
        out.extend_from_slice(b"{\"output\":");
        out.extend_from_slice(&self.output);
        out.extend_from_slice(
            format!(
                ",\"watermark\":{},\"processed\":{}}}",
                self.watermark, self.processed
            )
            .as_bytes(),
        );
        out
    }
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
    /// row), `batch` its parse; with `key`, a retry of an acknowledged call
    /// gets that call's answer back (see `idempotency`).
    pub fn pattern_push(
        &self,
        raw: &[u8],
        framing: Framing,
        batch: PatternBatch,
        key: Option<&KeyedRequest>,
    ) -> Result<Keyed<PushAnswer>, ServiceError> {
        let _claim = match self.claim_key(key)? {
            Ok(claim) => claim,
            Err(stored) => return Ok(Keyed::Replayed(stored)),
        };
        let n = batch.events.len() as u64;
        let cmd = PatternPush {
            framing,
            events: batch.events,
            malformed: batch.malformed,
        };
        let at = &mut Held::entry();
        let (ticket, o) = self.apply(at, cmd, StoredBody::pack(raw))?;
        let answer = PushAnswer {
            first: o.first,
            last: o.last,
            buffered: o.buffered,
        };
        let mut enc = Encoded::of::<PatternPush>(&o);
        if let (Some(request), Ok(e)) = (key, enc.as_mut()) {
            e.key = Some(KeyAnswer {
                request: request.clone(),
                response: answer.json(),
                at: KeyAt::Push {
                    last_ordinal: o.last,
                },
            });
        }
        self.commit(at, ticket, enc, || ())?;
        Metrics::inc(&self.env.metrics.pattern_events, n);
        Ok(Keyed::Applied(answer))
    }

    /// `POST /patterns/advance` (with `key`: as [`Service::pattern_push`]).
    pub fn pattern_advance(
        &self,
        watermark: i64,
        key: Option<&KeyedRequest>,
    ) -> Result<Keyed<AdvanceAnswer>, ServiceError> {
        let _claim = match self.claim_key(key)? {
            Ok(claim) => claim,
            Err(stored) => return Ok(Keyed::Replayed(stored)),
        };
        let cmd = PatternAdvance { watermark };
        let body = StoredBody::raw(cmd.body()?);
        self.pattern_tick(cmd, body, key).map(Keyed::Applied)
    }

    /// `POST /patterns/finish`.
    pub fn pattern_finish(&self) -> Result<AdvanceAnswer, ServiceError> {
        let body = StoredBody::raw(PatternFinish.body()?);
        self.pattern_tick(PatternFinish, body, None)
    }

    fn pattern_tick<C: Cmd<Outcome = patterns::AdvanceOutcome>>(
        &self,
        cmd: C,
        body: StoredBody,
        key: Option<&KeyedRequest>,
    ) -> Result<AdvanceAnswer, ServiceError> {
        let at = &mut Held::entry();
        let (ticket, o) = self.apply(at, cmd, body)?;
        let mut enc = Encoded::of::<C>(&o);
        // An encoding error fails the commit below with that error.
        let output = enc
            .as_ref()
            .map(|e| json_records(e.records()))
            .unwrap_or_default();
        let answer = AdvanceAnswer {
            output,
            watermark: o.watermark,
            processed: o.processed,
        };
        if let (Some(request), Ok(e)) = (key, enc.as_mut()) {
            // stored without its output records: the store reads them back
            // from the pattern output when a retry comes
            let stub = AdvanceAnswer {
                output: b"[]".to_vec(),
                ..answer.clone()
            };
            e.key = Some(KeyAnswer {
                request: request.clone(),
                response: stub.json(),
                at: KeyAt::Advance {
                    watermark: o.watermark,
                    output: o
                        .output
                        .first()
                        .zip(o.output.last())
                        .map(|(f, l)| (f.seq, l.seq)),
                },
            });
        }
        self.commit(at, ticket, enc, || ())?;
        Metrics::inc(&self.env.metrics.pattern_output, o.output.len() as u64);
        self.env.metrics.pattern_output_committed(&o.output);
        Ok(answer)
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

    /// Reads the pattern engine (once every applied call is committed).
    pub(super) fn with_patterns<R>(&self, f: impl FnOnce(&Engine) -> R) -> Result<R, ServiceError> {
        let at = &mut Held::entry();
        let g = self.lock_settled(at)?;
        Ok(f(&g.engines.patterns))
    }

    /// `GET /patterns`: the document in force.
    pub fn pattern_document(&self) -> Result<Vec<u8>, ServiceError> {
        self.with_patterns(|e| e.document().to_json())
    }

    /// `PUT /patterns`: puts `doc` in force, as one logged command in order
    /// with the pushes and advances (see `PatternDocument`); the database's
    /// current document becomes `doc` in the same commit.
    pub fn put_patterns(
        &self,
        doc: crate::patterns::Document,
    ) -> Result<patterns::DocumentChange, ServiceError> {
        let json = doc.to_json();
        let text = String::from_utf8(json.clone())
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the document: {e}")))?;
        let at = &mut Held::entry();
        let (ticket, change) = self.apply(at, PatternDocument { doc }, StoredBody::raw(json))?;
        let mut enc = Encoded::of::<PatternDocument>(&change);
        if let Ok(e) = enc.as_mut() {
            e.document = Some(text);
        }
        self.commit(at, ticket, enc, || ())?;
        // the document's limits are in force now, also after a rebuild
        *self.setup.limits.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(change)
    }

    /// The names of the patterns in force, sorted (a `PUT /patterns`
    /// changes them).
    pub fn pattern_names(&self) -> Result<Vec<String>, ServiceError> {
        self.with_patterns(|e| e.document().pattern_names())
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
        // Validated completely before anything is touched, against the
        // patterns in force (checked again when it is put in place: a
        // change may come in between).
        let doc = self.with_patterns(|e| e.document().clone())?;
        let invalid = |e: String| {
            ServiceError::Rejected(crate::engine::Rejection::InvalidCheckpoint(
                if e.is_empty() {
                    "the checkpoint cannot be restored".into()
                } else {
                    e
                },
            ))
        };
        let engine = Engine::restore(&envelope, &doc).map_err(|e| {
            invalid(if e.contains("different patterns") {
                format!(
                    "{e}; the patterns changed since it was taken (PUT /patterns): put its \
                     document in force first (PUT /patterns with its patterns), then restore"
                )
            } else {
                e
            })
        })?;
        let next_ordinal = engine.status().next_ordinal;
        let out = PatternsRestored {
            sequence: engine.sequence(),
            watermark: engine.watermark(),
        };
        // The checkpoint slot, as a window restore: the store's collection
        // of unnamed segments (inside the restore) must not run while a
        // window checkpoint has written segments it has not linked yet.
        let at = &mut Held::entry();
        let mut slot = self.checkpointing(at);
        self.restore_engine(
            slot.held(),
            &Restored {
                engine: EngineId::Patterns,
                checkpoint_id: id,
                envelope: Some(&envelope),
                sequence: out.sequence,
                late: RestoredLate::Records(&[]),
                keys_through: Some((next_ordinal, out.watermark)),
            },
            |engines| {
                if engines.patterns.document().same_patterns(&doc) {
                    Ok(())
                } else {
                    Err(invalid(
                        "the patterns changed while the checkpoint was being restored (PUT \
                         /patterns); nothing was restored"
                            .into(),
                    ))
                }
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
