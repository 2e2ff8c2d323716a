//! `POST /events` on an instance started with `--kafka`: the events go to
//! the topic (the partition of each event's key, [`super::partition_of`]),
//! and the call is answered once the broker acknowledged them; the
//! instances then consume them like any other record.

use std::collections::BTreeMap;
use std::sync::Arc;

use rskafka::client::partition::{Compression, PartitionClient};
use rskafka::record::Record;

use super::partition_of;

/// Writes events to the consumed topic.
pub struct Producer {
    topic: String,
    clients: Vec<Arc<PartitionClient>>,
}

/// One event to produce: its key and its value (the event object's JSON).
pub struct Outgoing {
    /// The event's key (the record's key, and what picks the partition).
    pub key: String,
    /// The record's value.
    pub value: Vec<u8>,
}

impl Producer {
    pub(super) fn new(topic: String, clients: Vec<Arc<PartitionClient>>) -> Producer {
        Producer { topic, clients }
    }

    /// The consumed topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces `events` (each partition's share as one batch, the
    /// partitions at once) and returns where each went, `(partition,
    /// offset)` in the order given; `Err` when the broker refused or could
    /// not be reached (then some partitions' shares may have been written:
    /// a retry writes them again, as new records).
    pub async fn produce(&self, events: Vec<Outgoing>) -> Result<Vec<(u32, i64)>, String> {
        let count = self.clients.len() as u32;
        // The record's own time (the broker's CreateTime); the service
        // reads the event's timestamp from the value.
        #[allow(clippy::disallowed_methods)]
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let now = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let mut by_partition: BTreeMap<u32, Vec<(usize, Record)>> = BTreeMap::new();
        for (i, e) in events.into_iter().enumerate() {
            let p = partition_of(&e.key, count);
            by_partition.entry(p).or_default().push((
                i,
                Record {
                    key: Some(e.key.into_bytes()),
                    value: Some(e.value),
                    headers: BTreeMap::new(),
                    timestamp: now,
                },
            ));
        }
        let total: usize = by_partition.values().map(Vec::len).sum();
        let sends = by_partition.into_iter().map(|(p, items)| {
            let client = self.clients[p as usize].clone();
            async move {
                let (idx, records): (Vec<usize>, Vec<Record>) = items.into_iter().unzip();
                let r = client
                    .produce(records, Compression::NoCompression)
                    .await
                    .map_err(|e| format!("partition {p}: {e}"))?;
                Ok::<_, String>((p, idx, r))
            }
        });
        let mut out = vec![(0u32, 0i64); total];
        for sent in futures_util::future::join_all(sends).await {
            let (p, idx, offsets) = sent?;
            for (i, o) in idx.into_iter().zip(offsets) {
                out[i] = (p, o);
            }
        }
        Ok(out)
    }
}
