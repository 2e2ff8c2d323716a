//! End-to-end HTTP benchmark of `streamforge serve` (issue 6).
//!
//! `cargo bench --bench http` builds nothing itself: build the release binary
//! first (`cargo build --release`). It runs the benchmark workload
//! (`benches/gen_workload.py`, 4 partitions, 1,000 keys) against a
//! server it starts on a temporary database (pipeline: fixed 10 s, sliding
//! 10 s / 2 s, session 50 ms; partitions p0..p3; lateness 0), or against
//! `BENCH_URL`, and prints:
//!
//! - throughput: events/s with C concurrent clients posting NDJSON batches of
//!   B deliveries, batch latency p50/p99/max, server CPU seconds (from
//!   `/proc/PID/stat`), peak RSS (`VmHWM`), RSS per million delivered events,
//!   and bytes on disk at the end; the engine-only rate of the same requests
//!   in this process, for the ratio;
//! - latency at half the maximum rate (each client paces its batches);
//! - recovery: process start to `/readyz` 200 after SIGKILL with N logged
//!   events since the last checkpoint (`--checkpoint-every 0`), and after a
//!   clean shutdown (final checkpoint); `POST /checkpoints` and `POST
//!   /restore` of that checkpoint through the service;
//! - the checkpoint size model: envelope bytes against delivered events and
//!   live buckets (least-squares fit of bytes/event and bytes/bucket), and
//!   take/restore time per MB, from the engine in this process;
//! - webhook sinks (docs/sinks.md): the throughput runs' ingest rate with
//!   one `changes` sink attached against the rate without (alternating, on
//!   fresh servers), the delivery rate of a sink to a receiver in this
//!   process (batches of 1,000), and the lag from commit to receiver at half
//!   the rate.
//!
//! Every client owns whole partitions (client i sends partitions p with
//! p mod C = i), so each partition's offsets arrive in order. Within a
//! partition the deliveries are cut into batches of B in file order; the
//! file's watermark advances that fall inside a batch are coalesced into one
//! `POST /watermarks` (the last, since progress is monotone) sent right after
//! that batch. Delaying an advance never makes an event late.
//!
//! Environment (all optional):
//! - `BENCH_EVENTS` (1000000): deliveries in the throughput runs;
//! - `BENCH_C` (4), `BENCH_B` (1000): clients and batch size;
//! - `BENCH_RUNS` (3): throughput runs per client mode (the median is
//!   printed with the rest);
//! - `BENCH_ALIGN` ("1,off"): client modes of the throughput section, the
//!   first also used at half rate: a number k keeps every client within k
//!   batches of the slowest (the partitions advance together, as the file
//!   interleaves them), `off` lets each client run free (one partition can
//!   get hundreds of seconds of event time ahead: the global watermark waits
//!   for the slowest, so the others' buckets pile up);
//! - `BENCH_RECOVERY` ("100000,1000000"): logged events for the SIGKILL runs;
//!   the last one is also used for the clean-shutdown run;
//! - `BENCH_MODEL` ("125000,250000,500000,1000000"): checkpoint model sizes;
//! - `BENCH_SKIP`: comma list of sections to skip: `throughput`, `latency`,
//!   `recovery`, `model`, `sinks`;
//! - `BENCH_RETURN`: `minimal` sends `Prefer: return=minimal` with every
//!   ingest and watermark call (answers carry counts, not records; the
//!   sinks section's lag needs full answers: skip it then);
//! - `BENCH_URL`: an already running server (throughput only; its CPU and
//!   RSS are read when `BENCH_PID` is given);
//! - `STREAMFORGE_BIN` (target/release/streamforge), `BENCH_DIR` (a temp dir
//!   under target/), `STREAMFORGE_WORKLOAD` (an NDJSON workload file with 4
//!   partitions).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;

#[path = "http_support.rs"]
mod http_support;
use http_support::{binary, cpu_seconds, median, proc_kib, Conn, Server};
use streamforge::engine::{DeliveryRef, EventRef, Pipeline, Processor};

