//! Growth with the number of events received in a lifetime (issue 23,
//! point 5): a service that runs for months may grow its memory, its
//! checkpoint work and its restart time with its live state, never with the
//! number of events it has received. This bench feeds one real
//! `streamforge serve` a long stream whose live state is bounded (1,000 keys,
//! watermarks close behind the events) and prints, at every tenth of the
//! stream, what grows.
//!
//! ```sh
//! cargo bench --bench growth -- --events 200000            # quick: seconds
//! cargo bench --bench growth -- --events 8000000 --out target/growth-8m.jsonl
//! cargo bench --bench growth                               # 50,000,000 events
//! ```
//!
//! Flags (numbers may contain `_`): `--events N` (50,000,000), `--partitions
//! P` (1), `--keys K` (1,000), `--batch B` (1,000 deliveries per `POST
//! /events`), `--out FILE` (the figures also as JSON lines, one object per
//! tenth, restart, download and summary), `--bin PATH` (default:
//! `STREAMFORGE_BIN` or target/release/streamforge, built with `cargo build
//! --release --bin streamforge` when missing), `--kill-during-merge[=N]`
//! (each `kill -9` lands while the id index merges runs of at least N
//! entries, default 1,000,000: see below).
//!
//! The events are generated here, in the shape of `benches/gen_workload.py`
//! (its defaults: disorder 500, an advance every 1,000 events, no duplicates,
//! no late events): event i has id `e{i}`, key `k<uniform 0..K-1>`, value
//! uniform in [-1000, 1000] and timestamp T0 + i - jitter (jitter uniform in
//! [0, 500]); partitions round-robin with consecutive offsets; after every
//! 1,000th event every partition is advanced to (max timestamp - 500). The
//! random numbers come from a SplitMix64 of seed 42, not Python's: the same
//! shape, not the same file.
//!
//! The server runs on a fresh database in a temporary directory under
//! `BENCH_DIR` (default target/; a real disk, so `write_bytes` counts),
//! with the pipeline: partitions p0..p{P-1}, windows fixed 10 s, sliding
//! 10 s / 2 s, session 1 s, lateness 0; and its default flags otherwise
//! (automatic checkpoints every 1,000 logged commands, 3 kept), with
//! `MALLOC_ARENA_MAX=2` as the Dockerfile sets it (override it in the
//! environment). The events go as NDJSON batches of B (`Prefer:
//! return=minimal`, as `streamforge send` sends them), the pending batch is
//! sent before each advance, and each advance is one `POST /watermarks`: one
//! call at a time, in order, on one keep-alive connection.
//!
//! At every tenth of the stream one line: events so far; ingest rate over
//! the tenth (events / wall time of its calls, the automatic checkpoints
//! taken meanwhile included); server RSS (`VmRSS`); one `POST
//! /checkpoints`: the bytes the server wrote meanwhile (`write_bytes` of
//! `/proc/PID/io`; and `wchar`), its time and the envelope's `bytes`;
//! bytes on disk (database, -wal, -shm) and per event; server CPU seconds
//! (all server processes of the run; and of this tenth). The previous
//! tenth's checkpoint is deleted after each new one (checkpoints made with
//! `POST /checkpoints` are kept until deleted: ten envelopes would be the
//! bench's own growth, not the service's).
//!
//! After the first and the last tenth: `kill -9` and a new server on the same
//! database; spawn to `/readyz` 200 is the restart time, and the run goes
//! on with the new process. With `--kill-during-merge`, the bench first
//! goes on sending batches (of the same stream, counted in the next tenth)
//! until `/metrics` shows `streamforge_id_index_merging` of at least N
//! entries (a merge of the id index's runs in progress on the server's
//! merge thread), at most another tenth's worth, and kills it then.
//! `GET /checkpoints` (the listing) is timed at every tenth too. At the end: `GET /checkpoints/{id}` of the last
//! checkpoint into a file while the server's RSS is sampled (and its peak
//! kept by the kernel: `VmHWM` after resetting it with
//! `/proc/PID/clear_refs`), the file's SHA-256 against the one the `POST`
//! answered, `streamforge verify FILE` and its time, then a clean shutdown
//! (SIGTERM) and its time.
//!
//! The summary prints the issue's targets beside the figures; it asserts
//! nothing. MB are 10^6 bytes.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[path = "http_support.rs"]
mod http_support;
use http_support::{binary, cpu_seconds, pipeline_json, proc_io, proc_kib, Conn, Server};

