//! One event per request, the shape webhook producers send: the server CPU
//! of a signed webhook (`POST /ingest/{source}`, Stripe's scheme: a
//! `charge.succeeded` payload mapped by JSON Pointers) beside an unsigned
//! single-event `POST /events` in append mode, on the same server, in the
//! same run, over many keep-alive connections.
//!
//! Three shapes, in alternating rounds (medians over the rounds):
//! - `events`: `POST /events`, one delivery without offset, `Prefer:
//!   return=minimal`, to a partition without a watermark strategy;
//! - `webhook`: a signed Stripe event to a source on a partition without a
//!   strategy;
//! - `webhook+wm`: the same to a source whose partition derives its
//!   watermark (`max_out_of_orderness`), so every call also advances it;
//! - `healthz` (only when named in `BENCH_SHAPES`): `GET /healthz`, the
//!   floor, what the HTTP stack and its middleware cost per request.
//!
//! Each prints requests/s, p50/p99 latency and the server's CPU per request
//! (from /proc), and the ratio of each webhook shape's CPU to `events`'.
//! The signature is computed by the client (its CPU is not the server's).
//! Beside them, how the box's two cores were shared: the client's own CPU
//! per request and the share of the run the box was idle (from
//! `/proc/stat`). On a box the client shares, requests/s is bounded by the
//! cores divided by server plus client CPU per request, less the idle.
//!
//! `cargo build --release && cargo bench --bench webhooks`; environment:
//! `BENCH_C` connections (16), `BENCH_N` requests per shape and round
//! (8000), `BENCH_RUNS` rounds (3), `BENCH_CHECKPOINT_EVERY` (the
//! server's `--checkpoint-every`, 1000), `BENCH_SHAPES` (a comma-separated
//! subset; `events` first when ratios are wanted), `STREAMFORGE_BIN`.

#[path = "support/http.rs"]
mod http_support;

use std::path::Path;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use http_support::{binary, box_ticks, cpu_seconds, Conn, Server};
use sha2::Sha256;

