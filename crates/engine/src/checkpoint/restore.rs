//! Strict restore: parse, verify, validate every rule, build.
//!
//! Rules (docs/checkpoint.md, "Restore"), each with its own message:
//! - envelope: JSON with exactly `digest`, `format`, `state`, `version`
//!   (version 2) or `format`, `sha256`, `state`, `version` (version 1); the
//!   format name; `version` the integer 2 or 1; the digest (version 2,
//!   `super::chain`) or the checksum (version 1) over the canonical bytes
//!   of the parsed state;
//! - shapes and record types (strict parsing, see `state`);
//! - pipeline: valid, and equivalent to the target's (any declaration order);
//! - partition names: `clock.partitions` and `sources` name exactly the
//!   pipeline's partitions;
//! - offsets 0..c all present (a list cannot have holes) and identities: every
//!   id has one identity across all its deliveries, ids non-empty;
//! - `clock.max_timestamp` is the maximum over delivered unique events;
//! - clock bounds: when the candidate rule yields a value, a global watermark
//!   exists and is >= it; a global watermark exists only if some partition has
//!   reported and never exceeds the largest reported progress;
//! - live index (`windows`): strictly increasing address order (so no
//!   duplicates), known window names, aggregate bounds, alignment for fixed,
//!   sliding and stream-time windows, session width in `gap..=count*gap`, no two
//!   sessions of a window and key that intersect or touch, and no bucket with
//!   `W > end + lateness`;
//! - changelog: strictly increasing order, every visible row an exact live
//!   bucket with `end <= W`, `sequence >=` the number of visible rows;
//! - late: every record is a delivered event with a watermark `<= W`.

use crate::segment_text::to_event;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::sha256_hex;
use super::state::{
    check_envelope, ChangelogDoc, ClockDoc, EnvelopeDoc, PipelineDoc, ResultDoc, StateDoc,
};
use super::LiveParts;
use crate::aggregate::Agg;
use crate::changelog::Changelog;
use crate::event::Event;
use crate::history::HistoryStore;
use crate::late::LateOutput;
use crate::live::{BucketRef, LiveIndex, WinNo};
use crate::num::is_multiple;
use crate::processor::Processor;
use crate::sources::Flushed;
use crate::sources::Sources;
use crate::watermark::WatermarkState;
use crate::{Pipeline, WindowDef};
use streamforge_keys::KeyTable;

/// Restores an envelope; with `target`, its pipeline must be equivalent.
/// The restored history is the processor's tail (in memory) until it is
/// flushed into `store`.
pub fn restore(
    envelope: &[u8],
    target: Option<&Pipeline>,
    store: Arc<dyn HistoryStore>,
) -> Result<Processor, String> {
    let doc: EnvelopeDoc<'_> = serde_json::from_slice(envelope)
        .map_err(|e| format!("malformed checkpoint envelope: {e}"))?;
    let claimed = check_envelope(
        &doc.format,
        doc.version,
        doc.digest.as_deref(),
        doc.sha256.as_deref(),
    )?;
    if let Some(at) = streamforge_canonical::escape::uppercase_escape(envelope) {
        return Err(streamforge_canonical::escape::uppercase_escape_error(at));
    }
    // The pipeline's partition list may be in any order. The digest (or checksum)
    // is accepted over the canonical bytes with that list sorted (as this
    // engine writes it) or in the document's own order.
    let unsorted = doc
        .state
        .pipeline
        .partitions
        .windows(2)
        .any(|w| w[0] > w[1]);
    if doc.version == 2 {
        let (sources, late) = doc.state.chains();
        let of = |sort: bool| super::chain::digest(&doc.state.live_parts(sort), &sources, &late);
        let actual = of(true);
        if actual != claimed && !(unsorted && of(false) == claimed) {
            return Err(format!(
                "digest mismatch: envelope says {claimed:?}, state hashes to {actual}"
            ));
        }
    } else {
        let actual = sha256_hex(&doc.state.canonical());
        if actual != claimed
            && !(unsorted && sha256_hex(&doc.state.canonical_with(false)) == claimed)
        {
            return Err(format!(
                "checksum mismatch: envelope says {claimed:?}, state hashes to {actual}"
            ));
        }
    }
    build(doc.state, target, store)
}

