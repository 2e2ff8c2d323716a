//! One consumed topic partition: fetch from the next offset the engine
//! has not consumed, hand the records to the service as one delivery batch
//! (the same write path, command log and recovery as `POST /events`), then
//! report the partition's watermark and idleness.
//!
//! The offsets are the engine's: a restart (or a kill -9) resumes at the
//! partition's consumed offset + 1 read from the recovered state, so a
//! record is never applied twice nor skipped; the broker's committed
//! offsets are not used.

use std::sync::Arc;
use std::time::Duration;

use rskafka::client::error::{Error as KafkaError, ProtocolError};
use rskafka::client::partition::PartitionClient;
use rskafka::record::RecordAndOffset;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::watermarks::Publisher;
use super::{blocking, SourceState};
use crate::service::parse::{self, Framing, ParseError};
use crate::service::strategy::BoundedOutOfOrderness;
use crate::service::{Prefer, Service, ServiceError};

/// Bytes asked for per fetch (the broker may return one batch more).
const FETCH_BYTES: i32 = 4 << 20;
/// How long a fetch waits at the end of the partition for new records.
const FETCH_WAIT_MS: i32 = 200;
/// Wait before retrying after a storage failure.
const RETRY: Duration = Duration::from_millis(500);

/// A consumed partition.
pub(super) struct PartitionTask {
    pub svc: Arc<Service>,
    pub client: PartitionClient,
    /// The pipeline partition (`p{k}`).
    pub name: String,
    /// The next offset to consume.
    pub next: i64,
    /// Watermarks from the events, if configured.
    pub strategy: Option<BoundedOutOfOrderness>,
    /// Mark idle after this long without records.
    pub idle_after: Option<Duration>,
    /// Whether the engine has the partition idle.
    pub idle: bool,
    /// Where watermarks and idleness are published for the other
    /// instances (several instances only).
    pub publisher: Option<Publisher>,
    /// What `/metrics` shows of this partition.
    pub state: Arc<SourceState>,
    /// The window engine's restore epoch `next` belongs to.
    pub epoch: u64,
    /// The bound of `strategy`, to rebuild it after a restore.
    pub bound: Option<i64>,
}

/// Why a partition stopped consuming.
enum Stop {
    /// The source is shutting down.
    Shutdown,
    /// A record the contract refuses: consuming past it would leave a gap.
    Stalled(String),
}

