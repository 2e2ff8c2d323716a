//! Forming a sink's next batches from its stored stream (docs/sinks.md,
//! "Batches"): the records after its cursor up to the heads of the last
//! commit, filtered and cut into batches, with the resets a restore calls
//! for and, for the changes stream, the watermark each batch carries.

use crate::service::ServiceError;
use crate::store::{BatchRow, Stream};

use super::port::SinkStore;
use super::spec::Spec;

/// What a formation round starts from.
#[derive(Debug, Clone)]
pub(super) struct FormIn {
    pub(super) sink: i64,
    pub(super) stream: Stream,
    pub(super) spec: Spec,
    pub(super) cursor: u64,
    pub(super) epoch: u64,
    pub(super) batches: u64,
    pub(super) watermark: Option<i64>,
}

/// What it formed: batches with their records, and the sink's new state.
#[derive(Debug, Default)]
pub(super) struct FormOut {
    pub(super) batches: Vec<(BatchRow, Vec<String>)>,
    pub(super) moved: Option<(u64, u64)>,
    pub(super) total: u64,
    pub(super) watermark: Option<i64>,
}

/// Rows scanned per round.
fn scan_limit(spec: &Spec) -> u32 {
    if spec.filter.is_some() {
        10_000
    } else {
        (spec.batch_size.saturating_mul(8)).clamp(1, 10_000) as u32
    }
}

/// Forms the next batches of a sink (docs/sinks.md, "Batches"), from the
/// stored stream up to the heads of the last commit.
pub(super) fn form(svc: &dyn SinkStore, inp: &FormIn) -> Result<FormOut, ServiceError> {
    let h = svc.heads();
    let (head, head_epoch) = match inp.stream {
        Stream::Changes => (h.changes, h.epoch),
        Stream::Late => (h.late, h.epoch),
        Stream::Patterns => (h.patterns, h.patterns_epoch),
    };
    let stream = inp.stream;
    let filter = inp.spec.filter.as_ref();
    let mut out = FormOut {
        total: inp.batches,
        watermark: inp.watermark,
        ..FormOut::default()
    };
    let mut scan = Scan {
        pos: inp.cursor,
        epoch: inp.epoch,
        reset: None,
        exact: vec![(head_epoch, head, h.watermark)],
    };
    let rows = read_rows(svc, inp, head, head_epoch, &mut scan)?;
    let Scan {
        pos,
        epoch,
        mut reset,
        exact,
    } = scan;
    let start_pos = pos;
    let scanned_to = rows.last().map(|(s, _)| *s);
    let mut first = pos + 1;
    let mut recs: Vec<String> = Vec::new();
    let emit = |out: &mut FormOut,
                reset: &mut Option<(u64, Option<String>)>,
                first: u64,
                last: u64,
                recs: Vec<String>| {
        out.total += 1;
        let (reset_after, snapshot) = match reset.take() {
            Some((a, s)) => (Some(a), s),
            None => (None, None),
        };
        out.batches.push((
            BatchRow {
                batch: out.total,
                epoch,
                first,
                last,
                reset_after,
                snapshot,
                watermark: None,
                frozen: None,
            },
            recs,
        ));
    };
    for (seq, json) in rows {
        if filter.is_none_or(|f| f.keeps(stream, &json)) {
            recs.push(json);
        }
        if recs.len() as u64 >= inp.spec.batch_size {
            emit(&mut out, &mut reset, first, seq, std::mem::take(&mut recs));
            first = seq + 1;
        }
    }
    // The end of what was gone through; a tail the filter dropped whole
    // belongs to the last batch, or moves the cursor.
    let mut end = start_pos;
    if let Some(s) = scanned_to {
        end = s;
        if s >= first {
            if !recs.is_empty() {
                emit(&mut out, &mut reset, first, s, std::mem::take(&mut recs));
            } else if reset.is_none() {
                if let Some((b, _)) = out.batches.last_mut() {
                    b.last = s;
                }
            }
        }
    }
    if let Some((after, _)) = &reset {
        // A reset with nothing after it (yet).
        let after = *after;
        emit(&mut out, &mut reset, after + 1, end.max(after), Vec::new());
    }
    if stream == Stream::Changes {
        changes_watermarks(
            &mut out,
            &exact,
            h.watermark,
            epoch == head_epoch && end == head,
            epoch,
            start_pos,
            end,
        );
    }
    if out.batches.is_empty() && (end, epoch) != (inp.cursor, inp.epoch) {
        out.moved = Some((end, epoch));
    }
    Ok(out)
}

/// Where a formation round is: the position and epoch reached, a reset to
/// put first, and the positions whose watermark is known exactly.
struct Scan {
    pos: u64,
    epoch: u64,
    /// A reset to put first: the sequence cut back to, and (changes) the
    /// visible rows there.
    reset: Option<(u64, Option<String>)>,
    /// Positions whose watermark is known exactly (changes).
    exact: Vec<(u64, u64, Option<i64>)>,
}