/// The pipeline of a state, checked against `target`.
fn pipeline_of(pl: PipelineDoc, target: Option<&Pipeline>) -> Result<Pipeline, String> {
    let pipeline = Pipeline::new(pl.partitions, pl.windows.0, pl.lateness)
        .map_err(|e| format!("state.pipeline: {}", e.0))?;
    if let Some(target) = target {
        if !pipeline.equivalent(target) {
            return Err(format!(
                "incompatible pipeline: checkpoint has {pipeline}, this service runs {target}"
            ));
        }
    }
    Ok(pipeline)
}

/// The watermark state (`clock` in the checkpoint): exactly the pipeline's
/// partitions, within the clock bounds.
fn clock_of(doc: &ClockDoc, parts: &[String]) -> Result<WatermarkState, String> {
    let mut clock = WatermarkState::new(parts.len());
    let at = partition_indices(
        "clock.partitions",
        parts,
        doc.partitions.0.iter().map(|(k, _)| k),
    )?;
    for ((_, pc), i) in doc.partitions.0.iter().zip(at) {
        clock.progress[i] = pc.progress;
        clock.idle[i] = pc.idle;
    }
    clock.global = doc.watermark;
    clock.max_timestamp = doc.max_timestamp;
    check_clock(&clock)?;
    Ok(clock)
}

/// Checks a clock document against a pipeline's partitions and the clock
/// bounds (what a restore checks before the history).
pub fn check_clock_doc(doc: &ClockDoc, pipeline: &Pipeline) -> Result<(), String> {
    clock_of(doc, pipeline.partitions()).map(drop)
}

/// Resumes a stored checkpoint of this service: its live parts (checked
/// as a restore checks them) and its flushed history (trusted: the store
/// wrote it, and it is not read).
pub fn resume(
    target: &Pipeline,
    live: &LiveParts,
    flushed: Flushed,
    store: Arc<dyn HistoryStore>,
) -> Result<Processor, String> {
    let pl: PipelineDoc =
        serde_json::from_slice(&live.pipeline).map_err(|e| format!("stored pipeline: {e}"))?;
    let mut p = Processor::with_store(pipeline_of(pl, Some(target))?, store.clone());
    let parts = p.pipeline.partitions().to_vec();
    if live.partitions != parts || flushed.sources.len() != parts.len() {
        return Err("the stored state names other partitions than its pipeline".into());
    }
    let clock_doc: ClockDoc =
        serde_json::from_slice(&live.clock).map_err(|e| format!("stored clock: {e}"))?;
    let clock = clock_of(&clock_doc, &parts)?;
    let rows: Vec<ResultDoc<'_>> =
        serde_json::from_slice(&live.windows).map_err(|e| format!("stored windows: {e}"))?;
    let cl: ChangelogDoc<'_> =
        serde_json::from_slice(&live.changelog).map_err(|e| format!("stored changelog: {e}"))?;
    let mut keys = KeyTable::default();
    let windows = Windows::of(&p.pipeline);
    let index = live_from_doc(&rows, &p.pipeline, &windows, &mut keys, clock.global)?;
    let changelog = changelog_from_doc(
        cl.sequence,
        &cl.visible,
        &windows,
        &mut keys,
        &index,
        clock.global,
    )?;
    let late_chain = crate::history::resume_chain(&*store, &flushed.late)
        .map_err(|e| format!("the late output: {e}"))?;
    p.sources = Sources::from_segments(store, flushed.sources)?;
    p.late = LateOutput::from_segments(flushed.late, late_chain)?;
    p.keys = keys;
    p.clock = clock;
    p.live = crate::shards::ShardedLive::from_index(index, &p.keys);
    p.changelog = changelog;
    Ok(p)
}

