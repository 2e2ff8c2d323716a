//! The late side output.
//!
//! docs/semantics.md, "Lateness": a unique event is late iff a global watermark W exists and
//! `timestamp + lateness < W`. Exactly one record `(event, W)` is appended per
//! late unique event (a redelivery of its id is a duplicate, never late
//! again); records are numbered from 1 and kept for the processor's lifetime.

use super::sources::EventNo;

/// The late records, `seq = index + 1`.
#[derive(Debug, Clone, Default)]
pub struct LateOutput {
    records: Vec<(EventNo, i64)>,
}

impl LateOutput {
    /// Appends a record; returns its `seq`.
    pub fn push(&mut self, event: EventNo, watermark: i64) -> u64 {
        self.records.push((event, watermark));
        self.records.len() as u64
    }

    /// Number of records (= the last `seq`).
    pub fn len(&self) -> u64 {
        self.records.len() as u64
    }

    /// All records in `seq` order.
    pub fn records(&self) -> &[(EventNo, i64)] {
        &self.records
    }
}
