//! The response bodies of API.md as the client reads them.
//!
//! Window bounds and sums are `i128` (they may leave the i64 range and the
//! server writes them exactly), so these are typed structs, never
//! `serde_json::Value`. Field order is API.md's, so re-serializing a change or
//! a late record (`--json`) gives back the server's bytes. Unknown fields are
//! tolerated: a newer server may add some.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::Event;

/// `POST /watermarks` body.
#[derive(Debug, Serialize)]
pub struct Advance<'a> {
    /// Partition name.
    pub partition: &'a str,
    /// Reported progress.
    pub watermark: i64,
}

/// A result row: `{window, key, start, end, count, sum, min, max}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Window name.
    pub window: String,
    /// Key.
    pub key: String,
    /// Inclusive start.
    pub start: i128,
    /// Exclusive end.
    pub end: i128,
    /// Number of unique events.
    pub count: u64,
    /// Exact sum.
    pub sum: i128,
    /// Smallest value.
    pub min: i64,
    /// Largest value.
    pub max: i64,
}

/// `upsert` or `retract`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A row is emitted (new or corrected).
    Upsert,
    /// A previously emitted row is withdrawn.
    Retract,
}

/// One changelog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Global sequence.
    pub seq: u64,
    /// Upsert or retract.
    pub op: Op,
    /// The row.
    pub result: Row,
}

/// One record of the late side output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Late {
    /// Position in the late output, from 1.
    pub seq: u64,
    /// The late event.
    pub event: Event,
    /// The watermark it was late against.
    pub watermark: i64,
}

/// A bucket address (finalized lists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    /// Window name.
    pub window: String,
    /// Key.
    pub key: String,
    /// Inclusive start.
    pub start: i128,
    /// Exclusive end.
    pub end: i128,
}

/// `GET /changes` page.
#[derive(Debug, Deserialize)]
pub struct ChangesPage {
    /// The changes after `after`.
    pub changes: Vec<Change>,
    /// The `after` of the next page.
    pub next: u64,
    /// The latest sequence.
    pub head: u64,
}

/// `GET /late` page.
#[derive(Debug, Deserialize)]
pub struct LatePage {
    /// The late records after `after`.
    pub late: Vec<Late>,
    /// The `after` of the next page.
    pub next: u64,
    /// The latest late sequence.
    pub head: u64,
}

/// `POST /events` answer.
#[derive(Debug, Deserialize)]
pub struct Ingested {
    /// Changes the batch produced.
    pub changes: Vec<Change>,
    /// Late records the batch produced.
    pub late: Vec<Late>,
}

/// `POST /watermarks` and `/partitions/{p}/idle` answer.
#[derive(Debug, Deserialize)]
pub struct Ticked {
    /// Changes the call produced.
    pub changes: Vec<Change>,
    /// The global watermark after the call.
    pub watermark: Option<i64>,
    /// Addresses finalized by the call.
    pub finalized: Vec<Address>,
}

/// `GET /results` answer.
#[derive(Debug, Deserialize)]
pub struct Results {
    /// Visible rows in address order.
    pub results: Vec<Row>,
    /// The global watermark.
    pub watermark: Option<i64>,
}

/// One partition in `GET /status`.
#[derive(Debug, Deserialize)]
pub struct PartitionState {
    /// Consumed offset (-1 before the first delivery).
    pub offset: i64,
    /// Reported progress.
    pub progress: Option<i64>,
    /// Idle flag.
    pub idle: bool,
}

/// `GET /status` answer.
#[derive(Debug, Deserialize)]
pub struct Status {
    /// The global watermark.
    pub watermark: Option<i64>,
    /// Latest change sequence.
    pub sequence: u64,
    /// Number of late records.
    pub late: u64,
    /// Live buckets.
    pub live_buckets: u64,
    /// Partitions by name.
    pub partitions: BTreeMap<String, PartitionState>,
}

/// `POST /checkpoints` answer and the entries of `GET /checkpoints`.
#[derive(Debug, Deserialize)]
pub struct Checkpoint {
    /// Checkpoint id.
    pub id: u64,
    /// Change sequence it was taken at.
    pub sequence: u64,
    /// Hex SHA-256 of the envelope bytes.
    pub sha256: String,
    /// Envelope length.
    pub bytes: u64,
    /// When it was stored (list only).
    #[serde(default)]
    pub created_at: Option<String>,
}

/// `GET /checkpoints` answer.
#[derive(Debug, Deserialize)]
pub struct CheckpointList {
    /// Newest first.
    pub checkpoints: Vec<Checkpoint>,
}

/// `POST /restore` answer.
#[derive(Debug, Deserialize)]
pub struct Restored {
    /// The restored change sequence.
    pub sequence: u64,
    /// The restored number of late records.
    pub late: u64,
    /// The restored global watermark.
    pub watermark: Option<i64>,
}

/// An RFC 9457 problem (API.md "Conventions").
#[derive(Debug, Clone, Deserialize)]
pub struct Problem {
    /// HTTP status.
    pub status: u16,
    /// Stable machine-readable code.
    #[serde(default)]
    pub code: String,
    /// Short title.
    #[serde(default)]
    pub title: String,
    /// Human explanation.
    #[serde(default)]
    pub detail: String,
    /// First failing delivery of a batch.
    #[serde(default)]
    pub index: Option<u64>,
}
