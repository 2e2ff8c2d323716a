//! The clients: the bench's HTTP calls (one workload request, one plain
//! call), the server it starts, and C client threads sending their
//! requests (paced, aligned or free-running) with the latency of each
//! call.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::http_support::{Conn, Server};
use super::workload::{Req, PIPELINE};

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

pub fn http_body(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut c = Conn::new(addr);
    let st = c.call(method, path, "application/json", body);
    (st, std::mem::take(&mut c.body))
}

// ---------------------------------------------------------------- server

/// Starts the release server on `db` with the bench pipeline.
pub fn start_server(dir: &Path, db: &Path, checkpoint_every: u64) -> Server {
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

pub struct RunResult {
    pub secs: f64,
    pub events: usize,
    pub lat: Vec<f64>,
    /// Latency of the `POST /watermarks` calls.
    pub advance_lat: Vec<f64>,
    /// With `track`: when each call that produced changes was answered (it
    /// was committed before), and its last change's sequence.
    pub commits: Vec<(Instant, u64)>,
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
pub fn align_modes() -> Vec<Option<usize>> {
    std::env::var("BENCH_ALIGN")
        .unwrap_or_else(|_| "1,off".into())
        .split(',')
        .map(|m| m.trim().parse().ok())
        .collect()
}

pub fn mode_name(align: Option<usize>) -> String {
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
pub fn drive(
    addr: &str,
    per_client: &[Vec<Req>],
    rate: Option<f64>,
    align: Option<usize>,
) -> RunResult {
    drive_tracked(addr, per_client, rate, align, false)
}

/// [`drive`]; with `track`, the answers' last change sequences are kept
/// (`RunResult::commits`).
pub fn drive_tracked(
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
