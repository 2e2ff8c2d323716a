//! `serve --kafka`: consume a Kafka-protocol topic (Kafka, Redpanda,
//! WarpStream, tansu...) through the same write path as `POST /events`.
//!
//! The model is Flink's KafkaSource without its coordinator: topic
//! partition `k` is pipeline partition `p{k}`; an instance `I/N` consumes
//! the partitions `k` with `k mod N == I` (a pure function, no consumer
//! groups, no rebalancing); a record's offset is the delivery's offset, so
//! the contract's redelivery and gap rules hold, and the offsets live in
//! this service's own database (its command log and checkpoints), not in
//! the broker. Watermarks: bounded out-of-orderness per consumed partition
//! and idleness after a quiet time (`crate::service::strategy`, `partition`); the
//! instances exchange them through a watermark topic (`watermarks`), so
//! every instance's global watermark is the minimum over every partition.
//! docs/cluster.md is the user's description.

mod partition;
mod produce;
mod watermarks;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rskafka::client::partition::UnknownTopicHandling;
use rskafka::client::{Client, ClientBuilder};
use rskafka::BackoffConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::service::{Service, ServiceError};

pub use crate::service::strategy::BoundedOutOfOrderness;
pub use produce::{Outgoing, Producer};

/// This instance's share of the topic: partitions `k` with `k mod count ==
/// index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    /// `I`.
    pub index: u32,
    /// `N`.
    pub count: u32,
}

impl Instance {
    /// Parses `I/N` (`0 <= I < N`).
    pub fn parse(s: &str) -> Result<Instance, String> {
        let bad = || format!("--instance must be I/N with 0 <= I < N (such as 0/3), got {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Instance { index, count })
    }

    /// Whether topic partition `k` is this instance's.
    pub fn owns(&self, k: i32) -> bool {
        k >= 0 && (k as u32) % self.count == self.index
    }
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The topic partition of an event key among `count`: FNV-1a (64-bit) of
/// the key's UTF-8 bytes, modulo `count`. Stable across versions and
/// machines, and simple to write in any producer (docs/cluster.md).
pub fn partition_of(key: &str, count: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(count.max(1))) as u32
}

/// The source's settings (`serve --kafka ... --topic ...`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Bootstrap brokers.
    pub brokers: Vec<String>,
    /// The consumed topic.
    pub topic: String,
    /// This instance's share.
    pub instance: Instance,
    /// Bounded out-of-orderness, if watermarks come from the events.
    pub max_out_of_orderness: Option<i64>,
    /// Idleness after this long without records.
    pub idle_after: Option<Duration>,
}

impl Options {
    /// The watermark topic of `topic`.
    pub fn watermark_topic(&self) -> String {
        format!("{}-watermarks", self.topic)
    }
}

/// What `/metrics` shows of the consumed partitions.
#[derive(Debug, Default)]
pub struct SourceState {
    partitions: Mutex<BTreeMap<String, PartitionState>>,
}

#[derive(Debug, Default, Clone)]
struct PartitionState {
    /// Records in the topic partition not consumed yet.
    lag: i64,
    /// Why it stopped consuming, at which offset.
    stalled: Option<(i64, String)>,
}

impl SourceState {
    fn with(&self, name: &str, f: impl FnOnce(&mut PartitionState)) {
        let mut g = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        f(g.entry(name.to_string()).or_default());
    }

    fn set_lag(&self, name: &str, lag: i64) {
        self.with(name, |p| p.lag = lag.max(0));
    }

    fn set_stalled(&self, name: &str, offset: i64, why: String) {
        self.with(name, |p| p.stalled = Some((offset, why)));
    }

    /// `streamforge_kafka_lag` and `streamforge_kafka_stalled` per
    /// consumed partition, in the Prometheus text format.
    pub fn render(&self) -> String {
        let g = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str(
            "# HELP streamforge_kafka_lag Records in the consumed topic partition not consumed yet.\n\
             # TYPE streamforge_kafka_lag gauge\n",
        );
        for (name, p) in g.iter() {
            out.push_str(&format!(
                "streamforge_kafka_lag{{partition=\"{name}\"}} {}\n",
                p.lag
            ));
        }
        out.push_str(
            "# HELP streamforge_kafka_stalled 1 when the partition stopped at a record the contract refuses (see the log).\n\
             # TYPE streamforge_kafka_stalled gauge\n",
        );
        for (name, p) in g.iter() {
            out.push_str(&format!(
                "streamforge_kafka_stalled{{partition=\"{name}\"}} {}\n",
                u8::from(p.stalled.is_some())
            ));
        }
        out
    }
}

