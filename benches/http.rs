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
//!
//! This file reads the environment and runs the sections in order; the
//! rest is in `benches/http/`: the workload and its calls (`workload.rs`),
//! the client threads and the server they drive (`drive.rs`), percentiles
//! and units (`figures.rs`), and one file per section beside the latency
//! one here (`throughput.rs`, `recovery.rs`, `model.rs`, `sinks.rs`).

use std::path::{Path, PathBuf};

#[path = "support/http.rs"]
mod http_support;

#[path = "http/drive.rs"]
mod drive;
#[path = "http/figures.rs"]
mod figures;
#[path = "http/model.rs"]
mod model;
#[path = "http/recovery.rs"]
mod recovery;
#[path = "http/sinks.rs"]
mod sinks;
#[path = "http/throughput.rs"]
mod throughput;
#[path = "http/workload.rs"]
mod workload;

use drive::{align_modes, drive, start_server};
use figures::lat_summary;
use http_support::binary;
use workload::{client_requests, requests, workload, Req, PARTITIONS};

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
        max_rate =
            throughput::throughput(&all, events, &per_client, runs, url.as_deref(), tmp.path());
    }

    // ---- latency at half the maximum rate
    if !skip("latency") && url.is_none() {
        latency(tmp.path(), &per_client, max_rate);
    }

    // ---- recovery
    if !skip("recovery") && url.is_none() {
        recovery::recovery(&text, &recovery, b, clients, tmp.path());
    }

    // ---- checkpoint size model (engine, in process)
    if !skip("model") {
        model::checkpoint_model(&text, &model, b);
    }

    // ---- webhook sinks
    if !skip("sinks") && url.is_none() {
        sinks::sinks(tmp.path(), &per_client, runs);
    }
}

/// Latency at half the maximum rate (`max_rate`: the throughput section's,
/// else `BENCH_MAX_RATE`, 500,000), the first client mode.
fn latency(dir: &Path, per_client: &[Vec<Req>], mut max_rate: f64) {
    if max_rate == 0.0 {
        max_rate = env_usize("BENCH_MAX_RATE", 500_000) as f64;
    }
    let db = dir.join("lat.db");
    let s = start_server(dir, &db, 1000);
    let align = align_modes().first().copied().flatten();
    let r = drive(&s.addr, per_client, Some(max_rate / 2.0), align);
    println!(
        "at half the max rate ({:.0} events/s offered, first client mode): achieved {:.0} events/s; batch latency {}",
        max_rate / 2.0,
        r.events as f64 / r.secs,
        lat_summary(r.lat)
    );
    s.kill9();
}
