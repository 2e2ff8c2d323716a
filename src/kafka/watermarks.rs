//! The watermark topic (`{topic}-watermarks`, one partition): how the
//! instances that share a topic learn each other's partition watermarks,
//! and where producers may write explicit ones.
//!
//! A record's key is the pipeline partition, its value one JSON object:
//! `{"partition":"p3","watermark":1200}` or `{"partition":"p3","idle":true}`;
//! an instance adds `"from":"I/N"`. Every instance applies every record to
//! its own engine as `advance` / `mark_idle` of that partition, except the
//! records instances wrote about partitions it consumes itself (it is their
//! source: its own events already moved them). So every instance's global
//! watermark is the minimum over all the topic's partitions, idle ones
//! excluded, as in one instance (Flink's `StatusWatermarkValve`).

use std::collections::BTreeMap;
use std::sync::Arc;

use rskafka::client::partition::{Compression, PartitionClient};
use rskafka::record::Record;
use serde::Deserialize;
use tokio::sync::watch;

use super::{blocking, Instance};
use crate::service::{Prefer, Service, ServiceError};

/// A watermark record's value.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mark {
    partition: String,
    #[serde(default)]
    watermark: Option<i64>,
    #[serde(default)]
    idle: Option<bool>,
    #[serde(default)]
    from: Option<String>,
}

/// Writes this instance's watermarks and idleness to the watermark topic.
#[derive(Clone)]
pub(super) struct Publisher {
    pub client: Arc<PartitionClient>,
    pub instance: Instance,
}

impl Publisher {
    async fn publish(&self, partition: &str, value: serde_json::Value) {
        let record = Record {
            key: Some(partition.as_bytes().to_vec()),
            value: Some(value.to_string().into_bytes()),
            headers: BTreeMap::new(),
            timestamp: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        };
        // The client retries broker failures itself; what comes back is
        // logged (the next watermark of the partition publishes again).
        if let Err(e) = self
            .client
            .produce(vec![record], Compression::NoCompression)
            .await
        {
            tracing::warn!(%partition, error = %e, "publishing a watermark failed");
        }
    }

    /// Publishes partition `partition`'s watermark `w`.
    pub async fn watermark(&self, partition: &str, w: i64) {
        let from = self.instance.to_string();
        self.publish(
            partition,
            serde_json::json!({"partition": partition, "watermark": w, "from": from}),
        )
        .await
    }

    /// Publishes that partition `partition` is idle.
    pub async fn idle(&self, partition: &str) {
        let from = self.instance.to_string();
        self.publish(
            partition,
            serde_json::json!({"partition": partition, "idle": true, "from": from}),
        )
        .await
    }
}

/// Reads the watermark topic and applies it to this instance's engine.
pub(super) struct Reader {
    pub svc: Arc<Service>,
    pub client: Arc<PartitionClient>,
    /// The partitions this instance consumes itself.
    pub owned: Vec<String>,
    /// The watermark topic's name (the key of its stored position).
    pub topic: String,
    pub next: i64,
    /// The window engine's restore epoch the records up to `next` were
    /// applied in.
    pub epoch: u64,
}

impl Reader {
    /// Applies everything up to the topic's end as of now (before the
    /// partitions are consumed: a restart starts from the others' current
    /// watermarks), from the position stored at the last read.
    pub async fn catch_up(&mut self) -> Result<(), String> {
        let (svc, topic) = (self.svc.clone(), self.topic.clone());
        let (epoch, stored) = blocking(move || {
            let epoch = svc.heads().epoch;
            svc.sink_read(|r| r.source_position(&topic))
                .map(|p| (epoch, p))
        })
        .await
        .map_err(|e| format!("reading the watermark topic's position: {e}"))?;
        self.next = stored.unwrap_or(0);
        self.epoch = epoch;
        loop {
            let fetched = self.client.fetch_records(self.next, 1..(1 << 20), 0).await;
            let (records, high) = match fetched {
                Err(e) if out_of_range(&e) => {
                    self.next = self.earliest().await?;
                    continue;
                }
                r => r.map_err(|e| format!("reading the watermark topic: {e}"))?,
            };
            self.apply(records).await;
            if self.next >= high {
                return Ok(());
            }
        }
    }