/// The generator's first timestamp (`gen_workload.py`'s T0).
const T0: i64 = 1_700_000_000_000;
/// Max ms an event lags behind arrival order (`--disorder`).
const DISORDER: i64 = 500;
/// Advance every partition after this many events (`--wm-every`).
const WM_EVERY: u64 = 1000;
const SEED: u64 = 42;
/// How often the server's RSS is sampled during the download.
const SAMPLE_EVERY: Duration = Duration::from_millis(2);

const USAGE: &str = "usage: cargo bench --bench growth -- [--events N] [--partitions P] \
[--keys K] [--batch B] [--out FILE] [--bin PATH] [--kill-during-merge[=MIN_ENTRIES]]";

// ---------------------------------------------------------------- arguments

struct Args {
    events: u64,
    partitions: usize,
    keys: u64,
    batch: usize,
    out: Option<PathBuf>,
    bin: Option<PathBuf>,
    /// `--kill-during-merge[=N]`: each `kill -9` waits for an id-index
    /// merge of at least N entries (default 1,000,000) to be running.
    kill_during_merge: Option<u64>,
}

fn parse_args() -> Args {
    let mut a = Args {
        events: 50_000_000,
        partitions: 1,
        keys: 1000,
        batch: 1000,
        out: None,
        bin: None,
        kill_during_merge: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        // `cargo bench` passes `--bench`.
        if arg == "--bench" {
            continue;
        }
        if let Some(rest) = arg.strip_prefix("--kill-during-merge") {
            a.kill_during_merge = Some(match rest.strip_prefix('=') {
                Some(n) => n.replace('_', "").parse().unwrap_or_else(|_| {
                    panic!("--kill-during-merge: not a number: {n:?}\n{USAGE}")
                }),
                None if rest.is_empty() => 1_000_000,
                None => panic!("unknown flag {arg}\n{USAGE}"),
            });
            continue;
        }
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| panic!("{flag} needs a value\n{USAGE}"))
        };
        let num = |v: String| -> u64 {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: not a number: {v:?}\n{USAGE}"))
        };
        match flag.as_str() {
            "--events" => a.events = num(value()),
            "--partitions" => a.partitions = num(value()) as usize,
            "--keys" => a.keys = num(value()),
            "--batch" => a.batch = num(value()) as usize,
            "--out" => a.out = Some(PathBuf::from(value())),
            "--bin" => a.bin = Some(PathBuf::from(value())),
            _ => panic!("unknown argument {arg:?}\n{USAGE}"),
        }
    }
    assert!(
        a.events >= 10,
        "--events must be at least 10 (one per tenth)"
    );
    assert!(a.partitions >= 1, "--partitions must be at least 1");
    assert!(a.keys >= 1, "--keys must be at least 1");
    assert!(a.batch >= 1, "--batch must be at least 1");
    a
}

/// `--bin`, else `STREAMFORGE_BIN` or the release binary, which is built
/// when missing.
fn server_binary(a: &Args) -> PathBuf {
    if let Some(b) = &a.bin {
        return b.clone();
    }
    let bin = binary();
    if !bin.exists() && std::env::var_os("STREAMFORGE_BIN").is_none() {
        println!(
            "{} is missing: cargo build --release --bin streamforge",
            bin.display()
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--bin", "streamforge"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build --release");
        assert!(status.success(), "cargo build --release failed");
    }
    bin
}

// ---------------------------------------------------------------- workload

/// SplitMix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2^-40 here).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in lo..=hi.
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

/// `gen_workload.py`'s stream (defaults: no duplicates, no late events),
/// generated one event at a time.
struct Workload {
    rng: Rng,
    keys: u64,
    offsets: Vec<u64>,
    max_ts: i64,
    /// The next event's index.
    next: u64,
}

impl Workload {
    fn new(partitions: usize, keys: u64) -> Workload {
        Workload {
            rng: Rng(SEED),
            keys,
            offsets: vec![0; partitions],
            max_ts: i64::MIN,
            next: 0,
        }
    }

