//! One sink's delivery loop (one tokio task per sink; at most one request
//! in flight): form batches from the stored stream and record them, wait
//! until the record is durable, send each batch until a 2xx, then move the
//! cursor. Retries with capped exponential backoff and jitter, or after the
//! receiver's `Retry-After`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::service::{Heads, ServiceError};

use super::port::SinkStore;
use crate::store::{BatchRow, Stream};

use super::body::{self, Ident, Unreadable};
use super::form::{form, FormIn};
use super::spec::Spec;
use super::{Shared, Status};

/// A batch ready to send: its row and its request.
struct Ready {
    row: BatchRow,
    body: Bytes,
    signature: Option<String>,
    records: u64,
}

/// Why loading or forming batches failed.
enum Failure {
    /// Storage failed: the sink pauses and tries again.
    Storage(ServiceError),
    /// A recorded batch cannot be sent as recorded: the sink stops.
    Unreadable(Unreadable),
}

impl From<ServiceError> for Failure {
    fn from(e: ServiceError) -> Self {
        Failure::Storage(e)
    }
}

impl From<Unreadable> for Failure {
    fn from(e: Unreadable) -> Self {
        Failure::Unreadable(e)
    }
}

/// What a round found.
enum Round {
    /// Batches to send, durable once the append counter passes the value.
    Formed(Vec<Ready>, u64),
    /// Only the cursor moved (a filter skipped records): go on.
    Moved,
    /// Nothing to do until the stream moves.
    Idle,
}

pub(super) struct Worker {
    pub shared: Arc<Shared>,
    pub svc: Arc<dyn SinkStore>,
    pub id: i64,
    pub name: String,
    pub uid: String,
    pub stream: Stream,
    pub spec: Spec,
    pub cursor: u64,
    pub epoch: u64,
    pub batches: u64,
    pub watermark: Option<i64>,
    pub status: Arc<Status>,
    pub rx: watch::Receiver<Heads>,
    pub appends: Arc<AtomicU64>,
    /// The append counter when last looked at, and since when it has had
    /// that value.
    pub seen: (u64, Instant),
}

/// Runs a blocking service call off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(ServiceError::Unavailable(format!("internal failure: {e}"))))
}

/// How long a sink waits for a partial batch to fill while its stream
/// grows (see `Worker::linger`).
const LINGER: Duration = Duration::from_millis(5);

