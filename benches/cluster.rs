//! `serve --kafka` with 1, 2 and 3 instances over one topic (issue 25):
//! how fast the instances consume a pre-filled topic together, what each
//! costs in CPU seconds per 1M events (they share this box's cores, so the
//! cost per event is the figure that must not grow with N), and how far the
//! global watermark trails the largest partition watermark meanwhile.
//!
//! ```sh
//! cargo bench --bench cluster                          # 1M events, 6 partitions, 1/2/3 instances, 3 runs
//! cargo bench --bench cluster -- --events 100000       # quick
//! ```
//!
//! Needs `tansu` (`$TANSU`, the `PATH` or `~/.cargo/bin`; `cargo install
//! tansu --locked --features dynostore,libsql`). The workload is
//! `benches/gen_workload.py --partitions 6` (its deliveries; its advance
//! lines are left out: the instances make watermarks with
//! `--max-out-of-orderness 500`, the file's disorder), produced once to a
//! 6-partition topic, delivery partition `pK` to topic partition `K`. Each
//! run starts N instances (`--instance I/N`) on fresh databases and stops
//! the clock when every partition is consumed to its end; the instances'
//! CPU seconds come from /proc, from ready to consumed (the start's
//! recovery and connecting are not a cost per event), and the broker's
//! beside them. Runs alternate N within each round; the figures are
//! medians.

#[path = "support/http.rs"]
mod http_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use http_support::{binary, cpu_seconds, median, pipeline_json, Server};
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;
use streamforge_testkit::{tansu_bin, Broker};

const PARTITIONS: usize = 6;

struct Args {
    events: u64,
    runs: usize,
    instances: Vec<u32>,
}

fn args() -> Args {
    let mut a = Args {
        events: 1_000_000,
        runs: 3,
        instances: vec![1, 2, 3],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--events" => a.events = value().replace('_', "").parse().expect("--events N"),
            "--runs" => a.runs = value().parse().expect("--runs R"),
            "--instances" => {
                a.instances = value()
                    .split(',')
                    .map(|n| n.parse().expect("--instances 1,2,3"))
                    .collect()
            }
            // cargo bench passes --bench
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// The workload's deliveries: (topic partition, event JSON).
fn workload(dir: &Path, events: u64) -> Vec<(usize, Vec<u8>)> {
    let file = dir.join("workload.ndjson");
    let st = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen_workload.py"))
        .args([
            "--events",
            &events.to_string(),
            "--partitions",
            &PARTITIONS.to_string(),
        ])
        .arg("--out")
        .arg(&file)
        .status()
        .expect("python3 benches/gen_workload.py");
    assert!(st.success());
    let text = std::fs::read_to_string(&file).expect("workload");
    text.lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a workload line");
            (v["op"] == "deliver").then(|| {
                let p: usize = v["partition"].as_str().unwrap()[1..].parse().unwrap();
                (p, v["event"].to_string().into_bytes())
            })
        })
        .collect()
}

fn fill(broker: &str, topic: &str, records: &[(usize, Vec<u8>)]) -> BTreeMap<usize, i64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = ClientBuilder::new(vec![broker.to_string()])
            .build()
            .await
            .expect("client");
        client
            .controller_client()
            .unwrap()
            .create_topic(topic, PARTITIONS as i32, 1, 10_000)
            .await
            .expect("create topic");
        let mut counts = BTreeMap::new();
        for p in 0..PARTITIONS {
            let pc = client
                .partition_client(topic.to_string(), p as i32, UnknownTopicHandling::Retry)
                .await
                .unwrap();
            let mine: Vec<Record> = records
                .iter()
                .filter(|(q, _)| *q == p)
                .map(|(_, v)| Record {
                    key: None,
                    value: Some(v.clone()),
                    headers: BTreeMap::new(),
                    timestamp: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                })
                .collect();
            counts.insert(p, mine.len() as i64);
            for chunk in mine.chunks(2_000) {
                pc.produce(chunk.to_vec(), Compression::NoCompression)
                    .await
                    .expect("produce");
            }
        }
        counts
    })
}

/// A server's `/status`, parsed.
fn status(addr: &str) -> serde_json::Value {
    let mut conn = http_support::Conn::new(addr);
    let mut out = Vec::new();
    let (code, _) = conn.download("/status", &mut out);
    assert_eq!(code, 200);
    serde_json::from_slice(&out).expect("status JSON")
}

struct Figures {
    rate: f64,
    cpu_per_m: f64,
    broker_cpu_per_m: f64,
    lag_ms: f64,
}

