//! The benchmark workload (`benches/gen_workload.py`'s file, 4 partitions)
//! and the pipeline it runs on, cut into the HTTP calls each client sends.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use streamforge::engine::EventRef;

pub const PIPELINE: &str = r#"{"partitions":["p0","p1","p2","p3"],"windows":{"fixed_10s":{"kind":"fixed","size":10000},"sliding_10s_2s":{"kind":"sliding","size":10000,"step":2000},"session_50ms":{"kind":"session","gap":50}},"lateness":0}"#;
pub const PARTITIONS: usize = 4;

/// `STREAMFORGE_WORKLOAD`, else a file of at least `min_events` (and
/// 1,000,000) deliveries under target/, generated when missing.
pub fn workload(min_events: usize) -> PathBuf {
    if let Ok(p) = std::env::var("STREAMFORGE_WORKLOAD") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let events = min_events.max(1_000_000);
    let out = root.join(format!("target/workload-{events}-1k-4p.ndjson"));
    if !out.exists() {
        let status = Command::new("python3")
            .arg(root.join("benches/gen_workload.py"))
            .args(["--events", &events.to_string()])
            .args(["--keys", "1000", "--partitions", "4", "--out"])
            .arg(&out)
            .status()
            .expect("python3 runs gen_workload.py");
        assert!(status.success(), "gen_workload.py failed");
    }
    out
}

#[derive(Deserialize)]
struct Line<'a> {
    op: &'a str,
    partition: &'a str,
    #[serde(default)]
    offset: i64,
    #[serde(default)]
    watermark: i64,
    #[serde(borrow, default)]
    event: Option<EventRef<'a>>,
}

/// One HTTP call of the workload.
#[derive(Clone)]
pub enum Req {
    /// NDJSON body and its number of deliveries.
    Events(Vec<u8>, usize),
    /// `POST /watermarks` body and the parsed advance.
    Advance(Vec<u8>, String, i64),
}

/// Per-partition request lists for the first `limit` deliveries.
pub fn requests(text: &str, limit: usize, b: usize) -> (Vec<Vec<Req>>, usize) {
    let mut out: Vec<Vec<Req>> = vec![Vec::new(); PARTITIONS];
    let mut batch: Vec<Vec<u8>> = vec![Vec::new(); PARTITIONS];
    let mut count = vec![0usize; PARTITIONS];
    let mut pending: Vec<Option<(String, i64)>> = vec![None; PARTITIONS];
    let mut events = 0;
    let advance = |p: &str, w: i64| {
        Req::Advance(
            format!(r#"{{"partition":"{p}","watermark":{w}}}"#).into_bytes(),
            p.to_string(),
            w,
        )
    };
    let flush = |i: usize,
                 out: &mut Vec<Vec<Req>>,
                 batch: &mut Vec<Vec<u8>>,
                 count: &mut Vec<usize>,
                 pending: &mut Vec<Option<(String, i64)>>| {
        if count[i] > 0 {
            out[i].push(Req::Events(std::mem::take(&mut batch[i]), count[i]));
            count[i] = 0;
        }
        if let Some((p, w)) = pending[i].take() {
            out[i].push(advance(&p, w));
        }
    };
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        let l: Line<'_> = serde_json::from_str(line).expect("workload line");
        let i: usize = l.partition[1..].parse().expect("partition pN");
        assert!(i < PARTITIONS, "the workload must have 4 partitions");
        match l.op {
            "deliver" => {
                if events == limit {
                    break;
                }
                events += 1;
                let e = l.event.expect("event");
                // The delivery line without its "op" field.
                let body = &mut batch[i];
                serde_json::to_writer(
                    &mut *body,
                    &serde_json::json!({"partition": l.partition, "offset": l.offset, "event": {
                        "id": e.id, "key": e.key, "timestamp": e.timestamp, "value": e.value}}),
                )
                .expect("encode");
                body.push(b'\n');
                count[i] += 1;
                if count[i] == b {
                    flush(i, &mut out, &mut batch, &mut count, &mut pending);
                }
            }
            "advance" => {
                if count[i] == 0 {
                    out[i].push(advance(l.partition, l.watermark));
                } else {
                    pending[i] = Some((l.partition.to_string(), l.watermark));
                }
            }
            other => panic!("unknown op {other}"),
        }
    }
    for i in 0..PARTITIONS {
        flush(i, &mut out, &mut batch, &mut count, &mut pending);
    }
    (out, events)
}

/// The requests of client `c` of `clients`: its partitions' lists,
/// interleaved round-robin (each keeps its own order).
pub fn client_requests(all: &[Vec<Req>], c: usize, clients: usize) -> Vec<Req> {
    let mine: Vec<&Vec<Req>> = (0..PARTITIONS)
        .filter(|p| p % clients == c)
        .map(|p| &all[p])
        .collect();
    let mut out = Vec::new();
    let longest = mine.iter().map(|v| v.len()).max().unwrap_or(0);
    for k in 0..longest {
        for v in &mine {
            if let Some(r) = v.get(k) {
                out.push(r.clone());
            }
        }
    }
    out
}
