//! The stream sent in ten tenths, with a line of figures after each, and a
//! `kill -9` and restart after the first and the last tenth.

use std::time::{Duration, Instant};

use super::args::Args;
use super::http_support::{cpu_seconds, proc_kib, Conn};
use super::report::mb;
use super::server::{checkpoint, metric, post_events, post_watermark, start, Checkpoint};
use super::setup::Bench;
use super::workload::Workload;

/// One tenth's figures.
pub struct Tenth {
    pub events: u64,
    pub rate: f64,
    pub rss: u64,
    pub ck: Checkpoint,
    pub disk: u64,
    pub cpu: f64,
    /// `GET /checkpoints` seconds.
    pub list_secs: f64,
}

pub struct Restart {
    pub after_events: u64,
    pub ready: f64,
    pub rss_ready: u64,
}

/// The stream and what the tenths carry over: the batch being filled, the
/// previous tenth's checkpoint (deleted after the next) and CPU seconds.
struct Stream {
    w: Workload,
    body: Vec<u8>,
    pending: usize,
    prev_ckpt: Option<i64>,
    cpu_prev: f64,
}

/// Sends the whole stream in ten tenths, measuring after each and
/// restarting the server after the first and the last.
pub fn ten_tenths(a: &Args, b: &mut Bench) -> (Vec<Tenth>, Vec<Restart>) {
    let mut tenths: Vec<Tenth> = Vec::new();
    let mut restarts: Vec<Restart> = Vec::new();

    println!();
    println!(
        "{:>11} {:>10} {:>8} | {:>10} {:>10} {:>8} {:>10} | {:>9} {:>7} | {:>8} {:>7} {:>7}",
        "events",
        "events/s",
        "RSS MB",
        "ckpt wr MB",
        "wchar MB",
        "ckpt s",
        "envelope",
        "disk MB",
        "disk B/e",
        "CPU s",
        "+CPU s",
        "client%"
    );

    let mut s = Stream {
        w: Workload::new(a.partitions, a.keys),
        body: Vec::with_capacity(a.batch * 128),
        pending: 0,
        prev_ckpt: None,
        cpu_prev: 0.0,
    };
    for k in 1..=10u64 {
        let end = a.events * k / 10;
        let start_events = s.w.next;
        let t = Instant::now();
        let in_calls = send_until(a, &mut b.conn, &mut s, end);
        let secs = t.elapsed().as_secs_f64();
        let events = s.w.next;
        let rate = (events - start_events) as f64 / secs;
        let client = 1.0 - in_calls.as_secs_f64() / secs;
        tenths.push(measure(b, &mut s, k, rate, client));

        if k == 1 || k == 10 {
            restarts.push(kill_and_restart(a, b, &mut s));
        }
    }
    (tenths, restarts)
}

/// Sends the stream up to event `end` (the last batch cut there); the time
/// spent in the calls.
fn send_until(a: &Args, conn: &mut Conn, s: &mut Stream, end: u64) -> Duration {
    let mut in_calls = Duration::ZERO;
    while s.w.next < end {
        let advance = s.w.deliver(&mut s.body);
        s.pending += 1;
        if s.pending == a.batch || advance || s.w.next == end {
            let c = Instant::now();
            post_events(conn, &s.body);
            s.body.clear();
            s.pending = 0;
            if advance {
                for p in 0..a.partitions {
                    post_watermark(conn, p, s.w.watermark());
                }
            }
            in_calls += c.elapsed();
        }
    }
    in_calls
}

