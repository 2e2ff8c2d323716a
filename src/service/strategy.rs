//! Watermarks from a partition's events, the one implementation of both
//! event sources: bounded out-of-orderness (Flink's
//! `forBoundedOutOfOrderness`): the largest timestamp seen minus the bound,
//! and idleness after a quiet time (`withIdleness`). The Kafka source
//! (`--max-out-of-orderness`, `--idle-after`) and the HTTP partitions of a
//! pipeline's `"watermarks"` (docs/webhooks.md) both derive with
//! [`derive`]. Pure: time comes in as event timestamps, and idleness is the
//! caller's (it has the clock).

/// A partition's watermark strategy (a pipeline's `"watermarks"` entry, or
/// the Kafka source's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Strategy {
    /// The watermark is the largest timestamp seen minus this (in the
    /// events' time unit); None: events do not move it.
    pub max_out_of_orderness: Option<i64>,
    /// Marked idle after this many milliseconds of wall clock without an
    /// event; its next event makes it active again.
    pub idle_after_ms: Option<u64>,
}

/// The advance a partition's events call for, given the largest timestamp
/// among them, the partition's reported progress and whether it is idle:
/// `largest - bound` when that is ahead of the progress (or the partition
/// has none yet); the progress itself when the partition is idle (an event
/// makes it active again without moving it); None otherwise. Without a
/// bound only the reactivation is left.
pub fn derive(bound: Option<i64>, progress: Option<i64>, idle: bool, largest: i64) -> Option<i64> {
    let candidate = bound.map(|b| largest.saturating_sub(b));
    match (candidate, progress) {
        (Some(w), None) => Some(w),
        (Some(w), Some(p)) if w > p => Some(w),
        (_, Some(p)) if idle => Some(p),
        _ => None,
    }
}

/// One consumed partition's watermark generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundedOutOfOrderness {
    /// The bound, in the events' time unit.
    bound: i64,
    /// The largest timestamp seen, if any.
    largest: Option<i64>,
    /// The watermark last reported for the partition (ours or anyone's).
    reported: Option<i64>,
}

impl BoundedOutOfOrderness {
    /// A generator for a partition whose reported progress is `reported`
    /// (from the engine's state at a restart: its watermark only moves
    /// forward from there).
    pub fn new(bound: i64, reported: Option<i64>) -> Self {
        BoundedOutOfOrderness {
            bound,
            largest: None,
            reported,
        }
    }

    /// Notes an event's timestamp.
    pub fn observe(&mut self, timestamp: i64) {
        self.largest = Some(self.largest.map_or(timestamp, |l| l.max(timestamp)));
    }

    /// The watermark last reported.
    pub fn current(&self) -> Option<i64> {
        self.reported
    }

    /// The watermark to report now, if it is ahead of the last one
    /// reported; it then counts as reported.
    pub fn due(&mut self) -> Option<i64> {
        let w = derive(Some(self.bound), self.reported, false, self.largest?)?;
        self.reported = Some(w);
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_timestamp_minus_the_bound_and_only_forward() {
        let mut g = BoundedOutOfOrderness::new(100, None);
        assert_eq!(g.due(), None, "nothing seen yet");
        g.observe(1_000);
        g.observe(400);
        assert_eq!(g.due(), Some(900));
        assert_eq!(g.due(), None, "already reported");
        g.observe(950);
        assert_eq!(g.due(), None, "an older event moves nothing");
        g.observe(1_500);
        assert_eq!(g.due(), Some(1_400));
        // a restart resumes from the reported progress
        let mut g = BoundedOutOfOrderness::new(100, Some(1_400));
        g.observe(1_200);
        assert_eq!(g.due(), None);
        g.observe(1_600);
        assert_eq!(g.due(), Some(1_500));
        // no overflow at the ends of the range
        let mut g = BoundedOutOfOrderness::new(i64::MAX, None);
        g.observe(i64::MIN);
        assert_eq!(g.due(), Some(i64::MIN));
    }

    #[test]
    fn derive_moves_forward_and_reactivates_an_idle_partition() {
        assert_eq!(derive(Some(10), None, false, 100), Some(90));
        assert_eq!(derive(Some(10), Some(90), false, 100), None);
        assert_eq!(derive(Some(10), Some(90), false, 101), Some(91));
        assert_eq!(
            derive(Some(10), Some(90), true, 50),
            Some(90),
            "idle: active again, not moved"
        );
        assert_eq!(derive(None, Some(7), true, 50), Some(7));
        assert_eq!(derive(None, Some(7), false, 50), None);
        assert_eq!(
            derive(None, None, true, 50),
            None,
            "nothing to reactivate at"
        );
    }
}
