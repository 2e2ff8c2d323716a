//! The webhook sinks section (docs/sinks.md): a receiver in this process,
//! the ingest rate with one `changes` sink attached against the rate
//! without, the delivery rate of a sink, and the lag from commit to
//! receiver at half the rate.

use std::path::Path;
use std::time::{Duration, Instant};

use super::drive::{drive, drive_tracked, http_body, start_server};
use super::figures::{lat_summary, pct};
use super::http_support::{cpu_seconds, median, Server};
use super::workload::Req;

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
pub fn sinks(dir: &Path, per_client: &[Vec<Req>], runs: usize) {
    let rcv = Receiver::start();
    println!("-- webhook sinks (aligned clients; sink: changes, batches of 1000, receiver in this process)");
    let (wo, stored) = ingest_with_and_without(&rcv, dir, per_client, runs);
    delivery_rate(&rcv, stored, runs);
    lag_at_half_rate(&rcv, dir, per_client, wo);
}

/// The ingest runs with and without a sink, alternating; the median rate
/// without, and a server of a run without (its changelog stored).
fn ingest_with_and_without(
    rcv: &Receiver,
    dir: &Path,
    per_client: &[Vec<Req>],
    runs: usize,
) -> (f64, Server) {
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
                let at = until_delivered(rcv, &path, head);
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
    (wo, stored.expect("a server without a sink"))
}

/// Delivery rate: a stored changelog, a new sink from its start.
fn delivery_rate(rcv: &Receiver, s: Server, runs: usize) {
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
        let at = until_delivered(rcv, &path, head);
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
}

/// Lag at half the rate without a sink (`wo`).
fn lag_at_half_rate(rcv: &Receiver, dir: &Path, per_client: &[Vec<Req>], wo: f64) {
    let db = dir.join("sink-lag.db");
    let s = start_server(dir, &db, 1000);
    add_sink(&s.addr, "lag", &format!("http://{}/lag", rcv.addr), "head");
    let r = drive_tracked(&s.addr, per_client, Some(wo / 2.0), Some(1), true);
    let head = changes_head(&s.addr);
    until_delivered(rcv, "/lag", head);
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
