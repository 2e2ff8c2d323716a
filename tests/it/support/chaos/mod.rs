//! The chaos runner: one Nexmark query's workload through the real binary,
//! from concurrent producers, under a seeded schedule of faults, checked at
//! the end against the batch oracle ([`oracle`]).
//!
//! Shared by `tests/it/chaos.rs` (CI: every query, a few seeds, several faults
//! each, the debug binary) and `benches/chaos.rs` (the soak, `--seeds 1-200`,
//! and the state-size model), which include this file.
//!
//! # A run
//! - The workload is `streamforge::nexmark` for the query, over the
//!   pipeline's partitions `p0`..`p3`; the oracle gets every event of it.
//! - Producers, one per partition group (2 to 4 groups, seeded), each send
//!   their partitions' operations in stream order: deliveries in NDJSON
//!   batches (1 to 32, seeded), advances one by one. A producer is in offset
//!   mode (explicit offsets: a retry is an identical redelivery) or append
//!   mode (no offsets: a retry is a duplicate, counted once). Every call
//!   that is not acknowledged (connection lost, 503) is retried until it is.
//! - A consumer follows `/changes` with long polls and the epoch rules of
//!   docs/api.md ("Restores and epochs"), checking that the sequence has no
//!   gap and no repeat within each epoch (a rewind drops what it held after
//!   the rewind point).
//! - The fault schedule ([`Plan`]) is a list of server processes ("steps").
//!   Each is started with its own `STREAMFORGE_FAULTS` and ends by one fault,
//!   all at logical positions (acknowledged calls, group commits, automatic
//!   checkpoints of that process), never at a time:
//!   SIGKILL after its k-th acknowledged call; `kill_after_commit=n`
//!   (SIGKILL after a commit, before its answer); the same followed by a
//!   torn WAL tail (the last, unacknowledged transaction's commit frame cut
//!   from the `-wal` file, when SQLite had not copied it yet);
//!   `kill_in_checkpoint=j` (SIGKILL inside the j-th automatic checkpoint);
//!   `fail_commit=n` (503 to every caller of the n-th group commit, nothing
//!   applied) and then SIGKILL k acknowledged calls after the first 503; a
//!   checkpoint after c acknowledged calls restored after r (producers
//!   pause, then resend from the restored offsets) and then SIGKILL. A step may restart with
//!   the pipeline file's partitions, windows and fields reordered. The last
//!   step runs to the end. The first six faults of a plan are each kind
//!   once (in a seeded order), every run that restarts has a reordered
//!   restart, and every run has a producer in each mode.
//! - What fired is counted ([`Report::fired`], names in [`EXERCISED`]): a
//!   hook's fault from the line the hook logs (a process that dies without
//!   it fails the run), a torn tail only when a commit frame was cut, and
//!   the retries the faults caused (an append-mode call resent after a lost
//!   answer, a producer resending from restored offsets). The CI test
//!   requires each to have fired in at least one of its seeds.
//! - At the end ([`Run::check`]): the changelog applied equals the oracle's
//!   rows at the final watermark; `GET /results` equals the changelog
//!   applied less the finalized rows; every acknowledged delivery is in the
//!   offsets (offset mode: exactly the stream; append mode: at least it);
//!   the consumer saw no gap or repeat and holds exactly the stored
//!   changelog; a checkpoint taken at the end, restored in a fresh process,
//!   continues (an advance of every partition past every window) with
//!   byte-identical answers, results and status; after that advance every
//!   event-time bucket equals the oracle's and the stream-time rows pass
//!   the order-independent checks.

#![allow(dead_code)]

pub mod oracle;

use std::collections::BTreeMap;
use std::fmt;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;
use streamforge::nexmark::{self, Query};

use oracle::{apply_changelog, diff, Ev, Oracle, Row, Spec};

/// The binary under test (debug in `cargo test`, release in `cargo bench`).
pub const BIN: &str = env!("CARGO_BIN_EXE_streamforge");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// How long any wait may take before the run fails.
const DEADLINE: Duration = Duration::from_secs(90);
/// Automatic checkpoints every this many logged calls (so that
/// `kill_in_checkpoint` has checkpoints to hit).
const CHECKPOINT_EVERY: &str = "8";
/// The watermark of the continuation: past every window of every query.
const FLUSH_MARGIN: i64 = 1_000_000;
const PARTITIONS: u32 = 4;
/// The kinds of fault a step ends by (see [`Plan::new`]).
const KINDS: u64 = 6;

/// What a run can exercise, as counted in [`Report::fired`]: the faults
/// that fired (not merely planned) and the producers' retries they caused.
pub const EXERCISED: [&str; 9] = [
    "SIGKILL after the k-th ack",
    "SIGKILL after a commit, before its answer",
    "torn WAL tail",
    "SIGKILL in an automatic checkpoint",
    "storage failure on a commit (503)",
    "restore mid-stream",
    "resend from the restored offsets",
    "restart with the reordered pipeline",
    "append-mode retry (a possible duplicate)",
];

/// Deterministic pseudo-random numbers (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        nexmark::mix(self.0)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// How a server process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// SIGKILL by the runner after this many acknowledged calls of the process.
    AfterAcks(u64),
    /// The process kills itself (its `STREAMFORGE_FAULTS`).
    SelfKill,
    /// It runs to the end of the workload.
    Never,
}

/// One server process of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Its `STREAMFORGE_FAULTS` (empty: none).
    pub faults: String,
    pub end: End,
    /// Started with the reordered pipeline file.
    pub reordered: bool,
    /// After the process died: cut the last transaction from the WAL.
    pub tear: bool,
    /// Checkpoint after `.0` acknowledged calls, restore it after `.1`.
    pub restore: Option<(u64, u64)>,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.reordered {
            parts.push("start with the reordered pipeline".to_string());
        }
        if !self.faults.is_empty() {
            parts.push(format!("STREAMFORGE_FAULTS={}", self.faults));
        }
        if let Some((c, r)) = self.restore {
            parts.push(format!(
                "checkpoint after {c} acks, restore it after {r} acks"
            ));
        }
        parts.push(match self.end {
            End::AfterAcks(k) if self.faults.starts_with("fail_commit") => {
                format!("SIGKILL {k} acks after the first 503")
            }
            End::AfterAcks(k) => format!("SIGKILL after {k} acks"),
            End::SelfKill => "until the hook kills it".to_string(),
            End::Never => "to the end".to_string(),
        });
        if self.tear {
            parts.push("then tear the WAL tail".into());
        }
        f.write_str(&parts.join(", "))
    }
}

