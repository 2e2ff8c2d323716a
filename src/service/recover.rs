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

use crate::engine::{Pipeline, Processor};
use crate::store::{self, Writer};

use super::apply::{json_array, run_engine, AdvanceRow, Command};
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

/// The processor the store describes, and the number of replayed commands.
pub(super) fn replay(
    writer: &Writer,
    pipeline: &Pipeline,
) -> Result<(Processor, u64), RecoverError> {
    let mut p = match writer.base()? {
        Some(base) => Processor::restore(&base.envelope, pipeline).map_err(|r| {
            RecoverError::Invalid(format!("the recovery base checkpoint is unusable: {r}"))
        })?,
        None => Processor::new(pipeline.clone()),
    };
    let mut n: u64 = 0;
    writer.for_each_command(|kind, body| -> Result<(), RecoverError> {
        n += 1;
        let bad =
            |what: String| RecoverError::Invalid(format!("logged command {n} ({kind}): {what}"));
        let framing = match kind {
            "events" => Some(Framing::Json),
            "ndjson" => Some(Framing::Ndjson),
            _ => None,
        };
        if let Some(framing) = framing {
            let parsed = parse::deliveries(body, framing)
                .map_err(|e| bad(format!("unreadable body: {e}")))?;
            return check(&mut p, Command::Ingest(parsed.items), writer, &bad);
        }
        match kind {
            "advance" => {
                let row = serde_json::from_slice::<AdvanceRow>(body)
                    .map_err(|e| bad(format!("unreadable body: {e}")))?;
                check(
                    &mut p,
                    Command::Advance(&row.partition, row.watermark),
                    writer,
                    &bad,
                )
            }
            "idle" => {
                let part: String = serde_json::from_slice(body)
                    .map_err(|e| bad(format!("unreadable body: {e}")))?;
                check(&mut p, Command::Idle(&part), writer, &bad)
            }
            other => Err(bad(format!("unknown command kind {other:?}"))),
        }
    })?;
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

fn check(
    p: &mut Processor,
    cmd: Command<'_>,
    writer: &Writer,
    bad: &dyn Fn(String) -> RecoverError,
) -> Result<(), RecoverError> {
    let applied = run_engine(p, cmd).map_err(|e| bad(format!("rejected on replay: {e}")))?;
    let (changes, late) = applied.output();
    if let (Some(first), Some(last)) = (changes.first(), changes.last()) {
        let now = json_array(changes);
        // Fast path: the chunk this command stored, byte for byte.
        let same = writer
            .chunk_at(first.seq)?
            .is_some_and(|(l, body)| l == last.seq && body.as_bytes() == now.as_slice());
        if !same {
            // Compare change by change (chunks of an older layout, or a
            // difference to name).
            let stored = writer.changes_between(first.seq, last.seq)?;
            let mut stored = stored.iter();
            for c in changes {
                let now = serde_json::to_string(c).unwrap_or_default();
                let s = stored.next().filter(|(seq, _)| *seq == c.seq);
                if s.map(|(_, b)| b.as_str()) != Some(now.as_str()) {
                    return Err(bad(format!(
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
        let stored = writer.late_at(l.seq)?;
        if stored.as_deref() != Some(now.as_str()) {
            return Err(bad(format!(
                "late record {} replays as {now} but the store holds {}",
                l.seq,
                stored.as_deref().unwrap_or("nothing")
            )));
        }
    }
    Ok(())
}