    /// Appends the next delivery as an NDJSON line of `POST /events`;
    /// returns whether the partitions are to be advanced after it (to
    /// [`Workload::watermark`]).
    fn deliver(&mut self, body: &mut Vec<u8>) -> bool {
        let i = self.next;
        let p = (i % self.offsets.len() as u64) as usize;
        // the generator's order of draws: key, jitter, value
        let key = self.rng.below(self.keys);
        let ts = T0 + i as i64 - self.rng.between(0, DISORDER);
        let value = self.rng.between(-1000, 1000);
        self.max_ts = self.max_ts.max(ts);
        writeln!(
            body,
            r#"{{"partition":"p{p}","offset":{},"event":{{"id":"e{i}","key":"k{key}","timestamp":{ts},"value":{value}}}}}"#,
            self.offsets[p]
        )
        .expect("write to a Vec");
        self.offsets[p] += 1;
        self.next += 1;
        self.next.is_multiple_of(WM_EVERY)
    }

    fn watermark(&self) -> i64 {
        self.max_ts - DISORDER
    }
}

// ---------------------------------------------------------------- server

/// The running server, killed (SIGKILL) if the bench ends early.
struct Running(Option<Server>);

impl Running {
    fn get(&self) -> &Server {
        self.0.as_ref().expect("a server")
    }

    fn take(&mut self) -> Server {
        self.0.take().expect("a server")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            s.child.kill().ok();
            s.child.wait().ok();
        }
    }
}

fn start(bin: &Path, db: &Path, pipeline: &Path) -> Server {
    Server::start_bin(bin, db, &["--pipeline".as_ref(), pipeline.as_os_str()])
}

const MINIMAL: &str = "prefer: return=minimal\r\n";

