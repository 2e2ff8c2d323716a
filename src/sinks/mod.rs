//! Webhook sinks (docs/sinks.md): receivers the service calls with the
//! records of one output stream (`changes`, `late` or `patterns`), in
//! sequence order, batch by batch, retried until they answer 2xx, signed,
//! with an Idempotency-Key, across crashes and restores.
//!
//! - [`spec`]: the configuration (`POST /sinks`), its validation, the filter.
//! - `body`: the request of a batch (a pure function of what is stored),
//!   the HMAC-SHA256 signature.
//! - `worker`: one task per sink: form, record, send, acknowledge.
//! - [`port`]: the narrow interface the sinks use of the service
//!   ([`port::SinkStore`]: heads, pages, their own rows and batches).
//!
//! A sink follows the stored stream the way a long poll does (woken by the
//! service's heads after each commit), never the engines' memory: a sink
//! that cannot deliver holds a cursor in the database and nothing else, so
//! it never blocks ingestion or another sink and never grows memory. Its
//! bookkeeping is a few small transactions on the service's writing
//! connection (`crate::store`, sinks), outside the engines lock (only
//! reading the visible rows, [`port::SinkStore::results`], takes it, as
//! `GET /results` does).
//!
//! This module sits between the api and the service: the api calls it; it
//! calls the service only through [`port::SinkStore`], and reqwest.

mod body;
mod error;
mod form;
pub mod port;
pub mod spec;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::service::Service;

use crate::store::{self, SinkRow, Stream};
use port::SinkStore;

use spec::{Filter, NewSink, Spec, Start};

pub use body::signature;
pub use error::SinkError;

/// Delivery settings (the `serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// First retry delay; it doubles per failed attempt...
    pub backoff: Duration,
    /// ... up to this.
    pub backoff_max: Duration,
    /// A request that has not been answered by then failed.
    pub timeout: Duration,
    /// CPU niceness of the sinks' threads (0 = that of the service).
    pub nice: i32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backoff: Duration::from_millis(1000),
            backoff_max: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            nice: 10,
        }
    }
}

/// What a sink is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Delivering, or up to date.
    Ok,
    /// The current batch failed; it is retried after a backoff.
    Retrying,
    /// The service cannot read or record the sink's stream (storage is
    /// failing); it tries again by itself.
    Paused,
    /// A recorded batch cannot be sent as it was recorded (`last_error`
    /// says why): the sink sends nothing more and its cursor stays before
    /// that batch until it is deleted (or the service restarts).
    Stopped,
}

/// A sink's delivery status in this process.
#[derive(Debug)]
pub struct Status {
    inner: Mutex<StatusInner>,
}

#[derive(Debug, Clone)]
struct StatusInner {
    state: State,
    attempts: u32,
    /// Why the sink is retrying, paused or stopped; `None` while it is
    /// `ok` (a delivery, or storage working again, clears it: it is never
    /// shown as current once the sink recovered).
    last_error: Option<String>,
    last_success: Option<String>,
    delivered: u64,
    failed: u64,
}