fn run(
    bin: &Path,
    dir: &Path,
    broker: &Broker,
    topic: &str,
    n: u32,
    counts: &BTreeMap<usize, i64>,
) -> Figures {
    let broker_pid = broker.pid();
    let broker_cpu = cpu_seconds(broker_pid);
    let broker = &broker.addr();
    let pipeline = dir.join("pipeline.json");
    std::fs::write(&pipeline, pipeline_json(PARTITIONS)).unwrap();
    let t = Instant::now();
    let servers: Vec<Server> = (0..n)
        .map(|i| {
            let db = dir.join(format!("{topic}-{n}-{i}.db"));
            let args: Vec<String> = vec![
                "--pipeline".into(),
                pipeline.display().to_string(),
                "--kafka".into(),
                broker.into(),
                "--topic".into(),
                topic.into(),
                "--instance".into(),
                format!("{i}/{n}"),
                "--max-out-of-orderness".into(),
                "500".into(),
            ];
            let os: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
            Server::start_bin(bin, &db, &os)
        })
        .collect();
    // CPU spent starting (recovery, connecting) is not a cost per event
    let started: Vec<f64> = servers.iter().map(|s| cpu_seconds(s.pid())).collect();
    let total: i64 = counts.values().sum();
    let mut lags = Vec::new();
    loop {
        let mut done = true;
        for (i, s) in servers.iter().enumerate() {
            let st = status(&s.addr);
            let parts = st["partitions"].as_object().unwrap();
            for (p, c) in counts {
                if *p as u32 % n == i as u32
                    && parts[&format!("p{p}")]["offset"].as_i64() != Some(c - 1)
                {
                    done = false;
                }
            }
            let largest = parts.values().filter_map(|p| p["progress"].as_i64()).max();
            if let (Some(w), Some(l)) = (st["watermark"].as_i64(), largest) {
                lags.push((l - w) as f64);
            }
        }
        if done {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1200),
            "not consumed within 20 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu: f64 = servers
        .iter()
        .zip(&started)
        .map(|(s, c0)| cpu_seconds(s.pid()) - c0)
        .sum();
    let broker_cpu = cpu_seconds(broker_pid) - broker_cpu;
    for s in servers {
        s.terminate();
    }
    Figures {
        rate: total as f64 / secs,
        cpu_per_m: cpu / total as f64 * 1e6,
        broker_cpu_per_m: broker_cpu / total as f64 * 1e6,
        lag_ms: if lags.is_empty() { 0.0 } else { median(lags) },
    }
}

fn main() {
    let a = args();
    let Some(tansu) = tansu_bin() else {
        eprintln!("no tansu binary: cargo install tansu --locked --features dynostore,libsql");
        std::process::exit(2);
    };
    let bin: PathBuf = binary();
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(&tansu, dir.path());
    let records = workload(dir.path(), a.events);
    println!(
        "cluster bench: {} deliveries over {PARTITIONS} partitions, {} runs, instances {:?}",
        records.len(),
        a.runs,
        a.instances
    );
    let mut figures: BTreeMap<u32, Vec<Figures>> = BTreeMap::new();
    for r in 0..a.runs {
        for &n in &a.instances {
            // a topic per run: each run consumes from offset 0 on fresh databases
            let topic = format!("bench-{r}-{n}");
            let counts = fill(&broker.addr(), &topic, &records);
            let f = run(&bin, dir.path(), &broker, &topic, n, &counts);
            println!(
                "  run {r}, {n} instance(s): {:.0} events/s, {:.2} CPU s per 1M events (all instances; broker {:.2}), watermark lag {:.0} ms (median of samples)",
                f.rate, f.cpu_per_m, f.broker_cpu_per_m, f.lag_ms
            );
            figures.entry(n).or_default().push(f);
        }
    }
    println!("medians:");
    let base = figures
        .get(&1)
        .map(|f| median(f.iter().map(|x| x.cpu_per_m).collect()));
    for (n, fs) in &figures {
        let cpu = median(fs.iter().map(|x| x.cpu_per_m).collect());
        println!(
            "  {n} instance(s): {:.0} events/s, {:.2} CPU s per 1M events{} (broker {:.2}), watermark lag {:.0} ms",
            median(fs.iter().map(|x| x.rate).collect()),
            cpu,
            base.map_or(String::new(), |b| format!(" ({:.2}x of 1 instance)", cpu / b)),
            median(fs.iter().map(|x| x.broker_cpu_per_m).collect()),
            median(fs.iter().map(|x| x.lag_ms).collect()),
        );
    }
}
