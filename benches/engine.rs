//! Engine throughput on the benchmark workload (`benches/gen_workload.py`).
//!
//! `cargo bench --bench engine` prints events/s for each pipeline, the naive
//! reference model on the fixed case, and the per-event cost as the number of
//! live buckets grows (as ratios to 1k). Deliveries are parsed before timing;
//! they are fed in batches of up to 1,000 between the file's watermark
//! advances, exactly as the file orders them.
//!
//! Environment: `STREAMFORGE_WORKLOAD=FILE` uses an existing NDJSON file;
//! otherwise the 1M-event workload is generated into `target/`.
//! `BENCH_EVENTS=N` limits the number of deliveries read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use std::borrow::Cow;

#[path = "../tests/it/support/reference.rs"]
mod reference;

use serde::Deserialize;
use streamforge::engine::{
    Delivery, DeliveryInput, DeliveryRef, Event, EventRef, Pipeline, Processor,
};

/// `{"op":"deliver","partition":..,"offset":..,"event":{..}}`, strings
/// borrowed from the file text.
#[derive(Deserialize)]
struct DeliverLine<'a> {
    #[allow(dead_code)]
    op: &'a str,
    #[serde(borrow)]
    partition: Cow<'a, str>,
    offset: i64,
    #[serde(borrow)]
    event: EventRef<'a>,
}

#[derive(Deserialize)]
struct AdvanceLine {
    #[allow(dead_code)]
    op: String,
    partition: String,
    watermark: i64,
}

enum Step<D> {
    Batch(Vec<D>),
    Advance(String, i64),
}

fn workload() -> PathBuf {
    if let Ok(p) = std::env::var("STREAMFORGE_WORKLOAD") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/workload-1m-1k.ndjson");
    if !out.exists() {
        let script = root.join("benches/gen_workload.py");
        let status = Command::new("python3")
            .arg(&script)
            .args([
                "--events",
                "1000000",
                "--keys",
                "1000",
                "--partitions",
                "1",
                "--out",
            ])
            .arg(&out)
            .status()
            .expect("python3 runs gen_workload.py");
        assert!(status.success(), "gen_workload.py failed");
    }
    out
}

fn load(path: &Path, limit: usize) -> (Vec<Step<DeliveryRef<'static>>>, usize) {
    let text: &'static str = Box::leak(
        std::fs::read_to_string(path)
            .expect("workload file")
            .into_boxed_str(),
    );
    let mut steps = Vec::new();
    let mut batch = Vec::new();
    let mut events = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.contains(r#""op":"advance""#) {
            let a: AdvanceLine = serde_json::from_str(line).expect("advance line");
            if !batch.is_empty() {
                steps.push(Step::Batch(std::mem::take(&mut batch)));
            }
            steps.push(Step::Advance(a.partition, a.watermark));
            continue;
        }
        let d: DeliverLine<'static> = serde_json::from_str(line).expect("deliver line");
        if events == limit {
            break;
        }
        events += 1;
        batch.push(DeliveryRef {
            partition: d.partition,
            offset: Some(d.offset),
            event: d.event,
        });
        if batch.len() == 1000 {
            steps.push(Step::Batch(std::mem::take(&mut batch)));
        }
    }
    if !batch.is_empty() {
        steps.push(Step::Batch(batch));
    }
    (steps, events)
}

fn clone_steps<D: Clone>(steps: &[Step<D>]) -> Vec<Step<D>> {
    steps
        .iter()
        .map(|s| match s {
            Step::Batch(b) => Step::Batch(b.clone()),
            Step::Advance(p, w) => Step::Advance(p.clone(), *w),
        })
        .collect()
}

/// Runs the steps; returns (seconds, changes emitted).
fn run<D: DeliveryInput>(p: &mut Processor, steps: Vec<Step<D>>) -> (f64, u64) {
    let t = Instant::now();
    let mut changes = 0u64;
    for step in steps {
        match step {
            Step::Batch(b) => {
                changes += p.ingest(b).expect("workload is valid").changes.len() as u64
            }
            Step::Advance(part, w) => {
                changes += p.advance(&part, w).expect("known partition").changes.len() as u64
            }
        }
    }
    (t.elapsed().as_secs_f64(), changes)
}

