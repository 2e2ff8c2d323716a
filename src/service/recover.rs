//! Recovery: the engines from the store.
//!
//! Each engine restores its recovery base (its latest checkpoint taken or
//! restore done; a fresh engine when there is none); then the command log is
//! replayed in order, each command into its engine (`Cmd::apply`, the
//! code the live call ran). Every change and record a replayed command
//! produces must be byte-identical to the one stored with it, and nothing
//! may be stored past the replayed heads; otherwise recovery fails with a
//! message naming the command and sequence, and the database is left as it
//! is (never repaired by dropping data).

use std::fmt;
use std::path::Path;
use std::sync::mpsc::sync_channel;

use crate::engine::{Change, Processor};
use crate::patterns;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::engine::checkpoint::LiveParts;
use crate::store::{self, BaseState, EngineId, Reader, Stream, Writer};

use super::cmd::{Engines, Replay, ReplayOutcome};
use super::order::{self, Held};
use super::{Inner, Service, ServiceError, Setup};

/// Commands logged since each engine's recovery base.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct LogCounts {
    pub window: u64,
    pub patterns: u64,
}

impl LogCounts {
    pub fn get(&self, e: EngineId) -> u64 {
        match e {
            EngineId::Window => self.window,
            EngineId::Patterns => self.patterns,
        }
    }

    pub fn get_mut(&mut self, e: EngineId) -> &mut u64 {
        match e {
            EngineId::Window => &mut self.window,
            EngineId::Patterns => &mut self.patterns,
        }
    }
}

/// Why the store cannot be turned back into engines.
#[derive(Debug)]
pub(super) enum RecoverError {
    Store(store::Error),
    Invalid(String),
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::Store(e) => write!(f, "{e}"),
            RecoverError::Invalid(s) => f.write_str(s),
        }
    }
}

impl From<store::Error> for RecoverError {
    fn from(e: store::Error) -> Self {
        RecoverError::Store(e)
    }
}

fn invalid(n: u64, engine: EngineId, kind: &str, what: String) -> RecoverError {
    RecoverError::Invalid(format!(
        "logged command {n} ({} {kind}): {what}",
        engine.name()
    ))
}

/// The limits a replay runs with: none. A logged command was accepted
/// under the limits in force when it ran; limits are policy, not state, and
/// a restart may lower them, so a replay under the new ones could refuse an
/// acknowledged advance. (A limit only ever refuses an advance whole, never
/// changes what one outputs.) A replayed `PUT /patterns` puts its own
/// limits in force, as it did when it ran.
const UNLIMITED: patterns::Limits = patterns::Limits {
    max_results_per_advance: u64::MAX,
    active_states: u64::MAX,
};

/// The engines at their recovery bases: the pattern engine from its
/// checkpoint with the patterns it holds (changes since the start
/// included), or fresh with `setup.patterns`.
fn bases(writer: &Writer, setup: &Setup) -> Result<Engines, RecoverError> {
    let history: Arc<dyn crate::engine::history::HistoryStore> = setup.history.clone();
    let unusable = |r: crate::engine::Rejection| {
        RecoverError::Invalid(format!("the recovery base checkpoint is unusable: {r}"))
    };
    let window = match writer.base(EngineId::Window)?.map(|b| b.state) {
        Some(BaseState::Window(stored)) => {
            let live = LiveParts::decode(&stored.live).map_err(|e| {
                RecoverError::Invalid(format!("the recovery base is unreadable: {e}"))
            })?;
            Processor::resume(&setup.pipeline, &live, stored.flushed, history).map_err(unusable)?
        }
        Some(BaseState::Envelope(envelope)) => {
            Processor::restore_into(&envelope, &setup.pipeline, history).map_err(unusable)?
        }
        None => Processor::with_store(setup.pipeline.clone(), history),
    };
    let patterns = match writer.base(EngineId::Patterns)?.map(|b| b.state) {
        Some(BaseState::Envelope(envelope)) => patterns::Engine::restore_own(&envelope, UNLIMITED)
            .map_err(|r| {
                RecoverError::Invalid(format!(
                    "the pattern engine's recovery base checkpoint is unusable: {r}"
                ))
            })?,
        Some(BaseState::Window(_)) => {
            return Err(RecoverError::Invalid(
                "the pattern engine's recovery base is a window engine checkpoint".into(),
            ))
        }
        None => patterns::Engine::new(setup.patterns.with_limits(UNLIMITED)),
    };
    Ok(Engines { window, patterns })
}