/// A running source: its tasks and their stop signal.
pub struct Source {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Lag and stalls, for `/metrics`.
    pub state: Arc<SourceState>,
    /// Writes `POST /events` to the topic.
    pub producer: Arc<Producer>,
}

/// How long the source tries to reach the brokers at a start.
const CONNECT_FOR: Duration = Duration::from_secs(60);

impl Source {
    /// Connects, checks the topic against the pipeline (creating both
    /// topics when missing), applies the watermark topic so far, and starts
    /// consuming this instance's partitions from the engine's offsets.
    // Over 120 lines: the start-up checks of the topic against the pipeline, in order.
    pub async fn start(svc: Arc<Service>, opts: Options) -> Result<Source, String> {
        if opts.max_out_of_orderness.is_some_and(|b| b < 0) {
            return Err("--max-out-of-orderness must not be negative".into());
        }
        let client = Arc::new(connect(&opts.brokers).await?);
        let names: Vec<String> = svc.pipeline().partitions().to_vec();
        let count = names.len() as i32;
        let expected: Vec<String> = (0..count).map(|k| format!("p{k}")).collect();
        let mut sorted = names.clone();
        sorted.sort_by_key(|n| n.trim_start_matches('p').parse::<i64>().unwrap_or(i64::MAX));
        if sorted != expected {
            return Err(format!(
                "with --kafka the pipeline's partitions must be p0..p{} (one per topic partition), \
                 got {names:?}",
                count - 1
            ));
        }
        let topic_partitions = ensure_topic(&client, &opts.topic, count).await?;
        if topic_partitions != count {
            return Err(format!(
                "topic {:?} has {topic_partitions} partitions, the pipeline {count} \
                 (p0..p{}): they must be equal",
                opts.topic,
                count - 1
            ));
        }
        let wm_topic = opts.watermark_topic();
        ensure_topic(&client, &wm_topic, 1).await?;
        let wm_client = Arc::new(
            client
                .partition_client(wm_topic.clone(), 0, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| format!("topic {wm_topic:?}: {e}"))?,
        );
        let owned: Vec<String> = (0..count)
            .filter(|k| opts.instance.owns(*k))
            .map(|k| format!("p{k}"))
            .collect();
        let mut reader = watermarks::Reader {
            svc: svc.clone(),
            client: wm_client.clone(),
            owned: owned.clone(),
            topic: wm_topic.clone(),
            next: 0,
            epoch: 0,
        };
        reader.catch_up().await?;
        let publisher = (opts.instance.count > 1).then(|| watermarks::Publisher {
            client: wm_client.clone(),
            instance: opts.instance,
        });
        let s = svc.clone();
        let (epoch, status) = blocking(move || {
            let epoch = s.heads().epoch;
            s.status().map(|st| (epoch, st))
        })
        .await
        .map_err(|e| format!("reading the state: {e}"))?;
        let mut producing = Vec::new();
        for k in 0..count {
            producing.push(Arc::new(
                client
                    .partition_client(opts.topic.clone(), k, UnknownTopicHandling::Retry)
                    .await
                    .map_err(|e| format!("topic {:?} partition {k}: {e}", opts.topic))?,
            ));
        }
        let producer = Arc::new(Producer::new(opts.topic.clone(), producing));
        let (stop, stop_rx) = watch::channel(false);
        let state = Arc::new(SourceState::default());
        let mut tasks = Vec::new();
        for k in (0..count).filter(|k| opts.instance.owns(*k)) {
            let name = format!("p{k}");
            let Some(p) = status.partitions.iter().find(|p| p.name == name) else {
                return Err(format!("partition {name} is not in the state"));
            };
            // Republished at every start: a kill between applying and
            // publishing a watermark must not hold the others back.
            if let (Some(publisher), Some(w)) = (&publisher, p.progress) {
                if p.idle {
                    publisher.idle(&name).await;
                } else {
                    publisher.watermark(&name, w).await;
                }
            }
            let client = client
                .partition_client(opts.topic.clone(), k, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| format!("topic {:?} partition {k}: {e}", opts.topic))?;
            state.set_lag(&name, 0);
            let task = partition::PartitionTask {
                svc: svc.clone(),
                client,
                name: name.clone(),
                next: p.offset + 1,
                strategy: opts
                    .max_out_of_orderness
                    .map(|b| BoundedOutOfOrderness::new(b, p.progress)),
                idle_after: opts.idle_after,
                idle: p.idle,
                publisher: publisher.clone(),
                state: state.clone(),
                epoch,
                bound: opts.max_out_of_orderness,
            };
            tracing::info!(partition = %name, from = p.offset + 1, "consuming");
            tasks.push(tokio::spawn(task.run(stop_rx.clone())));
        }
        tasks.push(tokio::spawn(reader.run(stop_rx)));
        tracing::info!(
            topic = %opts.topic,
            instance = %opts.instance,
            partitions = ?owned,
            "consuming the topic"
        );
        Ok(Source {
            stop,
            tasks,
            state,
            producer,
        })
    }