impl Status {
    fn new() -> Status {
        Status {
            inner: Mutex::new(StatusInner {
                state: State::Ok,
                attempts: 0,
                last_error: None,
                last_success: None,
                delivered: 0,
                failed: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StatusInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self) -> StatusInner {
        self.lock().clone()
    }

    fn delivered(&self, records: u64) {
        let mut s = self.lock();
        s.state = State::Ok;
        s.attempts = 0;
        s.last_error = None;
        s.delivered += records;
        s.last_success = Some(store::created_at_now());
    }

    fn failed(&self, attempts: u32, error: &str) {
        let mut s = self.lock();
        s.state = State::Retrying;
        s.attempts = attempts;
        s.failed += 1;
        s.last_error = Some(error.to_string());
    }

    /// Storage works again: a paused sink is delivering.
    fn resumed(&self) {
        let mut s = self.lock();
        if s.state == State::Paused {
            s.state = State::Ok;
            s.last_error = None;
        }
    }

    fn paused(&self, error: &str) {
        let mut s = self.lock();
        s.state = State::Paused;
        s.last_error = Some(error.to_string());
    }

    fn stopped(&self, error: &str) {
        let mut s = self.lock();
        s.state = State::Stopped;
        s.last_error = Some(error.to_string());
    }
}

/// What every worker shares.
pub(crate) struct Shared {
    client: reqwest::Client,
    opts: Options,
    /// The testing hook `STREAMFORGE_SINK_FAULT=point:batch[:sink]`.
    fault: Option<(String, u64, Option<String>)>,
    rng: Mutex<u64>,
}

impl Shared {
    /// The delay before retry `n` (1, 2, ...): `backoff · 2^(n-1)`, at most
    /// `backoff_max`, with jitter: a uniform draw in its upper half.
    fn backoff(&self, n: u32) -> Duration {
        let base = self.opts.backoff.as_millis() as u64;
        let cap = self.opts.backoff_max.as_millis() as u64;
        let d = base
            .saturating_mul(1u64 << (n.saturating_sub(1)).min(40))
            .min(cap.max(base));
        let r = {
            let mut s = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            // xorshift64*
            *s ^= *s >> 12;
            *s ^= *s << 25;
            *s ^= *s >> 27;
            s.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let half = d / 2;
        Duration::from_millis(half + r % (d - half + 1))
    }
}

struct Running {
    handle: tokio::task::JoinHandle<()>,
    status: Arc<Status>,
}

/// The sinks of a service.
pub struct Sinks {
    svc: Arc<dyn SinkStore>,
    shared: Arc<Shared>,
    rt: tokio::runtime::Handle,
    /// The sinks' own runtime (shut down in the background at stop: it may
    /// not be dropped inside the service's runtime).
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    running: Mutex<HashMap<i64, Running>>,
}

impl Drop for Sinks {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The sinks' runtime: one async worker and a few blocking threads (their
/// store reads and writes), all at CPU niceness `nice`, so that under CPU
/// contention the acknowledged write path goes first. Delivery is
/// asynchronous by contract: a sink that falls behind catches up when
/// there is room.
fn sink_runtime(nice: i32) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("sinks")
        .enable_all()
        .on_thread_start(move || {
            if nice > 0 {
                let tid = rustix::thread::gettid();
                if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
                    tracing::warn!(error = %e, nice, "cannot lower the sinks' CPU priority");
                }
            }
        })
        .build()
}

/// A random-looking id (the Idempotency-Key prefix of a sink): 16 hex
/// digits of a SHA-256 over the name, the time, the process and a counter.
fn new_uid(name: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    #[allow(clippy::disallowed_methods)] // an id, not a time
    // A clock before 1970 gives 0: the other inputs still differ.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(now.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.finalize()[..8].iter().fold(String::new(), |mut s, b| {
        s.push_str(&format!("{b:02x}"));
        s
    })
}

/// The masked form of a secret or a header value.
const MASK: &str = "********";

/// Header names with masked values, in order.
struct MaskedHeaders<'a>(&'a [(String, String)]);

impl Serialize for MaskedHeaders<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, _) in self.0 {
            m.serialize_entry(k, MASK)?;
        }
        m.end()
    }
}

/// `GET /sinks/{name}` (docs/api.md, "Sinks"), fields in this order.
#[derive(Serialize)]
struct View<'a> {
    name: &'a str,
    url: &'a str,
    stream: &'static str,
    filter: Option<&'a Filter>,
    batch_size: u64,
    headers: MaskedHeaders<'a>,
    secret: Option<&'static str>,
    created_at: &'a str,
    epoch: u64,
    cursor: u64,
    head: u64,
    lag: u64,
    state: State,
    attempts: u32,
    last_error: Option<&'a str>,
    last_success: Option<&'a str>,
    delivered: u64,
    failed: u64,
}

/// A sink as the api answers it: its view's JSON.
#[derive(Debug, Clone)]
pub struct SinkView {
    /// Its name.
    pub name: String,
    /// The JSON object of `GET /sinks/{name}`.
    pub json: String,
    /// Its lag (sequences still to go through).
    pub lag: u64,
}

