//! Helpers for engine tests: a tiny driver with a readable text form of the
//! changelog (`3 - w k [0,10) c=1 s=5 min=5 max=5` for a retraction, `+` for
//! an upsert).
#![allow(dead_code)]

use streamforge::engine::{
    Address, Change, ChangeOp, Delivery, Event, Pipeline, Processor, TickOutcome,
};

/// Builds a pipeline from JSON text.
pub fn pipeline(json: &str) -> Pipeline {
    Pipeline::from_json(json.as_bytes()).expect("valid pipeline")
}

/// A delivery with an explicit offset.
pub fn d(partition: &str, offset: i64, id: &str, key: &str, ts: i64, value: i64) -> Delivery {
    Delivery {
        partition: partition.into(),
        offset: Some(offset),
        event: Event {
            id: id.into(),
            key: key.into(),
            timestamp: ts,
            value,
        },
    }
}

/// A delivery in append mode.
pub fn append(partition: &str, id: &str, key: &str, ts: i64, value: i64) -> Delivery {
    Delivery {
        offset: None,
        ..d(partition, 0, id, key, ts, value)
    }
}

/// One change as a line.
pub fn line(c: &Change) -> String {
    let r = &c.result;
    format!(
        "{} {} {} {} [{},{}) c={} s={} min={} max={}",
        c.seq,
        if c.op == ChangeOp::Upsert { "+" } else { "-" },
        r.window,
        r.key,
        r.start,
        r.end,
        r.count,
        r.sum,
        r.min,
        r.max
    )
}

/// Changes as lines.
pub fn lines(changes: &[Change]) -> Vec<String> {
    changes.iter().map(line).collect()
}

/// Addresses as `w k [s,e)`.
pub fn addrs(a: &[Address]) -> Vec<String> {
    a.iter()
        .map(|a| format!("{} {} [{},{})", a.window, a.key, a.start, a.end))
        .collect()
}

/// Ingests one delivery and returns the change lines.
pub fn ingest(p: &mut Processor, delivery: Delivery) -> Vec<String> {
    lines(&p.ingest(vec![delivery]).expect("accepted").changes)
}

/// Advances and returns the change lines.
pub fn advance(p: &mut Processor, partition: &str, w: i64) -> Vec<String> {
    lines(&p.advance(partition, w).expect("accepted").changes)
}

/// Advances and returns the whole outcome.
pub fn tick(p: &mut Processor, partition: &str, w: i64) -> TickOutcome {
    p.advance(partition, w).expect("accepted")
}
