//! Recovery: the processor from the store.
//!
//! Restore the recovery base (the latest checkpoint taken or restore done;
//! a fresh processor when there is none), then replay the command log in
//! order. Every change and late record a replayed command produces must be
//! byte-identical to the one stored with it, and nothing may be stored past
//! the replayed heads; otherwise recovery fails with a message naming the
//! command and sequence, and the database is left as it is (never repaired by
//! dropping data).

use std::fmt;
use std::path::Path;
use std::sync::mpsc::sync_channel;

use crate::engine::{Change, Delivery, Event, LateRecord, Pipeline, Processor};
use crate::store::{self, Reader, Writer};

use super::apply::AdvanceRow;
use super::parse::{self, Framing};

/// Why the store cannot be turned back into a processor.
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

/// A decoded command of the log (owned: it crosses threads).
enum Step {
    Ingest(Vec<Delivery>),
    Advance(String, i64),
    Idle(String),
}

fn decode(kind: &str, body: &[u8]) -> Result<Step, String> {
    let framing = match kind {
        "events" => Framing::Json,
        "ndjson" => Framing::Ndjson,
        "advance" => {
            let row = serde_json::from_slice::<AdvanceRow>(body)
                .map_err(|e| format!("unreadable body: {e}"))?;
            return Ok(Step::Advance(row.partition, row.watermark));
        }
        "idle" => {
            let part: String =
                serde_json::from_slice(body).map_err(|e| format!("unreadable body: {e}"))?;
            return Ok(Step::Idle(part));
        }
        other => return Err(format!("unknown command kind {other:?}")),
    };
    let parsed = parse::deliveries(body, framing).map_err(|e| format!("unreadable body: {e}"))?;
    Ok(Step::Ingest(
        parsed
            .items
            .into_iter()
            .map(|d| Delivery {
                partition: d.partition.into_owned(),
                offset: d.offset,
                event: Event {
                    id: d.event.id.into_owned(),
                    key: d.event.key.into_owned(),
                    timestamp: d.event.timestamp,
                    value: d.event.value,
                },
            })
            .collect(),
    ))
}

fn invalid(n: u64, kind: &str, what: String) -> RecoverError {
    RecoverError::Invalid(format!("logged command {n} ({kind}): {what}"))
}

/// The processor the store describes, and the number of replayed commands.
///
/// Pipelined on three threads: one reads and parses the command log, the
/// caller runs the engine, one checks every replayed change and late record
/// against the store (each reader on a connection of its own).
pub(super) fn replay(
    writer: &Writer,
    db: &Path,
    pipeline: &Pipeline,
) -> Result<(Processor, u64), RecoverError> {
    let mut p = match writer.base()? {
        Some(base) => Processor::restore(&base.envelope, pipeline).map_err(|r| {
            RecoverError::Invalid(format!("the recovery base checkpoint is unusable: {r}"))
        })?,
        None => Processor::new(pipeline.clone()),
    };
    type Decoded = (u64, String, Step);
    type Output = (u64, String, Vec<Change>, Vec<LateRecord>);
    let (n, result) = std::thread::scope(|s| {
        let (cmd_tx, cmd_rx) = sync_channel::<Decoded>(16);
        let reader = s.spawn(move || -> Result<(), RecoverError> {
            let r = Reader::open(db)?;
            let mut n: u64 = 0;
            r.for_each_command(|kind, body| -> Result<(), RecoverError> {
                n += 1;
                let step = decode(kind, body).map_err(|e| invalid(n, kind, e))?;
                cmd_tx
                    .send((n, kind.to_string(), step))
                    .map_err(|_| RecoverError::Invalid("replay stopped".into()))
            })
        });
        let (out_tx, out_rx) = sync_channel::<Output>(16);
        let verifier = s.spawn(move || -> Result<(), RecoverError> {
            let r = Reader::open(db)?;
            for (n, kind, changes, late) in out_rx {
                verify(&r, &changes, &late).map_err(|e| match e {
                    Mismatch::Store(e) => RecoverError::Store(e),
                    Mismatch::Differs(what) => invalid(n, &kind, what),
                })?;
            }
            Ok(())
        });
        let mut count = 0;
        let mut engine_err = None;
        for (n, kind, step) in cmd_rx.iter() {
            count = n;
            let applied = match step {
                Step::Ingest(d) => p
                    .ingest(d)
                    .map(|o| (o.changes, o.late))
                    .map_err(|e| e.to_string()),
                Step::Advance(part, w) => p
                    .advance(&part, w)
                    .map(|o| (o.changes, Vec::new()))
                    .map_err(|e| e.to_string()),
                Step::Idle(part) => p
                    .mark_idle(&part)
                    .map(|o| (o.changes, Vec::new()))
                    .map_err(|e| e.to_string()),
            };
            match applied {
                Ok((changes, late)) => {
                    if out_tx.send((n, kind, changes, late)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    engine_err = Some(invalid(n, &kind, format!("rejected on replay: {e}")));
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
        let result = verified.and(engine_err.map_or(Ok(()), Err)).and(read);
        (count, result)
    });
    result?;
    let (max_change, max_late) = writer.max_seqs()?;
    if max_change > p.sequence() {
        return Err(RecoverError::Invalid(format!(
            "the store holds changes up to sequence {max_change}, but replaying the command log \
             reaches only {}",
            p.sequence()
        )));
    }
    if max_late != p.late_len() {
        return Err(RecoverError::Invalid(format!(
            "the store holds {max_late} late records, but the replayed state has {}",
            p.late_len()
        )));
    }
    Ok((p, n))
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

/// Every replayed change and late record must be byte-identical to the one
/// stored with its command.
fn verify(r: &Reader, changes: &[Change], late: &[LateRecord]) -> Result<(), Mismatch> {
    if let (Some(first), Some(last)) = (changes.first(), changes.last()) {
        let now = store::chunk::encode(changes);
        // Fast path: the chunk this command stored, byte for byte.
        let same = r
            .chunk_at(first.seq)?
            .is_some_and(|(l, body)| l == last.seq && body == now);
        if !same {
            // Compare change by change (chunks of an older layout, or a
            // difference to name).
            let stored = r.changes_between(first.seq, last.seq)?;
            let mut stored = stored.iter();
            for c in changes {
                let now = serde_json::to_string(c).unwrap_or_default();
                let s = stored.next().filter(|(seq, _)| *seq == c.seq);
                if s.map(|(_, b)| b.as_str()) != Some(now.as_str()) {
                    return Err(Mismatch::Differs(format!(
                        "change {} replays as {now} but the store holds {}",
                        c.seq,
                        s.map_or("nothing", |(_, b)| b.as_str())
                    )));
                }
            }
        }
    }
    for l in late {
        let now = serde_json::to_string(l).unwrap_or_default();
        let stored = r.late_at(l.seq)?;
        if stored.as_deref() != Some(now.as_str()) {
            return Err(Mismatch::Differs(format!(
                "late record {} replays as {now} but the store holds {}",
                l.seq,
                stored.as_deref().unwrap_or("nothing")
            )));
        }
    }
    Ok(())
}