/// The stored records after the position, up to `head` (a page at most;
/// none when a restore happened since the heads were read). The changes
/// receiver resyncs from the visible rows (a reset) when its epoch is not
/// the heads' or its records are gone or missing; another stream goes on
/// from where a restore rewound it.
fn read_rows(
    svc: &dyn SinkStore,
    inp: &FormIn,
    head: u64,
    head_epoch: u64,
    scan: &mut Scan,
) -> Result<Vec<(u64, String)>, ServiceError> {
    let stream = inp.stream;
    let filter = inp.spec.filter.as_ref();
    let limit = scan_limit(&inp.spec);
    let mut snapshots = 0;
    // The changes receiver resyncs from the visible rows: a reset to the
    // state `GET /results` shows, at its sequence and epoch.
    let snapshot = |scan: &mut Scan| -> Result<(), ServiceError> {
        let f = filter.cloned().unwrap_or_default();
        let r = svc.results(f.window.as_deref(), f.key.as_deref())?;
        let rows = serde_json::to_string(&r.rows)
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the rows: {e}")))?;
        scan.reset = Some((r.sequence, Some(rows)));
        scan.pos = r.sequence;
        scan.epoch = r.epoch;
        scan.exact.push((r.epoch, r.sequence, r.watermark));
        Ok(())
    };
    let mut first_page = None;
    if scan.epoch != head_epoch {
        if stream == Stream::Changes {
            snapshot(scan)?;
            snapshots += 1;
        } else {
            let p = svc.page(stream, scan.pos, limit, Some(scan.epoch.min(head_epoch)))?;
            if let Some(r) = p.rewound_to {
                scan.reset = Some((r, None));
            }
            scan.pos = p.after;
            scan.epoch = p.epoch;
            first_page = Some(p);
        }
    }
    let rows = loop {
        let page = match first_page.take() {
            Some(p) => Ok(p),
            None => svc.page(stream, scan.pos, limit, Some(scan.epoch)),
        };
        match page {
            Err(ServiceError::Gone { .. }) if stream == Stream::Changes && snapshots == 0 => {
                snapshot(scan)?;
                snapshots += 1;
            }
            Err(ServiceError::Gone { earliest, .. })
                if stream == Stream::Late && scan.pos < earliest =>
            {
                // Pruned before the sink was created at `start`: it
                // begins with the earliest record still held.
                scan.pos = earliest - 1;
            }
            Err(e) => return Err(e),
            Ok(p) => {
                if p.rewound_to.is_some() || p.epoch != scan.epoch {
                    // A restore since the heads were read: the next round.
                    break Vec::new();
                }
                if stream == Stream::Changes && snapshots == 0 {
                    // Sequences missing after the position (a restore of a
                    // checkpoint this database's history never reached):
                    // the receiver resyncs from the visible rows.
                    let gap = match p.rows.first() {
                        Some((s, _)) => *s > scan.pos + 1,
                        None => p.head > scan.pos,
                    };
                    if gap {
                        snapshot(scan)?;
                        snapshots += 1;
                        continue;
                    }
                }
                if scan.epoch != head_epoch {
                    break Vec::new();
                }
                break p.rows.into_iter().take_while(|(s, _)| *s <= head).collect();
            }
        }
    };
    Ok(rows)
}

/// The changes stream's batches carry the watermark in force at their last
/// record (known exactly where `exact` says, else the one before). Caught
/// up (at the heads) with the watermark moved since the last batch: a
/// batch that carries it (and any tail the filter dropped).
fn changes_watermarks(
    out: &mut FormOut,
    exact: &[(u64, u64, Option<i64>)],
    heads_watermark: Option<i64>,
    caught_up: bool,
    epoch: u64,
    start_pos: u64,
    end: u64,
) {
    let mut w = out.watermark;
    for (b, _) in &mut out.batches {
        if let Some((_, _, exact_w)) = exact.iter().find(|(e, p, _)| *e == b.epoch && *p == b.last)
        {
            w = *exact_w;
        }
        b.watermark = w;
    }
    out.watermark = w;
    // Caught up and the watermark moved since the last batch: a batch
    // that carries it (and any tail the filter dropped).
    if out.batches.is_empty() && caught_up && heads_watermark != out.watermark {
        out.total += 1;
        out.batches.push((
            BatchRow {
                batch: out.total,
                epoch,
                first: start_pos + 1,
                last: end,
                reset_after: None,
                snapshot: None,
                watermark: heads_watermark,
                frozen: None,
            },
            Vec::new(),
        ));
        out.watermark = heads_watermark;
    }
}
