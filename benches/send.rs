//! `streamforge send` over 1, 4 and 16 partitions (issue 27): the rate a
//! user gets from the CLI on the benchmark workload, and the server's CPU
//! seconds per 1M events beside it (so the cost per event is visible apart
//! from the box's speed).
//!
//! ```sh
//! cargo bench --bench send                                  # 1M events, 1/4/16 partitions, 3 runs
//! cargo bench --bench send -- --events 200000 --runs 1      # quick
//! cargo bench --bench send -- --old-bin /tmp/old/streamforge  # 1 partition, old binary beside new
//! ```
//!
//! Flags: `--events N` (1,000,000), `--partitions 1,4,16`, `--runs R` (3),
//! `--bin PATH` (default `STREAMFORGE_BIN` or target/release/streamforge),
//! `--old-bin PATH` (also run the 1-partition send with this binary, server
//! and client, alternating with the new one).
//!
//! Each file is written once by `benches/gen_workload.py` (its defaults:
//! 1,000 keys, disorder 500, an advance of every partition after every
//! 1,000 events; so the 4-partition file has 4,000 advance lines and the
//! 16-partition one 16,000). Each run is a fresh server (default flags,
//! the pipeline p0..p{P-1} with fixed 10 s, sliding 10 s / 2 s and session
//! 1 s windows, lateness 0) on a fresh database, fed by `streamforge send
//! FILE` with default flags; the rate is events over the send's wall time.
//! The partition counts alternate within each run; the figures are the
//! medians, and the ratios are of medians measured in the same process.

#[path = "support/http.rs"]
mod http_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use http_support::{binary, cpu_seconds, median, pipeline_json, Server};

struct Args {
    events: u64,
    partitions: Vec<usize>,
    runs: usize,
    bin: PathBuf,
    old_bin: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        events: 1_000_000,
        partitions: vec![1, 4, 16],
        runs: 3,
        bin: binary(),
        old_bin: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--events" => a.events = value().replace('_', "").parse().expect("--events N"),
            "--partitions" => {
                a.partitions = value()
                    .split(',')
                    .map(|p| p.parse().expect("--partitions 1,4,16"))
                    .collect()
            }
            "--runs" => a.runs = value().parse().expect("--runs R"),
            "--bin" => a.bin = PathBuf::from(value()),
            "--old-bin" => a.old_bin = Some(PathBuf::from(value())),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// One send: `(events/s, server CPU seconds per 1M events)`.
fn one(bin: &Path, dir: &Path, file: &Path, partitions: usize, events: u64) -> (f64, f64) {
    let pipeline = dir.join(format!("pipeline-{partitions}.json"));
    std::fs::write(&pipeline, pipeline_json(partitions)).expect("write the pipeline");
    let db = dir.join(format!("send-{partitions}-{}.db", std::process::id()));
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let server = Server::start_bin(bin, &db, &["--pipeline".as_ref(), pipeline.as_os_str()]);
    let cpu0 = cpu_seconds(server.pid());
    let t = Instant::now();
    let out = Command::new(bin)
        .args(["send", "--url"])
        .arg(format!("http://{}", server.addr))
        .arg(file)
        .output()
        .expect("run streamforge send");
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cpu = cpu_seconds(server.pid()) - cpu0;
    server.terminate();
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    (events as f64 / secs, cpu / (events as f64 / 1e6))
}

fn main() {
    let a = args();
    assert!(
        a.bin.exists(),
        "{} is missing: cargo build --release",
        a.bin.display()
    );
    let dir = tempfile::Builder::new()
        .prefix("bench-send-")
        .tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .expect("temp dir");
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen_workload.py");
    let mut files = Vec::new();
    for &p in &a.partitions {
        let file = dir.path().join(format!("workload-{p}p.ndjson"));
        let ok = Command::new("python3")
            .arg(&gen)
            .args([
                "--events",
                &a.events.to_string(),
                "--partitions",
                &p.to_string(),
            ])
            .arg("--out")
            .arg(&file)
            .status()
            .expect("python3 benches/gen_workload.py")
            .success();
        assert!(ok, "gen_workload.py failed");
        files.push((p, file));
    }
    println!(
        "send: {} events, partitions {:?}, {} runs; {}",
        a.events,
        a.partitions,
        a.runs,
        a.bin.display()
    );
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    let mut old: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for run in 1..=a.runs {
        for (i, (p, file)) in files.iter().enumerate() {
            let (r, c) = one(&a.bin, dir.path(), file, *p, a.events);
            println!("run {run}: {p:>2} partition(s): {r:>9.0} events/s, server {c:.2} CPU s per 1M events");
            rates[i].push(r);
            cpus[i].push(c);
        }
        if let (Some(old_bin), Some((p, file))) = (&a.old_bin, files.iter().find(|(p, _)| *p == 1))
        {
            let (r, c) = one(old_bin, dir.path(), file, *p, a.events);
            println!("run {run}:  1 partition(s), old binary: {r:>9.0} events/s, server {c:.2} CPU s per 1M events");
            old.0.push(r);
            old.1.push(c);
        }
    }
    println!("\nmedians:");
    let base = files
        .iter()
        .position(|(p, _)| *p == 1)
        .map(|i| median(rates[i].clone()));
    for (i, (p, _)) in files.iter().enumerate() {
        let r = median(rates[i].clone());
        let ratio = base.map_or(String::new(), |b| {
            format!("  ({:.2}x the 1-partition rate)", r / b)
        });
        println!(
            "  {p:>2} partition(s): {r:>9.0} events/s, server {:.2} CPU s per 1M events{ratio}",
            median(cpus[i].clone())
        );
    }
    if let (Some(b), false) = (base, old.0.is_empty()) {
        let r = median(old.0.clone());
        println!(
            "   1 partition, old binary: {r:>9.0} events/s, server {:.2} CPU s per 1M events (new / old {:.2}x)",
            median(old.1.clone()),
            b / r
        );
    }
}
