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

/// The pipeline of [`checkpoint_scenario`].
pub const CHECKPOINT_PIPELINE: &str = r#"{"partitions":["p0","p1"],"windows":{"f":{"kind":"fixed","size":10},"h":{"kind":"sliding","size":10,"step":5},"s":{"kind":"session","gap":5},"st":{"kind":"stream_time","size":10}},"lateness":5}"#;

/// A processor with visible rows, live buckets of every window kind, a late
/// record, a duplicate id on another partition, an escaped key and history.
pub fn checkpoint_scenario() -> Processor {
    let mut p = Processor::new(pipeline(CHECKPOINT_PIPELINE));
    p.ingest(vec![
        d("p0", 0, "a", "k", 1, 5),
        d("p0", 1, "b", "k", 12, -3),
        d("p1", 0, "c", "j\n\"", 4, 7),
        d("p1", 1, "a", "k", 1, 5),
    ])
    .unwrap();
    p.advance("p0", 20).unwrap();
    p.advance("p1", 11).unwrap();
    p.ingest(vec![
        d("p0", 2, "late", "k", 2, 1),
        d("p0", 3, "e", "k", 14, 2),
    ])
    .unwrap();
    p
}

/// Lowercase hex SHA-256.
pub fn sha_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The version 2 digest of a parsed state (docs/checkpoint.md, "The
/// digest"), spelled out independently of the engine: each partition's
/// sources and the late records replaced by the hex of their chains (4,096
/// items per chunk, each hashed as a JSON array, `c = SHA-256(c || leaf)`
/// from 32 zero bytes), then the SHA-256 of the canonical bytes
/// (serde_json's map is sorted, its output compact).
pub fn digest_of(state: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    fn chain(items: &[serde_json::Value]) -> String {
        let mut c = vec![0u8; 32];
        for chunk in items.chunks(4096) {
            let leaf = Sha256::digest(serde_json::to_vec(chunk).unwrap());
            let mut h = Sha256::new();
            h.update(&c);
            h.update(leaf);
            c = h.finalize().to_vec();
        }
        c.iter().map(|b| format!("{b:02x}")).collect()
    }
    let mut s = state.clone();
    let late = chain(state["late"].as_array().expect("late is an array"));
    s["late"] = serde_json::Value::String(late);
    if let Some(sources) = s["sources"].as_object_mut() {
        for v in sources.values_mut() {
            let c = chain(v.as_array().expect("sources[p] is an array"));
            *v = serde_json::Value::String(c);
        }
    }
    sha_hex(&serde_json::to_vec(&s).unwrap())
}

/// The envelope `bytes` with its state changed by `f` and its digest (or,
/// for a version 1 envelope, its checksum) made right again.
pub fn rewrap(bytes: &[u8], f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut env: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    f(&mut env["state"]);
    if env.get("sha256").is_some() {
        let state = serde_json::to_vec(&env["state"]).unwrap();
        env["sha256"] = serde_json::Value::String(sha_hex(&state));
    } else {
        env["digest"] = serde_json::Value::String(digest_of(&env["state"]));
    }
    serde_json::to_vec(&env).unwrap()
}