fn post_events(c: &mut Conn, body: &[u8]) {
    let st = c.call_with("POST", "/events", "application/x-ndjson", MINIMAL, body);
    assert!(
        st == 200,
        "POST /events: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
}

fn post_watermark(c: &mut Conn, partition: usize, watermark: i64) {
    let body = format!(r#"{{"partition":"p{partition}","watermark":{watermark}}}"#);
    let st = c.call_with(
        "POST",
        "/watermarks",
        "application/json",
        MINIMAL,
        body.as_bytes(),
    );
    assert!(
        st == 200,
        "POST /watermarks: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
}

#[derive(Deserialize)]
struct Created {
    id: i64,
    digest: String,
    bytes: u64,
}

/// One `POST /checkpoints` and what the server wrote for it.
struct Checkpoint {
    created: Created,
    secs: f64,
    write_bytes: u64,
    wchar: u64,
}

fn checkpoint(c: &mut Conn, pid: u32) -> Checkpoint {
    let (w0, c0) = (proc_io(pid, "write_bytes"), proc_io(pid, "wchar"));
    let t = Instant::now();
    let st = c.call("POST", "/checkpoints", "application/json", b"");
    let secs = t.elapsed().as_secs_f64();
    let (w1, c1) = (proc_io(pid, "write_bytes"), proc_io(pid, "wchar"));
    assert!(
        st == 201 || st == 200,
        "POST /checkpoints: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
    let created: Created = serde_json::from_slice(&c.body).expect("the POST /checkpoints answer");
    Checkpoint {
        created,
        secs,
        write_bytes: w1.saturating_sub(w0),
        wchar: c1.saturating_sub(c0),
    }
}

// ---------------------------------------------------------------- output

fn mb(b: f64) -> f64 {
    b / 1e6
}

/// Prints to stdout and, with `--out`, writes JSON lines.
struct Report {
    out: Option<BufWriter<std::fs::File>>,
}

impl Report {
    fn json(&mut self, v: serde_json::Value) {
        if let Some(f) = &mut self.out {
            serde_json::to_writer(&mut *f, &v).expect("write --out");
            f.write_all(b"\n").expect("write --out");
            f.flush().expect("write --out");
        }
    }
}

/// One tenth's figures.
struct Tenth {
    events: u64,
    rate: f64,
    rss: u64,
    ck: Checkpoint,
    disk: u64,
    cpu: f64,
    /// `GET /checkpoints` seconds.
    list_secs: f64,
}

/// A sample of the server's `/metrics` (0 when absent).
fn metric(c: &mut Conn, name: &str) -> f64 {
    let st = c.call("GET", "/metrics", "", b"");
    assert!(st == 200, "GET /metrics: {st}");
    let text = String::from_utf8_lossy(&c.body);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

struct Restart {
    after_events: u64,
    ready: f64,
    rss_ready: u64,
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

// ---------------------------------------------------------------- main

// Over 120 lines: the bench's script, its phases in order over one server and one set of tallies.
fn main() {
    let a = parse_args();
    let bin = server_binary(&a);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base_dir = std::env::var("BENCH_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
    std::fs::create_dir_all(&base_dir).expect("create BENCH_DIR");
    let tmp = tempfile::Builder::new()
        .prefix("bench-growth-")
        .tempdir_in(&base_dir)
        .expect("temp dir");
    let db = tmp.path().join("growth.db");
    let pipeline = tmp.path().join("pipeline.json");
    std::fs::write(&pipeline, pipeline_json(a.partitions)).expect("write the pipeline");
    let mut report = Report {
        out: a.out.as_ref().map(|p| {
            BufWriter::new(
                std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            )
        }),
    };

    println!(
        "growth: {} events, {} partition(s), {} keys, batches of {}, advance every {WM_EVERY} events (disorder {DISORDER} ms)",
        a.events, a.partitions, a.keys, a.batch
    );
    println!(
        "server: {} serve --db {} --pipeline (fixed 10s, sliding 10s/2s, session 1s, lateness 0), default flags; MALLOC_ARENA_MAX={}",
        bin.display(),
        db.display(),
        std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "2".into())
    );
    report.json(serde_json::json!({
        "kind": "config", "events": a.events, "partitions": a.partitions, "keys": a.keys,
        "batch": a.batch, "bin": bin.display().to_string(),
        "pipeline": serde_json::from_str::<serde_json::Value>(&pipeline_json(a.partitions)).expect("json"),
    }));

    let first = start(&bin, &db, &pipeline);
    println!(
        "started pid {} on {} (ready after {:.3} s)",
        first.pid(),
        first.addr,
        first.ready_after.as_secs_f64()
    );
    let mut server = Running(Some(first));
    let mut conn = Conn::new(&server.get().addr);
    let mut cpu_before = 0.0; // CPU seconds of the killed servers
    let mut cpu_prev = 0.0;
    let mut prev_ckpt: Option<i64> = None;
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

    let mut w = Workload::new(a.partitions, a.keys);
    let mut body: Vec<u8> = Vec::with_capacity(a.batch * 128);
    let mut pending = 0usize;
    for k in 1..=10u64 {
        let end = a.events * k / 10;
        let start_events = w.next;
        let t = Instant::now();
        let mut in_calls = Duration::ZERO;
        while w.next < end {
            let advance = w.deliver(&mut body);
            pending += 1;
            if pending == a.batch || advance || w.next == end {
                let c = Instant::now();
                post_events(&mut conn, &body);
                body.clear();
                pending = 0;
                if advance {
                    for p in 0..a.partitions {
                        post_watermark(&mut conn, p, w.watermark());
                    }
                }
                in_calls += c.elapsed();
            }
        }
        let secs = t.elapsed().as_secs_f64();
        let events = w.next;
        let rate = (events - start_events) as f64 / secs;
        let client = 1.0 - in_calls.as_secs_f64() / secs;

        let pid = server.get().pid();
        let rss = proc_kib(pid, "VmRSS");
        let ck = checkpoint(&mut conn, pid);
        let list_secs = {
            let t = Instant::now();
            let st = conn.call("GET", "/checkpoints", "", b"");
            assert!(st == 200, "GET /checkpoints: {st}");
            t.elapsed().as_secs_f64()
        };
        if let Some(id) = prev_ckpt.replace(ck.created.id) {
            let st = conn.call("DELETE", &format!("/checkpoints/{id}"), "", b"");
            if st != 204 && st != 200 {
                eprintln!("DELETE /checkpoints/{id}: {st} (kept)");
            }
        }
        let disk = server.get().disk_bytes();
        let cpu = cpu_before + cpu_seconds(pid);
        let cpu_tenth = cpu - cpu_prev;
        cpu_prev = cpu;
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
        report.json(serde_json::json!({
            "kind": "tenth", "tenth": k, "events": events, "events_per_sec": rate,
            "rss_bytes": rss, "checkpoint_id": ck.created.id,
            "checkpoint_write_bytes": ck.write_bytes, "checkpoint_wchar": ck.wchar,
            "checkpoint_secs": ck.secs, "envelope_bytes": ck.created.bytes,
            "disk_bytes": disk, "disk_bytes_per_event": disk as f64 / events as f64,
            "cpu_secs": cpu, "cpu_secs_tenth": cpu_tenth, "client_share": client,
            "list_secs": list_secs,
        }));
        tenths.push(Tenth {
            events,
            rate,
            rss,
            ck,
            disk,
            cpu,
            list_secs,
        });
        println!("{:>11} GET /checkpoints in {list_secs:.4} s", "");

        if k == 1 || k == 10 {
            let mut merging_seen = None;
            if let Some(min) = a.kill_during_merge {
                // More of the stream until a large enough merge runs.
                let cap = w.next + a.events / 10;
                loop {
                    let m = metric(&mut conn, "streamforge_id_index_merging");
                    if m >= min as f64 {
                        merging_seen = Some(m as u64);
                        break;
                    }
                    if w.next >= cap {
                        break;
                    }
                    let mut n = 0;
                    loop {
                        let advance = w.deliver(&mut body);
                        n += 1;
                        if n == a.batch || advance {
                            post_events(&mut conn, &body);
                            body.clear();
                            if advance {
                                for p in 0..a.partitions {
                                    post_watermark(&mut conn, p, w.watermark());
                                }
                            }
                            break;
                        }
                    }
                }
                match merging_seen {
                    Some(m) => println!(
                        "{:>11} kill during a merge of {m} id-index entries, after {} events",
                        "", w.next
                    ),
                    None => println!(
                        "{:>11} no merge of >= {min} entries seen up to {} events: killed anyway",
                        "", w.next
                    ),
                }
            }
            let old = server.take();
            cpu_before += cpu_seconds(old.pid());
            old.kill9();
            server.0 = Some(start(&bin, &db, &pipeline));
            let s = server.get();
            let ready = s.ready_after.as_secs_f64();
            let rss_ready = proc_kib(s.pid(), "VmRSS");
            println!(
                "{:>11} restart: kill -9, spawn to /readyz 200 in {ready:.3} s; new pid {}, RSS {:.1} MB when ready",
                "",
                s.pid(),
                mb(rss_ready as f64)
            );
            report.json(serde_json::json!({
                "kind": "restart", "after_events": w.next, "ready_secs": ready,
                "rss_bytes_ready": rss_ready, "killed_during_merge_of": merging_seen,
            }));
            restarts.push(Restart {
                after_events: w.next,
                ready,
                rss_ready,
            });
            conn = Conn::new(&s.addr);
        }
    }

    // ---- the last checkpoint, downloaded while the server's RSS is watched
    let last = tenths.last().expect("ten tenths");
    let id = last.ck.created.id;
    let pid = server.get().pid();
    let file = tmp.path().join(format!("checkpoint-{id}.json"));
    let rss_before = proc_kib(pid, "VmRSS");
    // the kernel's peak (VmHWM) starts again from the current RSS
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_before));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(proc_kib(pid, "VmRSS"), Ordering::Relaxed);
                std::thread::sleep(SAMPLE_EVERY);
            }
        })
    };
    let t = Instant::now();
    let (st, len) = {
        let mut f = BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(&file).expect("create the download file"),
        );
        let r = conn.download(&format!("/checkpoints/{id}"), &mut f);
        f.flush().expect("write the download file");
        r
    };
    let download_secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let sampled = peak.load(Ordering::Relaxed);
    let hwm = if hwm_reset { proc_kib(pid, "VmHWM") } else { 0 };
    let peak = sampled.max(hwm);
    let delta = peak.saturating_sub(rss_before);
    let digest: String = {
        let mut h = Sha256::new();
        let mut f = std::fs::File::open(&file).expect("open the download");
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).expect("read the download");
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    };
    // The digest the file carries (`{"digest":"<64 hex>",...`).
    let carried: String = {
        let mut head = [0u8; 75];
        let mut f = std::fs::File::open(&file).expect("open the download");
        f.read_exact(&mut head).expect("read the download");
        String::from_utf8_lossy(&head[11..]).into_owned()
    };
    let sha_ok = carried == last.ck.created.digest;
    println!();
    println!(
        "download: GET /checkpoints/{id}: {st}, {:.1} MB in {download_secs:.3} s; server RSS {:.1} MB before, peak {:.1} MB ({}), +{:.1} MB (target < 64 MB)",
        mb(len as f64),
        mb(rss_before as f64),
        mb(peak as f64),
        if hwm_reset {
            format!(
                "VmHWM after reset {:.1} MB, sampled every {} ms {:.1} MB",
                mb(hwm as f64),
                SAMPLE_EVERY.as_millis(),
                mb(sampled as f64)
            )
        } else {
            format!("sampled every {} ms", SAMPLE_EVERY.as_millis())
        },
        mb(delta as f64)
    );
    println!(
        "digest the file carries {carried} {} the POST's {} (sha256 of the file {digest})",
        if sha_ok { "==" } else { "!=" },
        last.ck.created.digest
    );
    let t = Instant::now();
    let v = Command::new(&bin)
        .arg("verify")
        .arg(&file)
        .output()
        .expect("run streamforge verify");
    let verify_secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&v.stdout);
    let verified = v.status.success() && stdout.starts_with("valid checkpoint");
    println!(
        "streamforge verify: {} in {verify_secs:.3} s ({})",
        if verified { "verified" } else { "NOT verified" },
        v.status
    );
    for l in stdout
        .lines()
        .chain(String::from_utf8_lossy(&v.stderr).lines())
    {
        println!("    {l}");
    }
    // ---- the downloaded envelope restored by body on a fresh server (read
    // as it streams: staged on disk, memory bounded), its RSS watched
    let restore = {
        let fresh = tmp.path().join("restored.db");
        let pipeline_file = pipeline.clone();
        let r = Server::start_bin(
            &bin,
            &fresh,
            &[
                "--pipeline".as_ref(),
                pipeline_file.as_os_str(),
                "--max-restore-bytes".as_ref(),
                "1099511627776".as_ref(),
                "--checkpoint-every".as_ref(),
                "0".as_ref(),
            ],
        );
        let rpid = r.child.id();
        let before = proc_kib(rpid, "VmRSS");
        let stop = Arc::new(AtomicBool::new(false));
        let rpeak = Arc::new(AtomicU64::new(before));
        let sampler = {
            let (stop, rpeak) = (stop.clone(), rpeak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rpeak.fetch_max(proc_kib(rpid, "VmRSS"), Ordering::Relaxed);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        let t = Instant::now();
        let out = Command::new(&bin)
            .args([
                "checkpoint",
                "restore",
                "--url",
                &format!("http://{}", r.addr),
                "--json",
                "--file",
            ])
            .arg(&file)
            .output()
            .expect("run streamforge restore");
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        sampler.join().expect("sampler");
        let peak = rpeak.load(Ordering::Relaxed);
        // (It was left running: its stdout kept the bench's pipe open.)
        r.kill9();
        let ok = out.status.success();
        println!(
            "restore by body (streamed) on a fresh server: {} in {secs:.1} s; server RSS {:.1} MB before, peak {:.1} MB, +{:.1} MB ({})",
            if ok { "restored" } else { "FAILED" },
            mb(before as f64),
            mb(peak as f64),
            mb(peak.saturating_sub(before) as f64),
            String::from_utf8_lossy(if ok { &out.stdout } else { &out.stderr }).trim()
        );
        (ok, secs, before, peak)
    };
    report.json(serde_json::json!({
        "kind": "restore", "ok": restore.0, "secs": restore.1,
        "rss_bytes_before": restore.2, "rss_bytes_peak": restore.3,
    }));
    report.json(serde_json::json!({
        "kind": "download", "checkpoint_id": id, "status": st, "bytes": len,
        "secs": download_secs, "rss_bytes_before": rss_before, "rss_bytes_peak": peak,
        "rss_bytes_peak_sampled": sampled, "rss_bytes_hwm": hwm,
        "rss_bytes_delta": delta, "sha256": digest, "sha256_matches": sha_ok,
        "verified": verified, "verify_secs": verify_secs,
    }));

    // ---- clean shutdown
    let mut s = server.take();
    let cpu_total = cpu_before + cpu_seconds(s.pid());
    let t = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .is_ok_and(|st| st.success());
    let exit = if term {
        s.child
            .wait()
            .map_or_else(|e| e.to_string(), |st| st.to_string())
    } else {
        s.child.kill().ok();
        s.child.wait().ok();
        "SIGTERM failed; killed".into()
    };
    println!(
        "shutdown: SIGTERM to exit in {:.3} s ({exit}); server CPU {cpu_total:.1} s in all",
        t.elapsed().as_secs_f64()
    );

    // ---- summary against the issue's targets
    let f = &tenths[0];
    let l = tenths.last().expect("ten tenths");
    let rss_growth = (l.rss as f64 - f.rss as f64) / (l.events - f.events).max(1) as f64;
    let disk_per_event = l.disk as f64 / l.events as f64;
    let (r0, r1) = (&restarts[0], restarts.last().expect("two restarts"));
    println!();
    println!(
        "summary (first tenth = {} events, last = {} events):",
        f.events, l.events
    );
    let rows = [
        (
            "RSS growth per event, first to last tenth".to_string(),
            format!(
                "{rss_growth:.1} B/event ({:.1} -> {:.1} MB)",
                mb(f.rss as f64),
                mb(l.rss as f64)
            ),
            "<= 2 B/event",
        ),
        (
            "checkpoint bytes written, last / first".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(l.ck.write_bytes as f64, f.ck.write_bytes as f64),
                mb(f.ck.write_bytes as f64),
                mb(l.ck.write_bytes as f64)
            ),
            "<= 1.5x",
        ),
        (
            "checkpoint time, last / first".into(),
            format!(
                "{} ({:.3} -> {:.3} s)",
                ratio(l.ck.secs, f.ck.secs),
                f.ck.secs,
                l.ck.secs
            ),
            "<= 1.5x",
        ),
        (
            "GET /checkpoints time, last / first".into(),
            format!(
                "{} ({:.4} -> {:.4} s)",
                ratio(l.list_secs, f.list_secs),
                f.list_secs,
                l.list_secs
            ),
            "flat",
        ),
        (
            "restart to ready, last / first".into(),
            format!(
                "{} ({:.3} s after {} -> {:.3} s after {} events)",
                ratio(r1.ready, r0.ready),
                r0.ready,
                r0.after_events,
                r1.ready,
                r1.after_events
            ),
            "<= 2x",
        ),
        (
            "ingest rate, last / first tenth".into(),
            format!(
                "{} ({:.0} -> {:.0} events/s)",
                ratio(l.rate, f.rate),
                f.rate,
                l.rate
            ),
            ">= 0.9x",
        ),
        (
            "disk per event at the end".into(),
            format!("{disk_per_event:.1} B/event ({:.1} MB)", mb(l.disk as f64)),
            "<= 100 B/event",
        ),
        (
            "server RSS during the checkpoint download".into(),
            format!("+{:.1} MB", mb(delta as f64)),
            "< 64 MB",
        ),
        (
            "envelope, last / first (informative)".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(l.ck.created.bytes as f64, f.ck.created.bytes as f64),
                mb(f.ck.created.bytes as f64),
                mb(l.ck.created.bytes as f64)
            ),
            "",
        ),
        (
            "RSS when ready after restart, last / first (informative)".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(r1.rss_ready as f64, r0.rss_ready as f64),
                mb(r0.rss_ready as f64),
                mb(r1.rss_ready as f64)
            ),
            "",
        ),
        (
            "server CPU per 1M events, last / first tenth (informative)".into(),
            {
                let first = f.cpu / f.events as f64 * 1e6;
                let prev = tenths[tenths.len() - 2].cpu;
                let last =
                    (l.cpu - prev) / (l.events - tenths[tenths.len() - 2].events) as f64 * 1e6;
                format!("{} ({first:.2} -> {last:.2} s)", ratio(last, first))
            },
            "",
        ),
    ];
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let vwidth = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, value, target) in &rows {
        if target.is_empty() {
            println!("  {name:<width$}  {value}");
        } else {
            println!("  {name:<width$}  {value:<vwidth$}  target {target}");
        }
    }
    report.json(serde_json::json!({
        "kind": "summary",
        "first_events": f.events, "last_events": l.events,
        "rss_growth_bytes_per_event": rss_growth,
        "checkpoint_write_ratio": l.ck.write_bytes as f64 / f.ck.write_bytes.max(1) as f64,
        "checkpoint_time_ratio": l.ck.secs / f.ck.secs,
        "restart_ratio": r1.ready / r0.ready,
        "list_time_ratio": l.list_secs / f.list_secs,
        "ingest_rate_ratio": l.rate / f.rate,
        "disk_bytes_per_event": disk_per_event,
        "download_rss_delta_bytes": delta,
        "envelope_ratio": l.ck.created.bytes as f64 / f.ck.created.bytes.max(1) as f64,
        "cpu_secs": cpu_total,
    }));
}
