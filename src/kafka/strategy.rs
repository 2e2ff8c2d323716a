//! Watermarks from a consumed partition's events: bounded out-of-orderness
//! (Flink's `forBoundedOutOfOrderness`): the largest timestamp seen minus
//! the bound. Pure: time comes in as event timestamps, and idleness is the
//! caller's (it has the clock).

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
        let w = self.largest?.saturating_sub(self.bound);
        if self.reported.is_some_and(|r| r >= w) {
            return None;
        }
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
}
