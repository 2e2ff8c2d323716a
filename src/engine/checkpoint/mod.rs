//! Checkpoints: the canonical version-1 envelope and strict restore.
//!
//! docs/checkpoint.md: a checkpoint is the canonical JSON of
//! `{"format": "streamforge-checkpoint", "version": 1, "sha256": H, "state": S}`
//! with `H` the lowercase hex SHA-256 of the canonical bytes of `S`. It is
//! deterministic (sorted keys and names, address order; no hash-map order
//! leaks), independent of later mutation (it is a byte string), and restore
//! verifies the checksum against the canonical bytes of the *parsed* state,
//! so insignificant whitespace does not matter. Restore then validates every
//! rule docs/checkpoint.md lists (see [`restore`]) and names what is wrong.

mod restore;
mod state;

use std::borrow::Cow;

use super::aggregate::Agg;
use super::changelog::address_cmp;
use super::live::BucketRef;
use super::processor::Processor;
use crate::canonical::writer as canonical;
use crate::canonical::UniqueMap;
use state::{
    write_event, write_result, ClockDoc, EventDoc, PartitionClockDoc, PipelineDoc, StateWriter,
};

use crate::canonical::sha256_hex;
pub use restore::restore;

/// Writes rows (address order) of `p`, each with its aggregate.
fn write_live_rows(p: &Processor, rows: &[(BucketRef, &Agg)], buf: &mut Vec<u8>) {
    buf.push(b'[');
    for (i, (b, agg)) in rows.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_result(
            buf,
            &p.names[b.window],
            p.keys.name(b.key),
            b.start,
            b.end,
            agg.count,
            agg.sum,
            agg.min,
            agg.max,
        );
    }
    buf.push(b']');
}

/// The canonical envelope of the processor's current state.
pub fn take(p: &Processor) -> Vec<u8> {
    // Every live bucket with its aggregate, as the index holds them.
    let mut all: Vec<(BucketRef, &Agg)> = Vec::with_capacity(p.live.len());
    p.live.buckets(|b, agg| all.push((b, agg)));
    all.sort_unstable_by(|a, b| address_cmp(&p.keys, &a.0, &b.0));
    let w = p.clock.global.map(|w| w as i128);
    let visible: Vec<(BucketRef, &Agg)> = all
        .iter()
        .filter(|(b, _)| w.is_some_and(|w| b.end <= w) && p.changelog.is_visible(b))
        .copied()
        .collect();
    let partitions = p.pipeline.partitions();
    let visible_len = visible.len();
    let pipeline = PipelineDoc {
        lateness: p.pipeline.lateness(),
        partitions: partitions.to_vec(),
        windows: UniqueMap(
            p.pipeline
                .windows()
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        ),
    };
    let clock = ClockDoc {
        max_timestamp: p.clock.max_timestamp,
        partitions: UniqueMap(
            partitions
                .iter()
                .zip(p.clock.idle.iter().zip(&p.clock.progress))
                .map(|(name, (&idle, &progress))| {
                    (name.clone(), PartitionClockDoc { idle, progress })
                })
                .collect(),
        ),
        watermark: p.clock.global,
    };
    let late: Vec<(EventDoc<'_>, i64)> = p
        .late
        .records()
        .iter()
        .map(|&(no, w)| {
            let e = p.sources.event(no);
            (
                (
                    Cow::Borrowed(e.id.as_str()),
                    Cow::Borrowed(&**p.keys.name(e.key)),
                    e.timestamp,
                    e.value,
                ),
                w,
            )
        })
        .collect();
    let sources = |buf: &mut Vec<u8>| {
        buf.push(b'{');
        for (i, name) in partitions.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            canonical::key(buf, name);
            buf.push(b'[');
            for (j, &no) in p.sources.history(i).iter().enumerate() {
                if j > 0 {
                    buf.push(b',');
                }
                let e = p.sources.event(no);
                write_event(buf, e.id.as_str(), p.keys.name(e.key), e.timestamp, e.value);
            }
            buf.push(b']');
        }
        buf.push(b'}');
    };
    let windows = |buf: &mut Vec<u8>| write_live_rows(p, &all, buf);
    let visible_rows = |buf: &mut Vec<u8>| write_live_rows(p, &visible, buf);
    let state = StateWriter {
        pipeline: &pipeline,
        clock: &clock,
        late: &late,
        sequence: p.changelog.sequence(),
        sources: &sources,
        windows: &windows,
        visible: &visible_rows,
    };
    // ~40 bytes per delivered event and ~130 per live bucket and visible row.
    let events: usize = (0..partitions.len())
        .map(|i| p.sources.history(i).len())
        .sum();
    let estimate = events * 40 + (all.len() + visible_len) * 130 + 4096;
    state::write_envelope(&state, estimate, sha256_hex)
}