impl Sinks {
    /// Starts the sinks' own runtime and a worker for every stored sink.
    pub fn start(svc: Arc<Service>, opts: Options) -> Result<Arc<Sinks>, String> {
        // The testing hook: unset or not `point:batch[:sink]` means none.
        let fault = std::env::var("STREAMFORGE_SINK_FAULT").ok().and_then(|v| {
            let (p, rest) = v.split_once(':')?;
            let (b, sink) = match rest.split_once(':') {
                Some((b, s)) => (b, Some(s.to_string())),
                None => (rest, None),
            };
            Some((p.to_string(), b.parse().ok()?, sink))
        });
        let client = reqwest::Client::builder()
            .connect_timeout(opts.timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("streamforge/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the sinks' HTTP client: {e}"))?;
        let seed = {
            #[allow(clippy::disallowed_methods)] // jitter seed
            // A clock before 1970 gives 0: the pid still varies the seed.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) | 1
        };
        let runtime =
            sink_runtime(opts.nice).map_err(|e| format!("cannot start the sinks' threads: {e}"))?;
        let svc: Arc<dyn SinkStore> = svc;
        let sinks = Arc::new(Sinks {
            svc: svc.clone(),
            shared: Arc::new(Shared {
                client,
                opts,
                fault,
                rng: Mutex::new(seed),
            }),
            rt: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            running: Mutex::new(HashMap::new()),
        });
        let rows = svc
            .sinks()
            .map_err(|e| format!("cannot read the sinks: {e}"))?;
        for row in rows {
            let spec: Spec = serde_json::from_str(&row.config)
                .map_err(|e| format!("sink {:?}: unreadable configuration: {e}", row.name))?;
            sinks.spawn(row, spec);
        }
        Ok(sinks)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&self, row: SinkRow, spec: Spec) {
        let status = Arc::new(Status::new());
        #[allow(clippy::disallowed_methods)] // a monotonic clock for the worker's waits
        let now = tokio::time::Instant::now();
        let appends = self.svc.appends();
        let seen = (appends.load(Ordering::SeqCst), now);
        let w = worker::Worker {
            shared: self.shared.clone(),
            svc: self.svc.clone(),
            id: row.id,
            name: row.name.clone(),
            uid: row.uid.clone(),
            stream: row.stream,
            spec,
            cursor: row.cursor,
            epoch: row.epoch,
            batches: row.batches,
            watermark: row.watermark,
            status: status.clone(),
            rx: self.svc.subscribe(),
            appends,
            seen,
        };
        let handle = self.rt.spawn(w.run());
        if let Some(old) = self.running().insert(row.id, Running { handle, status }) {
            old.handle.abort();
        }
    }

