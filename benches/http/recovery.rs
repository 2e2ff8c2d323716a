//! The recovery section: start to `/readyz` 200 after SIGKILL with N
//! logged events since the last checkpoint (`--checkpoint-every 0`); for
//! the last N, `POST /checkpoints` and `POST /restore` through the service
//! and the start after a clean shutdown (final checkpoint).

use std::path::Path;
use std::time::Instant;

use super::drive::{drive, http_body, start_server};
use super::figures::mb;
use super::http_support::median;
use super::workload::{client_requests, requests, Req};

/// Prints the section for each count of logged events in `logged_counts`
/// (`BENCH_RECOVERY`), with the workload `text` in batches of `b` from
/// `clients` clients, on databases in `dir`.
pub fn recovery(text: &str, logged_counts: &[usize], b: usize, clients: usize, dir: &Path) {
    for (k, &logged) in logged_counts.iter().enumerate() {
        let (all, ev) = requests(text, logged, b);
        let pc: Vec<Vec<Req>> = (0..clients)
            .map(|c| client_requests(&all, c, clients))
            .collect();
        let db = dir.join(format!("rec{k}.db"));
        let s = start_server(dir, &db, 0);
        drive(&s.addr, &pc, None, Some(1));
        let disk = s.disk_bytes();
        s.kill9();
        let mut times = Vec::new();
        for _ in 0..3 {
            let s = start_server(dir, &db, 0);
            times.push(s.ready_after.as_secs_f64());
            s.kill9();
        }
        let t = median(times);
        println!(
            "recovery after SIGKILL, {ev} logged events ({:.1} MB on disk): start to /readyz {t:.2} s (median of 3) = {:.2} s per 1M events",
            mb(disk as f64),
            t * 1e6 / ev as f64
        );
        if k + 1 == logged_counts.len() {
            through_the_service(dir, &db, ev);
        }
    }
}

/// Checkpoint and restore timing through the service on `db` (of `ev`
/// logged events), then the start from its final checkpoint after a clean
/// shutdown.
fn through_the_service(dir: &Path, db: &Path, ev: usize) {
    let s = start_server(dir, db, 0);
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
        let s = start_server(dir, db, 0);
        times.push(s.ready_after.as_secs_f64());
        s.terminate();
    }
    println!(
        "start from a {ev}-event checkpoint (clean shutdown): start to /readyz {:.2} s (median of 3)",
        median(times)
    );
}