/// A producer: its partitions and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerPlan {
    pub partitions: Vec<u32>,
    pub append: bool,
}

/// Everything a run does, derived from (query, seed).
#[derive(Debug, Clone)]
pub struct Plan {
    pub query: Query,
    pub seed: u64,
    pub events: u64,
    pub watermark_every: u64,
    pub producers: Vec<ProducerPlan>,
    pub batch_max: u64,
    pub steps: Vec<Step>,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "query {} seed {}: {} source events, batches of 1..={}, producers {}",
            self.query.name(),
            self.seed,
            self.events,
            self.batch_max,
            self.producers
                .iter()
                .map(|p| format!(
                    "{:?} {}",
                    p.partitions,
                    if p.append { "append" } else { "offsets" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "  process {i}: {s}")?;
        }
        Ok(())
    }
}

impl Plan {
    /// The plan of `seed` for `query`, with `faults` faults (processes
    /// that end by one) and workloads scaled by `scale`.
    pub fn new(query: Query, seed: u64, faults: usize, scale: u64) -> Plan {
        // (the whole name: q5, q7 and q8 must not share their plans)
        let name = query
            .name()
            .bytes()
            .fold(0u64, |h, b| nexmark::mix(h ^ u64::from(b)));
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ name);
        let (events, watermark_every) = match query {
            // people are 1 event in 50: more source events, rarer advances
            Query::Q8 => (12_000 * scale, 400),
            _ => (1_600 * scale, 80),
        };
        let groups = rng.range(2, 4) as usize;
        // one producer in each mode at least, the others seeded
        let mut producers: Vec<ProducerPlan> = (0..groups)
            .map(|g| ProducerPlan {
                partitions: Vec::new(),
                append: match g {
                    0 => false,
                    1 => true,
                    _ => rng.next().is_multiple_of(2),
                },
            })
            .collect();
        for p in 0..PARTITIONS {
            let g = if (p as usize) < groups {
                p as usize
            } else {
                (rng.next() % groups as u64) as usize
            };
            producers[g].partitions.push(p);
        }
        // the first KINDS faults are every kind once, in a seeded order;
        // any further ones are drawn
        let mut kinds: Vec<u64> = (0..KINDS).collect();
        for i in (1..kinds.len()).rev() {
            kinds.swap(i, rng.range(0, i as u64) as usize);
        }
        let mut steps = Vec::new();
        for i in 0..faults {
            let reordered = i > 0 && rng.next().is_multiple_of(3);
            let mut step = Step {
                faults: String::new(),
                end: End::AfterAcks(rng.range(4, 30)),
                reordered,
                tear: false,
                restore: None,
            };
            let kind = kinds.get(i).copied().unwrap_or_else(|| rng.next() % KINDS);
            match kind {
                0 => {}
                1 => {
                    step.faults = format!("kill_after_commit={}", rng.range(2, 25));
                    step.end = End::SelfKill;
                }
                2 => {
                    step.faults = format!("kill_after_commit={}", rng.range(2, 25));
                    step.end = End::SelfKill;
                    step.tear = true;
                }
                3 => {
                    step.faults = format!("kill_in_checkpoint={}", rng.range(1, 3));
                    step.end = End::SelfKill;
                }
                4 => {
                    // (the kill counts its acks from the first 503)
                    step.faults = format!("fail_commit={}", rng.range(1, 15));
                    step.end = End::AfterAcks(rng.range(3, 20));
                }
                _ => {
                    // far enough apart that windows were published in
                    // between: the restore takes them back
                    let c = rng.range(2, 20);
                    let r = c + rng.range(20, 70);
                    step.restore = Some((c, r));
                    step.end = End::AfterAcks(r + rng.range(2, 15));
                }
            }
            steps.push(step);
        }
        steps.push(Step {
            faults: String::new(),
            end: End::Never,
            reordered: !steps.is_empty() && rng.next().is_multiple_of(3),
            tear: false,
            restore: None,
        });
        // a restart with the reordered pipeline in every run that restarts
        if steps.len() > 1 && !steps.iter().any(|s| s.reordered) {
            let i = rng.range(1, steps.len() as u64 - 1) as usize;
            steps[i].reordered = true;
        }
        Plan {
            query,
            seed,
            events,
            watermark_every,
            producers,
            batch_max: rng.range(1, 32),
            steps,
        }
    }

    fn workload_config(&self) -> nexmark::Config {
        nexmark::Config {
            seed: self.seed,
            events: self.events,
            partitions: PARTITIONS,
            query: self.query,
            watermark_every: self.watermark_every,
            // events arrive up to the lateness behind the watermark: they
            // correct published windows (never late: every pipeline's
            // lateness is 1000)
            lead: 1000,
            ..nexmark::Config::default()
        }
    }
}

/// The shipped pipeline file of a query.
pub fn pipeline_path(query: Query) -> PathBuf {
    Path::new(ROOT)
        .join("pipelines")
        .join(format!("{}.json", query.name()))
}

/// The same pipeline with its partitions, windows and fields in reverse
/// order (an equivalent file, which a restart must accept).
pub fn reordered(text: &str) -> String {
    let v: Value = serde_json::from_str(text).expect("pipeline JSON");
    let mut parts: Vec<String> = v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    parts.reverse();
    let mut windows: Vec<String> = v["windows"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, def)| {
            let mut fields: Vec<String> = def
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, x)| format!("{}:{x}", Value::from(k.as_str())))
                .collect();
            fields.reverse();
            format!("{}:{{{}}}", Value::from(name.as_str()), fields.join(","))
        })
        .collect();
    windows.reverse();
    format!(
        "{{\"lateness\":{},\"windows\":{{{}}},\"partitions\":[{}]}}",
        v["lateness"],
        windows.join(","),
        parts.join(",")
    )
}

/// A running server process, killed (SIGKILL) when dropped.
struct Proc {
    child: Child,
    base: String,
}

