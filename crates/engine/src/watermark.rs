//! Watermarks: per-partition progress and idleness, and the global watermark.
//!
//! docs/semantics.md, "Watermarks": `advance(p, w)` sets p's progress to `max(previous, w)`
//! (the first report sets it to `w`) and makes p non-idle; `mark_idle(p)`
//! makes p idle (idempotent). After either, if at least one partition is
//! non-idle and every non-idle partition has reported, the candidate is the
//! minimum progress over the non-idle partitions and the global watermark
//! becomes `max(current, candidate)` (or the candidate if there was none).
//! Otherwise it keeps its value. So it never decreases, holds with no active
//! partitions, and a reactivated partition with old progress never rewinds it.
//! Events never move watermarks.

/// The watermark state of all partitions (indexed like the pipeline's sorted
/// partitions) plus the largest unique timestamp (stream time's other input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkState {
    /// Reported progress per partition.
    pub progress: Vec<Option<i64>>,
    /// Idle flag per partition.
    pub idle: Vec<bool>,
    /// The global watermark.
    pub global: Option<i64>,
    /// Largest timestamp of any unique event so far (late ones included).
    pub max_timestamp: Option<i64>,
}

impl WatermarkState {
    /// Nothing reported, nobody idle.
    pub fn new(partitions: usize) -> WatermarkState {
        WatermarkState {
            progress: vec![None; partitions],
            idle: vec![false; partitions],
            global: None,
            max_timestamp: None,
        }
    }

    /// `advance(partition, w)`; returns the new global watermark.
    pub fn advance(&mut self, partition: usize, w: i64) -> Option<i64> {
        let p = &mut self.progress[partition];
        *p = Some(p.map_or(w, |prev| prev.max(w)));
        self.idle[partition] = false;
        self.recompute()
    }

    /// `mark_idle(partition)`; returns the new global watermark.
    pub fn mark_idle(&mut self, partition: usize) -> Option<i64> {
        self.idle[partition] = true;
        self.recompute()
    }

    /// The candidate of the watermark rule: the minimum progress over non-idle
    /// partitions when there is one and all of them have reported.
    pub fn candidate(&self) -> Option<i64> {
        let mut min: Option<i64> = None;
        for (progress, idle) in self.progress.iter().zip(&self.idle) {
            if *idle {
                continue;
            }
            let p = (*progress)?;
            min = Some(min.map_or(p, |m| m.min(p)));
        }
        min
    }

    fn recompute(&mut self) -> Option<i64> {
        if let Some(c) = self.candidate() {
            self.global = Some(self.global.map_or(c, |g| g.max(c)));
        }
        self.global
    }

    /// Stream time for an event at `timestamp` that has just been counted in
    /// `max_timestamp`: the maximum of the global watermark and the largest
    /// unique timestamp.
    pub fn stream_time(&self) -> i64 {
        match (self.global, self.max_timestamp) {
            (Some(w), Some(t)) => w.max(t),
            (Some(w), None) => w,
            (None, Some(t)) => t,
            (None, None) => 0,
        }
    }

    /// Records a unique event's timestamp.
    pub fn observe(&mut self, timestamp: i64) {
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |t| t.max(timestamp)));
    }

    /// Lateness: a unique event is late iff a global watermark W exists
    /// and `timestamp + lateness < W` (equality is accepted). Returns the
    /// `W` it is late against, so a late record always has its watermark.
    pub fn late_at(&self, timestamp: i64, lateness: i64) -> Option<i64> {
        self.global
            .filter(|&w| (timestamp as i128) + (lateness as i128) < w as i128)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_watermark_waits_for_every_active_partition() {
        let mut c = WatermarkState::new(2);
        assert_eq!(c.advance(0, 10), None);
        assert_eq!(c.advance(1, 5), Some(5));
        assert_eq!(c.advance(1, 3), Some(5), "progress is the max of reports");
        assert_eq!(c.progress[1], Some(5));
    }

    #[test]
    fn idle_partitions_are_skipped_and_reactivation_never_rewinds() {
        let mut c = WatermarkState::new(2);
        c.advance(0, 100);
        assert_eq!(c.mark_idle(1), Some(100));
        assert_eq!(c.mark_idle(0), Some(100), "all idle: holds");
        assert_eq!(c.advance(1, 7), Some(100), "reactivated with old progress");
        assert_eq!(c.advance(0, 200), Some(100));
        assert_eq!(c.advance(1, 150), Some(150));
    }

    #[test]
    fn lateness_boundary_is_accepted() {
        let mut c = WatermarkState::new(1);
        c.advance(0, 10);
        assert_eq!(c.late_at(7, 3), None);
        assert_eq!(c.late_at(6, 3), Some(10));
        c.advance(0, i64::MAX);
        assert_eq!(c.late_at(i64::MAX - 1, 1), None);
        assert_eq!(c.late_at(i64::MIN, i64::MAX), Some(i64::MAX));
    }
}