/// The engines the store describes, and the number of replayed commands of
/// each.
///
/// Pipelined on three threads: one reads and parses the command log, the
/// caller runs the engines, one checks every replayed output record against
/// the store (each reader on a connection of its own).
// Over 120 lines: the three pipelined stages of recovery, set up and joined together.
pub(super) fn replay(
    writer: &Writer,
    db: &Path,
    setup: &Setup,
) -> Result<(Engines, LogCounts), RecoverError> {
    // Pattern commands replay without limits (see `UNLIMITED`); the engine
    // takes the limits in force afterwards.
    let mut engines = bases(writer, setup)?;
    type Decoded = (u64, EngineId, &'static str, Replay);
    type Applied = (u64, EngineId, &'static str, ReplayOutcome);
    let mut logged = LogCounts::default();
    let result = std::thread::scope(|s| {
        let (cmd_tx, cmd_rx) = sync_channel::<Decoded>(16);
        let reader = s.spawn(move || -> Result<(), RecoverError> {
            let r = Reader::open(db)?;
            let mut n: u64 = 0;
            r.for_each_command(|engine, kind, body| -> Result<(), RecoverError> {
                n += 1;
                let cmd =
                    Replay::decode(engine, kind, &body).map_err(|e| invalid(n, engine, kind, e))?;
                cmd_tx
                    .send((n, engine, cmd.kind(), cmd))
                    .map_err(|_| RecoverError::Invalid("replay stopped".into()))
            })
        });
        let (out_tx, out_rx) = sync_channel::<Applied>(16);
        let verifier = s.spawn(move || -> Result<(), RecoverError> {
            let r = Reader::open(db)?;
            for (n, engine, kind, applied) in out_rx {
                verify(&r, &applied).map_err(|e| match e {
                    Mismatch::Store(e) => RecoverError::Store(e),
                    Mismatch::Differs(what) => invalid(n, engine, kind, what),
                })?;
            }
            Ok(())
        });
        let mut engine_err = None;
        for (n, engine, kind, cmd) in cmd_rx.iter() {
            match cmd.apply(&mut engines) {
                Ok(applied) => {
                    *logged.get_mut(engine) += 1;
                    if out_tx.send((n, engine, kind, applied)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    engine_err = Some(invalid(n, engine, kind, format!("rejected on replay: {e}")));
                    break;
                }
            }
        }
        drop(out_tx);
        drop(cmd_rx);
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<(), RecoverError>>| {
            h.join()
                .unwrap_or_else(|_| Err(RecoverError::Invalid("a replay thread panicked".into())))
        };
        let verified = joined(verifier);
        let read = joined(reader);
        // The earliest problem first: the checker is behind the engine, the
        // engine behind the reader.
        verified.and(engine_err.map_or(Ok(()), Err)).and(read)
    });
    result?;
    // The document in force: the database's current one (written with
    // every change), whose patterns the replay must have reached.
    let current = match writer.current_patterns()? {
        Some(json) => patterns::Document::from_json(json.as_bytes()).map_err(|e| {
            RecoverError::Invalid(format!("the current pattern document is unreadable: {e}"))
        })?,
        None => setup.patterns.clone(),
    };
    if !current.same_patterns(engines.patterns.document()) {
        return Err(RecoverError::Invalid(format!(
            "the replayed pattern engine runs the patterns [{}], but the database's current \
             document holds [{}]",
            engines.patterns.document().pattern_names().join(", "),
            current.pattern_names().join(", ")
        )));
    }
    let given = *setup.limits.lock().unwrap_or_else(|e| e.into_inner());
    engines
        .patterns
        .set_limits(given.unwrap_or(current.limits()));
    // diagnostics, not state: the replay's comparisons were counted when
    // the calls ran
    engines.patterns.reset_type_mismatches();
    // Replay runs the window engine in one shard: the reader and the
    // verifier already keep both cores busy, and handing each call to shard
    // threads as well made recovery 25-40 % slower (BENCHMARKS.md). The
    // state is the same for every shard count; split it now.
    engines.window = setup.sharded(std::mem::replace(
        &mut engines.window,
        Processor::new(setup.pipeline.clone()),
    ));
    let window = &engines.window;
    let max_change = writer.max_seq(Stream::Changes)?;
    if max_change > window.sequence() {
        return Err(RecoverError::Invalid(format!(
            "the store holds changes up to sequence {max_change}, but replaying the command log \
             reaches only {}",
            window.sequence()
        )));
    }
    let max_late = writer.max_seq(Stream::Late)?;
    if max_late != window.late_len() {
        return Err(RecoverError::Invalid(format!(
            "the store holds {max_late} late records, but the replayed state has {}",
            window.late_len()
        )));
    }
    let max_output = writer.max_seq(Stream::Patterns)?;
    if max_output > engines.patterns.sequence() {
        return Err(RecoverError::Invalid(format!(
            "the store holds pattern output up to sequence {max_output}, but replaying the \
             command log reaches only {}",
            engines.patterns.sequence()
        )));
    }
    Ok((engines, logged))
}

enum Mismatch {
    Store(store::Error),
    Differs(String),
}

impl From<store::Error> for Mismatch {
    fn from(e: store::Error) -> Self {
        Mismatch::Store(e)
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, Mismatch> {
    serde_json::to_string(v)
        .map_err(|e| Mismatch::Differs(format!("a replayed record cannot be encoded: {e}")))
}

/// Every replayed change and record must be byte-identical to the one
/// stored with its command.
fn verify(r: &Reader, applied: &ReplayOutcome) -> Result<(), Mismatch> {
    let out = applied.output();
    verify_changes(r, out.changes)?;
    for l in out.late {
        verify_record(r, Stream::Late, l.seq, &json(l)?)?;
    }
    for o in out.patterns {
        verify_record(r, Stream::Patterns, o.seq, &json(o)?)?;
    }
    Ok(())
}

fn verify_record(r: &Reader, stream: Stream, seq: u64, now: &str) -> Result<(), Mismatch> {
    let stored = r.record_at(stream, seq)?;
    if stored.as_deref() != Some(now) {
        return Err(Mismatch::Differs(format!(
            "{} record {seq} replays as {now} but the store holds {}",
            stream.name(),
            stored.as_deref().unwrap_or("nothing")
        )));
    }
    Ok(())
}

fn verify_changes(r: &Reader, changes: &[Change]) -> Result<(), Mismatch> {
    let (Some(first), Some(last)) = (changes.first(), changes.last()) else {
        return Ok(());
    };
    let now = store::chunk::encode(changes);
    // Fast path: the chunk this command stored, byte for byte.
    let same = r
        .chunk_at(first.seq)?
        .is_some_and(|(l, body)| l == last.seq && body == now);
    if same {
        return Ok(());
    }
    // Compare change by change (chunks of an older layout, or a difference
    // to name).
    let stored = r.changes_between(first.seq, last.seq)?;
    let mut stored = stored.iter();
    for c in changes {
        let now = json(c)?;
        let s = stored.next().filter(|(seq, _)| *seq == c.seq);
        if s.map(|(_, b)| b.as_str()) != Some(now.as_str()) {
            return Err(Mismatch::Differs(format!(
                "change {} replays as {now} but the store holds {}",
                c.seq,
                s.map_or("nothing", |(_, b)| b.as_str())
            )));
        }
    }
    Ok(())
}

/// Recovery while serving: the engines rebuilt from the store after a
/// failed commit or a panic under the engines lock.
impl Service {
    /// Waits (holding the engines lock) until every applied call is
    /// committed, then rebuilds if a commit failed or the state is broken.
    pub(super) fn settle(
        &self,
        inner: &mut Inner,
        at: &mut Held<order::Engines>,
    ) -> Result<(), ServiceError> {
        if self.drain(at) || inner.broken {
            self.rebuild(inner, at)?;
        }
        Ok(())
    }

    /// Replaces the engines with the store's state. Marks the service ready
    /// again on success; leaves it broken (and not ready) otherwise. The
    /// caller holds the engines lock and nothing is being committed.
    pub(super) fn rebuild(
        &self,
        inner: &mut Inner,
        at: &mut Held<order::Engines>,
    ) -> Result<(), ServiceError> {
        let replayed = replay(&self.writer(at), &self.env.db, &self.setup);
        match replayed {
            Ok((mut engines, logged)) => {
                // the type mismatch counters are the process's (diagnostics)
                engines
                    .patterns
                    .keep_type_mismatches(&inner.engines.patterns);
                inner.engines = engines;
                inner.broken = false;
                inner.window_gen += 1;
                let mut q = self.queue(at);
                q.poisoned = false;
                q.logged = logged;
                self.engines_lock.healthy.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "rebuilding the engines from the store failed");
                inner.broken = true;
                self.engines_lock.healthy.store(false, Ordering::Relaxed);
                Err(ServiceError::Unavailable(format!(
                    "storage failure; the state is being rebuilt: {e}"
                )))
            }
        }
    }
}