impl Proc {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a server (the test kit's fixture: `listening on` then `/readyz`
/// 200) with the chaos suite's flags, its stderr appended to `log`.
fn spawn(db: &Path, pipeline: &Path, faults: &str, log: &Path) -> Result<Proc, String> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| e.to_string())?;
    let args: [&std::ffi::OsStr; 4] = [
        "--pipeline".as_ref(),
        pipeline.as_os_str(),
        "--checkpoint-every".as_ref(),
        CHECKPOINT_EVERY.as_ref(),
    ];
    let spawned = streamforge_testkit::spawn_serve(
        Path::new(BIN),
        db,
        &args,
        |cmd| {
            cmd.env_remove("STREAMFORGE_TOKEN")
                .env_remove("STREAMFORGE_FAULTS")
                .env("RUST_LOG", "warn")
                .stderr(Stdio::from(stderr));
            if !faults.is_empty() {
                cmd.env("STREAMFORGE_FAULTS", faults);
            }
        },
        DEADLINE,
    );
    match spawned {
        Ok(s) => Ok(Proc {
            child: s.child,
            base: format!("http://{}", s.addr),
        }),
        Err(streamforge_testkit::NotReady::Exited) => Err(format!(
            "the server exited before it was ready: {}",
            tail(log)
        )),
        Err(streamforge_testkit::NotReady::Deadline) => {
            Err("the server was not ready before the deadline".into())
        }
    }
}

