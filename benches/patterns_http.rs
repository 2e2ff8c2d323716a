//! The pattern engine over HTTP, durable: `streamforge serve --patterns`
//! fed by C concurrent clients posting NDJSON batches of B pattern events,
//! with the watermark advanced as the pushes complete.
//!
//! `cargo bench --bench patterns_http` (build the release binary first:
//! `cargo build --release`). The workload is the pattern bench's (in-process,
//! seeded): N events over 10,000 uniform keys, kinds login 15% / pay 35% /
//! logout 10% / browse 40%, unique timestamps 1 ms apart arriving in a
//! bounded shuffle (at most 500 ms late, never late for a watermark of the
//! largest time seen minus 500), an integer `amount` in 1..=1000; pattern
//! "login, then pay, then pay (skip_next), within 10 minutes,
//! skip_past_last".
//!
//! The batches are taken in arrival order by the C clients (the next batch
//! goes to whichever client is free). An advancer connection follows the
//! acknowledged pushes: once batches 0..k are all acknowledged it advances
//! to the largest time among them minus 500, which no later event can be at
//! or before (so no push is ever late). A run ends when every batch is
//! acknowledged and the last advance has been processed: the figure is
//! events pushed AND processed per second, every call durable.
//!
//! Printed per run: events/s, push latency p50/p99/max, advances sent and
//! their latency p50/p99, output records, server CPU seconds, peak RSS, disk
//! bytes; then the median of the runs. Each run is done twice, alternating:
//! plain, and with an `Idempotency-Key` on every push and advance (each
//! answer stored with its call); the ratio of the medians is printed.
//!
//! Then `streamforge patterns send` of the same workload as an operation
//! file (the batches in arrival order, an advance to the largest time so far
//! minus 500 after each), with its default keys and with `--no-keys`,
//! alternating on fresh servers, `BENCH_SEND_RUNS` times: the send rates and
//! their ratio.
//!
//! Environment: `BENCH_EVENTS` (1000000), `BENCH_C` (4), `BENCH_B` (1000),
//! `BENCH_KEYS` (10000), `BENCH_RUNS` (3), `BENCH_SEND_RUNS` (3),
//! `STREAMFORGE_BIN`.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

#[path = "support/http.rs"]
mod http_support;
use http_support::{binary, cpu_seconds, proc_kib, Conn, Server};

const DOC: &str = r#"{"patterns": [{"name": "pay-twice", "within": 600000, "skip": "skip_past_last",
  "stages": [{"name": "login", "where": {"kind": "login"}},
             {"name": "pay1", "where": {"kind": "pay"}},
             {"name": "pay2", "contiguity": "skip_next", "where": {"kind": "pay"}}]}]}"#;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// One batch: its NDJSON body, its number of events and the largest event
/// time in it.
struct Batch {
    body: Vec<u8>,
    events: usize,
    max_time: i64,
}

/// The workload as NDJSON batches of `b` events, in arrival order.
fn workload(events: usize, keys: usize, b: usize, seed: u64) -> Vec<Batch> {
    let mut rng = XorShift(seed);
    let base: i64 = 1_700_000_000_000;
    let mut order: Vec<(u64, usize)> = (0..events)
        .map(|i| (i as u64 + rng.next() % 500, i))
        .collect();
    order.sort_unstable();
    let mut out = Vec::new();
    let mut cur = Batch {
        body: Vec::with_capacity(b * 100),
        events: 0,
        max_time: i64::MIN,
    };
    for (_, i) in order {
        let time = base + i as i64;
        let key = rng.next() % keys as u64;
        let kind = match rng.next() % 100 {
            0..=14 => "login",
            15..=49 => "pay",
            50..=59 => "logout",
            _ => "browse",
        };
        let amount = rng.next() % 1000 + 1;
        let _ = writeln!(
            cur.body,
            r#"{{"id":"e{i}","key":"acct-{key}","kind":"{kind}","time":{time},"fields":{{"amount":{amount}}}}}"#
        );
        cur.events += 1;
        cur.max_time = cur.max_time.max(time);
        if cur.events == b {
            out.push(std::mem::replace(
                &mut cur,
                Batch {
                    body: Vec::with_capacity(b * 100),
                    events: 0,
                    max_time: i64::MIN,
                },
            ));
        }
    }
    if cur.events > 0 {
        out.push(cur);
    }
    out
}

