//! The response bodies of docs/api.md as the client reads them.
//!
//! Window bounds and sums are `i128` (they may leave the i64 range and the
//! server writes them exactly), so these are typed structs, never
//! `serde_json::Value`. Field order is docs/api.md's, so re-serializing a change or
//! a late record (`--json`) gives back the server's bytes. Unknown fields are
//! tolerated: a newer server may add some.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// `POST /watermarks` body.
#[derive(Debug, Serialize)]
pub struct Advance<'a> {
    /// Partition name.
    pub partition: &'a str,
    /// Reported progress.
    pub watermark: i64,
}

/// The engine's output records read back from the wire (their serde shapes
/// are those of docs/api.md): a result row, `upsert`/`retract`, a change, a late record
/// and a bucket address.
pub use crate::engine::{Address, Change, ChangeOp as Op, LateRecord as Late, WindowResult as Row};

/// `GET /changes` page.
#[derive(Debug, Deserialize)]
pub struct ChangesPage {
    /// The changes after `after`.
    pub changes: Vec<Change>,
    /// The `after` of the next page.
    pub next: u64,
    /// The latest sequence.
    pub head: u64,
    /// The changelog's epoch (restores so far).
    #[serde(default)]
    pub epoch: u64,
    /// Set when the page was asked for in an older epoch: it starts after
    /// this sequence, and everything held beyond it is void.
    #[serde(default)]
    pub rewound_to: Option<u64>,
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
    /// The late output's epoch (restores so far).
    #[serde(default)]
    pub epoch: u64,
    /// As in [`ChangesPage`].
    #[serde(default)]
    pub rewound_to: Option<u64>,
}

/// `POST /events` answer.
#[derive(Debug, Deserialize)]
pub struct Ingested {
    /// Changes the batch produced (records, or their count).
    pub changes: Counted,
    /// Late records the batch produced (records, or their count).
    pub late: Counted,
}

/// The `changes` of a `POST /watermarks` or idle answer, for counting.
#[derive(Debug, Deserialize)]
pub struct TickCount {
    /// Changes the call produced (records, or their count).
    pub changes: Counted,
}

/// A list of records, or (in a `Prefer: return=minimal` answer) their
/// count; read as the number of records either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted(pub u64);

impl<'de> Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Counted;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of records or a count")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Counted, E> {
                Ok(Counted(n))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Counted, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Counted(n))
            }
        }
        d.deserialize_any(V)
    }
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
    /// The envelope's digest (its `digest` field; a pattern envelope's
    /// `sha256`).
    pub digest: String,
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

/// `POST /restore` and `POST /patterns/restore` answer.
#[derive(Debug, Deserialize)]
pub struct Restored {
    /// The restored change (or pattern output) sequence.
    pub sequence: u64,
    /// The restored number of late records (the window engine only).
    #[serde(default)]
    pub late: Option<u64>,
    /// The restored watermark (the window engine's global watermark may be
    /// `null`; the pattern engine's is -1 before its first advance).
    pub watermark: Option<i64>,
}

/// An RFC 9457 problem (docs/api.md, "Conventions").
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

/// `POST /patterns/advance` body.
#[derive(Debug, Serialize)]
pub struct PatternAdvance {
    /// The new pattern watermark.
    pub watermark: i64,
}

/// `POST /patterns/events` answer.
#[derive(Debug, Deserialize)]
pub struct PatternPushed {
    /// Ordinal of the batch's first event.
    pub first: u64,
    /// Ordinal of the batch's last event.
    pub last: u64,
    /// Events buffered after the push, in all.
    pub buffered: u64,
}

/// One pattern output record (docs/patterns.md, "Output") as the readable
/// line needs it; `--json` prints the server's own text instead.
#[derive(Debug, Deserialize)]
pub struct PatternRecord {
    /// Position in the output stream.
    pub seq: u64,
    /// `match` or `timeout`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The pattern's name.
    pub pattern: String,
    /// The key.
    pub key: String,
    /// Time of the first capture.
    pub start_time: i64,
    /// The completing event's time, or the deadline (absence, timeout).
    pub end_time: i64,
    /// Every stage in pattern order, with its captured events.
    pub captures: Captures,
}

/// A record's `captures`: stage name and captured events, in the pattern's
/// stage order (the order of the JSON object, which a map would lose).
#[derive(Debug, Default)]
pub struct Captures(pub Vec<(String, Vec<Captured>)>);

/// A captured event (its other fields are not needed for the line).
#[derive(Debug, Deserialize)]
pub struct Captured {
    /// Its ordinal.
    pub ordinal: u64,
}

impl<'de> Deserialize<'de> for Captures {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Captures, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Captures;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of stage names to captured events")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Captures, A::Error> {
                let mut out = Vec::new();
                while let Some((stage, events)) = m.next_entry::<String, Vec<Captured>>()? {
                    out.push((stage, events));
                }
                Ok(Captures(out))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// `POST /patterns/advance` and `/patterns/finish` answer.
#[derive(Debug, Deserialize)]
pub struct PatternTicked {
    /// The output records of the call.
    pub output: Vec<PatternRecord>,
    /// The pattern watermark after the call.
    pub watermark: i64,
    /// Buffered events the call processed.
    pub processed: u64,
}

/// `GET /patterns/output` page; records kept as the server wrote them.
#[derive(Debug, Deserialize)]
pub struct PatternOutputPage {
    /// The records after `after`.
    pub output: Vec<Box<RawValue>>,
    /// The `after` of the next page.
    pub next: u64,
    /// The latest sequence.
    pub head: u64,
    /// The pattern output's epoch (pattern restores so far).
    #[serde(default)]
    pub epoch: u64,
    /// As in [`ChangesPage`].
    #[serde(default)]
    pub rewound_to: Option<u64>,
}

/// One pattern in `GET /patterns/status`.
#[derive(Debug, Deserialize)]
pub struct PatternLive {
    /// Keys holding at least one branch or wait.
    pub keys: u64,
    /// Live branches.
    pub branches: u64,
    /// Absence waits.
    pub waits: u64,
}

/// `GET /patterns/status` answer.
#[derive(Debug, Deserialize)]
pub struct PatternStatus {
    /// The pattern watermark (-1 before the first advance).
    pub watermark: i64,
    /// Buffered events.
    pub buffered: u64,
    /// The ordinal of the next pushed event.
    pub next_ordinal: u64,
    /// The last output seq.
    pub sequence: u64,
    /// Pattern restores so far.
    #[serde(default)]
    pub epoch: u64,
    /// Per pattern, by name.
    pub patterns: BTreeMap<String, PatternLive>,
}