const SECRET: &str = "whsec_bench_secret";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pipeline(dir: &Path) -> std::path::PathBuf {
    let secret = dir.join("stripe.secret");
    std::fs::write(&secret, SECRET).expect("secret file");
    let source = |partition: &str| {
        serde_json::json!({
            "partition": partition,
            "signature": {"scheme": "stripe", "secret_file": secret},
            "id": {"pointer": "/id"},
            "key": {"pointer": "/data/object/customer"},
            "value": {"pointer": "/data/object/amount"},
            "timestamp": {"pointer": "/created", "unit": "s"},
            "filter": {"pointer": "/type", "equals": "charge.succeeded"}
        })
    };
    let doc = serde_json::json!({
        "partitions": ["events", "stripe", "stripe_wm"],
        "windows": {"per_minute": {"kind": "fixed", "size": 60000}},
        "lateness": 0,
        "sources": {"stripe": source("stripe"), "stripe_wm": source("stripe_wm")},
        "watermarks": {"stripe_wm": {"max_out_of_orderness": 5000}}
    });
    let path = dir.join("pipeline.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).expect("json")).expect("pipeline");
    path
}

#[allow(clippy::disallowed_methods)] // the client signs with the current time
fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// One request: path, content type, extra header lines, body.
type Req = (String, &'static str, String, Vec<u8>);

/// One request of a shape.
fn request(shape: &str, n: u64) -> Req {
    let created = 1_700_000_000 + n as i64 / 10;
    let customer = format!("cus_{}", n % 97);
    match shape {
        // the floor: what the HTTP stack alone costs per request (GET; the
        // method is chosen by `run` from the path)
        "healthz" => ("/healthz".into(), "application/json", String::new(), Vec::new()),
        "events" => (
            "/events".into(),
            "application/json",
            "prefer: return=minimal\r\n".into(),
            format!(
                r#"{{"partition":"events","event":{{"id":"ev-{n}","key":"{customer}","timestamp":{},"value":{}}}}}"#,
                created * 1000,
                100 + n % 900
            )
            .into_bytes(),
        ),
        _ => {
            let source = if shape == "webhook" { "stripe" } else { "stripe_wm" };
            let body = format!(
                r#"{{"id":"evt_{shape}_{n}","object":"event","api_version":"2024-06-20","created":{created},"type":"charge.succeeded","livemode":false,"data":{{"object":{{"id":"ch_{n}","object":"charge","amount":{},"currency":"usd","customer":"{customer}","paid":true,"status":"succeeded"}}}}}}"#,
                100 + n % 900
            );
            let t = now_s();
            let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
            mac.update(format!("{t}.").as_bytes());
            mac.update(body.as_bytes());
            let sig: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            (
                format!("/ingest/{source}"),
                "application/json",
                format!("stripe-signature: t={t},v1={sig}\r\n"),
                body.into_bytes(),
            )
        }
    }
}

/// Figures of one shape in one round.
#[derive(Debug, Clone, Copy)]
struct Figures {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us: f64,
    /// Calls per commit (the mean group size) during the run.
    per_commit: f64,
    /// The load generator's own CPU per request (it shares the box).
    client_us: f64,
    /// The share of the box's CPU time that was idle (or waiting for
    /// I/O) during the run: neither the server nor the client had work.
    idle: f64,
}

/// `streamforge_commit_group_calls`' count and sum from `/metrics`: how
/// many commits, and how many calls they stored.
fn commit_groups(addr: &str) -> (f64, f64) {
    let mut c = Conn::new(addr);
    c.call("GET", "/metrics", "text/plain", b"");
    let text = String::from_utf8_lossy(&c.body).into_owned();
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        get("streamforge_commit_group_calls_count"),
        get("streamforge_commit_group_calls_sum"),
    )
}

fn run(server: &Server, shape: &'static str, clients: usize, n: usize, base: u64) -> Figures {
    let per = n / clients;
    // the requests (and their signatures) are made, whole, before the
    // clock starts
    let work: Vec<Vec<Vec<u8>>> = (0..clients)
        .map(|c| {
            (0..per)
                .map(|i| {
                    let (path, ct, headers, body) = request(shape, base + (c * per + i) as u64);
                    let method = if path == "/healthz" { "GET" } else { "POST" };
                    let mut r = format!(
                        "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: {ct}\r\ncontent-length: {}\r\n{headers}\r\n",
                        server.addr,
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(&body);
                    r
                })
                .collect()
        })
        .collect();
    let groups0 = commit_groups(&server.addr);
    let cpu0 = cpu_seconds(server.pid());
    let (client0, box0) = (cpu_seconds(std::process::id()), box_ticks());
    let t = Instant::now();
    let mut lat = load(&server.addr, work);
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds(server.pid()) - cpu0;
    let (client1, box1) = (cpu_seconds(std::process::id()), box_ticks());
    let groups1 = commit_groups(&server.addr);
    lat.sort();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1e3;
    Figures {
        rps: lat.len() as f64 / wall,
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        cpu_us: cpu / lat.len() as f64 * 1e6,
        per_commit: (groups1.1 - groups0.1) / (groups1.0 - groups0.0).max(1.0),
        client_us: (client1 - client0) / lat.len() as f64 * 1e6,
        idle: (box1.0 - box0.0) as f64 / (box1.1 - box0.1).max(1) as f64,
    }
}

/// The load generator: one keep-alive connection per element of `work`,
/// each sending its requests one at a time (the next when the answer is
/// in), all on one thread with non-blocking sockets, as wrk does (a
/// thread per connection would spend more of the box's two cores on
/// context switches than the server spends per request). The latency of
/// every request.
fn load(addr: &str, work: Vec<Vec<Vec<u8>>>) -> Vec<Duration> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("client runtime");
    rt.block_on(async {
        let tasks: Vec<_> = work
            .into_iter()
            .map(|reqs| {
                let addr = addr.to_string();
                tokio::task::spawn(async move { connection(&addr, reqs).await })
            })
            .collect();
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.expect("client connection"));
        }
        lat
    })
}

