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
use crate::service::{Reply, Service, ServiceError};

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
    pub next: i64,
}

impl Reader {
    /// Applies everything up to the topic's end as of now (before the
    /// partitions are consumed: a restart starts from the others' current
    /// watermarks).
    pub async fn catch_up(&mut self) -> Result<(), String> {
        loop {
            let (records, high) = self
                .client
                .fetch_records(self.next, 1..(1 << 20), 0)
                .await
                .map_err(|e| format!("reading the watermark topic: {e}"))?;
            self.apply(records).await;
            if self.next >= high {
                return Ok(());
            }
        }
    }

    /// Follows the topic until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            let fetched = tokio::select! {
                r = self.client.fetch_records(self.next, 1..(1 << 20), 200) => r,
                _ = stop.changed() => return,
            };
            match fetched {
                Ok((records, _)) => self.apply(records).await,
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

    async fn apply(&mut self, records: Vec<rskafka::record::RecordAndOffset>) {
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
            let svc = self.svc.clone();
            let applied = blocking(move || match (mark.watermark, mark.idle) {
                (Some(w), None | Some(false)) => {
                    svc.advance(&mark.partition, w, Reply::Minimal).map(|_| ())
                }
                (None, Some(true)) => svc.mark_idle(&mark.partition, Reply::Minimal).map(|_| ()),
                _ => Err(ServiceError::Invalid(
                    "a watermark record holds either a watermark or \"idle\":true".into(),
                )),
            })
            .await;
            if let Err(e) = applied {
                tracing::warn!(offset = r.offset, error = %e, "a watermark record was not applied");
            }
        }
    }
}