/// How many times `needle` occurs in a log file (0 for an empty needle).
fn log_count(log: &Path, needle: &str) -> usize {
    if needle.is_empty() {
        return 0;
    }
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// The last lines of a log file.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// What the threads share.
struct Shared {
    /// Server generation (bumped at every start) and its base URL (`None`
    /// while no server is up).
    generation: u64,
    base: Option<String>,
    /// Acknowledged calls of the current process, and of the run.
    acks: u64,
    total_acks: u64,
    /// The producers must park between calls (a restore is coming).
    paused: bool,
    parked: usize,
    /// Producers, and those that sent everything (they wait for the end,
    /// or for a restore that takes some of it back).
    producers: usize,
    finished: usize,
    /// The run is over: finished producers and the consumer stop.
    stop: bool,
    /// Restores so far (producers resync when theirs is behind).
    restores: u64,
    /// The consumer must park between pages.
    consumer_paused: bool,
    consumer_parked: bool,
    /// The largest acknowledged offset per partition (since the last restore).
    acked: BTreeMap<u32, i64>,
    /// Producer calls between taking a server and recording its answer
    /// (a 2xx answer counts until the producer has recorded it in
    /// `acked`): after a kill, the control waits for none, so the offsets
    /// it checks the next process against hold every acknowledgment.
    in_call: usize,
    /// 503 answers from the current process.
    unavailable: u64,
    /// What fired so far (names from [`EXERCISED`]).
    fired: BTreeMap<&'static str, u64>,
    failure: Option<String>,
}

struct Ctl {
    m: Mutex<Shared>,
    cv: Condvar,
    client: Client,
}

impl Ctl {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one occurrence of `what` (one of [`EXERCISED`]).
    fn fired(&self, what: &'static str) {
        debug_assert!(EXERCISED.contains(&what));
        *self.lock().fired.entry(what).or_insert(0) += 1;
    }

    fn fail(&self, msg: String) {
        let mut s = self.lock();
        if s.failure.is_none() {
            s.failure = Some(msg);
        }
        self.cv.notify_all();
    }

    /// Waits until `cond` holds (or the run failed, or the deadline).
    fn wait<T>(
        &self,
        what: &str,
        mut cond: impl FnMut(&mut Shared) -> Option<T>,
    ) -> Result<T, String> {
        let end = Instant::now() + DEADLINE;
        let mut s = self.lock();
        loop {
            if let Some(f) = &s.failure {
                return Err(f.clone());
            }
            if let Some(v) = cond(&mut s) {
                return Ok(v);
            }
            let now = Instant::now();
            if now > end {
                return Err(format!("timed out waiting for {what}"));
            }
            s = self
                .cv
                .wait_timeout(s, (end - now).min(Duration::from_millis(200)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The current server, waiting while there is none. The consumer
    /// (`consumer`) also waits while it is paused, and counts as parked
    /// meanwhile.
    fn current(&self, consumer: bool) -> Result<(u64, String), String> {
        self.wait("a server", |s| {
            let go = s.base.is_some() && !(consumer && s.consumer_paused);
            if consumer {
                s.consumer_parked = !go;
            }
            go.then(|| (s.generation, s.base.clone().unwrap_or_default()))
        })
    }

    /// Sends a request until it is answered 2xx: connection failures wait
    /// for the next server, 503s are retried. Another answer fails the run.
    fn call(
        &self,
        what: &str,
        make: &dyn Fn(&Client, &str) -> RequestBuilder,
    ) -> Result<String, String> {
        self.call_as(false, what, make, &mut 0)
    }

    /// A producer's [`Ctl::call`]: counted in `in_call` until the producer
    /// has recorded the answer ([`Ctl::answered`]); `retries` counts the
    /// attempts that were not answered 2xx.
    fn produce(
        &self,
        what: &str,
        make: &dyn Fn(&Client, &str) -> RequestBuilder,
        retries: &mut u64,
    ) -> Result<String, String> {
        self.call_with(false, true, what, make, retries)
    }

    /// A producer recorded the answer of its call.
    fn answered(s: &mut Shared) {
        s.in_call -= 1;
    }

    fn call_as(
        &self,
        consumer: bool,
        what: &str,
        make: &dyn Fn(&Client, &str) -> RequestBuilder,
        retries: &mut u64,
    ) -> Result<String, String> {
        self.call_with(consumer, false, what, make, retries)
    }

    fn call_with(
        &self,
        consumer: bool,
        producer: bool,
        what: &str,
        make: &dyn Fn(&Client, &str) -> RequestBuilder,
        retries: &mut u64,
    ) -> Result<String, String> {
        let end = Instant::now() + DEADLINE;
        // 503s in a row: after a storage failure the service rebuilds its
        // state before it answers, so the retry succeeds; many in a row
        // mean storage keeps failing
        let mut unavailable = 0;
        loop {
            let (generation, base) = self.current(consumer)?;
            if producer {
                self.lock().in_call += 1;
            }
            let sent = make(&self.client, &base).send();
            let answer = sent.map(|r| (r.status().as_u16(), r.text().unwrap_or_default()));
            if producer && !matches!(answer, Ok((200..=299, _))) {
                self.lock().in_call -= 1;
                self.cv.notify_all();
            }
            match answer {
                Ok((status, body)) => match status {
                    200..=299 => return Ok(body),
                    503 => {
                        *retries += 1;
                        self.lock().unavailable += 1;
                        unavailable += 1;
                        if unavailable >= 50 {
                            return Err(format!(
                                "{what}: 503 {unavailable} times in a row: {body}"
                            ));
                        }
                    }
                    _ => return Err(format!("{what}: {status} {body}")),
                },
                Err(_) => {
                    *retries += 1;
                    unavailable = 0;
                    // the server is gone (or going): wait for the next one
                    let _ = self.wait("the next server", |s| {
                        (s.generation != generation || s.base.is_none()).then_some(())
                    });
                }
            }
            if Instant::now() > end {
                return Err(format!("{what}: never acknowledged"));
            }
        }
    }

    fn get(&self, path: &str) -> Result<Value, String> {
        self.get_as(false, path)
    }

    fn get_as(&self, consumer: bool, path: &str) -> Result<Value, String> {
        let body = self.call_as(
            consumer,
            &format!("GET {path}"),
            &|c, b| c.get(format!("{b}{path}")),
            &mut 0,
        )?;
        serde_json::from_str(&body).map_err(|e| format!("GET {path}: {e}: {body}"))
    }
}

/// The operations of one producer, in stream order, and where each
/// partition's deliveries are among them.
struct Work {
    ops: Vec<nexmark::Op>,
    /// Per partition: the op index of the delivery at each offset.
    at: BTreeMap<u32, Vec<usize>>,
}

fn producer(
    ctl: &Ctl,
    plan: &ProducerPlan,
    work: &Work,
    rng: &mut Rng,
    batch_max: u64,
) -> Result<(), String> {
    let mut pos = 0usize;
    let mut restores_seen = 0u64;
    // append mode: (op index after the call, end offset per partition)
    let mut entries: Vec<(usize, Vec<(u32, i64)>)> = Vec::new();
    loop {
        if pos >= work.ops.len() {
            // everything sent: wait for the end of the run, or for a
            // restore that takes some of it back
            let mut s = ctl.lock();
            s.finished += 1;
            ctl.cv.notify_all();
            drop(s);
            let more = ctl.wait("the end of the run", |s| {
                if s.stop {
                    Some(false)
                } else if s.restores != restores_seen && !s.paused {
                    Some(true)
                } else {
                    None
                }
            });
            let mut s = ctl.lock();
            s.finished -= 1;
            drop(s);
            if !more? {
                return Ok(());
            }
        }
        // park for a restore, then resync from the restored offsets
        let resync = {
            let mut s = ctl.lock();
            if s.restores != restores_seen && !s.paused {
                restores_seen = s.restores;
                true
            } else if s.paused {
                s.parked += 1;
                ctl.cv.notify_all();
                drop(s);
                ctl.wait("the end of the pause", |s| (!s.paused).then_some(()))?;
                let mut s = ctl.lock();
                s.parked -= 1;
                let r = s.restores != restores_seen;
                restores_seen = s.restores;
                r
            } else {
                false
            }
        };
        if resync {
            let status = ctl.get("/status")?;
            let offset = |p: u32| {
                status["partitions"][format!("p{p}")]["offset"]
                    .as_i64()
                    .unwrap_or(-1)
            };
            let before = pos;
            pos = if plan.append {
                let keep = entries
                    .iter()
                    .take_while(|(_, ends)| ends.iter().all(|(p, o)| *o <= offset(*p)))
                    .count();
                entries.truncate(keep);
                entries.last().map_or(0, |e| e.0)
            } else {
                plan.partitions
                    .iter()
                    .map(|p| {
                        let c = offset(*p);
                        if c < 0 {
                            0
                        } else {
                            work.at[p][c as usize] + 1
                        }
                    })
                    .min()
                    .unwrap_or(0)
            };
            if pos < before {
                ctl.fired("resend from the restored offsets");
            }
            continue;
        }
        let (n, body, path, ndjson) = match &work.ops[pos] {
            nexmark::Op::Advance {
                partition,
                watermark,
            } => (
                1,
                format!("{{\"partition\":\"p{partition}\",\"watermark\":{watermark}}}"),
                "/watermarks",
                false,
            ),
            nexmark::Op::Deliver { .. } => {
                let want = rng.range(1, batch_max) as usize;
                let mut lines = String::new();
                let mut n = 0;
                while n < want && pos + n < work.ops.len() {
                    let op = &work.ops[pos + n];
                    if !matches!(op, nexmark::Op::Deliver { .. }) {
                        break;
                    }
                    let line = op.to_line(!plan.append);
                    // the service takes a Delivery: no "op"
                    lines.push_str(&line.replacen("\"op\":\"deliver\",", "", 1));
                    lines.push('\n');
                    n += 1;
                }
                (n, lines, "/events", true)
            }
        };
        let mut retries = 0;
        let answer = ctl.produce(
            &format!("POST {path}"),
            &|c, b| {
                let ct = if ndjson {
                    "application/x-ndjson"
                } else {
                    "application/json"
                };
                c.post(format!("{b}{path}"))
                    .header("content-type", ct)
                    .body(body.clone())
            },
            &mut retries,
        )
        .map_err(|e| {
            // an offset-mode producer sends offset c + 1 only once c was
            // acknowledged (or read back from /status after a restore)
            if !plan.append && e.contains("leaves a gap") {
                format!("acknowledged deliveries were lost (the service's next offset is behind what it acknowledged): {e}")
            } else {
                e
            }
        })?;
        if plan.append && ndjson && retries > 0 {
            ctl.fired("append-mode retry (a possible duplicate)");
        }
        let v: Value = serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
        let mut ends = Vec::new();
        if let Some(offs) = v["offsets"].as_object() {
            for (p, o) in offs {
                let p: u32 = p[1..].parse().map_err(|_| format!("partition {p}"))?;
                ends.push((p, o.as_i64().unwrap_or(-1)));
            }
        }
        pos += n;
        let mut s = ctl.lock();
        // an answer of a process that a restore has since replaced is
        // void: the resync after the pause decides what to resend
        s.acks += 1;
        s.total_acks += 1;
        Ctl::answered(&mut s);
        for (p, o) in &ends {
            let e = s.acked.entry(*p).or_insert(-1);
            *e = (*e).max(*o);
        }
        ctl.cv.notify_all();
        drop(s);
        if plan.append && !ends.is_empty() {
            entries.push((pos, ends));
        }
    }
}

/// A consumer of `/changes` that keeps what it read and checks the
/// sequence (docs/api.md, "Restores and epochs").
pub struct Consumer {
    pub held: Vec<Value>,
    after: u64,
    epoch: u64,
    pub rewinds: Vec<u64>,
}

impl Consumer {
    fn new() -> Consumer {
        Consumer {
            held: Vec::new(),
            after: 0,
            epoch: 0,
            rewinds: Vec::new(),
        }
    }

    /// One page (long poll `wait_ms`); true when it was empty at the head.
    fn page(&mut self, ctl: &Ctl, wait_ms: u64) -> Result<bool, String> {
        let v = ctl.get_as(
            true,
            &format!(
                "/changes?after={}&epoch={}&limit=1000&wait_ms={wait_ms}",
                self.after, self.epoch
            ),
        )?;
        if let Some(to) = v.get("rewound_to") {
            let to = to.as_u64().ok_or("rewound_to")?;
            self.rewinds.push(to);
            if to as usize > self.held.len() {
                return Err(format!(
                    "rewound to {to}, beyond the {} changes read",
                    self.held.len()
                ));
            }
            self.held.truncate(to as usize);
        }
        let items = v["changes"].as_array().ok_or("changes")?;
        for it in items {
            let seq = it["seq"].as_u64().ok_or("seq")?;
            if seq != self.held.len() as u64 + 1 {
                return Err(format!(
                    "changelog: change {seq} follows {} in epoch {} (a gap or a repeat; rewinds {:?})",
                    self.held.len(),
                    v["epoch"],
                    self.rewinds
                ));
            }
            self.held.push(it.clone());
        }
        self.after = v["next"].as_u64().ok_or("next")?;
        self.epoch = v["epoch"].as_u64().ok_or("epoch")?;
        Ok(items.is_empty() && self.after >= v["head"].as_u64().unwrap_or(0))
    }

    /// Reads until a page is empty at the head.
    fn catch_up(&mut self, ctl: &Ctl) -> Result<(), String> {
        while !self.page(ctl, 0)? {}
        Ok(())
    }
}

fn consume(ctl: &Ctl, c: &mut Consumer) -> Result<(), String> {
    while !ctl.lock().stop {
        // (a paused consumer parks inside `current`)
        c.page(ctl, 100)?;
    }
    Ok(())
}

/// WAL file layout (sqlite.org/fileformat.html, "The WAL file format").
const WAL_HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// Cuts the last transaction's commit frame short in the `-wal` file of
/// `db`, if SQLite has not copied (or started copying) it into the
/// database yet. Returns what was done.
///
/// The server holds its database exclusively, with the WAL index in its
/// memory (no `-shm` file says how far the copy got), so the copy is read
/// from the database file: a page of the last transaction whose bytes in
/// the database are already the frame's may have been copied, and then
/// the tail is left whole. (A page the copy has not reached holds an
/// older version; a copied page cannot be half written, since a killed
/// process never ends a `pwrite` midway.)
fn tear_wal(db: &Path) -> Result<String, String> {
    let wal_path = PathBuf::from(format!("{}-wal", db.display()));
    let wal = std::fs::read(&wal_path).map_err(|e| format!("read the WAL: {e}"))?;
    if wal.len() < WAL_HEADER {
        return Ok("not torn: no WAL".into());
    }
    let be = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let page = be(&wal, 8) as usize;
    let (salt1, salt2) = (be(&wal, 16), be(&wal, 20));
    let frame = FRAME_HEADER + page;
    // (1-based frame number of each commit frame with the current salts)
    let mut commits = Vec::new();
    let mut i = 0usize;
    while WAL_HEADER + (i + 1) * frame <= wal.len() {
        let at = WAL_HEADER + i * frame;
        if be(&wal, at + 8) != salt1 || be(&wal, at + 12) != salt2 {
            break;
        }
        if be(&wal, at + 4) != 0 {
            commits.push(i + 1);
        }
        i += 1;
    }
    let Some(&last) = commits.last() else {
        return Ok("not torn: no commit in the WAL".into());
    };
    let first_of_last = commits.len().checked_sub(2).map_or(1, |k| commits[k] + 1);
    let file = std::fs::read(db).map_err(|e| format!("read the database: {e}"))?;
    for n in first_of_last..=last {
        let at = WAL_HEADER + (n - 1) * frame;
        let number = be(&wal, at) as usize;
        let in_db = number
            .checked_sub(1)
            .and_then(|p| file.get(p * page..(p + 1) * page));
        if in_db == Some(&wal[at + FRAME_HEADER..at + frame]) {
            return Ok(format!(
                "not torn: page {number} of frame {n} may have been copied into the database"
            ));
        }
    }
    let cut_to = WAL_HEADER + (last - 1) * frame + FRAME_HEADER + page / 2;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&wal_path)
        .map_err(|e| e.to_string())?;
    f.set_len(cut_to as u64).map_err(|e| e.to_string())?;
    Ok(format!(
        "torn: frame {last} (of frames {first_of_last}..={last}, the last transaction) cut at byte {cut_to}"
    ))
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct Report {
    pub acks: u64,
    pub processes: usize,
    pub changes: usize,
    pub rows: usize,
    pub notes: Vec<String>,
    /// What fired, by name (from [`EXERCISED`]).
    pub fired: BTreeMap<&'static str, u64>,
}

/// One run: the plan, its workload and its oracle.
pub struct Run {
    pub plan: Plan,
    dir: PathBuf,
}

impl Run {
    pub fn new(plan: Plan, dir: &Path) -> Run {
        Run {
            plan,
            dir: dir.to_path_buf(),
        }
    }

    /// Runs the plan and checks the end state; `Err` names the failed
    /// check (the caller adds the seed and schedule).
    pub fn go(&self) -> Result<Report, String> {
        let plan = &self.plan;
        let spec_text =
            std::fs::read_to_string(pipeline_path(plan.query)).map_err(|e| e.to_string())?;
        let spec = Spec::from_json(&spec_text)?;
        let lateness = spec.lateness;
        let plain = pipeline_path(plan.query);
        let turned = self.dir.join("reordered.json");
        std::fs::write(&turned, reordered(&spec_text)).map_err(|e| e.to_string())?;
        let db = self.dir.join("chaos.db");
        let log = self.dir.join("server.log");

        // the workload, split by producer
        let workload = nexmark::Workload::new(plan.workload_config());
        let end_w = workload.end();
        let ops: Vec<nexmark::Op> = workload.collect();
        let mut events = Vec::new();
        let mut lengths: BTreeMap<u32, i64> = BTreeMap::new();
        for op in &ops {
            if let nexmark::Op::Deliver {
                partition,
                id,
                key,
                timestamp,
                value,
                ..
            } = op
            {
                events.push(Ev {
                    id: id.clone(),
                    key: key.clone(),
                    ts: *timestamp,
                    value: *value,
                });
                *lengths.entry(*partition).or_insert(0) += 1;
            }
        }
        let oracle = Oracle::new(spec, events)?;
        let works: Vec<Work> = plan
            .producers
            .iter()
            .map(|pp| {
                let mine: Vec<nexmark::Op> = ops
                    .iter()
                    .filter(|op| pp.partitions.contains(&op.partition()))
                    .cloned()
                    .collect();
                let mut at: BTreeMap<u32, Vec<usize>> =
                    pp.partitions.iter().map(|p| (*p, Vec::new())).collect();
                for (i, op) in mine.iter().enumerate() {
                    if let nexmark::Op::Deliver { partition, .. } = op {
                        at.get_mut(partition).unwrap().push(i);
                    }
                }
                Work { ops: mine, at }
            })
            .collect();

        let ctl = Arc::new(Ctl {
            m: Mutex::new(Shared {
                generation: 0,
                base: None,
                acks: 0,
                total_acks: 0,
                paused: false,
                parked: 0,
                producers: plan.producers.len(),
                finished: 0,
                stop: false,
                restores: 0,
                consumer_paused: false,
                consumer_parked: false,
                acked: BTreeMap::new(),
                fired: BTreeMap::new(),
                in_call: 0,
                unavailable: 0,
                failure: None,
            }),
            cv: Condvar::new(),
            client: Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .map_err(|e| e.to_string())?,
        });
        let mut notes = Vec::new();
        let mut proc: Option<Proc> = None;
        let outcome = std::thread::scope(|scope| -> Result<Consumer, String> {
            let mut handles = Vec::new();
            for (i, (pp, work)) in plan.producers.iter().zip(&works).enumerate() {
                let ctl = ctl.clone();
                let mut rng = Rng(plan.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9));
                let batch_max = plan.batch_max;
                handles.push(scope.spawn(move || {
                    let r = producer(&ctl, pp, work, &mut rng, batch_max);
                    if let Err(e) = &r {
                        ctl.fail(format!("producer {i}: {e}"));
                    }
                    r
                }));
            }
            let consumer = {
                let ctl = ctl.clone();
                scope.spawn(move || {
                    let mut c = Consumer::new();
                    let r = consume(&ctl, &mut c);
                    if let Err(e) = &r {
                        ctl.fail(format!("consumer: {e}"));
                    }
                    r.map(|()| c)
                })
            };
            let controlled = self.control(&ctl, &db, &log, &plain, &turned, &mut proc, &mut notes);
            if let Err(e) = &controlled {
                ctl.fail(e.clone());
            }
            {
                let mut s = ctl.lock();
                s.stop = true;
                ctl.cv.notify_all();
            }
            for h in handles {
                h.join().map_err(|_| "a producer panicked".to_string())??;
            }
            let c = consumer
                .join()
                .map_err(|_| "the consumer panicked".to_string())??;
            controlled?;
            Ok(c)
        });
        let mut consumer = match outcome {
            Ok(c) => c,
            Err(e) => {
                if let Some(mut p) = proc {
                    p.kill();
                }
                return Err(e);
            }
        };
        let proc = proc.ok_or("no server at the end")?;
        let mut guard = proc;
        let r = self.check(
            &ctl,
            &mut consumer,
            &oracle,
            &lengths,
            end_w,
            lateness,
            &plain,
            &mut notes,
        );
        guard.kill();
        let changes = consumer.held.len();
        let s = ctl.lock();
        r.map(|rows| Report {
            acks: s.total_acks,
            processes: plan.steps.len(),
            changes,
            rows,
            notes,
            fired: s.fired.clone(),
        })
    }

    /// Follows the schedule until the producers are done.
    #[allow(clippy::too_many_arguments)]
    fn control(
        &self,
        ctl: &Ctl,
        db: &Path,
        log: &Path,
        plain: &Path,
        turned: &Path,
        proc: &mut Option<Proc>,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let done = |s: &mut Shared| s.finished == s.producers;
        for (i, step) in self.plan.steps.iter().enumerate() {
            if step.tear {
                // nobody may read the transaction that will be torn off
                // (the consumer stays parked while this process lives)
                let mut s = ctl.lock();
                s.consumer_paused = true;
                ctl.cv.notify_all();
                drop(s);
                ctl.wait("the consumer to park", |s| s.consumer_parked.then_some(()))?;
            }
            // (every answer of the previous process recorded: no server is
            // up, so the producers' calls in flight end)
            let acked_before = ctl.wait("the answers of the previous process", |s| {
                (s.in_call == 0).then(|| s.acked.clone())
            })?;
            // (the hooks log a line when they fire: what fired is counted
            // from the log, so a process that dies otherwise is a failure)
            let hook = step
                .faults
                .split_once('=')
                .map(|(name, _)| match name {
                    "fail_commit" => "injected failure".to_string(),
                    other => format!("fault=\"{other}\""),
                })
                .unwrap_or_default();
            let hooks_before = log_count(log, &hook);
            let pipeline = if step.reordered { turned } else { plain };
            let p =
                spawn(db, pipeline, &step.faults, log).map_err(|e| format!("process {i}: {e}"))?;
            // every acknowledged delivery survived the previous process
            let status: Value = {
                let r = ctl
                    .client
                    .get(format!("{}/status", p.base))
                    .send()
                    .and_then(|r| r.text())
                    .map_err(|e| format!("process {i}: GET /status: {e}"))?;
                serde_json::from_str(&r).map_err(|e| format!("{e}: {r}"))?
            };
            for (part, o) in &acked_before {
                let have = status["partitions"][format!("p{part}")]["offset"]
                    .as_i64()
                    .unwrap_or(-2);
                if have < *o {
                    return Err(format!(
                        "process {i}: partition p{part} has consumed offset {have}, but offset {o} was acknowledged"
                    ));
                }
            }
            {
                let mut s = ctl.lock();
                s.generation += 1;
                s.base = Some(p.base.clone());
                s.acks = 0;
                s.unavailable = 0;
                s.consumer_paused = step.tear;
                ctl.cv.notify_all();
            }
            *proc = Some(p);
            if step.reordered {
                ctl.fired("restart with the reordered pipeline");
            }
            if let Some((c, r)) = step.restore {
                let reached = ctl.wait("acks before the checkpoint", |s| {
                    (s.acks >= c || done(s)).then_some(!done(s))
                })?;
                if reached {
                    let cp = ctl.call("POST /checkpoints", &|cl, b| {
                        cl.post(format!("{b}/checkpoints"))
                    })?;
                    let id = serde_json::from_str::<Value>(&cp).map_err(|e| e.to_string())?["id"]
                        .as_i64()
                        .ok_or("checkpoint id")?;
                    let reached = ctl.wait("acks before the restore", |s| {
                        (s.acks >= r || done(s)).then_some(!done(s))
                    })?;
                    if reached {
                        self.restore(ctl, id, notes)?;
                    }
                }
            }
            if step.faults.starts_with("fail_commit") {
                // the kill's acks count from the storage failure
                let failed = ctl.wait("the storage failure", |s| {
                    (s.unavailable > 0 || done(s)).then_some(s.unavailable > 0)
                })?;
                if failed {
                    ctl.lock().acks = 0;
                }
            }
            match step.end {
                End::Never => {
                    ctl.wait("the producers", |s| done(s).then_some(()))?;
                    return Ok(());
                }
                End::AfterAcks(k) => {
                    let fired = ctl.wait("acks before the kill", |s| {
                        (s.acks >= k || done(s)).then_some(!done(s))
                    })?;
                    if !fired {
                        notes.push(format!("process {i}: the workload ended before {k} acks"));
                        if !step.faults.is_empty() {
                            // (its faults must not fire during the checks)
                            self.clean_restart(ctl, db, log, plain, proc)?;
                        }
                        return Ok(());
                    }
                    let mut p = proc.take().unwrap();
                    ctl.lock().base = None;
                    p.kill();
                    ctl.fired("SIGKILL after the k-th ack");
                    if step.faults.starts_with("fail_commit") {
                        if log_count(log, &hook) > hooks_before {
                            ctl.fired("storage failure on a commit (503)");
                        } else {
                            notes.push(format!("process {i}: {} did not fire", step.faults));
                        }
                    }
                }
                End::SelfKill => {
                    let p = proc.as_mut().unwrap();
                    let end = Instant::now() + DEADLINE;
                    let mut fired = false;
                    let mut s = ctl.lock();
                    loop {
                        if let Some(f) = &s.failure {
                            return Err(f.clone());
                        }
                        if let Ok(Some(_)) = p.child.try_wait() {
                            fired = true;
                            break;
                        }
                        if done(&mut s) {
                            break;
                        }
                        if Instant::now() > end {
                            return Err(format!("process {i}: neither died nor finished"));
                        }
                        s = ctl
                            .cv
                            .wait_timeout(s, Duration::from_millis(10))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    if !fired {
                        drop(s);
                        notes.push(format!(
                            "process {i}: the workload ended before {} fired",
                            step.faults
                        ));
                        self.clean_restart(ctl, db, log, plain, proc)?;
                        return Ok(());
                    }
                    s.base = None;
                    drop(s);
                    let status = proc
                        .take()
                        .and_then(|mut p| p.child.try_wait().ok().flatten());
                    if log_count(log, &hook) <= hooks_before {
                        return Err(format!(
                            "process {i} exited ({status:?}) but its fault {} did not fire: {}",
                            step.faults,
                            tail(log)
                        ));
                    }
                    ctl.fired(if step.faults.starts_with("kill_in_checkpoint") {
                        "SIGKILL in an automatic checkpoint"
                    } else {
                        "SIGKILL after a commit, before its answer"
                    });
                }
            }
            if step.tear {
                let torn = tear_wal(db)?;
                if torn.starts_with("torn") {
                    ctl.fired("torn WAL tail");
                }
                notes.push(format!("process {i}: {torn}"));
            }
        }
        Ok(())
    }

    /// SIGKILL, then a process without faults for the end of the run.
    fn clean_restart(
        &self,
        ctl: &Ctl,
        db: &Path,
        log: &Path,
        plain: &Path,
        proc: &mut Option<Proc>,
    ) -> Result<(), String> {
        if let Some(mut p) = proc.take() {
            ctl.lock().base = None;
            p.kill();
        }
        let p = spawn(db, plain, "", log)?;
        let mut s = ctl.lock();
        s.generation += 1;
        s.base = Some(p.base.clone());
        s.acks = 0;
        s.unavailable = 0;
        s.consumer_paused = false;
        ctl.cv.notify_all();
        drop(s);
        *proc = Some(p);
        Ok(())
    }

    /// Pauses the producers, restores checkpoint `id`, lets them resync.
    fn restore(&self, ctl: &Ctl, id: i64, notes: &mut Vec<String>) -> Result<(), String> {
        {
            let mut s = ctl.lock();
            s.paused = true;
            ctl.cv.notify_all();
        }
        ctl.wait("the producers to park", |s| {
            (s.parked + s.finished == s.producers).then_some(())
        })?;
        let r = ctl.call("POST /checkpoints/{id}/restore", &|c, b| {
            c.post(format!("{b}/checkpoints/{id}/restore"))
        });
        let status = r.and_then(|_| ctl.get("/status"));
        if status.is_ok() {
            ctl.fired("restore mid-stream");
        }
        let mut s = ctl.lock();
        s.restores += 1;
        s.paused = false;
        ctl.cv.notify_all();
        let status = status?;
        s.acked.clear();
        for p in 0..PARTITIONS {
            let o = status["partitions"][format!("p{p}")]["offset"]
                .as_i64()
                .unwrap_or(-1);
            s.acked.insert(p, o);
        }
        notes.push(format!(
            "restored checkpoint {id} after {} acks (sequence {})",
            s.total_acks, status["sequence"]
        ));
        Ok(())
    }

    /// The checks at the end of a run.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        ctl: &Ctl,
        consumer: &mut Consumer,
        oracle: &Oracle,
        lengths: &BTreeMap<u32, i64>,
        end_w: i64,
        lateness: i128,
        pipeline: &Path,
        notes: &mut Vec<String>,
    ) -> Result<usize, String> {
        let spec = oracle.spec();
        consumer.catch_up(ctl)?;
        // the consumer holds exactly the stored changelog
        let stored = all_changes(ctl)?;
        if stored != consumer.held {
            return Err(format!(
                "the consumer holds {} changes, the service stores {} (first difference at {:?})",
                consumer.held.len(),
                stored.len(),
                stored.iter().zip(&consumer.held).position(|(a, b)| a != b)
            ));
        }
        let applied = apply_changelog(&consumer.held)?;
        // final rows at the end of the stream
        let results = ctl.get("/results")?;
        let w = results["watermark"]
            .as_i64()
            .ok_or("no watermark at the end")?;
        if w != end_w {
            return Err(format!(
                "the global watermark is {w}, the stream ended at {end_w}"
            ));
        }
        let event_time: Vec<Row> = applied
            .values()
            .filter(|r| !spec.is_stream_time(&r.window))
            .cloned()
            .collect();
        diff(
            "the changelog applied at the end of the stream vs the oracle",
            &event_time,
            &oracle.ready_at(w.into()),
        )?;
        // /results = the changelog applied, less the finalized rows
        let visible: Vec<Row> = results["results"]
            .as_array()
            .ok_or("results")?
            .iter()
            .map(Row::from_json)
            .collect::<Result<_, _>>()?;
        let expected: Vec<Row> = applied
            .values()
            .filter(|r| r.end + lateness >= i128::from(w))
            .cloned()
            .collect();
        diff(
            "GET /results vs the changelog applied less the finalized rows",
            &visible,
            &expected,
        )?;
        // every acknowledged delivery is in the offsets
        let status = ctl.get("/status")?;
        if status["late"] != 0 {
            return Err(format!(
                "{} late records, but the workload makes no event late",
                status["late"]
            ));
        }
        let acked = ctl.lock().acked.clone();
        for pp in &self.plan.producers {
            for p in &pp.partitions {
                let have = status["partitions"][format!("p{p}")]["offset"]
                    .as_i64()
                    .unwrap_or(-2);
                let len = lengths.get(p).copied().unwrap_or(0);
                let a = acked.get(p).copied().unwrap_or(-1);
                let ok = if pp.append {
                    have >= len - 1
                } else {
                    have == len - 1
                };
                if !ok || have < a {
                    return Err(format!(
                        "partition p{p} ({}): consumed offset {have}, the stream has {len} deliveries, {a} acknowledged",
                        if pp.append { "append mode" } else { "offset mode" }
                    ));
                }
            }
        }
        // a checkpoint at the end restores in a fresh process and continues
        // with the same output
        let cp: Value = serde_json::from_str(&ctl.call("POST /checkpoints", &|c, b| {
            c.post(format!("{b}/checkpoints"))
        })?)
        .map_err(|e| e.to_string())?;
        let id = cp["id"].as_i64().ok_or("checkpoint id")?;
        let (_, base) = ctl.current(false)?;
        let envelope = ctl
            .client
            .get(format!("{base}/checkpoints/{id}"))
            .send()
            .and_then(|r| r.bytes())
            .map_err(|e| format!("GET /checkpoints/{id}: {e}"))?;
        let fresh_db = self.dir.join("fresh.db");
        let fresh = spawn(&fresh_db, pipeline, "", &self.dir.join("fresh.log"))?;
        let mut fresh = fresh;
        let post = |base: &str, path: &str, body: Vec<u8>| -> Result<String, String> {
            let r = ctl
                .client
                .post(format!("{base}{path}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .map_err(|e| format!("POST {path}: {e}"))?;
            let st = r.status().as_u16();
            let t = r.text().unwrap_or_default();
            if st == 200 {
                Ok(t)
            } else {
                Err(format!("POST {path}: {st} {t}"))
            }
        };
        post(&fresh.base, "/restore", envelope.to_vec())?;
        let flush = end_w + FLUSH_MARGIN;
        for p in 0..PARTITIONS {
            let body = format!("{{\"partition\":\"p{p}\",\"watermark\":{flush}}}").into_bytes();
            let a = post(&base, "/watermarks", body.clone())?;
            let b = post(&fresh.base, "/watermarks", body)?;
            if a != b {
                return Err(format!(
                    "the continuation after the end checkpoint differs in a fresh process: {a} vs {b}"
                ));
            }
        }
        for path in ["/results", "/status"] {
            let get = |b: &str| -> Result<Value, String> {
                let t = ctl
                    .client
                    .get(format!("{b}{path}"))
                    .send()
                    .and_then(|r| r.text())
                    .map_err(|e| format!("GET {path}: {e}"))?;
                let mut v: Value = serde_json::from_str(&t).map_err(|e| e.to_string())?;
                v.as_object_mut().map(|o| o.remove("epoch"));
                Ok(v)
            };
            let (a, b) = (get(&base)?, get(&fresh.base)?);
            if a != b {
                return Err(format!(
                    "after the continuation, {path} differs in the fresh process: {a} vs {b}"
                ));
            }
        }
        fresh.kill();
        // after the continuation every window is ready: all of the oracle
        consumer.catch_up(ctl)?;
        let applied = apply_changelog(&consumer.held)?;
        let all: Vec<Row> = applied.values().cloned().collect();
        let (stream_time, event_time): (Vec<Row>, Vec<Row>) = all
            .into_iter()
            .partition(|r| spec.is_stream_time(&r.window));
        diff(
            "the changelog applied after the continuation vs the oracle",
            &event_time,
            &oracle.event_time_rows(),
        )?;
        oracle.check_stream_time(&stream_time, end_w.into())?;
        let rows = applied.len();
        if rows == 0 {
            return Err("the run produced no rows".into());
        }
        notes.push(format!("{} rows", rows));
        Ok(rows)
    }
}

/// The whole stored changelog of the current epoch.
fn all_changes(ctl: &Ctl) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut after = 0u64;
    loop {
        let v = ctl.get(&format!("/changes?after={after}&limit=10000"))?;
        let items = v["changes"].as_array().ok_or("changes")?;
        if items.is_empty() {
            return Ok(out);
        }
        out.extend(items.iter().cloned());
        after = v["next"].as_u64().ok_or("next")?;
    }
}

/// Runs (query, seed) with `faults` faults in a fresh temporary directory;
/// `Err` carries the seed, the schedule and what failed.
pub fn run_seed(query: Query, seed: u64, faults: usize, scale: u64) -> Result<Report, String> {
    let plan = Plan::new(query, seed, faults, scale);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let run = Run::new(plan.clone(), dir.path());
    run.go().map_err(|e| {
        format!(
            "FAILED {} seed {}: {e}\nfault schedule:\n{plan}server log tail:\n{}",
            query.name(),
            seed,
            tail(&dir.path().join("server.log"))
        )
    })
}

/// Parses `1-200` or `7` or `1,5,9`.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (
                    a.trim().parse().map_err(|_| format!("bad seed {a:?}"))?,
                    b.trim().parse().map_err(|_| format!("bad seed {b:?}"))?,
                );
                out.extend(a..=b);
            }
            None => out.push(
                part.trim()
                    .parse()
                    .map_err(|_| format!("bad seed {part:?}"))?,
            ),
        }
    }
    Ok(out)
}