fn build(
    state: StateDoc<'_>,
    target: Option<&Pipeline>,
    store: Arc<dyn HistoryStore>,
) -> Result<Processor, String> {
    let mut r = Restorer::new(state.pipeline, target, store)?;
    // The clock is checked first, as it always was.
    clock_of(&state.clock, &r.parts)?;
    let sources = state.sources;
    let names: Vec<String> = sources.0.iter().map(|(k, _)| k.clone()).collect();
    let at = r.partitions(&names)?;
    for ((name, events), i) in sources.0.into_iter().zip(at) {
        for e in events {
            r.push(i, &name, to_event(e))?;
        }
    }
    let mut late = state.late.into_iter().map(|(e, w)| Ok((to_event(e), w)));
    r.finish(
        &state.clock,
        state.changelog.sequence,
        &state.changelog.visible,
        &state.windows,
        LateOutput::default(),
        &mut late,
        true,
    )
}

/// A restore whose history is pushed delivery by delivery (an envelope
/// read as it streams, `super::stream`), and which the caller may flush
/// into the store as it grows ([`Restorer::processor`]); [`Restorer::finish`]
/// then checks the rest and returns the processor.
pub struct Restorer {
    p: Processor,
    parts: Vec<String>,
    max_ts: Option<i64>,
    counts: Vec<u64>,
}

