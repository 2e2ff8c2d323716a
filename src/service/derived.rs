//! Derived watermarks of HTTP partitions (a pipeline's `"watermarks"`,
//! docs/webhooks.md): which partitions derive, and when each last had an
//! event, for idleness.
//!
//! The advance an event calls for travels with its ingest command (see
//! `cmd/ingest.rs`); the idle mark is an ordinary logged `idle` command,
//! issued by the server's idleness ticker when [`Service::idle_due`] names
//! the partition. Only the wall clock of the last event lives here, in
//! memory: after a restart, every partition counts its quiet time from the
//! start.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::DeliveryRef;

use super::strategy::Strategy;
use super::Service;

/// The strategies and the partitions' last events.
#[derive(Debug)]
pub(crate) struct Derived {
    strategies: BTreeMap<String, Strategy>,
    /// Milliseconds since `start` of each deriving partition's last event.
    last: BTreeMap<String, AtomicU64>,
    start: Instant,
}

impl Derived {
    pub fn new(strategies: &BTreeMap<String, Strategy>) -> Derived {
        Derived {
            strategies: strategies.clone(),
            last: strategies
                .keys()
                .map(|p| (p.clone(), AtomicU64::new(0)))
                .collect(),
            #[allow(clippy::disallowed_methods)] // idleness is wall clock
            start: Instant::now(),
        }
    }

    /// The partitions among `deliveries`' that derive, with their bound, in
    /// name order.
    pub fn derive_for(&self, deliveries: &[DeliveryRef<'_>]) -> Vec<(String, Option<i64>)> {
        if self.strategies.is_empty() {
            return Vec::new();
        }
        self.strategies
            .iter()
            .filter(|(p, _)| deliveries.iter().any(|d| d.partition == p.as_str()))
            .map(|(p, s)| (p.clone(), s.max_out_of_orderness))
            .collect()
    }

    /// Notes that `partition` had an acknowledged event or advance now
    /// (its quiet time starts over).
    pub fn touch(&self, partition: &str) {
        if let Some(t) = self.last.get(partition) {
            t.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

impl Service {
    /// The deriving partitions quiet for longer than their `idle_after`,
    /// and not idle yet: the server's ticker marks each idle (a logged
    /// `idle` command).
    pub fn idle_due(&self) -> Vec<String> {
        let d = &self.setup.derived;
        let now = d.now_ms();
        let quiet: Vec<&String> = d
            .strategies
            .iter()
            .filter(|(p, s)| {
                s.idle_after_ms.is_some_and(|after| {
                    let last = d.last.get(*p).map_or(0, |t| t.load(Ordering::Relaxed));
                    now.saturating_sub(last) >= after
                })
            })
            .map(|(p, _)| p)
            .collect();
        if quiet.is_empty() {
            return Vec::new();
        }
        // The engine's flags as applied (not waiting for the commits in
        // flight, as a read would): this only decides whether to issue an
        // `idle` call, which is idempotent and goes down the write path.
        let at = &mut super::order::Held::entry();
        let g = self.lock(at);
        quiet
            .into_iter()
            .filter(|p| {
                g.engines
                    .window
                    .partition_clock(p)
                    .is_some_and(|(_, idle)| !idle)
            })
            .cloned()
            .collect()
    }

    /// How often the idleness ticker should look: a tenth of the shortest
    /// `idle_after` (10 ms to 1 s); None without idleness timeouts.
    pub fn idle_tick(&self) -> Option<Duration> {
        let shortest = self
            .setup
            .derived
            .strategies
            .values()
            .filter_map(|s| s.idle_after_ms)
            .min()?;
        Some(Duration::from_millis((shortest / 10).clamp(10, 1000)))
    }
}