impl Worker {
    fn ident(&self) -> Ident<'_> {
        Ident {
            name: &self.name,
            uid: &self.uid,
            stream: self.stream,
            lateness: self.svc.lateness(),
        }
    }

    fn ready(&self, row: BatchRow, records: &[&str]) -> Result<Ready, Unreadable> {
        let bytes = body::render(&self.ident(), &row, records)?;
        let signature = match self.spec.secret.as_deref() {
            Some(s) => Some(body::signature(s, &bytes)?),
            None => None,
        };
        Ok(Ready {
            row,
            body: Bytes::from(bytes),
            signature,
            records: records.len() as u64,
        })
    }

    fn stopping(&self) -> bool {
        self.rx.borrow().shutdown
    }

    /// The delivery loop; returns at shutdown (a deleted sink's task is
    /// aborted).
    pub async fn run(mut self) {
        let mut queue = loop {
            match self.load().await {
                Ok(q) => break q,
                Err(Failure::Storage(e)) => {
                    if !self.pause(&e).await {
                        return;
                    }
                }
                Err(Failure::Unreadable(e)) => return self.stop(e).await,
            }
        };
        loop {
            if self.stopping() {
                return;
            }
            if queue.is_empty() {
                if !self.linger().await {
                    return;
                }
                let round = self.round().await;
                if round.is_ok() {
                    self.status.resumed();
                }
                match round {
                    Ok(Round::Formed(v, synced)) => {
                        if let Err(e) = self.durable(synced).await {
                            // Not known to be durable: form again (the
                            // rows stay recorded; a later round sends them).
                            if !self.pause(&e).await {
                                return;
                            }
                            match self.load().await {
                                Ok(q) => queue = q,
                                // Paused above; the next round tries again.
                                Err(Failure::Storage(_)) => continue,
                                Err(Failure::Unreadable(e)) => return self.stop(e).await,
                            }
                        } else {
                            queue.extend(v);
                        }
                    }
                    Ok(Round::Moved) => {}
                    Ok(Round::Idle) => {
                        if !self.wait_for_output().await {
                            return;
                        }
                    }
                    Err(Failure::Storage(e)) => {
                        if !self.pause(&e).await {
                            return;
                        }
                    }
                    Err(Failure::Unreadable(e)) => return self.stop(e).await,
                }
                continue;
            }
            let Some(b) = queue.front() else { continue };
            if !self.deliver(b).await {
                return;
            }
            let (batch, last, epoch) = (b.row.batch, b.row.last, b.row.epoch);
            self.fault("after_2xx", batch).await;
            loop {
                let (svc, id) = (self.svc.clone(), self.id);
                match blocking(move || svc.ack_batch(id, batch, last, epoch)).await {
                    Ok(()) => break,
                    Err(e) => {
                        if !self.pause(&e).await {
                            return;
                        }
                    }
                }
            }
            self.cursor = last;
            self.epoch = epoch;
            queue.pop_front();
        }
    }

    /// The batches recorded before a restart (rendered exactly as when they
    /// were formed), made durable before any is sent.
    async fn load(&mut self) -> Result<VecDeque<Ready>, Failure> {
        let (svc, id, stream) = (self.svc.clone(), self.id, self.stream);
        let filter = self.spec.filter.clone();
        let rows = blocking(move || {
            let mut out = Vec::new();
            for (b, stored) in svc.recorded_batches(id, stream)? {
                let records: Result<Vec<String>, Unreadable> = match (&b.frozen, stored) {
                    (Some(f), _) => body::frozen_rows(b.batch, f).map(|rows| {
                        body::keep(stream, filter.as_ref(), rows.into_iter())
                            .into_iter()
                            .map(str::to_string)
                            .collect()
                    }),
                    (None, Some(rows)) => Ok(body::keep(
                        stream,
                        filter.as_ref(),
                        rows.iter().map(|(_, j)| j.as_str()),
                    )
                    .into_iter()
                    .map(str::to_string)
                    .collect()),
                    (None, None) => Ok(Vec::new()),
                };
                out.push((b, records));
            }
            Ok(out)
        })
        .await?;
        if !rows.is_empty() {
            let svc = self.svc.clone();
            blocking(move || svc.sync()).await?;
        }
        let mut ready = VecDeque::with_capacity(rows.len());
        for (b, recs) in rows {
            let recs = recs?;
            let refs: Vec<&str> = recs.iter().map(String::as_str).collect();
            ready.push_back(self.ready(b, &refs)?);
        }
        Ok(ready)
    }

    /// Forms and records the next batches.
    async fn round(&mut self) -> Result<Round, Failure> {
        self.rx.borrow_and_update();
        let inp = FormIn {
            sink: self.id,
            stream: self.stream,
            spec: self.spec.clone(),
            cursor: self.cursor,
            epoch: self.epoch,
            batches: self.batches,
            watermark: self.watermark,
        };
        let svc = self.svc.clone();
        let done = blocking(move || {
            let out = form(&*svc, &inp)?;
            if out.batches.is_empty() && out.moved.is_none() {
                return Ok(None);
            }
            let rows: Vec<BatchRow> = out.batches.iter().map(|(b, _)| b.clone()).collect();
            let recorded =
                svc.record_batches(inp.sink, &rows, out.total, out.watermark, out.moved)?;
            Ok(recorded.map(|synced| (out, synced)))
        })
        .await?;
        let Some((out, synced)) = done else {
            return Ok(Round::Idle);
        };
        self.batches = out.total;
        self.watermark = out.watermark;
        if let Some((c, e)) = out.moved {
            self.cursor = c;
            self.epoch = e;
        }
        if out.batches.is_empty() {
            return Ok(Round::Moved);
        }
        let mut ready = Vec::with_capacity(out.batches.len());
        for (b, recs) in out.batches {
            let refs: Vec<&str> = recs.iter().map(String::as_str).collect();
            ready.push(self.ready(b, &refs)?);
        }
        Ok(Round::Formed(ready, synced))
    }

    /// Waits until a commit that syncs the WAL followed the round's record:
    /// the next group commit while calls are being committed, else a sync
    /// of its own.
    async fn durable(&mut self, synced: u64) -> Result<(), ServiceError> {
        let now = Instant::now();
        let v = self.appends.load(Ordering::SeqCst);
        if v > synced {
            return Ok(());
        }
        if v != self.seen.0 {
            self.seen = (v, now);
        }
        if now.duration_since(self.seen.1) < Duration::from_millis(200) {
            let deadline = now + Duration::from_millis(25);
            while self.appends.load(Ordering::SeqCst) <= synced {
                match tokio::time::timeout_at(deadline, self.rx.changed()).await {
                    Ok(Ok(())) => {}
                    _ => break,
                }
            }
            if self.appends.load(Ordering::SeqCst) > synced {
                return Ok(());
            }
        }
        let svc = self.svc.clone();
        blocking(move || svc.sync()).await?;
        // The counter moved by this sink's own sync, not by group commits:
        // no call is being committed, so the next round syncs at once.
        self.seen.0 = self.appends.load(Ordering::SeqCst);
        Ok(())
    }

    /// While the stream is growing, waits (at most [`LINGER`]) until a
    /// whole batch is there, so that a busy stream is sent in whole batches
    /// (one round, one request and one acknowledgement per batch size)
    /// rather than one partial batch per commit; false at shutdown.
    async fn linger(&mut self) -> bool {
        if self.spec.filter.is_some() {
            return !self.stopping();
        }
        let deadline = Instant::now() + LINGER;
        loop {
            let h = *self.rx.borrow();
            if h.shutdown {
                return false;
            }
            let (head, epoch) = match self.stream {
                Stream::Changes => (h.changes, h.epoch),
                Stream::Late => (h.late, h.epoch),
                Stream::Patterns => (h.patterns, h.patterns_epoch),
            };
            let pending = head.saturating_sub(self.cursor);
            if epoch != self.epoch || pending == 0 || pending >= self.spec.batch_size {
                return true;
            }
            match tokio::time::timeout_at(deadline, self.rx.changed()).await {
                Err(_) => return true,
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
            }
        }
    }

    /// Waits for new output (or shutdown: false).
    async fn wait_for_output(&mut self) -> bool {
        if self.stopping() {
            return false;
        }
        self.rx.changed().await.is_ok() && !self.stopping()
    }

    /// Sleeps `d`, or until shutdown (false).
    async fn sleep(&mut self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        loop {
            if self.stopping() {
                return false;
            }
            match tokio::time::timeout_at(deadline, self.rx.changed()).await {
                Err(_) => return true,
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
            }
        }
    }

    /// A recorded batch that cannot be sent as recorded: the sink stops
    /// (state `stopped`, the reason in `last_error`, the metric
    /// `streamforge_sink_stopped`) with its cursor before the batch, and
    /// waits for shutdown or its deletion; nothing is sent in its place.
    async fn stop(mut self, e: Unreadable) {
        tracing::error!(
            sink = %self.name,
            error = %e.0,
            "sink stopped: a recorded batch cannot be sent; its cursor stays before it \
             (delete and recreate the sink, or restore, to go on)"
        );
        self.status.stopped(&e.0);
        while self.wait_for_output().await {}
    }

    /// A storage failure: the sink is paused and tries again later.
    async fn pause(&mut self, e: &ServiceError) -> bool {
        let msg = e.to_string();
        tracing::warn!(sink = %self.name, error = %msg, "sink paused: cannot read or record its stream");
        self.status.paused(&msg);
        let d = self.shared.opts.backoff;
        self.sleep(d).await
    }

    /// A testing hook (`STREAMFORGE_SINK_FAULT=point:batch[:sink]`,
    /// docs/sinks.md): at that point of that batch (of that sink, or of
    /// any) the sink stops for good, saying so on
    /// stderr, so that a test can kill the process right there.
    async fn fault(&self, point: &str, batch: u64) {
        if let Some((p, b, sink)) = &self.shared.fault {
            if p == point && *b == batch && sink.as_ref().is_none_or(|s| *s == self.name) {
                eprintln!(
                    "streamforge: sink {} fault point {point} reached at batch {batch}",
                    self.name
                );
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sends a batch until a 2xx (true), or until shutdown (false).
    async fn deliver(&mut self, b: &Ready) -> bool {
        let mut failures: u32 = 0;
        loop {
            if self.stopping() {
                return false;
            }
            if failures == 0 {
                self.fault("before_send", b.row.batch).await;
            }
            match self.attempt(b).await {
                Ok(()) => {
                    self.status.delivered(b.records);
                    return true;
                }
                Err((msg, retry_after)) => {
                    failures = failures.saturating_add(1);
                    self.status.failed(failures, &msg);
                    tracing::warn!(
                        sink = %self.name,
                        batch = b.row.batch,
                        attempt = failures,
                        error = %msg,
                        "sink delivery failed; retrying"
                    );
                    let wait = retry_after.unwrap_or_else(|| self.shared.backoff(failures));
                    if !self.sleep(wait).await {
                        return false;
                    }
                }
            }
        }
    }

    /// One request.
    async fn attempt(&self, b: &Ready) -> Result<(), (String, Option<Duration>)> {
        use reqwest::header::CONTENT_TYPE;
        let r = &b.row;
        let mut rb = self
            .shared
            .client
            .post(&self.spec.url)
            .timeout(self.shared.opts.timeout)
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", body::idempotency_key(&self.uid, r.batch))
            .header("x-streamforge-sink", &self.name)
            .header("x-streamforge-stream", self.stream.name())
            .header("x-streamforge-batch", r.batch)
            .header("x-streamforge-epoch", r.epoch)
            .header("x-streamforge-first", r.first)
            .header("x-streamforge-last", r.last);
        if let Some(s) = &b.signature {
            rb = rb.header("x-streamforge-signature", s);
        }
        for (k, v) in &self.spec.headers {
            rb = rb.header(k.as_str(), v.as_str());
        }
        let resp = rb
            .body(b.body.clone())
            .send()
            .await
            .map_err(|e| (describe(&e, self.shared.opts.timeout), None))?;
        let status = resp.status();
        let retry_after = if matches!(status.as_u16(), 429 | 503) {
            resp.headers()
                .get(reqwest::header::RETRY_AFTER)
                // An unreadable Retry-After: the sink's own backoff.
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after)
        } else {
            None
        };
        // Read (a bounded part of) the answer, so the connection can be
        // reused; its content does not matter.
        let mut resp = resp;
        let mut read = 0usize;
        while let Ok(Some(chunk)) = resp.chunk().await {
            read += chunk.len();
            if read > 64 * 1024 {
                break;
            }
        }
        if status.is_success() {
            Ok(())
        } else {
            let mut msg = format!("HTTP {}", status.as_u16());
            if let Some(r) = status.canonical_reason() {
                msg.push(' ');
                msg.push_str(r);
            }
            if let Some(d) = retry_after {
                msg.push_str(&format!(" (Retry-After {} s)", d.as_secs_f64()));
            }
            Err((msg, retry_after))
        }
    }
}

/// What went wrong with a request, without its URL (it may carry a token
/// in its query) and never with headers or the body.
fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within the timeout ({} ms)", timeout.as_millis());
    }
    let mut cur: &(dyn std::error::Error + 'static) = e;
    let mut msg = String::new();
    while let Some(next) = cur.source() {
        msg = next.to_string();
        cur = next;
    }
    if msg.is_empty() {
        msg = "the request failed".into();
    }
    if e.is_connect() {
        format!("cannot connect: {msg}")
    } else {
        format!("the request failed: {msg}")
    }
}

/// `Retry-After`: delay-seconds or an HTTP date; at most an hour.
fn retry_after(v: &str) -> Option<Duration> {
    const MAX: Duration = Duration::from_secs(3600);
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: only too many fail to parse, i.e. beyond the cap.
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)).min(MAX));
    }
    // Not a date either: the sink's own backoff.
    let at = httpdate::parse_http_date(v).ok()?;
    // A wall-clock read: Retry-After dates are wall-clock times.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    // Err: a date in the past, i.e. retry now.
    Some(at.duration_since(now).unwrap_or_default().min(MAX))
}

#[cfg(test)]
mod tests {
    use super::retry_after;
    use std::time::Duration;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(retry_after("99999999"), Some(Duration::from_secs(3600)));
        // a date in the past: at once
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
        assert_eq!(retry_after("-1"), None);
    }
}