    /// Stops consuming; returns once every task has ended (nothing is
    /// applied after this).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            if let Err(e) = t.await {
                tracing::warn!(error = %e, "a source task failed");
            }
        }
    }
}

/// Connects to the brokers, retrying for [`CONNECT_FOR`].
async fn connect(brokers: &[String]) -> Result<Client, String> {
    let deadline = tokio::time::Instant::now() + CONNECT_FOR;
    loop {
        let built = ClientBuilder::new(brokers.to_vec())
            .client_id("streamforge")
            .backoff_config(BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
                deadline: None,
            })
            .build()
            .await;
        match built {
            Ok(c) => return Ok(c),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("cannot reach the brokers {brokers:?}: {e}"))
            }
            Err(e) => {
                tracing::warn!(error = %e, "the brokers are not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The number of partitions of `topic`, created with `partitions` when
/// missing.
async fn ensure_topic(client: &Client, topic: &str, partitions: i32) -> Result<i32, String> {
    for attempt in 0..20 {
        let topics = client
            .list_topics()
            .await
            .map_err(|e| format!("listing the topics: {e}"))?;
        if let Some(t) = topics.iter().find(|t| t.name == topic) {
            return Ok(t.partitions.len() as i32);
        }
        if attempt == 0 {
            let controller = client
                .controller_client()
                .map_err(|e| format!("creating topic {topic:?}: {e}"))?;
            match controller.create_topic(topic, partitions, 1, 10_000).await {
                Ok(()) => tracing::info!(%topic, partitions, "created the topic"),
                // Another instance may have created it meanwhile.
                Err(e) => tracing::warn!(%topic, error = %e, "creating the topic"),
            }
        } else {
            // The metadata may show a new topic a moment later.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Err(format!("topic {topic:?} could not be created"))
}

/// Runs a service call on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(ServiceError::Unavailable(format!("the call failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_parse_and_own_their_share() {
        let i = Instance::parse("1/3").unwrap();
        assert_eq!(i.to_string(), "1/3");
        let owned: Vec<i32> = (0..7).filter(|k| i.owns(*k)).collect();
        assert_eq!(owned, [1, 4]);
        for bad in ["3/3", "0/0", "1", "a/2", "-1/2", "1/-2", ""] {
            assert!(Instance::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_hash_to_partitions_with_fnv1a() {
        // FNV-1a 64 test vectors: "" and "a"
        assert_eq!(
            partition_of("", u32::MAX),
            (0xcbf2_9ce4_8422_2325u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            partition_of("a", u32::MAX),
            (0xaf63_dc4c_8601_ec8cu64 % u64::from(u32::MAX)) as u32
        );
        let mut seen = [0u32; 4];
        for k in 0..1000 {
            seen[partition_of(&format!("a{k}"), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 150), "{seen:?}");
    }
}