impl Restorer {
    /// A restore of a state with this pipeline (checked against `target`).
    pub fn new(
        pipeline: PipelineDoc,
        target: Option<&Pipeline>,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Restorer, String> {
        let p = Processor::with_store(pipeline_of(pipeline, target)?, store);
        let parts = p.pipeline.partitions().to_vec();
        Ok(Restorer {
            counts: vec![0; parts.len()],
            parts,
            p,
            max_ts: None,
        })
    }

    /// The partition of each name `sources` gives (in its order), which
    /// must be exactly the pipeline's partitions.
    pub fn partitions(&self, names: &[String]) -> Result<Vec<usize>, String> {
        partition_indices("sources", &self.parts, names.iter())
    }

    /// The next delivery of partition `p` (named `name`).
    pub fn push(&mut self, p: usize, name: &str, event: Event) -> Result<(), String> {
        let offset = self.counts.get(p).copied().unwrap_or(0);
        let ts = event.timestamp;
        let unique = self
            .p
            .sources
            .restore_push(p, event, &mut self.p.keys)
            .map_err(|m| format!("sources[{name:?}][{offset}]: {m}"))?;
        if unique {
            self.max_ts = Some(self.max_ts.map_or(ts, |m| m.max(ts)));
        }
        if let Some(c) = self.counts.get_mut(p) {
            *c += 1;
        }
        Ok(())
    }

    /// The processor being restored (for the caller to flush its tail).
    pub fn processor(&mut self) -> &mut Processor {
        &mut self.p
    }

    /// Checks the rest against the pushed history and returns the
    /// processor: the clock, `clock.max_timestamp`, the live index and the
    /// visible rows, and the late records (`late_records`, in order; their
    /// flushed segments are `late`; `keep_late`: keep them in memory).
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        mut self,
        clock: &ClockDoc,
        sequence: u64,
        visible: &[ResultDoc<'_>],
        windows_doc: &[ResultDoc<'_>],
        late: LateOutput,
        late_records: &mut dyn Iterator<Item = Result<(Event, i64), String>>,
        keep_late: bool,
    ) -> Result<Processor, String> {
        let clock = clock_of(clock, &self.parts)?;
        if self.max_ts != clock.max_timestamp {
            return Err(format!(
                "clock.max_timestamp is {:?} but the largest delivered unique timestamp is {:?}",
                clock.max_timestamp, self.max_ts
            ));
        }
        let p = &mut self.p;
        let windows = Windows::of(&p.pipeline);
        let live = live_from_doc(
            windows_doc,
            &p.pipeline,
            &windows,
            &mut p.keys,
            clock.global,
        )?;
        let changelog = changelog_from_doc(
            sequence,
            visible,
            &windows,
            &mut p.keys,
            &live,
            clock.global,
        )?;
        let mut late = late;
        for (i, rec) in late_records.enumerate() {
            let (ev, w) = rec?;
            let known = p
                .sources
                .identity(&ev.id, &p.keys)
                .map_err(|e| format!("cannot read the restored history: {e}"))?;
            if known != Some((ev.key.clone(), ev.timestamp, ev.value)) {
                return Err(format!(
                    "late[{i}]: event {:?} is not a delivered event",
                    ev.id
                ));
            }
            match clock.global {
                Some(g) if w <= g => {}
                Some(g) => {
                    return Err(format!(
                        "late[{i}]: watermark {w} exceeds the global watermark {g}"
                    ))
                }
                None => {
                    return Err(format!(
                        "late[{i}]: a late record needs a global watermark, and there is none"
                    ))
                }
            }
            if keep_late {
                late.push(ev, w);
            }
        }
        p.clock = clock;
        p.live = crate::shards::ShardedLive::from_index(live, &p.keys);
        p.changelog = changelog;
        p.late = late;
        Ok(self.p)
    }
}

/// Checks that `names` (the keys of a map of the document, in its order)
/// are exactly the pipeline's partitions `parts` (sorted), and returns the
/// index in `parts` of each, in the document's order.
fn partition_indices<'a>(
    what: &str,
    parts: &[String],
    names: impl Iterator<Item = &'a String>,
) -> Result<Vec<usize>, String> {
    let mut got: Vec<(&String, usize)> = names.enumerate().map(|(at, n)| (n, at)).collect();
    got.sort();
    if got.len() != parts.len() || got.iter().zip(parts).any(|((a, _), b)| *a != b) {
        let got: Vec<&String> = got.into_iter().map(|(n, _)| n).collect();
        return Err(format!(
            "{what} must name exactly the pipeline's partitions {parts:?}, got {got:?}"
        ));
    }
    // `got[i]` is `parts[i]`: back to the document's order.
    let mut back: Vec<(usize, usize)> = got
        .into_iter()
        .enumerate()
        .map(|(i, (_, at))| (at, i))
        .collect();
    back.sort_unstable();
    Ok(back.into_iter().map(|(_, i)| i).collect())
}

/// The clock bounds of docs/checkpoint.md.
fn check_clock(clock: &WatermarkState) -> Result<(), String> {
    if let Some(c) = clock.candidate() {
        match clock.global {
            Some(w) if w >= c => {}
            Some(w) => {
                return Err(format!(
                    "clock.watermark {w} is below the minimum progress {c} of the active partitions"
                ))
            }
            None => {
                return Err(format!(
                    "clock.watermark is null but every active partition has reported (minimum progress {c})"
                ))
            }
        }
    }
    if let Some(w) = clock.global {
        match clock.progress.iter().flatten().max() {
            None => {
                return Err("clock.watermark is set but no partition has reported progress".into())
            }
            Some(&max) if w > max => {
                return Err(format!(
                    "clock.watermark {w} exceeds the largest reported progress {max}"
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn doc_cmp(a: &ResultDoc<'_>, b: &ResultDoc<'_>) -> Ordering {
    (a.window.as_bytes(), a.key.as_bytes(), a.start, a.end).cmp(&(
        b.window.as_bytes(),
        b.key.as_bytes(),
        b.start,
        b.end,
    ))
}

/// The pipeline's windows by name: each with its number (name order) and
/// definition.
pub struct Windows<'p>(BTreeMap<&'p str, (WinNo, WindowDef)>);

impl<'p> Windows<'p> {
    /// The windows of `pipeline`.
    pub fn of(pipeline: &'p Pipeline) -> Windows<'p> {
        Windows(
            pipeline
                .windows()
                .iter()
                .enumerate()
                .map(|(no, (name, def))| (name.as_str(), (no, *def)))
                .collect(),
        )
    }
}

/// A row's bucket and aggregate, with its window's definition.
fn bucket_of(
    r: &ResultDoc<'_>,
    windows: &Windows<'_>,
    keys: &mut KeyTable,
    what: &str,
) -> Result<(BucketRef, Agg, WindowDef), String> {
    let &(window, def) = windows
        .0
        .get(&*r.window)
        .ok_or_else(|| format!("{what}: unknown window {:?}", r.window))?;
    // Bounds derived from i64 inputs stay within about ±2^65; anything far
    // outside cannot be a window and would make later arithmetic overflow.
    const LIMIT: i128 = 1 << 100;
    if !(-LIMIT..=LIMIT).contains(&r.start) || !(-LIMIT..=LIMIT).contains(&r.end) {
        return Err(format!(
            "{what}: window alignment: bounds [{}, {}) are out of range",
            r.start, r.end
        ));
    }
    let agg = Agg::new(r.count, r.sum, r.min, r.max);
    let b = BucketRef {
        window,
        key: keys.intern(&r.key),
        start: r.start,
        end: r.end,
    };
    Ok((b, agg, def))
}

fn check_order(rows: &[ResultDoc<'_>], what: &str) -> Result<(), String> {
    for (i, pair) in rows.windows(2).enumerate() {
        if doc_cmp(&pair[0], &pair[1]) != Ordering::Less {
            return Err(format!(
                "{what}[{}] is not after {what}[{i}]: rows must be in strictly increasing address order (no duplicates)",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Restores the live window index from the `windows` part of a checkpoint.
pub fn live_from_doc(
    rows: &[ResultDoc<'_>],
    pipeline: &Pipeline,
    windows: &Windows<'_>,
    keys: &mut KeyTable,
    watermark: Option<i64>,
) -> Result<LiveIndex, String> {
    check_order(rows, "windows")?;
    let mut live = LiveIndex::new(pipeline.windows().values());
    let lateness = pipeline.lateness() as i128;
    for (i, r) in rows.iter().enumerate() {
        let what = format!("windows[{i}]");
        let (b, agg, def) = bucket_of(r, windows, keys, &what)?;
        agg.check_bounds()
            .map_err(|m| format!("{what}: aggregate bounds: {m}"))?;
        let width = r.end - r.start;
        match def {
            WindowDef::Fixed { size } | WindowDef::StreamTime { size } => {
                if !is_multiple(r.start, size as i128) || width != size as i128 {
                    return Err(format!(
                        "{what}: window alignment: [{}, {}) is not a window of size {size}",
                        r.start, r.end
                    ));
                }
            }
            WindowDef::Sliding { size, step } => {
                if !is_multiple(r.start, step as i128) || width != size as i128 {
                    return Err(format!(
                        "{what}: window alignment: [{}, {}) is not a window of size {size} starting at a multiple of {step}",
                        r.start, r.end
                    ));
                }
            }
            WindowDef::Session { gap } => {
                let gap = gap as i128;
                if width < gap || width > (r.count as i128).saturating_mul(gap) {
                    return Err(format!(
                        "{what}: session bounds: width {width} must be between gap {gap} and count*gap"
                    ));
                }
            }
        }
        if let Some(w) = watermark {
            if (w as i128) > r.end + lateness {
                return Err(format!(
                    "{what}: bucket [{}, {}) should have been finalized (watermark {w} > end + lateness)",
                    r.start, r.end
                ));
            }
        }
        live.insert_restored(b, agg)
            .map_err(|m| format!("{what}: session bounds: {m}"))?;
    }
    Ok(live)
}

/// Restores the changelog from its part of a checkpoint, against the live index.
pub fn changelog_from_doc(
    sequence: u64,
    rows: &[ResultDoc<'_>],
    windows: &Windows<'_>,
    keys: &mut KeyTable,
    live: &LiveIndex,
    watermark: Option<i64>,
) -> Result<Changelog, String> {
    check_order(rows, "changelog.visible")?;
    let mut visible = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let (b, agg, _) = bucket_of(r, windows, keys, &format!("changelog.visible[{i}]"))?;
        visible.push((b, agg));
    }
    Changelog::restore(sequence, &visible, live, watermark).map_err(|m| format!("changelog: {m}"))
}