const PIPELINE: &str = r#"{"partitions":["p0","p1","p2","p3"],"windows":{"fixed_10s":{"kind":"fixed","size":10000},"sliding_10s_2s":{"kind":"sliding","size":10000,"step":2000},"session_50ms":{"kind":"session","gap":50}},"lateness":0}"#;
const PARTITIONS: usize = 4;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect()
}

fn skip(section: &str) -> bool {
    std::env::var("BENCH_SKIP")
        .unwrap_or_default()
        .split(',')
        .any(|s| s.trim() == section)
}

// ---------------------------------------------------------------- workload

fn workload(min_events: usize) -> PathBuf {
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
enum Req {
    /// NDJSON body and its number of deliveries.
    Events(Vec<u8>, usize),
    /// `POST /watermarks` body and the parsed advance.
    Advance(Vec<u8>, String, i64),
}

/// Per-partition request lists for the first `limit` deliveries.
fn requests(text: &str, limit: usize, b: usize) -> (Vec<Vec<Req>>, usize) {
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
fn client_requests(all: &[Vec<Req>], c: usize, clients: usize) -> Vec<Req> {
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

// ---------------------------------------------------------------- client

/// A minimal HTTP/1.1 keep-alive client (little CPU next to the server's).
/// Sends one workload request; with `BENCH_RETURN=minimal` it asks for
/// minimal answers (`Prefer: return=minimal`: counts, not records).
fn send(c: &mut Conn, r: &Req) -> u16 {
    static MINIMAL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    let h = *MINIMAL.get_or_init(|| match std::env::var("BENCH_RETURN").as_deref() {
        Ok("minimal") => "prefer: return=minimal\r\n",
        _ => "",
    });
    match r {
        Req::Events(b, _) => c.call_with("POST", "/events", "application/x-ndjson", h, b),
        Req::Advance(b, _, _) => c.call_with("POST", "/watermarks", "application/json", h, b),
    }
}

fn http_body(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut c = Conn::new(addr);
    let st = c.call(method, path, "application/json", body);
    (st, std::mem::take(&mut c.body))
}

// ---------------------------------------------------------------- server

/// Starts the release server on `db` with the bench pipeline.
fn start_server(dir: &Path, db: &Path, checkpoint_every: u64) -> Server {
    let pipeline = dir.join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).expect("write pipeline");
    Server::start(
        db,
        &[
            "--pipeline".as_ref(),
            pipeline.as_os_str(),
            "--checkpoint-every".as_ref(),
            checkpoint_every.to_string().as_ref(),
        ],
    )
}

// ---------------------------------------------------------------- runs

struct RunResult {
    secs: f64,
    events: usize,
    lat: Vec<f64>,
    /// Latency of the `POST /watermarks` calls.
    advance_lat: Vec<f64>,
    /// With `track`: when each call that produced changes was answered (it
    /// was committed before), and its last change's sequence.
    commits: Vec<(Instant, u64)>,
}

/// The last change sequence of an answer (`None` without changes).
fn last_change(body: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Seq {
        seq: u64,
    }
    #[derive(Deserialize)]
    struct Answer {
        changes: Vec<Seq>,
    }
    serde_json::from_slice::<Answer>(body)
        .ok()?
        .changes
        .last()
        .map(|c| c.seq)
}

/// The client modes of the throughput section (`BENCH_ALIGN`, default
/// "1,off"): a number is the slack of aligned clients (in event batches),
/// `off` free-running clients.
fn align_modes() -> Vec<Option<usize>> {
    std::env::var("BENCH_ALIGN")
        .unwrap_or_else(|_| "1,off".into())
        .split(',')
        .map(|m| m.trim().parse().ok())
        .collect()
}

fn mode_name(align: Option<usize>) -> String {
    align.map_or_else(
        || "free-running clients".to_string(),
        |k| format!("aligned clients (slack {k})"),
    )
}

/// Batches completed by each client, for aligned runs: a client waits
/// (on the condition variable) until every other client has completed at
/// least `k - slack` batches before it sends its batch `k`.
struct Aligner {
    done: std::sync::Mutex<Vec<usize>>,
    moved: std::sync::Condvar,
    slack: usize,
}

impl Aligner {
    fn wait_turn(&self, batch: usize) {
        let mut done = self.done.lock().expect("aligner");
        while done.iter().min().copied().unwrap_or(0) + self.slack < batch {
            done = self.moved.wait(done).expect("aligner");
        }
    }

    fn completed(&self, client: usize, batches: usize) {
        self.done.lock().expect("aligner")[client] = batches;
        self.moved.notify_all();
    }

    /// A client that has sent everything no longer holds the others back.
    fn finished(&self, client: usize) {
        self.completed(client, usize::MAX / 2);
    }
}

/// Sends every client's requests; `rate` (events/s over all clients) paces
/// the event batches when given. With `align` = Some(slack) each client
/// stays within `slack` batches of the slowest (producers in step, as when
/// the partitions carry live data: the file's event-time order, replayed
/// concurrently); free-running clients let one partition run far ahead in
/// event time, which holds the global watermark back and keeps every other
/// partition's buckets live (hundreds of thousands instead of a few
/// thousand).
fn drive(
    addr: &str,
    per_client: &[Vec<Req>],
    rate: Option<f64>,
    align: Option<usize>,
) -> RunResult {
    drive_tracked(addr, per_client, rate, align, false)
}

/// [`drive`]; with `track`, the answers' last change sequences are kept
/// (`RunResult::commits`).
fn drive_tracked(
    addr: &str,
    per_client: &[Vec<Req>],
    rate: Option<f64>,
    align: Option<usize>,
    track: bool,
) -> RunResult {
    let aligner = align.map(|slack| Aligner {
        done: std::sync::Mutex::new(vec![0; per_client.len()]),
        moved: std::sync::Condvar::new(),
        slack,
    });
    let aligner = aligner.as_ref();
    let events: usize = per_client
        .iter()
        .flatten()
        .map(|r| match r {
            Req::Events(_, n) => *n,
            Req::Advance(..) => 0,
        })
        .sum();
    let clients = per_client.len() as f64;
    let t0 = Instant::now();
    type Out = (Vec<f64>, Vec<f64>, Vec<(Instant, u64)>);
    let outs: Vec<Out> = std::thread::scope(|s| {
        let handles: Vec<_> = per_client
            .iter()
            .enumerate()
            .map(|(client, reqs)| {
                s.spawn(move || {
                    let mut conn = Conn::new(addr);
                    let mut lat = Vec::new();
                    let mut advance_lat = Vec::new();
                    let mut commits = Vec::new();
                    let mut sent = 0usize;
                    let mut batches = 0usize;
                    for r in reqs {
                        if let (Some(a), Req::Events(..)) = (aligner, r) {
                            a.wait_turn(batches);
                        }
                        if let (Some(rate), Req::Events(_, n)) = (rate, r) {
                            let due = Duration::from_secs_f64(sent as f64 / (rate / clients));
                            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                                std::thread::sleep(wait);
                            }
                            sent += n;
                        }
                        let t = Instant::now();
                        let st = send(&mut conn, r);
                        if track {
                            if let Some(seq) = last_change(&conn.body) {
                                commits.push((Instant::now(), seq));
                            }
                        }
                        if st != 200 {
                            panic!(
                                "status {st}: {}",
                                String::from_utf8_lossy(&conn.body[..conn.body.len().min(500)])
                            );
                        }
                        if matches!(r, Req::Events(..)) {
                            lat.push(t.elapsed().as_secs_f64());
                            batches += 1;
                            if let Some(a) = aligner {
                                a.completed(client, batches);
                            }
                        } else {
                            advance_lat.push(t.elapsed().as_secs_f64());
                        }
                    }
                    if let Some(a) = aligner {
                        a.finished(client);
                    }
                    (lat, advance_lat, commits)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut r = RunResult {
        secs,
        events,
        lat: Vec::new(),
        advance_lat: Vec::new(),
        commits: Vec::new(),
    };
    for (l, a, c) in outs {
        r.lat.extend(l);
        r.advance_lat.extend(a);
        r.commits.extend(c);
    }
    r
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn lat_summary(mut lat: Vec<f64>) -> String {
    lat.sort_by(|a, b| a.total_cmp(b));
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&lat, 0.5) * 1e3,
        pct(&lat, 0.99) * 1e3,
        lat.last().copied().unwrap_or(0.0) * 1e3
    )
}

fn mb(b: f64) -> f64 {
    b / 1e6
}

/// Engine-only rate of the same requests, fed in the same round-robin order
/// over partitions (deliveries parsed before timing, as benches/engine.rs).
fn engine_rate(all: &[Vec<Req>], events: usize) -> (f64, f64) {
    let order = client_requests(all, 0, 1);
    let mut rates = Vec::new();
    let mut parse_rates = Vec::new();
    for _ in 0..3 {
        let mut p = Processor::new(Pipeline::from_json(PIPELINE.as_bytes()).expect("pipeline"));
        let t = Instant::now();
        let parsed: Vec<Result<Vec<DeliveryRef<'_>>, (&str, i64)>> = order
            .iter()
            .map(|r| match r {
                Req::Events(b, _) => Ok(b
                    .split(|c| *c == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice::<DeliveryRef<'_>>(l).expect("delivery"))
                    .collect()),
                Req::Advance(_, p, w) => Err((p.as_str(), *w)),
            })
            .collect();
        let parse = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for r in parsed {
            match r {
                Ok(b) => {
                    p.ingest(b).expect("valid");
                }
                Err((part, w)) => {
                    p.advance(part, w).expect("valid");
                }
            }
        }
        let secs = t.elapsed().as_secs_f64();
        rates.push(events as f64 / secs);
        parse_rates.push(events as f64 / parse);
    }
    (median(rates), median(parse_rates))
}

// Over 120 lines: the bench's script, one section per measured shape, in the order they print.
fn main() {
    let n = env_usize("BENCH_EVENTS", 1_000_000);
    let clients = env_usize("BENCH_C", 4).clamp(1, PARTITIONS);
    let b = env_usize("BENCH_B", 1000).max(1);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let recovery = env_list("BENCH_RECOVERY", "100000,1000000");
    let model = env_list("BENCH_MODEL", "125000,250000,500000,1000000");
    let biggest = [n]
        .into_iter()
        .chain(recovery.iter().copied())
        .chain(model.iter().copied())
        .max()
        .unwrap_or(n);
    let path = workload(biggest);
    let text = std::fs::read_to_string(&path).expect("read the workload");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base_dir = std::env::var("BENCH_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
    std::fs::create_dir_all(&base_dir).ok();
    let tmp = tempfile::Builder::new()
        .prefix("bench-http-")
        .tempdir_in(&base_dir)
        .expect("temp dir");
    let url = std::env::var("BENCH_URL").ok();
    println!(
        "workload: {} | C={clients} B={b} | {} | pipeline: fixed 10s + sliding 10s/2s + session 50ms, lateness 0",
        path.display(),
        url.as_deref().map_or_else(|| binary().display().to_string(), str::to_string)
    );

    let (all, events) = requests(&text, n, b);
    let per_client: Vec<Vec<Req>> = (0..clients)
        .map(|c| client_requests(&all, c, clients))
        .collect();
    let calls: usize = per_client.iter().map(Vec::len).sum();
    println!("{events} deliveries in {calls} calls");

    // ---- throughput
    let mut max_rate = 0.0;
    if !skip("throughput") {
        let (engine, parse) = engine_rate(&all, events);
        println!(
            "engine only (same requests, parsed before timing; median of 3): {engine:.0} events/s; parse alone (1 thread): {parse:.0} events/s"
        );
        for (m, align) in align_modes().into_iter().enumerate() {
            println!("-- {}", mode_name(align));
            let mut rates = Vec::new();
            for run in 0..runs {
                let (addr, server) = match &url {
                    Some(u) => (
                        u.trim_start_matches("http://")
                            .trim_end_matches('/')
                            .to_string(),
                        None,
                    ),
                    None => {
                        let db = tmp.path().join(format!("tp{m}-{run}.db"));
                        let s = start_server(tmp.path(), &db, 1000);
                        (s.addr.clone(), Some(s))
                    }
                };
                let pid = server
                    .as_ref()
                    .map(Server::pid)
                    .or_else(|| std::env::var("BENCH_PID").ok()?.parse().ok());
                let (cpu0, rss0) = pid.map_or((0.0, 0), |p| (cpu_seconds(p), proc_kib(p, "VmRSS")));
                let r = drive(&addr, &per_client, None, align);
                let rate = r.events as f64 / r.secs;
                rates.push(rate);
                let mut line = format!(
                "run {}: {:.0} events/s ({} events in {:.2} s); batch latency {}; watermark call latency {}",
                run + 1,
                rate,
                r.events,
                r.secs,
                lat_summary(r.lat),
                lat_summary(r.advance_lat)
            );
                if let Some(p) = pid {
                    let rss = proc_kib(p, "VmRSS");
                    line += &format!(
                    "; server CPU {:.2} s ({:.2} cores); peak RSS {:.1} MB; RSS {:.0} B/event ({:.1} MB per 1M events)",
                    cpu_seconds(p) - cpu0,
                    (cpu_seconds(p) - cpu0) / r.secs,
                    mb(proc_kib(p, "VmHWM") as f64),
                    rss.saturating_sub(rss0) as f64 / r.events as f64,
                    mb(rss.saturating_sub(rss0) as f64 * 1e6 / r.events as f64),
                );
                }
                if let Some(s) = server {
                    line += &format!("; on disk {:.1} MB", mb(s.disk_bytes() as f64));
                    s.kill9();
                }
                println!("{line}");
            }
            let rate = median(rates.clone());
            if m == 0 {
                max_rate = rate;
            }
            println!(
            "throughput median of {runs}, {}: {rate:.0} events/s = {:.2} of the engine-only rate",
            mode_name(align),
            rate / engine
        );
        }
    }

    // ---- latency at half the maximum rate
    if !skip("latency") && url.is_none() {
        if max_rate == 0.0 {
            max_rate = env_usize("BENCH_MAX_RATE", 500_000) as f64;
        }
        let db = tmp.path().join("lat.db");
        let s = start_server(tmp.path(), &db, 1000);
        let align = align_modes().first().copied().flatten();
        let r = drive(&s.addr, &per_client, Some(max_rate / 2.0), align);
        println!(
            "at half the max rate ({:.0} events/s offered, first client mode): achieved {:.0} events/s; batch latency {}",
            max_rate / 2.0,
            r.events as f64 / r.secs,
            lat_summary(r.lat)
        );
        s.kill9();
    }

    // ---- recovery
    if !skip("recovery") && url.is_none() {
        for (k, &logged) in recovery.iter().enumerate() {
            let (all, ev) = requests(&text, logged, b);
            let pc: Vec<Vec<Req>> = (0..clients)
                .map(|c| client_requests(&all, c, clients))
                .collect();
            let db = tmp.path().join(format!("rec{k}.db"));
            let s = start_server(tmp.path(), &db, 0);
            drive(&s.addr, &pc, None, Some(1));
            let disk = s.disk_bytes();
            s.kill9();
            let mut times = Vec::new();
            for _ in 0..3 {
                let s = start_server(tmp.path(), &db, 0);
                times.push(s.ready_after.as_secs_f64());
                s.kill9();
            }
            let t = median(times);
            println!(
                "recovery after SIGKILL, {ev} logged events ({:.1} MB on disk): start to /readyz {t:.2} s (median of 3) = {:.2} s per 1M events",
                mb(disk as f64),
                t * 1e6 / ev as f64
            );
            if k + 1 == recovery.len() {
                // Through the service: checkpoint and restore timing.
                let s = start_server(tmp.path(), &db, 0);
                let t = Instant::now();
                let (st, meta) = http_body(&s.addr, "POST", "/checkpoints", b"");
                let take = t.elapsed().as_secs_f64();
                assert_eq!(st, 201, "{}", String::from_utf8_lossy(&meta));
                let meta: serde_json::Value = serde_json::from_slice(&meta).expect("json");
                let id = meta["id"].as_i64().expect("id");
                let (_, env) = http_body(&s.addr, "GET", &format!("/checkpoints/{id}"), b"");
                let t = Instant::now();
                let (st, body) = http_body(&s.addr, "POST", "/restore", &env);
                let restore = t.elapsed().as_secs_f64();
                assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
                let size = mb(env.len() as f64);
                println!(
                    "service checkpoint of {ev} events: {size:.1} MB; POST /checkpoints {take:.2} s ({:.3} s/MB); POST /restore {restore:.2} s ({:.3} s/MB)",
                    take / size,
                    restore / size
                );
                // Clean shutdown: the final checkpoint holds everything.
                s.terminate();
                let mut times = Vec::new();
                for _ in 0..3 {
                    let s = start_server(tmp.path(), &db, 0);
                    times.push(s.ready_after.as_secs_f64());
                    s.terminate();
                }
                println!(
                    "start from a {ev}-event checkpoint (clean shutdown): start to /readyz {:.2} s (median of 3)",
                    median(times)
                );
            }
        }
    }

    // ---- checkpoint size model (engine, in process)
    if !skip("model") {
        checkpoint_model(&text, &model, b);
    }

    // ---- webhook sinks
    if !skip("sinks") && url.is_none() {
        sinks(tmp.path(), &per_client, runs);
    }
}

// ---------------------------------------------------------------- sinks

/// A webhook receiver in this process (a thread per connection): answers
/// 200 at once and notes, per path, when each batch arrived and its
/// `X-Streamforge-Last` (it reads every body whole, and parses none).
struct Receiver {
    addr: String,
    seen: Arrivals,
}

/// Per path: when each batch arrived, and its last sequence.
type Arrivals =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<(Instant, u64)>>>>;

impl Receiver {
    fn start() -> Receiver {
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let shared = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || {
                    conn.set_nodelay(true).ok();
                    let mut w = conn.try_clone().expect("clone");
                    let mut r = BufReader::with_capacity(1 << 20, conn);
                    let mut body = Vec::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                        let (mut len, mut last) = (0usize, 0u64);
                        loop {
                            line.clear();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let h = line.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = h.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    len = v.trim().parse().unwrap_or(0);
                                } else if k.eq_ignore_ascii_case("x-streamforge-last") {
                                    last = v.trim().parse().unwrap_or(0);
                                }
                            }
                        }
                        body.resize(len, 0);
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        let now = Instant::now();
                        shared
                            .lock()
                            .expect("receiver")
                            .entry(path)
                            .or_insert_with(Vec::new)
                            .push((now, last));
                        if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Receiver { addr, seen }
    }

    fn last(&self, path: &str) -> u64 {
        self.seen
            .lock()
            .expect("receiver")
            .get(path)
            .and_then(|v| v.iter().map(|(_, l)| *l).max())
            .unwrap_or(0)
    }

    fn arrivals(&self, path: &str) -> Vec<(Instant, u64)> {
        self.seen
            .lock()
            .expect("receiver")
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

fn add_sink(addr: &str, name: &str, url: &str, start: &str) {
    let body = serde_json::json!({"name": name, "url": url, "stream": "changes",
        "start": start, "batch_size": 1000});
    let (st, b) = http_body(addr, "POST", "/sinks", body.to_string().as_bytes());
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&b));
}

fn changes_head(addr: &str) -> u64 {
    let (_, b) = http_body(addr, "GET", "/status", b"");
    let v: serde_json::Value = serde_json::from_slice(&b).expect("status");
    v["sequence"].as_u64().expect("sequence")
}

/// Waits (polling) until the receiver got `path` up to `head`; the time.
fn until_delivered(rcv: &Receiver, path: &str, head: u64) -> Instant {
    let t = Instant::now();
    while rcv.last(path) < head {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the sink did not deliver in 600 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    Instant::now()
}

/// The sinks section: the ingest rate of the throughput runs (aligned
/// clients) with and without one sink attached, in alternating order on
/// fresh servers (the sink: `changes` from the head, batches of 1,000, to a
/// receiver in this process); the delivery rate to that receiver of a sink
/// started at the beginning of a changelog already stored; and the lag
/// from commit (the answer of the call that produced a change) to the
/// receiver getting it, at half the rate without a sink.
// Over 120 lines: one measurement script (receiver, sink, load, lag), read top to bottom.
fn sinks(dir: &Path, per_client: &[Vec<Req>], runs: usize) {
    let rcv = Receiver::start();
    println!("-- webhook sinks (aligned clients; sink: changes, batches of 1000, receiver in this process)");
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut stored: Option<Server> = None;
    for run in 0..runs {
        let order = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for attached in order {
            let db = dir.join(format!("sink{run}-{attached}.db"));
            let s = start_server(dir, &db, 1000);
            let path = format!("/ingest{run}");
            if attached {
                add_sink(
                    &s.addr,
                    "bench",
                    &format!("http://{}{path}", rcv.addr),
                    "head",
                );
            }
            let cpu0 = cpu_seconds(s.pid());
            let r = drive(&s.addr, per_client, None, Some(1));
            let rate = r.events as f64 / r.secs;
            let cpu = cpu_seconds(s.pid()) - cpu0;
            let mut line = format!(
                "run {} {}: {:.0} events/s; batch latency {}; server CPU {cpu:.2} s ({:.2} µs per event)",
                run + 1,
                if attached { "with a sink" } else { "without" },
                rate,
                lat_summary(r.lat),
                cpu * 1e6 / r.events as f64
            );
            if attached {
                let done = Instant::now();
                let head = changes_head(&s.addr);
                let at = until_delivered(&rcv, &path, head);
                line += &format!(
                    "; the sink delivered all {head} changes {:.2} s after the last call",
                    at.duration_since(done).as_secs_f64()
                );
                with.push(rate);
            } else {
                without.push(rate);
            }
            println!("{line}");
            if !attached && stored.is_none() {
                stored = Some(s);
            } else {
                s.kill9();
            }
        }
    }
    let (w, wo) = (median(with), median(without));
    println!(
        "ingest median of {runs}: {wo:.0} events/s without a sink, {w:.0} with one: {:.3} of the rate without ({:+.1} %)",
        w / wo,
        (w / wo - 1.0) * 100.0
    );

    // Delivery rate: a stored changelog, a new sink from its start.
    let s = stored.expect("a server without a sink");
    let head = changes_head(&s.addr);
    let mut rates = Vec::new();
    for k in 0..runs {
        let path = format!("/deliver{k}");
        let cpu0 = cpu_seconds(s.pid());
        let t = Instant::now();
        add_sink(
            &s.addr,
            &format!("d{k}"),
            &format!("http://{}{path}", rcv.addr),
            "start",
        );
        let at = until_delivered(&rcv, &path, head);
        let secs = at.duration_since(t).as_secs_f64();
        let rate = head as f64 / secs;
        let cpu = cpu_seconds(s.pid()) - cpu0;
        println!(
            "delivery run {}: {head} changes in {secs:.2} s = {rate:.0} records/s; server CPU {cpu:.2} s ({:.2} µs per record)",
            k + 1,
            cpu * 1e6 / head as f64
        );
        rates.push(rate);
        let (st, _) = http_body(&s.addr, "DELETE", &format!("/sinks/d{k}"), b"");
        assert_eq!(st, 204);
    }
    println!(
        "delivery median of {runs}: {:.0} records/s (batches of 1000, one request in flight)",
        median(rates)
    );
    s.kill9();

    // Lag at half the rate.
    let db = dir.join("sink-lag.db");
    let s = start_server(dir, &db, 1000);
    add_sink(&s.addr, "lag", &format!("http://{}/lag", rcv.addr), "head");
    let r = drive_tracked(&s.addr, per_client, Some(wo / 2.0), Some(1), true);
    let head = changes_head(&s.addr);
    until_delivered(&rcv, "/lag", head);
    let arrivals = rcv.arrivals("/lag");
    let mut lags: Vec<f64> = r
        .commits
        .iter()
        .filter_map(|(t, seq)| {
            let (at, _) = arrivals.iter().find(|(_, last)| last >= seq)?;
            Some(at.saturating_duration_since(*t).as_secs_f64())
        })
        .collect();
    lags.sort_by(|a, b| a.total_cmp(b));
    println!(
        "end-to-end lag at half the rate ({:.0} events/s offered, achieved {:.0}): commit (answer) to receiver p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} calls with changes",
        wo / 2.0,
        r.events as f64 / r.secs,
        pct(&lags, 0.5) * 1e3,
        pct(&lags, 0.99) * 1e3,
        lags.last().copied().unwrap_or(0.0) * 1e3,
        lags.len()
    );
    s.kill9();
}

/// Envelope bytes for several sizes, with the watermark advancing (few live
/// buckets) and without any advance (every bucket stays live); fits
/// bytes = a·events + b·buckets + c by least squares.
fn checkpoint_model(text: &str, sizes: &[usize], b: usize) {
    let mut rows: Vec<[f64; 3]> = Vec::new();
    let mut take_per_mb = Vec::new();
    let mut restore_per_mb = Vec::new();
    println!(
        "{:>10} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "events", "advances", "live buckets", "MB", "take s", "restore s"
    );
    for &n in sizes {
        let (all, events) = requests(text, n, b);
        let order = client_requests(&all, 0, 1);
        for advances in [true, false] {
            let mut p = Processor::new(Pipeline::from_json(PIPELINE.as_bytes()).expect("pipeline"));
            for r in &order {
                match r {
                    Req::Events(body, _) => {
                        let d: Vec<DeliveryRef<'_>> = body
                            .split(|c| *c == b'\n')
                            .filter(|l| !l.is_empty())
                            .map(|l| serde_json::from_slice(l).expect("delivery"))
                            .collect();
                        p.ingest(d).expect("valid");
                    }
                    Req::Advance(_, part, w) if advances => {
                        p.advance(part, *w).expect("valid");
                    }
                    Req::Advance(..) => {}
                }
            }
            let t = Instant::now();
            let cp = p.checkpoint().expect("checkpoint");
            let take = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let back = Processor::restore(&cp, p.pipeline()).expect("restores");
            let restore = t.elapsed().as_secs_f64();
            drop(back);
            let size = cp.len() as f64;
            take_per_mb.push(take / mb(size));
            restore_per_mb.push(restore / mb(size));
            println!(
                "{events:>10} {:>10} {:>12} {:>10.1} {take:>10.3} {restore:>10.3}",
                if advances { "yes" } else { "no" },
                p.live_buckets(),
                mb(size)
            );
            rows.push([events as f64, p.live_buckets() as f64, size]);
        }
    }
    if let Some((a, bb, c)) = fit(&rows) {
        println!(
            "checkpoint model: {a:.1} bytes/event + {bb:.1} bytes/live bucket + {:.0} bytes; take {:.3} s/MB, restore {:.3} s/MB (medians)",
            c,
            median(take_per_mb),
            median(restore_per_mb)
        );
    }
}

/// Least squares for y = a·x1 + b·x2 + c.
fn fit(rows: &[[f64; 3]]) -> Option<(f64, f64, f64)> {
    if rows.len() < 3 {
        return None;
    }
    // Normal equations, 3x3, solved by Cramer's rule.
    let mut m = [[0.0f64; 3]; 3];
    let mut v = [0.0f64; 3];
    for r in rows {
        let x = [r[0], r[1], 1.0];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += x[i] * x[j];
            }
            v[i] += x[i] * r[2];
        }
    }
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&m);
    if d.abs() < 1e-9 {
        return None;
    }
    let solve = |k: usize| {
        let mut mk = m;
        for i in 0..3 {
            mk[i][k] = v[i];
        }
        det(&mk) / d
    };
    Some((solve(0), solve(1), solve(2)))
}
