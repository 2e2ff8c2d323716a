//! Counters and histograms, rendered in the Prometheus text format.
//!
//! Plain atomics (no registry crate): the set is small and fixed. Latency is
//! observed by the api around every request; the rest by the write path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::patterns::{OutputKind, PatternStatus};

/// Upper bounds (seconds) of the request latency histogram.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds (bytes) of the checkpoint size histogram.
const SIZE_BUCKETS: &[f64] = &[1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
/// Calls per group commit.
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

#[derive(Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.len() != bounds.len() {
            self.counts = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in bounds.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}\n"));
        }
        out.push_str(&format!(
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}\n",
            self.count
        ));
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        out.push_str(&format!("{name}_sum{braces} {}\n", self.sum));
        out.push_str(&format!("{name}_count{braces} {}\n", self.count));
    }
}

/// The service's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Deliveries in acknowledged ingest calls.
    pub deliveries: AtomicU64,
    /// Acknowledged ingest requests.
    pub ingest_requests: AtomicU64,
    /// Duplicate deliveries (known id, new offset) in acknowledged calls.
    pub duplicates: AtomicU64,
    /// Identical redeliveries (already consumed offset) in acknowledged calls.
    pub redeliveries: AtomicU64,
    /// Late records produced.
    pub late: AtomicU64,
    /// Changes emitted.
    pub changes: AtomicU64,
    /// Pattern events in acknowledged pushes.
    pub pattern_events: AtomicU64,
    /// Pattern output records (matches and timeouts) emitted.
    pub pattern_output: AtomicU64,
    /// Keyed pattern calls answered from their stored answer (retries).
    pub idempotent_replays: AtomicU64,
    /// Calls rejected by the engine.
    pub rejected: AtomicU64,
    /// Storage failures answered with 503.
    pub storage_failures: AtomicU64,
    /// Checkpoints stored.
    pub checkpoints: AtomicU64,
    /// Transactions that stored acknowledged calls (one group commit stores
    /// one or more calls).
    pub commits: AtomicU64,
    /// Size of the last stored checkpoint.
    pub last_checkpoint_bytes: AtomicU64,
    /// Microseconds the last window checkpoint took to store (flush its
    /// new history with its chunk hashes, the digest, link).
    pub last_checkpoint_store_us: AtomicU64,
    /// Merges of the id index's runs done (each on the merge thread).
    pub id_index_merges: AtomicU64,
    checkpoint_sizes: Mutex<Histogram>,
    /// Calls stored per commit (one fsync each): how far group commit
    /// amortizes.
    commit_groups: Mutex<Histogram>,
    /// By route template, then status (looked up without allocating).
    latency: Mutex<BTreeMap<String, BTreeMap<u16, Histogram>>>,
    /// Pattern output records emitted, per pattern.
    pattern_output_by: Mutex<BTreeMap<String, PatternCounts>>,
    /// Sections rendered after the service's own (the Kafka source's).
    sections: Sections,
}

/// Output records one pattern emitted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PatternCounts {
    matches: u64,
    timeouts: u64,
}

/// A part of the exposition that lives outside the service.
pub type Section = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Default)]
struct Sections(Mutex<Vec<Section>>);