/// Tenth `k`'s figures (a checkpoint, the listing, the previous checkpoint
/// deleted), printed and written.
fn measure(b: &mut Bench, s: &mut Stream, k: u64, rate: f64, client: f64) -> Tenth {
    let events = s.w.next;
    let conn = &mut b.conn;
    let pid = b.server.get().pid();
    let rss = proc_kib(pid, "VmRSS");
    let ck = checkpoint(conn, pid);
    let list_secs = {
        let t = Instant::now();
        let st = conn.call("GET", "/checkpoints", "", b"");
        assert!(st == 200, "GET /checkpoints: {st}");
        t.elapsed().as_secs_f64()
    };
    if let Some(id) = s.prev_ckpt.replace(ck.created.id) {
        let st = conn.call("DELETE", &format!("/checkpoints/{id}"), "", b"");
        if st != 204 && st != 200 {
            eprintln!("DELETE /checkpoints/{id}: {st} (kept)");
        }
    }
    let disk = b.server.get().disk_bytes();
    let cpu = b.cpu_before + cpu_seconds(pid);
    let cpu_tenth = cpu - s.cpu_prev;
    s.cpu_prev = cpu;
    println!(
        "{:>11} {:>10.0} {:>8.1} | {:>10.1} {:>10.1} {:>8.3} {:>10.1} | {:>9.1} {:>7.1} | {:>8.1} {:>7.1} {:>6.1}%",
        events,
        rate,
        mb(rss as f64),
        mb(ck.write_bytes as f64),
        mb(ck.wchar as f64),
        ck.secs,
        mb(ck.created.bytes as f64),
        mb(disk as f64),
        disk as f64 / events as f64,
        cpu,
        cpu_tenth,
        client * 100.0
    );
    b.report.json(serde_json::json!({
        "kind": "tenth", "tenth": k, "events": events, "events_per_sec": rate,
        "rss_bytes": rss, "checkpoint_id": ck.created.id,
        "checkpoint_write_bytes": ck.write_bytes, "checkpoint_wchar": ck.wchar,
        "checkpoint_secs": ck.secs, "envelope_bytes": ck.created.bytes,
        "disk_bytes": disk, "disk_bytes_per_event": disk as f64 / events as f64,
        "cpu_secs": cpu, "cpu_secs_tenth": cpu_tenth, "client_share": client,
        "list_secs": list_secs,
    }));
    println!("{:>11} GET /checkpoints in {list_secs:.4} s", "");
    Tenth {
        events,
        rate,
        rss,
        ck,
        disk,
        cpu,
        list_secs,
    }
}

/// `kill -9` (with `--kill-during-merge`, once a large enough merge of the
/// id index runs) and a new server on the same database; the run goes on
/// with it.
fn kill_and_restart(a: &Args, b: &mut Bench, s: &mut Stream) -> Restart {
    let merging_seen = a
        .kill_during_merge
        .and_then(|min| until_merging(a, &mut b.conn, s, min));
    let old = b.server.take();
    b.cpu_before += cpu_seconds(old.pid());
    old.kill9();
    b.server.0 = Some(start(&b.bin, &b.db, &b.pipeline));
    let srv = b.server.get();
    let ready = srv.ready_after.as_secs_f64();
    let rss_ready = proc_kib(srv.pid(), "VmRSS");
    println!(
        "{:>11} restart: kill -9, spawn to /readyz 200 in {ready:.3} s; new pid {}, RSS {:.1} MB when ready",
        "",
        srv.pid(),
        mb(rss_ready as f64)
    );
    b.report.json(serde_json::json!({
        "kind": "restart", "after_events": s.w.next, "ready_secs": ready,
        "rss_bytes_ready": rss_ready, "killed_during_merge_of": merging_seen,
    }));
    let restart = Restart {
        after_events: s.w.next,
        ready,
        rss_ready,
    };
    b.conn = Conn::new(&srv.addr);
    restart
}

/// More of the stream (at most another tenth's worth) until `/metrics`
/// shows an id-index merge of at least `min` entries; its size if seen.
fn until_merging(a: &Args, conn: &mut Conn, s: &mut Stream, min: u64) -> Option<u64> {
    let mut merging_seen = None;
    let cap = s.w.next + a.events / 10;
    loop {
        let m = metric(conn, "streamforge_id_index_merging");
        if m >= min as f64 {
            merging_seen = Some(m as u64);
            break;
        }
        if s.w.next >= cap {
            break;
        }
        let mut n = 0;
        loop {
            let advance = s.w.deliver(&mut s.body);
            n += 1;
            if n == a.batch || advance {
                post_events(conn, &s.body);
                s.body.clear();
                if advance {
                    for p in 0..a.partitions {
                        post_watermark(conn, p, s.w.watermark());
                    }
                }
                break;
            }
        }
    }
    match merging_seen {
        Some(m) => println!(
            "{:>11} kill during a merge of {m} id-index entries, after {} events",
            "", s.w.next
        ),
        None => println!(
            "{:>11} no merge of >= {min} entries seen up to {} events: killed anyway",
            "", s.w.next
        ),
    }
    merging_seen
}