/// One connection's requests, in order; asserts each answer is 200.
async fn connection(addr: &str, reqs: Vec<Vec<u8>>) -> Vec<Duration> {
    let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).ok();
    let mut lat = Vec::with_capacity(reqs.len());
    let mut buf = vec![0u8; 1 << 16];
    for r in reqs {
        let t = Instant::now();
        let mut sent = 0;
        while sent < r.len() {
            s.writable().await.expect("writable");
            match s.try_write(&r[sent..]) {
                Ok(k) => sent += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        // read the answer: the head, then content-length bytes of body
        let mut have = 0;
        let (status, want) = loop {
            s.readable().await.expect("readable");
            match s.try_read(&mut buf[have..]) {
                Ok(0) => panic!("the server closed the connection"),
                Ok(k) => have += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("read: {e}"),
            }
            if let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end]).expect("head");
                let status: u16 = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .expect("status");
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                break (status, end + 4 + len);
            }
        };
        while have < want {
            s.readable().await.expect("readable");
            match s.try_read(&mut buf[have..]) {
                Ok(0) => panic!("the server closed the connection"),
                Ok(k) => have += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        lat.push(t.elapsed());
        assert_eq!(
            status,
            200,
            "{}",
            String::from_utf8_lossy(&buf[..have.min(buf.len())])
        );
    }
    lat
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let clients = env_usize("BENCH_C", 16).max(1);
    let n = env_usize("BENCH_N", 8000).max(clients);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let dir = tempfile::Builder::new()
        .prefix("bench-webhooks-")
        .tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .expect("temp dir");
    let pipeline = pipeline(dir.path());
    let db = dir.path().join("bench.db");
    let every = std::env::var("BENCH_CHECKPOINT_EVERY").unwrap_or_else(|_| "1000".into());
    let server = Server::start(
        &db,
        &[
            "--pipeline".as_ref(),
            pipeline.as_os_str(),
            "--checkpoint-every".as_ref(),
            every.as_ref(),
        ],
    );
    println!(
        "binary: {} | {clients} connections, one event per request, {n} requests per shape and round, {runs} rounds",
        binary().display()
    );
    // warm-up: connections, allocator, page cache
    for shape in ["events", "webhook", "webhook+wm", "healthz"] {
        run(&server, shape, clients, clients * 20, 1 << 40);
    }
    let chosen = std::env::var("BENCH_SHAPES").unwrap_or_default();
    let shapes: Vec<&'static str> = ["events", "webhook", "webhook+wm", "healthz"]
        .into_iter()
        .filter(|s| {
            if chosen.is_empty() {
                *s != "healthz"
            } else {
                chosen.split(',').any(|c| c == *s)
            }
        })
        .collect();
    let mut all: Vec<Vec<Figures>> = vec![Vec::new(); shapes.len()];
    for round in 0..runs {
        // Each round starts with another shape: the live state (and with
        // it the automatic checkpoints' work) grows during the run, and no
        // shape should always come last.
        let order: Vec<usize> = (0..shapes.len())
            .map(|k| (k + round) % shapes.len())
            .collect();
        for i in order {
            let shape = &shapes[i];
            let f = run(&server, shape, clients, n, (round * n) as u64);
            println!(
                "round {round} {shape:>10}: {:>8.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  server CPU {:>6.1} us/request  {:>5.1} calls/commit  client CPU {:>5.1} us/request  box idle {:>4.1}%",
                f.rps, f.p50_ms, f.p99_ms, f.cpu_us, f.per_commit, f.client_us, f.idle * 100.0
            );
            all[i].push(f);
        }
    }
    println!("\nmedians of {runs} rounds ({clients} connections):");
    println!("| shape | requests/s | p50 | p99 | server CPU per request | CPU vs events | client CPU per request | box idle |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let base = median(all[0].iter().map(|f| f.cpu_us).collect());
    for (i, shape) in shapes.iter().enumerate() {
        let cpu = median(all[i].iter().map(|f| f.cpu_us).collect());
        println!(
            "| {shape} | {:.0} | {:.2} ms | {:.2} ms | {cpu:.1} us | {:.2}x | {:.1} us | {:.1}% |",
            median(all[i].iter().map(|f| f.rps).collect()),
            median(all[i].iter().map(|f| f.p50_ms).collect()),
            median(all[i].iter().map(|f| f.p99_ms).collect()),
            cpu / base,
            median(all[i].iter().map(|f| f.client_us).collect()),
            median(all[i].iter().map(|f| f.idle).collect()) * 100.0
        );
    }
    // per-round ratios (same round: the fairest pairing on a noisy box)
    for (i, shape) in shapes.iter().enumerate().skip(1) {
        let ratios: Vec<f64> = all[i]
            .iter()
            .zip(&all[0])
            .map(|(w, e)| w.cpu_us / e.cpu_us)
            .collect();
        println!(
            "{shape}: CPU ratio per round {:?}, median {:.2}x",
            ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>(),
            median(ratios.clone())
        );
    }
    println!(
        "server RSS {:.1} MB (peak {:.1} MB)",
        http_support::proc_kib(server.pid(), "VmRSS") as f64 / 1048576.0,
        http_support::proc_kib(server.pid(), "VmHWM") as f64 / 1048576.0
    );
    server.terminate();
}