/// Starts the release server with the bench's pattern document.
fn start_server(dir: &Path) -> Server {
    let doc = dir.join("patterns.json");
    std::fs::write(&doc, DOC).expect("write the document");
    Server::start(&dir.join("db"), &["--patterns".as_ref(), doc.as_os_str()])
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct RunResult {
    events_per_s: f64,
    push_ms: (f64, f64, f64),
    advances: usize,
    advance_ms: (f64, f64),
    outputs: u64,
    cpu: f64,
    rss: u64,
    disk: u64,
}

fn run(batches: &Arc<Vec<Batch>>, clients: usize, keyed: bool) -> RunResult {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path());
    let addr = server.addr.clone();
    let n = batches.len();
    let next = Arc::new(AtomicUsize::new(0));
    // which batches are acknowledged, and a wakeup for the advancer (it
    // must not spin: the client shares the server's two cores)
    let done = Arc::new((Mutex::new(vec![false; n]), Condvar::new()));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (batches, next, done, addr) =
            (batches.clone(), next.clone(), done.clone(), addr.clone());
        handles.push(std::thread::spawn(move || {
            let mut c = Conn::new(&addr);
            let mut lat = Vec::new();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= batches.len() {
                    return lat;
                }
                let t = Instant::now();
                let key = if keyed {
                    format!("idempotency-key: bench-push-{j}\r\n")
                } else {
                    String::new()
                };
                let st = c.call_with(
                    "POST",
                    "/patterns/events",
                    "application/x-ndjson",
                    &key,
                    &batches[j].body,
                );
                assert_eq!(st, 200, "push: {}", String::from_utf8_lossy(&c.body));
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                done.0.lock().unwrap()[j] = true;
                done.1.notify_one();
            }
        }));
    }
    // The advancer: after the acknowledged prefix of batches.
    let mut c = Conn::new(&addr);
    let (mut prefix, mut max_time, mut advanced) = (0usize, i64::MIN, i64::MIN);
    let mut adv_lat = Vec::new();
    let mut outputs = 0u64;
    while prefix < n || advanced < max_time - 500 {
        {
            let mut d = done.0.lock().unwrap();
            loop {
                while prefix < n && d[prefix] {
                    max_time = max_time.max(batches[prefix].max_time);
                    prefix += 1;
                }
                if prefix > 0 && max_time.saturating_sub(500) > advanced {
                    break;
                }
                d = done.1.wait(d).unwrap();
            }
        }
        let w = max_time.saturating_sub(500);
        let t = Instant::now();
        let body = format!(r#"{{"watermark":{w}}}"#);
        let key = if keyed {
            format!("idempotency-key: bench-advance-{w}\r\n")
        } else {
            String::new()
        };
        let st = c.call_with(
            "POST",
            "/patterns/advance",
            "application/json",
            &key,
            body.as_bytes(),
        );
        assert_eq!(st, 200, "advance: {}", String::from_utf8_lossy(&c.body));
        adv_lat.push(t.elapsed().as_secs_f64() * 1e3);
        // each output record starts with its seq (captured events have none)
        outputs += c.body.windows(7).filter(|w| w == b"{\"seq\":").count() as u64;
        advanced = w;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client"))
        .collect();
    lat.sort_by(f64::total_cmp);
    adv_lat.sort_by(f64::total_cmp);
    let events: usize = batches.iter().map(|b| b.events).sum();
    let pid = server.pid();
    let out = RunResult {
        events_per_s: events as f64 / secs,
        push_ms: (pct(&lat, 0.5), pct(&lat, 0.99), pct(&lat, 1.0)),
        advances: adv_lat.len(),
        advance_ms: (pct(&adv_lat, 0.5), pct(&adv_lat, 0.99)),
        outputs,
        cpu: cpu_seconds(pid),
        rss: proc_kib(pid, "VmHWM"),
        disk: server.disk_bytes(),
    };
    server.kill9();
    out
}

fn main() {
    let events = env_usize("BENCH_EVENTS", 1_000_000);
    let clients = env_usize("BENCH_C", 4);
    let b = env_usize("BENCH_B", 1000);
    let keys = env_usize("BENCH_KEYS", 10_000);
    let runs = env_usize("BENCH_RUNS", 3);
    let batches = Arc::new(workload(events, keys, b, 7));
    println!(
        "pattern HTTP bench: {events} events, {keys} keys, C={clients}, B={b}, {} batches, durable (synchronous=FULL)",
        batches.len()
    );
    let mut rates = [Vec::new(), Vec::new()];
    for r in 1..=runs {
        for keyed in [false, true] {
            let x = run(&batches, clients, keyed);
            println!(
                "run {r} {}: {:>9.0} events/s pushed and processed; push p50 {:.1} ms p99 {:.1} ms max {:.1} ms; \
                 {} advances p50 {:.1} ms p99 {:.1} ms; {} output records; server CPU {:.2} s; peak RSS {:.0} MB; disk {:.0} MB",
                if keyed { "keyed" } else { "plain" },
                x.events_per_s,
                x.push_ms.0,
                x.push_ms.1,
                x.push_ms.2,
                x.advances,
                x.advance_ms.0,
                x.advance_ms.1,
                x.outputs,
                x.cpu,
                x.rss as f64 / 1e6,
                x.disk as f64 / 1e6
            );
            rates[usize::from(keyed)].push(x.events_per_s);
        }
    }
    let plain = median(&mut rates[0]);
    let keyed = median(&mut rates[1]);
    println!(
        "median of {runs}: plain {plain:.0} events/s, with Idempotency-Key {keyed:.0} events/s \
         (keyed/plain {:.3}; target: 300000 with keys)",
        keyed / plain
    );
    send_bench(&batches, env_usize("BENCH_SEND_RUNS", 3));
}

/// `streamforge patterns send FILE` with and without keys, alternating.
fn send_bench(batches: &[Batch], runs: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ops.ndjson");
    let mut ops = Vec::new();
    let mut max_time = i64::MIN;
    for b in batches {
        ops.extend_from_slice(&b.body);
        max_time = max_time.max(b.max_time);
        let _ = writeln!(ops, r#"{{"op":"advance","watermark":{}}}"#, max_time - 500);
    }
    std::fs::write(&file, &ops).expect("write the operation file");
    let events: usize = batches.iter().map(|b| b.events).sum();
    let mut rates = [Vec::new(), Vec::new()];
    for r in 1..=runs {
        for keyed in [false, true] {
            let sub = dir.path().join(format!("send-{r}-{keyed}"));
            std::fs::create_dir_all(&sub).expect("mkdir");
            let server = start_server(&sub);
            let mut cmd = std::process::Command::new(binary());
            cmd.args(["patterns", "send"])
                .arg(&file)
                .env("STREAMFORGE_URL", format!("http://{}", server.addr));
            if !keyed {
                cmd.arg("--no-keys");
            }
            let t = Instant::now();
            let out = cmd.output().expect("patterns send");
            let secs = t.elapsed().as_secs_f64();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let rate = events as f64 / secs;
            println!(
                "send run {r} {}: {rate:>9.0} events/s ({secs:.2} s)",
                if keyed { "keyed" } else { "--no-keys" }
            );
            rates[usize::from(keyed)].push(rate);
            server.kill9();
        }
    }
    let plain = median(&mut rates[0]);
    let keyed = median(&mut rates[1]);
    println!(
        "patterns send, median of {runs}: --no-keys {plain:.0} events/s, with keys {keyed:.0} \
         events/s (keyed/plain {:.3}; target: at least 0.9)",
        keyed / plain
    );
}

/// The median (sorts `v`).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
