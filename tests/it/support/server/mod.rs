//! Helpers for the real-process tests: start `streamforge serve` on
//! 127.0.0.1:0 with a temporary database, talk to it with a blocking client,
//! wait on conditions with deadlines (never fixed sleeps), kill it.
#![allow(dead_code)]

pub mod client;
pub mod receiver;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use reqwest::blocking::Client;

/// How long any wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `cond` until it returns `Some` or the deadline passes.
pub fn wait_until<T>(what: &str, deadline: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// A running server process.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The database file.
    pub db: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// A client (no timeout games: requests end on their own).
    pub client: Client,
    /// Token sent with every request, if any.
    pub token: Option<String>,
}

/// A temporary directory that lives as long as the test wants.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Starts a server on `db` with extra flags and waits until it is ready.
pub fn start(db: &Path, args: &[&str]) -> Server {
    try_start(db, args).unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// Starts a server; `Err(stderr)` if it exits before listening and ready.
pub fn try_start(db: &Path, args: &[&str]) -> Result<Server, String> {
    try_start_env(db, args, &[])
}

/// Starts a server with extra environment variables and waits until it is
/// ready.
pub fn start_env(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    try_start_env(db, args, env).unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// [`try_start`] with extra environment variables.
pub fn try_start_env(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
    let log = db.with_extension(format!("log{}", std::process::id() ^ rand_u32()));
    let stderr = std::fs::File::create(&log).expect("log file");
    let os_args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let spawned = streamforge_testkit::spawn_serve(
        Path::new(env!("CARGO_BIN_EXE_streamforge")),
        db,
        &os_args,
        |cmd| {
            cmd.env_remove("STREAMFORGE_TOKEN")
                .env("RUST_LOG", "warn")
                .envs(env.iter().copied())
                .stderr(Stdio::from(stderr));
        },
        // listening, then ready within the deadline (as long as the
        // server takes to recover its database)
        DEADLINE * 2,
    );
    let spawned = match spawned {
        Ok(s) => s,
        Err(streamforge_testkit::NotReady::Exited) => {
            return Err(std::fs::read_to_string(&log).unwrap_or_default())
        }
        Err(streamforge_testkit::NotReady::Deadline) => {
            return Err("not ready before the deadline".into())
        }
    };
    let token = args
        .windows(2)
        .find(|w| w[0] == "--token")
        .map(|w| w[1].to_string());
    Ok(Server {
        child: Some(spawned.child),
        base: format!("http://{}", spawned.addr),
        db: db.to_path_buf(),
        log,
        client: Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client"),
        token,
    })
}

fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A response: status, content type, body text.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub body: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Resp {
    /// The body as JSON (for assertions on fields that are within i64).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Asserts a problem+json error with this status and code.
    pub fn problem(&self, status: u16, code: &str) -> serde_json::Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(
            self.content_type, "application/problem+json",
            "body: {}",
            self.body
        );
        let v = self.json();
        assert_eq!(v["code"], code, "body: {}", self.body);
        assert_eq!(v["status"], status);
        assert_eq!(v["type"], "about:blank");
        assert!(v["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(
            v["detail"].as_str().is_some_and(|t| !t.is_empty()),
            "detail: {}",
            self.body
        );
        // Field order: type, title, status, code, detail[, index].
        let keys: Vec<&str> = [
            "\"type\"",
            "\"title\"",
            "\"status\"",
            "\"code\"",
            "\"detail\"",
        ]
        .to_vec();
        let mut last = 0;
        for k in keys {
            let at = self
                .body
                .find(k)
                .unwrap_or_else(|| panic!("{k} missing: {}", self.body));
            assert!(at >= last, "field order: {}", self.body);
            last = at;
        }
        v
    }
}

/// The body of a batch call from its items' JSON texts: NDJSON (one per
/// line, with a final newline) or a JSON array.
pub fn batch_text<S: AsRef<str>>(items: &[S], ndjson: bool) -> String {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    if ndjson {
        items.join("\n") + "\n"
    } else {
        format!("[{}]", items.join(","))
    }
}

impl Server {
    /// Takes a checkpoint (`POST /checkpoints`) and returns its envelope as
    /// `GET /checkpoints/{id}` serves it.
    pub fn window_envelope(&self) -> String {
        let r = self.post("/checkpoints", "");
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_i64().expect("id");
        let r = self.get(&format!("/checkpoints/{id}"));
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// Asserts that `self` and `other` (twin servers fed the same calls
    /// differently) hold the same window state: changelog, late output,
    /// snapshot, and checkpoint envelope.
    pub fn assert_same_window_state(&self, other: &Server) {
        assert_eq!(self.all_changes(), other.all_changes());
        assert_eq!(self.all_late(), other.all_late());
        assert_eq!(self.snapshot(), other.snapshot());
        assert_eq!(
            self.window_envelope(),
            other.window_envelope(),
            "checkpoint envelopes differ"
        );
    }

    /// The value of a Prometheus metric line `name value` from `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").body;
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }

    fn req(&self, rb: reqwest::blocking::RequestBuilder) -> Resp {
        let rb = match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        };
        to_resp(rb.send().expect("request"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> Resp {
        self.req(self.client.get(self.url(path)))
    }

    pub fn post(&self, path: &str, body: &str) -> Resp {
        self.req(
            self.client
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
    }

    pub fn post_ndjson(&self, path: &str, body: &str) -> Resp {
        self.req(
            self.client
                .post(self.url(path))
                .header("content-type", "application/x-ndjson")
                .body(body.to_string()),
        )
    }

    pub fn put(&self, path: &str, body: &str) -> Resp {
        self.req(
            self.client
                .put(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
    }

    pub fn post_empty(&self, path: &str) -> Resp {
        self.req(self.client.post(self.url(path)))
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.req(self.client.delete(self.url(path)))
    }

    /// POST that must succeed with 200; returns the body.
    pub fn ok(&self, path: &str, body: &str) -> String {
        let r = self.post(path, body);
        assert_eq!(r.status, 200, "POST {path} {body}: {}", r.body);
        r.body
    }

    /// The whole changelog as raw JSON strings of each change (paged).
    pub fn all_changes(&self) -> Vec<String> {
        self.all("changes")
    }

    /// The whole late output as raw JSON strings (paged).
    pub fn all_late(&self) -> Vec<String> {
        self.all("late")
    }

    fn all(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut after = 0u64;
        loop {
            let r = self.get(&format!("/{what}?after={after}&limit=500"));
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            let items = v[what].as_array().expect("array").clone();
            if items.is_empty() {
                return out;
            }
            for it in items {
                out.push(it.to_string());
            }
            after = v["next"].as_u64().expect("next");
        }
    }

    /// `/status` and full `/results` as one string (state comparisons).
    /// `/status` and `/results`, without the epochs (restores so far): the
    /// processing state, whatever the history of restores behind it.
    pub fn snapshot(&self) -> String {
        // the top-level `,"epoch":N` (names and keys are never `"epoch":`
        // followed by digits inside these bodies' strings in the tests)
        let strip = |body: String| {
            let Some(i) = body.rfind(",\"epoch\":") else {
                return body;
            };
            let rest = &body[i + 9..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            format!("{}{}", &body[..i], &rest[digits..])
        };
        format!(
            "{}\n{}",
            strip(self.get("/status").body),
            strip(self.get("/results").body)
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM; waits for the exit status (deadline).
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        wait_until("server exit", DEADLINE, || c.try_wait().ok().flatten())
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Deterministic pseudo-random numbers (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `s` with one to four random byte-level edits (a byte replaced by a JSON
/// punctuation or letter, a run deleted, one of `tokens` inserted, a run
/// repeated, the tail cut): the API fuzz tests' mutator.
pub fn mutate_with(rng: &mut Rng, s: &str, tokens: &[&str]) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..=rng.below(3) {
        if b.is_empty() {
            b.extend_from_slice(tokens[rng.below(tokens.len() as u64) as usize].as_bytes());
            continue;
        }
        let i = rng.below(b.len() as u64) as usize;
        match rng.below(5) {
            0 => {
                let set = b" {}[],:\"0-9aez\\";
                b[i] = set[rng.below(set.len() as u64) as usize]
            }
            1 => {
                let j = (i + 1 + rng.below(12) as usize).min(b.len());
                b.drain(i..j);
            }
            2 => {
                let t = tokens[rng.below(tokens.len() as u64) as usize];
                b.splice(i..i, t.bytes());
            }
            3 => {
                let j = (i + 1 + rng.below(20) as usize).min(b.len());
                let part = b[i..j].to_vec();
                b.splice(j..j, part);
            }
            _ => b.truncate(i),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// One delivery as JSON (offset `None` = append mode).
pub fn delivery(
    partition: &str,
    offset: Option<i64>,
    id: &str,
    key: &str,
    ts: i64,
    value: i64,
) -> String {
    let off = offset.map_or(String::new(), |o| format!("\"offset\":{o},"));
    format!(
        "{{\"partition\":\"{partition}\",{off}\"event\":{{\"id\":\"{id}\",\"key\":\"{key}\",\"timestamp\":{ts},\"value\":{value}}}}}"
    )
}

/// A seeded workload step.
#[derive(Debug, Clone)]
pub enum Op {
    /// A JSON array of deliveries (explicit offsets).
    Batch(String),
    /// `POST /watermarks` body.
    Advance(String),
    /// `POST /partitions/{p}/idle`.
    Idle(String),
}

impl Op {
    /// Sends it; returns the response.
    pub fn send(&self, s: &Server) -> Resp {
        match self {
            Op::Batch(b) => s.post("/events", b),
            Op::Advance(b) => s.post("/watermarks", b),
            Op::Idle(p) => s.post_empty(&format!("/partitions/{p}/idle")),
        }
    }
}

/// A deterministic workload over p0..p3: batches with explicit offsets
/// (some duplicate ids, some late events), and watermark advances.
pub fn workload(seed: u64, steps: usize) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut offsets = [0i64; 4];
    let mut progress = [0i64; 4];
    let mut ops = Vec::new();
    let mut next_id = 0u64;
    let mut seen: Vec<(String, String, i64, i64)> = Vec::new();
    for p in 0..4 {
        ops.push(Op::Advance(format!(
            "{{\"partition\":\"p{p}\",\"watermark\":0}}"
        )));
    }
    for _ in 0..steps {
        if rng.below(5) == 0 {
            let p = rng.below(4) as usize;
            progress[p] += rng.below(4000) as i64;
            ops.push(Op::Advance(format!(
                "{{\"partition\":\"p{p}\",\"watermark\":{}}}",
                progress[p]
            )));
            continue;
        }
        let n = 1 + rng.below(8);
        let mut items = Vec::new();
        for _ in 0..n {
            let p = rng.below(4) as usize;
            let (id, key, ts, value) = if !seen.is_empty() && rng.below(10) == 0 {
                // A redelivered event (same id and identity): a duplicate.
                seen[rng.below(seen.len() as u64) as usize].clone()
            } else {
                next_id += 1;
                let base = *progress.iter().min().unwrap_or(&0);
                let ts = base + rng.below(12_000) as i64 - 3000;
                let e = (
                    format!("e{next_id}"),
                    format!("k{}", rng.below(5)),
                    ts,
                    rng.below(200) as i64 - 100,
                );
                seen.push(e.clone());
                e
            };
            items.push(delivery(
                &format!("p{p}"),
                Some(offsets[p]),
                &id,
                &key,
                ts,
                value,
            ));
            offsets[p] += 1;
        }
        ops.push(Op::Batch(format!("[{}]", items.join(","))));
    }
    ops
}

/// One server-sent event: its `event:` name (empty for a plain message),
/// `id:` and `data:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub id: String,
    pub data: String,
}

/// Reads server-sent events until `stop` says so or the stream ends
/// (comments, the heartbeats, are skipped).
pub fn read_events(
    resp: reqwest::blocking::Response,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    use std::io::BufRead as _;
    let mut out = Vec::new();
    let mut cur = SseEvent {
        event: String::new(),
        id: String::new(),
        data: String::new(),
    };
    for line in std::io::BufReader::new(resp).lines() {
        let Ok(line) = line else { break };
        if line.is_empty() {
            if !cur.data.is_empty() {
                let ev = std::mem::replace(
                    &mut cur,
                    SseEvent {
                        event: String::new(),
                        id: String::new(),
                        data: String::new(),
                    },
                );
                let done = stop(&ev);
                out.push(ev);
                if done {
                    break;
                }
            }
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_string();
        match field {
            "event" => cur.event = value,
            "id" => cur.id = value,
            "data" => cur.data = value,
            _ => {}
        }
    }
    out
}

/// A response read whole.
pub fn to_resp(r: reqwest::blocking::Response) -> Resp {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Resp {
        status,
        content_type,
        body: r.text().expect("body"),
        headers,
    }
}

/// The Python program a doc (path from the repository root) prints: its
/// first ```python block that starts with `#!/usr/bin/env python3`.
pub fn documented_python(doc: &str) -> String {
    let text = std::fs::read_to_string(format!("{}/{doc}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{doc}: {e}"));
    let start = text
        .find("```python\n#!/usr/bin/env python3")
        .unwrap_or_else(|| panic!("no Python program in {doc}"))
        + "```python\n".len();
    let len = text[start..].find("```").expect("its end");
    text[start..start + len].to_string()
}

/// The one rule for a test that needs a tool from outside the repository
/// (Chromium, podman, tansu, Schemathesis, python3): `tool` is the tool,
/// or why it cannot be used and how to install it. Without it the test
/// says SKIPPED and passes (`None`), unless `CI` is set (`.ci/run`
/// installs every one of them), where it fails.
pub fn require_tool<T>(test: &str, tool: Result<T, String>) -> Option<T> {
    match tool {
        Ok(t) => Some(t),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: {why} (under CI, where .ci/run installs it)"
            );
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// Whether python3 runs ([`require_tool`]) for the test `what`.
pub fn python3_available(what: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    require_tool(
        what,
        if ok {
            Ok(())
        } else {
            Err("python3 is not installed".into())
        },
    )
    .is_some()
}