    /// Follows the topic until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            // A restore may have put the others' partitions back: read the
            // topic again from its start (its records are idempotent).
            if self.svc.heads().epoch != self.epoch {
                self.epoch = self.svc.heads().epoch;
                self.next = 0;
            }
            let fetched = tokio::select! {
                r = self.client.fetch_records(self.next, 1..(1 << 20), 200) => r,
                _ = stop.changed() => return,
            };
            match fetched {
                Ok((records, _)) => self.apply(records).await,
                // A retention policy deleted what was not read yet (only
                // the latest record of a partition matters): read on from
                // the oldest one kept.
                Err(e) if out_of_range(&e) => match self.earliest().await {
                    Ok(o) => self.next = o,
                    Err(e) => tracing::warn!(error = %e, "reading the watermark topic failed"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "reading the watermark topic failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }

    /// The oldest offset the watermark topic still holds.
    async fn earliest(&self) -> Result<i64, String> {
        self.client
            .get_offset(rskafka::client::partition::OffsetAt::Earliest)
            .await
            .map_err(|e| format!("reading the watermark topic's oldest offset: {e}"))
    }

    /// Applies `records` in order: each run of consecutive watermarks as
    /// one `advance_all` call (one command, one commit), an idle mark as a
    /// `mark_idle` call.
    async fn apply(&mut self, records: Vec<rskafka::record::RecordAndOffset>) {
        if records.is_empty() {
            return;
        }
        let mut run: Vec<(String, i64)> = Vec::new();
        for r in records {
            if r.offset < self.next {
                continue;
            }
            self.next = r.offset + 1;
            let value = r.record.value.unwrap_or_default();
            let mark: Mark = match serde_json::from_slice(&value) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(offset = r.offset, error = %e, "skipping a malformed watermark record");
                    continue;
                }
            };
            if mark.from.is_some() && self.owned.contains(&mark.partition) {
                continue;
            }
            match (mark.watermark, mark.idle) {
                (Some(w), None | Some(false)) => run.push((mark.partition, w)),
                (None, Some(true)) => {
                    self.advance_all(std::mem::take(&mut run)).await;
                    let svc = self.svc.clone();
                    let p = mark.partition;
                    if let Err(e) =
                        blocking(move || svc.mark_idle(&p, Prefer::Minimal).map(|_| ())).await
                    {
                        tracing::warn!(offset = r.offset, error = %e, "an idle record was not applied");
                    }
                }
                _ => tracing::warn!(
                    offset = r.offset,
                    "skipping a watermark record that holds neither a watermark nor \"idle\":true"
                ),
            }
        }
        self.advance_all(run).await;
        self.store_position().await;
    }

    /// Stores `next`, so that a restart reads on from here (a failure is
    /// logged: the restart then reads more again, which is harmless).
    async fn store_position(&self) {
        let (svc, topic, next) = (self.svc.clone(), self.topic.clone(), self.next);
        if let Err(e) =
            blocking(move || svc.sink_write(|w| w.set_source_position(&topic, next))).await
        {
            tracing::warn!(error = %e, "storing the watermark topic's position failed");
        }
    }

    /// Applies `advances` as one call; when the call is refused (an unknown
    /// partition), the others one by one.
    async fn advance_all(&self, advances: Vec<(String, i64)>) {
        if advances.is_empty() {
            return;
        }
        let svc = self.svc.clone();
        let all = blocking(move || match svc.advance_all(&advances, Prefer::Minimal) {
            Ok(_) => Ok(Vec::new()),
            Err(ServiceError::BatchRejected(_) | ServiceError::Rejected(_)) => Ok(advances),
            Err(e) => Err(e),
        })
        .await;
        match all {
            Ok(one_by_one) => {
                for (p, w) in one_by_one {
                    let svc = self.svc.clone();
                    let q = p.clone();
                    if let Err(e) =
                        blocking(move || svc.advance(&q, w, Prefer::Minimal).map(|_| ())).await
                    {
                        tracing::warn!(partition = %p, error = %e, "a watermark record was not applied");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "watermark records were not applied"),
        }
    }
}

/// Whether `e` says the offset asked for is not in the topic partition.
fn out_of_range(e: &rskafka::client::error::Error) -> bool {
    matches!(
        e,
        rskafka::client::error::Error::ServerError {
            protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
            ..
        }
    )
}