impl std::fmt::Debug for Sections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} sections", lock(&self.0).len())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(c: &AtomicU64, by: u64) {
        c.fetch_add(by, Ordering::Relaxed);
    }

    /// Records a stored checkpoint's size.
    pub fn checkpoint_stored(&self, bytes: u64) {
        Self::inc(&self.checkpoints, 1);
        self.last_checkpoint_bytes.store(bytes, Ordering::Relaxed);
        lock(&self.checkpoint_sizes).observe(SIZE_BUCKETS, bytes as f64);
    }

    /// Records a group commit of `calls` calls.
    pub fn commit_group(&self, calls: usize) {
        Self::inc(&self.commits, 1);
        lock(&self.commit_groups).observe(GROUP_BUCKETS, calls as f64);
    }

    /// Adds a section rendered at the end of every exposition.
    pub fn add_section(&self, section: Section) {
        lock(&self.sections.0).push(section);
    }

    /// Counts one advance's committed output records by pattern and type
    /// (one lock per advance; nothing when it emitted nothing).
    pub fn pattern_output_committed(&self, records: &[crate::patterns::Output]) {
        if records.is_empty() {
            return;
        }
        let mut by = lock(&self.pattern_output_by);
        for r in records {
            if !by.contains_key(&*r.pattern) {
                by.insert(r.pattern.to_string(), PatternCounts::default());
            }
            if let Some(c) = by.get_mut(&*r.pattern) {
                match r.kind {
                    OutputKind::Match => c.matches += 1,
                    OutputKind::Timeout => c.timeouts += 1,
                }
            }
        }
    }

    /// The per-pattern families: `streamforge_pattern_matches_total` and
    /// `streamforge_pattern_timeouts_total` (label `pattern`; every pattern
    /// of `status`, 0 until it emits, and every pattern that emitted since
    /// the process started), and from the engine's `status` the gauges
    /// `streamforge_pattern_active_branches`, `streamforge_pattern_waits`,
    /// `streamforge_pattern_keys` (label `pattern`) and
    /// `streamforge_pattern_buffered_events`.
    pub fn render_patterns(&self, status: &crate::patterns::Status) -> String {
        let mut counts = lock(&self.pattern_output_by).clone();
        for (name, _) in &status.patterns {
            counts.entry(name.clone()).or_default();
        }
        let mut out = String::new();
        family(
            &mut out,
            "streamforge_pattern_matches_total",
            "Pattern output records of type match emitted, per pattern (since the process started).",
            "counter",
            counts.iter().map(|(p, c)| (p.as_str(), c.matches)),
        );
        family(
            &mut out,
            "streamforge_pattern_timeouts_total",
            "Pattern output records of type timeout emitted, per pattern (since the process started).",
            "counter",
            counts.iter().map(|(p, c)| (p.as_str(), c.timeouts)),
        );
        let engine = |f: fn(&PatternStatus) -> u64| {
            status.patterns.iter().map(move |(p, s)| (p.as_str(), f(s)))
        };
        family(
            &mut out,
            "streamforge_pattern_active_branches",
            "Live branches (partial matches) of each pattern.",
            "gauge",
            engine(|s| s.branches),
        );
        family(
            &mut out,
            "streamforge_pattern_waits",
            "Absence waits of each pattern.",
            "gauge",
            engine(|s| s.waits),
        );
        family(
            &mut out,
            "streamforge_pattern_keys",
            "Keys holding at least one branch or wait, per pattern.",
            "gauge",
            engine(|s| s.keys),
        );
        let name = "streamforge_pattern_buffered_events";
        out.push_str(&format!(
            "# HELP {name} Pattern events pushed and not yet processed by an advance.\n# TYPE {name} gauge\n{name} {}\n",
            status.buffered
        ));
        out
    }

    /// Records one request's latency under its route template and status.
    pub fn observe_request(&self, route: &str, status: u16, seconds: f64) {
        let mut by_route = lock(&self.latency);
        let statuses = match by_route.get_mut(route) {
            Some(s) => s,
            None => by_route.entry(route.to_string()).or_default(),
        };
        statuses
            .entry(status)
            .or_default()
            .observe(LATENCY_BUCKETS, seconds);
    }

    /// The Prometheus text exposition, with the current state's `gauges`.
    // Over 120 lines: one block per metric family, in exposition order.
    pub fn render(&self, gauges: &[Gauge]) -> String {
        let mut out = String::new();
        let counters: [(&str, &str, &AtomicU64); 16] = [
            (
                "streamforge_deliveries_total",
                "Deliveries in acknowledged ingest calls (duplicates and redeliveries included).",
                &self.deliveries,
            ),
            (
                "streamforge_ingest_requests_total",
                "Acknowledged POST /events calls.",
                &self.ingest_requests,
            ),
            (
                "streamforge_duplicates_total",
                "Duplicate deliveries (a known event id on a new offset): consumed, counted once.",
                &self.duplicates,
            ),
            (
                "streamforge_redeliveries_total",
                "Identical redeliveries at an already consumed offset (no effect).",
                &self.redeliveries,
            ),
            (
                "streamforge_late_events_total",
                "Late records produced.",
                &self.late,
            ),
            (
                "streamforge_changes_total",
                "Changes emitted.",
                &self.changes,
            ),
            (
                "streamforge_pattern_events_total",
                "Pattern events in acknowledged pushes.",
                &self.pattern_events,
            ),
            (
                "streamforge_pattern_output_total",
                "Pattern output records (matches and timeouts) emitted.",
                &self.pattern_output,
            ),
            (
                "streamforge_idempotent_replays_total",
                "Pattern calls with an Idempotency-Key answered from the stored answer of an \
                 earlier call (retries; nothing applied).",
                &self.idempotent_replays,
            ),
            (
                "streamforge_rejected_total",
                "Calls rejected by the engine (state unchanged).",
                &self.rejected,
            ),
            (
                "streamforge_storage_failures_total",
                "Calls answered 503 because storage failed.",
                &self.storage_failures,
            ),
            (
                "streamforge_commits_total",
                "SQLite transactions that stored acknowledged calls (a group commit stores several).",
                &self.commits,
            ),
            (
                "streamforge_checkpoints_total",
                "Checkpoints stored.",
                &self.checkpoints,
            ),
            (
                "streamforge_last_checkpoint_bytes",
                "Size of the last stored checkpoint envelope.",
                &self.last_checkpoint_bytes,
            ),
            (
                "streamforge_last_checkpoint_store_microseconds",
                "Time the last window engine checkpoint took to store: its new history flushed (with its chunk hashes), the live state, the digest, the link.",
                &self.last_checkpoint_store_us,
            ),
            (
                "streamforge_id_index_merges_total",
                "Rounds of merges of the id index's runs finished (on their own thread).",
                &self.id_index_merges,
            ),
        ];
        for (name, help, c) in counters {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
                c.load(Ordering::Relaxed)
            ));
        }
        for g in gauges {
            out.push_str(&format!(
                "# HELP {} {}\n# TYPE {} gauge\n",
                g.name, g.help, g.name
            ));
            for (labels, v) in &g.samples {
                match labels {
                    None => {
                        out.push_str(&format!("{} {v}\n", g.name));
                    }
                    Some((label, value)) => {
                        out.push_str(&format!(
                            "{}{{{label}=\"{}\"}} {v}\n",
                            g.name,
                            escape_label(value)
                        ));
                    }
                }
            }
        }
        let name = "streamforge_checkpoint_size_bytes";
        out.push_str(&format!(
            "# HELP {name} Checkpoint envelope sizes.\n# TYPE {name} histogram\n"
        ));
        lock(&self.checkpoint_sizes).render(&mut out, name, "", SIZE_BUCKETS);
        let name = "streamforge_commit_group_calls";
        out.push_str(&format!(
            "# HELP {name} Acknowledged calls stored per commit (one transaction and one fsync each).\n# TYPE {name} histogram\n"
        ));
        lock(&self.commit_groups).render(&mut out, name, "", GROUP_BUCKETS);
        let name = "streamforge_request_duration_seconds";
        out.push_str(&format!(
            "# HELP {name} HTTP request latency by route and status.\n# TYPE {name} histogram\n"
        ));
        for (route, statuses) in lock(&self.latency).iter() {
            for (status, h) in statuses {
                let labels = format!("route=\"{}\",status=\"{status}\"", escape_label(route));
                h.render(&mut out, name, &labels, LATENCY_BUCKETS);
            }
        }
        for section in lock(&self.sections.0).iter() {
            out.push_str(&section());
        }
        out
    }
}

