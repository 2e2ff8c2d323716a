//! The throughput section: events/s with C concurrent clients in each
//! client mode (`BENCH_ALIGN`), batch and watermark call latency, the
//! server's CPU, RSS and disk, against the engine-only rate of the same
//! requests in this process.

use std::path::Path;
use std::time::Instant;

use streamforge::engine::{DeliveryRef, Pipeline, Processor};

use super::drive::{align_modes, drive, mode_name, start_server};
use super::figures::{lat_summary, mb};
use super::http_support::{cpu_seconds, median, proc_kib, Server};
use super::workload::{client_requests, Req, PIPELINE};

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

/// Prints the section; the median rate of the first client mode (0 with
/// none). `url`: `BENCH_URL`, else a server per run on a database in `dir`.
pub fn throughput(
    all: &[Vec<Req>],
    events: usize,
    per_client: &[Vec<Req>],
    runs: usize,
    url: Option<&str>,
    dir: &Path,
) -> f64 {
    let mut max_rate = 0.0;
    let (engine, parse) = engine_rate(all, events);
    println!(
        "engine only (same requests, parsed before timing; median of 3): {engine:.0} events/s; parse alone (1 thread): {parse:.0} events/s"
    );
    for (m, align) in align_modes().into_iter().enumerate() {
        println!("-- {}", mode_name(align));
        let mut rates = Vec::new();
        for run in 0..runs {
            let (addr, server) = match url {
                Some(u) => (
                    u.trim_start_matches("http://")
                        .trim_end_matches('/')
                        .to_string(),
                    None,
                ),
                None => {
                    let db = dir.join(format!("tp{m}-{run}.db"));
                    let s = start_server(dir, &db, 1000);
                    (s.addr.clone(), Some(s))
                }
            };
            let pid = server
                .as_ref()
                .map(Server::pid)
                .or_else(|| std::env::var("BENCH_PID").ok()?.parse().ok());
            let (cpu0, rss0) = pid.map_or((0.0, 0), |p| (cpu_seconds(p), proc_kib(p, "VmRSS")));
            let r = drive(&addr, per_client, None, align);
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
    max_rate
}
