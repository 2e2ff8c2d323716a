//! The state-size model of the Nexmark queries (pipelines/q*.json): how a
//! checkpoint grows with delivered events and with live buckets, and how
//! many buckets are live at most, at 1, 4 and 8 partitions.
//!
//! ```sh
//! cargo bench --bench chaos_state                       # 400 000 source events
//! BENCH_EVENTS=1000000 cargo bench --bench chaos_state
//! ```
//!
//! The workload is `streamforge nexmark` with its defaults (seed 7, events
//! 10 ms apart, disorder 500 ms, advances every 100 source events, no lead)
//! over partitions `p0..p{N-1}`, through the engine in this process (no
//! HTTP: the state is the engine's). The query's pipeline file is used with
//! its partitions replaced. After every call the live buckets are counted
//! (their peak is printed); at ten points of the stream a checkpoint is
//! taken and split by its sections: `sources` (the delivery history, per
//! delivered event) and `windows` plus `changelog.visible` (the live index
//! and the visible rows, per live bucket). A partition that delivers
//! little reports its watermark seldom and holds the global watermark
//! back: more partitions, more live state. Columns: the checkpoint's size
//! at the end; bytes per delivered event and per live bucket; the peak of
//! live buckets over every call, and the live buckets at the busiest
//! checkpoint; the mean lag of the global watermark behind the latest event
//! time at the checkpoints; the seconds the run took.

use std::time::Instant;

use streamforge::engine::{Delivery, Event, Pipeline, Processor};
use streamforge::nexmark::{self, Query};

/// Byte range of `"key":VALUE` in the canonical state that follows `from`.
fn section(state: &str, key: &str, next: &str, from: usize) -> usize {
    let start = state[from..]
        .find(key)
        .map(|i| i + from)
        .unwrap_or_else(|| panic!("{key} missing"));
    let end = state[start..]
        .find(next)
        .map(|i| i + start)
        .unwrap_or(state.len());
    end - start
}

struct Sample {
    delivered: u64,
    /// How far the global watermark trails the latest event time delivered.
    lag: i64,
    live: usize,
    total: usize,
    sources: usize,
    buckets: usize,
}

fn measure(query: Query, partitions: u32, events: u64) -> (Vec<Sample>, usize, u64, f64) {
    let text = std::fs::read_to_string(format!(
        "{}/pipelines/{}.json",
        env!("CARGO_MANIFEST_DIR"),
        query.name()
    ))
    .expect("pipeline");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["partitions"] = (0..partitions).map(|p| format!("p{p}")).collect();
    let pipeline = Pipeline::from_json(v.to_string().as_bytes()).expect("pipeline");
    let mut proc = Processor::new(pipeline);
    let stream = nexmark::Workload::new(nexmark::Config {
        seed: 7,
        events,
        partitions,
        query,
        ..nexmark::Config::default()
    });
    let started = Instant::now();
    let (mut delivered, mut peak, mut batch) = (0u64, 0usize, Vec::new());
    let mut latest = i64::MIN;
    let mut samples = Vec::new();
    let every = (events / 10).max(1);
    let mut next_sample = every;
    let flush = |proc: &mut Processor, batch: &mut Vec<Delivery>| {
        if !batch.is_empty() {
            proc.ingest(std::mem::take(batch)).expect("ingest");
        }
    };
    for op in stream {
        match op {
            nexmark::Op::Deliver {
                partition,
                offset,
                id,
                key,
                timestamp,
                value,
                source,
            } => {
                batch.push(Delivery {
                    partition: format!("p{partition}"),
                    offset: Some(offset as i64),
                    event: Event {
                        id,
                        key,
                        timestamp,
                        value,
                    },
                });
                delivered += 1;
                latest = latest.max(timestamp);
                if batch.len() >= 1000 {
                    flush(&mut proc, &mut batch);
                    peak = peak.max(proc.live_buckets());
                }
                if source + 1 >= next_sample {
                    next_sample += every;
                    flush(&mut proc, &mut batch);
                    samples.push(sample(&proc, delivered, latest));
                }
            }
            nexmark::Op::Advance {
                partition,
                watermark,
            } => {
                flush(&mut proc, &mut batch);
                peak = peak.max(proc.live_buckets());
                proc.advance(&format!("p{partition}"), watermark)
                    .expect("advance");
            }
        }
    }
    flush(&mut proc, &mut batch);
    (samples, peak, delivered, started.elapsed().as_secs_f64())
}

fn sample(proc: &Processor, delivered: u64, latest: i64) -> Sample {
    let envelope = proc.checkpoint().unwrap();
    let state = String::from_utf8(envelope.clone()).expect("utf-8");
    let visible = section(&state, "\"visible\":", "},\"clock\":", 0);
    let at = state.find("\"sources\":").expect("sources");
    let sources = section(&state, "\"sources\":", ",\"windows\":[", at);
    let windows = section(&state, ",\"windows\":[", "],\"version\"", at);
    Sample {
        delivered,
        lag: proc.watermark().map_or(-1, |w| latest - w),
        live: proc.live_buckets(),
        total: envelope.len(),
        sources,
        buckets: visible + windows,
    }
}

fn main() {
    let events: u64 = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    println!(
        "Nexmark state-size model: {events} source events (seed 7, 10 ms apart, disorder 500 ms, \
         advances every 100 events), checkpoints at every tenth of the stream"
    );
    println!(
        "{:<6} {:>5} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>6}",
        "query",
        "parts",
        "delivered",
        "ckpt bytes",
        "B/delivered",
        "B/bucket",
        "peak live",
        "ckpt live",
        "W lag ms",
        "s"
    );
    for query in Query::ALL {
        for partitions in [1u32, 4, 8] {
            let (samples, peak, delivered, secs) = measure(query, partitions, events);
            let last = samples.last().expect("samples");
            // per delivered event: the history section; per live bucket:
            // the live index and visible rows, at the sample with the most
            // live buckets
            let per_event = last.sources as f64 / last.delivered.max(1) as f64;
            let busiest = samples.iter().max_by_key(|s| s.live).expect("samples");
            let per_bucket = busiest.buckets as f64 / busiest.live.max(1) as f64;
            let lag = samples.iter().map(|s| s.lag).sum::<i64>() / samples.len() as i64;
            println!(
                "{:<6} {:>5} {:>10} {:>12} {:>12.1} {:>10.1} {:>10} {:>10} {:>12} {:>6.1}",
                query.name(),
                partitions,
                delivered,
                last.total,
                per_event,
                per_bucket,
                peak,
                busiest.live,
                lag,
                secs
            );
        }
    }
}