/// A gauge of the current state: one sample, or one per label value
/// (none when it has no value now, such as a watermark not yet reached).
#[derive(Debug, Clone)]
pub struct Gauge {
    /// Metric name.
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// `(label name and value, sample)`.
    pub samples: Vec<(Option<(&'static str, String)>, f64)>,
}

impl Gauge {
    /// A gauge with one unlabelled sample.
    pub fn one(name: &'static str, help: &'static str, v: f64) -> Gauge {
        Gauge {
            name,
            help,
            samples: vec![(None, v)],
        }
    }
}

/// One family with the label `pattern`: its `# HELP`, `# TYPE` and a
/// sample per pattern.
fn family<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    samples: impl IntoIterator<Item = (&'a str, u64)>,
) {
    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    for (pattern, v) in samples {
        out.push_str(&format!(
            "{name}{{pattern=\"{}\"}} {v}\n",
            escape_label(pattern)
        ));
    }
}

/// A label value with `\\`, `"` and newlines escaped (the text format).
pub(super) fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patterns::{PatternStatus, Status};

    #[test]
    fn per_pattern_families_escape_their_label_values() {
        let m = Metrics::default();
        let weird = "a\"b\\c\nd";
        let status = Status {
            watermark: 5,
            buffered: 3,
            next_ordinal: 9,
            sequence: 0,
            patterns: vec![
                (
                    weird.to_string(),
                    PatternStatus {
                        keys: 1,
                        branches: 2,
                        waits: 0,
                    },
                ),
                ("z".to_string(), PatternStatus::default()),
            ],
        };
        let text = m.render_patterns(&status);
        for line in [
            "# TYPE streamforge_pattern_matches_total counter",
            r#"streamforge_pattern_matches_total{pattern="a\"b\\c\nd"} 0"#,
            r#"streamforge_pattern_timeouts_total{pattern="z"} 0"#,
            "# TYPE streamforge_pattern_active_branches gauge",
            r#"streamforge_pattern_active_branches{pattern="a\"b\\c\nd"} 2"#,
            r#"streamforge_pattern_keys{pattern="a\"b\\c\nd"} 1"#,
            r#"streamforge_pattern_waits{pattern="z"} 0"#,
            "streamforge_pattern_buffered_events 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        // Every sample is one line: the newline is escaped.
        assert_eq!(text.lines().filter(|l| l.contains("a\\\"b")).count(), 5);
    }
}