    /// `POST /sinks`: validates and stores a sink, and starts it.
    pub fn create(&self, body: &[u8]) -> Result<SinkView, SinkError> {
        let new: NewSink = {
            let mut de = serde_json::Deserializer::from_slice(body);
            crate::canonical::strict::object(&mut de, "a sink object")
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| SinkError::BadRequest(format!("invalid JSON body: {e}")))?
        };
        let (stream, start, spec) = new.validate()?;
        let h = self.svc.heads();
        let (head, epoch) = match stream {
            Stream::Changes => (h.changes, h.epoch),
            Stream::Late => (h.late, h.epoch),
            Stream::Patterns => (h.patterns, h.patterns_epoch),
        };
        let cursor = match start {
            Start::Head => head,
            Start::Start => 0,
            Start::After(n) if n <= head => n,
            Start::After(n) => {
                return Err(SinkError::Invalid(format!(
                    "start {n} is beyond the head of the {} stream ({head})",
                    stream.name()
                )))
            }
        };
        let config = serde_json::to_string(&spec)
            .map_err(|e| SinkError::Unavailable(format!("cannot encode the sink: {e}")))?;
        let uid = new_uid(&new.name);
        let created_at = store::created_at_now();
        let id = self
            .svc
            .create_sink(&new.name, &uid, stream, &config, &created_at, cursor, epoch)?
            .ok_or_else(|| SinkError::Exists(format!("a sink named {:?} exists", new.name)))?;
        let row = SinkRow {
            id,
            name: new.name.clone(),
            uid,
            stream,
            config,
            created_at,
            cursor,
            epoch,
            batches: 0,
            watermark: None,
        };
        tracing::info!(sink = %row.name, stream = stream.name(), cursor, "sink created");
        self.spawn(row.clone(), spec.clone());
        self.view(&row, &spec)
    }

    /// `GET /sinks`: every sink, by name.
    pub fn list(&self) -> Result<Vec<SinkView>, SinkError> {
        let rows = self.svc.sinks()?;
        rows.iter()
            .map(|row| {
                let spec: Spec = serde_json::from_str(&row.config)
                    .map_err(|e| SinkError::Unavailable(format!("unreadable sink: {e}")))?;
                self.view(row, &spec)
            })
            .collect()
    }

    /// `GET /sinks/{name}`.
    pub fn get(&self, name: &str) -> Result<SinkView, SinkError> {
        let row = self
            .svc
            .sink(name)?
            .ok_or_else(|| SinkError::NotFound(format!("no sink named {name:?}")))?;
        let spec: Spec = serde_json::from_str(&row.config)
            .map_err(|e| SinkError::Unavailable(format!("unreadable sink: {e}")))?;
        self.view(&row, &spec)
    }

    /// `DELETE /sinks/{name}`: stops its delivery (a request in flight is
    /// abandoned) and forgets it.
    pub fn delete(&self, name: &str) -> Result<(), SinkError> {
        let row = self
            .svc
            .sink(name)?
            .ok_or_else(|| SinkError::NotFound(format!("no sink named {name:?}")))?;
        if !self.svc.delete_sink(name)? {
            return Err(SinkError::NotFound(format!("no sink named {name:?}")));
        }
        if let Some(r) = self.running().remove(&row.id) {
            r.handle.abort();
        }
        tracing::info!(sink = %name, "sink deleted");
        Ok(())
    }

    /// Stops every worker (shutdown).
    pub fn stop(&self) {
        for (_, r) in self.running().drain() {
            r.handle.abort();
        }
        let rt = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(rt) = rt {
            rt.shutdown_background();
        }
    }

    fn view(&self, row: &SinkRow, spec: &Spec) -> Result<SinkView, SinkError> {
        let h = self.svc.heads();
        let head = match row.stream {
            Stream::Changes => h.changes,
            Stream::Late => h.late,
            Stream::Patterns => h.patterns,
        };
        let (stream, epoch, cursor) = (row.stream, row.epoch, row.cursor);
        let at = self.svc.rewound(stream, epoch, cursor)?;
        let lag = head.saturating_sub(at);
        let status = self
            .running()
            .get(&row.id)
            .map(|r| r.status.get())
            .unwrap_or_else(|| Status::new().get());
        let v = View {
            name: &row.name,
            url: &spec.url,
            stream: row.stream.name(),
            filter: spec.filter.as_ref(),
            batch_size: spec.batch_size,
            headers: MaskedHeaders(&spec.headers),
            secret: spec.secret.as_ref().map(|_| MASK),
            created_at: &row.created_at,
            epoch: row.epoch,
            cursor: row.cursor,
            head,
            lag,
            state: status.state,
            attempts: status.attempts,
            last_error: status.last_error.as_deref(),
            last_success: status.last_success.as_deref(),
            delivered: status.delivered,
            failed: status.failed,
        };
        let json = serde_json::to_string(&v)
            .map_err(|e| SinkError::Unavailable(format!("cannot encode the sink: {e}")))?;
        Ok(SinkView {
            name: row.name.clone(),
            json,
            lag,
        })
    }

    /// The sinks' lines of `GET /metrics`: per sink (label `sink`),
    /// records delivered and failed attempts since the start, the lag, and
    /// whether it stopped. A sink whose figures cannot be read (storage
    /// failing, an unreadable configuration) is named in a `#` comment line
    /// with the error instead of being left out silently.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let rows = match self.svc.sinks() {
            Ok(rows) => rows,
            Err(e) => return format!("# sinks: cannot read the sinks: {}\n", one_line(&e)),
        };
        let mut delivered = Vec::new();
        let mut failed = Vec::new();
        let mut lag = Vec::new();
        let mut stopped = Vec::new();
        for row in &rows {
            let label = row.name.replace('\\', "\\\\").replace('"', "\\\"");
            let view = serde_json::from_str::<Spec>(&row.config)
                .map_err(|e| format!("unreadable configuration: {e}"))
                .and_then(|spec| self.view(row, &spec).map_err(|e| format!("{e:?}")));
            let v = match view {
                Ok(v) => v,
                Err(e) => {
                    out.push_str(&format!("# sink \"{label}\": {}\n", one_line(&e)));
                    continue;
                }
            };
            let st = self
                .running()
                .get(&row.id)
                .map(|r| r.status.get())
                .unwrap_or_else(|| Status::new().get());
            delivered.push(format!(
                "streamforge_sink_delivered_total{{sink=\"{label}\"}} {}",
                st.delivered
            ));
            failed.push(format!(
                "streamforge_sink_failed_total{{sink=\"{label}\"}} {}",
                st.failed
            ));
            lag.push(format!(
                "streamforge_sink_lag{{sink=\"{label}\"}} {}",
                v.lag
            ));
            stopped.push(format!(
                "streamforge_sink_stopped{{sink=\"{label}\"}} {}",
                u8::from(st.state == State::Stopped)
            ));
        }
        for (name, kind, help, lines) in [
            (
                "streamforge_sink_delivered_total",
                "counter",
                "Records each sink's receiver acknowledged (2xx) since the service started.",
                delivered,
            ),
            (
                "streamforge_sink_failed_total",
                "counter",
                "Failed delivery attempts of each sink (non-2xx, timeouts, connection errors) since the service started.",
                failed,
            ),
            (
                "streamforge_sink_lag",
                "gauge",
                "Sequences of each sink's stream after its cursor (records still to go through).",
                lag,
            ),
            (
                "streamforge_sink_stopped",
                "gauge",
                "1 when a sink stopped because a recorded batch cannot be sent (see its last_error), else 0.",
                stopped,
            ),
        ] {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    }
}

/// `e` on one line (a metrics comment ends at the line's end).
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().replace(['\n', '\r'], " ")
}