fn pipeline(windows: &str) -> Pipeline {
    Pipeline::from_json(
        format!(r#"{{"partitions":["p0"],"windows":{{{windows}}},"lateness":0}}"#).as_bytes(),
    )
    .expect("bench pipeline")
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The four-window pipeline with K key-hash shards (`BENCH_SHARDS`, default
/// `1,2,4`): events/s, the ratio to the first K, and a check that every K
/// produced the same changes and the same checkpoint.
fn shard_scaling<D: DeliveryInput + Clone>(
    steps: &[Step<D>],
    events: usize,
    runs: usize,
    windows: &str,
) {
    let ks: Vec<usize> = std::env::var("BENCH_SHARDS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|k| k.trim().parse().ok())
        .collect();
    if ks.is_empty() {
        return;
    }
    println!("shards, four-window pipeline (K interleaved run by run; the ratio is the median of each round's ratio)");
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ks.len()];
    let mut reference: Option<(u64, String)> = None;
    for _ in 0..runs {
        for (i, &k) in ks.iter().enumerate() {
            let mut p = Processor::new(pipeline(windows));
            streamforge::shard_pool::set_shards(&mut p, k).expect("valid shard count");
            let (secs, changes) = run(&mut p, clone_steps(steps));
            rates[i].push(events as f64 / secs);
            let digest = streamforge::engine::sha256_hex(&p.checkpoint().unwrap());
            match &reference {
                None => reference = Some((changes, digest)),
                Some(r) => assert_eq!(r, &(changes, digest), "K={k} changed the output"),
            }
        }
    }
    for (i, &k) in ks.iter().enumerate() {
        let ratios: Vec<f64> = rates[i].iter().zip(&rates[0]).map(|(r, f)| r / f).collect();
        println!(
            "{:<44} {:>14.0} {:>11.2}x",
            format!("K={k}"),
            median(rates[i].clone()),
            median(ratios)
        );
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    if let Ok(path) = std::env::var("BENCH_MEMORY") {
        memory_child(Path::new(&path));
        return;
    }
    let limit = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX);
    let path = workload();
    let (steps, events) = load(&path, limit);
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    println!(
        "workload: {} ({} deliveries), {} runs each, median",
        path.display(),
        events,
        runs
    );
    println!("{:<44} {:>14} {:>12}", "pipeline", "events/s", "changes");
    let cases = [
        ("fixed 10s", r#""fixed_10s":{"kind":"fixed","size":10000}"#),
        (
            "sliding 10s/2s",
            r#""sliding_10s_2s":{"kind":"sliding","size":10000,"step":2000}"#,
        ),
        (
            "session gap 50ms",
            r#""session_50ms":{"kind":"session","gap":50}"#,
        ),
        (
            "fixed + sliding + session + stream-time 10s",
            r#""fixed_10s":{"kind":"fixed","size":10000},"sliding_10s_2s":{"kind":"sliding","size":10000,"step":2000},"session_50ms":{"kind":"session","gap":50},"stream_10s":{"kind":"stream_time","size":10000}"#,
        ),
        (
            "send's: fixed + sliding + session 1s",
            r#""fixed_10s":{"kind":"fixed","size":10000},"sliding_10s_2s":{"kind":"sliding","size":10000,"step":2000},"session_1s":{"kind":"session","gap":1000}"#,
        ),
    ];
    let mut fixed_rate = 0.0;
    let only = std::env::var("BENCH_ONLY").ok();
    for (name, windows) in cases {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let mut rates = Vec::new();
        let mut changes = 0;
        for _ in 0..runs {
            let mut p = Processor::new(pipeline(windows));
            let (secs, c) = run(&mut p, clone_steps(&steps));
            rates.push(events as f64 / secs);
            changes = c;
        }
        let rate = median(rates);
        if name == "fixed 10s" {
            fixed_rate = rate;
        }
        println!("{name:<44} {rate:>14.0} {changes:>12}");
    }
    shard_scaling(&steps, events, runs, cases[3].1);
    if only.is_none() {
        naive_reference(&steps, fixed_rate, cases[0].1);
    }
    if only.is_some() {
        return;
    }

    // Memory, in a fresh process so that nothing freed here is reused there.
    let out = Command::new(std::env::current_exe().expect("bench binary"))
        .env("BENCH_MEMORY", &path)
        .output()
        .expect("memory child runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let mut p = Processor::new(pipeline(cases[0].1));
    run(&mut p, clone_steps(&steps));
    let t = Instant::now();
    let cp = p.checkpoint().unwrap();
    let take = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let back = Processor::restore(&cp, p.pipeline()).expect("own checkpoint restores");
    let restore = t.elapsed().as_secs_f64();
    assert_eq!(back.sequence(), p.sequence());
    println!(
        "checkpoint: {} bytes ({:.1} bytes/event), take {:.3} s ({:.0} MB/s), restore {:.3} s ({:.0} MB/s)",
        cp.len(),
        cp.len() as f64 / events as f64,
        take,
        cp.len() as f64 / 1e6 / take,
        restore,
        cp.len() as f64 / 1e6 / restore
    );
    drop((p, back, cp));

    live_bucket_scaling();
}

/// The naive reference model of the differential test (it rebuilds the whole
/// ready view after every call) on a prefix of the workload, fixed case; the
/// ratio to the engine's full-run rate shows what incrementality buys.
fn naive_reference(steps: &[Step<DeliveryRef<'static>>], engine_rate: f64, windows: &str) {
    let limit: usize = std::env::var("BENCH_NAIVE_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let p = pipeline(windows);
    let mut model = reference::Model::new(p.partitions(), p.windows(), p.lateness());
    let mut owned: Vec<Step<Delivery>> = Vec::new();
    let mut n = 0;
    for step in steps {
        if n >= limit {
            break;
        }
        owned.push(match step {
            Step::Batch(b) => {
                n += b.len();
                Step::Batch(
                    b.iter()
                        .map(|d| Delivery {
                            partition: d.partition.to_string(),
                            offset: d.offset,
                            event: Event {
                                id: d.event.id.to_string(),
                                key: d.event.key.to_string(),
                                timestamp: d.event.timestamp,
                                value: d.event.value,
                            },
                        })
                        .collect(),
                )
            }
            Step::Advance(part, w) => Step::Advance(part.clone(), *w),
        });
    }
    let t = Instant::now();
    for step in &owned {
        match step {
            Step::Batch(b) => {
                // one call per delivery: the model's batch path also copies
                // its history to check atomicity, which is not the point here
                for d in b {
                    model.ingest(std::slice::from_ref(d)).expect("valid");
                }
            }
            Step::Advance(part, w) => {
                model.advance(part, *w).expect("known partition");
            }
        }
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    println!(
        "{:<44} {rate:>14.0} {:>12}",
        format!("naive reference, fixed 10s ({n} events)"),
        format!("{:.0}x slower", engine_rate / rate)
    );
}

/// Per-event cost with 1k, 100k and 1M live buckets, as ratios to 1k.
///
/// Every case first ingests the same 1,000,000 events (so the id index and
/// history are the same size), spread over `n` buckets of 1,000 keys in
/// far-future windows that stay live. Then it times 200,000 events into the
/// current window with a watermark advance every 1,000 events, as the shared
/// workload does ("time-local"), and 200,000 updates to uniformly random
/// existing buckets ("random": this one is bound by cache misses once the
/// buckets outgrow the CPU caches, not by any scan).
fn live_bucket_scaling() {
    let p = pipeline(r#""fixed_10s":{"kind":"fixed","size":10000}"#);
    const FUTURE: i64 = 1_000_000_000_000;
    let mut base = (0.0, 0.0);
    println!(
        "{:<14} {:>18} {:>8} {:>18} {:>8}",
        "live buckets", "time-local ns/ev", "ratio", "random ns/ev", "ratio"
    );
    for n in [1_000usize, 100_000, 1_000_000] {
        let (mut local, mut random) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let keys = 1000.min(n);
            let windows = n / keys;
            let mut offset = 0i64;
            let mut proc = Processor::new(p.clone());
            let mut batch = Vec::with_capacity(1000);
            for i in 0..1_000_000usize {
                let b = i % n;
                batch.push(delivery(
                    offset,
                    b % keys,
                    FUTURE + (b / keys) as i64 * 10_000,
                ));
                offset += 1;
                if batch.len() == 1000 {
                    proc.ingest(std::mem::take(&mut batch)).unwrap();
                }
            }
            assert_eq!(proc.live_buckets(), n);
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut steps = Vec::new();
            for round in 0..200i64 {
                let mut b = Vec::with_capacity(1000);
                for _ in 0..1000 {
                    let r = next();
                    b.push(delivery(
                        offset,
                        (r % 1000) as usize,
                        9_000 + (r >> 40) as i64 % 1000,
                    ));
                    offset += 1;
                }
                steps.push(Step::Batch(b));
                steps.push(Step::Advance("p0".into(), round * 40));
            }
            let (secs, _) = run(&mut proc, steps);
            local.push(secs * 1e9 / 200_000.0);
            let mut steps = Vec::new();
            for _ in 0..200 {
                let mut b = Vec::with_capacity(1000);
                for _ in 0..1000 {
                    let r = next();
                    let (k, w) = (
                        (r % keys as u64) as usize,
                        ((r >> 20) % windows as u64) as i64,
                    );
                    b.push(delivery(offset, k, FUTURE + w * 10_000 + 1));
                    offset += 1;
                }
                steps.push(Step::Batch(b));
            }
            let (secs, _) = run(&mut proc, steps);
            random.push(secs * 1e9 / 200_000.0);
        }
        let (l, r) = (median(local), median(random));
        if n == 1_000 {
            base = (l, r);
        }
        println!(
            "{n:<14} {l:>18.1} {:>8.2} {r:>18.1} {:>8.2}",
            l / base.0,
            r / base.1
        );
    }
}

/// Child process: streams the workload through the fixed-window pipeline and
/// reports resident memory per delivered event (nothing else is held).
fn memory_child(path: &Path) {
    use std::io::BufRead;
    let base = rss_kib();
    let mut p = Processor::new(pipeline(r#""fixed_10s":{"kind":"fixed","size":10000}"#));
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("workload"));
    let mut batch: Vec<Delivery> = Vec::with_capacity(1000);
    let mut events = 0u64;
    for line in file.lines() {
        let line = line.expect("line");
        if line.contains(r#""op":"advance""#) {
            let a: AdvanceLine = serde_json::from_str(&line).expect("advance line");
            if !batch.is_empty() {
                p.ingest(std::mem::take(&mut batch)).expect("valid");
            }
            p.advance(&a.partition, a.watermark)
                .expect("known partition");
            continue;
        }
        let d: DeliverLine<'_> = serde_json::from_str(&line).expect("deliver line");
        events += 1;
        batch.push(Delivery {
            partition: d.partition.into_owned(),
            offset: Some(d.offset),
            event: Event {
                id: d.event.id.into_owned(),
                key: d.event.key.into_owned(),
                timestamp: d.event.timestamp,
                value: d.event.value,
            },
        });
        if batch.len() == 1000 {
            p.ingest(std::mem::take(&mut batch)).expect("valid");
        }
    }
    if !batch.is_empty() {
        p.ingest(batch).expect("valid");
    }
    let used = rss_kib().saturating_sub(base) * 1024;
    println!(
        "memory: {:.0} bytes of RSS per delivered event ({} events, {} live buckets, {:.1} MB)",
        used as f64 / events as f64,
        events,
        p.live_buckets(),
        used as f64 / 1e6
    );
}

fn delivery(offset: i64, key: usize, ts: i64) -> Delivery {
    Delivery {
        partition: "p0".into(),
        offset: Some(offset),
        event: Event {
            id: format!("e{offset}"),
            key: format!("k{key}"),
            timestamp: ts,
            value: (offset % 2001) - 1000,
        },
    }
}