impl PartitionTask {
    /// Consumes until `stop` turns true or a record stalls the partition.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        // An owned partition is active from the start (or idle as recovered).
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            if *stop.borrow() {
                return;
            }
            // A restore put the engine back to a checkpoint: consume again
            // from the partition's offset there.
            if self.svc.heads().epoch != self.epoch {
                match self.resync().await {
                    Ok(()) => {}
                    Err(Stop::Shutdown) => return,
                    Err(Stop::Stalled(m)) => return self.stall(m),
                }
            }
            let fetched = tokio::select! {
                r = self.client.fetch_records(self.next, 1..FETCH_BYTES, FETCH_WAIT_MS) => r,
                _ = stop.changed() => return,
            };
            let (records, high) = match fetched {
                Ok(f) => f,
                Err(KafkaError::ServerError {
                    protocol_error: ProtocolError::OffsetOutOfRange,
                    ..
                }) => {
                    self.stall(format!(
                        "offset {} is not in the topic partition any more (deleted by its \
                         retention?) or not yet (the topic was recreated?): consuming on would \
                         leave a gap in the partition's offsets",
                        self.next
                    ));
                    return;
                }
                Err(e) => {
                    // The client retries connection failures itself; what
                    // comes back is worth a line, then a pause.
                    tracing::warn!(partition = %self.name, error = %e, "fetch failed; retrying");
                    if pause(&mut stop, RETRY).await {
                        return;
                    }
                    continue;
                }
            };
            self.state.set_lag(&self.name, high - self.next);
            if records.is_empty() {
                if let Some(after) = self.idle_after {
                    if !self.idle && quiet_since.elapsed() >= after {
                        match self.mark_idle(&mut stop).await {
                            Ok(()) => {}
                            Err(Stop::Shutdown) => return,
                            Err(Stop::Stalled(m)) => return self.stall(m),
                        }
                    }
                }
                continue;
            }
            quiet_since = tokio::time::Instant::now();
            match self.consume(records, &mut stop).await {
                Ok(()) => {}
                Err(Stop::Shutdown) => return,
                // Refused because a restore moved the partition meanwhile:
                // the loop's top consumes again from the restored offset.
                Err(Stop::Stalled(_)) if self.svc.heads().epoch != self.epoch => {}
                Err(Stop::Stalled(m)) => return self.stall(m),
            }
            self.state.set_lag(&self.name, high - self.next);
        }
    }

    /// Takes the partition's offset, watermark and idleness from the
    /// engine (after a restore).
    async fn resync(&mut self) -> Result<(), Stop> {
        let svc = self.svc.clone();
        let (epoch, status) = blocking(move || {
            let epoch = svc.heads().epoch;
            svc.status().map(|s| (epoch, s))
        })
        .await
        .map_err(|e| Stop::Stalled(format!("reading the restored state: {e}")))?;
        let Some(p) = status.partitions.iter().find(|p| p.name == self.name) else {
            return Err(Stop::Stalled(
                "the partition is not in the restored state".into(),
            ));
        };
        tracing::info!(
            partition = %self.name,
            from = p.offset + 1,
            "a restore moved the partition: consuming again from its offset"
        );
        self.next = p.offset + 1;
        self.idle = p.idle;
        self.strategy = self
            .bound
            .map(|b| BoundedOutOfOrderness::new(b, p.progress));
        self.epoch = epoch;
        Ok(())
    }

    fn stall(&self, why: String) {
        tracing::error!(
            partition = %self.name,
            offset = self.next,
            "the partition stopped consuming: {why}"
        );
        self.state.set_stalled(&self.name, self.next, why);
    }

    /// Applies `records` (in offset order): every record up to the first
    /// the contract refuses; that one stalls the partition.
    async fn consume(
        &mut self,
        records: Vec<RecordAndOffset>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), Stop> {
        let mut items: Vec<(i64, Vec<u8>)> = Vec::with_capacity(records.len());
        let mut refused = None;
        for r in records {
            if r.offset < self.next {
                continue;
            }
            let value = r.record.value.unwrap_or_default();
            // One JSON value exactly, so that it cannot change the framing
            // of the batch it is embedded in.
            if let Err(e) = serde_json::from_slice::<&RawValue>(&value) {
                refused = Some((r.offset, format!("its value is not one JSON value: {e}")));
                break;
            }
            items.push((r.offset, value));
        }
        // The deliveries before a refused one go in; it stalls the partition.
        let mut end = items.len();
        while end > 0 {
            match self.ingest(&items[..end], stop).await? {
                Ok(timestamps) => {
                    if let Some(s) = &mut self.strategy {
                        for ts in timestamps {
                            s.observe(ts);
                        }
                    }
                    self.next = items[end - 1].0 + 1;
                    break;
                }
                Err((i, why)) => {
                    refused = Some((items[i.min(end - 1)].0, why));
                    end = i.min(end - 1);
                }
            }
        }
        self.report(stop).await?;
        match refused {
            Some((offset, why)) => Err(Stop::Stalled(format!(
                "the record at offset {offset}: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// Ingests `batch` as one call. `Ok(Ok(timestamps))` when applied;
    /// `Ok(Err((index, why)))` when the contract refuses the delivery at
    /// `index` (nothing applied); storage failures are retried.
    async fn ingest(
        &self,
        batch: &[(i64, Vec<u8>)],
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Result<Vec<i64>, (usize, String)>, Stop> {
        let mut body = Vec::with_capacity(batch.iter().map(|(_, v)| v.len() + 48).sum());
        body.push(b'[');
        for (i, (offset, value)) in batch.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(b"{\"partition\":");
            crate::canonical::writer::string(&mut body, &self.name);
            body.extend_from_slice(b",\"offset\":");
            body.extend_from_slice(offset.to_string().as_bytes());
            body.extend_from_slice(b",\"event\":");
            body.extend_from_slice(value);
            body.push(b'}');
        }
        body.push(b']');
        let body = Arc::new(body);
        loop {
            let (svc, b) = (self.svc.clone(), body.clone());
            let out = blocking(move || {
                let parsed = match parse::deliveries(&b, Framing::Json) {
                    Ok(p) => p,
                    Err(ParseError::Malformed { message, index }) => {
                        return Ok(Err((index.unwrap_or(0), message)))
                    }
                    Err(ParseError::Empty) => return Ok(Ok(Vec::new())),
                };
                let ts: Vec<i64> = parsed.items.iter().map(|d| d.event.timestamp).collect();
                match svc.ingest(parsed.items, Prefer::Minimal) {
                    Ok(_) => Ok(Ok(ts)),
                    Err(ServiceError::BatchRejected(r)) => {
                        Ok(Err((r.index, r.rejection.to_string())))
                    }
                    Err(ServiceError::Rejected(r)) => Ok(Err((0, r.to_string()))),
                    Err(e) => Err(e),
                }
            })
            .await;
            match out {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::warn!(partition = %self.name, error = %e, "ingest failed; retrying");
                    if pause(stop, RETRY).await {
                        return Err(Stop::Shutdown);
                    }
                }
            }
        }
    }

    /// Reports the partition's watermark if the events moved it (or, when
    /// the engine has the partition idle, reactivates it at its watermark).
    async fn report(&mut self, stop: &mut watch::Receiver<bool>) -> Result<(), Stop> {
        let Some(s) = &mut self.strategy else {
            return Ok(());
        };
        let w = match s.due() {
            Some(w) => w,
            None if self.idle => match s.current() {
                Some(w) => w,
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        let (svc, name) = (self.svc.clone(), self.name.clone());
        self.retry(stop, move || {
            svc.advance(&name, w, Prefer::Minimal).map(|_| ())
        })
        .await?;
        self.idle = false;
        if let Some(p) = &self.publisher {
            p.watermark(&self.name, w).await;
        }
        Ok(())
    }

    async fn mark_idle(&mut self, stop: &mut watch::Receiver<bool>) -> Result<(), Stop> {
        let (svc, name) = (self.svc.clone(), self.name.clone());
        self.retry(stop, move || {
            svc.mark_idle(&name, Prefer::Minimal).map(|_| ())
        })
        .await?;
        self.idle = true;
        if let Some(p) = &self.publisher {
            p.idle(&self.name).await;
        }
        Ok(())
    }

    /// Runs `call` until it is applied (storage failures are retried); a
    /// refusal stalls the partition.
    async fn retry(
        &self,
        stop: &mut watch::Receiver<bool>,
        call: impl Fn() -> Result<(), ServiceError> + Send + Sync + 'static,
    ) -> Result<(), Stop> {
        let call = Arc::new(call);
        loop {
            let c = call.clone();
            match blocking(move || c()).await {
                Ok(()) => return Ok(()),
                Err(e @ (ServiceError::Rejected(_) | ServiceError::BatchRejected(_))) => {
                    return Err(Stop::Stalled(e.to_string()))
                }
                Err(e) => {
                    tracing::warn!(partition = %self.name, error = %e, "watermark call failed; retrying");
                    if pause(stop, RETRY).await {
                        return Err(Stop::Shutdown);
                    }
                }
            }
        }
    }
}

/// Sleeps `d` unless `stop` turns true first (then `true`).
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}
